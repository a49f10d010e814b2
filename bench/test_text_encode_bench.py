"""text_encode against PyTorch on the same weights: pytest-benchmark, one group per workload.

    python3 -m pytest -q bench --benchmark-only --benchmark-columns=min,mean,rounds
    UFORM_BENCH_QUICK=1 python3 -m pytest -q bench ...     (depth 2, hidden 128, batch 32)

Both sides run on the same number of threads (the cores this process may use). The
workloads are harness.WORKLOADS: batch1 encodes SINGLE_TEXTS different 64-512-byte texts
one call at a time, batch256 (batch32 quick) one call with that many, and query
QUERY_TEXTS different 8-64-byte texts one call at a time (short search queries). Texts
per second (best round) go to extra_info["texts_per_second"] and the summary at the end.
bench/report.py runs the same comparison without pytest and writes docs/benchmarks.md.
"""
import numpy as np
import pytest
import torch

import harness
from conftest import RESULTS, THREADS
from reference import ReferenceModel
from reference.batched import BatchedTorchModel

KEYS = ("uform-auto", "uform-skylake", "torch-bf16", "torch-fp32")


def test_batched_torch_matches_reference(tmp_path):
    """The PyTorch contender computes the reference's math: FP32 within 1e-4 of float64."""
    path = str(tmp_path / "small.safetensors")
    harness.write_random_checkpoint(path, depth=2, hidden=128, dimensions=48, context=96, seed=5)
    rng = np.random.default_rng(2)
    texts = [bytes(rng.integers(0, 256, size=int(rng.integers(1, 140)), dtype=np.uint8))
             for _ in range(24)] + [b"", "héllo wörld".encode(), b"x"]
    expected, _ = ReferenceModel.load(path).text_encode(texts)
    expected = expected.detach().numpy()
    model = BatchedTorchModel.from_checkpoint(path, torch.float32, max_batch=8)  # several mini-batches
    fp32 = model.encode(texts).numpy()
    np.testing.assert_allclose(fp32, expected, atol=1e-4, rtol=0)
    assert np.all(fp32[24] == 0), "an empty text embeds as zeros"
    bf16 = model.encode(texts, autocast=True).numpy()
    np.testing.assert_allclose(bf16, expected, atol=3e-2, rtol=0)


def test_contenders_agree(bench_contenders):
    """On the benchmark's own model, every contender gives the same embeddings (cosine)."""
    texts = harness.make_texts(4, seed=99)
    baseline = bench_contenders["torch-fp32"].encode(texts).copy()
    for contender in bench_contenders.values():
        cosine = (contender.encode(texts) * baseline).sum(axis=1)
        assert np.all(cosine > 0.99), (contender.label, cosine)


@pytest.mark.parametrize("workload", harness.WORKLOADS, ids=lambda w: w.key)
@pytest.mark.parametrize("key", KEYS)
def test_text_encode(benchmark, bench_contenders, key, workload):
    if key not in bench_contenders:
        pytest.skip(f"{key}: not available on this machine")
    contender = bench_contenders[key]
    texts = harness.texts_for(workload)
    run = harness.round_function(contender, workload, texts)
    harness.warm_up(contender, workload, texts)
    benchmark.group = f"text_encode {workload.title} (d{harness.SHAPE['depth']} h{harness.SHAPE['hidden']})"
    benchmark.extra_info.update(label=contender.label, workload=workload.key,
                                batch=1 if workload.per_call else len(texts), texts=len(texts),
                                text_bytes=list(workload.text_bytes), threads=THREADS,
                                depth=harness.SHAPE["depth"], hidden=harness.SHAPE["hidden"])
    result = benchmark.pedantic(run, rounds=harness.rounds_for(workload), iterations=1, warmup_rounds=0)
    assert np.asarray(result).shape == (len(texts), harness.SHAPE["dimensions"])
    if benchmark.stats is not None:    # None under --benchmark-disable
        best = benchmark.stats.stats.min
        rate = len(texts) / best
        benchmark.extra_info["texts_per_second"] = rate
        benchmark.extra_info["texts_per_second_mean"] = len(texts) / benchmark.stats.stats.mean
        RESULTS[(key, workload.key)] = (contender.label, rate)
