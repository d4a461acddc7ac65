"""`simmoe models --gpus`'s CPU table and `simmoe models --formats` (docs/models-and-gpus.md)."""

from __future__ import annotations

import json

# two-line headers so that the default table fits 100 columns; the unit is in the title
ISA_COLUMNS = (("avx2", "AVX2\nFP32"), ("avx512", "AVX-512\nFP32"), ("avx512_bf16", "AVX-512\nBF16"),
               ("avx512_vnni", "VNNI\nINT8"), ("amx_bf16", "AMX\nBF16"), ("amx_int8", "AMX\nINT8"))


def _peak(x: float) -> str:
    return f"{x / 1e3:.1f}" if x else "–"


def cpu_table(cpus, *, wide: bool = False):
    """Each CPU: sockets × cores, NUMA nodes, memory per socket, the DRAM bandwidth and ISA peaks computed."""
    from rich import box
    from rich.table import Table

    t = Table(title="CPU descriptions (simmoe/hardware/data/cpus.toml): DRAM GB/s = channels × MT/s × 8 B × "
                    "sockets; ISA peaks in TFLOP/s (INT8: TOP/s) = cores × base clock × ops per cycle"
                    + ("" if wide else "; --wide adds names and memory types"),
              box=box.SIMPLE_HEAD, title_justify="left", collapse_padding=True)
    cols = ["cpu"] + (["name", "core"] if wide else []) + ["sockets\n× cores", "NUMA", "channels\n× MT/s",
                                                           "DRAM\nGB/s"] + [c for _, c in ISA_COLUMNS]
    for col in cols:
        t.add_column(col, justify="left" if col in ("cpu", "name", "core") else "right", no_wrap=True)
    for k, c in cpus.items():
        named = [c.name, c.core.key] if wide else []
        memory = f"{c.memory_channels}×{c.memory + '-' if wide else ''}{c.memory_mts:g}"
        t.add_row(k, *named, f"{c.sockets}×{c.cores}", str(c.numa_nodes), memory, f"{c.dram_gbps:.1f}",
                  *(_peak(c.isa_peak(isa)) for isa, _ in ISA_COLUMNS))
    return t


def show_formats(console, name: str | None, *, as_json: bool) -> int:
    """``--formats``: every expert weight format, its types and bits per weight; with NAME, its expert's bytes."""
    from simmoe.hardware.catalogue import expert_bytes_by_layer, load_formats, load_model

    formats = load_formats()
    model = load_model(name) if name is not None else None
    rows = {}
    for k, f in formats.items():
        row = {"name": f.name, "gate_up": f.gate_up.key, "down": f.down.key,
               "down_more_bits": f.down_more_bits.key if f.down_more_bits else None,
               "gate_up_bits_per_weight": f.gate_up.bits_per_weight, "down_bits_per_weight": f.down.bits_per_weight,
               "down_more_bits_bits_per_weight": f.down_more_bits.bits_per_weight if f.down_more_bits else None,
               "source": f.source}
        if model is not None:
            per_layer = expert_bytes_by_layer(model, f)
            row["expert_bytes_by_layer"] = list(per_layer)
            row["expert_bytes_mean"] = sum(per_layer) / len(per_layer)
        rows[k] = row
    if as_json:
        print(json.dumps({"model": model.key if model else None, "formats": rows}, indent=2))
        return 0
    console.print(_format_table(rows, model))
    console.print("bits per weight from each type's block layout (formats.toml: ggml-common.h's structs); "
                  "_M mixes store the down projection of llama.cpp's use_more_bits layers wider; a GGUF row "
                  "that is not a multiple of the block falls back (Q4_K → Q5_0)", soft_wrap=True)
    return 0


def _format_table(rows: dict, model):
    from rich import box
    from rich.table import Table

    title = "expert weight formats (simmoe/hardware/data/formats.toml)"
    if model is not None:
        title += f"; one expert of {model.key} ({model.expert_params:,} weights)"
    t = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    cols = ["format", "name", "gate, up", "down", "bits/weight"] + (["expert MB\nmean", "min–max"] if model else [])
    for col in cols:
        t.add_column(col, justify="left" if col in ("format", "name", "gate, up", "down") else "right",
                     no_wrap=True)
    for k, r in rows.items():
        down = r["down"] + (f" / {r['down_more_bits']}" if r["down_more_bits"] else "")
        kinds = [r["gate_up_bits_per_weight"], r["down_bits_per_weight"], r["down_more_bits_bits_per_weight"]]
        bits = " / ".join(f"{b:g}" for i, b in enumerate(kinds) if b is not None and b not in kinds[:i])
        cells = [k, r["name"], r["gate_up"], down, bits]
        if model is not None:
            per = r["expert_bytes_by_layer"]
            spread = f"{min(per) / 1e6:.2f}–{max(per) / 1e6:.2f}" if min(per) != max(per) else "–"
            cells += [f"{r['expert_bytes_mean'] / 1e6:.2f}", spread]
        t.add_row(*cells)
    return t
