"""A GPU trainer learns as the CPU trainer does: 200 steps of the synthetic retrieval task of
examples/retrieval_task.py (the one tests/test_training_learns.py trains for 3000 steps on
CPUs), run side by side by Trainer.init_ram and Trainer.init_vram from the same seed on the
same batches; both checkpoints then evaluated the same way (Model.load_ram, held-out
recall@1 over 200 queries, chance 0.005).

The GPU computes its products and attention in BF16 (docs/gpu.md), the CPU trainer in FP32,
so the runs drift apart step by step; what must agree is what they learn. Checks: the loss
of each falls (the mean of the last 20 steps below 70% of the first 20's; on CPUs it falls
from 3.54 to 0.87), the GPU run's last 20 steps' mean loss within 10% of the CPU run's, and
its held-out recall@1 (0.54 on CPUs after these 200 steps, from 0.06 untrained) within 0.08
of the CPU run's: two models that drifted apart differ by the sampling noise of 200 queries
at least (a standard deviation of 0.035 at 0.5 for independent ones); both above the
untrained model's.

Run by `make test-gpu` (tests/gpu/); without a GPU it says why and exits 0. --cpu-only runs
the CPU half alone (what the thresholds were chosen from on a machine without a GPU).
"""
import argparse
import os
import sys
import tempfile
import time
from itertools import islice

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))

import uform  # noqa: E402
from retrieval_task import RetrievalTask, batches, recall_at_1  # noqa: E402

TEXT = uform.Modality.TEXT
HELD_OUT = 200
PAIRS = 32
NEIGHBOURS = 3
STEPS = 200


def make_trainer(executor, vram: bool) -> uform.Trainer:
    init = uform.Trainer.init_vram if vram else uform.Trainer.init_ram
    return init(
        executor, depth=1, hidden=64, objective=uform.Objective.CONTRASTIVE,
        contrastive=uform.Contrastive(pair_loss=uform.PairLossForm.BALANCED, inverse_temperature=20.0),
        batch=uform.BatchShape(max_rows_per_device=PAIRS + 4, max_columns_per_row=128),
        schedule=uform.Schedule(learning_rate=1e-3, warmup_steps=20, steps=STEPS), seed=0)


def held_out_recall(path, split) -> float:
    model = uform.Model.load_ram(path)
    arena = uform.Arena()
    queries = np.array(model.text_encode(split.queries, arena).embeddings)
    documents = np.array(model.text_encode(split.documents, arena).embeddings)
    return recall_at_1(queries, documents)


def train(trainer, train_split, directory: str, name: str):
    trainer.save(os.path.join(directory, f"{name}-0.safetensors"))
    stats = uform.TrainerStepStats()
    losses = []
    started = time.perf_counter()
    for texts, bags in islice(batches(train_split, PAIRS, seed=0, neighbours=NEIGHBOURS), STEPS):
        trainer.step([TEXT] * len(texts), texts, bags=bags, stats=stats)
        losses.append(stats.loss)
    seconds = time.perf_counter() - started
    path = os.path.join(directory, f"{name}-{STEPS}.safetensors")
    trainer.save(path)
    return losses, path, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-only", action="store_true", help="run the CPU trainer alone")
    arguments = parser.parse_args()
    gpu = None
    if not arguments.cpu_only:
        try:
            gpu = uform.Executor.for_vram([0])
        except (uform.UnsupportedError, uform.DeviceError) as error:
            print(f"skip learns_retrieval: {error}")
            return 0
    task = RetrievalTask(seed=0)
    test = task.split(HELD_OUT, seed=2)
    train_split = task.split(60_000, seed=1, exclude=test, distinct=False)
    runs = {}
    with tempfile.TemporaryDirectory() as directory:
        runs["CPU (init_ram, FP32)"] = train(make_trainer(uform.Executor.for_ram(os.cpu_count() or 1), False),
                                             train_split, directory, "ram")
        if gpu is not None:
            runs["GPU (init_vram, BF16)"] = train(make_trainer(gpu, True), train_split, directory, "vram")
        before = held_out_recall(os.path.join(directory, "ram-0.safetensors"), test)
        recalls = {name: held_out_recall(path, test) for name, (_, path, _) in runs.items()}

    print(f"learns_retrieval: {STEPS} steps of {PAIRS} pairs, tiny encoder (depth 1, hidden 64); "
          f"untrained held-out recall@1 {before:.3f} (chance {1 / HELD_OUT:.3f})\n")
    print("| trainer | first 20 steps' loss | last 20 steps' loss | held-out recall@1 | seconds |")
    print("|---|---:|---:|---:|---:|")
    for name, (losses, _, seconds) in runs.items():
        print(f"| {name} | {np.mean(losses[:20]):.4f} | {np.mean(losses[-20:]):.4f} | {recalls[name]:.3f} | "
              f"{seconds:.1f} |")
    failures = []
    for name, (losses, _, _) in runs.items():
        if not np.mean(losses[-20:]) < 0.7 * np.mean(losses[:20]):
            failures.append(f"{name}: the loss did not fall by 30%")
        if not recalls[name] > before:
            failures.append(f"{name}: held-out recall@1 {recalls[name]:.3f} not above the untrained {before:.3f}")
    if gpu is not None:
        (cpu_losses, _, _), (gpu_losses, _, _) = runs.values()
        cpu_recall, gpu_recall = recalls.values()
        drift = abs(np.mean(gpu_losses[-20:]) - np.mean(cpu_losses[-20:])) / np.mean(cpu_losses[-20:])
        if not drift <= 0.10:
            failures.append(f"the GPU run's last losses are {drift:.1%} from the CPU run's (at most 10%)")
        if not gpu_recall >= cpu_recall - 0.08:
            failures.append(f"GPU recall@1 {gpu_recall:.3f} more than 0.08 below the CPU run's {cpu_recall:.3f}")
    for failure in failures:
        print(f"FAIL: {failure}")
    print(f"\nlearns_retrieval: {'FAILED' if failures else 'ok'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
