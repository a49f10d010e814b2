"""One training step, uform against PyTorch FP32: pytest-benchmark, plus the checks that
both sides compute the same step.

    python3 -m pytest -q bench/test_train_bench.py --benchmark-columns=min,mean,rounds
    UFORM_BENCH_QUICK=1 python3 -m pytest -q bench/test_train_bench.py ...   (depth 2, hidden 64, 16 x 64)

The workload and contenders are bench/train_report.py's (depth 4, hidden 256, JOINT, 64
texts of 256 bytes, bags of two; the same threads on both sides). Each benchmark round is
one optimizer step (after WARMUP_STEPS untimed ones; a short idle pause before each,
untimed); tokens per second of the best step go to extra_info, and the uform/torch ratio
to the second one run. bench/train_report.py runs the same comparison without pytest,
interleaved, with torch BF16 autocast too, and writes docs/benchmarks-training.md.
"""
import json

import numpy as np
import pytest
import torch

import train_report
import uform
from conftest import THREADS
from reference import ReferenceModel, safetensors_io
from reference import training as ref
from reference.batched_training import BatchedTrainer, BatchedTrainingModel, prepare_batch

TEXT = uform.Modality.TEXT
SEED = 11
RNG = np.random.default_rng(4)
# Lengths 1..90 at context 64: rows padded to the longest, texts past 64 bytes cut.
SMALL_TEXTS = [bytes(RNG.integers(0, 256, size=int(n), dtype=np.uint8)) for n in (1, 90, 17, 64, 33, 2, 70, 40)]
SMALL_BAGS = [0, 0, 1, 1, 2, 3, 4, 3]       # items 4 and 6 have no positive
SCHEDULE = uform.Schedule(learning_rate=1e-2, min_learning_rate=1e-3, warmup_steps=1, steps=100)

# key -> (label, tokens per second of the best step), filled by the benchmarks.
RATES: dict = {}


def small_trainer(widths=None) -> "uform.Trainer":
    contrastive = uform.Contrastive(matryoshka_dimensions=widths) if widths else None
    return uform.Trainer.init_ram(
        uform.Executor.for_ram(THREADS), depth=2, hidden=64, objective=uform.Objective.JOINT,
        contrastive=contrastive, batch=uform.BatchShape(max_rows_per_device=8, max_columns_per_row=64),
        schedule=SCHEDULE, seed=SEED)


@pytest.mark.parametrize("widths", [None, [16, 64]], ids=["one_width", "matryoshka"])
def test_batched_training_matches_reference(tmp_path, widths):
    """The torch step's math is the reference's: on the same weights and masks, the
    batched FP32 losses are within 1e-4 of training.py's float64 ones, and so are the
    gradients (relative to each tensor's largest)."""
    trainer = small_trainer(widths)
    path = str(tmp_path / "start.safetensors")
    trainer.save(path)
    stored, metadata = safetensors_io.read(path)
    masters = {name[len("train.master."):]: value.astype(np.float64)
               for name, (_, value) in stored.items() if name.startswith("train.master.")}
    reference = ReferenceModel(masters, json.loads(metadata["uform"]), dtype=torch.float64)
    masked = ref.masked_text_loss(reference, SMALL_TEXTS, seed=SEED, step=1)
    corrupted = [ids for _, ids, _ in ref.corrupt_texts(reference, SMALL_TEXTS, seed=SEED, step=1)]
    contrast = ref.contrastive_loss(
        ref.embeddings(reference, corrupted),
        log_inverse_temperature=reference.weight("contrastive.log_inverse_temperature"),
        bias=reference.weight("contrastive.bias"), bags=SMALL_BAGS, widths=widths)
    (masked + contrast).backward()

    model = BatchedTrainingModel.from_trainer_save(path, widths=widths)
    batch = prepare_batch(SMALL_TEXTS, SMALL_BAGS, seed=SEED, step=1, context=model.context)
    assert batch.ids.shape == (8, 64) and not bool(batch.selected[0, 1:].any()), "padded, cut at 64"
    total, ours_masked, ours_contrast = model.losses(batch)
    assert ours_masked.item() == pytest.approx(masked.item(), abs=1e-4)
    assert ours_contrast.item() == pytest.approx(contrast.item(), abs=1e-4)
    assert total.item() == pytest.approx((masked + contrast).item(), abs=1e-4)
    total.backward()
    for name, parameter in model.named_parameters():
        expected = reference.get_parameter(name).grad
        expected = torch.zeros_like(parameter, dtype=torch.float64) if expected is None else expected
        got = torch.zeros_like(parameter) if parameter.grad is None else parameter.grad
        scale = max(expected.abs().max().item(), 1e-8)
        np.testing.assert_allclose(got.double().numpy(), expected.numpy(), atol=1e-4 * scale, rtol=0,
                                   err_msg=f"gradient of {name}")


def test_batched_training_steps_like_uform(tmp_path):
    """Both contenders do the same step: from the trainer's initial weights, three
    optimizer steps of the torch FP32 trainer (same masks, schedule, clipping, decay
    groups) report the uform trainer's losses and learning rates; BF16 autocast is close."""
    trainer = small_trainer()
    path = str(tmp_path / "start.safetensors")
    trainer.save(path)
    fp32 = BatchedTrainer(BatchedTrainingModel.from_trainer_save(path), learning_rate=1e-2,
                          min_learning_rate=1e-3, warmup_steps=1, steps=100)
    bf16 = BatchedTrainer(BatchedTrainingModel.from_trainer_save(path), learning_rate=1e-2,
                          min_learning_rate=1e-3, warmup_steps=1, steps=100, autocast=True)
    stats = uform.TrainerStepStats()
    for step in range(1, 4):
        batch = prepare_batch(SMALL_TEXTS, SMALL_BAGS, seed=SEED, step=step, context=64)
        trainer.step([TEXT] * len(SMALL_TEXTS), SMALL_TEXTS, bags=SMALL_BAGS, stats=stats)
        ours = fp32.step(batch)
        low = bf16.step(batch)
        assert stats.step == step
        assert ours.learning_rate == pytest.approx(stats.learning_rate, rel=1e-6)
        assert ours.loss == pytest.approx(stats.loss, rel=1e-4)
        assert ours.masked_text_loss == pytest.approx(stats.masked_text_loss, rel=1e-4)
        assert ours.contrastive_loss == pytest.approx(stats.contrastive_loss, rel=1e-4)
        assert low.loss == pytest.approx(stats.loss, rel=1e-2)


@pytest.mark.parametrize("key", ["uform", "torch-fp32"])
def test_training_step(benchmark, tmp_path, key):
    warmup, rounds = train_report.WARMUP_STEPS, train_report.rounds()
    found, facts = train_report.contenders(str(tmp_path), THREADS, warmup + rounds, keys=(key,))
    (contender,) = found
    tokens = train_report.TEXTS * train_report.TEXT_BYTES
    shape = train_report.SHAPE
    benchmark.group = (f"training step (d{shape['depth']} h{shape['hidden']}, {train_report.TEXTS} rows "
                       f"x {train_report.TEXT_BYTES} columns, JOINT)")
    benchmark.extra_info.update(label=contender.label, threads=THREADS, tokens=tokens, **shape,
                                rows=train_report.TEXTS, columns=train_report.TEXT_BYTES)
    pause = lambda: train_report.time.sleep(train_report.PAUSE_S)  # noqa: E731  (untimed)
    losses = benchmark.pedantic(contender.step, setup=pause, rounds=rounds, iterations=1, warmup_rounds=warmup)
    assert np.isfinite(losses.loss) and losses.loss > 0
    if benchmark.stats is not None:    # None under --benchmark-disable
        rate = tokens / benchmark.stats.stats.min
        benchmark.extra_info["tokens_per_second"] = rate
        RATES[key] = (contender.label, rate)
        if "uform" in RATES and "torch-fp32" in RATES:
            benchmark.extra_info["uform_speed_over_torch_fp32"] = RATES["uform"][1] / RATES["torch-fp32"][1]
