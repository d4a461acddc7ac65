"""SIGINT and SIGTERM to the pooled commands, and the time of ``simmoe report --quick``.

    python benchmarks/bench_interrupt.py [--runs 3] [--quick-repeat 1] [--out reports/interrupt-benchmark.md]

1. Each pooled command (``simmoe replay`` with 2 workers and ``--selectors
   all --timeline``, ``simmoe sweep``, ``simmoe report --quick``) is started
   ``--runs`` times per way of signalling it, run as the ``simmoe`` script
   runs it, in its own process group, and at a seeded random time (0.2-3 s
   after its worker processes appear) signalled: SIGINT to the whole group
   (1-3 of them 0-0.2 s apart, as a terminal's Ctrl-C), SIGINT to the main
   process alone, SIGTERM to the main process alone, SIGTERM to the group.
   Random times, unlike the tests' fixed pause points, also hit the command
   while it starts, plans, or collects and writes results.  Reported: the
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
import random
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from interrupt_helpers import ENTRY, group_left  # noqa: E402

TRACES = [str(ROOT / "traces" / "gsm8k.parquet"), str(ROOT / "traces" / "cnndm.parquet")]
WAYS = {  # name: (signal, to the whole group, how many)
    "SIGINT x1-3 to the group": (signal.SIGINT, True, (1, 3)),
    "SIGINT to the main process": (signal.SIGINT, False, (1, 1)),
    "SIGTERM to the main process": (signal.SIGTERM, False, (1, 1)),
    "SIGTERM to the group": (signal.SIGTERM, True, (1, 1)),
}


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


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def signal_at_random(argv, *, seed: int, sig, group: bool, count) -> dict:
    """Run ``simmoe ARGV``; 0.2-3 s after its workers appear send ``sig`` ``count`` times 0-0.2 s apart."""
    rng = random.Random(seed)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", ENTRY, *argv], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    ended: list[float] = []
    waiter = threading.Thread(target=lambda: (proc.wait(), ended.append(time.monotonic())), daemon=True)
    waiter.start()
    t0 = time.monotonic()
    while not _children(proc.pid) and proc.poll() is None and time.monotonic() - t0 < 120:
        time.sleep(0.02)
    time.sleep(rng.uniform(0.2, 3.0))
    first = time.monotonic()
    for _ in range(rng.randint(*count)):
        try:
            (os.killpg if group else os.kill)(proc.pid, sig)
        except ProcessLookupError:
            break
        time.sleep(rng.uniform(0.0, 0.2))
    waiter.join(20)
    if not ended:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"rc": None, "err": "HANG", "seconds": float("inf"), "left": True}
    err = proc.stderr.read()
    proc.stderr.close()
    return {"rc": proc.returncode, "err": err, "seconds": ended[0] - first, "left": group_left(proc.pid, 2.0)}


def signalled(argv: list[str], runs: int, way) -> dict:
    sig, group, count = way
    seconds, statuses, loud, tracebacks, hangs, leftovers = [], [], 0, 0, 0, 0
    for seed in range(runs):
        r = signal_at_random(argv, seed=seed, sig=sig, group=group, count=count)
        statuses.append(r["rc"])
        if r["rc"] is None:
            hangs += 1
            continue
        seconds.append(r["seconds"])
        loud += len(r["err"].strip().splitlines()) != 1
        tracebacks += "Traceback" in r["err"]
        leftovers += bool(r["left"])
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
    ap.add_argument("--runs", type=int, default=3, help="runs per command and way of signalling (default 3)")
    ap.add_argument("--quick-repeat", type=int, default=1)
    ap.add_argument("--out", default=None, help="also write the markdown here")
    args = ap.parse_args(argv)
    lines = ["# SIGINT and SIGTERM to the pooled commands, and `simmoe report --quick`", "",
             f"`python benchmarks/bench_interrupt.py --runs {args.runs} --quick-repeat {args.quick_repeat}` "
             "(how it measures: the script's docstring).", "",
             f"Load average before: {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs).", "",
             "| command | signal | runs | exit after the first signal, median / max (s) | exit statuses | "
             "stderr not one line | tracebacks | hangs | processes left |", "|---|---|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name, cmd in commands(tmp).items():
            for way_name, way in WAYS.items():
                r = signalled(cmd, args.runs, way)
                lines.append(f"| `simmoe {name}` | {way_name} | {args.runs} | {r['median']:.2f} / {r['max']:.2f} | "
                             f"{', '.join(r['statuses'])} | {r['not one line']} | {r['tracebacks']} | "
                             f"{r['hangs']} | {r['left behind']} |")
                print(lines[-1], flush=True)
        q = quick_report(args.quick_repeat, tmp) if args.quick_repeat > 0 else None
    if q is not None:
        lines += ["", f"`simmoe report --quick` on the two shipped traces (SYNTHETIC), median of "
                  f"{args.quick_repeat}: {q['wall']:.1f} s wall, {q['cpu']:.1f} s CPU (the process and its workers)."]
    lines += ([] if q is not None else [""]) + [f"Load average after: {os.getloadavg()[0]:.1f}."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        from simmoe.atomicio import write_text_atomic

        write_text_atomic(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
