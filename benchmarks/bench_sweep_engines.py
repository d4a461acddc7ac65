"""`simmoe sweep`: the local engine against the Ray engine on a 200-configuration grid.

The grid (one small SYNTHETIC trace, the first N requests of the gsm8k
preset): 5 selectors (ar, eagle3, evict, specfit, oracle) × 5 slot counts
(0, 4, 12, 24, 48) × 2 policies (lru, belady) × 4 route accuracies (1, 0.8,
0.6, 0.4) = 200 configurations in 21 tasks (one per selection plan, the
AR baselines included).  Both engines run on this machine with the same
number of workers; a fixed selector time makes their tables identical,
which is checked.  Reported: wall time of each engine (median of
``--repeat``), the CPU time of this process and its children, and Ray's
start-up and shutdown on their own.

    python benchmarks/bench_sweep_engines.py                # 3 requests, 2 workers
    python benchmarks/bench_sweep_engines.py --requests 5 --workers 2 --repeat 3

Timings on a shared machine are noisy: compare the two engines within one
run, and quote medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def make_trace(requests: int, folder: str) -> str:
    from simmoe.cli import main

    path = str(Path(folder) / "bench-gsm8k.parquet")
    rc = main(["synth", "--preset", "gsm8k", "--requests", str(requests), "--seed", "0",
               "--out", path, "--no-progress"])
    if rc != 0:
        raise SystemExit(f"simmoe synth failed with status {rc}")
    return path


def grid_of(trace: str):
    from simmoe.sweep.grid import Grid

    return Grid(traces=(trace,), selectors=("ar", "eagle3", "evict", "specfit", "oracle"),
                slots=(0, 4, 12, 24, 48), caches=("lru", "belady"),
                route_accuracy=(1.0, 0.8, 0.6, 0.4), selector_ms=1.0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", help="trace file (default: synthesize the gsm8k preset's first N requests)")
    ap.add_argument("--requests", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args(argv)

    import pandas as pd
    import ray

    from simmoe.sweep.grid import cached_trace, run_sweep, tasks_of
    from simmoe.sweep.ray_engine import run_sweep_ray

    with tempfile.TemporaryDirectory() as tmp:
        trace = args.trace or make_trace(args.requests, tmp)
        tr = cached_trace(trace)
        grid = grid_of(trace)
        configs = grid.configs()
        print(f"trace {trace}: {len(tr.requests)} requests, {tr.num_positions} positions, "
              f"{tr.num_nodes} pool nodes ({'SYNTHETIC' if tr.is_synthetic else 'recorded'})")
        print(f"grid: {len(configs)} configurations, {len(tasks_of(configs))} tasks (with AR baselines); "
              f"{args.workers} workers; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}")
        local_t, ray_t, ray_up, ray_down, local_cpu, ray_cpu = [], [], [], [], [], []
        frames = {}
        for _ in range(args.repeat):
            c0, t0 = cpu_seconds(), time.perf_counter()
            frames["local"], local_failures = run_sweep(grid, workers=args.workers)
            local_t.append(time.perf_counter() - t0)
            local_cpu.append(cpu_seconds() - c0)

            t0 = time.perf_counter()
            ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
            ray_up.append(time.perf_counter() - t0)
            c0, t0 = cpu_seconds(), time.perf_counter()
            frames["ray"], failures = run_sweep_ray(grid)
            ray_t.append(time.perf_counter() - t0)
            ray_cpu.append(cpu_seconds() - c0)
            t0 = time.perf_counter()
            ray.shutdown()
            ray_down.append(time.perf_counter() - t0)
            for engine, failed in (("the local engine", local_failures), ("Ray", failures)):
                if failed:
                    print(f"{len(failed)} configurations failed on {engine}: {failed[0].error}", file=sys.stderr)
                    return 1
        pd.testing.assert_frame_equal(frames["ray"], frames["local"], check_exact=True)
        med = statistics.median
        print("identical tables: yes")
        print("| engine | wall s (median) | configurations / s | driver CPU s |")
        print("|---|---|---|---|")
        print(f"| local ({args.workers} processes) | {med(local_t):.1f} | {len(configs) / med(local_t):.1f} "
              f"| {med(local_cpu):.1f} (incl. children) |")
        print(f"| ray (local runtime, {args.workers} CPUs) | {med(ray_t):.1f} | {len(configs) / med(ray_t):.1f} "
              f"| {med(ray_cpu):.1f} (driver only) |")
        print(f"ray.init {med(ray_up):.1f} s, ray.shutdown {med(ray_down):.1f} s (not in the wall times above)")
        print(f"wall ratio ray / local: {med(ray_t) / med(local_t):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
