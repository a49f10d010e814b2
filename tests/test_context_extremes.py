"""Every encode verb at both ends of the context range (issue 10, item 6), against the
float64 reference (tests/reference), with inputs exactly at the context and one byte,
patch, tube or chunk over it.

The contexts:

- 1, the smallest the loader accepts (c/src/model/model.c: `context` in [1, 2^24];
  docs/architecture.md's table: 1 <= C <= 2^24). Every CPU class.
- MAX_CONTEXT = 2^24 (UFORM_MAX_CONTEXT in c/src/model/model.c), the largest it accepts;
  2^24 + 1 and 0 are FormatErrors. An input exactly at 2^24 tokens is out of reach of any
  test: attention is quadratic, so one such item is 2^48 query-key pairs per head (about
  10^16 multiply-adds at hidden 64: days on a CPU, and the reference's [n, n] score matrix
  alone would be 2^51 bytes). At 2^24 the verbs therefore run ordinary inputs. What the
  context changes for them is sizing (the forward batch and its scratch are derived from
  the context), so each call runs in a child process whose address space is limited to
  ADDRESS_LIMIT: a small input must not need memory in proportion to the context.
- LARGE_CONTEXT = 2048 at hidden 1024, the largest context at which inputs exactly at the
  context (and one over) stay practical: at hidden 1024 the library's default forward
  batch is 16 MiB / (10 H + 64) = 1628 rows (uform_batch_rows, c/src/encode/encode_batches.c),
  so an item at the context is longer than a default batch and takes the "never below
  context" path; such an item is about 3.4e10 multiply-adds (1.4 s on 2 Zen cores, 1.7 s
  in the float64 reference). Only the fastest FP32 class runs it (as test_thousands_of_texts
  does), and only F32 outputs (the other scalars are row-by-row roundings of them, checked at
  context 1 and 2^24, and each would be another pass over the long items).

Over-context inputs are cut, never refused (the Models page: context is the "tokens one
item may span before it is truncated"; docs/c-api.md for text_encode and text_choose,
docs/media.md sections 2-4): texts keep their first `context` bytes (text_choose:
context - 1, then MASK), an image's grid is shrunk to at most `context` patches, a clip
keeps its first floor(context / grid) tubes, a recording its first `context` chunks. So
one unit over the context must give exactly the bits of the input cut to the context
(when the cut input is itself a valid input) and be counted as truncated.

Found and fixed: at context 2^24 the media file verbs (image_encode, audio_encode,
video_encode) and uform_video_encode_frames asked for about 50 GB for a single small item
(batches were floored at the context), and text_encode, text_choose, image_encode_pixels
and audio_encode_samples needed 5 GiB of attention scratch per executor thread
(c/src/encode/encode_batches.c and text_batches.c sized it for the context, not for the
call). Checked under ASan by tests/c/test_context_extremes.c too.

Tolerances are the existing tests' own, imported with their derivations: FP32_TOLERANCE
(2e-5 per component) and BF16_TOLERANCE (3e-2 and cosine > 0.999 on SAPPHIRE) from
tests/test_text_encode.py, through test_media_encode.compare for media; text_choose's
per-probability bound from tests/test_text_choose.py; MaxSim's per-pair bound from
tests/test_late_interaction_scores.py. The derivations assume depth <= 4 and GEMM sums of
at most 4H products; at hidden 1024 the sums are 4096 products and attention averages
2048 values, which the FP32 bound still covers with room to spare: measured errors at
LARGE_CONTEXT are about 4e-7 (embeddings) and 1.4e-6 (token vectors) against 2e-5.
"""
from __future__ import annotations

import functools
import json
import math
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch

import media_probe
import uform
from conftest import CPU_CLASSES, TESTS
from reference import f32_to_bf16_bits, media, safetensors_io
from reference.media_checkpoint import write_random_media_checkpoint
from test_late_interaction_scores import assert_within_bound
from test_media_encode import FORMATS, compare, needs
from test_text_choose import assert_close
from test_text_choose import reference as choose_reference
from test_text_choose import reference_model
from test_text_encode import FP32_CLASSES, tolerance

MAX_CONTEXT = 1 << 24          # UFORM_MAX_CONTEXT, c/src/model/model.c
LARGE_CONTEXT = 2048
BOTH = uform.Outputs.EMBEDDINGS | uform.Outputs.TOKENS
ROOT = os.path.dirname(TESTS)
FAST = FP32_CLASSES[-1]        # the fastest FP32 class: the one LARGE_CONTEXT runs on

# 4 GiB of address space for the child processes at MAX_CONTEXT: the interpreter, numpy,
# uform and at most 8 threads take well under 1 GiB; anything sized by a context of 2^24
# rows is gigabytes (the attention scratch alone would be 80 floats per row per thread,
# 5 GiB a thread; the forward batch's states and scratch 10 H + 64 floats per row, 43 GiB
# at hidden 64).
ADDRESS_LIMIT = 4 << 30

TEXT_SHAPE = dict(depth=2, hidden=64, dimensions=16, token_width=8, byte_head=True,
                  choice_temperature_groups=2)
LARGE_TEXT_SHAPE = dict(depth=1, hidden=1024, dimensions=32, token_width=16, byte_head=True,
                        choice_temperature_groups=2)
PATCH, TUBE, CHUNK, RATE = 4, 2, 64, 16000
MEDIA_PARTS = dict(image={"patch_side": PATCH}, video={"patch_side": PATCH, "tube_frames": TUBE},
                   audio={"chunk_samples": CHUNK, "sample_rate": RATE})
MEDIA_SHAPE = dict(depth=2, hidden=64, dimensions=16, token_width=8, **MEDIA_PARTS)
LARGE_MEDIA_SHAPE = dict(depth=1, hidden=1024, dimensions=32, token_width=16, **MEDIA_PARTS)

SCALARS = [uform.Scalar.BF16, uform.Scalar.F16, uform.Scalar.E4M3, uform.Scalar.E5M2, uform.Scalar.I8,
           uform.Scalar.B1]


# ---- checkpoints, reference -----------------------------------------------------------

@pytest.fixture(scope="session")
def media_checkpoint(tmp_path_factory):
    """media_checkpoint(**shape) -> path of a random checkpoint with media parts, cached."""
    cache = {}

    def make(**shape):
        key = repr(sorted(shape.items()))
        if key not in cache:
            path = tmp_path_factory.mktemp("context-media") / f"model-{len(cache)}.safetensors"
            write_random_media_checkpoint(str(path), **shape)
            cache[key] = str(path)
        return cache[key]

    return make


def with_context(source: str, target, context: int) -> str:
    """A copy of a checkpoint whose metadata says `context` (any value, even refused ones)."""
    tensors, metadata = safetensors_io.read(source)
    config = json.loads(metadata["uform"])
    config["context"] = context
    safetensors_io.write(target, tensors, {**metadata, "uform": json.dumps(config)})
    return str(target)


@functools.lru_cache(maxsize=None)
def reference_one_text(path: str, text: bytes) -> tuple:
    """(embedding [D], token vectors [n, W]) of one text; cached, as several tests and CPU
    classes compare with the same values (a text of LARGE_CONTEXT bytes costs 1.7 s)."""
    with torch.no_grad():
        embeddings, tokens = reference_model(path).text_encode([text])
    return embeddings.numpy()[0], tokens[0].numpy()


def reference_text(path: str, texts: list):
    context = reference_model(path).context   # cut here, so a text over it shares the cache entry
    results = [reference_one_text(path, bytes(text)[:context]) for text in texts]
    return np.stack([e for e, _ in results]), [t for _, t in results]


def reference_images(path: str, images: list):
    return media.image_encode(reference_model(path), images)


def reference_clips(path: str, clips: list):
    return media.video_encode(reference_model(path), clips)


def reference_recordings(path: str, recordings: list, rate: int):
    return media.audio_encode_samples(reference_model(path), recordings, rate)


def random_bytes(count: int, seed: int) -> bytes:
    return bytes(np.random.default_rng(seed).integers(0, 256, count, dtype=np.uint8))


def random_pixels(shape: tuple, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def random_samples(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, count).astype(np.float32)


def offsets_of(lengths) -> list:
    return [0] + list(np.cumsum(lengths))


def assert_same_item(encoded, i: int, j: int) -> None:
    """Items i and j of one call have identical embeddings and token rows, bit for bit."""
    embeddings = np.asarray(encoded.embeddings)
    assert np.array_equal(embeddings[i], embeddings[j]), (i, j)
    if encoded.tokens is not None:
        assert np.array_equal(encoded.tokens.rows(i), encoded.tokens.rows(j)), (i, j)


def unit(x: np.ndarray) -> np.ndarray:
    """x, contiguous, once every component is checked to lie in [-1, 1]."""
    assert np.all(np.abs(x) <= 1)
    return np.ascontiguousarray(x)


def assert_scalars_round_f32(run, e32: np.ndarray, t32: np.ndarray) -> None:
    """run(scalar) -> (embeddings, tokens) in that scalar: each the rounding of the F32 outputs
    (docs/architecture.md section 5), as test_text_encode.test_output_scalars_are_rounded_f32."""
    expected = {
        uform.Scalar.BF16: lambda x: f32_to_bf16_bits(x),
        uform.Scalar.F16: lambda x: x.astype(np.float16),
        # torch rounds to nearest even as the library does; they differ only past the
        # largest finite value, which unit vectors never reach (tests/test_fp8_outputs.py)
        uform.Scalar.E4M3: lambda x: torch.from_numpy(unit(x)).to(torch.float8_e4m3fn).view(torch.uint8).numpy(),
        uform.Scalar.E5M2: lambda x: torch.from_numpy(unit(x)).to(torch.float8_e5m2).view(torch.uint8).numpy(),
        uform.Scalar.I8: lambda x: np.clip(np.rint(x * 127), -127, 127).astype(np.int8),
        uform.Scalar.B1: lambda x: np.packbits(x > 0, axis=1),
    }
    for scalar in SCALARS:
        embeddings, tokens = run(scalar)
        assert np.array_equal(np.asarray(embeddings), expected[scalar](e32)), scalar.name
        assert np.array_equal(np.asarray(tokens), expected[scalar](t32)), scalar.name


def text_inputs(context: int) -> tuple:
    """(texts, index of the text exactly at context, index of the one a byte over it)."""
    exact = random_bytes(context, seed=context)
    texts = [b"", exact, exact + b"!", b"\x00" * (context + 1000), "héllo ✓".encode()]
    return texts, 1, 2


# ---- the loader's range -----------------------------------------------------------------

def test_loader_accepts_exactly_one_to_two_to_the_24(checkpoint_factory, tmp_path):
    source = checkpoint_factory(context=1, **TEXT_SHAPE)
    for context in (1, MAX_CONTEXT):
        path = with_context(source, tmp_path / f"c{context}.safetensors", context)
        assert uform.Model.load_ram(path).describe().context == context
    for context in (0, MAX_CONTEXT + 1, 1 << 32):
        path = with_context(source, tmp_path / f"bad{context}.safetensors", context)
        with pytest.raises(uform.FormatError, match=rf"context {context} is outside \[1, {MAX_CONTEXT}\]"):
            uform.Model.load_ram(path)


# ---- context 1 -------------------------------------------------------------------------

@pytest.mark.parametrize("cpu_class", CPU_CLASSES, ids=lambda c: c.name)
def test_text_encode_at_context_one(checkpoint_factory, cpu_class):
    path = checkpoint_factory(context=1, **TEXT_SHAPE)
    texts, exact, over = text_inputs(1)
    expected_embeddings, expected_tokens = reference_text(path, texts)
    model = uform.Model.load_ram(path, cpu_class=cpu_class)
    stats = uform.TextEncodeStats()
    encoded = model.text_encode(texts, uform.Arena(), outputs=BOTH, stats=stats)
    compare(cpu_class, encoded.embeddings, encoded.tokens.rows, expected_embeddings, expected_tokens,
            empty=(0,))
    assert list(encoded.tokens.offsets) == [0, 0, 1, 2, 3, 4]       # one token per non-empty text
    assert (stats.items, stats.tokens, stats.truncated, stats.empty) == (5, 4, 3, 1)
    assert_same_item(encoded, exact, over)                           # b"x!" is cut to b"x"

    e32, t32 = np.array(encoded.embeddings), np.array(encoded.tokens)
    arena = uform.Arena()

    def run(scalar):
        result = model.text_encode(texts, arena, outputs=BOTH, outputs_scalar=scalar)
        return result.embeddings, result.tokens

    assert_scalars_round_f32(run, e32, t32)
    with pytest.raises(uform.InvalidArgumentError, match="outputs_scalar"):
        model.text_encode(texts, arena, outputs_scalar=7)              # one past B1


@pytest.mark.parametrize("cpu_class", CPU_CLASSES, ids=lambda c: c.name)
def test_text_choose_at_context_one(checkpoint_factory, cpu_class):
    """text_choose keeps context - 1 = 0 bytes: the empty text is exactly at the context,
    one byte is one over; every text answers what MASK alone answers."""
    path = checkpoint_factory(context=1, **TEXT_SHAPE)
    model = uform.Model.load_ram(path, cpu_class=cpu_class)
    texts = [b"", b"q", b"long question?" * 50]
    stats = uform.TextEncodeStats()
    answer = model.text_choose(texts, ["yn", "yn", bytes(range(256))], uform.Arena(),
                               temperature_groups=[1, 1, 0], stats=stats)
    assert list(answer.offsets) == [0, 2, 4, 260]
    for i, (choices, group) in enumerate([(b"yn", 1), (b"yn", 1), (bytes(range(256)), 0)]):
        expected, logits = choose_reference(path, b"", choices, group)
        assert_close(answer.rows(i), expected, logits, cpu_class, f"text {i}")
    assert np.array_equal(answer.rows(0), answer.rows(1))
    assert (stats.items, stats.tokens, stats.truncated, stats.empty) == (3, 3, 2, 1)


@pytest.mark.parametrize("cpu_class", CPU_CLASSES, ids=lambda c: c.name)
def test_late_interaction_at_context_one(checkpoint_factory, cpu_class):
    """One token per text: MaxSim is the dot product of the two token vectors."""
    path = checkpoint_factory(context=1, **TEXT_SHAPE)
    model = uform.Model.load_ram(path, cpu_class=cpu_class)
    queries_texts, documents_texts = [b"a", b"", b"b..."], [b"a", b"bcd", b"", b"z" * 9]
    queries = model.text_encode(queries_texts, uform.Arena(), outputs=uform.Outputs.TOKENS).tokens
    documents = model.text_encode(documents_texts, uform.Arena(), outputs=uform.Outputs.TOKENS).tokens
    scores = uform.late_interaction_scores(queries, documents)
    q_rows = [queries.rows(i) for i in range(3)]
    d_rows = [documents.rows(i) for i in range(4)]
    assert_within_bound(scores, q_rows, d_rows)
    for q, d in [(0, 0), (0, 1), (2, 1), (2, 3)]:
        assert scores[q, d] == pytest.approx(float(q_rows[q][0] @ d_rows[d][0]), abs=1e-6)
    # b"b..." and b"bcd" are cut to b"b": the same token vector, a unit vector, so MaxSim 1
    assert scores[0, 0] == pytest.approx(1, abs=1e-6) and scores[2, 1] == pytest.approx(1, abs=1e-6)
    assert np.all(scores[1] == 0) and np.all(scores[:, 2] == 0)      # empty texts score 0
    _assert_against_reference_tokens(path, queries_texts, documents_texts, scores, cpu_class, width=8)


def _assert_against_reference_tokens(path, queries_texts, documents_texts, scores, cpu_class, width):
    """MaxSim of the library's token vectors against MaxSim of the reference's. Each component
    is within tolerance(cpu_class) = t of the reference, so a vector within sqrt(W) t in norm;
    for unit vectors |<q', d'> - <q, d>| <= |q' - q| + |d' - d| <= 2 sqrt(W) t, and a max and a
    mean of such terms move by no more. The library's own FP32 arithmetic is covered
    separately (assert_within_bound) and is orders of magnitude smaller."""
    from reference.late_interaction import late_interaction_scores

    _, q_tokens = reference_text(path, queries_texts)
    _, d_tokens = reference_text(path, documents_texts)
    expected = late_interaction_scores(q_tokens, d_tokens)
    allowed = 2 * math.sqrt(width) * tolerance(cpu_class)
    assert np.abs(scores.astype(np.float64) - expected).max() <= allowed


@pytest.mark.parametrize("cpu_class", CPU_CLASSES, ids=lambda c: c.name)
def test_image_encode_pixels_at_context_one(media_checkpoint, cpu_class):
    """Context 1 admits one patch: a P x P image is exactly one (no resize); a 2P x P image
    is one patch over and shrinks to 1 x 1 (docs/media.md section 2), as any larger one."""
    path = media_checkpoint(context=1, **MEDIA_SHAPE)
    images = [random_pixels((PATCH, PATCH, 3), 1), random_pixels((2 * PATCH, PATCH, 3), 2),
              random_pixels((PATCH, 2 * PATCH, 3), 3), random_pixels((1, 1, 3), 4),
              random_pixels((PATCH * 40 + 1, PATCH * 3, 3), 5)]
    grids = [media.image_grid(i.shape[0], i.shape[1], PATCH, 1) for i in images]
    assert all(rows * cols == 1 for rows, cols, _ in grids)
    assert [shrunk for _, _, shrunk in grids] == [False, True, True, False, True]
    expected_embeddings, expected_tokens = reference_images(path, images)
    model = uform.Model.load_ram(path, cpu_class=cpu_class)
    stats = uform.ImageEncodeStats()
    encoded = model.image_encode_pixels(images, uform.Arena(), outputs=BOTH, stats=stats)
    compare(cpu_class, encoded.embeddings, encoded.tokens.rows, expected_embeddings, expected_tokens)
    assert list(encoded.tokens.offsets) == [0, 1, 2, 3, 4, 5]
    assert (stats.items, stats.tokens, stats.resized, stats.shrunk) == (5, 5, 4, 3)

    e32, t32 = np.array(encoded.embeddings), np.array(encoded.tokens)
    arena = uform.Arena()

    def run(scalar):
        result = model.image_encode_pixels(images, arena, outputs=BOTH, outputs_scalar=scalar)
        return result.embeddings, result.tokens

    assert_scalars_round_f32(run, e32, t32)


def context_one_clips() -> list:
    """[F, h, w, 3] clips for context 1 (tube_frames 2): one tube exactly, one tube over
    (3 frames: 2 tubes, the first kept), one frame (the tube repeats it), a grid over
    context (shrunk to one patch), no frame."""
    return [random_pixels((TUBE, PATCH, PATCH, 3), 10), random_pixels((TUBE + 1, PATCH, PATCH, 3), 11),
            random_pixels((1, PATCH, PATCH, 3), 12), random_pixels((TUBE, 3 * PATCH, 5 * PATCH, 3), 13),
            np.zeros((0, 0, 0, 3), np.uint8)]


@pytest.mark.parametrize("cpu_class", CPU_CLASSES, ids=lambda c: c.name)
def test_video_frames_at_context_one(media_checkpoint, cpu_class):
    path = media_checkpoint(context=1, **MEDIA_SHAPE)
    clips = context_one_clips()
    expected_embeddings, expected_tokens = reference_clips(path, clips)
    result = media_probe.video_encode_frames(path, clips, cpu_class=cpu_class, outputs=int(BOTH))
    assert "status" not in result, result
    offsets = result["offsets"]
    assert list(offsets) == [0, 1, 2, 3, 4, 4]
    compare(cpu_class, result["embeddings"], lambda i: result["tokens"][offsets[i]:offsets[i + 1]],
            expected_embeddings, expected_tokens, empty=(4,))
    assert result["stats"] == {"items": 5, "frames": 2 + 3 + 1 + 2, "tokens": 4, "truncated": 1, "empty": 1}
    # one tube over keeps the first tube: the frames of the clip exactly at context
    cut = media_probe.video_encode_frames(path, [clips[1][:TUBE]], cpu_class=cpu_class, outputs=int(BOTH))
    assert np.array_equal(cut["embeddings"][0], result["embeddings"][1])
    assert np.array_equal(cut["tokens"], result["tokens"][1:2])


@pytest.mark.parametrize("cpu_class", CPU_CLASSES, ids=lambda c: c.name)
@pytest.mark.parametrize("rate", [RATE, 44100])
def test_audio_encode_samples_at_context_one(media_checkpoint, cpu_class, rate):
    """Context 1 keeps one chunk: a recording of exactly one chunk at the model's rate, one
    sample over (two chunks, the first kept), and at 44.1 kHz the lengths whose resampled
    length is exactly one chunk and one sample more."""
    path = media_checkpoint(context=1, **MEDIA_SHAPE)
    exact = min(n for n in range(1, 10 * CHUNK) if media.resampled_length(n, rate, RATE) == CHUNK)
    over = min(n for n in range(exact, 10 * CHUNK) if media.resampled_length(n, rate, RATE) == CHUNK + 1)
    long = random_samples(over * 50, 21)
    recordings = [long[:exact], long[:over], np.zeros(0, np.float32), long, long[:1]]
    expected_embeddings, expected_tokens = reference_recordings(path, recordings, rate)
    model = uform.Model.load_ram(path, cpu_class=cpu_class)
    stats = uform.AudioEncodeStats()
    encoded = model.audio_encode_samples(recordings, rate, uform.Arena(), outputs=BOTH, stats=stats)
    compare(cpu_class, encoded.embeddings, encoded.tokens.rows, expected_embeddings, expected_tokens,
            empty=(2,))
    assert list(encoded.tokens.offsets) == [0, 1, 2, 2, 3, 4]
    assert (stats.items, stats.tokens, stats.truncated, stats.empty) == (5, 4, 2, 1)
    assert stats.samples == sum(media.resampled_length(len(r), rate, RATE) for r in recordings)
    if rate == RATE:   # equal rates copy: the sample over the chunk is simply dropped
        assert_same_item(encoded, 0, 1)

    e32, t32 = np.array(encoded.embeddings), np.array(encoded.tokens)
    arena = uform.Arena()

    def run(scalar):
        result = model.audio_encode_samples(recordings, rate, arena, outputs=BOTH, outputs_scalar=scalar)
        return result.embeddings, result.tokens

    assert_scalars_round_f32(run, e32, t32)


def test_file_verbs_at_context_one(media_checkpoint, tmp_path):
    """image_encode, audio_encode and video_encode at context 1: lossless files equal their
    pixels and samples; a clip equals the frames verb on the frames the library decodes."""
    path = media_checkpoint(context=1, **MEDIA_SHAPE)
    model = uform.Model.load_ram(path, cpu_class=FAST)
    arena = uform.Arena()
    if FORMATS & 2:
        from PIL import Image

        images = [random_pixels((PATCH, PATCH, 3), 1), random_pixels((2 * PATCH, PATCH, 3), 2)]
        files = []
        for index, image in enumerate(images):
            files.append(tmp_path / f"{index}.png")
            Image.fromarray(image).save(files[-1])
        stats = uform.ImageEncodeStats()
        from_files = model.image_encode(files, arena, outputs=BOTH, stats=stats)
        e, t = np.array(from_files.embeddings), np.array(from_files.tokens)
        from_pixels = model.image_encode_pixels(images, arena, outputs=BOTH)
        assert np.array_equal(e, np.asarray(from_pixels.embeddings))
        assert np.array_equal(t, np.asarray(from_pixels.tokens))
        assert (stats.items, stats.tokens, stats.shrunk) == (2, 2, 1)
    if FORMATS & 16:
        import soundfile

        recording = random_samples(CHUNK + 1, 22)
        files = [tmp_path / "exact.wav", tmp_path / "over.wav"]
        soundfile.write(files[0], recording[:CHUNK], RATE, subtype="FLOAT")
        soundfile.write(files[1], recording, RATE, subtype="FLOAT")
        stats = uform.AudioEncodeStats()
        from_files = np.array(model.audio_encode(files, arena, stats=stats).embeddings)
        from_samples = np.asarray(model.audio_encode_samples([recording[:CHUNK], recording], RATE,
                                                             arena).embeddings)
        assert np.array_equal(from_files, from_samples)
        assert np.array_equal(from_files[0], from_files[1])
        assert (stats.items, stats.tokens, stats.truncated) == (2, 2, 1)
    if FORMATS & 8:
        check_video_files(path, model, tmp_path, [TUBE, TUBE + 1], height=16, width=16,
                          tokens=[1, 1], truncated=1)
    if not FORMATS & (2 | 8 | 16):
        pytest.skip("this build decodes neither PNG, WAV nor MP4")


def check_video_files(path: str, model, tmp_path, frame_counts: list, *, height: int, width: int,
                      tokens: list, truncated: int) -> None:
    """video_encode of mpeg4 clips of `frame_counts` frames equals the frames verb run on the
    frames the library's own decoder yields (tests/c/decode_tool.c): the file verb adds
    decoding alone, and decoding is tested against PyAV in test_decode.py."""
    import media_fixtures
    from media_decoding import Tool, build_tool

    tool = Tool(build_tool())
    files = []
    for count in frame_counts:
        files.append(tmp_path / f"clip-{count}.mp4")
        media_fixtures.write_clip(files[-1], "mpeg4", "mp4", frames=count, height=height, width=width)
    stats = uform.VideoEncodeStats()
    from_files = model.video_encode(files, uform.Arena(), outputs=BOTH, stats=stats)
    decoded = [tool.video(file) for file in files]
    assert [len(frames) for frames in decoded] == frame_counts
    from_frames = media_probe.video_encode_frames(path, decoded, cpu_class=model.describe().cpu_class,
                                                  outputs=int(BOTH))
    assert np.array_equal(np.asarray(from_files.embeddings), from_frames["embeddings"])
    assert np.array_equal(np.asarray(from_files.tokens), from_frames["tokens"])
    assert list(from_files.tokens.offsets) == offsets_of(tokens)
    assert (stats.items, stats.frames, stats.tokens, stats.truncated) == (
        len(files), sum(frame_counts), sum(tokens), truncated)


# ---- LARGE_CONTEXT: inputs exactly at the context and one over ----------------------------

def test_text_encode_at_a_large_context(checkpoint_factory):
    """F32 outputs only at this context (the other scalars are row by row roundings of them,
    checked at context 1 and 2^24, and each would cost another pass over the long items)."""
    context = LARGE_CONTEXT
    path = checkpoint_factory(context=context, **LARGE_TEXT_SHAPE)
    exact = random_bytes(context, seed=5)
    texts = [exact, exact + b"\xff", b"short", b""]
    model = uform.Model.load_ram(path, cpu_class=FAST)
    stats = uform.TextEncodeStats()
    encoded = model.text_encode(texts, uform.Arena(), outputs=BOTH, stats=stats)
    tokens, offsets = np.asarray(encoded.tokens), encoded.tokens.offsets
    assert list(offsets) == [0, context, 2 * context, 2 * context + 5, 2 * context + 5]
    assert (stats.items, stats.tokens, stats.truncated, stats.empty) == (4, 2 * context + 5, 1, 1)
    expected_embeddings, expected_tokens = reference_text(path, [exact, exact, b"short", b""])
    compare(FAST, encoded.embeddings, encoded.tokens.rows, expected_embeddings, expected_tokens, empty=(3,))
    assert_same_item(encoded, 0, 1)

    # late interaction over these token sets, a full context's rows among them
    scores = uform.late_interaction_scores((tokens, offsets), (tokens, offsets))
    split = [encoded.tokens.rows(i) for i in range(4)]
    assert_within_bound(scores, split, split)
    assert scores[0, 1] == pytest.approx(1, abs=1e-5)   # the same token set: every row finds itself
    _assert_against_reference_tokens(path, texts, texts, scores, FAST, width=LARGE_TEXT_SHAPE["token_width"])


def test_text_choose_at_a_large_context(checkpoint_factory):
    """text_choose keeps context - 1 bytes: that many is exactly at the context, `context`
    bytes one over (cut by its last byte)."""
    context = LARGE_CONTEXT
    path = checkpoint_factory(context=context, **LARGE_TEXT_SHAPE)
    exact = random_bytes(context - 1, seed=6)
    model = uform.Model.load_ram(path, cpu_class=FAST)
    stats = uform.TextEncodeStats()
    answer = model.text_choose([exact, exact + b"?"], "ABC", uform.Arena(), temperature_groups=[1, 1],
                               stats=stats)
    expected, logits = choose_reference(path, exact, b"ABC", 1)
    assert_close(answer.rows(0), expected, logits, FAST, "exactly at context")
    assert np.array_equal(answer.rows(0), answer.rows(1))
    assert (stats.items, stats.tokens, stats.truncated, stats.empty) == (2, 2 * context, 1, 0)


def test_image_encode_pixels_at_a_large_context(media_checkpoint):
    """A 32 x 64 grid is exactly the context (no resize). A 3 x 683 grid is one patch over:
    s = sqrt(C / (C + 1)) floors both sides down by one, to 2 x 682 (docs/media.md section 2;
    a 1 x (C + 1) grid would keep 1 x C, but the reference resizes with dense matrices,
    4 s for an axis of 8192)."""
    context = LARGE_CONTEXT
    path = media_checkpoint(context=context, **LARGE_MEDIA_SHAPE)
    images = [random_pixels((32 * PATCH, 64 * PATCH, 3), 7), random_pixels((3 * PATCH, 683 * PATCH, 3), 8)]
    assert 3 * 683 == context + 1
    assert media.image_grid(*images[0].shape[:2], PATCH, context) == (32, 64, False)
    assert media.image_grid(*images[1].shape[:2], PATCH, context) == (2, 682, True)
    expected_embeddings, expected_tokens = reference_images(path, images)
    model = uform.Model.load_ram(path, cpu_class=FAST)
    stats = uform.ImageEncodeStats()
    encoded = model.image_encode_pixels(images, uform.Arena(), outputs=BOTH, stats=stats)
    compare(FAST, encoded.embeddings, encoded.tokens.rows, expected_embeddings, expected_tokens)
    assert list(encoded.tokens.offsets) == [0, context, context + 2 * 682]
    assert (stats.items, stats.tokens, stats.resized, stats.shrunk) == (2, context + 2 * 682, 1, 1)


def test_video_at_a_large_context(media_checkpoint, tmp_path):
    """16 x 16 frames are a 4 x 4 grid, so the context holds 128 tubes of 2 frames: 256 frames
    are exactly the context, 257 one tube over (the first 128 tubes kept: the same bits)."""
    context = LARGE_CONTEXT
    path = media_checkpoint(context=context, **LARGE_MEDIA_SHAPE)
    tubes = context // 16
    frames = random_pixels((TUBE * tubes + 1, 16, 16, 3), 9)
    clips = [frames[:TUBE * tubes], frames]
    if FORMATS & 8:   # and the frames the library decodes from an mpeg4 clip one tube over
        import media_fixtures
        from media_decoding import Tool, build_tool

        file = tmp_path / "over.mp4"
        media_fixtures.write_clip(file, "mpeg4", "mp4", frames=TUBE * tubes + 1, height=16, width=16)
        decoded = Tool(build_tool()).video(file)
        assert decoded.shape == (TUBE * tubes + 1, 16, 16, 3)
        clips.append(decoded[:TUBE * tubes])
    expected_embeddings, expected_tokens = reference_clips(path, clips[:1])
    result = media_probe.video_encode_frames(path, clips, cpu_class=FAST, outputs=int(BOTH))
    assert "status" not in result, result
    offsets = result["offsets"]
    assert list(offsets) == [context * i for i in range(len(clips) + 1)]
    compare(FAST, result["embeddings"][:1], lambda i: result["tokens"][:context], expected_embeddings,
            expected_tokens)
    assert np.array_equal(result["embeddings"][0], result["embeddings"][1])
    assert np.array_equal(result["tokens"][:context], result["tokens"][context:2 * context])
    assert result["stats"]["truncated"] == 1 and result["stats"]["tokens"] == len(clips) * context
    assert result["stats"]["frames"] == 2 * TUBE * tubes + 1 + (TUBE * tubes if len(clips) == 3 else 0)
    if FORMATS & 8:   # the file verb equals the frames verb on the clip's first 128 tubes
        model = uform.Model.load_ram(path, cpu_class=FAST)
        stats = uform.VideoEncodeStats()
        from_file = model.video_encode([file], uform.Arena(), outputs=BOTH, stats=stats)
        assert (stats.items, stats.frames, stats.tokens, stats.truncated) == (1, TUBE * tubes + 1, context, 1)
        assert np.array_equal(np.asarray(from_file.embeddings)[0], result["embeddings"][2])
        assert np.array_equal(np.asarray(from_file.tokens), result["tokens"][2 * context:])


def test_audio_at_a_large_context(media_checkpoint, tmp_path):
    """context chunks of 64 samples at the model's rate exactly; one sample more is a chunk
    over, dropped (equal rates copy, so the kept chunks are the same samples)."""
    context = LARGE_CONTEXT
    path = media_checkpoint(context=context, **LARGE_MEDIA_SHAPE)
    recording = random_samples(context * CHUNK + 1, 10)
    recordings = [recording[:-1], recording]
    expected_embeddings, expected_tokens = reference_recordings(path, recordings[:1], RATE)
    model = uform.Model.load_ram(path, cpu_class=FAST)
    stats = uform.AudioEncodeStats()
    encoded = model.audio_encode_samples(recordings, RATE, uform.Arena(), outputs=BOTH, stats=stats)
    compare(FAST, np.asarray(encoded.embeddings)[:1], encoded.tokens.rows, expected_embeddings, expected_tokens)
    assert list(encoded.tokens.offsets) == [0, context, 2 * context]
    assert (stats.items, stats.samples, stats.tokens, stats.truncated) == (2, 2 * context * CHUNK + 1,
                                                                             2 * context, 1)
    assert_same_item(encoded, 0, 1)
    if FORMATS & 16:   # the file verb: float WAV is lossless
        import soundfile

        file = tmp_path / "over.wav"
        soundfile.write(file, recording, RATE, subtype="FLOAT")
        from_file = model.audio_encode([file], uform.Arena(), outputs=BOTH)
        assert np.array_equal(np.asarray(from_file.embeddings)[0], np.asarray(encoded.embeddings)[1])
        assert np.array_equal(np.asarray(from_file.tokens), encoded.tokens.rows(1))


# ---- MAX_CONTEXT: the largest context the loader accepts, under an address-space limit ---

CHILD = r"""
import pickle, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[3]), int(sys.argv[3])))
sys.path[:0] = [sys.argv[4], sys.argv[5]]
with open(sys.argv[1], "rb") as stream:
    job = pickle.load(stream)
import numpy as np
import uform

def answer(result, stats):
    out = {"stats": None if stats is None else {name: getattr(stats, name) for name in job["fields"]}}
    if isinstance(result, uform.RowsTape):
        out["values"], out["offsets"] = np.array(result), np.array(result.offsets)
    else:
        out["embeddings"] = None if result.embeddings is None else np.array(result.embeddings)
        if result.tokens is not None:
            out["tokens"], out["offsets"] = np.array(result.tokens), np.array(result.tokens.offsets)
    return out

results = []
try:
    if job["verb"] == "video_encode_frames":
        import media_probe
        media_probe._build = lambda: job["probe"]
        for keywords in job["calls"]:
            result = media_probe.video_encode_frames(job["path"], *job["arguments"], cpu_class=job["cpu_class"],
                                                     threads=job["threads"], **keywords)
            if "status" in result:
                from uform._errors import raise_status
                raise_status(result["status"], result["message"])
            results.append(result)
    else:
        # the model's own executor, of `threads` threads whatever the machine's cores
        executor = uform.Executor.for_ram(job["threads"])
        model = uform.Model.load_ram(job["path"], cpu_class=uform.CPUClass(job["cpu_class"]), executor=executor)
        for keywords in job["calls"]:
            stats = getattr(uform, job["stats"])() if job["stats"] else None
            if stats is not None:
                keywords = dict(keywords, stats=stats)
            results.append(answer(getattr(model, job["verb"])(*job["arguments"], uform.Arena(), **keywords), stats))
except uform.Error as error:
    results.append({"error": type(error).__name__, "message": str(error)})
with open(sys.argv[2], "wb") as stream:
    pickle.dump(results, stream)
"""

STATS = {"text_encode": ("TextEncodeStats", ("items", "tokens", "truncated", "empty")),
         "text_choose": ("TextEncodeStats", ("items", "tokens", "truncated", "empty")),
         "image_encode_pixels": ("ImageEncodeStats", ("items", "tokens", "resized", "shrunk")),
         "image_encode": ("ImageEncodeStats", ("items", "tokens", "resized", "shrunk")),
         "audio_encode_samples": ("AudioEncodeStats", ("items", "samples", "tokens", "truncated", "empty")),
         "audio_encode": ("AudioEncodeStats", ("items", "samples", "tokens", "truncated", "empty")),
         "video_encode": ("VideoEncodeStats", ("items", "frames", "tokens", "truncated", "empty")),
         "video_encode_frames": (None, ())}


def limited(tmp_path, path: str, verb: str, arguments: list, calls: list, *, cpu_class=FAST,
            threads: int = 2) -> list:
    """Runs model.<verb>(*arguments, Arena(), **keywords) for each keywords dict in `calls`, the
    model loaded onto an executor of `threads` threads, in a child process limited to
    ADDRESS_LIMIT bytes of address space; one result dict per call. A uform error raises
    SizedByContext for OutOfMemoryError and AssertionError otherwise."""
    job = tmp_path / f"{verb}-job.pickle"
    out = tmp_path / f"{verb}-out.pickle"
    stats, fields = STATS[verb]
    with open(job, "wb") as stream:
        pickle.dump({"path": path, "verb": verb, "arguments": arguments, "calls": calls,
                     "cpu_class": int(cpu_class), "threads": threads, "stats": stats, "fields": fields,
                     "probe": media_probe.probe() if verb == "video_encode_frames" else None}, stream)
    # one BLAS thread and two malloc arenas: the child's own footprint must not scale with cores
    environment = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2"}
    completed = subprocess.run([sys.executable, "-c", CHILD, str(job), str(out), str(ADDRESS_LIMIT), TESTS, ROOT],
                               capture_output=True, text=True, env=environment, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    with open(out, "rb") as stream:
        results = pickle.load(stream)
    if len(results) == 1 and "error" in results[0]:
        message = f"{verb} at context 2^24: {results[0]['error']}: {results[0]['message']}"
        if results[0]["error"] == "OutOfMemoryError":   # memory asked in proportion to the context
            raise SizedByContext(message)
        raise AssertionError(message)
    return results


class SizedByContext(AssertionError):
    """A call at context 2^24 failed with OutOfMemoryError under ADDRESS_LIMIT."""


def test_max_context_model_describes_itself(checkpoint_factory, media_checkpoint):
    for path in (checkpoint_factory(context=MAX_CONTEXT, **TEXT_SHAPE),
                 media_checkpoint(context=MAX_CONTEXT, **MEDIA_SHAPE)):
        description = uform.Model.load_ram(path).describe()
        assert description.context == MAX_CONTEXT
        assert description.memory_usage < 1 << 20       # the context sizes nothing at load


@pytest.mark.parametrize("threads", [1, 8])
def test_text_encode_at_the_max_context(checkpoint_factory, tmp_path, threads):
    """Texts far under the context are never cut (the 1500 bytes would be at most ordinary
    contexts); every output scalar; 8 threads on any machine (the pool may oversubscribe)."""
    path = checkpoint_factory(context=MAX_CONTEXT, **TEXT_SHAPE)
    texts = [b"", b"a", random_bytes(1500, 11), "héllo wörld ✓ 日本語".encode()]
    lengths = [len(t) for t in texts]
    calls = [dict(outputs=BOTH)] + [dict(outputs=BOTH, outputs_scalar=s) for s in SCALARS]
    results = limited(tmp_path, path, "text_encode", [texts], calls, threads=threads)
    expected_embeddings, expected_tokens = reference_text(path, texts)
    f32 = results[0]
    offsets = f32["offsets"]
    assert list(offsets) == offsets_of(lengths)
    compare(FAST, f32["embeddings"], lambda i: f32["tokens"][offsets[i]:offsets[i + 1]],
            expected_embeddings, expected_tokens, empty=(0,))
    assert f32["stats"] == {"items": 4, "tokens": sum(lengths), "truncated": 0, "empty": 1}
    by_scalar = {scalar: (r["embeddings"], r["tokens"]) for scalar, r in zip(SCALARS, results[1:])}
    assert_scalars_round_f32(by_scalar.__getitem__, f32["embeddings"], f32["tokens"])

    # late interaction over the tokens a max-context model produced
    tokens = f32["tokens"]
    scores = uform.late_interaction_scores((tokens, offsets), (tokens, offsets))
    split = [tokens[offsets[i]:offsets[i + 1]] for i in range(4)]
    assert_within_bound(scores, split, split)
    _assert_against_reference_tokens(path, texts, texts, scores, FAST, width=TEXT_SHAPE["token_width"])


def test_text_choose_at_the_max_context(checkpoint_factory, tmp_path):
    path = checkpoint_factory(context=MAX_CONTEXT, **TEXT_SHAPE)
    texts = [b"", b"Q: yes or no? A:", random_bytes(1500, 12)]
    results = limited(tmp_path, path, "text_choose", [texts, ["yn", "yn", bytes(range(256))]],
                      [dict(temperature_groups=[0, 1, 1])])
    values, offsets = results[0]["values"], results[0]["offsets"]
    assert list(offsets) == [0, 2, 4, 260]
    for i, (choices, group) in enumerate([(b"yn", 0), (b"yn", 1), (bytes(range(256)), 1)]):
        expected, logits = choose_reference(path, texts[i], choices, group)
        assert_close(values[offsets[i]:offsets[i + 1]], expected, logits, FAST, f"text {i}")
    assert results[0]["stats"] == {"items": 3, "tokens": 3 + sum(len(t) for t in texts), "truncated": 0,
                                   "empty": 1}


def max_context_images() -> list:
    """Never shrunk at this context: one pixel, a grid, and 30 x 40 = 1200 patches."""
    return [random_pixels((1, 1, 3), 1), random_pixels((3 * PATCH, 5 * PATCH, 3), 2),
            random_pixels((30 * PATCH, 40 * PATCH - 1, 3), 3)]


def test_image_encode_pixels_at_the_max_context(media_checkpoint, tmp_path):
    path = media_checkpoint(context=MAX_CONTEXT, **MEDIA_SHAPE)
    images = max_context_images()
    results = limited(tmp_path, path, "image_encode_pixels", [images],
                      [dict(outputs=BOTH)] + [dict(outputs=BOTH, outputs_scalar=s) for s in SCALARS])
    expected_embeddings, expected_tokens = reference_images(path, images)
    f32 = results[0]
    offsets = f32["offsets"]
    assert list(offsets) == offsets_of([1, 15, 1200])
    compare(FAST, f32["embeddings"], lambda i: f32["tokens"][offsets[i]:offsets[i + 1]],
            expected_embeddings, expected_tokens)
    assert f32["stats"] == {"items": 3, "tokens": 1216, "resized": 2, "shrunk": 0}
    by_scalar = {scalar: (r["embeddings"], r["tokens"]) for scalar, r in zip(SCALARS, results[1:])}
    assert_scalars_round_f32(by_scalar.__getitem__, f32["embeddings"], f32["tokens"])


@pytest.mark.parametrize("rate", [RATE, 44100])
def test_audio_encode_samples_at_the_max_context(media_checkpoint, tmp_path, rate):
    path = media_checkpoint(context=MAX_CONTEXT, **MEDIA_SHAPE)
    recordings = [np.zeros(0, np.float32), random_samples(1, 4), random_samples(CHUNK * 300 + 7, 5)]
    results = limited(tmp_path, path, "audio_encode_samples", [recordings, rate], [dict(outputs=BOTH)])
    expected_embeddings, expected_tokens = reference_recordings(path, recordings, rate)
    f32 = results[0]
    offsets = f32["offsets"]
    lengths = [media.resampled_length(len(r), rate, RATE) for r in recordings]
    assert list(offsets) == offsets_of([math.ceil(n / CHUNK) for n in lengths])
    compare(FAST, f32["embeddings"], lambda i: f32["tokens"][offsets[i]:offsets[i + 1]],
            expected_embeddings, expected_tokens, empty=(0,))
    assert f32["stats"]["truncated"] == 0 and f32["stats"]["samples"] == sum(lengths)


# The file verbs cannot know an item's rows before decoding it and
# uform_video_encode_frames does not compute them, so all four bound a call by count x
# context (c/src/encode/image_encode.c, audio_encode.c, video_encode.c). The encoder used
# to size its states and forward scratch for min(bound + 1, uform_batch_rows(model)) rows
# with uform_batch_rows floored at the context: at context 2^24 one 8 x 8 image file asked
# for about 50 GB and failed with OutOfMemoryError. Batches are no longer floored at the
# context (an item longer than a batch gets a batch of its own, the buffers grown for it),
# and these four tests run inside the same 4 GiB address-space limit as the others.
def test_video_frames_at_the_max_context(media_checkpoint, tmp_path):
    path = media_checkpoint(context=MAX_CONTEXT, **MEDIA_SHAPE)
    clips = [random_pixels((TUBE * 3 + 1, 3 * PATCH, 4 * PATCH, 3), 6), np.zeros((0, 0, 0, 3), np.uint8)]
    results = limited(tmp_path, path, "video_encode_frames", [clips], [dict(outputs=int(BOTH))])
    expected_embeddings, expected_tokens = reference_clips(path, clips)
    result = results[0]
    offsets = result["offsets"]
    assert list(offsets) == [0, 4 * 12, 4 * 12]
    compare(FAST, result["embeddings"], lambda i: result["tokens"][offsets[i]:offsets[i + 1]],
            expected_embeddings, expected_tokens, empty=(1,))


def test_image_file_at_the_max_context(media_checkpoint, tmp_path):
    needs(2, "PNG")
    from PIL import Image

    path = media_checkpoint(context=MAX_CONTEXT, **MEDIA_SHAPE)
    images = max_context_images()
    files = []
    for index, image in enumerate(images):
        files.append(str(tmp_path / f"{index}.png"))
        Image.fromarray(image).save(files[-1])
    results = limited(tmp_path, path, "image_encode", [files], [dict(outputs=BOTH)])
    expected_embeddings, expected_tokens = reference_images(path, images)
    offsets = results[0]["offsets"]
    compare(FAST, results[0]["embeddings"], lambda i: results[0]["tokens"][offsets[i]:offsets[i + 1]],
            expected_embeddings, expected_tokens)


def test_audio_file_at_the_max_context(media_checkpoint, tmp_path):
    needs(16, "WAV")
    import soundfile

    path = media_checkpoint(context=MAX_CONTEXT, **MEDIA_SHAPE)
    recording = random_samples(CHUNK * 300 + 7, 5)
    file = str(tmp_path / "long.wav")
    soundfile.write(file, recording, RATE, subtype="FLOAT")
    results = limited(tmp_path, path, "audio_encode", [[file]], [dict(outputs=BOTH)])
    expected_embeddings, expected_tokens = reference_recordings(path, [recording], RATE)
    compare(FAST, results[0]["embeddings"], lambda i: results[0]["tokens"], expected_embeddings,
            expected_tokens)


def test_video_file_at_the_max_context(media_checkpoint, tmp_path):
    needs(8, "MP4/WebM")
    import media_fixtures

    path = media_checkpoint(context=MAX_CONTEXT, **MEDIA_SHAPE)
    file = str(tmp_path / "clip.mp4")
    media_fixtures.write_clip(file, "mpeg4", "mp4", frames=5, height=16, width=16)
    results = limited(tmp_path, path, "video_encode", [[file]], [dict(outputs=BOTH)])
    # 5 frames of a 4 x 4 grid: 3 tubes of 16 patches, none cut
    assert results[0]["stats"] == {"items": 1, "frames": 5, "tokens": 48, "truncated": 0, "empty": 0}
    from media_decoding import Tool, build_tool

    frames = Tool(build_tool()).video(file)
    from_frames = media_probe.video_encode_frames(path, [frames], cpu_class=FAST, outputs=int(BOTH))
    assert np.array_equal(results[0]["embeddings"], from_frames["embeddings"])
    assert np.array_equal(results[0]["tokens"], from_frames["tokens"])
