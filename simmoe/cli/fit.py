"""`simmoe fit`: refit a hardware profile and write it (atomically) as a new profile file.

Two modes:

* ``--probes FILE`` — SpecFit's cost model T̂(S) = b_|S| + βF(S) (Eq. 4) by
  non-negative least squares on probe measurements (App. B), for each cache
  mode present in the file;
* ``--trace FILE`` — the event model's times (``--free``) fitted to SpecFit's
  Table 3 ms/cycle (GSM8K, A100: the calibration set) by replaying the trace
  through the engine.  Only meaningful for a GSM8K trace on the A100's
  geometry; a synthetic trace makes the fitted profile synthetic-derived,
  and its ``source`` says so.  A trace that cannot identify the free
  parameters (no draft trees; another layer count than the profile's; a
  parameter the figures do not depend on) is refused before or during the
  fit, and a fit that does not converge within ``--max-evaluations`` replays
  is not written unless ``--allow-unconverged`` is given, which labels it
  "NOT CONVERGED" in its ``source`` and header.
"""

from __future__ import annotations

from pathlib import Path

from simmoe.errors import SimmoeError

DEFAULT_FREE = "forward_ms,expert_ms,copy_ms,draft_level_ms,cache_overhead_ms"
POOR_FIT = 0.10   # a fit that misses some target by more than this is flagged


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
    p.add_argument("--kmax", type=int, default=None,
                   help="largest node count k to fit b_k for (default: largest in the probes)")
    p.add_argument("--free", default=DEFAULT_FREE, help=f"--trace: parameters to fit (default {DEFAULT_FREE})")
    p.add_argument("--slots", type=int, default=48, help="--trace: cache slots of the cached rows (default 48)")
    p.add_argument("--max-evaluations", type=int, default=60,
                   help="--trace: replay budget of the fit, every replay counted (default 60)")
    p.add_argument("--allow-unconverged", action="store_true",
                   help="--trace: write the profile even when the fit did not converge, labelled "
                        "'NOT CONVERGED' (default: refuse to write it)")
    p.set_defaults(func=run)


def run(args) -> int:
    from simmoe.atomicio import check_outputs
    from simmoe.hardware.profile import load_profile, save_profile

    out = Path(args.output)
    if out.suffix != ".toml":
        raise SimmoeError(f"output {out} must end in .toml")
    check_outputs([("--output", args.output)], inputs=(args.probes, args.trace, args.hardware))
    if args.trace and args.max_evaluations < 1:
        raise SimmoeError(f"--max-evaluations must be at least 1, got {args.max_evaluations}")
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
    from simmoe.fitting.timing_fit import TIMING_PARAMS, copy_bounds, fit_timing, replay_simulator, table3_targets
    from simmoe.trace.io import read_trace

    free = [f.strip() for f in args.free.split(",") if f.strip()]
    bad = [f for f in free if f not in TIMING_PARAMS]
    if bad:
        raise SimmoeError(f"--free: unknown parameter {bad[0]!r}; choose from {', '.join(TIMING_PARAMS)}")
    if args.slots <= 0:
        raise SimmoeError("--slots must be > 0")
    trace = read_trace(args.trace)
    check_identifiable_trace(trace, base, args.trace)
    start = {k: getattr(base, k) for k in TIMING_PARAMS}
    bounds = {"copy_ms": copy_bounds(base.copies_in_flight, base.expert_bytes or 9437184,
                                     base.link_gbps or 24.8)}
    simulate = replay_simulator(trace, base, slots=args.slots)
    try:
        fit = fit_timing(simulate, table3_targets(), start, free, bounds,
                         max_evaluations=args.max_evaluations)
    except SimmoeError as exc:
        raise SimmoeError(f"trace {args.trace}: {exc}") from None
    lines = [f"{k} = {v:.6g}" for k, v in fit.params.items() if k in free]
    lines += [f"{q}: {fit.predicted[q]:.1f} ms vs {fit.targets[q]:.1f} ({100 * fit.rel_err[q]:+.2f}%)"
              for q in fit.targets]
    verdict = (f"converged after {fit.evaluations} replays" if fit.success
               else f"NOT CONVERGED ({fit.message}; {fit.evaluations} replays)")
    if not fit.success and not args.allow_unconverged:
        raise SimmoeError(f"the fit did not converge: {fit.message} "
                          f"(max error {100 * fit.max_abs_rel_err:.1f}%); nothing written: raise "
                          "--max-evaluations, or pass --allow-unconverged to write it labelled "
                          "'NOT CONVERGED'")
    for ln in lines:
        print(ln)
    print(verdict if fit.success else f"warning: {verdict}")
    if fit.max_abs_rel_err > POOR_FIT:
        print(f"warning: the fitted times miss Table 3 by up to {100 * fit.max_abs_rel_err:.1f}%: "
              "the trace's workload differs from the calibration set's (see the errors above)")
    kind = "synthetic trace" if trace.is_synthetic else "trace"
    source = (f"fitted to published figures (calibration set: SpecFit Table 3 ms/cycle, GSM8K, A100) "
              f"by replaying the {kind} {Path(args.trace).name}; cost model and C(k) from {base.name}")
    source += f"; max error {100 * fit.max_abs_rel_err:.1f}% against those figures"
    if not fit.success:
        source = f"NOT CONVERGED: {source}; the optimiser stopped early ({fit.message})"
    prof = base.replace(name=name, source=source, **{k: fit.params[k] for k in free})
    header = "\n".join([f"Profile {name}: {base.name} with event-model times refitted by `simmoe fit --trace`"
                        + ("." if fit.success else " -- NOT CONVERGED: do not use these times as fitted."),
                        f"Trace: {args.trace} ({kind}); {verdict}; "
                        f"max error {100 * fit.max_abs_rel_err:.2f}%"] + lines)
    return prof, header


def check_identifiable_trace(trace, base, path) -> None:
    """Refuse, before any replay, a trace whose replays cannot identify the event model's times.

    Table 3 separates drafting and verification only through the EAGLE-3 and
    SpecFit rows, which an autoregressive-only trace replays as AR; and its
    times are of the profile's model, so the trace must have as many layers
    (a profile stating ``num_layers = 0`` is not checked).
    """
    if trace.num_nodes == 0:
        raise SimmoeError(f"trace {path} has no draft trees (autoregressive-only): its EAGLE-3 and "
                          "SpecFit replays equal AR's, so Table 3's six ms/cycle cannot identify the timing "
                          "parameters; fit to a trace recorded with a drafter (hwprobe record or simmoe "
                          "synth)")
    have, want = trace.geometry.num_layers, int(base.num_layers or 0)
    if want and have != want:
        raise SimmoeError(f"trace {path} has {have} layers but profile {base.name} describes a {want}-layer "
                          "model: Table 3's times are of that model, so a fit to this trace would not "
                          "describe it")
    from simmoe.hardware.model_check import check_profile_model

    check_profile_model(trace.geometry, base, base.name)    # its experts and top-k too, as every command
