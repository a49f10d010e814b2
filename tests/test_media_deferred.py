"""model.deferred(executor)'s media verbs: real jobs through uform_image_encode_submit and
its four twins (docs/media.md section 6, docs/c-api.md "Submitting work").

A submission thread is held busy by a gate: a job ahead in the queue whose progress
handler waits on a threading.Event. Jobs submitted behind it cannot have started, so a
Deferred coming back from them proves the calling thread did no decoding or encoding;
once the gate opens they run, and their answers must equal the blocking verbs' bit for
bit. The C side of the same rules is tests/c/test_media_submit.c.
"""
import gc
import os
import threading
import time
import weakref

import numpy as np
import pytest

import uform
import media_fixtures
from media_fixtures import write_image
from reference.media_checkpoint import write_random_media_checkpoint

FORMATS = int(uform._lib.uform_media_formats())
BOTH = uform.Outputs.EMBEDDINGS | uform.Outputs.TOKENS
SHAPE = dict(depth=2, hidden=128, dimensions=64, context=64, token_width=16,
             image={"patch_side": 8}, video={"patch_side": 8, "tube_frames": 3, "frame_stride": 2},
             audio={"chunk_samples": 160, "sample_rate": 8000})
GATE_TIMEOUT = 120  # seconds a gate stays shut at most, so a failing test cannot hang the run


def needs(flag: int, name: str) -> None:
    if not FORMATS & flag:
        pytest.skip(f"this build of libuform does not decode {name} (uform_media_formats() = {FORMATS:#x})")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("media-deferred") / "model.safetensors"
    write_random_media_checkpoint(str(path), **SHAPE)
    return uform.Model.load_ram(str(path))


class Gate:
    """Holds an executor's submission thread: a job whose progress handler waits until opened."""

    def __init__(self, model, executor) -> None:
        self.event = threading.Event()
        self.entered = threading.Event()

        def hold(done, total):
            self.entered.set()
            self.event.wait(GATE_TIMEOUT)
            return 0

        self.job = model.deferred(executor).image_encode_pixels(
            [np.zeros((16, 16, 3), np.uint8)], uform.Arena(), progress=hold, progress_steps=1)

    def open(self) -> None:
        self.event.set()
        self.job.result()

    def __enter__(self) -> "Gate":
        assert self.entered.wait(GATE_TIMEOUT), "the gate's job never started"
        return self

    def __exit__(self, *exc) -> None:
        self.event.set()
        self.job.wait()


def pictures(count: int) -> list:
    sizes = [(1, 1), (13, 29), (24, 40), (45, 61), (3, 170), (100, 90)]
    return [media_fixtures.test_picture(*sizes[i % len(sizes)], seed=i) for i in range(count)]


def recordings() -> list:
    rng = np.random.default_rng(7)
    return [rng.uniform(-1, 1, n).astype(np.float32) for n in (50, 640, 160 * 70, 1)]


def write_jpegs(directory, images: list) -> list:
    paths = []
    for index, image in enumerate(images):
        paths.append(directory / f"{index}.jpg")
        write_image(paths[-1], "jpeg-420", image)
    return paths


def write_wavs(directory, sounds: list, rate: int) -> list:
    import soundfile

    paths = []
    for index, sound in enumerate(sounds):
        paths.append(directory / f"{index}.wav")
        soundfile.write(paths[-1], sound, rate, subtype="FLOAT")
    return paths


def write_clips(directory) -> list:
    from media_fixtures import write_clip

    paths = [directory / "a.mp4", directory / "b.mp4"]
    write_clip(paths[0], "mpeg4", "mp4", frames=7, height=24, width=32)
    write_clip(paths[1], "mpeg4", "mp4", frames=3, height=40, width=16)
    return paths


def answer(encoded) -> tuple:
    """Copies of an Encoded's arrays (views into its arena) and its scalar."""
    embeddings = None if encoded.embeddings is None else np.array(encoded.embeddings)
    tokens = None if encoded.tokens is None else np.array(encoded.tokens)
    offsets = None if encoded.tokens is None else np.array(encoded.tokens.offsets)
    return embeddings, tokens, offsets, encoded.scalar


def same(a: tuple, b: tuple) -> bool:
    return all((x is None and y is None) or (x is not None and y is not None and np.array_equal(x, y))
               for x, y in zip(a[:3], b[:3])) and a[3] == b[3]


STATS = {"image_encode": uform.ImageEncodeStats, "image_encode_pixels": uform.ImageEncodeStats,
         "video_encode": uform.VideoEncodeStats, "audio_encode": uform.AudioEncodeStats,
         "audio_encode_samples": uform.AudioEncodeStats}


def calls(tmp_path) -> dict:
    """verb -> the positional arguments before the arena, for every verb this build runs."""
    images = pictures(6)
    sounds = recordings()
    result = {"image_encode_pixels": (images,), "audio_encode_samples": (sounds, 22050)}
    if FORMATS & 1:
        result["image_encode"] = (write_jpegs(tmp_path, images),)
    if FORMATS & 16:
        result["audio_encode"] = (write_wavs(tmp_path, sounds[1:], 44100),)
    if FORMATS & 8:
        result["video_encode"] = (write_clips(tmp_path),)
    return result


# ---- answers ---------------------------------------------------------------------------

@pytest.mark.parametrize("scalar", [uform.Scalar.F32, uform.Scalar.BF16, uform.Scalar.I8])
def test_deferred_equals_blocking_bit_for_bit(model, tmp_path, scalar):
    executor = uform.Executor.for_ram(2)
    for verb, arguments in calls(tmp_path).items():
        blocking_stats, deferred_stats = STATS[verb](), STATS[verb]()
        expected = answer(getattr(model, verb)(*arguments, uform.Arena(), outputs=BOTH, outputs_scalar=scalar,
                                               stats=blocking_stats))
        pending = getattr(model.deferred(executor), verb)(*arguments, uform.Arena(), outputs=BOTH,
                                                          outputs_scalar=scalar, stats=deferred_stats)
        assert isinstance(pending, uform.Deferred)
        assert same(answer(pending.result()), expected), verb
        assert pending.done()
        assert repr(deferred_stats) == repr(blocking_stats) and deferred_stats.items > 0, verb


def test_deferred_comes_back_before_the_work_is_done(model, tmp_path):
    executor = uform.Executor.for_ram(1)
    everything = calls(tmp_path)
    expected = {verb: answer(getattr(model, verb)(*arguments, uform.Arena(), outputs=BOTH))
                for verb, arguments in everything.items()}
    gate = Gate(model, executor)
    with gate:
        pending = {verb: getattr(model.deferred(executor), verb)(*arguments, uform.Arena(), outputs=BOTH)
                   for verb, arguments in everything.items()}
        for verb, deferred in pending.items():
            assert not deferred.done(), f"{verb}: answered before the job ahead of it finished"
        gate.open()
        for verb, deferred in pending.items():
            assert same(answer(deferred.result()), expected[verb]), verb
            assert deferred.done()


def test_256_jpegs_come_back_at_once(model, tmp_path):
    """Submitting files reads them into one buffer and queues the job: no decoding on the
    calling thread, well under a millisecond an item; the wait releases the GIL."""
    needs(1, "JPEG")
    images = [media_fixtures.test_picture(96, 128, seed=i) for i in range(256)]
    paths = write_jpegs(tmp_path, images)
    executor = uform.Executor.for_ram(2)
    expected = answer(model.image_encode(paths, uform.Arena()))
    gate = Gate(model, executor)
    with gate:
        started = time.perf_counter()
        pending = model.deferred(executor).image_encode(paths, uform.Arena())
        elapsed = time.perf_counter() - started
        assert not pending.done()
        print(f"submitted {len(paths)} files in {elapsed * 1e3:.2f} ms")
        assert elapsed < len(paths) * 1e-3, f"{elapsed * 1e3:.1f} ms to submit {len(paths)} files"
        gate.open()
        ticks = [0]
        stop = threading.Event()

        def tick():
            while not stop.is_set():
                ticks[0] += 1

        ticker = threading.Thread(target=tick)
        ticker.start()
        started = time.perf_counter()
        try:
            result = pending.result()    # decodes and encodes 256 files on the C threads
        finally:
            stop.set()
            ticker.join()
        waited = time.perf_counter() - started
    assert same(answer(result), expected)
    if waited > 0.05:                    # long enough for the ticker to have been scheduled
        assert ticks[0] > 1000, f"the ticker ran {ticks[0]} times in {waited * 1e3:.0f} ms"


# ---- what the Deferred keeps alive -----------------------------------------------------

def test_inputs_stay_alive_through_the_deferred(model, tmp_path):
    executor = uform.Executor.for_ram(2)
    images = pictures(5)
    sounds = recordings()
    flat = np.concatenate(sounds)
    offsets = np.cumsum([0] + [len(s) for s in sounds]).astype(np.uint64)
    expected_images = answer(model.image_encode_pixels([i.copy() for i in images], uform.Arena(), outputs=BOTH))
    expected_sounds = answer(model.audio_encode_samples([s.copy() for s in sounds], 16000, uform.Arena()))
    expected_tape = answer(model.audio_encode_samples((flat.copy(), offsets.copy()), 16000, uform.Arena()))
    file_calls = {}
    if FORMATS & 1:
        jpegs = write_jpegs(tmp_path, images)
        blobs = [path.read_bytes() for path in jpegs]
        data = np.frombuffer(b"".join(blobs), np.uint8).copy()
        file_offsets = np.cumsum([0] + [len(b) for b in blobs]).astype(np.uint64)
        expected_files = answer(model.image_encode(jpegs, uform.Arena()))
        file_calls["paths"] = (jpegs, expected_files)
        file_calls["tape"] = ((data, file_offsets), expected_files)

    gate = Gate(model, executor)
    with gate:
        references = [weakref.ref(image) for image in images] + [weakref.ref(flat), weakref.ref(offsets)]
        pending = {
            "pixels": (model.deferred(executor).image_encode_pixels(images, uform.Arena(), outputs=BOTH),
                       expected_images),
            # a sequence of recordings is joined into one buffer: the Deferred keeps that
            "samples": (model.deferred(executor).audio_encode_samples(sounds, 16000, uform.Arena()),
                        expected_sounds),
            "samples tape": (model.deferred(executor).audio_encode_samples((flat, offsets), 16000, uform.Arena()),
                             expected_tape),
        }
        for name in list(file_calls):
            files, expected = file_calls.pop(name)
            pending["files " + name] = (model.deferred(executor).image_encode(files, uform.Arena()), expected)
            del files
        if FORMATS & 1:
            references += [weakref.ref(data), weakref.ref(file_offsets)]
            del data, file_offsets
        # the path tape is the Deferred's; the files themselves are read when the job runs
        del images, sounds, flat, offsets
        gc.collect()
        _garbage = [np.full((97, 131, 3), 255, np.uint8) for _ in range(64)]  # reuse freed memory, if any
        assert all(reference() is not None for reference in references), "an input died with its job queued"
        assert not any(deferred.done() for deferred, _ in pending.values())
        gate.open()
        for name, (deferred, expected) in pending.items():
            assert same(answer(deferred.result()), expected), name
    del pending, _garbage
    gc.collect()
    assert all(reference() is None for reference in references), "inputs kept after their jobs finished"


def test_paths_are_read_when_the_job_runs(model, tmp_path):
    """Submitting paths reads nothing: the C job checks and reads them when it runs, so the
    Deferred comes back at once and a file written after submission is the one encoded."""
    needs(1, "JPEG")
    executor = uform.Executor.for_ram(2)
    images = pictures(4)
    staged = tmp_path / "staged"
    staged.mkdir()
    staged_paths = write_jpegs(staged, images)
    blobs = [path.read_bytes() for path in staged_paths]
    expected = answer(model.image_encode(staged_paths, uform.Arena()))
    later = [tmp_path / f"later-{i}.jpg" for i in range(4)]
    gate = Gate(model, executor)
    with gate:
        pending = model.deferred(executor).image_encode(later, uform.Arena())   # none of them exists yet
        assert not pending.done()
        for path, blob in zip(later, blobs):
            path.write_bytes(blob)
        gate.open()
        assert same(answer(pending.result()), expected)
    # a path missing when the job runs is the job's FileError, naming it
    with gate.__class__(model, executor) as again:
        missing = model.deferred(executor).image_encode(later[:1] + [tmp_path / "never.jpg"], uform.Arena())
        again.open()
        with pytest.raises(uform.FileError, match=r"files\[1\].*never\.jpg.*No such file"):
            missing.result()


# ---- failures --------------------------------------------------------------------------

def test_a_corrupt_jpeg_raises_format_error_from_the_deferred(model, tmp_path):
    needs(1, "JPEG")
    images = pictures(4)
    paths = write_jpegs(tmp_path, images)
    good = paths[:]
    corrupt = tmp_path / "corrupt.jpg"
    jpeg = paths[2].read_bytes()
    corrupt.write_bytes(jpeg[: len(jpeg) // 3] + bytes(range(256)) * 4)
    paths.insert(2, corrupt)
    executor = uform.Executor.for_ram(2)
    arena = uform.Arena()
    expected = answer(model.image_encode(good, uform.Arena()))

    failing = model.deferred(executor).image_encode(paths, arena)     # submitted: no error yet
    with pytest.raises(uform.FormatError, match=r"files\[2\]"):
        failing.result()
    assert failing.done()
    with pytest.raises(uform.FormatError, match=r"files\[2\]"):     # the same error again
        failing.wait()
    # the arena was given back: blocking and deferred calls use it at once
    assert same(answer(model.image_encode(good, arena)), expected)
    assert same(answer(model.deferred(executor).image_encode(good, arena).result()), expected)


def test_failures_inside_jobs_reach_the_deferred(model):
    executor = uform.Executor.for_ram(2)
    arena = uform.Arena()
    sounds = recordings()
    sounds[2] = sounds[2].copy()
    sounds[2][5] = np.nan
    deferred = model.deferred(executor)
    # checked by the C verb, so answered by the job: the submission itself succeeds
    for pending, error, message in [
        (deferred.audio_encode_samples(sounds, 16000, uform.Arena()), uform.InvalidArgumentError,
         r"samples\[2\]: sample 5 is NaN"),
        (deferred.image_encode_pixels(pictures(2), uform.Arena(), progress=lambda done, total: True,
                                      progress_steps=1),
         uform.CancelledError, None),
        (deferred.image_encode_pixels([], uform.Arena()), uform.InvalidArgumentError, "empty"),
        (deferred.audio_encode_samples(recordings(), 0, uform.Arena()), uform.InvalidArgumentError, "sample_rate"),
        (deferred.image_encode(["/nonexistent/a.jpg"], uform.Arena()), uform.FileError,
         r"files\[0\]: '/nonexistent/a.jpg': No such file"),
    ]:
        with pytest.raises(error, match=message):
            pending.result()
    # Python's own argument checks raise at the call, as for text_encode
    with pytest.raises(uform.InvalidArgumentError, match="uint8"):
        deferred.image_encode_pixels([np.zeros((4, 4, 3), np.float32)], arena)
    with pytest.raises(uform.InvalidArgumentError, match=r"files\[0\]: contains a NUL"):
        deferred.image_encode(["/nonexistent/\0.jpg"], arena)
    with pytest.raises(TypeError, match="unexpected keyword"):
        deferred.audio_encode_samples(recordings(), 16000, arena, colour=True)
    assert same(answer(deferred.image_encode_pixels(pictures(2), arena).result()),
                answer(model.image_encode_pixels(pictures(2), uform.Arena())))


def test_a_queued_media_job_holds_its_arena(model):
    executor = uform.Executor.for_ram(1)
    images = pictures(3)
    arena = uform.Arena()
    expected = answer(model.image_encode_pixels(images, uform.Arena()))
    gate = Gate(model, executor)
    with gate:
        queued = model.deferred(executor).image_encode_pixels(images, arena)
        with pytest.raises(uform.InvalidArgumentError, match="in use"):
            model.audio_encode_samples(recordings(), 16000, arena)
        with pytest.raises(uform.InvalidArgumentError, match="in use"):
            model.deferred(executor).audio_encode_samples(recordings(), 16000, arena)
        gate.open()
        assert same(answer(queued.result()), expected)
    assert same(answer(model.image_encode_pixels(images, arena)), expected)
