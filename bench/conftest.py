"""Fixtures of the text_encode benchmarks: thread setup, the checkpoint, the contenders,
and a summary of texts (pairs, images) per second and ratios at the end of the run."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402  (puts tests/ and the repository root on sys.path)
import choose_harness  # noqa: E402
import image_harness  # noqa: E402
import pytest  # noqa: E402

THREADS = harness.thread_count()
harness.configure_torch(THREADS)    # before any torch work: one inter-op thread, THREADS intra-op

# (contender key, workload key) -> (label, texts per second), filled by the benchmarks:
# text_encode's (test_text_encode_bench.py) and text_choose's (test_choose_bench.py).
RESULTS: dict = {}
CHOOSE_RESULTS: dict = {}
# contender key -> (label, query-document pairs per second), filled by test_maxsim_bench.py.
MAXSIM_RESULTS: dict = {}
# contender key -> (label, images per second), filled by test_image_bench.py.
IMAGE_RESULTS: dict = {}


@pytest.fixture(scope="session")
def bench_checkpoint(tmp_path_factory):
    return harness.write_checkpoint(str(tmp_path_factory.mktemp("bench")))


@pytest.fixture(scope="session")
def bench_contenders(bench_checkpoint):
    return {c.key: c for c in harness.contenders(bench_checkpoint, THREADS)}


def pytest_terminal_summary(terminalreporter):
    summarise(terminalreporter, "text_encode", RESULTS,
              [(w.key, w.title + ("" if w.goal else " (information, not a goal)")) for w in harness.WORKLOADS])
    summarise(terminalreporter, "text_choose", CHOOSE_RESULTS,
              [(w.key, w.title) for w in choose_harness.WORKLOADS])
    if MAXSIM_RESULTS:
        write = terminalreporter.write_line
        terminalreporter.section(f"late_interaction_scores, query-document pairs per second "
                                 f"({THREADS} threads, best round)")
        for key, (label, rate) in MAXSIM_RESULTS.items():
            ratio = (f"x{rate / MAXSIM_RESULTS['torch'][1]:.2f} vs torch"
                     if key != "torch" and "torch" in MAXSIM_RESULTS else "")
            write(f"  {label:<48} {rate:12.0f}   {ratio}")
    if IMAGE_RESULTS:
        write = terminalreporter.write_line
        shape = image_harness.SHAPE
        terminalreporter.section(f"image_encode, JPEG files decoded and encoded per second (depth "
                                 f"{shape['depth']}, hidden {shape['hidden']}, {THREADS} threads, best round)")
        for key, (label, rate) in IMAGE_RESULTS.items():
            ratios = [f"x{rate / IMAGE_RESULTS[other][1]:.2f} vs {other}"
                      for other in ("torch-bf16", "torch-fp32") if key == "uform" and other in IMAGE_RESULTS]
            write(f"  {label:<66} {rate:10.2f}   {', '.join(ratios)}")


def summarise(terminalreporter, verb: str, results: dict, workloads: list) -> None:
    if not results:
        return
    write = terminalreporter.write_line
    shape = harness.SHAPE
    terminalreporter.section(f"{verb}, texts per second (depth {shape['depth']}, hidden "
                             f"{shape['hidden']}, {THREADS} threads, best round)")
    for workload_key, title in workloads:
        rows = {key: value for (key, w), value in results.items() if w == workload_key}
        if not rows:
            continue
        write(f"{title}:")
        for key, (label, rate) in rows.items():
            ratios = []
            for other in ("torch-bf16", "torch-fp32"):
                if key.startswith("uform") and other in rows:
                    ratios.append(f"x{rate / rows[other][1]:.2f} vs {other}")
            write(f"  {label:<48} {rate:10.2f}   {', '.join(ratios)}")
