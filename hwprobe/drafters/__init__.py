"""Drafters: anything that proposes the top-k children of pool nodes.

One interface (:class:`Drafter`); :func:`hwprobe.pool.grow_pool` builds the
pool level by level from it.  Implementations: :mod:`.ngram` (prompt lookup,
no model), :mod:`.draft_lm` (a small causal LM sharing the tokenizer),
:mod:`.eagle3` (an EAGLE-3 head), :mod:`.target_derived` (tests: agreement
with the target controlled by a rate), :mod:`.random_draft` (random tokens, for
random-weight models: real pool shapes, meaningless acceptance).
"""

from __future__ import annotations

from hwprobe.drafters.base import Drafter  # noqa: F401  (re-exported: the interface)


def make_drafter(kind: str, *, target=None, path=None, device=None, **kw) -> Drafter:
    """A drafter by name: ``ngram``, ``lookahead``, ``draft-lm``, ``eagle3`` (both ``path``), ``random``, ``target``."""
    from hwprobe.cli import HwprobeError

    kw_dtype = kw.pop("dtype", None)     # the draft LM's weights dtype (the target's --dtype)
    if kind == "ngram":
        from hwprobe.drafters.ngram import NGramDrafter
        return NGramDrafter(**kw)
    if kind == "lookahead":   # the n-gram retrieval in Lookahead's shape (a pool spec of branches x length)
        from hwprobe.drafters.ngram import LookaheadDrafter
        return LookaheadDrafter(**kw)
    if kind == "draft-lm":
        from hwprobe.drafters.draft_lm import DraftLMDrafter
        return DraftLMDrafter.from_dir(path, device=device, dtype=kw_dtype)
    if kind == "eagle3":
        from hwprobe.drafters.eagle3 import Eagle3Drafter
        return Eagle3Drafter.from_dir(path, target=target, device=device)
    if kind == "random":
        from hwprobe.drafters.random_draft import RandomDrafter
        return RandomDrafter(int(target.config.vocab_size), **kw)
    if kind == "target":
        from hwprobe.drafters.target_derived import TargetDerivedDrafter
        return TargetDerivedDrafter(target, **kw)
    raise HwprobeError(f"unknown drafter {kind!r}; known: ngram, lookahead, draft-lm, eagle3, random, target")
