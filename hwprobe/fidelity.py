"""Regenerate ``reports/fidelity-<device>.md``: the simulator's replay against live runs on this machine.

    python -m hwprobe.fidelity [--out-dir reports] [--max-new-tokens 48] [--repeats 8] [--keep DIR]

One command, in order (torch on one thread, cycles timed by the thread's CPU
time on the CPU; every step is an ordinary ``hwprobe`` / ``simmoe`` call):

1. ``hwprobe record`` of the *validation* prompts → the trace;
2. SpecFit's cost model (Eq. 4), derived
   (:func:`simmoe.validation.live.derived_cost_model`) from the event model
   fitted to ``hwprobe live`` runs of ``ar`` and ``eagle3`` on the *fitting*
   prompts;
3. ``--repeats`` rounds; in each, ``hwprobe live`` once for every
   configuration (``ar``, ``eagle3``, ``specfit`` at 0, a few and many
   slots), on the fitting and then the validation prompts.  Each live run
   is one pass; a configuration's passes, spread over the whole command,
   merge into one run whose every time is its minimum over the passes
   (:func:`simmoe.validation.live.read_live_passes`): on a shared machine whole
   seconds run 1.5–2× slow, whatever the clock, and the minimum keeps the
   undisturbed measurement;
4. the event model's timing fitted to the merged fitting runs
   (:func:`simmoe.validation.live.fit_timing`), and every merged validation run
   compared with the replay of the trace (:func:`simmoe.validation.live.compare`):
   held-out prompts, so the errors are predictions, not fits.  The same
   comparison on the first pass alone (fit and validation) is reported
   beside it: what one pass gives;
5. temperature 1: a second recording of the validation prompts sampled at
   temperature 1 (``hwprobe record --temperature 1``), live runs of
   ``eagle3`` and ``specfit`` sampling with the same seed on the fitting and
   the validation prompts, interleaved with the rounds above, and the
   validation runs' replays at temperature 1 with the timing of step 4 plus
   one term fitted to the temperature-1 *fitting* runs: the commit time that
   sampled verification adds per cycle (:func:`sampling_term`; the softmax
   over the vocabulary and the inverse-CDF draws run inside the live loop's
   commit), carried in the profile's ``commit_ms``; the selector's time is
   that of the temperature-1 fitting runs (goals: decode TPS within 5%, Mat
   within 3%);
6. prefetch: live runs with ``--prefetch draft`` on the validation prompts,
   replayed through the prefetch model with the timing of step 4.

Model: the embedded trained tiny model when it exists (its own drafter),
otherwise the ``tiny-random`` config with the target-derived drafter
(agreement 0.8); the report says which.  On a CUDA device the report is
named after the GPU.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from hwprobe.fidelity_report import T1, prefetch_report, replay_report, t1_report, t1_rows

# Python snippets: the trained tiny model's domain (standard-library source); any text works for random weights.
FIT_PROMPTS = [
    "import os\nimport sys\n\n\ndef main(argv=None):\n    ",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n        ",
]
VALIDATION_PROMPTS = [
    "def read_lines(path):\n    with open(path) as f:\n        ",
    "import re\n\n_pattern = re.compile(r'\\s+')\n\n\ndef normalize(text):\n    ",
    "class Counter(dict):\n    def __missing__(self, key):\n        ",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    ",
]
SELECTORS = ("ar", "eagle3", "specfit")


def _prompt_file(path: Path, texts: list[str], first_id: int) -> Path:
    rows = [{"question_id": first_id + i, "category": "code", "turns": [t]} for i, t in enumerate(texts)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def _model_args() -> tuple[list[str], str]:
    from hwprobe.cli import HwprobeError
    from hwprobe.models import tiny_dir

    try:
        trained = tiny_dir("target").is_dir() and tiny_dir("drafter").is_dir()
    except HwprobeError:
        trained = False
    if trained:
        return ["--model", "tiny"], "the embedded trained tiny model (tiny drafter)"
    return (["--config", "tiny-random", "--drafter", "target", "--agreement", "0.8"],
            "tiny-random config with random weights and the target-derived drafter (agreement 0.8): "
            "routes and acceptance are not those of a trained model (the trained tiny model was not present)")


def _hw(argv: list[str]) -> None:
    from hwprobe.cli import main

    rc = main(argv)
    if rc != 0:
        raise SystemExit(f"hwprobe {' '.join(argv[:1])} failed with exit status {rc}")


def _load() -> str:
    try:
        return " / ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m hwprobe.fidelity", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", default="reports", help="folder of the report (default reports)")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--repeats", type=int, default=8,
                    help="measured passes of every configuration, interleaved in rounds; each time is its "
                    "minimum over the passes (default 8)")
    ap.add_argument("--keep", metavar="DIR", help="keep the trace, live runs and profiles in DIR")
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.repeats < 1:
        print("error: --repeats must be >= 1", file=sys.stderr)
        return 2
    progress = None if args.quiet else (lambda msg: print(f"fidelity: {msg}", file=sys.stderr, flush=True))

    import torch

    from hwprobe.atomic import write_text_atomic
    from hwprobe.device import describe, pick_device
    from simmoe.hardware.profile import load_profile
    from simmoe.trace.io import read_trace
    from simmoe.validation.live import meets_goals

    torch.set_num_threads(1)
    out_dir = Path(args.out_dir)
    if not out_dir.is_dir():
        print(f"error: no such folder {out_dir}", file=sys.stderr)
        return 2
    device = pick_device(args.device)
    tag = "cpu" if device.type != "cuda" else re.sub(
        r"[^a-z0-9]+", "-", torch.cuda.get_device_name(device).lower()).strip("-")
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="fidelity-"))
    work.mkdir(parents=True, exist_ok=True)
    model, model_text = _model_args()
    bench = _Bench(work, [*model, "--device", args.device, "--max-new-tokens", str(args.max_new_tokens)],
                   args.repeats)
    started, load_before, t0 = datetime.datetime.now(datetime.UTC), _load(), time.perf_counter()
    try:
        trace_path = work / "trace.parquet"
        _hw(["record", *bench.common, "--slots", "4", "--prompts", str(bench.val_p), "--out", str(trace_path),
             "--quiet"])
        trace = read_trace(trace_path)
        trace1_path = work / "trace-t1.parquet"
        _hw(["record", *bench.common, "--slots", "4", "--temperature", str(T1), "--prompts", str(bench.val_p),
             "--out", str(trace1_path), "--quiet"])
        trace1 = read_trace(trace1_path)
        N, k = trace.geometry.num_experts, trace.geometry.top_k
        slot_grid = (0, max(k, N // 8), (3 * N) // 4)
        grid = _Grid(configs=[(sel, slots) for sel in SELECTORS for slots in slot_grid],
                     t1=[("eagle3", 0), ("eagle3", slot_grid[1]), ("specfit", slot_grid[1])],
                     pf=[("eagle3", 0), ("eagle3", slot_grid[1]), ("specfit", slot_grid[2])])  # --prefetch draft
        _derive_cost(bench, grid, slot_grid, trace, tag)
        _run_rounds(bench, grid, progress)
        c = _compare_all(bench, grid, trace, trace1, tag)
        elapsed = time.perf_counter() - t0
        text = replay_report(c.results, c.one_pass, c.val_runs, c.profile, load_profile(bench.cost), trace,
                             model_text, describe(device), started, load_before, _load(), elapsed, args, slot_grid,
                             prompts=(len(FIT_PROMPTS), len(VALIDATION_PROMPTS)))
        text += t1_report(c.t1_results, c.t1_runs, sampling=c.sampling, plain=c.t1_plain, profile=c.t1_profile)
        text += prefetch_report(c.pf_results, c.pf_runs)
        report = out_dir / f"fidelity-{tag}.md"
        write_text_atomic(report, text)
        print(f"wrote {report}: {sum(meets_goals(v) for v in c.results)}/{len(c.results)} configurations meet the "
              f"goals; temperature 1: {sum(r['pass'] for r in t1_rows(c.t1_results, c.t1_runs))}/"
              f"{len(c.t1_results)}; prefetch: {sum(meets_goals(v) for v in c.pf_results)}/{len(c.pf_results)}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


@dataclass
class _Grid:
    """The live configurations (selector, slots): at temperature 0, at temperature 1, with --prefetch draft."""

    configs: list[tuple[str, int]]
    t1: list[tuple[str, int]]
    pf: list[tuple[str, int]]


class _Bench:
    """The command's work folder: the prompt files, the cost profile, and one file per live pass."""

    def __init__(self, work: Path, common: list[str], repeats: int):
        self.work, self.common, self.repeats = work, common, repeats
        self.fit_p = _prompt_file(work / "fit.jsonl", FIT_PROMPTS, 9001)
        self.val_p = _prompt_file(work / "validation.jsonl", VALIDATION_PROMPTS, 9101)
        self.cost = work / "cost.toml"

    def live_file(self, kind: str, sel: str, slots: int, tag: str) -> Path:
        return self.work / f"{kind}-{sel}-{slots}-{tag}.jsonl"

    def run_live(self, kind: str, sel: str, slots: int, tag: str, extra=()) -> None:
        prompts = self.fit_p if kind == "fit" else self.val_p
        hardware = ["--hardware", str(self.cost)] if sel == "specfit" else []
        _hw(["live", *self.common, "--selector", sel, "--slots", str(slots), *hardware, *extra,
             "--prompts", str(prompts), "--out", str(self.live_file(kind, sel, slots, tag)), "--quiet"])

    def merged(self, kind: str, sel: str, slots: int, prefix: str = "pass"):
        """The configuration's passes merged, each time its minimum (``read_live_passes``)."""
        from simmoe.validation.live import read_live_passes

        return read_live_passes([self.live_file(kind, sel, slots, f"{prefix}{r + 1}") for r in range(self.repeats)])

    def read(self, kind: str, sel: str, slots: int, tag: str):
        from simmoe.validation.live import read_live

        return read_live(self.live_file(kind, sel, slots, tag))


def _derive_cost(bench: _Bench, grid: _Grid, slot_grid, trace, tag: str) -> None:
    """Eq. 4 for specfit, from the event model fitted to AR and EAGLE-3 on the fitting prompts."""
    from simmoe.hardware.profile import save_profile
    from simmoe.validation.live import derived_cost_model, fit_timing

    for sel, slots in grid.configs:
        if sel != "specfit":
            bench.run_live("fit", sel, slots, "cost", ["--repeats", "2"])
    first = fit_timing([bench.read("fit", sel, slots, "cost") for sel, slots in grid.configs
                        if sel != "specfit"], name=f"cost-{tag}")
    cached = [bench.read("fit", "eagle3", slots, "cost") for slots in slot_grid if slots > 0]
    hits = sum(int(r.cycles["hits"].sum()) for r in cached)
    misses = sum(int(r.cycles["copies"].sum()) for r in cached)
    derived = derived_cost_model(first, depth=trace.pool_shape.depth, K=trace.pool_shape.K,
                                 miss_fraction=misses / max(hits + misses, 1))
    save_profile(derived, bench.cost, header="Eq. 4 derived from the event model fitted to AR and EAGLE-3 live runs")


def _run_rounds(bench: _Bench, grid: _Grid, progress) -> None:
    """The measured passes: every configuration once per round, the rounds one after another, so that
    each configuration's passes spread over the whole command and see the same machine."""
    configs = grid.configs
    for rnd in range(bench.repeats):
        if progress:
            progress(f"round {rnd + 1} of {bench.repeats}: {len(configs)} configurations, fitting and "
                     "validation prompts")
        order = configs[rnd % len(configs):] + configs[:rnd % len(configs)]
        for sel, slots in order:
            for kind in ("fit", "val"):
                bench.run_live(kind, sel, slots, f"pass{rnd + 1}")
        for sel, slots in grid.t1:
            for kind in ("fit", "val"):
                bench.run_live(kind, sel, slots, f"t1-pass{rnd + 1}", ["--temperature", str(T1)])
        for sel, slots in grid.pf:
            bench.run_live("val", sel, slots, f"pf-pass{rnd + 1}", ["--prefetch", "draft"])


def _validate(fit_runs, val_runs, name: str, trace, commit_extra_ms: float = 0.0, selector_runs=None):
    """The timing fitted to ``fit_runs``, and each validation run compared with its replay of ``trace``."""
    from simmoe.validation.live import compare, fit_timing, selector_time

    profile = fit_timing(fit_runs, name=name)
    if commit_extra_ms:
        profile = profile.replace(commit_ms=max(profile.commit_ms + commit_extra_ms, 0.0))
    sel_runs = fit_runs if selector_runs is None else selector_runs
    results = []
    for live in val_runs:
        sel_prof = live.meta.get("selection_profile") or {}
        prof = profile.replace(**{f: tuple(sel_prof[f]) for f in ("cost_b_cache", "cost_b_no_cache")
                                  if sel_prof.get(f)},
                               **{f: float(sel_prof[f]) for f in ("cost_beta_cache", "cost_beta_no_cache")
                                  if f in sel_prof})
        results.append(compare(trace, live, prof, selector_ms=selector_time(sel_runs, live.meta["selector"])))
    return profile, results


@dataclass
class _Comparisons:
    val_runs: list
    profile: object
    results: list
    one_pass: list
    t1_runs: list
    sampling: dict
    t1_profile: object
    t1_results: list
    t1_plain: list
    pf_runs: list
    pf_results: list


def _compare_all(bench: _Bench, grid: _Grid, trace, trace1, tag: str) -> _Comparisons:
    """Every comparison of the report (saving the fitted profiles); stops unless greedy replays are exact."""
    from simmoe.hardware.profile import save_profile
    from simmoe.validation.live import assert_exact

    configs, work = grid.configs, bench.work
    val_runs = [bench.merged("val", sel, slots) for sel, slots in configs]
    profile, results = _validate([bench.merged("fit", sel, slots) for sel, slots in configs], val_runs,
                                 f"fitted-live-{tag}", trace)
    save_profile(profile, work / "fitted.toml", header="event model fitted to the fitting prompts' live cycles")
    _, one_pass = _validate([bench.read("fit", sel, slots, "pass1") for sel, slots in configs],
                            [bench.read("val", sel, slots, "pass1") for sel, slots in configs],
                            f"fitted-live-{tag}-pass1", trace)
    t1_runs = [bench.merged("val", sel, slots, "t1-pass") for sel, slots in grid.t1]
    t1_fit = [bench.merged("fit", sel, slots, "t1-pass") for sel, slots in grid.t1]
    sampling = sampling_term([bench.merged("fit", sel, slots) for sel, slots in grid.t1], t1_fit)
    t1_profile, t1_results = _validate([bench.merged("fit", sel, slots) for sel, slots in configs], t1_runs,
                                       f"fitted-live-{tag}-t1", trace1, commit_extra_ms=sampling["ms"],
                                       selector_runs=t1_fit)
    _, t1_plain = _validate([bench.merged("fit", sel, slots) for sel, slots in configs], t1_runs,
                            f"fitted-live-{tag}", trace1)
    save_profile(t1_profile, work / "fitted-t1.toml",
                 header="event model fitted to the fitting prompts' live cycles, with the sampling term")
    pf_runs = [bench.merged("val", sel, slots, "pf-pass") for sel, slots in grid.pf]
    _, pf_results = _validate([bench.merged("fit", sel, slots) for sel, slots in configs], pf_runs,
                              f"fitted-live-{tag}", trace)
    assert_exact(results + one_pass + t1_results + t1_plain + pf_results)
    return _Comparisons(val_runs=val_runs, profile=profile, results=results, one_pass=one_pass, t1_runs=t1_runs,
                        sampling=sampling, t1_profile=t1_profile, t1_results=t1_results, t1_plain=t1_plain,
                        pf_runs=pf_runs, pf_results=pf_results)


def sampling_term(t0_runs, t1_runs) -> dict:
    """The commit time that sampled verification adds per cycle, from live runs of the *fitting* prompts.

    ``t0_runs`` and ``t1_runs`` pair the same configurations (selector, slots)
    at temperature 0 and at temperature > 0.  The live loop times the verdict
    inside the commit: at temperature 0 one argmax per tree row, at
    temperature > 0 :func:`hwprobe.sampling.sampled_verdict` (a float64
    softmax over the vocabulary per row, cumulative sums, an inverse-CDF
    search per row, the position-keyed uniforms).  Per configuration: the
    mean commit time per cycle at temperature > 0 minus that at 0, and, as a
    diagnosis, the same difference at equal accepted tokens (the coefficient
    s of a least-squares fit commit = a + b·accepted + s·[sampled] over both
    runs' cycles: a cycle that accepts more compacts more KV rows).  The term
    ``ms`` is the mean of the per-configuration differences (each weighs the
    same); it is a per-cycle time, carried in the profile's ``commit_ms``.
    O(cycles).
    """
    import numpy as np

    rows = []
    for a, b in zip(t0_runs, t1_runs, strict=True):
        if (a.meta.get("selector"), a.meta.get("slots")) != (b.meta.get("selector"), b.meta.get("slots")):
            raise ValueError(f"sampling_term: runs of different configurations paired: "
                             f"{a.meta.get('selector')}/{a.meta.get('slots')} and "
                             f"{b.meta.get('selector')}/{b.meta.get('slots')}")
        if not a.num_cycles or not b.num_cycles:
            raise ValueError("sampling_term: a run without cycles")
        c0, c1 = a.cycles, b.cycles
        commit = np.concatenate([np.asarray(c0["commit_ms"], np.float64), np.asarray(c1["commit_ms"], np.float64)])
        acc = np.concatenate([np.asarray(c0["accepted"], np.float64), np.asarray(c1["accepted"], np.float64)])
        hot = np.concatenate([np.zeros(a.num_cycles), np.ones(b.num_cycles)])
        design = np.stack([np.ones_like(acc), acc, hot], 1)
        if np.ptp(acc) == 0:                      # no spread in accepted tokens (AR): the plain difference
            design = design[:, [0, 2]]
        coef = np.linalg.lstsq(design, commit, rcond=None)[0]
        rows.append({"selector": a.meta.get("selector"), "slots": int(a.meta.get("slots", 0)),
                     "cycles": (int(a.num_cycles), int(b.num_cycles)),
                     "commit_ms": (float(np.mean(c0["commit_ms"])), float(np.mean(c1["commit_ms"]))),
                     "accepted": (float(np.mean(c0["accepted"])), float(np.mean(c1["accepted"]))),
                     "select_ms": (float(np.mean(c0["select_ms"])), float(np.mean(c1["select_ms"]))),
                     "equal_accepted_ms": float(coef[-1])})
    if not rows:
        raise ValueError("sampling_term: no runs")
    diffs = [r["commit_ms"][1] - r["commit_ms"][0] for r in rows]
    return {"ms": float(np.mean(diffs)), "rows": rows}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
