"""Calibration probes and the NNLS fit of SpecFit's cost model (App. B, Eq. 4).

Protocol (App. B): decode each calibration prompt with EAGLE-3's rule (top-7
by path probability) and stop at the cycle boundaries (0, 4, 8 by default).
In each state, an untimed forward over root + full pool gives every node's
routes (the atlas), then for every size k = 0..7 two probe trees are timed,
``repeats`` times each: the probability prefix (top-k by path probability)
and the minimum-expert-union subtree of k nodes.  A probe's cycle time y is
drafting + target verification + commit (no selector time), measured with
the expert cache kept, and again with the cache cleared before the forward
(the clearing is timed too).  Averaging the repeats gives points (k, F, y)
and the fit minimises Σ (y − b_k − βF)² subject to b, β ≥ 0
(``scipy.optimize.nnls``).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import numpy as np

from hwprobe.device import synchronize
from hwprobe.pool import Pool, PoolSpec, build_pool
from hwprobe.routes import RouteRecorder
from hwprobe.specdecode import prefill, select_top_k
from hwprobe.tree import cache_length, compact_cache, crop_cache, greedy_verdict, tree_forward

KINDS = ("prefix", "min-union")
DEFAULT_SPEC = PoolSpec()


@dataclass
class ProbeRow:
    state: str          # "<request>@<cycle>"
    kind: str           # prefix | min-union
    k: int
    cache: bool
    repeat: int
    union: int          # F(S): Σ_ℓ |union of root + S routes| (Eq. 4 with exact routes)
    y_ms: float         # cycle time: draft + clear (no cache) + verify + commit
    draft_ms: float
    verify_ms: float
    commit_ms: float
    clear_ms: float
    copies: int

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def prefix_tree(pool: Pool, k: int) -> list[int]:
    return select_top_k(k)(pool) if k else []


def min_union_tree(pool: Pool, routes: np.ndarray, k: int) -> list[int] | None:
    """Exact: the ancestor-closed k-node subtree with the smallest F (ties: larger Σp, then smaller ids).

    ``routes``: ``[1 + m, L, k]`` (row 0 = root).  Depth-first over subtrees
    carrying union bitmaps; cost O(#subtrees of size ≤ k · m).
    """
    m = len(pool)
    if k > m:
        return None
    L, N = routes.shape[1], int(routes.max()) + 1 if routes.size else 1

    def mask(row) -> int:
        bits = 0
        for layer in range(L):
            for e in routes[row, layer]:
                bits |= 1 << (layer * N + int(e))
        return bits

    node_mask = [mask(1 + v) for v in range(m)]
    best = [None]

    def visit(chosen: list[int], allowed_from: int, bits: int):
        if len(chosen) == k:
            key = (bin(bits).count("1"), -sum(pool.p[j] for j in chosen), chosen)
            if best[0] is None or key < best[0]:
                best[0] = (key[0], key[1], list(chosen))
            return
        present = set(chosen)
        for v in range(allowed_from, m):       # increasing ids: every subtree once
            if pool.parent[v] < 0 or pool.parent[v] in present:
                chosen.append(v)
                visit(chosen, v + 1, bits | node_mask[v])
                chosen.pop()

    visit([], 0, mask(0))
    return best[0][2] if best[0] else None


def union_of(routes: np.ndarray, rows) -> int:
    rows = [0, *[1 + j for j in rows]]
    return int(sum(len(np.unique(routes[rows, layer])) for layer in range(routes.shape[1])))


def _time_probe(model, backend, drafter, context, cache, root, sel, spec, clear: bool, clock=time.perf_counter):
    device = next(model.parameters()).device

    def sync():
        return synchronize(device)

    n = cache_length(cache)
    sync()
    t0 = clock()
    pool = build_pool(drafter, context, spec, sync)          # drafting is part of the cycle
    sync()
    t1 = clock()
    clear_ms = backend.clear() if clear else 0.0
    sub = pool.subset(sel)
    t2 = clock()
    o = tree_forward(model, cache, root, sub)
    v = greedy_verdict(sub, o.logits[0])
    sync()
    t3 = clock()
    compact_cache(cache, n, [0] + [1 + j for j in v.path])
    sync()
    t4 = clock()
    crop_cache(cache, n)                                     # restore the state
    copies = backend.collect().total_copies
    draft, verify, commit = (t1 - t0) * 1e3, (t3 - t2) * 1e3, (t4 - t3) * 1e3
    return draft, clear_ms, verify, commit, copies


def probe_states(model, backend, drafter, prompts: list[tuple[str, list[int]]], *,
                 boundaries=(0, 4, 8), sizes=range(8), repeats: int = 2, spec: PoolSpec = DEFAULT_SPEC,
                 modes=(True, False), progress=None, clock=time.perf_counter) -> list[ProbeRow]:
    """Run the protocol; returns one row per timed probe (all repeats, both cache modes).

    ``clock``: what times the probes (``hwprobe.live.pick_clock``: the wall clock, or on a shared CPU the
    thread's CPU time).
    """
    rows: list[ProbeRow] = []
    rule = select_top_k(7)
    feats = getattr(drafter, "needs_features", False)
    for rid, prompt in prompts:
        drafter.start(list(prompt))
        cache, out, root = prefill(model, list(prompt), hidden_states=feats)
        if feats:
            drafter.observe(list(prompt), out)
        tokens = [root]
        backend.collect()
        for cycle in range(max(boundaries) + 1):
            context = list(prompt) + tokens
            if cycle in boundaries:
                pool = build_pool(drafter, context, spec)
                n = cache_length(cache)
                with RouteRecorder(model) as rec:                  # the atlas: untimed
                    tree_forward(model, cache, root, pool)
                    routes = rec.pop()
                crop_cache(cache, n)
                warm = prefix_tree(pool, min(len(pool), max(sizes)))
                _time_probe(model, backend, drafter, context, cache, root, warm, spec, clear=False, clock=clock)
                backend.collect()
                for cached in modes:
                    for k in sizes:
                        for kind in KINDS:
                            sel = prefix_tree(pool, k) if kind == "prefix" else min_union_tree(pool, routes, k)
                            if sel is None or len(sel) != k:
                                continue
                            F = union_of(routes, sel)
                            for r in range(repeats):
                                d, c, vms, cm, cp = _time_probe(model, backend, drafter, context, cache, root,
                                                                sel, spec, clear=not cached, clock=clock)
                                rows.append(ProbeRow(f"{rid}@{cycle}", kind, k, cached, r, F,
                                                     d + c + vms + cm, d, vms, cm, c, cp))
                                if progress is not None:
                                    progress(1)
            # advance one EAGLE-3 cycle (top-7) to the next state
            pool = build_pool(drafter, context, spec)
            sub = pool.subset(rule(pool))
            n = cache_length(cache)
            o = tree_forward(model, cache, root, sub, hidden_states=feats)
            v = greedy_verdict(sub, o.logits[0])
            keep = [0] + [1 + j for j in v.path]
            compact_cache(cache, n, keep)
            if feats:
                drafter.observe(context, o, keep)
            tokens += [sub.token[j] for j in v.path] + [v.next_root]
            root = v.next_root
        backend.collect()
    return rows


@dataclass
class Fit:
    b: list[float]
    beta: float
    points: int
    rmse_ms: float
    missing: list[int] = field(default_factory=list)   # sizes k without a probe point (b_k not identified)
    median_ms: float = 0.0                              # median of the fitted (repeat-averaged) probe times


def fit_cost_model(rows: list[ProbeRow], cache: bool, sizes=range(8)) -> Fit:
    """NNLS of y = b_k + βF over the repeat-averaged points of one cache mode (App. B)."""
    from scipy.optimize import nnls

    groups: dict[tuple, list[ProbeRow]] = {}
    for r in rows:
        if r.cache == cache:
            groups.setdefault((r.state, r.kind, r.k), []).append(r)
    sizes = list(sizes)
    A, y = [], []
    for (_, _, k), rs in sorted(groups.items()):
        a = [0.0] * (len(sizes) + 1)
        a[sizes.index(k)] = 1.0
        a[-1] = float(rs[0].union)
        A.append(a)
        y.append(statistics.fmean(r.y_ms for r in rs))
    if not A:
        raise ValueError("no probe points for this cache mode")
    A, y = np.asarray(A), np.asarray(y)
    coef, _ = nnls(A, y)
    resid = A @ coef - y
    seen = sorted({k for (_, _, k) in groups})
    return Fit([float(x) for x in coef[:-1]], float(coef[-1]), len(y), float(np.sqrt(np.mean(resid ** 2))),
               missing=[k for k in sizes if k not in seen], median_ms=float(np.median(y)))


def fit_problem(fit: Fit, mode: str) -> str | None:
    """Why ``fit`` cannot give b_k (as ``simmoe fit`` refuses), or None: a size without probes, or b_k = 0.

    A b_k with no probe point, or fitted to 0 (its points explained by β alone), is not identified
    by the measurements (SpecFit App. B fits one intercept per size).
    """
    if fit.missing:
        return (f"fit {mode}: no probe of size k = {', '.join(map(str, fit.missing))} (the pools were smaller): "
                "b_k cannot be fitted; lower --max-k or use other prompts")
    zero = [j for j, x in enumerate(fit.b) if not x > 0]
    if zero:
        return (f"fit {mode}: b_{zero[0]} came out 0 (the points with k = {zero[0]} are explained by beta "
                "alone); measure more --repeats, --boundaries or prompts")
    return None


def noise_warning(fit: Fit, mode: str) -> str | None:
    """A warning when the fit explains nothing: its rmse is above the median probe time."""
    if fit.rmse_ms > fit.median_ms:
        return (f"warning: the fit {mode} is noise: rmse {fit.rmse_ms:.3g} ms is above the median probe "
                f"{fit.median_ms:.3g} ms; time with --clock cpu on a shared CPU, or use more --repeats")
    return None
