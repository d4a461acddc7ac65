"""simmoe's drafters: EAGLE-3 (the default), MTP heads, llama.cpp's draft-model chain, DFlash.

Each says where its pool shape, its acceptance and its cost come from
(docs/synthetic-traces.md, "Drafters").  Acceptance rates are the drafters'
published statistics, cited per number; whatever a synthetic trace of them
gives in tokens/s is a prediction, never a fit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simmoe.drafters.base import DrafterBase, chain_shape, conditional_rates, tree_shape
from simmoe.drafters.cost import (
    allreduce_ms,
    draft_cpu_forward,
    draft_model_physical,
    expected_union,
    head_ms,
    roofline_ms,
    target_layer_ms,
)
from simmoe.errors import SimmoeError
from simmoe.trace.schema import PoolShape

# EAGLE-3 pool of SpecFit §3.1 (the shipped traces' shape; simmoe.synth.params.EAGLE3_POOL)
EAGLE3_SHAPE = PoolShape(expand_topk=2, depth=5, max_nodes=18, K=7)
EAGLE3_DEPTH_DECAY = 0.97   # simmoe.synth.params.SynthParams.depth_decay's default


class Eagle3(DrafterBase):
    """EAGLE-3's tree: the pools every shipped trace holds, drafted as :mod:`simmoe.synth.draft` describes.

    Acceptance: the workload's calibrated model (``z · depth_decay^(j-1)``; the
    preset's ``depth_decay``, which the synthetic generator uses for this
    drafter).  Cost: :meth:`simmoe.hardware.physical.PhysicalModel.draft_ms`,
    one decoder layer of the target's width per level.
    """

    name = "eagle3"
    summary = "EAGLE-3's tree (top-2 expansion, depth 5, 18 nodes, K = 7): the default, every shipped trace"
    chain = False
    def pool_shape(self) -> PoolShape:
        return EAGLE3_SHAPE

    def level_mean(self, z: np.ndarray, level: int, mean_z: float) -> np.ndarray:
        # the synthetic generator draws EAGLE-3's pools with the preset's depth_decay; this is its default
        return np.asarray(z, dtype=np.float64) * EAGLE3_DEPTH_DECAY ** (level - 1)

    def level_rate(self, level: int) -> float:
        """Relative to the position's predictability: EAGLE-3's acceptance is the workload's own."""
        return float(EAGLE3_DEPTH_DECAY ** (level - 1))

    def drafting_ms(self, physical: Any, levels: int, requests: int = 1) -> float:
        from simmoe.hardware.physical import PhysicalModel

        return PhysicalModel.draft_ms(physical, levels, requests, served=False)


# DeepSeek-V3 Technical Report (arXiv 2412.19437v1), §5.4.3 "Multi-Token Prediction Evaluation": "the
# acceptance rate of the second token prediction ranges between 85% and 90%" -> the midpoint
MTP_FIRST = 0.875
# no published per-depth rate for a module reused beyond the depth it was trained for: an assumption
MTP_DECAY = 0.9


class MTP(DrafterBase):
    """k MTP heads sharing the target's last hidden state: a chain of k, or EAGLE's tree of top-k branches.

    Structure (DeepSeek-V3 Technical Report §2.2, Fig. 3: each MTP module is a
    projection M ∈ R^{d×2d} of [RMSNorm(h); RMSNorm(emb)], one Transformer
    block, and the shared output head; Qwen3-Next-80B-A3B's config.json
    ships ``num_nextn_predict_layers = 1``, one such layer, which engines run
    again for each further token).  Cost per level, on the target's geometry:
    the projection (2h·h weights), one decoder layer of the target (its last:
    attention, router, shared experts and the routed experts ``width`` tokens
    per request reach, :func:`~simmoe.drafters.cost.expected_union`), the LM
    head, and ``draft_step_ms``; ``width`` = 1 (chain) or ``topk`` tokens per
    request.  Acceptance of level j: ``first · decay^(j-1)``.
    """

    name = "mtp"
    summary = "MTP heads: a chain of k (or a top-k tree), each head one target-width layer + the LM head"
    PARAMS = (
        ("heads", int, 3, "tokens drafted per iteration (the depth)"),
        ("topk", int, 1, "1: a chain; > 1: top-k branches at every level (EAGLE's expansion)"),
        ("first", float, MTP_FIRST, "acceptance of the first drafted token (DeepSeek-V3 §5.4.3: 85-90%)"),
        ("decay", float, MTP_DECAY, "acceptance factor per further head (an assumption)"),
    )

    @property
    def chain(self) -> bool:  # type: ignore[override]
        return int(self["topk"]) == 1

    def check(self) -> None:
        if not 1 <= self["heads"] <= 16:
            raise self.refuse("heads", "must lie in 1..16")
        if not 1 <= self["topk"] <= 8:
            raise self.refuse("topk", "must lie in 1..8")
        for name in ("first", "decay"):
            if not 0.0 < self[name] <= 1.0:
                raise self.refuse(name, "must lie in (0, 1]")

    def pool_shape(self) -> PoolShape:
        return chain_shape(self["heads"]) if self["topk"] == 1 else tree_shape(self["topk"], self["heads"])

    def level_rate(self, level: int) -> float:
        return float(self["first"] * self["decay"] ** (level - 1))

    def level_ms(self, phys: Any, requests: int) -> float:
        n = float(self["topk"] * max(int(requests), 1))
        h = phys.model.hidden_size
        return target_layer_ms(phys, n) + roofline_ms(phys, 2.0 * h * h, n) + head_ms(phys, n) + phys.o.draft_step_ms

    def drafting_ms(self, physical: Any, levels: int, requests: int = 1) -> float:
        return 0.0 if levels <= 0 else int(levels) * self.level_ms(physical, requests)


# ggml-org/llama.cpp pull request #14132, comment of 2025-06-11 (Qwen3-235B-A22B drafted by Qwen3-0.6B,
# llama-batched-bench): the share of drafts with at least j tokens accepted, j = 0..31
LLAMA_CURVE = (1, 0.652, 0.469, 0.363, 0.312, 0.278, 0.252, 0.235, 0.222, 0.213, 0.205, 0.201, 0.197, 0.196,
               0.196, 0.194, 0.191, 0.189, 0.188, 0.186, 0.185, 0.183, 0.181, 0.18, 0.179, 0.179, 0.179,
               0.178, 0.178, 0.177, 0.177, 0.176)
LLAMA_RATES = conditional_rates(LLAMA_CURVE)
# llama.cpp: common/speculative.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE (target and draft vocabularies must match)
SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128


class LlamaChain(DrafterBase):
    """llama.cpp's draft model (``--model-draft``): a chain of up to ``--draft-max`` tokens.

    Pools: a chain of ``draft_max`` tokens; the ``llama-chain`` selector stops
    it below ``--draft-p-min`` (and drops it under ``--draft-min``) as
    llama.cpp does.  Acceptance of position j: the conditional rate of the
    published curve :data:`LLAMA_CURVE` (P(≥ j accepted) / P(≥ j−1)), the last
    one beyond its 31 positions.  Cost per level: one forward of the draft
    model (``draft_model``, a catalogued model: ``simmoe models``) over one
    token per request on the target's GPU (:func:`draft_model_physical`); a
    draft model that is itself an MoE reads the experts its tokens reach
    (:func:`expected_union`: top-k of them at batch 1), in GPU memory, or,
    with ``draft_n_cpu_moe`` N (llama.cpp's ``--spec-draft-n-cpu-moe``), those
    of its first N decoder layers on the CPU of a CPU-expert profile
    (:func:`draft_cpu_forward`: the same CPU, link and terms as the target's
    CPU experts, the draft model's checkpoint format).  One draft step is one
    token per request, so each CPU layer reads the experts it reaches once per
    step.
    """

    name = "llama-chain"
    summary = "llama.cpp's draft model: a chain of --draft-max, its own forward per token"
    PARAMS = (
        ("draft_max", int, 16, "chain length drafted (llama.cpp --draft-max, default 16)"),
        ("draft_model", str, None, "the draft model, a catalogued model (simmoe models): needed for its cost"),
        ("draft_n_cpu_moe", int, None, "an MoE draft model's first N decoder layers' experts on the CPU "
                                       "(llama.cpp --spec-draft-n-cpu-moe; a profile with a CPU)"),
    )

    def check(self) -> None:
        if not 1 <= self["draft_max"] <= 64:
            raise self.refuse("draft_max", "must lie in 1..64")
        n = self["draft_n_cpu_moe"]
        if n is None:
            return
        if n < 0:
            raise self.refuse("draft_n_cpu_moe", "must be non-negative")
        if self["draft_model"] is None:
            raise SimmoeError("drafter llama-chain: draft_n_cpu_moe places the draft model's experts; name the "
                              "draft model (--drafter-param draft_model=NAME, a catalogued model: simmoe models)")
        from simmoe.hardware.catalogue import load_model

        draft = load_model(self["draft_model"])
        if draft.dense:
            raise self.refuse("draft_n_cpu_moe", f"has no meaning: draft model {draft.name} is dense (no experts)")
        if n > draft.decoder_layers:
            raise self.refuse("draft_n_cpu_moe", f"names more layers than {draft.name} has "
                                                 f"({draft.decoder_layers} decoder layers)")

    def pool_shape(self) -> PoolShape:
        return chain_shape(self["draft_max"])

    def level_rate(self, level: int) -> float:
        return float(LLAMA_RATES[min(level, len(LLAMA_RATES)) - 1])

    def draft_spec(self, target: Any) -> Any:
        from simmoe.hardware.catalogue import load_model

        if self["draft_model"] is None:
            raise SimmoeError("drafter llama-chain: its cost needs the draft model: --drafter-param "
                              "draft_model=NAME (a catalogued model: simmoe models)")
        draft = load_model(self["draft_model"])
        if abs(draft.vocab_size - target.vocab_size) > SPEC_VOCAB_MAX_SIZE_DIFFERENCE:
            raise SimmoeError(f"drafter llama-chain: draft model {draft.name}'s vocabulary ({draft.vocab_size}) is "
                              f"not {target.name}'s ({target.vocab_size}); llama.cpp refuses a difference over "
                              f"{SPEC_VOCAB_MAX_SIZE_DIFFERENCE} tokens")
        return draft

    def level_ms(self, phys: Any, requests: int) -> float:
        n = max(int(requests), 1)
        key = (id(phys), n)
        if key not in self.memo:   # a replay asks once per step: the catalogue is read once per model and batch
            draft = self.draft_spec(phys.model)
            u = expected_union(draft.num_experts, draft.top_k, n) if not draft.dense else 1.0
            layers = self["draft_n_cpu_moe"]
            fwd = draft_model_physical(phys, draft) if layers is None else draft_cpu_forward(phys, draft, layers)
            self.memo[key] = (float(fwd.forward_ms(n, u)), phys)   # phys kept alive: its id stays its own
        return self.memo[key][0]

    def drafting_ms(self, physical: Any, levels: int, requests: int = 1) -> float:
        return 0.0 if levels <= 0 else int(levels) * self.level_ms(physical, requests)


# z-lab's DFlash drafters: block size 16, served with 15 speculative tokens (z-lab/Qwen3.5-27B-DFlash model
# card: vLLM "num_speculative_tokens": 15, SGLang --speculative-num-draft-tokens 16); 5 draft layers (the
# configuration memra-engine's dflash.rs transcribes from z-lab/dflash: n_layer 5, block_size 16)
DFLASH_BLOCK = 16
DFLASH_LAYERS = 5
# Red Hat AI's Qwen3-8B DFlash speculator (as relayed by ai-primer.com, "DFlash adds Qwen3-8B speculator with
# 82.2% first-token acceptance"): 82.2% first-token acceptance and 3.74 accepted tokens per step on math
# reasoning (the step's tokens counted with the target's own, an assumption)
DFLASH_FIRST = 0.822
DFLASH_PER_STEP = 3.74


def geometric_rate(first: float, per_step: float, drafted: int) -> float:
    """The constant rate r of positions 2..n with first + first·r + ... = per_step − 1 (bisection).

    Clamped to [0, 1]: 1 when even every position accepted gives fewer, 0 when the first alone gives more.
    """
    want = per_step - 1.0
    lo, hi = 0.0, 1.0
    if first * drafted <= want:
        return 1.0
    if first >= want:
        return 0.0
    for _ in range(80):
        r = (lo + hi) / 2
        got = first * sum(r ** j for j in range(drafted))
        lo, hi = (r, hi) if got < want else (lo, r)
    return (lo + hi) / 2


class DFlash(DrafterBase):
    """DFlash: one block-diffusion forward drafts a whole block (``block - 1`` tokens after the root).

    Pools: a chain of ``block − 1`` tokens (one candidate per position; EVICT
    and SpecFit select a prefix of it, EVICT Table 6's "DFlash + EVICT").
    Acceptance per position: ``first`` at position 1, then the constant rate
    that makes the mean accepted tokens per step ``per_step`` (published
    figures above).  Cost: one forward whatever the levels kept: ``layers``
    Qwen3-style layers of the target's width (its attention shape, a dense
    MLP of its ``intermediate_size``, 3h where it has none), the fusion of
    ``taps`` target hidden states (taps·h·h), and the target's LM head, over
    ``block`` tokens per request, plus ``draft_step_ms``.
    """

    name = "dflash"
    summary = "DFlash: one block-diffusion forward drafts a block of 16 (15 candidates), a chain"
    PARAMS = (
        ("block", int, DFLASH_BLOCK, "block size: the root and block - 1 drafted tokens"),
        ("layers", int, DFLASH_LAYERS, "draft layers"),
        ("taps", int, 5, "target hidden states fused into the drafter (an assumption)"),
        ("first", float, DFLASH_FIRST, "acceptance of the first drafted token"),
        ("per_step", float, DFLASH_PER_STEP, "mean tokens committed per step (the root's included)"),
    )

    def check(self) -> None:
        if not 2 <= self["block"] <= 65:
            raise self.refuse("block", "must lie in 2..65")
        if not 1 <= self["layers"] <= 64:
            raise self.refuse("layers", "must lie in 1..64")
        if not 1 <= self["taps"] <= 64:
            raise self.refuse("taps", "must lie in 1..64")
        if not 0.0 < self["first"] <= 1.0:
            raise self.refuse("first", "must lie in (0, 1]")
        if not 1.0 + self["first"] <= self["per_step"] <= self["block"]:
            raise self.refuse("per_step", f"must lie in [1 + first, {self['block']}] (the root, the first "
                                          "drafted token's mean, and at most the block)")

    def pool_shape(self) -> PoolShape:
        return chain_shape(self["block"] - 1)

    def level_rate(self, level: int) -> float:
        if level <= 1:
            return float(self["first"])
        return geometric_rate(self["first"], self["per_step"], self["block"] - 1)

    def forward_ms(self, phys: Any, requests: int) -> float:
        m = phys.model
        h = m.hidden_size
        mlp = 3 * h * (m.intermediate_size or 3 * h)
        n = float(self["block"] * max(int(requests), 1))
        layer = roofline_ms(phys, float(m.attention_params + mlp), n)
        return (self["layers"] * layer + roofline_ms(phys, float(self["taps"] * h * h), n) + head_ms(phys, n)
                + allreduce_ms(phys, n, self["layers"]) + phys.o.draft_step_ms)

    def drafting_ms(self, physical: Any, levels: int, requests: int = 1) -> float:
        return 0.0 if levels <= 0 else self.forward_ms(physical, requests)


class Lookahead(DrafterBase):
    """Lookahead: branches retrieved from an n-gram trie of earlier text, verified several at once; no draft model.

    Pools: ``branches`` continuations of up to ``branch_length`` tokens from
    the root (the trie's matches for the last tokens, from the request's own
    history and a trie shared across requests), a tree whose only siblings
    are the branches' first tokens; the target verifies at most
    ``draft_tokens`` of them (K).  A trie whose branches share a prefix
    deeper than the root is not modelled.  q: the trie's count share of a
    continuation (the most frequent branch first).

    Acceptance: the synthetic traces carry no text (their tokens are random
    ids), so how repetitive the workload's text is cannot be read from them;
    the model assumes it: the best branch's first token is right with mean
    probability ``hit`` (the share of positions whose continuation the trie
    holds), each further branch takes a share ``spread`` of the remaining
    mass, and a matched continuation goes on with ``follow`` per further
    token, all scaled by the position's predictability (boilerplate is
    where a drafter model is confident too).  Both are assumptions, to be
    fitted per workload to EVICT Table 1's Lookahead tokens/s at
    temperature 0 (CALIBRATION.md); every other Lookahead figure is a
    prediction.  Where text exists, the rates and the stretches can be
    counted on it (:mod:`simmoe.validation.lookahead`): on the tiny model
    the rates alone, with the default stretches, put Mat 29-62 % above the
    live lookahead's, since repetition comes in runs (docs/closed-loop.md).

    Cost: no drafter forward; the branches ride in the verification forward
    (the replay charges its width, as for any pool), plus ``lookup_ms`` per
    iteration for the trie lookup on the host (0 by default: an assumption).
    """

    name = "lookahead"
    summary = "Lookahead: n-gram trie branches (own history + a shared trie), no draft model; acceptance assumed"
    chain = False
    PARAMS = (
        ("branches", int, 4, "branches retrieved from the trie (siblings at the root)"),
        ("branch_length", int, 6, "tokens per branch (the depth)"),
        ("draft_tokens", int, 16, "tokens the target verifies at most (K)"),
        ("hit", float, 0.35, "mean acceptance of the best branch's first token (assumed: text repetitiveness)"),
        ("follow", float, 0.75, "acceptance of each further token of a matched branch (assumed)"),
        ("spread", float, 0.1, "mean share of the remaining mass each further branch gets (assumed)"),
        ("lookup_ms", float, 0.0, "host time of the trie lookup per iteration (assumed 0)"),
    )

    def check(self) -> None:
        for name, hi in (("branches", 16), ("branch_length", 32), ("draft_tokens", 512)):
            if not 1 <= self[name] <= hi:
                raise self.refuse(name, f"must lie in 1..{hi}")
        for name in ("hit", "follow", "spread"):
            if not 0.0 < self[name] <= 1.0:
                raise self.refuse(name, "must lie in (0, 1]")
        if self["lookup_ms"] < 0:
            raise self.refuse("lookup_ms", "must be non-negative")

    def pool_shape(self) -> PoolShape:
        n = self["branches"] * self["branch_length"]
        return PoolShape(expand_topk=self["branches"], depth=self["branch_length"], max_nodes=n,
                         K=min(self["draft_tokens"], n))

    def level_plan(self) -> list[tuple[int, int]]:
        """(parents, children) per level: the root's ``branches`` children, then each branch a chain."""
        b = self["branches"]
        return [(1, b)] + [(b, 1)] * (self["branch_length"] - 1)

    def level_rate(self, level: int) -> float:
        return float(self["hit"] if level <= 1 else self["follow"])

    def sibling_share(self) -> float:
        """The further branches' share of the remaining mass (the synthetic generator's runner-up share)."""
        return float(self["spread"])

    def drafting_ms(self, physical: Any, levels: int, requests: int = 1) -> float:
        return float(self["lookup_ms"]) if levels > 0 else 0.0
