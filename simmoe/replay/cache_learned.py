"""``learned``: a reuse-distance predictor trained on routing history (CECAR's idea, with LightGBM).

CECAR (repository malmong/CECAR, ``Src/Train/ML_Train.py``) trains, per
layer, a small network that maps each expert's recent routing (its recency
and its use count over a window) to its Belady reuse distance — the number of
steps until it is demanded again — and evicts the expert of largest
predicted distance.  ``learned`` does the same with a gradient-boosted
regressor (LightGBM) shared by all layers:

* **features** of (layer ℓ, expert e) after forward t: recency (forwards
  since its last demand, capped at :attr:`Learned.recency_cap`), its demands
  in the last :attr:`Learned.window` forwards, the bucket ⌊log2(1 + all its
  demands so far)⌋, and ℓ;
* **target**: log(1 + d), d the forwards until its next demand, capped at
  :attr:`Learned.horizon` (rows whose next demand lies past the end of the
  training sequence, less than a horizon away, are left out);
* **training data**: the requests of the trace *outside* the replay — the
  first :attr:`Learned.train_requests` (default 20) of those after the
  replayed ones — decoded one token per forward (prefill, then each output
  position's root routes), :attr:`Learned.rows_per_forward` experts sampled
  per forward with the replay's seed.  The learner never reads a replayed
  request (``trained_on`` lists what it read).

The features are discrete, so after training the model is evaluated once on
the whole feature grid; during the replay a score is a table look-up
(−predicted log distance), O(L·N) per forward.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from simmoe.api import CacheShape, ForwardEvent
from simmoe.errors import SimmoeError


class Learned:
    """Evict the expert with the largest predicted reuse distance (module docstring)."""

    name: ClassVar[str] = "learned"
    train_requests: ClassVar[int] = 20
    min_train_requests: ClassVar[int] = 4
    recency_cap: ClassVar[int] = 64
    window: ClassVar[int] = 16
    count_buckets: ClassVar[int] = 16
    horizon: ClassVar[int] = 128
    rows_per_forward: ClassVar[int] = 256

    def __init__(self, train_requests: int | None = None):
        self._want = int(self.train_requests if train_requests is None else train_requests)
        self.trained_on: tuple[int, ...] = ()

    # -- training -------------------------------------------------------------------
    def reset(self, shape: CacheShape) -> None:
        L, N = shape.num_layers, shape.num_experts
        ids = self.training_requests(shape)
        self.trained_on = ids
        seq = training_demands(shape.trace, ids, L, N)
        self._table = self._fit(seq, L, N, int(shape.seed))
        self._track = _Features(L, N, self.window, self.recency_cap, self.count_buckets)

    @classmethod
    def check(cls, shape: CacheShape) -> None:
        """Refuse, before any work, a replay that leaves too few requests to train on."""
        cls().training_requests(shape)

    def training_requests(self, shape: CacheShape) -> tuple[int, ...]:
        """The requests to train on: the first ``train_requests`` of the trace outside the replay."""
        need = self.min_train_requests
        if self._want < need:
            raise SimmoeError(f"cache policy 'learned' was asked to train on {self._want} request"
                              f"{'s' if self._want != 1 else ''}; it needs at least {need}")
        if shape.trace is None:
            raise SimmoeError("cache policy 'learned' needs the replayed trace to train on (CacheShape.trace)")
        total = len(shape.trace.requests)
        replayed = set(int(r) for r in shape.requests)
        outside = [r for r in range(total) if r not in replayed]
        if len(outside) < need:
            raise SimmoeError(f"cache policy 'learned' trains only on requests the replay does not cover: the "
                              f"trace has {total}, the replay covers {len(replayed)}, leaving {len(outside)} "
                              f"(it needs at least {need}); replay fewer with --requests")
        return tuple(outside[:self._want])

    def _fit(self, seq: list[np.ndarray], L: int, N: int, seed: int) -> np.ndarray:
        """Train on the demand sequence; return the predicted log distance over the feature grid."""
        import lightgbm

        X, y = self._rows(seq, L, N, seed)
        if len(y) < 2:
            raise SimmoeError("cache policy 'learned': the training requests give too few forwards to learn from")
        model = lightgbm.LGBMRegressor(n_estimators=80, num_leaves=31, learning_rate=0.1, min_child_samples=20,
                                       random_state=seed, n_jobs=1, deterministic=True, force_row_wise=True,
                                       verbose=-1)
        model.fit(X, y)
        grid = self._grid(L)
        return np.asarray(model.predict(grid)).reshape(self.recency_cap + 1, self.window + 1, self.count_buckets, L)

    def _grid(self, L: int) -> np.ndarray:
        axes = np.meshgrid(np.arange(self.recency_cap + 1), np.arange(self.window + 1),
                           np.arange(self.count_buckets), np.arange(L), indexing="ij")
        return np.stack([a.reshape(-1) for a in axes], axis=1).astype(np.float64)

    def _rows(self, seq: list[np.ndarray], L: int, N: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Sampled (features, log1p distance) rows of the sequence: features forwards, targets backwards."""
        rng = np.random.default_rng((seed, 0x1EA2))
        track = _Features(L, N, self.window, self.recency_cap, self.count_buckets)
        picks, feats = [], []
        for d in seq:
            track.observe(d)
            seen = np.flatnonzero(track.last.reshape(-1) >= 0)
            pick = rng.choice(seen, size=min(self.rows_per_forward, len(seen)), replace=False) if len(seen) else seen
            picks.append(np.sort(pick))
            feats.append(track.features(picks[-1]))
        T = len(seq)
        nxt = np.full(L * N, -1, dtype=np.int64)
        X, y = [], []
        for t in range(T - 1, -1, -1):          # nxt: the next demand after forward t
            pick = picks[t]
            dist = nxt[pick] - t
            known = nxt[pick] >= 0
            keep = known | (T - 1 - t >= self.horizon)
            d = np.where(known, np.minimum(dist, self.horizon), self.horizon)
            X.append(feats[t][keep])
            y.append(np.log1p(d[keep].astype(np.float64)))
            nxt[np.flatnonzero(seq[t].reshape(-1))] = t
        if not X:
            return np.zeros((0, 4)), np.zeros(0)
        return np.concatenate(X), np.concatenate(y)

    # -- the replay ---------------------------------------------------------------------
    def observe(self, event: ForwardEvent) -> None:
        self._track.observe(event.demand)

    def inserted(self, pairs: np.ndarray) -> None:
        self._track.touch(pairs)

    def scores(self) -> np.ndarray:
        return -self._track.lookup(self._table)


class _Features:
    """Incremental features of every (layer, expert): recency, window count, count bucket."""

    def __init__(self, L: int, N: int, window: int, recency_cap: int, buckets: int):
        self.L, self.N, self.W, self.R, self.B = L, N, window, recency_cap, buckets
        self.last = np.full((L, N), -1, dtype=np.int64)
        self.count = np.zeros((L, N), dtype=np.int64)
        self.recent = np.zeros((L, N), dtype=np.int64)
        self.ring = np.zeros((window, L, N), dtype=bool)
        self.t = 0
        self.layer = np.repeat(np.arange(L, dtype=np.int64)[:, None], N, axis=1)

    def observe(self, demand: np.ndarray) -> None:
        slot = self.t % self.W
        self.recent -= self.ring[slot]
        self.ring[slot] = demand
        self.recent += demand
        self.count += demand
        self.last[demand] = self.t
        self.t += 1

    def touch(self, pairs: np.ndarray) -> None:
        """A prefetched expert counts as just used (no demand counted)."""
        self.last.reshape(-1)[pairs] = self.t - 1

    def _columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rec = np.where(self.last >= 0, np.minimum(self.t - 1 - self.last, self.R), self.R)
        bucket = np.minimum(np.floor(np.log2(1.0 + self.count)).astype(np.int64), self.B - 1)
        return rec, self.recent, bucket

    def features(self, flat: np.ndarray) -> np.ndarray:
        rec, win, bucket = self._columns()
        cols = [rec.reshape(-1)[flat], win.reshape(-1)[flat], bucket.reshape(-1)[flat], self.layer.reshape(-1)[flat]]
        return np.stack(cols, axis=1).astype(np.float64)

    def lookup(self, table: np.ndarray) -> np.ndarray:
        rec, win, bucket = self._columns()
        return table[rec, win, bucket, self.layer]


def training_demands(trace: Any, ids: tuple[int, ...], L: int, N: int) -> list[np.ndarray]:
    """One token per forward for each request in ``ids``: its prefill, then each output position's routes."""
    from simmoe.replay.schedule import prefill_demand

    seq: list[np.ndarray] = []
    layers = np.arange(L)[:, None]
    for r in ids:
        seq.append(np.asarray(prefill_demand(trace, r), dtype=bool))
        rows = np.flatnonzero(np.asarray(trace.pos_request) == r)
        for row in rows:
            d = np.zeros((L, N), dtype=bool)
            d[layers, np.asarray(trace.root_routes[row])] = True
            seq.append(d)
    return seq
