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
        gpu = self._on_gpu(demand, "step", step.requests, step.positions)
        n = int(step.tokens)
        fwd, h, m = self._forward(lambda: self.token_counts(step), demand, gpu, n, step.context,
                                  n * step.context / max(step.size, 1), step.size)
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
        return self.cache.last_hits         # read-only: nothing here writes it

    def _forward(self, counts, demand, gpu, n, context, pairs, requests):
        """One forward; ``counts`` n_e [L, N], or a function that makes them (called where they matter)."""
        f = self.fwd
        flat = np.flatnonzero(np.greater(demand, gpu))   # the CPU's experts (demanded, not on the GPU), one by one
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
        gpu_u = np.count_nonzero(gpu, axis=1)
        copies = 0.0
        if self.fiddler:      # copy an expert when its copy lands before the CPU would have computed it
            copy = self.copy_each[layers, 0] < t
            copied = np.bincount(layers[copy], minlength=self.L)
            gpu_u = gpu_u + copied
            copies = float(copied.sum())
            layers, experts, t = layers[~copy], experts[~copy], t[~copy]
            n_e = None if n_e is None else n_e[~copy]
        cpu_n = np.bincount(layers, minlength=self.L)
        # every token routes to k experts per layer: the GPU's pairs are the rest (lazy: the most they can be)
        gpu_tok = f.most_gpu_pairs(n, gpu_u) if n_e is None else \
            float(n * self.k) - np.bincount(layers, weights=n_e, minlength=self.L)
        out = f.forward_parts(n, gpu_u, gpu_tok, f.sparse_layer_ms(layers, experts, t), cpu_n > 0,
                              copied * self.copy_each[:, 0] if copies else 0.0, context, pairs, requests, bound=lazy)
        if lazy and out[3]:   # compute-bound somewhere at the most pairs: count them
            return self._forward(counts(), demand, gpu, n, context, pairs, requests)
        tot = self.totals
        tot["cpu_reads"] += float(len(layers))
        tot["dram_bytes"] += float(f.E[layers].sum())
        tot["gpu_served"] += float(gpu_u.sum())
        tot["copies"] += copies
        tot["gpu_ms"] += out[1]
        tot["cpu_ms"] += out[2]
        return out[0], gpu_u.astype(np.int64), cpu_n.astype(np.int64)
