"""GPU descriptions and host links (``data/gpus.toml``): datasheet peaks, and the links an offloaded expert crosses.

The physical cost model (``physical.py``) applies its fitted efficiency to
these peaks; ``simmoe models --gpus`` lists them (docs/models-and-gpus.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from simmoe.hardware.catalogue_io import DATA_DIR, CatalogueError, read_toml

GPUS_FILE = DATA_DIR / "gpus.toml"


@dataclass(frozen=True)
class GPU:
    """One GPU's datasheet peaks (gpus.toml)."""

    key: str
    name: str
    hbm_gbps: float
    memory_gb: float
    bf16_tflops: float
    fp8_tflops: float
    interconnect: str
    interconnect_gbps: float
    allreduce_latency_us: float
    host_link: str
    sources: tuple[str, ...] = field(default=())

    def peak_tflops(self, dtype: str) -> float:
        """Tensor-core peak for weights of ``dtype`` (FP8 without FP8 tensor cores and MXFP4 run at BF16)."""
        if dtype == "fp8" and self.fp8_tflops > 0:
            return self.fp8_tflops
        return self.bf16_tflops

    @property
    def memory_bytes(self) -> float:
        """Device memory in bytes, reading the datasheet's GB as 2^30 bytes (an A100 80GB holds 80 GiB)."""
        return self.memory_gb * 2.0 ** 30


@dataclass(frozen=True)
class Link:
    """A host-to-device link (gpus.toml ``[links.*]``): sustained pinned copy bandwidth."""

    key: str
    name: str
    gbps: float
    source: str


_GPU_FLOATS = ("hbm_gbps", "memory_gb", "bf16_tflops", "fp8_tflops", "interconnect_gbps",
               "allreduce_latency_us")


def _gpu_doc() -> dict:
    return read_toml(GPUS_FILE, "GPU description")


def _gpu_from_table(key: str, t: Any, origin: str) -> GPU:
    where = f"{origin}: gpu {key!r}"
    if not isinstance(t, dict):
        raise CatalogueError(f"{where}: must be a table")
    v: dict[str, Any] = {"key": key}
    for name in _GPU_FLOATS:
        x = t.get(name)
        if x is None:
            raise CatalogueError(f"{where}: missing field {name!r}")
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
            raise CatalogueError(f"{where}: field {name!r} must be a number >= 0, got {x!r}")
        v[name] = float(x)
    for name in ("hbm_gbps", "bf16_tflops", "interconnect_gbps"):
        if v[name] <= 0:
            raise CatalogueError(f"{where}: field {name!r} must be > 0")
    for name in ("name", "interconnect", "host_link"):
        if not isinstance(t.get(name), str):
            raise CatalogueError(f"{where}: missing field {name!r}")
        v[name] = t[name]
    v["sources"] = tuple(t.get("sources", ()))
    return GPU(**v)


def load_gpus() -> dict[str, GPU]:
    doc = _gpu_doc()
    return {k: _gpu_from_table(k, t, str(GPUS_FILE)) for k, t in doc.get("gpus", {}).items()}


def gpu_names() -> list[str]:
    return list(load_gpus())


def load_gpu(name: str) -> GPU:
    gpus = load_gpus()
    if name not in gpus:
        raise CatalogueError(f"unknown GPU {name!r}; known: {', '.join(gpus)}")
    return gpus[name]


def load_links() -> dict[str, Link]:
    out = {}
    for k, t in _gpu_doc().get("links", {}).items():
        g = t.get("gbps")
        if isinstance(g, bool) or not isinstance(g, (int, float)) or g <= 0:
            raise CatalogueError(f"{GPUS_FILE}: link {k!r}: field 'gbps' must be a number > 0")
        out[k] = Link(k, str(t.get("name", k)), float(g), str(t.get("source", "")))
    return out


def link_names() -> list[str]:
    return list(load_links())


def load_link(name: str) -> Link:
    links = load_links()
    if name not in links:
        raise CatalogueError(f"unknown host link {name!r}; known: {', '.join(links)}")
    return links[name]
