"""Presets of EVICT's four other workloads (alpaca, humaneval, qa, mt_bench), in EVICT's setting.

EVICT (§4.1, App. C.4) runs EAGLE-3 with steps = 4, topk = 8 and 32 draft
tokens on six workloads; GSM8K and CNN/DM have SpecFit-calibrated presets
(:mod:`simmoe.synth.params`), these four are added here with EVICT's pool.
What was fitted, by the rules of CALIBRATION.md (``fit_in_evict_tables``):

* ``easy_share`` of each of the four: bisection on EAGLE-3's Mat at
  temperature 0 (EVICT Table 2) — the drafter's acceptance on that workload;
* ``target_spread`` (shared by every preset, GSM8K and CNN/DM included: a
  property of the target model against its drafter): bisection on QA's
  EAGLE-3 Mat at temperature 1 (Table 2).  Every other temperature-1 Mat is
  a prediction.

Everything else is chosen or taken from GSM8K's preset (the model-level
routing fields and ``locality``: no routing figure of these workloads is in
the calibration set).  Chosen: ``hard_confidence`` 0.3 for the four (with
GSM8K's 0.45 no ``easy_share`` reaches QA's Mat in an 8-wide tree) and
``target_sibling_share`` 0.5 (:mod:`simmoe.synth.sampling`).  Request lengths: :mod:`simmoe.synth.evict_workloads`.
``python -m simmoe.synth.evict_presets fit`` re-runs both fits and prints
the values, which are pasted below.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from simmoe.synth import prompts
from simmoe.synth.evict_workloads import EVICT_WORDS, OUTPUT_TOKENS
from simmoe.synth.params import PRESETS, Preset, SynthParams
from simmoe.trace.schema import PoolShape

# EVICT App. C.4: EAGLE-3 tree with steps = 4, topk = 8, 32 draft tokens (all verified by EAGLE-3).
EVICT_POOL = PoolShape(expand_topk=8, depth=4, max_nodes=32, K=32)
# EVICT Table 2 (Qwen3-30B-A3B), the fitted figures
MAT_T0 = {"alpaca": 3.19, "humaneval": 4.57, "qa": 3.07, "mt_bench": 3.46}
QA_MAT_T1 = 2.90
# fitted by `python -m simmoe.synth.evict_presets fit` (seed 0)
EASY_SHARE = {"alpaca": 0.3186, "humaneval": 0.8965, "qa": 0.2583, "mt_bench": 0.4541}
TARGET_SPREAD = 0.1668
NUM_REQUESTS = {"alpaca": 80, "humaneval": 164, "qa": 80, "mt_bench": 80}
FIT_SEED = 0
# Chosen, not fitted: EVICT's 8-wide tree holds far more of the target's mass than SpecFit's 2-wide one;
# with GSM8K's 0.45 even an all-hard workload would accept 3.2 tokens per cycle, above QA's 3.07, so no
# easy_share could reach the low-Mat workloads.
HARD_CONFIDENCE = 0.3

prompts.QUESTION_WORDS.update(EVICT_WORDS)


def _params(name: str, easy_share: float, target_spread: float) -> SynthParams:
    g = PRESETS["gsm8k"].params
    n = NUM_REQUESTS[name]
    return SynthParams(
        dataset=name, num_requests=n, total_output_tokens=n * OUTPUT_TOKENS[name], limit_tokens=2048,
        output_len_sigma=0.45, pool=EVICT_POOL, easy_share=easy_share, target_spread=target_spread,
        hard_confidence=HARD_CONFIDENCE,
        popularity_sigma=g.popularity_sigma, topic_sigma=g.topic_sigma, locality=g.locality,
        token_share=g.token_share)


def _preset(name: str) -> Preset:
    fitted = (f"EVICT Table 2 (Qwen3-30B-A3B, temperature 0): EAGLE-3 Mat {MAT_T0[name]} (easy_share)",
              f"EVICT Table 2 (temperature 1): QA's EAGLE-3 Mat {QA_MAT_T1} (target_spread, shared by "
              "every preset)",
              "routing fields: GSM8K's preset (SpecFit Table 3); request lengths: "
              "simmoe.synth.evict_workloads (prompts sourced, output lengths chosen)")
    return Preset(name=name, params=_params(name, EASY_SHARE[name], TARGET_SPREAD), fitted_to=fitted,
                  fitted_fields=("easy_share", "target_spread"))


def register() -> None:
    """Add the four presets to :data:`simmoe.synth.params.PRESETS` (idempotent)."""
    for name in MAT_T0:
        PRESETS[name] = _preset(name)
    for name in ("gsm8k", "cnndm"):
        pr = PRESETS[name]
        if pr.params.target_spread != TARGET_SPREAD:
            PRESETS[name] = replace(pr, params=pr.params.with_(target_spread=TARGET_SPREAD),
                                    fitted_to=pr.fitted_to + (
                                        f"target_spread from EVICT Table 2's QA EAGLE-3 Mat at temperature "
                                        f"1 ({QA_MAT_T1}; simmoe.synth.evict_presets)",))


register()


# --------------------------------------------------------------------------
# the fit
# --------------------------------------------------------------------------
def eagle3_mat(trace, temperature: float = 0.0, seed: int = FIT_SEED) -> float:
    """EAGLE-3's Mat (1 + accepted per cycle, all K = 32 nodes verified) on ``trace`` at ``temperature``."""
    from dataclasses import replace as dc_replace

    from simmoe.synth.stats import replay_eagle3
    from simmoe.trace.verdicts import sampled_agree

    if temperature > 0:
        trace = dc_replace(trace, node_agree=sampled_agree(trace, temperature, seed))
    return replay_eagle3(trace).committed_per_cycle


def _trace(params: SynthParams, temperature: float, requests: int | None):
    from simmoe.synth import generate

    return generate(params, seed=FIT_SEED, num_requests=requests, routes=False, temperature=temperature)


def _bisect(f, lo: float, hi: float, target: float, increasing: bool, steps: int = 14) -> float:
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        if (f(mid) < target) == increasing:
            lo = mid
        else:
            hi = mid
    return round(0.5 * (lo + hi), 4)


def fit(requests: int | None = None, log=print) -> dict:
    """Both fits: ``easy_share`` per workload (T = 0), then ``target_spread`` on QA (T = 1)."""
    shares = {}
    for name, target in MAT_T0.items():
        shares[name] = _bisect(lambda s, n=name: eagle3_mat(_trace(_params(n, s, 0.0), 0.0, requests)),
                               0.0, 1.0, target, increasing=True)
        log(f"{name}: easy_share {shares[name]} (EAGLE-3 Mat target {target})")
    spread = _bisect(lambda s: eagle3_mat(_trace(_params("qa", shares["qa"], s), 1.0, requests), 1.0),
                     0.0, 1.0, QA_MAT_T1, increasing=False)
    log(f"target_spread {spread} (QA EAGLE-3 Mat at temperature 1, target {QA_MAT_T1})")
    return {"easy_share": shares, "target_spread": spread}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m simmoe.synth.evict_presets")
    ap.add_argument("command", choices=("fit", "check"))
    ap.add_argument("--requests", type=int, default=None, help="fit on the first N requests (default: all)")
    args = ap.parse_args(argv)
    if args.command == "fit":
        fit(args.requests)
        return 0
    for name in (*MAT_T0, "gsm8k", "cnndm"):
        pr = PRESETS[name].params
        if name in ("gsm8k", "cnndm"):
            pr = pr.with_(pool=EVICT_POOL)
        row = [eagle3_mat(_trace(pr, t, args.requests), t) for t in (0.0, 1.0)]
        print(f"{name}: EAGLE-3 Mat at T=0 {row[0]:.3f}, T=1 {row[1]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

