"""How plugins are found, built and isolated.

A configuration is resolved once, at the edge, into a :class:`Setting` the
engine reads; every plugin is built new per replay, so a replay's result does
not depend on what else ran in its process; entry points are imported only
when used, and a name taken by two distributions is refused; a plugin's
``sys.exit`` is a plugin failure, and its prints stay out of a result written
to stdout.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import pickle
import sys
import textwrap
from pathlib import Path

import pytest
from factories import random_trace

from simmoe.cli import main
from simmoe.errors import SimmoeError
from simmoe.hardware.profile import load_profile, save_profile
from simmoe.replay import plugins
from simmoe.replay.config import SELECTOR_FLAGS, ReplayConfig, Setting, plan_key, resolve
from simmoe.replay.engine import check_setting, replay, replay_all

MODULE = "simmoe_loading_tests"          # written to a temporary folder on sys.path (module fixture)
EXIT_MODULE = "simmoe_loading_exits"     # calls sys.exit(5) when imported
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "simmoe-example-plugins" / "src"
PROFILE = load_profile("a100-pcie-40gb").replace(num_layers=0)
RESIDENT = load_profile("a100-sxm-resident").replace(num_layers=0)

SOURCE = '''
import sys

import numpy as np

from simmoe.api import Choice
from simmoe.replay.cache_policies import LRU
from simmoe.replay.prefetch_policies import Draft


class TopK:
    name = "top-k"

    def __init__(self, context):
        self.K = context.K

    def select(self, view):
        order = np.lexsort((np.arange(view.size), view.levels, -view.p.astype(np.float64)))
        return Choice(np.sort(order[:min(self.K, view.size)]).astype(np.int64), view.depth)


class ExitSelect(TopK):
    name = "exit-select"

    def select(self, view):
        sys.exit(0)


class ExitBuild(TopK):
    name = "exit-build"

    def __init__(self, context):
        sys.exit(3)


class ExitScores(LRU):
    name = "exit-scores"

    def scores(self):
        sys.exit(3)


class ExitCheck(LRU):
    name = "exit-check"

    @classmethod
    def check(cls, shape):
        raise SystemExit("no")


class ExitDrafting(Draft):
    name = "exit-drafting"

    def drafting(self, step):
        raise SystemExit


class InterruptObserve(LRU):
    name = "interrupt-observe"

    def observe(self, event):
        raise KeyboardInterrupt


class Chatty(TopK):
    name = "chatty"

    def __init__(self, context):
        print("chatty: built")
        super().__init__(context)

    def select(self, view):
        print("chatty: selecting")
        return super().select(view)


class ChattyLRU(LRU):
    name = "chatty-lru"

    def scores(self):
        print("chatty-lru: scoring")
        return super().scores()


class OnceLRU(LRU):
    """Refuses to be reset twice: an instance must never serve two replays."""

    name = "once-lru"
    built = []

    def __init__(self):
        OnceLRU.built.append(self)

    def reset(self, shape):
        assert not getattr(self, "used", False), "a cache policy instance served a second replay"
        self.used = True
        super().reset(shape)
'''


@pytest.fixture(scope="module", autouse=True)
def plugin_modules(tmp_path_factory):
    folder = tmp_path_factory.mktemp("loading")
    (folder / f"{MODULE}.py").write_text(textwrap.dedent(SOURCE))
    (folder / f"{EXIT_MODULE}.py").write_text("import sys\n\nsys.exit(5)\n")
    sys.path.insert(0, str(folder))
    sys.path.insert(0, str(EXAMPLES))
    yield
    sys.path.remove(str(folder))
    sys.path.remove(str(EXAMPLES))
    for name in (MODULE, EXIT_MODULE):
        sys.modules.pop(name, None)
    # the example package's sources may hold its egg-info (once built): its names leave with the path
    plugins._installed.cache_clear()
    plugins.load.cache_clear()


def spec(name: str) -> str:
    return f"{MODULE}:{name}"


def trace_(requests: int = 3):
    return random_trace(4, num_requests=requests, output_len=(3, 6), L=3, N=8, k=2, pool_nodes=6)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from simmoe.trace.io import write_trace

    d = tmp_path_factory.mktemp("loading-files")
    write_trace(trace_(6), d / "t.parquet")     # 6 requests: 'learned' trains on those the replay leaves
    save_profile(PROFILE, d / "p.toml")
    return d


def cli(files, *argv, out: str | None = None) -> int:
    return main(["replay", str(files / "t.parquet"), "--hardware", str(files / "p.toml"), "--requests", "2",
                 "--slots", "3", "--no-progress", *argv] + (["--json", out] if out else []))


def rows(files, tmp_path, *argv) -> dict:
    out = tmp_path / "out.json"
    out.unlink(missing_ok=True)
    assert cli(files, *argv, out=str(out)) == 0
    return {r["selector"]: r for r in json.loads(out.read_text())["results"]}


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    return lines[0]


# -- one resolved setting ------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["selector", "cache", "prefetch"])
def test_resolve_reads_what_each_registered_plugin_declares(kind):
    for name in plugins.names(kind):
        field = {"selector": "selector", "cache": "cache", "prefetch": "prefetch"}[kind]
        s = resolve(ReplayConfig(**{field: name}))
        cls = plugins.load(kind, name)
        if kind == "selector":
            assert s.selector_cls is cls
            assert s.selector_flags == {k: bool(getattr(cls, k, d)) for k, d in SELECTOR_FLAGS.items()}
        elif kind == "cache":
            assert s.cache_cls is cls and s.needs_future == bool(getattr(cls, "needs_future", False))
        else:
            assert s.prefetch_cls is cls and s.knows_truth == bool(getattr(cls, "knows_truth", False))


def test_a_setting_pickles_as_its_configuration_and_keys_its_plan_alike():
    cfg = ReplayConfig(selector="specfit", cache="belady", prefetch="oracle", route_accuracy=0.8, seed=3)
    s = resolve(cfg)
    back = pickle.loads(pickle.dumps(s))
    assert isinstance(back, Setting) and back == s and back is not s
    assert plan_key(s) == plan_key(cfg)
    assert resolve(cfg).without_prefetch() == resolve(dataclasses.replace(cfg, prefetch="none"))


def test_the_engine_builds_the_resolved_classes_not_the_names():
    import simmoe_loading_tests as m

    trace = trace_()
    s = resolve(ReplayConfig(selector="eagle3", slots=3, selector_ms=0.5), trace, PROFILE)
    m.OnceLRU.built.clear()
    # the setting's class replaces what its name ("lru") would load: the replay must build this one
    swapped = dataclasses.replace(s, cache_cls=m.OnceLRU)
    mine, ref = replay(trace, swapped, PROFILE).summary(), replay(trace, s, PROFILE).summary()
    assert len(m.OnceLRU.built) == 1
    assert mine == ref          # OnceLRU ranks as LRU does


@pytest.mark.parametrize("changes, profile, message", [
    ({"prefetch": "draft"}, RESIDENT, "there are no copies to prefetch"),
    ({"selector": "specfit-prefetch"}, RESIDENT, "keeps every expert there"),
    ({"selector": "specfit-prefetch", "prefetch": "oracle"}, PROFILE, "cannot be combined"),
    ({"selector": "specfit-prefetch", "cache": "belady"}, PROFILE, "needs the replay's demand in advance"),
    ({"cache_budget": 1}, PROFILE, "must hold at least one layer's top-2"),
    ({"batch": 4}, PROFILE, "the batch size must be at most that"),
    ({"cache": spec("ExitCheck")}, PROFILE, "in check() called sys.exit('no')"),
    ({"selector": spec("ExitBuild")}, PROFILE, "building it called sys.exit(3)"),
    ({"selector": "evict"}, PROFILE.replace(evict_cost=()), "needs the profile's C(k) table"),
])
def test_every_refusal_of_a_setting_comes_from_one_check(changes, profile, message):
    cfg = dataclasses.replace(ReplayConfig(selector="eagle3", slots=3), **changes)
    resolve(cfg)                                # the configuration alone is valid
    with pytest.raises(SimmoeError) as exc:
        check_setting(trace_(), cfg, profile)
    assert message in str(exc.value) and "\n" not in str(exc.value)


# -- built new for every replay -------------------------------------------------------------------
def test_no_plugin_instance_serves_two_replays():
    import simmoe_loading_tests as m

    trace = trace_()
    m.OnceLRU.built.clear()
    cfgs = [ReplayConfig(selector=sel, cache=spec("OnceLRU"), slots=s, selector_ms=0.5)
            for sel in ("eagle3", "eagle3", "specfit") for s in (2, 3)]
    replay_all(trace, cfgs, {PROFILE.name: PROFILE}, workers=1)   # shared plans, one process
    for cfg in cfgs[:2]:
        replay(trace, cfg, PROFILE)
    assert len(m.OnceLRU.built) == len(cfgs) + 2


SELECTORS = [n for n in plugins.ORDER["selector"]] + ["simmoe_example_plugins.selector:ProbabilityFloor"]
CACHES = list(plugins.ORDER["cache"]) + ["simmoe_example_plugins.cache:FIFO"]
PREFETCHES = list(plugins.ORDER["prefetch"]) + ["simmoe_example_plugins.prefetch:Roots"]


def test_each_selector_gives_the_same_rows_alone_in_a_list_and_in_workers(files, tmp_path):
    together = ",".join(SELECTORS)
    one = rows(files, tmp_path, "--selectors", together, "--workers", "1")
    two = rows(files, tmp_path, "--selectors", ",".join(reversed(SELECTORS)), "--workers", "2")
    assert set(one) == set(two) == set(SELECTORS)
    for name in SELECTORS:
        alone = rows(files, tmp_path, "--selectors", name, "--workers", "1")
        assert alone[name] == one[name] == two[name], name


@pytest.mark.parametrize("kind, names", [("--cache", CACHES), ("--prefetch", PREFETCHES)])
def test_each_cache_and_prefetch_policy_gives_the_same_rows_alone_in_a_list_and_in_workers(files, tmp_path,
                                                                                          kind, names):
    others = "specfit,simmoe_example_plugins.selector:ProbabilityFloor,eagle3"
    first = None
    for name in names:
        alone = rows(files, tmp_path, kind, name, "--selectors", "eagle3", "--workers", "1")
        listed = rows(files, tmp_path, kind, name, "--selectors", others, "--workers", "2")
        assert alone["eagle3"] == listed["eagle3"], name
        first = first or (name, alone)
    # and the first policy again, after every other one ran in this process
    again = rows(files, tmp_path, kind, first[0], "--selectors", "eagle3", "--workers", "1")
    assert again == first[1]


# -- entry points: loaded when used, a name taken twice refused -----------------------------------
def fake_distribution(folder: Path, name: str, groups: dict[str, dict[str, str]]) -> None:
    """A ``*.dist-info`` folder that importlib.metadata finds on sys.path, with its entry points."""
    info = folder / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items()) + "\n"
        for group, entries in groups.items()))


@pytest.fixture()
def installed(tmp_path, monkeypatch):
    """Install fake distributions for one test: ``installed(name, groups)``; the caches cleared around it."""

    def clear():
        plugins._installed.cache_clear()
        plugins.load.cache_clear()
        importlib.invalidate_caches()

    def install(name: str, groups: dict[str, dict[str, str]]) -> None:
        folder = tmp_path / f"site-{name}"
        fake_distribution(folder, name, groups)
        monkeypatch.syspath_prepend(str(folder))
        clear()

    yield install
    monkeypatch.undo()
    clear()


def test_a_broken_entry_point_breaks_only_what_uses_it(installed, files, tmp_path, capsys):
    installed("broken-plugins", {"simmoe.selectors": {"broken": "no_such_module_xyz:Thing",
                                                      "exits": f"{EXIT_MODULE}:Thing"}})
    for argv in (["--help"], ["replay", "--help"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "broken" in out and "(cannot be used:" in out      # `simmoe replay --help` lists it, and why
    assert main(["models"]) == 0
    capsys.readouterr()
    assert rows(files, tmp_path, "--selectors", "eagle3,specfit")["eagle3"]["cycles"] > 0
    capsys.readouterr()
    for name, why in (("broken", "No module named 'no_such_module_xyz'"), ("exits", "called sys.exit(5)")):
        assert cli(files, "--selectors", f"eagle3,{name}") == 2
        line = one_line(capsys.readouterr().err)
        assert f"selector {name!r}" in line and "distribution broken-plugins" in line and why in line


def test_a_name_that_shadows_simmoe_own_is_refused_naming_both_distributions(installed, files, tmp_path, capsys):
    installed("shadow-plugins", {"simmoe.selectors": {"specfit": spec("TopK")},
                                 "simmoe.caches": {"lru": "simmoe.replay.cache_policies:LFU"}})
    with pytest.raises(SimmoeError) as exc:
        plugins.load("selector", "specfit")
    assert "simmoe and shadow-plugins" in str(exc.value)
    assert cli(files, "--selectors", "eagle3") == 2                    # the default cache is lru
    line = one_line(capsys.readouterr().err)
    assert "cache policy 'lru'" in line and "simmoe and shadow-plugins" in line
    assert rows(files, tmp_path, "--selectors", "eagle3", "--cache", "lfu")["eagle3"]["cycles"] > 0


def test_a_plugin_name_taken_by_two_outside_distributions_is_refused(installed):
    installed("first-plugins", {"simmoe.caches": {"twice": spec("OnceLRU")}})
    installed("second-plugins", {"simmoe.caches": {"twice": spec("ChattyLRU")}})
    with pytest.raises(SimmoeError) as exc:
        plugins.load("cache", "twice")
    text = str(exc.value)
    assert "first-plugins" in text and "second-plugins" in text and "module:Name" in text


# -- a plugin's exit, interruption and prints ------------------------------------------------------
@pytest.mark.parametrize("argv, names, says", [
    (["--selectors", f"eagle3,{spec('ExitSelect')}"], spec("ExitSelect"), "in select() called sys.exit(0)"),
    (["--selectors", spec("ExitBuild")], spec("ExitBuild"), "building it called sys.exit(3)"),
    (["--cache", spec("ExitScores")], spec("ExitScores"), "in scores() called sys.exit(3)"),
    (["--cache", spec("ExitCheck")], spec("ExitCheck"), "in check() called sys.exit('no')"),
    (["--prefetch", spec("ExitDrafting")], spec("ExitDrafting"), "in drafting() called sys.exit(None)"),
    (["--cache", f"{EXIT_MODULE}:Thing"], f"{EXIT_MODULE}:Thing", "called sys.exit(5)"),
    (["--selectors", f"eagle3,{spec('ExitSelect')}", "--workers", "2"], spec("ExitSelect"), "sys.exit(0)"),
])
def test_a_plugin_that_exits_is_a_plugin_failure_in_one_line(files, tmp_path, capsys, argv, names, says):
    out = tmp_path / "out.json"
    assert cli(files, *argv, out=str(out)) == 2
    line = one_line(capsys.readouterr().err)
    assert names in line and says in line, line
    assert not out.exists()


def test_an_interruption_inside_a_plugin_stays_an_interruption():
    with pytest.raises(KeyboardInterrupt):
        replay(trace_(), ReplayConfig(selector="eagle3", cache=spec("InterruptObserve"), slots=3), PROFILE)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_plugin_that_prints_does_not_corrupt_json_on_stdout(files, capfd, workers):
    assert cli(files, "--selectors", f"eagle3,{spec('Chatty')}", "--cache", spec("ChattyLRU"),
               "--workers", workers, out="-") == 0
    captured = capfd.readouterr()
    doc = json.loads(captured.out)
    assert [r["selector"] for r in doc["results"]] == ["eagle3", spec("Chatty")]
    assert "chatty: selecting" in captured.err and "chatty-lru: scoring" in captured.err
