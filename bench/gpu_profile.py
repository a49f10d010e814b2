"""Where a GPU's time goes: uform's and PyTorch's kernels side by side, from torch.profiler.

Run by scripts/gpu-check.sh after `make test-gpu` (a GPU session's minutes are few, so the
profile comes back with the first run); on a machine without a GPU, the CUDA backend or a
CUDA build of torch it prints why it skips and exits 0. CUPTI, which torch.profiler reads,
records every kernel of the process, libuform's too (its own static CUDA runtime launches
into the same device context).

Two workloads, each once on each side after a warm-up:
* text_encode of bench/gpu_report.py's texts (depth 12, hidden 768, 256-1024 bytes), uform's
  also with E4M3 weights (whose kernels show whether FP8 ran: uform_quantize_rows_e4m3 and
  cuBLASLt's FP8 ones, or the BF16 decoding's uform_decode_e4m3_rows);
* one training step of bench/gpu_train_report.py's shape (JOINT, 32 rows of 1024 tokens).

For each: the wall time, the GPU's busy time (kernels and copies), the launches, and the
kernels that took most of it, grouped by name (templated names cut at their first '<' or
'(' so a kernel's variants add up).

    python3 bench/gpu_profile.py [--top 20] [--output FILE]
"""
from __future__ import annotations

import argparse
import os
import re
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

ENCODE_SHAPE = dict(depth=12, hidden=768, dimensions=768, context=1024)
ENCODE_TEXTS, ENCODE_BYTES = 1024, (256, 1024)
TRAIN_ROWS, TRAIN_COLUMNS = 32, 1024


def short_name(name: str) -> str:
    """A kernel's name without its template arguments and parameters."""
    name = re.sub(r"^(void |__global__ )", "", name)
    cut = min((i for i in (name.find("<"), name.find("(")) if i > 0), default=len(name))
    return name[:cut][:70]


def table(label: str, wall: float, kernels: list[tuple[str, float]], top: int) -> list[str]:
    """The Markdown lines of one profile: `kernels` holds (name, microseconds) of every GPU
    activity, copies and memsets among them."""
    grouped: dict[str, list[float]] = {}
    busy, launches, copies = 0.0, 0, 0.0
    for name, micros in kernels:
        busy += micros
        if "memcpy" in name.lower() or "memset" in name.lower():
            copies += micros
            continue
        launches += 1
        entry = grouped.setdefault(short_name(name), [0.0, 0])
        entry[0] += micros
        entry[1] += 1
    lines = [f"### {label}", "",
             f"wall {wall * 1e3:.1f} ms; GPU busy {busy / 1e3:.1f} ms ({100 * busy / 1e6 / wall:.0f}% of wall), "
             f"of which copies {copies / 1e3:.1f} ms; {launches} kernel launches", "",
             "| kernel | ms | % of busy | launches | us each |", "| --- | ---: | ---: | ---: | ---: |"]
    for name, (micros, count) in sorted(grouped.items(), key=lambda item: -item[1][0])[:top]:
        lines.append(f"| {name} | {micros / 1e3:.2f} | {100 * micros / max(busy, 1e-9):.1f} | {count} | "
                     f"{micros / count:.1f} |")
    lines.append("")
    return lines


def profiled(torch, label: str, work, top: int) -> list[str]:
    """Runs work() once under the profiler; its table as Markdown lines."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as trace:
        began = time.perf_counter()
        work()
        torch.cuda.synchronize()
        wall = time.perf_counter() - began
    kernels = [(event.name, event.time_range.elapsed_us()) for event in trace.events()
               if event.device_type == DeviceType.CUDA]
    return table(label, wall, kernels, top)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--output", help="also write the tables here")
    arguments = parser.parse_args()
    capabilities = uform.capabilities()
    if not capabilities.gpu_backend or capabilities.gpus == 0:
        print("skip gpu_profile: " + ("this build has no CUDA backend" if not capabilities.gpu_backend
                                      else "no GPU found"))
        return 0
    try:
        import torch
        from reference.batched import BatchedTorchModel
        from reference.batched_training import (BatchedTrainer, BatchedTrainingModel, batch_on,
                                                prepare_batch)
        from reference.checkpoint import write_random_checkpoint
    except ImportError as error:
        print(f"skip gpu_profile: torch is not installed ({error})")
        return 0
    if not torch.cuda.is_available():
        print(f"skip gpu_profile: torch {torch.__version__} here has no CUDA")
        return 0

    lines = [f"## Profiles (bench/gpu_profile.py): {torch.cuda.get_device_name(0)}, torch {torch.__version__}", ""]
    directory = tempfile.mkdtemp(prefix="uform-gpu-profile-")
    path = os.path.join(directory, "profile-d12-h768.safetensors")
    write_random_checkpoint(path, seed=0, **ENCODE_SHAPE)
    texts = make_texts(ENCODE_TEXTS, seed=7, text_bytes=ENCODE_BYTES)
    model = uform.Model.load_vram(path)
    arena = uform.Arena()
    encode = lambda: model.text_encode(texts, arena).embeddings  # noqa: E731
    encode()
    lines += profiled(torch, f"uform text_encode, {ENCODE_TEXTS} texts", encode, arguments.top)
    quantized = uform.Model.load_vram(path, quantization=uform.Scalar.E4M3)
    encode_e4m3 = lambda: quantized.text_encode(texts, arena).embeddings  # noqa: E731
    encode_e4m3()
    lines += profiled(torch, f"uform text_encode, E4M3 weights, {ENCODE_TEXTS} texts", encode_e4m3, arguments.top)
    del quantized
    reference = BatchedTorchModel.from_checkpoint(path, torch.float32, max_batch=64, device="cuda")
    encode_torch = lambda: reference.encode(texts, autocast=True)  # noqa: E731
    encode_torch()
    lines += profiled(torch, f"torch text_encode, {ENCODE_TEXTS} texts", encode_torch, arguments.top)
    del model, reference

    train_texts = make_texts(TRAIN_ROWS, seed=0, text_bytes=(TRAIN_COLUMNS, TRAIN_COLUMNS))
    bags = [i // 2 for i in range(TRAIN_ROWS)]
    modalities = [uform.Modality.TEXT] * TRAIN_ROWS
    shape = uform.BatchShape(max_rows_per_device=TRAIN_ROWS, max_columns_per_row=TRAIN_COLUMNS)
    trainer = uform.Trainer.init_vram(uform.Executor.for_vram(), objective=uform.Objective.JOINT, batch=shape,
                                      seed=1, depth=12, hidden=768)
    start = os.path.join(directory, "initial.safetensors")
    trainer.save(start)
    step = lambda: trainer.step(modalities, train_texts, bags=bags)  # noqa: E731
    step(), step()
    lines += profiled(torch, f"uform Trainer.step, {TRAIN_ROWS} rows of {TRAIN_COLUMNS}", step, arguments.top)
    torch_model = BatchedTrainingModel.from_trainer_save(start).to("cuda")
    torch_trainer = BatchedTrainer(torch_model, autocast=True)
    batches = [batch_on(prepare_batch(train_texts, bags, seed=1, step=s, context=torch_model.context), "cuda")
               for s in range(1, 4)]
    torch_trainer.step(batches[0]).loss, torch_trainer.step(batches[1]).loss
    lines += profiled(torch, f"torch training step, {TRAIN_ROWS} rows of {TRAIN_COLUMNS}",
                      lambda: torch_trainer.step(batches[2]).loss, arguments.top)
    text = "\n".join(lines)
    print(text)
    if arguments.output:
        with open(arguments.output, "w", encoding="utf-8") as stream:
            stream.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
