"""`hwprobe info`: show the device, link, torch and model facts the probe sees."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("info", help="Show the device, link, torch and model facts the probe sees")
    p.add_argument("--device", default="auto", help="auto, cuda, cuda:N or cpu")
    p.add_argument("--model", metavar="DIR|tiny", help="also describe this model directory")
    p.set_defaults(func=run)


def run(args) -> int:
    import platform

    import torch
    import transformers

    from hwprobe.copysweep import STAND_IN, link_gbps, sweep
    from hwprobe.device import describe, pick_device

    device = pick_device(args.device)
    print(f"python        {platform.python_version()}")
    print(f"torch         {torch.__version__} (CUDA build: {torch.version.cuda or 'none'})")
    print(f"transformers  {transformers.__version__}")
    print(f"device        {describe(device)}")
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        props = torch.cuda.get_device_properties(device)
        print(f"memory        {free / 2**30:.1f} GiB free of {total / 2**30:.1f} GiB; "
              f"compute capability {props.major}.{props.minor}; {props.multi_processor_count} SMs")
    else:
        import os
        print(f"memory        no device; {os.cpu_count()} CPU cores")
    rows = sweep(device, 9437184, factors=(1.0,), in_flight=(1,), repeats=5, warmup=1)
    label = "host memcpy stand-in (no device)" if rows[0].kind == STAND_IN else "host-to-device, pinned"
    print(f"link          {link_gbps(rows):.2f} GB/s ({label}, one 9,437,184-byte copy)")
    if args.model:
        import json

        from hwprobe.models import read_model_type, resolve_model_dir
        path = resolve_model_dir(args.model)
        cfg = json.loads((path / "config.json").read_text())
        # transformers 5 saves the expert count as num_local_experts
        cfg.setdefault("num_experts", cfg.get("num_local_experts"))
        keys = ("model_type", "num_hidden_layers", "hidden_size", "num_experts", "num_experts_per_tok",
                "moe_intermediate_size", "vocab_size")
        print(f"model         {path} ({read_model_type(path)})")
        print("              " + ", ".join(f"{k}={cfg.get(k)}" for k in keys[1:]))
    return 0
