"""What the text_choose benchmarks share: the checkpoint, the workloads, the contenders and
the report's section.

Used by bench/test_choose_bench.py (pytest-benchmark) and bench/report.py (docs/benchmarks.md).
Sizes, texts, threads and timing follow bench/harness.py (UFORM_BENCH_QUICK=1 shrinks them,
UFORM_BENCH_ROUNDS overrides the rounds). The model is harness.SHAPE with a byte head and
GROUPS calibrated temperature groups; every text gets the same four choices, a
multiple-choice question, and the texts cycle through the groups.
"""
from __future__ import annotations

import os
from typing import Callable, NamedTuple, Optional

import harness  # puts tests/ and the repository root on sys.path
import numpy as np
import torch

import uform
from reference.batched import BatchedTorchModel
from reference.checkpoint import write_random_checkpoint

CHOICES = b"ABCD"      # shared by every text
GROUPS = 4             # choice temperature groups of the checkpoint


class Workload(NamedTuple):
    key: str                      # pytest id and results key
    title: str                    # what the report's columns say
    per_call: bool                # one call per text (latency), else one call with all texts
    count: int                    # texts per round
    seed: int                     # of harness.make_texts
    rounds: int                   # timed rounds (after one warm-up) unless UFORM_BENCH_ROUNDS


# text_encode's two goal workloads, the texts cut at context - 1 and followed by MASK.
BATCH1 = Workload("batch1", "batch 1", True, harness.SINGLE_TEXTS, 1, 3)
BIG = Workload(f"batch{harness.BIG_BATCH}", f"batch {harness.BIG_BATCH}", False, harness.BIG_BATCH,
               harness.BIG_BATCH, 2)
WORKLOADS = (BATCH1, BIG)


def rounds_for(workload: Workload) -> int:
    if os.environ.get("UFORM_BENCH_ROUNDS"):
        return max(1, int(os.environ["UFORM_BENCH_ROUNDS"]))
    return workload.rounds


def texts_for(workload: Workload) -> tuple[list, list]:
    """(texts, temperature groups) of one round."""
    texts = harness.make_texts(workload.count, seed=workload.seed)
    return texts, [i % GROUPS for i in range(len(texts))]


def write_checkpoint(directory: str) -> str:
    shape = harness.SHAPE
    path = os.path.join(directory, "bench-choose-d{depth}-h{hidden}.safetensors".format(**shape))
    if not os.path.exists(path):
        write_random_checkpoint(path, seed=0, depth=shape["depth"], hidden=shape["hidden"],
                                dimensions=shape["dimensions"], context=shape["context"],
                                byte_head=True, choice_temperature_groups=GROUPS)
    return path


class Contender(NamedTuple):
    key: str
    label: str
    choose: Callable[[list, list], np.ndarray]   # (texts, groups) -> flat float32 probabilities
    uform_class: Optional[str]


def uform_contender(path: str, executor: "uform.Executor", cpu_class: Optional["uform.CPUClass"],
                    key: str) -> Optional[Contender]:
    try:
        model = uform.Model.load_ram(path, cpu_class=cpu_class, executor=executor)
    except uform.UnsupportedError:
        return None
    arena = uform.Arena()
    chosen = model.describe().cpu_class
    assert chosen is not None, "a model loaded into RAM has a CPU class"
    math = "BF16 products, FP32 sums" if harness.bf16_products(chosen) else "FP32"
    label = f"uform {chosen.name} ({'auto' if cpu_class is None else 'pinned'}; {math})"

    def choose(texts: list, groups: list) -> np.ndarray:
        return np.asarray(model.text_choose(texts, CHOICES, arena, temperature_groups=groups))

    return Contender(key, label, choose, chosen.name)


def contenders(path: str, threads: int) -> list[Contender]:
    """As harness.contenders: uform auto, uform SKYLAKE pinned, torch BF16 autocast, torch FP32."""
    executor = uform.Executor.for_ram(threads)
    assert executor.threads == threads, (executor.threads, threads)
    found = [uform_contender(path, executor, None, "uform-auto")]
    if found[0] is not None and found[0].uform_class != "SKYLAKE":
        found.append(uform_contender(path, executor, uform.CPUClass.SKYLAKE, "uform-skylake"))
    torch_model = BatchedTorchModel.from_checkpoint(path, torch.float32, max_batch=harness.TORCH_MINI_BATCH)

    def torch_choose(autocast: bool) -> Callable[[list, list], np.ndarray]:
        return lambda texts, groups: torch_model.choose(texts, [CHOICES], groups, autocast=autocast)[0].numpy()

    if harness.TORCH_BF16:
        found.append(Contender("torch-bf16", "torch BF16 autocast", torch_choose(True), None))
    found.append(Contender("torch-fp32", "torch FP32", torch_choose(False), None))
    return [c for c in found if c is not None]


def round_function(contender: Contender, workload: Workload, texts: list, groups: list
                   ) -> Callable[[], np.ndarray]:
    """One timed round: one call per text (per_call), else one call with every text."""
    if workload.per_call:
        def run() -> np.ndarray:
            return np.concatenate([contender.choose([text], [group]) for text, group in zip(texts, groups)])
    else:
        def run() -> np.ndarray:
            return contender.choose(texts, groups)
    return run


def warm_up(contender: Contender, workload: Workload, texts: list, groups: list) -> None:
    if workload.per_call:
        round_function(contender, workload, texts, groups)()
    else:
        contender.choose(texts[:32], groups[:32])


def measure(contenders: list, log) -> dict:
    """{(contender key, workload key): {seconds, texts, probabilities}}."""
    results = {}
    for workload in WORKLOADS:
        texts, groups = texts_for(workload)
        for contender in contenders:
            warm_up(contender, workload, texts, groups)
            run = round_function(contender, workload, texts, groups)
            seconds, probabilities = harness.time_rounds(run, rounds_for(workload))
            results[(contender.key, workload.key)] = {"seconds": seconds, "texts": texts,
                                                      "probabilities": probabilities}
            log(f"text_choose {workload.title:<12}  {contender.label:<48} "
                f"best {min(seconds):8.3f} s  {len(texts) / min(seconds):9.2f} texts/s")
    return results


def report_section(contenders: list, results: dict, fmt_rate: Callable[[float], str]) -> list[str]:
    """docs/benchmarks.md's text_choose section: texts per second, ratios, agreement."""
    by_key = {c.key: c for c in contenders}
    rate = {k: len(r["texts"]) / min(r["seconds"]) for k, r in results.items()}
    lo, hi = harness.TEXT_BYTES
    lines = ["## text_choose\n",
             f"The same model with a byte head and {GROUPS} calibrated temperature groups; every "
             f"text (random printable ASCII, {lo} to {hi} bytes, cut at context - 1 and followed by "
             f"MASK) chooses among the {len(CHOICES)} bytes `{CHOICES.decode()}`, the texts cycling "
             f"through the groups. uform: `Model.text_choose` (the chosen logits only). PyTorch: "
             f"`BatchedTorchModel.choose` (tests/reference/batched.py): the same padded, "
             f"length-sorted mini-batches, the MASK rows' states gathered, all 256 byte logits "
             f"in one GEMM, the chosen ones gathered, scaled by the group temperature and "
             f"softmaxed. Same threads and timing as above.\n",
             "| implementation | " + " | ".join(w.title for w in WORKLOADS) + " |",
             "|---|" + "---:|" * len(WORKLOADS)]
    for c in contenders:
        lines.append(f"| {c.label} | " + " | ".join(fmt_rate(rate[(c.key, w.key)]) for w in WORKLOADS) + " |")
    lines += ["", "Ratios (uform texts/s divided by torch texts/s):\n",
              "| uform | against | " + " | ".join(w.title for w in WORKLOADS) + " |",
              "|---|---|" + "---:|" * len(WORKLOADS)]
    for c in contenders:
        if not c.key.startswith("uform"):
            continue
        for other in ("torch-bf16", "torch-fp32"):
            if other in by_key:
                lines.append(f"| {c.label} | {by_key[other].label} | " + " | ".join(
                    f"{rate[(c.key, w.key)] / rate[(other, w.key)]:.2f}x" for w in WORKLOADS) + " |")
    if "torch-fp32" in by_key:
        baseline = results[("torch-fp32", BIG.key)]["probabilities"]
        lines += ["", f"Agreement on the timed batch-{harness.BIG_BATCH} round, against torch FP32's "
                  "probabilities:\n",
                  "| implementation | max abs difference |", "|---|---:|"]
        for c in contenders:
            if c.key != "torch-fp32":
                got = results[(c.key, BIG.key)]["probabilities"]
                lines.append(f"| {c.label} | {np.abs(got - baseline).max():.2e} |")
    lines.append("")
    return lines
