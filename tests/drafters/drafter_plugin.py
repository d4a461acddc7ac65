"""A drafter named as module:Name in the tests (docs/extending.md's example)."""

from __future__ import annotations

from simmoe.drafters.base import DrafterBase, chain_shape
from simmoe.drafters.cost import head_ms, roofline_ms


class Medusa4(DrafterBase):
    name = "medusa4"
    summary = "four heads on the last hidden state, a chain"
    PARAMS = (("first", float, 0.7, "acceptance of the first token"),)

    def pool_shape(self):
        return chain_shape(4)

    def level_rate(self, level):
        return self["first"] * 0.8 ** (level - 1)

    def drafting_ms(self, physical, levels, requests=1):
        h = physical.model.hidden_size
        return 0.0 if levels <= 0 else levels * (roofline_ms(physical, 2 * h * h, requests)
                                                 + head_ms(physical, requests))
