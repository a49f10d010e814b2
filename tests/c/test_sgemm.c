/* test_sgemm.c: the FP32 GEMM of the CPU trainer (cpu/sgemm.h) against a
 * float64 reference, on every path this machine runs, and its determinism
 * contract, bit for bit.
 *
 * Build (from the repository root):
 *   make c/build/tests/test_sgemm && c/build/tests/test_sgemm
 * or alone:
 *   gcc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -O1 -g -fsanitize=address,undefined \
 *       -Ic/include -Ic/src c/src/core/error.c c/src/core/executor.c c/src/backend/cpu/\*.c \
 *       tests/c/test_sgemm.c -lm -pthread -o /tmp/test_sgemm && /tmp/test_sgemm
 *
 * Error bound (u = 2^-24, the FP32 unit roundoff): c[i, j] sums the k + 2
 * terms c0 (when accumulating), a[i, p] b[p, j] for p in order, and the bias,
 * left to right. On the portable path each product is rounded once and each
 * of the k + 1 additions once; on the FMA paths each FMA rounds once (the
 * product exactly inside) and the bias addition once. Either way a term goes
 * through at most k + 2 roundings, so by the standard recursive-summation
 * argument (Higham, Accuracy and Stability, 3.1):
 *   |c - exact| <= gamma(k + 2) S,  gamma(n) = n u / (1 - n u),
 *   S = |c0| + sum_p |a[i, p] b[p, j]| + |bias[j]|,
 * which is (k + 2) u S to first order. The float64 reference is off from the
 * exact value by at most gamma_64(k + 2) S (u = 2^-53), added to the bound.
 * No test value comes near the subnormal range, where the bound would need an
 * absolute term. */
#include "backend/cpu/sgemm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

/* Uniform in [-1, 1), away from zero by at least 2^-20 so that no product
 * is anywhere near the subnormal range. */
static float rng_float(void) {
    float x = (float)((double)(rng_next() >> 11) * 0x1p-52 - 1.0);
    return fabsf(x) < 0x1p-20f ? 0x1p-20f : x;
}

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        printf("out of memory\n");
        exit(2);
    }
    return p;
}

static const float SENTINEL = 12345.5f; /* in c's padding columns: must stay */

typedef struct {
    size_t m, n, k, pad;
    bool a_t, b_t, accumulate, with_bias;
    float *a, *b;      /* stored as the flags say, rows `pad` floats wider */
    size_t a_stride, b_stride;
    float *bias;       /* [n] or NULL */
    float *c0;         /* initial c [m, c_stride], padding = SENTINEL */
    size_t c_stride;
} problem_t;

static problem_t problem_make(size_t m, size_t n, size_t k, size_t pad, bool a_t, bool b_t,
                              bool accumulate, bool with_bias) {
    problem_t p = {m, n, k, pad, a_t, b_t, accumulate, with_bias, NULL, NULL, 0, 0, NULL, NULL, 0};
    size_t a_rows = a_t ? k : m, a_cols = a_t ? m : k;
    size_t b_rows = b_t ? n : k, b_cols = b_t ? k : n;
    p.a_stride = a_cols + pad;
    p.b_stride = b_cols + pad;
    p.c_stride = n + pad;
    p.a = xmalloc(a_rows * p.a_stride * sizeof(float));
    p.b = xmalloc(b_rows * p.b_stride * sizeof(float));
    for (size_t i = 0; i < a_rows * p.a_stride; i++) p.a[i] = rng_float();
    for (size_t i = 0; i < b_rows * p.b_stride; i++) p.b[i] = rng_float();
    if (with_bias) {
        p.bias = xmalloc(n * sizeof(float));
        for (size_t j = 0; j < n; j++) p.bias[j] = rng_float();
    }
    p.c0 = xmalloc(m * p.c_stride * sizeof(float));
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < p.c_stride; j++)
            p.c0[i * p.c_stride + j] = j < n ? rng_float() : SENTINEL;
    return p;
}

static void problem_free(problem_t *p) {
    free(p->a);
    free(p->b);
    free(p->bias);
    free(p->c0);
}

static float op_a(const problem_t *p, size_t i, size_t q) {
    return p->a_t ? p->a[q * p->a_stride + i] : p->a[i * p->a_stride + q];
}
static float op_b(const problem_t *p, size_t q, size_t j) {
    return p->b_t ? p->b[j * p->b_stride + q] : p->b[q * p->b_stride + j];
}

/* Runs rows [first, first + rows) of the problem on c (a copy of c0 made here). */
static float *run_rows(const problem_t *p, uform_sgemm_path_t path, bool small_blocks,
                       uform_executor_t *executor, size_t first, size_t rows) {
    float *c = xmalloc(p->m * p->c_stride * sizeof(float));
    memcpy(c, p->c0, p->m * p->c_stride * sizeof(float));
    uform_matrix_t a = {p->a_t ? p->a + first : p->a + first * p->a_stride, p->a_stride, p->a_t};
    uform_matrix_t b = {p->b, p->b_stride, p->b_t};
    uform_sgemm_path(path, small_blocks, executor, rows, p->n, p->k, a, b, p->bias,
                     p->accumulate, c + first * p->c_stride, p->c_stride);
    return c;
}

static float *run(const problem_t *p, uform_sgemm_path_t path, bool small_blocks,
                  uform_executor_t *executor) {
    return run_rows(p, path, small_blocks, executor, 0, p->m);
}

/* Worst |c - reference| / bound over the problem (<= 1 passes); also checks
 * that the padding columns kept their sentinel. */
static double check_reference(const problem_t *p, const float *c, bool *padding_ok) {
    const double u32 = 0x1p-24, u64 = 0x1p-53;
    double terms = (double)p->k + 2.0;
    double gamma = terms * u32 / (1.0 - terms * u32) + terms * u64 / (1.0 - terms * u64);
    double worst = 0.0;
    *padding_ok = true;
    for (size_t i = 0; i < p->m; i++) {
        for (size_t j = 0; j < p->n; j++) {
            double sum = p->accumulate ? p->c0[i * p->c_stride + j] : 0.0;
            double s = fabs(sum);
            for (size_t q = 0; q < p->k; q++) {
                double t = (double)op_a(p, i, q) * (double)op_b(p, q, j);
                sum += t;
                s += fabs(t);
            }
            if (p->bias) {
                sum += p->bias[j];
                s += fabs(p->bias[j]);
            }
            double error = fabs((double)c[i * p->c_stride + j] - sum);
            double bound = gamma * s;
            double ratio = bound > 0 ? error / bound : (error > 0 ? INFINITY : 0.0);
            if (!(ratio <= worst)) worst = ratio; /* NaN propagates */
        }
        for (size_t j = p->n; j < p->c_stride; j++)
            if (c[i * p->c_stride + j] != SENTINEL) *padding_ok = false;
    }
    return worst;
}

static bool same_bits(const problem_t *p, const float *x, const float *y) {
    return memcmp(x, y, p->m * p->c_stride * sizeof(float)) == 0;
}

static const char *path_name(uform_sgemm_path_t path) {
    switch (path) {
    case UFORM_SGEMM_AUTO: return "auto";
    case UFORM_SGEMM_PORTABLE: return "portable";
    case UFORM_SGEMM_AVX2: return "avx2";
    case UFORM_SGEMM_AVX512: return "avx512";
    case UFORM_SGEMM_NEON: return "neon";
    case UFORM_SGEMM_SVE: return "sve";
    }
    return "?";
}

static uform_sgemm_path_t paths[5];
static size_t paths_count;

/* Every path, all 4 transpose combinations, accumulate and bias on and off,
 * sizes from an awkward set (each m with each n, k cycling through the set),
 * strides wider than the rows. */
static void test_reference(void) {
    static const size_t sizes[] = {1, 2, 3, 7, 15, 16, 17, 33, 64, 100};
    const size_t count = sizeof(sizes) / sizeof(sizes[0]);
    for (size_t path_i = 0; path_i < paths_count; path_i++) {
        uform_sgemm_path_t path = paths[path_i];
        for (unsigned flags = 0; flags < 16; flags++) {
            bool a_t = flags & 1, b_t = flags & 2, accumulate = flags & 4, with_bias = flags & 8;
            double worst = 0.0;
            bool padding_ok = true;
            size_t worst_m = 0, worst_n = 0, worst_k = 0;
            for (size_t mi = 0; mi < count; mi++)
                for (size_t ni = 0; ni < count; ni++) {
                    size_t m = sizes[mi], n = sizes[ni], k = sizes[(mi + 3 * ni + flags) % count];
                    size_t pad = (mi + ni) % 3 == 0 ? 0 : 5;
                    problem_t p = problem_make(m, n, k, pad, a_t, b_t, accumulate, with_bias);
                    /* small blocks every other problem: both blockings checked */
                    float *c = run(&p, path, (mi + ni) & 1, NULL);
                    bool pad_ok;
                    double ratio = check_reference(&p, c, &pad_ok);
                    padding_ok = padding_ok && pad_ok;
                    if (!(ratio <= worst)) {
                        worst = ratio;
                        worst_m = m, worst_n = n, worst_k = k;
                    }
                    free(c);
                    problem_free(&p);
                }
            CHECK(worst <= 1.0,
                  "%s a_t=%d b_t=%d accumulate=%d bias=%d: error %.3g x bound at m=%zu n=%zu k=%zu",
                  path_name(path), a_t, b_t, accumulate, with_bias, worst, worst_m, worst_n,
                  worst_k);
            CHECK(padding_ok, "%s a_t=%d b_t=%d accumulate=%d bias=%d: padding columns written",
                  path_name(path), a_t, b_t, accumulate, with_bias);
        }
    }
}

/* k = 0: c = (accumulate ? c : +0) + bias, exactly; m or n = 0: nothing. */
static void test_empty(void) {
    for (size_t path_i = 0; path_i < paths_count; path_i++) {
        uform_sgemm_path_t path = paths[path_i];
        for (unsigned flags = 0; flags < 4; flags++) {
            bool accumulate = flags & 1, with_bias = flags & 2;
            problem_t p = problem_make(5, 19, 0, 3, false, true, accumulate, with_bias);
            float *c = run(&p, path, false, NULL);
            bool ok = true;
            for (size_t i = 0; i < p.m; i++)
                for (size_t j = 0; j < p.c_stride; j++) {
                    float want = p.c0[i * p.c_stride + j];
                    if (j < p.n) {
                        want = accumulate ? want : 0.0f;
                        if (with_bias) want += p.bias[j];
                    }
                    if (memcmp(&c[i * p.c_stride + j], &want, sizeof(float)) != 0) ok = false;
                }
            CHECK(ok, "%s k=0 accumulate=%d bias=%d", path_name(path), accumulate, with_bias);
            free(c);
            problem_free(&p);
        }
        /* m = 0 and n = 0 touch nothing (NULL operands would crash if read). */
        float c = SENTINEL;
        uform_matrix_t none = {NULL, 0, false};
        uform_sgemm_path(path, false, NULL, 0, 4, 4, none, none, NULL, false, &c, 4);
        uform_sgemm_path(path, false, NULL, 4, 0, 4, none, none, NULL, false, &c, 4);
        CHECK(c == SENTINEL, "%s m=0 / n=0 wrote c", path_name(path));
    }
}

/* The determinism contract: the same bits for 1, 2 and 3 threads, both
 * blockings, and each row computed alone; k spans several k blocks, n ends in
 * a partial panel, m in a partial row group. Also checks the reference on
 * these bigger shapes, and that the FMA paths (AVX2 and AVX-512 on x86)
 * agree. */
static void test_determinism(uform_executor_t *executors[3]) {
    /* 37 rows: partial row groups; 600 columns: more than one B block; 130
     * rows: more than one packed A block per task; k = 300 against m = 60
     * and n = 70: a long k, cut one task per thread (the weight gradient's
     * case). Each has over 2^20 multiply-adds, so the pool is used, and 2
     * and 3 threads split it into different tiles. */
    static const size_t shapes[][3] = {{37, 100, 300}, {30, 600, 60}, {130, 40, 300}, {60, 70, 300}};
    for (size_t shape = 0; shape < sizeof(shapes) / sizeof(shapes[0]); shape++) {
        size_t m = shapes[shape][0], n = shapes[shape][1], k = shapes[shape][2];
        for (unsigned flags = 0; flags < 8; flags++) {
            bool a_t = flags & 1, b_t = flags & 2, accumulate_bias = flags & 4;
            problem_t p = problem_make(m, n, k, 3, a_t, b_t, accumulate_bias, accumulate_bias);
            float *fma_result = NULL;
            for (size_t path_i = 0; path_i < paths_count; path_i++) {
                uform_sgemm_path_t path = paths[path_i];
                float *base = run(&p, path, false, NULL);
                bool pad_ok;
                double ratio = check_reference(&p, base, &pad_ok);
                CHECK(ratio <= 1.0 && pad_ok, "%s %zux%zux%zu flags %u: error %.3g x bound%s",
                      path_name(path), m, n, k, flags, ratio, pad_ok ? "" : ", padding written");
                bool threads_ok = true;
                for (size_t t = 0; t < 3; t++)
                    for (int small = 0; small < 2; small++) {
                        float *c = run(&p, path, small, executors[t]);
                        if (!same_bits(&p, base, c)) threads_ok = false;
                        free(c);
                    }
                CHECK(threads_ok, "%s %zux%zux%zu flags %u: bits depend on threads or blocks",
                      path_name(path), m, n, k, flags);
                bool rows_ok = true;
                for (size_t i = 0; i < m && rows_ok; i++) {
                    float *c = run_rows(&p, path, false, executors[1], i, 1);
                    if (memcmp(c + i * p.c_stride, base + i * p.c_stride,
                               p.c_stride * sizeof(float)) != 0)
                        rows_ok = false;
                    free(c);
                }
                /* and a block of rows starting mid-batch */
                float *c = run_rows(&p, path, false, executors[2], 5, m - 9);
                if (memcmp(c + 5 * p.c_stride, base + 5 * p.c_stride,
                           (m - 9) * p.c_stride * sizeof(float)) != 0)
                    rows_ok = false;
                free(c);
                CHECK(rows_ok, "%s %zux%zux%zu flags %u: a row alone differs from the batch",
                      path_name(path), m, n, k, flags);
                if (path != UFORM_SGEMM_PORTABLE) {
                    if (fma_result) {
                        CHECK(same_bits(&p, fma_result, base),
                              "%zux%zux%zu flags %u: the FMA paths differ", m, n, k, flags);
                        free(base);
                    } else {
                        fma_result = base;
                    }
                } else {
                    free(base);
                }
            }
            free(fma_result);
            problem_free(&p);
        }
    }
}

/* uform_sgemm itself is the best path. */
static void test_auto(void) {
    problem_t p = problem_make(20, 40, 50, 1, false, true, true, true);
    float *want = run(&p, uform_sgemm_best_path(), false, NULL);
    float *c = xmalloc(p.m * p.c_stride * sizeof(float));
    memcpy(c, p.c0, p.m * p.c_stride * sizeof(float));
    uform_sgemm(NULL, p.m, p.n, p.k, (uform_matrix_t){p.a, p.a_stride, false},
                (uform_matrix_t){p.b, p.b_stride, true}, p.bias, true, c, p.c_stride);
    CHECK(same_bits(&p, want, c), "uform_sgemm differs from its best path %s",
          path_name(uform_sgemm_best_path()));
    free(want);
    free(c);
    problem_free(&p);
}

/* The path of each class (a trainer's pin): the class's own vectors where this
 * machine runs them, AUTO where it does not. */
static void test_class_paths(void) {
    static const struct {
        uform_cpu_class_t cpu_class;
        uform_sgemm_path_t path;
    } expected[] = {
        {UFORM_CPU_CLASS_AUTO, UFORM_SGEMM_AUTO},       {UFORM_CPU_CLASS_SERIAL, UFORM_SGEMM_PORTABLE},
        {UFORM_CPU_CLASS_HASWELL, UFORM_SGEMM_AVX2},    {UFORM_CPU_CLASS_SKYLAKE, UFORM_SGEMM_AVX512},
        {UFORM_CPU_CLASS_SAPPHIRE, UFORM_SGEMM_AVX512}, {UFORM_CPU_CLASS_AMX, UFORM_SGEMM_AVX512},
        {UFORM_CPU_CLASS_NEON, UFORM_SGEMM_NEON},       {UFORM_CPU_CLASS_NEON_BF16, UFORM_SGEMM_NEON},
    };
    for (size_t i = 0; i < sizeof(expected) / sizeof(expected[0]); i++) {
        uform_sgemm_path_t want =
            uform_sgemm_path_supported(expected[i].path) ? expected[i].path : UFORM_SGEMM_AUTO;
        uform_sgemm_path_t got = uform_sgemm_path_of_class(expected[i].cpu_class);
        CHECK(got == want, "class %d: path %s, expected %s", (int)expected[i].cpu_class,
              path_name(got), path_name(want));
    }
    uform_sgemm_path_t sve = uform_sgemm_path_of_class(UFORM_CPU_CLASS_SVE);
    CHECK(sve == UFORM_SGEMM_AUTO || sve == UFORM_SGEMM_SVE || sve == UFORM_SGEMM_NEON,
          "class SVE: path %s", path_name(sve));
}

int main(void) {
    paths[paths_count++] = UFORM_SGEMM_PORTABLE;
    if (uform_sgemm_path_supported(UFORM_SGEMM_AVX2)) paths[paths_count++] = UFORM_SGEMM_AVX2;
    if (uform_sgemm_path_supported(UFORM_SGEMM_AVX512)) paths[paths_count++] = UFORM_SGEMM_AVX512;
    if (uform_sgemm_path_supported(UFORM_SGEMM_NEON)) paths[paths_count++] = UFORM_SGEMM_NEON;
    if (uform_sgemm_path_supported(UFORM_SGEMM_SVE)) paths[paths_count++] = UFORM_SGEMM_SVE;
    printf("paths:");
    for (size_t i = 0; i < paths_count; i++) printf(" %s", path_name(paths[i]));
    printf(" (best %s)\n", path_name(uform_sgemm_best_path()));

    uform_executor_t *executors[3] = {NULL, NULL, NULL};
    for (size_t t = 0; t < 3; t++)
        if (uform_executor_for_ram(t + 1, NULL, 0, &executors[t]) != UFORM_OK) {
            printf("cannot start an executor of %zu threads\n", t + 1);
            return 2;
        }

    test_reference();
    test_empty();
    test_determinism(executors);
    test_auto();
    test_class_paths();

    for (size_t t = 0; t < 3; t++) uform_executor_free(executors[t]);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
