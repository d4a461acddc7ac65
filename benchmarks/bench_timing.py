"""Cost of the physical side of a replay: caches and the three timing models, per forward.

Synthetic demand (labelled so in the output): per-layer expert unions of a
given size drawn from a skewed popularity (Dirichlet), the shape of a GSM8K
replay on Qwen3-30B-A3B (48 layers × 128 experts; AR unions of 8, EAGLE-3
trees of ~30).  Reports the median over repeats of µs per forward for each
cache policy and timing model, the time a full 80-request GSM8K replay's
forwards would take on this side (cache + timer), and peak memory.

    python benchmarks/bench_timing.py                      # defaults: 17,800 AR-sized forwards
    python benchmarks/bench_timing.py --union 30 --forwards 4400 --slots 0
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import numpy as np

from simmoe.hardware.profile import load_profile
from simmoe.replay.caches import make_cache
from simmoe.replay.timing import CycleTimer


def demand_stream(forwards: int, L: int, N: int, union: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    pop = rng.dirichlet(np.full(N, 0.3), size=L)
    out = []
    for _ in range(forwards):
        keys = rng.random((L, N)) ** (1.0 / (pop * N + 1e-9))     # weighted sampling without replacement
        top = np.argpartition(-keys, union - 1, axis=1)[:, :union]
        d = np.zeros((L, N), dtype=bool)
        np.put_along_axis(d, top, True, axis=1)
        out.append(d)
    return out


def timed(fn, repeat: int) -> tuple[float, float]:
    """Median (CPU seconds, wall seconds) over ``repeat`` runs: CPU time is what a shared machine can compare."""
    cpu, wall = [], []
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - t0)
    return statistics.median(cpu), statistics.median(wall)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--forwards", type=int, default=17800)
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--experts", type=int, default=128)
    ap.add_argument("--union", type=int, default=8, help="experts per layer per forward (8 = AR, ~30 = EAGLE-3)")
    ap.add_argument("--slots", type=int, default=48)
    ap.add_argument("--hardware", default="a100-pcie-40gb")
    ap.add_argument("--simpy-forwards", type=int, default=100, help="forwards timed with the simpy reference")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    L, N = args.layers, args.experts
    t0 = time.perf_counter()
    stream = demand_stream(args.forwards, L, N, args.union, args.seed)
    print(f"synthetic demand: {args.forwards} forwards x {L} layers x {N} experts, union {args.union} per layer "
          f"({time.perf_counter() - t0:.1f} s to draw)")
    print(f"slots {args.slots}, profile {args.hardware}, median of {args.repeat} runs\n")

    # caches: hits/misses of every forward (kept for the timers)
    counts = {}
    print(f"{'part':34s} {'cpu us/fwd':>11s} {'cpu s':>8s} {'wall s':>8s}")
    for policy in ("none", "lru", "lfu", "belady", "static"):
        kw = {}
        if policy == "belady":
            kw["future"] = stream
        if policy == "static":
            kw["popularity"] = np.sum(stream, axis=0)
        cache = make_cache(policy, L, N, args.slots, **kw)

        def run_cache(cache=cache, policy=policy):
            cache.reset()
            counts[policy] = [cache.forward(d) for d in stream]
        s, w = timed(run_cache, args.repeat)
        rate = cache.hits / max(cache.demand, 1)
        print(f"{'cache ' + policy:34s} {1e6 * s / args.forwards:11.1f} {s:8.2f} {w:8.2f}   hit rate {rate:.3f}")

    prof = load_profile(args.hardware)
    hm = counts["lru"]
    n_tokens = 1 if args.union <= 8 else 8
    results = {}
    for label, model, prof_used in (
        ("timer event (fixed copies)", "event", prof),
        ("timer event (gamma copies, cv 0.1)", "event", prof.replace(copy_cv=0.1)),
        ("timer closed", "closed", prof),
    ):
        timer = CycleTimer(prof_used, model=model, cache=args.slots > 0)

        def run_timer(label=label, timer=timer):
            results[label] = [timer.forward_ms(n_tokens, h, m) for h, m in hm]
        s, w = timed(run_timer, args.repeat)
        print(f"{label:34s} {1e6 * s / args.forwards:11.1f} {s:8.2f} {w:8.2f}")
    k = min(args.simpy_forwards, args.forwards)
    timer = CycleTimer(prof, model="simpy", cache=args.slots > 0)
    s, w = timed(lambda: [timer.forward_ms(n_tokens, h, m) for h, m in hm[:k]], 1)
    per, wper = s / k, w / k
    print(f"{'timer simpy (reference)':34s} {1e6 * per:11.1f} {per * args.forwards:8.1f} "
          f"{wper * args.forwards:8.1f}   (projected from {k})")
    sim = [timer.forward_ms(n_tokens, h, m) for h, m in hm[:k]]
    worst = max(abs(a / b - 1) for a, b in zip(results["timer event (fixed copies)"][:k], sim))
    print(f"\nevent vs simpy on the first {k} forwards: max relative difference {worst:.2e}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak resident memory {peak:.0f} MiB")


if __name__ == "__main__":
    main()
