"""Example plugins for simmoe: a selector, a cache policy, a prefetch policy and placements (see docs/extending.md)."""
