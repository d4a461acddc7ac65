"""`simmoe tune --backend ray`: the search's evaluations as Ray tasks, as the sweep runs on Ray.

Each batch of configurations the search asks for is split, as the process
backend splits it (:func:`simmoe.tune.evaluate.evaluator`), into groups that
share one synthetic trace, and each group is one Ray task running
:func:`simmoe.tune.evaluate.evaluate_group`: the same code, so with the same
seed both backends give the same rows, and the search the same answer.  A
Ray worker keeps the traces it generated (the evaluate module's cache) for
the later tasks it runs.  ``address=None`` starts a local Ray runtime with
``num_cpus`` workers and shuts it down at the end; an address joins a
cluster whose nodes have simmoe installed.  Waits are short, so SIGINT and
SIGTERM are acted on within half a second (the search then returns the best
found so far, as with processes).
"""

from __future__ import annotations

from collections.abc import Callable

from simmoe.errors import SimmoeError
from simmoe.tune.evaluate import Setup, evaluate_group
from simmoe.tune.space import TuneConfig


class RayEvaluator:
    """``evaluate(configs, requests) -> rows`` (in order) on Ray; :meth:`close` stops a runtime it started."""

    def __init__(self, setup: Setup, *, address: str | None = None, num_cpus: int | None = None):
        from simmoe.replay.ray_runtime import require_ray, start_ray

        self.ray = ray = require_ray("--backend ray")
        self.setup = setup
        self.started = start_ray(ray, address, num_cpus)
        self.remote = ray.remote(num_cpus=1, max_retries=0)(evaluate_group)
        self.setup_ref = ray.put(setup)

    def __call__(self, cfgs: list[TuneConfig], requests: int) -> list[dict]:
        groups: dict[tuple, list[int]] = {}
        for i, c in enumerate(cfgs):
            groups.setdefault(c.trace_key(), []).append(i)
        pending = {self.remote.remote(self.setup_ref, [cfgs[i] for i in ix], requests): ix for ix in groups.values()}
        out: list[dict] = [{} for _ in cfgs]
        while pending:
            ready, _ = self.ray.wait(list(pending), num_returns=1, timeout=0.5)
            for ref in ready:
                ix = pending.pop(ref)
                try:
                    rows = self.ray.get(ref)
                except Exception as exc:    # the task raised, or its worker died: the tuning run stops
                    cause = getattr(exc, "cause", None)
                    if isinstance(cause, SimmoeError):
                        raise cause from None
                    raise SimmoeError(f"a Ray task evaluating {len(ix)} configuration(s) failed: "
                                      f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") \
                        from None
                for i, row in zip(ix, rows, strict=True):
                    out[i] = row
        return out

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()
            self.started = False


def ray_evaluator(setup: Setup, *, address: str | None = None,
                  num_cpus: int | None = None) -> Callable[[list[TuneConfig], int], list[dict]]:
    """A :class:`RayEvaluator` (the search calls it like the process backend's evaluator)."""
    return RayEvaluator(setup, address=address, num_cpus=num_cpus)
