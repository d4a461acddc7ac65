"""Exception types that the CLI turns into one line on stderr.

``SimmoeError`` and its subclasses are *user* errors (bad input): exit
status 2.  ``CheckFailed`` means an invariant the tool asserts about its own
results did not hold (a bug report): exit status 3.
"""

from __future__ import annotations

import functools


class SimmoeError(Exception):
    """Bad input from the user: a missing file, a bad flag value, a bad trace."""

    exit_status = 2


class TraceError(SimmoeError):
    """A trace file failed validation.  The message names file, row and field."""

    def __init__(self, message: str, *, path: str | None = None,
                 row: int | None = None, field: str | None = None):
        self.path, self.row, self.field = path, row, field
        where = []
        if path is not None:
            where.append(str(path))
        if row is not None:
            where.append(f"row {row}")
        if field is not None:
            where.append(f"field {field!r}")
        super().__init__(f"{': '.join([', '.join(where)] if where else [])}{': ' if where else ''}{message}")


class ProfileError(SimmoeError):
    """A hardware profile is missing a field or has a bad value."""


class CheckFailed(Exception):
    """A self-check of the tool failed: the result is wrong, please report it."""

    exit_status = 3


def one_line_parser(**kwargs):
    """An ``argparse.ArgumentParser`` whose usage errors are one line, exit 2, like every other user error.

    Every simmoe command line (``simmoe``, ``python -m simmoe....``) is built from it.
    """
    return _one_line_class()(**kwargs)


@functools.cache
def _one_line_class():
    import argparse  # here, not at the top: every process imports this module, few parse arguments

    class OneLineParser(argparse.ArgumentParser):
        def error(self, message):
            self.exit(2, f"{self.prog}: error: {message}\n")

    return OneLineParser
