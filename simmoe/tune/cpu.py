"""llama.cpp's expert placement as a searched dimension: ``--n-cpu-moe N``, ``-cmoe``, ``--moe-cache-mib M``.

A CPU-regime profile (``MODEL[/FORMAT]@GPU[+LINK]+CPU[~PLACEMENT]``,
docs/cpu-experts.md) names the model, its format, the GPU and the host; its
placement, optional here, is only where the search starts.  The placements
searched, each a value of the ``placement`` dimension:

* ``cpu-layers:N`` (``--n-cpu-moe N``): N from the fewest layers whose experts
  must sit on the CPU for the GPU's part to fit in GPU memory up to every
  layer; each N passes the profile's own memory check
  (:func:`simmoe.hardware.cpu_profile.build_cpu_forward`), so no infeasible
  N is ever replayed;
* ``cpu-all`` (``-cmoe``);
* ``cpu-misses:M`` (``--moe-cache-mib M``): a GPU expert cache of M MiB (LRU)
  whose misses run on the CPU; budgets doubling from 1 GiB, and the largest
  multiple of 512 MiB, that fit beside the non-expert weights (weights only,
  as the profile's check) and hold less than every expert.

Fiddler's rule and KTransformers' overlap are not llama.cpp's, so a profile
naming them is refused with ``--engine llama.cpp``; SGLang and vLLM are not
searched with experts on the CPU (one line each).
"""

from __future__ import annotations

from dataclasses import dataclass

from simmoe.errors import SimmoeError

MAX_LAYER_VALUES = 16     # more feasible N than this: an even spread, both ends kept
MIN_CACHE_MIB = 1024
CACHE_STEP_MIB = 512


@dataclass(frozen=True)
class CpuBase:
    """A CPU-regime profile without its placement: what every searched placement is appended to."""

    base: str                  # MODEL[/FORMAT]@GPU[+LINK]+CPU
    start: str | None          # the user's placement (cpu-layers:N, cpu-all, cpu-misses), or None
    engine_tail: str = ""      # "~llamacpp" where the user named it

    def name(self, placement: str) -> str:
        """The profile name of ``placement`` (``cpu-misses:M`` replays ``~cpu-misses`` with an M MiB cache)."""
        kind = placement.partition(":")[0] if placement.startswith("cpu-misses") else placement
        return f"{self.base}~{kind}{self.engine_tail}"


def split_cpu(hardware: str) -> CpuBase | None:
    """``hardware`` as a :class:`CpuBase` when it names the CPU-expert regime, else None; one line if unusable."""
    from simmoe.hardware.cpu_forward import ENGINES, PLACEMENT_HELP, parse_placement
    from simmoe.hardware.cpu_profile import is_cpu_name

    text = str(hardware)
    if not is_cpu_name(text):
        return None
    head, *tails = text.split("~")
    placements = [t for t in tails if parse_placement(t) is not None]
    engines = [t for t in tails if t in ENGINES]
    other = [t for t in tails if t not in placements and t not in engines]
    if other or len(placements) > 1 or len(engines) > 1:
        bad = other[0] if other else "~".join(placements + engines)
        raise SimmoeError(f"--hardware {text}: {bad!r}: give at most one placement ({PLACEMENT_HELP}) and one "
                          f"engine ({', '.join(ENGINES)}); simmoe tune searches the placement")
    if engines and engines[0] != "llamacpp":
        raise SimmoeError(f"--hardware {text}: ~{engines[0]}: simmoe tune searches llama.cpp's placements, which "
                          "run the GPU and the CPU in turn; leave the engine out or write ~llamacpp")
    start = placements[0] if placements else None
    if start == "fiddler":
        raise SimmoeError(f"--hardware {text}: ~fiddler is not a llama.cpp placement; give ~cpu-layers:N, "
                          "~cpu-all, ~cpu-misses or none (the search starts from the fewest CPU layers that fit)")
    return CpuBase(head, start, f"~{engines[0]}" if engines else "")


def check_engine(engine: str, hardware: str) -> None:
    """Only llama.cpp's placements are searched with experts on the CPU (one line otherwise)."""
    if engine != "llama.cpp":
        raise SimmoeError(f"--hardware {hardware}: experts computed on the CPU are searched for --engine llama.cpp "
                          f"only (--n-cpu-moe, -cmoe, --moe-cache-mib); {engine} with CPU experts (SGLang's "
                          "KTransformers backend, vLLM's CPU-expert work) is not modelled by simmoe tune")


def _forward_or_none(name: str):
    from simmoe.hardware.cpu_profile import build_cpu_forward

    try:
        return build_cpu_forward(name)
    except SimmoeError:
        return None


def feasible_layers(cpu: CpuBase) -> list[int]:
    """Every N of ``cpu-layers:N`` that passes the profile's memory check (GPU part and host RAM)."""
    from simmoe.hardware.catalogue import load_model
    from simmoe.hardware.cpu_profile import parse_cpu_name

    spec = parse_cpu_name(cpu.name("cpu-all"))
    layers = int(load_model(spec.model).decoder_layers)
    return [n for n in range(layers + 1) if _forward_or_none(cpu.name(f"cpu-layers:{n}")) is not None]


def spread(values: list[int], most: int = MAX_LAYER_VALUES) -> list[int]:
    """At most ``most`` of ``values``, evenly spread, first and last kept."""
    if len(values) <= most:
        return list(values)
    idx = sorted({round(i * (len(values) - 1) / (most - 1)) for i in range(most)})
    return [values[i] for i in idx]


def cache_budgets(cpu: CpuBase) -> list[int]:
    """GPU expert cache budgets in MiB (``--moe-cache-mib``) that fit beside the non-expert weights."""
    from simmoe.hardware.cpu_profile import memory_use

    fwd = _forward_or_none(cpu.name("cpu-misses"))
    if fwd is None:
        return []
    mib = 2.0 ** 20
    free = (fwd.gpu.gpu.memory_bytes - memory_use(fwd)[0]) / mib
    every = float((fwd.E * fwd.N).sum()) / mib
    top = min(free, every)
    smallest = fwd.model.top_k * float(fwd.E.max()) / mib    # one layer's top-k experts at once
    out, m = [], MIN_CACHE_MIB
    while m < top:
        out.append(m)
        m *= 2
    last = int(top // CACHE_STEP_MIB) * CACHE_STEP_MIB
    if last >= MIN_CACHE_MIB and last < every and last not in out:
        out.append(last)
    return [m for m in out if m >= smallest]


def placements(cpu: CpuBase) -> tuple[str, ...]:
    """The placement dimension's values, in order: N ascending, ``cpu-all``, cache budgets ascending."""
    layers = spread(feasible_layers(cpu))
    start = cpu.start
    if start is not None and start.startswith("cpu-layers:") and int(start.split(":")[1]) not in layers:
        n = int(start.split(":")[1])
        if _forward_or_none(cpu.name(start)) is None:   # the user's own placement: its check's one line
            from simmoe.hardware.cpu_profile import build_cpu_forward

            build_cpu_forward(cpu.name(start))
        layers = sorted({*layers, n})
    vals = [f"cpu-layers:{n}" for n in layers]
    if _forward_or_none(cpu.name("cpu-all")) is not None:
        vals.append("cpu-all")
    vals += [f"cpu-misses:{m}" for m in cache_budgets(cpu)]
    if not vals:
        from simmoe.hardware.cpu_profile import build_cpu_forward

        build_cpu_forward(cpu.name("cpu-all"))     # its memory check's one line says why nothing fits
    return tuple(vals)


def start_placement(cpu: CpuBase, values: tuple[str, ...]) -> str:
    """Where the search starts: the user's placement, else the fewest CPU layers that fit (llama.cpp users' pick)."""
    if cpu.start in values:
        return cpu.start  # type: ignore[return-value]
    if cpu.start == "cpu-misses":
        misses = [v for v in values if v.startswith("cpu-misses:")]
        if misses:
            return misses[len(misses) // 2]
    return values[0]


def flags(placement: str | None) -> str:
    """llama.cpp's flags of a placement (all layers on the GPU, ``-ngl 99``, the experts as placed)."""
    if placement is None:
        return ""
    if placement == "cpu-all":
        return "-ngl 99 -cmoe"
    kind, _, v = placement.partition(":")
    return f"-ngl 99 --n-cpu-moe {v}" if kind == "cpu-layers" else f"-ngl 99 --moe-cache-mib {v}"


def placement_of_flags(text: str) -> str | None:
    """The placement that :func:`flags` printed (what a round trip of the pasted flags replays)."""
    words = text.split()
    for i, w in enumerate(words):
        if w == "-cmoe":
            return "cpu-all"
        if w == "--n-cpu-moe":
            return f"cpu-layers:{int(words[i + 1])}"
        if w == "--moe-cache-mib":
            return f"cpu-misses:{int(words[i + 1])}"
    return None


def cache_experts(placement: str | None, fwd) -> int | None:
    """``cpu-misses:M``'s budget in experts of the profile's format (M MiB / the mean expert's bytes)."""
    if placement is None or not placement.startswith("cpu-misses:"):
        return None
    mib = float(placement.split(":")[1])
    return int(mib * 2 ** 20 // float(fwd.E.mean()))
