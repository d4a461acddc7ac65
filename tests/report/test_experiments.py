"""The replays behind the report: configurations, slices, rows against one-by-one replays."""

from __future__ import annotations

from dataclasses import replace

import pytest
from report_traces import small

from simmoe.replay.engine import ReplayConfig, ar_baseline, replay
from simmoe.report.experiments import (
    ReportSettings,
    check_models,
    dataset_of,
    experiment_configs,
    head_requests,
    load_profiles,
    run_experiments,
    table5_row,
)

SETTINGS = ReportSettings(slot_sweep=(4, 0), policy_slots=(2, 4), slots=4, rtx_slots=3,
                          accuracies=(1.0, 0.5))


@pytest.fixture(scope="module")
def trace():
    return small(61, "gsm8k")


@pytest.fixture(scope="module")
def settings(any_profiles):
    """SETTINGS on the default profiles stating no geometry, which time the small trace."""
    return replace(SETTINGS, **any_profiles)


@pytest.fixture(scope="module")
def frame(trace, settings):
    return run_experiments(trace, "gsm8k.parquet", settings, workers=1)


def test_every_row_equals_a_one_by_one_replay(trace, frame, settings):
    profiles = load_profiles(settings)
    assert set(frame["experiment"]) == {"main", "slots", "rtx4090", "link", "routes", "policy"}
    for _, r in frame.iterrows():
        cfg = ReplayConfig(selector=r["selector"], slots=int(r["slots"]), cache=r["cache"],
                           hardware=r["hardware"], route_accuracy=float(r["route_accuracy"]),
                           selector_ms=r["selector_ms_fixed"])
        one = replay(trace, cfg, profiles[cfg.hardware]).summary()
        base = replay(trace, ar_baseline(cfg), profiles[cfg.hardware]).summary()
        for k in ("decode_tps", "cycles", "committed", "h2d_per_token", "ms_per_cycle", "hit_rate"):
            assert r[k] == pytest.approx(one[k], rel=0, abs=0, nan_ok=True), (r["experiment"], k)
        assert r["speedup"] == pytest.approx(one["decode_tps"] / base["decode_tps"], rel=1e-12)
        assert bool(r["synthetic"])


def test_fixed_selector_time_and_cache_naming(frame):
    spec = frame[frame["selector"] == "specfit"]
    assert (spec["selector_ms_fixed"] == 2.82).all()      # SpecFit §4.6, GSM8K median
    assert (frame[frame["selector"] == "eagle3"]["selector_ms_fixed"] == 0.0).all()
    assert ((frame["slots"] == 0) == (frame["cache"] == "none")).all()
    link = frame[frame["experiment"] == "link"]
    assert sorted(set(link["link_gbps"])) == [24.8, 55.0, 375.0]
    pol = frame[frame["experiment"] == "policy"]
    assert set(pol["cache"]) == {"lru", "lfu", "belady", "static"}
    # belady is the fewest copies of any policy at the same slots (the offline optimum)
    for (_sel, _slots), g in pol.groupby(["selector", "slots"]):
        bel = g[g["cache"] == "belady"]["h2d_per_token"].iloc[0]
        assert bel <= g["h2d_per_token"].min() + 1e-12


def test_dataset_selector_time_and_override():
    profiles = load_profiles(SETTINGS)
    cn = dict((c.selector, c.selector_ms) for g, c in experiment_configs(SETTINGS, "cnndm", profiles)
              if g == "main")
    assert cn["specfit"] == 1.43 and cn["eagle3"] == 0.0
    other = dict((c.selector, c.selector_ms) for g, c in experiment_configs(SETTINGS, "alpaca", profiles)
                 if g == "main")
    assert other["specfit"] == profiles["a100-pcie-40gb"].selector_ms
    fixed = ReportSettings(selector_ms=1.0)
    assert {c.selector_ms for g, c in experiment_configs(fixed, "gsm8k", profiles)
            if c.selector == "specfit"} == {1.0}


@pytest.mark.parametrize("n", [1, 2, 3, 10])
def test_head_requests_equals_the_engines_own_limit(trace, n):
    head = head_requests(trace, n)
    assert len(head.requests) == min(n, len(trace.requests))
    from simmoe.trace.validate import validate_trace

    validate_trace(head)
    for sel in ("eagle3", "specfit"):
        a = replay(head, ReplayConfig(selector=sel, selector_ms=0.5)).summary()
        b = replay(trace, ReplayConfig(selector=sel, selector_ms=0.5, requests=n)).summary()
        assert a == b


def test_dataset_of(trace):
    assert dataset_of(trace, "x.parquet") == "gsm8k"
    mixed = small(62, "gsm8k")
    mixed.requests.dataset[0] = "cnndm"
    assert dataset_of(mixed, "dir/cnndm.parquet") == "cnndm"
    assert dataset_of(mixed, "dir/other.parquet") == "mixed"


def test_table5_row_equals_simmoe_bound_on_the_slice(trace, tmp_path):
    from simmoe.cli.bound import bound_report
    from simmoe.hardware.profile import load_profile, save_profile
    from simmoe.trace.io import write_trace

    # the default profile's coefficients, stating no geometry (num_layers = 0), so it serves the small trace
    profile = save_profile(load_profile("a100-pcie-40gb").replace(name="any", num_layers=0), tmp_path / "any.toml")
    s = ReportSettings(requests=2, hardware=str(profile))
    row = table5_row(trace, "gsm8k.parquet", s)
    write_trace(head_requests(trace, 2), tmp_path / "head.parquet")
    ref = bound_report(str(tmp_path / "head.parquet"), hardware=str(profile), slots=48)["table5"]
    for k, v in ref.items():
        if isinstance(v, float):
            assert row[k] == pytest.approx(v, rel=1e-12), k
        else:
            assert row[k] == v, k
    assert row["requests_limit"] == 2 and row["synthetic"] is True


def test_settings_round_trip_and_validation():
    from simmoe.errors import SimmoeError

    s = ReportSettings(requests=5, accuracies=(1.0, 0.3), selector_ms=0.7)
    assert ReportSettings.from_dict(s.to_dict()) == s
    for bad in (dict(requests=0), dict(check_requests=0), dict(slots=0),
                dict(links=(("x", 0.0),)), dict(selector_ms=-1.0)):
        with pytest.raises(SimmoeError):
            ReportSettings(**bad).validate()


@pytest.mark.parametrize("shape", [(48, 128, 8), (48, 128, 4), (48, 64, 8), (16, 128, 8), (3, 12, 2)])
def test_every_entry_point_refuses_a_profile_of_another_model(shape, any_profiles):
    from factories import random_trace

    from simmoe.errors import ProfileError
    from simmoe.report.prefetch import prefetch_rows

    L, N, k = shape
    t = random_trace(3, num_requests=1, output_len=(3, 4), pool_nodes=2, L=L, N=N, k=k)
    qwen = shape == (48, 128, 8)          # the shipped profiles' model, Qwen3-30B-A3B
    calls = [lambda s: check_models(t, "t.parquet", s), lambda s: table5_row(t, "t.parquet", s),
             lambda s: prefetch_rows(t, "t.parquet", s), lambda s: run_experiments(t, "t.parquet", s)]
    for bad, flag in ((ReportSettings(), "a100-pcie-40gb (--hardware)"),
                      (ReportSettings(hardware=any_profiles["hardware"]), "rtx4090-24gb (--hardware-rtx)")):
        if qwen:
            check_models(t, "t.parquet", bad)
            continue
        for call in (calls[0], calls[3]) if "rtx" in flag else calls:   # Table 4's profile: only those replay it
            with pytest.raises(ProfileError) as exc:
                call(bad)
            msg = str(exc.value)
            assert msg.startswith("t.parquet: profile ") and flag in msg and "\n" not in msg, msg
    check_models(t, "t.parquet", ReportSettings(**any_profiles))   # profiles stating no geometry time any trace
