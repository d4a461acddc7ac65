"""EVICT's own figures (simmoe/validation/published/evict_consistency.py): the arithmetic of Tables 1, 2 and 4."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simmoe.validation.published import published
from simmoe.validation.published.evict_consistency import WORKLOADS, implied_iterations, render_consistency


def _tiny_pub(tps: dict[str, tuple[float, float, float]], mat: dict[str, tuple[float, float]], c1: float,
              c32: float, c1_he: float, c32_he: float) -> dict:
    """A published.json with only what the module reads, at temperature 0."""
    cols = ["method", *WORKLOADS, "average"]
    t1 = {"columns": cols, "rows": [[m] + [tps[w][i] for w in WORKLOADS] + [0.0]
                                    for i, m in enumerate(("vanilla", "eagle3", "evict"))]}
    t2 = {"columns": ["benchmark", "eagle3", "evict"], "rows": [[w, *mat[w]] for w in WORKLOADS]}
    t4 = {"k": [1, 16, 32], "qa": [c1, (c1 + c32) / 2, c32], "humaneval": [c1_he, (c1_he + c32_he) / 2, c32_he]}
    return {"evict": {"table1_qwen3_30b_a3b_t0": t1, "table2_mat_qwen3_30b_a3b_t0": t2,
                      "table4_step_latency_ms": t4}}


pos = st.floats(min_value=0.5, max_value=500.0, allow_nan=False)


@given(tps=st.tuples(pos, pos, pos), mat=st.tuples(pos, pos), c=st.tuples(pos, pos, pos, pos))
def test_iterations_are_mat_over_tokens_per_second(tps, mat, c):
    pub = _tiny_pub({w: tps for w in WORKLOADS}, {w: mat for w in WORKLOADS}, *c)
    rows = implied_iterations(pub)
    assert [r["workload"] for r in rows] == list(WORKLOADS)   # temperature 1 tables absent: skipped
    for r in rows:
        assert r["vanilla_ms"] == pytest.approx(1000.0 / tps[0])
        assert r["eagle3_ms"] == pytest.approx(1000.0 * mat[0] / tps[1])
        assert r["evict_ms"] == pytest.approx(1000.0 * mat[1] / tps[2])
        he = r["workload"] == "humaneval"      # HumanEval's own Table 4 row, QA's for the rest
        assert r["c1"] == (c[2] if he else c[0])
        assert r["c32"] == (c[3] if he else c[1])


def test_shipped_tables_give_both_temperatures_and_the_rendered_ratios():
    pub = published()
    rows = implied_iterations(pub)
    assert {(r["temperature"], r["workload"]) for r in rows} == {(t, w) for t in (0, 1) for w in WORKLOADS}
    text = render_consistency(pub)
    qa0 = next(r for r in rows if r["temperature"] == 0 and r["workload"] == "qa")
    assert f"| 0 | qa | {qa0['vanilla_ms']:.2f} | {qa0['c1']:.2f} |" in text
    assert f"{qa0['eagle3_ms'] / qa0['c32']:.2f}×" in text


def test_rendered_span_follows_the_tables():
    """Change one row's tokens/s and the sentence's range moves with it."""
    pub = copy.deepcopy(published())
    t1 = pub["evict"]["table1_qwen3_30b_a3b_t0"]
    j = t1["columns"].index("qa")
    next(r for r in t1["rows"] if r[0] == "eagle3")[j] /= 4.0     # QA's EAGLE-3 iteration 4× longer
    rows = implied_iterations(pub)
    worst = max(r["eagle3_ms"] / r["c32"] for r in rows)
    assert worst > 5.0
    assert f"{worst:.2f}× Table 4's C(32)" in render_consistency(pub)
