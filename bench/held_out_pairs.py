"""Writes make demo's held-out retrieval pairs (examples/retrieval_task.py: RetrievalTask(seed=0),
split(200, seed=2), as examples/demo.py and tests/test_training_learns.py draw them) for
bench/fp8_accuracy.c: the 200 queries, then their 200 documents, a line each."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from demo import HELD_OUT  # noqa: E402
from retrieval_task import RetrievalTask  # noqa: E402

if __name__ == "__main__":
    split = RetrievalTask(seed=0).split(HELD_OUT, seed=2)
    lines = list(split.queries) + list(split.documents)
    assert not any("\n" in line for line in lines)
    with open(sys.argv[1], "w", encoding="utf-8") as out:
        out.write("".join(line + "\n" for line in lines))
