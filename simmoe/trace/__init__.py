"""Traces: schema (in memory), file format (parquet), validation, statistics, import."""

from simmoe.trace.schema import (  # noqa: F401
    HWPROBE,
    IMPORTED,
    SCHEMA_VERSION,
    SYNTHETIC,
    ModelGeometry,
    PoolShape,
    Requests,
    Trace,
)
