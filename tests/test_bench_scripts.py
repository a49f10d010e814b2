"""The GPU benchmark scripts, run where no GPU is: they must not rot between the rare sessions
that have one (scripts/gpu-check.sh runs them there through `make test-gpu`)."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "bench", "gpu_train_report.py")


def run(*arguments, quick=True):
    environment = dict(os.environ, PYTHONPATH=ROOT)
    if quick:
        environment["UFORM_BENCH_QUICK"] = "1"
    return subprocess.run([sys.executable, SCRIPT, *arguments], cwd=ROOT, env=environment,
                          capture_output=True, text=True, timeout=600)


def test_gpu_train_report_on_the_cpu(tmp_path):
    """The whole script at a tiny shape on the CPU trainer and torch on the CPU: the same
    weights, masks and losses plumbing as on a GPU, and the page it writes."""
    pytest.importorskip("torch")
    page = tmp_path / "page.md"
    page.write_text("# GPU benchmarks\n\n| a table |\n\n### Notes (kept)\n\nhand-written\n")
    done = run("--device", "cpu", "--output", str(page))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "uform Trainer.init_ram (FP32)" in done.stdout
    assert "within" in done.stdout               # the first step's losses agree
    text = page.read_text()
    assert text.index("| a table |") < text.index("## Training") < text.index("### Notes (kept)")
    again = run("--device", "cpu", "--output", str(page))   # a re-run replaces its section
    assert again.returncode == 0, again.stdout + again.stderr
    assert page.read_text().count("## Training") == 1


def test_gpu_train_report_skips_without_a_gpu():
    import uform
    capabilities = uform.capabilities()
    if capabilities.gpu_backend and capabilities.gpus > 0:
        pytest.skip("this machine has a GPU: make test-gpu runs the script for real")
    done = run(quick=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("skip gpu_train_report: ")


def test_gpu_profile_tables_and_skip():
    """bench/gpu_profile.py: its table groups a kernel's variants and counts copies apart,
    and without a GPU the script says why it skips."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        import gpu_profile
    finally:
        sys.path.pop(0)
    assert gpu_profile.short_name("void uform_ln_forward<256>(float const*, float*)") == "uform_ln_forward"
    lines = gpu_profile.table("t", 0.010, [("k<1>(int)", 3000.0), ("k<2>(int)", 1000.0),
                                           ("Memcpy HtoD (Pageable -> Device)", 500.0), ("other", 500.0)], 5)
    text = "\n".join(lines)
    assert "GPU busy 5.0 ms (50% of wall), of which copies 0.5 ms; 3 kernel launches" in text
    assert "| k | 4.00 | 80.0 | 2 | 2000.0 |" in text
    assert text.index("| k |") < text.index("| other |")
    import uform
    capabilities = uform.capabilities()
    if capabilities.gpu_backend and capabilities.gpus > 0:
        return   # a GPU machine runs the script for real (scripts/gpu-check.sh)
    done = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu_profile.py")], cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("skip gpu_profile: ")
