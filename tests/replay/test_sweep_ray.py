"""`simmoe sweep --engine ray`: the same table as the local engine; failures, progress, reruns."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from factories import random_trace

from simmoe.cli import main
from simmoe.replay.engine import ReplayConfig
from simmoe.sweep.grid import Grid, config_key, row_keys, run_sweep

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from simmoe.hardware.profile import HardwareProfile, save_profile
    from simmoe.trace.io import write_trace

    d = tmp_path_factory.mktemp("sweep_ray")
    for seed in (41, 42):
        write_trace(random_trace(seed, num_requests=3, output_len=(5, 10), pool_nodes=10, L=3, N=12, k=2),
                    d / f"t{seed}.parquet")
    save_profile(HardwareProfile(
        name="fast", description="sweep tests", source="hand-written for tests", copy_ms=0.25,
        forward_ms=64.0, expert_ms=0.125, draft_level_ms=4.0, commit_ms=1.0,
        cost_b_cache=tuple(128.0 + 2 * j for j in range(33)), cost_beta_cache=0.25,
        cost_b_no_cache=tuple(112.0 + j for j in range(33)), cost_beta_no_cache=0.5,
        evict_cost=tuple(128.0 + 4.0 * k for k in range(1, 33))), d / "fast.toml")
    # a profile without EVICT's C(k): the evict selector fails on it, everything else runs
    save_profile(HardwareProfile(
        name="no-evict", description="sweep tests", source="hand-written for tests", copy_ms=1.0,
        forward_ms=64.0, expert_ms=0.125, draft_level_ms=4.0,
        cost_b_cache=tuple(128.0 + 2 * j for j in range(33)), cost_beta_cache=0.25,
        cost_b_no_cache=tuple(112.0 + j for j in range(33)), cost_beta_no_cache=0.5), d / "no-evict.toml")
    return d


@pytest.fixture(scope="module")
def ray_runtime():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def grid(d, **kw):
    base = dict(traces=(str(d / "t41.parquet"), str(d / "t42.parquet")),
                selectors=("ar", "eagle3", "specfit", "oracle"), slots=(0, 4), caches=("lru", "belady"),
                hardware=(str(d / "fast.toml"),), route_accuracy=(1.0, 0.5), selector_ms=0.5)
    base.update(kw)
    return Grid(**base)


def test_ray_table_equals_local_table(setup, ray_runtime):
    from simmoe.sweep.ray_engine import run_sweep_ray

    g = grid(setup)
    seen = []
    frame, failures = run_sweep_ray(g, on_result=lambda *a: seen.append(a))
    local, _ = run_sweep(g, workers=1)
    assert not failures
    assert len(frame) == len(g.configs())
    pd.testing.assert_frame_equal(frame, local, check_exact=True)
    # progress: every configuration (and the added baselines) reported once, counting up
    assert [s[0] for s in seen] == list(range(1, len(seen) + 1))
    assert all(s[1] == len(seen) for s in seen)
    assert {config_key(s[2], s[3]) for s in seen} >= {config_key(p, c) for p, c in g.configs()}


def test_failed_configurations_are_reported_and_the_rest_complete(setup, ray_runtime):
    from simmoe.sweep.ray_engine import run_sweep_ray

    g = grid(setup, selectors=("eagle3", "evict"), hardware=(str(setup / "no-evict.toml"),),
             route_accuracy=(1.0,), caches=("lru",))
    frame, failures = run_sweep_ray(g)
    bad = {config_key(f.trace, f.config) for f in failures}
    assert bad == {config_key(p, c) for p, c in g.configs() if c.selector == "evict"}
    assert all("evict" in f.error.lower() or "cost" in f.error.lower() for f in failures)
    assert set(frame["selector"]) == {"eagle3"}
    assert len(frame) == len(g.configs()) - len(failures)
    assert np.isfinite(frame["speedup"]).all()


@pytest.mark.parametrize("workers", [1, 2])
def test_local_engine_reports_failures_and_completes_the_rest(setup, workers):
    g = grid(setup, selectors=("eagle3", "evict"), hardware=(str(setup / "no-evict.toml"),),
             route_accuracy=(1.0,), caches=("lru",))
    frame, failures = run_sweep(g, workers=workers)
    bad = {config_key(f.trace, f.config) for f in failures}
    assert bad == {config_key(p, c) for p, c in g.configs() if c.selector == "evict"}
    assert all("evict" in f.error.lower() or "cost" in f.error.lower() for f in failures)
    assert set(frame["selector"]) == {"eagle3"} and len(frame) == len(g.configs()) - len(failures)
    assert np.isfinite(frame["speedup"]).all()


def test_a_dead_local_worker_ends_the_sweep_in_one_line_keeping_finished_rows(setup, monkeypatch):
    import os

    import simmoe.sweep.grid as sweep

    real = sweep.replay

    def dies_on_oracle(trace, cfg, *a, **kw):
        if cfg.selector == "oracle":
            os._exit(1)               # a worker killed mid-task (forked workers inherit this patch)
        return real(trace, cfg, *a, **kw)

    monkeypatch.setattr(sweep, "replay", dies_on_oracle)
    g = grid(setup, selectors=("eagle3", "oracle"), route_accuracy=(1.0,), caches=("lru",), slots=(4,))
    # a dead worker ends the sweep in one line naming what it replayed; the rows finished before are kept
    with pytest.raises(sweep.SweepWorkerDied) as exc:
        run_sweep(g, workers=2)
    line = str(exc.value)
    assert "\n" not in line and "a worker process died (exit code 1)" in line and "selector oracle" in line
    kept = exc.value.frame
    assert exc.value.total == len(g.configs()) and len(kept) < len(g.configs())
    assert "oracle" not in set(kept.get("selector", []))


@pytest.mark.parametrize("engine", [["--workers", "1"], ["--engine", "ray", "--workers", "2"]])
def test_cli_a_setting_the_replay_refuses_is_refused_before_any_work(setup, tmp_path, capsys, engine):
    # evict on a profile without C(k), as simmoe replay refuses it: one line, exit 2, nothing written
    out = tmp_path / "grid.csv"
    argv = ["sweep", str(setup / "t41.parquet"), "-o", str(out), "--selector-ms", "0.5", *engine,
            "--slots", "0,4", "--selectors", "ar,evict", "--hardware", str(setup / "no-evict.toml")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "selector 'evict' needs the profile's C(k)" in err
    assert not out.exists()


def test_cli_ray_engine_progress_and_rerun(setup, tmp_path, capsys):
    out = tmp_path / "grid.csv"
    base = ["sweep", str(setup / "t41.parquet"), "-o", str(out), "--selector-ms", "0.5",
            "--engine", "ray", "--workers", "2", "--slots", "0,4"]
    # progress on stderr as each configuration finishes
    argv = [*base, "--selectors", "ar", "--hardware", str(setup / "no-evict.toml")]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "sweep: [" in err and "decode" in err
    frame = pd.read_csv(out)
    assert set(frame["selector"]) == {"ar"} and len(frame) == 2
    # a rerun with a working grid runs only what is missing, keeps the rest
    argv = [*base, "--selectors", "ar,eagle3", "--hardware", str(setup / "no-evict.toml")]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "2 of 4 configurations already in" in err
    frame = pd.read_csv(out)
    assert sorted(frame["selector"]) == ["ar", "ar", "eagle3", "eagle3"]
    assert len(row_keys(frame)) == 4
    # everything present: nothing runs, the table is unchanged
    before = out.read_bytes()
    assert main(argv) == 0
    assert out.read_bytes() == before
    assert "running 0" in capsys.readouterr().err


def test_address_needs_ray_engine(setup, tmp_path, capsys):
    argv = ["sweep", str(setup / "t41.parquet"), "-o", str(tmp_path / "g.csv"), "--address", "auto"]
    assert main(argv) == 2
    assert "--address needs --engine ray" in capsys.readouterr().err


def test_local_engine_rerun_skips_present_rows(setup, tmp_path, capsys):
    out = tmp_path / "grid.parquet"
    argv = ["sweep", str(setup / "t41.parquet"), "-o", str(out), "--selectors", "ar,eagle3",
            "--slots", "4", "--hardware", str(setup / "fast.toml"), "--selector-ms", "0.5",
            "--workers", "1"]
    assert main(argv) == 0
    first = pd.read_parquet(out)
    assert main([*argv[:5], "ar,eagle3,oracle", *argv[6:]]) == 0
    assert "2 of 3 configurations already in" in capsys.readouterr().err
    both = pd.read_parquet(out)
    assert len(both) == 3
    pd.testing.assert_frame_equal(both.iloc[:2].reset_index(drop=True), first)
    assert main([*argv, "--overwrite"]) == 0
    assert len(pd.read_parquet(out)) == 2


def test_config_key_matches_row_key_after_csv_round_trip(setup, tmp_path):
    g = grid(setup, selector_ms=None, route_accuracy=(0.5,), hardware=(str(setup / "fast.toml"),),
             selectors=("ar",), slots=(4,), caches=("lru",), traces=(str(setup / "t41.parquet"),))
    frame, _ = run_sweep(g)
    frame.to_csv(tmp_path / "g.csv", index=False)
    assert row_keys(pd.read_csv(tmp_path / "g.csv")) == {config_key(p, c) for p, c in g.configs()}
    other = ReplayConfig(selector="ar", slots=4, cache="lru", hardware=str(setup / "fast.toml"),
                         route_accuracy=0.5, selector_ms=0.5)
    assert config_key(str(setup / "t41.parquet"), other) not in row_keys(frame)


def test_missing_ray_is_one_clear_error(setup, tmp_path, monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    argv = ["sweep", str(setup / "t41.parquet"), "-o", str(tmp_path / "g.csv"), "--engine", "ray"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "pip install 'ray>=2.9'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "g.csv").exists()


@pytest.mark.slow
def test_cli_starts_and_stops_its_own_local_runtime(setup, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "grid.csv"
    argv = [sys.executable, "-m", "simmoe", "sweep", str(setup / "t42.parquet"), "-o", str(out),
            "--selectors", "ar,eagle3,specfit", "--slots", "0,4", "--hardware", str(setup / "fast.toml"),
            "--selector-ms", "0.5", "--engine", "ray", "--workers", "1"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "sweep: [" in proc.stderr and "SYNTHETIC" in proc.stdout
    g = grid(setup, traces=(str(setup / "t42.parquet"),), selectors=("ar", "eagle3", "specfit"),
             slots=(0, 4), caches=("lru",), route_accuracy=(1.0,))
    local = tmp_path / "local.csv"
    run_sweep(g, workers=1)[0].to_csv(local, index=False)
    pd.testing.assert_frame_equal(pd.read_csv(out), pd.read_csv(local), check_exact=True)
