"""Read ``.safetensors`` files into numpy arrays without torch or the ``safetensors`` package.

The format: 8 bytes, little-endian unsigned length ``n`` of the header; ``n``
bytes of UTF-8 JSON, an object mapping each tensor name to ``{"dtype",
"shape", "data_offsets": [begin, end]}`` (offsets into the byte buffer that
follows the header) plus an optional ``"__metadata__"`` object of strings;
then the buffer, every tensor little-endian and C-ordered.

Tensors are read only when asked for (``SafetensorsFile.array``), each with
one ``np.fromfile`` call.  Types numpy has no dtype for (``BF16``, the
``F8_*`` floats) are listed with their names but cannot be read as arrays.
Every defect of the file raises :class:`~simmoe.errors.TraceError` naming it.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass

import numpy as np

from simmoe.errors import TraceError

# safetensors dtype name -> numpy dtype (little-endian); None: no numpy equivalent.
DTYPES: dict[str, np.dtype | None] = {
    "BOOL": np.dtype("?"),
    "U8": np.dtype("u1"),
    "I8": np.dtype("i1"),
    "U16": np.dtype("<u2"),
    "I16": np.dtype("<i2"),
    "U32": np.dtype("<u4"),
    "I32": np.dtype("<i4"),
    "U64": np.dtype("<u8"),
    "I64": np.dtype("<i8"),
    "F16": np.dtype("<f2"),
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
    "BF16": None,
    "F8_E4M3": None,
    "F8_E5M2": None,
    "F8_E8M0": None,
    "F4": None,
    "F6_E2M3": None,
    "F6_E3M2": None,
    "C64": np.dtype("<c8"),
}
ITEM_BITS = {
    "BF16": 16,
    "F8_E4M3": 8,
    "F8_E5M2": 8,
    "F8_E8M0": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}
MAX_HEADER = 100 << 20  # the format's own limit on the header (100 MB)


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str  # the safetensors name, e.g. "I16"
    shape: tuple[int, ...]
    offset: int  # absolute byte offset in the file
    nbytes: int


class SafetensorsFile:
    """The header of a safetensors file; arrays are read on demand."""

    def __init__(self, path):
        self.path = str(path)
        self.tensors: dict[str, TensorInfo] = {}
        self.metadata: dict[str, str] = {}
        self._parse()

    def _fail(self, what: str) -> TraceError:
        return TraceError(f"not a safetensors file: {what}", path=self.path)

    def _parse(self) -> None:
        size = os.path.getsize(self.path)
        with open(self.path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise self._fail(f"{size} bytes, shorter than the 8-byte header length")
            (n,) = struct.unpack("<Q", head)
            if n > min(MAX_HEADER, size - 8):
                raise self._fail(f"header length {n} does not fit the file ({size} bytes)")
            raw = fh.read(n)
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise self._fail(f"the header is not UTF-8 JSON ({exc})") from None
        if not isinstance(header, dict):
            raise self._fail("the header is not a JSON object")
        base, buffer = 8 + n, size - 8 - n
        meta = header.pop("__metadata__", None) or {}
        if not isinstance(meta, dict):
            raise self._fail("'__metadata__' is not an object")
        self.metadata = {str(k): str(v) for k, v in meta.items()}
        for name, info in header.items():
            self.tensors[name] = self._tensor(name, info, base, buffer)

    def _tensor(self, name: str, info, base: int, buffer: int) -> TensorInfo:
        if not isinstance(info, dict):
            raise self._fail(f"tensor {name!r}: entry is not an object")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if dtype not in DTYPES:
            raise self._fail(f"tensor {name!r}: unknown dtype {dtype!r}")
        if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
            raise self._fail(f"tensor {name!r}: shape {shape!r} is not a list of sizes")
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(isinstance(o, int) for o in offsets)
            and 0 <= offsets[0] <= offsets[1] <= buffer
        ):
            raise self._fail(
                f"tensor {name!r}: data_offsets {offsets!r} outside the {buffer}-byte buffer"
            )
        np_dtype = DTYPES[dtype]
        bits = np_dtype.itemsize * 8 if np_dtype is not None else ITEM_BITS[dtype]
        nbytes = offsets[1] - offsets[0]
        if math.prod(shape) * bits != nbytes * 8:
            raise self._fail(f"tensor {name!r}: {nbytes} bytes for shape {tuple(shape)} of {dtype}")
        return TensorInfo(name, dtype, tuple(shape), base + offsets[0], nbytes)

    def array(self, name: str) -> np.ndarray:
        """The tensor as a numpy array (read from disk now)."""
        info = self.tensors[name]
        np_dtype = DTYPES[info.dtype]
        if np_dtype is None:
            raise TraceError(
                f"tensor {name!r} has dtype {info.dtype}, which numpy cannot hold",
                path=self.path,
                field=name,
            )
        count = math.prod(info.shape)
        if count == 0:
            return np.zeros(info.shape, dtype=np_dtype)
        return np.fromfile(self.path, dtype=np_dtype, count=count, offset=info.offset).reshape(
            info.shape
        )


def load_safetensors(path) -> dict[str, np.ndarray]:
    """Every tensor of the file, as numpy arrays (like ``safetensors.numpy.load_file``)."""
    f = SafetensorsFile(path)
    return {name: f.array(name) for name in f.tensors}
