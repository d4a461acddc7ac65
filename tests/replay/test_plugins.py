"""Plugins (simmoe.replay.plugins): names, ``module:Name`` loading, protocol checks, plugin failures in one line."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest
from factories import random_trace

from simmoe.errors import SimmoeError
from simmoe.hardware.profile import load_profile
from simmoe.replay import plugins
from simmoe.replay.engine import ReplayConfig, replay

MODULE = "simmoe_plugin_tests"       # written to a temporary folder on sys.path (module fixture)
PROFILE = load_profile("a100-pcie-40gb").replace(num_layers=0)

SOURCE = '''
import numpy as np

from simmoe.api import Choice
from simmoe.replay.cache_policies import LRU
from simmoe.replay.prefetch_policies import Draft


class TopK:
    """The K nodes of highest path probability (ties by level, then id): eagle3's rule, written apart."""

    name = "top-k"

    def __init__(self, context):
        self.K = context.K

    def select(self, view):
        if view.size == 0:
            return Choice(np.zeros(0, dtype=np.int64), 0)
        order = np.lexsort((np.arange(view.size), view.levels, -view.p.astype(np.float64)))
        nodes = np.sort(order[:min(self.K, view.size)])
        return Choice(nodes, view.depth)


class MyLRU(LRU):
    name = "my-lru"


class MyDraft(Draft):
    name = "my-draft"


class BadSelector(TopK):
    name = "bad-selector"

    def select(self, view):
        if view.row > 0:
            raise ValueError("selector boom")
        return super().select(view)


class OrphanSelector(TopK):
    """Chooses a child without its parent (not ancestor-closed)."""

    name = "orphan"

    def select(self, view):
        deep = np.flatnonzero(view.parents >= 0)
        if len(deep):
            return Choice(deep[:1], view.depth)
        return super().select(view)


class BadCache(LRU):
    name = "bad-cache"

    def observe(self, event):
        if event.index >= 2:
            raise KeyError("cache boom")
        super().observe(event)


class BadResetCache(LRU):
    name = "bad-reset-cache"

    def reset(self, shape):
        raise RuntimeError("reset boom")


class BadPrefetch(Draft):
    name = "bad-prefetch"

    def drafting(self, step):
        raise ZeroDivisionError("prefetch boom")


class NoScores:
    name = "no-scores"

    def reset(self, shape):
        pass

    def observe(self, event):
        pass


class NoName:
    def select(self, view):
        return None


class NoLayers:
    name = "no-layers"

    def reset(self, shape):
        pass

    def drafting(self, step):
        return None


NOT_A_CLASS = 3
'''


@pytest.fixture(scope="module", autouse=True)
def plugin_module(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plugins")
    (folder / f"{MODULE}.py").write_text(textwrap.dedent(SOURCE))
    sys.path.insert(0, str(folder))
    yield
    sys.path.remove(str(folder))
    sys.modules.pop(MODULE, None)


def spec(name: str) -> str:
    return f"{MODULE}:{name}"


def trace_():
    return random_trace(4, num_requests=3, output_len=(4, 9), L=3, N=8, k=2, pool_nodes=7)


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text and text
    return text


# -- names ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind, bad, field", [("selector", "nope", "selector"), ("cache", "fifo", "cache"),
                                               ("prefetch", "later", "prefetch")])
def test_an_unknown_name_lists_the_known_ones(kind, bad, field):
    with pytest.raises(SimmoeError) as exc:
        ReplayConfig(**{field: bad}).validate()
    line = one_line(exc)
    assert f"unknown {plugins.KIND_NAMES[kind]} {bad!r}" in line and "module:Name" in line
    for name in plugins.ORDER[kind]:
        assert name in line, name
    if kind in plugins.NONE_NAMES:
        assert "none" in line


def test_simmoe_own_implementations_are_registered_in_documentation_order():
    for kind in ("selector", "cache", "prefetch"):
        assert plugins.names(kind)[:len(plugins.ORDER[kind])] == list(plugins.ORDER[kind])


# -- module:Name ----------------------------------------------------------------------------------
def test_module_name_plugins_run_as_simmoe_own():
    trace = trace_()
    base = replay(trace, ReplayConfig(selector="eagle3", slots=3, selector_ms=0.5, prefetch="draft"), PROFILE)
    mine = replay(trace, ReplayConfig(selector=spec("TopK"), cache=spec("MyLRU"), prefetch=spec("MyDraft"), slots=3,
                                      selector_ms=0.5), PROFILE)
    for key in ("draft_nodes", "accepted", "committed", "hits", "misses", "prefetched", "useful", "wasted",
                "cycle_ms"):
        assert np.array_equal(base.cycles[key], mine.cycles[key]), key


@pytest.mark.parametrize("kind, name, message", [
    ("selector", "no_such_module_xyz:TopK", "cannot import module 'no_such_module_xyz'"),
    ("selector", spec("Missing"), f"module {MODULE!r} has no 'Missing'"),
    ("cache", spec("NoScores"), "does not satisfy simmoe.api.CachePolicy: no method scores()"),
    ("prefetch", spec("NoLayers"), "does not satisfy simmoe.api.PrefetchPolicy: no method layers()"),
    ("selector", spec("NoName"), "no class attribute 'name'"),
    ("selector", spec("NOT_A_CLASS"), "is a int, not a class implementing simmoe.api.Selector"),
])
def test_a_plugin_that_cannot_be_loaded_or_misses_its_protocol_is_refused_in_one_line(kind, name, message):
    with pytest.raises(SimmoeError) as exc:
        plugins.load(kind, name)
    line = one_line(exc)
    assert message in line and name in line


# -- a plugin that fails during a replay ------------------------------------------------------------
@pytest.mark.parametrize("changes, names, raised", [
    ({"selector": spec("BadSelector")}, "selector 'simmoe_plugin_tests:BadSelector'", "ValueError"),
    ({"cache": spec("BadCache")}, "cache policy 'simmoe_plugin_tests:BadCache'", "KeyError"),
    ({"prefetch": spec("BadPrefetch")}, "prefetch policy 'simmoe_plugin_tests:BadPrefetch'", "ZeroDivisionError"),
    ({"cache": spec("BadCache"), "batch": 2}, "cache policy 'simmoe_plugin_tests:BadCache'", "KeyError"),
])
def test_an_exception_inside_a_plugin_becomes_one_line_naming_it(changes, names, raised):
    cfg = ReplayConfig(**{"selector": "eagle3", "slots": 3, "selector_ms": 0.5, **changes})
    with pytest.raises(SimmoeError) as exc:
        replay(trace_(), cfg, PROFILE)
    line = one_line(exc)
    assert line.startswith(names) and raised in line and "boom" in line


def test_a_plugin_selector_that_breaks_the_contract_is_named():
    with pytest.raises(SimmoeError) as exc:
        replay(trace_(), ReplayConfig(selector=spec("OrphanSelector"), slots=3, selector_ms=0.5), PROFILE)
    line = one_line(exc)
    assert "orphan" in line.lower() and "ancestor-closed" in line


def test_the_plugin_named_is_the_one_that_raised():
    cfg = ReplayConfig(selector="eagle3", slots=3, selector_ms=0.5, cache=spec("MyLRU"), prefetch=spec("BadPrefetch"))
    with pytest.raises(SimmoeError) as exc:
        replay(trace_(), cfg, PROFILE)
    line = one_line(exc)
    assert line.startswith("prefetch policy") and "in drafting()" in line


def test_an_exception_in_a_plugin_reset_is_one_line_naming_it():
    cfg = ReplayConfig(selector="eagle3", slots=3, selector_ms=0.5, cache=spec("BadResetCache"))
    with pytest.raises(SimmoeError) as exc:
        replay(trace_(), cfg, PROFILE)
    line = one_line(exc)
    assert line.startswith("cache policy 'simmoe_plugin_tests:BadResetCache'") and "in reset()" in line


def test_the_command_line_exits_2_with_one_line_naming_the_plugin(tmp_path, capsys):
    from simmoe.cli import main
    from simmoe.hardware.profile import save_profile
    from simmoe.trace.io import write_trace

    write_trace(trace_(), tmp_path / "t.parquet")
    save_profile(PROFILE, tmp_path / "p.toml")
    out = tmp_path / "out.json"
    for argv in (["--selectors", f"eagle3,{spec('BadSelector')}"], ["--cache", spec("BadCache")],
                 ["--prefetch", spec("BadPrefetch")], ["--cache", spec("NoScores")]):
        rc = main(["replay", str(tmp_path / "t.parquet"), "--hardware", str(tmp_path / "p.toml"), "--slots", "3",
                   "--selector-ms", "0.5", "--no-progress", "--workers", "1", "--json", str(out), *argv])
        err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        assert rc == 2 and len(err) == 1 and MODULE in err[0], (argv, err)
        assert not out.exists()
