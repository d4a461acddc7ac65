"""The in-memory trace: the contract between ``hwprobe`` (records) and the simulator (replays).

Greedy verification is lossless, so the committed text is the same for every
selector; only where cycles begin differs.  A trace therefore stores, for
every output position ``t`` of every request, the candidate pool the drafter
builds from there (SpecFit §2–3): every node's parent, level, token, draft
conditional probability q, path probability p = Π q along the path, whether
the target's greedy prediction agrees, and its routes ``[L][k]`` (sorted
expert ids per layer) in the full-pool tree forward.  The root of position
``t`` is the pending token whose forward verifies the pool; its routes are
``root_routes[t]``.

Replay: cursor t → pool(t) → select S → accepted path = longest root-to-node
path inside S whose nodes all agree → commit 1 + its length → t advances by
that.  Positions of a request are ``0 .. output_len - 1``, each exactly once,
sorted.  An autoregressive-only trace (imported routing logs) has empty pools.

All per-node data is held column-wise in flat numpy arrays (CSR by position):
nodes of position ``i`` are ``node_ptr[i]:node_ptr[i + 1]``; within a pool,
node ``j``'s parent is ``node_parent[node_ptr[i] + j]`` (``-1`` = the root),
and parents come before children.  Nothing is ever expanded into Python
objects per node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

SCHEMA_VERSION = 2
# Versions this simmoe reads.  Version 2 added sampled verification (meta "sampling" and the
# optional node_target_cdf column, simmoe.trace.sampling); a version-1 file is greedy-only.
READ_SCHEMA_VERSIONS = (1, 2)

# Provenance kinds (``meta["provenance"]["kind"]``).
SYNTHETIC = "synthetic"
HWPROBE = "hwprobe"
IMPORTED = "imported"


@dataclass(frozen=True)
class ModelGeometry:
    """Shape of the MoE model that produced the routes."""

    num_layers: int
    num_experts: int
    top_k: int
    expert_bytes: int = 0
    name: str = ""
    # Which decoder layers are MoE layers (ascending; ``num_layers`` of them) out of
    # ``decoder_layers``.  Empty / 0: not recorded, every decoder layer is a MoE layer.
    # Routes, caches and copies exist for MoE layers only; the dense layers' time
    # is part of the profile's non-expert forward time.
    moe_layers: tuple[int, ...] = ()
    decoder_layers: int = 0

    def to_dict(self) -> dict[str, Any]:
        d = {"num_layers": self.num_layers, "num_experts": self.num_experts,
             "top_k": self.top_k, "expert_bytes": self.expert_bytes, "name": self.name}
        if self.moe_layers or self.decoder_layers:
            d["moe_layers"] = [int(i) for i in self.moe_layers]
            d["decoder_layers"] = int(self.decoder_layers)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelGeometry:
        """Integers must be JSON integers: ``"48"`` or ``48.7`` raise ``ValueError`` naming the key."""
        if not isinstance(d, dict):
            raise TypeError(f"must be a JSON object, got {d!r}")
        name = d.get("name", "")
        if not isinstance(name, str):
            raise ValueError(f"'name' must be a string, got {name!r}")
        moe = d.get("moe_layers", [])
        if not isinstance(moe, list):
            raise ValueError(f"'moe_layers' must be a list of integers, got {moe!r}")
        return cls(strict_int(d, "num_layers"), strict_int(d, "num_experts"), strict_int(d, "top_k"),
                   strict_int(d, "expert_bytes", 0), name,
                   tuple(strict_int({"moe_layers": i}, "moe_layers") for i in moe),
                   strict_int(d, "decoder_layers", 0))

    @property
    def dense_layers(self) -> tuple[int, ...]:
        """Decoder layers without routed experts (empty when the geometry does not say)."""
        moe = set(self.moe_layers)
        return tuple(i for i in range(self.decoder_layers) if i not in moe)

    def layer_problem(self) -> str | None:
        """What is inconsistent between ``moe_layers``, ``decoder_layers`` and ``num_layers``, or None."""
        if not self.moe_layers and not self.decoder_layers:
            return None
        m = list(self.moe_layers)
        if len(m) != self.num_layers:
            return f"moe_layers lists {len(m)} layers but num_layers is {self.num_layers}"
        if any(b <= a for a, b in zip(m, m[1:])) or m[0] < 0:
            return f"moe_layers {m} must be ascending decoder-layer indices"
        if m[-1] >= self.decoder_layers:
            return f"moe_layers {m} do not fit in {self.decoder_layers} decoder layers"
        return None

    @property
    def route_dtype(self) -> np.dtype:
        return np.dtype(np.uint8) if self.num_experts <= 256 else np.dtype(np.uint16)


@dataclass(frozen=True)
class PoolShape:
    """How the drafter built each pool: top-k per expansion, depth, node cap, verify budget K."""

    expand_topk: int = 2
    depth: int = 5
    max_nodes: int = 18
    K: int = 7

    def to_dict(self) -> dict[str, int]:
        return {"expand_topk": self.expand_topk, "depth": self.depth,
                "max_nodes": self.max_nodes, "K": self.K}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PoolShape:
        if not isinstance(d, dict):
            raise TypeError(f"must be a JSON object, got {d!r}")
        return cls(strict_int(d, "expand_topk"), strict_int(d, "depth"), strict_int(d, "max_nodes"),
                   strict_int(d, "K"))


def strict_int(d: dict[str, Any], key: str, default: int | None = None) -> int:
    """``d[key]`` when it is an integer (not a bool, a float or a string); ``ValueError`` names the key."""
    if key not in d and default is not None:
        return default
    value = d[key]
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{key!r} must be an integer, got {value!r}")
    return int(value)


@dataclass
class Requests:
    """The request table, one entry per request, in trace order."""

    request_id: np.ndarray      # str objects (Spec-Bench question ids as strings)
    dataset: np.ndarray         # str objects, e.g. "gsm8k", "cnndm"
    prompt_len: np.ndarray      # int32
    output_len: np.ndarray      # int32: number of output positions recorded
    prefill_union: np.ndarray   # bool [R, L, N]: experts the prefill forward routed to
    prefill_time_ms: np.ndarray  # float64; NaN where unknown (the profile's model is used)

    def __len__(self) -> int:
        return len(self.request_id)


@dataclass
class Trace:
    """A whole trace in memory.  See the module docstring for the layout."""

    meta: dict[str, Any]        # schema_version, provenance, geometry, pool_shape, hardware, ...
    requests: Requests
    # one entry per (request, position), sorted by request then position
    pos_request: np.ndarray     # int32 [P]: index into ``requests``
    pos_index: np.ndarray       # int32 [P]: output position t within its request
    root_token: np.ndarray      # int32 [P]
    root_routes: np.ndarray     # uint8/uint16 [P, L, k], sorted ascending per layer
    node_ptr: np.ndarray        # int64 [P + 1]
    # one entry per pool node, all pools concatenated
    node_parent: np.ndarray     # int16 [M]: index within its pool, -1 = root
    node_level: np.ndarray      # int8 [M]: 1 for children of the root
    node_token: np.ndarray      # int32 [M]
    node_q: np.ndarray          # float32 [M]: draft conditional probability
    node_p: np.ndarray          # float32 [M]: path probability (product of q to the root)
    node_agree: np.ndarray      # bool [M]: the target's greedy prediction equals the token
    node_routes: np.ndarray     # uint8/uint16 [M, L, k], sorted ascending per layer
    # optional columns (None when not recorded)
    node_target_prob: np.ndarray | None = None   # float32 [M]: target probability of the token
    draft_time_ms: np.ndarray | None = None      # float32 [P, depth]: measured per level
    # float32 [M]: target mass of the tokens below the node's token at meta["sampling"] temperature
    # (with node_target_prob = p_T(token | path) there; simmoe.trace.sampling)
    node_target_cdf: np.ndarray | None = None
    path: str | None = field(default=None, compare=False)

    # -- geometry -----------------------------------------------------------
    @property
    def geometry(self) -> ModelGeometry:
        return ModelGeometry.from_dict(self.meta["geometry"])

    @property
    def pool_shape(self) -> PoolShape:
        return PoolShape.from_dict(self.meta["pool_shape"])

    @property
    def is_synthetic(self) -> bool:
        return self.meta.get("provenance", {}).get("kind") == SYNTHETIC

    @property
    def num_positions(self) -> int:
        return len(self.pos_index)

    @property
    def num_nodes(self) -> int:
        return len(self.node_parent)

    # -- navigation ---------------------------------------------------------
    def request_positions(self, r: int) -> tuple[int, int]:
        """Half-open range of position rows belonging to request ``r``."""
        starts = self._request_starts()
        return int(starts[r]), int(starts[r + 1])

    def _request_starts(self) -> np.ndarray:
        cached = getattr(self, "_starts", None)
        if cached is None:
            counts = np.bincount(self.pos_request, minlength=len(self.requests))
            cached = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
            object.__setattr__(self, "_starts", cached)
        return cached

    def pool_slice(self, i: int) -> slice:
        """Node rows of the pool at position row ``i``."""
        return slice(int(self.node_ptr[i]), int(self.node_ptr[i + 1]))

    def prefill_demand(self, r: int) -> np.ndarray:
        """Request ``r``'s prefill demand: the expert union of its prompt, bool [L, N]."""
        g = self.geometry
        return np.asarray(self.requests.prefill_union[r], dtype=bool).reshape(g.num_layers, g.num_experts)

    def pool_size(self, i: int) -> int:
        return int(self.node_ptr[i + 1] - self.node_ptr[i])
