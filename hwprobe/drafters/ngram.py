"""Prompt-lookup drafter: continuations retrieved from earlier context, no draft model.

As in prompt lookup decoding and Lookahead decoding's n-gram pool: for the
path's last ``n`` tokens (``n = max_n .. 1``, longest first), every earlier
occurrence in the context votes for the token that followed it; votes of
longer matches count more (weight ``n``).  The children's probabilities are
the normalised votes.  Cost per node: O(len(context) · max_n).
"""

from __future__ import annotations

from collections import defaultdict

from hwprobe.drafters.base import Drafter


class NGramDrafter(Drafter):
    name = "ngram"

    def __init__(self, max_n: int = 3, window: int = 4096):
        self.max_n, self.window = int(max_n), int(window)

    def _votes(self, seq: list[int]) -> dict[int, float]:
        votes: dict[int, float] = defaultdict(float)
        hist = seq[-self.window:]
        L = len(hist)
        for n in range(min(self.max_n, L - 1), 0, -1):
            tail = hist[L - n:]
            for i in range(L - n - 1, -1, -1):   # occurrences ending before the tail
                if hist[i:i + n] == tail:
                    votes[hist[i + n]] += n
        return votes

    def children(self, context, pool, frontier, k):
        out = []
        for f in frontier:
            seq = list(context) + (pool.path_tokens(f) if f >= 0 else [])
            votes = self._votes(seq)
            total = sum(votes.values())
            ranked = sorted(votes.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
            out.append(([t for t, _ in ranked], [v / total for _, v in ranked]))
        return out


class LookaheadDrafter(NGramDrafter):
    """Lookahead's pool shape on the same retrieval: ``k`` branches at the root, each continued as a chain.

    The root's children are the ``k`` best-voted continuations; every deeper
    node gets its single best continuation, so a pool grown with
    :func:`lookahead_spec` is ``branches`` chains of ``branch_length`` tokens,
    the shape of the simulator's ``lookahead`` drafter (simmoe.drafters).
    """

    name = "lookahead"

    def children(self, context, pool, frontier, k):
        out = super().children(context, pool, frontier, k)
        return [(toks, probs) if f < 0 else (toks[:1], probs[:1]) for f, (toks, probs) in zip(frontier, out)]


def lookahead_spec(branches: int, branch_length: int):
    """The pool spec that grows ``branches`` chains of ``branch_length`` tokens with :class:`LookaheadDrafter`."""
    from hwprobe.pool import PoolSpec

    return PoolSpec(expand_topk=branches, expand_nodes=branches, depth=branch_length,
                    max_nodes=branches * branch_length)
