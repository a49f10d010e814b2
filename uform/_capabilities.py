"""capabilities(): what this build of libuform and this machine run (uform_capabilities)."""
from __future__ import annotations

from typing import NamedTuple

from ._enums import CPUClass
from ._native import check, ffi, lib

#: The file formats each UFORM_MEDIA_* flag stands for, by the family of verbs that decode
#: them (docs/decoding.md), named by their usual file extensions.
_MEDIA_FLAGS = (
    ("image", lib.UFORM_MEDIA_JPEG, ("jpeg",)),
    ("image", lib.UFORM_MEDIA_PNG, ("png",)),
    ("image", lib.UFORM_MEDIA_WEBP, ("webp",)),
    ("video", lib.UFORM_MEDIA_VIDEO, ("mp4", "mov", "webm", "mkv")),
    ("audio", lib.UFORM_MEDIA_AUDIO, ("wav", "flac", "ogg", "opus")),
    ("audio", lib.UFORM_MEDIA_MP3, ("mp3",)),
)


class Capabilities(NamedTuple):
    """What this build of libuform and this machine run, as uform_capabilities_t holds it.

    - media_formats: the file formats the file verbs decode, by family: "image"
      (image_encode: "jpeg", "png", "webp"), "video" (video_encode: "mp4", "mov", "webm",
      "mkv", any codec the system's FFmpeg decodes) and "audio" (audio_encode: "wav",
      "flac", "ogg" for Ogg Vorbis, "opus" for Ogg Opus, the other containers libsndfile
      reads, and "mp3" through libmpg123). Every family is a key, its tuple empty when the
      build decodes none; a format not listed raises UnsupportedError naming the library
      the build lacks.
    - cpu_classes: every CPUClass a model loads pinned to (Model.load_ram(cpu_class=...)),
      ascending: built for this target and run by this CPU and OS. SERIAL is always one; any
      other class raises UnsupportedError.
    - best_cpu_class: the class load_ram picks when none is given; one of cpu_classes.
    - gpu_backend: whether the library was built with the CUDA backend (docs/gpu.md: run on
      one H200). Without it every VRAM call (Model.load_vram, Executor.for_vram,
      Trainer.init_vram) raises UnsupportedError; a CUDA build on a machine without a GPU
      raises DeviceError ("no GPU found").
    - gpus: the GPUs that backend's runtime sees; 0 without one.
    - mesh_engine: "gloo" when Mesh.bootstrap connects hosts on CPUs (the build found Gloo),
      None when it raises UnsupportedError.
    """

    media_formats: dict[str, tuple[str, ...]]
    cpu_classes: tuple[CPUClass, ...]
    best_cpu_class: CPUClass
    gpu_backend: bool
    gpus: int
    mesh_engine: str | None


def capabilities() -> Capabilities:
    """What this build and machine run: media formats, CPU classes, GPUs (see Capabilities)."""
    answer = ffi.new("uform_capabilities_t *")
    check(lib.uform_capabilities(answer))
    media: dict[str, tuple[str, ...]] = {"image": (), "video": (), "audio": ()}
    for family, flag, names in _MEDIA_FLAGS:
        if answer.media_formats & flag:
            media[family] += names
    return Capabilities(
        media_formats=media,
        cpu_classes=tuple(c for c in CPUClass if answer.cpu_classes >> int(c) & 1),
        best_cpu_class=CPUClass(answer.best_cpu_class),
        gpu_backend=bool(answer.gpu_backend_built),
        gpus=int(answer.gpus),
        mesh_engine="gloo" if answer.mesh_engine_built else None,
    )
