"""A replay with experts computed on the CPU against the same replay in the copy regime, side by side in one run.

    python benchmarks/bench_cpu_replay.py [--trace traces/gsm8k.parquet] [--repeat 5]
                                          [--out reports/cpu-experts-speed.md]

The 21-request GSM8K trace (SYNTHETIC) replayed under ar, eagle3, evict and
specfit (selector time fixed at 0 ms, so the work is the same in every run),
in one process, alternately:

- copy regime: ``qwen3-30b-a3b@rtx2080+pcie3-x16`` (experts copied over PCIe
  Gen3 into a 48-slot LRU cache per layer);
- CPU regime: ``qwen3-30b-a3b/q4_k_m@rtx2080+i9-10900x~cpu-layers:36``
  (llama.cpp ``--n-cpu-moe 36``), ``~cpu-all`` (``-cmoe``), and ``~cpu-misses`` and
  ``~fiddler`` with the same cache (misses computed on the CPU; Fiddler's copy-or-compute rule).

Each run replays every selector from scratch (plans included, nothing
memoized across runs); CPU time of this process (``time.process_time``) and
wall time, the median of the per-pair ratios CPU regime / copy regime.  Also
the simulate pass alone (``ReplayResult.simulate_wall_s``, the residency,
timing and metrics stages), where the regimes differ.  Goal: median ratio
≤ 1.3.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SELECTORS = ("ar", "eagle3", "evict", "specfit")
COPY = "qwen3-30b-a3b@rtx2080+pcie3-x16"
PLACEMENTS = ("cpu-layers:36", "cpu-all", "cpu-misses", "fiddler")
CPU = tuple(f"qwen3-30b-a3b/q4_k_m@rtx2080+i9-10900x~{p}" for p in PLACEMENTS)
GOAL = 1.3


def run_once(trace, profile) -> tuple[float, float, float, dict]:
    """(CPU s, wall s, simulate wall s, decode tok/s per selector) of one replay of every selector."""
    from simmoe.replay.engine import ReplayConfig, replay

    c0, w0 = time.process_time(), time.perf_counter()
    sim, tps = 0.0, {}
    for sel in SELECTORS:
        cfg = ReplayConfig(selector=sel, slots=48, cache="lru", hardware=profile.name, selector_ms=0.0)
        res = replay(trace, cfg, profile)
        sim += res.simulate_wall_s
        tps[sel] = res.summary()["decode_tps"]
    return time.process_time() - c0, time.perf_counter() - w0, sim, tps


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", default=str(ROOT / "traces" / "gsm8k.parquet"))
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--out", default=None, help="write the markdown report here (default: print it)")
    args = p.parse_args(argv)
    from simmoe.hardware.profile import load_profile
    from simmoe.trace.io import read_trace

    trace = read_trace(args.trace)
    profiles = {name: load_profile(name) for name in (COPY, *CPU)}
    runs: dict[str, list] = {name: [] for name in profiles}
    run_once(trace, profiles[COPY])        # warm-up: imports, solver caches
    for i in range(args.repeat):
        for name in (COPY, *CPU) if i % 2 == 0 else (*CPU, COPY):
            runs[name].append(run_once(trace, profiles[name]))
            print(f"run {i + 1}/{args.repeat} {name}: {runs[name][-1][0]:.2f} s CPU", file=sys.stderr)
    lines = ["# Replay speed with experts computed on the CPU", "",
             f"`python benchmarks/bench_cpu_replay.py --repeat {args.repeat}` — {args.trace} "
             f"({'SYNTHETIC trace, ' if trace.is_synthetic else ''}{len(trace.requests)} requests), "
             f"selectors {', '.join(SELECTORS)} (selector time fixed at 0 ms), 48 LRU slots per layer where "
             f"a cache is kept; each run replays every selector from scratch, plans included; one process, "
             f"the regimes alternately; medians over {args.repeat} runs.  Goal: CPU regime / copy regime ≤ {GOAL}.",
             "", "| profile | CPU s | wall s | simulate s | ratio (CPU s, median of pairs) | ratio (simulate) |",
             "|---|---:|---:|---:|---:|---:|"]
    base = runs[COPY]
    for name, rs in runs.items():
        ratio = statistics.median(r[0] / b[0] for r, b in zip(rs, base, strict=True))
        sim_ratio = statistics.median(r[2] / b[2] for r, b in zip(rs, base, strict=True))
        lines.append(f"| `{name}` | {statistics.median(r[0] for r in rs):.2f} | "
                     f"{statistics.median(r[1] for r in rs):.2f} | {statistics.median(r[2] for r in rs):.3f} | "
                     f"{ratio:.2f}x | {sim_ratio:.2f}x |")
    lines += ["", "CPU time is the measure (the machine is shared: wall time runs above it).  `cpu-layers:N` "
              "and `cpu-all` keep no cache (the placement fixes the GPU's experts), so their replays skip the cache's "
              "work that the copy regime does, and SpecFit selects with the placement's exact cost (the search of "
              "solvers/cpu_exact.py; docs/solvers.md); `cpu-misses` and `fiddler` run the same LRU cache and add "
              "the CPU side of every forward (its experts one by one, the sockets' sums, the forward's terms; "
              "Fiddler's rule per expert).  Where every CPU "
              "expert is bound by its DRAM read and the GPU part by its memory reads, a step's time does not "
              "depend on how its tokens spread over the experts, and the replay skips counting them "
              "(the same times, tested).",
              "", "Decode tokens/s (SYNTHETIC trace; the replays' outputs, identical in every run):", "",
              "| profile | " + " | ".join(SELECTORS) + " |", "|---|" + "---:|" * len(SELECTORS)]
    for name, rs in runs.items():
        lines.append(f"| `{name}` | " + " | ".join(f"{rs[0][3][s]:.2f}" for s in SELECTORS) + " |")
    text = "\n".join(lines) + "\n"
    if args.out:
        from simmoe.atomicio import write_text_atomic

        write_text_atomic(Path(args.out), text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
