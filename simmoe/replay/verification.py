"""Verification: how much of a verified subtree the target accepts.

Greedy (temperature 0): a node is accepted when the target's greedy token
equals it — the trace's recorded agreement; lossless, the committed text is
the target's own.  Sampled (temperature T > 0): the target's draws at T
decide (EVICT §2.1 Eq. 3; :mod:`simmoe.trace.verdicts`), seeded per request
and position, lossless in distribution.  Either way the verdicts are one bool
per pool node, and the accepted path is the longest root-to-node path inside
the verified subtree whose nodes all agree (SpecFit §2).
"""

from __future__ import annotations

import numpy as np

from simmoe.api import Choice
from simmoe.replay.paths import accepted_length, longest_agreeing_prefix  # noqa: F401  (re-exported)


def verdicts_for(trace, temperature: float, seed: int) -> np.ndarray:
    """The verdict per pool node: greedy agreement at T = 0, the target's seeded draws at T > 0."""
    from simmoe.trace.sampling import check_replay_temperature
    from simmoe.trace.verdicts import sampled_agree

    check_replay_temperature(trace, temperature)
    return sampled_agree(trace, float(temperature), seed)


class Verification:
    """The verification stage: accepted draft tokens of a choice at a position row."""

    def __init__(self, trace, verdicts: np.ndarray):
        self.node_ptr = trace.node_ptr
        self.node_parent = trace.node_parent
        self.verdicts = verdicts

    def accepted(self, row: int, choice: Choice) -> int:
        lo, hi = int(self.node_ptr[row]), int(self.node_ptr[row + 1])
        return accepted_length(self.node_parent[lo:hi], self.verdicts[lo:hi], choice.nodes)
