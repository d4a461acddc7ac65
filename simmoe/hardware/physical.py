"""A physical cost model of one forward: model geometry × GPU description (× host link).

Per decoder layer ℓ of a forward over ``n`` tokens (all requests of a batch
together) whose MoE layer routes to a union of ``u_ℓ`` experts, on ``tp``
GPUs with tensor parallelism (docs/models-and-gpus.md):

    bytes_ℓ = W_ℓ / tp + u_ℓ · E / tp + KV_ℓ / tp_kv        (weights read from HBM, KV cache read)
    flops_ℓ = 2 n (P_ℓ + k · P_E) / tp + 4 A H d_qk / tp    (every token's matmuls; attention scores)
    t_ℓ     = max(bytes_ℓ / (η · BW), flops_ℓ / (η_c · PEAK))  + [tp > 1] 2 · (λ + 2 (tp−1)/tp · 2 n h / B_link)

W_ℓ is the layer's non-routed weights (attention, router, shared experts, or a
dense MLP), E one routed expert's bytes, P_ℓ and P_E their parameter counts,
k the routed experts per token, KV_ℓ the KV cache the layer reads (context
tokens × bytes per token; a sliding-window layer at most its window), A the
(query, context) pairs of attention, λ and B_link the interconnect's latency
and bandwidth (two all-reduces per layer).  The forward adds the LM head
(vocabulary × hidden, the same roofline) and a fixed ``forward_ms``.  A dense
model is one "expert" per layer (its MLP), read once whatever the tokens.

Drafting (EAGLE-3, one decoder layer of the target's width, a fused
3h→h input, and a 32,000-token draft vocabulary, as SpecForge's heads are
built) costs per drafted level ``draft_step_ms`` plus the same roofline over
``width`` tokens per request.

Few numbers are fitted, and only to what ``shared/design/CALIBRATION.md``
allows (:mod:`simmoe.fitting.physical_fit`, ``physical_fit.toml``): η, the
achieved fraction of peak HBM bandwidth, and ``forward_ms`` to EVICT Table 4's
C(k) on QA; ``step_ms``, the serving loop's overhead per decode step, to each
model's vanilla tokens/s on QA; ``spec_iteration_ms``, the time a served
speculative iteration spends beyond drafting, the verification forward and
``step_ms`` (scheduling, host syncs, KV slot and tree-mask preparation), one
per setting, to Table 1's EAGLE-3 tokens/s on QA for Qwen3-30B-A3B at
temperature 0.  Two terms are assumptions, since no figure that may be fitted
identifies them: ``draft_step_ms`` (0.3 ms per drafted level) and η_c, the
achieved fraction of tensor-core peak (0.5; it matters only where a forward
is compute-bound, i.e. large batches of trees).  C(k) = drafting + forward
over k + 1 tokens is what EVICT's Table 4 profiles; a served vanilla step
adds ``step_ms`` (Table 1's vanilla tokens/s include it, Table 4's C(1) =
6.83 ms, below vanilla decoding's 6.91 ms per token, does not) and a served
speculative iteration adds ``step_ms`` and ``spec_iteration_ms`` (an EAGLE-3
iteration, 1000 · Mat / tokens/s, is 1.66–2.03× Table 4's C(32)).

The same model gives the offload regime's compute side: a profile
``MODEL@GPU+LINK`` keeps experts in host memory, copies them over LINK in the
event model (:mod:`simmoe.replay.timing`), and takes its non-expert forward
time, per-token time, per-expert HBM read and drafting time from here.

Profile names: ``MODEL@GPU[:tpN][+LINK][~SETTING]`` (e.g.
``qwen3-30b-a3b@a100-sxm4-80gb``, ``ling-flash-2.0@a100-sxm4-80gb:tp4``,
``qwen3-30b-a3b@a100-pcie-40gb+pcie4-x16``, ``qwen3-30b-a3b@h200~vllm-table6``);
:func:`profile_fields` gives the fields of the :class:`HardwareProfile`
that :func:`simmoe.hardware.profile.load_profile` builds from one, whose
``physical`` attribute is the :class:`PhysicalModel` the timer uses.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from simmoe.errors import ProfileError
from simmoe.hardware.catalogue import DTYPE_BYTES, GPU, Link, ModelSpec, load_gpu, load_link, load_model

FIT_FILE = Path(__file__).parent / "data" / "physical_fit.toml"
FIT_ENV = "SIMMOE_PHYSICAL_FIT"   # another fit file (e.g. a what-if with --served-dtype); unset: FIT_FILE
SERVED_DTYPES = ("fp8",)    # weight widths a setting may serve at instead of the checkpoint's
DEFAULT_SETTING = "sglang-a100"
DRAFT_VOCAB = 32_000        # SpecForge EAGLE-3 heads: a 32k draft vocabulary
DRAFT_WIDTH = 8             # tokens per request per drafted level (EVICT's topk = 8)
DRAFT_STEP_MS = 0.3         # fixed time per drafted level: an assumption (EVICT publishes no drafting time)
COMPUTE_EFFICIENCY = 0.5    # achieved fraction of tensor-core peak: an assumption (no allowed figure identifies it)


@dataclass(frozen=True)
class Overheads:
    """The fitted (and assumed) terms of the cost model; ``source`` says which is which."""

    efficiency: float = 1.0        # η: achieved fraction of peak HBM bandwidth (fitted)
    compute_efficiency: float = COMPUTE_EFFICIENCY  # achieved fraction of tensor-core peak (assumed)
    forward_ms: float = 0.0        # fixed time of one target forward (fitted)
    step_ms: float = 0.0           # serving overhead per decode step, vanilla and speculative (fitted per model)
    draft_step_ms: float = DRAFT_STEP_MS   # fixed time per drafted level (assumed)
    # serving time a speculative iteration spends beyond drafting, the verification forward and step_ms
    # (one per setting; fitted to EVICT Table 1's EAGLE-3 QA tokens/s: docs/models-and-gpus.md)
    spec_iteration_ms: float = 0.0
    # its growth with the tokens the iteration verifies (root + drafted, summed over the batch): the
    # served iteration is spec_iteration_ms + spec_token_ms · tokens, fitted to Table 1's EAGLE-3 and
    # EVICT rows on QA (two verified sizes; docs/models-and-gpus.md)
    spec_token_ms: float = 0.0
    source: str = "unfitted defaults"


class PhysicalModel:
    """Times of forwards and drafting for one model on ``tp`` GPUs of one kind (module docstring)."""

    def __init__(self, model: ModelSpec, gpu: GPU, *, tp: int = 1, overheads: Overheads | None = None,
                 draft_width: int = DRAFT_WIDTH):
        if isinstance(tp, bool) or int(tp) != tp or tp < 1:
            raise ProfileError(f"tensor parallelism must be a positive integer, got {tp!r}")
        check_tensor_parallel(model, int(tp))
        self.model, self.gpu, self.tp = model, gpu, int(tp)
        self.o = overheads or Overheads()
        for what, v in (("efficiency", self.o.efficiency), ("compute_efficiency", self.o.compute_efficiency)):
            if not 0.0 < v <= 1.0:
                raise ProfileError(f"{what} must lie in (0, 1], got {v}")
        self.draft_width = int(draft_width)
        m = model
        Ld = m.decoder_layers
        self.moe_index = np.asarray(m.moe_layers, dtype=np.int64)          # decoder layer of each MoE layer
        self.L_moe = len(self.moe_index)
        self.bw = gpu.hbm_gbps * 1e9 * self.o.efficiency                  # B/s achieved
        self.peak = gpu.peak_tflops(m.dtype) * 1e12 * self.o.compute_efficiency  # FLOP/s achieved
        dense_p = np.array([m.layer_dense_params(i) for i in range(Ld)], dtype=np.float64)
        self.w_bytes = np.array([m.layer_dense_bytes(i) for i in range(Ld)]) / self.tp   # per GPU
        routed_flops = np.zeros(Ld)
        routed_flops[self.moe_index] = 2.0 * m.trace_top_k * m.expert_params
        self.tok_flops = (2.0 * dense_p + routed_flops) / self.tp          # per token per GPU
        self.expert_bytes = float(m.expert_bytes) / self.tp
        tp_kv = 1 if m.attention == "mla" else min(self.tp, m.num_key_value_heads)
        self.kv_bytes = np.array([m.layer_kv_bytes_per_token(i) for i in range(Ld)]) / tp_kv
        self.sliding = np.array([m.is_sliding(i) for i in range(Ld)], dtype=bool)
        d_qk = (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim) / 2 if m.attention == "mla" \
            else m.head_dim
        self.pair_flops = 4.0 * m.num_attention_heads * d_qk / self.tp     # per (query, context) pair per layer
        self.head_bytes = m.head_bytes / self.tp
        self.head_flops = 2.0 * m.vocab_size * m.hidden_size / self.tp
        # all-reduce: two per layer, ring over tp GPUs
        if self.tp > 1:
            self.ar_fixed = 2 * gpu.allreduce_latency_us * 1e-3
            self.ar_per_token = 2 * 2 * (self.tp - 1) / self.tp * 2 * m.hidden_size / (gpu.interconnect_gbps * 1e9)
        else:
            self.ar_fixed = self.ar_per_token = 0.0
        # the EAGLE-3 head: one decoder layer of the target's width
        h = m.hidden_size
        attn = 4 * h * h if m.attention == "mla" else m.attention_params
        self.draft_params = attn + 3 * h * max(m.intermediate_size, 1) + 3 * h * h + DRAFT_VOCAB * h

    # -- one forward ----------------------------------------------------------
    def layer_ms(self, n_tokens, union, kv_tokens=0.0, pairs=0.0, requests=1) -> np.ndarray:
        """Per-decoder-layer time in ms, ``[..., decoder_layers]``; arguments broadcast over leading axes.

        ``union``: experts read per MoE layer ``[..., L_moe]`` (or a scalar for every layer);
        ``kv_tokens``: context tokens whose KV each layer reads (summed over the ``requests``
        of the forward; a sliding-window layer reads at most its window per request);
        ``pairs``: (query token, context token) pairs of attention.
        """
        n = np.asarray(n_tokens, dtype=np.float64)[..., None]
        u = np.asarray(union, dtype=np.float64)
        routed = np.zeros(np.broadcast_shapes(u.shape[:-1] if u.ndim else (), n.shape[:-1]) + (len(self.w_bytes),))
        if self.L_moe:
            routed[..., self.moe_index] = (u if u.ndim else np.full(self.L_moe, float(u))) * self.expert_bytes
        kv = np.asarray(kv_tokens, dtype=np.float64)[..., None]
        window = self.model.sliding_window * np.asarray(requests, dtype=np.float64)[..., None]
        kvw = np.minimum(kv, window) if self.model.sliding_window else kv
        kv_read = np.where(self.sliding, kvw, kv) * self.kv_bytes
        mem = self.w_bytes + routed + kv_read
        flops = n * self.tok_flops + np.asarray(pairs, dtype=np.float64)[..., None] * self.pair_flops
        t = np.maximum(mem / self.bw, flops / self.peak) * 1e3
        if self.tp > 1:
            t = t + self.ar_fixed + self.ar_per_token * n * 1e3
        return t

    def forward_ms(self, n_tokens, union, kv_tokens=0.0, pairs=0.0, requests=1):
        """Time of one target forward in ms (broadcasts like :meth:`layer_ms`)."""
        n = np.asarray(n_tokens, dtype=np.float64)
        head = np.maximum(self.head_bytes / self.bw, n * self.head_flops / self.peak) * 1e3
        t = self.layer_ms(n_tokens, union, kv_tokens, pairs, requests).sum(axis=-1) + head \
            + self.o.forward_ms
        return float(t) if np.ndim(t) == 0 else t

    def draft_ms(self, levels: int, requests: int = 1, *, served: bool = True, verified: float = 0.0) -> float:
        """Drafting ``levels`` levels for ``requests`` requests at once (0 when nothing is drafted).

        ``served``: add the setting's served iteration, the serving time of a
        speculative iteration beyond drafting and the verification forward,
        ``spec_iteration_ms + spec_token_ms · verified`` for an iteration that
        verifies ``verified`` tokens (root and drafted, every request of the
        batch); the replay charges it here, once per iteration that drafts
        (vanilla decoding drafts nothing and never pays it).  EVICT's profiled
        C(k) leaves it out.
        """
        levels = int(levels)
        if levels <= 0:
            return 0.0
        n = self.draft_width * max(int(requests), 1)
        b = DTYPE_BYTES["bf16"]
        mem = self.draft_params * b / self.tp
        flops = 2.0 * n * self.draft_params / self.tp
        t = max(mem / self.bw, flops / self.peak) * 1e3 + self.o.draft_step_ms
        if self.tp > 1:
            t += self.ar_fixed + self.ar_per_token * n * 1e3
        return levels * t + (self.served_iteration_ms(verified) if served else 0.0)

    def served_iteration_ms(self, verified: float) -> float:
        """The served iteration's time beyond drafting and the forward, verifying ``verified`` tokens."""
        return self.o.spec_iteration_ms + self.o.spec_token_ms * float(verified)

    # -- what selectors are given -------------------------------------------
    def expert_ms(self, n_tokens: float = 1.0, context: float = 0.0) -> float:
        """Extra forward time of one more expert in every MoE layer, per (layer, expert): SpecFit's β."""
        if not self.L_moe:
            return 0.0
        base = self.forward_ms(n_tokens, 0.0, context, n_tokens * context)
        more = self.forward_ms(n_tokens, 1.0, context, n_tokens * context)
        return max(more - base, 0.0) / self.L_moe

    def cost_model(self, kmax: int, *, levels: int, context: float = 0.0) -> tuple[list[float], float]:
        """SpecFit's T̂(S) = b_|S| + βF(S) (Eq. 4) derived at batch 1, memory-bound: ``(b_0..b_kmax, β)``.

        b_j = drafting + the served iteration over 1 + j tokens + ``step_ms`` + the
        forward over 1 + j tokens without routed experts (a cost model fitted on measured cycles, as
        SpecFit's App. B is, sees the whole served iteration); β = :meth:`expert_ms`
        (the time one more (layer, expert) pair adds).  Exact while every layer is
        memory-bound, which holds at batch 1.
        """
        j = np.arange(kmax + 1, dtype=np.float64)
        fwd = self.forward_ms(1 + j, 0.0, context, (1 + j) * context)
        b = fwd + self.draft_ms(levels, served=False) + self.o.step_ms + self.served_iteration_ms(0.0) \
            + self.o.spec_token_ms * (1 + j)
        return [float(x) for x in b], self.expert_ms(1.0, context)

    def describe(self) -> str:
        m, g = self.model, self.gpu
        return (f"{m.name} on {self.tp} x {g.name}" if self.tp > 1 else f"{m.name} on {g.name}")

    def served_term(self) -> str:
        """The speculative iteration's serving term in words ("" when the setting has none)."""
        t, b = self.o.spec_iteration_ms, self.o.spec_token_ms
        if b > 0:
            return f"+{t:.2f} ms + {b:.3f} ms per verified token serving time per speculative iteration"
        return f"+{t:.2f} ms serving time per speculative iteration" if t > 0 else ""


# --------------------------------------------------------------------------
# fitted settings
# --------------------------------------------------------------------------
def fit_file() -> Path:
    """The fitted settings in use: ``$SIMMOE_PHYSICAL_FIT`` when set (a what-if fit), else the shipped file."""
    env = os.environ.get(FIT_ENV)
    return Path(env) if env else FIT_FILE


def load_settings(path: str | Path | None = None) -> dict[str, dict]:
    """The fitted settings of ``physical_fit.toml`` (written by ``python -m simmoe.fitting.physical_fit``)."""
    p = Path(path) if path is not None else fit_file()
    if not p.is_file():
        if path is None and os.environ.get(FIT_ENV):
            raise ProfileError(f"{FIT_ENV}={p}: no such file (write one with python -m simmoe.fitting.physical_fit)")
        return {}
    with open(p, "rb") as fh:
        return tomllib.load(fh).get("settings", {})


def overheads_for(setting: str, model_key: str) -> tuple[Overheads, dict]:
    """The overheads of ``setting`` for ``model_key`` (its fitted ``step_ms``, else the setting's default)."""
    settings = load_settings()
    if setting not in settings:
        if not settings:
            return Overheads(source="unfitted defaults (no physical_fit.toml)"), {}
        raise ProfileError(f"unknown cost-model setting {setting!r}; known: {', '.join(settings)}")
    s = settings[setting]
    steps = s.get("step_ms", {})
    step = steps.get(model_key, s.get("default_step_ms", 0.0))
    how = "fitted to its vanilla tokens/s on QA" if model_key in steps else \
        "carried over (the setting's default: no vanilla figure of this model was fitted)"
    src = (f"setting {setting}: efficiency and forward_ms {s.get('fitted_to', 'fitted')}; step_ms {how}; "
           f"draft_step_ms {s.get('draft_step_ms', DRAFT_STEP_MS)} ms and compute efficiency "
           f"{s.get('compute_efficiency', COMPUTE_EFFICIENCY)} assumed")
    spec = float(s.get("spec_iteration_ms", 0.0))
    per_token = float(s.get("spec_token_ms", 0.0))
    if spec > 0 or per_token > 0:
        fitted_on = s.get("spec_iteration_model", model_key)
        what = f"{spec:.2f} ms" + (f" + {per_token:.3f} ms per verified token" if per_token else "")
        src += (f"; served iteration {what} per speculative iteration "
                f"{s.get('spec_iteration_fitted_to', 'fitted')}"
                + (f", carried to {model_key} as a prediction" if fitted_on != model_key else ""))
    if s.get("served_dtype"):
        src += f"; weights read at {s['served_dtype']} (a what-if: the checkpoint's dtype is in models.toml)"
    return Overheads(efficiency=float(s["efficiency"]), forward_ms=float(s["forward_ms"]), step_ms=float(step),
                     draft_step_ms=float(s.get("draft_step_ms", DRAFT_STEP_MS)), spec_iteration_ms=spec,
                     spec_token_ms=per_token,
                     compute_efficiency=float(s.get("compute_efficiency", COMPUTE_EFFICIENCY)), source=src), s


def served_model(model: ModelSpec, served_dtype: str | None) -> ModelSpec:
    """``model`` with its weights read at ``served_dtype`` (None: the checkpoint's own dtypes).

    Serving a BF16 checkpoint with online FP8 quantisation (SGLang and vLLM
    ``--quantization fp8``) halves the bytes every linear layer reads; routed
    experts already narrower (MXFP4) stay as they are.  The LM head, which
    such serving keeps in BF16, is counted at the same width: an
    approximation that shortens Qwen3-30B-A3B's one-token forward on an A100
    by 0.18 ms (4 %).
    """
    if served_dtype is None:
        return model
    if served_dtype not in SERVED_DTYPES:
        raise ProfileError(f"unknown served dtype {served_dtype!r}; known: {', '.join(SERVED_DTYPES)}")
    w = DTYPE_BYTES[served_dtype]
    expert = model.expert_dtype if DTYPE_BYTES[model.expert_dtype] <= w else served_dtype
    dense = model.dtype if DTYPE_BYTES[model.dtype] <= w else served_dtype
    return replace(model, dtype=dense, expert_dtype=expert)


def tp_problem(model: ModelSpec, tp: int) -> str | None:
    """Why tensor parallelism ``tp`` cannot split ``model``'s attention, or None.

    Attention is split by heads: tp must divide the query heads, and (GQA) divide
    the KV heads or be a multiple of them (the KV heads are then replicated, as
    vLLM and SGLang do).  MLA's latent KV is not split by heads.
    """
    H, kv = model.num_attention_heads, model.num_key_value_heads
    if tp > 1 and H % tp:
        return f"tensor parallelism {tp} does not divide {model.name}'s {H} attention heads"
    if tp > 1 and model.attention == "gqa" and kv % tp and tp % kv:
        return f"tensor parallelism {tp} neither divides nor is a multiple of {model.name}'s {kv} KV heads"
    return None


def valid_tp(model: ModelSpec, upto: int = 64) -> list[int]:
    """The tensor-parallel degrees up to ``upto`` that split ``model``'s attention (:func:`tp_problem`)."""
    return [tp for tp in range(1, upto + 1) if tp_problem(model, tp) is None]


def check_tensor_parallel(model: ModelSpec, tp: int) -> None:
    """One-line :class:`ProfileError` when ``tp`` cannot split the model's attention heads (:func:`tp_problem`)."""
    why = tp_problem(model, tp)
    if why:
        raise ProfileError(f"{why}; use :tpN with N one of {', '.join(map(str, valid_tp(model)))}")


def check_fits(spec: dict, model: ModelSpec, gpu: GPU, name: str) -> None:
    """A resident profile keeps every weight in GPU memory: they must fit in tp GPUs' memory.

    Weights alone, without the KV cache or activations, against the datasheet's
    memory read as GiB, so a refusal is certain.  The one-line error names the
    fewest GPUs that would hold them and the offload profile.
    """
    tp = spec["tp"]
    need, have = float(model.weight_bytes), gpu.memory_bytes * tp
    if need <= have:
        return
    setting = f"~{spec['setting']}" if "~" in name else ""
    fits = [t for t in valid_tp(model) if need <= gpu.memory_bytes * t]
    more = f"use {spec['model']}@{spec['gpu']}:tp{fits[0]}{setting} (the fewest GPUs that hold them) or " \
        if fits else ""
    offload = f"{spec['model']}@{spec['gpu']}{f':tp{tp}' if tp > 1 else ''}+{gpu.host_link}{setting}"
    raise ProfileError(
        f"{name}: {model.name}'s weights take {need / 2 ** 30:.1f} GiB but {tp} x {gpu.name} hold "
        f"{have / 2 ** 30:.0f} GiB, and a resident profile keeps every weight in GPU memory; "
        f"{more}offload the experts over a host link ({offload})")


_SPEC = re.compile(r"^(?P<model>[^@]+)@(?P<gpu>[A-Za-z0-9_.-]+?)(?::tp(?P<tp>\d+))?(?:\+(?P<link>[A-Za-z0-9_.-]+))?"
                   r"(?:~(?P<setting>[A-Za-z0-9_.-]+))?$")


def is_physical_name(name: str) -> bool:
    return "@" in str(name) and not str(name).endswith(".toml")


def parse_spec(name: str) -> dict:
    m = _SPEC.fullmatch(str(name))   # not match: `$` also matches before a trailing newline
    if not m:
        raise ProfileError(f"bad physical profile name {name!r}: write MODEL@GPU[:tpN][+LINK][~SETTING] "
                           "(simmoe models, simmoe models --gpus)")
    d: dict = m.groupdict()
    d["tp"] = int(d["tp"]) if d["tp"] else 1
    if d["tp"] < 1:
        raise ProfileError(f"{name}: tensor parallelism must be at least 1")
    d["setting"] = d["setting"] or DEFAULT_SETTING
    return d


def profile_fields(name: str, *, overheads: Overheads | None = None, served_dtype: str | None = None) -> dict:
    """The :class:`~simmoe.hardware.profile.HardwareProfile` fields of ``MODEL@GPU[:tpN][+LINK][~SETTING]``.

    Resident (no LINK): every expert in HBM, forwards timed by the physical
    model.  Offload (``+LINK``): the event model with copies over LINK (two in
    flight) and the physical model's compute side, linearised at batch 1; the
    speculative serving term is the event model's fixed drafting time, paid by
    every iteration that drafts.  ``physical`` holds the :class:`PhysicalModel`.
    :func:`simmoe.hardware.profile.load_profile` builds and validates the profile.
    ``overheads`` and ``served_dtype`` replace the fitted setting's (what a fit uses).
    """
    spec = parse_spec(name)
    model, gpu = load_model(spec["model"]), load_gpu(spec["gpu"])
    link: Link | None = load_link(spec["link"]) if spec["link"] else None
    if overheads is None:   # the fitted setting (a fit passes the overheads it is fitting instead)
        overheads, setting = overheads_for(spec["setting"], model.key)
        served_dtype = setting.get("served_dtype")
    model = served_model(model, served_dtype)
    try:
        phys = PhysicalModel(model, gpu, tp=spec["tp"], overheads=overheads)
    except ProfileError as exc:
        raise ProfileError(f"{name}: {exc}") from None
    if link is None:
        check_fits(spec, model, gpu, name)
    b, beta = phys.cost_model(64, levels=4)
    one = phys.forward_ms(1, 0.0)
    two = phys.forward_ms(2, 0.0)
    term = phys.served_term()
    common = dict(
        name=name, device=gpu.name + (f" x {spec['tp']} (tensor parallel)" if spec["tp"] > 1 else ""),
        model=model.name, expert_bytes=model.expert_bytes, num_layers=phys.L_moe,
        description=f"physical cost model: {phys.describe()}"
                    + (f", experts in host memory over {link.name}" if link else ", every expert resident in HBM")
                    + (f"; {term}" if term else ""),
        source=(f"physical cost model (simmoe.hardware.physical): {model.name} geometry (models.toml: "
                f"{model.key}) x {gpu.name} datasheet (gpus.toml: {gpu.key})"
                + (f" x {link.name} ({link.gbps} GB/s)" if link else "") + f"; {overheads.source}"),
        forward_ms=one, token_ms=max(two - one, 0.0), commit_ms=overheads.step_ms,
        draft_level_ms=phys.draft_ms(1, served=False), draft_fixed_ms=overheads.spec_iteration_ms,
        selector_ms=0.0, prefill_token_ms=max(two - one, 0.0),
        cost_b_cache=tuple(b), cost_beta_cache=beta, cost_b_no_cache=tuple(b), cost_beta_no_cache=beta,
        notes=(f"tensor parallel {spec['tp']}; " if spec["tp"] > 1 else "") + f"setting {spec['setting']}",
        physical=phys,
    )
    if link is None:
        return dict(resident=True, copies_in_flight=1, copy_ms=0.0, expert_ms=phys.expert_ms(), **common)
    copy = model.expert_bytes / spec["tp"] / (link.gbps * 1e9) * 1e3    # ms per expert over the link
    e = phys.expert_ms()
    return dict(resident=False, copies_in_flight=2, copy_ms=2 * copy, link_gbps=link.gbps, expert_ms=e,
                **{**common, "cost_beta_cache": e + copy, "cost_beta_no_cache": e + copy,
                   "expert_bytes": int(model.expert_bytes / spec["tp"])})


def counterpart_name(profile) -> str | None:
    """The physical profile ``MODEL@GPU[+LINK]`` of a TOML profile's model, GPU and regime (None if not catalogued).

    The model and GPU are the catalogue's entries whose names are the profile's
    ``model`` and ``device``; an offload profile gets the GPU's host link (or
    the catalogued link of the profile's ``link_gbps``).  Used to say which
    physical profile can supply what a fitted profile lacks.
    """
    from simmoe.hardware.catalogue import CatalogueError, load_gpus, load_links

    if getattr(profile, "physical", None) is not None:
        return profile.name
    try:
        model = load_model(profile.model) if profile.model else None
        gpus, links = load_gpus(), load_links()
    except CatalogueError:
        return None
    gpu = next((g for g in gpus.values() if profile.device and g.name.lower() == profile.device.lower()), None)
    if model is None or gpu is None:
        return None
    if profile.resident:
        return f"{model.key}@{gpu.key}"
    link = next((k for k, ln in links.items() if profile.link_gbps and ln.gbps == profile.link_gbps),
                gpu.host_link if gpu.host_link in links else None)
    return f"{model.key}@{gpu.key}+{link}" if link else None


def evict_cost_from_unions(phys: PhysicalModel, unions: np.ndarray, n_tokens: np.ndarray, contexts: np.ndarray,
                           levels: int, requests: int = 1) -> np.ndarray:
    """C(k) = drafting + the mean forward over the profiled states (EVICT §3.2.3), k = 1..K.

    ``unions``: ``[S, K + 1, L_moe]`` per-layer unions of S sampled steps when each
    request verifies its top-k prefix (row k); ``n_tokens``: ``[K + 1]`` tokens of
    such a forward; ``contexts``: ``[S]`` context tokens read per forward.
    """
    S = unions.shape[0]
    ctx = np.asarray(contexts, dtype=np.float64)[:, None]
    n = np.asarray(n_tokens, dtype=np.float64)[None, :]
    t = phys.forward_ms(np.broadcast_to(n, (S, n.shape[1])), unions, np.broadcast_to(ctx, (S, n.shape[1])),
                        n * ctx / max(requests, 1), requests)
    return phys.draft_ms(levels, requests, served=False) + np.asarray(t).mean(axis=0)[1:]


def profile_evict_cost(trace, phys: PhysicalModel, *, samples: int = 256, batch: int = 1,
                       kmax: int | None = None, seed: int = 0) -> tuple[float, ...]:
    """EVICT's profiled C(k) for this trace and batch size, k = 1..K (EVICT §3.2.3).

    EVICT profiles the whole speculative step for every verification length k
    on the running system before decoding; here ``samples`` steps of ``batch``
    requests (positions drawn with a fixed seed, distinct requests) each
    verify their k most probable nodes, and C(k) is drafting plus the mean
    physical forward.  Neither the serving loop's ``step_ms`` (EVICT's C(1) is
    below its vanilla step) nor the speculative iteration's ``spec_iteration_ms``
    (Table 4 behaves like the verification pass alone) is part of it: EVICT's
    selector sees C(k) as EVICT profiled it.  O(samples · batch · K · L · N / 64).
    """
    from simmoe.hardware.union_profile import prefix_unions

    K = int(kmax if kmax is not None else max(int(trace.pool_shape.max_nodes), 1))
    unions, contexts = prefix_unions(trace, K, samples=samples, batch=batch, seed=seed)
    n_tokens = batch * (1 + np.arange(K + 1))
    levels = int(trace.pool_shape.depth)
    c = evict_cost_from_unions(phys, unions, n_tokens, contexts, levels, batch)
    return tuple(float(x) for x in c)
