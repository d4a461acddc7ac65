"""The simulator's Lookahead against the live lookahead on the same prompts (docs/closed-loop.md).

``python -m hwprobe.lookahead_check [--model tiny] [--limit 4] [--max-new-tokens 48] ...``

1. **live**: greedy speculative decoding of each prompt on the target with
   :class:`~hwprobe.drafters.ngram.LookaheadDrafter` (``branches`` n-gram
   branches of ``branch_length`` tokens from the request's own context),
   the ``draft_tokens`` nodes of highest path probability verified per
   cycle; the output is checked equal to plain greedy decoding.  Cycles as
   the replay walks a request (one at the final position when the cursor
   lands there, as ``hwprobe live`` runs it); Mat = 1 + accepted per cycle,
   the accepted tokens capped at the positions left in the output (a
   synthetic pool never reaches past its request's end).
2. **text**: on the committed text, at *every* output position (not only
   where the live run drafted), the branches the drafter retrieves are
   compared with the text that follows (:func:`text_counts`);
3. **simulated**: :func:`simmoe.validation.lookahead.simulate_mat` sets the
   simulator's ``hit``, ``spread`` and ``follow`` from those counts and
   replays synthetic traces of requests of the same output lengths.

Mat reads neither the expert cache nor a clock, so the live run uses the
model as loaded, without the offloaded backend and the timers of
``hwprobe live``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field

from simmoe.validation.lookahead import WORKLOADS, Simulated, TextCounts, simulate_mat


@dataclass
class LiveLookahead:
    """One request of the live run: its tokens and every cycle's (position, accepted)."""

    request_id: str
    prompt: list[int]
    output: list[int]
    cycles: list[tuple[int, int]] = field(default_factory=list)

    def accepted_capped(self) -> list[int]:
        n = len(self.output)
        return [min(acc, n - 1 - pos) for pos, acc in self.cycles]


def live_lookahead(model, prompt: list[int], max_new_tokens: int, *, branches: int, branch_length: int,
                   draft_tokens: int, eos=None, check: bool = True) -> tuple[list[int], list[tuple[int, int]]]:
    """Greedy speculative decoding with the lookahead drafter; (output, [(position, accepted)] per cycle)."""
    from hwprobe.cli import HwprobeError
    from hwprobe.drafters.ngram import LookaheadDrafter, lookahead_spec
    from hwprobe.specdecode import greedy_generate, select_top_k, speculative_generate

    res = speculative_generate(model, LookaheadDrafter(), list(prompt), max_new_tokens,
                               select_top_k(draft_tokens), lookahead_spec(branches, branch_length), eos)
    cycles, t = [], 0
    for committed in res.committed:
        cycles.append((t, committed - 1))
        t += committed
    if t == len(res.tokens) - 1:
        # the last token came as the previous cycle's next root; the replay (and hwprobe live) still walks a
        # cycle at that position, committing it alone
        cycles.append((t, 0))
    if check and res.tokens != greedy_generate(model, list(prompt), max_new_tokens, eos):
        raise HwprobeError("lookahead decoding differs from greedy decoding: a bug in the tree verification")
    return res.tokens, cycles


def text_counts(prompt: list[int], output: list[int], *, branches: int, branch_length: int) -> TextCounts:
    """The branches retrieved at every output position of ``output``, compared with the text that follows.

    At position t (root ``output[t]``, context prompt + output[:t+1]) the
    pool is grown as the live run grows it; counted: whether its best
    branch's first token is ``output[t+1]``, else another branch's; then, down
    the matching branch, each further token while the text lasts (a branch
    ending early is a miss); and the runs of positions whose best branch is
    right, and wrong.  O(n · pool nodes · context · n-gram order).
    """
    from hwprobe.drafters.ngram import LookaheadDrafter
    from hwprobe.pool import build_pool

    drafter, spec = LookaheadDrafter(), _spec(branches, branch_length)
    n = len(output)
    c = [0] * 7   # positions, hits, others, follow trials, follow hits, runs of hits, runs of misses
    last = None
    for t in range(n - 1):
        pool = build_pool(drafter, list(prompt) + list(output[: t + 1]), spec)
        first = [j for j in range(len(pool)) if pool.parent[j] < 0]
        c[0] += 1
        match = next((j for j in first if pool.token[j] == output[t + 1]), None)
        hit = match is not None and match == first[0]
        if hit != last:
            c[5 if hit else 6] += 1
            last = hit
        if match is None:
            continue
        c[1 if hit else 2] += 1
        node, j = match, 1
        while j < branch_length and t + j + 1 < n:
            c[3] += 1
            child = next((k for k in range(node + 1, len(pool)) if pool.parent[k] == node), None)
            if child is None or pool.token[child] != output[t + j + 1]:
                break
            c[4] += 1
            node, j = child, j + 1
    return TextCounts(*c)


def _spec(branches: int, branch_length: int):
    from hwprobe.drafters.ngram import lookahead_spec

    return lookahead_spec(branches, branch_length)


@dataclass
class Comparison:
    live_mat: float
    live_mat_uncapped: float
    live_cycles: int
    counts: TextCounts
    simulated: Simulated            # the text's stretches (simmoe.validation.lookahead.text_workload)
    simulated_default: Simulated | None = None   # the generator's default stretches, for comparison

    @property
    def error(self) -> float:
        """(simulated − live) / live Mat."""
        return (self.simulated.mat - self.live_mat) / self.live_mat

    @property
    def error_default(self) -> float | None:
        d = self.simulated_default
        return None if d is None else (d.mat - self.live_mat) / self.live_mat


def compare(requests: list[LiveLookahead], *, branches: int, branch_length: int, draft_tokens: int,
            replicas: int = 32, seed: int = 0, workloads=WORKLOADS) -> Comparison:
    """The live Mat, the text's counts, and the simulated Mat of the same requests (``workloads``: text first)."""
    capped = [a for r in requests for a in r.accepted_capped()]
    raw = [a for r in requests for _, a in r.cycles]
    per = [text_counts(r.prompt, r.output, branches=branches, branch_length=branch_length) for r in requests]
    counts = per[0]
    for one in per[1:]:
        counts = counts + one
    sims = {w: simulate_mat(counts, [len(r.output) for r in requests], branches=branches,
                            branch_length=branch_length, draft_tokens=draft_tokens, replicas=replicas, seed=seed,
                            workload=w) for w in workloads}
    return Comparison(live_mat=1.0 + sum(capped) / len(capped), live_mat_uncapped=1.0 + sum(raw) / len(raw),
                      live_cycles=len(capped), counts=counts, simulated=sims["text"],
                      simulated_default=sims.get("default"))


def run(model, tokenizer, prompts, *, max_new_tokens: int = 48, branches: int = 4, branch_length: int = 6,
        draft_tokens: int = 16, replicas: int = 32, seed: int = 0, check: bool = True,
        workloads=WORKLOADS) -> Comparison:
    """Live lookahead on ``prompts`` (hwprobe.prompts.Prompt), then :func:`compare`."""
    eos = getattr(tokenizer, "eos_token_id", None)
    reqs = []
    for p in prompts:
        ids = tokenizer.encode_prompt(p.text)
        out, cycles = live_lookahead(model, ids, max_new_tokens, branches=branches, branch_length=branch_length,
                                     draft_tokens=draft_tokens, eos=eos, check=check)
        reqs.append(LiveLookahead(p.question_id, ids, out, cycles))
    return compare(reqs, branches=branches, branch_length=branch_length, draft_tokens=draft_tokens,
                   replicas=replicas, seed=seed, workloads=workloads)


def main(argv: list[str] | None = None) -> int:
    from hwprobe.cli import HwprobeError
    from simmoe.errors import SimmoeError, one_line_parser

    ap = one_line_parser(prog="python -m hwprobe.lookahead_check",
                         description="The simulator's Lookahead against the live lookahead on the same prompts.")
    ap.add_argument("--model", default="tiny", help="model directory or tiny (default)")
    ap.add_argument("--prompts", default=None, help="Spec-Bench JSONL (default: the shipped question file)")
    ap.add_argument("--category", default=None)
    ap.add_argument("--limit", type=int, default=4)
    ap.add_argument("--offset", type=int, default=0)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--branches", type=int, default=4)
    ap.add_argument("--branch-length", type=int, default=6)
    ap.add_argument("--draft-tokens", type=int, default=16)
    ap.add_argument("--replicas", type=int, default=32, help="synthetic replicas of every request (default 32)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="write the numbers to this file")
    args = ap.parse_args(argv)
    try:
        return _main(args)
    except (HwprobeError, SimmoeError) as exc:
        print(f"hwprobe lookahead check: error: {exc}", file=sys.stderr)
        return int(getattr(exc, "exit_status", 2))


def _main(args) -> int:
    from hwprobe.cli import HwprobeError
    from hwprobe.prompts import read_prompts

    if not (1 <= args.branches <= 16 and 1 <= args.branch_length <= 32 and args.draft_tokens >= 1
            and args.max_new_tokens >= 2 and args.replicas >= 1):
        raise HwprobeError("--branches 1..16, --branch-length 1..32, --draft-tokens >= 1, --max-new-tokens >= 2, "
                           "--replicas >= 1")
    from simmoe.atomicio import check_outputs

    check_outputs([("--json", args.json)], suffixes={"--json": (".json",)})
    if args.prompts is None:
        from pathlib import Path

        import hwprobe.data

        args.prompts = Path(hwprobe.data.__file__).parent / "spec_bench_question.jsonl"
    prompts = read_prompts(args.prompts, args.category, limit=args.limit, offset=args.offset)
    import torch

    from hwprobe.models import load_target

    torch.set_num_threads(1)   # the tiny model's forwards are faster on one thread, and the CPU is shared
    lm = load_target(args.model, quiet=True)
    cmp = run(lm.model, lm.tokenizer, prompts, max_new_tokens=args.max_new_tokens, branches=args.branches,
              branch_length=args.branch_length, draft_tokens=args.draft_tokens, replicas=args.replicas,
              seed=args.seed)
    s, d, c = cmp.simulated, cmp.simulated_default, cmp.counts
    print(f"prompts {', '.join(p.question_id for p in prompts)} ({lm.name}, {lm.weights}), "
          f"{args.max_new_tokens} tokens, {args.branches} branches x {args.branch_length}, K {args.draft_tokens}")
    print(f"text: {c.positions} positions, best branch right {c.hits}, another branch {c.others}; "
          f"follow {c.follow_hits}/{c.follow_trials}; runs {c.hit_runs} right, {c.miss_runs} wrong")
    print("measured: " + ", ".join(f"{k} {v:.3f}" for k, v in {**s.params, **s.workload}.items()))
    print(f"live Mat {cmp.live_mat:.3f} over {cmp.live_cycles} cycles (uncapped {cmp.live_mat_uncapped:.3f})")
    print(f"simulated Mat {s.mat:.3f} +- {s.mat_se:.3f} (SYNTHETIC, {s.replicas} replicas, {s.cycles} cycles); "
          f"error {100 * cmp.error:+.1f} %")
    if d is not None and cmp.error_default is not None:
        print(f"  with the generator's default stretches: {d.mat:.3f} +- {d.mat_se:.3f}, "
              f"error {100 * cmp.error_default:+.1f} %")
    if args.json:
        from simmoe.atomicio import write_text_atomic

        out = {"live_mat": cmp.live_mat, "live_mat_uncapped": cmp.live_mat_uncapped, "live_cycles": cmp.live_cycles,
               "counts": asdict(c), "simulated": asdict(s), "error": cmp.error, "synthetic": True,
               "simulated_default_stretches": asdict(d) if d is not None else None,
               "error_default_stretches": cmp.error_default,
               "prompts": [p.question_id for p in prompts]}
        write_text_atomic(args.json, json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
