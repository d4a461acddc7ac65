"""Bad inputs the command line refuses in one line, exit 2: a profile of another model than the trace's (one
check shared by every command), cache budgets in MiB, blanks in profile and model names, a sweep whose
plugin fails, usage errors of ``python -m simmoe.report.caches``; and ``simmoe replay --help`` names every
prefetch policy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from factories import random_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.cli import main
from simmoe.hardware.catalogue import load_models
from simmoe.hardware.model_check import geometry_problem
from simmoe.hardware.profile import load_profile
from simmoe.trace.io import write_trace

ROOT = Path(__file__).resolve().parents[1]
MODELS = load_models()
SHAPES = {key: (len(m.moe_layers), m.trace_experts, m.trace_top_k) for key, m in MODELS.items()}


def _trace(path, *, L, N, k, name, requests=1, expert_bytes=1024):
    trace = random_trace(5, num_requests=requests, output_len=(3, 5), pool_nodes=4, L=L, N=N, k=k)
    trace.meta["geometry"].update(name=name, expert_bytes=expert_bytes)
    write_trace(trace, path)
    return path


def one_line(capsys, *words):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for w in words:
        assert w in err, err
    return err


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad-inputs")
    return {"olmoe": _trace(d / "olmoe.parquet", L=16, N=64, k=8, name="OLMoE-1B-7B-0924"),
            "mixtral": _trace(d / "mixtral.parquet", L=32, N=8, k=2, name="Mixtral-8x7B-Instruct-v0.1"),
            # 48 layers as the default profile's model, but another routing: in no catalogue entry
            "odd": _trace(d / "odd.parquet", L=48, N=64, k=4, name="odd"),
            "small": _trace(d / "small.parquet", L=3, N=8, k=2, name="random", requests=3),
            "any": _any_model_profile(d / "any.toml"), "dir": d}


def _any_model_profile(path):
    """The default profile's times, stating no geometry (num_layers = 0): it serves any trace."""
    from simmoe.hardware.profile import save_profile

    save_profile(load_profile("a100-pcie-40gb").replace(name="any", num_layers=0), path)
    return path


# -- one geometry check, every command ---------------------------------------------------------------------
def test_sweep_refuses_a_profile_of_another_model(traces, capsys):
    out = traces["dir"] / "s.csv"
    assert main(["sweep", str(traces["olmoe"]), "-o", str(out), "--hardware", "qwen3-30b-a3b@h100-sxm+pcie5-x16",
                 "--selectors", "eagle3", "--workers", "1", "--quiet", "--no-progress"]) == 2
    one_line(capsys, "qwen3-30b-a3b@h100-sxm+pcie5-x16 is Qwen3-30B-A3B", "routes to 64 experts, top-8")
    assert not out.exists()


def test_bound_refuses_a_profile_of_another_model(traces, capsys):
    assert main(["bound", str(traces["mixtral"]), "--hardware", "qwen3-30b-a3b@h100-sxm", "--quiet"]) == 2
    one_line(capsys, "simmoe bound: error:", "(128 experts, top-8)", "routes to 8 experts, top-2")


def test_validate_refuses_a_profile_of_another_model(tmp_path, capsys):
    live = tmp_path / "live.jsonl"
    live.write_text("")     # refused before any live run is read
    assert main(["validate", "--trace", str(ROOT / "traces/tiny-gsm8k.parquet"), "--live", str(live),
                 "--hardware", "qwen3-30b-a3b@h100-sxm"]) == 2
    one_line(capsys, "simmoe validate: error:", "routes to 32 experts, top-4")


@pytest.mark.parametrize("command", ["replay", "sweep", "bound"])
def test_a_model_outside_the_catalogue_has_no_default_profile(traces, capsys, command):
    """48 layers like the default profile's model, other experts: not replayed on the default profile."""
    path = str(traces["odd"])
    argv = {"replay": ["replay", path, "--workers", "1", "--no-progress", "--selectors", "eagle3"],
            "sweep": ["sweep", path, "-o", str(traces["dir"] / "odd.csv"), "--workers", "1", "--quiet"],
            "bound": ["bound", path, "--quiet"]}[command]
    assert main(argv) == 2
    one_line(capsys, "is not in the catalogue", "give --hardware PROFILE")


def test_the_shipped_profile_knows_its_model_s_experts(traces, capsys):
    assert main(["replay", str(traces["odd"]), "--hardware", "a100-pcie-40gb", "--workers", "1",
                 "--no-progress", "--selectors", "eagle3"]) == 2
    one_line(capsys, "profile a100-pcie-40gb is Qwen3-30B-A3B-Instruct-2507 (128 experts, top-8)",
             "routes to 64 experts, top-4")


@pytest.fixture(scope="module")
def physical():
    return {key: load_profile(f"{key}@h100-sxm+pcie5-x16") for key in MODELS}


@settings(max_examples=60, deadline=None)
@given(key=st.sampled_from(sorted(MODELS)), shape=st.one_of(
    st.sampled_from(sorted(SHAPES.values())),
    st.tuples(st.integers(1, 100), st.sampled_from([1, 8, 32, 60, 64, 128, 256]), st.sampled_from([1, 2, 4, 6, 8]))))
def test_a_physical_profile_serves_exactly_its_model_s_geometry(physical, key, shape):
    from simmoe.trace.schema import ModelGeometry

    problem = geometry_problem(ModelGeometry(*shape), physical[key], key)
    assert (problem is None) == (shape == SHAPES[key])


@settings(max_examples=40, deadline=None)
@given(shape=st.tuples(st.integers(1, 64), st.sampled_from([8, 64, 128]), st.sampled_from([2, 4, 8])))
def test_a_toml_profile_checks_what_it_states(shape):
    from simmoe.trace.schema import ModelGeometry

    a100 = load_profile("a100-pcie-40gb")            # states 48 layers of Qwen3-30B-A3B: 128 experts, top-8
    geometry = ModelGeometry(*shape)
    assert (geometry_problem(geometry, a100, "a100") is None) == (shape == (48, 128, 8))
    assert geometry_problem(geometry, a100.replace(num_layers=0), "a100") is None   # states no geometry


# -- --cache-mib ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mib, held", [("0", 0), ("0.001", 0), ("70", 7)])   # 9 MiB per expert, top-8
def test_a_budget_in_mib_below_top_k_names_cache_mib(tmp_path, capsys, mib, held):
    path = _trace(tmp_path / "q.parquet", L=48, N=128, k=8, name="Qwen3-30B-A3B-Instruct-2507",
                  expert_bytes=9 * 2**20)
    out = tmp_path / "out.json"
    assert main(["replay", str(path), "--workers", "1", "--no-progress", "--selectors", "eagle3",
                 "--cache-mib", mib, "--json", str(out)]) == 2
    err = one_line(capsys, f"--cache-mib {float(mib):g}: holds {held} expert", "top-8", "give at least 72 MiB")
    assert "--cache-experts" not in err and not out.exists()


def test_a_budget_beyond_every_expert_holds_them_all(traces, capsys):
    """1e308 MiB overflowed a float (a traceback); any budget past the model's L x N experts is the same replay."""
    path = _trace(traces["dir"] / "o2.parquet", L=16, N=64, k=8, name="OLMoE-1B-7B-0924")
    cmd = ["replay", str(path), "--hardware", "olmoe-1b-7b@h100-sxm+pcie5-x16", "--workers", "1",
           "--no-progress", "--selectors", "eagle3", "--json", "-"]
    runs = []
    for size in (["--cache-mib", "1e308"], ["--cache-mib", "1e9"], ["--cache-experts", str(16 * 64)]):
        assert main(cmd + size) == 0
        doc = json.loads(capsys.readouterr().out)
        runs.append(doc)
    assert runs[0]["config"]["cache_budget"] == runs[1]["config"]["cache_budget"] == 16 * 64
    assert runs[0]["results"] == runs[1]["results"] == runs[2]["results"]


# -- names with blanks ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, words", [
    ("qwen3-30b-a3b@h100-sxm\n", "ends with a newline"),
    (" qwen3-30b-a3b@h100-sxm", "starts with a blank"),
    ("qwen3-30b-a3b @h100-sxm", "a blank at character 14"),
    ("a100-pcie-40gb\t", "ends with a tab"),
])
def test_a_profile_name_with_whitespace_is_pointed_at(traces, capsys, name, words):
    assert main(["replay", str(traces["small"]), "--hardware", name, "--no-progress", "--workers", "1"]) == 2
    one_line(capsys, repr(name), words)


def test_a_profile_path_with_a_trailing_newline_is_pointed_at(traces, capsys):
    path = traces["dir"] / "p.toml"
    path.write_text("format = 1\n")
    assert main(["replay", str(traces["small"]), "--hardware", f"{path}\n", "--no-progress"]) == 2
    one_line(capsys, "ends with a newline")


@pytest.mark.parametrize("name, words", [("", "empty model name"), (" olmoe-1b-7b", "starts with a blank"),
                                         ("olmoe-1b-7b\n", "ends with a newline")])
def test_simmoe_models_refuses_an_empty_or_blank_name(capsys, name, words):
    assert main(["models", name]) == 2
    one_line(capsys, words)
    assert capsys.readouterr().out == ""


# -- a sweep whose plugin fails -------------------------------------------------------------------------------
FAILING = '''
class Failing:
    name = "failing"
    def __init__(self, context):
        pass
    def select(self, view):
        raise RuntimeError("this selector always fails")
'''


def test_a_sweep_with_a_failing_plugin_is_one_line_exit_2(traces, capsys, monkeypatch, tmp_path):
    (tmp_path / "failing_selector_plugin.py").write_text(FAILING)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = traces["dir"] / "failing.csv"
    assert main(["sweep", str(traces["small"]), "-o", str(out), "--hardware", str(traces["any"]), "--workers",
                 "1", "--quiet", "--no-progress", "--selectors", "eagle3,failing_selector_plugin:Failing",
                 "--slots", "2"]) == 2
    err = one_line(capsys, "simmoe sweep: error:", "failing_selector_plugin:Failing", "always fails",
                   "1 of 2 configurations failed")
    assert "kept in" in err and out.exists()


def test_a_fault_of_simmoe_in_a_sweep_lists_every_failure_exit_1(traces, capsys, monkeypatch):
    """Not bad input (a rerun may pass): each failure on its line, the other rows kept, exit 1."""
    import simmoe.sweep.grid as grid

    real = grid.replay

    def fails_on_eagle3(trace, cfg, *a, **kw):
        if cfg.selector == "eagle3":
            raise RuntimeError("an internal fault")
        return real(trace, cfg, *a, **kw)

    monkeypatch.setattr(grid, "replay", fails_on_eagle3)
    out = traces["dir"] / "fault.csv"
    assert main(["sweep", str(traces["small"]), "-o", str(out), "--hardware", str(traces["any"]), "--workers",
                 "1", "--quiet", "--no-progress", "--selectors", "ar,eagle3", "--slots", "2"]) == 1
    err = capsys.readouterr().err
    assert err.count("sweep: failed:") == 1 and "RuntimeError: an internal fault" in err
    assert "a rerun runs only the missing ones" in err and set(pd.read_csv(out)["selector"]) == {"ar"}


def test_a_sweep_with_the_learned_policy_and_no_request_to_learn_from(traces, capsys):
    out = traces["dir"] / "learned.csv"
    assert main(["sweep", str(traces["small"]), "-o", str(out), "--hardware", str(traces["any"]), "--workers",
                 "1", "--quiet", "--no-progress", "--selectors", "eagle3", "--cache", "learned", "--slots", "4"]) == 2
    one_line(capsys, "cache policy 'learned' trains only on requests the replay does not cover")
    assert not out.exists()


# -- help and usage -------------------------------------------------------------------------------------------
def test_replay_help_lists_every_registered_prefetch_policy(capsys):
    from simmoe.replay import plugins

    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in plugins.names("prefetch"):
        assert f" {name}," in text or f" {name} " in text, name


def test_the_cache_report_s_usage_error_is_one_line():
    run = subprocess.run([sys.executable, "-m", "simmoe.report.caches", "--bogus"], capture_output=True,
                         text=True, cwd=ROOT)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.splitlines() == ["python -m simmoe.report.caches: error: unrecognized arguments: --bogus"]
