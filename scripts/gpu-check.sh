#!/usr/bin/env bash
# gpu-check.sh: everything a session with a GPU machine runs there, as one command.
#
# A GPU is lent to few sessions, for minutes, so the first run must bring back all
# it can: every step runs under its own time limit and a failing step does not stop
# the next ones. At the end a summary table; the exit status is non-zero when any
# step failed.
#
#   bash scripts/gpu-check.sh --prepare   here, before: downloads the Python wheels the
#                                         GPU image lacks (cffi, pycparser) into .whl/,
#                                         which .git/info/exclude keeps out of git, and
#                                         Debian's Gloo packages into .whl/debs/ (the
#                                         mesh's engine, for tests/gpu/test_vram_mesh.c)
#   bash scripts/gpu-check.sh             there: with the device tool, carry [".whl"]
#
# Steps: the machine (nvidia-smi, nvcc), the library built with the CUDA backend for
# every GPU class (one fat binary, -gencode sm_80 ... sm_100a), `make test-gpu` (the
# GPU tests, then the benchmarks; a failed test once more under compute-sanitizer),
# `make gpu-fp8-probe` (cuBLASLt's FP8 products, into $OUT/fp8_probe.md), then
# bench/gpu_profile.py (uform's kernels beside PyTorch's, into $OUT/profile.md).
# Where $OUT is set (the device tool's folder
# of files to bring back) the whole log, the summary and docs/benchmarks-gpu.md are
# copied there.
set -u
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--prepare" ]; then
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
    mkdir -p .whl
    # The image's python3 is CPython 3.12 (docs/gpu.md, "Running on a GPU machine").
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d .whl cffi pycparser || exit $?
    # Gloo and what libgloo.so.0 needs at run time (Debian bookworm's; glibc 2.34 or
    # newer there). Unpacked there into a folder of its own, never over /.
    mkdir -p .whl/debs
    (cd .whl/debs && apt-get download libgloo-dev libgloo0 libhiredis0.14 libibverbs1 libnl-3-200 \
        libnl-route-3-200) || { apt-get update -q && (cd .whl/debs && apt-get download libgloo-dev \
        libgloo0 libhiredis0.14 libibverbs1 libnl-3-200 libnl-route-3-200); } || exit $?
    # plain names ('~' and '+' out) for the trip
    for f in .whl/debs/*.deb; do n=$(printf '%s' "$f" | tr '~+' '__'); [ "$f" = "$n" ] || mv "$f" "$n"; done
    exit 0
fi

LOG_DIR=${OUT:-$(mktemp -d)}
LOG="$LOG_DIR/gpu-check.log"
SUMMARY="$LOG_DIR/summary.txt"
: > "$LOG"
declare -a NAMES RESULTS
failed=0

# step NAME SECONDS COMMAND...: runs COMMAND under a time limit, its output to the
# terminal and the log, and records how it ended.
step() {
    local name=$1 limit=$2
    shift 2
    echo "==== $name (limit ${limit}s): $*" | tee -a "$LOG"
    local start=$SECONDS
    timeout --kill-after=10 "$limit" bash -c "$*" 2>&1 | tee -a "$LOG"
    local rc=${PIPESTATUS[0]}
    local took=$((SECONDS - start))
    local result="ok"
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then result="TIMED OUT"; elif [ "$rc" != 0 ]; then result="FAILED (exit $rc)"; fi
    [ "$result" = ok ] || failed=1
    NAMES+=("$name")
    RESULTS+=("$result, ${took}s")
    echo "==== $name: $result in ${took}s" | tee -a "$LOG"
}

if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    step "carried wheels" 120 "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/uform-site .whl/*.whl"
    export PYTHONPATH=/tmp/uform-site${PYTHONPATH:+:$PYTHONPATH}
fi
# Gloo for the mesh (tests/gpu/test_vram_mesh.c) where the image lacks it: the carried
# Debian packages unpacked into /tmp/uform-gloo, found by the compiler and the loader
# through the environment (the Makefile's detection reads it too).
if ! printf '#include <gloo/allgatherv.h>\n' | g++ -x c++ -fsyntax-only - 2>/dev/null && ls .whl/debs/*.deb >/dev/null 2>&1; then
    G=/tmp/uform-gloo
    # dpkg -x, or where the image has no dpkg, the package's data archive through ar and tar
    step "carried Gloo" 60 "mkdir -p $G && for f in .whl/debs/*.deb; do dpkg -x \$f $G 2>/dev/null || ar p \$f \$(ar t \$f | grep '^data.tar') | tar -x -a -C $G -f - 2>/dev/null || ar p \$f \$(ar t \$f | grep '^data.tar') | tar -xJ -C $G || exit 1; done"
    # as -isystem (C_INCLUDE_PATH, CPLUS_INCLUDE_PATH; not CPATH, which is -I): Gloo's
    # headers fail our -Werror (-Wsign-compare in gloo/math.h) like any non-system header
    export C_INCLUDE_PATH=$G/usr/include${C_INCLUDE_PATH:+:$C_INCLUDE_PATH}
    export CPLUS_INCLUDE_PATH=$G/usr/include${CPLUS_INCLUDE_PATH:+:$CPLUS_INCLUDE_PATH}
    export LIBRARY_PATH=$G/usr/lib:$G/usr/lib/x86_64-linux-gnu:$G/lib/x86_64-linux-gnu${LIBRARY_PATH:+:$LIBRARY_PATH}
    export LD_LIBRARY_PATH=$G/usr/lib:$G/usr/lib/x86_64-linux-gnu:$G/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
step "machine" 60 "nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -2; python3 --version; nproc"
JOBS=$(nproc 2>/dev/null || echo 4)
step "build (library, CUDA backend)" 240 "make -j$JOBS lib && grep -E '^(cuda|mesh)=' c/build/media.txt"
step "make test-gpu" 300 "make --no-print-directory -j$JOBS test-gpu"
# which FP8 products cuBLASLt accepts, their errors and speed (bench/gpu_fp8_probe.cu)
step "FP8 probe (bench/gpu_fp8_probe.cu)" 60 "make --no-print-directory gpu-fp8-probe | tee $LOG_DIR/fp8_probe.md"
# where the GPU's time goes, uform's kernels beside PyTorch's (torch.profiler)
step "profile (bench/gpu_profile.py)" 120 "python3 bench/gpu_profile.py --output $LOG_DIR/profile.md"
# A GPU test that failed runs once more under compute-sanitizer's memcheck, whose first
# report names the kernel and the bad access, while the device tool's 10 minutes last
# (the summary below needs a few seconds).
for test in c/build/gpu/test_*; do
    name=$(basename "$test")
    grep -q "^== $name FAILED" "$LOG" || continue
    left=$((560 - SECONDS))
    if ! command -v compute-sanitizer >/dev/null || [ "$left" -lt 30 ]; then continue; fi
    step "$name under compute-sanitizer" $((left < 120 ? left : 120)) \
        "compute-sanitizer --tool memcheck --print-limit 10 $test"
done

# A GPU that the tests do not reach (a driver older than the CUDA 13 runtime they are
# built with answers "no GPU found") makes them skip and pass: here that is a failure.
if nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && grep -q '^skip test_.*no GPU found' "$LOG"; then
    echo "FAIL: nvidia-smi lists a GPU but GPU tests skipped (the driver must be 580 or newer for CUDA 13)" | tee -a "$LOG"
    failed=1
    NAMES+=("GPU reached by the tests")
    RESULTS+=("NO: they skipped")
fi
{
    echo
    echo "| step | result |"
    echo "| --- | --- |"
    for i in "${!NAMES[@]}"; do echo "| ${NAMES[$i]} | ${RESULTS[$i]} |"; done
    grep -h -E "^== test_|^== gpu_(attention|columns)_bench FAILED|^\| (inference|training forward|training backward), |^\| (bias sums|FP32 sums)|^test_[a-z_]+: [0-9]+ passed|^[0-9]+ passed|^skip |^FAIL|\| FAIL \||^\| (uform|torch)|^First step|^learns_retrieval|^\| (CPU|GPU) \(init" "$LOG" || true
} | tee "$SUMMARY" | tee -a "$LOG"
[ -n "${OUT:-}" ] && [ -f docs/benchmarks-gpu.md ] && cp docs/benchmarks-gpu.md "$OUT/"
exit $failed
