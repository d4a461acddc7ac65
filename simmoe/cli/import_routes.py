"""`simmoe import-routes`: turn routing logs of other tools into an autoregressive trace."""

from __future__ import annotations

import sys
from pathlib import Path

from simmoe.errors import SimmoeError

# = simmoe.trace.importer.FORMAT_NAMES, kept here so that `simmoe --help` does not load pyarrow
# (a test checks that they agree).
FORMAT_NAMES = ("jsonl", "csv", "parquet", "npy", "npz", "safetensors",
                "warp", "vllm", "megatron", "llama-moe-trace", "llama-csv", "flame")


def register(sub) -> None:
    p = sub.add_parser(
        "import-routes",
        help="Turn routing logs of other tools into an autoregressive trace",
        description="Read a routing log -- long format, one record per request, token and layer "
        "with the chosen experts (JSON lines, CSV or parquet), or dense [tokens, MoE layers, "
        "top-k] arrays (.npy, .npz, .safetensors, or a parquet column of [layers][top-k] lists), "
        "or a tool's log (sqliteai/warp, vLLM's routed experts, llama.cpp's moe-trace and "
        "layer_id,expert_ids CSV, Megatron-core's routing trace, FLAME-MoE-Traces), told from "
        "the file where unambiguous -- and "
        "write an autoregressive-only trace (empty pools) for cache studies. Missing (token, "
        "layer) cells are counted and either fail the import or drop the incomplete tokens; "
        "they are never filled in. See docs/importing-routes.md.",
    )
    p.add_argument(
        "file",
        metavar="FILE",
        help="routing log (.jsonl, .json, .csv, .parquet) or routing arrays (.npy, .npz, "
        ".safetensors); a folder of FLAME-MoE-Traces layer_NN.parquet files or of vLLM "
        "per-request array files",
    )
    p.add_argument("--out", required=True, metavar="TRACE", help="trace file to write (.parquet)")
    p.add_argument(
        "--format", choices=list(FORMAT_NAMES),
        help="input format: a container read generically, or a tool's layout (default: the "
        "file name's container, a tool's layout when the content shows it)"
    )
    p.add_argument(
        "--request-col",
        default="request_id",
        help="request column or array (default request_id; optional for arrays)",
    )
    p.add_argument(
        "--token-col",
        default="token_idx",
        help="token index column or array (default token_idx; optional for arrays)",
    )
    p.add_argument(
        "--layer-col", default="layer", help="layer column of a long-format log (default layer)"
    )
    p.add_argument(
        "--experts-col", default="experts", help="chosen experts column or array (default experts)"
    )
    p.add_argument("--token-id-col", help="optional column or array with the token's vocabulary id")
    p.add_argument(
        "--prefill-col",
        metavar="PHASE_COL",
        help="optional column or array with the phase: true/1/prompt/prefill for prompt tokens "
        "(their experts form the prefill union), false/0/output/decode for output tokens",
    )
    p.add_argument(
        "--num-layers", type=int, help="L (default: largest layer + 1, or the arrays' layers)"
    )
    p.add_argument(
        "--num-experts", type=int, help="N (default: largest expert id + 1, a lower bound)"
    )
    p.add_argument("--top-k", type=int, help="experts per token (default: from the records)")
    p.add_argument(
        "--expert-bytes",
        type=int,
        default=0,
        help="bytes of one expert's weights (default 0: unknown)",
    )
    p.add_argument("--model", metavar="NAME",
                   help="the catalogued model that wrote the log (simmoe models): its MoE layers, experts, "
                        "top-k and expert bytes are the trace's geometry, a log that disagrees is refused, and "
                        "the trace names the model (so replay's default profile follows it)")
    p.add_argument("--model-name", default="", help="model name stored in the trace (without --model)")
    p.add_argument(
        "--dataset", default="imported", help="dataset name for every request (default imported)"
    )
    p.add_argument(
        "--on-gap",
        choices=["fail", "drop"],
        default="fail",
        help="missing (token, layer) cells: fail (default) or drop the incomplete tokens",
    )
    p.set_defaults(func=run)


def check_out(out: str) -> Path:
    """The output path, refused before any work if it cannot become a trace file."""
    path = Path(out)
    if path.is_dir():
        raise SimmoeError(f"--out {out} is a folder; give a trace file name ending in .parquet")
    if path.suffix.lower() != ".parquet":
        raise SimmoeError(f"--out {out}: a trace is a parquet file; give a name ending in .parquet")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise SimmoeError(f"--out {out}: folder {folder} does not exist")
    return path


def model_geometry(args):
    """``(geometry keywords of import_routes, catalogue model or None)`` from the flags.

    With ``--model`` the catalogue gives every field; a flag that disagrees
    with it is refused.
    """
    given = {"num_layers": args.num_layers, "num_experts": args.num_experts, "top_k": args.top_k,
             "expert_bytes": args.expert_bytes or None}
    if args.model is None:
        return {**given, "expert_bytes": args.expert_bytes, "model_name": args.model_name}, None
    from simmoe.hardware.catalogue import load_model

    spec = load_model(args.model)
    if spec.dense:
        raise SimmoeError(f"--model {args.model}: {spec.name} is a dense model; it routes no experts")
    if args.model_name:
        raise SimmoeError("--model names the model already; leave out --model-name")
    want = {"num_layers": len(spec.moe_layers), "num_experts": spec.num_experts, "top_k": spec.top_k,
            "expert_bytes": spec.expert_bytes}
    for key, value in given.items():
        if value is not None and value != want[key]:
            raise SimmoeError(f"--{key.replace('_', '-')} {value} disagrees with --model {spec.key} "
                              f"({want[key]}); leave it out")
    return {**want, "model_name": spec.name, "moe_layers": spec.moe_layers,
            "decoder_layers": spec.decoder_layers}, spec


def run(args) -> int:
    from simmoe.atomicio import check_outputs
    from simmoe.trace.importer import MAX_EXPERTS, MAX_LAYERS, RouteColumns, import_routes
    from simmoe.trace.importer_common import GeometryMismatch
    from simmoe.trace.io import write_trace

    for flag, limit in (
        ("num_layers", MAX_LAYERS),
        ("num_experts", MAX_EXPERTS),
        ("top_k", MAX_EXPERTS),
    ):
        v = getattr(args, flag)
        if v is not None and not 1 <= v <= limit:
            raise SimmoeError(f"--{flag.replace('_', '-')} must be in [1, {limit}], got {v}")
    if args.expert_bytes < 0:
        raise SimmoeError(f"--expert-bytes must not be negative, got {args.expert_bytes}")
    out = check_out(args.out)
    check_outputs([("--out", args.out)], inputs=(args.file,))
    geometry, spec = model_geometry(args)
    columns = RouteColumns(
        request=args.request_col,
        token=args.token_col,
        layer=args.layer_col,
        experts=args.experts_col,
        token_id=args.token_id_col,
        prefill=args.prefill_col,
    )
    try:
        trace, report = import_routes(args.file, fmt=args.format, columns=columns, dataset=args.dataset,
                                      on_gap=args.on_gap, **geometry)
    except GeometryMismatch as exc:  # only a disagreement with the geometry is the model's business
        if spec is None:
            raise
        raise SimmoeError(f"the log disagrees with {spec.name}'s geometry ({geometry['num_layers']} MoE layers x "
                          f"{spec.num_experts} experts, top-{spec.top_k}): {exc}") from None
    write_trace(trace, out)  # atomic: nothing is left under OUT if it fails
    g = trace.geometry
    rows = "records" if report.layout == "records" else "token rows"
    print(
        f"imported {report.records:,} {rows} from {args.file}: {report.requests} requests, "
        f"{report.positions:,} tokens; L={g.num_layers}, N={g.num_experts}, top-{g.top_k} "
        f"-> {args.out}"
    )
    for note in report.inferred:
        print(f"  inferred {note}")
    for note in report.notes:
        print(f"  {report.format}: {note}")
    if report.prefill_missing_cells:
        print(
            f"  {report.prefill_missing_cells:,} (token, layer) cells of prompt tokens had no "
            f"routes: left out of the prefill union",
            file=sys.stderr,
        )
    if report.missing_cells:
        print(
            f"  {report.missing_cells:,} (token, layer) cells had no routes: "
            f"dropped {report.dropped_tokens:,} incomplete tokens"
            + (
                f" and {len(report.dropped_requests)} requests left empty"
                if report.dropped_requests
                else ""
            ),
            file=sys.stderr,
        )
    return 0
