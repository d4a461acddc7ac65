"""Closing the loop: replay a recorded trace and compare it with a live run, cycle by cycle.

A live run (``hwprobe live``) decodes the same prompts as a recording
(``hwprobe record``) with one selector and one cache size, measuring every
cycle.  Greedy verification is lossless and the live loop builds the same
pools and calls the selector exactly as :func:`simmoe.replay.engine.plan` does, so
the replay of the trace under the live run's selector, slots and route
information must make the same cycles: the same positions, the same
selections, the same accepted tokens (checked exactly).  What the replay
*predicts* is time: :func:`compare` reports the per-cycle time error
(median and p90 of |replay − live| / live), the decode throughput error
(SpecFit Eq. 10) and the copies-per-token error.

The replay's event-model parameters are fitted to measured cycles by
:func:`fit_timing` (non-negative least squares, ``scipy.optimize.nnls``):

* verification forward (each run weighing the same, whatever its number
  of cycles) ≈ forward_ms + token_ms·(n − 1) + expert_ms·Σ_ℓ(h_ℓ + m_ℓ)
  + copy_ms·Σ_ℓ m_ℓ + w·[the cycle drafted], with n = 1 + |S| tokens, h/m
  hits and misses per layer; w (a forward right after drafting finds the
  caches cooled by the drafter) is added to draft_fixed_ms, which the event
  model charges to drafting cycles only;
  on a CPU the "copy" is a memcpy on the compute thread, so the profile says
  ``overlap = false`` and ``copies_in_flight = 1``, under which the event
  model (:mod:`simmoe.replay.timing`) is exactly this linear form;
* drafting of d levels ≈ draft_fixed_ms + draft_level_ms·d, from every
  prefix of every measured pool's per-level times;
* commit_ms = the mean commit time; prefill_token_ms = the median of
  (prefill − the forward's fixed and expert parts) / prompt length.

The selector's time is the mean measured in the fitting runs of the same
selector (:func:`selector_time`) where there are such runs; otherwise the
replay measures its own (wall clock, so on a loaded machine it reads long).

The live-run file and its reading: :mod:`simmoe.validation.live_runs`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from simmoe.errors import CheckFailed, SimmoeError
from simmoe.validation.live_runs import (  # noqa: F401  (re-exported: the live-run file's names)
    LIVE_FORMAT,
    LiveRun,
    _split_requests,
    merge_passes,
    read_live,
    read_live_passes,
)

GOAL_TPS_ERROR = 0.05
GOAL_CYCLE_ERROR = 0.10


# --------------------------------------------------------------------------
# fitting the event model's parameters to measured cycles
# --------------------------------------------------------------------------
def _nnls(A: np.ndarray, y: np.ndarray, w: np.ndarray | None = None, trim: float = 0.02) -> np.ndarray:
    """Weighted NNLS, then once more without the ``trim`` fraction of largest residuals (load spikes)."""
    from scipy.optimize import nnls

    sw = np.sqrt(np.ones(len(y)) if w is None else np.asarray(w, np.float64))
    coef, _ = nnls(A * sw[:, None], y * sw)
    if len(y) >= 50 and trim > 0:
        r = np.abs(A @ coef - y)
        keep = r <= np.quantile(r, 1 - trim)
        coef, _ = nnls(A[keep] * sw[keep, None], y[keep] * sw[keep])
    return coef


def fit_timing(runs: list[LiveRun], *, name: str = "fitted-live", base=None):
    """A :class:`~simmoe.hardware.profile.HardwareProfile` whose event model is fitted to ``runs`` (module docstring).

    ``base`` supplies everything not fitted (the selectors' cost models b_k,
    β and C(k)); by default the first run's selection profile, if any.
    O(cycles · L) plus small least-squares problems.
    """
    from simmoe.hardware.profile import HardwareProfile, validate

    if not runs:
        raise SimmoeError("no live runs to fit the timing to")
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("n", "F", "m", "drafted", "verify", "commit", "w")}
    draft_rows, prefill_rows = [], []
    for run in runs:
        c = run.cycles
        if not run.num_cycles:
            continue
        cols["n"].append(1 + c["draft_nodes"].astype(np.float64))
        cols["F"].append((c["hits"] + c["copies"]).astype(np.float64))
        cols["m"].append(c["copies"].astype(np.float64))
        cols["drafted"].append((c["drafted_levels"] > 0).astype(np.float64))
        cols["verify"].append(c["verify_ms"])
        cols["commit"].append(c["commit_ms"])
        cols["w"].append(np.full(run.num_cycles, 1.0 / run.num_cycles))   # every run weighs the same
        for lv in c["level_ms"]:
            acc = np.cumsum(lv)
            draft_rows += [(d + 1, float(acc[d])) for d in range(len(acc))]
        for r in run.requests:
            prefill_rows.append((float(r["prefill_ms"]), int(r["prompt_len"]),
                                 int(np.sum(r["prefill_hits"])) + int(np.sum(r["prefill_copies"])),
                                 int(np.sum(r["prefill_copies"]))))
    if not cols["n"] or sum(len(x) for x in cols["n"]) < 3:
        raise SimmoeError("too few measured cycles to fit the timing (need at least 3)")
    n, F, m, drafted, y = (np.concatenate(cols[k]) for k in ("n", "F", "m", "drafted", "verify"))
    # a forward right after drafting runs on caches the drafter has cooled: that extra is charged
    # to drafting's fixed cost (the event model adds draft_fixed_ms only to cycles that draft)
    A = np.stack([np.ones_like(n), n - 1, F, m, drafted], axis=1)
    fwd, tok, exp, copy, after_draft = (float(x) for x in _nnls(A, y, np.concatenate(cols["w"])))
    level = fixed = 0.0
    if draft_rows:
        d = np.asarray(draft_rows, dtype=np.float64)
        fixed, level = (float(x) for x in _nnls(np.stack([np.ones(len(d)), d[:, 0]], 1), d[:, 1]))
    fixed += after_draft
    pre_tok = 0.0
    if prefill_rows:
        p = np.asarray(prefill_rows, dtype=np.float64)
        resid = p[:, 0] - fwd - exp * p[:, 2] - copy * p[:, 3]
        pre_tok = max(float(np.median(resid / np.maximum(p[:, 1], 1))), 0.0)
    commit = float(np.mean(np.concatenate(cols["commit"])))
    meta = runs[0].meta
    cpu = meta.get("timer", "wall-clock") == "wall-clock"
    if base is None and meta.get("selection_profile"):
        base = profile_from_dict(meta["selection_profile"])
    fitted: dict[str, Any] = dict(
        name=name, source=f"measured by hwprobe on {meta.get('device', '?')} (event model fitted to live cycles)",
        description=f"{meta.get('model', '?')} on {meta.get('device', '?')}: event model fitted to "
                    f"{len(y)} live cycles of {len(runs)} run(s)",
        device=str(meta.get("device", "")), model=str(meta.get("model", "")),
        expert_bytes=int(meta.get("geometry", {}).get("expert_bytes", 0) or 0),
        num_layers=int(meta.get("geometry", {}).get("num_layers", 0) or 0),
        resident=False, copies_in_flight=1, copy_ms=copy, copy_cv=0.0, copy_samples_ms=(), link_gbps=0.0,
        forward_ms=fwd, token_ms=tok, expert_ms=exp, cache_overhead_ms=0.0, prefill_token_ms=pre_tok,
        overlap=not cpu, draft_level_ms=level, draft_fixed_ms=fixed, commit_ms=commit, selector_ms=0.0,
        notes=("copies are host memcpy on the compute thread (CPU): no overlap; " if cpu else
               "fitted linearly although copies overlap compute on the device; ")
              + "the selector's time is measured by the replay, not fitted")
    if base is not None:
        return validate(replace(base, **fitted, path=None))
    return validate(HardwareProfile(**fitted))


def derived_cost_model(profile, *, depth: int, K: int, miss_fraction: float):
    """``profile`` with SpecFit's Eq. 4 coefficients derived from its own event model.

    T̂(S) = b_|S| + βF(S) is the event model of a full-depth cycle without
    overlap: b_k = draft_fixed + draft_level·depth + forward + token·k +
    commit and β = expert_ms + copy_ms (no cache: every expert is copied) or
    expert_ms + copy_ms·``miss_fraction`` (with a cache).  An alternative to
    ``hwprobe calibrate`` where its wall-clock probes are dominated by other
    jobs' load.  O(K).
    """
    base = profile.draft_fixed_ms + profile.draft_level_ms * depth + profile.forward_ms + profile.commit_ms
    b = tuple(max(base + profile.token_ms * k, 1e-6) for k in range(K + 1))
    return profile.replace(cost_b_cache=b, cost_b_no_cache=b,
                           cost_beta_cache=profile.expert_ms + profile.copy_ms * float(miss_fraction),
                           cost_beta_no_cache=profile.expert_ms + profile.copy_ms)


def selector_time(runs: list[LiveRun], selector: str) -> float | None:
    """Mean measured selector time per cycle of ``selector`` over ``runs`` (None when none ran it)."""
    xs = [r.cycles["select_ms"] for r in runs if r.meta.get("selector") == selector and r.num_cycles]
    return float(np.mean(np.concatenate(xs))) if xs else None


def profile_from_dict(d: dict):
    """A profile from the JSON form ``hwprobe`` writes into metadata (``measured_profile.profile_dict``)."""
    import dataclasses

    from simmoe.hardware.profile import HardwareProfile, validate

    names = {f.name: f for f in dataclasses.fields(HardwareProfile)}
    kw: dict[str, Any] = {}
    for k, v in d.items():
        if k not in names or k == "path":
            continue
        kw[k] = tuple(v) if isinstance(v, list) else v
    try:
        return validate(HardwareProfile(**kw))
    except TypeError as exc:
        raise SimmoeError(f"bad profile in the live-run metadata: {exc}") from None


# --------------------------------------------------------------------------
# the trace and the live run must describe the same decoding
# --------------------------------------------------------------------------
def check_compatible(trace, live: LiveRun) -> None:
    """Refuse a trace and a live run of different models, prompts or settings (SimmoeError)."""
    prov = trace.meta.get("provenance", {})
    meta = live.meta
    where = f"trace and live run {live.path}"
    if prov.get("kind") != "hwprobe":
        raise SimmoeError(f"the trace is {prov.get('kind', 'not recorded')!r}, not recorded by hwprobe record: "
                          "a live run can only be compared with a recording of the same model")

    def same(what, a, b):
        if a != b:
            raise SimmoeError(f"{where} differ in {what}: trace {a!r}, live {b!r}")

    same("model", prov.get("model"), meta.get("model"))
    if "weights" in prov:
        same("weights", prov.get("weights"), meta.get("weights"))
    if "dtype" in prov and "dtype" in meta:
        same("dtype", prov.get("dtype"), meta.get("dtype"))
    same("drafter", prov.get("drafter"), meta.get("drafter"))
    g, lg = trace.geometry, meta["geometry"]
    same("model geometry (layers, experts, top-k)", (g.num_layers, g.num_experts, g.top_k),
         (lg.get("num_layers"), lg.get("num_experts"), lg.get("top_k")))
    ps, lp = trace.pool_shape, meta["pool"]
    same("pool shape (top-k per expansion, depth, maximum nodes)", (ps.expand_topk, ps.depth, ps.max_nodes),
         (lp.get("expand_topk"), lp.get("depth"), lp.get("max_nodes")))
    if "pool_expand_nodes" in prov:
        same("nodes expanded per level", prov["pool_expand_nodes"], lp.get("expand_nodes"))
    same("verify budget K", ps.K, meta["K"])
    sampling = trace.meta.get("sampling") or {}
    same("temperature", float(sampling.get("temperature", 0.0)), float(meta.get("temperature", 0.0) or 0.0))
    if sampling:
        same("sampling seed", sampling.get("seed"), int(meta.get("sampling_seed", 0) or 0))
    R = len(trace.requests)
    ids = [str(x) for x in trace.requests.request_id]
    live_ids = [str(r["request_id"]) for r in live.requests]
    same("prompts (question ids)", ids, live_ids)
    for r, req in enumerate(live.requests):
        qid = ids[r]
        if int(trace.requests.prompt_len[r]) != int(req["prompt_len"]):
            raise SimmoeError(f"{where} differ in the prompt of request {qid}: {trace.requests.prompt_len[r]} "
                              f"vs {req['prompt_len']} tokens (another prompts file or tokenizer)")
        if int(trace.requests.output_len[r]) != int(req["output_len"]):
            raise SimmoeError(f"{where} differ in the output length of request {qid}: "
                              f"{trace.requests.output_len[r]} vs {req['output_len']} "
                              "(another --max-new-tokens or --max-total-tokens)")
        lo, hi = trace.request_positions(r)
        if not np.array_equal(np.asarray(trace.root_token[lo:hi], np.int64), np.asarray(req["tokens"], np.int64)):
            raise SimmoeError(f"{where} differ in the output tokens of request {qid}: another model, "
                              "seed or prompt")
    if R != len(live.requests):  # pragma: no cover - ids equality covers it
        raise SimmoeError(f"{where} differ in the number of requests")


# --------------------------------------------------------------------------
# the comparison
# --------------------------------------------------------------------------
@dataclass
class Validation:
    """Replay vs live: totals, errors and the aligned per-cycle frame."""

    selector: str
    slots: int
    live: dict
    replay: dict
    errors: dict
    cycles: Any = field(repr=False, default=None)      # pandas DataFrame, one row per live cycle

    @property
    def accepted_match(self) -> bool:
        return self.errors["accepted_mismatches"] == 0 and self.errors["cycle_count_match"]

    def row(self) -> dict:
        e = self.errors
        return {"selector": self.selector, "slots": self.slots,
                "cycles_live": self.live["cycles"], "cycles_replay": self.replay["cycles"],
                "accepted_mismatches": e["accepted_mismatches"],
                "tokens_per_cycle": self.live["committed"],
                "tps_live": self.live["decode_tps"], "tps_replay": self.replay["decode_tps"],
                "tps_error": e["decode_tps"],
                "cycle_error_median": e["cycle_median"], "cycle_error_p90": e["cycle_p90"],
                "cycle_bias_median": e["cycle_bias_median"], "cycle_noise_floor": e["cycle_noise_floor"],
                "copies_per_token_live": self.live["h2d_per_token"],
                "copies_per_token_replay": self.replay["h2d_per_token"],
                "copies_error": e["h2d_per_token"], "copies_cycle_mismatches": e["copies_mismatches"]}


def _rel(a: float, b: float) -> float:
    """(a − b) / b, with 0/0 = 0."""
    if b == 0:
        return 0.0 if a == 0 else float("inf")
    return (a - b) / b


def replay_config_for(live: LiveRun, hardware_name: str, selector_ms: float | None = None):
    """The replay configuration that repeats the live run's selections (``selector_ms``: as ReplayConfig)."""
    from simmoe.replay.engine import ReplayConfig

    m = live.meta
    slots = int(m["slots"])
    return ReplayConfig(selector=m["selector"], slots=slots, cache="lru" if slots > 0 else "none",
                        hardware=hardware_name, route_accuracy=float(m.get("route_accuracy", 1.0)),
                        seed=int(m.get("route_seed", 0)), timing="event", selector_ms=selector_ms,
                        temperature=float(m.get("temperature", 0.0) or 0.0),
                        sampling_seed=int(m.get("sampling_seed", 0) or 0),
                        options=tuple(sorted((m.get("options") or {}).items())))


def compare(trace, live: LiveRun, profile, *, selector_ms: float | None = None) -> Validation:
    """Replay ``trace`` as ``live`` ran (selector, slots, routes) on ``profile``; compare per cycle and in total.

    Cycles are aligned on (request, position).  Per-cycle error:
    (replay − live) / live of the whole cycle time.  ``selector_ms``: a fixed
    selector time for the replay (default: the replay measures its own).
    O(replay + cycles).
    """
    import pandas as pd

    from simmoe.replay.engine import replay

    check_compatible(trace, live)
    config = replay_config_for(live, profile.name, selector_ms)
    policy = live.meta.get("prefetch") or "none"
    if policy != "none":   # hwprobe live --prefetch: the copy engine's staging as the backend's (docs/prefetch.md)
        res = replay(trace, replace(config, prefetch=policy), profile,
                     staging=int(live.meta.get("inflight") or profile.copies_in_flight))
    else:
        res = replay(trace, config, profile)
    rc, lc = res.cycles, live.cycles
    key = lambda req, pos: (np.asarray(req, np.int64) << 32) | np.asarray(pos, np.int64)  # noqa: E731
    rkey, lkey = key(rc["request"], rc["position"]), key(lc["request"], lc["position"])
    idx = {int(k): i for i, k in enumerate(rkey)}
    ri = np.asarray([idx.get(int(k), -1) for k in lkey], np.int64)
    aligned = ri >= 0
    r_sel = ri[aligned]
    acc_mis = int(np.sum(lc["committed"][aligned] != rc["committed"][r_sel])) + int(np.sum(~aligned))
    live_ms = lc["cycle_ms"][aligned]
    rep_ms = rc["cycle_ms"][r_sel]
    err = (rep_ms - live_ms) / np.where(live_ms > 0, live_ms, np.nan)
    abs_err = np.abs(err)
    frame = pd.DataFrame({
        "request": lc["request"], "position": lc["position"],
        "committed_live": lc["committed"], "draft_nodes_live": lc["draft_nodes"],
        "drafted_levels_live": lc["drafted_levels"],
        "copies_live": lc["copies"], "hits_live": lc["hits"],
        "draft_ms_live": lc["draft_ms"], "select_ms_live": lc["select_ms"],
        "verify_ms_live": lc["verify_ms"], "commit_ms_live": lc["commit_ms"], "cycle_ms_live": lc["cycle_ms"],
    })
    for name, src in (("committed", "committed"), ("draft_nodes", "draft_nodes"), ("copies", "misses"),
                      ("hits", "hits"), ("draft_ms", "draft_ms"), ("select_ms", "selector_ms"),
                      ("verify_ms", "forward_ms"), ("commit_ms", "commit_ms"), ("cycle_ms", "cycle_ms")):
        col = np.full(len(ri), np.nan)
        col[aligned] = np.asarray(rc[src], np.float64)[r_sel]
        frame[f"{name}_replay"] = col
    frame["cycle_error"] = np.nan
    frame.loc[aligned, "cycle_error"] = err
    floor = noise_floor(live)
    live_sum, rep_sum = live.summary(), res.summary()
    copies_mis = int(np.sum(lc["copies"][aligned] != rc["misses"][r_sel]))
    parts = {}
    for name, lk, rk in (("draft", "draft_ms", "draft_ms"), ("select", "select_ms", "selector_ms"),
                         ("verify", "verify_ms", "forward_ms"), ("commit", "commit_ms", "commit_ms")):
        parts[name] = (float(np.sum(lc[lk][aligned])), float(np.sum(np.asarray(rc[rk])[r_sel])))
    errors = {
        "accepted_mismatches": acc_mis,
        "cycle_count_match": len(rkey) == len(lkey) and bool(aligned.all()),
        "aligned_cycles": int(aligned.sum()),
        "cycle_median": float(np.nanmedian(abs_err)) if aligned.any() else float("nan"),
        "cycle_p90": float(np.nanquantile(abs_err, 0.9)) if aligned.any() else float("nan"),
        "cycle_bias_median": float(np.nanmedian(err)) if aligned.any() else float("nan"),
        "cycle_noise_floor": floor,
        "decode_tps": _rel(rep_sum["decode_tps"], live_sum["decode_tps"]),
        "h2d_per_token": _rel(rep_sum["h2d_per_token"], live_sum["h2d_per_token"]),
        "copies_mismatches": copies_mis,
        "parts_ms": parts,
    }
    return Validation(selector=config.selector, slots=config.slots, live=live_sum,
                      replay={k: rep_sum[k] for k in ("decode_tps", "committed", "draft_nodes", "cycles",
                                                      "ms_per_cycle", "h2d_per_token", "output_tokens",
                                                      "mat", "prefetched_per_token") if k in rep_sum},
                      errors=errors, cycles=frame)


def noise_floor(live: LiveRun) -> float:
    """Median per-cycle error of the best deterministic predictor: each cycle's shape's median.

    Cycles of one shape (forward tokens, drafted levels, hits, copies) cost
    the same in any timing model that sees only those counts; the median of
    |t − median of its shape| / t over cycles in shapes of ≥ 3 cycles
    measures how much of the per-cycle error is the machine's own variation.
    O(cycles log cycles).
    """
    c = live.cycles
    if not live.num_cycles:
        return float("nan")
    shape = np.stack([c["draft_nodes"], c["drafted_levels"], c["hits"], c["copies"]], 1).astype(np.int64)
    _, group = np.unique(shape, axis=0, return_inverse=True)
    group = group.ravel()
    out = []
    for gid in np.unique(group):
        t = c["cycle_ms"][group == gid]
        if len(t) >= 3:
            out.append(np.abs(t - np.median(t)) / t)
    return float(np.median(np.concatenate(out))) if out else float("nan")


def meets_goals(v: Validation) -> bool:
    """Decode TPS within 5 %, median per-cycle error within 10 %, accepted tokens exact."""
    e = v.errors
    return (v.accepted_match and abs(e["decode_tps"]) <= GOAL_TPS_ERROR
            and e["cycle_median"] <= GOAL_CYCLE_ERROR)


def format_table(rows: list[Validation]) -> str:
    """A plain-text (markdown) table of validations."""
    head = ("| selector | slots | cycles live/replay | accepted mismatches | tokens/cycle | decode TPS live | "
            "replay | TPS error | per-cycle error median | p90 | noise floor | copies/token live | replay | error | "
            "goals |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for v in rows:
        r = v.row()
        lines.append(
            f"| {r['selector']} | {r['slots']} | {r['cycles_live']}/{r['cycles_replay']} | "
            f"{r['accepted_mismatches']} | {r['tokens_per_cycle']:.2f} | {r['tps_live']:.2f} | "
            f"{r['tps_replay']:.2f} | {100 * r['tps_error']:+.1f}% | {100 * r['cycle_error_median']:.1f}% | "
            f"{100 * r['cycle_error_p90']:.1f}% | {_pct(r['cycle_noise_floor']).lstrip('+')} | "
            f"{r['copies_per_token_live']:.2f} | "
            f"{r['copies_per_token_replay']:.2f} | {_pct(r['copies_error'])} | "
            f"{'met' if meets_goals(v) else 'MISSED'} |")
    return "\n".join(lines)


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%" if math.isfinite(x) else "n/a"


def assert_exact(rows: list[Validation]) -> None:
    """Raise :class:`CheckFailed` when a replay's accepted tokens differ from its live run's."""
    bad = [v for v in rows if not v.accepted_match]
    if bad:
        v = bad[0]
        raise CheckFailed(f"replay and live run differ in accepted tokens ({v.selector}, {v.slots} slots: "
                          f"{v.errors['accepted_mismatches']} cycles); greedy replay must be exact")
