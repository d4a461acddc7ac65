"""Shared command-line plumbing: model, offload backend and drafter from parsed arguments."""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass

from hwprobe.cli import HwprobeError

DTYPES = ("float32", "bfloat16", "float16")   # torch dtype names; torch is imported lazily


def add_model_args(p, *, drafter: bool = True) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", metavar="DIR|tiny", help="local Hugging Face model directory, or 'tiny'")
    src.add_argument("--config", metavar="NAME",
                     help="random-weight model from a named config: tiny-random, qwen3-30b-a3b-<N>layers")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cuda, cuda:N or cpu")
    p.add_argument("--dtype", default="auto", choices=["auto", *DTYPES],
                   help="weights dtype (auto: bfloat16 on cuda, float32 on cpu)")
    p.add_argument("--slots", type=int, default=48, help="expert cache slots per layer (0 = cleared every forward)")
    p.add_argument("--inflight", type=int, default=2, help="copies in flight ahead of compute (default 2)")
    p.add_argument("--attn", default="auto", choices=["auto", "sdpa", "eager"],
                   help="attention implementation (auto: sdpa, or eager where the architecture needs it)")
    p.add_argument("--seed", type=int, default=0, help="seed of random weights")
    if drafter:
        p.add_argument("--drafter", default="auto", choices=["auto", "ngram", "lookahead", "draft-lm", "eagle3",
                                                             "random", "target"],
                       help="auto: the tiny drafter for --model tiny, random for --config (random weights), "
                       "else ngram; target: a copy of the target whose top child is wrong with probability "
                       "1 - --agreement (controllable acceptance)")
        p.add_argument("--agreement", type=float, default=0.8,
                       help="agreement rate of the target drafter (default 0.8)")
        p.add_argument("--drafter-dir", metavar="DIR",
                       help="draft LM or EAGLE-3 head directory ('tiny' for the tiny drafter, "
                       "or with --drafter eagle3 the tiny target's EAGLE-3 head; also 'tiny-eagle3')")
        p.add_argument("--pool-topk", type=int, default=2, help="children per expanded node (default 2)")
        p.add_argument("--pool-expand", type=int, default=2, help="nodes expanded per level (default 2)")
        p.add_argument("--depth", type=int, default=5, help="pool depth (default 5)")
        p.add_argument("--max-nodes", type=int, default=18, help="pool node cap (default 18)")


@dataclass
class Session:
    loaded: object
    backend: object
    drafter: object
    device: object
    spec: object

    @property
    def model(self):
        return self.loaded.model


@dataclass
class Plan:
    """What the arguments decide before any model is loaded (checked in a fraction of a second)."""

    device: object
    dtype: object
    model_type: str
    attn: str
    drafter: str | None          # resolved drafter kind
    drafter_dir: object
    spec: object
    source: str                  # model directory or config name, as provenance and resume identify it


def prepare(args, *, drafter: bool = True) -> Plan:
    """Check every model, backend and drafter argument without loading a model; HwprobeError on bad input.

    Commands call this first, so a wrong argument is refused in a fraction of
    a second and before any file is written.
    """
    import torch

    from hwprobe.device import pick_device
    from hwprobe.models import check_architecture, named_config, pick_attn, resolve_model_dir, tiny_dir
    from hwprobe.pool import PoolSpec

    if args.slots < 0 or args.inflight < 1:
        raise HwprobeError("--slots must be >= 0 and --inflight >= 1")
    spec = kind = ddir = None
    if drafter:
        for name in ("pool_topk", "pool_expand", "depth", "max_nodes"):
            if getattr(args, name) < 1:
                raise HwprobeError(f"--{name.replace('_', '-')} must be >= 1")
        if args.drafter == "target" and not 0.0 <= args.agreement <= 1.0:
            raise HwprobeError("--agreement must lie in [0, 1]")
        spec = PoolSpec(args.pool_topk, args.pool_expand, args.depth, args.max_nodes)
    device = pick_device(args.device)
    dtype = getattr(torch, args.dtype) if args.dtype != "auto" else \
        (torch.bfloat16 if device.type == "cuda" else torch.float32)
    if args.config is not None:
        model_type, source = named_config(args.config).model_type, args.config
    else:
        path = resolve_model_dir(args.model, "target")
        model_type, source = check_architecture(path).model_type, str(path)
    attn = pick_attn(model_type, args.attn)
    if drafter:
        kind, ddir = args.drafter, args.drafter_dir
        if kind == "eagle3" and ddir in ("tiny", "tiny-eagle3"):
            ddir = tiny_dir("eagle3")
        if kind == "auto":
            if args.model == "tiny" and _tiny_drafter_present(tiny_dir):
                kind, ddir = "draft-lm", "tiny"
            elif args.config is not None:
                kind = "random"
            else:
                kind = "ngram"
        if kind in ("draft-lm", "eagle3") and ddir is None:
            raise HwprobeError(f"the {kind} drafter needs --drafter-dir DIR")
    return Plan(device, dtype, model_type, attn, kind, ddir, spec, source)


def build(args, *, drafter: bool = True, plan: Plan | None = None) -> Session:
    """Load the target, offload its experts and build the drafter (after :func:`prepare`)."""
    from hwprobe.models import load_target
    from hwprobe.offload import install_offload
    from hwprobe.tree import check_tree

    plan = plan or prepare(args, drafter=drafter)
    quiet = bool(getattr(args, "quiet", False))
    loaded = load_target(args.model, config=args.config, dtype=plan.dtype, seed=args.seed,
                         attn_implementation=plan.attn, quiet=quiet)
    if drafter:
        check_tree(loaded.model)            # record, live and calibrate verify trees
    with oom_is_user_error():
        backend = install_offload(loaded.model, slots=args.slots, device=plan.device, max_inflight=args.inflight)
    d = None
    if drafter:
        from hwprobe.drafters import make_drafter
        with oom_is_user_error():
            if plan.drafter == "target":     # drafts with its own unmodified copy: never through the offloaded experts
                twin = load_target(args.model, config=args.config, dtype=plan.dtype, seed=args.seed,
                                   attn_implementation=plan.attn, quiet=quiet).model.to(plan.device)
                d = make_drafter(plan.drafter, target=twin, agreement=args.agreement, seed=args.seed)
            else:
                d = make_drafter(plan.drafter, target=loaded.model, path=plan.drafter_dir, device=plan.device,
                                 dtype=plan.dtype)
    return Session(loaded, backend, d, plan.device, plan.spec)


def _tiny_drafter_present(tiny_dir) -> bool:
    try:
        return tiny_dir("drafter").is_dir()
    except HwprobeError:
        return False


@contextlib.contextmanager
def oom_is_user_error():
    import torch

    try:
        yield
    except torch.cuda.OutOfMemoryError:
        raise HwprobeError("out of device memory; use fewer --slots (or a smaller model / --config)") from None


class TokenProgress:
    """A rich progress bar on stderr with tokens/s; silent when stderr is not a terminal and quiet."""

    def __init__(self, total: int, label: str, quiet: bool = False):
        self.total, self.label, self.quiet = total, label, quiet
        self.done, self.t0 = 0, time.perf_counter()
        self._p = None

    def __enter__(self):
        if not self.quiet:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._p = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                               TextColumn("{task.fields[tps]}"), TimeElapsedColumn(),
                               console=Console(file=sys.stderr), transient=False)
            self._p.__enter__()
            self._task = self._p.add_task(self.label, total=self.total, tps="")
        return self

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self._p is not None:
            rate = self.done / max(time.perf_counter() - self.t0, 1e-9)
            self._p.update(self._task, advance=n, tps=f"{rate:.1f} tok/s")

    def __exit__(self, *exc):
        if self._p is not None:
            self._p.__exit__(*exc)


def add_prompt_args(p) -> None:
    """The prompt and length options shared by ``record`` and ``live``."""
    p.add_argument("--prompts", required=True, help="Spec-Bench JSONL (question_id, category, turns)")
    p.add_argument("--category", help="only this Spec-Bench category (e.g. math_reasoning, summarization)")
    p.add_argument("--limit", type=int, help="at most this many prompts")
    p.add_argument("--offset", type=int, default=0, help="skip this many prompts first")
    p.add_argument("--max-new-tokens", type=int, default=128, help="output positions per request (default 128)")
    p.add_argument("--max-total-tokens", type=int, help="limit on prompt + output tokens (e.g. 512 for GSM8K)")


def checked_output(args, what: str):
    """``args.out`` as a Path, after the checks shared by ``record`` and ``live``."""
    from pathlib import Path

    from hwprobe.cli import HwprobeError

    out = Path(args.out)
    if args.max_new_tokens < 1:
        raise HwprobeError("--max-new-tokens must be >= 1")
    if not out.parent.is_dir():
        raise HwprobeError(f"cannot write {out}: no such folder {out.parent}")
    if out.is_dir():
        raise HwprobeError(f"{out} is a folder; give a {what} name")
    return out
