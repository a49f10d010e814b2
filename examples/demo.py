"""make demo: train a tiny retrieval model on the CPU, save it, load it back and search with it.

The task (examples/retrieval_task.py) is synthetic: documents describe made-up people (a
name, a town, a trade, a food, a pet, every word of random syllables), and each query names
three of a person's attributes in another wording. The held-out people have attribute
combinations no training document has, so recall on them measures reading, not memory.

The run: a 1-block, 64-wide encoder (about 70 thousand parameters) trained with the
contrastive objective for 3000 steps of 32 (query, document) pairs; held-out recall@1 over
200 documents before (the save of step 0) and after, and with the weights quantized to E4M3
at load; a few searches; encoding throughput and the sizes of the output scalars. About a
minute on two cores.
"""
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import uform  # noqa: E402
from retrieval_task import RetrievalTask, batches, recall_at_1  # noqa: E402

TEXT = uform.Modality.TEXT

# The run, as tests/test_training_learns.py trains it.
DEPTH, HIDDEN, COLUMNS = 1, 64, 128
PAIRS, NEIGHBOURS, STEPS = 32, 3, 3000
LEARNING_RATE, WARMUP = 5e-4, 300
INVERSE_TEMPERATURE = 20.0
HELD_OUT, TRAIN_PEOPLE = 200, 60_000


def train_bar(step: int, steps: int, loss: float, rate: float, seconds: float) -> None:
    width = 30
    filled = width * step // steps
    print(f"\r  training [{'#' * filled}{'.' * (width - filled)}] step {step:>{len(str(steps))}}/{steps}"
          f"  loss {loss:6.3f}  lr {rate:.2e}  {seconds:5.1f} s", end="", flush=True)
    if step == steps:
        print()


def encode(model: uform.Model, texts, arena: uform.Arena) -> np.ndarray:
    return np.array(model.text_encode(texts, arena).embeddings)  # a copy: the arena is reused


def main() -> None:
    build = os.path.join(ROOT, "c", "build")
    os.makedirs(build, exist_ok=True)
    start_path = os.path.join(build, "demo-step0.safetensors")
    path = os.path.join(build, "demo.safetensors")

    task = RetrievalTask(seed=0)
    test = task.split(HELD_OUT, seed=2)
    train = task.split(TRAIN_PEOPLE, seed=1, exclude=test, distinct=False)
    print(f"task: {len(train)} training pairs, {len(test)} held-out pairs "
          f"(people with attribute combinations no training document has); for example")
    for query, document in zip(train.queries[:3], train.documents[:3]):
        print(f"  {query!r:<46} -> {document!r}")

    print(f"\nmodel: depth {DEPTH}, hidden {HIDDEN}, rows of {COLUMNS} bytes; CONTRASTIVE (BALANCED), "
          f"{PAIRS} pairs a step, {STEPS} steps, learning rate {LEARNING_RATE:g} "
          f"(warmup {WARMUP}, cosine to {LEARNING_RATE / 10:g})")
    trainer = uform.Trainer.init_ram(
        uform.Executor.for_ram(2), depth=DEPTH, hidden=HIDDEN, objective=uform.Objective.CONTRASTIVE,
        contrastive=uform.Contrastive(pair_loss=uform.PairLossForm.BALANCED,
                                      inverse_temperature=INVERSE_TEMPERATURE),
        batch=uform.BatchShape(max_rows_per_device=PAIRS + 4, max_columns_per_row=COLUMNS),
        schedule=uform.Schedule(learning_rate=LEARNING_RATE, warmup_steps=WARMUP, steps=STEPS), seed=0)
    trainer.save(start_path)

    stats = uform.TrainerStepStats()
    recent = []
    skipped = 0
    started = time.perf_counter()
    stream = batches(train, PAIRS, seed=0, neighbours=NEIGHBOURS)
    for step in range(1, STEPS + 1):
        texts, bags = next(stream)
        trainer.step([TEXT] * len(texts), texts, bags=bags, stats=stats)
        skipped += stats.dropped + stats.truncated
        recent = (recent + [stats.loss])[-50:]
        if step % 10 == 0 or step == STEPS:
            train_bar(step, STEPS, float(np.mean(recent)), stats.learning_rate, time.perf_counter() - started)
    seconds = time.perf_counter() - started
    print(f"  {STEPS} steps in {seconds:.1f} s ({STEPS * 2 * PAIRS / seconds:.0f} texts/s trained)"
          + (f"; {skipped} items dropped or cut" if skipped else ""))
    trainer.save(path)

    model = uform.Model.load_ram(path)
    d = model.describe()
    print(f"\nsaved {os.path.relpath(path, ROOT)} ({os.path.getsize(path) // 1024} KiB with the optimizer "
          f"state) and loaded it back: {d.dimensions} dimensions, context {d.context}, "
          f"{d.quantization.name} weights, {d.memory_usage // 1024} KiB in memory, {d.cpu_class.name} kernels")

    arena = uform.Arena()
    queries, documents = encode(model, test.queries, arena), encode(model, test.documents, arena)
    scores = queries @ documents.T
    print(f"\nthe first six held-out queries, each searched over the {len(test)} held-out documents (cosine):")
    for i in range(6):
        j = int(np.argmax(scores[i]))
        mark = "ok   " if i == j else "wrong"
        print(f"  {mark} {test.queries[i]!r:<46} -> {scores[i, j]:.3f} {test.documents[j]!r}")

    start = uform.Model.load_ram(start_path)
    before = recall_at_1(encode(start, test.queries, arena), encode(start, test.documents, arena))
    after = recall_at_1(queries, documents)
    print(f"\nheld-out recall@1: {before:.3f} before training, {after:.3f} after (chance {1 / len(test):.3f})")

    # The same checkpoint with its block matrices quantized to E4M3 at load (docs/architecture.md).
    quantized = uform.Model.load_ram(path, quantization=uform.Scalar.E4M3)
    q_queries, q_documents = encode(quantized, test.queries, arena), encode(quantized, test.documents, arena)
    cosines = np.sum(q_queries * queries, axis=1)
    print(f"E4M3 weights: recall@1 {recall_at_1(q_queries, q_documents):.3f} (BF16 {after:.3f}), "
          f"{quantized.describe().memory_usage // 1024} KiB in memory (BF16 {d.memory_usage // 1024}), "
          f"query embeddings' cosine to BF16's {cosines.min():.4f} at least")

    corpus = train.documents[:20_000]
    stats = uform.TextEncodeStats()
    model.text_encode(corpus[:1000], arena)  # warm up the pool and the arena
    started = time.perf_counter()
    model.text_encode(corpus, arena, stats=stats)
    seconds = time.perf_counter() - started
    print(f"\nencoding: {stats.items} documents, {stats.tokens} bytes in {seconds:.2f} s: "
          f"{stats.items / seconds:,.0f} texts/s on {model.describe().cpu_class.name}")
    for scalar in (uform.Scalar.F32, uform.Scalar.BF16, uform.Scalar.E4M3, uform.Scalar.I8, uform.Scalar.B1):
        out = model.text_encode(corpus[:100], arena, outputs_scalar=scalar)
        print(f"  {scalar.name:>4}: {out.embeddings.nbytes // 100:4d} bytes per embedding")


if __name__ == "__main__":
    main()
