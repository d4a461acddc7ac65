"""Assemble a synthetic :class:`~simmoe.trace.schema.Trace` from the generative model.

Random streams are independent per purpose and per request (NumPy
``SeedSequence`` spawn keys), so:

* the same seed gives the same trace, bit for bit;
* a trace of the first N requests is an exact prefix of the full-size one;
* changing a routing parameter leaves lengths, tokens and pools unchanged,
  and changing a draft parameter leaves the prompt/true-text routes
  unchanged (common random numbers for fitting and for tests).

Consistency that makes replay exact: the root of position t is the true
token t; along the agreeing chain of pool(t) the node at depth j carries the
true token and the root routes of position t + j; pools never reach past the
last output position.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from simmoe import __version__
from simmoe.errors import SimmoeError
from simmoe.synth.draft import draft_pools, predictability, stretches
from simmoe.synth.lengths import request_lengths
from simmoe.synth.params import SynthParams
from simmoe.synth.routing import (
    DriftingSampler,
    ExpertSampler,
    context_chain,
    modulate,
    popularity,
    resample,
    topic_segments,
)
from simmoe.synth.sampling import target_fields
from simmoe.trace.schema import SCHEMA_VERSION, SYNTHETIC, Requests, Trace

GENERATOR = f"simmoe.synth {__version__}"
# spawn-key purposes of the random streams
_POPULARITY, _LENGTHS, _DRAFT, _ROUTES, _TOPIC, _SAMPLING = 1, 2, 3, 4, 5, 6
_DATASET_KEY = {"gsm8k": 1, "cnndm": 2, "alpaca": 3, "humaneval": 4, "qa": 5, "mt_bench": 6}


def _rng(seed: int, *key: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=key)))


def model_popularity(params: SynthParams, seed: int) -> np.ndarray:
    """The model's per-layer popularity ``[L, N]`` (shared by every dataset with this seed)."""
    g = params.geometry
    return popularity(g.num_layers, g.num_experts, params.popularity_sigma, _rng(seed, _POPULARITY))


def request_sampler(params: SynthParams, probs: np.ndarray, seed: int, dkey: int, r: int,
                    tokens: int = 1) -> ExpertSampler | DriftingSampler:
    """Expert draws of request ``r`` (``tokens`` text rows): the model's popularity modulated by its topic."""
    if params.topic_sigma == 0.0:
        return ExpertSampler(probs)
    rng = _rng(seed, _TOPIC, dkey, r)
    if params.facet_share == 0.0 and params.topic_drift == 0.0:
        return ExpertSampler(modulate(probs, params.topic_sigma, rng))
    return DriftingSampler(topic_segments(probs, params.topic_sigma, params.facet_share, params.topic_drift,
                                          tokens, rng))


def _sorted_routes(sets: np.ndarray, dtype) -> np.ndarray:
    return np.sort(sets, axis=-1).astype(dtype)


def _request_routes(params: SynthParams, sampler: ExpertSampler | DriftingSampler, prompt_len: int,
                    pools, rng: np.random.Generator, with_nodes: bool = True):
    """Prefill union, root routes ``[n, L, k]`` and node routes ``[n, M, L, k]`` of one request."""
    g = params.geometry
    L, k = g.num_layers, g.top_k
    n, M = pools.valid.shape
    T = prompt_len + n
    C = context_chain(T, k, params.locality, sampler, rng)                       # [T, L, k]
    w = params.history_reuse
    hist = None
    if w > 0.0:
        # an earlier context of the true text for each position: recently used experts
        back = rng.integers(1, params.history_tokens + 1, size=T)
        hist = np.maximum(np.arange(T) - back, 0)
    def noise(ctx, at):
        """Token routes from contexts ``[m, L, k]`` of nodes predicting true-text rows ``at``."""
        m = len(ctx)
        src = None if hist is None else C[hist[at]].reshape(-1, k)
        return resample(ctx.reshape(-1, k), np.tile(np.arange(L), m), params.token_share,
                        sampler, rng, src, w, np.repeat(at, L)).reshape(m, L, k)
    R = noise(C, np.arange(T))
    prefill = np.zeros((L, g.num_experts), dtype=bool)
    if prompt_len:
        prefill[np.repeat(np.arange(L), prompt_len * k),
                R[:prompt_len].transpose(1, 0, 2).reshape(-1)] = True
    node_routes = np.zeros((n, M, L, k), dtype=np.int32)
    node_ctx = np.zeros((n, M, L, k), dtype=np.int32)
    child_ctx = np.zeros((n, M, L, k), dtype=np.int32)   # stepped context of a node's children
    has_child_ctx = np.zeros((n, M), dtype=bool)
    rows = np.arange(n)
    parent = pools.parent.astype(np.int64)
    for m in range(M if with_nodes else 0):
        live = pools.valid[:, m]
        if not live.any():
            continue
        u = prompt_len + rows + pools.level[:, m].astype(np.int64)   # row of C/R of the predicted position
        par = parent[:, m]
        par_chain = (par < 0) | pools.chain[rows, np.maximum(par, 0)]
        on_chain = live & pools.chain[:, m]
        sib_of_chain = live & ~on_chain & par_chain
        off = live & ~par_chain
        # chain nodes: the true position's context and routes
        i = np.flatnonzero(on_chain)
        node_routes[i, m] = R[u[i]]
        node_ctx[i, m] = C[u[i]]
        # a sibling of the true token: same prefix, same context, own token noise
        i = np.flatnonzero(sib_of_chain)
        node_ctx[i, m] = C[u[i]]
        # children of an off-chain node: one step from the parent's context, shared by siblings
        i = np.flatnonzero(off)
        need = i[~has_child_ctx[i, par[i]]]
        if need.size:
            stepped = resample(node_ctx[need, par[need]].reshape(-1, k), np.tile(np.arange(L), need.size),
                               params.locality, sampler, rng, steps=np.repeat(u[need], L)).reshape(need.size, L, k)
            child_ctx[need, par[need]] = stepped
            has_child_ctx[need, par[need]] = True
        node_ctx[i, m] = child_ctx[i, par[i]]
        noisy = np.flatnonzero(sib_of_chain | off)
        if noisy.size:
            node_routes[noisy, m] = noise(node_ctx[noisy, m], u[noisy])
    return prefill, R[prompt_len:], node_routes


def generate(params: SynthParams, *, seed: int = 0, num_requests: int | None = None,
             subset=None,
             preset: str | None = None, fitted_to: tuple[str, ...] = (),
             routes: bool = True, node_routes: bool = True,
             progress: Callable[[int, int], None] | None = None,
             temperature: float = 0.0, drafter=None) -> Trace:
    """A synthetic trace of the first ``num_requests`` (default: all) questions of ``params.dataset``.

    ``subset`` (indices into the question list, increasing) picks requests
    instead; each is identical to its request in the full trace (calibration
    fits on representative subsets this way).
    ``routes=False`` skips the routes (all zeros; for fitting draft
    parameters only — such a trace is not for replay); ``node_routes=False``
    skips only the pool nodes' routes (the prefill unions and root routes are
    the same as in the full trace: enough for AR statistics).  ``progress(done,
    total)`` is called after each request.  ``temperature > 0`` adds the
    target's distributions at that temperature (:mod:`simmoe.synth.sampling`,
    own random stream: everything else is the same as at 0).  ``drafter``: a
    :class:`simmoe.api.Drafter` whose pool shape ``params.pool`` must be and
    whose acceptance model draws the pools (None or ``eagle3``: EAGLE-3's, and
    the trace is what it was before drafters were components; any other is
    named in the metadata).  Cost O(P·M·L·k) for P positions,
    M nodes per pool; about 15 s for the 80-request GSM8K preset on one core.
    """
    g = params.geometry
    dkey = _DATASET_KEY.get(params.dataset, 0)
    with_nodes = bool(node_routes)
    level_mean, plan = _level_mean(params, drafter), _level_plan(drafter)
    runner_up = drafter.sibling_share() if level_mean is not None and hasattr(drafter, "sibling_share") else None
    index = _request_index(params, num_requests, subset)
    R = len(index)
    qids, prompt_len, out_len = request_lengths(params, _rng(seed, _LENGTHS, dkey),
                                                int(index[-1]) + 1)
    qids, prompt_len, out_len = qids[index], prompt_len[index], out_len[index]
    probs = model_popularity(params, seed) if routes else None
    parts: dict[str, list[np.ndarray]] = {name: [] for name in (
        "root_token", "root_routes", "node_count", "parent", "level", "token", "q", "p",
        "agree", "node_routes", "tprob", "tcdf")}
    prefill = np.zeros((R, g.num_layers, g.num_experts), dtype=bool)
    for r in range(R):
        key = int(index[r])               # streams follow the request, not its place here
        pre = _request_parts(parts, params, seed=seed, dkey=dkey, key=key, prompt_len=int(prompt_len[r]),
                             n=int(out_len[r]), probs=probs, with_nodes=with_nodes, temperature=temperature,
                             level_mean=level_mean, plan=plan, runner_up=runner_up)
        if pre is not None:
            prefill[r] = pre
        if progress is not None:
            progress(r + 1, R)
    meta = _synthetic_meta(params, seed=seed, preset=preset, fitted_to=fitted_to, routes=routes,
                           with_nodes=with_nodes, index=index, subset=subset is not None, temperature=temperature)
    if level_mean is not None:   # EAGLE-3's traces stay as they were: only another drafter is named
        meta["drafter"] = {"name": drafter.name, **({"spec": drafter.spec} if getattr(drafter, "spec", None) else {}),
                           "params": drafter.parameters(),
                           "acceptance": "synthetic: the drafter's acceptance model (simmoe.drafters)"}
    requests = Requests(
        request_id=np.array([str(int(x)) for x in qids], dtype=object),
        dataset=np.array([params.dataset] * R, dtype=object),
        prompt_len=prompt_len.astype(np.int32),
        output_len=out_len.astype(np.int32),
        prefill_union=prefill,
        prefill_time_ms=np.full(R, np.nan),
    )
    return _assemble(parts, meta, requests, out_len, params, temperature)


def _level_mean(params: SynthParams, drafter) -> Callable[[np.ndarray, int], np.ndarray] | None:
    """The drafter's acceptance model on this workload (None: EAGLE-3's own, the generator's default)."""
    if drafter is None or drafter.name == "eagle3":
        return None
    if drafter.pool_shape() != params.pool:
        raise SimmoeError(f"drafter {drafter.name}: its pool shape {drafter.pool_shape().to_dict()} is not the "
                          f"parameters' {params.pool.to_dict()}")
    # the workload's mean predictability: the stationary mix of easy and hard stretches (simmoe.synth.draft)
    mean_z = params.easy_share * params.easy_confidence + (1 - params.easy_share) * params.hard_confidence

    def level_mean(z: np.ndarray, level: int) -> np.ndarray:
        return np.asarray(drafter.level_mean(z, level, mean_z), dtype=np.float64)

    return level_mean


def _level_plan(drafter) -> list[tuple[int, int]] | None:
    """The drafter's own expansion, (parents, children) per level, where it has one (None: EAGLE's)."""
    plan = getattr(drafter, "level_plan", None) if drafter is not None else None
    return [(int(b), int(k)) for b, k in plan()] if plan is not None else None


def _request_index(params: SynthParams, num_requests: int | None, subset) -> np.ndarray:
    """Question indices of the requests to generate: the first ``num_requests``, or ``subset``."""
    if subset is None:
        return np.arange(params.num_requests if num_requests is None else int(num_requests))
    index = np.asarray(subset, dtype=np.int64)
    if index.size == 0 or (np.diff(index) <= 0).any() or index[0] < 0:
        raise SimmoeError("subset: give increasing, distinct, non-negative request indices")
    return index


def _request_parts(parts: dict[str, list[np.ndarray]], params: SynthParams, *, seed: int, dkey: int, key: int,
                   prompt_len: int, n: int, probs: np.ndarray | None, with_nodes: bool,
                   temperature: float, level_mean=None, plan=None, runner_up=None) -> np.ndarray | None:
    """Append request ``key``'s text, pools and routes to ``parts``; its prefill union (None without routes)."""
    g = params.geometry
    L, k, dtype = g.num_layers, g.top_k, g.route_dtype
    drng = _rng(seed, _DRAFT, dkey, key)
    true_tokens = drng.integers(0, params.vocab_size, size=n).astype(np.int32)
    easy = stretches(n, params.easy_share, params.stretch_tokens, drng)
    z = predictability(easy, params, drng)
    pools = draft_pools(true_tokens, z, params, drng, level_mean, plan, runner_up)
    v = pools.valid
    parts["root_token"].append(true_tokens)
    parts["node_count"].append(v.sum(axis=1))
    for name in ("parent", "level", "token", "q", "p", "agree"):
        parts[name].append(getattr(pools, name)[v])
    if temperature > 0:
        tp, tc = target_fields(pools, z, params, float(temperature), _rng(seed, _SAMPLING, dkey, key))
        parts["tprob"].append(tp[v])
        parts["tcdf"].append(tc[v])
    if probs is None:                    # routes=False
        parts["root_routes"].append(np.zeros((n, L, k), dtype))
        parts["node_routes"].append(np.zeros((int(v.sum()), L, k), dtype))
        return None
    sampler = request_sampler(params, probs, seed, dkey, key, prompt_len + n)
    pre, root_routes, nodes_r = _request_routes(
        params, sampler, prompt_len, pools, _rng(seed, _ROUTES, dkey, key), with_nodes)
    parts["root_routes"].append(_sorted_routes(root_routes, dtype))
    parts["node_routes"].append(_sorted_routes(nodes_r[v], dtype))
    return pre


def _synthetic_meta(params: SynthParams, *, seed: int, preset: str | None, fitted_to: tuple[str, ...],
                    routes: bool, with_nodes: bool, index: np.ndarray, subset: bool,
                    temperature: float) -> dict[str, Any]:
    """The trace's ``meta``: SYNTHETIC provenance saying what was simulated and what left out."""
    meta: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "provenance": {
            "kind": SYNTHETIC,
            "generator": GENERATOR,
            "seed": int(seed),
            "preset": preset,
            "fitted_to": list(fitted_to),
            "note": ("synthetic: generated by simmoe synth from a seeded generative model, "
                     "not recorded on hardware; routes, tokens and agreement are simulated"
                     + ("; the routes are all zeros (routes=False)" if not routes else "")
                     + ("; pool node routes are all zeros (node_routes=False)"
                        if routes and not with_nodes else "")
                     + (f"; parameters fitted to: {'; '.join(fitted_to)}" if fitted_to else "")),
        },
        "geometry": params.geometry.to_dict(),
        "pool_shape": params.pool.to_dict(),
        "hardware": None,
        "dataset": params.dataset,
        "num_requests_full": int(params.num_requests),
        "num_requests": len(index),
        **({"subset": index.tolist()} if subset else {}),
        "synth_params": params.to_dict(),
        "prompt_tokens": "estimated from Spec-Bench word counts (simmoe.synth.prompts)",
    }
    if temperature > 0:  # the greedy text, with the target's distributions at T (simmoe.trace.sampling)
        meta["sampling"] = {"temperature": float(temperature), "seed": None, "text": "greedy"}
    return meta


def _assemble(parts: dict[str, list[np.ndarray]], meta: dict[str, Any], requests: Requests,
              out_len: np.ndarray, params: SynthParams, temperature: float) -> Trace:
    """The flat trace columns from the per-request parts."""
    L, k, dtype = params.geometry.num_layers, params.geometry.top_k, params.geometry.route_dtype
    R = len(out_len)
    counts = np.concatenate(parts["node_count"])
    node_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    def cat(name, dt):
        return (np.concatenate(parts[name]).astype(dt) if parts[name]
                else np.zeros(0, dt))

    return Trace(
        meta=meta, requests=requests,
        pos_request=np.repeat(np.arange(R, dtype=np.int32), out_len),
        pos_index=np.concatenate([np.arange(n, dtype=np.int32) for n in out_len]),
        root_token=cat("root_token", np.int32),
        root_routes=np.concatenate(parts["root_routes"]).astype(dtype),
        node_ptr=node_ptr,
        node_parent=cat("parent", np.int16), node_level=cat("level", np.int8),
        node_token=cat("token", np.int32), node_q=cat("q", np.float32),
        node_p=cat("p", np.float32), node_agree=cat("agree", bool),
        node_routes=np.concatenate(parts["node_routes"]).astype(dtype).reshape(-1, L, k),
        node_target_prob=cat("tprob", np.float32) if temperature > 0 else None,
        node_target_cdf=cat("tcdf", np.float32) if temperature > 0 else None,
    )
