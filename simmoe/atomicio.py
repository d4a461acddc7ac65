"""Atomic file output: a temp file in the same folder, then ``os.replace``.

Every file the toolkit writes goes through here, so that a killed or failed
run never leaves a half-written file under the output name.  The temp file
is ``.NAME.PID.XXXXXXXX.tmp`` next to ``NAME``; a run killed outright
(SIGKILL, power loss) cannot remove its own, so the next write of ``NAME``
removes those whose process no longer runs.  A path that cannot be written
(an existing folder, a missing folder, no permission, a full disk) is a
:class:`SimmoeError` naming it.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

from simmoe.errors import SimmoeError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path, write: Callable[[str], object]) -> Path:
    """Call ``write(tmp_path)``, then move the result onto ``path``; nothing is left on failure.

    The file gets the usual mode for new files (``mkstemp`` would leave 0600).
    :class:`SimmoeError` when ``path`` is a folder, its folder does not exist, or
    the file system refuses (the error's text, e.g. no permission, no space).
    """
    path = Path(path)
    check_writable(path)
    folder = path.parent if str(path.parent) else Path(".")
    remove_stale_temps(path)
    from simmoe.interrupt import checkpoint, deferred

    with deferred(act=False):   # a signal lands in the try below, which removes the temp file, never before it
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=folder)
        except OSError as exc:
            raise SimmoeError(f"cannot write {path}: {exc.strerror or exc}") from None
        os.close(fd)
    try:
        checkpoint()
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        if path.is_dir():
            raise SimmoeError(f"cannot write {path}: it is a folder; give a file name") from None
        other = exc.filename if exc.filename not in (None, tmp, str(path)) else None
        raise SimmoeError(f"cannot write {path}: {exc.strerror or exc}"
                          + (f" ({other})" if other else "")) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def check_writable(path) -> None:
    """Refuse, before any work, an output path that is a folder or lies in a missing folder."""
    path = Path(path)
    if not str(path).strip() or str(path) == ".":
        raise SimmoeError("cannot write an empty file name; give a file name")
    if path.is_dir():
        raise SimmoeError(f"cannot write {path}: it is a folder; give a file name")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise SimmoeError(f"cannot write {path}: folder {folder} does not exist")


def check_outputs(outputs, *, stdout: tuple[str, ...] = (), suffixes: dict | None = None,
                  folders: tuple[str, ...] = (), inputs=()) -> None:
    """Check every output path of a command before it does any work; :class:`SimmoeError` names the flag.

    ``outputs`` holds ``(flag, path)`` pairs (``path`` None: not asked for).
    Refused: an empty name; ``-`` for a flag not in ``stdout``, or for two
    flags at once (their texts would interleave on stdout); a file output that
    is a folder (or a ``folders`` output that is a file); a missing parent
    folder or one this process cannot write into; a name outside the flag's
    ``suffixes`` (e.g. ``{"--out": (".parquet",)}``); two flags naming the
    same file (one would silently overwrite the other); an output that is one
    of the command's ``inputs``.
    """
    seen: dict[str, str] = {}
    dashes = []
    ins = {os.path.realpath(p): p for p in inputs if p and p != "-"}
    for flag, path in outputs:
        if path is None:
            continue
        text = str(path)
        if not text.strip():
            raise SimmoeError(f"{flag}: empty file name")
        if text == "-":
            if flag not in stdout:
                raise SimmoeError(f"{flag} needs a file name, not '-'")
            dashes.append(flag)
            if len(dashes) > 1:
                raise SimmoeError(f"{dashes[0]} - and {flag} - would interleave on stdout: send one to a file")
            continue
        _check_one(flag, Path(text), folder=flag in folders, suffixes=(suffixes or {}).get(flag))
        real = os.path.realpath(text)
        if real in seen:
            raise SimmoeError(f"{seen[real]} and {flag} both name {text}: one would overwrite the other")
        if real in ins:
            raise SimmoeError(f"{flag} {text}: is an input of this command; give another file name")
        seen[real] = flag


def _check_one(flag: str, path: Path, *, folder: bool, suffixes) -> None:
    if folder:
        if path.exists() and not path.is_dir():
            raise SimmoeError(f"{flag} {path}: exists and is not a folder")
    elif path.is_dir() or str(path) == "." or str(path).endswith(os.sep):
        raise SimmoeError(f"{flag} {path}: is a folder; give a file name")
    if suffixes and path.suffix.lower() not in suffixes:
        raise SimmoeError(f"{flag} {path}: give a name ending in {' or '.join(suffixes)}")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        what = "is not a folder" if parent.exists() else "does not exist"
        raise SimmoeError(f"{flag} {path}: folder {parent} {what}")
    where = path if folder and path.is_dir() else parent   # a file is replaced by a rename in its folder
    if not os.access(where, os.W_OK | os.X_OK):
        raise SimmoeError(f"{flag} {path}: no permission to write in {where}")


def _temp_pattern(name: str) -> re.Pattern:
    return re.compile(rf"\.{re.escape(name)}\.(\d+)\.[A-Za-z0-9_]+\.tmp")


def _pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True   # another user's process (or not a pid we can ask about): keep its file
    return True


def remove_stale_temps(path) -> list[Path]:
    """Remove the temp files of ``path`` left by writers that no longer run; returns them.

    Only files named like this module's temps of the same output
    (``.NAME.PID.XXXXXXXX.tmp``) whose PID is not a running process are
    removed, so a concurrent writer of the same file keeps its temp file.
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    pattern = _temp_pattern(path.name)
    removed: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if m and int(m.group(1)) != os.getpid() and not _pid_running(int(m.group(1))):
            try:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
            except OSError:
                pass
    return removed


def write_bytes_atomic(path, data: bytes) -> Path:
    return write_atomic(path, lambda tmp: Path(tmp).write_bytes(data))


def write_text_atomic(path, text: str) -> Path:
    return write_atomic(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def write_folder_atomic(out, files: dict) -> list[Path]:
    """Write ``files`` (path under ``out`` → bytes) so that ``out`` shows all of them or none.

    The new tree is built in a hidden sibling folder: the other files already in
    ``out`` are hard-linked into it (copied where links are not possible), the
    new files written over them, and the two folders are then swapped by two
    renames.  A run killed before the swap leaves ``out`` as it was (the hidden
    folder is removed by the next run); one killed between the two renames (a
    window of microseconds) leaves the old folder under a hidden name, which
    :func:`recover_folder` puts back.
    """
    import shutil

    out = Path(out)
    recover_folder(out)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=out.parent))
    try:
        if out.is_dir():
            shutil.copytree(out, staging, dirs_exist_ok=True, copy_function=_link_or_copy,
                            symlinks=True)
        for path, data in files.items():
            target = staging / Path(path).relative_to(out)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.unlink(missing_ok=True)   # never write through a hard link into the old tree
            target.write_bytes(data)
            os.chmod(target, 0o666 & ~_umask())
        os.chmod(staging, 0o777 & ~_umask())
        if out.is_dir():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            old.rmdir()
            os.rename(out, old)
            os.rename(staging, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return [Path(p) for p in files]


def recover_folder(out) -> None:
    """Undo what a killed :func:`write_folder_atomic` left: restore ``out``, drop staging folders."""
    import shutil

    out = Path(out)
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        return
    olds = sorted(parent.glob(f".{out.name}.old-*"))
    if olds and not out.exists():
        os.rename(olds[-1], out)
        olds = olds[:-1]
    for stale in olds + sorted(parent.glob(f".{out.name}.new-*")):
        shutil.rmtree(stale, ignore_errors=True)


def _link_or_copy(src, dst):
    import shutil

    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst
