"""Import routing logs of other tools as an autoregressive-only trace (empty pools).

Two kinds of input (docs/importing-routes.md):

* **long format** (``importer_records``): one record per (request, token,
  layer) with the experts the router chose — JSON lines, CSV or parquet.
  Column names are configurable (defaults ``request_id``, ``token_idx``,
  ``layer``, ``experts``); in CSV the experts are one field such as
  ``"3 17 42"``, ``"3,17,42"`` or ``"[3, 17, 42]"``.
* **dense arrays** (``importer_arrays``): ``experts[tokens, MoE layers,
  top-k]`` integers in ``.npy``, ``.npz``, ``.safetensors``, or a parquet /
  JSON lines column of ``[layers][top-k]`` lists, with optional per-token
  request ids, token indices, vocabulary ids and phase.

Optional for both: the token's vocabulary id, and its phase (booleans, 0/1
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
from simmoe.trace.schema import Trace

__all__ = ["FORMATS", "ImportReport", "RouteColumns", "import_routes", "MAX_EXPERTS", "MAX_LAYERS"]

FORMATS = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".npy": "npy",
    ".npz": "npz",
    ".safetensors": "safetensors",
}
FORMAT_NAMES = ("jsonl", "csv", "parquet", "npy", "npz", "safetensors")


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
    from simmoe.trace import importer_arrays as arrays
    from simmoe.trace import importer_records as records

    src = str(path)
    if on_gap not in ON_GAP:
        raise SimmoeError(f"on_gap must be one of {', '.join(ON_GAP)}, got {on_gap!r}")
    for name, value in (("num_layers", num_layers), ("num_experts", num_experts), ("top_k", top_k)):
        if value is not None and value < 1:
            raise SimmoeError(f"{name} must be at least 1, got {value}")
    if not Path(path).is_file():
        raise TraceError("no such file" if not Path(path).exists() else "not a file", path=src)
    fmt = fmt or FORMATS.get(Path(path).suffix.lower())
    if fmt not in FORMAT_NAMES:
        raise SimmoeError(
            f"{src}: cannot tell the format from the file name; pass --format "
            f"{', '.join(FORMAT_NAMES[:-1])} or {FORMAT_NAMES[-1]}"
        )
    report = ImportReport()
    geometry = dict(num_layers=num_layers, num_experts=num_experts, top_k=top_k)
    if fmt in ("npy", "npz", "safetensors"):
        tt, L, N, k, used = arrays.tokens_from_source(
            arrays.open_source(src, fmt), src, columns, report=report, **geometry
        )
    else:
        table = records.read_table(src, fmt, columns)
        if table.num_rows == 0:
            raise TraceError("no records", path=src)
        if columns.experts in table.column_names and records.is_nested_list(
            table.schema.field(columns.experts).type
        ):
            tt, L, N, k, used = arrays.tokens_from_source(
                arrays.table_source(table), src, columns, report=report, **geometry
            )
        else:
            report.records = table.num_rows
            tt, L, N, k = records.tokens_from_records(
                table, src, columns, report=report, **geometry
            )
            used = {k_: v for k_, v in vars(columns).items() if v is not None}
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
