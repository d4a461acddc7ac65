"""The out-of-tree example package (examples/simmoe-example-plugins) through the command line.

Once by ``module:Name`` with its sources on the path, once installed (into a
temporary folder) so that simmoe finds its three plugins through their entry
points like its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "examples" / "simmoe-example-plugins"
TRACE = ROOT / "traces" / "gsm8k.parquet"


def _replay(args, extra_path: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess, dict | None]:
    out = tmp_path / "out.json"
    out.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(extra_path), str(ROOT)])}
    p = subprocess.run([sys.executable, "-m", "simmoe", "replay", str(TRACE), "--requests", "2", "--slots", "12",
                        "--no-progress", "--workers", "1", "--json", str(out), *args],
                       capture_output=True, text=True, env=env, cwd=tmp_path)
    return p, (json.loads(out.read_text()) if out.exists() else None)


def _check(doc: dict, selector: str, cache: str, prefetch: str) -> None:
    rows = {r["selector"]: r for r in doc["results"]}
    assert set(rows) == {"eagle3", selector}
    assert doc["config"]["cache"] == cache and doc["prefetch"] == prefetch
    mine = rows[selector]
    assert 1.0 <= mine["committed"] <= 1 + 7          # at most K = 7 drafts verified, plus the bonus token
    assert mine["draft_nodes"] <= 7
    # the roots are verified in every cycle, so every expert prefetched for them is used
    assert mine["prefetched_per_token"] > 0 and mine["wasted_per_token"] == 0
    assert mine["useful_per_token"] == mine["prefetched_per_token"]


def test_module_name_plugins_run_through_the_cli(tmp_path):
    sel = "simmoe_example_plugins.selector:ProbabilityFloor"
    cache = "simmoe_example_plugins.cache:FIFO"
    pf = "simmoe_example_plugins.prefetch:Roots"
    p, doc = _replay(["--selectors", f"eagle3,{sel}", "--cache", cache, "--prefetch", pf], PACKAGE / "src",
                     tmp_path)
    assert p.returncode == 0, p.stderr
    _check(doc, sel, cache, pf)
    assert "prob-floor" in p.stdout            # the table names a plugin by its own name


@pytest.mark.slow
def test_installed_plugins_are_found_by_their_entry_point_names(tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(PACKAGE)], check=True, capture_output=True)
    p, doc = _replay(["--selectors", "eagle3,prob-floor", "--cache", "fifo", "--prefetch", "roots"], target, tmp_path)
    assert p.returncode == 0, p.stderr
    _check(doc, "prob-floor", "fifo", "roots")
    # an unknown name lists the installed plugins beside simmoe's own
    p, doc = _replay(["--cache", "nope"], target, tmp_path)
    assert p.returncode == 2 and doc is None
    assert len(p.stderr.strip().splitlines()) == 1
    assert "fifo" in p.stderr and "lru" in p.stderr
