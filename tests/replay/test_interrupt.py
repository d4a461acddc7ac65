"""Signals and worker processes: every pooled command ends its workers, whoever gets the signal, in one line.

Each signal is sent when the command pauses at a named point
(interrupt_helpers): "worker" is a worker process starting a task, so the
signal lands while workers run, on any machine.  A worker paused there
waits until it is killed: a worker left running shows as a process left
behind, and a command waiting for its workers as a long exit.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time

import pytest
from interrupt_helpers import ROOT, signal_command, signal_in_process

from simmoe.cli import main
from simmoe.replay.workers import fork_available

pytestmark = pytest.mark.skipif(not fork_available(), reason="worker processes are forked")

TRACE = str(ROOT / "traces" / "gsm8k.parquet")
REPLAY = ["replay", TRACE, "--selectors", "ar,eagle3,specfit", "--requests", "2", "--workers", "2", "--no-progress"]
PROMPT_S = 5.0   # measured well under 1 s (benchmarks/bench_interrupt.py); a paused worker not killed waits 60 s


def _pool_threads() -> list[str]:
    """The process pools' threads still running (the interpreter waits for them at exit)."""
    return [t.name for t in threading.enumerate() if type(t).__name__ == "_ExecutorManagerThread" and t.is_alive()]


@pytest.mark.parametrize("sig, status, word", [(signal.SIGINT, 130, "interrupted"),
                                               (signal.SIGTERM, 143, "terminated")])
def test_a_signal_to_the_main_process_alone_ends_the_workers(tmp_path, monkeypatch, capsys, sig, status, word):
    # the setting of a hang once seen: batched, prefetching, a timeline (large results from the workers)
    argv = [*REPLAY, "--batch", "2", "--prefetch", "draft", "--timeline", str(tmp_path / "tl.json")]
    r = signal_in_process(argv, tmp_path, monkeypatch, point="worker", sig=sig)
    assert r["rc"] == status and r["seconds"] < PROMPT_S, r
    assert capsys.readouterr().err == f"simmoe replay: {word}\n"
    assert multiprocessing.active_children() == []          # killed and reaped, not left to the exit
    assert _pool_threads() == []                           # the pool's thread ended: the exit cannot wait on it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ready-worker"]


def test_sigterm_to_the_process_group_is_one_line_143_and_leaves_nothing(tmp_path):
    r = signal_command([*REPLAY, "--timeline", str(tmp_path / "tl.json")], tmp_path, point="worker",
                       sig=signal.SIGTERM, group=True)
    assert r["rc"] == 143 and r["seconds"] < PROMPT_S and not r["left"], r
    assert r["err"] == "simmoe replay: terminated\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ready-worker"]


def test_ctrl_c_twice_from_a_terminal_is_one_line_130(tmp_path):
    def again(proc):              # a second Ctrl-C while the first one is cleaned up
        try:
            os.killpg(proc.pid, signal.SIGINT)
        except ProcessLookupError:
            pass

    r = signal_command(REPLAY, tmp_path, point="worker", group=True, then=again)
    assert r["rc"] == 130 and r["seconds"] < PROMPT_S and not r["left"], r
    assert r["err"] == "simmoe replay: interrupted\n"


def test_workers_die_with_a_main_process_killed_outright(tmp_path):
    r = signal_command(REPLAY, tmp_path, point="worker", sig=signal.SIGKILL)
    assert r["rc"] == -signal.SIGKILL
    assert not r["left"]          # the kernel killed them (PR_SET_PDEATHSIG); they were paused for 60 s


EXITS = """
import os
from simmoe.replay.selectors import Eagle3


class Exits(Eagle3):
    name = "exits"

    def select(self, view):
        os._exit(3)
"""


def test_a_plugin_that_exits_its_worker_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    (tmp_path / "exiting_plugin.py").write_text(EXITS)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "r.json"
    rc = main(["replay", TRACE, "--selectors", "ar,exiting_plugin:Exits", "--requests", "2", "--workers", "2",
               "--no-progress", "--json", str(out)])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err == ("simmoe replay: error: a worker process died (exit code 3) while replaying selector "
                   "exiting_plugin:Exits, cache lru\n")
    assert not out.exists() and multiprocessing.active_children() == []


def _partial_result(ready):
    """Send the first bytes of a 1 MB result and stop: the pool's thread waits for the rest."""
    import struct
    import sys

    frame = sys._getframe()
    while "result_queue" not in frame.f_locals:              # the pool's worker loop, up the stack
        frame = frame.f_back
    os.write(frame.f_locals["result_queue"]._writer.fileno(), struct.pack("!i", 1 << 20) + b"\x80")
    open(ready, "w").close()
    time.sleep(60)


def test_a_worker_killed_while_sending_its_result_does_not_hang_the_exit(tmp_path):
    """The pool's thread, reading a result cut short, ends once the workers are killed (else the
    interpreter waits for it at exit, forever: the hang of a Ctrl-C of large results)."""
    from interrupt_helpers import _wait_for

    from simmoe.interrupt import interrupt_once
    from simmoe.replay.workers import run_pooled

    ready = tmp_path / "sending"
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def interrupt_when_stuck():
        _wait_for(ready, lambda: True)
        end = time.monotonic() + 60
        while not any(f.f_code.co_name == "_recv" for f in _stacks()) and time.monotonic() < end:
            time.sleep(0.005)                             # until the pool's thread is inside the read
        os.kill(os.getpid(), signal.SIGINT)

    helper = threading.Thread(target=interrupt_when_stuck, daemon=True)
    helper.start()
    try:
        with pytest.raises(KeyboardInterrupt), interrupt_once():
            run_pooled(_partial_result, [(str(ready),)], 2, lambda *a: None)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    helper.join()
    assert _pool_threads() == [] and multiprocessing.active_children() == []


def _stacks():
    import sys

    for frame in sys._current_frames().values():
        while frame is not None:
            yield frame
            frame = frame.f_back


@pytest.mark.parametrize("when", ["temp file created", "writing"])
def test_a_signal_while_outputs_are_written_leaves_no_file(tmp_path, monkeypatch, capsys, when):
    import pathlib
    import tempfile

    real_mkstemp, real_write = tempfile.mkstemp, pathlib.Path.write_text

    def mkstemp_then_signal(*a, **k):
        made = real_mkstemp(*a, **k)
        if str(k.get("dir")) == str(outs):
            signal.raise_signal(signal.SIGINT)     # lands right after the output's temp file exists
        return made

    def write_then_signal(self, *a, **k):
        real_write(self, *a, **k)
        if self.parent == outs:
            signal.raise_signal(signal.SIGINT)     # lands once the temp file is written, before the rename

    outs = tmp_path / "outs"
    outs.mkdir()
    argv = ["replay", TRACE, "--selectors", "eagle3", "--requests", "1", "--workers", "1", "--no-progress",
            "--json", str(outs / "r.json"), "--cycles", str(outs / "c.parquet")]
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    if when == "temp file created":
        monkeypatch.setattr(tempfile, "mkstemp", mkstemp_then_signal)
    else:
        monkeypatch.setattr(pathlib.Path, "write_text", write_then_signal)
    try:
        rc = main(argv)
    finally:
        monkeypatch.undo()
        for s, h in previous.items():
            signal.signal(s, h)
    assert rc == 130 and capsys.readouterr().err == "simmoe replay: interrupted\n"
    assert list(outs.iterdir()) == []
