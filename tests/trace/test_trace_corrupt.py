"""Damaged trace files fed to `simmoe inspect` and `simmoe replay` (in-process, through ``simmoe.cli.main``).

Each example damages a valid file one way: truncation, bytes flipped in the
parquet footer or in the row groups (column chunks), a column dropped or
cast to another type, or the ``simmoe`` metadata JSON mangled (a byte
flipped, the text cut, a value replaced by one of another type, a key
deleted).  Both commands must then either fail with exit status 2 and
exactly one line on stderr (never a traceback: any other exception fails
the test), or succeed with exactly the output of the undamaged file: a
damaged file is never read into a different result.
"""

from __future__ import annotations

import contextlib
import io
import json
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from factories import random_trace
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tracefile_helpers import clone

from simmoe.cli import main
from simmoe.trace import io as trace_io
from simmoe.trace.io import write_trace

PROFILE = """format = 1
name = "corrupt-test"
description = "small timing for the damaged-file tests"
source = "test"
[copy]
copy_ms = 0.5
[compute]
forward_ms = 2.0
expert_ms = 0.1
[cost_model.cache]
b = [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8]
beta = 0.1
[cost_model.no_cache]
b = [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8]
beta = 0.2
"""


def _with_optional_columns(trace, seed):
    rng = np.random.default_rng(seed)
    t = clone(trace)
    t.node_target_prob = rng.random(t.num_nodes).astype(np.float32)
    t.draft_time_ms = rng.uniform(0.5, 3.0, (t.num_positions, t.pool_shape.depth)).astype(np.float32)
    t.requests.prefill_time_ms[0] = 12.5
    return t


TRACES = {
    # small ids (generic route decoding) with both optional columns
    "small": lambda: _with_optional_columns(random_trace(1, pool_nodes=6), 1),
    # k = 8 one-byte ids: the uint64 word path of the route codec
    "words": lambda: random_trace(6, N=128, k=8, L=4, pool_nodes=8, output_len=(4, 6)),
}


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


class Case:
    """One valid trace file, its bytes and table, and what both commands print for it."""

    def __init__(self, folder: Path, name: str):
        self.path = folder / f"{name}.parquet"
        self.profile = folder / "profile.toml"
        self.profile.write_text(PROFILE)
        write_trace(TRACES[name](), self.path)
        self.data = self.path.read_bytes()
        self.table = pq.read_table(self.path)
        self.header = json.loads(self.table.schema.metadata[trace_io.METADATA_KEY])
        self.footer_len = struct.unpack("<I", self.data[-8:-4])[0]
        self.expected = {cmd: self.outputs(cmd) for cmd in ("inspect", "replay")}
        for rc, _, _ in self.expected.values():
            assert rc == 0

    def argv(self, cmd: str) -> list[str]:
        if cmd == "inspect":
            return ["inspect", str(self.path), "--json", "--no-progress"]
        return ["replay", str(self.path), "--hardware", str(self.profile), "--selectors", "eagle3,specfit",
                "--slots", "4", "--selector-ms", "0", "--workers", "1", "--no-progress", "--json", "-"]

    def outputs(self, cmd: str) -> tuple[int, object, str]:
        rc, out, err = run(self.argv(cmd))
        return rc, (json.loads(out) if rc == 0 else None), err

    def check(self, damaged: bytes) -> None:
        """Write ``damaged`` in place of the file; both commands fail cleanly or print the original output."""
        self.path.write_bytes(damaged)
        try:
            for cmd in ("inspect", "replay"):
                rc, result, err = self.outputs(cmd)
                if rc == 0:
                    assert result == self.expected[cmd][1], f"{cmd}: a damaged file read into another result"
                else:
                    assert rc == 2, (cmd, rc, err)
                    lines = err.strip("\n").split("\n")
                    assert len(lines) == 1, (cmd, err)
                    assert lines[0].startswith(f"simmoe {cmd}: error: "), (cmd, err)
                    assert "Traceback" not in err
        finally:
            self.path.write_bytes(self.data)


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    return {name: Case(tmp_path_factory.mktemp(name), name) for name in TRACES}


common = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
names = st.sampled_from(sorted(TRACES))


def table_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


@settings(common, max_examples=15)
@given(name=names, data=st.data())
def test_truncated_file(cases, name, data):
    case = cases[name]
    keep = data.draw(st.integers(0, len(case.data) - 1), label="kept bytes")
    case.check(case.data[:keep])


def flipped(data: bytes, lo: int, hi: int, draw) -> bytes:
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 3), label="flips")):
        at = draw(st.integers(lo, hi - 1), label="offset")
        out[at] ^= draw(st.integers(1, 255), label="xor")
    return bytes(out)


@common
@given(name=names, data=st.data())
def test_bytes_flipped_in_the_footer(cases, name, data):
    case = cases[name]
    lo = len(case.data) - 8 - case.footer_len      # thrift FileMetaData, its length and the magic
    case.check(flipped(case.data, lo, len(case.data), data.draw))


@settings(common, max_examples=30)
@given(name=names, data=st.data())
def test_bytes_flipped_in_the_row_groups(cases, name, data):
    case = cases[name]
    hi = len(case.data) - 8 - case.footer_len      # pages of every column chunk, headers included
    case.check(flipped(case.data, 4, hi, data.draw))


CASTS = {
    "int": [pa.int64(), pa.int16(), pa.float64(), pa.string()],
    "list": [pa.list_(pa.int64()), pa.list_(pa.float64()), pa.large_list(pa.int8()), pa.string()],
    "binary": [pa.string(), pa.int64()],
}


def _cast_column(col: pa.ChunkedArray, to: pa.DataType) -> pa.ChunkedArray:
    try:
        return col.cast(to, safe=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return pa.chunked_array([pa.array([None] * len(col), type=to)], type=to)


@common
@given(name=names, data=st.data())
def test_column_dropped_or_retyped(cases, name, data):
    case = cases[name]
    table = case.table
    column = data.draw(st.sampled_from(table.column_names), label="column")
    if data.draw(st.booleans(), label="drop"):
        table = table.drop_columns([column])
    else:
        t = table.schema.field(column).type
        kind = "list" if pa.types.is_large_list(t) else "binary" if pa.types.is_large_binary(t) else "int"
        to = data.draw(st.sampled_from(CASTS[kind]), label="type")
        i = table.column_names.index(column)
        table = table.set_column(i, pa.field(column, to), _cast_column(table.column(column), to))
    case.check(table_bytes(table.replace_schema_metadata(case.table.schema.metadata)))


def _paths(x, prefix=()):
    """Every (path to a) value in a JSON document."""
    yield prefix
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(x, list):
        for i, v in enumerate(x[:3]):
            yield from _paths(v, (*prefix, i))


def _set(doc, path, value=None, delete=False):
    *parents, last = path
    for p in parents:
        doc = doc[p]
    if delete:
        del doc[last]
    else:
        doc[last] = value


OTHER_VALUES = [None, True, -1, 0, 1.5, 48.7, "48", "", [], {}, 10**20, [1, 2]]


@settings(common, max_examples=30)
@given(name=names, data=st.data())
def test_metadata_json_mangled(cases, name, data):
    case = cases[name]
    text = json.dumps(case.header).encode()
    how = data.draw(st.sampled_from(["flip", "cut", "replace", "delete"]), label="how")
    if how == "flip":
        blob = flipped(text, 0, len(text), data.draw)
    elif how == "cut":
        blob = text[:data.draw(st.integers(0, len(text) - 1), label="kept")]
    else:
        header = json.loads(text)
        paths = [p for p in _paths(header) if p]
        if how == "delete":
            paths = [p for p in paths if isinstance(p[-1], str)]
        path = data.draw(st.sampled_from(paths), label="path")
        value = data.draw(st.sampled_from(OTHER_VALUES), label="value")
        _set(header, path, value, delete=how == "delete")
        blob = json.dumps(header).encode()
    case.check(table_bytes(case.table.replace_schema_metadata({trace_io.METADATA_KEY: blob})))


def test_the_checks_above_can_fail(cases):
    # A damage that still decodes (one node's agreement flipped in a data page) is caught by the
    # checksum; without it, the file reads into another result, which check() would refuse.
    case = cases["small"]
    table = case.table
    col = table.column("node_agree").combine_chunks()
    agree = col.values.to_numpy(zero_copy_only=False).copy()
    agree[0] = not agree[0]
    flipped_col = pa.LargeListArray.from_arrays(col.offsets, pa.array(agree))
    damaged = table.set_column(table.column_names.index("node_agree"), "node_agree", flipped_col)
    blob = table_bytes(damaged.replace_schema_metadata(table.schema.metadata))
    case.path.write_bytes(blob)
    try:
        rc, _, err = case.outputs("inspect")
        assert rc == 2 and "damaged" in err and "content_sha256" in err
        header = dict(case.header)
        del header["content_sha256"]       # as a file written before the checksum: reads, differently
        legacy = damaged.replace_schema_metadata({trace_io.METADATA_KEY: json.dumps(header).encode()})
        case.path.write_bytes(table_bytes(legacy))
        rc, result, _ = case.outputs("inspect")
        assert rc == 0 and result != case.expected["inspect"][1]
    finally:
        case.path.write_bytes(case.data)
