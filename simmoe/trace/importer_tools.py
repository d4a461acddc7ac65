"""Routing logs of other tools, token by token: sqliteai/warp's JSON lines, vLLM's routed-experts
capture and FLAME-MoE-Traces' parquet files (logs of forward passes: ``importer_forwards``).

Each reader turns its log into a :class:`~simmoe.trace.importer_forwards.ToolLog`, dense
per-token arrays that :mod:`simmoe.trace.importer_arrays` checks and assembles like any
dense input; what each layout means and what is assumed is in docs/importing-routes.md.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa

from simmoe.errors import TraceError
from simmoe.trace.importer_common import RouteColumns, integers
from simmoe.trace.importer_forwards import PHASE, REQUEST, ToolLog
from simmoe.trace.importer_records import is_nested_list, read_text

VLLM_OUT, VLLM_PROMPT = "routed_experts", "prompt_routed_experts"
ARRAY_SUFFIXES = (".npy", ".npz", ".safetensors")
FLAME_LAYER = re.compile(r"^layer_(\d+)\.parquet$")


# ------------------------------------------------------------------ warp ---


def warp(src: str, columns: RouteColumns) -> ToolLog:
    """``{"tok": n, "layers": [[ids], ...]}`` per line, one line per decode token.  Requests come
    from ``columns.request`` when the lines have it, else a new one starts where ``tok`` does not
    rise (its counter restarts)."""
    import pyarrow.json as pjson

    table = read_text(src, "jsonl", lambda: pjson.read_json(src))
    names = table.column_names
    if "layers" not in names or not is_nested_list(table.schema.field("layers").type):
        raise TraceError(
            "missing field (a warp trace has one {\"tok\": n, \"layers\": [[ids], ...]} per line; "
            f"fields are: {', '.join(names)})" if "layers" not in names else
            f"field has type {table.schema.field('layers').type}, expected [layers][top-k] lists",
            path=src, field="layers")
    arrays = {"layers": table.column("layers").combine_chunks()}
    cols = {"experts": "layers"}
    if "tok" in names:
        arrays["tok"] = integers(table.column("tok"), "tok", src)
        cols["token"] = "tok"
    notes: list[str] = []
    derived: tuple[str, ...] = ()
    if columns.request in names:
        arrays[columns.request] = table.column(columns.request).combine_chunks()
        cols["request"] = columns.request
    elif "tok" in names:
        tok = arrays["tok"]
        req = np.concatenate([[0], np.cumsum(tok[1:] <= tok[:-1])])
        stem = Path(src).stem
        arrays[REQUEST] = np.array([stem] if req[-1] == 0 else [f"{stem}-{i}" for i in range(req[-1] + 1)],
                                   dtype=object)[req]
        cols["request"], derived = REQUEST, ("request",)
        notes.append(f"requests delimited where tok does not rise ({_count(req[-1] + 1, 'request')})")
    return ToolLog(arrays, RouteColumns(**cols), notes, derived)


# ------------------------------------------------------------------ vLLM ---


def vllm(src: str, fmt: str) -> ToolLog:
    """vLLM's ``--enable-return-routed-experts``: ``routed_experts`` (output tokens) and
    ``prompt_routed_experts`` (prompt tokens), int16 ``[tokens, MoE layers, top-k]`` per request,
    from a saved JSON response (or JSON lines of them), an .npz / .safetensors file, or a folder
    of per-request array files."""
    if Path(src).is_dir():
        parts = _vllm_folder(src)
    elif fmt in ("npz", "safetensors", "npy"):
        parts = _vllm_arrays(src, fmt)
    else:
        parts = _vllm_json(src)
    kept = [p for p in parts if p[2] is not None]
    if not kept:
        raise TraceError(f"no {VLLM_OUT} found (a request preempted by vLLM returns none)", path=src)
    log = _assemble(kept, src)
    if len(kept) < len(parts):
        log.notes.append(f"{_count(len(parts) - len(kept), 'completion')} without {VLLM_OUT} left out "
                         f"(vLLM returns none for a preempted request)")
    return log


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _assemble(parts: list[tuple[str, np.ndarray | None, np.ndarray]], src: str) -> ToolLog:
    """One routes array with the request and phase of each token: each request's prompt tokens,
    then its output tokens, requests in file order."""
    shapes = {p.shape[1:] for _, pr, out in parts for p in (pr, out) if p is not None and p.size}
    if len(shapes) > 1:
        a, b = sorted(shapes)[:2]
        raise TraceError(f"requests disagree on [MoE layers, top-k]: {list(a)} and {list(b)}",
                         path=src, field=VLLM_OUT)
    routes, req, phase = [], [], []
    for rid, prompt, out in parts:
        for arr, is_prompt in ((prompt, True), (out, False)):
            if arr is None or not len(arr):
                continue
            routes.append(arr)
            req += [rid] * len(arr)
            phase.append(np.full(len(arr), is_prompt))
    if not routes:
        raise TraceError(f"every {VLLM_OUT} array is empty", path=src, field=VLLM_OUT)
    arrays = {VLLM_OUT: np.concatenate(routes), REQUEST: np.array(req, dtype=object),
              PHASE: np.concatenate(phase)}
    notes = [f"{_count(len(parts), 'request')}; rows are each request's prompt tokens, then its output tokens"]
    return ToolLog(arrays, RouteColumns(experts=VLLM_OUT, request=REQUEST, prefill=PHASE), notes,
                   derived=("request", "prefill"))


def _routes(value, src: str, where: str, field: str) -> np.ndarray | None:
    """One request's ``[tokens, layers, top-k]`` integer array (None when vLLM returned none)."""
    if value is None:
        return None
    if isinstance(value, str):  # assumed: base64 of an .npy file, as vLLM's binary responses carry it
        try:
            value = np.load(io.BytesIO(base64.b64decode(value, validate=True)), allow_pickle=False)
        except (binascii.Error, ValueError, OSError, EOFError):
            raise TraceError(f"{where}: a string that is not base64 of an .npy array", path=src,
                             field=field) from None
    try:
        arr = np.asarray(value)
    except ValueError:  # ragged nested lists
        raise TraceError(f"{where}: lists of different lengths, not a [tokens, layers, top-k] array",
                         path=src, field=field) from None
    if arr.size == 0:
        return arr.reshape(0, 1, 1).astype(np.int64)
    if arr.ndim != 3 or arr.dtype.kind not in "iu":
        raise TraceError(f"{where}: {arr.dtype} array of shape {arr.shape}, expected integer expert "
                         f"ids [tokens, MoE layers, top-k]", path=src, field=field)
    return arr


def _vllm_json(src: str) -> list:
    """Requests of saved OpenAI-compatible responses: a JSON document, a list of them, or JSON lines."""
    text = Path(src).read_bytes()
    try:
        docs = [json.loads(text)]
    except (json.JSONDecodeError, UnicodeDecodeError):
        docs = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    docs.append(json.loads(line))
                except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                    raise TraceError(f"line {number} is not a JSON response: {exc}", path=src) from None
    if len(docs) == 1 and isinstance(docs[0], list):
        docs = docs[0]
    parts: list = []
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise TraceError(f"response {i} is a JSON {type(doc).__name__}, not an object", path=src)
        rid = str(doc.get("id", i))
        prompt = _routes(doc.get(VLLM_PROMPT), src, f"response {rid!r}", VLLM_PROMPT)
        choices = doc.get("choices", [doc] if VLLM_OUT in doc else [])
        for j, choice in enumerate(choices if isinstance(choices, list) else []):
            if not isinstance(choice, dict):
                raise TraceError(f"response {rid!r}: choice {j} is a JSON {type(choice).__name__}, not an "
                                 f"object", path=src, field="choices")
            name = rid if len(choices) == 1 else f"{rid}-{choice.get('index', j)}"
            out = _routes(choice.get(VLLM_OUT), src, f"response {name!r}", VLLM_OUT)
            parts.append((name, prompt, out))
    return parts


def _vllm_arrays(src: str, fmt: str, name: str | None = None) -> list:
    """``routed_experts`` / ``prompt_routed_experts`` arrays, or ``<id>.routed_experts`` and
    ``<id>.prompt_routed_experts`` for several requests; a .npy file is one request's output."""
    from simmoe.trace.importer_arrays import open_source

    source = open_source(src, fmt)
    stem = name or Path(src).stem
    if fmt == "npy":
        return [(stem, None, _routes(source.get(""), src, f"request {stem!r}", VLLM_OUT))]
    parts = []
    for key in source.names:
        if not key.endswith(VLLM_OUT) or key.endswith(VLLM_PROMPT):
            continue
        prefix = key[: -len(VLLM_OUT)]
        if prefix and not prefix.endswith((".", "/")):
            continue
        rid = prefix[:-1] if prefix else stem
        pname = prefix + VLLM_PROMPT
        prompt = source.get(pname) if pname in source.names else None
        parts.append((rid, _routes(prompt, src, f"request {rid!r}", pname),
                      _routes(source.get(key), src, f"request {rid!r}", key)))
    if not parts:
        raise TraceError(f"no array named {VLLM_OUT} or <request>.{VLLM_OUT} (arrays are: "
                         f"{', '.join(source.names) or 'none'})", path=src, field=VLLM_OUT)
    return parts


def _vllm_folder(src: str) -> list:
    files = sorted(p for p in Path(src).iterdir() if p.suffix.lower() in ARRAY_SUFFIXES)
    if not files:
        raise TraceError(f"no {', '.join(ARRAY_SUFFIXES)} files in the folder", path=src)
    parts = []
    for p in files:
        parts += _vllm_arrays(str(p), p.suffix.lower()[1:])
    return parts


# ----------------------------------------------------------------- FLAME ---


def flame(src: str) -> ToolLog:
    """FLAME-MoE-Traces: a folder of ``layer_NN.parquet`` files whose row i is token i in every
    layer (column ``indices``), or one parquet file of (``layer``, ``indices``) rows, each layer's
    rows in token order.  One request; every token an output token."""
    import pyarrow.parquet as pq

    path = Path(src)
    if path.is_dir():
        files = sorted(((int(m.group(1)), p) for p in path.iterdir()
                        if (m := FLAME_LAYER.match(p.name))), key=lambda t: t[0])
        if not files:
            raise TraceError("no layer_NN.parquet files in the folder", path=src)
        layers = [(f"layer {n:02d} ({p.name})", _read_parquet(str(p), ["indices"])["indices"])
                  for n, p in files]
        notes = [f"{len(files)} layer files, layers {files[0][0]} .. {files[-1][0]} as MoE layers "
                 f"0 .. {len(files) - 1}"]
    else:
        cols = _read_parquet(src, ["layer", "indices"] if "layer" in pq.ParquetFile(src).schema_arrow.names
                             else ["indices"])
        if "layer" not in cols:
            m = FLAME_LAYER.match(path.name)
            layers = [(f"layer {m.group(1) if m else '?'}", cols["indices"])]
        else:
            layer = integers(cols["layer"], "layer", src)
            ids = np.unique(layer)
            layers = [(f"layer {i}", cols["indices"].filter(pa.array(layer == i))) for i in ids]
        notes = [f"{len(layers)} layers in ascending order as MoE layers 0 .. {len(layers) - 1}"]
    counts = [len(col) for _, col in layers]
    if len(set(counts)) > 1:
        a = int(np.argmin(counts))
        b = int(np.argmax(counts))
        raise TraceError(
            f"{layers[a][0]} has {counts[a]} tokens but {layers[b][0]} has {counts[b]}: row i is token i "
            f"in every layer, so tokens dropped or renumbered in some layers only cannot be matched",
            path=src, field="indices")
    routes = np.stack([_flat_lists(col, src, what) for what, col in layers], axis=1)
    notes.append("one request; every row an output token")
    return ToolLog({"indices": routes}, RouteColumns(experts="indices"), notes)


def _read_parquet(src: str, names: list[str]) -> dict:
    import pyarrow.parquet as pq

    try:
        schema = pq.ParquetFile(src).schema_arrow
        missing = [n for n in names if n not in schema.names]
        if missing:
            raise TraceError(f"missing column (FLAME-MoE-Traces' files have 'indices'; columns are: "
                             f"{', '.join(schema.names)})", path=src, field=missing[0])
        table = pq.read_table(src, columns=names)
    except (pa.ArrowException, OSError) as exc:
        raise TraceError(f"cannot parse as parquet: {str(exc).splitlines()[0]}", path=src) from None
    return {n: table.column(n).combine_chunks() for n in names}


def _flat_lists(col: pa.Array, src: str, what: str) -> np.ndarray:
    """``[tokens, k]`` expert ids of a list column (ids kept in their own integer type)."""
    from simmoe.trace.importer_common import first_null

    if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)
            or pa.types.is_fixed_size_list(col.type)) or not pa.types.is_integer(col.type.value_type):
        raise TraceError(f"{what}: column has type {col.type}, expected lists of integer ids",
                         path=src, field="indices")
    if col.null_count:
        raise TraceError(f"{what}: missing value", path=src, row=first_null(col), field="indices")
    values = col.flatten()
    lengths = np.diff(col.offsets.to_numpy()) if hasattr(col, "offsets") else None
    k = int(lengths[0]) if lengths is not None and len(lengths) else len(values) // max(len(col), 1)
    if lengths is not None and (lengths != k).any():
        r = int(np.flatnonzero(lengths != k)[0])
        raise TraceError(f"{what}: {int(lengths[r])} experts, but row 0 lists {k}", path=src, row=r,
                         field="indices")
    if values.null_count:
        raise TraceError(f"{what}: missing expert id", path=src, field="indices")
    return values.to_numpy(zero_copy_only=False).reshape(len(col), k)
