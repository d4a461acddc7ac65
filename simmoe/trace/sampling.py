"""What a trace carries for sampled verification (temperature > 0), and its checks.

Schema version 2 adds two things to the trace format of version 1
(``docs/trace-format.md``, "Sampled verification"):

* ``meta["sampling"]``: ``{"temperature": T, "seed": S or null, "text": "sampled" | "greedy"}``
  — the temperature T > 0 of the target distributions recorded below; the
  seed of the position-keyed uniforms the recorded text was sampled with
  (``null`` when the text was not sampled that way); and whether the
  committed text is a sample at T (``hwprobe record --temperature T``) or
  the greedy text (``simmoe synth --temperature T``, whose pools and text
  are those of temperature 0);
* per pool node, besides the draft conditional q (``node_q``):
  ``node_target_prob`` = p_T(x | path), the target's probability at
  temperature T of the node's token x given the node's path, and
  ``node_target_cdf`` = Σ_{y < x} p_T(y | path), the target mass of the
  tokens with a smaller vocabulary id.  The node's token owns the interval
  ``[cdf, cdf + p)`` of [0, 1); siblings own disjoint intervals in the
  order of their token ids.

Why these two numbers and nothing else: EAGLE-2/3 draft the tree by top-k,
so a node's children are fixed tokens, not draws from q; the lossless rule
(EVICT §2.1, Eq. 3; EAGLE's ``evaluate_posterior``) tries them one by one,
accepting child c with probability p(c) under the residual target
distribution and zeroing c's mass on rejection.  The residual after
rejecting a set R of siblings is p(·)/(1 − Σ_R p), so the rule needs the
children's p only — no mass of tokens outside the pool.  That rule picks
child c with probability exactly p(c) whatever S and the order of trying:
it is the same as drawing y ~ p(· | path) once and accepting y when it is a
verified child (:mod:`simmoe.trace.verdicts`).  Drawing y by the inverse
CDF in vocabulary order with a uniform keyed by (seed, request, output
position) needs, per node, exactly the interval above; with the recording's
seed those draws reproduce the recorded text (``hwprobe`` samples it so).

A version-1 file (or a version-2 file without ``meta["sampling"]``) is
greedy-only: it replays at temperature 0 only (:func:`check_replay_temperature`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NoReturn

import numpy as np

from simmoe.errors import SimmoeError, TraceError
from simmoe.trace.node_index import node_in_pool, row_of_node

SAMPLING_KEY = "sampling"
TEXT_KINDS = ("sampled", "greedy")
# float32 probabilities from a softmax: sums and interval ends agree to this
PROB_TOL = 2e-5


def sampling_meta(trace) -> dict | None:
    """``meta["sampling"]`` of ``trace`` (None for a greedy-only trace)."""
    return trace.meta.get(SAMPLING_KEY)


def trace_temperature(trace) -> float:
    """The temperature of the trace's target distributions; 0 for a greedy-only trace."""
    s = sampling_meta(trace)
    return 0.0 if s is None else float(s["temperature"])


def check_temperature_value(value, flag: str = "--temperature") -> float:
    """A finite temperature >= 0, else ``SimmoeError`` (one line)."""
    try:
        t = float(value)
    except (TypeError, ValueError):
        raise SimmoeError(f"{flag} {value!r}: give a number >= 0") from None
    if not math.isfinite(t) or t < 0:
        raise SimmoeError(f"{flag} {value!r}: the temperature must be a finite number >= 0")
    return t


def check_replay_temperature(trace, temperature: float, path=None) -> None:
    """Refuse a replay at ``temperature`` that the trace cannot answer (``SimmoeError``).

    Temperature 0 needs a greedy text (greedy verification follows it);
    T > 0 needs target distributions recorded at that same T.
    """
    t = check_temperature_value(temperature)
    where = f"{path}: " if path else (f"{trace.path}: " if getattr(trace, "path", None) else "")
    s = sampling_meta(trace)
    if t == 0.0:
        if s is not None and s.get("text") == "sampled":
            raise SimmoeError(f"{where}its text was sampled at temperature {s['temperature']:g}; "
                              f"replay it at --temperature {s['temperature']:g} (greedy replay needs a "
                              "greedy recording)")
        return
    if s is None:
        raise SimmoeError(f"{where}greedy-only trace (no target distributions): it replays at "
                          "--temperature 0 only; record it with `hwprobe record --temperature T` or "
                          "generate it with `simmoe synth --temperature T`")
    have = float(s["temperature"])
    if abs(have - t) > 1e-9 * max(1.0, have):
        greedy_text = s.get("text") != "sampled"     # a sampled text replays at its own temperature only
        raise SimmoeError(f"{where}target distributions were recorded at temperature {have:g}; "
                          f"replay it at --temperature {have:g}" + (" or 0" if greedy_text else ""))


def check_sampling(trace, path=None) -> None:
    """Validate ``meta["sampling"]`` and the target-distribution columns (``TraceError``).

    Errors name the file, the position row and the field: a bad meta entry;
    ``node_target_cdf`` without ``meta["sampling"]`` or the reverse; values
    outside [0, 1] or NaN; an interval [cdf, cdf + p) reaching past 1;
    siblings with one token twice, whose intervals overlap or are out of
    token order, or whose p sum past 1; a node that agrees with the target's
    greedy choice but has a smaller p than a sibling.  O(M log M).
    """
    where = None if path is None else str(path)
    meta = sampling_meta(trace)
    tp, cdf = trace.node_target_prob, getattr(trace, "node_target_cdf", None)
    node_ptr = np.asarray(trace.node_ptr, dtype=np.int64)
    M = int(node_ptr[-1]) if len(node_ptr) else 0
    if meta is None:
        if cdf is not None:
            raise TraceError("target CDF recorded but meta.sampling (the temperature) is missing",
                             path=where, field="node_target_cdf")
        return
    temp = _check_sampling_meta(meta, where)
    p, c = _target_columns(tp, cdf, temp, M, where)
    fail = _NodeFailure(node_ptr, where)
    _check_intervals(p, c, fail)
    if M == 0:
        return
    _check_siblings(trace, node_ptr, p, c, fail)


def _check_sampling_meta(meta: object, path: str | None) -> float:
    """The temperature of a well-formed ``meta["sampling"]``, else ``TraceError``."""
    if not isinstance(meta, dict):
        raise TraceError(f"must be an object, got {meta!r}", path=path, field="meta.sampling")
    unknown = sorted(set(meta) - {"temperature", "seed", "text"})
    if unknown:
        raise TraceError(f"unknown key {unknown[0]!r}", path=path, field="meta.sampling")
    temp = meta.get("temperature")
    if isinstance(temp, bool) or not isinstance(temp, (int, float)) or not math.isfinite(temp) or temp <= 0:
        raise TraceError(f"temperature {temp!r} must be a finite number > 0", path=path,
                         field="meta.sampling.temperature")
    seed = meta.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise TraceError(f"seed {seed!r} must be a non-negative integer or null", path=path,
                         field="meta.sampling.seed")
    if meta.get("text") not in TEXT_KINDS:
        raise TraceError(f"text {meta.get('text')!r} is not one of {', '.join(TEXT_KINDS)}", path=path,
                         field="meta.sampling.text")
    return float(temp)


def _target_columns(tp: object, cdf: object, temp: float, M: int,
                    path: str | None) -> tuple[np.ndarray, np.ndarray]:
    """``node_target_prob`` and ``node_target_cdf`` as float64, once both are float arrays of length M."""
    for name, a in (("node_target_prob", tp), ("node_target_cdf", cdf)):
        if a is None:
            raise TraceError(f"meta.sampling gives temperature {temp:g} but the column is missing",
                             path=path, field=name)
        if not isinstance(a, np.ndarray) or a.dtype.kind != "f" or a.shape != (M,):
            shape = getattr(a, "shape", None)
            raise TraceError(f"has shape {shape} / dtype {getattr(a, 'dtype', None)}, expected float ({M},)",
                             path=path, field=name)
    return np.asarray(tp, dtype=np.float64), np.asarray(cdf, dtype=np.float64)


class _NodeFailure:
    """Raise the ``TraceError`` of the first node a mask marks, naming its row and pool index."""

    def __init__(self, node_ptr: np.ndarray, path: str | None):
        self.node_ptr, self.path = node_ptr, path

    def __call__(self, mask: np.ndarray, message: Callable[[int], str], field: str) -> NoReturn:
        m = int(np.flatnonzero(mask)[0])
        raise TraceError(f"node {node_in_pool(m, self.node_ptr)}: {message(m)}", path=self.path,
                         row=row_of_node(m, self.node_ptr), field=field)


def _outside_unit(a: np.ndarray) -> Callable[[int], str]:
    return lambda m: f"probability {a[m]!r} outside [0, 1]"


def _check_intervals(p: np.ndarray, c: np.ndarray, fail: _NodeFailure) -> None:
    """Each p and cdf in [0, 1] (NaN fails), and each interval [cdf, cdf + p) inside [0, 1]."""
    for name, a in (("node_target_prob", p), ("node_target_cdf", c)):
        bad = ~((a >= 0) & (a <= 1))
        if bad.any():
            fail(bad, _outside_unit(a), name)
    bad = c + p > 1 + PROB_TOL
    if bad.any():
        fail(bad, lambda m: f"interval [cdf, cdf + p) = [{c[m]:.7g}, {c[m] + p[m]:.7g}) reaches past 1",
             "node_target_cdf")


def _check_siblings(trace, node_ptr: np.ndarray, p: np.ndarray, c: np.ndarray, fail: _NodeFailure) -> None:
    """Siblings (nodes of one pool with one parent): distinct tokens whose intervals follow
    token order without overlap, p summing to at most 1, the greedy-agreeing node a largest p."""
    M = len(p)
    node_pos = np.repeat(np.arange(len(node_ptr) - 1), np.diff(node_ptr))
    group = node_ptr[node_pos] + np.asarray(trace.node_parent, dtype=np.int64)  # parent's flat id (root: ptr-1)
    group = group * 2 + (np.asarray(trace.node_parent) < 0)                     # keep roots apart
    token = np.asarray(trace.node_token, dtype=np.int64)
    order = np.lexsort((token, group))
    g, tk = group[order], token[order]
    same = g[1:] == g[:-1]
    dup = same & (tk[1:] == tk[:-1])
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        m = np.zeros(M, bool)
        m[order[i + 1]] = True
        fail(m, lambda m: f"token {token[m]} appears twice among its siblings", "node_token")
    overlap = same & (c[order][1:] < c[order][:-1] + p[order][:-1] - PROB_TOL)
    if overlap.any():
        i = int(np.flatnonzero(overlap)[0])
        a, b = order[i], order[i + 1]
        m = np.zeros(M, bool)
        m[b] = True
        fail(m, lambda _: (f"interval of token {token[b]} starts at {c[b]:.7g}, inside that of its sibling "
                           f"with the smaller token {token[a]} ([{c[a]:.7g}, {c[a] + p[a]:.7g}))"),
             "node_target_cdf")
    uniq, inv = np.unique(group, return_inverse=True)
    total = np.bincount(inv, weights=p, minlength=len(uniq))
    bad = total[inv] > 1 + PROB_TOL
    if bad.any():
        fail(bad, lambda m: f"target probabilities of its siblings sum to {total[inv[m]]:.7g} > 1",
             "node_target_prob")
    best = np.full(len(uniq), -np.inf)
    np.maximum.at(best, inv, p)
    agree = np.asarray(trace.node_agree, dtype=bool)
    bad = agree & (p < best[inv] - PROB_TOL)
    if bad.any():
        fail(bad, lambda m: (f"agrees with the target's greedy choice but its target probability "
                             f"{p[m]:.7g} is below a sibling's {best[inv[m]]:.7g}"), "node_target_prob")
