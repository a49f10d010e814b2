"""uform: one small transformer encoder for text, images, video and audio.

The Python package is glue over libuform (an out-of-line cffi module): it turns
keyword arguments into C structures and buffers into borrowed pointers; all
computation happens in C.
"""
from __future__ import annotations

from ._buffers import Arena, ArenaBuffer, RowsTape, to_float32
from ._capabilities import Capabilities, capabilities
from ._enums import (CPUClass, GPUClass, LateInteractionSide, Modality, MultimemTier, Negatives,
                     Objective, Outputs, PairLossForm, Scalar)
from ._errors import (CancelledError, DeviceError, DivergedError, Error, FileError, FormatError,
                      InvalidArgumentError, MeshError, OutOfMemoryError, UnsupportedError)
from ._executor import Executor
from ._late_interaction import late_interaction_scores
from ._mesh import Mesh, MeshDescription, MeshOptions
from ._media import AudioEncodeStats, ImageEncodeStats, VideoEncodeStats
from ._model import Deferred, DeferredOn, Encoded, Model, ModelDescription, On, TextEncodeStats
from ._native import lib as _lib
from ._training import (AudioShape, BatchShape, Choices, Contrastive, Edges, ImageShape,
                        LateInteraction, Masking, Relations, Schedule, Trainer,
                        TrainerStepStats, VideoShape)

__version__ = "4.0.0"
#: The version of the loaded libuform, as major * 10000 + minor * 100 + patch.
library_version: int = int(_lib.uform_version())

__all__ = [
    "Arena", "ArenaBuffer", "AudioEncodeStats", "AudioShape", "BatchShape", "Capabilities", "Choices", "Contrastive", "Edges",
    "ImageShape", "LateInteraction", "Masking", "MeshOptions", "Relations", "Schedule",
    "TrainerStepStats", "VideoShape", "CPUClass", "CancelledError", "DivergedError", "Deferred", "DeferredOn", "DeviceError",
    "Encoded", "Error", "Executor", "FileError", "FormatError", "GPUClass", "ImageEncodeStats", "InvalidArgumentError",
    "LateInteractionSide", "Mesh", "MeshDescription", "MeshError", "Modality", "Model", "ModelDescription",
    "MultimemTier", "Negatives", "Objective", "On", "OutOfMemoryError", "Outputs", "PairLossForm",
    "RowsTape", "Scalar", "TextEncodeStats", "Trainer", "UnsupportedError", "VideoEncodeStats",
    "capabilities", "late_interaction_scores", "to_float32",
]
