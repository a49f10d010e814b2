/* sgemm_bench.c: milliseconds of the CPU trainer's FP32 products (sgemm.h) at
 * the training benchmark's shapes (bench/train_report.py: 64 x 256 tokens,
 * hidden 256): each layer's four projections as forward (y = x W^T), input
 * gradient (dx = dy W) and weight gradient (dW += dy^T x), best of 3 calls.
 *
 * Build with the library's own flags (kernels pick their ISA by attributes):
 *   gcc -O3 -std=c11 -D_GNU_SOURCE -fno-math-errno -fno-trapping-math -fPIC -Ic/include -Ic/src \
 *       c/src/core/error.c c/src/core/executor.c c/src/core/fp8.c c/src/model/quantize.c \
 *       c/src/backend/loss_checks.c c/src/backend/cpu/\*.c bench/sgemm_bench.c -lm -lpthread \
 *       -o /tmp/sgemm_bench
 *   /tmp/sgemm_bench [path [threads]]   path: 2 AVX2, 3 AVX-512 (sgemm.h's enum); threads 1
 */
#include "backend/cpu/sgemm.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    uform_sgemm_path_t path = argc > 1 ? (uform_sgemm_path_t)atoi(argv[1]) : UFORM_SGEMM_AUTO;
    size_t threads = argc > 2 ? (size_t)atoi(argv[2]) : 1;
    if (!uform_sgemm_path_supported(path)) {
        printf("path %d does not run on this machine\n", (int)path);
        return 1;
    }
    uform_executor_t *executor;
    if (uform_executor_for_ram(threads, NULL, 0, &executor) != UFORM_OK) {
        printf("executor: %s\n", uform_last_error());
        return 1;
    }
    const size_t rows = 16384, hidden = 256;
    float *x = malloc(rows * 4 * hidden * sizeof(float)), *dy = malloc(rows * 4 * hidden * sizeof(float));
    float *w = malloc(16 * hidden * hidden * sizeof(float)), *c = malloc(rows * 4 * hidden * sizeof(float));
    float *dw = calloc(16 * hidden * hidden, sizeof(float));
    if (!x || !dy || !w || !c || !dw) return 1;
    for (size_t i = 0; i < rows * 4 * hidden; i++) {
        x[i] = (float)(i % 97) * 1e-2f - 0.4f;
        dy[i] = (float)(i % 89) * 1e-2f - 0.4f;
    }
    for (size_t i = 0; i < 16 * hidden * hidden; i++) w[i] = (float)(i % 83) * 1e-2f - 0.4f;
    static const struct {
        const char *name;
        size_t out, in;
    } layers[] = {{"qkv", 3, 1}, {"out", 1, 1}, {"up", 4, 1}, {"down", 1, 4}};
    static const char *kinds[] = {"forward", "dx", "dW"};
    double total[3] = {0, 0, 0};
    printf("%-5s %-8s %9s %9s\n", "layer", "product", "ms", "GFLOP/s");
    for (size_t l = 0; l < 4; l++) {
        size_t n_out = layers[l].out * hidden, k_in = layers[l].in * hidden;
        for (size_t kind = 0; kind < 3; kind++) {
            double best = 1e30;
            for (int repeat = 0; repeat < 3; repeat++) {
                double t0 = now();
                if (kind == 0)
                    uform_sgemm_path(path, false, executor, rows, n_out, k_in, (uform_matrix_t){x, k_in, false},
                                     (uform_matrix_t){w, k_in, true}, NULL, false, c, n_out);
                else if (kind == 1)
                    uform_sgemm_path(path, false, executor, rows, k_in, n_out, (uform_matrix_t){dy, n_out, false},
                                     (uform_matrix_t){w, k_in, false}, NULL, false, c, k_in);
                else
                    uform_sgemm_path(path, false, executor, n_out, k_in, rows, (uform_matrix_t){dy, n_out, true},
                                     (uform_matrix_t){x, k_in, false}, NULL, true, dw, k_in);
                double seconds = now() - t0;
                if (seconds < best) best = seconds;
            }
            total[kind] += best;
            printf("%-5s %-8s %9.2f %9.1f\n", layers[l].name, kinds[kind], best * 1e3,
                   2.0 * (double)rows * (double)n_out * (double)k_in / best * 1e-9);
        }
    }
    printf("total: forward %.1f ms, dx %.1f ms, dW %.1f ms, all %.1f ms\n", total[0] * 1e3, total[1] * 1e3,
           total[2] * 1e3, (total[0] + total[1] + total[2]) * 1e3);
    uform_executor_free(executor);
    free(x);
    free(dy);
    free(w);
    free(c);
    free(dw);
    return 0;
}
