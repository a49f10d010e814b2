"""Choices as text_choose and Trainer.step take them: single-byte choices per item."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ._buffers import Tape, choices_tape, texts_tape
from ._errors import InvalidArgumentError
from ._native import ffi


def step_choices(choices: Any, count: int, name: str = "choices") -> tuple[Tape, np.ndarray]:
    """Trainer.step's choices as the C trainer takes them, without copies: one entry per
    item, or a single entry shared by every item (text_choose's forms, buffers.choices_tape),
    and the count + 1 boundaries of each item's targets (item after item for a shared
    entry, as uform.h's uform_trainer_batch_t says)."""
    tape = choices_tape(choices, name)
    given = tape.struct.count
    offsets = np.frombuffer(ffi.buffer(tape.struct.offsets, 8 * (given + 1)), dtype=np.uint64)
    if given == 1 and count != 1:
        begin, length = int(offsets[0]), int(offsets[1] - offsets[0])
        return tape, begin + length * np.arange(count + 1, dtype=np.uint64)
    if given != count:
        raise InvalidArgumentError(f"{name}: {given} entries for {count} items (one per item, or one for all)")
    return tape, offsets


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
    """float32 targets aligned with the choices' bytes: item i's at [offsets[i], offsets[i+1]).

    targets: one float32 buffer per item, or a tape: (values, offsets) or a RowsTape from
    text_choose (its own .offsets). A tape whose offsets are the choices' is passed as it is
    (no copy); another tape is realigned in one vectorised gather."""
    count = len(offsets) - 1
    offsets = offsets.astype(np.int64)
    wanted = np.diff(offsets)
    if hasattr(targets, "offsets") and not isinstance(targets, tuple):
        targets = (targets, targets.offsets)
    if isinstance(targets, tuple) and len(targets) == 2:
        values = _float_values(targets[0], name)
        bounds = np.asarray(targets[1])
        if bounds.ndim != 1 or len(bounds) != count + 1:
            raise InvalidArgumentError(f"{name}: tape offsets hold {len(bounds)} values, expected {count + 1}")
        bounds = bounds.astype(np.int64)
        given = np.diff(bounds)
        if np.any(given < 0) or (count >= 0 and int(bounds[-1]) > len(values)) or \
                (count >= 0 and int(bounds[0]) < 0):
            raise InvalidArgumentError(f"{name}: tape offsets must be non-decreasing and within the values")
        wrong = np.flatnonzero(given != wanted)
        if len(wrong):
            i = int(wrong[0])
            raise InvalidArgumentError(f"{name}[{i}]: {int(given[i])} targets for {int(wanted[i])} choices")
        if np.array_equal(bounds, offsets) and values.flags.c_contiguous:
            return values
        aligned = np.zeros(int(offsets[-1]) if count >= 0 else 0, dtype=np.float32)
        starts = np.repeat(bounds[:-1] - offsets[:-1], wanted)
        positions = np.arange(int(offsets[0]), int(offsets[-1]), dtype=np.int64)
        aligned[positions] = values[positions + starts]
        return aligned
    if isinstance(targets, Sequence) and not isinstance(targets, (str, bytes)):
        if len(targets) != count:
            raise InvalidArgumentError(f"{name}: {len(targets)} entries for {count} items")
        aligned = np.zeros(int(offsets[-1]) if count >= 0 else 0, dtype=np.float32)
        for i, row in enumerate(targets):
            row = _float_values(row, f"{name}[{i}]")
            if len(row) != int(wanted[i]):
                raise InvalidArgumentError(f"{name}[{i}]: {len(row)} targets for {int(wanted[i])} choices")
            aligned[int(offsets[i]):int(offsets[i + 1])] = row
        return aligned
    raise InvalidArgumentError(
        f"{name}: expected a sequence of float32 buffers or a (values, offsets) tape, got "
        f"{type(targets).__name__}")
