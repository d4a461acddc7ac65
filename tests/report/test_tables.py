"""Markdown tables: fixed formats, published values and roles in the right cells."""

from __future__ import annotations

import math

import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from simmoe.report.tables import cell, fmt, link_table, slot_table, table5_table


def test_fmt_and_cell():
    assert fmt(float("nan")) == "—" and fmt(None) == "—" and fmt(2.345) == "2.35"
    assert cell(1.0, None) == "1.00" and cell(1.0, 2.0) == "1.00 (2.00)"
    assert cell(1.0, 2.54, mark="fit") == "1.00 (2.54 fit)"


def slots_frame(tps: dict) -> pd.DataFrame:
    rows = []
    for (sel, slots), v in tps.items():
        rows.append({"experiment": "slots", "selector": sel, "slots": slots, "decode_tps": v,
                     "ms_per_cycle": 1000.0 / v, "h2d_per_token": 10.0 * slots})
    return pd.DataFrame(rows)


@given(st.lists(st.floats(min_value=0.5, max_value=50.0), min_size=8, max_size=8))
def test_slot_table_gain_and_published_cells(values):
    slots = [48, 24, 12, 0]
    tps = {("specfit", s): values[i] for i, s in enumerate(slots)}
    tps.update({("eagle3", s): values[4 + i] for i, s in enumerate(slots)})
    text, role = slot_table(slots_frame(tps), "cnndm")
    assert role == "validate"
    lines = text.splitlines()[2:]
    assert [ln.split(" | ")[0] for ln in lines] == ["| 48", "| 24", "| 12", "| 0"]
    pub_gain = [21.6, 24.3, 29.2, 31.6]
    for i, s in enumerate(slots):
        gain = 100.0 * (tps[("specfit", s)] / tps[("eagle3", s)] - 1.0)
        assert f"| {gain:.1f} ({pub_gain[i]:.1f}) |" in lines[i]
    text, role = slot_table(slots_frame(tps), "gsm8k")
    assert role is None and "(" not in text


def test_table5_published_column_and_cycles_only_when_full():
    from simmoe.theory.table5 import ROWS

    t5 = {k: (1.0 if k != "unconstrained_intercepts" else "profile") for k, _, _ in ROWS}
    text, role = table5_table(t5, "gsm8k", full=False)
    assert role == "validate"
    assert "| Cycles | 1 | — |" in text and "| λ* − Θ (% of λ*) | 1.00 | 0.95 |" in text
    assert "| Cycles stopped before the last level (%) | 1.00 | 33.70 |" in text
    text, _ = table5_table(t5, "gsm8k", full=True)
    assert "| Cycles | 1 | 4407 |" in text
    text, role = table5_table(t5, "alpaca", full=True)
    assert role is None and "0.95" not in text


def test_link_table_rows():
    rows = []
    for g in (55.0, 24.8):
        for sel in ("ar", "eagle3", "specfit"):
            for cache in ("lru", "none"):
                rows.append({"experiment": "link", "link_gbps": g, "selector": sel, "cache": cache,
                             "decode_tps": g / 10 + (cache == "lru"), "speedup": math.pi,
                             "ms_per_cycle": 100.0})
    text = link_table(pd.DataFrame(rows))
    lines = text.splitlines()[2:]
    assert len(lines) == 6 and lines[0].startswith("| 24.8 | AR | 3.48 | 2.48 |")
