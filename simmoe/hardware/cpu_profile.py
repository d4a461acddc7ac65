"""Profile names of the CPU-expert regime: ``MODEL[/FORMAT]@GPU[+LINK]+CPU~PLACEMENT[~ENGINE]``.

The physical profile grammar ``MODEL@GPU[:tpN][+LINK][~SETTING]`` extended
(docs/cpu-experts.md): ``/FORMAT`` after the model names the experts' weight
format (``data/formats.toml``; default the checkpoint's), ``+CPU`` a host of
``data/cpus.toml`` (``+LINK`` before it, optional, the GPU's host link by
default), ``~PLACEMENT`` where the experts are computed (simmoe's own, or a plugin:
``~placement=NAME[,KEY=VALUE...]``, :func:`parse_any_placement`), ``~ENGINE`` whether
the GPU overlaps the CPU (``llamacpp``, the default: in turn;
``ktransformers``: overlapped).  For example
``qwen3-30b-a3b/q4_k_m@rtx2080+i9-10900x~cpu-layers:36``.

A name that names no CPU, no format and no placement is an ordinary physical
profile (:mod:`simmoe.hardware.physical`), read exactly as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simmoe.errors import ProfileError
from simmoe.hardware.catalogue import (
    CatalogueError,
    cpu_names,
    format_names,
    link_names,
    load_cpu,
    load_format,
    load_gpu,
    load_link,
    load_model,
)
from simmoe.hardware.cpu_forward import (
    DEFAULT_ENGINE,
    ENGINES,
    PLACEMENT_HELP,
    CpuForward,
    CpuTerms,
    Placement,
    load_cpu_terms,
    parse_placement,
)
from simmoe.hardware.physical import Overheads, PhysicalModel


@dataclass(frozen=True)
class CpuSpec:
    model: str
    format: str
    gpu: str
    link: str | None
    cpu: str
    placement: Placement
    engine: str


BUILTIN_PLACEMENTS = ("cpu-layers", "cpu-all", "cpu-misses", "fiddler")
PLUGIN_PREFIX = "placement="


def parse_any_placement(text: str) -> Placement | None:
    """simmoe's own placements (:func:`parse_placement`) or a plugin's, ``placement=NAME[,KEY=VALUE...]``:
    NAME registered under ``simmoe.placements`` or ``module:Name``, loaded by the replay; None otherwise."""
    if not text.startswith(PLUGIN_PREFIX):
        return parse_placement(text)
    spec, *pairs = text[len(PLUGIN_PREFIX):].split(",")
    if not spec:
        raise ProfileError(f"placement {text!r}: name the placement after 'placement=' (a name registered "
                           "under simmoe.placements, or module:Name)")
    if spec.partition(":")[0] in BUILTIN_PLACEMENTS:
        raise ProfileError(f"placement {text!r}: {spec} is simmoe's own placement; write ~{spec}")
    options: dict[str, str] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key or not value:
            raise ProfileError(f"placement {text!r}: option {pair!r} is not KEY=VALUE")
        if key in options:
            raise ProfileError(f"placement {text!r}: option {key!r} given twice")
        options[key] = value
    return Placement("plugin", spec=spec, options=tuple(options.items()))


def _placement_or_none(text: str) -> Placement | None:
    try:
        return parse_any_placement(text)
    except ProfileError:
        return Placement("layers")     # malformed, but meant as a placement


def is_cpu_name(name: str) -> bool:
    """Whether ``name`` is a profile of this regime: a format, a placement or a CPU in it."""
    name = str(name)
    if "@" not in name or name.endswith(".toml"):
        return False
    model, _, rest = name.partition("@")
    head, *tails = rest.split("~")
    if "/" in model or any(_placement_or_none(t) is not None for t in tails):
        return True
    try:
        cpus = set(cpu_names())
    except CatalogueError:
        return False
    return any(p in cpus for p in head.split("+")[1:])


def parse_cpu_name(name: str) -> CpuSpec:
    """The parts of ``MODEL[/FORMAT]@GPU[+LINK]+CPU~PLACEMENT[~ENGINE]``, each checked; else one line."""
    model_part, _, rest = str(name).partition("@")
    model, _, fmt = model_part.partition("/")
    head, *tails = rest.split("~")
    gpu, *plus = head.split("+")
    if ":tp" in gpu:
        raise ProfileError(f"{name}: tensor parallelism is not modelled with experts on the CPU (one GPU)")
    cpus, links = cpu_names(), link_names()
    cpu = [p for p in plus if p in cpus]
    link = [p for p in plus if p in links]
    unknown = [p for p in plus if p not in cpus and p not in links]
    if unknown:
        raise ProfileError(f"{name}: unknown CPU or link {unknown[0]!r}; CPUs: {', '.join(cpus)}; "
                           f"links: {', '.join(links)} (simmoe models --gpus)")
    if len(cpu) != 1:
        raise ProfileError(f"{name}: name one CPU after the GPU (+CPU, one of {', '.join(cpus)}): "
                           "MODEL[/FORMAT]@GPU[+LINK]+CPU~PLACEMENT")
    if len(link) > 1:
        raise ProfileError(f"{name}: name at most one link ({' and '.join(link)} given)")
    placements = [p for p in (parse_any_placement(t) for t in tails) if p is not None]
    engines = [t for t in tails if t in ENGINES]
    other = [t for t in tails if t not in ENGINES and parse_any_placement(t) is None]
    if other:
        raise ProfileError(f"{name}: {other[0]!r} is neither a placement ({PLACEMENT_HELP}) nor an engine "
                           f"({', '.join(ENGINES)})")
    if len(placements) != 1:
        raise ProfileError(f"{name}: name one placement of the experts: {PLACEMENT_HELP}")
    if len(engines) > 1:
        raise ProfileError(f"{name}: name at most one engine ({', '.join(ENGINES)})")
    if fmt and fmt.lower() not in format_names():
        raise ProfileError(f"{name}: unknown weight format {fmt!r}; known: {', '.join(format_names())}")
    return CpuSpec(model, fmt.lower(), gpu, link[0] if link else None, cpu[0], placements[0],
                   engines[0] if engines else DEFAULT_ENGINE)


def build_cpu_forward(name: str, terms: CpuTerms | None = None) -> CpuForward:
    """The :class:`CpuForward` of a profile name, its placement and memory checked (one line each)."""
    spec = parse_cpu_name(name)
    model, gpu, cpu = load_model(spec.model), load_gpu(spec.gpu), load_cpu(spec.cpu)
    link = load_link(spec.link or gpu.host_link)
    fmt = load_format(spec.format or (model.expert_dtype if model.expert_dtype in format_names() else "bf16"))
    if spec.placement.kind == "layers" and spec.placement.layers > model.decoder_layers:
        raise ProfileError(f"{name}: cpu-layers:{spec.placement.layers} names more layers than "
                           f"{model.name} has ({model.decoder_layers} decoder layers)")
    terms = terms if terms is not None else load_cpu_terms()
    o = Overheads(efficiency=terms.gpu_efficiency, source=terms.source)
    fwd = CpuForward(PhysicalModel(model, gpu, overheads=o), cpu, fmt, spec.placement, link, terms, spec.engine)
    check_memory(fwd, name)
    return fwd


def memory_use(fwd: CpuForward) -> tuple[float, float, float]:
    """(bytes on the GPU, bytes of experts in host RAM, every weight's bytes) of a placement."""
    dense = float(fwd.w_bytes.sum() + fwd.head_bytes)
    experts = fwd.E * fwd.N
    gpu_experts = float(experts[~fwd.cpu_layer].sum())
    # a cache placement keeps every expert in host RAM (its cache budget is checked with the replay); a
    # plugin's experts are placed in the replay, which checks both memories then
    kind = fwd.placement.kind
    host = 0.0 if kind == "plugin" else float(experts.sum()) if fwd.placement.uses_cache else \
        float(experts[fwd.cpu_layer].sum())
    return dense + gpu_experts, host, dense + float(experts.sum())


def check_memory(fwd: CpuForward, name: str) -> None:
    """The GPU must hold its part and host RAM the CPU's experts (weights only: a refusal is certain)."""
    on_gpu, host, total = memory_use(fwd)
    gib = 2.0 ** 30
    gpu_mem, ram = fwd.gpu.gpu.memory_bytes, fwd.cpu.memory_bytes
    if total > gpu_mem + ram:
        raise ProfileError(f"{name}: {fwd.model.name} in {fwd.fmt.name} takes {total / gib:.1f} GiB, more than "
                           f"host RAM + GPU memory ({ram / gib:.0f} + {gpu_mem / gib:.0f} GiB); "
                           "pick a narrower format or a larger host")
    if on_gpu > gpu_mem:
        hint = _fewest_layers(fwd, gpu_mem)
        raise ProfileError(f"{name}: the GPU's part of {fwd.model.name} in {fwd.fmt.name} takes "
                           f"{on_gpu / gib:.1f} GiB but {fwd.gpu.gpu.name} holds {gpu_mem / gib:.0f} GiB; "
                           + (f"put the experts of more layers on the CPU (~cpu-layers:{hint} at least) or "
                              if hint is not None else "")
                           + "pick a narrower format")
    if host > ram:
        raise ProfileError(f"{name}: the CPU's experts of {fwd.model.name} in {fwd.fmt.name} take "
                           f"{host / gib:.1f} GiB but the host has {ram / gib:.0f} GiB of RAM; keep fewer "
                           "layers' experts on the CPU or pick a narrower format")


def _fewest_layers(fwd: CpuForward, gpu_mem: float) -> int | None:
    """The fewest decoder layers N whose experts on the CPU leave the GPU's part within its memory."""
    dense = float(fwd.w_bytes.sum() + fwd.head_bytes)
    moe = np.asarray(fwd.model.moe_layers)
    experts = fwd.E * fwd.N
    for n in range(fwd.model.decoder_layers + 1):
        if dense + float(experts[moe >= n].sum()) <= gpu_mem:
            return n
    return None


def cpu_profile_fields(name: str, terms: CpuTerms | None = None) -> dict:
    """The :class:`~simmoe.hardware.profile.HardwareProfile` fields of a CPU-regime name.

    Not resident (experts live in host RAM); ``physical`` holds the
    :class:`CpuForward` that the residency stage times forwards with
    (:mod:`simmoe.replay.residency_cpu`); the event model's fields are what
    the selectors' cost models and drafting need.
    """
    fwd = build_cpu_forward(name, terms)
    b, beta = fwd.cost_model(64, levels=4)
    one, two = fwd.forward_ms(1, 0.0), fwd.forward_ms(2, 0.0)
    e_mean = float(fwd.E.mean()) if fwd.L_moe else 0.0
    # from the rounded bytes the profile records, or validate() finds the copy faster than its link allows
    copy = round(e_mean) / fwd.link_bw * 1e3
    return dict(
        name=name, device=f"{fwd.gpu.gpu.name} + {fwd.cpu.name}", model=fwd.model.name,
        expert_bytes=int(round(e_mean)), num_layers=fwd.L_moe, resident=False, copies_in_flight=1,
        copy_ms=copy, link_gbps=fwd.link.gbps,
        description=f"CPU-expert cost model: {fwd.describe()}",
        source=(f"CPU-expert cost model (simmoe.hardware.cpu_forward): {fwd.model.name} geometry (models.toml: "
                f"{fwd.model.key}) in {fwd.fmt.name} (formats.toml) x {fwd.gpu.gpu.name} (gpus.toml: "
                f"{fwd.gpu.gpu.key}) x {fwd.cpu.name} (cpus.toml, {fwd.isa}) over {fwd.link.name}; "
                f"{fwd.terms.source}"),
        forward_ms=one, token_ms=max(two - one, 0.0), commit_ms=fwd.o.step_ms, expert_ms=beta,
        draft_level_ms=fwd.draft_ms(1, served=False), draft_fixed_ms=fwd.o.spec_iteration_ms, selector_ms=0.0,
        prefill_token_ms=max(two - one, 0.0), cost_b_cache=tuple(b), cost_beta_cache=beta,
        cost_b_no_cache=tuple(b), cost_beta_no_cache=beta,
        notes=f"placement {fwd.placement.text}, engine {fwd.engine}, format {fwd.fmt.key}", physical=fwd)
