"""Atomic file writes: a temp file in the same folder, then ``os.replace``."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path, write) -> Path:
    """Call ``write(tmp_path)`` then move the result onto ``path``; nothing is left on failure."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path, text: str) -> Path:
    return write_atomic(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
