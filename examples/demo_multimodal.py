"""make demo, part 2: one tiny encoder for captions, images and sounds, trained jointly on the
CPU, saved, loaded back and searched across modalities.

The task (examples/multimodal_task.py) is synthetic: a colored shape in one cell of a 3 x 3
grid (24-pixel PNG images) and steady tones, chirps and beeps (WAV files, 0.5 s at 8 kHz),
each with a caption. The held-out pairs have attribute combinations no training pair shows,
so retrieving them measures reading the captions and the media, not memory. The trainer
decodes the PNG and WAV bytes itself, as Model.image_encode and Model.audio_encode do.
About a minute and a half on two cores.
"""
import os
import sys
import time
from itertools import islice

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import uform  # noqa: E402
from multimodal_task import MultimodalTask, batches, recall_at_1  # noqa: E402

STEPS, PAIRS = 3000, 32


def tape(files):
    """Encoded files as one (data, offsets) tape: what the file verbs take without paths."""
    return b"".join(files), np.cumsum([0] + [len(f) for f in files], dtype=np.uint64)


def main() -> None:
    task = MultimodalTask(seed=0, sizes=False, image_size=24)
    held_out = [task.split(50, seed=2, modality="image"), task.split(10, seed=2, modality="audio")]
    train = task.split(20_000, seed=1, modality=("image", "image", "audio"), exclude=held_out,
                       distinct=False)
    print(f"task: {len(train)} training pairs (two images to one sound), held out: "
          f"{len(held_out[0])} images and {len(held_out[1])} sounds of unseen combinations; for example")
    for item in (held_out[0][0], held_out[0][1], held_out[1][0], held_out[1][1]):
        kind = {uform.Modality.IMAGE: "PNG", uform.Modality.AUDIO: "WAV"}[item.modality]
        print(f"  {item.caption.decode()!r:<46} <-> a {len(item.content)}-byte {kind} file")

    shape = uform.BatchShape(max_rows_per_device=PAIRS, max_columns_per_row=64,
                             image=uform.ImageShape(patch_side=8),
                             audio=uform.AudioShape(chunk_samples=256, sample_rate=8000))
    print(f"\nmodel: depth 2, hidden 64; images in 8-pixel patches (9 per image), sounds in chunks "
          f"of 256 samples (16 per sound); CONTRASTIVE, {PAIRS} pairs a step, {STEPS} steps")
    trainer = uform.Trainer.init_ram(
        uform.Executor.for_ram(2), depth=2, hidden=64, objective=uform.Objective.CONTRASTIVE,
        contrastive=uform.Contrastive(inverse_temperature=20.0), batch=shape,
        schedule=uform.Schedule(learning_rate=1e-3, warmup_steps=100, steps=STEPS), seed=0)
    stats = uform.TrainerStepStats()
    started = time.perf_counter()
    recent = []
    for step, (modalities, contents, bags) in enumerate(islice(batches(train, PAIRS, seed=0), STEPS), 1):
        trainer.step(modalities, contents, bags=bags, stats=stats)
        recent = (recent + [stats.loss])[-50:]
        if step % 100 == 0:
            print(f"\r  step {step}/{STEPS}  loss {np.mean(recent):6.3f}  {time.perf_counter() - started:5.1f} s",
                  end="", flush=True)
    print()
    path = os.path.join(ROOT, "c", "build", "demo-multimodal.safetensors")
    trainer.save(path)
    model = uform.Model.load_ram(path)

    for split, verb, name in ((held_out[0], model.image_encode, "image"),
                              (held_out[1], model.audio_encode, "sound")):
        captions = np.asarray(model.text_encode([item.caption for item in split], uform.Arena()).embeddings)
        media = np.asarray(verb(tape([item.content for item in split]), uform.Arena()).embeddings)
        scores = captions @ media.T
        print(f"\nheld-out caption -> {name} search over {len(split)} {name}s: recall@1 "
              f"{recall_at_1(captions, media):.2f} (chance {1 / len(split):.2f}); {name} -> caption "
              f"{recall_at_1(media, captions):.2f}")
        for i in range(3):
            j = int(np.argmax(scores[i]))
            mark = "ok   " if i == j else "wrong"
            print(f"  {mark} {split[i].caption.decode()!r:<44} -> the {name} of "
                  f"{split[j].caption.decode()!r} ({scores[i, j]:.2f})")


if __name__ == "__main__":
    main()
