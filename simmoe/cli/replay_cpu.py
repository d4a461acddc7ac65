"""`simmoe replay` with experts computed on the CPU (docs/cpu-experts.md): the regime's columns and cache rule.

Kept apart from :mod:`simmoe.cli.replay`, which merges :data:`COLUMNS` and
calls :func:`regime_of`, :func:`default_columns` and :func:`fixed_placement`.
"""

from __future__ import annotations

from dataclasses import replace

COLUMNS = {
    "cpu_reads_per_token": ("CPU exp\n/token", "{:.1f}",
                            "CPU placement: experts computed on the CPU per output token, prefill included"),
    "dram_gb_per_token": ("DRAM\nGB/token", "{:.2f}",
                          "CPU placement: GB of expert weights the CPU reads from DRAM per output token"),
    "gpu_share": ("on\nGPU", "{:.1%}", "CPU placement: experts served on the GPU over all a forward demands"),
    "gpu_ms_per_token": ("GPU\nms/token", "{:.2f}", "CPU placement: the GPU's busy time per output token"),
    "cpu_ms_per_token": ("CPU\nms/token", "{:.2f}",
                         "CPU placement: time of the CPU side (its experts, sync, activations' round trip) "
                         "per output token"),
}
CPU_COLUMNS = tuple(COLUMNS)
# the cache's columns, which the CPU's replace in this regime's default table
CACHE_COLUMNS = ("h2d_per_token", "hit_rate")


def placement_of(profile):
    """The profile's placement of the experts on the CPU, or None in the copy and resident regimes."""
    return getattr(getattr(profile, "physical", None), "placement", None)


def regime_of(profile) -> str:
    return "cpu" if placement_of(profile) is not None else ("resident" if profile.resident else "offload")


def default_columns(columns: tuple, explicit, profile) -> tuple:
    """The default table's cache columns replaced by the CPU's (``--columns`` is taken as given)."""
    if explicit or placement_of(profile) is None:
        return columns
    out = [c for c in columns if c not in CACHE_COLUMNS]
    i = out.index("ms_per_cycle") + 1 if "ms_per_cycle" in out else len(out)
    return tuple(out[:i]) + CPU_COLUMNS + tuple(out[i:])


def fixed_placement(config, profile):
    """``cpu-layers:N``, ``cpu-all`` (and a plugin without a cache) fix what the GPU holds: the replay keeps
    no cache (as resident)."""
    from simmoe.replay.residency_cpu import placement_uses_cache

    if placement_of(profile) is None or placement_uses_cache(profile):
        return config
    return replace(config, slots=0, cache="none", cache_budget=None)
