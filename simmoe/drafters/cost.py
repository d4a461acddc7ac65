"""Drafting costs on the physical model, and a profile whose drafting follows a drafter.

Every cost is the physical model's roofline (simmoe.hardware.physical):
``max(bytes / (η·BW), flops / (η_c·PEAK))`` per weight read, at the target's
storage width, over the tokens one drafting forward carries (every request
of the batch together).  What each drafter's forward reads is said where it
is computed; the drafter's own KV reads are left out, as EAGLE-3's are.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from simmoe.errors import SimmoeError
from simmoe.hardware.catalogue import DTYPE_BYTES, ModelSpec, format_names, load_format
from simmoe.hardware.cpu_forward import CpuForward, Placement
from simmoe.hardware.physical import Overheads, PhysicalModel, counterpart_name


def roofline_ms(phys: PhysicalModel, params: float, tokens: float, dtype: str | None = None) -> float:
    """Reading ``params`` weights once (split over tp GPUs) and computing them for ``tokens`` tokens, in ms."""
    b = DTYPE_BYTES[dtype or phys.model.dtype]
    return max(params * b / phys.tp / phys.bw, 2.0 * tokens * params / phys.tp / phys.peak) * 1e3


def head_ms(phys: PhysicalModel, tokens: float) -> float:
    """The target's LM head over ``tokens`` tokens (the same roofline as its forward)."""
    return max(phys.head_bytes / phys.bw, tokens * phys.head_flops / phys.peak) * 1e3


def expected_union(experts: int, top_k: int, tokens: float) -> float:
    """Distinct experts ``tokens`` tokens route to in one layer, each drawing top-k uniformly: N(1 − (1 − k/N)^n).

    An assumption for a drafter's own MoE layers, whose routes no trace records.
    """
    if experts <= 0:      # a dense layer: its one MLP
        return 1.0
    return float(experts * (1.0 - (1.0 - top_k / experts) ** max(float(tokens), 0.0)))


def allreduce_ms(phys: PhysicalModel, tokens: float, layers: int) -> float:
    """Two all-reduces per decoder layer under tensor parallelism (0 on one GPU)."""
    return layers * (phys.ar_fixed + phys.ar_per_token * tokens * 1e3) if phys.tp > 1 else 0.0


def target_layer_ms(phys: PhysicalModel, tokens: float) -> float:
    """One decoder layer of the target (its last), routed experts read as ``expected_union`` of them."""
    m = phys.model
    last = int(phys.moe_index[-1]) if phys.L_moe else m.decoder_layers - 1
    u = expected_union(m.num_experts, m.top_k, tokens)
    return float(np.asarray(phys.layer_ms(tokens, u))[last])


def draft_model_physical(phys: PhysicalModel, draft: ModelSpec) -> PhysicalModel:
    """The draft model on the target's GPU, one GPU (as llama.cpp runs it), with the setting's efficiencies.

    Its fixed forward time is the target's fitted ``forward_ms`` (an assumption:
    one forward's launch and synchronisation, whatever the model).
    """
    o = phys.o
    return PhysicalModel(draft, phys.gpu, tp=1, overheads=Overheads(
        efficiency=o.efficiency, compute_efficiency=o.compute_efficiency, forward_ms=o.forward_ms,
        source=f"draft model {draft.name} with the target's setting"))


def draft_cpu_forward(phys: Any, draft: ModelSpec, layers: int) -> CpuForward:
    """The draft model with its first ``layers`` decoder layers' experts on the target's CPU (llama.cpp's
    ``--spec-draft-n-cpu-moe``): the target profile's CPU, link, CPU terms and engine, the draft model's
    checkpoint format; refused in one line on a profile without a CPU."""
    host = getattr(phys, "host", None)
    if host is None:
        raise SimmoeError(f"drafter llama-chain: draft_n_cpu_moe={layers} puts the draft model's experts on the "
                          "CPU, but the profile has none (a profile MODEL@GPU+CPU~PLACEMENT: docs/cpu-experts.md)")
    fmt = load_format(draft.expert_dtype if draft.expert_dtype in format_names() else "bf16")
    return CpuForward(draft_model_physical(phys, draft), host.cpu, fmt, Placement("layers", int(layers)),
                      host.link, host.terms, host.engine)


class DrafterPhysical(PhysicalModel):
    """The target's physical model whose drafting is the drafter's (every other term unchanged).

    ``draft_ms`` keeps the served iteration's term of the base model (what a
    speculative iteration costs beyond drafting and the forward), so only
    the drafting itself follows the drafter.  ``host``: the profile's
    :class:`CpuForward` where its experts run on a CPU (the drafter's GPU
    part is ``base``), else None.
    """

    def __init__(self, base: PhysicalModel, drafter: Any, host: CpuForward | None = None):   # noqa: D107
        self.__dict__.update(base.__dict__)
        self.drafter, self.host = drafter, host

    def draft_ms(self, levels: int, requests: int = 1, *, served: bool = True, **served_terms: Any) -> float:
        levels = int(levels)
        if levels <= 0:
            return 0.0
        t = float(self.drafter.drafting_ms(self, levels, requests))
        if served:
            t += PhysicalModel.draft_ms(self, 1, requests, served=True, **served_terms) \
                - PhysicalModel.draft_ms(self, 1, requests, served=False)
        return t

    def describe(self) -> str:
        return f"{PhysicalModel.describe(self)}, drafter {self.drafter.name}"


class DrafterCpuForward(CpuForward):
    """A CPU-expert profile's forward whose drafting (on its GPU part) is the drafter's; every other term unchanged."""

    def __init__(self, base: CpuForward, drafter: Any):   # noqa: D107 - a copy of base, not a new model
        self.__dict__.update(base.__dict__)
        self.gpu = DrafterPhysical(base.gpu, drafter, host=base)
        self.drafter = drafter

    def describe(self) -> str:
        return f"{CpuForward.describe(self)}, drafter {self.drafter.name}"


def profile_with_drafter(profile: Any, drafter: Any) -> Any:
    """``profile`` with its drafting charged as ``drafter`` drafts (EAGLE-3: the profile itself).

    A physical profile (``MODEL@GPU...``) gets a :class:`DrafterPhysical` (a
    CPU-expert one, ``...+CPU~PLACEMENT``, a :class:`DrafterCpuForward`: the
    drafting runs on its GPU part), the event model's ``draft_level_ms``/``draft_fixed_ms`` (the drafter's cost at
    batch 1 is affine in the levels) and SpecFit's b_k rebuilt on it.  A
    profile without the physical model measured or fitted EAGLE-3's drafting:
    another drafter on it is refused in one line.
    """
    if drafter.name == "eagle3":
        return profile
    phys = getattr(profile, "physical", None)
    if phys is None:
        other = counterpart_name(profile)
        hint = f" (this model and GPU: {other})" if other else ""
        raise SimmoeError(f"drafter {drafter.name}: profile {profile.name} times EAGLE-3's drafting as measured or "
                          f"fitted; a drafter's cost needs the physical model, a profile MODEL@GPU[+LINK]{hint}")
    dp = DrafterCpuForward(phys, drafter) if isinstance(phys, CpuForward) else DrafterPhysical(phys, drafter)
    one, two = dp.draft_ms(1, served=False), dp.draft_ms(2, served=False)
    level = two - one
    b, _ = dp.cost_model(len(profile.cost_b_cache) - 1 if profile.cost_b_cache else 64, levels=4)
    return replace(profile, physical=dp, draft_level_ms=level,
                   draft_fixed_ms=phys.o.spec_iteration_ms + (one - level),
                   cost_b_cache=tuple(b), cost_b_no_cache=tuple(b),
                   description=f"{profile.description}; drafter {drafter.name} (drafting from its geometry, "
                               "acceptance from its published statistics or a fit, as the trace's provenance "
                               "says: every tokens/s a prediction)")
