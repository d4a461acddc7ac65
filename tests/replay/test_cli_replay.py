"""`simmoe replay` end to end: table, JSON, CSV, cycle export, one-line errors."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from factories import random_trace

from simmoe.cli import main


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from simmoe.hardware.profile import HardwareProfile, save_profile
    from simmoe.trace.io import write_trace

    d = tmp_path_factory.mktemp("replay")
    trace = random_trace(21, num_requests=3, output_len=(6, 14), pool_nodes=12, L=3, N=12, k=2)
    write_trace(trace, d / "t.parquet")
    prof = HardwareProfile(
        name="cli-test", description="replay CLI tests", source="hand-written for tests",
        copy_ms=0.5, forward_ms=64.0, expert_ms=0.125, draft_level_ms=4.0, commit_ms=1.0,
        cost_b_cache=tuple(128.0 + 2 * j for j in range(33)), cost_beta_cache=0.25,
        cost_b_no_cache=tuple(112.0 + j for j in range(33)), cost_beta_no_cache=0.5,
        evict_cost=tuple(128.0 + 4.0 * k for k in range(1, 33)))
    save_profile(prof, d / "p.toml")
    return d, trace


def replay(files, *argv):
    d, _ = files
    return main(["replay", str(d / "t.parquet"), "--hardware", str(d / "p.toml"),
                 "--no-progress", "--selector-ms", "0.5", *argv])


def test_table_names_every_selector_and_says_synthetic(files, capsys):
    assert replay(files, "--slots", "4") == 0
    out = capsys.readouterr().out
    assert "SYNTHETIC trace" in out
    for name in ("ar", "eagle3", "evict", "specfit", "oracle"):
        assert name in out
    assert "decode tok/s" in out and "H2D/token" in out


def test_json_results_match_the_engine(files, capsys):
    from simmoe.hardware.profile import load_profile
    from simmoe.replay.engine import ReplayConfig
    from simmoe.replay.engine import replay as engine_replay

    d, trace = files
    assert replay(files, "--slots", "4", "--selectors", "eagle3,ar", "--json", "-") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["synthetic"] is True
    rows = {r["selector"]: r for r in doc["results"]}
    assert list(rows) == ["eagle3", "ar"]
    prof = load_profile(d / "p.toml")
    ref = engine_replay(trace, ReplayConfig(selector="eagle3", slots=4, selector_ms=0.5), prof).summary()
    base = engine_replay(trace, ReplayConfig(selector="ar", slots=0, cache="none"), prof).summary()
    assert rows["eagle3"]["decode_tps"] == pytest.approx(ref["decode_tps"])
    assert rows["eagle3"]["cycles"] == ref["cycles"]
    assert rows["eagle3"]["speedup"] == pytest.approx(ref["decode_tps"] / base["decode_tps"])
    assert doc["baseline"]["decode_tps"] == pytest.approx(base["decode_tps"])
    assert rows["ar"]["committed"] == 1.0


def test_csv_and_cycle_export(files, tmp_path, capsys):
    _, trace = files
    csv, cyc = tmp_path / "r.csv", tmp_path / "c.parquet"
    assert replay(files, "--selectors", "all", "--slots", "3", "--cache", "belady",
                  "--csv", str(csv), "--cycles", str(cyc)) == 0
    from simmoe.replay.selectors import parse_selectors

    table = pd.read_csv(csv)
    assert list(table["selector"]) == parse_selectors("all") and table["synthetic"].all()
    cycles = pd.read_parquet(cyc)
    assert set(cycles["selector"]) == set(table["selector"])
    for name, group in cycles.groupby("selector"):
        assert group["committed"].sum() == trace.num_positions
        assert len(group) == int(table.loc[table["selector"] == name, "cycles"].iloc[0])
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


def test_route_accuracy_and_requests_flags(files, capsys):
    _, trace = files
    assert replay(files, "--selectors", "specfit", "--route-accuracy", "0.6", "--requests", "2",
                  "--seed", "3", "--json", "-") == 0
    row = json.loads(capsys.readouterr().out)["results"][0]
    assert row["output_tokens"] == int(trace.requests.output_len[:2].sum())


@pytest.mark.parametrize("argv, match", [
    (["--selectors", "eagle3,nope"], "unknown selector 'nope'"),
    (["--slots", "-3"], "slots"),
    (["--route-accuracy", "1.5"], "route accuracy"),
    (["--requests", "0"], "requests"),
    (["--selector-ms", "-1"], "selector time"),
    (["--workers", "0"], "workers"),
    (["--coverage-rho", "2", "--selectors", "coverage"], "coverage rho"),
])
def test_bad_flags_exit_2_with_one_line(files, capsys, tmp_path, argv, match):
    out = tmp_path / "out.json"
    assert replay(files, *argv, "--json", str(out)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err and "Traceback" not in err
    assert not out.exists()


def test_bad_profile_and_bad_trace_exit_2(files, tmp_path, capsys):
    d, _ = files
    broken = tmp_path / "broken.toml"
    broken.write_text((d / "p.toml").read_text().replace("forward_ms", "forward_msx"))
    assert main(["replay", str(d / "t.parquet"), "--hardware", str(broken), "--no-progress"]) == 2
    assert "forward" in capsys.readouterr().err
    assert main(["replay", str(d / "t.parquet"), "--hardware", "no-such-profile", "--no-progress"]) == 2
    assert "no-such-profile" in capsys.readouterr().err
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"not a parquet file")
    assert main(["replay", str(junk), "--hardware", str(d / "p.toml"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "junk.parquet" in err
    assert main(["replay", str(tmp_path / "missing.parquet"), "--hardware", str(d / "p.toml")]) == 2


def test_a_resident_table_shows_what_the_regime_has(files, capsys):
    """Resident experts: no cache columns, the HBM reads instead, and a legend in the regime's words."""
    from simmoe.hardware.profile import load_profile, save_profile

    d, _ = files
    save_profile(load_profile(d / "p.toml").replace(name="cli-resident", resident=True, copy_ms=0.0),
                 d / "resident.toml")
    assert main(["replay", str(d / "t.parquet"), "--hardware", str(d / "resident.toml"), "--no-progress",
                 "--selectors", "ar,specfit"]) == 0
    out = capsys.readouterr().out
    assert "resident experts (no cache)" in out
    assert "read/tok" in out and "MB/tok" in out
    assert "H2D" not in out and "hit rate" not in out and "slots" not in out
    assert "over AR on the same trace" in out and "without a cache" not in out
