"""A drafter of random tokens, for random-weight models where no drafter is meaningful.

Each node's children are distinct random tokens with Dirichlet-distributed
probabilities, drawn from a generator seeded by ``seed`` and the node's
token path (reruns are identical).  It gives pools of the full shape, so
timings (copies, unions, tree sizes) are real while acceptance is not.
"""

from __future__ import annotations

import zlib

import numpy as np

from hwprobe.drafters.base import Drafter


class RandomDrafter(Drafter):
    name = "random"

    def __init__(self, vocab_size: int, *, seed: int = 0, alpha: float = 0.3):
        self.vocab, self.seed, self.alpha = int(vocab_size), int(seed), float(alpha)

    def children(self, context, pool, frontier, k):
        out = []
        for f in frontier:
            seq = list(context) + (pool.path_tokens(f) if f >= 0 else [])
            rng = np.random.default_rng(zlib.crc32(np.asarray(seq, np.int64).tobytes()) ^ self.seed)
            toks = rng.choice(self.vocab, size=min(k, self.vocab), replace=False)
            q = np.sort(rng.dirichlet([self.alpha] * (len(toks) + 1))[: len(toks)])[::-1]
            out.append(([int(t) for t in toks], [float(max(x, 1e-6)) for x in q]))
        return out
