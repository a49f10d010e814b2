"""Checks the late-interaction and choices reference (tests/reference/late_choices.py) on its
own, without the C library.

Each part is checked against something written differently from the reference: MaxSim
against explicit loops; the late-interaction term against formulas worked out by hand on
two-dimensional token vectors whose dot products are exact; who is a query anchor and who a
document, under every side and budget, against walks done by hand in the comments; the
choice probabilities against a hand computation on a model built so that its MASK state is
known in closed form; every gradient against float64 finite differences (gradcheck).
"""

from __future__ import annotations

import math
import os
import sys

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from reference import ReferenceModel, write_random_checkpoint  # noqa: E402
from reference import training  # noqa: E402
from reference.late_choices import (  # noqa: E402
    choice_ids,
    choice_probabilities,
    choices_loss,
    item_rows,
    late_interaction_loss,
    late_interaction_pairs,
    late_interaction_plan,
    late_pair_form,
    maxsim,
    split_by_tokens,
    step_inputs,
    step_losses,
    step_token_vectors,
)
from reference.model import MASK, NORM_EPS  # noqa: E402

Q, D, QD, NONE = "QUERY", "DOCUMENT", "QUERY_AND_DOCUMENT", "NONE"
F64 = torch.float64


def softplus(x: float) -> float:
    return math.log1p(math.exp(x))


def csr(n, edges):
    """(offsets, ids, weights) from {anchor: [(candidate, weight), ...]}."""
    offsets, ids, weights = [0], [], []
    for i in range(n):
        for j, w in edges.get(i, []):
            ids.append(j)
            weights.append(w)
        offsets.append(len(ids))
    return offsets, ids, weights


def vectors(*rows):
    return torch.tensor(rows, dtype=F64)


# ----------------------------------------------------------------------------- MaxSim

def test_maxsim_is_the_mean_of_row_maxima() -> None:
    rng = np.random.default_rng(1)
    for a, b, w in ((1, 1, 3), (4, 7, 5), (9, 2, 8)):
        q = rng.standard_normal((a, w))
        d = rng.standard_normal((b, w))
        expected = 0.0
        for t in range(a):
            best = -math.inf
            for u in range(b):
                best = max(best, sum(q[t, k] * d[u, k] for k in range(w)))
            expected += best
        expected /= a
        ours = maxsim(torch.from_numpy(q), torch.from_numpy(d))
        assert ours.item() == pytest.approx(expected, rel=1e-14, abs=1e-14)


def test_maxsim_gradient_goes_to_the_first_maximal_row() -> None:
    q = vectors([1.0, 0.0]).requires_grad_()
    d = vectors([0.0, 1.0], [0.5, 0.5], [0.5, -0.5], [0.5, 0.0]).requires_grad_()
    maxsim(q, d).backward()
    # rows 1, 2 and 3 tie at 0.5: only row 1 receives d m / d d_u = q
    assert d.grad.tolist() == [[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, 0.0]]
    assert q.grad.tolist() == [[0.5, 0.5]]


# ----------------------------------------------------------------------------- who takes part

def test_every_item_is_query_and_document_by_default() -> None:
    plan = late_interaction_plan([3, 0, 2])
    assert plan.queries == {0: 3, 2: 2}           # the empty item 1 takes no part
    assert plan.documents == [0, 2]


def test_sides_and_query_span() -> None:
    rows = [4, 3, 5, 2, 1, 0]
    sides = [Q, D, QD, NONE, QD, QD]
    plan = late_interaction_plan(rows, sides=sides, max_query_span=2)
    assert plan.queries == {0: 2, 2: 2, 4: 1}     # min(n_i, 2); 5 has no rows
    assert plan.documents == [1, 2, 4]            # every row of a document
    plan = late_interaction_plan(rows, sides=sides)
    assert plan.queries == {0: 4, 2: 5, 4: 1}
    # sides as uform.LateInteractionSide values (ints) name the same thing
    assert late_interaction_plan(rows, sides=[1, 2, 3, 0, 3, 3], max_query_span=2) == \
        late_interaction_plan(rows, sides=sides, max_query_span=2)


def test_query_token_budget_skips_and_later_items_fit() -> None:
    rows = [4, 5, 2, 3, 1]
    # budget 7: item 0 takes 4 (3 left); item 1 needs 5, skipped; item 2 takes 2 (1 left);
    # item 3 needs 3, skipped; item 4 takes 1 (0 left)
    plan = late_interaction_plan(rows, max_query_tokens_per_device=7)
    assert plan.queries == {0: 4, 2: 2, 4: 1}
    assert plan.documents == [0, 1, 2, 3, 4]       # the document side is not limited
    # with span 2 the queries cost 2, 2, 2, 2, 1: budget 5 admits 0 and 1 (1 left), then 4
    plan = late_interaction_plan(rows, max_query_span=2, max_query_tokens_per_device=5)
    assert plan.queries == {0: 2, 1: 2, 4: 1}


def test_document_budgets() -> None:
    rows = [4, 5, 2, 3, 1]
    assert late_interaction_plan(rows, max_documents_per_device=2).documents == [0, 1]
    sides = [Q, D, NONE, D, D]
    assert late_interaction_plan(rows, sides=sides,
                                 max_documents_per_device=2).documents == [1, 3]
    # 8 document tokens: 0 takes 4 (4 left); 1 needs 5, skipped; 2 takes 2 (2 left);
    # 3 needs 3, skipped; 4 takes 1
    plan = late_interaction_plan(rows, max_document_tokens_per_device=8)
    assert plan.documents == [0, 2, 4]
    assert plan.queries == {0: 4, 1: 5, 2: 2, 3: 3, 4: 1}
    # both limits: the count stops after 0 and 2
    assert late_interaction_plan(rows, max_document_tokens_per_device=8,
                                 max_documents_per_device=2).documents == [0, 2]
    # a skipped document leaves the count alone: 1 does not fit in 3 tokens, 2 and 4 do
    assert late_interaction_plan([3, 5, 2, 1, 1], sides=[QD, D, D, Q, D],
                                 max_document_tokens_per_device=6,
                                 max_documents_per_device=3).documents == [0, 2, 4]


def test_budgets_are_per_device() -> None:
    rows = [4, 5, 2, 3, 1]
    # one device, 5 query tokens: 0 takes 4 (1 left); 1, 2, 3 do not fit; 4 takes 1
    assert late_interaction_plan(rows, max_query_tokens_per_device=5).queries == {0: 4, 4: 1}
    # devices [0, 2) and [2, 5), 5 each: device 0 admits 0 (1 left), skips 1; device 1
    # admits 2 (3 left) and 3 (0 left), skips 4
    plan = late_interaction_plan(rows, devices=[(0, 2), (2, 5)], max_query_tokens_per_device=5,
                                 max_documents_per_device=1)
    assert plan.queries == {0: 4, 2: 2, 3: 3}
    assert plan.documents == [0, 2]               # one document per device
    plan = late_interaction_plan(rows, devices=[(0, 2), (2, 5)],
                                 max_document_tokens_per_device=5)
    assert plan.documents == [0, 2, 3]            # 4 | 5 skipped; 2 + 3, then 1 > 0 left
    with pytest.raises(ValueError):
        late_interaction_plan(rows, devices=[(0, 2), (3, 5)])


def test_empty_items_use_no_budget() -> None:
    plan = late_interaction_plan([0, 3, 0, 2], max_query_tokens_per_device=3,
                                 max_documents_per_device=1)
    assert plan.queries == {1: 3}
    assert plan.documents == [1]


def test_pairs_follow_precedence_over_documents_only() -> None:
    n = 5
    plan = late_interaction_plan([2, 2, 2, 2, 2], sides=[Q, D, QD, D, NONE])
    pairs = late_interaction_pairs(
        plan, n, bags=[0, 0, 1, 0, 0], repel=csr(n, {0: [(2, 2.0)]}),
        ignore=csr(n, {2: [(3, 1.0)]}), attract=csr(n, {2: [(4, 1.0)]}),
        ambient_repulsion_weight=0.5)
    # anchors: the query items 0 and 2; candidates: the documents 1, 2, 3 (never the anchor;
    # 4 is attracted by 2 and in 0's bag but is no document)
    assert pairs == {0: ({1: 1.0, 3: 1.0}, {2: 2.0}),
                     2: ({}, {1: 0.5})}
    named = late_interaction_pairs(plan, n, bags=[0, 0, 1, 0, 0], negatives="NAMED")
    assert named == {0: ({1: 1.0, 3: 1.0}, {}), 2: ({}, {})}


# ----------------------------------------------------------------------------- the term by hand

def hand_example():
    """Five items of 2-d token vectors whose dot products are exact.

    item 0 (QUERY):   (1, 0), (0, 1)
    item 1 (DOC):     (1, 0)
    item 2 (DOC):     (0.6, 0.8), (0, 1)
    item 3 (Q + D):   (0.8, 0.6)
    item 4 (QUERY):   (0, 1)
    MaxSim (row maxima averaged over the query tokens):
      m01 = (1 + 0) / 2 = 0.5      m02 = (0.6 + 1) / 2 = 0.8      m03 = (0.8 + 0.6) / 2 = 0.7
      m31 = 0.8                    m32 = max(0.96, 0.6) = 0.96
      m41 = 0                      m42 = max(0.8, 1) = 1          m43 = 0.6
    Relations (bags [0, 0, 1, 1, 2], attract 0 -> 2 weight 3, AMBIENT weight 1):
      anchor 0: positives 1 (bag, 1) and 2 (attract, 3); negative 3
      anchor 3: positive 2 (bag); negative 1
      anchor 4: no positive; negatives 1, 2, 3
    """
    v = [vectors([1.0, 0.0], [0.0, 1.0]), vectors([1.0, 0.0]), vectors([0.6, 0.8], [0.0, 1.0]),
         vectors([0.8, 0.6]), vectors([0.0, 1.0])]
    keywords = dict(sides=[Q, D, D, QD, Q], bags=[0, 0, 1, 1, 2],
                    attract=csr(5, {0: [(2, 3.0)]}))
    m = {(0, 1): 0.5, (0, 2): 0.8, (0, 3): 0.7, (3, 1): 0.8, (3, 2): 0.96,
         (4, 1): 0.0, (4, 2): 1.0, (4, 3): 0.6}
    return v, keywords, m


@pytest.mark.parametrize("form", ["RANKED", "DERIVED", "BALANCED", "SIGMOID"])
def test_late_interaction_by_hand(form) -> None:
    v, keywords, m = hand_example()
    t, b = 2.0, -1.0
    tau = torch.tensor([math.log(t)], dtype=F64)
    bias = torch.tensor([b], dtype=F64)
    ours = late_interaction_loss(v, log_inverse_temperature=tau, bias=bias, pair_loss=form,
                                 **keywords).item()
    if form == "SIGMOID":
        s = {k: t * x + b for k, x in m.items()}
        loss0 = softplus(-s[0, 1]) + 3 * softplus(-s[0, 2]) + softplus(s[0, 3])
        loss3 = softplus(-s[3, 2]) + softplus(s[3, 1])
        loss4 = softplus(s[4, 1]) + softplus(s[4, 2]) + softplus(s[4, 3])
        expected = (loss0 + loss3 + loss4) / 3            # every query anchor
    else:
        s = {k: t * x for k, x in m.items()}
        e = {k: math.exp(x) for k, x in s.items()}
        if form == "BALANCED":
            denominator = e[0, 1] + e[0, 2] + e[0, 3]
            loss0 = -(0.25 * (s[0, 1] - math.log(denominator)) +
                      0.75 * (s[0, 2] - math.log(denominator)))
        else:                                             # RANKED, DERIVED
            loss0 = -(0.25 * (s[0, 1] - math.log(e[0, 1] + e[0, 3])) +
                      0.75 * (s[0, 2] - math.log(e[0, 2] + e[0, 3])))
        loss3 = -(s[3, 2] - math.log(e[3, 2] + e[3, 1]))
        expected = (loss0 + loss3) / 2                    # anchor 4 has no positive
    assert ours == pytest.approx(expected, rel=1e-13)


def test_late_interaction_query_span_and_budgets_by_hand() -> None:
    v, keywords, m = hand_example()
    tau = torch.tensor([math.log(2.0)], dtype=F64)
    zero = torch.zeros(1, dtype=F64)
    # max_query_span 1: item 0's query is (1, 0) alone: m01 = 1, m02 = 0.6, m03 = 0.8
    s01, s02, s03, s31, s32 = 2.0, 1.2, 1.6, 1.6, 1.92
    loss0 = -(0.25 * (s01 - math.log(math.exp(s01) + math.exp(s03))) +
              0.75 * (s02 - math.log(math.exp(s02) + math.exp(s03))))
    loss3 = -(s32 - math.log(math.exp(s32) + math.exp(s31)))
    ours = late_interaction_loss(v, log_inverse_temperature=tau, bias=zero, max_query_span=1,
                                 **keywords)
    assert ours.item() == pytest.approx((loss0 + loss3) / 2, rel=1e-13)
    # 2 query tokens per device: item 0 takes both, item 3 (1 token) no longer fits, 4 neither
    only0 = late_interaction_loss(v, log_inverse_temperature=tau, bias=zero,
                                  max_query_tokens_per_device=2, **keywords)
    s = {k: 2.0 * x for k, x in m.items()}
    loss0 = -(0.25 * (s[0, 1] - math.log(math.exp(s[0, 1]) + math.exp(s[0, 3]))) +
              0.75 * (s[0, 2] - math.log(math.exp(s[0, 2]) + math.exp(s[0, 3]))))
    assert only0.item() == pytest.approx(loss0, rel=1e-13)
    # one document per device: only item 1 (the first document) is a candidate; anchor 0
    # has it as a positive and no negative (RANKED: 0), anchor 3 has it as a negative only
    # and no positive (left out): the mean over the one counted anchor is 0
    one_document = late_interaction_loss(v, log_inverse_temperature=tau, bias=zero,
                                         max_documents_per_device=1, **keywords)
    assert one_document.item() == 0.0
    # ... and with SIGMOID every query anchor counts: (softplus(-s01) + softplus(s31) +
    # softplus(s41)) / 3 with s = 2m - 1
    sigmoid = late_interaction_loss(v, log_inverse_temperature=tau,
                                    bias=torch.tensor([-1.0], dtype=F64),
                                    max_documents_per_device=1, pair_loss="SIGMOID", **keywords)
    expected = (softplus(-(2 * 0.5 - 1)) + softplus(2 * 0.8 - 1) + softplus(2 * 0.0 - 1)) / 3
    assert sigmoid.item() == pytest.approx(expected, rel=1e-13)


def test_late_interaction_is_zero_without_query_anchors() -> None:
    v, keywords, _ = hand_example()
    keywords["sides"] = [D] * 5
    tau = torch.tensor([1.0], dtype=F64, requires_grad=True)
    loss = late_interaction_loss(v, log_inverse_temperature=tau, bias=torch.zeros(1, dtype=F64),
                                 **keywords)
    assert loss.item() == 0.0
    assert late_pair_form("DERIVED") == "RANKED"


@pytest.mark.parametrize("form", ["BALANCED", "RANKED", "SIGMOID"])
def test_late_interaction_gradients_match_finite_differences(form) -> None:
    rng = np.random.default_rng(len(form))
    shapes = [3, 2, 0, 4, 1, 3]                     # item 2 is empty: it takes no part
    sides = [QD, Q, QD, D, QD, QD]
    n = len(shapes)
    bags = [0, 0, 1, 1, 2, 0]
    attract = csr(n, {1: [(3, 0.5)], 4: [(5, 2.0), (0, 0.0)]})
    repel = csr(n, {0: [(4, 3.0)]})
    ignore = csr(n, {5: [(3, 1.0)]})
    inputs = [torch.from_numpy(rng.standard_normal((k, 4))).requires_grad_() for k in shapes if k]
    empty = torch.zeros(0, 4, dtype=F64)                 # a constant: gradcheck wants no [0, 4]
    tau = torch.tensor([0.7], dtype=F64, requires_grad=True)
    bias = torch.tensor([-0.4], dtype=F64, requires_grad=True)

    def term(*args):
        *vs, t, b = args
        vs = list(vs)
        vs.insert(2, empty)
        return late_interaction_loss(vs, sides=sides, max_query_span=2,
                                     log_inverse_temperature=t, bias=b, bags=bags,
                                     attract=attract, repel=repel, ignore=ignore,
                                     ambient_repulsion_weight=0.5, pair_loss=form)

    assert term(*inputs, tau, bias).item() != 0.0
    assert torch.autograd.gradcheck(term, (*inputs, tau, bias), eps=1e-6, atol=1e-7, rtol=1e-6)


# ----------------------------------------------------------------------------- replicas

def test_split_by_tokens_by_hand() -> None:
    # total 111, half 55: running counts 16, 28, 41, 54, 65 -> five items reach it
    assert split_by_tokens([16, 12, 13, 13, 11, 1, 0, 16, 13, 16], 16, 2) == [(0, 5), (5, 10)]
    # lengths count at most a row: [16, 1, 1, 1], total 19, half 9: the first item alone
    assert split_by_tokens([20, 1, 1, 1], 16, 2) == [(0, 1), (1, 4)]
    assert split_by_tokens([1] * 6, 16, 3) == [(0, 2), (2, 4), (4, 6)]
    assert split_by_tokens([5], 16, 2) == [(0, 1), (1, 1)]
    assert split_by_tokens([], 16, 2) == [(0, 0), (0, 0)]
    assert split_by_tokens([3, 4], 16, 1) == [(0, 2)]


def test_item_rows() -> None:
    texts = [b"abc", b"x" * 20, b"", b"abc", b"x" * 20, b"", b"y" * 15]
    choices = [b"", b"", b"", b"AB", b"AB", b"AB", b"AB"]
    # a choice item: bytes cut to 15, plus MASK
    assert item_rows(texts, 16, choices) == [3, 16, 0, 4, 16, 1, 16]
    assert item_rows(texts, 16) == [3, 16, 0, 3, 16, 0, 15]


# ----------------------------------------------------------------------------- choices

def test_choice_ids() -> None:
    assert choice_ids(b"abcdef", 4) == [97, 98, 99, MASK]
    assert choice_ids(b"ab", 4) == [97, 98, MASK]
    assert choice_ids(b"", 4) == [MASK]
    assert choice_ids("é", 8) == [0xC3, 0xA9, MASK]


def closed_form_model(log_temperatures) -> ReferenceModel:
    """depth 0, hidden 64: h = LayerNorm(text.bytes[id] + text.modality). The MASK row is
    (+1, -1, +1, ...) and the modality 0, so LN (weight 1, bias 0) gives h = x / sqrt(1 + eps)
    exactly as a formula; byte rows A = (2, 0, 0, ...), B = (0, 3, 0, ...), C = (1, 1, 1, 1,
    0, ...)."""
    h = 64
    table = np.zeros((257, h))
    table[MASK] = [(-1.0) ** k for k in range(h)]
    table[ord("A"), 0] = 2.0
    table[ord("B"), 1] = 3.0
    table[ord("C"), :4] = 1.0
    bias = np.zeros(256)
    bias[ord("A")], bias[ord("B")], bias[ord("C")] = 0.5, -0.25, 1.0
    tensors = {"text.bytes": table, "text.modality": np.zeros(h), "norm.weight": np.ones(h),
               "norm.bias": np.zeros(h), "heads.embedding.weight": np.eye(8, h),
               "heads.bytes.bias": bias,
               "choices.log_temperature": np.array(log_temperatures, dtype=np.float64)}
    return ReferenceModel(tensors, {"depth": 0, "context": 8})


def test_choice_probabilities_by_hand() -> None:
    model = closed_form_model([0.0, math.log(2.0)])
    r = 1.0 / math.sqrt(1.0 + NORM_EPS)
    # h = r (1, -1, 1, -1, ...): logits A = 2r + 0.5, B = -3r - 0.25, C = (1-1+1-1) r + 1 = 1
    logits = {"A": 2 * r + 0.5, "B": -3 * r - 0.25, "C": 1.0}
    for group, temperature in ((0, 1.0), (1, 2.0)):
        for choices in ("ABC", "CA", "B"):
            z = [logits[c] / temperature for c in choices]
            expected = [math.exp(x) / sum(math.exp(y) for y in z) for x in z]
            p = choice_probabilities(model, [ord("x"), MASK], choices.encode(), group)
            assert p.tolist() == pytest.approx(expected, rel=1e-13)
            assert p.sum().item() == pytest.approx(1.0, abs=1e-15)
    with pytest.raises(ValueError):
        choice_probabilities(model, [ord("x")], b"AB", 0)          # no MASK row
    with pytest.raises(ValueError):
        choice_probabilities(model, [MASK], b"AA", 0)              # repeated choice


def test_choices_on_a_random_model(tmp_path) -> None:
    path = os.path.join(tmp_path, "m.safetensors")
    write_random_checkpoint(path, depth=2, hidden=64, dimensions=16, context=8,
                            byte_head=True, choice_temperature_groups=2, seed=3)
    model = ReferenceModel.load(path)
    text = b"question?"                                     # cut to 7 bytes, then MASK
    ids = choice_ids(text, model.context)
    assert ids == list(b"questio") + [MASK]
    with torch.no_grad():
        h = model.text_hidden(torch.tensor(ids)).numpy()[-1]
        table = model.weight("text.bytes").numpy()
        bias = model.weight("heads.bytes.bias").numpy()
        log_t = model.weight("choices.log_temperature").numpy()
        for group in (0, 1):
            p = choice_probabilities(model, ids, b"yn?", group).numpy()
            full = h @ table[:256].T + bias                       # every byte's logit
            z = full[[ord("y"), ord("n"), ord("?")]] / math.exp(log_t[group])
            expected = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
            np.testing.assert_allclose(p, expected, rtol=1e-12)
            assert abs(p.sum() - 1.0) < 1e-14
    # the loss: the mean over the items with choices of -sum y log p, targets as given
    texts = [b"question?", b"no choices here", b"", b"pick one"]
    choices = [b"yn?", b"", b"ab", b"1"]
    targets = [[0.25, 0.5, 0.0], [], [2.0, 1.0], [1.0]]
    groups = [1, 0, 0, 1]
    with torch.no_grad():
        expected = 0.0
        for i in (0, 2, 3):
            p = choice_probabilities(model, choice_ids(texts[i], 8), choices[i], groups[i])
            expected -= sum(y * math.log(float(pc)) for y, pc in zip(targets[i], p))
        expected /= 3
        ours = choices_loss(model, texts, choices, targets, groups)
    assert ours.item() == pytest.approx(expected, rel=1e-13)
    # one choice: p = 1, loss 0; no choices at all: 0
    assert choices_loss(model, [b"a"], [b"1"], [[1.0]]).item() == pytest.approx(0.0, abs=1e-15)
    assert choices_loss(model, texts, [b""] * 4, [[]] * 4).item() == 0.0
    with pytest.raises(ValueError):
        choices_loss(model, [b"a"], [b"12"], [[1.0]])              # one target for two choices
    with pytest.raises(ValueError):
        choices_loss(model, [b"a"], [b"12"], [[1.0, -0.5]])        # negative target


def test_choices_loss_gradients_match_finite_differences(tmp_path) -> None:
    path = os.path.join(tmp_path, "m.safetensors")
    write_random_checkpoint(path, depth=1, hidden=64, dimensions=8, context=6,
                            byte_head=True, choice_temperature_groups=2, seed=5)
    model = ReferenceModel.load(path)
    names = ["heads.bytes.bias", "choices.log_temperature", "norm.weight", "text.modality"]
    inputs = tuple(model.weight(name).detach().clone().requires_grad_() for name in names)
    texts = [b"which?", b"none", b"AB or C"]
    choices = [b"AB", b"", b"ABC"]
    targets = [[0.9, 0.1], [], [0.2, 0.3, 0.6]]

    def loss(*tensors):
        return _choices_with(model, dict(zip(names, tensors)), texts, choices, targets)

    loss(*inputs).backward()                   # the swapped-in tensors are the ones used
    assert all(t.grad is not None and t.grad.abs().max() > 0 for t in inputs)
    for t in inputs:
        t.grad = None
    # fast mode: one random direction per input (the 256 byte biases make full mode slow)
    assert torch.autograd.gradcheck(loss, inputs, eps=1e-6, atol=1e-7, rtol=1e-6, fast_mode=True)
    # full mode on the temperatures alone
    assert torch.autograd.gradcheck(lambda t: loss(inputs[0], t, *inputs[2:]), (inputs[1],),
                                    eps=1e-6, atol=1e-7, rtol=1e-6)


def _choices_with(model, parameters, texts, choices, targets):
    """choices_loss with some of the model's weights replaced by the given tensors: the
    instance's `weight` lookup is shadowed for the call, so gradcheck can vary them."""
    original = model.weight
    model.weight = lambda name: parameters[name] if name in parameters else original(name)
    try:
        return choices_loss(model, texts, choices, targets, [1, 0, 0])
    finally:
        del model.weight


# ----------------------------------------------------------------------------- the whole step

@pytest.fixture(scope="module")
def step_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("late") / "m.safetensors"
    write_random_checkpoint(str(path), depth=1, hidden=64, dimensions=16, context=12,
                            token_width=8, byte_head=True, choice_temperature_groups=2, seed=9)
    model = ReferenceModel.load(path)
    tensors = {name: p.detach().numpy().copy() for name, p in model.named_parameters()}
    tensors = {name.replace("__", "."): value for name, value in tensors.items()}
    tensors["contrastive.log_inverse_temperature"] = np.array([math.log(10.0), 0.5])
    tensors["contrastive.bias"] = np.array([-3.0, 1.0])
    tensors["late_interaction.log_inverse_temperature"] = np.array([math.log(5.0)])
    tensors["late_interaction.bias"] = np.array([-2.0])
    return ReferenceModel(tensors, model.config)


STEP_TEXTS = [b"the cat sat on the mat", b"a cat", b"is it? yes or no", b"", b"dogs chase",
              b"pick: a b c", b"mat cat"]
STEP_CHOICES = [b"", b"", b"YN", b"", b"", b"abc", b""]
STEP_TARGETS = [[], [], [0.75, 0.25], [], [], [0.1, 0.2, 0.3], []]
STEP_BAGS = [0, 0, 1, 2, 1, 3, 0]


def test_step_without_choices_or_late_is_the_existing_reference(step_model) -> None:
    texts = STEP_TEXTS
    terms = step_losses(step_model, texts, seed=4, step=3, objective="JOINT", bags=STEP_BAGS,
                        groups=[0, 1, 0, 1, 1, 0, 0], text_weight=0.5)
    masked = training.masked_text_loss(step_model, texts, seed=4, step=3)
    ids = [ids for _, ids, _ in training.corrupt_texts(step_model, texts, seed=4, step=3)]
    contrast = training.contrastive_loss(
        training.embeddings(step_model, ids),
        log_inverse_temperature=step_model.weight("contrastive.log_inverse_temperature"),
        bias=step_model.weight("contrastive.bias"), bags=STEP_BAGS, groups=[0, 1, 0, 1, 1, 0, 0])
    assert terms["masked_text"].item() == pytest.approx(masked.item(), rel=1e-13)
    assert terms["contrastive"].item() == pytest.approx(contrast.item(), rel=1e-13)
    assert terms["loss"].item() == pytest.approx(0.5 * masked.item() + contrast.item(), rel=1e-13)
    assert terms["late_interaction"].item() == terms["choices"].item() == 0.0


def test_choice_items_are_not_corrupted_but_keep_their_rng_index(step_model) -> None:
    items = step_inputs(STEP_TEXTS, context=12, seed=4, step=3, corrupt=True,
                        choices=STEP_CHOICES)
    # choice items: bytes cut to 11 plus MASK, nothing selected
    assert items[2].ids == list(b"is it? yes ")[:11] + [MASK] and not any(items[2].selected)
    assert items[5].ids == list(b"pick: a b c") + [MASK] and not any(items[5].selected)
    # every other item is masked exactly as training.mask_text with its own index
    for index in (0, 1, 3, 4, 6):
        ids, selected = training.mask_text(STEP_TEXTS[index][:12], seed=4, step=3, item=index)
        assert (items[index].ids, items[index].selected) == (ids, selected)
    assert any(any(item.selected) for item in items)

    # the masked term is the world mean over the non-choice items' selected positions
    terms = step_losses(step_model, STEP_TEXTS, seed=4, step=3, objective="MASKED",
                        choices=STEP_CHOICES, choice_targets=STEP_TARGETS, choices_weight=2.0)
    total, count = 0.0, 0
    for index in (0, 1, 3, 4, 6):
        selected = sum(items[index].selected)
        if selected:
            one = training.masked_text_loss(step_model, [STEP_TEXTS[index]], seed=4, step=3,
                                            first_item=index)
            total += one.item() * selected
            count += selected
    assert terms["masked_text"].item() == pytest.approx(total / count, rel=1e-13)
    choices = choices_loss(step_model, STEP_TEXTS, STEP_CHOICES, STEP_TARGETS)
    assert terms["choices"].item() == pytest.approx(choices.item(), rel=1e-13)
    assert terms["loss"].item() == pytest.approx(total / count + 2.0 * choices.item(), rel=1e-13)


def test_step_contrastive_and_late_terms_see_choice_items_with_mask(step_model) -> None:
    late = dict(weight=0.25, pair_loss="SIGMOID", max_query_span=3)
    sides = [QD, Q, QD, NONE, D, QD, D]
    terms = step_losses(step_model, STEP_TEXTS, seed=4, step=3, objective="CONTRASTIVE",
                        bags=STEP_BAGS, late=late, sides=sides, choices=STEP_CHOICES,
                        choice_targets=STEP_TARGETS, choices_weight=1.0,
                        contrastive_pair_loss="RANKED", widths=[4, 16])
    ids = [list(t[:12]) for t in STEP_TEXTS]
    ids[2], ids[5] = choice_ids(STEP_TEXTS[2], 12), choice_ids(STEP_TEXTS[5], 12)
    contrast = training.contrastive_loss(
        training.embeddings(step_model, ids),
        log_inverse_temperature=step_model.weight("contrastive.log_inverse_temperature"),
        bias=step_model.weight("contrastive.bias"), bags=STEP_BAGS, pair_loss="RANKED",
        widths=[4, 16])
    assert terms["contrastive"].item() == pytest.approx(contrast.item(), rel=1e-13)
    vectors_ = [step_model.token_vectors(step_model.text_hidden(torch.tensor(x, dtype=torch.long)))
                for x in ids]
    assert [v.shape[0] for v in vectors_] == [12, 5, 12, 0, 10, 12, 7]
    term = late_interaction_loss(
        vectors_, sides=sides, max_query_span=3, pair_loss="SIGMOID", bags=STEP_BAGS,
        log_inverse_temperature=step_model.weight("late_interaction.log_inverse_temperature"),
        bias=step_model.weight("late_interaction.bias"))
    assert terms["late_interaction"].item() == pytest.approx(0.25 * term.item(), rel=1e-13)
    assert term.item() > 0.0
    # under JOINT the token vectors are those of the corrupted text (choice items intact)
    joint = step_token_vectors(step_model, STEP_TEXTS, seed=4, step=3, corrupt=True,
                               choices=STEP_CHOICES)
    items = step_inputs(STEP_TEXTS, context=12, seed=4, step=3, corrupt=True,
                        choices=STEP_CHOICES)
    for vector, item in zip(joint, items):
        expected = step_model.token_vectors(
            step_model.text_hidden(torch.tensor(item.ids, dtype=torch.long)))
        assert torch.equal(vector, expected)
    assert any(item.ids != list(text[:12]) for item, text, c in
               zip(items, STEP_TEXTS, STEP_CHOICES) if not c)


def test_step_gradients_reach_every_new_parameter(step_model) -> None:
    late = dict(weight=1.0, pair_loss="SIGMOID")
    terms = step_losses(step_model, STEP_TEXTS, seed=4, step=3, objective="JOINT",
                        bags=STEP_BAGS, groups=[0, 0, 1, 0, 1, 0, 1], late=late,
                        choices=STEP_CHOICES, choice_targets=STEP_TARGETS, choices_weight=1.0)
    step_model.zero_grad()
    terms["loss"].backward()
    grads = {n.replace("__", "."): p.grad for n, p in step_model.named_parameters()}
    for name in ("heads.tokens.weight", "late_interaction.log_inverse_temperature",
                 "late_interaction.bias", "heads.bytes.bias", "text.bytes"):
        assert grads[name] is not None and grads[name].abs().max() > 0, name
    # item 2 (group 1) and item 5 (group 0) have choices: both temperatures learn
    assert (grads["choices.log_temperature"].abs() > 0).all()
    step_model.zero_grad()
