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
  training sequence, less than a horizon away, are left out); rows with
  equal features are merged (weight = their number, target = their mean);
* **training data**: the requests of the trace *outside* the replay — the
  first :attr:`Learned.train_requests` (default 20) of those after the
  replayed ones — decoded one token per forward (prefill, then each output
  position's root routes), :attr:`Learned.rows_per_forward` experts already
  seen drawn per forward with the replay's seed.  The learner never reads a replayed
  request (``trained_on`` lists what it read).

The features are discrete, so after training the model is evaluated once on
the whole feature grid; during the replay a score is a table look-up
(−predicted log distance), O(L·N) per forward.  The last model is kept for
the next replay of the same trace object with the same training requests and
seed (a sweep over cache sizes trains once).
"""

from __future__ import annotations

import weakref
from typing import Any, ClassVar

import numpy as np

from simmoe.api import CacheShape, ForwardEvent
from simmoe.errors import SimmoeError

# the last model trained, for replays of one trace that differ only in cache size or selector
_TRAINED: dict = {}

INSTALL_HINT = "pip install 'simmoe[learned]' (or: pip install lightgbm scikit-learn)"


def require_learning_libraries() -> None:
    """Refuse, in one line, a replay of ``learned`` where LightGBM or scikit-learn is missing.

    They are the optional extra ``learned``: LGBMRegressor is LightGBM's
    scikit-learn interface, so both must import.
    """
    missing = []
    for module in ("lightgbm", "sklearn"):
        try:
            __import__(module)
        except ImportError:
            missing.append("scikit-learn" if module == "sklearn" else module)
    if missing:
        raise SimmoeError(f"cache policy 'learned' needs {' and '.join(missing)}, which "
                          f"{'is' if len(missing) == 1 else 'are'} not installed: {INSTALL_HINT}")


class Learned:
    """Evict the expert with the largest predicted reuse distance (module docstring)."""

    name: ClassVar[str] = "learned"
    train_requests: ClassVar[int] = 20
    min_train_requests: ClassVar[int] = 4
    recency_cap: ClassVar[int] = 64
    window: ClassVar[int] = 16
    count_buckets: ClassVar[int] = 12
    horizon: ClassVar[int] = 128
    rows_per_forward: ClassVar[int] = 1024

    def __init__(self, train_requests: int | None = None):
        self._want = int(self.train_requests if train_requests is None else train_requests)
        self.trained_on: tuple[int, ...] = ()

    # -- training -------------------------------------------------------------------
    def reset(self, shape: CacheShape) -> None:
        L, N = shape.num_layers, shape.num_experts
        ids = self.training_requests(shape)
        self.trained_on = ids
        key = (type(self), ids, L, N, int(shape.seed), self.recency_cap, self.window, self.count_buckets,
               self.horizon, self.rows_per_forward)
        hit = _TRAINED.get(key)
        if hit is not None and hit[0]() is shape.trace:
            self._table = hit[1]              # the same trace, requests and seed: the same model
        else:
            self._table = self._fit(training_demands(shape.trace, ids, L, N), L, N, int(shape.seed))
            _TRAINED.clear()
            _TRAINED[key] = (weakref.ref(shape.trace), self._table)
        self._track = _Features(L, N, self.window, self.recency_cap, self.count_buckets)

    @classmethod
    def check(cls, shape: CacheShape) -> None:
        """Refuse, before any work, a replay without the learning libraries or too few requests to train on."""
        require_learning_libraries()
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
        """Train on the demand sequence; return the predicted log distance over the feature grid.

        The features are discrete: rows with equal features are merged into
        one of weight = their number and target = their mean, which leaves
        every squared-error split (and so the trees) as on the rows themselves.
        """
        require_learning_libraries()
        import lightgbm

        X, y, w = self._rows(seq, L, N, seed)
        if len(y) < 2:
            raise SimmoeError("cache policy 'learned': the training requests give too few forwards to learn from")
        model = lightgbm.LGBMRegressor(n_estimators=80, num_leaves=31, learning_rate=0.1, min_child_samples=1,
                                       min_child_weight=20.0, random_state=seed, n_jobs=1, deterministic=True,
                                       force_row_wise=True, verbose=-1)
        model.fit(X, y, sample_weight=w)
        return np.asarray(model.predict(self._grid(L))).reshape(self._dims(L))

    def _dims(self, L: int) -> tuple[int, int, int, int]:
        return (self.recency_cap + 1, self.window + 1, self.count_buckets, L)

    def _grid(self, L: int) -> np.ndarray:
        axes = np.meshgrid(*(np.arange(n) for n in self._dims(L)), indexing="ij")
        return np.stack([a.reshape(-1) for a in axes], axis=1).astype(np.float64)

    def _rows(self, seq: list[np.ndarray], L: int, N: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Training rows merged by feature cell: (features, mean log1p distance, weight).

        Features are taken forwards, targets backwards (the next demand after
        each forward); :attr:`rows_per_forward` experts already seen are
        drawn per forward (with replacement, seeded).
        """
        rng = np.random.default_rng((seed, 0x1EA2))
        track = _Features(L, N, self.window, self.recency_cap, self.count_buckets)
        picks, cells = [], []
        for d in seq:
            track.observe(d)
            seen = track.seen()
            pick = seen[rng.integers(0, len(seen), size=self.rows_per_forward)] if len(seen) else seen
            picks.append(pick)
            cells.append(track.cells(pick))
        T = len(seq)
        nxt = np.full(L * N, -1, dtype=np.int64)
        kept_cells, targets = [], []
        for t in range(T - 1, -1, -1):          # nxt: the next demand after forward t
            pick = picks[t]
            known = nxt[pick] >= 0
            keep = known | (T - 1 - t >= self.horizon)
            d = np.where(known, np.minimum(nxt[pick] - t, self.horizon), self.horizon)
            kept_cells.append(cells[t][keep])
            targets.append(np.log1p(d[keep].astype(np.float64)))
            nxt[np.flatnonzero(seq[t].reshape(-1))] = t
        size = int(np.prod(self._dims(L)))
        c = np.concatenate(kept_cells) if kept_cells else np.zeros(0, np.int64)
        total = np.bincount(c, weights=np.concatenate(targets) if targets else None, minlength=size)
        count = np.bincount(c, minlength=size)
        present = np.flatnonzero(count)
        grid = self._grid(L)
        return grid[present], total[present] / count[present], count[present].astype(np.float64)

    # -- the replay ---------------------------------------------------------------------
    def observe(self, event: ForwardEvent) -> None:
        self._track.observe(event.demand)

    def inserted(self, pairs: np.ndarray) -> None:
        self._track.touch(pairs)

    def scores(self) -> np.ndarray:
        return -self._track.lookup(self._table)


class _Features:
    """Incremental features of every (layer, expert): recency, window count, count bucket.

    ``cells`` / ``lookup`` index the feature grid [recency, window, bucket, layer]
    row-major; the bucket and layer part of the index is kept up to date for
    the demanded experts only.
    """

    def __init__(self, L: int, N: int, window: int, recency_cap: int, buckets: int):
        self.L, self.N, self.W, self.R, self.B = L, N, window, recency_cap, buckets
        self.last = np.full((L, N), -(recency_cap + 2), dtype=np.int64)     # never used: recency capped
        self.count = np.zeros((L, N), dtype=np.int64)
        self.recent = np.zeros((L, N), dtype=np.int64)
        self.ring = np.zeros((window, L, N), dtype=bool)
        self.t = 0
        self.layer = np.repeat(np.arange(L, dtype=np.int64)[:, None], N, axis=1)
        self._bl = self.layer.copy()                 # bucket·L + layer
        self._strides = ((window + 1) * buckets * L, buckets * L)

    def observe(self, demand: np.ndarray) -> None:
        slot = self.t % self.W
        self.recent -= self.ring[slot]
        self.ring[slot] = demand
        self.recent += demand
        idx = np.flatnonzero(demand)
        count = self.count.reshape(-1)
        count[idx] += 1
        bucket = np.minimum(np.floor(np.log2(1.0 + count[idx])).astype(np.int64), self.B - 1)
        self._bl.reshape(-1)[idx] = bucket * self.L + self.layer.reshape(-1)[idx]
        self.last.reshape(-1)[idx] = self.t
        self.t += 1

    def seen(self) -> np.ndarray:
        return np.flatnonzero(self.count.reshape(-1) > 0)

    def touch(self, pairs: np.ndarray) -> None:
        """A prefetched expert counts as just used (no demand counted)."""
        self.last.reshape(-1)[pairs] = self.t - 1

    def _index(self) -> np.ndarray:
        idx = np.minimum(self.t - 1 - self.last, self.R)
        idx *= self._strides[0]
        idx += self.recent * self._strides[1]
        idx += self._bl
        return idx

    def cells(self, flat: np.ndarray) -> np.ndarray:
        """Each expert's cell in the feature grid (recency, window count, count bucket, layer), row-major."""
        return self._index().reshape(-1)[flat]

    def lookup(self, table: np.ndarray) -> np.ndarray:
        return table.reshape(-1).take(self._index())


def training_demands(trace: Any, ids: tuple[int, ...], L: int, N: int) -> list[np.ndarray]:
    """One token per forward for each request in ``ids``: its prefill, then each output position's routes."""

    seq: list[np.ndarray] = []
    layers = np.arange(L)[:, None]
    for r in ids:
        seq.append(trace.prefill_demand(r))
        rows = np.flatnonzero(np.asarray(trace.pos_request) == r)
        for row in rows:
            d = np.zeros((L, N), dtype=bool)
            d[layers, np.asarray(trace.root_routes[row])] = True
            seq.append(d)
    return seq
