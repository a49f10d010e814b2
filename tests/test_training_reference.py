"""The CPU trainer against the PyTorch reference: the loss and every parameter's gradient
match autograd in float64, and five AdamW steps match torch.optim.AdamW.

Tolerances. The trainer computes in FP32 (DESIGN section 6): every gradient is a chain of
FP32 GEMMs over at most a few hundred terms and FP32 elementwise backward steps, so its
error is a few units of 2^-24 times the magnitudes involved, amplified by the depth. We
compare each tensor's gradient with atol = 2e-4 * max|reference gradient of that tensor|
(and losses to 1e-5 relative): errors of a wrong formula are O(1) of that scale.
"""

import numpy as np
import pytest
import torch

import uform
from reference import ReferenceModel
from reference.checkpoint import reference_from_trainer
from reference import training as ref

TEXT = uform.Modality.TEXT
SEED = 11
TEXTS = [b"the cat sat on the mat", b"a cat on a mat", b"dogs chase cats",
         b"a dog chased the cat", b"\x00binary\xff\xfe bytes", b"x", b"", b"short and sweet"]
BAGS = [0, 0, 1, 1, 2, 3, 4, 3]


def reference_from(trainer, tmp_path) -> ReferenceModel:
    """The trainer's FP32 masters as a float64 reference model (through its own save)."""
    return reference_from_trainer(trainer, tmp_path)


def reference_loss(model, *, step, objective, contrastive, relations_kw, text_weight=1.0, groups=None):
    total = torch.zeros((), dtype=torch.float64)
    masked = torch.zeros((), dtype=torch.float64)
    if objective != uform.Objective.CONTRASTIVE:
        masked = ref.masked_text_loss(model, TEXTS, seed=SEED, step=step)
        total = total + text_weight * masked
    contrast = torch.zeros((), dtype=torch.float64)
    if objective != uform.Objective.MASKED:
        if objective == uform.Objective.JOINT:
            ids = [ids for _, ids, _ in ref.corrupt_texts(model, TEXTS, seed=SEED, step=step)]
        else:
            ids = [list(t[:model.context]) for t in TEXTS]
        e = ref.embeddings(model, ids)
        contrast = ref.contrastive_loss(
            e, log_inverse_temperature=model.weight("contrastive.log_inverse_temperature"),
            bias=model.weight("contrastive.bias"), bags=BAGS, groups=groups,
            pair_loss=contrastive.pair_loss.name, negatives=contrastive.negatives.name,
            widths=contrastive.matryoshka_dimensions, **relations_kw)
        total = total + contrast
    return total, masked, contrast


def csr(rows, count):
    offsets, ids, weights = [0], [], []
    for anchor in range(count):
        for candidate, weight in rows.get(anchor, []):
            ids.append(candidate)
            weights.append(weight)
        offsets.append(len(ids))
    return (np.array(offsets, np.uint64), np.array(ids, np.uint32), np.array(weights, np.float32))


ATTRACT = csr({4: [(5, 0.5)], 5: [(4, 2.0)]}, len(TEXTS))
REPEL = csr({0: [(2, 3.0)], 2: [(0, 1.5)]}, len(TEXTS))
IGNORE = csr({1: [(3, 1.0)], 7: [(5, 1.0)]}, len(TEXTS))

CASES = [
    ("masked", uform.Objective.MASKED, uform.Contrastive()),
    ("balanced", uform.Objective.CONTRASTIVE, uform.Contrastive(pair_loss=uform.PairLossForm.BALANCED)),
    ("ranked_named", uform.Objective.CONTRASTIVE,
     uform.Contrastive(pair_loss=uform.PairLossForm.RANKED, negatives=uform.Negatives.NAMED)),
    ("sigmoid_matryoshka", uform.Objective.CONTRASTIVE,
     uform.Contrastive(pair_loss=uform.PairLossForm.SIGMOID, matryoshka_dimensions=[32, 64])),
    ("joint", uform.Objective.JOINT, uform.Contrastive(matryoshka_dimensions=[16, 64])),
    ("groups_sigmoid", uform.Objective.JOINT,
     uform.Contrastive(pair_loss=uform.PairLossForm.SIGMOID, temperature_groups=2,
                       inverse_temperature=5.0, bias=-2.0)),
]
GROUPS = [0, 1, 0, 1, 1, 0, 1, 0]


@pytest.mark.parametrize("name,objective,contrastive", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("with_relations", [False, True], ids=["bags", "relations"])
def test_loss_and_gradients_match_autograd(tmp_path, name, objective, contrastive, with_relations):
    trainer = uform.Trainer.init_ram(
        uform.Executor.for_ram(2), depth=2, hidden=64, objective=objective, contrastive=contrastive,
        batch=uform.BatchShape(max_rows_per_device=8, max_columns_per_row=16), seed=SEED)
    model = reference_from(trainer, tmp_path)
    relations = uform.Relations(attract=ATTRACT, repel=REPEL, ignore=IGNORE) if with_relations else None
    relations_kw = dict(attract=ATTRACT, repel=REPEL, ignore=IGNORE) if with_relations else {}
    if objective == uform.Objective.MASKED:
        relations_kw = {}

    groups = GROUPS if contrastive.temperature_groups == 2 else None
    stats = uform.TrainerStepStats()
    trainer.step([TEXT] * len(TEXTS), TEXTS, bags=BAGS, relations=relations, stats=stats,
                 temperature_groups=groups)
    total, masked, contrast = reference_loss(model, step=1, objective=objective,
                                             contrastive=contrastive, relations_kw=relations_kw,
                                             groups=groups)
    assert stats.loss == pytest.approx(total.item(), rel=1e-5, abs=1e-6)
    assert stats.masked_text_loss == pytest.approx(masked.item(), rel=1e-5, abs=1e-6)
    assert stats.contrastive_loss == pytest.approx(contrast.item(), rel=1e-5, abs=1e-6)
    assert stats.truncated == sum(len(t) > 16 for t in TEXTS)

    total.backward()
    compared = 0
    for parameter_name, parameter in model.named_parameters():
        name_in_checkpoint = parameter_name.replace("__", ".")
        try:
            ours = trainer.tensor(name_in_checkpoint, "gradients").reshape(parameter.shape)
        except uform.InvalidArgumentError:
            continue
        expected = (parameter.grad if parameter.grad is not None
                    else torch.zeros_like(parameter)).numpy()
        scale = max(np.abs(expected).max(), 1e-8)
        np.testing.assert_allclose(ours, expected, atol=2e-4 * scale, rtol=0,
                                   err_msg=f"gradient of {name_in_checkpoint}")
        compared += 1
    assert compared >= 2 * 12 + 5


# Classes a trainer pins its kernels to (Trainer.init_ram(cpu_class=...)): every one this
# machine runs, for training is FP32 on all of them.
from conftest import CPU_CLASSES  # noqa: E402

# FP32 products on the FMA paths: AVX2 (HASWELL), AVX-512 (SKYLAKE, SAPPHIRE, AMX), NEON, SVE.
FMA_CLASSES = [c for c in CPU_CLASSES if c != uform.CPUClass.SERIAL]


def pinned_step(cpu_class, tmp_path):
    """One JOINT step of a trainer pinned to cpu_class: (stats, {name: gradients}, reference)."""
    trainer = uform.Trainer.init_ram(
        uform.Executor.for_ram(2), depth=2, hidden=64, objective=uform.Objective.JOINT,
        contrastive=uform.Contrastive(matryoshka_dimensions=[16, 64]),
        batch=uform.BatchShape(max_rows_per_device=8, max_columns_per_row=16), seed=SEED,
        cpu_class=cpu_class)
    tmp_path.mkdir()
    model = reference_from(trainer, tmp_path)
    stats = uform.TrainerStepStats()
    trainer.step([TEXT] * len(TEXTS), TEXTS, bags=BAGS, stats=stats)
    names = [n.replace("__", ".") for n, _ in model.named_parameters() if not n.startswith("train__")]
    return stats, {n: trainer.tensor(n, "gradients") for n in names}, model


@pytest.mark.parametrize("cpu_class", CPU_CLASSES, ids=lambda c: c.name)
def test_pinned_class_matches_autograd(tmp_path, cpu_class):
    """A trainer pinned to a class computes the float64 reference's loss and gradients within
    FP32 rounding (the tolerances of test_loss_and_gradients_match_autograd), and every FMA
    class gives AUTO's bits exactly (sgemm.h: one FMA chain per element on every path)."""
    contrastive = uform.Contrastive(matryoshka_dimensions=[16, 64])
    stats, gradients, model = pinned_step(cpu_class, tmp_path / "pinned")
    total, masked, contrast = reference_loss(model, step=1, objective=uform.Objective.JOINT,
                                             contrastive=contrastive, relations_kw={})
    assert stats.loss == pytest.approx(total.item(), rel=1e-5, abs=1e-6)
    total.backward()
    for name, parameter in model.named_parameters():
        name = name.replace("__", ".")
        if name not in gradients:
            continue
        expected = (parameter.grad if parameter.grad is not None
                    else torch.zeros_like(parameter)).numpy()
        scale = max(np.abs(expected).max(), 1e-8)
        np.testing.assert_allclose(gradients[name].reshape(expected.shape), expected,
                                   atol=2e-4 * scale, rtol=0, err_msg=f"{cpu_class.name}: {name}")
    _, automatic, _ = pinned_step(None, tmp_path / "auto")
    same = all(np.array_equal(gradients[n].view(np.uint32), automatic[n].view(np.uint32))
               for n in gradients)
    if cpu_class in FMA_CLASSES:
        assert same, f"{cpu_class.name}: gradients differ from AUTO's bits"
    else:  # SERIAL multiplies, then adds: the pin really ran other kernels
        assert not same, "SERIAL: gradients equal AUTO's bits: the pin was not applied"


def test_pinned_class_errors():
    executor = uform.Executor.for_ram(1)
    with pytest.raises(uform.InvalidArgumentError, match="cpu_class: 42"):
        uform.Trainer.init_ram(executor, depth=1, hidden=64, cpu_class=42)
    missing = [c for c in uform.CPUClass if c not in CPU_CLASSES]
    for cpu_class in missing:
        with pytest.raises(uform.UnsupportedError, match="cpu_class"):
            uform.Trainer.init_ram(executor, depth=1, hidden=64, cpu_class=cpu_class)


def test_five_adamw_steps_match_torch(tmp_path):
    """The update rule alone: the trainer's own gradients of each step drive
    torch.optim.AdamW (float32, foreach=False) with the reference schedule and clipping,
    starting from the same masters; after five steps the weights agree to FP32 rounding."""
    schedule = uform.Schedule(learning_rate=1e-2, min_learning_rate=1e-3, warmup_steps=2, steps=6)
    trainer = uform.Trainer.init_ram(
        uform.Executor.for_ram(2), depth=1, hidden=64, objective=uform.Objective.JOINT,
        batch=uform.BatchShape(max_rows_per_device=8, max_columns_per_row=16), schedule=schedule,
        seed=SEED)
    model = reference_from(trainer, tmp_path).float()
    named = [(n.replace("__", "."), p) for n, p in model.named_parameters()]
    named = [(n, p) for n, p in named if not n.startswith("train.")]
    optimizer = torch.optim.AdamW(ref.param_groups(named), lr=1.0, betas=ref.ADAMW_BETAS,
                                  eps=ref.ADAMW_EPS, foreach=False)
    for step in range(1, 6):
        trainer.step([TEXT] * len(TEXTS), TEXTS, bags=BAGS)
        rate = ref.learning_rate_at(step, learning_rate=1e-2, min_learning_rate=1e-3,
                                    warmup_steps=2, steps=6)
        for group in optimizer.param_groups:
            group["lr"] = rate
        for name, parameter in named:
            parameter.grad = torch.from_numpy(trainer.tensor(name, "gradients").reshape(parameter.shape))
        ref.clip_([p.grad for _, p in named])
        optimizer.step()
    for name, parameter in named:
        ours = trainer.tensor(name).reshape(parameter.shape)
        np.testing.assert_allclose(ours, parameter.detach().numpy(), atol=2e-6, rtol=1e-5,
                                   err_msg=f"weights of {name} after 5 steps")
