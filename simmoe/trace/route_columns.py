"""Routes from a trace file's route columns (reference-delta form, :mod:`simmoe.trace.route_codec`).

Each of ``root_routes`` and ``node_routes`` is stored as three binary
columns, ``keep``, ``place`` and ``new`` (``docs/trace-format.md``).  The
parts are shape-checked against the geometry, then decoded all requests at
once: roots rank by rank within their request (a root's reference is the
previous row), nodes level by level (a node's reference is its parent, a
level-1 node's the root).  Errors are :class:`~simmoe.errors.TraceError`
naming the file, row and column.
"""

from __future__ import annotations

import contextlib
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from simmoe.errors import TraceError
from simmoe.trace import route_codec
from simmoe.trace.schema import ModelGeometry

# Threads for decoding node routes (numpy releases the GIL in its loops).
DECODE_THREADS = min(2, os.cpu_count() or 1)


def _binary_column(col: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(offsets int64 [rows + 1], flat uint8 data) of a binary column, chunks concatenated."""
    ptrs, datas, base = [np.zeros(1, dtype=np.int64)], [], 0
    for chunk in col.chunks:
        large = pa.types.is_large_binary(chunk.type)
        _, obuf, dbuf = chunk.buffers()
        off = np.frombuffer(obuf, dtype=np.int64 if large else np.int32)[chunk.offset:chunk.offset + len(chunk) + 1]
        off = off.astype(np.int64)
        data = np.frombuffer(dbuf, dtype=np.uint8) if dbuf is not None else np.zeros(0, np.uint8)
        datas.append(data[off[0]:off[-1]])
        ptrs.append(off[1:] - off[0] + base)
        base += int(off[-1] - off[0])
    if len(datas) == 1:  # the usual case: no copy
        return np.concatenate(ptrs), datas[0]
    return np.concatenate(ptrs), (np.concatenate(datas) if datas else np.zeros(0, np.uint8))


def _route_parts(table: pa.Table, who: str, cells_per_row: np.ndarray, geometry: ModelGeometry,
                 path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Keep and place masks per cell and the new-slot gaps, after shape checks.

    Word path (:func:`route_codec.word_path`): masks as one lane-mask byte
    per cell; otherwise ``bool [cells, k]``.
    """
    k, L = geometry.top_k, geometry.num_layers
    field = f"{who}_routes"
    codes = []
    for part, width in (("keep", route_codec.mask_bytes(k)), ("place", route_codec.place_bytes(k))):
        ptr, data = _binary_column(table.column(f"{field}_{part}"))
        lengths = np.diff(ptr)
        bad = np.flatnonzero(lengths != cells_per_row * width)
        if len(bad):
            row = int(bad[0])
            raise TraceError(f"{int(lengths[row])} bytes, expected {int(cells_per_row[row] * width)} "
                             f"({int(cells_per_row[row] // L)} route rows x {L} layers x {width} B): "
                             f"route array of the wrong shape", path=path, row=row, field=f"{field}_{part}")
        codes.append(data.reshape(-1, width))
    if route_codec.word_path(k, geometry.route_dtype):
        keep = codes[0][:, 0]
        place, bad = route_codec.place_lanes(keep, codes[1][:, 0])
    else:
        keep, place, bad = route_codec.unpack_masks(codes[0], codes[1], k)
    if bad.any():
        row = _row_of_cell(int(np.flatnonzero(bad)[0]), cells_per_row)
        raise TraceError("inconsistent keep/place codes (bits beyond top-k, or a place code that does not "
                         "match the number of kept experts)", path=path, row=row, field=f"{field}_place")
    ptr, data = _binary_column(table.column(f"{field}_new"))
    itemsize = geometry.route_dtype.itemsize
    kept_per_row = np.zeros(len(cells_per_row), dtype=np.int64)
    nonempty = np.flatnonzero(cells_per_row > 0)
    if len(nonempty):
        cell_start = np.cumsum(cells_per_row) - cells_per_row
        kept_per_row[nonempty] = np.add.reduceat(route_codec.kept_counts(codes[0]), cell_start[nonempty],
                                                 dtype=np.int64)
    want = (cells_per_row * k - kept_per_row) * itemsize
    lengths = np.diff(ptr)
    bad = np.flatnonzero(lengths != want)
    if len(bad):
        row = int(bad[0])
        raise TraceError(f"{int(lengths[row])} bytes of new expert ids, the masks call for {int(want[row])}: "
                         f"route array of the wrong shape", path=path, row=row, field=f"{field}_new")
    new_gaps = data.view(geometry.route_dtype) if itemsize > 1 else data
    return keep, place, new_gaps


def _row_of_cell(cell: int, cells_per_row: np.ndarray) -> int:
    return int(np.searchsorted(np.cumsum(cells_per_row), cell, side="right"))


def _batches(key: np.ndarray, first: int):
    """Row indices grouped by ``key`` value, for values ``first .. max`` in increasing order."""
    order = np.argsort(key, kind="stable")
    bounds = np.searchsorted(key[order], np.arange(first, int(key.max(initial=first - 1)) + 2))
    for b in range(len(bounds) - 1):
        yield order[bounds[b]:bounds[b + 1]]


def decode_roots(table: pa.Table, pos_request: np.ndarray, geometry: ModelGeometry, path: str) -> np.ndarray:
    """Root routes ``[P, L, k]``: each root against the previous row of its request, rank by rank."""
    P, L, k = len(pos_request), geometry.num_layers, geometry.top_k
    keep, place, gaps = _route_parts(table, "root", np.full(P, L, dtype=np.int64), geometry, path)
    words = route_codec.word_path(k, geometry.route_dtype)
    keep, place = ((keep.reshape(P, L), place.reshape(P, L)) if words
                   else (keep.reshape(P, L, k), place.reshape(P, L, k)))
    # A root's reference is the previous row when that row belongs to the same request.
    same = np.zeros(P, dtype=bool)
    same[1:] = pos_request[1:] == pos_request[:-1]
    first = np.flatnonzero(~same)
    has_keep = keep[first].reshape(len(first), -1).any(axis=1) if P else np.zeros(0, dtype=bool)
    if has_keep.any():
        raise TraceError("the first position of a request keeps experts of a reference it does not have",
                         path=path, row=int(first[np.flatnonzero(has_keep)[0]]), field="root_routes_keep")
    # Rank of each row within its run of same-request rows; decode rank by rank, all requests at once.
    rank = np.arange(P) - np.maximum.accumulate(np.where(same, 0, np.arange(P)))
    if words:
        routes = route_codec.new_words(place.reshape(-1), gaps).reshape(P, L)
        route_codec.ungap_words(routes, first, place)
        for rows in _batches(rank, 1):
            route_codec.resolve_words(routes, rows, lambda r: routes[r - 1], keep, place)
        return routes.view(np.uint8).reshape(P, L, k)
    routes = np.empty((P, L, k), dtype=geometry.route_dtype)
    route_codec.fill_new(place, gaps, routes)
    route_codec.resolve_unreferenced(routes, first, place)
    for rows in _batches(rank, 1):
        route_codec.resolve(routes, rows, routes[rows - 1], keep, place)
    return routes


@contextlib.contextmanager
def _no_pool():
    yield None


def decode_nodes(table: pa.Table, node_ptr: np.ndarray, parent: np.ndarray, level: np.ndarray,
                  root_routes: np.ndarray, geometry: ModelGeometry, path: str) -> np.ndarray:
    """Node routes ``[M, L, k]``: each node against its parent (level 1 against the root), level by level."""
    P, M = len(node_ptr) - 1, int(node_ptr[-1])
    L, k = geometry.num_layers, geometry.top_k
    keep, place, gaps = _route_parts(table, "node", np.diff(node_ptr) * L, geometry, path)
    node_pos = np.repeat(np.arange(P, dtype=np.int64), np.diff(node_ptr))
    global_parent = node_ptr[node_pos] + parent.astype(np.int64)
    if route_codec.word_path(k, geometry.route_dtype):
        keep, place = keep.reshape(M, L), place.reshape(M, L)
        root_words = root_routes.view(np.uint64).reshape(P, L)
        with ThreadPoolExecutor(max_workers=DECODE_THREADS) if DECODE_THREADS > 1 else _no_pool() as pool:
            routes = route_codec.new_words(place.reshape(-1), gaps, pool).reshape(M, L)
            for d, rows in enumerate(_batches(level, 1)):
                ref = (lambda r: root_words[node_pos[r]]) if d == 0 else (lambda r: routes[global_parent[r]])
                route_codec.resolve_words(routes, rows, ref, keep, place, pool)
        return routes.view(np.uint8).reshape(M, L, k)
    keep, place = keep.reshape(M, L, k), place.reshape(M, L, k)
    routes = np.empty((M, L, k), dtype=geometry.route_dtype)
    route_codec.fill_new(place, gaps, routes)
    for d, rows in enumerate(_batches(level, 1)):
        ref = root_routes[node_pos[rows]] if d == 0 else routes[global_parent[rows]]
        route_codec.resolve(routes, rows, ref, keep, place)
    return routes
