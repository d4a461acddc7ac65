"""`simmoe sweep`: replay a grid of configurations in parallel into one table."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from simmoe.errors import SimmoeError


def _list(kind, text: str, convert):
    items = [x.strip() for x in str(text).split(",") if x.strip()]
    if not items:
        raise SimmoeError(f"--{kind}: empty list")
    out = []
    for x in items:
        try:
            out.append(convert(x))
        except ValueError:
            raise SimmoeError(f"--{kind}: bad value {x!r}") from None
    return tuple(dict.fromkeys(out))


def register(sub) -> None:
    from simmoe.cli.replay import _selector_time_help
    from simmoe.replay.engine import DEFAULT_PROFILE, TIMING_MODELS
    from simmoe.replay.selectors import DEFAULT_SELECTORS

    p = sub.add_parser(
        "sweep", help="Replay a grid of configurations in parallel into one table",
        description="Replay every combination of traces x selectors x slots x cache policies x "
        "hardware profiles x route accuracies in worker processes and write one tidy table "
        "(CSV or parquet by the output's extension), one row per configuration, with the "
        "speedup over AR without a cache on the same trace and profile.  Ctrl-C (or SIGTERM) keeps the rows "
        "finished so far in OUT; rerunning the same command runs only the missing ones.")
    p.add_argument("traces", nargs="+", help="trace files (.parquet)")
    p.add_argument("-o", "--out", required=True, help="output table (.csv or .parquet)")
    p.add_argument("--selectors", default=",".join(DEFAULT_SELECTORS),
                   help=f"comma-separated selector names, or 'all' (default {','.join(DEFAULT_SELECTORS)})")
    p.add_argument("--slots", default="48", help="comma-separated slots per layer (default 48)")
    p.add_argument("--cache", default="lru",
                   help="comma-separated cache policies (default lru); at 0 slots there is no cache, "
                        "so the grid has one row there, with cache none")
    p.add_argument("--hardware", default=None,
                   help=f"comma-separated profile names or paths (default {DEFAULT_PROFILE}; for a trace it "
                        "cannot replay, the physical profile of the trace's model, as simmoe replay)")
    p.add_argument("--route-accuracy", default="1", help="comma-separated accuracies (default 1)")
    p.add_argument("--selector-ms", default=None, metavar="X|measured", help=_selector_time_help())
    p.add_argument("--selector-clock", default="wall", choices=("wall", "cpu"),
                   help="clock of the measured selector time: wall (default, as the paper) or the "
                        "selecting thread's CPU time (not inflated by other processes)")
    p.add_argument("--timing", default="event", choices=TIMING_MODELS,
                   help="forward timing model (default event; docs/replay.md)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of route prediction and timing draws (default 0)")
    p.add_argument("--requests", type=int, default=None, metavar="N",
                   help="replay only the first N requests of each trace")
    p.add_argument("--ddd-threshold", type=float, default=0.3,
                   help="ddd: stop drafting when a level's path-probability mass is below this (default 0.3)")
    p.add_argument("--coverage-rho", type=float, default=0.7,
                   help="coverage: fraction of the top-K probability mass to verify (default 0.7)")
    p.add_argument("--draft-max", type=int, default=16, help="llama-chain: most draft tokens (default 16)")
    p.add_argument("--draft-min", type=int, default=0, help="llama-chain: shorter chains are not verified (default 0)")
    p.add_argument("--draft-p-min", type=float, default=0.75,
                   help="llama-chain: stop the chain below this draft probability (default 0.75)")
    p.add_argument("--drafter", default=None, metavar="A,B,...",
                   help="comma-separated drafters (simmoe synth --drafter): each trace's workload under each; a "
                        "synthetic trace is drafted again with the others' pools and acceptance (the same seed, "
                        "requests and text), a recorded one is refused under another drafter (default: each "
                        "trace's own drafter)")
    p.add_argument("--drafter-param", action="append", default=None, metavar="KEY=VALUE",
                   help="a drafter parameter (repeatable), given to every drafter of --drafter that has it, "
                        "e.g. draft_model=NAME for llama-chain")
    p.add_argument("--workers", type=int, default=None,
                   help="worker processes (default: the number of CPUs; with --engine ray and no "
                        "--address, the CPUs of the local Ray runtime)")
    p.add_argument("--engine", default="local", choices=("local", "ray"),
                   help="local worker processes (default) or a Ray cluster (the 'ray' extra)")
    p.add_argument("--address", default=None, metavar="ADDR",
                   help="with --engine ray: an existing cluster ('auto', 'ray://host:10001'); "
                        "default: start a local Ray runtime")
    p.add_argument("--overwrite", action="store_true",
                   help="recompute every configuration (default: keep the rows already in OUT and "
                        "run only the missing ones)")
    p.add_argument("--show", type=int, default=40, metavar="N",
                   help="rows of the summary printed after the sweep (default 40; the file has all)")
    p.add_argument("--quiet", action="store_true", help="no summary table, only the last line")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args) -> int:
    from simmoe.sweep.grid import SweepInterrupted, SweepWorkerDied

    grid, configs, workers = _setup(args)
    old, todo = _resume(args, configs)
    try:
        frame, failures = _run_todo(args, grid, todo, workers) if todo else (old, [])
    except SweepInterrupted as stop:  # SIGINT or SIGTERM: one line, 130 or 143
        print(f"simmoe sweep: {stop.what}; {_keep(args, old, stop.frame, stop.total)}", file=sys.stderr)
        return stop.status
    except SweepWorkerDied as died:
        raise SimmoeError(f"{died}; {_keep(args, old, died.frame, died.total, rest='')}") from None
    if todo and old is not None and len(old):
        import pandas as pd

        frame = pd.concat([old, frame], ignore_index=True) if len(frame) else old
    if frame is not None and len(frame):
        from simmoe.sweep.grid import write_table

        write_table(frame, args.out)
    synthetic = frame is not None and bool(len(frame)) and bool(frame["synthetic"].any())
    if frame is not None and len(frame) and not args.quiet:
        print_summary(frame, limit=args.show)
    print(f"{len(configs) - len(failures)} configurations -> {args.out}"
          + (" (SYNTHETIC traces among the inputs: results are synthetic)" if synthetic else ""))
    return _report_failures(failures, len(configs), args.out) if failures else 0


def _report_failures(failures, total: int, out) -> int:
    """Failed configurations: one line and exit 2 when each was refused as bad input (a plugin that
    raises, a setting the replay refuses: rerunning would fail the same way); otherwise every failure,
    one line each, and exit 1 (a rerun runs only the missing ones)."""
    if all(_bad_input(f.error) for f in failures):
        first = failures[0]
        done = total - len(failures)
        raise SimmoeError(f"{_what(first.trace, first.config)}: {first.error.partition(': ')[2]}"
                          + (f" ({len(failures)} of {total} configurations failed"
                             + (f"; {done} finished, kept in {out})" if done else ")") if total > 1 else ""))
    for f in failures:
        print(f"sweep: failed: {_what(f.trace, f.config)}: {f.error}", file=sys.stderr)
    print(f"sweep: {len(failures)} configuration(s) failed; a rerun runs only the missing ones",
          file=sys.stderr)
    return 1


def _bad_input(error: str) -> bool:
    """Whether a failure's ``Type: message`` (as :func:`simmoe.sweep.grid.replay_task` reports it) is a
    :class:`SimmoeError`, i.e. bad input rather than a fault of simmoe."""
    names, todo = set(), [SimmoeError]
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return error.partition(": ")[0] in names


def _setup(args):
    """Every check before any work: ``(grid, configs, workers)``."""
    import os

    from simmoe.cli.checks import check_seed
    from simmoe.cli.replay import parse_selector_ms
    from simmoe.replay.selectors import llama_chain_options, parse_selectors
    from simmoe.sweep.grid import Grid, cached_trace, check_output_path, split_key

    check_output_path(args.out, inputs=args.traces)
    check_seed(args.seed)
    if args.address is not None and args.engine != "ray":
        raise SimmoeError("--address needs --engine ray")
    if args.engine == "ray":
        from simmoe.replay.ray_runtime import require_ray

        require_ray()
    for t in args.traces:
        if not Path(t).is_file():
            raise SimmoeError(f"no such trace file: {t}")
    workers = args.workers if args.workers is not None else (os.cpu_count() or 1)
    if workers < 1:
        raise SimmoeError(f"--workers must be at least 1, got {workers}")
    for t in args.traces:  # a bad trace fails here, with one line, not in a worker
        cached_trace(str(t))
    drafter_axis = _drafter_axis(args)
    for key in Grid(traces=tuple(args.traces), drafters=drafter_axis).trace_keys():
        try:   # each workload under each drafter made (or refused) before any work
            cached_trace(key)
        except SimmoeError as exc:
            raise SimmoeError(f"{Path(split_key(key)[0]).name}: {exc}") from None
    hardware, pairs = _hardware_axis(args)
    ms = parse_selector_ms(args.selector_ms)
    grid = Grid(
        traces=tuple(args.traces), selectors=tuple(parse_selectors(args.selectors)),
        slots=_list("slots", args.slots, int), caches=_list("cache", args.cache, str), hardware=hardware,
        route_accuracy=_list("route-accuracy", args.route_accuracy, float),
        selector_ms=ms, selector_clock=args.selector_clock,
        timing=args.timing, seed=args.seed, requests=args.requests,
        options=tuple(sorted({"ddd_threshold": args.ddd_threshold, "coverage_rho": args.coverage_rho,
                              **llama_chain_options(args.draft_max, args.draft_min, args.draft_p_min)}.items())),
        drafters=drafter_axis,
    )
    configs = grid.configs()  # validates every axis (and loads every profile) before any work
    if pairs is not None:     # each trace on the profile that follows it
        configs = [(t, c) for t, c in configs if (split_key(t)[0], c.hardware) in pairs]
    _check_configs(configs, several=len(args.traces) > 1)
    return grid, configs, workers


def _check_configs(configs, *, several: bool) -> None:
    """What ``simmoe replay`` refuses, refused here before any work, in one line: a profile of another
    model than its trace's, a combination of stages without meaning, a cache policy that cannot serve,
    a drafter whose drafting the profile cannot time."""
    from simmoe.drafters import with_trace_drafter
    from simmoe.hardware.model_check import check_profile_model
    from simmoe.hardware.profile import load_profile
    from simmoe.replay.engine import check_setting
    from simmoe.sweep.grid import cached_trace, split_key

    profiles: dict = {}
    drafting: set = set()
    for path, cfg in configs:
        trace = cached_trace(str(path))
        if cfg.hardware not in profiles:
            profiles[cfg.hardware] = load_profile(cfg.hardware)
        try:
            check_profile_model(trace.geometry, profiles[cfg.hardware], cfg.hardware)
            if (path, cfg.hardware) not in drafting:
                with_trace_drafter(trace, profiles[cfg.hardware])
                drafting.add((path, cfg.hardware))
            check_setting(trace, cfg, profiles[cfg.hardware])
        except SimmoeError as exc:
            name = Path(split_key(path)[0]).name
            raise SimmoeError(f"{name}: {exc}" if several else str(exc)) from None


def _drafter_axis(args):
    """``--drafter`` and ``--drafter-param`` as the grid's drafter axis: each drafter with the parameters it
    declares; a parameter no drafter of the list declares is refused."""
    if args.drafter is None:
        if args.drafter_param:
            raise SimmoeError("--drafter-param: name the drafters it is for (--drafter A,B,...)")
        return ()
    from simmoe.drafters import build, parse_params
    from simmoe.drafters.workload import declared

    names = _list("drafter", args.drafter, str)
    given = parse_params(args.drafter_param)
    axis, used = [], set()
    for name in names:
        params = {k: v for k, v in given.items() if k in declared(name)}
        build(name, params)                       # its own checks, one line
        used.update(params)
        axis.append((name, tuple(sorted(params.items()))))
    unused = sorted(set(given) - used)
    if unused:
        raise SimmoeError(f"--drafter-param {unused[0]}: no drafter of --drafter {args.drafter} has it")
    return tuple(axis)


def _hardware_axis(args):
    """``(profiles, pairs)``: the --hardware list and None, or without it each trace's own profile
    (:mod:`simmoe.cli.defaults`) and the (trace, profile) pairs to keep."""
    from simmoe.hardware.profile import load_profile
    from simmoe.sweep.grid import cached_trace

    if args.hardware is not None:
        names = _list("hardware", args.hardware, str)
        for hw in names:
            load_profile(hw)
        return names, None
    from simmoe.cli.defaults import profile_for_trace

    chosen = {str(t): profile_for_trace(cached_trace(str(t)), say=lambda s, t=t: print(
        f"simmoe sweep: {Path(t).name}: {s}", file=sys.stderr))[0] for t in args.traces}
    return tuple(dict.fromkeys(chosen.values())), set(chosen.items())


def _resume(args, configs):
    """``(old table or None, configurations still to run)``: a rerun keeps the rows already in OUT."""
    from simmoe.sweep.grid import config_key, read_table, row_keys

    if not Path(args.out).exists() or args.overwrite:
        return None, configs
    old = read_table(args.out)
    have = row_keys(old)
    todo = [(p, c) for p, c in configs if config_key(p, c) not in have]
    if len(todo) < len(configs):
        print(f"sweep: {len(configs) - len(todo)} of {len(configs)} configurations already in "
              f"{args.out}; running {len(todo)}", file=sys.stderr)
    return old, todo


def _run_todo(args, grid, todo, workers):
    """``(frame, failures)`` of the configurations ``todo`` on the chosen engine."""
    if args.engine == "ray":
        from simmoe.sweep.ray_engine import run_sweep_ray

        def report(done, total, path, cfg, row, error):
            state = (f"decode {row['decode_tps']:.2f} tok/s" if error is None else f"FAILED: {error}")
            print(f"sweep: [{done}/{total}] {_what(path, cfg)}: {state}", file=sys.stderr, flush=True)

        return run_sweep_ray(grid, configs=todo, address=args.address, num_cpus=args.workers,
                             on_result=report)
    from simmoe.sweep.grid import run_sweep

    with _progress_bar(args.no_progress) as bar:
        return run_sweep(grid, workers=workers, progress=bar, configs=todo)


@contextlib.contextmanager
def _progress_bar(disabled: bool):
    """A ``progress(done, total)`` callback drawing one transient bar on stderr (a terminal only)."""
    from rich.console import Console

    console = Console(stderr=True)
    if disabled or not console.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TextColumn("tasks"),
                  TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task("sweep", total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def _keep(args, old, frame, total: int, *, rest: str = ": the same command runs the rest") -> str:
    """Keep the rows finished so far (with those already in OUT) for a rerun; what became of them, briefly."""
    from simmoe.sweep.grid import write_table

    kept = len(frame)
    if old is not None and len(old):
        import pandas as pd

        frame = pd.concat([old, frame], ignore_index=True) if kept else old
    if kept and args.overwrite and Path(args.out).exists():   # the previous rows are not replaced by a part
        return (f"{kept} of {total} configurations finished, not written: --overwrite leaves {args.out} "
                "as it was")
    if not kept:
        return f"0 of {total} configurations finished, nothing written"
    write_table(frame, args.out)
    return f"{kept} of {total} configurations kept in {args.out}{rest}"


SUMMARY_COLUMNS = (  # (column of the table, header, format)
    ("decode_tps", "decode tok/s", "{:.2f}"), ("speedup", "speedup", "{:.2f}x"),
    ("committed", "committed", "{:.2f}"), ("ms_per_cycle", "ms/cycle", "{:.1f}"),
    ("h2d_per_token", "H2D/token", "{:.1f}"),
)


def print_summary(frame, *, limit: int = 40) -> None:
    """The sweep's rows, compactly: what varies across the grid, then the main counters."""
    from rich import box
    from rich.table import Table

    from simmoe.cli.console import make_console

    axes = [c for c in ("trace", "drafter", "selector", "slots", "cache", "hardware", "route_accuracy")
            if c in frame.columns and (c in ("selector", "drafter") or frame[c].nunique() > 1)]
    shown = frame.head(limit)
    title = "sweep" + (" (SYNTHETIC traces)" if bool(frame["synthetic"].any()) else "")
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    for a in axes:
        table.add_column(a.replace("_", " "), no_wrap=True)
    for _, head, _ in SUMMARY_COLUMNS:
        table.add_column(head, justify="right", no_wrap=True)
    for _, row in shown.iterrows():
        cells = [Path(str(row[a])).stem if a == "trace" else f"{row[a]}" for a in axes]
        for key, _, fmt in SUMMARY_COLUMNS:
            v = row.get(key)
            cells.append("–" if v is None or v != v else fmt.format(v))
        table.add_row(*cells)
    console = make_console(width=200)
    console.print(table)
    if len(frame) > limit:
        console.print(f"({len(frame) - limit} more rows in the table file; --show N prints more)")


def _what(path, cfg) -> str:
    """One configuration, briefly."""
    return (f"{Path(path).name} {cfg.selector} slots={cfg.slots} {cfg.cache} {cfg.hardware} "
            f"acc={cfg.route_accuracy:g}")
