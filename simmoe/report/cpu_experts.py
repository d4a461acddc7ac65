"""``python -m simmoe.report.cpu_experts``: experts computed on the CPU, AR and speculative decoding.

For Qwen3-30B-A3B, DeepSeek-V2-Lite and DeepSeek-V3 at Q4_K_M on a desktop
(Ryzen 9 7950X + RTX 4090), a HEDT (i9-10900X + RTX 2080, the system of the
fitted figure) and a server (EPYC 9654 + RTX 4090), replays of a SYNTHETIC
trace with each model's geometry (the gsm8k preset's routing and drafter,
:func:`simmoe.hardware.catalogue.with_model`) under the placements of
docs/cpu-experts.md:

* AR tokens/s as N in ``cpu-layers:N`` (llama.cpp ``--n-cpu-moe N``) varies;
* ``cpu-misses`` (a GPU LRU cache whose misses run on the CPU) and Fiddler's
  rule against the cache's size;
* speculative decoding (EAGLE-3, EVICT, SpecFit, llama.cpp's chain rule) in
  each placement, with EVICT's profiled C(k)/C(1), and when it is slower
  than AR (:mod:`simmoe.report.cpu_experts_render`, computed from the runs).

Writes ``reports/cpu-experts.md`` and its figures ``reports/figures/cpu-experts-*.png``.
Every number is a prediction of the model of docs/cpu-experts.md whose one fitted
term is η_mem (to llmfit PR #755); a placement that does not fit is shown refused.

    python -m simmoe.report.cpu_experts [--out reports/cpu-experts.md] [--quick]
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import time
from pathlib import Path

from simmoe.errors import SimmoeError, one_line_parser
from simmoe.progress import bar as progress_bar
from simmoe.report.cpu_experts_render import FITTED, SELECTORS, SYSTEMS

MODELS = ("qwen3-30b-a3b", "deepseek-v2-lite", "deepseek-v3")
FORMAT = "q4_k_m"
LAYER_POINTS, QUICK_LAYER_POINTS = 7, 4            # N evenly from 0 to the decoder layers, and the fewest that fit
# slots per layer, a share of each layer's experts (the smallest so that DeepSeek-V3's fit in 24 GB)
CACHE_FRACTIONS = (1 / 128, 1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2)
QUICK_CACHE_FRACTIONS = (1 / 16, 1 / 4)
PRESET = "gsm8k"


@dataclasses.dataclass(frozen=True)
class Setting:
    quick: bool = False
    models: tuple[str, ...] = MODELS
    systems: tuple[str, ...] = tuple(s[0] for s in SYSTEMS)
    requests: int = 4
    tokens: int = 880                               # output tokens of each model's trace
    seed: int = 0

    @property
    def fractions(self) -> tuple[float, ...]:
        return QUICK_CACHE_FRACTIONS if self.quick else CACHE_FRACTIONS


def model_trace(model: str, setting: Setting):
    """The SYNTHETIC trace of ``model``: the preset's routing and drafter with the model's geometry."""
    from simmoe.hardware.catalogue import load_model, with_model
    from simmoe.synth import generate, preset

    pr = preset(PRESET)
    params, fitted = with_model(pr.params, pr.fitted_to, load_model(model), PRESET)
    params = params.with_(num_requests=setting.requests, total_output_tokens=setting.tokens)
    return generate(params, seed=setting.seed, num_requests=setting.requests, preset=PRESET, fitted_to=fitted)


def profile_name(model: str, system: str, placement: str) -> str:
    _, _, gpu, cpu = next(s for s in SYSTEMS if s[0] == system)
    return f"{model}/{FORMAT}@{gpu}+{cpu}~{placement}"


@functools.cache
def try_profile(name: str):
    """(profile, None), or (None, the refusal's reason without the profile's name)."""
    from simmoe.hardware.profile import load_profile

    try:
        return load_profile(name), None
    except SimmoeError as exc:
        text = str(exc)
        for head in (f"profile {name}: ", f"{name}: "):
            text = text[len(head):] if text.startswith(head) else text
        return None, text


def cache_refusal(profile, slots: int, L: int) -> str | None:
    """Why a GPU cache of ``slots`` per layer does not fit beside the non-expert weights (as the replay says)."""
    from simmoe.hardware.cpu_profile import memory_use

    fwd = profile.physical
    cache = slots * L * float(fwd.E.mean())
    if memory_use(fwd)[0] + cache <= fwd.gpu.gpu.memory_bytes:
        return None
    return (f"a cache of {slots * L} experts ({cache / 2**30:.1f} GiB) and the non-expert weights do not fit in "
            f"{fwd.gpu.gpu.name}'s {fwd.gpu.gpu.memory_bytes / 2**30:.0f} GiB")


def layer_points(decoder_layers: int, quick: bool) -> list[int]:
    import numpy as np

    n = QUICK_LAYER_POINTS if quick else LAYER_POINTS
    return sorted({int(round(x)) for x in np.linspace(0, decoder_layers, n)})


@functools.cache
def fewest_layers(model: str, system: str) -> int | None:
    """The fewest ``cpu-layers:N`` that fit (the GPU holds every other layer's experts), None if none does.

    The GPU's part shrinks as N grows, so the first N whose GPU part fits is found by bisection; host RAM
    (which fills as N grows) may still refuse it.
    """
    from simmoe.hardware.catalogue import load_model

    def gpu_fits(n: int) -> bool:
        prof, why = try_profile(profile_name(model, system, f"cpu-layers:{n}"))
        return prof is not None or "the GPU's part" not in (why or "")

    lo, hi = 0, load_model(model).decoder_layers
    if not gpu_fits(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if gpu_fits(mid) else (mid + 1, hi)
    return lo if try_profile(profile_name(model, system, f"cpu-layers:{lo}"))[0] is not None else None


def plan(model: str, system: str, trace, setting: Setting) -> tuple[list, list]:
    """(jobs, refused): jobs are (labels, profile, config); refused rows carry their reason."""
    from simmoe.hardware.catalogue import load_model
    from simmoe.hardware.model_check import check_profile_model
    from simmoe.replay.engine import ReplayConfig

    g = trace.geometry
    L, N = int(g.num_layers), int(g.num_experts)
    base = {"model": model, "system": system}
    jobs, refused = [], []

    def add(kind, placement, x, selectors, slots=0):
        name = profile_name(model, system, placement)
        prof, why = try_profile(name)
        if prof is not None:        # the trace is built with the model's geometry: a mismatch is a bug here
            check_profile_model(g, prof, name)
        if prof is not None and slots:
            why = cache_refusal(prof, slots, L)
        mib = slots * L * float(prof.physical.E.mean()) / 2**20 if prof is not None else float("nan")
        for sel in selectors:
            lab = {**base, "kind": kind, "placement": placement, "x": x, "slots": slots, "mib": mib, "selector": sel}
            if why is not None:
                refused.append({**lab, "status": "refused", "reason": why})
                continue
            cfg = ReplayConfig(selector=sel, slots=slots, cache="lru" if slots else "none", hardware=name,
                               selector_ms=0.0, seed=setting.seed)
            jobs.append((lab, prof, cfg))

    fitted = {FITTED[2]} if (model, system) == FITTED[:2] else set()
    for n in sorted(set(layer_points(load_model(model).decoder_layers, setting.quick)) | fitted
                    | {x for x in [fewest_layers(model, system)] if x is not None}):
        add("layers", f"cpu-layers:{n}", n, ("ar",))
    add("layers", "cpu-all", "all", ("ar",))
    sizes = sorted({max(1, int(round(f * N))) for f in setting.fractions})
    for kind in ("misses", "fiddler"):
        for s in ([0] if kind == "fiddler" else []) + sizes:
            add(kind, "cpu-misses" if kind == "misses" else "fiddler", s, ("ar",), s)
    spec = _spec_placements(model, system, L, sizes)
    for placement, slots in spec:
        add("spec", placement, slots, SELECTORS, slots)
    return jobs, refused


def _spec_placements(model: str, system: str, L: int, sizes: list[int]) -> list[tuple[str, int]]:
    """The placements speculation is shown in: the fewest CPU layers that fit, all on the CPU, and the largest
    cache that fits (misses on the CPU, and Fiddler's rule)."""
    n = fewest_layers(model, system)
    out = [(f"cpu-layers:{n if n is not None else 0}", 0), ("cpu-all", 0)]
    prof, _ = try_profile(profile_name(model, system, "cpu-misses"))
    fit = [s for s in sizes if prof is not None and cache_refusal(prof, s, L) is None]
    slots = max(fit) if fit else sizes[0]
    return out + [("cpu-misses", slots), ("fiddler", slots)]


def run_model(model: str, setting: Setting, progress=lambda n: None) -> tuple[list[dict], dict, dict]:
    """Every replay of one model on every system: (rows, C(k) tables by (system, placement), trace facts)."""
    from simmoe.replay.engine import replay
    from simmoe.replay.selection import evict_table

    trace = model_trace(model, setting)
    rows: list[dict] = []
    ck: dict = {}
    for system in setting.systems:
        jobs, refused = plan(model, system, trace, setting)
        rows += refused
        plans: dict = {}
        for lab, prof, cfg in jobs:
            s = replay(trace, cfg, prof, plans=plans).summary()
            rows.append({**lab, "status": "ok", "reason": "", "tps": s["decode_tps"], "mat": s["mat"],
                         "ms_cycle": s["ms_per_cycle"], "cpu_reads": s["cpu_reads_per_token"],
                         "cpu_ms": s["cpu_ms_per_token"], "gpu_ms": s["gpu_ms_per_token"],
                         "dram_gb": s["dram_gb_per_token"], "gpu_share": s["gpu_share"],
                         "copies": s["h2d_per_token"]})
            if lab["kind"] == "spec" and lab["selector"] == "evict":
                ck[(system, lab["placement"])] = evict_table(trace, prof)
            progress(1)
    g = trace.geometry
    facts = {"model": model, "name": g.name or model, "L": int(g.num_layers), "N": int(g.num_experts),
             "k": int(g.top_k), "requests": len(trace.requests), "tokens": int(trace.requests.output_len.sum()),
             "synthetic": bool(trace.is_synthetic), "K": int(trace.pool_shape.K),
             "max_nodes": int(trace.pool_shape.max_nodes)}
    return rows, ck, facts


def main(argv=None) -> int:
    p = one_line_parser(prog="python -m simmoe.report.cpu_experts", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="reports/cpu-experts.md", help="the report (figures in figures/ beside it)")
    p.add_argument("--quick", action="store_true", help="one short request, fewer N and cache sizes (a check)")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated (default {','.join(MODELS)})")
    p.add_argument("--systems", default=",".join(s[0] for s in SYSTEMS),
                   help=f"comma-separated of {', '.join(s[0] for s in SYSTEMS)} (default all)")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    try:
        return _run(args)
    except SimmoeError as exc:
        print(f"simmoe.report.cpu_experts: error: {exc}", file=sys.stderr)
        return 2


def _setting(args) -> Setting:
    from simmoe.hardware.catalogue import load_model

    models = tuple(m.strip() for m in args.models.split(",") if m.strip())
    systems = tuple(s.strip() for s in args.systems.split(",") if s.strip())
    known = [s[0] for s in SYSTEMS]
    bad = [s for s in systems if s not in known]
    if bad or not systems:
        raise SimmoeError(f"--systems {args.systems!r}: name some of {', '.join(known)}")
    if not models:
        raise SimmoeError("--models: name at least one model")
    for m in models:
        load_model(m)           # an unknown model: one line
    if args.quick:
        return Setting(quick=True, models=models, systems=systems, requests=1, tokens=24)
    return Setting(models=models, systems=systems)


def _run(args) -> int:
    from simmoe.atomicio import check_outputs, write_bytes_atomic, write_text_atomic
    from simmoe.report import cpu_experts_render as render

    out = Path(args.out)
    check_outputs([("--out", str(out))], suffixes={"--out": (".md",)})
    setting = _setting(args)
    figures = out.parent / "figures"
    if figures.exists() and not figures.is_dir():
        raise SimmoeError(f"--out {out}: {figures} is not a folder")
    t0 = time.perf_counter()
    rows, ck, facts = [], {}, []
    with progress_bar(args.no_progress, 16, "replays") as bar:
        for model in setting.models:
            task = bar.add_task(model, total=None)
            r, c, f = run_model(model, setting, progress=lambda n, task=task: bar.advance(task, n))
            rows += r
            ck.update({(model, *key): v for key, v in c.items()})
            facts.append(f)
    command = "python -m simmoe.report.cpu_experts --out " + str(args.out) + (" --quick" if args.quick else "")
    if args.models != ",".join(MODELS) or args.systems != ",".join(s[0] for s in SYSTEMS):
        command += f" --models {args.models} --systems {args.systems}"
    pngs = render.figures(rows, facts, setting)
    text = render.render(rows, ck, facts, setting, command, time.perf_counter() - t0, figures.name)
    figures.mkdir(exist_ok=True)
    for name, data in pngs.items():
        write_bytes_atomic(figures / name, data)
    write_text_atomic(out, text)
    print(f"wrote {out} and {len(pngs)} figures in {figures}/", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
