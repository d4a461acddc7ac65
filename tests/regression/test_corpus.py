"""The replay regression corpus: every recorded ``simmoe replay --json`` number is reproduced exactly.

The corpus (``corpus.json.gz``, written by ``record.py``) holds the counters of
every selector for each entry of :mod:`grid`.  A number that changes on
purpose is re-recorded (``python tests/regression/record.py --only NAME``) in
the commit that changes it, and that commit says which entries moved and why.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import grid  # noqa: E402

pytestmark = pytest.mark.slow


def _diff(want, have, path="") -> list[str]:
    """Every recorded value that ``have`` does not reproduce (keys ``have`` adds are not differences)."""
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return [f"{path}: {want!r} -> {have!r}"]
        out = []
        for k, v in want.items():
            out += [f"{path}.{k}: missing"] if k not in have else _diff(v, have[k], f"{path}.{k}")
        return out
    if isinstance(want, list):
        if not isinstance(have, list) or len(want) != len(have):
            return [f"{path}: {want!r} -> {have!r}"]
        return [d for i, (a, b) in enumerate(zip(want, have)) for d in _diff(a, b, f"{path}[{i}]")]
    same = want == have or (isinstance(want, float) and isinstance(have, float) and math.isnan(want)
                            and math.isnan(have))
    return [] if same else [f"{path}: {want!r} -> {have!r}"]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    return grid.trace_paths(tmp_path_factory.mktemp("regression"))


@pytest.fixture(scope="module")
def corpus():
    return grid.load_corpus()


def test_the_grid_is_the_recorded_one(corpus):
    names = [e["name"] for e in grid.entries()]
    assert len(set(names)) == len(names)
    assert {f"cnndm/{s}" for s in grid.CNNDM_SETTINGS} <= set(names), "a CNN/DM setting names no entry"
    assert sorted(names) == sorted(corpus["entries"]), "grid and corpus differ: re-record (record.py)"
    for e in grid.entries():
        assert corpus["entries"][e["name"]]["argv"] == e["argv"], e["name"]


def test_the_traces_are_the_recorded_ones(corpus, traces):
    for name, path in traces.items():
        assert grid.trace_digest(path) == corpus["traces"][name], \
            f"trace {name} is not the one the corpus was recorded on (synth or the trace reader changed)"


@pytest.mark.parametrize("name", [e["name"] for e in grid.entries()])
def test_entry_reproduces_its_numbers(name, corpus, traces):
    """One entry per test, so that pytest-xdist spreads the grid over the cores."""
    entry = next(e for e in grid.entries() if e["name"] == name)
    diffs = _diff(corpus["entries"][name]["numbers"], grid.numbers(grid.run_entry(entry, traces)))
    assert not diffs, f"{name}: {len(diffs)} numbers differ, first: " + "; ".join(diffs[:3])


def test_diff_finds_a_changed_number():
    want = {"results": [{"selector": "specfit", "decode_tps": 8.09}], "baseline": {"h2d": 1.0}}
    assert _diff(want, {"results": [{"selector": "specfit", "decode_tps": 8.09, "new": 1}],
                        "baseline": {"h2d": 1.0}}) == []
    assert _diff(want, {"results": [{"selector": "specfit", "decode_tps": 8.091}], "baseline": {"h2d": 1.0}})
    assert _diff(want, {"results": [], "baseline": {"h2d": 1.0}})
    assert _diff(want, {"results": [{"selector": "specfit"}], "baseline": {"h2d": 1.0}})
    assert _diff({"x": float("nan")}, {"x": float("nan")}) == []
    assert _diff({"x": float("nan")}, {"x": 1.0})
