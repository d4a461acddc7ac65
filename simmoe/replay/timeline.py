"""Timelines of cycles as Chrome trace-event JSON (Perfetto, chrome://tracing).

``simmoe replay --timeline FILE`` writes the event model's timeline
(:mod:`simmoe.replay.prefetch` records every event when asked) and ``hwprobe
live --timeline FILE`` the measured one, in the same format, so the two open
side by side.  Vidur exports its simulator's timeline in the same format.

Layout: one process per replayed configuration (``pid``; its name says the
selector, slots and prefetch policy), one thread per engine (``tid``):

* ``compute`` — the compute stream: drafting levels, attention of each layer,
  expert computation, commit, prefill;
* ``copy 0`` … ``copy c−1`` — the lanes of the copy engine: demand copies
  (category ``demand``) and prefetch copies (``prefetch``);
* ``host`` — the selector.

Events are complete events (``"ph": "X"``), times in microseconds from the
replay's start.  Back-to-back copies of one kind and layer on one lane are
merged into one event whose ``args`` list the experts, which keeps a cycle to
a few hundred events.  On one engine, events never overlap
(:func:`overlaps` checks a file; the model guarantees it, the tests check it).
"""

from __future__ import annotations

import json
from pathlib import Path

ENGINE_ORDER = {"compute": 0, "host": 1000}   # copy lanes sort between them


def _sort_index(track: str) -> int:
    if track.startswith("copy "):
        return 1 + int(track.split()[1])
    return ENGINE_ORDER.get(track, 500)


def merge_copies(events: list) -> list:
    """Merge back-to-back copy events of one lane, kind and layer (their ends meet exactly)."""
    out: list = []
    last: dict = {}
    for ev in events:
        track, name, cat, start, end, args = ev
        if cat in ("demand", "prefetch") and "layer" in args:
            prev = last.get(track)
            if (prev is not None and prev[2] == cat and prev[5].get("layer") == args["layer"]
                    and prev[4] == start):
                experts = prev[5]["experts"] + [args["expert"]]
                kind = "copy" if cat == "demand" else "prefetch"
                merged = (track, f"{kind} L{args['layer']} x{len(experts)}", cat, prev[3], end,
                          {"layer": args["layer"], "experts": experts})
                out[prev[6]] = merged
                last[track] = merged + (prev[6],)
                continue
            kind = "copy" if cat == "demand" else "prefetch"
            ev = (track, f"{kind} L{args['layer']} x1", cat, start, end,
                  {"layer": args["layer"], "experts": [args["expert"]]})
            last[track] = ev + (len(out),)
            out.append(ev)
            continue
        out.append(ev)
    return out


def chrome_trace(processes: list[tuple[str, list]], meta: dict | None = None) -> dict:
    """``processes``: (name, events), events as (track, name, category, start ms, end ms, args)."""
    trace_events: list = []
    for pid, (pname, events) in enumerate(processes, start=1):
        trace_events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": pname}})
        trace_events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                             "args": {"sort_index": pid}})
        tids: dict[str, int] = {}
        for track in sorted({ev[0] for ev in events}, key=_sort_index):
            tids[track] = len(tids) + 1
            trace_events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tids[track],
                                 "args": {"name": track}})
            trace_events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tids[track],
                                 "args": {"sort_index": _sort_index(track)}})
        for track, name, cat, start, end, args in merge_copies(events):
            ts = round(start * 1e3, 3)
            te = round(end * 1e3, 3)
            trace_events.append({"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": round(te - ts, 3),
                                 "pid": pid, "tid": tids[track], "args": args})
    return {"traceEvents": trace_events, "displayTimeUnit": "ms", "otherData": dict(meta or {})}


def write_timeline(path, processes: list[tuple[str, list]], meta: dict | None = None) -> Path:
    """Write the Chrome trace-event JSON atomically (temporary file, then rename)."""
    from simmoe.atomicio import write_text_atomic

    text = json.dumps(chrome_trace(processes, meta), separators=(",", ":"))
    write_text_atomic(path, text + "\n")
    return Path(path)


def read_timeline(path) -> dict:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def overlaps(doc: dict, tolerance_us: float = 1e-6) -> list[tuple]:
    """Pairs of complete events on one (process, thread) that overlap in time (empty: none do)."""
    by_track: dict = {}
    for ev in doc.get("traceEvents", []):
        if ev.get("ph") == "X":
            by_track.setdefault((ev["pid"], ev["tid"]), []).append(ev)
    bad = []
    for key, evs in by_track.items():
        evs.sort(key=lambda e: (e["ts"], e["dur"]))
        for a, b in zip(evs, evs[1:], strict=False):
            if b["ts"] < a["ts"] + a["dur"] - tolerance_us:
                bad.append((key, a, b))
    return bad
