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
    assert rc == 0 and "selftest PASSED: 4/4" in out
