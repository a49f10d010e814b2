"""late_interaction_scores: MaxSim (as ColBERT) over token vectors, computed by libuform.

Token rows cross to C in place: a RowsTape straight from `Encoded.tokens` passes its
arena pointer, a float32 array its own memory (any stride between rows); only the
offsets may be converted to size_t.
"""
from __future__ import annotations

from typing import Any, Tuple, Union

import numpy as np

from ._buffers import _DTYPES, ArenaBuffer, RowsTape
from ._enums import Scalar
from ._errors import InvalidArgumentError
from ._executor import Executor
from ._model import _executor_pointer
from ._native import check, ffi, lib

#: A side of the scorer: a RowsTape (item i owns rows offsets[i]:offsets[i+1]), or a pair
#: (rows, offsets) of a 2-D float32 array (or ArenaBuffer) and count + 1 row boundaries.
TokenRows = Union[RowsTape, Tuple[Any, Any]]

#: The scalars the scorer reads (B1 rows are bits: they carry no dot product it computes).
_SCORED = (Scalar.F32, Scalar.BF16, Scalar.F16, Scalar.E4M3, Scalar.E5M2, Scalar.I8)


class _Side:
    """A uform_token_rows_t over borrowed memory, with what keeps that memory alive."""

    def __init__(self, rows: np.ndarray, scalar: Scalar, offsets: np.ndarray) -> None:
        self.struct = ffi.new("uform_token_rows_t *")
        count = len(offsets) - 1
        width = rows.shape[1]
        # The address of row 0: rows may be strided, which ffi.from_buffer refuses.
        address = rows.__array_interface__["data"][0] if rows.size else 0
        self.struct.data = ffi.cast("const void *", address)
        self._offsets = ffi.from_buffer("size_t[]", offsets)
        self.struct.offsets = self._offsets
        self.struct.count = count
        self.struct.width = width
        itemsize = rows.dtype.itemsize
        self.struct.row_bytes = rows.strides[0] if rows.shape[0] > 1 else width * itemsize
        self.struct.scalar = int(scalar)
        self._keep = (rows, offsets)


def _offsets(value: Any, rows: int, name: str) -> np.ndarray:
    """count + 1 row boundaries as a contiguous size_t array, each within [0, rows]."""
    if isinstance(value, (str, bytes, bytearray)):
        raise InvalidArgumentError(f"{name}: offsets must be integers, got {type(value).__name__}")
    try:
        array = np.asarray(value)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{name}: offsets must be a sequence of integers") from None
    if array.ndim != 1 or array.size == 0:
        raise InvalidArgumentError(
            f"{name}: offsets must be one-dimensional with count + 1 values, got shape {array.shape}")
    if array.dtype.kind not in "iu":
        raise InvalidArgumentError(f"{name}: offsets must be integers, got dtype {array.dtype}")
    if array.dtype.kind == "i" and int(array.min()) < 0:
        raise InvalidArgumentError(f"{name}: offsets must not be negative, got {int(array.min())}")
    # The C side checks that offsets never decrease; it cannot see how many rows exist.
    if int(array[-1]) > rows:
        raise InvalidArgumentError(
            f"{name}: offsets end at row {int(array[-1])}, past the {rows} rows given")
    return np.ascontiguousarray(array, dtype=np.uintp)


def _rows(value: Any, name: str) -> tuple[np.ndarray, Scalar]:
    """A 2-D array of rows and the scalar its values are stored in."""
    if isinstance(value, ArenaBuffer):
        scalar = Scalar(value.scalar)
        if scalar not in _SCORED:
            raise InvalidArgumentError(
                f"{name}: {scalar.name} token rows cannot be scored; encode with "
                "outputs_scalar F32, BF16, F16, E4M3, E5M2 or I8")
        if value.dtype != _DTYPES[scalar]:
            raise InvalidArgumentError(
                f"{name}: rows of dtype {value.dtype} do not hold {scalar.name} scalars")
    elif isinstance(value, np.ndarray):
        if value.dtype != np.float32:
            raise InvalidArgumentError(
                f"{name}: rows must be float32 (or a uform.ArenaBuffer), got dtype {value.dtype}")
        scalar = Scalar.F32
    else:
        raise InvalidArgumentError(
            f"{name}: rows must be a numpy float32 array or a uform.ArenaBuffer, "
            f"got {type(value).__name__}")
    if value.ndim != 2:
        raise InvalidArgumentError(f"{name}: rows must be two-dimensional, got shape {value.shape}")
    rows, width = value.shape
    if width == 0:
        raise InvalidArgumentError(f"{name}: rows must hold at least one value each")
    # numpy gives any stride to an axis of length 0 or 1: only real steps matter.
    itemsize = value.dtype.itemsize
    if rows and ((width > 1 and value.strides[1] != itemsize)
                 or (rows > 1 and value.strides[0] < width * itemsize)):
        raise InvalidArgumentError(
            f"{name}: each row must be contiguous and rows must not overlap "
            f"(strides {value.strides}); pass numpy.ascontiguousarray(rows)")
    return value, scalar


def _side(value: Any, name: str) -> _Side:
    if isinstance(value, RowsTape):
        if value.offsets is None:
            raise InvalidArgumentError(f"{name}: this RowsTape has no offsets")
        rows, scalar = _rows(value, name)
        return _Side(rows, scalar, _offsets(value.offsets, rows.shape[0], name))
    if isinstance(value, tuple) and len(value) == 2:
        rows, scalar = _rows(value[0], name)
        return _Side(rows, scalar, _offsets(value[1], rows.shape[0], name))
    raise InvalidArgumentError(
        f"{name}: expected a uform.RowsTape (Encoded.tokens) or a (rows, offsets) pair, "
        f"got {type(value).__name__}")


def late_interaction_scores(queries: TokenRows, documents: TokenRows, /, *,
                            executor: Executor | None = None) -> np.ndarray:
    """MaxSim scores, float32 [queries, documents]: for each pair, the mean over the query's
    token vectors of the largest dot product with any of the document's; 0 when either
    has no tokens.

    queries, documents: `Encoded.tokens` of an encode call with Outputs.TOKENS (F32, BF16,
    F16, E4M3, E5M2 or I8 outputs; read in place in the arena), or (rows, offsets): rows a 2-D float32
    array (or ArenaBuffer) whose rows are contiguous, offsets count + 1 non-decreasing row
    boundaries. Both sides need the same width. executor: the pool that shares the work;
    None runs on the calling thread; a VRAM executor scores on its first GPU. The GIL is
    released while C computes."""
    query_side = _side(queries, "queries")
    document_side = _side(documents, "documents")
    pointer = _executor_pointer(executor)
    count_q, count_d = query_side.struct.count, document_side.struct.count
    scores = np.empty((count_q, count_d), dtype=np.float32)
    out = ffi.from_buffer("float[]", scores) if scores.size else ffi.NULL
    check(lib.uform_late_interaction_scores(pointer, query_side.struct, document_side.struct, out))
    return scores
