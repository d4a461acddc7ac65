"""Admission: continuous batching of B requests (B = 1 is one request at a time).

B slots hold the first B requests of the trace; when a request commits its
last token its slot takes the next request (continuous batching: EVICT App.
C.5's vLLM setting).  A newly admitted request's prefill is its own forward
before the step in which it first decodes (no chunked prefill); the others
wait.  At B = 1 this is the replay of SpecFit App. B: each request's prefill,
then its cycles, request after request.
"""

from __future__ import annotations

import numpy as np


class ContinuousBatching:
    """The admission stage: which requests a step serves and when each request's prefill runs.

    ``output_len[r]``: tokens request r commits in all.  Per step, call
    :meth:`admit` (the requests admitted now, whose prefills come first), then
    :meth:`active` (slot order), then :meth:`commit` for each request, then
    :meth:`release`.  O(B) per step.
    """

    def __init__(self, output_len: np.ndarray, batch: int):
        self.output_len = [int(n) for n in output_len]
        self.cursor = [0] * len(self.output_len)    # output position of each request
        self.slots: list[int | None] = [None] * int(batch)
        self.next = 0

    def admit(self) -> list[int]:
        """Fill free slots with the next requests, in slot order; the requests admitted."""
        out = []
        for k, r in enumerate(self.slots):
            if r is None and self.next < len(self.output_len):
                self.slots[k] = self.next
                out.append(self.next)
                self.next += 1
        return out

    def active(self) -> list[int]:
        """Requests decoding in this step, in slot order (empty: the replay is over)."""
        return [r for r in self.slots if r is not None]

    def commit(self, r: int, tokens: int) -> None:
        self.cursor[r] += tokens

    def left(self, r: int) -> int:
        """Tokens request ``r`` has still to commit."""
        return self.output_len[r] - self.cursor[r]

    def release(self) -> None:
        """A finished request frees its slot."""
        for k, r in enumerate(self.slots):
            if r is not None and self.cursor[r] >= self.output_len[r]:
                self.slots[k] = None
