"""Route information for selectors: exact routes or a simulated predictor (SpecFit §4.6).

Selectors estimate a subtree's expert union F(S) (Eq. 4) from the routes
``Ê_{ℓ,v}`` supplied to them.  With exact routes these are the recorded
routes.  The simulated predictor of accuracy ``a`` replaces each routed
expert, independently with probability ``1 − a``, by an expert drawn
uniformly from outside the true top-k of that token and layer (§4.6).
Verification always executes the true routes; only selection sees the
prediction.

Predictions are a pure function of ``(seed, position row)``: every selector,
and every worker process of a sweep, sees the same predicted routes for the
same pool, whatever order the positions are visited in.
"""

from __future__ import annotations

import numpy as np

from simmoe.errors import SimmoeError


def check_accuracy(accuracy: float) -> float:
    """Return ``accuracy`` as a float in [0, 1] or raise :class:`SimmoeError`."""
    a = float(accuracy)
    if not (0.0 <= a <= 1.0):
        raise SimmoeError(f"route accuracy must lie in [0, 1], got {accuracy!r}")
    return a


def replace_routes(routes: np.ndarray, num_experts: int, accuracy: float,
                   rng: np.random.Generator) -> np.ndarray:
    """Simulated predictor applied to ``routes [..., k]`` (sorted expert ids per layer).

    Each entry is kept with probability ``accuracy``; otherwise it becomes an
    expert drawn uniformly from the ``num_experts − k`` experts outside the
    true set of its row.  Replacements are independent, so two replaced
    entries of one row may coincide (the predicted set then has fewer than k
    distinct experts, as a real predictor's may).  Returns a new array of the
    same shape and dtype, sorted along the last axis.

    The r-th expert outside a sorted set ``s_0 < … < s_{k−1}`` is found
    without a per-expert loop: start at ``e = r`` and add one for every
    ``s_j ≤ e`` in ascending order.  O(size · k).
    """
    if accuracy >= 1.0 or routes.size == 0:
        return routes.copy()
    k = routes.shape[-1]
    outside = num_experts - k
    if outside <= 0:  # every expert is routed: nothing to substitute
        return routes.copy()
    replace = rng.random(routes.shape) >= accuracy
    r = rng.integers(0, outside, size=routes.shape, dtype=np.int64)
    true = routes.astype(np.int64)
    e = r
    for j in range(k):
        e = e + (true[..., j:j + 1] <= e)
    out = np.where(replace, e, true)
    out.sort(axis=-1)
    return out.astype(routes.dtype)


class RoutePredictor:
    """Routes that selectors see for the pool at a position row.

    ``accuracy == 1`` (the default) returns the recorded routes themselves.
    """

    def __init__(self, num_experts: int, accuracy: float = 1.0, seed: int = 0):
        self.num_experts = int(num_experts)
        self.accuracy = check_accuracy(accuracy)
        self.seed = int(seed)

    @property
    def exact(self) -> bool:
        return self.accuracy >= 1.0

    def predict(self, row: int, root_routes: np.ndarray, node_routes: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
        """Predicted ``(root_routes [L, k], node_routes [n, L, k])`` for position ``row``."""
        if self.exact:
            return root_routes, node_routes
        rng = np.random.default_rng((self.seed, 0x5EED, int(row)))
        both = np.concatenate([root_routes[None], node_routes], axis=0)
        pred = replace_routes(both, self.num_experts, self.accuracy, rng)
        return pred[0], pred[1:]
