"""uform.capabilities() against what the library does when asked: every CPU class listed
loads pinned and every other one raises UnsupportedError; every media format listed
decodes through its file verb and every other one raises UnsupportedError; no GPU
backend is built, so none is reported and the VRAM calls refuse. Small files, written by
the libraries tests/test_decode.py checks the decoders with (tests/media_fixtures.py)."""
from __future__ import annotations

import os

import numpy as np
import pytest

import uform
from uform._native import lib

import media_fixtures as fixtures
from reference.checkpoint import write_random_checkpoint
from reference.media_checkpoint import write_random_media_checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CAPABILITIES = uform.capabilities()

SHAPE = dict(depth=1, hidden=64, dimensions=16, context=48, image={"patch_side": 4},
             video={"patch_side": 4, "tube_frames": 2}, audio={"chunk_samples": 64, "sample_rate": 16000})


def test_structure():
    caps = CAPABILITIES
    assert isinstance(caps, uform.Capabilities) and caps == uform.capabilities()
    assert set(caps.media_formats) == {"image", "video", "audio"}
    assert all(isinstance(names, tuple) for names in caps.media_formats.values())
    assert caps.cpu_classes == tuple(sorted(caps.cpu_classes))
    assert all(isinstance(c, uform.CPUClass) for c in caps.cpu_classes)
    assert uform.CPUClass.SERIAL in caps.cpu_classes
    assert caps.best_cpu_class in caps.cpu_classes
    # The names are the flags uform_media_formats() answers, one family per flag.
    flags = lib.uform_media_formats()
    expected = {"image": [], "video": [], "audio": []}
    for flag, family, names in [(lib.UFORM_MEDIA_JPEG, "image", ["jpeg"]), (lib.UFORM_MEDIA_PNG, "image", ["png"]),
                                (lib.UFORM_MEDIA_WEBP, "image", ["webp"]),
                                (lib.UFORM_MEDIA_VIDEO, "video", ["mp4", "mov", "webm", "mkv"]),
                                (lib.UFORM_MEDIA_AUDIO, "audio", ["wav", "flac", "ogg", "opus"]),
                                (lib.UFORM_MEDIA_MP3, "audio", ["mp3"])]:
        if flags & flag:
            expected[family] += names
    assert {family: list(names) for family, names in caps.media_formats.items()} == expected


def test_gpu_backend_and_gpus_agree_with_the_vram_calls(tmp_path):
    with open(os.path.join(ROOT, "c", "build", "media.txt"), encoding="utf-8") as stream:
        built = dict(line.rstrip("\n").split("=", 1) for line in stream if "=" in line).get("cuda", "")
    assert CAPABILITIES.gpu_backend is (built == "cuda")
    path = tmp_path / "model.safetensors"
    write_random_checkpoint(str(path), depth=1, hidden=64, dimensions=8, context=8)
    if CAPABILITIES.gpus:   # a GPU machine: the VRAM models load (make test-gpu checks their outputs)
        model = uform.Model.load_vram(str(path))
        assert model.describe().gpu_class is not None and model.describe().cpu_class is None
        gpus = uform.Executor.for_vram([0])
        assert gpus.threads >= 1
        uform.Trainer.init_vram(gpus, depth=1, hidden=64, objective=uform.Objective.JOINT,
                                late_interaction=uform.LateInteraction())
        uform.Trainer.init_vram(gpus, depth=1, hidden=64,
                                batch=uform.BatchShape(image=uform.ImageShape(patch_side=4)))
        return
    if not CAPABILITIES.gpu_backend:
        expected, words = uform.UnsupportedError, "no GPU backend"
    else:
        expected, words = uform.DeviceError, "no GPU found"   # the CUDA build on a machine without one
    with pytest.raises(expected, match=words):
        uform.Model.load_vram(str(path))
    with pytest.raises(expected, match=words):
        uform.Executor.for_vram([0])
    with pytest.raises(expected, match=words):
        uform.Trainer.init_vram(uform.Executor.for_ram(1))


def test_cpu_classes_listed_load_and_others_do_not(tmp_path):
    path = tmp_path / "model.safetensors"
    write_random_checkpoint(str(path), depth=1, hidden=64, dimensions=8, context=8)
    for cpu_class in uform.CPUClass:
        if cpu_class in CAPABILITIES.cpu_classes:
            assert uform.Model.load_ram(str(path), cpu_class=cpu_class).describe().cpu_class == cpu_class
        else:
            with pytest.raises(uform.UnsupportedError, match="cpu_class"):
                uform.Model.load_ram(str(path), cpu_class=cpu_class)
    assert uform.Model.load_ram(str(path)).describe().cpu_class == CAPABILITIES.best_cpu_class
    # AMX, where the machine runs it, is the automatic choice (its tiles are the fastest class).
    assert (CAPABILITIES.best_cpu_class == uform.CPUClass.AMX) == (uform.CPUClass.AMX in CAPABILITIES.cpu_classes)
    if uform.CPUClass.AMX not in CAPABILITIES.cpu_classes:
        with pytest.raises(uform.UnsupportedError, match="cannot run the amx class|amx class is not built"):
            uform.Model.load_ram(str(path), cpu_class=uform.CPUClass.AMX)


def write_sound(path, container, subtype):
    pytest.importorskip("soundfile", reason="soundfile writes the test recordings (make deps)")
    fixtures.write_sound(path, container, subtype, 1, frames=1600)


def write_picture(path, kind):
    pytest.importorskip("PIL.Image", reason="Pillow writes the test images (make deps)")
    fixtures.write_image(path, kind, fixtures.test_picture(12, 16, seed=3))


def write_clip(path, codec, container):
    pytest.importorskip("av", reason="PyAV writes the test clips (make deps)")
    fixtures.write_clip(path, codec, container, frames=4, height=16, width=16)


# Every format a Capabilities can list: (family, a writer of a small file of it).
FORMATS = {
    "jpeg": ("image", lambda path: write_picture(path, "jpeg-444")),
    "png": ("image", lambda path: write_picture(path, "png-rgb")),
    "webp": ("image", lambda path: write_picture(path, "webp-lossless")),
    "mp4": ("video", lambda path: write_clip(path, "mpeg4", "mp4")),
    "mov": ("video", lambda path: write_clip(path, "mpeg4", "mov")),
    "webm": ("video", lambda path: write_clip(path, "libvpx", "webm")),
    "mkv": ("video", lambda path: write_clip(path, "libvpx", "matroska")),
    "wav": ("audio", lambda path: write_sound(path, "WAV", "PCM_16")),
    "flac": ("audio", lambda path: write_sound(path, "FLAC", "PCM_16")),
    "ogg": ("audio", lambda path: write_sound(path, "OGG", "VORBIS")),
    "opus": ("audio", lambda path: write_sound(path, "OGG", "OPUS")),
    "mp3": ("audio", lambda path: write_sound(path, "MP3", "MPEG_LAYER_III")),
}


def test_every_format_is_one_a_capabilities_can_list():
    for family, names in CAPABILITIES.media_formats.items():
        assert all(FORMATS[name][0] == family for name in names)


@pytest.fixture(scope="module")
def media_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("capabilities") / "media.safetensors"
    write_random_media_checkpoint(str(path), **SHAPE)
    return uform.Model.load_ram(str(path))


@pytest.mark.parametrize("name", list(FORMATS))
def test_media_formats_listed_decode_and_others_do_not(media_model, tmp_path, name):
    family, write = FORMATS[name]
    path = tmp_path / f"item.{name}"
    write(path)
    verb = getattr(media_model, f"{family}_encode")
    if name in CAPABILITIES.media_formats[family]:
        embeddings = np.asarray(verb([path], uform.Arena()).embeddings)
        assert embeddings.shape == (1, SHAPE["dimensions"]) and np.isfinite(embeddings).all()
        assert abs(np.linalg.norm(embeddings[0]) - 1) < 1e-4
    else:
        with pytest.raises(uform.UnsupportedError, match="needs"):
            verb([path], uform.Arena())


def test_mesh_engine_says_whether_a_mesh_bootstraps(tmp_path):
    executor = uform.Executor.for_ram(1)
    options = uform.MeshOptions(host_domain_index=0, host_domain_count=1, directory=tmp_path, job="probe")
    with open(os.path.join(ROOT, "c", "build", "media.txt"), encoding="utf-8") as stream:
        built = dict(line.rstrip("\n").split("=", 1) for line in stream if "=" in line).get("mesh", "")
    assert CAPABILITIES.mesh_engine == (built or None)
    if CAPABILITIES.mesh_engine == "gloo":
        assert uform.Mesh.bootstrap(executor, options).describe().engine == "gloo"
    else:
        with pytest.raises(uform.UnsupportedError, match="Gloo"):
            uform.Mesh.bootstrap(executor, options)
