"""The replays behind every table and plot of ``simmoe report``, for one trace.

Experiments (each a list of replay configurations; a configuration shared by
several experiments runs once):

===========  ==================================================================
``main``     AR, EAGLE-3, SpecFit with the cache (``slots`` LRU) and without
             (SpecFit Tables 2–3, Figures 2–3)
``slots``    EAGLE-3 and SpecFit over the slot sweep, 0 = no cache (Figure 4)
``rtx4090``  AR, EAGLE-3, SpecFit on the RTX 4090 profile, its slots and none
             (Table 4)
``link``     AR, EAGLE-3, SpecFit with and without the cache on profiles whose
             host-to-device link is PCIe Gen4, Gen5, NVLink-C2C (what-if;
             :mod:`simmoe.report.whatif`)
``routes``   SpecFit with a route predictor of accuracy a (§4.6), with and
             without the cache (what-if; a = 0.6 is published)
``policy``   EAGLE-3 and SpecFit under LRU, LFU, Belady, static pinning over
             a few slot counts (what-if)
===========  ==================================================================

Every configuration uses a fixed selector time, so the numbers do not
depend on the machine that computes them: the cost-aware selectors
(``specfit``) are charged the paper's median selector time for the trace's
dataset (SpecFit §4.6: 2.82 ms GSM8K, 1.43 ms CNN/DM; the base profile's
``cycle.selector_ms`` for other datasets) unless ``selector_ms`` is given;
the top-K rules cost nothing; AR has no selector.  Timing draws use a fixed
seed.  Each row carries the speedup over AR without a cache on the same
trace and profile (SpecFit §4.1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from simmoe.errors import ProfileError, SimmoeError
from simmoe.published import PUBLISHED
from simmoe.replay.engine import ReplayConfig, ar_baseline, replay_all
from simmoe.replay.metrics import COUNTERS, speedup
from simmoe.replay.selectors import SELECTORS
from simmoe.report.whatif import LINKS, bandwidth_profile
from simmoe.trace.schema import Trace
from simmoe.trace.subset import head_requests

METHODS = ("ar", "eagle3", "specfit")
KNOWN_DATASETS = ("gsm8k", "cnndm")


@dataclass(frozen=True)
class ReportSettings:
    """Everything a report's numbers depend on (recorded in the report)."""

    requests: int | None = None          # replay only the first N requests of each trace
    hardware: str = "a100-pcie-40gb"     # base profile (Tables 2–3, Figures 2–4, what-ifs)
    hardware_rtx: str = "rtx4090-24gb"   # Table 4
    slots: int = 48
    slot_sweep: tuple[int, ...] = (48, 24, 12, 0)
    rtx_slots: int = 32
    links: tuple[tuple[str, float], ...] = LINKS
    accuracies: tuple[float, ...] = (1.0, 0.8, 0.6, 0.4, 0.2)
    policies: tuple[str, ...] = ("lru", "lfu", "belady", "static")
    policy_slots: tuple[int, ...] = (12, 24, 48)
    selector_ms: float | None = None     # None: the paper's median for the dataset (see module doc)
    seed: int = 0
    timing: str = "event"
    check_requests: int = 2              # the slice whose tables a test recomputes
    # the prefetch what-if's grid (simmoe.report.prefetch) and the regime table's batches (simmoe.report.regimes)
    prefetch_accuracies: tuple[float, ...] = (0.4, 0.6, 0.8, 1.0)
    prefetch_slots: tuple[int, ...] = (0, 12, 48)
    batches: tuple[int, ...] = (1, 4, 16, 64)
    quick: bool = False                  # --quick: the reduced grids of QUICK

    def validate(self) -> ReportSettings:
        if self.requests is not None and self.requests < 1:
            raise SimmoeError(f"--requests must be at least 1, got {self.requests}")
        if self.check_requests < 1:
            raise SimmoeError(f"--check-requests must be at least 1, got {self.check_requests}")
        if self.slots < 1 or self.rtx_slots < 1:
            raise SimmoeError("--slots must be at least 1 (the runs without a cache are added anyway)")
        if any(s < 0 for s in self.slot_sweep + self.policy_slots):
            raise SimmoeError("slot counts must be >= 0")
        if any(g <= 0 for _, g in self.links):
            raise SimmoeError("link bandwidths must be > 0 GB/s")
        if self.selector_ms is not None and not self.selector_ms >= 0:
            raise SimmoeError(f"--selector-ms must be >= 0, got {self.selector_ms}")
        return self

    def to_dict(self) -> dict:
        return {"requests": self.requests, "hardware": self.hardware,
                "hardware_rtx": self.hardware_rtx, "slots": self.slots,
                "slot_sweep": list(self.slot_sweep), "rtx_slots": self.rtx_slots,
                "links": [[a, b] for a, b in self.links], "accuracies": list(self.accuracies),
                "policies": list(self.policies), "policy_slots": list(self.policy_slots),
                "selector_ms": self.selector_ms, "seed": self.seed, "timing": self.timing,
                "check_requests": self.check_requests,
                "prefetch_accuracies": list(self.prefetch_accuracies),
                "prefetch_slots": list(self.prefetch_slots), "batches": list(self.batches),
                "quick": self.quick}

    @classmethod
    def from_dict(cls, d: dict) -> ReportSettings:
        return cls(requests=d["requests"], hardware=d["hardware"], hardware_rtx=d["hardware_rtx"],
                   slots=d["slots"], slot_sweep=tuple(d["slot_sweep"]), rtx_slots=d["rtx_slots"],
                   links=tuple((a, float(b)) for a, b in d["links"]),
                   accuracies=tuple(d["accuracies"]), policies=tuple(d["policies"]),
                   policy_slots=tuple(d["policy_slots"]), selector_ms=d["selector_ms"],
                   seed=d["seed"], timing=d["timing"], check_requests=d["check_requests"],
                   # absent from reports made before these settings existed: their values then
                   prefetch_accuracies=tuple(d.get("prefetch_accuracies", cls.prefetch_accuracies)),
                   prefetch_slots=tuple(d.get("prefetch_slots", cls.prefetch_slots)),
                   batches=tuple(d.get("batches", cls.batches)), quick=bool(d.get("quick", False)))

    def quicken(self) -> ReportSettings:
        """``--quick``: :data:`QUICK`'s reduced grids, and 1 request per trace unless ``requests`` is set."""
        return replace(self, **QUICK, quick=True, requests=self.requests or 1, check_requests=1)


# ``--quick``: every table and figure of the report, on fewer points (about 10 s a trace instead of minutes)
QUICK = dict(slot_sweep=(48, 12, 0), links=LINKS[:1] + LINKS[-1:], accuracies=(1.0, 0.6),
             policies=("lru", "belady"), policy_slots=(12,), prefetch_accuracies=(0.6, 1.0),
             prefetch_slots=(12,), batches=(1, 4))


# --------------------------------------------------------------------------
# traces
# --------------------------------------------------------------------------
def dataset_of(trace: Trace, path: str | None = None) -> str:
    """The trace's dataset: its requests' common ``dataset`` value, else the file's stem, else 'mixed'."""
    names = sorted({str(x) for x in trace.requests.dataset})
    if len(names) == 1:
        return names[0]
    if path is not None and Path(path).stem in KNOWN_DATASETS:
        return Path(path).stem
    return "mixed"


# --------------------------------------------------------------------------
# configurations
# --------------------------------------------------------------------------
def search_ms(settings: ReportSettings, dataset: str, base_profile) -> float:
    """Fixed selector time of the cost-aware selectors (see the module doc)."""
    if settings.selector_ms is not None:
        return float(settings.selector_ms)
    medians = PUBLISHED["specfit"]["selector_time_ms_median"]
    return float(medians.get(dataset, base_profile.selector_ms))


def check_model(trace: Trace, path: str, profile, flag: str) -> None:
    """Refuse ``profile`` (given as ``flag``) when it describes another model than ``trace``'s: one line
    naming both (:mod:`simmoe.hardware.model_check`, the check every command makes)."""
    from simmoe.hardware.model_check import geometry_problem

    problem = geometry_problem(trace.geometry, profile, f"{profile.name} ({flag})")
    if problem is not None:
        raise ProfileError(f"{path}: {problem}")


def check_models(trace: Trace, path: str, settings: ReportSettings) -> None:
    """Every profile the report times ``trace`` with must describe its model: the base and the RTX 4090's.

    The link what-ifs (:func:`~simmoe.report.whatif.bandwidth_profile`) keep the base's model, so the
    base's check covers them; the regime table's resident profile is checked where it is used
    (:func:`simmoe.report.regimes.regime_rows`).
    """
    from simmoe.hardware.profile import load_profile

    check_model(trace, path, load_profile(settings.hardware), "--hardware")
    check_model(trace, path, load_profile(settings.hardware_rtx), "--hardware-rtx")


def load_profiles(settings: ReportSettings) -> dict:
    """Name → profile: the base, the RTX 4090 and the link what-ifs derived from the base."""
    from simmoe.hardware.profile import load_profile

    base = load_profile(settings.hardware)
    rtx = load_profile(settings.hardware_rtx)
    profiles = {base.name: base, rtx.name: rtx}
    for label, gbps in settings.links:
        p = bandwidth_profile(base, gbps, label)
        profiles[p.name] = p
    return profiles


def experiment_configs(settings: ReportSettings, dataset: str, profiles: dict,
                       groups: tuple[str, ...] | None = None) -> list[tuple[str, ReplayConfig]]:
    """(experiment, configuration) pairs of every experiment (or of ``groups``), in report order."""
    from simmoe.hardware.profile import load_profile

    base = load_profile(settings.hardware)
    rtx = load_profile(settings.hardware_rtx)
    fixed = search_ms(settings, dataset, base)

    def cfg(selector, slots, hardware, cache="lru", acc=1.0):
        cache = cache if slots > 0 else "none"
        sel_ms = fixed if SELECTORS[selector].uses_cost else 0.0
        return ReplayConfig(selector=selector, slots=slots, cache=cache, hardware=hardware,
                            route_accuracy=acc, selector_ms=sel_ms, timing=settings.timing,
                            seed=settings.seed, requests=settings.requests).validate()

    out: list[tuple[str, ReplayConfig]] = []
    want = set(groups) if groups is not None else None

    def add(group, c):
        if want is None or group in want:
            out.append((group, c))

    for sel in METHODS:
        for slots in (settings.slots, 0):
            add("main", cfg(sel, slots, base.name))
    for sel in ("eagle3", "specfit"):
        for slots in settings.slot_sweep:
            add("slots", cfg(sel, slots, base.name))
    for sel in METHODS:
        for slots in (settings.rtx_slots, 0):
            add("rtx4090", cfg(sel, slots, rtx.name))
    for label, gbps in settings.links:
        name = bandwidth_profile(base, gbps, label).name
        for sel in METHODS:
            for slots in (settings.slots, 0):
                add("link", cfg(sel, slots, name))
    for acc in settings.accuracies:
        for slots in (settings.slots, 0):
            add("routes", cfg("specfit", slots, base.name, acc=acc))
    for policy in settings.policies:
        for slots in settings.policy_slots:
            for sel in ("eagle3", "specfit"):
                add("policy", cfg(sel, slots, base.name, cache=policy))
    known = {"main", "slots", "rtx4090", "link", "routes", "policy"}
    if want is not None and want - known:
        raise SimmoeError(f"unknown experiment(s): {', '.join(sorted(want - known))}")
    return out


def run_experiments(trace: Trace, path: str, settings: ReportSettings, *, workers: int = 1,
                    groups: tuple[str, ...] | None = None,
                    progress: Callable[[int, int], None] | None = None):
    """Replay every configuration; a pandas DataFrame, one row per (experiment, configuration).

    Columns: experiment, trace, dataset, synthetic, the configuration
    (selector, slots, cache, hardware, link_gbps, route_accuracy,
    selector_ms_fixed, requests_limit), :data:`simmoe.replay.metrics.COUNTERS` and
    ``speedup``.  ``progress(done, total)`` counts finished configurations.
    Cost: one selection pass per distinct plan and one cache and timing pass
    per distinct configuration (:func:`simmoe.replay.engine.replay_all`).
    """
    import pandas as pd

    settings = settings.validate()
    check_models(trace, path, settings)
    dataset = dataset_of(trace, path)
    profiles = load_profiles(settings)
    pairs = experiment_configs(settings, dataset, profiles, groups)
    unique: dict[ReplayConfig, None] = {}
    for _, c in pairs:
        unique.setdefault(c)
        unique.setdefault(ar_baseline(c))
    configs = list(unique)
    done = 0

    def on_done(results):
        nonlocal done
        done += len(results)
        if progress is not None:
            progress(done, len(configs))

    results = replay_all(trace, configs, profiles, workers=workers, on_done=on_done)
    summary = {c: r.summary() for c, r in zip(configs, results)}
    rows = []
    for group, c in pairs:
        s = summary[c]
        row = {"experiment": group, "trace": Path(path).name, "dataset": dataset,
               "synthetic": bool(trace.is_synthetic), "selector": c.selector, "slots": c.slots,
               "cache": c.cache, "hardware": c.hardware,
               "link_gbps": float(profiles[c.hardware].link_gbps),
               "route_accuracy": c.route_accuracy, "selector_ms_fixed": c.selector_ms,
               "requests_limit": c.requests}
        row.update({k: s[k] for k in COUNTERS})
        row["speedup"] = speedup(s, summary[ar_baseline(c)])
        rows.append(row)
    return pd.DataFrame(rows)


def table5_row(trace: Trace, path: str, settings: ReportSettings) -> dict:
    """SpecFit's Table 5 (App. A; :func:`simmoe.theory.table5.compute_table5`) on the first
    ``settings.requests`` requests, with the base profile's coefficients fitted with the cache."""
    from simmoe.hardware.profile import load_profile
    from simmoe.theory.cycles import specfit_cycles
    from simmoe.theory.table5 import compute_table5
    from solvers import InvalidInput

    head = head_requests(trace, settings.requests)
    profile = load_profile(settings.hardware)
    check_model(trace, path, profile, "--hardware")
    cost = profile.cost_model(True)
    K = head.pool_shape.K
    if len(cost.b) < K + 1:
        raise SimmoeError(f"profile {profile.name!r} has intercepts b_0..b_{len(cost.b) - 1}, "
                          f"but the trace's K = {K} needs b_0..b_{K}")
    try:
        cycles = specfit_cycles(head, cost, K)
        table = compute_table5(cycles, K, cost, synthetic=head.is_synthetic)
    except InvalidInput as exc:
        raise SimmoeError(f"{path}: {exc}") from None
    row = {"trace": Path(path).name, "dataset": dataset_of(trace, path),
           "synthetic": bool(trace.is_synthetic), "hardware": profile.name,
           "requests_limit": settings.requests}
    row.update(table.to_dict())
    row.pop("synthetic", None)
    row["synthetic"] = bool(trace.is_synthetic)
    return row


def check_rows(trace: Trace, path: str, settings: ReportSettings, *, workers: int = 1):
    """The table part (experiments ``main``, ``slots``, ``rtx4090``) on the first
    ``settings.check_requests`` requests: what the reproducibility test recomputes."""
    small = replace(settings, requests=settings.check_requests)
    return run_experiments(trace, path, small, workers=workers, groups=("main", "slots", "rtx4090"))
