"""The ``simmoe`` command line: one module per subcommand.

Each subcommand module defines ``register(subparsers)`` which adds its parser
and sets ``func`` to a callable ``run(args) -> int``.  Errors derived from
:class:`simmoe.errors.SimmoeError` become one line on stderr and exit status 2;
:class:`simmoe.errors.CheckFailed` exits with 3.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from simmoe import __version__
from simmoe.errors import CheckFailed, SimmoeError, one_line_parser

# Order is the order of `simmoe --help`.
COMMANDS = [
    "replay",
    "sweep",
    "tune",
    "synth",
    "models",
    "inspect",
    "import_routes",
    "bound",
    "hardness",
    "fit",
    "validate",
    "report",
]


def build_parser() -> argparse.ArgumentParser:
    parser = one_line_parser(
        prog="simmoe",
        description="Simulate speculative decoding on Mixture-of-Experts models "
        "with offloaded experts: replay traces under any selector, cache and hardware.",
    )
    parser.add_argument("--version", action="version", version=f"simmoe {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=type(parser))
    for name in COMMANDS:
        importlib.import_module(f"simmoe.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from simmoe.interrupt import acknowledge, exit_status, interrupt_once, leave, what

    name = "simmoe"
    try:
        with interrupt_once():      # from the start: a Ctrl-C while the commands load is one line too
            parser = build_parser()
            args = parser.parse_args(argv)
            if not getattr(args, "func", None):
                parser.print_help()
                return 2
            name = f"simmoe {args.command}"
            return int(args.func(args) or 0)
    except SimmoeError as exc:
        print(f"{name}: error: {exc}", file=sys.stderr)
        return exc.exit_status
    except CheckFailed as exc:
        print(f"{name}: self-check failed (please report): {exc}", file=sys.stderr)
        return exc.exit_status
    except FileNotFoundError as exc:
        print(f"{name}: error: no such file: {exc.filename}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # SIGINT: 130; SIGTERM (simmoe.interrupt.Terminated): 143
        acknowledge()
        print(f"{name}: {what(exc)}", file=sys.stderr)
        if argv is None:    # the program itself: leave now (simmoe.interrupt.leave says why)
            leave(exit_status(exc))
        return exit_status(exc)


def not_implemented(name: str, issue: str):
    """Parser ``func`` for a command whose implementation has not landed yet."""

    def run(args) -> int:
        print(f"simmoe {name}: not implemented yet ({issue})", file=sys.stderr)
        return 2

    return run


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
