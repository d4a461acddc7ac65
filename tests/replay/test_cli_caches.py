"""`simmoe replay --cache-experts / --cache-mib` and the papers' policies on the command line."""

from __future__ import annotations

import dataclasses
import json

import pytest
from factories import random_trace

from simmoe.cli import main


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from simmoe.hardware.profile import HardwareProfile, save_profile
    from simmoe.trace.io import write_trace

    d = tmp_path_factory.mktemp("caches")
    save_profile(HardwareProfile(
        name="cli-caches", description="cache CLI tests", source="hand-written for tests",
        copy_ms=0.5, forward_ms=64.0, expert_ms=0.125, draft_level_ms=4.0, commit_ms=1.0,
        cost_b_cache=tuple(128.0 + 2 * j for j in range(33)), cost_beta_cache=0.25,
        cost_b_no_cache=tuple(112.0 + j for j in range(33)), cost_beta_no_cache=0.5,
        evict_cost=tuple(128.0 + 4.0 * k for k in range(1, 33))), d / "p.toml")
    trace = random_trace(23, num_requests=8, output_len=(6, 12), pool_nodes=8, L=3, N=8, k=2)
    write_trace(trace, d / "t.parquet")
    blank = dataclasses.replace(trace, meta={**trace.meta, "geometry": {**trace.meta["geometry"], "expert_bytes": 0}})
    write_trace(blank, d / "nobytes.parquet")
    return d


def replay(d, *argv, trace="t.parquet"):
    return main(["replay", str(d / trace), "--hardware", str(d / "p.toml"), "--no-progress", "--workers", "1",
                 "--selectors", "eagle3", *argv])


def one_line_error(capsys, match):
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and match in err, err
    return err


@pytest.mark.parametrize("argv, match", [
    (["--cache-experts", "1"], "at least one layer's top-2 experts"),
    (["--cache-experts", "-4"], "non-negative number of experts"),
    (["--cache-mib", "-1"], "non-negative number of MiB"),
    (["--cache-mib", "0.001"], "at least one layer's top-2 experts"),           # 1 KiB: one expert of 1024 B
    (["--cache-experts", "4", "--cache-mib", "1"], "give one"),
    (["--cache", "nope"], "known: none, lru, lfu, belady, static, least-stale, lfru, eam, learned"),
    (["--cache", "learned", "--requests", "6"], "leaving 2 (it needs at least 4)"),
])
def test_bad_budgets_and_policies_are_one_line_exit_2(files, capsys, argv, match):
    assert replay(files, *argv, "--json", str(files / "out.json")) == 2
    one_line_error(capsys, match)
    assert not (files / "out.json").exists()


def test_mib_needs_the_trace_s_expert_bytes(files, capsys):
    assert replay(files, "--cache-mib", "4", trace="nobytes.parquet") == 2
    one_line_error(capsys, "does not record the bytes of one expert")


def test_mib_is_experts_times_their_bytes(files, capsys):
    # 1024 B per expert: 0.01 MiB = 10485.76 B -> 10 experts
    assert replay(files, "--cache-mib", "0.01", "--json", "-") == 0
    by_mib = json.loads(capsys.readouterr().out)
    assert by_mib["config"]["cache_budget"] == 10
    assert replay(files, "--cache-experts", "10", "--json", "-") == 0
    by_count = json.loads(capsys.readouterr().out)
    assert by_mib["results"] == by_count["results"]
    assert replay(files, "--slots", "4", "--json", "-") == 0       # 12 experts per-layer: other numbers
    assert json.loads(capsys.readouterr().out)["results"] != by_count["results"]


@pytest.mark.parametrize("policy", ["least-stale", "lfru", "eam", "learned"])
def test_every_paper_policy_replays_under_slots_and_a_budget(files, capsys, policy):
    for size in (["--slots", "3"], ["--cache-experts", "9"]):
        assert replay(files, "--cache", policy, "--requests", "3", *size) == 0
        out = capsys.readouterr().out
        assert f"{policy} cache" in out
    assert "9 experts across layers" in out
