"""Speed and memory of batched replay, and batch 1 against a baseline revision, side by side in one run.

    python benchmarks/bench_batch.py [--trace /tmp/g80.parquet] [--repeat 2] [--baseline HEAD]
                                     [--batch-requests 40] [--out reports/batch-benchmark.md]

1. ``simmoe replay TRACE --batch 64 --selectors ar,eagle3,evict,specfit``
   (default profile, 48 LRU slots, 2 workers): wall time, CPU time of every
   process, and the peak resident set of the largest process (``os.wait4``
   reports the child and its waited-for descendants), ``--repeat`` times.
2. Batch 1, the same command without ``--batch`` (selector time fixed, one
   worker, the first ``--batch-requests`` requests), run alternately with
   this working tree and with the ``--baseline`` revision's ``simmoe`` and
   ``solvers`` (``git archive`` into a temporary folder): CPU and wall time of
   each, their ratio, and whether the two runs' counters (the JSON's ``results``) are identical.

The trace is the full 80-request GSM8K preset (``simmoe synth --preset gsm8k
--out /tmp/g80.parquet``; generated when missing).  SYNTHETIC trace.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SELECTORS = "ar,eagle3,evict,specfit"


def run(cmd: list[str], env: dict | None = None) -> dict:
    """Run ``cmd``; wall and CPU seconds (all processes) and the peak RSS of the largest, in MB."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=ROOT)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}\n{stderr.decode()[-2000:]}")
    return {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "rss_mb": ru.ru_maxrss / 1024, "stdout": stdout}


def baseline_tree(rev: str) -> Path:
    """``simmoe`` and ``solvers`` of revision ``rev`` in a temporary folder (read from git, no checkout)."""
    tmp = Path(tempfile.mkdtemp(prefix="simmoe-baseline-"))
    archive = subprocess.run(["git", "archive", rev, "simmoe", "solvers"], cwd=ROOT, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
    return tmp


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default="/tmp/g80.parquet")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--baseline", default="HEAD", help="git revision for the batch-1 comparison")
    ap.add_argument("--batch-requests", type=int, default=40)
    ap.add_argument("--out", default=None, help="write a markdown report here")
    args = ap.parse_args(argv)
    trace = Path(args.trace)
    py = sys.executable
    if not trace.is_file():
        print(f"generating {trace}", file=sys.stderr)
        subprocess.run([py, "-m", "simmoe", "synth", "--preset", "gsm8k", "--out", str(trace), "--no-progress"],
                       check=True, cwd=ROOT)
    lines = []
    batched = []
    cmd64 = [py, "-m", "simmoe", "replay", str(trace), "--batch", "64", "--selectors", SELECTORS,
             "--no-progress", "--workers", "2", "--selector-ms", "0.5", "--json", "-"]
    for i in range(args.repeat):
        r = run(cmd64)
        batched.append(r)
        print(f"batch 64, run {i + 1}: wall {r['wall_s']:.1f} s, CPU {r['cpu_s']:.1f} s, "
              f"peak RSS {r['rss_mb']:.0f} MB", file=sys.stderr)
    base = baseline_tree(args.baseline)
    try:
        cmd1 = ["-m", "simmoe", "replay", str(trace), "--slots", "12", "--selectors", SELECTORS, "--no-progress",
                "--workers", "1", "--selector-ms", "0.5", "--requests", str(args.batch_requests), "--json", "-"]
        env_new = {**os.environ, "PYTHONPATH": str(ROOT)}
        env_old = {**os.environ, "PYTHONPATH": str(base)}
        pairs = []
        for i in range(args.repeat):
            new = run([py, *cmd1], env_new)
            old = run([py, *cmd1], env_old)
            pairs.append((old, new))
            print(f"batch 1, run {i + 1}: baseline CPU {old['cpu_s']:.1f} s, this tree {new['cpu_s']:.1f} s "
                  f"(ratio {new['cpu_s'] / old['cpu_s']:.3f})", file=sys.stderr)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    same = all(json.loads(o["stdout"])["results"] == json.loads(n["stdout"])["results"] for o, n in pairs)
    best64 = min(batched, key=lambda r: r["wall_s"])
    old_cpu = min(o["cpu_s"] for o, _ in pairs)
    new_cpu = min(n["cpu_s"] for _, n in pairs)
    old_wall = min(o["wall_s"] for o, _ in pairs)
    new_wall = min(n["wall_s"] for _, n in pairs)
    lines += [
        "# Batched replay: speed and memory (SYNTHETIC trace)", "",
        f"Command: `python benchmarks/bench_batch.py --trace {args.trace} --repeat {args.repeat} "
        f"--baseline {args.baseline} --batch-requests {args.batch_requests}`; trace: the full 80-request "
        "GSM8K preset (`simmoe synth --preset gsm8k --out /tmp/g80.parquet`, SYNTHETIC), default profile "
        "a100-pcie-40gb, 48 LRU slots, selector time fixed at 0.5 ms. Machine: "
        f"{os.cpu_count()} CPUs, shared with other jobs while this ran.", "",
        "## `--batch 64`, selectors " + SELECTORS + " (+ the AR baseline), 2 workers", "",
        "| run | wall s | CPU s (all processes) | peak RSS, largest process (MB) |", "|---|---|---|---|",
    ]
    lines += [f"| {i + 1} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['rss_mb']:.0f} |" for i, r in enumerate(batched)]
    lines += ["", f"Best: {best64['wall_s']:.1f} s wall (goal ≤ 60 s), {best64['rss_mb']:.0f} MB (goal ≤ 2,048 MB).",
              "", f"## Batch 1: this tree against `{args.baseline}` (first {args.batch_requests} requests, 12 LRU "
              "slots, 1 worker), alternating", "",
              "| run | baseline CPU s | this tree CPU s | ratio | baseline wall s | this tree wall s |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {i + 1} | {o['cpu_s']:.2f} | {n['cpu_s']:.2f} | {n['cpu_s'] / o['cpu_s']:.3f} | "
              f"{o['wall_s']:.2f} | {n['wall_s']:.2f} |" for i, (o, n) in enumerate(pairs)]
    lines += ["", f"Best of each: CPU {old_cpu:.2f} s → {new_cpu:.2f} s (ratio {new_cpu / old_cpu:.3f}); "
              f"wall {old_wall:.2f} s → {new_wall:.2f} s (ratio {new_wall / old_wall:.3f}). "
              f"Results (the JSON's per-selector counters) {'identical' if same else 'DIFFERENT'} between the "
              "two trees.", ""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
