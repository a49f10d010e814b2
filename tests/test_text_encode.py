"""text_encode against the float64 PyTorch reference, and its own invariants.

Tolerances. FP32 classes (SERIAL, HASWELL, SKYLAKE) keep activations in FP32 over
the checkpoint's exact BF16 weights, so they differ from float64 only by FP32
rounding: each GEMM sums up to 4H = 1024 products (relative error ~ sqrt(k) * 2^-24
~ 2e-6), the fast exp is ~2 ulp, and errors pass through `depth` blocks. On unit
vectors that stays below 2e-5 per component for depth <= 4 (DESIGN's "about 1e-5").
SAPPHIRE and AMX round GEMM inputs to BF16 (2^-9 relative per input), so its outputs agree
to about 1e-2 per component (DESIGN's BF16 tolerance), checked as 3e-2 absolute
plus a cosine similarity above 0.999.
"""
import numpy as np
import pytest
import torch

import uform
from conftest import BF16_CLASSES, CPU_CLASSES
from reference import ReferenceModel, f32_to_bf16_bits

FP32_CLASSES = [c for c in CPU_CLASSES if c not in BF16_CLASSES]
FP32_TOLERANCE = 2e-5
BF16_TOLERANCE = 3e-2

SHAPES = [
    dict(depth=1, hidden=64, dimensions=32, context=64, token_width=0),
    dict(depth=2, hidden=128, dimensions=100, context=128, token_width=16),
    dict(depth=3, hidden=192, dimensions=64, context=96, token_width=24),
    dict(depth=4, hidden=256, dimensions=256, context=200, token_width=64),
]


def sample_texts(context: int) -> list:
    rng = np.random.default_rng(context)
    return [
        b"a",                                               # one byte
        b"x" * (context + 37),                              # longer than context: cut
        "héllo wörld ✓ 日本語 🙂".encode("utf-8"),           # multi-byte UTF-8
        b"\x00\x00nul\x00bytes\x00",                         # NUL bytes are ordinary bytes
        bytes(rng.integers(0, 256, size=context // 2, dtype=np.uint8)),  # arbitrary, non-UTF-8
        b"",                                                # empty: zero embedding
        b"The quick brown fox jumps over the lazy dog.",
        bytes(rng.integers(0, 256, size=context, dtype=np.uint8)),       # exactly context
    ]


def reference_outputs(path: str, texts: list):
    model = ReferenceModel.load(path)
    with torch.no_grad():
        embeddings, tokens = model.text_encode(texts)
    return embeddings.numpy(), None if tokens is None else [t.numpy() for t in tokens]


def tolerance(cpu_class) -> float:
    return BF16_TOLERANCE if cpu_class in BF16_CLASSES else FP32_TOLERANCE


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"d{s['depth']}h{s['hidden']}")
@pytest.mark.parametrize("cpu_class", CPU_CLASSES, ids=lambda c: c.name)
def test_matches_reference(checkpoint_factory, shape, cpu_class):
    path = checkpoint_factory(**shape)
    texts = sample_texts(shape["context"])
    expected_embeddings, expected_tokens = reference_outputs(path, texts)

    model = uform.Model.load_ram(path, cpu_class=cpu_class)
    assert model.describe().cpu_class == cpu_class
    outputs = uform.Outputs.EMBEDDINGS | (uform.Outputs.TOKENS if shape["token_width"] else 0)
    arena = uform.Arena()
    encoded = model.text_encode(texts, arena, outputs=outputs)
    embeddings = np.asarray(encoded.embeddings)
    assert embeddings.shape == (len(texts), shape["dimensions"])
    assert embeddings.dtype == np.float32
    atol = tolerance(cpu_class)
    np.testing.assert_allclose(embeddings, expected_embeddings, atol=atol, rtol=0)
    if cpu_class in BF16_CLASSES:
        cosine = (embeddings * expected_embeddings).sum(axis=1)
        assert np.all(cosine[:5] > 0.999) and np.all(cosine[6:] > 0.999)
    assert np.all(embeddings[5] == 0), "an empty text embeds as zeros"

    if shape["token_width"]:
        tokens = encoded.tokens
        lengths = [min(len(t), shape["context"]) for t in texts]
        assert list(tokens.offsets) == list(np.concatenate([[0], np.cumsum(lengths)]))
        assert tokens.shape == (sum(lengths), shape["token_width"])
        for i, expected in enumerate(expected_tokens):
            np.testing.assert_allclose(tokens.rows(i), expected, atol=atol, rtol=0)
    else:
        assert encoded.tokens is None


@pytest.mark.parametrize("cpu_class", CPU_CLASSES, ids=lambda c: c.name)
def test_batch_equals_each_text_alone(checkpoint_factory, cpu_class):
    shape = SHAPES[1]
    path = checkpoint_factory(**shape)
    texts = sample_texts(shape["context"]) * 3
    model = uform.Model.load_ram(path, cpu_class=cpu_class)
    arena = uform.Arena()
    outputs = uform.Outputs.EMBEDDINGS | uform.Outputs.TOKENS
    batch = model.text_encode(texts, arena, outputs=outputs)
    batch_embeddings = np.array(batch.embeddings)
    batch_tokens = np.array(batch.tokens)
    offsets = np.array(batch.tokens.offsets)
    for i, text in enumerate(texts):
        alone = model.text_encode([text], arena, outputs=outputs)
        # Bit-for-bit: a row's arithmetic never depends on the rows around it.
        assert np.array_equal(np.asarray(alone.embeddings)[0], batch_embeddings[i])
        assert np.array_equal(np.asarray(alone.tokens), batch_tokens[offsets[i]:offsets[i + 1]])


@pytest.mark.parametrize("cpu_class", CPU_CLASSES, ids=lambda c: c.name)
def test_results_do_not_depend_on_threads(checkpoint_factory, cpu_class):
    path = checkpoint_factory(**SHAPES[3])
    texts = sample_texts(SHAPES[3]["context"]) * 8
    model = uform.Model.load_ram(path, cpu_class=cpu_class)
    results = []
    for threads in (1, 2, 3):
        executor = uform.Executor.for_ram(threads)
        assert executor.threads == threads
        encoded = model.on(executor).text_encode(texts, uform.Arena())
        results.append(np.array(encoded.embeddings))
    assert np.array_equal(results[0], results[1]) and np.array_equal(results[0], results[2])


def test_output_scalars_are_rounded_f32(checkpoint_factory):
    shape = SHAPES[2]
    path = checkpoint_factory(**shape)
    texts = sample_texts(shape["context"])
    model = uform.Model.load_ram(path)
    arena = uform.Arena()
    outputs = uform.Outputs.EMBEDDINGS | uform.Outputs.TOKENS
    f32 = model.text_encode(texts, arena, outputs=outputs)
    e32, t32 = np.array(f32.embeddings), np.array(f32.tokens)

    bf16 = model.text_encode(texts, arena, outputs=outputs, outputs_scalar=uform.Scalar.BF16)
    assert bf16.embeddings.dtype == np.uint16 and bf16.embeddings.scalar == uform.Scalar.BF16
    assert np.array_equal(np.asarray(bf16.embeddings), f32_to_bf16_bits(e32))
    assert np.array_equal(np.asarray(bf16.tokens), f32_to_bf16_bits(t32))

    f16 = model.text_encode(texts, arena, outputs=outputs, outputs_scalar=uform.Scalar.F16)
    assert np.array_equal(np.asarray(f16.embeddings), e32.astype(np.float16))

    i8 = model.text_encode(texts, arena, outputs_scalar=uform.Scalar.I8)
    expected_i8 = np.clip(np.rint(e32 * 127), -127, 127).astype(np.int8)
    assert np.array_equal(np.asarray(i8.embeddings), expected_i8)

    b1 = model.text_encode(texts, arena, outputs=outputs, outputs_scalar=uform.Scalar.B1)
    assert b1.embeddings.shape == (len(texts), (shape["dimensions"] + 7) // 8)
    assert np.array_equal(np.asarray(b1.embeddings), np.packbits(e32 > 0, axis=1))
    assert np.array_equal(np.asarray(b1.tokens), np.packbits(t32 > 0, axis=1))


def test_thousands_of_texts(checkpoint_factory):
    shape = dict(depth=1, hidden=64, dimensions=48, context=96, token_width=8)
    path = checkpoint_factory(**shape)
    rng = np.random.default_rng(1)
    texts = [bytes(rng.integers(0, 256, size=int(rng.integers(0, 140)), dtype=np.uint8))
             for _ in range(3000)]
    expected, _ = reference_outputs(path, texts)
    model = uform.Model.load_ram(path, cpu_class=FP32_CLASSES[-1])
    stats = uform.TextEncodeStats()
    encoded = model.text_encode(texts, uform.Arena(), stats=stats)
    np.testing.assert_allclose(np.asarray(encoded.embeddings), expected, atol=FP32_TOLERANCE, rtol=0)
    assert stats.items == 3000
    assert stats.tokens == sum(min(len(t), 96) for t in texts)
    assert stats.truncated == sum(len(t) > 96 for t in texts)
    assert stats.empty == sum(len(t) == 0 for t in texts)


def test_tape_and_str_inputs_equal_bytes(checkpoint_factory):
    path = checkpoint_factory(**SHAPES[0])
    model = uform.Model.load_ram(path)
    texts = ["plain", "ünïcödé", "", "日本語"]
    as_bytes = [t.encode() for t in texts]
    data = b"".join(as_bytes)
    offsets = np.concatenate([[0], np.cumsum([len(b) for b in as_bytes])]).astype(np.uint64)
    arena = uform.Arena()
    from_str = np.array(model.text_encode(texts, arena).embeddings)
    from_bytes = np.array(model.text_encode(as_bytes, arena).embeddings)
    from_tape = np.array(model.text_encode((data, offsets), arena).embeddings)
    from_numpy_tape = np.array(model.text_encode((np.frombuffer(data, np.uint8), offsets), arena).embeddings)
    assert np.array_equal(from_str, from_bytes)
    assert np.array_equal(from_str, from_tape)
    assert np.array_equal(from_str, from_numpy_tape)


def test_embedding_prefixes_renormalise(checkpoint_factory):
    path = checkpoint_factory(**SHAPES[3])
    model = uform.Model.load_ram(path)
    embeddings = np.asarray(model.text_encode(["matryoshka"], uform.Arena()).embeddings)
    assert abs(np.linalg.norm(embeddings[0]) - 1) < 1e-6
    for width in (8, 32, 128):
        prefix = embeddings[0, :width] / np.linalg.norm(embeddings[0, :width])
        assert abs(np.linalg.norm(prefix) - 1) < 1e-6


def test_arena_views_and_reuse(checkpoint_factory):
    path = checkpoint_factory(**SHAPES[1])
    model = uform.Model.load_ram(path)
    arena = uform.Arena()
    first = model.text_encode(["one", "two"], arena)
    view = memoryview(first.embeddings)            # the buffer protocol, no copy
    assert view.shape == (2, 100) and view.format == "f"
    assert np.shares_memory(np.asarray(first.embeddings), np.asarray(view))
    capacity = arena.capacity
    for _ in range(5):
        model.text_encode(["one", "two"], arena)
    assert arena.capacity == capacity, "a reused arena stops growing"
    del arena, model
    assert np.isfinite(np.asarray(first.embeddings)).all()   # the view keeps its arena alive


def test_describe(checkpoint_factory):
    shape = SHAPES[2]
    path = checkpoint_factory(**shape)
    description = uform.Model.load_ram(path).describe()
    assert isinstance(description, uform.ModelDescription)
    assert description._fields == ("dimensions", "context", "quantization", "memory_usage",
                                   "cpu_class", "gpu_class", "token_width",
                                   "choice_temperature_groups")
    assert description.dimensions == shape["dimensions"]
    assert description.context == shape["context"]
    assert description.quantization == uform.Scalar.BF16
    assert description.cpu_class in CPU_CLASSES and description.gpu_class is None
    assert description.token_width == shape["token_width"]
    assert description.choice_temperature_groups == 0
    # At least the BF16 weight matrices, at most FP32 copies of every parameter.
    hidden, depth = shape["hidden"], shape["depth"]
    matrices = depth * 12 * hidden * hidden + (shape["dimensions"] + shape["token_width"]) * hidden
    assert 2 * matrices <= description.memory_usage <= 4 * (matrices + 300 * hidden + depth * 20 * hidden)


def test_byte_head_description(checkpoint_factory):
    path = checkpoint_factory(depth=1, hidden=64, dimensions=16, context=32, byte_head=True,
                              choice_temperature_groups=3)
    assert uform.Model.load_ram(path).describe().choice_temperature_groups == 3


def test_load_from_buffer_equals_path(checkpoint_factory):
    path = checkpoint_factory(**SHAPES[0])
    with open(path, "rb") as file:
        data = file.read()
    arena = uform.Arena()
    a = np.array(uform.Model.load_ram(path).text_encode(["same"], arena).embeddings)
    b = np.array(uform.Model.load_ram_buffer(data).text_encode(["same"], arena).embeddings)
    c = np.array(uform.Model.load_ram_buffer(bytearray(data)).text_encode(["same"], arena).embeddings)
    assert np.array_equal(a, b) and np.array_equal(a, c)


def test_progress_reports_and_cancels(checkpoint_factory):
    path = checkpoint_factory(**SHAPES[0])
    model = uform.Model.load_ram(path)
    texts = ["x" * 60] * 2000  # several forward batches
    calls = []
    model.text_encode(texts, uform.Arena(), progress=lambda d, t: calls.append((d, t)), progress_steps=5)
    assert 1 <= len(calls) <= 5 and calls[-1] == (2000, 2000)
    assert all(d1 <= d2 for (d1, _), (d2, _) in zip(calls, calls[1:]))

    with pytest.raises(uform.CancelledError):
        model.text_encode(texts, uform.Arena(), progress=lambda d, t: True, progress_steps=5)

    class Boom(Exception):
        pass

    def explode(done, total):
        raise Boom("from the handler")

    with pytest.raises(Boom):
        model.text_encode(texts, uform.Arena(), progress=explode, progress_steps=5)
    # the model is still usable
    assert model.text_encode(["ok"], uform.Arena()).embeddings.shape == (1, 32)

    loads = []
    uform.Model.load_ram(path, progress=lambda d, t: loads.append((d, t)), progress_steps=3)
    assert 1 <= len(loads) <= 3 and loads[-1][0] == loads[-1][1]


def test_deferred_matches_blocking(checkpoint_factory):
    path = checkpoint_factory(**SHAPES[1])
    model = uform.Model.load_ram(path)
    texts = sample_texts(128) * 10
    expected = np.array(model.text_encode(texts, uform.Arena()).embeddings)
    executor = uform.Executor.for_ram(2)
    arenas = [uform.Arena() for _ in range(3)]
    pending = [model.deferred(executor).text_encode(texts, arena) for arena in arenas]
    for deferred in pending:
        result = deferred.result()
        assert deferred.done()
        assert np.array_equal(np.asarray(result.embeddings), expected)
    failing = model.deferred(executor).text_encode([], uform.Arena())   # refused by the C verb, in the job
    with pytest.raises(uform.InvalidArgumentError, match="empty"):
        failing.result()
    with pytest.raises(uform.InvalidArgumentError, match="empty"):   # asking again answers the same error
        failing.wait()


def test_concurrent_callers_share_one_model(checkpoint_factory):
    from concurrent.futures import ThreadPoolExecutor

    path = checkpoint_factory(**SHAPES[1])
    model = uform.Model.load_ram(path)
    texts = sample_texts(128) * 4
    expected = np.array(model.text_encode(texts, uform.Arena()).embeddings)

    def run(_):
        return np.array(model.text_encode(texts, uform.Arena()).embeddings)

    with ThreadPoolExecutor(4) as pool:
        for result in pool.map(run, range(8)):
            assert np.array_equal(result, expected)


def test_an_arena_serves_one_call_at_a_time(checkpoint_factory):
    import threading

    model = uform.Model.load_ram(checkpoint_factory(**SHAPES[0]))
    arena = uform.Arena()
    holding, release = threading.Event(), threading.Event()

    def hold(done, total):   # runs on the submission thread while the job owns the arena
        holding.set()
        release.wait(30)

    pending = model.deferred(uform.Executor.for_ram(1)).text_encode(
        ["busy"] * 10, arena, progress=hold, progress_steps=1)
    assert holding.wait(30)
    with pytest.raises(uform.InvalidArgumentError, match="in use"):
        model.text_encode(["second"], arena)
    with pytest.raises(uform.InvalidArgumentError, match="in use"):
        arena.reset()
    release.set()
    assert pending.result().embeddings.shape == (10, 32)
    assert model.text_encode(["free again"], arena).embeddings.shape == (1, 32)


def test_views_keep_a_temporary_arena_alive(checkpoint_factory):
    """numpy collapses view chains to the memory's provider: the arena must be held
    there, or np.asarray of an output of a temporary arena reads freed memory."""
    import gc

    model = uform.Model.load_ram(checkpoint_factory(**SHAPES[1]))
    texts = sample_texts(128)
    expected = np.array(model.text_encode(texts, uform.Arena(),
                                          outputs=uform.Outputs.EMBEDDINGS | uform.Outputs.TOKENS).embeddings)
    encoded = model.text_encode(texts, uform.Arena(), outputs=uform.Outputs.EMBEDDINGS | uform.Outputs.TOKENS)
    plain = np.asarray(encoded.embeddings)[1:]        # a plain view of a view
    offsets = encoded.tokens.offsets
    tokens = np.asarray(encoded.tokens)
    del encoded
    gc.collect()
    for _ in range(20):                               # reuse freed memory if it was freed
        model.text_encode(texts * 4, uform.Arena())
    assert np.array_equal(plain, expected[1:])
    assert offsets[-1] == tokens.shape[0] and np.isfinite(tokens).all()
