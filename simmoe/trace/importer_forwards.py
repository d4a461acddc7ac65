"""Routing logs written forward by forward: llama.cpp's two CSV forms and Megatron-core's JSON lines.

These logs record, for each forward pass of the model and each MoE layer,
the experts of every token of that forward, and nothing about requests.
They are reduced to *cells* — one (forward, layer, row in the forward, k
experts) each — and then to dense routes ``[tokens, MoE layers, k]``
(docs/importing-routes.md, "Logs of forward passes"):

* a forward's tokens are its rows; every layer of a forward must have the
  same number of rows, or the layers were cut or renumbered independently
  and rows cannot be matched across layers (refused, naming both layers);
* a forward of one token is a decode step (an output token), a forward of
  several is a prefill (prompt tokens); a prefill after a decode step starts
  the next request, so a log holds requests one after another (batch 1);
* the log's layer ids (decoder-layer numbers) become MoE layers 0 .. L−1 in
  ascending order, or by a catalogued model's MoE layers when given.

A layer missing from a forward leaves cells of −1 (missing; ``--on-gap``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from simmoe.errors import TraceError
from simmoe.trace.importer_common import GeometryMismatch, RouteColumns, check_layers, first_null, integers
from simmoe.trace.importer_records import expert_lists, read_text

# Names of the per-token arrays the routes are handed on with (simmoe.trace.importer_arrays).
PHASE, REQUEST = "phase", "request"


@dataclass
class ToolLog:
    """A tool's log as dense per-token arrays: ``arrays[columns.experts]`` is ``[T, L, k]`` with
    −1 cells where a layer has no routes; ``derived`` names roles the log does not hold itself."""

    arrays: dict
    columns: RouteColumns
    notes: list[str]
    derived: tuple[str, ...] = ()


@dataclass
class Cells:
    """One entry per (forward, layer, token row): what every forward log reduces to."""

    forward: np.ndarray  # int64 [C]: forward index, 0 .. F-1 in log order
    layer: np.ndarray  # int64 [C]: the log's layer id
    row: np.ndarray  # int64 [C]: the token's row within its forward
    experts: np.ndarray  # int [C, k]
    record: np.ndarray  # int64 [C]: the input row (record) the cell came from, for errors
    what: str  # "forward" or "step": how the log calls a forward pass


# ------------------------------------------------------------- llama.cpp ---


def llama_csv(src: str, top_k: int | None) -> tuple[Cells, str]:
    """``layer_id,expert_ids``: one row per (token, layer), ids separated by spaces, forwards one
    after another and, inside one, all tokens of a layer before the next layer."""
    import pyarrow.csv as pcsv

    header = _first_fields(src)
    names = ["layer_id", "expert_ids"]
    skip = 1 if header == names else 0
    table = read_text(src, "csv", lambda: pcsv.read_csv(
        src,
        read_options=pcsv.ReadOptions(column_names=names, skip_rows=skip),
        convert_options=pcsv.ConvertOptions(column_types={"layer_id": pa.int64(),
                                                          "expert_ids": pa.string()}),
    ))
    _some_rows(table, src)
    layer = _nonnegative(integers(table.column("layer_id"), "layer_id", src), src, "layer_id")
    experts, _k = expert_lists(table.column("expert_ids"), "expert_ids", top_k, src)
    return _cells_from_runs(layer, experts, np.arange(len(layer)), src, "layer_id"), "expert_ids"


def llama_moe_trace(src: str, top_k: int | None) -> tuple[Cells, str, int]:
    """llama.cpp's ``llama-moe-trace``: one ``layer,expert`` row per routed expert (a header line
    optional), each token's k experts on consecutive rows; k is ``top_k`` or the shortest run
    (returned, 0 when given)."""
    import pyarrow.csv as pcsv

    names = ["layer", "expert"]
    skip = 1 if _first_fields(src) == names else 0
    table = read_text(src, "csv", lambda: pcsv.read_csv(
        src,
        read_options=pcsv.ReadOptions(column_names=names, skip_rows=skip),
        convert_options=pcsv.ConvertOptions(column_types={n: pa.int64() for n in names}),
    ))
    _some_rows(table, src)
    layer = _nonnegative(integers(table.column("layer"), "layer", src), src, "layer")
    expert = integers(table.column("expert"), "expert", src)
    starts = np.flatnonzero(np.append(True, layer[1:] != layer[:-1]))
    runs = np.diff(np.append(starts, len(layer)))
    k = int(top_k) if top_k is not None else int(runs.min())
    bad = np.flatnonzero(runs % k)
    if len(bad):
        r = int(bad[0])
        raise TraceError(
            f"layer {layer[starts[r]]} has a run of {runs[r]} rows, not a multiple of "
            f"{'--top-k' if top_k is not None else 'the shortest run,'} {k}: every token lists k "
            f"experts on consecutive rows{'' if top_k is not None else ' (pass --top-k)'}",
            path=src, row=int(starts[r]), field="layer",
        )
    # Runs are whole multiples of k, so groups of k rows never straddle two layers or forwards.
    cells = _cells_from_runs(layer[::k], expert.reshape(-1, k), np.arange(0, len(layer), k), src, "layer")
    return cells, "expert", (0 if top_k is not None else k)


def _cells_from_runs(layer, experts, record, src: str, name: str) -> Cells:
    """Cells of rows in log order: a run of one layer is that layer's tokens of one forward;
    a run whose layer is not above the previous run's starts the next forward."""
    starts = np.flatnonzero(np.append(True, layer[1:] != layer[:-1]))
    run_layer = layer[starts]
    new_forward = np.append(True, run_layer[1:] <= run_layer[:-1])
    run_forward = np.cumsum(new_forward) - 1
    run_of_row = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(layer))))
    row = np.arange(len(layer)) - starts[run_of_row]
    return Cells(run_forward[run_of_row], layer, row, experts, record, "forward")


def _first_fields(src: str) -> list[str]:
    with open(src, "rb") as fh:
        first = fh.readline(4096).decode("utf-8", "replace")
    return [f.strip() for f in first.strip().split(",")]


def _some_rows(table: pa.Table, src: str) -> None:
    if table.num_rows == 0:
        raise TraceError("no records (only a header line)", path=src)


def _nonnegative(values: np.ndarray, src: str, name: str) -> np.ndarray:
    bad = np.flatnonzero(values < 0)
    if len(bad):
        raise TraceError(f"negative layer {values[bad[0]]}", path=src, row=int(bad[0]), field=name)
    return values


# ------------------------------------------------------------ Megatron ---


def megatron(src: str) -> tuple[Cells, str, list[str]]:
    """``--moe-routing-trace-path``: one JSON line per (step, block, layer) with ``top_indices``
    ``[num_tokens][topk]``; a step is one forward.  Records of the MTP block are left out."""
    import pyarrow.json as pjson

    table = read_text(src, "jsonl", lambda: pjson.read_json(src))
    for name in ("step", "layer", "top_indices"):
        if name not in table.column_names:
            raise TraceError(
                f"missing field (a Megatron routing trace has step, layer and top_indices on every "
                f"line; fields are: {', '.join(table.column_names)})", path=src, field=name)
    notes: list[str] = []
    keep = np.ones(table.num_rows, dtype=bool)
    if "block" in table.column_names:
        block = table.column("block").combine_chunks()
        keep = ~pc.fill_null(pc.equal(block, "mtp"), False).to_numpy(zero_copy_only=False)
        if not keep.all():
            notes.append(f"{int((~keep).sum())} records of the MTP block left out")
    if "rank" in table.column_names:
        ranks = np.unique(integers(table.column("rank"), "rank", src))
        if len(ranks) > 1:
            raise TraceError(f"records of ranks {ranks[0]} and {ranks[1]}: import one rank's "
                             f"file (router_trace_rank<N>.jsonl)", path=src, field="rank")
    rec = np.flatnonzero(keep)
    step = integers(table.column("step"), "step", src)[rec]
    layer = _nonnegative(integers(table.column("layer"), "layer", src), src, "layer")[rec]
    col = table.column("top_indices").combine_chunks().take(pa.array(rec))
    if col.null_count:
        raise TraceError("missing value", path=src, row=int(rec[first_null(col)]), field="top_indices")
    if not pa.types.is_list(col.type):
        raise TraceError(f"field has type {col.type}, expected [num_tokens][topk] lists of ids",
                         path=src, field="top_indices")
    n = pc.list_value_length(col).to_numpy(zero_copy_only=False).astype(np.int64)
    rec_of_row = np.repeat(np.arange(len(rec)), n)
    experts = _token_lists(col.flatten(), rec[rec_of_row], src)
    row = np.arange(len(rec_of_row)) - np.repeat(np.cumsum(n) - n, n)
    _, forward = np.unique(step, return_inverse=True)  # steps ascending, as the tracer counts them
    cells = Cells(forward[rec_of_row], layer[rec_of_row], row, experts, rec[rec_of_row], "step")
    return cells, "top_indices", notes


def _token_lists(inner: pa.Array, record: np.ndarray, src: str) -> np.ndarray:
    """``[tokens, k]`` ids from the tokens' lists (errors name the record of the token)."""
    name = "top_indices"
    if len(inner) == 0:
        raise TraceError("no tokens: every record's top_indices is empty", path=src, field=name)
    if not (pa.types.is_list(inner.type) and pa.types.is_integer(inner.type.value_type)):
        raise TraceError(f"field has type list<{inner.type}>, expected [num_tokens][topk] lists of "
                         f"integer ids", path=src, field=name)
    if inner.null_count:
        raise TraceError("missing list of ids", path=src, row=int(record[first_null(inner)]), field=name)
    lengths = pc.list_value_length(inner).to_numpy(zero_copy_only=False)
    k = int(lengths[0]) if len(lengths) else 0
    bad = np.flatnonzero(lengths != k)
    if len(bad):
        raise TraceError(f"a token lists {int(lengths[bad[0]])} experts, the first {k}", path=src,
                         row=int(record[bad[0]]), field=name)
    values = inner.flatten()
    if values.null_count:
        raise TraceError("missing expert id", path=src, row=int(record[first_null(values) // max(k, 1)]),
                         field=name)
    if k == 0:
        raise TraceError("tokens list no experts", path=src, row=int(record[0]), field=name)
    return values.to_numpy(zero_copy_only=False).astype(np.int64).reshape(-1, k)


# -------------------------------------------------------------- tokens ---


def tokens_from_cells(cells: Cells, src: str, field: str, *, moe_layers: tuple[int, ...],
                      num_layers: int | None) -> ToolLog:
    """Dense routes, requests and phases from the cells (rules in the module docstring)."""
    ids, lidx, L, note = _layer_index(cells.layer, moe_layers, num_layers, src)
    absent = np.setdiff1d(np.arange(L), lidx)
    if len(absent):  # only with a given L: a whole layer missing means another model's log
        raise GeometryMismatch(
            f"no record of layer {ids[absent[0]]}" + (f" (nor of {len(absent) - 1} more)" if len(absent) > 1
                                                      else "") + f": the log has {L - len(absent)} of the "
            f"{L} layers", path=src, field=field)
    F = int(cells.forward.max()) + 1
    key = cells.forward * L + lidx
    order = np.lexsort((cells.row, key))
    k_s = key[order]
    dup = np.flatnonzero((k_s[1:] == k_s[:-1]) & (cells.row[order][1:] == cells.row[order][:-1]))
    if len(dup):  # two records of one layer in one forward: rows would collide
        a, b = sorted((int(cells.record[order[dup[0]]]), int(cells.record[order[dup[0] + 1]])))
        raise TraceError(f"second record of layer {cells.layer[order[dup[0]]]} in one {cells.what} "
                         f"(first at row {a})", path=src, row=b, field=field)
    rows = np.zeros(F * L, dtype=np.int64)
    np.maximum.at(rows, key, cells.row + 1)
    rows = rows.reshape(F, L)
    n = rows.max(axis=1)  # tokens of each forward
    _check_counts(rows, n, ids, cells, src, field)
    single = n == 1
    if not single.any():
        raise TraceError(
            f"no {cells.what} of a single token: every {cells.what} has several (a batch of requests, "
            f"or training), so tokens cannot be told apart by request; simmoe reads decode logs "
            f"written one request at a time (batch 1)", path=src, field=field)
    off = np.cumsum(n) - n
    T, k = int(n.sum()), cells.experts.shape[1]
    routes = np.full((T, L, k), -1, dtype=np.int64)
    routes[off[cells.forward] + cells.row, lidx] = cells.experts
    starts = ~single & np.append(False, single[:-1])  # a prefill right after a decode step
    req_of_forward = np.cumsum(starts)
    stem = Path(src).stem
    names = (np.array([stem]) if not starts.any()
             else np.array([f"{stem}-{i}" for i in range(int(req_of_forward[-1]) + 1)]))
    notes = [note] if note else []
    notes.append(f"{F} {cells.what}s; one token: decode (output), several: prompt; a prompt after "
                 f"a decode step starts the next request ({len(names)} request{'s' * (len(names) > 1)})")
    arrays = {field: routes, REQUEST: np.repeat(names[req_of_forward], n),
              PHASE: np.repeat(~single, n)}
    return ToolLog(arrays, RouteColumns(experts=field, request=REQUEST, prefill=PHASE), notes,
                   derived=("request", "prefill"))


def _layer_index(layer: np.ndarray, moe_layers: tuple[int, ...], num_layers: int | None, src: str):
    """``(ids, index of each cell's layer, L, note)``: the log's layer ids as MoE layers 0..L-1."""
    ids = np.unique(layer)
    check_layers(len(ids), f"{len(ids)} distinct layers", src, None)
    if moe_layers and np.isin(ids, moe_layers).all() and not np.array_equal(ids, np.arange(len(ids))):
        pos = np.array(moe_layers)
        return pos, np.searchsorted(pos, layer), len(pos), f"layer ids read as the model's MoE layers {pos.tolist()}"
    if num_layers is not None and ids[-1] < num_layers:
        return np.arange(num_layers), layer, num_layers, ""
    note = "" if np.array_equal(ids, np.arange(len(ids))) else (
        f"layer ids {ids[0]} .. {ids[-1]} read as MoE layers 0 .. {len(ids) - 1} in ascending order")
    return ids, np.searchsorted(ids, layer), len(ids), note


def _check_counts(rows: np.ndarray, n: np.ndarray, ids: np.ndarray, cells: Cells, src: str,
                  field: str) -> None:
    """Every layer present in a forward has the forward's number of tokens."""
    short = (rows > 0) & (rows < n[:, None])
    if not short.any():
        return
    f, li = (int(v) for v in np.argwhere(short)[0])
    full = int(np.argmax(rows[f]))
    row = int(cells.record[np.flatnonzero(cells.forward == f)[0]])
    raise TraceError(
        f"{cells.what} {f}: layer {ids[li]} has {rows[f, li]} tokens but layer {ids[full]} has {n[f]}: "
        f"tokens were dropped or renumbered in some layers only, so rows cannot be matched across "
        f"layers", path=src, row=row, field=field)
