"""Live runs of ``hwprobe live``: the JSON-lines file, its checks, and passes merged into one run.

The file: JSON lines, a ``"type": "run"`` line (metadata, with
``"complete"``), then per request a ``"request"`` line followed by its
``"cycle"`` lines (:mod:`hwprobe.live` writes it).  :func:`read_live` reads
and checks one file (one line naming the file, line and field for every
problem); :func:`read_live_passes` merges several passes of the same run,
taking each time's minimum over the passes.  :mod:`simmoe.validation.live`
compares them with replays.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simmoe.errors import CheckFailed, SimmoeError

LIVE_FORMAT = "simmoe-live/1"
#: fidelity goals on a CPU machine (decode TPS error, median per-cycle error)

_CYCLE_KEYS = ("request", "position", "row", "drafted_levels", "pool_levels", "pool_size", "selected",
               "accepted", "committed", "tokens", "draft_ms", "select_ms", "verify_ms", "commit_ms",
               "hits", "copies")
_REQUEST_KEYS = ("index", "request_id", "prompt_len", "output_len", "tokens", "prefill_ms",
                 "prefill_hits", "prefill_copies")


# --------------------------------------------------------------------------
# the live-run file
# --------------------------------------------------------------------------
@dataclass
class LiveRun:
    """A live run: metadata, its requests, and its cycles as column arrays (in run order)."""

    meta: dict
    requests: list[dict]
    cycles: dict[str, Any]
    path: str = ""

    @property
    def complete(self) -> bool:
        return bool(self.meta.get("complete", False))

    @property
    def num_cycles(self) -> int:
        return len(self.cycles["request"])

    @classmethod
    def from_records(cls, meta: dict, records: list[dict], path: str = "") -> LiveRun:
        """Build from the request and cycle lines (each with a ``type``)."""
        requests = [r for r in records if r.get("type") == "request"]
        cyc = [r for r in records if r.get("type") == "cycle"]
        for i, r in enumerate(requests):
            missing = [k for k in _REQUEST_KEYS if k not in r]
            if missing:
                raise SimmoeError(f"{path}: request {i} lacks {', '.join(missing)}")
        for i, c in enumerate(cyc):
            missing = [k for k in _CYCLE_KEYS if k not in c]
            if missing:
                raise SimmoeError(f"{path}: cycle {i} lacks {', '.join(missing)}")
        col = lambda k, dt: np.asarray([c[k] for c in cyc], dtype=dt)  # noqa: E731
        L = len(cyc[0]["hits"]) if cyc else 0
        per_layer = lambda k: (np.asarray([c[k] for c in cyc], np.int64).reshape(len(cyc), L)  # noqa: E731
                               if cyc else np.zeros((0, 0), np.int64))
        cycles: dict[str, Any] = {
            "request": col("request", np.int32), "position": col("position", np.int32),
            "row": col("row", np.int64), "drafted_levels": col("drafted_levels", np.int8),
            "pool_levels": col("pool_levels", np.int8), "pool_size": col("pool_size", np.int16),
            "draft_nodes": np.asarray([len(c["selected"]) for c in cyc], np.int16),
            "accepted": col("accepted", np.int16), "committed": col("committed", np.int16),
            "draft_ms": col("draft_ms", np.float64), "select_ms": col("select_ms", np.float64),
            "verify_ms": col("verify_ms", np.float64), "commit_ms": col("commit_ms", np.float64),
            "hits_layer": per_layer("hits"), "copies_layer": per_layer("copies"),
            "selected": [list(c["selected"]) for c in cyc],
            "level_ms": [list(c.get("level_ms", [])) for c in cyc],
            # every pass's cycle time when the run repeated its passes (hwprobe live --repeats)
            "samples_ms": [list(c.get("samples_ms", [])) for c in cyc],
        }
        cycles["hits"] = cycles["hits_layer"].sum(axis=1) if cyc else np.zeros(0, np.int64)
        cycles["copies"] = cycles["copies_layer"].sum(axis=1) if cyc else np.zeros(0, np.int64)
        cycles["cycle_ms"] = cycles["draft_ms"] + cycles["select_ms"] + cycles["verify_ms"] + cycles["commit_ms"]
        return cls(meta=dict(meta), requests=requests, cycles=cycles, path=path)

    # -- Eq. 10 and counters, measured ------------------------------------------
    def summary(self) -> dict[str, float]:
        n_out = np.asarray([r["output_len"] for r in self.requests], np.int64)
        tokens = int(n_out.sum())
        c = self.cycles
        decode_ms = float(np.sum(c["cycle_ms"]))
        copies = int(np.sum(c["copies"])) + sum(int(np.sum(r["prefill_copies"])) for r in self.requests)
        n = self.num_cycles
        return {
            "decode_tps": 1e3 * (tokens - len(n_out)) / decode_ms if decode_ms > 0 else float("nan"),
            "committed": float(np.mean(c["committed"])) if n else float("nan"),
            "draft_nodes": float(np.mean(c["draft_nodes"])) if n else float("nan"),
            "cycles": n,
            "ms_per_cycle": float(np.mean(c["cycle_ms"])) if n else float("nan"),
            "h2d_per_token": copies / tokens if tokens else float("nan"),
            "output_tokens": tokens,
        }


def _numbered_records(path) -> list[tuple[int, Any]]:
    """(line number, record) of every non-blank line of a live-run file."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise SimmoeError(f"{path}: not a live-run file (not UTF-8 text)") from None
    records = []
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append((no, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise SimmoeError(f"{path}: line {no} is not JSON ({exc.msg}); not a live-run file") from None
    return records


# What every value of a record must be: (kind, largest value); kinds: "count" (an integer >= 0),
# "ms" (a finite number >= 0), "counts" / "ms list" / "ids" (lists of those; ids: integers >= 0).
_INT16, _INT8, _INT32 = 2**15 - 1, 2**7 - 1, 2**31 - 1
_CYCLE_FIELDS = {
    "request": ("count", _INT32), "position": ("count", _INT32), "row": ("count", 2**63 - 1),
    "drafted_levels": ("count", _INT8), "pool_levels": ("count", _INT8), "pool_size": ("count", _INT16),
    "accepted": ("count", _INT16), "committed": ("count", _INT16),
    "draft_ms": ("ms", None), "select_ms": ("ms", None), "verify_ms": ("ms", None), "commit_ms": ("ms", None),
    "hits": ("counts", 2**62), "copies": ("counts", 2**62), "selected": ("ids", _INT16),
    "tokens": ("ids", None),
    "level_ms": ("ms list", None), "samples_ms": ("ms list", None),
}
_REQUEST_FIELDS = {
    "index": ("count", _INT32), "prompt_len": ("count", _INT32), "output_len": ("count", _INT32),
    "tokens": ("ids", None), "prefill_ms": ("ms", None), "prefill_hits": ("counts", 2**62),
    "prefill_copies": ("counts", 2**62),
}


def _value_problem(kind: str, top: int | None, v) -> str | None:
    """Why ``v`` is not a value of ``kind`` (None when it is)."""
    def is_int(x):
        return isinstance(x, int) and not isinstance(x, bool)

    def is_number(x):
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    if kind == "count":
        if not is_int(v) or v < 0:
            return f"must be an integer >= 0, got {v!r}"
        if top is not None and v > top:
            return f"must be at most {top}, got {v!r}"
        return None
    if kind == "ms":
        if not is_number(v) or not math.isfinite(v) or v < 0:
            return f"must be a finite time >= 0 in ms, got {v!r}"
        return None
    if not isinstance(v, list):
        return f"must be a list, got {v!r}"
    for i, x in enumerate(v):
        inner = _value_problem("ms" if kind == "ms list" else "count", top, x)
        if inner:
            return f"entry {i} {inner}"
    return None


def _check_records(path, numbered: list[tuple[int, Any]]) -> None:
    """Every request and cycle line holds what :class:`LiveRun` reads, with sane values.

    Times must be finite and >= 0 ms, counts integers >= 0 (within the column
    types), per-layer lists of one length, and a cycle's request one of the
    file's requests; :class:`SimmoeError` names the file, the line and the
    field.  O(lines · fields).
    """
    n_requests = sum(1 for _, r in numbered if isinstance(r, dict) and r.get("type") == "request")
    layers = None
    cycle = request = 0
    for no, rec in numbered:
        if not isinstance(rec, dict) or rec.get("type") not in ("request", "cycle"):
            continue
        is_cycle = rec["type"] == "cycle"
        where = f"{path}, line {no} ({'cycle' if is_cycle else 'request'} {cycle if is_cycle else request})"
        fields = _CYCLE_FIELDS if is_cycle else _REQUEST_FIELDS
        missing = [k for k in (_CYCLE_KEYS if is_cycle else _REQUEST_KEYS) if k not in rec]
        if missing:
            raise SimmoeError(f"{where}: lacks {', '.join(repr(k) for k in missing)}")
        for key, (kind, top) in fields.items():
            if key in rec:
                problem = _value_problem(kind, top, rec[key])
                if problem:
                    raise SimmoeError(f"{where}, field {key!r}: {problem}")
        if is_cycle:
            if rec["request"] >= n_requests:
                raise SimmoeError(f"{where}, field 'request': request {rec['request']} but the file has "
                                  f"{n_requests} request line{'s' if n_requests != 1 else ''}")
            for key in ("hits", "copies"):
                if layers is None:
                    layers = len(rec[key])
                if len(rec[key]) != layers:
                    raise SimmoeError(f"{where}, field {key!r}: {len(rec[key])} layers, but earlier cycles "
                                      f"have {layers}")
            cycle += 1
        else:
            request += 1


def read_live(path, *, allow_partial: bool = False) -> LiveRun:
    """Read a live-run file; :class:`SimmoeError` names what is wrong (missing, torn, incomplete)."""
    meta, records = _read_checked(path, allow_partial)
    return LiveRun.from_records(meta, records, path=str(path))


def _read_checked(path, allow_partial: bool = False) -> tuple[dict, list[dict]]:
    """A live-run file's run line and its other records, after the checks :func:`read_live` names."""
    path = Path(path)
    if path.is_dir():
        raise SimmoeError(f"{path}: is a folder, not a live-run file")
    if not path.is_file():
        partial = path.with_name(path.name + ".partial")
        hint = f" ({partial} holds the finished requests of an interrupted run)" if partial.is_file() else ""
        raise SimmoeError(f"no such live-run file: {path}{hint}")
    numbered = _numbered_records(path)
    records = [rec for _, rec in numbered]
    if not records or not isinstance(records[0], dict) or records[0].get("type") != "run":
        raise SimmoeError(f"{path}: not a live-run file (the first line must be the run line)")
    meta = records[0]
    if meta.get("format") != LIVE_FORMAT:
        raise SimmoeError(f"{path}: unsupported live-run format {meta.get('format')!r} (this simmoe reads "
                          f"{LIVE_FORMAT})")
    if not meta.get("complete", False) and not allow_partial:
        raise SimmoeError(f"{path}: the live run is incomplete ({meta.get('requests_done', 0)} requests "
                          "finished); rerun hwprobe live to complete it")
    for key in ("model", "selector", "slots", "max_new_tokens", "geometry", "pool", "K"):
        if key not in meta:
            raise SimmoeError(f"{path}: run line lacks {key!r}")
    run_line = f"{path}, line {numbered[0][0]} (run line)"
    for key, want in (("geometry", dict), ("pool", dict), ("selector", str)):
        if not isinstance(meta[key], want):
            raise SimmoeError(f"{run_line}, field {key!r}: must be a "
                              f"{'JSON object' if want is dict else 'string'}, got {meta[key]!r}")
    for key in ("slots", "K", "max_new_tokens", "route_seed"):
        problem = _value_problem("count", _INT32, meta[key]) if key in meta else None
        if problem:
            raise SimmoeError(f"{run_line}, field {key!r}: {problem}")
    temp = meta.get("temperature", 0.0)
    if isinstance(temp, bool) or not isinstance(temp, (int, float)) or not math.isfinite(temp) or temp < 0:
        raise SimmoeError(f"{path}, line 1 (run line), field 'temperature': must be a finite number >= 0, "
                          f"got {temp!r}")
    problem = _value_problem("count", _INT32, meta["sampling_seed"]) if "sampling_seed" in meta else None
    if problem:
        raise SimmoeError(f"{path}, line 1 (run line), field 'sampling_seed': {problem}")
    acc = meta.get("route_accuracy", 1.0)
    if isinstance(acc, bool) or not isinstance(acc, (int, float)) or not 0 <= acc <= 1:
        raise SimmoeError(f"{run_line}, field 'route_accuracy': must be a number in [0, 1], got {acc!r}")
    _check_records(path, numbered[1:])
    return meta, [r for r in records[1:] if isinstance(r, dict)]


# --------------------------------------------------------------------------
# repeated passes: one run, each time its least disturbed measurement
# --------------------------------------------------------------------------
#: what every pass of one run must repeat exactly (everything but the times)
_SAME_REQUEST = ("index", "request_id", "prompt_len", "output_len", "tokens", "prefill_hits", "prefill_copies")
_SAME_CYCLE = ("request", "position", "row", "pool_size", "pool_levels", "drafted_levels", "selected",
               "accepted", "committed", "tokens", "hits", "copies")
#: run settings that passes to be merged must share
_SAME_SETTINGS = ("model", "weights", "drafter", "drafter_agreement", "prompts_sha256", "category", "limit",
                  "offset", "selector", "slots", "K", "route_accuracy", "route_seed", "temperature", "sampling_seed",
                  "options", "max_new_tokens",
                  "max_total_tokens", "pool", "geometry", "device", "dtype", "clock", "threads",
                  "selection_profile", "prefetch")


def merge_passes(passes: list[list[list[dict]]]) -> list[list[dict]]:
    """Merge repeated passes of one live run: each time becomes its minimum over the passes.

    ``passes[p][r]`` is request ``r`` of pass ``p``: its request line, then
    its cycle lines (the live-run file's records).  Greedy decoding, the
    pools, the selections and the cache's hits and copies are deterministic,
    so every pass must make the same cycles (else :class:`CheckFailed`); only
    the times differ, by what the rest of the machine did meanwhile.  Each
    part of each cycle (every drafting level, selection, verification,
    commit) and each prefill keeps its minimum, the least disturbed
    measurement (``timeit``'s convention); drafting is the sum of its drafted
    levels' minima; ``samples_ms`` keeps every pass's cycle time.
    O(passes · cycles).
    """
    if not passes:
        return []
    if any(len(p) != len(passes[0]) for p in passes):
        raise CheckFailed("the passes to merge differ in their number of requests")
    merged = []
    for r, first in enumerate(passes[0]):
        reqs = [p[r] for p in passes]
        for i, other in enumerate(reqs[1:], 2):
            same = (len(other) == len(first)
                    and all(other[0].get(k) == first[0].get(k) for k in _SAME_REQUEST)
                    and all(a.get(k) == b.get(k) for a, b in zip(first[1:], other[1:]) for k in _SAME_CYCLE)
                    and all(len(a.get("level_ms", ())) == len(b.get("level_ms", ()))
                            for a, b in zip(first[1:], other[1:])))
            if not same:
                raise CheckFailed(f"request {first[0].get('request_id')}: pass {i} made other cycles than pass 1 "
                                  "(tokens, selections or cache hits differ between passes of one run)")
        cycles = []
        for j, c in enumerate(first[1:], 1):
            cs = [q[j] for q in reqs]
            out = dict(c)
            level = [min(x) for x in zip(*(q.get("level_ms", []) for q in cs))]
            out["level_ms"] = level
            out["draft_ms"] = (float(sum(level[:int(c["drafted_levels"])])) if level
                               else min(float(q["draft_ms"]) for q in cs))
            if "prefetch_ms" in c:          # hwprobe live --prefetch: the copies' block is part of drafting
                out["prefetch_ms"] = min(float(q.get("prefetch_ms", 0.0)) for q in cs)
                if level:
                    out["draft_ms"] += out["prefetch_ms"]
            for k in ("select_ms", "verify_ms", "commit_ms"):
                out[k] = min(float(q[k]) for q in cs)
            out["cycle_ms"] = out["draft_ms"] + out["select_ms"] + out["verify_ms"] + out["commit_ms"]
            out["samples_ms"] = [x for q in cs for x in (q.get("samples_ms") or [_cycle_ms(q)])]
            cycles.append(out)
        head = dict(first[0])
        head["prefill_ms"] = min(float(q[0]["prefill_ms"]) for q in reqs)
        head["decode_ms"] = float(sum(c["cycle_ms"] for c in cycles))
        merged.append([head, *cycles])
    return merged


def _cycle_ms(c: dict) -> float:
    return float(c["draft_ms"]) + float(c["select_ms"]) + float(c["verify_ms"]) + float(c["commit_ms"])


def _split_requests(records: list[dict]) -> list[list[dict]]:
    out: list[list[dict]] = []
    for rec in records:
        if rec.get("type") == "request":
            out.append([rec])
        elif rec.get("type") == "cycle" and out:
            out[-1].append(rec)
    return out


def read_live_passes(paths) -> LiveRun:
    """Several complete live-run files of one run (same settings, prompts and cycles) merged by :func:`merge_passes`.

    One path reads as :func:`read_live`.  Runs made at different times see
    different disturbances, so passes spread over a long session (e.g.
    interleaved with other runs) merge into a steadier measurement than
    back-to-back passes.  :class:`SimmoeError` when the runs are not passes
    of one run.
    """
    paths = list(paths)
    if not paths:
        raise SimmoeError("no live-run files given")
    if len(paths) == 1:
        return read_live(paths[0])
    runs = [_read_checked(p) for p in paths]
    meta = dict(runs[0][0])
    for p, (other, _) in zip(paths[1:], runs[1:]):
        diff = [k for k in _SAME_SETTINGS if other.get(k) != meta.get(k)]
        if diff:
            raise SimmoeError(f"{p} and {paths[0]} are not passes of one run: they differ in "
                              f"{', '.join(diff)}")
    try:
        lines = merge_passes([_split_requests(records) for _, records in runs])
    except CheckFailed as exc:
        raise SimmoeError(f"{', '.join(map(str, paths))}: {exc}") from None
    meta["repeats"] = sum(int(m.get("repeats", 1) or 1) for m, _ in runs)
    meta["combine"] = "minimum over passes"
    meta["merged_from"] = [str(p) for p in paths]
    return LiveRun.from_records(meta, [x for req in lines for x in req], path=" + ".join(map(str, paths)))
