"""``python -m simmoe.report.caches``: every expert-cache policy against Belady, by size, selector and trace.

Replays each trace under every registered cache policy of docs/caches.md
(Belady the offline ceiling, static the replay's most popular experts,
then the online ones), at four cache sizes — a share of each layer's
experts as slots per layer, and the same number of experts as one budget
across layers — with the selectors ar, eagle3 and specfit, and writes

* ``reports/caches.md``: hit rate, H2D copies per output token and decode
  tokens/s, with the SYNTHETIC label on synthetic traces and a "what decides
  the winner" section computed from the counters
  (:mod:`simmoe.report.caches_analysis`);
* ``reports/caches/<trace>-hit-rate.png``: hit rate against cache size;
* ``reports/caches/rows.csv``: every number.

    python -m simmoe.report.caches --out reports/caches.md [--quick] [--workers N]

The shipped traces replay their first requests (``learned`` trains on the
ones after them); the tiny model's trace (``traces/tiny-gsm8k.parquet``,
recorded with ``hwprobe record``) is timed with ``traces/tiny-gsm8k-cpu.toml``
(``hwprobe calibrate`` of the same model on the CPU it was recorded on).
Selector times are fixed (the profile's for specfit, 0 for the top-K rules),
so the report is the same on every run.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

from simmoe.errors import SimmoeError, one_line_parser
from simmoe.progress import bar as progress_bar

ROOT = Path(__file__).resolve().parents[2]
# (name, path, requests replayed, the same with --quick, profile: None = --hardware)
TRACES = (("gsm8k", "traces/gsm8k.parquet", 12, 3, None), ("cnndm", "traces/cnndm.parquet", 12, 3, None),
          ("tiny-gsm8k", "traces/tiny-gsm8k.parquet", 12, 4, "traces/tiny-gsm8k-cpu.toml"))
SELECTORS = ("ar", "eagle3", "specfit")
POLICIES = ("belady", "static", "lru", "lfu", "least-stale", "lfru", "eam", "learned")
FRACTIONS = (1 / 16, 1 / 8, 1 / 4, 1 / 2)        # of each layer's experts
QUICK_FRACTIONS = (1 / 8, 1 / 2)
DEFAULT_PROFILE = "a100-pcie-40gb"
METRICS = (("hit_rate", "hit rate", "{:.1%}"), ("h2d_per_token", "H2D copies per output token", "{:.1f}"),
           ("decode_tps", "decode tokens/s", "{:.2f}"))


@dataclasses.dataclass(frozen=True)
class Setting:
    quick: bool = False
    workers: int = 1
    hardware: str = DEFAULT_PROFILE
    seed: int = 0

    @property
    def fractions(self) -> tuple[float, ...]:
        return QUICK_FRACTIONS if self.quick else FRACTIONS


def trace_profile(trace, base, path: str = "trace"):
    """The profile to time ``trace`` (read from ``path``) with: ``base`` if it describes the trace's model,
    else the one recorded with the trace; either must describe it (:mod:`simmoe.hardware.model_check`)."""
    from simmoe.hardware.model_check import geometry_problem

    problem = geometry_problem(trace.geometry, base, f"{base.name} (--hardware)")
    if problem is None:
        return base, base.name
    doc = trace.meta.get("hardware")
    if not doc:
        raise SimmoeError(f"{path}: {problem}; the trace records no profile of its own")
    from simmoe.hardware.profile import HardwareProfile, validate

    names = {f.name for f in dataclasses.fields(HardwareProfile)} - {"path"}
    kw = {k: tuple(v) if isinstance(v, list) else v for k, v in doc.items() if k in names}
    prof = validate(HardwareProfile(**kw))
    recorded = geometry_problem(trace.geometry, prof, f"{prof.name} (recorded with the trace)")
    if recorded is not None:
        raise SimmoeError(f"{path}: {recorded}")
    return prof, f"{prof.name} (measured while recording)"


def load(path: str, setting: Setting, profile_path=None):
    """(trace, profile, its label): the trace at ``path`` and the profile that times it, checked to match."""
    from simmoe.hardware.model_check import check_profile_model
    from simmoe.hardware.profile import load_profile
    from simmoe.trace.io import read_trace

    trace = read_trace(ROOT / path if not Path(path).is_absolute() else path)
    if profile_path is None:
        return (trace, *trace_profile(trace, load_profile(setting.hardware), path))
    profile = load_profile(ROOT / profile_path)
    try:
        check_profile_model(trace.geometry, profile, f"{profile.name} ({profile_path})")
    except SimmoeError as exc:
        raise SimmoeError(f"{path}: {exc}") from None
    return trace, profile, f"{profile.name} ({profile_path}; {profile.notes})"


def configs(trace, name: str, requests: int, setting: Setting, profile):
    """(config, row labels) of every replay of one trace, and the AR baseline without a cache."""
    from simmoe.replay.engine import ReplayConfig, ar_baseline
    from simmoe.replay.selectors import SELECTORS as CLASSES

    g = trace.geometry
    L, N = int(g.num_layers), int(g.num_experts)
    out = []
    for sel in SELECTORS:
        ms = float(profile.selector_ms) if getattr(CLASSES[sel], "uses_cost", False) else 0.0
        for policy in POLICIES:
            for frac in setting.fractions:
                s = max(1, int(round(frac * N)))
                for kind in ("slots", "budget"):
                    budget = L * s if kind == "budget" else None
                    cfg = ReplayConfig(selector=sel, slots=s, cache=policy, cache_budget=budget, hardware=name,
                                       selector_ms=ms, requests=requests, seed=setting.seed)
                    out.append((cfg, {"trace": name, "selector": sel, "policy": policy, "kind": kind,
                                      "frac": frac, "slots": s, "experts": L * s}))
    base = ar_baseline(out[0][0])
    return out, base


def run_trace(name: str, path: str, requests: int, setting: Setting, progress=None, profile_path=None,
              loaded=None):
    """Every replay of one trace: a DataFrame of rows, its metadata.  ``loaded``: :func:`load`'s result."""
    import pandas as pd

    from simmoe.replay.engine import replay_all
    from simmoe.replay.metrics import speedup

    trace, profile, label = loaded if loaded is not None else load(path, setting, profile_path)
    jobs, base = configs(trace, name, requests, setting, profile)
    cfgs = [base] + [c for c, _ in jobs]
    t0 = time.perf_counter()
    results = replay_all(trace, cfgs, {name: profile}, workers=setting.workers, on_done=progress)
    wall = time.perf_counter() - t0
    ref = results[0].summary()
    rows = []
    for (_cfg, labels), res in zip(jobs, results[1:], strict=True):
        s = res.summary()
        rows.append({**labels, "synthetic": bool(trace.is_synthetic), "hit_rate": s["hit_rate"],
                     "h2d_per_token": s["h2d_per_token"], "decode_tps": s["decode_tps"],
                     "speedup": speedup(s, ref)})
    from simmoe.api import CacheShape
    from simmoe.replay.cache_learned import Learned

    g = trace.geometry
    trained = Learned().training_requests(CacheShape(int(g.num_layers), int(g.num_experts), 1, trace=trace,
                                                     requests=tuple(range(requests))))
    meta = {"name": name, "path": path, "synthetic": bool(trace.is_synthetic), "requests": requests,
            "total_requests": len(trace.requests), "profile": label, "L": int(g.num_layers),
            "N": int(g.num_experts), "k": int(g.top_k), "model": g.name or "?", "wall_s": wall,
            "baseline_tps": ref["decode_tps"], "kind": trace.meta.get("provenance", {}).get("kind", "?"),
            "learned_on": f"{len(trained)} (requests {trained[0]}–{trained[-1]})"}
    return pd.DataFrame(rows), meta


def render(df, metas: list[dict], setting: Setting, command: str, wall_s: float) -> str:
    """reports/caches.md."""
    from simmoe.report.caches_analysis import decides
    from simmoe.report.tables import md_table

    lines = ["# Expert-cache policies side by side, Belady as the ceiling", "",
             f"Regenerate: `{command}` ({wall_s / 60:.0f} min on this machine's 2 cores).  Every number is a "
             "simmoe replay (event timing, batch 1, seed 0, selector times fixed: the profile's for specfit, 0 for "
             "the top-K rules); rows.csv in reports/caches/ holds them all.  Definitions and sources of the "
             "policies: docs/caches.md.", "",
             "Sizes are a share of each layer's experts: *per layer* keeps that many slots in every layer; "
             "*budget* keeps the same total number of experts as one budget across layers, spread as the "
             "policy ranks them.  `belady` (the replay's future demand) is the ceiling; `static` pins the "
             "replay's most popular experts (it reads the replay's demand, so it is offline too); the winner "
             "is taken among the online policies.", "",
             "Admission: **forced**, as the engines load a missed expert (the replay's default, "
             "`--admission forced`; docs/caches.md): every expert a forward demands takes a slot, and `belady` "
             "is the optimum of that rule.  `static` keeps nothing outside its pinned set (its misses are "
             "staged, never admitted), so it can beat forced `belady`; under `--admission bypass` every policy "
             "may stage a miss instead, and `lfu`, `belady`, `lfru`, `eam` and `learned` give other numbers.",
             "", "## Traces", ""]
    rows = []
    for m in metas:
        tag = "SYNTHETIC" if m["synthetic"] else "recorded (real routes)"
        rows.append([m["name"], tag, f"{m['model']}: {m['L']} layers × {m['N']} experts, top-{m['k']}",
                     f"{m['requests']} of {m['total_requests']}", str(m["learned_on"]), m["profile"],
                     f"{m['baseline_tps']:.2f}"])
    lines += [md_table(["trace", "routes", "model", "requests replayed", "learned trains on", "profile",
                        "AR tok/s, no cache"], rows), ""]
    lines += ["## What decides the winner", "", *[f"- {x}" for x in decides(df)], ""]
    for m in metas:
        lines += _trace_section(df[df["trace"] == m["name"]], m)
    return "\n".join(lines) + "\n"


def _trace_section(df, m: dict) -> list[str]:
    from simmoe.report.tables import md_table

    tag = " (SYNTHETIC trace)" if m["synthetic"] else " (recorded routes)"
    out = [f"## {m['name']}{tag}", "", f"![hit rate vs size](caches/{m['name']}-hit-rate.png)", ""]
    sizes = sorted(set(zip(df["frac"], df["slots"], df["experts"])))
    cols = [f"{s}/layer" for _, s, _ in sizes] + [f"budget {e}" for _, _, e in sizes]
    for key, title, fmt in METRICS:
        out += [f"### {title}{tag}", ""]
        rows = []
        for sel in SELECTORS:
            for policy in POLICIES:
                g = df[(df["selector"] == sel) & (df["policy"] == policy)]
                cells = []
                for kind in ("slots", "budget"):
                    for frac, _, _ in sizes:
                        v = g[(g["kind"] == kind) & (g["frac"] == frac)][key]
                        cells.append(fmt.format(float(v.iloc[0])) if len(v) else "–")
                rows.append([sel, f"**{policy}**" if policy == "belady" else policy, *cells])
        out += [md_table(["selector", "policy", *cols], rows), ""]
    return out


def main(argv=None) -> int:
    p = one_line_parser(prog="python -m simmoe.report.caches", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="reports/caches.md", help="the report (figures and rows.csv beside it)")
    p.add_argument("--quick", action="store_true", help="fewer requests and two sizes (a check, minutes)")
    p.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--hardware", default=DEFAULT_PROFILE,
                   help="profile of the Qwen3-30B-A3B traces (gsm8k, cnndm); it must describe their model")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    try:
        return _run(args)
    except SimmoeError as exc:
        print(f"simmoe.report.caches: error: {exc}", file=sys.stderr)
        return 2


def _run(args) -> int:
    import pandas as pd

    from simmoe.atomicio import write_bytes_atomic, write_text_atomic
    from simmoe.report.caches_analysis import hit_rate_figure

    if args.workers < 1:
        raise SimmoeError(f"--workers must be at least 1, got {args.workers}")
    out = Path(args.out)
    if not out.parent.is_dir():
        raise SimmoeError(f"--out {out}: folder {out.parent} does not exist")
    if "learned" in POLICIES:        # refuse before any replay, not inside a worker
        from simmoe.replay.cache_learned import require_learning_libraries

        require_learning_libraries()
    setting = Setting(quick=args.quick, workers=args.workers, hardware=args.hardware)
    t0 = time.perf_counter()
    # every trace read and checked against its profile before any replay
    loaded = [load(path, setting, prof) for _, path, _, _, prof in TRACES]
    frames, metas = [], []
    with _progress(args.no_progress) as bar:
        for (name, path, full, quick, prof), pair in zip(TRACES, loaded, strict=True):
            n = len(SELECTORS) * len(POLICIES) * len(setting.fractions) * 2 + 1
            task = bar.add_task(name, total=n)
            df, meta = run_trace(name, path, quick if args.quick else full, setting,
                                 progress=lambda rs, task=task: bar.advance(task, len(rs)), profile_path=prof,
                                 loaded=pair)
            frames.append(df)
            metas.append(meta)
    df = pd.concat(frames, ignore_index=True)
    command = "python -m simmoe.report.caches --out " + str(args.out) + (" --quick" if args.quick else "")
    text = render(df, metas, setting, command, time.perf_counter() - t0)
    figures = out.parent / "caches"
    figures.mkdir(exist_ok=True)
    for m in metas:
        write_bytes_atomic(figures / f"{m['name']}-hit-rate.png", hit_rate_figure(df, m["name"], m["synthetic"]))
    write_text_atomic(figures / "rows.csv", df.to_csv(index=False, float_format="%.6g"))
    write_text_atomic(out, text)
    print(f"wrote {out}, {figures}/", file=sys.stderr)
    return 0


def _progress(disabled: bool):
    return progress_bar(disabled, 12, "replays")


if __name__ == "__main__":
    sys.exit(main())
