"""Prompts parsing and the small commands (info, bandwidth) and their errors."""

from __future__ import annotations

import json

import pytest

from hwprobe.cli import main
from hwprobe.prompts import read_prompts

pytestmark = pytest.mark.torch


def test_reads_spec_bench_categories(prompts_file):
    math = read_prompts(prompts_file, "math_reasoning")
    assert [p.question_id for p in math] == ["401", "402", "403"] and math[0].dataset == "gsm8k"
    assert [p.question_id for p in read_prompts(prompts_file, "math_reasoning", limit=1, offset=1)] == ["402"]
    assert read_prompts(prompts_file, "summarization")[0].dataset == "cnndm"


@pytest.mark.parametrize("line,problem", [
    ("[1, 2]", "not a JSON object"),
    ('{"question_id": 1, "category": "x", "turns": []}', "non-empty list"),
    ('{"question_id": 401, "category": "x", "turns": ["a"]}', "repeated"),
    ('{"category": "x", "turns": ["a"]}', "missing question_id"),
])
def test_malformed_lines_name_their_line(tmp_path, prompts_file, line, problem):
    from hwprobe.cli import HwprobeError

    f = tmp_path / "p.jsonl"
    f.write_text(prompts_file.read_text() + line + "\n")
    with pytest.raises(HwprobeError, match=f"line 5: .*{problem}"):
        read_prompts(f)


def test_unknown_category(prompts_file):
    from hwprobe.cli import HwprobeError

    with pytest.raises(HwprobeError, match="categories: math_reasoning, summarization"):
        read_prompts(prompts_file, "poetry")


def test_info_and_bandwidth(tmp_path, capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "torch" in out and "transformers" in out and "link" in out
    j = tmp_path / "bw.json"
    assert main(["bandwidth", "--expert-bytes", "4096", "--repeats", "2", "--max-inflight", "2",
                 "--json", str(j)]) == 0
    out = capsys.readouterr().out
    rows = json.loads(j.read_text())["rows"]
    assert len(rows) == 5 * 2 and all(r["gbps"] > 0 for r in rows)
    if "no CUDA device" in out:
        assert all(r["kind"].startswith("host memcpy stand-in") for r in rows)


def test_cli_errors_are_one_line(capsys):
    assert main(["bandwidth", "--repeats", "0"]) == 2
    assert main(["info", "--device", "tpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("hwprobe ") and "error:" in e for e in err)


@pytest.mark.slow
def test_selftest_cpu_version(capsys, prompts_file):
    rc = main(["selftest", "--device", "cpu", "--prompts", str(prompts_file)])
    out = capsys.readouterr().out
    assert "reduced CPU version" in out
    assert rc == 0 and "selftest PASSED: 6/6" in out, out     # which check failed, if one did
    assert "bit-identical to resident" in out and "copies started too far ahead: 0" in out
    assert "deleted now (--keep DIR keeps them)" in out
    assert "wrote " not in out                     # no "wrote FILE" for files deleted at exit


@pytest.mark.slow
def test_selftest_of_another_architecture_on_cpu(capsys, prompts_file, tmp_path):
    rc = main(["selftest", "--device", "cpu", "--model", "gpt-oss-20b", "--prompts", str(prompts_file),
               "--keep", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0 and "selftest of tiny-gpt_oss" in out and f"files kept in {tmp_path}" in out
    assert (tmp_path / "selftest.parquet").is_file() and (tmp_path / "live-bfloat16.jsonl").is_file()


@pytest.mark.parametrize("argv,message", [
    (["--layers", "0"], "--layers must be >= 1"),
    (["--model", "llama"], "unknown --model 'llama'"),
    (["--model", "qwen3_next"], "cannot verify draft trees"),
    (["--model", "mixtral-8x7b", "--layers", "33"], "--layers must be in 1..32"),
    (["--prompts", "MALFORMED"], "malformed lines: line 1: not JSON"),
])
def test_selftest_bad_arguments_exit_2(tmp_path, capsys, argv, message):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    argv = [str(bad) if a == "MALFORMED" else a for a in argv]
    rc = main(["selftest", "--device", "cpu", *argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and message in err and len(err.splitlines()) == 1, err


def test_selftest_a_failing_step_is_reported_not_raised(capsys, prompts_file, monkeypatch):
    """Any exception inside a step (here out of memory) fails that check, the others still run: exit 3."""
    import torch

    import hwprobe.selfcheck as selfcheck
    from hwprobe.copysweep import CopyRow

    def oom(*a, **kw):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")
    monkeypatch.setattr(selfcheck, "offload_matrix", oom)
    monkeypatch.setattr(selfcheck, "live_dtypes", lambda *a, **kw: (_ for _ in ()).throw(RuntimeError("boom")))
    import hwprobe.copysweep as copysweep
    monkeypatch.setattr(copysweep, "sweep", lambda *a, **kw: [CopyRow("host memcpy stand-in (no device)", 1, False,
                                                                     1, 1.0, 1.0)])
    import hwprobe.cli as cli
    real_main = cli.main
    monkeypatch.setattr(cli, "main", lambda argv: 0 if argv[0] in ("record", "calibrate") and False else 7)
    rc = real_main(["selftest", "--device", "cpu", "--prompts", str(prompts_file)])
    out = capsys.readouterr().out
    assert rc == 3
    assert "FAIL offload equality: out of device memory" in out and "FAIL live bf16 vs fp32: RuntimeError: boom" in out
    assert "FAIL calibrate: calibrate exited 7" in out and "selftest FAILED: 2/6" in out


@pytest.mark.parametrize("argv, message", [
    (["bandwidth", "--json", "{d}"], "--json {d}: is a folder; give a file name"),
    (["bandwidth", "--json", "{d}/no/b.json"], "folder {d}/no does not exist"),
    (["calibrate", "--config", "tiny-random", "--prompts", "{p}", "--out", "{d}/c.toml", "--rows", "{d}"],
     "--rows {d}: is a folder"),
    (["calibrate", "--config", "tiny-random", "--prompts", "{p}", "--out", "{d}/c.toml", "--rows", "{p}"],
     "is an input of this command"),
    (["calibrate", "--config", "tiny-random", "--prompts", "{p}", "--out", "{d}/sub"],
     "--out must name a .toml file"),
    (["live", "--config", "tiny-random", "--selector", "eagle3", "--prompts", "{p}", "--out", "{d}/l.jsonl",
      "--timeline", "{d}/no/t.json"], "--timeline {d}/no/t.json: folder {d}/no does not exist"),
    (["live", "--config", "tiny-random", "--selector", "eagle3", "--prompts", "{p}", "--out", "{d}/same",
      "--timeline", "{d}/same"], "--out and --timeline both name"),
    (["record", "--config", "tiny-random", "--prompts", "{p}", "--out", "{p}"], "is an input of this command"),
    (["selftest", "--device", "cpu", "--keep", "{p}"], "--keep {p}: exists and is not a folder"),
    (["selftest", "--device", "cpu", "--keep", "{d}/no/keep"], "folder {d}/no does not exist"),
])
def test_outputs_are_checked_before_any_work(tmp_path, capsys, prompts_file, monkeypatch, argv, message):
    """A bad output path is one line, exit 2, before any probe, sweep or model load (they would raise here)."""
    import hwprobe.copysweep as copysweep
    import hwprobe.session as session

    def no_work(*a, **k):
        raise AssertionError("work started before the outputs were checked")
    monkeypatch.setattr(copysweep, "sweep", no_work)
    monkeypatch.setattr(session, "build", no_work)
    (tmp_path / "sub").mkdir()
    argv = [a.format(d=tmp_path, p=prompts_file) for a in argv]
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and message.format(d=tmp_path, p=prompts_file) in err and len(err.splitlines()) == 1, err
    assert "Traceback" not in err
