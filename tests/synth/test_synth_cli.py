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


def test_the_drafter_shape_flags_change_the_pools(tmp_path):
    """--runner-up-share moves draft mass to the siblings; every override flag names a SynthParams field."""
    from simmoe.cli.synth import OVERRIDES
    from simmoe.synth.params import SynthParams
    from simmoe.trace.io import read_trace

    assert {f for f, _, _ in OVERRIDES.values()} <= set(SynthParams.__dataclass_fields__)
    q1 = {}
    for share in ("0.2", "0.8"):
        out = tmp_path / f"q{share}.parquet"
        assert main(["synth", "--preset", "qa", "--requests", "2", "--runner-up-share", share,
                     "--out", str(out), "--no-progress"]) == 0
        tr = read_trace(out)
        assert any(f"runner_up_share={share}" in s for s in tr.meta["provenance"]["fitted_to"])
        q1[share] = float(np.mean(np.asarray(tr.node_q)[np.asarray(tr.node_level) == 1]))
    assert q1["0.8"] > q1["0.2"]      # the same top-1 draws, siblings take more of the rest


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


def test_sigterm_while_writing_is_one_line_exit_143_and_leaves_no_temp(tmp_path, capsys, monkeypatch):
    import os
    import signal

    import pyarrow.parquet as pq

    out = tmp_path / "g.parquet"
    real_write = pq.write_table
    seen = []

    def write_then_terminated(table, where, **kw):
        real_write(table, where, **kw)               # the temp file is complete on disk ...
        seen.append(Path(where).name)
        os.kill(os.getpid(), signal.SIGTERM)         # ... when SIGTERM arrives, before the rename

    monkeypatch.setattr(pq, "write_table", write_then_terminated)
    before = signal.getsignal(signal.SIGTERM)
    assert main(["synth", "--preset", "gsm8k", "--requests", "1", "--out", str(out), "--no-progress"]) == 143
    err = capsys.readouterr().err
    assert err == "simmoe synth: terminated\n"
    assert seen and seen[0].startswith(".g.parquet.") and seen[0].endswith(".tmp")
    assert list(tmp_path.iterdir()) == []                     # neither the temp nor a half output
    assert signal.getsignal(signal.SIGTERM) == before         # the handler is put back


def test_stale_temp_of_a_killed_run_is_removed_by_the_next_run(tmp_path, capsys):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    stale = tmp_path / f".g.parquet.{dead}.k2x9q0ab.tmp"
    stale.write_bytes(b"PAR1 half a trace")
    out = tmp_path / "g.parquet"
    assert main(["synth", "--preset", "gsm8k", "--requests", "1", "--out", str(out), "--no-progress"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.parquet"]


@pytest.mark.parametrize("flag", ["--out", "--json"])
def test_a_folder_as_output_is_one_line(tmp_path, capsys, flag):
    folder = tmp_path / "x.parquet"
    folder.mkdir()
    argv = ["synth", "--preset", "gsm8k", "--requests", "1", "--no-progress", flag, str(folder)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{flag} {folder}: is a folder" in err
    assert list(folder.iterdir()) == []
