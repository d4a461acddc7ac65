"""SpecFit §4.6: a 60%-accurate route predictor (GSM8K odd-numbered questions, A100, 48 slots)."""

from __future__ import annotations

from simmoe.validation.published.rows import Row, role_of
from simmoe.validation.published.runs import RunResult

FIGURE = "specfit.route_predictor"
SECTION = "Route predictor of 60% accuracy (SpecFit §4.6; GSM8K odd-numbered questions, A100, 48 slots)"


def rows(pub: dict, res: dict[str, RunResult], t5: dict[str, dict], traces: dict[str, dict]) -> list[Row]:
    """Speedups over AR without cache with exact and with predicted routes, and the TPS lost between them."""
    rp = pub["specfit"]["route_predictor"]
    role = role_of(pub, FIGURE)
    base = res["gsm8k-odd/a100/ar/0"].summary
    exact = res["gsm8k-odd/a100/specfit/48"].summary["decode_tps"] / base["decode_tps"]
    pred = res["gsm8k-odd/a100/specfit/48/a0.6"].summary["decode_tps"] / base["decode_tps"]
    loss_pub = 100.0 * (1.0 - rp["speedup_vs_ar_no_cache"] / rp["exact_routes_speedup"])
    return [
        Row(SECTION, FIGURE, role, "SpecFit speedup over AR without cache, exact routes",
            float(rp["exact_routes_speedup"]), exact, "rel", run="gsm8k-odd/a100/specfit/48",
            path=("specfit", "route_predictor", "exact_routes_speedup")),
        Row(SECTION, FIGURE, role, "SpecFit speedup over AR without cache, 60% routes",
            float(rp["speedup_vs_ar_no_cache"]), pred, "rel", run="gsm8k-odd/a100/specfit/48/a0.6",
            path=("specfit", "route_predictor", "speedup_vs_ar_no_cache")),
        Row(SECTION, FIGURE, role, "decode TPS lost to the predictor %",
            round(loss_pub, 2), 100.0 * (1.0 - pred / exact), "pp",
            note="published value computed from the two speedups"),
    ]
