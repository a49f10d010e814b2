"""Choices as text_choose and Trainer.step take them: single-byte choices per item."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ._buffers import Tape, choices_tape, texts_tape
from ._errors import InvalidArgumentError
from ._native import ffi


def shared_choices_tape(choices: Any, count: int, name: str = "choices") -> Tape:
    """text_choose's choices (buffers.choices_tape) as a Tape of exactly `count` entries, the
    form Trainer.step passes to C: a single shared entry is repeated for every item."""
    tape = choices_tape(choices, name)
    given = tape.struct.count
    if given == 1 and count != 1:
        offsets = tape.struct.offsets
        entry = bytes(ffi.buffer(tape.struct.data, tape.struct.size)[offsets[0]:offsets[1]]) \
            if tape.struct.size else b""
        return texts_tape([entry] * count, name)
    if given != count:
        raise InvalidArgumentError(f"{name}: {given} entries for {count} items")
    return tape


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
