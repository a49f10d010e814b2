"""Times one training step of uform's CPU trainer against PyTorch; writes docs/benchmarks-training.md.

    make bench-training                                        # make all, then this
    python3 bench/train_report.py                              # writes docs/benchmarks-training.md
    python3 bench/train_report.py --output -                   # prints the page instead
    UFORM_BENCH_QUICK=1 python3 bench/train_report.py          # smoke run, prints, writes nothing
    UFORM_BENCH_ISA=avx2 python3 bench/train_report.py --output docs/benchmarks-training-avx2-proxy.md
                                                               # an AVX-512 machine run as an AVX2 one
                                                               # (bench/harness.py says how)

The issue's workload: a depth-4, hidden-256 model, the JOINT objective (masked text +
BALANCED contrastive over bags), 64 texts of 256 bytes = 64 rows x 256 columns per step.
Contenders, all on the same threads and starting from the same FP32 weights (the uform
trainer's initialisation, read back from its save):

* uform `Trainer.init_ram(Executor.for_ram(n))`, `trainer.step(...)` (FP32);
* PyTorch FP32: tests/reference/batched_training.py, the idiomatic eager training step
  (nn.Module, F.scaled_dot_product_attention, autograd, clip_grad_norm_, AdamW);
* PyTorch BF16 autocast, the same step inside torch.autocast (for information).

Every contender runs optimizer steps 1, 2, ... on the same texts; step k uses the same
masks everywhere (uform draws them inside its step, torch gets them precomputed by
training.mask_text outside the timed region). Steps are interleaved contender by
contender, a short pause before each; the first steps are an untimed warm-up, then best
of the timed ones. UFORM_BENCH_QUICK=1 shrinks the model and batch (depth 2, hidden 64,
16 texts of 64 bytes); UFORM_BENCH_ROUNDS overrides the number of timed steps.
bench/test_train_bench.py runs the same comparison under pytest-benchmark.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time
from typing import Callable, NamedTuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts tests/ and the repository root on sys.path)

THREADS = harness.thread_count()
harness.configure_torch(THREADS)    # before any torch work

import numpy as np  # noqa: E402
import torch  # noqa: E402

import uform  # noqa: E402
from reference.batched_training import (  # noqa: E402
    BatchedTrainer, BatchedTrainingModel, StepLosses, TrainingBatch, prepare_batch, training_flops)
from report import cpu_flags, cpu_model, git_revision, torch_backends  # noqa: E402

ROOT = harness.ROOT
QUICK = harness.QUICK

# The workload: the (quick: a tiny smoke version).
SHAPE = dict(depth=2, hidden=64) if QUICK else dict(depth=4, hidden=256)
TEXTS = 16 if QUICK else 64            # one text per row: rows of the step
TEXT_BYTES = 64 if QUICK else 256      # every text exactly this long: columns of a row, no padding
TEXT_SEED = 0                          # of harness.make_texts
TRAINER_SEED = 1                       # the run's seed: initial weights and masks
WARMUP_STEPS = 1                       # untimed steps per contender first
ROUNDS = 3                             # timed steps per contender, unless UFORM_BENCH_ROUNDS
PAUSE_S = 0.1 if QUICK else 0.5        # idle time before every step (lets the other side's threads sleep)


def rounds() -> int:
    if os.environ.get("UFORM_BENCH_ROUNDS"):
        return max(1, int(os.environ["UFORM_BENCH_ROUNDS"]))
    return ROUNDS


def texts() -> list[bytes]:
    """TEXTS random printable-ASCII texts of exactly TEXT_BYTES bytes (deterministic)."""
    return harness.make_texts(TEXTS, seed=TEXT_SEED, text_bytes=(TEXT_BYTES, TEXT_BYTES))


def bags() -> list[int]:
    """Texts paired two by two: 2k and 2k+1 share bag k."""
    return [i // 2 for i in range(TEXTS)]


def batch_shape() -> "uform.BatchShape":
    return uform.BatchShape(max_rows_per_device=TEXTS, max_columns_per_row=TEXT_BYTES)


def new_uform_trainer(threads: int) -> "uform.Trainer":
    executor = uform.Executor.for_ram(threads)
    assert executor.threads == threads, (executor.threads, threads)
    return uform.Trainer.init_ram(executor, objective=uform.Objective.JOINT, batch=batch_shape(),
                                  seed=TRAINER_SEED, cpu_class=harness.UFORM_AUTO_CLASS, **SHAPE)


def prepared_batches(count: int, context: int) -> list[TrainingBatch]:
    """The torch side's input of optimizer steps 1..count: the same corruption uform draws."""
    data, pairs = texts(), bags()
    return [prepare_batch(data, pairs, seed=TRAINER_SEED, step=step, context=context)
            for step in range(1, count + 1)]


class Contender(NamedTuple):
    key: str                              # short id: uform, torch-fp32, torch-bf16
    label: str                            # what the report prints
    step: Callable[[], StepLosses]        # the next optimizer step


def contenders(directory: str, threads: int, steps: int, keys=("uform", "torch-fp32", "torch-bf16")
               ) -> tuple[list[Contender], dict]:
    """The contenders, each ready for `steps` optimizer steps from the same initial weights,
    and facts for the report (context, dimensions, selected positions per step)."""
    trainer = new_uform_trainer(threads)
    path = os.path.join(directory, "initial.safetensors")
    trainer.save(path)                     # step 0: the FP32 masters torch starts from
    probe = BatchedTrainingModel.from_trainer_save(path)
    batches = prepared_batches(steps, probe.context)
    data, pairs = texts(), bags()
    modalities = [uform.Modality.TEXT] * len(data)
    stats = uform.TrainerStepStats()
    found = []

    if "uform" in keys:
        def uform_step() -> StepLosses:
            trainer.step(modalities, data, bags=pairs, stats=stats)
            return StepLosses(stats.loss, stats.masked_text_loss, stats.contrastive_loss, stats.learning_rate)
        pin = f", {harness.UFORM_AUTO_CLASS.name}" if harness.UFORM_AUTO_CLASS else ""
        found.append(Contender("uform", f"uform Trainer.init_ram (FP32{pin})", uform_step))

    def torch_contender(key: str, label: str, autocast: bool) -> Contender:
        model = BatchedTrainingModel.from_trainer_save(path)
        run = BatchedTrainer(model, autocast=autocast)

        def torch_step() -> StepLosses:
            if run.step_count >= len(batches):
                raise RuntimeError(f"{key}: only {len(batches)} steps were prepared")
            return run.step(batches[run.step_count])
        return Contender(key, label, torch_step)

    if "torch-fp32" in keys:
        found.append(torch_contender("torch-fp32", "torch FP32 (eager)", False))
    if "torch-bf16" in keys and harness.TORCH_BF16:
        found.append(torch_contender("torch-bf16", "torch BF16 autocast (eager)", True))
    facts = dict(context=probe.context, dimensions=probe.dimensions,
                 selected=[int(b.selected.sum()) for b in batches],
                 lengths=[int(n) for n in batches[0].lengths])
    return found, facts


def measure(found: list[Contender], warmup: int, timed: int, log) -> dict:
    """{key: {"seconds": [timed steps], "losses": [StepLosses of every step]}}; rounds
    interleaved (step k of every contender, then step k + 1), PAUSE_S before each step."""
    results = {c.key: {"seconds": [], "losses": []} for c in found}
    for index in range(warmup + timed):
        for contender in found:
            time.sleep(PAUSE_S)
            start = time.perf_counter()
            losses = contender.step()
            seconds = time.perf_counter() - start
            results[contender.key]["losses"].append(losses)
            if index >= warmup:
                results[contender.key]["seconds"].append(seconds)
            log(f"step {index + 1}{' (warm-up)' if index < warmup else ''}  {contender.label:<32} "
                f"{seconds:8.3f} s  loss {losses.loss:.6f}")
    return results


# ----------------------------------------------------------------------------- report

def write_report(found: list[Contender], results: dict, facts: dict, warmup: int, timed: int,
                 elapsed: float, loads: tuple) -> str:
    lines: list[str] = []
    out = lines.append
    by_key = {c.key: c for c in found}
    best = {k: min(r["seconds"]) for k, r in results.items()}
    median = {k: statistics.median(r["seconds"]) for k, r in results.items()}
    tokens = TEXTS * TEXT_BYTES
    depth, hidden = SHAPE["depth"], SHAPE["hidden"]
    selected = statistics.mean(facts["selected"])
    flops = training_flops(depth, hidden, facts["dimensions"], facts["lengths"], round(selected))

    title = "one training step vs PyTorch"
    if QUICK:
        title += " (QUICK SMOKE RUN: a tiny model, not the benchmark)"
    out(f"# Benchmarks: {title}\n")
    out(f"Generated by `bench/train_report.py` on {datetime.date.today().isoformat()}; "
        f"uform {uform.__version__} (libuform {uform.library_version}), commit {git_revision()}.\n")

    out("## Setup\n")
    out(f"- Machine: {cpu_model()}; {os.cpu_count()} logical CPUs, this process may use {THREADS}; "
        f"flags: {', '.join(cpu_flags()) or 'n/a'}.")
    if harness.proxy_note():
        out(harness.proxy_note())
    out(f"- Python {platform.python_version()}, torch {torch.__version__} ({torch_backends()}), "
        f"numpy {np.__version__}.")
    out(f"- Threads: {THREADS} for both: uform `Executor.for_ram({THREADS})`, torch "
        f"`set_num_threads({THREADS})` and `set_num_interop_threads(1)`.")
    heads = f"{hidden // 64} head{'s' if hidden > 64 else ''} of 64"
    out(f"- Model: depth {depth}, hidden {hidden} ({heads}), MLP {4 * hidden}, "
        f"embedding {facts['dimensions']}, context {facts['context']}, byte head tied to `text.bytes`. "
        f"Initial weights: the uform trainer's own initialisation (seed {TRAINER_SEED}); torch loads "
        f"them from the trainer's save (`train.master.*`, FP32), so every contender starts from "
        f"the same FP32 weights.")
    out(f"- Batch: {TEXTS} texts of exactly {TEXT_BYTES} random printable-ASCII bytes (seed "
        f"{TEXT_SEED}), one text per row: {TEXTS} rows x {TEXT_BYTES} columns, {tokens} tokens per "
        f"step, no padding; bags pair the texts two by two ({TEXTS // 2} bags). The same texts "
        f"every step; the masks change with the step.")
    out(f"- Objective: `Objective.JOINT` with the derived settings (docs/training.md): masked "
        f"text (spans of mean 3 selecting 15% of the bytes, 80% MASK / 10% random byte / 10% kept; "
        f"byte cross-entropy at the selected positions, {selected:.0f} per step on average) plus "
        f"the BALANCED contrastive loss of the corrupted inputs' embeddings over the batch (one "
        f"width, ambient negatives). AdamW (betas 0.9/0.999, eps 1e-8, weight decay 0.01 on "
        f"matrices except `text.bytes`), clipping at global norm 1, warmup + cosine schedule "
        f"(derived: peak 1e-3, 100 warmup steps of 10,000).")
    out("- uform: `Trainer.init_ram(Executor.for_ram(n), depth=..., hidden=..., "
        "objective=Objective.JOINT, batch=BatchShape(max_rows_per_device=..., "
        "max_columns_per_row=...))`; one `trainer.step([Modality.TEXT] * n, texts, bags=...)` "
        "call does the packing, draws the masks (counter-based RNG), the forward, backward, "
        "clipping and AdamW update, FP32 all through. Its timed step includes drawing the masks.")
    out("- PyTorch: `tests/reference/batched_training.py`, what a competent PyTorch user would "
        "write (checked against the float64 reference `tests/reference/training.py` to 1e-4 and "
        "against the uform trainer's losses in `bench/test_train_bench.py`): an `nn.Module` "
        "(`nn.Linear`, `nn.LayerNorm`, tanh `F.gelu`, rotary tables precomputed, "
        "`F.scaled_dot_product_attention` over the padded batch [B, L], no mask as no row is "
        "padded), `F.cross_entropy` at the selected positions, the contrastive loss vectorised "
        "(score matrix, positives mask from the bags, `log_softmax`), `loss.backward()`, "
        "`torch.nn.utils.clip_grad_norm_(..., 1.0)`, `torch.optim.AdamW` (PyTorch's default "
        "implementation choice: for CPU tensors, the per-tensor loop), eager (no "
        "`torch.compile`). FP32, and inside `torch.autocast(\"cpu\", dtype=torch.bfloat16)` "
        "for information. The masks (`training.mask_text`, pure Python) "
        "are computed before the timed steps, as data preparation: torch's timed step does not "
        "include them, uform's does.")
    out(f"- Timing: `time.perf_counter` around each step. Contenders interleaved (step k of "
        f"each, then step k + 1), idle {PAUSE_S} s before every step; {warmup} untimed warm-up "
        f"step{'s' if warmup != 1 else ''} each, then best of {timed} timed steps. Whole run: "
        f"{elapsed / 60:.1f} min.")
    out(f"- 1-minute load average before the run {loads[0]:.2f}, after {loads[1]:.2f} (near 0 "
        f"before and near {THREADS} after on an idle machine; more means other work shared the cores).\n")

    out("## Seconds per step\n")
    out("| implementation | best s/step | median s/step | tokens/s (best) | GFLOP/s (best, about 3x forward) |")
    out("|---|---:|---:|---:|---:|")
    for c in found:
        out(f"| {c.label} | {best[c.key]:.3f} | {median[c.key]:.3f} | {tokens / best[c.key]:,.0f} | "
            f"{flops['step'] / best[c.key] * 1e-9:.1f} |")
    out("")
    out("Every timed step (seconds): " + "; ".join(
        f"{by_key[k].label}: " + ", ".join(f"{s:.3f}" for s in r["seconds"]) for k, r in results.items()) + ".\n")
    out(f"Useful FLOPs per step, counted without padding: forward {flops['forward'] * 1e-9:.1f} GFLOP "
        f"(per token per layer 2 x 12 x H^2 for qkv, out, MLP up and down, plus 4 x L x H of "
        f"attention; the embedding head; the byte logits at the selected positions), the step "
        f"about 3x that ({flops['step'] * 1e-9:.1f} GFLOP: the backward computes two products per "
        f"forward product). Norms, GELU, rotary, softmax and AdamW are not counted.\n")

    if "uform" in best:
        out("Speed ratios (torch seconds per step divided by uform's; above 1: uform is faster):\n")
        out("| uform | against | best | median |")
        out("|---|---|---:|---:|")
        for other in ("torch-fp32", "torch-bf16"):
            if other in best:
                out(f"| {by_key['uform'].label} | {by_key[other].label} | {best[other] / best['uform']:.2f}x | "
                    f"{median[other] / median['uform']:.2f}x |")
        out("")
    if "uform" in best and "torch-fp32" in best:
        ratio = best["torch-fp32"] / best["uform"]
        out("### Goal\n")
        out(f"- One training step at least as fast as the PyTorch reference doing the same step "
            f"(torch FP32, the trainer's precision): {ratio:.2f}x, {'**met**' if ratio >= 1 else '**missed**'}.")
        out(f"- The CPU-speed issue's goal, at least 1.5x torch FP32 with the FP32 math unchanged: "
            f"{ratio:.2f}x, {'**met**' if ratio >= 1.5 else '**missed**'}.")
        if "torch-bf16" in best:
            r16 = best["torch-bf16"] / best["uform"]
            out(f"- Not a goal, for information: against torch BF16 autocast, {r16:.2f}x.")
        out("")

    out("### Agreement\n")
    out("The losses each contender reported (total = masked text + contrastive). At step 1 all "
        "start from the same weights and masks, so they should agree to FP32 rounding (BF16 "
        "autocast: to about 1e-3); later steps drift apart slowly as each applies its own "
        "updates.\n")
    out("| implementation | step | loss | masked text | contrastive |")
    out("|---|---:|---:|---:|---:|")
    last = warmup + timed
    for step in sorted({1, last}):
        for c in found:
            losses = results[c.key]["losses"][step - 1]
            out(f"| {c.label} | {step} | {losses.loss:.6f} | {losses.masked_text_loss:.6f} | "
                f"{losses.contrastive_loss:.6f} |")
    out("")
    if "uform" in results:
        reference = [x.loss for x in results["uform"]["losses"]]
        for c in found:
            if c.key == "uform":
                continue
            theirs = [x.loss for x in results[c.key]["losses"]]
            worst = max(abs(value - expected) / abs(expected) for value, expected in zip(theirs, reference))
            out(f"- Largest relative difference of {c.label}'s loss from uform's over steps 1-{last}: {worst:.1e}.")
        out("")

    out("## Reproduce\n")
    out("```sh\n"
        "make bench-training        # make all, then python3 bench/train_report.py: this page\n"
        "python3 bench/train_report.py --output -   # the same, printed\n"
        "make bench-pytest          # all bench/ under pytest-benchmark; this comparison (uform vs torch FP32)\n"
        "python3 -m pytest -q bench/test_train_bench.py   # only it, with its correctness checks\n"
        "UFORM_BENCH_QUICK=1 python3 bench/train_report.py   # smoke run: depth 2, hidden 64, 16 texts of 64 bytes;"
        " prints, writes nothing\n"
        "```\n")
    out("Run it on an otherwise idle machine: every contender uses every core this process may use.")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=None,
                        help="where to write the report ('-': stdout); default docs/benchmarks-training.md, "
                             "stdout under UFORM_BENCH_QUICK=1")
    arguments = parser.parse_args()
    output = arguments.output or ("-" if QUICK else os.path.join(ROOT, "docs", "benchmarks-training.md"))
    log = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731

    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    timed = rounds()
    with tempfile.TemporaryDirectory() as directory:
        found, facts = contenders(directory, THREADS, WARMUP_STEPS + timed)
        results = measure(found, WARMUP_STEPS, timed, log)
    report = write_report(found, results, facts, WARMUP_STEPS, timed, time.perf_counter() - started,
                          (load_before, os.getloadavg()[0]))
    if output == "-":
        sys.stdout.write(report)
    else:
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        kept = harness.kept_section(output, KEPT_HEADING)  # before open(..., "w") empties it
        with open(output, "w") as file:
            file.write(report + kept)
        log(f"wrote {output}")


# Sections measured by other scripts (bench/media_step_bench.py) live at the end of the
# report and survive its regeneration: everything from this heading on is carried over.
KEPT_HEADING = "## Media decoding in a training step"



if __name__ == "__main__":
    main()
