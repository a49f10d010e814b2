"""Choices as text_choose and Trainer.step take them: single-byte choices per item."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ._buffers import Tape, _is_offsets_buffer, texts_tape
from ._errors import InvalidArgumentError


def _choice_bytes(choice: Any, name: str) -> bytes:
    """One choice: a one-byte str (ASCII) or bytes."""
    if isinstance(choice, str):
        encoded = choice.encode("utf-8", "surrogatepass")
    elif isinstance(choice, (bytes, bytearray)):
        encoded = bytes(choice)
    elif isinstance(choice, int) and not isinstance(choice, bool) and 0 <= choice < 256:
        return bytes([choice])  # an element of a bytes object iterated
    else:
        raise InvalidArgumentError(f"{name}: expected a one-byte str or bytes, got {type(choice).__name__}")
    if len(encoded) != 1:
        raise InvalidArgumentError(
            f"{name}: the choice {choice!r} is {len(encoded)} bytes; each choice must be a single byte")
    return encoded


def _entry_bytes(entry: Any, name: str) -> bytes:
    """One item's choices: a str (each character a choice), bytes (each byte a choice) or a
    sequence of single-byte choices."""
    if isinstance(entry, str):
        return b"".join(_choice_bytes(character, name) for character in entry)
    if isinstance(entry, (bytes, bytearray, memoryview)):
        return bytes(entry)
    if isinstance(entry, Sequence):
        return b"".join(_choice_bytes(choice, f"{name}[{k}]") for k, choice in enumerate(entry))
    raise InvalidArgumentError(
        f"{name}: expected a str, bytes or a sequence of single-byte choices, got {type(entry).__name__}")


def choices_tape(choices: Any, count: int, name: str = "choices") -> Tape:
    """A Tape of `count` entries (or a caller's (data, offsets) tape as given). A single
    str/bytes is shared by every item."""
    if isinstance(choices, tuple) and len(choices) == 2 and _is_offsets_buffer(choices[1]):
        return texts_tape(choices, name)
    if isinstance(choices, (str, bytes, bytearray, memoryview)):
        shared = _entry_bytes(choices, name)
        return texts_tape([shared] * count, name)
    if isinstance(choices, np.ndarray) or not isinstance(choices, Sequence):
        raise InvalidArgumentError(
            f"{name}: expected a str, bytes, a sequence with one entry per item, or a (data, offsets) "
            f"tape; got {type(choices).__name__}")
    if len(choices) != count:
        raise InvalidArgumentError(f"{name}: {len(choices)} entries for {count} items")
    return texts_tape([_entry_bytes(entry, f"{name}[{i}]") for i, entry in enumerate(choices)], name)


def _float_values(values: Any, name: str) -> np.ndarray:
    try:
        array = np.asarray(values)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{name}: expected float32 values, got {type(values).__name__}") from None
    if array.dtype != np.float32:
        raise InvalidArgumentError(f"{name}: expected float32 values, got {array.dtype}")
    if array.ndim != 1:
        raise InvalidArgumentError(f"{name}: expected one dimension, got shape {array.shape}")
    return array


def choice_targets_buffer(targets: Any, offsets: np.ndarray, name: str = "choice_targets") -> np.ndarray:
    """float32 targets aligned with a choices tape's bytes (offsets: its count + 1 boundaries).

    targets: one float32 buffer per item, or a tape: (values, offsets) or a RowsTape from
    text_choose (its own .offsets)."""
    count = len(offsets) - 1
    aligned = np.zeros(int(offsets[-1]) if count >= 0 else 0, dtype=np.float32)
    if hasattr(targets, "offsets") and not isinstance(targets, tuple):
        targets = (targets, targets.offsets)
    if isinstance(targets, tuple) and len(targets) == 2:
        values = _float_values(targets[0], name)
        bounds = np.asarray(targets[1])
        if bounds.ndim != 1 or len(bounds) != count + 1:
            raise InvalidArgumentError(f"{name}: tape offsets hold {len(bounds)} values, expected {count + 1}")
        if np.any(np.diff(bounds.astype(np.int64)) < 0) or (count >= 0 and int(bounds[-1]) > len(values)):
            raise InvalidArgumentError(f"{name}: tape offsets must be non-decreasing and within the values")
        rows = [values[int(bounds[i]):int(bounds[i + 1])] for i in range(count)]
    elif isinstance(targets, Sequence) and not isinstance(targets, (str, bytes)):
        if len(targets) != count:
            raise InvalidArgumentError(f"{name}: {len(targets)} entries for {count} items")
        rows = [_float_values(row, f"{name}[{i}]") for i, row in enumerate(targets)]
    else:
        raise InvalidArgumentError(
            f"{name}: expected a sequence of float32 buffers or a (values, offsets) tape, got "
            f"{type(targets).__name__}")
    for i, row in enumerate(rows):
        begin, end = int(offsets[i]), int(offsets[i + 1])
        if len(row) != end - begin:
            raise InvalidArgumentError(f"{name}[{i}]: {len(row)} targets for {end - begin} choices")
        aligned[begin:end] = row
    return aligned
