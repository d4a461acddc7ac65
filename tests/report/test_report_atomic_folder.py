"""The report's folder appears whole or not at all (simmoe.atomicio.write_folder_atomic)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from simmoe.atomicio import recover_folder, write_folder_atomic
from simmoe.cli import main


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_new_files_replace_ours_and_keep_the_others(tmp_path):
    out = tmp_path / "r"
    (out / "tables").mkdir(parents=True)
    (out / "tables" / "a.csv").write_bytes(b"old")
    (out / "other.md").write_bytes(b"someone else's")
    write_folder_atomic(out, {out / "tables" / "a.csv": b"new", out / "index.md": b"idx"})
    assert tree(out) == {"tables/a.csv": b"new", "other.md": b"someone else's", "index.md": b"idx"}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_failure_while_writing_leaves_the_old_folder_untouched(tmp_path, monkeypatch):
    out = tmp_path / "r"
    out.mkdir()
    (out / "index.md").write_bytes(b"old index")
    (out / "keep.md").write_bytes(b"keep")
    before = tree(out)
    calls = {"n": 0}
    real = Path.write_bytes

    def dying(self, data):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt   # as a kill in the write phase
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", dying)
    with pytest.raises(KeyboardInterrupt):
        write_folder_atomic(out, {out / "index.md": b"new", out / "t" / "x.csv": b"x",
                                  out / "y.csv": b"y"})
    monkeypatch.undo()
    assert tree(out) == before      # the hard link into the old tree was never written through
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_kill_between_the_two_renames_is_recovered_by_the_next_run(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    (out / "index.md").write_bytes(b"old")
    os.rename(out, tmp_path / ".r.old-abc")          # the first rename happened, the second not
    (tmp_path / ".r.new-def").mkdir()                # a staging folder left behind
    recover_folder(out)
    assert tree(out) == {"index.md": b"old"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]


def test_report_needs_an_output_folder(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["report", "--requests", "1"])
    assert exc.value.code == 2
    assert "--out" in capsys.readouterr().err
