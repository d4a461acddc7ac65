"""The model catalogue: each model's geometry as its published configuration gives it (``data/models.toml``).

Everything derived — one expert's bytes, the dense (non-expert) bytes, KV-cache
bytes per token, parameter counts — is computed here from the configuration
fields, so the data file holds only published numbers (docs/models-and-gpus.md).

A dense model is described with ``num_experts = 0``; as a trace geometry it
becomes one "expert" per layer (its MLP) that every token routes to, top-1, so
the replay reads the MLP once per forward like any expert union of size one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from simmoe.hardware.catalogue_io import DATA_DIR, CatalogueError, check_name, read_toml

MODELS_FILE = DATA_DIR / "models.toml"

# bytes per weight of each checkpoint storage width (MXFP4: 4-bit values + one 8-bit scale per 32 values);
# the same numbers as the block layouts of data/formats.toml (a test holds them equal)
DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "mxfp4": 4.25 / 8.0}
KV_DTYPE_BYTES = 2.0  # the KV cache is kept in BF16 by the serving frameworks modelled here


@dataclass(frozen=True)
class ModelSpec:
    """One model's geometry, as its published configuration gives it (models.toml)."""

    key: str
    name: str
    hf_id: str
    source: str
    architecture: str
    decoder_layers: int
    first_dense_layers: int
    num_experts: int
    top_k: int
    shared_intermediate: int
    hidden_size: int
    moe_intermediate_size: int
    intermediate_size: int
    attention: str
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool
    dtype: str
    expert_dtype: str
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    expert_bias: bool = False
    sliding_window: int = 0
    sliding_layers: str = "none"
    unquantized_dtype: str = ""          # embedding, LM head and router when kept wider than ``dtype`` ("": dtype)
    card_active_params_b: float = 0.0    # the model card's activated parameters, billions (0: none recorded)
    card_active_counts: str = "all"      # what the card counts: "all" weights, or "no-input-embedding"
    unverified: tuple[str, ...] = ()

    # -- layers -------------------------------------------------------------
    @property
    def dense(self) -> bool:
        """No routed experts: a dense model."""
        return self.num_experts == 0

    @property
    def moe_layers(self) -> tuple[int, ...]:
        """Decoder layers with routed experts (all layers of a dense model: its MLP is the one "expert")."""
        return tuple(range(self.first_dense_layers, self.decoder_layers)) if not self.dense \
            else tuple(range(self.decoder_layers))

    @property
    def trace_experts(self) -> int:
        """Experts per layer as a trace sees them (1 for a dense model)."""
        return 1 if self.dense else self.num_experts

    @property
    def trace_top_k(self) -> int:
        return 1 if self.dense else self.top_k

    # -- parameters and bytes -------------------------------------------------
    @property
    def expert_params(self) -> int:
        """Weights of one routed expert: gate, up and down projections (SwiGLU), + biases where present."""
        if self.dense:
            return 3 * self.hidden_size * self.intermediate_size
        p = 3 * self.hidden_size * self.moe_intermediate_size
        if self.expert_bias:
            p += 2 * self.moe_intermediate_size + self.hidden_size
        return p

    @property
    def expert_bytes(self) -> int:
        """Bytes of one routed expert (the dense MLP for a dense model) in its storage dtype."""
        dt = self.dtype if self.dense else self.expert_dtype
        return int(round(self.expert_params * DTYPE_BYTES[dt]))

    @property
    def attention_params(self) -> int:
        """Weights of one attention block (projections; norms and biases left out)."""
        h, H = self.hidden_size, self.num_attention_heads
        if self.attention == "mla":
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            q = (h * self.q_lora_rank + self.q_lora_rank * H * qk) if self.q_lora_rank else h * H * qk
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) \
                + self.kv_lora_rank * H * (self.qk_nope_head_dim + self.v_head_dim)
            return q + kv + H * self.v_head_dim * h
        d = self.head_dim
        return h * H * d + 2 * h * self.num_key_value_heads * d + H * d * h

    @property
    def router_params(self) -> int:
        return 0 if self.dense else self.hidden_size * self.num_experts

    @property
    def shared_params(self) -> int:
        return 3 * self.hidden_size * self.shared_intermediate

    @property
    def dense_mlp_params(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size

    def layer_dense_params(self, layer: int) -> int:
        """Non-routed weights of decoder layer ``layer``: attention, and router + shared experts or a dense MLP."""
        if self.dense:
            return self.attention_params  # the MLP is the layer's one "expert"
        if layer < self.first_dense_layers:
            return self.attention_params + self.dense_mlp_params
        return self.attention_params + self.router_params + self.shared_params

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def embedding_dtype(self) -> str:
        """Storage of the embedding, the LM head and the router: ``unquantized_dtype`` where given, else ``dtype``.

        DeepSeek-V3 keeps these in BF16 and only its linear layers in FP8
        (128x128 blocks with FP32 scales, which are left out here: 0.02 % of
        the bytes), as its ``inference/model.py`` builds them.
        """
        return self.unquantized_dtype or self.dtype

    def layer_dense_bytes(self, layer: int) -> float:
        """Bytes of decoder layer ``layer``'s non-routed weights (:meth:`layer_dense_params`), router at its width."""
        router = self.router_params if (not self.dense and layer >= self.first_dense_layers) else 0
        return ((self.layer_dense_params(layer) - router) * DTYPE_BYTES[self.dtype]
                + router * DTYPE_BYTES[self.embedding_dtype])

    @property
    def head_bytes(self) -> float:
        """Bytes of the LM head (vocabulary x hidden) at its storage width."""
        return self.embedding_params * DTYPE_BYTES[self.embedding_dtype]

    @property
    def dense_bytes(self) -> int:
        """Every non-expert weight in bytes: layers' dense parts, embeddings and the LM head."""
        layers = sum(self.layer_dense_bytes(i) for i in range(self.decoder_layers))
        heads = self.head_bytes * (1 if self.tie_word_embeddings else 2)
        return int(round(layers + heads))

    @property
    def weight_bytes(self) -> int:
        """Every weight in bytes at the checkpoint's dtypes: routed experts (the MLPs of a dense model) + dense."""
        layers = self.decoder_layers if self.dense else len(self.moe_layers) * self.num_experts
        return int(layers * self.expert_bytes + self.dense_bytes)

    @property
    def total_params(self) -> int:
        routed = len(self.moe_layers) * self.num_experts * self.expert_params if not self.dense else \
            self.decoder_layers * self.expert_params
        layers = sum(self.layer_dense_params(i) for i in range(self.decoder_layers))
        return routed + layers + self.embedding_params * (1 if self.tie_word_embeddings else 2)

    @property
    def active_params(self) -> int:
        """Parameters one token uses: its top-k experts per MoE layer and every dense weight, the input
        embedding and the LM head included (the Qwen, Mixtral, OLMoE and Ling cards' convention:
        Qwen3-30B-A3B "3.3B activated")."""
        routed = len(self.moe_layers) * self.trace_top_k * self.expert_params
        layers = sum(self.layer_dense_params(i) for i in range(self.decoder_layers))
        return routed + layers + self.embedding_params * (1 if self.tie_word_embeddings else 2)

    @property
    def active_params_as_card(self) -> int:
        """:attr:`active_params` counted as the model card counts (``card_active_counts``).

        ``no-input-embedding``: the input embedding is left out (a token reads one
        row of it), the LM head kept; the gpt-oss cards (3.61B, 5.13B) and the
        DeepSeek cards (V2-Lite 2.4B, V3 36.7B) agree with this count.
        """
        untied = not self.tie_word_embeddings
        if self.card_active_counts == "no-input-embedding" and untied:
            return self.active_params - self.embedding_params
        return self.active_params

    def layer_kv_bytes_per_token(self, layer: int) -> float:
        """KV-cache bytes one context token holds in ``layer`` (MLA: the compressed latent and the RoPE key)."""
        if self.attention == "mla":
            return (self.kv_lora_rank + self.qk_rope_head_dim) * KV_DTYPE_BYTES
        return 2 * self.num_key_value_heads * self.head_dim * KV_DTYPE_BYTES

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes each further context token adds: the layers without a sliding window.

        A sliding-window layer holds at most its window (:attr:`kv_window_bytes`),
        so past the window only the full-attention layers grow.
        """
        return int(round(sum(self.layer_kv_bytes_per_token(i) for i in range(self.decoder_layers)
                             if not self.is_sliding(i))))

    @property
    def kv_window_bytes(self) -> int:
        """KV-cache bytes the sliding-window layers hold at most (window x their bytes per token; 0 without)."""
        return int(round(sum(self.sliding_window * self.layer_kv_bytes_per_token(i)
                             for i in range(self.decoder_layers) if self.is_sliding(i))))

    def is_sliding(self, layer: int) -> bool:
        return self.sliding_window > 0 and self.sliding_layers == "alternate" and layer % 2 == 0

    # -- as a trace geometry -----------------------------------------------
    def geometry(self):
        """The :class:`~simmoe.trace.schema.ModelGeometry` of this model's traces."""
        from simmoe.trace.schema import ModelGeometry

        moe = self.moe_layers
        interleaved = len(moe) != self.decoder_layers
        return ModelGeometry(num_layers=len(moe), num_experts=self.trace_experts, top_k=self.trace_top_k,
                             expert_bytes=self.expert_bytes, name=self.name,
                             moe_layers=tuple(moe) if interleaved else (),
                             decoder_layers=self.decoder_layers if interleaved else 0)

    def derived(self) -> dict[str, Any]:
        """The numbers ``simmoe models`` shows, computed from the configuration fields."""
        return {
            "moe_layers": len(self.moe_layers) if not self.dense else 0,
            "expert_bytes": self.expert_bytes,
            "dense_bytes": self.dense_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_window_bytes": self.kv_window_bytes,
            "total_params_b": round(self.total_params / 1e9, 2),
            "active_params_b": round(self.active_params_as_card / 1e9, 2),
            "active_counts": self.card_active_counts,
            "active_params_all_b": round(self.active_params / 1e9, 2),
        }

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["unverified"] = list(self.unverified)
        return d


_MODEL_INTS = ("decoder_layers", "first_dense_layers", "num_experts", "top_k", "shared_intermediate",
               "hidden_size", "moe_intermediate_size", "intermediate_size", "num_attention_heads",
               "num_key_value_heads", "head_dim", "vocab_size")
_MODEL_STRS = ("name", "hf_id", "source", "architecture", "attention", "dtype", "expert_dtype")
ACTIVE_COUNTS = ("all", "no-input-embedding")
_MODEL_OPTIONAL_INTS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                        "sliding_window")
_MODEL_BOOLS = ("tie_word_embeddings",)
_MODEL_OPTIONAL_BOOLS = ("expert_bias",)


def _model_from_table(key: str, t: Any, origin: str) -> ModelSpec:
    where = f"{origin}: model {key!r}"
    if not isinstance(t, dict):
        raise CatalogueError(f"{where}: must be a table")
    known = {f.name for f in fields(ModelSpec)} - {"key"}
    unknown = sorted(set(t) - known)
    if unknown:
        raise CatalogueError(f"{where}: unknown field {unknown[0]!r}")
    v: dict[str, Any] = {"key": key}
    for name in _MODEL_INTS + _MODEL_OPTIONAL_INTS:
        if name not in t:
            if name in _MODEL_INTS:
                raise CatalogueError(f"{where}: missing field {name!r}")
            continue
        x = t[name]
        if isinstance(x, bool) or not isinstance(x, int):
            raise CatalogueError(f"{where}: field {name!r} must be an integer, got {x!r}")
        if x < 0:
            raise CatalogueError(f"{where}: field {name!r} must be >= 0, got {x}")
        v[name] = x
    for name in _MODEL_STRS:
        if name not in t:
            raise CatalogueError(f"{where}: missing field {name!r}")
        if not isinstance(t[name], str) or not t[name].strip():
            raise CatalogueError(f"{where}: field {name!r} must be a non-empty string")
        v[name] = t[name]
    for name in _MODEL_BOOLS + _MODEL_OPTIONAL_BOOLS:
        if name not in t:
            if name in _MODEL_BOOLS:
                raise CatalogueError(f"{where}: missing field {name!r}")
            continue
        if not isinstance(t[name], bool):
            raise CatalogueError(f"{where}: field {name!r} must be true or false")
        v[name] = t[name]
    if "sliding_layers" in t:
        if t["sliding_layers"] not in ("none", "alternate"):
            raise CatalogueError(f"{where}: field 'sliding_layers' must be 'none' or 'alternate'")
        v["sliding_layers"] = t["sliding_layers"]
    v.update(_card_fields(t, where))
    unv = t.get("unverified", [])
    if not isinstance(unv, list) or any(not isinstance(x, str) for x in unv):
        raise CatalogueError(f"{where}: field 'unverified' must be a list of field names")
    bad = [x for x in unv if x not in known]
    if bad:
        raise CatalogueError(f"{where}: 'unverified' names an unknown field {bad[0]!r}")
    v["unverified"] = tuple(unv)
    m = ModelSpec(**v)
    _check_model(m, where)
    return m


def _card_fields(t: dict, where: str) -> dict[str, Any]:
    """The optional fields about storage widths and the model card's activated parameters."""
    v: dict[str, Any] = {}
    if "unquantized_dtype" in t:
        if t["unquantized_dtype"] not in DTYPE_BYTES:
            raise CatalogueError(f"{where}: field 'unquantized_dtype' must be one of {', '.join(DTYPE_BYTES)}")
        v["unquantized_dtype"] = t["unquantized_dtype"]
    if "card_active_params_b" in t:
        x = t["card_active_params_b"]
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x <= 0:
            raise CatalogueError(f"{where}: field 'card_active_params_b' must be a number > 0, got {x!r}")
        v["card_active_params_b"] = float(x)
    if "card_active_counts" in t:
        if t["card_active_counts"] not in ACTIVE_COUNTS:
            raise CatalogueError(f"{where}: field 'card_active_counts' must be one of {', '.join(ACTIVE_COUNTS)}")
        v["card_active_counts"] = t["card_active_counts"]
    return v


def _check_model(m: ModelSpec, where: str) -> None:
    for name in ("dtype", "expert_dtype"):
        if getattr(m, name) not in DTYPE_BYTES:
            raise CatalogueError(f"{where}: field {name!r} must be one of {', '.join(DTYPE_BYTES)}")
    if m.attention not in ("gqa", "mla"):
        raise CatalogueError(f"{where}: field 'attention' must be 'gqa' or 'mla'")
    positive = ["decoder_layers", "hidden_size", "num_attention_heads", "vocab_size"]
    if m.attention == "gqa":
        positive += ["num_key_value_heads", "head_dim"]
    else:
        positive += ["kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"]
    if m.dense or m.first_dense_layers:
        positive.append("intermediate_size")
    if not m.dense:
        positive += ["top_k", "moe_intermediate_size"]
    for name in positive:
        if getattr(m, name) <= 0:
            raise CatalogueError(f"{where}: field {name!r} must be > 0")
    if m.dense and m.top_k != 0:
        raise CatalogueError(f"{where}: a dense model (num_experts = 0) has top_k = 0")
    if not m.dense and m.top_k > m.num_experts:
        raise CatalogueError(f"{where}: top_k {m.top_k} exceeds num_experts {m.num_experts}")
    if m.first_dense_layers >= m.decoder_layers:
        raise CatalogueError(f"{where}: first_dense_layers must be below decoder_layers")
    if m.attention == "gqa" and m.num_attention_heads % m.num_key_value_heads:
        raise CatalogueError(f"{where}: num_attention_heads must be a multiple of num_key_value_heads")
    if m.trace_experts > 65535:
        raise CatalogueError(f"{where}: more than 65,535 experts per layer")



_MODELS: dict[str, dict[str, ModelSpec]] = {}


def load_models(path: str | Path | None = None) -> dict[str, ModelSpec]:
    """Every model of a catalogue file (the shipped one by default), by key, in file order."""
    p = Path(path) if path is not None else MODELS_FILE
    cache_key = str(p.resolve())
    if path is None and cache_key in _MODELS:
        return _MODELS[cache_key]
    doc = read_toml(p, "model catalogue")
    out = {key: _model_from_table(key, t, str(p)) for key, t in doc.items()}
    if not out:
        raise CatalogueError(f"{p}: holds no model")
    if path is None:
        _MODELS[cache_key] = out
    return out


def model_names() -> list[str]:
    return list(load_models())



def load_model(name_or_path: str) -> ModelSpec:
    """A catalogue model by key (or by its ``name``/``hf_id``), or the only/first model of a ``.toml`` file.

    ``path.toml:key`` picks one model of a file.
    """
    text = str(name_or_path)
    file_part, _, key = text.partition(".toml:")
    if not (text.endswith(".toml") or key):
        check_name(text, "model", CatalogueError)
    if text.endswith(".toml") or key:
        path = file_part + ".toml" if key else text
        models = load_models(path)
        if key:
            if key not in models:
                raise CatalogueError(f"{path}: no model {key!r}; it holds: {', '.join(models)}")
            return models[key]
        return next(iter(models.values()))
    models = load_models()
    if text in models:
        return models[text]
    for m in models.values():
        if text.lower() in (m.name.lower(), m.hf_id.lower(), m.hf_id.split("/")[-1].lower()):
            return m
    raise CatalogueError(f"unknown model {text!r}; known: {', '.join(models)} (or a .toml geometry file)")


def model_for_geometry(geometry) -> ModelSpec | None:
    """The catalogue model a trace's geometry names (by name, or by layers × experts × top-k), or None."""
    models = load_models()
    for m in models.values():
        if geometry.name and geometry.name.lower() in (m.name.lower(), m.hf_id.split("/")[-1].lower()):
            return m
    for m in models.values():
        if (len(m.moe_layers), m.trace_experts, m.trace_top_k) == (geometry.num_layers, geometry.num_experts,
                                                                   geometry.top_k):
            return m
    return None


# --------------------------------------------------------------------------


def with_model(params, fitted_to: tuple[str, ...], spec: ModelSpec, preset: str):
    """Synth parameters with ``spec``'s geometry; the preset's routing and drafter parameters carried over.

    Returns ``(params, fitted_to)``; the added ``fitted_to`` line puts what was
    carried over into the trace's provenance.
    """
    note = (f"geometry of {spec.name} from the model catalogue (simmoe models {spec.key}); routing and drafter "
            f"parameters carried over unchanged from the {preset} preset, which was calibrated on "
            "Qwen3-30B-A3B-Instruct-2507")
    return params.with_(geometry=spec.geometry()), tuple(fitted_to) + (note,)
