"""The prefetch policies' names and their check, apart from the prefetch model (:mod:`simmoe.replay.prefetch`).

``simmoe replay`` lists and checks ``--prefetch`` on every run; importing the
model itself is left to runs that prefetch.
"""

from __future__ import annotations

from simmoe.errors import SimmoeError

PREFETCH_POLICIES = ("none", "draft", "next-layer", "oracle")


def check_prefetch(policy: str) -> str:
    """Return ``policy`` if it names a prefetch policy, else raise :class:`SimmoeError` (one line)."""
    if policy not in PREFETCH_POLICIES:
        raise SimmoeError(f"unknown prefetch policy {policy!r}; choose one of {', '.join(PREFETCH_POLICIES)}")
    return policy
