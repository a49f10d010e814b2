"""What the late-interaction (MaxSim) benchmarks share: the workload, the PyTorch contender,
timing and the report section.

Used by bench/test_maxsim_bench.py (pytest-benchmark) and bench/report.py. The workload is
the scoring step of a ColBERT-style search: QUERIES queries of QUERY_TOKENS token vectors
against DOCUMENTS documents of DOCUMENT_TOKENS (uniform) token vectors, WIDTH values each,
unit vectors in FP32, both sides prepared beforehand (uform gets the flat rows and offsets
an encode call leaves in its arena; torch gets padded tensors and masks, built once, as an
index would hold them). UFORM_BENCH_QUICK=1 shrinks it.
"""
from __future__ import annotations

import os
import time
from typing import Callable, NamedTuple

import numpy as np
import torch

import uform

QUICK = os.environ.get("UFORM_BENCH_QUICK", "") not in ("", "0")

QUERIES = 32
QUERY_TOKENS = 32
DOCUMENTS = 200 if QUICK else 1000
DOCUMENT_TOKENS = (64, 256)
WIDTH = 128
ROUNDS = 3 if QUICK else 5
#: torch scores this many padded document rows per GEMM at most, so its [query rows,
#: document rows] product stays near 64 MiB (1024 x 16384 floats) however many documents.
TORCH_CHUNK_ROWS = 16384


class Workload(NamedTuple):
    query_rows: np.ndarray       # [QUERIES * QUERY_TOKENS, WIDTH] float32
    query_offsets: np.ndarray    # QUERIES + 1
    document_rows: np.ndarray    # [sum of lengths, WIDTH] float32
    document_offsets: np.ndarray # DOCUMENTS + 1

    @property
    def pairs(self) -> int:
        return (len(self.query_offsets) - 1) * (len(self.document_offsets) - 1)

    @property
    def flops(self) -> float:
        """Useful multiply-adds x 2: every query row against every row of every document."""
        return 2.0 * len(self.query_rows) * len(self.document_rows) * WIDTH


def _unit_rows(rng: np.random.Generator, rows: int) -> np.ndarray:
    x = rng.standard_normal((rows, WIDTH)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def make_workload(seed: int = 0) -> Workload:
    rng = np.random.default_rng(seed)
    low, high = DOCUMENT_TOKENS
    lengths = rng.integers(low, high + 1, size=DOCUMENTS)
    document_offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.uint64)
    query_offsets = (np.arange(QUERIES + 1) * QUERY_TOKENS).astype(np.uint64)
    return Workload(_unit_rows(rng, QUERIES * QUERY_TOKENS), query_offsets,
                    _unit_rows(rng, int(document_offsets[-1])), document_offsets)


def _padded(rows: np.ndarray, offsets: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """[items, longest, WIDTH] zero-padded rows and the [items, longest] mask of real ones."""
    lengths = np.diff(offsets.astype(np.int64))
    longest = int(lengths.max()) if len(lengths) else 0
    padded = torch.zeros((len(lengths), longest, rows.shape[1]), dtype=torch.float32)
    mask = torch.zeros((len(lengths), longest), dtype=torch.bool)
    for i, (start, length) in enumerate(zip(offsets[:-1].astype(np.int64), lengths)):
        padded[i, :length] = torch.from_numpy(rows[start:start + length])
        mask[i, :length] = True
    return padded, mask


class TorchMaxSim:
    """MaxSim as one would write it in PyTorch: padded tensors and masks, one matmul per
    chunk of documents ([query rows, W] x [W, chunk rows]), padding masked to -inf, amax
    over each document's rows, padded query rows zeroed, sum / query length. FP32."""

    def __init__(self, workload: Workload) -> None:
        self.documents, document_mask = _padded(workload.document_rows, workload.document_offsets)
        self.document_pad = ~document_mask                              # [D, Ld]
        self.queries, query_mask = _padded(workload.query_rows, workload.query_offsets)
        self.query_mask = query_mask.to(torch.float32)                  # [Q, Lq]
        self.query_lengths = self.query_mask.sum(dim=1).clamp(min=1)    # [Q]
        longest = max(1, self.documents.shape[1])
        self.chunk = max(1, TORCH_CHUNK_ROWS // longest)

    def scores(self) -> np.ndarray:
        q, lq, width = self.queries.shape
        d, ld, _ = self.documents.shape
        flat_queries = self.queries.reshape(q * lq, width)
        out = torch.empty((q, d), dtype=torch.float32)
        with torch.inference_mode():
            for start in range(0, d, self.chunk):
                end = min(d, start + self.chunk)
                block = self.documents[start:end].reshape(-1, width)            # [c * Ld, W]
                products = (flat_queries @ block.T).view(q, lq, end - start, ld)
                products.masked_fill_(self.document_pad[start:end].view(1, 1, end - start, ld),
                                      float("-inf"))
                best = products.amax(dim=3)                                      # [Q, Lq, c]
                best = best * self.query_mask.unsqueeze(2)
                out[:, start:end] = best.sum(dim=1) / self.query_lengths.unsqueeze(1)
        return out.numpy()


class Contender(NamedTuple):
    key: str
    label: str
    score: Callable[[], np.ndarray]


def contenders(workload: Workload, threads: int) -> list[Contender]:
    """uform on a pool of `threads`, torch FP32 on as many intra-op threads (the caller sets
    torch's threads, before any torch work)."""
    executor = uform.Executor.for_ram(threads)
    queries = (workload.query_rows, workload.query_offsets)
    documents = (workload.document_rows, workload.document_offsets)

    def score_uform() -> np.ndarray:
        return uform.late_interaction_scores(queries, documents, executor=executor)

    torch_maxsim = TorchMaxSim(workload)
    return [Contender("uform", "uform late_interaction_scores (FP32)", score_uform),
            Contender("torch", "torch FP32 (padded, matmul + amax)", torch_maxsim.scores)]


def time_rounds(run: Callable[[], np.ndarray], rounds: int = ROUNDS) -> tuple[list[float], np.ndarray]:
    """Seconds of each round after one untimed warm-up, and the last round's scores."""
    result = run()
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        result = run()
        seconds.append(time.perf_counter() - start)
    return seconds, result


def measure(threads: int, log: Callable[[str], None]) -> dict:
    """{key: {label, seconds, scores}} for both contenders on the workload."""
    workload = make_workload()
    results = {}
    for contender in contenders(workload, threads):
        seconds, scores = time_rounds(contender.score)
        results[contender.key] = {"label": contender.label, "seconds": seconds, "scores": scores}
        log(f"maxsim  {contender.label:<40} best {min(seconds):8.4f} s  "
            f"{workload.pairs / min(seconds):12.0f} pairs/s")
    results["workload"] = workload
    return results


def report_section(results: dict, threads: int) -> str:
    """The docs/benchmarks.md section written by bench/report.py."""
    workload: Workload = results["workload"]
    low, high = DOCUMENT_TOKENS
    lines = ["## Late interaction (MaxSim) vs PyTorch\n",
             f"{QUERIES} queries of {QUERY_TOKENS} token vectors against "
             f"{len(workload.document_offsets) - 1} documents of {low} to {high} (uniform), width "
             f"{WIDTH}, unit FP32 vectors; {threads} threads each (uform `Executor.for_ram`, torch "
             f"`set_num_threads`); best of {ROUNDS} rounds after a warm-up. torch: "
             f"`bench/maxsim_harness.py` `TorchMaxSim` (documents padded once to the longest, "
             f"one matmul per chunk of {TORCH_CHUNK_ROWS} padded rows, masked amax, mean over "
             f"query tokens). uform: `uform.late_interaction_scores` on the flat rows.\n",
             "| implementation | query-document pairs per second | GFLOP/s (useful) |",
             "|---|---:|---:|"]
    for key in ("uform", "torch"):
        best = min(results[key]["seconds"])
        lines.append(f"| {results[key]['label']} | {workload.pairs / best:,.0f} | "
                     f"{workload.flops / best * 1e-9:.1f} |")
    ratio = min(results["torch"]["seconds"]) / min(results["uform"]["seconds"])
    difference = float(np.abs(results["uform"]["scores"] - results["torch"]["scores"]).max())
    lines += ["", f"uform / torch: **{ratio:.2f}x** (above 1: uform is faster). Largest score "
              f"difference between the two: {difference:.2e}.\n"]
    return "\n".join(lines) + "\n"
