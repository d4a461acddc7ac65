"""Speed and memory of the one-engine replay, against the revision before it, side by side in one run.

    python benchmarks/bench_engine.py [--baseline 62bda4f] [--repeat 5] [--trace80 /tmp/g80.parquet]
                                      [--out reports/engine-benchmark.md]

1. The README's first command (``simmoe replay traces/gsm8k.parquet --slots 12``,
   default selectors and workers) and the same replay of the full 80-request
   GSM8K trace, each run alternately with this working tree and with the
   ``--baseline`` revision's ``simmoe`` and ``solvers`` (``git archive`` into a
   temporary folder; 62bda4f is the last revision with the engine, batch and
   prefetch paths apart): CPU and wall time, the median of the per-pair CPU
   ratios, and whether the counters both trees print are identical.  The
   README command on one request is timed the same way (not a goal): the part
   of both commands that is start-up (imports, reading the trace, workers).
2. ``--batch 64`` over the 80-request trace with ar, eagle3, evict and specfit:
   wall time and the peak memory summed over the process tree (RSS, and PSS
   which splits shared pages).
3. ``--batch 16`` with ``--prefetch draft`` against the same batch without
   prefetch, alternately: the median ratio of CPU times.

Every command runs from a neutral folder so that ``python -m simmoe`` imports
the tree named by ``PYTHONPATH``.  The 80-request trace is ``simmoe synth
--preset gsm8k`` (generated when missing).  SYNTHETIC traces.
Goals: 1 — median CPU ratio ≤ 1.05 for both; 2 — ≤ 60 s and ≤ 2 GB;
3 — ≤ 3×.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_batch import baseline_tree, imported_from, run, verdict  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "62bda4f"        # the last revision with engine.py, batch.py and prefetch.py as separate paths
RATIO_GOAL = 1.05
WALL_GOAL_S = 60.0
MEMORY_GOAL_MB = 2048.0
PREFETCH_GOAL = 3.0


_PYCACHE = Path(tempfile.mkdtemp(prefix="simmoe-bench-pyc-"))


def _env(tree: Path) -> dict:
    """Run ``tree``'s simmoe with its bytecode cached, as an installed package's is (a machine that sets
    PYTHONDONTWRITEBYTECODE would otherwise compile every module on every run, charging code size)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": str(tree), "PYTHONPYCACHEPREFIX": str(_PYCACHE / tree.name)}


def paired(name: str, args: list[str], trees: dict[str, Path], repeat: int, cwd: Path) -> dict:
    """Alternate runs of one command line on every tree; per-pair CPU ratios (this tree / baseline)."""
    runs: dict[str, list] = {k: [] for k in trees}
    for tree in trees.values():     # warm-up, not counted: fills the bytecode cache and the page cache
        run([sys.executable, "-m", "simmoe", *args], env=_env(tree), cwd=cwd)
    for _ in range(repeat):
        for label, tree in trees.items():
            runs[label].append(run([sys.executable, "-m", "simmoe", *args], env=_env(tree), cwd=cwd))
    ratios = [n["cpu_s"] / o["cpu_s"] for o, n in zip(runs["baseline"], runs["this tree"], strict=True)]
    same = all(_counters(o) == _counters(n) for o, n in zip(runs["baseline"], runs["this tree"], strict=True))
    return {"name": name, "command": "simmoe " + " ".join(args), "ratio": statistics.median(ratios),
            "ratios": ratios, "same": same,
            **{f"{k} cpu": statistics.median(r["cpu_s"] for r in v) for k, v in runs.items()},
            **{f"{k} wall": statistics.median(r["wall_s"] for r in v) for k, v in runs.items()}}


def _counters(r: dict) -> list:
    """The counters both trees print for every selector (keys only one of them has left out)."""
    rows = json.loads(r["stdout"])["results"]
    keep = ("decode_tps", "committed", "draft_nodes", "ms_per_cycle", "h2d_per_token", "hit_rate", "cycles")
    return [{k: row.get(k) for k in keep} for row in rows]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default=BASELINE)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--trace80", type=Path, default=Path("/tmp/g80.parquet"))
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "engine-benchmark.md")
    args = ap.parse_args()
    if not args.trace80.exists():
        subprocess.run([sys.executable, "-m", "simmoe", "synth", "--preset", "gsm8k", "--out", str(args.trace80),
                        "--no-progress"], env=_env(ROOT), check=True, capture_output=True)
    base, full = baseline_tree(args.baseline)
    trees = {"baseline": base, "this tree": ROOT}
    cwd = Path(tempfile.mkdtemp(prefix="simmoe-bench-"))
    for label, tree in trees.items():
        where = imported_from(sys.executable, _env(tree), cwd)
        assert where.startswith(str(tree)), f"{label} imports {where}"
    gsm = str(ROOT / "traces" / "gsm8k.parquet")
    out = [paired("README's first command", ["replay", gsm, "--slots", "12", "--no-progress", "--json", "-"],
                  trees, args.repeat, cwd),
           paired("full 80-request GSM8K", ["replay", str(args.trace80), "--slots", "12", "--no-progress",
                                            "--json", "-"], trees, args.repeat, cwd),
           # not a goal: what the two commands above spend before and around the replays themselves
           paired("start-up: README's command on 1 request", ["replay", gsm, "--slots", "12", "--requests", "1",
                                                              "--no-progress", "--json", "-"],
                  trees, args.repeat, cwd)]
    b64 = [run([sys.executable, "-m", "simmoe", "replay", str(args.trace80), "--batch", "64", "--selectors",
                "ar,eagle3,evict,specfit", "--no-progress", "--json", "-", "--workers", "2"],
               env=_env(ROOT), cwd=cwd) for _ in range(max(1, args.repeat // 2))]
    pf_args = ["replay", str(args.trace80), "--batch", "16", "--requests", "32", "--slots", "12", "--no-progress",
               "--json", "-", "--workers", "1"]
    pf_ratios = []
    for _ in range(args.repeat):
        plain = run([sys.executable, "-m", "simmoe", *pf_args], env=_env(ROOT), cwd=cwd)
        draft = run([sys.executable, "-m", "simmoe", *pf_args, "--prefetch", "draft"], env=_env(ROOT), cwd=cwd)
        pf_ratios.append((draft["cpu_s"] / plain["cpu_s"], plain["cpu_s"], draft["cpu_s"]))
    args.out.write_text(report(out, b64, pf_ratios, full, args))
    print(args.out.read_text())
    return 0


def report(pairs, b64, pf, full, args) -> str:
    med = statistics.median
    lines = ["# One replay engine: speed and memory against the separate paths", "",
             f"Measured by `python benchmarks/bench_engine.py --repeat {args.repeat}` against {full[:7]} "
             "(engine, batch and prefetch as separate paths), alternately, on this machine (2 cores shared with "
             "other jobs), after one uncounted run of each tree; bytecode cached per tree, as an installed "
             "package's is.  SYNTHETIC traces: the shipped GSM8K trace (21 requests) and the full 80-request "
             "GSM8K preset.", "",
             "## Batch 1 against the separate paths (goal: median CPU ratio ≤ 1.05)", "",
             "| command | baseline CPU s | this tree CPU s | median ratio | per-pair ratios | counters identical | |",
             "|---|---|---|---|---|---|---|"]
    for p in pairs:
        goal = verdict(p['ratio'] <= RATIO_GOAL) if not p["name"].startswith("start-up") else "(not a goal)"
        lines.append(f"| {p['name']} | {p['baseline cpu']:.2f} | {p['this tree cpu']:.2f} | {p['ratio']:.3f} | "
                     f"{', '.join(f'{r:.2f}' for r in p['ratios'])} | {'yes' if p['same'] else 'NO'} | "
                     f"{goal} |")
    wall = med(r["wall_s"] for r in b64)
    rss = med(r["tree_rss_mb"] for r in b64)
    pss = med(r["tree_pss_mb"] for r in b64)
    lines += ["", "## Batch 64 over the 80-request trace (goal: ≤ 60 s, ≤ 2 GB)", "",
              "`simmoe replay g80 --batch 64 --selectors ar,eagle3,evict,specfit --workers 2`: "
              f"wall {wall:.1f} s (median of {len(b64)}), peak summed RSS {rss:,.0f} MB, PSS {pss:,.0f} MB: "
              f"{verdict(wall <= WALL_GOAL_S and rss <= MEMORY_GOAL_MB)}", "",
              "## Batch 16 with `--prefetch draft` (goal: ≤ 3× the same batch without)", "",
              "`simmoe replay g80 --batch 16 --requests 32 --slots 12` with and without `--prefetch draft` "
              "(its time saved needs the replay without prefetch too, which the ratio includes): "
              f"median CPU ratio {med(x[0] for x in pf):.2f} "
              f"({', '.join(f'{x[0]:.2f}' for x in pf)}; without {med(x[1] for x in pf):.2f} s, "
              f"with {med(x[2] for x in pf):.2f} s): {verdict(med(x[0] for x in pf) <= PREFETCH_GOAL)}", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
