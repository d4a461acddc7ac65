"""The ground every issue builds on: packages, CLIs, README, CI command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(*argv, **kw):
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=ROOT, **kw)


def test_simulator_import_path_has_no_torch():
    # Import every simmoe and solvers module; torch must not be among sys.modules.
    code = (
        "import importlib, pkgutil, sys\n"
        "import simmoe, solvers\n"
        "for pkg in (simmoe, solvers):\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        if not m.name.endswith('__main__'):\n"
        "            importlib.import_module(m.name)\n"
        "from simmoe.cli import build_parser; build_parser()\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'hwprobe'))\n"
        "print(','.join(bad))\n"
    )
    out = run("-c", code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"simulator imports {out.stdout.strip()}"


def test_a_replay_imports_no_pandas_or_networkx():
    # 0.15-0.2 s and 85 ms of start-up that a replay never uses (arrow's to_numpy imports pandas;
    # networkx serves only the CLIQUE reduction); scipy.optimize only a MILP.
    code = (
        "import sys\n"
        "from simmoe.cli import main\n"
        "sys.argv = ['simmoe', 'replay', 'traces/gsm8k.parquet', '--requests', '1', '--workers', '1',\n"
        "            '--selectors', 'ar,eagle3,evict', '--slots', '12', '--json', '-']\n"
        "try:\n"
        "    main()\n"
        "finally:\n"
        "    print('imported:', *(m for m in ('pandas', 'networkx', 'scipy.optimize') if m in sys.modules),\n"
        "          file=sys.stderr)\n"
    )
    out = run("-c", code)
    assert out.returncode == 0, out.stderr
    assert '"decode_tps"' in out.stdout
    assert out.stderr.strip().splitlines()[-1] == "imported:", out.stderr


def test_solvers_do_not_import_simmoe():
    code = (
        "import importlib, pkgutil, sys, solvers\n"
        "for m in pkgutil.walk_packages(solvers.__path__, 'solvers.'):\n"
        "    importlib.import_module(m.name)\n"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in ('simmoe', 'hwprobe', 'torch'))))\n"
    )
    out = run("-c", code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


@pytest.mark.parametrize("prog", ["simmoe", "hwprobe"])
def test_help_lists_subcommands(prog):
    out = run("-m", prog, "--help")
    assert out.returncode == 0, out.stderr
    cli = __import__(f"{prog}.cli", fromlist=["COMMANDS"])
    for name in cli.COMMANDS:
        assert name.replace("_", "-") in out.stdout


@pytest.mark.parametrize("argv", [["replay", "--no-such-flag"], ["no-such-command"]])
def test_bad_flag_is_one_line_exit_2(argv):
    out = run("-m", "simmoe", *argv)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) <= 2  # argparse adds a usage line


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    test_cmd = [ln for ln in ci.splitlines() if ln.startswith("TEST_COMMAND=")]
    assert len(test_cmd) == 1
    cmd = test_cmd[0].split("=", 1)[1].strip().strip("'")
    assert cmd in readme


def test_ci_installs_into_a_new_environment_with_every_extra():
    """.ci/run makes a new virtual environment and installs every optional extra there (pyproject.toml)."""
    import re
    import tomllib

    ci = (ROOT / ".ci" / "run").read_text()
    code = [ln.split("#")[0] for ln in ci.splitlines()]
    venv = next(i for i, ln in enumerate(code) if "-m venv" in ln)
    path = next(i for i, ln in enumerate(code) if re.search(r'export PATH="\$VENV/bin:', ln))
    run = next(i for i, ln in enumerate(code) if "eval" in ln and "TEST_COMMAND" in ln)
    assert "mktemp -d" in ci and venv < path < run
    cmd = next(ln for ln in ci.splitlines() if ln.startswith("TEST_COMMAND="))
    extras = set(re.search(r'-e "\.\[([^\]]*)\]"', cmd).group(1).split(","))
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras == set(declared)


def test_ci_runs_of_hypothesis_are_reproducible():
    """Under CI the derandomized profile is active (conftest picks it from the CI variable)."""
    import os
    import subprocess
    import sys

    code = ("import sys; sys.path.insert(0, 'tests'); import conftest; "
            "from hypothesis import settings; print(settings.default.derandomize)")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "HYPOTHESIS_PROFILE")}
    root = Path(__file__).parent.parent

    def derandomized(extra: dict) -> str:
        return subprocess.run([sys.executable, "-c", code], env={**env, **extra}, cwd=root,
                              capture_output=True, text=True, check=True).stdout.strip()

    assert (derandomized({"CI": "true"}), derandomized({})) == ("True", "False")
