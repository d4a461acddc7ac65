"""Dense routing arrays: ``experts[tokens, MoE layers, top-k]`` with optional per-token arrays.

Inputs: ``.npy`` (the routes alone: one request, every token an output
token), ``.npz`` and ``.safetensors`` (named arrays), or a parquet / JSON
lines table whose experts column holds one ``[layers][top-k]`` list per row.
Besides the routes (``--experts-col``, default ``experts``; a file holding a
single array needs no name), a file may hold one entry per token of:

* ``request_id`` (``--request-col``): integers or strings; without it the
  whole file is one request named after the file;
* ``token_idx`` (``--token-col``): the token's index within its request;
  without it the output tokens of a request are its rows in file order;
* the phase (``--prefill-col``, no default): booleans (true = prompt),
  0/1, or the words ``prompt``/``prefill`` and ``output``/``decode``;
* vocabulary ids (``--token-id-col``, no default).

A cell (token, layer) whose k entries are all −1 has no routes (vLLM marks
prompt positions served from its prefix cache so): it is missing, like an
absent record in the long format.  Reading safetensors needs neither torch
nor the ``safetensors`` package (``simmoe.trace.safetensors_reader``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from simmoe.errors import TraceError
from simmoe.trace.importer_common import (
    DEFAULT_COLUMNS,
    MAX_TOKEN_INDEX,
    GeometryMismatch,
    ImportReport,
    RouteColumns,
    TokenTable,
    check_experts,
    check_layers,
    first_null,
    integers,
    phase_flags,
    request_codes,
    union_buffer,
)
from simmoe.trace.safetensors_reader import DTYPES, SafetensorsFile

ROLES = ("request", "token", "token_id", "prefill")


# ----------------------------------------------------------------- sources ---


class _Source:
    """Named arrays of one file; ``names`` lists them, ``get`` reads one."""

    names: list[str]

    def dtype_name(self, name: str) -> str | None:  # before reading, where the format allows
        return None

    def get(self, name: str):
        raise NotImplementedError


class _Npy(_Source):
    def __init__(self, src: str):
        try:
            self.arr = np.load(src, mmap_mode="r", allow_pickle=False)
        except Exception as exc:  # numpy raises many kinds on a damaged header or body
            raise TraceError(f"cannot read as npy: {str(exc).splitlines()[0]}", path=src) from None
        if not isinstance(self.arr, np.ndarray):
            raise TraceError("cannot read as npy: not a single array", path=src)
        self.names = ["(the array)"]

    def get(self, name):
        return self.arr


class _Npz(_Source):
    def __init__(self, src: str):
        self.src = src
        try:
            self.npz = np.load(src, allow_pickle=False)
        except Exception as exc:  # numpy raises many kinds on a damaged header or body
            raise TraceError(f"cannot read as npz: {str(exc).splitlines()[0]}", path=src) from None
        if not hasattr(self.npz, "files"):
            raise TraceError(
                "cannot read as npz: a single .npy array (name the file .npy)", path=src
            )
        self.names = list(self.npz.files)

    def get(self, name):
        try:
            return self.npz[name]
        except Exception as exc:  # numpy raises many kinds on a damaged header or body
            raise TraceError(
                f"cannot read array {name!r}: {str(exc).splitlines()[0]}", path=self.src, field=name
            ) from None


class _Safetensors(_Source):
    def __init__(self, src: str):
        self.file = SafetensorsFile(src)
        self.names = list(self.file.tensors)

    def dtype_name(self, name):
        return self.file.tensors[name].dtype

    def get(self, name):
        return self.file.array(name)


class _Table(_Source):
    def __init__(self, table: pa.Table):
        self.table = table
        self.names = list(table.column_names)

    def get(self, name):
        return self.table.column(name).combine_chunks()


class _Dict(_Source):
    """Arrays a tool's log was turned into (simmoe.trace.importer_tools), by name."""

    def __init__(self, arrays: dict):
        self.arrays = arrays
        self.names = list(arrays)

    def get(self, name):
        return self.arrays[name]


def dict_source(arrays: dict) -> _Source:
    return _Dict(arrays)


def open_source(src: str, fmt: str) -> _Source:
    return {"npy": _Npy, "npz": _Npz, "safetensors": _Safetensors}[fmt](src)


def table_source(table: pa.Table) -> _Source:
    return _Table(table)


# ------------------------------------------------------------------ tokens ---


def tokens_from_source(
    source: _Source,
    src: str,
    columns: RouteColumns,
    *,
    num_layers: int | None,
    num_experts: int | None,
    top_k: int | None,
    report: ImportReport,
) -> tuple[TokenTable, int, int, int, dict[str, str]]:
    """The token table of a dense input, with L, N, k and the arrays used (role → name)."""
    report.layout = "dense"
    used: dict[str, str] = {}
    routes, field = _read_routes(source, src, columns, used)
    T, L, k = _check_routes(routes, src, field, num_layers, top_k)
    extras = _per_token_arrays(source, src, columns, T, used)
    if "request" in extras:
        req, req_names = request_codes(extras["request"], used["request"], src)
    else:
        req, req_names = np.zeros(T, dtype=np.int64), np.array([Path(src).stem], dtype=object)
    prompt = (
        phase_flags(extras["prefill"], used["prefill"], src)
        if "prefill" in extras
        else np.zeros(T, dtype=bool)
    )
    idx = integers(extras["token"], used["token"], src) if "token" in extras else None
    if idx is not None:
        _check_token_index(idx, req, req_names, src, used["token"])
    token_id = integers(extras["token_id"], used["token_id"], src) if "token_id" in extras else None

    missing = _missing_cells(routes, src, field)
    present = ~missing
    N = _num_experts(routes, num_experts, src, field, report)
    check_experts(N, k, src, field)
    union = union_buffer(len(req_names), L, N, src)  # checked before the big temporaries below
    s = _sorted_routes(routes, missing, N, src, field)

    report.records = T
    report.prefill_records = int(prompt.sum())
    pr = np.flatnonzero(prompt)
    report.prefill_missing_cells = int((~present[pr]).sum())
    if len(pr):
        rr, ll = np.nonzero(present[pr])
        rows = pr[rr]
        union[req[rows][:, None], ll[:, None], s[rows, ll]] = True

    def missing_layer(i: int) -> int:
        return int(np.flatnonzero(missing[i])[0])

    tt = TokenTable(
        req=req,
        req_names=req_names,
        idx=idx,
        prompt=prompt,
        token_id=token_id,
        cells=present.sum(axis=1).astype(np.int64),
        rows=np.arange(T, dtype=np.int64),
        routes_of=lambda sel: s[sel],
        missing_layer=missing_layer,
        prefill_union=union,
    )
    return tt, L, N, k, used


def _read_routes(source: _Source, src: str, columns: RouteColumns, used: dict) -> tuple[np.ndarray, str | None]:
    """The routes array (integer expert ids) and the field errors name (None for a .npy file)."""
    routes_name = _routes_name(source, columns.experts, src)
    field = None if isinstance(source, _Npy) else routes_name  # a .npy file is the array itself
    if field is not None:
        used["experts"] = routes_name
    dtype = source.dtype_name(routes_name)
    np_dtype = DTYPES.get(dtype) if dtype is not None else None
    if dtype is not None and (np_dtype is None or np_dtype.kind not in "iu"):
        raise TraceError(
            f"routes of dtype {dtype}: expected integer expert ids", path=src, field=field
        )
    raw = source.get(routes_name)
    routes = routes_from_column(raw, src, field) if isinstance(raw, pa.Array) else np.asarray(raw)
    return routes, field


def _per_token_arrays(source: _Source, src: str, columns: RouteColumns, T: int, used: dict) -> dict:
    """Role → per-token array, for the optional arrays present (request, token, token id, phase)."""
    extras = {}
    for role in ROLES:
        name = getattr(columns, role)
        if name is None or isinstance(source, _Npy):
            if name is not None and name != getattr(DEFAULT_COLUMNS, role):
                raise TraceError(
                    f"a .npy file holds only the routes, no array {name!r}; use .npz or "
                    f".safetensors for per-token arrays",
                    path=src,
                    field=name,
                )
            continue
        if name not in source.names:
            if name != getattr(DEFAULT_COLUMNS, role) or role in ("token_id", "prefill"):
                raise TraceError(
                    f"no such array (arrays are: {', '.join(source.names)})", path=src, field=name
                )
            continue
        extras[role] = _per_token(source.get(name), T, src, name)
        used[role] = name
    return extras


def _missing_cells(routes: np.ndarray, src: str, field) -> np.ndarray:
    """bool [T, L]: -1 in every slot of a cell marks it missing; anything else must be an expert id."""
    T, L = routes.shape[:2]
    missing = np.zeros((T, L), dtype=bool)
    if routes.dtype.kind == "i" and routes.min() < 0:
        neg = routes < 0
        missing = (routes == -1).all(axis=2)
        bad = neg.any(axis=2) & ~missing
        if bad.any():
            t, layer = (int(v) for v in np.argwhere(bad)[0])
            cell = routes[t, layer].tolist()
            what = (
                "mixes -1 (no routes) with expert ids"
                if -1 in cell
                else f"has negative expert id {min(cell)}"
            )
            raise TraceError(f"layer {layer}: {cell} {what}", path=src, row=t, field=field)
    if missing.all():
        raise TraceError("no routes: every (token, layer) cell is -1", path=src, field=field)
    return missing


def _num_experts(routes: np.ndarray, num_experts: int | None, src: str, field, report: ImportReport) -> int:
    """N: the model's (every id checked against it), or the largest id + 1 (recorded as inferred)."""
    vmax = int(routes.max())
    if num_experts is None:
        report.inferred.append(f"num_experts={vmax + 1} (largest expert id + 1; a lower bound)")
        return vmax + 1
    if vmax >= num_experts:
        t, layer = (int(v) for v in np.argwhere((routes >= num_experts).any(axis=2))[0])
        raise GeometryMismatch(
            f"layer {layer}: expert id {int(routes[t, layer].max())} outside [0, {num_experts}) "
            f"(the model's N)",
            path=src,
            row=t,
            field=field,
        )
    return num_experts


def _sorted_routes(routes: np.ndarray, missing: np.ndarray, N: int, src: str, field) -> np.ndarray:
    """Each cell's experts sorted (missing cells zero), as uint8/uint16; an expert twice in a cell fails."""
    s = np.sort(routes, axis=2)
    same = (s[:, :, 1:] == s[:, :, :-1]) & ~missing[:, :, None]
    if same.any():
        t, layer, j = (int(v) for v in np.argwhere(same)[0])
        raise TraceError(
            f"layer {layer}: expert {int(s[t, layer, j])} listed twice",
            path=src,
            row=t,
            field=field,
        )
    s[missing] = 0
    return s.astype(np.uint8 if N <= 256 else np.uint16)


def _routes_name(source: _Source, name: str, src: str) -> str:
    if isinstance(source, _Npy) or name in source.names:
        return name
    if name == DEFAULT_COLUMNS.experts and len(source.names) == 1:
        return source.names[0]
    raise TraceError(
        f"no routes array {name!r} (arrays are: {', '.join(source.names) or 'none'}; "
        f"choose one with --experts-col)",
        path=src,
        field=name,
    )


def _check_routes(
    routes: np.ndarray, src: str, field: str | None, num_layers: int | None, top_k: int | None
) -> tuple[int, int, int]:
    if routes.ndim != 3:
        raise TraceError(
            f"routes of shape {routes.shape}: expected 3 dimensions [tokens, MoE layers, top-k]",
            path=src,
            field=field,
        )
    if routes.dtype.kind not in "iu":
        raise TraceError(
            f"routes of dtype {routes.dtype}: expected integer expert ids", path=src, field=field
        )
    T, L, k = routes.shape
    for n, what in ((T, "tokens"), (L, "layers"), (k, "experts per token")):
        if n == 0:
            raise TraceError(f"routes of shape {routes.shape}: no {what}", path=src, field=field)
    if num_layers is not None and num_layers != L:
        raise GeometryMismatch(
            f"routes have {L} MoE layers, --num-layers says {num_layers}", path=src, field=field
        )
    check_layers(L, f"routes of {L} layers", src, field)
    if top_k is not None and k != top_k:
        raise GeometryMismatch(f"routes have top-{k}, --top-k says {top_k}", path=src, field=field)
    if routes.dtype == np.uint64 and routes.max() > np.iinfo(np.int64).max:
        raise TraceError("expert id beyond the int64 range", path=src, field=field)
    return T, L, k


def _per_token(values, T: int, src: str, name: str):
    if not isinstance(values, pa.Array):
        values = np.asarray(values)
        if values.ndim != 1:
            raise TraceError(
                f"shape {values.shape}: expected one entry per token ({T})", path=src, field=name
            )
    n = len(values)
    if n != T:
        raise TraceError(f"{n} entries, but the routes have {T} tokens", path=src, field=name)
    return values


def _check_token_index(
    idx: np.ndarray, req: np.ndarray, req_names: np.ndarray, src: str, name: str
) -> None:
    bad = np.flatnonzero((idx < 0) | (idx > MAX_TOKEN_INDEX))
    if len(bad):
        r = int(bad[0])
        raise TraceError(
            f"token index {idx[r]} outside [0, {MAX_TOKEN_INDEX}]", path=src, row=r, field=name
        )
    order = np.lexsort((idx, req))
    dup = np.flatnonzero((req[order][1:] == req[order][:-1]) & (idx[order][1:] == idx[order][:-1]))
    if len(dup):
        a, b = sorted((int(order[dup[0]]), int(order[dup[0] + 1])))
        raise TraceError(
            f"second row for request {req_names[req[a]]!r}, token {idx[a]} (first at row {a})",
            path=src,
            row=b,
            field=name,
        )


# ---------------------------------------------------------- nested lists ---


def routes_from_column(col: pa.Array, src: str, name: str | None) -> np.ndarray:
    """``[tokens, layers, top-k]`` from a column of ``[layers][top-k]`` lists, a row per token."""
    if col.null_count:
        raise TraceError("missing value", path=src, row=first_null(col), field=name)
    outer = pc.list_value_length(col).to_numpy(zero_copy_only=False)
    L = int(outer[0])
    bad = np.flatnonzero(outer != L)
    if len(bad):
        raise TraceError(
            f"{int(outer[bad[0]])} layers, but row 0 has {L}", path=src, row=int(bad[0]), field=name
        )
    inner = col.flatten()
    if inner.null_count:
        i = first_null(inner)
        raise TraceError(
            f"layer {i % L}: missing list of experts", path=src, row=i // L, field=name
        )
    lengths = pc.list_value_length(inner).to_numpy(zero_copy_only=False)
    k = int(lengths[0]) if len(lengths) else 0
    bad = np.flatnonzero(lengths != k)
    if len(bad):
        i = int(bad[0])
        raise TraceError(
            f"layer {i % L}: {int(lengths[i])} experts, but row 0 lists {k}",
            path=src,
            row=i // L,
            field=name,
        )
    values = inner.flatten()
    if values.null_count:
        i = first_null(values)
        raise TraceError(
            f"layer {(i // k) % L}: missing expert id", path=src, row=i // (k * L), field=name
        )
    if not pa.types.is_integer(values.type):
        raise TraceError(
            f"column has type {col.type}, expected lists of lists of integers", path=src, field=name
        )
    return values.to_numpy(zero_copy_only=False).reshape(len(col), L, k)
