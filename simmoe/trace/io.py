"""Trace files: one self-describing, versioned parquet file per trace (zstd).

Layout (``docs/trace-format.md`` has the full description):

* one parquet row per (request, position), in trace order;
* scalar columns ``pos_request``, ``pos_index``, ``root_token``;
* one list column per node field (``node_parent``, ``node_level``,
  ``node_token``, ``node_q``, ``node_p``, ``node_agree`` and the optional
  ``node_target_prob``), each list holding the pool of that position;
  optional ``draft_time_ms`` (a list of ``depth`` floats per position);
* routes in reference-delta form (:mod:`simmoe.trace.route_codec`): binary
  columns ``root_routes_{keep,place,new}`` (root against the previous
  position's root of the same request) and ``node_routes_{keep,place,new}``
  (every node against its parent, level-1 nodes against the root);
* the parquet schema metadata key ``simmoe`` holds JSON with the schema
  version, the route codec, ``Trace.meta`` and the request table (the
  prefill expert unions bit-packed, zstd-compressed, base64) and
  ``content_sha256``, a SHA-256 over that JSON and every decoded array, so
  that a damaged file that still decodes is caught instead of read wrong
  (files written before the digest existed have none and are read without).

Reading is columnar: list and binary columns are turned into flat numpy
arrays from their arrow buffers, and routes are decoded level by level
(nodes) and position by position across all requests at once (roots;
:mod:`simmoe.trace.route_columns`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from simmoe.atomicio import write_atomic
from simmoe.errors import TraceError
from simmoe.trace import route_codec
from simmoe.trace.route_columns import decode_nodes, decode_roots
from simmoe.trace.schema import (
    READ_SCHEMA_VERSIONS,
    SCHEMA_VERSION,
    ModelGeometry,
    Requests,
    Trace,
    strict_int,
)
from simmoe.trace.validate import check_pool_structure, check_rows, checked_geometry, validate_trace

METADATA_KEY = b"simmoe"
FORMAT_NAME = "simmoe-trace"
ROUTE_CODEC = "reference-delta-gap-1"
ZSTD_LEVEL = 3  # level 3 compresses these columns as well as 9-19 and faster

# Required scalar, list and binary columns and their arrow value types.
SCALAR_COLUMNS = {"pos_request": pa.int32(), "pos_index": pa.int32(), "root_token": pa.int32()}
NODE_COLUMNS = {"node_parent": pa.int16(), "node_level": pa.int8(), "node_token": pa.int32(),
                "node_q": pa.float32(), "node_p": pa.float32(), "node_agree": pa.bool_()}
OPTIONAL_NODE_COLUMNS = {"node_target_prob": pa.float32(), "node_target_cdf": pa.float32()}
ROUTE_PARTS = ("keep", "place", "new")
ROUTE_COLUMNS = [f"{who}_routes_{part}" for who in ("root", "node") for part in ROUTE_PARTS]
DRAFT_TIME_COLUMN = "draft_time_ms"
DIGEST_KEY = "content_sha256"
# arrow's own type → dtype mapping (DataType.to_pandas_dtype) imports pandas, 0.15-0.2 s of every start-up
_ARROW_FLOATS = {"halffloat": np.float16, "float": np.float32, "double": np.float64}


def numpy_dtype(arrow_type: pa.DataType) -> np.dtype:
    """The numpy dtype of a primitive arrow type (bool, ints, floats), without importing pandas."""
    name = str(arrow_type)
    return np.dtype(_ARROW_FLOATS.get(name, name))


def array_values(arr: pa.Array) -> np.ndarray:
    """A primitive arrow array with no nulls as numpy: a read-only view of its buffer (bools unpacked).

    Read from the buffers because arrow's own conversions (``to_numpy``, ``__array__``) import pandas.
    """
    n, off = len(arr), arr.offset
    dtype = numpy_dtype(arr.type)
    data = arr.buffers()[1]
    if n == 0 or data is None:
        return np.zeros(0, dtype=dtype)
    if dtype == np.bool_:
        bits = np.frombuffer(data, dtype=np.uint8, count=(off + n + 7) // 8)
        return np.unpackbits(bits, count=off + n, bitorder="little")[off:].view(bool)
    return np.frombuffer(data, dtype=dtype, count=n, offset=off * dtype.itemsize)


HEADER_KEYS = {"format", "schema_version", "route_codec", "route_dtype", "place_coding", "meta", "requests",
               DIGEST_KEY}


# ---------------------------------------------------------------- writing ---

def write_trace(trace: Trace, path) -> None:
    """Validate ``trace`` and write it to ``path`` atomically (temp file + ``os.replace``).

    Raises :class:`TraceError` if the trace is invalid; nothing is written then.
    """
    path = Path(path)
    validate_trace(trace, path=str(path))
    table = _to_table(trace, str(path))
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise TraceError("the folder does not exist", path=str(path))
    write_atomic(path, lambda tmp: pq.write_table(
        table, tmp, compression="zstd", compression_level=ZSTD_LEVEL,
        use_dictionary=False, data_page_size=8 << 20, write_statistics=False,
        # Floats compress better split into byte planes; nested columns are named by their leaf path.
        column_encoding={f"{c}.list.element": "BYTE_STREAM_SPLIT"
                         for c in ("node_q", "node_p", *OPTIONAL_NODE_COLUMNS) if c in table.column_names},
    ))


def _to_table(trace: Trace, path: str) -> pa.Table:
    geometry = trace.geometry
    dtype = geometry.route_dtype
    P, M = trace.num_positions, trace.num_nodes
    node_ptr = np.asarray(trace.node_ptr, dtype=np.int64)
    pos_request = np.asarray(trace.pos_request, dtype=np.int32)
    root_routes = np.asarray(trace.root_routes, dtype=dtype)
    node_routes = np.asarray(trace.node_routes, dtype=dtype).reshape(M, geometry.num_layers, geometry.top_k)

    # Roots: against the previous row when it belongs to the same request.
    prev_ref = np.zeros(P, dtype=bool)
    prev_ref[1:] = pos_request[1:] == pos_request[:-1]
    ref = np.empty_like(root_routes)
    if P:
        ref[1:] = root_routes[:-1]
        ref[0] = 0
    root_parts = route_codec.encode(root_routes, ref, prev_ref)
    # Nodes: against the parent; level-1 nodes against their position's root.
    node_pos = np.repeat(np.arange(P, dtype=np.int64), np.diff(node_ptr))
    parent = np.asarray(trace.node_parent, dtype=np.int64)
    node_ref = np.empty_like(node_routes)
    top = parent < 0
    node_ref[top] = root_routes[node_pos[top]]
    node_ref[~top] = node_routes[node_ptr[node_pos[~top]] + parent[~top]]
    node_parts = route_codec.encode(node_routes, node_ref)
    del node_ref, ref

    L, kb = geometry.num_layers, route_codec.mask_bytes(geometry.top_k)
    row_cells = np.arange(P + 1, dtype=np.int64) * L
    node_cells = node_ptr * L
    columns: dict[str, pa.Array] = {
        "pos_request": pa.array(pos_request, pa.int32()),
        "pos_index": pa.array(np.asarray(trace.pos_index, dtype=np.int32), pa.int32()),
        "root_token": pa.array(np.asarray(trace.root_token, dtype=np.int32), pa.int32()),
    }
    for name, vtype in NODE_COLUMNS.items():
        columns[name] = _list_array(node_ptr, getattr(trace, name), vtype)
    for name in OPTIONAL_NODE_COLUMNS:
        if getattr(trace, name) is not None:
            columns[name] = _list_array(node_ptr, getattr(trace, name), pa.float32())
    if trace.draft_time_ms is not None:
        dt = np.asarray(trace.draft_time_ms, dtype=np.float32)
        columns[DRAFT_TIME_COLUMN] = _list_array(np.arange(P + 1, dtype=np.int64) * dt.shape[1],
                                                 dt.reshape(-1), pa.float32())
    pb = route_codec.place_bytes(geometry.top_k)
    for who, parts, cells in (("root", root_parts, row_cells), ("node", node_parts, node_cells)):
        keep, place, new = parts
        new_counts = geometry.top_k - route_codec.kept_counts(keep).reshape(-1).astype(np.int64)
        new_ptr = np.concatenate([[0], np.cumsum(new_counts, dtype=np.int64)])[cells] * dtype.itemsize
        columns[f"{who}_routes_keep"] = _binary_array(cells * kb, keep.reshape(-1))
        columns[f"{who}_routes_place"] = _binary_array(cells * pb, place.reshape(-1))
        columns[f"{who}_routes_new"] = _binary_array(new_ptr, new.reshape(-1).view(np.uint8))
    table = pa.table(columns)
    header = {
        "format": FORMAT_NAME,
        # a version-1 trace (read from an old file) is written back as version 1: its meta says so
        "schema_version": trace.meta.get("schema_version", SCHEMA_VERSION),
        "route_codec": ROUTE_CODEC,
        "route_dtype": dtype.name,
        "place_coding": route_codec.place_coding(geometry.top_k),
        "meta": trace.meta,
        "requests": _requests_to_json(trace.requests),
    }
    try:
        header[DIGEST_KEY] = content_digest(header, trace)
        blob = json.dumps(header, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TraceError(f"trace metadata is not JSON-serialisable: {exc}", path=path, field="meta") from None
    return table.replace_schema_metadata({METADATA_KEY: blob.encode()})


def _digest_arrays(trace: Trace):
    """(name, array) in the dtypes and shapes :func:`read_trace` returns, optional columns when present."""
    g = trace.geometry
    L, k = g.num_layers, g.top_k
    yield "pos_request", np.asarray(trace.pos_request, dtype=np.int32)
    yield "pos_index", np.asarray(trace.pos_index, dtype=np.int32)
    yield "root_token", np.asarray(trace.root_token, dtype=np.int32)
    yield "node_ptr", np.asarray(trace.node_ptr, dtype=np.int64)
    for name, vtype in NODE_COLUMNS.items():
        yield name, np.asarray(getattr(trace, name), dtype=numpy_dtype(vtype))
    yield "root_routes", np.asarray(trace.root_routes, dtype=g.route_dtype).reshape(-1, L, k)
    yield "node_routes", np.asarray(trace.node_routes, dtype=g.route_dtype).reshape(-1, L, k)
    if trace.node_target_prob is not None:
        yield "node_target_prob", np.asarray(trace.node_target_prob, dtype=np.float32)
    if trace.node_target_cdf is not None:
        yield "node_target_cdf", np.asarray(trace.node_target_cdf, dtype=np.float32)
    if trace.draft_time_ms is not None:
        yield DRAFT_TIME_COLUMN, np.asarray(trace.draft_time_ms, dtype=np.float32)


def content_digest(header: dict, trace: Trace) -> str:
    """SHA-256 (hex) of the header JSON (without the digest) and every array of ``trace``.

    Arrays are hashed in the dtypes that reading gives, so the digest of a
    written trace equals that of the trace read back.  O(bytes of the trace).
    """
    h = hashlib.sha256()
    rest = {key: value for key, value in header.items() if key != DIGEST_KEY}
    # as read back: tuples become lists, keys strings; then a canonical text
    h.update(json.dumps(json.loads(json.dumps(rest, allow_nan=False)), sort_keys=True).encode())
    for name, a in _digest_arrays(trace):
        a = np.ascontiguousarray(a)
        h.update(f"|{name}:{a.dtype.str}:{a.shape}|".encode())
        h.update((a.view(np.uint8) if a.dtype == bool else a).data)   # the buffer, no copy
    return h.hexdigest()


def _list_array(offsets: np.ndarray, values, vtype: pa.DataType) -> pa.Array:
    values = pa.array(np.asarray(values).reshape(-1), type=vtype)
    return pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), values)


def _binary_array(offsets: np.ndarray, data: np.ndarray) -> pa.Array:
    data = np.ascontiguousarray(data, dtype=np.uint8)
    return pa.Array.from_buffers(pa.large_binary(), len(offsets) - 1,
                                 [None, pa.py_buffer(np.ascontiguousarray(offsets, dtype=np.int64)),
                                  pa.py_buffer(data)])


def _requests_to_json(req: Requests) -> dict:
    union = np.asarray(req.prefill_union, dtype=bool)
    packed = np.packbits(union.reshape(-1))
    compressed = pa.compress(packed.tobytes(), codec="zstd", asbytes=True)
    return {
        "request_id": [str(x) for x in req.request_id],
        "dataset": [str(x) for x in req.dataset],
        "prompt_len": [int(x) for x in req.prompt_len],
        "output_len": [int(x) for x in req.output_len],
        "prefill_time_ms": [None if not math.isfinite(float(x)) else float(x) for x in req.prefill_time_ms],
        "prefill_union": {"shape": list(union.shape),
                          "zstd_base64": base64.b64encode(compressed).decode("ascii"),
                          "raw_bytes": int(len(packed))},
    }


# ---------------------------------------------------------------- reading ---

def read_trace(path, *, validate: bool = True) -> Trace:
    """Read a trace file into flat numpy arrays.

    Raises :class:`TraceError` (naming the file, the row and the field) on a
    file that is not a valid trace.  With ``validate=False`` only what
    decoding depends on is checked (columns, types, pool structure, the shape
    of the route columns).
    """
    spath = str(path)
    if Path(path).is_dir():
        raise TraceError("is a folder, not a trace file", path=spath)
    if not Path(path).is_file():
        raise TraceError("no such file", path=spath)
    # Damaged bytes make the parquet reader raise many kinds of errors (arrow's, OSError, a
    # UnicodeDecodeError from a column name...): whatever it raises means the file is unreadable.
    try:
        pfile = pq.ParquetFile(path, memory_map=True)
        schema = pfile.schema_arrow
    except Exception as exc:
        raise TraceError(f"not a parquet file ({_one_line(exc)})", path=spath) from None
    header = _read_header(schema, spath)
    meta = header["meta"]
    geometry = _header_geometry(header, spath)
    table = _read_table(pfile, schema, spath)
    pos_request = _scalar(table, "pos_request")
    pos_index = _scalar(table, "pos_index")
    root_token = _scalar(table, "root_token")
    requests = _requests_from_json(header["requests"], geometry, spath)
    # Roots are coded against the previous row of the same request: the rows must be right first.
    check_rows(requests, pos_request, pos_index, path=spath)
    node_ptr, node = _node_lists(table, spath)
    check_pool_structure(node_ptr, node["node_parent"], node["node_level"], path=spath)

    draft_time = _draft_time(table, spath)
    root_routes = decode_roots(table, pos_request, geometry, spath)
    node_routes = decode_nodes(table, node_ptr, node["node_parent"], node["node_level"],
                                root_routes, geometry, spath)
    trace = Trace(
        meta=meta, requests=requests,
        pos_request=pos_request, pos_index=pos_index, root_token=root_token,
        root_routes=root_routes, node_ptr=node_ptr,
        node_parent=node["node_parent"], node_level=node["node_level"], node_token=node["node_token"],
        node_q=node["node_q"], node_p=node["node_p"], node_agree=node["node_agree"],
        node_routes=node_routes, node_target_prob=node.get("node_target_prob"),
        node_target_cdf=node.get("node_target_cdf"),
        draft_time_ms=draft_time, path=spath,
    )
    if DIGEST_KEY in header and content_digest(header, trace) != header[DIGEST_KEY]:
        raise TraceError(f"the file is damaged: its content does not match its checksum ({DIGEST_KEY})",
                         path=spath, field=DIGEST_KEY)
    if validate:
        validate_trace(trace, path=spath)
    return trace


def _header_geometry(header: dict, path: str) -> ModelGeometry:
    """The model geometry of ``meta``, checked as far as decoding the routes depends on it."""
    meta = header.get("meta")
    if not isinstance(meta, dict):
        raise TraceError("bad model geometry: no 'meta'", path=path, field="meta.geometry")
    geometry = checked_geometry(meta, path)
    if header.get("route_dtype", geometry.route_dtype.name) != geometry.route_dtype.name:
        raise TraceError(f"route dtype {header.get('route_dtype')!r} does not fit {geometry.num_experts} "
                         f"experts (expected {geometry.route_dtype.name!r})", path=path, field="route_dtype")
    return geometry


def _read_table(pfile: pq.ParquetFile, schema: pa.Schema, path: str) -> pa.Table:
    """The whole table, once its column types are right, its buffers valid and no value missing."""
    _check_column_types(schema, path)
    try:
        table = pfile.read()
        table.validate(full=True)   # offsets within their buffers, before numpy views them
    except Exception as exc:
        raise TraceError(f"unreadable parquet data ({_one_line(exc)})", path=path) from None
    for name in table.column_names:
        col = table.column(name)
        if col.null_count:
            row = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
            raise TraceError("missing value", path=path, row=row, field=name)
        if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
            _check_no_null_elements(col, name, path)
    return table


def _draft_time(table: pa.Table, path: str) -> np.ndarray | None:
    """The optional ``draft_time_ms`` column as ``[P, depth]`` (one width for every row)."""
    if DRAFT_TIME_COLUMN not in table.column_names:
        return None
    P = table.num_rows
    dt_ptr, dt_values = _list_column(table.column(DRAFT_TIME_COLUMN))
    width = np.diff(dt_ptr)
    if P and np.any(width != width[0]):
        row = int(np.flatnonzero(width != width[0])[0])
        raise TraceError(f"{int(width[row])} levels, expected {int(width[0])} like row 0",
                         path=path, row=row, field=DRAFT_TIME_COLUMN)
    return dt_values.reshape(P, int(width[0]) if P else 0)


def _read_header(schema: pa.Schema, path: str) -> dict:
    raw = (schema.metadata or {}).get(METADATA_KEY)
    if raw is None:
        raise TraceError("not a simmoe trace (no 'simmoe' schema metadata)", path=path)
    try:
        header = json.loads(raw)
    except ValueError as exc:
        raise TraceError(f"unreadable trace metadata ({_one_line(exc)})", path=path, field="simmoe") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
        raise TraceError("not a simmoe trace (metadata has no format tag)", path=path, field="format")
    unknown = sorted(set(header) - HEADER_KEYS)
    if unknown:
        raise TraceError(f"unknown metadata key {unknown[0]!r} (damaged, or written by a newer simmoe)",
                         path=path, field="simmoe")
    if DIGEST_KEY in header and not isinstance(header[DIGEST_KEY], str):
        raise TraceError("the checksum is not a string", path=path, field=DIGEST_KEY)
    version = header.get("schema_version")
    if version not in READ_SCHEMA_VERSIONS or isinstance(version, bool):
        raise TraceError(f"unknown schema version {version!r} (this simmoe reads versions "
                         f"{', '.join(map(str, READ_SCHEMA_VERSIONS))})",
                         path=path, field="schema_version")
    if header.get("route_codec") != ROUTE_CODEC:
        raise TraceError(f"unknown route codec {header.get('route_codec')!r} (expected {ROUTE_CODEC!r})",
                         path=path, field="route_codec")
    for key in ("meta", "requests"):
        if not isinstance(header.get(key), dict):
            raise TraceError(f"metadata has no {key!r} object", path=path, field=key)
    if header["meta"].get("schema_version") != version:
        raise TraceError(f"schema version {header['meta'].get('schema_version')!r} of the trace's meta differs "
                         f"from the file's {version!r}", path=path, field="meta.schema_version")
    return header


def _check_column_types(schema: pa.Schema, path: str) -> None:
    names = set(schema.names)
    expected: dict[str, str] = {}
    for name, _vtype in SCALAR_COLUMNS.items():
        expected[name] = "scalar"
    for name in NODE_COLUMNS:
        expected[name] = "list"
    for name in ROUTE_COLUMNS:
        expected[name] = "binary"
    for name, _kind in expected.items():
        if name not in names:
            raise TraceError("missing column", path=path, field=name)
    for name in OPTIONAL_NODE_COLUMNS:
        if name in names:
            expected[name] = "list"
    if DRAFT_TIME_COLUMN in names:
        expected[DRAFT_TIME_COLUMN] = "list"
    value_types = {**SCALAR_COLUMNS, **NODE_COLUMNS, **OPTIONAL_NODE_COLUMNS, DRAFT_TIME_COLUMN: pa.float32()}
    for name, kind in expected.items():
        t = schema.field(name).type
        if kind == "scalar":
            ok, want = t == value_types[name], str(value_types[name])
        elif kind == "list":
            ok = (pa.types.is_list(t) or pa.types.is_large_list(t)) and t.value_type == value_types[name]
            want = f"list<{value_types[name]}>"
        else:
            ok, want = pa.types.is_binary(t) or pa.types.is_large_binary(t), "binary"
        if not ok:
            raise TraceError(f"column has type {t}, expected {want}", path=path, field=name)
    unknown = names - set(expected)
    if unknown:
        raise TraceError(f"unknown column (not in schema version {SCHEMA_VERSION})", path=path,
                         field=sorted(unknown)[0])


def _check_no_null_elements(col: pa.ChunkedArray, name: str, path: str) -> None:
    """A list column's elements must all be present (a null element would turn into NaN or garbage)."""
    base = 0
    for chunk in col.chunks:
        values = chunk.flatten()
        if values.null_count:
            off = np.asarray(chunk.offsets, dtype=np.int64)
            first = int(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0])
            row = base + int(np.searchsorted(off - off[0], first, side="right")) - 1
            raise TraceError("missing value in a list", path=path, row=row, field=name)
        base += len(chunk)


def _one_line(exc: BaseException) -> str:
    """An exception's text on one line (arrow's messages may span several)."""
    return " ".join(str(exc).split())


def _scalar(table: pa.Table, name: str) -> np.ndarray:
    col = table.column(name)
    if not col.num_chunks:
        return np.zeros(0, dtype=numpy_dtype(SCALAR_COLUMNS[name]))
    return np.concatenate([array_values(c) for c in col.chunks])


def _list_column(col: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(offsets int64 [rows + 1], flat values) of a list column, chunks concatenated."""
    ptrs, values, base = [np.zeros(1, dtype=np.int64)], [], 0
    vtype = col.type.value_type
    for chunk in col.chunks:
        off = array_values(chunk.offsets).astype(np.int64)
        ptrs.append(off[1:] - off[0] + base)
        base += int(off[-1] - off[0])
        values.append(array_values(chunk.flatten()))
    if not values:
        return ptrs[0], np.zeros(0, dtype=numpy_dtype(vtype))
    return np.concatenate(ptrs), np.concatenate(values)


def _node_lists(table: pa.Table, path: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    names = [*NODE_COLUMNS, *[c for c in OPTIONAL_NODE_COLUMNS if c in table.column_names]]
    node_ptr: np.ndarray = np.zeros(0, np.int64)   # every column's offsets: those of the first
    out: dict[str, np.ndarray] = {}
    for i, name in enumerate(names):
        ptr, values = _list_column(table.column(name))
        if i == 0:
            node_ptr = ptr
        elif not np.array_equal(ptr, node_ptr):
            row = int(np.flatnonzero(np.diff(ptr) != np.diff(node_ptr))[0])
            raise TraceError(f"{int(ptr[row + 1] - ptr[row])} entries but node_parent has "
                             f"{int(node_ptr[row + 1] - node_ptr[row])}", path=path, row=row, field=name)
        out[name] = values.astype(numpy_dtype(NODE_COLUMNS.get(name, pa.float32())), copy=False)
    return node_ptr, out


def _int_list(d: dict, key: str, path: str) -> np.ndarray:
    values = d[key]
    if not isinstance(values, list):
        raise TraceError(f"must be a list, got {type(values).__name__}", path=path, field=f"requests.{key}")
    bad = next((i for i, x in enumerate(values) if isinstance(x, bool) or not isinstance(x, int)), None)
    if bad is not None:
        raise TraceError(f"entry {bad} is {values[bad]!r}: must be an integer", path=path,
                         field=f"requests.{key}")
    if any(not 0 <= x < 2**31 for x in values):
        bad = next(i for i, x in enumerate(values) if not 0 <= x < 2**31)
        raise TraceError(f"entry {bad} is {values[bad]}: must be in [0, 2^31)", path=path,
                         field=f"requests.{key}")
    return np.array(values, dtype=np.int32)


def _requests_from_json(d: dict, geometry: ModelGeometry, path: str) -> Requests:
    try:
        ids, datasets = d["request_id"], d["dataset"]
        R = len(ids)
        for key in ("dataset", "prompt_len", "output_len", "prefill_time_ms"):
            if len(d[key]) != R:
                raise TraceError(f"{len(d[key])} entries for {R} requests", path=path, field=f"requests.{key}")
        pu = d["prefill_union"]
        try:
            shape = tuple(strict_int({"shape": x}, "shape") for x in pu["shape"])
            raw_bytes = strict_int(pu, "raw_bytes")
        except (KeyError, TypeError, ValueError) as exc:
            raise TraceError(f"bad header ({exc})", path=path, field="requests.prefill_union") from None
        if shape != (R, geometry.num_layers, geometry.num_experts):
            raise TraceError(f"shape {shape}, expected {(R, geometry.num_layers, geometry.num_experts)}",
                             path=path, field="requests.prefill_union")
        want_bytes = (int(np.prod(shape)) + 7) // 8
        if raw_bytes != want_bytes:
            raise TraceError(f"raw_bytes {raw_bytes}, expected {want_bytes} for shape {shape}",
                             path=path, field="requests.prefill_union")
        try:
            raw = pa.decompress(base64.b64decode(pu["zstd_base64"], validate=True),
                                decompressed_size=raw_bytes, codec="zstd", asbytes=True)
        except (ValueError, OSError, pa.ArrowException) as exc:
            raise TraceError(f"the expert unions cannot be decoded (damaged: {_one_line(exc)})", path=path,
                             field="requests.prefill_union") from None
        bits = np.unpackbits(np.frombuffer(raw, dtype=np.uint8))[:int(np.prod(shape))]
        if len(bits) != int(np.prod(shape)):
            raise TraceError("too few bits for its shape", path=path, field="requests.prefill_union")
        times = d["prefill_time_ms"]
        bad = next((i for i, x in enumerate(times)
                    if x is not None and (isinstance(x, bool) or not isinstance(x, (int, float)))), None)
        if bad is not None:
            raise TraceError(f"entry {bad} is {times[bad]!r}: must be a number or null", path=path,
                             field="requests.prefill_time_ms")
        for key, values in (("request_id", ids), ("dataset", datasets)):
            bad = next((i for i, x in enumerate(values) if not isinstance(x, str)), None)
            if bad is not None:
                raise TraceError(f"entry {bad} is {values[bad]!r}: must be a string", path=path,
                                 field=f"requests.{key}")
        return Requests(
            request_id=np.array(list(ids), dtype=object),
            dataset=np.array(list(datasets), dtype=object),
            prompt_len=_int_list(d, "prompt_len", path),
            output_len=_int_list(d, "output_len", path),
            prefill_union=bits.reshape(shape).astype(bool),
            prefill_time_ms=np.array([np.nan if x is None else float(x) for x in times], dtype=np.float64),
        )
    except TraceError:
        raise
    except (KeyError, TypeError, ValueError, OverflowError, pa.ArrowException) as exc:
        raise TraceError(f"bad request table ({exc!r})", path=path, field="requests") from None
