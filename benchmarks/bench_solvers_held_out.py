"""The held-out family of ``benchmarks/bench_solvers.py --held-out`` (all pools synthetic).

``eagle-correlated`` (``solvers.random_pools.HELD_OUT``): EAGLE-shaped pools of 64 and 200
candidates (top-8 expansion, depth 4), correlated routes (each node keeps each of its
parent's experts with probability o ~ U(0.6, 0.9), one o per pool), the nodes relabelled
in a random topological order, bf16-rounded probabilities, K = 32 and the convex resident
cost b_k = 100 + 0.4k + 0.006k² ms, β = 0.01 ms, where K does not bind.  Rows:

1. Without a limit, ``--held-out-pools`` pools of each size, each from a cold per-pool
   cache in a process whose imports are done (``solvers.preload``): wall and process CPU
   time (median, p99, max), exact count, the method that answered; with
   ``--held-out-baseline``, the same pools with that commit's ``select_exact``, called
   alternately.
2. ``time_limit`` = 1, 5, 20, 100 ms on the same pools from cold caches (imports done):
   the largest overrun of the limit in wall-clock and in thread CPU time, how far the
   answer is from the optimum of row 1, and its certified gap (``upper_bound`` / ratio − 1).
3. The same limits on a pool's first call in a fresh process (``--fresh`` pools of each
   size, one process per call): without ``preload`` (the selection decides what it can
   import) and with ``preload()`` before the clock (the pacing rates at their defaults).

Overruns are measured around the call with ``time.perf_counter``; the thread CPU time
beside them tells the selection's own work from the machine's other jobs (a process
waiting for a CPU overruns in wall-clock only).
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import numpy as np

from solvers import Pool, preload, select_exact
from solvers.random_pools import eagle_correlated_arrays, family_cost

FAMILY = "eagle-correlated"
SIZES = (64, 200)
LIMITS_MS = (1.0, 5.0, 20.0, 100.0)
ROOT = Path(__file__).resolve().parents[1]

# one call in a fresh process: the pool is rebuilt from its seed, then timed
_CHILD = textwrap.dedent("""
    import json, sys, time
    sys.path.insert(0, {root!r})
    import numpy as np
    from solvers import Pool, preload, select_exact
    from solvers.random_pools import eagle_correlated_arrays, family_cost
    rng = np.random.default_rng({seed!r})
    for _ in range({index} + 1):
        arrays = eagle_correlated_arrays(rng, {nodes})
    pool, cost = Pool.from_routes(*arrays), family_cost("eagle-correlated", 32)
    if {preload}:
        preload()
    c0, t0 = time.thread_time(), time.perf_counter()
    sel = select_exact(pool, 32, cost, time_limit={limit})
    wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
    print(json.dumps([wall, cpu, sel.ratio, sel.upper_bound, sel.exact, sel.method]))
""")


def add_arguments(ap) -> None:
    """The options of these rows in ``bench_solvers.py``."""
    ap.add_argument("--held-out", action="store_true",
                    help="only the held-out family (bench_solvers_held_out.py)")
    ap.add_argument("--held-out-pools", type=int, default=20, help="held-out pools per size")
    ap.add_argument("--fresh", type=int, default=9,
                    help="held-out pools per size and limit timed in a fresh process each")
    ap.add_argument("--held-out-baseline", default="",
                    help="commit whose select_exact runs beside on the held-out pools")


def _arrays(seed: int, nodes: int, count: int) -> list[tuple]:
    """The ``from_routes`` arguments of ``count`` pools (a fresh process rebuilds them)."""
    rng = np.random.default_rng(_seed(seed, nodes))
    return [eagle_correlated_arrays(rng, nodes) for _ in range(count)]


def _seed(seed: int, nodes: int) -> list[int]:
    return [seed, 31, nodes]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def _spread(xs: list[float]) -> str:
    return (f"median {_ms(statistics.median(xs))}  p99 {_ms(float(np.percentile(xs, 99)))}  "
            f"max {_ms(max(xs))}")


def _cold(pool: Pool, *args, **kwargs):
    """(wall, process CPU, thread CPU, selection) of one call from a cold per-pool cache (the
    cache cleared again after it: a serving loop drops a cycle's pool)."""
    pool._cache.clear()
    c0, k0, t0 = time.process_time(), time.thread_time(), time.perf_counter()
    sel = select_exact(pool, *args, **kwargs)
    out = (time.perf_counter() - t0, time.process_time() - c0, time.thread_time() - k0, sel)
    pool._cache.clear()
    return out


def unlimited(pools: list[Pool], arrays: list[tuple], label: str, base=None) -> list[float]:
    """Row 1 (and the baseline's ``select_exact`` alternately); returns the optimal ratios."""
    cost = family_cost(FAMILY, 32)
    walls, cpus, methods, exact, best, sizes = [], [], Counter(), 0, [], []
    old_walls: list[float] = []
    for i, pool in enumerate(pools):
        if base is not None and i % 2:
            old_walls.append(_baseline(base, arrays[i], cost))
        wall, cpu, _thread, sel = _cold(pool, 32, cost)
        if base is not None and not i % 2:
            old_walls.append(_baseline(base, arrays[i], cost))
        walls.append(wall)
        cpus.append(cpu)
        methods[sel.method] += 1
        exact += sel.exact
        best.append(sel.ratio)
        sizes.append(len(sel.nodes))
    print(f"  {label}, no limit: {_spread(walls)}  exact {exact}/{len(pools)}  {dict(methods)}"
          f"  selected {min(sizes)}-{max(sizes)} nodes")
    print(f"  {'':{len(label)}}  (process CPU: {_spread(cpus)})")
    if old_walls:
        print(f"  {'':{len(label)}}  baseline commit, same pools: {_spread(old_walls)}")
    return best


def _baseline(base, arrays: tuple, cost) -> float:
    """Wall time of the baseline commit's ``select_exact`` on the same pool (its own
    classes, a cold cache)."""
    old = base.Pool.from_routes(*arrays)
    old_cost = base.CostModel(cost.b, cost.beta)
    t0 = time.perf_counter()
    base.select_exact(old, 32, old_cost)
    return time.perf_counter() - t0


def limited(pools: list[Pool], label: str, best: list[float]) -> None:
    """Row 2: every limit, every pool from a cold cache, imports done."""
    cost = family_cost(FAMILY, 32)
    for limit_ms in LIMITS_MS:
        over, over_cpu, off, gaps, exact = [], [], [], [], 0
        for pool, opt in zip(pools, best, strict=True):
            wall, _cpu, thread, sel = _cold(pool, 32, cost, time_limit=limit_ms / 1e3)
            over.append(wall - limit_ms / 1e3)
            over_cpu.append(thread - limit_ms / 1e3)
            off.append(opt / sel.ratio - 1.0)
            gaps.append(sel.upper_bound / sel.ratio - 1.0)
            exact += sel.exact
        print(f"  {label}, time_limit {limit_ms:g} ms: largest overrun {_ms(max(over))} wall, "
              f"{_ms(max(over_cpu))} thread CPU; answer below the optimum by at most "
              f"{max(off):.3%}; certified gap median {statistics.median(gaps):.3%}, max "
              f"{max(gaps):.3%}; exact {exact}/{len(pools)}")


def first_calls(seed: int, nodes: int, count: int, best: list[float]) -> None:
    """Row 3: one fresh process per (pool, limit), with and without ``preload()``."""
    for load in (False, True):
        for limit_ms in LIMITS_MS:
            rows = []
            for i in range(count):
                code = _CHILD.format(root=str(ROOT), seed=_seed(seed, nodes), index=i,
                                     nodes=nodes, preload=load, limit=limit_ms / 1e3)
                out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                                     text=True, check=True).stdout
                rows.append(json.loads(out))
            over = max(r[0] for r in rows) - limit_ms / 1e3
            over_cpu = max(r[1] for r in rows) - limit_ms / 1e3
            off = max(best[i] / r[2] - 1.0 for i, r in enumerate(rows))
            gaps = [r[3] / r[2] - 1.0 for r in rows]
            methods = Counter(r[5] for r in rows)
            print(f"  {nodes} candidates, first call{' after preload()' if load else ''}, "
                  f"time_limit {limit_ms:g} ms: largest overrun {_ms(over)} wall, "
                  f"{_ms(over_cpu)} thread CPU; below the optimum by at most {off:.3%}; "
                  f"certified gap median {statistics.median(gaps):.3%}, max {max(gaps):.3%}; "
                  f"exact {sum(r[4] for r in rows)}/{count}  {dict(methods)}")


def rows(seed: int, count: int, fresh: int, base=None) -> None:
    """Every row of the module docstring."""
    print(f"\nHeld-out family {FAMILY}: K = 32, b_k = 100 + 0.4k + 0.006k² ms, β = 0.01 ms; "
          f"{count} pools of each size (seed {seed}), cold per-pool caches; "
          f"{_load()}")
    preload()
    warm = Pool.from_routes(*_arrays(seed + 1000, 64, 1)[0])      # the process's first flow
    select_exact(warm, 32, family_cost(FAMILY, 32))
    for nodes in SIZES:
        arrays = _arrays(seed, nodes, count)
        pools = [Pool.from_routes(*a) for a in arrays]
        gc.collect()
        gc.freeze()         # the pools out of the collector's full passes (bench_solvers.py)
        label = f"{nodes} candidates"
        best = unlimited(pools, arrays, label, base)
        limited(pools, label, best)
        gc.unfreeze()
        if fresh:
            first_calls(seed, nodes, min(fresh, count), best)
    print(f"  at the end: {_load()}")


def _load() -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{os.cpu_count()} CPUs, load average {load:.1f}"
