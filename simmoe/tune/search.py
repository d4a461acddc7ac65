"""The optimizer of ``simmoe tune``: successive halving over trace length, seeded by a Latin sample.

The space is mixed and discrete (integers with a validity rule, a
categorical selection).  A Latin-hypercube sample of it (every dimension's
values cut into as many strata as samples, each stratum used once, then the
point moved to the nearest valid one) is replayed on short traces (the first
``rungs[0]`` requests of the workload); the best 1/η go on to the next rung's
longer traces, and so on.  At the first rung the neighbours of the best few
(one step along one dimension; two on a dimension of 8–16 values, four on a
wider one) join the candidates, so the search climbs from
the sample toward the optimum instead of relying on the sample's luck; at the
last rung that climb continues until no neighbour is better, then from the
next best (twice as many each time) while the budget lasts.
Each rung has an equal share of the budget: on a slow machine a rung is cut
(its most promising candidates, first in line, have run) rather than the
last rung never reached.

Everything is reproducible with ``seed`` (the sample and the traces), and
evaluations run in worker processes as the sweep's do
(:func:`simmoe.replay.workers.run_pooled`).  The time budget is checked
between batches of evaluations; Ctrl-C stops the search and returns what it
has found, marked interrupted.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from simmoe.tune.space import Space, TuneConfig

RUNGS = (1, 2, 4)        # requests per rung (times the batch size)
ETA = 3                  # 1/ETA of a rung's candidates go on
CLIMB_TOP = 2            # the neighbours of this many best join each rung


@dataclass
class SearchResult:
    """Every evaluation made (``rows``), the ranking at the last rung reached, and how the search ended."""

    rows: list[dict] = field(default_factory=list)
    ranking: list[tuple[TuneConfig, dict]] = field(default_factory=list)
    rung: int = -1
    requests: int = 0
    evaluations: int = 0
    interrupted: bool = False
    out_of_budget: bool = False
    wall_s: float = 0.0
    rungs: tuple = ()

    @property
    def best(self) -> tuple[TuneConfig, dict] | None:
        return self.ranking[0] if self.ranking else None


def latin_points(space: Space, n: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """``n`` Latin-hypercube points of the space, repaired to valid ones, duplicates dropped (order kept)."""
    cols = []
    for d in space.dims:
        strata = (rng.permutation(n) + rng.random(n)) / n
        cols.append(np.minimum((strata * len(d.values)).astype(int), len(d.values) - 1))
    pts = [space.repair(tuple(int(c[i]) for c in cols)) for i in range(n)]
    return [p for p in dict.fromkeys(pts) if space.make(p) is not None]


def neighbours(space: Space, point: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The valid points one step away along one dimension, also two on a dimension of 8–16 values (SGLang's
    top-k: its predicted tokens/s is rough at the last rung, reports/tune-benchmark.md) and four on a wider one
    (draft tokens)."""
    out = []
    for j, d in enumerate(space.dims):
        steps = (-4, -1, 1, 4) if len(d.values) > 16 else (-2, -1, 1, 2) if len(d.values) >= 8 else (-1, 1)
        for s in steps:
            i = point[j] + s
            if 0 <= i < len(d.values):
                p = point[:j] + (i,) + point[j + 1:]
                if space.make(p) is None and d.name in ("steps", "topk"):
                    p = space.repair(p)   # a new depth or width moves draft tokens into its valid range
                if space.make(p) is not None and p != point:
                    out.append(p)
    return list(dict.fromkeys(out))


def default_initial(space: Space, budget_s: float) -> int:
    """Initial sample size: about one short evaluation per 1.2 s of budget, never more than the space."""
    return max(4, min(space.size(), int(budget_s / 1.2)))


Evaluator = Callable[[list[TuneConfig], int], list[dict]]


class _Search:
    def __init__(self, space: Space, evaluator: Evaluator, *, budget_s: float, rungs, eta: int,
                 progress: Callable[[int, int], None] | None, on_rung: Callable[[int], None] | None,
                 workers: int = 1):
        self.space, self.evaluator, self.budget_s = space, evaluator, float(budget_s)
        self.rungs, self.eta, self.progress, self.on_rung = tuple(rungs), int(eta), progress, on_rung
        self.t0 = time.perf_counter()
        self.scores: dict[tuple[int, int], dict] = {}     # (rung, point) -> row
        self.res = SearchResult(rungs=self.rungs)
        self.planned = 0
        self.batch_groups = max(int(workers), 1)

        self.deadline = float(budget_s)   # seconds from t0 by which the running rung must end

    def over(self) -> bool:
        return time.perf_counter() - self.t0 > self.budget_s

    def run_points(self, rung: int, pts: list[tuple[int, ...]]) -> None:
        """Evaluate the points not yet scored at ``rung``, a few trace groups at a time (budget checked between)."""
        todo = [p for p in dict.fromkeys(pts) if (rung, p) not in self.scores]
        self.planned += len(todo)
        groups: dict[tuple, list[tuple[int, ...]]] = {}
        for p in todo:   # configurations sharing a trace run together: one generation
            groups.setdefault(self.space.make(p).trace_key(), []).append(p)  # type: ignore[union-attr]
        keys = list(groups)     # in the order of the points given: the most promising first
        reqs = self.rungs[rung]
        spent: list[float] = []
        for i in range(0, len(keys), self.batch_groups):
            # stop before a batch that would likely end past the budget (its cost: this rung's mean so far)
            expected = sum(spent) / len(spent) if spent else 0.0
            if time.perf_counter() - self.t0 + expected > self.deadline:
                self.res.out_of_budget = True
                return
            batch = [p for k in keys[i:i + self.batch_groups] for p in groups[k]]
            t = time.perf_counter()
            rows = self.evaluator([self.space.make(p) for p in batch], reqs)  # type: ignore[misc]
            spent.append(time.perf_counter() - t)
            for p, row in zip(batch, rows):
                cfg = self.space.make(p)
                full = {**cfg.params(), "flags": cfg.flags(), "rung": rung, **row}  # type: ignore[union-attr]
                self.scores[(rung, p)] = full
                self.res.rows.append(full)
                self.res.evaluations += 1
                if self.progress:
                    self.progress(self.res.evaluations, self.planned)

    def ranked(self, rung: int) -> list[tuple[int, ...]]:
        pts = [p for (r, p) in self.scores if r == rung]
        return sorted(pts, key=lambda p: (-_score(self.scores[(rung, p)]), p))

    def climb(self, rung: int, top: int) -> bool:
        """Add the neighbours of the ``top`` best at ``rung``; whether any of them beat the best."""
        ranked = self.ranked(rung)
        if not ranked:
            return False
        before = _score(self.scores[(rung, ranked[0])])
        near = [q for p in ranked[:top] for q in neighbours(self.space, p)]
        self.run_points(rung, near)
        after = self.ranked(rung)
        return bool(after) and _score(self.scores[(rung, after[0])]) > before

    def climb_last(self, rung: int) -> None:
        """Climb from the best until no neighbour is better; with budget left, from the next best too.

        A small space (llama.cpp's) reaches a local optimum in seconds: the rest
        of the budget then explores the neighbours of more of the ranking,
        twice as many each time, climbing again from any better point found.
        """
        while not self.over() and self.climb(rung, 1):
            pass
        top = CLIMB_TOP
        while not self.over() and top < len(self.ranked(rung)):
            top *= 2
            if self.climb(rung, top):
                while not self.over() and self.climb(rung, 1):
                    pass

    def search(self, initial: list[tuple[int, ...]]) -> SearchResult:
        cands = list(initial)
        last = len(self.rungs) - 1
        for rung in range(len(self.rungs)):
            # an equal share of the budget per rung (a slow machine cuts each rung, never skips the last)
            self.deadline = self.budget_s * (rung + 1) / len(self.rungs)
            self.run_points(rung, cands)
            if self.ranked(rung):
                self.res.rung, self.res.requests = rung, self.rungs[rung]
            if self.on_rung:
                self.on_rung(rung)
            if self.over() or not self.ranked(rung):
                break
            if rung in (0, last):   # the middle rungs only sift: their climbs would cost longer traces
                self.climb(rung, CLIMB_TOP)
            ranked = self.ranked(rung)
            if rung == last:
                self.climb_last(rung)
                break
            cands = ranked[:max(1, math.ceil(len(ranked) / self.eta))]
        return self.finish()

    def finish(self) -> SearchResult:
        r = self.res
        if r.rung >= 0:
            r.ranking = [(self.space.make(p), self.scores[(r.rung, p)]) for p in self.ranked(r.rung)]  # type: ignore[misc]
        r.wall_s = time.perf_counter() - self.t0
        return r


def _score(row: dict) -> float:
    v = row.get("tokens_per_s", float("nan"))
    return float(v) if v == v else float("-inf")


def successive_halving(space: Space, evaluator: Evaluator, *, budget_s: float, seed: int = 0,
                       initial: int | None = None, rungs=RUNGS, eta: int = ETA,
                       include: tuple[TuneConfig, ...] = (),
                       progress: Callable[[int, int], None] | None = None,
                       on_rung: Callable[[int], None] | None = None, workers: int = 1) -> SearchResult:
    """Search ``space`` for the most tokens/s (module docstring); ``evaluator(configs, requests) -> rows``.

    ``include``: configurations always in the initial sample (the engine's
    default).  On Ctrl-C the result so far comes back with ``interrupted``.
    """
    from simmoe.interrupt import acknowledge

    rng = np.random.default_rng(seed)
    n = initial if initial is not None else default_initial(space, budget_s)
    pts = [p for p in (_point(space, c) for c in include) if p is not None]
    if n >= space.size():     # a space no larger than the sample is enumerated: every point starts
        pts += [tuple(p) for p in rng.permutation(np.array(list(space.points())))]
    else:
        pts += latin_points(space, n, rng)
    s = _Search(space, evaluator, budget_s=budget_s, rungs=rungs, eta=eta, progress=progress, on_rung=on_rung,
                workers=workers)
    try:
        return s.search(list(dict.fromkeys(pts)))
    except KeyboardInterrupt:
        acknowledge()
        s.res.interrupted = True
        return s.finish()


def _point(space: Space, cfg: TuneConfig) -> tuple[int, ...] | None:
    """``cfg``'s point in ``space``, or None when the space (narrowed by the user) does not hold it."""
    try:
        p = space.point_of(cfg)
    except ValueError:
        return None
    return p if space.make(p) == cfg else None
