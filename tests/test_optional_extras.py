"""Every optional extra is optional: without it, the package imports, and what needs it fails in one line.

Each case runs a fresh interpreter in which the extra's modules cannot be
imported (a finder at the front of ``sys.meta_path`` refuses them, as on a
machine where they were never installed), so a missing declaration or an
import made at module level shows here, not on a user's machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "traces" / "gsm8k.parquet"

# distribution name → the module it installs, where the two differ
IMPORT_NAMES = {"scikit-learn": "sklearn"}

# a finder that refuses the modules named in SIMMOE_TEST_BLOCKED, as if they were not installed
BLOCKER = textwrap.dedent("""
    import importlib.abc, os, sys

    class _NotInstalled(importlib.abc.MetaPathFinder):
        blocked = set(filter(None, os.environ["SIMMOE_TEST_BLOCKED"].split(",")))

        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in self.blocked:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, _NotInstalled())
""")

# import every module of the three packages; print {module: error} for those that fail
IMPORT_ALL = BLOCKER + textwrap.dedent("""
    import importlib, json, pkgutil
    failed = {}
    for top in ("solvers", "simmoe", "hwprobe"):
        package = importlib.import_module(top)
        for info in pkgutil.walk_packages(package.__path__, top + "."):
            if info.name.startswith(("hwprobe.tiny", "hwprobe.training.corpus")) or info.name.endswith(".__main__"):
                continue                      # shipped model files and text; __main__ runs a command
            try:
                importlib.import_module(info.name)
            except BaseException as exc:
                failed[info.name] = [type(exc).__name__, getattr(exc, "name", None), str(exc)]
    print(json.dumps(failed))
""")


def _extras() -> dict[str, set[str]]:
    """Each optional extra (the test tools aside) → the top-level modules its requirements install."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    out = {}
    for extra, requirements in project["optional-dependencies"].items():
        if extra == "test":
            continue
        names = set()
        for req in requirements:
            dist = req.split(";")[0].split("[")[0]
            for sep in "<>=!~ ":
                dist = dist.split(sep)[0]
            names.add(IMPORT_NAMES.get(dist, dist.replace("-", "_")))
        out[extra] = names
    return out


EXTRAS = _extras()


def _run(code_or_args: list[str], blocked: set[str], **kw) -> subprocess.CompletedProcess:
    env = {**__import__("os").environ, "SIMMOE_TEST_BLOCKED": ",".join(sorted(blocked)), "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, *code_or_args], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=300, **kw)


def _cli(module: str, args: list[str], blocked: set[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """``python -m module args`` with ``blocked`` uninstalled; run in ``tmp_path`` so nothing lands in the tree."""
    code = BLOCKER + f"import runpy, sys; sys.argv = [{module!r}] + {args!r}; runpy.run_module({module!r}, " \
                     "run_name='__main__')"
    env = {**__import__("os").environ, "SIMMOE_TEST_BLOCKED": ",".join(sorted(blocked))}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300)


def test_the_extras_are_the_ones_the_code_needs():
    # the cases below cover every extra; a new extra must get its own case
    assert set(EXTRAS) == {"hwprobe", "ray", "learned"}
    assert EXTRAS["learned"] == {"lightgbm", "sklearn"}
    assert "torch" in EXTRAS["hwprobe"] and EXTRAS["ray"] == {"ray"}


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_every_module_imports_without_the_extra(extra):
    """simmoe and solvers import without any extra; hwprobe only without torch's extra fails, naming a module of it."""
    blocked = EXTRAS[extra]
    proc = _run(["-c", IMPORT_ALL], blocked)
    assert proc.returncode == 0, proc.stderr
    failed = json.loads(proc.stdout.strip().splitlines()[-1])
    for module, (kind, missing, message) in failed.items():
        assert module.startswith("hwprobe."), f"{module} needs the {extra!r} extra at import: {message}"
        assert extra == "hwprobe" and kind == "ModuleNotFoundError" and missing in blocked, (module, message)
    if extra == "hwprobe":
        assert "hwprobe.cli" not in failed       # the command line itself says how to install


def _one_error_line(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.mark.slow
def test_learned_cache_without_its_extra_is_one_line(tmp_path):
    args = ["replay", str(TRACE), "--selectors", "ar", "--cache", "learned", "--requests", "2", "--json",
            str(tmp_path / "out.json"), "--no-progress"]
    line = _one_error_line(_cli("simmoe", args, EXTRAS["learned"], tmp_path), "learned", "simmoe[learned]")
    assert "lightgbm" in line and "scikit-learn" in line
    assert not (tmp_path / "out.json").exists()


@pytest.mark.slow
def test_cache_report_without_the_learned_extra_is_one_line(tmp_path):
    args = ["--out", str(tmp_path / "caches.md"), "--quick", "--no-progress"]
    _one_error_line(_cli("simmoe.report.caches", args, EXTRAS["learned"], tmp_path), "simmoe[learned]")
    assert list(tmp_path.iterdir()) == []


def test_sweep_on_ray_without_its_extra_is_one_line(tmp_path):
    args = ["sweep", str(TRACE), "--selectors", "ar", "--slots", "4", "--requests", "1", "--engine", "ray",
            "--out", str(tmp_path / "sweep.csv"), "--no-progress"]
    _one_error_line(_cli("simmoe", args, EXTRAS["ray"], tmp_path), "Ray", "pip install")
    assert not (tmp_path / "sweep.csv").exists()


def test_hwprobe_without_its_extra_is_one_line(tmp_path):
    _one_error_line(_cli("hwprobe", ["info"], EXTRAS["hwprobe"], tmp_path), "torch", "[hwprobe]")
