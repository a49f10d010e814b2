"""Search uform embeddings with USearch (PyPI `usearch`) in F32, BF16, I8 and B1.

    python3 examples/usearch_search.py [MODEL]       (default: c/build/demo.safetensors,
                                                       written by `make demo`)

The corpus is the demo's 200 held-out documents (examples/retrieval_task.py) among 10,000
training documents as distractors; the queries are the held-out queries. uform writes each
output scalar straight into its arena and USearch indexes it as it is:

  F32   float32 rows                       Index(metric="cos", dtype="f32")
  BF16  uint16 bits (numpy has no bfloat16); widened exactly to float32 by a 16-bit shift
        for USearch, which stores them as BF16 again: Index(metric="cos", dtype="bf16")
  I8    int8 rows, round(127 x)            Index(metric="cos", dtype="i8")
  B1    sign bits, numpy.packbits order    Index(ndim=bits, metric="hamming", dtype="b1")

For each it prints the recall@10 of the approximate index against exact search in the same
space (what an index can be asked to reproduce: the exact top 10 by that scalar's metric;
a result counts when its distance is within the exact 10th's, so ties count right) and the
held-out recall@1 of the task itself (a query's own document first).
"""
from __future__ import annotations

import os
import sys
from typing import Dict

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import uform  # noqa: E402
from retrieval_task import RetrievalTask  # noqa: E402

K = 10
DISTRACTORS = 10_000
HELD_OUT = 200


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    """uform's BF16 rows (uint16 bits) as float32, exactly: BF16 is FP32's top half."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def exact_distances(scalar: uform.Scalar, queries: np.ndarray, corpus: np.ndarray) -> np.ndarray:
    """[queries, corpus] distances in the metric the scalar's index uses."""
    if scalar == uform.Scalar.B1:
        q = np.unpackbits(queries, axis=1).astype(np.int32)
        c = np.unpackbits(corpus, axis=1).astype(np.int32)
        return q.sum(1)[:, None] + c.sum(1)[None, :] - 2 * (q @ c.T)    # Hamming
    q, c = queries.astype(np.float64), corpus.astype(np.float64)
    q /= np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-30)
    c /= np.maximum(np.linalg.norm(c, axis=1, keepdims=True), 1e-30)
    return 1.0 - q @ c.T                                                   # cosine distance


def build_index(scalar: uform.Scalar, dimensions: int, corpus: np.ndarray):
    from usearch.index import Index
    if scalar == uform.Scalar.F32:
        index, vectors = Index(ndim=dimensions, metric="cos", dtype="f32"), corpus
    elif scalar == uform.Scalar.BF16:
        index, vectors = Index(ndim=dimensions, metric="cos", dtype="bf16"), query_vectors(scalar, corpus)
    elif scalar == uform.Scalar.I8:
        index, vectors = Index(ndim=dimensions, metric="cos", dtype="i8"), corpus
    else:
        index, vectors = Index(ndim=8 * corpus.shape[1], metric="hamming", dtype="b1"), corpus
    index.add(np.arange(len(corpus), dtype=np.uint64), vectors)
    return index


def query_vectors(scalar: uform.Scalar, rows: np.ndarray) -> np.ndarray:
    """Rows as USearch takes them: BF16 bits widened to float32, the others as they are."""
    return bf16_bits_to_f32(rows) if scalar == uform.Scalar.BF16 else rows


def evaluate(model_path: str, *, distractors: int = DISTRACTORS, held_out: int = HELD_OUT,
             verbose: bool = True) -> Dict[str, Dict[str, float]]:
    """{scalar name: {"recall_vs_exact": .., "task_recall_at_1": .., "bytes": ..}}."""
    task = RetrievalTask(seed=0)
    test = task.split(held_out, seed=2)
    train = task.split(distractors, seed=1, exclude=test, distinct=False)
    corpus_texts = test.documents + train.documents          # held-out document i is row i
    model = uform.Model.load_ram(model_path)
    dimensions = model.describe().dimensions
    arena = uform.Arena()
    results: Dict[str, Dict[str, float]] = {}
    for scalar in (uform.Scalar.F32, uform.Scalar.BF16, uform.Scalar.I8, uform.Scalar.B1):
        corpus = np.array(model.text_encode(corpus_texts, arena, outputs_scalar=scalar).embeddings)
        queries = np.array(model.text_encode(test.queries, arena, outputs_scalar=scalar).embeddings)
        index = build_index(scalar, dimensions, corpus)
        found = index.search(query_vectors(scalar, queries), K).keys.astype(np.int64)
        distances = exact_distances(scalar, query_vectors(scalar, queries), query_vectors(scalar, corpus))
        tenth = np.sort(distances, axis=1)[:, K - 1]
        within = np.take_along_axis(distances, found, axis=1) <= tenth[:, None] + 1e-6
        exact_first = np.argmin(distances, axis=1)
        results[scalar.name] = {
            "recall_vs_exact": float(within.mean()),
            "task_recall_at_1": float(np.mean(found[:, 0] == np.arange(held_out))),
            "exact_task_recall_at_1": float(np.mean(exact_first == np.arange(held_out))),
            "bytes": float(corpus.shape[1] * corpus.dtype.itemsize),
        }
        if verbose:
            r = results[scalar.name]
            print(f"  {scalar.name:>4}: {int(r['bytes']):4d} bytes per vector, recall@{K} against exact "
                  f"search {r['recall_vs_exact']:.3f}; held-out recall@1 {r['task_recall_at_1']:.3f} "
                  f"(exact {r['exact_task_recall_at_1']:.3f})")
    return results


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "c", "build", "demo.safetensors")
    if not os.path.exists(path):
        sys.exit(f"{path} does not exist: run `make demo` first, or pass a model")
    print(f"USearch over {DISTRACTORS + HELD_OUT} documents ({HELD_OUT} held out, the rest distractors), "
          f"{HELD_OUT} queries, model {os.path.relpath(path, ROOT)}:")
    evaluate(path)


if __name__ == "__main__":
    main()
