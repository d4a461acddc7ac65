"""What the cache comparison's counters say: winners, what changes them, and the hit-rate figure.

Input: the rows of :mod:`simmoe.report.caches` (one per trace, selector,
policy, cache kind and size, with ``hit_rate``, ``h2d_per_token`` and
``decode_tps``).  Everything printed here is computed from those rows; no
sentence carries a number or a conclusion that is not derived from them.
"""

from __future__ import annotations

import io
from itertools import combinations

import numpy as np

# online policies: they see only the past (static reads the replay's popularity; belady its future)
ONLINE = ("lru", "lfu", "least-stale", "lfru", "eam", "learned")
OFFLINE = ("belady", "static")
SETTING = ("trace", "selector", "kind", "frac")
FACTOR_NAMES = {"trace": "the trace", "selector": "the selector", "kind": "per-layer slots vs one budget",
                "frac": "the cache size"}
COLORS = {"belady": "black", "static": "#7f7f7f", "lru": "#1f77b4", "lfu": "#ff7f0e", "least-stale": "#2ca02c",
          "lfru": "#d62728", "eam": "#9467bd", "learned": "#8c564b"}


def winners(df):
    """Per setting (trace, selector, kind, size): the online policies of highest hit rate (ties: all)."""
    out = {}
    on = df[df["policy"].isin(ONLINE)]
    for key, g in on.groupby(list(SETTING), sort=True):
        best = g["hit_rate"].max()
        out[key] = tuple(sorted(g.loc[np.isclose(g["hit_rate"], best, rtol=0, atol=1e-12), "policy"]))
    return out


def factor_sensitivity(win: dict) -> dict[str, float]:
    """Per factor: the share of setting pairs that differ only in it whose winners differ."""
    out = {}
    for i, f in enumerate(SETTING):
        groups: dict = {}
        for key, w in win.items():
            groups.setdefault(key[:i] + key[i + 1:], []).append(w)
        pairs = changed = 0
        for ws in groups.values():
            for a, b in combinations(ws, 2):
                pairs += 1
                changed += int(not set(a) & set(b))
        out[f] = changed / pairs if pairs else float("nan")
    return out


def _median_gap(df, a: str, b, trace=None) -> float:
    """Median over settings of hit rate of policy ``a`` minus ``b`` (a policy, or a tuple: their best), in pp."""
    sub = df if trace is None else df[df["trace"] == trace]
    piv = sub.pivot_table(index=list(SETTING), columns="policy", values="hit_rate")
    other = piv[list(b)].max(axis=1) if isinstance(b, tuple) else piv[b]
    return float(np.median(100 * (piv[a] - other)))


def budget_gain(df, policy: str | None = None) -> float:
    """Median hit-rate change (pp) of one budget over per-layer slots of the same total, over settings."""
    sub = df if policy is None else df[df["policy"] == policy]
    piv = sub.pivot_table(index=["trace", "selector", "policy", "frac"], columns="kind", values="hit_rate")
    return float(np.median(100 * (piv["budget"] - piv["slots"])))


def _join(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def decides(df) -> list[str]:
    """The section's bullet lines, each computed from the rows."""
    win = winners(df)
    n = len(win)
    counts = {p: sum(1 for w in win.values() if p in w) for p in ONLINE}
    ranked = sorted(counts, key=lambda p: (-counts[p], p))
    lines = ["Wins (highest hit rate among the online policies; ties count for each): "
             + ", ".join(f"{p} {counts[p]} of {n}" for p in ranked) + "."]
    sens = {f: v for f, v in factor_sensitivity(win).items() if not np.isnan(v)}
    order = sorted(sens, key=lambda f: (-sens[f], SETTING.index(f)))
    most = [f for f in order if sens[f] == sens[order[0]]]
    lines.append("What changes the winner: among settings that differ in one factor only, the winner changes for "
                 + "; ".join(f"{FACTOR_NAMES[f]} in {sens[f]:.0%} of pairs" for f in order)
                 + (f" — {_join([FACTOR_NAMES[f] for f in most])} decide{'s' if len(most) == 1 else ''} most."
                    if sens[order[0]] > 0 else " — no single factor changes it."))
    for trace in dict.fromkeys(df["trace"]):
        sub = df[df["trace"] == trace]
        tw = {k: w for k, w in win.items() if k[0] == trace}
        top = max(ONLINE, key=lambda p: (sum(1 for w in tw.values() if p in w), p == "lru"))
        freq = _median_gap(sub, "lfu", "lru")
        learned = _median_gap(sub, "learned", ("lru", "lfu"))
        head = _median_gap(sub, "belady", ONLINE)
        lines.append(
            f"{trace}: {top} wins {sum(1 for w in tw.values() if top in w)} of {len(tw)} settings. "
            f"LFU − LRU hit rate, median {freq:+.1f} pp ({'frequency' if freq > 0 else 'recency'} pays more); "
            f"learned − best of LRU/LFU {learned:+.1f} pp; Belady is {head:.1f} pp above the best online policy.")
    gain = {p: budget_gain(df, p) for p in ("belady", "lru", "eam")}
    lines.append(f"One budget across layers instead of the same experts as slots per layer: median "
                 f"{budget_gain(df):+.1f} pp of hit rate over every policy and size (Belady {gain['belady']:+.1f} pp, "
                 f"LRU {gain['lru']:+.1f} pp, EAM {gain['eam']:+.1f} pp).")
    return lines


def hit_rate_figure(df, trace: str, synthetic: bool) -> bytes:
    """Hit rate against cache size (share of the model's experts), one panel per selector, a line per policy."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    sub = df[df["trace"] == trace]
    selectors = list(dict.fromkeys(sub["selector"]))
    fig, axes = plt.subplots(1, len(selectors), figsize=(4.4 * len(selectors), 4.4), sharey=True, squeeze=False)
    for ax, sel in zip(axes[0], selectors):
        for policy in dict.fromkeys(sub["policy"]):
            for kind, style in (("slots", "-"), ("budget", "--")):
                g = sub[(sub["selector"] == sel) & (sub["policy"] == policy) & (sub["kind"] == kind)]
                g = g.sort_values("frac")
                ax.plot(100 * g["frac"], 100 * g["hit_rate"], style, marker="o", ms=3, color=COLORS.get(policy, "k"),
                        label=f"{policy} ({'per layer' if kind == 'slots' else 'budget'})")
        ax.set_xscale("log", base=2)
        ticks = sorted(set(100 * sub["frac"]))
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("cache size, % of the model's experts")
        ax.set_title(sel)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("hit rate, %")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, ncol=8, loc="lower center", frameon=False)
    fig.suptitle(f"Expert-cache hit rate vs size: {trace}" + (" — SYNTHETIC trace" if synthetic else
                                                              " — recorded routes")
                 + "  (solid: slots per layer; dashed: one budget across layers)", fontsize=10)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()
