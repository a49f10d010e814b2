"""Random uform checkpoints with image, video and audio parts (numpy only), for tests.

Built on `checkpoint.write_random_checkpoint`: that writes the text model and the
shared blocks, this adds each media modality's tensors (DESIGN section 5) and its
shape object in `__metadata__["uform"]`, and can drop the text parts.
"""

from __future__ import annotations

import json
import math
import os
from typing import Optional, Union

import numpy as np

from . import safetensors_io
from .checkpoint import write_random_checkpoint

CHANNELS = 3


def write_random_media_checkpoint(path: Union[str, os.PathLike], *, depth: int, hidden: int,
                                  dimensions: int, context: int, token_width: int = 0,
                                  image: Optional[dict] = None, video: Optional[dict] = None,
                                  audio: Optional[dict] = None, text: bool = True,
                                  seed: int = 0, metadata_shapes: Optional[dict] = None) -> None:
    """Writes a checkpoint with the requested modalities.

    image: {"patch_side": P}; video: {"patch_side": P, "tube_frames": T, "frame_stride": k};
    audio: {"chunk_samples": S, "sample_rate": R}. Tensors are drawn from `seed` after the
    text model's, so two checkpoints with one seed share every common tensor.
    metadata_shapes, when given, replaces the shape objects written to the metadata
    (to write deliberately inconsistent checkpoints).
    """
    write_random_checkpoint(path, depth=depth, hidden=hidden, dimensions=dimensions,
                            context=context, token_width=token_width, seed=seed)
    stored, metadata = safetensors_io.read(path)
    config = json.loads(metadata["uform"])
    tensors = {name: (dtype, value) for name, (dtype, value) in stored.items()}
    if not text:
        del tensors["text.bytes"], tensors["text.modality"]

    rng = np.random.default_rng([seed, 4242])
    H = hidden

    def add(modality: str, part: str, width: int) -> None:
        # Inputs are O(1) (pixels in [-1, 1], samples in [-1, 1]): N(0, 2/width) rows keep
        # the projected rows O(1), comparable to the text byte rows.
        weight = rng.standard_normal((H, width)) * math.sqrt(2.0 / width)
        tensors[f"{modality}.{part}.weight"] = ("BF16", weight.astype(np.float32))
        tensors[f"{modality}.{part}.bias"] = ("BF16", (rng.standard_normal(H) * 0.1).astype(np.float32))
        tensors[f"{modality}.modality"] = ("BF16", (rng.standard_normal(H) * 0.5).astype(np.float32))

    if image is not None:
        P = image["patch_side"]
        add("image", "patch", P * P * CHANNELS)
        config["image"] = {"patch_side": P, "channels": CHANNELS}
    if video is not None:
        P, T = video["patch_side"], video["tube_frames"]
        add("video", "tube", T * P * P * CHANNELS)
        config["video"] = {"patch_side": P, "tube_frames": T,
                           "frame_stride": video.get("frame_stride", 1), "channels": CHANNELS}
    if audio is not None:
        add("audio", "chunk", audio["chunk_samples"])
        config["audio"] = {"chunk_samples": audio["chunk_samples"],
                           "sample_rate": audio["sample_rate"]}
    if metadata_shapes is not None:
        for key in ("image", "video", "audio"):
            config.pop(key, None)
        config.update(metadata_shapes)
    safetensors_io.write(path, tensors, {"uform": json.dumps(config)})
