"""One training step on a GPU: uform's Trainer.init_vram against PyTorch on the same GPU and weights.

Run by `make test-gpu` after bench/gpu_report.py; on a machine without a GPU (or a build
without the CUDA backend) it prints why it skips and exits 0. Issue 11's workload: depth 12,
hidden 768, the JOINT objective (masked text + BALANCED contrastive over bags), rows of 1024
tokens: ROWS texts of exactly 1024 bytes, one per row, so neither side pads. Contenders, from
the same FP32 initial weights (the uform trainer's initialisation, read back from its save)
and the same masks (tests/reference/batched_training.py draws the trainer's):

* uform `Trainer.init_vram(Executor.for_vram())`: BF16 products, FP32 sums and masters;
* PyTorch eager under BF16 autocast on the same GPU (F.scaled_dot_product_attention with no
  mask, so its flash kernel; AdamW's default multi-tensor path): the fastest mode that needs
  no compilation (torch.compile's minutes would not fit a GPU session's time).

Reports seconds per step (best of the timed steps), tokens/s, and model FLOP utilisation:
training_flops' useful FLOPs of a step (no padding; the backward counted as twice the
forward) per second, over the GPU's dense BF16 peak (--peak-tflops; 989 for an H100/H200
SXM, NVIDIA's figure), and the first step's losses side by side (same weights and masks,
BF16 products on both sides: they agree to about 1e-2 relative).

    python3 bench/gpu_train_report.py [--output docs/benchmarks-gpu.md]
    UFORM_BENCH_QUICK=1 python3 bench/gpu_train_report.py --device cpu
        # the script itself at a tiny shape on the CPU trainer and torch on the CPU (no GPU
        # needed; tests/test_bench_scripts.py runs it)

With --output the table is appended to that page's "## Training" section (written after
gpu_report.py's table, which opens the page).
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

import uform  # noqa: E402
from pages import make_texts  # noqa: E402

QUICK = bool(os.environ.get("UFORM_BENCH_QUICK"))
SHAPE = dict(depth=2, hidden=64) if QUICK else dict(depth=12, hidden=768)
ROWS = 4 if QUICK else 32
COLUMNS = 64 if QUICK else 1024
WARMUP, TIMED = (1, 2) if QUICK else (2, 5)
SEED = 1
HEADING = "## Training: one step on the GPU (bench/gpu_train_report.py)"
# Both sides round the products' operands to BF16 and sum in FP32, in different orders and
# kernels: the first step's losses (same weights and masks) agree to about 1e-2 relative;
# a broken kernel moves the masked-text loss by far more.
LOSS_AGREEMENT = 2e-2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", help="append the table to this Markdown page")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                        help="cpu: the script's smoke test on the CPU trainer")
    parser.add_argument("--peak-tflops", type=float, default=989.0,
                        help="the GPU's dense BF16 peak, TFLOP/s (H100/H200 SXM: 989)")
    arguments = parser.parse_args()
    on_gpu = arguments.device == "cuda"
    if on_gpu:
        capabilities = uform.capabilities()
        if not capabilities.gpu_backend or capabilities.gpus == 0:
            why = "this build has no CUDA backend" if not capabilities.gpu_backend else "no GPU found"
            print(f"skip gpu_train_report: {why}")
            return 0
    try:
        import torch
        from reference.batched_training import (BatchedTrainer, BatchedTrainingModel, batch_on,
                                                prepare_batch, training_flops)
    except ImportError as error:
        print(f"skip gpu_train_report: torch is not installed ({error})")
        return 0
    if on_gpu and not torch.cuda.is_available():
        print(f"skip gpu_train_report: torch {torch.__version__} here has no CUDA")
        return 0

    texts = make_texts(ROWS, seed=0, text_bytes=(COLUMNS, COLUMNS))
    bags = [i // 2 for i in range(ROWS)]
    modalities = [uform.Modality.TEXT] * ROWS
    batch = uform.BatchShape(max_rows_per_device=ROWS, max_columns_per_row=COLUMNS)
    executor = uform.Executor.for_vram() if on_gpu else uform.Executor.for_ram(os.cpu_count() or 1)
    start = uform.Trainer.init_vram if on_gpu else uform.Trainer.init_ram
    trainer = start(executor, objective=uform.Objective.JOINT, batch=batch, seed=SEED, **SHAPE)
    directory = tempfile.mkdtemp(prefix="uform-gpu-train-")
    path = os.path.join(directory, "initial.safetensors")
    trainer.save(path)                  # step 0: the FP32 masters torch starts from

    device = "cuda" if on_gpu else "cpu"
    model = BatchedTrainingModel.from_trainer_save(path).to(device)
    reference = BatchedTrainer(model, autocast=True)
    steps = WARMUP + TIMED
    batches = [batch_on(prepare_batch(texts, bags, seed=SEED, step=step, context=model.context), device)
               for step in range(1, steps + 1)]
    stats = uform.TrainerStepStats()

    def uform_step() -> float:
        trainer.step(modalities, texts, bags=bags, stats=stats)
        return stats.loss

    def torch_step() -> float:
        return reference.step(batches[reference.step_count]).loss   # .item(): waits for the GPU

    seconds = {"uform": [], "torch": []}
    losses = {"uform": [], "torch": []}
    for index in range(steps):
        for key, run in (("uform", uform_step), ("torch", torch_step)):
            began = time.perf_counter()
            losses[key].append(run())
            took = time.perf_counter() - began
            if index >= WARMUP:
                seconds[key].append(took)
            print(f"step {index + 1}{' (warm-up)' if index < WARMUP else ''} {key:<5} {took:8.4f} s  "
                  f"loss {losses[key][-1]:.6f}", flush=True)

    lengths = [min(len(t), model.context) for t in texts]
    selected = int(batches[0].selected.sum())
    flops = training_flops(model.depth, model.hidden, model.dimensions, lengths, selected)
    name = torch.cuda.get_device_name(0) if on_gpu else "CPU (smoke test)"
    lines = [HEADING, "",
             f"GPU: {name}; depth {model.depth}, hidden {model.hidden}, JOINT, {ROWS} rows of {COLUMNS} "
             f"tokens ({flops['tokens']} tokens, {flops['step'] / 1e12:.2f} TFLOP a step); best of {TIMED} "
             f"steps after {WARMUP}; MFU against {arguments.peak_tflops:g} TFLOP/s dense BF16", "",
             "| contender | s/step | tokens/s | MFU | vs torch | first step's loss |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    labels = {"uform": "uform Trainer.init_vram (BF16 products, FP32 sums)",
              "torch": f"torch {torch.__version__} eager, BF16 autocast, SDPA"}
    if not on_gpu:
        labels["uform"] = "uform Trainer.init_ram (FP32)"
    for key in ("uform", "torch"):
        best = min(seconds[key])
        mfu = flops["step"] / best / (arguments.peak_tflops * 1e12)
        lines.append(f"| {labels[key]} | {best:.4f} | {flops['tokens'] / best:.0f} | {100 * mfu:.1f}% | "
                     f"{min(seconds['torch']) / best:.2f}x | {losses[key][0]:.5f} |")
    gap = abs(losses["uform"][0] - losses["torch"][0]) / abs(losses["torch"][0])
    agree = gap <= LOSS_AGREEMENT
    lines.append("")
    lines.append(f"First step's losses differ by {gap:.2e} relative "
                 f"({'within' if agree else 'OUTSIDE'} {LOSS_AGREEMENT:g}).")
    table = "\n".join(lines)
    print(table)
    if arguments.output:
        try:
            with open(arguments.output, encoding="utf-8") as stream:
                page = stream.read()
        except FileNotFoundError:  # gpu_report.py did not get to write it
            page = "# GPU benchmarks\n"
        at = page.find(HEADING)
        if at >= 0:  # a previous run's section: replaced up to the next heading of its level
            end = page.find("\n## ", at + len(HEADING))
            page = page[:at] + (page[end + 1:] if end >= 0 else "")
        notes = page.find("### Notes")
        insert = notes if notes >= 0 else len(page)
        page = page[:insert].rstrip("\n") + "\n\n" + table + "\n\n" + page[insert:]
        with open(arguments.output, "w", encoding="utf-8") as stream:
            stream.write(page)
    if not agree:
        print(f"FAIL: the first step's losses disagree by more than {LOSS_AGREEMENT:g} relative")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
