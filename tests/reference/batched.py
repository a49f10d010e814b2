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
* `choose` (text_choose): each text cut to context - 1 bytes with MASK (id 256) appended,
  the same padded mini-batches, the MASK rows' states gathered, all 256 byte logits in one
  GEMM against the tied byte table, the chosen ones gathered (padded to the longest choice
  list with -inf), divided by the texts' group temperatures and softmaxed;
* everything under torch.inference_mode(), optionally inside
  torch.autocast("cpu", dtype=torch.bfloat16) -- PyTorch's fastest CPU mode -- with the
  linear layers' weights cast to BF16 once rather than by autocast on every call.

The math is the reference's (checked in bench/test_text_encode_bench.py: FP32 output
within 1e-4 of ReferenceModel.text_encode; bench/test_choose_bench.py: FP32 probabilities
within 1e-4 of ReferenceModel.text_choose).
"""

from __future__ import annotations

import contextlib
import os
from typing import Optional, Sequence, Union

import numpy as np
import torch
import torch.nn.functional as F

from .model import BYTE_VALUES, HEAD_WIDTH, MASK, NORM_EPS, NORMALIZE_EPS, PAIRS, ReferenceModel, rope_angles


class BatchedTorchModel:
    """The uform text encoder over padded mini-batches; `encode` answers [n, D] float32."""

    def __init__(self, reference: ReferenceModel, dtype: torch.dtype = torch.float32, *,
                 autocast: bool = False, max_batch: int = 32, device: str = "cpu") -> None:
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
        # `encode` runs on this device ("cuda" for bench/gpu_report.py); `choose` on the CPU only.
        self.device = torch.device(device)

        def tensor(name: str) -> torch.Tensor:
            return reference.weight(name).detach().to(dtype).contiguous().to(self.device)

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
        # The byte head (tied to text.bytes) and the choice temperatures, when present.
        self.bytes_bias = tensor("heads.bytes.bias") if reference.has("heads.bytes.bias") else None
        self.log_temperature = (tensor("choices.log_temperature")
                                if reference.has("choices.log_temperature") else None)
        # Autocast rounds every F.linear operand to BF16 on every call (its weight cache
        # only serves tensors that require grad, outside inference mode). Keeping BF16
        # copies of the linear weights and biases spares those casts; the math is the
        # same, as autocast would round them identically.
        self._linear_bf16: Optional[tuple[list, torch.Tensor]] = None

        # Rotary tables for positions 0..context-1, computed in float64 like the reference.
        positions = torch.arange(self.context, dtype=torch.long).unsqueeze(1)
        angles = rope_angles(positions, torch.float64)             # [context, 32]
        self._rope: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor]] = {}
        self._cos64, self._sin64 = torch.cos(angles).to(self.device), torch.sin(angles).to(self.device)

    @classmethod
    def from_checkpoint(cls, path: Union[str, os.PathLike], dtype: torch.dtype = torch.float32,
                        *, autocast: bool = False, max_batch: int = 32,
                        device: str = "cpu") -> "BatchedTorchModel":
        """Reads a safetensors checkpoint (BF16 weights upcast exactly to `dtype`)."""
        return cls(ReferenceModel.load(path, dtype=torch.float32), dtype,
                   autocast=autocast, max_batch=max_batch, device=device)

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

    def _norm(self, x: torch.Tensor, pair: tuple) -> torch.Tensor:
        return F.layer_norm(x, (self.hidden,), weight=pair[0], bias=pair[1], eps=NORM_EPS)

    def _linear_weights(self, autocast: bool) -> tuple[list, torch.Tensor]:
        """(per-layer dicts of (weight, bias) and the embedding head) for F.linear: BF16
        copies inside autocast (made once), the model's own tensors otherwise."""
        if not autocast or self.dtype == torch.bfloat16:
            return self.layers, self.embedding_head
        if self._linear_bf16 is None:
            def bf16(pair: tuple) -> tuple:
                return tuple(t.to(torch.bfloat16) for t in pair)
            layers = [{**layer, **{name: bf16(layer[name]) for name in ("qkv", "out", "up", "down")}}
                      for layer in self.layers]
            self._linear_bf16 = (layers, self.embedding_head.to(torch.bfloat16))
        return self._linear_bf16

    def _forward(self, ids: torch.Tensor, lengths: torch.Tensor, autocast: bool = False) -> torch.Tensor:
        """Embeddings [B, D] of a padded mini-batch: ids [B, L] (0 past each length)."""
        h, valid = self._states(ids, lengths, autocast)
        _, embedding_head = self._linear_weights(autocast)
        real = valid.unsqueeze(-1).to(h.dtype)                                 # [B, L, 1]
        mean = (h * real).sum(dim=1) / lengths.clamp(min=1).unsqueeze(1).to(h.dtype)
        embedding = F.linear(mean, embedding_head)
        return F.normalize(embedding.float(), dim=-1, eps=NORMALIZE_EPS)

    def _states(self, ids: torch.Tensor, lengths: torch.Tensor,
                autocast: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """(final normed states h [B, L, H], valid [B, L]) of a padded mini-batch."""
        B, L = ids.shape
        H, A = self.hidden, self.heads_count
        layers, _ = self._linear_weights(autocast)
        valid = torch.arange(L, device=ids.device).unsqueeze(0) < lengths.unsqueeze(1)  # [B, L]
        key_mask = valid.view(B, 1, 1, L)                                      # True: attend
        x = F.embedding(ids, self.byte_table) + self.modality                 # [B, L, H]
        rope: Optional[tuple[torch.Tensor, torch.Tensor]] = None
        for weights in layers:
            y = self._norm(x, weights["attention_norm"])
            qkv = F.linear(y, *weights["qkv"])                                  # [B, L, 3H]
            q, k, v = qkv.view(B, L, 3, A, HEAD_WIDTH).permute(2, 0, 3, 1, 4).unbind(0)
            if rope is None or rope[0].dtype != q.dtype:
                rope = self._rope_tables(L, q.dtype)
            q, k = self._apply_rope(q, *rope), self._apply_rope(k, *rope)
            heads = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask)  # [B, A, L, 64]
            heads = heads.transpose(1, 2).reshape(B, L, H)
            x = x + F.linear(heads, *weights["out"])
            y = self._norm(x, weights["mlp_norm"])
            y = F.gelu(F.linear(y, *weights["up"]), approximate="tanh")
            x = x + F.linear(y, *weights["down"])
        return self._norm(x, self.final_norm), valid

    # ---------------------------------------------------------------- encode

    def encode(self, texts: Sequence[Union[bytes, str]], *,
               autocast: Optional[bool] = None) -> torch.Tensor:
        """Embeddings [n, D] (float32) in the order of `texts`; empty texts embed as zeros."""
        use_autocast = self.autocast if autocast is None else autocast
        data = [t.encode("utf-8") if isinstance(t, str) else bytes(t) for t in texts]
        data = [d[:self.context] for d in data]
        result = torch.zeros(len(data), self.dimensions, dtype=torch.float32)
        order = sorted((i for i, d in enumerate(data) if d), key=lambda i: len(data[i]))
        region = (torch.autocast(self.device.type, dtype=torch.bfloat16) if use_autocast
                  else contextlib.nullcontext())
        with torch.inference_mode(), region:
            for start in range(0, len(order), self.max_batch):
                chunk = order[start:start + self.max_batch]
                lengths = np.array([len(data[i]) for i in chunk], dtype=np.int64)
                ids = np.zeros((len(chunk), int(lengths.max())), dtype=np.int64)
                for row, i in enumerate(chunk):
                    ids[row, :lengths[row]] = np.frombuffer(data[i], dtype=np.uint8)
                embeddings = self._forward(torch.from_numpy(ids).to(self.device),
                                           torch.from_numpy(lengths).to(self.device), use_autocast)
                result[torch.tensor(chunk)] = embeddings.cpu()
        return result

    # ---------------------------------------------------------------- choose

    def choose(self, texts: Sequence[Union[bytes, str]], choices: Sequence[bytes],
               groups: Optional[Sequence[int]] = None, *,
               autocast: Optional[bool] = None) -> tuple[torch.Tensor, np.ndarray]:
        """text_choose: (probabilities float32, flat, offsets [n + 1]) of each text's
        single-byte choices; `choices` holds one bytes per text (or a single shared one)."""
        if self.bytes_bias is None:
            raise ValueError("the checkpoint has no byte head (heads.bytes.bias)")
        if self.device.type != "cpu":
            raise ValueError("choose runs on the CPU only")
        use_autocast = self.autocast if autocast is None else autocast
        data = [t.encode("utf-8") if isinstance(t, str) else bytes(t) for t in texts]
        data = [d[:self.context - 1] for d in data]
        entries = [bytes(c) for c in choices]
        if len(entries) == 1:
            entries = entries * len(data)
        counts = np.array([len(c) for c in entries], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(counts)])
        widest = int(counts.max())
        chosen = torch.zeros(len(data), widest, dtype=torch.long)        # padded with byte 0
        for i, entry in enumerate(entries):
            chosen[i, :len(entry)] = torch.frombuffer(bytearray(entry), dtype=torch.uint8).long()
        present = torch.arange(widest).unsqueeze(0) < torch.from_numpy(counts).unsqueeze(1)
        temperature = torch.ones(len(data), dtype=torch.float32)
        if self.log_temperature is not None:
            index = torch.tensor(list(groups) if groups is not None else [0] * len(data), dtype=torch.long)
            temperature = torch.exp(self.log_temperature.float()[index])

        masked = torch.zeros(len(data), self.hidden, dtype=torch.float32)  # h at MASK per text
        order = sorted(range(len(data)), key=lambda i: len(data[i]))
        region = (torch.autocast(self.device.type, dtype=torch.bfloat16) if use_autocast
                  else contextlib.nullcontext())
        with torch.inference_mode(), region:
            for start in range(0, len(order), self.max_batch):
                chunk = order[start:start + self.max_batch]
                lengths = np.array([len(data[i]) + 1 for i in chunk], dtype=np.int64)
                ids = np.zeros((len(chunk), int(lengths.max())), dtype=np.int64)
                for row, i in enumerate(chunk):
                    ids[row, :lengths[row] - 1] = np.frombuffer(data[i], dtype=np.uint8)
                    ids[row, lengths[row] - 1] = MASK
                h, _ = self._states(torch.from_numpy(ids), torch.from_numpy(lengths), use_autocast)
                last = torch.from_numpy(lengths - 1)
                masked[torch.tensor(chunk)] = h[torch.arange(len(chunk)), last].float()
            # Every byte's logit in one GEMM (cheap: 256 columns), then the chosen ones.
            logits = F.linear(masked, self.byte_table[:BYTE_VALUES].float(), self.bytes_bias.float())
            picked = logits.gather(1, chosen).masked_fill(~present, float("-inf"))
            probabilities = torch.softmax(picked / temperature.unsqueeze(1), dim=1)
        return probabilities[present].float(), offsets
