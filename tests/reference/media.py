"""The float64 reference of image, video and audio encoding (DESIGN section 5, docs/media.md).

Everything here is written from the specification, independently of libuform: the patch
grid, Pillow's BILINEAR resize coefficients applied in float64, patches and tube patches,
the windowed-sinc resampler, chunks, and the encoder run through `ReferenceModel`
(`encode_rows` with 1-3 position axes, `pool`, `token_vectors`). One item at a time, no
packing.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Optional, Sequence

import numpy as np
import torch

from .model import ReferenceModel

CHANNELS = 3

# The resampler's constants (docs/media.md, "Resampling").
RESAMPLE_ZEROS = 16
RESAMPLE_BETA = 8.6
RESAMPLE_ROLLOFF = 0.9


# ----------------------------------------------------------------------------- images

def image_grid(height: int, width: int, patch_side: int, context: int) -> tuple[int, int, bool]:
    """(rows, cols, shrunk): max(1, floor(h/P + 1/2)) per side; scaled by
    sqrt(context / (rows * cols)) and floored (at least 1) when over context; a side still
    too long after the other was clamped at 1 is cut to fit."""
    rows = max(1, math.floor(Fraction(height, patch_side) + Fraction(1, 2)))
    cols = max(1, math.floor(Fraction(width, patch_side) + Fraction(1, 2)))
    if rows * cols <= context:
        return rows, cols, False
    s = math.sqrt(context / (rows * cols))
    rows, cols = max(1, math.floor(rows * s)), max(1, math.floor(cols * s))
    if rows * cols > context:
        if rows >= cols:
            rows = max(1, context // cols)
        else:
            cols = max(1, context // rows)
    return rows, cols, True


def resize_matrix(in_size: int, out_size: int) -> np.ndarray:
    """[out_size, in_size] float64 weights of Pillow's BILINEAR resampling along one axis:
    a triangle filter of support max(scale, 1), centred at (i + 0.5) * scale, bounds
    rounded as Pillow does, each row normalised to sum 1."""
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = 1.0 * filterscale
    matrix = np.zeros((out_size, in_size))
    for i in range(out_size):
        center = (i + 0.5) * scale
        low = max(int(center - support + 0.5), 0)          # int(): truncation, as Pillow's (int)
        high = min(int(center + support + 0.5), in_size)
        x = np.arange(low, high, dtype=np.float64)
        weights = np.clip(1.0 - np.abs((x - center + 0.5) / filterscale), 0.0, None)
        total = weights.sum()
        matrix[i, low:high] = weights / total if total != 0 else weights
    return matrix


def resize(pixels: np.ndarray, out_height: int, out_width: int) -> np.ndarray:
    """An [h, w, 3] uint8 image resized to [out_height, out_width, 3] float64 in 0..255
    units: horizontal pass, then vertical, no rounding; an axis of the right size is kept."""
    image = np.asarray(pixels, dtype=np.float64)
    height, width = image.shape[:2]
    if width != out_width:
        image = np.einsum("ow,hwc->hoc", resize_matrix(width, out_width), image)
    if height != out_height:
        image = np.einsum("oh,hwc->owc", resize_matrix(height, out_height), image)
    return image


def patches(resized: np.ndarray, rows: int, cols: int, patch_side: int) -> np.ndarray:
    """[rows * cols, P*P*3]: row-major patches, each in (row, col, channel) order, v/127.5 - 1."""
    P = patch_side
    grid = resized.reshape(rows, P, cols, P, CHANNELS).transpose(0, 2, 1, 3, 4)
    return grid.reshape(rows * cols, P * P * CHANNELS) / 127.5 - 1.0


def image_tokens(pixels: np.ndarray, patch_side: int, context: int) -> tuple[np.ndarray, np.ndarray]:
    """(inputs [n, P*P*3] float64, positions [n, 2] (row, col)) of an [h, w, 3] uint8 image."""
    height, width = pixels.shape[:2]
    rows, cols, _ = image_grid(height, width, patch_side, context)
    resized = resize(pixels, rows * patch_side, cols * patch_side)
    positions = np.stack(np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij"), -1)
    return patches(resized, rows, cols, patch_side), positions.reshape(-1, 2)


# ----------------------------------------------------------------------------- video

def video_tokens(frames: np.ndarray, patch_side: int, tube_frames: int,
                 context: int) -> tuple[np.ndarray, np.ndarray]:
    """(inputs [n, T*P*P*3], positions [n, 3] (tube, row, col)) of [F, h, w, 3] uint8 frames
    (already every frame_stride-th): frames gridded and resized as images, grouped T at a
    time with the final frame repeated, the first floor(context / grid) tubes kept."""
    T, P = tube_frames, patch_side
    count = len(frames)
    width = T * P * P * CHANNELS
    if count == 0:
        return np.zeros((0, width)), np.zeros((0, 3), dtype=np.int64)
    rows, cols, _ = image_grid(frames.shape[1], frames.shape[2], P, context)
    tubes = -(-count // T)
    kept = min(tubes, context // (rows * cols))
    frame_patches = [patches(resize(frame, rows * P, cols * P), rows, cols, P)
                     for frame in frames[:kept * T]]
    inputs, positions = [], []
    for t in range(kept):
        group = [frame_patches[min(t * T + f, count - 1)] for f in range(T)]
        inputs.append(np.concatenate(group, axis=1))       # (frame, row, col, channel) per patch
        for r in range(rows):
            for c in range(cols):
                positions.append((t, r, c))
    return np.concatenate(inputs), np.array(positions, dtype=np.int64)


# ----------------------------------------------------------------------------- audio

def resampled_length(count: int, from_rate: int, to_rate: int) -> int:
    return -(-count * to_rate // from_rate)


def resample(samples: np.ndarray, from_rate: int, to_rate: int,
             length: Optional[int] = None) -> np.ndarray:
    """The Kaiser-windowed sinc resampler in float64 (docs/media.md): output j at input time
    t_j = j * from / to is sum_i x_i h(i - t_j) over |i - t_j| < w, with
    f = ROLLOFF * min(1, to/from) / 2, w = ZEROS * max(1, from/to),
    h(x) = 2f sinc(2f x) I0(BETA sqrt(1 - (x/w)^2)) / I0(BETA). Equal rates copy."""
    x = np.asarray(samples, dtype=np.float64)
    n = resampled_length(len(x), from_rate, to_rate) if length is None else length
    if from_rate == to_rate:
        out = np.zeros(n)
        out[:min(n, len(x))] = x[:n]
        return out
    cutoff = RESAMPLE_ROLLOFF * 0.5 * min(1.0, to_rate / from_rate)
    half_width = RESAMPLE_ZEROS * max(1.0, from_rate / to_rate)
    reach = math.ceil(half_width)
    j = np.arange(n, dtype=np.int64)
    quotient, remainder = np.divmod(j * from_rate, to_rate)
    d = np.arange(-reach, reach + 1, dtype=np.int64)
    offsets = (d[None, :] * to_rate - remainder[:, None]) / to_rate      # i - t_j
    index = quotient[:, None] + d[None, :]
    inside = (np.abs(offsets) < half_width) & (index >= 0) & (index < len(x))
    u = np.clip(offsets / half_width, -1.0, 1.0)
    kernel = (2 * cutoff * np.sinc(2 * cutoff * offsets)
              * np.i0(RESAMPLE_BETA * np.sqrt(1.0 - u * u)) / np.i0(RESAMPLE_BETA))
    values = np.where(inside, x[np.clip(index, 0, max(len(x) - 1, 0))] if len(x) else 0.0, 0.0)
    return (np.where(inside, kernel, 0.0) * values).sum(axis=1)


def audio_tokens(samples: np.ndarray, sample_rate: int, model_rate: int, chunk_samples: int,
                 context: int) -> tuple[np.ndarray, np.ndarray]:
    """(inputs [n, S], positions [n, 1]): resampled to the model's rate, cut into chunks of
    S (the last zero-padded), the first `context` kept."""
    length = resampled_length(len(samples), sample_rate, model_rate)
    chunks = -(-length // chunk_samples)
    kept = min(chunks, context)
    resampled = resample(samples, sample_rate, model_rate, length=min(length, kept * chunk_samples))
    inputs = np.zeros(kept * chunk_samples)
    inputs[:len(resampled)] = resampled
    return inputs.reshape(kept, chunk_samples), np.arange(kept, dtype=np.int64)[:, None]


# ----------------------------------------------------------------------------- the encoder

_INPUTS = {"image": "image.patch", "video": "video.tube", "audio": "audio.chunk"}


def encode_tokens(model: ReferenceModel, modality: str, inputs: np.ndarray,
                  positions: np.ndarray) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """(embedding [D], token vectors [n, W] or None) of one item's input tokens: projected by
    the modality's linear layer, its modality vector added, run through the blocks."""
    part = _INPUTS[modality]
    x = torch.from_numpy(np.asarray(inputs, dtype=np.float64)).to(model.dtype)
    x = x @ model.weight(f"{part}.weight").T + model.weight(f"{part}.bias")
    x = x + model.weight(f"{modality}.modality")
    axes = {"image": 2, "video": 3, "audio": 1}[modality]
    p = torch.from_numpy(np.asarray(positions, dtype=np.int64).reshape(-1, axes))
    h = model.encode_rows(x, p) if len(x) else x.new_zeros((0, model.hidden))
    return model.pool(h), model.token_vectors(h)


def _stack(model: ReferenceModel, results: list) -> tuple[np.ndarray, Optional[list]]:
    embeddings = np.stack([e.detach().numpy() for e, _ in results])
    tokens = None if not model.token_width else [t.detach().numpy() for _, t in results]
    return embeddings, tokens


def image_encode(model: ReferenceModel, images: Sequence[np.ndarray]):
    """(embeddings [n, D], token vectors per image or None) of [h, w, 3] uint8 images."""
    shape = model.config["image"]
    with torch.no_grad():
        return _stack(model, [encode_tokens(model, "image", *image_tokens(
            np.asarray(image), shape["patch_side"], model.context)) for image in images])


def video_encode(model: ReferenceModel, clips: Sequence[np.ndarray]):
    """(embeddings, token vectors) of clips given as [F, h, w, 3] uint8 frames already
    every frame_stride-th."""
    shape = model.config["video"]
    with torch.no_grad():
        return _stack(model, [encode_tokens(model, "video", *video_tokens(
            np.asarray(clip), shape["patch_side"], shape["tube_frames"], model.context))
            for clip in clips])


def audio_encode_samples(model: ReferenceModel, recordings: Sequence[np.ndarray], sample_rate: int):
    """(embeddings, token vectors) of mono float32 recordings at `sample_rate` Hz."""
    shape = model.config["audio"]
    with torch.no_grad():
        return _stack(model, [encode_tokens(model, "audio", *audio_tokens(
            np.asarray(recording, dtype=np.float64), sample_rate, shape["sample_rate"],
            shape["chunk_samples"], model.context)) for recording in recordings])
