"""What every built-in drafter shares: typed parameters, a chain's pool shape, a per-level acceptance profile.

A drafter's parameters are declared once, as ``(name, type, default, help)``
rows; values come as strings from the command line or as numbers from a
trace's metadata, and an unknown name or a value out of range is one
:class:`~simmoe.errors.SimmoeError` line naming the drafter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from simmoe.errors import SimmoeError
from simmoe.trace.schema import PoolShape

# (name, type, default, help); a default of None: required where it is used (a cost's draft model)
Param = tuple[str, type, Any, str]


class DrafterBase:
    """Parameters by declaration; subclasses give the pool shape, the acceptance model and the cost."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    chain: ClassVar[bool] = True
    PARAMS: ClassVar[tuple[Param, ...]] = ()

    def __init__(self, params: Mapping[str, Any] | None = None):
        given = dict(params or {})
        known = {p[0]: p for p in self.PARAMS}
        unknown = sorted(set(given) - set(known))
        if unknown:
            names = ", ".join(known) or "none"
            raise SimmoeError(f"drafter {self.name}: unknown parameter {unknown[0]!r} (its parameters: {names})")
        self.memo: dict[Any, Any] = {}   # costs already computed (a drafter's values never change)
        self.values: dict[str, Any] = {}
        for name, typ, default, _ in self.PARAMS:
            value = given.get(name, default)
            if value is not None:
                try:
                    value = typ(value)
                except (TypeError, ValueError):
                    raise SimmoeError(f"drafter {self.name}: parameter {name}={value!r} is not "
                                      f"{'an integer' if typ is int else 'a number' if typ is float else 'text'}"
                                      ) from None
            self.values[name] = value
        self.check()

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def check(self) -> None:
        """Refuse values out of range (one line); the subclass's rules."""

    def refuse(self, name: str, why: str) -> SimmoeError:
        return SimmoeError(f"drafter {self.name}: parameter {name}={self.values[name]!r} {why}")

    def parameters(self) -> dict[str, Any]:
        """Every parameter with its value (what a trace's metadata records)."""
        return dict(self.values)

    def pool_shape(self) -> PoolShape:
        raise NotImplementedError

    def level_mean(self, z: np.ndarray, level: int, mean_z: float) -> np.ndarray:
        """The acceptance model: the workload's predictability scaled so level ``level``'s mean q is its rate."""
        return np.asarray(z, dtype=np.float64) * (self.level_rate(level) / max(mean_z, 1e-9))

    def level_rate(self, level: int) -> float:
        """The acceptance rate of level ``level`` (1 = the first drafted token)."""
        raise NotImplementedError

    def drafting_ms(self, physical: Any, levels: int, requests: int = 1) -> float:
        raise NotImplementedError


def chain_shape(depth: int) -> PoolShape:
    """A chain of ``depth`` drafted tokens: one child per level, every node verifiable."""
    return PoolShape(expand_topk=1, depth=int(depth), max_nodes=int(depth), K=int(depth))


def tree_shape(topk: int, depth: int) -> PoolShape:
    """EAGLE's expansion with ``topk`` children per node and ``topk`` nodes expanded per level, uncapped."""
    sizes, expanded = [], 1
    for _ in range(int(depth)):
        sizes.append(expanded * topk)
        expanded = min(topk, sizes[-1])
    n = sum(sizes)
    return PoolShape(expand_topk=int(topk), depth=int(depth), max_nodes=n, K=n)


def conditional_rates(cumulative: tuple[float, ...]) -> tuple[float, ...]:
    """Per-position acceptance rates from a published curve P(at least j drafted tokens accepted), j = 0, 1, ..."""
    return tuple(cumulative[j] / cumulative[j - 1] for j in range(1, len(cumulative)))
