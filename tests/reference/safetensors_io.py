"""A minimal safetensors reader and writer that needs only numpy.

Layout: 8-byte little-endian header length N, N bytes of JSON, then the data region.
The JSON maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}
(offsets relative to the data region) and may hold "__metadata__", a str -> str map.

This writer lays the tensors out contiguously in the order given (no alignment
padding between tensors) and pads the header with spaces so N is a multiple of 8.
The reader accepts any layout whose offsets are in bounds and sized right, so it
also reads files from writers that align each tensor.

BF16 has no numpy dtype: it is stored as its uint16 bit pattern and the reader
returns BF16 tensors as float32 values (every BF16 value is exactly a float32).
"""

from __future__ import annotations

import json
import math
import os
import struct
from typing import Mapping, Union

import numpy as np

# safetensors dtype name -> numpy dtype of the stored bits (little-endian).
_NUMPY_DTYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "U8": np.dtype("u1"),
    "I8": np.dtype("i1"),
    "I16": np.dtype("<i2"),
    "U16": np.dtype("<u2"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),      # bit pattern; converted on read
    "I32": np.dtype("<i4"),
    "U32": np.dtype("<u4"),
    "F32": np.dtype("<f4"),
    "I64": np.dtype("<i8"),
    "U64": np.dtype("<u8"),
    "F64": np.dtype("<f8"),
    "F8_E4M3": np.dtype("u1"),    # returned as raw bytes: numpy has no FP8
    "F8_E5M2": np.dtype("u1"),
}

# numpy dtype -> safetensors name, for tensors passed without an explicit dtype.
_NAMES_BY_NUMPY: dict[np.dtype, str] = {
    np.dtype(np.bool_): "BOOL", np.dtype("u1"): "U8", np.dtype("i1"): "I8",
    np.dtype("i2"): "I16", np.dtype("u2"): "U16", np.dtype("f2"): "F16",
    np.dtype("i4"): "I32", np.dtype("u4"): "U32", np.dtype("f4"): "F32",
    np.dtype("i8"): "I64", np.dtype("u8"): "U64", np.dtype("f8"): "F64",
}

TensorSpec = Union[np.ndarray, tuple[str, np.ndarray]]


def f32_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """BF16 bit patterns of `values` (cast to float32 first), rounded to nearest even.

    Overflow rounds to +-inf as IEEE rounding does; NaN stays NaN (quiet, sign kept).
    """
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    # Adding 0x7FFF plus the lowest kept bit carries into the kept half exactly when
    # the dropped half is above the tie, or at the tie with an odd kept half.
    lsb = (bits >> np.uint32(16)) & np.uint32(1)
    rounded = ((bits + np.uint32(0x7FFF) + lsb) >> np.uint32(16)).astype(np.uint16)
    # Rounding a NaN could carry its payload into the exponent or clear it: keep it a NaN.
    nan = np.isnan(bits.view(np.float32))
    quiet = ((bits >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16)
    return np.where(nan, quiet, rounded)


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    """The float32 values of BF16 bit patterns (exact: BF16 is the top half of FP32)."""
    wide = np.ascontiguousarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)
    return wide.view(np.float32)


def _encode(name: str, spec: TensorSpec) -> tuple[str, list[int], bytes]:
    if isinstance(spec, tuple):
        dtype, array = spec
        array = np.asarray(array)
    else:
        array = np.asarray(spec)
        dtype = _NAMES_BY_NUMPY.get(array.dtype.newbyteorder("="))
        if dtype is None:
            raise ValueError(f"{name}: no safetensors dtype for numpy {array.dtype}")
    if dtype not in _NUMPY_DTYPES:
        raise ValueError(f"{name}: unknown safetensors dtype {dtype!r}")
    if dtype == "BF16" and array.dtype != np.uint16:
        stored = f32_to_bf16_bits(array)        # values: round them
    else:
        stored = array.astype(_NUMPY_DTYPES[dtype], copy=False)   # already bits
    return dtype, [int(d) for d in array.shape], np.ascontiguousarray(stored).tobytes()


def serialize(tensors: Mapping[str, TensorSpec],
              metadata: Mapping[str, str] | None = None) -> bytes:
    """The bytes of a safetensors file holding `tensors` in the order given.

    Each value is a numpy array (dtype taken from it) or (dtype name, array). For
    "BF16", a uint16 array is taken as bit patterns and anything else as values.
    """
    header: dict[str, object] = {}
    if metadata:
        for key, value in metadata.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ValueError("__metadata__ must map str to str")
        header["__metadata__"] = dict(metadata)
    chunks: list[bytes] = []
    offset = 0
    for name, spec in tensors.items():
        if name == "__metadata__":
            raise ValueError("a tensor may not be named __metadata__")
        dtype, shape, data = _encode(name, spec)
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def write(path: str | os.PathLike, tensors: Mapping[str, TensorSpec],
          metadata: Mapping[str, str] | None = None) -> None:
    """Writes `serialize(tensors, metadata)` to `path`."""
    data = serialize(tensors, metadata)
    with open(path, "wb") as file:
        file.write(data)


def deserialize(data: bytes) -> tuple[dict[str, tuple[str, np.ndarray]], dict[str, str]]:
    """Parses safetensors bytes into ({name: (dtype name, array)}, metadata).

    BF16 arrays come back as float32 values, F8 arrays as their raw uint8 bytes.
    Raises ValueError naming the fault for anything malformed.
    """
    if len(data) < 8:
        raise ValueError(f"file of {len(data)} bytes is shorter than the 8-byte header length")
    (length,) = struct.unpack_from("<Q", data, 0)
    if length > len(data) - 8:
        raise ValueError(f"header length {length} exceeds the {len(data) - 8} bytes after it")
    try:
        header = json.loads(data[8:8 + length].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"header is not UTF-8 JSON: {error}") from error
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object")
    region = memoryview(data)[8 + length:]

    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise ValueError("__metadata__ is not a str -> str map")

    tensors: dict[str, tuple[str, np.ndarray]] = {}
    for name, entry in header.items():
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise ValueError(f"{name}: entry needs exactly dtype, shape, data_offsets")
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if dtype not in _NUMPY_DTYPES:
            raise ValueError(f"{name}: unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(
                isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise ValueError(f"{name}: shape {shape!r} is not a list of non-negative ints")
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
                or not 0 <= offsets[0] <= offsets[1] <= len(region)):
            raise ValueError(f"{name}: data_offsets {offsets!r} outside the "
                             f"{len(region)}-byte data region")
        stored = _NUMPY_DTYPES[dtype]
        count = math.prod(shape)
        if offsets[1] - offsets[0] != count * stored.itemsize:
            raise ValueError(f"{name}: {offsets[1] - offsets[0]} bytes for shape {shape} "
                             f"of {dtype}")
        array = np.frombuffer(region, dtype=stored, count=count, offset=offsets[0])
        array = array.reshape(shape)
        array = bf16_bits_to_f32(array) if dtype == "BF16" else array.astype(
            stored.newbyteorder("="))           # a native-order, writable copy
        tensors[name] = (dtype, array.reshape(shape))
    return tensors, dict(metadata)


def read(path: str | os.PathLike) -> tuple[dict[str, tuple[str, np.ndarray]], dict[str, str]]:
    """Reads a safetensors file: ({name: (dtype name, array)}, metadata)."""
    with open(path, "rb") as file:
        return deserialize(file.read())
