"""`simmoe bound` with experts on the CPU: Proposition 1's margins under that regime's Eq. 4 cost."""

from __future__ import annotations

import json

import pytest
from factories import random_trace

from simmoe.cli import main
from simmoe.hardware.profile import load_profile

CPU_PROFILE = "qwen3-30b-a3b/q4_k_m@rtx2080+i9-10900x~cpu-layers:36"


@pytest.fixture(scope="module")
def qwen_trace(tmp_path_factory):
    from simmoe.trace.io import write_trace

    path = tmp_path_factory.mktemp("bound") / "q.parquet"
    write_trace(random_trace(5, num_requests=2, output_len=(8, 12), L=48, N=128, k=8, pool_nodes=6), path)
    return str(path)


def test_bound_gives_proposition_1_margins_for_a_cpu_profile(qwen_trace, capsys):
    assert main(["bound", qwen_trace, "--hardware", CPU_PROFILE, "--json", "--quiet"]) == 0
    rep = json.loads(capsys.readouterr().out)
    cost = load_profile(CPU_PROFILE).cost_model(True)
    assert rep["b"] == pytest.approx(list(cost.b)) and rep["beta"] == pytest.approx(cost.beta)
    assert "cpu-layers:36" in rep["cost_note"]
    t = rep["table5"]
    gap = t["lambda_star"] - t["theta"]
    assert gap >= -1e-9 * t["lambda_star"]                                  # λ* ≥ Θ
    assert gap / t["lambda_star"] * 100 <= t["eq7_bound_pct"] + 1e-7       # Eq. 7
    # the placement changes the margins' cost: all experts on the CPU cost more per expert than 36 layers
    assert main(["bound", qwen_trace, "--hardware", CPU_PROFILE.replace("cpu-layers:36", "cpu-all"),
                 "--json", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["beta"] > rep["beta"]


def test_bound_outside_the_cpu_regime_has_no_cpu_note(qwen_trace, capsys):
    assert main(["bound", qwen_trace, "--hardware", "qwen3-30b-a3b@a100-sxm4-80gb", "--json", "--quiet"]) == 0
    assert "cost_note" not in json.loads(capsys.readouterr().out)
