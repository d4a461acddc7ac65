"""SpecFit's cost model T̂(S) = b_|S| + βF(S) (Eq. 4) refitted from probe measurements by NNLS.

Following SpecFit App. B: points (k_i, F_i, y_i), minimise
Σ (y_i − b_{k_i} − βF_i)² subject to b, β ≥ 0 (``scipy.optimize.nnls``),
separately for probes with the cache kept and with it cleared before every
forward.  Repeats of one probe (same state, tree kind, k, cache mode) are
averaged first.  Probe files: CSV or JSON, format in
``docs/hardware-profiles.md``.  (The event model's times are fitted by
replaying traces, above the replay: :mod:`simmoe.fitting.timing_fit`.)
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simmoe.errors import SimmoeError

# --------------------------------------------------------------------------
# SpecFit's cost model from probe rows (App. B)
# --------------------------------------------------------------------------
MS_COLUMNS = ("ms", "y_ms")   # the measured cycle time without selector time; y_ms is hwprobe's name


@dataclass(frozen=True)
class ProbeRow:
    """One timed probe tree: cache kept or cleared, k draft nodes, union F, measured ms."""

    cache: bool
    k: int
    union: int
    ms: float
    group: tuple = ()     # (state, kind): repeats of one probe share it


@dataclass(frozen=True)
class CostFit:
    """NNLS result of one cache mode: b[0..kmax], β, and how well it fits."""

    b: tuple[float, ...]
    beta: float
    points: int
    rmse_ms: float
    max_rel_err: float


def _parse_bool(value, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on", "cache"):
        return True
    if text in ("false", "0", "no", "off", "no_cache", "none"):
        return False
    raise SimmoeError(f"{where}: 'cache' must be true or false, got {value!r}")


def _parse_row(raw: Mapping[str, Any], where: str) -> ProbeRow:
    missing = [c for c in ("cache", "k", "union") if c not in raw or raw[c] in ("", None)]
    ms_key = next((c for c in MS_COLUMNS if c in raw and raw[c] not in ("", None)), None)
    if ms_key is None:
        missing.append("ms")
    if missing:
        raise SimmoeError(f"{where}: missing {', '.join(repr(m) for m in missing)}")
    assert ms_key is not None
    try:
        k = int(str(raw["k"]).strip()) if not isinstance(raw["k"], int) else raw["k"]
        union = int(str(raw["union"]).strip()) if not isinstance(raw["union"], int) else raw["union"]
    except ValueError:
        raise SimmoeError(f"{where}: 'k' and 'union' must be integers, got {raw['k']!r}, {raw['union']!r}") from None
    try:
        ms = float(raw[ms_key])
    except (TypeError, ValueError):
        raise SimmoeError(f"{where}: {ms_key!r} must be a number, got {raw[ms_key]!r}") from None
    if k < 0 or union < 0:
        raise SimmoeError(f"{where}: 'k' and 'union' must be >= 0")
    if not math.isfinite(ms) or ms <= 0:
        raise SimmoeError(f"{where}: {ms_key!r} must be a positive number of ms, got {raw[ms_key]!r}")
    group = (str(raw.get("state", "")), str(raw.get("kind", ""))) if ("state" in raw or "kind" in raw) else ()
    return ProbeRow(_parse_bool(raw["cache"], where), k, union, ms, group)


def read_probes(path: str | Path) -> list[ProbeRow]:
    """Probe rows from a ``.csv`` (header row) or ``.json`` file (a list of objects, or {"rows": [...]})."""
    path = Path(path)
    if path.is_dir():
        raise SimmoeError(f"{path}: is a folder, not a probe file")
    if not path.is_file():
        raise SimmoeError(f"no such probe file: {path}")
    try:
        if path.suffix.lower() == ".json":
            doc = json.loads(path.read_text(encoding="utf-8"))
            raws = doc.get("rows") if isinstance(doc, dict) else doc
            if not isinstance(raws, list) or not all(isinstance(r, dict) for r in raws):
                raise SimmoeError(f"{path}: expected a list of probe objects (or {{\"rows\": [...]}})")
            rows = [_parse_row(r, f"{path}: row {i}") for i, r in enumerate(raws)]
        elif path.suffix.lower() == ".csv":
            with open(path, newline="", encoding="utf-8") as fh:
                reader = csv.DictReader(fh)
                rows = [_parse_row(r, f"{path}: line {i + 2}") for i, r in enumerate(reader)]
        else:
            raise SimmoeError(f"{path}: probe files must be .csv or .json")
    except (UnicodeDecodeError, json.JSONDecodeError, csv.Error) as exc:
        raise SimmoeError(f"{path}: cannot read probe rows: {exc}") from None
    if not rows:
        raise SimmoeError(f"{path}: no probe rows")
    return rows


def fit_cost_model(rows: Sequence[ProbeRow], cache: bool, kmax: int | None = None) -> CostFit:
    """NNLS fit of y = b_k + βF for the rows of one cache mode (App. B).

    Repeats (rows sharing group, k and F) are averaged first.  Every k in
    0..kmax (default: the largest k seen) needs at least one point, and every
    fitted b_k must come out > 0 (T̂ must stay positive): otherwise
    :class:`SimmoeError` says which.  O(points · kmax²) (scipy's NNLS).
    """
    from scipy.optimize import nnls

    sel = [r for r in rows if r.cache == cache]
    mode = "with the cache" if cache else "without the cache"
    if not sel:
        raise SimmoeError(f"no probe rows {mode}")
    groups: dict[tuple, list[float]] = {}
    for r in sel:
        key = (r.group, r.k, r.union) if r.group else (len(groups), r.k, r.union)
        groups.setdefault(key, []).append(r.ms)
    ks = np.array([key[1] for key in groups])
    F = np.array([key[2] for key in groups], dtype=np.float64)
    y = np.array([float(np.mean(v)) for v in groups.values()])
    kmax = int(ks.max()) if kmax is None else int(kmax)
    absent = sorted(set(range(kmax + 1)) - set(ks.tolist()))
    if absent:
        raise SimmoeError(f"no probe rows {mode} for k = {', '.join(map(str, absent))}: b_k cannot be fitted")
    if (ks > kmax).any():
        raise SimmoeError(f"probe rows {mode} have k up to {int(ks.max())}, above kmax = {kmax}")
    A = np.zeros((len(y), kmax + 2))
    A[np.arange(len(y)), ks] = 1.0
    A[:, -1] = F
    coef, _ = nnls(A, y)
    b, beta = coef[:-1], float(coef[-1])
    zero = [j for j, x in enumerate(b) if not x > 0]
    if zero:
        raise SimmoeError(f"fit {mode}: b_{zero[0]} came out 0 (the points with k = {zero[0]} are "
                          "explained by beta alone); measure more or longer probes")
    pred = A @ coef
    return CostFit(tuple(float(x) for x in b), beta, len(y),
                   float(np.sqrt(np.mean((pred - y) ** 2))), float(np.max(np.abs(pred / y - 1))))
