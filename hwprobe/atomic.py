"""Atomic file writes for hwprobe: the simulator's implementation (``simmoe.atomicio``)."""

from simmoe.atomicio import write_atomic, write_text_atomic  # noqa: F401
