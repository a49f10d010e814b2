/* test_kernels.c: the CPU classes' packing and GEMM against a float64
 * reference, and the determinism contract of kernels.h, bit for bit; the FMA
 * classes' attention kernels (HASWELL, SKYLAKE, NEON, SVE) against a scalar
 * fmaf oracle of their shared arithmetic, bit for bit; E4M3 matrices against
 * the BF16 matrices of their dequantized weights, bit for bit (the scales are
 * powers of two, so the two hold the same values: gemm.h).
 *
 * Build (from the repository root):
 *   gcc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -O2 -g -fsanitize=address,undefined \
 *       -Ic/include -Ic/src c/src/core/error.c c/src/core/executor.c c/src/backend/cpu/\*.c \
 *       tests/c/test_kernels.c -lm -lpthread -o /tmp/test_kernels && /tmp/test_kernels
 *
 * Error bounds (u = 2^-24, the FP32 unit roundoff; S = sum_p |x_p w_p| + |bias|):
 * - FP32 classes: each output is one chain over k of at most two roundings per
 *   step (mul then add in serial, one FMA elsewhere) plus one for the bias, each
 *   bounded by u times a partial sum no larger than S, so
 *   |y - exact| <= (2k + 1) u S (1 + O(k u)); we allow (2k + 2) u S. This is
 *   the worst case; typical errors are ~sqrt(k) u S.
 * - sapphire: x is rounded to BF16 (8 significant bits, relative error at
 *   most 2^-8 each: unit roundoff 2^-p with p = 8), W is exactly BF16 and a
 *   product of two BF16 is exact in FP32, so the products are off by at most
 *   2^-8 |x_p w_p|, plus the FP32 sums as above:
 *   |y - exact| <= (2^-8 + (2k + 2) u) S. Against a reference
 *   that rounds x to BF16 first the bound is the FP32 one, which checks that
 *   the kernel rounds exactly like uform_f32_to_bf16. */
#include "backend/cpu/kernels.h"
#include "backend/cpu/bf16_avx512.h"
#include "backend/cpu/e4m3_decode.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/rows.h"
#include "core/fp8.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

/* Uniform in [-1, 1). */
static float rng_float(void) { return (float)((double)(rng_next() >> 11) * 0x1p-52 - 1.0); }

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        printf("out of memory\n");
        exit(2);
    }
    return p;
}

typedef struct {
    size_t m, n, k, x_stride, y_stride;
    uint16_t *w;  /* [n, k] BF16 */
    float *x;     /* [m, x_stride] */
    float *bias;  /* [n] or NULL */
} problem_t;

static problem_t problem_make(size_t m, size_t n, size_t k, size_t pad, bool with_bias) {
    problem_t p = {m, n, k, k + pad, n + pad, NULL, NULL, NULL};
    p.w = xmalloc(n * k * sizeof(uint16_t));
    p.x = xmalloc(m * p.x_stride * sizeof(float));
    for (size_t i = 0; i < n * k; i++) p.w[i] = uform_f32_to_bf16(rng_float());
    for (size_t i = 0; i < m * p.x_stride; i++) p.x[i] = rng_float();
    if (with_bias) {
        p.bias = xmalloc(n * sizeof(float));
        for (size_t j = 0; j < n; j++) p.bias[j] = rng_float();
    }
    return p;
}

static void problem_free(problem_t *p) {
    free(p->w);
    free(p->x);
    free(p->bias);
}

static const float sentinel = 12345.0f;

/* y [m, y_stride] with the padding set to a sentinel that must survive. */
static float *output_make(const problem_t *p) {
    float *y = xmalloc(p->m * p->y_stride * sizeof(float));
    for (size_t i = 0; i < p->m * p->y_stride; i++) y[i] = sentinel;
    return y;
}

/* Checks y against float64; returns whether every element is in bounds. */
static bool check_accuracy(const problem_t *p, const float *y, bool bf16_x, bool round_x) {
    double u = 0x1p-24;
    for (size_t i = 0; i < p->m; i++) {
        for (size_t j = 0; j < p->n; j++) {
            double sum = 0, magnitude = 0;
            for (size_t q = 0; q < p->k; q++) {
                float xv = p->x[i * p->x_stride + q];
                if (round_x) xv = uform_bf16_to_f32(uform_f32_to_bf16(xv));
                double product = (double)xv * uform_bf16_to_f32(p->w[j * p->k + q]);
                sum += product;
                magnitude += fabs(product);
            }
            if (p->bias) {
                sum += p->bias[j];
                magnitude += fabs(p->bias[j]);
            }
            double bound = (2.0 * (double)p->k + 2.0) * u * magnitude;
            if (bf16_x && !round_x) bound += 0x1p-8 * magnitude;
            double got = y[i * p->y_stride + j];
            if (!(fabs(got - sum) <= bound + 1e-30)) {
                printf("  y[%zu, %zu] = %.9g, expected %.9g (bound %.3g)\n", i, j, got, sum,
                       bound);
                return false;
            }
        }
        for (size_t j = p->n; j < p->y_stride; j++)
            if (y[i * p->y_stride + j] != sentinel) {
                printf("  y[%zu, %zu] (padding) was overwritten\n", i, j);
                return false;
            }
    }
    return true;
}

static void test_accuracy(const uform_cpu_kernels_t *kernels, uform_executor_t *executor) {
    static const size_t ms[] = {1, 2, 3, 7, 17, 64, 257};
    static const size_t ns[] = {1, 5, 64, 100, 192};
    static const size_t ks[] = {1, 3, 64, 65, 200, 601};
    /* BF16 activations; BFDOT's round-to-odd sums stay inside the same bound
     * (one rounding per pair of products and one per pair added, each under 2u). */
    bool bf16_x = kernels->cpu_class == UFORM_CPU_CLASS_SAPPHIRE ||
                  kernels->cpu_class == UFORM_CPU_CLASS_AMX ||
                  kernels->cpu_class == UFORM_CPU_CLASS_NEON_BF16 ||
                  kernels->cpu_class == UFORM_CPU_CLASS_SVE_BF16;
    size_t variant = 0;
    for (size_t a = 0; a < sizeof(ms) / sizeof(ms[0]); a++)
        for (size_t b = 0; b < sizeof(ns) / sizeof(ns[0]); b++)
            for (size_t c = 0; c < sizeof(ks) / sizeof(ks[0]); c++, variant++) {
                size_t m = ms[a], n = ns[b], k = ks[c];
                /* Keep the float64 reference affordable under the sanitizers. */
                if (m * n * k > 4000000) m = 17;
                problem_t p = problem_make(m, n, k, variant % 3 == 0 ? 3 : 0, variant % 2 == 0);
                uform_packed_t packed;
                uform_status_t status = kernels->pack(p.w, n, k, &packed);
                CHECK(status == UFORM_OK, "%s pack %zu x %zu: %s", kernels->name, n, k,
                      uform_last_error());
                if (status != UFORM_OK) {
                    problem_free(&p);
                    continue;
                }
                float *y = output_make(&p);
                kernels->gemm(executor, &packed, p.x, p.x_stride, m, p.bias, UFORM_GEMM_STORE, y,
                              p.y_stride);
                CHECK(check_accuracy(&p, y, bf16_x, false),
                      "%s m=%zu n=%zu k=%zu bias=%d stride pad=%zu", kernels->name, m, n, k,
                      p.bias != NULL, p.x_stride - k);
                if (bf16_x)
                    CHECK(check_accuracy(&p, y, true, true),
                          "%s vs BF16-rounded x: m=%zu n=%zu k=%zu", kernels->name, m, n, k);
                free(y);
                uform_packed_free(&packed);
                problem_free(&p);
            }
}

static bool same_bits(const float *a, size_t a_stride, const float *b, size_t b_stride,
                      size_t rows, size_t cols) {
    for (size_t i = 0; i < rows; i++)
        if (memcmp(a + i * a_stride, b + i * b_stride, cols * sizeof(float)) != 0) return false;
    return true;
}

/* The same rows give the same bits alone, in other batches and on any thread count. */
static void test_determinism(const uform_cpu_kernels_t *kernels, uform_executor_t **executors,
                             size_t executors_count) {
    static const size_t shapes[][3] = {{257, 100, 601}, {300, 192, 1100}, {40, 1000, 64}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        size_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        problem_t p = problem_make(m, n, k, 1, s != 1);
        uform_packed_t packed;
        if (kernels->pack(p.w, n, k, &packed) != UFORM_OK) {
            CHECK(false, "%s pack: %s", kernels->name, uform_last_error());
            problem_free(&p);
            continue;
        }
        float *batch = output_make(&p);
        float *other = output_make(&p);
        kernels->gemm(executors[0], &packed, p.x, p.x_stride, m, p.bias, UFORM_GEMM_STORE, batch,
                      p.y_stride);

        for (size_t e = 1; e < executors_count; e++) {
            kernels->gemm(executors[e], &packed, p.x, p.x_stride, m, p.bias, UFORM_GEMM_STORE,
                          other, p.y_stride);
            CHECK(same_bits(batch, p.y_stride, other, p.y_stride, m, n),
                  "%s %zu x %zu x %zu: executor %zu differs from executor 0", kernels->name, m, n,
                  k, e);
        }
        bool rows_alone = true;
        for (size_t i = 0; i < m; i++) {
            uform_executor_t *executor = executors[i % executors_count];
            kernels->gemm(executor, &packed, p.x + i * p.x_stride, p.x_stride, 1, p.bias,
                          UFORM_GEMM_STORE, other + i * p.y_stride, p.y_stride);
            if (!same_bits(batch + i * p.y_stride, p.y_stride, other + i * p.y_stride, p.y_stride,
                           1, n)) {
                rows_alone = false;
                printf("  row %zu alone differs\n", i);
                break;
            }
        }
        CHECK(rows_alone, "%s %zu x %zu x %zu: a row alone differs from the batch",
              kernels->name, m, n, k);
        /* Sub-batches at odd offsets put rows in other kernel slots and tiles. */
        static const size_t windows[][2] = {{5, 17}, {1, 64}, {13, 2}, {100, 157}, {31, 3}};
        for (size_t w = 0; w < sizeof(windows) / sizeof(windows[0]); w++) {
            size_t begin = windows[w][0], count = windows[w][1];
            if (begin >= m) continue;
            if (begin + count > m) count = m - begin;
            for (size_t e = 0; e < executors_count; e++) {
                kernels->gemm(executors[e], &packed, p.x + begin * p.x_stride, p.x_stride, count,
                              p.bias, UFORM_GEMM_STORE, other, p.y_stride);
                CHECK(same_bits(batch + begin * p.y_stride, p.y_stride, other, p.y_stride, count,
                                n),
                      "%s %zu x %zu x %zu: rows [%zu, %zu) on executor %zu differ",
                      kernels->name, m, n, k, begin, begin + count, e);
            }
        }
        free(batch);
        free(other);
        uform_packed_free(&packed);
        problem_free(&p);
    }
}

static void test_detect(void) {
    uform_cpu_class_t best = uform_cpu_class_best();
    CHECK(uform_cpu_class_supported(best), "best class %d is not supported", (int)best);
    CHECK(uform_cpu_kernels_for(best) != NULL, "best class %d has no table", (int)best);
    CHECK(uform_cpu_class_supported(UFORM_CPU_CLASS_SERIAL), "serial must always run");
    CHECK(uform_cpu_kernels_for(UFORM_CPU_CLASS_AUTO) == NULL, "AUTO has no table");
#if defined(__x86_64__)
    CHECK(!uform_cpu_class_supported(UFORM_CPU_CLASS_NEON), "NEON on x86");
    CHECK(uform_cpu_kernels_for(UFORM_CPU_CLASS_NEON) == NULL, "NEON table on x86");
    CHECK(uform_cpu_kernels_for(UFORM_CPU_CLASS_SVE) == NULL, "SVE table on x86");
    CHECK(uform_cpu_kernels_for(UFORM_CPU_CLASS_NEON_BF16) == NULL, "NEON_BF16 table on x86");
    CHECK(uform_cpu_kernels_for(UFORM_CPU_CLASS_SVE_BF16) == NULL, "SVE_BF16 table on x86");
#elif defined(__aarch64__)
    /* Linux on aarch64 always has Advanced SIMD; no x86 class is built. */
    CHECK(uform_cpu_class_supported(UFORM_CPU_CLASS_NEON), "NEON not detected on aarch64");
    CHECK(uform_cpu_kernels_for(UFORM_CPU_CLASS_NEON) != NULL, "no NEON table on aarch64");
    CHECK(uform_cpu_kernels_for(UFORM_CPU_CLASS_SVE) != NULL, "no SVE table on aarch64");
    CHECK(best >= UFORM_CPU_CLASS_NEON && best <= UFORM_CPU_CLASS_SVE_BF16,
          "best class %s on aarch64", uform_cpu_class_name(best));
    /* BF16 products where the CPU has them, then SVE, then NEON */
    uform_cpu_class_t expected = UFORM_CPU_CLASS_NEON;
    if (uform_cpu_class_supported(UFORM_CPU_CLASS_SVE)) expected = UFORM_CPU_CLASS_SVE;
    if (uform_cpu_class_supported(UFORM_CPU_CLASS_NEON_BF16)) expected = UFORM_CPU_CLASS_NEON_BF16;
    if (uform_cpu_class_supported(UFORM_CPU_CLASS_SVE_BF16)) expected = UFORM_CPU_CLASS_SVE_BF16;
    CHECK(best == expected, "best class %s, expected %s", uform_cpu_class_name(best),
          uform_cpu_class_name(expected));
    for (int c = UFORM_CPU_CLASS_HASWELL; c <= UFORM_CPU_CLASS_SAPPHIRE; c++) {
        CHECK(!uform_cpu_class_supported((uform_cpu_class_t)c), "x86 class %d on aarch64", c);
        CHECK(uform_cpu_kernels_for((uform_cpu_class_t)c) == NULL, "x86 table %d on aarch64", c);
    }
#endif
    CHECK(strcmp(uform_cpu_class_name(UFORM_CPU_CLASS_SAPPHIRE), "sapphire") == 0, "name");
    CHECK(strcmp(uform_cpu_class_name(UFORM_CPU_CLASS_SVE), "sve") == 0, "name");
    CHECK(strcmp(uform_cpu_class_name(UFORM_CPU_CLASS_SVE_BF16), "sve_bf16") == 0, "name");
    printf("best class: %s\n", uform_cpu_class_name(best));

    /* Bad input is refused with a message, and the result is left empty. */
    uint16_t w[4] = {0};
    uform_packed_t packed;
    const uform_cpu_kernels_t *serial = uform_cpu_kernels_for(UFORM_CPU_CLASS_SERIAL);
    CHECK(serial->pack(w, 0, 4, &packed) == UFORM_INVALID_ARGUMENT && packed.data == NULL,
          "n = 0 accepted");
    CHECK(serial->pack(NULL, 1, 4, &packed) == UFORM_INVALID_ARGUMENT, "NULL weights accepted");
    CHECK(serial->pack(w, SIZE_MAX / 2, 4, &packed) == UFORM_OUT_OF_MEMORY,
          "an overflowing size was accepted");
    uform_packed_free(&packed);
    uform_packed_free(NULL);
}

/* FNV-1a over the bits of one fixed product (partial panels, several k
 * blocks, bias): every FMA class computes the same chains, so they must give
 * the same digest, in this process and across machines (make test-arm
 * compares NEON's and SVE's digests under emulation with HASWELL's here). */
static uint64_t gemm_digest(const uform_cpu_kernels_t *kernels, uform_executor_t *executor) {
    uint64_t saved = rng_state;
    rng_state = 0x9e3779b97f4a7c15ull; /* the same problem whatever ran before */
    problem_t p = problem_make(23, 77, 530, 2, true);
    rng_state = saved;
    uform_packed_t packed;
    uint64_t hash = 14695981039346656037ull;
    if (kernels->pack(p.w, p.n, p.k, &packed) == UFORM_OK) {
        float *y = output_make(&p);
        kernels->gemm(executor, &packed, p.x, p.x_stride, p.m, p.bias, UFORM_GEMM_STORE, y,
                      p.y_stride);
        for (size_t i = 0; i < p.m; i++) {
            const unsigned char *bytes = (const unsigned char *)(y + i * p.y_stride);
            for (size_t b = 0; b < p.n * sizeof(float); b++) hash = (hash ^ bytes[b]) * 1099511628211ull;
        }
        free(y);
        uform_packed_free(&packed);
    }
    problem_free(&p);
    return hash;
}

static bool is_fma_class(uform_cpu_class_t cpu_class) {
    return cpu_class == UFORM_CPU_CLASS_HASWELL || cpu_class == UFORM_CPU_CLASS_SKYLAKE ||
           cpu_class == UFORM_CPU_CLASS_NEON || cpu_class == UFORM_CPU_CLASS_SVE;
}

/* The classes of BFDOT chains (the same arithmetic at every vector length). */
static bool is_bfdot_class(uform_cpu_class_t cpu_class) {
    return cpu_class == UFORM_CPU_CLASS_NEON_BF16 || cpu_class == UFORM_CPU_CLASS_SVE_BF16;
}

/* ---- attention: the FMA classes' shared arithmetic, bit for bit --------------------- */

/* uform_fast_exp512 (fast_exp.h) in scalar fmaf steps: max/min as the vector
 * instructions take them (no NaN here), nearest-even rounding, one fused
 * operation wherever the vector code has one. */
static float oracle_exp(float x) {
    x = x > -87.0f ? x : -87.0f;
    x = x < 88.0f ? x : 88.0f;
    float n = rintf(x * 1.44269504088896341f);
    float r = fmaf(-n, 0.693359375f, x);
    r = fmaf(-n, -2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    p = fmaf(p * r, r, r + 1.0f);
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof(scale));
    return p * scale;
}

/* One query's output as attention_avx512.c / _avx2.c / _neon.c / _sve.c
 * promise it (their header comments): each score one fmaf chain over d from
 * +0, times 1/8; exact maximum; the exponentials' sum in 16 lane partial sums
 * (lane l: tokens j = l mod 16, in order) added l = 0..15; each output one
 * fmaf chain over j from +0, times 1/sum. */
static void oracle_attention_row(const float *q, const float *k, const float *v, size_t stride, size_t n,
                                 float *p, float *out) {
    float maximum = -INFINITY;
    for (size_t j = 0; j < n; j++) {
        float score = 0.0f;
        for (size_t d = 0; d < 64; d++) score = fmaf(q[d], k[j * stride + d], score);
        p[j] = score * 0.125f;
        maximum = p[j] > maximum ? p[j] : maximum;
    }
    float partial[16] = {0}, sum = 0.0f;
    for (size_t j = 0; j < n; j++) {
        p[j] = oracle_exp(p[j] - maximum);
        partial[j % 16] += p[j];
    }
    for (size_t l = 0; l < 16; l++) sum += partial[l];
    float inverse = 1.0f / sum;
    for (size_t d = 0; d < 64; d++) {
        float acc = 0.0f;
        for (size_t j = 0; j < n; j++) acc = fmaf(p[j], v[j * stride + d], acc);
        out[d] = acc * inverse;
    }
}

/* The FMA classes' attention kernels against the oracle, bit for bit, for
 * items of 1 to 300 tokens (partial 16-token blocks, partial query tiles) and
 * query ranges that start and end inside a tile; q, k and v interleaved as
 * the model stores them (rows 3 x 128 floats apart). */
static void test_attention_bits(const uform_cpu_kernels_t *kernels) {
    static const size_t lengths[] = {1, 2, 5, 15, 16, 17, 31, 64, 65, 100, 300};
    const size_t stride = 3 * 128;
    for (size_t c = 0; c < sizeof(lengths) / sizeof(lengths[0]); c++) {
        size_t n = lengths[c];
        float *qkv = xmalloc(n * stride * sizeof(float)), *out = xmalloc(n * 128 * sizeof(float));
        float *expected = xmalloc(64 * sizeof(float)), *p = xmalloc(n * sizeof(float));
        float *scratch = uform_alloc_aligned(uform_attention_scratch_floats(n), sizeof(float), "scratch");
        for (size_t i = 0; i < n * stride; i++) qkv[i] = 3.0f * rng_float();
        for (size_t i = 0; i < n * 128; i++) out[i] = NAN;
        const float *q = qkv + 64, *k = qkv + 128 + 64, *v = qkv + 256 + 64; /* head 1 of 2 */
        size_t first = n > 3 ? 3 : 0, last = n > 9 ? n - 2 : n;
        kernels->attention(q, k, v, stride, n, first, last, out, 128, scratch);
        size_t wrong = 0, checked = 0;
        for (size_t i = first; i < last; i++) {
            oracle_attention_row(q + i * stride, k, v, stride, n, p, expected);
            wrong += memcmp(out + i * 128, expected, 64 * sizeof(float)) != 0;
            checked++;
        }
        CHECK(wrong == 0, "%s attention, %zu tokens, queries [%zu, %zu): %zu of %zu rows differ from the "
              "oracle's bits", kernels->name, n, first, last, wrong, checked);
        bool untouched = true;
        for (size_t i = 0; i < n; i++)
            for (size_t d = 0; d < 128; d++)
                if ((i < first || i >= last || d >= 64) && !isnan(out[i * 128 + d])) untouched = false;
        CHECK(untouched, "%s attention, %zu tokens: wrote outside its queries and head", kernels->name, n);
        uform_free_aligned(scratch);
        free(qkv), free(out), free(expected), free(p);
    }
}

/* Arguments (class names) test only those classes: make test-arm runs each
 * class once, under the emulated CPUs that change its code. */
/* A random E4M3 code that is not NaN (0x7F and 0xFF are never stored). */
static uint8_t random_code(void) {
    for (;;) {
        uint8_t code = (uint8_t)(rng_next() >> 56);
        if ((code & 0x7f) != 0x7f) return code;
    }
}

/* Every decoder this build has gives the portable decoder's bits, for tile
 * rows of `width` codes (a multiple of 8, at most 64). Scales are powers of
 * two, down to 2^-110; with `odd_scale` one is 3 x 2^-4, which no
 * quantization makes (the AVX-512 decoder's integer path then takes its FP
 * path: both run). The AVX-512 decoders: the classes' one (VBMI where the
 * CPU has it), the 32-lane one, and the VBMI one (64-code rows only; other
 * widths and odd scales go to the 32-lane one). */
static void test_e4m3_decoders_at(size_t width, bool odd_scale) {
    enum { WIDTH = 64, ROWS = 9 };
    uint8_t codes[ROWS * WIDTH];
    float scales[WIDTH] = {0}, expected[ROWS * WIDTH], got[ROWS * WIDTH];
    uint16_t expected16[ROWS * WIDTH], got16[ROWS * WIDTH];
    for (size_t i = 0; i < ROWS * WIDTH; i++) codes[i] = (uint8_t)(i % 256);
    for (size_t i = 0; i < ROWS * WIDTH; i++)
        if ((codes[i] & 0x7f) == 0x7f) codes[i] = 0x80; /* -0 instead of NaN */
    for (size_t i = 0; i < width; i++) scales[i] = ldexpf(1.0f, (int)(i % 40) - 20 - (i == 7) * 97);
    if (odd_scale) scales[3] = 0.1875f;
    uform_e4m3_decode_f32_portable(codes, ROWS, width, scales, expected);
    uform_e4m3_decode_bf16_portable(codes, ROWS, width, scales, expected16);
    for (size_t i = 0; i < ROWS * width; i++) {
        double value = (double)uform_e4m3_to_f32(codes[i]) * scales[i % width];
        if ((double)expected[i] != value || (signbit(expected[i]) != 0) != (codes[i] >> 7 != 0)) {
            CHECK(false, "portable decode of 0x%02x x %g: %g", codes[i], scales[i % width],
                  expected[i]);
            break;
        }
    }
    struct { const char *name; uform_e4m3_decode_fn_t f32, bf16; bool runs; } decoders[] = {
#if defined(__x86_64__)
        {"avx2", uform_e4m3_decode_f32_avx2, uform_e4m3_decode_bf16_avx2,
         uform_cpu_class_supported(UFORM_CPU_CLASS_HASWELL)},
        {"avx512", NULL, uform_e4m3_decode_bf16_avx512,
         uform_cpu_class_supported(UFORM_CPU_CLASS_SAPPHIRE)},
        {"avx512bw", NULL, uform_e4m3_decode_bf16_avx512bw,
         uform_cpu_class_supported(UFORM_CPU_CLASS_SAPPHIRE)},
        {"avx512 vbmi", NULL, uform_e4m3_decode_bf16_vbmi,
         uform_cpu_class_supported(UFORM_CPU_CLASS_SAPPHIRE) && __builtin_cpu_supports("avx512vbmi")},
#endif
#if defined(__aarch64__)
        {"neon", uform_e4m3_decode_f32_neon, uform_e4m3_decode_bf16_neon, true},
#endif
        {"portable", uform_e4m3_decode_f32_portable, uform_e4m3_decode_bf16_portable, true},
    };
    for (size_t d = 0; d < sizeof(decoders) / sizeof(decoders[0]); d++) {
        if (!decoders[d].runs) {
            if (width == WIDTH && !odd_scale)
                printf("skip the %s E4M3 decoder: not supported by this CPU\n", decoders[d].name);
            continue;
        }
        memset(got, 0xa5, sizeof(got));
        memset(got16, 0xa5, sizeof(got16));
        /* (a BF16 decoder alone: its FP32 side is taken as the portable's) */
        if (decoders[d].f32) decoders[d].f32(codes, ROWS, width, scales, got);
        else memcpy(got, expected, ROWS * width * sizeof(float));
        decoders[d].bf16(codes, ROWS, width, scales, got16);
        bool untouched = true; /* past the tile: a masked last group writes nothing there */
        for (size_t i = ROWS * width; i < ROWS * WIDTH; i++) {
            uint32_t word;
            memcpy(&word, got + i, sizeof(word));
            untouched &= word == 0xa5a5a5a5u && got16[i] == 0xa5a5u;
        }
        CHECK(untouched, "%s E4M3 decode (width %zu) wrote past the tile", decoders[d].name, width);
        CHECK(memcmp(got, expected, ROWS * width * sizeof(float)) == 0,
              "%s E4M3 decode (FP32, width %zu) differs", decoders[d].name, width);
        CHECK(memcmp(got16, expected16, ROWS * width * sizeof(uint16_t)) == 0,
              "%s E4M3 decode (BF16, width %zu) differs", decoders[d].name, width);
    }
#if defined(__x86_64__)
    /* HASWELL's: the portable BF16 in the HALVES order of 16-column groups
     * (word 2 l + h of a group holds column l + 8 h) */
    if (width % 16 == 0 && uform_cpu_class_supported(UFORM_CPU_CLASS_HASWELL)) {
        memset(got16, 0xa5, sizeof(got16));
        uform_e4m3_decode_bf16_halves_avx2(codes, ROWS, width, scales, got16);
        bool same = true, untouched = true;
        for (size_t i = 0; i < ROWS * width; i++) {
            size_t group = i / 16 * 16, word = i % 16, column = word / 2 + 8 * (word % 2);
            same &= got16[i] == expected16[group + column];
        }
        for (size_t i = ROWS * width; i < ROWS * WIDTH; i++) untouched &= got16[i] == 0xa5a5u;
        CHECK(same && untouched, "avx2 E4M3 decode (BF16 HALVES, width %zu) differs or wrote past the tile",
              width);
    }
#endif
}

/* 64: AMX's and SAPPHIRE's pair slots; 40 and 8: a masked last group of the
 * 32-wide decoders, and the 8 of the smallest FP32 panels; 16: HASWELL's. */
static void test_e4m3_decoders(void) {
    static const size_t widths[] = {64, 40, 16, 8};
    for (size_t w = 0; w < sizeof(widths) / sizeof(widths[0]); w++) {
        test_e4m3_decoders_at(widths[w], false);
        test_e4m3_decoders_at(widths[w], true);
    }
}

/* The executor's scratch blocks (core/internal.h): aligned, kept between
 * calls (the same block comes back for a smaller or equal take), bounded in
 * number and size, freed with the executor (ASan's leak check in test-c). */
static void test_scratch(uform_executor_t *executor) {
    unsigned char *a = uform_scratch_take(executor, 300000);
    CHECK(a && (uintptr_t)a % 64 == 0, "scratch: 300000 bytes not had or not 64-byte aligned");
    if (!a) return;
    memset(a, 1, 300000);
    uform_scratch_give(executor, a);
    unsigned char *b = uform_scratch_take(executor, 1000);
    CHECK(b == a, "scratch: a block given back is not taken again for a smaller take");
    unsigned char *c = uform_scratch_take(executor, 400000);
    CHECK(c && c != b, "scratch: a second block while the first is out");
    if (c) memset(c, 2, 400000);
    uform_scratch_give(executor, b);
    uform_scratch_give(executor, c);
    unsigned char *d = uform_scratch_take(executor, 350000);
    CHECK(d == c, "scratch: the smallest kept block large enough is not the one taken");
    uform_scratch_give(executor, d);
    /* more blocks than are kept, and one larger than is kept: freed, not leaked */
    void *many[UFORM_SCRATCH_KEPT + 2];
    for (size_t i = 0; i < UFORM_SCRATCH_KEPT + 2; i++) many[i] = uform_scratch_take(executor, 4096 * (i + 1));
    for (size_t i = 0; i < UFORM_SCRATCH_KEPT + 2; i++) uform_scratch_give(executor, many[i]);
    void *large = uform_scratch_take(executor, UFORM_SCRATCH_KEPT_BYTES + 64);
    uform_scratch_give(executor, large);
    void *plain = uform_scratch_take(NULL, 100);
    CHECK(plain && (uintptr_t)plain % 64 == 0, "scratch without an executor: not had or not aligned");
    uform_scratch_give(NULL, plain);
    uform_scratch_give(executor, NULL);
    CHECK(uform_scratch_take(executor, SIZE_MAX) == NULL, "scratch: SIZE_MAX bytes were had");
}

/* E4M3 weights multiply exactly as the BF16 matrix of their dequantized
 * values: same bits for every shape, bias, accumulation and thread count. */
static void test_e4m3(const uform_cpu_kernels_t *kernels, uform_executor_t **executors,
                      size_t executors_count) {
    static const size_t ms[] = {1, 3, 7, 17, 64, 257};
    static const size_t ns[] = {1, 5, 64, 100, 192, 300};
    static const size_t ks[] = {1, 3, 64, 65, 200, 601};
    size_t variant = 0;
    for (size_t a = 0; a < sizeof(ms) / sizeof(ms[0]); a++)
        for (size_t b = 0; b < sizeof(ns) / sizeof(ns[0]); b++)
            for (size_t c = 0; c < sizeof(ks) / sizeof(ks[0]); c++, variant++) {
                size_t m = ms[a], n = ns[b], k = ks[c];
                if (m * n * k > 4000000) m = 17;
                problem_t p = problem_make(m, n, k, variant % 3 == 0 ? 3 : 0, variant % 2 == 0);
                uint8_t *codes = xmalloc(n * k), *codes_back = xmalloc(n * k);
                float *scales = xmalloc(n * sizeof(float)), *scales_back = xmalloc(n * sizeof(float));
                for (size_t j = 0; j < n; j++) {
                    /* the extremes of the quantizer's exponents, and ordinary ones */
                    int exponent = j % 11 == 3 ? -117 : j % 11 == 5 ? 100 : (int)(rng_next() % 41) - 20;
                    scales[j] = ldexpf(1.0f, exponent);
                    bool zero_row = j % 13 == 4;
                    for (size_t q = 0; q < k; q++) {
                        codes[j * k + q] = zero_row ? 0 : random_code();
                        float value = uform_e4m3_to_f32(codes[j * k + q]) * scales[j];
                        p.w[j * k + q] = uform_f32_to_bf16(value);
                        if (uform_bf16_to_f32(p.w[j * k + q]) != value) {
                            printf("  dequantized weight not exact in BF16\n");
                            failed++;
                        }
                    }
                }
                uform_packed_t bf16, e4m3;
                uform_status_t status = kernels->pack(p.w, n, k, &bf16);
                if (status == UFORM_OK) status = kernels->pack_e4m3(codes, scales, n, k, &e4m3);
                CHECK(status == UFORM_OK, "%s pack %zu x %zu: %s", kernels->name, n, k,
                      uform_last_error());
                if (status == UFORM_OK) {
                    CHECK(e4m3.scalar == UFORM_SCALAR_E4M3 && (k < 64 || e4m3.bytes < bf16.bytes * 3 / 4),
                          "%s E4M3 packing holds %zu bytes for %zu BF16", kernels->name, e4m3.bytes,
                          bf16.bytes);
                    CHECK(uform_gemm_unpack_e4m3(&e4m3, codes_back, scales_back) == UFORM_OK &&
                              memcmp(codes_back, codes, n * k) == 0 &&
                              memcmp(scales_back, scales, n * sizeof(float)) == 0,
                          "%s %zu x %zu: unpacked codes or scales differ", kernels->name, n, k);
                    bool accumulate = variant % 4 == 1;
                    uform_executor_t *executor = executors[variant % executors_count];
                    float *expected = output_make(&p), *got = output_make(&p);
                    float *y_start = xmalloc(m * n * sizeof(float)); /* what accumulation starts from */
                    if (accumulate)
                        for (size_t i = 0; i < m; i++)
                            for (size_t j = 0; j < n; j++)
                                expected[i * p.y_stride + j] = got[i * p.y_stride + j] =
                                    y_start[i * n + j] = rng_float();
                    uform_gemm_epilogue_t epilogue =
                        accumulate ? UFORM_GEMM_ACCUMULATE : UFORM_GEMM_STORE;
                    kernels->gemm(executor, &bf16, p.x, p.x_stride, m, p.bias, epilogue, expected,
                                  p.y_stride);
                    /* each task decoding into its thread's L2 tile (up to a
                     * text's rows) in its first row group's kernels where the
                     * class reads E4M3 panels directly (SAPPHIRE with VBMI),
                     * then by the tile decoder; then, with the tiles off, the
                     * panels decoded in one pass, in passes of a few panels
                     * (or one), and the stack tiles where not one panel fits */
                    static const size_t local_rows[] = {UFORM_GEMM_E4M3_LOCAL_ROWS,
                                                        UFORM_GEMM_E4M3_LOCAL_ROWS, 0, 0, 0};
                    static const bool direct[] = {true, false, true, true, true};
                    static const size_t decoded_limits[] = {UFORM_GEMM_DECODED_MAX, UFORM_GEMM_DECODED_MAX,
                                                            UFORM_GEMM_DECODED_MAX, 24576, 1};
                    for (size_t l = 0; l < sizeof(decoded_limits) / sizeof(decoded_limits[0]); l++) {
                        if (l > 0 && accumulate)
                            for (size_t i = 0; i < m; i++)
                                memcpy(got + i * p.y_stride, y_start + i * n, n * sizeof(float));
                        uform_gemm_e4m3_local_rows = local_rows[l];
                        uform_gemm_e4m3_direct_kernels = direct[l];
                        uform_gemm_decoded_max = decoded_limits[l];
                        kernels->gemm(executor, &e4m3, p.x, p.x_stride, m, p.bias, epilogue, got,
                                      p.y_stride);
                        CHECK(memcmp(got, expected, m * p.y_stride * sizeof(float)) == 0,
                              "%s E4M3 m=%zu n=%zu k=%zu bias=%d accumulate=%d local tiles up to %zu "
                              "rows, direct kernels %d, decoded at most %zu bytes: differs from BF16",
                              kernels->name, m, n, k, p.bias != NULL, accumulate, local_rows[l],
                              direct[l], decoded_limits[l]);
                    }
                    uform_gemm_e4m3_local_rows = UFORM_GEMM_E4M3_LOCAL_ROWS;
                    uform_gemm_e4m3_direct_kernels = true;
                    uform_gemm_decoded_max = UFORM_GEMM_DECODED_MAX;
                    free(y_start);
                    free(expected);
                    free(got);
                    uform_packed_free(&e4m3);
                }
                uform_packed_free(&bf16);
                free(codes);
                free(codes_back);
                free(scales);
                free(scales_back);
                problem_free(&p);
            }
}

/* The GELU epilogue (inference's up projection) gives the bits of the plain
 * product followed by a separate uform_gelu_forward pass: partial and wide
 * panels, several k blocks, bias or none, BF16 and E4M3 weights, any thread
 * count; some rows scaled so sums reach GELU's clamp (x < -9.9 gives 0). */
static void test_gelu_epilogue(const uform_cpu_kernels_t *kernels, uform_executor_t **executors,
                               size_t executors_count) {
    static const size_t shapes[][3] = {{1, 5, 3}, {17, 300, 1100}, {257, 100, 64}, {40, 2048, 512}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        size_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        problem_t p = problem_make(m, n, k, s % 2 ? 3 : 0, s != 2);
        for (size_t i = 0; i < m; i += 3)
            for (size_t q = 0; q < k; q++) p.x[i * p.x_stride + q] *= 40.0f;
        uint8_t *codes = xmalloc(n * k);
        float *scales = xmalloc(n * sizeof(float));
        for (size_t j = 0; j < n; j++) {
            scales[j] = ldexpf(1.0f, (int)(j % 7) - 9);
            for (size_t q = 0; q < k; q++) codes[j * k + q] = random_code();
        }
        uform_packed_t packs[2] = {{0}, {0}};
        bool packed = kernels->pack(p.w, n, k, &packs[0]) == UFORM_OK;
        packed = packed && kernels->pack_e4m3(codes, scales, n, k, &packs[1]) == UFORM_OK;
        CHECK(packed, "%s pack %zu x %zu: %s", kernels->name, n, k, uform_last_error());
        for (size_t w = 0; packed && w < 2; w++)
            for (size_t e = 0; e < executors_count; e++) {
                float *expected = output_make(&p), *got = output_make(&p);
                kernels->gemm(executors[e], &packs[w], p.x, p.x_stride, m, p.bias,
                              UFORM_GEMM_STORE, expected, p.y_stride);
                for (size_t i = 0; i < m; i++)
                    uform_gelu_forward(executors[e], expected + i * p.y_stride, n,
                                       expected + i * p.y_stride);
                kernels->gemm(executors[e], &packs[w], p.x, p.x_stride, m, p.bias, UFORM_GEMM_GELU,
                              got, p.y_stride);
                CHECK(memcmp(got, expected, m * p.y_stride * sizeof(float)) == 0,
                      "%s %s GELU epilogue m=%zu n=%zu k=%zu on executor %zu differs from a "
                      "separate GELU pass", kernels->name, w ? "E4M3" : "BF16", m, n, k, e);
                free(expected);
                free(got);
            }
        uform_packed_free(&packs[0]);
        uform_packed_free(&packs[1]);
        free(codes);
        free(scales);
        problem_free(&p);
    }
}

/* gelu.c's loops (the widest through uform_gelu_rows, then each of AVX-512,
 * AVX2 and scalar that this CPU runs) give uform_gelu_value's bits on every
 * input: zeros, subnormals, infinities, NaN, the clamp at x ~ -10.001 (t = 126),
 * tails of every length. */
static void test_gelu_vectors(void) {
    enum { COUNT = 4099 };
    float *x = xmalloc(COUNT * sizeof(float)), *y = xmalloc(COUNT * sizeof(float));
    static const float special[] = {0.0f, -0.0f, 1e-45f, -1e-45f, 1e-40f, 1.1754944e-38f, INFINITY,
                                    -INFINITY, NAN, -9.9f, -9.95f, -10.0f, -10.001f, -10.0011f,
                                    -10.002f, -10.03f, -10.04f, 10.0f, 10.03f, 3.0e38f, -3.0e38f, 88.0f, -88.0f,
                                    1.0f, -1.0f, 0.2f, -0.2f, 0.3f, -0.3f};
    size_t specials = sizeof(special) / sizeof(special[0]);
    for (size_t i = 0; i < COUNT; i++) {
        float r = rng_float();
        x[i] = i < specials ? special[i] : i % 3 == 0 ? r * 12.0f : i % 3 == 1 ? r : r * 1e4f;
    }
    memcpy(y, x, COUNT * sizeof(float));
    size_t lengths[] = {1, 7, 15, 16, 17, 100, COUNT - 200};
    size_t offset = 0;
    for (size_t l = 0; l < sizeof(lengths) / sizeof(lengths[0]); l++) {
        uform_gelu_rows(y + offset, 1, lengths[l], 0);
        offset += lengths[l];
    }
    uform_gelu_rows(y + offset, 2, (COUNT - offset) / 2, (COUNT - offset) / 2);
    size_t bad = 0;
    for (size_t i = 0; i < COUNT; i++) {
        float expected = uform_gelu_value(x[i]);
        bool same =
            memcmp(&expected, &y[i], sizeof(float)) == 0 || (isnan(expected) && isnan(y[i]));
        if (!same && bad++ < 3)
            printf("  gelu(%.9g) = %.9g, the definition gives %.9g\n", x[i], y[i], expected);
    }
    CHECK(bad == 0, "%zu GELU values differ from uform_gelu_value", bad);
    static const char *const loops[] = {"avx512", "avx2", "scalar"};
    for (size_t l = 0; l < sizeof(loops) / sizeof(loops[0]); l++) {
        uform_gelu_row_fn_t loop = uform_gelu_row_named(loops[l]);
        if (!loop) {
            printf("skip gelu's %s loop: not on this CPU or build\n", loops[l]);
            continue;
        }
        for (size_t start = 0; start < COUNT; start += 1000) /* tails of 1000 and 99 */
            loop(x + start, y + start, COUNT - start < 1000 ? COUNT - start : 1000);
        size_t differ = 0;
        for (size_t i = 0; i < COUNT; i++) {
            float expected = uform_gelu_value(x[i]);
            if (memcmp(&expected, &y[i], sizeof(float)) != 0 && !(isnan(expected) && isnan(y[i])) &&
                differ++ < 3)
                printf("  %s: gelu(%.9g) = %.9g, the definition gives %.9g\n", loops[l], x[i], y[i], expected);
        }
        CHECK(differ == 0, "%zu GELU values of the %s loop differ from uform_gelu_value", differ, loops[l]);
    }
    free(x);
    free(y);
}

/* Layer norm (rows.c) against its chain written out in scalar steps: 16 lane
 * partial sums (lane l: elements l, l + 16, ... in order) added in lane order,
 * mean = sum / width, the squares' lanes the same way, 1 / sqrt(variance +
 * 1e-5), y = (x - mean) * inverse * weight + bias; bit for bit, for widths of
 * whole vectors (the AVX-512 path where the CPU has it) and others, on 1 and 3
 * threads, for row counts around the 16-row blocks. */
static void oracle_layer_norm_row(const float *x, size_t width, const float *weight,
                                  const float *bias, float *y, float *mean_out, float *rstd_out) {
    float partial[16] = {0}, squares[16] = {0}, sum = 0, variance = 0;
    for (size_t i = 0; i < width; i++) partial[i % 16] += x[i];
    for (size_t l = 0; l < 16; l++) sum += partial[l];
    float mean = sum / (float)width;
    for (size_t i = 0; i < width; i++) {
        float d = x[i] - mean;
        squares[i % 16] += d * d;
    }
    for (size_t l = 0; l < 16; l++) variance += squares[l];
    variance /= (float)width;
    float inverse = 1.0f / sqrtf(variance + 1e-5f);
    for (size_t i = 0; i < width; i++) y[i] = (x[i] - mean) * inverse * weight[i] + bias[i];
    *mean_out = mean;
    *rstd_out = inverse;
}

static void test_layer_norm_bits(uform_executor_t **executors) {
    static const size_t widths[] = {16, 48, 512, 50, 7};
    static const size_t row_counts[] = {1, 15, 16, 17, 40, 100};
    for (size_t w = 0; w < sizeof(widths) / sizeof(widths[0]); w++)
        for (size_t c = 0; c < sizeof(row_counts) / sizeof(row_counts[0]); c++) {
            size_t width = widths[w], rows = row_counts[c];
            float *x = xmalloc(rows * width * sizeof(float)), *y = xmalloc(rows * width * sizeof(float));
            float *expected = xmalloc(rows * width * sizeof(float));
            float *weight = xmalloc(width * sizeof(float)), *bias = xmalloc(width * sizeof(float));
            float mean[100], rstd[100], expected_mean[100], expected_rstd[100];
            for (size_t i = 0; i < rows * width; i++)
                x[i] = rng_float() * (i % 7 == 0 ? 100.0f : 1.0f) + (i % 5 == 0 ? 3.0f : 0.0f);
            for (size_t i = 0; i < width; i++) {
                weight[i] = 1.0f + rng_float();
                bias[i] = rng_float();
            }
            for (size_t r = 0; r < rows; r++)
                oracle_layer_norm_row(x + r * width, width, weight, bias, expected + r * width,
                                      &expected_mean[r], &expected_rstd[r]);
            for (size_t e = 0; e < 3; e += 2) {
                uform_layer_norm_forward(executors[e], x, rows, width, weight, bias, y, mean, rstd);
                CHECK(memcmp(y, expected, rows * width * sizeof(float)) == 0 &&
                          memcmp(mean, expected_mean, rows * sizeof(float)) == 0 &&
                          memcmp(rstd, expected_rstd, rows * sizeof(float)) == 0,
                      "layer norm of %zu rows of %zu on %zu threads differs from its chain", rows,
                      width, e + 1);
            }
            free(x), free(y), free(expected), free(weight), free(bias);
        }
}

#if defined(__x86_64__)
/* The SAPPHIRE class's BF16 rounding of activations (bf16_avx512.h): one
 * vcvtne2ps2bf16 per 32 floats, the integer rounding where a subnormal is
 * among them. Both must give uform_f32_to_bf16's bits for every float:
 * subnormals (which the instruction flushes), NaN payloads, infinities, ties,
 * and the largest floats that round up to infinity. */
static UFORM_SAPPHIRE_TARGET void bf16_convert_pairs(const float *x, uint16_t *pairs,
                                                     uint16_t *interleaved) {
    _mm512_storeu_si512(pairs, uform_bf16_pairs32(x));
    /* interleave16: the first 16 floats with the next 16, as (a[i], b[i]) */
    _mm512_storeu_si512(interleaved, uform_bf16_interleave16(_mm512_loadu_si512(x),
                                                             _mm512_loadu_si512(x + 16)));
}

static void test_bf16_conversions(void) {
    if (!uform_cpu_class_supported(UFORM_CPU_CLASS_SAPPHIRE)) {
        printf("skip the AVX-512 BF16 conversions: not supported by this CPU\n");
        return;
    }
    static const uint32_t special[] = {
        0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u, 0x007fffffu, 0x807fffffu,
        0x00408000u, 0x00018000u, 0x00800000u, 0x80800000u, 0x7f800000u, 0xff800000u,
        0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7fa00000u, 0xff812345u, 0x7f7fffffu,
        0xff7fffffu, 0x7f7f8000u, 0x3f808000u, 0x3f818000u, 0x3f80c000u, 0x3f807fffu,
        0x3f800001u, 0xbf808000u, 0x40490fdbu, 0x00010000u};
    enum { GROUPS = 64 };
    size_t count = sizeof(special) / sizeof(special[0]), bad = 0;
    for (size_t g = 0; g < GROUPS; g++) {
        float x[32];
        uint16_t pairs[32], interleaved[32];
        for (size_t i = 0; i < 32; i++) {
            /* groups 0-15: specials only where g says (the fast path in most);
             * groups 16+: every lane special */
            uint32_t bits = g < 16 && i != g && i != 31 - g
                                ? (uint32_t)(rng_next() >> 32)
                                : special[(g * 32 + i) % count];
            if (g < 16 && i != g && i != 31 - g && (bits & 0x7f800000u) == 0) bits |= 0x3f000000u;
            memcpy(&x[i], &bits, sizeof(bits));
        }
        bf16_convert_pairs(x, pairs, interleaved);
        for (size_t i = 0; i < 32; i++) {
            uint16_t expected = uform_f32_to_bf16(x[i]);
            /* interleaved word i / 2: (x[i / 2], x[16 + i / 2]) */
            uint16_t expected_interleaved = uform_f32_to_bf16(x[i % 2 * 16 + i / 2]);
            if ((pairs[i] != expected || interleaved[i] != expected_interleaved) && bad++ < 3)
                printf("  bf16 of %a (0x%08x): pairs 0x%04x, interleaved 0x%04x, expected 0x%04x / 0x%04x\n",
                       (double)x[i], (unsigned)(((uint32_t *)x)[i]), pairs[i], interleaved[i], expected,
                       expected_interleaved);
        }
    }
    CHECK(bad == 0, "%zu AVX-512 BF16 conversions differ from uform_f32_to_bf16", bad);
}
#else
static void test_bf16_conversions(void) {}
#endif

#if defined(__x86_64__)
/* The AMX class (amx.c) with its four tile instructions modelled in C
 * (amx_kernel.h, UFORM_AMX_EMULATE): its packing, tile layouts, partial tiles,
 * k padding and the driver's hooks run here on any AVX-512 BF16 machine; only
 * the instructions themselves need an AMX one. */
#define UFORM_AMX_EMULATE
#include "backend/cpu/amx_kernel.h"
#include "backend/cpu/attention_amx.h"

static const uform_gemm_class_t amx_emulated_gemm = UFORM_AMX_GEMM_CLASS(NULL, NULL);

UFORM_AMX_TABLE_FUNCTIONS(amx_emulated_gemm)

static const uform_cpu_kernels_t amx_emulated = {
    .cpu_class = UFORM_CPU_CLASS_AMX,
    .name = "amx (emulated tiles)",
    .pack = uform_amx_pack,
    .pack_e4m3 = uform_amx_pack_e4m3,
    .gemm = uform_amx_gemm_run,
    .attention = uform_attention_amx,
};

/* SAPPHIRE's attention (attention_bf16.c) against float64 attention of the
 * same BF16-rounded queries, keys and values, the scores' 1/8 included: what
 * is left is the probabilities' BF16 rounding (2^-9 relative each; their
 * normaliser is the sum of the unrounded FP32 exponentials, so the output
 * moves by at most about 2^-9 max|v|), the base-2 exponential's 2e-7 and
 * the FP32 sums' rounding: each output within 2^-8 max|v| (measured: at
 * most 2^-9.9 max|v|). A scale, layout or padding error moves outputs by
 * O(max|v|) (a softmax in the wrong base by 0.2-0.35 max|v| here). */
static void test_attention_bf16_accuracy(void) {
    static const size_t lengths[] = {1, 5, 16, 31, 32, 33, 97, 257};
    for (size_t l = 0; l < 2 * sizeof(lengths) / sizeof(lengths[0]); l++) {
        /* the second round: far scores, every q . k / 8 near -200 (q about
         * 5 + noise, k about -5 + noise), so that a row's largest score is far
         * below the zeros a padded lane's key gives: a maximum taken over
         * those lanes leaves every exponential at the clamp */
        bool far = l >= sizeof(lengths) / sizeof(lengths[0]);
        size_t n = lengths[l % (sizeof(lengths) / sizeof(lengths[0]))], stride = 3 * UFORM_HEAD_WIDTH + 5;
        float *qkv = xmalloc(n * stride * sizeof(float));
        for (size_t i = 0; i < n * stride; i++) {
            size_t column = i % stride;
            qkv[i] = !far || column >= 2 * UFORM_HEAD_WIDTH ? 3.0f * rng_float()
                     : column < UFORM_HEAD_WIDTH            ? 5.0f + 0.5f * rng_float()
                                                            : -5.0f + 0.5f * rng_float();
        }
        const float *q = qkv, *k = qkv + UFORM_HEAD_WIDTH, *v = qkv + 2 * UFORM_HEAD_WIDTH;
        float *scratch = aligned_alloc(64, uform_attention_scratch_floats(n) * sizeof(float));
        float *got = xmalloc(n * UFORM_HEAD_WIDTH * sizeof(float));
        double *weights = xmalloc(n * sizeof(double));
        uform_attention_bf16(q, k, v, stride, n, 0, n, got, UFORM_HEAD_WIDTH, scratch);
        double largest = 0, worst = 0;
        for (size_t j = 0; j < n; j++)
            for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++)
                largest = fmax(largest, fabs(uform_bf16_to_f32(uform_f32_to_bf16(v[j * stride + d]))));
        for (size_t i = 0; i < n; i++) {
            double top = -INFINITY, total = 0;
            for (size_t j = 0; j < n; j++) {
                double score = 0;
                for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++)
                    score += (double)uform_bf16_to_f32(uform_f32_to_bf16(q[i * stride + d])) *
                             (double)uform_bf16_to_f32(uform_f32_to_bf16(k[j * stride + d]));
                weights[j] = score / 8.0;
                top = fmax(top, weights[j]);
            }
            for (size_t j = 0; j < n; j++) total += weights[j] = exp(weights[j] - top);
            for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++) {
                double out = 0;
                for (size_t j = 0; j < n; j++)
                    out += weights[j] / total * (double)uform_bf16_to_f32(uform_f32_to_bf16(v[j * stride + d]));
                worst = fmax(worst, fabs(out - (double)got[i * UFORM_HEAD_WIDTH + d]));
            }
        }
        CHECK(worst <= 0x1p-8 * largest, "SAPPHIRE attention n=%zu%s: %.3g from float64 (bound %.3g)", n,
              far ? ", far scores" : "", worst, 0x1p-8 * largest);
        free(qkv);
        free(scratch);
        free(got);
        free(weights);
    }
}

/* The AMX attention (attention_amx.h) over the emulated tiles against
 * SAPPHIRE's (attention_bf16.c): the same BF16 queries (the 1/8 folded in
 * before rounding is exact), keys, values and softmax; only the FP32 sums'
 * order and rounding differ, and where the softmax's base-2 scale log2 e is
 * applied (SAPPHIRE's products end with it, AMX's softmax applies it). A
 * score moves by a few FP32 ulps of its magnitude, so a probability's BF16 rounding may flip one step (2^-8
 * relative): each output within 2^-7 max|v| of SAPPHIRE's. A layout or
 * padding error moves outputs by O(max|v|). Then a query block's rows alone
 * equal them inside larger blocks, bit for bit (the determinism contract). */
static void test_attention_amx_emulated(void) {
    static const size_t lengths[] = {1, 5, 16, 31, 32, 33, 64, 97, 130, 257};
    for (size_t l = 0; l < sizeof(lengths) / sizeof(lengths[0]); l++) {
        size_t n = lengths[l], stride = 3 * UFORM_HEAD_WIDTH + 5;
        float *qkv = xmalloc(n * stride * sizeof(float));
        for (size_t i = 0; i < n * stride; i++) qkv[i] = 3.0f * rng_float();
        const float *q = qkv, *k = qkv + UFORM_HEAD_WIDTH, *v = qkv + 2 * UFORM_HEAD_WIDTH;
        size_t scratch_bytes = uform_attention_scratch_floats(n) * sizeof(float);
        float *scratch = aligned_alloc(64, scratch_bytes);
        float *want = xmalloc(n * UFORM_HEAD_WIDTH * sizeof(float));
        float *got = xmalloc(n * UFORM_HEAD_WIDTH * sizeof(float));
        float *alone = xmalloc(UFORM_HEAD_WIDTH * sizeof(float));
        uform_attention_bf16(q, k, v, stride, n, 0, n, want, UFORM_HEAD_WIDTH, scratch);
        uform_attention_amx(q, k, v, stride, n, 0, n, got, UFORM_HEAD_WIDTH, scratch);
        double largest = 0, worst = 0;
        for (size_t j = 0; j < n; j++)
            for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++)
                largest = fmax(largest, fabs(v[j * stride + d]));
        for (size_t i = 0; i < n * UFORM_HEAD_WIDTH; i++) worst = fmax(worst, fabs(got[i] - want[i]));
        CHECK(worst <= 0x1p-7 * largest, "AMX attention (emulated tiles) n=%zu: %.3g from SAPPHIRE's "
              "(bound %.3g)", n, worst, 0x1p-7 * largest);
        bool same = true;
        for (size_t i = 0; i < n && same; i += 1 + i / 3) {
            uform_attention_amx(q, k, v, stride, n, i, i + 1, alone - i * UFORM_HEAD_WIDTH,
                                UFORM_HEAD_WIDTH, scratch);
            same = memcmp(alone, got + i * UFORM_HEAD_WIDTH, UFORM_HEAD_WIDTH * sizeof(float)) == 0;
        }
        CHECK(same, "AMX attention (emulated tiles) n=%zu: a query alone differs", n);
        free(qkv);
        free(scratch);
        free(want);
        free(got);
        free(alone);
    }
}

/* The class's table, and the automatic choice wherever the machine runs it. */
static void test_amx_table(void) {
    const uform_cpu_kernels_t *amx = uform_cpu_kernels_for(UFORM_CPU_CLASS_AMX);
    CHECK(amx == &uform_cpu_kernels_amx && strcmp(amx->name, "amx") == 0, "the AMX table");
    CHECK((uform_cpu_class_best() == UFORM_CPU_CLASS_AMX) ==
              uform_cpu_class_supported(UFORM_CPU_CLASS_AMX),
          "AMX runs here but is not the automatic choice, or the reverse");
}
#endif

int main(int argc, char **argv) {
    test_detect();
    test_e4m3_decoders();
    test_gelu_vectors();
    test_bf16_conversions();
    uform_executor_t *executors[3];
    for (size_t t = 0; t < 3; t++)
        if (uform_executor_for_ram(t + 1, NULL, 0, &executors[t]) != UFORM_OK) {
            printf("executor: %s\n", uform_last_error());
            return 1;
        }
    test_layer_norm_bits(executors);
    test_scratch(executors[1]);
    static const uform_cpu_class_t classes[] = {UFORM_CPU_CLASS_SERIAL, UFORM_CPU_CLASS_HASWELL,
                                                UFORM_CPU_CLASS_SKYLAKE, UFORM_CPU_CLASS_SAPPHIRE,
                                                UFORM_CPU_CLASS_NEON, UFORM_CPU_CLASS_SVE,
                                                UFORM_CPU_CLASS_NEON_BF16, UFORM_CPU_CLASS_SVE_BF16,
                                                UFORM_CPU_CLASS_AMX};
    uint64_t fma_digest = 0, bfdot_digest = 0;
    const char *fma_first = NULL, *bfdot_first = NULL;
    for (size_t c = 0; c < sizeof(classes) / sizeof(classes[0]); c++) {
        const uform_cpu_kernels_t *kernels = uform_cpu_kernels_for(classes[c]);
        const char *name = uform_cpu_class_name(classes[c]);
        bool wanted = argc < 2;
        for (int a = 1; a < argc; a++) wanted |= strcmp(argv[a], name) == 0;
        if (!wanted) continue;
        if (!kernels || !uform_cpu_class_supported(classes[c])) {
            printf("skip %s: not supported by this CPU or build\n", name);
            continue;
        }
        CHECK(kernels->cpu_class == classes[c] && strcmp(kernels->name, name) == 0,
              "%s table names itself %s", name, kernels->name);
        int before = failed;
        test_accuracy(kernels, executors[1]);
        test_determinism(kernels, executors, 3);
        test_e4m3(kernels, executors, 3);
        test_gelu_epilogue(kernels, executors, 3);
        if (is_fma_class(classes[c])) test_attention_bits(kernels);
        uint64_t digest = gemm_digest(kernels, executors[2]);
        printf("gemm digest %s: %016llx\n", name, (unsigned long long)digest);
        if (is_fma_class(classes[c])) {
            if (!fma_first) {
                fma_first = name;
                fma_digest = digest;
            }
            CHECK(digest == fma_digest, "%s and %s are both FMA chains but differ", name, fma_first);
        }
        if (is_bfdot_class(classes[c])) {
            if (!bfdot_first) {
                bfdot_first = name;
                bfdot_digest = digest;
            }
            CHECK(digest == bfdot_digest, "%s and %s are both BFDOT chains but differ", name,
                  bfdot_first);
        }
        printf("%s: %s\n", name, failed == before ? "ok" : "FAILED");
    }
#if defined(__x86_64__)
    test_amx_table();
    bool wanted_amx = argc < 2;
    for (int a = 1; a < argc; a++) wanted_amx |= strcmp(argv[a], "amx") == 0;
    if (uform_cpu_class_supported(UFORM_CPU_CLASS_SAPPHIRE)) test_attention_bf16_accuracy();
    if (wanted_amx && !uform_cpu_class_supported(UFORM_CPU_CLASS_SAPPHIRE)) {
        printf("skip amx (emulated tiles): its packing needs AVX-512 BF16\n");
    } else if (wanted_amx) {
        int before = failed;
        test_accuracy(&amx_emulated, executors[1]);
        test_determinism(&amx_emulated, executors, 3);
        test_e4m3(&amx_emulated, executors, 3);
        test_gelu_epilogue(&amx_emulated, executors, 3);
        test_attention_amx_emulated();
        printf("amx (emulated tiles): %s\n", failed == before ? "ok" : "FAILED");
    }
#endif
    for (size_t t = 0; t < 3; t++) uform_executor_free(executors[t]);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
