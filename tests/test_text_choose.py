"""text_choose against the float64 PyTorch reference, its own invariants, and bad input.

Tolerances. The answer is p = softmax(z) over the chosen bytes, with logits
z_c = (h . text.bytes[c] + heads.bytes.bias[c]) / T from the MASK row's final state h.
If every logit is off by at most M, each probability obeys, exactly,

    |p'_c - p_c| <= min(p_c, 1 - p_c) * (e^(2M) - 1)

(p'_c / p_c = e^(dz_c) / sum_j p_j e^(dz_j) lies in [e^-2M, e^2M], and so does the ratio
of 1 - p'_c to 1 - p_c). The logits inherit h's relative precision: M = eps * max_c |z_c|,
eps = 1e-5 for the FP32 classes (DESIGN: FP32 agrees to about 1e-5) and 1e-2 for
SAPPHIRE (GEMM inputs rounded to BF16, DESIGN's 1e-2). Random checkpoints have large
logits (text.bytes rows of norm ~sqrt(H) against h of norm ~sqrt(H): |z| up to ~50),
so a SAPPHIRE logit can be off by ~0.3 and a probability near 1/2 may move by ~3e-2;
a flat 1e-2 on probabilities would be wrong there, this bound is not. A floor of 1e-6
covers the FP32 rounding of the outputs (values <= 1: an ulp is at most 6e-8, exp and
the division add a few). The FP32 classes must also meet DESIGN's absolute 2e-5.
Measured on the shapes below: FP32 errors reach ~7e-6 absolute and 1/10 of the bound,
SAPPHIRE ~3e-2 absolute and 1/2 of the bound.
"""
import functools

import numpy as np
import pytest
import torch

import uform
from conftest import BF16_CLASSES, CPU_CLASSES
from reference import ReferenceModel

FP32_ABSOLUTE = 2e-5
LOGIT_PRECISION = {"FP32": 1e-5, "BF16": 1e-2}
OUTPUT_FLOOR = 1e-6
ALL_BYTES = bytes(range(256))

# choice_temperature_groups None: a byte head without choices.log_temperature (G = 1,
# temperature 1); 1 and 3: the tensor holds that many random log temperatures.
SHAPES = [
    dict(depth=1, hidden=64, dimensions=16, context=64, byte_head=True, choice_temperature_groups=None),
    dict(depth=2, hidden=128, dimensions=32, context=128, byte_head=True, choice_temperature_groups=1),
    dict(depth=3, hidden=192, dimensions=16, context=96, byte_head=True, choice_temperature_groups=3),
    dict(depth=4, hidden=256, dimensions=64, context=200, byte_head=True, choice_temperature_groups=3),
]
SMALL = SHAPES[2]
NO_TENSOR = SHAPES[0]


def shape_id(shape: dict) -> str:
    return f"d{shape['depth']}h{shape['hidden']}g{shape['choice_temperature_groups']}"


def groups_of(shape: dict) -> int:
    return shape["choice_temperature_groups"] or 1


def sample_texts(context: int) -> list:
    rng = np.random.default_rng(context)
    return [
        b"",                                                 # empty: MASK alone, at position 0
        b"a",                                                # one byte
        b"x" * (context + 37),                               # longer than context: cut at context - 1
        bytes(rng.integers(0, 256, size=context, dtype=np.uint8)),      # exactly context: cut by one
        bytes(rng.integers(0, 256, size=context - 1, dtype=np.uint8)),  # exactly context - 1: kept whole
        "Réponse: oui ou non? ✓ 日本語 🙂",                     # multi-byte UTF-8, as str
        b"\x00\x00nul\x00bytes\x00",                          # NUL bytes are ordinary bytes
        b"\x80\xff not UTF-8",                               # arbitrary bytes
        b"Q: is the sky blue? A:",
    ]


def sample_choices(count: int, seed: int) -> list:
    """Per-text choices: 2 to 5 distinct bytes, or all 256 in a random order."""
    rng = np.random.default_rng(seed)
    choices = []
    for i in range(count):
        n = 256 if i % 4 == 3 else int(rng.integers(2, 6))
        choices.append(bytes(rng.permutation(256)[:n].astype(np.uint8)))
    return choices


@functools.lru_cache(maxsize=None)
def reference_model(path: str) -> ReferenceModel:
    return ReferenceModel.load(path)


@functools.lru_cache(maxsize=None)
def reference(path: str, text, choices: bytes, group: int) -> tuple:
    """(probabilities, logits z = byte logits / T) of one text, float64; cached, as every
    CPU class compares with the same values."""
    model = reference_model(path)
    with torch.no_grad():
        p = model.text_choose(text, choices, group)
        # The largest |z| sets the logit error the tolerance allows (module docstring).
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        h = model.text_hidden(torch.tensor(list(data[:model.context - 1]) + [256]))[-1]
        chosen = torch.tensor(list(choices))
        z = model.weight("text.bytes")[chosen] @ h + model.weight("heads.bytes.bias")[chosen]
        if model.has("choices.log_temperature"):
            z = z / torch.exp(model.weight("choices.log_temperature")[group])
    return p.numpy(), z.numpy()


def precision(cpu_class) -> str:
    return "BF16" if cpu_class in BF16_CLASSES else "FP32"


def assert_close(got: np.ndarray, expected: np.ndarray, logits: np.ndarray, cpu_class, what: str) -> None:
    """The bound of the module docstring, per probability."""
    assert got.shape == expected.shape, what
    margin = LOGIT_PRECISION[precision(cpu_class)] * np.abs(logits).max()
    bound = np.minimum(expected, 1 - expected) * np.expm1(2 * margin) + OUTPUT_FLOOR
    error = np.abs(got.astype(np.float64) - expected)
    assert np.all(error <= bound), f"{what}: error {error.max():.3g} over the bound at {np.argmax(error / bound)}"
    if precision(cpu_class) == "FP32":
        assert error.max() <= FP32_ABSOLUTE, f"{what}: {error.max():.3g} over DESIGN's FP32 2e-5"


def load(checkpoint_factory, shape: dict, **keywords) -> tuple:
    path = checkpoint_factory(**shape)
    return path, uform.Model.load_ram(path, **keywords)


# ---- against the reference ---------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("cpu_class", CPU_CLASSES, ids=lambda c: c.name)
def test_matches_reference(checkpoint_factory, shape, cpu_class):
    path, model = load(checkpoint_factory, shape, cpu_class=cpu_class)
    assert model.describe().cpu_class == cpu_class
    texts = sample_texts(shape["context"])
    choices = sample_choices(len(texts), seed=shape["hidden"])
    groups = [i % groups_of(shape) for i in range(len(texts))]
    answer = model.text_choose(texts, choices, uform.Arena(), temperature_groups=groups)
    assert isinstance(answer, uform.RowsTape) and answer.dtype == np.float32 and answer.ndim == 1
    assert list(answer.offsets) == list(np.cumsum([0] + [len(c) for c in choices]))
    for i, text in enumerate(texts):
        expected, logits = reference(path, text, choices[i], groups[i])
        assert_close(answer.rows(i), expected, logits, cpu_class, f"text {i}")

    # One string every text shares, each of its characters a choice; default group 0.
    shared = model.text_choose(texts, "ABCD", uform.Arena())
    assert list(shared.offsets) == [4 * i for i in range(len(texts) + 1)]
    for i, text in enumerate(texts):
        expected, logits = reference(path, text, b"ABCD", 0)
        assert_close(shared.rows(i), expected, logits, cpu_class, f"shared, text {i}")


@pytest.mark.parametrize("cpu_class", CPU_CLASSES, ids=lambda c: c.name)
def test_every_group_has_its_temperature(checkpoint_factory, cpu_class):
    """One text in each of G = 3 groups: three different answers, each the reference's."""
    path, model = load(checkpoint_factory, SMALL, cpu_class=cpu_class)
    text = b"Which one? "
    answer = model.text_choose([text] * 3, ALL_BYTES, uform.Arena(), temperature_groups=[0, 1, 2])
    rows = [answer.rows(g) for g in range(3)]
    for group in range(3):
        expected, logits = reference(path, text, ALL_BYTES, group)
        assert_close(rows[group], expected, logits, cpu_class, f"group {group}")
    assert not np.array_equal(rows[0], rows[1]) and not np.array_equal(rows[1], rows[2])


def test_a_context_of_one_keeps_only_mask(checkpoint_factory):
    """context 1: every text is cut to no bytes (counted as truncated when it had any), so
    every text answers what MASK alone at position 0 answers."""
    shape = dict(depth=2, hidden=64, dimensions=8, context=1, byte_head=True, choice_temperature_groups=2)
    path, model = load(checkpoint_factory, shape, cpu_class=CPU_CLASSES[-1])
    stats = uform.TextEncodeStats()
    answer = model.text_choose([b"", b"long text", b"z"], "yn", uform.Arena(), stats=stats)
    expected, logits = reference(path, b"", b"yn", 0)
    for i in range(3):
        assert_close(answer.rows(i), expected, logits, CPU_CLASSES[-1], f"text {i}")
        assert np.array_equal(answer.rows(i), answer.rows(0))
    assert (stats.items, stats.tokens, stats.truncated, stats.empty) == (3, 3, 2, 1)


# ---- invariants ------------------------------------------------------------------------

@pytest.mark.parametrize("cpu_class", CPU_CLASSES, ids=lambda c: c.name)
def test_rows_sum_to_one(checkpoint_factory, cpu_class):
    _, model = load(checkpoint_factory, SHAPES[3], cpu_class=cpu_class)
    texts = sample_texts(200) * 3
    choices = sample_choices(len(texts), seed=7)
    answer = model.text_choose(texts, choices, uform.Arena(), temperature_groups=[i % 3 for i in range(len(texts))])
    values = np.asarray(answer)
    assert np.all(values >= 0) and np.all(values <= 1)
    for i, entry in enumerate(choices):
        # p_c = e_c / S with S the FP32 sum of the same e_c: the sum's rounding, at most
        # (n - 1) ulp-halves, plus one per division, so |sum - 1| <= n * 2^-24 (+ u^2 terms).
        n = len(entry)
        total = answer.rows(i).astype(np.float64).sum()
        assert abs(total - 1) <= (n + 1) * 2.0 ** -24, (i, n, total)


@pytest.mark.parametrize("cpu_class", CPU_CLASSES, ids=lambda c: c.name)
def test_batch_equals_each_text_alone(checkpoint_factory, cpu_class):
    _, model = load(checkpoint_factory, SHAPES[1], cpu_class=cpu_class)
    texts = sample_texts(128) * 3
    choices = sample_choices(len(texts), seed=3)
    arena = uform.Arena()
    batch = np.array(model.text_choose(texts, choices, arena))
    offsets = np.cumsum([0] + [len(c) for c in choices])
    for i, text in enumerate(texts):
        alone = np.asarray(model.text_choose([text], [choices[i]], arena))
        # Bit for bit: a text's arithmetic never depends on the texts around it.
        assert np.array_equal(alone, batch[offsets[i]:offsets[i + 1]]), i


@pytest.mark.parametrize("cpu_class", CPU_CLASSES, ids=lambda c: c.name)
def test_results_do_not_depend_on_threads(checkpoint_factory, cpu_class):
    _, model = load(checkpoint_factory, SHAPES[3], cpu_class=cpu_class)
    texts = sample_texts(200) * 4
    choices = sample_choices(len(texts), seed=11)
    groups = [i % 3 for i in range(len(texts))]
    results = []
    for threads in (1, 3):
        executor = uform.Executor.for_ram(threads)
        assert executor.threads == threads
        answer = model.on(executor).text_choose(texts, choices, uform.Arena(), temperature_groups=groups)
        results.append(np.array(answer))
    assert np.array_equal(results[0], results[1])


def test_inputs_in_every_form_give_the_same_bits(checkpoint_factory):
    _, model = load(checkpoint_factory, SMALL)
    texts = ["plain", "ünïcödé", "", "日本語"]
    arena = uform.Arena()
    expected = np.array(model.text_choose(texts, "xyz", arena, temperature_groups=[2, 1, 0, 2]))
    as_bytes = [t.encode() for t in texts]
    data = b"".join(as_bytes)
    text_offsets = np.cumsum([0] + [len(b) for b in as_bytes]).astype(np.uint64)
    groups = np.array([2, 1, 0, 2], dtype=np.uint32)
    forms = [
        (texts, b"xyz"),                                     # shared bytes
        (texts, ["xyz"]),                                    # a single entry is shared too
        (texts, ["xyz"] * 4),                                # one str per text
        (as_bytes, [b"xyz"] * 4),                            # one bytes per text
        (texts, [["x", "y", "z"]] * 4),                      # sequences of single characters
        (texts, [(b"x", b"y", b"z")] * 4),                   # sequences of single bytes
        ((data, text_offsets), (b"xyz", np.array([0, 3], dtype=np.uint64))),          # tapes, shared
        ((np.frombuffer(data, np.uint8), text_offsets),
         (b"xyz" * 4, np.arange(0, 13, 3, dtype=np.uint64))),                          # tapes, per text
    ]
    for index, (form_texts, form_choices) in enumerate(forms):
        for form_groups in ([2, 1, 0, 2], groups):
            got = np.asarray(model.text_choose(form_texts, form_choices, arena, temperature_groups=form_groups))
            assert np.array_equal(got, expected), index


def test_answer_is_a_float32_tape_in_the_arena(checkpoint_factory):
    from uform._buffers import _tape_from_buffers

    _, model = load(checkpoint_factory, SMALL)
    arena = uform.Arena()
    answer = model.text_choose(["one", "two", "three"], ["ab", "cde", ALL_BYTES], arena)
    view = memoryview(answer)                       # the buffer protocol, no copy
    assert view.format == "f" and view.shape == (2 + 3 + 256,) and view.c_contiguous
    assert answer.offsets.dtype.itemsize == 8 and list(answer.offsets) == [0, 2, 5, 261]
    assert np.shares_memory(answer.rows(1), np.asarray(answer))
    assert answer.scalar == uform.Scalar.F32
    # What a trainer's choice_targets takes: (answer, answer.offsets) as a float32 tape.
    tape = _tape_from_buffers(answer, answer.offsets, "choice_targets")
    assert tape.struct.count == 3 and tape.struct.size == 4 * 261
    capacity = arena.capacity
    for _ in range(5):
        model.text_choose(["one", "two", "three"], ["ab", "cde", ALL_BYTES], arena)
    assert arena.capacity == capacity, "a reused arena stops growing"
    del arena, model
    assert np.isfinite(np.asarray(answer)).all()   # the view keeps its arena alive


def test_stats(checkpoint_factory):
    shape = dict(depth=1, hidden=64, dimensions=16, context=96, byte_head=True)
    _, model = load(checkpoint_factory, shape)
    rng = np.random.default_rng(1)
    texts = [bytes(rng.integers(0, 256, size=int(rng.integers(0, 140)), dtype=np.uint8)) for _ in range(500)]
    texts[:4] = [b"", b"x" * 95, b"x" * 96, b"x" * 97]        # 95 = context - 1 is kept whole
    stats = uform.TextEncodeStats()
    answer = model.text_choose(texts, "01", uform.Arena(), stats=stats)
    assert answer.shape == (1000,)
    assert stats.items == 500
    assert stats.tokens == sum(min(len(t), 95) + 1 for t in texts)   # MASK rows counted
    assert stats.truncated == sum(len(t) > 95 for t in texts)
    assert stats.empty == sum(len(t) == 0 for t in texts)


def test_describe_reports_groups(checkpoint_factory):
    assert load(checkpoint_factory, NO_TENSOR)[1].describe().choice_temperature_groups == 1
    assert load(checkpoint_factory, SMALL)[1].describe().choice_temperature_groups == 3


def test_progress_reports_and_cancels(checkpoint_factory):
    _, model = load(checkpoint_factory, NO_TENSOR)
    texts = ["x" * 60] * 2000            # 122,000 rows: several forward batches
    calls = []
    model.text_choose(texts, "ab", uform.Arena(), progress=lambda d, t: calls.append((d, t)), progress_steps=5)
    assert 1 <= len(calls) <= 5 and calls[-1] == (2000, 2000)
    assert all(d1 <= d2 for (d1, _), (d2, _) in zip(calls, calls[1:]))

    with pytest.raises(uform.CancelledError):
        model.text_choose(texts, "ab", uform.Arena(), progress=lambda d, t: True, progress_steps=5)

    class Boom(Exception):
        pass

    def explode(done, total):
        raise Boom("from the handler")

    with pytest.raises(Boom):
        model.text_choose(texts, "ab", uform.Arena(), progress=explode, progress_steps=5)
    assert model.text_choose(["ok"], "ab", uform.Arena()).shape == (2,)   # still usable


def test_receivers_match_blocking(checkpoint_factory):
    _, model = load(checkpoint_factory, SMALL)
    texts = sample_texts(96) * 10
    choices = sample_choices(len(texts), seed=5)
    groups = np.array([i % 3 for i in range(len(texts))], dtype=np.uint32)
    expected = np.array(model.text_choose(texts, choices, uform.Arena(), temperature_groups=groups))
    executor = uform.Executor.for_ram(2)
    stats = uform.TextEncodeStats()
    on = model.on(executor).text_choose(texts, choices, uform.Arena(), temperature_groups=groups, stats=stats)
    assert np.array_equal(np.asarray(on), expected) and stats.items == len(texts)
    arenas = [uform.Arena() for _ in range(3)]
    pending = [model.deferred(executor).text_choose(texts, choices, arena, temperature_groups=groups)
               for arena in arenas]
    for deferred in pending:
        result = deferred.result()
        assert deferred.done()
        assert np.array_equal(np.asarray(result), expected)
    # Errors the C side finds surface at result(), and again at wait().
    failing = model.deferred(executor).text_choose(["a", "b"], ["xy", "zz"], uform.Arena())
    with pytest.raises(uform.InvalidArgumentError, match="0x7a 'z'"):
        failing.result()
    with pytest.raises(uform.InvalidArgumentError, match="0x7a"):
        failing.wait()
    with pytest.raises(TypeError):
        model.on(executor).text_choose(["a"], "ab", uform.Arena(), outputs=1)


def test_an_arena_serves_one_call_at_a_time(checkpoint_factory):
    import threading

    _, model = load(checkpoint_factory, NO_TENSOR)
    arena = uform.Arena()
    holding, release = threading.Event(), threading.Event()

    def hold(done, total):   # runs on the submission thread while the job owns the arena
        holding.set()
        release.wait(30)

    pending = model.deferred(uform.Executor.for_ram(1)).text_choose(
        ["busy"] * 10, "ab", arena, progress=hold, progress_steps=1)
    assert holding.wait(30)
    with pytest.raises(uform.InvalidArgumentError, match="in use"):
        model.text_choose(["second"], "ab", arena)
    release.set()
    assert pending.result().shape == (20,)
    assert model.text_choose(["free again"], "ab", arena).shape == (2,)


# ---- bad input -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small(checkpoint_factory):
    return uform.Model.load_ram(checkpoint_factory(**SMALL))


@pytest.mark.parametrize("choices,pattern", [
    ("yé", r"choices: 'é' is 2 bytes in UTF-8"),                       # a non-ASCII character
    (["ab", "no✓"], r"choices\[1\]: '✓' is 3 bytes"),
    ([["yes", "no"], "ab"], r"choices\[0\]\[0\]: 'yes' is 3 bytes"),   # an element of several bytes
    ([["y", ""], "ab"], r"choices\[0\]\[1\]: '' is 0 bytes"),
    ([[b"y", b"no"], "ab"], r"choices\[0\]\[1\]: b'no' is 2 bytes"),
    ([["y", 7], "ab"], r"choices\[0\]\[1\]: expected a single-character str"),  # wrong types
    ([None, "ab"], r"choices\[0\]: expected str, bytes"),
    (123, "choices: expected a str or bytes"),
    (np.array([1, 2]), "choices: expected a str or bytes"),
    (["ab", ""], r"choices\[1\]: empty"),                                # an empty choice string
    ("", r"choices\[0\] \(shared by every text\): empty"),
    ("aba", r"choices\[0\] \(shared by every text\): byte 0x61 'a' appears more than once"),
    (["ab", "cdc"], r"choices\[1\]: byte 0x63 'c'"),                      # a duplicate, per text
    ([b"ab", b"\x00\x01\x00"], r"choices\[1\]: byte 0x00 appears"),
    ([ALL_BYTES + b"a", "ab"], r"choices\[0\]: 257 choices"),
    (["ab", "cd", "ef"], "3 entries for 2 texts"),                        # count mismatch
    ((b"abc", np.array([0, 2, 1], dtype=np.uint64)), "choices: offsets decrease"),
    ((b"abc", np.array([0, 1, 9], dtype=np.uint64)), "choices: the last offset 9 is past"),
    ((b"abc", np.array([0, 1, 3], dtype=np.uint32)), "choices: tape offsets must be 64-bit"),
    ((b"", np.array([0], dtype=np.uint64)), "0 entries for 2 texts"),
])
def test_bad_choices(small, choices, pattern):
    with pytest.raises(uform.InvalidArgumentError, match=pattern):
        small.text_choose(["first", "second"], choices, uform.Arena())


@pytest.mark.parametrize("groups,pattern", [
    ([0, 3], r"temperature_groups\[1\]: group 3, but the model has 3 choice temperature groups \(0 to 2\)"),
    (np.array([7, 0], dtype=np.uint32), r"temperature_groups\[0\]: group 7"),
    ([0], "temperature_groups: 1 values for 2 texts"),
    ([0, 1, 2], "temperature_groups: 3 values for 2 texts"),
    ([0, -1], r"temperature_groups\[1\]: expected an int in \[0, 2\*\*32\)"),
    ([0, 2 ** 32], r"temperature_groups\[1\]"),
    ([0, 1.0], r"temperature_groups\[1\]"),
    ([True, 0], r"temperature_groups\[0\]"),
    ("01", "temperature_groups: expected uint32 values"),
    # Integer arrays of any dtype convert (one converter for every id buffer); their
    # values must be in range, and float arrays are refused.
    (np.array([0, 1], dtype=np.int64), None),
    (np.array([0, -1], dtype=np.int64), r"temperature_groups\[1\]: -1 is not in"),
    (np.array([0.0, 1.0]), "temperature_groups: expected integer ids, got a numpy array of float64"),
    (np.array([1, 2], dtype=np.uint32), None),                            # a uint32 buffer: fine
    (np.arange(4, dtype=np.uint32)[::2], "temperature_groups: the buffer must be contiguous"),
    (3, "temperature_groups: expected a uint32 buffer or a sequence"),
])
def test_bad_groups(small, groups, pattern):
    if pattern is None:
        assert small.text_choose(["first", "second"], "ab", uform.Arena(), temperature_groups=groups).shape == (4,)
        return
    with pytest.raises(uform.InvalidArgumentError, match=pattern):
        small.text_choose(["first", "second"], "ab", uform.Arena(), temperature_groups=groups)


def test_groups_of_an_uncalibrated_model(checkpoint_factory):
    """Without choices.log_temperature the model has one group: only group 0 is valid."""
    _, model = load(checkpoint_factory, NO_TENSOR)
    assert model.text_choose(["a"], "ab", uform.Arena(), temperature_groups=[0]).shape == (2,)
    with pytest.raises(uform.InvalidArgumentError, match=r"group 1, but the model has 1 choice temperature group \(0 to 0\)"):
        model.text_choose(["a"], "ab", uform.Arena(), temperature_groups=[1])


def test_bad_texts_and_keywords(small):
    arena = uform.Arena()
    cases = [
        (123, "texts"),
        ("one string", "single str"),
        ([b"ok", 7], r"texts\[1\]"),
        ([], "texts: the batch is empty"),
        ((b"abc", np.array([0, 2, 1], dtype=np.uint64)), "texts: offsets decrease"),
    ]
    for texts, pattern in cases:
        with pytest.raises(uform.InvalidArgumentError, match=pattern):
            small.text_choose(texts, "ab", arena)
    with pytest.raises(uform.InvalidArgumentError, match="arena"):
        small.text_choose(["x"], "ab", "arena")
    with pytest.raises(uform.InvalidArgumentError, match="stats"):
        small.text_choose(["x"], "ab", arena, stats={})
    with pytest.raises(uform.InvalidArgumentError, match="progress"):
        small.text_choose(["x"], "ab", arena, progress=3)
    with pytest.raises(uform.InvalidArgumentError, match="progress_steps"):
        small.text_choose(["x"], "ab", arena, progress_steps=-1)
    with pytest.raises(TypeError):
        small.text_choose(["x"], "ab", arena, groups=[0])
    with pytest.raises(TypeError):
        small.text_choose(["x"], "ab", arena, [0])          # keywords only after the arena
    # Every failure above left the model and the arena usable.
    assert small.text_choose(["x"], "ab", arena).shape == (2,)


def test_huge_and_odd_texts(small):
    stats = uform.TextEncodeStats()
    huge = b"\xff" * (8 << 20)                                 # 8 MiB: cut at context - 1
    answer = small.text_choose([huge, b"\x00" * 5, b"\x80\x81 invalid utf-8"], ALL_BYTES, uform.Arena(), stats=stats)
    assert stats.truncated == 1 and stats.tokens == 96 + 6 + 17
    assert np.isfinite(np.asarray(answer)).all() and answer.shape == (3 * 256,)


def test_a_model_without_a_byte_head_is_unsupported(checkpoint_factory):
    model = uform.Model.load_ram(checkpoint_factory(depth=1, hidden=64, dimensions=16, context=32))
    assert model.describe().choice_temperature_groups == 0
    with pytest.raises(uform.UnsupportedError, match="no byte head"):
        model.text_choose(["q"], "ab", uform.Arena())
    with pytest.raises(uform.UnsupportedError, match="no byte head"):
        model.deferred(uform.Executor.for_ram(1)).text_choose(["q"], "ab", uform.Arena()).result()
