#!/usr/bin/env bash
# Installs what `make test` and `make demo` need on a fresh Debian/Ubuntu
# machine, and nothing when it is already there (so it is cheap to re-run).
set -euo pipefail

PYTHON=${PYTHON:-python3}
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

missing_apt=()
command -v cc >/dev/null 2>&1 || missing_apt+=(build-essential)
command -v make >/dev/null 2>&1 || missing_apt+=(make)
command -v pkg-config >/dev/null 2>&1 || missing_apt+=(pkg-config)
command -v "$PYTHON" >/dev/null 2>&1 || missing_apt+=(python3 python3-dev python3-pip)
# The media decoders' libraries (each optional for the build, all used by the
# tests), by the pkg-config name the Makefile asks for.
for pair in libjpeg:libjpeg-dev libpng:libpng-dev libwebp:libwebp-dev sndfile:libsndfile1-dev \
            libmpg123:libmpg123-dev libavformat:libavformat-dev libavcodec:libavcodec-dev \
            libswscale:libswscale-dev libavutil:libavutil-dev; do
    pkg-config --exists "${pair%%:*}" 2>/dev/null || missing_apt+=("${pair#*:}")
done
# The mesh's collective engine on CPUs (Gloo over TCP) and the C++ compiler its
# adapter builds with; the build works without them (Mesh raises UnsupportedError).
command -v g++ >/dev/null 2>&1 || missing_apt+=(g++)
[ -f /usr/include/gloo/allgatherv.h ] || missing_apt+=(libgloo-dev)
# make test-arm: the aarch64 cross compiler and user-mode emulation, on an
# x86-64 machine with apt; optional (test-arm skips with a message without them).
optional_apt=()
if [ "$(uname -m)" = x86_64 ] && command -v apt-get >/dev/null 2>&1; then
    command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || optional_apt+=(gcc-aarch64-linux-gnu)
    command -v qemu-aarch64 >/dev/null 2>&1 || optional_apt+=(qemu-user)
fi
if [ ${#missing_apt[@]} -gt 0 ]; then
    echo "installing Debian packages: ${missing_apt[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing_apt[@]}"
fi

if [ ${#optional_apt[@]} -gt 0 ]; then
    echo "installing Debian packages for make test-arm: ${optional_apt[*]}"
    { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
        "${optional_apt[@]}"; } || echo "could not install ${optional_apt[*]}: make test-arm will skip"
fi

# Python headers for the cffi module.
if ! "$PYTHON" - <<'PY' >/dev/null 2>&1
import os, sysconfig
raise SystemExit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)
PY
then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-dev
fi

# Python packages: the exact torch pin is the test oracle (CPU build).
need_pip=()
"$PYTHON" -c "import cffi" 2>/dev/null || need_pip+=("cffi>=1.16")
"$PYTHON" -c "import numpy" 2>/dev/null || need_pip+=("numpy>=1.24")
"$PYTHON" -c "import pytest" 2>/dev/null || need_pip+=("pytest>=7")
"$PYTHON" -c "import pytest_benchmark" 2>/dev/null || need_pip+=("pytest-benchmark>=4")
"$PYTHON" -c "import setuptools" 2>/dev/null || need_pip+=("setuptools")
"$PYTHON" -c "import torch; assert torch.__version__.startswith('2.13.0')" 2>/dev/null \
    || need_pip+=("torch==2.13.0")
# The decoders' test oracles.
"$PYTHON" -c "import PIL" 2>/dev/null || need_pip+=("pillow")
"$PYTHON" -c "import soundfile" 2>/dev/null || need_pip+=("soundfile")
"$PYTHON" -c "import av" 2>/dev/null || need_pip+=("av")
# Downstream search in examples/usearch_search.py and its test.
"$PYTHON" -c "import usearch" 2>/dev/null || need_pip+=("usearch")
# The CUDA backend's cuBLASLt (headers and libcublasLt.so.13), where nvcc is installed:
# the build compiles c/cuda/ with it (the GPU tests run only where a GPU is).
if command -v nvcc >/dev/null 2>&1; then
    "$PYTHON" -c "import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(
        sysconfig.get_paths()['purelib'], 'nvidia', 'cu13', 'include', 'cublasLt.h')))" 2>/dev/null \
        || need_pip+=("nvidia-cublas>=13,<14")
    # NCCL (nccl.h, libnccl.so.2): a mesh of GPU hosts sums its gradients on the GPUs.
    "$PYTHON" -c "import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(
        sysconfig.get_paths()['purelib'], 'nvidia', 'nccl', 'include', 'nccl.h')))" 2>/dev/null \
        || need_pip+=("nvidia-nccl-cu13>=2.19,<3")
fi
if [ ${#need_pip[@]} -gt 0 ]; then
    echo "installing Python packages: ${need_pip[*]}"
    "$PYTHON" -m pip install -q "${need_pip[@]}"
fi
