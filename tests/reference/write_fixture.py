"""Writes a reference fixture: a small random multimodal checkpoint, stored inputs, and
their float64 reference outputs, for tests/c/reference_outputs.c (which runs where the
Python package cannot, e.g. aarch64 builds under qemu-user).

    python3 tests/reference/write_fixture.py OUT_DIR

Everything is deterministic (fixed seeds): two runs write identical bytes.

Layout of OUT_DIR (read without a JSON parser):

  manifest.txt   '#' lines are comments. Header lines are `key value`:
                     format 1
                     checkpoint model.safetensors
                     dimensions D, token_width W, context C   (the model's geometry)
                     audio_sample_rate HZ                     (the rate of every recording)
                 Data lines are `kind index rows cols file`, file relative to OUT_DIR,
                 a raw little-endian row-major array of rows x cols values:
                     text i 1 n text-i.u8                n bytes of text i (n may be 0)
                     image i h w image-i.u8              h x w RGB pixels: h * w * 3 bytes,
                                                         R G B per pixel, rows 3 * w bytes
                                                         apart (no padding)
                     audio i 1 n audio-i.f32             n mono float32 samples
                     <modality>_embedding i 1 D FILE.f64 the reference embedding (float64)
                     <modality>_tokens i n W FILE.f64    the reference token vectors, one row
                                                         per token the model keeps (n may be 0)
                 with <modality> one of text, image, audio; indices run 0.. per kind.
  *.u8 *.f32 *.f64   the arrays named above; an empty array is an empty file.

The checkpoint has depth 2, hidden 128 (two heads), 48 dimensions and a 16-wide token
head; context 64 (tokens, patches or chunks). Images use 8 x 8 patches; audio uses
160-sample chunks at 8000 Hz, and the recordings are stored at 22050 Hz so the resampler
runs. The reference outputs come from tests/reference (ReferenceModel.text_encode,
media.image_encode, media.audio_encode_samples), the same oracle the Python tests use.
The checkpoint is about 0.97 MB (2 blocks of 12 H^2 BF16 weights); the inputs and the
references together about 0.1 MB.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import torch

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

from reference import ReferenceModel  # noqa: E402
from reference import media  # noqa: E402
from reference.media_checkpoint import write_random_media_checkpoint  # noqa: E402

FORMAT = 1
SEED = 20240611
SHAPE = dict(depth=2, hidden=128, dimensions=48, context=64, token_width=16,
             image={"patch_side": 8}, audio={"chunk_samples": 160, "sample_rate": 8000})
RECORDING_RATE = 22050   # not the model's 8000 Hz: the resampler runs (by 2.75625, not whole)
MANIFEST_COMMENT = """\
# uform reference fixture, written by tests/reference/write_fixture.py (its docstring
# documents the layout). Header lines: key value. Data lines: kind index rows cols file,
# each file a raw little-endian row-major array of rows x cols values (u8, f32 or f64;
# an image's cols is its width in pixels, 3 bytes each). Outputs are float64 references.
"""


def sample_texts(context: int) -> list:
    rng = np.random.default_rng([SEED, 1])
    return [
        b"",                                                             # empty: zero embedding
        b"a",                                                            # one byte
        "héllo wörld ✓ 日本語 🙂".encode("utf-8"),                         # multi-byte UTF-8
        b"x" * (context + 37),                                           # over context: cut
        bytes(rng.integers(0, 256, size=context // 2, dtype=np.uint8)),  # arbitrary, not UTF-8
        b"\x00\x00nul\x00bytes\x00",                                      # NUL bytes are bytes
        b"The quick brown fox jumps over the lazy dog.",
        bytes(rng.integers(0, 256, size=context, dtype=np.uint8)),       # exactly context
    ]


def sample_images(patch: int) -> list:
    rng = np.random.default_rng([SEED, 2])
    y, x = np.mgrid[0:70, 0:100]
    smooth = np.stack([(3 * y + 2 * x) % 256, (5 * x) % 256, (7 * y) % 256], -1)
    noisy = np.clip(smooth + rng.integers(-40, 41, smooth.shape), 0, 255).astype(np.uint8)
    return [
        rng.integers(0, 256, (13, 29, 3), dtype=np.uint8),               # odd sizes: resized
        rng.integers(0, 256, (3 * patch, 5 * patch, 3), dtype=np.uint8),  # a whole grid: no resize
        noisy,                                                           # 9 x 13 > context: shrunk
    ]


def sample_recordings() -> list:
    rng = np.random.default_rng([SEED, 3])
    t = np.arange(1500) / RECORDING_RATE
    tone = 0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * rng.standard_normal(t.shape)
    return [
        rng.uniform(-1, 1, 5512).astype(np.float32),                     # 0.25 s of noise: 13 chunks
        tone.astype(np.float32),                                         # a noisy tone: 4 chunks
    ]


class Manifest:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.lines = []

    def header(self, key: str, value) -> None:
        self.lines.append(f"{key} {value}")

    def array(self, kind: str, index: int, values: np.ndarray, dtype, suffix: str,
              rows: int, cols: int, stem: str) -> None:
        data = np.ascontiguousarray(np.asarray(values).astype(np.dtype(dtype).newbyteorder("<")))
        name = f"{stem}.{suffix}"
        with open(os.path.join(self.directory, name), "wb") as f:
            f.write(data.tobytes())
        self.lines.append(f"{kind} {index} {rows} {cols} {name}")

    def outputs(self, modality: str, embeddings: np.ndarray, tokens, dimensions: int,
                width: int) -> None:
        for i, embedding in enumerate(embeddings):
            self.array(f"{modality}_embedding", i, embedding, np.float64, "f64", 1, dimensions,
                       f"{modality}-{i}-embedding")
            if tokens is not None:
                rows = np.asarray(tokens[i], dtype=np.float64).reshape(-1, width)
                self.array(f"{modality}_tokens", i, rows, np.float64, "f64", rows.shape[0], width,
                           f"{modality}-{i}-tokens")

    def write(self) -> None:
        with open(os.path.join(self.directory, "manifest.txt"), "w") as f:
            f.write(MANIFEST_COMMENT + "\n".join(self.lines) + "\n")


def main(argv: list) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} OUT_DIR", file=sys.stderr)
        return 2
    directory = argv[1]
    os.makedirs(directory, exist_ok=True)
    checkpoint = os.path.join(directory, "model.safetensors")
    write_random_media_checkpoint(checkpoint, seed=SEED, **SHAPE)
    model = ReferenceModel.load(checkpoint)
    D, W, C = model.dimensions, model.token_width, model.context
    assert (D, W, C) == (SHAPE["dimensions"], SHAPE["token_width"], SHAPE["context"])

    manifest = Manifest(directory)
    manifest.header("format", FORMAT)
    manifest.header("checkpoint", "model.safetensors")
    manifest.header("dimensions", D)
    manifest.header("token_width", W)
    manifest.header("context", C)
    manifest.header("audio_sample_rate", RECORDING_RATE)

    texts = sample_texts(C)
    for i, text in enumerate(texts):
        manifest.array("text", i, np.frombuffer(text, np.uint8), np.uint8, "u8", 1, len(text),
                       f"text-{i}")
    with torch.no_grad():
        embeddings, tokens = model.text_encode(texts)
    manifest.outputs("text", embeddings.numpy(), None if tokens is None else
                     [t.numpy() for t in tokens], D, W)

    images = sample_images(SHAPE["image"]["patch_side"])
    for i, image in enumerate(images):
        height, width, _ = image.shape
        manifest.array("image", i, image, np.uint8, "u8", height, width, f"image-{i}")
    embeddings, tokens = media.image_encode(model, images)
    manifest.outputs("image", embeddings, tokens, D, W)

    recordings = sample_recordings()
    for i, recording in enumerate(recordings):
        manifest.array("audio", i, recording, np.float32, "f32", 1, len(recording), f"audio-{i}")
    embeddings, tokens = media.audio_encode_samples(model, recordings, RECORDING_RATE)
    manifest.outputs("audio", embeddings, tokens, D, W)

    manifest.write()
    total = sum(os.path.getsize(os.path.join(directory, name)) for name in os.listdir(directory))
    print(f"{directory}: {len(texts)} texts, {len(images)} images, {len(recordings)} recordings, "
          f"{total} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
