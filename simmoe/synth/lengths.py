"""Request lengths: prompt tokens from Spec-Bench, output tokens fitted to the published total.

Output lengths are log-normal draws with spread ``output_len_sigma``, each
capped at ``limit_tokens - prompt_len`` (the generation limit of SpecFit
App. B), scaled by one common factor chosen so that the first
``num_requests`` of them sum to exactly ``total_output_tokens`` (17,791 on
GSM8K, 9,652 on CNN/DM: the calibration set of CALIBRATION.md).
"""

from __future__ import annotations

import numpy as np

from simmoe.errors import SimmoeError
from simmoe.synth.prompts import question_table


def _lengths(raw: np.ndarray, cap: np.ndarray, scale: float) -> np.ndarray:
    return np.clip(np.rint(scale * raw), 1, cap).astype(np.int64)


def output_lengths(raw: np.ndarray, cap: np.ndarray, total: int) -> tuple[np.ndarray, float]:
    """Integer lengths ``min(round(s·raw), cap)`` (at least 1) summing to ``total`` exactly, and s.

    ``s`` by bisection (the sum is nondecreasing in s), then the residual
    (a rounding step that skipped ``total``) is spread one token at a time
    over the longest uncapped requests.  O(R log(1/ε)).
    """
    if total < len(raw) or total > int(cap.sum()):
        raise SimmoeError(f"cannot fit {total} output tokens into {len(raw)} requests "
                          f"(between {len(raw)} and {int(cap.sum())} fit the limit)")
    lo, hi = 0.0, 1.0
    while _lengths(raw, cap, hi).sum() < total:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _lengths(raw, cap, mid).sum() < total:
            lo = mid
        else:
            hi = mid
    out = _lengths(raw, cap, lo)
    order = np.argsort(-raw, kind="stable")
    i = 0
    while out.sum() < total:                      # at most a few rounding steps
        r = order[i % len(order)]
        if out[r] < cap[r]:
            out[r] += 1
        i += 1
    return out, lo


def request_lengths(params, rng: np.random.Generator, num_requests: int):
    """Question ids, prompt lengths and output lengths of the first ``num_requests`` questions.

    The scale is fitted on the preset's full request count, so a trace with
    fewer requests is an exact prefix of the full-size one.
    """
    ids, prompt = question_table(params.dataset)
    if num_requests > len(ids):
        raise SimmoeError(f"--requests {num_requests}: the {params.dataset} question set has "
                          f"only {len(ids)} questions")
    if params.num_requests > len(ids):
        raise SimmoeError(f"preset asks for {params.num_requests} requests; {params.dataset} "
                          f"has {len(ids)} questions")
    cap = np.maximum(params.limit_tokens - prompt, 0)
    if (cap[:max(num_requests, params.num_requests)] < 1).any():
        raise SimmoeError(f"limit_tokens={params.limit_tokens} leaves no room for output "
                          f"after some {params.dataset} prompts")
    raw = np.exp(params.output_len_sigma * rng.standard_normal(len(ids)))
    full = params.num_requests
    head, scale = output_lengths(raw[:full], cap[:full], params.total_output_tokens)
    # questions beyond the full set (when asked for more) use the same scale
    out = np.concatenate([head, _lengths(raw[full:], cap[full:], scale)])
    return ids[:num_requests], prompt[:num_requests], out[:num_requests].astype(np.int32)
