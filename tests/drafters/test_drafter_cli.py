"""`simmoe synth --drafter` and `simmoe replay --drafter`: the drafter travels with the trace; one-line refusals."""

from __future__ import annotations

import json

import pytest

from simmoe.cli import main

PHYS = "qwen3-30b-a3b@a100-sxm4-80gb"


@pytest.fixture(scope="module")
def mtp_trace(tmp_path_factory):
    out = tmp_path_factory.mktemp("drafters") / "mtp.parquet"
    assert main(["synth", "--preset", "gsm8k", "--requests", "1", "--drafter", "mtp", "--drafter-param", "heads=2",
                 "--out", str(out), "--no-progress"]) == 0
    return out


def test_synth_records_the_drafter(mtp_trace):
    from simmoe.trace.io import read_trace

    t = read_trace(mtp_trace)
    assert t.meta["drafter"]["name"] == "mtp" and t.meta["drafter"]["params"]["heads"] == 2
    assert t.pool_shape.depth == 2 and t.pool_shape.expand_topk == 1 and t.is_synthetic


def test_replay_charges_the_traces_drafter(mtp_trace, capsys):
    capsys.readouterr()
    args = ["replay", str(mtp_trace), "--hardware", PHYS, "--selectors", "eagle3", "--no-progress", "--json", "-"]
    assert main(args) == 0
    with_mtp = json.loads(capsys.readouterr().out)
    assert main(args + ["--drafter", "mtp"]) == 0
    assert json.loads(capsys.readouterr().out) == with_mtp


def _row(result):
    rows = result["results"] if "results" in result else result
    return rows[0] if isinstance(rows, list) else rows


@pytest.mark.parametrize("extra,message", [
    (["--drafter", "dflash"], "the trace's pools were drafted by mtp"),
    (["--drafter-param", "heads=3"], "would change mtp's pools"),
    (["--hardware", "a100-pcie-40gb"], "needs the physical model"),
])
def test_replay_refusals(mtp_trace, capsys, extra, message):
    args = ["replay", str(mtp_trace), "--selectors", "eagle3", "--no-progress"]
    if "--hardware" not in extra:
        args += ["--hardware", PHYS]
    assert main(args + extra) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("extra,message", [
    (["--drafter", "mtp", "--depth", "3"], "shapes EAGLE-3's tree"),
    (["--drafter-param", "heads=2"], "name the drafter"),
    (["--drafter", "llama-chain", "--drafter-param", "draft_max=0"], "draft_max=0 must lie in 1..64"),
])
def test_synth_refusals(tmp_path, capsys, extra, message):
    out = tmp_path / "x.parquet"
    assert main(["synth", "--preset", "gsm8k", "--requests", "1", "--out", str(out), "--no-progress"] + extra) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and not out.exists()


def test_the_replays_drafting_is_the_drafters(mtp_trace):
    """Every step that drafts is charged the MTP heads' levels plus the served term, not EAGLE-3's drafting;
    the engine applies the trace's drafter itself (a profile given plain is charged the same)."""
    import inspect

    import numpy as np

    from simmoe.drafters import for_trace, profile_for_trace
    from simmoe.hardware.physical import PhysicalModel
    from simmoe.hardware.profile import load_profile
    from simmoe.replay.config import ReplayConfig
    from simmoe.replay.engine import replay
    from simmoe.trace.io import read_trace

    trace = read_trace(mtp_trace)
    prof = load_profile(PHYS)
    config = ReplayConfig(selector="eagle3", hardware=PHYS)
    res = replay(trace, config, profile_for_trace(trace, prof))
    plain = replay(trace, config, prof)
    draft = np.asarray(res.steps["draft_ms"])
    assert np.array_equal(draft, np.asarray(plain.steps["draft_ms"]))
    levels, n, tokens = (np.asarray(res.steps[k]) for k in ("levels", "requests", "tokens"))
    assert (levels > 0).any()
    # the served iteration's term, as the physical model charges it (its per-token part where it has one)
    per_token = "verified" in inspect.signature(PhysicalModel.draft_ms).parameters
    phys, mtp = prof.physical, for_trace(trace)

    def served(k, v):
        kw = {"verified": float(v)} if per_token else {}
        return PhysicalModel.draft_ms(phys, 1, int(k), **kw) - PhysicalModel.draft_ms(phys, 1, int(k), served=False)

    want = np.array([mtp.drafting_ms(phys, int(lv), int(k)) + served(k, v) if lv > 0 else 0.0
                     for lv, k, v in zip(levels, n, tokens)])
    assert np.allclose(draft, want)
    eagle = np.array([PhysicalModel.draft_ms(phys, int(lv), int(k), served=False) + served(k, v) if lv > 0 else 0.0
                      for lv, k, v in zip(levels, n, tokens)])
    assert not np.allclose(draft, eagle)


def test_the_engine_refuses_another_drafter_on_a_measured_profile(mtp_trace):
    from simmoe.errors import SimmoeError
    from simmoe.replay.config import ReplayConfig
    from simmoe.replay.engine import replay
    from simmoe.trace.io import read_trace

    with pytest.raises(SimmoeError, match="drafter mtp: profile a100-pcie-40gb times EAGLE-3's drafting"):
        replay(read_trace(mtp_trace), ReplayConfig(selector="eagle3", hardware="a100-pcie-40gb"))


def test_a_module_name_drafter_travels_with_its_trace(tmp_path, capsys):
    """docs/extending.md's example, named module:Name: synthesised, recorded, rebuilt by the replay."""
    from simmoe.drafters import for_trace
    from simmoe.trace.io import read_trace

    out = tmp_path / "m.parquet"
    assert main(["synth", "--preset", "gsm8k", "--requests", "1", "--drafter", "drafter_plugin:Medusa4",
                 "--drafter-param", "first=0.5", "--out", str(out), "--no-progress"]) == 0
    trace = read_trace(out)
    assert trace.meta["drafter"]["spec"] == "drafter_plugin:Medusa4" and trace.pool_shape.depth == 4
    d = for_trace(trace)
    assert d.name == "medusa4" and d["first"] == 0.5
    capsys.readouterr()
    assert main(["replay", str(out), "--hardware", PHYS, "--selectors", "evict", "--drafter", "medusa4",
                 "--no-progress"]) == 0
    assert "pools of drafter medusa4" in capsys.readouterr().out
