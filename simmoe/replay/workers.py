"""Groups of replay tasks over one trace, in forked worker processes when asked.

``replay_all``, ``replay_all_batched`` and ``replay_all_prefetch`` group their
configurations by plan (each plan is computed once per group) and hand the
groups to :func:`run_groups`.  Forked workers inherit the trace and profiles
through :data:`SHARED` instead of receiving a pickled copy; where ``fork`` is
unavailable, or one worker is asked for, the groups run one after another in
this process.

Every process pool of the toolkit (these groups, ``simmoe sweep``'s tasks)
runs through :func:`run_pooled`, which makes interruption prompt, quiet and
hang-free: workers ignore SIGINT (Ctrl-C reaches the whole process group,
and a worker's own ``KeyboardInterrupt`` would print a traceback or leave the
pool's queues locked), and when the calling process is interrupted it kills
its workers at once instead of waiting in the pool's shutdown for their
running tasks (or forever, for workers whose queue a dying sibling left
locked).
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Sequence

SHARED: dict = {}  # the trace and profiles of the running call, inherited by forked workers


def shared() -> tuple:
    """``(trace, profiles)`` of the running :func:`run_groups` call (in this process or a forked worker)."""
    return SHARED["trace"], SHARED["profiles"]


def fork_available() -> bool:
    import multiprocessing as mp

    return "fork" in mp.get_all_start_methods()


def _worker_init() -> None:
    """In each worker: Ctrl-C is the parent's to handle (it kills the workers)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@contextlib.contextmanager
def _sigint_blocked():
    """SIGINT held back while workers are forked, so none starts with Python's default handler.

    A Ctrl-C in that window stays pending and is delivered to this process
    when the block ends; the workers discard theirs (:func:`_worker_init`).
    """
    import threading

    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _abandon(pool) -> None:
    """Kill ``pool``'s workers and let it go without waiting for their tasks (an interruption)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for p in procs:
        with contextlib.suppress(Exception):
            p.kill()
    for p in procs:
        with contextlib.suppress(Exception):
            p.join(1.0)
    with contextlib.suppress(Exception):
        pool.shutdown(wait=False, cancel_futures=True)


def run_pooled(fn: Callable, calls: Sequence[tuple], workers: int, on_result: Callable, *,
               fork: bool = True) -> None:
    """``fn(*calls[i])`` for every i in ``workers`` processes; ``on_result(i, result, error)`` as each ends.

    ``error`` is the exception a call raised (or the pool's, when a worker
    died), else None.  Calls are submitted in order (put the slow ones
    first).  On ``KeyboardInterrupt`` (or any other exception raised by
    ``on_result``) the workers are killed at once and the exception goes on.
    ``fork``: forked workers (they inherit this process's memory); else the
    platform's default start method.
    """
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    from simmoe.interrupt import acknowledge, checkpoint

    ctx = mp.get_context("fork") if fork and fork_available() else None
    pool = ProcessPoolExecutor(max_workers=max(1, min(workers, len(calls))), mp_context=ctx,
                               initializer=_worker_init)
    try:
        with _sigint_blocked():
            futures = {pool.submit(fn, *args): i for i, args in enumerate(calls)}
        pending = set(futures)
        while pending:
            # short waits: a Ctrl-C delivered to another thread (a progress bar's) would not wake
            # this one from an endless wait, but is acted on as soon as the wait returns
            done, pending = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
            checkpoint()
            for f in sorted(done, key=futures.__getitem__):
                try:
                    result, error = f.result(), None
                except Exception as exc:  # the call raised, or its worker died (BrokenProcessPool)
                    result, error = None, exc
                on_result(futures[f], result, error)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            acknowledge()          # no second Ctrl-C cuts the cleanup short
        _abandon(pool)
        raise
    pool.shutdown(wait=True)


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
                place(order[j], results)

            run_pooled(run_group, [([items[i] for i in ix], None) for ix in order], workers, collect)
        else:
            for ix in order:
                place(ix, run_group([items[i] for i in ix], progress))
                checkpoint()
    finally:
        SHARED.clear()
    return out
