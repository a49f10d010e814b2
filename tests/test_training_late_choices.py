"""The CPU trainer's late-interaction and choices terms (docs/training.md sections 9 and 10)
against the float64 PyTorch reference (tests/reference/late_choices.py): one step's losses
and every parameter's gradient for each case of CASES (side patterns, pair forms, query
spans and budgets that bind, relation kinds, objectives, choices with one or two temperature
groups, and choices without late interaction), on one replica; two replicas against one
when no budget binds, and budgets that apply per replica (BUDGETS). Beside those: the
premises the cases rest on (distinct tokens in every item, the budget walks worked out by
hand), the initial values of the new parameters, and distillation (a teacher's text_choose
answer used as a student's choice_targets as it is).

Method. The trainer is built with depth 2, hidden 64, rows of 16 columns, 8 rows per device;
its FP32 master weights, saved by the trainer itself, become a float64 ReferenceModel; one
step of the trainer is compared with `late_choices.step_losses` on the same items: the
weighted total, the masked-text, contrastive, weighted late-interaction and unweighted
choices terms, and then each parameter's gradient (`trainer.tensor(name, "gradients")`)
with autograd's.

MaxSim near-ties. The items are chosen so that every item's packed rows hold distinct token
ids (distinct bytes, and for each seed of SEEDS the corruption of step 1 creates no repeat):
rows of the same token in one document have near-identical token vectors at initialisation,
and a MaxSim whose two best rows differ by less than FP32 rounding would send the gradient
to a different row in FP32 than in float64. Even with distinct tokens, a few (query token,
document) pairs in ten thousand have their two best rows within 1e-5 at this
initialisation (measured on stand-in weights of the same scales). So `run_case` takes
the first seed of SEEDS whose initial weights leave every scored MaxSim a margin of MARGIN
(5e-6) between its best and second-best row, a choice made from the initial weights and the
items alone, before the step; FP32 moves each of these dot products by at most 4e-7
(measured: the float32 reference against the float64 one on these items).

Tolerances (those of tests/test_training_reference.py). The trainer computes in FP32: every
gradient is a chain of FP32 GEMMs over at most a few hundred terms and FP32 elementwise
backward steps, so its error is a few units of 2^-24 times the magnitudes involved,
amplified by the depth. Losses agree to 1e-5 relative (1e-6 absolute for terms near 0);
each tensor's gradient to atol = 2e-4 * max|reference gradient of that tensor| (rtol 0):
a wrong formula (a missing term, a wrong average, a wrong row, a temperature multiplied
instead of divided) errs by O(1) of that scale. A parameter the reference leaves without
gradient (the late-interaction bias outside SIGMOID, a temperature group nobody uses) must
come back as 0 to 2e-12.
"""
import json
import math
import os
from typing import NamedTuple

import numpy as np
import pytest
import torch

import uform
from reference import ReferenceModel, safetensors_io
from reference.checkpoint import reference_from_trainer
from reference import late_choices as lc

TEXT = uform.Modality.TEXT
S = uform.LateInteractionSide
Q, D, QD, NONE = S.QUERY, S.DOCUMENT, S.QUERY_AND_DOCUMENT, S.NONE
SEEDS = (1400, 839, 406, 4125, 2136)    # each keeps every corrupted item free of repeats
MARGIN = 5e-6
ROWS, COLUMNS = 8, 16
SEGMENTS = 4 * ROWS                       # the derived segment limit (docs/training.md 6)

# Every item's first 16 bytes (15 for a choice item) are distinct. Lengths after the cut:
# 16 (truncated), 12, 13, 13, 11, 1, 0, 16, then the choice items 12 + MASK and
# 15 + MASK (truncated): 111 rows, 8 packed rows of 16 on one device.
TEXTS = [b"the-quick,brown fox jumps", b"lazy dog;cub", b"fox jumps+LAD", b"BIG cat_on.WM",
         b"\x00bin\xff\xfe=y\x01z\x7f", b"x", b"", b"shortly/and:GUM?",
         b"1+3=?A:4/B;7", b"Sky-blue?YN:0123456789 more text"]
N = len(TEXTS)
TRUNCATED = 2                             # items 0 (25 > 16 bytes) and 9 (32 > 15 bytes)
CHOICES = [b""] * 8 + [b"AB", b"YN"]
TARGETS = [np.zeros(0, np.float32)] * 8 + [np.array([0.75, 0.25], np.float32),
                                           np.array([0.3, 0.9], np.float32)]   # used as given
BAGS = [0, 0, 1, 1, 2, 3, 4, 3, 2, 5]
GROUPS = [0, 1, 0, 1, 1, 0, 1, 0, 1, 0]   # the choice items: 8 in group 1, 9 in group 0
MIXED = [Q, D, QD, Q, D, NONE, QD, D, Q, QD]


def csr(rows, count):
    offsets, ids, weights = [0], [], []
    for anchor in range(count):
        for candidate, weight in rows.get(anchor, []):
            ids.append(candidate)
            weights.append(weight)
        offsets.append(len(ids))
    return (np.array(offsets, np.uint64), np.array(ids, np.uint32), np.array(weights, np.float32))


ATTRACT = csr({0: [(2, 0.5), (9, 2.0)], 3: [(8, 1.5)], 8: [(3, 1.0)]}, N)
REPEL = csr({0: [(1, 3.0)], 2: [(0, 1.5)], 9: [(7, 0.25)]}, N)
IGNORE = csr({1: [(0, 1.0)], 7: [(5, 1.0)], 4: [(8, 1.0)]}, N)


def reference_from(trainer, tmp_path) -> ReferenceModel:
    """The trainer's FP32 masters as a float64 reference model (through its own save)."""
    return reference_from_trainer(trainer, tmp_path)


def late_keywords(late: uform.LateInteraction) -> dict:
    """`step_losses`' late keywords for a LateInteraction, zeros derived (docs/training.md
    section 6): weight 1, pair form DERIVED (RANKED), span a row, token budgets rows x
    columns of a device, documents the segment limit."""
    return dict(weight=late.weight or 1.0, pair_loss=late.pair_loss.name,
                max_query_span=late.max_query_span or COLUMNS,
                max_query_tokens_per_device=late.max_query_tokens_per_device or ROWS * COLUMNS,
                max_documents_per_device=late.max_documents_per_device or SEGMENTS,
                max_document_tokens_per_device=(late.max_document_tokens_per_device
                                                or ROWS * COLUMNS))


def relation_keywords(contrastive, with_relations) -> dict:
    contrastive = contrastive or uform.Contrastive()
    out = dict(negatives=contrastive.negatives.name,
               ambient_repulsion_weight=contrastive.ambient_repulsion_weight or 1.0,
               contrastive_pair_loss=contrastive.pair_loss.name,
               widths=contrastive.matryoshka_dimensions)
    if with_relations:
        out.update(attract=ATTRACT, repel=REPEL, ignore=IGNORE)
    return out


def maxsim_margin(model, seed, *, corrupt, choices, late, sides, devices, relation_kw):
    """(smallest margin, plan): over every scored (query token, document), how much the best
    document row beats the second best (inf when no document has two rows)."""
    vectors = lc.step_token_vectors(model, TEXTS, seed=seed, step=1, corrupt=corrupt,
                                    choices=choices)
    keywords = late_keywords(late)
    rows = [v.shape[0] for v in vectors]
    plan = lc.late_interaction_plan(
        rows, sides=sides, devices=devices, max_query_span=keywords["max_query_span"],
        max_query_tokens_per_device=keywords["max_query_tokens_per_device"],
        max_documents_per_device=keywords["max_documents_per_device"],
        max_document_tokens_per_device=keywords["max_document_tokens_per_device"])
    pairs = lc.late_interaction_pairs(
        plan, N, bags=BAGS, negatives=relation_kw["negatives"],
        ambient_repulsion_weight=relation_kw["ambient_repulsion_weight"],
        **{k: relation_kw[k] for k in ("attract", "repel", "ignore") if k in relation_kw})
    smallest = math.inf
    with torch.no_grad():
        for i, (positives, negatives) in pairs.items():
            query = vectors[i][:plan.queries[i]]
            for j in set(positives) | set(negatives):
                if vectors[j].shape[0] < 2:
                    continue
                top = torch.topk(query @ vectors[j].T, 2, dim=1).values
                smallest = min(smallest, float((top[:, 0] - top[:, 1]).min()))
    return smallest, plan


def compare_gradients(trainer, model, must_compare=()):
    compared = set()
    for parameter_name, parameter in model.named_parameters():
        name = parameter_name.replace("__", ".")
        try:
            ours = trainer.tensor(name, "gradients").reshape(parameter.shape)
        except uform.InvalidArgumentError:
            continue
        expected = (parameter.grad if parameter.grad is not None
                    else torch.zeros_like(parameter)).numpy()
        scale = max(np.abs(expected).max(), 1e-8)
        np.testing.assert_allclose(ours, expected, atol=2e-4 * scale, rtol=0,
                                   err_msg=f"gradient of {name}")
        compared.add(name)
    missing = set(must_compare) - compared
    assert not missing, f"gradients not compared: {sorted(missing)}"
    assert len(compared) >= 2 * 12 + 4


class Run(NamedTuple):
    trainer: object
    stats: object
    terms: dict
    model: ReferenceModel
    plan: object
    seed: int


def run_case(tmp_path, *, objective, late, choices, contrastive=None, sides=None,
             groups=None, with_relations=False, executor=None, devices=None,
             seeds=SEEDS) -> Run:
    """One trainer step and the reference's terms for it, the reference loss already
    backpropagated. The seed is the first of `seeds` whose initial weights keep every
    scored MaxSim MARGIN away from a tie (see the module docstring)."""
    relation_kw = relation_keywords(contrastive, with_relations)
    corrupt = objective != uform.Objective.CONTRASTIVE
    step_choices = CHOICES if choices is not None else None
    margins = []
    for seed in seeds:
        trainer = uform.Trainer.init_ram(
            executor or uform.Executor.for_ram(2), depth=2, hidden=64, objective=objective,
            contrastive=contrastive, late_interaction=late, choices=choices,
            batch=uform.BatchShape(max_rows_per_device=ROWS, max_columns_per_row=COLUMNS),
            seed=seed)
        model = reference_from(trainer, tmp_path)
        plan = None
        if late is None:
            break
        margin, plan = maxsim_margin(model, seed, corrupt=corrupt, choices=step_choices,
                                     late=late, sides=sides, devices=devices,
                                     relation_kw=relation_kw)
        margins.append(margin)
        if margin > MARGIN:
            break
    else:
        pytest.fail(f"every seed of {seeds} has a MaxSim near-tie (margins {margins}): "
                    "FP32 may pick another document row; add seeds or change the texts")

    relations = (uform.Relations(attract=ATTRACT, repel=REPEL, ignore=IGNORE)
                 if with_relations else None)
    stats = uform.TrainerStepStats()
    trainer.step([TEXT] * N, TEXTS, bags=BAGS, temperature_groups=groups, sides=sides,
                 choices=step_choices,
                 choice_targets=TARGETS if choices is not None else None,
                 relations=relations, stats=stats)
    assert stats.dropped == 0                   # premise: every item packed
    assert stats.truncated == TRUNCATED

    terms = lc.step_losses(
        model, TEXTS, seed=seed, step=1, objective=objective.name, bags=BAGS, groups=groups,
        late=late_keywords(late) if late is not None else None, sides=sides, devices=devices,
        choices=step_choices, choice_targets=TARGETS if choices is not None else None,
        choices_weight=(choices.weight or 1.0) if choices is not None else None,
        **relation_kw)
    terms["loss"].backward()
    return Run(trainer, stats, terms, model, plan, seed)


def assert_losses(stats, terms):
    assert stats.loss == pytest.approx(terms["loss"].item(), rel=1e-5, abs=1e-6)
    assert stats.masked_text_loss == pytest.approx(terms["masked_text"].item(), rel=1e-5, abs=1e-6)
    assert stats.contrastive_loss == pytest.approx(terms["contrastive"].item(), rel=1e-5, abs=1e-6)
    assert stats.late_interaction_loss == pytest.approx(terms["late_interaction"].item(),
                                                        rel=1e-5, abs=1e-6)
    assert stats.choices_loss == pytest.approx(terms["choices"].item(), rel=1e-5, abs=1e-6)


LATE_NAMES = ("heads.tokens.weight", "late_interaction.log_inverse_temperature",
              "late_interaction.bias")
CHOICE_NAMES = ("choices.log_temperature", "heads.bytes.bias", "text.bytes")

MASKED, CONTRASTIVE, JOINT = (uform.Objective.MASKED, uform.Objective.CONTRASTIVE,
                              uform.Objective.JOINT)
LI, CH, PF = uform.LateInteraction, uform.Choices, uform.PairLossForm

# (name, objective, late, choices, contrastive, sides, groups, relations, budget binds)
CASES = [
    ("derived_masked", MASKED, LI(width=32), None, None, None, None, False, False),
    ("derived_joint_choices", JOINT, LI(width=32, weight=0.7), CH(weight=0.5), None, None,
     None, False, False),
    ("ranked_mixed_sides", CONTRASTIVE, LI(width=32, pair_loss=PF.RANKED), CH(), None, MIXED,
     None, False, False),
    ("balanced_mixed_sides", JOINT, LI(width=32, pair_loss=PF.BALANCED), CH(), None, MIXED,
     None, False, False),
    ("sigmoid_derived_bias", CONTRASTIVE, LI(width=32, pair_loss=PF.SIGMOID), None, None, None,
     None, False, False),
    ("sigmoid_mixed_sides", JOINT, LI(width=16, pair_loss=PF.SIGMOID, inverse_temperature=5.0,
                                      bias=-3.0, weight=2.0), CH(), None, MIXED, None, False,
     False),
    ("query_span", JOINT, LI(width=32, max_query_span=5), CH(), None, None, None, False, False),
    ("query_token_budget", CONTRASTIVE, LI(width=32, max_query_tokens_per_device=30), CH(),
     None, None, None, False, True),
    ("query_span_and_budget", MASKED, LI(width=32, max_query_span=6,
                                         max_query_tokens_per_device=40), CH(), None, None, None,
     False, True),
    ("document_budgets", JOINT, LI(width=32, max_documents_per_device=4,
                                   max_document_tokens_per_device=50), CH(), None, None, None,
     False, True),
    ("document_tokens_mixed_sides", CONTRASTIVE, LI(width=32, pair_loss=PF.BALANCED,
                                                   max_document_tokens_per_device=30), CH(),
     None, MIXED, None, False, True),
    ("relations_named", CONTRASTIVE, LI(width=32), CH(),
     uform.Contrastive(negatives=uform.Negatives.NAMED), None, None, True, False),
    ("relations_ambient_half_balanced", JOINT, LI(width=32, pair_loss=PF.BALANCED), CH(),
     uform.Contrastive(ambient_repulsion_weight=0.5), MIXED, None, True, False),
    ("relations_sigmoid", JOINT, LI(width=32, pair_loss=PF.SIGMOID), None,
     uform.Contrastive(pair_loss=PF.SIGMOID), MIXED, None, True, False),
    ("choices_two_groups_joint", JOINT, LI(width=32), CH(temperature_groups=2, weight=2.0),
     uform.Contrastive(temperature_groups=2), None, GROUPS, False, False),
    ("choices_two_groups_masked", MASKED, None, CH(temperature_groups=2), None, None, GROUPS,
     False, False),
    ("choices_only_contrastive", CONTRASTIVE, None, CH(weight=0.25), None, None, None, False,
     False),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_step_matches_reference(tmp_path, case):
    name, objective, late, choices, contrastive, sides, groups, with_relations, binds = case
    trainer, stats, terms, model, plan, _ = run_case(
        tmp_path, objective=objective, late=late, choices=choices, contrastive=contrastive,
        sides=sides, groups=groups, with_relations=with_relations)
    if late is not None:
        # premises: the term is non-trivial, and a budget case's budget really binds
        assert plan.queries and plan.documents
        rows = lc.item_rows(TEXTS, COLUMNS, CHOICES if choices is not None else None)
        unbounded = lc.late_interaction_plan(rows, sides=sides,
                                             max_query_span=late_keywords(late)["max_query_span"])
        assert (plan != unbounded) == binds, (plan, unbounded)
        assert terms["late_interaction"].item() != 0.0
    if choices is not None:
        assert terms["choices"].item() > 0.0
    assert_losses(stats, terms)
    must = (LATE_NAMES if late is not None else ()) + (CHOICE_NAMES if choices is not None else ())
    compare_gradients(trainer, model, must)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_item_holds_distinct_tokens(seed):
    """The premise of the MaxSim gradients (module docstring): no token id repeats within an
    item's forward input, corrupted (MASKED, JOINT; step 1) or not, with the choice items as
    choice items or as plain texts."""
    for choices in (CHOICES, None):
        for corrupt in (False, True):
            items = lc.step_inputs(TEXTS, context=COLUMNS, seed=seed, step=1, corrupt=corrupt,
                                   choices=choices)
            for index, item in enumerate(items):
                assert len(set(item.ids)) == len(item.ids), (index, corrupt, item.ids)
            if corrupt:                     # the corruption does change the input
                assert sum(item.ids != item.original for item in items if not item.choices) >= 3


def test_budget_cases_bind_as_worked_out_by_hand():
    """The budgets of CASES against walks done by hand over the rows
    [16, 12, 13, 13, 11, 1, 0, 16, 13, 16] (one device)."""
    rows = lc.item_rows(TEXTS, COLUMNS, CHOICES)
    assert rows == [16, 12, 13, 13, 11, 1, 0, 16, 13, 16]
    # 30 query tokens: 0 (14 left), 1 (2 left), 2-4 skipped, 5 (1 left), 7-9 skipped
    assert set(lc.late_interaction_plan(rows, max_query_tokens_per_device=30).queries) == {0, 1, 5}
    # span 6, 40 tokens: 6 each (1 for item 5): 0, 1, 2, 3, 4 (10 left), 5 (9), 7 (3), 8-9 skipped
    plan = lc.late_interaction_plan(rows, max_query_span=6, max_query_tokens_per_device=40)
    assert plan.queries == {0: 6, 1: 6, 2: 6, 3: 6, 4: 6, 5: 1, 7: 6}
    # 4 documents, 50 tokens: 0 (34), 1 (22), 2 (9), 3 and 4 skipped, 5 (8): four, done
    plan = lc.late_interaction_plan(rows, max_documents_per_device=4,
                                    max_document_tokens_per_device=50)
    assert plan.documents == [0, 1, 2, 5]
    # mixed sides, 30 document tokens: documents 1 (18), 2 (5); 4, 7, 9 too long; 6 empty
    plan = lc.late_interaction_plan(rows, sides=MIXED, max_document_tokens_per_device=30)
    assert plan.documents == [1, 2]
    assert set(plan.queries) == {0, 2, 3, 8, 9}


def test_new_parameters_start_as_specified(tmp_path):
    """docs/training.md section 4 and 6: initial values and shapes of the new parameters."""
    trainer = uform.Trainer.init_ram(
        uform.Executor.for_ram(1), depth=1, hidden=64, objective=CONTRASTIVE,
        late_interaction=LI(width=32, pair_loss=PF.SIGMOID, inverse_temperature=5.0),
        choices=CH(temperature_groups=3),
        batch=uform.BatchShape(max_rows_per_device=ROWS, max_columns_per_row=COLUMNS),
        seed=SEEDS[0])
    tokens = trainer.tensor("heads.tokens.weight")
    assert tokens.size == 32 * 64 and 0.015 < tokens.std() < 0.025 and abs(tokens.mean()) < 0.005
    assert trainer.tensor("late_interaction.log_inverse_temperature")[0] == \
        pytest.approx(math.log(5.0), rel=1e-6)
    assert trainer.tensor("late_interaction.bias").tolist() == [-10.0]      # derived, SIGMOID
    assert trainer.tensor("choices.log_temperature").tolist() == [0.0, 0.0, 0.0]
    assert trainer.tensor("heads.bytes.bias").tolist() == [0.0] * 256       # choices: byte head
    path = os.path.join(tmp_path, "start.safetensors")
    trainer.save(path)
    _, metadata = safetensors_io.read(path)
    config = json.loads(metadata["uform"])
    assert config["token_width"] == 32 and config["choice_temperature_groups"] == 3

    derived = uform.Trainer.init_ram(
        uform.Executor.for_ram(1), depth=1, hidden=64, objective=MASKED,
        late_interaction=LI(), batch=uform.BatchShape(max_rows_per_device=ROWS,
                                                      max_columns_per_row=COLUMNS), seed=SEEDS[0])
    assert derived.tensor("heads.tokens.weight").size == 128 * 64              # width 128
    assert derived.tensor("late_interaction.log_inverse_temperature")[0] == \
        pytest.approx(math.log(10.0), rel=1e-6)
    assert derived.tensor("late_interaction.bias").tolist() == [0.0]          # RANKED


# ----------------------------------------------------------------------------- replicas

def split_premise(choices):
    """The replicas' ranges, from the rows (reference) and from the bytes cut at a row
    (what c/src/train/trainer.c counted before choices): the tests need both to agree."""
    rows = lc.item_rows(TEXTS, COLUMNS, choices)
    lengths = [len(t) for t in TEXTS]
    devices = lc.split_by_tokens(rows, COLUMNS, 2)
    assert devices == lc.split_by_tokens(lengths, COLUMNS, 2) == [(0, 5), (5, 10)]
    return devices


def test_two_replicas_match_one_when_budgets_do_not_bind(tmp_path):
    late, choices = LI(width=32, weight=0.5, pair_loss=PF.BALANCED), CH(temperature_groups=2)
    contrastive = uform.Contrastive(temperature_groups=2)
    devices = split_premise(CHOICES)
    results, seeds = [], SEEDS
    for executor, ranges, where in ((uform.Executor.for_ram(2), None, "one"),
                                    (uform.Executor.for_ram(2, memory_domains=[0, 1]), devices,
                                     "two")):
        directory = os.path.join(tmp_path, where)
        os.makedirs(directory)
        trainer, stats, terms, model, plan, seed = run_case(
            directory, objective=JOINT, late=late, choices=choices, contrastive=contrastive,
            sides=MIXED, groups=GROUPS, with_relations=True, executor=executor, devices=ranges,
            seeds=seeds)
        seeds = (seed,)                         # the second run starts from the same weights
        assert_losses(stats, terms)
        compare_gradients(trainer, model, LATE_NAMES + CHOICE_NAMES)
        results.append((trainer, stats, terms))
    (one, one_stats, one_terms), (two, two_stats, two_terms) = results
    # the derived budgets never bind, so the reference terms are the same with or without
    # the replicas' ranges, and so are the trainer's
    for key in ("loss", "late_interaction", "choices", "contrastive", "masked_text"):
        assert one_terms[key].item() == pytest.approx(two_terms[key].item(), rel=1e-12)
    for field in ("loss", "late_interaction_loss", "choices_loss", "contrastive_loss",
                  "masked_text_loss"):
        assert getattr(two_stats, field) == pytest.approx(getattr(one_stats, field), rel=1e-5)
    for name in LATE_NAMES + CHOICE_NAMES:
        a, b = one.tensor(name, "gradients"), two.tensor(name, "gradients")
        np.testing.assert_allclose(b, a, atol=2e-4 * max(np.abs(a).max(), 1e-8), rtol=0,
                                   err_msg=f"gradient of {name}, two replicas vs one")


BUDGETS = [
    # rows [16, 12, 13, 13, 11, 1, 0, 16, 13, 16], replicas [0, 5) and [5, 10):
    # 30 query tokens: replica 0 admits 0 and 1 (2 left); replica 1 admits 5, 7, 8 (0 left).
    # One device of 30 would admit 0, 1 and 5 only.
    ("query_tokens", LI(width=32, max_query_tokens_per_device=30), None,
     {0, 1, 5, 7, 8}, [0, 1, 2, 3, 4, 5, 7, 8, 9]),
    # 3 documents per replica: 0, 1, 2 and 5, 7, 8 (one device: 0, 1, 2).
    # 40 document tokens: replica 0 takes 0 (24 left), 1 (12), skips 2 and 3, takes 4 (1);
    # replica 1 takes 5 (39), 7 (23), 8 (10), skips 9. With both: 0, 1, 4 and 5, 7, 8.
    ("documents", LI(width=32, pair_loss=PF.SIGMOID, max_documents_per_device=3,
                     max_document_tokens_per_device=40), None,
     {0, 1, 2, 3, 4, 5, 7, 8, 9}, [0, 1, 4, 5, 7, 8]),
    # mixed sides: queries 0, 2, 3, 6 (empty), 8, 9 with 20 query tokens per replica and a
    # span of 8: replica 0 admits 0 (12 left), 2 (4 left), skips 3; replica 1 admits 8 (12),
    # 9 (4). Documents 1, 2, 4, 6, 7, 9 with 2 per replica: 1, 2 and 7, 9.
    ("mixed_sides", LI(width=32, max_query_span=8, max_query_tokens_per_device=20,
                       max_documents_per_device=2), MIXED,
     {0, 2, 8, 9}, [1, 2, 7, 9]),
]


@pytest.mark.parametrize("budget", BUDGETS, ids=[b[0] for b in BUDGETS])
def test_budgets_apply_per_replica(tmp_path, budget):
    name, late, sides, queries, documents = budget
    devices = split_premise(CHOICES)
    trainer, stats, terms, model, plan, _ = run_case(
        tmp_path, objective=JOINT, late=late, choices=CH(), sides=sides, with_relations=True,
        executor=uform.Executor.for_ram(2, memory_domains=[0, 1]), devices=devices)
    assert set(plan.queries) == queries and plan.documents == documents
    # premise: the same budgets over one device would admit other items
    keywords = late_keywords(late)
    del keywords["weight"], keywords["pair_loss"]
    assert lc.late_interaction_plan(lc.item_rows(TEXTS, COLUMNS, CHOICES), sides=sides,
                                    **keywords) != plan
    assert_losses(stats, terms)
    compare_gradients(trainer, model, LATE_NAMES + CHOICE_NAMES)


def test_text_choose_probabilities_train_another_model_as_they_are(tmp_path):
    """Distillation: a teacher's text_choose answer (a RowsTape in its arena) is the student's
    choice_targets with no conversion, as the answer itself or as (values, offsets); both
    forms give the same step, and the student's choices loss is the cross-entropy against
    exactly those probabilities (checked with the reference on the student's weights)."""
    questions = [b"is it red? A or B", b"pick: x y z", b"yes or no?", b"C D"]
    choices = ["AB", "xyz", "yn", "CD"]
    teacher_trainer = uform.Trainer.init_ram(
        uform.Executor.for_ram(1), depth=1, hidden=64, objective=uform.Objective.MASKED,
        choices=uform.Choices(), batch=uform.BatchShape(max_rows_per_device=4, max_columns_per_row=32),
        seed=5)
    teacher_trainer.save(tmp_path / "teacher.safetensors")
    teacher = uform.Model.load_ram(tmp_path / "teacher.safetensors", cpu_class=uform.CPUClass.SERIAL)
    answer = teacher.text_choose(questions, choices, uform.Arena())
    assert answer.dtype == np.float32 and len(answer.offsets) == len(questions) + 1

    losses = []
    for targets in (answer, (answer, answer.offsets)):
        student = uform.Trainer.init_ram(
            uform.Executor.for_ram(1), depth=1, hidden=64, objective=uform.Objective.MASKED,
            choices=uform.Choices(), batch=uform.BatchShape(max_rows_per_device=4, max_columns_per_row=32),
            seed=6)
        model = reference_from(student, tmp_path)
        stats = uform.TrainerStepStats()
        student.step([TEXT] * len(questions), questions, choices=choices, choice_targets=targets, stats=stats)
        losses.append(stats.choices_loss)
    expected = 0.0
    for i, (question, options) in enumerate(zip(questions, choices)):
        ids = list(question[:31]) + [256]
        p = lc.choice_probabilities(model, ids, options.encode(), 0)
        y = torch.from_numpy(np.array(answer.rows(i), dtype=np.float64))
        expected += float(-(y * torch.log(p)).sum().detach())
    expected /= len(questions)
    assert losses[0] == losses[1]
    assert losses[0] == pytest.approx(expected, rel=1e-5)
