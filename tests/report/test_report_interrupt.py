"""Signals to `simmoe report`: prompt, one line, exit 130 or 143, the output folder untouched, no worker left.

The signal goes to the main process alone when a worker starts a task (the
"worker" pause point of interrupt_helpers), so it lands while workers run.
"""

from __future__ import annotations

import signal

import pytest
from interrupt_helpers import ROOT, signal_command

from simmoe.replay.workers import fork_available

pytestmark = pytest.mark.skipif(not fork_available(), reason="worker processes are forked")


@pytest.mark.parametrize("sig, line", [(signal.SIGINT, "simmoe report: interrupted"),
                                       (signal.SIGTERM, "simmoe report: terminated")])
def test_a_signal_to_a_quick_report(tmp_path, sig, line):
    out = tmp_path / "rep"
    out.mkdir()
    (out / "index.md").write_text("the previous report\n")
    argv = ["report", "--quick", "--out", str(out), "--workers", "2", "--quiet",
            "--traces", str(ROOT / "traces" / "gsm8k.parquet"), str(ROOT / "traces" / "cnndm.parquet")]
    r = signal_command(argv, tmp_path, point="worker", sig=sig)
    assert r["rc"] == 128 + sig and r["seconds"] < 5.0 and not r["left"], r
    assert r["err"].splitlines() == [line], r["err"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ready-worker", "rep"]     # no staging folder left
    assert [p.name for p in out.iterdir()] == ["index.md"]
    assert (out / "index.md").read_text() == "the previous report\n"
