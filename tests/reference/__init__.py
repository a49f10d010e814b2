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
from .training import (
    clip_,
    contrastive_loss,
    corrupt_texts,
    decays,
    embeddings,
    learning_rate_at,
    mask_text,
    masked_text_loss,
    param_groups,
    random_bits,
    uniform,
)
from . import safetensors_io, training

__all__ = [
    "ReferenceModel",
    "apply_rope",
    "bf16_bits_to_f32",
    "clip_",
    "contrastive_loss",
    "corrupt_texts",
    "decays",
    "embeddings",
    "f32_to_bf16_bits",
    "gelu",
    "layer_norm",
    "learning_rate_at",
    "mask_text",
    "masked_text_loss",
    "normalize",
    "param_groups",
    "random_bits",
    "rope_angles",
    "rope_group_sizes",
    "safetensors_io",
    "training",
    "uniform",
    "write_random_checkpoint",
]
