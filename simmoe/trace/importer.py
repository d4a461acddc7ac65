"""Import routing logs of other tools as an autoregressive-only trace (empty pools) for cache studies.

Input: long format, one record per (request, token, layer) with the experts
the router chose — JSON lines, CSV or parquet.  Column names are
configurable (defaults ``request_id``, ``token_idx``, ``layer``,
``experts``); in CSV the experts are one field such as ``"3 17 42"``,
``"3,17,42"`` or ``"[3, 17, 42]"``.  Optional columns: the token's
vocabulary id, and a boolean flag marking prompt (prefill) records, whose
experts form the request's prefill union.

Records may come in any order.  The tokens of a request are the integers
from its smallest to its largest decode token index; every (token, layer)
cell without a record is *missing*.  Missing cells are counted and either
fail the import (default) or drop the incomplete tokens (the remaining
tokens are renumbered 0..n−1, so the tokens on both sides of a dropped one
become neighbours — the provenance records how many were dropped).  Nothing
is ever filled in.

Geometry: L = largest layer + 1, N = largest expert id + 1 and k = the
number of experts per record, unless given (then checked).  Cost: one sort
of the records, O(records·k) otherwise.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from simmoe.errors import SimmoeError, TraceError
from simmoe.trace.schema import IMPORTED, SCHEMA_VERSION, ModelGeometry, PoolShape, Requests, Trace

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
ON_GAP = ("fail", "drop")


@dataclass(frozen=True)
class RouteColumns:
    """Names of the columns of a routing log."""

    request: str = "request_id"
    token: str = "token_idx"
    layer: str = "layer"
    experts: str = "experts"
    token_id: str | None = None    # vocabulary id of the token (optional)
    prefill: str | None = None     # bool: the record belongs to the prompt (optional)


@dataclass
class ImportReport:
    """What the import found: counts for the user and for the provenance."""

    records: int = 0
    requests: int = 0
    positions: int = 0
    missing_cells: int = 0
    incomplete_tokens: int = 0
    dropped_tokens: int = 0
    dropped_requests: list[str] = field(default_factory=list)
    inferred: list[str] = field(default_factory=list)
    prefill_records: int = 0


def import_routes(path, *, fmt: str | None = None, columns: RouteColumns = RouteColumns(),
                  num_layers: int | None = None, num_experts: int | None = None, top_k: int | None = None,
                  expert_bytes: int = 0, model_name: str = "", dataset: str = "imported",
                  on_gap: str = "fail") -> tuple[Trace, ImportReport]:
    """Read a routing log and build an autoregressive-only :class:`Trace`.

    Raises :class:`TraceError` (file, row, field) for bad records and
    :class:`SimmoeError` for missing cells when ``on_gap="fail"``.  Row
    numbers count data records from 0 in file order.
    """
    src = str(path)
    if on_gap not in ON_GAP:
        raise SimmoeError(f"on_gap must be one of {', '.join(ON_GAP)}, got {on_gap!r}")
    if not Path(path).is_file():
        raise TraceError("no such file", path=src)
    fmt = fmt or FORMATS.get(Path(path).suffix.lower())
    if fmt not in ("jsonl", "csv", "parquet"):
        raise SimmoeError(f"{src}: cannot tell the format from the file name; pass --format jsonl, csv or parquet")
    table = _read_table(src, fmt, columns)
    report = ImportReport(records=table.num_rows)
    if table.num_rows == 0:
        raise TraceError("no records", path=src)

    req_codes, req_names = _request_codes(table.column(columns.request), columns.request, src)
    token = _integers(table, columns.token, src)
    layer = _integers(table, columns.layer, src)
    experts, k = _experts(table.column(columns.experts), columns.experts, top_k, src)
    token_id = _integers(table, columns.token_id, src) if columns.token_id else None
    prefill = _flags(table, columns.prefill, src) if columns.prefill else np.zeros(len(token), dtype=bool)
    report.prefill_records = int(prefill.sum())

    _check_range(layer, "layer", num_layers, src, columns.layer)
    _check_range(experts.min(axis=1), "expert id", None, src, columns.experts)
    L = num_layers if num_layers is not None else int(layer.max()) + 1
    N = num_experts if num_experts is not None else int(experts.max()) + 1
    if num_layers is None:
        report.inferred.append(f"num_layers={L} (largest layer + 1)")
    if num_experts is None:
        report.inferred.append(f"num_experts={N} (largest expert id + 1; a lower bound)")
    if top_k is None:
        report.inferred.append(f"top_k={k} (experts per record)")
    if N > 65536:
        raise TraceError(f"{N} experts: at most 65536 are supported", path=src, field=columns.experts)
    bad = np.flatnonzero(experts.max(axis=1) >= N)
    if len(bad):
        raise TraceError(f"expert id {int(experts[bad[0]].max())} outside [0, {N})", path=src, row=int(bad[0]),
                         field=columns.experts)
    if k > N:
        raise TraceError(f"{k} experts per record but only {N} experts", path=src, field=columns.experts)
    if (token < 0).any():
        row = int(np.flatnonzero(token < 0)[0])
        raise TraceError(f"negative token index {token[row]}", path=src, row=row, field=columns.token)

    # Sort by (request, token, layer); equal keys are duplicate records.
    order = np.lexsort((layer, token, req_codes))
    r_s, t_s, l_s = req_codes[order], token[order], layer[order]
    dup = np.flatnonzero((r_s[1:] == r_s[:-1]) & (t_s[1:] == t_s[:-1]) & (l_s[1:] == l_s[:-1]))
    if len(dup):
        a, b = sorted((int(order[dup[0]]), int(order[dup[0] + 1])))
        raise TraceError(f"second record for request {req_names[r_s[dup[0]]]!r}, token {t_s[dup[0]]}, "
                         f"layer {l_s[dup[0]]} (first at row {a})", path=src, row=b, field=columns.layer)
    R = len(req_names)
    prefill_union = np.zeros((R, L, N), dtype=bool)
    prompt_len = np.zeros(R, dtype=np.int32)
    if prefill.any():
        pf = np.flatnonzero(prefill)
        prefill_union[np.repeat(req_codes[pf], k), np.repeat(layer[pf], k), experts[pf].ravel()] = True
        keys = np.unique(req_codes[pf] * (int(token.max()) + 1) + token[pf])
        prompt_len = np.bincount(keys // (int(token.max()) + 1), minlength=R).astype(np.int32)
        # A token is either a prompt or an output token, never both.
        both = np.isin(req_codes * (int(token.max()) + 1) + token, keys) & ~prefill
        if both.any():
            row = int(np.flatnonzero(both)[0])
            raise TraceError(f"token {token[row]} of request {req_names[req_codes[row]]!r} has prefill and "
                             f"decode records", path=src, row=row, field=columns.prefill)
    dec = order[~prefill[order]]
    r_d, t_d, l_d = req_codes[dec], token[dec], layer[dec]

    # Tokens: each (request, token) pair with its number of layer records.
    new_tok = np.ones(len(dec), dtype=bool)
    new_tok[1:] = (r_d[1:] != r_d[:-1]) | (t_d[1:] != t_d[:-1])
    tok_start = np.flatnonzero(new_tok)
    tok_req, tok_idx = r_d[tok_start], t_d[tok_start]
    tok_cells = np.diff(np.append(tok_start, len(dec)))
    # Expected tokens of a request: min..max of its decode token indices.
    lo = np.full(R, np.iinfo(np.int64).max)
    hi = np.full(R, -1)
    np.minimum.at(lo, tok_req, tok_idx)
    np.maximum.at(hi, tok_req, tok_idx)
    has = hi >= 0
    expected_tokens = np.where(has, hi - lo + 1, 0)
    absent_tokens = int(expected_tokens.sum()) - len(tok_start)
    report.missing_cells = int(absent_tokens * L + (L - tok_cells).sum())
    complete = tok_cells == L
    report.incomplete_tokens = int(absent_tokens + (~complete).sum())
    if report.missing_cells:
        first = _first_gap(tok_req, tok_idx, tok_cells, lo, L, r_d, t_d, l_d, tok_start)
        if on_gap == "fail":
            raise SimmoeError(
                f"{src}: {report.missing_cells} (token, layer) cells have no record, in "
                f"{report.incomplete_tokens} tokens (first: request {req_names[first[0]]!r}, token {first[1]}, "
                f"layer {first[2]}); pass --on-gap drop to drop incomplete tokens (nothing is filled in)")
        report.dropped_tokens = report.incomplete_tokens

    keep_tok = np.flatnonzero(complete)
    P = len(keep_tok)
    pos_request_code = tok_req[keep_tok]
    counts = np.bincount(pos_request_code, minlength=R)
    alive = counts > 0
    report.dropped_requests = [str(req_names[r]) for r in np.flatnonzero(~alive)]
    if not alive.any():
        raise SimmoeError(f"{src}: no token has records for all {L} layers; nothing to import")
    remap = np.cumsum(alive) - 1
    pos_request = remap[pos_request_code].astype(np.int32)
    starts = np.concatenate([[0], np.cumsum(counts[alive])[:-1]])
    pos_index = (np.arange(P) - np.repeat(starts, counts[alive])).astype(np.int32)
    # Records of complete tokens are contiguous runs of L in `dec`, layers ascending.
    cell_rows = (tok_start[keep_tok][:, None] + np.arange(L)[None, :]).ravel()
    geometry = ModelGeometry(L, N, k, expert_bytes=int(expert_bytes), name=model_name)
    root_routes = experts[dec[cell_rows]].reshape(P, L, k).astype(geometry.route_dtype)
    if token_id is not None:
        root_token = token_id[dec[tok_start[keep_tok]]].astype(np.int32)
    else:
        root_token = np.zeros(P, dtype=np.int32)
    report.requests, report.positions = int(alive.sum()), P

    meta = {
        "schema_version": SCHEMA_VERSION,
        "provenance": {
            "kind": IMPORTED, "source": os.path.basename(src), "format": fmt,
            "columns": {k_: v for k_, v in vars(columns).items() if v is not None},
            "records": report.records, "prefill_records": report.prefill_records,
            "missing_cells": report.missing_cells, "on_gap": on_gap,
            "dropped_tokens": report.dropped_tokens, "dropped_requests": report.dropped_requests,
            "inferred": report.inferred,
            "token_ids": "recorded" if token_id is not None else "absent (stored as 0)",
            "prefill": "recorded" if columns.prefill else "absent (empty union, prompt_len 0)",
        },
        "geometry": geometry.to_dict(),
        "pool_shape": PoolShape(0, 0, 0, 0).to_dict(),
        "hardware": None,
    }
    requests = Requests(
        request_id=np.array([str(x) for x in req_names[alive]], dtype=object),
        dataset=np.array([dataset] * int(alive.sum()), dtype=object),
        prompt_len=prompt_len[alive], output_len=counts[alive].astype(np.int32),
        prefill_union=prefill_union[alive], prefill_time_ms=np.full(int(alive.sum()), math.nan))
    empty = np.zeros(0)
    trace = Trace(
        meta=meta, requests=requests, pos_request=pos_request, pos_index=pos_index,
        root_token=root_token, root_routes=root_routes, node_ptr=np.zeros(P + 1, dtype=np.int64),
        node_parent=empty.astype(np.int16), node_level=empty.astype(np.int8),
        node_token=empty.astype(np.int32), node_q=empty.astype(np.float32), node_p=empty.astype(np.float32),
        node_agree=empty.astype(bool), node_routes=np.zeros((0, L, k), dtype=geometry.route_dtype))
    return trace, report


# ----------------------------------------------------------------- reading ---

def _read_table(src: str, fmt: str, columns: RouteColumns) -> pa.Table:
    wanted = [columns.request, columns.token, columns.layer, columns.experts]
    wanted += [c for c in (columns.token_id, columns.prefill) if c]
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            names = pq.ParquetFile(src).schema_arrow.names
            _require(names, wanted, src)
            return pq.read_table(src, columns=wanted)
        if fmt == "csv":
            import pyarrow.csv as pcsv

            names = _csv_header(src)
            _require(names, wanted, src)
            types = {columns.request: pa.string(), columns.experts: pa.string()}
            return pcsv.read_csv(src, convert_options=pcsv.ConvertOptions(
                include_columns=wanted, column_types=types))
        import pyarrow.json as pjson

        table = pjson.read_json(src)
        _require(table.column_names, wanted, src)
        return table.select(wanted)
    except pa.ArrowException as exc:
        raise TraceError(f"cannot parse as {fmt}: {str(exc).splitlines()[0]}", path=src) from None


def _csv_header(src: str) -> list[str]:
    import csv

    with open(src, newline="") as fh:
        return next(csv.reader(fh), [])


def _require(names, wanted, src) -> None:
    for name in wanted:
        if name not in names:
            raise TraceError(f"missing column (columns are: {', '.join(map(str, names))}; "
                             f"choose names with the --*-col options)", path=src, field=name)


def _request_codes(col: pa.ChunkedArray, name: str, src: str) -> tuple[np.ndarray, np.ndarray]:
    """Request index of each record (order of first appearance) and the request ids."""
    if col.null_count:
        raise TraceError("missing value", path=src, row=_first_null(col), field=name)
    enc = pc.dictionary_encode(col.cast(pa.string())).combine_chunks()
    return enc.indices.to_numpy().astype(np.int64), np.array(enc.dictionary.to_pylist(), dtype=object)


def _first_null(col) -> int:
    return int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])


def _integers(table: pa.Table, name: str, src: str) -> np.ndarray:
    col = table.column(name)
    if col.null_count:
        raise TraceError("missing value", path=src, row=_first_null(col), field=name)
    if not pa.types.is_integer(col.type):
        raise TraceError(f"column has type {col.type}, expected integers", path=src, field=name)
    return col.to_numpy().astype(np.int64)


def _flags(table: pa.Table, name: str, src: str) -> np.ndarray:
    col = table.column(name)
    if col.null_count:
        raise TraceError("missing value", path=src, row=_first_null(col), field=name)
    if pa.types.is_boolean(col.type):
        return col.to_numpy(zero_copy_only=False).astype(bool)
    if pa.types.is_integer(col.type):
        v = col.to_numpy()
        if np.isin(v, (0, 1)).all():
            return v.astype(bool)
    raise TraceError(f"column has type {col.type}, expected booleans (true/false or 0/1)", path=src, field=name)


def _experts(col: pa.ChunkedArray, name: str, top_k: int | None, src: str) -> tuple[np.ndarray, int]:
    """Experts of every record, sorted: int64 [records, k]."""
    if col.null_count:
        raise TraceError("missing value", path=src, row=_first_null(col), field=name)
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        # "3 17 42", "3,17,42", "[3, 17, 42]", "3;17;42"
        stripped = pc.utf8_trim(col, characters="[]() \t")
        parts = pc.split_pattern_regex(stripped, pattern=r"[\s,;|]+")
        try:
            col = pc.cast(parts, pa.list_(pa.int64()))
        except pa.ArrowInvalid:
            bad = next(i for i, s in enumerate(parts.to_pylist())
                       if any(not x.lstrip("-").isdigit() for x in s))
            raise TraceError("expert list is not a list of integers", path=src, row=bad, field=name) from None
    if pa.types.is_fixed_size_list(col.type):
        col = col.cast(pa.list_(col.type.value_type))
    if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)) or \
            not pa.types.is_integer(col.type.value_type):
        raise TraceError(f"column has type {col.type}, expected a list of integers", path=src, field=name)
    arr = col.combine_chunks()
    lengths = pc.list_value_length(arr).to_numpy(zero_copy_only=False)
    if arr.flatten().null_count:
        raise TraceError("missing expert id in the list", path=src, field=name)
    k = int(top_k) if top_k is not None else int(lengths[0])
    bad = np.flatnonzero(lengths != k)
    if len(bad):
        raise TraceError(f"{int(lengths[bad[0]])} experts, expected {k}"
                         f"{'' if top_k is not None else ' like row 0 (pass --top-k to set it)'}",
                         path=src, row=int(bad[0]), field=name)
    if k < 1:
        raise TraceError("records list no experts", path=src, row=0, field=name)
    values = arr.flatten().to_numpy().astype(np.int64).reshape(-1, k)
    values.sort(axis=1)
    dup = np.flatnonzero((values[:, 1:] == values[:, :-1]).any(axis=1))
    if len(dup):
        raise TraceError(f"expert {int(values[dup[0]][np.flatnonzero(values[dup[0], 1:] == values[dup[0], :-1])[0]])} "
                         f"listed twice", path=src, row=int(dup[0]), field=name)
    return values, k


def _check_range(values: np.ndarray, what: str, limit: int | None, src: str, name: str) -> None:
    bad = np.flatnonzero(values < 0)
    if len(bad):
        raise TraceError(f"negative {what} {values[bad[0]]}", path=src, row=int(bad[0]), field=name)
    if limit is not None:
        bad = np.flatnonzero(values >= limit)
        if len(bad):
            raise TraceError(f"{what} {values[bad[0]]} outside [0, {limit})", path=src, row=int(bad[0]), field=name)


def _first_gap(tok_req, tok_idx, tok_cells, lo, L, r_d, t_d, l_d, tok_start) -> tuple[int, int, int]:
    """(request, token, layer) of the first missing cell in (request, token, layer) order."""
    # A token index skipped entirely inside a request's range: all its layers are missing.
    same_req = np.ones(len(tok_req), dtype=bool)
    same_req[1:] = tok_req[1:] == tok_req[:-1]
    step = np.zeros(len(tok_req), dtype=np.int64)
    step[1:] = tok_idx[1:] - tok_idx[:-1]
    candidates = []
    skipped = np.flatnonzero(same_req & (step > 1))
    if len(skipped):
        i = int(skipped[0])
        candidates.append((int(tok_req[i]), int(tok_idx[i - 1]) + 1, 0))
    short = np.flatnonzero(tok_cells < L)
    if len(short):
        i = int(short[0])
        layers = l_d[tok_start[i]:tok_start[i] + tok_cells[i]]
        missing = np.setdiff1d(np.arange(L), layers)
        candidates.append((int(tok_req[i]), int(tok_idx[i]), int(missing[0])))
    return min(candidates)
