"""`simmoe report`: regenerate the reports (tables and plots) from traces."""

from __future__ import annotations

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
                   help="base hardware profile, name or path (default a100-pcie-40gb)")
    p.add_argument("--selector-ms", type=float, default=None, metavar="X",
                   help="fixed selector time of SpecFit per cycle (default: the paper's median for "
                        "the dataset, 2.82 ms GSM8K, 1.43 ms CNN/DM)")
    p.add_argument("--check-requests", type=int, default=2, metavar="N",
                   help="requests in tables/check-slice.csv, which a test recomputes (default 2)")
    p.add_argument("--workers", type=int, default=None,
                   help="worker processes for the replays (default: the number of CPUs)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=run)


def run(args) -> int:
    import os

    from simmoe.report.build import build_report
    from simmoe.report.experiments import ReportSettings

    settings = ReportSettings(requests=args.requests, hardware=args.hardware,
                              selector_ms=args.selector_ms,
                              check_requests=args.check_requests).validate()
    workers = args.workers if args.workers is not None else (os.cpu_count() or 1)
    if workers < 1:
        raise SimmoeError(f"--workers must be at least 1, got {workers}")
    log = None if args.quiet else (lambda s: print(f"report: {s}", file=sys.stderr, flush=True))
    written = build_report(list(args.traces), args.out, settings, workers=workers, log=log)
    print(f"{len(written)} files -> {args.out}/ (index: {os.path.join(args.out, 'index.md')})")
    return 0
