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
from typing import Any

import numpy as np

from solvers.cost import CostModel, Selection, checked_ids
from solvers.cpu_flat import FLAT_CLASSES, FlatCost, per_node, rows_as_ints
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
        root = np.sort((root_arr + offset).ravel())     # np.unique costs 10x more on a few hundred ids
        root = root[np.concatenate(([True], root[1:] != root[:-1]))] if root.size else root
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

    def upto_level(self, d: int) -> tuple[RoutedPool, tuple[int, ...]]:
        """V≤d (SpecFit §3.3, Lemma 2) as a routed pool, and the original ids of its nodes
        (:meth:`Pool.upto_level`).  Where V≤d is a prefix of the ids (pools listed level by
        level) everything is sliced, the views already built for this pool included
        (:meth:`CpuView.prefix`); otherwise the pool is built anew.  O(n) besides."""
        sub, keep = self.pool.upto_level(d)
        if sub is self.pool:
            return self, keep
        m = len(keep)
        root, nodes = self.routes
        if keep[-1:] == (m - 1,):
            out = RoutedPool(sub, self.pairs[:self.start[m]], self.start[:m + 1], self.root_pairs,
                             (root, nodes[:m]))
            for key, view in self._cache.items():
                out._cache[key] = view.prefix(out)
            return out, keep
        ids = np.asarray(keep, dtype=np.int64)
        parts = [self.node_pairs(v) for v in keep]
        start = np.concatenate([[0], np.cumsum([p.size for p in parts])]).astype(np.int64)
        pairs = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        return RoutedPool(sub, pairs, start, self.root_pairs, (root, nodes[ids])), keep

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

    def read_classes(self, L: int, N: int) -> tuple[np.ndarray, np.ndarray]:
        """The distinct read times r of the pairs (ascending) and each flat pair's index among
        them, int64 [L·N] (computed once per geometry)."""
        key = ("classes", L, N)
        out = self._rates.get(key)
        if out is None:
            values, inverse = np.unique(self.rates(L, N)[0], return_inverse=True)
            out = self._rates[key] = (values, inverse.reshape(-1).astype(np.int64))
        return out

    def charged(self, L: int, N: int) -> tuple[np.ndarray, np.ndarray]:
        """Per flat pair, the index of its read time among :meth:`read_classes`' (-1 for a pair that
        costs nothing) and its g (0 for those), computed once per geometry."""
        key = ("charged", L, N)
        out = self._rates.get(key)
        if out is None:
            r, g, _ = self.rates(L, N)
            priced = (r > 0) | (g > 0)
            which, g_charged = np.where(priced, self.read_classes(L, N)[1], -1), np.where(priced, g, 0.0)
            which.flags.writeable = g_charged.flags.writeable = False
            out = self._rates[key] = (which, g_charged)
        return out

    def read_bound_tokens(self, L: int, N: int) -> np.ndarray:
        """Per flat pair, the most tokens n with g·n <= r (as rounded): the counts at which the
        expert still costs its read time, int64 [L·N] (2**62 where g = 0; computed once per
        geometry)."""
        key = ("read-bound", L, N)
        out = self._rates.get(key)
        if out is None:
            r, g, _ = self.rates(L, N)
            big = 2 ** 62
            on = g > 0
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                q = np.where(on, np.minimum(r / np.where(on, g, 1.0), 2.0 ** 61), float(big))
            n = np.floor(q).astype(np.int64)
            # the quotient is rounded: step to the largest n whose product stays at most r
            n = np.where(on & (g * n > r), n - 1, n)
            n = np.where(on & (g * (n + 1) <= r), n + 1, n)
            n.flags.writeable = False
            out = self._rates[key] = n
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


_DENSE = ("r", "g", "on_cpu", "free_cpu", "root_counts", "holders", "base", "start", "base_cost", "idx",
          "node_idx", "alone")


class _Dense:
    """A view's per-pair arrays (:class:`CpuView`'s docstring), and its bounds' weights as they give them."""

    __slots__ = (*_DENSE, "credit", "gamma", "gamma0")

    def __init__(self, rpool: RoutedPool, cost: CpuCostModel, tokens: np.ndarray | None, paid: np.ndarray):
        pool = rpool.pool
        L, N = pool.num_layers, pool.num_experts
        r_all, g_all, cpu = cost.rates(L, N)
        priced = (r_all > 0) | (g_all > 0)
        used = np.zeros(L * N, dtype=bool)
        used[rpool.root_pairs] = True
        used[rpool.pairs] = True
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
        self.base_cost = self.cost(self.base)
        # every node's priced pairs, node after node (CSR)
        d_all = dense[rpool.pairs]
        on = d_all >= 0
        owner = np.repeat(np.arange(pool.n), np.diff(rpool.start))[on]
        d = d_all[on]
        self.holders = np.bincount(d, minlength=keep.size).astype(np.int64)
        bounds = np.searchsorted(owner, np.arange(pool.n + 1)).tolist()
        self.node_idx: tuple[np.ndarray, ...] = tuple(d[bounds[v]:bounds[v + 1]] for v in range(pool.n))
        # steps of c past the rest of the forward's m tokens: the first, c(m+1) − c(m), and
        # the smallest of any later one: c(2) − c(1) when m = 0, else the first (c is convex
        # from n = 1 on, so its steps only grow there)
        m = self.base
        step1 = self.cost(m + 1) - self.base_cost
        later = np.where(m > 0, step1, self.cost(m + 2) - self.cost(m + 1))
        # per token, at least g when m = 0 (c(n) >= g·n), else the first step (convexity)
        per_token = np.where(m > 0, step1, self.g)
        solo = (self.holders[d] == 1) & (self.root_counts[d] == 0)
        # the pairs v holds first in id order (none held by the root) cost the first step
        # when v is added in id order; any other pair at least the smallest later step
        # (entries run node after node in id order: a pair's first entry is its first holder's)
        first_holder = np.full(keep.size, pool.n, dtype=np.int64)
        np.minimum.at(first_holder, d, owner)
        fresh = (first_holder[d] == owner) & (self.root_counts[d] == 0)
        shared = ~solo
        cut = np.concatenate([[0], np.cumsum(shared)])[bounds].tolist()
        d_shared = d[shared]
        self.idx: tuple[np.ndarray, ...] = tuple(d_shared[cut[v]:cut[v + 1]] for v in range(pool.n))
        s1 = step1[d]
        self.alone, self.credit, self.gamma = per_node(
            np.stack([np.where(solo, s1, 0.0), np.where(fresh, s1, later[d]), per_token[d]]), bounds)
        self.gamma0 = float(per_token[self.root_counts > 0].sum())

    def cost(self, n: np.ndarray) -> np.ndarray:
        """c(n) = max(r, g·n) per priced pair, 0 where n = 0."""
        return np.where(n > 0, np.maximum(self.r, self.g * n), 0.0)

    def prefix(self, m: int) -> _Dense:
        """The first m nodes' (``holders`` and ``free_cpu`` stay the whole pool's: at least the prefix's)."""
        out = _Dense.__new__(_Dense)
        for name in ("r", "g", "on_cpu", "free_cpu", "root_counts", "holders", "base", "start", "base_cost",
                     "gamma0"):
            setattr(out, name, getattr(self, name))
        for name in ("idx", "node_idx", "alone", "credit", "gamma"):
            setattr(out, name, getattr(self, name)[:m])
        return out


class _DenseField:
    """An attribute of a :class:`CpuView` read from its per-pair arrays (:class:`_Dense`, built on first use)."""

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, view, owner=None) -> Any:
        return self if view is None else getattr(view._dense_part(), self.name)


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

    ``flat``: a :class:`FlatCost` where the sets of up to ``flat.k_max`` nodes keep every priced
    expert read-bound and the read times take few values, else None.  T is then b + Σ r over
    the union's unpaid pairs, kept as bitmaps, and the per-pair arrays (``r`` to ``alone``),
    which the search does not need then, are built on first use.
    """

    __slots__ = ("pool", "b", "credit", "gamma", "gamma0", "c0", "paid", "flat", "_cpu_pool", "_f_mask",
                 "_f_root", "_source", "_dense")

    def __init__(self, rpool: RoutedPool, cost: CpuCostModel, tokens: np.ndarray | None = None):
        pool = rpool.pool
        L, N = pool.num_layers, pool.num_experts
        cpu = cost.rates(L, N)[2]
        self.pool, self.b = pool, cost.b
        # the pairs F does not count: the GPU's, and those the rest of the forward uses
        paid = ~cpu if tokens is None else ~cpu | (tokens > 0)
        self.paid = paid
        self._cpu_pool = None if paid.any() else pool
        # F in the pool's bit space: the bits of pairs not paid, and the root's count of them
        if pool.pair_ids is None or not paid.any():
            self._f_mask, self._f_root = -1, pool.root_count
        else:
            self._f_mask = rows_as_ints(~paid[pool.pair_ids][None, :])[0] if pool.n else 0
            self._f_root = int(np.count_nonzero(~paid[rpool.root_pairs]))
        self._source = (rpool, cost, tokens)
        self._dense: _Dense | None = None
        self.flat = flat_cost(rpool, cost, tokens) if _FLAT else None
        weights = self._dense_part() if self.flat is None else self.flat
        self.credit, self.gamma, self.gamma0 = weights.credit, weights.gamma, weights.gamma0
        self.c0 = self.cpu_time(())

    def _dense_part(self) -> _Dense:
        if self._dense is None:
            self._dense = _Dense(*self._source, self.paid)
        return self._dense

    # the per-pair arrays (the class docstring), built on first use
    (r, g, on_cpu, free_cpu, root_counts, holders, base, start, base_cost, idx, node_idx,
     alone) = (_DenseField() for _ in range(12))

    def prefix(self, rpool: RoutedPool) -> CpuView:
        """This view restricted to ``rpool``, the pool of this view's first m nodes (a prefix of
        the ids: :meth:`RoutedPool.upto_level`), by slicing: the same pairs, rates and per-node
        numbers.  ``holders`` and ``free_cpu`` stay the whole pool's where they were built (at
        least the prefix's: they only make the bounds and the relaxation's tests more careful)."""
        m = rpool.n
        out = CpuView.__new__(CpuView)
        for name in ("b", "gamma0", "c0", "paid", "_f_mask", "_f_root"):
            setattr(out, name, getattr(self, name))
        out.pool = rpool.pool
        out._cpu_pool = None if self._cpu_pool is None else rpool.pool
        out.credit, out.gamma = self.credit[:m], self.gamma[:m]
        out._source = (rpool, *self._source[1:])
        out._dense = None if self._dense is None else self._dense.prefix(m)
        out.flat = None if self.flat is None else self.flat.prefix(rpool.pool, m)
        return out

    @property
    def cpu_pool(self) -> Pool:
        """The pool whose bitmaps hold the CPU pairs only, the rest of the forward's left out (F)."""
        if self._cpu_pool is None:
            L, N = self.pool.num_layers, self.pool.num_experts
            self._cpu_pool = self.pool.with_free(self.paid.reshape(L, N))
        return self._cpu_pool

    def counts(self, nodes: Iterable[int]) -> np.ndarray:
        """n_e per priced pair: the rest of the forward's tokens, the root's and ``nodes``'."""
        dense = self._dense_part()
        c = dense.start.copy()
        for v in nodes:
            c[dense.node_idx[v]] += 1
        return c

    def cpu_time(self, nodes: Iterable[int]) -> float:
        """Σ over the union's priced pairs of c(m + n) − c(m), m the rest of the forward's
        tokens (0 alone: c(n)), each difference rounded once, summed by math.fsum."""
        flat = self.flat
        if flat is not None:
            nodes = tuple(nodes)
            if len(nodes) <= flat.k_max:
                return flat.canonical(nodes)
        c = self.counts(nodes)
        d = self._dense_part()
        on = c > d.base
        return math.fsum((np.maximum(d.r[on], d.g[on] * c[on]) - d.base_cost[on]).tolist())

    def terms(self, nodes: tuple[int, ...]) -> tuple[float, int, float]:
        """R̂, F (CPU pairs) and T of an ascending legal ``nodes``, canonically."""
        r = 1.0
        probs = self.pool.probs
        for v in nodes:
            r += probs[v]
        union = 0
        masks = self.pool.masks
        for v in nodes:
            union |= masks[v]
        f = self._f_root + (union & self._f_mask).bit_count()
        return r, f, self.b[len(nodes)] + self.cpu_time(nodes)


def flat_cost(rpool: RoutedPool, cost: CpuCostModel, tokens: np.ndarray | None) -> FlatCost | None:
    """The :class:`solvers.cpu_flat.FlatCost` of ``rpool`` under ``cost`` (``tokens``: the rest of the
    forward's per flat pair, or None), or None where a pair the pool uses could leave its read time
    (or the read times take more than ``FLAT_CLASSES`` values).  O(L·N) numpy work, n bitmap steps."""
    pool = rpool.pool
    L, N = pool.num_layers, pool.num_experts
    values, _ = cost.read_classes(L, N)
    if values.size > FLAT_CLASSES:
        return None
    cap = cost.read_bound_tokens(L, N)
    k_max = pool.n
    for ids in (rpool.root_pairs, rpool.pairs):
        if ids.size:
            room = cap[ids] if tokens is None else cap[ids] - tokens[ids]
            k_max = min(k_max, int(room.min()) - 1)     # the root's token, then k nodes'
    if k_max < 0:
        return None
    which, g_charged = cost.charged(L, N)
    if tokens is not None:      # the pairs the rest of the forward pays for are free here
        which, g_charged = np.where(tokens == 0, which, -1), np.where(tokens == 0, g_charged, 0.0)
    k = values.size
    root = np.bincount(which[rpool.root_pairs] + 1, minlength=k + 1)[1:]
    bits = which[pool.pair_ids] if pool.pair_ids is not None and pool.n else np.zeros(0, np.int64)
    rows = rows_as_ints(bits[None, :] == np.arange(k)[:, None]) if bits.size else (0,) * k
    (gamma,) = per_node(g_charged[rpool.pairs][None, :], rpool.start.tolist())
    return FlatCost(pool.masks, tuple(root.tolist()), tuple(zip(values.tolist(), rows, strict=True)), k_max,
                    gamma, float(g_charged[rpool.root_pairs].sum()))


_FLAT = True            # FlatCost where it applies (the tests run both ways)


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
