"""The CPU trainer learns a joint text-image space: a tiny encoder trained with the
contrastive objective on captions paired with PNG images (examples/multimodal_task.py: a
colored shape in one cell of a 3 x 3 grid) goes from chance to text-to-image recall@1 of at
least 0.8 on held-out pairs whose attribute combinations (color x shape x position) no
training image shows, in about a minute and a half on 2 cores.

Both recalls are measured on checkpoints through Model.load_ram, text_encode and
image_encode (the PNG bytes decoded by libuform; BF16 weights): the "before" on the save of
step 0, the "after" on the save of the last step.
"""
import os
import sys
import time
from itertools import islice

import numpy as np
import pytest

import uform

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from multimodal_task import MultimodalTask, batches, recall_at_1  # noqa: E402

pytestmark = pytest.mark.skipif(not uform._lib.uform_media_formats() & uform._lib.UFORM_MEDIA_PNG,
                                reason="this build of libuform lacks the PNG decoder (docs/decoding.md)")

HELD_OUT = 50           # of 270 combinations (6 colors x 5 shapes x 9 cells); chance recall 1/50
PAIRS = 32
STEPS = 3000


def held_out_recall(path, split) -> float:
    model = uform.Model.load_ram(path)
    captions = np.asarray(model.text_encode([item.caption for item in split], uform.Arena()).embeddings)
    files = [item.content for item in split]
    offsets = np.cumsum([0] + [len(f) for f in files], dtype=np.uint64)
    images = np.asarray(model.image_encode((b"".join(files), offsets), uform.Arena()).embeddings)
    return recall_at_1(captions, images)


def test_contrastive_training_learns_held_out_text_to_image_retrieval(tmp_path):
    started = time.perf_counter()
    # 24-pixel images: one 8-pixel patch per grid cell, so an image is 9 tokens.
    task = MultimodalTask(seed=0, sizes=False, image_size=24)
    test = task.split(HELD_OUT, seed=2, modality="image")
    train = task.split(20_000, seed=1, modality="image", exclude=test, distinct=False)
    assert not set(test.keys()) & set(train.keys()), "held-out combinations never train"

    trainer = uform.Trainer.init_ram(
        uform.Executor.for_ram(2), depth=2, hidden=64, objective=uform.Objective.CONTRASTIVE,
        contrastive=uform.Contrastive(inverse_temperature=20.0),
        batch=uform.BatchShape(max_rows_per_device=PAIRS, max_columns_per_row=64,
                               image=uform.ImageShape(patch_side=8)),
        schedule=uform.Schedule(learning_rate=1e-3, warmup_steps=100, steps=STEPS), seed=0)
    trainer.save(tmp_path / "step0.safetensors")
    before = held_out_recall(tmp_path / "step0.safetensors", test)

    stats = uform.TrainerStepStats()
    losses = []
    for modalities, contents, bags in islice(batches(train, PAIRS, seed=0), STEPS):
        trainer.step(modalities, contents, bags=bags, stats=stats)
        assert stats.dropped == 0 and stats.truncated == 0
        losses.append(stats.loss)
    trainer.save(tmp_path / "trained.safetensors")
    after = held_out_recall(tmp_path / "trained.safetensors", test)
    print(f"\nheld-out text-to-image recall@1: {before:.3f} before, {after:.3f} after {STEPS} steps "
          f"(chance {1 / HELD_OUT:.3f}); loss {np.mean(losses[:50]):.2f} -> {np.mean(losses[-50:]):.3f}; "
          f"{time.perf_counter() - started:.0f} s")
    assert before < 0.2, "an untrained encoder should be near chance"
    assert after >= 0.8
