"""Speed of the replay engine on a GSM8K-shaped trace (SYNTHETIC unless a recorded trace is given).

Measures, per (selector, cache) configuration on one core: wall time of the
selection pass and of the cache + timing pass, simulated cycles per second,
and the ratio of simulated decode time to wall time; then the wall time and
peak memory of the whole default command ``simmoe replay TRACE --slots 12``.

    python benchmarks/bench_replay.py                       # traces/gsm8k.parquet, or synthesize it
    python benchmarks/bench_replay.py --trace my.parquet --repeat 3
    python benchmarks/bench_replay.py --configs specfit:lru,ar:none --no-cli

Timings on a shared machine are noisy: repeat and compare medians.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_trace(path: str | None):
    from simmoe.trace.io import read_trace, write_trace

    default = ROOT / "traces" / "gsm8k.parquet"
    if path:
        return read_trace(path), path
    if default.exists():
        return read_trace(default), str(default)
    from simmoe.synth import synth_preset

    print("traces/gsm8k.parquet not found: synthesizing the gsm8k preset (SYNTHETIC)", file=sys.stderr)
    trace = synth_preset("gsm8k", seed=0)
    out = Path(tempfile.mkdtemp(prefix="bench_replay_")) / "gsm8k.parquet"
    write_trace(trace, out)
    return trace, str(out)


def bench_config(trace, profile, selector: str, cache: str, slots: int, repeat: int) -> dict:
    from simmoe.replay.engine import ReplayConfig, plan, simulate

    cfg = ReplayConfig(selector=selector, cache=cache, slots=slots if cache != "none" else 0,
                       hardware=profile.name, timing="event")
    plan_s, sim_s, cpu_s = [], [], []
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        p = plan(trace, cfg, profile)
        t1 = time.perf_counter()
        res = simulate(trace, p, cfg, profile)
        t2 = time.perf_counter()
        plan_s.append(t1 - t0)
        sim_s.append(t2 - t1)
        cpu_s.append(time.process_time() - c0)  # CPU time: what wall time would be on an idle core
    s = res.summary()
    wall = statistics.median(plan_s) + statistics.median(sim_s)
    return {"config": f"{selector}/{cache}", "cycles": s["cycles"],
            "plan_s": statistics.median(plan_s), "simulate_s": statistics.median(sim_s),
            "wall_s": wall, "cpu_s": statistics.median(cpu_s), "cycles_per_s": s["cycles"] / wall,
            "sim_decode_s": s["decode_s"], "sim_over_wall": s["decode_s"] / wall,
            "selector_ms": s["selector_ms"]}


def bench_cli(path: str, slots: int, workers: int | None) -> dict:
    argv = [sys.executable, "-m", "simmoe", "replay", path, "--slots", str(slots), "--no-progress"]
    if workers:
        argv += ["--workers", str(workers)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak = after.ru_maxrss
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if out.returncode != 0:
        raise SystemExit(f"simmoe replay failed: {out.stderr.strip()}")
    return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": peak / 1024, "stdout": out.stdout}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", help="trace file (default traces/gsm8k.parquet or a synthesized one)")
    ap.add_argument("--hardware", default="a100-pcie-40gb")
    ap.add_argument("--slots", type=int, default=12)
    ap.add_argument("--configs", default="ar:lru,ar:none,eagle3:lru,evict:lru,specfit:lru,oracle:lru",
                    help="selector:cache pairs")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--no-cli", action="store_true", help="skip the whole-command measurement")
    ap.add_argument("--workers", type=int, default=None, help="--workers of the command (default: CPUs)")
    args = ap.parse_args()

    from simmoe.hardware.profile import load_profile

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    t0 = time.perf_counter()
    trace, path = load_trace(args.trace)
    print(f"trace {path}: {'SYNTHETIC, ' if trace.is_synthetic else ''}{len(trace.requests)} requests, "
          f"{trace.num_positions:,} positions, {trace.num_nodes:,} nodes "
          f"(loaded in {time.perf_counter() - t0:.1f} s)")
    profile = load_profile(args.hardware)
    print(f"{'config':<16}{'cycles':>8}{'plan s':>9}{'sim s':>8}{'wall s':>8}{'cpu s':>8}{'cycles/s':>10}"
          f"{'sim/wall':>10}{'sel ms':>8}")
    for item in args.configs.split(","):
        selector, cache = item.split(":")
        r = bench_config(trace, profile, selector, cache, args.slots, args.repeat)
        print(f"{r['config']:<16}{r['cycles']:>8}{r['plan_s']:>9.2f}{r['simulate_s']:>8.2f}"
              f"{r['wall_s']:>8.2f}{r['cpu_s']:>8.2f}{r['cycles_per_s']:>10.0f}{r['sim_over_wall']:>10.1f}"
              f"{r['selector_ms']:>8.3f}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory of this process: {peak:.0f} MB")
    if not args.no_cli:
        r = bench_cli(path, args.slots, args.workers)
        print(f"simmoe replay {Path(path).name} --slots {args.slots}: {r['wall_s']:.1f} s wall, "
              f"{r['cpu_s']:.1f} s CPU (all processes), "
              f"peak memory {r['peak_rss_mb']:.0f} MB (largest process)")
        print(r["stdout"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
