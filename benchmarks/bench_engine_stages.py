"""Where the README command's time goes: the plan and the simulation of each of its replays, in-process,
this tree against a baseline revision, side by side.

    python benchmarks/bench_engine_stages.py [--baseline 62bda4f] [--repeat 5] [--rounds 3]

The README's first command (``simmoe replay traces/gsm8k.parquet --slots 12``) runs ar, eagle3,
evict, specfit and oracle at 12 LRU slots and AR without a cache as the baseline.  For each, the
plan (admission, pools, selection, verification, demand: ``engine.plan``) and the simulation
(residency, timing, metrics: ``engine.simulate``) are timed in CPU seconds, the minimum of
``--repeat`` runs, in a fresh process per tree; ``--rounds`` alternate the trees and the medians
of the rounds are printed.  No start-up, trace reading or worker processes: what is left of a
difference between ``bench_engine.py``'s whole-command ratios is theirs.  SYNTHETIC trace.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_batch import baseline_tree  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = (("ar", 12, "lru"), ("eagle3", 12, "lru"), ("evict", 12, "lru"), ("specfit", 12, "lru"),
            ("oracle", 12, "lru"), ("ar", 0, "none"))

CHILD = """
import json, sys, time
from simmoe.hardware.profile import load_profile
from simmoe.replay import engine
from simmoe.replay.engine import ReplayConfig
from simmoe.trace.io import read_trace
trace, prof, repeat = read_trace(sys.argv[1]), load_profile("a100-pcie-40gb"), int(sys.argv[2])
out = {}
for sel, slots, cache in json.loads(sys.argv[3]):
    cfg = ReplayConfig(slots=slots, cache=cache, selector=sel, selector_ms=2.82)
    best_plan = best_sim = float("inf")
    for _ in range(repeat):
        t0 = time.process_time(); p = engine.plan(trace, cfg, prof); t1 = time.process_time()
        engine.simulate(trace, p, cfg, prof); t2 = time.process_time()
        best_plan, best_sim = min(best_plan, t1 - t0), min(best_sim, t2 - t1)
    out[f"{sel}@{slots}"] = (best_plan, best_sim)
print(json.dumps(out))
"""


def measure(tree: Path, repeat: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    run = subprocess.run([sys.executable, "-c", CHILD, str(ROOT / "traces" / "gsm8k.parquet"), str(repeat),
                          json.dumps(SETTINGS)], env=env, cwd=tree, check=True, capture_output=True, text=True)
    return json.loads(run.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="62bda4f")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    base, full = baseline_tree(args.baseline)
    rounds: dict[str, list[dict]] = {"baseline": [], "this tree": []}
    for _ in range(args.rounds):
        rounds["baseline"].append(measure(base, args.repeat))
        rounds["this tree"].append(measure(ROOT, args.repeat))
    med = {k: {s: [statistics.median(r[s][i] for r in v) for i in (0, 1)] for s in v[0]} for k, v in rounds.items()}
    print(f"CPU ms, min of {args.repeat} runs, median of {args.rounds} rounds; baseline {full[:7]}; SYNTHETIC trace")
    print(f"{'replay':<12} {'plan':>17} {'simulate':>17}")
    total = {"baseline": 0.0, "this tree": 0.0}
    for s in med["baseline"]:
        (bp, bs), (np_, ns) = med["baseline"][s], med["this tree"][s]
        total["baseline"] += bp + bs
        total["this tree"] += np_ + ns
        print(f"{s:<12} {np_ * 1e3:7.0f} vs {bp * 1e3:5.0f}   {ns * 1e3:7.0f} vs {bs * 1e3:5.0f}")
    print(f"all six: {total['this tree'] * 1e3:.0f} vs {total['baseline'] * 1e3:.0f} ms "
          f"(ratio {total['this tree'] / total['baseline']:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
