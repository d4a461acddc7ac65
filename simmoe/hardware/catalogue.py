"""The hardware catalogue: models, GPUs and host links, CPUs, expert weight formats — as published.

One import point for what the data files describe; each part lives in its own
module and reads its own file (docs/models-and-gpus.md):

- ``model_spec.py``: the model catalogue (``data/models.toml``), each model's
  geometry and every size derived from it;
- ``gpus.py``: GPU datasheet peaks and the host links of the offload regime
  (``data/gpus.toml``);
- ``cpus.py``: CPU descriptions for experts computed on the host, with DRAM
  bandwidth and ISA peaks computed from them (``data/cpus.toml``);
- ``formats.py``: expert weight formats, bytes per weight from each storage
  type's block layout (``data/formats.toml``);
- ``catalogue_io.py``: the error type, reading the files, names without whitespace.

Public API::

    model_names(), load_model(name_or_path) -> ModelSpec, load_models(path=None)
    gpu_names(), load_gpu(name) -> GPU, link_names(), load_link(name) -> Link
    cpu_names(), load_cpu(name) -> CPU, load_cpus(path=None)
    format_names(), load_format(name) -> WeightFormat, expert_bytes(model, format, layer)
"""

from __future__ import annotations

from simmoe.hardware.catalogue_io import DATA_DIR, CatalogueError, blank_problem, check_name
from simmoe.hardware.cpus import CPU, CPUS_FILE, ISAS, CoreRates, cpu_names, load_cpu, load_cpus
from simmoe.hardware.formats import (
    FORMATS_FILE,
    BlockType,
    WeightFormat,
    expert_bytes,
    expert_bytes_by_layer,
    format_names,
    load_format,
    load_formats,
    mean_expert_bytes,
)
from simmoe.hardware.gpus import GPU, GPUS_FILE, Link, gpu_names, link_names, load_gpu, load_gpus, load_link, load_links
from simmoe.hardware.model_spec import (
    ACTIVE_COUNTS,
    DTYPE_BYTES,
    KV_DTYPE_BYTES,
    MODELS_FILE,
    ModelSpec,
    load_model,
    load_models,
    model_for_geometry,
    model_names,
    with_model,
)

__all__ = [
    "ACTIVE_COUNTS", "CPU", "CPUS_FILE", "DATA_DIR", "DTYPE_BYTES", "FORMATS_FILE", "GPU", "GPUS_FILE", "ISAS",
    "KV_DTYPE_BYTES", "MODELS_FILE", "BlockType", "CatalogueError", "CoreRates", "Link", "ModelSpec",
    "WeightFormat", "blank_problem", "check_name", "cpu_names", "expert_bytes", "expert_bytes_by_layer",
    "format_names", "gpu_names", "link_names", "load_cpu", "load_cpus", "load_format", "load_formats",
    "load_gpu", "load_gpus", "load_link", "load_links", "load_model", "load_models", "mean_expert_bytes",
    "model_for_geometry", "model_names", "with_model",
]
