"""Publishing a trained model folder atomically: built in a hidden sibling, then renamed into place."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from pathlib import Path


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def replace_dir(tmp: Path, out: Path) -> None:
    """Move ``tmp`` to ``out``; an existing ``out`` is replaced only once ``tmp`` is complete."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old)


@contextlib.contextmanager
def staged_folder(out: Path):
    """Yield an empty sibling folder to fill; on success it replaces ``out``, on any error it is removed.

    So a killed or failed run never leaves a half-written ``out``.  Files
    are made world-readable (some writers create private files).
    """
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        yield tmp
        for f in tmp.rglob("*"):
            f.chmod(0o755 if f.is_dir() else 0o644)
        replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
