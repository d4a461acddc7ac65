"""`simmoe synth`: generate a seeded synthetic trace (calibrated presets).

``simmoe synth --preset gsm8k|cnndm [--requests N] [--seed S] --out PATH
[--json FILE]`` plus flags that override the main generative parameters;
``simmoe synth --calibration-report PATH`` regenerates the calibration
report of the presets.  Every trace is labelled synthetic in its metadata.

Stopped by SIGINT (Ctrl-C) the command says "interrupted" and exits 130; by
SIGTERM it says "terminated" and exits 143 (128 + 15).  Either way the file
being written is left as it was (its temp file is removed).
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time

from simmoe.cli.drafter_args import add_drafter_arguments
from simmoe.errors import SimmoeError

# flag -> (SynthParams field, type, help)
OVERRIDES = {
    "--easy-share": ("easy_share", float, "share of positions in easy stretches (0..1)"),
    "--stretch-tokens": ("stretch_tokens", float, "mean stretch length in tokens"),
    "--easy-confidence": ("easy_confidence", float, "mean draft predictability in easy stretches"),
    "--hard-confidence": ("hard_confidence", float, "mean draft predictability in hard stretches"),
    "--depth-decay": ("depth_decay", float, "predictability factor per extra draft level"),
    "--confidence-concentration": ("confidence_concentration", float,
                                   "Beta concentration of a position's predictability around its stretch's mean"),
    "--draft-concentration": ("draft_concentration", float,
                              "Beta concentration of a node's top-1 q around the position's predictability"),
    "--runner-up-share": ("runner_up_share", float,
                          "mean share of the remaining draft mass each next sibling takes (0..1)"),
    "--popularity-sigma": ("popularity_sigma", float, "log-normal spread of expert popularity"),
    "--topic-sigma": ("topic_sigma", float, "spread of a request's modulation of popularity"),
    "--locality": ("locality", float, "P(a context expert survives one token step)"),
    "--token-share": ("token_share", float,
                      "P(a token keeps a context expert); siblings share their context"),
    "--history-reuse": ("history_reuse", float,
                        "P(a token's redrawn expert comes from a recent context)"),
    "--facet-share": ("facet_share", float,
                      "share of a request's topic rotating over its facets every 8 tokens (0..1): spreads "
                      "its routings (popularity concentration) with next-token overlap nearly unchanged"),
    "--topic-drift": ("topic_drift", float,
                      "per-token rate at which a request's topic decorrelates (0..1): its hot set wanders "
                      "(hot-set stability) with next-token overlap nearly unchanged"),
    "--output-len-sigma": ("output_len_sigma", float, "log-normal spread of output lengths"),
}
POOL_FLAGS = {
    "--expand-topk": ("expand_topk", "children per expansion and nodes expanded per level"),
    "--depth": ("depth", "pool depth"),
    "--max-nodes": ("max_nodes", "node cap of a pool"),
    "--K": ("K", "verification budget recorded in the pool shape"),
}


def register(sub) -> None:
    from simmoe.synth import PRESETS

    p = sub.add_parser(
        "synth",
        help="Generate a seeded synthetic trace (calibrated presets)",
        description="Generate a synthetic trace from a seeded generative model calibrated to "
        "published workload figures (docs/synthetic-traces.md). The output is labelled "
        "synthetic in its metadata. Presets: " + ", ".join(
            f"{n} ({pr.params.num_requests} requests)" for n, pr in PRESETS.items())
        + ". Stopped by SIGINT it exits 130, by SIGTERM 143, leaving no partial file.",
    )
    p.add_argument("--preset", choices=list(PRESETS), help="calibrated preset")
    p.add_argument("--requests", type=int, default=None, metavar="N",
                   help="generate the first N requests (default: the preset's full size)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--model", metavar="NAME", default=None,
                   help="generate routes with this catalogued model's geometry (simmoe models); routing "
                        "parameters are carried over from the preset, and the provenance says so")
    p.add_argument("--temperature", default="0", metavar="T",
                   help="T > 0: add the target's distributions at temperature T per pool node (schema "
                        "version 2; simmoe.synth.sampling), for `simmoe replay --temperature T`; the pools, "
                        "text and greedy agreement are those of temperature 0 (default 0)")
    add_drafter_arguments(p, "synth")
    p.add_argument("--out", metavar="PATH", help="trace file to write (.parquet)")
    p.add_argument("--json", metavar="FILE",
                   help="write a JSON summary (provenance, sizes, workload statistics) "
                        "('-' = stdout)")
    p.add_argument("--calibration-report", metavar="PATH",
                   help="regenerate both presets and write the calibration report (markdown)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    g = p.add_argument_group("generative parameters (override the preset)")
    for flag, (field, typ, text) in OVERRIDES.items():
        g.add_argument(flag, dest=field, type=typ, default=None, help=text)
    for flag, (field, text) in POOL_FLAGS.items():
        g.add_argument(flag, dest=f"pool_{field}", type=int, default=None, help=text)
    p.set_defaults(func=run)


def _progress(enabled: bool):
    """A rich progress bar as a ``progress(done, total)`` callback (a no-op when disabled)."""
    if not enabled:
        return None, None
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("synth"), BarColumn(), TextColumn("{task.completed}/{task.total} requests"),
                   TimeElapsedColumn(), transient=True, file=sys.stderr)
    task = bar.add_task("synth", total=None)

    def update(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)

    return bar, update


class Terminated(BaseException):
    """Raised in the main thread when the process gets SIGTERM (like KeyboardInterrupt for SIGINT)."""


def _raise_terminated(signum, frame):
    raise Terminated()


def run(args) -> int:
    if threading.current_thread() is not threading.main_thread():
        return _run(args)
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return _run(args)
    except Terminated:
        print("simmoe synth: terminated", file=sys.stderr)
        return 143
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(args) -> int:
    from simmoe.synth import generate, preset
    from simmoe.synth.stats import replay_eagle3

    if args.calibration_report:
        return _calibration_report(args)
    temperature = _check(args)
    pr = preset(args.preset)
    params, fitted_to = _params(args, pr)
    drafter, params, note = _drafter(args, params, pr.name)
    if note:
        fitted_to += (note,)
    bar, update = _progress(not args.no_progress and sys.stderr.isatty())
    t0 = time.perf_counter()
    if bar is not None:
        with bar:
            trace = generate(params, seed=args.seed, num_requests=args.requests,
                             preset=pr.name, fitted_to=fitted_to, progress=update, temperature=temperature,
                             drafter=drafter)
    else:
        trace = generate(params, seed=args.seed, num_requests=args.requests,
                         preset=pr.name, fitted_to=fitted_to, temperature=temperature, drafter=drafter)
    seconds = time.perf_counter() - t0
    if args.out:
        from simmoe.trace.io import write_trace

        write_trace(trace, args.out)
    eagle = replay_eagle3(trace)
    summary = {
        "synthetic": True,
        "provenance": trace.meta["provenance"],
        "preset": pr.name,
        "requests": len(trace.requests),
        "num_requests_full": trace.meta["num_requests_full"],
        "positions": trace.num_positions,
        "pool_nodes": trace.num_nodes,
        "output_tokens": int(trace.requests.output_len.sum()),
        "eagle3_committed_per_cycle": round(eagle.committed_per_cycle, 4),
        "eagle3_cycles": int(len(eagle.cycles)),
        "temperature": temperature,
        **({"drafter": trace.meta["drafter"]} if "drafter" in trace.meta else {}),
        "generate_seconds": round(seconds, 2),
        "out": args.out,
    }
    _write_summary(args, summary, pr.name, seconds)
    return 0


def _calibration_report(args) -> int:
    """``--calibration-report PATH``: regenerate both presets and write the calibration report."""
    if args.out or args.preset:
        raise SimmoeError("--calibration-report regenerates both presets; "
                          "do not combine it with --preset/--out")
    from simmoe.atomicio import check_outputs
    from simmoe.synth.calibration import write_report

    check_outputs([("--calibration-report", args.calibration_report)])
    write_report(args.calibration_report, seed=args.seed,
                 log=lambda s: print(s, file=sys.stderr))
    print(f"wrote {args.calibration_report}")
    return 0


def _check(args) -> float:
    """Every check before any work; the temperature."""
    from simmoe.synth import PRESETS

    if not args.preset:
        raise SimmoeError("--preset is required (" + ", ".join(PRESETS) + ")")
    if not args.out and not args.json:
        raise SimmoeError("nothing to write: give --out PATH and/or --json FILE")
    if args.out and not str(args.out).endswith(".parquet"):
        raise SimmoeError(f"--out {args.out}: trace files end in .parquet")
    from simmoe.atomicio import check_outputs

    check_outputs([("--out", args.out), ("--json", args.json)], stdout=("--json",))
    if args.requests is not None and args.requests < 1:
        raise SimmoeError(f"--requests {args.requests}: must be at least 1")
    if args.seed < 0:
        raise SimmoeError(f"--seed {args.seed}: must be non-negative")
    from simmoe.trace.sampling import check_temperature_value

    return check_temperature_value(args.temperature)


def _params(args, pr):
    """The preset's parameters with the flags' overrides, and what they were fitted to (overrides named)."""
    from dataclasses import replace

    overrides = {f: getattr(args, f) for f, _, _ in OVERRIDES.values() if getattr(args, f) is not None}
    pool = {f: getattr(args, f"pool_{f}") for f, _ in POOL_FLAGS.values()
            if getattr(args, f"pool_{f}") is not None}
    params = pr.params.with_(**overrides)
    if pool:
        params = params.with_(pool=replace(params.pool, **pool))
        overrides.update({f"pool.{k}": v for k, v in pool.items()})
    fitted_to = pr.fitted_to
    if args.model:
        from simmoe.hardware.catalogue import load_model, with_model

        params, fitted_to = with_model(params, fitted_to, load_model(args.model), pr.name)
    if overrides:
        fitted_to += ("then modified by hand: " + ", ".join(
            f"{k}={v}" for k, v in sorted(overrides.items())),)
    return params, fitted_to


def _drafter(args, params, workload):
    """The drafter of ``--drafter`` (None: EAGLE-3, the presets' own), the parameters with its pool shape, and
    where its acceptance comes from (the fit of ``workload`` where one exists: simmoe.drafters.fitted)."""
    from simmoe.drafters import DEFAULT, parse_params
    from simmoe.drafters.fitted import for_workload

    given = parse_params(args.drafter_param)
    name = args.drafter or DEFAULT
    if given and args.drafter is None:
        raise SimmoeError("--drafter-param: name the drafter it is for (--drafter NAME)")
    drafter, note = for_workload(name, given, workload)
    if drafter.name == DEFAULT:
        return (drafter if given else None), params, None
    pool_flags = [flag for flag, (field, _) in POOL_FLAGS.items() if getattr(args, f"pool_{field}") is not None]
    if pool_flags:
        raise SimmoeError(f"{pool_flags[0]}: shapes EAGLE-3's tree; drafter {drafter.name}'s pool follows its own "
                          "parameters (--drafter-param)")
    return drafter, params.with_(pool=drafter.pool_shape()), note


def _write_summary(args, summary: dict, name: str, seconds: float) -> None:
    """``--json`` (a file or stdout) and the one-line summary."""
    if args.json:
        text = json.dumps(summary, indent=2)
        if args.json == "-":
            print(text)
        else:
            from pathlib import Path

            from simmoe.synth.calibration import atomic_write_text

            atomic_write_text(Path(args.json), text + "\n")
    if args.json != "-":
        print(f"synthetic trace ({name}, seed {args.seed}): {summary['requests']} requests, "
              f"{summary['positions']:,} positions, {summary['pool_nodes']:,} pool nodes, "
              + (f"drafter {summary['drafter']['name']} (synthetic acceptance), top-K verification commits "
                 if "drafter" in summary else "EAGLE-3 commits ")
              + f"{summary['eagle3_committed_per_cycle']:.2f} per cycle; "
              f"generated in {seconds:.1f} s" + (f"; wrote {args.out}" if args.out else ""))
