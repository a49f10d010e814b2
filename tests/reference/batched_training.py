"""A batched, throughput-minded PyTorch training step of the uform text encoder.

`training.py` is the oracle of the objectives: float64, one item at a time, loops over
anchors. This module is what a competent PyTorch user would write to train the same model
on the same objective fast, and is what bench/train_report.py compares the uform trainer
against:

* `BatchedTrainingModel`, an `nn.Module` whose parameter names are the checkpoint's tensor
  names (`text.bytes`, `blocks.0.attention.qkv.weight`, ..., `contrastive.bias`), so a
  trainer's save (its `train.master.*` FP32 tensors) loads with `load_state_dict`;
* one forward over a padded batch [B, L]: `nn.LayerNorm`, `nn.Linear`, tanh `F.gelu`,
  rotary cos/sin precomputed once (as batched.py), `F.scaled_dot_product_attention` with
  a boolean key-padding mask [B, 1, 1, L] (no mask when no row is padded);
* the JOINT loss of docs/training.md: byte cross-entropy (`F.cross_entropy`) at the
  selected positions, logits tied to `text.bytes[0:256]` plus `heads.bytes.bias`, plus
  the BALANCED contrastive term over bags, vectorised (score matrix, positives mask from
  the bag ids, row-wise `log_softmax` without the diagonal), mean over Matryoshka widths;
* `BatchedTrainer.step`: `loss.backward()`, `torch.nn.utils.clip_grad_norm_(..., 1.0)`,
  `torch.optim.AdamW` (betas 0.9/0.999, eps 1e-8, weight decay 0.01 on rank-2 tensors
  except `text.bytes`; PyTorch's default implementation choice, for CPU tensors the
  per-tensor loop) with the trainer's warmup + cosine learning rate; FP32, or inside
  `torch.autocast` (BF16) on the parameters' device: the CPU, or a GPU for
  bench/gpu_train_report.py (`model.to("cuda")`, `batch_on(batch, "cuda")`).

The corruption of the input (which positions are selected, what they become) is the
counter-based RNG of docs/training.md section 1, computed by `training.mask_text` in
`prepare_batch`: pure-Python data preparation, done outside the timed step, giving the
same masks the uform trainer draws inside its own step.

Scope: text items, bags as the only relations, ambient negatives of weight 1 (the
trainer's defaults), one temperature group by default. The math is the reference's
(bench/test_train_bench.py: the FP32 loss within 1e-4 of training.py's float64 loss on
the same masks, and of the uform trainer's own step).
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import NamedTuple, Optional, Sequence, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from . import safetensors_io
from .model import BYTE_VALUES, HEAD_WIDTH, NORM_EPS, NORMALIZE_EPS, PAIRS, rope_angles
from .training import ADAMW_BETAS, ADAMW_EPS, MAX_GRAD_NORM, WEIGHT_DECAY, decays, learning_rate_at, mask_text


# ----------------------------------------------------------------------------- data

class TrainingBatch(NamedTuple):
    """One step's input as padded tensors; every field [B, L] is 0 / False past a length."""
    ids: torch.Tensor        # [B, L] long: corrupted token ids (bytes or MASK = 256), the forward input
    targets: torch.Tensor    # [B, L] long: the original bytes
    selected: torch.Tensor   # [B, L] bool: where the masked-text loss is taken
    lengths: torch.Tensor    # [B] long, each >= 1
    bags: torch.Tensor       # [B] long: bag id per item (positives: same bag)


def batch_on(batch: TrainingBatch, device: Union[str, torch.device]) -> TrainingBatch:
    """The same batch with every tensor on `device` (a GPU run's input)."""
    return TrainingBatch(*(tensor.to(device) for tensor in batch))


def prepare_batch(texts: Sequence[Union[bytes, str]], bags: Sequence[int], *, seed: int, step: int,
                  context: int, first_item: int = 0, **masking: float) -> TrainingBatch:
    """Cuts each text at `context`, corrupts it as the trainer's optimizer step `step`
    (counted from 1) with run seed `seed` does (training.mask_text, item first_item + i),
    and pads the batch to its longest text. Slow (pure Python RNG): data preparation."""
    data = [t.encode("utf-8") if isinstance(t, str) else bytes(t) for t in texts]
    data = [d[:context] for d in data]
    if not data or any(len(d) == 0 for d in data):
        raise ValueError("prepare_batch: every text needs at least one byte")
    if len(bags) != len(data):
        raise ValueError(f"{len(bags)} bag ids for {len(data)} texts")
    lengths = np.array([len(d) for d in data], dtype=np.int64)
    length = int(lengths.max())
    ids = np.zeros((len(data), length), dtype=np.int64)
    targets = np.zeros((len(data), length), dtype=np.int64)
    selected = np.zeros((len(data), length), dtype=bool)
    for row, d in enumerate(data):
        corrupted, chosen = mask_text(d, seed=seed, step=step, item=first_item + row, **masking)
        n = len(d)
        ids[row, :n] = corrupted
        targets[row, :n] = np.frombuffer(d, dtype=np.uint8)
        selected[row, :n] = chosen
    return TrainingBatch(torch.from_numpy(ids), torch.from_numpy(targets), torch.from_numpy(selected),
                         torch.from_numpy(lengths), torch.tensor([int(b) for b in bags], dtype=torch.long))


# ----------------------------------------------------------------------------- model

class Attention(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=NORM_EPS)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)


class MLP(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=NORM_EPS)
        self.up = nn.Linear(hidden, 4 * hidden)
        self.down = nn.Linear(4 * hidden, hidden)


class Block(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.attention = Attention(hidden)
        self.mlp = MLP(hidden)


class BatchedTrainingModel(nn.Module):
    """The uform text encoder with its byte head and contrastive parameters, FP32."""

    def __init__(self, *, depth: int, hidden: int, dimensions: int, context: int,
                 temperature_groups: int = 1, widths: Optional[Sequence[int]] = None) -> None:
        super().__init__()
        if hidden % HEAD_WIDTH:
            raise ValueError(f"hidden {hidden} must be a multiple of {HEAD_WIDTH}")
        self.depth, self.hidden, self.dimensions, self.context = depth, hidden, dimensions, context
        self.heads_count = hidden // HEAD_WIDTH
        self.widths = [dimensions] if widths is None else [int(w) for w in widths]
        if not self.widths or any(not 1 <= w <= dimensions for w in self.widths):
            raise ValueError(f"widths must be non-empty, each in [1, {dimensions}]")

        self.text = nn.Module()
        self.text.bytes = nn.Parameter(torch.zeros(BYTE_VALUES + 1, hidden))     # 256 bytes + MASK
        self.text.modality = nn.Parameter(torch.zeros(hidden))
        self.blocks = nn.ModuleList(Block(hidden) for _ in range(depth))
        self.norm = nn.LayerNorm(hidden, eps=NORM_EPS)
        self.heads = nn.Module()
        self.heads.embedding = nn.Linear(hidden, dimensions, bias=False)
        self.heads.bytes = nn.Module()
        self.heads.bytes.bias = nn.Parameter(torch.zeros(BYTE_VALUES))
        self.contrastive = nn.Module()
        self.contrastive.log_inverse_temperature = nn.Parameter(torch.zeros(temperature_groups))
        self.contrastive.bias = nn.Parameter(torch.zeros(temperature_groups))

        angles = rope_angles(torch.arange(context, dtype=torch.long).unsqueeze(1), torch.float64)
        self.register_buffer("rope_cos", torch.cos(angles).float(), persistent=False)   # [context, 32]
        self.register_buffer("rope_sin", torch.sin(angles).float(), persistent=False)

    @classmethod
    def from_tensors(cls, tensors: dict, config: dict, **keywords) -> "BatchedTrainingModel":
        """A model holding `tensors` (checkpoint names -> arrays, cast to FP32)."""
        model = cls(depth=int(config["depth"]), hidden=int(tensors["text.bytes"].shape[1]),
                    dimensions=int(tensors["heads.embedding.weight"].shape[0]),
                    context=int(config["context"]),
                    temperature_groups=int(tensors["contrastive.log_inverse_temperature"].shape[0]),
                    **keywords)
        state = {name: torch.as_tensor(np.asarray(value, dtype=np.float32)) for name, value in tensors.items()}
        model.load_state_dict(state, strict=True)
        return model

    @classmethod
    def from_trainer_save(cls, path: Union[str, os.PathLike], **keywords) -> "BatchedTrainingModel":
        """The FP32 master weights (`train.master.*`) of a uform trainer's save."""
        stored, metadata = safetensors_io.read(path)
        prefix = "train.master."
        tensors = {name[len(prefix):]: value for name, (_, value) in stored.items() if name.startswith(prefix)}
        if not tensors:
            raise ValueError(f"{os.fspath(path)!r}: no train.master.* tensors (not a trainer's save)")
        return cls.from_tensors(tensors, json.loads(metadata["uform"]), **keywords)

    # ---------------------------------------------------------------- forward

    def _rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Rotates pairs (x[j], x[j+32]) of x [B, heads, L, 64]; cos, sin [L, 32]."""
        first, second = x[..., :PAIRS], x[..., PAIRS:]
        return torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(final states h [B, L, H], embeddings [B, D] float32, L2-normalised) of a padded batch."""
        B, L = ids.shape
        H, A = self.hidden, self.heads_count
        valid = torch.arange(L, device=ids.device).unsqueeze(0) < lengths.unsqueeze(1)  # [B, L]
        key_mask = None if bool(valid.all()) else valid.view(B, 1, 1, L)         # True: attend
        x = F.embedding(ids, self.text.bytes) + self.text.modality               # [B, L, H]
        rope = None
        for block in self.blocks:
            attention, mlp = block.attention, block.mlp
            qkv = attention.qkv(attention.norm(x))                               # [B, L, 3H]
            q, k, v = qkv.view(B, L, 3, A, HEAD_WIDTH).permute(2, 0, 3, 1, 4).unbind(0)
            if rope is None or rope[0].dtype != q.dtype:
                rope = (self.rope_cos[:L].to(q.dtype), self.rope_sin[:L].to(q.dtype))
            q, k = self._rope(q, *rope), self._rope(k, *rope)
            heads = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask)  # [B, A, L, 64]
            x = x + attention.out(heads.transpose(1, 2).reshape(B, L, H))
            x = x + mlp.down(F.gelu(mlp.up(mlp.norm(x)), approximate="tanh"))
        h = self.norm(x)
        real = valid.unsqueeze(-1).to(h.dtype)
        mean = (h * real).sum(dim=1) / lengths.unsqueeze(1).to(h.dtype)
        embeddings = F.normalize(self.heads.embedding(mean).float(), dim=-1, eps=NORMALIZE_EPS)
        return h, embeddings

    # ---------------------------------------------------------------- losses

    def masked_text_loss(self, h: torch.Tensor, batch: TrainingBatch) -> torch.Tensor:
        """Mean byte cross-entropy over the selected positions (0 when none is selected)."""
        chosen = h[batch.selected]                                               # [S, H]
        if chosen.shape[0] == 0:
            return h.new_zeros((), dtype=torch.float32)
        logits = F.linear(chosen, self.text.bytes[:BYTE_VALUES], self.heads.bytes.bias)
        return F.cross_entropy(logits.float(), batch.targets[batch.selected])

    def contrastive_loss(self, embeddings: torch.Tensor, bags: torch.Tensor,
                         groups: Optional[torch.Tensor] = None) -> torch.Tensor:
        """BALANCED over bags with ambient negatives of weight 1, mean over the widths:
        per anchor i with positives P_i (same bag, j != i), targets 1/|P_i|,
        loss_i = -sum_p t_ip log_softmax_{j != i}(s_ij)_p; mean over anchors with positives."""
        n = embeddings.shape[0]
        eye = torch.eye(n, dtype=torch.bool, device=embeddings.device)
        positive = (bags.unsqueeze(0) == bags.unsqueeze(1)) & ~eye
        counts = positive.sum(dim=1)
        anchors = counts > 0
        if not bool(anchors.any()):
            return embeddings.new_zeros(())
        target = positive.to(embeddings.dtype) / counts.clamp(min=1).unsqueeze(1).to(embeddings.dtype)
        scale = self.contrastive.log_inverse_temperature.exp()
        scale = scale[groups] if groups is not None else scale[0].expand(n)       # the anchor's group
        per_width = []
        for w in self.widths:
            e = embeddings if w == embeddings.shape[1] else F.normalize(embeddings[:, :w], dim=-1, eps=NORMALIZE_EPS)
            scores = (e @ e.T) * scale.unsqueeze(1)
            log_p = torch.log_softmax(scores.masked_fill(eye, float("-inf")), dim=1)
            per_anchor = -(torch.where(positive, log_p, 0.0) * target).sum(dim=1)
            per_width.append(per_anchor[anchors].mean())
        return torch.stack(per_width).mean()

    def losses(self, batch: TrainingBatch, text_weight: float = 1.0
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(total, masked text, contrastive) of the JOINT objective on a prepared batch."""
        h, embeddings = self(batch.ids, batch.lengths)
        masked = self.masked_text_loss(h, batch)
        contrast = self.contrastive_loss(embeddings, batch.bags)
        return text_weight * masked + contrast, masked, contrast


# ----------------------------------------------------------------------------- optimizer

class StepLosses(NamedTuple):
    loss: float
    masked_text_loss: float
    contrastive_loss: float
    learning_rate: float


class BatchedTrainer:
    """AdamW over a BatchedTrainingModel with the uform trainer's schedule, clipping and
    weight-decay groups; `step` is one optimizer step on a prepared batch.

    The schedule's zeros derive as the trainer's do (docs/training.md section 4):
    learning_rate 1e-3, steps 10,000, min_learning_rate learning_rate / 10, warmup_steps
    1% of steps (at least 1)."""

    def __init__(self, model: BatchedTrainingModel, *, learning_rate: float = 0.0, min_learning_rate: float = 0.0,
                 warmup_steps: int = 0, steps: int = 0, text_weight: float = 1.0, autocast: bool = False) -> None:
        self.model = model
        self.steps = steps or 10_000
        self.peak = learning_rate or 1e-3
        self.floor = min_learning_rate or self.peak / 10
        self.warmup = warmup_steps or max(1, self.steps // 100)
        self.text_weight = text_weight
        self.autocast = autocast
        self.step_count = 0
        decayed, kept = [], []
        for name, parameter in model.named_parameters():
            (decayed if decays(name, parameter.shape) else kept).append(parameter)
        self.optimizer = torch.optim.AdamW(
            [{"params": decayed, "weight_decay": WEIGHT_DECAY}, {"params": kept, "weight_decay": 0.0}],
            lr=self.peak, betas=ADAMW_BETAS, eps=ADAMW_EPS)

    def learning_rate(self, step: int) -> float:
        return learning_rate_at(step, learning_rate=self.peak, min_learning_rate=self.floor,
                                warmup_steps=self.warmup, steps=self.steps)

    def step(self, batch: TrainingBatch) -> StepLosses:
        """Forward, backward, clip at global norm 1, AdamW: one optimizer step."""
        self.step_count += 1
        rate = self.learning_rate(self.step_count)
        for group in self.optimizer.param_groups:
            group["lr"] = rate
        self.optimizer.zero_grad(set_to_none=True)
        device_type = next(self.model.parameters()).device.type
        region = torch.autocast(device_type, dtype=torch.bfloat16) if self.autocast else contextlib.nullcontext()
        with region:
            total, masked, contrast = self.model.losses(batch, self.text_weight)
        total.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), MAX_GRAD_NORM)
        self.optimizer.step()
        return StepLosses(total.item(), masked.item(), contrast.item(), rate)


def training_flops(depth: int, hidden: int, dimensions: int, lengths: Sequence[int], selected: int) -> dict:
    """Useful FLOPs of one forward (no padding): per token per layer 2 x 12 H^2 (qkv, out,
    MLP up and down) + 4 L H attention (QK^T and PV over the item's L tokens), the
    embedding head 2 D H per item, the byte logits 2 x 256 H per selected position. A
    training step is about 3x the forward (backward: two products per forward product)."""
    tokens = sum(lengths)
    gemm = (depth * 24 * hidden * hidden * tokens + 2 * dimensions * hidden * len(lengths)
            + 2 * BYTE_VALUES * hidden * selected)
    attention = depth * sum(4 * n * n * hidden for n in lengths)
    return {"tokens": tokens, "forward": gemm + attention, "step": 3 * (gemm + attention)}


__all__ = ["BatchedTrainer", "BatchedTrainingModel", "StepLosses", "TrainingBatch", "batch_on", "prepare_batch",
           "training_flops"]
