"""Import routing logs of other tools as an autoregressive-only trace (empty pools).

Three kinds of input (docs/importing-routes.md):

* **long format** (``importer_records``): one record per (request, token,
  layer) with the experts the router chose — JSON lines, CSV or parquet.
  Column names are configurable (defaults ``request_id``, ``token_idx``,
  ``layer``, ``experts``); in CSV the experts are one field such as
  ``"3 17 42"``, ``"3,17,42"`` or ``"[3, 17, 42]"``.
* **dense arrays** (``importer_arrays``): ``experts[tokens, MoE layers,
  top-k]`` integers in ``.npy``, ``.npz``, ``.safetensors``, or a parquet /
  JSON lines column of ``[layers][top-k]`` lists, with optional per-token
  request ids, token indices, vocabulary ids and phase.
* **a tool's log**, recognised from the file (``importer_detect``) or named
  by ``fmt``: sqliteai/warp, vLLM's routed experts and FLAME-MoE-Traces
  (``importer_tools``), llama.cpp's and Megatron-core's logs of forward
  passes (``importer_forwards``); each is turned into dense arrays.

Optional for the first two: the token's vocabulary id, and its phase (booleans, 0/1
or the words prompt/prefill and output/decode): prompt tokens form the
request's prefill union and prompt length.

The tokens of a request are the integers from its smallest to its largest
output token index; every (token, layer) cell without routes is *missing*.
Missing cells are counted and either fail the import (default) or drop the
incomplete tokens (the remaining tokens are renumbered 0..n−1, so the tokens
on both sides of a dropped one become neighbours — the provenance records
how many were dropped).  Nothing is ever filled in.

Geometry: L = largest layer + 1 (or the arrays' second dimension), N =
largest expert id + 1 and k = experts per record, unless given (then
checked); L, N and the prefill union's size are bounded before anything is
allocated from them (``importer_common``).  Cost: one sort of the records,
O(records·k) otherwise.
"""

from __future__ import annotations

from pathlib import Path

from simmoe.errors import SimmoeError, TraceError
from simmoe.trace.importer_common import (
    DEFAULT_COLUMNS,
    MAX_EXPERTS,
    MAX_LAYERS,
    ON_GAP,
    ImportReport,
    RouteColumns,
    build_trace,
)
from simmoe.trace.importer_detect import CONTAINER_NAMES, CONTAINERS, TOOL_NAMES, container_of, detect
from simmoe.trace.schema import Trace

__all__ = ["FORMATS", "FORMAT_NAMES", "ImportReport", "RouteColumns", "import_routes", "MAX_EXPERTS",
           "MAX_LAYERS"]

FORMATS = CONTAINERS
FORMAT_NAMES = (*CONTAINER_NAMES, *TOOL_NAMES)


def import_routes(
    path,
    *,
    fmt: str | None = None,
    columns: RouteColumns = DEFAULT_COLUMNS,
    num_layers: int | None = None,
    num_experts: int | None = None,
    top_k: int | None = None,
    expert_bytes: int = 0,
    model_name: str = "",
    dataset: str = "imported",
    on_gap: str = "fail",
    moe_layers: tuple[int, ...] = (),
    decoder_layers: int = 0,
) -> tuple[Trace, ImportReport]:
    """Read a routing log or routing arrays and build an autoregressive-only :class:`Trace`.

    ``moe_layers``/``decoder_layers``: which decoder layers the log's layers
    are (a catalogued model's; stored in the geometry).

    Raises :class:`TraceError` (file, row, field) for bad input and
    :class:`SimmoeError` for missing cells when ``on_gap="fail"``.  Rows count
    data records (long format) or tokens (dense arrays) from 0 in file order.
    """
    src = str(path)
    if on_gap not in ON_GAP:
        raise SimmoeError(f"on_gap must be one of {', '.join(ON_GAP)}, got {on_gap!r}")
    for name, value in (("num_layers", num_layers), ("num_experts", num_experts), ("top_k", top_k)):
        if value is not None and value < 1:
            raise SimmoeError(f"{name} must be at least 1, got {value}")
    if not Path(path).exists():
        raise TraceError("no such file", path=src)
    if not (Path(path).is_file() or Path(path).is_dir()):
        raise TraceError("not a file", path=src)
    if fmt is not None and fmt not in FORMAT_NAMES:
        raise SimmoeError(f"unknown format {fmt!r}; one of {', '.join(FORMAT_NAMES)}")
    fmt = fmt or detect(src, columns)
    if Path(path).is_dir() and fmt not in ("vllm", "flame"):
        raise TraceError(f"a folder is read only as vllm or flame, not {fmt}", path=src)
    report = ImportReport(format=fmt)
    geometry = dict(num_layers=num_layers, num_experts=num_experts, top_k=top_k)
    read = _tool if fmt in TOOL_NAMES else _container
    tt, L, N, k, used = read(src, fmt, columns, report, geometry, moe_layers)
    trace = build_trace(
        tt,
        L=L,
        N=N,
        k=k,
        src=src,
        fmt=fmt,
        on_gap=on_gap,
        report=report,
        columns_used=used,
        expert_bytes=expert_bytes,
        model_name=model_name,
        dataset=dataset,
        moe_layers=tuple(moe_layers),
        decoder_layers=int(decoder_layers),
    )
    return trace, report


def _tool(src: str, fmt: str, columns: RouteColumns, report: ImportReport, geometry: dict,
          moe_layers) -> tuple:
    """A tool's log through its reader, then through the dense arrays' checks and assembly."""
    from simmoe.trace import importer_arrays as arrays
    from simmoe.trace import importer_forwards as forwards
    from simmoe.trace import importer_tools as tools

    if fmt in ("llama-csv", "llama-moe-trace", "megatron"):
        notes: list[str] = []
        if fmt == "llama-csv":
            cells, field = forwards.llama_csv(src, geometry["top_k"])
        elif fmt == "llama-moe-trace":
            cells, field, k = forwards.llama_moe_trace(src, geometry["top_k"])
            if k:
                report.inferred.append(f"top_k={k} (the shortest run of one layer's rows; pass --top-k "
                                       f"when the log has no decode step)")
        else:
            cells, field, notes = forwards.megatron(src)
        log = forwards.tokens_from_cells(cells, src, field, moe_layers=tuple(moe_layers),
                                         num_layers=geometry["num_layers"])
        log.notes[:0] = notes
    elif fmt == "warp":
        log = tools.warp(src, columns)
    elif fmt == "vllm":
        log = tools.vllm(src, container_of(src) or "")
    else:
        log = tools.flame(src)
    tt, L, N, k, used = arrays.tokens_from_source(arrays.dict_source(log.arrays), src, log.columns,
                                                  report=report, **geometry)
    for role in log.derived:  # made by the reader, not a column of the log
        used.pop(role, None)
    report.notes += log.notes
    return tt, L, N, k, used


def _container(src: str, fmt: str, columns: RouteColumns, report: ImportReport, geometry: dict,
               _moe_layers) -> tuple:
    """The generic readings: dense arrays, or a table of records or of per-token lists."""
    from simmoe.trace import importer_arrays as arrays
    from simmoe.trace import importer_records as records

    if fmt in ("npy", "npz", "safetensors"):
        return arrays.tokens_from_source(arrays.open_source(src, fmt), src, columns, report=report,
                                         **geometry)
    table = records.read_table(src, fmt, columns)
    if table.num_rows == 0:
        raise TraceError("no records", path=src)
    if columns.experts in table.column_names and records.is_nested_list(
        table.schema.field(columns.experts).type
    ):
        return arrays.tokens_from_source(arrays.table_source(table), src, columns, report=report,
                                         **geometry)
    report.records = table.num_rows
    tt, L, N, k = records.tokens_from_records(table, src, columns, report=report, **geometry)
    return tt, L, N, k, {k_: v for k_, v in vars(columns).items() if v is not None}
