"""Training verbs: not built in this version; they raise UnsupportedError."""
from __future__ import annotations

from typing import Any

from ._errors import UnsupportedError


class Trainer:
    """A training run (not built yet: see the README's status table)."""

    def __init__(self) -> None:
        raise TypeError("use Trainer.init_ram(...) or Trainer.init_vram(...)")

    @classmethod
    def init_vram(cls, executor: Any, /, **keywords: Any) -> "Trainer":
        raise UnsupportedError("Trainer.init_vram: training on GPUs is not built in this version of uform")

    @classmethod
    def init_ram(cls, executor: Any, /, **keywords: Any) -> "Trainer":
        raise UnsupportedError("Trainer.init_ram: training on CPUs is not built in this version of uform")


class Mesh:
    """A multi-host training mesh (not built yet)."""

    def __init__(self) -> None:
        raise TypeError("use Mesh.bootstrap(...)")

    @classmethod
    def bootstrap(cls, executor: Any, options: Any, /) -> "Mesh":
        raise UnsupportedError("Mesh.bootstrap: multi-host training is not built in this version of uform")
