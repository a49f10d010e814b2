"""image_encode (decode + encode of JPEG files) against Pillow + PyTorch on the same weights:
pytest-benchmark, one group.

    python3 -m pytest -q bench/test_image_bench.py --benchmark-columns=min,mean,rounds
    UFORM_BENCH_QUICK=1 python3 -m pytest -q bench/test_image_bench.py   (depth 2, hidden 128, 32 files)

Both sides run on the same number of threads and embed the same in-memory JPEG files
(image_harness.make_images) end to end. uform-pixels and uform-gridded (image_encode_pixels
on images decoded, and decoded and resized, beforehand) are information: they split uform's
time into decoding, resizing and the rest. Images per second (best round) go to
extra_info["images_per_second"] and the summary at the end; bench/report.py runs the same
comparison without pytest and writes docs/benchmarks.md.
"""
import numpy as np
import pytest

import image_harness
from conftest import IMAGE_RESULTS, THREADS
from reference import ReferenceModel
from reference.media import image_encode as reference_image_encode
from reference.media_checkpoint import write_random_media_checkpoint

KEYS = ("uform", "uform-pixels", "uform-gridded", "torch-bf16", "torch-fp32")


@pytest.fixture(scope="session")
def image_inputs():
    return image_harness.make_inputs()


@pytest.fixture(scope="session")
def image_contenders(tmp_path_factory):
    path = image_harness.write_checkpoint(str(tmp_path_factory.mktemp("bench-image")))
    return {c.key: c for c in image_harness.contenders(path, THREADS)}


def test_torch_image_encoder_matches_reference(tmp_path):
    """The PyTorch contender computes the reference's image_encode: FP32 within 1e-4 of
    float64 on images already of their grid's size (nothing resized: Pillow's uint8 resize
    is the one place it may differ, by up to one level); resized ones and BF16 autocast by
    cosine. Several mini-batches, so padding and the key mask are exercised."""
    path = str(tmp_path / "small.safetensors")
    write_random_media_checkpoint(path, depth=2, hidden=128, dimensions=48, context=64,
                                  image={"patch_side": 8}, seed=3)
    rng = np.random.default_rng(1)
    on_grid = [(16, 24), (64, 64), (8, 8), (40, 16), (56, 72)]         # rows * cols <= 64
    resized = [(3, 5), (100, 37), (9, 200), (300, 180)]                # resized, some shrunk
    images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in on_grid + resized]
    expected, _ = reference_image_encode(ReferenceModel.load(path), images)
    encoder = image_harness.TorchImageEncoder(path, THREADS, max_batch=3)
    fp32 = encoder.encode_pixels(images, autocast=False)
    exact = len(on_grid)
    np.testing.assert_allclose(fp32[:exact], expected[:exact], atol=1e-4, rtol=0)
    assert (fp32 * expected).sum(axis=1).min() > 0.999
    bf16 = encoder.encode_pixels(images, autocast=True)
    np.testing.assert_allclose(bf16[:exact], expected[:exact], atol=3e-2, rtol=0)
    assert (bf16 * expected).sum(axis=1).min() > 0.99


def test_contenders_agree(image_contenders):
    """On the benchmark's own model and a few of its kind of files, every contender gives
    torch FP32's embeddings (cosine > 0.99)."""
    inputs = image_harness.make_inputs(4, seed=99)
    baseline = image_contenders["torch-fp32"].encode(inputs).copy()
    for contender in image_contenders.values():
        cosine = (contender.encode(inputs) * baseline).sum(axis=1)
        assert np.all(cosine > 0.99), (contender.label, cosine)


@pytest.mark.parametrize("key", KEYS)
def test_image_encode(benchmark, image_contenders, image_inputs, key):
    contender = image_contenders[key]
    contender.encode(image_inputs)                           # warm-up: arena growth, caches
    benchmark.group = (f"image_encode {len(image_inputs.files)} JPEG files "
                       f"(d{image_harness.SHAPE['depth']} h{image_harness.SHAPE['hidden']})")
    benchmark.extra_info.update(label=contender.label, images=len(image_inputs.files),
                                patches=image_inputs.tokens, threads=THREADS,
                                depth=image_harness.SHAPE["depth"], hidden=image_harness.SHAPE["hidden"])
    result = benchmark.pedantic(contender.encode, args=(image_inputs,), rounds=image_harness.rounds(),
                                iterations=1, warmup_rounds=0)
    assert np.asarray(result).shape == (len(image_inputs.files), image_harness.SHAPE["dimensions"])
    if benchmark.stats is not None:    # None under --benchmark-disable
        rate = len(image_inputs.files) / benchmark.stats.stats.min
        benchmark.extra_info["images_per_second"] = rate
        IMAGE_RESULTS[key] = (contender.label, rate)
