"""`hwprobe calibrate`: probe trees at cycle boundaries and fit b_k and beta (SpecFit App. B)."""

from __future__ import annotations

import sys
from pathlib import Path


def register(sub) -> None:
    from hwprobe.session import add_model_args

    p = sub.add_parser("calibrate", help="Probe trees at cycle boundaries and fit b_k and beta (SpecFit App. B)",
                       description="In each calibration state (prompt x cycle boundary), time a probability-"
                       "prefix and a minimum-union probe tree of every size k = 0..7, with the expert cache "
                       "kept and cleared, and fit y = b_k + beta*F by non-negative least squares.  Writes a "
                       "hardware profile (simmoe's TOML format) and the raw probe rows (CSV).")
    add_model_args(p)
    p.add_argument("--prompts", required=True, help="Spec-Bench JSONL")
    p.add_argument("--category", default="math_reasoning", help="category of the calibration prompts")
    p.add_argument("--limit", type=int, default=3, help="calibration prompts (default 3, as App. B)")
    p.add_argument("--offset", type=int, default=0, help="skip this many prompts first")
    p.add_argument("--boundaries", default="0,4,8", help="cycle boundaries (default 0,4,8)")
    p.add_argument("--repeats", type=int, default=2, help="timings per probe (default 2)")
    p.add_argument("--max-k", type=int, default=7, help="largest probe size (default 7)")
    p.add_argument("--out", required=True, help="hardware profile to write (.toml)")
    p.add_argument("--rows", help="raw probe rows (.csv; default: OUT with .probes.csv)")
    p.add_argument("--name", help="profile name (default: the file stem)")
    p.add_argument("--clock", default="auto", choices=["auto", "wall", "cpu"],
                   help="what times the probes: auto = the thread's CPU time on the CPU (other jobs on a shared "
                   "machine do not count), the wall clock on CUDA (as hwprobe live)")
    p.add_argument("--threads", type=int, default=1,
                   help="CPU threads for torch (default 1: steadier timings on a shared machine)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=run)


def parse_boundaries(text: str) -> tuple[int, ...]:
    from hwprobe.cli import HwprobeError

    try:
        b = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        raise HwprobeError(f"--boundaries must be comma-separated integers, got {text!r}") from None
    if not b or b[0] < 0:
        raise HwprobeError(f"--boundaries must be non-negative integers, got {text!r}")
    return b


def run(args) -> int:
    from hwprobe.cli import HwprobeError
    from hwprobe.prompts import read_prompts
    from simmoe.atomicio import check_outputs

    out = Path(args.out)
    if out.suffix != ".toml":
        raise HwprobeError(f"--out must name a .toml file, got {out}")
    rows = args.rows if args.rows is not None else str(out.with_suffix(".probes.csv"))
    check_outputs([("--out", args.out), ("--rows", rows)], inputs=(args.prompts,))  # before any probing
    if args.repeats < 1 or not 1 <= args.max_k <= 31:
        raise HwprobeError("--repeats must be >= 1 and --max-k in 1..31 (b_0 alone prices no draft tree; "
                           "SpecFit App. B fits b_0..b_7)")
    if args.threads < 1:
        raise HwprobeError("--threads must be >= 1")
    boundaries = parse_boundaries(args.boundaries)
    prompts = read_prompts(args.prompts, args.category, limit=args.limit, offset=args.offset)
    import torch

    torch.set_num_threads(args.threads)
    profile, rows_path, fits = calibrate(args, prompts, out, boundaries)
    for key, f in fits.items():
        print(f"{key:9s} beta = {f.beta:.6g} ms, b = [{', '.join(f'{x:.4g}' for x in f.b)}] ms "
              f"({f.points} points, rmse {f.rmse_ms:.3g} ms)")
    print(f"wrote {out} and {rows_path}")
    return 0


def calibrate(args, prompts, out: Path, boundaries):
    import numpy as np

    from hwprobe.calibration import fit_cost_model, fit_problem, noise_warning, probe_states
    from hwprobe.cli import HwprobeError
    from hwprobe.copysweep import link_gbps, sweep
    from hwprobe.device import describe
    from hwprobe.live import pick_clock
    from hwprobe.measured_profile import build_profile, fit_forward
    from hwprobe.models import moe_blocks
    from hwprobe.session import TokenProgress, build, oom_is_user_error
    from simmoe.hardware.profile import save_profile

    s = build(args)
    tok = s.loaded.tokenizer
    sizes = range(args.max_k + 1)
    enc = [(p.question_id, tok.encode_prompt(p.text)) for p in prompts]
    total = len(enc) * len(boundaries) * len(sizes) * 2 * 2 * args.repeats
    copy_samples: list[float] = []
    orig_collect = s.backend.collect

    def collect():             # keep the copy durations the probes produce
        snap = orig_collect()
        if len(copy_samples) < 5000:
            copy_samples.extend(snap.copy_ms)
        return snap
    s.backend.collect = collect
    clock_name, clock = pick_clock(args.clock, s.device)
    with TokenProgress(total, f"calibrate {out.name}", args.quiet) as bar, oom_is_user_error():
        rows = probe_states(s.model, s.backend, s.drafter, enc, boundaries=boundaries, sizes=sizes,
                            repeats=args.repeats, spec=s.spec, progress=bar.advance, clock=clock)
    if not rows:
        raise HwprobeError("no probe could be built (empty pools): try another drafter or prompts")
    rows_path = Path(args.rows) if args.rows else out.with_suffix(".probes.csv")
    _write_rows(rows, rows_path)            # the measurements are kept whatever the fit gives
    fits = {"cache": fit_cost_model(rows, True, sizes), "no_cache": fit_cost_model(rows, False, sizes)}
    for key, f in fits.items():
        problem = fit_problem(f, "with the cache" if key == "cache" else "without the cache")
        if problem:
            raise HwprobeError(f"{problem}; no profile written (probe rows kept in {rows_path}: "
                               "simmoe fit --probes refits them)")
        warning = noise_warning(f, "with the cache" if key == "cache" else "without the cache")
        if warning:
            print(warning, file=sys.stderr)
    link = link_gbps(sweep(s.device, s.backend.expert_bytes, factors=(1.0,), in_flight=(1,), repeats=5))
    cached = [r for r in rows if r.cache]
    fwd, exp = fit_forward([r.verify_ms for r in cached], [r.union for r in cached], [r.copies for r in cached])
    dev = describe(s.device)
    draft = [r.draft_ms / max(1, s.spec.depth) for r in rows]
    profile = build_profile(
        name=args.name or out.stem, device=dev, model=s.loaded.name, expert_bytes=s.backend.expert_bytes,
        num_layers=len(moe_blocks(s.model)), copy_samples_ms=copy_samples, link_gbps=link,
        forward_ms=fwd, expert_ms=exp, draft_level_ms=float(np.mean(draft)),
        commit_ms=float(np.mean([r.commit_ms for r in rows])), fits=fits,
        notes=(f"calibrated with {args.slots} slots, {len(enc)} prompts x boundaries {list(boundaries)}, "
               f"{args.repeats} repeats, drafter {s.drafter.name}, weights {s.loaded.weights}, "
               f"{clock_name} clock, {args.threads} thread(s)"),
        cpu=s.device.type != "cuda")
    save_profile(profile, out, header=f"hwprobe calibrate on {dev}\nweights: {s.loaded.weights}")
    return profile, rows_path, fits


def _write_rows(rows, path: Path) -> None:
    """The raw probe rows as CSV (atomically)."""
    import csv
    import io

    from hwprobe.atomic import write_text_atomic

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0].as_dict()))
    w.writeheader()
    for r in rows:
        w.writerow(r.as_dict())
    write_text_atomic(path, buf.getvalue())
