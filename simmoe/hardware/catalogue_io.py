"""What every catalogue file shares: its error type, the data folder, reading TOML, names without whitespace.

The model catalogue (``model_spec.py``), the GPU and link descriptions
(``gpus.py``), the CPU descriptions (``cpus.py``) and the weight formats
(``formats.py``) read their files through this module, so a bad file or name
is the same one-line error everywhere (docs/models-and-gpus.md).
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any

from simmoe.errors import SimmoeError

DATA_DIR = Path(__file__).parent / "data"


class CatalogueError(SimmoeError):
    """A model, GPU, link, CPU or format is unknown, or a catalogue file has a missing or bad field."""


def read_toml(path: Path, what: str) -> dict:
    if not path.is_file():
        raise CatalogueError(f"no such {what} file: {path}")
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise CatalogueError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise CatalogueError(f"{path}: not a text file") from None


def read_tables(path: Path, what: str, names: tuple[str, str]) -> tuple[dict, dict]:
    """The two tables ``names`` of a description file (``[a.*]`` and ``[b.*]``), any other table refused."""
    doc = read_toml(path, what)
    unknown = sorted(set(doc) - set(names))
    if unknown:
        a, b = names
        raise CatalogueError(f"{path}: unknown table [{unknown[0]}] (a {what} file holds [{a}.*] and [{b}.*])")
    return table(doc, names[0], str(path)), table(doc, names[1], str(path))


def number(t: dict, name: str, where: str, *, positive: bool = False) -> float:
    """Field ``name`` of table ``t`` as a finite float >= 0 (> 0 with ``positive``), or a one-line error."""
    x = t.get(name)
    if x is None:
        raise CatalogueError(f"{where}: missing field {name!r}")
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
        raise CatalogueError(f"{where}: field {name!r} must be a number >= 0, got {x!r}")
    if positive and x <= 0:
        raise CatalogueError(f"{where}: field {name!r} must be > 0")
    return float(x)


def integer(t: dict, name: str, where: str, *, minimum: int = 1) -> int:
    """Field ``name`` of table ``t`` as an integer >= ``minimum``, or a one-line error."""
    x = t.get(name)
    if x is None:
        raise CatalogueError(f"{where}: missing field {name!r}")
    if isinstance(x, bool) or not isinstance(x, int) or x < minimum:
        raise CatalogueError(f"{where}: field {name!r} must be an integer >= {minimum}, got {x!r}")
    return x


def string(t: dict, name: str, where: str) -> str:
    """Field ``name`` of table ``t`` as a non-empty string, or a one-line error."""
    x = t.get(name)
    if not isinstance(x, str) or not x.strip():
        raise CatalogueError(f"{where}: field {name!r} must be a non-empty string")
    return x


def table(doc: Any, key: str, where: str) -> dict:
    """``doc[key]`` as a table (an empty one when absent), or a one-line error."""
    t = doc.get(key, {}) if isinstance(doc, dict) else None
    if not isinstance(t, dict):
        raise CatalogueError(f"{where}: [{key}] must be a table")
    return t


_BLANKS = {" ": "a blank", "\t": "a tab", "\n": "a newline", "\r": "a carriage return"}


def blank_problem(text: str) -> str | None:
    """Where a name holds whitespace (``"starts with a blank"``), or None: names of models, GPUs, links and
    profiles hold none, and a pasted name often carries a blank or a newline that no message would show."""
    for i, ch in enumerate(text):
        if ch.isspace():
            what = _BLANKS.get(ch, f"whitespace (U+{ord(ch):04X})")
            if i == 0:
                return f"starts with {what}"
            if not text[i:].strip():
                return f"ends with {what}"
            return f"holds {what} at character {i + 1}"
    return None


def check_name(text: str, what: str, error: type[SimmoeError] = SimmoeError) -> None:
    """Refuse an empty ``what`` name, or one holding whitespace, pointing at it (one line, exit 2)."""
    if not text:
        raise error(f"empty {what} name")
    problem = blank_problem(text)
    if problem is not None:
        raise error(f"{what} {text!r} {problem}: names hold no whitespace")

