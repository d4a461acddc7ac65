"""`simmoe import-routes` on bad input: one line on stderr, exit 2, nothing written."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.cli import main
from simmoe.cli.import_routes import FORMAT_NAMES
from simmoe.errors import SimmoeError
from simmoe.trace import importer
from simmoe.trace.importer_detect import CONTAINER_NAMES

ROOT = Path(__file__).resolve().parents[2]
GOOD = [
    {"request_id": "a", "token_idx": t, "layer": layer, "experts": [1, 2]}
    for t in range(2)
    for layer in range(2)
]


def jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def refused(tmp_path, capsys, argv, *fragments):
    """Run the command: it must fail with one line naming the problem, leaving the folder alone."""
    before = sorted(p.name for p in tmp_path.iterdir())
    rc = main(["import-routes", *map(str, argv)])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2, err
    assert len(lines) == 1 and lines[0].startswith("simmoe import-routes: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no trace, no temp file
    return lines[0]


def test_huge_layer_is_refused_before_any_allocation(tmp_path, capsys):
    src = jsonl(tmp_path / "log.jsonl", [dict(GOOD[0], layer=10**9)])
    refused(
        tmp_path, capsys, [jsonl(tmp_path / "ok.jsonl", GOOD[:3]), "--out", tmp_path / "t.parquet"]
    )
    tracemalloc.start()  # after a first import, so that loading modules is not counted
    try:
        refused(
            tmp_path,
            capsys,
            [src, "--out", tmp_path / "t.parquet"],
            "log.jsonl, row 0, field 'layer'",
            "layer 1000000000 is beyond the limit of 1024 layers",
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (["--num-layers", "5000"], "--num-layers must be in [1, 1024], got 5000"),
        (["--num-experts", "70000"], "--num-experts must be in [1, 65536], got 70000"),
        (["--top-k", "0"], "--top-k must be in [1, 65536], got 0"),
    ],
)
def test_geometry_flags_are_bounded(tmp_path, capsys, argv, fragment):
    src = jsonl(tmp_path / "log.jsonl", GOOD)
    refused(tmp_path, capsys, [src, "--out", tmp_path / "t.parquet", *argv], fragment)


def test_huge_token_index_is_refused(tmp_path, capsys):
    src = jsonl(tmp_path / "log.jsonl", [dict(r, token_idx=r["token_idx"] * 10**12) for r in GOOD])
    refused(
        tmp_path,
        capsys,
        [src, "--out", tmp_path / "t.parquet"],
        "row 2, field 'token_idx': token index 1000000000000 is beyond the limit of 2147483647",
    )


@pytest.mark.parametrize("out", ["p.csv", "p", "p.parquet.tmp"])
def test_out_must_be_a_parquet_file_name(tmp_path, capsys, out):
    src = jsonl(tmp_path / "log.jsonl", GOOD)
    refused(
        tmp_path,
        capsys,
        [src, "--out", tmp_path / out],
        "a trace is a parquet file; give a name ending in .parquet",
    )


def test_out_folder_is_refused(tmp_path, capsys):
    src = jsonl(tmp_path / "log.jsonl", GOOD)
    (tmp_path / "traces.parquet").mkdir()
    refused(tmp_path, capsys, [src, "--out", tmp_path / "traces.parquet"], "is a folder")
    assert list((tmp_path / "traces.parquet").iterdir()) == []


def test_out_folder_through_the_real_command_line(tmp_path):
    src = jsonl(tmp_path / "log.jsonl", GOOD)
    (tmp_path / "d").mkdir()
    res = subprocess.run(
        [sys.executable, "-m", "simmoe", "import-routes", str(src), "--out", str(tmp_path / "d")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [
        f"simmoe import-routes: error: --out {tmp_path / 'd'} is a folder; give a trace file name "
        f"ending in .parquet"
    ]


def test_failed_import_leaves_an_existing_trace_alone(tmp_path, capsys):
    out = tmp_path / "t.parquet"
    out.write_bytes(b"previous trace")
    src = jsonl(tmp_path / "log.jsonl", GOOD[:3])  # a missing cell
    refused(tmp_path, capsys, [src, "--out", out], "cells have no routes")
    assert out.read_bytes() == b"previous trace"


@pytest.mark.parametrize(
    "name,content,fragment",
    [
        ("empty.csv", b"", "empty.csv: no records (the file is empty)"),
        ("blank.csv", b"\n\n  \n", "blank.csv: no records (only blank lines)"),
        ("header.csv", b"request_id,token_idx,layer,experts\n", "header.csv: no records"),
        ("empty.jsonl", b"", "empty.jsonl: no records (the file is empty)"),
        ("blank.jsonl", b"\n\n\n", "blank.jsonl: no records (only blank lines)"),
        (
            "bin.jsonl",
            b"\x1f\x8b\x08\x00\xa3\x91\xfe\x00" * 64,
            "bin.jsonl: line 1 is not UTF-8 JSON lines: byte 0x8b at column 2 is not UTF-8",
        ),
        (
            "ctrl.jsonl",
            bytes(range(10)) + b"\n",
            "ctrl.jsonl: line 1 is not UTF-8 JSON lines: Expecting value",
        ),
        (
            "late.jsonl",
            b'{"a": 1}\n\n{"a": "\xff"}\n',
            "late.jsonl: line 3 is not UTF-8 JSON lines: byte 0xff at column 8 is not UTF-8",
        ),
        (
            "text.jsonl",
            b'{"a": 1}\n{"a": 2}\nnot json\n',
            "text.jsonl: line 3 is not UTF-8 JSON lines: Expecting value at column 1",
        ),
        (
            "list.jsonl",
            b'{"a": 1}\n[1, 2]\n',
            "list.jsonl: line 2 is not UTF-8 JSON lines: a JSON list, not an object",
        ),
        (
            "bad.csv",
            b"request_id,token_idx,layer,experts\n\xff,0,0,1 2\n",
            "bad.csv: line 2 is not UTF-8 CSV: byte 0xff at column 1",
        ),
        ("gz.npz", b"\x1f\x8b\x08 not an npz", "gz.npz: cannot read as npz"),
        (
            "x.safetensors",
            b"\x10\x00\x00\x00\x00\x00\x00\x00{}",
            "x.safetensors: not a safetensors file",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and "." in v and len(v) < 20 else "",
)
def test_unreadable_input_is_named(tmp_path, capsys, name, content, fragment):
    (tmp_path / name).write_bytes(content)
    refused(tmp_path, capsys, [tmp_path / name, "--out", tmp_path / "t.parquet"], fragment)


def test_dense_input_errors_through_the_command_line(tmp_path, capsys):
    np.save(tmp_path / "r.npy", np.ones((3, 4), np.int16))
    refused(
        tmp_path,
        capsys,
        [tmp_path / "r.npy", "--out", tmp_path / "t.parquet"],
        "r.npy: routes of shape (3, 4): expected 3 dimensions [tokens, MoE layers, top-k]",
    )
    np.save(tmp_path / "r.npy", np.arange(24, dtype=np.int16).reshape(2, 3, 4))
    refused(
        tmp_path,
        capsys,
        [tmp_path / "r.npy", "--out", tmp_path / "t.parquet", "--num-experts", "16"],
        "r.npy, row 1: layer 1: expert id 19 outside [0, 16)",
    )
    refused(
        tmp_path,
        capsys,
        [tmp_path / "r.npy", "--out", tmp_path / "t.parquet", "--num-layers", "2"],
        "routes have 3 MoE layers, --num-layers says 2",
    )


def test_cli_format_names_match_the_importer():
    assert FORMAT_NAMES == importer.FORMAT_NAMES
    from simmoe.trace.importer_detect import TOOL_NAMES

    assert set(importer.FORMATS.values()) | set(TOOL_NAMES) == set(FORMAT_NAMES)


def test_dense_import_through_the_command_line(tmp_path, capsys):
    routes = np.array([[[3, 1]], [[-1, -1]], [[0, 2]], [[2, 3]]], np.int16)
    np.savez(
        tmp_path / "r.npz", experts=routes, phase=np.array(["prompt", "prompt", "output", "output"])
    )
    rc = main(
        [
            "import-routes",
            str(tmp_path / "r.npz"),
            "--out",
            str(tmp_path / "t.parquet"),
            "--prefill-col",
            "phase",
            "--num-experts",
            "4",
        ]
    )
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "imported 4 token rows from" in out and "1 requests, 2 tokens; L=1, N=4, top-2" in out
    assert err.strip() == (
        "1 (token, layer) cells of prompt tokens had no routes: left out of the prefill union"
    )
    from simmoe.trace.io import read_trace

    trace = read_trace(tmp_path / "t.parquet")
    assert trace.root_routes.tolist() == [[[0, 2]], [[2, 3]]]
    assert np.flatnonzero(trace.requests.prefill_union[0, 0]).tolist() == [1, 3]
    assert trace.meta["provenance"]["prefill_missing_cells"] == 1


def _valid_inputs(folder):
    """One small valid input per format."""
    from safetensors.numpy import save_file

    r = np.array([[[1, 2], [0, 3]], [[2, 3], [1, 0]], [[0, 1], [2, 3]]], np.int16)
    np.savez(
        folder / "v.npz",
        experts=r,
        request_id=np.array(["a", "a", "b"]),
        phase=np.array(["prompt", "output", "output"]),
    )
    save_file({"experts": r, "phase": np.array([1, 0, 0], np.uint8)}, str(folder / "v.safetensors"))
    np.save(folder / "v.npy", r)
    pq.write_table(
        pa.table({"experts": r.tolist(), "phase": [True, False, False]}), folder / "v.parquet"
    )
    recs = [
        {
            "request_id": "a",
            "token_idx": t,
            "layer": layer,
            "experts": r[t, layer].tolist(),
            "phase": "output",
        }
        for t in range(3)
        for layer in range(2)
    ]
    jsonl(folder / "v.jsonl", recs)
    (folder / "v.csv").write_text(
        "request_id,token_idx,layer,experts,phase\n"
        + "".join(f'a,{x["token_idx"]},{x["layer"]},"{x["experts"]}",output\n' for x in recs)
    )
    return {fmt: (folder / f"v.{fmt}").read_bytes() for fmt in CONTAINER_NAMES}


@settings(max_examples=60)
@given(
    fmt=st.sampled_from(CONTAINER_NAMES),
    edits=st.lists(
        st.tuples(
            st.floats(0, 1, exclude_max=True), st.integers(0, 2), st.binary(min_size=1, max_size=8)
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_damaged_files_fail_cleanly(tmp_path_factory, fmt, edits):
    """Bytes overwritten, cut out or inserted: an import or a SimmoeError, never another error."""
    folder = tmp_path_factory.mktemp("f")
    data = bytearray(_valid_inputs(folder)[fmt])
    for where, op, blob in edits:
        i = int(where * len(data))
        if op == 0:
            data[i : i + len(blob)] = blob
        elif op == 1:
            del data[i : i + len(blob)]
        else:
            data[i:i] = blob
    path = folder / f"m.{fmt}"
    path.write_bytes(bytes(data))
    for columns in (importer.RouteColumns(prefill="phase"), importer.RouteColumns()):
        with contextlib.suppress(SimmoeError):
            importer.import_routes(path, columns=columns, on_gap="drop")
