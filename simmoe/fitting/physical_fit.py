"""Fit the physical cost model's overhead terms to the figures CALIBRATION.md allows, and nothing else.

``python -m simmoe.fitting.physical_fit --out simmoe/hardware/data/physical_fit.toml``
writes the fitted settings the profiles ``MODEL@GPU[...]`` read
(:mod:`simmoe.hardware.physical`).  What is fitted, to what:

* setting ``sglang-a100`` (EVICT's SGLang runs on A100 SXM4 80GB, batch 1):
  the roofline efficiency η and the fixed ``forward_ms`` of a target forward,
  by least squares on relative error, to EVICT Table 4's C(k) on QA
  (k = 1, 4, …, 32), with C(k) = drafting (4 levels) + the forward over 1 + k
  tokens whose per-layer expert union is the mean union of the top-k prefixes
  of EVICT-shaped synthetic pools (Qwen3-30B-A3B geometry; GSM8K and CNN/DM
  presets — no QA routing was ever calibrated, so the two calibrated
  workloads stand in, and the report says so);
  then, per target model, ``step_ms`` = the vanilla QA step (1000 / tokens/s of
  EVICT Tables 1, 7, 8, 9 at temperature 0) less the model's physical forward
  over one token (top-k experts per layer; tensor parallelism 4 for
  Ling-flash-2.0, 8 for Qwen3-235B-A22B, EVICT App. C.4);
  and one ``spec_iteration_ms`` for the setting: the serving time of a
  speculative iteration beyond drafting, the verification forward and
  ``step_ms``, fitted to Table 1's EAGLE-3 tokens/s on QA at temperature 0
  for Qwen3-30B-A3B (152.8) by replaying EAGLE-3 on the QA workload, whose Mat
  is the fitted one (:func:`fit_spec_iteration`; ``fit_in_evict_tables``
  allows this one speculative figure); the other models take it as a
  prediction;
* setting ``sglang-a100-t1`` (the same runs sampling at temperature 1): η,
  ``forward_ms`` and ``spec_iteration_ms`` carried over (the last a
  prediction at temperature 1), and per target model with a temperature-1
  vanilla figure (Tables 1, 7, 8 at temperature 1: not Hunyuan-7B) ``step_ms``
  fitted the same way to its vanilla QA tokens/s at temperature 1
  (``fit_in_evict_tables`` allows vanilla QA per model *and* temperature);
* setting ``vllm-table6`` (EVICT Table 6, vLLM, batch 4–64, GPU not stated):
  η and ``forward_ms`` carried over, and for each catalogued data-centre GPU
  one ``step_ms`` fitted to the vanilla QA tokens/s at every batch size (the
  batched step cost, which ``fit_in_evict_tables`` allows); the GPU with the
  smallest error is kept (a discrete fitted choice, reported with the others);
  no speculative serving term: vLLM is another serving loop, and no Table 6
  speculative figure may be fitted.

``draft_step_ms`` is not fitted (EVICT publishes no drafting time): 0.3 ms per
drafted level plus the head's physical time, an assumption; nor is the
compute efficiency (0.5 of tensor-core peak), which no allowed figure
identifies (the fitted forwards are memory-bound).  Everything runs
on seeded synthetic traces, so the output is reproducible byte for byte.

``--served-dtype fp8`` is a what-if, not the shipped fit: every model's
weights are read at FP8 width (as if served with online FP8 quantisation,
which EVICT does not state), and each setting carries ``served_dtype``.
Point ``SIMMOE_PHYSICAL_FIT`` at the file to replay or validate with it
(docs/models-and-gpus.md has what it changes).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace
from functools import cached_property
from pathlib import Path

import numpy as np

from simmoe.errors import SimmoeError
from simmoe.hardware.physical import SERVED_DTYPES

TABLE1 = {  # model key -> (published.json table, tensor parallelism)
    "qwen3-30b-a3b": ("table1_qwen3_30b_a3b_t0", 1),
    "ling-flash-2.0": ("table7_ling_flash_2_0", 4),
    "qwen3-235b-a22b": ("table8_qwen3_235b_a22b", 8),
    "hunyuan-7b": ("table9_hunyuan_7b_dense_t0", 1),
}
TABLE1_T1 = {  # model key -> the table holding its temperature-1 vanilla row (Hunyuan-7B has none)
    "qwen3-30b-a3b": "table1_qwen3_30b_a3b_t1",
    "ling-flash-2.0": "table7_ling_flash_2_0",
    "qwen3-235b-a22b": "table8_qwen3_235b_a22b",
}
T1_SETTING = "sglang-a100-t1"
TABLE6_GPUS = ("a100-sxm4-80gb", "h100-sxm", "h200")
SPEC_MODEL = "qwen3-30b-a3b"   # the model of the one speculative figure that may be fitted (Table 1, QA, T = 0)
SPEC_REQUESTS = 20             # its QA workload: the validation report's (physical_runs.PhysicalSizes)
UNION_REQUESTS = 6        # requests per EVICT-shaped trace for the union curves
UNION_SAMPLES = 192       # profiled positions per trace


def vanilla_qa(pub: dict, model: str, temperature: int = 0) -> float:
    """Vanilla (AR) tokens/s on QA of ``model`` at ``temperature`` (EVICT Tables 1, 7, 8, 9; fit set)."""
    name = TABLE1[model][0] if temperature == 0 else TABLE1_T1.get(model)
    if name is None:
        raise SimmoeError(f"no vanilla QA row for {model} at temperature {temperature}")
    table = pub["evict"][name]
    cols = table["columns"]
    j = cols.index("qa")
    for row in table["rows"]:
        if row[cols.index("method")] == "vanilla" and ("temperature" not in cols
                                                        or row[cols.index("temperature")] == temperature):
            return float(row[j])
    raise SimmoeError(f"no vanilla QA row for {model} at temperature {temperature}")


def evict_traces(model_key: str, requests: int | None = UNION_REQUESTS, seed: int = 0, node_routes: bool = True,
                 pool=None):
    """EVICT-shaped synthetic traces (GSM8K and CNN/DM presets) with ``model_key``'s geometry."""
    from simmoe.hardware.catalogue import load_model, with_model
    from simmoe.synth import generate, preset
    from simmoe.synth.evict_presets import EVICT_POOL

    spec = load_model(model_key)
    out = []
    for name in ("gsm8k", "cnndm"):
        pr = preset(name)
        params, fitted = with_model(pr.params, pr.fitted_to, spec, name)
        params = params.with_(pool=pool or EVICT_POOL)
        out.append(generate(params, seed=seed, num_requests=requests, preset=name, fitted_to=fitted,
                            node_routes=node_routes))
    return out


def union_states(traces, K: int, samples: int, batch: int = 1, seed: int = 0):
    """Profiled states of every trace, concatenated: ``(unions [S, K + 1, L], contexts [S])``."""
    from simmoe.hardware.union_profile import prefix_unions

    us, cs = [], []
    for t in traces:
        u, c = prefix_unions(t, K, samples=samples, batch=batch, seed=seed)
        us.append(u)
        cs.append(c)
    return np.concatenate(us), np.concatenate(cs)


class FitInputs:
    """The seeded synthetic workloads the fit profiles and replays, each made on first use and kept.

    They do not depend on the served dtype nor on anything fitted, so one
    instance serves any number of fits (``--served-dtype`` what-ifs, tests).
    """

    def __init__(self, pub: dict, log: Callable[[str], None] = lambda s: None):
        self.pub, self.log = pub, log

    @cached_property
    def ck_states(self) -> tuple[np.ndarray, np.ndarray]:
        """Table 4's profiled states: ``union_states`` of the EVICT-shaped Qwen3-30B-A3B traces up to its largest k."""
        K = int(np.max(self.pub["evict"]["table4_step_latency_ms"]["k"]))
        self.log("C(k): EVICT-shaped traces of Qwen3-30B-A3B (gsm8k, cnndm presets)")
        return union_states(evict_traces("qwen3-30b-a3b"), K, UNION_SAMPLES)

    @cached_property
    def qa(self):
        """The QA workload of the served-iteration fit (:func:`qa_workload`)."""
        return qa_workload()

    @cached_property
    def table6_states(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Per Table 6 batch size B: the unions of one token from each of B requests, and their contexts."""
        self.log("Table 6: unions of one token from each of B requests (gsm8k, cnndm presets, 80 and 40 requests)")
        traces = evict_traces("qwen3-30b-a3b", requests=None, node_routes=False)
        states = {}
        for B in table6_batches(self.pub):
            u, c = union_states(traces, 0, samples=24, batch=B, seed=B)
            states[B] = (u[:, 0, :], c)
        return states


def fit_ck(pub: dict, log: Callable[[str], None], served_dtype: str | None = None,
           inputs: FitInputs | None = None) -> dict:
    """η and forward_ms fitted to Table 4's C(k) on QA (Qwen3-30B-A3B, A100 SXM4 80GB).

    ``served_dtype`` (e.g. ``"fp8"``) reads the weights at that width instead
    of the checkpoint's (a what-if; the shipped fit uses the checkpoint's BF16).
    ``inputs``: the workloads when the caller holds them already (:class:`FitInputs`).
    """
    from scipy.optimize import least_squares

    from simmoe.hardware.catalogue import load_gpu, load_model
    from simmoe.hardware.physical import Overheads, PhysicalModel, evict_cost_from_unions, served_model

    t4 = pub["evict"]["table4_step_latency_ms"]
    ks = np.asarray(t4["k"], dtype=np.int64)
    target = np.asarray(t4["qa"], dtype=np.float64)
    K = int(ks.max())
    unions, contexts = (inputs or FitInputs(pub, log)).ck_states
    model, gpu = served_model(load_model("qwen3-30b-a3b"), served_dtype), load_gpu("a100-sxm4-80gb")

    def predict(x):
        phys = PhysicalModel(model, gpu, overheads=Overheads(efficiency=float(x[0]), forward_ms=float(x[1])))
        c = evict_cost_from_unions(phys, unions, 1 + np.arange(K + 1), contexts, levels=4)
        return c[ks - 1]

    res = least_squares(lambda x: predict(x) / target - 1.0, x0=[0.8, 1.0], bounds=([0.05, 0.0], [1.0, 50.0]))
    eta, fwd = float(res.x[0]), float(res.x[1])
    pred = predict(res.x)
    mean_union = unions.mean(axis=(0, 2))
    return {"efficiency": eta, "forward_ms": fwd, "k": ks.tolist(), "target": target.tolist(),
            "predicted": [round(float(v), 4) for v in pred],
            "union_per_layer": [round(float(mean_union[k]), 3) for k in (0, *ks.tolist())],
            "at_bound": bool(eta >= 1.0 - 1e-6), "context_mean": float(contexts.mean())}


def fit_steps(pub: dict, eta: float, fwd: float, log, temperature: int = 0, served_dtype: str | None = None) -> dict:
    """Per model: step_ms = vanilla QA step (at ``temperature``) − the physical forward over one token."""
    from simmoe.hardware.catalogue import load_gpu, load_model
    from simmoe.hardware.physical import Overheads, PhysicalModel, served_model

    gpu = load_gpu("a100-sxm4-80gb")
    out = {}
    for key in (TABLE1 if temperature == 0 else TABLE1_T1):
        m = served_model(load_model(key), served_dtype)
        tp = {"ling-flash-2.0": 4, "qwen3-235b-a22b": 8}.get(key, 1)
        phys = PhysicalModel(m, gpu, tp=tp, overheads=Overheads(efficiency=eta, forward_ms=fwd))
        ctx = 300.0  # context tokens of a mid-answer QA step: the KV term is < 1% of the step here
        t1 = float(phys.forward_ms(1, float(m.trace_top_k), ctx, ctx))
        tps = vanilla_qa(pub, key, temperature)
        step = 1000.0 / tps - t1
        out[key] = {"tp": tp, "vanilla_qa_tps": tps, "forward_ms_1token": round(t1, 4),
                    "step_ms": max(step, 0.0), "raw_step_ms": step}
        log(f"{key}, temperature {temperature}: vanilla QA {tps} tok/s -> step {1000 / tps:.3f} ms, "
            f"forward {t1:.3f} ms")
    return out


def table6_batches(pub: dict) -> list[int]:
    """The batch sizes of Table 6's columns."""
    return [int(c[2:]) for c in pub["evict"]["table6_batch_vllm"]["columns"][2:]]


def fit_table6(pub: dict, eta: float, fwd: float, log, served_dtype: str | None = None,
               inputs: FitInputs | None = None) -> dict:
    """vLLM, batch 4–64: one step_ms per GPU fitted to the vanilla QA row; the best GPU is kept."""
    from scipy.optimize import least_squares

    from simmoe.hardware.catalogue import load_gpu, load_model
    from simmoe.hardware.physical import Overheads, PhysicalModel, served_model

    t6 = pub["evict"]["table6_batch_vllm"]
    row = next(r for r in t6["rows"] if r[0] == "qa" and r[1] == "vanilla")
    batches = table6_batches(pub)
    target = np.asarray(row[2:], dtype=np.float64)
    states = (inputs or FitInputs(pub, log)).table6_states
    model = served_model(load_model("qwen3-30b-a3b"), served_dtype)
    fits: dict[str, dict] = {}
    for g in TABLE6_GPUS:
        gpu = load_gpu(g)

        def tps(x, gpu=gpu):
            phys = PhysicalModel(model, gpu, overheads=Overheads(efficiency=eta, forward_ms=fwd))
            out = []
            for B in batches:
                u, c = states[B]
                n = np.full(len(c), float(B))
                t = np.asarray(phys.forward_ms(n, u, c, c, B)).mean() + float(x[0])
                out.append(1000.0 * B / t)
            return np.asarray(out)

        res = least_squares(lambda x, f=tps: f(x) / target - 1.0, x0=[2.0], bounds=([0.0], [100.0]))
        pred = tps(res.x)
        err = pred / target - 1.0
        fits[g] = {"step_ms": float(res.x[0]), "predicted_tps": [round(float(v), 2) for v in pred],
                   "max_abs_err_pct": float(100 * np.max(np.abs(err))),
                   "rms_err_pct": float(100 * np.sqrt(np.mean(err ** 2)))}
        log(f"  {g}: step {res.x[0]:.3f} ms, rms error {fits[g]['rms_err_pct']:.1f}%")
    best = min(fits, key=lambda g: float(fits[g]["rms_err_pct"]))
    unions = {B: round(float(states[B][0].mean()), 2) for B in batches}
    return {"gpu": best, "fits": fits, "batches": batches, "target": target.tolist(), "union_per_layer": unions}


def table1_qa(pub: dict, method: str) -> float:
    """Table 1's tokens/s of ``method`` on QA at temperature 0 for Qwen3-30B-A3B (a served-iteration fit row)."""
    table = pub["evict"][TABLE1[SPEC_MODEL][0]]
    cols = table["columns"]
    row = next(r for r in table["rows"] if r[cols.index("method")] == method)
    return float(row[cols.index("qa")])


def eagle3_qa(pub: dict) -> float:
    """Table 1's EAGLE-3 tokens/s on QA at temperature 0 for Qwen3-30B-A3B (the first served-iteration row)."""
    return table1_qa(pub, "eagle3")


def qa_workload(requests: int = SPEC_REQUESTS, seed: int = 0):
    """The QA workload of Qwen3-30B-A3B that the validation report replays (EVICT's pool; target at T = 1).

    The same generation as :func:`simmoe.validation.published.physical_runs.generate_workload`
    (its temperature-1 distributions draw from their own stream and leave every
    temperature-0 replay unchanged).
    """
    from simmoe.hardware.catalogue import load_model, with_model
    from simmoe.synth import generate, preset
    from simmoe.synth.evict_presets import EVICT_POOL

    pr = preset("qa")
    params, fitted = with_model(pr.params, pr.fitted_to, load_model(SPEC_MODEL), "qa")
    params = params.with_(pool=EVICT_POOL)
    return generate(params, seed=seed, num_requests=requests, preset="qa",
                    fitted_to=fitted + ("then: EVICT's pool (App. C.4)",), temperature=1.0)


def replay_spec(trace, overheads, selector: str = "eagle3", served_dtype: str | None = None):
    """``selector`` replayed on ``trace`` with the physical model of Qwen3-30B-A3B on an A100 SXM4 80GB."""
    from simmoe.hardware.physical import profile_fields
    from simmoe.hardware.profile import HardwareProfile, validate
    from simmoe.replay.engine import ReplayConfig, replay

    name = f"{SPEC_MODEL}@a100-sxm4-80gb"
    profile = validate(HardwareProfile(**profile_fields(name, overheads=overheads, served_dtype=served_dtype)))
    config = ReplayConfig(selector=selector, slots=0, cache="none", hardware=name, selector_ms=0.0, seed=0)
    return replay(trace, config, profile)


def replay_eagle3(trace, overheads, served_dtype: str | None = None):
    """EAGLE-3 replayed on ``trace`` (:func:`replay_spec`)."""
    return replay_spec(trace, overheads, "eagle3", served_dtype)


SPEC_ROWS = ("eagle3", "evict")   # Table 1's two served-iteration rows on QA, T = 0 (CALIBRATION.md)


def _served_row(res, target: float) -> dict:
    """What one replay without the served term needs: decode ms, its drafting iterations, their verified tokens."""
    s = res.summary()
    steps = res.steps
    drafting = np.asarray(steps["levels"]) > 0
    tokens = float(s["output_tokens"] - s["requests"])          # decode tokens (SpecFit Eq. 10)
    return {"target_tps": target, "tps_without": float(s["decode_tps"]), "mat": float(s["mat"]),
            "need_ms": 1000.0 * tokens / target - 1000.0 * float(s["decode_s"]),
            "iterations": int(np.count_nonzero(drafting)),
            "verified": float(np.sum(np.asarray(steps["tokens"])[drafting], dtype=np.float64)),
            "ms_per_cycle_without": float(s["ms_per_cycle"]), "requests": int(s["requests"])}


def fit_spec_iteration(pub: dict, eta: float, fwd: float, step: float, log,
                       served_dtype: str | None = None, inputs: FitInputs | None = None) -> dict:
    """The served iteration ``spec_iteration_ms + spec_token_ms · tokens`` that Table 1's two QA rows imply.

    EAGLE-3 (its Mat the fitted one: the preset's ``easy_share``, fitted to
    Table 2's 3.07) and EVICT (its Mat as the simulator predicts it) replayed on
    the QA workload without the term decode their tokens in ``D`` ms; each
    iteration that drafts adds a + b · (tokens it verifies), so Table 1's 152.8
    and 162.54 tokens/s give two linear equations, 1000 · tokens / tps − D =
    a · n + b · V (n iterations, V tokens verified by them), solved exactly.
    EVICT's selection does not see the term (it selects with C(k) as profiled)
    and EAGLE-3 does not select by cost, so the replays without it fix n and V.
    The replays with the terms are run again and reported.
    """
    from simmoe.hardware.physical import Overheads

    trace = (inputs or FitInputs(pub, log)).qa
    base = Overheads(efficiency=eta, forward_ms=fwd, step_ms=step)
    rows = {m: _served_row(replay_spec(trace, base, m, served_dtype), table1_qa(pub, m)) for m in SPEC_ROWS}
    A = np.array([[rows[m]["iterations"], rows[m]["verified"]] for m in SPEC_ROWS], dtype=np.float64)
    y = np.array([rows[m]["need_ms"] for m in SPEC_ROWS])
    a, b = (float(v) for v in np.linalg.solve(A, y))
    fitted = replace(base, spec_iteration_ms=a, spec_token_ms=b)
    for m in SPEC_ROWS:
        r = rows[m]
        check = replay_spec(trace, fitted, m, served_dtype).summary()
        r.update(tps_with=float(check["decode_tps"]), ms_per_cycle_with=float(check["ms_per_cycle"]),
                 verified_per_iteration=r["verified"] / max(r["iterations"], 1))
        log(f"{m} on QA: {r['tps_without']:.2f} tok/s without the served term, Mat {r['mat']:.3f}, "
            f"{r['iterations']} iterations verifying {r['verified_per_iteration']:.1f} tokens each -> "
            f"{r['tps_with']:.2f} tok/s (Table 1: {r['target_tps']:g})")
    log(f"served iteration: {a:.3f} ms + {b:.4f} ms per verified token")
    return {"spec_iteration_ms": a, "spec_token_ms": b, "rows": rows}


def run_fit(log: Callable[[str], None] = lambda s: None, served_dtype: str | None = None,
            inputs: FitInputs | None = None) -> dict:
    """The whole fit; ``inputs``: its workloads when the caller holds them already (:class:`FitInputs`)."""
    from simmoe.published import PUBLISHED

    inputs = inputs or FitInputs(PUBLISHED, log)
    ck = fit_ck(PUBLISHED, log, served_dtype, inputs)
    eta, fwd = ck["efficiency"], ck["forward_ms"]
    steps = fit_steps(PUBLISHED, eta, fwd, log, served_dtype=served_dtype)
    steps_t1 = fit_steps(PUBLISHED, eta, fwd, log, temperature=1, served_dtype=served_dtype)
    spec = fit_spec_iteration(PUBLISHED, eta, fwd, steps[SPEC_MODEL]["step_ms"], log, served_dtype, inputs)
    t6 = fit_table6(PUBLISHED, eta, fwd, log, served_dtype, inputs)
    return {"ck": ck, "steps": steps, "steps_t1": steps_t1, "spec": spec, "table6": t6,
            "served_dtype": served_dtype}


def _fmt(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(round(v, 6))
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


def to_toml(fit: dict) -> str:
    """The fitted settings as TOML, with the fit's residuals as comments."""
    from simmoe.hardware.physical import COMPUTE_EFFICIENCY, DRAFT_STEP_MS

    ck, steps, t6 = fit["ck"], fit["steps"], fit["table6"]
    best = t6["fits"][t6["gpu"]]
    dt = fit.get("served_dtype")
    served = [f'served_dtype = "{dt}"  # what-if: weights read at {dt}, not the checkpoint\'s dtype'] if dt else []
    what_if = [f"# WHAT-IF: every model's weights read at {dt} (--served-dtype {dt}); the shipped fit reads",
               "# the checkpoints' own dtypes.  Use it with SIMMOE_PHYSICAL_FIT=<this file>.", "#"] if dt else []
    lines = what_if + [
        "# Fitted terms of the physical cost model (simmoe.hardware.physical).  Written by",
        "#   python -m simmoe.fitting.physical_fit "
        + (f"--served-dtype {dt} --out FILE" if dt else "--out simmoe/hardware/data/physical_fit.toml"),
        "# from seeded synthetic traces: do not edit by hand.  Fitted only to what",
        "# shared/design/CALIBRATION.md allows: EVICT Table 4's C(k) on QA, each model's vanilla",
        "# tokens/s on QA (Tables 1, 7, 8, 9 at temperature 0; Tables 1, 7, 8 at temperature 1),",
        "# Table 6's vanilla QA row and Table 1's EAGLE-3 and EVICT tokens/s on QA at temperature 0.",
        "#",
    ] + _residual_lines(fit)
    sp = fit.get("spec")
    lines += ["", "[settings.sglang-a100]",
              'description = "EVICT Tables 1-5, 7-9: SGLang with CUDA graphs, A100 SXM4 80GB, batch 1"',
              'gpu = "a100-sxm4-80gb"',
              f"efficiency = {_fmt(ck['efficiency'])}",
              f"forward_ms = {_fmt(ck['forward_ms'])}",
              f"draft_step_ms = {_fmt(DRAFT_STEP_MS)}  # assumed",
              f"compute_efficiency = {_fmt(COMPUTE_EFFICIENCY)}  # assumed",
              *served,
              f"default_step_ms = {_fmt(steps['qwen3-30b-a3b']['step_ms'])}",
              'fitted_to = "fitted to EVICT Table 4 C(k) on QA (Qwen3-30B-A3B)"',
              *_spec_lines(sp, ""),
              "", "[settings.sglang-a100.step_ms]"]
    lines += _step_lines(steps)
    steps_t1 = fit.get("steps_t1")
    if steps_t1:
        lines += ["", f"[settings.{T1_SETTING}]",
                  'description = "EVICT Tables 1, 2, 7, 8, 10, 11 at temperature 1: SGLang with CUDA graphs, '
                  'A100 SXM4 80GB, batch 1, sampling"',
                  'gpu = "a100-sxm4-80gb"',
                  f"efficiency = {_fmt(ck['efficiency'])}",
                  f"forward_ms = {_fmt(ck['forward_ms'])}",
                  f"draft_step_ms = {_fmt(DRAFT_STEP_MS)}  # assumed",
                  f"compute_efficiency = {_fmt(COMPUTE_EFFICIENCY)}  # assumed",
                  *served,
                  f"default_step_ms = {_fmt(steps_t1['qwen3-30b-a3b']['step_ms'])}",
                  'fitted_to = "carried over from sglang-a100 (fitted to EVICT Table 4 C(k) on QA)"',
                  *_spec_lines(sp, "carried over from sglang-a100, a prediction at temperature 1: "),
                  "", f"[settings.{T1_SETTING}.step_ms]"]
        lines += _step_lines(steps_t1, " at temperature 1")
    lines += ["", "[settings.vllm-table6]",
              'description = "EVICT Table 6: vLLM, batch 4-64, Qwen3-30B-A3B (GPU not stated: fitted choice)"',
              f'gpu = "{t6["gpu"]}"',
              f"efficiency = {_fmt(ck['efficiency'])}",
              f"forward_ms = {_fmt(ck['forward_ms'])}",
              f"draft_step_ms = {_fmt(DRAFT_STEP_MS)}  # assumed",
              f"compute_efficiency = {_fmt(COMPUTE_EFFICIENCY)}  # assumed",
              *served,
              f"default_step_ms = {_fmt(best['step_ms'])}",
              'fitted_to = "carried over from sglang-a100 (fitted to EVICT Table 4 C(k) on QA)"',
              "", "[settings.vllm-table6.step_ms]",
              f'"qwen3-30b-a3b" = {_fmt(best["step_ms"])}  # fitted to Table 6 vanilla QA at every batch size']
    return "\n".join(lines) + "\n"


def _residual_lines(fit: dict) -> list[str]:
    """The fit's residuals as TOML comments: Table 4's C(k), Table 6's GPUs, the speculative iteration."""
    ck, t6 = fit["ck"], fit["table6"]
    lines = ["# C(k), QA, Qwen3-30B-A3B on A100 SXM4 80GB (published / fitted, ms):"]
    for k, a, b in zip(ck["k"], ck["target"], ck["predicted"], strict=True):
        lines.append(f"#   k = {k:2d}: {a:6.2f} / {b:6.2f}  ({100 * (b / a - 1):+.1f}%)")
    lines += [
        "#   mean per-layer expert union of the prefixes (k = 0, 1, 4, ..., 32): "
        + ", ".join(f"{x:.1f}" for x in ck["union_per_layer"]),
    ]
    if ck["at_bound"]:
        lines.append("#   efficiency stopped at its bound 1.0: the synthetic unions grow faster with k than")
        lines.append("#   Table 4's slope allows at the A100's peak HBM bandwidth (docs/models-and-gpus.md).")
    lines += ["#", "# Table 6 (vLLM), vanilla QA tok/s at batch " + ", ".join(map(str, t6["batches"])) + ": "
              + ", ".join(f"{x:g}" for x in t6["target"])]
    for g, f in t6["fits"].items():
        lines.append(f"#   {g:>15}: step {f['step_ms']:.3f} ms -> " + ", ".join(f"{x:.0f}" for x in f["predicted_tps"])
                     + f"  (rms {f['rms_err_pct']:.1f}%, max {f['max_abs_err_pct']:.1f}%)")
    lines.append("#   mean per-layer union of B requests' tokens: "
                 + ", ".join(f"B={b}: {u}" for b, u in t6["union_per_layer"].items()))
    sp = fit.get("spec")
    if sp:
        lines += ["#", "# Served iteration, Table 1 on QA at temperature 0 (EAGLE-3 with its fitted Mat, EVICT with",
                  f"# its predicted one): {sp['spec_iteration_ms']:.3f} ms + {sp['spec_token_ms']:.4f} ms per "
                  "verified token"]
        for m, r in sp["rows"].items():
            lines.append(f"#   {m}: {r['target_tps']:g} tok/s published; {r['requests']} requests, Mat {r['mat']:.3f}, "
                         f"{r['iterations']} iterations of {r['verified_per_iteration']:.1f} tokens; without the term "
                         f"{r['tps_without']:.2f} tok/s ({r['ms_per_cycle_without']:.2f} ms/iteration), with it "
                         f"{r['tps_with']:.2f} tok/s ({r['ms_per_cycle_with']:.2f} ms/iteration)")
    return lines


def _spec_lines(sp: dict | None, carried: str) -> list[str]:
    """The setting's speculative serving term (none without a fit of it)."""
    if not sp:
        return []
    r = sp["rows"]
    how = (f"{carried}fitted to EVICT Table 1's EAGLE-3 and EVICT tokens/s on QA at temperature 0 (Qwen3-30B-A3B, "
           f"{r['eagle3']['target_tps']:g} and {r['evict']['target_tps']:g}) with EAGLE-3's fitted Mat and "
           "EVICT's predicted one")
    return [f"spec_iteration_ms = {_fmt(sp['spec_iteration_ms'])}",
            f"spec_token_ms = {_fmt(sp['spec_token_ms'])}",
            f'spec_iteration_model = "{SPEC_MODEL}"',
            f"spec_iteration_fitted_to = {_fmt(how)}"]


def _step_lines(steps: dict, when: str = "") -> list[str]:
    out = []
    for key, s in steps.items():
        note = "" if s["raw_step_ms"] >= 0 else f"  # clipped at 0 from {s['raw_step_ms']:.3f}"
        out.append(f'"{key}" = {_fmt(s["step_ms"])}  # vanilla QA{when} {s["vanilla_qa_tps"]:g} tok/s, '
                   f"tp {s['tp']}, forward over 1 token {s['forward_ms_1token']:.3f} ms{note}")
    return out


def main(argv=None, inputs: FitInputs | None = None) -> int:
    """The command line; ``inputs``: the fit's workloads when the caller holds them already (:class:`FitInputs`)."""
    ap = argparse.ArgumentParser(prog="python -m simmoe.fitting.physical_fit", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="TOML file to write (simmoe/hardware/data/physical_fit.toml)")
    ap.add_argument("--served-dtype", choices=SERVED_DTYPES, default=None,
                    help="what-if: read every model's weights at this width instead of the checkpoint's "
                         "(writes served_dtype into each setting; use the file with SIMMOE_PHYSICAL_FIT)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    from simmoe.atomicio import write_text_atomic

    out = Path(args.out)
    if not out.parent.is_dir():
        print(f"physical_fit: error: no such folder {out.parent}", file=sys.stderr)
        return 2
    fit = run_fit(log=(lambda s: None) if args.quiet else (lambda s: print(s, file=sys.stderr)),
                  served_dtype=args.served_dtype, inputs=inputs)
    write_text_atomic(out, to_toml(fit))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
