"""`simmoe models`: the model catalogue and the GPU descriptions (docs/models-and-gpus.md).

``simmoe models`` lists every catalogued model with its geometry and the
quantities the cost model derives from it; ``simmoe models NAME`` shows one
model's fields with their source; ``--gpus`` lists the GPU descriptions, host
links and CPU descriptions (DRAM bandwidth and ISA peaks computed from them);
``--formats`` lists the expert weight formats (with a model NAME: its expert's
bytes in each); ``--json`` prints the same as JSON.
"""

from __future__ import annotations

import json

from simmoe.errors import SimmoeError


def register(sub) -> None:
    p = sub.add_parser(
        "models",
        help="List the model catalogue (geometries with sources) and the GPU descriptions",
        description="The catalogue of model geometries (simmoe/hardware/data/models.toml: every number "
                    "from the model's published config.json, with its source), the GPU and CPU descriptions "
                    "(gpus.toml, cpus.toml: datasheet numbers, each cited) and the expert weight formats "
                    "(formats.toml: block layouts). Expert bytes, dense bytes, KV bytes per token, DRAM "
                    "bandwidth and ISA peaks are computed from these fields.",
    )
    p.add_argument("name", nargs="?", help="show one model (catalogue key, name or Hugging Face id) or a "
                                           ".toml geometry file")
    p.add_argument("--gpus", action="store_true",
                   help="list the GPU descriptions, host links and CPU descriptions")
    p.add_argument("--formats", action="store_true",
                   help="list the expert weight formats (with a model NAME: its expert's bytes in each)")
    p.add_argument("--wide", action="store_true",
                   help="every field (the default table fits 100 columns: names, attention and sources left out)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from simmoe.cli.console import make_console
    from simmoe.hardware.catalogue import load_model, load_models

    # a file or a pipe: 100 columns, or the tables' natural width with --wide
    console = make_console(width=None if args.wide else 100)
    if args.wide and not console.is_terminal:
        console = make_console(width=250)
    if args.gpus and args.formats:
        raise SimmoeError("--gpus and --formats list different things; give one of them")
    if args.gpus:
        if args.name is not None:
            raise SimmoeError(f"--gpus lists every GPU, link and CPU; a model name ({args.name!r}) has no place there")
        return _hardware(console, wide=args.wide, as_json=args.json)
    if args.formats:
        from simmoe.cli.models_formats import show_formats

        return show_formats(console, args.name, as_json=args.json)
    if args.name is not None:       # '' is a name too: refused, not read as "list them all"
        m = load_model(args.name)
        if args.json:
            print(json.dumps({**m.to_dict(), "derived": m.derived()}, indent=2))
            return 0
        for k, v in {**m.to_dict(), **m.derived()}.items():
            if v in ((), [], 0, "none", False) and k not in ("first_dense_layers", "num_experts", "top_k"):
                continue
            flag = "  (unverified)" if k in m.unverified else ""
            console.print(f"{k:>22}  {v}{flag}", soft_wrap=True)
        return 0
    models = load_models()
    if args.json:
        print(json.dumps({k: {**m.to_dict(), "derived": m.derived()} for k, m in models.items()}, indent=2))
        return 0
    console.print(_model_table(models, wide=args.wide))
    console.print("* unverified fields (see `simmoe models NAME`); sizes at the checkpoint's dtype; "
                  "a dense model is one expert per layer, top-1"
                  + ("" if args.wide else "; --wide adds the name, shared expert, hidden size and attention"))
    console.print(_footnotes(models))
    return 0


WIDE_ONLY = ("name", "shared", "hidden", "attention")   # the model table's columns shown with --wide only


def _model_table(models, *, wide: bool = False):
    from rich import box
    from rich.table import Table

    # headers over two lines, so that the default table fits 100 columns
    cols = ("model", "name", "layers\n(MoE)", "experts", "top-k", "shared", "hidden", "attention",
            "expert\nMB", "dense\nGB", "KV KB\n/token", "params\nB", "active\nB", "dtype")
    keep = [c for c in cols if wide or c not in WIDE_ONLY]
    t = Table(title="model catalogue (simmoe/hardware/data/models.toml)", box=box.SIMPLE_HEAD,
              title_justify="left", collapse_padding=True)
    for col in keep:
        t.add_column(col, justify="left" if col in ("model", "name", "attention", "dtype") else "right",
                     no_wrap=True)
    for k, m in models.items():
        d = m.derived()
        attn = (f"MLA r{m.kv_lora_rank}" if m.attention == "mla"
                else f"{m.num_attention_heads}/{m.num_key_value_heads}x{m.head_dim}")
        if m.sliding_window:
            attn += f", window {m.sliding_window}"
        cells = dict(zip(cols, (
            k + ("*" if m.unverified else ""), m.name, f"{m.decoder_layers} ({d['moe_layers']})",
            str(m.num_experts) if not m.dense else "dense", str(m.top_k) if not m.dense else "–",
            f"{m.shared_intermediate}" if m.shared_intermediate else "–", str(m.hidden_size), attn,
            f"{m.expert_bytes / 1e6:.2f}", f"{m.dense_bytes / 1e9:.2f}",
            f"{m.kv_bytes_per_token / 1e3:.1f}", f"{d['total_params_b']:.1f}",
            f"{d['active_params_b']:.2f}" + ("†" if m.card_active_counts == "no-input-embedding" else ""),
            m.expert_dtype if m.expert_dtype == m.dtype else f"{m.dtype}/{m.expert_dtype}"), strict=True))
        t.add_row(*(cells[c] for c in keep))
    return t


def _footnotes(models) -> str:
    """What the KV and active-parameter columns count, with the numbers that need it."""
    window = [m for m in models.values() if m.sliding_window]
    held = ", ".join(f"{m.key}: at most {m.kv_window_bytes / 1e6:.1f} MB per sequence" for m in window)
    kv = (f"KV KB/token: bytes each further context token adds; sliding-window layers hold at most their "
          f"window ({held})") if window else ""
    cards = ", ".join(f"{m.key} {m.card_active_params_b:g}" for m in models.values()
                      if m.card_active_params_b and m.card_active_counts == "no-input-embedding")
    active = ("active B: weights one token reads, counted as the model card counts: input embedding and LM head "
              "included; † LM head included, input embedding not" + (f" (cards: {cards})" if cards else ""))
    return "\n".join(x for x in (kv, active) if x)


def _hardware(console, *, wide: bool, as_json: bool) -> int:
    """``--gpus``: the GPUs, the host links and the CPUs."""
    from simmoe.cli.models_formats import cpu_table
    from simmoe.hardware.catalogue import load_cpus, load_gpus, load_links

    gpus, links, cpus = load_gpus(), load_links(), load_cpus()
    if as_json:
        print(json.dumps({"gpus": {k: vars(g) for k, g in gpus.items()},
                          "links": {k: vars(v) for k, v in links.items()},
                          "cpus": {k: c.to_dict() for k, c in cpus.items()}}, indent=2, default=list))
        return 0
    console.print(_gpu_table(gpus, wide=wide))
    console.print(_link_table(links))
    console.print(cpu_table(cpus, wide=wide))
    return 0


def _gpu_table(gpus, *, wide: bool = False):
    from rich import box
    from rich.table import Table

    cols = ("gpu", "name", "HBM\nGB/s", "memory\nGB", "BF16\nTFLOP/s", "FP8\nTFLOP/s", "interconnect",
            "GB/s\n/dir", "host link")
    keep = [c for c in cols if wide or c not in ("name", "interconnect")]
    t = Table(title="GPU descriptions (simmoe/hardware/data/gpus.toml; datasheet peaks)"
              + ("" if wide else "; --wide adds names and interconnects"), box=box.SIMPLE_HEAD,
              title_justify="left")
    for col in keep:
        t.add_column(col, justify="left" if col in ("gpu", "name", "interconnect", "host link") else "right",
                     no_wrap=True)
    for k, g in gpus.items():
        cells = dict(zip(cols, (k, g.name, f"{g.hbm_gbps:,.0f}", f"{g.memory_gb:g}", f"{g.bf16_tflops:g}",
                                f"{g.fp8_tflops:g}" if g.fp8_tflops else "–", g.interconnect,
                                f"{g.interconnect_gbps:g}", g.host_link), strict=True))
        t.add_row(*(cells[c] for c in keep))
    return t


def _link_table(links):
    from rich import box
    from rich.table import Table

    t = Table(title="host links (offload regime)", box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("link", "name", "GB/s", "source"):
        t.add_column(col)
    for k, v in links.items():
        t.add_row(k, v.name, f"{v.gbps:g}", v.source)
    return t
