"""What ``simmoe tune`` prints: the best configurations, the flags, the reason, a heat map; and its JSON.

Every number is labelled a prediction, on SYNTHETIC traces where they are.
"""

from __future__ import annotations

import math

import numpy as np

from simmoe.tune.evaluate import is_synthetic, workload_label

PARTS = (("draft_ms_per_token", "drafting"), ("compute_ms_per_token", "verify compute"),
         ("experts_ms_per_token", "expert reads"), ("framework_ms_per_token", "framework"))
CPU_PART = ("cpu_experts_ms_per_token", "CPU experts")


def parts(outcome) -> tuple:
    """The breakdown's parts: CPU experts join where the experts run on the CPU."""
    return PARTS[:3] + (CPU_PART,) + PARTS[3:] if outcome.setup.cpu is not None else PARTS
SHADES = " .:-=+*#%@"


def _f(v, fmt=".1f") -> str:
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, fmt)


def best_table(outcome, top: int = 5) -> list[str]:
    ar = outcome.ar.get("tokens_per_s")
    lines = [f"{'rank':>4}  {'configuration':<34} {'tokens/s':>9} {'speedup':>8} {'accept':>7} {'verified':>9}"]
    for i, (cfg, row) in enumerate(outcome.search.ranking[:top], 1):
        sp = row["tokens_per_s"] / ar if ar else float("nan")
        lines.append(f"{i:>4}  {cfg.label():<34} {_f(row['tokens_per_s']):>9} {_f(sp, '.2f') + 'x':>8} "
                     f"{_f(row['accept_len'], '.2f'):>7} {_f(row['verified']):>9}")
    return lines


def reason_rows(outcome) -> list[tuple[str, dict]]:
    rows = [("best", outcome.best), ("engine default", outcome.default), ("AR", outcome.ar)]
    return [(name, r) for name, r in rows if r]


def reason_table(outcome) -> list[str]:
    ps = parts(outcome)
    head = (f"{'':<15}" + "".join(f"{label:>15}" for _, label in ps)
            + f"{'total':>9}{'tokens/s':>10}{'accept':>8}{'verified':>9}")
    lines = [head]
    for name, r in reason_rows(outcome):
        total = sum(r.get(k, 0.0) for k, _ in ps)
        lines.append(f"{name:<15}" + "".join(f"{_f(r.get(k), '.3f'):>15}" for k, _ in ps)
                     + f"{_f(total, '.3f'):>9}{_f(r.get('tokens_per_s')):>10}{_f(r.get('accept_len'), '.2f'):>8}"
                     + f"{_f(r.get('verified')):>9}")
    return lines


def limit_sentence(outcome) -> str:
    """One sentence: what limits speculation on this setup (from the best's and AR's breakdowns)."""
    b, a = outcome.best, outcome.ar
    if not b or not a or outcome.best_config is None or outcome.best_config.is_ar:
        return "AR is the only configuration searched: nothing to compare."
    speed = b["tokens_per_s"] / a["tokens_per_s"]
    reads = b.get("experts_per_step", float("nan")) / a.get("experts_per_step", float("nan"))
    v, acc = b["verified"], b["accept_len"]
    # per iteration, beyond AR's step
    more = {label: b.get(k, 0.0) * acc - a.get(k, 0.0) for k, label in parts(outcome)}
    worst = max(more, key=lambda k: more[k])
    if outcome.setup.cpu is not None:
        return _cpu_sentence(outcome, speed, v, acc, worst, more[worst])
    if speed < 1.0:
        return (f"Speculation loses here ({speed:.2f}x AR at best): verifying {v:.0f} tokens reads {reads:.1f}x "
                f"the experts of one token and its {worst} adds {more[worst]:.2f} ms per iteration; an "
                f"acceptance of {acc:.2f} does not pay for it.")
    return (f"Speculation pays {speed:.2f}x: an acceptance of {acc:.2f} pays for verifying {v:.0f} tokens, "
            f"which read {reads:.1f}x the experts of one token; what limits it most is the {worst} "
            f"({more[worst]:.2f} ms per iteration beyond AR's step).")


def _cpu_sentence(outcome, speed: float, v: float, acc: float, worst: str, worst_ms: float) -> str:
    """The sentence with experts on the CPU: distinct CPU experts per verified token, C(v)/C(1) of the forward."""
    b, a = outcome.best, outcome.ar
    cpu = b.get("cpu_experts_per_step", 0.0) / max(a.get("cpu_experts_per_step", 0.0), 1e-9)
    c = b.get("forward_ms_per_step", float("nan")) / a.get("forward_ms_per_step", float("nan"))
    where = outcome.best_config.placement
    if not a.get("cpu_experts_per_step"):
        head = f"at {where} no expert runs on the CPU; verifying {v:.0f} tokens costs C({v:.0f})/C(1) = {c:.2f}"
    else:
        head = (f"each verified token adds distinct CPU experts read from DRAM ({where}): verifying {v:.0f} tokens "
                f"reads {cpu:.1f}x the CPU experts of one, C({v:.0f})/C(1) = {c:.2f}")
    if speed < 1.0:
        return (f"Speculation loses here ({speed:.2f}x AR at best): {head}, and an acceptance of {acc:.2f} does "
                f"not pay for it; its {worst} adds {worst_ms:.2f} ms per iteration.")
    return (f"Speculation pays {speed:.2f}x: {head}, which an acceptance of {acc:.2f} pays for; what limits it "
            f"most is the {worst} ({worst_ms:.2f} ms per iteration beyond AR's step).")


def heat_grid(outcome):
    """Predicted tokens/s over the space's first two dimensions (best over the others), on the first rung.

    The first rung's traces are the shortest but every sampled configuration
    has one: the broadest view (values of different rungs do not compare).
    """
    dims = outcome.space.dims
    if len(dims) < 1 or outcome.search.rung < 0:
        return None
    dx = dims[0]
    dy = dims[1] if len(dims) > 1 else None
    grid = np.full((len(dy.values) if dy else 1, len(dx.values)), np.nan)
    for row in outcome.search.rows:
        if row["rung"] != 0:
            continue
        i = dy.values.index(row[dy.name]) if dy else 0
        j = dx.values.index(row[dx.name])
        grid[i, j] = np.fmax(grid[i, j], row["tokens_per_s"])
    return dx, dy, grid


def heat_map(outcome) -> list[str]:
    hg = heat_grid(outcome)
    if hg is None:
        return []
    dx, dy, grid = hg
    if np.all(np.isnan(grid)):
        return []
    lo, hi = np.nanmin(grid), np.nanmax(grid)
    n = outcome.search.rungs[0] if outcome.search.rungs else 1
    lines = [f"predicted tokens/s over {dx.name} (columns) x {dy.name if dy else '-'} (rows) on the first rung's "
             f"traces ({n} requests), best over the other parameters; ' ' {lo:.0f} ... '@' {hi:.0f}, "
             f"'?' not tried ({'SYNTHETIC' if is_synthetic(outcome.setup) else 'recorded trace'})"]
    width = max([8] + [len(str(v)) for v in (dy.values if dy else ())])
    lines.append(f"{'':>{width}} " + " ".join(f"{v!s:>3}" for v in dx.values))
    for i in range(grid.shape[0]):
        cells = []
        for v in grid[i]:
            if np.isnan(v):
                cells.append("  ?")
            else:
                k = int((v - lo) / (hi - lo) * (len(SHADES) - 1)) if hi > lo else len(SHADES) - 1
                cells.append(f"{SHADES[k] * 3}")
        label = f"{dy.values[i]!s:>{width}}" if dy else f"{'':>{width}}"
        lines.append(f"{label} " + " ".join(cells))
    return lines


def write_figure(outcome, path) -> None:
    """The heat map as a figure (matplotlib), written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from simmoe.atomicio import write_atomic

    hg = heat_grid(outcome)
    if hg is None:
        return
    dx, dy, grid = hg
    fig, ax = plt.subplots(figsize=(7, 4.5))
    im = ax.imshow(np.ma.masked_invalid(grid), origin="lower", aspect="auto", cmap="viridis")
    ax.set_xticks(range(len(dx.values)), [str(v) for v in dx.values])
    ax.set_xlabel(dx.name)
    if dy:
        ax.set_yticks(range(len(dy.values)), [str(v) for v in dy.values])
        ax.set_ylabel(dy.name)
    synthetic = is_synthetic(outcome.setup)
    fig.colorbar(im, ax=ax, label="predicted tokens/s" + (" (SYNTHETIC)" if synthetic else ""))
    ax.set_title(f"{outcome.setup.workload} on {outcome.setup.hardware}: prediction"
                 + (" on synthetic traces" if synthetic else " on a recorded trace"), fontsize=9)
    fig.tight_layout()
    fmt = str(path).rsplit(".", 1)[-1].lower() if "." in str(path) else "png"
    try:
        write_atomic(path, lambda tmp: fig.savefig(tmp, format=fmt))
    finally:
        plt.close(fig)


def text(outcome, *, top: int = 5) -> str:
    s, res = outcome.setup, outcome.search
    on = "synthetic traces" if is_synthetic(s) else "a recorded trace"
    lines = [f"simmoe tune: {workload_label(s)} on {s.hardware}, engine {outcome.space.engine}, "
             f"batch {s.batch}: PREDICTIONS on {on}, not measurements"]
    state = ("interrupted: the best found so far" if res.interrupted else
             "time budget reached: the best found so far" if res.out_of_budget else "search complete")
    lines.append(f"searched {res.evaluations} evaluations of a {outcome.space.size()}-configuration space by "
                 f"successive halving (last rung: {res.requests} requests; seed {s.seed}; {res.wall_s:.1f} s; "
                 f"{state})")
    if outcome.calibration:
        lines.append("from your measured point: " + "; ".join(f"{k} {v}" for k, v in outcome.calibration.items()))
    if not res.ranking:
        lines.append("no configuration was evaluated")
        return "\n".join(lines)
    lines += [""] + best_table(outcome, top)
    best = outcome.best_config
    lines += ["", f"flags (best): {best.flags()}"]
    if outcome.ar and outcome.best["tokens_per_s"] < outcome.ar["tokens_per_s"]:
        lines.append("AR is predicted faster than every configuration tried: leave speculative decoding off")
    if outcome.default:
        lines.append(f"engine default: {outcome.default['label']} ({outcome.default['flags']})")
    lines += ["", "why (ms per decoded token, predicted):"] + reason_table(outcome)
    lines += ["", limit_sentence(outcome)]
    hm = heat_map(outcome)
    if hm:
        lines += [""] + hm
    return "\n".join(lines)


def to_json(outcome, top: int = 10) -> dict:
    res = outcome.search
    ar = outcome.ar.get("tokens_per_s")
    synthetic = is_synthetic(outcome.setup)
    return {
        "synthetic": synthetic,
        "note": "predictions on " + ("synthetic traces" if synthetic else "a recorded trace") + ", not measurements",
        "setup": {"workload": outcome.setup.workload, "workload_label": workload_label(outcome.setup),
                  "trace": outcome.setup.trace_path, "hardware": outcome.setup.hardware,
                  "engine": outcome.space.engine, "batch": outcome.setup.batch, "seed": outcome.setup.seed},
        "search": {"evaluations": res.evaluations, "space_size": outcome.space.size(), "rung": res.rung,
                   "requests": res.requests, "wall_s": res.wall_s, "interrupted": res.interrupted,
                   "out_of_budget": res.out_of_budget},
        "best": [{**row, "label": cfg.label(), "flags": cfg.flags(),
                  "speedup": row["tokens_per_s"] / ar if ar else None} for cfg, row in res.ranking[:top]],
        "reason": {name: row for name, row in reason_rows(outcome)},
        "limit": limit_sentence(outcome) if res.ranking else None,
        "calibration": outcome.calibration,
    }
