"""Runs the text_encode, text_choose, MaxSim and image_encode comparisons with PyTorch and writes docs/benchmarks.md.

    make bench                                                # make all, then this: writes docs/benchmarks.md
    make all && python3 bench/report.py                       # the same
    UFORM_BENCH_QUICK=1 python3 bench/report.py               # smoke run, prints to stdout

The same contenders, texts and thread setup as bench/test_text_encode_bench.py and
bench/test_choose_bench.py (see bench/harness.py and bench/choose_harness.py; MaxSim and
image_encode: bench/maxsim_harness.py, bench/image_harness.py), timed directly with time.perf_counter (best of a few rounds after a
warm-up), plus the machine's BF16 and FP32 peaks from bench/gemm_bench.c, so that the
report can say what share of the peak text_encode's GEMMs reach. It writes whatever it
measures, goals met or not.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts tests/ and the repository root on sys.path)
import choose_harness  # noqa: E402
import maxsim_harness  # noqa: E402
import image_harness  # noqa: E402

THREADS = harness.thread_count()
harness.configure_torch(THREADS)    # before any torch work

import numpy as np  # noqa: E402
import torch  # noqa: E402

import uform  # noqa: E402

ROOT = harness.ROOT
SHAPE = harness.SHAPE
GEMM_SOURCES = ["c/src/core/error.c", "c/src/core/executor.c", "c/src/core/fp8.c", "c/src/model/quantize.c",
                "c/src/backend/loss_checks.c",
                "c/src/backend/cpu/*.c", "bench/gemm_bench.c"]


# ----------------------------------------------------------------------------- machine

def cpu_model() -> str:
    """/proc/cpuinfo's model name (x86-64); on aarch64, which has none, lscpu's (it names the
    core from the implementer and part numbers, e.g. Neoverse-V1)."""
    try:
        with open("/proc/cpuinfo") as file:
            for line in file:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    try:
        done = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10)
        for line in done.stdout.splitlines():
            if line.startswith("Model name:"):
                return f"{line.split(':', 1)[1].strip()} ({platform.machine()})"
    except (OSError, subprocess.SubprocessError):
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> list[str]:
    flags = harness.cpu_flag_set()
    wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile",  # x86-64
              "asimd", "sve", "sve2", "bf16", "svebf16", "i8mm")                   # aarch64
    return [f for f in wanted if f in flags]


def git_revision() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
        return head + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def torch_backends() -> str:
    info = torch.__config__.parallel_info()
    found = [line.strip() for line in info.splitlines()
             if "Math Kernel Library" in line or "MKL-DNN" in line or "parallel backend" in line]
    return "; ".join([f"CPU capability {torch.backends.cpu.get_cpu_capability()}"] + found)


# ----------------------------------------------------------------------------- peaks

PEAK_LINE = re.compile(r"peak (\w+)\s+one core:\s+([\d.]+) GFLOP/s")


def build_gemm_bench(directory: str) -> tuple[str | None, str]:
    """Compiles bench/gemm_bench.c as its header says; (binary or None, message)."""
    compiler = os.environ.get("CC", "cc")
    if shutil.which(compiler) is None:
        return None, f"no C compiler ({compiler})"
    binary = os.path.join(directory, "gemm_bench")
    sources = []
    for pattern in GEMM_SOURCES:
        if "*" in pattern:
            folder = os.path.join(ROOT, os.path.dirname(pattern))
            sources += sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".c"))
        else:
            sources.append(os.path.join(ROOT, pattern))
    command = [compiler, "-O3", "-std=c11", "-D_GNU_SOURCE", "-fno-math-errno", "-fno-trapping-math", "-fPIC", f"-I{ROOT}/c/include",
               f"-I{ROOT}/c/src", *sources, "-lm", "-lpthread", "-o", binary]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        return None, f"gemm_bench did not build: {done.stderr.strip()[-500:]}"
    return binary, "built"


def peaks_once(binary: str) -> dict[str, float]:
    """One core's register-only peaks in GFLOP/s: {'bf16': ..., 'fp32': ...} ('none' runs no GEMM)."""
    output = subprocess.run([binary, "none"], capture_output=True, text=True, check=True).stdout
    return {kind: float(value) for kind, value in PEAK_LINE.findall(output)}


def machine_peaks(binary: str, threads: int, repeats: int = 5) -> dict:
    """Peaks of one core alone and of `threads` copies at once (each looping `repeats` times,
    so the copies overlap; per copy the median, summed over copies). The sum is the machine's
    peak on the cores we use; SMT siblings sharing a core show up as a sum below threads x one."""
    alone = [peaks_once(binary) for _ in range(3)]
    one = {kind: max(p[kind] for p in alone) for kind in alone[0]}
    script = f'for i in $(seq {repeats}); do "{binary}" none; done'
    workers = [subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, text=True)
               for _ in range(threads)]
    total: dict[str, float] = {}
    for worker in workers:
        output, _ = worker.communicate()
        rates: dict[str, list] = {}
        for kind, value in PEAK_LINE.findall(output):
            rates.setdefault(kind, []).append(float(value))
        for kind, values in rates.items():
            total[kind] = total.get(kind, 0.0) + statistics.median(values)
    return {"one": one, "all": total}


def gemm_table(binary: str, classes: list) -> str:
    """gemm_bench's own table for the CPU classes of the uform contenders (lower-case names)."""
    done = subprocess.run([binary, *[name.lower() for name in classes]], capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if not line.startswith("peak")]
    return "\n".join(lines)


def torch_matmul_peak(size: int = 2048, seconds: float = 1.0) -> float:
    """GFLOP/s of a square BF16 torch matmul (best call), for context."""
    a = torch.randn(size, size).to(torch.bfloat16)
    b = torch.randn(size, size).to(torch.bfloat16)
    with torch.inference_mode():
        torch.matmul(a, b)
        best, start = float("inf"), time.perf_counter()
        while time.perf_counter() - start < seconds:
            t0 = time.perf_counter()
            torch.matmul(a, b)
            best = min(best, time.perf_counter() - t0)
    return 2.0 * size ** 3 / best * 1e-9


# ----------------------------------------------------------------------------- flops

def text_flops(texts: list) -> dict:
    """Useful FLOPs of encoding `texts` (no padding): GEMMs (per token per layer
    2 * 12 * H^2: qkv 3H^2, out H^2, up 4H^2, down 4H^2; plus the embedding head 2 * D * H
    per text) and attention (QK^T and PV: 4 * L^2 * H per text per layer)."""
    H, depth, D, context = SHAPE["hidden"], SHAPE["depth"], SHAPE["dimensions"], SHAPE["context"]
    lengths = np.array([min(len(t), context) for t in texts], dtype=np.float64)
    tokens = lengths.sum()
    gemm = tokens * depth * 24.0 * H * H + len(texts) * 2.0 * D * H
    attention = depth * 4.0 * H * (lengths ** 2).sum()
    return {"tokens": tokens, "gemm": gemm, "attention": attention}


# ----------------------------------------------------------------------------- runs

def measure(contenders: list, log) -> dict:
    """{(contender key, workload key): {seconds: [...], texts, embeddings}} for every contender
    and workload. Rounds are interleaved (round k of every contender, then round k + 1), so a
    slow minute of a shared machine falls on every contender alike, as in train_report.py."""
    results = {}
    for workload in harness.WORKLOADS:
        texts = harness.texts_for(workload)
        rounds = harness.rounds_for(workload)
        runs = []
        for contender in contenders:
            harness.warm_up(contender, workload, texts)
            runs.append(harness.round_function(contender, workload, texts))
        for contender in contenders:
            results[(contender.key, workload.key)] = {"seconds": [], "texts": texts, "embeddings": None}
        for _ in range(rounds):
            for contender, run in zip(contenders, runs):
                seconds, embeddings = harness.time_rounds(run, 1)
                result = results[(contender.key, workload.key)]
                result["seconds"] += seconds
                result["embeddings"] = embeddings
        for contender, run in zip(contenders, runs):
            result = results[(contender.key, workload.key)]
            result["latencies"] = list(getattr(run, "latencies", []))
            log(f"{workload.title:<22}  {contender.label:<48} "
                f"best {min(result['seconds']):8.3f} s  {len(texts) / min(result['seconds']):9.2f} texts/s")
    return results


def paired_ratio(results: dict, fast: str, slow: str, workload_key: str) -> float:
    """The median over the interleaved rounds of slow's round time over fast's: a ratio that a
    slow stretch of the machine, which hits both rounds of a pair, moves less than best/best."""
    a = results[(fast, workload_key)]["seconds"]
    b = results[(slow, workload_key)]["seconds"]
    return float(np.median([y / x for x, y in zip(a, b)]))


def fmt_rate(value: float) -> str:
    return f"{value:,.1f}" if value < 1000 else f"{value:,.0f}"


def write_report(contenders, results, peaks, peak_source, gemm_output, torch_peak, elapsed,
                 loads, choose_contenders=None, choose_results=None, maxsim_section: str = "",
                 image_section: str = "") -> str:
    workloads = harness.WORKLOADS
    one_key, big_key, query_key = harness.BATCH1.key, harness.BIG.key, harness.QUERY.key
    big = harness.BIG_BATCH
    by_key = {c.key: c for c in contenders}
    rate = {k: len(r["texts"]) / min(r["seconds"]) for k, r in results.items()}
    lines: list[str] = []
    out = lines.append

    title = "text_encode and text_choose vs PyTorch"
    if harness.QUICK:
        title += " (QUICK SMOKE RUN: a tiny model, not the benchmark)"
    out(f"# Benchmarks: {title}\n")
    out(f"Generated by `bench/report.py` on {datetime.date.today().isoformat()}; "
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
    out(f"- Model: random checkpoint (`write_random_checkpoint`, seed 0), depth {SHAPE['depth']}, "
        f"hidden {SHAPE['hidden']} ({SHAPE['hidden'] // 64} heads of 64), MLP {4 * SHAPE['hidden']}, "
        f"embedding {SHAPE['dimensions']}, context {SHAPE['context']}; BF16 weights.")
    lo, hi = harness.TEXT_BYTES
    q_lo, q_hi = harness.QUERY.text_bytes
    out(f"- Texts: random printable ASCII, lengths uniform in [{lo}, {hi}] bytes (a byte per token). "
        f"Batch 1: {harness.BATCH1.count} different texts, one call each. Batch {big}: one call "
        f"with {big} texts. These two are the workloads the goals are about.")
    out(f"- Batch 1, short queries (the latency case of a search backend embedding user queries; "
        f"information, not a goal): {harness.QUERY.count} different texts of random printable ASCII, "
        f"lengths uniform in [{q_lo}, {q_hi}] bytes, one call each.")
    out(f"- uform: `Model.text_encode` (embeddings, FP32 outputs). The automatic CPU class and "
        f"SKYLAKE pinned (FP32 all through) on the same executor.")
    out(f"- PyTorch: `tests/reference/batched.py` `BatchedTorchModel`, an idiomatic batched "
        f"implementation of the same math (checked against the float64 reference to 1e-4): "
        f"texts sorted by length, mini-batches of {harness.TORCH_MINI_BATCH} padded to their "
        f"longest text, `F.scaled_dot_product_attention` with a key-padding mask, `F.layer_norm`, "
        f"tanh `F.gelu`, under `torch.inference_mode()`; FP32, and inside "
        f"`torch.autocast(\"cpu\", dtype=torch.bfloat16)` with the linear weights cast to BF16 "
        f"once (autocast would recast them on every call).")
    if harness.TORCH_BF16_SKIPPED:
        out(f"- {harness.TORCH_BF16_SKIPPED[0].upper()}{harness.TORCH_BF16_SKIPPED[1:]}.")
    out(f"- Timing: `time.perf_counter` around each round after an untimed warm-up; rounds "
        f"interleaved (round k of every contender, then round k + 1); best of "
        + ", ".join(f"{harness.rounds_for(w)} rounds at {w.title}" for w in workloads)
        + f". Whole run: {elapsed / 60:.1f} min.")
    out(f"- 1-minute load average before the run {loads[0]:.2f}, after {loads[1]:.2f} (near 0 before, "
        f"near {THREADS} after on an idle machine; more means other work shared the cores, which "
        f"hurts torch's OpenMP threads far more than uform's pool).\n")

    out("## Texts per second\n")
    out("| implementation | " + " | ".join(w.title for w in workloads) + " |")
    out("|---|" + "---:|" * len(workloads))
    for c in contenders:
        out(f"| {c.label} | " + " | ".join(fmt_rate(rate[(c.key, w.key)]) for w in workloads) + " |")
    out("")
    out("Ratios (uform texts/s divided by torch texts/s; above 1: uform is faster):\n")
    out("| uform | against | " + " | ".join(w.title for w in workloads) + " |")
    out("|---|---|" + "---:|" * len(workloads))
    torch_keys = [k for k in ("torch-bf16", "torch-fp32") if k in by_key]
    for c in contenders:
        if not c.key.startswith("uform"):
            continue
        for other in torch_keys:
            out(f"| {c.label} | {by_key[other].label} | "
                + " | ".join(f"{rate[(c.key, w.key)] / rate[(other, w.key)]:.2f}x" for w in workloads)
                + " |")
    out("")

    auto = "uform-auto"
    if auto in by_key and "torch-bf16" in by_key:
        out("### Goals\n")
        fastest_1 = max(torch_keys, key=lambda k: rate[(k, one_key)])
        r_big = rate[(auto, big_key)] / rate[("torch-bf16", big_key)]
        r_one = rate[(auto, one_key)] / rate[("torch-bf16", one_key)]
        r_one_fast = rate[(auto, one_key)] / rate[(fastest_1, one_key)]
        verdict = lambda ok: "**met**" if ok else "**missed**"  # noqa: E731
        paired = lambda k: paired_ratio(results, auto, "torch-bf16", k)  # noqa: E731
        out("Best round against best round; in brackets the median of the interleaved rounds' "
            "own ratios, which the machine's slow stretches move less.\n")
        # issue 13's goals: AVX-512 BF16 at least 2x; the AMX class at least 1.5x (torch's BF16
        # autocast runs its own GEMMs on the AMX tiles there, through oneDNN)
        goal = 1.5 if by_key[auto].uform_class == "AMX" else 2.0
        if goal != 2.0:
            out(f"The automatic class is AMX: the goal for it is {goal:g}x torch BF16 autocast, "
                "whose GEMMs run on the same tiles (oneDNN).\n")
        out(f"- Batch {big}, at least {goal:g}x faster than torch BF16 autocast: {r_big:.2f}x ({paired(big_key):.2f}x), "
            f"{verdict(r_big >= goal)}.")
        out(f"- Batch 1, at least {goal:g}x faster than torch BF16 autocast: {r_one:.2f}x ({paired(one_key):.2f}x), "
            f"{verdict(r_one >= goal)}"
            + ("." if fastest_1 == "torch-bf16" else
               f" (the faster torch mode at batch 1 is {by_key[fastest_1].label}: {r_one_fast:.2f}x,"
               f" {verdict(r_one_fast >= goal)}).")
            + "\n")
        fastest_q = max(torch_keys, key=lambda k: rate[(k, query_key)])
        r_query = rate[(auto, query_key)] / rate[("torch-bf16", query_key)]
        r_query_fast = rate[(auto, query_key)] / rate[(fastest_q, query_key)]
        out(f"Not a goal, for information: batch 1 with short queries ({q_lo} to {q_hi} bytes, one call "
            f"each), {by_key[auto].label} against torch BF16 autocast: {r_query:.2f}x"
            + ("." if fastest_q == "torch-bf16" else
               f" (against the faster torch mode there, {by_key[fastest_q].label}: {r_query_fast:.2f}x).")
            + "\n")

    if auto in by_key and "torch-bf16" not in by_key and "torch-fp32" in by_key:
        out("### Goals\n")
        verdict = lambda ok: "**met**" if ok else "**missed**"  # noqa: E731
        r_big = rate[(auto, big_key)] / rate[("torch-fp32", big_key)]
        r_one = rate[(auto, one_key)] / rate[("torch-fp32", one_key)]
        r_query = rate[(auto, query_key)] / rate[("torch-fp32", query_key)]
        out("Without BF16 arithmetic torch's fastest CPU mode is FP32; the goals for this class "
            "(the CPU-speed issue's, for AVX2):\n")
        paired = lambda k: paired_ratio(results, auto, "torch-fp32", k)  # noqa: E731
        out("Best round against best round; in brackets the median of the interleaved rounds' "
            "own ratios, which the machine's slow stretches move less.\n")
        out(f"- Batch {big}, at least 1.5x torch FP32: {r_big:.2f}x ({paired(big_key):.2f}x), "
            f"{verdict(r_big >= 1.5)}.")
        out(f"- Batch 1, at least 1.3x torch FP32: {r_one:.2f}x ({paired(one_key):.2f}x), "
            f"{verdict(r_one >= 1.3)}.\n")
        out(f"Not a goal, for information: batch 1 with short queries ({q_lo} to {q_hi} bytes, one "
            f"call each), {by_key[auto].label} against torch FP32: {r_query:.2f}x.\n")

    per_call = [w for w in workloads if w.per_call]
    if per_call:
        out("### Latency per call\n")
        out("Every call of the timed rounds of the one-text-per-call workloads, timed alone "
            "(`time.perf_counter` around `encode([text])`), in milliseconds:\n")
        out("| implementation | " + " | ".join(f"{w.title} p50 | {w.title} p99" for w in per_call) + " |")
        out("|---|" + "---:|---:|" * len(per_call))
        for c in contenders:
            cells = []
            for w in per_call:
                values = np.array(results[(c.key, w.key)]["latencies"]) * 1e3
                cells += [f"{np.percentile(values, 50):.1f}", f"{np.percentile(values, 99):.1f}"]
            out(f"| {c.label} | " + " | ".join(cells) + " |")
        out("\n(" + "; ".join(f"{w.title}: {len(results[(contenders[0].key, w.key)]['latencies'])} calls"
                              for w in per_call) + ", so p99 is close to the slowest call.)\n")

    out("### Agreement\n")
    out(f"The embeddings of the timed batch-{big} round against torch FP32's (unit vectors):\n")
    out("| implementation | max abs difference | min cosine |")
    out("|---|---:|---:|")
    baseline = results[("torch-fp32", big_key)]["embeddings"] if "torch-fp32" in by_key else None
    for c in contenders:
        if baseline is None or c.key == "torch-fp32":
            continue
        e = results[(c.key, big_key)]["embeddings"]
        out(f"| {c.label} | {np.abs(e - baseline).max():.2e} | {(e * baseline).sum(axis=1).min():.6f} |")
    out("")

    out("## Share of the machine's GEMM peak\n")
    bf16_peak = peaks.get("all", {}).get("bf16") if peaks else None
    fp32_peak = peaks.get("all", {}).get("fp32") if peaks else None
    if peaks and (not bf16_peak or harness.AVX2_PROXY):
        # an AVX2 machine (HASWELL) or the AVX2 proxy: the FP32 peak is the ymm FMA loop's
        one = peaks["one"]
        fp32_peak = peaks["all"].get("avx2")
        out(f"Peak from `bench/gemm_bench.c` ({peak_source}): a register-only loop of 12 independent "
            f"`vfmadd` on ymm registers (FP32, 16 flops each), no loads. One core alone: "
            f"{one.get('avx2', float('nan')):.1f} GFLOP/s; {THREADS} copies at once (the cores we use, "
            f"summed): **FP32 {fp32_peak or float('nan'):.1f} GFLOP/s**, the peak used below. "
            + ("The AVX2 proxy leaves BF16 arithmetic unused, so there is no BF16 peak.\n"
               if harness.AVX2_PROXY else "This CPU has no BF16 arithmetic, so there is no BF16 peak.\n"))
    elif peaks:
        one = peaks["one"]
        out(f"Peaks from `bench/gemm_bench.c` ({peak_source}): register-only loops of independent "
            f"`vdpbf16ps` (BF16: 64 flops per instruction) and `vfmadd` (FP32: 32 flops) on zmm "
            f"registers, no loads. One core alone: BF16 {one.get('bf16', float('nan')):.1f} GFLOP/s, "
            f"FP32 {one.get('fp32', float('nan')):.1f} GFLOP/s. {THREADS} copies at once (the "
            f"cores we use, summed): **BF16 {bf16_peak or float('nan'):.1f} GFLOP/s**, "
            f"FP32 {fp32_peak or float('nan'):.1f} GFLOP/s; these sums are the peaks used below.")
        if peaks["all"].get("amx"):
            out(f"AMX: a register-only loop of `tdpbf16ps` on four independent sum tiles (16 x 16 x 32 "
                f"BF16 products each, 16384 flops), no loads: one core {one.get('amx', float('nan')):.1f} "
                f"GFLOP/s, {THREADS} copies at once **{peaks['all']['amx']:.1f} GFLOP/s** (the AMX class's "
                "peak below).")
        if bf16_peak and one.get("bf16") and bf16_peak < 0.9 * THREADS * one["bf16"]:
            out(f"The copies did not scale to {THREADS}x one core ({bf16_peak / one['bf16']:.2f}x): "
                "the CPUs are SMT siblings sharing execution units, or the machine was busy.")
        out("")
    else:
        out(f"gemm_bench could not be used ({peak_source}); the BF16 peak below is the best "
            f"square torch BF16 matmul instead (a lower bound of the true peak).\n")
        bf16_peak = torch_peak
    if (bf16_peak or not peaks) and torch_peak is not None:
        out(f"For context, a 2048^3 torch BF16 matmul reaches {torch_peak:.1f} GFLOP/s on {THREADS} threads.\n")
    out("Useful GEMM FLOPs are counted without padding: per token per layer 2 x 12 x H^2 (qkv 3H^2, "
        "out H^2, MLP up 4H^2 and down 4H^2) plus the embedding head, 2 x D x H per text. torch "
        "computes more (padding to each mini-batch's longest text); only useful work is counted.\n")
    amx_peak = peaks.get("all", {}).get("amx") if peaks else None
    out("| implementation | workload | GEMM GFLOP | GEMM GFLOP/s | share of BF16 peak | share of FP32 peak |"
        + (" share of AMX peak |" if amx_peak else ""))
    out("|---|---|---:|---:|---:|---:|" + ("---:|" if amx_peak else ""))
    for workload in workloads:
        for c in contenders:
            r = results[(c.key, workload.key)]
            flops = text_flops(r["texts"])
            achieved = flops["gemm"] / min(r["seconds"]) * 1e-9
            share_bf16 = f"{achieved / bf16_peak:.1%}" if bf16_peak else "n/a"
            share_fp32 = f"{achieved / fp32_peak:.1%}" if fp32_peak else "n/a"
            share_amx = (f" {achieved / amx_peak:.1%} |" if c.uform_class == "AMX" else " n/a |") if amx_peak else ""
            out(f"| {c.label} | {workload.title} | {flops['gemm'] * 1e-9:.1f} | {achieved:.1f} | {share_bf16} | {share_fp32} |"
                + share_amx)
    out("")
    flops = text_flops(results[(contenders[0].key, big_key)]["texts"])
    out(f"Attention FLOPs: the texts attend only within themselves, QK^T and PV cost 4 x L^2 x H "
        f"per text per layer (softmax, norms, GELU and rotary not counted). At batch {big} that is "
        f"{flops['attention'] * 1e-9:.1f} GFLOP against {flops['gemm'] * 1e-9:.1f} GFLOP of GEMMs "
        f"(another {flops['attention'] / flops['gemm']:.1%} on top of the GEMMs; {flops['tokens']:.0f} tokens, mean "
        f"{flops['tokens'] / big:.0f} per text). The shares above leave it out; counting it, "
        f"{by_key[contenders[0].key].label} reaches "
        f"{(flops['gemm'] + flops['attention']) / min(results[(contenders[0].key, big_key)]['seconds']) * 1e-9:.1f} "
        f"GFLOP/s at batch {big}.\n")
    if gemm_output:
        out("gemm_bench's own table for the CPU classes above (one GEMM kernel call alone, "
            "best of 0.3 s; its threads are fixed at 1 and 2):\n")
        out("```\n" + gemm_output.strip() + "\n```\n")

    if choose_contenders and choose_results:
        for line in choose_harness.report_section(choose_contenders, choose_results, fmt_rate):
            out(line)
    if maxsim_section:
        out(maxsim_section)
    if image_section:
        out(image_section)

    e4m3_page = os.path.join(ROOT, "docs", "benchmarks-e4m3.md")
    if os.path.exists(e4m3_page):
        # E4M3 against BF16 is uform against itself: `make bench-e4m3` measures it on its own
        # (its section names the machine it ran on, which may not be this one).
        with open(e4m3_page) as file:
            out(file.read().strip().replace("## E4M3 weights against BF16 (uform alone)",
                                            "## E4M3 weights against BF16 (uform alone, `make bench-e4m3`)") + "\n")
    out("## Reproduce\n")
    out("```sh\n"
        "make bench          # make all, then python3 bench/report.py: this page (docs/benchmarks.md)\n"
        "make bench-e4m3     # E4M3 against BF16 weights: docs/benchmarks-e4m3.md, copied into this page\n"
        "make bench-pytest   # make all, then the same comparison under pytest-benchmark\n"
        "UFORM_BENCH_QUICK=1 python3 bench/report.py   # smoke run: depth 2, hidden 128, batch 32; "
        "prints the page, writes nothing\n"
        "python3 bench/image_harness.py   # the image_encode comparison alone: prints its section\n"
        "UFORM_BENCH_ISA=avx2 python3 bench/report.py --text-only --output docs/benchmarks-avx2-proxy.md"
        "   # AVX-512 machine as an AVX2 one\n```\n")
    out("Run it on an otherwise idle machine: both contenders use every core this process may use.")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=None,
                        help="where to write the report ('-': stdout); default docs/benchmarks.md, "
                             "stdout under UFORM_BENCH_QUICK=1")
    parser.add_argument("--no-gemm-table", action="store_true", help="skip gemm_bench's GEMM table")
    parser.add_argument("--text-only", action="store_true",
                        help="only the text_encode comparison (no text_choose, MaxSim or image_encode "
                             "sections): a quarter of the time on a 2-core AVX2 machine")
    arguments = parser.parse_args()
    output = arguments.output or ("-" if harness.QUICK else os.path.join(ROOT, "docs", "benchmarks.md"))
    log = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    if harness.AVX2_PROXY and not arguments.text_only:
        # the proxy pins text_encode's class; text_choose, MaxSim and image_encode would
        # still run this CPU's AVX-512 kernels
        log("UFORM_BENCH_ISA=avx2: the text_encode comparison only (--text-only)")
        arguments.text_only = True

    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as directory:
        binary, message = build_gemm_bench(directory)
        peaks, gemm_output = None, ""
        if binary is not None:
            try:
                peaks = machine_peaks(binary, THREADS)
                if not peaks["one"].get("bf16") and not peaks["one"].get("avx2"):
                    message, peaks = "gemm_bench printed neither a BF16 nor an AVX2 peak", None
                else:
                    message = f"built with the library's flags, {THREADS} concurrent copies"
                    log(f"peaks: one core {peaks['one']}, {THREADS} copies {peaks['all']}")
            except (OSError, subprocess.CalledProcessError) as error:
                message, peaks = f"gemm_bench failed: {error}", None
        # without BF16 arithmetic a 2048^3 BF16 matmul takes a minute and says nothing
        torch_peak = torch_matmul_peak() if harness.TORCH_BF16 else None
        if torch_peak is not None:
            log(f"torch bf16 matmul: {torch_peak:.1f} GFLOP/s")

        path = harness.write_checkpoint(directory)
        contenders = harness.contenders(path, THREADS)
        if binary is not None and not arguments.no_gemm_table:
            gemm_output = gemm_table(binary, [c.uform_class for c in contenders if c.uform_class])
        results = measure(contenders, log)
        choose_contenders, choose_results, image_section, maxsim_section = None, None, "", ""
        if not arguments.text_only:
            choose_path = choose_harness.write_checkpoint(directory)
            choose_contenders = choose_harness.contenders(choose_path, THREADS)
            choose_results = choose_harness.measure(choose_contenders, log)
            image_section = image_harness.report_section(image_harness.measure(THREADS, log, directory),
                                                         THREADS)
    if not arguments.text_only:
        maxsim_section = maxsim_harness.report_section(maxsim_harness.measure(THREADS, log), THREADS)
    report = write_report(contenders, results, peaks, message, gemm_output, torch_peak,
                          time.perf_counter() - started, (load_before, os.getloadavg()[0]),
                          choose_contenders, choose_results, maxsim_section, image_section)
    if output == "-":
        sys.stdout.write(report)
    else:
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        with open(output, "w") as file:
            file.write(report)
        log(f"wrote {output}")


if __name__ == "__main__":
    main()
