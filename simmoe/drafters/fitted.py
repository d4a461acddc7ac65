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


# what each drafter's fit reproduced (simmoe.fitting.drafter_fit: the figures CALIBRATION.md admits)
FIT_SOURCES = {"lookahead": "EVICT Table 1's Lookahead tokens/s at temperature 0 (Qwen3-30B-A3B)",
               "dflash": "EVICT Table 6's DFlash tokens/s at batch 4 (vLLM)"}


def for_workload(spec: str, given: dict[str, Any], workload: str | None) -> tuple[Any, str | None]:
    """The drafter of a synthetic workload, with its fitted parameter where the fit names the workload, and
    what its acceptance comes from (a provenance line; None for EAGLE-3 without parameters).

    A parameter given by hand wins over the fit; a drafter or workload the
    fit does not name keeps the drafter's defaults (its published statistics,
    or assumptions where it says so).
    """
    from simmoe.drafters import DEFAULT, build

    drafter = build(spec, given)
    if drafter.name == DEFAULT:
        return drafter, None
    name = FITTED.get(drafter.name)
    entry = fitted_entry(drafter.name, workload) if name is not None and workload else {}
    if name is not None and name in given:
        return drafter, f"drafter {drafter.name}: {name} = {given[name]} given by hand (--drafter-param)"
    if not entry or name not in entry:
        what = (f"no fit for workload {workload}" if name is not None
                else "no published figure admitted for a fit")
        return drafter, (f"drafter {drafter.name}: acceptance from its defaults, published statistics or named "
                         f"assumptions ({what}; docs/synthetic-traces.md, Drafters): every tokens/s a prediction")
    value = float(entry[name])
    try:
        drafter = build(spec, {**given, name: value})
    except SimmoeError as exc:
        raise SimmoeError(f"{exc} (the value fitted on {workload}; give {name}=... by hand)") from None
    return drafter, (f"drafter {drafter.name}: {name} = {value:g} fitted to {FIT_SOURCES[drafter.name]} on "
                     f"{workload} ({entry.get('target_tps')} tokens/s; replayed on {entry.get('profile')}, batch "
                     f"{entry.get('batch')}; {fit_file().name})")
