"""PyTorch reference of the training objectives (docs/training.md), the oracle for the trainer.

Everything here follows docs/training.md section by section, in float64, written for
clarity rather than speed:

* section 1: `random_bits`, `uniform` (counter-based RNG on Python ints, 64-bit wrapping);
* section 2: `mask_text`, `corrupt_texts`, `masked_text_loss`;
* section 3: `embeddings`, `relations`, `anchor_loss` (one anchor's pair loss, shared with
  late interaction), `contrastive_loss` (loops over anchors; autograd flows to the
  embeddings, `log_inverse_temperature` and `bias`);
* section 4: `learning_rate_at`, `decays`, `param_groups`, `clip_` to drive
  `torch.optim.AdamW` exactly as the trainer's optimizer is specified.

Choices this module makes where docs/training.md is silent are marked "Resolved:".
"""

from __future__ import annotations

import math
from typing import Iterable, Optional, Sequence, Union

import numpy as np
import torch

from .model import BYTE_VALUES, MASK, ReferenceModel, normalize

MASK64 = (1 << 64) - 1

# RNG streams (docs/training.md section 1).
STREAM_SPAN_START = 1
STREAM_SPAN_CONTINUE = 2          # + k for continuation test k >= 1
STREAM_ACTION = 1000
STREAM_RANDOM_BYTE = 1001

# Optimizer constants (section 4).
ADAMW_BETAS = (0.9, 0.999)
ADAMW_EPS = 1e-8
WEIGHT_DECAY = 0.01
MAX_GRAD_NORM = 1.0


# ----------------------------------------------------------------------------- 1. random numbers

def _mix(x: int) -> int:
    """The splitmix64 finaliser on a uint64 held in a Python int."""
    x &= MASK64
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & MASK64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & MASK64
    x ^= x >> 31
    return x


def random_bits(seed: int, step: int, item: int, position: int, stream: int) -> int:
    """bits = mix(mix(mix(mix(mix(seed) ^ step) ^ item) ^ position) ^ stream), all uint64.

    Every argument is taken modulo 2^64 (so -1 is 0xFFFF...FFFF, as a C cast would give).
    """
    x = _mix(seed & MASK64)
    x = _mix(x ^ (step & MASK64))
    x = _mix(x ^ (item & MASK64))
    x = _mix(x ^ (position & MASK64))
    return _mix(x ^ (stream & MASK64))


def uniform(seed: int, step: int, item: int, position: int, stream: int) -> float:
    """(bits >> 40) * 2^-24: a multiple of 2^-24 in [0, 1), exact in float32 and float64."""
    return (random_bits(seed, step, item, position, stream) >> 40) * 2.0 ** -24


def _f32(x: float) -> float:
    """A configuration value as the float32 field stores it, widened to float64."""
    return float(np.float32(x))


# ----------------------------------------------------------------------------- 2. masked text

def mask_thresholds(token_mask_probability: float = 0.15, token_mean_span: float = 3.0,
                    replace_fraction: float = 0.8, random_fraction: float = 0.1
                    ) -> tuple[float, float, float, float]:
    """(start, stop, mask, random) float64 thresholds from float32-rounded config values:
    start = p / (m (1 - p) + p) (so spans of mean m select p of the bytes), stop = 1 / m,
    mask = r, random = r + q.

    Resolved: the values are the *derived* ones (a zero field is not re-derived here); a
    `token_mean_span` below 1 is rejected rather than clamped ("at least 1").
    """
    p, m = _f32(token_mask_probability), _f32(token_mean_span)
    r, q = _f32(replace_fraction), _f32(random_fraction)
    if not m >= 1.0:
        raise ValueError(f"token_mean_span {m} must be at least 1")
    for name, value in (("token_mask_probability", p), ("replace_fraction", r),
                        ("random_fraction", q)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} {value} must lie in [0, 1]")
    return p / (m * (1.0 - p) + p), 1.0 / m, r, r + q


def mask_text(bytes_: Union[bytes, Sequence[int]], *, seed: int, step: int, item: int,
              token_mask_probability: float = 0.15, token_mean_span: float = 3.0,
              replace_fraction: float = 0.8, random_fraction: float = 0.1
              ) -> tuple[list[int], list[bool]]:
    """Corrupts one item's token ids (already truncated) per docs/training.md section 2.

    Returns (ids, selected): ids with selected positions turned into MASK (256), a random
    byte, or left as they were; selected[t] is True where the loss is taken.
    """
    original = list(bytes_)
    n = len(original)
    start, stop, mask, random = mask_thresholds(token_mask_probability, token_mean_span,
                                                replace_fraction, random_fraction)
    selected = [False] * n
    t = 0
    while t < n:
        if uniform(seed, step, item, t, STREAM_SPAN_START) < start:
            length = 1
            while (t + length < n and
                   uniform(seed, step, item, t, STREAM_SPAN_CONTINUE + length) >= stop):
                length += 1
            for position in range(t, t + length):
                selected[position] = True
            t += length
        else:
            t += 1

    ids = list(original)
    for t in range(n):
        if not selected[t]:
            continue
        action = uniform(seed, step, item, t, STREAM_ACTION)
        if action < mask:
            ids[t] = MASK
        elif action < random:
            ids[t] = random_bits(seed, step, item, t, STREAM_RANDOM_BYTE) >> 56
    return ids, selected


def _text_bytes(text: Union[bytes, str, Sequence[int]], context: int) -> list[int]:
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    return list(data[:context])


def corrupt_texts(model: ReferenceModel, texts: Sequence[Union[bytes, str]], *, seed: int,
                  step: int, first_item: int = 0, **masking: float
                  ) -> list[tuple[list[int], list[int], list[bool]]]:
    """(original ids, corrupted ids, selected) per text: cut at the model's context, item
    index first_item + i. The corrupted ids are the JOINT objective's forward input."""
    out = []
    for index, text in enumerate(texts):
        original = _text_bytes(text, model.context)
        ids, selected = mask_text(original, seed=seed, step=step, item=first_item + index,
                                  **masking)
        out.append((original, ids, selected))
    return out


def masked_text_loss(model: ReferenceModel, texts: Sequence[Union[bytes, str]], *, seed: int,
                     step: int, first_item: int = 0, **masking: float) -> torch.Tensor:
    """Mean byte cross-entropy over every selected position of every text (0 when none).

    logits_t = h_t text.bytes[0:256]^T + heads.bytes.bias with h = model.text_hidden(corrupted
    ids); the target is the original byte. Unweighted (`text_weight` is applied by the caller).
    The 0 for no selected position is a constant tensor without a graph.
    """
    if not model.has("heads.bytes.bias"):
        raise ValueError("the checkpoint has no byte head (heads.bytes.bias)")
    table = model.weight("text.bytes")[:BYTE_VALUES]
    bias = model.weight("heads.bytes.bias")
    total: Optional[torch.Tensor] = None
    count = 0
    for original, ids, selected in corrupt_texts(model, texts, seed=seed, step=step,
                                                 first_item=first_item, **masking):
        rows = [t for t, chosen in enumerate(selected) if chosen]
        if not rows:
            continue
        h = model.text_hidden(torch.tensor(ids, dtype=torch.long))
        logits = h[rows] @ table.T + bias
        targets = torch.tensor([original[t] for t in rows], dtype=torch.long)
        losses = torch.logsumexp(logits, dim=-1) - logits.gather(1, targets[:, None])[:, 0]
        total = losses.sum() if total is None else total + losses.sum()
        count += len(rows)
    if total is None:
        return torch.zeros((), dtype=model.dtype)
    return total / count


# ----------------------------------------------------------------------------- 3. contrastive

def embeddings(model: ReferenceModel, ids_lists: Sequence[Sequence[int]]) -> torch.Tensor:
    """Pooled, projected, normalised embeddings [N, D] of texts given as token-id lists
    (bytes or MASK), as inference computes them; a differentiable function of the model."""
    rows = [model.pool(model.text_hidden(torch.tensor(list(ids), dtype=torch.long)))
            for ids in ids_lists]
    if not rows:
        return torch.zeros(0, model.dimensions, dtype=model.dtype)
    return torch.stack(rows)


Edges = tuple  # (offsets [N + 1], ids, weights or None)


def _form(value, allowed: tuple[str, ...], what: str) -> str:
    name = getattr(value, "name", value)
    name = str(name).upper()
    if name == "DERIVED" and "BALANCED" in allowed:
        name = "BALANCED"
    if name not in allowed:
        raise ValueError(f"{what} {value!r}: expected one of {allowed}")
    return name


def _edge_rows(edges: Optional[Edges], n: int, what: str) -> list[dict[int, float]]:
    """Anchor -> {candidate: weight} from a CSR triple; self edges dropped.

    Resolved: a candidate listed twice for one anchor in one edge set is rejected (the
    docs do not say whether weights add or the last wins)."""
    rows: list[dict[int, float]] = [{} for _ in range(n)]
    if edges is None:
        return rows
    offsets, ids, weights = edges
    if offsets is None:
        return rows
    offsets = [int(o) for o in offsets]
    ids = [int(j) for j in ids]
    if len(offsets) != n + 1 or offsets[0] != 0 or offsets[-1] != len(ids) or any(
            a > b for a, b in zip(offsets, offsets[1:])):
        raise ValueError(f"{what}: offsets must be {n + 1} non-decreasing values from 0 "
                         f"to {len(ids)}")
    if weights is not None:
        weights = [float(w) for w in weights]
        if len(weights) != len(ids):
            raise ValueError(f"{what}: {len(weights)} weights for {len(ids)} ids")
    for anchor in range(n):
        for k in range(offsets[anchor], offsets[anchor + 1]):
            j = ids[k]
            w = 1.0 if weights is None else _f32(weights[k])     # float32, as the C field
            if not 0 <= j < n:
                raise ValueError(f"{what}: candidate {j} of anchor {anchor} out of range")
            if not (math.isfinite(w) and w >= 0.0):
                raise ValueError(f"{what}: weight {w} must be finite and non-negative")
            if j in rows[anchor]:
                raise ValueError(f"{what}: edge {anchor} -> {j} given twice")
            if j != anchor:
                rows[anchor][j] = w
    return rows


def relations(n: int, *, bags=None, attract: Optional[Edges] = None,
              repel: Optional[Edges] = None, ignore: Optional[Edges] = None,
              negatives: str = "AMBIENT", ambient_repulsion_weight: float = 1.0
              ) -> list[tuple[dict[int, float], dict[int, float]]]:
    """Per anchor i, (positives {j: a_ij}, negatives {j: r_ij}) by the precedence
    ignore > attract > bag > repel > the run's negatives, over candidates j != i.

    bags: one bag id per item (None for an item in no bag), or None for no bag positives.
    Resolved: `ambient_repulsion_weight` is used as given (float64 of the float32 field).
    """
    negatives = _form(negatives, ("AMBIENT", "NAMED"), "negatives")
    ambient = _f32(ambient_repulsion_weight)
    if not (math.isfinite(ambient) and ambient >= 0.0):
        raise ValueError("ambient_repulsion_weight must be finite and non-negative")
    if bags is not None:
        bags = list(bags)
        if len(bags) != n:
            raise ValueError(f"{len(bags)} bag ids for {n} items")
    attract_rows = _edge_rows(attract, n, "attract")
    repel_rows = _edge_rows(repel, n, "repel")
    ignore_rows = _edge_rows(ignore, n, "ignore")
    out = []
    for i in range(n):
        positives: dict[int, float] = {}
        negative: dict[int, float] = {}
        for j in range(n):
            if j == i or j in ignore_rows[i]:
                continue
            if j in attract_rows[i]:
                positives[j] = attract_rows[i][j]
            elif bags is not None and bags[i] is not None and bags[i] == bags[j]:
                positives[j] = 1.0
            elif j in repel_rows[i]:
                negative[j] = repel_rows[i][j]
            elif negatives == "AMBIENT":
                negative[j] = ambient
        out.append((positives, negative))
    return out


def anchor_loss(form: str, s: torch.Tensor, positives: dict[int, float],
                negatives: dict[int, float]) -> Optional[torch.Tensor]:
    """One anchor's pair loss (docs/training.md section 3), shared by the contrastive term
    and late interaction (section 9).

    form: "BALANCED", "RANKED" or "SIGMOID" (already resolved from DERIVED); s: the anchor's
    scores, indexable by candidate id (only the ids in `positives` and `negatives` are
    read); positives {j: a_ij}, negatives {j: r_ij}.

    Returns loss_i, or None when the anchor takes no part in the average: BALANCED and RANKED
    anchors without positive weight. A SIGMOID anchor always counts (0 without pairs).
    Zero-weight negatives add nothing; a zero-weight positive has target 0 but still enters
    BALANCED's denominator sum_{p'} exp s_ip'.
    """
    dtype = s.dtype
    pos = list(positives)
    a = torch.tensor([positives[j] for j in pos], dtype=dtype)
    if form == "SIGMOID":
        loss = s.new_zeros(())
        if pos:
            loss = loss + (a * torch.nn.functional.softplus(-s[pos])).sum()
        neg = list(negatives)
        if neg:
            r = torch.tensor([negatives[j] for j in neg], dtype=dtype)
            loss = loss + (r * torch.nn.functional.softplus(s[neg])).sum()
        return loss
    if not pos or float(a.sum()) <= 0.0:
        return None
    target = a / a.sum()
    neg = [j for j in negatives if negatives[j] > 0.0]
    log_r = torch.log(torch.tensor([negatives[j] for j in neg], dtype=dtype))
    weighted_negatives = s[neg] + log_r                                # log(r exp s)
    if form == "BALANCED":
        log_denominator = torch.logsumexp(torch.cat([s[pos], weighted_negatives]), 0)
    elif form == "RANKED":
        if neg:
            log_denominator = torch.logaddexp(s[pos], torch.logsumexp(weighted_negatives, 0))
        else:
            log_denominator = s[pos]
    else:
        raise ValueError(f"pair form {form!r}")
    return -(target * (s[pos] - log_denominator)).sum()


def contrastive_loss(embeddings: torch.Tensor, *, log_inverse_temperature: torch.Tensor,
                     bias: torch.Tensor, groups=None, bags=None,
                     attract: Optional[Edges] = None, repel: Optional[Edges] = None,
                     ignore: Optional[Edges] = None, negatives: str = "AMBIENT",
                     ambient_repulsion_weight: float = 1.0, pair_loss: str = "BALANCED",
                     widths: Optional[Sequence[int]] = None) -> torch.Tensor:
    """The contrastive term of docs/training.md section 3, averaged over Matryoshka widths.

    embeddings [N, D] (any scale: every width renormalises its prefix), log_inverse_temperature
    and bias [G]; groups: the anchor's temperature group per item (None: all 0); widths:
    prefix widths (None: [D]). Scores s_ij = cos_w(i, j) exp(tau[g_i]) + (SIGMOID ? b[g_i] : 0).

    BALANCED/RANKED average over anchors whose positive weights sum to > 0, SIGMOID over all
    N anchors; a width with no such anchor contributes 0.
    Resolved: zero-weight negatives add nothing to any sum; a zero-weight positive still
    counts in BALANCED's denominator sum_{p'} exp s_ip' (the formula's unweighted sum) but
    has target 0; an anchor whose positives' weights sum to 0 has no target and is left out
    of the BALANCED/RANKED average.
    """
    form = _form(pair_loss, ("BALANCED", "RANKED", "SIGMOID"), "pair_loss")
    n, d = embeddings.shape
    g_count = log_inverse_temperature.shape[0]
    if bias.shape[0] != g_count:
        raise ValueError("log_inverse_temperature and bias need the same group count")
    groups = [0] * n if groups is None else [int(g) for g in groups]
    if len(groups) != n or any(not 0 <= g < g_count for g in groups):
        raise ValueError(f"groups: {n} values in [0, {g_count}) expected")
    widths = [d] if widths is None else [int(w) for w in widths]
    if not widths or any(not 1 <= w <= d for w in widths):
        raise ValueError(f"widths must be non-empty, each in [1, {d}]")
    pairs = relations(n, bags=bags, attract=attract, repel=repel, ignore=ignore,
                      negatives=negatives, ambient_repulsion_weight=ambient_repulsion_weight)
    g = torch.tensor(groups, dtype=torch.long)
    scale = torch.exp(log_inverse_temperature)[g]                    # [N], anchor's group
    shift = bias[g] if form == "SIGMOID" else torch.zeros_like(scale)

    per_width = []
    for w in widths:
        e = normalize(embeddings[:, :w])
        scores = (e @ e.T) * scale[:, None] + shift[:, None]
        total = embeddings.new_zeros(())
        anchors = 0
        for i, (positives, negative) in enumerate(pairs):
            loss_i = anchor_loss(form, scores[i], positives, negative)
            if loss_i is not None:
                total = total + loss_i
                anchors += 1
        per_width.append(total / anchors if anchors else total)
    return torch.stack(per_width).mean()


# ----------------------------------------------------------------------------- 4. optimizer

def learning_rate_at(step: int, *, learning_rate: float, min_learning_rate: float,
                     warmup_steps: int, steps: int) -> float:
    """The learning rate of optimizer step `step` (counted from 1), in float64.

    Resolved: warmup is lr * step / warmup_steps for step <= warmup_steps (so step 1 is
    not wasted at 0 and step warmup_steps reaches lr); then
    min + (lr - min) (1 + cos(pi progress)) / 2 with progress = (step - warmup) /
    (steps - warmup), clamped to 1 (min_learning_rate at and after `steps`, and right after
    warmup when steps <= warmup_steps). Rates are used as given (float64 of the float32
    fields).
    """
    lr, low = _f32(learning_rate), _f32(min_learning_rate)
    if step < 1 or warmup_steps < 1 or steps < 1:
        raise ValueError("step, warmup_steps and steps count from 1")
    if step <= warmup_steps:
        return lr * step / warmup_steps
    if steps <= warmup_steps:
        return low
    progress = min(1.0, (step - warmup_steps) / (steps - warmup_steps))
    return low + (lr - low) * 0.5 * (1.0 + math.cos(math.pi * progress))


def decays(name: str, shape: Sequence[int]) -> bool:
    """Weight decay applies to matrices (rank-2 tensors) except the byte table text.bytes."""
    return len(tuple(shape)) == 2 and name != "text.bytes"


def param_groups(named_parameters: Iterable[tuple[str, torch.nn.Parameter]],
                 weight_decay: float = WEIGHT_DECAY) -> list[dict]:
    """torch.optim.AdamW parameter groups: decayed matrices, then everything else (0 decay).
    Every group carries `names` (checkpoint names) in its own order."""
    decayed: dict = {"params": [], "names": [], "weight_decay": weight_decay}
    kept: dict = {"params": [], "names": [], "weight_decay": 0.0}
    for name, parameter in named_parameters:
        group = decayed if decays(name, parameter.shape) else kept
        group["params"].append(parameter)
        group["names"].append(name)
    return [group for group in (decayed, kept) if group["params"]]


def clip_(gradients: Sequence[torch.Tensor], max_norm: float = MAX_GRAD_NORM) -> torch.Tensor:
    """Global-norm clipping in place, as torch.nn.utils.clip_grad_norm_ (norm type 2):
    total = |(|g_1|, ..., |g_k|)|, every gradient times min(1, max_norm / (total + 1e-6)).
    Returns the total norm before clipping."""
    gradients = [g for g in gradients if g is not None]
    if not gradients:
        return torch.zeros(())
    total = torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(g.detach(), 2) for g in gradients]), 2)
    coefficient = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in gradients:
        g.detach().mul_(coefficient.to(g.dtype))
    return total
