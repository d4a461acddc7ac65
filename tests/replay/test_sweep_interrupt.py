"""Signals to `simmoe sweep`: one line, exit 130 or 143, the finished rows kept for a resume, no worker left.

Signals are sent at named pause points (interrupt_helpers): "sweep-row",
once the AR baselines' task is in (rows with a known speedup exist), and
"worker", while a worker runs a task.
"""

from __future__ import annotations

import multiprocessing
import signal

import pandas as pd
import pytest
from interrupt_helpers import ROOT, signal_command, signal_in_process

from simmoe.cli import main
from simmoe.replay.workers import fork_available

pytestmark = pytest.mark.skipif(not fork_available(), reason="worker processes are forked")

TRACE = str(ROOT / "traces" / "gsm8k.parquet")
ARGS = ["--selectors", "ar,eagle3,specfit", "--slots", "0,48", "--requests", "1", "--workers", "2", "--quiet",
        "--no-progress"]
TOTAL = 6          # 3 selectors x 2 slot counts


def test_ctrl_c_keeps_finished_rows_and_a_rerun_completes_the_same_table(tmp_path, capsys):
    out = tmp_path / "s.csv"
    r = signal_command(["sweep", TRACE, "-o", str(out), *ARGS], tmp_path, point="sweep-row", group=True)
    assert r["rc"] == 130 and r["seconds"] < 5.0 and not r["left"], r
    kept = len(pd.read_csv(out))
    # AR's rows at least; the others finished too only if both searches (started with and after AR)
    # finished before AR's cheap task did
    assert 0 < kept <= TOTAL
    assert r["err"] == (f"simmoe sweep: interrupted; {kept} of {TOTAL} configurations kept in {out}: "
                        "the same command runs the rest\n")
    assert main(["sweep", TRACE, "-o", str(out), *ARGS]) == 0          # the rerun runs the rest
    assert f"{kept} of {TOTAL} configurations already in" in capsys.readouterr().err
    resumed = pd.read_csv(out)
    assert main(["sweep", TRACE, "-o", str(tmp_path / "whole.csv"), *ARGS]) == 0
    whole = pd.read_csv(tmp_path / "whole.csv")
    keys = ["selector", "slots", "cache"]
    a, b = resumed.sort_values(keys).reset_index(drop=True), whole.sort_values(keys).reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b)        # the profile's selector time and fixed seeds: reproducible


def test_sigterm_to_the_main_process_alone_is_143_and_keeps_the_rows(tmp_path, monkeypatch, capsys):
    out = tmp_path / "s.csv"
    r = signal_in_process(["sweep", TRACE, "-o", str(out), *ARGS], tmp_path, monkeypatch, point="sweep-row",
                          sig=signal.SIGTERM)
    assert r["rc"] == 143 and r["seconds"] < 5.0, r
    kept = len(pd.read_csv(out))
    assert capsys.readouterr().err == (f"simmoe sweep: terminated; {kept} of {TOTAL} configurations kept in "
                                       f"{out}: the same command runs the rest\n")
    assert multiprocessing.active_children() == []


def test_sigterm_while_workers_run_leaves_no_worker(tmp_path):
    out = tmp_path / "s.csv"
    r = signal_command(["sweep", TRACE, "-o", str(out), *ARGS], tmp_path, point="worker", sig=signal.SIGTERM)
    assert r["rc"] == 143 and r["seconds"] < 5.0 and not r["left"], r
    assert r["err"] == f"simmoe sweep: terminated; 0 of {TOTAL} configurations finished, nothing written\n"
    assert not out.exists()


EXITS = """
import os
from simmoe.replay.selectors import Eagle3


class Exits(Eagle3):
    name = "exits"

    def select(self, view):
        os._exit(5)
"""


def test_a_plugin_that_exits_its_worker_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    (tmp_path / "exiting_sweep_plugin.py").write_text(EXITS)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "s.csv"
    rc = main(["sweep", TRACE, "-o", str(out), "--selectors", "exiting_sweep_plugin:Exits", "--slots", "0",
               "--requests", "2", "--workers", "2", "--quiet", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith("simmoe sweep: error: a worker process died (exit code 5) while replaying "
                          "gsm8k.parquet: selector exiting_sweep_plugin:Exits") and err.count("\n") == 1, err
    assert multiprocessing.active_children() == []
