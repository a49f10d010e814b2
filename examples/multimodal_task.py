"""A synthetic multimodal retrieval task: captions paired with images, videos and sounds.

A world of simple things, each described by a short caption in one of three wordings:

- images (IMAGE): one shape (circle, square, triangle, cross, diamond) of one color (red,
  green, blue, yellow, purple, cyan), small or large, in one cell of a 3 x 3 grid, on a gray
  background with light pixel noise:

      a small red circle at the top left  |  top-left: small red circle
      small red round shape, upper left corner

- videos (VIDEO): a shape of a color sliding across the frame in one of 8 directions:

      a blue square moving down and to the right  |  blue square, top left to bottom right
      a blue boxy shape sliding from the top left to the bottom right

- sounds (AUDIO): a steady tone, a rising or falling chirp, or fast or slow beeps, at a low,
  mid or high pitch, pure (a sine) or buzzy (a band-limited square wave):

      a high steady pure tone  |  buzzy chirp, low pitch, rising  |  quick pure mid-pitched pulses

Every item carries its caption (UTF-8 bytes: one token per byte), its media encoded as a file
(PNG, JPEG or WebP; MP4 or WebM; WAV, FLAC or OGG: what a trainer's items carry), its
attributes and its modality (uform.Modality values as plain ints).

Combinations: 6 colors x 5 shapes x 9 positions x 2 sizes = 540 for images (270 with
sizes=False), 6 x 5 x 8 directions = 240 for videos, 5 patterns x 3 pitches x 2 timbres = 30
for sounds. The vocabulary is shared by every split; a held-out split (distinct=True, one item
per combination) holds combinations that the training split (exclude=held_out) never shows, so
a model that retrieves well on it has learnt to read each attribute, not memorised pairs.
Items of one combination still differ: background noise, color and position jitter, the
path's offset along its still axis, pitch and loudness jitter.

Chance level of held-out recall@1 is 1 / N for N held-out pairs. Near misses abound: an image
combination has 18 others that differ in one attribute only (5 colors, 4 shapes, 8 positions,
1 size), so among 100 held-out images each has about 18 * 99 / 539 = 3.3 of them; a video has
16 (5 + 4 + 7), about 3.3 among 50; a sound has 7 (4 + 2 + 1), about 1.7 among 8. Shape is
the subtlest attribute (a small shape is 9 pixels across); an easier world keeps fewer of
them (shapes=3: circle, square, triangle), fewer colors, or no sizes (sizes=False).

Everything is a pure function of the seeds:

    task = MultimodalTask(seed=0)                       # image_format="png", video_format="mp4", ...
    test = task.split(100, seed=2, modality="image")    # held out: distinct combinations
    train = task.split(5000, seed=1, modality="image", exclude=test, distinct=False)
    for modalities, contents, bags in batches(train, pairs=32, seed=0): ...
    recall_at_1(caption_embeddings, image_embeddings)   # caption i belongs to image i

Mixed training: a sequence of modalities deals them out in turn (repeats set the shares), and
`exclude` takes several held-out splits; splits also concatenate with `+`:

    held_out = [task.split(100, 2, modality="image"), task.split(50, 2, modality="video"),
                task.split(8, 2, modality="audio")]
    train = task.split(8000, 1, modality=("image", "image", "video", "audio"),
                       exclude=held_out, distinct=False)

Tokens per item with the default sizes (chosen so that no patch side in 8, 16 resizes), as
the *_tokens methods count them after the model's gridding (docs/architecture.md): a 48 x 48
image is 36 patches of 8 (9 of 16); a 12-frame 32 x 32 video is 48 tubes with patch 8,
tube_frames 4, frame_stride 1 (12 with patch 16; 8 with patch 16, tube_frames 4, stride 2);
0.5 s at 8 kHz is 4000 samples, 16 chunks of 256. Captions are at most 49 bytes for images,
71 for videos, 37 for sounds.

Bytes repeat exactly for one set of library builds (Pillow, FFmpeg and its encoders,
libsndfile); other builds may encode the same pixels and samples to other bytes.
"""
from __future__ import annotations

import io
from collections import deque
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

import av
import numpy as np
import soundfile
from PIL import Image

TEXT, IMAGE, VIDEO, AUDIO = 0, 1, 2, 3  # uform.Modality values
MODALITY_NAMES = {"image": IMAGE, "video": VIDEO, "audio": AUDIO}

# -- the vocabulary -------------------------------------------------------------------------

COLORS: Dict[str, Tuple[int, int, int]] = {
    "red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 70, 230),
    "yellow": (235, 215, 40), "purple": (150, 50, 200), "cyan": (40, 200, 215),
}
BACKGROUND = 128      # gray level of every background
COLOR_JITTER = 12     # each channel of a shape's color moves by up to this much per item

SHAPES = ("circle", "square", "triangle", "cross", "diamond")
SHAPE_PHRASES = {"circle": "round shape", "square": "boxy shape", "triangle": "triangular shape",
                 "cross": "plus sign", "diamond": "rhombus"}

# Positions in row-major order over the 3 x 3 grid, and their phrases in the three wordings.
POSITIONS = ("top left", "top", "top right", "left", "center", "right", "bottom left", "bottom", "bottom right")
POSITION_HYPHENATED = {p: p.replace(" ", "-") for p in POSITIONS}
POSITION_PHRASES = {"top left": "upper left corner", "top": "upper edge", "top right": "upper right corner",
                    "left": "left edge", "center": "in the middle", "right": "right edge",
                    "bottom left": "lower left corner", "bottom": "lower edge",
                    "bottom right": "lower right corner"}
SIZES = ("small", "large")

# Directions of motion as (dx, dy) in image coordinates (y grows downwards).
DIRECTIONS: Dict[str, Tuple[int, int]] = {
    "right": (1, 0), "left": (-1, 0), "down": (0, 1), "up": (0, -1),
    "down-right": (1, 1), "down-left": (-1, 1), "up-right": (1, -1), "up-left": (-1, -1),
}

# Sounds: a pattern, a pitch register (Hz at its center) and a timbre.
PATTERNS = ("steady", "rising", "falling", "fast", "slow")
PITCHES = {"low": 220.0, "mid": 440.0, "high": 880.0}
TIMBRES = ("pure", "buzzy")
CHIRP_SPAN = 1.5        # a chirp sweeps from pitch / 1.5 to pitch * 1.5 (or back)
BEATS = {"fast": 12.0, "slow": 4.0}   # beeps per second
PITCH_JITTER = 0.03     # each sound's pitch moves by up to 3 %
HISS = 0.01             # amplitude of the white noise under every sound

SOUND_TEMPLATES = {
    "steady": ("a {pitch} steady {timbre} tone", "{timbre} tone, {pitch} pitch, steady",
               "steady {timbre} {pitch}-pitched hum"),
    "rising": ("a {pitch} rising {timbre} chirp", "{timbre} chirp, {pitch} pitch, rising",
               "a {timbre} {pitch}-pitched sweep going up"),
    "falling": ("a {pitch} falling {timbre} chirp", "{timbre} chirp, {pitch} pitch, falling",
                "a {timbre} {pitch}-pitched sweep going down"),
    "fast": ("fast {pitch} {timbre} beeps", "{timbre} beeps, {pitch} pitch, fast",
             "quick {timbre} {pitch}-pitched pulses"),
    "slow": ("slow {pitch} {timbre} beeps", "{timbre} beeps, {pitch} pitch, slow",
             "lazy {timbre} {pitch}-pitched pulses"),
}
WORDINGS = 3

IMAGE_FORMATS = {"png": "PNG", "jpeg": "JPEG", "webp": "WEBP"}
VIDEO_FORMATS = {"mp4": ("libx264", "h264", "mpeg4"), "webm": ("libvpx", "libvpx-vp9")}
AUDIO_FORMATS = {"wav": ("WAV", "PCM_16"), "flac": ("FLAC", "PCM_16"), "ogg": ("OGG", "VORBIS")}


class Scene(NamedTuple):
    """What an image shows."""
    color: str
    shape: str
    position: str   # one of POSITIONS
    size: str       # one of SIZES ("large" for every image when the task has sizes=False)


class Motion(NamedTuple):
    """What a video shows."""
    color: str
    shape: str
    direction: str  # one of DIRECTIONS


class Sound(NamedTuple):
    """What a sound is."""
    pattern: str    # one of PATTERNS
    pitch: str      # one of PITCHES
    timbre: str     # one of TIMBRES


Attributes = Union[Scene, Motion, Sound]
_Key = Tuple[int, Attributes]   # (modality, attributes): what a caption pins down


class Item(NamedTuple):
    caption: bytes      # UTF-8
    content: bytes      # the encoded file
    modality: int       # IMAGE, VIDEO or AUDIO
    attributes: Attributes


@dataclass
class Split:
    """Pairs of one split: captions[i] describes contents[i], a file of modalities[i] showing
    attributes[i]; seeds[i] re-renders it (MultimodalTask.render)."""

    captions: List[bytes]
    contents: List[bytes]
    modalities: List[int]
    attributes: List[Attributes]
    seeds: List[int]

    def __len__(self) -> int:
        return len(self.captions)

    def __getitem__(self, i: int) -> Item:
        return Item(self.captions[i], self.contents[i], self.modalities[i], self.attributes[i])

    def __add__(self, other: "Split") -> "Split":
        return Split(self.captions + other.captions, self.contents + other.contents,
                     self.modalities + other.modalities, self.attributes + other.attributes,
                     self.seeds + other.seeds)

    def keys(self) -> List[_Key]:
        return list(zip(self.modalities, self.attributes))


# -- captions -------------------------------------------------------------------------------

def _sized(scene: Scene, sizes: bool) -> str:
    return f"{scene.size} " if sizes else ""


def image_caption(scene: Scene, wording: int, sizes: bool = True) -> str:
    size = _sized(scene, sizes)
    if wording == 0:
        return f"a {size}{scene.color} {scene.shape} at the {scene.position}"
    if wording == 1:
        return f"{POSITION_HYPHENATED[scene.position]}: {size}{scene.color} {scene.shape}"
    return f"{size}{scene.color} {SHAPE_PHRASES[scene.shape]}, {POSITION_PHRASES[scene.position]}"


def _side(dx: int, dy: int) -> str:
    """The side or corner a motion heads to: (1, 1) -> "bottom right"."""
    vertical = {-1: "top", 0: "", 1: "bottom"}[dy]
    horizontal = {-1: "left", 0: "", 1: "right"}[dx]
    return f"{vertical} {horizontal}".strip()


def video_caption(motion: Motion, wording: int) -> str:
    dx, dy = DIRECTIONS[motion.direction]
    start, end = _side(-dx, -dy), _side(dx, dy)
    if wording == 0:
        vertical = {-1: "up", 0: "", 1: "down"}[dy]
        horizontal = {-1: "left", 0: "", 1: "right"}[dx]
        moving = f"{vertical} and to the {horizontal}" if dx and dy else vertical or horizontal
        return f"a {motion.color} {motion.shape} moving {moving}"
    if wording == 1:
        return f"{motion.color} {motion.shape}, {start} to {end}"
    return f"a {motion.color} {SHAPE_PHRASES[motion.shape]} sliding from the {start} to the {end}"


def audio_caption(sound: Sound, wording: int) -> str:
    return SOUND_TEMPLATES[sound.pattern][wording].format(pitch=sound.pitch, timbre=sound.timbre)


# -- pixels ---------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def stencil(shape: str, radius: int) -> np.ndarray:
    """A (2r+1) x (2r+1) boolean mask of the shape, centered."""
    y, x = np.mgrid[-radius:radius + 1, -radius:radius + 1]
    ax, ay = np.abs(x), np.abs(y)
    if shape == "circle":
        mask = x * x + y * y <= (radius + 0.3) ** 2
    elif shape == "square":
        mask = np.maximum(ax, ay) <= round(0.8 * radius)
    elif shape == "triangle":   # apex up, base along the bottom row
        mask = 2 * ax <= y + radius
    elif shape == "cross":
        mask = np.minimum(ax, ay) <= max(1, radius // 3)
    elif shape == "diamond":
        mask = ax + ay <= radius
    else:
        raise ValueError(f"shape: {shape!r} is none of {SHAPES}")
    mask.flags.writeable = False
    return mask


def paint(canvas: np.ndarray, shape: str, radius: int, center: Tuple[int, int], color: np.ndarray) -> None:
    """Draws the shape on canvas [h, w, 3] around center (x, y), clipped to the canvas."""
    mask = stencil(shape, radius)
    x, y = center
    height, width = canvas.shape[:2]
    top, left = y - radius, x - radius
    rows = slice(max(top, 0), min(top + 2 * radius + 1, height))
    cols = slice(max(left, 0), min(left + 2 * radius + 1, width))
    cut = mask[rows.start - top:rows.stop - top, cols.start - left:cols.stop - left]
    canvas[rows, cols][cut] = color


def cell_bounds(size: int) -> List[Tuple[int, int]]:
    """The [lo, hi) pixel range of each of the 3 rows (or columns) of a size-pixel side."""
    return [(i * size // 3, (i + 1) * size // 3) for i in range(3)]


def jittered_color(rng: np.random.Generator, color: str) -> np.ndarray:
    base = np.array(COLORS[color], dtype=np.int64)
    return np.clip(base + rng.integers(-COLOR_JITTER, COLOR_JITTER + 1, 3), 0, 255).astype(np.uint8)


# -- sound ----------------------------------------------------------------------------------

def _waveform(phase: np.ndarray, frequency: np.ndarray, timbre: str, sample_rate: int) -> np.ndarray:
    """A sine, or a square wave built from its odd harmonics below 0.45 of the sample rate."""
    if timbre == "pure":
        return np.sin(phase)
    wave = np.zeros_like(phase)
    for k in range(1, int(0.45 * sample_rate / frequency.min()) + 1, 2):
        wave += np.where(k * frequency < 0.45 * sample_rate, np.sin(k * phase) / k, 0.0)
    return wave


def _gate(times: np.ndarray, beats: float, ramp: float = 0.005) -> np.ndarray:
    """1 during the first half of every beat period, 0 in the other, with raised-cosine ramps."""
    within = np.mod(times * beats, 1.0) / beats      # seconds into the current period
    on = 0.5 / beats
    rise = np.clip(within / ramp, 0.0, 1.0)
    fall = np.clip((on - within) / ramp, 0.0, 1.0)
    return np.sin(0.5 * np.pi * np.minimum(rise, fall)) ** 2


# -- encoding -------------------------------------------------------------------------------

def encode_image(pixels: np.ndarray, format: str = "png") -> bytes:
    buffer = io.BytesIO()
    options = {} if format == "png" else {"quality": 90}
    Image.fromarray(pixels, "RGB").save(buffer, IMAGE_FORMATS[format], **options)
    return buffer.getvalue()


@lru_cache(maxsize=None)
def pick_video_codec(format: str = "mp4") -> str:
    """The first encoder of the container's list that this PyAV/FFmpeg build has, by its name:
    libx264 (else any h264, else mpeg4) for mp4, libvpx (vp8, else vp9) for webm."""
    for name in VIDEO_FORMATS[format]:
        try:
            return av.codec.Codec(name, "w").name
        except Exception:   # not built in: av raises UnknownCodecError or a FFmpegError
            continue
    raise RuntimeError(f"no encoder for {format}: tried {VIDEO_FORMATS[format]}")


def _codec_options(codec: str) -> Dict[str, str]:
    """Near-lossless, fast and single-threaded (so the bytes do not depend on scheduling)."""
    common = {"threads": "1", "flags": "+bitexact"}
    if codec == "libx264":
        # With its SIMD code on, x264 (threads=1) encoded about one 32 x 32 clip in 40
        # differently from run to run on a busy machine (cause unknown; turning off B-frames
        # or mbtree also hid it). Its plain C code gave the same bytes in 2000 tries.
        return {**common, "crf": "16", "preset": "veryfast", "x264-params": "asm=0"}
    if codec in ("libvpx", "libvpx-vp9"):
        return {**common, "crf": "10", "deadline": "realtime", "cpu-used": "8"}
    return common


def encode_video(frames: np.ndarray, format: str = "mp4", fps: int = 12, codec: Optional[str] = None) -> bytes:
    """frames [n, h, w, 3] uint8 (h and w even) as a yuv420p file, in memory."""
    codec = codec or pick_video_codec(format)
    buffer = io.BytesIO()
    with av.open(buffer, "w", format=format, options={"fflags": "+bitexact"}) as container:
        stream = container.add_stream(codec, rate=fps)
        stream.height, stream.width = frames.shape[1:3]
        stream.pix_fmt = "yuv420p"
        stream.bit_rate = 2_000_000
        stream.options = _codec_options(codec)
        for index, pixels in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            frame.pts, frame.time_base = index, Fraction(1, fps)
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return buffer.getvalue()


@lru_cache(maxsize=None)
def _ogg_crc_table() -> Tuple[int, ...]:
    table = []
    for byte in range(256):
        r = byte << 24
        for _ in range(8):
            r = ((r << 1) ^ 0x04C11DB7 if r & 0x80000000 else r << 1) & 0xFFFFFFFF
        table.append(r)
    return tuple(table)


def _ogg_with_serial(data: bytes, serial: int = 0x75666F72) -> bytes:
    """The Ogg stream with every page's serial number set to `serial` and its CRC redone:
    libsndfile draws the serial at random, which would make OGG bytes differ run to run."""
    table = _ogg_crc_table()
    out = bytearray(data)
    at = 0
    while at < len(out):
        if out[at:at + 4] != b"OggS":
            raise ValueError(f"not an Ogg page at byte {at}")
        segments = out[at + 26]
        end = at + 27 + segments + sum(out[at + 27:at + 27 + segments])
        out[at + 14:at + 18] = serial.to_bytes(4, "little")
        out[at + 22:at + 26] = bytes(4)
        crc = 0
        for byte in out[at:end]:
            crc = ((crc << 8) & 0xFFFFFFFF) ^ table[(crc >> 24) ^ byte]
        out[at + 22:at + 26] = crc.to_bytes(4, "little")
        at = end
    return bytes(out)


def encode_audio(samples: np.ndarray, sample_rate: int, format: str = "wav") -> bytes:
    """Mono float samples in [-1, 1] as 16-bit WAV or FLAC, or OGG Vorbis, in memory."""
    container, subtype = AUDIO_FORMATS[format]
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, sample_rate, format=container, subtype=subtype)
    data = buffer.getvalue()
    return _ogg_with_serial(data) if format == "ogg" else data


# -- decoding (for checks and for looking at items) -----------------------------------------

def decode_image(content: bytes) -> np.ndarray:
    """[h, w, 3] uint8 RGB."""
    with Image.open(io.BytesIO(content)) as image:
        return np.asarray(image.convert("RGB"))


def decode_video(content: bytes) -> np.ndarray:
    """[frames, h, w, 3] uint8 RGB."""
    with av.open(io.BytesIO(content)) as container:
        return np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)])


def decode_audio(content: bytes) -> Tuple[np.ndarray, int]:
    """(mono float32 samples, sample rate)."""
    samples, rate = soundfile.read(io.BytesIO(content), dtype="float32", always_2d=True)
    return samples.mean(axis=1), rate


# -- the task -------------------------------------------------------------------------------

def _modalities(modality: Union[int, str, Sequence[Union[int, str]]]) -> List[int]:
    names = [modality] if isinstance(modality, (int, str)) else list(modality)
    out = [MODALITY_NAMES.get(m, m) if isinstance(m, str) else int(m) for m in names]
    if not out or any(m not in (IMAGE, VIDEO, AUDIO) for m in out):
        raise ValueError(f"modality: {modality!r} is not image, video or audio (1, 2, 3) nor a sequence of them")
    return out


def _excluded_keys(exclude: Union[None, Split, Iterable[Split]]) -> set:
    if exclude is None:
        return set()
    splits = [exclude] if isinstance(exclude, Split) else list(exclude)
    return {key for split in splits for key in split.keys()}


class MultimodalTask:
    """The world's sizes and file formats; `seed` mixes into every split's draws.

    Images are image_size pixels square (cells of image_size // 3; 48 gives 16-pixel cells
    and shapes of radius 4 and 6), with background noise of +-`noise` levels per channel.
    Videos are `frames` frames of video_size pixels square (even) at `fps`, on a plain
    background, shapes of radius video_size * 5 // 32. Sounds last `duration` seconds at
    `sample_rate` Hz. `colors` and `shapes` keep only the first so many of COLORS and SHAPES
    (an easier world)."""

    def __init__(self, seed: int = 0, *, image_size: int = 48, image_format: str = "png", sizes: bool = True,
                 noise: int = 8, video_size: int = 32, frames: int = 12, fps: int = 12,
                 video_format: str = "mp4", video_codec: Optional[str] = None, sample_rate: int = 8000,
                 duration: float = 0.5, audio_format: str = "wav", colors: int = len(COLORS),
                 shapes: int = len(SHAPES)) -> None:
        if image_format not in IMAGE_FORMATS:
            raise ValueError(f"image_format: {image_format!r} is none of {sorted(IMAGE_FORMATS)}")
        if video_format not in VIDEO_FORMATS:
            raise ValueError(f"video_format: {video_format!r} is none of {sorted(VIDEO_FORMATS)}")
        if audio_format not in AUDIO_FORMATS:
            raise ValueError(f"audio_format: {audio_format!r} is none of {sorted(AUDIO_FORMATS)}")
        if image_size < 24 or video_size < 16 or video_size % 2 or frames < 2:
            raise ValueError("image_size: at least 24; video_size: even, at least 16; frames: at least 2")
        if not (1 <= colors <= len(COLORS) and 1 <= shapes <= len(SHAPES)):
            raise ValueError(f"colors: 1 to {len(COLORS)}, shapes: 1 to {len(SHAPES)}")
        self.seed = seed
        self.image_size, self.image_format, self.sizes, self.noise = image_size, image_format, sizes, noise
        self.video_size, self.frames, self.fps = video_size, frames, fps
        self.video_format = video_format
        self.video_codec = video_codec or pick_video_codec(video_format)
        self.sample_rate, self.duration, self.audio_format = sample_rate, duration, audio_format
        self.colors = list(COLORS)[:colors]
        self.shapes = list(SHAPES)[:shapes]
        cell = min(hi - lo for lo, hi in cell_bounds(image_size))
        small = max(2, cell // 4)
        self.radii = {"small": small, "large": max(small + 1, 3 * cell // 8)}
        self.video_radius = video_size * 5 // 32

    # The attribute space.

    def combinations(self, modality: Union[int, str]) -> List[Attributes]:
        """Every attribute combination of the modality, in a fixed order."""
        (modality,) = _modalities(modality)
        if modality == IMAGE:
            sizes = SIZES if self.sizes else ("large",)
            return [Scene(color, shape, position, size) for color in self.colors for shape in self.shapes
                    for position in POSITIONS for size in sizes]
        if modality == VIDEO:
            return [Motion(c, s, d) for c in self.colors for s in self.shapes for d in DIRECTIONS]
        return [Sound(p, h, t) for p in PATTERNS for h in PITCHES for t in TIMBRES]

    def caption(self, attributes: Attributes, wording: int) -> str:
        if isinstance(attributes, Scene):
            return image_caption(attributes, wording, self.sizes)
        if isinstance(attributes, Motion):
            return video_caption(attributes, wording)
        return audio_caption(attributes, wording)

    # Rendering: raw arrays, a pure function of (attributes, seed).

    def render(self, attributes: Attributes, seed: int) -> np.ndarray:
        """An image [h, w, 3] uint8, a video [frames, h, w, 3] uint8 or a sound [samples] float32."""
        rng = np.random.default_rng([seed, 0x4E7D])
        if isinstance(attributes, Scene):
            return self._render_image(attributes, rng)
        if isinstance(attributes, Motion):
            return self._render_video(attributes, rng)
        return self._render_sound(attributes, rng)

    def _render_image(self, scene: Scene, rng: np.random.Generator) -> np.ndarray:
        size = self.image_size
        noise = rng.integers(-self.noise, self.noise + 1, (size, size, 3)) if self.noise else 0
        canvas = np.clip(BACKGROUND + noise, 0, 255).astype(np.uint8)
        row, col = divmod(POSITIONS.index(scene.position), 3)
        (top, bottom), (left, right) = cell_bounds(size)[row], cell_bounds(size)[col]
        radius = self.radii[scene.size]
        cell = min(hi - lo for lo, hi in cell_bounds(size))
        jitter = max(0, (cell - 1) // 2 - radius)   # the shape stays inside its cell
        x = left + (right - left - 1) // 2 + int(rng.integers(-jitter, jitter + 1))
        y = top + (bottom - top - 1) // 2 + int(rng.integers(-jitter, jitter + 1))
        paint(canvas, scene.shape, radius, (x, y), jittered_color(rng, scene.color))
        return canvas

    def path(self, motion: Motion, rng: np.random.Generator) -> np.ndarray:
        """[frames, 2] integer (x, y) centers: from one side to the opposite one along the moving
        axes, at a random fixed offset along a still one."""
        lo, hi = self.video_radius + 1, self.video_size - 2 - self.video_radius
        steps = np.linspace(0.0, 1.0, self.frames)
        axes = []
        for delta in DIRECTIONS[motion.direction]:
            if delta == 0:
                axes.append(np.full(self.frames, rng.uniform(lo, hi)))
            else:
                start, end = (lo, hi) if delta > 0 else (hi, lo)
                axes.append(start + (end - start) * steps)
        return np.rint(np.stack(axes, axis=1)).astype(np.int64)

    def _render_video(self, motion: Motion, rng: np.random.Generator) -> np.ndarray:
        color = jittered_color(rng, motion.color)
        video = np.full((self.frames, self.video_size, self.video_size, 3), BACKGROUND, np.uint8)
        for frame, (x, y) in zip(video, self.path(motion, rng)):
            paint(frame, motion.shape, self.video_radius, (int(x), int(y)), color)
        return video

    def frequencies(self, sound: Sound, pitch: float) -> np.ndarray:
        """Instantaneous frequency (Hz) at every sample: constant, or an exponential sweep."""
        count = int(round(self.duration * self.sample_rate))
        if sound.pattern in ("rising", "falling"):
            sweep = np.linspace(-1.0, 1.0, count) * (1 if sound.pattern == "rising" else -1)
            return pitch * CHIRP_SPAN ** sweep
        return np.full(count, pitch)

    def _render_sound(self, sound: Sound, rng: np.random.Generator) -> np.ndarray:
        pitch = PITCHES[sound.pitch] * (1 + rng.uniform(-PITCH_JITTER, PITCH_JITTER))
        frequency = self.frequencies(sound, pitch)
        phase = rng.uniform(0, 2 * np.pi) + 2 * np.pi * np.cumsum(frequency) / self.sample_rate
        wave = _waveform(phase, frequency, sound.timbre, self.sample_rate)
        wave /= np.abs(wave).max()
        if sound.pattern in BEATS:
            wave *= _gate(np.arange(len(wave)) / self.sample_rate, BEATS[sound.pattern])
        samples = rng.uniform(0.3, 0.6) * wave + rng.uniform(-HISS, HISS, len(wave))
        return samples.astype(np.float32)

    def encode(self, attributes: Attributes, array: np.ndarray) -> bytes:
        """The file of a rendered array, in the task's format for its modality."""
        if isinstance(attributes, Scene):
            return encode_image(array, self.image_format)
        if isinstance(attributes, Motion):
            return encode_video(array, self.video_format, self.fps, self.video_codec)
        return encode_audio(array, self.sample_rate, self.audio_format)

    # Splits.

    def split(self, count: int, seed: int, *, modality: Union[int, str, Sequence[Union[int, str]]] = "image",
              exclude: Union[None, Split, Iterable[Split]] = None, distinct: bool = True) -> Split:
        """`count` items, item i of modality[i % len(modality)], none with the (modality,
        attributes) of an item of `exclude` (a split or several). With `distinct` (for
        evaluation) no two items share a combination, so every caption fits exactly one item;
        without it (for training) combinations are drawn with replacement."""
        kinds = _modalities(modality)
        per_item = [kinds[i % len(kinds)] for i in range(count)]
        excluded = _excluded_keys(exclude)
        rng = np.random.default_rng([self.seed, seed, 0x5E1F])
        drawn: Dict[int, deque] = {}
        for kind in sorted(set(per_item)):
            pool = [a for a in self.combinations(kind) if (kind, a) not in excluded]
            need = per_item.count(kind)
            if not pool or (distinct and need > len(pool)):
                raise ValueError(f"{need} distinct items of modality {kind} asked for, "
                                 f"{len(pool)} combinations left")
            picks = rng.permutation(len(pool))[:need] if distinct else rng.integers(len(pool), size=need)
            drawn[kind] = deque(pool[j] for j in picks)
        attributes = [drawn[kind].popleft() for kind in per_item]
        wordings = rng.integers(WORDINGS, size=count)
        seeds = [int(s) for s in rng.integers(2 ** 63, size=count)]
        captions = [self.caption(a, int(w)).encode() for a, w in zip(attributes, wordings)]
        contents = [self.encode(a, self.render(a, s)) for a, s in zip(attributes, seeds)]
        return Split(captions, contents, per_item, attributes, seeds)

    # Token counts per item (DESIGN section 5), to size a BatchShape.

    def image_tokens(self, patch_side: int) -> int:
        grid = max(1, int(np.floor(self.image_size / patch_side + 0.5)))
        return grid * grid

    def video_tokens(self, patch_side: int, tube_frames: int, frame_stride: int = 1) -> int:
        grid = max(1, int(np.floor(self.video_size / patch_side + 0.5)))
        kept = -(-self.frames // frame_stride)
        return -(-kept // tube_frames) * grid * grid

    def audio_tokens(self, chunk_samples: int, sample_rate: Optional[int] = None) -> int:
        samples = int(round(self.duration * (sample_rate or self.sample_rate)))
        return -(-samples // chunk_samples)


# -- training batches and evaluation ---------------------------------------------------------

def batches(split: Split, pairs: int, seed: int) -> Iterator[Tuple[List[int], List[bytes], List[int]]]:
    """Endless shuffled batches of `pairs` (caption, media) pairs as (modalities, contents,
    bags): modalities = [TEXT, m0, TEXT, m1, ...], contents = [caption 0, file 0, caption 1,
    ...], bags = [0, 0, 1, 1, ...]. Modalities mix as the split does (see split(modality=...)
    and Split.__add__). A batch never holds two pairs of one (modality, attributes): a caption
    would then fit a second file (a false negative); such a pair waits for the next batch."""
    keys = split.keys()
    if len(set(keys)) < pairs:
        raise ValueError(f"pairs: {pairs} distinct combinations asked, the split has {len(set(keys))}")
    rng = np.random.default_rng([seed, 0xBA7C])
    queue: deque = deque()
    bags = [i // 2 for i in range(2 * pairs)]
    while True:
        chosen: List[int] = []
        taken: set = set()
        skipped: List[int] = []
        while len(chosen) < pairs:
            if not queue:
                queue.extend(rng.permutation(len(split)).tolist())
            i = queue.popleft()
            if keys[i] in taken:
                skipped.append(i)
                continue
            chosen.append(i)
            taken.add(keys[i])
        queue.extendleft(reversed(skipped))
        modalities = [m for i in chosen for m in (TEXT, split.modalities[i])]
        contents = [c for i in chosen for c in (split.captions[i], split.contents[i])]
        yield modalities, contents, bags


def recall_at_1(queries: np.ndarray, documents: np.ndarray) -> float:
    """The fraction of queries whose most similar document (dot product of unit rows) is
    their own, query i -> document i."""
    scores = np.asarray(queries, dtype=np.float32) @ np.asarray(documents, dtype=np.float32).T
    return float(np.mean(np.argmax(scores, axis=1) == np.arange(len(scores))))


if __name__ == "__main__":
    import time

    task = MultimodalTask(seed=0)
    for name in ("image", "video", "audio"):
        sample = task.split(4, seed=1, modality=name)
        for item in sample:
            print(f"{name:<6} {len(item.content):>6} bytes  {item.caption.decode()}")
    for name, count in (("image", 5000), ("video", 200), ("audio", 1000)):
        start = time.perf_counter()
        task.split(count, seed=3, modality=name, distinct=False)
        print(f"{count} {name} items in {time.perf_counter() - start:.2f} s")
    print(f"tokens: image {task.image_tokens(8)} (patch 8) or {task.image_tokens(16)} (patch 16); "
          f"video {task.video_tokens(8, 4)} (patch 8, tube 4) or {task.video_tokens(16, 2, 2)} "
          f"(patch 16, tube 2, stride 2); audio {task.audio_tokens(256)} (chunk 256)")
