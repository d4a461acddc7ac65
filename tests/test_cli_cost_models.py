"""`simmoe replay`: a selector whose cost model the profile cannot supply is refused in one line, before any work.

EVICT's pools (``simmoe synth --preset qa``: 32 draft tokens, K = 32) need SpecFit's
intercepts b_0..b_32; the shipped offload profiles fit b_0..b_7 (SpecFit App. B) and
the resident one fits EVICT's C(k) only.  Each refusal names the physical profile
that can supply the cost model, and that profile then replays.
"""

from __future__ import annotations

import pytest

from simmoe.cli import main


@pytest.fixture(scope="module")
def evict_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("evict") / "qa2.parquet"
    assert main(["synth", "--preset", "qa", "--requests", "2", "--out", str(path), "--no-progress"]) == 0
    return path


def _replay(trace, hardware, *argv):
    return main(["replay", str(trace), "--selectors", "specfit", "--hardware", hardware, "--no-progress",
                 "--workers", "1", *argv])


def _one_error_line(capsys) -> str:
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("hardware, why, counterpart", [
    ("a100-pcie-40gb", "has intercepts b_0..b_7", "qwen3-30b-a3b@a100-pcie-40gb+pcie4-x16"),
    ("rtx4090-24gb", "has intercepts b_0..b_7", "qwen3-30b-a3b@rtx4090+pcie4-x16"),
    ("a100-sxm-resident", "has no [cost_model.cache] coefficients", "qwen3-30b-a3b@a100-sxm4-80gb"),
])
@pytest.mark.parametrize("batch", ["1", "2"])
def test_specfit_without_its_cost_model_exits_2_in_one_line_naming_the_physical_profile(
        evict_trace, capsys, monkeypatch, hardware, why, counterpart, batch):
    import simmoe.replay.engine as engine

    def no_work(*a, **k):  # the refusal comes before any stage of the replay runs
        raise AssertionError("replay work started")

    for name in ("plan", "plan_stages", "Stages", "live_steps"):
        monkeypatch.setattr(engine, name, no_work)
    assert _replay(evict_trace, hardware, "--batch", batch) == 2
    line = _one_error_line(capsys)
    assert why in line and f"--hardware {counterpart}" in line
    if "intercepts" in line:
        assert "K = 32" in line and "b_0..b_32" in line


def test_the_named_physical_profile_supplies_the_cost_model(evict_trace, capsys):
    assert _replay(evict_trace, "qwen3-30b-a3b@a100-sxm4-80gb", "--json", "-", "--requests", "1") == 0
    assert '"selector": "specfit"' in capsys.readouterr().out


def test_unconstrained_extends_the_intercepts_and_is_not_refused():
    from simmoe.replay.selectors import SelectorContext, make_selector
    from solvers.cost import CostModel

    ctx = SelectorContext(K=32, cost=CostModel([10.0 + j for j in range(8)], 0.5))
    make_selector("unconstrained", ctx)
    with pytest.raises(Exception, match="b_0..b_32"):
        make_selector("specfit", ctx)
