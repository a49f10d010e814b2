"""The cffi module and the two things every verb needs: status checks and progress."""
from __future__ import annotations

from typing import Any, Callable, Optional

from ._enums import CPUClass
from ._errors import InvalidArgumentError, raise_status

try:
    from ._uform import ffi, lib
except ImportError as error:  # pragma: no cover - a broken install, not a test path
    raise ImportError(
        "uform's native module is missing: build it with `make` (or `pip install .`)"
    ) from error

#: A progress handler: called with (done, total); a truthy return cancels the call.
Progress = Callable[[int, int], Optional[bool]]


class ProgressBridge:
    """Carries a Python progress handler across the C call and back.

    An exception raised by the handler cancels the call; `check` re-raises it
    instead of the CancelledError the library answers."""

    def __init__(self, handler: Progress | None, steps: int) -> None:
        if handler is not None and not callable(handler):
            raise InvalidArgumentError(f"progress: expected a callable, got {type(handler).__name__}")
        steps = as_count(steps, "progress_steps")
        self.handler = handler
        self.steps = steps
        self.error: BaseException | None = None
        self._handle = ffi.new_handle(self) if handler is not None else ffi.NULL

    def fill(self, progress: Any) -> None:
        """Writes the uform_progress_t fields of `progress` (a cdata struct)."""
        if self.handler is None:
            progress.callback = ffi.NULL
            progress.user = ffi.NULL
            progress.steps = 0
        else:
            progress.callback = lib.uform_python_progress
            progress.user = self._handle
            progress.steps = self.steps

    def new(self) -> Any:
        progress = ffi.new("uform_progress_t *")
        self.fill(progress)
        return progress


@ffi.def_extern()
def uform_python_progress(user: Any, done: int, total: int) -> int:
    bridge: ProgressBridge = ffi.from_handle(user)
    try:
        return 1 if bridge.handler(done, total) else 0  # type: ignore[misc]
    except BaseException as error:  # re-raised by check() after the C call returns
        bridge.error = error
        return 1


def check(status: int, bridge: ProgressBridge | None = None) -> None:
    """Raises the exception for a nonzero status, with the library's message."""
    if status == 0:
        return
    if bridge is not None and bridge.error is not None:
        error, bridge.error = bridge.error, None
        raise error
    raise_status(status, ffi.string(lib.uform_last_error()).decode("utf-8", "replace"))


def as_count(value: Any, name: str) -> int:
    """A non-negative int argument, or InvalidArgumentError naming it."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{name}: expected a non-negative int, got {type(value).__name__}")
    if value < 0 or value >= 1 << 63:
        raise InvalidArgumentError(f"{name}: {value} is out of range")
    return value


def class_pin(kind: type, value: Any, name: str) -> int:
    """A cpu_class or gpu_class pin as the C enum: None is AUTO (0); else a member of kind."""
    if value is None:
        return 0
    try:
        return int(kind(value))
    except ValueError:
        raise InvalidArgumentError(f"{name}: {value!r} is not a uform.{kind.__name__}") from None


def cpu_class_value(cpu_class: Any) -> int:
    """A cpu_class pin as the C enum: None is AUTO (0); else a uform.CPUClass."""
    return class_pin(CPUClass, cpu_class, "cpu_class")
