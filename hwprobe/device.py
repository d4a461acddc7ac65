"""Device selection, synchronisation and timers that work on CUDA and on the CPU.

On CUDA, intervals are measured with CUDA events recorded on a stream (read
after a synchronisation); on the CPU, with the wall clock, and the caller
is told which one it got (``Timer.kind``).
"""

from __future__ import annotations

import os
import time

import torch


def pick_device(name: str | None = None) -> torch.device:
    """``cuda`` when available (or asked for), else ``cpu``; an unusable request is an error."""
    from hwprobe.cli import HwprobeError

    if name in (None, "", "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise HwprobeError(f"unsupported device {name!r}: use auto, cuda, cuda:N or cpu") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise HwprobeError(f"device {name!r} requested but torch sees no CUDA device "
                           f"(torch {torch.__version__}); use --device cpu")
    if dev.type not in ("cuda", "cpu"):
        raise HwprobeError(f"unsupported device {name!r}: use cuda, cuda:N or cpu")
    if dev.type == "cuda":
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise HwprobeError(f"device {name!r} requested but torch sees {count} CUDA device(s)")
        dev = torch.device("cuda", dev.index if dev.index is not None else torch.cuda.current_device())
        torch.cuda.set_device(dev)      # kernels, events and allocations without an explicit device go here too
        fraction = os.environ.get("HWPROBE_MEMORY_FRACTION")
        if fraction:                    # the self-check's out-of-memory probe runs a command with little memory
            torch.cuda.set_per_process_memory_fraction(float(fraction), dev)
    return dev


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def describe(device: torch.device) -> str:
    """One-line human description of the device, used in provenance."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return f"{props.name} ({props.total_memory / 2**30:.1f} GiB), torch {torch.__version__}"
    import platform

    return f"cpu ({platform.processor() or platform.machine()}), torch {torch.__version__}"


class Interval:
    """A measured interval: CUDA event pair, or two wall-clock stamps."""

    __slots__ = ("start", "end", "_ms")

    def __init__(self, start, end=None):
        self.start, self.end, self._ms = start, end, None

    def ms(self) -> float:
        if self._ms is None:
            if isinstance(self.start, float):
                self._ms = (self.end - self.start) * 1e3
            else:
                self._ms = float(self.start.elapsed_time(self.end))
        return self._ms


class Timer:
    """Makes :class:`Interval` objects on a device; ``kind`` is ``cuda-events`` or ``wall-clock``."""

    def __init__(self, device: torch.device):
        self.device = device
        self.kind = "cuda-events" if device.type == "cuda" else "wall-clock"

    def _stream(self, stream):
        """``stream``, or the current stream of *this* device (not of the current device: cuda:N ≠ cuda:0)."""
        return stream if stream is not None else torch.cuda.current_stream(self.device)

    def start(self, stream=None) -> Interval:
        if self.device.type == "cuda":
            ev = torch.cuda.Event(enable_timing=True)
            ev.record(self._stream(stream))
            return Interval(ev)
        return Interval(time.perf_counter())

    def stop(self, interval: Interval, stream=None) -> Interval:
        if self.device.type == "cuda":
            ev = torch.cuda.Event(enable_timing=True)
            ev.record(self._stream(stream))
            interval.end = ev
        else:
            interval.end = time.perf_counter()
        return interval


def wall_ms(fn, device: torch.device) -> tuple[object, float]:
    """Run ``fn()`` and return (result, elapsed ms), synchronising the device before and after."""
    synchronize(device)
    t0 = time.perf_counter()
    out = fn()
    synchronize(device)
    return out, (time.perf_counter() - t0) * 1e3
