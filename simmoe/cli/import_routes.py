"""`simmoe import-routes`: turn routing logs of other tools into an autoregressive trace."""

from __future__ import annotations

import sys

from simmoe.errors import SimmoeError


def register(sub) -> None:
    p = sub.add_parser(
        "import-routes", help="Turn routing logs of other tools into an autoregressive trace",
        description="Read a long-format routing log (one record per request, token and layer with the "
                    "chosen experts; JSON lines, CSV or parquet) and write an autoregressive-only trace "
                    "(empty pools) for cache studies. Missing (token, layer) cells are counted and either "
                    "fail the import or drop the incomplete tokens; they are never filled in.")
    p.add_argument("file", metavar="FILE", help="routing log (.jsonl, .csv or .parquet)")
    p.add_argument("--out", required=True, metavar="TRACE", help="trace file to write (.parquet)")
    p.add_argument("--format", choices=["jsonl", "csv", "parquet"], help="input format (default: from the file name)")
    p.add_argument("--request-col", default="request_id", help="request column (default request_id)")
    p.add_argument("--token-col", default="token_idx", help="token index column (default token_idx)")
    p.add_argument("--layer-col", default="layer", help="layer column (default layer)")
    p.add_argument("--experts-col", default="experts", help="chosen experts column (default experts)")
    p.add_argument("--token-id-col", help="optional column with the token's vocabulary id")
    p.add_argument("--prefill-col", help="optional boolean column marking prompt records (their experts "
                                         "form the prefill union)")
    p.add_argument("--num-layers", type=int, help="L (default: largest layer + 1)")
    p.add_argument("--num-experts", type=int, help="N (default: largest expert id + 1, a lower bound)")
    p.add_argument("--top-k", type=int, help="experts per token (default: from the records)")
    p.add_argument("--expert-bytes", type=int, default=0, help="bytes of one expert's weights (default 0: unknown)")
    p.add_argument("--model-name", default="", help="model name stored in the trace")
    p.add_argument("--dataset", default="imported", help="dataset name for every request (default imported)")
    p.add_argument("--on-gap", choices=["fail", "drop"], default="fail",
                   help="missing (token, layer) cells: fail (default) or drop the incomplete tokens")
    p.set_defaults(func=run)


def run(args) -> int:
    from simmoe.trace.importer import RouteColumns, import_routes
    from simmoe.trace.io import write_trace

    for flag in ("num_layers", "num_experts", "top_k"):
        v = getattr(args, flag)
        if v is not None and v < 1:
            raise SimmoeError(f"--{flag.replace('_', '-')} must be at least 1, got {v}")
    if args.expert_bytes < 0:
        raise SimmoeError(f"--expert-bytes must not be negative, got {args.expert_bytes}")
    columns = RouteColumns(request=args.request_col, token=args.token_col, layer=args.layer_col,
                           experts=args.experts_col, token_id=args.token_id_col, prefill=args.prefill_col)
    trace, report = import_routes(
        args.file, fmt=args.format, columns=columns, num_layers=args.num_layers, num_experts=args.num_experts,
        top_k=args.top_k, expert_bytes=args.expert_bytes, model_name=args.model_name, dataset=args.dataset,
        on_gap=args.on_gap)
    write_trace(trace, args.out)
    g = trace.geometry
    print(f"imported {report.records:,} records from {args.file}: {report.requests} requests, "
          f"{report.positions:,} tokens; L={g.num_layers}, N={g.num_experts}, top-{g.top_k} -> {args.out}")
    for note in report.inferred:
        print(f"  inferred {note}")
    if report.missing_cells:
        print(f"  {report.missing_cells:,} (token, layer) cells had no record: dropped {report.dropped_tokens:,} "
              f"incomplete tokens" + (f" and {len(report.dropped_requests)} requests left empty"
                                      if report.dropped_requests else ""), file=sys.stderr)
    return 0
