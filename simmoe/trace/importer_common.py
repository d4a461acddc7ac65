"""What both kinds of routing input share: options, limits, the token table, the trace.

Both readers (long records in ``importer_records``, dense arrays in
``importer_arrays``) reduce their input to a :class:`TokenTable`: one entry
per (request, token) with its phase (prompt or output), how many of the L
layers have routes, and a way to fetch the routes of the complete ones.
:func:`build_trace` then handles gaps the same way for both and assembles
the autoregressive-only trace.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from simmoe.errors import SimmoeError, TraceError
from simmoe.trace.schema import IMPORTED, SCHEMA_VERSION, ModelGeometry, PoolShape, Requests, Trace

ON_GAP = ("fail", "drop")
# Limits checked before anything is allocated from the input's numbers.
MAX_LAYERS = 1024  # the deepest MoE models have about a hundred
MAX_EXPERTS = 65536  # the trace stores expert ids as uint16 at most
MAX_TOKEN_INDEX = 2**31 - 1  # positions are int32 in the trace
MAX_UNION_BYTES = 8 << 30  # the prefill union, bool [requests, L, N], in memory

PROMPT_WORDS = ("prompt", "prefill")
OUTPUT_WORDS = ("output", "decode")


@dataclass(frozen=True)
class RouteColumns:
    """Names of the columns (record logs) or arrays (dense routing arrays) of the input."""

    request: str = "request_id"
    token: str = "token_idx"
    layer: str = "layer"
    experts: str = "experts"
    token_id: str | None = None  # vocabulary id of the token (optional)
    prefill: str | None = (
        None  # phase: true/"prompt"/"prefill" or false/"output"/"decode" (optional)
    )


DEFAULT_COLUMNS = RouteColumns()


class GeometryMismatch(TraceError):
    """The log disagrees with a given geometry (L, N or k from the flags or a catalogued model).

    Only this kind of error is a disagreement with a model; a missing column
    or a damaged file is a plain :class:`TraceError`.
    """


@dataclass
class ImportReport:
    """What the import found: counts for the user and for the provenance."""

    records: int = 0  # input rows: records (long format) or token rows (dense arrays)
    layout: str = "records"  # "records" or "dense"
    format: str = ""  # the layout read: a container (jsonl, csv, ...) or a tool's (warp, vllm, ...)
    requests: int = 0
    positions: int = 0
    missing_cells: int = 0
    incomplete_tokens: int = 0
    dropped_tokens: int = 0
    dropped_requests: list[str] = field(default_factory=list)
    inferred: list[str] = field(default_factory=list)
    prefill_records: int = 0  # prompt rows (records or tokens)
    prefill_missing_cells: int = 0
    notes: list[str] = field(default_factory=list)  # how a tool's log was read (assumptions)
    suspect: str = ""  # what suggests layers renumbered independently (long format), for gap messages


@dataclass
class TokenTable:
    """The input reduced to tokens (any order), before gaps are handled.

    ``idx`` is None when the input has no token index: the output tokens of
    a request are then its rows in input order, numbered 0, 1, …  ``cells``
    counts the layers with routes (L = complete).  ``routes_of(sel)`` gives
    the sorted routes ``[len(sel), L, k]`` of complete tokens ``sel``;
    ``missing_layer(i)`` the first layer without routes of token ``i``.
    """

    req: np.ndarray  # int64 [n]: index into req_names
    req_names: np.ndarray  # object [R]: request ids, order of first appearance
    idx: np.ndarray | None  # int64 [n]
    prompt: np.ndarray  # bool [n]
    token_id: np.ndarray | None  # int64 [n]
    cells: np.ndarray  # int64 [n]
    rows: np.ndarray  # int64 [n]: input row of the token (its first record)
    routes_of: Callable[[np.ndarray], np.ndarray]
    missing_layer: Callable[[int], int]
    prefill_union: np.ndarray  # bool [R, L, N]


# ------------------------------------------------------------- checks ---


def check_layers(L: int, what: str, src: str, name: str | None, row: int | None = None) -> None:
    """L layers at most MAX_LAYERS; ``what`` names where L came from (a flag, a layer, a shape)."""
    if L > MAX_LAYERS:
        raise TraceError(
            f"{what} is beyond the limit of {MAX_LAYERS} layers", path=src, row=row, field=name
        )


def check_experts(N: int, k: int, src: str, name: str | None) -> None:
    if N > MAX_EXPERTS:
        raise TraceError(f"{N} experts: at most {MAX_EXPERTS} are supported", path=src, field=name)
    if k > N:
        raise GeometryMismatch(
            f"{k} experts per token and layer but only {N} experts", path=src, field=name
        )


def union_buffer(R: int, L: int, N: int, src: str) -> np.ndarray:
    """The zeroed prefill union ``bool [R, L, N]``, after checking that it is of a sane size."""
    size = R * L * N
    if size > MAX_UNION_BYTES:
        raise SimmoeError(
            f"{src}: the prefill union of {R} requests x {L} layers x {N} experts would take "
            f"{size / 2**30:.1f} GiB; at most {MAX_UNION_BYTES >> 30} GiB (import fewer requests "
            f"per file)"
        )
    return np.zeros((R, L, N), dtype=bool)


def first_null(col) -> int:
    return int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])


def as_arrow(values) -> pa.Array:
    """A pyarrow array from a numpy array or a (chunked) pyarrow array."""
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks()
    if isinstance(values, pa.Array):
        return values
    arr = np.asarray(values)
    if arr.dtype.kind == "S":  # bytes: must be UTF-8 text
        return pa.array(arr.tolist(), type=pa.binary())
    return pa.array(arr)


def request_codes(values, name: str, src: str) -> tuple[np.ndarray, np.ndarray]:
    """Request index of each row (order of first appearance) and the request ids as strings."""
    col = as_arrow(values)
    if col.null_count:
        raise TraceError("missing value", path=src, row=first_null(col), field=name)
    if not (
        pa.types.is_integer(col.type)
        or pa.types.is_string(col.type)
        or pa.types.is_large_string(col.type)
        or pa.types.is_binary(col.type)
        or pa.types.is_large_binary(col.type)
    ):
        raise TraceError(
            f"request ids of type {col.type}: expected integers or strings", path=src, field=name
        )
    try:
        col = col.cast(pa.string())
        col.validate(full=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise TraceError("request ids are not UTF-8 text", path=src, field=name) from None
    enc = pc.dictionary_encode(col)
    return enc.indices.to_numpy().astype(np.int64), np.array(
        enc.dictionary.to_pylist(), dtype=object
    )


def integers(values, name: str, src: str) -> np.ndarray:
    col = as_arrow(values)
    if col.null_count:
        raise TraceError("missing value", path=src, row=first_null(col), field=name)
    if not pa.types.is_integer(col.type):
        raise TraceError(f"column has type {col.type}, expected integers", path=src, field=name)
    if pa.types.is_uint64(col.type) and len(col) and pc.max(col).as_py() > np.iinfo(np.int64).max:
        raise TraceError("value beyond the int64 range", path=src, field=name)
    return col.to_numpy(zero_copy_only=False).astype(np.int64)


def phase_flags(values, name: str, src: str) -> np.ndarray:
    """True for prompt rows: booleans, 0/1, or the words prompt/prefill and output/decode."""
    col = as_arrow(values)
    if col.null_count:
        raise TraceError("missing value", path=src, row=first_null(col), field=name)
    if pa.types.is_boolean(col.type):
        return col.to_numpy(zero_copy_only=False).astype(bool)
    if pa.types.is_integer(col.type):
        v = col.to_numpy(zero_copy_only=False)
        bad = np.flatnonzero(~np.isin(v, (0, 1)))
        if len(bad):
            raise TraceError(
                f"phase {v[bad[0]]} is not 0 (output) or 1 (prompt)",
                path=src,
                row=int(bad[0]),
                field=name,
            )
        return v.astype(bool)
    if pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
        try:
            col = col.cast(pa.string())
            col.validate(full=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise TraceError("phase values are not UTF-8 text", path=src, field=name) from None
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        words = pc.utf8_lower(pc.utf8_trim_whitespace(col))
        prompt = pc.is_in(words, value_set=pa.array(PROMPT_WORDS)).to_numpy(zero_copy_only=False)
        output = pc.is_in(words, value_set=pa.array(OUTPUT_WORDS)).to_numpy(zero_copy_only=False)
        bad = np.flatnonzero(~(prompt | output))
        if len(bad):
            raise TraceError(
                f"phase {col[int(bad[0])].as_py()!r} is none of {', '.join(PROMPT_WORDS)} (prompt) "
                f"or {', '.join(OUTPUT_WORDS)} (output)",
                path=src,
                row=int(bad[0]),
                field=name,
            )
        return prompt
    raise TraceError(
        f"column has type {col.type}, expected a phase: booleans (true = prompt), 0/1, or "
        f"the words prompt/prefill and output/decode",
        path=src,
        field=name,
    )


# ---------------------------------------------------------- assembly ---


def build_trace(
    tt: TokenTable,
    *,
    L: int,
    N: int,
    k: int,
    src: str,
    fmt: str,
    on_gap: str,
    report: ImportReport,
    columns_used: dict[str, str],
    expert_bytes: int = 0,
    model_name: str = "",
    dataset: str = "imported",
    moe_layers: tuple[int, ...] = (),
    decoder_layers: int = 0,
) -> Trace:
    """Handle gaps among the output tokens and assemble the autoregressive-only trace."""
    R = len(tt.req_names)
    prompt_len = np.bincount(tt.req[tt.prompt], minlength=R).astype(np.int32)
    order, o_req, o_idx = _output_order(tt, R)
    complete = tt.cells[order] == L
    _count_gaps(tt, order, o_req, o_idx, complete, L=L, src=src, on_gap=on_gap, report=report)
    keep = order[complete]
    P = len(keep)
    counts = np.bincount(o_req[complete], minlength=R)
    alive = counts > 0
    report.dropped_requests = [str(tt.req_names[r]) for r in np.flatnonzero(~alive)]
    if not alive.any():
        raise SimmoeError(
            f"{src}: no output token has routes for all {L} layers; nothing to import"
        )
    remap = np.cumsum(alive) - 1
    pos_request = remap[o_req[complete]].astype(np.int32)
    starts = np.concatenate([[0], np.cumsum(counts[alive])[:-1]])
    pos_index = (np.arange(P) - np.repeat(starts, counts[alive])).astype(np.int32)
    geometry = ModelGeometry(L, N, k, expert_bytes=int(expert_bytes), name=model_name,
                             moe_layers=tuple(moe_layers), decoder_layers=int(decoder_layers))
    root_routes = np.ascontiguousarray(tt.routes_of(keep), dtype=geometry.route_dtype).reshape(
        P, L, k
    )
    root_token = (
        tt.token_id[keep].astype(np.int32)
        if tt.token_id is not None
        else np.zeros(P, dtype=np.int32)
    )
    report.requests, report.positions = int(alive.sum()), P
    n_alive = int(alive.sum())
    requests = Requests(
        request_id=np.array([str(x) for x in tt.req_names[alive]], dtype=object),
        dataset=np.array([dataset] * n_alive, dtype=object),
        prompt_len=prompt_len[alive],
        output_len=counts[alive].astype(np.int32),
        prefill_union=tt.prefill_union[alive],
        prefill_time_ms=np.full(n_alive, math.nan),
    )
    empty = np.zeros(0)
    return Trace(
        meta=_meta(tt, geometry, src=src, fmt=fmt, on_gap=on_gap, report=report, columns_used=columns_used),
        requests=requests,
        pos_request=pos_request,
        pos_index=pos_index,
        root_token=root_token,
        root_routes=root_routes,
        node_ptr=np.zeros(P + 1, dtype=np.int64),
        node_parent=empty.astype(np.int16),
        node_level=empty.astype(np.int8),
        node_token=empty.astype(np.int32),
        node_q=empty.astype(np.float32),
        node_p=empty.astype(np.float32),
        node_agree=empty.astype(bool),
        node_routes=np.zeros((0, L, k), dtype=geometry.route_dtype),
    )


def _output_order(tt: TokenTable, R: int):
    """The output tokens' rows by (request, token index), with their requests and token indices."""
    out = np.flatnonzero(~tt.prompt)
    if tt.idx is None:
        order = out[np.argsort(tt.req[out], kind="stable")]
        o_req = tt.req[order]
        starts = np.searchsorted(o_req, np.arange(R))
        o_idx = np.arange(len(order)) - starts[o_req]
    else:
        order = out[np.lexsort((tt.idx[out], tt.req[out]))]
        o_req, o_idx = tt.req[order], tt.idx[order]
    return order, o_req, o_idx


def _count_gaps(tt: TokenTable, order, o_req, o_idx, complete, *, L: int, src: str, on_gap: str,
                report: ImportReport) -> None:
    """Count the missing (token, layer) cells into ``report``; fail on them unless ``on_gap="drop"``."""
    R = len(tt.req_names)
    # Expected tokens of a request: the integers from its smallest to its largest output index.
    lo = np.full(R, np.iinfo(np.int64).max)
    hi = np.full(R, -1, dtype=np.int64)
    np.minimum.at(lo, o_req, o_idx)
    np.maximum.at(hi, o_req, o_idx)
    expected = np.where(hi >= 0, hi - lo + 1, 0)
    absent = int(expected.sum()) - len(order)
    report.missing_cells = int(absent * L + (L - tt.cells[order]).sum())
    report.incomplete_tokens = int(absent + (~complete).sum())
    if not report.missing_cells:
        return
    req, tok, layer, row = _first_gap(o_req, o_idx, complete, order, tt)
    if on_gap == "fail":
        where = f"request {tt.req_names[req]!r}, token {tok}, layer {layer}" + (
            f", input row {row}" if row is not None else ""
        )
        raise SimmoeError(
            f"{src}: {report.missing_cells} (token, layer) cells have no routes, in "
            f"{report.incomplete_tokens} tokens (first: {where}); "
            + (f"{report.suspect}; " if report.suspect else "")
            + "pass --on-gap drop to drop incomplete tokens (nothing is filled in)"
        )
    report.dropped_tokens = report.incomplete_tokens
    if report.suspect:
        report.notes.append(report.suspect)


def _meta(tt: TokenTable, geometry: ModelGeometry, *, src: str, fmt: str, on_gap: str, report: ImportReport,
          columns_used: dict[str, str]) -> dict:
    """The imported trace's metadata: provenance (what was read, what was dropped or inferred), geometry."""
    provenance = {
        "kind": IMPORTED,
        "source": os.path.basename(src),
        "format": fmt,
        "layout": report.layout,
        "columns": columns_used,
        "records": report.records,
        "prefill_records": report.prefill_records,
        "prefill_missing_cells": report.prefill_missing_cells,
        "missing_cells": report.missing_cells,
        "on_gap": on_gap,
        "dropped_tokens": report.dropped_tokens,
        "dropped_requests": report.dropped_requests,
        "inferred": report.inferred,
        "token_ids": "recorded" if tt.token_id is not None else "absent (stored as 0)",
        "prefill": "recorded"
        if "prefill" in columns_used
        else "absent (empty union, prompt_len 0)",
    }
    if report.notes:  # only tools' logs have them; other provenance stays as it was
        provenance["notes"] = list(report.notes)
    return {
        "schema_version": SCHEMA_VERSION,
        "provenance": provenance,
        "geometry": geometry.to_dict(),
        "pool_shape": PoolShape(0, 0, 0, 0).to_dict(),
        "hardware": None,
    }


def _first_gap(o_req, o_idx, complete, order, tt: TokenTable) -> tuple[int, int, int, int | None]:
    """(request, token, layer, input row) of the first missing cell, in that order."""
    candidates: list[tuple[int, int, int, int | None]] = []
    # A token index skipped inside a request's range: all its layers are missing, and it has no row.
    same = np.zeros(len(o_req), dtype=bool)
    same[1:] = o_req[1:] == o_req[:-1]
    step = np.zeros(len(o_req), dtype=np.int64)
    step[1:] = o_idx[1:] - o_idx[:-1]
    skipped = np.flatnonzero(same & (step > 1))
    if len(skipped):
        i = int(skipped[0])
        candidates.append((int(o_req[i]), int(o_idx[i - 1]) + 1, 0, None))
    short = np.flatnonzero(~complete)
    if len(short):
        i = int(short[0])
        t = int(order[i])
        candidates.append((int(o_req[i]), int(o_idx[i]), tt.missing_layer(t), int(tt.rows[t])))
    return min(candidates, key=lambda c: c[:3])
