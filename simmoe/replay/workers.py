"""Groups of replay tasks over one trace, in forked worker processes when asked.

``replay_all``, ``replay_all_batched`` and ``replay_all_prefetch`` group their
configurations by plan (each plan is computed once per group) and hand the
groups to :func:`run_groups`.  Forked workers inherit the trace and profiles
through :data:`SHARED` instead of receiving a pickled copy; where ``fork`` is
unavailable, or one worker is asked for, the groups run one after another in
this process.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

SHARED: dict = {}  # the trace and profiles of the running call, inherited by forked workers


def shared() -> tuple:
    """``(trace, profiles)`` of the running :func:`run_groups` call (in this process or a forked worker)."""
    return SHARED["trace"], SHARED["profiles"]


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
    out: list = [None] * len(items)
    SHARED.update(trace=trace, profiles=profiles)
    try:
        import multiprocessing as mp

        if workers > 1 and len(order) > 1 and "fork" in mp.get_all_start_methods():
            from concurrent.futures import ProcessPoolExecutor, as_completed

            with ProcessPoolExecutor(max_workers=min(workers, len(order)),
                                     mp_context=mp.get_context("fork")) as pool:
                futures = {pool.submit(run_group, [items[i] for i in ix], None): ix for ix in order}
                for f in as_completed(futures):
                    results = f.result()
                    for i, res in zip(futures[f], results, strict=True):
                        out[i] = res
                    if on_done is not None:
                        on_done(results)
        else:
            for ix in order:
                results = run_group([items[i] for i in ix], progress)
                for i, res in zip(ix, results, strict=True):
                    out[i] = res
                if on_done is not None:
                    on_done(results)
    finally:
        SHARED.clear()
    return out
