"""Ctrl-C at random times: run a command in its own process group and interrupt it, repeatedly.

The signals go to the whole group, as a terminal's Ctrl-C does (the
command's worker processes get them too).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def interrupt(argv, *, seed: int, after=(0.8, 2.0), signals=(1, 3), cwd=None, ready=None) -> dict:
    """Run ``python -m simmoe ARGV``; after a random delay send 1-3 SIGINTs at random gaps (0-0.2 s).

    ``ready``: "workers" (the command has started worker processes) or a
    file whose appearance starts the delay; else the delay counts from the start.  Returns the exit
    status, stderr, the seconds from the first signal to the exit, and
    whether any process of the group outlived the command.  (stderr is read after the exit: a
    command that writes more than a pipe holds before it exits would block; these write one line.)
    """
    rng = random.Random(seed)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "simmoe", *argv], cwd=cwd or ROOT, env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    ended: list[float] = []
    waiter = threading.Thread(target=lambda: (proc.wait(), ended.append(time.monotonic())), daemon=True)
    waiter.start()
    t0 = time.monotonic()
    while ready is not None and not _ready(ready, proc.pid) and proc.poll() is None and time.monotonic() - t0 < 60:
        time.sleep(0.02)
    time.sleep(rng.uniform(*after))
    first = time.monotonic()
    for _ in range(rng.randint(*signals)):
        try:
            os.killpg(proc.pid, signal.SIGINT)
        except ProcessLookupError:
            break
        time.sleep(rng.uniform(0.0, 0.2))
    waiter.join(20)
    if not ended:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"rc": None, "err": "HANG", "seconds": float("inf"), "leftover": True}
    err = proc.stderr.read()
    proc.stderr.close()
    seconds = ended[0] - first
    time.sleep(0.2)
    try:
        os.killpg(proc.pid, 0)       # a worker of the command still alive in its group
        leftover = True
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        leftover = False
    return {"rc": proc.returncode, "err": err, "seconds": seconds, "leftover": leftover}


def _ready(ready, pid: int) -> bool:
    if ready == "workers":
        return bool(_children(pid))
    return Path(ready).exists()


def _children(pid: int) -> list[int]:
    """Child process ids (Linux /proc)."""
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out
