"""A simulated CUDA device for CPU tests of the offload backend's stream logic.

``install(monkeypatch, device)`` replaces the ``torch.cuda`` calls the backend
makes (streams, events, ``_sleep``, ``synchronize``, ``cudart``) by fakes
that keep a clock per stream: ``_sleep(n)`` advances the current stream by
n, ``wait_event`` moves a stream to the event's time, ``record`` stamps an
event with its stream's time.  Tensors stay on the CPU.  Every stream and
event belongs to a device, and an event recorded on, or waited for by, a
stream of another device than the one under test is an error: the
backend's "current device" mistakes show up even on a machine without GPUs.
"""

from __future__ import annotations

import contextlib

import torch


class FakeStream:
    def __init__(self, device, name="stream"):
        self.device = torch.device(device)
        self.t = 0.0
        self.name = name
        self.waits: list = []

    def wait_event(self, ev):
        assert isinstance(ev, FakeEvent) and ev.t is not None, "waiting for an event never recorded"
        assert ev.device == self.device, (
            f"stream of {self.device} waits for an event of {ev.device}"
        )
        self.waits.append(ev)
        self.t = max(self.t, ev.t)


class CopyStream(FakeStream):
    """What ``torch.cuda.Stream(device=...)`` makes (a class: transformers annotates with it)."""

    def __init__(self, device=None, **_):
        super().__init__(device, "copy")


class FakeEvent:
    def __init__(self, enable_timing=False, **_):
        self.t = None
        self.device = None

    def record(self, stream=None):
        assert isinstance(stream, FakeStream), (
            "event recorded on the current stream of the current device"
        )
        self.t, self.device = stream.t, stream.device

    def elapsed_time(self, end):
        return float(end.t - self.t)


class FakeCuda:
    """The simulated device: its compute stream, the streams made, the host memory registered."""

    def __init__(self, device):
        self.device = torch.device(device)
        self.compute = FakeStream(self.device, "compute")
        self.default_other = FakeStream(torch.device("cuda", 0), "cuda:0 compute")
        self.current: FakeStream | None = None
        self.registered: list[tuple[int, int]] = []

    def current_stream(self, device=None):
        if self.current is not None and (
            device is None or torch.device(device) == self.current.device
        ):
            return self.current
        if device is None or torch.device(device) != self.device:
            return self.default_other
        return self.compute

    @contextlib.contextmanager
    def stream(self, s):
        prev, self.current = self.current, s
        try:
            yield
        finally:
            self.current = prev

    def sleep(self, n):
        self.current_stream(self.device if self.current is None else self.current.device).t += n

    def cudart(self):
        fake = self

        class Rt:
            @staticmethod
            def cudaHostRegister(ptr, size, flags):
                fake.registered.append((ptr, size))
                return 0

            @staticmethod
            def cudaHostUnregister(ptr):
                return 0

        return Rt()


def install(monkeypatch, device="cuda:1") -> FakeCuda:
    fake = FakeCuda(device)
    monkeypatch.setattr(torch.cuda, "current_stream", fake.current_stream)
    monkeypatch.setattr(torch.cuda, "Stream", CopyStream)
    monkeypatch.setattr(torch.cuda, "stream", fake.stream)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "_sleep", fake.sleep)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "cudart", fake.cudart)
    return fake
