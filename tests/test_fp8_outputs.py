"""outputs_scalar=Scalar.E4M3 and Scalar.E5M2: embeddings and token vectors as one OCP FP8
code per component, no scale (docs/architecture.md section 5), and uform.to_float32.

The oracle is PyTorch's conversion of the library's own F32 rows: torch's float32 ->
float8_e4m3fn / float8_e5m2 rounds to nearest even, like the library. The two differ only
past the largest finite value (torch gives NaN or infinity, the library saturates), which
unit vectors never reach: every F32 component is asserted to lie in [-1, 1] first. The
conversion itself, saturation and NaN included, is checked against an oracle built from the
format definitions in tests/c/test_fp8.c.
"""
import numpy as np
import pytest
import torch

import media_fixtures
import uform
from conftest import CPU_CLASSES
from reference.media_checkpoint import write_random_media_checkpoint
from test_text_encode import sample_texts

BOTH = uform.Outputs.EMBEDDINGS | uform.Outputs.TOKENS
FP8 = {uform.Scalar.E4M3: torch.float8_e4m3fn, uform.Scalar.E5M2: torch.float8_e5m2}
TEXT_SHAPE = dict(depth=2, hidden=128, dimensions=100, context=128, token_width=16)
MEDIA_SHAPE = dict(depth=1, hidden=64, dimensions=32, context=48, token_width=8,
                   image={"patch_side": 4}, audio={"chunk_samples": 64, "sample_rate": 16000})


def torch_fp8(f32: np.ndarray, scalar) -> np.ndarray:
    """The FP8 codes PyTorch gives F32 rows, valid only inside the finite range."""
    assert f32.dtype == np.float32
    assert np.all(np.abs(f32) <= 1), "unit vectors: the comparison with torch needs |x| <= 1"
    return torch.from_numpy(np.ascontiguousarray(f32)).to(FP8[scalar]).view(torch.uint8).numpy()


def torch_widen(codes: np.ndarray, scalar) -> np.ndarray:
    return torch.from_numpy(np.ascontiguousarray(codes)).view(FP8[scalar]).float().numpy()


def same_floats(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bit for bit, except that any NaN equals any NaN."""
    if a.shape != b.shape or a.dtype != np.float32 or b.dtype != np.float32:
        return False
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b)) and np.array_equal(a.view(np.uint32)[~nan],
                                                                    b.view(np.uint32)[~nan]))


def assert_fp8_rows(encoded, f32_embeddings, f32_tokens, scalar) -> None:
    """encoded (in `scalar`) holds PyTorch's FP8 codes of the F32 outputs, bit for bit."""
    for got, f32 in ((encoded.embeddings, f32_embeddings), (encoded.tokens, f32_tokens)):
        assert isinstance(got, uform.ArenaBuffer) and got.scalar == scalar
        assert got.dtype == np.uint8 and got.shape == f32.shape        # one byte a component
        codes = np.asarray(got)
        expected = torch_fp8(f32, scalar)
        mismatches = np.flatnonzero(codes != expected)
        assert mismatches.size == 0, (scalar.name, mismatches[:5], f32.ravel()[mismatches[:5]],
                                      codes.ravel()[mismatches[:5]], expected.ravel()[mismatches[:5]])
        # the codes read back within half a quantum of the F32 values (relative 2^-4 or 2^-3,
        # subnormal quanta 2^-9 and 2^-16): nothing scaled
        back = uform.to_float32(got)
        relative, subnormal = (2.0 ** -4, 2.0 ** -10) if scalar == uform.Scalar.E4M3 else (2.0 ** -3, 2.0 ** -17)
        assert np.all(np.abs(back - f32) <= np.abs(f32) * relative + subnormal)
        assert np.any(back != f32), "some components are rounded: the test sees the conversion"
    assert np.array_equal(np.asarray(encoded.tokens.offsets), np.asarray(f32_tokens.offsets))


@pytest.mark.parametrize("scalar", list(FP8), ids=lambda s: s.name)
@pytest.mark.parametrize("cpu_class", CPU_CLASSES, ids=lambda c: c.name)
def test_text_encode_fp8_is_torch_conversion_of_f32(checkpoint_factory, cpu_class, scalar):
    path = checkpoint_factory(**TEXT_SHAPE)
    model = uform.Model.load_ram(path, cpu_class=cpu_class)
    texts = sample_texts(TEXT_SHAPE["context"])
    f32 = model.text_encode(texts, uform.Arena(), outputs=BOTH)
    f32_tokens = f32.tokens
    encoded = model.text_encode(texts, uform.Arena(), outputs=BOTH, outputs_scalar=scalar)
    assert_fp8_rows(encoded, np.asarray(f32.embeddings), f32_tokens, scalar)
    # the empty text embeds as zeros: code 0 in both formats
    assert np.all(np.asarray(encoded.embeddings)[5] == 0)
    # embeddings alone, and a row count the SIMD widths do not divide
    alone = model.text_encode(texts[:3], uform.Arena(), outputs_scalar=scalar)
    assert alone.tokens is None
    assert np.array_equal(np.asarray(alone.embeddings), np.asarray(encoded.embeddings)[:3])


def test_media_verbs_write_fp8(tmp_path):
    path = tmp_path / "media.safetensors"
    write_random_media_checkpoint(str(path), **MEDIA_SHAPE)
    model = uform.Model.load_ram(str(path))
    pictures = [media_fixtures.test_picture(12, 16, seed=1), media_fixtures.test_picture(9, 7, seed=2)]
    recordings = [np.random.default_rng(3).uniform(-1, 1, 500).astype(np.float32),
                  np.random.default_rng(4).uniform(-1, 1, 64).astype(np.float32)]
    f32_images = model.image_encode_pixels(pictures, uform.Arena(), outputs=BOTH)
    f32_audio = model.audio_encode_samples(recordings, 16000, uform.Arena(), outputs=BOTH)
    for scalar in FP8:
        images = model.image_encode_pixels(pictures, uform.Arena(), outputs=BOTH, outputs_scalar=scalar)
        assert_fp8_rows(images, np.asarray(f32_images.embeddings), f32_images.tokens, scalar)
        audio = model.audio_encode_samples(recordings, 16000, uform.Arena(), outputs=BOTH,
                                           outputs_scalar=scalar)
        assert_fp8_rows(audio, np.asarray(f32_audio.embeddings), f32_audio.tokens, scalar)


def test_deferred_fp8_equals_blocking(checkpoint_factory, tmp_path):
    model = uform.Model.load_ram(checkpoint_factory(**TEXT_SHAPE))
    texts = sample_texts(TEXT_SHAPE["context"]) * 4
    executor = uform.Executor.for_ram(2)
    f32 = model.text_encode(texts, uform.Arena(), outputs=BOTH)
    pending = {scalar: model.deferred(executor).text_encode(texts, uform.Arena(), outputs=BOTH,
                                                            outputs_scalar=scalar)
               for scalar in FP8}
    for scalar, deferred in pending.items():
        encoded = deferred.result()
        assert_fp8_rows(encoded, np.asarray(f32.embeddings), f32.tokens, scalar)
        blocking = model.text_encode(texts, uform.Arena(), outputs=BOTH, outputs_scalar=scalar)
        assert np.array_equal(np.asarray(encoded.embeddings), np.asarray(blocking.embeddings))
        assert np.array_equal(np.asarray(encoded.tokens), np.asarray(blocking.tokens))
    # a deferred media verb too
    path = tmp_path / "media.safetensors"
    write_random_media_checkpoint(str(path), **MEDIA_SHAPE)
    media_model = uform.Model.load_ram(str(path))
    pictures = [media_fixtures.test_picture(12, 16, seed=5)]
    f32_images = media_model.image_encode_pixels(pictures, uform.Arena(), outputs=BOTH)
    images = media_model.deferred(executor).image_encode_pixels(
        pictures, uform.Arena(), outputs=BOTH, outputs_scalar=uform.Scalar.E5M2).result()
    assert_fp8_rows(images, np.asarray(f32_images.embeddings), f32_images.tokens, uform.Scalar.E5M2)


def test_trainer_step_embeddings_in_fp8():
    """A training step's embeddings go through the same conversion: two trainers of one seed
    take the same step, one answering F32, the other FP8."""
    rng = np.random.default_rng(0)
    texts = [bytes(rng.integers(97, 123, size=int(rng.integers(8, 40)), dtype=np.uint8)) for _ in range(8)]
    answers = {}
    for scalar in (uform.Scalar.F32, *FP8):
        trainer = uform.Trainer.init_ram(
            uform.Executor.for_ram(2), depth=2, hidden=64, objective=uform.Objective.JOINT,
            batch=uform.BatchShape(max_rows_per_device=8, max_columns_per_row=64),
            schedule=uform.Schedule(learning_rate=3e-3, steps=10, warmup_steps=2), seed=1)
        answers[scalar] = trainer.step([uform.Modality.TEXT] * 8, texts, arena=uform.Arena(),
                                       outputs_scalar=scalar)
    f32 = np.asarray(answers[uform.Scalar.F32])
    for scalar in FP8:
        assert answers[scalar].dtype == np.uint8 and answers[scalar].shape == f32.shape
        assert np.array_equal(np.asarray(answers[scalar]), torch_fp8(f32, scalar)), scalar.name


def maxsim_float64(queries: np.ndarray, query_offsets, documents: np.ndarray, document_offsets) -> np.ndarray:
    """MaxSim in float64 from the definition (the mean over a query's rows of the largest dot
    product with any of the document's rows; 0 when either has no rows)."""
    scores = np.zeros((len(query_offsets) - 1, len(document_offsets) - 1))
    for q in range(scores.shape[0]):
        rows = queries[query_offsets[q]:query_offsets[q + 1]].astype(np.float64)
        for d in range(scores.shape[1]):
            products = rows @ documents[document_offsets[d]:document_offsets[d + 1]].astype(np.float64).T
            scores[q, d] = products.max(axis=1).mean() if products.size else 0.0
    return scores


def test_late_interaction_scores_fp8_rows(checkpoint_factory):
    """MaxSim reads E4M3 and E5M2 token rows as their values (no scale). Oracle: the codes
    widened by PyTorch (float8 -> float32, exact), then MaxSim in float64. Tolerance 1e-5:
    each product of two FP8 values is exact in FP32 (at most 8 significant bits), and the
    library sums the 16 of a dot product in FP32, an error below 16 x 2^-24 of their
    magnitudes (each at most 1). Against the F32 rows' scores, the FP8 rounding: each
    component is within 2^-4 (E4M3) or 2^-3 (E5M2) of its F32 value relative, plus half the
    smallest subnormal, so a dot product of unit vectors moves at most about twice that."""
    model = uform.Model.load_ram(checkpoint_factory(**TEXT_SHAPE))
    queries, documents = sample_texts(TEXT_SHAPE["context"]), sample_texts(64)
    executor = uform.Executor.for_ram(2)

    def encode(texts, scalar):
        return model.text_encode(texts, uform.Arena(), outputs=uform.Outputs.TOKENS, outputs_scalar=scalar).tokens

    f32_q, f32_d = encode(queries, uform.Scalar.F32), encode(documents, uform.Scalar.F32)
    f32_scores = uform.late_interaction_scores(f32_q, f32_d)
    bounds = {uform.Scalar.E4M3: 2 * 2 ** -4 + 2 ** -8, uform.Scalar.E5M2: 2 * 2 ** -3 + 2 ** -8}
    for scalar in FP8:
        q, d = encode(queries, scalar), encode(documents, scalar)
        assert q.scalar == scalar and q.dtype == np.uint8
        expected = maxsim_float64(torch_widen(np.asarray(q), scalar), np.asarray(q.offsets),
                                  torch_widen(np.asarray(d), scalar), np.asarray(d.offsets))
        scores = uform.late_interaction_scores(q, d)
        assert scores.dtype == np.float32 and scores.shape == (8, 8)
        assert np.max(np.abs(scores - expected)) <= 1e-5, scalar.name
        # the pool's threads give the same bits; mixed scalars score too
        assert np.array_equal(uform.late_interaction_scores(q, d, executor=executor), scores)
        mixed = uform.late_interaction_scores(f32_q, d)
        expected_mixed = maxsim_float64(np.asarray(f32_q), np.asarray(f32_q.offsets),
                                        torch_widen(np.asarray(d), scalar), np.asarray(d.offsets))
        assert np.max(np.abs(mixed - expected_mixed)) <= 1e-5, scalar.name
        assert np.max(np.abs(scores - f32_scores)) <= bounds[scalar], scalar.name


# ---- uform.to_float32 ------------------------------------------------------------------

def test_to_float32_fp8_every_code_matches_torch():
    codes = np.arange(256, dtype=np.uint8).reshape(16, 16)
    for scalar in FP8:
        values = uform.to_float32(codes, scalar=scalar)
        assert values.shape == (16, 16) and values.dtype == np.float32
        assert same_floats(values, torch_widen(codes, scalar)), scalar.name
        assert np.signbit(values[8, 0]) and values[8, 0] == 0       # 0x80 is -0
    e4m3 = uform.to_float32(codes, scalar=uform.Scalar.E4M3).ravel()
    assert e4m3[0x7E] == 448 and np.isnan(e4m3[0x7F]) and np.isnan(e4m3[0xFF]) and e4m3[1] == 2.0 ** -9
    e5m2 = uform.to_float32(codes, scalar=uform.Scalar.E5M2).ravel()
    assert e5m2[0x7B] == 57344 and e5m2[0x7C] == np.inf and e5m2[0xFC] == -np.inf
    assert np.all(np.isnan(e5m2[[0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF]])) and e5m2[1] == 2.0 ** -16


def test_to_float32_reads_arena_outputs(checkpoint_factory):
    model = uform.Model.load_ram(checkpoint_factory(**TEXT_SHAPE))
    texts = sample_texts(TEXT_SHAPE["context"])
    arena = uform.Arena()
    f32 = model.text_encode(texts, arena, outputs=BOTH)
    e32, t32 = np.array(f32.embeddings), np.array(f32.tokens)
    copied = uform.to_float32(f32.embeddings)
    assert np.array_equal(copied, e32) and not np.shares_memory(copied, np.asarray(f32.embeddings))
    assert type(copied) is np.ndarray
    for scalar in FP8:
        encoded = model.text_encode(texts, arena, outputs=BOTH, outputs_scalar=scalar)
        tokens = uform.to_float32(encoded.tokens)                       # a RowsTape
        assert tokens.shape == t32.shape
        assert same_floats(tokens, torch_widen(np.asarray(encoded.tokens), scalar))
        assert same_floats(uform.to_float32(encoded.embeddings),
                           torch_widen(np.asarray(encoded.embeddings), scalar))
        row = encoded.tokens.rows(2)                                     # a plain view: scalar named
        assert same_floats(uform.to_float32(row, scalar=scalar), torch_widen(row, scalar))
    bf16 = model.text_encode(texts, arena, outputs=BOTH, outputs_scalar=uform.Scalar.BF16)
    expected = torch.from_numpy(np.array(bf16.tokens)).view(torch.bfloat16).float().numpy()
    assert same_floats(uform.to_float32(bf16.tokens), expected)
    f16 = model.text_encode(texts, arena, outputs=BOTH, outputs_scalar=uform.Scalar.F16)
    expected = torch.from_numpy(np.array(f16.embeddings)).float().numpy()
    assert same_floats(uform.to_float32(f16.embeddings), expected)
    i8 = model.text_encode(texts, arena, outputs=BOTH, outputs_scalar=uform.Scalar.I8)
    values = uform.to_float32(i8.embeddings)
    assert same_floats(values, np.asarray(i8.embeddings).astype(np.float32) / np.float32(127))
    assert np.all(np.abs(values - e32) <= 0.5 / 127 + 1e-7)
    b1 = model.text_encode(texts, arena, outputs=BOTH, outputs_scalar=uform.Scalar.B1)
    with pytest.raises(uform.InvalidArgumentError, match="unpackbits"):
        uform.to_float32(b1.embeddings)


def test_to_float32_bf16_and_f16_bit_patterns_match_torch():
    bits = np.random.default_rng(7).integers(0, 1 << 16, (300, 7), dtype=np.uint16)
    bits[0, :4] = [0x0000, 0x8000, 0x7F80, 0xFFC1]                    # zeros, infinity, NaN
    expected = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16).float().numpy()
    assert same_floats(uform.to_float32(bits, scalar=uform.Scalar.BF16), expected)
    halves = bits.view(np.float16)
    expected = torch.from_numpy(halves).float().numpy()
    assert same_floats(uform.to_float32(halves, scalar=uform.Scalar.F16), expected)
    values = np.random.default_rng(8).standard_normal((5, 3)).astype(np.float32)
    copied = uform.to_float32(values, scalar=uform.Scalar.F32)
    assert np.array_equal(copied, values) and not np.shares_memory(copied, values)


def test_to_float32_refusals(checkpoint_factory):
    with pytest.raises(uform.InvalidArgumentError, match="unpackbits"):
        uform.to_float32(np.zeros((2, 4), np.uint8), scalar=uform.Scalar.B1)
    with pytest.raises(uform.InvalidArgumentError, match="scalar"):
        uform.to_float32(np.zeros((2, 4), np.uint8))                       # no scalar to go by
    with pytest.raises(uform.InvalidArgumentError, match="scalar"):
        uform.to_float32(np.zeros(3, np.uint8), scalar=42)
    with pytest.raises(uform.InvalidArgumentError, match="uint8"):
        uform.to_float32(np.zeros(3, np.float32), scalar=uform.Scalar.E4M3)
    with pytest.raises(uform.InvalidArgumentError, match="uint16"):
        uform.to_float32(np.zeros(3, np.float32), scalar=uform.Scalar.BF16)
    model = uform.Model.load_ram(checkpoint_factory(**TEXT_SHAPE))
    e4m3 = model.text_encode([b"x"], uform.Arena(), outputs_scalar=uform.Scalar.E4M3).embeddings
    with pytest.raises(uform.InvalidArgumentError, match="E5M2 given, but the rows are E4M3"):
        uform.to_float32(e4m3, scalar=uform.Scalar.E5M2)
    assert uform.to_float32(e4m3, scalar=uform.Scalar.E4M3).shape == (1, TEXT_SHAPE["dimensions"])
    assert "to_float32" in uform.__all__
