"""Selectors: which draft nodes of a pool the target verifies, and how deep to draft.

One registry, one interface.  A selector sees a :class:`PoolView` of the
candidate pool at a position (parents, levels, draft probabilities, the
routes it is allowed to know) and returns a :class:`Choice`: the selected
nodes (an ancestor-closed set, ascending pool-local ids) and how many levels
the drafter had to draft to make that choice.  Selections never depend on
the expert cache, so the replay engine can select once and then replay any
cache configuration.

Names are the CLI's:

=================  ===========================================================
``ar``             no drafter; one token per forward
``eagle3``         the K nodes of highest path probability (K = min(7, |V|))
``evict``          top-k prefix by path probability, k* = argmax Ê[A(T_k)]/C(k)
                   (EVICT Eq. 10) with the profile's C(k)
``ddd``            dynamic drafting depth by draft confidence, then top-K
``coverage``       smallest top-k prefix holding a fraction ρ of the top-K mass
``specfit``        Eq. 5 by exact search over A_K, adaptive depth (Lemma 2);
                   with experts on the CPU in a static placement, under that
                   regime's cost (``solvers.select_exact_cpu``)
``specfit-full``   Eq. 5 over the full-depth pool (the same costs)
``optimal``        Dinkelbach λ* over the trace (App. A.1), then
                   argmax R̂ − λ*T̂ per cycle
``unconstrained``  largest ratio without the size limit (parametric min cut,
                   App. A.3)
``oracle``         verifies exactly the longest agreeing path (upper bound)
``llama-chain``    llama.cpp's rule: greedy chain by q while q ≥ p_min, at
                   most --draft-max nodes, none below --draft-min
=================  ===========================================================

Every exact search is delegated to :mod:`solvers`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

import numpy as np

from simmoe.api import Choice, PoolView, SelectorContext
from simmoe.errors import SimmoeError
from simmoe.replay.paths import accepted_length, longest_agreeing_path

__all__ = ["Choice", "PoolView", "SelectorContext", "accepted_length", "longest_agreeing_path", "SELECTORS",
           "DEFAULT_SELECTORS"]

DEFAULT_SELECTORS = ("ar", "eagle3", "evict", "specfit", "oracle")

_EMPTY = np.zeros(0, dtype=np.int64)


def top_k(view: PoolView, k: int, nodes: np.ndarray | None = None) -> np.ndarray:
    """The ``k`` nodes of highest path probability (within ``nodes`` if given), ascending."""
    order = view.probability_order()
    if nodes is not None:
        keep = np.zeros(view.size, dtype=bool)
        keep[nodes] = True
        order = order[keep[order]]
    return np.sort(order[:k])


# --------------------------------------------------------------------------
# the selectors
# --------------------------------------------------------------------------
class Selector:
    """Base class: ``select(view) -> Choice``; ``prepare(views)`` once per trace."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    drafts: ClassVar[bool] = True       # False only for AR: no drafter, no pool
    uses_cost: ClassVar[bool] = False   # decisions depend on the cost model (b, β)
    uses_evict_cost: ClassVar[bool] = False
    uses_residency: ClassVar[bool] = False  # selects from the experts on the device (simmoe.replay.prefetch)
    reads_verdicts: ClassVar[bool] = False  # reads view.agree, the target's verdicts: an oracle
    extends_intercepts: ClassVar[bool] = False  # a cost-model selector that needs no b_j beyond the profile's
    needs_prepare: ClassVar[bool] = False

    def __init__(self, context: SelectorContext):
        self.context = context
        self.K = int(context.K)
        if self.uses_cost and not self.extends_intercepts:
            check_intercepts(self.name, context.cost, self.K)

    def budget(self, view: PoolView) -> int:
        return min(self.K, view.size)

    def prepare(self, trace, num_requests: int,
                views_at: Callable[[Sequence[int]], Sequence[PoolView]]) -> None:
        """Trace-level preparation over the first ``num_requests`` requests (only ``optimal``).

        ``views_at(rows)`` gives the selector's views (with its route information)
        of the pools at the given position rows.
        """

    def select(self, view: PoolView) -> Choice:  # pragma: no cover - abstract
        raise NotImplementedError


def check_intercepts(name: str, cost, K: int) -> None:
    """A selector that prices T̂(S) = b_|S| + βF(S) over subtrees of up to K nodes needs b_0..b_K.

    Checked when the selector is made, before any replay work, so a profile
    whose fitted intercepts stop short of the trace's K (SpecFit App. B fits
    b_0..b_7; EVICT's pools have K = 32) is refused in one line that names the
    physical profile deriving b_k for any k.
    """
    if cost is None:
        raise SimmoeError(f"selector {name!r} needs a cost model (b_k, beta; Eq. 4) and none was given")
    have = len(cost.b)
    if have >= K + 1:
        return
    who = getattr(cost, "profile", "") or "the given cost model"
    who = f"profile {who}" if getattr(cost, "profile", "") else who
    alt = getattr(cost, "counterpart", "")
    alt = "" if alt == getattr(cost, "profile", "") else alt   # a physical profile is its own counterpart
    raise SimmoeError(
        f"selector {name!r}: {who} has intercepts b_0..b_{have - 1} (subtrees of up to {have - 1} nodes) but the "
        f"trace's pools allow K = {K} and need b_0..b_{K}; "
        + (f"the physical profile {alt} derives b_k for any k (--hardware {alt})" if alt else
           "use a physical profile MODEL@GPU[+LINK], which derives b_k for any k (simmoe models)"))


class AutoRegressive(Selector):
    name = "ar"
    summary = "no drafter; one token per forward"
    drafts = False

    def select(self, view):
        return Choice(_EMPTY, 0)


class Eagle3(Selector):
    name = "eagle3"
    summary = "full-depth pool; the K nodes of highest path probability"

    def select(self, view):
        return Choice(top_k(view, self.budget(view)), view.depth)


class Evict(Selector):
    """EVICT Eq. 10: k* = argmax_{1≤k≤n} Ê[A(T_k)]/C(k) over probability-ordered prefixes.

    Ê[A(T_k)] is the sum of the scores (path probabilities) of T_k, whose
    root x_{t+1} scores 1 (EVICT Eq. 7–8); C(k) is the profile's whole-step
    latency for k verified draft tokens, so k is capped at the table's length.
    O(n log n).
    """

    name = "evict"
    summary = "top-k prefix by path probability, k* = argmax E[A(T_k)]/C(k)"
    uses_evict_cost = True

    def __init__(self, context):
        super().__init__(context)
        self.C = np.asarray(context.evict_cost, dtype=np.float64)
        if not len(self.C):
            raise SimmoeError("selector 'evict' needs the profile's C(k) table (evict_cost)")

    def select(self, view):
        n = min(view.size, len(self.C))
        if n == 0:
            return Choice(_EMPTY, view.depth)
        order = view.probability_order()[:n]
        gain = 1.0 + np.cumsum(view.p[order].astype(np.float64))
        k = int(np.argmax(gain / self.C[:n])) + 1  # first maximum: the smaller prefix
        return Choice(np.sort(order[:k]), view.depth)


class DynamicDepth(Selector):
    """Dynamic drafting depth by draft confidence (DDD, as EVICT App. C.3 describes it).

    After drafting level d the confidence is the path-probability mass of the
    level, Σ_{v at level d} p_v; drafting stops when it falls below
    ``threshold`` (option ``ddd_threshold``, default 0.3).  Then the K nodes
    of highest path probability among the drafted levels are verified.
    """

    name = "ddd"
    summary = "dynamic drafting depth by draft confidence, then top-K"

    def __init__(self, context):
        super().__init__(context)
        self.threshold = float(context.options.get("ddd_threshold", 0.3))

    def select(self, view):
        depth = view.depth
        if depth == 0:
            return Choice(_EMPTY, 0)
        mass = np.bincount(view.levels.astype(np.int64), weights=view.p.astype(np.float64),
                           minlength=depth + 1)
        drafted = depth
        for d in range(1, depth):
            if mass[d] < self.threshold:
                drafted = d
                break
        within = np.flatnonzero(view.levels <= drafted)
        return Choice(top_k(view, min(self.K, len(within)), within), drafted)


class Coverage(Selector):
    """Score coverage (EVICT §4.4.2): the smallest prefix with S_k ≥ ρ·S_K.

    The prefix runs in probability order within the verification budget
    K = min(7, |V|), so ρ = 1 verifies what ``eagle3`` verifies.  Option
    ``coverage_rho`` (default 0.7).
    """

    name = "coverage"
    summary = "smallest top-k prefix holding a fraction rho of the probability mass"

    def __init__(self, context):
        super().__init__(context)
        self.rho = float(context.options.get("coverage_rho", 0.7))
        if not 0.0 <= self.rho <= 1.0:
            raise SimmoeError(f"coverage rho must lie in [0, 1], got {self.rho}")

    def select(self, view):
        K = self.budget(view)
        if K == 0:
            return Choice(_EMPTY, view.depth)
        order = view.probability_order()[:K]
        mass = np.cumsum(view.p[order].astype(np.float64))
        # tiny slack so that rho = 1 reaches S_K despite rounding
        k = int(np.searchsorted(mass, self.rho * mass[-1] * (1 - 1e-12), side="left")) + 1
        return Choice(np.sort(order[:min(k, K)]), view.depth)


def _nodes(selection) -> np.ndarray:
    return np.asarray(selection.nodes, dtype=np.int64)


def _cost(selector, view: PoolView):
    """The cost model a selection is priced with: the view's (batch-aware at B > 1), else the context's."""
    return view.cost if view.cost is not None else selector.context.cost


def _select_cpu(view: PoolView, K: int, cost, *, adaptive: bool):
    """Eq. 5 under a static CPU placement's exact cost (:mod:`simmoe.replay.selection_cpu`)."""
    from simmoe.replay.selection_cpu import select_cpu

    return select_cpu(view, K, cost, adaptive=adaptive)


class SpecFit(Selector):
    """Eq. 5 by exact search over A_K with adaptive drafting depth (§3.3, Lemma 2)."""

    name = "specfit"
    summary = "Eq. 5 by exact search over A_K, adaptive depth (Lemma 2)"
    uses_cost = True

    def __init__(self, context):
        super().__init__(context)
        from solvers import select_adaptive_depth  # here, so no selection pays for the import

        self._search = select_adaptive_depth

    def select(self, view):
        if view.size == 0:
            return Choice(_EMPTY, 0)
        cost = _cost(self, view)
        if getattr(cost, "cpu", None) is not None:    # experts on the CPU, statically placed: the exact cost
            nodes, levels = _select_cpu(view, self.budget(view), cost, adaptive=True)
            return Choice(np.sort(nodes), int(levels))
        sel, levels = self._search(view.pool(), self.budget(view), cost)
        return Choice(_nodes(sel), int(levels))


class SpecFitFull(Selector):
    """Eq. 5 by exact search over A_K on the full-depth pool (Algorithm 1)."""

    name = "specfit-full"
    summary = "Eq. 5 over the full-depth pool (no adaptive depth)"
    uses_cost = True

    def __init__(self, context):
        super().__init__(context)
        from solvers import select_exact

        self._search = select_exact

    def select(self, view):
        if view.size == 0:
            return Choice(_EMPTY, 0)
        cost = _cost(self, view)
        if getattr(cost, "cpu", None) is not None:
            return Choice(np.sort(_select_cpu(view, self.budget(view), cost, adaptive=False)[0]), view.depth)
        return Choice(_nodes(self._search(view.pool(), self.budget(view), cost)), view.depth)


class Optimal(Selector):
    """The throughput-optimal rule S* = argmax R̂ − λ*T̂ over A_K (App. A.1).

    λ* is the root of h(λ) = E[max_S R̂(S) − λT̂(S)] over the cycle states
    of Eq. 5 + adaptive depth: the pools V≤d that SpecFit drafts on this
    trace (``simmoe.theory.cycles.specfit_cycles``), found by Dinkelbach's
    iteration (``simmoe.theory.lambda_star``) — the same λ* as ``simmoe
    bound``, so the simulated gain of S* over Ŝ can be set beside Table 5's
    prediction.  With a route predictor the states carry the predicted routes.
    With experts on the CPU in a static placement, T is that regime's exact cost:
    the cycles SpecFit runs with it, λ* by ``solvers.cpu_dinkelbach``
    (``simmoe.theory.cpu_bound``, as ``simmoe bound``'s second table) and S* by
    ``solvers.select_max_linear_cpu``.
    """

    name = "optimal"
    summary = "Dinkelbach lambda* over the trace, then argmax R - lambda* T per cycle"
    uses_cost = True
    needs_prepare = True
    # λ* is fitted in hindsight to the cycles SpecFit drafts on this trace, which the verdicts decide
    reads_verdicts = True

    def __init__(self, context):
        super().__init__(context)
        self.lam: float | None = None
        from solvers import select_max_linear

        self._search = select_max_linear

    def prepare(self, trace, num_requests, views_at):
        cost = self.context.cost
        if getattr(cost, "cpu", None) is not None:
            self.lam = self._cpu_lambda(trace, num_requests, views_at, cost)
            return
        from simmoe.theory.cycles import specfit_cycles
        from simmoe.theory.optimal import lambda_star

        cycles = specfit_cycles(trace, cost, self.K, num_requests)
        states = [view.pool().upto_level(c.drafted_levels)[0]
                  for view, c in zip(views_at([c.row for c in cycles]), cycles)]
        self.lam = lambda_star(states, self.K, cost) if states else 0.0

    def _cpu_lambda(self, trace, num_requests, views_at, cost) -> float:
        """λ* of the exact CPU-expert cost over the cycles SpecFit runs with it (the views' routes)."""
        from simmoe.theory.cpu_bound import cpu_optimal_rule, walk_cpu_cycles

        cycles = walk_cpu_cycles(trace, self.K, lambda view, k: _select_cpu(view, k, cost, adaptive=True),
                                 view_at=lambda row: views_at([row])[0], num_requests=num_requests)
        return float(cpu_optimal_rule(cycles, self.K, cost.cpu).lam) if cycles else 0.0

    def select(self, view):
        if view.size == 0:
            return Choice(_EMPTY, 0)
        if self.lam is None:
            raise RuntimeError("Optimal.prepare() must run before select()")
        cost = _cost(self, view)
        if getattr(cost, "cpu", None) is not None:
            from simmoe.theory.cpu_bound import routed_pool
            from solvers import select_marginal_cpu, select_max_linear_cpu

            rpool, k = routed_pool(view), self.budget(view)
            sel = (select_max_linear_cpu(rpool, k, cost.cpu, self.lam) if cost.tokens is None else
                   select_marginal_cpu(rpool, k, cost.cpu, cost.tokens, lam=self.lam))
            return Choice(_nodes(sel), view.depth)
        sel = self._search(view.pool(), self.budget(view), cost, self.lam)
        return Choice(_nodes(sel), view.depth)


class Unconstrained(Selector):
    """Largest ratio R̂/T̂ over all ancestor-closed subsets, no size limit (App. A.3).

    Proposition 2 needs intercepts affine in |S|; the profile's b_0..b_7 are
    replaced by their least-squares line (``solvers.affine_approximation``),
    extended to the pool's size.
    """

    name = "unconstrained"
    summary = "no size limit: largest ratio by parametric minimum cut"
    uses_cost = True
    extends_intercepts = True   # the intercepts' least-squares line, extended to any size

    def __init__(self, context):
        super().__init__(context)
        from solvers import affine_approximation, largest_ratio

        self._affine_cost, self._search = affine_approximation, largest_ratio
        self._affine: dict[int, object] = {}

    def select(self, view):
        if view.size == 0:
            return Choice(_EMPTY, 0)
        base = _cost(self, view)
        if base is not self.context.cost:   # a batch-aware cost: its own line
            cost = self._affine_cost(base, view.size)
        else:
            cost = self._affine.get(view.size)
            if cost is None:
                cost = self._affine[view.size] = self._affine_cost(base, view.size)
        sel, _ = self._search(view.pool(), cost, breakpoints=False)
        return Choice(_nodes(sel), view.depth)


class Oracle(Selector):
    """Knows the target's verdicts: verifies exactly the longest agreeing path.

    An upper bound on committed tokens per cycle; it drafts only the levels
    of that path.
    """

    name = "oracle"
    summary = "knows the matches: verifies exactly the accepted path (upper bound)"
    reads_verdicts = True

    def select(self, view):
        path = longest_agreeing_path(view.parents, view.agree)
        return Choice(path, len(path))


# llama.cpp's defaults (common/common.h, common_params_speculative: n_max, n_min, p_min)
LLAMA_DRAFT_MAX, LLAMA_DRAFT_MIN, LLAMA_DRAFT_P_MIN = 16, 0, 0.75


def llama_chain_options(draft_max, draft_min, p_min) -> dict[str, float]:
    """``--draft-max``, ``--draft-min``, ``--draft-p-min`` checked: the options of ``llama-chain``."""
    for flag, v in (("--draft-max", draft_max), ("--draft-min", draft_min)):
        if isinstance(v, bool) or float(v) != int(float(v)) or int(float(v)) < 0:
            raise SimmoeError(f"{flag} {v}: must be a non-negative integer (a number of draft tokens)")
    n_max, n_min, p = int(float(draft_max)), int(float(draft_min)), float(p_min)
    if n_max < 1:
        raise SimmoeError(f"--draft-max {draft_max}: llama-chain drafts at least one token")
    if n_min > n_max:
        raise SimmoeError(f"--draft-min {draft_min} exceeds --draft-max {draft_max}: no chain would be verified")
    if not 0.0 <= p <= 1.0:
        raise SimmoeError(f"--draft-p-min {p_min}: must be a probability in [0, 1]")
    return {"draft_max": n_max, "draft_min": n_min, "draft_p_min": p}


class LlamaChain(Selector):
    """llama.cpp's own draft rule: one greedy chain, stopped below a probability.

    As ``common_speculative_gen_draft`` (llama.cpp ``common/speculative.cpp``,
    read at ggerganov/llama.cpp 0d4d0c1 and in a later version) drafts: take the
    draft model's most probable token; stop, without keeping it, when its
    probability is below ``p_min`` (``--draft-p-min``); keep it and stop once
    ``n_max`` (``--draft-max``) tokens are kept; a chain shorter than ``n_min``
    (``--draft-min``) is dropped and nothing is verified.  Defaults 16, 0,
    0.75 (``common_params_speculative`` in ``common/common.h``; builds of early
    2025 had n_min = 5, p_min = 0.9).  On a pool: from the root, the child
    of largest q (ties: smallest id) while q ≥ p_min, at most min(n_max, K)
    nodes.  llama.cpp's p is renormalised over its draft sampler's top-k
    candidates; a pool's q is the drafter's conditional probability.

    Drafted levels follow ``ddd``: the level where the chain stopped on a
    low-probability child was drafted (the draft model computed it), so the
    chain's length plus one, capped at the pool's depth; a chain cut at its
    size limit drafted only its own levels.
    """

    name = "llama-chain"
    summary = "llama.cpp's rule: greedy chain by q, stopped below --draft-p-min, at most --draft-max"

    def __init__(self, context):
        super().__init__(context)
        o = context.options
        opts = llama_chain_options(o.get("draft_max", LLAMA_DRAFT_MAX), o.get("draft_min", LLAMA_DRAFT_MIN),
                                   o.get("draft_p_min", LLAMA_DRAFT_P_MIN))
        self.n_max, self.n_min, self.p_min = opts["draft_max"], opts["draft_min"], opts["draft_p_min"]

    def select(self, view):
        parents, q = view.parents, view.q.astype(np.float64)
        limit = min(self.n_max, self.K)
        chain: list[int] = []
        low = False
        parent = -1
        while len(chain) < limit:
            kids = np.flatnonzero(parents == parent)
            if not len(kids):
                break
            best = int(kids[np.argmax(q[kids])])   # argmax: the first, i.e. smallest id, of tied children
            if q[best] < self.p_min:
                low = True
                break
            chain.append(best)
            parent = best
        drafted = min(len(chain) + int(low), view.depth)
        if len(chain) < self.n_min:
            return Choice(_EMPTY, drafted)
        return Choice(np.sort(np.asarray(chain, dtype=np.int64)), drafted)


def _registry():
    from simmoe.replay.plugins import Registry

    return Registry("selector")


# every registered selector, simmoe's own first (entry points ``simmoe.selectors``; simmoe.replay.plugins)
SELECTORS = _registry()


def selector_names() -> list[str]:
    return list(SELECTORS)


def parse_selectors(spec: str | Sequence[str] | None) -> list[str]:
    """``"a,b,c"`` (registered names or ``module:Name``) or ``"all"`` → validated selector names, in order."""
    from simmoe.replay import plugins

    if spec is None:
        return list(DEFAULT_SELECTORS)
    names = spec.split(",") if isinstance(spec, str) else list(spec)
    names = [n.strip() for n in names if n.strip()]
    if names == ["all"]:  # those that select from the cache state (specfit-prefetch) only by name
        return [n for n in selector_names() if not getattr(SELECTORS[n], "uses_residency", False)]
    if not names:
        raise SimmoeError("no selector given")
    for n in names:
        plugins.load("selector", n)
    return list(dict.fromkeys(names))


def make_selector(name: str, context: SelectorContext) -> Selector:
    """Build the selector registered as ``name`` (or ``module:Name``) with ``context``."""
    from simmoe.replay import plugins

    return plugins.instantiate("selector", name, context)
