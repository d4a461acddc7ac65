"""Signals at deterministic points: run a command, wait until it pauses at a named point, signal it.

The command pauses through :func:`simmoe.interrupt.pause_point` (the
``SIMMOE_TEST_PAUSE`` variable): at the point it creates a file and waits,
so the signal always lands there, however fast or loaded the machine.
``signal_command`` runs ``simmoe`` in a new process group (as the ``simmoe``
script does: ``sys.exit(main())``); ``signal_in_process`` runs
:func:`simmoe.cli.main` in this process and signals this process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from simmoe.interrupt import PAUSE_ENV

ROOT = Path(__file__).resolve().parents[1]
READY_S = 120.0     # how long a command may take to reach its pause point (a loaded machine, a cold start)
ENTRY = "import sys; from simmoe.cli import main; sys.exit(main())"   # what the `simmoe` script runs


def _wait_for(path: Path, alive) -> None:
    end = time.monotonic() + READY_S
    while not path.exists():
        if not alive() or time.monotonic() > end:
            raise AssertionError(f"the command never reached its pause point ({path.name})")
        time.sleep(0.01)


def signal_command(argv, tmp_path, *, point: str, sig=signal.SIGINT, group: bool = False, then=None) -> dict:
    """Run ``simmoe ARGV``; when it pauses at ``point``, send ``sig`` to it (``group``: to its whole group).

    ``then(proc)`` runs right after the signal (a second signal, say).
    Returns the exit status, stderr, the seconds from the signal to the exit,
    and the processes of its group still alive once it exited (its workers:
    each is given up to 10 s to go, then killed).
    """
    ready = tmp_path / f"ready-{point}"
    env = dict(os.environ, PYTHONPATH=str(ROOT), **{PAUSE_ENV: f"{point}:{ready}"})
    proc = subprocess.Popen([sys.executable, "-c", ENTRY, *argv], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        _wait_for(ready, lambda: proc.poll() is None)
        sent = time.monotonic()
        (os.killpg if group else os.kill)(proc.pid, sig)
        if then is not None:
            then(proc)
        err = proc.communicate(timeout=60)[1]     # one line expected: the pipe cannot fill
        seconds = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    return {"rc": proc.returncode, "err": err, "seconds": seconds, "left": group_left(proc.pid)}


def group_left(pgid: int, within: float = 10.0) -> bool:
    """Whether a process of group ``pgid`` is still alive ``within`` seconds from now (it is then killed)."""
    end = time.monotonic() + within
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        if time.monotonic() > end:
            os.killpg(pgid, signal.SIGKILL)
            return True
        time.sleep(0.02)


def signal_in_process(argv, tmp_path, monkeypatch, *, point: str, sig=signal.SIGINT) -> dict:
    """:func:`simmoe.cli.main` ``(argv)`` here; when it pauses at ``point``, send ``sig`` to this process.

    Returns the exit status and the seconds from the signal to main's return.
    The signal handlers are put back afterwards (after an interruption
    :func:`simmoe.interrupt.interrupt_once` leaves both signals ignored).
    """
    from simmoe.cli import main

    assert threading.current_thread() is threading.main_thread()   # where simmoe handles signals
    ready = tmp_path / f"ready-{point}"
    monkeypatch.setenv(PAUSE_ENV, f"{point}:{ready}")
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    sent: list[float] = []
    running = threading.Event()
    running.set()

    def signaller():
        try:
            _wait_for(ready, running.is_set)
        except AssertionError:
            return
        sent.append(time.monotonic())
        os.kill(os.getpid(), sig)

    thread = threading.Thread(target=signaller, daemon=True)
    thread.start()
    try:
        rc = main(list(argv))
    finally:
        returned = time.monotonic()
        running.clear()
        thread.join()
        for s, h in previous.items():
            signal.signal(s, h)
    assert sent, "the command never reached its pause point"
    return {"rc": rc, "seconds": returned - sent[0]}
