"""Ctrl-C of `simmoe sweep`: prompt, one line, exit 130, the finished rows kept for a resume."""

from __future__ import annotations

import pandas as pd
import pytest
from interrupt_helpers import ROOT, interrupt

from simmoe.cli import main
from simmoe.replay.workers import fork_available

pytestmark = pytest.mark.skipif(not fork_available(), reason="worker processes are forked")

ARGS = ["--selectors", "all", "--slots", "0,12,48", "--requests", "3", "--workers", "2", "--quiet"]


@pytest.mark.slow
def test_ctrl_c_keeps_finished_rows_and_a_rerun_completes_the_same_table(tmp_path, capsys):
    trace = str(ROOT / "traces" / "gsm8k.parquet")
    out = tmp_path / "s.csv"
    r = interrupt(["sweep", trace, "-o", str(out), *ARGS], seed=1, after=(1.0, 2.0), ready="workers")
    assert r["rc"] == 130 and r["seconds"] <= 1.5 and not r["leftover"], r
    lines = r["err"].strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("simmoe sweep: interrupted; "), lines
    kept = len(pd.read_csv(out))               # AR's tasks run first: some rows are done within a second
    assert 0 < kept < 30 and f"{kept} of 30 configurations kept in {out}" in lines[0]
    assert main(["sweep", trace, "-o", str(out), *ARGS]) == 0          # the rerun runs the rest
    assert f"{kept} of 30 configurations already in" in capsys.readouterr().err
    resumed = pd.read_csv(out)
    assert main(["sweep", trace, "-o", str(tmp_path / "whole.csv"), *ARGS]) == 0
    whole = pd.read_csv(tmp_path / "whole.csv")
    keys = ["selector", "slots", "cache"]
    a, b = resumed.sort_values(keys).reset_index(drop=True), whole.sort_values(keys).reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b)        # the profile's selector time and fixed seeds: reproducible
