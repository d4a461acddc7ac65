"""Build the whole report for a list of traces: tables, figures, the markdown index.

Everything is computed in memory first and written at the end, as one
folder swap (:func:`simmoe.atomicio.write_folder_atomic`: the new tree is
built in a hidden sibling folder, other files of ``OUT`` linked into it, then
renamed into place), so a failed or killed run leaves the previous report
untouched.  Files written (``OUT`` is
the output folder; ``<t>`` each trace's file stem):

- ``OUT/index.md`` — the index: every table with its numbers, every figure;
- ``OUT/report-args.json`` — the exact settings and traces used;
- ``OUT/tables/<t>-replays.csv`` — one row per (experiment, configuration);
- ``OUT/tables/<t>-table5.csv`` — SpecFit's Table 5 on the replayed requests;
- ``OUT/tables/check-slice.csv`` — the table part on the first
  ``check_requests`` requests of each trace, which a test recomputes;
- ``OUT/tables/<t>-prefetch.csv`` — the prefetch what-if (:mod:`simmoe.report.prefetch`);
- ``OUT/figures/<t>-{tps,slots,link,routes,policy,prefetch}.png``.

No other file in ``OUT`` is touched.  The output depends only on the
traces, the profiles and the settings: selector time and seeds are fixed,
and no wall-clock number enters a table.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from simmoe import __version__
from simmoe.errors import SimmoeError
from simmoe.published import PUBLISHED
from simmoe.report import figures, tables
from simmoe.report.experiments import (
    ReportSettings,
    check_models,
    check_rows,
    dataset_of,
    load_profiles,
    run_experiments,
    search_ms,
    table5_row,
)

STEPS = 7   # per trace: reading, replays, Table 5, check slice, regimes, prefetch what-if, figures

ROLE_TEXT = {"fit": "**fit** — used to fit the shipped traces/profiles, not a validation",
             "validate": "**validate** — a prediction, never fitted"}


if TYPE_CHECKING:       # pandas is imported where a report is built, not when the CLI starts
    import pandas as pd


@dataclass
class TraceReport:
    """One trace's numbers and figures."""

    path: str
    stem: str
    dataset: str
    synthetic: bool
    provenance: str
    requests_total: int
    requests_used: int
    replays: pd.DataFrame
    table5: dict
    figures: dict[str, bytes] = field(default_factory=dict)
    regimes: pd.DataFrame | None = None    # selector × regime × batch (simmoe.report.regimes)
    prefetch: pd.DataFrame | None = None   # the prefetch what-if (simmoe.report.prefetch)


def _provenance(trace) -> str:
    prov = trace.meta.get("provenance", {})
    kind = prov.get("kind", "unknown")
    bits = [kind]
    for key in ("generator", "preset", "seed", "model", "device", "source"):
        if key in prov:
            bits.append(f"{key} {prov[key]}")
    return ", ".join(str(b) for b in bits)


def analyse_trace(trace, path: str, settings: ReportSettings, *, workers: int = 1,
                  log: Callable[..., None] | None = None) -> tuple[TraceReport, object]:
    """Replays, Table 5 and figures of one trace; also returns the check-slice rows.

    ``log(text)`` starts each of the :data:`STEPS` steps; ``log(text, detail=True)`` counts
    configurations within one.
    """
    say = log or (lambda s, **k: None)
    stem = Path(path).stem
    dataset = dataset_of(trace, path)
    say(f"{path}: replays")
    df = run_experiments(trace, path, settings, workers=workers,
                         progress=lambda k, n: say(f"{path}: replays {k}/{n} configurations", detail=True))
    say(f"{path}: Table 5")
    t5 = table5_row(trace, path, settings)
    say(f"{path}: check slice")
    check = check_rows(trace, path, settings, workers=workers)
    say(f"{path}: selector x regime x batch")
    from simmoe.report.regimes import regime_rows

    regimes = regime_rows(trace, path, settings, workers=workers)
    R = len(trace.requests)
    rep = TraceReport(path=str(path), stem=stem, dataset=dataset, synthetic=bool(trace.is_synthetic),
                      provenance=_provenance(trace), requests_total=R,
                      requests_used=R if settings.requests is None else min(settings.requests, R),
                      replays=df, table5=t5, regimes=regimes)
    say(f"{path}: prefetch what-if")
    from simmoe.report import prefetch as prefetch_whatif

    rep.prefetch = prefetch_whatif.prefetch_rows(
        trace, path, settings, workers=workers,
        progress=lambda k, n: say(f"{path}: prefetch what-if {k}/{n} configurations", detail=True))
    say(f"{path}: figures")
    syn = rep.synthetic
    rep.figures = {
        "tps": figures.tps_bars(df, dataset, stem, syn),
        "slots": figures.slot_sweep(df, dataset, stem, syn),
        "link": figures.link_plot(df, stem, syn),
        "routes": figures.route_plot(df, dataset, stem, syn),
        "policy": figures.policy_plot(df, stem, syn),
        "prefetch": prefetch_whatif.gain_plot(rep.prefetch, stem, syn),
    }
    return rep, check


def anchor(rep: TraceReport) -> str:
    """The markdown anchor of a trace's section heading (GitHub's rule for simple headings)."""
    text = f"{rep.stem}{' (SYNTHETIC)' if rep.synthetic else ''}".lower()
    return "".join(ch for ch in text if ch.isalnum() or ch in "-_ ").replace(" ", "-")


def _role_line(role: str | None) -> str:
    if role is None:
        return "No published figure for this trace's dataset."
    return f"Published figures in parentheses; role: {ROLE_TEXT[role]}."


def trace_section(rep: TraceReport, settings: ReportSettings, profiles: dict) -> str:
    """The index's section of one trace."""
    df, ds = rep.replays, rep.dataset
    full = rep.requests_used == rep.requests_total and ds in tables.MAIN_TABLE and (
        rep.requests_total == PUBLISHED["specfit"]["setting"].get(ds, {}).get("requests"))
    base = profiles[df[df["experiment"] == "main"]["hardware"].iloc[0]]
    tag = " (SYNTHETIC)" if rep.synthetic else ""
    out = [f"## {rep.stem}{tag}", ""]
    if rep.synthetic:
        out += ["> **SYNTHETIC trace**: every number and plot in this section is a simulator output "
                "on a synthetic trace, not a measurement.", ""]
    out += [f"- file `{rep.path}`, dataset `{ds}`, provenance: {rep.provenance}",
            f"- requests replayed: the first {rep.requests_used} of {rep.requests_total}",
            f"- fixed selector time: SpecFit {search_ms(settings, ds, base):g} ms per cycle, "
            "top-K rules 0, AR none; timing model "
            f"`{settings.timing}`, seed {settings.seed}", ""]
    key = tables.MAIN_TABLE.get(ds)
    t, role = tables.main_table(df, ds, full=full)
    name = f"{key[1]} analogue" if key else "Main table"
    out += [f"### {name}: {base.name}, {settings.slots} LRU slots vs no cache{tag}", "",
            _role_line(role), "", t, "",
            f"![decode TPS](figures/{rep.stem}-tps.png)", ""]
    if ds == "cnndm":
        out += ["Within Table 2, EAGLE-3's committed tokens per cycle and AR's copies per token "
                "with the cache are fitted (marked `fit`); the request lengths too.", ""]
    t, role = tables.slot_table(df, ds)
    out += [f"### Figure 4 analogue: slot sweep (LRU; 0 = no cache){tag}", "", _role_line(role), "", t, "",
            f"![slot sweep](figures/{rep.stem}-slots.png)", ""]
    rtx = df[df["experiment"] == "rtx4090"]["hardware"].iloc[0]
    pub4 = "table4_gsm8k_rtx4090" if ds == "gsm8k" else None
    t, role = tables.main_table(df, ds, full=full and pub4 is not None and
                                rep.requests_total == PUBLISHED["specfit"][pub4]["requests"],
                                experiment="rtx4090", published_key=pub4)
    out += [f"### Table 4 analogue: {rtx}, {settings.rtx_slots} LRU slots vs no cache{tag}", "",
            _role_line(role), ""]
    if pub4:
        out += ["The published Table 4 covers 40 GSM8K questions; only the 4090's copy time per "
                "expert and its per-forward compute were fitted.", ""]
    out += [t, ""]
    t, role = tables.table5_table(rep.table5, ds, full=full)
    out += [f"### Table 5 analogue: selection theory (App. A) on SpecFit's cycles{tag}", "",
            _role_line(role), f"Coefficients of {rep.table5['hardware']} fitted with the cache; "
            "predicted throughputs in tokens/s.", "", t, ""]
    links = ", ".join(f"{lbl} {g:g} GB/s" for lbl, g in settings.links)
    out += [f"### What-if: host-to-device bandwidth{tag}", "",
            f"Profiles derived from {base.name}: copy time per expert = {base.expert_bytes} B / "
            f"bandwidth ({links}), everything else kept; the selectors' β without the cache is scaled by "
            "max(copy, compute) per expert, β with the cache capped by it (see docs/reports.md). "
            f"The base profile itself copies at {base.expert_bytes / base.effective_copy_ms / 1e6:.1f} GB/s "
            "effective. No published figure.", "",
            tables.link_table(df), "", f"![link](figures/{rep.stem}-link.png)", ""]
    t, role = tables.route_table(df, ds)
    out += [f"### What-if: route-predictor accuracy (§4.6){tag}", "",
            "Each routed expert the selector sees is replaced, with probability 1 − a, by one outside "
            "the true top-k; verification executes the true routes. "
            + ("Published: SpecFit 2.26× AR at a = 0.6 and 2.27× with exact routes, on 40 GSM8K "
               f"questions with the cache; role: {ROLE_TEXT[role]}." if role else "No published figure."),
            "", t, "", f"![routes](figures/{rep.stem}-routes.png)", ""]
    if rep.regimes is not None and len(rep.regimes):
        from simmoe.report import regimes

        out += [f"### Selector × regime × batch: {regimes.MODEL}, experts offloaded or resident{tag}", "",
                f"Offloaded: `{base.name}` with {settings.slots} LRU slots (EVICT's C(k) from its cached App. B "
                f"model). Resident: `{regimes.RESIDENT}`, the physical cost model (SpecFit's b_k and β derived "
                "from it, EVICT's C(k) profiled on the trace; docs/models-and-gpus.md). Batches > 1 decode with "
                "continuous batching and the batch-aware costs (docs/replay.md); tokens/s are aggregate, "
                "speedups over AR without a cache in the same regime and batch. Cost-model selectors are "
                "charged the SpecFit paper's median selector time in both regimes (last column), which weighs "
                "more against a resident step of a few ms than against an offloaded one. No published figure.", "",
                regimes.regime_table(rep.regimes), ""]
    if rep.prefetch is not None:
        from simmoe.report.prefetch import section as prefetch_section

        out += prefetch_section(rep.prefetch, rep.stem, rep.synthetic)
    out += [f"### What-if: cache policy{tag}", "",
            "`belady` is the offline optimum on the replay's own future demand (a bound, not deployable); "
            "`static` pins the experts the replay demands most. No published figure.", "",
            tables.policy_table(df), "", f"![policy](figures/{rep.stem}-policy.png)", ""]
    return "\n".join(out)


def command_line(paths: list[str], settings: ReportSettings, out: str) -> str:
    args = ["simmoe report --traces", *paths, "--out", out]
    if settings.requests is not None:
        args += ["--requests", str(settings.requests)]
    if settings.hardware != ReportSettings.hardware:
        args += ["--hardware", settings.hardware]
    if settings.hardware_rtx != ReportSettings.hardware_rtx:
        args += ["--hardware-rtx", settings.hardware_rtx]
    if settings.selector_ms is not None:
        args += ["--selector-ms", f"{settings.selector_ms:g}"]
    if settings.quick:
        args += ["--quick"]
    elif settings.check_requests != ReportSettings.check_requests:
        args += ["--check-requests", str(settings.check_requests)]
    return " ".join(args)


def index_markdown(reports: list[TraceReport], settings: ReportSettings, command: str,
                   profiles: dict) -> str:
    any_syn = any(r.synthetic for r in reports)
    head = ["# simmoe reports: the SpecFit paper's figures and what-ifs, simulated", ""]
    if any_syn:
        head += ["> **SYNTHETIC**: the traces below are synthetic (generated by `simmoe synth`, "
                 "calibrated to a few published figures); every table and plot is a simulator output "
                 "on them, not a measurement.", ""]
    if settings.quick:
        head += ["> **QUICK**: made with `--quick`: every table and figure on reduced grids (fewer slot counts, "
                 "links, accuracies, policies, batches) and, unless `--requests` was given, one request per "
                 "trace. A first look, not the full report.", ""]
    head += ["Regenerate with (deterministic: fixed selector time and seeds, no wall-clock numbers):", "",
             "```", command, "```", "",
             f"simmoe {__version__}; the exact settings are in `report-args.json`; tables as CSV in "
             "`tables/`, figures in `figures/`. How each figure is made: `docs/reports.md`.", "",
             "Published figures (SpecFit paper, `shared/data/published.json`) are shown in parentheses "
             "beside the simulated ones. Their role follows `shared/design/CALIBRATION.md`: **fit** "
             "figures were used to fit the shipped synthetic traces and hardware profiles (GSM8K Table 3 "
             "and Figure 3, CNN/DM's workload figures), so agreement there is by construction; "
             "**validate** figures (CNN/DM Table 2 and Figure 2, Figure 4, Table 4, Table 5, the route "
             "predictor) were never fitted and are predictions. Published cycle counts are shown only "
             "when every request of a paper-sized trace is replayed. \"× AR no cache\" is decode "
             "throughput over AR without a cache on the same trace and profile (SpecFit §4.1).", "",
             "Other reports that may sit beside this one (made by other commands): `calibration.md` "
             "(how the synthetic traces were fitted), `validation.md` (the simulator's predictions of "
             "every published figure), `fidelity-<device>.md` (simulated against live runs).", "",
             "Hardware profiles:", ""]
    for name, p in profiles.items():
        head.append(f"- `{name}`: {p.source}")
    head += ["", "Contents: " + ", ".join(f"[{r.stem}](#{anchor(r)})" for r in reports), ""]
    body = [trace_section(r, settings, profiles) for r in reports]
    return "\n".join(head + body).rstrip() + "\n"


def build_report(paths: list[str], out: str | Path, settings: ReportSettings, *, workers: int = 1,
                 log: Callable[..., None] | None = None, command: str | None = None) -> list[Path]:
    """Compute and write the report for ``paths`` into ``out``; the list of files written."""
    import pandas as pd

    from simmoe.atomicio import write_folder_atomic
    from simmoe.trace.io import read_trace

    settings = settings.validate()
    if not paths:
        raise SimmoeError("no traces given")
    from simmoe.atomicio import check_outputs

    check_outputs([("--out", str(out))], folders=("--out",))
    out = Path(out)
    stems = [Path(p).stem for p in paths]
    if len(set(stems)) != len(stems):
        raise SimmoeError("two traces have the same file name; the report names its files after them")
    for p in paths:
        if not Path(p).is_file():
            raise SimmoeError(f"no such trace file: {p}")
    profiles = load_profiles(settings)
    traces = []
    for p in paths:  # a bad trace fails before any replay
        if log:
            log(f"{p}: reading")
        traces.append(read_trace(p))
    for p, trace in zip(paths, traces):  # a profile of another model fails before any replay too
        check_models(trace, p, settings)
    reports, checks = [], []
    for p, trace in zip(paths, traces):
        rep, check = analyse_trace(trace, p, settings, workers=workers, log=log)
        reports.append(rep)
        checks.append(check)
    command = command or command_line(list(paths), settings, str(out))
    files: dict[Path, bytes] = {}
    for rep in reports:
        files[out / "tables" / f"{rep.stem}-replays.csv"] = rep.replays.to_csv(index=False).encode()
        files[out / "tables" / f"{rep.stem}-table5.csv"] = pd.DataFrame([rep.table5]).to_csv(index=False).encode()
        if rep.regimes is not None and len(rep.regimes):
            files[out / "tables" / f"{rep.stem}-regimes.csv"] = rep.regimes.to_csv(index=False).encode()
        if rep.prefetch is not None:
            files[out / "tables" / f"{rep.stem}-prefetch.csv"] = rep.prefetch.to_csv(index=False).encode()
        for name, png in rep.figures.items():
            files[out / "figures" / f"{rep.stem}-{name}.png"] = png
    files[out / "tables" / "check-slice.csv"] = pd.concat(checks, ignore_index=True).to_csv(index=False).encode()
    args = {"command": command, "traces": [str(p) for p in paths], "settings": settings.to_dict(),
            "simmoe_version": __version__, "synthetic": any(r.synthetic for r in reports)}
    files[out / "report-args.json"] = (json.dumps(args, indent=2) + "\n").encode()
    files[out / "index.md"] = index_markdown(reports, settings, command, profiles).encode()
    return write_folder_atomic(out, files)
