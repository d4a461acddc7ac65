"""Checks of command-line values shared by several commands, run before any work.

Each raises :class:`simmoe.errors.SimmoeError` (one line, exit 2) naming the
flag; output paths go through :func:`simmoe.atomicio.check_outputs`.
"""

from __future__ import annotations

from simmoe.errors import SimmoeError


def check_seed(value, flag: str = "--seed") -> int:
    """A seed is a non-negative integer (numpy's generators refuse others, deep inside a worker)."""
    if isinstance(value, bool) or int(value) != value or value < 0:
        raise SimmoeError(f"{flag} {value}: must be a non-negative integer")
    return int(value)


def check_replay_args(args) -> None:
    """``simmoe replay``: the seed and every output (--json, --csv, --cycles, --timeline) before any work."""
    from simmoe.atomicio import check_outputs

    check_seed(args.seed)
    check_outputs((("--json", args.json), ("--csv", args.csv), ("--cycles", args.cycles),
                   ("--timeline", getattr(args, "timeline", None))),
                  stdout=("--json", "--csv"), inputs=(args.trace,))
