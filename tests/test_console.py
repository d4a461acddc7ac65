"""The command lines' tables carry no trailing blanks when printed to a file or a pipe."""

from __future__ import annotations

import io
import sys

import pytest
from rich.table import Table

from simmoe.cli.console import make_console


def test_table_lines_end_without_blanks(monkeypatch):
    buf = io.StringIO()
    monkeypatch.setattr(sys, "stdout", buf)
    t = Table(title="a title much longer than the table's cells")
    t.add_column("x")
    t.add_column("y", justify="right")
    t.add_row("1", "22")
    console = make_console(width=100)
    console.print(t)
    console.print("text with blanks   ")
    text = buf.getvalue()
    assert text.count("\n") >= 6
    assert all(line == line.rstrip() for line in text.splitlines())


@pytest.mark.parametrize("argv", [["models"], ["models", "--gpus"], ["models", "--wide"],
                                  ["hardness", "--vertices", "5", "--edge-prob", "0.5", "--r", "3"]])
def test_commands_print_no_trailing_blanks(capsys, argv):
    from simmoe.cli import main

    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out and all(line == line.rstrip() for line in out.splitlines())


def test_models_fits_100_columns_and_wide_shows_every_field(capsys):
    from simmoe.cli import main

    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= 100 and "…" not in out          # nothing cut
    assert "qwen1.5-moe-a2.7b" in out and "Qwen3-30B-A3B-Instruct-2507" not in out
    assert main(["models", "--wide"]) == 0
    wide = capsys.readouterr().out
    assert "Qwen3-30B-A3B-Instruct-2507" in wide and "attention" in wide and "…" not in wide
    assert main(["models", "--gpus"]) == 0
    gpus = capsys.readouterr().out
    assert max(map(len, gpus.splitlines())) <= 100 and "shared/" not in gpus and "CALIBRATION" not in gpus
