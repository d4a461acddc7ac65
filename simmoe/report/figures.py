"""PNG figures of one trace's replays (matplotlib, Agg backend), published values beside.

Every function returns the PNG as bytes (written atomically by the caller).
Titles carry "SYNTHETIC trace" when the trace is synthetic, and published
points are drawn hatched or hollow with their role (fit / validate) in the
legend.  PNGs are saved without the software-version metadata, so the same
numbers give the same bytes with the same matplotlib.
"""

from __future__ import annotations

import io

from simmoe.published import PUBLISHED
from simmoe.report.tables import MAIN_TABLE, NAMES, pick

SPEC = PUBLISHED["specfit"]
COLORS = {"ar": "#7f7f7f", "eagle3": "#1f77b4", "specfit": "#d62728"}
POLICY_STYLE = {"lru": "-", "lfu": "--", "belady": ":", "static": "-."}


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    _plt().close(fig)
    return buf.getvalue()


def _title(text: str, trace: str, synthetic: bool) -> str:
    return f"{text}\n{trace}" + (" — SYNTHETIC trace" if synthetic else "")


def tps_bars(df, dataset: str, trace: str, synthetic: bool) -> bytes:
    """Figures 2–3: decode TPS per method with and without the cache, published beside."""
    plt = _plt()
    key = MAIN_TABLE.get(dataset)
    pub, role = {}, None
    if key:
        t = SPEC[key[0]]
        pub = {(r[0], bool(r[1])): r[2] for r in t["rows"]}
        role = t["role"]
    sub = pick(df, experiment="main")
    fig, ax = plt.subplots(figsize=(7, 4))
    methods = list(dict.fromkeys(sub["selector"]))
    width = 0.2
    for j, cached in enumerate((True, False)):
        for i, sel in enumerate(methods):
            on = sub[(sub["selector"] == sel) & ((sub["cache"] != "none") == cached)]
            v = float(on["decode_tps"].iloc[0])
            x = i + (j - 0.5) * 2 * width - width / 2
            ax.bar(x, v, width, color=COLORS.get(sel, "k"), alpha=1.0 if cached else 0.55,
                   label=("simulated, " + ("cache" if cached else "no cache")) if i == 0 else None)
            ax.text(x, v, f"{v:.2f}", ha="center", va="bottom", fontsize=7)
            if (sel, cached) in pub:
                p = pub[(sel, cached)]
                ax.bar(x + width, p, width, color="white", edgecolor=COLORS.get(sel, "k"), hatch="//",
                       label=f"published ({role})" if i == 0 and j == 0 else None)
                ax.text(x + width, p, f"{p:.2f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(methods)), [NAMES.get(m, m) for m in methods])
    ax.set_ylabel("decode tokens/s")
    name = f"{key[2]} analogue" if key else "Decode throughput"
    ax.set_title(_title(f"{name}: decode TPS with / without the expert cache", trace, synthetic), fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return _png(fig)


def slot_sweep(df, dataset: str, trace: str, synthetic: bool) -> bytes:
    """Figure 4: TPS, ms/cycle and copies per token against the slots, published beside."""
    plt = _plt()
    fig4 = SPEC["figure4_slot_sweep_cnndm_a100"] if dataset == "cnndm" else None
    sub = pick(df, experiment="slots")
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.6))
    for ax, (key, text) in zip(axes, (("decode_tps", "decode tokens/s"), ("ms_per_cycle", "ms per cycle"),
                                      ("h2d_per_token", "copies per output token"))):
        for sel in ("eagle3", "specfit"):
            on = pick(sub, selector=sel).sort_values("slots")
            ax.plot(on["slots"], on[key], "o-", color=COLORS[sel], label=f"{NAMES[sel]} simulated")
            if fig4:
                ax.plot(fig4["slots"], fig4[key][sel], "s--", mfc="none", color=COLORS[sel],
                        label=f"{NAMES[sel]} published ({fig4['role']})")
        ax.set_xlabel("expert slots per layer (0 = no cache)")
        ax.set_ylabel(text)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(_title("Figure 4 analogue: slot sweep (LRU)", trace, synthetic), fontsize=9)
    fig.tight_layout()
    return _png(fig)


def link_plot(df, trace: str, synthetic: bool) -> bytes:
    """What-if: decode TPS against host-to-device bandwidth (log axis)."""
    plt = _plt()
    sub = pick(df, experiment="link")
    fig, ax = plt.subplots(figsize=(7, 4))
    for sel in ("ar", "eagle3", "specfit"):
        on = pick(sub, selector=sel).sort_values("link_gbps")
        for cached, style in ((True, "o-"), (False, "s--")):
            part = on[(on["cache"] != "none") == cached]
            ax.plot(part["link_gbps"], part["decode_tps"], style, color=COLORS[sel],
                    label=f"{NAMES[sel]}, {'cache' if cached else 'no cache'}")
    ax.set_xscale("log")
    gbps = sorted(set(sub["link_gbps"]))
    ax.set_xticks(gbps, [f"{g:g}" for g in gbps])
    ax.minorticks_off()
    ax.set_xlabel("host-to-device GB/s (PCIe Gen4 24.8, Gen5 55, NVLink-C2C 375)")
    ax.set_ylabel("decode tokens/s")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    ax.set_title(_title("What-if: decode TPS against link bandwidth (no published figure)", trace, synthetic),
                 fontsize=9)
    fig.tight_layout()
    return _png(fig)


def route_plot(df, dataset: str, trace: str, synthetic: bool) -> bytes:
    """What-if: SpecFit's speedup over AR (no cache) against route-predictor accuracy."""
    plt = _plt()
    sub = pick(df, experiment="routes")
    main = pick(df, experiment="main")
    fig, ax = plt.subplots(figsize=(7, 4))
    for cached, style in ((True, "o-"), (False, "s--")):
        part = sub[(sub["cache"] != "none") == cached].sort_values("route_accuracy")
        ax.plot(part["route_accuracy"], part["speedup"], style, color=COLORS["specfit"],
                label=f"SpecFit, {'cache' if cached else 'no cache'}")
        e = main[(main["selector"] == "eagle3") & ((main["cache"] != "none") == cached)]
        if len(e):
            ax.axhline(float(e["speedup"].iloc[0]), color=COLORS["eagle3"], ls=style[1:],
                       label=f"EAGLE-3 (routes unused), {'cache' if cached else 'no cache'}")
    pub = SPEC["route_predictor"]
    if dataset == pub["dataset"]:
        ax.plot([pub["accuracy"], 1.0], [pub["speedup_vs_ar_no_cache"], pub["exact_routes_speedup"]],
                "D", mfc="none", color="k", label=f"published, SpecFit ({pub['role']})")
    ax.set_xlabel("route-predictor accuracy a (§4.6; 1 = exact routes)")
    ax.set_ylabel("decode speedup over AR without cache")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(_title("What-if: SpecFit against route-predictor accuracy", trace, synthetic), fontsize=9)
    fig.tight_layout()
    return _png(fig)


def policy_plot(df, trace: str, synthetic: bool) -> bytes:
    """What-if: decode TPS and copies per token against slots, per cache policy."""
    plt = _plt()
    sub = pick(df, experiment="policy")
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, (key, text) in zip(axes, (("decode_tps", "decode tokens/s"), ("h2d_per_token", "copies per output token"))):
        for sel in ("eagle3", "specfit"):
            for policy in dict.fromkeys(sub["cache"]):
                on = pick(sub, selector=sel, cache=policy).sort_values("slots")
                ax.plot(on["slots"], on[key], "o" + POLICY_STYLE.get(policy, "-"), color=COLORS[sel],
                        label=f"{NAMES[sel]} {policy}")
        ax.set_xlabel("expert slots per layer")
        ax.set_ylabel(text)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, ncol=2)
    fig.suptitle(_title("What-if: cache policy (belady = offline optimum, a bound)", trace, synthetic),
                 fontsize=9)
    fig.tight_layout()
    return _png(fig)
