"""uform.late_interaction_scores (MaxSim) against the float64 reference written from the
definition (tests/reference/late_interaction.py), on random token sets and on text_encode's
token outputs read in place from the arena; empty and one-row items; bad input; thread
counts.

Tolerance (u = 2^-24, the FP32 unit roundoff). The library computes each dot product
<q_i, d_j> as one FP32 chain of `width` multiply-adds from +0, so it is within
gamma(width + 2) * S_ij of the exact value, where S_ij = sum_p |q_ip d_jp| and
gamma(n) = n u / (1 - n u) (Higham 3.1; the bound uform_sgemm documents). A maximum moves
by at most the largest error of its terms and a mean by at most the mean of its rows'
errors; the mean itself is taken in double and rounded once to FP32 (u |score|). So

    |score - exact| <= gamma(width + 2) * mean_i max_j S_ij + u * |exact| (+ 1e-15 * S for
                       the double steps and the reference's own float64 rounding),

computed per pair by `error_bound`. The reference gets the stored values (BF16 bits, F16,
I8 / 127 decoded exactly), so the only error left is the library's FP32 arithmetic.
"""
import numpy as np
import pytest

import uform
from reference.late_interaction import decode_rows, late_interaction_scores, split
from uform._late_interaction import _side
from uform._native import ffi

U = 2.0 ** -24


def address(pointer) -> int:
    """The address a cffi pointer holds."""
    return int(ffi.cast("uintptr_t", pointer))


def error_bound(queries: list, documents: list, exact: np.ndarray) -> np.ndarray:
    """The bound of the module docstring, per (query, document) pair."""
    width = next(len(x[0]) for x in list(queries) + list(documents) if len(x))
    gamma = (width + 2) * U / (1 - (width + 2) * U)
    s_mean = np.zeros_like(exact)
    for q, query in enumerate(queries):
        for d, document in enumerate(documents):
            if len(query) and len(document):
                s = np.abs(np.asarray(query, np.float64)) @ np.abs(np.asarray(document, np.float64)).T
                s_mean[q, d] = s.max(axis=1).mean()
    return (gamma + 1e-15) * s_mean + U * np.abs(exact)


def assert_within_bound(scores: np.ndarray, queries: list, documents: list) -> None:
    exact = late_interaction_scores(queries, documents)
    assert scores.shape == exact.shape and scores.dtype == np.float32
    bound = error_bound(queries, documents, exact)
    error = np.abs(scores.astype(np.float64) - exact)
    worst = np.unravel_index(np.argmax(error - bound), error.shape)
    assert np.all(error <= bound), (f"pair {worst}: {scores[worst]!r} vs {exact[worst]!r}, "
                                    f"bound {bound[worst]:.3g}")


def random_tape(rng, count: int, max_rows: int, width: int, min_rows: int = 0, unit: bool = True):
    """(rows float32 [n, width], offsets) with item lengths uniform in [min_rows, max_rows]."""
    lengths = rng.integers(min_rows, max_rows + 1, size=count)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.uint64)
    rows = rng.standard_normal((int(offsets[-1]), width)).astype(np.float32)
    if unit:   # like the encoder's token vectors
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows, offsets


# ---- random token sets ---------------------------------------------------------------

@pytest.mark.parametrize("width", [1, 7, 128])
@pytest.mark.parametrize("unit", [True, False], ids=["unit", "scaled"])
def test_random_sets_match_reference(width, unit):
    rng = np.random.default_rng(width + 1000 * unit)
    q_rows, q_offsets = random_tape(rng, 9, 12, width, unit=unit)
    d_rows, d_offsets = random_tape(rng, 17, 40, width, unit=unit)
    if not unit:   # rows of very different lengths: the bound is per row, not global
        q_rows *= rng.uniform(0.01, 100, size=(len(q_rows), 1)).astype(np.float32)
    scores = uform.late_interaction_scores((q_rows, q_offsets), (d_rows, d_offsets))
    assert_within_bound(scores, split(q_rows, q_offsets), split(d_rows, d_offsets))


def test_large_case_matches_reference():
    """64 queries x 2000 documents: many document blocks, long and empty items among them."""
    rng = np.random.default_rng(7)
    q_rows, q_offsets = random_tape(rng, 64, 40, 32)
    d_rows, d_offsets = random_tape(rng, 2000, 120, 32)
    executor = uform.Executor.for_ram(3)
    scores = uform.late_interaction_scores((q_rows, q_offsets), (d_rows, d_offsets),
                                           executor=executor)
    assert scores.shape == (64, 2000)
    assert_within_bound(scores, split(q_rows, q_offsets), split(d_rows, d_offsets))


def test_thread_counts_give_identical_bits():
    rng = np.random.default_rng(3)
    q_rows, q_offsets = random_tape(rng, 40, 300, 24)   # queries longer than a query chunk
    d_rows, d_offsets = random_tape(rng, 500, 80, 24)
    queries, documents = (q_rows, q_offsets), (d_rows, d_offsets)
    alone = uform.late_interaction_scores(queries, documents)
    for threads in (1, 3):
        pooled = uform.late_interaction_scores(queries, documents,
                                               executor=uform.Executor.for_ram(threads))
        assert np.array_equal(alone.view(np.uint32), pooled.view(np.uint32)), threads


def test_offsets_need_not_start_at_zero_and_rows_may_be_strided():
    """A sub-range of rows (offsets from 3) and a column slice of a wider array (rows
    strided by the wider width) are read in place and score like their dense copies."""
    rng = np.random.default_rng(11)
    wide = rng.standard_normal((30, 21)).astype(np.float32)
    rows = wide[:, :16]                       # row stride 84 bytes, 16 values per row
    offsets = np.array([3, 5, 5, 12, 30])
    dense = np.ascontiguousarray(rows[3:])
    dense_offsets = offsets - 3
    strided = uform.late_interaction_scores((rows, offsets), (rows, offsets))
    copied = uform.late_interaction_scores((dense, dense_offsets), (dense, dense_offsets))
    assert np.array_equal(strided, copied)
    side = _side((rows, offsets), "queries")
    assert address(side.struct.data) == rows.__array_interface__["data"][0]
    assert side.struct.row_bytes == 21 * 4
    assert_within_bound(strided, split(rows, offsets), split(rows, offsets))


# ---- text_encode token outputs, read in place ---------------------------------------

QUERY_TEXTS = [b"what is late interaction", b"", b"q", "héllo wörld".encode()]
DOCUMENT_TEXTS = [b"late interaction scores every query token against every document token",
                  b"x", b"", b"The quick brown fox jumps over the lazy dog.", "wörld".encode(),
                  bytes(range(1, 60))]


@pytest.mark.parametrize("scalar", ["F32", "BF16", "F16", "I8"])
def test_text_encode_tokens_in_place(checkpoint_factory, scalar):
    path = checkpoint_factory(depth=1, hidden=64, dimensions=32, context=64, token_width=16)
    model = uform.Model.load_ram(path)
    outputs_scalar = uform.Scalar[scalar]
    # Two arenas: an encode call reuses its arena, ending the previous call's outputs.
    query_arena, document_arena = uform.Arena(), uform.Arena()
    queries = model.text_encode(QUERY_TEXTS, query_arena, outputs=uform.Outputs.TOKENS,
                                outputs_scalar=outputs_scalar).tokens
    documents = model.text_encode(DOCUMENT_TEXTS, document_arena, outputs=uform.Outputs.TOKENS,
                                  outputs_scalar=outputs_scalar).tokens
    assert isinstance(queries, uform.RowsTape) and queries.scalar == outputs_scalar

    scores = uform.late_interaction_scores(queries, documents)

    # No copy: the pointer handed to C is the arena's own memory, row stride and all.
    for tape in (queries, documents):
        side = _side(tape, "queries")
        assert address(side.struct.data) == tape.__array_interface__["data"][0]
        assert side.struct.row_bytes == tape.strides[0] and side.struct.scalar == outputs_scalar
        assert address(side.struct.offsets) == tape.offsets.__array_interface__["data"][0]

    q_values = split(decode_rows(queries, scalar), queries.offsets)
    d_values = split(decode_rows(documents, scalar), documents.offsets)
    assert_within_bound(scores, q_values, d_values)
    assert np.all(scores[1] == 0) and np.all(scores[:, 2] == 0), "an empty text scores 0"
    # Self-scores of unit token vectors: each row finds itself, so the score is near 1
    # (I8 rows are unit vectors only to within their rounding of 1/254 per value).
    self_scores = uform.late_interaction_scores(queries, queries)
    nonempty = [i for i, text in enumerate(QUERY_TEXTS) if text]
    assert np.all(np.abs(np.diag(self_scores)[nonempty] - 1) < (0.05 if scalar == "I8" else 0.01))


def test_rows_with_offsets_regrouped_from_an_arena(checkpoint_factory):
    """An ArenaBuffer with offsets of one's own (items are consecutive row ranges): text 0's
    first 3 tokens, then its remaining tokens, as two queries."""
    path = checkpoint_factory(depth=1, hidden=64, dimensions=32, context=64, token_width=16)
    model = uform.Model.load_ram(path)
    tokens = model.text_encode(DOCUMENT_TEXTS, uform.Arena(), outputs=uform.Outputs.TOKENS,
                               outputs_scalar=uform.Scalar.BF16).tokens
    end = int(tokens.offsets[1])
    assert end > 3
    offsets = [0, 3, end]
    scores = uform.late_interaction_scores((tokens, offsets), tokens)
    values = decode_rows(tokens, "BF16")
    assert_within_bound(scores, split(values, offsets), split(values, tokens.offsets))


# ---- empty and one-row items --------------------------------------------------------

def test_empty_sides_and_empty_items():
    rows = np.eye(3, dtype=np.float32)
    nothing = (np.zeros((0, 3), np.float32), [0])
    assert uform.late_interaction_scores(nothing, (rows, [0, 3])).shape == (0, 1)
    assert uform.late_interaction_scores((rows, [0, 3]), nothing).shape == (1, 0)
    assert uform.late_interaction_scores(nothing, nothing).shape == (0, 0)
    # items without rows score 0, whatever the other side holds
    scores = uform.late_interaction_scores((rows, [0, 0, 3, 3]), (rows, [0, 2, 2]))
    # query 1 = rows e0, e1, e2; document 0 = rows e0, e1: maxima 1, 1, 0, mean 2/3 in FP32
    assert scores.tolist() == [[0.0, 0.0], [float(np.float32(2 / 3)), 0.0], [0.0, 0.0]]


def test_one_row_items():
    """One query row against one document row: the dot product itself."""
    rng = np.random.default_rng(5)
    q = rng.standard_normal((4, 8)).astype(np.float32)
    d = rng.standard_normal((6, 8)).astype(np.float32)
    scores = uform.late_interaction_scores((q, np.arange(5)), (d, np.arange(7)))
    assert_within_bound(scores, list(q[:, None, :]), list(d[:, None, :]))
    # a document whose rows all lose to one: the maximum, not the mean, counts
    doc = np.array([[1, 0], [0.5, 0], [-3, 0]], np.float32)
    query = np.array([[1, 0], [-1, 0]], np.float32)
    assert uform.late_interaction_scores((query, [0, 2]), (doc, [0, 3])).tolist() == [[(1 + 3) / 2]]


# ---- bad input ------------------------------------------------------------------------

GOOD = (np.eye(4, dtype=np.float32), [0, 2, 4])


def test_width_mismatch():
    with pytest.raises(uform.InvalidArgumentError, match="documents.width"):
        uform.late_interaction_scores(GOOD, (np.eye(3, dtype=np.float32), [0, 3]))


@pytest.mark.parametrize("offsets, match", [
    ([0, 3, 2], r"queries.offsets\[2\]"),        # decreasing: the C side names the index
    ([0, 5], "past the 4 rows"),                 # beyond the rows given
    ([-1, 2], "negative"),
    ([0.0, 2.0], "integers"),
    ([], "count \\+ 1"),
    ([[0, 2]], "one-dimensional"),
    ("02", "integers"),
])
def test_bad_offsets(offsets, match):
    with pytest.raises(uform.InvalidArgumentError, match=match):
        uform.late_interaction_scores((np.eye(4, dtype=np.float32), offsets), GOOD)


@pytest.mark.parametrize("side, match", [
    (None, "RowsTape"),
    ([[1.0, 0.0]], "RowsTape"),
    ((np.eye(4), [0, 4]), "float32"),                             # float64
    ((np.eye(4, dtype=np.float16), [0, 4]), "float32"),           # a plain float16 array
    (([[1.0, 0.0]], [0, 1]), "numpy float32 array"),
    ((np.ones(4, np.float32), [0, 4]), "two-dimensional"),
    ((np.ones((4, 0), np.float32), [0, 4]), "at least one value"),
    ((np.eye(4, dtype=np.float32)[::-1], [0, 4]), "contiguous"),  # negative row stride
    ((np.eye(4, dtype=np.float32)[:, ::2], [0, 4]), "contiguous"),  # strided within rows
    ((np.eye(4, dtype=np.float32), [0, 4], 1), "RowsTape"),
])
def test_wrong_types(side, match):
    with pytest.raises(uform.InvalidArgumentError, match="documents: .*" + match):
        uform.late_interaction_scores(GOOD, side)


def test_unscored_scalars_and_executor(checkpoint_factory):
    path = checkpoint_factory(depth=1, hidden=64, dimensions=32, context=64, token_width=16)
    model = uform.Model.load_ram(path)
    b1 = model.text_encode([b"abc"], uform.Arena(), outputs=uform.Outputs.TOKENS,
                           outputs_scalar=uform.Scalar.B1).tokens
    with pytest.raises(uform.InvalidArgumentError, match="queries: B1"):
        uform.late_interaction_scores(b1, GOOD)
    with pytest.raises(uform.InvalidArgumentError, match="executor"):
        uform.late_interaction_scores(GOOD, GOOD, executor=3)   # type: ignore[arg-type]
    with pytest.raises(TypeError):
        uform.late_interaction_scores(queries=GOOD, documents=GOOD)   # positional only


def test_exported():
    assert "late_interaction_scores" in uform.__all__
    assert uform.late_interaction_scores is not None
