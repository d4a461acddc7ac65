"""`simmoe replay --temperature`, schema versions 1 and 2, and the validation of the target fields."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from factories import random_trace
from sampling_factories import sampled_trace

from simmoe.cli import main
from simmoe.errors import TraceError
from simmoe.trace.io import read_trace, write_trace
from simmoe.trace.validate import validate_trace


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("sampling")
    write_trace(sampled_trace(5, num_requests=2, output_len=(20, 30), pool_nodes=8), d / "t1.parquet")
    greedy = random_trace(5, num_requests=2, output_len=(20, 30), pool_nodes=8)
    write_trace(greedy, d / "g.parquet")
    v1 = copy.deepcopy(greedy)
    v1.meta["schema_version"] = 1
    write_trace(v1, d / "v1.parquet")
    from simmoe.hardware.profile import HardwareProfile, save_profile

    prof = HardwareProfile(
        name="cli-test", description="replay CLI tests", source="hand-written for tests",
        copy_ms=0.5, forward_ms=64.0, expert_ms=0.125, draft_level_ms=4.0, commit_ms=1.0,
        cost_b_cache=tuple(128.0 + 2 * j for j in range(33)), cost_beta_cache=0.25,
        cost_b_no_cache=tuple(112.0 + j for j in range(33)), cost_beta_no_cache=0.5,
        evict_cost=tuple(128.0 + 4.0 * k for k in range(1, 33)))
    save_profile(prof, d / "p.toml")
    return d


def run(d, name, *argv):
    return main(["replay", str(d / name), "--no-progress", "--selectors", "eagle3,evict",
                 "--hardware", str(d / "p.toml"), *argv])


def test_sampled_replay_prints_mat_and_json(files, capsys):
    assert run(files, "t1.parquet", "--temperature", "1", "--slots", "0", "--json", "-") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["config"]["temperature"] == 1.0
    for row in doc["results"]:
        assert row["mat"] >= row["committed"] >= 1
    assert run(files, "t1.parquet", "--temperature", "1", "--slots", "0") == 0
    out = capsys.readouterr().out
    assert "Mat" in out and "temperature 1" in out


@pytest.mark.parametrize("value, message", [("-1", "finite number >= 0"), ("nan", "finite number >= 0"),
                                            ("warm", "give a number")])
def test_bad_temperature_is_one_line_exit_2(files, capsys, value, message):
    assert run(files, "t1.parquet", "--temperature", value) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


@pytest.mark.parametrize("name", ["g.parquet", "v1.parquet"])
def test_greedy_only_trace_at_temperature_is_one_line_exit_2(files, capsys, name):
    assert run(files, name, "--temperature", "1") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "greedy-only" in err and name in err


def test_version_1_files_are_read_and_written_back_as_version_1(files, tmp_path):
    t = read_trace(files / "v1.parquet")
    assert t.meta["schema_version"] == 1 and t.node_target_cdf is None
    write_trace(t, tmp_path / "again.parquet")
    assert read_trace(tmp_path / "again.parquet").meta["schema_version"] == 1
    assert run(files, "v1.parquet") == 0


def test_target_fields_survive_a_round_trip(files):
    t = read_trace(files / "t1.parquet")
    assert t.meta["schema_version"] == 2 and t.meta["sampling"]["temperature"] == 1.0
    assert t.node_target_cdf is not None and t.node_target_cdf.dtype == np.float32


# ----------------------------------------------------- field validation ---
def _bad(edit):
    t = sampled_trace(6, num_requests=2, output_len=(6, 9), pool_nodes=8)
    edit(t)
    with pytest.raises(TraceError) as e:
        validate_trace(t, path="x.parquet")
    return e.value


def _first_pair(t):
    """Two siblings (flat ids, ordered by token) of the first pool that has them."""
    ptr = t.node_ptr
    for i in range(t.num_positions):
        lo, hi = int(ptr[i]), int(ptr[i + 1])
        par = t.node_parent[lo:hi]
        for a in np.unique(par):
            kids = lo + np.flatnonzero(par == a)
            if len(kids) >= 2:
                kids = kids[np.argsort(t.node_token[kids])]
                return i, int(kids[0]), int(kids[1])
    raise AssertionError("no siblings")


def test_probability_out_of_range_names_row_and_field():
    def edit(t):
        t.node_target_prob[5] = 1.5
    e = _bad(edit)
    assert e.field == "node_target_prob" and e.row is not None and "x.parquet" in str(e)


def test_nan_cdf_is_refused():
    def edit(t):
        t.node_target_cdf[3] = np.nan
    assert _bad(edit).field == "node_target_cdf"


def test_overlapping_sibling_intervals_are_inconsistent():
    state = {}

    def edit(t):
        row, a, b = _first_pair(t)
        state["row"] = row
        t.node_target_cdf[b] = t.node_target_cdf[a] + 0.5 * t.node_target_prob[a]
        t.node_target_prob[b] = min(t.node_target_prob[b], 1 - t.node_target_cdf[b])
    e = _bad(edit)
    assert (e.row, e.field) == (state["row"], "node_target_cdf") and "inside" in str(e)


def test_siblings_summing_past_one_are_inconsistent():
    def edit(t):
        row, a, b = _first_pair(t)
        t.node_target_prob[a] = 0.7
        t.node_target_prob[b] = 0.7
        t.node_target_cdf[a] = 0.0
        t.node_target_cdf[b] = 0.3
    e = _bad(edit)
    assert e.field in ("node_target_prob", "node_target_cdf")


def test_agreeing_node_must_be_the_most_probable_sibling():
    def edit(t):
        row, a, b = _first_pair(t)
        t.node_agree[a], t.node_agree[b] = False, True
        t.node_target_cdf[a], t.node_target_prob[a] = 0.0, 0.6
        t.node_target_cdf[b], t.node_target_prob[b] = 0.6, 0.3
    e = _bad(edit)
    assert e.field == "node_target_prob" and "greedy" in str(e)


@pytest.mark.parametrize("edit, field", [
    (lambda t: t.meta["sampling"].update(temperature=-1.0), "meta.sampling.temperature"),
    (lambda t: t.meta["sampling"].update(text="maybe"), "meta.sampling.text"),
    (lambda t: t.meta["sampling"].update(seed=-3), "meta.sampling.seed"),
    (lambda t: setattr(t, "node_target_cdf", None), "node_target_cdf"),
    (lambda t: t.meta.pop("sampling"), "node_target_cdf"),
    (lambda t: t.meta.update(schema_version=1), "meta.schema_version"),
])
def test_bad_sampling_meta(edit, field):
    assert _bad(edit).field == field


# ------------------------------------------------- live runs at temperature ---
@pytest.mark.parametrize("value", [-1.0, "warm", float("nan")])
def test_live_run_with_a_bad_temperature_is_refused(tmp_path, value):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from test_validate import hwprobe_trace, write_live

    from simmoe.errors import SimmoeError
    from simmoe.validation.live import read_live

    tr = hwprobe_trace(2, num_requests=2, output_len=(6, 9))
    path = write_live(tmp_path / "l.jsonl", tr)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    lines[0]["temperature"] = value
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    with pytest.raises(SimmoeError, match=r"line 1 \(run line\), field 'temperature'"):
        read_live(path)


def test_live_run_and_trace_must_share_the_temperature():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from test_validate import hwprobe_trace, make_live

    from simmoe.errors import SimmoeError
    from simmoe.validation.live import check_compatible

    tr = hwprobe_trace(3, num_requests=2, output_len=(6, 9))
    live = make_live(tr)
    check_compatible(tr, live)
    live.meta["temperature"] = 1.0
    with pytest.raises(SimmoeError, match="differ in temperature"):
        check_compatible(tr, live)


@pytest.mark.parametrize("text, also_zero", [("sampled", False), ("greedy", True)])
def test_another_temperature_suggests_only_what_the_trace_replays_at(files, tmp_path, capsys, text, also_zero):
    t = read_trace(files / "t1.parquet")
    t.meta["sampling"]["text"] = text
    write_trace(t, tmp_path / "t.parquet")
    assert main(["replay", str(tmp_path / "t.parquet"), "--no-progress", "--selectors", "eagle3",
                 "--hardware", str(files / "p.toml"), "--temperature", "0.5"]) == 2
    err = capsys.readouterr().err.strip()
    assert "replay it at --temperature 1" in err and err.endswith(" or 0") == also_zero
    if not also_zero:      # the suggestion is accepted; 0 would be refused for a sampled text
        assert main(["replay", str(tmp_path / "t.parquet"), "--no-progress", "--selectors", "eagle3",
                     "--hardware", str(files / "p.toml"), "--temperature", "0"]) == 2
        assert "its text was sampled" in capsys.readouterr().err


def test_json_config_names_every_selector_and_a_disabled_cache_says_no_cache(files, capsys):
    assert run(files, "g.parquet", "--json", "-", "--cache", "none", "--slots", "12") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["config"]["selectors"] == ["eagle3", "evict"] and "selector" not in doc["config"]
    assert run(files, "g.parquet", "--cache", "none", "--slots", "12") == 0
    out = " ".join(capsys.readouterr().out.split())    # the title may wrap at the table's width
    assert "no cache, " in out and "none cache" not in out and "12 slots" not in out
    assert run(files, "g.parquet", "--slots", "12") == 0
    assert "12 slots/layer, lru cache," in " ".join(capsys.readouterr().out.split())


def test_help_lists_each_selector_apart(capsys):
    from simmoe.replay.selectors import SELECTORS

    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    out = capsys.readouterr().out
    for name, cls in SELECTORS.items():
        assert f"  {name} " in out and f"{name}{cls.summary[:5]}" not in out
