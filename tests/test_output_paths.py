"""Every output path is checked before any work (simmoe.atomicio.check_outputs), in every command."""

from __future__ import annotations

import os

import pytest

from simmoe.atomicio import check_outputs
from simmoe.errors import SimmoeError


@pytest.mark.parametrize("outputs, kw, match", [
    ([("--json", "")], {}, r"--json: empty file name"),
    ([("--cycles", "-")], {"stdout": ("--json",)}, r"--cycles needs a file name, not '-'"),
    ([("--json", "-"), ("--csv", "-")], {"stdout": ("--json", "--csv")}, r"interleave on stdout"),
    ([("--json", "{d}")], {}, r"--json {d}: is a folder; give a file name"),
    ([("--json", "{d}/")], {}, r"is a folder"),
    ([("--json", "{d}/no/x.json")], {}, r"folder {d}/no does not exist"),
    ([("--json", "{d}/f/x.json")], {}, r"folder {d}/f is not a folder"),
    ([("--out", "{d}/x.csv")], {"suffixes": {"--out": (".parquet",)}}, r"ending in \.parquet"),
    ([("--json", "{d}/a"), ("--csv", "{d}/./a")], {}, r"--json and --csv both name"),
    ([("--cycles", "{d}/f")], {"inputs": ("{d}/f",)}, r"is an input of this command"),
    ([("--keep", "{d}/f")], {"folders": ("--keep",)}, r"exists and is not a folder"),
])
def test_refused(tmp_path, outputs, kw, match):
    (tmp_path / "f").write_text("x")
    d = str(tmp_path)
    outputs = [(f, p.format(d=d)) for f, p in outputs]
    kw = {k: tuple(x.format(d=d) for x in v) if k == "inputs" else v for k, v in kw.items()}
    with pytest.raises(SimmoeError, match=match.format(d=d)):
        check_outputs(outputs, **kw)


def test_accepted(tmp_path):
    (tmp_path / "f").write_text("x")
    check_outputs([("--json", "-"), ("--csv", str(tmp_path / "f")), ("--cycles", None),
                   ("--keep", str(tmp_path)), ("--new", str(tmp_path / "new"))],
                  stdout=("--json",), folders=("--keep", "--new"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_a_folder_without_write_permission(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(SimmoeError, match="no permission"):
            check_outputs([("--json", str(ro / "x.json"))])
    finally:
        ro.chmod(0o700)


@pytest.fixture
def trace_file(tmp_path):
    from factories import random_trace

    from simmoe.trace.io import write_trace

    path = tmp_path / "t.parquet"
    write_trace(random_trace(1, num_requests=1, output_len=(3, 4), pool_nodes=4, L=2, N=8, k=2), path)
    return path


@pytest.mark.parametrize("argv, message", [
    (["sweep", "{t}", "-o", "{d}/no/s.csv"], "--out {d}/no/s.csv: folder {d}/no does not exist"),
    (["sweep", "{t}", "-o", "{t}"], "--out {t}: is an input of this command"),
    (["synth", "--preset", "qa", "--out", "{d}/x.parquet", "--json", "{d}/x.parquet"], "both name"),
    (["synth", "--calibration-report", "{d}"], "--calibration-report {d}: is a folder"),
    (["import-routes", "{t}", "--out", "{t}"], "is an input of this command"),
    (["fit", "--trace", "{t}", "-o", "{d}/no/p.toml"], "folder {d}/no does not exist"),
    (["validate", "--trace", "{t}", "--live", "{d}/a.jsonl,", "--json", "{d}/v.json"], "empty file name"),
    (["validate", "--trace", "{t}", "--live", "{d}/a.jsonl", "--json", "{d}/v", "--cycles", "{d}/v"],
     "--json and --cycles both name"),
    (["validate", "--trace", "{t}", "--live", "{d}/a.jsonl", "--cycles", "{d}/a.jsonl"], "is an input"),
    (["hardness", "--vertices", "4", "--edge-prob", "0.5", "--r", "2", "--write", "{t}"],
     "--write {t}: exists and is not a folder"),
    (["report", "--traces", "{t}", "--out", "{t}"], "--out {t}: exists and is not a folder"),
    (["report", "--traces", "{t}", "--out", "{d}/no/r"], "folder {d}/no does not exist"),
])
def test_every_simmoe_command_checks_its_outputs(tmp_path, capsys, trace_file, argv, message):
    from simmoe.cli import main

    (tmp_path / "a.jsonl").write_text("{}\n")
    argv = [a.format(d=tmp_path, t=trace_file) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message.format(d=tmp_path, t=trace_file) in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("argv", [["replay", "{t}", "--hardware", ""], ["bound", "{t}", "--hardware", " "],
                                  ["sweep", "{t}", "-o", "{d}/s.csv", "--hardware", ""]])
def test_an_empty_profile_name_is_named_as_such(tmp_path, capsys, trace_file, argv):
    from simmoe.cli import main

    assert main([a.format(d=tmp_path, t=trace_file) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "--hardware: empty list" in err or "empty hardware profile name" in err
    assert "folder" not in err and len(err.splitlines()) == 1, err
