"""Synthetic expert routes: popularity, context locality, token noise.

Generative model (docs/synthetic-traces.md, "Routes"):

* Per-layer popularity of the model: ``π_ℓ(e) ∝ exp(σ·g_{ℓ,e})`` with
  ``g ~ N(0, 1)``; each request modulates it by its topic,
  ``π_{r,ℓ}(e) ∝ π_ℓ(e)·exp(σ_topic·h_{r,ℓ,e})``, and every fresh expert draw
  of that request in layer ℓ is from ``π_{r,ℓ}`` (experts a request favours
  recur, so a cache keeps them).
* Context: every prefix owns a latent set ``C`` of ``k`` distinct experts per
  layer.  One token later the context is ``step(C)``: each member survives
  with probability ``locality``, the rest are redrawn from ``π_ℓ`` among the
  experts not kept (``resample``).  Along the true text this is a Markov chain
  ``C_{u+1} = step(C_u)`` (locality between consecutive tokens); a draft node
  off the true text steps from its parent's context.
* Token routes: ``R = resample(C, keep=token_share)``.  Siblings (different
  tokens after the same prefix) share one context and differ only by this
  noise; a child shares its parent's context through one ``step``.  This
  makes a tree's expert union grow far slower than independent routing.

* Topic facets and drift (``facet_share`` and ``topic_drift``, both 0 by
  default, and then none of this applies): the request's topic logits
  change along its text, piecewise constant over segments of
  :data:`TOPIC_SEGMENT_TOKENS` tokens: ``h = sqrt(1 − f)·s + sqrt(f)·φ``.
  ``φ`` is one of :data:`TOPIC_FACETS` facets of the request, visited in
  turn, one a segment (share ``f``: the request's routings spread over more
  experts, evenly over its text, so its hot set stays put); ``s`` is a
  stationary AR(1) whose correlation after τ tokens is ``exp(−drift·τ)``
  (the hot set wanders within the request).  Each segment's logits have the
  static topic's N(0, 1) law, so each token's draw is as concentrated as
  before and the one-token statistics barely move.

Sampling from ``π_ℓ`` uses a quantised inverse-CDF table of 2^14 entries per
layer: one gather per draw, O(1); a drifting topic's draws search the
segment's cumulative popularity instead, O(log(S·L·N)).
"""

from __future__ import annotations

import numpy as np

TABLE_BITS = 14
_TABLE_SIZE = 1 << TABLE_BITS
# Tokens per segment of a faceted or drifting topic: short enough that a request's
# halves see many segments, long enough that few token steps cross a segment boundary.
TOPIC_SEGMENT_TOKENS = 8
# Facets a request's topic visits in turn: each half of a request of a few hundred
# tokens sees every facet several times (so they spread routings without moving its hot set).
TOPIC_FACETS = 8


def popularity(num_layers: int, num_experts: int, sigma: float,
               rng: np.random.Generator) -> np.ndarray:
    """Per-layer expert popularity ``[L, N]`` (rows sum to 1), log-normal with spread ``sigma``."""
    return modulate(np.full((num_layers, num_experts), 1.0 / num_experts), sigma, rng)


def modulate(probs: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """``probs · exp(σ·g)`` renormalised per row, ``g ~ N(0, 1)`` per entry (a request's topic)."""
    logits = np.log(probs) + sigma * rng.standard_normal(probs.shape)
    w = np.exp(logits - logits.max(axis=1, keepdims=True))
    return w / w.sum(axis=1, keepdims=True)


def sampling_table(probs: np.ndarray) -> np.ndarray:
    """Inverse-CDF lookup ``[L, 2^14]``: expert e fills a run of entries proportional to π_ℓ(e).

    Every expert gets at least one entry (so none is ever excluded, whatever
    the spread); the remaining entries are shared by largest remainders.
    O(L·(N log N + 2^14)).
    """
    L, N = probs.shape
    extra = _TABLE_SIZE - N
    share = probs * extra
    counts = np.floor(share).astype(np.int64)
    short = extra - counts.sum(axis=1)
    order = np.argsort(-(share - counts), axis=1, kind="stable")
    bump = np.arange(N)[None, :] < short[:, None]
    np.put_along_axis(counts, order, np.take_along_axis(counts, order, 1) + bump, axis=1)
    counts += 1
    return np.stack([np.repeat(np.arange(N), counts[layer]) for layer in range(L)]).astype(np.int32)


class ExpertSampler:
    """Draws experts from per-layer popularity; every draw is O(1)."""

    def __init__(self, probs: np.ndarray):
        self.probs = probs
        self.num_layers, self.num_experts = probs.shape
        self._flat = sampling_table(probs).reshape(-1)

    def draw(self, layers: np.ndarray, rng: np.random.Generator, steps: np.ndarray | None = None) -> np.ndarray:
        """One expert per entry of ``layers`` (int array), as int32; ``steps`` (text rows) are not needed here."""
        r = rng.integers(0, _TABLE_SIZE, size=layers.shape, dtype=np.int64)
        return self._flat[layers.astype(np.int64) * _TABLE_SIZE + r]


class DriftingSampler:
    """Draws experts from a popularity that changes along the text: ``probs[S, L, N]``, one per segment.

    A draw for text row u uses segment ``min(u // TOPIC_SEGMENT_TOKENS, S − 1)``;
    inverse CDF by one search over every segment's and layer's cumulative
    popularity laid end to end (virtual layer v's runs from v to v + 1).
    """

    def __init__(self, probs: np.ndarray):
        self.probs = probs
        self.segments, self.num_layers, self.num_experts = probs.shape
        cdf = np.cumsum(probs, axis=-1)
        cdf /= cdf[..., -1:]
        self._cdf = (cdf + np.arange(self.segments * self.num_layers).reshape(self.segments, -1, 1)).reshape(-1)

    def draw(self, layers: np.ndarray, rng: np.random.Generator, steps: np.ndarray | None = None) -> np.ndarray:
        """One expert per entry of ``layers`` at text rows ``steps`` (same shape), as int32."""
        seg = np.zeros(layers.shape, np.int64) if steps is None else np.minimum(
            np.asarray(steps, dtype=np.int64) // TOPIC_SEGMENT_TOKENS, self.segments - 1)
        v = seg * self.num_layers + layers.astype(np.int64)
        idx = np.searchsorted(self._cdf, v + rng.random(layers.shape), side="right") - v * self.num_experts
        return np.minimum(idx, self.num_experts - 1).astype(np.int32)


def topic_segments(probs: np.ndarray, sigma: float, facet_share: float, drift: float, tokens: int,
                   rng: np.random.Generator) -> np.ndarray:
    """Per-segment popularity ``[S, L, N]`` of a request with topic facets and drift over ``tokens`` text rows.

    The slow part starts from the static topic's draw (the first normal draw
    of ``rng``, as :func:`modulate` makes it), so small knobs change a request
    little.  O(S·L·N).
    """
    S = max(1, -(-tokens // TOPIC_SEGMENT_TOKENS))
    slow = np.empty((S, *probs.shape))
    slow[0] = rng.standard_normal(probs.shape)
    rho = float(np.exp(-drift * TOPIC_SEGMENT_TOKENS))
    innovations = rng.standard_normal((S - 1, *probs.shape))
    for s in range(1, S):
        slow[s] = rho * slow[s - 1] + np.sqrt(1.0 - rho * rho) * innovations[s - 1]
    facets = rng.standard_normal((TOPIC_FACETS, *probs.shape))
    h = np.sqrt(1.0 - facet_share) * slow + np.sqrt(facet_share) * facets[np.arange(S) % TOPIC_FACETS]
    logits = np.log(probs)[None] + sigma * h
    w = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return w / w.sum(axis=-1, keepdims=True)


def unique_ints(a: np.ndarray) -> np.ndarray:
    """``np.unique`` of a 1-D integer array (sorted distinct values), by one sort.

    numpy's hash-based ``unique`` costs ~10x a sort on the arrays of thousands
    of ids the redraw loops below pass it thousands of times per trace.
    """
    if a.size < 64:
        return np.unique(a)
    s = np.sort(a)
    return s[np.r_[True, s[1:] != s[:-1]]]


def resample(sets: np.ndarray, layers: np.ndarray, keep: float, sampler: ExpertSampler | DriftingSampler,
             rng: np.random.Generator, source: np.ndarray | None = None,
             reuse: float = 0.0, steps: np.ndarray | None = None) -> np.ndarray:
    """Keep each member of each row with probability ``keep``; refill to k distinct experts.

    ``sets``: int ``[M, k]`` rows of distinct experts; ``layers``: int ``[M]``
    (the layer of each row).  Refills draw from the row's layer popularity,
    or with probability ``reuse`` pick a random member of the row's
    ``source`` set (an earlier context: recently used experts); a refill that
    repeats another member of its row is redrawn (so a dropped expert may
    come back).  ``steps``: int ``[M]``, the text row of each row (for a
    drifting topic).  Returns int32 ``[M, k]`` (unsorted).
    Complexity O(M·k²) for the clash check, plus redraws of the clashing rows.
    """
    M, k = sets.shape
    drop = rng.random((M, k)) >= keep
    out = sets.astype(np.int32, copy=True)
    r_idx, s_idx = np.nonzero(drop)
    out[r_idx, s_idx] = _refill(r_idx, layers, sampler, rng, source, reuse, steps)
    iu, ju = np.triu_indices(k, 1)
    rows = r_idx[np.r_[True, r_idx[1:] != r_idx[:-1]]] if r_idx.size else r_idx
    while rows.size:
        sub = out[rows]
        eq = sub[:, iu] == sub[:, ju]
        bad = eq.any(axis=1)
        if not bad.any():
            break
        rows = rows[bad]
        r, pair = np.nonzero(eq[bad])
        a, b = iu[pair], ju[pair]
        rr = rows[r]
        # redraw a refilled member of the clashing pair (kept members never clash)
        slot = np.where(drop[rr, b], b, a)
        key = unique_ints(rr * k + slot)
        rr, slot = key // k, key % k
        out[rr, slot] = sampler.draw(layers[rr], rng, None if steps is None else steps[rr])
    return out


def _refill(rows, layers, sampler, rng, source, reuse, steps):
    cand = sampler.draw(layers[rows], rng, None if steps is None else steps[rows])
    if source is not None and reuse > 0.0 and rows.size:
        pick = rng.random(rows.size) < reuse
        member = source[rows[pick], rng.integers(0, source.shape[1], size=int(pick.sum()))]
        cand[pick] = member
    return cand


def context_chain(steps: int, k: int, locality: float, sampler: ExpertSampler | DriftingSampler,
                  rng: np.random.Generator, max_rounds: int = 10_000) -> np.ndarray:
    """Contexts ``C_0 .. C_{steps-1}`` of a text, ``[steps, L, k]`` int32 (slots unsorted).

    Vectorised in time: each (layer, slot) holds an expert for a run of steps
    (a new run starts with probability ``1 - locality`` per step), each run's
    expert drawn from popularity (at the step the run starts); runs that hold the same expert as another
    slot of the same layer at the same step are redrawn (the later-started
    run yields) until every context has k distinct experts.  The result is
    the Markov chain ``C_{u+1} = step(C_u)`` with rejection of duplicates.
    Complexity O(steps·L·k²) per round; few rounds in practice.
    """
    L = sampler.num_layers
    change = rng.random((L, k, steps)) >= locality
    change[:, :, 0] = True
    flat = change.reshape(-1)
    seg = (np.cumsum(flat) - 1).reshape(L, k, steps)
    seg_layer = np.broadcast_to(np.arange(L)[:, None, None], (L, k, steps)).reshape(-1)[flat]
    seg_start = np.broadcast_to(np.arange(steps), (L, k, steps)).reshape(-1)[flat]
    seg_slot = np.broadcast_to(np.arange(k)[None, :, None], (L, k, steps)).reshape(-1)[flat]
    seg_pos = np.flatnonzero(flat)
    seg_len = np.diff(np.append(seg_pos, flat.size))   # runs never cross a (layer, slot) column
    vals = sampler.draw(seg_layer, rng, seg_start)
    iu, ju = np.triu_indices(k, 1)
    segt = seg.transpose(0, 2, 1)                       # [L, steps, k]
    rows = None                                         # (layer, step) rows to re-check
    for _ in range(max_rounds):
        if rows is None:
            s = segt.reshape(-1, k)
        else:
            s = segt.reshape(-1, k)[rows]
        v = vals[s]
        clash = v[:, iu] == v[:, ju]                    # [rows, pairs]
        r_idx, pair = np.nonzero(clash)
        if r_idx.size == 0:
            break
        a, b = s[r_idx, iu[pair]], s[r_idx, ju[pair]]
        # the run that started later yields (ties: the higher slot)
        later = np.where((seg_start[a] > seg_start[b])
                         | ((seg_start[a] == seg_start[b]) & (seg_slot[a] > seg_slot[b])), a, b)
        redraw = unique_ints(later)
        vals[redraw] = sampler.draw(seg_layer[redraw], rng, seg_start[redraw])
        # only the (layer, step) rows a redrawn run covers can clash now
        lens = seg_len[redraw]
        first = seg_layer[redraw] * steps + seg_start[redraw]
        offs = np.arange(lens.sum()) - np.repeat(np.cumsum(lens) - lens, lens)
        rows = unique_ints(np.repeat(first, lens) + offs)
    else:  # pragma: no cover - would need an absurd popularity spread
        raise RuntimeError("context chain did not converge")
    return vals[segt].transpose(1, 0, 2)
