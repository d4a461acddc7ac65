"""Helpers for the trace-file tests: copies of traces, and writing files that skip validation."""

from __future__ import annotations

import copy
import dataclasses
import json

import numpy as np
import pyarrow.parquet as pq

from simmoe.trace import io as trace_io
from simmoe.trace.schema import Trace


def clone(trace: Trace) -> Trace:
    """A deep copy whose arrays can be mutated freely."""
    return copy.deepcopy(trace)


def write_unchecked(trace: Trace, path) -> None:
    """Write a trace file without validating it first (to craft bad files)."""
    pq.write_table(trace_io._to_table(trace, str(path)), path)


def write_table(table, path, *, header_edit=None) -> None:
    """Write an arrow table, optionally editing the ``simmoe`` JSON header first."""
    if header_edit is not None:
        header = json.loads(table.schema.metadata[trace_io.METADATA_KEY])
        header_edit(header)
        table = table.replace_schema_metadata({trace_io.METADATA_KEY: json.dumps(header).encode()})
    pq.write_table(table, path)


def assert_traces_equal(a: Trace, b: Trace) -> None:
    assert a.meta == b.meta
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name == "path":
            continue
        if x is None or y is None:
            assert x is None and y is None, f.name
        elif isinstance(x, np.ndarray):
            assert x.dtype == y.dtype, (f.name, x.dtype, y.dtype)
            assert x.shape == y.shape, (f.name, x.shape, y.shape)
            assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), f.name
    for f in dataclasses.fields(a.requests):
        x, y = getattr(a.requests, f.name), getattr(b.requests, f.name)
        assert x.shape == y.shape, f.name
        if x.dtype.kind == "f":
            assert np.array_equal(x, y, equal_nan=True), f.name
        else:
            assert x.dtype == y.dtype and np.array_equal(x, y), f.name
