"""Reward and predicted time of a subtree when experts are computed on the CPU.

In this regime (llama.cpp ``--n-cpu-moe``, KTransformers, Fiddler's compute
branch) a layer runs each distinct expert of the verified tokens' union once,
on the CPU: it reads the expert's bytes from DRAM (r) or computes the n tokens
routed to it (g per token), whichever takes longer.  SpecFit's T̂ = b_|S| + β·F
(Eq. 4) becomes

    T(S) = b_{|S|} + Σ_{(ℓ,e) ∈ union} c_{ℓe}(n_{ℓe}(S)),   c(n) = max(r, g·n), c(0) = 0,

with n_{ℓe}(S) the verified tokens (the root and the nodes of S) routed to
expert e of layer ℓ.  Experts held on the GPU are priced by the GPU's rates
(0 by default).  R̂(S) is Eq. 3 unchanged; F(S) counts the union's pairs held
on the CPU (the root's included, as in :mod:`solvers.cost`).

Canonical arithmetic (so that every method returns the same numbers and
§3.3's tie rule is well defined): R̂ is summed from 1.0 over ascending ids,
each pair's cost is ``max(r, g·n)`` with the product rounded once, the CPU
part is ``math.fsum`` of those (the correctly rounded sum, so independent of
the order of the pairs) and T = b[|S|] + that sum.  With g = 0 and r = β on
every pair the sum is fl(β·F), so T is exactly :class:`solvers.cost.CostModel`'s.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from solvers.cost import CostModel, Selection, checked_ids
from solvers.errors import InvalidInput
from solvers.pool import Pool

__all__ = ["RoutedPool", "CpuCostModel", "CpuView", "cpu_view", "cpu_evaluate", "forward_tokens"]


class RoutedPool:
    """A :class:`Pool` that keeps every node's (layer, expert) pairs, the root's included.

    :class:`Pool`'s bitmaps drop the root's pairs (under Eq. 4 they cost the same
    whatever is selected); here a pair's cost grows with the tokens routed to it,
    so the counts need them.  ``pool``: the pool; ``pairs``: every node's distinct flat
    ids layer·N + expert, node after node (ascending within a node), node v's at
    ``pairs[start[v]:start[v + 1]]``; ``root_pairs``: the root's, ascending;
    ``routes``: the validated ``(root_routes, node_routes)`` (int64), for the pools of
    the search's branches (:mod:`solvers.cpu_exact`).
    """

    __slots__ = ("pool", "pairs", "start", "root_pairs", "routes", "_cache")

    def __init__(self, pool: Pool, pairs: np.ndarray, start: np.ndarray, root_pairs: np.ndarray,
                 routes: tuple[np.ndarray, np.ndarray]):
        self.pool = pool
        self.pairs, self.start, self.root_pairs = pairs, start, root_pairs
        self.routes = routes
        self._cache: dict = {}

    @classmethod
    def from_routes(cls, parents, probs, root_routes, node_routes, num_experts: int) -> RoutedPool:
        """Validate (as :meth:`Pool.from_routes`) and build.  O(n·L·k) numpy work."""
        pool = Pool.from_routes(parents, probs, root_routes, node_routes, num_experts)
        L, N = pool.num_layers, pool.num_experts
        offset = (np.arange(L, dtype=np.int64) * N)[:, None]
        root_arr = np.asarray(root_routes, dtype=np.int64)
        node_arr = np.asarray(node_routes, dtype=np.int64)
        root = np.unique((root_arr + offset).ravel())
        n = pool.n
        if n:
            flat = np.sort((node_arr + offset).reshape(n, -1), axis=1)
            # a repeated expert within one layer's route counts once
            keep = np.ones(flat.shape, dtype=bool)
            keep[:, 1:] = flat[:, 1:] != flat[:, :-1]
            pairs = flat[keep]
            start = np.concatenate([[0], np.cumsum(keep.sum(axis=1))]).astype(np.int64)
        else:
            pairs, start = np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)
        return cls(pool, pairs, start, root, (root_arr, node_arr))

    @property
    def n(self) -> int:
        return self.pool.n

    def node_pairs(self, v: int) -> np.ndarray:
        """Node v's distinct flat pair ids, ascending."""
        return self.pairs[self.start[v]:self.start[v + 1]]

    def __repr__(self) -> str:
        return f"RoutedPool({self.pool!r})"


def _rates(name: str, value, L: int, N: int, default: float) -> np.ndarray:
    """A scalar, per-layer [L] or per-expert [L, N] rate as float64 [L·N] (finite, >= 0)."""
    if value is None:
        value = default
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidInput(f"{name} must be a number or an array of numbers, got {value!r}") \
            from None
    if arr.ndim == 0:
        arr = np.full((L, N), float(arr))
    elif arr.shape == (L,):
        arr = np.repeat(arr[:, None], N, axis=1)
    elif arr.shape != (L, N):
        raise InvalidInput(f"{name} has shape {arr.shape}: give a number, one per layer "
                           f"({L},) or one per expert ({L}, {N})")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise InvalidInput(f"{name}: every rate must be finite and >= 0")
    return arr.reshape(-1)


def _placement(on_cpu, L: int, N: int) -> np.ndarray:
    """``on_cpu`` (None: every expert; bool [L]: whole layers; bool [L, N]) as bool [L·N]."""
    if on_cpu is None:
        return np.ones(L * N, dtype=bool)
    arr = np.asarray(on_cpu)
    if arr.dtype != bool:
        raise InvalidInput(f"on_cpu must be booleans, got dtype {arr.dtype}")
    if arr.shape == (L,):
        arr = np.repeat(arr[:, None], N, axis=1)
    elif arr.shape != (L, N):
        raise InvalidInput(f"on_cpu has shape {arr.shape}: give one per layer ({L},) or one "
                           f"per expert ({L}, {N})")
    return arr.reshape(-1).copy()


class CpuCostModel:
    """T(S) = b[|S|] + Σ over the union's pairs of max(r, g·n) (module docstring).

    ``b``: intercepts (as :class:`CostModel`: non-empty, finite, > 0).  ``read`` (r) and
    ``compute`` (g, per token): for the experts on the CPU, a number, one per layer [L]
    or one per expert [L, N].  ``on_cpu``: which experts are on the CPU (None: all; bool
    [L] by layer, as ``--n-cpu-moe``; bool [L, N]).  ``gpu_read``, ``gpu_compute``: the
    same rates for the experts on the GPU (default 0: their time is in b).  Shapes are
    checked against a pool's geometry when the model meets it (:func:`cpu_view`).
    """

    __slots__ = ("b", "read", "compute", "on_cpu", "gpu_read", "gpu_compute", "_key", "_rates")

    def __init__(self, b: Sequence[float], read, compute=0.0, *, on_cpu=None,
                 gpu_read=0.0, gpu_compute=0.0):
        self.b: tuple[float, ...] = CostModel(b, 0.0).b     # the same checks as Eq. 4's
        parts = []
        for name, value in (("read", read), ("compute", compute), ("gpu_read", gpu_read),
                            ("gpu_compute", gpu_compute)):
            try:
                arr = np.array(value, dtype=np.float64)
            except (TypeError, ValueError):
                raise InvalidInput(f"{name} must be a number or an array of numbers, "
                                   f"got {value!r}") from None
            if not np.all(np.isfinite(arr)) or np.any(arr < 0):
                raise InvalidInput(f"{name}: every rate must be finite and >= 0")
            arr.flags.writeable = False
            parts.append(arr)
        self.read, self.compute, self.gpu_read, self.gpu_compute = parts
        place = None
        if on_cpu is not None:
            place = np.array(on_cpu)
            if place.dtype != bool:
                raise InvalidInput(f"on_cpu must be booleans, got dtype {place.dtype}")
            place.flags.writeable = False
        self.on_cpu = place
        self._key = (self.b, *((a.shape, a.tobytes()) for a in parts),
                     None if place is None else (place.shape, place.tobytes()))
        self._rates: dict = {}      # (L, N) -> rates(L, N): one model serves many cycles

    def rates(self, L: int, N: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(r, g, on_cpu) per flat pair layer·N + expert, for a pool of L layers × N experts
        (read-only arrays, computed once per geometry)."""
        out = self._rates.get((L, N))
        if out is None:
            out = self._rates[L, N] = self._make_rates(L, N)
        return out

    def _make_rates(self, L: int, N: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        cpu = _placement(self.on_cpu, L, N)
        r = np.where(cpu, _rates("read", self.read, L, N, 0.0),
                     _rates("gpu_read", self.gpu_read, L, N, 0.0))
        g = np.where(cpu, _rates("compute", self.compute, L, N, 0.0),
                     _rates("gpu_compute", self.gpu_compute, L, N, 0.0))
        for arr in (r, g, cpu):
            arr.flags.writeable = False
        return r, g, cpu

    def __eq__(self, other) -> bool:
        return isinstance(other, CpuCostModel) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return (f"CpuCostModel(b={list(self.b)!r}, read={self.read.tolist()!r}, "
                f"compute={self.compute.tolist()!r}, on_cpu="
                f"{None if self.on_cpu is None else self.on_cpu.tolist()!r})")


class CpuView:
    """What the selection needs of one (pool, cost): per node its priced pairs.

    Pairs with a cost (r > 0 or g > 0) that the root or a node uses are numbered
    densely: ``r``, ``g`` (float64), ``on_cpu`` (bool), ``root_counts`` (int64: 1 where
    the root routes) and ``holders`` (int64: the nodes that route there) per pair.
    ``free_cpu``: the CPU pairs used that cost nothing.  Per node v: ``node_idx[v]`` its
    priced pairs, ``idx[v]`` those another token may share (int arrays), ``alone[v]``
    the cost of those only v routes to (always max(r, g) when v is in), ``credit[v]``
    and ``gamma[v]`` its weights in the two lower bounds (:mod:`solvers.cpu_exact`).
    ``cpu_pool``: the pool whose bitmaps hold the CPU pairs only (F).  ``c0``: the root-only cost, canonical.
    """

    __slots__ = ("pool", "cpu_pool", "b", "r", "g", "on_cpu", "free_cpu", "root_counts", "holders",
                 "base", "start", "base_cost", "idx", "node_idx", "alone", "credit", "gamma",
                 "gamma0", "c0", "paid")

    def __init__(self, rpool: RoutedPool, cost: CpuCostModel, tokens: np.ndarray | None = None):
        pool = rpool.pool
        L, N = pool.num_layers, pool.num_experts
        r_all, g_all, cpu = cost.rates(L, N)
        self.pool, self.b = pool, cost.b
        # the pairs F does not count: the GPU's, and those the rest of the forward uses
        paid = ~cpu if tokens is None else ~cpu | (tokens > 0)
        self.paid = paid
        self.cpu_pool = pool.with_free(paid.reshape(L, N)) if paid.any() else pool
        priced = (r_all > 0) | (g_all > 0)
        used = np.zeros(L * N, dtype=bool)
        used[rpool.root_pairs] = True
        used[rpool.pairs] = True
        #: CPU pairs the pool uses that cost nothing (counted in F all the same)
        self.free_cpu = int(np.count_nonzero(used & ~paid & ~priced))
        keep = np.flatnonzero(used & priced)
        dense = np.full(L * N, -1, dtype=np.int64)
        dense[keep] = np.arange(keep.size)
        self.r, self.g, self.on_cpu = r_all[keep], g_all[keep], cpu[keep]
        self.root_counts = np.zeros(keep.size, dtype=np.int64)
        rp = dense[rpool.root_pairs]
        self.root_counts[rp[rp >= 0]] = 1
        self.base = np.zeros(keep.size, dtype=np.int64) if tokens is None else tokens[keep]
        self.start = self.base + self.root_counts
        self.base_cost = self._cost(self.base)
        # every node's priced pairs, node after node (CSR)
        d_all = dense[rpool.pairs]
        on = d_all >= 0
        owner = np.repeat(np.arange(pool.n), np.diff(rpool.start))[on]
        d = d_all[on]
        self.holders = np.bincount(d, minlength=keep.size).astype(np.int64)
        bounds = np.searchsorted(owner, np.arange(pool.n + 1)).tolist()
        self.node_idx: tuple[np.ndarray, ...] = tuple(
            d[bounds[v]:bounds[v + 1]] for v in range(pool.n))
        # steps of c past the rest of the forward's m tokens: the first, c(m+1) − c(m), and
        # the smallest of any later one: c(2) − c(1) when m = 0, else the first (c is convex
        # from n = 1 on, so its steps only grow there)
        m = self.base
        step1 = self._cost(m + 1) - self.base_cost
        later = np.where(m > 0, step1, self._cost(m + 2) - self._cost(m + 1))
        # per token, at least g when m = 0 (c(n) >= g·n), else the first step (convexity)
        per_token = np.where(m > 0, step1, self.g)
        solo = (self.holders[d] == 1) & (self.root_counts[d] == 0)
        # the pairs v holds first in id order (none held by the root) cost the first step
        # when v is added in id order; any other pair at least the smallest later step
        seen = self.root_counts > 0
        fresh_parts = []
        for part in self.node_idx:      # a node's pairs are distinct: one lookup each
            fresh_parts.append(~seen[part])
            seen[part] = True
        fresh = np.concatenate(fresh_parts) if fresh_parts else np.zeros(0, dtype=bool)
        self.idx: tuple[np.ndarray, ...] = tuple(
            part[~solo[bounds[v]:bounds[v + 1]]] for v, part in enumerate(self.node_idx))
        self.alone = _per_node(np.where(solo, step1[d], 0.0), owner, pool.n)
        self.credit = _per_node(np.where(fresh, step1[d], later[d]), owner, pool.n)
        self.gamma = _per_node(per_token[d], owner, pool.n)
        self.gamma0 = float(per_token[self.root_counts > 0].sum())
        self.c0 = self.cpu_time(())

    def _cost(self, n: np.ndarray) -> np.ndarray:
        """c(n) = max(r, g·n) per priced pair, 0 where n = 0."""
        return np.where(n > 0, np.maximum(self.r, self.g * n), 0.0)

    def counts(self, nodes: Iterable[int]) -> np.ndarray:
        """n_e per priced pair: the rest of the forward's tokens, the root's and ``nodes``'."""
        c = self.start.copy()
        for v in nodes:
            c[self.node_idx[v]] += 1
        return c

    def cpu_time(self, nodes: Iterable[int]) -> float:
        """Σ over the union's priced pairs of c(m + n) − c(m), m the rest of the forward's
        tokens (0 alone: c(n)), each difference rounded once, summed by math.fsum."""
        c = self.counts(nodes)
        on = c > self.base
        return math.fsum((np.maximum(self.r[on], self.g[on] * c[on]) - self.base_cost[on]).tolist())

    def terms(self, nodes: tuple[int, ...]) -> tuple[float, int, float]:
        """R̂, F (CPU pairs) and T of an ascending legal ``nodes``, canonically."""
        r = 1.0
        probs = self.pool.probs
        for v in nodes:
            r += probs[v]
        union = 0
        masks = self.cpu_pool.masks
        for v in nodes:
            union |= masks[v]
        f = self.cpu_pool.root_count + union.bit_count()
        return r, f, self.b[len(nodes)] + self.cpu_time(nodes)


def _per_node(values: np.ndarray, owner: np.ndarray, n: int) -> tuple[float, ...]:
    """Per node, the sum of ``values`` over its entries (``owner``: the node of each)."""
    return tuple(np.bincount(owner, weights=values, minlength=n).tolist())


def cpu_view(rpool: RoutedPool, cost: CpuCostModel, tokens: np.ndarray | None = None) -> CpuView:
    """The :class:`CpuView` of ``rpool`` and ``cost`` (``tokens``: the rest of the forward's
    token counts per flat pair, int64 [L·N], or None), cached on the pool."""
    if not isinstance(rpool, RoutedPool):
        raise InvalidInput(f"pool must be a RoutedPool, got {type(rpool).__name__}")
    if not isinstance(cost, CpuCostModel):
        raise InvalidInput(f"cost must be a CpuCostModel, got {type(cost).__name__}")
    key = (cost, None if tokens is None else tokens.tobytes())
    view = rpool._cache.get(key)
    if view is None:
        if len(rpool._cache) > 8:       # a pool lives one cycle: a few cost models at most
            rpool._cache.clear()
        view = rpool._cache[key] = CpuView(rpool, cost, tokens)
    return view


def forward_tokens(rpool: RoutedPool, tokens) -> np.ndarray:
    """``tokens`` — the tokens the rest of the forward routes to each expert, ints >= 0 [L, N]
    — as int64 [L·N] (InvalidInput for another shape, a negative or non-integer count)."""
    L, N = rpool.pool.num_layers, rpool.pool.num_experts
    try:
        arr = np.asarray(tokens)
    except (TypeError, ValueError):
        raise InvalidInput(f"tokens must be an integer array [{L}, {N}]") from None
    if arr.shape != (L, N):
        raise InvalidInput(f"tokens has shape {arr.shape}: give one count per expert ({L}, {N})")
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.number) or \
            not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)) or np.any(arr < 0):
        raise InvalidInput("tokens must hold whole counts >= 0")
    return arr.astype(np.int64).reshape(-1)


def cpu_evaluate(rpool: RoutedPool, nodes: Iterable[int], cost: CpuCostModel) -> Selection:
    """R̂, F (the union's CPU pairs), T and the ratio of a legal set, canonically.

    Raises InvalidInput as :func:`solvers.cost.evaluate` does (an id outside the pool,
    a repeated id, a set that is not ancestor-closed, too few intercepts).
    """
    view = cpu_view(rpool, cost)
    pool = rpool.pool
    ids = checked_ids(pool, nodes, len(cost.b))
    if not pool.is_legal(ids):
        raise InvalidInput(f"nodes {ids} are not ancestor-closed")
    r, f, t = view.terms(tuple(ids))
    return Selection(tuple(ids), r, f, t, r / t)
