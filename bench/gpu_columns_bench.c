/* gpu_columns_bench.c: the CUDA backend's column sums (columns.cu) with one
 * column a thread against four (uform_cuda_column_lanes; both give the same
 * bits, which tests/gpu/test_cuda_ops.c checks and this program checks again
 * on its own shapes), side by side in one process on the same inputs.
 *
 * Workloads: the passes of one layer of the training step's backward at the
 * benchmark's shape (bench/gpu_train_report.py: 32 rows of 1024 tokens,
 * hidden 768): the down and output projections' bias sums with dy's rounding
 * to BF16 (width H), the up projection's with GELU's backward (4H, reading
 * GELU's input too), the qkv projection's with the rotary backward (3H), and
 * the FP32 sums alone (a layer norm's bias, width H). Each variant: 2 calls to
 * warm up, then 5 rounds of 10 calls, alternating variants round by round; the
 * best round, in ms a call, and the bytes a call must move (dy read, the
 * BF16 rows written, GELU's input or the rotary tables read) over that time.
 * Built and run by `make test-gpu`; without a GPU (or without the CUDA
 * backend) it says why and exits 0. */
#include "uform.h"

#include <stdio.h>

#ifndef UFORM_HAVE_CUDA
int main(void) {
    printf("skip gpu_columns_bench: this build has no CUDA backend\n");
    return 0;
}
#else
#include "backend/backend.h"
#include "../c/cuda/cuda_backend.h"
#include "gpu_bench_start.h"

#include <stdlib.h>
#include <string.h>

#define ROWS 32768
#define HIDDEN 768
#define ROUNDS 5
#define CALLS 10

typedef struct {
    const char *name;
    size_t width;
    bool rounded, gelu, rope;
} workload_t;

static uint64_t state = 0x9e3779b97f4a7c15ull;
static float next_float(void) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return (float)((double)(state >> 11) * 0x1p-53 * 2 - 1);
}

/* Bytes a call moves at the least: dy read, its BF16 rows written, GELU's
 * input read, the rotary tables read once a row. */
static double bytes_moved(const workload_t *w) {
    double elements = (double)ROWS * (double)w->width;
    return elements * (4 + (w->rounded ? 2 : 0) + (w->gelu ? 4 : 0)) + (w->rope ? ROWS * 2.0 * 32 * 4 : 0);
}

static void run_once(uform_backend_t *gpu, const workload_t *w, const float *gdy, const float *gpre,
                     const float *gtables, float *gsums) {
    uform_cuda_column_pass(gpu, gdy, w->gelu ? gpre : NULL, w->rope ? gtables : NULL,
                           w->rope ? gtables + ROWS * 32 : NULL, ROWS, w->width, w->rounded, gsums);
}

static int bench(uform_backend_t *gpu, const workload_t *w, const float *gdy, const float *gpre,
                 const float *gtables) {
    float *gsums[2] = {gpu->ops->alloc(gpu, w->width * 4), gpu->ops->alloc(gpu, w->width * 4)};
    float *sums[2] = {malloc(w->width * 4), malloc(w->width * 4)};
    size_t used[2] = {0, 0};
    if (!gsums[0] || !gsums[1] || !sums[0] || !sums[1]) {
        printf("gpu_columns_bench: out of memory for %s: %s\n", w->name, uform_last_error());
        return 1;
    }
    static const size_t lanes[2] = {1, 0};   /* 0: the default, four where the width allows */
    double best[2] = {1e30, 1e30};
    for (int v = 0; v < 2; v++) {   /* warm-up, and the sums the variants must agree on */
        gpu->ops->zero(gpu, gsums[v], w->width * 4);
        uform_cuda_column_lanes(gpu, lanes[v]);
        run_once(gpu, w, gdy, gpre, gtables, gsums[v]);
        used[v] = uform_cuda_column_lanes_last(gpu);
        gpu->ops->download(gpu, sums[v], gsums[v], w->width * 4);
        run_once(gpu, w, gdy, gpre, gtables, gsums[v]);
    }
    uform_status_t status = gpu->ops->synchronize(gpu);
    bool same = memcmp(sums[0], sums[1], w->width * 4) == 0;
    for (int round = 0; round < ROUNDS && status == UFORM_OK; round++)
        for (int v = 0; v < 2; v++) {
            uform_cuda_column_lanes(gpu, lanes[v]);
            double start = now();
            for (int i = 0; i < CALLS; i++) run_once(gpu, w, gdy, gpre, gtables, gsums[v]);
            status = gpu->ops->synchronize(gpu);
            double took = (now() - start) / CALLS;
            if (took < best[v]) best[v] = took;
        }
    uform_cuda_column_lanes(gpu, 0);
    if (status != UFORM_OK) {
        printf("gpu_columns_bench: %s failed: %s\n", w->name, uform_last_error());
        return 1;
    }
    double bytes = bytes_moved(w);
    printf("| %-48s | %5zu | %zu, %zu | %7.3f | %7.3f | %6.0f | %6.0f | %5.2fx | %s |\n", w->name, w->width, used[0],
           used[1], 1e3 * best[0], 1e3 * best[1], bytes / best[0] * 1e-9, bytes / best[1] * 1e-9, best[0] / best[1],
           same ? "yes" : "NO");
    gpu->ops->free(gpu, gsums[0]), gpu->ops->free(gpu, gsums[1]);
    free(sums[0]), free(sums[1]);
    return same ? 0 : 1;
}

int main(void) {
    uform_backend_t gpu;
    char name[256];
    int started = gpu_bench_start("gpu_columns_bench", &gpu, name, sizeof(name));
    if (started) return started < 0 ? 0 : 1;
    size_t widest = (size_t)ROWS * 4 * HIDDEN;
    float *host = malloc(widest * 4);
    float *gdy = gpu.ops->alloc(&gpu, widest * 4), *gpre = gpu.ops->alloc(&gpu, widest * 4);
    float *gtables = gpu.ops->alloc(&gpu, (size_t)ROWS * 2 * 32 * 4);
    if (!host || !gdy || !gpre || !gtables) {
        printf("gpu_columns_bench: out of memory: %s\n", uform_last_error());
        return 1;
    }
    for (size_t i = 0; i < widest; i++) host[i] = next_float();
    gpu.ops->upload(&gpu, gdy, host, widest * 4);
    for (size_t i = 0; i < widest; i++) host[i] = 3 * next_float();
    gpu.ops->upload(&gpu, gpre, host, widest * 4);
    gpu.ops->upload(&gpu, gtables, host, (size_t)ROWS * 2 * 32 * 4);
    const workload_t workloads[] = {
        {"bias sums + BF16 rounding (down, out)", HIDDEN, true, false, false},
        {"bias sums + BF16 rounding, GELU's backward (up)", 4 * HIDDEN, true, true, false},
        {"bias sums + BF16 rounding, rotary backward (qkv)", 3 * HIDDEN, true, false, true},
        {"FP32 sums alone (a layer norm's bias)", HIDDEN, false, false, false},
    };
    printf("gpu_columns_bench on %s: the column sums' pass, one column a thread against four (%d rows, "
           "best of %d rounds of %d calls, alternating; GB/s: the bytes a call must move)\n\n",
           name, ROWS, ROUNDS, CALLS);
    printf("| %-48s | %5s | %s | %7s | %7s | %6s | %6s | %6s | %s |\n|---|---:|---|---:|---:|---:|---:|---:|---|\n",
           "workload", "width", "lanes", "1: ms", "4: ms", "GB/s", "GB/s", "speed", "same bits");
    int failures = 0;
    for (size_t i = 0; i < sizeof(workloads) / sizeof(workloads[0]); i++)
        failures += bench(&gpu, &workloads[i], gdy, gpre, gtables);
    gpu.ops->free(&gpu, gdy), gpu.ops->free(&gpu, gpre), gpu.ops->free(&gpu, gtables);
    free(host);
    uform_cuda_backend_free(&gpu);
    return failures ? 1 : 0;
}
#endif
