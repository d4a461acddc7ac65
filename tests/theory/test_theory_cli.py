"""`simmoe bound` and `simmoe hardness` from the command line: output, bad input, exit codes."""

from __future__ import annotations

import json

import pytest
from factories import random_trace

from simmoe.cli import main
from simmoe.errors import CheckFailed

PROFILE = """\
name = "test-profile"
description = "made-up coefficients for tests"
source = "tests"
[copy]
copy_ms = 0.4
[compute]
forward_ms = 100.0
expert_ms = 0.05
[cost_model.cache]
b = [3.0, 3.1, 3.3, 3.4, 3.6, 3.7, 3.9, 4.0]
beta = 0.1
[cost_model.no_cache]
b = [2.5, 2.6, 2.7, 2.8, 2.9, 3.0, 3.1, 3.2]
beta = 0.3
"""


@pytest.fixture
def files(tmp_path):
    from simmoe.trace.io import write_trace

    trace = random_trace(3, num_requests=3, output_len=(6, 12), pool_nodes=6)
    tpath = tmp_path / "t.parquet"
    write_trace(trace, tpath)
    ppath = tmp_path / "p.toml"
    ppath.write_text(PROFILE)
    return trace, str(tpath), str(ppath)


def run_json(capsys, *argv):
    code = main(list(argv) + ["--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def test_bound_json_is_table5_of_the_trace(files, capsys):
    from simmoe.theory import lambda_star
    from simmoe.theory.cycles import specfit_cycles
    from solvers import CostModel

    trace, tpath, ppath = files
    rep = run_json(capsys, "bound", tpath, "--hardware", ppath)
    assert rep["synthetic"] is True and rep["cache"] is True and rep["beta"] == 0.1
    cost = CostModel([3.0, 3.1, 3.3, 3.4, 3.6, 3.7, 3.9, 4.0], 0.1)
    cycles = specfit_cycles(trace, cost)
    t = rep["table5"]
    assert t["cycles"] == len(cycles)
    assert t["lambda_star"] == pytest.approx(lambda_star([c.pool for c in cycles], 6, cost),
                                             rel=1e-12)
    assert 0 <= t["lambda_star_minus_theta_pct"] <= t["eq7_bound_pct"] + 1e-9


def test_bound_without_cache_uses_the_other_coefficients(files, capsys):
    _, tpath, ppath = files
    with_cache = run_json(capsys, "bound", tpath, "--hardware", ppath)
    without = run_json(capsys, "bound", tpath, "--hardware", ppath, "--slots", "0")
    assert without["cache"] is False and without["beta"] == 0.3
    assert without["table5"]["lambda_star"] != with_cache["table5"]["lambda_star"]


def test_bound_table_says_synthetic(files, capsys):
    _, tpath, ppath = files
    assert main(["bound", tpath, "--hardware", ppath]) == 0
    out = capsys.readouterr().out
    assert "synthetic" in out and "Bound of Eq. 7" in out


@pytest.mark.parametrize("argv, needle", [
    (["bound", "MISSING.parquet"], "MISSING.parquet"),
    (["bound", "{t}", "--hardware", "{p}", "--slots", "-1"], "--slots"),
    (["bound", "{t}", "--hardware", "no-such-profile"], "no-such-profile"),
])
def test_bound_bad_input_is_one_line_exit_2(files, capsys, argv, needle):
    _, tpath, ppath = files
    argv = [a.format(t=tpath, p=ppath) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_bound_on_a_file_that_is_no_trace_is_bad_input(tmp_path, capsys):
    bad = tmp_path / "bad.parquet"
    bad.write_text("not a trace")
    assert main(["bound", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert "bad.parquet" in err and len(err.splitlines()) == 1


def test_bound_short_intercepts_are_bad_input(files, capsys, tmp_path):
    _, tpath, _ = files
    short = tmp_path / "short.toml"
    short.write_text(PROFILE.replace("b = [3.0, 3.1, 3.3, 3.4, 3.6, 3.7, 3.9, 4.0]", "b = [3.0, 3.1]"))
    assert main(["bound", tpath, "--hardware", str(short)]) == 2
    assert "K = 6 needs b_0..b_6" in capsys.readouterr().err


def test_bound_failed_self_check_exits_3(files, capsys, monkeypatch):
    import simmoe.theory.table5 as t5

    def broken(**kw):
        raise CheckFailed("λ* − Θ exceeds the Eq. 7 bound")

    monkeypatch.setattr(t5, "_check", broken)
    _, tpath, ppath = files
    assert main(["bound", tpath, "--hardware", ppath]) == 3
    assert "self-check failed" in capsys.readouterr().err


def test_hardness_json_and_known_answers(capsys):
    rep = run_json(capsys, "hardness", "--vertices", "6", "--edge-prob", "1.0", "--r", "4",
                   "--count", "2")
    assert rep["synthetic"] and rep["all_agree"]
    assert [i["reaches_theta"] for i in rep["instances"]] == [True, True]
    assert [i["seed"] for i in rep["instances"]] == [0, 1]
    rep = run_json(capsys, "hardness", "--vertices", "6", "--edge-prob", "0.0", "--r", "2")
    assert rep["instances"][0]["reaches_theta"] is False
    assert rep["instances"][0]["has_clique"] is False


def test_hardness_writes_pool_files(tmp_path, capsys):
    out = tmp_path / "inst"
    rep = run_json(capsys, "hardness", "--vertices", "7", "--edge-prob", "0.5", "--r", "3",
                   "--seed", "4", "--count", "3", "--write", str(out))
    files = sorted(out.iterdir())
    assert [f.name for f in files] == sorted(
        f"clique_n7_q0.5_r3_seed{s}.json" for s in (4, 5, 6))
    assert sorted(rep["written"]) == sorted(str(f) for f in files)
    for f, inst in zip(files, rep["instances"]):
        rec = json.loads(f.read_text())
        assert rec["kind"] == "clique-reduction" and rec["synthetic"] is True
        assert rec["graph"]["seed"] == inst["seed"]
        assert rec["has_clique"] == inst["has_clique"] and rec["K"] == 3
        assert len(rec["parents"]) == len(rec["node_routes"]) == inst["edges"]


@pytest.mark.parametrize("argv, needle", [
    (["--vertices", "4", "--edge-prob", "0.5", "--r", "5"], "--r"),
    (["--vertices", "4", "--edge-prob", "1.5", "--r", "3"], "--edge-prob"),
    (["--vertices", "4", "--edge-prob", "0.5", "--r", "3", "--count", "0"], "--count"),
    (["--vertices", "12", "--edge-prob", "1", "--r", "6", "--max-subtrees", "1000"],
     "--max-subtrees"),
])
def test_hardness_bad_input_is_one_line_exit_2(capsys, argv, needle):
    assert main(["hardness", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_hardness_write_onto_a_file_is_bad_input(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["hardness", "--vertices", "4", "--edge-prob", "0.5", "--r", "3",
                 "--write", str(f)]) == 2


def test_hardness_disagreement_exits_3(monkeypatch, capsys):
    import simmoe.theory.hardness as hd

    real = hd.has_clique
    monkeypatch.setattr(hd, "has_clique", lambda g, r: not real(g, r))
    assert main(["hardness", "--vertices", "5", "--edge-prob", "0.6", "--r", "3"]) == 3
    assert "self-check failed" in capsys.readouterr().err


def test_bound_on_the_first_requests_equals_bound_on_a_trace_of_them(files, tmp_path, capsys):
    from simmoe.report.experiments import head_requests
    from simmoe.trace.io import write_trace

    trace, tpath, ppath = files
    head = tmp_path / "head.parquet"
    write_trace(head_requests(trace, 2), head)
    assert main(["bound", tpath, "--hardware", ppath, "--requests", "2", "--json", "--quiet"]) == 0
    part = json.loads(capsys.readouterr().out)
    assert main(["bound", str(head), "--hardware", ppath, "--json", "--quiet"]) == 0
    whole = json.loads(capsys.readouterr().out)
    assert part["table5"] == whole["table5"]
    assert part["table5"]["cycles"] < sum(int(n) for n in trace.requests.output_len)
    assert main(["bound", tpath, "--hardware", ppath, "--requests", "0"]) == 2


def test_bound_on_an_ar_only_trace_says_the_table_is_degenerate(tmp_path, capsys):
    from simmoe.trace.io import write_trace

    path = tmp_path / "ar.parquet"
    write_trace(random_trace(1, num_requests=2, pool_nodes=0), path)
    ppath = tmp_path / "p.toml"
    ppath.write_text(PROFILE)
    assert main(["bound", str(path), "--hardware", str(ppath), "--quiet"]) == 0
    assert "Note: AR-only trace: no draft trees" in capsys.readouterr().out
    assert "AR-only trace" in run_json(capsys, "bound", str(path), "--hardware", str(ppath), "--quiet")["note"]
    path2 = tmp_path / "t.parquet"
    write_trace(random_trace(1, num_requests=2, pool_nodes=4), path2)
    assert "note" not in run_json(capsys, "bound", str(path2), "--hardware", str(ppath), "--quiet")


def test_bound_without_hardware_follows_the_trace(tmp_path, capsys):
    from simmoe.trace.io import write_trace

    trace = random_trace(2, num_requests=1, output_len=(3, 4), pool_nodes=4, L=16, N=64, k=8)
    trace.meta["geometry"]["name"] = "OLMoE-1B-7B-0924"
    write_trace(trace, tmp_path / "o.parquet")
    assert main(["bound", str(tmp_path / "o.parquet"), "--quiet", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["hardware"] == "olmoe-1b-7b@a100-pcie-40gb+pcie4-x16"
    assert "using olmoe-1b-7b@a100-pcie-40gb+pcie4-x16" in err
