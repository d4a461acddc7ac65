"""Timing of the exact solvers on synthetic pools (all pools synthetic).

Run:  python benchmarks/bench_solvers.py [--quick] [--seed S] [--pools N] [--today N] [--cap S]
      python benchmarks/bench_solvers.py --families-only [--family-pools N] [--baseline C]
      python benchmarks/bench_solvers.py --held-out [--held-out-pools N] [--fresh N]
                                         [--held-out-baseline C]

Prints the median and p99 per call (and the max where a tail matters) of wall-clock
time, and for ``select_exact`` on the larger pools also the process CPU time (less
sensitive to other jobs on a shared machine), of:

* with ``--held-out``, only the held-out family ``eagle-correlated`` (64 and 200
  candidates, K = 32, a convex resident cost; ``bench_solvers_held_out.py``): without a
  limit (and beside ``--held-out-baseline``'s ``select_exact``), then at limits of 1, 5,
  20 and 100 ms from cold caches and on first calls in fresh processes;
* the families of ``solvers.random_pools.FAMILIES`` (200 candidates, K = 32,
  ``--family-pools`` pools each): offload and resident coefficients, a resident
  cost where K = 32 mostly does not bind, identical siblings, flat probabilities
  with every expert distinct or every expert shared, bf16-rounded probabilities,
  wide stars (``--star-limit`` seconds each, the only family run with a time
  limit); then every family again with ``time_limit`` = ``--limit-ms``.  Each
  selection starts from a cold per-pool cache; the method that answered
  (``Selection.method``) is counted.  The pools of a family are frozen out of
  the garbage collector (``gc.freeze``) while they are timed: its full passes
  walk every object of the process (tens of ms with 200 pools held), a cost of
  the benchmark's heap, not of a selection.  For the same reason each pool's
  cache is cleared after its selection too (a serving loop drops a cycle's pool):
  with the caches of the 200 pools kept, one gen-2 collection inside a 5 ms-limited
  selection walked them for 8 ms (a flat-shared pool returned after 10–11 ms);
* ``select_exact`` on SpecFit's 18-node pools (K = 7) beside the same function at
  commit ``--baseline`` (its ``solvers`` package taken with ``git archive`` into a
  temporary directory and imported as ``solvers_baseline``), called alternately
  on the same 400 pools, 5 rounds; as the noise floor of that ratio, the
  baseline beside itself; and the same on 100 EVICT-shaped pools (200
  candidates, K = 32, offload and resident);
* ``Pool.from_routes``; exact selection on SpecFit's 18-node pools (top-2
  expansion, depth 5, 48 layers x 128 experts, top-8 routes with parent-child
  overlap 0.6, K=7, A100 with-cache cost of App. B) by plain enumeration
  (Algorithm 1), by today's branch and bound (``branch_and_bound_ratio``) and by
  ``select_exact``, timed alternately on the same pools so that their ratios are
  fair on a shared machine; adaptive depth per cycle, beside the literal
  level-by-level loop;
* ``select_exact`` and today's search on 32-, 64- and 128-node SpecFit-shaped
  pools (K = 16, 32) and on stress pools where the size limit binds (p ~ U(0.2, 1)
  on every node, β = 0.02);
* EVICT-shaped pools: EAGLE-3 with steps 4 and top-8 (top-8 expansion, depth 4:
  8 + 64 + 64 + 64 = 200 candidates; routes 48 x 128 x top-8 with overlap 0.6) at
  K = 8, 16, 32, under the offload coefficients (App. B with cache) and a
  resident-like cost (b_j = 142 + 0.5 j, β = 0.02), ``--pools`` pools each; and
  the 64-node pools of the same shape at K = 32 (resident).  Today's search runs
  on the first ``--today`` pools of each, stopped after ``--cap`` seconds
  (SIGALRM); its median counts a stopped run at the cap (a lower bound), and
  the speed-up is the median of the per-pool ratios on those pools;
* the closure (one min cut, and the largest ratio with all breakpoints) on 200-
  and 1000-node pools.

Intercepts beyond b_7 continue the App. B line: b_j = b_7 + 2(j - 7) ms.
The closure uses the least-squares line through b (``affine_approximation``).
Every answer of ``select_exact`` is checked against today's search wherever that
finishes (the run stops on a disagreement), and against the baseline commit's on
the 18-node pools.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import io
import os
import re
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_solvers_held_out  # noqa: E402

from solvers import (  # noqa: E402
    CostModel,
    Pool,
    affine_approximation,
    largest_ratio,
    max_closure,
    select_adaptive_depth,
    select_exact,
)
from solvers.exact import branch_and_bound_ratio, enumerate_ratio  # noqa: E402
from solvers.random_pools import (  # noqa: E402
    FAMILIES,
    family_cost,
    family_pool,
    paper_shaped_pool,
    random_pool_arrays,
)

B_A100_CACHE = [142.214, 147.532, 150.522, 152.269, 152.743, 163.204, 155.175, 156.068]
BETA_A100_CACHE = 0.210715513


def paper_cost(K: int) -> CostModel:
    """App. B, A100 with cache; b_j = b_7 + 2(j − 7) beyond 7 (the offload coefficients)."""
    b = B_A100_CACHE + [B_A100_CACHE[-1] + 2.0 * (j - 7) for j in range(8, K + 1)]
    return CostModel(b[:max(K + 1, 1)], BETA_A100_CACHE)


def resident_cost(K: int) -> CostModel:
    """Experts resident on the device: b_j = 142 + 0.5 j ms, β = 0.02 ms per expert."""
    return CostModel([142.0 + 0.5 * j for j in range(K + 1)], 0.02)


def pct(values: list[float], q: float) -> float:
    xs = sorted(values)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def stats(times: list[float], tail: bool = False) -> str:
    us = [t * 1e6 for t in times]
    out = f"median {fmt(statistics.median(us))}  p99 {fmt(pct(us, 0.99))}"
    if tail:
        out += f"  max {fmt(max(us))}"
    return out + f"  (n={len(us)})"


def fmt(us: float) -> str:
    return f"{us:9.1f} us" if us < 10_000 else f"{us / 1000:9.2f} ms"


def timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t0, out


class Stopped(Exception):
    pass


def _alarm(signum, frame):
    raise Stopped


def capped(cap: float, fn, *args):
    """(seconds, result or None): ``fn`` stopped by SIGALRM after ``cap`` seconds."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, cap)
    t0 = time.perf_counter()
    try:
        out = fn(*args)
    except Stopped:
        return cap, None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, old)
    return time.perf_counter() - t0, out


def level_by_level(pool: Pool, K: int, cost: CostModel):
    """Lemma 2's loop as written: ``select_exact`` on V≤1, V≤2, … until a stop, each level
    warm-started from the previous selection (the reference for ``select_adaptive_depth``)."""
    prev: tuple[int, ...] = ()
    for d in range(1, pool.depth + 1):
        sub, ids = pool.upto_level(d)
        where = {v: i for i, v in enumerate(ids)}
        sel = select_exact(sub, K, cost, start=[where[v] for v in prev] or None)
        nodes = tuple(ids[v] for v in sel.nodes)
        if d == pool.depth or all(sub.levels[v] < d for v in sel.nodes):
            return sel.__class__(nodes, sel.reward, sel.union, sel.time, sel.ratio), d
        prev = nodes
    return select_exact(pool, K, cost), 0


def fresh(pool: Pool) -> Pool:
    pool._cache.clear()      # time every selection from a cold per-pool cache
    return pool


def same(a, b) -> bool:
    return (a.nodes, a.reward, a.union, a.time, a.ratio) == (b.nodes, b.reward, b.union, b.time,
                                                             b.ratio)


def compare(label: str, pools: list[Pool], K: int, cost: CostModel, today: int, cap: float):
    """``select_exact`` on every pool; today's search on the first ``today`` of them."""
    t_new, cpu_new, sizes, exact = [], [], [], 0
    t_old, ratios, finished = [], [], 0
    for i, pool in enumerate(pools):
        c0 = time.process_time()
        dt, sel = timed(select_exact, fresh(pool), K, cost)
        cpu_new.append(time.process_time() - c0)
        t_new.append(dt)
        sizes.append(len(sel.nodes))
        exact += sel.exact
        if i < today:
            dt_o, ref = capped(cap, branch_and_bound_ratio, fresh(pool), K, cost)
            t_old.append(dt_o)
            ratios.append(dt_o / dt)        # a lower bound where today's was stopped
            if ref is not None:
                finished += 1
                if not same(sel, ref):
                    raise SystemExit(f"{label}: select_exact and today's search disagree on "
                                     f"pool {i}: {sel} vs {ref}")
    print(f"{label}")
    print(f"    select_exact:   {stats(t_new, tail=True)}  mean selected {np.mean(sizes):.1f}"
          f"  exact {exact}/{len(pools)}")
    print(f"      (process CPU time: {stats(cpu_new, tail=True)})")
    if t_old:
        bound = finished < len(t_old)
        print(f"    today's search: median {fmt(statistics.median(t_old) * 1e6)}"
              f"{' (stopped runs at the cap: a lower bound)' if bound else ''}"
              f"  finished {finished}/{len(t_old)} within {cap:g} s; "
              f"median per-pool time ratio today's / select_exact "
              f"{'>= ' if bound else ''}{statistics.median(ratios):.3g}")


def load_baseline(commit: str):
    """The ``solvers`` package at ``commit`` (``git archive``), imported as ``solvers_baseline``."""
    root = Path(__file__).resolve().parents[1]
    data = subprocess.run(["git", "-C", str(root), "archive", commit, "solvers"], check=True,
                          capture_output=True).stdout
    tmp = Path(tempfile.mkdtemp(prefix="solvers-baseline-"))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(tmp, filter="data")
    pkg = tmp / "solvers_baseline"
    (tmp / "solvers").rename(pkg)
    for path in pkg.glob("*.py"):
        text = re.sub(r"\bfrom solvers(\.| import)", r"from solvers_baseline\1", path.read_text())
        path.write_text(text.replace("import solvers.", "import solvers_baseline."))
    sys.path.insert(0, str(tmp))
    return importlib.import_module("solvers_baseline")


def side_by_side(label: str, arrays, first, second, K: int, b, beta: float,
                 rounds: int = 5) -> None:
    """``first`` and ``second`` (each (Pool class, CostModel class, select_exact)) on the same
    pools, called alternately, each from a cold per-pool cache; the same answer is required."""
    pools = [(first[0].from_routes(*a), second[0].from_routes(*a)) for a in arrays]
    costs = (first[1](b, beta), second[1](b, beta))
    t1, t2 = [], []
    for rep in range(rounds):
        for i, (p1, p2) in enumerate(pools):
            p1._cache.clear()
            p2._cache.clear()
            if (i + rep) % 2:
                dt1, s1 = timed(first[2], p1, K, costs[0])
                dt2, s2 = timed(second[2], p2, K, costs[1])
            else:
                dt2, s2 = timed(second[2], p2, K, costs[1])
                dt1, s1 = timed(first[2], p1, K, costs[0])
            if (s1.nodes, s1.ratio) != (s2.nodes, s2.ratio):
                raise SystemExit(f"{label}: the two disagree on pool {i}: {s1} vs {s2}")
            p1._cache.clear()
            p2._cache.clear()
            t1.append(dt1)
            t2.append(dt2)
    ratio = statistics.median(a / b for a, b in zip(t1, t2, strict=True))
    print(f"{label}: median {fmt(statistics.median(t1) * 1e6)} vs "
          f"{fmt(statistics.median(t2) * 1e6)}; median per-call ratio {ratio:.3f} "
          f"({len(pools)} pools x {rounds})")


def baseline_rows(args, rng) -> None:
    """``select_exact`` beside the baseline commit's on SpecFit's 18-node pools (K = 7; and
    the baseline beside itself: the noise floor of the ratio) and on EVICT-shaped pools
    (200 candidates, K = 32, offload and resident)."""
    base = load_baseline(args.baseline)
    arrays = [random_pool_arrays(rng) for _ in range(60 if args.quick else 400)]
    new = (Pool, CostModel, select_exact)
    old = (base.Pool, base.CostModel, base.select_exact)
    side_by_side(f"18 nodes, K=7: select_exact / select_exact at {args.baseline}", arrays, new,
                 old, 7, B_A100_CACHE, BETA_A100_CACHE)
    side_by_side(f"18 nodes, K=7: {args.baseline} / {args.baseline} (noise floor)", arrays, old,
                 old, 7, B_A100_CACHE, BETA_A100_CACHE)
    evict = [random_pool_arrays(rng, 200, 4, 8) for _ in range(20 if args.quick else 100)]
    for name in ("offload", "resident"):
        cost = family_cost(name, 32)
        side_by_side(f"200 candidates, K=32, {name}: select_exact / at {args.baseline}", evict,
                     new, old, 32, cost.b, cost.beta, rounds=1)
    clique_rows(base, args)


def clique_rows(base, args) -> None:
    """Prop. 2's CLIQUE pools (gnp(14, 0.5), r = 5): every r-clique ties; process CPU time of
    ``select_exact`` and of the baseline's, alternately, 3 rounds each."""
    import networkx as nx

    from solvers import clique_instance
    for seed in range(2 if args.quick else 4):
        inst = clique_instance(nx.gnp_random_graph(14, 0.5, seed=seed), 5)
        old = base.clique_instance(nx.gnp_random_graph(14, 0.5, seed=seed), 5)
        t_new, t_old = [], []
        for _ in range(3):
            for mine in (True, False):
                pool = inst.pool if mine else old.pool
                pool._cache.clear()
                c0 = time.process_time()
                sel = (select_exact if mine else base.select_exact)(
                    pool, inst.K, inst.cost if mine else old.cost)
                (t_new if mine else t_old).append(time.process_time() - c0)
                if mine:
                    method = sel.method
        print(f"CLIQUE gnp(14, 0.5, seed {seed}), r = 5, {inst.pool.n} nodes, K = {inst.K}: "
              f"select_exact median {statistics.median(t_new):.3f} s CPU ({method}), "
              f"at {args.baseline} {statistics.median(t_old):.3f} s")


def family_rows(args) -> None:
    """Every family of ``solvers.random_pools.FAMILIES``: 200 candidates, K = 32."""
    print(f"\nFamilies: 200 candidates, K = 32, {args.family_pools} pools each "
          f"(cold per-pool cache; wide stars with time_limit = {args.star_limit:g} s)")
    for family in FAMILIES:
        rng = np.random.default_rng([args.seed, FAMILIES.index(family)])
        pools = [family_pool(rng, family) for _ in range(args.family_pools)]
        cost = family_cost(family, 32)
        # the collector's full passes walk every object of the process (here: the pools
        # built above), tens of ms each: keep the pools out of them, so that the times are
        # the selections'
        gc.collect()
        gc.freeze()
        limit = args.star_limit if family == "wide-star" else None
        t_wall, t_cpu, gaps, methods, exact = [], [], [], Counter(), 0
        for pool in pools:
            c0 = time.process_time()
            dt, sel = timed(select_exact, fresh(pool), 32, cost, time_limit=limit)
            t_cpu.append(time.process_time() - c0)
            fresh(pool)
            t_wall.append(dt)
            exact += sel.exact
            methods[sel.method] += 1
            gaps.append(sel.upper_bound / sel.ratio - 1.0)
        print(f"  {family:19s} {stats(t_wall, tail=True)}  exact {exact}/{len(pools)}  "
              f"max certified gap {max(gaps):.3%}  {dict(methods)}")
        print(f"  {'':19s} (CPU: {stats(t_cpu, tail=True)})")
        t_lim, c_lim, exact, gaps = [], [], 0, []
        for pool in pools:
            c0 = time.process_time()
            dt, sel = timed(select_exact, fresh(pool), 32, cost, time_limit=args.limit_ms / 1e3)
            c_lim.append(time.process_time() - c0)
            fresh(pool)
            t_lim.append(dt)
            exact += sel.exact
            gaps.append(sel.upper_bound / sel.ratio - 1.0)
        over = sum(t > 2 * args.limit_ms / 1e3 for t in t_lim)
        print(f"  {'':19s} time_limit {args.limit_ms:g} ms: returned in {stats(t_lim, tail=True)}"
              f"  exact {exact}/{len(pools)}, median certified gap "
              f"{statistics.median(gaps):.2%}; over {2 * args.limit_ms:g} ms: {over}")
        print(f"  {'':19s} (CPU: {stats(c_lim, tail=True)})")
        gc.unfreeze()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer pools (a smoke run)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pools", type=int, default=200, help="EVICT-shaped pools per row")
    ap.add_argument("--today", type=int, default=30,
                    help="of those, how many also run today's search")
    ap.add_argument("--cap", type=float, default=5.0,
                    help="seconds after which today's search is stopped")
    ap.add_argument("--families-only", action="store_true",
                    help="only the families and the side-by-side 18-node rows")
    ap.add_argument("--family-pools", type=int, default=200, help="pools per family")
    ap.add_argument("--star-limit", type=float, default=1.0,
                    help="time_limit (s) of the wide stars' exact row")
    ap.add_argument("--limit-ms", type=float, default=5.0, help="the time-limited rows' limit")
    ap.add_argument("--baseline", default="542b068",
                    help="commit whose select_exact the 18-node rows are compared with")
    bench_solvers_held_out.add_arguments(ap)
    args = ap.parse_args(argv)
    if args.held_out:
        base = load_baseline(args.held_out_baseline) if args.held_out_baseline else None
        bench_solvers_held_out.rows(args.seed, args.held_out_pools, args.fresh, base)
        return 0
    if args.quick:
        args.pools, args.today, args.cap, args.family_pools = 20, 5, 1.0, 20
    # warm up: imports (OR-Tools' CP-SAT, scipy's HiGHS) and the first maximum flow are not
    # part of any selection's time
    warm = np.random.default_rng(12345)
    select_exact(paper_shaped_pool(warm, 200, depth=4, expand=8), 32, resident_cost(32))
    for family in FAMILIES:
        select_exact(family_pool(warm, family, 64), 32, family_cost(family, 32), time_limit=0.2)
    from solvers.cpsat import select_exact_cpsat
    from solvers.milp import select_exact_milp
    small = paper_shaped_pool(warm, 12, depth=3, expand=2)
    select_exact_cpsat(small, 4, resident_cost(4))
    select_exact_milp(small, 4, resident_cost(4))
    rng = np.random.default_rng(args.seed)
    n18 = 60 if args.quick else 400
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"synthetic pools (solvers.random_pools); times per call on this machine "
          f"({os.cpu_count()} CPUs, load average {load:.1f} at start)\n")
    baseline_rows(args, rng)
    family_rows(args)
    if args.families_only:
        if hasattr(os, "getloadavg"):
            print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")
        return 0

    # -- pool construction ---------------------------------------------------------
    arrays = [random_pool_arrays(rng) for _ in range(n18)]
    t_build, pools = [], []
    for a in arrays:
        dt, pool = timed(Pool.from_routes, *a)
        t_build.append(dt)
        pools.append(pool)
    print(f"Pool.from_routes, 18 nodes, 48x128 top-8:      {stats(t_build)}")

    # -- 18-node pools, K = 7 ----------------------------------------------------------
    cost7 = paper_cost(7)
    t_enum, t_old, t_new, t_warm, t_adapt, t_loop, sizes, depths = ([] for _ in range(8))
    for i, pool in enumerate(pools):
        dt_e, a = timed(enumerate_ratio, pool, 7, cost7)
        if i % 2:       # alternate which of the two goes first
            dt_o, o = timed(branch_and_bound_ratio, fresh(pool), 7, cost7)
            dt_b, b = timed(select_exact, fresh(pool), 7, cost7)
        else:
            dt_b, b = timed(select_exact, fresh(pool), 7, cost7)
            dt_o, o = timed(branch_and_bound_ratio, fresh(pool), 7, cost7)
        dt_w, _ = timed(select_exact, pool, 7, cost7)
        dt_a, (sel, d) = timed(select_adaptive_depth, fresh(pool), 7, cost7)
        dt_l, (sel_l, d_l) = timed(level_by_level, fresh(pool), 7, cost7)
        if not (same(a, b) and same(o, b)):
            raise SystemExit(f"enumeration, today's search and select_exact disagree: {a} {o} {b}")
        if (sel.nodes, d) != (sel_l.nodes, d_l):
            raise SystemExit(f"adaptive depth disagrees with the level loop: {sel} vs {sel_l}")
        t_enum.append(dt_e)
        t_old.append(dt_o)
        t_new.append(dt_b)
        t_warm.append(dt_w)
        t_adapt.append(dt_a)
        t_loop.append(dt_l)
        sizes.append(len(b.nodes))
        depths.append(d)
    print(f"exact K=7, plain enumeration (Algorithm 1):    {stats(t_enum)}")
    print(f"exact K=7, today's branch and bound:           {stats(t_old)}")
    print(f"exact K=7, select_exact:                       {stats(t_new)}")
    print(f"  same, per-pool cache warm:                   {stats(t_warm)}")
    print(f"  median per-pool ratios: enumeration / select_exact "
          f"{statistics.median(e / b for e, b in zip(t_enum, t_new, strict=True)):.1f}x; "
          f"select_exact / today's search "
          f"{statistics.median(b / o for b, o in zip(t_new, t_old, strict=True)):.3f}; "
          f"mean selected nodes {np.mean(sizes):.2f}")
    print(f"adaptive depth (Lemma 2), K=7:                 {stats(t_adapt)}  "
          f"mean drafted levels {np.mean(depths):.2f}")
    ratio_a = statistics.median(x / y for x, y in zip(t_loop, t_adapt, strict=True))
    print(f"  literal level loop, select_exact per level:  {stats(t_loop)}  "
          f"(median {ratio_a:.1f}x the time of select_adaptive_depth)")
    per_cycle = [b + a for b, a in zip(t_build, t_adapt, strict=True)]
    print(f"from_routes + adaptive depth, per cycle:       {stats(per_cycle)}")

    # -- larger SpecFit-shaped pools ---------------------------------------------------
    reps = 8 if args.quick else 40
    print()
    for nodes, depth in ((32, 6), (64, 8), (128, 12)):
        arrays = [random_pool_arrays(rng, nodes=nodes, depth=depth) for _ in range(reps)]
        big = [Pool.from_routes(*a) for a in arrays]
        for K in (16, 32):
            compare(f"SpecFit-shaped {nodes} nodes (n={big[0].n}), K={K}, offload cost",
                    big, K, paper_cost(K), reps, args.cap)

    # -- stress: flat probabilities, the size limit binds ------------------------------
    for nodes, depth in ((32, 6), (64, 8)):
        stress = []
        for _ in range(3 if args.quick else 6):
            parents, _p, root, routes, N = random_pool_arrays(rng, nodes=nodes, depth=depth)
            probs = rng.uniform(0.2, 1.0, len(parents))
            stress.append(Pool.from_routes(parents, probs, root, routes, N))
        compare(f"stress {nodes} nodes, p ~ U(0.2, 1), beta 0.02, K=16 (binding)", stress, 16,
                CostModel(paper_cost(16).b, 0.02), len(stress), args.cap)

    # -- EVICT-shaped pools -------------------------------------------------------------
    print(f"\nEVICT-shaped pools: top-8 expansion, depth 4, 48x128 top-8 routes, overlap 0.6; "
          f"today's search on the first {args.today}, stopped at {args.cap:g} s")
    evict = [paper_shaped_pool(rng, 200, depth=4, expand=8) for _ in range(args.pools)]
    for name, make in (("offload (App. B with cache)", paper_cost),
                       ("resident (b_j = 142 + 0.5 j, beta 0.02)", resident_cost)):
        for K in (8, 16, 32):
            compare(f"200 candidates (n={evict[0].n}), K={K}, {name}", evict, K, make(K),
                    args.today, args.cap)
    small = [paper_shaped_pool(rng, 64, depth=4, expand=8) for _ in range(args.pools)]
    compare(f"64 candidates (n={small[0].n}), K=32, resident (b_j = 142 + 0.5 j, beta 0.02)",
            small, 32, resident_cost(32), args.today, args.cap)

    # -- closure ------------------------------------------------------------------------
    print()
    for nodes, depth, count in ((200, 12, 10), (1000, 20, 4 if args.quick else 10)):
        arrays = [random_pool_arrays(rng, nodes=nodes, depth=depth) for _ in range(count)]
        big = [Pool.from_routes(*a) for a in arrays]
        cost = affine_approximation(paper_cost(7), max(p.n for p in big))
        t_cut, t_ratio, t_bps, n_bps = [], [], [], []
        for pool in big:
            dt, (sel, _) = timed(largest_ratio, fresh(pool), cost, breakpoints=False)
            t_ratio.append(dt)
            dt, _ = timed(max_closure, fresh(pool), sel.ratio, cost)
            t_cut.append(dt)
            dt, (_, bps) = timed(largest_ratio, fresh(pool), cost)
            t_bps.append(dt)
            n_bps.append(len(bps))
        n_real = int(np.mean([p.n for p in big]))
        print(f"max_closure (one min cut), {nodes} nodes:      {stats(t_cut)}")
        print(f"largest_ratio (ratio only), {nodes} nodes:     {stats(t_ratio)}")
        print(f"largest_ratio + all breakpoints, {nodes} nodes: {stats(t_bps)}  "
              f"mean breakpoints {np.mean(n_bps):.1f} (mean n {n_real})")
    if hasattr(os, "getloadavg"):
        print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
