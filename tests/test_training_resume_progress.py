"""Trainer.init_ram(resume=..., progress=...): the handler hears the checkpoint being read
(the floats read and checked, three per parameter: master weights and both moments), at
most progress_steps times, in order, the last time done == total; asking to stop, or
raising, fails the init and leaves nothing behind; a fresh run does not report."""
import numpy as np
import pytest

import uform

TEXT = uform.Modality.TEXT


def make_run(tmp_path):
    executor = uform.Executor.for_ram(1)
    shape = dict(depth=2, hidden=64, batch=uform.BatchShape(max_rows_per_device=4, max_columns_per_row=16))
    trainer = uform.Trainer.init_ram(executor, seed=4, **shape)
    trainer.step([TEXT] * 4, [b"first", b"second item", b"third", b"fourth one"])
    path = tmp_path / "run.safetensors"
    trainer.save(path)
    return executor, shape, path, trainer


def test_resume_reports_progress(tmp_path):
    executor, shape, path, trainer = make_run(tmp_path)
    calls = []
    resumed = uform.Trainer.init_ram(executor, resume=path, progress=lambda d, t: calls.append((d, t)),
                                     progress_steps=7, **shape)
    assert 1 <= len(calls) <= 7
    totals = {t for _, t in calls}
    assert len(totals) == 1
    total = totals.pop()
    parameters = sum(trainer.tensor(name).size for name in
                     ["text.bytes", "text.modality", "norm.weight", "norm.bias", "heads.embedding.weight"])
    assert total > 3 * parameters  # and the blocks' tensors besides
    assert calls[-1] == (total, total)
    assert all(a[0] < b[0] for a, b in zip(calls, calls[1:]))
    # the resumed run holds the saved state
    for name in ["text.bytes", "norm.weight"]:
        assert np.array_equal(resumed.tensor(name), trainer.tensor(name))

    fresh = []
    uform.Trainer.init_ram(executor, progress=lambda d, t: fresh.append((d, t)), **shape)
    assert fresh == []


def test_resume_cancelled_by_the_handler(tmp_path):
    executor, shape, path, _ = make_run(tmp_path)
    with pytest.raises(uform.CancelledError):
        uform.Trainer.init_ram(executor, resume=path, progress=lambda d, t: True, progress_steps=3, **shape)

    class Boom(Exception):
        pass

    def explode(done, total):
        raise Boom("from the handler")

    with pytest.raises(Boom):
        uform.Trainer.init_ram(executor, resume=path, progress=explode, **shape)
    # the checkpoint and the executor are still fine
    uform.Trainer.init_ram(executor, resume=path, **shape).step([TEXT] * 2, [b"again", b"fine"])
