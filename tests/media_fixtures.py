"""Media files for the decoder tests and fuzz seeds, written at run time by the
oracle libraries (Pillow, soundfile, PyAV) or, for what they cannot write
(16-bit RGB and interlaced PNG, headers declaring absurd sizes), by hand here.

Every writer takes a path and returns what the test compares against when the
writer itself knows the pixels or samples exactly; otherwise the test asks the
oracle to read the file back."""
from __future__ import annotations

import fractions
import struct
import zlib

import numpy as np

# ---- pictures -------------------------------------------------------------------


def test_picture(height: int, width: int, seed: int = 0) -> np.ndarray:
    """RGB8 gradients with noise and a few hard edges: smooth areas for the
    lossy codecs' upsampling and sharp ones for their transforms."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    picture = np.stack([(xx * 7) % 256, (yy * 5) % 256, ((xx + yy) * 3) % 256], -1)
    picture = picture // 2 + rng.integers(0, 128, picture.shape)
    picture[height // 3 : height // 2, width // 4 : width // 2] = [250, 20, 30]
    return picture.astype(np.uint8)


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


_ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def write_png(path, samples: np.ndarray, *, interlaced: bool = False) -> None:
    """A PNG of 8- or 16-bit samples: [h, w] gray, [h, w, 2] gray + alpha,
    [h, w, 3] RGB or [h, w, 4] RGBA; optionally Adam7-interlaced. Rows use
    filter 0, so the file is exactly the samples, deflated."""
    if samples.ndim == 2:
        samples = samples[:, :, None]
    height, width, channels = samples.shape
    depth = 16 if samples.dtype == np.uint16 else 8
    color_type = {1: 0, 2: 4, 3: 2, 4: 6}[channels]
    big_endian = samples.astype(">u2") if depth == 16 else samples.astype(np.uint8)
    passes = _ADAM7 if interlaced else [(0, 0, 1, 1)]
    raw = bytearray()
    for x0, y0, dx, dy in passes:
        sub = big_endian[y0::dy, x0::dx]
        if sub.shape[0] == 0 or sub.shape[1] == 0:
            continue
        for row in sub:
            raw += b"\x00" + row.tobytes()
    header = struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0, 1 if interlaced else 0)
    with open(path, "wb") as stream:
        stream.write(b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header))
        stream.write(_chunk(b"IDAT", zlib.compress(bytes(raw), 9)) + _chunk(b"IEND", b""))


def write_image(path, kind: str, picture: np.ndarray) -> None:
    """Pillow writes `picture` as one of the named kinds (see IMAGE_KINDS)."""
    from PIL import Image

    image = Image.fromarray(picture)
    if kind == "jpeg-444":
        image.save(path, "JPEG", quality=90, subsampling=0)
    elif kind == "jpeg-420":
        image.save(path, "JPEG", quality=90, subsampling=2)
    elif kind == "jpeg-422":
        image.save(path, "JPEG", quality=90, subsampling=1)
    elif kind == "jpeg-progressive":
        image.save(path, "JPEG", quality=90, progressive=True)
    elif kind == "jpeg-gray":
        image.convert("L").save(path, "JPEG", quality=90)
    elif kind == "jpeg-cmyk":
        image.convert("CMYK").save(path, "JPEG", quality=90)
    elif kind == "png-rgb":
        image.save(path, "PNG")
    elif kind == "png-rgba":
        alpha = Image.fromarray(picture[:, :, 0] ^ picture[:, :, 1])
        rgba = image.convert("RGBA")
        rgba.putalpha(alpha)
        rgba.save(path, "PNG")
    elif kind == "png-l":
        image.convert("L").save(path, "PNG")
    elif kind == "png-la":
        image.convert("LA").save(path, "PNG")
    elif kind == "png-p":
        image.convert("P", palette=Image.Palette.ADAPTIVE, colors=200).save(path, "PNG")
    elif kind == "png-p-transparent":
        image.convert("P", palette=Image.Palette.ADAPTIVE, colors=16).save(path, "PNG", transparency=3)
    elif kind == "png-p-4bit":
        image.convert("P", palette=Image.Palette.ADAPTIVE, colors=16).save(path, "PNG", bits=4)
    elif kind == "png-1bit":
        image.convert("1").save(path, "PNG")
    elif kind == "png-i16":
        Image.fromarray(picture[:, :, 0].astype(np.uint16) * 257 + 3).save(path, "PNG")
    elif kind == "webp-lossless":
        image.save(path, "WEBP", lossless=True)
    elif kind == "webp-lossy":
        image.save(path, "WEBP", quality=80)
    elif kind == "webp-alpha":
        rgba = image.convert("RGBA")
        rgba.putalpha(Image.fromarray(picture[:, :, 2]))
        rgba.save(path, "WEBP", lossless=True, exact=True)
    elif kind == "webp-lossy-alpha":
        rgba = image.convert("RGBA")
        rgba.putalpha(Image.fromarray(picture[:, :, 2]))
        rgba.save(path, "WEBP", quality=80)
    elif kind == "webp-animated":
        frames = [Image.fromarray(np.roll(picture, 3 * i, axis=1)) for i in range(3)]
        frames[0].save(path, "WEBP", save_all=True, append_images=frames[1:], duration=40, lossless=True)
    else:
        raise ValueError(kind)


IMAGE_KINDS = [
    "jpeg-444", "jpeg-420", "jpeg-422", "jpeg-progressive", "jpeg-gray", "jpeg-cmyk",
    "png-rgb", "png-rgba", "png-l", "png-la", "png-p", "png-p-transparent", "png-p-4bit",
    "png-1bit", "png-i16", "webp-lossless", "webp-lossy", "webp-alpha", "webp-lossy-alpha",
]

# ---- headers declaring sizes no decoder should allocate --------------------------


def with_png_size(png: bytes, width: int, height: int) -> bytes:
    """The PNG with its IHDR declaring width x height (CRC fixed, so libpng
    trusts the chunk)."""
    header = struct.pack(">II", width, height) + png[24:29]
    return png[:16] + header + struct.pack(">I", zlib.crc32(b"IHDR" + header)) + png[33:]


def with_jpeg_size(jpeg: bytes, width: int, height: int) -> bytes:
    """The baseline JPEG with its SOF0 declaring width x height."""
    at = jpeg.find(b"\xff\xc0")
    assert at > 0, "no SOF0 marker"
    return jpeg[: at + 5] + struct.pack(">HH", height, width) + jpeg[at + 9 :]


def with_vp8l_size(webp: bytes, width: int, height: int) -> bytes:
    """The lossless WebP with its VP8L header declaring width x height (each
    at most 16384, the format's own limit)."""
    at = webp.find(b"VP8L") + 9  # fourcc, chunk size, signature byte
    (bits,) = struct.unpack("<I", webp[at : at + 4])
    bits = (bits & 0xF0000000) | (width - 1) | ((height - 1) << 14)
    return webp[:at] + struct.pack("<I", bits) + webp[at + 4 :]


def with_vp8_size(webp: bytes, width: int, height: int) -> bytes:
    """The lossy WebP with its VP8 key frame declaring width x height (14 bits each)."""
    at = webp.find(b"\x9d\x01\x2a") + 3  # the key frame's start code
    return webp[:at] + struct.pack("<HH", width, height) + webp[at + 4 :]


def webp_with_canvas(webp: bytes, width: int, height: int) -> bytes:
    """The still WebP behind a VP8X chunk declaring a width x height canvas
    (libwebp wants it to match the image's own size)."""
    vp8x = b"VP8X" + struct.pack("<I", 10) + bytes(4)
    vp8x += (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    body = b"WEBP" + vp8x + webp[12:]
    return b"RIFF" + struct.pack("<I", len(body)) + body


def with_wav_data_size(wav: bytes, size: int) -> bytes:
    """The WAV with its data chunk declaring `size` bytes (at most 2^32 - 1)."""
    at = wav.find(b"data") + 4
    return wav[:at] + struct.pack("<I", size) + wav[at + 4 :]


def with_rf64_sizes(rf64: bytes, data_bytes: int, frames: int) -> bytes:
    """The RF64 file with its ds64 chunk declaring 64-bit data and sample counts."""
    at = rf64.find(b"ds64") + 8
    return rf64[: at + 8] + struct.pack("<QQ", data_bytes, frames) + rf64[at + 24 :]


def with_flac_total_samples(flac: bytes, total: int) -> bytes:
    """The FLAC with STREAMINFO declaring `total` samples per channel (36 bits)."""
    at = 4 + 4 + 10  # "fLaC", block header, block and frame sizes
    (fields,) = struct.unpack(">Q", flac[at : at + 8])
    fields = (fields & ~((1 << 36) - 1)) | total
    return flac[:at] + struct.pack(">Q", fields) + flac[at + 8 :]


def wav_with_mpeg_payload(mp3: bytes, channels: int, rate: int) -> bytes:
    """A WAV whose fmt chunk says MPEG Layer 3 (MPEGLAYER3WAVEFORMAT) around an MP3 stream."""
    fmt = struct.pack("<HHIIHHHHIHHH", 0x55, channels, rate, 16000, 1, 0, 12, 1, 2, 144, 1, 1393)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(mp3)) + mp3
    return b"RIFF" + struct.pack("<I", len(body)) + body


def with_webm_size(webm: bytes, width: int, height: int, new_width: int, new_height: int) -> bytes:
    """The WebM with its track's PixelWidth/PixelHeight elements (IDs B0, BA,
    two-byte values) changed from width x height to new_width x new_height."""
    old = b"\xb0\x82" + struct.pack(">H", width), b"\xba\x82" + struct.pack(">H", height)
    assert webm.count(old[0]) == 1 and webm.count(old[1]) == 1, "pick sizes of 256 to 65535"
    webm = webm.replace(old[0], b"\xb0\x82" + struct.pack(">H", new_width))
    return webm.replace(old[1], b"\xba\x82" + struct.pack(">H", new_height))


def with_avc1_size(mp4: bytes, width: int, height: int) -> bytes:
    """The MP4 with its avc1 sample entry declaring width x height."""
    at = mp4.find(b"avc1", mp4.find(b"stsd")) + 4 + 24  # reserved, data reference index, predefined
    return mp4[:at] + struct.pack(">HH", width, height) + mp4[at + 4 :]


# ---- sound ------------------------------------------------------------------------


def test_sound(frames: int, channels: int, rate: int) -> np.ndarray:
    """[frames, channels] float64 in (-1, 1): a different tone per channel."""
    t = np.arange(frames) / rate
    return np.stack(
        [0.8 * np.sin(2 * np.pi * (220 + 70 * c) * t + c) * (0.5 + 0.5 * np.cos(3 * t + c)) for c in range(channels)],
        -1,
    )


# (format, subtype, extension) soundfile writes; MP3 only up to two channels.
AUDIO_KINDS = [
    ("WAV", "PCM_U8", "wav"), ("WAV", "PCM_16", "wav"), ("WAV", "PCM_24", "wav"),
    ("WAV", "PCM_32", "wav"), ("WAV", "FLOAT", "wav"), ("FLAC", "PCM_16", "flac"),
    ("FLAC", "PCM_24", "flac"), ("OGG", "VORBIS", "ogg"), ("OGG", "OPUS", "opus"),
    ("MP3", "MPEG_LAYER_III", "mp3"),
]
LOSSY_SUBTYPES = {"VORBIS", "OPUS", "MPEG_LAYER_III"}


def write_sound(path, container: str, subtype: str, channels: int, frames: int = 4000, rate: int = 16000) -> None:
    import soundfile

    if subtype == "OPUS":
        rate = 48000  # the only rates Opus takes are divisors of 48 kHz; keep it simple
    soundfile.write(path, test_sound(frames, channels, rate), rate, format=container, subtype=subtype)


# ---- clips --------------------------------------------------------------------------


def clip_frames(count: int, height: int, width: int) -> list:
    """Frames of two shapes moving over a gradient, each frame unlike the others."""
    yy, xx = np.mgrid[0:height, 0:width]
    frames = []
    for i in range(count):
        frame = np.zeros((height, width, 3), np.uint8)
        frame[..., 0] = (xx * 4 + i * 9) % 256
        frame[..., 1] = (yy * 3 + i * 5) % 256
        frame[..., 2] = 80
        cx, cy = 4 + (i * 3) % (width - 8), 5 + (i * 2) % (height - 10)
        frame[(xx - cx) ** 2 + (yy - cy) ** 2 < 30] = [250, 250, 30]
        left = max(0, width - 12 - 2 * i)
        frame[cy : cy + 6, left : left + 6] = [20, 200, 240]
        frames.append(frame)
    return frames


# (codec, container format, extension) PyAV encodes with the FFmpeg it bundles.
VIDEO_KINDS = [("libx264", "mp4", "mp4"), ("mpeg4", "mp4", "mp4"), ("libvpx", "webm", "webm"),
               ("libvpx-vp9", "webm", "webm")]


def write_clip(path, codec: str, container: str, *, frames: int = 10, height: int = 48, width: int = 64,
               pts: list | None = None, pixel_format: str = "yuv420p", audio_first: bool = False) -> None:
    """A clip of clip_frames(); `pts` (in 1/24 s) makes the frame rate variable;
    `audio_first` puts an AAC stream before the video stream."""
    import av

    output = av.open(str(path), "w", format=container)
    audio = output.add_stream("aac", rate=16000) if audio_first else None
    stream = output.add_stream(codec, rate=24)
    stream.width, stream.height, stream.pix_fmt = width, height, pixel_format
    stream.time_base = fractions.Fraction(1, 24)
    for i, picture in enumerate(clip_frames(frames, height, width)):
        frame = av.VideoFrame.from_ndarray(picture, format="rgb24")
        frame.pts = pts[i] if pts is not None else i
        frame.time_base = fractions.Fraction(1, 24)
        for packet in stream.encode(frame):
            output.mux(packet)
    for packet in stream.encode():
        output.mux(packet)
    if audio is not None:
        sound = av.AudioFrame.from_ndarray(np.zeros((2, 1024), np.float32), format="fltp", layout="stereo")
        sound.sample_rate, sound.pts = 16000, 0
        for packet in list(audio.encode(sound)) + list(audio.encode()):
            output.mux(packet)
    output.close()


def write_sound_clip(path) -> None:
    """An MP4 holding only an AAC stream."""
    import av

    output = av.open(str(path), "w", format="mp4")
    audio = output.add_stream("aac", rate=16000)
    sound = av.AudioFrame.from_ndarray(np.zeros((2, 4096), np.float32), format="fltp", layout="stereo")
    sound.sample_rate, sound.pts = 16000, 0
    for packet in list(audio.encode(sound)) + list(audio.encode()):
        output.mux(packet)
    output.close()


def reference_frames(path) -> np.ndarray:
    """Every frame PyAV decodes from the first video stream, as RGB24."""
    import av

    with av.open(str(path)) as container:
        return np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)])
