"""The residency stage when host-resident experts are computed on the CPU (docs/cpu-experts.md).

One implementation, :class:`CpuExperts`, for every placement of a profile
``MODEL[/FORMAT]@GPU[+LINK]+CPU~PLACEMENT`` (:mod:`simmoe.hardware.cpu_profile`):
a :class:`simmoe.api.Placement` decides per forward which experts run on the
GPU (held, or copied) and the CPU computes the rest.  simmoe's own
(:mod:`simmoe.replay.placements`):

* ``cpu-layers:N`` — llama.cpp ``--n-cpu-moe N``: the experts of the first N
  decoder layers live in host RAM and run on the CPU, the rest on the GPU;
* ``cpu-all`` — llama.cpp ``-cmoe``: every routed expert on the CPU;
* ``cpu-misses`` — a GPU expert cache of the replay's policy and budget
  (``--cache``, ``--slots``, ``--cache-experts``): hits run on the GPU,
  misses on the CPU (not copied); the cache admits them as its policy says,
  the admitting copy taken off the forward's critical path (an assumption);
* ``fiddler`` — Fiddler's rule: each expert not on the GPU is copied or
  computed on the CPU, whichever finishes first for the tokens routed to it
  (with a cache, its hits run on the GPU as above);
* ``placement=NAME[,KEY=VALUE...]`` — a plugin (registered under
  ``simmoe.placements``, or ``module:Name``), its choices checked.

A forward is timed from its real routes: each CPU expert's n_e (the verified
tokens routed to it) comes from the trace's routes of the step's roots and
selected nodes; :meth:`simmoe.hardware.cpu_forward.CpuForward.forward_parts`
prices it.  A prefill forward knows only its union, so its tokens are spread
evenly over the union's experts.  The stage counts what the replay's output
shows: experts computed on the CPU, bytes read from DRAM, experts served on
the GPU, copies, and the GPU's and the CPU's busy time.
"""

from __future__ import annotations

import numpy as np

from simmoe.api import PlacementForward, PlacementShape
from simmoe.errors import SimmoeError
from simmoe.replay.placements import PluginChoices, builtin

ASK = object()     # _forward's copies: the placement's
COUNTERS = ("cpu_reads", "dram_bytes", "gpu_served", "copies", "gpu_ms", "cpu_ms")


def cpu_forward_of(profile):
    """The profile's :class:`~simmoe.hardware.cpu_forward.CpuForward`, or None in the other regimes."""
    phys = getattr(profile, "physical", None)
    return phys if getattr(phys, "placement", None) is not None else None


def placement_class(fwd):
    """The class of ``fwd``'s placement: simmoe's own, or the plugin it names (loaded once)."""
    p = fwd.placement
    if p.kind != "plugin":
        return type(builtin(p))
    from simmoe.replay import plugins

    return plugins.load("placement", p.spec)


def placement_uses_cache(profile) -> bool:
    """Whether the profile's placement keeps a GPU expert cache (a plugin's declaration read from its class)."""
    fwd = cpu_forward_of(profile)
    return fwd is not None and bool(getattr(placement_class(fwd), "uses_cache", False))


def check_cpu_setting(setting, trace, profile) -> None:
    """Refuse, in one line, what has no meaning (or is not modelled) with the profile's placement."""
    fwd = cpu_forward_of(profile)
    if fwd is None:
        return
    p = fwd.placement
    c, where = setting.config, (repr(p.spec) if p.kind == "plugin" else p.text)
    if c.prefetch != "none":
        raise SimmoeError(f"--prefetch {c.prefetch}: placement {where} computes host-resident experts on the CPU; "
                          "prefetching copies is not modelled in this regime")
    if setting.uses_residency:
        raise SimmoeError(f"selector {c.selector!r} selects from the experts on their way to the GPU; placement "
                          f"{where} computes them on the CPU instead")
    if not placement_uses_cache(profile):
        if c.cache_budget is not None and c.cache != "none":
            raise SimmoeError(f"--cache-experts/--cache-mib: placement {where} fixes which experts are on the GPU, "
                              "so a GPU expert cache has no meaning (use ~cpu-misses or ~fiddler)")
        return
    from simmoe.hardware.cpu_profile import memory_use

    if fwd.placement.kind == "plugin" and float((fwd.E * fwd.N).sum()) > fwd.cpu.memory_bytes:
        raise SimmoeError(f"placement {where} keeps a GPU expert cache, so host RAM holds every expert: "
                          f"{float((fwd.E * fwd.N).sum()) / 2**30:.1f} GiB in {fwd.fmt.name}, more than "
                          f"{fwd.cpu.name}'s {fwd.cpu.memory_bytes / 2**30:.0f} GiB")
    if c.cache_active:
        g = trace.geometry
        experts = c.cache_budget if c.cache_budget is not None else int(c.slots) * int(g.num_layers)
        on_gpu = memory_use(fwd)[0] + experts * float(fwd.E.mean())
        if on_gpu > fwd.gpu.gpu.memory_bytes:
            raise SimmoeError(f"the GPU expert cache of {experts} experts ({experts * float(fwd.E.mean()) / 2**30:.1f} "
                              f"GiB in {fwd.fmt.name}) and the non-expert weights do not fit in "
                              f"{fwd.gpu.gpu.name}'s {fwd.gpu.gpu.memory_bytes / 2**30:.0f} GiB; give a smaller "
                              "--slots or --cache-experts")


def build_cpu_residency(trace, setting, profile, timer, *, future=None, record=None, requests=()):
    """The residency stage of a CPU-regime profile (its placement and cache built new from ``setting``)."""
    if record is not None:
        raise SimmoeError(f"a timeline records the copy engine's events; profile {profile.name} computes experts "
                          "on the CPU, which the timeline does not draw")
    fwd = cpu_forward_of(profile)
    config = setting.config
    uses_cache = placement_uses_cache(profile)
    cache = None
    if uses_cache and config.cache_active:
        from simmoe.replay.caches import ExpertCache

        g = trace.geometry
        cache = ExpertCache(int(g.num_layers), int(g.num_experts), int(config.slots), setting.new_cache_policy(),
                            future=future, seed=config.seed, trace=trace, requests=requests,
                            budget=config.cache_budget, admission=config.admission)
    p = fwd.placement
    plugin = p.kind == "plugin"
    shape = placement_shape(fwd, trace, dict(p.options), requests, config.seed, plugin)
    checks = None
    if plugin:
        from simmoe.replay import plugins

        placement = plugins.build("placement", p.spec, placement_class(fwd))
        checks = PluginChoices(p.spec, uses_cache, shape)
    else:
        placement = builtin(p)
    placement.reset(shape)
    return CpuExperts(timer, fwd, trace, cache, placement=placement, uses_cache=uses_cache, checks=checks)


def placement_shape(fwd, trace, options, requests, seed, plugin: bool) -> PlacementShape:
    """The :class:`~simmoe.api.PlacementShape` of ``fwd`` (a plugin's arrays and trace read-only)."""
    from simmoe.replay.plugins import read_only, read_only_trace

    def ro(a):
        a = np.asarray(a)
        return read_only(a) if plugin else a

    g = trace.geometry
    dense = float(fwd.w_bytes.sum() + fwd.head_bytes)
    return PlacementShape(int(g.num_layers), int(g.num_experts), int(g.top_k),
                          decoder_layers=ro(np.asarray(fwd.model.moe_layers, dtype=np.int64)),
                          expert_bytes=ro(fwd.E), copy_ms=ro(fwd.copy_ms()), cpu_read_ms=ro(fwd.read_ms),
                          cpu_token_ms=float(fwd.token_ms), gpu_free_bytes=float(fwd.gpu.gpu.memory_bytes) - dense,
                          host_bytes=float(fwd.cpu.memory_bytes), options=options,
                          trace=read_only_trace(trace) if plugin else trace, requests=tuple(requests), seed=int(seed))


class CpuExperts:
    """The residency stage of the CPU-expert regime (module docstring)."""

    resident = False
    regime = "cpu"

    def __init__(self, timer, fwd, trace, cache=None, *, placement=None, uses_cache=None, checks=None):
        self.timer, self.fwd, self.cache = timer, fwd, cache
        g = trace.geometry
        self.L, self.N, self.k = int(g.num_layers), int(g.num_experts), int(g.top_k)
        if self.L != fwd.L_moe or self.N != fwd.N:
            raise SimmoeError(f"the trace's {self.L} layers x {self.N} experts are not {fwd.model.name}'s "
                              f"{fwd.L_moe} x {fwd.N}")
        self.root, self.node_routes, self.node_ptr = trace.root_routes, trace.node_routes, trace.node_ptr
        self.offset = (np.arange(self.L, dtype=np.int64) * self.N)[:, None]
        if placement is None:       # simmoe's own, from the profile
            placement = builtin(fwd.placement)
            placement.reset(placement_shape(fwd, trace, {}, (), 0, False))
        self.placement, self.checks = placement, checks
        self.uses_cache = bool(getattr(placement, "uses_cache", False)) if uses_cache is None else uses_cache
        self.no_hits = np.zeros((self.L, self.N), dtype=bool)
        self.no_hits.flags.writeable = False
        self.copy_each = fwd.copy_ms()[:, None]
        self.totals = dict.fromkeys(COUNTERS, 0.0)

    # -- the stage's interface ----------------------------------------------------
    def prefill(self, prompt_len: int, demand: np.ndarray, request: int = 0):
        """A prefill forward: its union, its prompt's tokens spread evenly over each layer's experts."""
        n = max(int(prompt_len), 1)
        u = demand.sum(axis=1, keepdims=True)
        counts = np.where(demand, n * self.k / np.maximum(u, 1), 0.0)
        gpu, copy = self._place(demand, "prefill", (request,), (-1,), n, lambda: counts)
        ms, h, m = self._forward(counts, demand, gpu, n, n / 2, n * n / 2, 1, copy)
        return ms, h, m

    def step(self, step, selector_ms: float):
        """(draft, forward, commit ms, experts served on the GPU and on the CPU per layer, None)."""
        demand = step.demand
        n = int(step.tokens)
        counts = _Once(lambda: self.token_counts(step))
        gpu, copy = self._place(demand, "step", tuple(step.requests), tuple(step.positions), n, counts)
        fwd, h, m = self._forward(counts, demand, gpu, n, step.context, n * step.context / max(step.size, 1),
                                  step.size, copy)
        lv = step.levels
        draft = 0.0 if lv <= 0 else self.fwd.draft_ms(lv, step.size, verified=step.tokens)
        return draft, fwd, self.timer.commit_ms(), h, m, None

    def finish(self) -> int:
        return 0

    def counters(self) -> dict:
        """Totals over the replay (prefill included): what :class:`~simmoe.replay.results.ReplayResult` reports."""
        return dict(self.totals)

    # -- the parts --------------------------------------------------------------------
    def token_counts(self, step) -> np.ndarray:
        """n_e per (layer, expert): the step's roots and selected nodes routed there, int [L, N]."""
        parts = [self.root[np.asarray(step.rows, dtype=np.int64)].reshape(-1, self.L, self.k)]
        for row, nodes in zip(step.rows, step.nodes, strict=True):
            if len(nodes):
                parts.append(self.node_routes[int(self.node_ptr[row]) + np.asarray(nodes, dtype=np.int64)]
                             .reshape(-1, self.L, self.k))
        routes = np.concatenate(parts) if len(parts) > 1 else parts[0]
        flat = (routes + self.offset).ravel()
        return np.bincount(flat, minlength=self.L * self.N).reshape(self.L, self.N)

    def _place(self, demand, kind, requests, positions, n, counts):
        """(the demanded experts the GPU runs from its memory, the ones copied for this forward or None)."""
        cached = None
        if self.uses_cache:
            if self.cache is None:
                cached = self.no_hits
            else:
                self.cache.forward(demand, kind, requests, positions)
                cached = self.cache.last_hits      # read-only: nothing here writes it
        if self.checks is None:
            choice = self.placement.place(PlacementForward(demand, cached, n, kind, requests, positions, counts))
            return demand & choice.gpu, choice.copy
        from simmoe.replay.plugins import read_only

        fw = PlacementForward(read_only(demand), cached, n, kind, requests, positions, counts)
        gpu, copy = self.checks.check(self.placement.place(fw), fw)
        return demand & gpu, copy

    def _forward(self, counts, demand, gpu, n, context, pairs, requests, copy=ASK):
        """One forward; ``counts`` n_e [L, N], or a function that makes them (called where they matter);
        ``gpu`` the demanded experts run from GPU memory, ``copy`` those copied for it (or None; by
        default the placement's copies for a step whose hits are ``gpu``)."""
        f = self.fwd
        if copy is ASK:
            tokens = counts if callable(counts) else (lambda: counts)
            copy = self.placement.place(PlacementForward(demand, gpu, n, "step", (), (), tokens)).copy
        cpu = np.greater(demand, gpu)
        gpu_u = np.count_nonzero(gpu, axis=1)
        copies = 0.0
        if copy is not None:      # copied experts run on the GPU (Fiddler: their copy lands first)
            copied = np.count_nonzero(copy, axis=1)
            gpu_u = gpu_u + copied
            copies = float(copied.sum())
            cpu &= ~copy
        flat = np.flatnonzero(cpu)      # the CPU's experts (demanded, not on the GPU), one by one
        layers, experts = np.divmod(flat, self.N)
        # n_e matter only where a CPU expert or the GPU part can be compute-bound (the same times either way)
        lazy = callable(counts) and n <= f.membound_tokens
        if lazy:
            n_e = None
            t = f.read_ms[layers]
        else:
            counts = counts() if callable(counts) else counts
            n_e = counts.reshape(-1)[flat]
            t = f.sparse_expert_ms(layers, n_e)
        cpu_n = np.bincount(layers, minlength=self.L)
        # every token routes to k experts per layer: the GPU's pairs are the rest (lazy: the most they can be)
        gpu_tok = f.most_gpu_pairs(n, gpu_u) if n_e is None else \
            float(n * self.k) - np.bincount(layers, weights=n_e, minlength=self.L)
        out = f.forward_parts(n, gpu_u, gpu_tok, f.sparse_layer_ms(layers, experts, t), cpu_n > 0,
                              copied * self.copy_each[:, 0] if copies else 0.0, context, pairs, requests, bound=lazy)
        if lazy and out[3]:   # compute-bound somewhere at the most pairs: count them
            return self._forward(counts(), demand, gpu, n, context, pairs, requests, copy)
        tot = self.totals
        tot["cpu_reads"] += float(len(layers))
        tot["dram_bytes"] += float(f.E[layers].sum())
        tot["gpu_served"] += float(gpu_u.sum())
        tot["copies"] += copies
        tot["gpu_ms"] += out[1]
        tot["cpu_ms"] += out[2]
        return out[0], gpu_u.astype(np.int64), cpu_n.astype(np.int64)


class _Once:
    """A function called at most once: n_e shared by the placement and the forward's timing."""

    __slots__ = ("make", "value")

    def __init__(self, make):
        self.make, self.value = make, None

    def __call__(self):
        if self.value is None:
            self.value = self.make()
        return self.value
