"""A batched, throughput-minded PyTorch implementation of the uform text encoder.

`ReferenceModel` (model.py) is the oracle: float64, one text at a time, every step
spelled out. This module is what a competent PyTorch user would write to serve the
same checkpoint fast, and is what the benchmarks in bench/ compare libuform against:

* texts are sorted by length and run in mini-batches (32 by default) padded only to the
  longest text of their mini-batch, so little work is spent on padding;
* fused library ops: F.embedding, F.layer_norm, F.linear, F.gelu(approximate="tanh"),
  F.scaled_dot_product_attention with a boolean key-padding mask [B, 1, 1, L];
* rotary cos/sin precomputed once for positions 0..context-1 (pairs (x[j], x[j+32]),
  pair i turning by p * 10000^(-i/32), as model.rope_angles for one position axis);
* mean pooling over real tokens only, the embedding head, L2 normalisation
  (x / max(|x|, 1e-12), as model.normalize);
* everything under torch.inference_mode(), optionally inside
  torch.autocast("cpu", dtype=torch.bfloat16) -- PyTorch's fastest CPU mode.

The math is the reference's (checked in bench/test_text_encode_bench.py: FP32 output
within 1e-4 of ReferenceModel.text_encode).
"""

from __future__ import annotations

import contextlib
import os
from typing import Optional, Sequence, Union

import numpy as np
import torch
import torch.nn.functional as F

from .model import HEAD_WIDTH, NORM_EPS, NORMALIZE_EPS, PAIRS, ReferenceModel, rope_angles


class BatchedTorchModel:
    """The uform text encoder over padded mini-batches; `encode` answers [n, D] float32."""

    def __init__(self, reference: ReferenceModel, dtype: torch.dtype = torch.float32, *,
                 autocast: bool = False, max_batch: int = 32) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.dtype = dtype
        self.autocast = autocast
        self.max_batch = max_batch
        self.hidden = reference.hidden
        self.heads_count = reference.heads_count
        self.depth = reference.depth
        self.context = reference.context
        self.dimensions = reference.dimensions

        def tensor(name: str) -> torch.Tensor:
            return reference.weight(name).detach().to(dtype).contiguous()

        self.byte_table = tensor("text.bytes")            # [257, H]
        self.modality = tensor("text.modality")           # [H]
        self.layers = []
        for layer in range(self.depth):
            a, m = f"blocks.{layer}.attention", f"blocks.{layer}.mlp"
            self.layers.append({
                "attention_norm": (tensor(f"{a}.norm.weight"), tensor(f"{a}.norm.bias")),
                "qkv": (tensor(f"{a}.qkv.weight"), tensor(f"{a}.qkv.bias")),
                "out": (tensor(f"{a}.out.weight"), tensor(f"{a}.out.bias")),
                "mlp_norm": (tensor(f"{m}.norm.weight"), tensor(f"{m}.norm.bias")),
                "up": (tensor(f"{m}.up.weight"), tensor(f"{m}.up.bias")),
                "down": (tensor(f"{m}.down.weight"), tensor(f"{m}.down.bias")),
            })
        self.final_norm = (tensor("norm.weight"), tensor("norm.bias"))
        self.embedding_head = tensor("heads.embedding.weight")   # [D, H]

        # Rotary tables for positions 0..context-1, computed in float64 like the reference.
        positions = torch.arange(self.context, dtype=torch.long).unsqueeze(1)
        angles = rope_angles(positions, torch.float64)             # [context, 32]
        self._rope = {}
        self._cos64, self._sin64 = torch.cos(angles), torch.sin(angles)

    @classmethod
    def from_checkpoint(cls, path: Union[str, os.PathLike], dtype: torch.dtype = torch.float32,
                        *, autocast: bool = False, max_batch: int = 32) -> "BatchedTorchModel":
        """Reads a safetensors checkpoint (BF16 weights upcast exactly to `dtype`)."""
        return cls(ReferenceModel.load(path, dtype=torch.float32), dtype,
                   autocast=autocast, max_batch=max_batch)

    # ---------------------------------------------------------------- pieces

    def _rope_tables(self, length: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [length, 32] in `dtype` (cached per dtype, sliced per length)."""
        if dtype not in self._rope:
            self._rope[dtype] = (self._cos64.to(dtype), self._sin64.to(dtype))
        cos, sin = self._rope[dtype]
        return cos[:length], sin[:length]

    def _apply_rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Rotates pairs (x[j], x[j+32]) of x [B, heads, L, 64]; cos, sin [L, 32]."""
        first, second = x[..., :PAIRS], x[..., PAIRS:]
        return torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)

    def _forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Embeddings [B, D] of a padded mini-batch: ids [B, L] (0 past each length)."""
        B, L = ids.shape
        H, A = self.hidden, self.heads_count
        valid = torch.arange(L).unsqueeze(0) < lengths.unsqueeze(1)            # [B, L]
        key_mask = valid.view(B, 1, 1, L)                                      # True: attend
        x = F.embedding(ids, self.byte_table) + self.modality                 # [B, L, H]
        cos = sin = None
        for weights in self.layers:
            y = F.layer_norm(x, (H,), *weights["attention_norm"], eps=NORM_EPS)
            qkv = F.linear(y, *weights["qkv"])                                  # [B, L, 3H]
            q, k, v = qkv.view(B, L, 3, A, HEAD_WIDTH).permute(2, 0, 3, 1, 4).unbind(0)
            if cos is None or cos.dtype != q.dtype:
                cos, sin = self._rope_tables(L, q.dtype)
            q, k = self._apply_rope(q, cos, sin), self._apply_rope(k, cos, sin)
            heads = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask)  # [B, A, L, 64]
            heads = heads.transpose(1, 2).reshape(B, L, H)
            x = x + F.linear(heads, *weights["out"])
            y = F.layer_norm(x, (H,), *weights["mlp_norm"], eps=NORM_EPS)
            y = F.gelu(F.linear(y, *weights["up"]), approximate="tanh")
            x = x + F.linear(y, *weights["down"])
        h = F.layer_norm(x, (H,), *self.final_norm, eps=NORM_EPS)
        weights = valid.unsqueeze(-1).to(h.dtype)
        mean = (h * weights).sum(dim=1) / lengths.clamp(min=1).unsqueeze(1).to(h.dtype)
        embedding = F.linear(mean, self.embedding_head)
        return F.normalize(embedding.float(), dim=-1, eps=NORMALIZE_EPS)

    # ---------------------------------------------------------------- encode

    def encode(self, texts: Sequence[Union[bytes, str]], *,
               autocast: Optional[bool] = None) -> torch.Tensor:
        """Embeddings [n, D] (float32) in the order of `texts`; empty texts embed as zeros."""
        use_autocast = self.autocast if autocast is None else autocast
        data = [t.encode("utf-8") if isinstance(t, str) else bytes(t) for t in texts]
        data = [d[:self.context] for d in data]
        result = torch.zeros(len(data), self.dimensions, dtype=torch.float32)
        order = sorted((i for i, d in enumerate(data) if d), key=lambda i: len(data[i]))
        region = (torch.autocast("cpu", dtype=torch.bfloat16) if use_autocast
                  else contextlib.nullcontext())
        with torch.inference_mode(), region:
            for start in range(0, len(order), self.max_batch):
                chunk = order[start:start + self.max_batch]
                lengths = np.array([len(data[i]) for i in chunk], dtype=np.int64)
                ids = np.zeros((len(chunk), int(lengths.max())), dtype=np.int64)
                for row, i in enumerate(chunk):
                    ids[row, :lengths[row]] = np.frombuffer(data[i], dtype=np.uint8)
                embeddings = self._forward(torch.from_numpy(ids), torch.from_numpy(lengths))
                result[torch.tensor(chunk)] = embeddings
        return result
