"""One replay's setting: :class:`ReplayConfig`, its checks, and what a shared plan depends on."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from simmoe.errors import SimmoeError
from simmoe.replay.route_prediction import check_accuracy

TIMING_MODELS = ("event", "simpy", "closed")
SELECTOR_CLOCKS = ("wall", "cpu")
DEFAULT_PROFILE = "a100-pcie-40gb"


@dataclass(frozen=True)
class ReplayConfig:
    """One replay configuration: a choice of implementation for every stage of the cycle.

    ``selector`` (selection), ``batch`` (admission: continuous batching of B
    requests), ``temperature`` (verification: greedy at 0, sampled above),
    ``cache`` / ``slots`` / ``prefetch`` (expert residency: a cache policy, a
    prefetch policy and the copy engine; the profile decides whether experts
    are resident instead; ``cache_budget``, when not None, is one budget of
    experts across all layers in place of ``slots`` per layer), ``timing`` (event, simpy or closed; physical
    profiles time with their physical model), ``hardware`` (the profile).
    ``selector``, ``cache`` and ``prefetch`` are registered names or
    ``module:Name`` (:mod:`simmoe.replay.plugins`).

    ``selector_ms=None`` uses the measured selector time, read from the
    ``selector_clock``: ``"wall"`` (elapsed time, as the paper measures it)
    or ``"cpu"`` (the selecting thread's CPU time: the same on an idle core,
    but not inflated when other processes share the machine).
    """

    selector: str = "specfit"
    slots: int = 48
    cache: str = "lru"
    hardware: str = DEFAULT_PROFILE
    route_accuracy: float = 1.0
    selector_ms: float | None = None
    selector_clock: str = "wall"
    timing: str = "event"
    seed: int = 0
    requests: int | None = None
    options: tuple[tuple[str, float], ...] = ()
    # 0: greedy verification; T > 0: sampled verification (simmoe.trace.verdicts), its draws keyed by
    # ``sampling_seed`` (None: ``seed``; hwprobe runs record theirs apart from the route seed)
    temperature: float = 0.0
    sampling_seed: int | None = None
    batch: int = 1
    prefetch: str = "none"
    # one budget of experts across layers (--cache-experts / --cache-mib) instead of `slots` per layer;
    # a residency setting: it never enters plan_key
    cache_budget: int | None = None

    @property
    def draw_seed(self) -> int:
        """The seed of the target's draws at temperature > 0."""
        return int(self.seed if self.sampling_seed is None else self.sampling_seed)

    @property
    def cache_active(self) -> bool:
        """Whether an expert cache keeps experts between forwards."""
        size = self.slots if self.cache_budget is None else self.cache_budget
        return size > 0 and self.cache != "none"

    def validate(self) -> ReplayConfig:
        from simmoe.replay import plugins

        plugins.load("selector", self.selector)
        if isinstance(self.slots, bool) or int(self.slots) != self.slots or self.slots < 0:
            raise SimmoeError(f"slots must be a non-negative integer, got {self.slots!r}")
        b = self.cache_budget
        if b is not None and (isinstance(b, bool) or int(b) != b or b < 0):
            raise SimmoeError(f"--cache-experts {b!r}: the cache budget must be a non-negative number of experts")
        if self.cache != "none":
            plugins.load("cache", self.cache)
        if self.prefetch != "none":
            plugins.load("prefetch", self.prefetch)
        if self.timing not in TIMING_MODELS:
            raise SimmoeError(f"unknown timing model {self.timing!r}; known: {', '.join(TIMING_MODELS)}")
        check_accuracy(self.route_accuracy)
        if self.selector_clock not in SELECTOR_CLOCKS:
            raise SimmoeError(f"unknown selector clock {self.selector_clock!r}; known: {', '.join(SELECTOR_CLOCKS)}")
        if self.selector_ms is not None and not (math.isfinite(float(self.selector_ms))
                                                 and float(self.selector_ms) >= 0.0):
            raise SimmoeError(f"selector time must be a non-negative number of ms, got {self.selector_ms!r}")
        if self.requests is not None and int(self.requests) < 1:
            raise SimmoeError(f"requests must be at least 1, got {self.requests!r}")
        if isinstance(self.batch, bool) or int(self.batch) != self.batch or self.batch < 1:
            raise SimmoeError(f"--batch {self.batch}: the batch size must be an integer >= 1")
        if isinstance(self.seed, bool) or int(self.seed) != self.seed or self.seed < 0:
            raise SimmoeError(f"--seed {self.seed}: must be a non-negative integer")
        from simmoe.trace.sampling import check_temperature_value

        check_temperature_value(self.temperature, "temperature")
        return self

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["options"] = dict(self.options)
        return d


def plan_key(config: ReplayConfig) -> tuple:
    """What a plan (the schedule of selections) depends on: configurations with equal keys share one."""
    from simmoe.replay import plugins

    cls = plugins.load("selector", config.selector)
    uses_cost = bool(getattr(cls, "uses_cost", False))
    uses_evict = bool(getattr(cls, "uses_evict_cost", False))
    drafts = bool(getattr(cls, "drafts", True))
    cost_key = (config.hardware if (uses_cost or uses_evict) else None,
                config.cache_active if uses_cost else None)
    exact = config.route_accuracy >= 1.0  # exact routes do not depend on the seed
    route_key = (config.route_accuracy, None if exact else config.seed) if drafts else None
    sampling_key = (float(config.temperature), config.draw_seed) if config.temperature > 0 else None
    return (config.selector, cost_key, route_key, config.requests, config.options, sampling_key, int(config.batch))


def ar_baseline(config: ReplayConfig) -> ReplayConfig:
    """The reference of every speedup: AR without a cache or prefetch, same trace, profile and batch."""
    return replace(config, selector="ar", slots=0, cache="none", selector_ms=None, prefetch="none",
                   cache_budget=None)


def check_batch(batch, requests: int) -> int:
    """``--batch`` must be an integer from 1 to the number of requests replayed."""
    if isinstance(batch, bool) or int(batch) != batch or batch < 1:
        raise SimmoeError(f"--batch {batch}: the batch size must be an integer >= 1")
    if batch > requests:
        raise SimmoeError(f"--batch {batch}: only {requests} request{'s' if requests != 1 else ''} to replay; "
                          f"the batch size must be at most that")
    return int(batch)


def check_profile_geometry(trace, profile, name: str) -> None:
    """Refuse a profile made for a model with another number of layers than the trace's.

    A profile's timing (non-expert forward time, copies per layer) belongs to one
    model; ``num_layers = 0`` in a profile means "not stated" and is accepted.
    """
    want = int(getattr(profile, "num_layers", 0) or 0)
    have = int(trace.geometry.num_layers)
    phys = getattr(profile, "physical", None)  # a physical profile knows its model's experts too
    g = trace.geometry
    if phys is not None and (phys.model.trace_experts, phys.model.trace_top_k) != (g.num_experts, g.top_k):
        raise SimmoeError(f"profile {name} is {phys.model.name} ({phys.model.trace_experts} experts, "
                          f"top-{phys.model.trace_top_k}) but the trace routes to {g.num_experts} experts, "
                          f"top-{g.top_k}; name the trace's model in the profile (simmoe models)")
    if want and want != have:
        raise SimmoeError(f"profile {name} describes a {want}-layer model but the trace has {have} "
                          "layers; use a profile of this model (simmoe fit or hwprobe calibrate)")


def check_budget(trace, config: ReplayConfig) -> None:
    """Refuse a cache budget that cannot hold one layer's top-k experts (a forward needs them at once)."""
    b = config.cache_budget
    if b is None or config.cache == "none":
        return
    k = int(trace.geometry.top_k)
    if b < k:
        raise SimmoeError(f"--cache-experts {b}: a cache budget must hold at least one layer's top-{k} experts "
                          f"(a token routes to {k} experts per layer); give at least {k}, or --slots 0 for no cache")


def budget_experts(experts: int | None, mib: float | None, trace) -> int | None:
    """``--cache-experts E`` or ``--cache-mib M`` as a number of experts (M MiB / the trace's bytes per expert)."""
    if experts is not None and mib is not None:
        raise SimmoeError("--cache-experts and --cache-mib both give the cache budget: give one")
    if mib is None:
        return experts
    if not (math.isfinite(float(mib)) and float(mib) >= 0):
        raise SimmoeError(f"--cache-mib {mib}: the cache budget must be a non-negative number of MiB")
    size = int(getattr(trace.geometry, "expert_bytes", 0) or 0)
    if size <= 0:
        raise SimmoeError(f"--cache-mib {mib}: the trace does not record the bytes of one expert "
                          "(geometry.expert_bytes); give the budget in experts with --cache-experts")
    return int(float(mib) * 2**20 // size)


def requests_of(trace, config: ReplayConfig) -> int:
    """How many requests the replay covers (the first ``config.requests``, or all)."""
    n = len(trace.requests)
    return n if config.requests is None else min(int(config.requests), n)
