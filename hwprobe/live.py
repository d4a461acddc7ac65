"""Live speculative decoding on the offloaded backend with any simmoe selector (SpecFit §2, §3.3).

Per request: prefill, then a cursor ``t`` over the output positions, exactly
as the replay engine (:mod:`simmoe.replay.engine`) walks a recorded trace:

1. **draft** — the drafter grows the full pool from prompt + output[:t+1]
   (root = output[t]) level by level, each level timed;
2. **atlas** — one forward over root + the full pool with the experts
   computed straight from host memory (:func:`cache_bypass`: the expert cache,
   its counters and the KV cache are left as they were) gives every node's
   routes and the target's verdicts, the same full-pool forward that
   ``hwprobe record`` runs.  It stands in for a route predictor and is not
   part of the cycle's time;
3. **select** — the simmoe selector sees a :class:`simmoe.replay.selectors.PoolView`
   built with the trace's dtypes (float32 probabilities, the geometry's route
   dtype) and the trace's position row, so live and replay make identical
   selections on identical pools; with ``route_accuracy < 1`` the routes pass
   through :class:`simmoe.replay.route_prediction.RoutePredictor` with the same seed and
   row.  Drafting is charged for the levels the selector drafted only (the
   first d levels of a pool do not depend on deeper ones);
4. **verify** — one timed tree forward over root + S on the offloaded
   backend (hits, copies per layer from its counters);
5. **commit** — greedy verdict, KV compaction to the accepted path,
   bookkeeping; ``min(1 + accepted, positions left)`` positions advance.

After every request its output is checked against plain greedy decoding
(run with :func:`cache_bypass`, untimed): greedy verification is lossless,
so any difference is a bug (:class:`LosslessCheckFailed`, exit status 3).
At ``temperature > 0`` the verdicts are sampled (:mod:`hwprobe.sampling`:
EVICT §2.1 Eq. 3 with position-keyed uniforms) and the check is against
plain sampled decoding with the same uniforms, again an equality.

Cost per cycle: depth drafter calls, two target forwards (atlas and
verification), one selector call.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from hwprobe.cli import HwprobeError
from hwprobe.device import synchronize
from hwprobe.pool import Pool, PoolSpec, grow_pool
from hwprobe.routes import RouteRecorder
from hwprobe.specdecode import greedy_generate, prefill
from hwprobe.tree import cache_length, compact_cache, crop_cache, greedy_verdict, tree_forward

LIVE_FORMAT = "simmoe-live/1"


class LosslessCheckFailed(HwprobeError):
    """Speculative output differs from greedy autoregressive output: a bug, not bad input."""

    exit_status = 3


# --------------------------------------------------------------------------
# forwards that leave the expert cache alone
# --------------------------------------------------------------------------
@contextlib.contextmanager
def cache_bypass(model):
    """Within the block, every offloaded layer computes its experts straight from host memory.

    Same per-expert grouping and arithmetic as the offloaded path, so the
    outputs (hence the routes of later layers) are the same; the expert
    cache, its counters and the copy stream are left alone.  Each used expert
    is moved to the device per call (a no-op on the CPU).
    """
    from hwprobe.models import moe_blocks

    layers = [m.__dict__["_hwprobe_offload"] for _, m in moe_blocks(model) if "_hwprobe_offload" in m.__dict__]
    try:
        for layer in layers:
            layer.bypass = True
        yield
    finally:
        for layer in layers:
            layer.bypass = False


# --------------------------------------------------------------------------
# one live run
# --------------------------------------------------------------------------
@dataclass
class LiveCycle:
    """One measured cycle (times in ms)."""

    request: int
    position: int
    row: int
    pool_size: int
    pool_levels: int
    drafted_levels: int
    selected: list[int]
    accepted: int
    committed: int
    tokens: list[int]               # the committed tokens: root, then the accepted path (capped)
    draft_ms: float
    select_ms: float
    verify_ms: float
    commit_ms: float
    hits: list[int]                 # per layer
    copies: list[int]               # per layer
    level_ms: list[float] = field(default_factory=list)   # every drafted level of the full pool
    # --prefetch draft (hwprobe.prefetch): the copies' block, included in draft_ms, and its counts
    prefetch_ms: float = 0.0
    prefetched: int = 0
    useful: int = 0
    wasted: int = 0

    @property
    def cycle_ms(self) -> float:
        return self.draft_ms + self.select_ms + self.verify_ms + self.commit_ms

    def to_json(self) -> dict:
        d = dict(self.__dict__)
        if not (self.prefetch_ms or self.prefetched or self.useful or self.wasted):
            for k in ("prefetch_ms", "prefetched", "useful", "wasted"):
                del d[k]
        d["type"] = "cycle"
        d["cycle_ms"] = self.cycle_ms
        d["forward_tokens"] = 1 + len(self.selected)
        return d


@dataclass
class LiveRequest:
    """One finished request."""

    index: int
    request_id: str
    dataset: str
    prompt_len: int
    output_len: int
    tokens: list[int]
    prefill_ms: float
    prefill_hits: list[int]
    prefill_copies: list[int]
    prefill_union: int
    cycles: list[LiveCycle]
    copy_ms: list[float]            # durations of (up to 500 of) the request's copies
    greedy_checked: bool = True
    near_ties: int = 0              # positions where greedy and speculative argmax differ within the tie tolerance

    def to_json_lines(self) -> list[dict]:
        head = {k: v for k, v in self.__dict__.items() if k != "cycles"}
        head["type"] = "request"
        head["decode_ms"] = float(sum(c.cycle_ms for c in self.cycles))
        return [head] + [c.to_json() for c in self.cycles]


@dataclass
class LiveSettings:
    """What decides a live run's selections (the replay must use the same)."""

    selector: str
    slots: int
    K: int = 7
    route_accuracy: float = 1.0
    seed: int = 0
    max_new_tokens: int = 64
    max_total_tokens: int | None = None
    options: dict = field(default_factory=dict)
    temperature: float = 0.0       # > 0: sampled verification (hwprobe.sampling), uniforms of sampling_seed
    sampling_seed: int = 0
    prefetch: str = "none"         # "draft": copy predicted experts before verification (hwprobe.prefetch)


def make_live_selector(settings: LiveSettings, profile):
    """The simmoe selector of ``settings`` configured as the replay engine configures it."""
    from simmoe.errors import SimmoeError
    from simmoe.replay.selectors import SELECTORS, SelectorContext, make_selector

    cls = SELECTORS.get(settings.selector)
    if cls is None:
        raise HwprobeError(f"unknown selector {settings.selector!r}; known: {', '.join(SELECTORS)}")
    if cls.needs_prepare:
        raise HwprobeError(f"selector {settings.selector!r} needs every pool of the run in advance "
                           "(a trace-level pass); it cannot run live")
    cache_active = settings.slots > 0
    try:
        cost = profile.cost_model(cache_active) if cls.uses_cost else None
        evict = tuple(profile.evict_cost) if cls.uses_evict_cost else ()
        if cls.uses_evict_cost and not evict:
            raise SimmoeError(f"profile {profile.name} has no [evict] cost_ms table")
        return make_selector(settings.selector, SelectorContext(K=settings.K, cost=cost, evict_cost=evict,
                                                                options=dict(settings.options)))
    except SimmoeError as exc:
        raise HwprobeError(f"selector {settings.selector!r}: {exc}") from None


def _view(pool: Pool, routes: np.ndarray, agree: np.ndarray, row: int, num_experts: int,
          route_dtype, predictor):
    """A PoolView with the dtypes a trace stores (so selections match the replay's bit for bit)."""
    from simmoe.replay.selectors import PoolView

    root_routes = routes[0].astype(route_dtype)
    node_routes = routes[1:].astype(route_dtype)
    root_routes, node_routes = predictor.predict(row, root_routes, node_routes)
    return PoolView(row=row, parents=np.asarray(pool.parent, np.int16), levels=np.asarray(pool.level, np.int8),
                    p=np.asarray(pool.p, np.float32), q=np.asarray(pool.q, np.float32),
                    agree=np.asarray(agree, bool), root_routes=root_routes, node_routes=node_routes,
                    num_experts=num_experts)


CLOCKS = ("auto", "wall", "cpu")


def pick_clock(name: str, device) -> tuple[str, object]:
    """``(name, now)`` of the clock that times cycles; ``auto``: thread CPU time on the CPU, else the wall clock.

    On a CPU shared with other jobs the wall clock also counts the time
    slices the OS gives to them; the thread's CPU time (torch on one thread
    computes in the calling thread) counts this run's work only.  On CUDA,
    the wall clock around synchronised sections.
    """
    if name not in CLOCKS:
        raise HwprobeError(f"unknown clock {name!r}; known: {', '.join(CLOCKS)}")
    if name == "auto":
        name = "cpu" if getattr(device, "type", "cpu") == "cpu" else "wall"
    return name, (time.thread_time if name == "cpu" else time.perf_counter)


def warm_up(model, drafter, prompt_ids: list[int], spec: PoolSpec, rounds: int = 2) -> None:
    """Untimed forwards of the target (through :func:`cache_bypass`) and the drafter before timing starts.

    The first calls of a freshly loaded model are slow (allocator, kernel
    selection); without this the first request of every run reads long.
    The expert cache and its counters are untouched.
    """
    from hwprobe.pool import build_pool

    feats = getattr(drafter, "needs_features", False)
    with cache_bypass(model):
        greedy_generate(model, list(prompt_ids), 4)
        out = prefill(model, list(prompt_ids), hidden_states=True)[1] if feats else None
    for _ in range(rounds):
        drafter.start(list(prompt_ids))
        if feats:                  # an EAGLE-3 head drafts from the target's features of the context
            drafter.observe(list(prompt_ids), out)
        build_pool(drafter, list(prompt_ids), spec)


def _grow_timed(drafter, context, spec: PoolSpec, sync, now, stamps=None) -> tuple[Pool, list[float]]:
    """The full pool, and each level's drafting time on the clock ``now`` (ms); ``stamps()`` marks each level."""
    pool, level_ms = Pool(), []
    t = now()
    for grown in grow_pool(drafter, context, spec, sync):
        pool = grown
        t1 = now()
        level_ms.append((t1 - t) * 1e3)
        t = t1
        if stamps is not None:
            stamps()
    return pool, level_ms


def live_request(model, backend, drafter, selector, prompt_ids: list[int], *, index: int, request_id: str,
                 dataset: str, row0: int, settings: LiveSettings, spec: PoolSpec, num_experts: int,
                 route_dtype, predictor, eos=None, check: bool = True, progress=None,
                 clock: str = "auto", timeline=None) -> LiveRequest:
    """Decode one request speculatively, measuring every cycle (module docstring).

    Cycles are timed with ``clock`` (:func:`pick_clock`).
    """
    device = next(model.parameters()).device
    n_limit = settings.max_new_tokens
    if settings.max_total_tokens is not None:
        n_limit = min(n_limit, settings.max_total_tokens - len(prompt_ids))
        if n_limit < 1:
            raise HwprobeError(f"request {request_id}: prompt of {len(prompt_ids)} tokens leaves no room "
                               f"under the {settings.max_total_tokens}-token limit")
    _, perf = pick_clock(clock, device)
    from hwprobe.sampling import key_of

    key = key_of(request_id)
    drafter.start(list(prompt_ids))
    with RouteRecorder(model) as rec:
        dec = _Decoder(model, backend, drafter, selector, rec, settings=settings, spec=spec,
                       num_experts=num_experts, route_dtype=route_dtype, predictor=predictor, perf=perf, key=key,
                       timeline=timeline)
        prefill_ms, prefill_union, pre_hits, pre_copies = dec.start(prompt_ids)
        if eos is not None and dec.root == eos:
            n_limit = 1
        t = 0
        while t < n_limit:
            n_limit, committed = dec.cycle(prompt_ids, t, n_limit, row0=row0, index=index, eos=eos)
            t += committed
            if progress is not None:
                progress(committed)
    output = [int(x) for x in dec.tokens[:n_limit]]
    ties = 0
    if check and dec.sampled:
        sampled_check(model, list(prompt_ids), output, n_limit, eos, settings, key,
                      what=f"request {request_id} (selector {settings.selector})")
    elif check:
        ties = lossless_check(model, list(prompt_ids), output, n_limit, eos,
                              what=f"request {request_id} (selector {settings.selector})")
    return LiveRequest(index=index, request_id=str(request_id), dataset=dataset, prompt_len=len(prompt_ids),
                       output_len=n_limit, tokens=output, prefill_ms=prefill_ms, prefill_hits=pre_hits,
                       prefill_copies=pre_copies, prefill_union=prefill_union, cycles=dec.cycles,
                       copy_ms=[float(x) for x in dec.copy_ms], greedy_checked=bool(check), near_ties=ties)


@dataclass
class _Drafted:
    """One cycle's draft and selection (empty for a selector that does not draft)."""

    sub: Pool
    nodes: list[int]
    drafted: int = 0
    draft_ms: float = 0.0
    select_ms: float = 0.0
    level_ms: list[float] = field(default_factory=list)
    pool_size: int = 0
    pool_levels: int = 0
    view: object = None


class _Decoder:
    """One request's state between cycles (KV cache, tokens, root) and the timed steps of a cycle."""

    def __init__(self, model, backend, drafter, selector, rec, *, settings: LiveSettings, spec: PoolSpec,
                 num_experts: int, route_dtype, predictor, perf, key: int, timeline):
        self.model, self.backend, self.drafter, self.selector, self.rec = model, backend, drafter, selector, rec
        self.settings, self.spec, self.num_experts = settings, spec, num_experts
        self.route_dtype, self.predictor, self.perf, self.key, self.tl = route_dtype, predictor, perf, key, timeline
        self.device = next(model.parameters()).device
        self.feats = getattr(drafter, "needs_features", False)
        self.sampled = settings.temperature > 0
        self.cycles: list[LiveCycle] = []
        self.copy_ms: list[float] = []
        self.tokens: list[int] = []
        self.carry = [0, 0]     # prefetches the prefill used or dropped: the first cycle's
        self.cache = None
        self.root = 0

    def sync(self):
        return synchronize(self.device)

    def verdict(self, p, logits, t: int):
        if self.sampled:
            from hwprobe.sampling import sampled_verdict

            return sampled_verdict(p, logits, self.settings.temperature, self.settings.sampling_seed, self.key, t)
        return greedy_verdict(p, logits)

    def start(self, prompt_ids: list[int]) -> tuple[float, int, list[int], list[int]]:
        """The timed prefill: (ms, experts in its per-layer unions, hits, copies); sets the first root."""
        self.backend.collect()
        self.sync()
        t0 = self.perf()
        self.cache, out, root = prefill(self.model, list(prompt_ids), hidden_states=self.feats)
        self.sync()
        prefill_ms = (self.perf() - t0) * 1e3
        if self.sampled:                                    # output position 0, drawn at the temperature
            from hwprobe.sampling import sample_token

            root = sample_token(out.logits[0, -1], self.settings.temperature, self.settings.sampling_seed,
                                self.key, 0)
        pr = self.rec.pop()
        prefill_union = int(sum(len(np.unique(pr[:, layer])) for layer in range(pr.shape[1])))
        snap = self.backend.collect()
        self.carry = [sum(snap.useful), sum(snap.wasted)]
        self.copy_ms += snap.copy_ms[:500]
        if self.feats:
            self.drafter.observe(list(prompt_ids), out)
        self.root, self.tokens = root, [root]
        return prefill_ms, prefill_union, list(snap.hits), list(snap.copies)

    def cycle(self, prompt_ids: list[int], t: int, n_limit: int, *, row0: int, index: int,
              eos) -> tuple[int, int]:
        """The cycle at output position ``t``; returns (the output limit, cut at EOS, and positions committed)."""
        context = list(prompt_ids) + self.tokens
        n = cache_length(self.cache)
        tl = self.tl
        marks = [tl.now()] if tl is not None else None
        d = self._draft_select(context, n, row0 + t, t, marks) if self.selector.drafts else _Drafted(Pool(), [])
        pf = {}
        if self.settings.prefetch == "draft" and self.selector.drafts:   # hwprobe.prefetch: a block before verify
            from hwprobe.prefetch import live_prefetch

            pf = live_prefetch(self.backend, self.settings, d.view, d.drafted, self.sync, self.perf)
            d.draft_ms += pf["prefetch_ms"]
        o, verify_ms, pre, snap, w3 = self._verify(d)
        v, commit_ms = self._commit(d.sub, o, context, n, t, w3)
        tokens = self.tokens
        if eos is not None and eos in tokens:
            n_limit = min(n_limit, tokens.index(eos) + 1)
        acc = len(v.path)
        committed = min(1 + acc, n_limit - t)
        if len(self.copy_ms) < 500:
            self.copy_ms += snap.copy_ms[: 500 - len(self.copy_ms)]
        self.cycles.append(LiveCycle(
            request=index, position=t, row=row0 + t, pool_size=d.pool_size, pool_levels=int(d.pool_levels),
            drafted_levels=d.drafted, selected=d.nodes, accepted=acc, committed=committed,
            tokens=[int(x) for x in tokens[t:t + committed]], draft_ms=d.draft_ms, select_ms=d.select_ms,
            verify_ms=verify_ms, commit_ms=commit_ms, hits=list(snap.hits), copies=list(snap.copies),
            level_ms=d.level_ms, prefetch_ms=float(pf.get("prefetch_ms", 0.0)),
            prefetched=int(pf.get("prefetched", 0)), useful=int(sum(snap.useful)) + self.carry[0],
            wasted=int(sum(pre.wasted) + sum(snap.wasted)) + self.carry[1]))
        self.carry = [0, 0]
        nxt = t + committed
        self.root = tokens[nxt] if nxt < len(tokens) else v.next_root
        return n_limit, committed

    def _draft_select(self, context: list[int], n: int, row: int, t: int, marks) -> _Drafted:
        """Draft the full pool (timed per level), its untimed atlas forward, and the selector's choice."""
        tl = self.tl
        pool, level_ms = _grow_timed(self.drafter, context, self.spec, self.sync, self.perf,
                                     (lambda m=marks, w=tl: m.append(w.now())) if tl is not None else None)
        with cache_bypass(self.model):                      # the atlas: untimed, cache untouched
            atlas = tree_forward(self.model, self.cache, self.root, pool)
        crop_cache(self.cache, n)
        routes = self.rec.pop()
        full = self.verdict(pool, atlas.logits[0], t)
        view = _view(pool, routes, full.agree, row, self.num_experts, self.route_dtype, self.predictor)
        t1 = self.perf()
        w1 = tl.now() if tl is not None else 0.0
        choice = self.selector.select(view)
        select_ms = (self.perf() - t1) * 1e3
        if tl is not None:
            tl.add("host", "select", "select", w1, tl.now())
        nodes = sorted(int(j) for j in np.asarray(choice.nodes).tolist())
        drafted = int(choice.drafted_levels)
        sub = pool.subset(nodes)
        if tl is not None:
            for d in range(drafted):
                tl.add("compute", f"draft level {d + 1}", "draft", marks[d], marks[d + 1], {"level": d + 1})
        return _Drafted(sub=sub, nodes=nodes, drafted=drafted, draft_ms=float(sum(level_ms[:drafted])),
                        select_ms=select_ms, level_ms=level_ms, pool_size=len(pool),
                        pool_levels=(max(pool.level) if len(pool) else 0), view=view)

    def _verify(self, d: _Drafted):
        """The timed tree forward over root + S: (output, ms, counters before, counters after, timeline mark)."""
        tl = self.tl
        if tl is not None:
            tl.add_intervals(tl.intervals(self.backend))
        pre = self.backend.collect()
        self.sync()
        t2 = self.perf()
        w2 = tl.now() if tl is not None else 0.0
        o = tree_forward(self.model, self.cache, self.root, d.sub, hidden_states=self.feats)
        self.sync()
        verify_ms = (self.perf() - t2) * 1e3
        self.rec.pop()
        grabbed = tl.intervals(self.backend) if tl is not None else None
        snap = self.backend.collect()
        w3 = 0.0
        if tl is not None:
            tl.add("target forward", "verify", "forward", w2, tl.now(), {"tokens": 1 + len(d.nodes)})
            tl.add_intervals(grabbed)
            w3 = tl.now()
        return o, verify_ms, pre, snap, w3

    def _commit(self, sub: Pool, o, context: list[int], n: int, t: int, w3: float):
        """The verdict, KV compaction to the accepted path, the new tokens: (verdict, ms)."""
        t3 = self.perf()
        v = self.verdict(sub, o.logits[0], t)
        rows = [0] + [1 + j for j in v.path]
        compact_cache(self.cache, n, rows)
        if self.feats:
            self.drafter.observe(context, o, rows)
        new = [sub.token[j] for j in v.path] + [v.next_root]
        self.tokens = self.tokens + new
        self.sync()
        commit_ms = (self.perf() - t3) * 1e3
        if self.tl is not None:
            self.tl.add("compute", "commit", "commit", w3, self.tl.now())
        return v, commit_ms


def sampled_check(model, prompt: list[int], output: list[int], n: int, eos, settings: LiveSettings, key: int, *,
                  what: str) -> None:
    """At temperature > 0: the output must equal plain sampled decoding with the same uniforms.

    Every output position's token is the inverse-CDF draw of its own uniform
    (:mod:`hwprobe.sampling`), speculated or not, so any difference is a bug
    (or a draw within rounding of a CDF boundary between two kernels, as rare
    as a uniform landing within ~1e-7 of one).
    """
    from hwprobe.sampling import sampled_generate

    with cache_bypass(model):
        plain = sampled_generate(model, list(prompt), n, settings.temperature, settings.sampling_seed, key, eos)
    if plain != output[:len(plain)] or len(plain) != len(output):
        at = next((i for i, (a, b) in enumerate(zip(plain, output)) if a != b), min(len(plain), len(output)))
        raise LosslessCheckFailed(f"{what}: speculative output differs from sampled decoding with the same "
                                  f"uniforms at output position {at}; please report")


def tie_tolerance(dtype) -> float:
    """Relative top-2 logit gap below which two argmaxes count as a tie: the dtype's rounding step, x2.

    A tree forward and a one-token forward run different kernels (other
    shapes, other reduction orders); in bfloat16 their logits differ by a
    few units of its 8-bit mantissa, so a near-tie can flip between them.
    """
    return 2.0 * float(torch.finfo(dtype).eps)


def lossless_check(model, prompt: list[int], output: list[int], n: int, eos, *, what: str) -> int:
    """Check ``output`` against greedy decoding; returns the near-ties accepted, raises on a real difference.

    Greedy verification is lossless, so a difference is a bug, except where
    the target's top-2 logits at the first differing position are within
    :func:`tie_tolerance` of each other (relative to the largest logit):
    then the two kernels legitimately round to different argmaxes.  Such a
    position is accepted, counted, and greedy decoding continues from the
    speculative output's token, so the rest is still checked.  Cost: one
    greedy decode, plus one forward and one decode of the remainder per tie.
    """
    from hwprobe.tree import lm_forward, new_cache

    device = next(model.parameters()).device
    ties, start = 0, 0
    with cache_bypass(model):
        greedy = greedy_generate(model, list(prompt), n, eos)
        while greedy != output[start:start + len(greedy)] or start + len(greedy) < len(output):
            diff = [i for i, (a, b) in enumerate(zip(greedy, output[start:])) if a != b]
            at = start + (diff[0] if diff else min(len(greedy), len(output) - start))
            if not diff:
                raise LosslessCheckFailed(f"{what}: speculative output has {len(output)} tokens, greedy decoding "
                                          f"{start + len(greedy)}; please report")
            ctx = list(prompt) + output[:at]
            logits = lm_forward(model, torch.as_tensor([ctx], device=device), new_cache(model)).logits[0, -1].float()
            top = torch.topk(logits, 2).values
            gap, scale = float(top[0] - top[1]), float(logits.abs().max().clamp(min=1.0))
            tol = tie_tolerance(model.dtype)
            both = {int(greedy[at - start]), int(output[at])}
            near = gap <= tol * scale and set(torch.topk(logits, 2).indices.tolist()) >= both
            if not near:
                raise LosslessCheckFailed(f"{what}: speculative output differs from greedy decoding at output "
                                          f"position {at} (top-2 logit gap {gap:.3g}, above the tie tolerance "
                                          f"{tol * scale:.3g}); please report")
            ties += 1
            start = at + 1
            if start >= len(output):
                break
            greedy = greedy_generate(model, list(prompt) + output[:start], n - start, eos)
    return ties


# --------------------------------------------------------------------------
# the live-run file: JSON lines, written atomically, partial results kept
# --------------------------------------------------------------------------
class LiveWriter:
    """Writes ``OUT`` (complete run) and, while running, ``OUT.partial`` (finished requests so far).

    Both are JSON lines: the run line (``"type": "run"``, with ``"complete"``),
    then per request a request line followed by its cycle lines.  Each write
    replaces the whole file atomically (temp file in the same folder, then
    ``os.replace``), so a killed run leaves a readable ``OUT.partial`` marked
    ``"complete": false`` and never a torn file.  O(lines so far) per request.
    """

    def __init__(self, out, meta: dict):
        from pathlib import Path

        self.out = Path(out)
        self.partial = self.out.with_name(self.out.name + ".partial")
        self.meta = dict(meta)
        self.requests: list[list[dict]] = []       # per request: its request line, then its cycle lines

    @property
    def records(self) -> list[dict]:
        return [line for req in self.requests for line in req]

    def _text(self, complete: bool, extra: dict | None = None) -> str:
        import json

        head = {"type": "run", "format": LIVE_FORMAT, **self.meta, **(extra or {}), "complete": complete,
                "requests_done": len(self.requests)}
        return "\n".join([json.dumps(head)] + [json.dumps(x) for x in self.records]) + "\n"

    def add(self, request: LiveRequest) -> None:
        from hwprobe.atomic import write_text_atomic

        self.requests.append(request.to_json_lines())
        write_text_atomic(self.partial, self._text(False))

    def update(self, requests: list[list[dict]], extra: dict | None = None) -> None:
        """Replace the finished requests (the merge of the passes so far) in ``OUT.partial``."""
        from hwprobe.atomic import write_text_atomic

        self.requests = [list(r) for r in requests]
        write_text_atomic(self.partial, self._text(False, extra))

    def finish(self, extra: dict | None = None) -> None:
        from hwprobe.atomic import write_text_atomic

        write_text_atomic(self.out, self._text(True, extra))
        self.partial.unlink(missing_ok=True)
