"""`simmoe sweep`: the grid in worker processes equals one-by-one replays."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from factories import random_trace

from simmoe.cli import main
from simmoe.errors import SimmoeError
from simmoe.replay.engine import ar_baseline, replay
from simmoe.sweep.grid import Grid, run_sweep, tasks_of, write_table


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from simmoe.hardware.profile import HardwareProfile, save_profile
    from simmoe.trace.io import write_trace

    d = tmp_path_factory.mktemp("sweep")
    for seed in (31, 32):
        write_trace(random_trace(seed, num_requests=3, output_len=(5, 10), pool_nodes=10, L=3, N=12, k=2),
                    d / f"t{seed}.parquet")
    for name, copy in (("fast", 0.25), ("slow", 1.0)):
        save_profile(HardwareProfile(
            name=name, description="sweep tests", source="hand-written for tests", copy_ms=copy,
            forward_ms=64.0, expert_ms=0.125, draft_level_ms=4.0, commit_ms=1.0,
            cost_b_cache=tuple(128.0 + 2 * j for j in range(33)), cost_beta_cache=0.25,
            cost_b_no_cache=tuple(112.0 + j for j in range(33)), cost_beta_no_cache=0.5,
            evict_cost=tuple(128.0 + 4.0 * k for k in range(1, 33))), d / f"{name}.toml")
    return d


def grid(d, **kw):
    base = dict(traces=(str(d / "t31.parquet"), str(d / "t32.parquet")),
                selectors=("ar", "eagle3", "specfit", "evict"), slots=(0, 4), caches=("lru", "belady"),
                hardware=(str(d / "fast.toml"), str(d / "slow.toml")), route_accuracy=(1.0, 0.5),
                selector_ms=0.5)
    base.update(kw)
    return Grid(**base)


def test_parallel_sweep_equals_one_by_one_replays(setup):
    from simmoe.hardware.profile import load_profile
    from simmoe.trace.io import read_trace

    g = grid(setup)
    frame, failures = run_sweep(g, workers=2)
    assert not failures
    configs = g.configs()
    # traces x selectors x profiles x accuracies x (2 policies at 4 slots + one "none" row at 0)
    assert len(frame) == len(configs) == 2 * 4 * 2 * 2 * (2 + 1)
    assert all(cfg.cache == "none" for _, cfg in configs if cfg.slots == 0)
    counters = ["decode_tps", "cycles", "committed", "h2d_per_token", "ms_per_cycle", "hit_rate"]
    for (path, cfg), (_, row) in zip(configs, frame.iterrows()):
        assert (row["trace"], row["selector"], row["slots"], row["cache"], row["hardware"],
                row["route_accuracy"]) == (path, cfg.selector, cfg.slots, cfg.cache, cfg.hardware,
                                           cfg.route_accuracy)
        trace, prof = read_trace(path), load_profile(cfg.hardware)
        one = replay(trace, cfg, prof).summary()
        base = replay(trace, ar_baseline(cfg), prof).summary()
        for k in counters:
            assert row[k] == pytest.approx(one[k], rel=0, abs=0, nan_ok=True), (cfg, k)
        assert row["speedup"] == pytest.approx(one["decode_tps"] / base["decode_tps"])
        assert bool(row["synthetic"])


def test_plans_are_shared_within_a_task(setup):
    from simmoe.replay.engine import plan_key

    tasks = tasks_of(grid(setup).configs())
    for _path, cfgs in tasks:
        assert len({plan_key(c) for c in cfgs}) == 1
    # per trace: ar ignores profile and routes (1 plan); eagle3 depends on the routes it sees
    # (2 accuracies); evict on profile x routes (4); specfit on profile x cache on/off x routes (8)
    assert len(tasks) == 2 * (1 + 2 + 4 + 8)


def test_write_table_by_extension(setup, tmp_path):
    frame = pd.DataFrame({"a": [1, 2], "b": ["x", "y"]})
    write_table(frame, tmp_path / "t.csv")
    write_table(frame, tmp_path / "t.parquet")
    assert pd.read_csv(tmp_path / "t.csv").equals(frame)
    assert pd.read_parquet(tmp_path / "t.parquet").equals(frame)
    with pytest.raises(SimmoeError, match="extension"):
        write_table(frame, tmp_path / "t.xlsx")


def test_sweep_cli(setup, tmp_path, capsys):
    out = tmp_path / "grid.parquet"
    argv = ["sweep", str(setup / "t31.parquet"), "-o", str(out), "--selectors", "ar,eagle3",
            "--slots", "0,4", "--cache", "lru,lfu", "--hardware", str(setup / "fast.toml"),
            "--selector-ms", "0.5", "--workers", "2"]
    assert main(argv) == 0
    frame = pd.read_parquet(out)
    # 2 selectors x (lru, lfu at 4 slots + one no-cache row at 0 slots)
    assert len(frame) == 6 and set(frame["cache"]) == {"lru", "lfu", "none"}
    assert "SYNTHETIC" in capsys.readouterr().out
    ar0 = frame[(frame["selector"] == "ar") & (frame["slots"] == 0)]
    assert np.allclose(ar0["speedup"], 1.0)
    assert main([*argv[:3], str(tmp_path / "x.txt"), *argv[4:]]) == 2
    assert main([*argv, "--selectors", "bogus"]) == 2
    assert main([*argv, "--slots", "4,x"]) == 2
    assert "bad value" in capsys.readouterr().err


def test_a_trace_listed_twice_is_refused(setup):
    from simmoe.errors import SimmoeError

    t = str(setup / "t31.parquet")
    with pytest.raises(SimmoeError, match="listed twice"):
        grid(setup, traces=(t, str(setup / "." / "t31.parquet"))).configs()


def test_the_sweep_prints_a_summary_and_names_a_bad_profile_by_its_file(setup, tmp_path, capsys):
    from simmoe.cli import main

    out = tmp_path / "s.csv"
    argv = ["sweep", str(setup / "t31.parquet"), "-o", str(out), "--selectors", "ar,eagle3",
            "--slots", "0,4", "--cache", "lru,lfu", "--hardware", str(setup / "fast.toml"),
            "--selector-ms", "0.5", "--workers", "1"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "decode tok/s" in text and "eagle3" in text and "SYNTHETIC" in text
    assert text.count(" none ") == 2          # one no-cache row per selector, not one per policy
    bad = tmp_path / "copy.toml"
    bad.write_text((setup / "fast.toml").read_text().replace("copy_ms = 0.25", "copy_ms = -1.0"))
    argv2 = ["sweep", str(setup / "t31.parquet"), "-o", str(tmp_path / "b.csv"), "--hardware",
             f"{setup / 'slow.toml'},{bad}", "--selectors", "ar"]
    assert main(argv2) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "slow.toml" not in err


def test_sweep_defaults_are_reproducible_and_follow_the_trace(setup, tmp_path, capsys):
    """Without --selector-ms the exact searches are charged the profile's selector time, the top-K
    rules nothing (as replay); without --hardware each trace gets the profile that can serve it."""
    from simmoe.hardware.profile import load_profile
    from simmoe.trace.io import write_trace

    out = tmp_path / "d.csv"
    argv = ["sweep", str(setup / "t31.parquet"), "-o", str(out), "--selectors", "eagle3,specfit",
            "--slots", "4", "--hardware", str(setup / "fast.toml"), "--workers", "1", "--quiet"]
    assert main(argv) == 0
    frame = pd.read_csv(out).set_index("selector")
    assert frame.loc["eagle3", "selector_ms_fixed"] == 0.0
    assert frame.loc["specfit", "selector_ms_fixed"] == load_profile(setup / "fast.toml").selector_ms
    first = out.read_bytes()
    assert main([*argv, "--overwrite"]) == 0 and out.read_bytes() == first      # byte for byte
    trace = random_trace(5, num_requests=1, output_len=(3, 4), pool_nodes=4, L=16, N=64, k=8)
    trace.meta["geometry"]["name"] = "OLMoE-1B-7B-0924"
    write_trace(trace, tmp_path / "olmoe.parquet")
    capsys.readouterr()
    assert main(["sweep", str(tmp_path / "olmoe.parquet"), "-o", str(tmp_path / "o.csv"), "--selectors",
                 "ar,eagle3", "--slots", "4", "--workers", "1", "--quiet"]) == 0
    assert set(pd.read_csv(tmp_path / "o.csv")["hardware"]) == {"olmoe-1b-7b@a100-pcie-40gb+pcie4-x16"}
    assert "olmoe.parquet: no --hardware given" in capsys.readouterr().err


def test_sweep_help_explains_every_option_and_refuses_a_negative_seed(setup, tmp_path, capsys):
    from simmoe.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["sweep"]
    assert all(a.help for a in sub._actions if a.dest != "help")
    assert main(["sweep", str(setup / "t31.parquet"), "-o", str(tmp_path / "x.csv"), "--seed", "-1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--seed -1: must be a non-negative integer" in err
