"""`simmoe report`: regenerate the reports (tables and plots) from traces."""

from __future__ import annotations

import contextlib
import sys

from simmoe.errors import SimmoeError

DEFAULT_TRACES = ("traces/gsm8k.parquet", "traces/cnndm.parquet")


def register(sub) -> None:
    p = sub.add_parser(
        "report", help="Regenerate the reports (tables and plots) from traces",
        description="Replay traces under the SpecFit paper's settings and write the analogues of "
        "its Tables 2-5 and Figures 2-4, with the published figures beside (marked fit or "
        "validate), plus what-if plots against link bandwidth, route-predictor accuracy and cache "
        "policy: PNG figures, CSV tables and a markdown index (OUT/index.md). Deterministic: "
        "fixed selector time and seeds.")
    p.add_argument("--traces", nargs="+", default=list(DEFAULT_TRACES), metavar="TRACE",
                   help=f"trace files (default: {' '.join(DEFAULT_TRACES)})")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="output folder (required: the project's own reports/ is committed, so a "
                        "run never overwrites it by default)")
    p.add_argument("--requests", type=int, default=None, metavar="N",
                   help="replay only the first N requests of each trace (default: all)")
    p.add_argument("--hardware", default="a100-pcie-40gb",
                   help="base hardware profile, name or path (default a100-pcie-40gb); it must describe "
                        "the traces' model")
    p.add_argument("--hardware-rtx", default="rtx4090-24gb", metavar="PROFILE",
                   help="profile of Table 4's analogue, name or path (default rtx4090-24gb); it must "
                        "describe the traces' model")
    p.add_argument("--selector-ms", type=float, default=None, metavar="X",
                   help="fixed selector time of SpecFit per cycle (default: the paper's median for "
                        "the dataset, 2.82 ms GSM8K, 1.43 ms CNN/DM)")
    p.add_argument("--check-requests", type=int, default=2, metavar="N",
                   help="requests in tables/check-slice.csv, which a test recomputes (default 2)")
    p.add_argument("--workers", type=int, default=None,
                   help="worker processes for the replays (default: the number of CPUs)")
    p.add_argument("--quick", action="store_true",
                   help="every table and figure on reduced grids and one request per trace (unless --requests): "
                        "a first look in seconds; the index says QUICK")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=run)


def run(args) -> int:
    import os

    from simmoe.report.build import build_report
    from simmoe.report.experiments import ReportSettings

    settings = ReportSettings(requests=args.requests, hardware=args.hardware, hardware_rtx=args.hardware_rtx,
                              selector_ms=args.selector_ms,
                              check_requests=args.check_requests).validate()
    if args.quick:
        settings = settings.quicken()
    workers = args.workers if args.workers is not None else (os.cpu_count() or 1)
    if workers < 1:
        raise SimmoeError(f"--workers must be at least 1, got {workers}")
    with _progress(len(args.traces), args.quiet) as log:
        written = build_report(list(args.traces), args.out, settings, workers=workers, log=log)
    print(f"{len(written)} files -> {args.out}/ (index: {os.path.join(args.out, 'index.md')})")
    return 0


@contextlib.contextmanager
def _progress(traces: int, quiet: bool):
    """``log(text, detail=False)`` for :func:`simmoe.report.build.build_report`: one progress bar.

    On a terminal, one transient bar over every step of every trace, its
    text the current step; elsewhere one line per step (no per-configuration
    lines); nothing with ``--quiet``.
    """
    from rich.console import Console

    from simmoe.report.build import STEPS

    console = Console(stderr=True)
    if quiet:
        yield lambda text, detail=False: None
    elif not console.is_terminal:
        yield lambda text, detail=False: None if detail else print(f"report: {text}", file=sys.stderr, flush=True)
    else:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("report"), BarColumn(), MofNCompleteColumn(), TextColumn("steps  {task.description}"),
                      TimeElapsedColumn(), console=console, transient=True) as bar:
            task = bar.add_task("", total=traces * STEPS)

            def log(text, detail=False):
                bar.update(task, description=text, advance=0 if detail else 1)
            yield log
