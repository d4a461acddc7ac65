"""Train the embedded tiny Qwen3-MoE target and its dense Qwen3 drafter.

    python -m hwprobe.training.train_tiny --out DIR [--minutes M] [--seed S] [--plan tiny|smoke]

Writes, atomically (a temporary sibling folder renamed into place):

    DIR/target/      Qwen3MoeForCausalLM, safetensors float32 + config + tokenizer
    DIR/drafter/     Qwen3ForCausalLM, same tokenizer
    DIR/manifest.json     plan, seed, corpus hash, final losses, timings, versions
    DIR/training_log.json per-step losses (train, held-out curve)
    DIR/loss_curve.png

The target minimises next-token cross-entropy plus the Switch-Transformer
load-balancing loss (``router_aux_loss_coef``) so that all experts are used.
The drafter minimises (1-w)·cross-entropy + w·KL(p_target ‖ p_drafter) on the
same windows, the target frozen: distillation raises greedy agreement.
AdamW; warm-up, constant, then linear-decay learning rate.  Deterministic for a seed and a plan
(CPU, fixed thread count); ``--minutes`` can only shorten training (the
manifest records when it did), and ``--schedule-from LOG`` repeats such a
shortened run step for step from its log's learning rates.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from hwprobe.training.corpus import CorpusError, load_manifest
from hwprobe.training.data import TokenData, prepare
from hwprobe.training.losses import lm_loss, unigram_loss
from hwprobe.training.plans import PLANS, TrainPlan, drafter_config, target_config
from hwprobe.training.staging import sha256_file, staged_folder

THREADS = 2


class TrainingError(Exception):
    """Bad arguments or an unusable output folder."""


class WarmupStableDecay:
    """Learning rate: linear warm-up, constant, then linear decay to ``final_lr_frac``.

    The decay normally spans the last ``decay_frac`` of the planned steps.  If
    the wall-clock budget runs short first, the decay starts early, when
    ``decay_frac`` of the time is left, and is sized from the mean step time
    so far: a run cut short by ``--minutes`` still ends annealed (but is then
    no longer reproducible, and says so).
    """

    def __init__(self, plan: TrainPlan, steps: int, start: float, deadline: float):
        self.plan, self.steps = plan, steps
        self.warm = max(1, int(plan.warmup_frac * steps))
        self.decay_from = steps - max(1, int(plan.decay_frac * steps))
        self.end = steps
        self.start, self.deadline = start, deadline
        self.soft_deadline = deadline - plan.decay_frac * (deadline - start)
        self.cut_short = False

    def lr(self, step: int, now: float) -> float:
        p = self.plan
        if step < self.decay_from and now > self.soft_deadline:
            per_step = (now - self.start) / max(1, step)
            self.decay_from = step
            self.end = min(self.steps, step + max(1, int((self.deadline - now) / per_step)))
            self.cut_short = self.end < self.steps
        if step < self.warm:
            return p.lr * (step + 1) / self.warm
        if step < self.decay_from:
            return p.lr
        frac = (step - self.decay_from + 1) / max(1, self.end - self.decay_from)
        return p.lr * (1 - (1 - p.final_lr_frac) * min(1.0, frac))


def _optimizer(model, plan: TrainPlan):
    import torch

    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "norm" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "norm" not in n)]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": plan.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=plan.lr, betas=(0.9, 0.95), eps=1e-8)


def init_target(plan: TrainPlan, eos_id: int, seed: int):
    """The target at initialisation (also the random-init baseline of the routing report)."""
    import torch
    from transformers import Qwen3MoeForCausalLM

    torch.manual_seed(seed)
    return Qwen3MoeForCausalLM(target_config(plan, eos_id))


def init_drafter(plan: TrainPlan, eos_id: int, seed: int):
    import torch
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(seed + 1)
    return Qwen3ForCausalLM(drafter_config(plan, eos_id))


def train_lm(model, data: TokenData, plan: TrainPlan, *, steps: int, seed: int,
             deadline: float, teacher=None, name: str = "target",
             progress=None, lrs: list[float] | None = None) -> tuple[list[dict], bool]:
    """Train ``model`` for ``steps`` AdamW steps (or until ``deadline``, a ``time.monotonic()`` value).

    With ``lrs``, exactly ``len(lrs)`` steps with these learning rates (a
    logged run's schedule, replayed: no deadline).
    With ``teacher`` the loss is the distillation mix of the module docstring.
    Returns (log rows, whether the deadline cut training short).  One step
    costs one forward and backward of ``batch_size × seq_len`` tokens (plus a
    teacher forward).
    """
    import torch
    import torch.nn.functional as F

    rng = np.random.default_rng([seed, 2 if teacher is None else 3])
    opt = _optimizer(model, plan)
    eval_windows = data.heldout_windows(plan.eval_windows)
    rows: list[dict] = []
    t0 = time.monotonic()
    schedule = WarmupStableDecay(plan, steps, t0, deadline)
    if lrs is not None:
        steps = schedule.end = len(lrs)
    for step in range(steps):
        if lrs is not None:
            lr = float(lrs[step])
        else:
            if step >= schedule.end:
                break
            if time.monotonic() > deadline:  # a machine far slower than when the decay began
                schedule.cut_short = True
                break
            lr = schedule.lr(step, time.monotonic())
        for g in opt.param_groups:
            g["lr"] = lr
        model.train()
        x = torch.from_numpy(data.sample_batch(rng, plan.batch_size))
        row = {"step": step + 1, "lr": lr}
        if teacher is None:
            out = model(input_ids=x, labels=x, output_router_logits=True)
            loss = out.loss
            row["aux_loss"] = out.aux_loss.item()
            row["train_ce"] = loss.item() - plan.target.router_aux_loss_coef * row["aux_loss"]
        else:
            with torch.no_grad():
                t_logits = teacher(input_ids=x).logits[:, :-1].float()
            logits = model(input_ids=x).logits[:, :-1].float()
            v = logits.shape[-1]
            ce = F.cross_entropy(logits.reshape(-1, v), x[:, 1:].reshape(-1))
            kl = F.kl_div(F.log_softmax(logits, -1).reshape(-1, v),
                          F.log_softmax(t_logits, -1).reshape(-1, v),
                          log_target=True, reduction="batchmean")
            loss = (1 - plan.distill_weight) * ce + plan.distill_weight * kl
            row["train_ce"] = ce.item()
            row["kl_to_target"] = kl.item()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        row["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(model.parameters(), plan.grad_clip))
        opt.step()
        if (step + 1) % plan.eval_every == 0 or step + 1 == schedule.end:
            row["heldout_ce"] = lm_loss(model, eval_windows, plan.batch_size)
        row["elapsed_s"] = round(time.monotonic() - t0, 2)
        rows.append(row)
        if progress and "heldout_ce" in row:
            progress(f"{name} step {step + 1}/{steps} train {row['train_ce']:.3f} "
                     f"held-out {row['heldout_ce']:.3f} ({row['elapsed_s']:.0f} s)")
    model.eval()
    return rows, schedule.cut_short


def plot_loss_curve(path: Path, logs: dict[str, list[dict]], unigram: float, plan: TrainPlan) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tokens_per_step = plan.batch_size * plan.seq_len
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    colors = {"target": "tab:blue", "drafter": "tab:orange"}
    for name, rows in logs.items():
        if not rows:
            continue
        steps = np.array([r["step"] for r in rows])
        ce = np.array([r["train_ce"] for r in rows])
        k = max(1, len(ce) // 60)  # moving average so the curve reads
        smooth = np.convolve(ce, np.ones(k) / k, mode="valid")
        ax.plot(steps[k - 1 :] * tokens_per_step / 1e6, smooth, color=colors[name], alpha=0.5,
                label=f"{name} train CE")
        ev = [(r["step"], r["heldout_ce"]) for r in rows if "heldout_ce" in r]
        ax.plot([s * tokens_per_step / 1e6 for s, _ in ev], [c for _, c in ev], "o-", ms=2.5,
                color=colors[name], label=f"{name} held-out CE")
    ax.axhline(unigram, color="gray", ls="--", label=f"unigram baseline ({unigram:.2f})")
    ax.set_xlabel("training tokens (millions)")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title("Tiny Qwen3-MoE target and dense drafter on Python stdlib source")
    ax.set_ylim(0, max(unigram * 1.15, 1))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def train(out: Path, *, plan_name: str = "tiny", seed: int = 0, minutes: float = 45.0,
          threads: int = THREADS, progress=None, schedule_from: Path | None = None) -> dict:
    """Train target then drafter per ``PLANS[plan_name]``; write the folder described above; return the manifest.

    ``schedule_from``: a ``training_log.json`` whose per-step learning rates
    (hence step counts) both models follow exactly, with no time cap: a run
    that ``--minutes`` cut short, reproduced step for step.
    """
    import torch
    import transformers

    if plan_name not in PLANS:
        raise TrainingError(f"unknown plan {plan_name!r}; known: {', '.join(PLANS)}")
    if minutes <= 0:
        raise TrainingError("--minutes must be positive")
    if threads < 1:
        raise TrainingError("--threads must be at least 1")
    out = out.resolve()
    if out.exists() and not (out / "manifest.json").is_file():
        raise TrainingError(f"{out} exists and is not a tiny-model folder; refusing to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    plan = PLANS[plan_name]
    lrs = {"target": None, "drafter": None}
    if schedule_from is not None:
        lrs = _logged_schedule(schedule_from)
        minutes = float("inf")
    torch.set_num_threads(threads)
    transformers.utils.logging.disable_progress_bar()
    start = time.monotonic()
    deadline = start + 60 * minutes
    # The drafter gets its share of the budget whatever the target used.
    target_deadline = start + 60 * minutes * 0.75

    data = prepare(plan)
    if progress:
        progress(f"corpus: {len(data.train)} training tokens, {len(data.heldout)} held-out tokens")
    target = init_target(plan, data.eos_id, seed)
    target_rows, target_cut = train_lm(target, data, plan, steps=plan.target_steps, seed=seed,
                                       deadline=target_deadline, name="target", progress=progress,
                                       lrs=lrs["target"])
    target_s = time.monotonic() - start
    for p in target.parameters():
        p.requires_grad_(False)
    drafter = init_drafter(plan, data.eos_id, seed)
    drafter_rows, drafter_cut = train_lm(drafter, data, plan, steps=plan.drafter_steps, seed=seed,
                                         deadline=deadline, teacher=target, name="drafter",
                                         progress=progress, lrs=lrs["drafter"])
    drafter_s = time.monotonic() - start - target_s

    manifest = _manifest(data, plan, target, drafter, plan_name=plan_name, seed=seed, threads=threads,
                         schedule_from=schedule_from, target_run=(target_rows, target_cut, target_s),
                         drafter_run=(drafter_rows, drafter_cut, drafter_s))

    with staged_folder(out) as tmp:
        for name, model in (("target", target), ("drafter", drafter)):
            model.save_pretrained(tmp / name, safe_serialization=True)
            data.tokenizer.save_pretrained(tmp / name)
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        (tmp / "training_log.json").write_text(
            json.dumps({"target": target_rows, "drafter": drafter_rows}, separators=(",", ":")) + "\n")
        plot_loss_curve(tmp / "loss_curve.png", {"target": target_rows, "drafter": drafter_rows},
                        manifest["unigram_heldout_ce"], plan)
    return manifest


def _manifest(data: TokenData, plan: TrainPlan, target, drafter, *, plan_name: str, seed: int, threads: int,
              schedule_from: Path | None, target_run: tuple, drafter_run: tuple) -> dict:
    """What the run was and what it reached (``manifest.json``); ``*_run``: (log rows, cut short, seconds)."""
    import torch
    import transformers

    target_rows, target_cut, target_s = target_run
    drafter_rows, drafter_cut, drafter_s = drafter_run
    all_held = data.heldout_windows()
    check = data.heldout_windows(plan.check_windows)
    return {
        "plan_name": plan_name,
        "plan": plan.as_dict(),
        "seed": seed,
        "schedule": (f"replayed from {schedule_from} (sha256 {sha256_file(schedule_from)})" if schedule_from
                     else "planned (warm-up, constant, decay; shortened only by --minutes)"),
        "corpus_packed_sha256": load_manifest()["packed_sha256"],
        "train_tokens": int(len(data.train)),
        "heldout_tokens": int(len(data.heldout)),
        "heldout_windows": int(len(all_held)),
        "heldout_chars_per_token": data.heldout_chars / len(data.heldout),
        "unigram_heldout_ce": unigram_loss(data.train, data.heldout, plan.vocab_size),
        "target": {
            "steps_done": len(target_rows), "truncated": target_cut, "seconds": round(target_s, 1),
            "heldout_ce": lm_loss(target, all_held, plan.batch_size),
            "check_ce": lm_loss(target, check, plan.batch_size),
            "parameters": sum(p.numel() for p in target.parameters()),
        },
        "drafter": {
            "steps_done": len(drafter_rows), "truncated": drafter_cut, "seconds": round(drafter_s, 1),
            "heldout_ce": lm_loss(drafter, all_held, plan.batch_size),
            "check_ce": lm_loss(drafter, check, plan.batch_size),
            "parameters": sum(p.numel() for p in drafter.parameters()),
        },
        "check_slice": f"first {plan.check_windows} held-out windows of {plan.seq_len} tokens",
        "threads": threads,
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                     "transformers": transformers.__version__},
    }


def _logged_schedule(path: Path) -> dict[str, list[float]]:
    """Per-step learning rates of the target and the drafter from a ``training_log.json``."""
    try:
        log = json.loads(Path(path).read_text(encoding="utf-8"))
        out = {name: [float(r["lr"]) for r in log[name]] for name in ("target", "drafter")}
    except FileNotFoundError:
        raise TrainingError(f"no such training log: {path}") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TrainingError(f"{path}: not a training log with per-step lr for target and drafter ({exc})") from None
    if not out["target"] or not out["drafter"]:
        raise TrainingError(f"{path}: the log has no steps")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hwprobe.training.train_tiny",
                                 description="Train the embedded tiny MoE target and its drafter (CPU).")
    ap.add_argument("--out", type=Path, required=True, help="output folder (replaced atomically)")
    ap.add_argument("--minutes", type=float, default=45.0,
                    help="wall-clock cap; training stops early (and says so) past it [45]")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plan", default="tiny", choices=sorted(PLANS))
    ap.add_argument("--threads", type=int, default=THREADS,
                    help="torch CPU threads; results are bit-reproducible only for the same count [2]")
    ap.add_argument("--schedule-from", type=Path, metavar="LOG",
                    help="follow this training_log.json's per-step learning rates exactly, no time cap: "
                    "reproduces a run that --minutes cut short (same seed, plan and threads)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    say = None if args.quiet else (lambda msg: print(msg, flush=True))
    try:
        m = train(args.out, plan_name=args.plan, seed=args.seed, minutes=args.minutes,
                  threads=args.threads, progress=say, schedule_from=args.schedule_from)
    except (TrainingError, CorpusError) as exc:
        print(f"train_tiny: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: target held-out CE {m['target']['heldout_ce']:.3f}, drafter "
          f"{m['drafter']['heldout_ce']:.3f}, unigram {m['unigram_heldout_ce']:.3f} nats/token"
          + ("; cut short by --minutes" if m["target"]["truncated"] or m["drafter"]["truncated"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
