"""Parameters of the synthetic trace generator and the calibrated presets.

One frozen dataclass holds every knob of the generative model documented in
``docs/synthetic-traces.md``; a preset is a named instance whose fitted
fields were found by ``python -m simmoe.synth.calibration fit`` against the
calibration set of ``CALIBRATION.md`` (and nothing else).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from simmoe.errors import SimmoeError
from simmoe.trace.schema import ModelGeometry, PoolShape

# Qwen3-30B-A3B (SpecFit §4.1, App. B): one bf16 expert = 3 · 2048 · 768 · 2 bytes.
QWEN3_30B_A3B = ModelGeometry(num_layers=48, num_experts=128, top_k=8,
                              expert_bytes=9_437_184, name="Qwen3-30B-A3B-Instruct-2507")
# EAGLE-3 pool of SpecFit §3.1: top-2 expansion, depth 5, 18 nodes, K = 7.
EAGLE3_POOL = PoolShape(expand_topk=2, depth=5, max_nodes=18, K=7)
QWEN3_VOCAB = 151_936


# Knobs added after traces were shipped: left out of a trace's metadata at their default (0).
_RECORDED_WHEN_SET = ("facet_share", "topic_drift")


@dataclass(frozen=True)
class SynthParams:
    """Every parameter of the generative model (see docs/synthetic-traces.md)."""

    # -- workload ---------------------------------------------------------
    dataset: str = "gsm8k"
    num_requests: int = 80            # requests of the full-size trace
    total_output_tokens: int = 17_791  # output tokens of the full-size trace (fitted exactly)
    limit_tokens: int = 512           # input + output limit per request
    output_len_sigma: float = 0.45    # spread (log-normal sigma) of output lengths
    # -- model and drafter --------------------------------------------------
    geometry: ModelGeometry = QWEN3_30B_A3B
    pool: PoolShape = EAGLE3_POOL
    vocab_size: int = QWEN3_VOCAB
    # -- draft confidence and agreement ----------------------------------------
    easy_share: float = 0.75          # stationary share of positions in easy stretches
    stretch_tokens: float = 12.0      # mean length of an easy+hard stretch pair / 2
    easy_confidence: float = 0.97     # mean predictability of an easy position
    hard_confidence: float = 0.45     # mean predictability of a hard position
    confidence_concentration: float = 8.0   # Beta concentration of a position's predictability
    draft_concentration: float = 25.0       # Beta concentration of a node's top-1 q around it
    depth_decay: float = 0.97         # predictability factor per extra draft level
    runner_up_share: float = 0.5      # mean share of the remaining mass the 2nd child gets
    # -- target distribution at temperature > 0 (simmoe.synth.sampling) ---------
    target_spread: float = 0.0        # greedy token's mass at T = 1 is 1 - target_spread·(1 - z_u)
    target_sibling_share: float = 0.5  # share of the rest on the drafted siblings (by their q), not outside
    # -- routing ------------------------------------------------------------------
    popularity_sigma: float = 1.0     # log-normal spread of per-layer expert popularity
    topic_sigma: float = 0.0          # log-normal spread of a request's modulation of it
    locality: float = 0.6             # P(a context expert survives one token step)
    token_share: float = 0.8          # P(a token keeps a context expert; siblings share context)
    history_reuse: float = 0.0        # P(a token's redrawn expert comes from a recent context)
    history_tokens: int = 16          # how far back "recent" reaches (uniform over 1..this)
    facet_share: float = 0.0          # share of a request's topic that rotates over its facets (spreads routings)
    topic_drift: float = 0.0          # per-token decorrelation rate of the rest (its hot set wanders)

    def __post_init__(self):
        checks = [
            ("num_requests", self.num_requests >= 1),
            ("total_output_tokens", self.total_output_tokens >= self.num_requests),
            ("limit_tokens", self.limit_tokens >= 2),
            ("output_len_sigma", 0.0 <= self.output_len_sigma <= 3.0),
            ("vocab_size", self.vocab_size > self.pool.expand_topk + 1),
            ("easy_share", 0.0 <= self.easy_share <= 1.0),
            ("stretch_tokens", self.stretch_tokens >= 1.0),
            ("easy_confidence", 0.0 < self.easy_confidence < 1.0),
            ("hard_confidence", 0.0 < self.hard_confidence < 1.0),
            ("confidence_concentration", self.confidence_concentration > 0.0),
            ("draft_concentration", self.draft_concentration > 0.0),
            ("depth_decay", 0.0 < self.depth_decay <= 1.0),
            ("runner_up_share", 0.0 < self.runner_up_share < 1.0),
            ("target_spread", 0.0 <= self.target_spread <= 1.0),
            ("target_sibling_share", 0.0 <= self.target_sibling_share <= 1.0),
            ("popularity_sigma", 0.0 <= self.popularity_sigma <= 5.0),
            ("topic_sigma", 0.0 <= self.topic_sigma <= 5.0),
            ("locality", 0.0 <= self.locality <= 1.0),
            ("token_share", 0.0 <= self.token_share <= 1.0),
            ("history_reuse", 0.0 <= self.history_reuse <= 1.0),
            ("history_tokens", self.history_tokens >= 1),
            ("facet_share", 0.0 <= self.facet_share <= 1.0),
            ("topic_drift", 0.0 <= self.topic_drift <= 1.0),
        ]
        bad = [name for name, ok in checks if not ok]
        if bad:
            name = bad[0]
            raise SimmoeError(f"synth parameter {name}={getattr(self, name)!r} is out of range")
        if (self.facet_share or self.topic_drift) and self.topic_sigma == 0.0:
            # both act on the request's topic: without one they would silently do nothing
            raise SimmoeError("synth parameters facet_share and topic_drift act on the request's topic: "
                              "they need topic_sigma > 0")
        g, pool = self.geometry, self.pool
        if not (1 <= g.top_k <= g.num_experts and g.num_layers >= 1 and g.num_experts <= 65535):
            raise SimmoeError(f"synth geometry {g.num_layers} layers, {g.num_experts} experts, "
                              f"top-{g.top_k} is not valid")
        if not (pool.expand_topk >= 1 and 1 <= pool.depth <= 64 and pool.max_nodes >= 1
                and pool.K >= 1 and pool.max_nodes <= 32767):
            raise SimmoeError(f"synth pool shape {pool.to_dict()} is not valid")

    def with_(self, **changes) -> SynthParams:
        """A copy with some fields changed (validated)."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Every field; those added after traces were shipped only when set (so a default trace's bytes stay)."""
        d = asdict(self)
        for name in _RECORDED_WHEN_SET:
            if d[name] == 0.0:
                del d[name]
        d["geometry"] = self.geometry.to_dict()
        d["pool"] = self.pool.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SynthParams:
        d = dict(d)
        d["geometry"] = ModelGeometry.from_dict(d["geometry"])
        d["pool"] = PoolShape.from_dict(d["pool"])
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


@dataclass(frozen=True)
class Preset:
    """A named, calibrated parameter set and what its fitted fields were fitted to."""

    name: str
    params: SynthParams
    fitted_to: tuple[str, ...]
    fitted_fields: tuple[str, ...] = field(default=())


# Fitted values come from `python -m simmoe.synth.calibration fit` (seed 0); the
# command prints them.  Model-level routing fields (popularity_sigma,
# topic_sigma, token_share) are fitted on GSM8K only and shared.
PRESETS: dict[str, Preset] = {
    "gsm8k": Preset(
        name="gsm8k",
        params=SynthParams(
            dataset="gsm8k", num_requests=80, total_output_tokens=17_791, limit_tokens=512,
            output_len_sigma=0.45,
            easy_share=0.8447,
            popularity_sigma=1.0464, topic_sigma=1.4403, locality=0.1926, token_share=0.8263,
        ),
        fitted_to=(
            "SpecFit Table 3 (GSM8K, A100): EAGLE-3 committed tokens per cycle 4.35",
            "SpecFit Table 3: H2D per output token, AR 398.2 / 76.5 and EAGLE-3 345.7 / 92.7 "
            "(without / with 48 LRU slots)",
            "SpecFit §4.1/App. B: 80 requests, 17,791 output tokens, limit 512 tokens",
        ),
        fitted_fields=("easy_share", "popularity_sigma", "topic_sigma", "locality", "token_share",
                       "total_output_tokens"),
    ),
    "cnndm": Preset(
        name="cnndm",
        params=SynthParams(
            dataset="cnndm", num_requests=40, total_output_tokens=9_652, limit_tokens=2048,
            output_len_sigma=0.35,
            easy_share=0.2154,
            popularity_sigma=1.0464, topic_sigma=1.4403, locality=0.7261, token_share=0.8263,
        ),
        fitted_to=(
            "SpecFit Table 2 (CNN/DM, A100): EAGLE-3 committed tokens per cycle 2.54",
            "SpecFit Table 2: AR H2D per output token with 48 LRU slots 49.7",
            "SpecFit §4.2/App. B: 40 articles, inputs 156-1,496 tokens, 9,652 output tokens, "
            "limit 2048 tokens",
        ),
        fitted_fields=("easy_share", "locality", "total_output_tokens"),
    ),
}


def preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise SimmoeError(f"unknown synth preset {name!r} (known: {', '.join(PRESETS)})") from None
