"""text_choose against PyTorch on the same weights: pytest-benchmark, one group per workload.

    python3 -m pytest -q bench/test_choose_bench.py --benchmark-columns=min,mean,rounds
    UFORM_BENCH_QUICK=1 python3 -m pytest -q bench/test_choose_bench.py   (depth 2, hidden 128)

Both sides run on the same number of threads. The workloads are choose_harness.WORKLOADS
(batch 1: SINGLE_TEXTS texts one call each; batch 256, or 32 quick: one call), each text
choosing among four shared bytes. Texts per second (best round) go to
extra_info["texts_per_second"] and the summary at the end; bench/report.py runs the same
comparison without pytest and writes docs/benchmarks.md.
"""
import numpy as np
import pytest
import torch

import choose_harness
import harness
from conftest import CHOOSE_RESULTS, THREADS
from reference import ReferenceModel
from reference.batched import BatchedTorchModel

KEYS = ("uform-auto", "uform-skylake", "torch-bf16", "torch-fp32")


@pytest.fixture(scope="session")
def choose_contenders(tmp_path_factory):
    path = choose_harness.write_checkpoint(str(tmp_path_factory.mktemp("bench-choose")))
    return {c.key: c for c in choose_harness.contenders(path, THREADS)}


def test_batched_torch_choose_matches_reference(tmp_path):
    """The PyTorch contender computes the reference's text_choose. FP32: within 1e-4 of
    float64 (its probabilities err like the FP32 classes', ~1e-5: tests/test_text_choose.py).
    BF16 autocast rounds GEMM inputs like SAPPHIRE: 5e-2 (logits of tens, off by ~0.2)."""
    path = str(tmp_path / "small.safetensors")
    harness.write_random_checkpoint(path, depth=2, hidden=128, dimensions=16, context=96, seed=5,
                                    byte_head=True, choice_temperature_groups=3)
    rng = np.random.default_rng(2)
    texts = [bytes(rng.integers(0, 256, size=int(rng.integers(1, 140)), dtype=np.uint8))
             for _ in range(20)] + [b"", "héllo wörld".encode(), b"x"]
    choices = [bytes(rng.permutation(256)[:int(rng.integers(1, 257))].astype(np.uint8)) for _ in texts]
    groups = [i % 3 for i in range(len(texts))]
    reference = ReferenceModel.load(path)
    with torch.no_grad():
        expected = np.concatenate([reference.text_choose(t, c, g).numpy()
                                   for t, c, g in zip(texts, choices, groups)])
    model = BatchedTorchModel.from_checkpoint(path, torch.float32, max_batch=8)  # several mini-batches
    fp32, offsets = model.choose(texts, choices, groups)
    assert list(offsets) == list(np.cumsum([0] + [len(c) for c in choices]))
    np.testing.assert_allclose(fp32.numpy(), expected, atol=1e-4, rtol=0)
    bf16, _ = model.choose(texts, choices, groups, autocast=True)
    np.testing.assert_allclose(bf16.numpy(), expected, atol=5e-2, rtol=0)


def test_contenders_agree(choose_contenders):
    """On the benchmark's own model every contender answers torch FP32's probabilities:
    1e-4 for FP32 ones; BF16 ones (SAPPHIRE, autocast) move logits of tens by a few
    tenths, so 0.15 absolute, still far below the O(1) gaps of a wrong computation."""
    texts = harness.make_texts(4, seed=99)
    groups = [0, 1, 2, 3]
    baseline = choose_contenders["torch-fp32"].choose(texts, groups).copy()
    assert baseline.shape == (4 * len(choose_harness.CHOICES),)
    for contender in choose_contenders.values():
        got = contender.choose(texts, groups)
        bf16 = contender.key in ("torch-bf16",) or contender.uform_class in (
            "SAPPHIRE", "AMX", "NEON_BF16", "SVE_BF16")
        assert np.abs(got - baseline).max() <= (0.15 if bf16 else 1e-4), contender.label


@pytest.mark.parametrize("workload", choose_harness.WORKLOADS, ids=lambda w: w.key)
@pytest.mark.parametrize("key", KEYS)
def test_text_choose(benchmark, choose_contenders, key, workload):
    if key not in choose_contenders:
        pytest.skip(f"{key}: not available on this machine")
    contender = choose_contenders[key]
    texts, groups = choose_harness.texts_for(workload)
    run = choose_harness.round_function(contender, workload, texts, groups)
    choose_harness.warm_up(contender, workload, texts, groups)
    benchmark.group = f"text_choose {workload.title} (d{harness.SHAPE['depth']} h{harness.SHAPE['hidden']})"
    benchmark.extra_info.update(label=contender.label, workload=workload.key,
                                batch=1 if workload.per_call else len(texts), texts=len(texts),
                                choices=len(choose_harness.CHOICES), threads=THREADS,
                                depth=harness.SHAPE["depth"], hidden=harness.SHAPE["hidden"])
    result = benchmark.pedantic(run, rounds=choose_harness.rounds_for(workload), iterations=1, warmup_rounds=0)
    assert np.asarray(result).shape == (len(texts) * len(choose_harness.CHOICES),)
    if benchmark.stats is not None:    # None under --benchmark-disable
        rate = len(texts) / benchmark.stats.stats.min
        benchmark.extra_info["texts_per_second"] = rate
        CHOOSE_RESULTS[(key, workload.key)] = (contender.label, rate)
