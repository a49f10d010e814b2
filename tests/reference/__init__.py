"""PyTorch reference of the uform model: the oracle the C library is tested against."""

from .model import (
    ReferenceModel,
    apply_rope,
    gelu,
    layer_norm,
    normalize,
    rope_angles,
    rope_group_sizes,
    write_random_checkpoint,
)
from .safetensors_io import bf16_bits_to_f32, f32_to_bf16_bits
from . import safetensors_io

__all__ = [
    "ReferenceModel",
    "apply_rope",
    "bf16_bits_to_f32",
    "f32_to_bf16_bits",
    "gelu",
    "layer_norm",
    "normalize",
    "rope_angles",
    "rope_group_sizes",
    "safetensors_io",
    "write_random_checkpoint",
]
