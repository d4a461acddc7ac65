"""Atomic file output: a temp file in the same folder, then ``os.replace``.

Every file the toolkit writes goes through here, so that a killed or failed
run never leaves a half-written file under the output name.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

from simmoe.errors import SimmoeError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path, write: Callable[[str], object]) -> Path:
    """Call ``write(tmp_path)``, then move the result onto ``path``; nothing is left on failure.

    The file gets the usual mode for new files (``mkstemp`` would leave 0600).
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise SimmoeError(f"cannot write {path}: folder {folder} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_bytes_atomic(path, data: bytes) -> Path:
    return write_atomic(path, lambda tmp: Path(tmp).write_bytes(data))


def write_text_atomic(path, text: str) -> Path:
    return write_atomic(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
