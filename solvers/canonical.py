"""What every exact search of Eq. 5 shares: canonical numbers, §3.3's tie rule, incumbents.

An incumbent is a list ``[score, R̂, F, nodes]`` (score: R̂/T̂, or R̂ − λT̂ for the
linear objective) holding the canonical numbers of :mod:`solvers.cost` (R̂
summed from 1.0 over ascending ids, T̂ = b[|S|] + β·F).  :func:`beats` is §3.3's
tie rule on them: score, larger R̂, smaller F, fewer nodes, lexicographically
smaller ids; a strict total order, so every exact method returns the same set.

The searches (:mod:`solvers.exact`, :mod:`solvers.lagrangian`) and the MILP
(:mod:`solvers.milp`) import this module; it imports none of them.
"""

from __future__ import annotations

import importlib
import sys
import time

from solvers.cost import CostModel, Selection, canonical_terms
from solvers.errors import InvalidInput
from solvers.pool import Pool

__all__ = ["REL_TOL", "BRANCH_AND_BOUND", "CLOSURE_SEARCH", "MILP", "CPSAT", "UNIFORM",
           "SearchView", "search_view",
           "prefix_view", "canonical", "beats", "prefix_start", "prefix_incumbent",
           "first_incumbent", "selection", "check_lam", "SearchState", "Late", "preload",
           "import_seconds"]

#: relative margin of every pruning test: rounding in a bound never loses a tie
REL_TOL = 1e-9

#: ``Selection.method`` of an exact selection: which search answered
BRANCH_AND_BOUND = "branch-and-bound"      # solvers.exact's credit-bounded search
CLOSURE_SEARCH = "closure-search"          # solvers.lagrangian's closure-bounded search
MILP = "milp"                              # solvers.milp (HiGHS inside Dinkelbach's loop)
CPSAT = "cp-sat"                           # solvers.cpsat.finish_exact (many near-ties)
UNIFORM = "uniform"                        # solvers.uniform (every subtree of a size ties)


class SearchView:
    """Per-pool data of the searches (cached on the pool; independent of the cost):
    children[v] (ascending), the root's children, the credits c_v (``Pool.credits``), and
    the node ids by decreasing p (ties by id) for the starting incumbent.
    """

    __slots__ = ("children", "roots", "credit", "by_p")

    def __init__(self, pool: Pool):
        kids: list[list[int]] = [[] for _ in range(pool.n)]
        roots: list[int] = []
        for v, a in enumerate(pool.parents):
            (roots if a < 0 else kids[a]).append(v)
        self.children = kids
        self.roots = roots
        self.credit = pool.credits
        self.by_p = sorted(range(pool.n), key=pool.probs.__getitem__, reverse=True)


def search_view(pool: Pool) -> SearchView:
    view = pool._cache.get("search")
    if view is None:
        view = pool._cache["search"] = SearchView(pool)
    return view


def prefix_view(pool: Pool, sub: Pool, d: int) -> None:
    """Cache on ``sub`` = V≤d of ``pool`` (its ids a prefix 0..m−1) the search view of
    ``sub``, cut from ``pool``'s instead of rebuilt.  O(m).

    In V≤d a node of level d has no child, and a node of level < d keeps all its
    children (their ids are < m when V≤d is a prefix); the lists are shared, never
    mutated.
    """
    full = search_view(pool)
    m, levels = sub.n, pool.levels
    view = SearchView.__new__(SearchView)
    view.children = [kids if levels[v] < d else [] for v, kids in enumerate(full.children[:m])]
    view.roots = [v for v in full.roots if v < m]
    view.credit = sub.credits
    view.by_p = [v for v in full.by_p if v < m]
    sub._cache["search"] = view


def canonical(pool: Pool, nodes: tuple[int, ...], union_bits: int, cost: CostModel,
              lam: float | None) -> list:
    """[score, R̂, F, nodes] of an ascending legal set, in the canonical arithmetic of
    :mod:`solvers.cost` (score: R̂/T̂, or R̂ − λT̂ when ``lam`` is given)."""
    r, f, t = canonical_terms(pool, nodes, union_bits, cost)
    return [r / t if lam is None else r - lam * t, r, f, nodes]


def beats(q: float, r: float, f: int, nodes: tuple, inc: list) -> bool:
    """§3.3's tie rule on canonical numbers: score, larger R̂, smaller F, fewer nodes,
    lexicographically smaller ids.  ``inc`` = [score, R̂, F, nodes] of the incumbent."""
    if q != inc[0]:
        return q > inc[0]
    if r != inc[1]:
        return r > inc[1]
    if f != inc[2]:
        return f < inc[2]
    if len(nodes) != len(inc[3]):
        return len(nodes) < len(inc[3])
    return nodes < inc[3]


def prefix_start(pool: Pool, K: int, cost: CostModel, lam: float | None,
                 view: SearchView) -> list:
    """Best of the root-only set and the K top-p prefixes (EAGLE-3's rule): a cheap start.

    ``lam`` None: best ratio; otherwise best R̂ − λT̂.  Returns [score, R̂, F, nodes].
    O(K) bitmap ORs.
    """
    probs, parents, masks = pool.probs, pool.parents, pool.masks
    b, beta, F0 = cost.b, cost.beta, pool.root_count
    t = b[0] + beta * F0
    root_only = [1.0 / t if lam is None else 1.0 - lam * t, 1.0, F0, ()]
    if K == 0:
        return root_only
    present = 1                     # bit a+1: node a chosen; bit 0: the root
    union, r, s = 0, 1.0, 0
    best_score, best_s, best_union = root_only[0], 0, 0
    picked: list[int] = []
    for v in view.by_p:
        if not (present >> (parents[v] + 1)) & 1:
            continue
        present |= 1 << (v + 1)
        union |= masks[v]
        r += probs[v]
        s += 1
        picked.append(v)
        t = b[s] + beta * (F0 + union.bit_count())
        score = r / t if lam is None else r - lam * t
        if score > best_score:
            best_score, best_s, best_union = score, s, union
        if s == K:
            break
    if best_s == 0:
        return root_only
    # the sums above run in p order: recompute the winner's numbers canonically
    nodes = tuple(sorted(picked[:best_s]))
    cand = canonical(pool, nodes, best_union, cost, lam)
    return cand if beats(cand[0], cand[1], cand[2], nodes, root_only) else root_only


def prefix_incumbent(pool: Pool, K: int, cost: CostModel, lam: float | None) -> Selection:
    """:func:`prefix_start` as a Selection (the closure's starting point)."""
    _, r, f, nodes = prefix_start(pool, K, cost, lam, search_view(pool))
    t = cost.b[len(nodes)] + cost.beta * f
    return Selection(nodes, r, f, t, r / t)


def first_incumbent(pool: Pool, K: int, cost: CostModel, lam: float | None,
                    start: Selection | None, view: SearchView) -> list:
    """[score, R̂, F, nodes] to start from: the prefix start, or the better of the root-only
    set and ``start`` (a legal set of at most K nodes with canonical numbers)."""
    if start is None or not start.nodes:
        return prefix_start(pool, K, cost, lam, view)
    # the search evaluates only non-empty sets: the root-only choice competes here
    inc = canonical(pool, (), 0, cost, lam)
    score = start.ratio if lam is None else start.reward - lam * start.time
    if beats(score, start.reward, start.union, start.nodes, inc):
        inc = [score, start.reward, start.union, start.nodes]
    return inc


def selection(cost: CostModel, inc: list, method: str, exact: bool = True,
              upper: float | None = None) -> Selection:
    """The Selection of an incumbent [score, R̂, F, nodes]; ``upper`` defaults to its score;
    ``method``: the search that answered (``Selection.method``)."""
    nodes, r, f = inc[3], inc[1], inc[2]
    t = cost.b[len(nodes)] + cost.beta * f
    sel = Selection(nodes, r, f, t, r / t)
    attrs = sel.__dict__        # not dataclass fields: set past the frozen __setattr__
    attrs["upper_bound"] = inc[0] if upper is None else upper
    attrs["method"] = method
    if not exact:
        attrs["exact"] = False
    return sel


def check_lam(lam) -> float:
    try:
        lam_f = float(lam)
    except (TypeError, ValueError):
        raise InvalidInput(f"lam must be a number, got {lam!r}") from None
    if lam_f != lam_f or lam_f in (float("inf"), float("-inf")) or lam_f < 0:
        raise InvalidInput(f"lam = {lam!r}: must be finite and >= 0")
    return lam_f


class Late(Exception):
    """A step would end past the deadline (:meth:`SearchState.paced`)."""


#: seconds per unit of work of the steps that cannot look at the clock midway (a flow,
#: the cover of a pool, ...), learned from the steps timed so far in this process, and
#: the fixed part of each step in the same units
_RATES = {"cover": 1e-8, "flow": 3e-7, "trim": 1e-8, "dominance": 1e-8, "milp": 3e-6,
          "model": 2e-6, "cpsat": 1e-5, "classes": 2e-8}
_FIXED = {"cover": 20_000.0, "flow": 1_000.0, "trim": 10_000.0, "dominance": 20_000.0,
          "milp": 1_000.0, "model": 1_000.0, "cpsat": 1_000.0, "classes": 10_000.0}

#: seconds by which a solver that looks at its own clock (HiGHS, CP-SAT) overran the time
#: it was given lately, learned in this process: it is then given that much less
_LATE = {"milp": 0.01, "cpsat": 0.01}

#: the module a kind of step needs, imported on its first use in a process (not at
#: ``import solvers``: a replay must not pay it), and the time a time-limited selection
#: reserves for that import, in seconds.  An import reads files and may wait on the disk
#: or the CPU: on the 2-CPU machine OR-Tools' max flow took 35-45 ms, and 176 ms under a
#: load of 10; scipy.optimize 0.4-0.9 s; OR-Tools' CP-SAT 0.5 s.  A step whose import
#: would end past the deadline is not started (:meth:`SearchState.affords`): limits
#: shorter than these skip the step unless :func:`preload` ran.
_IMPORTS = {"flow": ("ortools.graph.python.max_flow", 0.3),
            "milp": ("scipy.optimize", 1.5),
            "cpsat": ("ortools.sat.python.cp_model", 1.0)}


def import_seconds(kind: str) -> float:
    """The predicted time of the import that a step of ``kind`` still needs (0 once done)."""
    need = _IMPORTS.get(kind)
    return 0.0 if need is None or need[0] in sys.modules else need[1]


def _import_for(kind: str) -> None:
    need = _IMPORTS.get(kind)
    if need is not None and need[0] not in sys.modules:
        importlib.import_module(need[0])


def preload() -> None:
    """Import now what the exact methods import on first use (OR-Tools' max flow and CP-SAT,
    scipy.optimize: about 1 s in all), so that a time-limited selection later need not skip
    a method for want of time to import it.  Call it before the clock matters."""
    for kind in _IMPORTS:
        _import_for(kind)


class SearchState:
    """The incumbent ``inc`` = [score, R̂, F, nodes] of one selection (mutated in place) and
    what stops its search: ``deadline`` (a ``time.perf_counter()`` instant or None) and
    ``budget`` (search states, or None).  ``lam`` None: Eq. 5, else R̂ − λT̂ at that λ."""

    __slots__ = ("pool", "K", "cost", "lam", "inc", "deadline", "states", "budget", "stopped",
                 "by_budget", "chosen")

    def __init__(self, pool: Pool, K: int, cost: CostModel, lam: float | None, inc: list,
                 deadline: float | None):
        self.pool, self.K, self.cost, self.lam = pool, K, cost, lam
        self.inc = inc
        self.deadline = deadline
        self.states = 0
        self.budget: int | None = None
        self.stopped = False            # by the deadline or the budget
        self.by_budget = False
        self.chosen: list[int] = []     # the search's current set, ascending

    def expired(self) -> bool:
        return self.deadline is not None and time.perf_counter() > self.deadline

    def look(self) -> None:
        """Stop at the deadline, or once the states exceed the budget."""
        if self.expired():
            self.stopped = True
        elif self.budget is not None and self.states > self.budget:
            self.stopped = self.by_budget = True

    def resume(self, budget: int | None) -> None:
        """Clear a stop by the budget: the next search runs under ``budget``."""
        self.stopped = self.by_budget = False
        self.states = 0
        self.budget = budget
        self.chosen.clear()

    def offer(self, nodes: tuple[int, ...]) -> bool:
        """Compare a legal set (ascending, at most K nodes) with the incumbent, canonically;
        True if it won (the incumbent then holds it)."""
        union = 0
        masks = self.pool.masks
        for v in nodes:
            union |= masks[v]
        cand = canonical(self.pool, nodes, union, self.cost, self.lam)
        if beats(cand[0], cand[1], cand[2], nodes, self.inc):
            self.inc[:] = cand
            return True
        return False

    def score(self) -> float:
        """The λ of the incumbent: its ratio (Eq. 5) or the fixed λ."""
        return self.inc[0] if self.lam is None else self.lam

    def affords(self, kind: str, units: float, until: float | None = None) -> bool:
        """Whether a step of ``units`` work of this ``kind`` ends before the deadline (and
        before ``until``, a ``time.perf_counter()`` instant), at the slowest recent rate
        seen in this process (True without either)."""
        end = self.deadline if until is None else (
            until if self.deadline is None else min(until, self.deadline))
        if end is None:
            return True
        rate = _RATES[kind]
        if time.perf_counter() + rate * (units + _FIXED[kind]) + import_seconds(kind) <= end:
            return True
        _RATES[kind] = 0.95 * rate      # one slow step must not refuse all later ones
        return False

    def give(self, kind: str, until: float | None = None) -> float | None:
        """Seconds to give a solver of ``kind`` that keeps its own time limit: what is left
        before the deadline (and ``until``) less its recent overrun (None without either)."""
        end = self.deadline if until is None else (
            until if self.deadline is None else min(until, self.deadline))
        return None if end is None else end - time.perf_counter() - _LATE[kind]

    def overran(self, kind: str, given: float, took: float) -> None:
        """Record how long a solver of ``kind`` took when it stopped at a limit of ``given``."""
        _LATE[kind] = max(took - given, 0.8 * _LATE[kind], 1e-3)

    def ready(self, kind: str) -> None:
        """Import what a step of ``kind`` needs (after :meth:`affords` said it fits), outside
        the step's own timing: a first import must not teach the rate a 100-fold cost."""
        _import_for(kind)

    def learn(self, kind: str, units: float, seconds: float) -> None:
        """Record the time of a step of ``units`` work."""
        units += _FIXED[kind]
        # the slowest recent rate, but one step may at most double it: a step that waited
        # for the CPU (17 ms for a 0.7 ms cover on the loaded 2-CPU machine) must not make
        # every later short limit refuse that step
        rate = _RATES[kind]
        _RATES[kind] = max(min(seconds / units, 2.0 * rate), 0.8 * rate)

    def paced(self, kind: str, units: float, fn, *args):
        """``fn(*args)``, unless the step (``units`` of work of this ``kind``) would end past
        the deadline (:meth:`affords`): then stop the selection and raise :class:`Late`.  A
        deadline is kept to within one step's misestimate."""
        if not self.affords(kind, units):
            self.stopped = True
            raise Late
        if import_seconds(kind):
            self.ready(kind)
            if not self.affords(kind, units):   # the import took longer than reserved
                self.stopped = True
                raise Late
        t0 = time.perf_counter()
        out = fn(*args)
        self.learn(kind, units, time.perf_counter() - t0)
        return out
