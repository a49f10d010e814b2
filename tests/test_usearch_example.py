"""examples/usearch_search.py: uform embeddings indexed by USearch in F32, BF16, I8 and B1.

A model of the demo's configuration trained for a few hundred steps (enough that the task
is far above chance, not the demo's full run) indexes 3,200 documents. Bounds: USearch's
HNSW at its default connectivity finds almost every exact top-10 result on a few thousand
vectors (recall near 0.99 in its own benchmarks); 0.95 against exact search in the same
space leaves room for graph randomness. B1 vectors of 64 bits have many equal Hamming
distances: ties count as found (the example compares distances, not ids), and 0.9 allows
the coarser graph. The task's recall@1 through each index must stay close to exact F32
search: within 0.05 for F32, BF16 and I8 (rounding moves few rankings), and above chance
by far for B1 (64 sign bits keep most of the ranking)."""
import os
import sys

import numpy as np
import pytest

import uform

usearch = pytest.importorskip("usearch", reason="usearch is not installed (pip install usearch)")

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "examples"))

import demo  # noqa: E402
import usearch_search  # noqa: E402
from retrieval_task import RetrievalTask, batches  # noqa: E402

STEPS = 400


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    task = RetrievalTask(seed=0)
    test = task.split(usearch_search.HELD_OUT, seed=2)
    train = task.split(20_000, seed=1, exclude=test, distinct=False)
    trainer = uform.Trainer.init_ram(
        uform.Executor.for_ram(2), depth=demo.DEPTH, hidden=demo.HIDDEN, objective=uform.Objective.CONTRASTIVE,
        contrastive=uform.Contrastive(pair_loss=uform.PairLossForm.BALANCED,
                                      inverse_temperature=demo.INVERSE_TEMPERATURE),
        batch=uform.BatchShape(max_rows_per_device=demo.PAIRS + 4, max_columns_per_row=demo.COLUMNS),
        schedule=uform.Schedule(learning_rate=1e-3, warmup_steps=50, steps=STEPS), seed=0)
    stream = batches(train, demo.PAIRS, seed=0, neighbours=demo.NEIGHBOURS)
    for _ in range(STEPS):
        texts, bags = next(stream)
        trainer.step([uform.Modality.TEXT] * len(texts), texts, bags=bags)
    path = tmp_path_factory.mktemp("usearch") / "model.safetensors"
    trainer.save(path)
    return str(path)


def test_every_scalar_indexes_and_searches(trained):
    results = usearch_search.evaluate(trained, distractors=3000, verbose=False)
    assert set(results) == {"F32", "BF16", "I8", "B1"}
    exact = results["F32"]["exact_task_recall_at_1"]
    assert exact > 0.05, f"the model did not learn the task: exact recall@1 {exact} (chance 1/3200)"
    for name in ("F32", "BF16", "I8"):
        assert results[name]["recall_vs_exact"] >= 0.95, (name, results[name])
        assert results[name]["task_recall_at_1"] >= exact - 0.05, (name, results[name])
    assert results["B1"]["recall_vs_exact"] >= 0.9, results["B1"]
    assert results["B1"]["task_recall_at_1"] > 10 / usearch_search.HELD_OUT, results["B1"]
    dimensions = uform.Model.load_ram(trained).describe().dimensions
    assert results["F32"]["bytes"] == 4 * dimensions and results["BF16"]["bytes"] == 2 * dimensions
    assert results["I8"]["bytes"] == dimensions and results["B1"]["bytes"] == (dimensions + 7) // 8


def test_bf16_bits_widen_exactly():
    values = np.array([1.0, -2.5, 3.140625, 0.0], np.float32)
    bits = (values.view(np.uint32) >> 16).astype(np.uint16)
    assert np.array_equal(usearch_search.bf16_bits_to_f32(bits), values)
