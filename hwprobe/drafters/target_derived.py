"""For tests: a drafter derived from the target itself with controllable agreement.

It drafts with (an unmodified copy of) the target model, so its top child
equals the target's greedy token; then, for each expanded node, with
probability ``1 - agreement`` (decided by a generator seeded from ``seed`` and
the node's token path, so reruns are identical) the top child is replaced by
a different random token.  ``agreement = 1`` accepts every first-child path;
``agreement = 0`` makes every first child wrong.
"""

from __future__ import annotations

import zlib

import numpy as np

from hwprobe.drafters.draft_lm import DraftLMDrafter


class TargetDerivedDrafter(DraftLMDrafter):
    name = "target"

    def __init__(self, target, *, agreement: float = 0.8, seed: int = 0):
        super().__init__(target)
        self.agreement, self.seed = float(agreement), int(seed)
        self.vocab = int(target.config.vocab_size)

    def children(self, context, pool, frontier, k):
        out = super().children(context, pool, frontier, k)
        for i, f in enumerate(frontier):
            seq = list(context) + (pool.path_tokens(f) if f >= 0 else [])
            key = zlib.crc32(np.asarray(seq, dtype=np.int64).tobytes()) ^ self.seed
            rng = np.random.default_rng(key)
            if rng.random() >= self.agreement:
                toks, qs = out[i]
                wrong = int(rng.integers(self.vocab - 1))
                wrong += wrong >= toks[0]             # any token but the target's
                toks = [wrong] + [t for t in toks if t != wrong][: k - 1]
                out[i] = (toks, qs)
        return out
