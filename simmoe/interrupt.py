"""Ctrl-C and SIGTERM for the command lines: one interruption, acted on promptly, cleaned up without a second.

Within :func:`interrupt_once` the first SIGINT raises ``KeyboardInterrupt``
and the first SIGTERM raises :class:`Terminated` (a ``KeyboardInterrupt``,
so every cleanup that handles Ctrl-C handles both).  Code that catches it to
clean up (killing worker processes, saving the rows a sweep finished) calls
:func:`acknowledge` first; from then on both signals are ignored, so a
repeated one cannot cut the cleanup short (leaving workers running, and the
interpreter waiting for them at exit) or print a second traceback.  The
command then prints one line and exits with 128 + the signal's number (130
for SIGINT, 143 for SIGTERM): :func:`exit_status`.

Within a :func:`deferred` block a signal is only noted, and raised at the
block's end or at a :func:`checkpoint` inside it.  The loops that wait for
worker processes and the atomic writes run so: an exception raised at an
arbitrary point inside a process pool's bookkeeping can leave one of its
locks held (the pool's thread then blocks on it, and the interpreter waits
for that thread at exit), and one raised between a temp file's creation and
the code that removes it leaves the file behind.

Some libraries swallow a ``KeyboardInterrupt`` raised while they run Python
code (pyarrow imports pandas lazily and drops any error of that import;
Python itself can only print one raised in a weakref callback or a
``__del__``, as "Exception ignored in ...", which the block's unraisable
hook silences), so an interruption that is not acknowledged within
:data:`RETRY_S` seconds is raised again in the main thread
(``_thread.interrupt_main``).

:func:`pause_point` is a test hook: the command pauses at a named point, so
that a test can signal it there instead of after a sleep.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path

RETRY_S = 0.3   # an interruption not acted on within this many seconds is raised again
SIGNALS = (signal.SIGINT, signal.SIGTERM)
PAUSE_ENV = "SIMMOE_TEST_PAUSE"   # "POINT:FILE": at pause_point(POINT), create FILE and wait for a signal
PAUSE_MAX_S = 60.0

_STATE: dict = {"active": False, "at": None, "acked": False, "signum": None, "deferred": 0, "block": 0}


class Terminated(KeyboardInterrupt):
    """SIGTERM inside :func:`interrupt_once`, raised and cleaned up like Ctrl-C."""


def requested() -> bool:
    """Whether SIGINT or SIGTERM arrived inside the running :func:`interrupt_once` block."""
    return _STATE["at"] is not None


def exit_status(exc: BaseException | None = None) -> int:
    """The exit status after an interruption: 143 for :class:`Terminated` (SIGTERM), else 130."""
    if exc is None:
        return 128 + int(_STATE["signum"] or signal.SIGINT)
    return 128 + int(signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT)


def what(exc: BaseException | None = None) -> str:
    """``"terminated"`` (SIGTERM) or ``"interrupted"`` (SIGINT), for the command's one line."""
    return "terminated" if exit_status(exc) == 128 + signal.SIGTERM else "interrupted"


def acknowledge() -> None:
    """The interruption reached code that acts on it: later signals are ignored, none is raised again."""
    _STATE["acked"] = True


def _exception() -> KeyboardInterrupt:
    return Terminated() if _STATE["signum"] == signal.SIGTERM else KeyboardInterrupt()


def checkpoint() -> None:
    """Raise the interruption when a signal arrived and nothing has acted on it yet."""
    if _STATE["at"] is not None and not _STATE["acked"]:
        raise _exception()


@contextlib.contextmanager
def deferred(*, act: bool = True):
    """Within the block a signal is noted, not raised; at its end (``act``) it is raised.

    With ``act=False`` the caller raises it itself (:func:`checkpoint`), e.g.
    from inside the ``try`` that cleans up what the block created.
    """
    _STATE["deferred"] += 1
    try:
        yield
    finally:
        _STATE["deferred"] -= 1
    if act:
        checkpoint()


def _handler(signum, frame):
    now, at = time.monotonic(), _STATE["at"]
    if at is not None and (_STATE["acked"] or now - at < RETRY_S):
        return                  # a repeated signal while the first one unwinds or is cleaned up
    _STATE["at"] = now
    if at is None:
        _STATE["signum"] = signum
        threading.Thread(target=_watch, args=(_STATE["block"],), name="simmoe-interrupt", daemon=True).start()
    if _STATE["deferred"]:
        return                  # acted on at the deferred block's next checkpoint
    raise _exception()


def _watch(block: int) -> None:
    """Raise the interruption again in the main thread until something acts on it (or its block ends)."""
    import _thread

    while True:
        time.sleep(RETRY_S)
        if not _STATE["active"] or _STATE["acked"] or _STATE["block"] != block:
            return
        _thread.interrupt_main(_STATE["signum"])


def _quiet_unraisable(hook):
    """``sys.unraisablehook`` that drops our interruption (the watchdog raises it again) and passes the rest on."""
    def quiet(info):
        if isinstance(info.exc_value, KeyboardInterrupt) and _STATE["at"] is not None:
            return
        hook(info)
    return quiet


@contextlib.contextmanager
def interrupt_once():
    """Within the block, SIGINT and SIGTERM interrupt as the module docstring says.

    When the block ends without an interruption the previous handlers come
    back; after one, both signals stay ignored (the process is on its way
    out: a signal between the block's end and the exit would otherwise print
    a traceback).
    """
    if threading.current_thread() is not threading.main_thread() or _STATE["active"]:
        yield
        return
    previous = {s: signal.signal(s, _handler) for s in SIGNALS}
    hook = sys.unraisablehook
    sys.unraisablehook = _quiet_unraisable(hook)
    _STATE.update(active=True, at=None, acked=False, signum=None, deferred=0, block=_STATE["block"] + 1)
    try:
        yield
    finally:
        fired = _STATE["at"] is not None
        _STATE.update(active=False, at=None, acked=False, deferred=0)
        sys.unraisablehook = hook
        for s, old in previous.items():
            signal.signal(s, signal.SIG_IGN if fired else old)


def leave(status: int) -> None:
    """Exit at once with ``status`` after an interruption was cleaned up and reported.

    Skips the interpreter's own exit, which could still wait for a thread a
    library left behind, and which CPython ends by killing the process with
    SIGINT (status -2 to a parent process, not 130) when the interruption had
    passed through an ``eval()`` (``namedtuple`` does one at import).
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


def pause_point(name: str) -> None:
    """Test hook: with ``SIMMOE_TEST_PAUSE=NAME:FILE``, create FILE and wait here for a signal.

    The wait ends when a signal has arrived in this process (raised here, or
    noted inside a :func:`deferred` block), or after :data:`PAUSE_MAX_S`; a
    worker process, which ignores signals, waits until it is killed.  Without
    the variable (every real run) this returns at once.
    """
    spec = os.environ.get(PAUSE_ENV)
    if not spec or spec.partition(":")[0] != name:
        return
    Path(spec.partition(":")[2]).touch()
    end = time.monotonic() + PAUSE_MAX_S
    while not requested() and time.monotonic() < end:
        time.sleep(0.005)
