"""Placements of the experts as plugins (simmoe.api.Placement): named in the profile, checked, found by entry point.

simmoe's own through the protocol are covered by the CPU tests of the residency
stage and the CLI (unchanged); here: plugins that do what simmoe's own do give
the same ``--json``, the example package's placement, every refusal of a
plugin's output in one line, the profile's syntax, and the ``simmoe.placements``
entry-point group (loaded when used, a name taken twice refused).
"""

from __future__ import annotations

import importlib
import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from factories import random_trace

from simmoe.cli import main
from simmoe.errors import ProfileError
from simmoe.replay import plugins

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "simmoe-example-plugins" / "src"
NAME = "qwen3-30b-a3b/q4_k_m@rtx2080+i9-10900x~"
FAST = "qwen3-30b-a3b/q4_k_m@rtx2080+pcie5-x16+ryzen-ai9-hx370~"    # a copy lands before a DRAM read
MODULE = "simmoe_placement_tests"
HOT = "simmoe_example_plugins.placement:HotExperts"
FIRST = "simmoe_example_plugins.placement:FirstLayersOnCpu"

SOURCE = '''
import sys

import numpy as np

from simmoe.api import PlacementChoice


class Base:
    name = "base"
    def reset(self, shape):
        self.shape = shape
        self.calls = 0
    def held(self):
        return np.zeros((self.shape.num_layers, self.shape.num_experts), dtype=bool)
    def place(self, forward):
        return PlacementChoice(self.held())


class Misses(Base):                # cpu-misses written as a plugin
    name = "misses"
    uses_cache = True
    def place(self, forward):
        return PlacementChoice(forward.cached)


class FiddlerRule(Misses):         # Fiddler's rule from the shape's times alone
    name = "fiddler-rule"
    copies = 0
    def place(self, forward):
        s = self.shape
        t = np.maximum(np.asarray(s.cpu_read_ms)[:, None], forward.tokens() * s.cpu_token_ms)
        copy = forward.demand & ~forward.cached & (np.asarray(s.copy_ms)[:, None] < t)
        FiddlerRule.copies += int(copy.sum())
        return PlacementChoice(forward.cached, copy)


class Once(Base):                  # each instance serves one replay
    name = "once"
    built = []
    def reset(self, shape):
        assert not hasattr(self, "shape"), "a placement instance served a second replay"
        Once.built.append(self)
        super().reset(shape)
    def place(self, forward):
        return PlacementChoice(self.held())


class AList(Base):
    def place(self, forward):
        return self.held().tolist()


class Ints(Base):
    def place(self, forward):
        return PlacementChoice(self.held().astype(int))


class Shape(Base):
    def place(self, forward):
        return PlacementChoice(self.held()[:, :3])


class Changes(Base):
    def place(self, forward):
        self.calls += 1
        h = self.held()
        h[0, 0] = self.calls > 1
        return PlacementChoice(h)


class TooMuch(Base):
    def place(self, forward):
        return PlacementChoice(~self.held())


class NotCached(Base):
    uses_cache = True
    def place(self, forward):
        return PlacementChoice(forward.demand)


class CopiesHeld(Base):
    def place(self, forward):
        return PlacementChoice(self.held(), ~self.held())


class WritesDemand(Base):
    def place(self, forward):
        forward.demand[0, 0] = True
        return PlacementChoice(self.held())


class WritesShape(Base):
    def reset(self, shape):
        shape.copy_ms[0] = 0.0


class Raises(Base):
    def place(self, forward):
        raise KeyError("boom")


class Exits(Base):
    def place(self, forward):
        sys.exit(4)


class NoPlace:
    name = "no-place"
    def reset(self, shape):
        pass
    place = None
'''


@pytest.fixture(scope="module", autouse=True)
def plugin_modules(tmp_path_factory):
    folder = tmp_path_factory.mktemp("placements")
    (folder / f"{MODULE}.py").write_text(textwrap.dedent(SOURCE))
    sys.path.insert(0, str(folder))
    sys.path.insert(0, str(EXAMPLES))
    yield
    sys.path.remove(str(folder))
    sys.path.remove(str(EXAMPLES))
    sys.modules.pop(MODULE, None)
    plugins._installed.cache_clear()
    plugins.load.cache_clear()


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    from simmoe.trace.io import write_trace

    path = tmp_path_factory.mktemp("placement-trace") / "t.parquet"
    write_trace(random_trace(5, num_requests=2, output_len=(3, 5), L=48, N=128, k=8, pool_nodes=6), path)
    return path


def replay(trace_file, placement, *argv, out=None):
    hardware = placement if "@" in placement else NAME + placement
    return main(["replay", str(trace_file), "--hardware", hardware, "--no-progress", "--workers", "1",
                 "--selector-ms", "0", "--selectors", "ar,eagle3", *argv] + (["--json", str(out)] if out else []))


def doc_of(trace_file, tmp_path, placement, *argv) -> dict:
    out = tmp_path / "out.json"
    out.unlink(missing_ok=True)
    assert replay(trace_file, placement, *argv, out=out) == 0
    doc = json.loads(out.read_text())
    assert doc["regime"] == "cpu" and doc["synthetic"] is True
    doc["config"].pop("hardware")          # the profile's name, the one field that may differ
    return doc


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


# -- a plugin doing what simmoe's own do gives the same replay ---------------------------------------------
@pytest.mark.parametrize("builtin, plugin, argv", [
    ("cpu-layers:36", f"placement={FIRST},n=36", ()),
    ("cpu-all", f"placement={HOT},m=0", ()),
    ("cpu-misses", f"placement={MODULE}:Misses", ("--slots", "8")),
    ("fiddler", f"placement={MODULE}:FiddlerRule", ("--slots", "8", "--cache", "lfu")),
    (FAST + "fiddler", FAST + f"placement={MODULE}:FiddlerRule", ("--slots", "8", "--batch", "2")),
])
def test_a_plugin_doing_what_simmoes_own_does_gives_the_same_json(trace_file, tmp_path, builtin, plugin, argv):
    mine, own = doc_of(trace_file, tmp_path, plugin, *argv), doc_of(trace_file, tmp_path, builtin, *argv)
    assert mine == own
    assert all(r["cpu_ms_per_token"] > 0 for r in own["results"])      # the CPU side (or its copies) timed


def test_fiddlers_rule_as_a_plugin_decides_as_simmoes_own():
    """Per forward, on the toy geometry where some misses are copied and others computed."""
    from cpu_toy import toy_forward

    from simmoe.api import PlacementForward
    from simmoe.replay.placements import Fiddler
    from simmoe.replay.residency_cpu import placement_shape

    mod = importlib.import_module(MODULE)
    fwd = toy_forward("fiddler", eta_cpu=0.125, link_gbps=1.2288)    # copy when n_e >= 2
    trace = random_trace(1, L=2, N=4, k=2)
    own, plugin = Fiddler(), mod.FiddlerRule()
    own.reset(placement_shape(fwd, trace, {}, (), 0, False))
    plugin.reset(placement_shape(fwd, trace, {}, (), 0, True))
    rng = np.random.default_rng(0)
    copied = computed = 0
    for _ in range(200):
        counts = rng.integers(0, 5, size=(2, 4)) * (rng.random((2, 4)) < 0.7)
        demand, cached = counts > 0, (counts > 0) & (rng.random((2, 4)) < 0.3)
        for kind in ("step", "prefill"):
            fw = PlacementForward(demand, cached, int(counts.sum() // 2), kind, (0,), (0,), lambda c=counts: c)
            a, b = own.place(fw), plugin.place(fw)
            # copy None: nothing copied (simmoe's rule says so without comparing when no copy can win)
            a_copy, b_copy = (np.zeros_like(demand) if c.copy is None else c.copy for c in (a, b))
            assert (a.gpu == b.gpu).all() and (a_copy == b_copy).all()
            copied += int(a_copy.sum())
            computed += int((demand & ~cached & ~a_copy).sum())
    assert copied > 0 and computed > 0


# -- the example: each layer's hot experts on the GPU ------------------------------------------------------
def test_hot_experts_hold_each_layers_most_routed_experts(trace_file):
    from simmoe_example_plugins.placement import HotExperts

    from simmoe.hardware.profile import load_profile
    from simmoe.replay.residency_cpu import placement_shape
    from simmoe.trace.io import read_trace

    trace = read_trace(trace_file)
    fwd = load_profile(NAME + f"placement={HOT}").physical
    shape = placement_shape(fwd, trace, {"m": "5"}, (0, 1), 0, True)
    p = HotExperts()
    p.reset(shape)
    held = p.place(None).gpu
    assert held.shape == (48, 128) and (held.sum(axis=1) == 5).all()
    for layer in (0, 17, 47):        # by hand: count, sort by (-count, id), take five
        count = {e: 0 for e in range(128)}
        for row in trace.root_routes:
            for e in row[layer]:
                count[int(e)] += 1
        top = sorted(count, key=lambda e: (-count[e], e))[:5]
        assert set(np.flatnonzero(held[layer])) == set(top)


def test_hot_experts_replay_through_the_cli(trace_file, tmp_path):
    hot = doc_of(trace_file, tmp_path, f"placement={HOT}")         # as many per layer as fit
    none = doc_of(trace_file, tmp_path, "cpu-all")
    for mine, cold in zip(hot["results"], none["results"], strict=True):
        assert 0.0 < mine["gpu_share"] < 1.0
        assert mine["cpu_reads_per_token"] < cold["cpu_reads_per_token"]
        assert mine["decode_tps"] > cold["decode_tps"]


# -- a plugin's output checked, one line naming it -------------------------------------------------------
@pytest.mark.parametrize("cls, argv, message", [
    ("AList", (), "returned a list, not a simmoe.api.PlacementChoice"),
    ("Ints", (), "must be a bool array of shape [48, 128], got int64"),
    ("Shape", (), "got bool [48, 3]"),
    ("Changes", (), "changed the experts the GPU holds"),
    ("TooMuch", (), "GiB of experts on the GPU, but"),
    ("NotCached", ("--slots", "2"), "runs on the GPU an expert the GPU cache does not hold"),
    ("CopiesHeld", (), "copies an expert the forward does not demand or the GPU already runs"),
    ("WritesDemand", (), "in place(): assignment destination is read-only"),
    ("WritesShape", (), "in reset(): assignment destination is read-only"),
    ("Raises", (), "raised KeyError in place(): 'boom'"),
    ("Exits", (), "in place() called sys.exit(4)"),
    ("NoPlace", (), "does not satisfy simmoe.api.Placement: no method place()"),
    ("Nothing", (), "has no 'Nothing'"),
])
def test_a_bad_plugin_is_refused_in_one_line(trace_file, tmp_path, capsys, cls, argv, message):
    out = tmp_path / "o.json"
    assert replay(trace_file, f"placement={MODULE}:{cls}", *argv, out=out) == 2
    err = one_line(capsys)
    assert message in err and f"{MODULE}:{cls}" in err, err
    assert not out.exists()


def test_a_plugin_is_built_new_for_every_replay(trace_file, tmp_path):
    mod = importlib.import_module(MODULE)
    mod.Once.built.clear()
    doc_of(trace_file, tmp_path, f"placement={MODULE}:Once")
    doc_of(trace_file, tmp_path, f"placement={MODULE}:Once")
    runs = len(mod.Once.built)
    assert runs >= 4 and len({id(x) for x in mod.Once.built}) == runs


# -- the profile's syntax -----------------------------------------------------------------------------------
def test_the_profile_names_a_plugin_with_its_options():
    from simmoe.hardware.cpu_profile import is_cpu_name, parse_any_placement

    p = parse_any_placement("placement=pkg.mod:Cls,m=4,order=desc")
    assert (p.kind, p.spec, p.options) == ("plugin", "pkg.mod:Cls", (("m", "4"), ("order", "desc")))
    assert p.text == "placement=pkg.mod:Cls,m=4,order=desc" and p.uses_cache
    assert parse_any_placement("placement=hot").options == ()
    assert parse_any_placement("cpu-layers:3").layers == 3 and parse_any_placement("fast") is None
    assert is_cpu_name(NAME + "placement=hot~ktransformers")


@pytest.mark.parametrize("text, message", [
    ("placement=", "name the placement"),
    ("placement=,m=1", "name the placement"),
    ("placement=cpu-all", "simmoe's own placement; write ~cpu-all"),
    ("placement=cpu-layers:3", "write ~cpu-layers:3"),
    ("placement=x:Y,m", "option 'm' is not KEY=VALUE"),
    ("placement=x:Y,m=1,m=2", "option 'm' given twice"),
])
def test_a_malformed_plugin_placement_is_one_line(text, message):
    from simmoe.hardware.cpu_profile import parse_cpu_name

    with pytest.raises(ProfileError) as exc:
        parse_cpu_name(NAME + text)
    assert message in str(exc.value) and "\n" not in str(exc.value)


# -- the entry-point group ------------------------------------------------------------------------------
def fake_distribution(folder: Path, name: str, entries: dict[str, str]) -> None:
    info = folder / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[simmoe.placements]\n"
                                           + "".join(f"{k} = {v}\n" for k, v in entries.items()))


@pytest.fixture()
def installed(tmp_path, monkeypatch):
    def clear():
        plugins._installed.cache_clear()
        plugins.load.cache_clear()
        importlib.invalidate_caches()

    def install(name: str, entries: dict[str, str]) -> None:
        folder = tmp_path / f"site-{name}"
        fake_distribution(folder, name, entries)
        monkeypatch.syspath_prepend(str(folder))
        clear()

    yield install
    monkeypatch.undo()
    clear()


def test_registered_placements_load_when_used(installed, trace_file, tmp_path, capsys):
    installed("some-placements", {"first": FIRST, "broken": "no_such_module_xyz:Thing"})
    assert {"broken", "first"} <= set(plugins.names("placement"))    # (the example's own egg-info may add some)
    # the broken one breaks only the replays that name it
    assert doc_of(trace_file, tmp_path, "placement=first,n=36") == doc_of(trace_file, tmp_path, "cpu-layers:36")
    assert replay(trace_file, "placement=broken") == 2
    err = one_line(capsys)
    assert "placement 'broken'" in err and "some-placements" in err and "cannot be loaded" in err
    assert replay(trace_file, "placement=nope") == 2
    err = one_line(capsys)
    assert "unknown placement 'nope'" in err and "broken" in err and "first" in err


def test_a_placement_name_two_distributions_register_is_refused(installed, trace_file, capsys):
    installed("hot-a", {"hot": HOT})
    installed("hot-b", {"hot": FIRST})
    assert replay(trace_file, "placement=hot") == 2
    err = one_line(capsys)
    assert "placement 'hot' is registered by two distributions" in err and "hot-a" in err and "hot-b" in err
