"""Mesh: one training run over several processes and hosts (docs/distributed.md).

`Mesh.bootstrap(executor, MeshOptions(...))` meets the other hosts in a shared directory
and connects the collective engine (Gloo over TCP; on GPUs NCCL sums the gradients where
every host can, docs/distributed.md "NCCL");
`Trainer.init_ram(executor, mesh=mesh, ...)` or `Trainer.init_vram(...)` then makes every step
one update over the items of every host.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Tuple

from ._buffers import _PathLike, path_bytes
from ._enums import GPUClass, MultimemTier
from ._errors import InvalidArgumentError
from ._executor import Executor
from ._native import as_count, check, ffi, lib


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeshOptions:
    """Where and how the hosts of one run meet.

    host_domain_index is this process (0 leads), host_domain_count the processes of the run,
    directory a folder every host sees (crossing as os.fsencode's bytes), job the run's name
    (a str of [A-Za-z0-9._-]), timeout_ms how long bootstrap waits for the others and each
    collective for its peers (0: 300000, five minutes)."""

    host_domain_index: int = 0
    host_domain_count: int = 0
    directory: Optional[_PathLike] = None
    job: str = ""
    timeout_ms: int = 0

    def __post_init__(self) -> None:
        as_count(self.host_domain_index, "MeshOptions.host_domain_index")
        as_count(self.host_domain_count, "MeshOptions.host_domain_count")
        as_count(self.timeout_ms, "MeshOptions.timeout_ms")
        if not isinstance(self.job, str):
            raise InvalidArgumentError(f"MeshOptions.job: expected str, got {type(self.job).__name__}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeshDescription:
    """What a mesh is: its hosts, the devices of each, and where this process stands."""

    host_domain_index: int
    host_domain_count: int
    rank: int                      # this process's first device among every device of the run
    ranks: int                     # devices (replicas) of the whole run
    devices: Tuple[int, ...]       # devices (replicas) of each host
    hosts: Tuple[str, ...]         # each host's name, as it reported it
    multimem_tier: MultimemTier    # NONE on CPUs
    gpu_class: Optional[GPUClass]  # every host's GPUs' class; None on CPUs
    engine: str                    # "nccl" (GPU hosts: gradients summed on the GPUs), else "gloo"
    run_id: str                    # fresh for every bootstrap
    timeout_ms: int


class Mesh:
    """The hosts of one training run, met in a shared directory and connected.

    Its connections close when the object is dropped (a trainer built on it keeps it alive);
    peers still using them then raise MeshError naming this host."""

    _mesh: Any                     # uform_mesh_t *, freed with the object
    _executor: Executor            # borrowed by the C mesh: kept alive here

    def __init__(self) -> None:
        raise TypeError("use Mesh.bootstrap(executor, MeshOptions(...))")

    @classmethod
    def bootstrap(cls, executor: Executor, options: MeshOptions, /) -> "Mesh":
        """Meets the other hosts: blocks until every host of options arrived (MeshError naming
        those that did not, after the timeout), then connects the collective engine."""
        if not isinstance(executor, Executor):
            raise InvalidArgumentError(f"executor: expected uform.Executor, got {type(executor).__name__}")
        if not isinstance(options, MeshOptions):
            raise InvalidArgumentError(f"options: expected uform.MeshOptions, got {type(options).__name__}")
        if options.directory is None:
            raise InvalidArgumentError("MeshOptions.directory: a folder every host sees is required")
        directory = ffi.new("char[]", path_bytes(options.directory, "MeshOptions.directory"))
        job_bytes = options.job.encode("utf-8")
        if b"\0" in job_bytes:
            raise InvalidArgumentError("MeshOptions.job: contains a NUL character")
        job = ffi.new("char[]", job_bytes)
        c_options = ffi.new("uform_mesh_options_t *")
        c_options.host_domain_index = options.host_domain_index
        c_options.host_domain_count = options.host_domain_count
        c_options.directory = directory
        c_options.job = job
        c_options.timeout_ms = options.timeout_ms
        pointer = ffi.new("uform_mesh_t **")
        check(lib.uform_mesh_bootstrap(executor._executor, c_options, pointer))
        self = cls.__new__(cls)
        self._mesh = ffi.gc(pointer[0], lib.uform_mesh_free)
        self._executor = executor
        return self

    def describe(self) -> MeshDescription:
        c = ffi.new("uform_mesh_description_t *")
        check(lib.uform_mesh_describe(self._mesh, c))
        hosts = c.host_domain_count
        gpu = int(c.gpu_class)
        return MeshDescription(
            host_domain_index=int(c.host_domain_index), host_domain_count=int(hosts),
            rank=int(c.rank), ranks=int(c.ranks),
            devices=tuple(int(c.devices[h]) for h in range(hosts)),
            hosts=tuple(ffi.string(c.hosts[h]).decode("utf-8", "replace") for h in range(hosts)),
            multimem_tier=MultimemTier(int(c.multimem_tier)),
            gpu_class=GPUClass(gpu) if gpu else None,
            engine=ffi.string(c.engine).decode(), run_id=ffi.string(c.run_id).decode(),
            timeout_ms=int(c.timeout_ms))
