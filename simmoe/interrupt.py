"""Ctrl-C for the command lines: one interruption, acted on promptly, cleaned up without a second.

Within :func:`interrupt_once` the first SIGINT raises ``KeyboardInterrupt``.
Code that catches it to clean up (killing worker processes, saving the rows
a sweep finished) calls :func:`acknowledge` first; from then on SIGINT is
ignored, so a repeated Ctrl-C cannot cut the cleanup short (leaving workers
running, and the interpreter waiting for them at exit) or print a second
traceback.  The command then prints one line and exits with 130 (128 + SIGINT).

Some libraries swallow a ``KeyboardInterrupt`` raised while they run Python
code (pyarrow imports pandas lazily and drops any error of that import), so
an interruption that is not acknowledged within :data:`RETRY_S` seconds is
raised again in the main thread (``_thread.interrupt_main``), and
:func:`checkpoint` raises it in the loops that wait for worker processes.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time

RETRY_S = 0.3   # an interruption not acted on within this many seconds is raised again

_STATE: dict = {"active": False, "at": None, "acked": False}


def requested() -> bool:
    """Whether Ctrl-C was pressed inside the running :func:`interrupt_once` block."""
    return _STATE["at"] is not None


def acknowledge() -> None:
    """The interruption reached code that acts on it: later Ctrl-Cs are ignored, none is raised again."""
    _STATE["acked"] = True


def checkpoint() -> None:
    """Raise ``KeyboardInterrupt`` when Ctrl-C was pressed and nothing has acted on it yet."""
    if _STATE["at"] is not None and not _STATE["acked"]:
        raise KeyboardInterrupt


def _handler(signum, frame):
    now, at = time.monotonic(), _STATE["at"]
    if at is not None and (_STATE["acked"] or now - at < RETRY_S):
        return                  # a repeated Ctrl-C while the first one unwinds or is cleaned up
    first = at is None
    _STATE["at"] = now
    if first:
        threading.Thread(target=_watch, name="simmoe-interrupt", daemon=True).start()
    raise KeyboardInterrupt


def _watch() -> None:
    """Raise the interruption again in the main thread until something acts on it."""
    import _thread

    while True:
        time.sleep(RETRY_S)
        if not _STATE["active"] or _STATE["acked"]:
            return
        _thread.interrupt_main()


@contextlib.contextmanager
def interrupt_once():
    """Within the block, SIGINT interrupts as the module docstring says.

    When the block ends without an interruption the previous handler comes
    back; after one, SIGINT stays ignored (the process is on its way out: a
    Ctrl-C between the block's end and the exit would otherwise print a
    traceback).
    """
    if threading.current_thread() is not threading.main_thread() or _STATE["active"]:
        yield
        return
    previous = signal.signal(signal.SIGINT, _handler)
    _STATE.update(active=True, at=None, acked=False)
    try:
        yield
    finally:
        fired = _STATE["at"] is not None
        _STATE.update(active=False, at=None, acked=False)
        signal.signal(signal.SIGINT, signal.SIG_IGN if fired else previous)
