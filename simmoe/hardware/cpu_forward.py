"""The physical cost model of a forward whose host-resident experts are computed on the CPU.

The regime of llama.cpp ``--n-cpu-moe N`` / ``-cmoe``, KTransformers and
Fiddler: attention, the shared (or dense) expert and the experts held on the
GPU run there (:class:`simmoe.hardware.physical.PhysicalModel`'s roofline);
the experts left in host RAM are computed by the CPU.  Per MoE layer ℓ of a
forward over ``n`` tokens (docs/cpu-experts.md writes every term out with its
source):

    G_ℓ = max(bytes_gpu / (η_gpu · BW_gpu), flops_gpu / (η_c · PEAK_gpu))    the GPU part
    c_e = max(B_ℓ / (η_mem · BW_socket), 2 · n_e · P_E / (η_cpu · PEAK_socket))   one CPU expert
    C_ℓ = max over sockets of Σ_{e on that socket} c_e                        the CPU's experts
    S_ℓ = [the layer has a CPU expert] · (sync + 2 · n · h · a / B_link) + C_ℓ
    X_ℓ = Σ over experts copied this forward of B_ℓ / B_link                   (Fiddler's copies)
    t_ℓ = G_ℓ + max(S_ℓ, X_ℓ)              the engine runs the two parts in turn (llama.cpp)
    t_ℓ = A_ℓ + max(F_ℓ, S_ℓ, X_ℓ)         the GPU's FFN part F_ℓ overlaps the CPU (KTransformers)

with B_ℓ one expert's bytes in the chosen weight format (:mod:`simmoe.hardware.formats`),
P_E its parameters, n_e the tokens routed to expert e, h the hidden size, a the
bytes of one activation value crossing the link, A_ℓ and F_ℓ the roofline of
the attention part and of the rest of the GPU part.  Two sockets: each holds
its half of the experts (by id) in its own DRAM and computes them with its own
cores.  The forward adds the LM head and the fitted ``forward_ms`` as
:class:`PhysicalModel` does.

η_mem, the CPU's achieved fraction of its peak DRAM bandwidth, is the one
fitted term (``data/cpu_fit.toml``, written by
:mod:`simmoe.fitting.cpu_fit` from the one admitted figure: llmfit PR #755,
36.7 tokens/s); every other term is a datasheet value or an assumption that
:class:`CpuTerms` names as such.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simmoe.errors import ProfileError
from simmoe.hardware.cpus import CPU
from simmoe.hardware.formats import WeightFormat, expert_bytes_by_layer
from simmoe.hardware.gpus import Link
from simmoe.hardware.physical import PhysicalModel

CPU_FIT_FILE = Path(__file__).parent / "data" / "cpu_fit.toml"

# the engines: whether the GPU's FFN part overlaps the CPU's experts, and the bytes of one activation value
# that crosses the link (llama.cpp copies its F32 activations between backends; KTransformers BF16)
ENGINES = {"llamacpp": (False, 4.0), "ktransformers": (True, 2.0)}
DEFAULT_ENGINE = "llamacpp"
# the ISAs a format's expert kernels use, best first: integer dot products for GGUF quantizations
# (llama.cpp quantizes the activations to 8 bits), BF16 / FP32 for the rest
INT_ISAS = ("amx_int8", "avx512_vnni", "avx512", "avx2")
FLOAT_ISAS = ("amx_bf16", "avx512_bf16", "avx512", "avx2")


@dataclass(frozen=True)
class CpuTerms:
    """The CPU part's efficiencies and fixed costs; ``source`` says which is fitted and which assumed."""

    mem_efficiency: float = 1.0        # η_mem: achieved fraction of peak DRAM bandwidth (fitted)
    compute_efficiency: float = 0.5    # η_cpu: achieved fraction of the ISA peak (assumed)
    sync_ms: float = 0.03              # GPU↔CPU synchronisation per CPU layer (assumed)
    gpu_efficiency: float = 1.0        # η_gpu of the GPU part (carried over from physical_fit.toml)
    source: str = "unfitted defaults"


def load_cpu_terms(path: str | Path | None = None) -> CpuTerms:
    """The terms of ``cpu_fit.toml`` (written by ``python -m simmoe.fitting.cpu_fit``); defaults without it."""
    p = Path(path) if path is not None else CPU_FIT_FILE
    if not p.is_file():
        return CpuTerms(source="unfitted defaults (no cpu_fit.toml)")
    try:
        with open(p, "rb") as fh:
            t = tomllib.load(fh).get("cpu", {})
        terms = CpuTerms(mem_efficiency=float(t["mem_efficiency"]),
                         compute_efficiency=float(t["compute_efficiency"]), sync_ms=float(t["sync_ms"]),
                         gpu_efficiency=float(t["gpu_efficiency"]),
                         source=f"η_mem {float(t['mem_efficiency']):.3f} {t.get('fitted_to', 'fitted')}; "
                                f"η_cpu {float(t['compute_efficiency']):g} and sync "
                                f"{float(t['sync_ms']) * 1e3:g} µs per CPU layer assumed; GPU η "
                                f"{float(t['gpu_efficiency']):g} carried over")
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ProfileError(f"{p}: not a CPU fit file ({type(exc).__name__}: {exc})") from None
    return terms


@dataclass(frozen=True)
class Placement:
    """Where the experts live: ``layers`` (the first N decoder layers' experts on the CPU), ``all``,
    ``misses`` (a GPU cache, its misses computed on the CPU), ``fiddler`` (copy or compute per expert)
    or ``plugin`` (a ``simmoe.api.Placement`` named ``spec``, with its ``options``, decides in the replay)."""

    kind: str
    layers: int = 0
    spec: str = ""
    options: tuple[tuple[str, str], ...] = ()

    @property
    def text(self) -> str:
        if self.kind == "plugin":
            return "placement=" + ",".join([self.spec, *(f"{k}={v}" for k, v in self.options)])
        return {"layers": f"cpu-layers:{self.layers}", "all": "cpu-all", "misses": "cpu-misses",
                "fiddler": "fiddler"}[self.kind]

    @property
    def uses_cache(self) -> bool:
        """Whether what the GPU holds is not fixed by the profile: a GPU expert cache (the replay's
        policy and budget) decides it, or a plugin does (in the replay, not known here)."""
        return self.kind in ("misses", "fiddler", "plugin")


PLACEMENT_HELP = "~cpu-layers:N, ~cpu-all, ~cpu-misses, ~fiddler or ~placement=NAME[,KEY=VALUE...]"


def parse_placement(text: str) -> Placement | None:
    """``cpu-layers:N``, ``cpu-all``, ``cpu-misses``, ``fiddler`` as a :class:`Placement`; None otherwise."""
    if text in ("cpu-all", "cpu-misses", "fiddler"):
        return Placement({"cpu-all": "all", "cpu-misses": "misses", "fiddler": "fiddler"}[text])
    head, sep, n = text.partition(":")
    if head == "cpu-layers":
        if not sep or not n.isdigit():
            raise ProfileError(f"placement {text!r}: write cpu-layers:N with N the decoder layers whose experts "
                               "run on the CPU (llama.cpp --n-cpu-moe N)")
        return Placement("layers", int(n))
    return None


class CpuForward:
    """Times of forwards for one model on one GPU + one CPU under one placement (module docstring).

    ``gpu`` is the GPU part's :class:`PhysicalModel` (its overheads and draft
    model); the experts' bytes follow ``fmt``, and the GPU's non-expert weights
    are scaled to it for GGUF formats (``dense_scale``).
    """

    def __init__(self, gpu: PhysicalModel, cpu: CPU, fmt: WeightFormat, placement: Placement, link: Link,
                 terms: CpuTerms, engine: str = DEFAULT_ENGINE):
        if engine not in ENGINES:
            raise ProfileError(f"unknown CPU engine {engine!r}; known: {', '.join(ENGINES)}")
        for what, v in (("mem_efficiency", terms.mem_efficiency), ("compute_efficiency", terms.compute_efficiency)):
            if not 0.0 < v <= 1.0:
                raise ProfileError(f"CPU {what} must lie in (0, 1], got {v}")
        self.gpu, self.cpu, self.fmt, self.placement, self.link, self.terms = gpu, cpu, fmt, placement, link, terms
        self.engine = engine
        self.overlap, self.act_bytes = ENGINES[engine]
        m = gpu.model
        self.model, self.o, self.L_moe, self.tp = m, gpu.o, gpu.L_moe, gpu.tp
        self.N = int(m.trace_experts)
        self.E = np.asarray(expert_bytes_by_layer(m, fmt), dtype=np.float64)     # [L_moe] bytes per expert
        self.P = float(m.expert_params)
        # the GPU's non-expert weights: a GGUF file quantizes them too (assumed at the expert type's width)
        checkpoint = float(m.expert_bytes) / self.P
        self.dense_scale = min(fmt.gate_up.bytes_per_weight / checkpoint, 1.0) if fmt.gguf else 1.0
        self.w_bytes = gpu.w_bytes * self.dense_scale
        self.attn_bytes = np.full_like(self.w_bytes, m.attention_params * checkpoint * self.dense_scale)
        self.attn_bytes = np.minimum(self.attn_bytes, self.w_bytes)
        self.head_bytes = gpu.head_bytes * self.dense_scale
        routed = np.zeros(len(self.w_bytes))
        routed[gpu.moe_index] = 2.0 * m.trace_top_k * m.expert_params
        self.dense_tok_flops = gpu.tok_flops - routed / gpu.tp
        self.attn_tok_flops = np.full_like(self.w_bytes, 2.0 * m.attention_params)
        # which MoE layers keep their experts on the CPU (the cache decides for misses and fiddler)
        moe = np.asarray(m.moe_layers)
        if placement.kind == "layers":
            self.cpu_layer = moe < placement.layers            # llama.cpp: blk.0 .. blk.N-1 ffn_*_exps
        else:
            self.cpu_layer = np.ones(self.L_moe, dtype=bool)
        S = int(cpu.sockets)
        self.sockets = S
        self.socket_starts = (np.arange(S) * self.N + S - 1) // S   # socket s holds ids [start_s, start_s+1)
        self.socket_of = np.searchsorted(self.socket_starts, np.arange(self.N), side="right") - 1
        self.isa = self._isa()
        self.cpu_bw = cpu.dram_gbps_per_socket * 1e9 * terms.mem_efficiency          # B/s per socket
        self.cpu_peak = cpu.isa_peak(self.isa) / S * 1e9 * terms.compute_efficiency   # OP/s per socket
        self.link_bw = link.gbps * 1e9
        self.roundtrip_ms = 2.0 * m.hidden_size * self.act_bytes / self.link_bw * 1e3   # per token
        self.read_ms = self.E / self.cpu_bw * 1e3               # one CPU expert's DRAM read, per MoE layer
        self.token_ms = 2.0 * self.P / self.cpu_peak * 1e3      # its compute per token routed to it
        self.pair_flops = 2.0 * self.P / gpu.tp                  # a GPU expert's flops per token routed to it
        self.all_moe = len(gpu.moe_index) == len(self.w_bytes)
        # up to this many tokens per expert every CPU expert is bound by its DRAM read, whatever n_e is: a
        # replay step that verifies no more tokens needs no n_e unless the GPU part is compute-bound
        self.membound_tokens = float(np.min(self.read_ms / self.token_ms)) if self.L_moe else 0.0

    def _isa(self) -> str:
        isas = INT_ISAS if self.fmt.gguf and self.fmt.key not in ("bf16", "f16", "f32") else FLOAT_ISAS
        for isa in isas:
            if self.cpu.isa_peak(isa) > 0:
                return isa
        raise ProfileError(f"{self.cpu.name}: no ISA among {', '.join(isas)} to compute {self.fmt.name} experts")

    # -- one CPU expert, one copy -----------------------------------------------
    def cpu_expert_ms(self, n_e) -> np.ndarray:
        """c_e in ms per (MoE layer, expert) for ``n_e`` tokens ``[..., L_moe, N]`` (0 tokens: 0 ms)."""
        n = np.asarray(n_e, dtype=np.float64)
        read = self.E[:, None] / self.cpu_bw
        comp = 2.0 * n * self.P / self.cpu_peak
        return np.where(n > 0, np.maximum(read, comp), 0.0) * 1e3

    def copy_ms(self) -> np.ndarray:
        """One expert's copy over the link, ms per MoE layer (Fiddler's alternative to computing it)."""
        return self.E / self.link_bw * 1e3

    def sparse_expert_ms(self, layers: np.ndarray, n_e: np.ndarray) -> np.ndarray:
        """c_e of CPU experts given one by one: their MoE layers and tokens (each > 0)."""
        return np.maximum(self.read_ms[layers], n_e * self.token_ms)

    def sparse_layer_ms(self, layers: np.ndarray, experts: np.ndarray, t: np.ndarray) -> np.ndarray:
        """C_ℓ from experts given one by one (:meth:`sparse_expert_ms`): the slowest socket's sum per layer."""
        if self.sockets == 1:
            return np.bincount(layers, weights=t, minlength=self.L_moe)
        key = layers * self.sockets + self.socket_of[experts]
        return np.bincount(key, weights=t, minlength=self.L_moe * self.sockets).reshape(-1, self.sockets).max(1)

    def socket_sums(self, t: np.ndarray) -> np.ndarray:
        """C_ℓ: the slowest socket's sum of its experts' times ``[L_moe, N]`` -> ``[L_moe]``."""
        if self.sockets == 1:
            return t.sum(axis=-1)
        return np.add.reduceat(t, self.socket_starts, axis=-1).max(axis=-1)

    # -- one forward ------------------------------------------------------------
    def forward_parts(self, n_tokens: float, gpu_experts, gpu_tokens, cpu_ms, cpu_layers, copy_ms=0.0,
                      kv_tokens: float = 0.0, pairs: float = 0.0, requests: int = 1, *, bound: bool = False):
        """(forward ms, GPU busy ms, CPU-side ms) of one forward (``bound``: and whether the routed
        experts' flops set any layer's GPU time, i.e. ``gpu_tokens`` mattered).

        Per MoE layer: ``gpu_experts`` experts read from GPU memory (held or
        copied), ``gpu_tokens`` token-expert pairs they compute, ``cpu_ms`` the
        CPU's time C_ℓ, ``cpu_layers`` whether the layer has a CPU expert
        (sync and the activations' round trip), ``copy_ms`` X_ℓ.
        """
        g = self.gpu
        n, kv, pairs = float(n_tokens), float(kv_tokens), float(pairs)
        # (the replay calls this once per step: few temporaries)
        routed_b = self._layers(np.multiply(gpu_experts, self.E))
        routed_f = self._layers(np.multiply(gpu_tokens, self.pair_flops))
        side = np.multiply(cpu_layers, self.terms.sync_ms + n * self.roundtrip_ms) + cpu_ms
        if not np.isscalar(copy_ms) or copy_ms:
            side = np.maximum(side, copy_ms)
        side = self._layers(side)
        if self.model.sliding_window:
            kv_read = np.where(g.sliding, min(kv, self.model.sliding_window * requests), kv) * g.kv_bytes
        else:
            kv_read = kv * g.kv_bytes
        if not self.overlap:
            read = (self.w_bytes + routed_b + kv_read) / g.bw
            comp = (n * self.dense_tok_flops + routed_f + pairs * g.pair_flops) / g.peak
            gpu_t = np.maximum(read, comp) * 1e3
            gpu_sum, side_sum = float(gpu_t.sum()), float(side.sum())
            head = max(self.head_bytes / g.bw, n * g.head_flops / g.peak) * 1e3
            out = (gpu_sum + side_sum + head + self.o.forward_ms, gpu_sum + head, side_sum)
            return (*out, bool((comp > read).any())) if bound else out
        else:
            attn_f = n * self.attn_tok_flops / g.tp + pairs * g.pair_flops
            attn = np.maximum((self.attn_bytes + kv_read) / g.bw, attn_f / g.peak) * 1e3
            comp = (n * (self.dense_tok_flops - self.attn_tok_flops / g.tp) + routed_f) / g.peak
            read = (self.w_bytes - self.attn_bytes + routed_b) / g.bw
            ffn = np.maximum(read, comp) * 1e3
            gpu_t = attn + ffn
            layers = attn + np.maximum(ffn, side)
        head = max(self.head_bytes / g.bw, n * g.head_flops / g.peak) * 1e3
        total = float(layers.sum()) + head + self.o.forward_ms
        out = (total, float(gpu_t.sum()) + head, float(side.sum()))
        return (*out, bool((comp > read).any())) if bound else out

    def most_gpu_pairs(self, n_tokens: float, gpu_experts) -> np.ndarray:
        """The most token-expert pairs ``gpu_experts`` experts serve: each token reaches at most k of them,
        each of them at most every token."""
        return float(n_tokens) * np.minimum(np.asarray(gpu_experts, dtype=np.float64), self.model.trace_top_k)

    def _layers(self, x: np.ndarray) -> np.ndarray:
        """Per-MoE-layer values as per-decoder-layer ones (0 on dense layers)."""
        if self.all_moe:
            return x
        out = np.zeros(len(self.w_bytes))
        out[self.gpu.moe_index] = x
        return out

    def forward_ms(self, n_tokens, union, kv_tokens=0.0, pairs=0.0, requests=1):
        """A forward from per-layer unions alone (the selectors' and EVICT's C(k) view; broadcasts).

        Without routes, each of the ``union`` experts of a layer serves
        n·k / union tokens; a cache-placed layer counts every expert on the CPU
        (Fiddler: the faster of copy and compute).  The replay's residency stage
        times forwards from the real routes instead (:mod:`simmoe.replay.residency_cpu`).
        """
        u = np.asarray(union, dtype=np.float64)
        if u.ndim == 0:
            u = np.full(self.L_moe, float(u))
        lead = np.broadcast_shapes(np.shape(n_tokens), u.shape[:-1], np.shape(kv_tokens), np.shape(pairs),
                                   np.shape(requests))
        n, kv, pr, rq = (np.broadcast_to(np.asarray(x, dtype=np.float64), lead)
                         for x in (n_tokens, kv_tokens, pairs, requests))
        u = np.broadcast_to(u, lead + (self.L_moe,))
        out = np.empty(lead)
        for idx in np.ndindex(lead):
            out[idx] = self._union_forward(float(n[idx]), u[idx], float(kv[idx]), float(pr[idx]), int(rq[idx]))
        return float(out) if out.ndim == 0 else out

    def _union_forward(self, n: float, u: np.ndarray, kv: float, pairs: float, requests: int) -> float:
        k = self.model.trace_top_k
        per = np.where(u > 0, n * k / np.maximum(u, 1.0), 0.0)
        c = np.maximum(self.E / self.cpu_bw, 2.0 * per * self.P / self.cpu_peak) * 1e3   # one expert
        if self.placement.kind == "fiddler":
            c = np.minimum(c, self.copy_ms())
        on_cpu = self.cpu_layer
        # the experts spread evenly over the sockets
        cpu = np.where(on_cpu, c * np.ceil(u / self.sockets), 0.0)
        gpu_u = np.where(on_cpu, 0.0, u)
        return self.forward_parts(n, gpu_u, gpu_u * per, cpu, on_cpu, 0.0, kv, pairs, requests)[0]

    def draft_ms(self, levels: int, requests: int = 1, *, served: bool = True, verified: float = 0.0) -> float:
        """Drafting runs on the GPU (:meth:`PhysicalModel.draft_ms`)."""
        return self.gpu.draft_ms(levels, requests, served=served, verified=verified)

    def served_iteration_ms(self, verified: float) -> float:
        return self.gpu.served_iteration_ms(verified)

    def expert_ms(self, n_tokens: float = 1.0, context: float = 0.0) -> float:
        """SpecFit's β in this regime: one more expert per MoE layer, averaged over the layers (1 token each)."""
        cpu = np.maximum(self.E / self.cpu_bw, 2.0 * self.P / self.cpu_peak) * 1e3
        if self.placement.kind == "fiddler":
            cpu = np.minimum(cpu, self.copy_ms())
        gpu = self.E / self.gpu.bw * 1e3
        return float(np.mean(np.where(self.cpu_layer, cpu, gpu))) if self.L_moe else 0.0

    def cost_model(self, kmax: int, *, levels: int, context: float = 0.0) -> tuple[list[float], float]:
        """b_0..b_kmax and β as :meth:`PhysicalModel.cost_model` derives them, with this regime's forward."""
        j = np.arange(kmax + 1, dtype=np.float64)
        fwd = np.array([self.forward_ms(1 + x, 0.0, context, (1 + x) * context) for x in j])
        b = fwd + self.draft_ms(levels, served=False) + self.o.step_ms + self.served_iteration_ms(0.0) \
            + self.o.spec_token_ms * (1 + j)
        return [float(x) for x in b], self.expert_ms(1.0, context)

    def describe(self) -> str:
        where = {"layers": f"the experts of the first {self.placement.layers} layers on the CPU",
                 "all": "every expert on the CPU", "misses": "a GPU expert cache, its misses computed on the CPU",
                 "fiddler": "per expert, copied or computed on the CPU (Fiddler)",
                 "plugin": f"placed by {self.placement.spec}"}[self.placement.kind]
        return (f"{self.model.name} ({self.fmt.name}) on {self.gpu.gpu.name} + {self.cpu.name}: {where}, "
                f"{self.engine} ({'GPU FFN overlaps the CPU' if self.overlap else 'GPU and CPU in turn'})")

    def served_term(self) -> str:
        return self.gpu.served_term()
