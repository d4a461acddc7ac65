"""`hwprobe record`: record a trace: pools, routes, agreement, timings, on a real model."""

from __future__ import annotations

import datetime
import shlex
from pathlib import Path


def add_sampling_args(p) -> None:
    """``--temperature`` and ``--sampling-seed`` (hwprobe record and hwprobe live alike)."""
    p.add_argument("--temperature", type=float, default=0.0, metavar="T",
                   help="0 (default): greedy decoding; T > 0: sample at temperature T with the uniforms of "
                        "--sampling-seed (the same text as simmoe replay --temperature T draws; hwprobe.sampling)")
    p.add_argument("--sampling-seed", type=int, default=0, metavar="S",
                   help="seed of the sampled decoding's uniforms (default 0)")


def check_sampling_args(args) -> float:
    """The temperature, or HwprobeError (one line, exit 2) for a negative or non-finite one."""
    import math

    from hwprobe.cli import HwprobeError

    t = float(args.temperature)
    if not math.isfinite(t) or t < 0:
        raise HwprobeError(f"--temperature {args.temperature}: must be a finite number >= 0")
    if args.sampling_seed < 0:
        raise HwprobeError(f"--sampling-seed {args.sampling_seed}: must be >= 0")
    return t


def register(sub) -> None:
    from hwprobe.session import add_model_args, add_prompt_args

    p = sub.add_parser("record", help="Record a trace: pools, routes, agreement, timings, on a real model",
                       description="At every output position, build the full pool and run one target forward "
                       "over root + pool: every node's routes and the target's agreement.  Finished requests "
                       "are kept in OUT.parts/ so a killed run resumes; the trace is written atomically.")
    add_model_args(p)
    add_prompt_args(p)
    p.add_argument("--K", type=int, default=7, help="verify budget written into the pool shape (default 7)")
    add_sampling_args(p)
    p.add_argument("--out", required=True, help="trace file to write (.parquet)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args) -> int:
    from hwprobe.cli import HwprobeError
    from hwprobe.prompts import read_prompts
    from hwprobe.session import checked_output
    from simmoe.atomicio import check_outputs

    out = checked_output(args, "trace file")
    check_outputs([("--out", args.out)], inputs=(args.prompts,))
    check_sampling_args(args)
    if args.K < 1:
        raise HwprobeError("--K must be >= 1")
    prompts = read_prompts(args.prompts, args.category, limit=args.limit, offset=args.offset)
    trace, summary = record(args, prompts, out)
    print(summary)
    return 0


def fingerprint(args, plan, prompts) -> dict:
    """What identifies a recording for resuming: everything the recorded routes and tokens depend on.

    The cache size (``--slots``, ``--inflight``) is not part of it: outputs and
    routes do not depend on the cache, so a run stopped by an out-of-memory
    error resumes with fewer slots (each part keeps the slots it was recorded
    with).
    """
    import hashlib

    digest = hashlib.sha256(Path(args.prompts).read_bytes()).hexdigest()[:16]
    return {"model": plan.source, "weights": "random" if args.config is not None else "trained", "seed": args.seed,
            "prompts": digest, "ids": [p.question_id for p in prompts],
            "max_new_tokens": args.max_new_tokens, "max_total_tokens": args.max_total_tokens,
            "pool": plan.spec.__dict__, "drafter": plan.drafter, "dtype": str(plan.dtype),
            "device": plan.device.type, "attn": plan.attn,
            **({"temperature": args.temperature, "sampling_seed": args.sampling_seed}
               if args.temperature > 0 else {})}


def record(args, prompts, out: Path):
    """Record ``prompts`` into ``out``; returns (trace, one-line summary).

    Every argument is checked, and a parts folder of another recording is
    refused, before the model is loaded; the parts folder is created only
    when the model is ready, and removed again if the run fails before its
    first request is finished.
    """
    import numpy as np

    from hwprobe.copysweep import link_gbps, sweep
    from hwprobe.device import describe
    from hwprobe.measured_profile import build_profile, fit_forward, profile_dict
    from hwprobe.models import moe_geometry, resident_parts, target_tokenizer
    from hwprobe.recorder import PartsFolder, assemble_trace, check_room, record_request
    from hwprobe.session import TokenProgress, build, oom_is_user_error, prepare
    from simmoe.trace import SCHEMA_VERSION, PoolShape
    from simmoe.trace.io import write_trace

    plan = prepare(args)
    tok = target_tokenizer(args.model, args.config)
    encoded = [tok.encode_prompt(p.text) for p in prompts]
    check_room(prompts, encoded, args.max_total_tokens)
    parts = PartsFolder(out, fingerprint(args, plan, prompts))
    parts.check()
    s = build(args, plan=plan)
    model = s.model
    geometry = moe_geometry(model, expert_bytes=s.backend.expert_bytes, name=s.loaded.name)
    L, N = geometry.num_layers, geometry.num_experts
    shape = PoolShape(s.spec.expand_topk, s.spec.depth, s.spec.max_nodes, args.K)
    parts.open()
    records = [parts.done(i) for i in range(len(prompts))]
    todo = [i for i, r in enumerate(records) if r is None]
    resumed = len(prompts) - len(todo)
    eos = getattr(tok, "eos_token_id", None)
    with parts.removed_if_nothing_done(), \
            TokenProgress(len(todo) * args.max_new_tokens, f"record {out.name}", args.quiet) as bar, \
            oom_is_user_error():
        for i in todo:
            pr = prompts[i]
            rec = record_request(model, s.backend, s.drafter, encoded[i],
                                 request_id=pr.question_id, dataset=pr.dataset,
                                 max_new_tokens=args.max_new_tokens, spec=s.spec, num_experts=N, eos=eos,
                                 max_total_tokens=args.max_total_tokens, progress=bar.advance,
                                 temperature=args.temperature, sampling_seed=args.sampling_seed)
            rec.output_text = tok.decode(rec.root_token)
            rec.extra["slots"] = args.slots
            rec.save(parts.part(i))
            records[i] = rec
    slots_used = sorted({int(r.extra.get("slots", args.slots)) for r in records})
    # the hardware profile, measured on the spot
    rows = sweep(s.device, s.backend.expert_bytes, factors=(1.0,), in_flight=(1, 2), repeats=5, warmup=1)
    verify = np.concatenate([r.verify_ms for r in records])
    union = np.concatenate([r.union for r in records])
    copies = np.concatenate([r.copies for r in records])
    fwd, exp = fit_forward(verify, union, copies)
    levels = np.concatenate([r.draft_ms.ravel() for r in records])
    dev = describe(s.device)
    profile = build_profile(
        name=f"hwprobe-record-{s.device.type}", device=dev, model=s.loaded.name,
        expert_bytes=s.backend.expert_bytes, num_layers=L,
        copy_samples_ms=np.concatenate([r.copy_ms for r in records]).tolist(),
        link_gbps=link_gbps(rows), forward_ms=fwd, expert_ms=exp,
        draft_level_ms=float(levels[levels > 0].mean()) if (levels > 0).any() else 0.0,
        notes=f"measured while recording with {args.slots} slots; rough: calibrate for b_k and beta",
        cpu=s.device.type != "cuda")
    meta = {
        "schema_version": SCHEMA_VERSION,
        "provenance": {
            "kind": "hwprobe", "model": s.loaded.name, "device": dev,
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "command": "hwprobe " + shlex.join(getattr(args, "argv", [])),
            "weights": s.loaded.weights, "drafter": s.drafter.name,
            "slots": args.slots if len(slots_used) == 1 else slots_used,
            "resident": resident_parts(model, geometry),
            "tokenizer": getattr(tok, "name", "?"), "pool_expand_nodes": s.spec.expand_nodes,
            "dtype": str(model.dtype).replace("torch.", ""),
        },
        "geometry": geometry.to_dict(),
        "pool_shape": shape.to_dict(),
        "hardware": profile_dict(profile),
    }
    if args.temperature > 0:    # schema version 2: the sampled text and p_T, CDF per node (simmoe.trace.sampling)
        meta["sampling"] = {"temperature": float(args.temperature), "seed": int(args.sampling_seed),
                            "text": "sampled"}
    trace = assemble_trace(records, meta=meta)
    write_trace(trace, out)
    parts.remove()
    n_tok = int(trace.requests.output_len.sum())
    agree = float(trace.node_agree.mean()) if trace.num_nodes else 0.0
    summary = (f"wrote {out}: {len(records)} requests ({resumed} resumed), {n_tok} positions, "
               f"{trace.num_nodes} pool nodes, agreement {agree:.3f}, "
               + (f"sampled at temperature {args.temperature:g} (seed {args.sampling_seed}), "
                  if args.temperature > 0 else "") +
               f"copies/position {copies.mean():.1f}, weights: {s.loaded.weights}")
    return trace, summary
