"""`hwprobe live`: real speculative decoding with any simmoe selector on the offloaded backend."""

from __future__ import annotations

import contextlib
import datetime
import gc
import shlex
from pathlib import Path


def register(sub) -> None:
    from hwprobe.session import add_model_args, add_prompt_args

    p = sub.add_parser("live", help="Real speculative decoding with any simmoe selector on the offloaded backend",
                       description="Speculative decoding with a simmoe selector, every cycle measured (drafting, "
                       "selection, verification, commit, copies, hits); each request is checked against greedy "
                       "decoding.  Finished requests are kept in OUT.partial (\"complete\": false) while running; "
                       "OUT is written atomically at the end.  Compare with a replay: simmoe validate.")
    add_model_args(p)
    p.add_argument("--selector", required=True, help="simmoe selector name (ar, eagle3, specfit, evict, ...)")
    p.add_argument("--hardware", help="hardware profile (name or .toml) whose cost models the selector uses "
                   "(b_k, beta: hwprobe calibrate); needed by specfit, specfit-full, unconstrained, evict")
    p.add_argument("--route-accuracy", type=float, default=1.0,
                   help="selectors see routes through the simulated predictor of this accuracy (default 1: exact)")
    p.add_argument("--route-seed", type=int, default=0, help="seed of the route predictor (as simmoe replay --seed)")
    p.add_argument("--ddd-threshold", type=float, help="ddd selector: stop drafting below this level mass")
    p.add_argument("--coverage-rho", type=float, help="coverage selector: fraction of the top-K mass")
    add_prompt_args(p)
    p.add_argument("--K", type=int, default=7, help="verify budget K (default 7, as hwprobe record)")
    from hwprobe.commands.record import add_sampling_args

    add_sampling_args(p)
    p.add_argument("--out", required=True, help="live-run file to write (JSON lines)")
    p.add_argument("--clock", default="auto", choices=["auto", "wall", "cpu"],
                   help="what times the cycles: auto = the thread's CPU time on the CPU (other jobs on a shared "
                   "machine do not count), the wall clock on CUDA")
    p.add_argument("--repeats", type=int, default=1,
                   help="decode all prompts this many times (the cache emptied before each pass) and keep, for "
                   "every part of every cycle, its least disturbed (minimum) time; each pass must make the same "
                   "cycles (default 1)")
    p.add_argument("--threads", type=int, default=1,
                   help="CPU threads for torch (default 1: steadier timings on a shared machine)")
    p.add_argument("--prefetch", default="none", choices=["none", "draft"],
                   help="draft: copy the predicted experts of the root and the drafted levels into the cache "
                        "before verification (docs/prefetch.md); default none")
    p.add_argument("--timeline", metavar="FILE",
                   help="also write the measured timeline (Chrome trace-event JSON, as simmoe replay --timeline)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args) -> int:
    from hwprobe.cli import HwprobeError
    from hwprobe.prompts import read_prompts
    from hwprobe.session import checked_output
    from simmoe.atomicio import check_outputs

    out = checked_output(args, "file")
    check_outputs([("--out", args.out), ("--timeline", args.timeline)], inputs=(args.prompts,))
    from hwprobe.commands.record import check_sampling_args

    check_sampling_args(args)
    if args.K < 1:
        raise HwprobeError("--K must be >= 1")
    if args.threads < 1:
        raise HwprobeError("--threads must be >= 1")
    if args.repeats < 1:
        raise HwprobeError("--repeats must be >= 1")
    prompts = read_prompts(args.prompts, args.category, limit=args.limit, offset=args.offset)
    import torch

    torch.set_num_threads(args.threads)
    summary = live(args, prompts, out)
    print(summary)
    return 0


def _selection_profile(args):
    """The profile the selector's cost models come from (None when the selector needs none)."""
    from hwprobe.cli import HwprobeError
    from simmoe.errors import SimmoeError
    from simmoe.replay.selectors import SELECTORS

    cls = SELECTORS.get(args.selector)
    if cls is None:
        raise HwprobeError(f"unknown selector {args.selector!r}; known: {', '.join(SELECTORS)}")
    if cls.needs_prepare:
        raise HwprobeError(f"selector {args.selector!r} needs every pool of the run in advance "
                           "(a trace-level pass); it cannot run live")
    if args.hardware is None:
        if cls.uses_cost or cls.uses_evict_cost:
            raise HwprobeError(f"selector {args.selector!r} needs --hardware PROFILE with its cost model "
                               "(measure one here with: hwprobe calibrate ... --out PROFILE.toml)")
        return None
    from simmoe.hardware.profile import load_profile
    try:
        return load_profile(args.hardware)
    except SimmoeError as exc:
        raise HwprobeError(str(exc)) from None


def live(args, prompts, out: Path) -> str:
    """Run ``prompts`` live into ``out``; returns a one-line summary."""
    import hashlib

    import numpy as np

    from hwprobe.cli import HwprobeError
    from hwprobe.device import describe
    from hwprobe.live import (
        LiveSettings,
        LiveWriter,
        LosslessCheckFailed,
        live_request,
        make_live_selector,
        pick_clock,
        tie_tolerance,
        warm_up,
    )
    from hwprobe.measured_profile import profile_dict
    from hwprobe.models import moe_geometry, target_tokenizer
    from hwprobe.recorder import check_room
    from hwprobe.session import TokenProgress, build, oom_is_user_error, prepare
    from simmoe.errors import SimmoeError
    from simmoe.replay.route_prediction import RoutePredictor
    from simmoe.validation.live import LiveRun, merge_passes

    profile = _selection_profile(args)
    options = {}
    if args.ddd_threshold is not None:
        options["ddd_threshold"] = args.ddd_threshold
    if args.coverage_rho is not None:
        options["coverage_rho"] = args.coverage_rho
    settings = LiveSettings(selector=args.selector, slots=args.slots, K=args.K,
                            route_accuracy=args.route_accuracy, seed=args.route_seed,
                            max_new_tokens=args.max_new_tokens, max_total_tokens=args.max_total_tokens,
                            options=options, temperature=float(args.temperature),
                            sampling_seed=int(args.sampling_seed), prefetch=args.prefetch)
    selector = make_live_selector(settings, profile)
    try:
        from simmoe.replay.route_prediction import check_accuracy

        predictor_args = (check_accuracy(args.route_accuracy), args.route_seed)
    except SimmoeError as exc:
        raise HwprobeError(str(exc)) from None
    plan = prepare(args)                       # every argument checked before the model loads
    tok = target_tokenizer(args.model, args.config)
    encoded = [tok.encode_prompt(p.text) for p in prompts]
    check_room(prompts, encoded, args.max_total_tokens)
    with oom_is_user_error():
        s = build(args, plan=plan)
    model = s.model
    if args.prefetch != "none":     # without a cache, c staging buffers per layer hold the prefetches
        s.backend.enable_prefetch(args.inflight)
    timeline = None
    if args.timeline is not None:
        from hwprobe.prefetch import LiveTimeline

        timeline = LiveTimeline(s.device)
    geometry = moe_geometry(model, expert_bytes=s.backend.expert_bytes, name=s.loaded.name)
    if profile is not None:    # the check simmoe replay makes: a profile's timing belongs to one model
        from types import SimpleNamespace

        from simmoe.replay.engine import check_profile_geometry

        try:
            check_profile_geometry(SimpleNamespace(geometry=geometry), profile, args.hardware)
        except SimmoeError as exc:
            raise HwprobeError(f"--hardware: {exc}".replace("the trace", "the model")) from None
    N = geometry.num_experts
    predictor = RoutePredictor(N, *predictor_args)
    eos = getattr(tok, "eos_token_id", None)
    dev = describe(s.device)
    meta = {
        "model": s.loaded.name, "model_source": s.loaded.source, "weights": s.loaded.weights,
        "seed": args.seed, "drafter": s.drafter.name,
        "drafter_agreement": args.agreement if s.drafter.name == "target" else None,
        "prompts": str(args.prompts), "prompts_sha256": hashlib.sha256(Path(args.prompts).read_bytes()).hexdigest(),
        "category": args.category, "limit": args.limit, "offset": args.offset,
        "question_ids": [p.question_id for p in prompts],
        "selector": args.selector, "slots": args.slots, "inflight": args.inflight, "K": args.K,
        "route_accuracy": args.route_accuracy, "route_seed": args.route_seed, "options": options,
        "temperature": float(args.temperature), "sampling_seed": int(args.sampling_seed),
        "max_new_tokens": args.max_new_tokens, "max_total_tokens": args.max_total_tokens,
        "pool": s.spec.__dict__, "geometry": geometry.to_dict(), "device": dev,
        "dtype": str(model.dtype).replace("torch.", ""), "attn": plan.attn,
        "tie_tolerance": tie_tolerance(model.dtype),
        "timer": s.backend.timer.kind, "clock": pick_clock(args.clock, s.device)[0],
        "threads": __import__("torch").get_num_threads(), "repeats": args.repeats,
        "combine": "minimum over passes" if args.repeats > 1 else "single pass",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": "hwprobe " + shlex.join(getattr(args, "argv", [])),
        "selection_profile": profile_dict(profile) if profile is not None else None,
        **({"prefetch": args.prefetch} if args.prefetch != "none" else {}),
    }
    writer = LiveWriter(out, meta)
    with oom_is_user_error():                  # the warm-up is the first forward: out of memory shows here first
        if prompts and selector.drafts:
            warm_up(model, s.drafter, encoded[0], s.spec)
        elif prompts:
            warm_up(model, s.drafter, encoded[0], s.spec, rounds=0)
    passes = []
    with TokenProgress(len(prompts) * args.max_new_tokens * args.repeats, f"live {args.selector} {out.name}",
                       args.quiet) as bar, oom_is_user_error():
        for p in range(args.repeats):
            s.backend.clear()           # every pass starts from the empty cache of the first
            row0, done = 0, []
            for i, pr in enumerate(prompts):
                with _no_gc_pauses():
                    req = live_request(model, s.backend, s.drafter, selector, encoded[i],
                                       index=i, request_id=pr.question_id, dataset=pr.dataset, row0=row0,
                                       settings=settings, spec=s.spec, num_experts=N,
                                       route_dtype=geometry.route_dtype, predictor=predictor, eos=eos,
                                       progress=bar.advance, clock=args.clock,
                                       check=p == 0,   # later passes must repeat the first's cycles exactly
                                       timeline=timeline if p == 0 else None)
                row0 += req.output_len
                done.append(req)
                if p == 0:
                    writer.add(req)
            passes.append([r.to_json_lines() for r in done])
            if p > 0:
                try:
                    writer.update(merge_passes(passes), {"passes_done": p + 1})
                except SimmoeError as exc:       # CheckFailed: identical passes made other cycles
                    raise LosslessCheckFailed(f"{exc}; please report") from None
    ties = sum(int(r.get("near_ties", 0)) for r in writer.records if r.get("type") == "request")
    run = LiveRun.from_records(meta, writer.records, path=str(out))
    if timeline is not None:
        timeline.write(args.timeline, f"live {args.selector} ({args.slots} slots, prefetch {args.prefetch})",
                       {"model": s.loaded.name, "device": dev, "selector": args.selector, "slots": args.slots,
                        "prefetch": args.prefetch})
    measured = _measured_profile(run, s)
    writer.finish({"measured_profile": measured})
    sm = run.summary()
    return (f"wrote {out}: {len(run.requests)} requests, {sm['output_tokens']} tokens, {sm['cycles']} cycles, "
            f"{sm['output_tokens'] / max(sm['cycles'], 1):.2f} tokens/cycle, decode {sm['decode_tps']:.1f} tok/s, "
            f"{sm['h2d_per_token']:.2f} copies/token, median cycle "
            f"{float(np.median(run.cycles['cycle_ms'])) if sm['cycles'] else 0:.2f} ms"
            f"{f' (minimum of {args.repeats} passes)' if args.repeats > 1 else ''}; "
            f"{'sampled' if args.temperature > 0 else 'greedy'} check passed"
            f"{f' ({ties} near-tie positions within the tie tolerance)' if ties else ''}; "
            f"weights: {s.loaded.weights}")


@contextlib.contextmanager
def _no_gc_pauses():
    """Python's cyclic garbage collector off during a request (collected before it), as ``timeit`` does.

    Its collections start at allocation counts, i.e. at the same cycles in
    every pass of a run, where they would add a pause that no pass avoids.
    """
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _measured_profile(run, s) -> dict:
    """The event-model parameters fitted to this run's own cycles (in-sample; see simmoe.validation.live)."""
    from hwprobe.measured_profile import profile_dict
    from simmoe.errors import SimmoeError
    from simmoe.validation.live import fit_timing

    try:
        prof = fit_timing([run], name=f"hwprobe-live-{s.device.type}")
    except SimmoeError:          # too few cycles to fit: leave it out
        return {}
    return profile_dict(prof)
