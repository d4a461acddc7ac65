"""`simmoe replay` as a new user meets it: a table that fits, a legend, reproducible output, refusals."""

from __future__ import annotations

import io
import re

import pytest
from factories import random_trace

from simmoe.cli import main


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from simmoe.hardware.profile import HardwareProfile, save_profile
    from simmoe.trace.io import write_trace

    d = tmp_path_factory.mktemp("replay-out")
    trace = random_trace(5, num_requests=2, output_len=(6, 10), pool_nodes=10, L=3, N=12, k=2)
    write_trace(trace, d / "t.parquet")
    common = dict(copy_ms=0.5, forward_ms=64.0, expert_ms=0.125, draft_level_ms=4.0,
                  commit_ms=1.0, selector_ms=2.5,
                  cost_b_cache=tuple(128.0 + 2 * j for j in range(33)), cost_beta_cache=0.25,
                  cost_b_no_cache=tuple(112.0 + j for j in range(33)), cost_beta_no_cache=0.5,
                  evict_cost=tuple(128.0 + 4.0 * k for k in range(1, 33)))
    save_profile(HardwareProfile(name="out-test", description="t", source="tests", **common),
                 d / "p.toml")
    save_profile(HardwareProfile(name="twelve", description="t", source="tests", num_layers=12,
                                 **common), d / "p12.toml")
    return d


def run(d, *argv) -> int:
    return main(["replay", str(d / "t.parquet"), "--hardware", str(d / "p.toml"), "--no-progress",
                 *argv])


def test_default_table_fits_100_columns_and_explains_its_columns(files, capsys):
    assert run(files, "--slots", "4") == 0
    out = capsys.readouterr().out
    widths = [len(line.rstrip()) for line in out.splitlines()]
    assert max(widths) <= 100, out
    for text in ("H2D/token", "expert copies host-to-device per output token", "committed/cycle",
                 "tokens committed per verification cycle"):
        assert text in out
    assert "…" not in out


def test_narrow_terminal_never_cuts_a_number():
    from rich.console import Console

    from simmoe.cli.replay import WIDE_COLUMNS, results_table, widen_for
    from simmoe.replay.engine import ReplayConfig

    row = {"selector": "specfit-full", "decode_tps": 12345.678, "speedup": 2.5, "committed": 4.25,
           "draft_nodes": 5.5, "ms_per_cycle": 123456.7, "h2d_per_token": 234.0, "hit_rate": 0.415,
           "cycles": 1234567, "stopped_early_pct": 24.0, "drafted_levels": 4.39, "selector_ms": 2.82}
    base = {"decode_tps": 4.69, "ms_per_cycle": 212.5, "h2d_per_token": 399.8}
    table = results_table([row], ReplayConfig(), base, True, WIDE_COLUMNS, "selector time: fixed")
    console = Console(file=io.StringIO(), width=80, force_terminal=False)
    widen_for(console, table)
    console.print(table)
    text = console.file.getvalue()
    for cell in ("12345.68", "123456.7", "1,234,567", "specfit-full", "41.5%", "2.820"):
        assert cell in text
    assert "…" not in text


def test_help_carries_the_legend(capsys):
    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "expert copies host-to-device per output token" in out
    assert "--wide" in out and "--columns" in out
    assert "stdout); identical byte for byte between runs unless --selector-ms measured" in out


def test_wide_and_columns_choose_what_is_shown(files, capsys):
    assert run(files, "--wide") == 0
    assert "drafted levels" in capsys.readouterr().out
    assert run(files, "--columns", "cycles,decode_tps") == 0
    out = capsys.readouterr().out
    header = [line for line in out.splitlines() if "selector" in line and "cycles" in line]
    assert header and "hit" not in header[0]
    assert run(files, "--columns", "cycles,nope") == 2
    assert "unknown column 'nope'" in capsys.readouterr().err


def test_default_output_is_reproducible_and_charges_the_profile_selector_time(files, capsys):
    assert run(files, "--json", "-", "--selectors", "eagle3,specfit") == 0
    first = capsys.readouterr().out
    assert run(files, "--json", "-", "--selectors", "eagle3,specfit") == 0
    assert capsys.readouterr().out == first
    import json

    rows = {r["selector"]: r for r in json.loads(first)["results"]}
    assert rows["specfit"]["selector_ms"] == pytest.approx(2.5)   # the profile's cycle.selector_ms
    assert rows["eagle3"]["selector_ms"] == 0.0


def test_progress_label_counts_selectors_and_the_baseline(files, capsys, monkeypatch):
    import simmoe.cli.replay as cli
    from simmoe.progress import NoProgress

    labels = []

    class Recorder(NoProgress):
        def add_task(self, description, **k):
            labels.append(description)
            return 0

    monkeypatch.setattr(cli, "_progress", lambda console, disabled: Recorder())
    assert run(files, "--selectors", "eagle3,specfit") == 0
    assert labels == ["replaying 2 selectors + AR baseline (no cache)"]


@pytest.mark.parametrize("argv, match", [
    (["--requests", "50"], r"--requests 50: the trace has only 2 requests"),
    (["--selector-ms", "inf"], r"finite"),
    (["--selector-ms", "nan"], r"finite"),
    (["--selector-ms", "soon"], r"number of ms or 'measured'"),
    (["--ddd-threshold", "-1"], r"ddd threshold"),
    (["--coverage-rho", "0"], r"coverage rho"),
    (["--json", "-", "--csv", "-"], r"interleave on stdout"),
    (["--cycles", "-"], r"needs a file name"),
    (["--seed", "-1"], r"--seed -1: must be a non-negative integer"),
    (["--json", "{d}/same", "--csv", "{d}/same"], r"--json and --csv both name"),
    (["--cycles", "{d}/t.parquet"], r"is an input of this command"),
    (["--timeline", "{d}/no/tl.json", "--requests", "1"], r"--timeline .*folder .* does not exist"),
    (["--timeline", "{d}", "--requests", "1"], r"--timeline .*is a folder"),
])
def test_refused_flags(files, capsys, argv, match):
    argv = [a.format(d=files) for a in argv]
    assert run(files, *argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(match, err) and "Traceback" not in err


def test_a_folder_as_output_is_refused_before_any_work(files, capsys, tmp_path):
    for flag in ("--json", "--csv", "--cycles"):
        assert run(files, flag, str(tmp_path)) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "is a folder" in err


def test_a_profile_of_another_model_is_refused(files, capsys):
    assert main(["replay", str(files / "t.parquet"), "--hardware", str(files / "p12.toml"),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "12-layer model but the trace has 3 layers" in err
