"""Checkpoint files under hostile conditions: devices, FIFOs, links, killed writers, bad values.

What a save guarantees: it never replaces anything but a regular file (a symbolic link is
followed and kept), it refuses NaN and infinity before touching the disk, and a process killed
at any moment leaves the previous checkpoint whole and, after the next save, no temporaries.
What a load guarantees for what cannot be mapped (devices, FIFOs, pipes): it reads no more
than the checked header declares, so /dev/zero and /dev/urandom fail at once.
"""
import os
import random
import resource
import signal
import stat
import subprocess
import sys
import threading
import time

import pytest

import uform

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tiny_trainer(seed: int = 0, **options) -> uform.Trainer:
    return uform.Trainer.init_ram(uform.Executor.for_ram(threads=1), depth=1, hidden=64, seed=seed,
                                  **options)


def child_environment() -> dict:
    environment = dict(os.environ)
    environment["PYTHONPATH"] = ROOT + os.pathsep + environment.get("PYTHONPATH", "")
    environment["OPENBLAS_NUM_THREADS"] = "1"
    return environment


def limit_memory() -> None:
    """preexec_fn: a reader that reads without limit fails instead of eating the machine."""
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


# ---- loading what cannot be mapped ------------------------------------------------

LOAD_IN_CHILD = r"""
import sys, uform
try:
    uform.Model.load_ram(sys.argv[1], executor=uform.Executor.for_ram(threads=1))
except uform.Error as error:
    print(type(error).__name__, error)
else:
    print("loaded")
"""


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_loading_an_endless_device_is_a_format_error_at_once(device):
    if not os.path.exists(device) or not stat.S_ISCHR(os.stat(device).st_mode):
        pytest.skip(f"{device} is not a character device here")
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", LOAD_IN_CHILD, device], capture_output=True,
                            text=True, timeout=60, preexec_fn=limit_memory, env=child_environment())
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("FormatError"), result.stdout
    assert device in result.stdout
    assert elapsed < 20, f"loading {device} took {elapsed:.1f} s"


def test_a_fifo_is_read_exactly_as_far_as_its_header_declares(tmp_path):
    checkpoint = tmp_path / "model.safetensors"
    tiny_trainer().save(checkpoint)
    data = checkpoint.read_bytes()
    fifo = tmp_path / "model.fifo"
    os.mkfifo(fifo)
    written = []

    def feed():
        with open(fifo, "wb") as stream:
            stream.write(data)
            stream.flush()
            written.append(len(data))
            try:  # trailing bytes on a FIFO are left unread: no error, no wait for the end
                stream.write(b"trailing bytes")
                stream.flush()
            except BrokenPipeError:
                pass

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    model = uform.Model.load_ram(fifo, executor=uform.Executor.for_ram(threads=1))
    assert model is not None
    feeder.join(timeout=30)
    assert written == [len(data)]


# ---- saving onto things that are not regular files ----------------------------------

def test_saving_to_dev_null_is_a_file_error_and_keeps_the_device():
    if os.geteuid() != 0:
        pytest.skip("only root could replace /dev/null")
    before = os.lstat("/dev/null")
    if not stat.S_ISCHR(before.st_mode):
        pytest.skip("/dev/null is not a character device here")
    try:
        with pytest.raises(uform.FileError, match="not a regular file") as raised:
            tiny_trainer().save("/dev/null")
        assert isinstance(raised.value, OSError)
        assert "/dev/null" in str(raised.value)
        after = os.lstat("/dev/null")
        assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev
    finally:
        after = os.lstat("/dev/null")
        if not stat.S_ISCHR(after.st_mode):  # put the machine's /dev/null back
            os.unlink("/dev/null")
            os.mknod("/dev/null", 0o666 | stat.S_IFCHR, before.st_rdev)
            os.chmod("/dev/null", 0o666)


def test_saving_to_a_directory_or_fifo_is_a_file_error(tmp_path):
    directory = tmp_path / "directory"
    directory.mkdir()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    trainer = tiny_trainer()
    for path, kind in ((directory, stat.S_ISDIR), (fifo, stat.S_ISFIFO)):
        with pytest.raises(uform.FileError, match="nothing was written"):
            trainer.save(path)
        assert kind(os.lstat(path).st_mode)
    assert sorted(os.listdir(tmp_path)) == ["directory", "fifo"]


def test_saving_through_a_symbolic_link_replaces_its_target_and_keeps_the_link(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    real = store / "real.safetensors"
    tiny_trainer(seed=1).save(real)
    link = tmp_path / "link.safetensors"
    os.symlink("store/real.safetensors", link)
    second = tiny_trainer(seed=2)
    direct = tmp_path / "direct.safetensors"
    second.save(direct)
    second.save(link)
    assert os.path.islink(link) and os.readlink(link) == "store/real.safetensors"
    assert real.read_bytes() == direct.read_bytes()
    uform.Model.load_ram(link)
    assert sorted(os.listdir(tmp_path)) == ["direct.safetensors", "link.safetensors", "store"]
    assert os.listdir(store) == ["real.safetensors"]

    dangling = tmp_path / "dangling.safetensors"
    os.symlink("missing.safetensors", dangling)
    with pytest.raises(uform.FileError, match="points nowhere"):
        second.save(dangling)
    assert os.path.islink(dangling) and not (tmp_path / "missing.safetensors").exists()


# ---- killed writers ---------------------------------------------------------------------

SAVE_FOREVER = r"""
import sys, uform
trainer = uform.Trainer.init_ram(uform.Executor.for_ram(threads=1), depth=6, hidden=384, seed=1)
print("ready", flush=True)
while True:
    trainer.save(sys.argv[1])
"""


def test_saves_killed_at_random_leave_the_old_checkpoint_and_no_temporaries(tmp_path):
    # depth 6, hidden 384: about 150 MB, a few tenths of a second a save.
    directory = tmp_path / "run"
    directory.mkdir()
    path = directory / "model.safetensors"
    trainer = uform.Trainer.init_ram(uform.Executor.for_ram(threads=1), depth=6, hidden=384)
    trainer.save(path)
    chooser = random.Random(20240611)
    for kill in range(7):
        child = subprocess.Popen([sys.executable, "-c", SAVE_FOREVER, str(path)],
                                 stdout=subprocess.PIPE, text=True, env=child_environment())
        try:
            assert child.stdout.readline().strip() == "ready"
            time.sleep(chooser.uniform(0.02, 0.8))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
            child.stdout.close()
        assert child.returncode == -signal.SIGKILL, f"kill {kill}: the child ended on its own"
        # Whole after every kill: the parent's checkpoint or one of the child's complete saves.
        uform.Model.load_ram(path, executor=uform.Executor.for_ram(threads=1))
        leftovers = [name for name in os.listdir(directory) if name != "model.safetensors"]
        # An unnamed temporary dies with its writer; only a kill between naming and
        # rename could leave one, for the next save to remove.
        assert all(".uform-partial-" in name for name in leftovers), leftovers
    trainer.save(path)
    assert os.listdir(directory) == ["model.safetensors"]
    uform.Model.load_ram(path, executor=uform.Executor.for_ram(threads=1))


# ---- non-finite weights -------------------------------------------------------------------

@pytest.mark.parametrize("learning_rate", [1e30, 3e38])
def test_a_diverged_trainer_cannot_replace_a_good_checkpoint(tmp_path, learning_rate):
    # 1e30: step 1 leaves weights near 1e30 and step 2's loss is NaN; 3e38: the very first
    # update would overflow. Either way step raises DivergedError before the update, so no
    # non-finite value reaches the weights, and what save writes always loads. (The writer's
    # own refusal of non-finite tensors is tested in C: write_refuses_non_finite.)
    trainer = tiny_trainer(schedule=uform.Schedule(learning_rate=learning_rate, warmup_steps=1, steps=10))
    path = tmp_path / "model.safetensors"
    trainer.save(path)
    diverged = 0
    for _ in range(4):
        try:
            trainer.step([uform.Modality.TEXT] * 2, [b"hello", b"world"])
        except uform.DivergedError:
            diverged += 1
    assert diverged >= 3
    trainer.save(path)
    assert os.listdir(tmp_path) == ["model.safetensors"]
    uform.Model.load_ram(path)
    uform.Trainer.init_ram(uform.Executor.for_ram(threads=1), resume=path)
