"""A prefetch policy: while the drafter drafts, copy the experts the roots are predicted to use."""

from __future__ import annotations

import numpy as np

from simmoe.api import CacheShape, PrefetchJobs, PrefetchStep


class Roots:
    """Every request's root token is verified whatever the selector picks: prefetch its predicted experts.

    Queued when the step begins (level 0), layer after layer; the copy engine
    skips what is already on the device and stops when the forward starts.
    """

    name = "roots"

    def reset(self, shape: CacheShape) -> None:
        self.N = shape.num_experts

    def drafting(self, step: PrefetchStep) -> PrefetchJobs:
        roots = np.asarray(step.roots, dtype=np.int64)                  # [requests, L, k]
        layer = np.arange(roots.shape[1], dtype=np.int64)[None, :, None]
        pairs = (layer * self.N + roots).reshape(-1)                    # flat layer·N + expert
        return PrefetchJobs(pairs, np.zeros(len(pairs), dtype=np.int64))

    def layers(self, step: PrefetchStep) -> None:
        return None
