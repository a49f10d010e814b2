"""Training: the keyword structures of the seed's "Python · Training" page and the Trainer.

Each structure is immutable and keyword-only, with the page's field order; a field left out
is zero, which the C library derives (docs/training.md). Nested shapes also accept a tuple
of their fields in order.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Optional, Sequence, Tuple, Union

import numpy as np

from ._buffers import (Arena, ArenaBuffer, Buffer, _PathLike, _Tape, _Texts, arena_rows, path_bytes,
                       texts_tape, words_buffer)
from ._choices import choice_targets_buffer, step_choices
from ._enums import CPUClass, LateInteractionSide, Modality, Negatives, Objective, PairLossForm, Scalar
from ._errors import InvalidArgumentError, UnsupportedError
from ._executor import Executor
from ._mesh import Mesh
from ._native import Progress, ProgressBridge, as_count, check, cpu_class_value, ffi, lib

if TYPE_CHECKING:   # the receiver's class lives beside Model's (imported at call time: no cycle)
    from ._model import DeferredOn

_Words = Union[Buffer, Sequence[int]]


def _check_counts(self: Any, *names: str) -> None:
    for name in names:
        as_count(getattr(self, name), f"{type(self).__name__}.{name}")


def _check_floats(self: Any, *names: str) -> None:
    for name in names:
        value = getattr(self, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidArgumentError(f"{type(self).__name__}.{name}: expected a float, got {type(value).__name__}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImageShape:
    """The image slice of a BatchShape; a zero patch_side leaves images out of the run."""

    patch_side: int = 0
    channels: int = 0

    def __post_init__(self) -> None:
        _check_counts(self, "patch_side", "channels")


@dataclasses.dataclass(frozen=True, kw_only=True)
class VideoShape:
    """The video slice of a BatchShape; a zero patch_side leaves video out of the run."""

    patch_side: int = 0
    tube_frames: int = 0
    frame_stride: int = 0
    channels: int = 0

    def __post_init__(self) -> None:
        _check_counts(self, "patch_side", "tube_frames", "frame_stride", "channels")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AudioShape:
    """The audio slice of a BatchShape; a zero chunk_samples leaves audio out of the run."""

    chunk_samples: int = 0
    sample_rate: int = 0

    def __post_init__(self) -> None:
        _check_counts(self, "chunk_samples", "sample_rate")


def _shape(value: Any, cls: type, name: str) -> Any:
    if value is None or isinstance(value, cls):
        return value
    if isinstance(value, tuple):
        fields = [f.name for f in dataclasses.fields(cls)]
        if len(value) > len(fields):
            raise InvalidArgumentError(f"BatchShape.{name}: at most {len(fields)} fields, got {len(value)}")
        return cls(**dict(zip(fields, value)))
    raise InvalidArgumentError(f"BatchShape.{name}: expected {cls.__name__} or a tuple, got {type(value).__name__}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class BatchShape:
    """What one device's step carries at most, whatever the modality mix, fixed at creation."""

    max_rows_per_device: int = 0
    max_segments_per_device: int = 0
    max_columns_per_row: int = 0
    max_bags_per_device: int = 0
    max_choices_per_item: int = 0
    image: Union[ImageShape, Tuple[int, ...], None] = None
    video: Union[VideoShape, Tuple[int, ...], None] = None
    audio: Union[AudioShape, Tuple[int, ...], None] = None

    def __post_init__(self) -> None:
        _check_counts(self, "max_rows_per_device", "max_segments_per_device", "max_columns_per_row",
                      "max_bags_per_device", "max_choices_per_item")
        object.__setattr__(self, "image", _shape(self.image, ImageShape, "image"))
        object.__setattr__(self, "video", _shape(self.video, VideoShape, "video"))
        object.__setattr__(self, "audio", _shape(self.audio, AudioShape, "audio"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Masking:
    """How the masked objective corrupts a batch and weighs its heads; every zero derives."""

    token_mask_probability: float = 0.0
    token_mean_span: float = 0.0
    replace_fraction: float = 0.0
    random_fraction: float = 0.0
    image_mask_ratio: float = 0.0
    video_mask_ratio: float = 0.0
    audio_mask_ratio: float = 0.0
    text_weight: float = 0.0
    image_weight: float = 0.0
    video_weight: float = 0.0
    audio_weight: float = 0.0

    def __post_init__(self) -> None:
        _check_floats(self, *[f.name for f in dataclasses.fields(self)])


@dataclasses.dataclass(frozen=True, kw_only=True)
class Contrastive:
    """How the contrastive loss scores the pooled embeddings; every zero derives."""

    matryoshka_dimensions: Optional[Sequence[int]] = None
    temperature_groups: int = 0
    inverse_temperature: float = 0.0
    bias: float = 0.0
    negatives: Negatives = Negatives.AMBIENT
    ambient_repulsion_weight: float = 0.0
    max_edges_per_device: int = 0
    pair_loss: PairLossForm = PairLossForm.DERIVED

    def __post_init__(self) -> None:
        _check_counts(self, "temperature_groups", "max_edges_per_device")
        _check_floats(self, "inverse_temperature", "bias", "ambient_repulsion_weight")
        if self.matryoshka_dimensions is not None:
            widths = tuple(self.matryoshka_dimensions)
            for width in widths:
                as_count(width, "Contrastive.matryoshka_dimensions")
            object.__setattr__(self, "matryoshka_dimensions", widths)
        object.__setattr__(self, "negatives", _enum(Negatives, self.negatives, "Contrastive.negatives"))
        object.__setattr__(self, "pair_loss", _enum(PairLossForm, self.pair_loss, "Contrastive.pair_loss"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class LateInteraction:
    """How the late-interaction loss scores token vectors; every zero derives (docs/training.md
    section 9)."""

    weight: float = 0.0
    width: int = 0
    inverse_temperature: float = 0.0
    bias: float = 0.0
    max_query_span: int = 0
    max_query_tokens_per_device: int = 0
    max_documents_per_device: int = 0
    max_document_tokens_per_device: int = 0
    pair_loss: PairLossForm = PairLossForm.DERIVED

    def __post_init__(self) -> None:
        _check_floats(self, "weight", "inverse_temperature", "bias")
        _check_counts(self, "width", "max_query_span", "max_query_tokens_per_device",
                      "max_documents_per_device", "max_document_tokens_per_device")
        object.__setattr__(self, "pair_loss", _enum(PairLossForm, self.pair_loss, "LateInteraction.pair_loss"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Choices:
    """The calibrated-choices term; a weight of zero derives 1 (docs/training.md section 10)."""

    weight: float = 0.0
    temperature_groups: int = 0

    def __post_init__(self) -> None:
        _check_floats(self, "weight")
        _check_counts(self, "temperature_groups")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Schedule:
    """Linear warmup to the peak, then cosine decay to the floor; every zero derives."""

    learning_rate: float = 0.0
    min_learning_rate: float = 0.0
    warmup_steps: int = 0
    steps: int = 0

    def __post_init__(self) -> None:
        _check_floats(self, "learning_rate", "min_learning_rate")
        _check_counts(self, "warmup_steps", "steps")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Edges:
    """One edge set over a step's items as compressed sparse rows: size_t offsets (count + 1),
    uint32 ids and optional float32 weights, borrowed until the step is final."""

    offsets: Optional[Buffer] = None
    ids: Optional[Buffer] = None
    weights: Optional[Buffer] = None


_EdgesLike = Union[Edges, Tuple[Buffer, Buffer], Tuple[Buffer, Buffer, Buffer], None]


def _edges(value: Any, name: str) -> Optional[Edges]:
    if value is None or isinstance(value, Edges):
        return value
    if isinstance(value, tuple) and len(value) in (2, 3):
        return Edges(offsets=value[0], ids=value[1], weights=value[2] if len(value) == 3 else None)
    raise InvalidArgumentError(f"Relations.{name}: expected Edges or (offsets, ids[, weights]), got {type(value).__name__}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Relations:
    """The contrastive targets of one step: ignored, attracted, repelled, then the run's negatives."""

    attract: _EdgesLike = None
    repel: _EdgesLike = None
    ignore: _EdgesLike = None

    def __post_init__(self) -> None:
        for name in ("attract", "repel", "ignore"):
            object.__setattr__(self, name, _edges(getattr(self, name), name))


class TrainerStepStats:
    """What step reports, overwritten by every call it is passed to, every loss its world mean."""

    __slots__ = ("step", "learning_rate", "loss", "contrastive_loss", "masked_text_loss",
                 "masked_image_loss", "masked_video_loss", "masked_audio_loss",
                 "late_interaction_loss", "choices_loss", "truncated", "dropped")

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0 if name in ("step", "truncated", "dropped") else 0.0)

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"TrainerStepStats({fields})"


def _enum(cls: Any, value: Any, name: str) -> Any:
    try:
        return cls(value)
    except ValueError:
        raise InvalidArgumentError(f"{name}: {value!r} is not a uform.{cls.__name__}") from None


def _floats(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgumentError(f"{name}: expected a float, got {type(value).__name__}")
    return float(value)


def _typed_buffer(values: Any, name: str, formats: tuple, itemsize: int, ctype: str) -> tuple:
    if isinstance(values, np.ndarray):
        values = np.ascontiguousarray(values)
    try:
        view = memoryview(values)
    except TypeError:
        raise InvalidArgumentError(f"{name}: expected a buffer, got {type(values).__name__}") from None
    if view.itemsize != itemsize or view.format.lstrip("@=<") not in formats:
        raise InvalidArgumentError(f"{name}: expected {ctype} values, got format {view.format!r}")
    return ffi.cast(f"const {ctype} *", ffi.from_buffer(values)), values, view.nbytes // itemsize


class Trainer:
    """A training run on the cores (init_ram) or GPUs (init_vram) of an executor."""

    _trainer: Any                 # uform_trainer_t *, freed with the object
    _executor: Executor           # borrowed by the C trainer: kept alive here

    def __init__(self) -> None:
        raise TypeError("use Trainer.init_ram(...) or Trainer.init_vram(...)")

    @classmethod
    def _options(cls, mesh: Any, resume: Optional[_PathLike], depth: int, hidden: int,
                 batch: Optional[BatchShape], objective: Objective, masking: Optional[Masking],
                 contrastive: Optional[Contrastive], late_interaction: Optional[LateInteraction],
                 choices: Optional[Choices], schedule: Optional[Schedule], seed: int,
                 cpu_class: Optional[CPUClass], bridge: ProgressBridge) -> tuple:
        options = ffi.new("uform_trainer_options_t *")
        keep: list = [options]
        if mesh is not None:
            if not isinstance(mesh, Mesh):
                raise InvalidArgumentError(f"mesh: expected uform.Mesh, got {type(mesh).__name__}")
            options.mesh = mesh._mesh
        if resume is not None:
            path = ffi.new("char[]", path_bytes(resume, "resume"))
            keep.append(path)
            options.resume = path
        options.depth = as_count(depth, "depth")
        options.hidden = as_count(hidden, "hidden")
        if batch is not None:
            if not isinstance(batch, BatchShape):
                raise InvalidArgumentError(f"batch: expected uform.BatchShape, got {type(batch).__name__}")
            for field in ("max_rows_per_device", "max_segments_per_device", "max_columns_per_row",
                          "max_bags_per_device", "max_choices_per_item"):
                setattr(options.batch, field, getattr(batch, field))
            if batch.image:
                options.batch.image.patch_side, options.batch.image.channels = batch.image.patch_side, batch.image.channels
            if batch.video:
                v = batch.video
                options.batch.video.patch_side, options.batch.video.tube_frames = v.patch_side, v.tube_frames
                options.batch.video.frame_stride, options.batch.video.channels = v.frame_stride, v.channels
            if batch.audio:
                options.batch.audio.chunk_samples, options.batch.audio.sample_rate = batch.audio.chunk_samples, batch.audio.sample_rate
        options.objective = _enum(Objective, objective, "objective")
        if masking is not None:
            if not isinstance(masking, Masking):
                raise InvalidArgumentError(f"masking: expected uform.Masking, got {type(masking).__name__}")
            c_masking = ffi.new("uform_masking_t *")
            for f in dataclasses.fields(Masking):
                setattr(c_masking, f.name, getattr(masking, f.name))
            options.masking = c_masking
            keep.append(c_masking)
        if contrastive is not None:
            if not isinstance(contrastive, Contrastive):
                raise InvalidArgumentError(f"contrastive: expected uform.Contrastive, got {type(contrastive).__name__}")
            c_contrastive = ffi.new("uform_contrastive_t *")
            if contrastive.matryoshka_dimensions:
                widths = ffi.new("size_t[]", list(contrastive.matryoshka_dimensions))
                keep.append(widths)
                c_contrastive.matryoshka_dimensions = widths
                c_contrastive.matryoshka_dimensions_count = len(contrastive.matryoshka_dimensions)
            for name in ("temperature_groups", "inverse_temperature", "bias", "negatives",
                         "ambient_repulsion_weight", "max_edges_per_device", "pair_loss"):
                setattr(c_contrastive, name, getattr(contrastive, name))
            options.contrastive = c_contrastive
            keep.append(c_contrastive)
        if late_interaction is not None:
            if not isinstance(late_interaction, LateInteraction):
                raise InvalidArgumentError(
                    f"late_interaction: expected uform.LateInteraction, got {type(late_interaction).__name__}")
            c_late = ffi.new("uform_late_interaction_t *")
            for f in dataclasses.fields(LateInteraction):
                setattr(c_late, f.name, getattr(late_interaction, f.name))
            options.late_interaction = c_late
            keep.append(c_late)
        if choices is not None:
            if not isinstance(choices, Choices):
                raise InvalidArgumentError(f"choices: expected uform.Choices, got {type(choices).__name__}")
            c_choices = ffi.new("uform_choices_t *")
            c_choices.weight = choices.weight
            c_choices.temperature_groups = choices.temperature_groups
            options.choices = c_choices
            keep.append(c_choices)
        if schedule is not None:
            if not isinstance(schedule, Schedule):
                raise InvalidArgumentError(f"schedule: expected uform.Schedule, got {type(schedule).__name__}")
            options.schedule.learning_rate = schedule.learning_rate
            options.schedule.min_learning_rate = schedule.min_learning_rate
            options.schedule.warmup_steps = schedule.warmup_steps
            options.schedule.steps = schedule.steps
        options.seed = as_count(seed, "seed")
        options.cpu_class = cpu_class_value(cpu_class)
        bridge.fill(options.progress)
        return options, keep

    @classmethod
    def init_ram(cls, executor: Executor, /, *, mesh: Optional[Mesh] = None, resume: Optional[_PathLike] = None,
                 depth: int = 0, hidden: int = 0, batch: Optional[BatchShape] = None,
                 objective: Objective = Objective.MASKED, masking: Optional[Masking] = None,
                 contrastive: Optional[Contrastive] = None,
                 late_interaction: Optional[LateInteraction] = None, choices: Optional[Choices] = None,
                 schedule: Optional[Schedule] = None, seed: int = 0, progress: Optional[Progress] = None,
                 progress_steps: int = 0, cpu_class: Optional[CPUClass] = None) -> "Trainer":
        """Starts a run on the CPU cores of a RAM executor, with the math of init_vram in FP32.

        cpu_class pins the kernels of the step's FP32 products, as Model.load_ram's pin does for
        inference: SERIAL the portable C (multiply, then add), HASWELL AVX2 + FMA, SKYLAKE,
        SAPPHIRE and AMX AVX-512 (training is FP32: no BF16 or AMX products), NEON and SVE on
        Arm; None, the best this CPU runs. Every FMA path gives the same bits (SERIAL rounds
        differently); a class this CPU cannot run raises UnsupportedError."""
        if not isinstance(executor, Executor):
            raise InvalidArgumentError(f"executor: expected uform.Executor, got {type(executor).__name__}")
        return cls._start(lib.uform_trainer_init_ram, executor, mesh, progress, progress_steps, resume, depth,
                          hidden, batch, objective, masking, contrastive, late_interaction, choices, schedule, seed,
                          cpu_class)

    @classmethod
    def _start(cls, init: Any, executor: Optional[Executor], mesh: Optional[Mesh], progress: Optional[Progress],
               progress_steps: int, *configuration: Any) -> "Trainer":
        """A trainer from `init` (uform_trainer_init_ram or _vram) and the options of init_ram."""
        bridge = ProgressBridge(progress, progress_steps)
        options, keep = cls._options(mesh, *configuration, bridge)
        pointer = ffi.new("uform_trainer_t **")
        check(init(executor._executor if executor is not None else ffi.NULL, options, pointer), bridge)
        self = cls.__new__(cls)
        # The C trainer borrows the mesh until it is freed: the finaliser holds it.
        self._trainer = ffi.gc(pointer[0], lambda trainer, _mesh=mesh: lib.uform_trainer_free(trainer))
        self._executor = executor
        self._mesh = mesh
        return self

    @classmethod
    def init_vram(cls, executor: Executor, /, *, mesh: Optional[Mesh] = None, resume: Optional[_PathLike] = None,
                  depth: int = 0, hidden: int = 0, batch: Optional[BatchShape] = None,
                  objective: Objective = Objective.MASKED, masking: Optional[Masking] = None,
                  contrastive: Optional[Contrastive] = None,
                  late_interaction: Optional[LateInteraction] = None, choices: Optional[Choices] = None,
                  schedule: Optional[Schedule] = None, seed: int = 0, progress: Optional[Progress] = None,
                  progress_steps: int = 0) -> "Trainer":
        """Starts a run on the GPUs of a VRAM executor (Executor.for_vram(devices)), one replica
        per GPU, with every item kind, objective and term (every loss on the GPU).

        On several GPUs each step splits the items among them by token count, in order, each
        GPU steps its share on a thread of its own, the pairing terms see every GPU's items, the
        gradients are summed block by block during the backward (by NCCL on the GPUs where it
        loads, else in GPU order through host memory), and every GPU applies the same
        update (docs/gpu.md, "Several GPUs"); save and the tensor reads use GPU 0's copy, which
        every GPU holds bit for bit. On a mesh (mesh=, bootstrapped on this executor) each
        step's gradient sum and the pairing terms' gathers run on the GPUs through NCCL when
        every host can load it and no GPU is shared, else through host memory over Gloo
        (docs/distributed.md, "NCCL"), whether this process holds one GPU or several (its GPUs
        are then ranks of the mesh's world). A build without the CUDA backend raises
        UnsupportedError, a machine without a GPU DeviceError. Run on one H200 (2026-12-04)
        and one H100 (2026-12-05), alone and as two mesh hosts sharing it over Gloo; several GPUs, and NCCL over several
        ranks, not yet run on GPUs, only on the CPU under the CUDA emulation (docs/gpu.md)."""
        if executor is not None and not isinstance(executor, Executor):
            raise InvalidArgumentError(f"executor: expected uform.Executor, got {type(executor).__name__}")
        return cls._start(lib.uform_trainer_init_vram, executor, mesh, progress, progress_steps, resume, depth,
                          hidden, batch, objective, masking, contrastive, late_interaction, choices, schedule, seed,
                          None)

    def on(self, executor: Executor, /) -> "Trainer":
        """A receiver whose verbs block on executor: the trainer's own executor only."""
        if executor is not self._executor:
            raise UnsupportedError("Trainer.on: a trainer runs on the executor it was created on")
        return self

    def deferred(self, executor: Executor, /) -> DeferredOn[Trainer]:
        """A receiver (uform.DeferredOn[Trainer]) whose step and save are queued on executor's
        submission thread by the C library (uform_trainer_step_submit, uform_trainer_save_submit)
        and answer a uform.Deferred: step's embeddings (or None), save's None. The call takes
        the trainer until it has run: another step, save or tensor read meanwhile raises
        InvalidArgumentError ("in use by another call"); the trainer and the buffers the call
        borrows stay alive until it completes, even if the caller drops them."""
        from ._model import DeferredOn
        return DeferredOn(self, executor)

    def _step_deferred(self, executor: Executor, modalities: Sequence[Modality], contents: _Texts, /,
                       **keywords: Any) -> Any:
        from ._model import Deferred
        call = self._step_call(modalities, contents, **{**_STEP_DEFAULTS, **keywords})
        job = ffi.new("uform_job_t **")
        check(lib.uform_trainer_step_submit(self._trainer, executor._executor, call.batch, call.arena_pointer,
                                            call.scalar, call.encoded, call.c_stats, job))
        handle = ffi.gc(job[0], lib.uform_job_free)
        return Deferred(handle, call.finish, (None, call, self, executor))

    def _save_deferred(self, executor: Executor, path: _PathLike, /, *, progress: Optional[Progress] = None,
                       progress_steps: int = 0) -> Any:
        from ._model import Deferred
        encoded = path_bytes(path)
        bridge = ProgressBridge(progress, progress_steps)
        c_progress = bridge.new()
        job = ffi.new("uform_job_t **")
        check(lib.uform_trainer_save_submit(self._trainer, executor._executor, encoded, c_progress, job), bridge)
        handle = ffi.gc(job[0], lib.uform_job_free)
        return Deferred(handle, lambda: None, (bridge, encoded, c_progress, self, executor))

    def step(self, modalities: Sequence[Modality], contents: _Texts, /, *, bags: Optional[_Words] = None,
             temperature_groups: Optional[_Words] = None,
             sides: Optional[Sequence[LateInteractionSide]] = None, choices: Optional[_Texts] = None,
             choice_targets: Union[Sequence[Buffer], _Tape, None] = None, relations: Optional[Relations] = None,
             arena: Optional[Arena] = None, outputs_scalar: Scalar = Scalar.F32,
             stats: Optional[TrainerStepStats] = None) -> Optional[ArenaBuffer]:
        """Applies one optimizer step over the items; answers their pooled embeddings when given an arena."""
        call = self._step_call(modalities, contents, bags=bags, temperature_groups=temperature_groups,
                               sides=sides, choices=choices, choice_targets=choice_targets,
                               relations=relations, arena=arena, outputs_scalar=outputs_scalar, stats=stats)
        check(lib.uform_trainer_step(self._trainer, call.batch, call.arena_pointer, call.scalar, call.encoded,
                                     call.c_stats))
        return call.finish()

    def _step_call(self, modalities: Sequence[Modality], contents: _Texts, /, *, bags: Optional[_Words],
                   temperature_groups: Optional[_Words], sides: Optional[Sequence[LateInteractionSide]],
                   choices: Optional[_Texts], choice_targets: Any, relations: Optional[Relations],
                   arena: Optional[Arena], outputs_scalar: Scalar,
                   stats: Optional[TrainerStepStats]) -> "_StepCall":
        """Converts step's arguments into the C batch and everything it borrows."""
        tape = texts_tape(contents, "contents")
        count = tape.struct.count
        keep: list = [tape]
        batch = ffi.new("uform_trainer_batch_t *")
        if isinstance(modalities, (str, bytes)) or not hasattr(modalities, "__len__"):
            raise InvalidArgumentError(f"modalities: expected a sequence of uform.Modality, got {type(modalities).__name__}")
        if len(modalities) != count:
            raise InvalidArgumentError(f"modalities: {len(modalities)} values for {count} items")
        codes = []
        for index, modality in enumerate(modalities):
            if isinstance(modality, bool) or not isinstance(modality, int):
                raise InvalidArgumentError(f"modalities[{index}]: expected uform.Modality, got {type(modality).__name__}")
            if not 0 <= modality < 1 << 32:
                raise InvalidArgumentError(f"modalities[{index}]: {modality} is not a modality")
            codes.append(int(modality))
        c_modalities = ffi.new("uint32_t[]", codes)
        keep.append(c_modalities)
        batch.modalities = c_modalities
        batch.contents = tape.struct[0]
        if bags is not None:
            batch.bags, buffer = words_buffer(bags, count, "bags")
            keep.append(buffer)
        if temperature_groups is not None:
            batch.temperature_groups, buffer = words_buffer(temperature_groups, count, "temperature_groups")
            keep.append(buffer)
        if sides is not None:
            side_codes = [int(_enum(LateInteractionSide, s, f"sides[{i}]")) for i, s in enumerate(sides)]
            if len(side_codes) != count:
                raise InvalidArgumentError(f"sides: {len(side_codes)} values for {count} items")
            c_sides = ffi.new("uint32_t[]", side_codes)
            keep.append(c_sides)
            batch.sides = c_sides
        if choices is not None:
            if choice_targets is None:
                raise InvalidArgumentError("choice_targets: missing while choices are given")
            choice_tape, bounds = step_choices(choices, count)
            targets = choice_targets_buffer(choice_targets, bounds)
            keep.extend((choice_tape, targets))
            batch.choices = choice_tape.struct[0]
            batch.choice_targets = ffi.cast("const float *", ffi.from_buffer(targets))
        elif choice_targets is not None:
            raise InvalidArgumentError("choice_targets: given without choices")
        if relations is not None:
            if not isinstance(relations, Relations):
                raise InvalidArgumentError(f"relations: expected uform.Relations, got {type(relations).__name__}")
            c_relations = ffi.new("uform_relations_t *")
            keep.append(c_relations)
            for name in ("attract", "repel", "ignore"):
                edges = getattr(relations, name)
                if edges is None or edges.offsets is None:
                    continue
                target = getattr(c_relations, name)
                offsets, buffer, n_offsets = _typed_buffer(edges.offsets, f"relations.{name}.offsets",
                                                           ("Q", "L", "N"), 8, "size_t")
                keep.append(buffer)
                if n_offsets != count + 1:
                    raise InvalidArgumentError(f"relations.{name}.offsets: {n_offsets} values, expected {count + 1}")
                if edges.ids is None:
                    raise InvalidArgumentError(f"relations.{name}.ids: missing")
                edge_count = int(np.frombuffer(ffi.buffer(offsets, 8 * n_offsets), dtype=np.uint64)[-1])
                ids, buffer = words_buffer(edges.ids, edge_count, f"relations.{name}.ids", "edges")
                keep.append(buffer)
                target.offsets, target.ids = offsets, ids
                if edges.weights is not None:
                    weights, buffer, n_weights = _typed_buffer(edges.weights, f"relations.{name}.weights",
                                                               ("f",), 4, "float")
                    keep.append(buffer)
                    if n_weights != edge_count:
                        raise InvalidArgumentError(f"relations.{name}.weights: {n_weights} weights for {edge_count} edges")
                    target.weights = weights
            batch.relations = c_relations
        if arena is not None and not isinstance(arena, Arena):
            raise InvalidArgumentError(f"arena: expected uform.Arena, got {type(arena).__name__}")
        if stats is not None and not isinstance(stats, TrainerStepStats):
            raise InvalidArgumentError(f"stats: expected uform.TrainerStepStats, got {type(stats).__name__}")
        scalar = _enum(Scalar, outputs_scalar, "outputs_scalar")
        return _StepCall(batch, keep, arena, scalar, stats)

    def save(self, path: _PathLike, /, *, progress: Optional[Progress] = None, progress_steps: int = 0) -> None:
        """Writes the weights (BF16), the step and the train.* state, atomically."""
        encoded = path_bytes(path)
        bridge = ProgressBridge(progress, progress_steps)
        check(lib.uform_trainer_save(self._trainer, encoded, bridge.new()), bridge)

    def tensor(self, name: str, which: str = "weights") -> np.ndarray:
        """A copy of one named tensor of the run as float32: "weights" (the FP32 masters),
        "gradients" (of the last step), "first_moment" or "second_moment"."""
        kinds = {"weights": 0, "gradients": 1, "first_moment": 2, "second_moment": 3}
        if which not in kinds:
            raise InvalidArgumentError(f"which: expected one of {sorted(kinds)}, got {which!r}")
        if not isinstance(name, str):
            raise InvalidArgumentError(f"name: expected str, got {type(name).__name__}")
        encoded = name.encode()
        size = ffi.new("size_t *")
        check(lib.uform_trainer_tensor(self._trainer, encoded, kinds[which], ffi.NULL, size))
        values = np.empty(size[0], dtype=np.float32)
        check(lib.uform_trainer_tensor(self._trainer, encoded, kinds[which],
                                       ffi.cast("float *", ffi.from_buffer(values)), size))
        return values


_STEP_DEFAULTS = dict(bags=None, temperature_groups=None, sides=None, choices=None, choice_targets=None,
                      relations=None, arena=None, outputs_scalar=Scalar.F32, stats=None)


class _StepCall:
    """One step's C structures and keepalives, and how its results come back."""

    def __init__(self, batch: Any, keep: list, arena: Optional[Arena], scalar: Scalar,
                 stats: Optional[TrainerStepStats]) -> None:
        self.batch, self.keep, self.arena, self.scalar, self.stats = batch, keep, arena, scalar, stats
        self.arena_pointer = arena._arena if arena is not None else ffi.NULL
        self.encoded = ffi.new("uform_encoded_t *") if arena is not None else ffi.NULL
        self.c_stats = ffi.new("uform_trainer_step_stats_t *")

    def finish(self) -> Optional[ArenaBuffer]:
        if self.stats is not None:
            for name in TrainerStepStats.__slots__:
                setattr(self.stats, name, getattr(self.c_stats, name))
        if self.arena is None:
            return None
        encoded = self.encoded
        return arena_rows(encoded.embeddings, encoded.count, encoded.embedding_row_bytes,
                          encoded.dimensions, Scalar(encoded.scalar), self.arena)

