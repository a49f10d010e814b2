"""Checks the training reference (tests/reference/training.py) on its own, without the C library.

The reference is the oracle the trainer will be compared against, so each part is checked
against something written differently from docs/training.md's words: the RNG against a
vectorised numpy uint64 version and the published splitmix64 outputs; masking against an
independent walk over precomputed random arrays and against its expected statistics; the
contrastive forms against dense-matrix formulations and the published InfoNCE (SimCLR),
CLIP and SigLIP losses; gradients by finite differences; the optimizer helpers against torch.
"""

from __future__ import annotations

import math
import os
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from reference import ReferenceModel, write_random_checkpoint  # noqa: E402
from reference.model import MASK  # noqa: E402
from reference.training import (  # noqa: E402
    clip_,
    contrastive_loss,
    corrupt_texts,
    decays,
    embeddings,
    learning_rate_at,
    mask_text,
    mask_thresholds,
    masked_text_loss,
    param_groups,
    random_bits,
    relations,
    uniform,
)

U64 = np.uint64


# ----------------------------------------------------------------------------- 1. random numbers

def np_mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 arrays (wrapping multiplication)."""
    x = x.astype(U64)
    with np.errstate(over="ignore"):
        x = x ^ (x >> U64(30))
        x = x * U64(0xBF58476D1CE4E5B9)
        x = x ^ (x >> U64(27))
        x = x * U64(0x94D049BB133111EB)
        x = x ^ (x >> U64(31))
    return x


def np_bits(seed, step, item, position, stream) -> np.ndarray:
    """bits(...) for broadcastable uint64 arrays, by folding the keys left to right."""
    state = np_mix(np.asarray(seed, dtype=U64))
    for key in (step, item, position, stream):
        state = np_mix(state ^ np.asarray(key, dtype=U64))
    return state


def np_uniform(*keys) -> np.ndarray:
    return (np_bits(*keys) >> U64(40)).astype(np.float64) / float(1 << 24)


def test_mix_is_splitmix64() -> None:
    # splitmix64 with state 0: outputs are mix(k * golden gamma), k = 1, 2, 3 (Vigna's
    # reference generator; the first value is the widely quoted 0xe220a8397b1dcdaf).
    gamma = 0x9E3779B97F4A7C15
    states = np.array([(k * gamma) % 2 ** 64 for k in (1, 2, 3)], dtype=U64)
    outputs = [int(v) for v in np_mix(states)]
    assert outputs[0] == 0xE220A8397B1DCDAF
    # bits() with every key 0 but the seed is mix^5 of the seed: the chain has no shortcuts.
    from reference.training import _mix
    x = 12345
    for _ in range(5):
        x = _mix(x)
    assert random_bits(12345, 0, 0, 0, 0) == x
    assert [_mix(int(s)) for s in states] == outputs


def test_random_bits_match_numpy() -> None:
    rng = np.random.default_rng(7)
    top = 2 ** 64 - 1
    keys = rng.integers(0, 2 ** 63, size=(2000, 5), dtype=np.int64).astype(U64) * U64(2)
    keys[:, :] += rng.integers(0, 2, size=(2000, 5), dtype=np.int64).astype(U64)
    keys[:20] = U64(top)                                   # extremes
    keys[20:40] = U64(0)
    keys[40:200] = rng.integers(0, 300, size=(160, 5)).astype(U64)     # small, typical keys
    expected_bits = np_bits(*keys.T)
    expected_uniform = np_uniform(*keys.T)
    for row, bits, u in zip(keys, expected_bits, expected_uniform):
        args = [int(v) for v in row]
        assert random_bits(*args) == int(bits)
        value = uniform(*args)
        assert value == float(u)
        assert 0.0 <= value < 1.0
        assert value * 2 ** 24 == int(value * 2 ** 24)           # a multiple of 2^-24
        assert float(np.float32(value)) == value                 # exact in float32
    # Python ints are taken modulo 2^64, as a C cast to uint64_t would.
    assert random_bits(-1, 2 ** 64 + 3, 5, 6, 7) == random_bits(top, 3, 5, 6, 7)


def test_uniform_is_uniform() -> None:
    values = np.array([uniform(3, 1, item, position, 1)
                       for item in range(40) for position in range(500)])
    assert abs(values.mean() - 0.5) < 0.01
    histogram, _ = np.histogram(values, bins=10, range=(0.0, 1.0))
    assert np.all(np.abs(histogram / len(values) - 0.1) < 0.01)


# ----------------------------------------------------------------------------- 2. masked text

def walk_mask(original, seed, step, item, p=0.15, m=3.0, r=0.8, q=0.1):
    """A second masking implementation: every random number drawn up front with numpy,
    spans found by searching the continuation tests, thresholds from numpy float32."""
    n = len(original)
    p32, m32, r32, q32 = (np.float64(np.float32(v)) for v in (p, m, r, q))
    positions = np.arange(n, dtype=U64)
    starts = np_uniform(seed, step, item, positions, 1)
    # continuation test k of a span starting at t: stream 2 + k
    continuation = np_uniform(seed, step, item, positions[:, None],
                              U64(2) + np.arange(n + 1, dtype=U64)[None, :])
    selected = np.zeros(n, dtype=bool)
    covered_until = 0
    for t in range(n):
        if t < covered_until or not starts[t] < p32 / (m32 * (1.0 - p32) + p32):
            continue
        ks = np.arange(1, n - t)                       # tests while t + k < n
        stop = continuation[t, ks] < 1.0 / m32
        length = int(ks[np.argmax(stop)]) if stop.any() else n - t
        selected[t:t + length] = True
        covered_until = t + length
    action = np_uniform(seed, step, item, positions, 1000)
    random_byte = (np_bits(seed, step, item, positions, 1001) >> U64(56)).astype(np.int64)
    ids = np.array(original, dtype=np.int64)
    ids = np.where(selected & (action < r32), MASK,
                   np.where(selected & (action >= r32) & (action < r32 + q32), random_byte, ids))
    return ids.tolist(), selected.tolist()


@pytest.mark.parametrize("config", [
    dict(),
    dict(p=0.5, m=1.0),
    dict(p=0.3, m=7.5, r=0.5, q=0.25),
    dict(p=1.0, m=2.0, r=0.0, q=1.0),
    dict(p=1.0, m=1.0, r=1.0, q=0.0),
])
def test_mask_text_matches_independent_walk(config) -> None:
    keywords = dict(token_mask_probability=config.get("p", 0.15),
                    token_mean_span=config.get("m", 3.0),
                    replace_fraction=config.get("r", 0.8),
                    random_fraction=config.get("q", 0.1))
    rng = np.random.default_rng(11)
    for item in range(30):
        n = int(rng.integers(0, 90))
        original = rng.integers(0, 256, size=n).tolist()
        ids, selected = mask_text(bytes(original), seed=99, step=4, item=item, **keywords)
        assert (ids, selected) == walk_mask(original, 99, 4, item, **config)
        assert len(ids) == len(selected) == n
        assert all(0 <= v <= MASK for v in ids)
        assert all(v == o for v, o, s in zip(ids, original, selected) if not s)


def test_spans_are_contiguous_within_the_item() -> None:
    start, stop, _, _ = mask_thresholds()
    reached_end = False
    for item in range(200):
        n = 1 + item % 37
        _, selected = mask_text(bytes(n), seed=5, step=2, item=item)
        assert len(selected) == n
        t = 0
        while t < n:
            if not selected[t]:
                # every position left out was tested as a span start and failed
                assert uniform(5, 2, item, t, 1) >= start
                t += 1
                continue
            # a run of selected positions is one or more whole spans: decompose it
            assert uniform(5, 2, item, t, 1) < start
            length = 1
            while t + length < n and uniform(5, 2, item, t, 2 + length) >= stop:
                length += 1
            assert all(selected[t:t + length])
            reached_end |= t + length == n
            t += length
    assert reached_end                               # some span ran to the item's end


def test_mask_statistics() -> None:
    p, m, r, q = 0.15, 3.0, 0.8, 0.1
    n, items = 500, 200
    original = bytes([ord("a")]) * n
    selected_count = mask_count = random_count = runs = 0
    for item in range(items):
        ids, selected = mask_text(original, seed=1, step=7, item=item)
        selected_count += sum(selected)
        mask_count += sum(v == MASK for v in ids)
        random_count += sum(v not in (MASK, ord("a")) for v in ids)
        runs += sum(1 for t in range(n) if selected[t] and (t == 0 or not selected[t - 1]))
    total = n * items
    # Renewal argument: an unselected position starts a span with probability
    # s = p / (m (1 - p) + p) and a span covers m positions on average, so the covered
    # fraction is s m / (1 - s + s m) = p.
    coverage = p
    assert abs(selected_count / total - coverage) < 0.05 * coverage
    assert abs(mask_count / selected_count - r) < 0.015
    assert abs(random_count / selected_count - q * 255 / 256) < 0.01
    # merged runs are a bit longer than spans; the mean span is m
    assert m <= selected_count / runs < m * 1.25


def test_mask_with_unit_span_is_bernoulli() -> None:
    # m = 1: every span has length 1, so each position is selected with probability p.
    count = 0
    for item in range(100):
        _, selected = mask_text(bytes(400), seed=2, step=1, item=item,
                                token_mask_probability=0.3, token_mean_span=1.0)
        count += sum(selected)
    assert abs(count / 40_000 - 0.3) < 0.01


def test_mask_is_deterministic_and_keyed() -> None:
    text = bytes(range(256)) * 2
    first = mask_text(text, seed=1, step=2, item=3)
    assert first == mask_text(text, seed=1, step=2, item=3)
    for changed in (dict(seed=9, step=2, item=3), dict(seed=1, step=3, item=3),
                    dict(seed=1, step=2, item=4)):
        assert mask_text(text, **changed) != first
    # the mask does not depend on the content, only on the length and the keys
    other = mask_text(bytes(512), seed=1, step=2, item=3)
    assert other[1] == first[1]
    assert mask_text(b"", seed=1, step=2, item=3) == ([], [])


def test_mask_thresholds_use_float32_fields() -> None:
    start, stop, replace, random = mask_thresholds(0.15, 3.0, 0.8, 0.1)
    p32, r32, q32 = (float(np.float32(v)) for v in (0.15, 0.8, 0.1))
    assert start == p32 / (3.0 * (1.0 - p32) + p32) and start != 0.15 / (3.0 * 0.85 + 0.15)
    assert stop == 1.0 / 3.0
    assert replace == r32 and random == r32 + q32
    with pytest.raises(ValueError):
        mask_thresholds(token_mean_span=0.5)


# ----------------------------------------------------------------------------- 3. contrastive

def csr(n, edges):
    """(offsets, ids, weights) from {anchor: [(candidate, weight), ...]}."""
    offsets, ids, weights = [0], [], []
    for i in range(n):
        for j, w in edges.get(i, []):
            ids.append(j)
            weights.append(w)
        offsets.append(len(ids))
    return offsets, ids, weights


def dense_loss(e, tau, b, *, groups=None, bags=None, attract=None, repel=None, ignore=None,
               negatives="AMBIENT", ambient=1.0, form="BALANCED", widths=None):
    """The contrastive term with dense relation matrices, written from the docs' words:
    lowest precedence first, each stronger relation overwriting."""
    n, d = e.shape
    kind = np.full((n, n), 2 if negatives == "AMBIENT" else 0)      # 0 none, 1 pos, 2 neg
    weight = np.full((n, n), float(np.float32(ambient)))
    for edges, code in ((repel, 2), (attract, 1)):
        if code == 1 and bags is not None:
            ids = np.array([-1 if v is None else v for v in bags])
            same = (ids[:, None] == ids[None, :]) & (ids[:, None] >= 0)
            kind[same], weight[same] = 1, 1.0
        if edges is not None:
            offsets, ids_, ws = edges
            for i in range(n):
                for k in range(offsets[i], offsets[i + 1]):
                    kind[i, ids_[k]] = code
                    weight[i, ids_[k]] = float(np.float32(ws[k]))
    if ignore is not None:
        offsets, ids_, _ = ignore
        for i in range(n):
            kind[i, ids_[offsets[i]:offsets[i + 1]]] = 0
    np.fill_diagonal(kind, 0)
    positive = torch.from_numpy(kind == 1)
    negative = torch.from_numpy((kind == 2) & (weight > 0))
    w = torch.from_numpy(weight)
    g = torch.zeros(n, dtype=torch.long) if groups is None else torch.tensor(groups)
    losses = []
    for width in (widths or [d]):
        x = e[:, :width] / e[:, :width].norm(dim=1, keepdim=True)
        s = x @ x.T * torch.exp(tau[g])[:, None]
        if form == "SIGMOID":
            s = s + b[g][:, None]
            total = (w * positive * F.softplus(-s)).sum() + (w * negative * F.softplus(s)).sum()
            losses.append(total / n)
            continue
        a = torch.where(positive, w, torch.zeros_like(w))
        anchors = a.sum(1) > 0
        target = a / a.sum(1, keepdim=True).clamp(min=1e-300)
        log_w = torch.log(torch.where(negative, w, torch.ones_like(w)))
        neg_terms = torch.where(negative, s + log_w, torch.full_like(s, -math.inf))
        if form == "BALANCED":
            log_den = torch.logsumexp(torch.where(positive, s, neg_terms), 1, keepdim=True)
        else:
            log_den = torch.logaddexp(s, torch.logsumexp(neg_terms, 1, keepdim=True))
        per_pair = torch.where(positive, target * (s - log_den), torch.zeros_like(s))
        per_anchor = -per_pair.sum(1)
        losses.append(per_anchor[anchors].sum() / max(int(anchors.sum()), 1))
    return torch.stack(losses).mean()


def random_case(rng, n=9):
    def edges(density, zero_fraction=0.2):
        out = {}
        for i in range(n):
            js = [j for j in range(n) if rng.random() < density]
            out[i] = [(j, 0.0 if rng.random() < zero_fraction else float(rng.uniform(0.1, 3)))
                      for j in js]
        return csr(n, out)
    bags = [None if rng.random() < 0.3 else int(rng.integers(0, 3)) for _ in range(n)]
    return dict(bags=bags, attract=edges(0.2), repel=edges(0.3), ignore=edges(0.15),
                groups=rng.integers(0, 2, size=n).tolist())


@pytest.mark.parametrize("form", ["BALANCED", "RANKED", "SIGMOID"])
@pytest.mark.parametrize("negatives", ["AMBIENT", "NAMED"])
def test_contrastive_matches_dense_formulation(form, negatives) -> None:
    rng = np.random.default_rng(len(form) * 10 + len(negatives))
    for trial in range(6):
        n, d = 9, 8
        e = torch.from_numpy(rng.standard_normal((n, d)))
        tau = torch.tensor([math.log(10.0), math.log(3.0)], dtype=torch.float64)
        b = torch.tensor([-2.0, 0.5], dtype=torch.float64)
        case = random_case(rng, n)
        ambient = [1.0, 0.5, 0.0][trial % 3]
        widths = [[8], [3, 8], [2, 5, 8]][trial % 3]
        ours = contrastive_loss(e, log_inverse_temperature=tau, bias=b, negatives=negatives,
                                ambient_repulsion_weight=ambient, pair_loss=form,
                                widths=widths, **case)
        theirs = dense_loss(e, tau, b, negatives=negatives, ambient=ambient, form=form,
                            widths=widths, **case)
        assert torch.allclose(ours, theirs, rtol=1e-12, atol=1e-12), (trial, ours, theirs)


def paired_batch(batch=6, d=5, seed=3):
    rng = np.random.default_rng(seed)
    images = torch.from_numpy(rng.standard_normal((batch, d)))
    texts = images + 0.7 * torch.from_numpy(rng.standard_normal((batch, d)))
    images, texts = F.normalize(images, dim=1), F.normalize(texts, dim=1)
    e = torch.cat([images, texts])
    bags = list(range(batch)) * 2                      # item i and i + batch share a bag
    return images, texts, e, bags


def test_balanced_ambient_is_nt_xent() -> None:
    # One positive per anchor, every other item a negative: SimCLR's NT-Xent, i.e. softmax
    # cross-entropy over the score matrix with the diagonal removed.
    images, texts, e, bags = paired_batch()
    batch = images.shape[0]
    tau = torch.tensor([math.log(7.0)], dtype=torch.float64)
    ours = contrastive_loss(e, log_inverse_temperature=tau, bias=torch.zeros(1, dtype=e.dtype),
                            bags=bags, negatives="AMBIENT", pair_loss="BALANCED")
    logits = e @ e.T * 7.0
    logits.fill_diagonal_(-math.inf)
    targets = torch.cat([torch.arange(batch) + batch, torch.arange(batch)])
    assert torch.allclose(ours, F.cross_entropy(logits, targets), rtol=1e-13, atol=0)
    # With a single positive, RANKED and BALANCED agree.
    ranked = contrastive_loss(e, log_inverse_temperature=tau, bias=torch.zeros(1, dtype=e.dtype),
                              bags=bags, negatives="AMBIENT", pair_loss="RANKED")
    assert torch.allclose(ours, ranked, rtol=1e-13, atol=0)


def cross_modal_repel(batch):
    """Repel edges from every image to every other text and back: CLIP's negatives."""
    edges = {}
    for i in range(batch):
        edges[i] = [(batch + j, 1.0) for j in range(batch) if j != i]
        edges[batch + i] = [(j, 1.0) for j in range(batch) if j != i]
    return csr(2 * batch, edges)


def test_balanced_named_cross_modal_is_clip() -> None:
    images, texts, e, bags = paired_batch()
    batch = images.shape[0]
    tau = torch.tensor([math.log(5.0)], dtype=torch.float64)
    ours = contrastive_loss(e, log_inverse_temperature=tau, bias=torch.zeros(1, dtype=e.dtype),
                            bags=bags, repel=cross_modal_repel(batch), negatives="NAMED")
    logits = images @ texts.T * 5.0
    labels = torch.arange(batch)
    clip = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2
    assert torch.allclose(ours, clip, rtol=1e-13, atol=0)


def test_sigmoid_named_cross_modal_is_siglip() -> None:
    images, texts, e, bags = paired_batch(batch=5)
    batch = images.shape[0]
    t, b = 10.0, -10.0
    ours = contrastive_loss(e, log_inverse_temperature=torch.tensor([math.log(t)],
                                                                    dtype=torch.float64),
                            bias=torch.tensor([b], dtype=torch.float64), bags=bags,
                            repel=cross_modal_repel(batch), negatives="NAMED",
                            pair_loss="SIGMOID")
    # SigLIP (Zhai et al. 2023): -1/|B| sum_i sum_j log sigmoid(z_ij (t x_i.y_j + b))
    z = 2 * torch.eye(batch, dtype=torch.float64) - 1
    siglip = -F.logsigmoid(z * (t * images @ texts.T + b)).sum() / batch
    assert torch.allclose(ours, siglip, rtol=1e-13, atol=0)


def test_precedence() -> None:
    n = 6
    bags = [0, 0, 0, 1, 1, None]
    attract = csr(n, {0: [(1, 2.5), (3, 0.5)]})
    repel = csr(n, {0: [(1, 4.0), (2, 4.0), (4, 3.0)], 5: [(0, 0.25)]})
    ignore = csr(n, {0: [(2, 1.0)], 3: [(4, 1.0)]})
    table = relations(n, bags=bags, attract=attract, repel=repel, ignore=ignore,
                      negatives="AMBIENT", ambient_repulsion_weight=0.75)
    positives, negatives = table[0]
    assert positives == {1: 2.5, 3: 0.5}          # attract over bag and over repel
    assert negatives == {4: 3.0, 5: 0.75}         # 2 ignored despite bag and repel
    assert table[1] == ({0: 1.0, 2: 1.0}, {3: 0.75, 4: 0.75, 5: 0.75})   # directed edges
    assert table[3] == ({}, {0: 0.75, 1: 0.75, 2: 0.75, 5: 0.75})        # ignore over bag
    assert table[5] == ({}, {0: 0.25, 1: 0.75, 2: 0.75, 3: 0.75, 4: 0.75})
    named = relations(n, bags=bags, repel=repel, negatives="NAMED")
    assert named[3] == ({4: 1.0}, {})
    assert named[0] == ({1: 1.0, 2: 1.0}, {4: 3.0})   # bag over repel
    # self edges never make a pair
    assert relations(2, attract=csr(2, {0: [(0, 1.0)]}), negatives="NAMED")[0] == ({}, {})


def test_ignore_overrides_bag_in_the_loss() -> None:
    rng = np.random.default_rng(4)
    e = torch.from_numpy(rng.standard_normal((4, 6)))
    tau = torch.tensor([1.5], dtype=torch.float64)
    zero = torch.zeros(1, dtype=torch.float64)
    # items 0 and 1 share a bag but 0 -> 1 and 1 -> 0 are ignored: no pair between them
    ignored = contrastive_loss(e, log_inverse_temperature=tau, bias=zero, bags=[0, 0, 1, 1],
                               ignore=csr(4, {0: [(1, 1.0)], 1: [(0, 1.0)]}))
    # the same relations spelled without bags: only 2 <-> 3 positive, 0 and 1 no pair
    spelled = contrastive_loss(e, log_inverse_temperature=tau, bias=zero,
                               attract=csr(4, {2: [(3, 1.0)], 3: [(2, 1.0)]}),
                               ignore=csr(4, {0: [(1, 1.0)], 1: [(0, 1.0)]}))
    assert torch.equal(ignored, spelled)
    x = F.normalize(e, dim=1)
    s = x @ x.T * math.exp(1.5)
    expected = 0.5 * sum(-(s[i, j] - torch.logsumexp(s[i, [k for k in range(4) if k != i]], 0))
                         for i, j in ((2, 3), (3, 2)))
    assert torch.allclose(ignored, expected, rtol=1e-13, atol=0)


def test_named_without_repel_edges() -> None:
    rng = np.random.default_rng(5)
    e = torch.from_numpy(rng.standard_normal((6, 4)))
    tau = torch.tensor([2.0], dtype=torch.float64)
    zero = torch.zeros(1, dtype=torch.float64)
    pairs = [0, 0, 1, 1, 2, 2]
    triples = [0, 0, 0, 1, 1, 1]
    # nothing to push away: one positive each -> BALANCED 0; RANKED 0 for any positives
    assert contrastive_loss(e, log_inverse_temperature=tau, bias=zero, bags=pairs,
                            negatives="NAMED").item() == 0.0
    for bags in (pairs, triples):
        assert contrastive_loss(e, log_inverse_temperature=tau, bias=zero, bags=bags,
                                negatives="NAMED", pair_loss="RANKED").item() == 0.0
    # BALANCED with two positives: cross-entropy of the uniform target among them
    balanced = contrastive_loss(e, log_inverse_temperature=tau, bias=zero, bags=triples,
                                negatives="NAMED")
    x = F.normalize(e, dim=1)
    s = x @ x.T * math.exp(2.0)
    expected = torch.stack([
        -0.5 * torch.log_softmax(s[i, [j for j in range(6) if j != i and j // 3 == i // 3]],
                                 0).sum() for i in range(6)]).mean()
    assert torch.allclose(balanced, expected, rtol=1e-13, atol=0)
    # no anchor with a positive: 0
    assert contrastive_loss(e, log_inverse_temperature=tau, bias=zero).item() == 0.0


def test_contrastive_rejects_bad_relations() -> None:
    e = torch.zeros(3, 2, dtype=torch.float64)
    tau = bias = torch.zeros(1, dtype=torch.float64)
    for bad in (csr(3, {0: [(1, -1.0)]}), csr(3, {0: [(1, math.inf)]}),
                csr(3, {0: [(1, 1.0), (1, 2.0)]}), csr(3, {0: [(3, 1.0)]})):
        with pytest.raises(ValueError):
            contrastive_loss(e, log_inverse_temperature=tau, bias=bias, attract=bad)
    with pytest.raises(ValueError):
        contrastive_loss(e, log_inverse_temperature=tau, bias=bias, groups=[0, 1, 0])
    with pytest.raises(ValueError):
        contrastive_loss(e, log_inverse_temperature=tau, bias=bias, widths=[3])


@pytest.mark.parametrize("form", ["BALANCED", "RANKED", "SIGMOID"])
def test_contrastive_gradients(form) -> None:
    rng = np.random.default_rng(6)
    n = 6
    case = random_case(rng, n)
    e = torch.from_numpy(rng.standard_normal((n, 4))).requires_grad_()
    tau = torch.tensor([0.8, 0.2], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([-1.0, 0.3], dtype=torch.float64, requires_grad=True)

    def loss(e, tau, b):
        return contrastive_loss(e, log_inverse_temperature=tau, bias=b, pair_loss=form,
                                widths=[2, 4], ambient_repulsion_weight=0.5, **case)

    assert loss(e, tau, b).item() > 0
    assert torch.autograd.gradcheck(loss, (e, tau, b), eps=1e-6, atol=1e-7, rtol=1e-6)


# ----------------------------------------------------------------------------- model-level

TEXTS = [b"the quick brown fox jumps over the lazy dog", b"hello, world",
         "na\u00efve caf\u00e9 text".encode(), b"a" * 40, b""]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> ReferenceModel:
    path = tmp_path_factory.mktemp("training") / "tiny.safetensors"
    write_random_checkpoint(str(path), depth=1, hidden=64, dimensions=8, context=24,
                            byte_head=True, seed=3)
    return ReferenceModel.load(str(path))


def test_masked_text_loss_matches_byte_logits(tiny_model) -> None:
    # Selection without corruption: the loss is the byte head's cross-entropy on the
    # uncorrupted text at the selected positions (ReferenceModel.byte_logits).
    keep = dict(token_mask_probability=0.4, replace_fraction=0.0, random_fraction=0.0)
    loss = masked_text_loss(tiny_model, TEXTS, seed=8, step=3, first_item=5, **keep)
    parts = []
    for index, text in enumerate(TEXTS):
        data = text[:tiny_model.context]
        _, selected = mask_text(data, seed=8, step=3, item=5 + index, **keep)
        if any(selected):
            logits = tiny_model.byte_logits(text)[torch.tensor(selected)]
            parts.append(F.cross_entropy(logits, torch.tensor(list(data))[torch.tensor(selected)],
                                         reduction="none"))
    expected = torch.cat(parts).mean()
    assert torch.allclose(loss, expected, rtol=1e-12, atol=0)
    nothing = masked_text_loss(tiny_model, TEXTS, seed=8, step=3, token_mask_probability=0.0)
    assert nothing.item() == 0.0


def test_corruption_cuts_at_context_and_keys_items(tiny_model) -> None:
    corrupted = corrupt_texts(tiny_model, TEXTS, seed=1, step=1, first_item=10)
    for index, (text, (original, ids, selected)) in enumerate(zip(TEXTS, corrupted)):
        assert original == list(text[:tiny_model.context])
        assert (ids, selected) == mask_text(bytes(original), seed=1, step=1, item=10 + index)


def test_embeddings_match_inference(tiny_model) -> None:
    ids = [list(text[:tiny_model.context]) for text in TEXTS]
    expected, _ = tiny_model.text_encode(TEXTS)
    assert torch.allclose(embeddings(tiny_model, ids), expected, rtol=0, atol=1e-14)


def test_sgd_lowers_masked_and_joint_loss(tiny_model) -> None:
    model = ReferenceModel({name: p.detach().numpy().copy()
                            for name, p in tiny_model.named_parameters()}, tiny_model.config)
    texts = TEXTS[:4]
    masking = dict(token_mask_probability=0.5)
    tau = torch.tensor([math.log(10.0)], dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(1, dtype=torch.float64)
    bags = [0, 0, 1, 1]

    def joint() -> tuple[torch.Tensor, torch.Tensor]:
        masked = masked_text_loss(model, texts, seed=4, step=1, **masking)
        corrupted = [ids for _, ids, _ in corrupt_texts(model, texts, seed=4, step=1,
                                                         **masking)]
        contrastive = contrastive_loss(embeddings(model, corrupted),
                                       log_inverse_temperature=tau, bias=bias, bags=bags)
        return masked, contrastive

    parameters = list(model.parameters()) + [tau]
    first = joint()
    for _ in range(6):
        masked, contrastive = joint()
        for p in parameters:
            p.grad = None
        (masked + contrastive).backward()
        clip_([p.grad for p in parameters], 1.0)
        with torch.no_grad():
            for p in parameters:
                p -= 0.5 * p.grad
    last = joint()
    assert last[0].item() < 0.9 * first[0].item()
    assert last[1].item() < first[1].item()


# ----------------------------------------------------------------------------- 4. optimizer

def test_learning_rate_schedule() -> None:
    schedule = dict(learning_rate=1e-3, min_learning_rate=1e-4, warmup_steps=10, steps=110)
    lr, low = float(np.float32(1e-3)), float(np.float32(1e-4))
    rates = [learning_rate_at(s, **schedule) for s in range(1, 131)]
    assert rates[0] == lr / 10
    assert rates[9] == lr                                  # end of warmup
    assert math.isclose(rates[59], (lr + low) / 2, rel_tol=1e-12)   # half-way down
    assert rates[109] == low and rates[129] == low         # at and after `steps`
    assert all(a < b for a, b in zip(rates[:9], rates[1:10]))
    assert all(a > b for a, b in zip(rates[9:109], rates[10:110]))
    assert learning_rate_at(3, learning_rate=1.0, min_learning_rate=0.5, warmup_steps=5,
                            steps=5) == 0.6
    assert learning_rate_at(6, learning_rate=1.0, min_learning_rate=0.5, warmup_steps=5,
                            steps=5) == 0.5


def test_decays() -> None:
    assert decays("blocks.0.mlp.up.weight", (256, 64))
    assert decays("heads.embedding.weight", (8, 64))
    assert not decays("text.bytes", (257, 64))
    assert not decays("blocks.0.mlp.up.bias", (256,))
    assert not decays("contrastive.log_inverse_temperature", (1,))
    assert not decays("norm.weight", (64,))


def test_clip_matches_torch() -> None:
    rng = np.random.default_rng(9)
    for scale in (0.01, 10.0):
        grads = [torch.from_numpy(rng.standard_normal(shape).astype(np.float32) * scale)
                 for shape in ((3, 4), (5,), (2, 2, 2))]
        ours = [g.clone() for g in grads]
        params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        total_torch = torch.nn.utils.clip_grad_norm_(params, 1.0)
        total_ours = clip_(ours, 1.0)
        assert torch.equal(total_ours, total_torch)
        for p, g in zip(params, ours):
            assert torch.equal(p.grad, g)


def test_param_groups_drive_adamw(tiny_model) -> None:
    named = [(name, torch.nn.Parameter(p.detach().clone()))
             for name, p in tiny_model.named_parameters()]
    groups = param_groups(named)
    by_name = {name: group["weight_decay"] for group in groups for name in group["names"]}
    assert by_name["text.bytes"] == 0.0 and by_name["blocks.0.attention.qkv.weight"] == 0.01
    assert by_name["heads.bytes.bias"] == 0.0
    schedule = dict(learning_rate=1e-3, min_learning_rate=1e-4, warmup_steps=2, steps=4)
    optimizer = torch.optim.AdamW(groups, lr=1.0, betas=(0.9, 0.999), eps=1e-8)
    parameters = dict(named)
    before = parameters["blocks.0.mlp.up.weight"].detach().clone()
    for group in optimizer.param_groups:
        group["lr"] = learning_rate_at(1, **schedule)
    for p in parameters.values():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    # a zero gradient moves only decayed tensors, by exactly lr * decay
    after = parameters["blocks.0.mlp.up.weight"].detach()
    assert torch.allclose(after, before * (1 - learning_rate_at(1, **schedule) * 0.01),
                          rtol=1e-15, atol=0)
    assert torch.equal(parameters["text.bytes"].detach(), tiny_model.weight("text.bytes"))
