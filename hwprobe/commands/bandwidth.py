"""`hwprobe bandwidth`: host-to-device copy sweep around one expert's size (GB/s)."""

from __future__ import annotations

QWEN3_30B_A3B_EXPERT_BYTES = 3 * 2048 * 768 * 2   # bf16: 9,437,184 B


def register(sub) -> None:
    p = sub.add_parser("bandwidth", help="Host-to-device copy sweep around one expert's size (GB/s)",
                       description="Copy sizes around one expert (x0.25 .. x4), pinned and pageable host "
                       "memory, 1-4 copies in flight (one stream each); median of repeats.  Without a CUDA "
                       "device it times a host memcpy as a labelled stand-in.")
    p.add_argument("--device", default="auto", help="auto, cuda, cuda:N or cpu")
    p.add_argument("--expert-bytes", type=int, default=QWEN3_30B_A3B_EXPERT_BYTES,
                   help=f"size of one expert (default {QWEN3_30B_A3B_EXPERT_BYTES}: Qwen3-30B-A3B in bf16)")
    p.add_argument("--repeats", type=int, default=10, help="rounds per point (default 10)")
    p.add_argument("--max-inflight", type=int, default=4, help="largest number of copies in flight (default 4)")
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    import json

    from hwprobe.atomic import write_text_atomic
    from hwprobe.cli import HwprobeError
    from hwprobe.copysweep import STAND_IN, link_gbps, sweep
    from hwprobe.device import describe, pick_device
    from simmoe.atomicio import check_outputs

    if args.expert_bytes < 1 or args.repeats < 1 or not 1 <= args.max_inflight <= 16:
        raise HwprobeError("--expert-bytes and --repeats must be >= 1, --max-inflight in 1..16")
    check_outputs([("--json", args.json)])        # before the sweep, not after it
    device = pick_device(args.device)
    rows = sweep(device, args.expert_bytes, in_flight=tuple(range(1, args.max_inflight + 1)), repeats=args.repeats)
    print(f"device: {describe(device)}")
    if rows[0].kind == STAND_IN:
        print("no CUDA device: timing a host memcpy as a stand-in for the link (not a host-to-device figure)")
    print(f"{'bytes':>12} {'memory':>9} {'in flight':>9} {'ms/round':>10} {'GB/s':>8}")
    for r in rows:
        mem = "pinned" if r.pinned else "pageable"
        print(f"{r.bytes:>12} {mem:>9} {r.in_flight:>9} {r.median_ms:>10.4f} {r.gbps:>8.2f}")
    link = link_gbps(rows)
    per_expert = args.expert_bytes / (link * 1e9) * 1e3 if link else float("nan")
    label = "host memcpy stand-in" if rows[0].kind == STAND_IN else "link (pinned, best median)"
    print(f"{label}: {link:.2f} GB/s = {per_expert:.3f} ms per {args.expert_bytes}-byte expert")
    if args.json:
        write_text_atomic(args.json, json.dumps({"device": describe(device), "link_gbps": link,
                                                 "rows": [r.as_dict() for r in rows]}, indent=1))
    return 0
