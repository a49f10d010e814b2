"""Executors: where verbs run. A RAM executor is a persistent thread pool."""
from __future__ import annotations

from typing import Sequence

from ._buffers import words_with_length
from ._native import as_count, check, ffi, lib


class Executor:
    """A thread pool on CPU cores (for_ram) or a set of GPUs (for_vram)."""

    _executor: object

    def __init__(self) -> None:
        raise TypeError("use Executor.for_ram(...) or Executor.for_vram(...)")

    @classmethod
    def for_ram(cls, threads: int = 0, memory_domains: Sequence[int] | None = None) -> "Executor":
        """A pool of `threads` threads (0: one per core this process may use).

        memory_domains lists NUMA nodes, recorded for one replica per domain."""
        threads = as_count(threads, "threads")
        domains, domains_count, _keep = _words(memory_domains, "memory_domains")
        pointer = ffi.new("uform_executor_t **")
        check(lib.uform_executor_for_ram(threads, domains, domains_count, pointer))
        self = cls.__new__(cls)
        self._executor = ffi.gc(pointer[0], lib.uform_executor_free)
        return self

    @classmethod
    def for_vram(cls, devices: Sequence[int] | None = None) -> "Executor":
        """The GPUs to run on (None: every visible one), a stream each, and a pool of host threads
        for decoding and submitted jobs. A build without the CUDA backend raises UnsupportedError,
        a machine without a GPU DeviceError "no GPU found". Run on one H200 (2026-12-04)."""
        listed, listed_count, _keep = _words(devices, "devices")
        pointer = ffi.new("uform_executor_t **")
        check(lib.uform_executor_for_vram(listed, listed_count, pointer))
        self = cls.__new__(cls)
        self._executor = ffi.gc(pointer[0], lib.uform_executor_free)
        return self

    @property
    def threads(self) -> int:
        """Threads a parallel loop runs on, the calling one included."""
        value = ffi.new("size_t *")
        check(lib.uform_executor_threads(self._executor, value))
        return int(value[0])

    @property
    def memory_domains(self) -> int:
        value = ffi.new("size_t *")
        check(lib.uform_executor_memory_domains(self._executor, value))
        return int(value[0])

    def __repr__(self) -> str:
        return f"uform.Executor.for_ram(threads={self.threads})"


def _words(values: Sequence[int] | None, name: str) -> tuple:
    """(cdata const uint32_t * or NULL, count, keepalive) for an optional list of ids."""
    return words_with_length(values, None, name)
