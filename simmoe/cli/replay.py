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
from dataclasses import dataclass, replace

from simmoe.cli.drafter_args import add_drafter_arguments, replay_profile
from simmoe.cli.provenance import provenance_text
from simmoe.cli.replay_cpu import default_columns, fixed_placement, regime_of  # experts on the CPU
from simmoe.errors import SimmoeError
from simmoe.progress import bar as progress_bar

# Every column the table can show: key -> (header, format, legend).  Headers
# break over two lines so that the default table fits 100 columns.
COLUMNS = {
    "decode_tps": ("decode\ntok/s", "{:.2f}",
                   "output tokens per second of decoding (prefill excluded; SpecFit Eq. 10)"),
    "speedup": ("speedup", "{:.2f}x", "decode tok/s over AR without a cache on the same trace and profile"),
    "committed": ("committed\n/cycle", "{:.2f}",
                  "tokens committed per verification cycle (accepted drafts + 1)"),
    "mat": ("Mat", "{:.2f}", "mean accepted tokens per cycle (accepted drafts + 1, uncapped; EVICT Table 2)"),
    "draft_nodes": ("draft\nnodes", "{:.2f}", "draft tokens verified per cycle (the selected subtree)"),
    "ms_per_cycle": ("ms/\ncycle", "{:.1f}", "time of one cycle: drafting + selection + target forward"),
    "h2d_per_token": ("H2D/\ntoken", "{:.1f}",
                      "expert copies host-to-device per output token, prefill included"),
    "hit_rate": ("hit\nrate", "{:.1%}", "expert-cache hits over all experts a forward demands"),
    "cycles": ("cycles", "{:,d}", "verification cycles (AR: one per token)"),
    "stopped_early_pct": ("stopped\nearly", "{:.1f}%",
                          "cycles that drafted fewer levels than the pool holds (adaptive depth)"),
    "drafted_levels": ("drafted\nlevels", "{:.2f}", "tree levels drafted per cycle"),
    "selector_ms": ("selector\nms", "{:.3f}", "selector time charged per cycle"),
    "request_tps": ("request\ntok/s", "{:.2f}", "output tokens per second including prefill"),
    "latency_p50_ms": ("latency\np50 ms", "{:,.0f}", "--batch: median request latency, admission to last token"),
    "latency_p99_ms": ("latency\np99 ms", "{:,.0f}", "--batch: 99th percentile of the request latency"),
    "expert_reads_per_token": ("experts\nread/tok", "{:.1f}",
                               "resident: expert weights read from HBM per output token, prefill included"),
    "expert_mb_per_token": ("expert\nMB/tok", "{:,.0f}",
                            "resident: megabytes of expert weights read from HBM per output token"),
}
COLUMNS.update(__import__("simmoe.cli.replay_prefetch", fromlist=["COLUMNS"]).COLUMNS)  # --prefetch
COLUMNS.update(__import__("simmoe.cli.replay_cpu", fromlist=["COLUMNS"]).COLUMNS)  # experts on the CPU
DEFAULT_COLUMNS = ("decode_tps", "speedup", "committed", "draft_nodes", "ms_per_cycle",
                   "h2d_per_token", "hit_rate")
WIDE_COLUMNS = DEFAULT_COLUMNS + ("mat", "cycles", "stopped_early_pct", "drafted_levels", "selector_ms")
# the resident regime has no cache: what it reads from HBM instead of copies and hits
RESIDENT_SWAP = {"h2d_per_token": "expert_reads_per_token", "hit_rate": "expert_mb_per_token"}
NO_DRAFTER = ("draft_nodes", "drafted_levels", "selector_ms", "stopped_early_pct")  # "–" for AR


def _flat(header: str) -> str:
    """A two-line header as one name: "ms/\\ncycle" -> "ms/cycle", "draft\\nnodes" -> "draft nodes"."""
    first, _, second = header.partition("\n")
    return first + ("" if not second or first.endswith("/") or second.startswith("/") else " ") + second


# where the regime changes what a column means (the resident regime's AR has no cache to be without)
RESIDENT_LEGEND = {"speedup": "decode tok/s over AR on the same trace and profile"}


def legend(columns, resident: bool = False) -> str:
    """One line per column: what its number means (in the regime's words)."""
    heads = [_flat(COLUMNS[c][0]) for c in columns]
    width = max(map(len, heads))
    text = {c: (RESIDENT_LEGEND.get(c) if resident else None) or COLUMNS[c][2] for c in columns}
    return "\n".join(f"  {h:<{width}}  {text[c]}" for h, c in zip(heads, columns, strict=True))


def parse_columns(spec: str | None, wide: bool, resident: bool = False) -> tuple[str, ...]:
    """``--columns a,b`` (keys of :data:`COLUMNS`), ``--wide``, or the default set (for the regime)."""
    if spec is None:
        cols = WIDE_COLUMNS if wide else DEFAULT_COLUMNS
        return tuple(RESIDENT_SWAP.get(c, c) for c in cols) if resident else cols
    names = tuple(dict.fromkeys(n.strip() for n in spec.split(",") if n.strip()))
    if not names:
        raise SimmoeError("--columns: no column given")
    for n in names:
        if n not in COLUMNS:
            raise SimmoeError(f"--columns: unknown column {n!r}; known: {', '.join(COLUMNS)}")
    return names


def _selector_time_help() -> str:
    return ("selector time charged per cycle: a number of ms for every selector, or 'measured' "
            "(wall clock or --selector-clock; varies from run to run).  Default: the exact "
            "searches (specfit, specfit-full, optimal, unconstrained) are charged the profile's "
            "cycle.selector_ms (SpecFit §4.6's median), the top-K rules 0 ms, so that output is "
            "reproducible byte for byte")


def _description() -> str:
    from simmoe.replay import plugins

    listed = plugins.summaries("selector")   # a plugin that cannot be loaded says why, in its line
    width = 2 + max(len(n) for n, _ in listed)
    return ("Replay a trace under each selector with an expert cache and print the "
            "paper's counters per selector.  Speedup is over AR without a cache on the same trace "
            "and profile.\n\nSelectors (registered; an installed plugin's name or module:Name also works):\n"
            + "\n".join(f"  {n:<{width}}{summary}" for n, summary in listed))


def _lazy_help():
    """``--help`` that lists the selectors only when it is asked for (a broken plugin cannot break other commands)."""
    import argparse

    class LazyHelp(argparse.Action):
        def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
            super().__init__(option_strings, dest, default=default, nargs=0, help=help)

        def __call__(self, parser, namespace, values, option_string=None):
            parser.description = _description()
            parser.print_help()
            parser.exit()

    return LazyHelp


def register(sub) -> None:
    import argparse

    from simmoe.replay import plugins
    from simmoe.replay.caches import ADMISSIONS
    from simmoe.replay.engine import DEFAULT_PROFILE, TIMING_MODELS
    from simmoe.replay.selectors import DEFAULT_SELECTORS

    p = sub.add_parser(
        "replay",
        help="Replay a trace under selectors, cache and hardware profile",
        add_help=False,   # -h below: the selector list is made when asked, so no plugin is imported before
        epilog="Columns (default set; --wide adds cycles, stopped early, drafted levels, selector ms; "
               "--columns picks any):\n" + legend(tuple(COLUMNS)),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-h", "--help", action=_lazy_help(), help="show this help message and exit")
    p.add_argument("trace", help="trace file (.parquet)")
    p.add_argument("--selectors", default=",".join(DEFAULT_SELECTORS),
                   help="comma-separated selector names, or 'all' "
                        f"(default: {','.join(DEFAULT_SELECTORS)})")
    p.add_argument("--slots", type=int, default=48,
                   help="expert cache slots per layer; 0 = no cache (default 48)")
    p.add_argument("--cache", default="lru", metavar="POLICY",
                   help=f"expert cache policy: {plugins.known('cache')}, an installed plugin's name or "
                        "module:Name (default lru; ignored when experts are resident)")
    p.add_argument("--cache-experts", type=int, default=None, metavar="E",
                   help="one cache budget of E experts across all layers, spread as the policy ranks them "
                        "(instead of --slots per layer; docs/caches.md)")
    p.add_argument("--cache-mib", type=float, default=None, metavar="M",
                   help="the same budget in MiB of expert weights (M MiB / the trace's bytes per expert)")
    p.add_argument("--admission", default="forced", choices=ADMISSIONS,
                   help="forced: every missed expert takes a cache slot, as engines' expert caches do (default); "
                        "bypass: a missed expert the policy ranks low is used and dropped (docs/caches.md)")
    p.add_argument("--hardware", default=None,
                   help=f"hardware profile name or path (default {DEFAULT_PROFILE}; for a trace it cannot replay, "
                        "the physical profile of the trace's model on the same GPU and link, said in one line)")
    add_drafter_arguments(p, "replay")
    p.add_argument("--route-accuracy", type=float, default=1.0, metavar="A",
                   help="accuracy of the simulated route predictor the selectors see "
                        "(SpecFit §4.6); 1 = exact routes (default)")
    p.add_argument("--selector-ms", default=None, metavar="X|measured", help=_selector_time_help())
    p.add_argument("--selector-clock", default="wall", choices=("wall", "cpu"),
                   help="clock of the measured selector time: wall (default, as the paper) or the "
                        "selecting thread's CPU time (not inflated by other processes)")
    p.add_argument("--timing", default="event", choices=TIMING_MODELS,
                   help="forward timing model (default event)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of route prediction, timing and (at --temperature > 0) the target's draws")
    p.add_argument("--temperature", default="0", metavar="T",
                   help="0 (default): greedy verification; T > 0: sampled verification (EVICT §2.1 Eq. 3), "
                        "which needs a trace with target distributions at T (hwprobe record / simmoe synth "
                        "--temperature T); adds the Mat column")
    p.add_argument("--requests", type=int, default=None, metavar="N",
                   help="replay only the first N requests")
    p.add_argument("--batch", type=int, default=1, metavar="B",
                   help="decode B requests at once with continuous batching (1 to the number of requests; "
                        "default 1): one forward per step over the batch's tokens and expert union; "
                        "throughput is aggregate, latency percentiles per request (docs/replay.md)")
    from simmoe.cli.replay_prefetch import add_arguments as add_prefetch_arguments

    add_prefetch_arguments(p)  # --prefetch, --timeline
    p.add_argument("--ddd-threshold", type=float, default=0.3,
                   help="ddd: stop drafting when a level's path-probability mass is below this")
    p.add_argument("--coverage-rho", type=float, default=0.7,
                   help="coverage: fraction of the top-K probability mass to verify")
    p.add_argument("--draft-max", type=int, default=16, help="llama-chain: most draft tokens (llama.cpp's)")
    p.add_argument("--draft-min", type=int, default=0, help="llama-chain: shorter chains are not verified")
    p.add_argument("--draft-p-min", type=float, default=0.75, help="llama-chain: stop below this draft probability")
    p.add_argument("--wide", action="store_true", help="show every column")
    p.add_argument("--columns", metavar="A,B,...", default=None,
                   help="columns to show, in order (keys: " + ", ".join(COLUMNS) + ")")
    p.add_argument("--json", metavar="FILE",
                   help="write the results as JSON ('-' = stdout); identical byte for byte between runs "
                        "unless --selector-ms measured")
    p.add_argument("--csv", metavar="FILE", help="write the results as CSV ('-' = stdout)")
    p.add_argument("--cycles", metavar="FILE", help="write every cycle of every selector (parquet)")
    p.add_argument("--workers", type=int, default=None,
                   help="worker processes for the selectors (default: the number of CPUs)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args) -> int:
    import contextlib

    from simmoe.hardware.profile import profile_line
    from simmoe.replay.engine import ar_baseline

    # plugin code may print: while it runs, with the result bound for stdout, what it prints goes to stderr
    to_stdout = "-" in (args.json, args.csv)
    with contextlib.redirect_stdout(sys.stderr) if to_stdout else contextlib.nullcontext():
        st = _setup(args)
        configs = [ar_baseline(st.base)] + [selector_config(st.base, n, st.fixed_ms, st.profile) for n in st.names]
        console = _console(stderr=True)
        (console if st.to_stdout else _console(stderr=False)).print(provenance_text(st.trace, args.trace,
                                                                                   st.base.requests))
        out = _replay_all(st, configs, args, console)
    rows, baseline = _rows(configs, out)
    meta = {
        "trace": str(args.trace), "synthetic": bool(st.trace.is_synthetic),
        "provenance": st.trace.meta.get("provenance", {}), "config": config_dict(st.base, st.names),
        "regime": regime_of(st.profile),
        "selector_time": _selector_time_text(st.fixed_ms, st.profile, st.base.selector_clock, st.names),
        "baseline": {"selector": "ar", "slots": 0, "cache": "none", **baseline},
        **({"batch": st.base.batch} if st.base.batch > 1 else {}),
        "prefetch": st.base.prefetch,
    }
    if st.prefetch is not None:
        st.prefetch.finish(configs, out, meta)
    _write_outputs(args, meta, rows, out[1:], st.base, st.trace.is_synthetic)
    if not st.to_stdout:
        stdout = _console(stderr=False)
        table = results_table(rows, st.base, baseline, st.trace.is_synthetic, st.columns,
                              _selector_time_text(st.fixed_ms, st.profile, st.base.selector_clock, st.names)
                              + f"\nprofile {profile_line(st.profile)}", batch=st.base.batch,
                              resident=st.profile.resident)
        widen_for(stdout, table)
        stdout.print(table)
        stdout.print(legend(st.columns, st.profile.resident), highlight=False)
        if any(r["oracle"] for r in rows):
            stdout.print(ORACLE_NOTE, highlight=False)
    return 0


@dataclass
class _Setup:
    names: list
    base: object
    fixed_ms: object
    profile: object
    trace: object
    columns: tuple
    prefetch: object
    workers: int
    to_stdout: bool


def _setup(args) -> _Setup:
    """Every check before any work: names, numbers, output paths, profile, trace, the setting's meaning."""
    import os

    from simmoe.cli.checks import check_replay_args
    from simmoe.cli.defaults import follow_trace
    from simmoe.hardware.model_check import check_profile_model
    from simmoe.hardware.profile import load_profile
    from simmoe.replay.config import ReplayConfig, check_batch
    from simmoe.replay.engine import check_setting
    from simmoe.replay.selectors import parse_selectors
    from simmoe.trace.io import read_trace
    from simmoe.trace.sampling import check_replay_temperature, check_temperature_value

    names = parse_selectors(args.selectors)
    temperature = check_temperature_value(args.temperature)
    fixed_ms = parse_selector_ms(args.selector_ms)
    base = ReplayConfig(selector=names[0], slots=args.slots, cache=args.cache, hardware=args.hardware,
                        route_accuracy=args.route_accuracy, selector_ms=fixed_ms if fixed_ms != "model" else None,
                        selector_clock=args.selector_clock, timing=args.timing, seed=args.seed,
                        requests=args.requests, options=_options(args), temperature=temperature,
                        batch=args.batch, prefetch=args.prefetch, cache_budget=args.cache_experts,
                        admission=args.admission).validate()
    workers = args.workers if args.workers is not None else (os.cpu_count() or 1)
    if workers < 1:
        raise SimmoeError(f"--workers must be at least 1, got {workers}")
    check_replay_args(args)  # the seed and every output path, before any work
    check_batch(args.batch, args.batch)
    profile = load_profile(args.hardware) if args.hardware is not None else None
    trace = read_trace(args.trace)
    check_replay_temperature(trace, temperature, args.trace)
    profile, base = follow_trace(profile, trace, base, say=lambda s: print(f"simmoe replay: {s}",
                                                                                  file=sys.stderr))
    check_profile_model(trace.geometry, profile, base.hardware)
    profile = replay_profile(trace, profile, args)   # drafting as the trace's drafter drafts
    from simmoe.cli.checks import cache_budget

    base = replace(base, cache_budget=cache_budget(args.cache_experts, args.cache_mib, trace, cache=base.cache,
                                                   resident=profile.resident)).validate()
    if base.requests is not None and base.requests > len(trace.requests):
        raise SimmoeError(f"--requests {base.requests}: the trace has only {len(trace.requests)} "
                          f"request{'s' if len(trace.requests) != 1 else ''}")
    check_batch(args.batch, len(trace.requests) if base.requests is None else base.requests)
    for n in names:
        check_setting(trace, replace(base, selector=n), profile)
    from simmoe.cli.replay_prefetch import setup as prefetch_setup

    prefetch = prefetch_setup(args, names, base, profile)
    return _Setup(names, fixed_placement(base, profile), fixed_ms, profile, trace,
                  _columns(args, base, profile, prefetch), prefetch, workers, "-" in (args.json, args.csv))


def _columns(args, base, profile, prefetch) -> tuple:
    """The table's columns: ``--columns``, or the default (or wide) set for the regime and options."""
    columns = default_columns(parse_columns(args.columns, args.wide, resident=profile.resident), args.columns, profile)
    if args.columns is not None:
        return columns
    if base.temperature > 0 and "mat" not in columns:
        i = columns.index("committed") + 1
        columns = columns[:i] + ("mat",) + columns[i:]
    if prefetch is not None and prefetch.policy != "none":
        columns = columns + prefetch.columns
    if base.batch > 1:
        columns = columns + ("latency_p50_ms", "latency_p99_ms")
    return columns


def _replay_all(st: _Setup, configs, args, console) -> list:
    from simmoe.replay.engine import replay_all

    R = len(st.trace.requests) if st.base.requests is None else st.base.requests
    tokens = int(st.trace.requests.output_len[:R].sum())
    with _progress(console, disabled=args.no_progress) as progress:
        what = (f"replaying {len(st.names)} selector{'s' if len(st.names) != 1 else ''} "
                "+ AR baseline (no cache)")
        task = progress.add_task(what, total=tokens * len(configs))
        state = {"tokens": 0, "configs": 0}

        def advance(n):  # tokens replayed in this process
            state["tokens"] += n
            progress.update(task, completed=max(state["tokens"], state["configs"] * tokens))

        def done(results):  # a group finished, here or in a worker
            state["configs"] += len(results)
            advance(0)

        pf = st.prefetch
        return replay_all(st.trace, configs, {st.base.hardware: st.profile}, workers=st.workers,
                          on_done=done, progress=advance, timeline=pf is not None and pf.timeline is not None,
                          paired=pf is not None and pf.paired)


def parse_selector_ms(text):
    """``--selector-ms``: None → "model" (the default), "measured" → None, else a finite ms >= 0."""
    if text is None:
        return "model"
    if str(text).strip().lower() == "measured":
        return None
    try:
        value = float(text)
    except ValueError:
        raise SimmoeError(f"--selector-ms {text!r}: give a number of ms or 'measured'") from None
    if not (math.isfinite(value) and value >= 0):
        raise SimmoeError(f"--selector-ms {text!r}: selector time must be a finite number of ms >= 0")
    return value


def selector_config(base, name: str, fixed_ms, profile):
    """``base`` for selector ``name`` with its selector time resolved (see ``--selector-ms``)."""
    from simmoe.replay.selectors import SELECTORS

    if fixed_ms == "model":
        ms = float(profile.selector_ms) if getattr(SELECTORS[name], "uses_cost", False) else 0.0
        return replace(base, selector=name, selector_ms=ms)
    return replace(base, selector=name)


def _selector_time_text(fixed_ms, profile, clock: str, names=()) -> str:
    if fixed_ms == "model":
        from simmoe.replay import plugins

        free = [display_name(n) for n in names if not getattr(plugins.load("selector", n), "uses_cost", False)
                and not plugins.load("selector", n).__module__.startswith("simmoe.")]
        return (f"selector time: exact searches {profile.selector_ms:g} ms/cycle (profile), "
                "top-K rules 0 ms" + (f"; {', '.join(free)} 0 ms whatever it takes (no uses_cost; "
                                      "--selector-ms measured times it)" if free else ""))
    if fixed_ms is None:
        return f"selector time measured ({clock} clock; varies between runs)"
    return f"selector time fixed at {fixed_ms:g} ms"


def _rows(configs, out):
    """Table rows (one per selector, speedup over the AR baseline) and the baseline's counters."""
    from simmoe.replay.metrics import speedup

    baseline = out[0].summary()
    rows = []
    for cfg, res in zip(configs[1:], out[1:]):
        s = res.summary()
        s["speedup"] = speedup(s, baseline)
        row = {"selector": cfg.selector, "oracle": is_oracle(cfg.selector), **s}
        if res.lambda_star is not None:
            row["lambda_star"] = res.lambda_star
        rows.append(row)
    return rows, baseline


def _write_outputs(args, meta, rows, results, base, synthetic: bool) -> None:
    """``--json``, ``--csv`` and ``--cycles``, each written atomically (or to stdout)."""
    from simmoe.atomicio import write_bytes_atomic, write_text_atomic

    if args.json:
        text = json.dumps({**meta, "results": rows}, indent=2, default=_json_default)
        if args.json == "-":
            print(text)
        else:
            write_text_atomic(args.json, text + "\n")
    if args.csv:
        import pandas as pd

        df = pd.DataFrame(rows)
        df.insert(1, "synthetic", bool(synthetic))
        for key in ("slots", "cache", "hardware", "route_accuracy", "timing", "temperature"):
            df[key] = getattr(base, key)
        text = df.to_csv(index=False)
        if args.csv == "-":
            sys.stdout.write(text)
        else:
            write_text_atomic(args.csv, text)
    if args.cycles:
        import io

        import pandas as pd

        frame = pd.concat([res.cycles_frame() for res in results], ignore_index=True)
        buf = io.BytesIO()
        frame.to_parquet(buf, index=False)
        write_bytes_atomic(args.cycles, buf.getvalue())


def config_dict(base, names) -> dict:
    """The JSON's ``config``: the shared configuration, with every selector replayed (not only the first)."""
    d = base.to_dict()
    del d["selector"]
    return {"selectors": list(names), **d}


def _options(args) -> tuple:
    ddd, rho = float(args.ddd_threshold), float(args.coverage_rho)
    if not 0.0 <= ddd <= 1.0:
        raise SimmoeError(f"--ddd-threshold {args.ddd_threshold}: "
                          "the ddd threshold must be a probability mass in [0, 1]")
    if not 0.0 < rho <= 1.0:
        raise SimmoeError(f"--coverage-rho {args.coverage_rho}: the coverage rho must be a fraction in (0, 1]")
    from simmoe.replay.selectors import llama_chain_options

    llama = llama_chain_options(args.draft_max, args.draft_min, args.draft_p_min)
    return tuple(sorted({"ddd_threshold": ddd, "coverage_rho": rho, **llama}.items()))


def widen_for(console, table) -> None:
    """Let ``console`` print ``table`` at its natural width: a narrow terminal wraps, nothing is cut."""
    natural = console.measure(table, options=console.options.update_width(10_000)).maximum
    console.width = max(console.width, natural)


def _json_default(x):
    import numpy as np

    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


def _console(stderr: bool):
    from simmoe.cli.console import make_console

    return make_console(stderr=stderr, width=200)  # a file or a pipe: never squeeze the table


def _progress(console, disabled: bool):
    return progress_bar(disabled, 24, "tokens", console=console)


def format_value(key: str, fmt: str, value) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if key == "cycles":
        return fmt.format(int(value))
    return fmt.format(value)


ORACLE_NOTE = "  † an oracle: reads the target's verdicts (reads_verdicts), an upper bound no system can run"


def is_oracle(spec: str) -> bool:
    """Whether the selector reads the target's verdicts (declares ``reads_verdicts``): an upper bound."""
    from simmoe.replay import plugins

    return bool(getattr(plugins.load("selector", spec), "reads_verdicts", False))


def display_name(spec: str) -> str:
    """A selector's name in the table: a ``module:Name`` plugin by its own ``name``."""
    if ":" not in spec:
        return spec
    from simmoe.replay import plugins

    return str(plugins.load("selector", spec).name)


def setting_text(config, resident: bool, batch: int) -> str:
    """The stages a replay ran with, in words: residency, hardware, timing, verification, batch."""
    if resident:
        where = "resident experts (no cache)"
    elif config.cache_active and config.cache_budget is not None:
        where = f"{config.cache_budget} experts across layers, {config.cache} cache, {config.admission} admission"
    elif config.cache_active:
        where = f"{config.slots} slots/layer, {config.cache} cache, {config.admission} admission"
    else:
        where = "no cache"
    if not resident and config.prefetch != "none":
        where += f", prefetch {config.prefetch}"
    return (f"{where}, {config.hardware}, {config.timing if not resident else 'physical'} timing"
            + (f", temperature {config.temperature:g} (sampled, seed {config.seed})" if config.temperature > 0 else "")
            + (f", route accuracy {config.route_accuracy:g}" if config.route_accuracy < 1 else "")
            + (f", batch {batch} (continuous batching; tok/s aggregate)" if batch > 1 else ""))


def results_table(rows, config, baseline, synthetic: bool, columns=DEFAULT_COLUMNS,
                  selector_time: str = "", batch: int = 1, resident: bool = False):
    """The terminal table: one row per selector, the chosen ``columns`` (keys of COLUMNS)."""
    from rich import box
    from rich.table import Table

    title = f"{'SYNTHETIC trace: ' if synthetic else ''}{setting_text(config, resident, batch)}"
    moved = (f"{baseline['expert_reads_per_token']:.1f} experts read/token" if resident
             else f"{baseline['h2d_per_token']:.1f} H2D/token")
    caption = (f"baseline, AR{'' if resident else ' without cache'}{f' at batch {batch}' if batch > 1 else ''}: "
               f"{baseline['decode_tps']:.2f} tok/s, {baseline['ms_per_cycle']:.1f} ms/cycle, {moved}"
               + (f"\n{selector_time}" if selector_time else ""))
    table = Table(title=title, caption=caption, box=box.SIMPLE_HEAD, title_justify="left",
                  caption_justify="left")
    table.add_column("selector", no_wrap=True)
    for key in columns:
        table.add_column(COLUMNS[key][0], justify="right", no_wrap=True)
    for r in rows:
        cells = []
        for key in columns:
            v = r.get(key)
            if r["selector"] == "ar" and key in NO_DRAFTER:
                v = None  # AR has no drafter and no selector
            cells.append(format_value(key, COLUMNS[key][1], v))
        table.add_row(display_name(r["selector"]) + ("†" if r.get("oracle") else ""), *cells)
    return table
