"""Small random traces for the report tests, and profiles that time them."""

from __future__ import annotations

from factories import random_trace


def small(seed: int, dataset: str):
    return random_trace(seed, num_requests=3, output_len=(6, 12), pool_nodes=10, L=3, N=12, k=2,
                        dataset=dataset)


def any_model_profiles(folder) -> dict[str, str]:
    """The report's default profiles (base and RTX 4090), stating no geometry (``num_layers = 0``), as TOML
    files in ``folder``: ``ReportSettings`` keyword arguments.  The shipped ones describe Qwen3-30B-A3B's
    48 layers, which the report refuses to pair with the small traces (simmoe.hardware.model_check)."""
    from simmoe.hardware.profile import load_profile, save_profile
    from simmoe.report.experiments import ReportSettings

    out = {}
    for key in ("hardware", "hardware_rtx"):
        p = load_profile(getattr(ReportSettings, key))
        p = p.replace(num_layers=0, description=f"{p.description}; no geometry stated (tests)")
        out[key] = str(save_profile(p, folder / f"{p.name}.toml"))
    return out
