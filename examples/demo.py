"""make demo: load a checkpoint, embed texts on the CPU, search them, and time it.

No trained weights ship with uform yet (training lands with the CPU trainer), so
the demo writes a random checkpoint: similarities reflect shared bytes and
word order, not meaning. Everything else is the real path: safetensors
parsing, packing for this CPU's class, batched encoding, output scalars.
"""
import os
import sys
import time

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import uform  # noqa: E402
from reference.checkpoint import write_random_checkpoint  # noqa: E402


def bar(done: int, total: int) -> None:
    width = 30
    filled = width * done // max(total, 1)
    print(f"\r  encoding [{'#' * filled}{'.' * (width - filled)}] {done}/{total}", end="", flush=True)
    if done == total:
        print()


def main() -> None:
    path = os.path.join(ROOT, "c", "build", "demo.safetensors")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_random_checkpoint(path, depth=4, hidden=256, dimensions=256, context=512, token_width=64, seed=7)
    model = uform.Model.load_ram(path)
    print("model:", model.describe())

    arena = uform.Arena()
    corpus = [
        "The quick brown fox jumps over the lazy dog.",
        "A quick brown fox leapt over a lazy dog!",
        "Stock markets fell sharply on Tuesday.",
        "Markets dropped sharply on Tuesday, stocks fell.",
        "Привет, мир: многобайтовый UTF-8 текст.",
        "素早い茶色の狐が怠け者の犬を飛び越える。",
    ]
    encoded = model.text_encode(corpus, arena)
    vectors = np.array(encoded.embeddings)  # copy: the arena is reused below
    print("\nnearest neighbour of each text (cosine; random weights, so byte overlap):")
    scores = vectors @ vectors.T
    np.fill_diagonal(scores, -np.inf)
    for i, text in enumerate(corpus):
        j = int(np.argmax(scores[i]))
        print(f"  {text[:36]:<38} -> {corpus[j][:36]:<38} {scores[i, j]:+.3f}")

    rng = np.random.default_rng(0)
    words = ["vector", "search", "encoder", "image", "audio", "video", "text", "model", "fast",
             "small", "byte", "token", "cosine", "query", "document", "memory"]
    batch = [" ".join(rng.choice(words, size=rng.integers(8, 48))) for _ in range(2000)]
    stats = uform.TextEncodeStats()
    started = time.perf_counter()
    model.text_encode(batch, arena, progress=bar, progress_steps=20, stats=stats)
    seconds = time.perf_counter() - started
    print(f"{stats.items} texts, {stats.tokens} tokens in {seconds:.2f} s: "
          f"{stats.items / seconds:.0f} texts/s on {model.describe().cpu_class.name}")

    for scalar in (uform.Scalar.F32, uform.Scalar.BF16, uform.Scalar.I8, uform.Scalar.B1):
        out = model.text_encode(batch[:100], arena, outputs_scalar=scalar)
        print(f"  {scalar.name:>4}: {out.embeddings.nbytes // 100:5d} bytes per embedding")
    out = model.text_encode(corpus[:2], arena, outputs=uform.Outputs.EMBEDDINGS | uform.Outputs.TOKENS)
    print(f"token vectors: {out.tokens.shape[0]} rows of {out.tokens.shape[1]}, "
          f"offsets {out.tokens.offsets.tolist()}")


if __name__ == "__main__":
    main()
