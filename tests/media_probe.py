"""Builds and runs tests/c/media_probe.c: the resampler, the image resize and the video
encoder on decoded frames, which the public API reaches only through the media decoders or
not at all (docs/media.md).

The probe links c/build/libuform.a (built by `make`); without a C compiler or the archive
the tests that need it skip, naming why.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARCHIVE = os.path.join(ROOT, "c", "build", "libuform.a")
SOURCE = os.path.join(ROOT, "tests", "c", "media_probe.c")


@functools.lru_cache(maxsize=1)
def _build() -> str:
    compiler = os.environ.get("CC", "cc")
    if shutil.which(compiler) is None:
        raise RuntimeError(f"no C compiler ({compiler}) to build the media probe")
    if not os.path.exists(ARCHIVE):
        raise RuntimeError(f"{ARCHIVE} is missing: run `make` first")
    directory = tempfile.mkdtemp(prefix="uform-probe-")
    binary = os.path.join(directory, "media_probe")
    command = [compiler, "-std=c11", "-D_GNU_SOURCE", "-O2", "-pthread", f"-I{ROOT}/c/include",
               f"-I{ROOT}/c/src", SOURCE, ARCHIVE, *_media_libraries(), "-lm", "-pthread", "-o", binary]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError(f"building the media probe failed:\n{result.stderr}")
    return binary


def _media_libraries() -> list:
    """The decoders' link flags this build found (c/build/media.txt, written by make)."""
    path = os.path.join(ROOT, "c", "build", "media.txt")
    with open(path) as file:
        for line in file:
            if line.startswith("libs="):
                return line[len("libs="):].split()
    return []


def probe() -> str:
    """The probe's path; skips the calling test when there is no C compiler or no build, and
    fails it when the probe does not compile."""
    try:
        return _build()
    except RuntimeError as error:
        pytest.skip(str(error))


def resample(samples: np.ndarray, from_rate: int, to_rate: int) -> np.ndarray:
    """uform_resample of float32 samples."""
    binary = probe()
    with tempfile.TemporaryDirectory() as directory:
        source, target = os.path.join(directory, "in"), os.path.join(directory, "out")
        np.asarray(samples, dtype=np.float32).tofile(source)
        result = subprocess.run([binary, "resample", str(from_rate), str(to_rate), source, target],
                                capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        return np.fromfile(target, dtype=np.float32)


def resize(pixels: np.ndarray, out_height: int, out_width: int) -> np.ndarray:
    """uform_image_resize of [h, w, 3] uint8 pixels: float32 [out_height, out_width, 3]."""
    binary = probe()
    height, width = pixels.shape[:2]
    with tempfile.TemporaryDirectory() as directory:
        source, target = os.path.join(directory, "in"), os.path.join(directory, "out")
        np.ascontiguousarray(pixels, dtype=np.uint8).tofile(source)
        result = subprocess.run([binary, "resize", str(height), str(width), str(out_height),
                                 str(out_width), source, target], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        return np.fromfile(target, dtype=np.float32).reshape(out_height, out_width, 3)


def video_encode_frames(checkpoint: str, clips: list, *, cpu_class: int = 0, threads: int = 0,
                        outputs: int = 1) -> dict:
    """uform_video_encode_frames on [F, h, w, 3] uint8 clips: {"embeddings", "offsets",
    "tokens", "stats"} on success, {"status", "message"} on failure."""
    binary = probe()
    with tempfile.TemporaryDirectory() as directory:
        source, target = os.path.join(directory, "in"), os.path.join(directory, "out")
        header = [len(clips)]
        for clip in clips:
            header += [clip.shape[0], clip.shape[1] if clip.ndim == 4 else 0,
                       clip.shape[2] if clip.ndim == 4 else 0]
        with open(source, "wb") as file:
            file.write(np.array(header, dtype=np.uint64).tobytes())
            for clip in clips:
                file.write(np.ascontiguousarray(clip, dtype=np.uint8).tobytes())
        result = subprocess.run([binary, "video", checkpoint, str(int(cpu_class)), str(threads),
                                 str(int(outputs)), source, target], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        data = open(target, "rb").read()
    status = int(np.frombuffer(data[:8], np.uint64)[0])
    if status:
        return {"status": status, "message": data[8:].decode()}
    position = 8

    def take(dtype, count):
        nonlocal position
        values = np.frombuffer(data, dtype, count, position)
        position += values.nbytes
        return values

    dimensions = int(take(np.uint64, 1)[0])
    embeddings = take(np.float32, len(clips) * dimensions).reshape(len(clips), dimensions)
    width = int(take(np.uint64, 1)[0])
    offsets = tokens = None
    if width:
        offsets = take(np.uint64, len(clips) + 1).astype(np.int64)
        tokens = take(np.float32, int(offsets[-1]) * width).reshape(-1, width)
    stats = dict(zip(("items", "frames", "tokens", "truncated", "empty"), take(np.uint64, 5).tolist()))
    return {"embeddings": embeddings, "offsets": offsets, "tokens": tokens, "stats": stats}
