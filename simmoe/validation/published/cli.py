"""The command line: ``python -m simmoe.validation.published --out FILE.md [options]``.

Bad input prints one line and exits 2; a failed self-check of the engine
exits 3.  The report is written atomically.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from simmoe.atomicio import write_text_atomic
from simmoe.errors import CheckFailed, SimmoeError
from simmoe.validation.published.markdown import render_markdown
from simmoe.validation.published.pipeline import run_predictions
from simmoe.validation.published.settings import Settings


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m simmoe.validation.published",
        description="Replay synthetic traces for every published figure of CALIBRATION.md and write "
                    "the validation report (validation set with goals, fit set apart).")
    p.add_argument("--out", required=True, metavar="FILE.md", help="report to write (markdown)")
    p.add_argument("--quick", action="store_true",
                   help="a few requests per trace (tests the pipeline; numbers not meaningful)")
    p.add_argument("--seed", type=int, default=0, help="generator seed of every trace (default 0)")
    p.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--traces", metavar="DIR", default=None,
                   help="read gsm8k.parquet and cnndm.parquet from DIR instead of generating them "
                        "(the EVICT-shaped traces are always generated)")
    p.add_argument("--cache-dir", metavar="DIR", default=None,
                   help="keep the generated traces in DIR and reuse them on the next run")
    p.add_argument("--evict-requests", metavar="G,C", default="20,10",
                   help="requests of the EVICT-shaped GSM8K and CNN/DM traces (default 20,10)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return p.parse_args(argv)


def command_line(args: argparse.Namespace) -> str:
    """The command the report says regenerates it (flags that change its numbers only)."""
    cmd = ["python -m simmoe.validation.published", f"--out {args.out}"]
    if args.quick:
        cmd.append("--quick")
    if args.seed != 0:
        cmd.append(f"--seed {args.seed}")
    if args.traces:
        cmd.append(f"--traces {args.traces}")
    if args.evict_requests != "20,10":
        cmd.append(f"--evict-requests {args.evict_requests}")
    return " ".join(cmd)


def settings_from_args(args: argparse.Namespace) -> Settings:
    if args.seed < 0:
        raise SimmoeError(f"--seed {args.seed}: must be non-negative")
    if args.workers < 1:
        raise SimmoeError(f"--workers {args.workers}: must be at least 1")
    try:
        g, c = (int(x) for x in args.evict_requests.split(","))
    except ValueError:
        raise SimmoeError(
            f"--evict-requests {args.evict_requests!r}: give two integers, e.g. 20,10") from None
    if g < 1 or c < 1:
        raise SimmoeError(f"--evict-requests {args.evict_requests!r}: both must be at least 1")
    if args.traces is not None and not Path(args.traces).is_dir():
        raise SimmoeError(f"--traces {args.traces}: not a folder")
    out = Path(args.out)
    if not out.parent.is_dir():
        raise SimmoeError(f"--out {args.out}: the folder {out.parent} does not exist")
    return Settings(seed=args.seed, quick=args.quick, workers=args.workers, traces_dir=args.traces,
                    cache_dir=args.cache_dir, evict_requests={"gsm8k": g, "cnndm": c})


def _silent(line: str) -> None:
    pass


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv=None) -> int:
    args = parse_args(argv)
    log = _silent if args.quiet else _to_stderr
    try:
        settings = settings_from_args(args)
        pred = run_predictions(settings, log=log)
        text = render_markdown(pred, command_line(args))
        write_text_atomic(Path(args.out), text.rstrip("\n") + "\n")
    except SimmoeError as exc:
        print(f"simmoe.validation.published: error: {exc}", file=sys.stderr)
        return 2
    except CheckFailed as exc:
        print(f"simmoe.validation.published: self-check failed: {exc}", file=sys.stderr)
        return 3
    val = [r for r in pred.rows if r.role == "validate" and r.goal]
    npass = sum(r.status == "PASS" for r in val)
    log(f"wrote {args.out}: {npass}/{len(val)} goal rows PASS (SYNTHETIC traces)")
    return 0
