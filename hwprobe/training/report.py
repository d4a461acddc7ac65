"""Write ``reports/tiny-model.md``: evidence that the embedded tiny model learned.

    python -m hwprobe.training.report [--model-dir hwprobe/tiny/model] [--out reports/tiny-model.md]

Reloads the shipped checkpoints as a user would (``from_pretrained``),
re-encodes the pinned corpus with the shipped tokenizer and measures:
held-out loss of target and drafter against the unigram baseline; routing
statistics of the trained target beside the same model at its random
initialisation (same seed, same shape; ``routing_stats``); greedy-draft
agreement per position (``draft_agreement``).  Copies the training log and
loss curve next to the report (``reports/tiny-model/``) and adds a
union-growth plot.  Every file is written atomically.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from hwprobe.training.data import prepare
from hwprobe.training.draft_agreement import draft_agreement
from hwprobe.training.losses import lm_loss, unigram_loss
from hwprobe.training.plans import DrafterShape, TargetShape, TrainPlan
from hwprobe.training.routing_stats import routing_stats
from hwprobe.training.train_tiny import THREADS, init_target
from simmoe.atomicio import write_bytes_atomic

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL_DIR = ROOT / "hwprobe" / "tiny" / "model"
DEFAULT_OUT = ROOT / "reports" / "tiny-model.md"
ROUTING_WINDOWS = 64
AGREEMENT_WINDOWS = 192


def plan_from_dict(d: dict) -> TrainPlan:
    rest = {k: v for k, v in d.items() if k not in ("target", "drafter")}
    return TrainPlan(target=TargetShape(**d["target"]), drafter=DrafterShape(**d["drafter"]), **rest)


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, data)


def measure(model_dir: Path, threads: int = THREADS) -> dict:
    """All the report's numbers, as one JSON-able dict."""
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    torch.set_num_threads(threads)
    manifest = json.loads((model_dir / "manifest.json").read_text())
    plan = plan_from_dict(manifest["plan"])
    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_dir / "target")
    target = AutoModelForCausalLM.from_pretrained(model_dir / "target")
    drafter = AutoModelForCausalLM.from_pretrained(model_dir / "drafter")
    data = prepare(plan, tokenizer=tokenizer)
    held = data.heldout_windows()
    random_init = init_target(plan, data.eos_id, manifest["seed"])
    return {
        "manifest": manifest,
        "losses": {
            "target": lm_loss(target, held),
            "drafter": lm_loss(drafter, held),
            "random_init_target": lm_loss(random_init, held[:ROUTING_WINDOWS]),
            "unigram": unigram_loss(data.train, data.heldout, plan.vocab_size),
            "heldout_chars_per_token": manifest.get("heldout_chars_per_token"),
        },
        "routing": {
            "trained": routing_stats(target, held[:ROUTING_WINDOWS], seed=1),
            "random_init": routing_stats(random_init, held[:ROUTING_WINDOWS], seed=1),
        },
        "agreement": draft_agreement(target, drafter, held[:AGREEMENT_WINDOWS],
                                     prefix_len=min(96, plan.seq_len // 2), depth=8),
        "sizes_bytes": {kind: sum(f.stat().st_size for f in (model_dir / kind).iterdir())
                        for kind in ("target", "drafter")},
    }


def plot_union_growth(path: Path, routing: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=110)
    tr, ri = routing["trained"]["mean"], routing["random_init"]["mean"]
    ts = sorted(int(t) for t in tr["union_consecutive"])

    def series(d):
        return [d[t] if t in d else d[str(t)] for t in ts]

    ax.plot(ts, series(tr["union_independent"]), "k--", label="independent N[1-(1-k/N)^t]")
    ax.plot(ts, series(tr["union_consecutive"]), "o-", color="tab:blue", label="trained, consecutive tokens")
    ax.plot(ts, series(tr["union_random_positions"]), "s:", color="tab:blue", label="trained, random positions")
    ax.plot(ts, series(ri["union_consecutive"]), "o-", color="tab:red", label="random init, consecutive")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens t")
    ax.set_ylabel("distinct experts per layer (mean over layers)")
    ax.set_title("Expert-union growth, tiny Qwen3-MoE, held-out stdlib text")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _f(x: float, digits: int = 3) -> str:
    return f"{x:.{digits}f}"


def render(m: dict) -> str:
    """The report's markdown from the measurements (``reports/tiny-model/measurements.json``)."""
    lines = _models_section(m) + _loss_section(m) + _routing_section(m["routing"])
    lines += _union_section(m["routing"]) + _agreement_section(m["agreement"])
    return "\n".join(lines)


def _models_section(m: dict) -> list[str]:
    man = m["manifest"]
    plan = man["plan"]
    t, d = plan["target"], plan["drafter"]
    return [
        "# The embedded tiny model: does it behave like a trained MoE?",
        "",
        "Regenerate: `python -m hwprobe.training.report` (reads `hwprobe/tiny/model/`; CPU, about a minute).",
        "Retrain: `python -m hwprobe.training.train_tiny --out hwprobe/tiny/model` (see `docs/tiny-model.md`).",
        "All numbers below are measured on the real trained checkpoints and real held-out text"
        " (Python stdlib files never seen in training); nothing here is synthetic.",
        "",
        "## Models",
        "",
        "| | architecture | parameters | on disk |",
        "|---|---|---:|---:|",
        f"| target | Qwen3-MoE, {t['num_hidden_layers']} layers, hidden {t['hidden_size']}, "
        f"{t['num_experts']} experts (width {t['moe_intermediate_size']}) top-{t['num_experts_per_tok']} "
        f"in every layer, vocab {plan['vocab_size']} | {man['target']['parameters']:,} | "
        f"{m['sizes_bytes']['target'] / 1e6:.1f} MB |",
        f"| drafter | dense Qwen3, {d['num_hidden_layers']} layers, hidden {d['hidden_size']}, "
        f"MLP {d['intermediate_size']}, same tokenizer | {man['drafter']['parameters']:,} | "
        f"{m['sizes_bytes']['drafter'] / 1e6:.1f} MB |",
        "",
        f"Training: seed {man['seed']}, {man['train_tokens']:,} training tokens, "
        f"batch {plan['batch_size']} × {plan['seq_len']} tokens; target {man['target']['steps_done']} steps "
        f"in {man['target']['seconds'] / 60:.1f} min, drafter {man['drafter']['steps_done']} steps in "
        f"{man['drafter']['seconds'] / 60:.1f} min (distilled from the target, weight {plan['distill_weight']})"
        + (" — cut short by the time budget; `train_tiny --schedule-from` with this run's log repeats it "
           "step for step (bit-identical weights, docs/tiny-model.md)"
           if man["target"]["truncated"] or man["drafter"]["truncated"] else "")
        + f"; CPU threads: {man['threads']}, torch {man['versions']['torch']}, "
        f"transformers {man['versions']['transformers']}.",
        "Loss curve: [tiny-model/loss_curve.png](tiny-model/loss_curve.png); per-step log:"
        " [hwprobe/tiny/model/training_log.json](../hwprobe/tiny/model/training_log.json)"
        " (shipped with the model, not copied here).",
        "",
    ]


def _loss_section(m: dict) -> list[str]:
    man, loss = m["manifest"], m["losses"]
    plan = man["plan"]
    return [
        "## Held-out loss",
        "",
        f"Cross-entropy in nats per token over all {man['heldout_tokens']:,} held-out tokens "
        f"({man['heldout_windows']} windows of {plan['seq_len']}).",
        "",
        "| model | held-out CE | vs unigram |",
        "|---|---:|---:|",
        f"| unigram baseline (add-one, training counts) | {_f(loss['unigram'])} | — |",
        f"| target at random init (first {ROUTING_WINDOWS} windows) | {_f(loss['random_init_target'])} | "
        f"{_f(loss['random_init_target'] - loss['unigram'], 2)} |",
        f"| **target, trained** | **{_f(loss['target'])}** | {_f(loss['target'] - loss['unigram'], 2)} |",
        f"| drafter, trained | {_f(loss['drafter'])} | {_f(loss['drafter'] - loss['unigram'], 2)} |",
        "",
        f"Recorded at the end of training: target {_f(man['target']['heldout_ce'])}, drafter "
        f"{_f(man['drafter']['heldout_ce'])} (recomputed here after a save/load round trip).",
        "",
    ]


def _routing_section(rt: dict) -> list[str]:
    n, k = rt["trained"]["num_experts"], rt["trained"]["top_k"]
    lines = [
        "## Routing statistics, trained vs random init",
        "",
        f"Router top-{k} choices of {n} experts on the first {ROUTING_WINDOWS} held-out windows "
        f"({rt['trained']['tokens']:,} tokens).  Reuse: |S_t ∩ S_t+1|/k for adjacent tokens "
        f"(independent routing: k/N = {_f(k / n)}).  Entropy: of expert-selection frequencies, over "
        f"log N (1 = uniform).  Top-⅛ share: selections taken by the {max(1, n // 8)} most used experts "
        f"(uniform: 0.125).  Max/mean: the busiest expert's load over the mean load.  The random-init "
        "model is not independent routing: its router already sees the token embeddings, so its routes "
        "are a function of the tokens, and repeated or similar adjacent tokens share experts.",
        "",
        "| layer | reuse trained | reuse random | entropy trained | entropy random "
        "| top-⅛ share trained | top-⅛ share random | max/mean trained | max/mean random |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    rows = list(zip(rt["trained"]["layers"], rt["random_init"]["layers"]))
    for i, (a, b) in enumerate(rows):
        lines.append(f"| {i} | {_f(a['reuse'])} | {_f(b['reuse'])} | {_f(a['entropy'])} | {_f(b['entropy'])} "
                     f"| {_f(a['top_eighth_share'])} | {_f(b['top_eighth_share'])} "
                     f"| {_f(a['max_over_mean_load'], 2)} | {_f(b['max_over_mean_load'], 2)} |")
    a, b = rt["trained"]["mean"], rt["random_init"]["mean"]
    lines.append(f"| mean | {_f(a['reuse'])} | {_f(b['reuse'])} | {_f(a['entropy'])} | {_f(b['entropy'])} "
                 f"| {_f(a['top_eighth_share'])} | {_f(b['top_eighth_share'])} "
                 f"| {_f(a['max_over_mean_load'], 2)} | {_f(b['max_over_mean_load'], 2)} |")
    return lines


def _union_section(rt: dict) -> list[str]:
    a, b = rt["trained"]["mean"], rt["random_init"]["mean"]

    def at(d: dict, key: str, t: int) -> float:
        v = d[key]
        return v[t] if t in v else v[str(t)]

    spans = sorted(int(t) for t in a["union_consecutive"])
    lines = [
        "",
        "### Expert-union growth",
        "",
        "Distinct experts per layer among t tokens (mean over layers): t consecutive held-out tokens, "
        "t tokens at random positions (popularity skew kept, locality removed), and independent uniform "
        "routing N[1−(1−k/N)^t].  A speculative tree's verification loads this union.",
        "",
        "| t | independent | trained, consecutive | trained, random positions | random init, consecutive |",
        "|---:|---:|---:|---:|---:|",
    ]
    for s in spans:
        lines.append(f"| {s} | {_f(at(a, 'union_independent', s), 2)} | {_f(at(a, 'union_consecutive', s), 2)} "
                     f"| {_f(at(a, 'union_random_positions', s), 2)} | {_f(at(b, 'union_consecutive', s), 2)} |")
    lines += [
        "",
        "![union growth](tiny-model/union_growth.png)",
        "",
    ]
    return lines


def _agreement_section(ag: dict) -> list[str]:
    return [
        "## Greedy-draft agreement per position",
        "",
        f"{ag['prefixes']} held-out prefixes of {ag['prefix_len']} tokens; the drafter drafts a greedy chain "
        f"of {ag['depth']}; position j is accepted when it and every earlier position equal the target's "
        "greedy tokens.  α_j = P(accept j | accepted j−1).",
        "",
        "| position j | " + " | ".join(str(j + 1) for j in range(ag["depth"])) + " |",
        "|---|" + "---:|" * ag["depth"],
        "| P(accept j) | " + " | ".join(_f(p) for p in ag["p_accept"]) + " |",
        "| α_j | " + " | ".join(_f(p) for p in ag["alpha"]) + " |",
        "",
        f"Mean accepted chain length: {_f(ag['mean_accepted'], 2)} of {ag['depth']}.  Teacher-forced top-1 "
        f"agreement on the real text (no chaining): {_f(ag['teacher_forced_top1'])}.",
        "",
        "Raw numbers: [tiny-model/measurements.json](tiny-model/measurements.json).",
        "",
    ]


def write_report(model_dir: Path = DEFAULT_MODEL_DIR, out: Path = DEFAULT_OUT,
                 threads: int = THREADS) -> Path:
    m = measure(model_dir, threads)
    assets = out.parent / out.stem
    assets.mkdir(parents=True, exist_ok=True)
    # the per-step log stays with the model it describes (the report links to it)
    _write_atomic(assets / "loss_curve.png", (model_dir / "loss_curve.png").read_bytes())
    _write_atomic(assets / "measurements.json", (json.dumps(m, indent=1) + "\n").encode())
    tmp_png = assets / f".union_growth.{os.getpid()}.png"
    plot_union_growth(tmp_png, m["routing"])
    os.replace(tmp_png, assets / "union_growth.png")
    _write_atomic(out, render(m).encode())
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hwprobe.training.report",
                                 description="Measure the embedded tiny model and write its report.")
    ap.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL_DIR)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--threads", type=int, default=THREADS, help="torch CPU threads [2]")
    args = ap.parse_args(argv)
    for need in ("manifest.json", "target", "drafter", "training_log.json", "loss_curve.png"):
        if not (args.model_dir / need).exists():
            print(f"report: error: {args.model_dir / need} is missing (train first: "
                  "python -m hwprobe.training.train_tiny --out DIR)", file=sys.stderr)
            return 2
    print(write_report(args.model_dir, args.out, args.threads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
