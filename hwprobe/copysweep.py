"""Host-to-device copy sweep: sizes around one expert, pinned and pageable host memory,
1..4 copies in flight (each on its own stream), reported as GB/s (1e9 B/s).

Without a CUDA device there is no link to measure: the sweep then times a
host memcpy between two host buffers as a stand-in, and every row says so
(``kind = "host memcpy stand-in (no device)"``).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

H2D = "host-to-device"
STAND_IN = "host memcpy stand-in (no device)"


@dataclass
class CopyRow:
    kind: str
    bytes: int
    pinned: bool
    in_flight: int
    median_ms: float      # one round of `in_flight` copies
    gbps: float           # in_flight * bytes / median round time

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _round_ms(srcs, dsts, device, streams) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        for s, d, st in zip(srcs, dsts, streams):
            with torch.cuda.stream(st):
                d.copy_(s, non_blocking=True)
        torch.cuda.synchronize(device)
    else:
        t0 = time.perf_counter()
        for s, d in zip(srcs, dsts):
            d.copy_(s)
    return (time.perf_counter() - t0) * 1e3


def sweep(device: torch.device, expert_bytes: int, *, factors=(0.25, 0.5, 1.0, 2.0, 4.0),
          in_flight=(1, 2, 3, 4), repeats: int = 10, warmup: int = 2) -> list[CopyRow]:
    """Median over ``repeats`` rounds for every (size, pinned, in_flight).  Cost: the copies themselves."""
    cuda = device.type == "cuda"
    kind = H2D if cuda else STAND_IN
    rows = []
    for f in factors:
        n = max(1, int(expert_bytes * f))
        for pinned in ((True, False) if cuda else (False,)):
            srcs_all = [torch.empty(n, dtype=torch.uint8, pin_memory=pinned) for _ in range(max(in_flight))]
            for s in srcs_all:
                s.fill_(1)
            dsts_all = [torch.empty(n, dtype=torch.uint8, device=device) for _ in range(max(in_flight))]
            for c in in_flight:
                streams = [torch.cuda.Stream(device) for _ in range(c)] if cuda else [None] * c
                for _ in range(warmup):
                    _round_ms(srcs_all[:c], dsts_all[:c], device, streams)
                times = [_round_ms(srcs_all[:c], dsts_all[:c], device, streams) for _ in range(repeats)]
                med = statistics.median(times)
                rows.append(CopyRow(kind, n, pinned, c, med, c * n / (med * 1e-3) / 1e9))
            del srcs_all, dsts_all
    return rows


def link_gbps(rows: list[CopyRow]) -> float:
    """The link's measured bandwidth: the best median GB/s of the pinned (or stand-in) rows."""
    good = [r.gbps for r in rows if r.pinned or r.kind == STAND_IN]
    return max(good) if good else 0.0
