"""Groups of replay tasks over one trace, in forked worker processes when asked.

``replay_all``, ``replay_all_batched`` and ``replay_all_prefetch`` group their
configurations by plan (each plan is computed once per group) and hand the
groups to :func:`run_groups`.  Forked workers inherit the trace and profiles
through :data:`SHARED` instead of receiving a pickled copy; where ``fork`` is
unavailable, or one worker is asked for, the groups run one after another in
this process.

Every process pool of the toolkit (these groups, ``simmoe sweep``'s tasks)
runs through :func:`run_pooled`, which ends its workers with the command,
whatever ends it:

- Workers ignore SIGINT and SIGTERM: a terminal's Ctrl-C (or a SIGTERM to the
  process group) reaches them too, and a worker's own exception would print a
  traceback or leave the pool's queues locked.  The calling process acts on
  the signal (:mod:`simmoe.interrupt`): it kills its workers at once instead
  of waiting for their running tasks in the pool's shutdown.
- On Linux each worker asks the kernel to kill it when its parent ends
  (``prctl(PR_SET_PDEATHSIG)``), so none outlives a parent killed outright.
- A worker that dies (a plugin's ``os._exit``, the out-of-memory killer) is
  :class:`WorkerDied`, naming its exit code and the call it was running.

The pool's waits run with signals deferred and checked between them: raised
inside the pool's bookkeeping, an interruption could leave one of its locks
held, and its thread, which the interpreter waits for at exit, blocked on it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from functools import partial

from simmoe.errors import SimmoeError

SHARED: dict = {}  # the trace and profiles of the running call, inherited by forked workers
_STARTED = None    # in a worker: the shared array where each call records the pid that runs it
_PR_SET_PDEATHSIG = 1


class WorkerDied(SimmoeError):
    """A worker process ended without returning (killed, or ``os._exit`` in a plugin).

    ``index``: the call it was running (None: unknown); ``exitcode``: its
    exit status (negative: the signal that killed it).
    """

    def __init__(self, index: int | None, exitcode: int | None):
        if exitcode is not None and exitcode < 0:
            code = f"exit code {exitcode}, {signal.Signals(-exitcode).name}"
        else:
            code = f"exit code {exitcode}"
        super().__init__(f"a worker process died ({code})")
        self.index, self.exitcode = index, exitcode


def shared() -> tuple:
    """``(trace, profiles)`` of the running :func:`run_groups` call (in this process or a forked worker)."""
    return SHARED["trace"], SHARED["profiles"]


def fork_available() -> bool:
    import multiprocessing as mp

    return "fork" in mp.get_all_start_methods()


def _worker_init(parent: int, started) -> None:
    """In each worker: signals are the parent's to act on; die with the parent; record calls in ``started``."""
    global _STARTED
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    _die_with_parent(parent)
    _STARTED = started


def _die_with_parent(parent: int) -> None:
    """Linux: the kernel sends this process SIGKILL when the thread that forked it ends (its parent's main)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):   # no libc prctl: the parent's own kill is the only guard
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
    if os.getppid() != parent:                 # the parent ended before the line above
        os._exit(1)


def _tracked(i: int, fn: Callable, *args):
    """Worker side of call ``i``: record who runs it (for :class:`WorkerDied`), then ``fn(*args)``."""
    from simmoe.interrupt import pause_point

    if _STARTED is not None:
        _STARTED[i] = os.getpid()
    pause_point("worker")
    return fn(*args)


@contextlib.contextmanager
def _signals_blocked():
    """SIGINT and SIGTERM held back while workers are forked, so none starts with this process's handlers.

    A signal in that window stays pending and is delivered to this process
    when the block ends; the workers discard theirs (:func:`_worker_init`).
    """
    import threading

    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _abandon(pool) -> None:
    """Kill ``pool``'s workers and let it go without waiting for their tasks (an interruption, a death).

    A worker killed while sending a result leaves the pool's thread reading
    the rest of it, forever: this process holds the pipe's writing end too.
    Closing that end once every worker is gone turns the read into an end of
    file, so the thread ends (the interpreter would wait for it at exit).
    """
    procs = list((getattr(pool, "_processes", None) or {}).values())
    thread = getattr(pool, "_executor_manager_thread", None)
    results = getattr(pool, "_result_queue", None)
    for p in procs:
        with contextlib.suppress(Exception):
            p.kill()
    for p in procs:
        with contextlib.suppress(Exception):
            p.join(1.0)
    with contextlib.suppress(Exception):
        results._writer.close()  # type: ignore[union-attr]
    with contextlib.suppress(Exception):
        pool.shutdown(wait=False, cancel_futures=True)
    if thread is not None:
        thread.join(1.0)


def _finish(pool) -> None:
    """The pool's normal shutdown, its waits short so that a signal is acted on between them."""
    from simmoe.interrupt import checkpoint

    thread = pool._executor_manager_thread
    results = pool._result_queue
    pool.shutdown(wait=False)
    while thread is not None and thread.is_alive():
        thread.join(0.1)
        checkpoint()
    if results is not None:
        results.close()


def _died(futures: dict, procs: dict, started) -> WorkerDied:
    """The :class:`WorkerDied` of a broken pool: the first worker found dead and the call it ran."""
    import time

    deadline = time.monotonic() + 1.0
    dead: dict = {}
    while not dead and time.monotonic() < deadline:   # its exit status is collected by the pool's thread
        dead = {pid: p.exitcode for pid, p in procs.items() if p.exitcode is not None}
        if not dead:
            time.sleep(0.01)
    for f, i in sorted(futures.items(), key=lambda kv: kv[1]):
        if started[i] in dead and not (f.done() and not f.cancelled() and f.exception() is None):
            return WorkerDied(i, dead[started[i]])
    return WorkerDied(None, next(iter(dead.values()), None))


def run_pooled(fn: Callable, calls: Sequence[tuple], workers: int, on_result: Callable, *,
               fork: bool = True) -> None:
    """``fn(*calls[i])`` for every i in ``workers`` processes; ``on_result(i, result, error)`` as each ends.

    ``error`` is the exception a call raised, else None.  Calls are submitted
    in order (put the slow ones first).  A worker that dies raises
    :class:`WorkerDied`.  On ``KeyboardInterrupt`` (SIGINT, or SIGTERM as
    :class:`simmoe.interrupt.Terminated`), :class:`WorkerDied` or any other
    exception raised by ``on_result`` the workers are killed at once and the
    exception goes on.  ``fork``: forked workers (they inherit this process's
    memory); else the platform's default start method.
    """
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    from simmoe.interrupt import acknowledge, deferred

    ctx = mp.get_context("fork") if fork and fork_available() else mp.get_context()
    started = ctx.Array("i", len(calls), lock=False)
    with deferred():
        pool = ProcessPoolExecutor(max_workers=max(1, min(workers, len(calls))), mp_context=ctx,
                                   initializer=_worker_init, initargs=(os.getpid(), started))
        try:
            with _signals_blocked():
                futures = {pool.submit(_tracked, i, fn, *args): i for i, args in enumerate(calls)}
            _collect(futures, dict(pool._processes or {}), started, on_result)
            _finish(pool)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                acknowledge()          # no second signal cuts the cleanup short
            _abandon(pool)
            raise


def _collect(futures: dict, procs: dict, started, on_result: Callable) -> None:
    """Hand each call's outcome to ``on_result`` as it ends; act on a signal between waits."""
    from concurrent.futures import FIRST_COMPLETED, wait
    from concurrent.futures.process import BrokenProcessPool

    from simmoe.interrupt import checkpoint

    pending = set(futures)
    while pending:
        # short waits: a signal delivered to another thread does not wake this one from a lock's wait
        done, pending = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
        checkpoint()
        for f in sorted(done, key=futures.__getitem__):
            try:
                result, error = f.result(), None
            except BrokenProcessPool:
                checkpoint()           # the signal that ended the command comes first
                raise _died(futures, procs, started) from None
            except Exception as exc:   # the call raised (or could not be pickled)
                result, error = None, exc
            on_result(futures[f], result, error)
            checkpoint()


class PackedTimeline(bytes):
    """A replay's timeline pickled in its worker: the pool's result thread receives bytes, not a few million
    Python objects whose unpickling would hold the interpreter (and so a Ctrl-C) for seconds; the main thread
    unpacks one replay's at a time (:func:`_timeline_unpacked`)."""


def _timelines_packed(run_group: Callable, group, progress):
    """``run_group(group, progress)`` in a worker, each result's timeline packed for the trip back."""
    import pickle

    results = run_group(group, progress)
    for res in results:
        if getattr(res, "timeline", None):
            res.timeline = PackedTimeline(pickle.dumps(res.timeline, protocol=pickle.HIGHEST_PROTOCOL))
    return results


def _timeline_unpacked(res):
    import pickle

    from simmoe.interrupt import checkpoint

    if isinstance(getattr(res, "timeline", None), PackedTimeline):
        res.timeline = pickle.loads(res.timeline)
        checkpoint()          # a signal that came while unpacking is acted on now
    return res


def run_groups(order: Sequence[Sequence[int]], items: Sequence, run_group: Callable, *, trace, profiles,
               workers: int = 1, on_done: Callable[[list], None] | None = None,
               progress: Callable[[int], None] | None = None) -> list:
    """``run_group([items[i] for i in group], progress)`` for every group of ``order``; results by index.

    Groups run in the order given (put the slow ones first).  ``on_done`` is
    called with each finished group's results; ``progress`` is passed to
    groups run in this process only (forked workers report through
    ``on_done``).  ``run_group`` must be picklable (a module-level function or
    a ``functools.partial`` of one) and read the trace through :func:`shared`.
    """
    from simmoe.interrupt import checkpoint

    out: list = [None] * len(items)
    SHARED.update(trace=trace, profiles=profiles)

    def place(ix, results):
        for i, res in zip(ix, results, strict=True):
            out[i] = res
        if on_done is not None:
            on_done(results)

    try:
        if workers > 1 and len(order) > 1 and fork_available():
            def collect(j, results, error):
                if error is not None:
                    raise error
                place(order[j], [_timeline_unpacked(res) for res in results])

            try:
                run_pooled(partial(_timelines_packed, run_group), [([items[i] for i in ix], None) for ix in order],
                           workers, collect)
            except WorkerDied as exc:
                what = "" if exc.index is None else " while replaying " + describe([items[i] for i in order[exc.index]])
                raise SimmoeError(f"{exc}{what}") from None
        else:
            for ix in order:
                place(ix, run_group([items[i] for i in ix], progress))
                checkpoint()
    finally:
        SHARED.clear()
    return out


def describe(configs: Sequence) -> str:
    """Replay configurations sharing a plan, briefly: the first one's stages, and how many more."""
    c = getattr(configs[0], "config", configs[0])    # a resolved setting, or the configuration itself
    text = f"selector {c.selector}" if hasattr(c, "selector") else str(c)
    if getattr(c, "cache_active", False):
        text += f", cache {c.cache}"
    if getattr(c, "prefetch", "none") != "none":
        text += f", prefetch {c.prefetch}"
    if getattr(c, "batch", 1) > 1:
        text += f", batch {c.batch}"
    more = len(configs) - 1
    return text + (f" (and {more} more configuration{'s' if more > 1 else ''} of its plan)" if more else "")
