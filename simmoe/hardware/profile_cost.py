"""A profile's SpecFit cost model that remembers where it came from (for one-line errors).

:meth:`simmoe.hardware.profile.HardwareProfile.cost_model` returns a
:class:`ProfileCostModel`: the same T̂(S) = b_|S| + βF(S) (Eq. 4) as
``solvers.CostModel`` (equal to it, hashed like it), plus the profile's name
and the physical profile that could supply a longer one, so that a selector
refusing a cost model too short for the trace's K can say why and what to use
instead.  Separate from ``profile.py`` because importing ``solvers`` is slow.
"""

from __future__ import annotations

from solvers.cost import CostModel


class ProfileCostModel(CostModel):
    """``CostModel(b, beta)`` read from profile ``profile``; ``counterpart``: its physical profile (or "").

    ``counterpart`` may be given as a zero-argument callable that finds it: it
    is looked up when first read (only an error message reads it), because
    finding it loads the model and GPU catalogue.
    """

    __slots__ = ("profile", "_counterpart")

    def __init__(self, b, beta, profile: str = "", counterpart=""):
        super().__init__(b, beta)
        self.profile = str(profile)
        self._counterpart = counterpart if callable(counterpart) else str(counterpart or "")

    @property
    def counterpart(self) -> str:
        c = self._counterpart
        if callable(c):
            c = self._counterpart = str(c() or "")
        return c

    def __reduce__(self):
        return (ProfileCostModel, (self.b, self.beta, self.profile, self._counterpart))

    __eq__ = CostModel.__eq__
    __hash__ = CostModel.__hash__
