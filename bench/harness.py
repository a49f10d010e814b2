"""What the text_encode benchmarks share: sizes, texts, thread setup and the contenders.

Used by bench/conftest.py + bench/test_text_encode_bench.py (pytest-benchmark) and by
bench/report.py (writes docs/benchmarks.md). UFORM_BENCH_QUICK=1 shrinks everything for
a smoke run; UFORM_BENCH_ROUNDS overrides the number of timed rounds.

UFORM_BENCH_ISA=avx2 runs an AVX-512 machine as an AVX2 one, both sides limited to AVX2 + FMA:
torch through ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2 and MKL_ENABLE_INSTRUCTIONS=AVX2
(set here, before torch is imported), uform by pinning the HASWELL class (Model.load_ram and
Trainer.init_ram's cpu_class), torch BF16 autocast off. A proxy, not an AVX2 machine: the core,
its caches and memory stay what they are, and uform's row functions (layer norm, GELU
and its backward, rotary) choose their vectors by the CPU, not by the pin. It covers text_encode
(bench/report.py runs only that section under it) and the training step (bench/train_report.py).
"""
from __future__ import annotations

import os
import sys
import time
from typing import Callable, NamedTuple, Optional

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
for _path in (os.path.join(ROOT, "tests"), ROOT, BENCH):
    if _path not in sys.path:
        sys.path.insert(0, _path)

AVX2_PROXY = os.environ.get("UFORM_BENCH_ISA", "").lower() == "avx2"
AVX2_PROXY_TORCH = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                    "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
if AVX2_PROXY:
    for _name, _value in AVX2_PROXY_TORCH.items():
        os.environ.setdefault(_name, _value)   # read when torch and its libraries load

import numpy as np  # noqa: E402
import torch  # noqa: E402

import uform  # noqa: E402
from reference.batched import BatchedTorchModel  # noqa: E402
from reference.checkpoint import write_random_checkpoint  # noqa: E402
from pages import TEXT_BYTES, kept_section, make_texts  # noqa: E402,F401  (re-exported)

QUICK = os.environ.get("UFORM_BENCH_QUICK", "") not in ("", "0")

# The model: DESIGN's text encoder at depth 12, hidden 512 (quick: depth 2, hidden 128).
SHAPE = (dict(depth=2, hidden=128, dimensions=128, context=512) if QUICK
         else dict(depth=12, hidden=512, dimensions=512, context=512))
BIG_BATCH = 32 if QUICK else 256
SINGLE_TEXTS = 16             # batch 1: this many different texts, one call each, per round
QUERY_BYTES = (8, 64)         # short queries: lengths uniform in [8, 64], printable ASCII
QUERY_TEXTS = 64              # short queries: this many different texts, one call each, per round
TORCH_MINI_BATCH = 32         # BatchedTorchModel's mini-batch (texts sorted by length)


def cpu_flag_set() -> set[str]:
    """The flags of /proc/cpuinfo's first processor: "flags" on x86-64, "Features" on
    aarch64 (empty where it cannot be read)."""
    try:
        with open("/proc/cpuinfo") as file:
            for line in file:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def native_bf16() -> bool:
    """Whether this CPU has BF16 arithmetic (AVX-512 BF16 or AMX on x86-64, FEAT_BF16's
    "bf16" on aarch64), where torch's BF16 autocast is its fastest CPU mode."""
    return bool(cpu_flag_set() & {"avx512_bf16", "amx_bf16", "bf16"})


# torch BF16 autocast runs where the CPU has BF16 arithmetic; elsewhere it emulates BF16,
# is far slower than FP32 (over 20 minutes of a `make bench` on a 2-core AVX2 EPYC) and is
# no one's choice, so FP32 is torch's fastest mode there. UFORM_BENCH_TORCH_BF16=1 forces it.
TORCH_BF16 = ((native_bf16() and not AVX2_PROXY)
              or os.environ.get("UFORM_BENCH_TORCH_BF16", "") not in ("", "0"))
TORCH_BF16_SKIPPED = ("" if TORCH_BF16 else
                      ("torch BF16 autocast is not run: the AVX2 proxy leaves BF16 arithmetic unused"
                       if AVX2_PROXY else
                       "torch BF16 autocast is not run: this CPU has no BF16 arithmetic (no "
                       "avx512_bf16, amx_bf16 or Arm bf16)")
                      + ", and without it torch's fastest CPU mode is FP32 "
                      "(UFORM_BENCH_TORCH_BF16=1 runs it anyway)")
# The class uform runs when the benchmarks leave the choice to it: HASWELL in the AVX2 proxy.
UFORM_AUTO_CLASS = uform.CPUClass.HASWELL if AVX2_PROXY else None


def proxy_note() -> str:
    """The report's setup line for UFORM_BENCH_ISA=avx2, empty otherwise."""
    if not AVX2_PROXY:
        return ""
    limits = ", ".join(f"{k}={os.environ.get(k)}" for k in AVX2_PROXY_TORCH)
    return ("- **AVX2 proxy** (`UFORM_BENCH_ISA=avx2`): this CPU's AVX-512 left unused by both sides: "
            f"torch with {limits}, BF16 autocast off; uform pinned to HASWELL (AVX2 + FMA). The core, "
            "its caches and memory are this machine's, not an AVX2 server's, and uform's layer norm, "
            "GELU (forward and backward) and rotary still pick AVX-512 by the CPU (a few percent of the work).")


class Workload(NamedTuple):
    key: str                      # pytest id and results key: batch1, batch256, query
    title: str                    # what the report's columns say
    per_call: bool                # one call per text (latency), else one call with all texts
    count: int                    # texts per round
    text_bytes: tuple             # (low, high) of the uniform text lengths in bytes
    seed: int                     # of make_texts
    rounds: int                   # timed rounds (after one warm-up) unless UFORM_BENCH_ROUNDS
    goal: bool                    # one of the specified workloads (the goals are about these)


# The two workloads (batch 1 and batch BIG_BATCH of 64-512-byte texts; seeds as before),
# then the latency case of a search backend embedding user queries: short texts, one call each
# (2 rounds of 64 calls: at full size its warm-up and rounds take about half a minute in all).
BATCH1 = Workload("batch1", "batch 1", True, SINGLE_TEXTS, TEXT_BYTES, 1, 3, True)
BIG = Workload(f"batch{BIG_BATCH}", f"batch {BIG_BATCH}", False, BIG_BATCH, TEXT_BYTES, BIG_BATCH, 2, True)
QUERY = Workload("query", "batch 1, short queries", True, QUERY_TEXTS, QUERY_BYTES, 8, 2, False)
WORKLOADS = (BATCH1, BIG, QUERY)


def rounds_for(workload: Workload) -> int:
    """Timed rounds (after one warm-up): UFORM_BENCH_ROUNDS, else the workload's own."""
    if os.environ.get("UFORM_BENCH_ROUNDS"):
        return max(1, int(os.environ["UFORM_BENCH_ROUNDS"]))
    return workload.rounds


def thread_count() -> int:
    """The cores this process may use: uform's executor and torch both get this many."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def configure_torch(threads: int) -> None:
    """Same thread count as uform; one inter-op thread. Call before any torch work."""
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:      # already set, or inter-op work already started
        pass
    torch.set_num_threads(threads)


def texts_for(workload: Workload) -> list[bytes]:
    """The texts of one round of `workload`."""
    return make_texts(workload.count, seed=workload.seed, text_bytes=workload.text_bytes)


def write_checkpoint(directory: str) -> str:
    path = os.path.join(directory, "bench-d{depth}-h{hidden}.safetensors".format(**SHAPE))
    if not os.path.exists(path):
        write_random_checkpoint(path, seed=0, depth=SHAPE["depth"], hidden=SHAPE["hidden"],
                                dimensions=SHAPE["dimensions"], context=SHAPE["context"])
    return path


class Contender(NamedTuple):
    key: str                                   # short id, for pytest ids
    label: str                                 # what the report prints
    encode: Callable[[list], np.ndarray]       # a batch of texts -> [n, D] float32
    uform_class: Optional[str]                 # the uform CPU class, None for torch


def bf16_products(cpu_class: Optional["uform.CPUClass"]) -> bool:
    """Whether a uform CPU class rounds its GEMMs' activations to BF16."""
    return cpu_class in (uform.CPUClass.SAPPHIRE, uform.CPUClass.AMX, uform.CPUClass.NEON_BF16,
                         uform.CPUClass.SVE_BF16)


def uform_contender(path: str, executor: "uform.Executor", cpu_class: Optional["uform.CPUClass"],
                    key: str) -> Optional[Contender]:
    """uform text_encode on `executor`; cpu_class None: the library's automatic choice.
    None when this machine cannot run the class."""
    try:
        model = uform.Model.load_ram(path, cpu_class=cpu_class, executor=executor)
    except uform.UnsupportedError:
        return None
    arena = uform.Arena()
    chosen = model.describe().cpu_class
    assert chosen is not None, "a model loaded into RAM has a CPU class"
    math = "BF16 products, FP32 sums" if bf16_products(chosen) else "FP32"
    how = "auto" if cpu_class is None else "pinned"
    label = f"uform {chosen.name} ({how}; {math})"

    def encode(texts: list) -> np.ndarray:
        return np.asarray(model.text_encode(texts, arena).embeddings)  # a view into the arena

    return Contender(key, label, encode, chosen.name)


def contenders(path: str, threads: int) -> list[Contender]:
    """uform auto (AMX or SAPPHIRE where the CPU has them; SAPPHIRE pinned beside AMX), uform pinned SKYLAKE (FP32),
    torch BF16 autocast, torch FP32."""
    executor = uform.Executor.for_ram(threads)
    assert executor.threads == threads, (executor.threads, threads)
    found = [uform_contender(path, executor, UFORM_AUTO_CLASS, "uform-auto")]
    if found[0] is not None and found[0].uform_class == "AMX":   # the tiles against AVX-512 BF16
        found.append(uform_contender(path, executor, uform.CPUClass.SAPPHIRE, "uform-sapphire"))
    if found[0] is not None and found[0].uform_class not in ("SKYLAKE", "HASWELL"):
        found.append(uform_contender(path, executor, uform.CPUClass.SKYLAKE, "uform-skylake"))
    torch_model = BatchedTorchModel.from_checkpoint(path, torch.float32, max_batch=TORCH_MINI_BATCH)
    if TORCH_BF16:
        found.append(Contender("torch-bf16", "torch BF16 autocast",
                               lambda texts: torch_model.encode(texts, autocast=True).numpy(), None))
    found.append(Contender("torch-fp32", "torch FP32",
                           lambda texts: torch_model.encode(texts, autocast=False).numpy(), None))
    return [c for c in found if c is not None]


def round_function(contender: Contender, workload: Workload, texts: list) -> Callable[[], np.ndarray]:
    """One timed round: one call per text (per_call workloads), else one call with all texts."""
    if workload.per_call:
        latencies: list[float] = []

        def run() -> np.ndarray:
            rows = []
            for text in texts:
                start = time.perf_counter()
                rows.append(contender.encode([text]))
                latencies.append(time.perf_counter() - start)
            return np.concatenate(rows)
        run.latencies = latencies  # type: ignore[attr-defined]  # seconds of every call, all rounds
    else:
        def run() -> np.ndarray:
            return contender.encode(texts)
    return run


def warm_up(contender: Contender, workload: Workload, texts: list) -> None:
    """Untimed: one round of a per_call workload, the first 32 texts otherwise (arena growth, JIT, caches)."""
    if workload.per_call:
        round_function(contender, workload, texts)()
    else:
        contender.encode(texts[:32])


def time_rounds(run: Callable[[], np.ndarray], rounds: int) -> tuple[list[float], np.ndarray]:
    """Seconds of each round and a copy of the last round's embeddings."""
    seconds, result = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        result = run()
        seconds.append(time.perf_counter() - start)
    return seconds, np.array(result, dtype=np.float32, copy=True)
