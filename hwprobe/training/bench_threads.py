"""Wall and CPU time of one training step of the tiny target, one thread vs two, side by side.

    python -m hwprobe.training.bench_threads [--repeats 4] [--batch 8]

Alternates the thread counts step by step on the same model so that both see
the same machine load, and prints medians.  On a machine whose cores are
busy with other work, OpenMP threads waiting at barriers can make two threads
far slower than one; this measures whether that is the case here.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hwprobe.training.bench_threads", description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args(argv)
    import torch
    from transformers import Qwen3MoeForCausalLM

    from hwprobe.training.plans import PLANS, target_config

    plan = PLANS["tiny"]
    torch.manual_seed(0)
    model = Qwen3MoeForCausalLM(target_config(plan, 0))
    opt = torch.optim.AdamW(model.parameters(), 1e-4)
    x = torch.randint(0, plan.vocab_size, (args.batch, plan.seq_len))
    times: dict[int, list[tuple[float, float]]] = {1: [], 2: []}
    for _ in range(args.repeats):
        for threads in times:
            torch.set_num_threads(threads)
            w0, c0 = time.perf_counter(), time.process_time()
            out = model(input_ids=x, labels=x, output_router_logits=True)
            out.loss.backward()
            opt.step()
            opt.zero_grad()
            times[threads].append((time.perf_counter() - w0, time.process_time() - c0))
    for threads, rows in times.items():
        print(f"{threads} thread(s): median wall {statistics.median(r[0] for r in rows):.2f} s, "
              f"median CPU {statistics.median(r[1] for r in rows):.2f} s per step of "
              f"{args.batch}x{plan.seq_len} tokens ({args.repeats} steps)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
