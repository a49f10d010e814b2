"""The exception hierarchy: one class per uform_status_t, all under uform.Error."""
from __future__ import annotations

from typing import NoReturn


class Error(Exception):
    """Every failure libuform reports."""


class InvalidArgumentError(Error, ValueError):
    """A value is outside its domain; the message names the argument."""


class UnsupportedError(Error):
    """This build or machine cannot run it: a class, codec, device or verb not built yet."""


class FormatError(Error, ValueError):
    """A corrupt or malformed checkpoint or media file."""


class FileError(Error, OSError):
    """The file system refused an operation."""


class OutOfMemoryError(Error, MemoryError):
    """An allocation failed or a size overflowed."""


class DeviceError(Error):
    """A GPU runtime failure."""


class MeshError(Error):
    """A multi-host rendezvous failure."""


class CancelledError(Error):
    """A progress handler asked to stop."""


class DivergedError(Error, FloatingPointError):
    """A training step's loss or gradients were not finite: the step was not applied, and the
    weights, moments and step counter are those of the last good step."""


_BY_STATUS: dict[int, type[Error]] = {
    1: InvalidArgumentError,
    2: UnsupportedError,
    3: FormatError,
    4: FileError,
    5: OutOfMemoryError,
    6: DeviceError,
    7: MeshError,
    8: CancelledError,
    9: DivergedError,
}


def raise_status(status: int, message: str) -> NoReturn:
    raise _BY_STATUS.get(status, Error)(message)
