"""The PyTorch reference of the uform model (DESIGN section 5), the oracle for the C library.

It reads the same safetensors checkpoints and computes in float64 by default, one item at
a time (no packing: an item alone is exactly what a packed segment must reproduce).
Parameter names of the module are the checkpoint names, so `named_parameters()` and
gradients line up with the file's tensors one to one.
"""

from __future__ import annotations

import json
import math
import os
from typing import Optional, Sequence, Union

import numpy as np
import torch

from . import safetensors_io

HEAD_WIDTH = 64
PAIRS = HEAD_WIDTH // 2          # rotary pairs (x[j], x[j + 32]) per head
ROPE_BASE = 10000.0
NORM_EPS = 1e-5                  # LayerNorm
NORMALIZE_EPS = 1e-12            # L2 normalisation: x / max(|x|, eps)
BYTE_VALUES = 256
MASK = 256                       # row of text.bytes after the 256 byte values
FORMAT_VERSION = 4

from .checkpoint import F32_TENSORS, write_random_checkpoint  # noqa: E402,F401  (re-exported)


# ----------------------------------------------------------------------------- math

def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """LayerNorm over the last axis: biased variance, eps 1e-5, affine."""
    mean = x.mean(dim=-1, keepdim=True)
    variance = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(variance + NORM_EPS) * weight + bias


def gelu(x: torch.Tensor) -> torch.Tensor:
    """GELU in its tanh form."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def normalize(x: torch.Tensor) -> torch.Tensor:
    """L2-normalises the last axis: x / max(|x|, 1e-12), so a zero vector stays zero."""
    return x / torch.clamp(torch.linalg.vector_norm(x, dim=-1, keepdim=True), min=NORMALIZE_EPS)


def rope_group_sizes(axes: int) -> list[int]:
    """Pairs per position axis: 32 split into `axes` contiguous groups, the first 32 mod k
    groups one larger (k=1: 32; k=2: 16+16; k=3: 11+11+10)."""
    if not 1 <= axes <= PAIRS:
        raise ValueError(f"{axes} position axes: need 1..{PAIRS}")
    base, extra = divmod(PAIRS, axes)
    return [base + (1 if a < extra else 0) for a in range(axes)]


def rope_angles(positions: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Rotary angles [n, 32] for integer positions [n, k] (k axes in the item's axis order).

    Pair i of group a (n_a pairs) at position p_a turns by p_a * 10000^(-i/n_a).
    """
    if positions.dim() != 2:
        raise ValueError(f"positions must be [n, k], got shape {tuple(positions.shape)}")
    sizes = rope_group_sizes(positions.shape[1])
    axis = torch.cat([torch.full((n,), a, dtype=torch.long) for a, n in enumerate(sizes)])
    index = torch.cat([torch.arange(n, dtype=torch.float64) for n in sizes])
    count = torch.cat([torch.full((n,), float(n), dtype=torch.float64) for n in sizes])
    frequency = torch.pow(torch.tensor(ROPE_BASE, dtype=torch.float64), -index / count)
    return (positions[:, axis].to(torch.float64) * frequency).to(dtype)


def apply_rope(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Rotates pairs (x[j], x[j+32]) of every head: x [n, heads, 64], angles [n, 32]."""
    cos = torch.cos(angles).unsqueeze(1)      # broadcast over heads
    sin = torch.sin(angles).unsqueeze(1)
    first, second = x[..., :PAIRS], x[..., PAIRS:]
    return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)


# ----------------------------------------------------------------------------- model

class ReferenceModel(torch.nn.Module):
    """The uform encoder in plain PyTorch; parameter names are the checkpoint's tensor names."""

    def __init__(self, tensors: dict[str, np.ndarray], config: dict,
                 dtype: torch.dtype = torch.float64) -> None:
        super().__init__()
        self.config = dict(config)
        self.dtype = dtype
        for name, value in tensors.items():
            self._register(name, torch.nn.Parameter(torch.from_numpy(value).to(dtype)))
        self.hidden: int = int(tensors["text.bytes"].shape[1])
        self.heads_count: int = self.hidden // HEAD_WIDTH
        self.depth: int = int(config.get("depth", 0))
        self.context: int = int(config["context"])
        self.dimensions: int = int(tensors["heads.embedding.weight"].shape[0])
        self.token_width: int = (int(tensors["heads.tokens.weight"].shape[0])
                                 if "heads.tokens.weight" in tensors else 0)
        for layer in range(self.depth):
            self.weight(f"blocks.{layer}.attention.qkv.weight")     # fail early if missing

    def _register(self, name: str, parameter: torch.nn.Parameter) -> None:
        # Nested empty modules so that "blocks.0.mlp.up.weight" is a real parameter path.
        module: torch.nn.Module = self
        *path, leaf = name.split(".")
        for part in path:
            if not hasattr(module, part) or not isinstance(getattr(module, part), torch.nn.Module):
                module.add_module(part, torch.nn.Module())
            module = getattr(module, part)
        module.register_parameter(leaf, parameter)

    @classmethod
    def load(cls, path: Union[str, os.PathLike],
             dtype: torch.dtype = torch.float64) -> "ReferenceModel":
        """Loads a checkpoint; BF16 values are upcast exactly, `train.*` tensors ignored."""
        stored, metadata = safetensors_io.read(path)
        if "uform" not in metadata:
            raise ValueError(f"{os.fspath(path)!r}: no 'uform' entry in __metadata__")
        config = json.loads(metadata["uform"])
        if config.get("version") != FORMAT_VERSION:
            raise ValueError(f"checkpoint version {config.get('version')}, "
                             f"expected {FORMAT_VERSION}")
        tensors = {name: value for name, (_, value) in stored.items()
                   if not name.startswith("train.")}
        return cls(tensors, config, dtype)

    def weight(self, name: str) -> torch.Tensor:
        """The parameter stored under checkpoint name `name`."""
        return self.get_parameter(name)

    def has(self, name: str) -> bool:
        try:
            self.get_parameter(name)
            return True
        except AttributeError:
            return False

    # -- the shared encoder, for any modality

    def attention(self, layer: int, x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
        """The attention residual of block `layer` for one item's rows x [n, H]."""
        p = f"blocks.{layer}.attention"
        n, H, A = x.shape[0], self.hidden, self.heads_count
        y = layer_norm(x, self.weight(f"{p}.norm.weight"), self.weight(f"{p}.norm.bias"))
        qkv = y @ self.weight(f"{p}.qkv.weight").T + self.weight(f"{p}.qkv.bias")
        # Columns [s*H + 64a, s*H + 64a + 64) are part s (q, k, v) of head a.
        q, k, v = (part.reshape(n, A, HEAD_WIDTH) for part in qkv.split(H, dim=1))
        q, k = apply_rope(q, angles), apply_rope(k, angles)
        scores = torch.einsum("iad,jad->aij", q, k) / math.sqrt(HEAD_WIDTH)
        probabilities = torch.softmax(scores, dim=-1)     # bidirectional: no mask
        heads = torch.einsum("aij,jad->iad", probabilities, v).reshape(n, H)
        return heads @ self.weight(f"{p}.out.weight").T + self.weight(f"{p}.out.bias")

    def mlp(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """The MLP residual of block `layer`."""
        p = f"blocks.{layer}.mlp"
        y = layer_norm(x, self.weight(f"{p}.norm.weight"), self.weight(f"{p}.norm.bias"))
        y = gelu(y @ self.weight(f"{p}.up.weight").T + self.weight(f"{p}.up.bias"))
        return y @ self.weight(f"{p}.down.weight").T + self.weight(f"{p}.down.bias")

    def encode_rows(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Final normed states h [n, H] of one item's token rows x [n, H] (modality vector
        already added) at integer positions [n, k]."""
        angles = rope_angles(positions, self.dtype)
        for layer in range(self.depth):
            x = x + self.attention(layer, x, angles)
            x = x + self.mlp(layer, x)
        return layer_norm(x, self.weight("norm.weight"), self.weight("norm.bias"))

    def pool(self, h: torch.Tensor) -> torch.Tensor:
        """The embedding [D] of an item's states: normalize(W_embedding mean_t h_t);
        zero for an item without tokens."""
        mean = h.mean(dim=0) if h.shape[0] else h.new_zeros(self.hidden)
        return normalize(self.weight("heads.embedding.weight") @ mean)

    def token_vectors(self, h: torch.Tensor) -> Optional[torch.Tensor]:
        """normalize(W_tokens h_t) per token [n, W], or None without a token head."""
        if not self.token_width:
            return None
        return normalize(h @ self.weight("heads.tokens.weight").T)

    # -- text

    def text_tokens(self, text: Union[bytes, str]) -> torch.Tensor:
        """Byte ids [n] of a text: its UTF-8 bytes, cut at `context`."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        return torch.tensor(list(data[:self.context]), dtype=torch.long)

    def text_hidden(self, ids: torch.Tensor) -> torch.Tensor:
        """Final states [n, H] of a text given as token ids (bytes, or MASK = 256)."""
        x = self.weight("text.bytes")[ids] + self.weight("text.modality")
        positions = torch.arange(ids.shape[0], dtype=torch.long).unsqueeze(1)
        return self.encode_rows(x, positions)

    def text_encode(self, texts: Sequence[Union[bytes, str]]
                    ) -> tuple[torch.Tensor, Optional[list[torch.Tensor]]]:
        """(embeddings [n, D], token vectors: one [n_i, W] per text, or None without a
        token head)."""
        embeddings, tokens = [], []
        for text in texts:
            h = self.text_hidden(self.text_tokens(text))
            embeddings.append(self.pool(h))
            tokens.append(self.token_vectors(h))
        stacked = (torch.stack(embeddings) if embeddings
                   else torch.zeros(0, self.dimensions, dtype=self.dtype))
        return stacked, (tokens if self.token_width else None)

    def byte_logits(self, text: Union[bytes, str]) -> torch.Tensor:
        """Byte logits [n, 256] per token: h @ text.bytes[0:256]^T + heads.bytes.bias."""
        if not self.has("heads.bytes.bias"):
            raise ValueError("the checkpoint has no byte head (heads.bytes.bias)")
        h = self.text_hidden(self.text_tokens(text))
        return h @ self.weight("text.bytes")[:BYTE_VALUES].T + self.weight("heads.bytes.bias")

    def text_choose(self, text: Union[bytes, str], choices: bytes, group: int = 0) -> torch.Tensor:
        """Probabilities [len(choices)] of single-byte choices after a text (DESIGN section 5).

        The text's bytes cut to context - 1, then MASK at the next position (its index is the
        number of bytes kept); the byte logits at MASK, h . text.bytes[c] + heads.bytes.bias[c],
        for the choice bytes c only, divided by exp(choices.log_temperature[group]) (1 when the
        checkpoint has no such tensor), softmaxed."""
        if not self.has("heads.bytes.bias"):
            raise ValueError("the checkpoint has no byte head (heads.bytes.bias)")
        chosen = torch.tensor(list(bytes(choices)), dtype=torch.long)
        if chosen.numel() == 0 or len(set(chosen.tolist())) != chosen.numel():
            raise ValueError("choices must be distinct bytes, at least one")
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        kept = list(data[:self.context - 1])
        ids = torch.tensor(kept + [MASK], dtype=torch.long)   # positions 0 .. len(kept)
        h = self.text_hidden(ids)[-1]
        logits = self.weight("text.bytes")[chosen] @ h + self.weight("heads.bytes.bias")[chosen]
        temperature = (torch.exp(self.weight("choices.log_temperature")[group])
                       if self.has("choices.log_temperature") else torch.ones((), dtype=self.dtype))
        return torch.softmax(logits / temperature, dim=0)
