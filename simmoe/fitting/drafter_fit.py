"""Lookahead's and DFlash's acceptance per workload, fitted by replay to the figures CALIBRATION.md admits.

* Lookahead (SGLang): ``hit`` per benchmark, so that the replay of Lookahead
  on that benchmark's EVICT workload (Qwen3-30B-A3B, the validation report's
  physical workload with Lookahead's pools, 20 requests, seed 0) on
  ``qwen3-30b-a3b@a100-sxm4-80gb`` gives EVICT Table 1's Lookahead tokens/s
  at temperature 0.  The pools are verified whole (selector ``eagle3``: the
  first ``draft_tokens`` by path probability), as SGLang verifies the guess set.
* DFlash (vLLM): ``per_step`` (mean tokens committed per step: the rate of
  positions 2..15 follows from it, ``first`` stays the published 0.822) per
  workload, so that the replay at batch 4 with continuous batching (40
  requests) on Table 6's profile ``qwen3-30b-a3b@GPU~vllm-table6`` gives
  Table 6's DFlash at batch 4: QA 603, HumanEval 1,398 (steady-state tokens/s).

Each parameter is a root of a monotone tokens/s curve, found by the Illinois
method on short seeded replays (0.5 % tolerance, or the last of at most
``MAX_EVALS`` replays: the curve of a seeded workload is a little noisy); a target
outside the parameter's range is a finding: the bound is kept and the file
says how far it is.  Everything else Lookahead and DFlash give (Table 1 at
temperature 1, Tables 7-8, Table 6 at batch 8-64 and with EVICT) is a
prediction.  Writes ``simmoe/drafters/data/drafter_fit.toml``, read by
:func:`simmoe.drafters.fitted.fitted_params`::

    python -m simmoe.fitting.drafter_fit [--out PATH]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simmoe.drafters.fitted import DRAFTER_FIT_FILE, FITTED

MODEL = "qwen3-30b-a3b"
LOOKAHEAD_PROFILE = f"{MODEL}@a100-sxm4-80gb"
LOOKAHEAD_TABLE = "table1_qwen3_30b_a3b_t0"
LOOKAHEAD_BENCHES = ("alpaca", "gsm8k", "humaneval", "qa", "mt_bench", "cnndm")
DFLASH_TABLE = "table6_batch_vllm"
DFLASH_BENCHES = ("qa", "humaneval")
DFLASH_BATCH = 4
# the parameters' ranges: hit in (0, 1]; per_step in [1 + first, block] (the drafter's own checks)
HIT_RANGE = (0.01, 1.0)
HIT_START = (0.1, 0.3)          # where Table 1's 81-102 tokens/s lie (a first scan)
PER_STEP_START = (2.5, 5.0)     # where Table 6's batch-4 DFlash lies
TOLERANCE = 0.005   # relative: well inside the seeded workload's own noise
MAX_EVALS = 8


@dataclass(frozen=True)
class Sizes:
    """Requests per fitted workload: Lookahead's the validation report's full run's (its fit rows land on target);
    DFlash's half of Table 6's 80 (batch 4 is steady well within 40; the report shows the difference)."""

    lookahead: int = 20
    dflash: int = 40
    seed: int = 0


def drafter_workload(model: str, bench: str, drafter: Any, requests: int, seed: int = 0,
                     drafting: dict | None = None, temperature: float = 0.0):
    """The EVICT workload of (model, bench) with ``drafter``'s pools and acceptance (the validation's generator).

    ``drafting``: the workload's fitted drafting parameters (``easy_share``,
    ``hard_confidence``) where the validation fitted EAGLE-3's Mat for that model.
    """
    from simmoe.hardware.catalogue import load_model, with_model
    from simmoe.synth import generate, preset

    pr = preset(bench)
    params, fitted = with_model(pr.params, pr.fitted_to, load_model(model), bench)
    params = params.with_(pool=drafter.pool_shape(), **(drafting or {}))
    note = f"then: {drafter.name}'s pools and acceptance (simmoe.drafters)"
    return generate(params, seed=seed, num_requests=requests, preset=bench, fitted_to=fitted + (note,),
                    temperature=temperature, drafter=drafter)


def steady_tps(summary: dict) -> float:
    """Steady-state aggregate tokens/s (every slot busy), else the whole run's (Table 6's measure)."""
    v = summary.get("decode_tps_full", float("nan"))
    return float(v) if v == v else float(summary["decode_tps"])


def replay_tps(trace, profile_name: str, batch: int = 1, selector: str = "eagle3") -> float:
    from simmoe.hardware.profile import load_profile
    from simmoe.replay.engine import ReplayConfig, replay

    cfg = ReplayConfig(selector=selector, slots=0, cache="none", hardware=profile_name, selector_ms=0.0, seed=0,
                       batch=batch)
    s = replay(trace, cfg, load_profile(profile_name)).summary()
    return steady_tps(s) if batch > 1 else float(s["decode_tps"])


def table6_profile() -> str:
    from simmoe.hardware.physical import load_settings

    return f"{MODEL}@{load_settings().get('vllm-table6', {}).get('gpu', 'h200')}~vllm-table6"


def root(f: Callable[[float], float], target: float, lo: float, hi: float, start: tuple[float, float],
         tolerance: float = TOLERANCE, evals: int = MAX_EVALS) -> tuple[float, float, str]:
    """x in [lo, hi] with f(x) = target for an increasing f (Illinois); ``(x, f(x), how)``.

    The search starts on the bracket ``start`` (inside [lo, hi]: where the
    roots lie, so the range's ends are evaluated only when a target lies
    beyond it); a target beyond f's range keeps the nearer bound and says so.
    """
    a, b = start
    fa, fb = f(a), f(b)
    if target < fa:
        b, fb, a = a, fa, lo
        fa = f(a)
        if target <= fa:
            return lo, fa, f"unreachable: the lower bound gives {fa:.2f} tokens/s, above {target}"
    elif target > fb:
        a, fa, b = b, fb, hi
        fb = f(b)
        if target >= fb:
            return hi, fb, f"unreachable: the upper bound gives {fb:.2f} tokens/s, below {target}"
    fa, fb = fa - target, fb - target
    (x, fx), side = ((a, fa) if abs(fa) < abs(fb) else (b, fb)), 0
    for _ in range(max(evals - 2, 1)):
        if abs(fx) <= tolerance * target:
            break
        x = (a * fb - b * fa) / (fb - fa)
        fx = f(x) - target
        if fx < 0:
            a, fa = x, fx
            if side == -1:
                fb /= 2
            side = -1
        else:
            b, fb = x, fx
            if side == 1:
                fa /= 2
            side = 1
    return x, fx + target, "fitted"


def published_value(pub: dict, drafter: str, bench: str) -> float:
    if drafter == "lookahead":
        t = pub["evict"][LOOKAHEAD_TABLE]
        row = next(r for r in t["rows"] if r[0] == "lookahead")
        return float(row[t["columns"].index(bench)])
    t = pub["evict"][DFLASH_TABLE]
    row = next(r for r in t["rows"] if r[0] == bench and r[1] == "dflash")
    return float(row[t["columns"].index(f"bs{DFLASH_BATCH}")])


def fit_one(pub: dict, drafter: str, bench: str, sizes: Sizes, log: Callable[[str], None],
            evals: int = MAX_EVALS) -> dict:
    """One (drafter, workload): the fitted parameter, the target and the tokens/s the fit reached."""
    from simmoe import drafters

    target = published_value(pub, drafter, bench)
    name = FITTED[drafter]
    if drafter == "lookahead":
        lo, hi = HIT_RANGE
        prof, batch, n, start = LOOKAHEAD_PROFILE, 1, sizes.lookahead, HIT_START
    else:
        first = float(drafters.build("dflash")["first"])
        lo, hi = 1.0 + first, float(drafters.build("dflash")["block"])
        prof, batch, n, start = table6_profile(), DFLASH_BATCH, sizes.dflash, PER_STEP_START

    def tps(x: float) -> float:
        d = drafters.build(drafter, {name: x})
        got = replay_tps(drafter_workload(MODEL, bench, d, n, sizes.seed), prof, batch)
        log(f"{drafter} {bench}: {name} = {x:.4f} -> {got:.2f} tokens/s (target {target})")
        return got

    x, got, how = root(tps, target, lo, hi, start, evals=evals)
    return {name: x, "target_tps": target, "fitted_tps": got, "requests": n, "batch": batch, "profile": prof,
            "how": how}


def run_fit(pub: dict, sizes: Sizes = Sizes(), log: Callable[[str], None] = lambda s: None,
            lookahead: tuple[str, ...] = LOOKAHEAD_BENCHES, dflash: tuple[str, ...] = DFLASH_BENCHES) -> dict:
    return {"lookahead": {b: fit_one(pub, "lookahead", b, sizes, log) for b in lookahead},
            "dflash": {b: fit_one(pub, "dflash", b, sizes, log) for b in dflash}, "seed": sizes.seed}


def to_toml(fit: dict) -> str:
    lines = ["# Lookahead's and DFlash's acceptance per workload (simmoe.drafters.fitted).  Written by",
             "#   python -m simmoe.fitting.drafter_fit --out simmoe/drafters/data/drafter_fit.toml",
             "# do not edit by hand.  One parameter per (drafter, workload), fitted by replay of seeded",
             f"# synthetic workloads (seed {fit['seed']}) to the figures CALIBRATION.md admits:",
             f"#   lookahead.hit: EVICT {LOOKAHEAD_TABLE}'s Lookahead tokens/s ({LOOKAHEAD_PROFILE}, batch 1)",
             f"#   dflash.per_step: EVICT {DFLASH_TABLE}'s DFlash at batch {DFLASH_BATCH} (vllm-table6)",
             "# every other Lookahead and DFlash figure is a prediction.", ""]
    for drafter in ("lookahead", "dflash"):
        name = FITTED[drafter]
        for bench, e in fit[drafter].items():
            lines += [f"[{drafter}.{bench}]", f"{name} = {e[name]:.6f}",
                      f"target_tps = {e['target_tps']}", f"fitted_tps = {e['fitted_tps']:.2f}",
                      f'profile = "{e["profile"]}"', f"batch = {e['batch']}", f"requests = {e['requests']}",
                      f'how = "{e["how"]}"', ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    from simmoe.atomicio import write_text_atomic
    from simmoe.errors import one_line_parser
    from simmoe.published import PUBLISHED

    p = one_line_parser(prog="python -m simmoe.fitting.drafter_fit", description=__doc__.split("\n\n")[0],
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(DRAFTER_FIT_FILE), help="the fit file to write (default: the shipped one)")
    args = p.parse_args(argv)
    fit = run_fit(PUBLISHED, log=lambda s: print(s, file=sys.stderr, flush=True))
    write_text_atomic(Path(args.out), to_toml(fit))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
