"""Speed of `simmoe replay --prefetch draft` against the same replay without prefetch, side by side.

    python benchmarks/bench_prefetch.py [--trace traces/cnndm.parquet] [--requests 6] [--slots 12]
        [--selectors ar,eagle3,evict,specfit,oracle] [--policy draft]

Two measurements in one run, CPU time of this process (the machine may be
shared: CPU time is what one idle core would take):

1. per configuration: the replay of one selector as ``simmoe replay`` runs it
   (selection pass and cache/timing pass; with prefetch also the replay
   without prefetch that gives the time saved);
2. the whole command ``simmoe replay TRACE --slots S --requests R --workers 1``
   with and without ``--prefetch POLICY`` (trace reading, the AR baseline and
   every selector), each run in-process.

The goal: a replay with
``--prefetch draft`` takes at most twice the time of the same replay without.
"""

from __future__ import annotations

import argparse
import io
import time
from contextlib import redirect_stderr, redirect_stdout


def cpu() -> float:
    return time.process_time()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default="traces/cnndm.parquet")
    ap.add_argument("--requests", type=int, default=6)
    ap.add_argument("--slots", type=int, default=12)
    ap.add_argument("--selectors", default="ar,eagle3,evict,specfit,oracle")
    ap.add_argument("--policy", default="draft")
    args = ap.parse_args()

    from simmoe.cli import main as simmoe_main
    from simmoe.hardware.profile import load_profile
    from simmoe.replay.engine import ReplayConfig, replay
    from simmoe.replay.prefetch import replay_prefetch
    from simmoe.replay.selectors import SELECTORS
    from simmoe.trace.io import read_trace

    trace = read_trace(args.trace)
    prof = load_profile("a100-pcie-40gb")
    print(f"trace {args.trace}, first {args.requests} requests, {args.slots} LRU slots, "
          f"profile {prof.name}, policy {args.policy}; CPU seconds of this process")
    print("  prefetch s: the replay with prefetch alone; + saved s: also the replay without prefetch that "
          "gives the time saved (what the command runs by default)")
    print(f"{'selector':<10} {'cycles':>7} {'no prefetch s':>14} {'prefetch s':>11} {'ratio':>6} "
          f"{'+ saved s':>10} {'ratio':>6}")
    tot = [0.0, 0.0, 0.0]
    for name in args.selectors.split(","):
        cfg = ReplayConfig(selector=name, slots=args.slots, requests=args.requests,
                           selector_ms=prof.selector_ms if SELECTORS[name].uses_cost else 0.0)
        t = cpu()
        a = replay(trace, cfg, prof)
        ta = cpu() - t
        t = cpu()
        replay_prefetch(trace, cfg, prof, args.policy, paired=False)
        tb = cpu() - t
        t = cpu()
        replay_prefetch(trace, cfg, prof, args.policy)
        tc = cpu() - t
        tot = [tot[0] + ta, tot[1] + tb, tot[2] + tc]
        print(f"{name:<10} {len(a.cycles['committed']):>7,} {ta:>14.2f} {tb:>11.2f} {tb / ta:>6.2f} "
              f"{tc:>10.2f} {tc / ta:>6.2f}")
    print(f"{'all':<10} {'':>7} {tot[0]:>14.2f} {tot[1]:>11.2f} {tot[1] / tot[0]:>6.2f} {tot[2]:>10.2f} "
          f"{tot[2] / tot[0]:>6.2f}")

    base = ["replay", args.trace, "--slots", str(args.slots), "--requests", str(args.requests),
            "--selectors", args.selectors, "--workers", "1", "--no-progress", "--json", "/dev/null"]
    times = {}
    for label, extra in (("without prefetch", []),
                         (f"--prefetch {args.policy}", ["--prefetch", args.policy]),
                         ("  --no-time-saved", ["--prefetch", args.policy, "--no-time-saved"])):
        t, w = cpu(), time.perf_counter()
        with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
            rc = simmoe_main(base + extra)
        times[label] = (cpu() - t, time.perf_counter() - w)
        if rc != 0:
            raise SystemExit(f"simmoe replay exited with {rc}")
    a_cpu, a_wall = times["without prefetch"]
    print(f"whole command `simmoe {' '.join(base[:-2])}`:")
    for label, (c, w) in times.items():
        print(f"  {label:<20} CPU {c:6.2f} s   wall {w:6.2f} s   ratio CPU {c / a_cpu:5.2f}  wall {w / a_wall:5.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
