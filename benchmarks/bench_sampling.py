"""Replay at temperature 1 against the same replay at temperature 0, side by side (SYNTHETIC).

One trace with target distributions (``simmoe synth --preset P --temperature 1``,
or ``--trace`` with a trace recorded at temperature 1) is replayed under each
selector, alternately at temperature 0 and 1, ``--repeat`` times; the script
prints each configuration's median CPU time of the whole replay (selection,
cache and timing passes) at both temperatures and their ratio.  The goal:
the ratio at most 1.5; exit status 1 when a selector misses it.

    python benchmarks/bench_sampling.py          # gsm8k preset, 10 requests, 12 LRU slots, a100-pcie-40gb
    python benchmarks/bench_sampling.py --preset qa --hardware a100-sxm-resident --slots 0 --selectors eagle3,evict
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

GOAL = 1.5


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="gsm8k")
    ap.add_argument("--requests", type=int, default=10)
    ap.add_argument("--trace", default=None, help="a trace with target distributions at temperature 1")
    ap.add_argument("--selectors", default="eagle3,evict,specfit,oracle")
    ap.add_argument("--slots", type=int, default=12)
    ap.add_argument("--hardware", default="a100-pcie-40gb")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)

    from simmoe.hardware.profile import load_profile
    from simmoe.replay.engine import ReplayConfig, replay

    if args.trace:
        from simmoe.trace.io import read_trace

        trace, what = read_trace(args.trace), args.trace
    else:
        from simmoe.synth import generate, preset

        pr = preset(args.preset)
        trace = generate(pr.params, seed=0, num_requests=args.requests, preset=pr.name,
                         fitted_to=pr.fitted_to, temperature=1.0)
        what = f"SYNTHETIC preset {args.preset}, {args.requests} requests, temperature 1"
    profile = load_profile(args.hardware)
    print(f"{what}: {trace.num_positions:,} positions, {trace.num_nodes:,} nodes; {args.hardware}, "
          f"{args.slots} slots; median CPU s of {args.repeat} replays per temperature, interleaved")
    print(f"{'selector':<10} {'T=0 s':>8} {'T=1 s':>8} {'ratio':>6}  {'Mat T=0':>7} {'Mat T=1':>7}")
    worst = 0.0
    for sel in args.selectors.split(","):
        times = {0.0: [], 1.0: []}
        mats = {}
        for _ in range(args.repeat):
            for temp in (0.0, 1.0):
                cfg = ReplayConfig(selector=sel, slots=args.slots, cache="lru" if args.slots else "none",
                                   hardware=args.hardware, selector_ms=0.0, temperature=temp)
                c0 = time.process_time()
                res = replay(trace, cfg, profile)      # no plan memo: both passes every time
                times[temp].append(time.process_time() - c0)
                mats[temp] = res.summary()["mat"]
        t0, t1 = statistics.median(times[0.0]), statistics.median(times[1.0])
        worst = max(worst, t1 / t0)
        print(f"{sel:<10} {t0:8.3f} {t1:8.3f} {t1 / t0:6.2f}  {mats[0.0]:7.2f} {mats[1.0]:7.2f}")
    ok = worst <= GOAL
    print(f"largest ratio {worst:.2f} (goal <= {GOAL}): {'PASS' if ok else 'MISS'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
