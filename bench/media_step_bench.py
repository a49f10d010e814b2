"""One training step over 64 JPEG files: how long decoding plus the step take.

    python3 bench/media_step_bench.py [--threads N] [--repeats R] [--depth D] [--hidden H]

The files are 64 synthetic JPEGs of 224 to 640 pixels a side (Pillow, quality 90, fixed
seeds); the model depth 1, hidden 64 by default (small, so that decoding is a visible share
of the step), 16 x 16 patches, 256 patches per row, the MASKED objective (masked patch
reconstruction). It prints the best of R steps (after one warm-up)
and, for scale, how long Pillow takes to decode the same files one after another. Run it
from two checkouts to compare a change (docs/benchmarks-training.md).
"""
from __future__ import annotations

import argparse
import io
import os
import platform
import sys
import time

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

import uform  # noqa: E402


def jpegs(count: int = 64) -> list:
    from PIL import Image
    rng = np.random.default_rng(64)
    files = []
    for i in range(count):
        height, width = (int(v) for v in rng.integers(224, 641, size=2))
        y, x = np.mgrid[0:height, 0:width]
        picture = np.stack([(x * (i + 3) + y * 2) % 256, (y * (i + 5)) % 256, (x + y + 40 * i) % 256], -1)
        picture = (picture + rng.integers(0, 24, picture.shape)).clip(0, 255).astype(np.uint8)
        out = io.BytesIO()
        Image.fromarray(picture).save(out, format="JPEG", quality=90)
        files.append(out.getvalue())
    return files


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--depth", type=int, default=1)
    parser.add_argument("--hidden", type=int, default=64)
    args = parser.parse_args()
    files = jpegs()
    executor = uform.Executor.for_ram(args.threads)
    trainer = uform.Trainer.init_ram(
        executor, depth=args.depth, hidden=args.hidden, objective=uform.Objective.MASKED,
        batch=uform.BatchShape(max_rows_per_device=64, max_columns_per_row=256,
                               image=uform.ImageShape(patch_side=16)), seed=1)
    modalities = [uform.Modality.IMAGE] * len(files)
    trainer.step(modalities, files)  # warm-up
    best = float("inf")
    for _ in range(args.repeats):
        started = time.perf_counter()
        trainer.step(modalities, files)
        best = min(best, time.perf_counter() - started)
    from PIL import Image
    started = time.perf_counter()
    for data in files:
        Image.open(io.BytesIO(data)).convert("RGB").load()
    pillow = time.perf_counter() - started
    print(f"{platform.processor() or platform.machine()}, {executor.threads} threads, depth {args.depth} "
          f"hidden {args.hidden}: a step of "
          f"{len(files)} JPEG files {best * 1000:.0f} ms (best of {args.repeats}); Pillow decodes "
          f"them serially in {pillow * 1000:.0f} ms")


if __name__ == "__main__":
    main()
