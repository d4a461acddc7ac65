"""The markdown and figures of ``reports/cpu-experts.md`` (:mod:`simmoe.report.cpu_experts` runs the replays).

Everything said about when speculation is slower than AR is computed here from
the rows of the runs; no number is written by hand.
"""

from __future__ import annotations

import math

# (key, label, GPU, CPU): the systems of the report (the runs in simmoe.report.cpu_experts read them here)
SYSTEMS = (("desktop", "desktop", "rtx4090", "ryzen9-7950x"), ("hedt", "HEDT", "rtx2080", "i9-10900x"),
           ("server", "server", "rtx4090", "epyc-9654"))
SELECTORS = ("ar", "eagle3", "evict", "specfit", "llama-chain")
# the fitted figure's model, system and --n-cpu-moe (llmfit PR #755; its tokens/s in published.json)
FITTED = ("qwen3-30b-a3b", "hedt", 36)
FIGURE = ("cpu_experts", "llmfit_pr755_rtx2080_i9_10900x")
C_K = (2, 4, 8)                                     # C(k)/C(1) shown at these k (and the pool's largest)
NAMES = {"ar": "AR", "eagle3": "EAGLE-3", "evict": "EVICT", "specfit": "SpecFit", "llama-chain": "llama-chain"}


def _figure() -> dict:
    from simmoe.published import PUBLISHED

    return PUBLISHED[FIGURE[0]][FIGURE[1]]


def _sys(key: str):
    return next(s for s in SYSTEMS if s[0] == key)


def _system_text(key: str) -> str:
    from simmoe.hardware.catalogue import load_cpu, load_gpu

    _, label, gpu, cpu = _sys(key)
    return f"{label} ({load_gpu(gpu).name} + {load_cpu(cpu).name})"


def _ok(rows, **kw) -> list[dict]:
    return [r for r in rows if r["status"] == "ok" and all(r[k] == v for k, v in kw.items())]


def _one(rows, **kw) -> dict | None:
    got = [r for r in rows if all(r[k] == v for k, v in kw.items())]
    return got[0] if got else None


def _f(x, fmt="{:.1f}") -> str:
    return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) else fmt.format(x)


# -- the answer, computed -----------------------------------------------------------------------------------
def spec_cases(rows) -> list[dict]:
    """Each speculative run beside AR in the same model, system and placement."""
    out = []
    for r in _ok(rows, kind="spec"):
        if r["selector"] == "ar":
            continue
        ar = _one(_ok(rows, kind="spec", selector="ar"), model=r["model"], system=r["system"],
                  placement=r["placement"])
        if ar is None:
            continue
        out.append({**r, "gain": r["tps"] / ar["tps"], "cost_ratio": r["ms_cycle"] / ar["ms_cycle"],
                    "reads_ratio": r["cpu_reads"] / ar["cpu_reads"] if ar["cpu_reads"] > 0 else float("nan"),
                    "cpu_ratio": r["cpu_ms"] / ar["cpu_ms"] if ar["cpu_ms"] > 0 else float("nan"),
                    "gpu_ratio": r["gpu_ms"] / ar["gpu_ms"] if ar["gpu_ms"] > 0 else float("nan"),
                    "ar_tps": ar["tps"]})
    return out


def _median(xs) -> float:
    xs = sorted(x for x in xs if math.isfinite(x))
    if not xs:
        return float("nan")
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


def answer(rows, ck) -> list[str]:
    """When is speculation slower than AR here, and what fixes it: bullets from the runs."""
    cases = spec_cases(rows)
    if not cases:
        return ["No speculative run fits any of these systems: nothing to compare."]
    slow = [c for c in cases if c["gain"] < 1.0]
    fast = [c for c in cases if c["gain"] >= 1.0]
    out = [f"Speculation is slower than AR in {len(slow)} of {len(cases)} runs (model × system × placement × "
           "selector, each against AR in the same placement)."]
    by_kind: dict[str, list[int]] = {}
    for c in cases:
        kind = c["placement"].split(":")[0]
        by_kind.setdefault(kind, [0, 0])
        by_kind[kind][0] += c["gain"] < 1.0
        by_kind[kind][1] += 1
    out.append("By placement: " + "; ".join(f"`{k}` {s} of {n} slower" for k, (s, n) in by_kind.items()) + ".")
    if slow:
        out.append(f"Why: a speculative cycle there costs a median {_median(c['cost_ratio'] for c in slow):.2f}× "
                   f"an AR step and commits a median {_median(c['mat'] for c in slow):.2f} tokens, so the cycle's "
                   "cost grows faster than what it commits.  Each verified token routes to experts the root "
                   "does not use, and on the CPU each distinct expert is one more DRAM read: the CPU computes a "
                   f"median {_median(c['reads_ratio'] for c in slow):.2f}× as many experts per output token as AR "
                   "in those runs.  Per output token, the CPU side's time (its experts, the sync, the "
                   f"activations' round trip) is a median {_median(c['cpu_ratio'] for c in slow):.2f}× AR's and "
                   f"the GPU's busy time {_median(c['gpu_ratio'] for c in slow):.2f}× AR's; drafting and each "
                   "cycle's serving iteration come on top.")
    if fast:
        out.append(f"Where it pays, the cycle costs a median {_median(c['cost_ratio'] for c in fast):.2f}× an AR "
                   f"step for {_median(c['mat'] for c in fast):.2f} tokens committed (CPU experts per output token "
                   f"{_median(c['reads_ratio'] for c in fast):.2f}× AR's).")
    out += _cache_effect(cases)
    out += _fiddler_lines(rows)
    out += _fixes(rows, cases)
    out += _ck_lines(ck)
    return out


def _cache_effect(cases) -> list[str]:
    """Whether the cache placements are where speculation loses most (AR's hits vs the tree's misses)."""
    cache = [c for c in cases if c["placement"] in ("cpu-misses", "fiddler")]
    fixed = [c for c in cases if c["placement"] not in ("cpu-misses", "fiddler")]
    if not cache or not fixed:
        return []
    gc, gf = _median(c["gain"] for c in cache), _median(c["gain"] for c in fixed)
    share = _median(c["gpu_share"] for c in cache)
    return [f"Median gain over AR: {gc:.2f}× with a GPU cache (`cpu-misses`, `fiddler`; a median {share:.0%} of "
            f"the experts the speculative forwards demand served on the GPU) against {gf:.2f}× where the "
            "placement fixes the GPU's experts (`cpu-layers:N`, `cpu-all`)"
            + (": AR reuses the cache's experts step after step, while a tree's extra tokens bring experts the "
               "cache does not hold, which run on the CPU." if gc < gf else ".")]


def _fiddler_lines(rows) -> list[str]:
    """Whether Fiddler's rule ever copies (it copies where a copy over the link beats computing on the CPU)."""
    fid = _ok(rows, kind="fiddler")
    if not fid:
        return []
    copying = [r for r in fid if r["copies"] > 0]
    if not copying:
        return [f"Fiddler's rule copied no expert in any of its {len(fid)} AR runs: at batch 1 an expert serves "
                "one token, and its DRAM read on the CPU is faster than its copy over the link, so `fiddler` "
                "equals `cpu-misses` with the same cache (a copy pays only for experts many tokens share, as "
                "in prefill or large batches)."]
    return [f"Fiddler's rule copied experts in {len(copying)} of its {len(fid)} AR runs (up to "
            f"{max(r['copies'] for r in copying):.1f} copies per output token)."]


def _fixes(rows, cases) -> list[str]:
    """Per model and system: the best selector where EAGLE-3 loses, and the best configuration overall."""
    out = []
    keys = sorted({(c["model"], c["system"]) for c in cases})
    for model, system in keys:
        mine = [c for c in cases if c["model"] == model and c["system"] == system]
        lost = [c for c in mine if c["selector"] == "eagle3" and c["gain"] < 1.0]
        parts = []
        for c in lost:
            same = [x for x in mine if x["placement"] == c["placement"]]
            best = max(same, key=lambda x: x["gain"])
            fix = (f"{NAMES[best['selector']]} recovers {best['gain']:.2f}× AR" if best["gain"] >= 1.0
                   else f"no selector beats AR (best {NAMES[best['selector']]} {best['gain']:.2f}×)")
            parts.append(f"EAGLE-3 in `{c['placement']}` is {c['gain']:.2f}× AR; {fix}")
        ar = max(_ok(rows, model=model, system=system, selector="ar"), key=lambda r: r["tps"], default=None)
        sp = max(mine, key=lambda r: r["tps"])
        if ar is not None:
            where = _where(ar)
            verdict = ("speculation beats the best AR configuration" if sp["tps"] > ar["tps"]
                       else "no speculative run here beats the best AR configuration")
            parts.append(f"best AR {ar['tps']:.1f} tok/s ({where}); best speculative {sp['tps']:.1f} tok/s "
                         f"({NAMES[sp['selector']]}, {_where(sp)}): {verdict}")
        out.append(f"{model} on the {_sys(system)[1]}: " + "; ".join(parts) + ".")
    return out


def _where(r) -> str:
    return f"`{r['placement']}`" + (f", {r['slots']} slots/layer" if r["slots"] else "")


def _ck_lines(ck) -> list[str]:
    ratios = [c[1] / c[0] for c in ck.values() if len(c) > 1 and c[0] > 0]
    if not ratios:
        return []
    return [f"EVICT's profiled C(2)/C(1) across the placements: {min(ratios):.2f}–{max(ratios):.2f} (median "
            f"{_median(ratios):.2f}): verifying one drafted token beside the root costs that much more than the "
            "root alone, so a tree pays only when it commits more tokens per cycle than C(k)/C(1) of its size; "
            "cost-aware selection (EVICT's C(k), SpecFit's b_k + βF) shrinks trees where that ratio is high."]


# -- markdown -----------------------------------------------------------------------------------------------
def render(rows, ck, facts, setting, command: str, wall_s: float, figdir: str) -> str:
    from simmoe.hardware.cpu_forward import load_cpu_terms
    from simmoe.report.tables import md_table

    terms = load_cpu_terms()
    fig = _figure()
    lines = ["# Experts computed on the CPU: AR and speculative decoding (SYNTHETIC traces, predictions)", "",
             f"Regenerate: `{command}` ({wall_s / 60:.1f} min on this machine's 2 cores).", "",
             "**Every number below is a prediction** of the cost model of docs/cpu-experts.md, replayed on "
             "**SYNTHETIC** traces; none is a measurement.  The model's **one fitted term is η_mem** "
             f"(the CPU's achieved fraction of peak DRAM bandwidth, {terms.mem_efficiency:.3f}), fitted to one "
             f"published figure: llmfit PR #755, {fig['model']} on {fig['gpu']} + {fig['cpu']}, "
             f"`--n-cpu-moe 36`, AR: {fig['generation_tokens_per_s']} tokens/s.  Every other term is a datasheet "
             f"value or an assumption named in docs/cpu-experts.md ({terms.source}).", "",
             f"Traces: the `gsm8k` synthetic preset's routing and drafter (EAGLE-3 pools) with each model's "
             f"geometry (`simmoe.hardware.catalogue.with_model`), seed {setting.seed}; batch 1, greedy, "
             "selector time 0; experts in GGUF Q4_K_M.  `llama-chain` is llama.cpp's chain rule applied to "
             "the same pools (drafting charged as EAGLE-3's).  A GPU cache is LRU, its size in slots per "
             "layer.  A configuration that does not fit (GPU memory, host RAM) is shown refused with the "
             "reason the profile gives.", ""]
    lines += [md_table(["model", "geometry", "requests", "output tokens", "routes"],
                       [[f["name"], f"{f['L']} MoE layers × {f['N']} experts, top-{f['k']}", str(f["requests"]),
                         str(f["tokens"]), "SYNTHETIC" if f["synthetic"] else "recorded"] for f in facts]), ""]
    lines += [md_table(["system", "GPU + CPU"], [[_sys(s)[1], _system_text(s)] for s in setting.systems]), ""]
    lines += ["## When is speculation slower than AR here, and what fixes it (SYNTHETIC, predicted)", "",
              *[f"- {x}" for x in answer(rows, ck)], ""]
    for f in facts:
        lines += _model_section(rows, ck, f, setting, figdir)
    return "\n".join(lines) + "\n"


def _model_section(rows, ck, f, setting, figdir: str) -> list[str]:
    m = f["model"]
    out = [f"## {f['name']} (Q4_K_M; SYNTHETIC trace, predicted)", "",
           f"![AR tokens/s against N]({figdir}/cpu-experts-{m}-layers.png)",
           f"![AR tokens/s against the GPU cache's size]({figdir}/cpu-experts-{m}-cache.png)", ""]
    for system in setting.systems:
        out += _system_section([r for r in rows if r["model"] == m and r["system"] == system], ck, m, system)
    return out


def _system_section(rows, ck, model: str, system: str) -> list[str]:
    from simmoe.report.tables import md_table

    out = [f"### {model} on the {_system_text(system)} (SYNTHETIC, predicted)", ""]
    reasons = {r["reason"] for r in rows}
    if rows and all(r["status"] != "ok" for r in rows) and len(reasons) == 1:
        return out + [f"Every placement refused: {reasons.pop()}.", ""]      # the model does not fit at all
    out += ["AR, `cpu-layers:N` (llama.cpp `--n-cpu-moe N`) and `cpu-all`:", ""]
    body = []
    for r in sorted((r for r in rows if r["kind"] == "layers"), key=lambda r: (r["x"] == "all", str(r["x"]).zfill(4))):
        if r["status"] != "ok":
            body.append([r["placement"], "refused", r["reason"], "", ""])
        else:
            fit = (f" (η_mem fitted here to {_figure()['generation_tokens_per_s']}, one token without context)"
                   if (r["model"], r["system"], r["x"]) == FITTED else "")
            body.append([r["placement"], _f(r["tps"]) + fit,
                         _f(r["cpu_ms"], "{:.2f}"), _f(r["gpu_ms"], "{:.2f}"), _f(r["dram_gb"], "{:.3f}")])
    out += [md_table(["placement", "tokens/s", "CPU ms/token", "GPU ms/token", "DRAM GB/token"], body), ""]
    out += ["AR with a GPU expert cache (LRU): misses computed on the CPU (`cpu-misses`), or Fiddler's "
            "copy-or-compute rule (`fiddler`; 0 slots: no cache):", ""]
    body = []
    cache_rows = [r for r in rows if r["kind"] in ("misses", "fiddler")]
    for r in sorted(cache_rows, key=lambda r: (r["kind"] != "misses", r["slots"])):
        size = f"{r['slots']} ({_f(r['mib'], '{:.0f}')} MiB)"
        if r["status"] != "ok":
            body.append([r["placement"], size, "refused", r["reason"], "", ""])
        else:
            body.append([r["placement"], size, _f(r["tps"]), _f(r["gpu_share"], "{:.1%}"), _f(r["cpu_reads"]),
                         _f(r["copies"], "{:.2f}")])
    out += [md_table(["placement", "slots/layer", "tokens/s", "on GPU", "CPU experts/token", "copies/token"],
                     body), ""]
    out += _spec_table(rows, ck, system)
    return out


def _spec_table(rows, ck, system: str) -> list[str]:
    from simmoe.report.tables import md_table

    spec = [r for r in rows if r["kind"] == "spec"]
    places = list(dict.fromkeys((r["placement"], r["slots"]) for r in spec))
    head = ["placement", *[NAMES[s] for s in SELECTORS], "C(k)/C(1), k = " + ", ".join(map(str, C_K)) + ", K"]
    body = []
    for place, slots in places:
        ar = _one(spec, placement=place, selector="ar")
        cells = [f"`{place}`" + (f" ({slots} slots)" if slots else "")]
        for sel in SELECTORS:
            r = _one(spec, placement=place, selector=sel)
            if r is None or r["status"] != "ok":
                cells.append("refused: " + r["reason"] if r is not None else "–")
            elif sel == "ar" or ar is None or ar["status"] != "ok":
                cells.append(f"{r['tps']:.1f}")
            else:
                cells.append(f"{r['tps']:.1f} ({r['tps'] / ar['tps']:.2f}×, {r['mat']:.2f} tok/cycle)")
        c = ck.get((rows[0]["model"], system, place)) if rows else None
        cells.append(", ".join(f"{c[k - 1] / c[0]:.2f}" for k in (*C_K, len(c)) if k <= len(c)) if c else "–")
        body.append(cells)
    return ["Speculative decoding, tokens/s (× AR in the same placement, tokens committed per cycle), and "
            "EVICT's profiled C(k)/C(1) (the placement's forward, a cold cache for `cpu-misses` and `fiddler`):",
            "", md_table(head, body), ""]


# -- figures ------------------------------------------------------------------------------------------------
def figures(rows, facts, setting) -> dict[str, bytes]:
    """``cpu-experts-<model>-layers.png`` (AR tokens/s against N) and ``-cache.png`` (against the cache)."""
    out = {}
    for f in facts:
        m = f["model"]
        out[f"cpu-experts-{m}-layers.png"] = _layers_figure([r for r in rows if r["model"] == m], f, setting)
        out[f"cpu-experts-{m}-cache.png"] = _cache_figure([r for r in rows if r["model"] == m], f, setting)
    return out


def _title(text: str, f) -> str:
    return f"{text}\n{f['name']} Q4_K_M — SYNTHETIC trace, predicted"


def _layers_figure(rows, f, setting) -> bytes:
    from simmoe.report.figures import _plt, _png

    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    for system in setting.systems:
        pts = [(r["x"], r["tps"]) for r in _ok(rows, kind="layers", system=system) if r["x"] != "all"]
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", label=_system_text(system))
    ax.set_xlabel("N in cpu-layers:N (llama.cpp --n-cpu-moe N); points that do not fit left out")
    ax.set_ylabel("AR tokens/s (predicted)")
    ax.set_title(_title("AR tokens/s against the layers whose experts run on the CPU", f), fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return _png(fig)


def _cache_figure(rows, f, setting) -> bytes:
    from simmoe.report.figures import _plt, _png

    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    for system in setting.systems:
        for kind, style in (("misses", "-"), ("fiddler", "--")):
            pts = [(r["mib"], r["tps"]) for r in _ok(rows, kind=kind, system=system) if r["slots"] > 0]
            if pts:
                ax.plot(*zip(*pts, strict=True), style, marker="o",
                        label=f"{_sys(system)[1]}, {'cpu-misses' if kind == 'misses' else 'fiddler'}")
    ax.set_xscale("log")
    ax.set_xlabel("GPU expert cache (MiB, LRU, log scale); sizes that do not fit left out")
    ax.set_ylabel("AR tokens/s (predicted)")
    ax.set_title(_title("AR tokens/s against the GPU cache's size", f), fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return _png(fig)
