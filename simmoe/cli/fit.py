"""`simmoe fit`: refit a hardware profile and write it (atomically) as a new profile file.

Two modes:

* ``--probes FILE`` — SpecFit's cost model T̂(S) = b_|S| + βF(S) (Eq. 4) by
  non-negative least squares on probe measurements (App. B), for each cache
  mode present in the file;
* ``--trace FILE`` — the event model's times (``--free``) fitted to SpecFit's
  Table 3 ms/cycle (GSM8K, A100: the calibration set) by replaying the trace
  through the engine.  Only meaningful for a GSM8K trace on the A100's
  geometry; a synthetic trace makes the fitted profile synthetic-derived,
  and its ``source`` says so.
"""

from __future__ import annotations

from pathlib import Path

from simmoe.errors import SimmoeError

DEFAULT_FREE = "forward_ms,expert_ms,copy_ms,draft_level_ms,cache_overhead_ms"


def register(sub) -> None:
    p = sub.add_parser(
        "fit", help="Refit a hardware profile: cost model (b_k, beta) by NNLS from probes, or timing by replay",
        description="Refit a hardware profile and write it as a new .toml file (atomically). "
        "--probes: SpecFit's b_k and beta by non-negative least squares (App. B) from probe rows "
        "(CSV/JSON with columns cache, k, union, ms; see docs/hardware-profiles.md). "
        "--trace: the event model's times fitted to SpecFit Table 3 (GSM8K, A100) by replay.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--probes", metavar="FILE", help="probe rows (.csv or .json)")
    src.add_argument("--trace", metavar="FILE", help="GSM8K trace to replay for the Table 3 timing fit (.parquet)")
    p.add_argument("--hardware", default="a100-pcie-40gb", help="profile to start from (name or .toml path)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="where to write the refitted profile (.toml)")
    p.add_argument("--name", help="name of the new profile (default: the output file's stem)")
    p.add_argument("--kmax", type=int, default=None, help="largest node count k to fit b_k for (default: largest in the probes)")
    p.add_argument("--free", default=DEFAULT_FREE, help=f"--trace: parameters to fit (default {DEFAULT_FREE})")
    p.add_argument("--slots", type=int, default=48, help="--trace: cache slots of the cached rows (default 48)")
    p.add_argument("--max-evaluations", type=int, default=60, help="--trace: replay budget of the fit (default 60)")
    p.set_defaults(func=run)


def run(args) -> int:
    from simmoe.hardware.profile import load_profile, save_profile

    out = Path(args.output)
    if out.suffix != ".toml":
        raise SimmoeError(f"output {out} must end in .toml")
    if not (out.parent if str(out.parent) else Path(".")).is_dir():
        raise SimmoeError(f"cannot write {out}: no such folder {out.parent}")
    base = load_profile(args.hardware)
    name = args.name or out.stem
    if args.probes:
        prof, header = _fit_probes(args, base, name)
    else:
        prof, header = _fit_trace(args, base, name)
    save_profile(prof, out, header=header)
    print(f"wrote {out}")
    return 0


def _fit_probes(args, base, name):
    from simmoe.hardware.costfit import fit_cost_model, read_probes

    rows = read_probes(args.probes)
    if args.kmax is not None and args.kmax < 0:
        raise SimmoeError(f"--kmax must be >= 0, got {args.kmax}")
    changes, lines = {}, []
    for cache, key in ((True, "cache"), (False, "no_cache")):
        if not any(r.cache == cache for r in rows):
            continue
        f = fit_cost_model(rows, cache, args.kmax)
        changes[f"cost_b_{key}"] = f.b
        changes[f"cost_beta_{key}"] = f.beta
        line = (f"{key}: beta = {f.beta:.6g} ms, b = [{', '.join(f'{x:.3f}' for x in f.b)}]; "
                f"{f.points} points, rmse {f.rmse_ms:.3g} ms, max error {100 * f.max_rel_err:.2f}%")
        lines.append(line)
        print(line)
    source = f"{base.source}; cost model refitted by simmoe fit (NNLS, SpecFit App. B) from {Path(args.probes).name}"
    prof = base.replace(name=name, source=source, **changes)
    header = "\n".join([f"Profile {name}: {base.name} with its cost model refitted by `simmoe fit --probes`.",
                        f"Probes: {args.probes}"] + lines)
    return prof, header


def _fit_trace(args, base, name):
    from simmoe.hardware.costfit import TIMING_PARAMS, copy_bounds, fit_timing, replay_simulator, table3_targets
    from simmoe.trace.io import read_trace

    free = [f.strip() for f in args.free.split(",") if f.strip()]
    bad = [f for f in free if f not in TIMING_PARAMS]
    if bad:
        raise SimmoeError(f"--free: unknown parameter {bad[0]!r}; choose from {', '.join(TIMING_PARAMS)}")
    if args.slots <= 0:
        raise SimmoeError("--slots must be > 0")
    trace = read_trace(args.trace)
    start = {k: getattr(base, k) for k in TIMING_PARAMS}
    bounds = {"copy_ms": copy_bounds(base.copies_in_flight, base.expert_bytes or 9437184,
                                     base.link_gbps or 24.8)}
    simulate = replay_simulator(trace, base, slots=args.slots)
    fit = fit_timing(simulate, table3_targets(), start, free, bounds, max_evaluations=args.max_evaluations)
    lines = [f"{k} = {v:.6g}" for k, v in fit.params.items() if k in free]
    lines += [f"{q}: {fit.predicted[q]:.1f} ms vs {fit.targets[q]:.1f} ({100 * fit.rel_err[q]:+.2f}%)" for q in fit.targets]
    for ln in lines:
        print(ln)
    kind = "synthetic trace" if trace.is_synthetic else "trace"
    source = (f"fitted to published figures (calibration set: SpecFit Table 3 ms/cycle, GSM8K, A100) "
              f"by replaying the {kind} {Path(args.trace).name}; cost model and C(k) from {base.name}")
    prof = base.replace(name=name, source=source, **{k: fit.params[k] for k in free})
    header = "\n".join([f"Profile {name}: {base.name} with event-model times refitted by `simmoe fit --trace`.",
                        f"Trace: {args.trace} ({kind}); {fit.evaluations} replays; "
                        f"max error {100 * fit.max_abs_rel_err:.2f}%"] + lines)
    return prof, header
