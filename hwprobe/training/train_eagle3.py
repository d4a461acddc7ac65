"""Train an EAGLE-3 draft head for the embedded tiny target (CPU).

    python -m hwprobe.training.train_eagle3 --out DIR [--minutes M] [--seed S]
                                            [--threads 1] [--plan tiny|smoke] [--quiet]

EAGLE-3 (Li et al., 2025, "EAGLE-3: Scaling up Inference Acceleration of
Large Language Models via Training-Time Test") drafts with one decoder layer
that reads a fusion of the target's low, middle and high hidden states and
predicts tokens directly (no feature regression).  This module trains such a
head, :class:`hwprobe.drafters.eagle3.Eagle3Head`, on the frozen tiny
Qwen3-MoE target of ``hwprobe/tiny/model/target``, and writes it in the
SafeAILab / RedHatAI layout that :meth:`Eagle3Drafter.from_dir` loads.

What the head sees is computed by the drafter's own code: ``feature_layers``
picks the target's hidden states, ``Eagle3Drafter.target_features`` fuses
them with the head's ``fc``, ``Eagle3Drafter.embed`` embeds tokens and
``Eagle3Head.step`` / ``logits`` run the layer.  On a window ``x_0 .. x_{T-1}``:

* step 0 (draft level 1): row ``r`` pairs the fused feature of ``x_r`` with the
  embedding of ``x_{r+1}`` at position ``r`` and attends causally to rows
  ``0 .. r``; it predicts ``x_{r+2}`` -- exactly the cached prefix rows of
  ``Eagle3Drafter._sync``, whose last row proposes the first draft level;
* step ``s >= 1`` (draft level ``s + 1``, the "training-time test"): row ``r``
  pairs the head's own step-``s-1`` output of row ``r-1`` with the embedding
  of ``x_{r+1}`` at position ``r``; it attends to step-0 rows ``0 .. r-s`` and
  to its own ancestors, one row of each earlier unrolled step (the
  diagonals), and itself -- exactly what ``Eagle3Drafter.children`` computes
  for a tree node whose path to the root is ``x_{r-s+2} .. x_{r+1}``.

Loss: at every step, cross-entropy of the head's distribution against the
target's own next-token distribution at the same position (distillation
from the target's logits, which EAGLE-3 uses too; it teaches the ranking
of the alternatives as well as the argmax that greedy verification checks),
step ``s`` weighted ``step_decay ** s``.  The draft vocabulary is the
target's full 1024 tokens (``d2t`` all zeros): at this size a frequency cut
saves little and loses rare identifiers.  ``lm_head`` and the final norm
start as copies of the target's (tied) output embedding and final norm, so
the head starts in the target's output space; everything else is initialised
by a seeded ``torch.manual_seed``.

AdamW; warm-up, constant, then linear-decay learning rate
(:class:`hwprobe.training.train_tiny.WarmupStableDecay`).  Deterministic for
a seed, plan and thread count on the CPU (``--minutes`` can only shorten
training, and the manifest then says ``"truncated": true``).

Cost per step: one target forward of ``batch_size × seq_len`` tokens (no
gradient) plus ``ttt_steps`` forward and backward passes of one decoder
layer over the same rows; attention at step ``s`` is O(T · (s + 1) · T).

Output, written to a temporary sibling folder and renamed into place (an
existing output folder is replaced only if its ``manifest.json`` says it
holds an EAGLE-3 head):

    DIR/config.json, DIR/model.safetensors   the head (Eagle3Drafter.from_dir)
    DIR/manifest.json     plan, seed, steps, seconds, final losses, acceptance per level
    DIR/training_log.json per-step losses and top-1 agreement per unrolled step
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from hwprobe.training.staging import sha256_file, staged_folder
from hwprobe.training.train_tiny import TrainingError

KIND = "eagle3-head"


@dataclass(frozen=True)
class Eagle3Plan:
    """Everything that decides the head's weights (with the seed and the thread count)."""

    # head shape; its hidden size is the target's, because q/k/v read the
    # target's token embedding and the head's state side by side (2 x hidden)
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 384
    # data: windows at random offsets of the training split (the target's own)
    seq_len: int = 256
    batch_size: int = 4
    steps: int = 1800
    ttt_steps: int = 3              # unrolled steps = draft levels trained
    step_decay: float = 0.8         # loss weight of unrolled step s
    lr: float = 5e-3
    warmup_frac: float = 0.05
    decay_frac: float = 0.25
    final_lr_frac: float = 0.05
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    eval_every: int = 100
    eval_windows: int = 8           # held-out windows of the loss curve
    # acceptance measured at the end: greedy chains from held-out prefixes
    accept_windows: int = 64
    accept_prefixes: tuple = (64, 128, 192)
    accept_depth: int = 5
    max_train_chars: int | None = None
    max_heldout_chars: int | None = None

    def as_dict(self) -> dict:
        return asdict(self)


PLANS = {
    "tiny": Eagle3Plan(),
    "smoke": Eagle3Plan(intermediate_size=64, seq_len=32, batch_size=2, steps=4, ttt_steps=3,
                        eval_every=2, eval_windows=2, accept_windows=2, accept_prefixes=(12, 20),
                        accept_depth=3, max_train_chars=40_000, max_heldout_chars=8_000),
}


def head_config(target_config, plan: Eagle3Plan) -> dict:
    """``config.json`` of a head for ``target_config`` (SafeAILab / RedHatAI keys)."""
    H = int(target_config.hidden_size)
    rp = getattr(target_config, "rope_parameters", None) or {}
    theta = float(rp.get("rope_theta", getattr(target_config, "rope_theta", 10000.0)))
    V = int(target_config.vocab_size)
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": H,
        "target_hidden_size": H,
        "num_attention_heads": plan.num_attention_heads,
        "num_key_value_heads": plan.num_key_value_heads,
        "head_dim": H // plan.num_attention_heads,
        "intermediate_size": plan.intermediate_size,
        "num_hidden_layers": 1,
        "hidden_act": "silu",
        "vocab_size": V,
        "draft_vocab_size": V,
        "rms_norm_eps": float(target_config.rms_norm_eps),
        "rope_theta": theta,
        "max_position_embeddings": int(target_config.max_position_embeddings),
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }


def init_head(target, plan: Eagle3Plan, seed: int):
    """A seeded head whose ``lm_head`` and final norm start as the target's."""
    import torch

    from hwprobe.drafters.eagle3 import Eagle3Head

    cfg = head_config(target.config, plan)
    torch.manual_seed(seed)
    head = Eagle3Head(cfg)
    with torch.no_grad():
        head.lm_head.weight.copy_(target.get_output_embeddings().weight)
        head.norm.weight.copy_(target.model.norm.weight)
    return head, cfg


# -- the unrolled ("training-time test") forward ---------------------------------------------


def _ttt_mask(T: int, s: int, device):
    """Attention mask of unrolled step ``s`` over rows of steps ``0 .. s``.

    Step ``t`` holds rows ``t .. T-2`` (``T-1-t`` of them); a step-``s`` row
    at position ``r`` (``i = r - s``) may see step-0 rows ``0 .. i`` and the
    row at position ``r - s + t`` of every step ``t = 1 .. s``, i.e. index
    ``i`` of each: its ancestors in a draft tree, and itself.
    """
    import torch

    n = T - 1 - s
    i = torch.arange(n, device=device)
    blocks = [i[:, None] >= torch.arange(T - 1, device=device)[None]]
    for t in range(1, s + 1):
        blocks.append(i[:, None] == torch.arange(T - 1 - t, device=device)[None])
    return torch.cat(blocks, 1)


def unrolled_logits(drafter, target_output, b: int, ids, steps: int):
    """Head logits of every unrolled step on window ``b`` of a batched target forward.

    ``ids``: the window's tokens ``[T]``.  Returns a list of ``steps`` tensors;
    entry ``s`` is ``[T-1-s, V]``, row ``i`` predicting token ``s + i + 2``
    (the target's distribution at position ``s + i + 1``).  Gradients flow
    into the head (``fc`` included); the target's hidden states are inputs.
    Cost: ``steps`` single-layer passes over ``T`` rows, attention
    O(T² · steps²) in all.
    """
    import torch

    head = drafter.head
    T = int(ids.shape[0])
    dev = ids.device
    one = SimpleNamespace(hidden_states=[h[b : b + 1] for h in target_output.hidden_states])
    feats = drafter.target_features(one, torch.arange(T - 1, device=dev))       # rows 0 .. T-2
    out, past_k, past_v = [], None, None
    hidden = feats
    for s in range(steps):
        emb = drafter.embed(ids[s + 1 :])
        pos = torch.arange(s, T - 1, device=dev)
        allowed = torch.ones((T - 1, T - 1), dtype=torch.bool, device=dev).tril() if s == 0 \
            else _ttt_mask(T, s, dev)
        h, k, v = head.step(hidden, emb, pos, past_k, past_v, allowed)
        out.append(head.logits(h))
        past_k = k if past_k is None else torch.cat([past_k, k], 1)
        past_v = v if past_v is None else torch.cat([past_v, v], 1)
        hidden = h[:-1]            # step s+1, position r reads step s's output at r-1
    return out


def ttt_loss(drafter, target, x, plan: Eagle3Plan):
    """Weighted distillation loss over the unrolled steps on a batch ``x [B, T]``.

    Returns (loss, per-step cross-entropy against the target's distribution,
    per-step top-1 agreement with the target's argmax).
    """
    import torch

    with torch.no_grad():
        t_out = target(input_ids=x, output_hidden_states=True)
        t_logp = torch.log_softmax(t_out.logits.float(), -1)
        t_p, t_top = t_logp.exp(), t_logp.argmax(-1)
    S = plan.ttt_steps
    ce_sum = [0.0] * S
    ce_t = [0.0] * S
    agree = [0.0] * S
    count = [0] * S
    for b in range(x.shape[0]):
        logits = unrolled_logits(drafter, t_out, b, x[b], S)
        for s, lg in enumerate(logits):
            lq = torch.log_softmax(lg.float(), -1)         # row i: target position s + i + 1
            ce = -(t_p[b, s + 1 :] * lq).sum(-1)
            ce_t[s] = ce_t[s] + ce.sum()
            ce_sum[s] += float(ce.detach().sum())
            agree[s] += float((lg.detach().argmax(-1) == t_top[b, s + 1 :]).sum())
            count[s] += ce.numel()
    w = [plan.step_decay ** s for s in range(S)]
    loss = sum(wi * c / n for wi, c, n in zip(w, ce_t, count)) / sum(w)
    return loss, [c / n for c, n in zip(ce_sum, count)], [a / n for a, n in zip(agree, count)]


def heldout_metrics(drafter, target, windows: np.ndarray, plan: Eagle3Plan) -> dict:
    """Per-step cross-entropy and top-1 agreement on held-out windows (no gradient)."""
    import torch

    ce = np.zeros(plan.ttt_steps)
    acc = np.zeros(plan.ttt_steps)
    with torch.no_grad():
        for w in windows:
            x = torch.from_numpy(np.ascontiguousarray(w[None]))
            _, c, a = ttt_loss(drafter, target, x, plan)
            ce += np.array(c)
            acc += np.array(a)
    n = max(1, len(windows))
    return {"ce": (ce / n).tolist(), "top1": (acc / n).tolist()}


# -- acceptance of greedy chains -------------------------------------------------------------


def eagle3_chain(drafter, target, window, n: int, depth: int) -> list[int]:
    """The EAGLE-3 drafter's greedy chain after the first ``n`` tokens of ``window``.

    Goes through the drafter's public path (``start``, ``observe``, pool
    growth with one child per level); the root is token ``n-1``.
    """
    import torch

    from hwprobe.pool import PoolSpec, build_pool

    ctx = [int(t) for t in window[:n]]
    with torch.no_grad():
        out = target(input_ids=torch.as_tensor([ctx]), output_hidden_states=True)
    drafter.start(ctx)
    drafter.observe(ctx, out)
    return build_pool(drafter, ctx, PoolSpec(1, 1, depth, depth)).token


def chain_acceptance(target, chains, prefixes: list[list[int]], depth: int) -> dict:
    """Greedy verification of drafted chains: P(accept level j) and α_j = P(j | j-1).

    ``chains[i]`` was drafted after ``prefixes[i]``; level j is accepted when
    it and every level before it equal the target's greedy continuation.
    Cost: one greedy target decode of ``depth`` tokens per prefix.
    """
    from hwprobe.specdecode import greedy_generate
    from hwprobe.training.draft_agreement import acceptance_per_level

    acc = np.zeros((len(prefixes), depth), dtype=bool)
    for i, (ctx, chain) in enumerate(zip(prefixes, chains)):
        ref = greedy_generate(target, ctx, depth)
        ok = True
        for j in range(depth):
            ok = ok and j < len(chain) and int(chain[j]) == ref[j]
            acc[i, j] = ok
    p, alpha, mean_accepted = acceptance_per_level(acc)
    return {"chains": len(prefixes), "depth": depth, "p_accept": [round(float(v), 4) for v in p],
            "alpha": [round(float(v), 4) for v in alpha], "mean_accepted": round(mean_accepted, 4)}


def measure_acceptance(head_dir: Path, target, windows: np.ndarray, plan: Eagle3Plan, dense=None) -> dict:
    """Greedy-chain acceptance per level of the head loaded from ``head_dir`` (and of ``dense``).

    Both drafters draft from the same held-out prefixes (the first
    ``accept_prefixes`` tokens of each window), so their numbers compare.
    """
    import torch

    from hwprobe.drafters.eagle3 import Eagle3Drafter
    from hwprobe.training.draft_agreement import greedy_chain

    drafter = Eagle3Drafter.from_dir(head_dir, target=target)
    prefixes, ours, theirs = [], [], []
    D = plan.accept_depth
    for w in windows:
        for n in plan.accept_prefixes:
            if n >= len(w):
                continue
            prefixes.append([int(t) for t in w[:n]])
            ours.append(eagle3_chain(drafter, target, w, n, D))
            if dense is not None:
                theirs.append(greedy_chain(dense, torch.as_tensor([prefixes[-1]]), D)[0].tolist())
    res = {"protocol": f"greedy chains of {D} from the first {list(plan.accept_prefixes)} tokens of "
                       f"{len(windows)} held-out windows; level j accepted when levels 1..j equal "
                       "the target's greedy continuation",
           "eagle3": chain_acceptance(target, ours, prefixes, D)}
    if dense is not None:
        res["dense_drafter"] = chain_acceptance(target, theirs, prefixes, D)
    return res


# -- the command -----------------------------------------------------------------------------


def _optimizer(head, plan: Eagle3Plan):
    import torch

    decay = [p for n, p in head.named_parameters() if p.ndim >= 2]
    rest = [p for n, p in head.named_parameters() if p.ndim < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": plan.weight_decay},
                              {"params": rest, "weight_decay": 0.0}],
                             lr=plan.lr, betas=(0.9, 0.95), eps=1e-8)


def _check_out(out: Path) -> Path:
    out = Path(out).resolve()
    if out.exists() and not out.is_dir():
        raise TrainingError(f"{out} exists and is not a folder")
    if out.is_dir():
        try:
            kind = json.loads((out / "manifest.json").read_text()).get("kind")
        except (OSError, ValueError, AttributeError):
            kind = None
        if kind != KIND:
            raise TrainingError(f"{out} exists and is not an EAGLE-3 head folder; refusing to replace it")
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir():
                raise TrainingError(f"cannot create {out}: {parent} is not a folder")
            if not os.access(parent, os.W_OK):
                raise TrainingError(f"cannot create {out}: {parent} is not writable")
            break
    return out


def load_tiny(plan: Eagle3Plan):
    """The frozen tiny target, its tokenizer, the dense drafter and the token streams of the corpus."""
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    import hwprobe.tiny as tiny
    from hwprobe.training.data import prepare
    from hwprobe.training.report import plan_from_dict

    tiny_plan = plan_from_dict(tiny.training_manifest()["plan"])
    tok = PreTrainedTokenizerFast.from_pretrained(tiny.target_dir())
    target = AutoModelForCausalLM.from_pretrained(tiny.target_dir(), dtype=torch.float32,
                                                  attn_implementation="sdpa").eval()
    for p in target.parameters():
        p.requires_grad_(False)
    dense = AutoModelForCausalLM.from_pretrained(tiny.drafter_dir(), dtype=torch.float32).eval()
    data = prepare(replace(tiny_plan, seq_len=plan.seq_len, max_train_chars=plan.max_train_chars,
                           max_heldout_chars=plan.max_heldout_chars), tokenizer=tok)
    return target, dense, data


def train(out: Path, *, plan_name: str = "tiny", seed: int = 0, minutes: float = 13.0,
          threads: int = 1, progress=None) -> dict:
    """Train a head per ``PLANS[plan_name]``; write the folder of the module docstring; return the manifest.

    ``minutes`` caps the training loop (the final measurement adds about a
    minute on the ``tiny`` plan).
    """
    import torch
    import transformers

    from hwprobe.drafters.eagle3 import Eagle3Drafter, save_head

    if plan_name not in PLANS:
        raise TrainingError(f"unknown plan {plan_name!r}; known: {', '.join(PLANS)}")
    if not minutes > 0:
        raise TrainingError("--minutes must be positive")
    if threads < 1:
        raise TrainingError("--threads must be at least 1")
    out = _check_out(out)
    plan = PLANS[plan_name]
    say = progress or (lambda msg: None)
    torch.set_num_threads(threads)
    transformers.utils.logging.disable_progress_bar()
    t_start = time.monotonic()

    target, dense, data = load_tiny(plan)
    say(f"corpus: {len(data.train)} training tokens, {len(data.heldout)} held-out tokens")
    head, cfg = init_head(target, plan, seed)
    drafter = Eagle3Drafter(head, target)
    head.train()
    opt = _optimizer(head, plan)
    rng = np.random.default_rng([seed, 5])
    held = data.heldout_windows()
    eval_windows = held[: plan.eval_windows]
    rows, schedule, train_s = _train_loop(drafter, target, data, plan, opt, rng, eval_windows, minutes, say)
    head.eval()
    if "heldout" not in rows[-1]:          # cut short between evaluations
        rows[-1]["heldout"] = heldout_metrics(drafter, target, eval_windows, plan)
    manifest = _manifest(rows, drafter, cfg, data, plan, plan_name=plan_name, seed=seed, threads=threads,
                         truncated=bool(schedule.cut_short), train_s=train_s, eval_windows=len(eval_windows))

    out.parent.mkdir(parents=True, exist_ok=True)
    with staged_folder(out) as tmp:
        save_head(head, cfg, tmp)
        t1 = time.monotonic()
        manifest["acceptance"] = measure_acceptance(tmp, target, held[: plan.accept_windows], plan, dense)
        manifest["acceptance_seconds"] = round(time.monotonic() - t1, 1)
        manifest["size_bytes"] = sum(f.stat().st_size for f in tmp.iterdir())
        manifest["seconds"] = round(time.monotonic() - t_start, 1)
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        (tmp / "training_log.json").write_text(json.dumps(rows, separators=(",", ":")) + "\n")
    return manifest


def _train_loop(drafter, target, data, plan: Eagle3Plan, opt, rng, eval_windows, minutes: float, say):
    """The training steps within the time budget: (per-step log rows, the schedule, seconds)."""
    import torch

    from hwprobe.training.train_tiny import WarmupStableDecay

    head = drafter.head
    rows: list[dict] = []
    t0 = time.monotonic()
    schedule = WarmupStableDecay(plan, plan.steps, t0, t0 + 60 * minutes)
    for step in range(plan.steps):
        if step >= schedule.end:
            break
        if time.monotonic() > schedule.deadline:
            schedule.cut_short = True
            break
        lr = schedule.lr(step, time.monotonic())
        for g in opt.param_groups:
            g["lr"] = lr
        x = torch.from_numpy(data.sample_batch(rng, plan.batch_size))
        loss, ce, acc = ttt_loss(drafter, target, x, plan)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = float(torch.nn.utils.clip_grad_norm_(head.parameters(), plan.grad_clip))
        opt.step()
        row = {"step": step + 1, "lr": lr, "loss": float(loss.detach()), "ce": ce, "top1": acc, "grad_norm": gn}
        if (step + 1) % plan.eval_every == 0 or step + 1 == min(schedule.end, plan.steps):
            row["heldout"] = heldout_metrics(drafter, target, eval_windows, plan)
            say(f"step {step + 1}/{plan.steps} loss {row['loss']:.3f} held-out top-1 per level "
                + " ".join(f"{a:.3f}" for a in row["heldout"]["top1"]) + f" ({time.monotonic() - t0:.0f} s)")
        row["elapsed_s"] = round(time.monotonic() - t0, 2)
        rows.append(row)
    return rows, schedule, time.monotonic() - t0


def _manifest(rows: list[dict], drafter, cfg: dict, data, plan: Eagle3Plan, *, plan_name: str, seed: int,
              threads: int, truncated: bool, train_s: float, eval_windows: int) -> dict:
    """What the run was and what it reached (``manifest.json``; acceptance and sizes are added after saving)."""
    import torch
    import transformers

    import hwprobe.tiny as tiny

    tail = rows[-min(len(rows), 50):]
    return {
        "kind": KIND,
        "method": "EAGLE-3 (Li et al., 2025): fused low/mid/high target features, training-time test "
                  f"unrolled {plan.ttt_steps} steps, soft cross-entropy against the target's logits",
        "plan_name": plan_name,
        "plan": plan.as_dict(),
        "seed": seed,
        "threads": threads,
        "target": {"dir": "hwprobe/tiny/model/target",
                   "weights_sha256": sha256_file(tiny.target_dir() / "model.safetensors"),
                   "feature_layers": drafter.layers},
        "draft_vocab": f"full target vocabulary ({cfg['draft_vocab_size']} tokens, d2t all zeros)",
        "train_tokens": len(data.train),
        "steps_done": len(rows),
        "truncated": truncated,
        "train_seconds": round(train_s, 1),
        "parameters": sum(p.numel() for p in drafter.head.parameters()),
        "final": {
            "train_ce_per_level_last_steps": np.mean([r["ce"] for r in tail], 0).round(4).tolist(),
            "train_top1_per_level_last_steps": np.mean([r["top1"] for r in tail], 0).round(4).tolist(),
            "heldout": rows[-1]["heldout"],
            "heldout_slice": f"first {eval_windows} held-out windows of {plan.seq_len} tokens",
        },
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                     "transformers": transformers.__version__},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hwprobe.training.train_eagle3",
                                 description="Train an EAGLE-3 draft head for the embedded tiny target (CPU).")
    ap.add_argument("--out", type=Path, required=True, help="output folder (replaced atomically)")
    ap.add_argument("--minutes", type=float, default=13.0,
                    help="wall-clock cap of the training loop; training stops early (and says so) past it [13]")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plan", default="tiny", choices=sorted(PLANS))
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads; results are bit-reproducible only for the same count [1]")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    say = None if args.quiet else (lambda msg: print(msg, flush=True))
    from hwprobe.tiny import TinyModelMissing
    from hwprobe.training.corpus import CorpusError

    try:
        m = train(args.out, plan_name=args.plan, seed=args.seed, minutes=args.minutes,
                  threads=args.threads, progress=say)
    except (TrainingError, CorpusError, TinyModelMissing) as exc:
        print(f"train_eagle3: error: {exc}", file=sys.stderr)
        return 2
    acc = m["acceptance"]
    print(f"wrote {args.out}: {m['steps_done']} steps in {m['train_seconds']:.0f} s; greedy-chain P(accept) "
          f"per level eagle3 {acc['eagle3']['p_accept']}, dense drafter {acc['dense_drafter']['p_accept']}"
          + ("; cut short by --minutes" if m["truncated"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
