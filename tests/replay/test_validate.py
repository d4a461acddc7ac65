"""simmoe.validation.live and `simmoe validate`: live-run files, timing fit, trace/live comparison.

A "live run" here is synthesised from a replay of a small random trace under
known timing parameters (plus noise where said), so that the expected
comparison is known exactly; the real closed loop (hwprobe live on a model)
is tested in tests/hwprobe/test_live.py.
"""

from __future__ import annotations

import copy
import json
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.errors import CheckFailed, SimmoeError
from simmoe.hardware.profile import HardwareProfile
from simmoe.replay.engine import ReplayConfig, replay
from simmoe.validation.live import LIVE_FORMAT, LiveRun, check_compatible, compare, fit_timing, read_live
from tests.factories import random_trace


def hwprobe_trace(seed=0, **kw):
    tr = random_trace(seed, **kw)
    tr.meta = copy.deepcopy(tr.meta)
    tr.meta["provenance"] = {"kind": "hwprobe", "model": "m", "weights": "trained", "drafter": "d",
                             "dtype": "float32", "pool_expand_nodes": 2}
    return tr


def profile(fwd=2.0, tok=0.25, exp=0.5, copy_ms=0.75, level=1.5, fixed=0.5, commit=0.25, b=None):
    b = b or (1.0,) * 8
    return HardwareProfile(name="p", description="test", source="test", copies_in_flight=1, copy_ms=copy_ms,
                           forward_ms=fwd, token_ms=tok, expert_ms=exp, overlap=False, draft_level_ms=level,
                           draft_fixed_ms=fixed, commit_ms=commit, cost_b_cache=b, cost_beta_cache=0.1,
                           cost_b_no_cache=b, cost_beta_no_cache=0.2)


def live_meta(trace, selector, slots, **extra):
    g, ps = trace.geometry, trace.pool_shape
    return {"type": "run", "format": LIVE_FORMAT, "complete": True, "model": "m", "weights": "trained",
            "drafter": "d", "dtype": "float32", "selector": selector, "slots": slots, "K": ps.K,
            "max_new_tokens": int(trace.requests.output_len.max()), "route_accuracy": 1.0, "route_seed": 0,
            "geometry": g.to_dict(), "device": "test", "timer": "wall-clock",
            "pool": {"expand_topk": ps.expand_topk, "expand_nodes": 2, "depth": ps.depth,
                     "max_nodes": ps.max_nodes}, **extra}


def live_records(trace, selector, slots, prof, *, noise=0.0, seed=0):
    """Request and cycle lines of a 'live run' that behaves exactly like the replay on ``prof``."""
    rng = np.random.default_rng(seed)
    cfg = ReplayConfig(selector=selector, slots=slots, cache="lru" if slots else "none", selector_ms=0.0)
    res = replay(trace, cfg, prof)
    c, r = res.cycles, res.requests
    records = []
    for q in range(len(trace.requests)):
        lo, hi = trace.request_positions(q)
        records.append({"type": "request", "index": q, "request_id": str(trace.requests.request_id[q]),
                        "prompt_len": int(trace.requests.prompt_len[q]),
                        "output_len": int(trace.requests.output_len[q]),
                        "tokens": [int(x) for x in trace.root_token[lo:hi]],
                        "prefill_ms": float(r["prefill_ms"][q]), "prefill_hits": [int(r["prefill_hits"][q])],
                        "prefill_copies": [int(r["prefill_misses"][q])]})
        for i in np.flatnonzero(c["request"] == q):
            lv = int(c["drafted_levels"][i])
            levels = [prof.draft_fixed_ms + prof.draft_level_ms] + [prof.draft_level_ms] * (lv - 1) if lv else []
            jitter = lambda x: float(x * (1 + noise * rng.standard_normal()))  # noqa: E731
            records.append({
                "type": "cycle", "request": q, "position": int(c["position"][i]), "row": int(c["row"][i]),
                "drafted_levels": lv, "pool_levels": int(c["pool_levels"][i]), "pool_size": int(c["pool_size"][i]),
                "selected": list(range(int(c["draft_nodes"][i]))), "accepted": int(c["accepted"][i]),
                "committed": int(c["committed"][i]), "tokens": [], "draft_ms": jitter(c["draft_ms"][i]),
                "select_ms": 0.0, "verify_ms": jitter(c["forward_ms"][i]), "commit_ms": float(c["commit_ms"][i]),
                "hits": [int(c["hits"][i])], "copies": [int(c["misses"][i])], "level_ms": levels})
    return records


def make_live(trace, selector="eagle3", slots=3, prof=None, **kw):
    prof = prof or profile()
    meta = live_meta(trace, selector, slots)
    return LiveRun.from_records(meta, live_records(trace, selector, slots, prof, **kw), path="live.jsonl")


def write_live(path, trace, selector="eagle3", slots=3, prof=None, complete=True):
    meta = live_meta(trace, selector, slots)
    meta["complete"] = complete
    lines = [meta] + live_records(trace, selector, slots, prof or profile())
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


# ---------------------------------------------------------------------------
@pytest.mark.parametrize("selector,slots", [("ar", 0), ("eagle3", 3), ("specfit", 5), ("ddd", 0)])
def test_replay_of_its_own_behaviour_has_zero_error(selector, slots):
    tr = hwprobe_trace(1, num_requests=3, output_len=(6, 12))
    prof = profile()
    v = compare(tr, make_live(tr, selector, slots, prof), prof, selector_ms=0.0)
    assert v.accepted_match and v.errors["copies_mismatches"] == 0
    assert v.errors["cycle_median"] == pytest.approx(0, abs=1e-12)
    assert v.errors["decode_tps"] == pytest.approx(0, abs=1e-12)
    assert v.errors["h2d_per_token"] == pytest.approx(0, abs=1e-12)


def test_slower_replay_shows_as_positive_error():
    tr = hwprobe_trace(2, num_requests=2, output_len=(8, 10))
    prof = profile()
    live = make_live(tr, "eagle3", 2, prof)
    slow = prof.replace(forward_ms=prof.forward_ms + 10.0)
    v = compare(tr, live, slow, selector_ms=0.0)
    assert v.errors["cycle_bias_median"] > 0.05 and v.errors["decode_tps"] < -0.05
    assert v.accepted_match                  # timing does not change selections


def test_changed_acceptance_is_caught():
    tr = hwprobe_trace(3, num_requests=2, output_len=(8, 12), agree_rate=0.9)
    prof = profile()
    recs = live_records(tr, "eagle3", 3, prof)
    cyc = [r for r in recs if r["type"] == "cycle"]
    first = next(r for r in cyc if r["committed"] > 1)
    first["committed"] -= 1
    live = LiveRun.from_records(live_meta(tr, "eagle3", 3), recs)
    v = compare(tr, live, prof, selector_ms=0.0)
    assert not v.accepted_match and v.errors["accepted_mismatches"] >= 1
    from simmoe.validation.live import assert_exact
    with pytest.raises(CheckFailed):
        assert_exact([v])


@pytest.mark.parametrize("field,value,words", [
    ("model", "other", "model"), ("drafter", "x", "drafter"), ("K", 3, "verify budget"),
    ("geometry", {"num_layers": 9, "num_experts": 8, "top_k": 2}, "geometry"),
])
def test_mismatched_settings_are_refused(field, value, words):
    tr = hwprobe_trace(4)
    live = make_live(tr)
    live.meta[field] = value
    with pytest.raises(SimmoeError, match=words):
        check_compatible(tr, live)


def test_mismatched_prompts_and_outputs_are_refused():
    tr = hwprobe_trace(5)
    live = make_live(tr)
    live.requests[0]["tokens"][1] += 1
    with pytest.raises(SimmoeError, match="output tokens"):
        check_compatible(tr, live)
    live = make_live(tr)
    live.requests[1]["request_id"] = "zz"
    with pytest.raises(SimmoeError, match="question ids"):
        check_compatible(tr, live)
    live = make_live(tr)
    live.requests[0]["output_len"] += 1
    with pytest.raises(SimmoeError, match="output length"):
        check_compatible(tr, live)
    synthetic = random_trace(5)
    with pytest.raises(SimmoeError, match="not recorded by hwprobe"):
        check_compatible(synthetic, make_live(tr))


@settings(max_examples=10, deadline=None)
@given(fwd=st.floats(0.5, 20), tok=st.floats(0, 2), exp=st.floats(0.05, 3), copy_ms=st.floats(0, 4),
       level=st.floats(0.1, 5), fixed=st.floats(0, 3))
def test_fit_recovers_the_event_model_parameters(fwd, tok, exp, copy_ms, level, fixed):
    tr = hwprobe_trace(6, num_requests=3, output_len=(10, 14), pool_nodes=8)
    truth = profile(fwd, tok, exp, copy_ms, level, fixed)
    runs = [make_live(tr, s, n, truth) for s, n in (("ar", 0), ("eagle3", 2), ("specfit", 6), ("ddd", 4))]
    fit = fit_timing(runs)
    for name in ("forward_ms", "token_ms", "expert_ms", "copy_ms", "draft_level_ms", "draft_fixed_ms",
                 "commit_ms"):
        assert getattr(fit, name) == pytest.approx(getattr(truth, name), rel=1e-6, abs=1e-6), name
    assert fit.overlap is False and fit.copies_in_flight == 1


def test_fit_with_noise_predicts_within_a_few_percent():
    tr = hwprobe_trace(7, num_requests=4, output_len=(20, 30), pool_nodes=8)
    truth = profile()
    fit = fit_timing([make_live(tr, s, n, truth, noise=0.05, seed=i)
                      for i, (s, n) in enumerate((("ar", 0), ("eagle3", 3), ("specfit", 6)))])
    held_out = make_live(tr, "eagle3", 6, truth, noise=0.05, seed=9)
    v = compare(tr, held_out, fit, selector_ms=0.0)
    assert abs(v.errors["decode_tps"]) < 0.03 and v.errors["cycle_median"] < 0.08


def test_fit_refuses_too_few_cycles():
    tr = hwprobe_trace(8, num_requests=1, output_len=(1, 1))
    with pytest.raises(SimmoeError, match="too few"):
        fit_timing([make_live(tr, "ar", 0)])


# -- the live-run file -------------------------------------------------------
def test_read_live_round_trip_and_errors(tmp_path):
    tr = hwprobe_trace(9)
    path = write_live(tmp_path / "l.jsonl", tr)
    run = read_live(path)
    assert run.complete and run.num_cycles == len([1 for x in path.read_text().splitlines() if '"cycle"' in x])
    assert int(run.cycles["committed"].sum()) == int(tr.requests.output_len.sum())
    with pytest.raises(SimmoeError, match="no such live-run file"):
        read_live(tmp_path / "missing.jsonl")
    part = write_live(tmp_path / "p.jsonl", tr, complete=False)
    with pytest.raises(SimmoeError, match="incomplete"):
        read_live(part)
    assert read_live(part, allow_partial=True).num_cycles == run.num_cycles
    torn = tmp_path / "torn.jsonl"
    torn.write_text(path.read_text()[:-40])
    with pytest.raises(SimmoeError, match="not JSON"):
        read_live(torn)
    other = tmp_path / "o.jsonl"
    other.write_text(json.dumps({"type": "run", "format": "x/9"}) + "\n")
    with pytest.raises(SimmoeError, match="format"):
        read_live(other)
    notlive = tmp_path / "n.jsonl"
    notlive.write_text('{"a": 1}\n')
    with pytest.raises(SimmoeError, match="run line"):
        read_live(notlive)


# -- the command --------------------------------------------------------------
def test_cli_validate_end_to_end_and_bad_input(tmp_path, capsys):
    from simmoe.cli import main
    from simmoe.hardware.profile import save_profile
    from simmoe.trace.io import write_trace

    tr = hwprobe_trace(10, num_requests=3, output_len=(8, 12))
    trace_path = tmp_path / "t.parquet"
    write_trace(tr, trace_path)
    prof = profile()
    prof_path = save_profile(prof, tmp_path / "p.toml")
    runs = [write_live(tmp_path / f"{s}.jsonl", tr, s, n, prof) for s, n in (("ar", 0), ("eagle3", 3))]
    out_json, out_csv = tmp_path / "v.json", tmp_path / "c.csv"
    assert main(["validate", "--trace", str(trace_path), "--live", str(runs[0]), "--live", str(runs[1]),
                 "--json", str(out_json), "--cycles", str(out_csv), "--save-profile",
                 str(tmp_path / "fit.toml")]) == 0
    doc = json.loads(out_json.read_text())
    assert [r["selector"] for r in doc["runs"]] == ["ar", "eagle3"] and doc["in_sample"]
    assert all(r["accepted_mismatches"] == 0 for r in doc["runs"])
    assert "cycle_error" in out_csv.read_text().splitlines()[0]
    assert (tmp_path / "fit.toml").is_file()
    capsys.readouterr()
    # the given profile reproduces the synthetic runs up to the replay's own selector time (AR has none)
    assert main(["validate", "--trace", str(trace_path), "--live", str(runs[0]), "--hardware", str(prof_path),
                 "--json", "-"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out[out.index("{"):])["runs"][0]["tps_error"] == pytest.approx(0, abs=1e-9)
    # bad input: exit 2, one line
    bad = tmp_path / "bad.jsonl"
    lines = runs[1].read_text().splitlines()
    meta = json.loads(lines[0])
    meta["model"] = "another"
    bad.write_text("\n".join([json.dumps(meta)] + lines[1:]) + "\n")
    for argv in (["--live", str(bad)], ["--live", str(tmp_path / "none.jsonl")],
                 ["--live", str(runs[0]), "--json", str(tmp_path / "no" / "x.json")]):
        assert main(["validate", "--trace", str(trace_path), *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "error" in err


def test_derived_cost_model_is_the_event_model_of_a_full_depth_cycle():
    from simmoe.replay.timing import CycleTimer
    from simmoe.validation.live import derived_cost_model

    prof = derived_cost_model(profile(), depth=5, K=7, miss_fraction=0.25)
    timer = CycleTimer(prof, model="closed", cache=False)
    rng = np.random.default_rng(0)
    for k in range(8):
        h = rng.integers(0, 3, size=4)
        m = rng.integers(0, 5, size=4)
        # no cache: every expert of the union is copied, so F = misses
        event = timer.draft_ms(5) + timer.forward_ms(1 + k, np.zeros(4, int), h + m) + timer.commit_ms()
        assert prof.cost_model(False).b[k] + prof.cost_beta_no_cache * int((h + m).sum()) == pytest.approx(event)
    assert prof.cost_beta_cache == pytest.approx(prof.expert_ms + 0.25 * prof.copy_ms)


def test_noise_floor_is_zero_for_a_deterministic_run_and_grows_with_noise():
    from simmoe.validation.live import noise_floor

    tr = hwprobe_trace(11, num_requests=3, output_len=(20, 30))
    assert noise_floor(make_live(tr, "ar", 2)) == pytest.approx(0, abs=1e-12)
    assert 0.03 < noise_floor(make_live(tr, "ar", 2, noise=0.2, seed=3)) < 0.3


# -- repeated passes -----------------------------------------------------------
def _passes(trace, n, seed, selector="eagle3", slots=3):
    """``n`` passes of one run: the same cycles, every time scaled by its own random factor ≥ 1."""
    from simmoe.validation.live import _split_requests

    rng = np.random.default_rng(seed)
    base = live_records(trace, selector, slots, profile())
    out = []
    for _ in range(n):
        recs = copy.deepcopy(base)
        for r in recs:
            if r["type"] == "cycle":
                r["level_ms"] = [x * (1 + rng.exponential(0.3)) for x in r["level_ms"]]
                r["draft_ms"] = sum(r["level_ms"][:r["drafted_levels"]])
                for k in ("select_ms", "verify_ms", "commit_ms"):
                    r[k] *= 1 + rng.exponential(0.3)
            else:
                r["prefill_ms"] *= 1 + rng.exponential(0.3)
        out.append(_split_requests(recs))
    return out


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 4))
def test_merged_passes_keep_each_part_at_its_minimum(seed, n):
    from simmoe.validation.live import merge_passes

    tr = hwprobe_trace(seed % 7, num_requests=2, output_len=(4, 9))
    passes = _passes(tr, n, seed)
    merged = merge_passes(passes)
    assert len(merged) == len(passes[0])
    for r, req in enumerate(merged):
        assert req[0]["prefill_ms"] == min(p[r][0]["prefill_ms"] for p in passes)
        for j, c in enumerate(req[1:], 1):
            cs = [p[r][j] for p in passes]
            for k in ("select_ms", "verify_ms", "commit_ms"):
                assert c[k] == min(x[k] for x in cs)
            lv = [min(x["level_ms"][i] for x in cs) for i in range(len(c["level_ms"]))]
            assert c["level_ms"] == lv and c["draft_ms"] == pytest.approx(sum(lv[:c["drafted_levels"]]))
            samples = [x["draft_ms"] + x["select_ms"] + x["verify_ms"] + x["commit_ms"] for x in cs]
            assert c["samples_ms"] == pytest.approx(samples)
            # the sum of the parts' minima is at most the least of the passes' cycle times
            assert c["cycle_ms"] <= min(samples) + 1e-9
            assert {k: c[k] for k in ("position", "selected", "hits", "copies")} == \
                {k: cs[0][k] for k in ("position", "selected", "hits", "copies")}
    # merging is associative in its result: merged passes merged again with nothing changes nothing
    assert merge_passes([merged]) [0][1]["verify_ms"] == merged[0][1]["verify_ms"]


@pytest.mark.parametrize("field,value", [("copies", [99]), ("selected", [0, 1, 2, 3, 4, 5, 6, 7]),
                                         ("committed", 0)])
def test_passes_that_made_other_cycles_are_refused(field, value):
    from simmoe.validation.live import merge_passes

    tr = hwprobe_trace(3, num_requests=2, output_len=(6, 9))
    passes = _passes(tr, 3, 0)
    passes[2][1][2][field] = value
    with pytest.raises(CheckFailed, match="pass 3 made other cycles"):
        merge_passes(passes)
    passes = _passes(tr, 2, 0)
    del passes[1][0][-1]
    with pytest.raises(CheckFailed, match="pass 2"):
        merge_passes(passes)


def test_pass_files_merge_and_other_runs_are_refused(tmp_path, capsys):
    from simmoe.cli import main
    from simmoe.trace.io import write_trace
    from simmoe.validation.live import read_live_passes

    tr = hwprobe_trace(4, num_requests=2, output_len=(6, 10))
    files = []
    for i, p in enumerate(_passes(tr, 3, 1)):
        f = tmp_path / f"pass{i}.jsonl"
        f.write_text("\n".join(json.dumps(x) for x in [live_meta(tr, "eagle3", 3)] + [y for q in p for y in q]) + "\n")
        files.append(f)
    run = read_live_passes(files)
    assert run.meta["repeats"] == 3 and all(len(s) == 3 for s in run.cycles["samples_ms"])
    single = [read_live(f) for f in files]
    assert np.all(run.cycles["verify_ms"] == np.min([s.cycles["verify_ms"] for s in single], axis=0))
    assert run.summary()["decode_tps"] >= max(s.summary()["decode_tps"] for s in single)
    other = write_live(tmp_path / "other.jsonl", tr, "eagle3", 5)
    with pytest.raises(SimmoeError, match="not passes of one run: they differ in slots"):
        read_live_passes([files[0], other])
    trace_path = tmp_path / "t.parquet"
    write_trace(tr, trace_path)
    capsys.readouterr()
    assert main(["validate", "--trace", str(trace_path), "--live", ",".join(map(str, files)), "--json", "-"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out[out.index("{"):])["runs"][0]["accepted_mismatches"] == 0
    assert main(["validate", "--trace", str(trace_path), "--live", f"{files[0]},{other}"]) == 2
    assert "not passes of one run" in capsys.readouterr().err


# -- bad values in live-run files: one line naming file, line and field -------------
def _with_cycle_value(path, src, field, value, nth=0):
    """``src`` with ``field`` of its ``nth`` cycle line set to ``value`` (deleted when value is ...)."""
    out, seen, line_no = [], 0, None
    for no, line in enumerate(src.read_text().splitlines(), 1):
        rec = json.loads(line)
        if rec.get("type") == "cycle":
            if seen == nth:
                if value is ...:
                    del rec[field]
                else:
                    rec[field] = value
                line_no = no
            seen += 1
        out.append(json.dumps(rec))
    path.write_text("\n".join(out) + "\n")
    return path, line_no


@pytest.fixture
def recorded(tmp_path):
    from simmoe.trace.io import write_trace

    tr = hwprobe_trace(10, num_requests=3, output_len=(8, 12))
    trace_path = tmp_path / "t.parquet"
    write_trace(tr, trace_path)
    return tr, trace_path, write_live(tmp_path / "good.jsonl", tr, "eagle3", 3)


@pytest.mark.parametrize("field, value, words", [
    ("verify_ms", -500.0, "must be a finite time >= 0 in ms, got -500.0"),
    ("verify_ms", float("nan"), "got nan"),
    ("verify_ms", "12.5", "got '12.5'"),
    ("draft_ms", float("inf"), "got inf"),
    ("commit_ms", True, "got True"),
    ("select_ms", None, "got None"),
    ("level_ms", [1.0, -2.0], "entry 1 must be a finite time"),
    ("committed", 1.5, "must be an integer >= 0"),
    ("pool_size", 10**9, "must be at most 32767"),
    ("hits", [1, "x"], "entry 1 must be an integer"),
    ("hits", [1, 2, 3, 4], "4 layers, but earlier cycles have 1"),
    ("request", 7, "request 7 but the file has 3 request lines"),
    ("verify_ms", ..., "lacks 'verify_ms'"),
])
def test_bad_live_values_are_refused_naming_file_line_field(tmp_path, capsys, recorded, field, value, words):
    from simmoe.cli import main

    _, trace_path, good = recorded
    bad, line = _with_cycle_value(tmp_path / "bad.jsonl", good, field, value, nth=1)
    with pytest.raises(SimmoeError, match=re.escape(words)) as e:
        read_live(bad)
    assert f"{bad}, line {line} (cycle 1)" in str(e.value)
    if value is not ...:
        assert f"field {field!r}" in str(e.value)
    assert main(["validate", "--trace", str(trace_path), "--live", str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and words in captured.err and captured.out == ""


def test_negative_verify_time_no_longer_inflates_decode_tps(tmp_path, capsys, recorded):
    # the case that used to pass: -500 ms made the run's decode TPS ten times too high
    from simmoe.cli import main

    _, trace_path, good = recorded
    bad, _ = _with_cycle_value(tmp_path / "bad.jsonl", good, "verify_ms", -500.0)
    assert main(["validate", "--trace", str(trace_path), "--live", str(bad), "--json", "-"]) == 2
    assert capsys.readouterr().out == ""


def test_bad_prefill_time_and_run_line(tmp_path, recorded):
    _, _, good = recorded
    lines = [json.loads(x) for x in good.read_text().splitlines()]
    req = next(r for r in lines if r["type"] == "request")
    req["prefill_ms"] = -1
    (tmp_path / "p.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    with pytest.raises(SimmoeError, match=r"line 2 \(request 0\), field 'prefill_ms'"):
        read_live(tmp_path / "p.jsonl")
    lines = [json.loads(x) for x in good.read_text().splitlines()]
    lines[0]["slots"] = "3"
    (tmp_path / "r.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    with pytest.raises(SimmoeError, match=r"line 1 \(run line\), field 'slots': must be an integer"):
        read_live(tmp_path / "r.jsonl")


@pytest.mark.parametrize("flag", ["--json", "--cycles", "--save-profile", "--trace", "--live"])
def test_a_folder_given_as_a_file_is_named_as_a_folder(tmp_path, capsys, recorded, flag):
    from simmoe.cli import main

    _, trace_path, good = recorded
    folder = tmp_path / "out"
    folder.mkdir()
    args = {"--trace": str(trace_path), "--live": str(good)}
    args[flag] = str(folder)
    argv = ["validate"] + [x for k, v in args.items() for x in (k, v)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a folder" in err and "Traceback" not in err
    assert list(folder.iterdir()) == []
