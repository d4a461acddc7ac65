"""Wall time of `simmoe tune` and its gap to an exhaustive grid of the same space.

    python benchmarks/bench_tune.py [--hardware qwen3-30b-a3b@h100-sxm:tp2] [--workload mt_bench]
                                    [--engine sglang] [--workers 2] [--grid-workers 2] [--no-grid]
                                    [--grid-cache /tmp/tune-grid.json]
                                    [--out reports/tune-benchmark.md]

1. ``simmoe tune --hardware H --workload W --engine E --no-progress --json F``
   with its default budget, run as a fresh process (interpreter start and
   imports included): wall time; goal ≤ 60 s on this 2-core machine.
2. The exhaustive grid: every valid configuration of the same space replayed
   on the traces of the search's last rung (the workload's first 4 requests,
   the same seed; the search reaches them when its budget allows), in ``--grid-workers`` processes.  The gap is
   1 − (the tune's best) / (the grid's best), both read on those traces;
   goal ≤ 2 %.  Also reported: where the tune's best ranks in the grid.

Every tokens/s is a prediction (on SYNTHETIC traces unless ``--workload`` is a
recorded trace).  A CPU-expert profile (``--engine llama.cpp``) searches the
placement too, and its grid covers every placement the tune's space holds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def run_tune(args) -> tuple[float, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "tune.json"
        cmd = [sys.executable, "-m", "simmoe", "tune", "--hardware", args.hardware, "--workload", args.workload,
               "--engine", args.engine, "--workers", str(args.workers), "--no-progress", "--json", str(out)]
        if args.budget:
            cmd += ["--budget", args.budget]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                       stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        return wall, json.loads(out.read_text())


def grid(args, requests: int) -> list[tuple[object, dict]]:
    """Every configuration's row on the last rung's traces; cached in ``--grid-cache`` (keyed by its setting)."""
    from simmoe.tune.evaluate import Setup, evaluator
    from simmoe.tune.run import build_space, check_inputs

    # the tune's own checks and space: a CPU-expert profile's placements, a trace's pools
    algo, profile, cpu, trace_path = check_inputs(args.engine, None, args.workload, args.hardware, 1,
                                                  "processes", 1)
    setup = Setup(args.workload, args.hardware, cpu=cpu, trace_path=trace_path)
    space = build_space(args.engine, algo, setup, profile, None, {})
    cfgs = [space.make(p) for p in space.points()]
    key = f"{args.hardware} {args.workload} {args.engine} {requests}"
    cache = Path(args.grid_cache) if args.grid_cache else None
    if cache is not None and cache.is_file():
        doc = json.loads(cache.read_text())
        if doc.get("key") == key:
            by_label = doc["rows"]
            return [(c, by_label[c.label()]) for c in cfgs]
    ev = evaluator(setup, args.grid_workers)
    keys: dict = {}
    for c in cfgs:
        keys.setdefault(c.trace_key(), []).append(c)
    rows: list = []
    t0 = time.perf_counter()
    groups = list(keys.values())
    for i in range(0, len(groups), args.grid_workers):
        batch = [c for g in groups[i:i + args.grid_workers] for c in g]
        rows += list(zip(batch, ev(batch, requests)))
        print(f"grid: {len(rows)}/{len(cfgs)} configurations, {time.perf_counter() - t0:.0f} s", file=sys.stderr,
              flush=True)
    if cache is not None:
        cache.write_text(json.dumps({"key": key, "wall_s": time.perf_counter() - t0,
                                     "rows": {c.label(): r for c, r in rows}}))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hardware", default="qwen3-30b-a3b@h100-sxm:tp2")
    ap.add_argument("--workload", default="mt_bench")
    ap.add_argument("--engine", default="sglang")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--grid-workers", type=int, default=2)
    ap.add_argument("--budget", default=None, help="the tune's --budget (default: its own default)")
    ap.add_argument("--no-grid", action="store_true")
    ap.add_argument("--grid-cache", default=None, metavar="FILE",
                    help="keep the grid's rows here and reuse them (the grid does not depend on the search)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    wall, doc = run_tune(args)
    best = doc["best"][0]
    import subprocess as sp_

    load = sp_.run(["uptime"], capture_output=True, text=True).stdout.strip()
    title = f"# simmoe tune benchmark (predictions; workload {doc['setup']['workload_label']})"
    lines = [title, "", f"Machine: {os.cpu_count()} cores; "
             f"`uptime` after the tune's run, before the grid: {load}.", "",
             f"`simmoe tune --hardware {args.hardware} --workload {args.workload} --engine {args.engine} "
             f"--workers {args.workers}`" + (f" --budget {args.budget}" if args.budget else " (default budget)")
             + f": **{wall:.1f} s** wall, a fresh process "
             f"(goal ≤ 60 s); {doc['search']['evaluations']} evaluations of a {doc['search']['space_size']}-"
             f"configuration space, last rung {doc['search']['requests']} requests.",
             f"Best: {best['label']}, {best['tokens_per_s']:.1f} tokens/s predicted ({best['speedup']:.2f}x AR)."]
    if not args.no_grid:
        t0 = time.perf_counter()
        from simmoe.tune.search import RUNGS

        rows = grid(args, RUNGS[-1])
        gwall = time.perf_counter() - t0
        if args.grid_cache and Path(args.grid_cache).is_file():
            gwall = json.loads(Path(args.grid_cache).read_text()).get("wall_s", gwall)
        rows.sort(key=lambda t: -t[1]["tokens_per_s"])
        top_cfg, top = rows[0]
        labels = [c.label() for c, _ in rows]
        rank = labels.index(best["label"]) + 1 if best["label"] in labels else None
        found = next(r for c, r in rows if c.label() == best["label"])   # the tune's best on the grid's traces
        gap = 1.0 - found["tokens_per_s"] / top["tokens_per_s"]
        lines += ["", f"Exhaustive grid of the same space on the same traces ({len(rows)} configurations, "
                  f"{gwall:.0f} s with {args.grid_workers} workers): best {top_cfg.label()}, "
                  f"{top['tokens_per_s']:.1f} tokens/s.",
                  f"The tune's best ranks {rank} of {len(rows)} there; gap **{100 * gap:.2f} %** (goal ≤ 2 %).",
                  "", "| rank | configuration | tokens/s |", "|---:|---|---:|"]
        lines += [f"| {i} | {c.label()} | {r['tokens_per_s']:.1f} |" for i, (c, r) in enumerate(rows[:10], 1)]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
