"""Reliability: the crashes, silent corruption and data loss a hostile test found
(docs/reliability.md). Each case that once crashed or hung runs in a subprocess with a
timeout, so a regression fails its test instead of killing or stalling the suite."""
import json
import os
import struct
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import uform

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXT = uform.Modality.TEXT


def run_script(source: str, timeout: float = 120, **environment: str) -> subprocess.CompletedProcess:
    """Runs Python source in a fresh interpreter that imports this checkout's uform."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **environment)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(source)], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


def assert_clean(result: subprocess.CompletedProcess, expected_stdout: str = "ok") -> None:
    assert result.returncode == 0, (
        f"exit status {result.returncode} (negative: killed by that signal)\n"
        f"stdout: {result.stdout[-2000:]}\nstderr: {result.stderr[-2000:]}")
    assert result.stdout.strip().splitlines()[-1] == expected_stdout, result.stdout


# ---- 1. the training workspace ----------------------------------------------------------

@pytest.mark.parametrize("depth, hidden, texts", [
    (64, 64, [b"a"]),                       # SIGSEGV before the workspace was measured
    (128, 64, [b"a"]),                      # "free(): invalid pointer"
    (256, 64, [b"ab", b"cd", b"ef"]),       # "double free or corruption"
    (32, 256, [b"a longer text " * 8]),
])
def test_deep_narrow_trainers_step(depth, hidden, texts):
    assert_clean(run_script(f"""
        import uform
        t = uform.Trainer.init_ram(uform.Executor.for_ram(threads=1), depth={depth}, hidden={hidden})
        for _ in range(2):
            t.step([uform.Modality.TEXT] * {len(texts)}, {texts!r})
        print("ok")
    """, MALLOC_CHECK_="3"))


# ---- 2. one trainer, two threads ---------------------------------------------------------

def test_trainer_stepped_from_two_threads_refuses_the_second():
    result = run_script("""
        import threading, uform
        t = uform.Trainer.init_ram(uform.Executor.for_ram(threads=2), depth=2, hidden=64,
                                   objective=uform.Objective.JOINT)
        texts = [b"hello world %d" % i for i in range(8)]
        outcomes = []
        def go():
            for _ in range(3):
                try:
                    t.step([uform.Modality.TEXT] * 8, texts, bags=[i // 2 for i in range(8)])
                    outcomes.append("stepped")
                except uform.InvalidArgumentError as error:
                    assert "in use" in str(error), error
                    outcomes.append("refused")
        threads = [threading.Thread(target=go) for _ in range(2)]
        [thread.start() for thread in threads]
        [thread.join() for thread in threads]
        stats = uform.TrainerStepStats()
        t.step([uform.Modality.TEXT] * 8, texts, stats=stats)
        assert stats.step == outcomes.count("stepped") + 1, (stats.step, outcomes)
        print(sorted(set(outcomes)))
        print("ok")
    """)
    assert_clean(result)


# ---- 3. a pending Deferred keeps what it borrows alive -----------------------------------

@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    from reference.checkpoint import write_random_checkpoint

    path = tmp_path_factory.mktemp("reliability") / "model.safetensors"
    write_random_checkpoint(str(path), depth=4, hidden=256, dimensions=64, context=256)
    return str(path)


def test_pending_deferred_survives_cyclic_garbage_collection(model_path):
    # Three runs: the crash depended on which object the collector freed first.
    for _ in range(3):
        assert_clean(run_script(f"""
            import gc, uform
            class Holder:
                def __init__(self):
                    self.model = uform.Model.load_ram({model_path!r})
                    self.pool = uform.Executor.for_ram(threads=2)
                    self.pending = self.model.deferred(self.pool).text_encode([b"x" * 200] * 300,
                                                                              uform.Arena())
                    self.callback = self.method       # a reference cycle
                def method(self):
                    pass
            holder = Holder()
            del holder
            gc.collect()
            print("ok")
        """))


def test_pending_deferred_at_interpreter_exit(model_path):
    result = run_script(f"""
        import uform
        model = uform.Model.load_ram({model_path!r})
        pool = uform.Executor.for_ram(threads=2)
        pending = [model.deferred(pool).text_encode([b"x" * 200] * 100, uform.Arena()) for _ in range(3)]
        print("ok")
        raise RuntimeError("a script that fails before .result()")
    """)
    assert result.returncode == 1, (result.returncode, result.stderr[-2000:])
    assert "a script that fails before .result()" in result.stderr
    assert "Segmentation" not in result.stderr and "Fatal" not in result.stderr


def test_dropped_deferred_results_are_still_written(model_path):
    model = uform.Model.load_ram(model_path)
    pool = uform.Executor.for_ram(threads=2)
    arena = uform.Arena()
    dropped_texts, texts = [b"y" * 120] * 50, [b"z" * 30] * 7
    model.deferred(pool).text_encode(dropped_texts, arena)   # dropped at once, never waited
    # The arena stays taken until the dropped job has run; then it is free again.
    deadline = time.monotonic() + 60
    while True:
        try:
            encoded = model.text_encode(texts, arena)
            break
        except uform.InvalidArgumentError as error:
            assert "in use" in str(error) and time.monotonic() < deadline
            time.sleep(0.01)
    # Jobs run in order: once a later one is done, the dropped one has run too. Had the
    # synchronous call not waited for it, the dropped job would have overwritten it.
    model.deferred(pool).text_encode([b"x"], uform.Arena()).result()
    expected = model.text_encode(texts, uform.Arena())
    assert np.array_equal(np.asarray(encoded.embeddings), np.asarray(expected.embeddings))


# ---- 4. waiting on the executor's own submission thread ----------------------------------

def test_progress_handler_waiting_on_the_same_executor_fails_instead_of_hanging(model_path):
    assert_clean(run_script(f"""
        import uform
        model = uform.Model.load_ram({model_path!r})
        deferred = model.deferred(uform.Executor.for_ram(threads=2))
        seen = {{}}
        def handler(done, total):
            if "inner" not in seen:
                seen["inner"] = deferred.text_encode([b"y" * 50] * 10, uform.Arena())
                try:
                    seen["inner"].result()
                except uform.InvalidArgumentError as error:
                    seen["error"] = str(error)
        outer = deferred.text_encode([b"x" * 200] * 100, uform.Arena(), progress=handler)
        outer.result()
        assert "submission thread" in seen["error"], seen
        assert seen["inner"].result().embeddings.shape[0] == 10   # waitable afterwards
        print("ok")
    """, timeout=60))


# ---- 5. the arena guard covers queued jobs ------------------------------------------------

def test_queued_job_holds_its_arena(model_path):
    model = uform.Model.load_ram(model_path)
    deferred = model.deferred(uform.Executor.for_ram(threads=2))
    long = deferred.text_encode([b"x" * 200] * 300, uform.Arena())
    a2 = uform.Arena()
    queued = deferred.text_encode([b"q" * 20] * 5, a2)
    if not queued.done():
        with pytest.raises(uform.InvalidArgumentError, match="in use"):
            model.text_encode([b"sync"], a2)
    long.result()
    first = np.array(queued.result().embeddings)
    expected = np.asarray(model.text_encode([b"q" * 20] * 5, uform.Arena()).embeddings)
    assert np.array_equal(first, expected)
    assert model.text_encode([b"sync"], a2).embeddings.shape[0] == 1


# ---- 6. a diverged run ----------------------------------------------------------------------

def test_diverged_step_is_refused_and_the_last_good_state_saves(tmp_path):
    trainer = uform.Trainer.init_ram(uform.Executor.for_ram(threads=1), depth=1, hidden=64,
                                     schedule=uform.Schedule(learning_rate=1e30, warmup_steps=1, steps=10))
    texts = [b"hello", b"world"]
    stats = uform.TrainerStepStats()
    trainer.step([TEXT] * 2, texts, stats=stats)
    assert stats.step == 1
    good = {name: trainer.tensor(name).copy() for name in ("text.bytes", "blocks.0.mlp.up.weight")}
    with pytest.raises(uform.DivergedError, match="not applied"):
        trainer.step([TEXT] * 2, texts)
    with pytest.raises(FloatingPointError):      # DivergedError is one
        trainer.step([TEXT] * 2, texts)
    for name, values in good.items():
        assert np.array_equal(trainer.tensor(name), values), name
    # The step counter did not move; what saves is the last good step, and it loads.
    path = tmp_path / "run.safetensors"
    trainer.save(path)
    uform.Model.load_ram(path)
    resumed = uform.Trainer.init_ram(uform.Executor.for_ram(threads=1), resume=path,
                                     schedule=uform.Schedule(learning_rate=1e30, warmup_steps=1, steps=10))
    for name, values in good.items():
        assert np.array_equal(resumed.tensor(name), values), name
    # Step 1 at this rate left weights near 1e30: finite, but every later step diverges.
    with pytest.raises(uform.DivergedError, match="step 2"):
        resumed.step([TEXT] * 2, texts)


# ---- 7. resume validates the training state ----------------------------------------------

def _read_safetensors(path):
    data = open(path, "rb").read()
    (length,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + length]), data[8 + length:]


def _write_safetensors(path, header, body):
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as file:
        file.write(struct.pack("<Q", len(text)) + text + body)


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("resume") / "run.safetensors"
    trainer = uform.Trainer.init_ram(uform.Executor.for_ram(threads=1), depth=1, hidden=64)
    trainer.step([TEXT] * 2, [b"hello", b"world"])
    trainer.save(path)
    return path


def _patched(saved_run, tmp_path, tensor, value):
    header, body = _read_safetensors(saved_run)
    begin, _end = header[tensor]["data_offsets"]
    body = bytearray(body)
    body[begin + 8:begin + 12] = struct.pack("<f", value)
    path = tmp_path / "patched.safetensors"
    _write_safetensors(path, header, bytes(body))
    return path


@pytest.mark.parametrize("tensor, value, message", [
    ("train.master.text.bytes", float("inf"), "non-finite"),
    ("train.master.blocks.0.mlp.up.weight", float("nan"), "non-finite"),
    ("train.first_moment.text.bytes", float("-inf"), "non-finite"),
    ("train.second_moment.text.bytes", float("nan"), "non-finite"),
    ("train.second_moment.blocks.0.attention.qkv.weight", -1e-3, "negative second moment"),
])
def test_resume_refuses_a_corrupt_training_state(saved_run, tmp_path, tensor, value, message):
    path = _patched(saved_run, tmp_path, tensor, value)
    with pytest.raises(uform.FormatError, match=message):
        uform.Trainer.init_ram(uform.Executor.for_ram(threads=1), resume=path)


@pytest.mark.parametrize("step", [2 ** 64 - 1, 2 ** 53 + 1])
def test_resume_refuses_an_impossible_step_counter(saved_run, tmp_path, step):
    header, body = _read_safetensors(saved_run)
    training = json.loads(header["__metadata__"]["uform.train"])
    training["step"] = step
    header["__metadata__"]["uform.train"] = json.dumps(training)
    path = tmp_path / "step.safetensors"
    _write_safetensors(path, header, body)
    with pytest.raises(uform.FormatError, match="step counter"):
        uform.Trainer.init_ram(uform.Executor.for_ram(threads=1), resume=path)


def test_resume_of_the_untouched_file_still_works(saved_run, tmp_path):
    header, body = _read_safetensors(saved_run)
    path = tmp_path / "same.safetensors"
    _write_safetensors(path, header, body)   # rewritten by this test's writer: the control
    uform.Trainer.init_ram(uform.Executor.for_ram(threads=1), resume=path)


# ---- 10. ids are integers in range, never coerced ---------------------------------------

BAD_IDS = [
    ([0.9, 0.1, 1.5], "bags\\[0\\]"),
    (["3", "3", "4"], "bags\\[0\\]"),
    ([True, False, True], "bags\\[0\\]"),
    ([0, 0, 2 ** 32], "bags\\[2\\]"),
    ([0, -1, 1], "bags\\[1\\]"),
    (np.array([0.0, 0.0, 1.0]), "float64"),
    (np.array([0, -1, 1]), "bags\\[1\\]"),
    (np.array([[0, 0, 1]]), "1-D"),
    (np.array([True, False, True]), "bool"),
    (b"\x00\x00\x01", "uint32"),
    ([0, 1], "2 values for 3 items"),
]


@pytest.fixture(scope="module")
def contrastive_trainer():
    return uform.Trainer.init_ram(uform.Executor.for_ram(threads=1), depth=1, hidden=64,
                                  objective=uform.Objective.CONTRASTIVE)


@pytest.mark.parametrize("bags, message", BAD_IDS)
def test_bags_must_be_integers_in_range(contrastive_trainer, bags, message):
    with pytest.raises(uform.InvalidArgumentError, match=message):
        contrastive_trainer.step([TEXT] * 3, [b"a", b"b", b"c"], bags=bags)


@pytest.mark.parametrize("bags", [[0, 0, 1], np.array([0, 0, 1]), np.array([0, 0, 1], dtype=np.uint32),
                                  np.array([0, 0, 1], dtype=np.int16), [np.int64(0), np.uint8(0), 1]])
def test_integer_bags_of_every_kind_train_alike(bags):
    losses = []
    for kind in ([0, 0, 1], bags):
        trainer = uform.Trainer.init_ram(uform.Executor.for_ram(threads=1), depth=1, hidden=64,
                                         objective=uform.Objective.CONTRASTIVE, seed=3)
        stats = uform.TrainerStepStats()
        trainer.step([TEXT] * 3, [b"a", b"b", b"c"], bags=kind, stats=stats)
        losses.append(stats.contrastive_loss)
    assert losses[0] == losses[1]


def test_every_id_buffer_shares_the_converter(contrastive_trainer, model_path):
    with pytest.raises(uform.InvalidArgumentError, match="temperature_groups\\[1\\]"):
        contrastive_trainer.step([TEXT] * 3, [b"a", b"b", b"c"], temperature_groups=[0, 0.5, 0])
    with pytest.raises(uform.InvalidArgumentError, match="memory_domains\\[0\\]"):
        uform.Executor.for_ram(threads=1, memory_domains=[0.0])
    with pytest.raises(uform.InvalidArgumentError, match="memory_domains\\[0\\]"):
        uform.Model.load_ram(model_path, memory_domains=["0"])
    model = uform.Model.load_ram(model_path)
    with pytest.raises(uform.InvalidArgumentError, match="temperature_groups"):
        model.text_choose([b"a", b"b"], "AB", uform.Arena(), temperature_groups=np.array([0.0, 0.0]))
    offsets = np.array([0, 1, 1, 1], dtype=np.uint64)
    with pytest.raises(uform.InvalidArgumentError, match="relations.attract.ids\\[0\\]"):
        contrastive_trainer.step([TEXT] * 3, [b"a", b"b", b"c"], relations=uform.Relations(
            attract=uform.Edges(offsets=offsets, ids=[1.0])))
