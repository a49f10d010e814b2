"""Output memory (Arena) and zero-copy views of it (ArenaBuffer, RowsTape), and
the conversion of inputs to borrowed C pointers (tapes)."""
from __future__ import annotations

import os
from array import array
from itertools import accumulate
from typing import Any, Sequence, Tuple, Union

import numpy as np

from ._enums import Scalar
from ._errors import InvalidArgumentError
from ._native import check, ffi, lib

Buffer = Any  # any object with the buffer protocol
_Tape = Tuple[Buffer, Buffer]
_Texts = Union[Sequence[Union[str, bytes]], _Tape]
_PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

#: numpy dtype of one stored scalar; B1 rows are bytes of packed bits.
_DTYPES: dict[Scalar, np.dtype] = {
    Scalar.F32: np.dtype(np.float32),
    Scalar.BF16: np.dtype(np.uint16),  # bfloat16 bits: (x.astype(np.uint32) << 16).view(np.float32)
    Scalar.F16: np.dtype(np.float16),
    Scalar.E4M3: np.dtype(np.uint8),   # OCP FP8 codes, no scale: to_float32 or .view(ml_dtypes.float8_e4m3fn)
    Scalar.E5M2: np.dtype(np.uint8),   # OCP FP8 codes, no scale: to_float32 or .view(ml_dtypes.float8_e5m2)
    Scalar.I8: np.dtype(np.int8),
    Scalar.B1: np.dtype(np.uint8),
}


def _fp8_table(mantissa: int, bias: int, e4m3: bool) -> np.ndarray:
    """The float32 value of each of the 256 codes of an OCP FP8 format, from its definition:
    sign, 7 - mantissa exponent bits, `mantissa` bits; exponent field 0 is subnormal. E4M3
    has no infinities and only S.1111.111 is NaN; E5M2's all-ones exponent is infinity with
    a zero mantissa, NaN otherwise."""
    codes = np.arange(256)
    magnitude = codes & 0x7F
    field, fraction = magnitude >> mantissa, magnitude & ((1 << mantissa) - 1)
    values = np.where(field == 0, np.ldexp(fraction.astype(np.float64), 1 - bias - mantissa),
                      np.ldexp((fraction + (1 << mantissa)).astype(np.float64), field - bias - mantissa))
    if e4m3:
        values[magnitude == 0x7F] = np.nan
    else:
        top = field == (1 << (7 - mantissa)) - 1
        values[top] = np.where(fraction[top] == 0, np.inf, np.nan)
    return np.copysign(values, np.where(codes & 0x80, -1.0, 1.0)).astype(np.float32)   # exact


_FP8_TABLES = {Scalar.E4M3: _fp8_table(3, 7, True), Scalar.E5M2: _fp8_table(2, 15, False)}


def to_float32(rows: Any, *, scalar: Any = None) -> np.ndarray:
    """The values of encoded rows as a new float32 array of the same shape.

    rows: an ArenaBuffer or RowsTape (its `scalar` says how to read it), or a numpy
    array of the stored dtype with `scalar=` naming its scalar (given for an arena view
    too, it must agree with the view's). F32 is copied; BF16 bit patterns (uint16) and
    F16 are widened exactly; I8 is divided by 127 (the library writes round(127 x));
    E4M3 and E5M2 codes (uint8) are looked up in a table of their 256 values (no scale:
    rows are unit vectors). B1 rows are packed sign bits, not values: InvalidArgumentError
    (use np.unpackbits). A RowsTape's offsets stay on the tape."""
    carried = getattr(rows, "scalar", None) if isinstance(rows, ArenaBuffer) else None
    if scalar is None and carried is None:
        raise InvalidArgumentError(
            "scalar: rows carry no scalar (not an ArenaBuffer or RowsTape); pass scalar=uform.Scalar...")
    try:
        wanted = Scalar(carried if scalar is None else scalar)
    except ValueError:
        raise InvalidArgumentError(f"scalar: {scalar!r} is not a uform.Scalar") from None
    if carried is not None and Scalar(carried) != wanted:
        raise InvalidArgumentError(f"scalar: {wanted.name} given, but the rows are {Scalar(carried).name}")
    if wanted == Scalar.B1:
        raise InvalidArgumentError(
            "B1 rows are packed sign bits, not values: np.unpackbits(rows, axis=-1) reads them")
    values = np.asarray(rows)
    if values.dtype != _DTYPES[wanted]:
        raise InvalidArgumentError(
            f"rows: {wanted.name} rows are stored as {_DTYPES[wanted]}, got {values.dtype}")
    if wanted == Scalar.BF16:
        return (values.astype(np.uint32) << 16).view(np.float32)
    if wanted == Scalar.I8:
        return values.astype(np.float32) / np.float32(127)
    if wanted in _FP8_TABLES:
        return _FP8_TABLES[wanted][values]
    return values.astype(np.float32)   # F32 (a copy) and F16


class Arena:
    """Host memory that encode verbs write their outputs into, grown as needed
    and reused by the next call: outputs stay valid until the arena's next use
    or reset(). Views keep the arena alive, so a stale view never reads freed
    memory."""

    def __init__(self) -> None:
        pointer = ffi.new("uform_arena_t **")
        check(lib.uform_arena_init_ram(pointer))
        self._arena = ffi.gc(pointer[0], lib.uform_arena_free)

    def reset(self) -> None:
        """Ends the validity of every output written so far."""
        check(lib.uform_arena_reset(self._arena))

    @property
    def capacity(self) -> int:
        """Bytes the arena holds from the system."""
        size = ffi.new("size_t *")
        check(lib.uform_arena_capacity(self._arena, size))
        return int(size[0])

    def __repr__(self) -> str:
        return f"uform.Arena(capacity={self.capacity})"


class ArenaBuffer(np.ndarray):
    """Rows in an arena, as a numpy array that shares the arena's memory.

    The buffer protocol and numpy read it without a copy; `scalar` tells how
    to read the values (BF16 rows are uint16 bit patterns, E4M3 and E5M2 rows
    uint8 FP8 codes, B1 rows packed bits); to_float32 turns them into values."""

    scalar: Scalar

    def __array_finalize__(self, obj: Any) -> None:
        self.scalar = getattr(obj, "scalar", Scalar.F32)

    def __array_wrap__(self, array: Any, context: Any = None, return_scalar: bool = False) -> Any:
        # Arithmetic on a view produces ordinary arrays, not arena views.
        result = np.asarray(array).view(np.ndarray)
        return result[()] if return_scalar else result


class RowsTape(ArenaBuffer):
    """Variable-length groups of rows: item i owns rows offsets[i]:offsets[i+1].

    A 1-D tape (text_choose's probabilities) holds scalars instead of rows, so
    (tape, tape.offsets) is itself a (data, offsets) tape of that scalar."""

    offsets: np.ndarray

    def __array_finalize__(self, obj: Any) -> None:
        super().__array_finalize__(obj)
        self.offsets = getattr(obj, "offsets", None)  # type: ignore[assignment]

    def rows(self, item: int) -> np.ndarray:
        """The rows of one item, a view."""
        return np.asarray(self)[int(self.offsets[item]) : int(self.offsets[item + 1])]

    def __len__(self) -> int:  # rows, as numpy counts them
        return super().__len__()


class _ArenaMemory:
    """The bottom of every arena view's base chain: numpy collapses chains of plain
    ndarrays down to the object that provided the memory, so that object, not a
    subclass instance above it, must hold the arena alive."""

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, pointer: Any, shape: tuple, dtype: np.dtype, owner: Any) -> None:
        address = int(ffi.cast("uintptr_t", pointer))
        self.__array_interface__ = {"data": (address, False), "shape": shape,
                                    "typestr": dtype.str, "version": 3}
        self.owner = owner


def _memory(pointer: Any, shape: tuple, dtype: np.dtype, owner: Any) -> np.ndarray:
    """An ndarray over arena memory that keeps `owner` alive however it is viewed."""
    if 0 in shape:
        return np.empty(shape, dtype=dtype)
    return np.asarray(_ArenaMemory(pointer, shape, dtype, owner))


def _view(pointer: Any, rows: int, row_bytes: int, width: int, scalar: Scalar, owner: Any,
          cls: type) -> Any:
    """An ndarray subclass over `rows` rows at `pointer`, alive as long as its views."""
    dtype = _DTYPES[scalar]
    columns = row_bytes // dtype.itemsize
    view: Any = _memory(pointer, (rows, columns), dtype, owner).view(cls)
    view.scalar = scalar
    return view


def arena_rows(pointer: Any, rows: int, row_bytes: int, width: int, scalar: Scalar,
               owner: Any) -> ArenaBuffer:
    return _view(pointer, rows, row_bytes, width, scalar, owner, ArenaBuffer)


def arena_rows_tape(pointer: Any, offsets: Any, count: int, row_bytes: int, width: int,
                    scalar: Scalar, owner: Any) -> RowsTape:
    boundaries = _memory(offsets, (count + 1,), np.dtype(np.uintp), owner)
    tape = _view(pointer, int(boundaries[-1]), row_bytes, width, scalar, owner, RowsTape)
    tape.offsets = boundaries
    return tape


def arena_values_tape(pointer: Any, offsets: Any, count: int, scalar: Scalar, owner: Any) -> RowsTape:
    """A 1-D RowsTape: item i's values are [offsets[i], offsets[i+1]) of `scalar`."""
    boundaries = _memory(offsets, (count + 1,), np.dtype(np.uintp), owner)
    tape: Any = _memory(pointer, (int(boundaries[-1]),), _DTYPES[scalar], owner).view(RowsTape)
    tape.scalar = scalar
    tape.offsets = boundaries
    return tape


# ---- inputs ------------------------------------------------------------------

class Tape:
    """A uform_tape_t over borrowed memory, with what keeps that memory alive."""

    def __init__(self, data: Any, size: int, offsets: Any, count: int, keep: tuple) -> None:
        self.struct = ffi.new("uform_tape_t *")
        self.struct.data = data
        self.struct.size = size
        self.struct.offsets = offsets
        self.struct.count = count
        self._keep = keep


def _is_offsets_buffer(value: Any) -> bool:
    if isinstance(value, (str, bytes, bytearray)):
        return False
    try:
        return memoryview(value).itemsize == 8
    except TypeError:
        return False


def texts_tape(texts: Any, name: str = "texts") -> Tape:
    """Converts _Texts (a sequence of str/bytes, or a (data, offsets) tape) to a Tape."""
    if isinstance(texts, (str, bytes, bytearray, memoryview)):
        raise InvalidArgumentError(
            f"{name}: expected a sequence of texts, got a single {type(texts).__name__}; "
            "wrap it in a list")
    if isinstance(texts, tuple) and len(texts) == 2 and _is_offsets_buffer(texts[1]):
        return _tape_from_buffers(texts[0], texts[1], name)
    if isinstance(texts, np.ndarray) or not isinstance(texts, Sequence):
        raise InvalidArgumentError(
            f"{name}: expected a sequence of str or bytes, or a (data, offsets) tape; "
            f"got {type(texts).__name__}")
    encoded = []
    for index, text in enumerate(texts):
        if isinstance(text, str):
            try:
                encoded.append(text.encode("utf-8"))
            except UnicodeEncodeError as error:
                raise InvalidArgumentError(f"{name}[{index}]: not encodable as UTF-8 ({error.reason})") from None
        elif isinstance(text, (bytes, bytearray, memoryview)):
            encoded.append(bytes(text))
        else:
            raise InvalidArgumentError(
                f"{name}[{index}]: expected str or bytes, got {type(text).__name__}")
    data = b"".join(encoded)
    offsets = array("Q", accumulate(map(len, encoded), initial=0))
    return _tape_from_buffers(data, offsets, name)


def _choice_bytes(entry: Any, name: str) -> bytes:
    """One text's choices as bytes: a str or bytes (each character or byte one
    choice), or a sequence of single-character str / single bytes."""
    if isinstance(entry, str):
        for character in entry:
            width = len(character.encode("utf-8", "surrogatepass"))
            if width != 1:
                raise InvalidArgumentError(
                    f"{name}: {character!r} is {width} bytes in UTF-8, but a choice is a single "
                    "byte (pass bytes for byte values 128-255)")
        return entry.encode("ascii")
    if isinstance(entry, (bytes, bytearray, memoryview)):
        return bytes(entry)
    if isinstance(entry, np.ndarray) or not isinstance(entry, Sequence):
        raise InvalidArgumentError(
            f"{name}: expected str, bytes or a sequence of single-byte choices, got {type(entry).__name__}")
    joined = bytearray()
    for index, element in enumerate(entry):
        if isinstance(element, str):
            encoded = element.encode("utf-8", "surrogatepass")
        elif isinstance(element, (bytes, bytearray)):
            encoded = bytes(element)
        else:
            raise InvalidArgumentError(
                f"{name}[{index}]: expected a single-character str or a single byte, got {type(element).__name__}")
        if len(encoded) != 1:
            raise InvalidArgumentError(
                f"{name}[{index}]: {element!r} is {len(encoded)} bytes, but a choice is a single byte")
        joined += encoded
    return bytes(joined)


def choices_tape(choices: Any, name: str = "choices") -> Tape:
    """Converts text_choose's choices to a Tape of one entry per text, or of one
    entry every text shares: a single str or bytes (shared), a sequence of
    entries (see _choice_bytes; a single entry is shared), or a (data, offsets)
    tape. Empty entries and repeated bytes are the C library's to refuse."""
    if isinstance(choices, (str, bytes, bytearray, memoryview)):
        entries = [_choice_bytes(choices, name)]
    elif isinstance(choices, tuple) and len(choices) == 2 and (
            _is_offsets_buffer(choices[1]) or isinstance(choices[1], (np.ndarray, array))):
        # An array is never one text's entry, so this is a tape, perhaps with bad offsets.
        return _tape_from_buffers(choices[0], choices[1], name)
    elif isinstance(choices, np.ndarray) or not isinstance(choices, Sequence):
        raise InvalidArgumentError(
            f"{name}: expected a str or bytes, a sequence with one entry per text, or a "
            f"(data, offsets) tape; got {type(choices).__name__}")
    else:
        entries = [_choice_bytes(entry, f"{name}[{index}]") for index, entry in enumerate(choices)]
    data = b"".join(entries)
    offsets = array("Q", accumulate(map(len, entries), initial=0))
    return _tape_from_buffers(data, offsets, name)


def words_buffer(values: Any, count: int | None, name: str, what: str = "items") -> tuple:
    """(cdata const uint32_t * or NULL, keepalive) for _Words (see words_with_length)."""
    pointer, _length, keep = words_with_length(values, count, name, what)
    return pointer, keep


def words_with_length(values: Any, count: int | None, name: str, what: str = "items") -> tuple:
    """(cdata const uint32_t * or NULL, length, keepalive) for _Words: the one converter of every
    id buffer of the package (bags, groups, relation ids, devices, memory domains).

    Accepted: a contiguous uint32 buffer (borrowed as is); a 1-D numpy array of any
    integer dtype with every value in [0, 2**32) (converted); a sequence of Python ints or
    numpy integers in [0, 2**32). Anything else (floats, bools, strings, numeric strings)
    is refused naming the first bad value: ids are never coerced. `count` None accepts
    any length; otherwise the length must equal it."""
    if values is None:
        return ffi.NULL, 0, None
    if isinstance(values, (str, bytes, bytearray)):
        raise InvalidArgumentError(f"{name}: expected uint32 values, got {type(values).__name__}")
    keep: Any
    if isinstance(values, np.ndarray) and values.dtype != np.uint32:
        if values.dtype == np.bool_ or not np.issubdtype(values.dtype, np.integer):
            raise InvalidArgumentError(f"{name}: expected integer ids, got a numpy array of {values.dtype}")
        if values.ndim != 1:
            raise InvalidArgumentError(f"{name}: expected a 1-D array, got shape {values.shape}")
        bad = np.flatnonzero((values < 0) | (values >= 1 << 32)) if values.size else ()
        if len(bad):
            raise InvalidArgumentError(
                f"{name}[{int(bad[0])}]: {int(values[bad[0]])} is not in [0, 2**32)")
        values = values.astype(np.uint32)
    try:
        view = memoryview(values)
    except TypeError:
        view = None
    if view is not None:
        with view:
            if view.itemsize != 4 or view.format.lstrip("@=<") not in ("I", "L"):
                raise InvalidArgumentError(
                    f"{name}: a buffer must hold uint32 values, got format {view.format!r}")
            if not view.c_contiguous:
                raise InvalidArgumentError(f"{name}: the buffer must be contiguous")
            length = view.nbytes // 4
        keep = values
    else:
        if not isinstance(values, Sequence):
            raise InvalidArgumentError(
                f"{name}: expected a uint32 buffer or a sequence of ints, got {type(values).__name__}")
        for index, value in enumerate(values):
            if (isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer))
                    or not 0 <= value < 1 << 32):
                raise InvalidArgumentError(f"{name}[{index}]: expected an int in [0, 2**32), got {value!r}")
        keep = array("I", [int(value) for value in values])
        length = len(keep)
    if count is not None and length != count:
        raise InvalidArgumentError(f"{name}: {length} values for {count} {what}")
    if length == 0:
        return ffi.NULL, 0, keep
    raw = ffi.from_buffer(keep)    # holds the buffer export while the pointer is in use
    return ffi.cast("const uint32_t *", raw), length, (keep, raw)


def _tape_from_buffers(data: Any, offsets: Any, name: str) -> Tape:
    try:
        with memoryview(data) as data_view, memoryview(offsets) as offsets_view:
            contiguous = data_view.c_contiguous and offsets_view.c_contiguous
            data_bytes = data_view.nbytes
            offsets_bytes = offsets_view.nbytes
            offsets_format = offsets_view.format.lstrip("@=<")
            offsets_itemsize = offsets_view.itemsize
    except TypeError:
        raise InvalidArgumentError(f"{name}: a tape is (data, offsets), both buffers") from None
    if not contiguous:
        raise InvalidArgumentError(f"{name}: tape buffers must be contiguous")
    if offsets_itemsize != 8 or offsets_format not in ("Q", "L", "N", "q", "l", "n"):
        raise InvalidArgumentError(
            f"{name}: tape offsets must be 64-bit integers (size_t), got format {offsets_format!r}")
    count = offsets_bytes // 8 - 1
    if count < 0:
        raise InvalidArgumentError(f"{name}: tape offsets must hold count + 1 values, got none")
    # cffi holds its own buffer on each object for as long as the pointer lives.
    data_pointer = ffi.from_buffer("char[]", data) if data_bytes else ffi.NULL
    offsets_pointer = ffi.from_buffer("size_t[]", offsets)
    return Tape(data_pointer, data_bytes, offsets_pointer, count, (data, offsets, data_pointer, offsets_pointer))


def path_bytes(path: Any, name: str = "path") -> bytes:
    """A path as the C side takes it: os.fsencode's bytes, with no NUL."""
    try:
        encoded = os.fsencode(path)
    except TypeError:
        raise InvalidArgumentError(
            f"{name}: expected str, bytes or os.PathLike, got {type(path).__name__}") from None
    if b"\0" in encoded:
        raise InvalidArgumentError(f"{name}: contains a NUL byte")
    if not encoded:
        raise InvalidArgumentError(f"{name}: empty path")
    return encoded
