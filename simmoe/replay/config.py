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
    # whether a missed expert must take a cache slot ("forced", as engines do) or may bypass the cache
    # ("bypass"; simmoe.replay.caches.ADMISSIONS, docs/caches.md); a residency setting: never in plan_key
    admission: str = "forced"

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
        """This configuration, its fields checked and its plugins found (:func:`resolve`), else one line."""
        return resolve(self).config

    def check_fields(self) -> None:
        """Every field's own check (the plugins' names are :func:`resolve`'s)."""
        if isinstance(self.slots, bool) or int(self.slots) != self.slots or self.slots < 0:
            raise SimmoeError(f"slots must be a non-negative integer, got {self.slots!r}")
        b = self.cache_budget
        if b is not None and (isinstance(b, bool) or int(b) != b or b < 0):
            raise SimmoeError(f"--cache-experts {b!r}: the cache budget must be a non-negative number of experts")
        from simmoe.replay.caches import check_admission

        check_admission(self.admission)
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

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["options"] = dict(self.options)
        return d


# what a selector may declare (simmoe.api.Selector's optional class attributes) and its default
SELECTOR_FLAGS = {"drafts": True, "uses_cost": False, "uses_evict_cost": False, "uses_residency": False,
                  "reads_verdicts": False, "needs_prepare": False}


@dataclass(frozen=True)
class Setting:
    """A :class:`ReplayConfig` resolved: its plugins' classes, loaded once, and what they declare.

    Made by :func:`resolve`, the one place where a configuration's names are
    looked up and the whole setting is checked, at the edge of a replay
    (``replay``, ``replay_all``, and each worker for what it receives); the
    engine and its stages read the flags here.  Every plugin is built new for
    each replay from these classes (:meth:`new_selector`,
    :meth:`new_cache_policy`, :meth:`new_prefetch_policy`), so no state passes
    from one replay to the next.  A setting pickles as its configuration and
    is resolved again where it lands (a worker process).
    """

    config: ReplayConfig
    selector_cls: type
    cache_cls: type | None = None       # None: --cache none
    prefetch_cls: type | None = None    # None: --prefetch none
    # the selector's declarations (SELECTOR_FLAGS)
    drafts: bool = True
    uses_cost: bool = False
    uses_evict_cost: bool = False
    uses_residency: bool = False
    reads_verdicts: bool = False
    needs_prepare: bool = False
    # the cache policy's: its future demand in advance (an offline policy such as Belady)
    needs_future: bool = False
    # the prefetch policy's: it knows the verified subtree before selection (an oracle)
    knows_truth: bool = False

    def __reduce__(self):
        return (resolve, (self.config,))

    @property
    def selector_flags(self) -> dict[str, bool]:
        """The selector's declarations by name (:data:`SELECTOR_FLAGS`)."""
        return {k: bool(getattr(self, k)) for k in SELECTOR_FLAGS}

    def offline_cache(self, profile) -> bool:
        """Whether the replay's cache is an offline policy's, which is handed the future demand."""
        return self.needs_future and self.config.cache_active and not profile.resident

    def new_selector(self, context):
        """A new selector for one replay (``context``: :class:`simmoe.api.SelectorContext`)."""
        from simmoe.replay import plugins

        return plugins.build("selector", self.config.selector, self.selector_cls, context)

    def new_cache_policy(self):
        """A new cache policy for one replay (its calls guarded)."""
        from simmoe.replay import plugins

        assert self.cache_cls is not None, "no cache policy in this setting"
        return plugins.build("cache", self.config.cache, self.cache_cls)

    def new_prefetch_policy(self):
        """A new prefetch policy for one replay (its calls guarded)."""
        from simmoe.replay import plugins

        assert self.prefetch_cls is not None, "no prefetch policy in this setting"
        return plugins.build("prefetch", self.config.prefetch, self.prefetch_cls)

    def without_prefetch(self) -> Setting:
        """The same setting without its prefetch policy (the reference of the time prefetching saves)."""
        return replace(self, config=replace(self.config, prefetch="none"), prefetch_cls=None, knows_truth=False)

    def check(self, trace, profile) -> Setting:
        """Refuse, in one line, a setting that cannot replay ``trace`` on ``profile``, before any work.

        The requests and batch, the cache budget, the cache policy's own
        ``check``, and the combinations with no meaning
        (:mod:`simmoe.replay.engine`'s docstring); the engine's
        ``check_setting`` adds the selector's construction (its cost models).
        """
        config = self.config
        if not profile.resident:
            check_budget(trace, config)
            self._check_cache_policy(trace)
        self._check_combination(trace, profile)
        R = requests_of(trace, config)
        if R == 0:
            raise SimmoeError("the trace has no requests")
        check_batch(config.batch, R)
        return self

    def _check_combination(self, trace, profile) -> None:
        config, coupled = self.config, self.uses_residency
        from simmoe.replay.residency_cpu import check_cpu_setting

        check_cpu_setting(self, trace, profile)     # experts computed on the CPU (docs/cpu-experts.md)
        if profile.resident and config.prefetch != "none":
            raise SimmoeError(f"--prefetch {config.prefetch}: profile {profile.name} keeps every expert on the "
                              "device (resident regime): there are no copies to prefetch")
        if profile.resident and coupled:
            raise SimmoeError(f"selector {config.selector!r} selects from the experts on their way to the device; "
                              f"profile {profile.name} keeps every expert there (resident regime)")
        if coupled and self.knows_truth:
            raise SimmoeError(f"--prefetch {config.prefetch} knows the verified subtree before it is selected; "
                              f"selector {config.selector!r} selects from what has been prefetched, so the "
                              "two cannot be combined")
        if coupled and config.cache_active and self.needs_future:
            raise SimmoeError(f"cache policy {config.cache!r} needs the replay's demand in advance, which "
                              f"selector {config.selector!r} changes as it selects from the cache")
        if config.prefetch == "draft" and len(trace.node_parent) == 0:
            raise SimmoeError("--prefetch draft: the trace holds no draft pools, so no route predictions "
                              "to prefetch from (use --prefetch next-layer or oracle)")

    def _check_cache_policy(self, trace) -> None:
        """A cache policy's optional ``check(shape)``: refuse, before any work, a replay it cannot serve."""
        config = self.config
        check = getattr(self.cache_cls, "check", None) if config.cache_active else None
        if check is None:
            return
        from simmoe.api import CacheShape
        from simmoe.replay import plugins
        from simmoe.replay.caches import handed_trace

        g = trace.geometry
        shape = CacheShape(int(g.num_layers), int(g.num_experts), int(config.slots), budget=config.cache_budget,
                           seed=config.seed, trace=handed_trace(self.cache_cls, trace),
                           requests=tuple(range(requests_of(trace, config))))
        try:
            check(shape)
        except SimmoeError:   # the policy's own refusal, as it is
            raise
        except (Exception, SystemExit) as exc:
            raise plugins.plugin_error("cache", config.cache, exc, "in check()") from None


def resolve(config: ReplayConfig | Setting, trace=None, profile=None) -> Setting:
    """``config`` as a :class:`Setting`: its fields checked, its plugins loaded and their flags read.

    With ``trace`` and ``profile``, the whole setting is checked against them
    as well (:meth:`Setting.check`).  A :class:`Setting` is returned as it is
    (checked again only when ``trace`` and ``profile`` are given).
    """
    if isinstance(config, Setting):
        setting = config
    else:
        from simmoe.replay import plugins

        selector = plugins.load("selector", config.selector)
        config.check_fields()
        cache = plugins.load("cache", config.cache) if config.cache != "none" else None
        prefetch = plugins.load("prefetch", config.prefetch) if config.prefetch != "none" else None
        flags = {k: bool(getattr(selector, k, default)) for k, default in SELECTOR_FLAGS.items()}
        setting = Setting(config, selector, cache, prefetch, **flags,
                          needs_future=bool(getattr(cache, "needs_future", False)),
                          knows_truth=bool(getattr(prefetch, "knows_truth", False)))
    if trace is not None and profile is not None:
        setting.check(trace, profile)
    return setting


def plan_key(config: ReplayConfig | Setting) -> tuple:
    """What a plan (the schedule of selections) depends on: configurations with equal keys share one."""
    setting = resolve(config)
    config = setting.config
    cost_key = (config.hardware if (setting.uses_cost or setting.uses_evict_cost) else None,
                config.cache_active if setting.uses_cost else None)
    exact = config.route_accuracy >= 1.0  # exact routes do not depend on the seed
    route_key = (config.route_accuracy, None if exact else config.seed) if setting.drafts else None
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
    """Refuse a profile made for another model than the trace's (:mod:`simmoe.hardware.model_check`)."""
    from simmoe.hardware.model_check import check_profile_model

    check_profile_model(trace.geometry, profile, name)


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
