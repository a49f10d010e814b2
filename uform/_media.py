"""The image, video and audio verbs (docs/media.md): their stats, and the conversion of
pixels, files and samples into the borrowed C structures the library reads.

Glue only: pixels cross as pointers into the caller's arrays (rows may be strided),
files as one tape of their bytes or of their paths (the C verbs read and decode), samples
as one float32 buffer
with offsets. `Model.image_encode` and the rest delegate here, blocking; the receivers of
`model.deferred(executor)` too, submitting through the uform_*_submit functions.
"""
from __future__ import annotations

import os
from array import array
from itertools import accumulate
from typing import Any, Callable, Sequence, Union

import numpy as np

from ._buffers import Arena, Tape, _is_offsets_buffer, _Tape, _tape_from_buffers, path_bytes
from ._enums import Outputs, Scalar
from ._errors import InvalidArgumentError
from ._executor import Executor
from ._native import Progress, ProgressBridge, as_count, check, ffi, lib

#: Files: paths (str, bytes, os.PathLike), read and decoded by the library, or a
#: (data, offsets) tape of the files' bytes already in memory.
_Files = Union[Sequence[Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]], _Tape]


class _Stats:
    """Fields overwritten by every call the object is passed to."""

    __slots__: tuple[str, ...] = ()

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)

    def _fill(self, c_stats: Any) -> None:
        for name in self.__slots__:
            setattr(self, name, int(getattr(c_stats, name)))

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)}" for name in self.__slots__)
        return f"{type(self).__name__}({fields})"


class ImageEncodeStats(_Stats):
    """What image_encode and image_encode_pixels report: images encoded, patches run
    through the model, images resized to a grid other than their own size, images whose
    grid was scaled down to fit the model's context."""

    __slots__ = ("items", "tokens", "resized", "shrunk")
    items: int
    tokens: int
    resized: int
    shrunk: int


class VideoEncodeStats(_Stats):
    """What video_encode reports: clips encoded, frames kept (every frame_stride-th), tube
    patches run through the model, clips cut at the context, clips without a frame."""

    __slots__ = ("items", "frames", "tokens", "truncated", "empty")
    items: int
    frames: int
    tokens: int
    truncated: int
    empty: int


class AudioEncodeStats(_Stats):
    """What audio_encode and audio_encode_samples report: recordings encoded, samples after
    the mono downmix and resampling, chunks run through the model, recordings cut at the
    context, recordings without a sample."""

    __slots__ = ("items", "samples", "tokens", "truncated", "empty")
    items: int
    samples: int
    tokens: int
    truncated: int
    empty: int


# ---- inputs -----------------------------------------------------------------------

def pixels_array(pixels: Any, name: str = "pixels") -> tuple[Any, tuple]:
    """(cdata uform_pixels_t[n], keepalive) for a sequence of [h, w, 3] uint8 images.

    Images whose pixels are packed (strides (row, 3, 1), rows at a non-negative stride)
    cross without a copy; any other layout (flipped, channel-reversed, ...) is copied
    into a C-contiguous array first."""
    if isinstance(pixels, (str, bytes, bytearray, memoryview)):
        raise InvalidArgumentError(f"{name}: expected a sequence of [height, width, 3] uint8 images, "
                                   f"got {type(pixels).__name__}")
    if isinstance(pixels, np.ndarray) and pixels.ndim == 3:
        raise InvalidArgumentError(f"{name}: got one image of shape {pixels.shape}; wrap it in a list")
    if not isinstance(pixels, (Sequence, np.ndarray)):
        raise InvalidArgumentError(f"{name}: expected a sequence of [height, width, 3] uint8 images, "
                                   f"got {type(pixels).__name__}")
    images = []
    for index, image in enumerate(pixels):
        if isinstance(image, (str, bytes)):
            raise InvalidArgumentError(
                f"{name}[{index}]: expected a [height, width, 3] uint8 array, got {type(image).__name__} "
                "(encoded file bytes go to image_encode)")
        try:
            values = np.asarray(image)
        except Exception as error:  # numpy raises many types for objects it cannot read
            raise InvalidArgumentError(f"{name}[{index}]: not an array ({error})") from None
        if values.dtype != np.uint8:
            raise InvalidArgumentError(f"{name}[{index}]: expected uint8 pixels, got {values.dtype}")
        if values.ndim != 3 or values.shape[2] != 3:
            raise InvalidArgumentError(
                f"{name}[{index}]: expected shape [height, width, 3] (RGB), got {list(values.shape)}")
        row, pixel, channel = values.strides
        if not (pixel == 3 and channel == 1 and (row >= 3 * values.shape[1] or values.shape[0] <= 1)):
            values = np.ascontiguousarray(values)
        images.append(values)
    structs = ffi.new("uform_pixels_t[]", max(len(images), 1))
    for index, values in enumerate(images):
        height, width = values.shape[:2]
        structs[index].height = height
        structs[index].width = width
        structs[index].row_stride = values.strides[0] if height > 1 else 3 * width
        # The address of the first pixel: __array_interface__ gives it for strided arrays too.
        address = values.__array_interface__["data"][0] if values.size else 0
        structs[index].data = ffi.cast("const uint8_t *", address)
    return structs, (images, structs)


def files_tape(files: Any, name: str = "files") -> tuple[Tape, bool]:
    """(tape, paths): a sequence of paths becomes a tape of their os.fsencode bytes, which
    the C *_paths verbs check and read themselves (on the pool threads, the GIL free); a
    (data, offsets) tape of the files' bytes passes as it is."""
    if isinstance(files, (str, bytes, bytearray, os.PathLike)):
        raise InvalidArgumentError(f"{name}: expected a sequence of paths, got a single "
                                   f"{type(files).__name__}; wrap it in a list")
    if isinstance(files, tuple) and len(files) == 2 and _is_offsets_buffer(files[1]):
        return _tape_from_buffers(files[0], files[1], name), False
    if isinstance(files, np.ndarray) or not isinstance(files, Sequence):
        raise InvalidArgumentError(f"{name}: expected a sequence of paths or a (data, offsets) tape, "
                                   f"got {type(files).__name__}")
    paths = [path_bytes(path, f"{name}[{index}]") for index, path in enumerate(files)]
    offsets = array("Q", accumulate((len(path) for path in paths), initial=0))
    return _tape_from_buffers(b"".join(paths), offsets, name), True


def _float32_values(value: Any, name: str) -> np.ndarray:
    if isinstance(value, (str, bytes)):
        raise InvalidArgumentError(f"{name}: expected 1-D float32 samples, got {type(value).__name__}")
    try:
        values = np.asarray(value)
    except Exception as error:
        raise InvalidArgumentError(f"{name}: not an array ({error})") from None
    if values.dtype != np.float32:
        raise InvalidArgumentError(f"{name}: expected float32 samples, got {values.dtype}")
    if values.ndim != 1:
        raise InvalidArgumentError(
            f"{name}: expected mono 1-D samples, got shape {list(values.shape)} (average the channels first)")
    return values


def samples_buffers(samples: Any, name: str = "samples") -> tuple[Any, int, Any, int, tuple]:
    """(float pointer, size, size_t offsets pointer, count, keepalive) of recordings: a
    sequence of 1-D float32 buffers (joined into one), or a (samples, offsets) tape of
    float32 samples and count + 1 size_t offsets, passed without a copy."""
    if isinstance(samples, tuple) and len(samples) == 2 and _is_offsets_buffer(samples[1]):
        values = _float32_values(samples[0], f"{name} data")
        if not values.flags.c_contiguous:
            raise InvalidArgumentError(f"{name}: tape samples must be contiguous")
        offsets = np.asarray(samples[1])
        if offsets.ndim != 1 or offsets.dtype.kind not in "ui" or offsets.dtype.itemsize != 8:
            raise InvalidArgumentError(f"{name}: tape offsets must be 64-bit integers (size_t)")
        if len(offsets) < 1:
            raise InvalidArgumentError(f"{name}: tape offsets must hold count + 1 values, got none")
        offsets = np.ascontiguousarray(offsets)
        keep: tuple = (values, offsets)
    elif isinstance(samples, (str, bytes, bytearray, memoryview)) or \
            isinstance(samples, np.ndarray) and samples.ndim == 1:
        raise InvalidArgumentError(f"{name}: expected a sequence of recordings or a (samples, offsets) "
                                   "tape; wrap a single recording in a list")
    elif isinstance(samples, (Sequence, np.ndarray)):
        recordings = [_float32_values(value, f"{name}[{index}]") for index, value in enumerate(samples)]
        values = np.concatenate(recordings) if recordings else np.zeros(0, np.float32)
        offsets = np.array(list(accumulate((len(r) for r in recordings), initial=0)), dtype=np.uint64)
        keep = (values, offsets)
    else:
        raise InvalidArgumentError(f"{name}: expected a sequence of float32 recordings or a (samples, "
                                   f"offsets) tape, got {type(samples).__name__}")
    data = ffi.from_buffer("float[]", values) if values.size else ffi.NULL
    offsets_pointer = ffi.from_buffer("size_t[]", offsets)
    return data, int(values.size), offsets_pointer, len(offsets) - 1, keep + (data, offsets_pointer)


# ---- calls ------------------------------------------------------------------------

def _check_arena(arena: Any) -> None:
    if not isinstance(arena, Arena):
        raise InvalidArgumentError(f"arena: expected uform.Arena, got {type(arena).__name__}")


def _options(outputs: Any, outputs_scalar: Any, bridge: ProgressBridge) -> Any:
    from ._model import _outputs, _scalar

    options = ffi.new("uform_encode_options_t *")
    options.outputs = _outputs(outputs)
    options.outputs_scalar = _scalar(outputs_scalar, "outputs_scalar")
    bridge.fill(options.progress)
    return options


def _call(stats_type: type[_Stats], c_stats_type: str, stats: Any, arena: Arena, outputs: Any,
          outputs_scalar: Any, progress: Progress | None, progress_steps: int,
          run: Callable[[Any, Any, Any], int], submit: Callable[[Any, Any, Any, Any], int] | None,
          keep: tuple, model: Any, executor: Executor | None) -> Any:
    """Runs one verb: options, then the C call `run(options, encoded, c_stats)` and the
    outputs; or, with `submit`, queues `submit(options, encoded, c_stats, job)` and answers
    a Deferred that keeps every borrowed buffer (`keep`: the inputs) alive until the job
    has finished, as Model.text_encode's deferred form does."""
    from ._model import Deferred, _encoded

    _check_arena(arena)
    if stats is not None and not isinstance(stats, stats_type):
        raise InvalidArgumentError(f"stats: expected uform.{stats_type.__name__}, got {type(stats).__name__}")
    bridge = ProgressBridge(progress, progress_steps)
    options = _options(outputs, outputs_scalar, bridge)
    encoded = ffi.new("uform_encoded_t *")
    c_stats = ffi.new(c_stats_type)

    def finish() -> Any:
        if stats is not None:
            stats._fill(c_stats)
        return _encoded(encoded, arena)

    if submit is None:
        check(run(options, encoded, c_stats), bridge)
        return finish()
    job = ffi.new("uform_job_t **")
    check(submit(options, encoded, c_stats, job))
    handle = ffi.gc(job[0], lib.uform_job_free)
    # bridge first: Deferred.wait() hands it to check() for a progress handler's error
    return Deferred(handle, finish, (bridge, options, encoded, c_stats, arena, model, executor, keep))


def _executor_pointer(executor: Executor | None) -> Any:
    from ._model import _executor_pointer as pointer

    return pointer(executor)


# Each verb blocks, or with deferred=True (model.deferred(executor)) submits through its
# uform_*_submit twin: the C job then decodes and encodes on the executor's submission
# thread and pool, without the GIL, while this thread only converts the arguments (and
# reads the files of paths into one buffer, kept alive by the Deferred).

def image_encode_pixels(model: Any, executor: Executor | None, pixels: Any, arena: Arena, *,
                        outputs: Outputs = Outputs.EMBEDDINGS, outputs_scalar: Scalar = Scalar.F32,
                        progress: Progress | None = None, progress_steps: int = 0,
                        stats: ImageEncodeStats | None = None, deferred: bool = False) -> Any:
    structs, keep = pixels_array(pixels)
    count = len(keep[0])
    target = _executor_pointer(executor)

    def run(options: Any, encoded: Any, c_stats: Any) -> int:
        return lib.uform_image_encode_pixels(model._model, target, structs, count, arena._arena, options,
                                             encoded, c_stats)

    def submit(options: Any, encoded: Any, c_stats: Any, job: Any) -> int:
        return lib.uform_image_encode_pixels_submit(model._model, target, structs, count, arena._arena,
                                                    options, encoded, c_stats, job)

    return _call(ImageEncodeStats, "uform_image_encode_stats_t *", stats, arena, outputs, outputs_scalar,
                 progress, progress_steps, run, submit if deferred else None, keep, model, executor)


_C_STATS = {ImageEncodeStats: "uform_image_encode_stats_t *", VideoEncodeStats: "uform_video_encode_stats_t *",
            AudioEncodeStats: "uform_audio_encode_stats_t *"}


def _files_verb(c_verb: str, stats_type: type[_Stats], model: Any, executor: Executor | None, files: Any,
                arena: Arena, deferred: bool, keywords: dict) -> Any:
    """image_encode, video_encode and audio_encode: a tape of the files' bytes to `c_verb`."""
    _check_arena(arena)
    tape, paths = files_tape(files)
    target = _executor_pointer(executor)
    c_verb += "_paths" if paths else ""
    blocking, submitting = getattr(lib, c_verb), getattr(lib, c_verb + "_submit")

    def run(options: Any, encoded: Any, c_stats: Any) -> int:
        return blocking(model._model, target, tape.struct, arena._arena, options, encoded, c_stats)

    def submit(options: Any, encoded: Any, c_stats: Any, job: Any) -> int:
        return submitting(model._model, target, tape.struct, arena._arena, options, encoded, c_stats, job)

    c_stats_type = _C_STATS[stats_type]
    return _call(stats_type, c_stats_type, keywords.pop("stats", None), arena, **keywords, run=run,
                 submit=submit if deferred else None, keep=(tape,), model=model, executor=executor)


def image_encode(model: Any, executor: Executor | None, files: Any, arena: Arena, *, deferred: bool = False,
                 **keywords: Any) -> Any:
    return _files_verb("uform_image_encode", ImageEncodeStats, model, executor, files, arena, deferred, keywords)


def video_encode(model: Any, executor: Executor | None, files: Any, arena: Arena, *, deferred: bool = False,
                 **keywords: Any) -> Any:
    return _files_verb("uform_video_encode", VideoEncodeStats, model, executor, files, arena, deferred, keywords)


def audio_encode(model: Any, executor: Executor | None, files: Any, arena: Arena, *, deferred: bool = False,
                 **keywords: Any) -> Any:
    return _files_verb("uform_audio_encode", AudioEncodeStats, model, executor, files, arena, deferred, keywords)


def audio_encode_samples(model: Any, executor: Executor | None, samples: Any, sample_rate: int,
                         arena: Arena, *, deferred: bool = False, **keywords: Any) -> Any:
    _check_arena(arena)
    rate = as_count(sample_rate, "sample_rate")
    data, size, offsets, count, keep = samples_buffers(samples)
    target = _executor_pointer(executor)

    def run(options: Any, encoded: Any, c_stats: Any) -> int:
        return lib.uform_audio_encode_samples(model._model, target, data, size, offsets, count, rate,
                                              arena._arena, options, encoded, c_stats)

    def submit(options: Any, encoded: Any, c_stats: Any, job: Any) -> int:
        return lib.uform_audio_encode_samples_submit(model._model, target, data, size, offsets, count, rate,
                                                     arena._arena, options, encoded, c_stats, job)

    return _call(AudioEncodeStats, "uform_audio_encode_stats_t *", keywords.pop("stats", None), arena,
                 **keywords, run=run, submit=submit if deferred else None, keep=keep, model=model,
                 executor=executor)


#: keyword arguments every media verb takes, and their defaults
MEDIA_KEYWORDS = {"outputs": Outputs.EMBEDDINGS, "outputs_scalar": Scalar.F32, "progress": None,
                  "progress_steps": 0, "stats": None}


def media_keywords(verb: str, keywords: dict) -> dict:
    """The keywords of a media verb with their defaults; TypeError for unknown ones."""
    unknown = set(keywords) - set(MEDIA_KEYWORDS)
    if unknown:
        raise TypeError(f"{verb}() got unexpected keyword arguments: {sorted(unknown)}")
    return {**MEDIA_KEYWORDS, **keywords}


