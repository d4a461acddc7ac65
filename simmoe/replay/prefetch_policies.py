"""simmoe's own prefetch policies, each a :class:`simmoe.api.PrefetchPolicy` (registered in ``pyproject.toml``).

The idea is that of the offloading systems SpecFit cites in §1 and §5
(MoE-Infinity, ProMoE, Pre-gated MoE) and of SP-MoE's prefetch during drafting.
Predictions are the selectors' own (``--route-accuracy a``, SpecFit §4.6; a = 1
is the trace's recorded routes, i.e. the atlas that SpecFit's measurements and
``hwprobe record`` use).

``draft``
    when a step starts, the predicted experts of every root (slot order, every
    layer in layer order) are queued; when level d of the pools has been
    drafted, those of the level's nodes, most probable first (path
    probability, ties by slot, then id), each node's layer after layer.
    Copies may start until the verification forward starts (during drafting
    and selection: the copy engine's idle time); queued copies that have not
    started by then are dropped.
``next-layer``
    when layer ℓ's router has run, the predicted experts of layer ℓ + 1 of the
    verified tokens (the roots first, then the selected nodes, most probable
    first) are queued; they may start until layer ℓ + 1's router runs.
``oracle``
    as ``draft``, but queued at the step's start with perfect knowledge: the
    experts the forward will demand (the true routes of the roots and of the
    selected nodes), in layer order.  A bound on prefetching during drafting
    (it knows the verified subtree and the routes before they exist), not on
    every prefetch scheme.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from itertools import chain
from typing import ClassVar

import numpy as np

from simmoe.api import CacheShape, PrefetchJobs, PrefetchStep
from simmoe.errors import SimmoeError
from simmoe.replay.caches import handed_trace
from simmoe.replay.plugins import read_only


def _flat(routes: np.ndarray, num_experts: int) -> np.ndarray:
    """Tokens' routes [t, L, k] as flat ``layer·N + expert`` pairs, token after token, layer after layer."""
    routes = np.asarray(routes, dtype=np.int64)
    L = routes.shape[1]
    return (routes + (np.arange(L, dtype=np.int64) * num_experts)[:, None][None]).reshape(-1)


def draft_order(levels: np.ndarray, p: np.ndarray, slots: np.ndarray | None = None) -> np.ndarray:
    """Node indices level by level, most probable first; ties by slot, then index."""
    ids = np.arange(len(levels))
    keys: list[np.ndarray] = [ids, -np.asarray(p, dtype=np.float64), np.asarray(levels, dtype=np.int64)]
    if slots is not None:
        keys.insert(1, np.asarray(slots))
    return ids[np.lexsort(keys)]


class Draft:
    """Prefetch the predicted experts while the drafter drafts (module docstring)."""

    name: ClassVar[str] = "draft"

    def reset(self, shape: CacheShape) -> None:
        self.N = shape.num_experts

    def drafting(self, step: PrefetchStep) -> PrefetchJobs | None:
        roots = _flat(step.roots, self.N)
        k = step.roots.shape[1] * step.roots.shape[2]
        pools = [pl for pl in step.pools if len(pl["levels"])]
        if not pools:
            return PrefetchJobs(roots, np.zeros(len(roots), dtype=np.int64))
        levels = np.concatenate([pl["levels"] for pl in pools]).astype(np.int64)
        p = np.concatenate([pl["p"] for pl in pools])
        routes = np.concatenate([pl["routes"] for pl in pools])
        slots = np.repeat(np.arange(len(pools)), [len(pl["levels"]) for pl in pools]) if len(pools) > 1 else None
        order = draft_order(levels, p, slots)
        nodes = _flat(routes[order], self.N)
        return PrefetchJobs(np.concatenate([roots, nodes]),
                            np.concatenate([np.zeros(len(roots), np.int64), np.repeat(levels[order], k)]))

    def layers(self, step: PrefetchStep) -> None:
        return None


class NextLayer:
    """Prefetch layer ℓ + 1's predicted experts of the verified tokens while layer ℓ runs."""

    name: ClassVar[str] = "next-layer"

    def reset(self, shape: CacheShape) -> None:
        self.N = shape.num_experts

    def drafting(self, step: PrefetchStep) -> None:
        return None

    def layers(self, step: PrefetchStep) -> list[list[int]]:
        tokens = [np.asarray(step.roots, dtype=np.int64)]
        chosen, keys = [], []
        for slot, pl in enumerate(step.pools):
            sel = np.asarray(pl["selected"] if pl["selected"] is not None else [], dtype=np.int64)
            if len(sel):
                chosen.append(np.asarray(pl["routes"], dtype=np.int64)[sel])
                keys.append(np.stack([sel, np.full(len(sel), slot), -np.asarray(pl["p"], dtype=np.float64)[sel]]))
        if chosen:   # most probable first, ties by slot, then id
            k = np.concatenate(keys, axis=1)
            tokens.append(np.concatenate(chosen)[np.lexsort((k[0], k[1], k[2]))])
        routes = np.concatenate(tokens, axis=0)            # [t, L, k]
        return [routes[:, layer, :].reshape(-1).tolist() for layer in range(routes.shape[1])]


class Oracle:
    """Prefetch, when the step starts, exactly what its forward will demand (an upper bound)."""

    name: ClassVar[str] = "oracle"
    knows_truth: ClassVar[bool] = True

    def reset(self, shape: CacheShape) -> None:
        self.N = shape.num_experts

    def drafting(self, step: PrefetchStep) -> PrefetchJobs | None:
        assert step.truth is not None
        tokens = [np.asarray(root, dtype=np.int64)[None] for root, _ in step.truth]
        chosen, keys = [], []
        for slot, ((_, nodes), pl) in enumerate(zip(step.truth, step.pools, strict=True)):
            sel = np.asarray(pl["selected"] if pl["selected"] is not None else [], dtype=np.int64)
            if len(sel):
                chosen.append(np.asarray(nodes, dtype=np.int64)[sel])
                keys.append(np.stack([sel, np.full(len(sel), slot), np.asarray(pl["levels"])[sel],
                                      -np.asarray(pl["p"], dtype=np.float64)[sel]]))
        if chosen:
            k = np.concatenate(keys, axis=1)
            tokens.append(np.concatenate(chosen)[np.lexsort((k[0], k[1], k[2], k[3]))])
        pairs = _flat(np.concatenate(tokens, axis=0), self.N)
        return PrefetchJobs(pairs, np.zeros(len(pairs), dtype=np.int64))

    def layers(self, step: PrefetchStep) -> None:
        return None


def prefetch_step(residency, requests, rows, selected) -> PrefetchStep:
    """What a prefetch policy sees of a step (:class:`simmoe.api.PrefetchStep`): read-only arrays only.

    The pools' columns and routes are slices of the pools stage's read-only
    views (:class:`simmoe.replay.pools.TracePools`), the selections read-only
    views of the schedule's (which later replays of the plan read), the rest
    made here: a policy cannot change what the replay reads.
    """
    pools = residency.pools
    trace = pools.trace
    roots, infos, truth = [], [], []
    knows = bool(getattr(residency.policy, "knows_truth", False))
    for j, row in enumerate(rows):
        root, nodes = pools.predictions(row)
        s = trace.pool_slice(row)
        roots.append(root)
        infos.append({"levels": pools.levels[s], "p": pools.p[s], "routes": nodes,
                      "selected": None if selected is None else read_only(np.asarray(selected[j]))})
        if knows:
            truth.append((pools.root_routes[row], pools.node_routes[s]))
    stacked = np.stack(roots)
    stacked.flags.writeable = False
    available = residency.engine.available()     # a new array each call
    available.flags.writeable = False
    return PrefetchStep(roots=stacked, pools=tuple(infos), available=available,
                        requests=tuple(requests), rows=tuple(int(r) for r in rows),
                        truth=tuple(truth) if knows else None)


def policy_trace(policy, trace):
    """The trace a prefetch policy's shape holds: the trace itself for simmoe's own, else a read-only copy."""
    return handed_trace(policy, trace, OWN_POLICY_MODULES)


# the modules of simmoe's own prefetch policies: their outputs are valid by construction (their tests check
# them), so the residency stage checks every other policy's outputs only (check_jobs, check_layers)
OWN_POLICY_MODULES = frozenset({"simmoe.replay.prefetch_policies", "simmoe.replay.prefetch_papers"})


def _a(obj) -> str:
    """``obj``'s type with its article, for messages: "a list", "an int"."""
    name = type(obj).__name__
    return f"{'an' if name[:1] in 'aeiou' else 'a'} {name}"


def _ints(values, what: str) -> np.ndarray:
    """``values`` as a one-dimensional int64 array; refused (``what`` names it) unless they are integers."""
    try:
        a = np.asarray(values)
    except Exception as exc:    # ragged lists and the like
        raise SimmoeError(f"{what} is {_a(values)} that is no array "
                          f"({type(exc).__name__}: {exc})") from None
    if a.ndim != 1:
        raise SimmoeError(f"{what} has shape {list(a.shape)}, not a one-dimensional sequence of integers")
    if not a.size:
        return np.zeros(0, dtype=np.int64)
    if a.dtype.kind not in "iu":    # floats are not rounded, a bool mask is not read as ids {0, 1}
        raise SimmoeError(f"{what} holds {a.dtype} values, not integers")
    if not isinstance(values, np.ndarray):   # numpy reads a bool among ints as 0 or 1
        at = _bool_at(values)
        if at is not None:
            raise SimmoeError(f"{what} holds {values[at]!r} at index {at}: a bool among integer ids, not an id "
                              "(it would be read as 0 or 1)")
    if a.dtype.kind == "u" and a.dtype.itemsize == 8 and int(a.max()) > np.iinfo(np.int64).max:
        raise SimmoeError(f"{what} holds {int(a.max())}, beyond int64")
    return a.astype(np.int64, copy=False)


def check_jobs(jobs, name: str, num_layers: int, num_experts: int) -> tuple[np.ndarray, np.ndarray]:
    """A policy's ``drafting()`` result (not None) as (pairs, levels) int64, or one line naming what is wrong.

    A ``PrefetchJobs``: pairs flat ids ``ℓ·N + e`` in [0, L·N), levels
    integers >= 0, one per pair (:class:`simmoe.api.PrefetchJobs`).  O(n).
    """
    what = f"prefetch policy {name!r}: drafting()"
    if not isinstance(jobs, PrefetchJobs):
        raise SimmoeError(f"{what} returned {_a(jobs)}, not a simmoe.api.PrefetchJobs (or None)")
    pairs = _ints(jobs.pairs, f"{what}'s pairs")
    levels = _ints(jobs.levels, f"{what}'s levels")
    if len(pairs) != len(levels):
        raise SimmoeError(f"{what} returned {len(pairs)} pairs but {len(levels)} levels (one level per pair)")
    flat = num_layers * num_experts
    bad = np.flatnonzero((pairs < 0) | (pairs >= flat))
    if len(bad):
        raise SimmoeError(f"{what} returned pair {pairs[bad[0]]} (index {bad[0]}): pairs are flat expert ids "
                          f"layer·N + expert in [0, L·N = {flat})")
    if len(levels) and levels.min() < 0:
        i = int(np.argmin(levels))
        raise SimmoeError(f"{what} returned level {levels[i]} (index {i}): levels are draft levels >= 0 "
                          "(0: when the step begins)")
    return pairs, levels


def check_layers(layers, name: str, num_layers: int, num_experts: int) -> list[list[int]] | None:
    """A policy's ``layers()`` result as one list of ints per layer, or one line naming the policy and what is wrong.

    None, or a sequence of exactly L sequences; entry ℓ holds local expert ids
    of layer ℓ, in [0, N) (:class:`simmoe.api.PrefetchPolicy`).  O(L + ids).
    """
    what = f"prefetch policy {name!r}: layers()"
    if layers is None:
        return None
    if isinstance(layers, (str, bytes)) or not isinstance(layers, (Sequence, np.ndarray)):
        raise SimmoeError(f"{what} returned {_a(layers)}, not a sequence of one sequence of expert ids per layer "
                          "(or None)")
    if len(layers) != num_layers:
        raise SimmoeError(f"{what} returned {len(layers)} entries; it needs one per layer ({num_layers})")
    out = []
    if all(isinstance(entry, (list, tuple)) for entry in layers) and _local_ids(layers, num_experts):
        return [list(entry) for entry in layers]
    for layer, entry in enumerate(layers):
        here = f"{what}[{layer}]"
        if isinstance(entry, (str, bytes)) or not isinstance(entry, (Sequence, np.ndarray)):
            raise SimmoeError(f"{here} is {_a(entry)}, not a sequence of layer {layer}'s expert ids")
        ids = _ints(entry, here)
        if len(ids) and (ids.min() < 0 or ids.max() >= num_experts):
            x = int(ids.min() if ids.min() < 0 else ids.max())
            hint = (f" (a flat id layer·N + expert? layers() takes local ids; flat {x} is layer {x // num_experts}, "
                    f"expert {x % num_experts})" if num_experts <= x < num_layers * num_experts else "")
            raise SimmoeError(f"{here} holds expert {x}: entry ℓ holds layer ℓ's local expert ids, "
                              f"in [0, N = {num_experts}){hint}")
        out.append(ids.tolist())
    return out


# the types of an id in a list that the fast check of layers() takes (a bool, an int subclass, is not one)
_INTEGER_TYPES = frozenset({int, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
                            np.uint64})


def _bool_at(values) -> int | None:
    """The index of the first bool (Python's or numpy's) in the sequence ``values``, or None."""
    kinds = set(map(type, values))
    if bool not in kinds and np.bool_ not in kinds and np.ndarray not in kinds:
        return None
    for i, x in enumerate(values):
        if isinstance(x, (bool, np.bool_)) or (isinstance(x, np.ndarray) and x.dtype.kind == "b"):
            return i
    return None


def _local_ids(layers, num_experts: int) -> bool:
    """Whether lists of ids (one per layer) hold integers in [0, N) only: one pass over them all.

    The usual answer, checked at once rather than one layer at a time (a third
    of the time); anything in doubt — a bool, a float, a nested list, an id
    beyond int64 — returns False, and the per-layer check finds what is wrong.
    """
    flat = list(chain.from_iterable(layers))      # the entries are lists or tuples here
    if not flat:
        return True
    if not set(map(type, flat)) <= _INTEGER_TYPES:
        return False
    try:
        ids = np.frombuffer(array("q", flat), dtype=np.int64)
    except (OverflowError, TypeError):
        return False
    return bool(ids.min() >= 0 and ids.max() < num_experts)


def check_prefetch(policy: str) -> str:
    """Return ``policy`` if it names a prefetch policy (or ``none``), else raise :class:`SimmoeError` (one line)."""
    from simmoe.replay import plugins

    if policy != "none":
        plugins.load("prefetch", policy)
    return policy


def plan_draft_prefetch(available: np.ndarray, unused: np.ndarray, capacity: int, root_pred, node_pred,
                        node_level, node_p, levels: int) -> list[tuple[int, int]]:
    """The (layer, expert) copies ``draft`` makes for one request when copies share the compute stream.

    ``available`` bool [L, N] (resident or staged), ``unused`` [L] prefetched
    experts not yet used, ``capacity`` slots (or staging buffers) per layer.
    What the copy engine copies in its block after selection on a profile
    with ``overlap = false``; ``hwprobe live --prefetch draft`` makes exactly
    these copies.
    """
    from simmoe.replay.copy_engine import queue_pairs

    available = np.asarray(available, dtype=bool)
    N = available.shape[1]
    tokens = [np.asarray(root_pred, dtype=np.int64)[None]]
    if node_pred is not None and len(node_pred):
        lv = np.asarray(node_level, dtype=np.int64)
        order = draft_order(lv, node_p)
        order = order[lv[order] <= int(levels)]
        tokens.append(np.asarray(node_pred, dtype=np.int64)[order])
    flat = _flat(np.concatenate(tokens, axis=0), N)
    keep = queue_pairs(flat, available.reshape(-1), capacity - np.asarray(unused, dtype=np.int64), N)
    return [(int(p // N), int(p % N)) for p in flat[keep]]
