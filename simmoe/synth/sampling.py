"""The synthetic target distribution at temperature T (``simmoe synth --temperature T``).

The generator's pools, text and greedy agreement (:mod:`simmoe.synth.draft`)
are those of temperature 0 and stay bit for bit the same; at T > 0 every
pool node also gets p_T(token | path) and the target mass below its token
(:mod:`simmoe.trace.sampling`), drawn from its own random stream.  Model, per
parent node (its drafted children c_i with draft conditionals q_i; the
target's greedy token g is one child, or none, as drawn at T = 0):

* at temperature 1 the target puts mass m on g; of the rest, the share
  ``target_sibling_share`` = λ falls on the drafted siblings like the
  drafter's distribution without g — child i ≠ g gets
  λ·(1 − m)·q_i/(1 − q_g) — and the remainder on tokens outside the pool
  (λ = 0.5, a modelling choice fitted to no figure: with λ = 1 an 8-wide
  tree would hold nearly all of the target's mass and sampling could hardly
  lower acceptance; with λ = 0 no drafted sibling could be accepted);
* m = 1 − ``target_spread``·(1 − z_u) for children predicting position u
  (z_u its predictability, the latent behind the draft's confidence), raised
  where needed so that g stays the most probable token: a confidently drafted
  position is also one where the target is sure, and only where drafts are
  uncertain does sampling leave the greedy path.  ``target_spread`` is the one
  fitted parameter (CALIBRATION.md: QA's EAGLE-3 Mat at temperature 1);
* tokens outside the pool share their mass by a Zipf law (exponent 1) over
  the rest of the vocabulary; at temperature T every probability is
  p_1^{1/T} renormalised over the whole vocabulary (children, g, that tail);
* the vocabulary position of the children among the other tokens is
  uniform: the non-child mass is cut into |children| + 1 gaps by a flat
  Dirichlet draw, laid out in token-id order (it only places the intervals
  [cdf, cdf + p) that the replay's draws use; it does not change any law).

Greedy-text caveat: the text of a synthetic trace is its greedy text, so
``meta["sampling"]["text"] = "greedy"`` and no seed; a replay at T draws each
cycle's acceptance exactly from these distributions but continues along that
text (docs/replay.md).
"""

from __future__ import annotations

import numpy as np

_ZIPF_CACHE: dict[tuple[int, float], float] = {}


def zipf_power_sum(n: int, temperature: float) -> float:
    """Σ_j w_j^{1/T} for the Zipf weights w_j ∝ 1/j over n tokens (Σ w = 1)."""
    key = (int(n), float(temperature))
    if key not in _ZIPF_CACHE:
        w = 1.0 / np.arange(1, n + 1, dtype=np.float64)
        w /= w.sum()
        _ZIPF_CACHE[key] = float(np.sum(w ** (1.0 / temperature)))
    return _ZIPF_CACHE[key]


def target_fields(pools, z: np.ndarray, params, temperature: float,
                  rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``(p_T, cdf)`` as ``float32 [n, M]`` arrays over the padded pools of one request.

    ``pools`` is :class:`simmoe.synth.draft.Pools` (after the node cap: a
    dropped sibling's mass counts as outside the pool), ``z`` the request's
    predictability per position.  Vectorised: O(n·M log M).
    """
    n, M = pools.valid.shape
    p_out = np.zeros((n, M), dtype=np.float64)
    cdf_out = np.zeros((n, M), dtype=np.float64)
    valid = pools.valid
    if not valid.any():
        return p_out.astype(np.float32), cdf_out.astype(np.float32)
    rows, cols = np.nonzero(valid)
    parent = pools.parent[rows, cols].astype(np.int64)
    group = rows * (M + 1) + parent + 1                    # one group per (position, parent)
    uniq, g = np.unique(group, return_inverse=True)
    G = len(uniq)
    q = pools.q[rows, cols].astype(np.float64)
    agree = pools.agree[rows, cols]
    level = pools.level[rows, cols].astype(np.int64)
    u = np.minimum(rows + level, len(z) - 1)
    zg = np.zeros(G)
    zg[g] = z[u]                                            # siblings predict one position
    q_g = np.bincount(g, weights=np.where(agree, q, 0.0), minlength=G)
    has_g = np.bincount(g, weights=agree.astype(np.float64), minlength=G) > 0
    # g must stay the argmax: m >= (1 - m)·r for the largest other share r
    share = np.where(agree, 0.0, q / np.maximum(1.0 - q_g[g], 1e-12))
    share_sum = np.bincount(g, weights=share, minlength=G)   # <= 1 but for rounding (q_g ≈ 1)
    share = params.target_sibling_share * share / np.maximum(share_sum[g], 1.0)
    r_max = np.zeros(G)
    np.maximum.at(r_max, g, share)
    m = 1.0 - params.target_spread * (1.0 - zg)
    m = np.clip(np.maximum(m, r_max / (1.0 + r_max)), 0.0, 1.0)
    p1 = np.where(agree, m[g], (1.0 - m[g]) * share)
    kids_sum = np.bincount(g, weights=p1, minlength=G)
    outside_g = np.where(has_g, 0.0, m)                     # g outside the pool
    tail = np.clip(1.0 - kids_sum - outside_g, 0.0, 1.0)
    if temperature == 1.0:
        pt = p1
    else:
        inv = 1.0 / temperature
        n_tail = max(int(params.vocab_size) - int(params.pool.expand_topk) - 1, 1)
        powered = p1 ** inv
        Z = (np.bincount(g, weights=powered, minlength=G) + outside_g ** inv
             + tail ** inv * zipf_power_sum(n_tail, temperature))
        pt = powered / Z[g]
    # vocabulary layout: siblings in token order, the other mass in |children| + 1 flat-Dirichlet gaps
    other = np.clip(1.0 - np.bincount(g, weights=pt, minlength=G), 0.0, 1.0)
    tok = pools.token[rows, cols].astype(np.int64)
    order = np.lexsort((tok, g))
    e_kid = rng.exponential(size=len(g))                   # the gap before each child
    e_last = rng.exponential(size=G)                       # the gap after the last one
    e_sum = np.bincount(g, weights=e_kid, minlength=G) + e_last
    gap = other[g] * e_kid / e_sum[g]
    go = g[order]
    step = gap[order]
    before = np.cumsum(step) - step                         # gaps strictly before, globally
    mass = np.cumsum(pt[order]) - pt[order]                 # children's p strictly before, globally
    first = np.flatnonzero(np.r_[True, go[1:] != go[:-1]])
    start = np.repeat(first, np.diff(np.r_[first, len(go)]))
    lo = (before - before[start]) + step + (mass - mass[start])
    cdf = np.empty_like(lo)
    cdf[order] = lo
    p_out[rows, cols] = pt
    cdf_out[rows, cols] = np.minimum(cdf, 1.0 - pt)
    return p_out.astype(np.float32), cdf_out.astype(np.float32)
