"""The C benchmarks of bench/ (gemm_bench.c, sgemm_bench.c, query_gemm_bench.c) build as their
headers say, with warnings as errors: they call internal kernels directly, so a change to those
signatures must not leave them broken until the next session that times something."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHES = ("gemm_bench.c", "sgemm_bench.c", "query_gemm_bench.c")
LIBRARY = ["c/src/core/error.c", "c/src/core/executor.c", "c/src/core/fp8.c", "c/src/model/quantize.c",
           "c/src/backend/loss_checks.c"]
FLAGS = ["-O1", "-std=c11", "-D_GNU_SOURCE", "-fno-math-errno", "-fno-trapping-math", "-fPIC",
         "-Wall", "-Wextra", "-Werror", f"-I{ROOT}/c/include", f"-I{ROOT}/c/src"]


def test_c_benchmarks_build(tmp_path):
    compiler = os.environ.get("CC", "cc")
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler})")
    cpu = os.path.join(ROOT, "c", "src", "backend", "cpu")
    sources = [os.path.join(ROOT, s) for s in LIBRARY]
    sources += sorted(os.path.join(cpu, f) for f in os.listdir(cpu) if f.endswith(".c"))
    objects = []
    for source in sources:  # compiled once, linked into each benchmark
        obj = os.path.join(tmp_path, os.path.relpath(source, ROOT).replace("/", "_") + ".o")
        done = subprocess.run([compiler, *FLAGS, "-c", source, "-o", obj], capture_output=True, text=True)
        assert done.returncode == 0, f"{source}: {done.stderr[-1500:]}"
        objects.append(obj)
    for bench in BENCHES:
        binary = os.path.join(tmp_path, bench[:-2])
        done = subprocess.run([compiler, *FLAGS, os.path.join(ROOT, "bench", bench), *objects, "-lm",
                               "-lpthread", "-o", binary], capture_output=True, text=True)
        assert done.returncode == 0, f"bench/{bench} does not build: {done.stderr[-1500:]}"
        assert os.access(binary, os.X_OK)
