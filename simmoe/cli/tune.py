"""`simmoe tune`: the speculative configuration of a serving engine for an MoE model on given hardware."""

from __future__ import annotations

import contextlib
import json
import sys

from simmoe.errors import SimmoeError


def register(sub) -> None:
    from simmoe.tune.run import BACKENDS, DEFAULT_BUDGET_S
    from simmoe.tune.space import ENGINES

    p = sub.add_parser(
        "tune", help="Search an engine's speculative flags for a model on given hardware (synthetic prediction)",
        description="Search the speculative-decoding configurations a serving engine exposes (SGLang's EAGLE-3 "
        "tree, vLLM's chain, llama.cpp's draft flags) by successive halving over synthetic traces of a "
        "workload preset (or on a given trace) replayed on a hardware profile; print the best, their flags, "
        "and why (a per-token time breakdown of the best, the engine's default and AR).  Every number is a "
        "prediction, on synthetic traces unless a recorded trace is given.  Ctrl-C prints the best found so "
        "far (exit 130).  docs/tune.md")
    p.add_argument("--hardware", required=True, metavar="PROFILE",
                   help="a profile, e.g. qwen3-30b-a3b@h100-sxm:tp2 (simmoe models); with --engine llama.cpp "
                        "a CPU-expert profile MODEL[/FORMAT]@GPU[+LINK]+CPU[~PLACEMENT] searches the placement "
                        "(--n-cpu-moe, -cmoe, --moe-cache-mib)")
    p.add_argument("--workload", default="mt_bench", metavar="PRESET|TRACE",
                   help="a synthetic preset (default mt_bench; simmoe synth) or a trace file (.parquet)")
    p.add_argument("--engine", default="sglang", choices=ENGINES, help="the serving engine (default sglang)")
    p.add_argument("--algorithm", default=None,
                   help="the engine's speculative algorithm (default its EAGLE-3 or draft algorithm; AR)")
    p.add_argument("--selections", default=None,
                   help="comma-separated selections to search (SGLang: eagle3,evict; default all the engine's)")
    p.add_argument("--batch", type=int, default=1, help="concurrent requests (default 1)")
    p.add_argument("--budget", default=f"{DEFAULT_BUDGET_S:g}s",
                   help=f"time budget of the search, e.g. 60s or 2m (default {DEFAULT_BUDGET_S:g}s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sample and the traces (default 0)")
    p.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--backend", default="processes", choices=BACKENDS,
                   help="where evaluations run: forked processes (default) or Ray tasks (the 'ray' extra; a local "
                        "runtime of --workers CPUs, or the cluster at --address)")
    p.add_argument("--address", default=None, metavar="ADDR",
                   help="with --backend ray: an existing cluster ('auto', 'ray://host:10001')")
    p.add_argument("--measured", default=None, metavar="K=V,...",
                   help="one measured point of yours: topk=..,steps=..,draft_tokens=..,accept_len=..,"
                        "tokens_per_s=..,vanilla_tokens_per_s=.. (docs/tune.md)")
    p.add_argument("--top", type=int, default=5, help="configurations listed (default 5)")
    p.add_argument("--json", default=None, metavar="FILE|-", help="write the result as JSON")
    p.add_argument("--figure", default=None, metavar="PATH", help="the heat map as a figure (.png, .svg, .pdf)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def _progress(disabled: bool):
    from rich.console import Console

    from simmoe.progress import bar

    console = Console(stderr=True)
    if disabled or not console.is_terminal:
        return contextlib.nullcontext(None)
    return bar(False, 6, "evaluations", console=console)


def run(args) -> int:
    from simmoe.atomicio import check_outputs, write_text_atomic
    from simmoe.interrupt import exit_status, pause_point, what
    from simmoe.tune import output
    from simmoe.tune.calibrate import parse_measured
    from simmoe.tune.run import parse_budget, run_tune

    budget = parse_budget(args.budget)
    if args.top < 1:
        raise SimmoeError(f"--top {args.top}: must be at least 1")
    check_outputs([("--json", args.json), ("--figure", args.figure)], stdout=("--json",),
                  suffixes={"--figure": (".png", ".svg", ".pdf")})
    measured = parse_measured(args.measured) if args.measured else None
    selections = tuple(x.strip() for x in args.selections.split(",") if x.strip()) if args.selections else None
    with _progress(args.no_progress) as bar:
        task = bar.add_task("tune", total=None) if bar is not None else None

        def progress(done, planned):
            if bar is not None:
                bar.update(task, completed=done, total=planned)

        outcome = run_tune(hardware=args.hardware, workload=args.workload, engine=args.engine,
                           algorithm=args.algorithm, batch=args.batch, budget_s=budget, seed=args.seed,
                           workers=args.workers, backend=args.backend, address=args.address,
                           selections=selections,
                           measured=measured, progress=progress,
                           on_rung=lambda r: pause_point(f"tune-rung-{r}"))
    text = output.text(outcome, top=args.top)
    if args.json != "-":
        print(text)
    if args.json:
        doc = json.dumps(output.to_json(outcome), indent=2, default=float)
        if args.json == "-":
            print(doc)
        else:
            write_text_atomic(args.json, doc + "\n")
    if args.figure and outcome.search.ranking:
        output.write_figure(outcome, args.figure)
    if outcome.search.interrupted:
        print(f"simmoe tune: {what()}: the best configuration found so far is shown above", file=sys.stderr)
        return exit_status()
    return 0
