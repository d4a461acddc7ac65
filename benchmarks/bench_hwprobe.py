"""Overhead of the offload backend and speed of ``hwprobe record`` (random weights: timings only).

Measures, alternating the variants in one run so that their ratio is fair on
a shared machine: the median time of a 19-token tree forward (root + an
18-node pool) over a 64-token prefix, for the unmodified model and the
offloaded one at several slot counts; and positions per second of the
recording loop (pool + full-pool forward per output token).

The offload backend of git HEAD (``--baseline REV``, default HEAD; Qwen3-MoE
only: it replaced ``Qwen3MoeExperts`` modules) is loaded from git and timed
side by side with the working tree's, so the ratio of their CPU overheads
is measured in one run.

    python benchmarks/bench_hwprobe.py                      # tiny-random on the CPU
    python benchmarks/bench_hwprobe.py --config qwen3-30b-a3b-2layers --device cuda --repeat 20
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="tiny-random")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--slots", default="0,4,8")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--baseline", default="HEAD", help="git revision whose hwprobe/offload.py is timed too "
                    "('' to skip)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from hwprobe.device import describe, pick_device, synchronize
    from hwprobe.drafters.random_draft import RandomDrafter
    from hwprobe.models import load_target
    from hwprobe.offload import install_offload
    from hwprobe.pool import build_pool
    from hwprobe.recorder import record_request
    from hwprobe.tree import crop_cache, lm_forward, new_cache, tree_forward

    device = pick_device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    base = load_target(config=args.config, dtype=dtype).model
    vocab = base.config.vocab_size
    variants = {"unmodified": copy.deepcopy(base).to(device)}
    backends = {}
    baseline = _baseline_backend(args.baseline) if args.baseline else None
    for s in [int(x) for x in args.slots.split(",")]:
        m = copy.deepcopy(base)
        backends[s] = install_offload(m, slots=s, device=device)
        variants[f"offload slots={s}"] = m
        if baseline is not None:
            b = copy.deepcopy(base)
            baseline.install_offload(b, slots=s, device=device)
            variants[f"{args.baseline} slots={s}"] = b
    prefix = [3 + (i * 7) % (vocab - 3) for i in range(64)]
    pool = build_pool(RandomDrafter(vocab, seed=1), prefix + [5])
    caches = {}
    for name, m in variants.items():
        c = new_cache(m)
        lm_forward(m, torch.tensor([prefix], device=device), c)
        caches[name] = c
    times = {name: [] for name in variants}
    for _ in range(args.repeat):
        for name, m in variants.items():             # alternate: same machine state for every variant
            synchronize(device)
            t0 = time.perf_counter()
            tree_forward(m, caches[name], 5, pool)
            synchronize(device)
            times[name].append((time.perf_counter() - t0) * 1e3)
            crop_cache(caches[name], len(prefix))
    print(f"{args.config} on {describe(device)}; tree forward of 1 + {len(pool)} tokens over {len(prefix)}")
    ref = statistics.median(times["unmodified"])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:20s} median {med:8.2f} ms   x{med / ref:5.2f} of unmodified")
    if baseline is not None:
        for s in backends:
            new_ms = statistics.median(times[f"offload slots={s}"]) - ref
            old_ms = statistics.median(times[f"{args.baseline} slots={s}"]) - ref
            print(f"  overhead over unmodified, slots={s}: this tree {new_ms:.2f} ms, {args.baseline} {old_ms:.2f} ms "
                  f"(ratio {new_ms / old_ms if old_ms > 0 else float('nan'):.2f})")
    s = max(backends)
    m = variants[f"offload slots={s}"]
    n_pos = 16
    t0 = time.perf_counter()
    record_request(m, backends[s], RandomDrafter(vocab), prefix, request_id="bench", dataset="bench",
                   max_new_tokens=n_pos, spec=build_pool.__defaults__[0], num_experts=base.config.num_experts)
    dt = time.perf_counter() - t0
    print(f"  record loop (slots={s}): {n_pos / dt:.1f} positions/s ({n_pos} positions, 18-node pools)")


def _baseline_backend(rev: str):
    """hwprobe/offload.py of git revision ``rev`` as a module (its Qwen3-MoE block discovery supplied here)."""
    import subprocess
    import types
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    src = subprocess.run(["git", "show", f"{rev}:hwprobe/offload.py"], cwd=root, capture_output=True, text=True,
                         check=True).stdout
    src = src.replace("from hwprobe.models import moe_blocks", "moe_blocks = _qwen3_moe_blocks")
    import sys

    mod = types.ModuleType(f"offload_{rev}")
    sys.modules[mod.__name__] = mod                   # dataclasses look their module up

    def _qwen3_moe_blocks(model):
        return [(i, layer.mlp) for i, layer in enumerate(model.model.layers) if hasattr(layer.mlp, "gate")]
    mod.__dict__["_qwen3_moe_blocks"] = _qwen3_moe_blocks
    exec(compile(src, f"{rev}:hwprobe/offload.py", "exec"), mod.__dict__)
    return mod


if __name__ == "__main__":
    main()
