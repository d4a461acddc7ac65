"""Reference-delta coding of expert routes: the compact on-disk form of ``[rows, L, k]`` routes.

Each routed row (a position's root or a pool node) is coded against a
*reference* row whose routes are decoded first: a node against its parent
(the position's root for level-1 nodes), a root against the previous
position's root of the same request.  Per (row, layer) — a *cell* — with the
row's sorted experts ``c[0] < … < c[k-1]`` and the reference's ``r[0..k-1]``:

* ``keep``  — k bits (``ceil(k/8)`` bytes, little-endian bit order): bit i
  says the row also routes to ``r[i]``;
* ``place`` — which of the row's k slots hold kept experts.  It has as many
  set bits as ``keep`` (m), so for k <= 8 it is stored as one byte: the
  index of the mask among the 8-bit masks with m set bits in increasing
  order (< C(8, m), cheaper to entropy-code than the raw mask); for k > 8 as
  raw bits like ``keep``;
* ``new``   — for every slot j that is not placed, the gap ``c[j] - c[j-1]``
  (``c[-1] = 0``) modulo the id dtype's range, in (row, layer, slot) order.
  Sorted lists have small gaps, so these entropy-code much better than ids.

Since both lists are sorted, the r-th placed slot holds the r-th kept
reference expert.  Decoding a batch of rows whose references are known is
``out[place] = ref[keep]`` followed by a running sum over the k slots of the
new ones — boolean-mask numpy operations, no sort, no per-row Python; for
k = 8 one-byte ids the same in uint64 word operations (second half of this
module).  A row without a reference has both masks empty and all k slots new.

Cost: encoding O(rows·L·k²) comparisons (chunked to bound memory);
decoding O(rows·L·k) per batch (O(rows·L) word operations on the fast path).
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

# Rows per chunk when encoding: bounds the [chunk, L, k, k] comparison tensor.
_ENCODE_CHUNK = 4096

# For k <= 8: rank of an 8-bit mask among masks with the same number of set bits,
# and back.  _MASK_OF[m, i] is the i-th mask with m bits; unused entries are 256.
_POPCOUNT = np.array([bin(b).count("1") for b in range(256)], dtype=np.uint8)
_COMB_INDEX = np.zeros(256, dtype=np.uint8)
_MASK_OF = np.full((9, 70), 256, dtype=np.uint16)
for _m in range(9):
    for _i, _lanes in enumerate(combinations(range(8), _m)):
        _b = sum(1 << j for j in _lanes)
        _COMB_INDEX[_b] = _i
        _MASK_OF[_m, _i] = _b


def mask_bytes(k: int) -> int:
    """Bytes per cell of the ``keep`` mask."""
    return (k + 7) // 8


def place_bytes(k: int) -> int:
    """Bytes per cell of the ``place`` code (an index for k <= 8, raw bits above)."""
    return 1 if k <= 8 else mask_bytes(k)


def place_coding(k: int) -> str:
    return "combination-index" if k <= 8 else "bits"


def encode(routes: np.ndarray, ref_routes: np.ndarray | None,
           has_ref: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Code ``routes [n, L, k]`` (sorted) against ``ref_routes [n, L, k]`` (row-aligned).

    ``has_ref [n]`` (bool) marks rows that have a reference; rows without one
    (or all rows when ``ref_routes`` is None) are stored whole.  Returns
    ``(keep uint8 [n, L, mask_bytes], place uint8 [n, L, place_bytes],
    new_gaps [#new])`` with the routes' dtype for the gaps.
    """
    n, L, k = routes.shape
    if word_path(k, routes.dtype) and ref_routes is not None:
        return _encode_words(routes, ref_routes, has_ref)
    keep = np.zeros((n, L, k), dtype=bool)
    place = np.zeros((n, L, k), dtype=bool)
    if ref_routes is not None and n:
        rows = np.arange(n) if has_ref is None else np.flatnonzero(has_ref)
        for s in range(0, len(rows), _ENCODE_CHUNK):
            r = rows[s:s + _ENCODE_CHUNK]
            own, ref = routes[r], ref_routes[r]
            eq = own[:, :, :, None] == ref[:, :, None, :]  # [c, L, own slot, ref slot]
            # Cells that are not strictly ascending (only in deliberately invalid
            # traces) are stored whole, so that any input round-trips exactly.
            ok = (_ascending(own) & _ascending(ref))[..., None]
            place[r] = eq.any(axis=3) & ok
            keep[r] = eq.any(axis=2) & ok
    prev = np.zeros_like(routes)
    prev[..., 1:] = routes[..., :-1]
    gaps = routes - prev  # wraps modulo the dtype's range; decoding adds it back
    return pack_bits(keep), encode_place(place), gaps[~place]


def pack_bits(mask: np.ndarray) -> np.ndarray:
    """``bool [..., k]`` → ``uint8 [..., ceil(k/8)]`` (little-endian bit order)."""
    return np.packbits(mask, axis=-1, bitorder="little")


def encode_place(place: np.ndarray) -> np.ndarray:
    bits = pack_bits(place)
    if place.shape[-1] <= 8:
        return _COMB_INDEX[bits]
    return bits


def unpack_masks(keep_bytes: np.ndarray, place_codes: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decode per-cell masks: ``(keep bool [cells, k], place bool [cells, k], bad bool [cells])``.

    ``bad`` flags cells whose codes are inconsistent: keep bits beyond k,
    a place index out of range, or (k > 8) place bits beyond k or a place
    mask with a different number of bits than keep.
    """
    keep_full = np.unpackbits(keep_bytes, axis=-1, bitorder="little").view(bool)
    bad = keep_full[:, k:].any(axis=1)
    keep = keep_full[:, :k]
    if k <= 8:
        m = _POPCOUNT[keep_bytes[:, 0]]
        idx = place_codes[:, 0]
        mask = _MASK_OF[m, np.minimum(idx, 69)]
        bad |= (idx >= 70) | (mask > 255) | ((mask >> k) > 0)
        place = np.unpackbits(mask.astype(np.uint8)[:, None], axis=-1, bitorder="little").view(bool)[:, :k]
    else:
        place_full = np.unpackbits(place_codes, axis=-1, bitorder="little").view(bool)
        place = place_full[:, :k]
        bad |= place_full[:, k:].any(axis=1) | (place.sum(axis=1) != keep.sum(axis=1))
    return keep, place, bad


def kept_counts(keep_bytes: np.ndarray) -> np.ndarray:
    """Kept experts per cell (popcount over the last axis of ``keep`` bytes), uint8."""
    if keep_bytes.shape[-1] == 1:
        return _POPCOUNT[keep_bytes[..., 0]]
    return _POPCOUNT[keep_bytes].sum(axis=-1, dtype=np.int64)


def fill_new(place: np.ndarray, new_gaps: np.ndarray, out: np.ndarray) -> None:
    """Write the gaps of the new experts into the slots that ``place`` leaves free (C order)."""
    out[~place] = new_gaps


def resolve(out: np.ndarray, rows: np.ndarray, ref_values: np.ndarray,
            keep: np.ndarray, place: np.ndarray) -> None:
    """Finish rows ``out[rows]`` whose reference routes are ``ref_values`` (row-aligned).

    ``out[rows]`` holds gaps in its free slots (:func:`fill_new`).  Kept
    reference experts go to the placed slots — in C order the r-th kept one
    of a cell lands in its r-th placed slot, as popcounts agree per cell —
    then a running sum over the slots turns gaps into ids.
    """
    sub = out[rows]
    pl = place[rows]
    sub[pl] = ref_values[keep[rows]]
    _ungap(sub, pl)
    out[rows] = sub


def resolve_unreferenced(out: np.ndarray, rows: np.ndarray, place: np.ndarray) -> None:
    """Rows without a reference: every slot holds a gap."""
    sub = out[rows]
    _ungap(sub, place[rows])
    out[rows] = sub


def _ungap(sub: np.ndarray, placed: np.ndarray) -> None:
    # Slot 0's gap is its id; a later free slot adds the (final) id of the slot before it.
    for j in range(1, sub.shape[-1]):
        sub[..., j] += sub[..., j - 1] * ~placed[..., j]


def _ascending(routes: np.ndarray) -> np.ndarray:
    return np.all(routes[..., 1:] > routes[..., :-1], axis=-1)


# ---------------------------------------------------------------------------
# Fast path for k = 8 one-byte ids: a cell is one little-endian uint64 word
# (byte j = slot j), masks are one byte each, and moving the kept experts is
# a byte-lane compress / expand (Hacker's Delight, 2nd ed., §7-4 and §7-5)
# in three steps of constant shifts, with the step masks looked up per mask
# byte.  About 40 word operations per cell instead of ~20 per-slot boolean
# scans: same result as :func:`resolve`, several times faster.
# ---------------------------------------------------------------------------

def word_path(k: int, dtype: np.dtype) -> bool:
    """Whether the uint64 fast path applies (k = 8, one-byte ids)."""
    return k == 8 and np.dtype(dtype).itemsize == 1


def _lane_bytes(lanes: int) -> int:
    return sum(0xFF << (8 * j) for j in range(8) if lanes >> j & 1)


def _compress_steps(m: int) -> list[int]:
    """Lane masks moved in each of the 3 steps of compress(x, m) (HD Fig. 7-10, 8 lanes)."""
    steps, mk = [], (~m << 1) & 0xFF
    for i in range(3):
        mp = mk ^ (mk << 1) & 0xFF
        mp = mp ^ (mp << 2) & 0xFF
        mp = mp ^ (mp << 4) & 0xFF
        mv = mp & m
        steps.append(mv)
        m = (m ^ mv) | (mv >> (1 << i))
        mk = mk & ~mp & 0xFF
    return steps


_LANE_MASK = np.array([_lane_bytes(m) for m in range(256)], dtype=np.uint64)
_STEP_MASK = np.array([[_lane_bytes(s) for s in _compress_steps(m)] for m in range(256)],
                      dtype=np.uint64).T.copy()          # [3, 256]
_LOW_BYTES = np.array([(1 << (8 * n)) - 1 for n in range(9)], dtype=np.uint64)
_SHIFT = [np.uint64(8 << i) for i in range(3)]


def compress_lanes(x: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Bytes of ``x`` in the lanes set in ``m``, moved to the low lanes in order (a new array)."""
    x = x & _LANE_MASK[m]
    t = np.empty_like(x)
    for i in range(3):
        np.bitwise_and(x, _STEP_MASK[i][m], out=t)
        x ^= t
        t >>= _SHIFT[i]
        x |= t
    return x


def expand_lanes(x: np.ndarray, m: np.ndarray) -> np.ndarray:
    """The low bytes of ``x``, in order, moved to the lanes set in ``m`` (inverse of compress; in place)."""
    t = np.empty_like(x)
    for i in (2, 1, 0):
        mv = _STEP_MASK[i][m]
        np.left_shift(x, _SHIFT[i], out=t)
        t &= mv
        x &= ~mv
        x |= t
    x &= _LANE_MASK[m]
    return x


def _place_table() -> np.ndarray:
    """uint16 [65536]: (keep byte << 8 | place code) → place lane mask, or 256 when the code is invalid."""
    table = np.full(1 << 16, 256, dtype=np.uint16)
    for keep in range(256):
        m = int(_POPCOUNT[keep])
        valid = _MASK_OF[m][_MASK_OF[m] < 256]
        table[(keep << 8) | np.arange(len(valid))] = valid
    return table


_PLACE_TABLE = _place_table()


def place_lanes(keep_bytes: np.ndarray, place_codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """k = 8: the place lane mask of each cell and the cells whose place code is invalid."""
    key = keep_bytes.astype(np.uint16)
    key <<= 8
    key |= place_codes
    mask = _PLACE_TABLE[key]
    return mask.astype(np.uint8), mask > 255


# Cells per block in the word path: keeps a block's temporaries in cache.
BLOCK_CELLS = 1 << 16


def new_words(place_mask: np.ndarray, gaps: np.ndarray, pool=None) -> np.ndarray:
    """uint64 [cells]: each cell's gaps (contiguous in ``gaps``) moved to its free lanes."""
    n_new = 8 - _POPCOUNT[place_mask]
    start = np.zeros(len(n_new), dtype=np.int64)
    np.cumsum(n_new[:-1], out=start[1:])
    padded = np.zeros(len(gaps) + 8, dtype=np.uint8)
    padded[:len(gaps)] = gaps
    # Unaligned 8-byte loads at every cell's first gap; bytes beyond its own are masked off.
    loads = np.ndarray((len(gaps) + 1,), dtype="<u8", buffer=padded, strides=(1,))
    out = np.empty(len(n_new), dtype=np.uint64)

    def block(lo, hi):
        w = loads[start[lo:hi]]
        w &= _LOW_BYTES[n_new[lo:hi]]
        out[lo:hi] = expand_lanes(w, ~place_mask[lo:hi])

    _run_blocks(len(out), BLOCK_CELLS, block, pool)
    return out


def resolve_words(out: np.ndarray, rows: np.ndarray, ref_words, keep_mask: np.ndarray,
                  place_mask: np.ndarray, pool=None) -> None:
    """Word form of :func:`resolve`: ``out [rows, L]`` uint64 holds gaps in free lanes.

    ``ref_words(rows)`` returns the reference words ``[len(rows), L]`` of a
    block of rows; blocks run on ``pool`` (an executor) when given.
    """
    per_block = max(1, BLOCK_CELLS // out.shape[1])

    def block(lo, hi):
        r = rows[lo:hi]
        kmask, pmask = keep_mask[r], place_mask[r]
        sub = out[r]
        sub |= expand_lanes(compress_lanes(ref_words(r), kmask), pmask)
        _ungap_words(sub, pmask)
        out[r] = sub

    _run_blocks(len(rows), per_block, block, pool)


def ungap_words(out: np.ndarray, rows: np.ndarray, place_mask: np.ndarray) -> None:
    sub = out[rows]
    _ungap_words(sub, place_mask[rows])
    out[rows] = sub


def _run_blocks(n: int, size: int, fn, pool) -> None:
    bounds = [(lo, min(n, lo + size)) for lo in range(0, n, size)]
    if pool is None or len(bounds) < 2:
        for lo, hi in bounds:
            fn(lo, hi)
    else:  # numpy releases the GIL in these loops; blocks write disjoint rows
        for f in [pool.submit(fn, lo, hi) for lo, hi in bounds]:
            f.result()


_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_HIGH = np.uint64(0x8080808080808080)


def _zero_lanes(v: np.ndarray) -> np.ndarray:
    """High bit of each byte lane set where that lane of ``v`` is zero (exact, no borrows)."""
    return ~(((v & _LOW7) + _LOW7) | v) & _HIGH


def _members(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Lane flags (high bits): lanes of ``x`` whose byte occurs anywhere in ``y``."""
    hit = _zero_lanes(x ^ y)
    for r in range(1, 8):
        rot = (y >> np.uint64(8 * r)) | (y << np.uint64(64 - 8 * r))
        hit |= _zero_lanes(x ^ rot)
    return hit


def _encode_words(routes: np.ndarray, ref_routes: np.ndarray, has_ref) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`encode` for k = 8 one-byte ids: membership by comparing each word with the
    8 byte-rotations of the other (O(rows·L) word operations, chunked)."""
    n, L, _ = routes.shape
    keep = np.zeros((n, L, 8), dtype=bool)
    place = np.zeros((n, L, 8), dtype=bool)
    own_w = np.ascontiguousarray(routes).view(np.uint64).reshape(n, L)
    ref_w = np.ascontiguousarray(ref_routes).view(np.uint64).reshape(n, L)
    ok = _ascending(routes) & _ascending(ref_routes)
    if has_ref is not None:
        ok &= np.asarray(has_ref, dtype=bool)[:, None]
    step = max(1, (1 << 16) // max(L, 1))
    for s in range(0, n, step):
        a, b = own_w[s:s + step], ref_w[s:s + step]
        for out, x, y in ((place, a, b), (keep, b, a)):
            flags = (_members(x, y) >> np.uint64(7)).view(np.uint8).reshape(*x.shape, 8)
            out[s:s + step] = flags.astype(bool) & ok[s:s + step, :, None]
    prev = np.zeros_like(routes)
    prev[..., 1:] = routes[..., :-1]
    gaps = routes - prev
    return pack_bits(keep), encode_place(place), gaps[~place]


def _ungap_words(words: np.ndarray, pmask: np.ndarray) -> None:
    # Slot 0's gap is its id; a later free lane adds the (final) id of the lane before it.
    lanes = words.view(np.uint8).reshape(*words.shape, 8)
    for j in range(1, 8):
        free = ((pmask >> j) & 1) ^ 1
        lanes[..., j] += lanes[..., j - 1] * free
