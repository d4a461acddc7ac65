"""SpecFit Figure 4: the slot sweep on CNN/DailyMail (A100; 48, 24, 12, 0 slots).

Decode TPS, ms/cycle and copies per token of SpecFit and EAGLE-3 at every
cache size, SpecFit's gain at each, and the trend goal (the gain grows as
slots shrink).
"""

from __future__ import annotations

from simmoe.validation.published.rows import Row, decode_gain, method_label, role_of
from simmoe.validation.published.runs import RunResult

FIGURE = "specfit.figure4_slot_sweep_cnndm_a100"
SECTION = "Slot sweep, Figure 4 (CNN/DailyMail, A100)"
# (column, label, goal) of Figure 4's three panels
PANELS = (("decode_tps", "decode TPS", None), ("ms_per_cycle", "ms / cycle", "ms"),
          ("h2d_per_token", "H2D / token", "h2d"))


def _panel_rows(pub: dict, res: dict[str, RunResult], f4: dict) -> list[Row]:
    rows = []
    for col, label, goal in PANELS:
        for method in ("specfit", "eagle3"):
            for i, slots in enumerate(f4["slots"]):
                rk = f"cnndm/a100/{method}/{slots}"
                rows.append(Row(SECTION, FIGURE, role_of(pub, FIGURE),
                                f"{method_label(method, slots > 0, slots)}: {label}",
                                float(f4[col][method][i]), float(res[rk].summary[col]), "rel", goal, rk,
                                path=("specfit", "figure4_slot_sweep_cnndm_a100", col, method, i)))
    return rows


def _gain_rows(pub: dict, res: dict[str, RunResult], f4: dict) -> list[Row]:
    """SpecFit's gain over EAGLE-3 at each cache size, then whether it grows as slots shrink."""
    rows = []
    gains = []
    for i, slots in enumerate(f4["slots"]):
        g = decode_gain(res[f"cnndm/a100/specfit/{slots}"].summary, res[f"cnndm/a100/eagle3/{slots}"].summary)
        gains.append(g)
        rows.append(Row(SECTION, FIGURE, role_of(pub, FIGURE),
                        f"SpecFit over EAGLE-3, {slots} slots: decode gain %",
                        float(f4["gain_specfit_over_eagle3_pct"][i]), g, "pp", "gain",
                        f"cnndm/a100/specfit/{slots}",
                        path=("specfit", "figure4_slot_sweep_cnndm_a100", "gain_specfit_over_eagle3_pct", i)))
    trend = "increasing" if all(b > a for a, b in zip(gains, gains[1:], strict=False)) else "not increasing"
    rows.append(Row(SECTION, FIGURE, role_of(pub, FIGURE), "gain grows as slots shrink (48 → 24 → 12 → 0)",
                    "increasing", trend, "", "trend",
                    note="simulated gains: " + ", ".join(f"{g:.1f}" for g in gains)))
    return rows


def rows(pub: dict, res: dict[str, RunResult], t5: dict[str, dict], traces: dict[str, dict]) -> list[Row]:
    """Figure 4's panels, then its gains and the trend."""
    f4 = pub["specfit"]["figure4_slot_sweep_cnndm_a100"]
    return _panel_rows(pub, res, f4) + _gain_rows(pub, res, f4)
