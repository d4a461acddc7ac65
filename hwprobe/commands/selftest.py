"""`hwprobe selftest`: GPU self-check: bandwidth, offload equality, short record and calibrate.

On a GPU: a random-weight model with real Qwen3-30B-A3B layer shapes and few
layers (float32 for the equality check, bfloat16 for record and calibrate);
sized to finish in a few minutes.  On a CPU-only machine: the same steps with
the tiny random config, and it says so.  Prints one summary; exit status 3
if a check fails.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from hwprobe.data import SPEC_BENCH_QUESTIONS


def register(sub) -> None:
    p = sub.add_parser("selftest", help="GPU self-check: bandwidth, offload equality, short record and calibrate",
                       description=__doc__.split("\n\n", 1)[1])
    p.add_argument("--device", default="auto", help="auto, cuda, cuda:N or cpu")
    p.add_argument("--layers", type=int, default=2, help="layers of the Qwen3-30B-A3B-shaped model (GPU; default 2)")
    p.add_argument("--prompts", default=str(SPEC_BENCH_QUESTIONS),
                   help="Spec-Bench JSONL for the short record and calibrate (default: the shipped copy)")
    p.add_argument("--keep", metavar="DIR", help="keep the trace, profile and probe rows in DIR")
    p.set_defaults(func=run)


def run(args) -> int:
    import torch

    from hwprobe.cli import HwprobeError, main as hw_main
    from hwprobe.copysweep import STAND_IN, link_gbps, sweep
    from hwprobe.device import describe, pick_device
    from hwprobe.models import load_target
    from hwprobe.selfcheck import check_offload

    device = pick_device(args.device)
    gpu = device.type == "cuda"
    config = f"qwen3-30b-a3b-{args.layers}layers" if gpu else "tiny-random"
    if not Path(args.prompts).is_file():
        raise HwprobeError(f"prompts file {args.prompts!r} does not exist (give --prompts)")
    results: list[tuple[str, bool, str, float]] = []
    print(f"hwprobe selftest on {describe(device)}" + ("" if gpu else
          " -- no CUDA device: reduced CPU version (tiny random model, host memcpy stand-in)"), flush=True)

    def step(name, fn):
        t0 = time.perf_counter()
        try:
            ok, detail = fn()
        except HwprobeError as exc:
            ok, detail = False, f"error: {exc}"
        results.append((name, ok, detail, time.perf_counter() - t0))
        print(f"  {'ok  ' if ok else 'FAIL'} {name}: {detail} ({results[-1][3]:.1f} s)", flush=True)

    def bandwidth():
        expert = 3 * 2048 * 768 * 2 if gpu else 3 * 64 * 32 * 4
        rows = sweep(device, expert, in_flight=(1, 2, 4), repeats=5)
        link = link_gbps(rows)
        label = STAND_IN if rows[0].kind == STAND_IN else "host-to-device pinned"
        return link > 0, f"{link:.2f} GB/s ({label}); {expert / (link * 1e9) * 1e3:.3f} ms per {expert}-byte expert"

    def offload():
        lm = load_target(config=config, dtype=torch.float32, seed=1)
        prompt = list(range(3, 3 + (64 if gpu else 12)))
        slots = 16 if gpu else 3
        c = check_offload(lm.model, device, slots=slots, prompt=prompt, new_tokens=8)
        del lm
        if gpu:
            torch.cuda.empty_cache()
        return c.ok, (f"max |logit diff| {c.max_abs_diff:.2e}, argmax equal {c.same_argmax:.0%}, "
                      f"greedy tokens equal {c.tokens_equal}, copies {c.copies} vs LRU reference "
                      f"{c.reference_copies} ({slots} slots)")

    with tempfile.TemporaryDirectory(prefix="hwprobe-selftest-") as tmp:
        folder = Path(args.keep) if args.keep else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        trace_path, prof_path = folder / "selftest.parquet", folder / "selftest.toml"
        common = ["--config", config, "--device", str(device), "--prompts", args.prompts,
                  "--category", "math_reasoning", "--quiet"]

        def record():
            from simmoe.trace.io import read_trace
            rc = hw_main(["record", *common, "--limit", "2", "--max-new-tokens", "16" if gpu else "6",
                          "--slots", "48" if gpu else "4", "--out", str(trace_path)])
            if rc:
                return False, f"record exited {rc}"
            tr = read_trace(trace_path)
            detail = f"{tr.num_positions} positions, {tr.num_nodes} nodes, valid"
            try:
                from simmoe.replay.engine import ReplayConfig, replay
                hw = str(prof_path) if prof_path.exists() else "a100-pcie-40gb"
                replay(tr, ReplayConfig(selector="eagle3", slots=48 if gpu else 4, hardware=hw))
                detail += f"; replayed (eagle3) on {'the calibrated profile' if prof_path.exists() else hw}"
            except ImportError as exc:
                detail += f"; replay skipped ({exc})"
            return True, detail

        def calibrate():
            from simmoe.hardware.profile import load_profile
            rc = hw_main(["calibrate", *common, "--limit", "1", "--boundaries", "0,2", "--repeats", "1",
                          "--slots", "48" if gpu else "4", "--out", str(prof_path)])
            if rc:
                return False, f"calibrate exited {rc}"
            p = load_profile(prof_path)
            return True, (f"beta {p.cost_beta_cache:.4g} / {p.cost_beta_no_cache:.4g} ms (cache / none), "
                          f"copy {p.copy_ms:.4g} ms per expert")

        step("bandwidth", bandwidth)
        step("offload equality", offload)
        step("calibrate", calibrate)
        step("record", record)
    failed = [r for r in results if not r[1]]
    total = sum(r[3] for r in results)
    print(f"selftest {'PASSED' if not failed else 'FAILED'}: {len(results) - len(failed)}/{len(results)} checks "
          f"in {total:.0f} s on {'GPU' if gpu else 'CPU (reduced)'}")
    return 3 if failed else 0
