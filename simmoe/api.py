"""The public extension API of the replay: Selector, CachePolicy, PrefetchPolicy and Placement.

A replay (:mod:`simmoe.replay.engine`) passes every step through the same
stages; three of them take implementations from outside the project:

* **selection** — a :class:`Selector` chooses which draft nodes of a request's
  candidate pool the target verifies (SpecFit Eq. 5, EVICT Eq. 10, ...);
* **expert residency** — a :class:`CachePolicy` ranks the experts on the GPU,
  and the engine keeps the best-ranked ones within the cache's capacity;
* **prefetching** — a :class:`PrefetchPolicy` names experts to copy before the
  verification forward asks for them (while the drafter runs, or one layer
  ahead); the engine's copy engine carries them out;
* **placement** (experts computed on the CPU, docs/cpu-experts.md) — a
  :class:`Placement` decides, per forward, which of its experts run on the
  GPU (held there, or copied for it) and which the CPU computes.

Implementations are found by name through Python entry points — the groups
``simmoe.selectors``, ``simmoe.caches``, ``simmoe.prefetch`` and
``simmoe.placements`` — or given as ``module:Name`` on the command line
(``--selectors``, ``--cache``, ``--prefetch``; a placement in the profile
name, ``~placement=module:Name``).  simmoe's own register the same way (``pyproject.toml``), so
a package installed beside simmoe is a first-class citizen.  docs/extending.md
is the tutorial; ``examples/simmoe-example-plugins`` a complete package.

Every array a stage hands to a plugin is read-only (writing to one raises);
what a selector did not declare it needs is an :class:`Undeclared` placeholder
whose use raises; every plugin call is wrapped by the engine, so an exception
inside one ends the replay with one line naming the plugin (``simmoe replay``
exits 2, writing nothing).

Conventions: a model has L MoE layers of N experts, each token routes to k of
them per layer; an expert is the pair (layer ℓ, expert e), flattened as
``ℓ·N + e`` where a flat index is asked for; a pool's nodes are numbered
parents before children, ``-1`` is the root (the last committed token).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, NoReturn, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

__all__ = [
    "CachePolicy", "CacheShape", "Choice", "ForwardEvent", "PoolView", "PrefetchJobs", "PrefetchPolicy",
    "PrefetchStep", "Selector", "SelectorContext", "StepInfo", "Undeclared", "UndeclaredError", "ENTRY_POINT_GROUPS",
    "Drafter", "DRAFTER_GROUP", "Placement", "PlacementChoice", "PlacementForward", "PlacementShape",
]

BoolMatrix = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

# entry-point group of each kind of plugin
ENTRY_POINT_GROUPS = {"selector": "simmoe.selectors", "cache": "simmoe.caches", "prefetch": "simmoe.prefetch",
                      "placement": "simmoe.placements"}
# drafters (:class:`Drafter`) are found apart: they shape the pools of a synthetic trace and cost its drafting,
# outside the replay's stages (simmoe.drafters)
DRAFTER_GROUP = "simmoe.drafters"


# --------------------------------------------------------------------------
# selection
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class StepInfo:
    """The batch a request's selection joins (continuous batching; ``size == 1`` at batch 1).

    ``slot``: the request's position among the ``size`` requests of the step,
    which select in slot order; ``tokens_before``: tokens the step already
    verifies (every root, and the selections of the earlier slots);
    ``covered``: bool [L, N] (read-only), experts those tokens already bring to
    the forward (free for this request: SpecFit Eq. 1's union across the batch).
    Filled in for selectors that declare ``uses_cost`` at batch > 1; any other
    selector sees the default (``size == 1``, ``covered`` None).
    """

    size: int = 1
    slot: int = 0
    tokens_before: int = 0
    covered: BoolMatrix | None = None


class UndeclaredError(RuntimeError):
    """A selector used what its class did not declare it needs (the replay reports it in one line)."""


class Undeclared:
    """Stands where a :class:`PoolView` or :class:`SelectorContext` holds what the selector did not declare.

    Any use of it — an attribute, an index, ``len``, ``bool``, iteration,
    ``numpy.asarray`` — raises :class:`UndeclaredError` naming the class
    attribute to declare.  It is not None: test the class's own declaration
    (``self.uses_cost``), not ``view.cost is None``.
    """

    __slots__ = ("what", "declare")

    def __init__(self, what: str, declare: str):
        self.what, self.declare = what, declare

    def _refuse(self) -> NoReturn:
        raise UndeclaredError(f"used {self.what} without declaring it: a selector gets {self.what} "
                              f"only when its class says {self.declare} = True")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):   # protocol probes (pickle, numpy) stay ordinary
            raise AttributeError(name)
        self._refuse()

    def __getitem__(self, key: Any) -> NoReturn:
        self._refuse()

    def __setitem__(self, key: Any, value: Any) -> NoReturn:
        self._refuse()

    def __len__(self) -> int:
        self._refuse()

    def __iter__(self) -> NoReturn:
        self._refuse()

    def __bool__(self) -> bool:
        self._refuse()

    def __array__(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse()

    def __repr__(self) -> str:
        return f"<{self.what}: undeclared ({self.declare} = True gives it)>"


@dataclass
class PoolView:
    """A request's candidate pool at one output position, as a selector may see it.

    Every array is a read-only view (writing to one raises): the arrays the
    later stages read — verification's routes and verdicts, the demand's
    routes — are the same memory, so a selector cannot change what they see.
    The fields themselves are the selector's own: rebinding one changes nothing
    outside its call.

    ``root_routes`` [L, k] and ``node_routes`` [n, L, k] are the routes the
    selector may know (exact, or a predictor's of accuracy a: SpecFit §4.6).
    ``agree`` is the target's verdict per node (at T > 0 its seeded draws);
    only a selector whose class declares ``reads_verdicts = True`` (an oracle:
    its row is marked as one) gets it, any other an :class:`Undeclared`.
    ``cost`` is the cost model to price this selection with, when the selector
    declares ``uses_cost`` (else an :class:`Undeclared`): the context's at
    batch 1; at batch > 1 the batch-aware model of what the subtree adds to the
    step (its experts that the other requests bring are free, the intercepts
    carry their tokens; :class:`SelectorContext` says how to call it).
    ``batch`` says what else the step verifies; ``available(d)``, when not
    None, gives bool [L, N] — the experts resident, staged or on their way
    after the drafter has drafted level ``d`` — to selectors that declare
    ``uses_residency``.
    """

    row: int
    parents: IntArray         # int [n], -1 = root, parents before children
    levels: IntArray          # int [n], 1 for children of the root
    p: FloatArray             # float [n], path probability
    q: FloatArray             # float [n], draft conditional probability
    agree: BoolMatrix         # bool [n]; an Undeclared unless the class declares reads_verdicts
    root_routes: IntArray     # [L, k]
    node_routes: IntArray     # [n, L, k]
    num_experts: int
    cost: Any = None
    batch: StepInfo = field(default_factory=StepInfo)
    available: Callable[[int], BoolMatrix] | None = None
    _pool: Any = field(default=None, repr=False)

    @property
    def size(self) -> int:
        return len(self.parents)

    @property
    def depth(self) -> int:
        """Deepest level of the pool (0 for an empty pool)."""
        return int(self.levels.max()) if len(self.levels) else 0

    def probability_order(self) -> IntArray:
        """Node ids by decreasing path probability; ties by level, then id.

        Since p never grows along a path, every prefix of this order is
        ancestor-closed (a child ties its parent at most, and the level breaks
        the tie): the top-k rules (EAGLE-3's K nodes, EVICT's prefix, EVICT
        Eq. 10) verify its prefixes.  O(n log n).
        """
        n = self.size
        return np.lexsort((np.arange(n), self.levels, -self.p.astype(np.float64)))

    def pool(self) -> Any:
        """The :class:`solvers.Pool` of this view (built once, on first use; at batch > 1 for a
        ``uses_cost`` selector, the experts the other requests bring are free in it)."""
        if self._pool is None:
            from solvers import Pool

            self._pool = Pool.from_routes(
                self.parents.astype(np.int64), self.p.astype(np.float64),
                self.root_routes, self.node_routes, self.num_experts)
        return self._pool


@dataclass(frozen=True)
class Choice:
    """A selector's decision: which pool nodes the target verifies, and how many levels were drafted.

    ``nodes``: pool-local ids, integers, strictly ascending (so distinct),
    ancestor-closed (each node's parent chosen too, or the root), at most K;
    ``drafted_levels``: an integer, at least the deepest chosen node's level,
    at most the pool's depth (0 when nothing is drafted).  The engine refuses,
    in one line naming the selector, request and position, a choice that breaks
    any of these (a bool mask, float ids or a float count included): it never
    sorts, de-duplicates or rounds one.
    """

    nodes: IntArray
    drafted_levels: int


@dataclass(frozen=True)
class SelectorContext:
    """What a selector is built with: the trace's budget K and the profile's cost models.

    ``cost``: a :class:`solvers.CostModel`, T̂(S) = b_|S| + βF(S) (SpecFit Eq. 4),
    when the selector declares ``uses_cost`` (else an :class:`Undeclared`).
    ``cost.time(size, union)`` is ``b[size] + beta * union`` in ms: ``size`` the
    draft nodes verified (|S|, the root not counted: ``b[0]`` is the root
    alone, so size ≤ K needs ``b[0..K]``); ``union`` is F(S), the experts the
    forward executes summed over layers — the root's counted, each (layer,
    expert) once: Σ_ℓ |E_ℓ(root) ∪ ⋃_{v∈S} E_ℓ(v)|.  ``solvers.evaluate(
    view.pool(), nodes, view.cost)`` computes it (``.union``, ``.time``).  At
    batch > 1 price with ``view.cost``, not this one: its intercepts already
    hold the step's other tokens and the experts the others bring, so pass
    the union of the experts the others do not bring — what ``view.pool()``
    counts, since they are free in it.  ``evict_cost``: EVICT's profiled C(k),
    k = 1.. (EVICT §3.2.3), when it declares ``uses_evict_cost``; ``options``:
    the command line's selector options (``ddd_threshold``, ``coverage_rho``, ...).
    """

    K: int = 7
    cost: Any = None
    evict_cost: tuple[float, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Selector(Protocol):
    """Chooses the subtree of a pool that the target verifies.

    The replay builds one selector per replay: ``SelectorClass(context)``
    with a :class:`SelectorContext`, then calls :meth:`select` once per request
    per step, in step order.  ``select`` returns a :class:`Choice` (what it
    must hold is said there); the engine checks a plugin's choice every call
    and names the selector when it does not hold.

    Optional class attributes (their defaults in parentheses) say what the
    selector needs: ``summary`` (""), one line for ``--help``; ``drafts``
    (True; False: no drafter, one token per forward); ``uses_cost`` (False;
    needs ``context.cost`` and ``view.cost``); ``uses_evict_cost`` (False);
    ``uses_residency`` (False; reads ``view.available``, so it selects inside
    the simulation, not in a plan shared across cache settings);
    ``reads_verdicts`` (False; reads ``view.agree``, the target's verdicts:
    an oracle, an upper bound no real system can run, marked as one in the
    output); ``needs_prepare`` (False; calls ``prepare(trace, num_requests,
    views_at)`` once before the replay, with a read-only copy of the trace
    whose verdict columns are there only for ``reads_verdicts``).

    Selection time charged per cycle (``simmoe replay``/``sweep``): by
    default the profile's ``cycle.selector_ms`` to a selector that declares
    ``uses_cost`` and 0 ms to any other, whatever it takes — a plugin that
    sleeps is charged nothing; ``--selector-ms X`` charges X ms to every one;
    ``--selector-ms measured`` (and ``ReplayConfig(selector_ms=None)``, the
    Python default) charges the measured time of :meth:`select` (wall, or CPU
    with ``--selector-clock cpu``; at batch > 1 the slowest of the step), the
    engine's check of the choice not included.
    """

    name: ClassVar[str]

    def select(self, view: PoolView) -> Choice: ...


# --------------------------------------------------------------------------
# expert residency
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class CacheShape:
    """The cache a policy ranks for: geometry, capacity, and what an offline policy may know.

    ``slots``: experts per layer (the replay's ``--slots``); ``budget``: when
    not None, one budget of experts across all layers instead, spread as the
    engine's keep rule decides (``--cache-experts`` / ``--cache-mib``).
    ``future``: the demand of every forward of the replay in order, bool
    [L, N] each, for policies that declare ``needs_future`` (offline bounds
    such as Belady); None otherwise.  ``seed``: the replay's seed.
    ``trace``: the trace being replayed (every column read-only; a plugin's
    is its own copy, ``meta`` included) and ``requests``: the request ids the
    replay covers, for policies that learn from requests outside them.
    """

    num_layers: int
    num_experts: int
    slots: int
    budget: int | None = None
    future: Sequence[BoolMatrix] | None = None
    seed: int = 0
    trace: Any = None
    requests: tuple[int, ...] = ()


@dataclass(slots=True)
class ForwardEvent:
    """One forward as a cache policy sees it, after the engine has served it.

    ``demand``: bool [L, N], the forward's expert union (SpecFit Eq. 1);
    ``hits``: the part of it that was resident; ``index``: the forward's number
    since the replay began (prefills count); ``kind``: ``"prefill"`` or
    ``"step"``; ``requests``: ids of the requests the forward serves;
    ``positions``: each request's output position (-1 for a prefill).
    The engine builds one per forward; its arrays are read-only.
    """

    demand: BoolMatrix
    hits: BoolMatrix
    index: int
    kind: str
    requests: tuple[int, ...]
    positions: tuple[int, ...] = ()


@runtime_checkable
class CachePolicy(Protocol):
    """Ranks the experts of an expert cache; the engine keeps the best-ranked ones.

    Per forward the engine serves the demand (hits = demand ∩ resident, the
    rest is copied), calls :meth:`observe` with the :class:`ForwardEvent`,
    then keeps, per layer (or across layers under one budget), the candidates
    resident ∪ demand of largest :meth:`scores` within the capacity.  A score
    of ``-inf`` (float scores) means "never keep"; ties go to the smaller
    expert id.  Prefetched experts arriving between forwards are reported to
    ``inserted(pairs)`` (flat ids ``ℓ·N + e``, int64, in arrival order) if
    the policy defines it (default: nothing), and displace the lowest-ranked
    experts that are not themselves unused prefetches.

    Policies are built with no arguments; :meth:`reset` is called once before
    the replay (the cache starts empty, SpecFit App. B).  Optional class
    attribute ``needs_future`` (False): the policy reads ``shape.future``.
    Optional classmethod ``check(shape)``: called before any work with the
    replay's shape (no ``future``); it raises :class:`simmoe.errors.SimmoeError`
    to refuse a replay it cannot serve (one line, exit 2); any other exception
    it raises is reported as one line naming the policy, exit 2.

    :meth:`scores` returns a real numeric array of shape [L, N] (bool, integer
    or float dtype; a nested list of numbers is read as one), indexed
    ``[layer, expert]`` with local expert ids; float scores are finite or
    ``-inf``.  The engine refuses anything else — another shape, strings,
    complex or object dtype, NaN, ``+inf`` — in one line naming the policy
    (exit 2), and never writes to the array.
    """

    name: ClassVar[str]

    def reset(self, shape: CacheShape) -> None: ...

    def observe(self, event: ForwardEvent) -> None: ...

    def scores(self) -> npt.NDArray[Any]: ...


# --------------------------------------------------------------------------
# prefetching
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class PrefetchStep:
    """What a prefetch policy knows when a step begins (or, for ``layers``, when it verifies).

    Per request of the step, in slot order: ``roots`` [b, L, k], the predicted
    routes of each request's root (the selectors' predictions, SpecFit §4.6);
    ``pools``: each request's pool — a dict with ``levels`` [n], ``p`` [n]
    (path probabilities), ``routes`` [n, L, k] (predicted) and ``selected``
    (ascending node ids, or None while the selection is not made).
    ``available``: bool [L, N], what is resident, staged or on its way now.
    ``truth``: per request the true routes ``(root [L, k], nodes [n, L, k])``,
    only for policies that declare ``knows_truth = True`` (upper bounds).
    ``requests``: request ids; ``rows``: each request's trace position row.
    Every array is read-only (writing to one raises).
    """

    roots: IntArray
    pools: tuple[dict[str, Any], ...]
    available: BoolMatrix
    requests: tuple[int, ...]
    rows: tuple[int, ...]
    truth: tuple[tuple[IntArray, IntArray], ...] | None = None


@dataclass(frozen=True)
class PrefetchJobs:
    """Copies a policy asks for in the drafting window, in queue order.

    ``pairs``: **flat** expert ids ``ℓ·N + e`` (layer ℓ, local expert e), each
    an integer in [0, L·N); ``levels``: per pair (the same length), the draft
    level after which it may start, an integer >= 0 (0: when the step begins).
    Integer arrays or sequences of ints; floats, bools (a bool among ints
    too) and anything else are refused, not rounded.  The copy engine drops pairs already available or
    queued, repeats, pairs beyond their layer's free slots, and pairs of
    levels the drafter did not draft; the rest start on the copy engine's
    lanes, after any demand copy, until the verification forward begins.
    """

    pairs: IntArray
    levels: IntArray


@runtime_checkable
class PrefetchPolicy(Protocol):
    """Names experts to copy before the verification forward demands them.

    Two windows, each optional (return None to leave it unused):

    * :meth:`drafting` — at the start of a step, while the drafter drafts and
      the selector selects: a :class:`PrefetchJobs` queue (exactly that class;
      a list or tuple is refused), of **flat** ids ``ℓ·N + e``;
    * :meth:`layers` — once the step's selection is known: a sequence of
      exactly L sequences (lists, tuples or 1-D integer arrays), entry ℓ the
      experts of layer ℓ to copy while layer ℓ − 1 runs (queued at layer
      ℓ − 1's router, started until layer ℓ's), as **local** ids e in
      [0, N), in queue order.  Entry 0 is never used (no layer runs before
      layer 0); repeats and experts already available are skipped.

    The engine checks every output of a policy that is not simmoe's own and
    refuses, in one line naming the policy (exit 2), what breaks these rules:
    ids out of range or negative, float or bool ids, negative levels, pairs
    and levels of different lengths, ``layers()`` of the wrong length or
    holding ints instead of sequences.

    Policies are built with no arguments; :meth:`reset` is called with the
    cache's :class:`CacheShape` before the replay, :meth:`observe` (optional)
    after every forward, as for cache policies.  Optional class attribute
    ``knows_truth`` (False): the step carries the true routes (an oracle).
    """

    name: ClassVar[str]

    def reset(self, shape: CacheShape) -> None: ...

    def drafting(self, step: PrefetchStep) -> PrefetchJobs | None: ...

    def layers(self, step: PrefetchStep) -> Sequence[Sequence[int]] | None: ...


# --------------------------------------------------------------------------
# placements of the experts (experts computed on the CPU)
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class PlacementShape:
    """What a placement is built for (every array read-only): L, N, k; ``decoder_layers`` int [L], the
    decoder layer of each MoE layer (llama.cpp's ``blk.i``); per MoE layer, float [L], one expert's
    ``expert_bytes`` (the profile's format), ``copy_ms`` over the host link and ``cpu_read_ms`` from
    DRAM; ``cpu_token_ms`` a CPU expert's compute per token, so n tokens take max(cpu_read_ms[ℓ],
    n · cpu_token_ms) (docs/cpu-experts.md); ``gpu_free_bytes`` GPU memory the non-expert weights
    leave; ``host_bytes`` the host's RAM; ``options`` the profile's ``,KEY=VALUE`` (strings);
    ``trace`` (a read-only copy), ``requests``, ``seed`` as in :class:`CacheShape`."""

    num_layers: int
    num_experts: int
    top_k: int
    decoder_layers: IntArray
    expert_bytes: FloatArray
    copy_ms: FloatArray
    cpu_read_ms: FloatArray
    cpu_token_ms: float
    gpu_free_bytes: float
    host_bytes: float
    options: dict[str, str] = field(default_factory=dict)
    trace: Any = None
    requests: tuple[int, ...] = ()
    seed: int = 0


class PlacementForward:
    """One forward as a placement sees it, before it runs (every array read-only).

    ``demand`` bool [L, N], the experts it runs (SpecFit Eq. 1); ``cached`` bool [L, N], the part
    the GPU expert cache holds (its hits) for a ``uses_cache`` placement, else None; ``n_tokens``
    the tokens it verifies; ``kind`` ``"prefill"`` or ``"step"``; ``requests``, ``positions`` as in
    :class:`ForwardEvent`.  :meth:`tokens`: n_e, float [L, N], the tokens routed to each expert
    (the real routes; a prefill's spread evenly over its union), made on first call.
    """

    __slots__ = ("demand", "cached", "n_tokens", "kind", "requests", "positions", "_tokens")

    def __init__(self, demand: BoolMatrix, cached: BoolMatrix | None, n_tokens: int, kind: str,
                 requests: tuple[int, ...], positions: tuple[int, ...], tokens: Callable[[], FloatArray]):
        self.demand, self.cached, self.n_tokens, self.kind = demand, cached, n_tokens, kind
        self.requests, self.positions = requests, positions
        self._tokens: Any = tokens

    def tokens(self) -> FloatArray:
        if callable(self._tokens):
            t = np.asarray(self._tokens(), dtype=np.float64).view()
            t.flags.writeable = False
            self._tokens = t
        out: FloatArray = self._tokens
        return out


@dataclass(frozen=True)
class PlacementChoice:
    """Where one forward's experts run; the CPU computes every demanded expert not named here.

    ``gpu`` bool [L, N]: without a cache (``uses_cache`` False), every expert the GPU holds — one set
    for the replay, within ``gpu_free_bytes`` (the rest within ``host_bytes``), its demanded ones run
    there; with a cache, the hits served on the GPU (within ``forward.cached``).  ``copy``: None, or
    bool [L, N], demanded experts outside ``gpu`` copied over the link for this forward and computed
    on the GPU (Fiddler's copies; a copy admits nothing to the cache).
    """

    gpu: BoolMatrix
    copy: BoolMatrix | None = None


@runtime_checkable
class Placement(Protocol):
    """Decides, per forward, which experts the GPU runs and which the CPU computes.

    Named in the profile (``MODEL[/FORMAT]@GPU+CPU~placement=NAME[,KEY=VALUE...]``,
    NAME registered under ``simmoe.placements`` or ``module:Name``).  Built
    with no arguments, one per replay; :meth:`reset` is called once with the
    :class:`PlacementShape`, then :meth:`place` once per forward (prefills
    included) in order, with a :class:`PlacementForward`; it returns a
    :class:`PlacementChoice`.  Optional class attribute ``uses_cache``
    (False): a GPU expert cache of the replay's policy and budget (``--cache``,
    ``--slots``, ``--cache-experts``) holds the experts, and ``place`` is
    handed its hits.  The engine refuses, in one line naming the placement
    (exit 2), a choice that is not bool [L, N], a cache placement's GPU expert
    the cache does not hold, a copy of an expert not demanded or already on
    the GPU, and a cacheless placement whose GPU set changes or does not fit.
    simmoe's own: ``cpu-layers:N``, ``cpu-all``, ``cpu-misses``, ``fiddler``.
    """

    name: ClassVar[str]

    def reset(self, shape: PlacementShape) -> None: ...

    def place(self, forward: PlacementForward) -> PlacementChoice: ...


# --------------------------------------------------------------------------
# drafters
# --------------------------------------------------------------------------
@runtime_checkable
class Drafter(Protocol):
    """What proposes the candidates: a pool shape, an acceptance model and a drafting cost, in one place.

    A drafter is built from its parameters, ``DrafterClass(params)`` with a
    ``dict`` of name -> value (strings from the command line, numbers from a
    trace's metadata; unknown names are refused by the drafter).  simmoe's
    own are ``eagle3`` (the default: the pools every shipped trace holds),
    ``mtp``, ``llama-chain``, ``dflash`` and ``lookahead`` (docs/extending.md,
    docs/synthetic-traces.md); others register under the entry-point group
    :data:`DRAFTER_GROUP` or are named ``module:Name``.

    * :meth:`pool_shape` — the candidate pool (a ``simmoe.trace.schema.PoolShape``:
      children per expansion, depth, node cap, verification budget K); a
      chain has one child per level (``chain`` True: no siblings).
    * :meth:`level_mean` — the acceptance model: the mean top-1 draft
      probability of the nodes at ``level`` for positions of latent
      predictability ``z`` (the synthetic workload's, shared by every drafter
      so that drafters are compared on the same text); ``mean_z`` is the
      workload's mean predictability.  The synthetic generator draws the
      target's agreement with probability q (docs/synthetic-traces.md).
    * :meth:`drafting_ms` — the time to draft ``levels`` levels for
      ``requests`` requests at once on ``physical`` (a
      ``simmoe.hardware.physical.PhysicalModel``: the target's geometry and
      the GPU), 0 when ``levels`` is 0.  It must be affine in ``levels``
      (a fixed part per drafting iteration plus a part per level): the event
      model's profiles hold exactly those two numbers.
    * :meth:`parameters` — every parameter with its value, recorded in a
      trace's metadata so that a replay rebuilds the same drafter.

    Optional: ``level_plan()``, (parents expanded, children per parent) for
    each level of a pool that is not EAGLE's expansion; ``sibling_share()``,
    the mean share of the remaining mass each next sibling takes.
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    chain: ClassVar[bool]

    def pool_shape(self) -> Any: ...

    def level_mean(self, z: FloatArray, level: int, mean_z: float) -> FloatArray: ...

    def drafting_ms(self, physical: Any, levels: int, requests: int = 1) -> float: ...

    def parameters(self) -> dict[str, Any]: ...
