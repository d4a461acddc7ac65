"""`hwprobe record`: record a trace: pools, routes, agreement, timings, on a real model."""

from __future__ import annotations

import datetime
import shlex
from pathlib import Path


def register(sub) -> None:
    from hwprobe.session import add_model_args, add_prompt_args

    p = sub.add_parser("record", help="Record a trace: pools, routes, agreement, timings, on a real model",
                       description="At every output position, build the full pool and run one target forward "
                       "over root + pool: every node's routes and the target's agreement.  Finished requests "
                       "are kept in OUT.parts/ so a killed run resumes; the trace is written atomically.")
    add_model_args(p)
    add_prompt_args(p)
    p.add_argument("--K", type=int, default=7, help="verify budget written into the pool shape (default 7)")
    p.add_argument("--out", required=True, help="trace file to write (.parquet)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args) -> int:
    from hwprobe.prompts import read_prompts
    from hwprobe.session import checked_output

    out = checked_output(args, "trace file")
    prompts = read_prompts(args.prompts, args.category, limit=args.limit, offset=args.offset)
    trace, summary = record(args, prompts, out)
    print(summary)
    return 0


def record(args, prompts, out: Path):
    """Record ``prompts`` into ``out``; returns (trace, one-line summary)."""
    import hashlib

    import numpy as np

    from simmoe.trace import SCHEMA_VERSION, ModelGeometry, PoolShape
    from simmoe.trace.io import write_trace

    from hwprobe.copysweep import link_gbps, sweep
    from hwprobe.device import describe
    from hwprobe.measured_profile import build_profile, fit_forward, profile_dict
    from hwprobe.models import moe_blocks
    from hwprobe.recorder import PartsFolder, assemble_trace, record_request
    from hwprobe.session import TokenProgress, build, oom_is_user_error

    s = build(args)
    model, cfg = s.model, s.model.config
    tok = s.loaded.tokenizer
    L, N, k = len(moe_blocks(model)), int(cfg.num_experts), int(cfg.num_experts_per_tok)
    geometry = ModelGeometry(L, N, k, expert_bytes=s.backend.expert_bytes, name=s.loaded.name)
    shape = PoolShape(s.spec.expand_topk, s.spec.depth, s.spec.max_nodes, args.K)
    prompts_digest = hashlib.sha256(Path(args.prompts).read_bytes()).hexdigest()[:16]
    fingerprint = {"model": s.loaded.source, "weights": s.loaded.weights, "seed": args.seed,
                   "prompts": prompts_digest, "ids": [p.question_id for p in prompts],
                   "max_new_tokens": args.max_new_tokens, "max_total_tokens": args.max_total_tokens,
                   "pool": s.spec.__dict__, "drafter": s.drafter.name, "slots": args.slots,
                   "dtype": str(model.dtype), "device": s.device.type}
    parts = PartsFolder(out, fingerprint)
    parts.open()
    records = [parts.done(i) for i in range(len(prompts))]
    todo = [i for i, r in enumerate(records) if r is None]
    resumed = len(prompts) - len(todo)
    eos = getattr(tok, "eos_token_id", None)
    with TokenProgress(len(todo) * args.max_new_tokens, f"record {out.name}", args.quiet) as bar, \
            oom_is_user_error():
        for i in todo:
            pr = prompts[i]
            rec = record_request(model, s.backend, s.drafter, tok.encode_prompt(pr.text),
                                 request_id=pr.question_id, dataset=pr.dataset,
                                 max_new_tokens=args.max_new_tokens, spec=s.spec, num_experts=N, eos=eos,
                                 max_total_tokens=args.max_total_tokens, progress=bar.advance)
            rec.output_text = tok.decode(rec.root_token)
            rec.save(parts.part(i))
            records[i] = rec
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
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": "hwprobe " + shlex.join(getattr(args, "argv", [])),
            "weights": s.loaded.weights, "drafter": s.drafter.name, "slots": args.slots,
            "tokenizer": getattr(tok, "name", "?"), "pool_expand_nodes": s.spec.expand_nodes,
            "dtype": str(model.dtype).replace("torch.", ""),
        },
        "geometry": geometry.to_dict(),
        "pool_shape": shape.to_dict(),
        "hardware": profile_dict(profile),
    }
    trace = assemble_trace(records, meta=meta)
    write_trace(trace, out)
    parts.remove()
    n_tok = int(trace.requests.output_len.sum())
    agree = float(trace.node_agree.mean()) if trace.num_nodes else 0.0
    summary = (f"wrote {out}: {len(records)} requests ({resumed} resumed), {n_tok} positions, "
               f"{trace.num_nodes} pool nodes, agreement {agree:.3f}, "
               f"copies/position {copies.mean():.1f}, weights: {s.loaded.weights}")
    return trace, summary
