"""Enumerations, valued as their C counterparts in uform.h (a stable ABI)."""
from __future__ import annotations

from enum import IntEnum, IntFlag


class Modality(IntEnum):
    """What the bytes of one item hold, valued as uform_modality_t."""

    TEXT = 0
    IMAGE = 1
    VIDEO = 2
    AUDIO = 3


class Objective(IntEnum):
    """Which losses a training step relaxes, valued as uform_objective_t."""

    MASKED = 0
    CONTRASTIVE = 1
    JOINT = 2


class Negatives(IntEnum):
    """Which pairs the contrastive loss pushes apart, valued as uform_negatives_t."""

    AMBIENT = 0
    NAMED = 1


class PairLossForm(IntEnum):
    """How a contrastive term turns a row of scores into forces."""

    DERIVED = 0
    BALANCED = 1
    RANKED = 2
    SIGMOID = 3


class LateInteractionSide(IntEnum):
    """Which side of a late-interaction score an item takes."""

    NONE = 0
    QUERY = 1
    DOCUMENT = 2
    QUERY_AND_DOCUMENT = 3


class Scalar(IntEnum):
    """Numeric formats of weights and outputs, valued as uform_scalar_t.

    I8 outputs are round(x * 127) of unit-norm rows (scale 1/127); B1 outputs are
    sign bits (x > 0), most significant bit first, as numpy.packbits reads them.
    """

    F32 = 0
    BF16 = 1
    F16 = 2
    E4M3 = 3
    E5M2 = 4
    I8 = 5
    B1 = 6


class CPUClass(IntEnum):
    """Kernels a RAM model is packed for, chosen at load from what the CPU reports
    (cpuid on x86-64, the kernel's HWCAP words on aarch64). SERIAL runs everywhere;
    HASWELL, SKYLAKE, SAPPHIRE and AMX only on x86-64, NEON, SVE, NEON_BF16 and SVE_BF16 only on
    aarch64. SAPPHIRE, AMX, NEON_BF16 and SVE_BF16 round activations to BF16 for their products.
    AMX is SAPPHIRE with its GEMMs on AMX tiles (tdpbf16ps); where the machine has AMX it is
    the automatic choice."""

    SERIAL = 1
    HASWELL = 2
    SKYLAKE = 3
    SAPPHIRE = 4
    NEON = 5
    SVE = 6
    NEON_BF16 = 7
    SVE_BF16 = 8
    AMX = 9


class GPUClass(IntEnum):
    """The GPU class a VRAM model's kernels run as: describe().gpu_class, and the gpu_class pin
    of Model.load_vram (a class the GPU cannot run raises UnsupportedError)."""

    AMPERE = 1
    ADA = 2
    HOPPER = 3
    BLACKWELL = 4


class MultimemTier(IntEnum):
    """NVLink SHARP under a mesh's NCCL sums, as NCCL reports it (the lowest over the run's GPUs).

    NONE: no multicast (CPUs, Gloo, or NCCL without it); NVLINK: within each host's NVLink
    domain (NVSwitch); NVLINK_SWITCH: one NVLink domain spans hosts (an NVLink Switch System).
    """

    NONE = 0
    NVLINK = 1
    NVLINK_SWITCH = 2


class Outputs(IntFlag):
    """What an encode verb writes into the arena."""

    EMBEDDINGS = 1
    TOKENS = 2
