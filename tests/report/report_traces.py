"""Small random traces for the report tests."""

from __future__ import annotations

from factories import random_trace


def small(seed: int, dataset: str):
    return random_trace(seed, num_requests=3, output_len=(6, 12), pool_nodes=10, L=3, N=12, k=2,
                        dataset=dataset)
