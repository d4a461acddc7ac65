"""Timing of exact selection when experts are computed on the CPU (all pools and costs synthetic).

Run:  python benchmarks/bench_solvers_cpu.py [--pools P] [--limit S] [--seed S] [--sizes 18,64,200]

EAGLE-shaped pools (``solvers.random_pools``; 48 layers × 128 experts, top-8 routes,
parent–child overlap 0.6): 18 nodes (top-2 expansion, depth 5, K = 7), 64 and 200
nodes (top-8 expansion, depth 4, K = 32).  Costs (synthetic, not fitted):
b_k = 20 + 0.3k ms for the GPU part; every expert on the CPU at r = 0.01 ms read
time and g per token of

* ``read``:    g = r/8 (two to eight tokens still cost the read),
* ``mixed``:   g = 0.62 r (two tokens on one expert are compute-bound),
* ``compute``: g = 2 r (every expert compute-bound),
* ``ncpumoe``: mixed, only the first 36 of 48 layers on the CPU (llama.cpp
  ``--n-cpu-moe 36``), the GPU's experts free;
* ``layers``:  read-bound (g = r/8 of the base r) with a read time per layer,
  every fourth layer's experts 25 % larger (as mixed-precision GGUF files have
  some larger layers; the pattern is made up).

Per setting: the median, p99 and max wall-clock time of ``select_exact_cpu`` (each
call on a fresh pool, so no cached view; imports done first), the calls stopped by
``--limit`` seconds (their certified gap ``upper_bound/ratio − 1``: max), the mean
selected size, and ``select_exact`` on the Eq. 4 cost with β = r on the same pools
(SpecFit's problem, for scale).  With ``--check N`` the first N pools of a setting are
solved again by the search alone (no Eq. 4 relaxation: credit and compute bounds only,
the same limit), and the answers compared where both are exact (the run stops on a
disagreement).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from solvers import CostModel, cpu_exact, preload, select_exact  # noqa: E402
from solvers.cpu_cost import CpuCostModel, RoutedPool  # noqa: E402
from solvers.cpu_exact import select_exact_cpu  # noqa: E402
from solvers.random_pools import random_pool_arrays, random_routes, random_tree_shape  # noqa: E402

READ = 0.01          # ms per expert read from DRAM (synthetic)
B0, B1 = 20.0, 0.3   # ms: b_k = B0 + B1·k (synthetic)
L_CPU = 36           # layers on the CPU in the ncpumoe setting


def arrays(rng: np.random.Generator, n: int):
    """``Pool.from_routes`` arguments of an EAGLE-shaped pool of ``n`` nodes."""
    if n <= 18:
        return random_pool_arrays(rng, n, 5, 2)
    parents, probs = random_tree_shape(rng, n, 4, 8)
    root, routes = random_routes(rng, parents, 48, 128, 8, 0.6)
    return parents, probs, root, routes, 128


def cost(setting: str, K: int) -> CpuCostModel:
    b = [B0 + B1 * j for j in range(K + 1)]
    g = {"read": READ / 8, "mixed": 0.62 * READ, "compute": 2.0 * READ,
         "ncpumoe": 0.62 * READ, "layers": READ / 8}[setting]
    on_cpu = np.arange(48) < L_CPU if setting == "ncpumoe" else None
    read = np.where(np.arange(48) % 4 == 0, 1.25 * READ, READ) if setting == "layers" else READ
    return CpuCostModel(b, read, g, on_cpu=on_cpu)


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def cross_check(data, K: int, c: CpuCostModel, limit: float, answers: list) -> str:
    """The search alone on the first pools: (agreeing, both exact) as text."""
    cpu_exact._SPECFIT_PATH = False
    try:
        both = 0
        for args, (nodes, exact) in zip(data, answers, strict=False):
            sel = select_exact_cpu(RoutedPool.from_routes(*args), K, c, time_limit=limit)
            if exact and sel.exact:
                both += 1
                if sel.nodes != nodes:
                    raise SystemExit(f"disagreement: {sel.nodes} (search alone) vs {nodes}")
        return f"{both}/{len(answers)}"
    finally:
        cpu_exact._SPECFIT_PATH = True


def run(n: int, K: int, setting: str, pools: int, limit: float, seed: int, check: int) -> str:
    rng = np.random.default_rng(seed)
    data = [arrays(rng, n) for _ in range(pools)]
    times, spec_times, sizes, gaps, answers = [], [], [], [], []
    c = cost(setting, K)
    spec = CostModel(c.b, READ)
    gc.collect()
    gc.freeze()
    try:
        for args in data:
            rp = RoutedPool.from_routes(*args)
            t0 = time.perf_counter()
            sel = select_exact_cpu(rp, K, c, time_limit=limit)
            times.append(time.perf_counter() - t0)
            sizes.append(sel.size)
            answers.append((sel.nodes, sel.exact))
            if not sel.exact:
                gaps.append(sel.upper_bound / sel.ratio - 1.0)
            pool = rp.pool if setting != "ncpumoe" else rp.pool.with_free(
                np.repeat((np.arange(48) >= L_CPU)[:, None], 128, axis=1))
            t0 = time.perf_counter()
            select_exact(pool, K, spec, time_limit=limit)
            spec_times.append(time.perf_counter() - t0)
    finally:
        gc.unfreeze()
    ms = [t * 1e3 for t in times]
    sms = [t * 1e3 for t in spec_times]
    stopped = f"{len(gaps)} (gap <= {max(gaps):.2e})" if gaps else "0"
    checked = cross_check(data[:check], K, c, limit, answers[:check]) if check else "-"
    return (f"| {n} | {K} | {setting} | {statistics.median(ms):.2f} | {pct(ms, 0.99):.2f} | "
            f"{max(ms):.2f} | {stopped} | {statistics.mean(sizes):.1f} | "
            f"{statistics.median(sms):.2f} / {max(sms):.2f} | {checked} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pools", type=int, default=40, help="pools per setting")
    ap.add_argument("--limit", type=float, default=2.0, help="time limit per call, seconds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sizes", default="18,64,200")
    ap.add_argument("--settings", default="read,mixed,compute,ncpumoe,layers")
    ap.add_argument("--check", type=int, default=0,
                    help="pools per setting solved again by the search alone")
    args = ap.parse_args(argv)
    preload()
    select_exact_cpu(RoutedPool.from_routes(*arrays(np.random.default_rng(99), 18)), 7,
                     cost("read", 7))        # warm: first-call costs out of the timings
    print("SYNTHETIC pools and costs; times in ms per call (wall clock)")
    print("| nodes | K | setting | median | p99 | max | stopped by the limit | mean \\|S\\| "
          "| Eq. 4 (β = r) median / max | same answer, search alone |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in (int(x) for x in args.sizes.split(",")):
        K = 7 if n <= 18 else 32
        for setting in args.settings.split(","):
            print(run(n, K, setting, args.pools, args.limit, args.seed, args.check), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
