"""Reward, expert union and predicted time of a subtree (SpecFit Eq. 3, 4, 5).

    R̂(S) = 1 + Σ_{v∈S} p_v            (Eq. 3)
    F(S) = Σ_ℓ |E_ℓ(s) ∪ ⋃_{v∈S} E_ℓ(v)|  (Eq. 1/4)
    T̂(S) = b_{|S|} + β F(S)           (Eq. 4)

Floating point is made canonical so that every exact method returns the same
numbers and the tie rule of §3.3 is well defined: R̂ is summed left to right
starting at 1.0 over the nodes in ascending id order, T̂ = b[|S|] + β·F, and
the ratio is R̂ / T̂.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from solvers.errors import InvalidInput
from solvers.pool import Pool

__all__ = ["CostModel", "Selection", "evaluate", "check_K", "check_time_limit", "ratio_key",
           "linear_key"]


class CostModel:
    """T̂(S) = b[|S|] + beta·F(S) (Eq. 4).  ``b[j]`` is the intercept for j draft nodes.

    Validated: ``b`` non-empty, finite and > 0 (so T̂ > 0 and ratios exist),
    ``beta`` finite and >= 0.
    """

    __slots__ = ("b", "beta")

    def __init__(self, b: Sequence[float], beta: float):
        try:
            bb = tuple(float(x) for x in b)
        except (TypeError, ValueError):
            raise InvalidInput(f"b must be a sequence of numbers, got {b!r}") from None
        if not bb:
            raise InvalidInput("b must hold at least one intercept (b[0], the root-only forward)")
        for j, x in enumerate(bb):
            if not math.isfinite(x) or x <= 0.0:
                raise InvalidInput(f"b[{j}] = {x!r}: intercepts must be finite and > 0")
        try:
            beta_f = float(beta)
        except (TypeError, ValueError):
            raise InvalidInput(f"beta must be a number, got {beta!r}") from None
        if not math.isfinite(beta_f) or beta_f < 0.0:
            raise InvalidInput(f"beta = {beta!r}: must be finite and >= 0")
        self.b: tuple[float, ...] = bb
        self.beta: float = beta_f

    def time(self, size: int, union: int) -> float:
        return self.b[size] + self.beta * union

    def __repr__(self) -> str:
        return f"CostModel(b={list(self.b)!r}, beta={self.beta!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, CostModel) and (self.b, self.beta) == (other.b, other.beta)

    def __hash__(self) -> int:
        return hash((self.b, self.beta))


@dataclass(frozen=True)
class Selection:
    """A verified subtree: ``nodes`` ascending, R̂ (``reward``), F (``union``), T̂, R̂/T̂.

    ``exact``, ``upper_bound`` and ``method`` describe how it was selected (not
    compared by ``==``, not copied by ``dataclasses.replace``): ``exact`` is False
    only when a time limit stopped an exact search, which then returns its best
    subtree; ``upper_bound`` is a proven upper bound on the optimum of the searched
    objective (the ratio for Eq. 5, R̂ − λT̂ for the linear one): the selection's own
    value when exact, None where nothing was searched (:func:`evaluate`, the closure
    without size limit); ``method`` names the exact method that answered
    (``"uniform"``, ``"branch-and-bound"``, ``"closure-search"``, ``"milp"`` or
    ``"cp-sat"``, docs/solvers.md),
    None where nothing was searched.
    """

    nodes: tuple[int, ...]
    reward: float
    union: int
    time: float
    ratio: float
    # not dataclass fields (so not compared, and free to construct): class defaults that
    # the exact searches override per instance (solvers.canonical.selection)
    exact: ClassVar[bool] = True
    upper_bound: ClassVar[float | None] = None
    method: ClassVar[str | None] = None

    @property
    def size(self) -> int:
        return len(self.nodes)


def check_K(pool: Pool, K, cost: CostModel) -> int:
    """Validate K (an integer >= 0 with b[0..K] given); return the effective limit min(K, n)."""
    if isinstance(K, bool) or not isinstance(K, (int, np.integer)):
        raise InvalidInput(f"K must be an integer, got {K!r}")
    K = int(K)
    if K < 0:
        raise InvalidInput(f"K = {K}: the size limit must be >= 0")
    if not isinstance(cost, CostModel):
        raise InvalidInput(f"cost must be a CostModel, got {type(cost).__name__}")
    if not isinstance(pool, Pool):
        raise InvalidInput(f"pool must be a Pool, got {type(pool).__name__}")
    if len(cost.b) < K + 1:
        raise InvalidInput(f"b has {len(cost.b)} intercepts but K = {K} needs {K + 1} "
                           f"(b[0]..b[{K}])")
    return min(K, pool.n)


def check_time_limit(time_limit) -> float | None:
    """None, or a positive finite number of seconds (InvalidInput otherwise)."""
    if time_limit is None:
        return None
    if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float, np.integer,
                                                                     np.floating)):
        raise InvalidInput(f"time_limit must be a number of seconds, got {time_limit!r}")
    x = float(time_limit)
    if not math.isfinite(x) or x <= 0:
        raise InvalidInput(f"time_limit = {time_limit!r}: must be finite and > 0 seconds")
    return x


def canonical_terms(pool: Pool, nodes: tuple[int, ...], union_bits: int,
                    cost: CostModel) -> tuple[float, int, float]:
    """R̂, F and T̂ of an already-legal ascending ``nodes`` with its union bitmap, in the canonical
    arithmetic (R̂ summed in ascending id order; Eq. 3–4)."""
    r = 1.0
    probs = pool.probs
    for v in nodes:
        r += probs[v]
    f = pool.root_count + union_bits.bit_count()
    return r, f, cost.b[len(nodes)] + cost.beta * f


def make_selection(pool: Pool, nodes: tuple[int, ...], union_bits: int,
                   cost: CostModel) -> Selection:
    """Canonical numbers for an already-legal ascending ``nodes`` with its union bitmap."""
    r, f, t = canonical_terms(pool, nodes, union_bits, cost)
    return Selection(nodes, r, f, t, r / t)


def checked_ids(pool: Pool, nodes: Iterable[int], intercepts: int) -> list[int]:
    """``nodes`` as sorted ids; InvalidInput for a non-integer, an id outside the pool, a repeat, or
    a size beyond ``intercepts - 1`` (what every cost model's ``evaluate`` refuses)."""
    try:
        ids = sorted(int(v) for v in nodes)
    except (TypeError, ValueError):
        raise InvalidInput(f"nodes must be integer ids, got {nodes!r}") from None
    for i, v in enumerate(ids):
        if not 0 <= v < pool.n:
            raise InvalidInput(f"node id {v} is outside the pool (0..{pool.n - 1})")
        if i and ids[i - 1] == v:
            raise InvalidInput(f"node id {v} is listed twice")
    if len(ids) >= intercepts:
        raise InvalidInput(f"{len(ids)} nodes need b[{len(ids)}] but b has {intercepts} intercepts")
    return ids


def evaluate(pool: Pool, nodes: Iterable[int], cost: CostModel) -> Selection:
    """R̂, F, T̂ and the ratio of a given legal set (Eq. 3, 4).  O(|S|) bitmap ORs.

    Raises InvalidInput for an id outside the pool, a repeated id, a set that is
    not ancestor-closed, or a size beyond ``len(cost.b) - 1``.
    """
    if not isinstance(pool, Pool):
        raise InvalidInput(f"pool must be a Pool, got {type(pool).__name__}")
    if not isinstance(cost, CostModel):
        raise InvalidInput(f"cost must be a CostModel, got {type(cost).__name__}")
    ids = checked_ids(pool, nodes, len(cost.b))
    mask = 0
    for v in ids:
        mask |= 1 << v
    union = 0
    for v in ids:
        missing = pool.ancestors[v] & ~mask
        if missing:
            raise InvalidInput(f"node {v} is selected without its ancestor "
                               f"{missing.bit_length() - 1} (sets must be ancestor-closed)")
        union |= pool.masks[v]
    return make_selection(pool, tuple(ids), union, cost)


def ratio_key(sel: Selection):
    """Sort key of §3.3's tie rule; the larger key wins.

    (ratio, larger R̂, smaller F, fewer nodes, lexicographically smaller ids).
    The id comparison is done by :func:`better_ratio`, since tuples of
    different sizes never reach it (size is compared first).
    """
    return (sel.ratio, sel.reward, -sel.union, -len(sel.nodes))


def better_ratio(a: Selection, b: Selection) -> bool:
    """Whether ``a`` beats ``b`` under the tie rule of §3.3 (a strict total order)."""
    ka, kb = ratio_key(a), ratio_key(b)
    if ka != kb:
        return ka > kb
    return a.nodes < b.nodes


def linear_value(sel: Selection, lam: float) -> float:
    return sel.reward - lam * sel.time


def linear_key(sel: Selection, lam: float):
    """Tie rule for max R̂ − λT̂: (value, larger R̂, smaller F, fewer nodes, then smaller ids)."""
    return (linear_value(sel, lam), sel.reward, -sel.union, -len(sel.nodes))


def better_linear(a: Selection, b: Selection, lam: float) -> bool:
    ka, kb = linear_key(a, lam), linear_key(b, lam)
    if ka != kb:
        return ka > kb
    return a.nodes < b.nodes
