"""The residency stage when host-resident experts are computed on the CPU (docs/cpu-experts.md).

One implementation, :class:`CpuExperts`, for the placements of a profile
``MODEL[/FORMAT]@GPU[+LINK]+CPU~PLACEMENT`` (:mod:`simmoe.hardware.cpu_profile`):

* ``cpu-layers:N`` — llama.cpp ``--n-cpu-moe N``: the experts of the first N
  decoder layers live in host RAM and run on the CPU, the rest on the GPU;
* ``cpu-all`` — llama.cpp ``-cmoe``: every routed expert on the CPU;
* ``cpu-misses`` — a GPU expert cache of the replay's policy and budget
  (``--cache``, ``--slots``, ``--cache-experts``): hits run on the GPU,
  misses on the CPU (not copied); the cache admits them as its policy says,
  the admitting copy taken off the forward's critical path (an assumption);
* ``fiddler`` — Fiddler's rule: each expert not on the GPU is copied or
  computed on the CPU, whichever finishes first for the tokens routed to it
  (with a cache, its hits run on the GPU as above).

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

from simmoe.errors import SimmoeError

COUNTERS = ("cpu_reads", "dram_bytes", "gpu_served", "copies", "gpu_ms", "cpu_ms")


def cpu_forward_of(profile):
    """The profile's :class:`~simmoe.hardware.cpu_forward.CpuForward`, or None in the other regimes."""
    phys = getattr(profile, "physical", None)
    return phys if getattr(phys, "placement", None) is not None else None


def check_cpu_setting(setting, trace, profile) -> None:
    """Refuse, in one line, what has no meaning (or is not modelled) with the profile's placement."""
    fwd = cpu_forward_of(profile)
    if fwd is None:
        return
    c, where = setting.config, fwd.placement.text
    if c.prefetch != "none":
        raise SimmoeError(f"--prefetch {c.prefetch}: placement {where} computes host-resident experts on the CPU; "
                          "prefetching copies is not modelled in this regime")
    if setting.uses_residency:
        raise SimmoeError(f"selector {c.selector!r} selects from the experts on their way to the GPU; placement "
                          f"{where} computes them on the CPU instead")
    if not fwd.placement.uses_cache:
        if c.cache_budget is not None and c.cache != "none":
            raise SimmoeError(f"--cache-experts/--cache-mib: placement {where} fixes which experts are on the GPU, "
                              "so a GPU expert cache has no meaning (use ~cpu-misses or ~fiddler)")
        return
    if c.cache_active:
        from simmoe.hardware.cpu_profile import memory_use

        g = trace.geometry
        experts = c.cache_budget if c.cache_budget is not None else int(c.slots) * int(g.num_layers)
        on_gpu = memory_use(fwd)[0] + experts * float(fwd.E.mean())
        if on_gpu > fwd.gpu.gpu.memory_bytes:
            raise SimmoeError(f"the GPU expert cache of {experts} experts ({experts * float(fwd.E.mean()) / 2**30:.1f} "
                              f"GiB in {fwd.fmt.name}) and the non-expert weights do not fit in "
                              f"{fwd.gpu.gpu.name}'s {fwd.gpu.gpu.memory_bytes / 2**30:.0f} GiB; give a smaller "
                              "--slots or --cache-experts")


def build_cpu_residency(trace, setting, profile, timer, *, future=None, record=None, requests=()):
    """The residency stage of a CPU-regime profile (its cache built new from ``setting``)."""
    if record is not None:
        raise SimmoeError(f"a timeline records the copy engine's events; profile {profile.name} computes experts "
                          "on the CPU, which the timeline does not draw")
    fwd = cpu_forward_of(profile)
    config = setting.config
    cache = None
    if fwd.placement.uses_cache and config.cache_active:
        from simmoe.replay.caches import ExpertCache

        g = trace.geometry
        cache = ExpertCache(int(g.num_layers), int(g.num_experts), int(config.slots), setting.new_cache_policy(),
                            future=future, seed=config.seed, trace=trace, requests=requests,
                            budget=config.cache_budget, admission=config.admission)
    return CpuExperts(timer, fwd, trace, cache)


class CpuExperts:
    """The residency stage of the CPU-expert regime (module docstring)."""

    resident = False
    regime = "cpu"

    def __init__(self, timer, fwd, trace, cache=None):
        self.timer, self.fwd, self.cache = timer, fwd, cache
        g = trace.geometry
        self.L, self.N, self.k = int(g.num_layers), int(g.num_experts), int(g.top_k)
        if self.L != fwd.L_moe or self.N != fwd.N:
            raise SimmoeError(f"the trace's {self.L} layers x {self.N} experts are not {fwd.model.name}'s "
                              f"{fwd.L_moe} x {fwd.N}")
        self.root, self.node_routes, self.node_ptr = trace.root_routes, trace.node_routes, trace.node_ptr
        self.offset = (np.arange(self.L, dtype=np.int64) * self.N)[:, None]
        self.fixed_gpu = ~fwd.cpu_layer[:, None] if not fwd.placement.uses_cache else None
        self.fiddler = fwd.placement.kind == "fiddler"
        self.copy_each = fwd.copy_ms()[:, None]
        self.totals = dict.fromkeys(COUNTERS, 0.0)

    # -- the stage's interface ----------------------------------------------------
    def prefill(self, prompt_len: int, demand: np.ndarray, request: int = 0):
        """A prefill forward: its union, its prompt's tokens spread evenly over each layer's experts."""
        n = max(int(prompt_len), 1)
        u = demand.sum(axis=1, keepdims=True)
        counts = np.where(demand, n * self.k / np.maximum(u, 1), 0.0)
        gpu = self._on_gpu(demand, "prefill", (request,), (-1,))
        ms, h, m = self._forward(counts, demand, gpu, n, n / 2, n * n / 2, 1)
        return ms, h, m

    def step(self, step, selector_ms: float):
        """(draft, forward, commit ms, experts served on the GPU and on the CPU per layer, None)."""
        demand = step.demand
        counts = self.token_counts(step)
        gpu = self._on_gpu(demand, "step", step.requests, step.positions)
        n = int(step.tokens)
        fwd, h, m = self._forward(counts, demand, gpu, n, step.context, n * step.context / max(step.size, 1),
                                  step.size)
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

    def _on_gpu(self, demand, kind, requests, positions) -> np.ndarray:
        """The demanded experts the GPU holds for this forward (the cache serves it here)."""
        if self.fixed_gpu is not None:
            return demand & self.fixed_gpu
        if self.cache is None:
            return np.zeros_like(demand)
        self.cache.forward(demand, kind, requests, positions)
        return np.array(self.cache.last_hits)

    def _forward(self, counts, demand, gpu, n, context, pairs, requests):
        f = self.fwd
        on_cpu = demand & ~gpu
        cpu_t = f.cpu_expert_ms(np.where(on_cpu, counts, 0))
        copied = None
        if self.fiddler:      # copy an expert when its copy lands before the CPU would have computed it
            copied = on_cpu & (self.copy_each < cpu_t)
            on_cpu = on_cpu & ~copied
            cpu_t = np.where(copied, 0.0, cpu_t)
            gpu = gpu | copied
        n_copied = copied.sum(axis=1) if copied is not None else 0
        gpu_u = gpu.sum(axis=1)
        total, gpu_ms, cpu_ms = f.forward_parts(n, gpu_u, np.where(gpu, counts, 0).sum(axis=1), f.socket_sums(cpu_t),
                                                on_cpu.any(axis=1), n_copied * f.copy_ms(), context, pairs, requests)
        t = self.totals
        cpu_n = on_cpu.sum(axis=1)
        t["cpu_reads"] += float(cpu_n.sum())
        t["dram_bytes"] += float(cpu_n @ f.E)
        t["gpu_served"] += float(gpu_u.sum())
        t["copies"] += float(np.sum(n_copied))
        t["gpu_ms"] += gpu_ms
        t["cpu_ms"] += cpu_ms
        return total, gpu_u.astype(np.int64), cpu_n.astype(np.int64)
