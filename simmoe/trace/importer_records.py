"""Long-format routing logs: one record per (request, token, layer), in JSON lines, CSV or parquet.

Reading gives a pyarrow table; :func:`tokens_from_records` turns its records
into a :class:`~simmoe.trace.importer_common.TokenTable`.  A table whose
experts column holds one ``[layers][top-k]`` list per row is a dense routing
array instead and goes to :mod:`simmoe.trace.importer_arrays`.

Text input is checked before it is trusted: an empty file or one of blank
lines has no records; a line that is not UTF-8 (or, in JSON lines, not a
JSON object) is named with its line number, counted from 1.
"""

from __future__ import annotations

import codecs
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from simmoe.errors import TraceError
from simmoe.trace.importer_common import (
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

CHUNK = 1 << 24


# ----------------------------------------------------------------- reading ---


def read_table(src: str, fmt: str, columns: RouteColumns) -> pa.Table:
    """The input as a table with the columns it needs (all columns for a dense experts column)."""
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            schema = pq.ParquetFile(src).schema_arrow
            names = schema.names
            if columns.experts in names and is_nested_list(schema.field(columns.experts).type):
                return pq.read_table(src)
            _require(names, columns, src)
            return pq.read_table(src, columns=_wanted(columns))
        _check_text(src, fmt)
        if fmt == "csv":
            import pyarrow.csv as pcsv

            names = _csv_header(src)
            _require(names, columns, src)
            types = {columns.request: pa.string(), columns.experts: pa.string()}
            table = pcsv.read_csv(
                src,
                convert_options=pcsv.ConvertOptions(
                    include_columns=_wanted(columns), column_types=types
                ),
            )
        else:
            import pyarrow.json as pjson

            table = pjson.read_json(src)
            if table.num_columns == 0:
                raise TraceError("no records (only blank lines)", path=src)
            if not (
                columns.experts in table.column_names
                and is_nested_list(table.schema.field(columns.experts).type)
            ):
                _require(table.column_names, columns, src)
                table = table.select(_wanted(columns))
    except (pa.ArrowException, OSError) as exc:  # a damaged parquet file raises OSError
        if fmt != "parquet":
            _find_bad_line(src, fmt)  # raises naming the line when it finds one
        raise TraceError(f"cannot parse as {fmt}: {str(exc).splitlines()[0]}", path=src) from None
    try:
        table.validate(full=True)
    except pa.ArrowInvalid:
        if fmt != "parquet":
            _find_bad_line(src, fmt)
        raise TraceError(f"invalid data in the file ({fmt})", path=src) from None
    return table


def read_text(src: str, fmt: str, read) -> pa.Table:
    """The table ``read()`` makes of a text file (``fmt`` "jsonl" or "csv"), checked like
    :func:`read_table`'s: no records, a line that is not UTF-8 (or JSON) named by its number."""
    _check_text(src, fmt)
    try:
        table = read()
        table.validate(full=True)
    except (pa.ArrowException, OSError) as exc:
        _find_bad_line(src, fmt)  # raises naming the line when it finds one
        raise TraceError(f"cannot parse as {fmt}: {str(exc).splitlines()[0]}", path=src) from None
    if table.num_columns == 0:
        raise TraceError("no records (only blank lines)", path=src)
    return table


def is_nested_list(t: pa.DataType) -> bool:
    """A list of lists: one row per token holding [layers][top-k] experts."""
    lists = (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list)
    return any(f(t) for f in lists) and any(f(t.value_type) for f in lists)


def _wanted(columns: RouteColumns) -> list[str]:
    wanted = [columns.request, columns.token, columns.layer, columns.experts]
    wanted += [c for c in (columns.token_id, columns.prefill) if c]
    return list(dict.fromkeys(wanted))  # one column may serve two roles (a token index as its id)


def _check_text(src: str, fmt: str) -> None:
    """No records in an empty or blank file; the first line that is not UTF-8."""
    blank = True
    decoder = codecs.getincrementaldecoder("utf-8")()
    with open(src, "rb") as fh:
        offset = 0
        while chunk := fh.read(CHUNK):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError:
                _find_bad_line(src, fmt)
                raise TraceError("the file is not UTF-8 text", path=src) from None
            if blank and chunk.strip():
                blank = False
            offset += len(chunk)
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise TraceError("the file ends inside a UTF-8 character", path=src) from None
    if blank:
        raise TraceError(
            "no records (the file is empty)" if offset == 0 else "no records (only blank lines)",
            path=src,
        )


def _find_bad_line(src: str, fmt: str) -> None:
    """Raise naming the first line that is not UTF-8 (or, for JSON lines, not a JSON object)."""
    what = "UTF-8 JSON lines" if fmt == "jsonl" else "UTF-8 CSV"
    with open(src, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise TraceError(
                    f"line {number} is not {what}: byte 0x{raw[exc.start]:02x} at column "
                    f"{exc.start + 1} is not UTF-8",
                    path=src,
                ) from None
            if fmt != "jsonl" or not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TraceError(
                    f"line {number} is not {what}: {exc.msg} at column {exc.colno}", path=src
                ) from None
            if not isinstance(value, dict):
                raise TraceError(
                    f"line {number} is not {what}: a JSON {type(value).__name__}, not an object",
                    path=src,
                )


def _csv_header(src: str) -> list[str]:
    import csv

    with open(src, newline="", encoding="utf-8") as fh:
        return next(csv.reader(fh), [])


def _require(names, columns: RouteColumns, src) -> None:
    # The experts column first: without it nothing else matters, and naming another column
    # instead would send the user after the wrong one.
    for name in sorted(_wanted(columns), key=lambda n: n != columns.experts):
        if name not in names:
            raise TraceError(
                f"missing column (columns are: {', '.join(map(str, names))}; "
                f"choose names with the --*-col options, or a tool's layout with --format)",
                path=src,
                field=name,
            )


# ----------------------------------------------------------------- records ---


def tokens_from_records(
    table: pa.Table,
    src: str,
    columns: RouteColumns,
    *,
    num_layers: int | None,
    num_experts: int | None,
    top_k: int | None,
    report: ImportReport,
) -> tuple[TokenTable, int, int, int]:
    """Group the records by (request, token); returns the table and L, N, k."""
    req_codes, req_names = request_codes(table.column(columns.request), columns.request, src)
    token = integers(table.column(columns.token), columns.token, src)
    layer = integers(table.column(columns.layer), columns.layer, src)
    experts, k = expert_lists(table.column(columns.experts), columns.experts, top_k, src)
    token_id = (
        integers(table.column(columns.token_id), columns.token_id, src)
        if columns.token_id
        else None
    )
    prefill = (
        phase_flags(table.column(columns.prefill), columns.prefill, src)
        if columns.prefill
        else np.zeros(len(token), dtype=bool)
    )
    report.prefill_records = int(prefill.sum())
    L, N = _geometry(token, layer, experts, k, src, columns, num_layers=num_layers, num_experts=num_experts,
                     top_k=top_k, report=report)
    order, start, cells = _tokens(req_codes, req_names, token, layer, src, columns)
    r_s, t_s, l_s = req_codes[order], token[order], layer[order]
    if (cells != L).any():  # some token lacks a layer: gaps, unless the layers were renumbered
        report.suspect = _renumbering(r_s, t_s, l_s, req_names)
    tok_prompt = _prompt_tokens(prefill, order, start, cells, token, req_codes, req_names, src, columns)

    R = len(req_names)
    union = union_buffer(R, L, N, src)
    pf = np.flatnonzero(prefill)
    if len(pf):
        union[np.repeat(req_codes[pf], k), np.repeat(layer[pf], k), experts[pf].ravel()] = True

    def routes_of(sel: np.ndarray) -> np.ndarray:
        # Records of a complete token are a run of L in `order`, layers 0..L-1 ascending.
        rows = (start[sel][:, None] + np.arange(L)[None, :]).ravel()
        return experts[order[rows]].reshape(len(sel), L, k)

    def missing_layer(i: int) -> int:
        present = l_s[start[i] : start[i] + cells[i]]
        return int(np.setdiff1d(np.arange(L), present)[0])

    tt = TokenTable(
        req=r_s[start],
        req_names=req_names,
        idx=t_s[start],
        prompt=tok_prompt,
        token_id=token_id[order[start]] if token_id is not None else None,
        cells=cells,
        rows=np.minimum.reduceat(order, start),
        routes_of=routes_of,
        missing_layer=missing_layer,
        prefill_union=union,
    )
    return tt, L, N, k


def _geometry(token, layer, experts, k: int, src: str, columns: RouteColumns, *, num_layers, num_experts, top_k,
              report: ImportReport) -> tuple[int, int]:
    """L and N (given, or inferred and recorded as such), every record checked against them."""
    _check_range(layer, "layer", num_layers, src, columns.layer)
    _check_range(experts[:, 0], "expert id", None, src, columns.experts)
    _check_range(token, "token index", None, src, columns.token)
    if token.max() > MAX_TOKEN_INDEX:
        row = int(np.argmax(token))
        raise TraceError(
            f"token index {token[row]} is beyond the limit of {MAX_TOKEN_INDEX}",
            path=src,
            row=row,
            field=columns.token,
        )
    if num_layers is not None:
        check_layers(num_layers, f"--num-layers {num_layers}", src, columns.layer)
        L = num_layers
        absent = np.setdiff1d(np.arange(L), layer)
        if len(absent):  # whole layers missing: the log is of another model, not a log with gaps
            raise GeometryMismatch(
                f"no record of layer {absent[0]}"
                + (f" (nor of {len(absent) - 1} more)" if len(absent) > 1 else "")
                + f": the log has {L - len(absent)} of the {L} layers",
                path=src,
                field=columns.layer,
            )
    else:
        L = int(layer.max()) + 1
        check_layers(L, f"layer {L - 1}", src, columns.layer, row=int(np.argmax(layer)))
        report.inferred.append(f"num_layers={L} (largest layer + 1)")
    N = num_experts if num_experts is not None else int(experts.max()) + 1
    if num_experts is None:
        report.inferred.append(f"num_experts={N} (largest expert id + 1; a lower bound)")
    if top_k is None:
        report.inferred.append(f"top_k={k} (experts per record)")
    check_experts(N, k, src, columns.experts)
    bad = np.flatnonzero(experts[:, -1] >= N)
    if len(bad):  # only possible when N was given
        raise GeometryMismatch(
            f"expert id {int(experts[bad[0], -1])} outside [0, {N})",
            path=src,
            row=int(bad[0]),
            field=columns.experts,
        )
    return L, N


def _tokens(req_codes, req_names, token, layer, src: str, columns: RouteColumns):
    """``(order, start, cells)``: records sorted by (request, token, layer), where each token's run
    starts in that order and how many records (layers) it has; a duplicate record fails."""
    order = np.lexsort((layer, token, req_codes))
    r_s, t_s, l_s = req_codes[order], token[order], layer[order]
    dup = np.flatnonzero((r_s[1:] == r_s[:-1]) & (t_s[1:] == t_s[:-1]) & (l_s[1:] == l_s[:-1]))
    if len(dup):
        a, b = sorted((int(order[dup[0]]), int(order[dup[0] + 1])))
        raise TraceError(
            f"second record for request {req_names[r_s[dup[0]]]!r}, token {t_s[dup[0]]}, "
            f"layer {l_s[dup[0]]} (first at row {a})",
            path=src,
            row=b,
            field=columns.layer,
        )
    new_tok = np.ones(len(order), dtype=bool)
    new_tok[1:] = (r_s[1:] != r_s[:-1]) | (t_s[1:] != t_s[:-1])
    start = np.flatnonzero(new_tok)
    return order, start, np.diff(np.append(start, len(order)))


def _renumbering(r_s, t_s, l_s, req_names) -> str:
    """What suggests that tokens were dropped in some layers only and the rest renumbered (one
    index then names different tokens in different layers), or "".

    The sign: a request whose layers each number their tokens ``lo .. lo + n - 1`` without a gap,
    with counts that differ by more than one or rise from one layer to the next.  Explicit indices
    cannot prove it (the same records are a log missing those layers' last tokens), so it is a
    hint for the gap message, not an error; a log cut inside its last token (its last layers one
    token short) does not raise it.  Records sorted by (request, token, layer) come in.
    """
    order = np.lexsort((t_s, l_s, r_s))  # by (request, layer, token)
    r, layer, t = r_s[order], l_s[order], t_s[order]
    new = np.ones(len(r), dtype=bool)
    new[1:] = (r[1:] != r[:-1]) | (layer[1:] != layer[:-1])
    g = np.flatnonzero(new)  # one group per (request, layer), requests then layers ascending
    count = np.diff(np.append(g, len(r)))
    lo, hi = t[g], np.maximum.reduceat(t, g)
    g_req, g_layer = r[g], layer[g]
    rs = np.flatnonzero(np.append(True, g_req[1:] != g_req[:-1]))  # each request's first group
    dense = np.logical_and.reduceat(hi - lo + 1 == count, rs)
    same_lo = np.maximum.reduceat(lo, rs) == np.minimum.reduceat(lo, rs)
    cmax, cmin = np.maximum.reduceat(count, rs), np.minimum.reduceat(count, rs)
    rises = np.zeros(len(g), dtype=bool)
    rises[1:] = (count[1:] > count[:-1]) & (g_req[1:] == g_req[:-1])
    bad = np.flatnonzero(dense & same_lo & ((cmax - cmin > 1) | np.logical_or.reduceat(rises, rs)))
    if not len(bad):
        return ""
    i = int(bad[0])
    grp = slice(rs[i], rs[i + 1] if i + 1 < len(rs) else len(g))
    few, many = int(np.argmin(count[grp])), int(np.argmax(count[grp]))
    return (
        f"request {req_names[g_req[rs[i]]]!r}: layer {g_layer[grp][few]} has {count[grp][few]} "
        f"tokens, layer {g_layer[grp][many]} {count[grp][many]}, each numbered from {lo[rs[i]]} "
        f"without a gap: if tokens were dropped in some layers only and renumbered, indices do not "
        f"match across layers"
    )


def _prompt_tokens(prefill, order, start, cells, token, req_codes, req_names, src: str,
                   columns: RouteColumns) -> np.ndarray:
    """Per token: a prompt (prefill) token; a token with both prefill and decode records fails."""
    n_prompt = np.add.reduceat(prefill[order].astype(np.int64), start)
    mixed = np.flatnonzero((n_prompt != 0) & (n_prompt != cells))
    if len(mixed):
        i = int(mixed[0])
        recs = order[start[i] : start[i] + cells[i]]
        row = int(recs[~prefill[recs]].min())
        raise TraceError(
            f"token {token[row]} of request {req_names[req_codes[row]]!r} has prefill and "
            f"decode records",
            path=src,
            row=row,
            field=columns.prefill,
        )
    return n_prompt > 0


def expert_lists(
    col: pa.ChunkedArray, name: str, top_k: int | None, src: str
) -> tuple[np.ndarray, int]:
    """Experts of every record, sorted: int64 [records, k]."""
    if col.null_count:
        raise TraceError("missing value", path=src, row=first_null(col), field=name)
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        # "3 17 42", "3,17,42", "[3, 17, 42]", "3;17;42"
        stripped = pc.utf8_trim(col, characters="[]() \t")
        parts = pc.split_pattern_regex(stripped, pattern=r"[\s,;|]+")
        try:
            col = pc.cast(parts, pa.list_(pa.int64()))
        except pa.ArrowInvalid:
            bad_row = next(
                i
                for i, s in enumerate(parts.to_pylist())
                if any(not x.lstrip("-").isdigit() for x in s)
            )
            raise TraceError(
                "expert list is not a list of integers", path=src, row=bad_row, field=name
            ) from None
    if pa.types.is_fixed_size_list(col.type):
        col = col.cast(pa.list_(col.type.value_type))
    if not (
        pa.types.is_list(col.type) or pa.types.is_large_list(col.type)
    ) or not pa.types.is_integer(col.type.value_type):
        raise TraceError(
            f"column has type {col.type}, expected a list of integers", path=src, field=name
        )
    arr = col.combine_chunks()
    lengths = pc.list_value_length(arr).to_numpy(zero_copy_only=False)
    if arr.flatten().null_count:
        raise TraceError("missing expert id in the list", path=src, field=name)
    k = int(top_k) if top_k is not None else int(lengths[0])
    bad = np.flatnonzero(lengths != k)
    if len(bad):
        raise (GeometryMismatch if top_k is not None else TraceError)(
            f"{int(lengths[bad[0]])} experts, expected {k}"
            f"{'' if top_k is not None else ' like row 0 (pass --top-k to set it)'}",
            path=src,
            row=int(bad[0]),
            field=name,
        )
    if k < 1:
        raise TraceError("records list no experts", path=src, row=0, field=name)
    flat = arr.flatten()
    if pa.types.is_uint64(flat.type) and pc.max(flat).as_py() > np.iinfo(np.int64).max:
        raise TraceError("expert id beyond the int64 range", path=src, field=name)
    values = flat.to_numpy().astype(np.int64).reshape(-1, k)
    values.sort(axis=1)
    same = values[:, 1:] == values[:, :-1]
    dup = np.flatnonzero(same.any(axis=1))
    if len(dup):
        r = int(dup[0])
        raise TraceError(
            f"expert {int(values[r, 1:][same[r]][0])} listed twice", path=src, row=r, field=name
        )
    return values, k


def _check_range(values: np.ndarray, what: str, limit: int | None, src: str, name: str) -> None:
    bad = np.flatnonzero(values < 0)
    if len(bad):
        raise TraceError(f"negative {what} {values[bad[0]]}", path=src, row=int(bad[0]), field=name)
    if limit is not None:
        bad = np.flatnonzero(values >= limit)
        if len(bad):
            raise GeometryMismatch(
                f"{what} {values[bad[0]]} outside [0, {limit})",
                path=src,
                row=int(bad[0]),
                field=name,
            )
