"""The event model of one target forward, and the other parts of a cycle's time.

One forward, layer by layer (ARCHITECTURE "Timing", SpecFit §2 and App. B):

1. attention and router run on the compute stream: ``a`` ms per layer, where
   ``a = (forward_ms + token_ms·(n−1) [+ cache_overhead_ms]) / L``;
2. the router has now fixed the layer's expert union: ``h`` hits and ``m``
   misses.  Hits are resident and queue for the compute stream at once;
   misses queue on the copy engine, at most ``c`` copies in flight (FIFO),
   each copy taking its own duration (the profile's ``copy_ms``, or a draw);
3. each expert computes (``expert_ms``) when its weights are resident and the
   compute stream is free; the layer ends when all its experts have run, and
   the next layer's attention starts then (no prefetch across layers).

With ``overlap = false`` a layer computes nothing until all its copies have
landed.  Three implementations of the same model (``model=`` of
:class:`CycleTimer`):

* ``simpy`` — the readable reference: processes as generators, the copy
  engine a ``simpy.Resource(capacity=c)``, the compute stream a
  ``Resource(capacity=1)``.  O(L·(h+m)·log) events per forward; slow.
* ``event`` — the same model as an exact recurrence in numpy, vectorised over
  layers (the engine's default).  Layers are independent once the previous
  one has ended (the copy engine and the compute stream are idle then), so
  a forward is the sum of its layers.  With sorted copy completions d_1 ≤ … ≤
  d_m (measured from the end of attention), the compute stream's recurrence
  f_0 = h·e, f_i = max(f_{i−1}, d_i) + e unrolls to

      f_m = max(f_0 + m·e, max_i (d_i + (m − i + 1)·e)),

  and with fixed copy time X the FIFO copy engine gives d_i = ⌈i/c⌉·X, so
  the inner maximum is attained at the first job of the first or the last
  block of c copies: O(1) per layer.  With drawn copy times, list scheduling
  on c engines is iterated over the copy index (one engine: running sums),
  vectorised over layers:
  O(max m · L) per forward.  :class:`CycleTimer` tabulates the fixed-copy
  layer time over (hits, misses) once, so a forward costs one lookup per layer.
* ``closed`` — no overlap at all, from means: Σ_ℓ [a + (h+m)·e + ⌈m/c⌉·X̄].
  It equals the event model exactly when ``overlap = false`` and copy times
  are fixed, or when copies take no time (resident experts); otherwise it is
  an upper bound of the event model with fixed copies.

Equalities between the three hold up to floating-point rounding (simpy adds
times in event order, the recurrence in closed form); with times that are
exact binary fractions they are bit-identical, and the tests check both.

A cycle adds drafting (``draft_fixed_ms + draft_level_ms·levels`` when it
drafts), the selector's time and ``commit_ms``.
"""

from __future__ import annotations

import numpy as np

from simmoe.errors import SimmoeError
from simmoe.hardware.profile import HardwareProfile

TIMING_MODELS = ("event", "simpy", "closed")


class CycleTimer:
    """Times the parts of a speculative cycle on one hardware profile.

    ``model``: ``"event"`` (exact recurrence, default), ``"simpy"`` (reference
    discrete-event simulation) or ``"closed"`` (no-overlap closed form).
    ``seed`` drives the copy-time draws when the profile's copies are not
    fixed.  ``cache``: whether an expert cache is kept between forwards
    (adds the profile's ``cache_overhead_ms`` to every forward); it must be
    given for a profile whose ``cache_overhead_ms`` is not 0.
    """

    def __init__(self, profile: HardwareProfile, *, model: str = "event", seed: int = 0,
                 cache: bool | None = None):
        if model not in TIMING_MODELS:
            raise SimmoeError(f"unknown timing model {model!r}; choose one of {', '.join(TIMING_MODELS)}")
        if cache is None and profile.cache_overhead_ms > 0:
            raise SimmoeError(f"profile {profile.name} charges {profile.cache_overhead_ms} ms per forward "
                              "when an expert cache is kept: pass CycleTimer(..., cache=True or False)")
        self.profile = profile
        self.model = model
        self.seed = seed
        self.cache = bool(cache)
        self.rng = np.random.default_rng(seed)
        # a resident profile of the physical cost model times forwards with it (simmoe.hardware.physical)
        self.physical = getattr(profile, "physical", None) if profile.resident else None
        # an offload profile of the physical model pays its served iteration's growth with the verified tokens
        phys = getattr(profile, "physical", None)
        self._per_token_serving_ms = float(phys.o.spec_token_ms) if phys is not None else 0.0
        p = profile
        self.c = int(p.copies_in_flight)
        self.e = float(p.expert_ms)
        self.copy_mean = 0.0 if p.resident else (
            float(np.mean(p.copy_samples_ms)) if p.copy_samples_ms else float(p.copy_ms))
        self.samples = None if p.resident or not p.copy_samples_ms else np.asarray(p.copy_samples_ms, dtype=np.float64)
        self.random_copies = bool(not p.resident and self.copy_mean > 0
                                  and (self.samples is not None or p.copy_cv > 0))
        if self.random_copies and self.samples is None:
            cv2 = float(p.copy_cv) ** 2
            self._gamma = (1.0 / cv2, self.copy_mean * cv2)  # shape, scale: mean X̄, cv as given

    # -- public -------------------------------------------------------------
    def forward_ms(self, n_tokens: int, hits: np.ndarray, misses: np.ndarray, context: int = 0,
                   requests: int = 1) -> float:
        """Time of one target forward over ``n_tokens`` tokens with per-layer hit and miss counts.

        ``context`` (KV tokens read, summed over the forward's ``requests``) is used by
        physical profiles only; the event model has no KV term.
        """
        if self.physical is not None:
            union = np.asarray(hits, dtype=np.int64) + np.asarray(misses, dtype=np.int64)
            return float(self.physical.forward_ms(n_tokens, union, context, n_tokens * context / max(requests, 1),
                                                  requests))
        nonexpert = self.profile.forward_ms + self.profile.token_ms * max(int(n_tokens) - 1, 0)
        return self._forward(nonexpert, hits, misses)

    def prefill_ms(self, prompt_len: int, hits: np.ndarray, misses: np.ndarray) -> float:
        """Time of the prefill forward over ``prompt_len`` prompt tokens."""
        if self.physical is not None:
            n = max(int(prompt_len), 1)
            union = np.asarray(hits, dtype=np.int64) + np.asarray(misses, dtype=np.int64)
            return float(self.physical.forward_ms(n, union, n / 2, n * n / 2))
        nonexpert = self.profile.forward_ms + self.profile.prefill_token_ms * max(int(prompt_len), 0)
        return self._forward(nonexpert, hits, misses)

    def draft_ms(self, levels: int, tokens: int = 0) -> float:
        """Drafting time for ``levels`` drafted levels (0 when nothing is drafted, as in AR).

        ``tokens``: what the iteration verifies; a physical profile's served
        iteration grows with it (``spec_token_ms``, :mod:`simmoe.hardware.physical`).
        """
        levels = int(levels)
        if levels <= 0:
            return 0.0
        if self.physical is not None:
            return self.physical.draft_ms(levels, verified=tokens)
        per_token = self._per_token_serving_ms
        return self.profile.draft_fixed_ms + self.profile.draft_level_ms * levels + \
            (per_token * int(tokens) if per_token else 0.0)

    def commit_ms(self) -> float:
        return self.profile.commit_ms

    def selector_ms(self) -> float:
        """The profile's selector time per cycle (used when the selector's time is not measured)."""
        return self.profile.selector_ms

    # -- one forward ----------------------------------------------------------
    def _forward(self, nonexpert: float, hits, misses) -> float:
        h = np.asarray(hits, dtype=np.int64)
        m = np.asarray(misses, dtype=np.int64)
        if h.ndim != 1 or h.shape != m.shape or len(h) == 0:
            raise SimmoeError(f"hits and misses must be per-layer counts of equal length, got {h.shape} and {m.shape}")
        if h.min() < 0 or m.min() < 0:
            raise SimmoeError("hits and misses must be >= 0")
        if self.cache:
            nonexpert += self.profile.cache_overhead_ms
        a = nonexpert / len(h)
        if self.model == "closed":
            return closed_forward(a, h, m, self.e, self.copy_mean, self.c)
        copies = self.draw_copy_times(m) if self.random_copies else None
        if self.model == "simpy":
            return simpy_forward(a, h, m, self.e, self.copy_mean, self.c, self.profile.overlap, copies)
        if copies is None:
            return nonexpert + float(self._layer_table(h, m)[h, m].sum())
        return drawn_copy_forward(a, h, m, self.e, copies, self.c, self.profile.overlap)

    def _layer_table(self, h: np.ndarray, m: np.ndarray) -> np.ndarray:
        """Layer end times for every (hits, misses) pair up to the largest seen (fixed copies).

        A layer's time depends only on its two counts, so the event model of
        a forward becomes one table lookup per layer; the table grows on demand.
        """
        need = int(max(h.max(initial=0), m.max(initial=0)))
        table = getattr(self, "_table", None)
        if table is None or need >= table.shape[0]:
            size = max(64, 2 * need + 1)
            hh, mm = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
            table = fixed_copy_layer_ends(hh, mm, self.e, self.copy_mean, self.c, self.profile.overlap)
            self._table = table
        return table

    def draw_copy_times(self, misses: np.ndarray) -> np.ndarray:
        """Durations of this forward's copies, layer after layer (``misses.sum()`` values).

        One draw per call, in layer order, so the simpy and the recurrence
        paths consume the random stream identically.
        """
        total = int(np.sum(misses))
        if self.samples is not None:
            return self.samples[self.rng.integers(0, len(self.samples), size=total)]
        shape, scale = self._gamma
        return self.rng.gamma(shape, scale, size=total)


# --------------------------------------------------------------------------
# the three implementations (module functions: the tests call them directly)
# --------------------------------------------------------------------------
def closed_forward(a: float, h, m, e: float, x: float, c: int) -> float:
    """Σ_ℓ [a + (h+m)·e + ⌈m/c⌉·x]: no overlap between copies and compute.  O(L)."""
    h = np.asarray(h, dtype=np.int64)
    m = np.asarray(m, dtype=np.int64)
    blocks = -(-m // c)
    return float(np.sum(a + (h + m) * e + blocks * x))


def fixed_copy_layer_ends(h, m, e: float, x: float, c: int, overlap: bool = True) -> np.ndarray:
    """Per layer, when its last expert finishes, measured from the end of attention (fixed copy time ``x``).

    O(1) per layer (module docstring): the compute stream's recurrence peaks at
    the first copy of the first or of the last block of c copies.
    """
    h = np.asarray(h, dtype=np.int64)
    m = np.asarray(m, dtype=np.int64)
    if not overlap or x == 0.0:
        return (h + m) * e + (-(-m // c)) * x
    last_block = np.maximum(m - 1, 0) // c           # index q of the last block of c copies
    first = x + m * e                                 # first job of the first block: d = x
    last = (last_block + 1) * x + (m - last_block * c) * e
    tail = np.where(m > 0, np.maximum(first, last), 0.0)
    return np.maximum((h + m) * e, tail)


def fixed_copy_forward(a: float, h, m, e: float, x: float, c: int, overlap: bool = True) -> float:
    """Event model with every copy taking ``x`` ms: O(1) per layer (module docstring)."""
    if not overlap or x == 0.0:
        return closed_forward(a, h, m, e, x, c)
    return float(np.sum(a + fixed_copy_layer_ends(h, m, e, x, c, overlap)))


def drawn_copy_forward(a: float, h, m, e: float, copies: np.ndarray, c: int, overlap: bool = True) -> float:
    """Event model with drawn copy durations (``copies``: layer after layer, FIFO within a layer).

    List scheduling on c copy engines, vectorised over layers: O(max m · L).
    """
    h = np.asarray(h, dtype=np.int64)
    m = np.asarray(m, dtype=np.int64)
    L = len(m)
    M = int(m.max(initial=0))
    if M == 0:
        return float(np.sum(a + h * e))
    # copy durations as [L, M], padded with 0 (padding never runs: masked below)
    x = np.zeros((L, M))
    start = np.concatenate([[0], np.cumsum(m)[:-1]])
    col = np.arange(M)
    active = col[None, :] < m[:, None]
    x[active] = np.asarray(copies, dtype=np.float64)[(start[:, None] + col[None, :])[active]]
    if c == 1:
        # one engine: completions are the running sums, already in order
        d_sorted = np.cumsum(x, axis=1)
        makespan = np.where(m > 0, d_sorted[np.arange(L), np.maximum(m - 1, 0)], 0.0)
    else:
        free = np.zeros((L, c))
        done = np.full((L, M), -np.inf)
        rows = np.arange(L)
        for j in range(M):
            k = np.argmin(free, axis=1)
            d = free[rows, k] + x[:, j]
            act = active[:, j]
            free[rows[act], k[act]] = d[act]
            done[act, j] = d[act]
        makespan = np.where(m > 0, done.max(axis=1), 0.0)
        if overlap:
            done.sort(axis=1)                          # -inf padding first
            # shift each row so that its m real completions occupy columns 0..m-1
            idx = (col[None, :] + (M - m)[:, None]) % M
            d_sorted = np.take_along_axis(done, idx, axis=1)
    if not overlap:
        return float(np.sum(a + makespan + (h + m) * e))
    weight = (m[:, None] - col[None, :]) * e           # (m − i + 1)·e with i = col + 1
    cand = np.where(active, d_sorted + weight, -np.inf).max(axis=1)
    end = np.maximum((h + m) * e, cand)
    return float(np.sum(a + end))


def simpy_forward(a: float, h, m, e: float, x: float, c: int, overlap: bool = True,
                  copies: np.ndarray | None = None) -> float:
    """Reference discrete-event simulation of one forward (simpy).  ``copies``: drawn durations, else ``x``."""
    import simpy

    h = [int(v) for v in h]
    m = [int(v) for v in m]
    env = simpy.Environment()
    copy_engine = simpy.Resource(env, capacity=c)
    compute_stream = simpy.Resource(env, capacity=1)
    durations = iter([] if copies is None else [float(v) for v in copies])

    def copy(duration):
        with copy_engine.request() as slot:
            yield slot
            yield env.timeout(duration)

    def compute():
        with compute_stream.request() as turn:
            yield turn
            yield env.timeout(e)

    def missed_expert(duration):
        yield env.process(copy(duration))
        yield env.process(compute())

    def layer(hits, misses):
        with compute_stream.request() as turn:   # attention + router
            yield turn
            yield env.timeout(a)
        times = [next(durations) if copies is not None else x for _ in range(misses)]
        if overlap:
            experts = [env.process(compute()) for _ in range(hits)]
            experts += [env.process(missed_expert(t)) for t in times]
            yield simpy.AllOf(env, experts)
        else:
            yield simpy.AllOf(env, [env.process(copy(t)) for t in times])
            yield simpy.AllOf(env, [env.process(compute()) for _ in range(hits + misses)])

    def forward():
        for hits, misses in zip(h, m):
            yield env.process(layer(hits, misses))

    env.process(forward())
    env.run()
    return float(env.now)


def profile_discount(profile) -> float:
    """ρ = e / max(e, x/c): an available expert's cost relative to a copied one (event model)."""
    e = float(profile.expert_ms)
    x = float(profile.effective_copy_ms)
    return 1.0 if max(e, x) <= 0 else e / max(e, x)
