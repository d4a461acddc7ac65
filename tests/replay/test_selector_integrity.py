"""A selector plugin cannot bend a result: read-only views, verdicts and costs only when declared, choices refused.

Plugins are written to a temporary module (``module:Name``), as a researcher's
would be; every refusal is one line naming the plugin, the request and the
position, and what a plugin only reads gives the built-in's numbers.
"""

from __future__ import annotations

import json
import sys
import textwrap

import numpy as np
import pytest
from factories import random_trace, random_tree
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.api import Undeclared, UndeclaredError
from simmoe.errors import SimmoeError
from simmoe.hardware.profile import load_profile
from simmoe.replay import selection
from simmoe.replay.engine import ReplayConfig, replay

MODULE = "simmoe_integrity_plugins"
PROFILE = load_profile("a100-pcie-40gb").replace(num_layers=0)
KEYS = ("draft_nodes", "accepted", "committed", "drafted_levels", "hits", "misses", "cycle_ms")

# class name -> (statement run in select() before choosing eagle3's nodes, extra class attributes)
WRITERS = {
    "WriteRoutes": ("view.node_routes[:] = 0", ""),
    "WriteRootRoutes": ("view.root_routes[:] = 0", ""),
    "WriteP": ("view.p[:] = 1", ""),
    "WriteQ": ("view.q[:] = 1", ""),
    "WriteParents": ("view.parents[:] = -1", ""),
    "WriteLevels": ("view.levels[:] = 1", ""),
    "WriteAgree": ("view.agree[:] = True", "reads_verdicts = True"),
    "WriteCovered": ("if view.batch.covered is not None: view.batch.covered[:] = True", "uses_cost = True"),
    "WriteAvailable": ("view.available(1)[:] = True", "uses_residency = True"),
}
# class name -> (what bad() returns, or None where the pool allows no such mistake; a fragment of the refusal)
BAD = {
    "Duplicate": ("Choice(np.r_[top[:1], top[:1]], d) if len(top) else None", "repeats nodes[0]"),
    "Unsorted": ("Choice(top[::-1].copy(), d) if len(top) > 1 else None", "is below nodes[0]"),
    "BoolMask": ("Choice(np.isin(np.arange(view.size), top), d) if len(top) else None", "a bool mask"),
    "FloatIds": ("Choice(top.astype(float), d) if len(top) else None", "float64 values"),
    "FloatLevels": ("Choice(top, float(d))", "not an integer"),
    "BoolLevels": ("Choice(top, True)", "drafted_levels is True (bool), not an integer"),
    "TooFewLevels": ("Choice(top, 0) if len(top) else None", "drafted 0 levels; its nodes need"),
    "PastTheEnd": ("Choice(np.array([view.size]), d)", "is outside the pool"),
    "Negative": ("Choice(np.array([-1]), d)", "nodes[0] = -1 is outside the pool"),
    "Orphan": ("Choice(np.flatnonzero(view.parents >= 0)[:1], d) if (view.parents >= 0).any() else None",
               "without its parent"),
    "OverK": ("Choice(np.arange(view.size), d) if view.size > self.K else None", "more than K = 7"),
    "TwoD": ("Choice(top[None], d) if len(top) else None", "1-D"),
    "NotAChoice": ("(top, d)", "not a simmoe.api.Choice"),
}
HEADER = '''
import numpy as np

from simmoe.api import Choice
from simmoe.replay.paths import longest_agreeing_path


def top(view, K):
    order = np.lexsort((np.arange(view.size), view.levels, -view.p.astype(np.float64)))
    return np.sort(order[:min(K, view.size)]).astype(np.int64)


class TopK:
    name = "top-k"

    def __init__(self, context):
        self.K = context.K

    def select(self, view):
        return Choice(top(view, self.K), view.depth)


class Reader(TopK):
    """Reads every array and the cost it declares; writes nothing."""
    name = "reader"
    uses_cost = True

    def select(self, view):
        seen = [np.asarray(a).sum() for a in (view.parents, view.levels, view.p, view.q, view.root_routes,
                                               view.node_routes)]
        assert np.isfinite(view.cost.time(0, 0)) and len(seen) == 6 and view.pool().n == view.size
        return super().select(view)


class MyOracle(TopK):
    name = "my-oracle"
    reads_verdicts = True

    def select(self, view):
        path = longest_agreeing_path(view.parents, view.agree)
        return Choice(path, len(path))


class PeekAgree(MyOracle):
    name = "peek"
    reads_verdicts = False


class PeekCost(TopK):
    name = "peek-cost"

    def select(self, view):
        view.cost.time(1, 3)
        return super().select(view)


class PeekContextCost(TopK):
    name = "peek-context-cost"

    def __init__(self, context):
        super().__init__(context)
        self.b = context.cost.b


class PeekInPrepare(TopK):
    name = "peek-prepare"
    needs_prepare = True

    def prepare(self, trace, num_requests, views_at):
        views_at([0])[0].agree.sum()


class PeekTraceInPrepare(TopK):
    name = "peek-trace-prepare"
    needs_prepare = True

    def prepare(self, trace, num_requests, views_at):
        trace.node_agree.sum()


class WriteTraceInPrepare(TopK):
    name = "write-trace-prepare"
    needs_prepare = True

    def prepare(self, trace, num_requests, views_at):
        trace.node_routes[:] = 0


class OracleReadsTraceInPrepare(MyOracle):
    name = "oracle-trace-prepare"
    needs_prepare = True

    def prepare(self, trace, num_requests, views_at):
        self.accepted = int(trace.node_agree.sum())


class Bad(TopK):
    def select(self, view):
        top_nodes, d = top(view, self.K), view.depth
        bad = self.bad(view, top_nodes, d)
        return bad if bad is not None else Choice(top_nodes, d)
'''


def _source() -> str:
    out = [HEADER]
    for cls, (stmt, attrs) in WRITERS.items():
        out.append(f"\n\nclass {cls}(TopK):\n    name = {cls.lower()!r}\n    {attrs or 'pass'}\n\n"
                   f"    def select(self, view):\n        {stmt}\n        return super().select(view)\n")
    for cls, (expr, _) in BAD.items():
        out.append(f"\n\nclass {cls}(Bad):\n    name = {cls.lower()!r}\n\n"
                   f"    def bad(self, view, top, d):\n        return {expr}\n")
    return "".join(out)


@pytest.fixture(scope="module", autouse=True)
def plugin_module(tmp_path_factory):
    folder = tmp_path_factory.mktemp("integrity")
    (folder / f"{MODULE}.py").write_text(textwrap.dedent(_source()))
    sys.path.insert(0, str(folder))
    yield
    sys.path.remove(str(folder))
    sys.modules.pop(MODULE, None)


def spec(name: str) -> str:
    return f"{MODULE}:{name}"


@pytest.fixture(scope="module")
def trace():
    return random_trace(7, num_requests=3, output_len=(5, 9), L=3, N=8, k=2, pool_nodes=9)


def run(trace, selector: str, **kw):
    return replay(trace, ReplayConfig(selector=selector, slots=3, selector_ms=0.5, **kw), PROFILE)


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert text and "\n" not in text
    return text


def same_cycles(a, b) -> None:
    for key in KEYS:
        assert np.array_equal(a.cycles[key], b.cycles[key]), key


# -- 1. read-only views -----------------------------------------------------------------------------
def _columns(trace) -> dict:
    return {f: getattr(trace, f).copy() for f in ("node_parent", "node_level", "node_p", "node_q", "node_agree",
                                                    "root_routes", "node_routes")}


@pytest.mark.parametrize("cls", list(WRITERS))
def test_a_selector_that_writes_to_its_view_is_refused_and_changes_nothing(trace, cls):
    before, eagle3 = _columns(trace), run(trace, "eagle3")
    extra = {"batch": 2} if cls == "WriteCovered" else {}
    with pytest.raises(SimmoeError) as exc:
        run(trace, spec(cls), **extra)
    line = one_line(exc)
    assert line.startswith(f"selector {spec(cls)!r}") and "read-only" in line and "at request" in line
    for f, col in before.items():     # the trace the later stages read is untouched
        assert np.array_equal(getattr(trace, f), col), f
    same_cycles(run(trace, "eagle3"), eagle3)


def test_a_selector_that_only_reads_gives_the_built_in_numbers(trace):
    same_cycles(run(trace, spec("Reader")), run(trace, "eagle3"))
    same_cycles(run(trace, spec("Reader"), batch=2), run(trace, "eagle3", batch=2))


def test_every_array_of_a_view_is_read_only_and_predictions_too(trace):
    from simmoe.replay.pools import TracePools
    from simmoe.replay.route_prediction import RoutePredictor

    for accuracy in (1.0, 0.5):
        pools = TracePools(trace, RoutePredictor(8, accuracy, seed=1), trace.node_agree, reads_verdicts=True)
        for row in range(trace.num_positions):
            v = pools.view(row)
            for name in ("parents", "levels", "p", "q", "agree", "root_routes", "node_routes"):
                assert not getattr(v, name).flags.writeable, (accuracy, name)
            assert not any(a.flags.writeable for a in pools.predictions(row))
    assert trace.node_routes.flags.writeable   # the trace's own columns keep their flags


# -- 2. verdicts and costs only when declared -------------------------------------------------------
@pytest.mark.parametrize("cls, what, declare", [
    ("PeekAgree", "view.agree", "reads_verdicts"),
    ("PeekCost", "view.cost", "uses_cost"),
    ("PeekContextCost", "context.cost", "uses_cost"),
    ("PeekInPrepare", "view.agree", "reads_verdicts"),
    ("PeekTraceInPrepare", "trace.node_agree", "reads_verdicts"),
])
def test_reading_what_a_selector_did_not_declare_names_what_to_declare(trace, cls, what, declare):
    with pytest.raises(SimmoeError) as exc:
        run(trace, spec(cls))
    line = one_line(exc)
    assert spec(cls) in line and f"used {what}" in line and f"{declare} = True" in line
    assert "NoneType" not in line


def test_a_declared_oracle_gets_the_verdicts_and_matches_the_built_in_one(trace):
    same_cycles(run(trace, spec("MyOracle")), run(trace, "oracle"))
    same_cycles(run(trace, spec("OracleReadsTraceInPrepare")), run(trace, "oracle"))


def test_the_trace_handed_to_prepare_is_read_only(trace):
    before, eagle3 = _columns(trace), run(trace, "eagle3")
    with pytest.raises(SimmoeError) as exc:
        run(trace, spec("WriteTraceInPrepare"))
    line = one_line(exc)
    assert spec("WriteTraceInPrepare") in line and "read-only" in line and "prepare" in line
    for f, col in before.items():
        assert np.array_equal(getattr(trace, f), col), f
    same_cycles(run(trace, "eagle3"), eagle3)


@pytest.mark.parametrize("use", [len, bool, iter, np.asarray, lambda g: g[0], lambda g: g.sum(),
                                 lambda g: g.time(1, 2)])
def test_the_placeholder_refuses_every_use(use):
    guard = Undeclared("view.agree", "reads_verdicts")
    with pytest.raises(UndeclaredError, match="reads_verdicts = True"):
        use(guard)
    assert guard is not None and "reads_verdicts" in repr(guard)


# -- 3. choices refused, not coerced ---------------------------------------------------------------
@pytest.mark.parametrize("cls", list(BAD))
def test_a_malformed_choice_is_refused_in_one_line_naming_plugin_request_and_position(trace, cls):
    with pytest.raises(SimmoeError) as exc:
        run(trace, spec(cls))
    line = one_line(exc)
    assert line.startswith(f"selector {spec(cls)!r} at request ") and ", position " in line
    assert BAD[cls][1] in line, line


def test_simmoe_own_selectors_return_what_the_check_requires(trace, monkeypatch):
    """Every built-in passes the plugins' check; two are not bound by the trace's K by their definition
    (docs/replay.md): evict's budget is its C(k) table (EVICT Eq. 10), unconstrained has none (App. A.3)."""
    from simmoe.replay import plugins

    plain = {n: run(trace, n) for n in plugins.ORDER["selector"]}
    calls = []

    def checked_init(self, *a, **kw):
        init(self, *a, **kw)
        self.checked = True

    def counting(name, choice, parents, levels, K, where):
        calls.append(1)
        K = {"evict": len(PROFILE.evict_cost), "unconstrained": len(parents)}.get(name, K)
        return check(name, choice, parents, levels, K, where)

    init, check = selection.SelectionStage.__init__, selection.check_choice
    monkeypatch.setattr(selection.SelectionStage, "__init__", checked_init)
    monkeypatch.setattr(selection, "check_choice", counting)
    for name, res in plain.items():
        before = len(calls)
        same_cycles(run(trace, name), res)
        assert name == "ar" or len(calls) > before, name


def _reference_valid(ids, drafted, parents, levels, K) -> bool:
    n = len(parents)
    if any(not 0 <= v < n for v in ids) or any(b <= a for a, b in zip(ids, ids[1:])) or len(ids) > K:
        return False
    chosen = set(ids)
    if any(parents[v] >= 0 and parents[v] not in chosen for v in ids):
        return False
    need = max((int(levels[v]) for v in ids), default=0)
    return need <= drafted <= max((int(x) for x in levels), default=0)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(0, 12), data=st.data())
def test_check_choice_accepts_exactly_what_the_brute_force_rule_accepts(seed, n, data):
    parents, levels = random_tree(np.random.default_rng(seed), n)
    n = len(parents)
    picked = data.draw(st.sets(st.integers(0, max(n - 1, 0)), max_size=n))
    closed = set()
    for v in picked:              # its ancestors too: ancestor-closed sets are common, not luck
        while v >= 0 and n:
            closed.add(v)
            v = int(parents[v])
    ids = sorted(closed)
    how = data.draw(st.sampled_from(["keep", "reverse", "repeat", "drop", "outside", "negative"]))
    if how == "reverse":
        ids = ids[::-1]
    elif how == "repeat" and ids:
        ids = ids[:1] + ids
    elif how == "drop" and ids:
        ids = ids[1:]
    elif how == "outside":
        ids = ids + [n]
    elif how == "negative":
        ids = [-1] + ids
    drafted = data.draw(st.integers(-1, 7))
    K = data.draw(st.integers(0, 8))
    raw = np.array(ids, dtype=np.int32)
    ok = _reference_valid(ids, drafted, parents.tolist(), levels.tolist(), K)
    if ok:
        choice = selection.check_choice("x", type("C", (), {"nodes": raw, "drafted_levels": drafted})(),
                                        parents, levels, K, "here")
        assert choice.nodes.tolist() == ids and choice.drafted_levels == drafted
        assert choice.nodes.dtype == np.int64 and not np.shares_memory(choice.nodes, raw)
    else:
        with pytest.raises(SimmoeError, match="^selector 'x' here: "):
            selection.check_choice("x", type("C", (), {"nodes": raw, "drafted_levels": drafted})(),
                                   parents, levels, K, "here")


# -- the command line: exit 2 in one line; oracles marked; what a plugin is charged ---------------
@pytest.fixture(scope="module")
def files(trace, tmp_path_factory):
    from simmoe.hardware.profile import save_profile
    from simmoe.trace.io import write_trace

    d = tmp_path_factory.mktemp("cli")
    write_trace(trace, d / "t.parquet")
    save_profile(PROFILE, d / "p.toml")
    return d


def cli(files, *argv):
    from simmoe.cli import main

    return main(["replay", str(files / "t.parquet"), "--hardware", str(files / "p.toml"), "--slots", "3",
                 "--no-progress", "--workers", "1", *argv])


@pytest.mark.parametrize("cls", ["WriteRoutes", "WriteAgree", "WriteP"])
def test_the_command_line_refuses_a_writing_selector_in_one_line(files, capsys, cls):
    out = files / f"{cls}.json"
    assert cli(files, "--selectors", f"eagle3,{spec(cls)}", "--json", str(out)) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and spec(cls) in err[0] and "read-only" in err[0], err
    assert not out.exists()


def test_oracles_are_marked_in_the_json_and_the_table_and_uncharged_plugins_said(files, capsys):
    out = files / "rows.json"
    assert cli(files, "--selectors", f"eagle3,oracle,{spec('MyOracle')},{spec('TopK')}", "--json", str(out)) == 0
    rows = json.loads(out.read_text())["results"]
    assert [r["oracle"] for r in rows] == [False, True, True, False]
    text = capsys.readouterr().out
    assert "oracle†" in text and "my-oracle†" in text and "eagle3†" not in text and "an oracle: reads" in text
    assert "top-k 0 ms whatever it takes" in text
    assert cli(files, "--selectors", "eagle3", "--selector-ms", "0.5") == 0
    text = capsys.readouterr().out
    assert "†" not in text and "whatever it takes" not in text
