"""A cache policy: first in, first out — an expert leaves in the order it arrived, however often it is used."""

from __future__ import annotations

import numpy as np

from simmoe.api import CacheShape, ForwardEvent


class FIFO:
    """Keep the experts that arrived last (a hit does not refresh an expert's place in the queue)."""

    name = "fifo"

    def reset(self, shape: CacheShape) -> None:
        self.arrival = np.full((shape.num_layers, shape.num_experts), -1, dtype=np.int64)
        self.clock = 0

    def observe(self, event: ForwardEvent) -> None:
        copied = event.demand & ~event.hits            # what this forward copied arrives now
        self.arrival[copied] = self.clock
        self.clock += 1

    def inserted(self, pairs: np.ndarray) -> None:    # prefetched experts arrive too
        self.arrival.reshape(-1)[pairs] = self.clock
        self.clock += 1

    def scores(self) -> np.ndarray:
        return self.arrival                             # larger = arrived later = kept
