"""``hwprobe live --prefetch draft`` and ``--timeline``: prefetch copies and the measured timeline.

Prefetch (docs/prefetch.md).  After the selector has chosen how deep to draft,
the predicted experts of the root and of the drafted levels' nodes, most
probable first, are copied into the offload backend's cache
(:meth:`hwprobe.offload.OffloadBackend.prefetch`) before the verification
forward.  Which copies: :func:`simmoe.replay.prefetch.plan_draft_prefetch` on
the backend's own cache state, the rule the simulator applies.  On the CPU a
copy is a memcpy on the compute thread (the copy path the backend already
uses for its misses), so the copies cannot overlap drafting: they are timed
as one block and charged to drafting, exactly as the simulator does for a
profile whose copies do not overlap compute (``overlap = false``).  On a GPU
the same copies run on the backend's copy stream; the live loop still makes
them after selection (its routes come from the atlas forward, which follows
drafting), so what it measures is the CPU model's, not the overlapped one.

Timeline.  :class:`LiveTimeline` collects wall-clock events of every cycle —
drafting levels and commit on ``compute``, selection on ``host``, each expert
layer's section of the verification forward on ``compute``, every copy
(demand or prefetch) on ``copy 0`` — and writes them with
:func:`simmoe.replay.timeline.write_timeline`, the format of ``simmoe replay
--timeline``.  The forward's non-expert work (attention, router) is the gap
between expert sections.
"""

from __future__ import annotations

import time


def live_prefetch(backend, settings, view, drafted: int, sync, now) -> dict:
    """Copy ``draft`` prefetch's experts for this cycle; returns its time (on ``now``) and counts.

    ``view``: the selector's :class:`~simmoe.replay.selectors.PoolView`
    (predicted routes); ``drafted``: the levels the selector drafted.
    """
    from simmoe.replay.prefetch_policies import plan_draft_prefetch

    capacity = settings.slots if settings.slots > 0 else backend.layers[0].staging
    jobs = plan_draft_prefetch(backend.available(), backend.unused_prefetches(), capacity, view.root_routes,
                               view.node_routes, view.levels, view.p, drafted)
    sync()
    t0 = now()
    done = backend.prefetch(jobs)
    sync()
    return {"prefetch_ms": (now() - t0) * 1e3, "prefetched": done, "planned": len(jobs)}


class LiveTimeline:
    """Wall-clock events of a live run, in ms from its start (see the module docstring)."""

    def __init__(self, device=None):
        self.t0 = time.perf_counter()
        self.events: list = []
        self.ref = None
        if device is not None and getattr(device, "type", "cpu") == "cuda":
            import torch

            self.ref = torch.cuda.Event(enable_timing=True)
            self.ref.record(torch.cuda.current_stream(device))
            self.ref_wall = time.perf_counter()

    def now(self) -> float:
        return (time.perf_counter() - self.t0) * 1e3

    def add(self, track: str, name: str, cat: str, start: float, end: float, args: dict | None = None) -> None:
        self.events.append((track, name, cat, float(start), float(end), dict(args or {})))

    def _abs(self, stamp) -> float:
        if isinstance(stamp, float):
            return (stamp - self.t0) * 1e3
        # a CUDA event: its time relative to the reference event recorded at the start
        return (self.ref_wall - self.t0) * 1e3 + float(self.ref.elapsed_time(stamp))

    def intervals(self, backend):
        """The backend's intervals since its last collect (call before ``collect``)."""
        return [(i, list(layer.counters.copy_intervals), list(layer.counters.prefetch_intervals),
                 list(layer.counters.section_intervals)) for i, layer in enumerate(backend.layers)]

    def add_intervals(self, grabbed) -> None:
        """Expert sections and copies (after the backend has synchronised)."""
        for i, copies, prefetches, sections in grabbed:
            for iv in sections:
                self.add("compute", f"experts L{i}", "experts", self._abs(iv.start), self._abs(iv.end), {"layer": i})
            for iv in copies:
                self.add("copy 0", f"copy L{i}", "demand", self._abs(iv.start), self._abs(iv.end),
                         {"layer": i, "expert": -1})
            for iv in prefetches:
                self.add("copy 0", f"prefetch L{i}", "prefetch", self._abs(iv.start), self._abs(iv.end),
                         {"layer": i, "expert": -1})

    def write(self, path, label: str, meta: dict) -> None:
        from simmoe.replay.timeline import write_timeline

        write_timeline(path, [(label, self.events)],
                       {"source": "hwprobe live (measured, wall clock)", "time_unit": "ms from the run's start",
                        **meta})
