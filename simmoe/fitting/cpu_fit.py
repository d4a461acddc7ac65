"""The one fitted term of the CPU-expert regime: η_mem, the CPU's achieved fraction of peak DRAM bandwidth.

Fitted to the one admitted figure of this regime (``cpu_experts`` in
``simmoe/data/published.json``; shared/design/CALIBRATION.md): llmfit pull
request #755, Qwen3-30B-A3B-Instruct-2507 at Q4_K_M on an RTX 2080 8 GB with an
Intel i9-10900X, llama.cpp ``-ngl 99 --n-cpu-moe 36``, one request, AR:
36.7 tokens/s of generation.  One AR token is one forward over one token,
each MoE layer routing it to top-k distinct experts, each served to 1 token;
the context's KV reads are left out (the benchmark's prompt is not published;
at a few hundred tokens they are under 1 % of the token's time).  η_mem is
the root of tokens/s(η_mem) = 36.7 (monotone in η_mem; bisection).

Every other term is fixed before the fit: η_cpu and the per-layer
synchronisation are assumptions, the GPU part's η is carried over from the
physical model's fitted default setting (docs/cpu-experts.md).  Writes
``simmoe/hardware/data/cpu_fit.toml``::

    python -m simmoe.fitting.cpu_fit [--out PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from simmoe.hardware.cpu_forward import CPU_FIT_FILE, CpuForward, CpuTerms
from simmoe.hardware.cpu_profile import build_cpu_forward
from simmoe.hardware.physical import DEFAULT_SETTING, load_settings
from simmoe.published import PUBLISHED

FIGURE = "llmfit_pr755_rtx2080_i9_10900x"
PROFILE = "qwen3-30b-a3b/q4_k_m@rtx2080+i9-10900x~cpu-layers:36"
COMPUTE_EFFICIENCY = 0.5   # assumed (docs/cpu-experts.md)
SYNC_MS = 0.03             # assumed: GPU↔CPU synchronisation per CPU layer (docs/cpu-experts.md)


def ar_token_ms(fwd: CpuForward) -> float:
    """One AR token's forward: every MoE layer routes the token to k distinct experts, 1 token each."""
    k, L = fwd.model.trace_top_k, fwd.L_moe
    ones = np.zeros((L, fwd.N))
    ones[:, :k] = 1.0       # which ids does not matter on one socket; on two, k/2 per socket would
    on_cpu = np.broadcast_to(fwd.cpu_layer[:, None], ones.shape) & (ones > 0)
    cpu = fwd.socket_sums(fwd.cpu_expert_ms(np.where(on_cpu, ones, 0.0)))
    gpu_u = np.where(fwd.cpu_layer, 0, k)
    return fwd.forward_parts(1, gpu_u, gpu_u, cpu, fwd.cpu_layer)[0] + fwd.o.step_ms


def fit(target_tps: float | None = None) -> tuple[CpuTerms, dict]:
    """η_mem fitted to the admitted figure; the terms and what the fit saw."""
    fig = PUBLISHED["cpu_experts"][FIGURE]
    if fig.get("role") != "fit":
        raise SystemExit(f"published.json: {FIGURE} is not marked as a figure to fit")
    tps = float(target_tps if target_tps is not None else fig["generation_tokens_per_s"])
    settings = load_settings()
    gpu_eta = float(settings.get(DEFAULT_SETTING, {}).get("efficiency", 1.0))

    def terms(eta: float) -> CpuTerms:
        return CpuTerms(mem_efficiency=eta, compute_efficiency=COMPUTE_EFFICIENCY, sync_ms=SYNC_MS,
                        gpu_efficiency=gpu_eta, source="fitting")

    def rate(eta: float) -> float:
        return 1e3 / ar_token_ms(build_cpu_forward(PROFILE, terms(eta)))

    lo, hi = 1e-4, 1.0
    if rate(hi) < tps:
        raise SystemExit(f"even at η_mem = 1 the model gives {rate(hi):.2f} tokens/s, below {tps}: nothing to fit")
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if rate(mid) < tps else (lo, mid)
    eta = (lo + hi) / 2
    return terms(eta), {"target_tps": tps, "fitted_tps": rate(eta), "at_one_tps": rate(1.0), "gpu_eta": gpu_eta}


def render(t: CpuTerms, seen: dict) -> str:
    return f"""# The fitted term of the CPU-expert cost model (simmoe.hardware.cpu_forward).  Written by
#   python -m simmoe.fitting.cpu_fit --out simmoe/hardware/data/cpu_fit.toml
# do not edit by hand.  One term is fitted, to the one admitted figure of this regime
# (published.json cpu_experts.{FIGURE}):
#   {PROFILE}, AR, one request: {seen['target_tps']} tokens/s
#   η_mem = 1 would give {seen['at_one_tps']:.2f} tokens/s; fitted {seen['fitted_tps']:.2f} tokens/s
# compute_efficiency and sync_ms are assumptions; gpu_efficiency is the physical model's
# fitted default setting ({DEFAULT_SETTING}) carried over (docs/cpu-experts.md).

[cpu]
mem_efficiency = {t.mem_efficiency:.6f}
fitted_to = "fitted to llmfit PR #755 (36.7 tokens/s, Qwen3-30B-A3B Q4_K_M, RTX 2080 + i9-10900X, --n-cpu-moe 36)"
compute_efficiency = {t.compute_efficiency}  # assumed
sync_ms = {t.sync_ms}  # assumed
gpu_efficiency = {t.gpu_efficiency}  # carried over from physical_fit.toml [{DEFAULT_SETTING}]
"""


def main(argv=None) -> int:
    from simmoe.atomicio import write_text_atomic
    from simmoe.errors import one_line_parser

    p = one_line_parser(prog="python -m simmoe.fitting.cpu_fit", description=__doc__.split("\n\n")[0],
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(CPU_FIT_FILE), help="the fit file to write (default: the shipped one)")
    args = p.parse_args(argv)
    t, seen = fit()
    write_text_atomic(Path(args.out), render(t, seen))
    print(f"η_mem = {t.mem_efficiency:.4f}: {seen['fitted_tps']:.2f} tokens/s (published {seen['target_tps']}); "
          f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
