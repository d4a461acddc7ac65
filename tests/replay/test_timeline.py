"""Timelines (simmoe.replay.timeline) and `simmoe replay --prefetch / --timeline` end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
from factories import random_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.cli import main
from simmoe.hardware.profile import load_profile
from simmoe.replay.engine import ReplayConfig, replay
from simmoe.replay.timeline import chrome_trace, merge_copies, overlaps, read_timeline, write_timeline


def profile(**changes):
    base = dict(num_layers=0, link_gbps=0.0, copy_ms=0.75, copies_in_flight=2, forward_ms=6.0, expert_ms=0.25,
                cache_overhead_ms=1.5, draft_level_ms=1.5, commit_ms=0.25)
    base.update(changes)
    return load_profile("a100-pcie-40gb").replace(**base)


@settings(max_examples=12)
@given(seed=st.integers(0, 10_000), policy=st.sampled_from(["none", "draft", "next-layer", "oracle"]),
       c=st.sampled_from([1, 2, 3]), slots=st.sampled_from([0, 3]), cv=st.sampled_from([0.0, 0.4]))
def test_timeline_file_has_no_overlap_on_any_engine(tmp_path_factory, seed, policy, c, slots, cv):
    prof = profile(copies_in_flight=c, copy_cv=cv)
    trace = random_trace(seed, num_requests=2, L=4, N=8, k=2, pool_nodes=8)
    res = replay(trace, ReplayConfig(selector="eagle3", slots=slots, selector_ms=0.5, route_accuracy=0.7, seed=seed,
                                     prefetch=policy), prof, timeline=True)
    path = tmp_path_factory.mktemp("tl") / "t.json"
    write_timeline(path, [("eagle3", res.timeline)], {"note": "test"})
    doc = read_timeline(path)
    assert overlaps(doc) == []
    events = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert "compute" in names and "host" in names
    assert names <= {"compute", "host"} | {f"copy {k}" for k in range(c)}
    # every copy is in the file once: demand copies = misses, prefetch copies = prefetched
    n_demand = sum(len(e["args"]["experts"]) for e in events if e["cat"] == "demand")
    n_prefetch = sum(len(e["args"]["experts"]) for e in events if e["cat"] == "prefetch")
    assert n_demand == res.cycles["misses"].sum()
    assert n_prefetch == (res.cycles["prefetched"].sum() if policy != "none" else 0)
    # the last event ends when the replay ends: prefills plus cycles
    total_ms = res.requests["prefill_ms"].sum() + res.cycles["cycle_ms"].sum()
    assert max(e["ts"] + e["dur"] for e in events) == pytest.approx(total_ms * 1e3, abs=0.01)


def test_overlap_check_finds_an_overlap():
    doc = chrome_trace([("p", [("compute", "a", "x", 0.0, 2.0, {}), ("compute", "b", "x", 1.0, 3.0, {}),
                               ("copy 0", "c", "x", 1.0, 3.0, {})])])
    bad = overlaps(doc)
    assert len(bad) == 1 and bad[0][1]["name"] == "a" and bad[0][2]["name"] == "b"


def test_back_to_back_copies_merge_into_one_event():
    evs = [("copy 0", "copy L1 E2", "demand", 0.0, 1.0, {"layer": 1, "expert": 2}),
           ("copy 0", "copy L1 E5", "demand", 1.0, 2.0, {"layer": 1, "expert": 5}),
           ("copy 0", "copy L2 E0", "demand", 2.0, 3.0, {"layer": 2, "expert": 0}),
           ("copy 0", "prefetch L2 E1", "prefetch", 3.5, 4.0, {"layer": 2, "expert": 1})]
    merged = merge_copies(evs)
    assert [(e[1], e[3], e[4], e[5]["experts"]) for e in merged] == [
        ("copy L1 x2", 0.0, 2.0, [2, 5]), ("copy L2 x1", 2.0, 3.0, [0]), ("prefetch L2 x1", 3.5, 4.0, [1])]


# -- the command line ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from simmoe.hardware.profile import save_profile
    from simmoe.trace.io import write_trace

    d = tmp_path_factory.mktemp("prefetch-cli")
    write_trace(random_trace(21, num_requests=3, output_len=(6, 14), pool_nodes=12, L=3, N=12, k=2),
                d / "t.parquet")
    write_trace(random_trace(22, num_requests=2, pool_nodes=0, L=3, N=12, k=2), d / "ar.parquet")
    save_profile(profile(), d / "p.toml")
    save_profile(load_profile("a100-sxm-resident").replace(num_layers=0), d / "resident.toml")
    return d


def run(files, *argv, trace="t.parquet"):
    return main(["replay", str(files / trace), "--hardware", str(files / "p.toml"), "--no-progress",
                 "--selector-ms", "0.5", "--workers", "1", *argv])


def test_prefetch_json_has_the_counters_and_the_time_saved(files, capsys):
    assert run(files, "--slots", "4", "--selectors", "eagle3,specfit", "--prefetch", "draft", "--json", "-") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["prefetch"] == "draft"
    for row in doc["results"]:
        for key in ("prefetched_per_token", "useful_per_token", "wasted_per_token", "saved_ms_per_token"):
            assert np.isfinite(row[key]), key
        assert row["prefetched_per_token"] == pytest.approx(row["useful_per_token"] + row["wasted_per_token"])


def test_prefetch_none_prints_what_it_printed_before(files, capsys):
    assert run(files, "--slots", "4", "--json", "-") == 0
    before = json.loads(capsys.readouterr().out)
    assert run(files, "--slots", "4", "--json", "-", "--prefetch", "none") == 0
    assert json.loads(capsys.readouterr().out) == before


def test_timeline_written_by_the_command(files, capsys):
    out = files / "tl.json"
    assert run(files, "--slots", "4", "--selectors", "eagle3,specfit", "--prefetch", "next-layer",
               "--requests", "1", "--timeline", str(out)) == 0
    doc = read_timeline(out)
    procs = [e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"]
    assert len(procs) == 2 and procs[0].startswith("eagle3") and "prefetch next-layer" in procs[0]
    assert overlaps(doc) == []


@pytest.mark.parametrize("argv, message", [
    (("--prefetch", "soon"), "unknown prefetch policy 'soon'"),
    (("--prefetch", "draft", "--hardware", "RESIDENT"), "no copies to prefetch"),
    (("--timeline", "TL"), "--timeline needs --requests"),
    (("--prefetch", "oracle", "--selectors", "specfit-prefetch"), "cannot be combined"),
])
def test_bad_input_is_one_line_and_exit_2(files, capsys, argv, message):
    names = {"TL": str(files / "tl2.json"), "RESIDENT": str(files / "resident.toml")}
    argv = tuple(names.get(a, a) for a in argv)
    if "--hardware" in argv:
        rc = main(["replay", str(files / "t.parquet"), "--no-progress", *argv])
    else:
        rc = run(files, *argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and message in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("argv", [("--batch", "2"), ("--cache", "static"), ("--cache", "belady"),
                                  ("--timing", "simpy"), ("--timing", "closed")])
def test_prefetch_now_combines_with_batching_any_cache_and_any_timing(files, capsys, argv):
    # these combinations used to be refused (one line, exit 2); the copy engine now composes with each
    assert run(files, "--slots", "4", "--selectors", "eagle3", "--prefetch", "draft", "--json", "-", *argv) == 0
    doc = json.loads(capsys.readouterr().out)
    (row,) = doc["results"]
    assert row["prefetched_per_token"] > 0
    assert row["prefetched_per_token"] == pytest.approx(row["useful_per_token"] + row["wasted_per_token"])


def test_draft_prefetch_without_pools_is_refused(files, capsys):
    assert run(files, "--prefetch", "draft", trace="ar.parquet") == 2
    assert "no draft pools" in capsys.readouterr().err
