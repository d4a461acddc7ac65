"""The ``hwprobe`` command line: one module per subcommand under ``hwprobe.commands``.

Each module defines ``register(subparsers)``.  Torch is imported lazily by
the commands, so ``hwprobe --help`` works without it and says how to install.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from hwprobe import __version__
from simmoe.errors import SimmoeError

COMMANDS = ["info", "models", "bandwidth", "record", "calibrate", "live", "selftest"]


class HwprobeError(Exception):
    """Bad input or an unusable environment: one line on stderr, exit status 2."""

    exit_status = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="hwprobe",
        description="Run MoE models with offloaded experts on real hardware: "
        "record traces, calibrate cost models, live speculative decoding.",
    )
    parser.add_argument("--version", action="version", version=f"hwprobe {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(f"hwprobe.commands.{name}").register(sub)
    return parser


def not_implemented(name: str, issue: str):
    def run(args) -> int:
        print(f"hwprobe {name}: not implemented yet ({issue})", file=sys.stderr)
        return 2

    return run


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)   # provenance: the command as given
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from simmoe.interrupt import acknowledge, interrupt_once

    try:
        with interrupt_once():
            return int(args.func(args) or 0)
    except HwprobeError as exc:
        print(f"hwprobe {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_status
    except SimmoeError as exc:      # the simulator's checks (paths, profiles, traces): bad input too
        print(f"hwprobe {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_status
    except ModuleNotFoundError as exc:
        if exc.name in ("torch", "transformers", "safetensors", "tokenizers"):
            print(f"hwprobe {args.command}: error: {exc.name} is not installed; "
                  "install the extra: pip install torch==2.13.0 -e '.[hwprobe]' "
                  "(on a GPU node, a CUDA build of torch instead)", file=sys.stderr)
            return 2
        raise
    except FileNotFoundError as exc:
        print(f"hwprobe {args.command}: error: no such file: {exc.filename}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        acknowledge()
        print(f"hwprobe {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
