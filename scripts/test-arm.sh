#!/usr/bin/env bash
# test-arm.sh: runs the aarch64 build of the C tests under qemu-user, once per
# emulated CPU, and prints a table (`make test-arm` builds the binaries first).
#
#   NEON alone   -cpu max,sve=off       every test of ARM_TESTS (the API, safetensors, FP8,
#                                       trainer, training GEMM, ops, kernels, the
#                                       reference outputs) on every class it runs; of
#                                       test_api the parts that load, describe, pin
#                                       classes and encode (API_TESTS): its arena,
#                                       progress and queueing tests are the same C on
#                                       every architecture, run natively under ASan,
#                                       and take over ten minutes emulated; of
#                                       test_trainer all but its allocation extremes
#   SVE 128/256/512 bits                 the SVE and SVE_BF16 classes alone (their code is
#                                       what the vector length changes): kernels, ops,
#                                       reference outputs; and the training GEMM's paths;
#                                       at 512 bits all but test_ops (qemu runs SVE past
#                                       128 bits about four times slower, and the SVE
#                                       classes' own code, GEMMs and attention, is what
#                                       test_kernels and test_sgemm run there)
#
# Besides each test's own checks it compares digests across runs: the GEMM of
# every FMA class (HASWELL on this machine, NEON, SVE at each length) and the
# reference encodes of NEON and SVE must give the same bits, and so must
# NEON_BF16's and SVE_BF16's (BFDOT chains) with each other. Emulation proves
# correctness, not speed: nothing here is timed against anything.
set -uo pipefail

BUILD=${BUILD:-c/build}
PYTHON=${PYTHON:-python3}
ARM=$BUILD/arm
QEMU=${QEMU_AARCH64:-qemu-aarch64}
LOGS=$ARM/logs
# Each emulated run is bounded, so a hang fails the run instead of stalling CI.
LIMIT=${UFORM_ARM_TEST_SECONDS:-900}
rm -rf "$LOGS"
mkdir -p "$LOGS"

# (each list longest first; the runs start in that order)
FULL=(test_api test_kernels test_trainer test_ops reference_outputs test_sgemm test_safetensors test_fp8)
VECTOR=(test_kernels test_ops test_sgemm reference_outputs)
VECTOR_512=(test_kernels test_sgemm reference_outputs)
# (encode_scalars is left out too: the output conversions are portable C, and it
# alone takes four minutes emulated.)
API_TESTS=(version_and_errors executors load_and_describe cpu_classes quantization vram
           bad_files submission_failures)
# test_trainer without "workspace extremes" (allocation limits, 20 s natively).
TRAINER_TESTS=(objective replicas "shared choices" "resume progress" submitted "bad input" concurrent diverged
               "resume validates")
CPUS=("max,sve=off" "max,sve128=on" "max,sve256=on" "max,sve512=on")
CPUS_LONGEST_FIRST=("max,sve256=on" "max,sve512=on" "max,sve=off" "max,sve128=on")

# The float64 reference outputs, written here by the PyTorch reference, and
# checked natively first (so a failure under emulation is the Arm code's).
fixture=$ARM/fixture
rm -rf "$fixture"
if ! "$PYTHON" tests/reference/write_fixture.py "$fixture" >"$LOGS/fixture.log" 2>&1; then
    echo "test-arm: writing the reference fixture failed:"; tail -n 20 "$LOGS/fixture.log"; exit 1
fi
if ! "$BUILD/native/reference_outputs" "$fixture" >"$LOGS/native-reference.log" 2>&1; then
    echo "test-arm: the reference outputs fail natively:"; tail -n 20 "$LOGS/native-reference.log"; exit 1
fi
"$BUILD/native/test_kernels" >"$LOGS/native-kernels.log" 2>&1 || {
    echo "test-arm: test_kernels fails natively:"; tail -n 20 "$LOGS/native-kernels.log"; exit 1; }

# One emulated run: name of the log, cpu, test; appends a row to the table.
rows=()
failures=0
run_one() {  # cpu, test, class to test alone or ""
    local cpu=$1 test=$2 only=$3 log="$LOGS/${1//[,=]/_}.$2.log" args=()
    [ "$test" = reference_outputs ] && args=("$fixture")
    [ "$test" = test_api ] && args=("${API_TESTS[@]}")
    [ "$test" = test_trainer ] && args=("${TRAINER_TESTS[@]}")
    local label=$test
    # shellcheck disable=SC2206 # the class names are words
    if [ -n "$only" ] && [ "$test" != test_sgemm ]; then args+=($only); label="$test $only"; fi
    local start end rc
    start=$(date +%s.%N)
    timeout "$LIMIT" "$QEMU" -cpu "$cpu" "$ARM/tests/$test" "${args[@]}" >"$log" 2>&1
    rc=$?
    end=$(date +%s.%N)
    local result="ok"
    if [ $rc -ne 0 ]; then
        result="FAILED (exit $rc)"
        [ $rc -eq 124 ] && result="FAILED (over ${LIMIT} s)"
    fi
    printf '%s|%s|%s|%.0f|%s\n' "$cpu" "$label" "$result" "$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')" \
        "$(grep -E '[0-9]+ passed' "$log" | tail -n 1)" >"$log.row"
}

# Two runs at a time (the machine's cores); each test's threads are emulated.
# The wide vectors' runs first: they are the longest (qemu), and starting the
# longest first keeps both cores busy to the end.
jobs_running=0
for cpu in "${CPUS_LONGEST_FIRST[@]}"; do
    if [ "$cpu" = "max,sve=off" ]; then tests=("${FULL[@]}") only=""
    elif [ "$cpu" = "max,sve512=on" ]; then tests=("${VECTOR_512[@]}") only="sve sve_bf16"
    else tests=("${VECTOR[@]}") only="sve sve_bf16"; fi
    for test in "${tests[@]}"; do
        run_one "$cpu" "$test" "$only" &
        jobs_running=$((jobs_running + 1))
        if [ $jobs_running -ge 2 ]; then wait -n; jobs_running=$((jobs_running - 1)); fi
    done
done
wait

printf '\n%-16s %-32s %-22s %8s  %s\n' "emulated CPU" "test" "result" "seconds" "checks"
for cpu in "${CPUS[@]}"; do
    for row in "$LOGS/${cpu//[,=]/_}".*.log.row; do
        IFS='|' read -r r_cpu r_test r_result r_seconds r_checks <"$row"
        printf '%-16s %-32s %-22s %8s  %s\n' "$r_cpu" "$r_test" "$r_result" "$r_seconds" "$r_checks"
        [ "$r_result" = ok ] || failures=$((failures + 1))
    done
done

# Digests: the same bits across classes, vector lengths and machines.
digest_check() {  # pattern, what
    local pattern=$1 what=$2
    local values
    values=$(grep -h -E "$pattern" "$LOGS"/*.log 2>/dev/null | sed 's/.*: *//' | sort -u)
    local count
    count=$(printf '%s\n' "$values" | grep -c . || true)
    if [ "$count" -eq 1 ]; then
        echo "same bits: $what ($(grep -l -E "$pattern" "$LOGS"/*.log | wc -l) runs agree)"
    elif [ "$count" -eq 0 ]; then
        echo "FAILED: no digest of $what was printed"; failures=$((failures + 1))
    else
        echo "FAILED: $what differ:"; grep -H -E "$pattern" "$LOGS"/*.log; failures=$((failures + 1))
    fi
}
echo
digest_check '^gemm digest (haswell|skylake|neon|sve):' "the GEMM of HASWELL (native), NEON and SVE at every length"
digest_check '^encode digest (haswell|skylake|neon|sve):' "the reference encodes of HASWELL (native), NEON and SVE at every length"
digest_check '^gemm digest (neon_bf16|sve_bf16):' "the GEMM of NEON_BF16 and SVE_BF16 at every length"
digest_check '^encode digest (neon_bf16|sve_bf16):' "the reference encodes of NEON_BF16 and SVE_BF16 at every length"

if [ $failures -ne 0 ]; then
    echo "test-arm: $failures failures (logs in $LOGS)"
    exit 1
fi
echo "test-arm: every emulated run passed (logs in $LOGS)"
