"""Example plugins for simmoe: a selector, a cache policy and a prefetch policy (see docs/extending.md)."""
