"""The synthetic multimodal task (examples/multimodal_task.py) makes what its captions say.

Media are decoded here with the libraries themselves (Pillow, PyAV, soundfile) and checked
against the attributes by independent means: where the colored pixels are and what shape
they form, which way their centroid moves, which frequency dominates the spectrum. Captions
are parsed with word lists written here, not the module's templates.
"""
import io
import os
import re
import sys
from itertools import islice

import av
import numpy as np
import pytest
import soundfile
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import multimodal_task as mt  # noqa: E402
from multimodal_task import AUDIO, IMAGE, TEXT, VIDEO, Motion, MultimodalTask, Scene, Sound  # noqa: E402

NOMINAL = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 70, 230),
           "yellow": (235, 215, 40), "purple": (150, 50, 200), "cyan": (40, 200, 215)}
GRID = {"top left": (0, 0), "top": (0, 1), "top right": (0, 2), "left": (1, 0), "center": (1, 1),
        "right": (1, 2), "bottom left": (2, 0), "bottom": (2, 1), "bottom right": (2, 2)}
MOTION = {"right": (1, 0), "left": (-1, 0), "down": (0, 1), "up": (0, -1),
          "down-right": (1, 1), "down-left": (-1, 1), "up-right": (1, -1), "up-left": (-1, -1)}
HERTZ = {"low": 220.0, "mid": 440.0, "high": 880.0}


@pytest.fixture(scope="module")
def task():
    return MultimodalTask(seed=0)


def words(caption: bytes) -> list:
    return re.findall(r"[a-z]+", caption.decode())


# -- splits ---------------------------------------------------------------------------------

def test_splits_are_pure_functions_of_the_seeds(task):
    mixed = ("image", "video", "audio")
    a = task.split(9, seed=5, modality=mixed)
    b = MultimodalTask(seed=0).split(9, seed=5, modality=mixed)
    for field in ("captions", "contents", "attributes", "modalities", "seeds"):
        assert getattr(a, field) == getattr(b, field)
    assert a.modalities == [IMAGE, VIDEO, AUDIO] * 3
    assert task.split(9, seed=6, modality=mixed).contents != a.contents
    assert MultimodalTask(seed=1).split(9, seed=5, modality=mixed).contents != a.contents


@pytest.mark.parametrize("options", [{"audio_format": "ogg"}, {"audio_format": "flac"},
                                     {"video_format": "webm"}, {"image_format": "webp"}])
def test_every_format_is_deterministic(options):
    # libsndfile numbers each Ogg stream at random; the task fixes the number.
    def contents():
        return MultimodalTask(**options).split(6, seed=1, modality=("image", "video", "audio")).contents
    assert contents() == contents()


def test_encoding_a_video_again_gives_the_same_bytes(task):
    # x264's SIMD paths varied now and then on such small clips; the task turns them off.
    clips = [task.render(Motion("red", shape, "up-left"), seed) for seed, shape in enumerate(mt.SHAPES[:4])]
    first = [mt.encode_video(clip, "mp4", task.fps) for clip in clips]
    for _ in range(8):
        assert [mt.encode_video(clip, "mp4", task.fps) for clip in clips] == first


def test_held_out_combinations_never_train(task):
    test = task.split(100, seed=2, modality="image")
    train = task.split(1000, seed=1, modality="image", exclude=test, distinct=False)
    held = set(test.keys())
    assert len(held) == 100                                  # distinct: one item per combination
    assert not held & set(train.keys())
    assert len(set(train.keys())) > 300                      # training still covers most of the rest
    for field in Scene._fields:                              # every attribute value is seen in training
        assert {getattr(a, field) for a in test.attributes} <= {getattr(a, field) for a in train.attributes}


def test_exclude_takes_several_splits_per_modality(task):
    held = [task.split(20, seed=2, modality="video"), task.split(8, seed=2, modality="audio")]
    train = task.split(60, seed=1, modality=("video", "audio"), exclude=held, distinct=False)
    assert not (set(held[0].keys()) | set(held[1].keys())) & set(train.keys())
    rest = task.split(30 - 8, seed=1, modality="audio", exclude=held)   # every other sound, once
    assert set(rest.attributes) == set(task.combinations("audio")) - set(held[1].attributes)
    with pytest.raises(ValueError):
        task.split(30 - 8 + 1, seed=1, modality="audio", exclude=held)


def test_distinct_splits_refuse_more_items_than_combinations(task):
    assert len(task.combinations("audio")) == 30
    with pytest.raises(ValueError):
        task.split(31, seed=0, modality="audio")
    with pytest.raises(ValueError):
        task.split(3, seed=0, modality="text")


# -- captions -------------------------------------------------------------------------------

def named_grid_cell(ws: list) -> tuple:
    row = 0 if {"top", "upper"} & set(ws) else 2 if {"bottom", "lower"} & set(ws) else 1
    col = 0 if "left" in ws else 2 if "right" in ws else 1
    assert ((row, col) == (1, 1)) == bool({"center", "middle"} & set(ws))
    return row, col


def named_shape(ws: list) -> str:
    names = {"circle": {"circle", "round"}, "square": {"square", "boxy"},
             "triangle": {"triangle", "triangular"}, "cross": {"cross", "plus"},
             "diamond": {"diamond", "rhombus"}}
    (shape,) = [s for s, synonyms in names.items() if synonyms & set(ws)]
    return shape


def named_color(ws: list) -> str:
    (color,) = [c for c in NOMINAL if c in ws]
    return color


def named_direction(caption: str) -> tuple:
    """(dx, dy) of "... moving up and to the left" or "... [from the] bottom right to [the] top left"."""
    if "moving" in caption:
        ws = caption.split("moving")[1].split()
        return (("right" in ws) - ("left" in ws), ("down" in ws) - ("up" in ws))
    start, end = [set(part.split()) for part in caption.split(", ")[-1].split(" to ")]
    assert toward(start) == tuple(-v for v in toward(end))
    return toward(end)


def toward(side: set) -> tuple:
    return (("right" in side) - ("left" in side), ("bottom" in side) - ("top" in side))


def named_sound(ws: list) -> tuple:
    text = " ".join(ws)
    patterns = {"steady": "steady" in ws, "rising": "rising" in ws or "going up" in text,
                "falling": "falling" in ws or "going down" in text,
                "fast": bool({"fast", "quick"} & set(ws)), "slow": bool({"slow", "lazy"} & set(ws))}
    (pattern,) = [p for p, named in patterns.items() if named]
    (pitch,) = [p for p in HERTZ if p in ws]
    (timbre,) = [t for t in ("pure", "buzzy") if t in ws]
    return pattern, pitch, timbre


def test_captions_name_the_true_attributes(task):
    for wording in range(3):
        for scene in task.combinations("image"):
            caption = task.caption(scene, wording).encode()
            ws = words(caption)
            assert named_color(ws) == scene.color and named_shape(ws) == scene.shape
            assert named_grid_cell(ws) == GRID[scene.position]
            assert [w for w in ws if w in ("small", "large")] == [scene.size]
        for motion in task.combinations("video"):
            caption = task.caption(motion, wording)
            ws = words(caption.encode())
            assert named_color(ws) == motion.color and named_shape(ws) == motion.shape
            assert named_direction(caption) == MOTION[motion.direction]
        for sound in task.combinations("audio"):
            assert named_sound(words(task.caption(sound, wording).encode())) == tuple(sound)


def test_split_captions_are_one_of_the_wordings_of_their_item(task):
    split = task.split(30, seed=3, modality=("image", "video", "audio"))
    used = set()
    for caption, attributes in zip(split.captions, split.attributes):
        wordings = [task.caption(attributes, w).encode() for w in range(3)]
        assert caption in wordings
        used.add(wordings.index(caption))
    assert used == {0, 1, 2}
    assert max(len(c) for c in split.captions) <= 71


def test_without_sizes_captions_name_none():
    task = MultimodalTask(sizes=False)
    assert len(task.combinations("image")) == 270
    for scene in task.combinations("image")[:20]:
        assert not {"small", "large"} & set(words(task.caption(scene, 0).encode()))


# -- images ---------------------------------------------------------------------------------

def shape_of(mask: np.ndarray) -> str:
    """Names a boolean blob by its outline: fill of its bounding box, then row widths."""
    rows, cols = np.nonzero(mask)
    box = mask[rows.min():rows.max() + 1, cols.min():cols.max() + 1]
    widths = box.sum(axis=1)
    fill = box.mean()
    if fill == 1.0:
        return "square"
    if widths[0] < widths[-1]:
        return "triangle"
    if fill > 0.7:
        return "circle"
    return "diamond" if widths[1] > widths[0] else "cross"


def test_png_images_show_the_captioned_scene(task):
    split = task.split(60, seed=4, modality="image")
    size = task.image_size
    bounds = [(i * size // 3, (i + 1) * size // 3) for i in range(3)]
    for content, scene, seed in zip(split.contents, split.attributes, split.seeds):
        assert content.startswith(b"\x89PNG")
        pixels = np.asarray(Image.open(io.BytesIO(content)).convert("RGB")).astype(int)
        assert pixels.shape == (size, size, 3)
        (top, bottom), (left, right) = bounds[GRID[scene.position][0]], bounds[GRID[scene.position][1]]
        outside = np.ones((size, size), bool)
        outside[top:bottom, left:right] = False
        assert np.abs(pixels[outside] - 128).max() <= task.noise          # other cells: background
        shape = np.abs(pixels - 128).max(axis=2) > task.noise
        ys, xs = np.nonzero(shape)
        assert top <= ys.min() and ys.max() < bottom and left <= xs.min() and xs.max() < right
        center = pixels[int(round(ys.mean())), int(round(xs.mean()))]
        assert np.abs(center - NOMINAL[scene.color]).max() <= 12          # the color, at the center
        assert np.abs(pixels[shape] - center).max() <= 0                   # one flat color
        assert shape_of(shape) == scene.shape
        assert (shape.sum() > 70) == (scene.size == "large")
        assert np.array_equal(mt.decode_image(content), task.render(scene, seed))  # lossless, re-renderable


@pytest.mark.parametrize("image_format, magic", [("jpeg", b"\xff\xd8"), ("webp", b"RIFF")])
def test_lossy_image_formats_round_trip(image_format, magic):
    task = MultimodalTask(image_format=image_format)
    split = task.split(12, seed=4, modality="image")
    for content, scene, seed in zip(split.contents, split.attributes, split.seeds):
        assert content.startswith(magic)
        decoded = np.asarray(Image.open(io.BytesIO(content)).convert("RGB")).astype(int)
        exact = task.render(scene, seed).astype(int)
        ys, xs = np.nonzero(np.abs(exact - 128).max(axis=2) > task.noise)
        center = (int(round(ys.mean())), int(round(xs.mean())))
        assert np.abs(decoded[center] - NOMINAL[scene.color]).max() <= 45
        assert np.abs(decoded - exact).mean() < 8


# -- videos ---------------------------------------------------------------------------------

def centroids(frames: np.ndarray) -> np.ndarray:
    """[frames, 2] (x, y) centroid of the pixels well away from the gray background."""
    out = []
    for frame in frames.astype(int):
        ys, xs = np.nonzero(np.abs(frame - 128).max(axis=2) > 40)
        out.append((xs.mean(), ys.mean()))
    return np.array(out)


@pytest.mark.parametrize("video_format, codec, directions", [
    ("mp4", None, list(MOTION)), ("mp4", "mpeg4", ["left", "up-right"]), ("webm", None, ["down", "up-left"]),
    ("webm", "libvpx-vp9", ["up", "down-right"])])
def test_videos_move_the_shape_in_the_captioned_direction(video_format, codec, directions):
    task = MultimodalTask(video_format=video_format, video_codec=codec)
    for seed, direction in enumerate(directions):
        motion = Motion("blue", "square", direction)
        content = task.encode(motion, task.render(motion, seed))
        with av.open(io.BytesIO(content)) as container:
            assert container.format.name.split(",")[0] in ("mov", "matroska")
            frames = np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])
        assert frames.shape == (task.frames, task.video_size, task.video_size, 3)
        path = centroids(frames)
        moved = path[-1] - path[0]
        for axis, sign in enumerate(MOTION[direction]):
            if sign:
                assert moved[axis] * sign > task.video_size / 2
                assert np.all(np.diff(path[:, axis]) * sign > 0)         # every frame a step on
            else:
                assert abs(moved[axis]) < 1.5
        middle = frames[0][int(round(path[0][1])), int(round(path[0][0]))].astype(int)
        assert np.abs(middle - NOMINAL["blue"]).max() <= 45


def test_split_videos_decode_to_their_captions(task):
    split = task.split(6, seed=7, modality="video")
    for caption, content in zip(split.captions, split.contents):
        frames = mt.decode_video(content)
        assert len(frames) == task.frames
        moved = centroids(frames)[-1] - centroids(frames)[0]
        assert tuple(int(np.sign(round(v))) for v in moved) == named_direction(caption.decode())


# -- sounds ---------------------------------------------------------------------------------

def dominant(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    return float(np.fft.rfftfreq(len(samples), 1 / rate)[np.argmax(spectrum)])


def band(samples: np.ndarray, rate: int, hertz: float) -> float:
    """Spectral magnitude within 5 % of hertz."""
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    f = np.fft.rfftfreq(len(samples), 1 / rate)
    return float(spectrum[np.abs(f - hertz) < 0.05 * hertz].max())


def beeps(samples: np.ndarray, rate: int) -> int:
    """Onsets of the 5 ms loudness envelope crossing half its peak."""
    frame = rate // 200
    loud = np.sqrt((samples[:len(samples) // frame * frame].reshape(-1, frame) ** 2).mean(axis=1))
    above = loud > loud.max() / 2
    return int(above[0]) + int(np.sum(above[1:] & ~above[:-1]))


@pytest.mark.parametrize("audio_format", ["wav", "flac", "ogg"])
def test_sounds_have_the_captioned_pitch_and_pattern(audio_format):
    task = MultimodalTask(audio_format=audio_format)
    for seed, sound in enumerate(task.combinations("audio")):
        content = task.encode(sound, task.render(sound, seed))
        samples, rate = soundfile.read(io.BytesIO(content), dtype="float32")
        assert samples.ndim == 1 and rate == task.sample_rate
        assert len(samples) == round(task.duration * rate)
        hertz = HERTZ[sound.pitch]
        if sound.pattern in ("rising", "falling"):
            third = len(samples) // 3
            start, end = dominant(samples[:third], rate), dominant(samples[-third:], rate)
            assert (end > 1.5 * start) if sound.pattern == "rising" else (start > 1.5 * end)
            assert 0.8 * hertz < np.sqrt(start * end) < 1.25 * hertz
            continue
        assert abs(dominant(samples, rate) / hertz - 1) < 0.06
        overtone = band(samples, rate, 3 * hertz) / band(samples, rate, hertz)
        assert (overtone > 0.2) if sound.timbre == "buzzy" else (overtone < 0.05)
        assert beeps(samples, rate) == {"steady": 1, "fast": 6, "slow": 2}[sound.pattern]


def test_split_sounds_decode_to_their_duration(task):
    split = task.split(5, seed=8, modality="audio")
    for content in split.contents:
        assert content[:4] == b"RIFF"
        samples, rate = mt.decode_audio(content)
        assert len(samples) / rate == task.duration


# -- batches, recall, token counts ----------------------------------------------------------

def test_batches_pair_captions_with_their_media(task):
    split = task.split(60, seed=1, modality=("image", "audio"), distinct=False)
    item_of = {content: i for i, content in enumerate(split.contents)}
    keys = split.keys()
    seen = set()
    stream = list(islice(mt.batches(split, pairs=8, seed=3), 6))
    for modalities, contents, bags in stream:
        assert bags == [i // 2 for i in range(16)]
        assert modalities[0::2] == [TEXT] * 8
        items = [item_of[c] for c in contents[1::2]]
        assert [split.captions[i] for i in items] == contents[0::2]
        assert [split.modalities[i] for i in items] == modalities[1::2]
        assert len({keys[i] for i in items}) == 8                                     # no false negatives
        seen.update(modalities[1::2])
    assert seen == {IMAGE, AUDIO}
    assert stream == list(islice(mt.batches(split, pairs=8, seed=3), 6))
    assert stream != list(islice(mt.batches(split, pairs=8, seed=4), 6))
    with pytest.raises(ValueError):
        next(mt.batches(task.split(4, seed=1, modality="audio"), pairs=5, seed=0))


def test_splits_concatenate_into_mixed_batches(task):
    joined = task.split(10, seed=1, modality="image") + task.split(10, seed=1, modality="video")
    assert len(joined) == 20 and joined.modalities == [IMAGE] * 10 + [VIDEO] * 10
    modalities, _, _ = next(mt.batches(joined, pairs=20, seed=0))
    assert sorted(modalities[1::2]) == [IMAGE] * 10 + [VIDEO] * 10


def test_recall_at_1():
    rows = np.eye(4, dtype=np.float32)
    assert mt.recall_at_1(rows, rows) == 1.0
    assert mt.recall_at_1(rows, np.roll(rows, 1, axis=0)) == 0.0
    assert mt.recall_at_1(rows, rows[[0, 1, 3, 2]]) == 0.5


def test_token_counts_follow_the_model_s_gridding(task):
    assert (task.image_tokens(8), task.image_tokens(16)) == (36, 9)
    assert (task.video_tokens(8, 4), task.video_tokens(16, 4, 2), task.video_tokens(16, 5)) == (48, 8, 12)
    assert task.video_tokens(16, 1, 5) == 3 * 4      # frames 0, 5, 10 kept
    assert (task.audio_tokens(256), task.audio_tokens(256, sample_rate=16000)) == (16, 32)
