"""A cache or prefetch policy's outputs are checked: anything outside the documented contract is one line, exit 2.

Each broken plugin is a class of a small module written to a temporary folder
on ``sys.path`` and run through ``simmoe replay`` (``simmoe.cli.main``).
"""

from __future__ import annotations

import json
import sys
import textwrap

import numpy as np
import pytest
from factories import random_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.api import PrefetchJobs
from simmoe.cli import main
from simmoe.errors import SimmoeError
from simmoe.hardware.profile import load_profile
from simmoe.replay.caches import check_scores
from simmoe.replay.engine import ReplayConfig, replay
from simmoe.replay.prefetch_policies import check_jobs, check_layers
from simmoe.replay.results import prefetch_counters

MODULE = "simmoe_integrity_plugins"
L, N = 3, 8
PROFILE = load_profile("a100-pcie-40gb").replace(num_layers=0)

SOURCE = '''
import numpy as np

from simmoe.api import PrefetchJobs
from simmoe.replay.cache_policies import LRU
from simmoe.replay.prefetch_policies import Draft, NextLayer


class Scores(LRU):
    """LRU's ranking, handed back in another form by each subclass."""

    def scores(self):
        return self.bend(super().scores().astype(np.float64))


def _cache(name, bend):
    return type(name, (Scores,), {"name": name.lower(), "bend": staticmethod(bend)})


def _nan(s):
    s = s.copy(); s[0, 1] = np.nan; return s


def _inf(s):
    s = s.copy(); s[1, 2] = np.inf; return s


NaNScores = _cache("NaNScores", _nan)
InfScores = _cache("InfScores", _inf)
StrScores = _cache("StrScores", lambda s: s.astype(str))
ComplexScores = _cache("ComplexScores", lambda s: s.astype(complex))
ObjectScores = _cache("ObjectScores", lambda s: s.astype(object))
NarrowScores = _cache("NarrowScores", lambda s: s[:, :-1])
FlatScores = _cache("FlatScores", lambda s: s.reshape(-1))
RaggedScores = _cache("RaggedScores", lambda s: [list(s[0]), list(s[1][:2])] + [list(r) for r in s[2:]])
# valid forms of the same ranking: the replay equals lru's
ListScores = _cache("ListScores", lambda s: s.tolist())
Float32Scores = _cache("Float32Scores", lambda s: s.astype(np.float32))
NeverKeepScores = _cache("NeverKeepScores", lambda s: np.where(np.arange(s.shape[1]) == 0, -np.inf, s))


class CheckRaises(LRU):
    name = "check-raises"

    @classmethod
    def check(cls, shape):
        raise ValueError("check boom")


class Jobs(Draft):
    """draft's jobs for one level, bent by each subclass."""

    def drafting(self, step):
        jobs = super().drafting(step)
        return self.bend(np.asarray(jobs.pairs), np.asarray(jobs.levels), self.N)


def _jobs(name, bend):
    return type(name, (Jobs,), {"name": name.lower(), "bend": staticmethod(bend)})


BeyondPairs = _jobs("BeyondPairs", lambda p, lv, N: PrefetchJobs(np.append(p, 3 * N), np.append(lv, 0)))
NegativePairs = _jobs("NegativePairs", lambda p, lv, N: PrefetchJobs(np.append(p, -1), np.append(lv, 0)))
MismatchedJobs = _jobs("MismatchedJobs", lambda p, lv, N: PrefetchJobs(p, lv[:-1]))
ListJobs = _jobs("ListJobs", lambda p, lv, N: [p, lv])
TupleJobs = _jobs("TupleJobs", lambda p, lv, N: (p, lv))
FloatPairs = _jobs("FloatPairs", lambda p, lv, N: PrefetchJobs(p.astype(np.float64), lv))
MaskPairs = _jobs("MaskPairs", lambda p, lv, N: PrefetchJobs(np.ones(len(p), dtype=bool), lv))
NegativeLevels = _jobs("NegativeLevels", lambda p, lv, N: PrefetchJobs(p, lv - 1))
TwoDimPairs = _jobs("TwoDimPairs", lambda p, lv, N: PrefetchJobs(p[None], lv))
# a valid form: lists of ints
ListPairs = _jobs("ListPairs", lambda p, lv, N: PrefetchJobs(p.tolist(), lv.tolist()))


class Layers(NextLayer):
    """next-layer's per-layer lists, bent by each subclass."""

    def layers(self, step):
        return self.bend(super().layers(step), self.N)


def _layers(name, bend):
    return type(name, (Layers,), {"name": name.lower(), "bend": staticmethod(bend)})


MinusOneLayers = _layers("MinusOneLayers", lambda ls, N: [x + [-1] for x in ls])
FlatLayers = _layers("FlatLayers", lambda ls, N: [[layer * N + e for e in x] for layer, x in enumerate(ls)])
ShortLayers = _layers("ShortLayers", lambda ls, N: ls[:-1])
IntLayers = _layers("IntLayers", lambda ls, N: [x[0] for x in ls])
FloatLayers = _layers("FloatLayers", lambda ls, N: [np.asarray(x, dtype=np.float64) for x in ls])
StringLayers = _layers("StringLayers", lambda ls, N: "0123")
HalfLayers = _layers("HalfLayers", lambda ls, N: [x + [0.5] for x in ls])
NestedLayers = _layers("NestedLayers", lambda ls, N: [[x] for x in ls])
# a bool among ints: numpy would read it as 0 or 1
BoolLayers = _layers("BoolLayers", lambda ls, N: [x + [True] for x in ls])
NumpyBoolLayers = _layers("NumpyBoolLayers", lambda ls, N: [x + [np.True_] for x in ls])
BoolPairs = _jobs("BoolPairs", lambda p, lv, N: PrefetchJobs(p.tolist() + [True], lv.tolist() + [0]))
# valid forms: tuples and integer arrays per layer
ArrayLayers = _layers("ArrayLayers", lambda ls, N: tuple(np.asarray(x, dtype=np.uint8) for x in ls))


# -- what a policy is handed: every array reachable from an argument, written to where it is writable ----
import dataclasses

WRITABLE = []      # where a probe's write was accepted: "observe(event).demand", ...


def arrays(path, obj):
    """(path, array) of every numpy array reachable from ``obj`` through dataclasses, dicts, lists, tuples."""
    if isinstance(obj, np.ndarray):
        yield path, obj
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from arrays(f"{path}.{f.name}", getattr(obj, f.name))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from arrays(f"{path}[{k!r}]", v)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from arrays(f"{path}[{i}]", v)


def probe(path, obj):
    """Write every array reachable from ``obj`` onto itself (its values unchanged); note those that take it."""
    for where, a in arrays(path, obj):
        try:
            a[...] = a.copy()
        except ValueError:      # read-only
            continue
        if where not in WRITABLE:
            WRITABLE.append(where)


class ProbeCache(LRU):
    """lru's ranking; probes what it is handed (``future`` too, hence needs_future)."""

    name = "probe-cache"
    needs_future = True

    @classmethod
    def check(cls, shape):
        probe("check(shape)", shape)

    def reset(self, shape):
        probe("reset(shape)", shape)
        super().reset(shape)

    def observe(self, event):
        probe("observe(event)", event)
        super().observe(event)

    def inserted(self, pairs):
        probe("inserted(pairs)", pairs)
        super().inserted(pairs)


class OnlineProbeCache(ProbeCache):
    name = "online-probe-cache"
    needs_future = False


class ProbePrefetch(Draft):
    """draft's jobs, then next-layer's lists; probes what it is handed (the true routes too)."""

    name = "probe-prefetch"
    knows_truth = True

    def reset(self, shape):
        probe("reset(shape)", shape)
        super().reset(shape)

    def observe(self, event):
        probe("observe(event)", event)

    def drafting(self, step):
        probe("drafting(step)", step)
        return super().drafting(step)

    def layers(self, step):
        probe("layers(step)", step)
        return NextLayer.layers(self, step)


class LiveProbePrefetch(ProbePrefetch):
    name = "live-probe-prefetch"
    knows_truth = False


def _writer(base, method, poke):
    def call(self, arg):
        poke(arg)
        return getattr(base, method)(self, arg)

    return call


# one write into what the policy is handed: a plugin error, one line naming it
WritesDemand = type("WritesDemand", (LRU,), {"name": "writes-demand", "observe": _writer(
    LRU, "observe", lambda e: e.demand.__setitem__((0, 0), not e.demand[0, 0]))})
WritesRoutes = type("WritesRoutes", (LRU,), {"name": "writes-routes", "reset": _writer(
    LRU, "reset", lambda shape: shape.trace.node_routes.__setitem__(..., 0))})
WritesAvailable = type("WritesAvailable", (Draft,), {"name": "writes-available", "drafting": _writer(
    Draft, "drafting", lambda step: step.available.__setitem__(..., True))})
WritesSelected = type("WritesSelected", (NextLayer,), {"name": "writes-selected", "layers": _writer(
    NextLayer, "layers", lambda step: [pl["selected"].__setitem__(..., 0) for pl in step.pools])})


class BendsMeta(LRU):
    """Changes what it can of the trace it is handed (its own copy): the replay is lru's all the same."""

    name = "bends-meta"

    def reset(self, shape):
        shape.trace.meta["geometry"]["num_layers"] = 1
        shape.trace.meta["pool_shape"]["K"] = 1
        shape.trace.node_routes = np.zeros_like(shape.trace.node_routes)
        shape.trace.requests.output_len = shape.trace.requests.output_len[:1]
        super().reset(shape)
'''


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from simmoe.hardware.profile import save_profile
    from simmoe.trace.io import write_trace

    d = tmp_path_factory.mktemp("integrity")
    (d / f"{MODULE}.py").write_text(textwrap.dedent(SOURCE))
    sys.path.insert(0, str(d))
    write_trace(trace_(), d / "t.parquet")
    save_profile(PROFILE, d / "p.toml")
    yield d
    sys.path.remove(str(d))
    sys.modules.pop(MODULE, None)


def trace_():
    return random_trace(7, num_requests=2, output_len=(4, 8), L=L, N=N, k=2, pool_nodes=7)


def run(files, capsys, *argv):
    """``simmoe replay`` on the tiny trace: (exit status, stderr lines, whether the JSON was written)."""
    out = files / "out.json"
    out.unlink(missing_ok=True)
    rc = main(["replay", str(files / "t.parquet"), "--hardware", str(files / "p.toml"), "--slots", "3",
               "--selectors", "eagle3", "--selector-ms", "0.5", "--no-progress", "--workers", "1",
               "--json", str(out), *argv])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    return rc, err, out.exists()


def spec(name: str) -> str:
    return f"{MODULE}:{name}"


CACHE_CASES = [
    ("NaNScores", "nan at layer 0, expert 1"),
    ("InfScores", "inf at layer 1, expert 2"),
    ("StrScores", "<U32 values"),
    ("ComplexScores", "complex128 values"),
    ("ObjectScores", "object values"),
    ("NarrowScores", f"shape [{L}, {N - 1}]"),
    ("FlatScores", f"shape [{L * N}]"),
    ("RaggedScores", "no array"),
]


@pytest.mark.parametrize("name, wrong", CACHE_CASES)
def test_cache_scores_outside_the_contract_are_one_line_naming_the_policy(files, capsys, name, wrong):
    rc, err, written = run(files, capsys, "--cache", spec(name))
    assert rc == 2 and len(err) == 1 and not written, err
    assert f"cache policy {spec(name)!r}: scores()" in err[0] and wrong in err[0], err[0]


def test_a_cache_policy_check_that_raises_is_one_line(files, capsys):
    rc, err, written = run(files, capsys, "--cache", spec("CheckRaises"))
    assert rc == 2 and len(err) == 1 and not written, err
    assert spec("CheckRaises") in err[0] and "ValueError in check(): check boom" in err[0]


PREFETCH_CASES = [
    ("BeyondPairs", f"pair {L * N} "),
    ("NegativePairs", "pair -1 "),
    ("MismatchedJobs", "but"),
    ("ListJobs", "returned a list, not a simmoe.api.PrefetchJobs"),
    ("TupleJobs", "returned a tuple, not a simmoe.api.PrefetchJobs"),
    ("FloatPairs", "float64 values, not integers"),
    ("MaskPairs", "bool values, not integers"),
    ("NegativeLevels", "level -1 "),
    ("TwoDimPairs", "not a one-dimensional"),
    ("MinusOneLayers", "holds expert -1"),
    ("FlatLayers", "a flat id layer·N + expert?"),
    ("ShortLayers", f"returned {L - 1} entries; it needs one per layer ({L})"),
    ("IntLayers", "[0] is an int"),
    ("FloatLayers", "float64 values, not integers"),
    ("StringLayers", "returned a str"),
    ("HalfLayers", "[0] holds float64 values, not integers"),
    ("NestedLayers", "[0] has shape [1, "),
    ("BoolLayers", "[0] holds True at index "),
    ("NumpyBoolLayers", "[0] holds np.True_ at index "),
    ("BoolPairs", "pairs holds True at index "),
]


@pytest.mark.parametrize("name, wrong", PREFETCH_CASES)
def test_prefetch_outputs_outside_the_contract_are_one_line_naming_the_policy(files, capsys, name, wrong):
    rc, err, written = run(files, capsys, "--prefetch", spec(name))
    assert rc == 2 and len(err) == 1 and not written, err
    assert f"prefetch policy {spec(name)!r}" in err[0] and wrong in err[0], err[0]


@pytest.mark.parametrize("kind, mine, own", [
    ("cache", "ListScores", "lru"), ("cache", "Float32Scores", "lru"),
    ("prefetch", "ListPairs", "draft"), ("prefetch", "ArrayLayers", "next-layer"),
])
def test_valid_forms_of_an_output_replay_as_simmoe_own(files, kind, mine, own):
    trace = trace_()
    base = dict(selector="eagle3", slots=3, selector_ms=0.5)
    ref = replay(trace, ReplayConfig(**base, **{kind: own}), PROFILE)
    got = replay(trace, ReplayConfig(**base, **{kind: spec(mine)}), PROFILE)
    for key in ("hits", "misses", "cycle_ms", *(("prefetched", "useful", "wasted") if kind == "prefetch" else ())):
        assert np.array_equal(ref.cycles[key], got.cycles[key]), key


def test_a_never_keep_score_is_accepted_and_its_expert_never_stays(files):
    import importlib

    from simmoe.replay.caches import ExpertCache

    cache = ExpertCache(L, N, 3, importlib.import_module(MODULE).NeverKeepScores())
    rng = np.random.default_rng(0)
    for _ in range(20):
        demand = rng.random((L, N)) < 0.4
        before = cache.resident.copy()
        hits, _ = cache.forward(demand)
        assert np.array_equal(hits, (demand & before).sum(axis=1))
        assert not cache.resident[:, 0].any() and (cache.resident.sum(axis=1) <= 3).all()
        assert cache.resident[:, 1:].sum() == np.minimum((before | demand)[:, 1:].sum(axis=1), 3).sum()


# -- the checks against a reference written out ---------------------------------------------------------
def _scores_ok(values: np.ndarray) -> bool:
    return bool(all(not (v != v or v == float("inf")) for v in values.reshape(-1).tolist()))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([0.0, 1.5, -2.0, float("nan"), float("inf"), float("-inf")]),
                min_size=L * N, max_size=L * N))
def test_float_scores_are_refused_exactly_when_some_is_nan_or_plus_inf(values):
    s = np.asarray(values).reshape(L, N)
    if _scores_ok(s):
        assert np.array_equal(check_scores(s, "p", L, N), s)
    else:
        with pytest.raises(SimmoeError, match="^cache policy 'p': scores"):
            check_scores(s, "p", L, N)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, L * N + 3), st.integers(-2, 4)), max_size=12))
def test_jobs_are_refused_exactly_when_a_pair_or_level_is_out_of_range(jobs):
    pairs = np.array([p for p, _ in jobs], dtype=np.int64)
    levels = np.array([lv for _, lv in jobs], dtype=np.int64)
    ok = all(0 <= p < L * N and lv >= 0 for p, lv in jobs)
    if ok:
        got = check_jobs(PrefetchJobs(pairs, levels), "p", L, N)
        assert got is not None and np.array_equal(got[0], pairs) and np.array_equal(got[1], levels)
    else:
        with pytest.raises(SimmoeError, match="^prefetch policy 'p': drafting()"):
            check_jobs(PrefetchJobs(pairs, levels), "p", L, N)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(-2, N + 2), max_size=5), min_size=L - 1, max_size=L + 1))
def test_layers_are_refused_exactly_when_the_length_or_an_id_is_wrong(layers):
    ok = len(layers) == L and all(0 <= e < N for x in layers for e in x)
    if ok:
        assert check_layers(layers, "p", L, N) == layers
    else:
        with pytest.raises(SimmoeError, match="^prefetch policy 'p': layers()"):
            check_layers(layers, "p", L, N)


# -- the time saved: a number, or null with a reason; never NaN --------------------------------------------
def _strict(text: str) -> dict:
    def refuse(const):
        raise AssertionError(f"the JSON holds {const}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("policy", ["draft", spec("ListPairs")])
def test_the_time_saved_is_null_with_a_reason_when_its_baseline_is_skipped(files, capsys, policy):
    rc = main(["replay", str(files / "t.parquet"), "--hardware", str(files / "p.toml"), "--slots", "3",
               "--selectors", "ar,eagle3", "--selector-ms", "0.5", "--no-progress", "--workers", "1",
               "--prefetch", policy, "--no-time-saved", "--json", "-"])
    doc = _strict(capsys.readouterr().out)
    assert rc == 0 and "--no-time-saved" in doc["time_saved"]
    for row in doc["results"]:
        assert row["saved_ms_per_token"] is None and row["saved_pct"] is None
        assert np.isfinite(row["prefetched_per_token"])


def test_the_time_saved_of_ar_with_a_prefetch_is_a_number(files, capsys):
    rc = main(["replay", str(files / "t.parquet"), "--hardware", str(files / "p.toml"), "--slots", "3",
               "--selectors", "ar", "--selector-ms", "0.5", "--no-progress", "--workers", "1",
               "--prefetch", "eam", "--json", "-"])
    doc = _strict(capsys.readouterr().out)
    assert rc == 0 and "time_saved" not in doc
    assert all(isinstance(r["saved_ms_per_token"], float) for r in doc["results"])


def test_the_time_saved_has_no_figure_where_nothing_was_decoded():
    requests = {"output_len": np.array([1, 1]), "decode_ms": np.array([0.0, 0.0])}
    out = prefetch_counters({"prefetched": np.array([2])}, requests, baseline_decode_ms=0.0)
    assert out["saved_ms_per_token"] is None and out["saved_pct"] is None and out["prefetched_per_token"] == 1.0


# -- what a policy is handed is read-only: a write is one line; nothing a later stage reads changes ----------
def _probed(trace, **config):
    """The replay of ``config`` on ``trace`` (eagle3, 3 slots) and where its probes could write."""
    import importlib

    module = importlib.import_module(MODULE)
    module.WRITABLE.clear()
    res = replay(trace, ReplayConfig(**{"selector": "eagle3", "slots": 3, "selector_ms": 0.5, **config}), PROFILE)
    return res, list(module.WRITABLE)


PROBES = [
    dict(cache=spec("ProbeCache"), prefetch="draft"),                       # inserted: insert_many
    dict(cache=spec("ProbeCache"), prefetch="next-layer"),                  # inserted: insert_layer
    dict(cache=spec("ProbeCache"), prefetch="next-layer", cache_budget=5),  # inserted: under one budget
    dict(cache="lru", prefetch=spec("ProbePrefetch")),
    dict(cache="none", prefetch=spec("ProbePrefetch")),                      # hits from the staging buffers
    dict(selector="specfit-prefetch", cache=spec("OnlineProbeCache"), prefetch=spec("LiveProbePrefetch")),
]


@pytest.mark.parametrize("config", PROBES, ids=lambda c: "-".join(str(v).split(":")[-1] for v in c.values()))
def test_every_array_a_cache_or_prefetch_policy_is_handed_is_read_only(files, config):
    trace = trace_()
    before = {f: np.copy(getattr(trace, f)) for f in ("root_routes", "node_routes", "node_level", "node_p")}
    res, writable = _probed(trace, **config)
    assert writable == [], writable
    # the probes wrote nothing and ranked as their bases do: the replay is that of simmoe's own policies
    own = {spec("ProbeCache"): "lru", spec("OnlineProbeCache"): "lru", spec("ProbePrefetch"): None,
           spec("LiveProbePrefetch"): None}
    if config["prefetch"] not in own and config["cache"] in own:
        ref = replay(trace, ReplayConfig(**{"selector": "eagle3", "slots": 3, "selector_ms": 0.5,
                                            **config, "cache": "lru"}), PROFILE)
        for key in ("hits", "misses", "cycle_ms", "prefetched", "useful", "wasted"):
            assert np.array_equal(ref.cycles[key], res.cycles[key]), key
    for f, a in before.items():
        assert np.array_equal(getattr(trace, f), a), f


def test_the_probes_reach_every_kind_of_argument(files):
    """The probe walks what it is handed: every argument's arrays are found (else the test above proves nothing)."""
    import importlib

    module = importlib.import_module(MODULE)
    found: set[str] = set()
    real = module.probe

    def probe(path, obj):
        for where, _ in module.arrays(path, obj):
            found.add(where.split("[")[0] if where.startswith("reset(shape).future") else where)
        real(path, obj)

    module.probe = probe
    try:
        for config in PROBES:
            _probed(trace_(), **config)
    finally:
        module.probe = real
    for where in ("observe(event).demand", "observe(event).hits", "inserted(pairs)", "reset(shape).future",
                  "reset(shape).trace.node_routes", "reset(shape).trace.requests.prefill_union",
                  "check(shape).trace.node_routes", "drafting(step).roots", "drafting(step).available",
                  "drafting(step).pools[0]['levels']", "drafting(step).pools[0]['p']",
                  "drafting(step).pools[0]['routes']", "drafting(step).pools[0]['selected']",
                  "drafting(step).truth[0][0]", "drafting(step).truth[0][1]", "layers(step).pools[0]['selected']"):
        assert where in found, (where, sorted(found))


WRITERS = [("cache", "WritesDemand", "observe()"), ("cache", "WritesRoutes", "reset()"),
           ("prefetch", "WritesAvailable", "drafting()"), ("prefetch", "WritesSelected", "layers()")]


@pytest.mark.parametrize("kind, name, method", WRITERS)
def test_a_policy_writing_into_what_it_is_handed_is_one_line_naming_it(files, capsys, kind, name, method):
    rc, err, written = run(files, capsys, f"--{kind}", spec(name))
    assert rc == 2 and len(err) == 1 and not written, err
    what = "cache policy" if kind == "cache" else "prefetch policy"
    assert f"{what} {spec(name)!r} raised ValueError in {method}" in err[0] and "read-only" in err[0], err[0]


def test_a_policy_that_bends_its_trace_changes_neither_the_replay_nor_the_trace(files):
    trace = trace_()
    meta = json.dumps(trace.meta, sort_keys=True, default=str)
    routes, lengths = trace.node_routes, trace.requests.output_len
    base = dict(selector="eagle3", slots=3, selector_ms=0.5)
    got = replay(trace, ReplayConfig(**base, cache=spec("BendsMeta")), PROFILE)
    ref = replay(trace, ReplayConfig(**base, cache="lru"), PROFILE)
    for key in ("hits", "misses", "cycle_ms", "committed"):
        assert np.array_equal(ref.cycles[key], got.cycles[key]), key
    assert json.dumps(trace.meta, sort_keys=True, default=str) == meta
    assert trace.node_routes is routes and trace.requests.output_len is lengths


def test_a_read_only_trace_holds_the_same_values_and_leaves_the_trace_writable():
    from simmoe.replay.plugins import read_only_trace

    trace = trace_()
    trace.request_positions(0)        # a cached array (the requests' first rows) is handed read-only too
    copy = read_only_trace(trace)
    for obj, mine in ((trace, copy), (trace.requests, copy.requests)):
        arrays = {k: v for k, v in vars(obj).items() if isinstance(v, np.ndarray)}
        assert len(arrays) >= (6 if obj is trace.requests else 12) and (obj is trace.requests or "_starts" in arrays)
        for name, a in arrays.items():
            b = getattr(mine, name)
            assert not b.flags.writeable and a.flags.writeable, name
            assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), name
    assert copy.meta == trace.meta and copy.meta is not trace.meta
    assert copy.meta["geometry"] is not trace.meta["geometry"]
    assert copy.geometry == trace.geometry and copy.pool_slice(1) == trace.pool_slice(1)


# -- messages name the plugin as the user typed it: module:Name above, or its registered name -------------------
def test_a_registered_plugin_is_named_by_its_registered_name(files, capsys, tmp_path, monkeypatch):
    import importlib

    from simmoe.replay import plugins

    info = tmp_path / "integrity_dist-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: integrity-dist\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[simmoe.caches]\nnan-ranks = {spec('NaNScores')}\n\n"
                                           f"[simmoe.prefetch]\nbool-lists = {spec('BoolLayers')}\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def clear():
        plugins._installed.cache_clear()
        plugins.load.cache_clear()
        importlib.invalidate_caches()

    clear()
    try:
        for kind, name, method in (("cache", "nan-ranks", "scores()"), ("prefetch", "bool-lists", "layers()")):
            rc, err, written = run(files, capsys, f"--{kind}", name)
            assert rc == 2 and len(err) == 1 and not written, err
            assert f"policy {name!r}: {method}" in err[0], err[0]
    finally:
        monkeypatch.undo()
        clear()


# -- a bool among ints is refused, against a reference written out ---------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.one_of(st.integers(-1, N), st.booleans()), max_size=4), min_size=L, max_size=L))
def test_layers_with_bools_are_refused_exactly_when_some_id_is_a_bool_or_out_of_range(layers):
    ok = all(type(e) is int and 0 <= e < N for x in layers for e in x)
    if ok:
        assert check_layers(layers, "p", L, N) == layers
    else:
        with pytest.raises(SimmoeError, match="^prefetch policy 'p': layers()"):
            check_layers(layers, "p", L, N)
