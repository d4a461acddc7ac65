"""`simmoe synth` on the command line: output file, summary, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simmoe.cli import main
from simmoe.synth import synth_preset

ROOT = Path(__file__).resolve().parents[2]


def test_writes_a_readable_synthetic_trace(tmp_path, capsys):
    from simmoe.trace.io import read_trace

    out = tmp_path / "g.parquet"
    assert main(["synth", "--preset", "gsm8k", "--requests", "1", "--seed", "2", "--out", str(out),
                 "--json", "-", "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["synthetic"] is True and summary["provenance"]["kind"] == "synthetic"
    assert summary["requests"] == 1 and summary["num_requests_full"] == 80
    back = read_trace(out)
    ref = synth_preset("gsm8k", seed=2, num_requests=1)
    assert back.is_synthetic and back.meta["num_requests"] == 1
    for f in ("root_routes", "node_routes", "node_p", "node_agree", "node_ptr"):
        assert np.array_equal(getattr(back, f), getattr(ref, f))
    assert list(tmp_path.iterdir()) == [out]          # no temporary file left behind


def test_overrides_are_recorded(tmp_path, capsys):
    out = tmp_path / "c.parquet"
    summary = tmp_path / "c.json"
    assert main(["synth", "--preset", "cnndm", "--requests", "1", "--easy-share", "0.9",
                 "--depth", "3", "--out", str(out), "--json", str(summary), "--no-progress"]) == 0
    assert json.loads(summary.read_text())["provenance"]["kind"] == "synthetic"
    from simmoe.trace.io import read_trace

    tr = read_trace(out)
    assert any("modified by hand" in s and "easy_share=0.9" in s
               for s in tr.meta["provenance"]["fitted_to"])
    assert tr.pool_shape.depth == 3 and int(tr.node_level.max()) <= 3


@pytest.mark.parametrize("argv, needle", [
    (["synth"], "--preset is required"),
    (["synth", "--preset", "gsm8k"], "nothing to write"),
    (["synth", "--preset", "gsm8k", "--out", "x.csv"], ".parquet"),
    (["synth", "--preset", "gsm8k", "--requests", "0", "--out", "x.parquet"], "--requests"),
    (["synth", "--preset", "gsm8k", "--requests", "81", "--out", "x.parquet"], "only 80"),
    (["synth", "--preset", "gsm8k", "--locality", "1.5", "--out", "x.parquet"], "locality"),
    (["synth", "--preset", "gsm8k", "--max-nodes", "0", "--out", "x.parquet"], "pool shape"),
    (["synth", "--preset", "gsm8k", "--out", "/no/such/dir/x.parquet"], "does not exist"),
])
def test_bad_input_is_one_line_exit_2(argv, needle, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv + ["--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_bad_choice_from_the_shell_is_one_line():
    out = subprocess.run([sys.executable, "-m", "simmoe", "synth", "--preset", "nope"],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
