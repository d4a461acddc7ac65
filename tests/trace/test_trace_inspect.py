"""`simmoe inspect`: tables, JSON, the synthetic label, and one-line errors."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from tracefile_helpers import clone, write_unchecked

from simmoe.cli import main
from simmoe.cli.inspect import render
from simmoe.trace.io import write_trace
from simmoe.trace.stats import trace_statistics

ROOT = Path(__file__).resolve().parents[2]


def test_json_matches_statistics(tmp_path, small_trace, capsys):
    path = tmp_path / "t.parquet"
    write_trace(small_trace, path)
    assert main(["inspect", str(path), "--json", "--bins", "5"]) == 0
    got = json.loads(capsys.readouterr().out)
    want = trace_statistics(small_trace, bins=5)
    assert got.pop("file") == str(path)
    assert got == json.loads(json.dumps(want))
    assert got["synthetic"] is True and len(got["calibration"]["bins"]) == 5


def rendered(stats) -> str:
    buf = io.StringIO()
    render(stats, Console(file=buf, width=120, color_system=None), per_layer=True)
    return buf.getvalue()


def test_tables_say_synthetic_prominently(small_trace):
    text = rendered(trace_statistics(small_trace))
    assert text.lstrip().splitlines()[0].count("─") > 10  # a panel opens the output
    assert "SYNTHETIC TRACE" in text.split("Trace")[0]
    for heading in ("Acceptance by level", "Calibration", "Expert reuse", "popularity", "tree size t"):
        assert heading in text


def test_imported_trace_is_not_labelled_synthetic(ar_trace):
    t = clone(ar_trace)
    t.meta["provenance"] = {"kind": "imported", "source": "log.jsonl"}
    text = rendered(trace_statistics(t))
    assert "SYNTHETIC" not in text
    assert "autoregressive-only" in text and "window of t committed tokens" in text


@pytest.mark.parametrize("args", [["--bins", "0"], []])
def test_errors_are_one_line_exit_2(tmp_path, small_trace, args):
    bad = clone(small_trace)
    bad.node_level[2] += 1
    path = tmp_path / "bad.parquet"
    write_unchecked(bad, path)
    res = subprocess.run([sys.executable, "-m", "simmoe", "inspect", str(path), *args],
                         capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert ("--bins" in res.stderr) if args else ("field 'node_level'" in res.stderr)


@pytest.mark.parametrize("bins, ok", [(10_000, True), (10_001, False), (100_000_000, False), (0, False)])
def test_bins_are_bounded(tmp_path, small_trace, capsys, bins, ok):
    path = tmp_path / "t.parquet"
    write_trace(small_trace, path)
    assert main(["inspect", str(path), "--json", "--bins", str(bins)]) == (0 if ok else 2)
    captured = capsys.readouterr()
    if ok:
        assert len(json.loads(captured.out)["calibration"]["bins"]) == bins
    else:
        assert captured.err.count("\n") == 1 and "--bins must be between 1 and 10,000" in captured.err


def test_a_folder_is_named_as_a_folder(tmp_path, capsys):
    assert main(["inspect", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a folder" in err and "no such file" not in err


def test_progress_on_a_terminal_only(tmp_path, small_trace, capsys, monkeypatch):
    path = tmp_path / "t.parquet"
    write_trace(small_trace, path)
    # stderr is not a terminal: nothing but the JSON on stdout, nothing on stderr
    assert main(["inspect", str(path), "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and json.loads(captured.out)["file"] == str(path)
    # a terminal: the progress display names the stages on stderr; stdout is unchanged
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["inspect", str(path), "--json"]) == 0
    shown = capsys.readouterr()
    assert "inspect:" in shown.err and json.loads(shown.out) == json.loads(captured.out)
    assert main(["inspect", str(path), "--json", "--no-progress"]) == 0
    assert capsys.readouterr().err == ""


def test_each_provenance_fact_is_shown_once(capsys):
    """A synthetic trace's note repeats its fitted figures: inspect prints them once."""
    assert main(["inspect", str(ROOT / "traces" / "gsm8k.parquet"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    flat = " ".join(out.replace("│", " ").split())
    assert flat.count("EAGLE-3 committed tokens per cycle 4.35") == 1
    assert flat.count("not recorded on hardware") == 1
    assert not any(line != line.rstrip() for line in out.splitlines())     # no trailing blanks
