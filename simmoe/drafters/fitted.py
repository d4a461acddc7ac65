"""The built-in drafters' fitted parameters per workload, read from ``data/drafter_fit.toml``.

CALIBRATION.md admits two figures per drafter to fit (EVICT Table 1's
Lookahead tokens/s at temperature 0 on Qwen3-30B-A3B, per benchmark; Table
6's DFlash at batch 4 on QA and HumanEval); :mod:`simmoe.fitting.drafter_fit`
writes one acceptance parameter per (drafter, workload) here, and whatever
replays that drafter on that workload reads it as its default.  A workload the
file does not name keeps the drafter's own defaults.
"""

from __future__ import annotations

import functools
import os
import tomllib
from pathlib import Path
from typing import Any

from simmoe.errors import SimmoeError

DRAFTER_FIT_FILE = Path(__file__).parent / "data" / "drafter_fit.toml"
# the parameter each drafter's fit moves (its acceptance scale); nothing else is written per workload
FITTED = {"lookahead": "hit", "dflash": "per_step"}


@functools.cache
def _load(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SimmoeError(f"{path}: cannot read the drafters' fit: {exc}") from None


def fit_file() -> Path:
    """The fit file read (``SIMMOE_DRAFTER_FIT`` names another, e.g. a test's)."""
    return Path(os.environ.get("SIMMOE_DRAFTER_FIT") or DRAFTER_FIT_FILE)


def fitted_entry(drafter: str, workload: str) -> dict[str, Any]:
    """The whole fitted entry of (drafter, workload): the parameter, its target and what the fit saw; {} if none."""
    entry = _load(str(fit_file())).get(drafter, {}).get(workload, {})
    return dict(entry) if isinstance(entry, dict) else {}


def fitted_params(drafter: str, workload: str) -> dict[str, Any]:
    """The drafter's fitted parameters on ``workload`` (a benchmark name), to pass to :func:`simmoe.drafters.build`."""
    name = FITTED.get(drafter)
    entry = fitted_entry(drafter, workload)
    return {name: float(entry[name])} if name is not None and name in entry else {}
