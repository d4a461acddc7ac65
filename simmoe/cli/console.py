"""The rich consoles of the command lines: no trailing spaces, a fixed width when not a terminal.

Rich pads every line of a table (and of a centred title) to the table's
width; printed to a file or a pipe those spaces end every line.  There the
console's file drops spaces (and tabs) before each line end, ANSI styling
codes left in place.
"""

from __future__ import annotations

import re
import sys

_TRAILING = re.compile(r"[ \t]+((?:\x1b\[[0-9;]*m)*)(?=\n)")


class _Stripped:
    """A text file that writes through to ``target`` with trailing blanks removed from every line."""

    def __init__(self, target):
        self._target = target

    def write(self, text: str) -> int:
        self._target.write(_TRAILING.sub(r"\1", text))
        return len(text)

    def flush(self) -> None:
        self._target.flush()

    def isatty(self) -> bool:
        return bool(getattr(self._target, "isatty", lambda: False)())

    def fileno(self) -> int:
        return self._target.fileno()

    @property
    def encoding(self) -> str:
        return getattr(self._target, "encoding", "utf-8") or "utf-8"


def make_console(*, stderr: bool = False, width: int | None = 200, highlight: bool = False):
    """A rich Console on stdout (or stderr) without trailing blanks.

    ``width``: the width used when the output is not a terminal (a file or a
    pipe), None for rich's default; a terminal keeps its own width.
    """
    from rich.console import Console

    target = sys.stderr if stderr else sys.stdout
    console = Console(file=target, highlight=highlight)
    if console.is_terminal:     # live displays redraw there; blanks at a line's end are invisible anyway
        return console
    return Console(file=_Stripped(target), highlight=highlight, **({"width": width} if width else {}))
