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
    :meth:`release`.  O(B) per step that admits or releases, O(1) otherwise.
    """

    def __init__(self, output_len: np.ndarray, batch: int):
        self.output_len = [int(n) for n in output_len]
        self.cursor = [0] * len(self.output_len)    # output position of each request
        self.slots: list[int | None] = [None] * int(batch)
        self.next = 0
        self._active: tuple[int, ...] = ()
        self._free = True       # a slot may be free while requests wait
        self._done = False      # some request committed its last token this step

    def admit(self) -> list[int]:
        """Fill free slots with the next requests, in slot order; the requests admitted."""
        if not self._free:
            return []
        out = []
        for k, r in enumerate(self.slots):
            if r is None and self.next < len(self.output_len):
                self.slots[k] = self.next
                out.append(self.next)
                self.next += 1
        self._free = False      # every slot filled, or no request left to admit
        if out:
            self._active = tuple(r for r in self.slots if r is not None)
        return out

    def active(self) -> tuple[int, ...]:
        """Requests decoding in this step, in slot order (empty: the replay is over)."""
        return self._active

    def commit(self, r: int, tokens: int) -> None:
        self.cursor[r] += tokens
        if self.cursor[r] >= self.output_len[r]:
            self._done = True

    def left(self, r: int) -> int:
        """Tokens request ``r`` has still to commit."""
        return self.output_len[r] - self.cursor[r]

    def release(self) -> None:
        """A finished request frees its slot."""
        if not self._done:
            return
        self._done = False
        for k, r in enumerate(self.slots):
            if r is not None and self.cursor[r] >= self.output_len[r]:
                self.slots[k] = None
        self._free = True
        self._active = tuple(r for r in self.slots if r is not None)
