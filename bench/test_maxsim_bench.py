"""Late-interaction (MaxSim) scoring against PyTorch: pytest-benchmark, one group.

    python3 -m pytest -q bench/test_maxsim_bench.py --benchmark-columns=min,mean,rounds
    UFORM_BENCH_QUICK=1 python3 -m pytest -q bench/test_maxsim_bench.py     (200 documents)

The workload is bench/maxsim_harness.py's: 32 queries of 32 token vectors against 1000
documents of 64-256, width 128, FP32 unit vectors; both contenders on the same number of
threads (the cores this process may use). Query-document pairs per second (best round) go
to extra_info["pairs_per_second"] and the summary at the end, with uform's ratio to torch.
bench/report.py writes the same comparison into docs/benchmarks.md.
"""
import numpy as np
import pytest

import maxsim_harness
from conftest import MAXSIM_RESULTS, THREADS
from reference.late_interaction import late_interaction_scores, split


@pytest.fixture(scope="module")
def workload():
    return maxsim_harness.make_workload()


@pytest.fixture(scope="module")
def maxsim_contenders(workload):
    return {c.key: c for c in maxsim_harness.contenders(workload, THREADS)}


def test_torch_maxsim_matches_reference():
    """The PyTorch contender computes MaxSim: on a small workload with uneven lengths, within
    1e-5 of the float64 reference (FP32 dot products of 128 values of unit vectors are within
    about 130 x 2^-24 = 8e-6 of exact)."""
    rng = np.random.default_rng(4)
    lengths = rng.integers(1, 40, size=12)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.uint64)
    rows = rng.standard_normal((int(offsets[-1]), maxsim_harness.WIDTH)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    small = maxsim_harness.Workload(rows[:50], np.array([0, 7, 20, 50], np.uint64), rows, offsets)
    got = maxsim_harness.TorchMaxSim(small).scores()
    expected = late_interaction_scores(split(small.query_rows, small.query_offsets),
                                       split(small.document_rows, small.document_offsets))
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


def test_contenders_agree(maxsim_contenders):
    """On the benchmark's own workload both give the same scores to FP32 precision."""
    uform_scores = maxsim_contenders["uform"].score()
    torch_scores = maxsim_contenders["torch"].score()
    np.testing.assert_allclose(uform_scores, torch_scores, atol=2e-5, rtol=0)


@pytest.mark.parametrize("key", ["uform", "torch"])
def test_maxsim(benchmark, workload, maxsim_contenders, key):
    contender = maxsim_contenders[key]
    contender.score()   # warm-up: pool threads, allocator, torch kernels
    benchmark.group = (f"late_interaction_scores {maxsim_harness.QUERIES}x{maxsim_harness.QUERY_TOKENS} "
                       f"queries vs {len(workload.document_offsets) - 1} documents, width "
                       f"{maxsim_harness.WIDTH}")
    benchmark.extra_info.update(label=contender.label, pairs=workload.pairs, threads=THREADS)
    result = benchmark.pedantic(contender.score, rounds=maxsim_harness.ROUNDS, iterations=1,
                                warmup_rounds=0)
    assert result.shape == (maxsim_harness.QUERIES, len(workload.document_offsets) - 1)
    if benchmark.stats is not None:    # None under --benchmark-disable
        rate = workload.pairs / benchmark.stats.stats.min
        benchmark.extra_info["pairs_per_second"] = rate
        MAXSIM_RESULTS[key] = (contender.label, rate)
