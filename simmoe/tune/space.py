"""The search space of ``simmoe tune``: each serving engine's speculative flags, and what each setting means.

A :class:`TuneConfig` is one point of an engine's space: the flags a user
pastes, and their meaning in the simulator: the EAGLE-3 pool the drafter
builds (:class:`~simmoe.trace.schema.PoolShape`, from which a synthetic trace
of the workload preset is generated) and the replay's selector and budget K.

* SGLang (``--speculative-algorithm EAGLE3``): ``--speculative-num-steps``
  (the tree's depth), ``--speculative-eagle-topk`` (each level expands the
  top-k nodes into their top-k children: SpecFit's expansion, as the
  generator's pools are built) and ``--speculative-num-draft-tokens`` (the
  root plus the draft-tokens − 1 nodes of largest path probability that are
  verified: K = draft tokens − 1).  With top-k 1 SGLang requires draft tokens
  = steps + 1.  The selection may be EAGLE-3's (verify all K) or EVICT's
  prefix rule over those K (EVICT is built on SGLang; not an upstream flag).
* vLLM (``--speculative-config '{"method": "eagle3", "num_speculative_tokens": n}'``):
  a chain of n drafted tokens, all verified.
* llama.cpp (``--draft-max``, ``--draft-min``, ``--draft-p-min``): the
  ``llama-chain`` selector on a chain of ``--draft-max`` nodes.  simmoe's
  drafter is the workload's EAGLE-3 drafter; llama.cpp drafts with a small
  draft model, whose acceptance a measured point recalibrates.
  With a CPU-regime profile llama.cpp's expert placement joins the space
  (``--n-cpu-moe N``, ``-cmoe``, ``--moe-cache-mib M``; :mod:`simmoe.tune.cpu`).
* AR (every engine): vanilla decoding, no drafter.

:data:`EXTRA_DIMENSIONS` is where an engine's further flags may join its
space: each entry adds a :class:`Dimension` and says how its value changes the
replay configuration.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from simmoe.errors import SimmoeError
from simmoe.trace.schema import PoolShape

ENGINES = ("sglang", "vllm", "llama.cpp")
# the algorithms each engine offers that simmoe can replay (the first is the engine's speculative default)
ALGORITHMS = {"sglang": ("EAGLE3", "AR"), "vllm": ("eagle3", "AR"), "llama.cpp": ("draft", "AR")}
SELECTIONS = {"sglang": ("eagle3", "evict"), "vllm": ("eagle3",), "llama.cpp": ("llama-chain",)}
MAX_POOL_NODES = 63   # SGLang verifies at most 64 draft tokens, the root included


@dataclass(frozen=True)
class TuneConfig:
    """One configuration of an engine: the flags it is served with and the replay that predicts it."""

    engine: str
    algorithm: str
    selection: str = "eagle3"     # the replay's selector
    steps: int = 0                # drafted levels (SGLang steps, vLLM tokens, llama.cpp --draft-max)
    topk: int = 1                 # expansion per level (1: a chain)
    draft_tokens: int = 0         # SGLang: verified tokens, root included
    draft_min: int = 0            # llama.cpp --draft-min
    p_min: float = 0.0            # llama.cpp --draft-p-min
    cache_slots: int | None = None   # expert cache slots per layer (offloading profiles only)
    placement: str | None = None     # llama.cpp with experts on the CPU: cpu-layers:N, cpu-all, cpu-misses:M

    @property
    def is_ar(self) -> bool:
        return self.algorithm == "AR"

    @property
    def K(self) -> int:
        """The verification budget: how many drafted nodes may be verified."""
        if self.is_ar:
            return 0
        return self.draft_tokens - 1 if self.engine == "sglang" else self.steps

    def pool(self) -> PoolShape:
        """The pool the drafter builds (what the synthetic trace is generated with)."""
        if self.is_ar:
            return PoolShape(expand_topk=1, depth=1, max_nodes=1, K=1)
        full = self.topk + (self.steps - 1) * self.topk * self.topk
        nodes = min(full, MAX_POOL_NODES)
        return PoolShape(expand_topk=self.topk, depth=self.steps, max_nodes=nodes, K=min(self.K, nodes))

    def trace_key(self) -> tuple[int, int, int]:
        """Configurations with the same key replay one generated trace (K and the selection are the replay's)."""
        p = self.pool()
        return (0, 0, 0) if self.is_ar else (p.expand_topk, p.depth, p.max_nodes)

    def options(self) -> tuple[tuple[str, float], ...]:
        if self.selection == "llama-chain":
            return (("draft_max", float(self.steps)), ("draft_min", float(self.draft_min)),
                    ("draft_p_min", float(self.p_min)))
        return ()

    def flags(self) -> str:
        """The engine's command-line flags for this configuration."""
        if self.placement is not None:
            from simmoe.tune.cpu import flags

            spec = "(no speculative flags: vanilla decoding)" if self.is_ar else self._spec_flags()
            return f"{flags(self.placement)} {spec}"
        if self.is_ar:
            return "(no speculative flags: vanilla decoding)"
        return self._spec_flags()

    def _spec_flags(self) -> str:
        if self.engine == "sglang":
            s = (f"--speculative-algorithm EAGLE3 --speculative-num-steps {self.steps} "
                 f"--speculative-eagle-topk {self.topk} --speculative-num-draft-tokens {self.draft_tokens}")
            return s + ("  (EVICT's selection: EVICT's SGLang build, not an upstream flag)"
                        if self.selection == "evict" else "")
        if self.engine == "vllm":
            cfg = json.dumps({"method": "eagle3", "num_speculative_tokens": self.steps})
            return f"--speculative-config '{cfg}'"
        return f"--draft-max {self.steps} --draft-min {self.draft_min} --draft-p-min {self.p_min:g}"

    def label(self) -> str:
        """A short name for tables."""
        where = "" if self.placement is None else f" {self.placement}"
        if self.is_ar:
            return "AR" + where
        if self.engine == "sglang":
            sel = "" if self.selection == "eagle3" else f" {self.selection}"
            return f"steps={self.steps} topk={self.topk} draft={self.draft_tokens}{sel}"
        if self.engine == "vllm":
            return f"chain n={self.steps}"
        return f"draft-max={self.steps} min={self.draft_min} p-min={self.p_min:g}{where}"

    def params(self) -> dict:
        """The searched values (one column each in the results table)."""
        d = {"engine": self.engine, "algorithm": self.algorithm, "selection": self.selection,
             "steps": self.steps, "topk": self.topk, "draft_tokens": self.draft_tokens}
        if self.engine == "llama.cpp":
            d.update(draft_min=self.draft_min, p_min=self.p_min)
        if self.cache_slots is not None:
            d["cache_slots"] = self.cache_slots
        if self.placement is not None:
            d["placement"] = self.placement
        return d


@dataclass(frozen=True)
class Dimension:
    """One searched parameter: its name (a :class:`TuneConfig` field) and its ordered values."""

    name: str
    values: tuple


@dataclass(frozen=True)
class Space:
    """An engine's space: dimensions, the rule that makes a point a valid configuration, the defaults."""

    engine: str
    algorithm: str
    dims: tuple[Dimension, ...]
    default: TuneConfig
    fixed: dict = field(default_factory=dict)

    def make(self, point: tuple[int, ...]) -> TuneConfig | None:
        """The configuration at ``point`` (one index per dimension), or None where the engine refuses it."""
        values = {d.name: d.values[i] for d, i in zip(self.dims, point)}
        cfg = TuneConfig(engine=self.engine, algorithm=self.algorithm, **self.fixed, **values)
        return cfg if valid(cfg) else None

    def repair(self, point: tuple[int, ...]) -> tuple[int, ...]:
        """The nearest valid point that keeps the point's other values (SGLang's draft tokens clipped)."""
        if self.make(point) is not None:
            return point
        names = [d.name for d in self.dims]
        if "draft_tokens" not in names:
            return point
        j = names.index("draft_tokens")
        vals = self.dims[j].values
        order = sorted(range(len(vals)), key=lambda i: (abs(i - point[j]), i))
        for i in order:
            p = point[:j] + (i,) + point[j + 1:]
            if self.make(p) is not None:
                return p
        return point

    def size(self) -> int:
        """How many valid configurations the space holds (enumerated: the spaces are small)."""
        return sum(1 for _ in self.points())

    def points(self):
        """Every valid point, in index order."""
        import itertools

        for p in itertools.product(*(range(len(d.values)) for d in self.dims)):
            if self.make(p) is not None:
                yield p

    def point_of(self, cfg: TuneConfig) -> tuple[int, ...]:
        return tuple(d.values.index(getattr(cfg, d.name)) for d in self.dims)


def valid(cfg: TuneConfig) -> bool:
    """Whether the engine accepts ``cfg`` (SGLang: top-k 1 verifies the chain; no more tokens than drafted)."""
    if cfg.is_ar:
        return True
    if cfg.steps < 1 or cfg.topk < 1:
        return False
    if cfg.engine == "sglang":
        if cfg.topk == 1:
            return cfg.draft_tokens == cfg.steps + 1
        full = cfg.topk + (cfg.steps - 1) * cfg.topk * cfg.topk
        return 2 <= cfg.draft_tokens <= min(full, MAX_POOL_NODES) + 1
    if cfg.engine == "llama.cpp":
        return cfg.draft_min <= cfg.steps
    return True


# -- the defaults: what each engine runs when the speculative flags are left out ------------------
# SGLang's auto-chosen EAGLE parameters (steps 5, top-k 4, 8 draft tokens); vLLM needs
# num_speculative_tokens, 3 in its EAGLE-3 examples; llama.cpp's common_params_speculative.
def default_config(engine: str, placement: str | None = None) -> TuneConfig:
    if engine == "sglang":
        return TuneConfig("sglang", "EAGLE3", "eagle3", steps=5, topk=4, draft_tokens=8)
    if engine == "vllm":
        return TuneConfig("vllm", "eagle3", "eagle3", steps=3)
    return TuneConfig("llama.cpp", "draft", "llama-chain", steps=16, draft_min=0, p_min=0.75, placement=placement)


def ar_config(engine: str, placement: str | None = None) -> TuneConfig:
    return TuneConfig(engine, "AR", "ar", placement=placement)


# further dimensions of an engine's space, and how each changes the configuration (see module docstring)
EXTRA_DIMENSIONS: dict[str, list[tuple[Dimension, Callable[[TuneConfig], TuneConfig]]]] = {}


def engine_space(engine: str, *, selections: tuple[str, ...] | None = None, offload: bool = False,
                 steps: tuple[int, ...] | None = None, topk: tuple[int, ...] | None = None,
                 draft_tokens: tuple[int, ...] | None = None, placements: tuple[str, ...] | None = None,
                 start: str | None = None) -> Space:
    """The space :func:`simmoe.tune` searches for ``engine`` (narrowed by the optional value lists).

    ``placements`` (llama.cpp with experts on the CPU, :mod:`simmoe.tune.cpu`)
    adds the placement dimension, after draft-max so that the heat map shows
    the two; ``start`` is the default configuration's placement.
    """
    check_engine(engine)
    sel = tuple(selections or SELECTIONS[engine])
    for s in sel:
        if s not in SELECTIONS[engine]:
            raise SimmoeError(f"--selections {s}: {engine} has no such selection (its: "
                              f"{', '.join(SELECTIONS[engine])})")
    dims: list[Dimension] = []
    if engine == "sglang":
        dims = [Dimension("steps", steps or tuple(range(1, 9))), Dimension("topk", topk or tuple(range(1, 11))),
                Dimension("draft_tokens", draft_tokens or tuple(range(2, 65)))]
    elif engine == "vllm":
        dims = [Dimension("steps", steps or tuple(range(1, 9)))]
    else:
        dims = [Dimension("steps", steps or (1, 2, 3, 4, 6, 8, 12, 16)), Dimension("draft_min", (0, 1, 2, 4)),
                Dimension("p_min", (0.0, 0.3, 0.5, 0.75, 0.9))]
    if placements:
        dims.insert(1, Dimension("placement", tuple(placements)))
    if len(sel) > 1:
        dims.append(Dimension("selection", sel))
    if offload and not placements:
        dims.append(Dimension("cache_slots", (16, 32, 48, 64, 96)))
    fixed = {} if len(sel) > 1 else {"selection": sel[0]}
    algo = ALGORITHMS[engine][0]
    default = default_config(engine, (start or placements[0]) if placements else None)
    return Space(engine=engine, algorithm=algo, dims=tuple(dims), default=default, fixed=fixed)


def check_engine(engine: str) -> None:
    if engine not in ENGINES:
        raise SimmoeError(f"--engine {engine}: unknown serving engine (known: {', '.join(ENGINES)})")


def check_algorithm(engine: str, algorithm: str | None) -> str:
    """The engine's speculative algorithm (``None``: its default); one line for one it lacks."""
    check_engine(engine)
    algos = ALGORITHMS[engine]
    if algorithm is None:
        return algos[0]
    for a in algos:
        if a.lower() == str(algorithm).lower():
            return a
    raise SimmoeError(f"--algorithm {algorithm}: {engine} has no such speculative algorithm that simmoe can "
                      f"replay (its: {', '.join(algos)})")


def check_profile(engine: str, profile) -> None:
    """One line when the engine cannot run on ``profile`` (llama.cpp has no tensor parallelism)."""
    phys = getattr(profile, "physical", None)
    tp = int(getattr(phys, "tp", 1) or 1)
    if engine == "llama.cpp" and tp > 1:
        raise SimmoeError(f"--hardware {profile.name}: llama.cpp has no tensor parallelism (tp {tp}); "
                          "use a tp-1 profile, or --engine sglang|vllm")


def with_slots(cfg: TuneConfig, slots: int | None) -> TuneConfig:
    return replace(cfg, cache_slots=slots)
