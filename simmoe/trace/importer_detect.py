"""Which layout a routing log has: the container from the file name, then a look inside.

A file is read as one of the tools' layouts only when its content says so
unambiguously (docs/importing-routes.md, "Formats"); otherwise it keeps its
container's generic reading (long format or dense arrays), which names what
is missing when it fails.  ``--format`` skips the look and forces a layout.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from simmoe.errors import SimmoeError, TraceError
from simmoe.trace.importer_common import RouteColumns

CONTAINERS = {
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
CONTAINER_NAMES = ("jsonl", "csv", "parquet", "npy", "npz", "safetensors")
TOOL_NAMES = ("warp", "vllm", "megatron", "llama-moe-trace", "llama-csv", "flame")
SNIFF_BYTES = 1 << 20  # how much of a text file is looked at (a vLLM response line can be long)
_INTS = re.compile(r"^\s*\d+\s*$")


def detect(path: str, columns: RouteColumns) -> str:
    """The layout of ``path`` (a container or a tool name); a folder must hold a tool's files."""
    p = Path(path)
    if p.is_dir():
        return _folder(p)
    container = CONTAINERS.get(p.suffix.lower())
    if container is None:
        raise SimmoeError(
            f"{path}: cannot tell the format from the file name; pass --format "
            f"{', '.join((*CONTAINER_NAMES, *TOOL_NAMES)[:-1])} or {TOOL_NAMES[-1]}"
        )
    look = {"jsonl": _jsonl, "csv": _csv, "parquet": _parquet, "npz": _arrays,
            "safetensors": _arrays}.get(container)
    return (look(p, container, columns) if look else None) or container


def container_of(path: str) -> str | None:
    """The container a tool's log comes in (None for a folder)."""
    p = Path(path)
    return None if p.is_dir() else CONTAINERS.get(p.suffix.lower())


def _folder(p: Path) -> str:
    names = [c.name for c in p.iterdir()]
    if any(re.match(r"^layer_\d+\.parquet$", n) for n in names):
        return "flame"
    if any(n.lower().endswith((".npy", ".npz", ".safetensors")) for n in names):
        return "vllm"
    raise TraceError("a folder holds neither FLAME-MoE-Traces' layer_NN.parquet files nor "
                     "per-request .npy/.npz/.safetensors files; give a file", path=str(p))


def _head(p: Path) -> str:
    with open(p, "rb") as fh:
        return fh.read(SNIFF_BYTES).decode("utf-8", "replace")


def _jsonl(p: Path, _container: str, columns: RouteColumns) -> str | None:
    head = _head(p)
    first = next((line for line in head.splitlines() if line.strip()), "")
    try:
        obj = json.loads(first)
    except json.JSONDecodeError:  # a pretty-printed document, or a line longer than the look
        return "vllm" if re.search(r'"(prompt_)?routed_experts"\s*:', head) else None
    if not isinstance(obj, dict) or columns.experts in obj:
        return None
    if "tok" in obj and "layers" in obj:
        return "warp"
    if "top_indices" in obj and "layer" in obj and "step" in obj:
        return "megatron"
    choices = obj.get("choices")
    if "routed_experts" in obj or "prompt_routed_experts" in obj or (
        isinstance(choices, list) and any(isinstance(c, dict) and "routed_experts" in c for c in choices)
    ):
        return "vllm"
    return None


def _csv(p: Path, _container: str, columns: RouteColumns) -> str | None:
    first = next((line for line in _head(p).splitlines() if line.strip()), "")
    fields = [f.strip() for f in first.split(",")]
    if columns.experts in fields:
        return None
    if fields == ["layer_id", "expert_ids"]:
        return "llama-csv"
    if fields == ["layer", "expert"] or (len(fields) == 2 and all(_INTS.match(f) for f in fields)):
        return "llama-moe-trace"
    if len(fields) == 2 and _INTS.match(fields[0]) and re.fullmatch(r"\d+( +\d+)+", fields[1]):
        return "llama-csv"
    return None


def _parquet(p: Path, _container: str, columns: RouteColumns) -> str | None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        names = pq.ParquetFile(str(p)).schema_arrow.names
    except (pa.ArrowException, OSError):
        return None  # the generic reader names the damage
    if columns.experts in names or "indices" not in names:
        return None
    generic = {columns.request, columns.token}
    return None if generic & set(names) else "flame"


def _arrays(p: Path, container: str, columns: RouteColumns) -> str | None:
    from simmoe.trace.importer_arrays import open_source

    try:
        names = open_source(str(p), container).names
    except SimmoeError:
        return None  # the generic reader names the damage
    if columns.experts in names:
        return None
    return "vllm" if any(n.endswith("routed_experts") for n in names) else None
