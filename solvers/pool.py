"""The candidate pool of one speculative cycle (SpecFit §2, §3.1, Eq. 1 and 4).

A pool is the root token s and draft nodes 0..n-1, parents listed before
children, each with a path probability p_v and, per MoE layer, the set of
experts it routes to.  Expert sets are held as bitmaps: one Python ``int`` per
node whose bits are the (layer, expert) pairs that the node routes to and the
root does not.  The root's pairs are always executed, so they only enter F(S)
as the constant ``root_count``; dropping them from the node bitmaps and
renumbering the remaining pairs densely keeps the integers short, which makes
the OR and popcount of the search cheaper (measured in
``benchmarks/bench_solvers.py``).

    F(S) = Σ_ℓ |E_ℓ(s) ∪ ⋃_{v∈S} E_ℓ(v)| = root_count + popcount(OR_{v∈S} mask_v)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from solvers.errors import InvalidInput

__all__ = ["Pool", "holder_classes"]


def _as_int_array(name: str, value, ndim: int) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind in "iu" and arr.ndim == ndim and arr.size:
        return arr.astype(np.int64, copy=False)     # the common case, without the checks
    if arr.size == 0 and arr.ndim == ndim:
        return arr.astype(np.int64)
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer)
                                 or np.issubdtype(arr.dtype, np.floating)):
        raise InvalidInput(f"{name} must be an integer array, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.floating) and not (np.all(np.isfinite(arr))
                                                       and np.all(arr == np.round(arr))):
        raise InvalidInput(f"{name} must hold integers")
    if arr.ndim != ndim:
        raise InvalidInput(f"{name} must have {ndim} dimension(s), got shape {arr.shape}")
    return arr.astype(np.int64, copy=False)


def _check_parents(par: np.ndarray) -> None:
    """Raise for the first kind of bad parent found (own parent, listed after, below -1)."""
    ids = np.arange(par.shape[0])
    bad = np.nonzero(par == ids)[0]
    if bad.size:
        raise InvalidInput(f"parents: node {bad[0]} is its own parent (a cycle)")
    bad = np.nonzero(par > ids)[0]
    if bad.size:
        v = int(bad[0])
        raise InvalidInput(f"parents: node {v} has parent {int(par[v])} listed after it "
                           f"(parents must precede children; this also rules out cycles)")
    bad = np.nonzero(par < -1)[0]
    if bad.size:
        raise InvalidInput(f"parents: node {int(bad[0])} has parent {int(par[bad[0]])}; "
                           f"use -1 for the root")


def _read_only(arr):
    if arr is None:
        return None
    arr = np.asarray(arr)
    if arr.flags.writeable:
        arr = arr.view()
        arr.flags.writeable = False
    return arr



def _levels(par: np.ndarray, plist: list[int]) -> list[int]:
    """Levels (1 = child of the root), checking the parent rule on the way (messages:
    :func:`_check_parents`)."""
    levels: list[int] = []
    for i, a in enumerate(plist):
        if a < 0:
            if a != -1:
                _check_parents(par)
            levels.append(1)
        elif a < i:
            levels.append(levels[a] + 1)
        else:
            _check_parents(par)
    return levels


def _checked_probs(probs, n: int) -> list[float]:
    """``probs`` as n floats in [0, 1] (InvalidInput otherwise; NaN fails too)."""
    try:
        p = np.asarray(probs, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"probs must be numbers: {exc}") from None
    if p.shape != (n,):
        raise InvalidInput(f"probs has shape {p.shape}, expected ({n},) to match parents")
    plain_p = p.tolist()
    if not all(0.0 <= x <= 1.0 for x in plain_p):
        bad = np.nonzero(~((p >= 0.0) & (p <= 1.0)))[0]
        raise InvalidInput(f"probs: node {int(bad[0])} has probability {p[bad[0]]!r}, "
                           f"outside [0, 1]")
    return plain_p


def _check_routes(root: np.ndarray, nodes: np.ndarray, n: int, L: int, N: int) -> None:
    if nodes.shape[0] != n:
        raise InvalidInput(f"node_routes has {nodes.shape[0]} nodes but parents has {n}")
    if n and nodes.shape[1] != L:
        raise InvalidInput(f"node_routes has {nodes.shape[1]} layers but root_routes has {L}")
    for name, arr in (("root_routes", root), ("node_routes", nodes)):
        if arr.size and (arr.min() < 0 or arr.max() >= N):
            bad_val = arr.min() if arr.min() < 0 else arr.max()
            raise InvalidInput(f"{name}: expert id {int(bad_val)} is outside [0, {N})")


def _bitmaps(flat: np.ndarray, root_flat: np.ndarray, pairs: int):
    """(masks, packed, used) of the nodes' flat pair ids ``flat`` [n, L·k]: the pairs some
    node adds (not the root's) renumbered densely, so that the bitmaps stay short."""
    n = flat.shape[0]
    present = np.zeros(pairs, dtype=bool)
    present[flat] = True
    present[root_flat] = False
    used = np.flatnonzero(present)
    U = used.size
    column = np.full(pairs, U, dtype=np.intp)   # root pairs -> spare column U
    column[used] = np.arange(U, dtype=np.intp)
    width = U + 1
    member = np.zeros(n * width, dtype=bool)
    member[(column[flat] + (np.arange(n, dtype=np.intp) * width)[:, None]).ravel()] = True
    packed = np.packbits(member.reshape(n, width)[:, :U], axis=1, bitorder="little")
    from_bytes = int.from_bytes
    raw, nb = packed.tobytes(), packed.shape[1]
    masks = tuple([from_bytes(raw[i * nb:(i + 1) * nb], "little") for i in range(n)])
    return masks, packed, used

class _RootRoute:
    """The root's flat pair ids as routed (repeats possible): :attr:`Pool.root_pairs` before it is first read."""

    __slots__ = ("flat",)

    def __init__(self, flat: np.ndarray):
        self.flat = flat


def _free_bitmap(free, L: int, N: int) -> np.ndarray:
    """``free`` (bool [L, N] or L per-layer collections of expert ids) as bool [L·N]."""
    arr = None
    try:
        arr = np.asarray(free)
    except (TypeError, ValueError):
        arr = None           # ragged per-layer collections: handled below
    if arr is not None and arr.dtype == bool:
        if arr.shape != (L, N):
            raise InvalidInput(f"free: a boolean bitmap must have shape ({L}, {N}) "
                               f"(layers, experts), got {arr.shape}")
        return arr.reshape(-1).copy()
    try:
        layers = list(free)
    except TypeError:
        raise InvalidInput("free must be a boolean array [L, N] or L collections of expert "
                           f"ids, got {type(free).__name__}") from None
    if len(layers) != L:
        raise InvalidInput(f"free has {len(layers)} layers, the pool has {L}")
    out = np.zeros(L * N, dtype=bool)
    for layer, experts in enumerate(layers):
        try:
            ids = np.asarray(sorted(set(experts)), dtype=np.float64)
        except (TypeError, ValueError):
            raise InvalidInput(f"free: layer {layer} must be a collection of expert ids, "
                               f"got {experts!r}") from None
        if ids.size == 0:
            continue
        if not np.all(ids == np.round(ids)):
            raise InvalidInput(f"free: layer {layer} holds a non-integer expert id")
        if ids.min() < 0 or ids.max() >= N:
            bad = ids.min() if ids.min() < 0 else ids.max()
            raise InvalidInput(f"free: layer {layer}: expert id {int(bad)} is outside [0, {N})")
        out[layer * N + ids.astype(np.int64)] = True
    return out


class Pool:
    """An immutable candidate pool.  Build it with :meth:`Pool.from_routes`.

    Attributes: ``n`` nodes; ``parents`` (-1 = root, ``parents[i] < i``);
    ``probs`` (path probabilities p_v, floats in [0, 1]); ``levels``
    (1 = child of the root); ``depth`` (max level, 0 if empty);
    ``num_layers``, ``num_experts``; ``root_count`` (distinct pairs the root
    routes to); ``masks`` (per-node bitmap of the pairs it adds to the root's);
    ``credits`` (per node, the pairs whose first holder in id order it is: the
    lower bound of the branch and bound, ``solvers.exact``); ``packed`` (the
    masks as a read-only uint8 array [n, bytes], little-endian bits, or None);
    ``pair_ids`` (flat id layer·N + expert of every mask bit) and
    ``root_pairs`` (flat ids of the root's pairs), both read-only int64 arrays,
    or None for a pool built without routes (then :meth:`with_free` is
    unavailable).
    """

    __slots__ = ("n", "parents", "probs", "levels", "depth", "num_layers",
                 "num_experts", "root_count", "masks", "ancestors", "credits", "packed",
                 "pair_ids", "_root_pairs", "_cache")

    def __init__(self, parents, probs, levels, num_layers, num_experts, root_count, masks,
                 credits=None, *, packed=None, pair_ids=None, root_pairs=None):
        # Internal constructor: inputs are already validated.
        self.n = len(parents)
        self.parents: tuple[int, ...] = parents
        self.probs: tuple[float, ...] = probs
        self.levels: tuple[int, ...] = levels
        self.depth = max(levels, default=0)
        self.num_layers = num_layers
        self.num_experts = num_experts
        self.root_count = root_count
        self.masks: tuple[int, ...] = masks
        anc: list[int] = []
        for v, a in enumerate(parents):
            anc.append((1 << v) | (anc[a] if a >= 0 else 0))
        #: ancestors[v]: bitmask over node ids of v and all its ancestors
        self.ancestors: tuple[int, ...] = tuple(anc)
        if credits is None:
            credits, seen = [], 0
            for m in masks:
                credits.append((m & ~seen).bit_count())
                seen |= m
        self.credits: tuple[int, ...] = tuple(credits)
        self.packed: np.ndarray | None = _read_only(packed)
        self.pair_ids: np.ndarray | None = _read_only(pair_ids)
        # an array, or the root's flat pair ids with repeats (_RootRoute), sorted and made unique when first read
        self._root_pairs = root_pairs if isinstance(root_pairs, _RootRoute) else _read_only(root_pairs)
        self._cache: dict = {}

    @property
    def root_pairs(self) -> np.ndarray | None:
        """Flat ids (layer·N + expert) of the root's distinct pairs, ascending (read-only), or None."""
        rp = self._root_pairs
        if isinstance(rp, _RootRoute):
            rp = self._root_pairs = _read_only(np.unique(rp.flat))
        return rp

    # -- construction -------------------------------------------------------------
    @classmethod
    def from_routes(cls, parents: Sequence[int] | np.ndarray, probs: Sequence[float] | np.ndarray,
                    root_routes,
                    node_routes, num_experts: int) -> Pool:
        """Validate and build a pool.

        ``parents``: int sequence, -1 = root, ``parents[i] < i``.  ``probs``:
        path probabilities in [0, 1].  ``root_routes``: ints ``[L, k]``;
        ``node_routes``: ints ``[n, L, k]`` (any int dtype; n may be 0).
        Duplicate experts within one layer's route count once (sets).
        Cost: O(n·L·k + L·N) numpy work plus, per node, one ``int.from_bytes`` and a
        few short-int operations (levels, ancestors, credits).
        """
        if isinstance(num_experts, bool) or not isinstance(num_experts, (int, np.integer)) \
                or num_experts <= 0:
            raise InvalidInput(f"num_experts must be a positive integer, got {num_experts!r}")
        N = int(num_experts)
        par = _as_int_array("parents", parents, 1)
        n = par.shape[0]
        plist = par.tolist()
        levels = _levels(par, plist)
        plain_p = _checked_probs(probs, n)
        root = _as_int_array("root_routes", root_routes, 2)
        L = root.shape[0]
        nodes = _as_int_array("node_routes", node_routes, 3)
        _check_routes(root, nodes, n, L, N)
        offset = (np.arange(L, dtype=np.intp) * N)[:, None]
        root_flat = (root + offset).ravel()
        in_root = np.zeros(L * N, dtype=bool)
        in_root[root_flat] = True
        root_count = int(np.count_nonzero(in_root))
        root_pairs = _RootRoute(root_flat)     # only batched selection reads them: built when first read
        if n == 0:
            masks: tuple[int, ...] = ()
            credits: list[int] | None = []
            packed = np.zeros((0, 1), dtype=np.uint8)
            used = np.zeros(0, dtype=np.int64)
        else:
            masks, packed, used = _bitmaps((nodes + offset).reshape(n, -1), root_flat, L * N)
            credits = None      # computed from the masks by __init__ (n short int ops)
        return cls(tuple(plist), tuple(plain_p), tuple(levels), L, N, root_count, masks,
                   credits, packed=packed, pair_ids=used, root_pairs=root_pairs)

    # -- views ----------------------------------------------------------------------
    def upto_level(self, d: int) -> tuple[Pool, tuple[int, ...]]:
        """V≤d (SpecFit §3.3, Lemma 2) as a pool, and the original ids of its nodes.

        Ids keep their relative order, so parents still precede children.  O(n).
        """
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0:
            raise InvalidInput(f"level d must be a non-negative integer, got {d!r}")
        keep = tuple(v for v in range(self.n) if self.levels[v] <= d)
        m = len(keep)
        if m == self.n:
            return self, keep
        if keep[-1:] == (m - 1,):
            # the ids of V≤d are a prefix (pools listed level by level): slice everything
            sub = Pool.__new__(Pool)
            sub.n, sub.parents, sub.probs = m, self.parents[:m], self.probs[:m]
            sub.levels = self.levels[:m]
            sub.depth = max(sub.levels, default=0)
            sub.num_layers, sub.num_experts = self.num_layers, self.num_experts
            sub.root_count, sub.masks = self.root_count, self.masks[:m]
            sub.ancestors, sub.credits = self.ancestors[:m], self.credits[:m]
            sub.packed = None if self.packed is None else self.packed[:m]
            sub.pair_ids, sub._root_pairs = self.pair_ids, self._root_pairs
            sub._cache = {}
            return sub, keep
        new_id = {v: i for i, v in enumerate(keep)}
        parents = tuple(-1 if self.parents[v] < 0 else new_id[self.parents[v]] for v in keep)
        sub = Pool(parents, tuple(self.probs[v] for v in keep),
                   tuple(self.levels[v] for v in keep), self.num_layers, self.num_experts,
                   self.root_count, tuple(self.masks[v] for v in keep),
                   packed=None if self.packed is None else self.packed[list(keep)],
                   pair_ids=self.pair_ids, root_pairs=self._root_pairs)
        return sub, keep

    def with_free(self, free) -> Pool:
        """The pool with the (layer, expert) pairs in ``free`` already paid for.

        For batched decoding: ``free`` holds the experts the forward executes
        anyway (the other requests' roots and selections).  They no longer count
        in F: F_free(S) = |(E(s) ∪ ⋃_{v∈S} E(v)) \\ free| summed over layers, so
        every exact selection over the returned pool selects by the marginal
        union.  Node ids, probabilities and the tree are unchanged.

        ``free``: a boolean array-like [L, N] (True = free), or a sequence of L
        collections of expert ids (per-layer sets).  O(L·N + n) plus n short
        bitmap operations.  Raises InvalidInput for a bad shape, an expert id
        outside [0, N), or a pool built without routes.
        """
        if self.pair_ids is None or self.root_pairs is None:
            raise InvalidInput("with_free needs a pool built by Pool.from_routes "
                               "(this pool has no map from mask bits to (layer, expert) pairs)")
        L, N = self.num_layers, self.num_experts
        bitmap = _free_bitmap(free, L, N)
        root_pairs = self.root_pairs[~bitmap[self.root_pairs]]
        free_bits = bitmap[self.pair_ids]
        if not free_bits.any():
            keep_mask = None
        else:
            packed_free = np.packbits(free_bits, bitorder="little")
            keep_mask = ~int.from_bytes(packed_free.tobytes(), "little")
        if keep_mask is None:
            masks = self.masks
            packed = self.packed
        else:
            masks = tuple(m & keep_mask for m in self.masks)
            packed = None
            if self.packed is not None and self.packed.shape[1] == packed_free.size:
                packed = self.packed & ~packed_free[None, :]
        return Pool(self.parents, self.probs, self.levels, L, N, int(root_pairs.size), masks,
                    packed=packed, pair_ids=self.pair_ids, root_pairs=root_pairs)

    def is_legal(self, nodes) -> bool:
        """Whether ``nodes`` (distinct ids) is ancestor-closed (the family of Eq. 2 without K)."""
        mask = 0
        for v in nodes:
            mask |= 1 << v
        return all(self.ancestors[v] & ~mask == 0 for v in nodes)

    def __repr__(self) -> str:
        return (f"Pool(n={self.n}, depth={self.depth}, layers={self.num_layers}, "
                f"experts={self.num_experts}, root_count={self.root_count})")


def holder_classes(pool: Pool) -> tuple[np.ndarray, np.ndarray]:
    """The classes of mask bits routed to by the same nodes: the distinct columns of the
    node × mask-bit matrix (bool [classes, n]) and their sizes.  O(n·U) numpy work."""
    n = pool.n
    nb = max(1, (max((m.bit_length() for m in pool.masks), default=0) + 7) // 8)
    raw = b"".join(m.to_bytes(nb, "little") for m in pool.masks)
    member = np.unpackbits(np.frombuffer(raw, dtype=np.uint8).reshape(n, nb), axis=1,
                           bitorder="little").astype(bool)
    member = member[:, member.any(axis=0)]
    # one row of packed bytes per mask bit, compared as opaque records
    rows = np.ascontiguousarray(np.packbits(member.T, axis=1))
    keys = rows.view(np.dtype((np.void, rows.shape[1]))).ravel()
    _, first, counts = np.unique(keys, return_index=True, return_counts=True)
    return member.T[first], counts
