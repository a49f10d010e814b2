"""The media decoders (c/src/media/decode) against the libraries people check them
with: Pillow for images, soundfile for audio, PyAV for video. The fixtures are
written at run time by those libraries (tests/media_fixtures.py); the
decoders run in tests/c/decode_tool.c under ASan/UBSan.

Tolerances, each measured and explained where it is used:
- PNG, lossless WebP: exact (lossless; both sides do the same reductions).
- JPEG, lossy WebP: exact. Pillow bundles libjpeg-turbo and libwebp, the
  library decodes with the system's; both use libjpeg-turbo's default
  decoding (ISLOW IDCT, fancy upsampling) and libwebp's default (fancy)
  upsampling, whose outputs do not change between versions or SIMD paths.
- audio: 1e-6 for PCM, float and FLAC (both read floats through libsndfile;
  only the order of the channel mean's additions differs: ~3e-8 measured),
  1e-5 for Vorbis, Opus and MP3 (the Python wheel bundles its own codec
  builds; 1.2e-7 measured).
- video: at most 2 levels, mean under 0.25 (PyAV bundles a newer FFmpeg than
  the system's, and swscale's YUV to RGB code differs between versions and
  CPU paths; 0 measured with FFmpeg 5.1 against PyAV's 8.0). Frame counts,
  order and stride are exact, and each kept frame must be nearer its own
  PyAV frame than any other.
"""
from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

import uform

import media_fixtures as fixtures
from media_decoding import FORMAT, OK, ROOT, UNSUPPORTED, Tool, build_tool

Image = pytest.importorskip("PIL.Image", reason="Pillow is the image oracle (make deps)")
soundfile = pytest.importorskip("soundfile", reason="soundfile is the audio oracle (make deps)")
av = pytest.importorskip("av", reason="PyAV is the video oracle (make deps)")

# Pillow's advice to convert palette images with transparency to RGBA is about
# its own API, not about the files these tests write on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:Palette images with Transparency")

FLAGS = {"jpeg": uform._native.lib.UFORM_MEDIA_JPEG, "png": uform._native.lib.UFORM_MEDIA_PNG,
         "webp": uform._native.lib.UFORM_MEDIA_WEBP, "audio": uform._native.lib.UFORM_MEDIA_AUDIO,
         "mp3": uform._native.lib.UFORM_MEDIA_MP3, "video": uform._native.lib.UFORM_MEDIA_VIDEO}


@pytest.fixture(scope="session")
def tool() -> Tool:
    return Tool(build_tool())


@pytest.fixture(scope="session")
def media(tmp_path_factory):
    return tmp_path_factory.mktemp("media")


def require(tool: Tool, decoder: str) -> None:
    """Skips a test of a decoder this build lacks (test_without_libraries covers that case)."""
    if decoder not in media_file()["decoders"].split():
        pytest.skip(f"this build has no {decoder} decoder (c/build/media.txt)")


def require_audio(tool: Tool, subtype: str) -> None:
    require(tool, "mp3" if subtype.startswith("MPEG") else "audio")


def pillow_rgb(path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


# ---- build plumbing -----------------------------------------------------------------


def media_file(build: str = "c/build") -> dict:
    with open(os.path.join(ROOT, build, "media.txt"), encoding="utf-8") as stream:
        return dict(line.rstrip("\n").split("=", 1) for line in stream if "=" in line)


def test_formats_are_the_libraries_make_found(tool):
    found = media_file()["decoders"].split()
    assert tool.formats() == sum(FLAGS[name] for name in found)
    # What the cffi module was built from answers the same.
    assert uform._native.lib.uform_media_formats() == tool.formats()


def test_pkg_config_static_links_the_media_libraries(tmp_path):
    prefix = tmp_path / "prefix"
    subprocess.run(["make", "--no-print-directory", "-s", "-C", ROOT, "install", f"PREFIX={prefix}"],
                   check=True, capture_output=True)
    environment = {**os.environ, "PKG_CONFIG_PATH": str(prefix / "lib" / "pkgconfig")}

    def flags(*arguments):
        return subprocess.run(["pkg-config", *arguments, "uform"], check=True, capture_output=True,
                              text=True, env=environment).stdout.split()

    media = media_file()
    with open(prefix / "lib" / "pkgconfig" / "uform.pc", encoding="utf-8") as stream:
        fields = dict(line.rstrip("\n").split(": ", 1) for line in stream if ": " in line)
    assert fields["Requires.private"].split() == media["requires"].split()
    static = flags("--static", "--libs")
    for library in media["libs"].split():
        assert library in static, f"{library} missing from pkg-config --static --libs uform: {static}"
    assert "-luform" in flags("--libs") and not set(media["libs"].split()) & set(flags("--libs"))


def test_without_libraries(tmp_path):
    """A build with every library left out (make UFORM_MEDIA=none) answers
    UnsupportedError naming the library, except for bytes no format claims."""
    bare = Tool(build_tool("c/build/nomedia", media="none"))
    assert bare.formats() == 0
    assert media_file("c/build/nomedia")["decoders"] == ""
    picture = fixtures.test_picture(8, 8)
    for kind, library in [("jpeg-444", "libjpeg"), ("png-rgb", "libpng"), ("webp-lossless", "libwebp")]:
        path = tmp_path / kind
        fixtures.write_image(path, kind, picture)
        with pytest.raises(uform.UnsupportedError, match=f"needs {library}, which this build of libuform was compiled without"):
            bare.image(path)
    sound = tmp_path / "sound.wav"
    fixtures.write_sound(sound, "WAV", "PCM_16", 1, frames=100)
    with pytest.raises(uform.UnsupportedError, match="needs libsndfile"):
        bare.audio(sound)
    mp3 = tmp_path / "sound.mp3"
    fixtures.write_sound(mp3, "MP3", "MPEG_LAYER_III", 1, frames=2000)
    with pytest.raises(uform.UnsupportedError, match="MP3 decoding needs libmpg123"):
        bare.audio(mp3)
    clip = tmp_path / "clip.webm"
    fixtures.write_clip(clip, "libvpx", "webm", frames=2)
    with pytest.raises(uform.UnsupportedError, match="needs FFmpeg"):
        bare.video(clip)
    junk = tmp_path / "junk"
    junk.write_bytes(b"GIF89a" + bytes(40))
    with pytest.raises(uform.FormatError, match="not a JPEG, PNG or WebP file"):
        bare.image(junk)


# ---- images ---------------------------------------------------------------------------

DECODER_OF = {"jpeg": "jpeg", "png": "png", "webp": "webp"}


@pytest.mark.parametrize("kind", fixtures.IMAGE_KINDS)
@pytest.mark.parametrize("size", [(37, 53), (1, 1), (2, 3)], ids=["37x53", "1x1", "2x3"])
def test_images_match_pillow(tool, media, kind, size):
    require(tool, kind.split("-")[0])
    picture = fixtures.test_picture(*size, seed=size[0])
    path = media / f"{kind}-{size[0]}x{size[1]}"
    fixtures.write_image(path, kind, picture)
    decoded = tool.image(path)
    if kind == "png-i16":
        # Pillow opens 16-bit gray as I;16 and clips it to 8 bits on convert;
        # the library keeps the high byte (decode.h), so compare with that.
        with Image.open(path) as image:
            high = (np.asarray(image).astype(np.uint16) >> 8).astype(np.uint8)
        expected = np.repeat(high[:, :, None], 3, axis=2)
    else:
        expected = pillow_rgb(path)
    assert decoded.shape == (*size, 3)
    np.testing.assert_array_equal(decoded, expected)
    if kind in ("png-rgb", "png-rgba", "webp-lossless", "webp-alpha"):
        np.testing.assert_array_equal(decoded, picture)  # lossless: the very pixels written
    if kind == "png-l":
        assert (decoded[:, :, 0] == decoded[:, :, 1]).all() and (decoded[:, :, 1] == decoded[:, :, 2]).all()


PNG_SAMPLES = {
    "rgb16": lambda p: p.astype(np.uint16) * 251 + 7,
    "rgba16": lambda p: np.concatenate([p, p[:, :, :1]], 2).astype(np.uint16) * 257 + 1,
    "gray16": lambda p: p[:, :, 1].astype(np.uint16) * 255 + 200,
    "gray-alpha16": lambda p: p[:, :, :2].astype(np.uint16) * 256 + 255,
    "rgb8": lambda p: p,
    "gray-alpha8": lambda p: p[:, :, 1:],
}


@pytest.mark.parametrize("interlaced", [False, True], ids=["plain", "adam7"])
@pytest.mark.parametrize("name", list(PNG_SAMPLES))
@pytest.mark.parametrize("size", [(19, 23), (1, 1), (3, 5)], ids=["19x23", "1x1", "3x5"])
def test_png_depths_and_interlacing(tool, media, name, interlaced, size):
    """16-bit channels keep their high byte, alpha is dropped, gray is
    replicated: checked against the samples written, and against Pillow
    where Pillow reads the file as RGB the same way."""
    require(tool, "png")
    samples = PNG_SAMPLES[name](fixtures.test_picture(*size, seed=7))
    path = media / f"{name}-{interlaced}-{size[0]}x{size[1]}.png"
    fixtures.write_png(path, samples, interlaced=interlaced)
    eight = (samples >> 8).astype(np.uint8) if samples.dtype == np.uint16 else samples
    if eight.ndim == 2:
        eight = eight[:, :, None]
    color = eight[:, :, :3] if eight.shape[2] >= 3 else np.repeat(eight[:, :, :1], 3, axis=2)
    decoded = tool.image(path)
    np.testing.assert_array_equal(decoded, color)
    if name in ("rgb16", "rgba16", "rgb8", "gray-alpha8"):
        np.testing.assert_array_equal(decoded, pillow_rgb(path))


def test_animated_webp_is_refused(tool, media):
    require(tool, "webp")
    path = media / "animated.webp"
    fixtures.write_image(path, "webp-animated", fixtures.test_picture(16, 16))
    with pytest.raises(uform.FormatError, match="animated"):
        tool.image(path)


@pytest.mark.parametrize("data", [b"", b"\xff\xd8", b"\x89PNG\r\n\x1a", b"RIFF\x04\x00\x00\x00WAVE",
                                  b"GIF89a\x01\x00\x01\x00", bytes(100)],
                         ids=["empty", "jpeg-2-bytes", "png-7-bytes", "riff-wave", "gif", "zeros"])
def test_unknown_images_are_refused(tool, tmp_path, data):
    path = tmp_path / "unknown"
    path.write_bytes(data)
    with pytest.raises(uform.FormatError, match="not a JPEG, PNG or WebP file"):
        tool.image(path)


def small_image(media, kind) -> bytes:
    path = media / f"small-{kind}"
    fixtures.write_image(path, kind, fixtures.test_picture(9, 7, seed=3))
    return path.read_bytes()


HUGE_IMAGES = {
    "png-100000x100000": lambda media: fixtures.with_png_size(small_image(media, "png-rgb"), 100000, 100000),
    "png-2^31-1-wide": lambda media: fixtures.with_png_size(small_image(media, "png-rgb"), 2**31 - 1, 2),
    "jpeg-65000x65000": lambda media: fixtures.with_jpeg_size(small_image(media, "jpeg-444"), 65000, 65000),
    "jpeg-65500x1025": lambda media: fixtures.with_jpeg_size(small_image(media, "jpeg-420"), 65500, 1025),
    "webp-16383x16383": lambda media: fixtures.with_vp8l_size(small_image(media, "webp-lossless"), 16383, 16383),
    "webp-lossy-16383x16383": lambda media: fixtures.with_vp8_size(small_image(media, "webp-lossy"), 16383, 16383),
    "webp-extended-16383x9000": lambda media: fixtures.webp_with_canvas(
        fixtures.with_vp8l_size(small_image(media, "webp-lossless"), 16383, 9000), 16383, 9000),
}


@pytest.mark.parametrize("name", list(HUGE_IMAGES))
def test_huge_declared_images_are_refused_before_allocating(tool, media, name):
    """Refused with FormatError naming the limit; the tool's sanitizer makes
    any allocation over 1 GiB fatal, so none was attempted."""
    require(tool, name.split("-")[0])
    path = media / f"huge-{name}"
    path.write_bytes(HUGE_IMAGES[name](media))
    with pytest.raises(uform.FormatError, match="over the limit of 67108864 pixels"):
        tool.image(path)


HOSTILE_IMAGE_KINDS = ["jpeg-444", "jpeg-420", "jpeg-progressive", "jpeg-gray", "jpeg-cmyk", "png-rgb",
                       "png-p-transparent", "png-la", "webp-lossless", "webp-lossy", "webp-lossy-alpha"]


@pytest.mark.parametrize("kind", HOSTILE_IMAGE_KINDS)
def test_every_prefix_of_an_image(tool, media, kind):
    """Each cut of the file is refused with FormatError, or (only when just a
    trailing chunk such as PNG's IEND is missing) decodes to the full image."""
    require(tool, kind.split("-")[0])
    data = small_image(media, kind)
    path = media / f"prefixes-{kind}"
    path.write_bytes(data)
    results = tool.prefixes("image", None, path)
    assert [length for length, _, _ in results] == list(range(len(data) + 1))
    full = results[-1]
    assert full[1] == OK
    for length, status, digest in results[:-1]:
        assert status in (OK, FORMAT), (length, status)
        if status == OK:
            assert digest == full[2] and length >= len(data) - 16, (length, len(data))
    assert sum(status == FORMAT for _, status, _ in results) >= len(data) - 16


@pytest.mark.parametrize("kind", HOSTILE_IMAGE_KINDS)
def test_corrupt_images(tool, media, kind):
    """Random byte replacements: a FormatError or an image, never a crash."""
    require(tool, kind.split("-")[0])
    path = media / f"flips-{kind}"
    path.write_bytes(small_image(media, kind))
    results = tool.flips("image", None, path, seed=len(kind), count=400)
    assert len(results) == 400
    assert {status for _, status, _ in results} <= {OK, FORMAT}
    assert any(status == FORMAT for _, status, _ in results)


# ---- audio ------------------------------------------------------------------------------

QUANTUM = {"PCM_U8": 2.0**-7, "PCM_16": 2.0**-15, "PCM_24": 2.0**-23, "PCM_32": 2.0**-31, "FLOAT": 2.0**-24}


def audio_cases():
    for container, subtype, extension in fixtures.AUDIO_KINDS:
        for channels in (1, 2, 6):
            if subtype == "MPEG_LAYER_III" and channels > 2:
                continue  # MP3 holds at most two channels
            yield pytest.param(container, subtype, extension, channels, id=f"{subtype}-{channels}ch-{extension}")


@pytest.mark.parametrize("container,subtype,extension,channels", list(audio_cases()))
def test_audio_matches_soundfile(tool, media, container, subtype, extension, channels):
    require_audio(tool, subtype)
    path = media / f"sound-{subtype}-{channels}.{extension}"
    fixtures.write_sound(path, container, subtype, channels)
    reference, rate = soundfile.read(path, dtype="float32", always_2d=True)
    expected = reference.astype(np.float64).mean(axis=1)
    decoded = tool.audio(path)
    assert decoded.dtype == np.float32 and decoded.shape == expected.shape
    tolerance = 1e-5 if subtype in fixtures.LOSSY_SUBTYPES else 1e-6
    np.testing.assert_allclose(decoded, expected, rtol=0, atol=tolerance)
    if subtype in QUANTUM:
        # Independent of soundfile: within a quantization step of what was
        # written (plus float32 rounding of the result, 2^-24 below 1).
        written = fixtures.test_sound(len(decoded), channels, rate).mean(axis=1)
        np.testing.assert_allclose(decoded, written, rtol=0, atol=QUANTUM[subtype] + 2.0**-24)
    # The file's own rate asked explicitly is the same as 0 (keep the rate).
    np.testing.assert_array_equal(tool.audio(path, rate), decoded)


def test_audio_resampling_calls_the_resampler(tool, media):
    """A rate other than the file's goes through uform_resample: until that
    lands it answers UnsupportedError with its own message; then the length
    follows the rate ratio."""
    require(tool, "audio")
    path = media / "resample.wav"
    fixtures.write_sound(path, "WAV", "PCM_16", 2, frames=4000, rate=16000)
    try:
        resampled = tool.audio(path, 8000)
    except uform.UnsupportedError as error:
        assert str(error).startswith("audio: resampling"), str(error)
    else:
        assert abs(len(resampled) - 2000) <= 2


def test_audio_resampling_over_the_limit_is_refused(tool, media):
    require(tool, "audio")
    path = media / "resample-limit.wav"
    fixtures.write_sound(path, "WAV", "PCM_16", 1, frames=4000, rate=16000)
    with pytest.raises(uform.FormatError, match="over the limit"):
        tool.audio(path, 10**12)


@pytest.mark.parametrize("data", [b"", b"RIFF", b"RIFF\x24\x00\x00\x00WAVEfmt ", b"fLaC", b"OggS" + bytes(40),
                                  b"ID3\x03\x00\x00\x00\x00\x00\x00", bytes(1000), bytes(range(256)) * 4],
                         ids=["empty", "riff", "wav-header-only", "flac-magic", "ogg-magic", "id3-only", "zeros", "ramp"])
def test_not_audio_is_refused(tool, tmp_path, data):
    require(tool, "audio")
    path = tmp_path / "not-audio"
    path.write_bytes(data)
    with pytest.raises(uform.FormatError):
        tool.audio(path)


def test_mpeg_audio_never_reaches_libsndfile(tool, media):
    """libsndfile hands MPEG data to libmpg123 without MPG123_QUIET, which then
    prints on damaged files; the library reads plain MPEG itself, quietly, and
    refuses MPEG inside WAV (the tool fails any test whose decoder prints)."""
    require(tool, "mp3")
    rng = np.random.default_rng(4)
    mp3 = media / "quiet.mp3"
    fixtures.write_sound(mp3, "MP3", "MPEG_LAYER_III", 2, frames=2000)
    payload = mp3.read_bytes()
    damaged = media / "damaged.mp3"
    damaged.write_bytes(payload[:600] + rng.integers(0, 256, 700, dtype=np.uint8).tobytes() + payload[1300:])
    # What libmpg123 makes of this file is fixed by its bytes (LAME's 2124-byte file: a Xing
    # frame at 0, audio frames at 288, 792, 1224, 1296, 1368, 2088; the noise is seeded). The
    # noise over bytes 600..1300 cuts the first audio frame short and overwrites the next
    # three headers. libmpg123 takes a frame only once the header after it checks out; its
    # search for one stops at a false sync in the noise, at byte 883 (ff e4 b6 05: MPEG 2.5
    # layer II, 112 kb/s at 12 kHz, a 1345-byte frame), whose next header would lie past the
    # end of the file. Reading there fails ("Error reading the stream") before any frame
    # is taken, so mpg123_getformat fails and audio_mp3.c answers FormatError. (Noise
    # without that false sync lets it resynchronise and decode 623 of the 2000 samples.)
    with pytest.raises(uform.FormatError, match="MP3: no MPEG audio frame"):
        tool.audio(damaged)
    sync_and_noise = media / "sync-noise.mp3"
    sync_and_noise.write_bytes(b"\xff\xfb\x90\x64" + rng.integers(0, 256, 3000, dtype=np.uint8).tobytes())
    with pytest.raises(uform.FormatError):
        tool.audio(sync_and_noise)
    inside = media / "mpeg-inside.wav"
    inside.write_bytes(fixtures.wav_with_mpeg_payload(payload, channels=2, rate=16000))
    with pytest.raises(uform.UnsupportedError, match="MPEG audio inside a WAV"):
        tool.audio(inside)


def test_wav_without_samples_is_refused(tool, media):
    require(tool, "audio")
    path = media / "empty.wav"
    soundfile.write(path, np.zeros((0, 1)), 8000, subtype="PCM_16")
    with pytest.raises(uform.FormatError, match="no samples"):
        tool.audio(path)


def test_huge_declared_audio(tool, media):
    """Headers declaring more samples than the file holds, or than the limit:
    refused with FormatError, or (where libsndfile trusts the file's real
    length) exactly the samples present. The sanitizer makes any allocation
    over 1 GiB fatal."""
    require(tool, "audio")
    wav = media / "huge-base.wav"
    fixtures.write_sound(wav, "WAV", "PCM_16", 2, frames=300)
    present = tool.audio(wav)
    cases = {
        "wav-data-4GiB": fixtures.with_wav_data_size(wav.read_bytes(), 2**32 - 1),
    }
    rf64 = media / "huge-base.rf64"
    soundfile.write(rf64, fixtures.test_sound(300, 2, 16000), 16000, format="RF64", subtype="PCM_16")
    cases["rf64-2^40-samples"] = fixtures.with_rf64_sizes(rf64.read_bytes(), 2**42, 2**40)
    for name, data in cases.items():
        path = media / f"huge-{name}"
        path.write_bytes(data)
        try:
            decoded = tool.audio(path)
        except uform.FormatError:
            continue
        np.testing.assert_array_equal(decoded, present, err_msg=name)
    flac = media / "huge-base.flac"
    fixtures.write_sound(flac, "FLAC", "PCM_16", 1, frames=300)
    path = media / "huge-flac-2^35"
    path.write_bytes(fixtures.with_flac_total_samples(flac.read_bytes(), 2**35))
    with pytest.raises(uform.FormatError, match="over the limit"):
        tool.audio(path)


@pytest.mark.parametrize("container,subtype,extension", [("WAV", "PCM_16", "wav"), ("WAV", "PCM_24", "wav"),
                                                         ("WAV", "FLOAT", "wav"), ("FLAC", "PCM_16", "flac")])
def test_every_prefix_of_lossless_audio(tool, media, container, subtype, extension):
    """Every cut of the file: FormatError, or the samples before the cut."""
    require(tool, "audio")
    path = media / f"prefix-{subtype}.{extension}"
    fixtures.write_sound(path, container, subtype, 2, frames=300)
    data = path.read_bytes()
    full = tool.audio(path)
    results = tool.prefixes("audio", 0, path)
    assert len(results) == len(data) + 1 and results[-1][1] == OK
    assert {status for _, status, _ in results} <= {OK, FORMAT}
    decodable = [length for length, status, _ in results[:-1] if status == OK]
    for length in decodable[:: max(1, len(decodable) // 12)]:
        cut = media / f"prefix-{subtype}-{length}.{extension}"
        cut.write_bytes(data[:length])
        part = tool.audio(cut)
        assert 0 < len(part) <= len(full)
        np.testing.assert_array_equal(part, full[: len(part)])


@pytest.mark.parametrize("container,subtype,extension", [("OGG", "VORBIS", "ogg"), ("OGG", "OPUS", "opus"),
                                                         ("MP3", "MPEG_LAYER_III", "mp3")])
def test_every_prefix_of_lossy_audio(tool, media, container, subtype, extension):
    require_audio(tool, subtype)
    path = media / f"prefix-{subtype}.{extension}"
    fixtures.write_sound(path, container, subtype, 1, frames=2000)
    results = tool.prefixes("audio", 0, path)
    assert results[-1][1] == OK
    assert {status for _, status, _ in results} <= {OK, FORMAT}
    assert results[0][1] == FORMAT


@pytest.mark.parametrize("container,subtype,extension", [kind for kind in fixtures.AUDIO_KINDS])
def test_corrupt_audio(tool, media, container, subtype, extension):
    require_audio(tool, subtype)
    path = media / f"flips-{subtype}.{extension}"
    fixtures.write_sound(path, container, subtype, 2, frames=1500)
    results = tool.flips("audio", 0, path, seed=len(subtype), count=300)
    assert len(results) == 300 and {status for _, status, _ in results} <= {OK, FORMAT}


# ---- video ------------------------------------------------------------------------------


def assert_frames_match(decoded: np.ndarray, reference: np.ndarray, stride: int) -> None:
    kept = reference[::stride]
    assert decoded.shape == kept.shape
    difference = np.abs(decoded.astype(np.int16) - kept.astype(np.int16))
    assert difference.max() <= 2 and difference.mean() < 0.25, (difference.max(), difference.mean())
    for k, frame in enumerate(decoded):  # each kept frame is its own frame, not a neighbour
        distances = np.abs(reference.astype(np.int16) - frame.astype(np.int16)).mean(axis=(1, 2, 3))
        assert int(np.argmin(distances)) == k * stride


@pytest.mark.parametrize("codec,container,extension", fixtures.VIDEO_KINDS)
def test_video_matches_pyav(tool, media, codec, container, extension):
    require(tool, "video")
    path = media / f"clip-{codec}.{extension}"
    fixtures.write_clip(path, codec, container, frames=10)
    reference = fixtures.reference_frames(path)
    assert len(reference) == 10
    for stride in (1, 2, 3, 4, 9, 10, 11, 1000):
        decoded = tool.video(path, stride)
        assert len(decoded) == -(-10 // stride)
        assert_frames_match(decoded, reference, stride)


CLIP_VARIANTS = {
    "size-not-16-aligned": dict(codec="libx264", container="mp4", height=38, width=50, frames=7),
    "odd-size-yuv444": dict(codec="libx264", container="mp4", height=37, width=51, pixel_format="yuv444p",
                            frames=6),
    "variable-rate": dict(codec="libx264", container="mp4", frames=10, pts=[0, 1, 2, 5, 6, 10, 11, 12, 20, 21]),
    "variable-rate-webm": dict(codec="libvpx", container="webm", frames=6, pts=[0, 3, 4, 9, 10, 30]),
    "audio-stream-first": dict(codec="libx264", container="mp4", frames=5, audio_first=True),
    "one-frame": dict(codec="libvpx-vp9", container="webm", frames=1),
    "mjpeg-full-range": dict(codec="mjpeg", container="matroska", pixel_format="yuvj420p", frames=4),
}


@pytest.mark.parametrize("name", list(CLIP_VARIANTS))
def test_video_variants(tool, media, name):
    require(tool, "video")
    variant = dict(CLIP_VARIANTS[name])
    path = media / f"variant-{name}"
    fixtures.write_clip(path, variant.pop("codec"), variant.pop("container"), **variant)
    reference = fixtures.reference_frames(path)
    assert len(reference) == variant["frames"]
    for stride in (1, 2, 3):
        assert_frames_match(tool.video(path, stride), reference, stride)


def test_video_stride_zero_is_an_invalid_argument(tool, media):
    require(tool, "video")
    path = media / "stride0.webm"
    fixtures.write_clip(path, "libvpx", "webm", frames=2)
    with pytest.raises(uform.InvalidArgumentError, match="frame_stride"):
        tool.video(path, 0)


def test_clip_without_video_is_refused(tool, media):
    require(tool, "video")
    path = media / "sound-only.mp4"
    fixtures.write_sound_clip(path)
    with pytest.raises(uform.FormatError, match="no video stream"):
        tool.video(path)


@pytest.mark.parametrize("container", ["avi", "mpegts"])
def test_other_containers_are_refused(tool, media, container):
    """Only the MP4 and Matroska/WebM demuxers may read a clip."""
    require(tool, "video")
    path = media / f"other.{container}"
    fixtures.write_clip(path, "mpeg4", container, frames=3)
    assert len(fixtures.reference_frames(path)) == 3  # a valid clip for FFmpeg itself
    with pytest.raises(uform.FormatError, match="not an MP4 or WebM clip"):
        tool.video(path)


def test_huge_declared_video_is_refused_before_probing(tool, media):
    """Sizes the container declares are checked before FFmpeg probes (decodes)
    anything; the sanitizer makes any allocation over 1 GiB fatal."""
    require(tool, "video")
    webm = media / "declared.webm"
    fixtures.write_clip(webm, "libvpx", "webm", frames=2, height=272, width=320)
    assert len(tool.video(webm)) == 2
    huge = media / "declared-huge.webm"
    huge.write_bytes(fixtures.with_webm_size(webm.read_bytes(), 320, 272, 65535, 65535))
    with pytest.raises(uform.FormatError, match="over the limit of 67108864 pixels"):
        tool.video(huge)
    mp4 = media / "declared.mp4"
    fixtures.write_clip(mp4, "libx264", "mp4", frames=2, height=32, width=48)
    huge = media / "declared-huge.mp4"
    huge.write_bytes(fixtures.with_avc1_size(mp4.read_bytes(), 65535, 65535))
    with pytest.raises(uform.FormatError, match="over the limit of 67108864 pixels"):
        tool.video(huge)


@pytest.mark.parametrize("data", [b"", bytes(4096), b"\x1a\x45\xdf\xa3" + bytes(60), b"\x00\x00\x00\x18ftypmp42" + bytes(64)],
                         ids=["empty", "zeros", "ebml-magic", "ftyp-only"])
def test_not_video_is_refused(tool, tmp_path, data):
    require(tool, "video")
    path = tmp_path / "not-video"
    path.write_bytes(data)
    with pytest.raises(uform.FormatError):
        tool.video(path)


@pytest.mark.parametrize("codec,container,extension", [("libx264", "mp4", "mp4"), ("libvpx", "webm", "webm")])
def test_truncated_video(tool, media, codec, container, extension):
    """Cuts at 60 places: FormatError, or the leading frames of the clip."""
    require(tool, "video")
    path = media / f"truncate-{codec}.{extension}"
    fixtures.write_clip(path, codec, container, frames=8, height=32, width=48)
    data = path.read_bytes()
    full = tool.video(path)
    for length in sorted(set(np.linspace(0, len(data) - 1, 60).astype(int))):
        cut = media / f"truncate-{codec}-{length}.{extension}"
        cut.write_bytes(data[:length])
        try:
            frames = tool.video(cut)
        except uform.FormatError:
            continue
        assert 0 < len(frames) <= len(full)
        np.testing.assert_array_equal(frames, full[: len(frames)])


@pytest.mark.parametrize("codec,container,extension", fixtures.VIDEO_KINDS)
def test_corrupt_video(tool, media, codec, container, extension):
    require(tool, "video")
    path = media / f"flips-{codec}.{extension}"
    fixtures.write_clip(path, codec, container, frames=4, height=32, width=48)
    results = tool.flips("video", 2, path, seed=len(codec), count=150)
    # UnsupportedError is a clear answer too: a flip can name a codec this FFmpeg lacks.
    assert len(results) == 150 and {status for _, status, _ in results} <= {OK, FORMAT, UNSUPPORTED}


# ---- threads ----------------------------------------------------------------------------


THREADED = [
    ("image", None, "jpeg", lambda path: fixtures.write_image(path, "jpeg-420", fixtures.test_picture(40, 30))),
    ("image", None, "png", lambda path: fixtures.write_image(path, "png-p", fixtures.test_picture(40, 30))),
    ("image", None, "webp", lambda path: fixtures.write_image(path, "webp-lossy-alpha", fixtures.test_picture(40, 30))),
    ("audio", 0, "audio", lambda path: fixtures.write_sound(path, "OGG", "VORBIS", 2, frames=3000)),
    ("audio", 0, "mp3", lambda path: fixtures.write_sound(path, "MP3", "MPEG_LAYER_III", 2, frames=3000)),
    ("video", 2, "video", lambda path: fixtures.write_clip(path, "libx264", "mp4", frames=6, height=32, width=48)),
    ("video", 1, "video", lambda path: fixtures.write_clip(path, "libvpx-vp9", "webm", frames=4, height=32, width=48)),
]


@pytest.mark.parametrize("kind,argument,decoder,write", THREADED,
                         ids=["jpeg", "png", "webp", "vorbis", "mp3", "h264", "vp9"])
def test_decoding_on_many_threads_at_once(tool, media, kind, argument, decoder, write):
    """Eight threads decoding one file ten times each all get the single-threaded answer."""
    require(tool, decoder)
    path = media / f"threads-{decoder}-{argument}"
    write(path)
    single = tool.threads(kind, argument, path, 1, 1)
    assert len(single) == 1 and single[0][0] == OK
    assert tool.threads(kind, argument, path, 8, 10) == single
