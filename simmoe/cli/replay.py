"""`simmoe replay`: replay a trace under selectors, cache and hardware profile.

Prints the trace's provenance, then one row per selector with the SpecFit
paper's counters (Tables 2–3): decode tokens/s, speedup over AR without a
cache (same trace and profile), draft nodes, committed tokens and ms per
cycle, cycles, H2D copies per output token, hit rate, cycles stopped before
the pool's last level, mean drafted levels and selector time.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import replace

from simmoe.errors import SimmoeError

COLUMNS = [  # (counter, header, format)
    ("decode_tps", "decode tok/s", "{:.2f}"),
    ("speedup", "speedup", "{:.2f}x"),
    ("draft_nodes", "draft nodes", "{:.2f}"),
    ("committed", "committed", "{:.2f}"),
    ("cycles", "cycles", "{:,d}"),
    ("ms_per_cycle", "ms/cycle", "{:.1f}"),
    ("h2d_per_token", "H2D/token", "{:.1f}"),
    ("hit_rate", "hit rate", "{:.1%}"),
    ("stopped_early_pct", "stopped early", "{:.1f}%"),
    ("drafted_levels", "drafted levels", "{:.2f}"),
    ("selector_ms", "selector ms", "{:.3f}"),
]


def register(sub) -> None:
    from simmoe.replay.engine import CACHE_POLICIES, DEFAULT_PROFILE, TIMING_MODELS
    from simmoe.replay.selectors import DEFAULT_SELECTORS, SELECTORS

    p = sub.add_parser(
        "replay",
        help="Replay a trace under selectors, cache and hardware profile",
        description="Replay a trace under each selector with an expert cache and print the "
        "paper's counters per selector.  Speedup is over AR without a cache on the same trace "
        "and profile.  Selectors: " + ", ".join(f"{n} ({c.summary})" for n, c in SELECTORS.items()),
    )
    p.add_argument("trace", help="trace file (.parquet)")
    p.add_argument("--selectors", default=",".join(DEFAULT_SELECTORS),
                   help="comma-separated selector names, or 'all' "
                        f"(default: {','.join(DEFAULT_SELECTORS)})")
    p.add_argument("--slots", type=int, default=48,
                   help="expert cache slots per layer; 0 = no cache (default 48)")
    p.add_argument("--cache", default="lru", choices=CACHE_POLICIES,
                   help="cache policy (default lru)")
    p.add_argument("--hardware", default=DEFAULT_PROFILE,
                   help=f"hardware profile name or path (default {DEFAULT_PROFILE})")
    p.add_argument("--route-accuracy", type=float, default=1.0, metavar="A",
                   help="accuracy of the simulated route predictor the selectors see "
                        "(SpecFit §4.6); 1 = exact routes (default)")
    p.add_argument("--selector-ms", type=float, default=None, metavar="X",
                   help="fixed selector time per cycle in ms (default: the measured wall time)")
    p.add_argument("--selector-clock", default="wall", choices=("wall", "cpu"),
                   help="clock of the measured selector time: wall (default, as the paper) or the "
                        "selecting thread's CPU time (not inflated by other processes)")
    p.add_argument("--timing", default="event", choices=TIMING_MODELS,
                   help="forward timing model (default event)")
    p.add_argument("--seed", type=int, default=0, help="seed of route prediction and timing draws")
    p.add_argument("--requests", type=int, default=None, metavar="N",
                   help="replay only the first N requests")
    p.add_argument("--ddd-threshold", type=float, default=0.3,
                   help="ddd: stop drafting when a level's path-probability mass is below this")
    p.add_argument("--coverage-rho", type=float, default=0.7,
                   help="coverage: fraction of the top-K probability mass to verify")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON ('-' = stdout)")
    p.add_argument("--csv", metavar="FILE", help="write the results as CSV ('-' = stdout)")
    p.add_argument("--cycles", metavar="FILE", help="write every cycle of every selector (parquet)")
    p.add_argument("--workers", type=int, default=None,
                   help="worker processes for the selectors (default: the number of CPUs)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args) -> int:
    import os

    from simmoe.replay.engine import ReplayConfig, ar_baseline, replay_all
    from simmoe.hardware.profile import load_profile
    from simmoe.replay.metrics import speedup
    from simmoe.atomicio import write_bytes_atomic, write_text_atomic
    from simmoe.replay.selectors import parse_selectors
    from simmoe.trace.io import read_trace

    names = parse_selectors(args.selectors)
    options = _options(args)
    base = ReplayConfig(selector=names[0], slots=args.slots, cache=args.cache,
                        hardware=args.hardware, route_accuracy=args.route_accuracy,
                        selector_ms=args.selector_ms, selector_clock=args.selector_clock,
                        timing=args.timing, seed=args.seed,
                        requests=args.requests, options=options).validate()
    workers = args.workers if args.workers is not None else (os.cpu_count() or 1)
    if workers < 1:
        raise SimmoeError(f"--workers must be at least 1, got {workers}")
    for out in (args.json, args.csv, args.cycles):
        _check_output(out)
    if args.cycles == "-":
        raise SimmoeError("--cycles needs a file name (parquet), not '-'")
    profile = load_profile(args.hardware)
    trace = read_trace(args.trace)
    to_stdout = "-" in (args.json, args.csv)
    console = _console(stderr=True)
    if not to_stdout:
        _console(stderr=False).print(provenance_text(trace, args.trace))
    else:
        console.print(provenance_text(trace, args.trace))

    configs = [ar_baseline(base)] + [replace(base, selector=n) for n in names]
    R = len(trace.requests) if base.requests is None else min(base.requests, len(trace.requests))
    tokens = int(trace.requests.output_len[:R].sum())
    with _progress(console, disabled=args.no_progress) as progress:
        task = progress.add_task(f"replaying {len(configs)} configurations", total=tokens * len(configs))
        state = {"tokens": 0, "configs": 0}

        def advance(n):  # tokens replayed in this process
            state["tokens"] += n
            progress.update(task, completed=max(state["tokens"], state["configs"] * tokens))

        def done(results):  # a group finished, here or in a worker
            state["configs"] += len(results)
            advance(0)

        out = replay_all(trace, configs, {base.hardware: profile}, workers=workers,
                         on_done=done, progress=advance)
    results = {"ar (no cache, baseline)": out[0]}
    results.update((cfg.selector, res) for cfg, res in zip(configs[1:], out[1:]))
    baseline = results.pop("ar (no cache, baseline)").summary()
    rows = []
    for name, res in results.items():
        s = res.summary()
        s["speedup"] = speedup(s, baseline)
        rows.append({"selector": name, **s})
    meta = {
        "trace": str(args.trace), "synthetic": bool(trace.is_synthetic),
        "provenance": trace.meta.get("provenance", {}), "config": base.to_dict(),
        "baseline": {"selector": "ar", "slots": 0, "cache": "none", **baseline},
    }
    for r, (name, res) in zip(rows, results.items()):
        if res.lambda_star is not None:
            r["lambda_star"] = res.lambda_star
    if args.json:
        text = json.dumps({**meta, "results": rows}, indent=2, default=_json_default)
        if args.json == "-":
            print(text)
        else:
            write_text_atomic(args.json, text + "\n")
    if args.csv:
        import pandas as pd

        df = pd.DataFrame(rows)
        df.insert(1, "synthetic", bool(trace.is_synthetic))
        for key in ("slots", "cache", "hardware", "route_accuracy", "timing"):
            df[key] = getattr(base, key)
        text = df.to_csv(index=False)
        if args.csv == "-":
            sys.stdout.write(text)
        else:
            write_text_atomic(args.csv, text)
    if args.cycles:
        import io

        import pandas as pd

        frame = pd.concat([res.cycles_frame() for res in results.values()], ignore_index=True)
        buf = io.BytesIO()
        frame.to_parquet(buf, index=False)
        write_bytes_atomic(args.cycles, buf.getvalue())
    if not to_stdout:
        _console(stderr=False).print(results_table(rows, base, baseline, trace.is_synthetic))
    return 0


def _options(args) -> tuple:
    return tuple(sorted({"ddd_threshold": float(args.ddd_threshold),
                         "coverage_rho": float(args.coverage_rho)}.items()))


def _check_output(path) -> None:
    if path and path != "-":
        from pathlib import Path

        parent = Path(path).resolve().parent
        if not parent.is_dir():
            raise SimmoeError(f"cannot write {path}: folder {parent} does not exist")


def _json_default(x):
    import numpy as np

    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


def _console(stderr: bool):
    from rich.console import Console

    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal:  # a file or a pipe: never squeeze the table
        console = Console(stderr=stderr, highlight=False, width=200)
    return console


class _NoProgress:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def add_task(self, *a, **k):
        return 0

    def advance(self, *a, **k):
        pass

    def update(self, *a, **k):
        pass


def _progress(console, disabled: bool):
    if disabled:
        return _NoProgress()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description:<24}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("tokens"), TimeElapsedColumn(), console=console, transient=True)


def provenance_text(trace, path) -> str:
    """One or two lines naming where the trace comes from; synthetic traces say so first."""
    prov = trace.meta.get("provenance", {}) or {}
    g = trace.geometry
    shape = trace.pool_shape
    kind = prov.get("kind", "unknown")
    def short(v) -> str:
        text = str(v)
        return text if len(text) <= 60 else text[:57] + "..."

    # long free text (notes, lists of fitted figures) stays in the trace: `simmoe inspect` shows it
    details = ", ".join(f"{k}={short(v)}" for k, v in prov.items()
                        if k not in ("kind", "note", "fitted_to"))
    if prov.get("fitted_to"):
        details += f"{', ' if details else ''}fitted to {len(prov['fitted_to'])} published figure set(s)"
    lines = []
    if trace.is_synthetic:
        lines.append("[bold reverse yellow] SYNTHETIC trace [/] results below are simulated from "
                     "a synthetic trace, not from recorded routes")
    lines.append(f"trace {path}: {kind}" + (f" ({details})" if details else ""))
    lines.append(f"  {len(trace.requests)} requests, {trace.num_positions:,} positions; model "
                 f"{g.name or '?'}: {g.num_layers} layers x {g.num_experts} experts, top-{g.top_k}; "
                 f"pools: top-{shape.expand_topk} expansion, depth {shape.depth}, "
                 f"<= {shape.max_nodes} nodes, K = {shape.K}")
    return "\n".join(lines)


def format_value(key: str, fmt: str, value) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if key == "cycles":
        return fmt.format(int(value))
    return fmt.format(value)


def results_table(rows, config, baseline, synthetic: bool):
    from rich.table import Table

    title = (f"{'SYNTHETIC trace: ' if synthetic else ''}{config.slots} slots/layer, "
             f"{config.cache if config.slots else 'no'} cache, {config.hardware}, "
             f"{config.timing} timing"
             + (f", route accuracy {config.route_accuracy:g}" if config.route_accuracy < 1 else ""))
    caption = (f"speedup over AR without cache: {baseline['decode_tps']:.2f} tok/s, "
               f"{baseline['ms_per_cycle']:.1f} ms/cycle, {baseline['h2d_per_token']:.1f} H2D/token"
               + (f"; selector time measured ({config.selector_clock} clock)" if config.selector_ms is None
                  else f"; selector time fixed at {config.selector_ms:g} ms"))
    table = Table(title=title, caption=caption)
    table.add_column("selector", no_wrap=True)
    for _, header, _ in COLUMNS:
        table.add_column(header, justify="right")
    for r in rows:
        cells = []
        for key, _, fmt in COLUMNS:
            v = r.get(key)
            if r["selector"] == "ar" and key in ("draft_nodes", "drafted_levels", "selector_ms",
                                                 "stopped_early_pct"):
                v = None  # AR has no drafter and no selector
            cells.append(format_value(key, fmt, v))
        table.add_row(r["selector"], *cells)
    return table
