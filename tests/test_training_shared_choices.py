"""Trainer.step's choices in text_choose's shared form: one entry for every item, read by the
C trainer as it is (no copy per item), and choice targets passed as tapes without being
rebuilt. Each form must give the step of the per-item form bit for bit: the same items, the
same choice bytes, the same targets, so the same operations in the same order."""
import os
import tempfile

import numpy as np
import pytest

import uform

TEXT = uform.Modality.TEXT
QUESTIONS = [b"is it red? A, B, C or D", b"pick one: A B C D", b"which? ABCD", b"D C B A?"]
SHARED = "ABCD"


def targets_for(count: int) -> list:
    rng = np.random.default_rng(11)
    rows = rng.random((count, len(SHARED))).astype(np.float32)
    return [row / row.sum() for row in rows]


def one_step(**step_keywords):
    """A fresh trainer (same seed), one step; (stats, every weight after it)."""
    trainer = uform.Trainer.init_ram(
        uform.Executor.for_ram(1), depth=1, hidden=64, objective=uform.Objective.MASKED,
        choices=uform.Choices(), batch=uform.BatchShape(max_rows_per_device=4, max_columns_per_row=32),
        seed=3)
    stats = uform.TrainerStepStats()
    trainer.step([TEXT] * len(QUESTIONS), QUESTIONS, stats=stats, **step_keywords)
    names = ["text.bytes", "heads.bytes.bias", "choices.log_temperature", "norm.weight"]
    return stats, {name: trainer.tensor(name).copy() for name in names}


def assert_same_step(a, b):
    assert a[0].choices_loss == b[0].choices_loss and a[0].loss == b[0].loss
    for name in a[1]:
        assert np.array_equal(a[1][name], b[1][name]), name


def test_a_shared_entry_equals_the_entry_repeated():
    targets = targets_for(len(QUESTIONS))
    per_item = one_step(choices=[SHARED] * len(QUESTIONS), choice_targets=targets)
    assert per_item[0].choices_loss > 0
    assert_same_step(per_item, one_step(choices=SHARED, choice_targets=targets))
    assert_same_step(per_item, one_step(choices=[SHARED], choice_targets=targets))
    assert_same_step(per_item, one_step(choices=SHARED.encode(), choice_targets=targets))


def test_target_tapes_are_used_as_they_are_or_realigned():
    """A (values, offsets) tape aligned with the choices is passed without a copy; one whose
    offsets differ (here: the values start 3 floats in) is realigned; both give the
    step of per-item buffers."""
    targets = targets_for(len(QUESTIONS))
    expected = one_step(choices=SHARED, choice_targets=targets)
    n = len(SHARED)
    values = np.concatenate(targets)
    offsets = np.arange(0, n * len(QUESTIONS) + 1, n, dtype=np.uint64)
    assert_same_step(expected, one_step(choices=SHARED, choice_targets=(values, offsets)))
    shifted = np.concatenate([np.full(3, 9.0, np.float32), values, np.full(2, 9.0, np.float32)])
    bounds = offsets + 3
    assert_same_step(expected, one_step(choices=SHARED, choice_targets=(shifted, bounds)))


def test_a_teachers_shared_answer_is_the_students_targets():
    """text_choose with one shared entry answers a RowsTape whose rows follow one another:
    exactly the layout of a shared step's targets."""
    trainer = uform.Trainer.init_ram(
        uform.Executor.for_ram(1), depth=1, hidden=64, objective=uform.Objective.MASKED,
        choices=uform.Choices(), batch=uform.BatchShape(max_rows_per_device=4, max_columns_per_row=32),
        seed=9)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "teacher.safetensors")
        trainer.save(path)
        teacher = uform.Model.load_ram(path, cpu_class=uform.CPUClass.SERIAL)
        answer = teacher.text_choose(QUESTIONS, SHARED, uform.Arena())
        rows = [np.array(answer.rows(i), dtype=np.float32) for i in range(len(QUESTIONS))]
        assert_same_step(one_step(choices=SHARED, choice_targets=answer),
                         one_step(choices=[SHARED] * len(QUESTIONS), choice_targets=rows))


@pytest.mark.parametrize("choices, width, message", [
    (["AB", "CD"], 2, "2 entries for 4 items"),
    ("AA", 2, "given twice"),
    ("ABC", 4, "4 targets for 3 choices"),
])
def test_bad_shared_choices_are_refused(choices, width, message):
    targets = [np.full(width, 1.0 / width, np.float32)] * len(QUESTIONS)
    with pytest.raises(uform.InvalidArgumentError, match=message):
        one_step(choices=choices, choice_targets=targets)
