"""The cache comparison report: its analysis is computed from the rows, and a run over a small trace renders."""

from __future__ import annotations

import dataclasses
import itertools

import pandas as pd
import pytest
from factories import random_trace

from simmoe.report import caches, caches_analysis


def rows(rule):
    """Rows over 2 traces × 2 selectors × 2 kinds × 2 sizes of every policy, hit rate from ``rule``."""
    out = []
    for trace, sel, kind, frac in itertools.product(("a", "b"), ("ar", "specfit"), ("slots", "budget"), (0.1, 0.5)):
        for policy in caches_analysis.ONLINE + caches_analysis.OFFLINE:
            out.append({"trace": trace, "selector": sel, "kind": kind, "frac": frac, "policy": policy,
                        "hit_rate": rule(trace, sel, kind, frac, policy)})
    return pd.DataFrame(out)


def test_winner_follows_the_only_factor_that_matters():
    # trace a: lfu wins everywhere; trace b: lru wins everywhere; belady above both
    def rule(trace, sel, kind, frac, policy):
        best = "lfu" if trace == "a" else "lru"
        return {"belady": 0.9, best: 0.6}.get(policy, 0.3) + frac / 10

    df = rows(rule)
    win = caches_analysis.winners(df)
    assert all(w == (("lfu",) if k[0] == "a" else ("lru",)) for k, w in win.items())
    sens = caches_analysis.factor_sensitivity(win)
    assert sens["trace"] == 1.0 and sens["selector"] == 0.0 and sens["kind"] == 0.0 and sens["frac"] == 0.0
    lines = caches_analysis.decides(df)
    assert "the trace decides most" in lines[1]
    assert "lfu 8 of 16" in lines[0] and "lru 8 of 16" in lines[0]
    a = next(x for x in lines if x.startswith("a:"))
    assert "LFU − LRU hit rate, median +30.0 pp (frequency pays more)" in a
    assert "Belady is 30.0 pp above the best online policy" in a


def test_budget_gain_is_the_median_difference():
    df = rows(lambda trace, sel, kind, frac, policy: 0.5 + (0.02 if kind == "budget" else 0.0))
    assert caches_analysis.budget_gain(df) == pytest.approx(2.0)
    assert caches_analysis.winners(df)[("a", "ar", "budget", 0.1)] == tuple(sorted(caches_analysis.ONLINE))  # tied


def test_a_small_trace_renders_with_every_policy_and_the_synthetic_label(tmp_path, any_profiles):
    from simmoe.trace.io import write_trace

    trace = random_trace(9, num_requests=9, output_len=(6, 10), pool_nodes=6, L=8, N=16, k=2)
    write_trace(trace, tmp_path / "t.parquet")
    setting = caches.Setting(quick=True, hardware=any_profiles["hardware"])   # the trace is no catalogued model
    df, meta = caches.run_trace("small", str(tmp_path / "t.parquet"), 3, setting)
    assert set(df["policy"]) == set(caches.POLICIES) and set(df["selector"]) == set(caches.SELECTORS)
    assert len(df) == len(caches.POLICIES) * len(caches.SELECTORS) * len(setting.fractions) * 2
    # Belady (forced admission, the default) is the ceiling of every policy that admits; static admits
    # nothing outside its pinned set, so only the bypass optimum bounds it (docs/caches.md)
    admits = ~df["policy"].isin(["belady", "static"])
    on = df[admits].merge(df[df["policy"] == "belady"], on=["selector", "kind", "frac"])
    assert (on["h2d_per_token_x"] >= on["h2d_per_token_y"] - 1e-9).all()
    text = caches.render(df, [meta], setting, "cmd", 1.0)
    assert "## small (SYNTHETIC trace)" in text and "What decides the winner" in text
    assert "learned trains on" in text and "3 of 9" in text
    png = caches_analysis.hit_rate_figure(df, "small", True)
    assert png[:4] == b"\x89PNG"


def test_bad_arguments_are_one_line(capsys, tmp_path):
    assert caches.main(["--workers", "0", "--out", str(tmp_path / "r.md")]) == 2
    assert "workers" in capsys.readouterr().err
    assert caches.main(["--out", str(tmp_path / "no" / "r.md")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_profile_of_another_model_is_refused_before_any_replay(tmp_path, capsys, monkeypatch, any_profiles):
    from simmoe.hardware.profile import load_profile
    from simmoe.trace.io import read_trace, write_trace

    path = tmp_path / "t.parquet"
    write_trace(random_trace(9, num_requests=1, output_len=(3, 4), pool_nodes=2, L=48, N=16, k=2), path)
    with pytest.raises(caches.SimmoeError, match=r"t\.parquet: profile a100-pcie-40gb \(--hardware\) is Qwen3"):
        caches.load(str(path), caches.Setting())
    # else the profile recorded with the trace times it, if it describes the trace's model
    trace = read_trace(path)
    for recorded, ok in (("rtx4090-24gb", False), (any_profiles["hardware_rtx"], True)):
        trace.meta["hardware"] = dataclasses.asdict(load_profile(recorded))
        if ok:
            prof, label = caches.trace_profile(trace, load_profile("a100-pcie-40gb"), "t.parquet")
            assert prof.num_layers == 0 and label.endswith("(measured while recording)")
        else:
            with pytest.raises(caches.SimmoeError, match=r"rtx4090-24gb \(recorded with the trace\)"):
                caches.trace_profile(trace, load_profile("a100-pcie-40gb"), "t.parquet")
    # the command refuses the shipped Qwen3 traces under another model's profile before any replay, writes nothing
    def no_replay(*a, **k):
        raise AssertionError("replayed before every trace was checked")

    monkeypatch.setattr("simmoe.replay.engine.replay_all", no_replay)
    out = tmp_path / "r.md"
    assert caches.main(["--hardware", "olmoe-1b-7b@h100-sxm", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "traces/gsm8k.parquet: profile olmoe-1b-7b@h100-sxm (--hardware) is OLMoE" in err, err
    assert len(err.strip().splitlines()) == 1 and sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet"]
