"""Validation of an in-memory trace against the schema contract (``simmoe.trace.schema``).

Every check is vectorised over all positions and nodes (O(P·L·k + M·L·k)
time); on failure it raises :class:`~simmoe.errors.TraceError` naming the
file, the position row (the parquet row of the file) and the field, and
says which request, position or node is wrong.
"""

from __future__ import annotations

import numpy as np

from simmoe.errors import TraceError
from simmoe.trace.node_index import node_in_pool, row_of_node
from simmoe.trace.sampling import check_sampling
from simmoe.trace.schema import (
    HWPROBE,
    IMPORTED,
    READ_SCHEMA_VERSIONS,
    SYNTHETIC,
    ModelGeometry,
    PoolShape,
    Trace,
)

PROVENANCE_KINDS = (SYNTHETIC, HWPROBE, IMPORTED)
# p = q · p(parent) is recomputed in float64; recorders multiply in float32.
PATH_PROB_RTOL = 1e-4
PATH_PROB_ATOL = 1e-6


def validate_trace(trace: Trace, path=None) -> None:
    """Raise :class:`TraceError` unless ``trace`` satisfies the schema contract."""
    path = None if path is None else str(path)
    geometry, shape = _check_meta(trace.meta, path)
    _check_arrays(trace, geometry, shape, path)
    _check_requests(trace, geometry, path)
    _check_positions(trace, path)
    node_ptr = np.asarray(trace.node_ptr, dtype=np.int64)
    check_pool_structure(node_ptr, trace.node_parent, trace.node_level, path=path)
    _check_pool_limits(node_ptr, trace.node_level, shape, path)
    _check_probabilities(trace, node_ptr, path)
    check_sampling(trace, path)
    check_routes(trace.root_routes, geometry, "root_routes", path=path)
    check_routes(trace.node_routes, geometry, "node_routes", path=path, node_ptr=node_ptr)
    if (trace.root_token < 0).any():
        raise TraceError("negative token id", path=path, row=int(np.flatnonzero(trace.root_token < 0)[0]),
                         field="root_token")
    if (trace.node_token < 0).any():
        m = int(np.flatnonzero(trace.node_token < 0)[0])
        raise TraceError(f"node {node_in_pool(m, node_ptr)}: negative token id", path=path,
                         row=row_of_node(m, node_ptr), field="node_token")


# ------------------------------------------------------------------ meta ---

def _from_meta(cls, meta: dict, key: str, what: str, path):
    """``cls.from_dict(meta[key])``, a missing or malformed entry one :class:`TraceError` naming it."""
    try:
        return cls.from_dict(meta[key])
    except KeyError as exc:
        raise TraceError(f"bad {what}: no {exc}", path=path, field=f"meta.{key}") from None
    except (TypeError, ValueError) as exc:
        raise TraceError(f"bad {what}: {exc}", path=path, field=f"meta.{key}") from None


def checked_geometry(meta: dict, path) -> ModelGeometry:
    """``meta["geometry"]`` as a :class:`ModelGeometry`, checked as far as decoding the routes
    depends on it (sizes, top-k, at most 65,536 experts, per-layer counts)."""
    geometry = _from_meta(ModelGeometry, meta, "geometry", "model geometry", path)
    if geometry.num_layers < 1 or geometry.num_experts < 1 or not 1 <= geometry.top_k <= geometry.num_experts:
        raise TraceError(f"bad model geometry {geometry.to_dict()}: need L >= 1, N >= 1, 1 <= k <= N",
                         path=path, field="meta.geometry")
    if geometry.num_experts > 65536:
        raise TraceError(f"{geometry.num_experts} experts: at most 65536 are supported",
                         path=path, field="meta.geometry")
    if (problem := geometry.layer_problem()) is not None:
        raise TraceError(problem, path=path, field="meta.geometry")
    return geometry


def _check_meta(meta, path) -> tuple[ModelGeometry, PoolShape]:
    if not isinstance(meta, dict):
        raise TraceError("meta is not a dict", path=path, field="meta")
    version = meta.get("schema_version")
    if isinstance(version, bool) or version not in READ_SCHEMA_VERSIONS:
        raise TraceError(f"unknown schema version {version!r} (this simmoe knows versions "
                         f"{', '.join(map(str, READ_SCHEMA_VERSIONS))})", path=path, field="meta.schema_version")
    if version == 1 and "sampling" in meta:
        raise TraceError("sampled-verification data (meta.sampling) needs schema version 2", path=path,
                         field="meta.schema_version")
    prov = meta.get("provenance")
    if not isinstance(prov, dict) or prov.get("kind") not in PROVENANCE_KINDS:
        kind = prov.get("kind") if isinstance(prov, dict) else prov
        raise TraceError(f"provenance kind {kind!r} is not one of {', '.join(PROVENANCE_KINDS)}",
                         path=path, field="meta.provenance")
    geometry = checked_geometry(meta, path)
    shape = _from_meta(PoolShape, meta, "pool_shape", "pool shape", path)
    if min(shape.expand_topk, shape.depth, shape.max_nodes, shape.K) < 0:
        raise TraceError(f"negative value in pool shape {shape.to_dict()}", path=path, field="meta.pool_shape")
    return geometry, shape


# ---------------------------------------------------------- array shapes ---

def _check_arrays(trace: Trace, geometry: ModelGeometry, shape: PoolShape, path) -> tuple[int, int]:
    L, k = geometry.num_layers, geometry.top_k

    def need(name, kinds, ndim, length=None, tail=None):
        a = getattr(trace, name)
        if not isinstance(a, np.ndarray):
            raise TraceError(f"is {type(a).__name__}, expected a numpy array", path=path, field=name)
        if a.dtype.kind not in kinds:
            raise TraceError(f"has dtype {a.dtype}, expected {_KIND_NAMES[kinds]}", path=path, field=name)
        if (a.ndim != ndim or (length is not None and a.shape[0] != length)
                or (tail is not None and a.shape[1:] != tail)):
            want = [length if length is not None else "?", *(tail or ())]
            raise TraceError(f"has shape {a.shape}, expected ({', '.join(map(str, want))})"
                             f"{' (wrong shape)' if ndim > 1 else ''}", path=path, field=name)
        return a

    P = len(need("pos_index", "iu", 1))
    need("pos_request", "iu", 1, P)
    need("root_token", "iu", 1, P)
    need("root_routes", "iu", 3, P, (L, k))
    ptr = need("node_ptr", "iu", 1, P + 1)
    if ptr[0] != 0 or np.any(np.diff(ptr.astype(np.int64)) < 0):
        bad = 0 if ptr[0] != 0 else int(np.flatnonzero(np.diff(ptr.astype(np.int64)) < 0)[0])
        raise TraceError("node_ptr must start at 0 and never decrease", path=path, row=bad, field="node_ptr")
    M = int(ptr[-1])
    need("node_parent", "i", 1, M)
    need("node_level", "iu", 1, M)
    need("node_token", "iu", 1, M)
    need("node_q", "f", 1, M)
    need("node_p", "f", 1, M)
    need("node_agree", "b", 1, M)
    need("node_routes", "iu", 3, M, (L, k))
    if trace.node_target_prob is not None:
        tp = need("node_target_prob", "f", 1, M)
        bad = ~((tp >= 0) & (tp <= 1))
        if bad.any():
            m = int(np.flatnonzero(bad)[0])
            raise TraceError(f"node {node_in_pool(m, ptr)}: probability {tp[m]!r} outside [0, 1]",
                             path=path, row=row_of_node(m, ptr), field="node_target_prob")
    if trace.draft_time_ms is not None:
        dt = need("draft_time_ms", "f", 2, P, (shape.depth,))
        if (dt < 0).any():
            row = int(np.flatnonzero((dt < 0).any(axis=1))[0])
            raise TraceError("negative draft time", path=path, row=row, field="draft_time_ms")
        if np.isinf(dt).any():
            row = int(np.flatnonzero(np.isinf(dt).any(axis=1))[0])
            raise TraceError("infinite draft time", path=path, row=row, field="draft_time_ms")
    return P, M


_KIND_NAMES = {"iu": "an integer type", "i": "a signed integer type", "f": "a floating type", "b": "bool"}


# -------------------------------------------------------------- requests ---

def _check_requests(trace: Trace, geometry: ModelGeometry, path) -> None:
    req = trace.requests
    R = len(req.request_id)
    if R == 0:
        raise TraceError(NO_REQUESTS, path=path, field="requests.request_id")
    for name in ("dataset", "prompt_len", "output_len", "prefill_union", "prefill_time_ms"):
        a = getattr(req, name)
        if not isinstance(a, np.ndarray) or len(a) != R:
            raise TraceError(f"{len(a) if hasattr(a, '__len__') else '?'} entries for {R} requests",
                             path=path, field=f"requests.{name}")
    pu = req.prefill_union
    if pu.dtype != bool or pu.shape != (R, geometry.num_layers, geometry.num_experts):
        raise TraceError(f"{pu.dtype} {pu.shape}, expected bool {(R, geometry.num_layers, geometry.num_experts)}",
                         path=path, field="requests.prefill_union")
    for name in ("prompt_len", "output_len"):
        a = getattr(req, name)
        if a.dtype.kind not in "iu" or (a < 0).any():
            raise TraceError("must be non-negative integers", path=path, field=f"requests.{name}")
    pt = req.prefill_time_ms
    if pt.dtype.kind != "f" or (np.isinf(pt) | (pt < 0)).any():
        raise TraceError("must be finite times >= 0 in ms (NaN where unknown)", path=path,
                         field="requests.prefill_time_ms")
    ids = [str(x) for x in req.request_id]
    if len(set(ids)) != R:
        dup = next(x for i, x in enumerate(ids) if x in ids[:i])
        raise TraceError(f"request id {dup!r} appears twice", path=path, field="requests.request_id")


def _check_positions(trace: Trace, path) -> None:
    check_rows(trace.requests, trace.pos_request, trace.pos_index, path=path)


NO_REQUESTS = "the trace has no requests (a trace holds at least one)"


def check_rows(requests, pos_request: np.ndarray, pos_index: np.ndarray, path=None) -> None:
    """Rows sorted by request; positions of a request are 0 .. output_len - 1, each exactly once, in order.

    Needs only the request table and the two position columns, so reading
    runs it before decoding routes (roots are coded against the previous row
    of the same request).  A wrong position is named as a duplicate (and
    where the first one is), out of order (and where the expected one is)
    or missing.  O(P).
    """
    R, P = len(requests), len(pos_index)
    if R == 0:
        raise TraceError(NO_REQUESTS, path=path, field="requests.request_id")
    req = np.asarray(pos_request, dtype=np.int64)
    pos = np.asarray(pos_index, dtype=np.int64)
    bad = (req < 0) | (req >= R)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise TraceError(f"request index {req[row]} outside [0, {R}): the trace has {R} request"
                         f"{'s' if R != 1 else ''}", path=path, row=row, field="pos_request")
    if P and np.any(np.diff(req) < 0):
        row = int(np.flatnonzero(np.diff(req) < 0)[0]) + 1
        raise TraceError(f"request {req[row]} listed after request {req[row - 1]}: rows must be sorted by "
                         "request", path=path, row=row, field="pos_request")
    same = np.zeros(P, dtype=bool)
    same[1:] = req[1:] == req[:-1]
    run_start = np.maximum.accumulate(np.where(same, 0, np.arange(P))) if P else np.zeros(0, np.int64)
    expected = np.arange(P) - run_start
    bad = pos != expected
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        rid = requests.request_id[req[row]]
        start, end = int(run_start[row]), int(np.searchsorted(req, req[row], side="right"))
        want = int(expected[row])
        earlier = np.flatnonzero(pos[start:row] == pos[row])
        later = np.flatnonzero(pos[row + 1:end] == want)
        if pos[row] < 0:
            what = f"negative position {pos[row]}"
        elif len(earlier):
            what = f"duplicate position {pos[row]} (also at row {start + int(earlier[0])})"
        elif len(later):
            what = (f"positions out of order: position {pos[row]} at row {row} comes before position {want} "
                    f"at row {row + 1 + int(later[0])}; positions must be sorted")
        else:
            what = f"position {want} is missing (found {pos[row]})"
        raise TraceError(f"request {rid!r}: {what}", path=path, row=row, field="pos_index")
    counts = np.bincount(req, minlength=R)
    out_len = np.asarray(requests.output_len, dtype=np.int64)
    if np.any(counts != out_len):
        r = int(np.flatnonzero(counts != out_len)[0])
        rid = requests.request_id[r]
        first = int(np.searchsorted(req, r)) if counts[r] else None
        raise TraceError(f"request {rid!r} has {counts[r]} positions but output_len {out_len[r]}"
                         f"{' (positions missing at the end)' if counts[r] < out_len[r] else ''}",
                         path=path, row=first, field="requests.output_len")


# ------------------------------------------------------------------ pools ---

def check_pool_structure(node_ptr: np.ndarray, node_parent: np.ndarray, node_level: np.ndarray,
                         path=None) -> None:
    """Parents listed before their children and levels consistent with parents.

    ``node_parent[m]`` is an index within m's pool, ``-1`` for the root; the
    level of a child of the root is 1 and of any other node its parent's
    level plus one.  O(M).
    """
    node_ptr = np.asarray(node_ptr, dtype=np.int64)
    M = int(node_ptr[-1])
    if len(node_parent) != M or len(node_level) != M:
        raise TraceError(f"{len(node_parent)} parents and {len(node_level)} levels for {M} nodes",
                         path=path, field="node_parent")
    if not M:
        return
    sizes = np.diff(node_ptr)
    node_pos = np.repeat(np.arange(len(sizes)), sizes)
    j = np.arange(M) - node_ptr[node_pos]
    parent = np.asarray(node_parent, dtype=np.int64)
    bad = (parent < -1) | (parent >= j)
    if bad.any():
        m = int(np.flatnonzero(bad)[0])
        why = (f"parent {parent[m]} is listed after its child" if parent[m] >= j[m]
               else f"parent {parent[m]} is not a node index or -1 (root)")
        raise TraceError(f"node {j[m]}: {why}", path=path, row=int(node_pos[m]), field="node_parent")
    level = np.asarray(node_level, dtype=np.int64)
    gp = node_ptr[node_pos] + parent
    want = np.where(parent < 0, 1, level[np.maximum(gp, 0)] + 1)
    bad = level != want
    if bad.any():
        m = int(np.flatnonzero(bad)[0])
        raise TraceError(f"node {j[m]}: level {level[m]} but its parent {parent[m]} "
                         f"{'is the root' if parent[m] < 0 else f'has level {level[gp[m]]}'}"
                         f" (expected level {want[m]})", path=path, row=int(node_pos[m]), field="node_level")


def _check_pool_limits(node_ptr, node_level, shape: PoolShape, path) -> None:
    sizes = np.diff(node_ptr)
    if len(sizes) and sizes.max() > shape.max_nodes:
        row = int(np.flatnonzero(sizes > shape.max_nodes)[0])
        raise TraceError(f"pool of {sizes[row]} nodes, more than pool_shape.max_nodes {shape.max_nodes}",
                         path=path, row=row, field="node_parent")
    if len(node_level) and node_level.max() > shape.depth:
        m = int(np.flatnonzero(node_level > shape.depth)[0])
        raise TraceError(f"node {node_in_pool(m, node_ptr)}: level {node_level[m]} deeper than "
                         f"pool_shape.depth {shape.depth}", path=path, row=row_of_node(m, node_ptr),
                         field="node_level")


def _check_probabilities(trace: Trace, node_ptr, path) -> None:
    q = np.asarray(trace.node_q, dtype=np.float64)
    p = np.asarray(trace.node_p, dtype=np.float64)
    for name, a in (("node_q", q), ("node_p", p)):
        bad = ~((a >= 0) & (a <= 1))  # also catches NaN
        if bad.any():
            m = int(np.flatnonzero(bad)[0])
            raise TraceError(f"node {node_in_pool(m, node_ptr)}: probability {a[m]!r} outside [0, 1]",
                             path=path, row=row_of_node(m, node_ptr), field=name)
    if not len(q):
        return
    node_pos = np.repeat(np.arange(len(node_ptr) - 1), np.diff(node_ptr))
    parent = np.asarray(trace.node_parent, dtype=np.int64)
    parent_p = np.where(parent < 0, 1.0, p[np.maximum(node_ptr[node_pos] + parent, 0)])
    want = q * parent_p
    bad = np.abs(p - want) > PATH_PROB_ATOL + PATH_PROB_RTOL * want
    if bad.any():
        m = int(np.flatnonzero(bad)[0])
        raise TraceError(f"node {node_in_pool(m, node_ptr)}: path probability {p[m]:.7g} is not "
                         f"q x parent's p = {q[m]:.7g} x {parent_p[m]:.7g} = {want[m]:.7g}",
                         path=path, row=int(node_pos[m]), field="node_p")


# ----------------------------------------------------------------- routes ---

def check_routes(routes: np.ndarray, geometry: ModelGeometry, field: str, path=None,
                 node_ptr: np.ndarray | None = None) -> None:
    """Expert ids in [0, N), strictly ascending (hence distinct) within each layer.  O(rows·L·k).

    ``node_ptr`` given: rows are pool nodes and the error names the position
    row and the node; otherwise rows are positions.
    """
    if not routes.size:
        return
    N = geometry.num_experts
    if _routes_ok_swar(routes, N):
        return
    lo, hi = routes.min(), routes.max()
    if lo < 0 or hi >= N:
        bad = ((routes < 0) | (routes >= N)).any(axis=(1, 2))
        _route_error(int(np.flatnonzero(bad)[0]), routes, f"expert id outside [0, {N})", field, path, node_ptr,
                     lambda r: (r < 0) | (r >= N))
    if routes.shape[-1] > 1:
        bad = ~np.all(routes[..., 1:] > routes[..., :-1], axis=2)
        if bad.any():
            i = int(np.flatnonzero(bad.any(axis=1))[0])
            layer = int(np.flatnonzero(bad[i])[0])
            ids = routes[i, layer]
            why = "repeated" if len(np.unique(ids)) < len(ids) else "not sorted ascending"
            _route_error(i, routes, f"layer {layer}: expert ids {ids.tolist()} {why}", field, path, node_ptr)


_H = np.uint64(0x8080808080808080)
_ONES = np.uint64(0x0101010101010101)
_LOW7 = np.uint64(0x0080808080808080)   # lanes 0..6: each must be below the next


def _routes_ok_swar(routes: np.ndarray, N: int) -> bool:
    """Fast check for k = 8 one-byte ids with N <= 128: all ids < N and strictly ascending.

    One uint64 per (row, layer); SIMD-within-a-register comparisons on 7-bit
    lanes (no borrow crosses a lane because every lane is < 128).  Returns
    False when the check does not apply or finds a problem (the caller then
    locates it).
    """
    if routes.dtype != np.uint8 or routes.shape[-1] != 8 or N > 128 or not routes.flags.c_contiguous:
        return False
    w = routes.reshape(-1, 8).view(np.uint64).ravel()
    n_lanes = np.uint64(N * 0x0101010101010101)
    for s in range(0, len(w), 1 << 20):
        x = w[s:s + (1 << 20)]
        if (x & _H).any() or (((x | _H) - n_lanes) & _H).any():   # some id >= 128 or >= N
            return False
        nxt = (x >> np.uint64(8)) | _H                          # lane j: id[j + 1] + 128
        if ((~(nxt - (x + _ONES))) & _LOW7).any():               # some id[j + 1] < id[j] + 1
            return False
    return True


def _route_error(i, routes, message, field, path, node_ptr, where=None):
    if where is not None:
        layer = int(np.flatnonzero(where(routes[i]).any(axis=1))[0])
        message = f"layer {layer}: {message}: {routes[i, layer].tolist()}"
    if node_ptr is None:
        raise TraceError(message, path=path, row=i, field=field)
    raise TraceError(f"node {node_in_pool(i, node_ptr)}, {message}", path=path,
                     row=row_of_node(i, node_ptr), field=field)
