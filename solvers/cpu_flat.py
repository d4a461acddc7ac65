"""The CPU-expert cost where every priced expert stays read-bound: a weighted union (:mod:`solvers.cpu_cost`).

c(m + n) − c(m) = max(r, g·(m + n)) − max(r, g·m) is r for an expert the rest of the
forward does not use and 0 for one it does, for every count up to r/g tokens, so while
no set reaches that count T(S) = b_|S| + Σ r over the union's unpaid experts: SpecFit's
Eq. 4 with a weight per expert.  :class:`FlatCost` keeps it in the pool's bitmaps, the
weights grouped by their few distinct values (an expert's read time follows its layer's
weight format and where it sits), so adding a node costs a few popcounts and not an
update of per-expert counts, and prices a set exactly as the counting path does.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from solvers.pool import Pool

__all__ = ["FlatCost", "FLAT_CLASSES", "rows_as_ints", "per_node"]

FLAT_CLASSES = 8        # at most this many distinct read times for FlatCost


class FlatCost:
    """The CPU part of T where every priced pair stays read-bound (``CpuView.flat``).

    Then c(m + n) − c(m) is r for a pair the rest of the forward does not use (m = 0) and 0
    for one it does, whatever the n, so C(S) = Σ r over the union's unpaid pairs: a weighted
    union, kept in the bit space of the pool's masks (``Pool.masks``: the pairs the nodes
    add to the root's), the weights grouped by their distinct values.  ``masks``: the
    pool's; ``classes``: (r, bitmap of the unpaid pairs with that read time) per distinct
    value; ``root``: per class, the root's unpaid pairs; ``k_max``: the largest set (nodes)
    that keeps every pair the pool uses read-bound (the cost holds for those).
    :meth:`gain` is the float increase of adding a node (for the search's bounds);
    :meth:`canonical` is the CPU part exactly as :meth:`CpuView.cpu_time` defines it (the
    correctly rounded sum of the r, computed in integers: each r is a dyadic rational).
    ``credit``, ``gamma``, ``gamma0``: the search's bound weights (:class:`CpuView`), as the
    dense arrays would give them: a node's credit is the r of the pairs it holds first in id
    order (any later token on a pair adds 0), its gamma the g of its unpaid pairs.
    """

    __slots__ = ("masks", "root", "classes", "k_max", "credit", "gamma", "gamma0", "_scaled", "_den")

    def __init__(self, masks: tuple[int, ...], root: tuple[int, ...], classes: tuple[tuple[float, int], ...],
                 k_max: int, gamma: tuple[float, ...] = (), gamma0: float = 0.0):
        self.masks, self.root, self.classes, self.k_max = masks, root, classes, k_max
        ratios = [r.as_integer_ratio() for r, _ in classes]
        self._den = max((den for _, den in ratios), default=1)     # powers of two
        self._scaled = tuple(num * (self._den // den) for num, den in ratios)
        credit, seen = [], 0
        for m in masks:
            credit.append(self.gain(seen, m))
            seen |= m
        self.credit: tuple[float, ...] = tuple(credit)
        self.gamma, self.gamma0 = gamma, gamma0

    def prefix(self, pool: Pool, m: int) -> FlatCost:
        """The same cost on ``pool``, the first m nodes of this one's."""
        out = FlatCost.__new__(FlatCost)
        out.masks, out.root, out.classes, out.k_max = pool.masks, self.root, self.classes, min(self.k_max, m)
        out._den, out._scaled = self._den, self._scaled
        out.credit, out.gamma, out.gamma0 = self.credit[:m], self.gamma[:m], self.gamma0
        return out

    def gain(self, cover: int, mask: int) -> float:
        """The float increase of C when a node of bitmap ``mask`` joins a set covering ``cover``."""
        new = mask & ~cover
        if not new:
            return 0.0
        return sum([r * (new & m).bit_count() for r, m in self.classes])

    def canonical(self, nodes: Iterable[int]) -> float:
        """C of ``nodes``: Σ r over the union's unpaid pairs, the root's included, correctly rounded."""
        cover = 0
        masks = self.masks
        for v in nodes:
            cover |= masks[v]
        total = 0
        for (_, m), scaled, at_root in zip(self.classes, self._scaled, self.root, strict=True):
            total += scaled * ((cover & m).bit_count() + at_root)
        return total / self._den


def rows_as_ints(member: np.ndarray) -> tuple[int, ...]:
    """Each row of a bool matrix as a Python int (bit i set where row[i])."""
    packed = np.packbits(member, axis=1, bitorder="little")
    raw, nb = packed.tobytes(), packed.shape[1]
    return tuple(int.from_bytes(raw[i * nb:(i + 1) * nb], "little") for i in range(packed.shape[0]))


def per_node(values: np.ndarray, bounds: list[int]) -> list[tuple[float, ...]]:
    """Per row of ``values`` [c, entries], per node the sum over its entries (node v's at
    ``bounds[v]:bounds[v + 1]``)."""
    n = len(bounds) - 1
    if n == 0:
        return [()] * values.shape[0]
    if values.shape[1] == 0:
        return [(0.0,) * n] * values.shape[0]
    starts = np.asarray(bounds[:-1])
    sums = np.add.reduceat(values, np.minimum(starts, values.shape[1] - 1), axis=1)
    sums[:, starts == np.asarray(bounds[1:])] = 0.0      # reduceat's empty segments hold an entry
    return [tuple(row) for row in sums.tolist()]
