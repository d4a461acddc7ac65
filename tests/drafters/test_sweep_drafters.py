"""`simmoe sweep --drafter A,B`: one workload under several drafters, drafted again from a synthetic trace."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from factories import random_trace

import simmoe.drafters as drafters
from simmoe.cli import main
from simmoe.drafters.workload import with_drafter
from simmoe.errors import SimmoeError
from simmoe.hardware.catalogue import load_model, with_model
from simmoe.sweep.grid import split_key, variant_key
from simmoe.synth import generate, preset

MODEL = "olmoe-1b-7b"
PROFILE = f"{MODEL}@rtx4090"
COLUMNS = ("node_parent", "node_q", "node_p", "node_agree", "node_routes", "root_routes", "root_token")


def workload(seed, drafter=None):
    pr = preset("gsm8k")
    params, fitted = with_model(pr.params, pr.fitted_to, load_model(MODEL), "gsm8k")
    params = params.with_(total_output_tokens=80 * 10)
    if drafter is not None:
        params = params.with_(pool=drafter.pool_shape())
    return generate(params, seed=seed, num_requests=2, preset="gsm8k", fitted_to=fitted, drafter=drafter)


def same(a, b):
    return all(np.array_equal(getattr(a, c), getattr(b, c)) for c in COLUMNS)


@pytest.mark.parametrize("seed", [0, 7])
@pytest.mark.parametrize("name, params", [("mtp", {"heads": 2}), ("dflash", {"block": 5}),
                                          ("lookahead", {"branches": 2, "branch_length": 2, "hit": 0.3})])
def test_drafting_again_is_the_drafters_own_trace_and_back(seed, name, params):
    eagle = workload(seed)
    other = with_drafter(eagle, name, params)
    assert same(other, workload(seed, drafters.build(name, params)))
    assert other.meta["drafter"]["name"] == name and "drafted again by" in other.meta["provenance"]["fitted_to"][-2]
    assert same(with_drafter(other, "eagle3"), eagle)       # the workload is the same whatever drafted it
    assert with_drafter(eagle, "eagle3") is eagle


def test_the_own_drafter_takes_cost_parameters_only():
    chain = workload(1, drafters.build("llama-chain", {"draft_max": 4}))
    costed = with_drafter(chain, "llama-chain", {"draft_model": MODEL})
    assert same(costed, chain) and costed.meta["drafter"]["params"]["draft_model"] == MODEL
    with pytest.raises(SimmoeError, match="would change llama-chain's pools"):
        with_drafter(chain, "llama-chain", {"draft_max": 5})


def test_a_trace_no_generator_made_is_refused_in_one_line():
    with pytest.raises(SimmoeError, match="no generator can draft its workload again") as exc:
        with_drafter(random_trace(3), "mtp")
    assert "\n" not in str(exc.value)


def test_keys_round_trip():
    key = variant_key("a/b.parquet", "llama-chain", {"draft_model": MODEL, "draft_max": "6"})
    assert split_key(key) == ("a/b.parquet", "llama-chain", {"draft_model": MODEL, "draft_max": "6"})
    assert split_key("a/b.parquet") == ("a/b.parquet", None, {})


@pytest.fixture(scope="module")
def synth_trace(tmp_path_factory):
    from simmoe.trace.io import write_trace

    path = tmp_path_factory.mktemp("sweepdrafters") / "w.parquet"
    write_trace(workload(2), path)
    return path


def test_sweep_compares_drafters_on_one_workload(synth_trace, tmp_path, capsys):
    from simmoe.hardware.profile import load_profile
    from simmoe.replay.engine import ReplayConfig, replay

    out = tmp_path / "s.csv"
    args = [str(synth_trace), "-o", str(out), "--drafter", "eagle3,mtp,llama-chain", "--drafter-param",
            f"draft_model={MODEL}", "--drafter-param", "draft_max=5", "--selectors", "ar,evict",
            "--hardware", PROFILE, "--slots", "0", "--workers", "1", "--no-progress", "--quiet"]
    assert main(["sweep", *args]) == 0
    frame = pd.read_csv(out)
    assert sorted(frame["drafter"].unique()) == ["eagle3", "llama-chain", "mtp"]
    ar = frame[frame["selector"] == "ar"]["decode_tps"]
    assert len(ar) == 3 and np.allclose(ar, ar.iloc[0])           # the same workload: AR is the same
    # each row is the replay of the trace simmoe synth --drafter makes of that workload
    chain = drafters.build("llama-chain", {"draft_model": MODEL, "draft_max": "5"})
    want = replay(workload(2, chain), ReplayConfig(selector="evict", slots=0, cache="none", hardware=PROFILE,
                                                   selector_ms=0.0).validate(), load_profile(PROFILE)).summary()
    row = frame[(frame["drafter"] == "llama-chain") & (frame["selector"] == "evict")].iloc[0]
    assert row["decode_tps"] == pytest.approx(want["decode_tps"], rel=1e-9)
    assert row["drafter_params"] == f"draft_max=5;draft_model={MODEL}"
    capsys.readouterr()
    assert main(["sweep", *args]) == 0                            # a rerun finds every row in the table
    assert "6 of 6 configurations already in" in capsys.readouterr().err


@pytest.mark.parametrize("extra, match", [
    (["--drafter", "mtp", "--drafter-param", "draft_max=3"], "--drafter-param draft_max: no drafter of"),
    (["--drafter-param", "heads=2"], "name the drafters it is for"),
    (["--drafter", "llama-chain"], "its cost needs the draft model"),
    (["--drafter", "nosuch"], "unknown drafter 'nosuch'"),
])
def test_sweep_refusals_are_one_line(synth_trace, tmp_path, capsys, extra, match):
    code = main(["sweep", str(synth_trace), "-o", str(tmp_path / "s.csv"), "--selectors", "ar,evict",
                 "--hardware", PROFILE, "--slots", "0", "--no-progress", "--quiet", *extra])
    err = capsys.readouterr().err
    assert code == 2 and match in err and err.count("\n") == 1
    assert not (tmp_path / "s.csv").exists()
