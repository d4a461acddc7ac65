"""Ctrl-C of `simmoe report`: prompt, one line, exit 130, the output folder untouched."""

from __future__ import annotations

import pytest
from interrupt_helpers import ROOT, interrupt

from simmoe.replay.workers import fork_available

pytestmark = pytest.mark.skipif(not fork_available(), reason="worker processes are forked")


@pytest.mark.parametrize("seed", [1, 2])
def test_ctrl_c_of_a_report(tmp_path, seed):
    out = tmp_path / "rep"
    out.mkdir()
    (out / "index.md").write_text("the previous report\n")
    argv = ["report", "--quick", "--out", str(out), "--workers", "2", "--quiet",
            "--traces", str(ROOT / "traces" / "gsm8k.parquet"), str(ROOT / "traces" / "cnndm.parquet")]
    r = interrupt(argv, seed=seed, after=(0.2, 3.0), ready="workers")
    assert r["rc"] == 130 and r["seconds"] <= 1.5 and not r["leftover"], r
    assert r["err"].strip().splitlines() == ["simmoe report: interrupted"], r["err"]
    assert [p.name for p in tmp_path.iterdir()] == ["rep"]                  # no staging folder left
    assert [p.name for p in out.iterdir()] == ["index.md"]
    assert (out / "index.md").read_text() == "the previous report\n"
