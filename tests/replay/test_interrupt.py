"""Ctrl-C of `simmoe replay` with worker processes: prompt, one line, exit 130, no worker left behind.

Repeated SIGINTs at random (seeded) times, sent to the whole process group
as a terminal does; the run is several seconds long, so every signal lands
while the workers replay.
"""

from __future__ import annotations

import pytest
from interrupt_helpers import ROOT, interrupt

from simmoe.replay.workers import fork_available

pytestmark = pytest.mark.skipif(not fork_available(), reason="worker processes are forked")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_ctrl_c_of_a_pooled_replay(tmp_path, seed):
    argv = ["replay", str(ROOT / "traces" / "gsm8k.parquet"), "--selectors", "all", "--requests", "3",
            "--workers", "2", "--timeline", str(tmp_path / "tl.json")]
    r = interrupt(argv, seed=seed, after=(0.5, 2.0))
    assert r["rc"] == 130, r
    # "simmoe: interrupted" while the command line still loads
    assert r["err"].strip().splitlines() in (["simmoe replay: interrupted"], ["simmoe: interrupted"]), r["err"]
    # from the first signal to the exit: <= 1 s measured (benchmarks/bench_interrupt.py); 1.5 s leaves room for
    # a loaded machine, far from the 7-9 s a pool shutdown waited for its running tasks
    assert r["seconds"] <= 1.5, r
    assert not r["leftover"]
    assert not (tmp_path / "tl.json").exists()
