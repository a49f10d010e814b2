"""Trainer.deferred(executor): step and save run by the C library's submission
(uform_trainer_step_submit / uform_trainer_save_submit) and answer a Deferred.

Invariants: a deferred step equals the blocking one bit for bit (same stats, same embeddings,
same weights); the trainer refuses a second step, a save or a tensor read while a call is
pending, with a clear error, and is usable once it completes; the buffers a pending call
borrows stay alive when the caller drops every reference to them; an error of the step
(a bad batch) surfaces from the Deferred and leaves the trainer usable; a deferred save
writes a checkpoint that resumes to the same state."""
import gc
import threading

import numpy as np
import pytest

import uform

TEXT = uform.Modality.TEXT
TEXTS = [b"first item", b"second", b"a third, longer item", b"fourth"]


def new_trainer():
    return uform.Trainer.init_ram(uform.Executor.for_ram(2), depth=1, hidden=64, seed=8,
                                  batch=uform.BatchShape(max_rows_per_device=4, max_columns_per_row=32))


def test_a_deferred_step_equals_the_blocking_one():
    blocking, deferred = new_trainer(), new_trainer()
    queue = uform.Executor.for_ram(1)
    for _ in range(2):
        stats_a, stats_b = uform.TrainerStepStats(), uform.TrainerStepStats()
        a = np.array(blocking.step([TEXT] * 4, TEXTS, arena=uform.Arena(), stats=stats_a))
        pending = deferred.deferred(queue).step([TEXT] * 4, TEXTS, arena=uform.Arena(), stats=stats_b)
        assert isinstance(pending, uform.Deferred)
        b = np.array(pending.result())
        assert np.array_equal(a, b)
        assert stats_a.loss == stats_b.loss and stats_a.step == stats_b.step
    assert np.array_equal(blocking.tensor("norm.weight"), deferred.tensor("norm.weight"))
    # without an arena the Deferred answers None
    assert deferred.deferred(queue).step([TEXT] * 4, TEXTS).result() is None


def test_a_pending_call_holds_the_trainer(tmp_path):
    trainer = new_trainer()
    queue = uform.Executor.for_ram(1)
    entered, release = threading.Event(), threading.Event()

    def hold(done, total):
        entered.set()
        release.wait(30)
        return False

    saving = trainer.deferred(queue).save(tmp_path / "run.safetensors", progress=hold, progress_steps=1)
    assert entered.wait(30)
    assert not saving.done()
    with pytest.raises(uform.InvalidArgumentError, match="in use by another call"):
        trainer.step([TEXT] * 4, TEXTS)
    with pytest.raises(uform.InvalidArgumentError, match="in use by another call"):
        trainer.deferred(queue).step([TEXT] * 4, TEXTS)
    with pytest.raises(uform.InvalidArgumentError, match="in use by another call"):
        trainer.tensor("norm.weight")
    release.set()
    assert saving.result() is None
    trainer.step([TEXT] * 4, TEXTS)  # usable again
    resumed = uform.Trainer.init_ram(uform.Executor.for_ram(1), resume=tmp_path / "run.safetensors")
    assert resumed.tensor("norm.weight").shape == trainer.tensor("norm.weight").shape


def test_borrowed_buffers_outlive_the_caller(tmp_path):
    """A step queued behind another call holds the caller's only references to its
    contents and bags; dropping them and collecting must not free what the C job reads."""
    reference = new_trainer()
    reference.step([TEXT] * 4, TEXTS, bags=np.array([0, 0, 1, 1], np.uint32))
    trainer, other = new_trainer(), new_trainer()
    queue = uform.Executor.for_ram(1)
    entered, release = threading.Event(), threading.Event()

    def hold(done, total):
        entered.set()
        release.wait(30)
        return False

    # the queue's first job, held in its progress handler, keeps the step queued
    blocker = other.deferred(queue).save(tmp_path / "blocker.safetensors", progress=hold, progress_steps=1)
    assert entered.wait(30)
    contents = [bytes(t) for t in TEXTS]
    bags = np.array([0, 0, 1, 1], np.uint32)
    pending = trainer.deferred(queue).step([TEXT] * 4, contents, bags=bags, arena=uform.Arena())
    del contents, bags
    gc.collect()
    assert not pending.done()
    release.set()
    blocker.result()
    pending.result()
    assert np.array_equal(trainer.tensor("norm.weight"), reference.tensor("norm.weight"))


def test_errors_surface_from_the_deferred():
    trainer = new_trainer()
    queue = uform.Executor.for_ram(1)
    # too many bags ids for the items: refused inside the C step (the job), not at submission
    pending = trainer.deferred(queue).step([TEXT] * 4, TEXTS, relations=uform.Relations(
        attract=(np.array([0, 1, 1, 1, 1], np.uint64), np.array([9], np.uint32), None)))
    with pytest.raises(uform.InvalidArgumentError):
        pending.result()
    trainer.step([TEXT] * 4, TEXTS)  # the trainer was given back
    with pytest.raises(uform.InvalidArgumentError, match="executor"):
        trainer.deferred("not an executor")
