"""text_encode on a GPU: uform's VRAM model against PyTorch on the same GPU and weights.

Run by `make test-gpu` after the GPU tests; on a machine without a GPU (or a build without
the CUDA backend) it prints why it skips and exits 0. The issue's shape: depth 12, hidden
768, texts of 256 to 1024 bytes (packed rows of up to 1024 tokens). Both sides encode the
same texts in one run; PyTorch is BatchedTorchModel (texts sorted by length, padded
mini-batches, F.scaled_dot_product_attention with a key-padding mask) under BF16 autocast on
CUDA, when this Python's torch has CUDA; otherwise its column says why it is missing.

Also the same model loaded with E4M3 weights (its cosine to the BF16 model's embeddings,
and its speed: the E4M3 issue's evidence), one text per call for both, and, with more than
one GPU, the model on every GPU (Model.load_vram(devices=[0, 1, ...])).

Prints a table (texts/s, tokens/s, ratio, agreement of the embeddings) and, with --output,
writes it as a Markdown page (docs/benchmarks-gpu.md), keeping the hand-written notes section.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
for _path in (os.path.join(ROOT, "tests"), ROOT, BENCH):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import numpy as np  # noqa: E402

import uform  # noqa: E402
from pages import kept_section, make_texts  # noqa: E402

try:
    from reference.checkpoint import write_random_checkpoint  # noqa: E402
except ImportError:
    # A GPU machine without torch: reference/__init__.py imports the torch model, but
    # reference/checkpoint.py itself needs only numpy; load it under a bare package.
    import types
    _package = types.ModuleType("reference")
    _package.__path__ = [os.path.join(ROOT, "tests", "reference")]
    sys.modules["reference"] = _package
    from reference.checkpoint import write_random_checkpoint  # noqa: E402

SHAPE = dict(depth=12, hidden=768, dimensions=768, context=1024)
TEXTS, TEXT_BYTES, ROUNDS = 1024, (256, 1024), 5
SINGLE_TEXTS = 64   # one text per call
NOTES = "### Notes (written by hand, kept when the page is regenerated)"
# Agreement: both sides round products' operands to BF16 and sum in FP32, in different
# orders and with different attention kernels; through 12 blocks that leaves cosines of
# the same text's embeddings above 0.99 (a broken kernel gives ~0).
COSINE_FLOOR = 0.99


def timed(encode, texts) -> tuple[float, np.ndarray]:
    """Best seconds of ROUNDS rounds after one untimed round, and the last embeddings."""
    result = encode(texts)
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.perf_counter()
        result = encode(texts)
        best = min(best, time.perf_counter() - start)
    return best, np.array(result, dtype=np.float32, copy=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", help="write the Markdown page here")
    arguments = parser.parse_args()
    capabilities = uform.capabilities()
    if not capabilities.gpu_backend or capabilities.gpus == 0:
        why = "this build has no CUDA backend" if not capabilities.gpu_backend else "no GPU found"
        print(f"skip gpu_report: {why}")
        return 0

    directory = tempfile.mkdtemp(prefix="uform-gpu-bench-")
    path = os.path.join(directory, "bench-d12-h768.safetensors")
    write_random_checkpoint(path, seed=0, **SHAPE)
    texts = make_texts(TEXTS, seed=7, text_bytes=TEXT_BYTES)
    tokens = sum(min(len(t), SHAPE["context"]) for t in texts)

    rows = []
    model = uform.Model.load_vram(path)
    gpu_class = model.describe().gpu_class
    arena = uform.Arena()
    seconds, ours = timed(lambda batch: model.text_encode(batch, arena).embeddings, texts)
    rows.append(("uform VRAM (BF16 products, FP32 sums)", seconds, ours))
    # E4M3 weights (the E4M3 issue's speed evidence): FP8 products on Ada and later,
    # each activation row quantized first (gemm_fp8.cu); decoded to BF16 on Ampere
    quantized = uform.Model.load_vram(path, quantization=uform.Scalar.E4M3)
    seconds, e4m3 = timed(lambda batch: quantized.text_encode(batch, arena).embeddings, texts)
    rows.append(("uform VRAM, E4M3 weights", seconds, e4m3))
    # a copy on every GPU (docs/gpu.md, "A model on several GPUs"): batches alternate
    # between the GPUs, so the texts/s should approach N times one GPU's
    if capabilities.gpus > 1:
        every = uform.Model.load_vram(path, devices=list(range(capabilities.gpus)))
        seconds, spread = timed(lambda batch: every.text_encode(batch, arena).embeddings, texts)
        rows.append((f"uform VRAM on {capabilities.gpus} GPUs (a copy on each)", seconds, spread))
        del every
    # one text per call: the latency case, BF16 and E4M3 weights
    singles = texts[:SINGLE_TEXTS]
    single_rows = []
    for label, receiver in (("BF16 weights", model), ("E4M3 weights", quantized)):
        seconds, _ = timed(lambda batch, m=receiver: [m.text_encode([text], arena).embeddings[0] for text in batch],
                           singles)
        single_rows.append((label, seconds))

    torch_note = ""
    name = os.environ.get("UFORM_GPU_NAME", f"GPU class {getattr(gpu_class, 'name', gpu_class)}")
    try:
        import torch
        from reference.batched import BatchedTorchModel
        if not torch.cuda.is_available():
            torch_note = f"torch {torch.__version__} here has no CUDA"
        else:
            name = os.environ.get("UFORM_GPU_NAME", torch.cuda.get_device_name(0))
            reference = BatchedTorchModel.from_checkpoint(path, torch.float32, max_batch=64, device="cuda")

            def encode_torch(batch):
                embeddings = reference.encode(batch, autocast=True)
                torch.cuda.synchronize()
                return embeddings.numpy()
            seconds, theirs = timed(encode_torch, texts)
            rows.append((f"torch {torch.__version__} BF16 autocast + SDPA (padded)", seconds, theirs))
    except ImportError as error:
        torch_note = f"torch is not installed ({error})"

    lines = [f"GPU: {name}; depth {SHAPE['depth']}, hidden {SHAPE['hidden']}, {TEXTS} texts of "
             f"{TEXT_BYTES[0]}-{TEXT_BYTES[1]} bytes ({tokens} tokens), best of {ROUNDS} rounds", "",
             "| contender | texts/s | tokens/s | vs torch | cosine to uform (lowest) |",
             "| --- | ---: | ---: | ---: | ---: |"]
    torch_seconds = next((seconds for label, seconds, _ in rows if label.startswith("torch")), None)
    failed = False
    for label, seconds, embeddings in rows:
        cosines = np.sum(embeddings * ours, axis=1)
        lowest = float(np.min(cosines))
        failed |= lowest < COSINE_FLOOR
        ratio = f"{torch_seconds / seconds:.2f}x" if torch_seconds else "-"
        lines.append(f"| {label} | {TEXTS / seconds:.1f} | {tokens / seconds:.0f} | {ratio} | {lowest:.4f} |")
    if torch_note:
        lines.append(f"| torch | - | - | - | {torch_note} |")
    lines += ["", f"One text per call ({SINGLE_TEXTS} texts, best of {ROUNDS} rounds):", "",
              "| uform VRAM | texts/s | vs BF16 weights |", "| --- | ---: | ---: |"]
    for label, seconds in single_rows:
        lines.append(f"| {label} | {SINGLE_TEXTS / seconds:.1f} | {single_rows[0][1] / seconds:.2f}x |")
    table = "\n".join(lines)
    print(table)
    if arguments.output:
        notes = kept_section(arguments.output, NOTES)
        with open(arguments.output, "w", encoding="utf-8") as stream:
            stream.write("# GPU benchmarks (written by bench/gpu_report.py)\n\n" + table + "\n\n" +
                         (notes or NOTES + "\n"))
    if failed:
        print(f"FAIL: embeddings disagree (a cosine below {COSINE_FLOOR})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
