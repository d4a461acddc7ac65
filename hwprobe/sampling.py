"""Sampled speculative decoding on a real model (temperature > 0), lossless in distribution.

The rule is simmoe's (:mod:`simmoe.trace.verdicts`; EVICT §2.1 Eq. 3,
EAGLE-2/3's ``evaluate_posterior``): at the node the path has reached, its
verified children are accepted with probability p under the residual target
distribution, which is the same as drawing one token y ~ p_T(· | path) and
following y when it is a verified child, the bonus token being y otherwise.
Here y is drawn by the inverse CDF of p_T in vocabulary order with the
uniform of (seed, request, output position) — :func:`simmoe.trace.verdicts.uniforms`,
the replay's own numbers — so:

* the token of output position s is ``inverse_cdf(p_T(· | prefix), u_s)``
  whether or not it was speculated, and whatever the selector verified: the
  output of speculative decoding equals :func:`sampled_generate`'s with the
  same seed (the lossless check is an equality, as at temperature 0), and it
  is a sample of the target at T;
* ``hwprobe record --temperature T`` samples its text the same way and
  stores p_T and the CDF below each node's token, so ``simmoe replay
  --temperature T`` with the same seed repeats the live run's cycles.

Probabilities are softmax(logits / T) in float64.
"""

from __future__ import annotations

import numpy as np
import torch

from hwprobe.tree import Verdict


def key_of(request_id) -> int:
    """The request's 64-bit key (simmoe's :func:`~simmoe.trace.verdicts.request_key`)."""
    from simmoe.trace.verdicts import request_key

    return request_key(request_id)


def uniform(seed: int, key: int, positions) -> np.ndarray:
    """simmoe's uniforms of (seed, request key, output positions)."""
    from simmoe.trace.verdicts import uniforms

    return np.atleast_1d(uniforms(seed, np.uint64(key), np.asarray(positions, dtype=np.int64)))


def target_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """p_T = softmax(logits / T) per row, float64 ``[rows, V]``."""
    return torch.softmax(logits.double() / float(temperature), dim=-1)


def draw_rows(probs: torch.Tensor, u: np.ndarray) -> np.ndarray:
    """The inverse-CDF draw (vocabulary order) of every row of ``probs`` with its uniform ``u[row]``."""
    cdf = torch.cumsum(probs, dim=-1)
    uu = torch.as_tensor(np.asarray(u, np.float64), dtype=cdf.dtype, device=cdf.device)[:, None]
    idx = torch.searchsorted(cdf, uu, right=True)[:, 0]
    last = probs.shape[-1] - 1
    return idx.clamp(max=last).to("cpu").numpy().astype(np.int64)


def sample_token(logits_row: torch.Tensor, temperature: float, seed: int, key: int, position: int) -> int:
    """The token of output position ``position`` after a prefix whose last logits are ``logits_row``."""
    probs = target_probs(logits_row.reshape(1, -1), temperature)
    return int(draw_rows(probs, uniform(seed, key, [position]))[0])


def node_fields(pool, logits: torch.Tensor, temperature: float) -> tuple[np.ndarray, np.ndarray]:
    """Per node of ``pool``: p_T(token | path) and the target mass below the token (float32 each).

    ``logits`` is the tree forward's ``[1 + m, V]`` (row 0 the root); a node's
    distribution is its parent's row.
    """
    m = len(pool)
    if m == 0:
        return np.zeros(0, np.float32), np.zeros(0, np.float32)
    rows = torch.as_tensor([p + 1 for p in pool.parent], dtype=torch.long, device=logits.device)
    probs = target_probs(logits.index_select(0, rows), temperature)
    tok = torch.as_tensor(pool.token, dtype=torch.long, device=logits.device)[:, None]
    p = probs.gather(1, tok)[:, 0]
    below = torch.cumsum(probs, dim=-1).gather(1, tok)[:, 0] - p
    return (p.to("cpu").numpy().astype(np.float32),
            np.clip(below.to("cpu").numpy(), 0.0, 1.0).astype(np.float32))


def sampled_verdict(pool, logits: torch.Tensor, temperature: float, seed: int, key: int, t: int) -> Verdict:
    """Sampled verification of a forwarded tree whose root is output position ``t``.

    Every tree row draws the token of the position after it (root: t + 1,
    a level-j node: t + j + 1); ``agree[v]`` says v's token is its parent's
    draw; the path follows the draws through the verified nodes and the
    next root is the draw after it (the bonus).  ``argmax`` holds the draws.
    """
    m = len(pool)
    positions = [t + 1] + [t + int(lv) + 1 for lv in pool.level]
    draws = draw_rows(target_probs(logits[: 1 + m], temperature), uniform(seed, key, positions))
    agree = np.array([draws[pool.parent[v] + 1] == pool.token[v] for v in range(m)], dtype=bool)
    children: dict[int, list[int]] = {}
    for v, par in enumerate(pool.parent):
        children.setdefault(par, []).append(v)
    path, cur = [], -1
    while True:
        nxt = next((c for c in children.get(cur, []) if agree[c]), None)
        if nxt is None:
            break
        path.append(nxt)
        cur = nxt
    return Verdict(agree, path, int(draws[cur + 1]), draws)


def sampled_generate(model, prompt: list[int], max_new_tokens: int, temperature: float, seed: int, key: int,
                     eos: int | None = None) -> list[int]:
    """Plain sampled decoding at ``temperature``, one token per forward, with the position-keyed uniforms."""
    from hwprobe.tree import lm_forward, new_cache

    device = next(model.parameters()).device
    cache = new_cache(model)
    out = lm_forward(model, torch.as_tensor([list(prompt)], device=device), cache)
    tok = sample_token(out.logits[0, -1], temperature, seed, key, 0)
    toks = [tok]
    while len(toks) < max_new_tokens and tok != eos:
        o = lm_forward(model, torch.as_tensor([[tok]], device=device), cache)
        tok = sample_token(o.logits[0, -1], temperature, seed, key, len(toks))
        toks.append(tok)
    return toks


def speculative_sample(model, drafter, prompt: list[int], max_new_tokens: int, *, temperature: float, seed: int,
                       key: int, select=None, spec=None, eos: int | None = None):
    """Sampled speculative decoding (no offloading, no timing): :func:`hwprobe.specdecode.speculative_generate`
    with :func:`sampled_verdict` in place of the greedy verdict.  Returns a ``SpecResult``."""
    from hwprobe.pool import PoolSpec
    from hwprobe.specdecode import select_all, speculative_generate

    return speculative_generate(
        model, drafter, list(prompt), max_new_tokens, select_all if select is None else select,
        PoolSpec() if spec is None else spec, eos,
        first_token=lambda logits: sample_token(logits, temperature, seed, key, 0),
        verdict=lambda sub, logits, position: sampled_verdict(sub, logits, temperature, seed, key, position))
