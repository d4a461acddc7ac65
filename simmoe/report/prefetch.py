"""What-if of ``simmoe report``: SpecFit's gain over EAGLE-3 when experts are prefetched.

For each route-predictor accuracy a (SpecFit §4.6: every routed expert the
predictor outputs is the true one with probability a), each prefetch policy
of :mod:`simmoe.replay.prefetch` (none, draft, next-layer, oracle) and each
slot count (0, 12, 48 LRU slots), EAGLE-3 and SpecFit are replayed on the base
profile with the experiment's fixed selector times; the table gives SpecFit's
decode throughput over EAGLE-3's, minus one.  The prefetch-aware variant
``specfit-prefetch`` (:mod:`simmoe.replay.prefetch_selector`) is replayed
with ``draft`` (it selects inside the simulation, one selection pass per row).  The predictor drives both what SpecFit
selects and what is prefetched; EAGLE-3's selection ignores routes, so only
its prefetches depend on a.  With the shipped traces every number here is a
simulator output on synthetic routes (SYNTHETIC).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from simmoe.replay.engine import ReplayConfig, ar_baseline
from simmoe.replay.metrics import speedup

ACCURACIES = (0.4, 0.6, 0.8, 1.0)   # = ReportSettings.prefetch_accuracies (fewer with --quick)
POLICIES = ("none", "draft", "next-layer", "oracle")
SLOTS = (0, 12, 48)                 # = ReportSettings.prefetch_slots
AWARE = "specfit-prefetch"
AWARE_POLICIES = ("draft",)      # the prefetch-aware variant selects in the simulation: one pass per row
KEYS = ("decode_tps", "h2d_per_token", "hit_rate", "draft_nodes", "drafted_levels",
        "prefetched_per_token", "useful_per_token", "wasted_per_token")


def _configs(settings, dataset: str, base):
    """(selector, slots, accuracy, policy) -> (configuration to replay, its policy); duplicates share one."""
    from simmoe.report.experiments import search_ms

    fixed = search_ms(settings, dataset, base)
    want = {}
    for acc in settings.prefetch_accuracies:
        for slots in settings.prefetch_slots:
            for sel in ("eagle3", "specfit", AWARE):
                for policy in (AWARE_POLICIES if sel == AWARE else POLICIES):
                    # EAGLE-3 selects without routes: only draft and next-layer prefetch use the predictor
                    a = acc if (sel != "eagle3" or policy in ("draft", "next-layer")) else 1.0
                    cfg = ReplayConfig(selector=sel, slots=slots, cache="lru" if slots else "none",
                                       hardware=base.name, route_accuracy=a,
                                       selector_ms=fixed if sel != "eagle3" else 0.0, timing=settings.timing,
                                       seed=settings.seed, requests=settings.requests).validate()
                    want[(sel, slots, acc, policy)] = (cfg, policy)
    return want


def prefetch_rows(trace, path: str, settings, *, workers: int = 1, progress=None):
    """One row per (selector, slots, accuracy, policy): the counters, prefetch counters, speedup, time saved."""
    import pandas as pd

    from simmoe.hardware.profile import load_profile
    from simmoe.replay.engine import replay_all
    from simmoe.report.experiments import check_model, dataset_of

    settings = settings.validate()
    base = load_profile(settings.hardware)
    check_model(trace, path, base, "--hardware")
    dataset = dataset_of(trace, path)
    want = _configs(settings, dataset, base)
    unique = list(dict.fromkeys(want.values()))
    baseline = ar_baseline(unique[0][0])
    jobs = [(baseline, "none")] + unique
    done = [0]

    def on_done(results):
        done[0] += len(results)
        if progress is not None:
            progress(done[0], len(jobs))

    results = replay_all(trace, [replace(c, prefetch=p) for c, p in jobs], {base.name: base},
                         workers=workers, on_done=on_done)
    summary = {job: r.summary() for job, r in zip(jobs, results, strict=True)}
    base_summary = summary[(baseline, "none")]
    rows = []
    for (sel, slots, acc, policy), job in want.items():
        s = summary[job]
        # time saved against the same selector without prefetch (specfit-prefetch: against specfit)
        none = summary[want.get((sel, slots, acc, "none"), want[("specfit", slots, acc, "none")])]
        decode_tokens = s["output_tokens"] - s["requests"]
        row = {"experiment": "prefetch", "trace": Path(path).name, "dataset": dataset,
               "synthetic": bool(trace.is_synthetic), "selector": sel, "slots": slots,
               "route_accuracy": acc, "prefetch": policy, "hardware": base.name,
               "selector_ms_fixed": job[0].selector_ms, "requests_limit": settings.requests}
        row.update({k: s.get(k, 0.0) for k in KEYS})   # plain replays (policy none) prefetch nothing
        row["speedup"] = speedup(s, base_summary)
        row["saved_ms_per_token"] = 1e3 * (none["decode_s"] - s["decode_s"]) / decode_tokens
        rows.append(row)
    return pd.DataFrame(rows)


def gain_table(df):
    """Per (slots, policy) and accuracy: SpecFit's (and the prefetch-aware variant's) gain over EAGLE-3."""
    from simmoe.report.tables import md_table

    accuracies, slot_counts = _grid(df)
    header = ["slots", "prefetch", "selector"] + [f"a = {a:g}" for a in accuracies]
    rows = []
    at = _Rows(df)
    for slots in slot_counts:
        for policy in POLICIES:
            for sel in ("specfit", AWARE):
                if sel == AWARE and policy not in AWARE_POLICIES:
                    continue
                cells = [str(slots), policy, sel]
                for acc in accuracies:
                    e = at.value("eagle3", slots, acc, policy)
                    v = at.value(sel, slots, acc, policy)
                    cells.append(f"{100 * (v / e - 1):+.1f}%")
                rows.append(cells)
    return md_table(header, rows)


def tps_table(df):
    """Decode tokens/s (and copies per token saved by prefetch) of every selector and policy."""
    from simmoe.report.tables import md_table

    header = (["slots", "selector", "a"] + [f"{p} tok/s" for p in POLICIES]
              + ["draft: prefetched / useful / wasted per token"])
    accuracies, slot_counts = _grid(df)
    rows = []
    at = _Rows(df)
    for slots in slot_counts:
        for sel in ("eagle3", "specfit", AWARE):
            for acc in accuracies:
                cells = [str(slots), sel, f"{acc:g}"]
                for policy in POLICIES:
                    if sel == AWARE and policy not in AWARE_POLICIES:
                        cells.append("–")
                    else:
                        cells.append(f"{at.value(sel, slots, acc, policy):.2f}")
                r = at.row(sel, slots, acc, "draft")
                cells.append(f"{r['prefetched_per_token']:.1f} / {r['useful_per_token']:.1f} / "
                             f"{r['wasted_per_token']:.1f}")
                rows.append(cells)
    return md_table(header, rows)


def _grid(df):
    """The accuracies and slot counts the rows cover (ACCURACIES and SLOTS, fewer with --quick), ascending."""
    return sorted(set(df["route_accuracy"])), sorted(set(df["slots"]))


class _Rows:
    """The rows of a prefetch frame by (selector, slots, accuracy, policy): the first that matches, found by one
    pass over the frame instead of a filter per look-up."""

    def __init__(self, df):
        self.df = df
        self.at: dict[tuple, int] = {}
        for i, key in enumerate(zip(df["selector"], df["slots"], df["route_accuracy"], df["prefetch"], strict=True)):
            self.at.setdefault(key, i)

    def row(self, sel, slots, acc, policy):
        return self.df.iloc[self.at[(sel, slots, acc, policy)]]

    def value(self, sel, slots, acc, policy, key="decode_tps") -> float:
        return float(self.row(sel, slots, acc, policy)[key])


def gain_plot(df, trace: str, synthetic: bool) -> bytes:
    """SpecFit's gain over EAGLE-3 against route-predictor accuracy, one panel per slot count."""
    from simmoe.report.figures import _plt, _png, _title

    plt = _plt()
    accuracies, slot_counts = _grid(df)
    at = _Rows(df)
    fig, axes = plt.subplots(1, len(slot_counts), figsize=(11, 3.8), sharey=True, squeeze=False)
    axes = axes[0]
    styles = {"none": "-", "draft": "--", "next-layer": ":", "oracle": "-."}
    for ax, slots in zip(axes, slot_counts, strict=True):
        for policy in POLICIES:
            for sel, color in (("specfit", "#d62728"), (AWARE, "#9467bd")):
                if sel == AWARE and policy not in AWARE_POLICIES:
                    continue
                ys = [100 * (at.value(sel, slots, a, policy) / at.value("eagle3", slots, a, policy) - 1)
                      for a in accuracies]
                ax.plot(accuracies, ys, styles[policy], color=color, marker="o", ms=3,
                        label=f"{sel}, prefetch {policy}")
        ax.axhline(0, color="k", lw=0.5)
        ax.set_title(f"{slots} slots" if slots else "no cache")
        ax.set_xlabel("route-predictor accuracy a")
    axes[0].set_ylabel("decode TPS over EAGLE-3 (%)")
    axes[-1].legend(fontsize=6, loc="best")
    fig.suptitle(_title("What-if: SpecFit's gain over EAGLE-3 with prefetching", trace, synthetic), fontsize=9)
    fig.tight_layout()
    return _png(fig)


def section(df, stem: str, synthetic: bool) -> list[str]:
    """The index's what-if section on prefetching."""
    tag = " (SYNTHETIC)" if synthetic else ""
    return [f"### What-if: prefetching experts while the drafter runs{tag}", "",
            "Policies (docs/prefetch.md): `draft` copies the predicted experts of the root and of each "
            "drafted level's nodes, most probable first, while the drafter drafts and the selector selects; "
            "`next-layer` copies layer ℓ + 1's predicted experts of the verified tokens during layer ℓ; "
            "`oracle` copies, while drafting, exactly the experts the forward will demand. Predictions "
            "come from the route predictor of accuracy a (§4.6), the one SpecFit selects with; prefetches "
            "use the copy engine when no demand copy waits and take the cache's slots (without a cache, "
            "the c staging buffers of each layer). `specfit-prefetch` counts experts resident or in flight "
            "at selection at ρ = e / max(e, x/c) of their cost. Gains are decode TPS over EAGLE-3's with "
            "the same policy, accuracy and slots. No published figure.", "",
            gain_table(df), "", f"![prefetch](figures/{stem}-prefetch.png)", "",
            "Decode tokens/s per policy, and draft prefetch's copies per output token:", "",
            tps_table(df), ""]
