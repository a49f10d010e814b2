"""The choices term learns and calibrates: a tiny encoder trained on a synthetic
multiple-choice task (examples/choice_task.py) answers held-out questions right, and its
learned per-group temperatures make text_choose's probabilities calibrated.

The two groups of questions read alike; group 0's labels are always right, group 1's are
replaced by a random letter 60% of the time, so the ideal forecast is the right letter with
probability 1 on group 0 and 0.55 on group 1. Accuracy is measured against the right letter;
the expected calibration error (ECE, 10 confidence bins) against each group's known label
distribution. "Uncalibrated" is the same trained checkpoint read with temperature 1 (its
choices.log_temperature removed), so it isolates what the learned temperatures buy.
Everything is measured through Model.load_ram and text_choose (BF16 weights, the SAPPHIRE
class on this machine), not through the trainer.
"""
import os
import sys
import time

import numpy as np

import uform
from reference import safetensors_io

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from choice_task import CHOICES, ChoiceTask, accuracy, expected_calibration_error  # noqa: E402

TEXT = uform.Modality.TEXT
STEPS = 1500
BATCH = 64


def held_out(path, split):
    model = uform.Model.load_ram(path)
    answer = model.text_choose(split.texts, CHOICES, uform.Arena(), temperature_groups=split.groups)
    return np.array(answer).reshape(len(split.texts), len(CHOICES))


def without_temperatures(path, out):
    tensors, metadata = safetensors_io.read(path)
    kept = {name: value for name, value in tensors.items() if name != "choices.log_temperature"}
    assert len(kept) == len(tensors) - 1
    safetensors_io.write(out, kept, metadata)
    return out


def test_choices_training_learns_and_calibrates(tmp_path):
    started = time.perf_counter()
    task = ChoiceTask(noise=0.6)
    train, test = task.split(STEPS * BATCH, seed=1), task.split(400, seed=2)
    trainer = uform.Trainer.init_ram(
        uform.Executor.for_ram(2), depth=2, hidden=64, objective=uform.Objective.MASKED,
        choices=uform.Choices(temperature_groups=2),
        batch=uform.BatchShape(max_rows_per_device=BATCH, max_columns_per_row=32),
        schedule=uform.Schedule(learning_rate=2e-3, warmup_steps=50, steps=STEPS), seed=0)
    trainer.save(tmp_path / "step0.safetensors")
    before = held_out(tmp_path / "step0.safetensors", test)

    targets = train.targets()
    stats = uform.TrainerStepStats()
    for step in range(STEPS):
        items = slice(step * BATCH, (step + 1) * BATCH)
        trainer.step([TEXT] * BATCH, train.texts[items], choices=CHOICES, choice_targets=targets[items],
                     temperature_groups=train.groups[items], stats=stats)
    trainer.save(tmp_path / "trained.safetensors")
    calibrated = held_out(tmp_path / "trained.safetensors", test)
    uncalibrated = held_out(without_temperatures(tmp_path / "trained.safetensors",
                                                 tmp_path / "uncalibrated.safetensors"), test)
    temperatures = np.exp(trainer.tensor("choices.log_temperature"))
    np.testing.assert_allclose(calibrated.sum(axis=1), 1.0, atol=1e-5)

    results = {name: (accuracy(p, test), expected_calibration_error(p, test))
               for name, p in (("untrained", before), ("uncalibrated", uncalibrated),
                               ("calibrated", calibrated))}
    print("\n" + "; ".join(f"{name}: accuracy {a:.3f}, ECE {e:.3f}" for name, (a, e) in results.items())
          + f"; temperatures {temperatures.round(3)}; {time.perf_counter() - started:.0f} s")
    assert results["untrained"][0] < 0.5, "an untrained model should be near chance (0.25)"
    assert results["calibrated"][0] >= 0.95
    # Temperature does not move the argmax: the same accuracy either way.
    assert results["uncalibrated"][0] == results["calibrated"][0]
    # Group 0 (clean labels) needs a sharper softmax than group 1 (60% noise).
    assert temperatures[0] < temperatures[1]
    assert results["calibrated"][1] <= 0.03
    assert results["calibrated"][1] < 0.5 * results["uncalibrated"][1]
