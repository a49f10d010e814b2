"""E4M3 against BF16 weights: text_encode side by side on the same checkpoint, threads and texts.

For every CPU class this machine runs, the model of bench/harness.py (depth 12, hidden 512) is
loaded twice, as BF16 and with quantization=E4M3, and timed in alternating rounds (so drift in
a shared VM hits both): batch 256 of 64-512-byte texts in one call, batch 1 (16 such texts,
one call each), and short queries (64 texts of 8-64 bytes, one call each: products of a few row
groups, where the weights' bytes matter most). SERIAL, the portable reference class, is far
slower and gets batch 16, 4 single texts and 8 queries instead. Prints a markdown section (the machine, memory, texts/s, ratios) that
docs/benchmarks.md carries; `--output FILE` also writes it there.

    python3 bench/quantized_report.py [--output docs/benchmarks-e4m3.md] [--classes haswell ...]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)

import harness  # noqa: E402
from report import cpu_flags, cpu_model, git_revision  # noqa: E402

import uform  # noqa: E402


def rate(model: uform.Model, texts: list, per_call: bool, arena: uform.Arena) -> float:
    """Texts per second of one round."""
    started = time.perf_counter()
    if per_call:
        for text in texts:
            model.text_encode([text], arena)
    else:
        model.text_encode(texts, arena)
    return len(texts) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=None, help="also write the section to this file")
    parser.add_argument("--classes", nargs="*", default=None, help="CPU classes (default: all this machine runs)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per model and workload")
    args = parser.parse_args()

    threads = harness.thread_count()
    executor = uform.Executor.for_ram(threads)
    directory = tempfile.mkdtemp(prefix="uform-e4m3-bench-")
    path = harness.write_checkpoint(directory)
    wanted = [c for c in uform.CPUClass if args.classes is None or c.name.lower() in args.classes]
    lines = [
        "## E4M3 weights against BF16 (uform alone)\n",
        f"- Machine: {cpu_model()}, flags {' '.join(cpu_flags())}; {threads} threads.",
        f"- Model: random checkpoint (seed 0), depth {harness.SHAPE['depth']}, hidden "
        f"{harness.SHAPE['hidden']}, loaded as BF16 and with `quantization=Scalar.E4M3`; "
        f"revision {git_revision()}.",
        f"- Rounds alternate between the two models; the table gives the median of {args.rounds} "
        "rounds (after one warm-up) and the ratio of the medians.\n",
        "| class | workload | BF16 texts/s | E4M3 texts/s | E4M3 / BF16 | memory BF16 | memory E4M3 |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for cpu_class in wanted:
        try:
            bf16 = uform.Model.load_ram(path, cpu_class=cpu_class, executor=executor)
        except uform.UnsupportedError:
            continue
        e4m3 = uform.Model.load_ram(path, cpu_class=cpu_class, executor=executor,
                                    quantization=uform.Scalar.E4M3)
        serial = cpu_class == uform.CPUClass.SERIAL
        big = 16 if serial else harness.BIG_BATCH
        queries = harness.texts_for(harness.QUERY)
        workloads = [(f"batch {big}", harness.make_texts(big, seed=harness.BIG_BATCH), False),
                     ("batch 1", harness.make_texts(4 if serial else harness.SINGLE_TEXTS, seed=1), True),
                     ("queries of 8-64 bytes", queries[:8] if serial else queries, True)]
        arena = uform.Arena()
        memory = [m.describe().memory_usage / 2**20 for m in (bf16, e4m3)]
        for title, texts, per_call in workloads:
            rates = {"bf16": [], "e4m3": []}
            for model in (bf16, e4m3):
                rate(model, texts[:2] if not per_call else texts[:1], per_call, arena)  # warm-up
            for _ in range(2 if serial else args.rounds):
                rates["bf16"].append(rate(bf16, texts, per_call, arena))
                rates["e4m3"].append(rate(e4m3, texts, per_call, arena))
            b, q = statistics.median(rates["bf16"]), statistics.median(rates["e4m3"])
            lines.append(f"| {cpu_class.name} | {title} | {b:.2f} | {q:.2f} | {q / b:.2f}x | "
                         f"{memory[0]:.1f} MiB | {memory[1]:.1f} MiB |")
            print(lines[-1], flush=True)
    section = "\n".join(lines) + "\n"
    print(section)
    if args.output:
        kept = harness.kept_section(args.output, KEPT_HEADING)  # before open(..., "w") empties it
        with open(args.output, "w") as file:
            file.write(section + kept)


# The page's explanation is written by hand under this heading and survives regeneration:
# everything from it on is carried over (as bench/train_report.py keeps its media section).
KEPT_HEADING = "### Notes (written by hand, kept when the page is regenerated)"



if __name__ == "__main__":
    main()
