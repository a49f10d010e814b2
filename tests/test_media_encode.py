"""image_encode_pixels, audio_encode_samples and the video encoder (on decoded frames, through
the probe: the public API reaches it only through the decoders) against the float64 reference (tests/reference/media.py), their own
invariants, and their refusals. The file verbs' tests skip when this build lacks the format.

Tolerances, as tests/test_text_encode.py derives them: FP32 classes (SERIAL, HASWELL,
SKYLAKE) differ from float64 by FP32 rounding through `depth` <= 3 blocks: 2e-5 per
component of a unit vector. The media inputs add the FP32 resize (values differ from the
float64 resize by < 1e-4 of a 255 level, see test_resize_*) and the FP32 patch
projection, both far below that. SAPPHIRE rounds GEMM inputs (pixels and samples
included) to BF16 (2^-9 relative): 3e-2 absolute plus a cosine above 0.999.
"""
import math
import os

import numpy as np
import pytest

import media_probe
import uform
from conftest import BF16_CLASSES, CPU_CLASSES
from reference import ReferenceModel, f32_to_bf16_bits
from reference import media
from reference.media_checkpoint import write_random_media_checkpoint

FP32_TOLERANCE = 2e-5
BF16_TOLERANCE = 3e-2
BOTH = uform.Outputs.EMBEDDINGS | uform.Outputs.TOKENS

SHAPES = [
    dict(depth=1, hidden=64, dimensions=32, context=48, token_width=8,
         image={"patch_side": 4}, video={"patch_side": 4, "tube_frames": 2},
         audio={"chunk_samples": 64, "sample_rate": 16000}),
    dict(depth=2, hidden=128, dimensions=64, context=64, token_width=16,
         image={"patch_side": 8}, video={"patch_side": 8, "tube_frames": 3, "frame_stride": 2},
         audio={"chunk_samples": 160, "sample_rate": 8000}),
    dict(depth=3, hidden=192, dimensions=48, context=100, token_width=0,
         image={"patch_side": 14}, video={"patch_side": 6, "tube_frames": 4},
         audio={"chunk_samples": 400, "sample_rate": 16000}),
]
IDS = [f"d{s['depth']}h{s['hidden']}" for s in SHAPES]


@pytest.fixture(scope="session")
def media_checkpoint(tmp_path_factory):
    """media_checkpoint(**shape) -> path of a random checkpoint with media parts, cached."""
    cache = {}

    def make(**shape):
        key = repr(sorted(shape.items()))
        if key not in cache:
            path = tmp_path_factory.mktemp("media") / f"model-{len(cache)}.safetensors"
            write_random_media_checkpoint(str(path), **shape)
            cache[key] = str(path)
        return cache[key]

    return make


def tolerance(cpu_class) -> float:
    return BF16_TOLERANCE if cpu_class in BF16_CLASSES else FP32_TOLERANCE


def compare(cpu_class, produced_embeddings, produced_tokens, expected_embeddings, expected_tokens,
            empty=()):
    """Embeddings and token rows (produced_tokens: a RowsTape-like (rows(i)) or None)."""
    atol = tolerance(cpu_class)
    produced = np.asarray(produced_embeddings)
    np.testing.assert_allclose(produced, expected_embeddings, atol=atol, rtol=0)
    if cpu_class in BF16_CLASSES:
        live = [i for i in range(len(produced)) if i not in empty]
        cosine = (produced[live] * expected_embeddings[live]).sum(axis=1)
        assert np.all(cosine > 0.999), cosine
    for i in empty:
        assert np.all(produced[i] == 0), "an item without tokens embeds as zeros"
    if expected_tokens is not None:
        for i, expected in enumerate(expected_tokens):
            rows = produced_tokens(i)
            assert rows.shape == expected.shape, (i, rows.shape, expected.shape)
            np.testing.assert_allclose(rows, expected, atol=atol, rtol=0)


# ---- images -------------------------------------------------------------------------

def sample_images(patch: int, context: int) -> list:
    rng = np.random.default_rng(patch * 1000 + context)
    y, x = np.mgrid[0:45, 0:61]
    gradient = np.stack([(3 * y + 2 * x) % 256, (5 * x) % 256, (7 * y) % 256], -1).astype(np.uint8)
    big = rng.integers(0, 256, (patch * 20 + 3, patch * 20 + 5, 3), dtype=np.uint8)
    return [
        np.full((1, 1, 3), 200, np.uint8),                                    # one pixel
        rng.integers(0, 256, (13, 29, 3), dtype=np.uint8),                    # odd sizes
        rng.integers(0, 256, (patch * 3, patch * 5, 3), dtype=np.uint8),      # exactly a grid: no resize
        gradient,                                                             # smooth content
        rng.integers(0, 256, (1, patch * 200, 3), dtype=np.uint8),            # 1 x 200P: shrink, then cut
        rng.integers(0, 256, (patch * 150, 2, 3), dtype=np.uint8),            # tall and thin
        big,                                                                  # grid over context: shrink
        big[7:7 + patch * 2 + 1, 11:11 + patch * 3],                          # a strided crop (no copy)
        rng.integers(0, 256, (patch - 1, patch // 2 + 1, 3), dtype=np.uint8),  # rounds to one patch
    ]


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
@pytest.mark.parametrize("cpu_class", CPU_CLASSES, ids=lambda c: c.name)
def test_images_match_reference(media_checkpoint, shape, cpu_class):
    path = media_checkpoint(**shape)
    patch, context = shape["image"]["patch_side"], shape["context"]
    images = sample_images(patch, context)
    expected_embeddings, expected_tokens = media.image_encode(ReferenceModel.load(path), images)

    model = uform.Model.load_ram(path, cpu_class=cpu_class)
    outputs = BOTH if shape["token_width"] else uform.Outputs.EMBEDDINGS
    stats = uform.ImageEncodeStats()
    encoded = model.image_encode_pixels(images, uform.Arena(), outputs=outputs, stats=stats)
    assert encoded.embeddings.shape == (len(images), shape["dimensions"])
    compare(cpu_class, encoded.embeddings, encoded.tokens.rows if encoded.tokens is not None else None,
            expected_embeddings, expected_tokens)

    grids = [media.image_grid(i.shape[0], i.shape[1], patch, context) for i in images]
    assert stats.items == len(images)
    assert stats.tokens == sum(r * c for r, c, _ in grids)
    assert stats.resized == sum((r * patch, c * patch) != i.shape[:2] for (r, c, _), i in zip(grids, images))
    assert stats.shrunk == sum(s for _, _, s in grids)
    assert stats.shrunk >= 2 and stats.resized < len(images)     # the samples cover both cases
    assert all(r * c <= context for r, c, _ in grids)
    if encoded.tokens is not None:
        assert list(encoded.tokens.offsets) == list(np.cumsum([0] + [r * c for r, c, _ in grids]))


def test_image_grid_rule():
    """DESIGN's grid rule on hand-computed cases (P = 16, context 256)."""
    assert media.image_grid(224, 224, 16, 256) == (14, 14, False)
    assert media.image_grid(1, 1, 16, 256) == (1, 1, False)
    assert media.image_grid(23, 24, 16, 256) == (1, 2, False)      # 1.4375 -> 1, 1.5 + .5 -> 2
    assert media.image_grid(512, 512, 16, 256) == (16, 16, True)   # 32x32, s = 0.5
    # 1 x 1000: s = sqrt(256 / 1000) = 0.506, rows max(1, 0) = 1, cols 505 > 256: cut to 256
    assert media.image_grid(16, 16 * 1000, 16, 256) == (1, 256, True)
    # 7 x 7 over 48: s = 0.9897, both floor to 6
    assert media.image_grid(28, 28, 4, 48) == (6, 6, True)


def test_strided_pixels_cross_without_a_copy_and_equal_contiguous(media_checkpoint):
    path = media_checkpoint(**SHAPES[1])
    model = uform.Model.load_ram(path)
    base = np.random.default_rng(3).integers(0, 256, (90, 120, 3), dtype=np.uint8)
    crop = base[10:60, 20:100]                            # rows 360 bytes apart, 240 used
    flipped = base[::-1, ::-1]                            # negative strides: copied by uform
    bgr = base[..., ::-1]                                 # channel-reversed: copied by uform
    arena = uform.Arena()
    strided = np.array(model.image_encode_pixels([crop, flipped, bgr], arena, outputs=BOTH).embeddings)
    contiguous = np.array(model.image_encode_pixels(
        [np.ascontiguousarray(a) for a in (crop, flipped, bgr)], arena, outputs=BOTH).embeddings)
    assert np.array_equal(strided, contiguous)
    structs, keep = uform._media.pixels_array([crop])
    assert keep[0][0] is crop                              # the caller's array itself
    assert structs[0].row_stride == 360


@pytest.mark.parametrize("cpu_class", CPU_CLASSES, ids=lambda c: c.name)
def test_image_batch_equals_each_alone(media_checkpoint, cpu_class):
    shape = SHAPES[1]
    model = uform.Model.load_ram(media_checkpoint(**shape), cpu_class=cpu_class)
    images = sample_images(8, shape["context"]) * 2
    arena = uform.Arena()
    batch = model.image_encode_pixels(images, arena, outputs=BOTH)
    embeddings, tokens, offsets = (np.array(batch.embeddings), np.array(batch.tokens),
                                   np.array(batch.tokens.offsets))
    for i, image in enumerate(images):
        alone = model.image_encode_pixels([image], arena, outputs=BOTH)
        # bit for bit: a row's arithmetic never depends on the rows around it
        assert np.array_equal(np.asarray(alone.embeddings)[0], embeddings[i])
        assert np.array_equal(np.asarray(alone.tokens), tokens[offsets[i]:offsets[i + 1]])


@pytest.mark.parametrize("cpu_class", CPU_CLASSES, ids=lambda c: c.name)
def test_results_do_not_depend_on_threads(media_checkpoint, cpu_class):
    shape = SHAPES[2]
    model = uform.Model.load_ram(media_checkpoint(**shape), cpu_class=cpu_class)
    images = sample_images(14, shape["context"]) * 3
    recordings = sample_recordings(400, shape["context"]) * 2
    results = []
    for threads in (1, 3):
        on = model.on(uform.Executor.for_ram(threads))
        results.append((np.array(on.image_encode_pixels(images, uform.Arena()).embeddings),
                        np.array(on.audio_encode_samples(recordings, 44100, uform.Arena()).embeddings)))
    assert np.array_equal(results[0][0], results[1][0])
    assert np.array_equal(results[0][1], results[1][1])


def test_output_scalars_are_rounded_f32(media_checkpoint):
    shape = SHAPES[1]
    model = uform.Model.load_ram(media_checkpoint(**shape))
    images = sample_images(8, shape["context"])
    arena = uform.Arena()
    f32 = model.image_encode_pixels(images, arena, outputs=BOTH)
    e32, t32 = np.array(f32.embeddings), np.array(f32.tokens)
    bf16 = model.image_encode_pixels(images, arena, outputs=BOTH, outputs_scalar=uform.Scalar.BF16)
    assert np.array_equal(np.asarray(bf16.embeddings), f32_to_bf16_bits(e32))
    assert np.array_equal(np.asarray(bf16.tokens), f32_to_bf16_bits(t32))
    f16 = model.image_encode_pixels(images, arena, outputs=BOTH, outputs_scalar=uform.Scalar.F16)
    assert np.array_equal(np.asarray(f16.embeddings), e32.astype(np.float16))
    assert np.array_equal(np.asarray(f16.tokens), t32.astype(np.float16))
    i8 = model.image_encode_pixels(images, arena, outputs=BOTH, outputs_scalar=uform.Scalar.I8)
    assert np.array_equal(np.asarray(i8.embeddings), np.clip(np.rint(e32 * 127), -127, 127).astype(np.int8))
    assert np.array_equal(np.asarray(i8.tokens), np.clip(np.rint(t32 * 127), -127, 127).astype(np.int8))
    b1 = model.image_encode_pixels(images, arena, outputs=BOTH, outputs_scalar=uform.Scalar.B1)
    assert np.array_equal(np.asarray(b1.embeddings), np.packbits(e32 > 0, axis=1))
    assert np.array_equal(np.asarray(b1.tokens), np.packbits(t32 > 0, axis=1))
    recordings = sample_recordings(160, shape["context"])
    a32 = np.array(model.audio_encode_samples(recordings, 8000, arena).embeddings)
    a16 = model.audio_encode_samples(recordings, 8000, arena, outputs_scalar=uform.Scalar.BF16)
    assert np.array_equal(np.asarray(a16.embeddings), f32_to_bf16_bits(a32))


# ---- resize against Pillow -------------------------------------------------------------

RESIZES = [(37, 53, 16, 16), (5, 7, 32, 48), (100, 30, 24, 24), (1, 1, 16, 16), (300, 2, 8, 16),
           (64, 64, 64, 64), (64, 50, 64, 20), (17, 64, 40, 64), (1000, 700, 224, 224)]


@pytest.mark.parametrize("size", RESIZES, ids=lambda s: "x".join(map(str, s)))
def test_resize_agrees_with_pillow_bilinear(size):
    from PIL import Image

    height, width, out_height, out_width = size
    rng = np.random.default_rng(height * width)
    pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    produced = media_probe.resize(pixels, out_height, out_width)
    pillow = np.asarray(Image.fromarray(pixels).resize((out_width, out_height), Image.BILINEAR))
    # Pillow rounds its output to uint8 (<= 0.5) and its intermediate row pass to uint8
    # (<= 0.5, carried through non-negative weights summing to 1): at most 1 level apart;
    # 1e-3 for its 22-bit fixed-point coefficients.
    assert np.abs(produced - pillow).max() <= 1.0 + 1e-3
    # and to the float64 reference up to FP32 accumulation (< 1e-3 of a level)
    np.testing.assert_allclose(produced, media.resize(pixels, out_height, out_width), atol=1e-3, rtol=0)
    if (height, width) == (out_height, out_width):
        assert np.array_equal(produced, pixels.astype(np.float32))   # no resize at all


def test_resize_keeps_a_constant_image_constant():
    pixels = np.full((31, 47, 3), (10, 128, 250), np.uint8)
    produced = media_probe.resize(pixels, 16, 96)
    np.testing.assert_allclose(produced, np.broadcast_to([10, 128, 250], produced.shape), atol=1e-4)


# ---- video (the encoder on decoded frames, through the probe) ---------------------------

def sample_clips(patch: int, tube: int, context: int) -> list:
    rng = np.random.default_rng(patch * 100 + tube)
    return [
        rng.integers(0, 256, (1, patch * 2, patch * 3, 3), dtype=np.uint8),           # one frame
        rng.integers(0, 256, (2 * tube + 1, 17, 23, 3), dtype=np.uint8),            # not a multiple of T
        rng.integers(0, 256, (tube * 30, patch * 3, patch * 3, 3), dtype=np.uint8),  # over context
        np.zeros((0, 0, 0, 3), np.uint8),                                            # no frame
        rng.integers(0, 256, (tube, patch * 12, patch * 12, 3), dtype=np.uint8),     # grid over context
    ]


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
@pytest.mark.parametrize("cpu_class", CPU_CLASSES, ids=lambda c: c.name)
def test_video_matches_reference(media_checkpoint, shape, cpu_class):
    path = media_checkpoint(**shape)
    patch, tube, context = shape["video"]["patch_side"], shape["video"]["tube_frames"], shape["context"]
    clips = sample_clips(patch, tube, context)
    expected_embeddings, expected_tokens = media.video_encode(ReferenceModel.load(path), clips)
    outputs = BOTH if shape["token_width"] else uform.Outputs.EMBEDDINGS
    result = media_probe.video_encode_frames(path, clips, cpu_class=cpu_class, outputs=outputs)
    assert "status" not in result, result
    tokens = None
    if shape["token_width"]:
        offsets = result["offsets"]
        tokens = lambda i: result["tokens"][offsets[i]:offsets[i + 1]]  # noqa: E731
    compare(cpu_class, result["embeddings"], tokens, expected_embeddings, expected_tokens, empty=(3,))

    stats = result["stats"]
    grids = [media.image_grid(c.shape[1], c.shape[2], patch, context) if len(c) else (0, 0, False)
             for c in clips]
    tubes = [math.ceil(len(c) / tube) for c in clips]
    kept = [min(t, context // (r * c)) if t else 0 for t, (r, c, _) in zip(tubes, grids)]
    assert stats == {"items": 5, "frames": sum(len(c) for c in clips),
                     "tokens": sum(k * r * c for k, (r, c, _) in zip(kept, grids)),
                     "truncated": sum(k < t for k, t in zip(kept, tubes)), "empty": 1}
    assert stats["truncated"] >= 1


def test_video_batch_equals_each_alone_and_threads_do_not_matter(media_checkpoint):
    shape = SHAPES[1]
    path = media_checkpoint(**shape)
    clips = sample_clips(8, 3, shape["context"])
    batch = media_probe.video_encode_frames(path, clips, outputs=BOTH, threads=3)
    one_thread = media_probe.video_encode_frames(path, clips, outputs=BOTH, threads=1)
    assert np.array_equal(batch["embeddings"], one_thread["embeddings"])
    assert np.array_equal(batch["tokens"], one_thread["tokens"])
    for i, clip in enumerate(clips):
        alone = media_probe.video_encode_frames(path, [clip], outputs=BOTH)
        assert np.array_equal(alone["embeddings"][0], batch["embeddings"][i])
        offsets = batch["offsets"]
        assert np.array_equal(alone["tokens"], batch["tokens"][offsets[i]:offsets[i + 1]])


def test_video_needs_video_parts(media_checkpoint):
    path = media_checkpoint(depth=1, hidden=64, dimensions=16, context=32, image={"patch_side": 4})
    result = media_probe.video_encode_frames(path, sample_clips(4, 2, 32)[:1])
    assert result["status"] == 2 and "no video parts" in result["message"]   # UNSUPPORTED


# ---- audio ---------------------------------------------------------------------------

def sample_recordings(chunk: int, context: int) -> list:
    rng = np.random.default_rng(chunk + context)
    t = np.arange(3 * chunk) / 8000
    return [
        np.zeros(0, np.float32),                                           # empty
        rng.uniform(-1, 1, chunk // 3).astype(np.float32),                 # shorter than a chunk
        rng.uniform(-1, 1, 4 * chunk).astype(np.float32),                  # exactly 4 chunks (same rate)
        rng.uniform(-1, 1, 7 * chunk * (context + 5)).astype(np.float32),  # over context at 7x the rate
        (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32),           # a tone
        np.ones(1, np.float32),                                            # one sample
    ]


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
@pytest.mark.parametrize("cpu_class", CPU_CLASSES, ids=lambda c: c.name)
@pytest.mark.parametrize("rate", [8000, 16000, 44100, 48000])
def test_audio_matches_reference(media_checkpoint, shape, cpu_class, rate):
    path = media_checkpoint(**shape)
    chunk, model_rate, context = (shape["audio"]["chunk_samples"], shape["audio"]["sample_rate"],
                                  shape["context"])
    recordings = sample_recordings(chunk, context)
    expected_embeddings, expected_tokens = media.audio_encode_samples(ReferenceModel.load(path),
                                                                      recordings, rate)
    model = uform.Model.load_ram(path, cpu_class=cpu_class)
    outputs = BOTH if shape["token_width"] else uform.Outputs.EMBEDDINGS
    stats = uform.AudioEncodeStats()
    encoded = model.audio_encode_samples(recordings, rate, uform.Arena(), outputs=outputs, stats=stats)
    compare(cpu_class, encoded.embeddings, encoded.tokens.rows if encoded.tokens is not None else None,
            expected_embeddings, expected_tokens, empty=(0,))

    lengths = [media.resampled_length(len(r), rate, model_rate) for r in recordings]
    chunks = [math.ceil(n / chunk) for n in lengths]
    assert stats.items == len(recordings)
    assert stats.samples == sum(lengths)
    assert stats.tokens == sum(min(c, context) for c in chunks)
    assert stats.truncated == sum(c > context for c in chunks) >= 1
    assert stats.empty == 1
    if rate == model_rate:
        assert chunks[2] == 4                                     # exactly k chunks: no padding


def test_audio_tape_equals_sequence(media_checkpoint):
    shape = SHAPES[0]
    model = uform.Model.load_ram(media_checkpoint(**shape))
    recordings = sample_recordings(64, shape["context"])
    data = np.concatenate(recordings)
    offsets = np.cumsum([0] + [len(r) for r in recordings]).astype(np.uint64)
    arena = uform.Arena()
    from_sequence = np.array(model.audio_encode_samples(recordings, 22050, arena).embeddings)
    from_tape = np.array(model.audio_encode_samples((data, offsets), 22050, arena).embeddings)
    assert np.array_equal(from_sequence, from_tape)


@pytest.mark.parametrize("cpu_class", CPU_CLASSES, ids=lambda c: c.name)
def test_audio_batch_equals_each_alone(media_checkpoint, cpu_class):
    shape = SHAPES[1]
    model = uform.Model.load_ram(media_checkpoint(**shape), cpu_class=cpu_class)
    recordings = sample_recordings(160, shape["context"]) * 2
    arena = uform.Arena()
    batch = model.audio_encode_samples(recordings, 48000, arena, outputs=BOTH)
    embeddings, tokens, offsets = (np.array(batch.embeddings), np.array(batch.tokens),
                                   np.array(batch.tokens.offsets))
    for i, recording in enumerate(recordings):
        alone = model.audio_encode_samples([recording], 48000, arena, outputs=BOTH)
        assert np.array_equal(np.asarray(alone.embeddings)[0], embeddings[i])
        assert np.array_equal(np.asarray(alone.tokens), tokens[offsets[i]:offsets[i + 1]])


# ---- stats, progress, receivers --------------------------------------------------------

def test_progress_reports_and_cancels(media_checkpoint):
    shape = SHAPES[0]
    model = uform.Model.load_ram(media_checkpoint(**shape))
    # 1500 images of 36 patches: several forward batches of at most 23831 rows (H = 64)
    images = [np.full((28, 28, 3), i % 256, np.uint8) for i in range(1500)]
    calls = []
    model.image_encode_pixels(images, uform.Arena(), progress=lambda d, t: calls.append((d, t)),
                              progress_steps=4)
    assert 2 <= len(calls) <= 4 and calls[-1] == (1500, 1500)
    assert all(a[0] <= b[0] for a, b in zip(calls, calls[1:]))
    with pytest.raises(uform.CancelledError):
        model.image_encode_pixels(images, uform.Arena(), progress=lambda d, t: True, progress_steps=4)

    class Boom(Exception):
        pass

    def explode(done, total):
        raise Boom("from the handler")

    with pytest.raises(Boom):
        model.audio_encode_samples([np.zeros(64 * 40, np.float32)] * 100, 16000, uform.Arena(),
                                   progress=explode, progress_steps=3)
    assert model.image_encode_pixels(images[:2], uform.Arena()).embeddings.shape == (2, 32)


def test_stats_types_and_reprs():
    for cls, fields in ((uform.ImageEncodeStats, ("items", "tokens", "resized", "shrunk")),
                        (uform.VideoEncodeStats, ("items", "frames", "tokens", "truncated", "empty")),
                        (uform.AudioEncodeStats, ("items", "samples", "tokens", "truncated", "empty"))):
        stats = cls()
        assert all(getattr(stats, name) == 0 for name in fields)
        assert repr(stats).startswith(cls.__name__) and all(f"{name}=0" in repr(stats) for name in fields)


def test_receivers_route_media_verbs(media_checkpoint):
    shape = SHAPES[1]
    model = uform.Model.load_ram(media_checkpoint(**shape))
    images = sample_images(8, shape["context"])
    recordings = sample_recordings(160, shape["context"])
    expected_images = np.array(model.image_encode_pixels(images, uform.Arena()).embeddings)
    expected_audio = np.array(model.audio_encode_samples(recordings, 16000, uform.Arena()).embeddings)
    executor = uform.Executor.for_ram(2)
    on = model.on(executor)
    stats = uform.ImageEncodeStats()
    assert np.array_equal(np.asarray(on.image_encode_pixels(images, uform.Arena(), stats=stats).embeddings),
                          expected_images)
    assert stats.items == len(images)
    assert np.array_equal(np.asarray(on.audio_encode_samples(recordings, 16000, uform.Arena()).embeddings),
                          expected_audio)
    deferred = model.deferred(executor)
    pending = deferred.image_encode_pixels(images, uform.Arena())   # a submitted job (test_media_deferred.py)
    assert np.array_equal(np.asarray(pending.result().embeddings), expected_images)
    assert pending.done()
    pending = deferred.audio_encode_samples(recordings, 16000, uform.Arena())
    assert np.array_equal(np.asarray(pending.result().embeddings), expected_audio)
    failing = deferred.image_encode_pixels([], uform.Arena())     # refused by the C verb, in the job
    with pytest.raises(uform.InvalidArgumentError, match="empty"):
        failing.result()
    with pytest.raises(TypeError, match="unexpected keyword"):
        on.image_encode_pixels(images, uform.Arena(), colour=True)


# ---- refusals ---------------------------------------------------------------------------

def test_bad_pixels_are_refused_by_name(media_checkpoint):
    model = uform.Model.load_ram(media_checkpoint(**SHAPES[0]))
    arena = uform.Arena()
    good = np.zeros((8, 8, 3), np.uint8)
    cases = [
        ([], "empty"),
        ([good.astype(np.float32)], "uint8"),
        ([good.astype(np.int8)], "uint8"),
        ([good[..., 0]], "shape"),                                 # gray [h, w]
        ([np.zeros((8, 8, 4), np.uint8)], "shape"),                # RGBA
        ([np.zeros((2, 8, 8, 3), np.uint8)], "shape"),             # 4-D item
        ([np.zeros((0, 5, 3), np.uint8)], "at least one pixel"),
        ([good, np.zeros((5, 0, 3), np.uint8)], r"pixels\[1\]"),
        ([b"\x89PNG"], "image_encode"),                            # file bytes: the other verb
        (["path.png"], "array"),
        (good, "wrap it in a list"),                               # one image, not a batch
        (42, "sequence"),
    ]
    for pixels, words in cases:
        with pytest.raises(uform.InvalidArgumentError, match=words):
            model.image_encode_pixels(pixels, arena)
    # Over the pixel limit: 8193^2 > 2^26 pixels, refused before a byte is read (np.zeros
    # of this size is lazily mapped memory, never touched).
    huge = np.zeros((8193, 8193, 3), np.uint8)
    with pytest.raises(uform.InvalidArgumentError, match="over the limit"):
        model.image_encode_pixels([huge], arena)
    with pytest.raises(uform.InvalidArgumentError, match="arena"):
        model.image_encode_pixels([good], None)
    with pytest.raises(uform.InvalidArgumentError, match="stats"):
        model.image_encode_pixels([good], arena, stats=uform.AudioEncodeStats())
    with pytest.raises(uform.InvalidArgumentError, match="outputs"):
        model.image_encode_pixels([good], arena, outputs=0)
    assert model.image_encode_pixels([good], arena).embeddings.shape == (1, 32)   # still usable


def test_bad_samples_are_refused_by_name(media_checkpoint):
    model = uform.Model.load_ram(media_checkpoint(**SHAPES[0]))
    arena = uform.Arena()
    good = np.zeros(100, np.float32)
    nan = good.copy()
    nan[17] = np.nan
    cases = [
        (([], 16000), uform.InvalidArgumentError, "empty"),
        (([good.astype(np.float64)], 16000), uform.InvalidArgumentError, "float32"),
        (([np.zeros((100, 2), np.float32)], 16000), uform.InvalidArgumentError, "mono"),
        ((good, 16000), uform.InvalidArgumentError, "wrap a single recording"),
        (([good, nan], 16000), uform.InvalidArgumentError, r"samples\[1\]: sample 17 is NaN"),
        (([good], 0), uform.InvalidArgumentError, "sample_rate"),
        (([good], 1 << 21), uform.InvalidArgumentError, "sample_rate"),
        (([good], -5), uform.InvalidArgumentError, "sample_rate"),
        (([good], 16000.0), uform.InvalidArgumentError, "sample_rate"),
        (((good, np.array([0, 50, 101], np.uint64)), 16000), uform.InvalidArgumentError, "past the 100"),
        (((good, np.array([0, 60, 50], np.uint64)), 16000), uform.InvalidArgumentError, "decrease"),
        (((good, np.array([0, 60], np.float64)), 16000), uform.InvalidArgumentError, "offsets"),
        (("noise", 16000), uform.InvalidArgumentError, "sequence"),
    ]
    for (samples, rate), error, words in cases:
        with pytest.raises(error, match=words):
            model.audio_encode_samples(samples, rate, arena)
    inf = good.copy()
    inf[3] = np.inf
    with pytest.raises(uform.InvalidArgumentError, match="sample 3 is infinite"):
        model.audio_encode_samples([inf], 8000, arena)


def test_a_model_without_the_modality_says_so(media_checkpoint):
    text_only = uform.Model.load_ram(media_checkpoint(depth=1, hidden=64, dimensions=16, context=32))
    arena = uform.Arena()
    with pytest.raises(uform.UnsupportedError, match="no image parts"):
        text_only.image_encode_pixels([np.zeros((4, 4, 3), np.uint8)], arena)
    with pytest.raises(uform.UnsupportedError, match="no image parts"):
        text_only.image_encode((b"data", np.array([0, 4], np.uint64)), arena)
    with pytest.raises(uform.UnsupportedError, match="no video parts"):
        text_only.video_encode((b"data", np.array([0, 4], np.uint64)), arena)
    with pytest.raises(uform.UnsupportedError, match="no audio parts"):
        text_only.audio_encode((b"data", np.array([0, 4], np.uint64)), arena)
    with pytest.raises(uform.UnsupportedError, match="no audio parts"):
        text_only.audio_encode_samples([np.zeros(10, np.float32)], 16000, arena)


def test_a_model_without_text_encodes_media_only(media_checkpoint):
    shape = dict(SHAPES[0])
    with_text = uform.Model.load_ram(media_checkpoint(**shape))
    without = uform.Model.load_ram(media_checkpoint(**shape, text=False))
    arena = uform.Arena()
    images = sample_images(4, shape["context"])
    # the text parts take no part in image encoding: the same weights give the same bits
    assert np.array_equal(np.array(with_text.image_encode_pixels(images, arena).embeddings),
                          np.array(without.image_encode_pixels(images, arena).embeddings))
    with pytest.raises(uform.UnsupportedError, match="no text parts"):
        without.text_encode(["hello"], arena)


def test_metadata_shapes_derive_and_refuse(media_checkpoint, tmp_path):
    base = dict(depth=1, hidden=64, dimensions=16, context=32, audio={"chunk_samples": 32, "sample_rate": 16000},
                video={"patch_side": 4, "tube_frames": 2}, image={"patch_side": 4})
    explicit = uform.Model.load_ram(media_checkpoint(**base))
    derived_shapes = {"image": {"patch_side": 4, "channels": 0},
                      "video": {"patch_side": 4, "channels": 0},             # tube_frames 2, stride 1
                      "audio": {"chunk_samples": 32, "sample_rate": 0}}      # 16000 Hz
    derived = uform.Model.load_ram(media_checkpoint(**base, metadata_shapes=derived_shapes))
    arena = uform.Arena()
    images = sample_images(4, 32)[:4]
    recordings = sample_recordings(32, 32)
    assert np.array_equal(np.array(explicit.image_encode_pixels(images, arena).embeddings),
                          np.array(derived.image_encode_pixels(images, arena).embeddings))
    assert np.array_equal(np.array(explicit.audio_encode_samples(recordings, 8000, arena).embeddings),
                          np.array(derived.audio_encode_samples(recordings, 8000, arena).embeddings))

    refusals = [
        ({"image": {"patch_side": 4, "channels": 1}, "video": derived_shapes["video"],
          "audio": derived_shapes["audio"]}, "RGB"),
        ({"video": derived_shapes["video"], "audio": derived_shapes["audio"]}, "image.patch.weight"),
        ({"image": {"patch_side": 5}, "video": derived_shapes["video"], "audio": derived_shapes["audio"]},
         "image.patch.weight"),                                               # width 75, not 48
        ({"image": derived_shapes["image"], "video": {"patch_side": 4, "tube_frames": 3},
          "audio": derived_shapes["audio"]}, "video.tube.weight"),
        ({"image": derived_shapes["image"], "video": derived_shapes["video"],
          "audio": {"chunk_samples": "32"}}, "chunk_samples"),
        ({"image": [4], "video": derived_shapes["video"], "audio": derived_shapes["audio"]}, "image"),
    ]
    for index, (shapes, words) in enumerate(refusals):
        path = tmp_path / f"bad-{index}.safetensors"
        write_random_media_checkpoint(str(path), **base, metadata_shapes=shapes)
        with pytest.raises(uform.FormatError, match=words):
            uform.Model.load_ram(str(path))
    # metadata naming a modality whose tensors are missing
    path = tmp_path / "missing.safetensors"
    write_random_media_checkpoint(str(path), depth=1, hidden=64, dimensions=16, context=32,
                                  metadata_shapes={"image": {"patch_side": 4}})
    with pytest.raises(uform.FormatError, match="image.patch.weight.*missing"):
        uform.Model.load_ram(str(path))


# ---- file verbs: decoders in c/src/media/decode (skip when this build lacks the format) ---------

FORMATS = int(uform._lib.uform_media_formats())


def needs(flag: int, name: str) -> None:
    if not FORMATS & flag:
        pytest.skip(f"this build of libuform does not decode {name} (uform_media_formats() = {FORMATS:#x})")


def test_file_verbs_answer_unsupported_without_a_decoder(media_checkpoint, tmp_path):
    """Without the decoder for a format the verb says so; with it, this test has nothing to check."""
    from PIL import Image

    model = uform.Model.load_ram(media_checkpoint(**SHAPES[0]))
    path = tmp_path / "one.png"
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(path)
    if FORMATS & 2:
        pytest.skip("this build decodes PNG: covered by test_png_file_equals_its_pixels")
    with pytest.raises(uform.UnsupportedError):
        model.image_encode([path], uform.Arena())


def test_missing_files_raise_file_error(media_checkpoint, tmp_path):
    model = uform.Model.load_ram(media_checkpoint(**SHAPES[0]))
    present = tmp_path / "present.png"
    present.write_bytes(b"not even a png")
    with pytest.raises(uform.FileError, match=r"files\[1\].*missing\.png"):
        model.image_encode([present, tmp_path / "missing.png"], uform.Arena())
    with pytest.raises(uform.FileError, match=r"files\[0\]"):
        model.image_encode([tmp_path], uform.Arena())                 # a directory
    with pytest.raises(uform.InvalidArgumentError, match="single"):
        model.audio_encode(str(tmp_path / "a.wav"), uform.Arena())
    with pytest.raises(uform.InvalidArgumentError, match="empty"):
        model.video_encode([], uform.Arena())


def test_paths_are_read_by_the_library_and_equal_the_bytes(media_checkpoint, tmp_path):
    """Paths cross as a tape of their os.fsencode bytes to uform_*_encode_paths, which read
    each file on a pool thread: the answer equals the (data, offsets) tape of the same bytes,
    bit for bit, for every family this build decodes; non-ASCII and bytes names work."""
    needs(2, "PNG")
    from PIL import Image

    model = uform.Model.load_ram(media_checkpoint(**SHAPES[1]))
    images = sample_images(8, SHAPES[1]["context"])
    paths = []
    for index, image in enumerate(images):
        paths.append(tmp_path / f"bild-{index}-\u00e4\u00f6.png")
        Image.fromarray(np.ascontiguousarray(image)).save(paths[-1])
    paths[1] = os.fsencode(paths[1])                       # bytes paths cross as they are
    blobs = [open(path, "rb").read() for path in paths]
    tape = (np.frombuffer(b"".join(blobs), np.uint8), np.cumsum([0] + [len(b) for b in blobs]).astype(np.uint64))
    from_paths = model.image_encode(paths, uform.Arena(), outputs=BOTH)
    from_tape = model.image_encode(tape, uform.Arena(), outputs=BOTH)
    assert np.array_equal(np.asarray(from_paths.embeddings), np.asarray(from_tape.embeddings))
    assert np.array_equal(np.asarray(from_paths.tokens), np.asarray(from_tape.tokens))


def test_bad_paths_are_refused_before_decoding(media_checkpoint, tmp_path):
    model = uform.Model.load_ram(media_checkpoint(**SHAPES[0]))
    present = tmp_path / "present.png"
    present.write_bytes(b"not even a png")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    # a blocking open of a FIFO would wait for a writer: the library opens it non-blocking and refuses it
    with pytest.raises(uform.FileError, match=r"files\[1\]: .*fifo': not a regular file"):
        model.audio_encode([present, fifo], uform.Arena())
    with pytest.raises(uform.FileError, match=r"files\[0\]: .*not a regular file"):
        model.video_encode([tmp_path], uform.Arena())
    with pytest.raises(uform.InvalidArgumentError, match=r"files\[1\]: contains a NUL"):
        model.image_encode([present, "a\0b"], uform.Arena())
    with pytest.raises(uform.InvalidArgumentError, match=r"files\[0\]: .*over PATH_MAX"):
        model.image_encode(["/" + "a" * os.pathconf("/", "PC_PATH_MAX")], uform.Arena())
    if os.geteuid() != 0:                                  # root reads a file of mode 000 anyway
        locked = tmp_path / "locked.png"
        locked.write_bytes(b"x")
        locked.chmod(0)
        with pytest.raises(uform.FileError, match=r"files\[0\]: .*Permission denied"):
            model.image_encode([locked], uform.Arena())


def test_png_file_equals_its_pixels(media_checkpoint, tmp_path):
    needs(2, "PNG")
    from PIL import Image

    model = uform.Model.load_ram(media_checkpoint(**SHAPES[1]))
    images = sample_images(8, SHAPES[1]["context"])
    paths = []
    for index, image in enumerate(images):
        paths.append(tmp_path / f"{index}.png")
        Image.fromarray(np.ascontiguousarray(image)).save(paths[-1])
    arena = uform.Arena()
    stats = uform.ImageEncodeStats()
    from_files = model.image_encode(paths, arena, outputs=BOTH, stats=stats)
    files_embeddings, files_tokens = np.array(from_files.embeddings), np.array(from_files.tokens)
    from_pixels = model.image_encode_pixels(images, arena, outputs=BOTH)
    assert np.array_equal(files_embeddings, np.asarray(from_pixels.embeddings))   # PNG is lossless
    assert np.array_equal(files_tokens, np.asarray(from_pixels.tokens))
    assert stats.items == len(images)


def test_float_wav_equals_its_samples(media_checkpoint, tmp_path):
    needs(16, "WAV")
    import soundfile

    shape = SHAPES[1]
    model = uform.Model.load_ram(media_checkpoint(**shape))
    recordings = sample_recordings(160, shape["context"])[1:]
    for rate in (8000, 44100):
        paths = []
        for index, recording in enumerate(recordings):
            paths.append(tmp_path / f"{rate}-{index}.wav")
            soundfile.write(paths[-1], recording, rate, subtype="FLOAT")
        arena = uform.Arena()
        from_files = np.array(model.audio_encode(paths, arena).embeddings)
        from_samples = np.array(model.audio_encode_samples(recordings, rate, arena).embeddings)
        # float WAV is lossless and both paths resample with uform_resample's weights and order
        assert np.array_equal(from_files, from_samples)


def test_corrupt_files_raise_format_error_naming_the_item(media_checkpoint):
    needs(2, "PNG")
    model = uform.Model.load_ram(media_checkpoint(**SHAPES[0]))
    data = b"\x89PNG\r\n\x1a\n" + b"garbage" * 10
    with pytest.raises(uform.FormatError, match=r"files\[0\]"):
        model.image_encode((data, np.array([0, len(data)], np.uint64)), uform.Arena())


def test_video_file_counts_strided_frames(media_checkpoint, tmp_path):
    needs(8, "MP4/WebM")
    import av

    shape = SHAPES[1]                                     # frame_stride 2, tube_frames 3
    model = uform.Model.load_ram(media_checkpoint(**shape))
    path = tmp_path / "clip.mp4"
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = 32, 24, "yuv420p"
        rng = np.random.default_rng(0)
        for _ in range(11):
            frame = av.VideoFrame.from_ndarray(rng.integers(0, 256, (24, 32, 3), dtype=np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    stats = uform.VideoEncodeStats()
    model.video_encode([path], uform.Arena(), stats=stats)
    rows, cols, _ = media.image_grid(24, 32, 8, shape["context"])
    assert stats.frames == 6                              # frames 0, 2, 4, 6, 8, 10
    assert stats.tokens == math.ceil(6 / 3) * rows * cols
