"""Training runs for the mesh tests: each case is a world of items per step and the
trainer's keywords, so one process holding every item and several hosts each holding a
contiguous share of them can run the same steps (tests/test_mesh.py, tests/mesh_worker.py).

Items are numbered in the world's order (host after host), which is how edges name their
candidates on a mesh: the share of host h keeps the world's ids unchanged."""
from __future__ import annotations

import os
import tempfile
from typing import Any, Dict, List

import numpy as np

import uform

TEXT, IMAGE, AUDIO = uform.Modality.TEXT, uform.Modality.IMAGE, uform.Modality.AUDIO


def _png(seed: int, height: int = 32, width: int = 48) -> bytes:
    from media_fixtures import test_picture, write_png   # tests/ is on sys.path
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "picture.png")
        write_png(path, test_picture(height, width, seed))
        with open(path, "rb") as stream:
            return stream.read()


def _wav(seed: int, frames: int = 3200, rate: int = 16000) -> bytes:
    """A 16-bit mono WAV written by hand (no codec library needed to make it)."""
    import struct
    rng = np.random.default_rng(seed)
    samples = (np.sin(np.arange(frames) * (0.01 + 0.002 * seed)) * 8000
               + rng.normal(0, 500, frames)).astype("<i2").tobytes()
    header = b"RIFF" + struct.pack("<I", 36 + len(samples)) + b"WAVEfmt " + struct.pack(
        "<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16) + b"data" + struct.pack("<I", len(samples))
    return header + samples


def trainer_keywords(case: str) -> Dict[str, Any]:
    batch = dict(max_rows_per_device=24, max_columns_per_row=48, max_segments_per_device=48)
    common = dict(depth=1, hidden=64, seed=11,
                  schedule=uform.Schedule(learning_rate=2e-3, steps=100, warmup_steps=2))
    if case == "contrastive":
        return dict(common, objective=uform.Objective.CONTRASTIVE, batch=uform.BatchShape(**batch),
                    contrastive=uform.Contrastive(matryoshka_dimensions=[32, 64], temperature_groups=2))
    if case == "joint_late":
        return dict(common, objective=uform.Objective.JOINT, batch=uform.BatchShape(**batch),
                    late_interaction=uform.LateInteraction(width=16, max_query_span=12),
                    choices=uform.Choices(weight=0.5))
    if case == "media":
        return dict(common, objective=uform.Objective.JOINT,
                    batch=uform.BatchShape(image=uform.ImageShape(patch_side=8),
                                           audio=uform.AudioShape(chunk_samples=200), **batch))
    raise ValueError(case)


def world_step(case: str, step: int, items: int = 12) -> Dict[str, Any]:
    """The world's batch of one step: every item in the world's order."""
    rng = np.random.default_rng(1000 * step + len(case))
    modalities: List[int] = []
    contents: List[bytes] = []
    for i in range(items):
        if case == "media" and i % 4 == 1:
            modalities.append(IMAGE)
            contents.append(_png(100 * step + i))
        elif case == "media" and i % 4 == 3:
            modalities.append(AUDIO)
            contents.append(_wav(100 * step + i))
        else:
            modalities.append(TEXT)
            length = int(rng.integers(6, 40))
            contents.append(bytes(rng.integers(97, 123, size=length, dtype=np.uint8)))
    bags = [i // 2 for i in range(items)]                  # pairs: (0, 1), (2, 3), ...
    batch: Dict[str, Any] = dict(modalities=modalities, contents=contents, bags=bags)
    if case == "contrastive":
        # attract and repel edges whose candidates sit on other hosts' shares
        attract = [[(i + items // 2) % items] if i % 3 == 0 else [] for i in range(items)]
        repel = [[(i + 1) % items, (i + 5) % items] if i % 2 == 1 else [] for i in range(items)]
        batch["attract"] = attract
        batch["attract_weights"] = [[0.5 + 0.25 * (i % 2) for _ in a] for i, a in enumerate(attract)]
        batch["repel"] = repel
        batch["temperature_groups"] = [i % 2 for i in range(items)]
    if case == "joint_late":
        batch["sides"] = [int(uform.LateInteractionSide.QUERY) if i % 2 == 0
                          else int(uform.LateInteractionSide.DOCUMENT) for i in range(items)]
        batch["choices"] = ["AB" if i % 4 == 0 else "" for i in range(items)]
        batch["choice_targets"] = [[0.7, 0.3] if i % 4 == 0 else [] for i in range(items)]
    return batch


def share(batch: Dict[str, Any], host: int, hosts: int) -> Dict[str, Any]:
    """Host h's contiguous share of the world's items; edge ids stay world ids."""
    count = len(batch["contents"])
    first, last = host * count // hosts, (host + 1) * count // hosts
    return {key: value[first:last] for key, value in batch.items()}


def _edges(rows: List[List[int]], weights: List[List[float]] | None) -> uform.Edges:
    offsets = np.cumsum([0] + [len(r) for r in rows]).astype(np.uint64)
    ids = np.array([j for r in rows for j in r], dtype=np.uint32)
    flat = None if weights is None else np.array([w for r in weights for w in r], dtype=np.float32)
    return uform.Edges(offsets=offsets, ids=ids, weights=flat)


def step_arguments(batch: Dict[str, Any]) -> tuple:
    """(positional, keywords) of Trainer.step for a batch (a world or a share)."""
    keywords: Dict[str, Any] = dict(bags=np.array(batch["bags"], dtype=np.uint32))
    if "attract" in batch:
        keywords["relations"] = uform.Relations(
            attract=_edges(batch["attract"], batch["attract_weights"]),
            repel=_edges(batch["repel"], None))
    if "temperature_groups" in batch:
        keywords["temperature_groups"] = np.array(batch["temperature_groups"], dtype=np.uint32)
    if "sides" in batch:
        keywords["sides"] = [uform.LateInteractionSide(s) for s in batch["sides"]]
    if "choices" in batch:
        keywords["choices"] = [c.encode() for c in batch["choices"]]
        keywords["choice_targets"] = [np.array(t, dtype=np.float32) for t in batch["choice_targets"]]
    modalities = [uform.Modality(m) for m in batch["modalities"]]
    return (modalities, batch["contents"]), keywords


STAT_NAMES = ("loss", "contrastive_loss", "masked_text_loss", "masked_image_loss", "masked_audio_loss",
              "late_interaction_loss", "choices_loss")

# Tensors whose values the tests compare between one process and the mesh.
COMPARED_TENSORS = ("text.bytes", "blocks.0.attention.qkv.weight", "blocks.0.mlp.down.weight",
                    "norm.weight", "heads.embedding.weight")
# Gradients of the terms' own parameters, which every host computes (the mesh keeps one copy).
EXTRA_GRADIENTS = {
    "contrastive": ("contrastive.log_inverse_temperature",),
    "joint_late": ("contrastive.log_inverse_temperature", "late_interaction.log_inverse_temperature",
                   "late_interaction.bias", "heads.tokens.weight", "choices.log_temperature",
                   "heads.bytes.bias"),
    "media": ("image.patch.weight", "heads.image.weight", "audio.chunk.weight", "heads.audio.weight"),
}


def run_steps(trainer: uform.Trainer, case: str, steps: range, host: int = 0, hosts: int = 1,
              die_at: int = -1, hang_at: int = -1, bad_edge: bool = False, no_bags: bool = False,
              deferred: bool = False) -> Dict[str, Any]:
    """Steps a trainer over its share of each step's world; answers the stats and the
    first step's embeddings of its items. Faults for the tests: die_at kills the process
    at that step, hang_at stops it (SIGSTOP: alive, silent), bad_edge names a candidate
    past the world, no_bags leaves the bags out; deferred steps through trainer.deferred."""
    import signal
    record: Dict[str, Any] = {"stats": [], "truncated": [], "embeddings": None, "gradients": None}
    for step in steps:
        if step == die_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if step == hang_at:
            os.kill(os.getpid(), signal.SIGSTOP)
        batch = share(world_step(case, step), host, hosts)
        if bad_edge:   # a candidate past the world's items
            batch["attract"] = [[10 ** 6]] + batch["attract"][1:]
            batch["attract_weights"] = [[1.0]] + batch["attract_weights"][1:]
        positional, keywords = step_arguments(batch)
        if no_bags:
            del keywords["bags"]
        stats = uform.TrainerStepStats()
        arena = uform.Arena()
        if deferred:
            executor = trainer._executor
            embeddings = trainer.deferred(executor).step(*positional, arena=arena, stats=stats,
                                                         **keywords).result()
        else:
            embeddings = trainer.step(*positional, arena=arena, stats=stats, **keywords)
        record["stats"].append([float(getattr(stats, name)) for name in STAT_NAMES])
        record["truncated"].append(int(stats.truncated))
        if record["embeddings"] is None:
            record["embeddings"] = np.array(embeddings, dtype=np.float32).tolist()
            record["gradients"] = {name: trainer.tensor(name, "gradients").tolist()
                                   for name in COMPARED_TENSORS + EXTRA_GRADIENTS.get(case, ())}
    return record
