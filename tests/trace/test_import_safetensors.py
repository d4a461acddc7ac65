"""The torch-free safetensors reader: agrees with the safetensors package, names every defect."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.errors import TraceError
from simmoe.trace.safetensors_reader import SafetensorsFile, load_safetensors

ROOT = Path(__file__).resolve().parents[2]
DTYPES = [
    "bool",
    "uint8",
    "int8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "float16",
    "float32",
    "float64",
]


@settings(max_examples=30)
@given(
    seed=st.integers(0, 2**32 - 1),
    specs=st.lists(
        st.tuples(st.sampled_from(DTYPES), st.lists(st.integers(0, 4), max_size=3)),
        min_size=1,
        max_size=4,
    ),
)
def test_reader_agrees_with_the_safetensors_package(tmp_path_factory, seed, specs):
    st_numpy = pytest.importorskip("safetensors.numpy")
    rng = np.random.default_rng(seed)
    arrays = {}
    for i, (dtype, shape) in enumerate(specs):
        raw = rng.integers(
            0, 256, size=int(np.prod(shape)) * np.dtype(dtype).itemsize, dtype=np.uint8
        )
        arr = raw.view(np.uint8).astype(bool) if dtype == "bool" else raw.view(dtype)
        arrays[f"t{i}"] = arr.reshape(shape)
    path = tmp_path_factory.mktemp("s") / "a.safetensors"
    st_numpy.save_file(arrays, str(path), metadata={"source": "test"})
    ours = load_safetensors(path)
    theirs = st_numpy.load_file(str(path))
    assert sorted(ours) == sorted(theirs)
    for name, arr in theirs.items():
        assert ours[name].dtype == arr.dtype and ours[name].shape == arr.shape
        assert ours[name].tobytes() == arr.tobytes()
    assert SafetensorsFile(path).metadata == {"source": "test"}


def _file(path, header, data=b"", length=None):
    raw = json.dumps(header).encode() if not isinstance(header, bytes) else header
    n = len(raw) if length is None else length
    path.write_bytes(struct.pack("<Q", n) + raw + data)
    return path


@pytest.mark.parametrize(
    "header,data,length,match",
    [
        (b"", b"", None, "not a safetensors file: 8 bytes|header is not UTF-8 JSON"),
        (
            {"a": {"dtype": "I8", "shape": [1], "data_offsets": [0, 1]}},
            b"\0",
            10**12,
            r"header length 1000000000000 does not fit the file",
        ),
        (b"\xff\xfe{", b"", None, "the header is not UTF-8 JSON"),
        ([1, 2], b"", None, "the header is not a JSON object"),
        (
            {"a": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 1]}},
            b"\0",
            None,
            "unknown dtype 'Q7'",
        ),
        (
            {"a": {"dtype": "I8", "shape": [-1], "data_offsets": [0, 1]}},
            b"\0",
            None,
            r"shape \[-1\] is not a list of sizes",
        ),
        (
            {"a": {"dtype": "I8", "shape": [4], "data_offsets": [0, 4]}},
            b"\0",
            None,
            r"data_offsets \[0, 4\] outside the 1-byte buffer",
        ),
        (
            {"a": {"dtype": "I16", "shape": [3], "data_offsets": [0, 4]}},
            b"\0" * 4,
            None,
            r"4 bytes for shape \(3,\) of I16",
        ),
        ({"a": "x"}, b"", None, "entry is not an object"),
        ({"__metadata__": [1]}, b"", None, "'__metadata__' is not an object"),
    ],
)
def test_malformed_files_are_named(tmp_path, header, data, length, match):
    path = _file(tmp_path / "x.safetensors", header, data, length)
    with pytest.raises(TraceError, match=match) as e:
        load_safetensors(path)
    assert e.value.path == str(path)


def test_short_file(tmp_path):
    (tmp_path / "x.safetensors").write_bytes(b"\x01\x02")
    with pytest.raises(TraceError, match="2 bytes, shorter than the 8-byte header length"):
        SafetensorsFile(tmp_path / "x.safetensors")


def test_import_needs_neither_torch_nor_the_safetensors_package(tmp_path):
    """Both are blocked in a fresh interpreter; the import of a .safetensors file still works."""
    tensors = {
        "experts": np.array([[[1, 2], [3, 4]], [[0, 5], [6, 7]]], np.int16),
        "request_id": np.array([4, 4], np.int64),
    }
    header, blobs, offset = {}, [], 0
    for name, arr in tensors.items():
        blob = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {
            "dtype": {"int16": "I16", "int64": "I64"}[arr.dtype.name],
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        blobs.append(blob)
        offset += len(blob)
    _file(tmp_path / "r.safetensors", header, b"".join(blobs))
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['safetensors'] = None\n"
        "from simmoe.trace.importer import import_routes\n"
        f"t, _ = import_routes({str(tmp_path / 'r.safetensors')!r})\n"
        "print(t.root_routes.tolist(), list(t.requests.request_id))\n"
        "assert 'torch' not in sys.modules or sys.modules['torch'] is None\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[[[1, 2], [3, 4]], [[0, 5], [6, 7]]] ['4']"
