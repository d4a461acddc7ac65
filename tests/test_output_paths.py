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
