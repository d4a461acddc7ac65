"""Speed and memory of batched replay, and batch 1 against the pre-batching revision, side by side in one run.

    python benchmarks/bench_batch.py [--trace /tmp/g80.parquet] [--repeat 5] [--baseline e67ae59]
                                     [--batch-requests 0] [--out reports/batch-benchmark.md]

1. ``simmoe replay TRACE --batch 64 --selectors ar,eagle3,evict,specfit``
   (default profile, 48 LRU slots, 2 workers): wall time, CPU time of every
   process, and memory counted over every process of the run: the process
   tree under /proc is sampled every 50 ms and the peak of the summed resident
   sets (an upper bound: pages the forked workers share with the parent count
   once per process) and of the summed proportional sets (PSS: shared pages
   split between the processes that share them) are reported, beside the
   largest single process's peak (``os.wait4``).  ``--repeat`` runs; medians.
2. Batch 1, the same command without ``--batch`` (selector time fixed, one
   worker, the first ``--batch-requests`` requests, 0 = all), run alternately
   with this working tree and with the ``--baseline`` revision's ``simmoe`` and
   ``solvers`` (``git archive`` into a temporary folder; e67ae59 is the last
   revision before batched decoding): CPU and wall time of each, the median of
   the per-pair ratios, and whether the two runs' counters (the JSON's
   ``results``) are identical.  Every command runs from a neutral folder so
   that ``python -m simmoe`` imports the tree named by ``PYTHONPATH`` (the
   current folder comes first on ``sys.path``); the module file each side
   imports is checked before timing.
3. Where batch 1's time goes: each stage (imports, reading the trace, each
   selector's plan and simulate passes) timed in one process per tree,
   ``--repeat`` times alternately, medians side by side.

The trace is the full 80-request GSM8K preset (``simmoe synth --preset gsm8k
--out /tmp/g80.parquet``; generated when missing).  SYNTHETIC trace.
Goals: batch 64 in ≤ 60 s and ≤ 2 GB; batch 1 no slower than the
baseline (median CPU ratio over the pairs ≤ 1.02).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SELECTORS = "ar,eagle3,evict,specfit"
BASELINE = "e67ae59"          # the last revision before batched decoding (d4e5b92)
WALL_GOAL_S = 60.0
MEMORY_GOAL_MB = 2048.0
SLOWER_TOLERANCE = 0.02     # batch 1: median CPU ratio (this tree / baseline) at most 1.02
PAGE_KB = os.sysconf("SC_PAGE_SIZE") / 1024


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    return kids


def _tree(pid: int) -> list[int]:
    kids, out, todo = _children(), [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def _memory_kb(pid: int) -> tuple[float, float]:
    """(RSS, PSS) of one process in kB; zeros once it is gone."""
    try:
        with open(f"/proc/{pid}/statm") as fh:
            rss = int(fh.read().split()[1]) * PAGE_KB
    except OSError:
        return 0.0, 0.0
    pss = 0.0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    pss = float(line.split()[1])
                    break
    except OSError:
        pss = rss
    return rss, pss


class TreeMemory(threading.Thread):
    """Samples the summed RSS and PSS of a process and all its descendants until stopped."""

    def __init__(self, pid: int, every_s: float = 0.05):
        super().__init__(daemon=True)
        self.pid, self.every = pid, every_s
        self.peak_rss_mb = self.peak_pss_mb = 0.0
        self.peak_procs = 0
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            pids = _tree(self.pid)
            mem = [_memory_kb(p) for p in pids]
            self.peak_rss_mb = max(self.peak_rss_mb, sum(m[0] for m in mem) / 1024)
            self.peak_pss_mb = max(self.peak_pss_mb, sum(m[1] for m in mem) / 1024)
            self.peak_procs = max(self.peak_procs, sum(1 for m in mem if m[0] > 0))
            self._halt.wait(self.every)

    def stop(self):
        self._halt.set()
        self.join()


def run(cmd: list[str], env: dict | None = None, cwd: Path | None = None) -> dict:
    """Run ``cmd``: wall and CPU seconds (all processes), peak memory of the whole process tree and of the largest."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=cwd or ROOT)
        mem = TreeMemory(p.pid)
        mem.start()
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        mem.stop()
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}\n{stderr.decode()[-2000:]}")
    return {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "rss_mb": ru.ru_maxrss / 1024,
            "tree_rss_mb": mem.peak_rss_mb, "tree_pss_mb": mem.peak_pss_mb, "procs": mem.peak_procs,
            "stdout": stdout}


def baseline_tree(rev: str) -> tuple[Path, str]:
    """``simmoe`` and ``solvers`` of revision ``rev`` in a temporary folder (read from git, no checkout); its hash."""
    full = subprocess.run(["git", "rev-parse", rev], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()
    tmp = Path(tempfile.mkdtemp(prefix="simmoe-baseline-"))
    archive = subprocess.run(["git", "archive", full, "simmoe", "solvers"], cwd=ROOT, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
    return tmp, full


def imported_from(py: str, env: dict, cwd: Path) -> str:
    return subprocess.run([py, "-c", "import simmoe, solvers; print(simmoe.__file__)"], env=env, cwd=cwd,
                          check=True, capture_output=True, text=True).stdout.strip()


STAGES = """
import json, sys, time
T = time.process_time
t0 = T()
from simmoe.trace.io import read_trace
from simmoe.hardware.profile import load_profile
from simmoe.replay.engine import ReplayConfig, plan, simulate
t1 = T()
tr = read_trace(sys.argv[1])
t2 = T()
prof = load_profile("a100-pcie-40gb")
res = {"import": t1 - t0, "read trace": t2 - t1}
for sel in sys.argv[2].split(","):
    cfg = ReplayConfig(selector=sel, slots=12, cache="lru", selector_ms=0.5)
    a = T(); p = plan(tr, cfg, prof); b = T(); r = simulate(tr, p, cfg, prof); r.summary(); c = T()
    res[sel + " plan"], res[sel + " simulate"] = b - a, c - b
print(json.dumps(res))
"""


def stages(py: str, env: dict, cwd: Path, trace: Path) -> dict:
    """CPU seconds of each stage of a batch-1 replay in one process (the library, without the command line)."""
    out = subprocess.run([py, "-c", STAGES, str(trace), SELECTORS], env=env, cwd=cwd, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def compare_results(pairs) -> tuple[bool, list[str]]:
    """Whether every counter both trees report is equal, per selector and run; the counters only this tree adds."""
    same, added = True, set()
    for o, n in pairs:
        for a, b in zip(json.loads(o["stdout"])["results"], json.loads(n["stdout"])["results"], strict=True):
            common = set(a) & set(b)
            same &= all(a[k] == b[k] for k in common)
            added |= set(b) - set(a)
    return same, sorted(added)


def verdict(ok: bool) -> str:
    return "**PASS**" if ok else "**MISS**"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default="/tmp/g80.parquet")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--baseline", default=BASELINE, help="git revision for the batch-1 comparison "
                                                          f"(default {BASELINE}, before batched decoding)")
    ap.add_argument("--batch-requests", type=int, default=0, help="batch-1 comparison on the first N requests "
                                                                   "(0 = all)")
    ap.add_argument("--out", default=None, help="write a markdown report here")
    args = ap.parse_args(argv)
    trace = Path(args.trace).resolve()
    py = sys.executable
    if not trace.is_file():
        print(f"generating {trace}", file=sys.stderr)
        subprocess.run([py, "-m", "simmoe", "synth", "--preset", "gsm8k", "--out", str(trace), "--no-progress"],
                       check=True, cwd=ROOT)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--", "simmoe", "solvers"], cwd=ROOT,
                                capture_output=True, text=True).stdout.strip())
    neutral = Path(tempfile.mkdtemp(prefix="simmoe-bench-cwd-"))
    base, base_hash = baseline_tree(args.baseline)
    env_new = {**os.environ, "PYTHONPATH": str(ROOT)}
    env_old = {**os.environ, "PYTHONPATH": str(base)}
    try:
        where_new, where_old = imported_from(py, env_new, neutral), imported_from(py, env_old, neutral)
        if not where_new.startswith(str(ROOT)) or not where_old.startswith(str(base)):
            raise SystemExit(f"wrong trees imported: {where_new}, {where_old}")
        batched = []
        cmd64 = [py, "-m", "simmoe", "replay", str(trace), "--batch", "64", "--selectors", SELECTORS,
                 "--no-progress", "--workers", "2", "--selector-ms", "0.5", "--json", "-"]
        for i in range(args.repeat):
            r = run(cmd64, env_new, neutral)
            batched.append(r)
            print(f"batch 64, run {i + 1}: wall {r['wall_s']:.1f} s, CPU {r['cpu_s']:.1f} s, all processes "
                  f"RSS {r['tree_rss_mb']:.0f} MB / PSS {r['tree_pss_mb']:.0f} MB, largest {r['rss_mb']:.0f} MB",
                  file=sys.stderr)
        cmd1 = ["-m", "simmoe", "replay", str(trace), "--slots", "12", "--selectors", SELECTORS, "--no-progress",
                "--workers", "1", "--selector-ms", "0.5", "--json", "-"]
        if args.batch_requests:
            cmd1 += ["--requests", str(args.batch_requests)]
        pairs = []
        for i in range(args.repeat):  # alternate which side runs first
            if i % 2 == 0:
                old = run([py, *cmd1], env_old, neutral)
                new = run([py, *cmd1], env_new, neutral)
            else:
                new = run([py, *cmd1], env_new, neutral)
                old = run([py, *cmd1], env_old, neutral)
            pairs.append((old, new))
            print(f"batch 1, run {i + 1}: baseline CPU {old['cpu_s']:.1f} s, this tree {new['cpu_s']:.1f} s "
                  f"(ratio {new['cpu_s'] / old['cpu_s']:.3f})", file=sys.stderr)
        stage_pairs = []
        for _ in range(args.repeat):
            stage_pairs.append((stages(py, env_old, neutral, trace), stages(py, env_new, neutral, trace)))
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(neutral, ignore_errors=True)
    same, added = compare_results(pairs)
    med = statistics.median
    wall64, rss64, pss64 = (med(r[k] for r in batched) for k in ("wall_s", "tree_rss_mb", "tree_pss_mb"))
    worst_wall, worst_rss = max(r["wall_s"] for r in batched), max(r["tree_rss_mb"] for r in batched)
    cpu_ratios = [n["cpu_s"] / o["cpu_s"] for o, n in pairs]
    wall_ratios = [n["wall_s"] / o["wall_s"] for o, n in pairs]
    cpu_ratio, wall_ratio = med(cpu_ratios), med(wall_ratios)
    spread = (max(cpu_ratios) - min(cpu_ratios)) / 2 if len(cpu_ratios) > 1 else 0.0
    slower_ok = cpu_ratio <= 1.0 + SLOWER_TOLERANCE
    n_req = args.batch_requests or "all 80"
    lines = [
        "# Batched replay: speed and memory (SYNTHETIC trace)", "",
        f"Command: `python benchmarks/bench_batch.py --trace {args.trace} --repeat {args.repeat} "
        f"--baseline {args.baseline} --batch-requests {args.batch_requests}`, run "
        f"on this tree (HEAD {head}{' + uncommitted changes to simmoe/solvers' if dirty else ''}); trace: the full "
        "80-request GSM8K preset (`simmoe synth --preset gsm8k`, SYNTHETIC), default profile a100-pcie-40gb, "
        f"selector time fixed at 0.5 ms. Machine: {os.cpu_count()} CPUs, shared with other jobs. "
        "Every command ran from a neutral folder with `PYTHONPATH` naming the tree (checked: "
        "`simmoe.__file__`).", "",
        "## Verdict", "",
        "| goal | measured (median of runs) | verdict |", "|---|---|---|",
        f"| `--batch 64`, {SELECTORS} (+ the AR baseline), in ≤ {WALL_GOAL_S:.0f} s | {wall64:.1f} s wall "
        f"(slowest run {worst_wall:.1f} s) | {verdict(wall64 <= WALL_GOAL_S)} |",
        f"| the same in ≤ 2 GB, every process counted | {rss64:.0f} MB summed RSS (slowest-case "
        f"{worst_rss:.0f} MB); {pss64:.0f} MB summed PSS | {verdict(rss64 <= MEMORY_GOAL_MB)} |",
        f"| batch 1 no slower than before batching ({args.baseline} = `{base_hash}`) | CPU ratio {cpu_ratio:.3f}, "
        f"wall ratio {wall_ratio:.3f} (this tree / baseline; per-pair spread ±{spread:.3f}) | "
        f"{verdict(slower_ok)} |", "",
        "The memory goal is judged on the summed resident sets, which count pages the forked workers share "
        "with the parent once per process (an upper bound); the summed PSS splits shared pages between the "
        f"processes that share them. The batch-1 goal passes when the median CPU ratio over the pairs is at "
        f"most {1 + SLOWER_TOLERANCE:.2f}.", "",
        "## `--batch 64`, selectors " + SELECTORS + " (+ the AR baseline), 48 LRU slots, 2 workers", "",
        "| run | wall s | CPU s (all processes) | peak summed RSS, all processes (MB) | peak summed PSS (MB) | "
        "largest process peak RSS (MB) | processes |", "|---|---|---|---|---|---|---|",
    ]
    lines += [f"| {i + 1} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['tree_rss_mb']:.0f} | {r['tree_pss_mb']:.0f} "
              f"| {r['rss_mb']:.0f} | {r['procs']} |" for i, r in enumerate(batched)]
    lines += ["", f"## Batch 1: this tree against {args.baseline} (`{base_hash}`), {n_req} requests, 12 LRU slots, "
              "1 worker, alternating which runs first", "",
              "| pair | baseline CPU s | this tree CPU s | CPU ratio | baseline wall s | this tree wall s "
              "| wall ratio |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| {i + 1} | {o['cpu_s']:.2f} | {n['cpu_s']:.2f} | {n['cpu_s'] / o['cpu_s']:.3f} | "
              f"{o['wall_s']:.2f} | {n['wall_s']:.2f} | {n['wall_s'] / o['wall_s']:.3f} |"
              for i, (o, n) in enumerate(pairs)]
    lines += ["", f"Medians: CPU {med(o['cpu_s'] for o, _ in pairs):.2f} s → {med(n['cpu_s'] for _, n in pairs):.2f} s "
              f"(median ratio {cpu_ratio:.3f}); wall {med(o['wall_s'] for o, _ in pairs):.2f} s → "
              f"{med(n['wall_s'] for _, n in pairs):.2f} s (median ratio {wall_ratio:.3f}). Results: every "
              f"per-selector counter both trees report is {'identical' if same else 'DIFFERENT'} between them"
              + (f"; this tree adds {', '.join(f'`{k}`' for k in added)}" if added else "") + ".", ""]
    keys = list(stage_pairs[0][0])
    lines += ["## Where batch 1's time goes: each stage in one process, median CPU s of "
              f"{len(stage_pairs)} runs per tree", "",
              "The library without the command line (`read_trace`, then `plan` and `simulate` per selector, "
              "12 LRU slots); the command line adds argument parsing, the AR baseline without a cache and the "
              "JSON output.", "",
              "| stage | baseline | this tree | difference |", "|---|---|---|---|"]
    for k in keys:
        o_k, n_k = med(o[k] for o, _ in stage_pairs), med(n[k] for _, n in stage_pairs)
        lines.append(f"| {k} | {o_k:.3f} | {n_k:.3f} | {n_k - o_k:+.3f} |")
    tot_o = sum(med(o[k] for o, _ in stage_pairs) for k in keys)
    tot_n = sum(med(n[k] for _, n in stage_pairs) for k in keys)
    lines += [f"| total | {tot_o:.3f} | {tot_n:.3f} | {tot_n - tot_o:+.3f} |", ""]
    moved = [(k, med(o[k] for o, _ in stage_pairs), med(n[k] for _, n in stage_pairs)) for k in keys]
    moved = [(k, o_k, n_k) for k, o_k, n_k in moved if abs(n_k - o_k) > max(0.05, 0.05 * o_k)]
    lines += ["Stages that differ by more than 5% and 0.05 s: "
              + ("; ".join(f"{k} {n_k - o_k:+.3f} s ({n_k / o_k - 1:+.1%})" for k, o_k, n_k in moved)
                 if moved else "none") + ".", ""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
