"""The published figures of the SpecFit and EVICT papers, machine-readable.

A verbatim copy of the project's ``shared/data/published.json`` (each figure
marked ``fit`` or ``validate`` as in ``shared/design/CALIBRATION.md``),
shipped as package data (``simmoe/data/published.json``) so that the
simulator needs no file outside the package.  It sits below every layer
that reads the figures: the report's tables, the validation report and the
fits of the hardware models.  ``tests/test_published.py`` checks that
the copy is current.
"""

from __future__ import annotations

import json
from pathlib import Path

PUBLISHED: dict = json.loads(
    (Path(__file__).resolve().parent / "data" / "published.json").read_text(encoding="utf-8"))

