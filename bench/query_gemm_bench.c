/* query_gemm_bench.c: the block products of one short query through a whole
 * model, BF16 weights against E4M3, per CPU class.
 *
 * gemm_bench times one matrix again and again, so its weights sit in L2; a
 * query's products instead read each of a depth-12, hidden-512 model's 48
 * matrices once (73 MiB in BF16, 37 MiB in E4M3), from L3 or memory. This
 * runs all 48 in order for m rows (a query of m tokens), 15 sweeps per model
 * in three alternating blocks (each model's weights hot in its own block, as
 * when one model serves many queries), and prints the best sweep of each.
 *
 * Build with the library's own flags (kernels pick their ISA by attributes):
 *   gcc -O3 -std=c11 -D_GNU_SOURCE -fno-math-errno -fno-trapping-math -fPIC -Ic/include -Ic/src \
 *       c/src/core/error.c c/src/core/executor.c c/src/core/fp8.c c/src/model/quantize.c \
 *       c/src/backend/loss_checks.c c/src/backend/cpu/\*.c bench/query_gemm_bench.c -lm -lpthread \
 *       -o /tmp/query_gemm_bench
 *   /tmp/query_gemm_bench [class [threads]]   class: uform.h's number (9 AMX, 4 SAPPHIRE, 2
 *                                             HASWELL; default AMX), threads (default 2)
 */
#include "backend/cpu/kernels.h"
#include "model/quantize.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

enum { DEPTH = 12, HIDDEN = 512, MATRICES = 4 * DEPTH, MAX_ROWS = 128 };

int main(int argc, char **argv) {
    uform_cpu_class_t cpu_class = argc > 1 ? (uform_cpu_class_t)atoi(argv[1]) : UFORM_CPU_CLASS_AMX;
    size_t threads = argc > 2 ? (size_t)atoi(argv[2]) : 2;
    const uform_cpu_kernels_t *kernels = uform_cpu_kernels_for(cpu_class);
    if (!kernels || !uform_cpu_class_supported(cpu_class)) {
        printf("class %d does not run on this machine\n", (int)cpu_class);
        return 1;
    }
    uform_executor_t *executor;
    if (uform_executor_for_ram(threads, NULL, 0, &executor) != UFORM_OK) {
        printf("executor: %s\n", uform_last_error());
        return 1;
    }
    /* qkv, out, MLP up, MLP down: [n, k] */
    static const size_t shapes[4][2] = {{3 * HIDDEN, HIDDEN}, {HIDDEN, HIDDEN}, {4 * HIDDEN, HIDDEN},
                                        {HIDDEN, 4 * HIDDEN}};
    static uform_packed_t models[2][MATRICES]; /* BF16, E4M3 */
    const size_t most = 4 * HIDDEN * 4 * HIDDEN;
    uint16_t *w = malloc(most * sizeof(uint16_t));
    uint8_t *codes = malloc(most);
    float *scales = malloc(4 * HIDDEN * sizeof(float)), *row = malloc(4 * HIDDEN * sizeof(float));
    float *x = malloc(MAX_ROWS * 4 * HIDDEN * sizeof(float)), *y = malloc(MAX_ROWS * 4 * HIDDEN * sizeof(float));
    float *bias = calloc(4 * HIDDEN, sizeof(float));
    if (!w || !codes || !scales || !row || !x || !y || !bias) return 1;
    unsigned seed = 1;
    for (size_t i = 0; i < MATRICES; i++) {
        size_t n = shapes[i % 4][0], k = shapes[i % 4][1];
        for (size_t e = 0; e < n * k; e++) {
            seed = seed * 1664525u + 1013904223u;
            w[e] = uform_f32_to_bf16((float)((seed >> 8) % 2000) * 1e-3f - 1.0f);
        }
        for (size_t r = 0; r < n; r++) {
            for (size_t p = 0; p < k; p++) row[p] = uform_bf16_to_f32(w[r * k + p]);
            scales[r] = uform_quantize_e4m3_row(row, k, codes + r * k);
        }
        if (kernels->pack(w, n, k, &models[0][i]) != UFORM_OK ||
            kernels->pack_e4m3(codes, scales, n, k, &models[1][i]) != UFORM_OK) {
            printf("pack: %s\n", uform_last_error());
            return 1;
        }
    }
    for (size_t i = 0; i < MAX_ROWS * 4 * HIDDEN; i++) x[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;

    static const size_t rows[] = {1, 8, 12, 16, 32, 128};
    printf("class %s, %zu threads, the 48 products of depth %d hidden %d, best sweep:\n",
           uform_cpu_class_name(cpu_class), threads, DEPTH, HIDDEN);
    printf("%5s %10s %10s %12s\n", "rows", "BF16 ms", "E4M3 ms", "E4M3 / BF16");
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        size_t m = rows[r];
        double best[2] = {1e30, 1e30};
        for (int block = 0; block < 3; block++)
            for (int model = 0; model < 2; model++)
                for (int sweep = 0; sweep < 15; sweep++) {
                    double t0 = now();
                    for (size_t i = 0; i < MATRICES; i++) {
                        const uform_packed_t *packed = &models[model][i];
                        kernels->gemm(executor, packed, x, packed->k, m, bias, UFORM_GEMM_STORE, y, packed->n);
                    }
                    double seconds = now() - t0;
                    if (sweep >= 3 && seconds < best[model]) best[model] = seconds; /* 3 to warm up */
                }
        printf("%5zu %10.3f %10.3f %11.2fx\n", m, best[0] * 1e3, best[1] * 1e3, best[1] / best[0]);
    }
    for (int model = 0; model < 2; model++)
        for (size_t i = 0; i < MATRICES; i++) uform_packed_free(&models[model][i]);
    uform_executor_free(executor);
    free(w);
    free(codes);
    free(scales);
    free(row);
    free(x);
    free(y);
    free(bias);
    return 0;
}
