"""Random uform checkpoints of any shape, numpy only (no torch), for tests, demos and benchmarks."""

from __future__ import annotations

import json
import math
import os
from typing import Optional, Union

import numpy as np

from . import safetensors_io

HEAD_WIDTH = 64
BYTE_VALUES = 256
FORMAT_VERSION = 4

# Tensors stored in F32 whatever the rest of the checkpoint uses (DESIGN's table).
F32_TENSORS = (
    "contrastive.log_inverse_temperature", "contrastive.bias",
    "late_interaction.log_inverse_temperature", "late_interaction.bias",
    "choices.log_temperature",
)


def write_random_checkpoint(path: Union[str, os.PathLike], *, depth: int, hidden: int,
                            dimensions: int, context: int, token_width: int = 0,
                            byte_head: bool = False,
                            choice_temperature_groups: Optional[int] = None,
                            seed: int = 0) -> None:
    """Writes a text-only checkpoint with random weights, deterministic in `seed`.

    Scales keep every path of the math non-trivial: LayerNorm weights near 1, biases
    of 0.1, matrices N(0, 1/fan_in) so activations stay O(1), and q/k rows scaled up
    (score std ~2) so attention is clearly non-uniform yet far from overflow.
    """
    if hidden <= 0 or hidden % HEAD_WIDTH:
        raise ValueError(f"hidden {hidden} must be a positive multiple of {HEAD_WIDTH}")
    if depth < 0 or dimensions <= 0 or context <= 0 or token_width < 0:
        raise ValueError("depth >= 0, dimensions > 0, context > 0, token_width >= 0")
    if choice_temperature_groups is not None:
        if choice_temperature_groups < 0:
            raise ValueError("choice_temperature_groups must be >= 0")
        if choice_temperature_groups > 0 and not byte_head:
            # text_choose reads the byte logits: choices without a byte head cannot run.
            raise ValueError("choice_temperature_groups needs byte_head=True")

    rng = np.random.default_rng(seed)
    H = hidden

    def normal(*shape: int, scale: float = 1.0) -> np.ndarray:
        return rng.standard_normal(shape) * scale

    def matrix(rows: int, columns: int, gain: float = 1.0) -> np.ndarray:
        return normal(rows, columns, scale=gain / math.sqrt(columns))

    def norm(prefix: str) -> None:
        tensors[f"{prefix}.weight"] = 1.0 + normal(H, scale=0.1)
        tensors[f"{prefix}.bias"] = normal(H, scale=0.1)

    tensors: dict[str, np.ndarray] = {
        "text.bytes": normal(BYTE_VALUES + 1, H),
        "text.modality": normal(H, scale=0.5),
    }
    for layer in range(depth):
        block = f"blocks.{layer}"
        norm(f"{block}.attention.norm")
        qkv = matrix(3 * H, H)
        qkv[:2 * H] *= 1.5                  # q and k: scores q.k/8 get std ~1.5^2
        tensors[f"{block}.attention.qkv.weight"] = qkv
        tensors[f"{block}.attention.qkv.bias"] = normal(3 * H, scale=0.1)
        tensors[f"{block}.attention.out.weight"] = matrix(H, H)
        tensors[f"{block}.attention.out.bias"] = normal(H, scale=0.1)
        norm(f"{block}.mlp.norm")
        tensors[f"{block}.mlp.up.weight"] = matrix(4 * H, H)
        tensors[f"{block}.mlp.up.bias"] = normal(4 * H, scale=0.1)
        tensors[f"{block}.mlp.down.weight"] = matrix(H, 4 * H)
        tensors[f"{block}.mlp.down.bias"] = normal(H, scale=0.1)
    norm("norm")
    tensors["heads.embedding.weight"] = matrix(dimensions, H)
    if token_width > 0:
        tensors["heads.tokens.weight"] = matrix(token_width, H)
    if byte_head:
        tensors["heads.bytes.bias"] = normal(BYTE_VALUES, scale=0.1)
    if choice_temperature_groups:
        tensors["choices.log_temperature"] = normal(choice_temperature_groups, scale=0.3)

    if choice_temperature_groups is None:
        choice_temperature_groups = 1 if byte_head else 0
    config = {"version": FORMAT_VERSION, "depth": depth, "hidden": hidden,
              "dimensions": dimensions, "context": context, "token_width": token_width,
              "choice_temperature_groups": choice_temperature_groups, "step": 0}
    specs = {name: ("F32" if name in F32_TENSORS else "BF16", value.astype(np.float32))
             for name, value in tensors.items()}
    safetensors_io.write(path, specs, {"uform": json.dumps(config)})


def reference_from_trainer(trainer, directory) -> "ReferenceModel":
    """A uform.Trainer's FP32 master weights as a float64 ReferenceModel, through the
    trainer's own save (its train.master.* tensors and its metadata)."""
    import torch

    from .model import ReferenceModel

    path = os.path.join(directory, "start.safetensors")
    trainer.save(path)
    tensors, metadata = safetensors_io.read(path)
    masters = {name[len("train.master."):]: value.astype(np.float64)
               for name, (_, value) in tensors.items() if name.startswith("train.master.")}
    return ReferenceModel(masters, json.loads(metadata["uform"]), dtype=torch.float64)
