"""Greedy autoregressive decoding and greedy speculative decoding on a transformers model.

Speculative decoding (SpecFit §2): the drafter grows the pool, a selection
rule picks an ancestor-closed subset S, the target verifies root + S in one
tree forward, the longest agreeing path is committed with the root, the KV
cache is compacted to it, and the target's next prediction becomes the new
root.  Greedy verification is lossless: the output equals
:func:`greedy_generate` whatever the drafter and the rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from hwprobe.pool import Pool, PoolSpec, build_pool
from hwprobe.tree import cache_length, compact_cache, greedy_verdict, lm_forward, new_cache, tree_forward

DEFAULT_SPEC = PoolSpec()


def _device(model):
    return next(model.parameters()).device


def prefill(model, prompt: list[int], *, hidden_states: bool = False):
    """Forward the prompt into a fresh cache; returns (cache, output, first output token)."""
    cache = new_cache(model)
    ids = torch.as_tensor([prompt], device=_device(model))
    out = lm_forward(model, ids, cache, hidden_states=hidden_states)
    return cache, out, int(out.logits[0, -1].argmax())


def greedy_generate(model, prompt: list[int], max_new_tokens: int, eos: int | None = None) -> list[int]:
    """Plain greedy decoding with a KV cache, one token per forward."""
    cache, _, tok = prefill(model, prompt)
    out = [tok]
    while len(out) < max_new_tokens and tok != eos:
        o = lm_forward(model, torch.as_tensor([[tok]], device=_device(model)), cache)
        tok = int(o.logits[0, -1].argmax())
        out.append(tok)
    return out


# -- selection rules: pool -> ancestor-closed node ids -----------------------------------

def select_all(pool: Pool) -> list[int]:
    return list(range(len(pool)))


def select_top_k(K: int = 7):
    """EAGLE-3's rule: the K nodes of highest path probability (ties by id; ancestor-closed
    because a child's path probability never exceeds its parent's)."""
    def rule(pool: Pool) -> list[int]:
        order = sorted(range(len(pool)), key=lambda j: (-pool.p[j], j))[:K]
        chosen = set(order)
        for j in list(order):        # guard against equal probabilities out of order
            par = pool.parent[j]
            while par >= 0 and par not in chosen:
                chosen.add(par)
                par = pool.parent[par]
        return sorted(chosen)
    return rule


@dataclass
class SpecResult:
    tokens: list[int]
    selected: list[int] = field(default_factory=list)    # nodes verified per cycle
    committed: list[int] = field(default_factory=list)   # tokens committed per cycle (root + path)


def speculative_generate(model, drafter, prompt: list[int], max_new_tokens: int, select=select_all,
                         spec: PoolSpec = DEFAULT_SPEC, eos: int | None = None, *,
                         first_token=None, verdict=None) -> SpecResult:
    """Speculative decoding; ``select(pool)`` returns the node ids to verify.

    Greedy by default.  ``first_token(logits)`` picks the token after the prompt and
    ``verdict(sub, logits, position)`` verifies a tree (``position``: index of the
    cycle's root in the output); :func:`hwprobe.sampling.speculative_sample` passes
    the sampled rule.
    """
    feats = getattr(drafter, "needs_features", False)
    drafter.start(prompt)
    cache, out, root = prefill(model, prompt, hidden_states=feats)
    if first_token is not None:
        root = first_token(out.logits[0, -1])
    if feats:
        drafter.observe(list(prompt), out)
    res = SpecResult([root])
    while len(res.tokens) < max_new_tokens and res.tokens[-1] != eos:
        context = list(prompt) + res.tokens
        pool = build_pool(drafter, context, spec)
        sub = pool.subset(select(pool))
        n = cache_length(cache)
        o = tree_forward(model, cache, root, sub, hidden_states=feats)
        v = (greedy_verdict(sub, o.logits[0]) if verdict is None
             else verdict(sub, o.logits[0], len(res.tokens) - 1))
        rows = [0] + [1 + j for j in v.path]
        compact_cache(cache, n, rows)
        if feats:
            drafter.observe(context, o, rows)
        res.tokens += [sub.token[j] for j in v.path] + [v.next_root]
        res.selected.append(len(sub))
        res.committed.append(1 + len(v.path))
        root = v.next_root
        if eos is not None and eos in res.tokens:
            res.tokens = res.tokens[: res.tokens.index(eos) + 1]
            break
    res.tokens = res.tokens[:max_new_tokens]
    return res
