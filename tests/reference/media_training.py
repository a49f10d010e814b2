"""PyTorch reference of the masked image/video/audio objective (docs/training.md section 11),
in float64, for tests/test_training_media.py.

Media items are decoded here by the Python oracles (Pillow, soundfile, PyAV: the decoder
tests show libuform's decoders agree with them on these formats) and tokenised by
tests/reference/media.py, the oracle of the encode verbs.
"""
from __future__ import annotations

import io
import math
from typing import Optional, Sequence

import numpy as np
import torch

from . import media
from .model import ReferenceModel
from .training import uniform

STREAMS = {"image": 2000, "video": 2001, "audio": 2002}
_INPUTS = {"image": "image.patch", "video": "video.tube", "audio": "audio.chunk"}
_AXES = {"image": 2, "video": 3, "audio": 1}


def decode_image(data: bytes) -> np.ndarray:
    from PIL import Image
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def decode_audio(data: bytes) -> tuple[np.ndarray, int]:
    """Mono float64 samples (channels averaged) and the file's rate."""
    import soundfile
    samples, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    return samples.astype(np.float64).mean(axis=1), rate


def decode_video(data: bytes, frame_stride: int) -> np.ndarray:
    import av
    with av.open(io.BytesIO(data)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    return np.stack(frames[::frame_stride]) if frames else np.zeros((0, 1, 1, 3), np.uint8)


def item_tokens(modality: str, data: bytes, config: dict, context: int) -> tuple[np.ndarray, np.ndarray]:
    """(inputs [n, width], positions [n, axes]) of one encoded file, as the encode verbs
    tokenise it; config is the checkpoint's "image"/"video"/"audio" metadata object."""
    if modality == "image":
        return media.image_tokens(decode_image(data), config["patch_side"], context)
    if modality == "video":
        frames = decode_video(data, config["frame_stride"])
        return media.video_tokens(frames, config["patch_side"], config["tube_frames"], context)
    samples, rate = decode_audio(data)
    return media.audio_tokens(samples, rate, config["sample_rate"], config["chunk_samples"], context)


def masked_positions(n: int, ratio: float, *, seed: int, step: int, item: int, stream: int) -> list[bool]:
    """k = min(n, floor(ratio n + 1/2)) positions with the smallest uniform draws, ties to
    the lower position (ratio as the float32 field holds it)."""
    k = min(n, math.floor(float(np.float32(ratio)) * n + 0.5))
    order = sorted(range(n), key=lambda p: (uniform(seed, step, item, p, stream), p))
    chosen = set(order[:k])
    return [p in chosen for p in range(n)]


def normalized_targets(inputs: torch.Tensor) -> torch.Tensor:
    """(p - mean p) / sqrt(var p + 1e-6) per row, biased variance."""
    mean = inputs.mean(dim=1, keepdim=True)
    variance = ((inputs - mean) ** 2).mean(dim=1, keepdim=True)
    return (inputs - mean) / torch.sqrt(variance + 1e-6)


def media_hidden(model: ReferenceModel, modality: str, inputs: np.ndarray, positions: np.ndarray,
                 masked: Optional[Sequence[bool]] = None) -> torch.Tensor:
    """Final states [n, H] of one item: projected tokens plus the modality vector, the mask
    vector instead of the projection at masked rows."""
    part = _INPUTS[modality]
    x = torch.from_numpy(np.asarray(inputs, dtype=np.float64)).to(model.dtype)
    rows = x @ model.weight(f"{part}.weight").T + model.weight(f"{part}.bias")
    if masked is not None and any(masked):
        flags = torch.tensor(list(masked))[:, None]
        rows = torch.where(flags, model.weight(f"{modality}.mask").expand_as(rows), rows)
    rows = rows + model.weight(f"{modality}.modality")
    p = torch.from_numpy(np.asarray(positions, dtype=np.int64).reshape(-1, _AXES[modality]))
    return model.encode_rows(rows, p)


def reconstruction_sum(model: ReferenceModel, modality: str, h: torch.Tensor, inputs: np.ndarray,
                       masked: Sequence[bool]) -> tuple[torch.Tensor, int]:
    """(sum over masked rows of mean_k (head h + b - target)^2, masked rows)."""
    rows = [i for i, m in enumerate(masked) if m]
    if not rows:
        return torch.zeros((), dtype=model.dtype), 0
    x = torch.from_numpy(np.asarray(inputs, dtype=np.float64)[rows]).to(model.dtype)
    prediction = h[rows] @ model.weight(f"heads.{modality}.weight").T + model.weight(f"heads.{modality}.bias")
    return ((prediction - normalized_targets(x)) ** 2).mean(dim=1).sum(), len(rows)
