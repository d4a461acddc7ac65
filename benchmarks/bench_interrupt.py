"""Ctrl-C of the pooled commands, and the time of ``simmoe report --quick``.

    python benchmarks/bench_interrupt.py [--runs 12] [--quick-repeat 3] [--out reports/interrupt-benchmark.md]

1. Each pooled command (``simmoe replay`` with 2 workers and ``--selectors
   all --timeline``, ``simmoe sweep``, ``simmoe report --quick``) is started
   ``--runs`` times in its own process group and, at a seeded random time
   (0.2-3 s after its worker processes appear), sent 1-3 SIGINTs 0-0.2 s
   apart, as a terminal's Ctrl-C reaches the whole group.  Reported: the
   seconds from the first signal to the exit (median, max), exit statuses,
   runs whose stderr was not one line, tracebacks, hangs (no exit within
   20 s) and runs that left a process of the group behind.
2. ``simmoe report --quick`` on the two shipped traces, ``--quick-repeat``
   times: wall time and the CPU time of the process and its workers
   (``resource.getrusage(RUSAGE_CHILDREN)``), medians.

The machine's load average is printed beside, since both depend on it.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from interrupt_helpers import interrupt  # noqa: E402

TRACES = [str(ROOT / "traces" / "gsm8k.parquet"), str(ROOT / "traces" / "cnndm.parquet")]


def commands(tmp: Path) -> dict[str, list[str]]:
    return {
        "replay --workers 2 --selectors all --timeline": [
            "replay", TRACES[0], "--selectors", "all", "--requests", "3", "--workers", "2",
            "--timeline", str(tmp / "tl.json"), "--no-progress"],
        "sweep --workers 2": [
            "sweep", TRACES[0], "-o", str(tmp / "s.csv"), "--overwrite", "--selectors", "all",
            "--slots", "0,12,48", "--requests", "3", "--workers", "2", "--quiet"],
        "report --quick --workers 2": [
            "report", "--quick", "--out", str(tmp / "rep"), "--workers", "2", "--quiet", "--traces", *TRACES],
    }


def interruptions(argv: list[str], runs: int) -> dict:
    seconds, statuses, loud, tracebacks, hangs, leftovers = [], [], 0, 0, 0, 0
    for seed in range(runs):
        r = interrupt(argv, seed=seed, after=(0.2, 3.0), ready="workers")
        statuses.append(r["rc"])
        if r["rc"] is None:
            hangs += 1
            continue
        seconds.append(r["seconds"])
        loud += len(r["err"].strip().splitlines()) != 1
        tracebacks += "Traceback" in r["err"]
        leftovers += bool(r["leftover"])
    return {"median": statistics.median(seconds) if seconds else float("nan"),
            "max": max(seconds) if seconds else float("nan"), "statuses": sorted(set(map(str, statuses))),
            "not one line": loud, "tracebacks": tracebacks, "hangs": hangs, "left behind": leftovers}


def quick_report(repeat: int, tmp: Path) -> dict:
    walls, cpus = [], []
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for i in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "simmoe", "report", "--quick", "--quiet", "--out",
                        str(tmp / f"q{i}"), "--traces", *TRACES], check=True, env=env, cwd=ROOT,
                       stdout=subprocess.DEVNULL)
        walls.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return {"wall": statistics.median(walls), "cpu": statistics.median(cpus)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=12)
    ap.add_argument("--quick-repeat", type=int, default=3)
    ap.add_argument("--out", default=None, help="also write the markdown here")
    args = ap.parse_args(argv)
    lines = ["# Ctrl-C of the pooled commands, and `simmoe report --quick`", "",
             f"`python benchmarks/bench_interrupt.py --runs {args.runs} --quick-repeat {args.quick_repeat}` "
             "(how it measures: the script's docstring).", "",
             f"Load average before: {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs).", "",
             "| command | runs | exit after the first SIGINT, median / max (s) | exit statuses | "
             "stderr not one line | tracebacks | hangs | processes left |", "|---|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name, cmd in commands(tmp).items():
            r = interruptions(cmd, args.runs)
            lines.append(f"| `simmoe {name}` | {args.runs} | {r['median']:.2f} / {r['max']:.2f} | "
                         f"{', '.join(r['statuses'])} | {r['not one line']} | {r['tracebacks']} | {r['hangs']} | "
                         f"{r['left behind']} |")
            print(lines[-1], flush=True)
        q = quick_report(args.quick_repeat, tmp)
    lines += ["", f"`simmoe report --quick` on the two shipped traces (SYNTHETIC), median of {args.quick_repeat}: "
              f"{q['wall']:.1f} s wall, {q['cpu']:.1f} s CPU (the process and its workers).",
              f"Load average after: {os.getloadavg()[0]:.1f}."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        from simmoe.atomicio import write_text_atomic

        write_text_atomic(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
