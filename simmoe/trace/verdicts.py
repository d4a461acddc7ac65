"""Sampled tree verification (temperature > 0), lossless in distribution: the verdicts a trace implies.

The verdict of every pool node is computed from what the trace records (the
target's distribution at each node, :mod:`simmoe.trace.sampling`) and a seed
alone, so it sits with the trace: the replay's verification stage
(:mod:`simmoe.replay.verification`), the synthetic presets' fit of Mat at
temperature 1 (:mod:`simmoe.synth.evict_presets`) and ``hwprobe``'s live
sampling draw with the same numbers.

**The rule** (EVICT §2.1, Eq. 3; EAGLE-2/3's ``evaluate_posterior``, which
is multi-draft speculative sampling with the proposal of each tried child a
point mass, ``qx = 1``, because the tree is drafted by top-k, not sampled).
The verified subtree S is consumed level by level.  At the node u the path
has reached, try u's children *that are in S*, in order; accept child c with
probability p(c) under the current residual target distribution p(· | path
to u) at temperature T; on rejection set p(c) to 0 and renormalise (Eq. 3)
and try the next verified child; on acceptance move to c.  When every
verified child of u is rejected (or u has none), the bonus token is drawn
from the residual.  With the drafter's own q as the proposal, the general
rule reads "accept with min(1, p/q), residual max(0, p − q)"; for a
deterministic top-k child the proposal is the point mass on it, which gives
exactly the above, and only that keeps the output distributed as p (with
p = q and the drafter's q the top child would always be accepted).

**What it implies.** Trying verified children c_1, c_2, … in order accepts
c_i with probability (1 − Σ_{j<i} p(c_j)) · p(c_i)/(1 − Σ_{j<i} p(c_j)) =
p(c_i): the same as drawing one token y ~ p(· | path) and accepting it when
it is a verified child, whatever S and the order.  So a node v is on the
accepted path with probability Π_{u ∈ path(v)} p(u) (EVICT Eq. 14) and
E[accepted] = Σ_{v ∈ S} Π p (Eq. 15).

**How the replay draws.** y is drawn by the inverse CDF of p(· | path) in
vocabulary order, with one uniform per (seed, request id, output position)
(:func:`uniforms`): the child whose interval [cdf, cdf + p) holds the
uniform is the draw (a trace stores both numbers per node,
:mod:`simmoe.trace.sampling`).  Consequences:

* every selector of one replay sees the same draws (common random numbers);
  each cycle's uniforms are fresh, since a cycle at position t uses those of
  t + 1 … t + 1 + accepted and the next cycle starts after them;
* the draws are reproducible from the seed, and a trace recorded by
  ``hwprobe record --temperature T --seed S`` (which samples its text with
  the same uniforms) is reproduced exactly by a replay with seed S: the
  draws follow the recorded text, as greedy verification does at T = 0;
* with another seed, or a synthetic trace (greedy text), each cycle's
  acceptance is still exactly distributed, but the text after a cycle is
  the recorded one rather than the drawn one (documented in docs/replay.md).

:func:`sequential_accept` is the rule as stated (one uniform per tried
child) and :func:`exact_accept_distribution` its exact outcome law by
enumeration; the tests check the interval draws against both.
"""

from __future__ import annotations

import hashlib

import numpy as np

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser (Steele, Lea and Flood 2014), elementwise on uint64 (wrapping)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def request_key(request_id) -> int:
    """A 64-bit key of a request id (its string form): the first 8 bytes of its SHA-256."""
    return int.from_bytes(hashlib.sha256(str(request_id).encode()).digest()[:8], "little")


def uniforms(seed: int, key, position) -> np.ndarray:
    """Uniforms in [0, 1) keyed by (seed, request key, output position); broadcasts ``key``, ``position``.

    A counter-based generator (SplitMix64 mixing of the three integers), so
    the uniform of one (request, position) does not depend on which others
    are drawn: ``hwprobe`` and the replay compute the same numbers.  53 bits.
    """
    with np.errstate(over="ignore"):
        k = np.asarray(key, dtype=np.uint64)
        pos = np.asarray(position, dtype=np.int64).astype(np.uint64)
        x = _mix(np.asarray(np.uint64(int(seed) & 0xFFFFFFFFFFFFFFFF) + _GOLDEN))
        x = _mix(x ^ k)
        x = _mix((x + _GOLDEN) ^ pos)
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def sampled_agree(trace, temperature: float, seed: int) -> np.ndarray:
    """Per node: is it the target's draw at its parent?  (bool [M]; ``node_agree`` at T = 0).

    A node at level j of the pool at output position t predicts position
    s = t + j; it is the draw when the uniform of (seed, request, s) falls in
    its interval [cdf, cdf + p).  Siblings' intervals are disjoint, so at
    most one child of a node is the draw, as at T = 0.  O(M), vectorised.
    The caller checks that the trace holds distributions at ``temperature``
    (:func:`simmoe.trace.sampling.check_replay_temperature`).
    """
    if temperature == 0.0:
        return np.asarray(trace.node_agree, dtype=bool)
    ptr = np.asarray(trace.node_ptr, dtype=np.int64)
    node_pos = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))
    keys = np.array([request_key(r) for r in trace.requests.request_id], dtype=np.uint64)
    s = (np.asarray(trace.pos_index, dtype=np.int64)[node_pos]
         + np.asarray(trace.node_level, dtype=np.int64))
    u = uniforms(seed, keys[np.asarray(trace.pos_request, dtype=np.int64)[node_pos]], s)
    lo = np.asarray(trace.node_target_cdf, dtype=np.float64)
    return (lo <= u) & (u < lo + np.asarray(trace.node_target_prob, dtype=np.float64))


def inverse_cdf(probs: np.ndarray, u: float) -> int:
    """The token whose interval of the cumulative distribution (vocabulary order) holds ``u``.

    ``probs`` need not sum to exactly 1 (float rounding): a ``u`` past the
    total picks the last token of positive probability.
    """
    c = np.cumsum(np.asarray(probs, dtype=np.float64))
    i = int(np.searchsorted(c, u, side="right"))
    if i >= len(c):
        i = int(np.flatnonzero(np.asarray(probs) > 0)[-1])
    return i


# --------------------------------------------------------------------------
# the rule as stated, and its exact law (references for tests)
# --------------------------------------------------------------------------
def _children(parents: np.ndarray, nodes) -> dict[int, list[int]]:
    """Verified children of every node (-1 = root), in pool order."""
    kids: dict[int, list[int]] = {}
    for v in sorted(int(x) for x in nodes):
        kids.setdefault(int(parents[v]), []).append(v)
    return kids


def sequential_accept(parents: np.ndarray, probs: np.ndarray, nodes, rng: np.random.Generator) -> list[int]:
    """The accepted path (node ids) under EVICT Eq. 3 applied to the verified subset ``nodes``.

    At each reached node, its verified children are tried in pool order with
    a fresh uniform each: child c is accepted when r < p(c)/(1 − rejected
    mass).  ``probs[v]`` is p_T(token(v) | path to v's parent).
    """
    kids = _children(np.asarray(parents), nodes)
    path, u = [], -1
    while True:
        rejected = 0.0
        for c in kids.get(u, []):
            rest = 1.0 - rejected
            if rest > 0 and rng.random() < float(probs[c]) / rest:
                path.append(c)
                u = c
                break
            rejected += float(probs[c])
        else:
            return path


def exact_accept_distribution(parents: np.ndarray, probs: np.ndarray, nodes) -> dict[tuple[int, ...], float]:
    """Probability of each accepted path under :func:`sequential_accept`, by enumerating the rule.

    Follows the residual recursion literally (accept with p/(residual mass),
    on rejection remove the child's mass), without using its closed form.
    Exponential in nothing: O(|S|) paths, O(|S|²) work.
    """
    kids = _children(np.asarray(parents), nodes)
    out: dict[tuple[int, ...], float] = {}

    def walk(u: int, path: tuple[int, ...], mass: float) -> None:
        rejected, stay = 0.0, 1.0
        for c in kids.get(u, []):
            rest = 1.0 - rejected
            a = min(1.0, float(probs[c]) / rest) if rest > 0 else 0.0
            walk(c, path + (c,), mass * stay * a)
            stay *= 1.0 - a
            rejected += float(probs[c])
        out[path] = out.get(path, 0.0) + mass * stay

    walk(-1, (), 1.0)
    return out


def expected_accepted(parents: np.ndarray, probs: np.ndarray, nodes) -> float:
    """E[accepted draft tokens] = Σ_{v ∈ S} Π_{u ∈ path(v)} p(u) (EVICT Eq. 15)."""
    parents = np.asarray(parents)
    reach: dict[int, float] = {}
    total = 0.0
    for v in sorted(int(x) for x in nodes):
        a = int(parents[v])
        reach[v] = (1.0 if a < 0 else reach[a]) * float(probs[v])
        total += reach[v]
    return total
