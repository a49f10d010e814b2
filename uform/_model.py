"""Model: a loaded encoder, its description, and the encode verbs."""
from __future__ import annotations

import atexit
import itertools
import threading
from typing import Any, Callable, Generic, NamedTuple, Sequence, Tuple, TypeVar, Union

import numpy as np

from . import _media
from ._buffers import (Arena, ArenaBuffer, Buffer, RowsTape, _PathLike, _Tape, _Texts, arena_rows,
                       arena_rows_tape, arena_values_tape, choices_tape, path_bytes, texts_tape,
                       words_buffer)
from ._enums import CPUClass, GPUClass, Outputs, Scalar
from ._errors import InvalidArgumentError, UnsupportedError
from ._executor import Executor, _words
from ._media import AudioEncodeStats, ImageEncodeStats, VideoEncodeStats, _Files
from ._native import Progress, ProgressBridge, check, class_pin, cpu_class_value, ffi, lib

T = TypeVar("T")

#: uint32 values, one per item: a buffer of uint32 or a sequence of ints.
_Words = Union[Buffer, Sequence[int]]


class ModelDescription(NamedTuple):
    """What a loaded model reports about itself, as uform_model_description_t holds it."""

    dimensions: int
    context: int
    quantization: Scalar
    memory_usage: int
    cpu_class: CPUClass | None
    gpu_class: GPUClass | None
    token_width: int
    choice_temperature_groups: int


class TextEncodeStats:
    """What text_encode reports, overwritten by every call it is passed to."""

    __slots__ = ("items", "tokens", "truncated", "empty")

    def __init__(self) -> None:
        self.items = 0       # texts encoded
        self.tokens = 0      # tokens run through the model
        self.truncated = 0   # texts cut at the model's context
        self.empty = 0       # empty texts (zero embedding, no token rows)

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)}" for name in self.__slots__)
        return f"TextEncodeStats({fields})"


class Encoded:
    """Outputs of one encode call, views into its arena valid until the arena's next use."""

    __slots__ = ("embeddings", "tokens", "scalar")

    def __init__(self, embeddings: ArenaBuffer | None, tokens: RowsTape | None, scalar: Scalar) -> None:
        self.embeddings = embeddings  # [items, dimensions]
        self.tokens = tokens          # token rows; tokens.offsets has items + 1 boundaries
        self.scalar = scalar

    def __repr__(self) -> str:
        shape = lambda value: None if value is None else tuple(value.shape)  # noqa: E731
        return f"Encoded(embeddings={shape(self.embeddings)}, tokens={shape(self.tokens)}, scalar={self.scalar.name})"


# Jobs still owned by the C submission thread, each with everything it borrows. The
# registry is a module global, so no garbage-collection order (cycles, interpreter exit)
# can free a model, arena, executor or input buffer while its job may still read or
# write it: an entry leaves only once its job has finished. Finished entries are
# pruned at each submission and wait; at exit, pending jobs are waited for.
_pending: dict[int, tuple] = {}
_pending_lock = threading.Lock()
_pending_keys = itertools.count()
_pending_prune_at = 64  # prune when the registry reaches this size: amortised O(1) a job


def _prune_pending() -> None:
    global _pending_prune_at
    with _pending_lock:
        if len(_pending) < _pending_prune_at:
            return
        finished = [key for key, (job, _keep) in _pending.items() if lib.uform_job_done(job)]
        released = [_pending.pop(key) for key in finished]
        _pending_prune_at = max(64, 2 * len(_pending))
    del released  # their finalizers run outside the lock


def _wait_pending_at_exit() -> None:
    """Waits for jobs still queued at interpreter exit, before modules are torn down."""
    while True:
        with _pending_lock:
            if not _pending:
                return
            key, (job, _keep) = next(iter(_pending.items()))
        lib.uform_job_wait(job)  # the GIL is released while it waits
        with _pending_lock:
            _pending.pop(key, None)


atexit.register(_wait_pending_at_exit)


class Deferred(Generic[T]):
    """A verb submitted to an executor's submission thread, answered later.

    The buffers the call borrows stay alive (and must stay unchanged) until it completes,
    even when the Deferred itself is dropped or collected first."""

    def __init__(self, job: Any, finish: Callable[[], T], keep: tuple) -> None:
        self._job = job
        self._finish = finish
        self._keep = keep
        self._result: Any = None
        self._error: BaseException | None = None
        self._complete = False
        self._key = next(_pending_keys)
        if job is not None:
            _prune_pending()
            with _pending_lock:
                _pending[self._key] = (job, keep)

    def done(self) -> bool:
        return self._complete or bool(lib.uform_job_done(self._job))

    def wait(self) -> None:
        """Blocks until the call finishes; raises its error, if any."""
        if not self._complete:
            status = lib.uform_job_wait(self._job)
            if status != 0 and not lib.uform_job_done(self._job):
                # Refused without waiting (on the executor's own submission thread):
                # the job is still pending, so it keeps what it borrows.
                check(status)
            try:
                check(status, self._keep[0])
                self._result = self._finish()
            except BaseException as error:
                self._error = error
            self._complete = True
            self._keep = (None,)  # the borrowed buffers are free to go
            with _pending_lock:
                _pending.pop(self._key, None)
        if self._error is not None:
            raise self._error

    def result(self) -> T:
        self.wait()
        return self._result


def _scalar(value: Any, name: str) -> Scalar:
    try:
        return Scalar(value)
    except ValueError:
        raise InvalidArgumentError(f"{name}: {value!r} is not a uform.Scalar") from None


def _outputs(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"outputs: expected uform.Outputs, got {type(value).__name__}")
    if value <= 0 or value & ~int(Outputs.EMBEDDINGS | Outputs.TOKENS):
        raise InvalidArgumentError(f"outputs: {value!r} is not a combination of uform.Outputs flags")
    return int(value)


def _checkpoint_bytes(buffer: Buffer, path_verb: str) -> Any:
    """The bytes of a checkpoint held in memory, refusing a str (a path meant for path_verb)."""
    if isinstance(buffer, str):
        raise InvalidArgumentError(f"buffer: expected the checkpoint's bytes, got str (a path? use {path_verb})")
    try:
        return ffi.from_buffer(buffer)
    except TypeError:
        raise InvalidArgumentError(f"buffer: expected a bytes-like object, got {type(buffer).__name__}") from None


def _gpu_class(gpu_class: GPUClass | None) -> int:
    return class_pin(GPUClass, gpu_class, "gpu_class")


def _load_options(memory_domains: Sequence[int] | None, cpu_class: CPUClass | None,
                  executor: Executor | None, quantization: Scalar, bridge: ProgressBridge) -> tuple:
    options = ffi.new("uform_model_load_ram_options_t *")
    domains, domains_count, domains_keep = _words(memory_domains, "memory_domains")
    options.memory_domains = domains
    options.memory_domains_count = domains_count
    options.cpu_class = cpu_class_value(cpu_class)
    if executor is not None and not isinstance(executor, Executor):
        raise InvalidArgumentError(f"executor: expected uform.Executor, got {type(executor).__name__}")
    options.executor = executor._executor if executor is not None else ffi.NULL
    options.quantization = _scalar(quantization, "quantization")
    bridge.fill(options.progress)
    return options, domains_keep


class Model:
    """A loaded encoder serving every modality it was trained on."""

    _model: Any                   # uform_model_t *, freed with the object
    _executor: Executor | None    # a borrowed executor the model runs on

    def __init__(self) -> None:
        raise TypeError("use Model.load_ram(...) or Model.load_ram_buffer(...)")

    @classmethod
    def _adopt(cls, pointer: Any, executor: Executor | None) -> "Model":
        self = cls.__new__(cls)
        self._model = ffi.gc(pointer, lib.uform_model_free)
        self._executor = executor  # the model borrows it: keep it alive as long as the model
        return self

    @classmethod
    def load_ram(cls, path: _PathLike, /, *, memory_domains: Sequence[int] | None = None,
                 cpu_class: CPUClass | None = None, executor: Executor | None = None,
                 quantization: Scalar = Scalar.BF16, progress: Progress | None = None,
                 progress_steps: int = 0) -> "Model":
        """Copies a safetensors checkpoint into host memory, packed for a CPU class."""
        encoded = path_bytes(path)
        bridge = ProgressBridge(progress, progress_steps)
        options, _domains = _load_options(memory_domains, cpu_class, executor, quantization, bridge)
        pointer = ffi.new("uform_model_t **")
        check(lib.uform_model_load_ram(encoded, options, pointer), bridge)
        return cls._adopt(pointer[0], executor)

    @classmethod
    def load_ram_buffer(cls, buffer: Buffer, /, *, memory_domains: Sequence[int] | None = None,
                        cpu_class: CPUClass | None = None, executor: Executor | None = None,
                        quantization: Scalar = Scalar.BF16, progress: Progress | None = None,
                        progress_steps: int = 0) -> "Model":
        """Copies a checkpoint held in memory (any buffer) into host memory."""
        data = _checkpoint_bytes(buffer, "load_ram")
        bridge = ProgressBridge(progress, progress_steps)
        options, _domains = _load_options(memory_domains, cpu_class, executor, quantization, bridge)
        pointer = ffi.new("uform_model_t **")
        check(lib.uform_model_load_ram_buffer(data, len(data), options, pointer), bridge)
        return cls._adopt(pointer[0], executor)

    @classmethod
    def load_vram(cls, path: _PathLike, /, *, devices: Sequence[int] | None = None,
                  gpu_class: GPUClass | None = None, executor: Executor | None = None,
                  quantization: Scalar = Scalar.BF16, progress: Progress | None = None,
                  progress_steps: int = 0) -> "Model":
        """Copies a checkpoint onto the named GPUs, a whole copy on each.

        devices None: every GPU of the executor when one is given, else GPU 0. With several GPUs
        every encode verb spreads its batches over them, and text_choose its texts. The
        executor, when given, must be a VRAM executor holding every listed GPU; without one the
        model makes its own. A build without the CUDA backend raises UnsupportedError, a machine
        without a GPU DeviceError. quantization=Scalar.E4M3 keeps the block matrices as FP8
        codes; on Ada, Hopper and Blackwell they multiply on the FP8 tensor cores with the
        activations quantized per row (outputs within cosine 0.995 of the CPU's E4M3 model),
        on Ampere they are decoded to BF16 at each product. Run on one H200 and one H100, the
        FP8 products included (docs/gpu.md, docs/benchmarks-gpu.md)."""
        encoded = path_bytes(path)
        listed, listed_count, _keep = _words(devices, "devices")
        bridge = ProgressBridge(progress, progress_steps)
        pointer = ffi.new("uform_model_t **")
        check(lib.uform_model_load_vram(encoded, listed, listed_count, _gpu_class(gpu_class),
                                        executor._executor if executor is not None else ffi.NULL,
                                        _scalar(quantization, "quantization"), bridge.new(), pointer), bridge)
        return cls._adopt(pointer[0], executor)

    @classmethod
    def load_vram_buffer(cls, buffer: Buffer, /, *, devices: Sequence[int] | None = None,
                         gpu_class: GPUClass | None = None, executor: Executor | None = None,
                         quantization: Scalar = Scalar.BF16, progress: Progress | None = None,
                         progress_steps: int = 0) -> "Model":
        """Copies a checkpoint held in memory onto a GPU, as load_vram."""
        data = _checkpoint_bytes(buffer, "load_vram")
        listed, listed_count, _keep = _words(devices, "devices")
        bridge = ProgressBridge(progress, progress_steps)
        pointer = ffi.new("uform_model_t **")
        check(lib.uform_model_load_vram_buffer(data, len(data), listed, listed_count, _gpu_class(gpu_class),
                                               executor._executor if executor is not None else ffi.NULL,
                                               _scalar(quantization, "quantization"), bridge.new(), pointer),
              bridge)
        return cls._adopt(pointer[0], executor)

    def on(self, executor: Executor, /) -> "On[Model]":
        """A receiver whose verbs block on `executor`."""
        return On(self, executor)

    def deferred(self, executor: Executor, /) -> "DeferredOn[Model]":
        """A receiver whose verbs submit to `executor` and answer a Deferred."""
        return DeferredOn(self, executor)

    def describe(self) -> ModelDescription:
        """The model's geometry and placement."""
        description = ffi.new("uform_model_description_t *")
        check(lib.uform_model_describe(self._model, description))
        return ModelDescription(
            dimensions=description.dimensions,
            context=description.context,
            quantization=Scalar(description.quantization),
            memory_usage=description.memory_usage,
            cpu_class=CPUClass(description.cpu_class) if description.cpu_class else None,
            gpu_class=GPUClass(description.gpu_class) if description.gpu_class else None,
            token_width=description.token_width,
            choice_temperature_groups=description.choice_temperature_groups,
        )

    def quantized_matrix(self, name: str, /) -> Tuple[np.ndarray, np.ndarray]:
        """One block matrix of an E4M3 model as the blocks multiply it: (codes, scales),
        codes a uint8 array [rows, cols] of E4M3 codes and scales a float32 array [rows]
        of powers of two, W[i, p] = e4m3(codes[i, p]) * scales[i]. `name` is
        "blocks.<l>.attention.qkv.weight", "...attention.out.weight", "...mlp.up.weight" or
        "...mlp.down.weight". For tools and tests that check the quantization rule
        (docs/architecture.md); a BF16 model holds none (InvalidArgumentError)."""
        if not isinstance(name, str):
            raise InvalidArgumentError(f"name: expected str, got {type(name).__name__}")
        encoded = name.encode()
        rows, cols = ffi.new("size_t *"), ffi.new("size_t *")
        check(lib.uform_model_quantized_matrix(self._model, encoded, rows, cols, ffi.NULL, ffi.NULL))
        codes = np.empty((rows[0], cols[0]), dtype=np.uint8)
        scales = np.empty(rows[0], dtype=np.float32)
        check(lib.uform_model_quantized_matrix(self._model, encoded, rows, cols,
                                               ffi.from_buffer("uint8_t[]", codes),
                                               ffi.from_buffer("float[]", scales)))
        return codes, scales

    # ---- text ---------------------------------------------------------------

    def _text_call(self, texts: _Texts, arena: Arena, outputs: Outputs, outputs_scalar: Scalar,
                   progress: Progress | None, progress_steps: int,
                   stats: TextEncodeStats | None) -> tuple:
        """Converts the arguments of text_encode into C structures and keepalives."""
        if not isinstance(arena, Arena):
            raise InvalidArgumentError(f"arena: expected uform.Arena, got {type(arena).__name__}")
        if stats is not None and not isinstance(stats, TextEncodeStats):
            raise InvalidArgumentError(f"stats: expected uform.TextEncodeStats, got {type(stats).__name__}")
        tape = texts_tape(texts)
        bridge = ProgressBridge(progress, progress_steps)
        options = ffi.new("uform_encode_options_t *")
        options.outputs = _outputs(outputs)
        options.outputs_scalar = _scalar(outputs_scalar, "outputs_scalar")
        bridge.fill(options.progress)
        encoded = ffi.new("uform_encoded_t *")
        c_stats = ffi.new("uform_text_encode_stats_t *")

        def finish() -> Encoded:
            if stats is not None:
                stats.items, stats.tokens = c_stats.items, c_stats.tokens
                stats.truncated, stats.empty = c_stats.truncated, c_stats.empty
            return _encoded(encoded, arena)

        return bridge, tape, options, encoded, c_stats, finish

    def text_encode(self, texts: _Texts, arena: Arena, /, *, outputs: Outputs = Outputs.EMBEDDINGS,
                    outputs_scalar: Scalar = Scalar.F32, progress: Progress | None = None,
                    progress_steps: int = 0, stats: TextEncodeStats | None = None) -> Encoded:
        """Encodes UTF-8 texts, a byte per token."""
        return self._text_encode(None, texts, arena, outputs=outputs, outputs_scalar=outputs_scalar,
                                 progress=progress, progress_steps=progress_steps, stats=stats)

    def _text_encode(self, executor: Executor | None, texts: _Texts, arena: Arena, /, **keywords: Any) -> Encoded:
        bridge, tape, options, encoded, c_stats, finish = self._text_call(texts, arena, **keywords)
        check(lib.uform_text_encode(self._model, _executor_pointer(executor), tape.struct, arena._arena,
                                    options, encoded, c_stats), bridge)
        return finish()

    def _text_encode_deferred(self, executor: Executor, texts: _Texts, arena: Arena, /,
                              **keywords: Any) -> Deferred[Encoded]:
        bridge, tape, options, encoded, c_stats, finish = self._text_call(texts, arena, **keywords)
        job = ffi.new("uform_job_t **")
        check(lib.uform_text_encode_submit(self._model, _executor_pointer(executor), tape.struct,
                                           arena._arena, options, encoded, c_stats, job))
        handle = ffi.gc(job[0], lib.uform_job_free)
        return Deferred(handle, finish, (bridge, tape, options, encoded, c_stats, arena, self, executor))

    # ---- calibrated choices ----------------------------------------------------

    def _choose_call(self, texts: _Texts, choices: _Texts, arena: Arena,
                     temperature_groups: _Words | None, progress: Progress | None,
                     progress_steps: int, stats: TextEncodeStats | None) -> tuple:
        """Converts the arguments of text_choose into C structures and keepalives."""
        if not isinstance(arena, Arena):
            raise InvalidArgumentError(f"arena: expected uform.Arena, got {type(arena).__name__}")
        if stats is not None and not isinstance(stats, TextEncodeStats):
            raise InvalidArgumentError(f"stats: expected uform.TextEncodeStats, got {type(stats).__name__}")
        tape = texts_tape(texts)
        choice_tape = choices_tape(choices)
        groups, groups_keep = words_buffer(temperature_groups, tape.struct.count, "temperature_groups", "texts")
        bridge = ProgressBridge(progress, progress_steps)
        options = ffi.new("uform_choose_options_t *")
        options.temperature_groups = groups
        bridge.fill(options.progress)
        chosen = ffi.new("uform_chosen_t *")
        c_stats = ffi.new("uform_text_encode_stats_t *")

        def finish() -> RowsTape:
            if stats is not None:
                stats.items, stats.tokens = c_stats.items, c_stats.tokens
                stats.truncated, stats.empty = c_stats.truncated, c_stats.empty
            return arena_values_tape(chosen.probabilities, chosen.offsets, chosen.count, Scalar.F32, arena)

        keep = (tape, choice_tape, groups, groups_keep)
        return bridge, keep, options, chosen, c_stats, finish

    def text_choose(self, texts: _Texts, choices: _Texts, arena: Arena, /, *,
                    temperature_groups: _Words | None = None, progress: Progress | None = None,
                    progress_steps: int = 0, stats: TextEncodeStats | None = None) -> RowsTape:
        """Scores each text's single-byte choices, one probability each.

        choices: one str or bytes every text shares (each character or byte one choice),
        or one entry per text (a str or bytes, or a sequence of single-character str or
        single bytes), or a (data, offsets) tape. The answer is a 1-D float32 RowsTape in
        the arena: text i's probabilities are answer.rows(i), in the order of its choices,
        summing to 1; (answer, answer.offsets) is a float32 tape."""
        return self._text_choose(None, texts, choices, arena, temperature_groups=temperature_groups,
                                 progress=progress, progress_steps=progress_steps, stats=stats)

    def _text_choose(self, executor: Executor | None, texts: _Texts, choices: _Texts, arena: Arena, /,
                     **keywords: Any) -> RowsTape:
        bridge, keep, options, chosen, c_stats, finish = self._choose_call(texts, choices, arena, **keywords)
        tape, choice_tape = keep[0], keep[1]
        check(lib.uform_text_choose(self._model, _executor_pointer(executor), tape.struct,
                                    choice_tape.struct, arena._arena, options, chosen, c_stats), bridge)
        return finish()

    def _text_choose_deferred(self, executor: Executor, texts: _Texts, choices: _Texts, arena: Arena, /,
                              **keywords: Any) -> Deferred[RowsTape]:
        bridge, keep, options, chosen, c_stats, finish = self._choose_call(texts, choices, arena, **keywords)
        tape, choice_tape = keep[0], keep[1]
        job = ffi.new("uform_job_t **")
        check(lib.uform_text_choose_submit(self._model, _executor_pointer(executor), tape.struct,
                                           choice_tape.struct, arena._arena, options, chosen, c_stats, job))
        handle = ffi.gc(job[0], lib.uform_job_free)
        return Deferred(handle, finish, (bridge, keep, options, chosen, c_stats, arena, self, executor))

    # ---- images, video and audio (uform/_media.py) ----------------------------------

    def image_encode(self, files: _Files, arena: Arena, /, *, outputs: Outputs = Outputs.EMBEDDINGS,
                     outputs_scalar: Scalar = Scalar.F32, progress: Progress | None = None,
                     progress_steps: int = 0, stats: ImageEncodeStats | None = None) -> Encoded:
        """Decodes and encodes JPEG, PNG or WebP files (paths, or a (data, offsets) tape of their bytes)."""
        return _media.image_encode(self, None, files, arena, outputs=outputs, outputs_scalar=outputs_scalar,
                                   progress=progress, progress_steps=progress_steps, stats=stats)

    def image_encode_pixels(self, pixels: Sequence[Buffer], arena: Arena, /, *,
                            outputs: Outputs = Outputs.EMBEDDINGS, outputs_scalar: Scalar = Scalar.F32,
                            progress: Progress | None = None, progress_steps: int = 0,
                            stats: ImageEncodeStats | None = None) -> Encoded:
        """Encodes [height, width, 3] uint8 images (rows may be strided: no copy)."""
        return _media.image_encode_pixels(self, None, pixels, arena, outputs=outputs,
                                          outputs_scalar=outputs_scalar, progress=progress,
                                          progress_steps=progress_steps, stats=stats)

    def video_encode(self, files: _Files, arena: Arena, /, *, outputs: Outputs = Outputs.EMBEDDINGS,
                     outputs_scalar: Scalar = Scalar.F32, progress: Progress | None = None,
                     progress_steps: int = 0, stats: VideoEncodeStats | None = None) -> Encoded:
        """Decodes and encodes MP4 or WebM clips (paths, or a (data, offsets) tape of their bytes)."""
        return _media.video_encode(self, None, files, arena, outputs=outputs, outputs_scalar=outputs_scalar,
                                   progress=progress, progress_steps=progress_steps, stats=stats)

    def audio_encode(self, files: _Files, arena: Arena, /, *, outputs: Outputs = Outputs.EMBEDDINGS,
                     outputs_scalar: Scalar = Scalar.F32, progress: Progress | None = None,
                     progress_steps: int = 0, stats: AudioEncodeStats | None = None) -> Encoded:
        """Decodes and encodes WAV, FLAC, MP3 or Opus recordings (paths, or a (data, offsets) tape)."""
        return _media.audio_encode(self, None, files, arena, outputs=outputs, outputs_scalar=outputs_scalar,
                                   progress=progress, progress_steps=progress_steps, stats=stats)

    def audio_encode_samples(self, samples: Sequence[Buffer] | _Tape, sample_rate: int, arena: Arena, /, *,
                             outputs: Outputs = Outputs.EMBEDDINGS, outputs_scalar: Scalar = Scalar.F32,
                             progress: Progress | None = None, progress_steps: int = 0,
                             stats: AudioEncodeStats | None = None) -> Encoded:
        """Encodes 1-D float32 mono recordings at sample_rate Hz (resampled to the model's rate)."""
        return _media.audio_encode_samples(self, None, samples, sample_rate, arena, outputs=outputs,
                                           outputs_scalar=outputs_scalar, progress=progress,
                                           progress_steps=progress_steps, stats=stats)


def _executor_pointer(executor: Executor | None) -> Any:
    if executor is None:
        return ffi.NULL
    if not isinstance(executor, Executor):
        raise InvalidArgumentError(f"executor: expected uform.Executor, got {type(executor).__name__}")
    return executor._executor


def _encoded(encoded: Any, arena: Arena) -> Encoded:
    scalar = Scalar(encoded.scalar)
    embeddings = None
    if encoded.embeddings != ffi.NULL:
        embeddings = arena_rows(encoded.embeddings, encoded.count, encoded.embedding_row_bytes,
                                encoded.dimensions, scalar, arena)
    tokens = None
    if encoded.token_offsets != ffi.NULL:
        tokens = arena_rows_tape(encoded.tokens, encoded.token_offsets, encoded.count,
                                 encoded.token_row_bytes, encoded.token_width, scalar, arena)
    return Encoded(embeddings, tokens, scalar)


class On(Generic[T]):
    """A receiver whose verbs block on one executor."""

    def __init__(self, target: T, executor: Executor) -> None:
        if not isinstance(executor, Executor):
            raise InvalidArgumentError(f"executor: expected uform.Executor, got {type(executor).__name__}")
        self._target = target
        self._executor = executor

    def text_encode(self, texts: _Texts, arena: Arena, /, **keywords: Any) -> Encoded:
        return self._target._text_encode(self._executor, texts, arena, **_text_defaults(keywords))  # type: ignore[attr-defined]

    def text_choose(self, texts: _Texts, choices: _Texts, arena: Arena, /, *,
                    temperature_groups: _Words | None = None, progress: Progress | None = None,
                    progress_steps: int = 0, stats: TextEncodeStats | None = None) -> RowsTape:
        return self._target._text_choose(  # type: ignore[attr-defined]
            self._executor, texts, choices, arena, temperature_groups=temperature_groups,
            progress=progress, progress_steps=progress_steps, stats=stats)

    def image_encode(self, files: _Files, arena: Arena, /, **keywords: Any) -> Encoded:
        return _media.image_encode(self._target, self._executor, files, arena,
                                   **_media.media_keywords("image_encode", keywords))

    def image_encode_pixels(self, pixels: Sequence[Buffer], arena: Arena, /, **keywords: Any) -> Encoded:
        return _media.image_encode_pixels(self._target, self._executor, pixels, arena,
                                          **_media.media_keywords("image_encode_pixels", keywords))

    def video_encode(self, files: _Files, arena: Arena, /, **keywords: Any) -> Encoded:
        return _media.video_encode(self._target, self._executor, files, arena,
                                   **_media.media_keywords("video_encode", keywords))

    def audio_encode(self, files: _Files, arena: Arena, /, **keywords: Any) -> Encoded:
        return _media.audio_encode(self._target, self._executor, files, arena,
                                   **_media.media_keywords("audio_encode", keywords))

    def audio_encode_samples(self, samples: Sequence[Buffer] | _Tape, sample_rate: int, arena: Arena, /,
                             **keywords: Any) -> Encoded:
        return _media.audio_encode_samples(self._target, self._executor, samples, sample_rate, arena,
                                           **_media.media_keywords("audio_encode_samples", keywords))


class DeferredOn(Generic[T]):
    """A receiver whose verbs submit to one executor and answer a Deferred."""

    def __init__(self, target: T, executor: Executor) -> None:
        if not isinstance(executor, Executor):
            raise InvalidArgumentError(f"executor: expected uform.Executor, got {type(executor).__name__}")
        self._target = target
        self._executor = executor

    def text_encode(self, texts: _Texts, arena: Arena, /, **keywords: Any) -> Deferred[Encoded]:
        return self._target._text_encode_deferred(self._executor, texts, arena, **_text_defaults(keywords))  # type: ignore[attr-defined]

    def text_choose(self, texts: _Texts, choices: _Texts, arena: Arena, /, *,
                    temperature_groups: _Words | None = None, progress: Progress | None = None,
                    progress_steps: int = 0, stats: TextEncodeStats | None = None) -> Deferred[RowsTape]:
        return self._target._text_choose_deferred(  # type: ignore[attr-defined]
            self._executor, texts, choices, arena, temperature_groups=temperature_groups,
            progress=progress, progress_steps=progress_steps, stats=stats)

    # The media verbs submit through their uform_*_submit twins, as text_encode does: the
    # Deferred comes back once the arguments are converted (paths read into one buffer),
    # and the decoding and encoding run in the C job, without the GIL.

    def image_encode(self, files: _Files, arena: Arena, /, **keywords: Any) -> Deferred[Encoded]:
        return _media.image_encode(self._target, self._executor, files, arena, deferred=True,
                                   **_media.media_keywords("image_encode", keywords))

    def image_encode_pixels(self, pixels: Sequence[Buffer], arena: Arena, /,
                            **keywords: Any) -> Deferred[Encoded]:
        return _media.image_encode_pixels(self._target, self._executor, pixels, arena, deferred=True,
                                          **_media.media_keywords("image_encode_pixels", keywords))

    def video_encode(self, files: _Files, arena: Arena, /, **keywords: Any) -> Deferred[Encoded]:
        return _media.video_encode(self._target, self._executor, files, arena, deferred=True,
                                   **_media.media_keywords("video_encode", keywords))

    def audio_encode(self, files: _Files, arena: Arena, /, **keywords: Any) -> Deferred[Encoded]:
        return _media.audio_encode(self._target, self._executor, files, arena, deferred=True,
                                   **_media.media_keywords("audio_encode", keywords))

    def audio_encode_samples(self, samples: Sequence[Buffer] | _Tape, sample_rate: int, arena: Arena, /,
                             **keywords: Any) -> Deferred[Encoded]:
        return _media.audio_encode_samples(self._target, self._executor, samples, sample_rate, arena,
                                           deferred=True,
                                           **_media.media_keywords("audio_encode_samples", keywords))

    # A Trainer's step and save (Trainer.deferred), submitted through
    # uform_trainer_step_submit and uform_trainer_save_submit.

    def step(self, modalities: Sequence[Any], contents: _Texts, /, **keywords: Any) -> Deferred[Any]:
        return self._target._step_deferred(self._executor, modalities, contents, **keywords)  # type: ignore[attr-defined]

    def save(self, path: _PathLike, /, **keywords: Any) -> Deferred[None]:
        return self._target._save_deferred(self._executor, path, **keywords)  # type: ignore[attr-defined]


def _text_defaults(keywords: dict) -> dict:
    unknown = set(keywords) - {"outputs", "outputs_scalar", "progress", "progress_steps", "stats"}
    if unknown:
        raise TypeError(f"text_encode() got unexpected keyword arguments: {sorted(unknown)}")
    merged = {"outputs": Outputs.EMBEDDINGS, "outputs_scalar": Scalar.F32, "progress": None,
              "progress_steps": 0, "stats": None}
    merged.update(keywords)
    return merged
