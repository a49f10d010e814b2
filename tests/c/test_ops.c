/* test_ops.c: every operation of a backend's table (backend/backend.h) against
 * float64 references, in the spirit of llama.cpp's test-backend-ops.
 *
 * `test_backend(b, label)` goes through b->ops only: buffers come from
 * b->ops->alloc, data crosses with upload/download, and every group of
 * operations ends with a synchronize that must return UFORM_OK, as if device
 * memory were not host memory. A new backend (CUDA) is tested by passing its
 * uform_backend_t to test_backend and test_determinism; the one thing this file
 * must learn about it is how it packs a weight for the inference products (the
 * "backend specifics" section below). main() runs every CPU class this machine
 * runs, each on executors of 1 and 2 threads.
 *
 * Device memory: every array an operation reads or writes element-wise is
 * allocated with b->ops->alloc, index arrays included (segments, positions,
 * ids, targets, rows, decay flags). The objectives' descriptions stay on the
 * host as structs do (a uform_weight_t, a batch, a configuration): their data
 * arrays (embeddings, token vectors, states, parameters, gradients, losses)
 * are device memory, their structure (widths, bags, groups, relations, offsets,
 * choice bytes and targets) host memory, since every backend checks it on the
 * host (loss_checks.c).
 *
 * Build and run (from the repository root):
 *   make c/build/tests/test_ops && c/build/tests/test_ops
 * UFORM_TEST_VERBOSE=1 prints the worst error of every comparison.
 *
 * What is checked, for each operation:
 * - forwards against a float64 reference on random inputs, within a bound
 *   derived from the precision (stated beside each check; u = 2^-24 is the
 *   FP32 unit roundoff), on edge shapes: 1 row, widths that are not a multiple
 *   of 16, k across the GEMM blocks, empty segments, segments of 1 and of more
 *   than 64 rows, accumulate true/false, bias NULL/non-NULL, in place where the
 *   spec allows it, output padding left alone, outputs that must be
 *   overwritten starting as NaN;
 * - backwards against the analytic float64 gradient (every element) and
 *   against central finite differences (h = 1e-6) of the float64 reference
 *   forward composed with a random projection r of its output (loss =
 *   sum(r * y), so dy = r), on samples of the elements;
 * - the accumulate convention: gradients start from a random value of their
 *   own size, and a second call adds the same increment again (the increment
 *   after two calls is twice the reference);
 * - determinism: 1 and 2 threads give the same bits (test_determinism), and a
 *   row (a segment, for attention) computed alone equals it inside a batch;
 * - the objectives (contrastive, late interaction, choices) against float64
 *   references of docs/training.md sections 3, 9 and 10 (the contrastive one
 *   and its fixture are test_objectives.c's), their gradients by finite
 *   differences of those references, and MaxSim against a float64 oracle.
 *
 * Gradient tolerance (the relative check of test_backward.c):
 * |a_i - e_i| <= 1e-4 * max(|e_i|, fraction * max_j |e_j|): FP32 chains of at
 * most a few hundred roundings (~300 u ~ 2e-5) of terms the size of the
 * tensor's larger components (cancellation in layer norm's dx, the softmax);
 * fraction is 0.01 unless stated. Finite differences are far more accurate:
 * truncation h^2 |f'''| / 6 ~ 1e-13, rounding ~1e-16 |L| / h ~ 1e-10 |L|.
 */
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define UFORM_TEST_SEED 0x5851f42d4c957f2dull
#include "check.h"

/* ---- precision constants --------------------------------------------------- */

#define U32 0x1p-24            /* FP32 unit roundoff */
#define U64 0x1p-53            /* float64 unit roundoff */
#define BF16_U 0x1p-8          /* BF16 (8 significant bits) rounding, relative (test_kernels.c) */
#define FAST_EXP_ERROR (4 * U32) /* uform_fast_exp: ~2 ulp = 2 * 2^-23 relative (fast_exp.h) */
#define STEP 1e-6              /* finite-difference step (relative to the input's scale) */
#define FD_SLACK 1e-8          /* finite differences of linear losses: ~1e-16 |L| / h, |L| < 1e2 */
#define GRADIENT_TOLERANCE 1e-4
#define SENTINEL 12345.0f      /* output padding that must survive */

/* ---- host helpers ------------------------------------------------------------ */

/* Uniform in [-1, 1). */
static float rng_float(void) { return (float)((double)(rng_next() >> 11) * 0x1p-52 - 1.0); }
static size_t rng_below(size_t n) { return (size_t)(rng_next() % n); }

static bool verbose;

static void *xmalloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) {
        printf("out of memory\n");
        exit(2);
    }
    return p;
}

static float *random_floats(size_t n, float scale) {
    float *x = xmalloc(n, sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = rng_float() * scale;
    return x;
}

static float *copy_floats(const float *x, size_t n) {
    float *y = xmalloc(n, sizeof(float));
    if (n) memcpy(y, x, n * sizeof(float));
    return y;
}

static double *to_double(const float *x, size_t n) {
    double *y = xmalloc(n, sizeof(double));
    for (size_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

static float *filled(size_t n, float value) {
    float *x = xmalloc(n, sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = value;
    return x;
}

static bool same_bits(const void *a, const void *b, size_t bytes) {
    return bytes == 0 || memcmp(a, b, bytes) == 0;
}

static float bf16_round(float x) { return uform_bf16_to_f32(uform_f32_to_bf16(x)); }

/* A starting value for an accumulated gradient: uniform within +-half the
 * largest |expected| of each group of `group` elements (1 where that is 0),
 * so the increment stays resolvable after the add (error u |base| at most
 * 0.5 u / 0.01 ~ 3e-6 of the check's floor). */
static float *base_like(const double *expected, size_t count, size_t group) {
    float *base = xmalloc(count, sizeof(float));
    for (size_t g = 0; g < count; g += group) {
        size_t end = g + group < count ? g + group : count;
        double largest = 0;
        for (size_t i = g; i < end; i++) largest = fmax(largest, fabs(expected[i]));
        if (largest == 0) largest = 1;
        for (size_t i = g; i < end; i++) base[i] = (float)(0.5 * largest * rng_float());
    }
    return base;
}

/* ---- device helpers: everything crosses through the table ----------------- */

static void *dev_alloc(uform_backend_t *b, size_t bytes) {
    void *p = b->ops->alloc(b, bytes);
    if (!p) {
        printf("%s: cannot allocate %zu bytes: %s\n", b->ops->name, bytes, uform_last_error());
        exit(2);
    }
    return p;
}

static void *dev_upload(uform_backend_t *b, const void *host, size_t bytes) {
    void *p = dev_alloc(b, bytes);
    if (bytes) b->ops->upload(b, p, host, bytes);
    return p;
}

static float *dev_floats(uform_backend_t *b, const float *host, size_t count) {
    return dev_upload(b, host, count * sizeof(float));
}

static void dev_free(uform_backend_t *b, void *device) { b->ops->free(b, device); }

/* Every operation issued so far finished without a failure. */
static void sync_check(uform_backend_t *b, const char *label, const char *what) {
    uform_status_t status = b->ops->synchronize(b);
    CHECK(status == UFORM_OK, "%s %s: synchronize returned %d (%s)", label, what, (int)status,
          uform_last_error());
}

/* New host memory holding `count` floats of device memory (after a sync_check). */
static float *fetch(uform_backend_t *b, const float *device, size_t count) {
    float *host = xmalloc(count, sizeof(float));
    if (count) b->ops->download(b, host, device, count * sizeof(float));
    return host;
}

static void fetch_into(uform_backend_t *b, float *host, const float *device, size_t count) {
    if (count) b->ops->download(b, host, device, count * sizeof(float));
}

/* ---- backend specifics --------------------------------------------------------
 * How a backend packs a BF16 weight for the inference products (`linear` on
 * packed weights) and whether those products (and the inference attention)
 * round activations to BF16. The CPU backend's come from its class table
 * (b->device, backend.h); a new backend adds its own branch here. */

typedef struct {
    uform_weight_t weight; /* weight.packed points into `cpu`: do not copy this struct */
    uform_packed_t cpu;
} packed_weight_t;

static bool is_cpu(const uform_backend_t *b) { return strcmp(b->ops->name, "cpu") == 0; }

static bool pack_weight(uform_backend_t *b, const uint16_t *bits, size_t n, size_t k,
                        packed_weight_t *out) {
    memset(out, 0, sizeof(*out));
    if (is_cpu(b)) {
        const uform_cpu_kernels_t *kernels = b->device;
        uform_status_t status = kernels->pack(bits, n, k, &out->cpu);
        CHECK(status == UFORM_OK, "%s pack %zu x %zu: %s", kernels->name, n, k,
              uform_last_error());
        out->weight = (uform_weight_t){&out->cpu, NULL, n, k};
        return status == UFORM_OK;
    }
    CHECK(false, "no packer for backend %s in test_ops.c", b->ops->name);
    return false;
}

static void packed_weight_free(uform_backend_t *b, packed_weight_t *w) {
    if (is_cpu(b)) uform_packed_free(&w->cpu);
}

/* SAPPHIRE and AMX round x (and attention's q, k, p, v) to BF16, nearest even, before
 * their products (sapphire.c, amx.c, attention_bf16.c); NEON_BF16 and SVE_BF16 round the
 * GEMMs' x the same way (their attention is FP32, within the looser bound too);
 * the other classes are FP32. BFDOT's sums round to odd (error under 2u where
 * nearest is under u) but take one rounding per pair of products plus one per
 * pair added: (2k + 1) u S at most, inside the (2k + 2) u S bound below. */
static bool bf16_activations(const uform_backend_t *b) {
    if (!is_cpu(b)) return false;
    uform_cpu_class_t cpu_class = ((const uform_cpu_kernels_t *)b->device)->cpu_class;
    return cpu_class == UFORM_CPU_CLASS_SAPPHIRE || cpu_class == UFORM_CPU_CLASS_AMX ||
           cpu_class == UFORM_CPU_CLASS_NEON_BF16 || cpu_class == UFORM_CPU_CLASS_SVE_BF16;
}

/* ---- comparisons ------------------------------------------------------------ */

/* |got_i - ref_i| <= bound_i for every i. */
static void bound_check(const char *label, const char *what, const float *got, const double *ref,
                        const double *bound, size_t n) {
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double difference = fabs((double)got[i] - ref[i]);
        double excess = difference == 0 ? 0 : difference / bound[i];
        if (!(excess <= worst)) {
            worst = excess;
            at = i;
        }
    }
    CHECK(worst <= 1.0, "%s %s: element %zu is %.9g, reference %.12g (%.3g of the bound %.3g)",
          label, what, at, n ? got[at] : 0.0, n ? ref[at] : 0.0, worst, n ? bound[at] : 0.0);
    if (verbose) printf("  %s %-44s worst %.3g of the bound\n", label, what, worst);
}

/* |got_i - ref_i| <= relative |ref_i| + absolute for every i. */
static void forward_check(const char *label, const char *what, const float *got, const double *ref,
                          size_t n, double relative, double absolute) {
    double *bound = xmalloc(n, sizeof(double));
    for (size_t i = 0; i < n; i++) bound[i] = relative * fabs(ref[i]) + absolute;
    bound_check(label, what, got, ref, bound, n);
    free(bound);
}

/* The increment of `calls` accumulating calls, (got_i - base_i) / calls, against
 * expected (expected[t] belongs to element indices[t]; indices NULL: element t),
 * with the relative check of the header comment: the floor of the scale is
 * `fraction` of the largest |expected|, and at least `magnitude`. */
static void increment_check(const char *label, const char *what, const float *got,
                            const float *base, double calls, const double *expected,
                            const size_t *indices, size_t count, double fraction,
                            double magnitude) {
    double largest = 0;
    for (size_t t = 0; t < count; t++) largest = fmax(largest, fabs(expected[t]));
    double floor = fraction * largest > magnitude ? fraction * largest : magnitude;
    if (floor == 0) floor = 1e-300;
    double worst = 0;
    size_t at = 0;
    for (size_t t = 0; t < count; t++) {
        size_t i = indices ? indices[t] : t;
        double increment = ((double)got[i] - (base ? (double)base[i] : 0.0)) / calls;
        double scale = fabs(expected[t]) > floor ? fabs(expected[t]) : floor;
        double error = fabs(increment - expected[t]) / scale;
        if (!(error <= worst)) {
            worst = error;
            at = t;
        }
    }
    size_t i = count ? (indices ? indices[at] : at) : 0;
    CHECK(count > 0 && worst <= GRADIENT_TOLERANCE,
          "%s %s (%g calls): relative error %.3g at element %zu of %zu (increment %.9g, "
          "expected %.9g)",
          label, what, calls, worst, i, count,
          count ? ((double)got[i] - (base ? (double)base[i] : 0.0)) / calls : 0.0,
          count ? expected[at] : 0.0);
    if (verbose) printf("  %s %-44s %g calls, worst %.3g\n", label, what, calls, worst);
}

/* The increment of `calls` calls against calls * expected within calls *
 * bound_i plus the rounding of each add into the base (u |got| per call). */
static void increment_bound_check(const char *label, const char *what, const float *got,
                                  const float *base, double calls, const double *expected,
                                  const double *bound, const size_t *indices, size_t count) {
    double worst = 0;
    size_t at = 0;
    for (size_t t = 0; t < count; t++) {
        size_t i = indices ? indices[t] : t;
        double increment = (double)got[i] - (base ? (double)base[i] : 0.0);
        /* each add into the running value rounds once, by at most u of a
         * value no larger than |base| + calls |expected| or |got|; that worst
         * case is reached (mean_pool_backward: 0.97 of it), so allow 2 u */
        double running = fmax(fabs((double)got[i]), (base ? fabs((double)base[i]) : 0.0) +
                                                        calls * fabs(expected[t]));
        double allowed = calls * bound[i] + 2 * calls * U32 * running + 1e-30;
        double error = fabs(increment - calls * expected[t]) / allowed;
        if (!(error <= worst)) {
            worst = error;
            at = t;
        }
    }
    size_t i = count ? (indices ? indices[at] : at) : 0;
    CHECK(worst <= 1.0, "%s %s (%g calls): element %zu off by %.3g of its bound (got %.9g, expected %.9g)",
          label, what, calls, i, worst, count ? (double)got[i] : 0.0,
          count ? (base ? (double)base[i] : 0.0) + calls * expected[at] : 0.0);
    if (verbose) printf("  %s %-44s %g calls, worst %.3g of the bound\n", label, what, calls, worst);
}

typedef double (*loss_fn_t)(void *context);

/* Central difference of f at *p with step h. */
static double central(loss_fn_t f, void *context, double *p, double h) {
    double saved = *p;
    *p = saved + h;
    double up = f(context);
    *p = saved - h;
    double down = f(context);
    *p = saved;
    return (up - down) / (2 * h);
}

/* ==== memory ================================================================ */

static void test_memory(uform_backend_t *b, const char *label) {
    size_t n = 1000;
    float *host = random_floats(n, 1.0f), *patch = random_floats(5, 1.0f);
    float *a = dev_alloc(b, n * sizeof(float)), *c = dev_alloc(b, n * sizeof(float));
    CHECK((uintptr_t)a % 64 == 0 && (uintptr_t)c % 64 == 0, "%s alloc: not 64-byte aligned",
          label);
    b->ops->upload(b, a, host, n * sizeof(float));
    b->ops->upload(b, a + 3, patch, 5 * sizeof(float));
    b->ops->copy(b, c, a, n * sizeof(float));
    b->ops->zero(b, c + 100, 50 * sizeof(float));
    b->ops->copy(b, c + 500, a + 10, 7 * sizeof(float));
    sync_check(b, label, "memory");
    float *got_a = fetch(b, a, n), *got_c = fetch(b, c, n);
    float *expected = copy_floats(host, n);
    memcpy(expected + 3, patch, 5 * sizeof(float));
    CHECK(same_bits(got_a, expected, n * sizeof(float)), "%s upload/download: data differ", label);
    for (size_t i = 100; i < 150; i++) expected[i] = 0.0f;
    memcpy(expected + 500, expected + 10, 7 * sizeof(float));
    CHECK(same_bits(got_c, expected, n * sizeof(float)), "%s copy/zero: data differ", label);
    float part[7];
    b->ops->download(b, part, c + 500, sizeof(part));
    CHECK(same_bits(part, expected + 500, sizeof(part)), "%s download at an offset differs", label);
    dev_free(b, a);
    dev_free(b, c);
    free(host); free(patch); free(got_a); free(got_c); free(expected);
}

/* ==== gemm ================================================================== */

/* c[m, n] = (accumulate ? c : 0) + op(a) op(b) (+ bias), against float64. FP32
 * chain over k of at most 2 roundings a step (mul then add; one FMA elsewhere)
 * plus the bias, each at most u times a partial sum no larger than
 * S = sum_p |a b| + |c0| + |bias|: |error| <= (2k + 2) u S (test_kernels.c). */
static void gemm_case(uform_backend_t *b, const char *label, size_t m, size_t n, size_t k, bool ta,
                      bool tb, size_t pad, bool with_bias, bool accumulate) {
    char what[128];
    snprintf(what, sizeof(what), "gemm %zux%zux%zu a%s b%s pad %zu bias %d acc %d", m, n, k,
             ta ? "T" : "", tb ? "T" : "", pad, with_bias, accumulate);
    size_t a_rows = ta ? k : m, a_stride = (ta ? m : k) + pad;
    size_t b_rows = tb ? n : k, b_stride = (tb ? k : n) + pad;
    size_t c_stride = n + pad;
    float *ah = random_floats(a_rows * a_stride, 1.0f), *bh = random_floats(b_rows * b_stride, 1.0f);
    float *bias = with_bias ? random_floats(n, 1.0f) : NULL;
    float *c0 = xmalloc(m * c_stride, sizeof(float));
    for (size_t i = 0; i < m * c_stride; i++)
        c0[i] = i % c_stride >= n ? SENTINEL : accumulate ? rng_float() : NAN; /* NaN: overwritten */
    float *da = dev_floats(b, ah, a_rows * a_stride), *db = dev_floats(b, bh, b_rows * b_stride);
    float *dbias = with_bias ? dev_floats(b, bias, n) : NULL, *dc = dev_floats(b, c0, m * c_stride);
    b->ops->gemm(b, m, n, k, (uform_matrix_t){da, a_stride, ta}, (uform_matrix_t){db, b_stride, tb},
                 dbias, accumulate, dc, c_stride);
    sync_check(b, label, what);
    float *c = fetch(b, dc, m * c_stride);
    double *ref = xmalloc(m * n, sizeof(double)), *bound = xmalloc(m * n, sizeof(double));
    float *got = xmalloc(m * n, sizeof(float));
    bool padding = true;
    for (size_t i = 0; i < m; i++) {
        for (size_t j = 0; j < n; j++) {
            double sum = accumulate ? c0[i * c_stride + j] : 0.0, magnitude = fabs(sum);
            for (size_t p = 0; p < k; p++) {
                double av = ta ? ah[p * a_stride + i] : ah[i * a_stride + p];
                double bv = tb ? bh[j * b_stride + p] : bh[p * b_stride + j];
                sum += av * bv;
                magnitude += fabs(av * bv);
            }
            if (bias) {
                sum += bias[j];
                magnitude += fabs(bias[j]);
            }
            ref[i * n + j] = sum;
            bound[i * n + j] = (2.0 * (double)k + 2.0) * U32 * magnitude + 1e-30;
            got[i * n + j] = c[i * c_stride + j];
        }
        for (size_t j = n; j < c_stride; j++) padding &= c[i * c_stride + j] == SENTINEL;
    }
    bound_check(label, what, got, ref, bound, m * n);
    CHECK(padding, "%s %s: the padding of c was written", label, what);
    dev_free(b, da); dev_free(b, db); dev_free(b, dbias); dev_free(b, dc);
    free(ah); free(bh); free(bias); free(c0); free(c); free(ref); free(bound); free(got);
}

static void test_gemm(uform_backend_t *b, const char *label) {
    static const size_t shapes[][3] = {{1, 1, 1}, {1, 5, 37}, {3, 17, 64}, {17, 40, 65},
                                       {20, 33, 300}, {5, 3, 0}};
    size_t variant = 0;
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
        for (int t = 0; t < 4; t++, variant++)
            gemm_case(b, label, shapes[s][0], shapes[s][1], shapes[s][2], t & 1, t & 2,
                      variant % 3 == 1 ? 3 : 0, variant % 2 == 0, variant / 2 % 2 == 1);
}

/* ==== linear ================================================================ */

/* y[rows, n] = (accumulate ? y : 0) + x W^T (+ bias). The bound is gemm's; on
 * packed weights W is BF16 (the reference multiplies by the same rounded
 * values in float64), and where the backend rounds x to BF16 too the
 * reference rounds it the same way (the FP32 bound then checks that rounding
 * is nearest-even), and against the unrounded x the bound gains 2^-8 S (each
 * product off by at most 2^-8 of itself; products of two BF16 are exact in
 * FP32). Then rows computed alone and in a sub-batch must equal the batch's. */
static void linear_case(uform_backend_t *b, const char *label, size_t rows, size_t n, size_t k,
                        size_t pad, bool with_bias, bool accumulate, bool packed) {
    char what[128];
    snprintf(what, sizeof(what), "linear %s %zux%zux%zu pad %zu bias %d acc %d",
             packed ? "packed" : "dense", rows, n, k, pad, with_bias, accumulate);
    size_t x_stride = k + pad, y_stride = n + pad;
    float *w = random_floats(n * k, 1.0f);
    uint16_t *bits = xmalloc(n * k, sizeof(uint16_t));
    if (packed)
        for (size_t i = 0; i < n * k; i++) {
            bits[i] = uform_f32_to_bf16(w[i]);
            w[i] = uform_bf16_to_f32(bits[i]);
        }
    packed_weight_t holder;
    float *dw = NULL;
    uform_weight_t dense_weight = {0};
    const uform_weight_t *weight;
    if (packed) {
        if (!pack_weight(b, bits, n, k, &holder)) {
            free(w);
            free(bits);
            return;
        }
        weight = &holder.weight;
    } else {
        dw = dev_floats(b, w, n * k);
        dense_weight = (uform_weight_t){NULL, dw, n, k};
        weight = &dense_weight;
    }
    float *x = random_floats(rows * x_stride, 1.0f);
    float *bias = with_bias ? random_floats(n, 1.0f) : NULL;
    float *y0 = xmalloc(rows * y_stride, sizeof(float));
    for (size_t i = 0; i < rows * y_stride; i++)
        y0[i] = i % y_stride >= n ? SENTINEL : accumulate ? rng_float() : NAN;
    float *dx = dev_floats(b, x, rows * x_stride), *dbias = with_bias ? dev_floats(b, bias, n) : NULL;
    float *dy = dev_floats(b, y0, rows * y_stride);
    b->ops->linear(b, weight, dx, x_stride, rows, dbias, accumulate, dy, y_stride);
    sync_check(b, label, what);
    float *y = fetch(b, dy, rows * y_stride);

    bool rounds = packed && bf16_activations(b);
    double *ref = xmalloc(rows * n, sizeof(double)), *bound = xmalloc(rows * n, sizeof(double));
    double *ref_exact = xmalloc(rows * n, sizeof(double));
    double *bound_exact = xmalloc(rows * n, sizeof(double));
    float *got = xmalloc(rows * n, sizeof(float));
    bool padding = true;
    for (size_t i = 0; i < rows; i++) {
        for (size_t j = 0; j < n; j++) {
            double start = accumulate ? y0[i * y_stride + j] : 0.0;
            double sum = start, exact = start, magnitude = fabs(start);
            for (size_t p = 0; p < k; p++) {
                float xv = x[i * x_stride + p];
                double product = (double)(rounds ? bf16_round(xv) : xv) * w[j * k + p];
                sum += product;
                exact += (double)xv * w[j * k + p];
                magnitude += fabs(product);
            }
            if (bias) {
                sum += bias[j];
                exact += bias[j];
                magnitude += fabs(bias[j]);
            }
            ref[i * n + j] = sum;
            ref_exact[i * n + j] = exact;
            bound[i * n + j] = (2.0 * (double)k + 2.0) * U32 * magnitude + 1e-30;
            bound_exact[i * n + j] = bound[i * n + j] + (rounds ? BF16_U * magnitude : 0.0);
            got[i * n + j] = y[i * y_stride + j];
        }
        for (size_t j = n; j < y_stride; j++) padding &= y[i * y_stride + j] == SENTINEL;
    }
    bound_check(label, what, got, ref, bound, rows * n);
    if (rounds) {
        char name[160];
        snprintf(name, sizeof(name), "%s vs unrounded x", what);
        bound_check(label, name, got, ref_exact, bound_exact, rows * n);
    }
    CHECK(padding, "%s %s: the padding of y was written", label, what);

    /* every row alone, and a window of rows at an odd offset: the batch's bits */
    bool alone = true;
    for (size_t t = 0; t <= rows; t++) {
        size_t first = t < rows ? t : rows / 3, count = t < rows ? 1 : rows - rows / 3;
        float *dalone = dev_floats(b, y0 + first * y_stride, count * y_stride);
        b->ops->linear(b, weight, dx + first * x_stride, x_stride, count, dbias, accumulate,
                       dalone, y_stride);
        sync_check(b, label, what);
        float *alone_y = fetch(b, dalone, count * y_stride);
        alone &= same_bits(alone_y, y + first * y_stride, count * y_stride * sizeof(float));
        dev_free(b, dalone);
        free(alone_y);
    }
    CHECK(alone, "%s %s: rows computed alone differ from the batch", label, what);

    if (packed) packed_weight_free(b, &holder);
    dev_free(b, dw); dev_free(b, dx); dev_free(b, dbias); dev_free(b, dy);
    free(w); free(bits); free(x); free(bias); free(y0); free(y); free(ref); free(bound);
    free(ref_exact); free(bound_exact); free(got);
}

static void test_linear(uform_backend_t *b, const char *label) {
    static const size_t row_counts[] = {1, 3, 17, 70};
    static const size_t ns[] = {1, 5, 40, 100};
    static const size_t ks[] = {1, 3, 37, 65, 300};
    size_t variant = 0;
    for (size_t a = 0; a < 4; a++)
        for (size_t c = 0; c < 4; c++)
            for (size_t d = 0; d < 5; d++, variant++) {
                size_t rows = row_counts[a], n = ns[c], k = ks[d];
                if (rows * n * k > 600000) rows = 17; /* the float64 reference under ASan */
                size_t pad = variant % 3 == 0 ? 3 : 0;
                bool bias = variant % 2 == 0, accumulate = variant / 2 % 2 == 1;
                linear_case(b, label, rows, n, k, pad, bias, accumulate, true);
                linear_case(b, label, rows, n, k, pad, !bias, !accumulate, false);
            }
    linear_case(b, label, 3, 24, 601, 1, true, true, true); /* k over several packed blocks */
}

/* ==== linear_backward ======================================================= */

typedef struct {
    const double *x, *w, *bias, *r;
    size_t rows, n, k;
} linear_ref_t;

/* loss = sum r * (x W^T + bias) */
static double linear_ref_loss(void *context) {
    const linear_ref_t *l = context;
    double loss = 0;
    for (size_t i = 0; i < l->rows; i++)
        for (size_t j = 0; j < l->n; j++) {
            double y = l->bias[j];
            for (size_t p = 0; p < l->k; p++) y += l->x[i * l->k + p] * l->w[j * l->k + p];
            loss += l->r[i * l->n + j] * y;
        }
    return loss;
}

/* dW += dy^T x, dbias += column sums of dy, dx (+)= dy W: each element one FP32
 * sum of `terms` products, <= (2 terms + 2) u of S = sum |terms| (+ |base|). */
static void linear_backward_case(uform_backend_t *b, const char *label, size_t rows, size_t n,
                                 size_t k, bool with_dbias, bool with_dx, bool accumulate_dx) {
    char what[128], name[160];
    snprintf(what, sizeof(what), "linear_backward %zux%zux%zu dbias %d dx %d acc %d", rows, n, k,
             with_dbias, with_dx, accumulate_dx);
    float *w = random_floats(n * k, 1.0f), *x = random_floats(rows * k, 1.0f);
    float *r = random_floats(rows * n, 1.0f);
    double *e_dw = xmalloc(n * k, sizeof(double)), *m_dw = xmalloc(n * k, sizeof(double));
    double *e_db = xmalloc(n, sizeof(double)), *m_db = xmalloc(n, sizeof(double));
    double *e_dx = xmalloc(rows * k, sizeof(double)), *m_dx = xmalloc(rows * k, sizeof(double));
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < n; j++) {
            double g = r[i * n + j];
            e_db[j] += g;
            m_db[j] += fabs(g);
            for (size_t p = 0; p < k; p++) {
                e_dw[j * k + p] += g * x[i * k + p];
                m_dw[j * k + p] += fabs(g * x[i * k + p]);
                e_dx[i * k + p] += g * w[j * k + p];
                m_dx[i * k + p] += fabs(g * w[j * k + p]);
            }
        }
    float *dw0 = base_like(e_dw, n * k, n * k), *db0 = base_like(e_db, n, n);
    float *dx0 = accumulate_dx ? base_like(e_dx, rows * k, rows * k) : filled(rows * k, NAN);
    double *b_dw = xmalloc(n * k, sizeof(double)), *b_db = xmalloc(n, sizeof(double));
    double *b_dx = xmalloc(rows * k, sizeof(double));
    for (size_t i = 0; i < n * k; i++)
        b_dw[i] = (2.0 * (double)rows + 2) * U32 * (m_dw[i] + fabs(dw0[i])) + FD_SLACK;
    for (size_t i = 0; i < n; i++)
        b_db[i] = (2.0 * (double)rows + 2) * U32 * (m_db[i] + fabs(db0[i])) + FD_SLACK;
    for (size_t i = 0; i < rows * k; i++)
        b_dx[i] = (2.0 * (double)n + 2) * U32 * (m_dx[i] + (accumulate_dx ? fabs(dx0[i]) : 0)) +
                  FD_SLACK;

    float *d_w = dev_floats(b, w, n * k), *d_x = dev_floats(b, x, rows * k);
    float *d_r = dev_floats(b, r, rows * n), *d_dw = dev_floats(b, dw0, n * k);
    float *d_db = with_dbias ? dev_floats(b, db0, n) : NULL;
    float *d_dx = with_dx ? dev_floats(b, dx0, rows * k) : NULL;
    uform_weight_t weight = {NULL, d_w, n, k};
    float *got_dw[2], *got_db[2], *got_dx[2];
    for (int call = 0; call < 2; call++) {
        b->ops->linear_backward(b, &weight, d_x, d_r, rows, d_dw, d_db, d_dx, accumulate_dx);
        sync_check(b, label, what);
        got_dw[call] = fetch(b, d_dw, n * k);
        got_db[call] = with_dbias ? fetch(b, d_db, n) : NULL;
        got_dx[call] = with_dx ? fetch(b, d_dx, rows * k) : NULL;
    }
    for (int call = 0; call < 2; call++) {
        snprintf(name, sizeof(name), "%s: dweight", what);
        increment_bound_check(label, name, got_dw[call], dw0, call + 1, e_dw, b_dw, NULL, n * k);
        if (with_dbias) {
            snprintf(name, sizeof(name), "%s: dbias", what);
            increment_bound_check(label, name, got_db[call], db0, call + 1, e_db, b_db, NULL, n);
        }
        if (with_dx) {
            snprintf(name, sizeof(name), "%s: dx", what);
            if (accumulate_dx)
                increment_bound_check(label, name, got_dx[call], dx0, call + 1, e_dx, b_dx, NULL,
                                      rows * k);
            else
                increment_bound_check(label, name, got_dx[call], NULL, 1, e_dx, b_dx, NULL,
                                      rows * k);
        }
    }
    if (with_dx && !accumulate_dx)
        CHECK(same_bits(got_dx[0], got_dx[1], rows * k * sizeof(float)),
              "%s %s: dx (not accumulated) differs on the second call", label, what);

    /* finite differences of the reference on samples of W, bias and x */
    double *xd = to_double(x, rows * k), *wd = to_double(w, n * k), *rd = to_double(r, rows * n);
    double *bd = xmalloc(n, sizeof(double));
    linear_ref_t ref = {xd, wd, bd, rd, rows, n, k};
    size_t samples = 24;
    size_t index[3][24];
    double numeric[3][24];
    for (size_t s = 0; s < samples; s++) {
        index[0][s] = rng_below(n * k);
        numeric[0][s] = central(linear_ref_loss, &ref, &wd[index[0][s]], STEP);
        index[1][s] = rng_below(n);
        numeric[1][s] = central(linear_ref_loss, &ref, &bd[index[1][s]], STEP);
        index[2][s] = rng_below(rows * k);
        numeric[2][s] = central(linear_ref_loss, &ref, &xd[index[2][s]], STEP);
    }
    snprintf(name, sizeof(name), "%s: dweight vs finite differences", what);
    increment_bound_check(label, name, got_dw[0], dw0, 1, numeric[0], b_dw, index[0], samples);
    if (with_dbias) {
        snprintf(name, sizeof(name), "%s: dbias vs finite differences", what);
        increment_bound_check(label, name, got_db[0], db0, 1, numeric[1], b_db, index[1], samples);
    }
    if (with_dx) {
        snprintf(name, sizeof(name), "%s: dx vs finite differences", what);
        increment_bound_check(label, name, got_dx[0], accumulate_dx ? dx0 : NULL, 1, numeric[2],
                              b_dx, index[2], samples);
    }
    for (int call = 0; call < 2; call++) {
        free(got_dw[call]);
        free(got_db[call]);
        free(got_dx[call]);
    }
    dev_free(b, d_w); dev_free(b, d_x); dev_free(b, d_r); dev_free(b, d_dw); dev_free(b, d_db);
    dev_free(b, d_dx);
    free(w); free(x); free(r); free(e_dw); free(m_dw); free(e_db); free(m_db); free(e_dx);
    free(m_dx); free(dw0); free(db0); free(dx0); free(b_dw); free(b_db); free(b_dx); free(xd);
    free(wd); free(rd); free(bd);
}

static void test_linear_backward(uform_backend_t *b, const char *label) {
    linear_backward_case(b, label, 1, 5, 19, true, true, true);
    linear_backward_case(b, label, 3, 40, 37, false, true, false);
    linear_backward_case(b, label, 70, 33, 65, true, false, false);
    linear_backward_case(b, label, 17, 100, 300, true, true, true);
}

/* ==== layer norm ============================================================= */

typedef struct {
    const double *x, *weight, *bias, *r;
    size_t first, last, width; /* rows [first, last) enter the loss */
} ln_ref_t;

static void ln_ref_row(const double *x, const double *weight, const double *bias, size_t width,
                       double *y, double *mean_out, double *rstd_out) {
    double mean = 0, variance = 0;
    for (size_t i = 0; i < width; i++) mean += x[i];
    mean /= (double)width;
    for (size_t i = 0; i < width; i++) variance += (x[i] - mean) * (x[i] - mean);
    variance /= (double)width;
    double rstd = 1.0 / sqrt(variance + 1e-5);
    for (size_t i = 0; i < width; i++) y[i] = (x[i] - mean) * rstd * weight[i] + bias[i];
    if (mean_out) *mean_out = mean;
    if (rstd_out) *rstd_out = rstd;
}

static double ln_ref_loss(void *context) {
    const ln_ref_t *l = context;
    double loss = 0, y[512];
    for (size_t row = l->first; row < l->last; row++) {
        ln_ref_row(l->x + row * l->width, l->weight, l->bias, l->width, y, NULL, NULL);
        for (size_t i = 0; i < l->width; i++) loss += y[i] * l->r[row * l->width + i];
    }
    return loss;
}

static void layer_norm_case(uform_backend_t *b, const char *label, size_t rows, size_t width,
                            float offset) {
    char what[96], name[160];
    snprintf(what, sizeof(what), "layer_norm %zux%zu offset %g", rows, width, offset);
    size_t n = rows * width;
    float *x = random_floats(n, 2.0f), *weight = random_floats(width, 0.5f);
    float *bias = random_floats(width, 0.5f), *r = random_floats(n, 1.0f);
    for (size_t i = 0; i < n; i++) x[i] += offset;
    for (size_t i = 0; i < width; i++) weight[i] += 1.0f;
    float *d_x = dev_floats(b, x, n), *d_w = dev_floats(b, weight, width);
    float *d_b = dev_floats(b, bias, width), *d_r = dev_floats(b, r, n);
    float *d_y = dev_alloc(b, n * sizeof(float)), *d_y2 = dev_alloc(b, n * sizeof(float));
    float *d_mean = dev_alloc(b, rows * sizeof(float)), *d_rstd = dev_alloc(b, rows * sizeof(float));
    float *d_inplace = dev_floats(b, x, n);
    b->ops->layer_norm_forward(b, d_x, rows, width, d_w, d_b, d_y, d_mean, d_rstd);
    b->ops->layer_norm_forward(b, d_x, rows, width, d_w, d_b, d_y2, NULL, NULL);
    b->ops->layer_norm_forward(b, d_inplace, rows, width, d_w, d_b, d_inplace, NULL, NULL);
    sync_check(b, label, what);
    float *y = fetch(b, d_y, n), *y2 = fetch(b, d_y2, n), *inplace = fetch(b, d_inplace, n);
    float *mean = fetch(b, d_mean, rows), *rstd = fetch(b, d_rstd, rows);
    CHECK(same_bits(y, y2, n * sizeof(float)), "%s %s: y differs when mean/rstd are NULL", label,
          what);
    CHECK(same_bits(y, inplace, n * sizeof(float)), "%s %s: y == x differs from y != x", label,
          what);

    double *xd = to_double(x, n), *wd = to_double(weight, width), *bd = to_double(bias, width);
    double *rd = to_double(r, n), *yd = xmalloc(n, sizeof(double));
    double *mean_ref = xmalloc(rows, sizeof(double)), *rstd_ref = xmalloc(rows, sizeof(double));
    double largest = 0;
    for (size_t i = 0; i < n; i++) largest = fmax(largest, fabs(xd[i]));
    for (size_t row = 0; row < rows; row++)
        ln_ref_row(xd + row * width, wd, bd, width, yd + row * width, &mean_ref[row],
                   &rstd_ref[row]);
    /* test_backward.c: the lane sums give the mean ~(width/16 + 16) u max|x| of
     * error, <= 1e-5 of the standard deviation here; the variance, rsqrt and 3
     * roundings of y add ~(width/16 + 20) u; |w| <= 1.5, |b| <= 0.5, |y| <= ~6:
     * 1e-5 (|y| + 1) bounds the worst case with margin. */
    forward_check(label, what, y, yd, n, 1e-5, 1e-5);
    /* the saved statistics: mean within (width + 17) u max|x| (any summation
     * order), rstd within (width + 24) u relative */
    snprintf(name, sizeof(name), "%s: mean", what);
    forward_check(label, name, mean, mean_ref, rows, 0, ((double)width + 17) * U32 * largest);
    snprintf(name, sizeof(name), "%s: rstd", what);
    forward_check(label, name, rstd, rstd_ref, rows, ((double)width + 24) * U32, 0);

    /* every row alone equals it inside the batch */
    bool alone = true;
    float *d_one = dev_alloc(b, width * sizeof(float)), *one = xmalloc(width, sizeof(float));
    for (size_t row = 0; row < rows; row++) {
        b->ops->layer_norm_forward(b, d_x + row * width, 1, width, d_w, d_b, d_one, NULL, NULL);
        sync_check(b, label, what);
        fetch_into(b, one, d_one, width);
        alone &= same_bits(one, y + row * width, width * sizeof(float));
    }
    free(one);
    CHECK(alone, "%s %s: a row alone differs from the batch", label, what);

    /* backward: analytic float64 gradients, xhat = (x - mean) rstd,
     * dx = rstd (dn - mean(dn) - xhat mean(dn xhat)) with dn = dy w */
    double *e_dx = xmalloc(n, sizeof(double)), *e_dw = xmalloc(width, sizeof(double));
    double *e_db = xmalloc(width, sizeof(double));
    for (size_t row = 0; row < rows; row++) {
        const double *xr = xd + row * width, *gr = rd + row * width;
        double a = 0, c = 0;
        for (size_t i = 0; i < width; i++) {
            double xhat = (xr[i] - mean_ref[row]) * rstd_ref[row];
            a += gr[i] * wd[i];
            c += gr[i] * wd[i] * xhat;
            e_dw[i] += gr[i] * xhat;
            e_db[i] += gr[i];
        }
        a /= (double)width;
        c /= (double)width;
        for (size_t i = 0; i < width; i++) {
            double xhat = (xr[i] - mean_ref[row]) * rstd_ref[row];
            e_dx[row * width + i] = rstd_ref[row] * (gr[i] * wd[i] - a - xhat * c);
        }
    }
    float *dx0 = base_like(e_dx, n, n), *dw0 = base_like(e_dw, width, width);
    float *db0 = base_like(e_db, width, width);
    float *d_dx = dev_floats(b, dx0, n), *d_dw = dev_floats(b, dw0, width);
    float *d_db = dev_floats(b, db0, width);
    float *dx[2], *dw[2], *db[2];
    for (int call = 0; call < 2; call++) {
        b->ops->layer_norm_backward(b, d_r, d_x, d_w, d_mean, d_rstd, rows, width, d_dx, d_dw, d_db);
        sync_check(b, label, what);
        dx[call] = fetch(b, d_dx, n);
        dw[call] = fetch(b, d_dw, width);
        db[call] = fetch(b, d_db, width);
    }
    for (int call = 0; call < 2; call++) {
        snprintf(name, sizeof(name), "%s: dx", what);
        increment_check(label, name, dx[call], dx0, call + 1, e_dx, NULL, n, 0.01, 0);
        snprintf(name, sizeof(name), "%s: dweight", what);
        increment_check(label, name, dw[call], dw0, call + 1, e_dw, NULL, width, 0.01, 0);
        snprintf(name, sizeof(name), "%s: dbias", what);
        increment_check(label, name, db[call], db0, call + 1, e_db, NULL, width, 0.01, 0);
    }
    ln_ref_t ref = {xd, wd, bd, rd, 0, rows, width};
    size_t samples = 48, index[48];
    double numeric[48];
    for (size_t s = 0; s < samples; s++) {
        index[s] = rng_below(n);
        ref.first = index[s] / width;
        ref.last = ref.first + 1;
        numeric[s] = central(ln_ref_loss, &ref, &xd[index[s]], STEP);
    }
    snprintf(name, sizeof(name), "%s: dx vs finite differences", what);
    increment_check(label, name, dx[0], dx0, 1, numeric, index, samples, 0.01, 0);
    ref.first = 0;
    ref.last = rows;
    size_t columns = width < 24 ? width : 24;
    for (size_t s = 0; s < columns; s++) {
        index[s] = rng_below(width);
        numeric[s] = central(ln_ref_loss, &ref, &wd[index[s]], STEP);
        numeric[24 + s] = central(ln_ref_loss, &ref, &bd[index[s]], STEP);
    }
    snprintf(name, sizeof(name), "%s: dweight vs finite differences", what);
    increment_check(label, name, dw[0], dw0, 1, numeric, index, columns, 0.01, 0);
    snprintf(name, sizeof(name), "%s: dbias vs finite differences", what);
    increment_check(label, name, db[0], db0, 1, numeric + 24, index, columns, 0.01, 0);

    for (int call = 0; call < 2; call++) {
        free(dx[call]);
        free(dw[call]);
        free(db[call]);
    }
    dev_free(b, d_x); dev_free(b, d_w); dev_free(b, d_b); dev_free(b, d_r); dev_free(b, d_y);
    dev_free(b, d_y2); dev_free(b, d_mean); dev_free(b, d_rstd); dev_free(b, d_inplace);
    dev_free(b, d_one); dev_free(b, d_dx); dev_free(b, d_dw); dev_free(b, d_db);
    free(x); free(weight); free(bias); free(r); free(y); free(y2); free(inplace); free(mean);
    free(rstd); free(xd); free(wd); free(bd); free(rd); free(yd); free(mean_ref); free(rstd_ref);
    free(e_dx); free(e_dw); free(e_db); free(dx0); free(dw0); free(db0);
}

static void test_layer_norm(uform_backend_t *b, const char *label) {
    layer_norm_case(b, label, 1, 64, 0.0f);
    layer_norm_case(b, label, 5, 40, -1.0f); /* a width that is not a multiple of 16 */
    layer_norm_case(b, label, 70, 129, 3.0f);
}

/* ==== GELU ================================================================== */

/* 0.5 x (1 + tanh(u)) written as x / (1 + e^(-2u)): the same function without
 * float64's cancellation of 1 + tanh(u) for u < -19 (test_backward.c). */
static double gelu_ref(double x) {
    double u = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
    return x / (1.0 + exp(-2.0 * u));
}

static double gelu_ref_derivative(double x) {
    double c = sqrt(2.0 / M_PI), u = c * (x + 0.044715 * x * x * x);
    double s = 1.0 / (1.0 + exp(-2.0 * u)); /* 0.5 (1 + tanh u) */
    return s + x * 2.0 * s * (1.0 - s) * c * (1.0 + 3 * 0.044715 * x * x);
}

/* ==== linear_gelu =========================================================== */

/* pre = x W^T + bias within linear's bound ((2k + 2) u of the sum of |terms|;
 * packed weights BF16 in the reference, x rounded to BF16 where the backend
 * does), and y = gelu(pre) within test_gelu's 4e-5 |y| (+ 1e-30) of gelu
 * applied to the pre the backend wrote (for |pre| > 12 both sides are the
 * limits pre and 0, test_gelu's 1e-6); pre == y gives the same y. Rows alone
 * equal the batch. */
static void linear_gelu_case(uform_backend_t *b, const char *label, size_t rows, size_t n,
                             size_t k, bool packed) {
    char what[128];
    snprintf(what, sizeof(what), "linear_gelu %s %zux%zux%zu", packed ? "packed" : "dense", rows,
             n, k);
    float *w = random_floats(n * k, 1.0f), *x = random_floats(rows * k, 1.0f);
    float *bias = random_floats(n, 1.0f);
    uint16_t *bits = xmalloc(n * k, sizeof(uint16_t));
    for (size_t i = 0; i < n * k && packed; i++) {
        bits[i] = uform_f32_to_bf16(w[i]);
        w[i] = uform_bf16_to_f32(bits[i]);
    }
    packed_weight_t holder;
    float *dw = NULL;
    uform_weight_t dense_weight = {0};
    const uform_weight_t *weight = &dense_weight;
    if (packed) {
        if (!pack_weight(b, bits, n, k, &holder)) {
            free(w), free(x), free(bias), free(bits);
            return;
        }
        weight = &holder.weight;
    } else {
        dw = dev_floats(b, w, n * k);
        dense_weight = (uform_weight_t){NULL, dw, n, k};
    }
    float *d_x = dev_floats(b, x, rows * k), *d_bias = dev_floats(b, bias, n);
    float *d_pre = dev_alloc(b, rows * n * sizeof(float)), *d_y = dev_alloc(b, rows * n * sizeof(float));
    float *d_inplace = dev_alloc(b, rows * n * sizeof(float));
    b->ops->linear_gelu(b, weight, d_x, k, rows, d_bias, d_pre, d_y);
    b->ops->linear_gelu(b, weight, d_x, k, rows, d_bias, d_inplace, d_inplace);
    sync_check(b, label, what);
    float *pre = fetch(b, d_pre, rows * n), *y = fetch(b, d_y, rows * n);
    float *inplace = fetch(b, d_inplace, rows * n);
    bool rounds = packed && bf16_activations(b);
    double *ref = xmalloc(rows * n, sizeof(double)), *bound = xmalloc(rows * n, sizeof(double));
    double *gelu_of_pre = xmalloc(rows * n, sizeof(double));
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < n; j++) {
            double sum = bias[j], magnitude = fabs(bias[j]);
            for (size_t p = 0; p < k; p++) {
                float xv = x[i * k + p];
                double product = (double)(rounds ? bf16_round(xv) : xv) * w[j * k + p];
                sum += product;
                magnitude += fabs(product);
            }
            ref[i * n + j] = sum;
            bound[i * n + j] = (2.0 * (double)k + 2.0) * U32 * magnitude + 1e-30;
            gelu_of_pre[i * n + j] = gelu_ref(pre[i * n + j]);
        }
    bound_check(label, what, pre, ref, bound, rows * n);
    forward_check(label, what, y, gelu_of_pre, rows * n, 4e-5, 1e-30);
    CHECK(same_bits(y, inplace, rows * n * sizeof(float)), "%s %s: pre == y differs", label, what);
    bool alone = true;
    for (size_t r = 0; r < rows; r++) {
        float *d_one = dev_alloc(b, n * sizeof(float));
        b->ops->linear_gelu(b, weight, d_x + r * k, k, 1, d_bias, d_one, d_one);
        sync_check(b, label, what);
        float *one = fetch(b, d_one, n);
        alone &= same_bits(one, y + r * n, n * sizeof(float));
        dev_free(b, d_one);
        free(one);
    }
    CHECK(alone, "%s %s: rows computed alone differ from the batch", label, what);
    if (packed) packed_weight_free(b, &holder);
    dev_free(b, dw), dev_free(b, d_x), dev_free(b, d_bias), dev_free(b, d_pre), dev_free(b, d_y);
    dev_free(b, d_inplace);
    free(w), free(x), free(bias), free(bits), free(pre), free(y), free(inplace), free(ref);
    free(bound), free(gelu_of_pre);
}

static void test_linear_gelu(uform_backend_t *b, const char *label) {
    linear_gelu_case(b, label, 1, 40, 37, true);
    linear_gelu_case(b, label, 17, 100, 65, true);
    linear_gelu_case(b, label, 3, 5, 300, false);
    linear_gelu_case(b, label, 17, 100, 65, false);
}

static void test_gelu(uform_backend_t *b, const char *label) {
    size_t n = 3001; /* not a multiple of the vector width */
    float *x = random_floats(n, 6.0f), *r = random_floats(n, 1.0f);
    const float special[] = {0.0f, 1e-8f, -1e-8f, 9.0f, -9.0f, 12.0f, -12.0f, 100.0f, -100.0f,
                             1e20f, -1e20f, 3e38f, -3e38f};
    size_t specials = sizeof(special) / sizeof(special[0]);
    memcpy(x, special, sizeof(special));
    float *d_x = dev_floats(b, x, n), *d_y = dev_alloc(b, n * sizeof(float));
    float *d_inplace = dev_floats(b, x, n), *d_r = dev_floats(b, r, n);
    b->ops->gelu_forward(b, d_x, n, d_y);
    b->ops->gelu_forward(b, d_inplace, n, d_inplace);
    sync_check(b, label, "gelu_forward");
    float *y = fetch(b, d_y, n), *inplace = fetch(b, d_inplace, n);
    CHECK(same_bits(y, inplace, n * sizeof(float)), "%s gelu: y == x differs from y != x", label);
    double *yd = xmalloc(n, sizeof(double));
    for (size_t i = 0; i < n; i++) yd[i] = gelu_ref(x[i]);
    /* test_backward.c: the error of u (4 roundings) is amplified by |2u| in
     * e^-2u, plus the fast exp's 2 ulp and 3 more roundings: (8 |u| + 16) u |y|
     * < 4e-5 |y| for |x| <= 12 (|u| <= 63); beyond, the exp clamps and both sides
     * are the limits x and 0 (1e-6 relative); 1e-30 for underflow. */
    forward_check(label, "gelu_forward", y + specials, yd + specials, n - specials, 4e-5, 1e-30);
    forward_check(label, "gelu_forward small", y, yd, 9, 4e-5, 1e-30);
    forward_check(label, "gelu_forward large", y + 9, yd + 9, specials - 9, 1e-6, 1e-30);

    double *e_dx = xmalloc(n, sizeof(double));
    for (size_t i = 0; i < n; i++)
        e_dx[i] = fabs(x[i]) > 1e3f ? (x[i] > 0 ? r[i] : 0.0) : gelu_ref_derivative(x[i]) * r[i];
    float *dx0 = base_like(e_dx, n, n), *d_dx = dev_floats(b, dx0, n);
    float *dx[2];
    for (int call = 0; call < 2; call++) {
        b->ops->gelu_backward(b, d_x, d_r, n, d_dx);
        sync_check(b, label, "gelu_backward");
        dx[call] = fetch(b, d_dx, n);
    }
    for (int call = 0; call < 2; call++)
        increment_check(label, "gelu_backward: dx", dx[call], dx0, call + 1, e_dx, NULL, n, 0.01, 0);
    /* finite differences on the moderate inputs (beyond 1e3 float64 cannot) */
    size_t *index = xmalloc(n, sizeof(size_t)), count = 0;
    double *numeric = xmalloc(n, sizeof(double));
    for (size_t i = 0; i < n; i += 7) {
        if (fabsf(x[i]) > 1e3f) continue;
        double xi = x[i];
        index[count] = i;
        numeric[count++] = (gelu_ref(xi + STEP) - gelu_ref(xi - STEP)) / (2 * STEP) * r[i];
    }
    increment_check(label, "gelu_backward vs finite differences", dx[0], dx0, 1, numeric, index,
                    count, 0.01, 0);
    dev_free(b, d_x); dev_free(b, d_y); dev_free(b, d_inplace); dev_free(b, d_r); dev_free(b, d_dx);
    free(x); free(r); free(y); free(inplace); free(yd); free(e_dx); free(dx0); free(dx[0]);
    free(dx[1]); free(index); free(numeric);
}

/* ==== rotary positions ====================================================== */

/* rows.c's plan (uform_rope_plan): with `axes` axes, pairs are split into
 * contiguous groups, the first 32 mod axes one pair larger; pair i of a group
 * turns with its axis at 10000^(-i / group). */
static double rope_ref_angle(const uint32_t *position, size_t axes, size_t pair) {
    size_t first = 0;
    for (size_t a = 0; a < axes; a++) {
        size_t group = 32 / axes + (a < 32 % axes ? 1 : 0);
        if (pair < first + group)
            return (double)position[a] * pow(10000.0, -(double)(pair - first) / (double)group);
        first += group;
    }
    return 0;
}

static void rope_ref_row(const double *in, size_t hidden, const double *c, const double *s,
                         double direction, double *out) {
    memcpy(out, in, 3 * hidden * sizeof(double));
    for (size_t h = 0; h < 2 * hidden / 64; h++)
        for (size_t j = 0; j < 32; j++) {
            double x0 = in[h * 64 + j], x1 = in[h * 64 + j + 32], sn = direction * s[j];
            out[h * 64 + j] = x0 * c[j] - x1 * sn;
            out[h * 64 + j + 32] = x0 * sn + x1 * c[j];
        }
}

typedef struct {
    const double *qkv, *r, *cosines, *sines;
    size_t row, hidden;
} rope_ref_t;

static double rope_ref_loss(void *context) {
    const rope_ref_t *l = context;
    double out[3 * 128];
    size_t stride = 3 * l->hidden;
    rope_ref_row(l->qkv + l->row * stride, l->hidden, l->cosines + l->row * 32,
                 l->sines + l->row * 32, 1.0, out);
    double loss = 0;
    for (size_t i = 0; i < stride; i++) loss += out[i] * l->r[l->row * stride + i];
    return loss;
}

static void test_rope(uform_backend_t *b, const char *label) {
    char what[96];
    /* an empty segment, one of one row, text (1 axis), image (2), video (3) */
    const uform_segment_t segments[] = {{0, 1, 1}, {1, 0, 2}, {1, 17, 1}, {18, 30, 2}, {48, 40, 3},
                                        {88, 1, 3}};
    size_t count = 6, rows = 89;
    uint32_t *positions = xmalloc(rows * 3, sizeof(uint32_t));
    for (size_t i = 0; i < rows * 3; i++) positions[i] = (uint32_t)rng_below(1000);
    /* the axes past a segment's own are garbage the tables must not read */
    size_t *axes_of = xmalloc(rows, sizeof(size_t));
    for (size_t s = 0; s < count; s++)
        for (size_t i = 0; i < segments[s].length; i++) axes_of[segments[s].begin + i] = segments[s].axes;
    uform_segment_t *d_segments = dev_upload(b, segments, sizeof(segments));
    uint32_t *d_positions = dev_upload(b, positions, rows * 3 * sizeof(uint32_t));
    float *d_cos = dev_alloc(b, rows * 32 * sizeof(float)), *d_sin = dev_alloc(b, rows * 32 * sizeof(float));
    b->ops->rope_tables(b, d_segments, count, d_positions, d_cos, d_sin);
    sync_check(b, label, "rope_tables");
    float *cosines = fetch(b, d_cos, rows * 32), *sines = fetch(b, d_sin, rows * 32);
    double *c_ref = xmalloc(rows * 32, sizeof(double)), *s_ref = xmalloc(rows * 32, sizeof(double));
    double *bound = xmalloc(rows * 32, sizeof(double));
    for (size_t row = 0; row < rows; row++)
        for (size_t j = 0; j < 32; j++) {
            double angle = rope_ref_angle(positions + row * 3, axes_of[row], j);
            c_ref[row * 32 + j] = cos(angle);
            s_ref[row * 32 + j] = sin(angle);
            /* the rounding of the result, plus an angle (< 1000) computed in
             * FP32 by another backend: a few u of |angle| */
            bound[row * 32 + j] = U32 + 4 * U32 * fabs(angle);
        }
    bound_check(label, "rope_tables cosines", cosines, c_ref, bound, rows * 32);
    bound_check(label, "rope_tables sines", sines, s_ref, bound, rows * 32);

    for (size_t hidden = 64; hidden <= 128; hidden += 64) {
        snprintf(what, sizeof(what), "rope H=%zu", hidden);
        size_t stride = 3 * hidden, n = rows * stride;
        float *qkv = random_floats(n, 1.0f), *r = random_floats(n, 1.0f);
        float *d_qkv = dev_floats(b, qkv, n), *d_g = dev_floats(b, r, n);
        b->ops->rope_forward(b, d_qkv, rows, hidden, d_cos, d_sin);
        b->ops->rope_backward(b, d_g, rows, hidden, d_cos, d_sin);
        sync_check(b, label, what);
        float *y = fetch(b, d_qkv, n), *g = fetch(b, d_g, n);
        /* reference on the backend's own tables: this checks the rotation */
        double *qd = to_double(qkv, n), *rd = to_double(r, n);
        double *cd = to_double(cosines, rows * 32), *sd = to_double(sines, rows * 32);
        double *yd = xmalloc(n, sizeof(double)), *gd = xmalloc(n, sizeof(double));
        for (size_t row = 0; row < rows; row++) {
            rope_ref_row(qd + row * stride, hidden, cd + row * 32, sd + row * 32, 1.0, yd + row * stride);
            rope_ref_row(rd + row * stride, hidden, cd + row * 32, sd + row * 32, -1.0, gd + row * stride);
        }
        /* two products and a sum: 3 u (|x0 c| + |x1 s|) <= 3 u * 2 (test_backward.c) */
        forward_check(label, what, y, yd, n, 0.0, 4e-7);
        bool values = true;
        for (size_t row = 0; row < rows; row++)
            values &= same_bits(y + row * stride + 2 * hidden, qkv + row * stride + 2 * hidden,
                                hidden * sizeof(float)) &&
                      same_bits(g + row * stride + 2 * hidden, r + row * stride + 2 * hidden,
                                hidden * sizeof(float));
        CHECK(values, "%s %s: v (or its gradient) changed", label, what);
        /* backward (in place, not accumulating): the transposed rotation of dy,
         * analytic and by finite differences of loss = sum r * rope(x) */
        char name[160];
        snprintf(name, sizeof(name), "%s: backward", what);
        forward_check(label, name, g, gd, n, 0.0, 4e-7);
        rope_ref_t ref = {qd, rd, cd, sd, 0, hidden};
        size_t samples = 200, *index = xmalloc(samples, sizeof(size_t));
        double *numeric = xmalloc(samples, sizeof(double));
        for (size_t s = 0; s < samples; s++) {
            index[s] = rng_below(n);
            ref.row = index[s] / stride;
            numeric[s] = central(rope_ref_loss, &ref, &qd[index[s]], STEP);
        }
        snprintf(name, sizeof(name), "%s: backward vs finite differences", what);
        increment_check(label, name, g, NULL, 1, numeric, index, samples, 0.01, 0);
        dev_free(b, d_qkv); dev_free(b, d_g);
        free(qkv); free(r); free(y); free(g); free(qd); free(rd); free(cd); free(sd); free(yd);
        free(gd); free(index); free(numeric);
    }
    dev_free(b, d_segments); dev_free(b, d_positions); dev_free(b, d_cos); dev_free(b, d_sin);
    free(positions); free(axes_of); free(cosines); free(sines); free(c_ref); free(s_ref);
    free(bound);
}

/* ==== embedding ============================================================= */

static void embedding_case(uform_backend_t *b, const char *label, size_t width, bool modality_on) {
    char what[96], name[160];
    snprintf(what, sizeof(what), "embedding width %zu modality %d", width, modality_on);
    size_t vocabulary = 20, rows = 150;
    float *table = random_floats(vocabulary * width, 1.0f), *modality = random_floats(width, 1.0f);
    float *r = random_floats(rows * width, 1.0f);
    uint32_t *ids = xmalloc(rows, sizeof(uint32_t));
    /* ids repeat, the last table row is never used, every 7th row is media */
    for (size_t i = 0; i < rows; i++)
        ids[i] = i % 7 == 3 ? UFORM_NOT_TEXT : (uint32_t)rng_below(vocabulary - 1);
    for (size_t i = 0; i < rows; i++)
        if (ids[i] == UFORM_NOT_TEXT)
            for (size_t c = 0; c < width; c++) r[i * width + c] = NAN; /* must not be read */
    float *y0 = filled(rows * width, SENTINEL);
    float *d_table = dev_floats(b, table, vocabulary * width);
    float *d_modality = modality_on ? dev_floats(b, modality, width) : NULL;
    uint32_t *d_ids = dev_upload(b, ids, rows * sizeof(uint32_t));
    float *d_y = dev_floats(b, y0, rows * width), *d_r = dev_floats(b, r, rows * width);
    b->ops->embedding_forward(b, d_table, d_modality, d_ids, rows, width, d_y);
    sync_check(b, label, what);
    float *y = fetch(b, d_y, rows * width);
    /* one rounding of table + modality: exact against the rounded float64 sum */
    bool exact = true, untouched = true;
    for (size_t i = 0; i < rows; i++)
        for (size_t c = 0; c < width; c++) {
            if (ids[i] == UFORM_NOT_TEXT) {
                untouched &= y[i * width + c] == SENTINEL;
                continue;
            }
            double e = (double)table[ids[i] * width + c] + (modality_on ? modality[c] : 0.0);
            exact &= y[i * width + c] == (float)e;
        }
    CHECK(exact, "%s %s: forward is not table + modality", label, what);
    CHECK(untouched, "%s %s: a UFORM_NOT_TEXT row was written", label, what);

    /* backward: linear, so the float64 sums are the gradient exactly; FP32 sums
     * of <= 150 terms in row order: (150 + 1) u sum |terms| */
    double *e_dt = xmalloc(vocabulary * width, sizeof(double)), *m_dt = xmalloc(vocabulary * width, sizeof(double));
    double *e_dm = xmalloc(width, sizeof(double)), *m_dm = xmalloc(width, sizeof(double));
    for (size_t i = 0; i < rows; i++) {
        if (ids[i] == UFORM_NOT_TEXT) continue;
        for (size_t c = 0; c < width; c++) {
            e_dt[ids[i] * width + c] += r[i * width + c];
            m_dt[ids[i] * width + c] += fabs(r[i * width + c]);
            e_dm[c] += r[i * width + c];
            m_dm[c] += fabs(r[i * width + c]);
        }
    }
    float *dt0 = base_like(e_dt, vocabulary * width, vocabulary * width), *dm0 = base_like(e_dm, width, width);
    for (size_t c = 0; c < width; c++) dt0[(vocabulary - 1) * width + c] = rng_float();
    double *b_dt = xmalloc(vocabulary * width, sizeof(double)), *b_dm = xmalloc(width, sizeof(double));
    for (size_t i = 0; i < vocabulary * width; i++) b_dt[i] = 151 * U32 * (m_dt[i] + fabs(dt0[i]));
    for (size_t c = 0; c < width; c++) b_dm[c] = 151 * U32 * (m_dm[c] + fabs(dm0[c]));
    float *d_dt = dev_floats(b, dt0, vocabulary * width), *d_dm = dev_floats(b, dm0, width);
    float *dt[2], *dm[2];
    for (int call = 0; call < 2; call++) {
        b->ops->embedding_backward(b, d_r, d_ids, rows, width, d_dt, d_dm);
        sync_check(b, label, what);
        dt[call] = fetch(b, d_dt, vocabulary * width);
        dm[call] = fetch(b, d_dm, width);
    }
    for (int call = 0; call < 2; call++) {
        snprintf(name, sizeof(name), "%s: dtable", what);
        increment_bound_check(label, name, dt[call], dt0, call + 1, e_dt, b_dt, NULL, vocabulary * width);
        snprintf(name, sizeof(name), "%s: dmodality", what);
        increment_bound_check(label, name, dm[call], dm0, call + 1, e_dm, b_dm, NULL, width);
    }
    CHECK(same_bits(dt[1] + (vocabulary - 1) * width, dt0 + (vocabulary - 1) * width,
                    width * sizeof(float)),
          "%s %s: an unused table row changed", label, what);
    /* finite differences of loss = sum r * y over the text rows */
    size_t samples = 16, index[16];
    double numeric[16];
    for (size_t s = 0; s < samples; s++) {
        index[s] = rng_below((vocabulary - 1) * width);
        size_t id = index[s] / width, c = index[s] % width;
        double up = 0, down = 0; /* y = t + m is linear in t: the loss at t +- h */
        for (size_t i = 0; i < rows; i++)
            if (ids[i] == id) {
                up += r[i * width + c] * ((double)table[index[s]] + STEP);
                down += r[i * width + c] * ((double)table[index[s]] - STEP);
            }
        numeric[s] = (up - down) / (2 * STEP);
    }
    snprintf(name, sizeof(name), "%s: dtable vs finite differences", what);
    for (size_t s = 0; s < samples; s++) b_dt[index[s]] += FD_SLACK;
    increment_bound_check(label, name, dt[0], dt0, 1, numeric, b_dt, index, samples);

    for (int call = 0; call < 2; call++) {
        free(dt[call]);
        free(dm[call]);
    }
    dev_free(b, d_table); dev_free(b, d_modality); dev_free(b, d_ids); dev_free(b, d_y);
    dev_free(b, d_r); dev_free(b, d_dt); dev_free(b, d_dm);
    free(table); free(modality); free(r); free(ids); free(y0); free(y); free(e_dt); free(m_dt);
    free(e_dm); free(m_dm); free(dt0); free(dm0); free(b_dt); free(b_dm);
}

static void test_embedding(uform_backend_t *b, const char *label) {
    embedding_case(b, label, 64, true);
    embedding_case(b, label, 40, false);
}

/* ==== attention ============================================================= */

/* One head of one segment in float64, the plain way: p [n][n] the
 * probabilities, out [n][64], lse [n] (NULL: not wanted). */
static void attention_ref_head(const double *qkv, size_t hidden, size_t begin, size_t n,
                               size_t head, double *p, double *out, double *lse) {
    size_t stride = 3 * hidden;
    const double *q = qkv + begin * stride + head * 64, *k = q + hidden, *v = q + 2 * hidden;
    for (size_t i = 0; i < n; i++) {
        double *row = p + i * n, top = -INFINITY, total = 0;
        for (size_t j = 0; j < n; j++) {
            double dot = 0;
            for (size_t d = 0; d < 64; d++) dot += q[i * stride + d] * k[j * stride + d];
            row[j] = dot / 8;
            top = fmax(top, row[j]);
        }
        for (size_t j = 0; j < n; j++) total += row[j] = exp(row[j] - top);
        for (size_t j = 0; j < n; j++) row[j] /= total;
        for (size_t d = 0; d < 64; d++) {
            double sum = 0;
            for (size_t j = 0; j < n; j++) sum += row[j] * v[j * stride + d];
            out[i * 64 + d] = sum;
        }
        if (lse) lse[i] = top + log(total);
    }
}

/* The analytic gradients of one head, added into dqkv [rows][3H]:
 * dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(P dP)), dQ = dS K / 8,
 * dK = dS^T Q / 8. dout is [rows][H]; ds is scratch [n][n]. */
static void attention_ref_backward_head(const double *qkv, const double *dout, size_t hidden,
                                        size_t begin, size_t n, size_t head, const double *p,
                                        double *ds, double *dqkv) {
    size_t stride = 3 * hidden;
    const double *q = qkv + begin * stride + head * 64, *k = q + hidden, *v = q + 2 * hidden;
    const double *g = dout + begin * hidden + head * 64;
    double *dq = dqkv + begin * stride + head * 64, *dk = dq + hidden, *dv = dq + 2 * hidden;
    for (size_t i = 0; i < n; i++) {
        double delta = 0;
        for (size_t j = 0; j < n; j++) {
            double dp = 0;
            for (size_t d = 0; d < 64; d++) dp += g[i * hidden + d] * v[j * stride + d];
            ds[i * n + j] = dp;
            delta += p[i * n + j] * dp;
        }
        for (size_t j = 0; j < n; j++) ds[i * n + j] = p[i * n + j] * (ds[i * n + j] - delta);
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            for (size_t d = 0; d < 64; d++) {
                dq[i * stride + d] += ds[i * n + j] * k[j * stride + d] / 8;
                dk[j * stride + d] += ds[i * n + j] * q[i * stride + d] / 8;
                dv[j * stride + d] += p[i * n + j] * g[i * hidden + d];
            }
}

typedef struct {
    const double *qkv, *r;
    size_t hidden, head, begin, length;
    double *p, *out;
} attention_ref_t;

/* sum of r * out over one segment's rows and one head */
static double attention_ref_loss(void *context) {
    const attention_ref_t *a = context;
    attention_ref_head(a->qkv, a->hidden, a->begin, a->length, a->head, a->p, a->out, NULL);
    double loss = 0;
    for (size_t i = 0; i < a->length; i++)
        for (size_t d = 0; d < 64; d++)
            loss += a->out[i * 64 + d] * a->r[(a->begin + i) * a->hidden + a->head * 64 + d];
    return loss;
}

/* Error bounds of one query row i of a head (u = 2^-24, n keys):
 * - scores: FP32 chains of 64 products and the 1/8, (2 * 64 + 2) u of
 *   S_i = max_j sum_d |q_id k_jd| / 8; with BF16 q and k each product is off
 *   by 2 * 2^-8 more. A score error ds changes each normalised weight by a
 *   factor within e^(+-2 ds), so the output by (e^(2 ds) - 1) max|v|.
 * - the exponentials (2 ulp), the sum of n of them, its inverse, the sum of n
 *   products p v and the scaling: (2n + 40) u max|v|; BF16 p and v: 2 * 2^-8.
 * - lse = top + log(total): ds + (n + 24) u + 2 u |lse|. */
typedef struct {
    double out, lse;
} attention_bound_t;

static attention_bound_t attention_bound(const double *qkv, size_t hidden, size_t begin, size_t n,
                                         size_t head, size_t i, double lse, bool bf16) {
    size_t stride = 3 * hidden;
    const double *q = qkv + begin * stride + head * 64, *k = q + hidden, *v = q + 2 * hidden;
    double s = 0, vmax = 0;
    for (size_t j = 0; j < n; j++) {
        double dot = 0;
        for (size_t d = 0; d < 64; d++) {
            dot += fabs(q[i * stride + d] * k[j * stride + d]);
            vmax = fmax(vmax, fabs(v[j * stride + d]));
        }
        s = fmax(s, dot / 8);
    }
    double ds = ((2 * 64 + 2) * U32 + (bf16 ? 2 * BF16_U : 0)) * s;
    attention_bound_t bound;
    bound.out = (expm1(2 * ds) + (2.0 * (double)n + 40) * U32 + (bf16 ? 2 * BF16_U : 0)) * vmax + 1e-30;
    bound.lse = ds + ((double)n + 24) * U32 + 2 * U32 * fabs(lse);
    return bound;
}

static void attention_case(uform_backend_t *b, const char *label, size_t hidden, float scale,
                           const uform_segment_t *segments, size_t count, size_t fd_samples) {
    char what[160], name[224];
    int written = snprintf(what, sizeof(what), "attention H=%zu scale %g lengths", hidden, scale);
    for (size_t s = 0; s < count && written > 0 && (size_t)written < sizeof(what) - 8; s++)
        written += snprintf(what + written, sizeof(what) - (size_t)written, " %zu", segments[s].length);
    size_t rows = 0, heads = hidden / 64, stride = 3 * hidden, longest = 0;
    for (size_t s = 0; s < count; s++) {
        if (segments[s].begin + segments[s].length > rows) rows = segments[s].begin + segments[s].length;
        if (segments[s].length > longest) longest = segments[s].length;
    }
    size_t n = rows * stride, outs = rows * hidden;
    float *qkv = random_floats(n, scale), *r = random_floats(outs, 1.0f);
    float *d_qkv = dev_floats(b, qkv, n), *d_r = dev_floats(b, r, outs);
    uform_segment_t *d_segments = dev_upload(b, segments, count * sizeof(uform_segment_t));
    float *d_train = dev_alloc(b, outs * sizeof(float)), *d_infer = dev_alloc(b, outs * sizeof(float));
    float *d_lse = dev_alloc(b, rows * heads * sizeof(float));
    size_t scratch_bytes = b->ops->attention_scratch_bytes(b, hidden, count, longest);
    void *d_scratch = scratch_bytes ? dev_alloc(b, scratch_bytes) : NULL;
    b->ops->attention_forward(b, d_qkv, hidden, d_segments, count, rows, longest, d_train, d_lse, NULL);
    b->ops->attention_forward(b, d_qkv, hidden, d_segments, count, rows, longest, d_infer, NULL, d_scratch);
    sync_check(b, label, what);
    float *train = fetch(b, d_train, outs), *infer = fetch(b, d_infer, outs);
    float *lse = fetch(b, d_lse, rows * heads);

    /* forward: both paths against float64, and against each other */
    double *qd = to_double(qkv, n), *rd = to_double(r, outs);
    double *ref_out = xmalloc(outs, sizeof(double)), *ref_lse = xmalloc(rows * heads, sizeof(double));
    double *b_train = xmalloc(outs, sizeof(double)), *b_infer = xmalloc(outs, sizeof(double));
    double *b_lse = xmalloc(rows * heads, sizeof(double)), *b_both = xmalloc(outs, sizeof(double));
    double *p = xmalloc(longest * longest, sizeof(double)), *ds = xmalloc(longest * longest, sizeof(double));
    double *head_out = xmalloc(longest * 64, sizeof(double)), *head_lse = xmalloc(longest, sizeof(double));
    double *e_dqkv = xmalloc(n, sizeof(double));
    bool bf16 = bf16_activations(b);
    for (size_t s = 0; s < count; s++) {
        size_t begin = segments[s].begin, length = segments[s].length;
        if (!length) continue;
        for (size_t h = 0; h < heads; h++) {
            attention_ref_head(qd, hidden, begin, length, h, p, head_out, head_lse);
            attention_ref_backward_head(qd, rd, hidden, begin, length, h, p, ds, e_dqkv);
            for (size_t i = 0; i < length; i++) {
                size_t row = begin + i;
                attention_bound_t fp32 = attention_bound(qd, hidden, begin, length, h, i, head_lse[i], false);
                attention_bound_t inference = bf16 ? attention_bound(qd, hidden, begin, length, h, i,
                                                                     head_lse[i], true)
                                                   : fp32;
                ref_lse[row * heads + h] = head_lse[i];
                b_lse[row * heads + h] = fp32.lse;
                for (size_t d = 0; d < 64; d++) {
                    size_t e = row * hidden + h * 64 + d;
                    ref_out[e] = head_out[i * 64 + d];
                    b_train[e] = fp32.out;
                    b_infer[e] = inference.out;
                    b_both[e] = fp32.out + inference.out;
                }
            }
        }
    }
    snprintf(name, sizeof(name), "%s: training out", what);
    bound_check(label, name, train, ref_out, b_train, outs);
    snprintf(name, sizeof(name), "%s: training logsumexp", what);
    bound_check(label, name, lse, ref_lse, b_lse, rows * heads);
    snprintf(name, sizeof(name), "%s: inference out%s", what, bf16 ? " (BF16)" : "");
    bound_check(label, name, infer, ref_out, b_infer, outs);
    double *train_d = to_double(train, outs);
    snprintf(name, sizeof(name), "%s: inference vs training", what);
    bound_check(label, name, infer, train_d, b_both, outs);
    free(train_d);

    /* each segment alone (at row 0 of its own buffer) equals it inside the batch */
    bool alone_infer = true, alone_train = true;
    for (size_t s = 0; s < count; s++) {
        size_t begin = segments[s].begin, length = segments[s].length;
        if (!length) continue;
        uform_segment_t one = {0, length, segments[s].axes};
        uform_segment_t *d_one = dev_upload(b, &one, sizeof(one));
        float *d_alone_qkv = dev_alloc(b, length * stride * sizeof(float));
        b->ops->copy(b, d_alone_qkv, d_qkv + begin * stride, length * stride * sizeof(float));
        float *d_out = dev_alloc(b, length * hidden * sizeof(float));
        float *d_out2 = dev_alloc(b, length * hidden * sizeof(float));
        float *d_lse2 = dev_alloc(b, length * heads * sizeof(float));
        size_t bytes = b->ops->attention_scratch_bytes(b, hidden, 1, length);
        void *d_scr = bytes ? dev_alloc(b, bytes) : NULL;
        b->ops->attention_forward(b, d_alone_qkv, hidden, d_one, 1, length, length, d_out, NULL, d_scr);
        b->ops->attention_forward(b, d_alone_qkv, hidden, d_one, 1, length, length, d_out2, d_lse2, NULL);
        sync_check(b, label, what);
        float *o = fetch(b, d_out, length * hidden), *o2 = fetch(b, d_out2, length * hidden);
        float *l2 = fetch(b, d_lse2, length * heads);
        alone_infer &= same_bits(o, infer + begin * hidden, length * hidden * sizeof(float));
        alone_train &= same_bits(o2, train + begin * hidden, length * hidden * sizeof(float)) &&
                       same_bits(l2, lse + begin * heads, length * heads * sizeof(float));
        dev_free(b, d_one); dev_free(b, d_alone_qkv); dev_free(b, d_out); dev_free(b, d_out2);
        dev_free(b, d_lse2); dev_free(b, d_scr);
        free(o); free(o2); free(l2);
    }
    CHECK(alone_infer, "%s %s: inference of a segment alone differs from the batch", label, what);
    CHECK(alone_train, "%s %s: training forward of a segment alone differs from the batch", label,
          what);

    /* backward: dqkv += ..., twice, against the analytic float64 gradient */
    float *g0 = base_like(e_dqkv, n, n), *d_dqkv = dev_floats(b, g0, n);
    float *g[2];
    for (int call = 0; call < 2; call++) {
        b->ops->attention_backward(b, d_qkv, d_train, d_r, d_lse, hidden, d_segments, count, rows, longest,
                                   d_dqkv);
        sync_check(b, label, what);
        g[call] = fetch(b, d_dqkv, n);
    }
    /* test_backward.c: each p_ij = exp(s_ij - lse_i) carries the absolute error
     * of its exponent (lse in FP32, the 64-term score), ~(|lse| + |s|) u in every
     * term of dq, dk, dv alike, ~1e-6 of the largest component at scale 3: a
     * 3% floor keeps the 1e-4 check meaningful with margin. */
    static const char *parts[3] = {"dq", "dk", "dv"};
    for (int call = 0; call < 2; call++)
        for (size_t part = 0; part < 3; part++) {
            /* the part's columns of every row, gathered */
            size_t m = rows * hidden, *index = xmalloc(m, sizeof(size_t));
            double *expected = xmalloc(m, sizeof(double));
            for (size_t row = 0; row < rows; row++)
                for (size_t c = 0; c < hidden; c++) {
                    index[row * hidden + c] = row * stride + part * hidden + c;
                    expected[row * hidden + c] = e_dqkv[row * stride + part * hidden + c];
                }
            snprintf(name, sizeof(name), "%s: %s", what, parts[part]);
            increment_check(label, name, g[call], g0, call + 1, expected, index, m, 0.03, 0);
            free(index);
            free(expected);
        }
    /* finite differences: every element of segments of <= 2 rows, else
     * fd_samples of each head's q, k and v */
    attention_ref_t ref = {qd, rd, hidden, 0, 0, 0, p, head_out};
    size_t capacity = 0;
    for (size_t s = 0; s < count; s++)
        capacity += segments[s].length <= 2 ? segments[s].length * stride : fd_samples * 3 * heads;
    size_t *index = xmalloc(capacity, sizeof(size_t)), samples = 0;
    double *numeric = xmalloc(capacity, sizeof(double));
    for (size_t s = 0; s < count; s++) {
        size_t length = segments[s].length;
        if (!length) continue;
        ref.begin = segments[s].begin;
        ref.length = length;
        size_t draws = length <= 2 ? length * stride : fd_samples * 3 * heads;
        for (size_t t = 0; t < draws; t++) {
            size_t row, column;
            if (length <= 2) {
                row = t / stride;
                column = t % stride;
            } else {
                row = rng_below(length);
                column = (t / fd_samples % (3 * heads)) * 64 + rng_below(64);
            }
            size_t i = (segments[s].begin + row) * stride + column;
            ref.head = column % hidden / 64;
            index[samples] = i;
            numeric[samples++] = central(attention_ref_loss, &ref, &qd[i], STEP);
        }
    }
    snprintf(name, sizeof(name), "%s: dqkv vs finite differences", what);
    increment_check(label, name, g[0], g0, 1, numeric, index, samples, 0.03, 0);

    dev_free(b, d_qkv); dev_free(b, d_r); dev_free(b, d_segments); dev_free(b, d_train);
    dev_free(b, d_infer); dev_free(b, d_lse); dev_free(b, d_scratch); dev_free(b, d_dqkv);
    free(qkv); free(r); free(train); free(infer); free(lse); free(qd); free(rd); free(ref_out);
    free(ref_lse); free(b_train); free(b_infer); free(b_lse); free(b_both); free(p); free(ds);
    free(head_out); free(head_lse); free(e_dqkv); free(g0); free(g[0]); free(g[1]); free(index);
    free(numeric);
}

static void test_attention(uform_backend_t *b, const char *label) {
    /* one row, two rows, an empty segment, 17 rows and 70 (> 64: several query
     * blocks and key tiles) */
    const uform_segment_t mixed[] = {{0, 1, 1}, {1, 2, 1}, {3, 0, 1}, {3, 17, 1}, {20, 70, 1}};
    attention_case(b, label, 64, 1.0f, mixed, 5, 4);
    /* two heads, larger scores, segments out of row order */
    const uform_segment_t shuffled[] = {{5, 33, 2}, {0, 5, 1}, {38, 1, 3}};
    attention_case(b, label, 128, 2.5f, shuffled, 3, 6);
}

/* ==== mean pooling ========================================================== */

static void test_mean_pool(uform_backend_t *b, const char *label) {
    size_t width = 40, rows = 82;
    /* an empty segment between others, one at the end, a 1-row segment, a long
     * one, and row 8 in no segment (it must get no gradient) */
    const uform_segment_t segments[] = {{0, 3, 1}, {3, 0, 1}, {3, 1, 1}, {4, 4, 1}, {9, 73, 1}, {82, 0, 1}};
    size_t count = 6;
    float *x = random_floats(rows * width, 1.0f), *r = random_floats(count * width, 1.0f);
    float *garbage = filled(count * width, NAN);
    float *d_x = dev_floats(b, x, rows * width), *d_pooled = dev_floats(b, garbage, count * width);
    uform_segment_t *d_segments = dev_upload(b, segments, sizeof(segments));
    b->ops->mean_pool_forward(b, d_x, width, d_segments, count, d_pooled);
    sync_check(b, label, "mean_pool_forward");
    float *pooled = fetch(b, d_pooled, count * width);
    double *ref = xmalloc(count * width, sizeof(double)), *bound = xmalloc(count * width, sizeof(double));
    double *e_dx = xmalloc(rows * width, sizeof(double));
    for (size_t s = 0; s < count; s++)
        for (size_t c = 0; c < width; c++) {
            double sum = 0, magnitude = 0;
            size_t length = segments[s].length;
            for (size_t i = 0; i < length; i++) {
                sum += x[(segments[s].begin + i) * width + c];
                magnitude += fabs(x[(segments[s].begin + i) * width + c]);
                e_dx[(segments[s].begin + i) * width + c] = r[s * width + c] / (double)length;
            }
            ref[s * width + c] = length ? sum / (double)length : 0.0;
            /* a sum of `length` terms then a scaling by a rounded 1 / length */
            bound[s * width + c] = length ? ((double)length + 3) * U32 * magnitude / (double)length : 0.0;
        }
    bound_check(label, "mean_pool_forward", pooled, ref, bound, count * width);
    bool zeros = true;
    for (size_t c = 0; c < width; c++)
        zeros &= pooled[1 * width + c] == 0.0f && pooled[5 * width + c] == 0.0f;
    CHECK(zeros, "%s mean_pool: an empty segment does not pool to zeros", label);

    /* backward: dx += dpooled / length over each segment's rows; exact up to
     * the rounding of 1 / length and of the product (2 u; 3 u for margin over
     * the second-order terms), then the add (increment_bound_check) */
    float *dx0 = base_like(e_dx, rows * width, rows * width);
    double *b_dx = xmalloc(rows * width, sizeof(double));
    for (size_t i = 0; i < rows * width; i++) b_dx[i] = 3 * U32 * fabs(e_dx[i]) + 1e-30;
    float *d_r = dev_floats(b, r, count * width), *d_dx = dev_floats(b, dx0, rows * width);
    float *dx[2];
    for (int call = 0; call < 2; call++) {
        b->ops->mean_pool_backward(b, d_r, width, d_segments, count, d_dx);
        sync_check(b, label, "mean_pool_backward");
        dx[call] = fetch(b, d_dx, rows * width);
    }
    for (int call = 0; call < 2; call++)
        increment_bound_check(label, "mean_pool_backward: dx", dx[call], dx0, call + 1, e_dx, b_dx,
                              NULL, rows * width);
    CHECK(same_bits(dx[1] + 8 * width, dx0 + 8 * width, width * sizeof(float)),
          "%s mean_pool_backward: a row in no segment changed", label);
    /* finite differences of loss = sum r * pooled: linear, so exact in float64 */
    size_t samples = 32, index[32];
    double numeric[32];
    for (size_t t = 0; t < samples; t++) {
        index[t] = rng_below(rows * width);
        size_t row = index[t] / width, c = index[t] % width;
        numeric[t] = 0;
        for (size_t s = 0; s < count; s++)
            if (row >= segments[s].begin && row < segments[s].begin + segments[s].length)
                numeric[t] = ((r[s * width + c] * ((x[index[t]] + STEP) / (double)segments[s].length)) -
                              (r[s * width + c] * ((x[index[t]] - STEP) / (double)segments[s].length))) /
                             (2 * STEP);
    }
    for (size_t t = 0; t < samples; t++) b_dx[index[t]] += FD_SLACK;
    increment_bound_check(label, "mean_pool_backward vs finite differences", dx[0], dx0, 1, numeric,
                          b_dx, index, samples);
    dev_free(b, d_x); dev_free(b, d_pooled); dev_free(b, d_segments); dev_free(b, d_r);
    dev_free(b, d_dx);
    free(x); free(r); free(garbage); free(pooled); free(ref); free(bound); free(e_dx); free(dx0);
    free(b_dx); free(dx[0]); free(dx[1]);
}

/* ==== L2 normalisation ====================================================== */

typedef struct {
    const double *x, *r;
    size_t row, width;
} normalize_ref_t;

static double normalize_ref_loss(void *context) {
    const normalize_ref_t *l = context;
    const double *x = l->x + l->row * l->width;
    double squares = 0;
    for (size_t c = 0; c < l->width; c++) squares += x[c] * x[c];
    double divisor = fmax(sqrt(squares), 1e-12), loss = 0;
    for (size_t c = 0; c < l->width; c++) loss += x[c] / divisor * l->r[l->row * l->width + c];
    return loss;
}

static void normalize_case(uform_backend_t *b, const char *label, size_t width) {
    char what[64], name[160];
    snprintf(what, sizeof(what), "normalize width %zu", width);
    /* row scales: ordinary, large, norm ~1e-10 (above the clamp), ~1e-14 (below), zero */
    const float scales[] = {1.0f, 1.0f, 300.0f, 1e-11f, 1e-15f, 0.0f};
    size_t rows = sizeof(scales) / sizeof(scales[0]), n = rows * width;
    float *x = xmalloc(n, sizeof(float)), *r = random_floats(n, 1.0f);
    for (size_t row = 0; row < rows; row++)
        for (size_t c = 0; c < width; c++) x[row * width + c] = rng_float() * scales[row];
    float *d_x = dev_floats(b, x, n), *d_y = dev_alloc(b, n * sizeof(float));
    float *d_y2 = dev_alloc(b, n * sizeof(float)), *d_inplace = dev_floats(b, x, n);
    float *d_norms = dev_alloc(b, rows * sizeof(float));
    b->ops->normalize_forward(b, d_x, rows, width, d_y, d_norms);
    b->ops->normalize_forward(b, d_x, rows, width, d_y2, NULL);
    b->ops->normalize_forward(b, d_inplace, rows, width, d_inplace, NULL);
    sync_check(b, label, what);
    float *y = fetch(b, d_y, n), *y2 = fetch(b, d_y2, n), *inplace = fetch(b, d_inplace, n);
    float *norms = fetch(b, d_norms, rows);
    CHECK(same_bits(y, y2, n * sizeof(float)), "%s %s: y differs when norms is NULL", label, what);
    CHECK(same_bits(y, inplace, n * sizeof(float)), "%s %s: y == x differs from y != x", label, what);
    double *xd = to_double(x, n), *rd = to_double(r, n), *yd = xmalloc(n, sizeof(double));
    double *norm_ref = xmalloc(rows, sizeof(double)), *e_dx = xmalloc(n, sizeof(double));
    for (size_t row = 0; row < rows; row++) {
        double squares = 0;
        for (size_t c = 0; c < width; c++) squares += xd[row * width + c] * xd[row * width + c];
        norm_ref[row] = sqrt(squares);
        double divisor = fmax(norm_ref[row], 1e-12), dot = 0;
        for (size_t c = 0; c < width; c++) {
            yd[row * width + c] = xd[row * width + c] / divisor;
            dot += yd[row * width + c] * rd[row * width + c];
        }
        for (size_t c = 0; c < width; c++)
            e_dx[row * width + c] = norm_ref[row] > 1e-12
                                        ? (rd[row * width + c] - yd[row * width + c] * dot) / divisor
                                        : rd[row * width + c] / 1e-12;
    }
    /* test_backward.c: above the clamp the norm carries ~(width/16 + 20) u and y
     * two more (|y| <= 1); below it y = x * (1 / 1e-12f), <= 2 u relative plus
     * 1e-12f's own rounding (another u) */
    forward_check(label, what, y, yd, 4 * width, 4e-6, 0.0);
    snprintf(name, sizeof(name), "%s: below the clamp", what);
    forward_check(label, name, y + 4 * width, yd + 4 * width, 2 * width, 3e-7, 0.0);
    snprintf(name, sizeof(name), "%s: norms", what);
    forward_check(label, name, norms, norm_ref, rows, ((double)width + 4) * U32, 0.0);

    float *dx0 = base_like(e_dx, n, width), *d_dx = dev_floats(b, dx0, n), *d_r = dev_floats(b, r, n);
    float *dx[2];
    for (int call = 0; call < 2; call++) {
        b->ops->normalize_backward(b, d_r, d_y, d_norms, rows, width, d_dx);
        sync_check(b, label, what);
        dx[call] = fetch(b, d_dx, n);
    }
    normalize_ref_t ref = {xd, rd, 0, width};
    double *numeric = xmalloc(width, sizeof(double));
    size_t *index = xmalloc(width, sizeof(size_t));
    for (size_t row = 0; row < rows; row++) {
        for (int call = 0; call < 2; call++) {
            snprintf(name, sizeof(name), "%s: dx of a row of scale %g", what, scales[row]);
            increment_check(label, name, dx[call] + row * width, dx0 + row * width, call + 1,
                            e_dx + row * width, NULL, width, 0.01, 0);
        }
        ref.row = row;
        double step = STEP * (scales[row] > 0 ? scales[row] : 1e-15);
        for (size_t c = 0; c < width; c++) {
            index[c] = row * width + c;
            numeric[c] = central(normalize_ref_loss, &ref, &xd[row * width + c], step);
        }
        snprintf(name, sizeof(name), "%s: dx of a row of scale %g vs finite differences", what,
                 scales[row]);
        increment_check(label, name, dx[0], dx0, 1, numeric, index, width, 0.01, 0);
    }
    dev_free(b, d_x); dev_free(b, d_y); dev_free(b, d_y2); dev_free(b, d_inplace);
    dev_free(b, d_norms); dev_free(b, d_dx); dev_free(b, d_r);
    free(x); free(r); free(y); free(y2); free(inplace); free(norms); free(xd); free(rd); free(yd);
    free(norm_ref); free(e_dx); free(dx0); free(dx[0]); free(dx[1]); free(numeric); free(index);
}

static void test_normalize(uform_backend_t *b, const char *label) {
    normalize_case(b, label, 64);
    normalize_case(b, label, 40);
}

/* ==== cross-entropy ========================================================= */

/* logsumexp(l) - l_t as log1p(sum_{c != t} e^(l_c - l_t)): no cancellation when
 * p_t ~ 1 (test_backward.c). */
static double cross_entropy_ref_row(const double *logits, size_t classes, uint32_t target) {
    double others = 0;
    for (size_t c = 0; c < classes; c++)
        if (c != target) others += exp(logits[c] - logits[target]);
    return log1p(others);
}

typedef struct {
    const double *logits;
    size_t row, classes;
    uint32_t target;
    double scale;
} cross_entropy_ref_t;

static double cross_entropy_ref_loss(void *context) {
    const cross_entropy_ref_t *e = context;
    return e->scale * cross_entropy_ref_row(e->logits + e->row * e->classes, e->classes, e->target);
}

static void cross_entropy_case(uform_backend_t *b, const char *label, size_t classes) {
    char what[64], name[160];
    snprintf(what, sizeof(what), "cross_entropy %zu classes", classes);
    size_t rows = 12, n = rows * classes;
    float *logits = random_floats(n, 4.0f);
    for (size_t c = 0; c < classes; c++) logits[3 * classes + c] += 80.0f; /* large, shifted row */
    logits[4 * classes + 1] = 30.0f;                                       /* one dominant class */
    uint32_t *targets = xmalloc(rows, sizeof(uint32_t));
    float *scale = xmalloc(rows, sizeof(float));
    for (size_t row = 0; row < rows; row++) {
        targets[row] = (uint32_t)rng_below(classes);
        scale[row] = row % 4 == 2 ? 0.0f : 0.5f + 0.5f * rng_float(); /* 0 skips a row */
    }
    targets[4] = 1; /* p ~ 1 at the target: the gradient is a cancellation */
    float *d_logits = dev_floats(b, logits, n), *d_losses = dev_alloc(b, rows * sizeof(float));
    uint32_t *d_targets = dev_upload(b, targets, rows * sizeof(uint32_t));
    float *d_scale = dev_floats(b, scale, rows);
    b->ops->cross_entropy_forward(b, d_logits, rows, classes, d_targets, d_losses);
    sync_check(b, label, what);
    float *losses = fetch(b, d_losses, rows);
    double *ld = to_double(logits, n), *ref = xmalloc(rows, sizeof(double));
    double *e_d = xmalloc(n, sizeof(double));
    for (size_t row = 0; row < rows; row++) {
        const double *l = ld + row * classes;
        ref[row] = cross_entropy_ref_row(l, classes, targets[row]);
        double top = -INFINITY, total = 0;
        for (size_t c = 0; c < classes; c++) top = fmax(top, l[c]);
        for (size_t c = 0; c < classes; c++) total += exp(l[c] - top);
        for (size_t c = 0; c < classes; c++)
            e_d[row * classes + c] =
                scale[row] * (exp(l[c] - top) / total - (c == targets[row] ? 1.0 : 0.0));
    }
    /* test_backward.c: top + log(total) rounds relative to |top| + 1 (<= 90),
     * total carries ~(classes/16 + 18) u and exp 2 ulp: 1e-4 absolute bounds
     * 90 (classes/16 + 24) u for up to 300 classes with margin */
    forward_check(label, what, losses, ref, rows, 0.0, 1e-4);

    float *d0 = base_like(e_d, n, classes), *d_d = dev_floats(b, d0, n);
    float *d[2];
    for (int call = 0; call < 2; call++) {
        b->ops->cross_entropy_backward(b, d_logits, rows, classes, d_targets, d_scale, d_d);
        sync_check(b, label, what);
        d[call] = fetch(b, d_d, n);
    }
    bool skipped = true;
    for (size_t row = 2; row < rows; row += 4)
        skipped &= same_bits(d[1] + row * classes, d0 + row * classes, classes * sizeof(float));
    CHECK(skipped, "%s %s: a row of scale 0 changed", label, what);
    double *numeric = xmalloc(classes, sizeof(double));
    size_t *index = xmalloc(classes, sizeof(size_t));
    for (size_t row = 0; row < rows; row++) {
        if (scale[row] == 0.0f) continue;
        /* p_t - 1 is a cancellation: FP32 leaves ~u of the terms (p, 1) times scale */
        for (int call = 0; call < 2; call++) {
            snprintf(name, sizeof(name), "%s: row %zu", what, row);
            float *got = d[call] + row * classes;
            increment_check(label, name, got, d0 + row * classes, call + 1, e_d + row * classes,
                            NULL, classes, 0.01, 0.01 * scale[row]);
        }
        cross_entropy_ref_t e = {ld, row, classes, targets[row], scale[row]};
        for (size_t c = 0; c < classes; c++) {
            index[c] = row * classes + c;
            numeric[c] = central(cross_entropy_ref_loss, &e, &ld[row * classes + c], STEP);
        }
        snprintf(name, sizeof(name), "%s: row %zu vs finite differences", what, row);
        increment_check(label, name, d[0], d0, 1, numeric, index, classes, 0.01, 0.01 * scale[row]);
    }
    dev_free(b, d_logits); dev_free(b, d_losses); dev_free(b, d_targets); dev_free(b, d_scale);
    dev_free(b, d_d);
    free(logits); free(targets); free(scale); free(losses); free(ld); free(ref); free(e_d);
    free(d0); free(d[0]); free(d[1]); free(numeric); free(index);
}

static void test_cross_entropy(uform_backend_t *b, const char *label) {
    cross_entropy_case(b, label, 7);
    cross_entropy_case(b, label, 300);
}

/* ==== gather / scatter ========================================================= */

static void test_gather_scatter(uform_backend_t *b, const char *label) {
    size_t width = 40, src_rows = 30, count = 50;
    float *src = random_floats(src_rows * width, 1.0f), *many = random_floats(count * width, 1.0f);
    float *dst0 = random_floats(src_rows * width, 1.0f);
    size_t *rows = xmalloc(count, sizeof(size_t));
    for (size_t i = 0; i < count; i++) rows[i] = rng_below(src_rows - 1); /* repeats; the last never */
    float *d_src = dev_floats(b, src, src_rows * width), *d_many = dev_floats(b, many, count * width);
    float *d_gathered = dev_alloc(b, count * width * sizeof(float));
    float *d_dst = dev_floats(b, dst0, src_rows * width);
    size_t *d_rows = dev_upload(b, rows, count * sizeof(size_t));
    b->ops->gather_rows(b, d_src, width, d_rows, count, d_gathered);
    b->ops->scatter_add_rows(b, d_many, width, d_rows, count, d_dst);
    b->ops->gather_rows(b, d_src, width, d_rows, 0, d_gathered);     /* count 0: nothing */
    b->ops->scatter_add_rows(b, d_many, width, d_rows, 0, d_dst);
    sync_check(b, label, "gather_rows/scatter_add_rows");
    float *gathered = fetch(b, d_gathered, count * width), *dst = fetch(b, d_dst, src_rows * width);
    bool exact = true;
    for (size_t i = 0; i < count; i++)
        exact &= same_bits(gathered + i * width, src + rows[i] * width, width * sizeof(float));
    CHECK(exact, "%s gather_rows: a row differs", label);
    /* in index order: the same FP32 adds in the same order, so the same bits */
    float *expected = copy_floats(dst0, src_rows * width);
    for (size_t i = 0; i < count; i++)
        for (size_t c = 0; c < width; c++) expected[rows[i] * width + c] += many[i * width + c];
    CHECK(same_bits(dst, expected, src_rows * width * sizeof(float)),
          "%s scatter_add_rows: differs from the adds in index order", label);
    dev_free(b, d_src); dev_free(b, d_many); dev_free(b, d_gathered); dev_free(b, d_dst);
    dev_free(b, d_rows);
    free(src); free(many); free(dst0); free(rows); free(gathered); free(dst); free(expected);
}

/* scatter_rows and sum_rows (the media rows of a mixed batch). */
static void test_scatter_sum_rows(uform_backend_t *b, const char *label) {
    size_t width = 24, count = 9, dst_rows = 20;
    float *src = random_floats(count * width, 1.0f), *add = random_floats(width, 1.0f);
    float *dst0 = random_floats(dst_rows * width, 1.0f), *sums0 = random_floats(width, 1.0f);
    size_t *rows = xmalloc(count, sizeof(size_t));
    for (size_t i = 0; i < count; i++) rows[i] = 2 * i + 1; /* distinct */
    float *d_src = dev_floats(b, src, count * width), *d_add = dev_floats(b, add, width);
    size_t *d_rows = dev_upload(b, rows, count * sizeof(size_t));
    float *d_a = dev_floats(b, dst0, dst_rows * width), *d_b = dev_floats(b, dst0, dst_rows * width);
    float *d_c = dev_floats(b, dst0, dst_rows * width), *d_inplace = dev_floats(b, src, count * width);
    float *d_sums = dev_floats(b, sums0, width), *d_sums_all = dev_floats(b, sums0, width);
    b->ops->scatter_rows(b, d_src, width, d_add, width, d_rows, count, d_a);  /* rows + add */
    b->ops->scatter_rows(b, d_src, 0, NULL, width, d_rows, count, d_b);       /* broadcast row 0 */
    b->ops->scatter_rows(b, d_src, width, NULL, width, NULL, count, d_c);     /* row i */
    b->ops->scatter_rows(b, d_inplace, width, d_add, width, NULL, count, d_inplace); /* dst == src */
    b->ops->sum_rows(b, d_src, width, d_rows, 4, d_sums);   /* rows[i] of src... */
    b->ops->sum_rows(b, d_a, width, NULL, dst_rows, d_sums_all);
    sync_check(b, label, "scatter_rows/sum_rows");
    float *a = fetch(b, d_a, dst_rows * width), *bb = fetch(b, d_b, dst_rows * width);
    float *c = fetch(b, d_c, dst_rows * width), *inplace = fetch(b, d_inplace, count * width);
    float *sums = fetch(b, d_sums, width), *sums_all = fetch(b, d_sums_all, width);
    float *ea = copy_floats(dst0, dst_rows * width), *eb = copy_floats(dst0, dst_rows * width);
    float *ec = copy_floats(dst0, dst_rows * width), *ei = copy_floats(src, count * width);
    for (size_t i = 0; i < count; i++)
        for (size_t k = 0; k < width; k++) {
            ea[rows[i] * width + k] = src[i * width + k] + add[k];
            eb[rows[i] * width + k] = src[k];
            ec[i * width + k] = src[i * width + k];
            ei[i * width + k] = src[i * width + k] + add[k];
        }
    CHECK(same_bits(a, ea, dst_rows * width * sizeof(float)), "%s scatter_rows with add differs", label);
    CHECK(same_bits(bb, eb, dst_rows * width * sizeof(float)), "%s scatter_rows src_stride 0 differs", label);
    CHECK(same_bits(c, ec, dst_rows * width * sizeof(float)), "%s scatter_rows rows NULL differs", label);
    CHECK(same_bits(inplace, ei, count * width * sizeof(float)), "%s scatter_rows dst == src differs", label);
    /* sums in order: the same FP32 adds, the same bits */
    float *es = copy_floats(sums0, width), *esa = copy_floats(sums0, width);
    for (size_t i = 0; i < 4; i++)
        for (size_t k = 0; k < width; k++) es[k] += src[rows[i] * width + k];
    for (size_t i = 0; i < dst_rows; i++)
        for (size_t k = 0; k < width; k++) esa[k] += ea[i * width + k];
    CHECK(same_bits(sums, es, width * sizeof(float)), "%s sum_rows over rows differs", label);
    CHECK(same_bits(sums_all, esa, width * sizeof(float)), "%s sum_rows rows NULL differs", label);
    dev_free(b, d_src); dev_free(b, d_add); dev_free(b, d_rows); dev_free(b, d_a); dev_free(b, d_b);
    dev_free(b, d_c); dev_free(b, d_inplace); dev_free(b, d_sums); dev_free(b, d_sums_all);
    free(src); free(add); free(dst0); free(sums0); free(rows); free(a); free(bb); free(c);
    free(inplace); free(sums); free(sums_all); free(ea); free(eb); free(ec); free(ei); free(es);
    free(esa);
}

/* reconstruction_loss: sum over rows of mean (p - t)^2 (float64) and
 * d = scale 2 (p - t) / width. */
static void test_reconstruction_loss(uform_backend_t *b, const char *label) {
    size_t rows = 7, width = 37, n = rows * width;
    float *pred = random_floats(n, 2.0f), *target = random_floats(n, 2.0f), scale = 0.3f;
    float *d_p = dev_floats(b, pred, n), *d_t = dev_floats(b, target, n);
    float *d_d = dev_alloc(b, n * sizeof(float));
    double loss = b->ops->reconstruction_loss(b, d_p, d_t, rows, width, scale, d_d);
    sync_check(b, label, "reconstruction_loss");
    float *d = fetch(b, d_d, n);
    double expected = 0, *e_d = xmalloc(n, sizeof(double));
    for (size_t r = 0; r < rows; r++) {
        double row = 0;
        for (size_t k = 0; k < width; k++) {
            double diff = (double)pred[r * width + k] - target[r * width + k];
            row += diff * diff;
            e_d[r * width + k] = scale * 2 * diff / (double)width;
        }
        expected += row / (double)width;
    }
    /* the FP32 difference (u relative, squared: 2 u) then float64 sums */
    CHECK(fabs(loss - expected) <= 3 * U32 * expected, "%s reconstruction_loss %.17g, expected %.17g",
          label, loss, expected);
    /* the difference, the factor 2 scale / width (3 roundings), the product */
    forward_check(label, "reconstruction_loss: d_predictions", d, e_d, n, 6 * U32, 0);
    dev_free(b, d_p); dev_free(b, d_t); dev_free(b, d_d);
    free(pred); free(target); free(d); free(e_d);
}

/* ==== MaxSim =================================================================== */

/* scores[q, d] = mean over q's rows of the max over d's rows of their dot
 * product (0 when either side has no rows), F32 rows padded past the width.
 * Each dot is an FP32 chain of W products (<= (2W + 2) u of sum |q d|), the
 * max a selection, the mean a float64 sum and division: (2W + 8) u of the
 * largest sum |q d| of the pair. */
static void test_maxsim(uform_backend_t *b, const char *label) {
    size_t width = 40, row_floats = 43; /* row_bytes > width * 4 */
    /* rows 3, 0, 1, 260 and 5, 1, 0, 1030: past the CPU's 256-query and
     * 1024-document chunks */
    static const size_t query_offsets[] = {0, 3, 3, 4, 264};
    static const size_t document_offsets[] = {0, 5, 6, 6, 1036};
    size_t queries = 4, documents = 4, q_rows = 264, d_rows = 1036;
    float *q = random_floats(q_rows * row_floats, 1.0f), *d = random_floats(d_rows * row_floats, 1.0f);
    for (size_t r = 0; r < q_rows; r++)
        for (size_t c = width; c < row_floats; c++) q[r * row_floats + c] = NAN; /* not read */
    for (size_t r = 0; r < d_rows; r++)
        for (size_t c = width; c < row_floats; c++) d[r * row_floats + c] = NAN;
    float *d_q = dev_floats(b, q, q_rows * row_floats), *d_d = dev_floats(b, d, d_rows * row_floats);
    float *d_scores = dev_alloc(b, queries * documents * sizeof(float));
    uform_token_rows_t qs = {d_q, query_offsets, queries, width, row_floats * sizeof(float),
                             UFORM_SCALAR_F32};
    uform_token_rows_t ds = {d_d, document_offsets, documents, width, row_floats * sizeof(float),
                             UFORM_SCALAR_F32};
    uform_status_t status = b->ops->maxsim(b, &qs, &ds, d_scores);
    CHECK(status == UFORM_OK, "%s maxsim: status %d (%s)", label, (int)status, uform_last_error());
    sync_check(b, label, "maxsim");
    float *scores = fetch(b, d_scores, queries * documents);
    double ref[16], bound[16];
    for (size_t i = 0; i < queries; i++)
        for (size_t j = 0; j < documents; j++) {
            size_t q0 = query_offsets[i], q1 = query_offsets[i + 1];
            size_t d0 = document_offsets[j], d1 = document_offsets[j + 1];
            double sum = 0, largest = 0;
            for (size_t t = q0; t < q1 && d1 > d0; t++) {
                double best = -INFINITY;
                for (size_t u = d0; u < d1; u++) {
                    double dot = 0, magnitude = 0;
                    for (size_t c = 0; c < width; c++) {
                        dot += (double)q[t * row_floats + c] * d[u * row_floats + c];
                        magnitude += fabs((double)q[t * row_floats + c] * d[u * row_floats + c]);
                    }
                    best = fmax(best, dot);
                    largest = fmax(largest, magnitude);
                }
                sum += best;
            }
            ref[i * documents + j] = q1 > q0 && d1 > d0 ? sum / (double)(q1 - q0) : 0.0;
            bound[i * documents + j] = (2.0 * (double)width + 8) * U32 * largest + 1e-30;
        }
    bound_check(label, "maxsim", scores, ref, bound, queries * documents);
    bool zeros = true;
    for (size_t j = 0; j < documents; j++) zeros &= scores[1 * documents + j] == 0.0f;
    for (size_t i = 0; i < queries; i++) zeros &= scores[i * documents + 2] == 0.0f;
    CHECK(zeros, "%s maxsim: an item without rows does not score 0", label);
    dev_free(b, d_q); dev_free(b, d_d); dev_free(b, d_scores);
    free(q); free(d); free(scores);
}

/* ==== the choices head in inference ============================================ */

/* choice_probabilities (text_choose): item c scores its tape entry (entry 0 when
 * the tape holds one, else first_entry + c) at its segment's last row, the
 * MASK row: p = softmax over the entry's bytes k of (h . table[k] + bias[k]) /
 * exp(log_temperature[groups[c]]). Memory (the header comment): states,
 * segments, groups, offsets, probabilities and the weights (table, bias,
 * log_temperature) are device memory; the tape, its bytes and offsets, stays
 * on the host as the objectives' choice bytes do (text_choose passes the
 * caller's tape, which it checks on the host).
 *
 * Tolerance, relative to each reference p_c of an item of n choices, from the
 * FP32 error of every logit after the division (eps, absolute):
 * - h . table[k] + bias[k]: a chain of `hidden` products and adds, then the
 *   bias: (hidden + 2) u of M = sum |h_i t_ki| + |bias_k|, divided by T;
 * - T = expf(log_temperature) within 1 ulp (2 u) and the division (u): 3 u of
 *   |z_c|; the subtraction of the largest logit: u |z_c - max| <= 2 u Z, where
 *   Z = the item's largest |z|; so eps = (hidden + 2) u max M / T + 5 u Z;
 * - softmax: p_c = 1 / sum_j e^(z_j - z_c) moves by at most 2 eps relative;
 *   expf 1 ulp (2 u), the sum of n positive terms (n - 1) u, the division u
 *   (or a rounded reciprocal and a product: 2 u): (n + 2) u;
 * bound = p_c (2 eps + (n + 2) u) plus 2^-126 for an e^(z - max) below
 * FLT_MIN (subnormal or 0; the inputs keep z - max above -50, so unused).
 * The sum of an item's FP32 probabilities is 1 within (n + 2) u, whatever the
 * logits' errors: sum_c e_c / S with S the FP32 sum (n - 1) u off and each
 * quotient 2 u at most, plus n U64 for the float64 sum here. */
#define CHOOSE_ITEMS 6
#define CHOOSE_ROWS 14
#define CHOOSE_FIRST 2  /* per-item tapes: entries 0 and 1 belong to no item */
#define CHOOSE_PAD 3    /* probabilities before offsets[0] and after offsets[count] */
/* rows 1, 5, 1, 3, 1 and 2 (MASK last; row 6 in no segment) */
static const uform_segment_t choose_segments[CHOOSE_ITEMS] = {
    {0, 1, 1}, {1, 5, 1}, {7, 1, 1}, {8, 3, 1}, {11, 1, 1}, {12, 2, 1}};
static const uint32_t choose_groups[CHOOSE_ITEMS] = {2, 1, 0, 2, 1, 0};
static const float choose_log_t[3] = {0.3f, -0.4f, 0.9f};
static const float choose_row_scale[CHOOSE_ITEMS] = {1, 4, 1, 1, 1, 1}; /* item 1: sharp */

/* The 256 bytes in a random order. */
static void byte_permutation(uint8_t *bytes) {
    for (size_t i = 0; i < 256; i++) bytes[i] = (uint8_t)i;
    for (size_t i = 255; i > 0; i--) {
        size_t j = rng_below(i + 1);
        uint8_t t = bytes[i];
        bytes[i] = bytes[j];
        bytes[j] = t;
    }
}

/* shared NULL: a per-item tape of CHOOSE_FIRST + CHOOSE_ITEMS entries (1
 * choice, all 256, repeats, the extreme bytes, 4 letters, 17 random bytes);
 * else a tape of the one entry `shared` every item scores. */
static void choice_case(uform_backend_t *b, const char *label, size_t hidden,
                        const uint8_t *shared, size_t shared_length, bool groups_on,
                        bool temperature_on) {
    char what[128], name[192];
    snprintf(what, sizeof(what), "choice_probabilities hidden %zu, %s tape%s%s", hidden,
             shared ? "shared" : "per-item", groups_on ? ", groups" : "",
             temperature_on ? ", temperatures" : "");
    /* the tape, its bytes allocated to size (an overread is ASan's) */
    uint8_t entries[CHOOSE_FIRST + CHOOSE_ITEMS][256];
    size_t lengths[CHOOSE_FIRST + CHOOSE_ITEMS];
    size_t entry_count = shared ? 1 : CHOOSE_FIRST + CHOOSE_ITEMS, first_entry;
    if (shared) {
        memcpy(entries[0], shared, shared_length);
        lengths[0] = shared_length;
        first_entry = 5; /* ignored when the tape holds one entry */
    } else {
        static const uint8_t fixed[][6] = {{'Q', 'R'}, {'#'}, {'A'}, {0}, {'x', 'y', 'x', 'x', 'z'},
                                           {0x00, 0xff}, {'M', 'A', 'S', 'K'}};
        static const size_t fixed_lengths[] = {2, 1, 1, 0, 5, 2, 4};
        for (size_t e = 0; e < 7; e++) {
            memcpy(entries[e], fixed[e], fixed_lengths[e]);
            lengths[e] = fixed_lengths[e];
        }
        byte_permutation(entries[CHOOSE_FIRST + 1]);
        lengths[CHOOSE_FIRST + 1] = 256;
        for (size_t j = 0; j < 17; j++) entries[CHOOSE_FIRST + 5][j] = (uint8_t)rng_below(256);
        lengths[CHOOSE_FIRST + 5] = 17;
        first_entry = CHOOSE_FIRST;
    }
    size_t *tape_offsets = xmalloc(entry_count + 1, sizeof(size_t));
    for (size_t e = 0; e < entry_count; e++) tape_offsets[e + 1] = tape_offsets[e] + lengths[e];
    uint8_t *data = xmalloc(tape_offsets[entry_count], 1);
    for (size_t e = 0; e < entry_count; e++) memcpy(data + tape_offsets[e], entries[e], lengths[e]);
    uform_tape_t tape = {data, tape_offsets[entry_count], tape_offsets, entry_count};

    /* where each item's probabilities go: offsets[0] = CHOOSE_PAD, as text_choose
     * passes offsets + first */
    size_t offsets[CHOOSE_ITEMS + 1];
    offsets[0] = CHOOSE_PAD;
    const uint8_t *bytes_of[CHOOSE_ITEMS];
    for (size_t c = 0; c < CHOOSE_ITEMS; c++) {
        size_t e = shared ? 0 : first_entry + c;
        bytes_of[c] = data + tape_offsets[e];
        offsets[c + 1] = offsets[c] + lengths[e];
    }
    size_t total = offsets[CHOOSE_ITEMS] + CHOOSE_PAD;
    float *start = filled(total, NAN);
    for (size_t i = 0; i < CHOOSE_PAD; i++) start[i] = start[total - 1 - i] = SENTINEL;

    /* states: the MASK rows random, every other row NaN (never read) */
    float *states = filled(CHOOSE_ROWS * hidden, NAN);
    for (size_t c = 0; c < CHOOSE_ITEMS; c++) {
        size_t row = choose_segments[c].begin + choose_segments[c].length - 1;
        for (size_t x = 0; x < hidden; x++)
            states[row * hidden + x] = rng_float() * choose_row_scale[c];
    }
    float *table = random_floats(256 * hidden, 0.5f), *bias = random_floats(256, 0.5f);

    float *d_states = dev_floats(b, states, CHOOSE_ROWS * hidden);
    uform_segment_t *d_segments = dev_upload(b, choose_segments, sizeof(choose_segments));
    uint32_t *d_groups = groups_on ? dev_upload(b, choose_groups, sizeof(choose_groups)) : NULL;
    float *d_table = dev_floats(b, table, 256 * hidden), *d_bias = dev_floats(b, bias, 256);
    float *d_log_t = temperature_on ? dev_floats(b, choose_log_t, 3) : NULL;
    size_t *d_offsets = dev_upload(b, offsets, sizeof(offsets));
    float *d_p = dev_floats(b, start, total), *d_alone = dev_floats(b, start, total);
    b->ops->choice_probabilities(b, d_states, hidden, d_segments, CHOOSE_ITEMS, &tape, first_entry,
                                 d_groups, d_table, d_bias, d_log_t, d_offsets, d_p);
    /* each item alone, as text_choose's batches cut them */
    for (size_t c = 0; c < CHOOSE_ITEMS; c++)
        b->ops->choice_probabilities(b, d_states, hidden, d_segments + c, 1, &tape, first_entry + c,
                                     d_groups ? d_groups + c : NULL, d_table, d_bias, d_log_t,
                                     d_offsets + c, d_alone);
    sync_check(b, label, what);
    float *p = fetch(b, d_p, total), *alone = fetch(b, d_alone, total);

    double *ref = xmalloc(total, sizeof(double)), *bound = xmalloc(total, sizeof(double));
    double worst_sum = 0;
    size_t worst_item = 0;
    bool single = true, repeats = true;
    for (size_t c = 0; c < CHOOSE_ITEMS; c++) {
        size_t row = choose_segments[c].begin + choose_segments[c].length - 1;
        size_t n = offsets[c + 1] - offsets[c];
        double *z = ref + offsets[c];
        double log_t = temperature_on ? choose_log_t[groups_on ? choose_groups[c] : 0] : 0.0;
        double temperature = exp(log_t), top = -INFINITY, largest_z = 0, largest_m = 0, sum = 0;
        for (size_t k = 0; k < n; k++) {
            const float *t = table + (size_t)bytes_of[c][k] * hidden;
            double dot = bias[bytes_of[c][k]], magnitude = fabs((double)bias[bytes_of[c][k]]);
            for (size_t x = 0; x < hidden; x++) {
                dot += (double)states[row * hidden + x] * t[x];
                magnitude += fabs((double)states[row * hidden + x] * t[x]);
            }
            z[k] = dot / temperature;
            top = fmax(top, z[k]);
            largest_z = fmax(largest_z, fabs(z[k]));
            largest_m = fmax(largest_m, magnitude);
        }
        for (size_t k = 0; k < n; k++) sum += exp(z[k] - top);
        double eps = ((double)(hidden + 2) * largest_m / temperature + 5 * largest_z) * U32;
        double got_sum = 0;
        for (size_t k = 0; k < n; k++) {
            z[k] = exp(z[k] - top) / sum; /* now the probability */
            bound[offsets[c] + k] = z[k] * (2 * eps + (double)(n + 2) * U32) + 0x1p-126;
            got_sum += p[offsets[c] + k];
            for (size_t j = 0; j < k; j++)
                if (bytes_of[c][j] == bytes_of[c][k])
                    repeats &= same_bits(&p[offsets[c] + j], &p[offsets[c] + k], sizeof(float));
        }
        double excess = fabs(got_sum - 1) / ((double)(n + 2) * U32 + (double)n * U64);
        if (!(excess <= worst_sum)) {
            worst_sum = excess;
            worst_item = c;
        }
        if (n == 1) single &= p[offsets[c]] == 1.0f;
    }
    bound_check(label, what, p + CHOOSE_PAD, ref + CHOOSE_PAD, bound + CHOOSE_PAD,
                total - 2 * CHOOSE_PAD);
    CHECK(worst_sum <= 1.0, "%s %s: item %zu's probabilities sum to 1 within %.3g of the bound",
          label, what, worst_item, worst_sum);
    if (verbose) printf("  %s %-44s sums: worst %.3g of the bound\n", label, what, worst_sum);
    CHECK(single, "%s %s: an item of one choice is not exactly 1", label, what);
    CHECK(repeats, "%s %s: a byte repeated within an item differs between its copies", label, what);
    bool padding = true;
    for (size_t i = 0; i < CHOOSE_PAD; i++)
        padding &= p[i] == SENTINEL && p[total - 1 - i] == SENTINEL;
    CHECK(padding, "%s %s: probabilities outside offsets[0] .. offsets[count] changed", label, what);
    snprintf(name, sizeof(name), "%s: each item alone", what);
    CHECK(same_bits(p, alone, total * sizeof(float)), "%s %s differs from the batch", label, name);
    dev_free(b, d_states); dev_free(b, d_segments); dev_free(b, d_groups); dev_free(b, d_table);
    dev_free(b, d_bias); dev_free(b, d_log_t); dev_free(b, d_offsets); dev_free(b, d_p);
    dev_free(b, d_alone);
    free(tape_offsets); free(data); free(start); free(states); free(table); free(bias); free(p);
    free(alone); free(ref); free(bound);
}

static void test_choice_probabilities(uform_backend_t *b, const char *label) {
    uint8_t all[256];
    byte_permutation(all);
    static const uint8_t one[1] = {'A'}, repeated[4] = {'q', 'q', 'r', 'q'};
    choice_case(b, label, 40, NULL, 0, true, true);
    choice_case(b, label, 40, NULL, 0, false, true);   /* groups NULL: group 0 */
    choice_case(b, label, 23, NULL, 0, true, false);   /* log_temperature NULL: groups unused */
    choice_case(b, label, 23, all, 256, true, true);
    choice_case(b, label, 7, one, 1, false, false);    /* hidden below one 16-lane step */
    choice_case(b, label, 20, repeated, 4, false, true);
    choice_case(b, label, 64, NULL, 0, true, true);
}

/* ==== the objectives: a float64 reference of docs/training.md sections 3, 9, 10 ==== */

enum { REF_NONE, REF_POSITIVE, REF_NEGATIVE };

/* test_objectives.c's reference: the sum of the weights of edges i -> j. */
static double ref_edge(const uform_edges_t *edges, size_t i, size_t j, int *found) {
    double sum = 0;
    *found = 0;
    if (!edges || !edges->offsets) return 0;
    for (size_t e = edges->offsets[i]; e < edges->offsets[i + 1]; e++)
        if (edges->ids[e] == j) {
            *found = 1;
            sum += edges->weights ? (double)edges->weights[e] : 1.0;
        }
    return sum;
}

/* Section 3's precedence: ignore > attract > bag > repel > AMBIENT / NAMED. */
static int ref_relation(const uform_contrastive_config_t *config, const uint32_t *bags,
                        const uform_relations_t *relations, size_t i, size_t j, double *weight) {
    int found;
    *weight = 0;
    if (i == j) return REF_NONE;
    ref_edge(relations ? &relations->ignore : NULL, i, j, &found);
    if (found) return REF_NONE;
    double w = ref_edge(relations ? &relations->attract : NULL, i, j, &found);
    if (found) {
        *weight = w;
        return REF_POSITIVE;
    }
    if (bags && bags[i] == bags[j]) {
        *weight = 1;
        return REF_POSITIVE;
    }
    w = ref_edge(relations ? &relations->repel : NULL, i, j, &found);
    if (found) {
        *weight = w;
        return REF_NEGATIVE;
    }
    if (config->negatives == UFORM_NEGATIVES_AMBIENT) {
        *weight = config->ambient_repulsion_weight;
        return REF_NEGATIVE;
    }
    return REF_NONE;
}

/* One anchor's pair loss over scores s[j] of the candidates with kind[j] and
 * weight[j]; *scored: whether the anchor counts in the average. */
static double ref_pair_loss(uform_pair_loss_form_t form, size_t n, const double *s,
                            const int *kind, const double *weight, bool *scored) {
    double positive_weights = 0, denominator_positive = 0, denominator_negative = 0, loss = 0;
    for (size_t j = 0; j < n; j++) {
        if (kind[j] == REF_POSITIVE) {
            positive_weights += weight[j];
            denominator_positive += exp(s[j]);
        }
        if (kind[j] == REF_NEGATIVE) denominator_negative += weight[j] * exp(s[j]);
    }
    if (form == UFORM_PAIR_LOSS_SIGMOID) {
        *scored = true;
        for (size_t j = 0; j < n; j++) {
            if (kind[j] == REF_POSITIVE) loss += weight[j] * log1p(exp(-s[j]));
            if (kind[j] == REF_NEGATIVE) loss += weight[j] * log1p(exp(s[j]));
        }
        return loss;
    }
    *scored = positive_weights > 0;
    if (!*scored) return 0;
    for (size_t j = 0; j < n; j++) {
        if (kind[j] != REF_POSITIVE) continue;
        double denominator = form == UFORM_PAIR_LOSS_BALANCED
                                 ? denominator_positive + denominator_negative
                                 : exp(s[j]) + denominator_negative;
        loss -= weight[j] / positive_weights * (s[j] - log(denominator));
    }
    return loss;
}

#define OBJECTIVE_ITEMS 10
#define OBJECTIVE_DIMS 16

/* test_objectives.c's fixture: bags, groups and weighted edges with conflicts. */
static const uint32_t fixture_bags[OBJECTIVE_ITEMS] = {0, 0, 0, 1, 1, 2, 3, 3, 4, 5};
static const uint32_t fixture_groups[OBJECTIVE_ITEMS] = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1};
static const size_t attract_offsets[OBJECTIVE_ITEMS + 1] = {0, 1, 1, 1, 2, 3, 3, 5, 5, 5, 6};
static const uint32_t attract_ids[] = {5, 9, 3, 2, 7, 3};
static const float attract_weights[] = {2.5f, 1.5f, 0.0f, 0.7f, 0.0f, 1.5f};
static const size_t repel_offsets[OBJECTIVE_ITEMS + 1] = {0, 1, 2, 3, 4, 4, 5, 6, 6, 7, 7};
static const uint32_t repel_ids[] = {1, 0, 8, 3, 6, 2, 9};
static const float repel_weights[] = {3.0f, 1.0f, 2.0f, 9.0f, 0.25f, 4.0f, 0.0f};
static const size_t ignore_offsets[OBJECTIVE_ITEMS + 1] = {0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 3};
static const uint32_t ignore_ids[] = {2, 6, 3};

static uform_relations_t fixture_relations(void) {
    uform_relations_t r;
    r.attract = (uform_edges_t){attract_offsets, attract_ids, attract_weights};
    r.repel = (uform_edges_t){repel_offsets, repel_ids, repel_weights};
    r.ignore = (uform_edges_t){ignore_offsets, ignore_ids, NULL};
    return r;
}

static const char *form_name(uform_pair_loss_form_t form) {
    return form == UFORM_PAIR_LOSS_BALANCED ? "BALANCED"
           : form == UFORM_PAIR_LOSS_RANKED ? "RANKED"
                                            : "SIGMOID";
}

static void unit_rows(float *e, size_t n, size_t d) {
    for (size_t i = 0; i < n; i++) {
        double norm = 0;
        for (size_t c = 0; c < d; c++) {
            e[i * d + c] = rng_float();
            norm += (double)e[i * d + c] * e[i * d + c];
        }
        for (size_t c = 0; c < d; c++) e[i * d + c] = (float)(e[i * d + c] / sqrt(norm));
    }
}

/* The contrastive term (section 3), the mean over the Matryoshka widths. */
typedef struct {
    const uform_contrastive_config_t *config;
    size_t n, d;
    double *e, *tau, *bias;
    const uint32_t *bags, *groups;
    const uform_relations_t *relations;
} contrastive_ref_t;

static double contrastive_ref_loss(void *context) {
    const contrastive_ref_t *c = context;
    size_t n = c->n, d = c->d;
    double total = 0, *u = xmalloc(n * d, sizeof(double));
    double s[OBJECTIVE_ITEMS], weight[OBJECTIVE_ITEMS];
    int kind[OBJECTIVE_ITEMS];
    for (size_t k = 0; k < c->config->widths_count; k++) {
        size_t w = c->config->widths[k];
        for (size_t i = 0; i < n; i++) {
            double norm = 0;
            for (size_t x = 0; x < w; x++) norm += c->e[i * d + x] * c->e[i * d + x];
            for (size_t x = 0; x < w; x++) u[i * w + x] = c->e[i * d + x] / fmax(sqrt(norm), 1e-12);
        }
        double sum = 0;
        size_t anchors = 0;
        for (size_t i = 0; i < n; i++) {
            size_t g = c->groups ? c->groups[i] : 0;
            double shift = c->config->pair_loss == UFORM_PAIR_LOSS_SIGMOID ? c->bias[g] : 0.0;
            for (size_t j = 0; j < n; j++) {
                kind[j] = ref_relation(c->config, c->bags, c->relations, i, j, &weight[j]);
                double dot = 0;
                for (size_t x = 0; x < w; x++) dot += u[i * w + x] * u[j * w + x];
                s[j] = dot * exp(c->tau[g]) + shift;
            }
            bool scored;
            sum += ref_pair_loss(c->config->pair_loss, n, s, kind, weight, &scored);
            anchors += scored;
        }
        if (anchors) total += sum / (double)anchors;
    }
    free(u);
    return total / (double)c->config->widths_count;
}

/* The objectives' random fixtures are the same for every backend and class,
 * whatever ran before: their checks that a fixture scores something are then
 * about the fixture, not about where the generator happened to be (one draw
 * scored 0.0088). Seeds the generator from `tag`; answers the state to put
 * back after the case. */
static uint64_t fixture_seed(uint64_t tag) {
    uint64_t saved = rng_state;
    rng_state = 0x9e3779b97f4a7c15ull + 0x100000001b3ull * (tag + 1);
    return saved;
}

/* contrastive_loss: the loss (float64 inside, stored in FP32: 1e-6 relative
 * with margin) and every gradient by finite differences, twice (they add),
 * for every pair form, AMBIENT and NAMED, two groups, widths {8, 16}; then a
 * non-finite temperature is refused with nothing written. */
static void contrastive_case(uform_backend_t *b, const char *label, uform_pair_loss_form_t form,
                             uform_negatives_t negatives) {
    char what[96], name[160];
    snprintf(what, sizeof(what), "contrastive_loss %s %s", form_name(form),
             negatives == UFORM_NEGATIVES_AMBIENT ? "AMBIENT" : "NAMED");
    static const size_t widths[2] = {8, 16};
    size_t n = OBJECTIVE_ITEMS, d = OBJECTIVE_DIMS, count = n * d;
    uint64_t saved_rng = fixture_seed((uint64_t)(4 * (int)form + (int)negatives));
    uform_contrastive_config_t config = {widths, 2, negatives, 0.8f, form, 2};
    uform_relations_t relations = fixture_relations();
    float *e = xmalloc(count, sizeof(float));
    unit_rows(e, n, d);
    float tau[2] = {logf(6.0f), logf(9.0f)}, bias[2] = {-1.5f, -0.5f};
    double *ed = to_double(e, count), td[2] = {tau[0], tau[1]}, bd[2] = {bias[0], bias[1]};
    contrastive_ref_t ref = {&config, n, d, ed, td, bd, fixture_bags, fixture_groups, &relations};
    double expected = contrastive_ref_loss(&ref);
    double *numeric = xmalloc(count + 4, sizeof(double));
    for (size_t k = 0; k < count; k++) numeric[k] = central(contrastive_ref_loss, &ref, &ed[k], STEP);
    for (size_t g = 0; g < 2; g++) {
        numeric[count + g] = central(contrastive_ref_loss, &ref, &td[g], STEP);
        numeric[count + 2 + g] = central(contrastive_ref_loss, &ref, &bd[g], STEP);
    }
    float *de0 = base_like(numeric, count, count), dt0[2], db0[2];
    for (size_t g = 0; g < 2; g++) {
        dt0[g] = (float)(0.5 * rng_float() * fmax(fabs(numeric[count + g]), 1e-3));
        db0[g] = (float)(0.5 * rng_float() * fmax(fabs(numeric[count + 2 + g]), 1e-3));
    }
    float *d_e = dev_floats(b, e, count), *d_tau = dev_floats(b, tau, 2), *d_bias = dev_floats(b, bias, 2);
    float *d_loss = dev_floats(b, &(float){-1.0f}, 1), *d_de = dev_floats(b, de0, count);
    float *d_dt = dev_floats(b, dt0, 2), *d_db = dev_floats(b, db0, 2);
    uform_contrastive_batch_t batch = {n, d, d_e, fixture_bags, fixture_groups, &relations};
    float *de[2], dt[2][2], db[2][2], loss[2];
    for (int call = 0; call < 2; call++) {
        uform_status_t status = b->ops->contrastive_loss(b, &config, &batch, d_tau, d_bias, d_loss,
                                                         d_de, d_dt, d_db);
        CHECK(status == UFORM_OK, "%s %s: status %d (%s)", label, what, (int)status,
              uform_last_error());
        sync_check(b, label, what);
        de[call] = fetch(b, d_de, count);
        fetch_into(b, dt[call], d_dt, 2);
        fetch_into(b, db[call], d_db, 2);
        fetch_into(b, &loss[call], d_loss, 1);
    }
    CHECK(fabs(loss[0] - expected) <= 1e-6 * fmax(1.0, fabs(expected)) && loss[1] == loss[0],
          "%s %s: loss %.9g, reference %.9g", label, what, (double)loss[0], expected);
    CHECK(expected > 0.01, "%s %s: the fixture scores something (%g)", label, what, expected);
    for (int call = 0; call < 2; call++) {
        snprintf(name, sizeof(name), "%s: d_embeddings", what);
        increment_check(label, name, de[call], de0, call + 1, numeric, NULL, count, 0.01, 0);
        snprintf(name, sizeof(name), "%s: d_log_inverse_temperature", what);
        increment_check(label, name, dt[call], dt0, call + 1, numeric + count, NULL, 2, 0, 1e-3);
        if (form == UFORM_PAIR_LOSS_SIGMOID) {
            snprintf(name, sizeof(name), "%s: d_bias", what);
            increment_check(label, name, db[call], db0, call + 1, numeric + count + 2, NULL, 2, 0,
                            1e-3);
        }
    }
    /* a non-finite temperature: INVALID_ARGUMENT, nothing written */
    float *d_bad = dev_floats(b, (float[2]){tau[0], NAN}, 2);
    uform_status_t status = b->ops->contrastive_loss(b, &config, &batch, d_bad, d_bias, d_loss, d_de,
                                                     d_dt, d_db);
    CHECK(status == UFORM_INVALID_ARGUMENT, "%s %s: a NaN temperature gave status %d", label, what,
          (int)status);
    float *after = fetch(b, d_de, count), loss_after;
    fetch_into(b, &loss_after, d_loss, 1);
    CHECK(same_bits(after, de[1], count * sizeof(float)) && loss_after == loss[1],
          "%s %s: a refused call wrote its outputs", label, what);
    dev_free(b, d_e); dev_free(b, d_tau); dev_free(b, d_bias); dev_free(b, d_loss); dev_free(b, d_de);
    dev_free(b, d_dt); dev_free(b, d_db); dev_free(b, d_bad);
    free(e); free(ed); free(numeric); free(de0); free(de[0]); free(de[1]); free(after);
    rng_state = saved_rng;
}

/* late_interaction_loss (section 9): MaxSim of query items against document
 * items j != i, s = m exp(tau) (+ b under SIGMOID), section 3's relations and
 * pair forms; the unweighted term, gradients times `weight`, added. */
#define LATE_ITEMS 5
#define LATE_ROWS 13
#define LATE_WIDTH 8
static const size_t late_first[LATE_ITEMS] = {0, 3, 5, 9, 10};
static const size_t late_queries[LATE_ITEMS] = {2, 0, 4, 1, 3};   /* item 0: 2 of its 3 rows */
static const size_t late_documents[LATE_ITEMS] = {3, 2, 4, 0, 3}; /* item 3: no document */
static const uint32_t late_bags[LATE_ITEMS] = {0, 0, 1, 1, 2};

typedef struct {
    const uform_contrastive_config_t *config;
    uform_pair_loss_form_t form;
    double *v, *tau, *bias;
} late_ref_t;

static double late_ref_loss(void *context) {
    const late_ref_t *l = context;
    double sum = 0, s[LATE_ITEMS], weight[LATE_ITEMS];
    int kind[LATE_ITEMS];
    size_t anchors = 0;
    for (size_t i = 0; i < LATE_ITEMS; i++) {
        if (!late_queries[i]) continue;
        for (size_t j = 0; j < LATE_ITEMS; j++) {
            kind[j] = REF_NONE;
            s[j] = 0;
            if (j == i || !late_documents[j]) continue;
            kind[j] = ref_relation(l->config, late_bags, NULL, i, j, &weight[j]);
            double m = 0;
            for (size_t t = 0; t < late_queries[i]; t++) {
                const double *q = l->v + (late_first[i] + t) * LATE_WIDTH;
                double best = -INFINITY;
                for (size_t u = 0; u < late_documents[j]; u++) {
                    const double *dv = l->v + (late_first[j] + u) * LATE_WIDTH;
                    double dot = 0;
                    for (size_t c = 0; c < LATE_WIDTH; c++) dot += q[c] * dv[c];
                    best = fmax(best, dot);
                }
                m += best;
            }
            m /= (double)late_queries[i];
            s[j] = m * exp(*l->tau) + (l->form == UFORM_PAIR_LOSS_SIGMOID ? *l->bias : 0.0);
        }
        bool scored;
        sum += ref_pair_loss(l->form, LATE_ITEMS, s, kind, weight, &scored);
        anchors += scored;
    }
    return anchors ? sum / (double)anchors : 0.0;
}

static void late_interaction_case(uform_backend_t *b, const char *label, uform_pair_loss_form_t form) {
    char what[96], name[160];
    snprintf(what, sizeof(what), "late_interaction_loss %s", form_name(form));
    uint64_t saved_rng = fixture_seed(64 + (uint64_t)form);
    uform_contrastive_config_t config;
    memset(&config, 0, sizeof(config));
    config.negatives = UFORM_NEGATIVES_AMBIENT;
    config.ambient_repulsion_weight = 0.6f;
    config.groups = 1;
    size_t count = LATE_ROWS * LATE_WIDTH;
    float *v = xmalloc(count, sizeof(float));
    unit_rows(v, LATE_ROWS, LATE_WIDTH);
    float tau = 1.2f, bias = form == UFORM_PAIR_LOSS_SIGMOID ? -0.5f : 0.0f, weight = 0.75f;
    double *vd = to_double(v, count), td = tau, bd = bias;
    late_ref_t ref = {&config, form, vd, &td, &bd};
    double expected = late_ref_loss(&ref), *numeric = xmalloc(count + 2, sizeof(double));
    for (size_t k = 0; k < count; k++) numeric[k] = weight * central(late_ref_loss, &ref, &vd[k], STEP);
    numeric[count] = weight * central(late_ref_loss, &ref, &td, STEP);
    numeric[count + 1] = weight * central(late_ref_loss, &ref, &bd, STEP);
    float *dv0 = base_like(numeric, count, count);
    float dt0 = (float)(0.5 * rng_float() * fabs(numeric[count]));
    float db0 = (float)(0.5 * rng_float() * fmax(fabs(numeric[count + 1]), 1e-3));
    float *d_v = dev_floats(b, v, count), *d_dv = dev_floats(b, dv0, count);
    float *d_loss = dev_alloc(b, sizeof(float)), *d_dt = dev_floats(b, &dt0, 1);
    float *d_db = dev_floats(b, &db0, 1);
    uform_late_batch_t batch = {LATE_ITEMS, LATE_WIDTH, d_v, late_first, late_queries,
                                late_documents, late_bags, NULL};
    float *dv[2], dt[2], db[2], loss = 0;
    for (int call = 0; call < 2; call++) {
        uform_status_t status = b->ops->late_interaction_loss(b, &config, form, &batch, tau, bias,
                                                              weight, d_loss, d_dv, d_dt, d_db);
        CHECK(status == UFORM_OK, "%s %s: status %d (%s)", label, what, (int)status,
              uform_last_error());
        sync_check(b, label, what);
        dv[call] = fetch(b, d_dv, count);
        fetch_into(b, &dt[call], d_dt, 1);
        fetch_into(b, &db[call], d_db, 1);
        fetch_into(b, &loss, d_loss, 1);
    }
    /* FP32 dot products of 8 terms (<= 18 u of |q||d| <= 1) times exp(tau) ~ 3.3
     * move each score by ~4e-6 and the loss by as much (its derivative in
     * each score is below 1 in magnitude) */
    CHECK(fabs(loss - expected) <= 1e-5 * fmax(1.0, fabs(expected)), "%s %s: loss %.9g, reference %.9g",
          label, what, (double)loss, expected);
    CHECK(expected > 0.01, "%s %s: the fixture scores something (%g)", label, what, expected);
    for (int call = 0; call < 2; call++) {
        snprintf(name, sizeof(name), "%s: d_vectors", what);
        increment_check(label, name, dv[call], dv0, call + 1, numeric, NULL, count, 0.01, 0);
        snprintf(name, sizeof(name), "%s: d_log_inverse_temperature", what);
        increment_check(label, name, &dt[call], &dt0, call + 1, numeric + count, NULL, 1, 0, 1e-3);
        if (form == UFORM_PAIR_LOSS_SIGMOID) {
            snprintf(name, sizeof(name), "%s: d_bias", what);
            increment_check(label, name, &db[call], &db0, call + 1, numeric + count + 1, NULL, 1, 0,
                            1e-3);
        }
    }
    dev_free(b, d_v); dev_free(b, d_dv); dev_free(b, d_loss); dev_free(b, d_dt); dev_free(b, d_db);
    free(v); free(vd); free(numeric); free(dv0); free(dv[0]); free(dv[1]);
    rng_state = saved_rng;
}

/* choices_loss (section 10): z_c = (h . table[c] + bias[c]) / exp(log_t[g]),
 * loss_sum += sum over items of -sum_c y_c log softmax(z)_c (float64), and the
 * gradients of scale x that sum: d_states written, the rest added. */
#define CHOICE_HIDDEN 20
static const uint8_t choice_bytes[6] = {'A', 'B', 'C', 'y', 'A', 'n'};
static const float choice_targets[6] = {0.7f, 0.2f, 0.1f, 0.0f, 1.0f, 0.5f};
static const size_t choice_offsets[4] = {0, 3, 5, 6}; /* 3 choices, 2 sharing 'A', 1 */
static const uint32_t choice_groups[3] = {0, 1, 1};

typedef struct {
    double *states, *table, *bias, *log_t;
} choices_ref_t;

static double choices_ref_loss(void *context) {
    const choices_ref_t *c = context;
    double total = 0;
    for (size_t item = 0; item < 3; item++) {
        double z[3], top = -INFINITY, sum = 0;
        size_t first = choice_offsets[item], choices = choice_offsets[item + 1] - first;
        for (size_t k = 0; k < choices; k++) {
            double logit = c->bias[choice_bytes[first + k]];
            for (size_t x = 0; x < CHOICE_HIDDEN; x++)
                logit += c->states[item * CHOICE_HIDDEN + x] *
                         c->table[choice_bytes[first + k] * CHOICE_HIDDEN + x];
            z[k] = logit / exp(c->log_t[choice_groups[item]]);
            top = fmax(top, z[k]);
        }
        for (size_t k = 0; k < choices; k++) sum += exp(z[k] - top);
        for (size_t k = 0; k < choices; k++)
            total -= choice_targets[first + k] * (z[k] - top - log(sum));
    }
    return total;
}

static void test_choices_loss(uform_backend_t *b, const char *label) {
    const char *what = "choices_loss";
    char name[96];
    size_t items = 3, table_count = 256 * CHOICE_HIDDEN;
    float *states = random_floats(items * CHOICE_HIDDEN, 1.0f), *table = random_floats(table_count, 0.5f);
    float *bias = random_floats(256, 0.5f), log_t[2] = {0.3f, -0.4f}, scale = 0.6f;
    double *sd = to_double(states, items * CHOICE_HIDDEN), *tbd = to_double(table, table_count);
    double *bsd = to_double(bias, 256), ltd[2] = {log_t[0], log_t[1]};
    choices_ref_t ref = {sd, tbd, bsd, ltd};
    double expected = choices_ref_loss(&ref);
    /* gradients of scale x the loss by central differences: states, the used
     * table rows (others get 0), bias, temperatures */
    double *e_states = xmalloc(items * CHOICE_HIDDEN, sizeof(double));
    double *e_table = xmalloc(table_count, sizeof(double)), *e_bias = xmalloc(256, sizeof(double));
    double e_log_t[2];
    for (size_t k = 0; k < items * CHOICE_HIDDEN; k++)
        e_states[k] = scale * central(choices_ref_loss, &ref, &sd[k], STEP);
    for (size_t c = 0; c < 6; c++) {
        size_t byte = choice_bytes[c];
        if (e_bias[byte] != 0) continue; /* 'A' twice */
        e_bias[byte] = scale * central(choices_ref_loss, &ref, &bsd[byte], STEP);
        for (size_t x = 0; x < CHOICE_HIDDEN; x++)
            e_table[byte * CHOICE_HIDDEN + x] =
                scale * central(choices_ref_loss, &ref, &tbd[byte * CHOICE_HIDDEN + x], STEP);
    }
    for (size_t g = 0; g < 2; g++) e_log_t[g] = scale * central(choices_ref_loss, &ref, &ltd[g], STEP);
    float *ds0 = filled(items * CHOICE_HIDDEN, NAN); /* written, not added */
    float *dt0 = base_like(e_table, table_count, table_count), *db0 = base_like(e_bias, 256, 256);
    float dl0[2] = {(float)(0.5 * e_log_t[0]), (float)(-0.3 * e_log_t[1])};
    float *d_states = dev_floats(b, states, items * CHOICE_HIDDEN), *d_table = dev_floats(b, table, table_count);
    float *d_bias = dev_floats(b, bias, 256), *d_log_t = dev_floats(b, log_t, 2);
    float *d_ds = dev_floats(b, ds0, items * CHOICE_HIDDEN), *d_dt = dev_floats(b, dt0, table_count);
    float *d_db = dev_floats(b, db0, 256), *d_dl = dev_floats(b, dl0, 2);
    uform_choices_batch_t batch = {items, CHOICE_HIDDEN, d_states, choice_bytes, choice_targets,
                                   choice_offsets, choice_groups};
    double loss_sum = 0.25; /* added to */
    float *ds[2], *dtab[2], *dbias[2], dl[2][2];
    for (int call = 0; call < 2; call++) {
        b->ops->choices_loss(b, &batch, d_table, d_bias, d_log_t, scale, &loss_sum, d_ds, d_dt, d_db,
                             d_dl);
        sync_check(b, label, what);
        ds[call] = fetch(b, d_ds, items * CHOICE_HIDDEN);
        dtab[call] = fetch(b, d_dt, table_count);
        dbias[call] = fetch(b, d_db, 256);
        fetch_into(b, dl[call], d_dl, 2);
    }
    /* float64 inside: 1e-9 relative covers the FP32 inputs' exact conversion */
    CHECK(fabs(loss_sum - (0.25 + 2 * expected)) <= 1e-9 * (0.25 + 2 * expected),
          "%s %s: loss_sum %.12g after two calls, expected %.12g", label, what, loss_sum,
          0.25 + 2 * expected);
    for (int call = 0; call < 2; call++) {
        snprintf(name, sizeof(name), "%s: d_states (written)", what);
        increment_check(label, name, ds[call], NULL, 1, e_states, NULL, items * CHOICE_HIDDEN, 0.01, 0);
        snprintf(name, sizeof(name), "%s: d_bytes_table", what);
        increment_check(label, name, dtab[call], dt0, call + 1, e_table, NULL, table_count, 0.01, 0);
        snprintf(name, sizeof(name), "%s: d_bytes_bias", what);
        increment_check(label, name, dbias[call], db0, call + 1, e_bias, NULL, 256, 0.01, 0);
        snprintf(name, sizeof(name), "%s: d_log_temperature", what);
        increment_check(label, name, dl[call], dl0, call + 1, e_log_t, NULL, 2, 0.01, 0);
    }
    dev_free(b, d_states); dev_free(b, d_table); dev_free(b, d_bias); dev_free(b, d_log_t);
    dev_free(b, d_ds); dev_free(b, d_dt); dev_free(b, d_db); dev_free(b, d_dl);
    free(states); free(table); free(bias); free(sd); free(tbd); free(bsd); free(e_states);
    free(e_table); free(e_bias); free(ds0); free(dt0); free(db0);
    for (int call = 0; call < 2; call++) {
        free(ds[call]);
        free(dtab[call]);
        free(dbias[call]);
    }
}

static void test_objectives(uform_backend_t *b, const char *label) {
    static const uform_pair_loss_form_t forms[3] = {UFORM_PAIR_LOSS_BALANCED, UFORM_PAIR_LOSS_RANKED,
                                                    UFORM_PAIR_LOSS_SIGMOID};
    for (size_t f = 0; f < 3; f++) {
        contrastive_case(b, label, forms[f], UFORM_NEGATIVES_AMBIENT);
        contrastive_case(b, label, forms[f], UFORM_NEGATIVES_NAMED);
        late_interaction_case(b, label, forms[f]);
    }
    test_choices_loss(b, label);
}

/* ==== sum of squares ========================================================= */

static void test_sum_squares(uform_backend_t *b, const char *label) {
    size_t n = 10001;
    float *x = random_floats(n, 1.0f);
    x[17] = 1e20f; /* its square overflows FP32: the sum must be float64 */
    x[5000] = -3e19f;
    float *d_x = dev_floats(b, x, n);
    double got = b->ops->sum_squares(b, d_x, n), empty = b->ops->sum_squares(b, d_x, 0);
    sync_check(b, label, "sum_squares");
    double expected = 0, exact = 0;
    for (size_t i = 0; i < n; i++) expected += (double)x[i] * x[i]; /* index order */
    for (size_t i = 0; i < n; i++) exact += (double)x[i] * x[i] / 1e40; /* another order, scaled */
    exact *= 1e40;
    /* float64 accumulation in any order: n 2^-53 relative; in index order (the
     * spec) the same bits as the loop above */
    CHECK(isfinite(got) && fabs(got - exact) <= (double)n * U64 * 2 * exact,
          "%s sum_squares %.17g, expected %.17g", label, got, exact);
    CHECK(got == expected, "%s sum_squares %.17g is not the index-order float64 sum %.17g", label,
          got, expected);
    CHECK(empty == 0.0, "%s sum_squares of nothing is %g", label, empty);
    dev_free(b, d_x);
    free(x);
}

/* ==== AdamW ================================================================== */

/* torch.optim.AdamW in float64, with backend.h's constants (their FP32 values):
 * p *= 1 - lr wd (decayed only); m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
 * p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps), g = gradient * scale. */
static void adamw_ref(double *p, double *m, double *v, double g, bool decay, uint64_t step,
                      double lr, double *denominator, double *step_size) {
    double b1 = UFORM_ADAM_BETA1, b2 = UFORM_ADAM_BETA2, eps = UFORM_ADAM_EPSILON;
    if (decay) *p *= 1 - lr * (double)UFORM_WEIGHT_DECAY;
    *m = b1 * *m + (1 - b1) * g;
    *v = b2 * *v + (1 - b2) * g * g;
    double c1 = 1 - pow(b1, (double)step), c2 = 1 - pow(b2, (double)step);
    *denominator = sqrt(*v) / sqrt(c2) + eps;
    *step_size = lr / c1;
    *p -= *step_size * *m / *denominator;
}

typedef struct {
    float *p, *g, *m, *v;
    uint8_t *decay;
    size_t count;
} adam_state_t;

static adam_state_t adam_state(size_t count, bool fresh) {
    adam_state_t s = {random_floats(count, 1.0f), random_floats(count, 0.1f),
                      random_floats(count, 0.01f), xmalloc(count, sizeof(float)),
                      xmalloc(count, 1), count};
    for (size_t i = 0; i < count; i++) {
        float t = rng_float();
        s.v[i] = fresh ? 0.0f : 1e-6f + 1e-4f * t * t;
        if (fresh) s.m[i] = 0.0f;
        s.decay[i] = rng_below(3) != 0;
        if (i % 97 == 5) s.g[i] = 0.0f;
    }
    return s;
}

static void adam_state_free(adam_state_t *s) {
    free(s->p); free(s->g); free(s->m); free(s->v); free(s->decay);
}

typedef struct {
    float *p, *g, *m, *v;
    uint8_t *decay;
} adam_device_t;

static adam_device_t adam_upload(uform_backend_t *b, const adam_state_t *s) {
    adam_device_t d = {dev_floats(b, s->p, s->count), dev_floats(b, s->g, s->count),
                       dev_floats(b, s->m, s->count), dev_floats(b, s->v, s->count),
                       dev_upload(b, s->decay, s->count)};
    return d;
}

static void adam_device_free(uform_backend_t *b, adam_device_t *d) {
    dev_free(b, d->p); dev_free(b, d->g); dev_free(b, d->m); dev_free(b, d->v); dev_free(b, d->decay);
}

static void adamw_case(uform_backend_t *b, const char *label, uint64_t step, float lr,
                       float gradient_scale) {
    char what[96], name[160];
    snprintf(what, sizeof(what), "adamw step %llu lr %g scale %g", (unsigned long long)step, lr,
             gradient_scale);
    size_t n = 5000; /* over the 4096-element grain of the CPU's loop */
    adam_state_t s = adam_state(n, step == 1);
    adam_device_t d = adam_upload(b, &s);
    size_t found = b->ops->adamw_first_non_finite(b, d.p, d.g, gradient_scale, d.m, d.v, d.decay,
                                                  n, step, lr);
    sync_check(b, label, what);
    float *p1 = fetch(b, d.p, n), *m1 = fetch(b, d.m, n), *v1 = fetch(b, d.v, n);
    CHECK(found == SIZE_MAX, "%s %s: first_non_finite found %zu in a finite update", label, what,
          found);
    CHECK(same_bits(p1, s.p, n * 4) && same_bits(m1, s.m, n * 4) && same_bits(v1, s.v, n * 4),
          "%s %s: first_non_finite changed the state", label, what);
    b->ops->adamw(b, d.p, d.g, gradient_scale, d.m, d.v, d.decay, n, step, lr);
    sync_check(b, label, what);
    fetch_into(b, p1, d.p, n);
    fetch_into(b, m1, d.m, n);
    fetch_into(b, v1, d.v, n);
    double *rp = xmalloc(n, sizeof(double)), *rm = xmalloc(n, sizeof(double));
    double *rv = xmalloc(n, sizeof(double)), *bp = xmalloc(n, sizeof(double));
    double *bm = xmalloc(n, sizeof(double)), *bv = xmalloc(n, sizeof(double));
    for (size_t i = 0; i < n; i++) {
        double g = (double)s.g[i] * gradient_scale, denominator, step_size;
        rp[i] = s.p[i];
        rm[i] = s.m[i];
        rv[i] = s.v[i];
        adamw_ref(&rp[i], &rm[i], &rv[i], g, s.decay[i], step, lr, &denominator, &step_size);
        /* FP32: g (u), the decay factor and product (3 u of |p|), m = m0 + (g -
         * m0)(1 - b1) (3 u of |m0| + |g|), v (4 u of v0 + g^2), the denominator
         * (sqrt, division, eps, the FP32 sqrt(c2): 4 u), the quotient and the
         * FP32 step size (2 u), the final subtraction (u |p'|): 16 u covers
         * each term with margin */
        double m_error = 4 * U32 * (fabs(s.m[i]) + fabs(g));
        bm[i] = m_error + 1e-45;
        bv[i] = 6 * U32 * ((double)s.v[i] + g * g) + 1e-45;
        bp[i] = 16 * U32 * (fabs(s.p[i]) + fabs(rp[i]) + step_size * fabs(rm[i]) / denominator) +
                step_size * m_error / denominator;
    }
    snprintf(name, sizeof(name), "%s: parameters", what);
    bound_check(label, name, p1, rp, bp, n);
    snprintf(name, sizeof(name), "%s: first moment", what);
    bound_check(label, name, m1, rm, bm, n);
    snprintf(name, sizeof(name), "%s: second moment", what);
    bound_check(label, name, v1, rv, bv, n);
    adam_device_free(b, &d);
    adam_state_free(&s);
    free(p1); free(m1); free(v1); free(rp); free(rm); free(rv); free(bp); free(bm); free(bv);
}

/* adamw_first_non_finite: the lowest index the update would make non-finite,
 * read-only; and adamw then indeed produces a non-finite value there first. */
static void adamw_overflow_case(uform_backend_t *b, const char *label, const char *what,
                                adam_state_t *s, uint64_t step, float lr, size_t expected) {
    adam_device_t d = adam_upload(b, s);
    size_t n = s->count;
    size_t found = b->ops->adamw_first_non_finite(b, d.p, d.g, 1.0f, d.m, d.v, d.decay, n, step, lr);
    sync_check(b, label, what);
    float *p1 = fetch(b, d.p, n), *m1 = fetch(b, d.m, n), *v1 = fetch(b, d.v, n);
    CHECK(found == expected, "%s adamw_first_non_finite %s: %zu, expected %zu", label, what, found,
          expected);
    CHECK(same_bits(p1, s->p, n * 4) && same_bits(m1, s->m, n * 4) && same_bits(v1, s->v, n * 4),
          "%s adamw_first_non_finite %s: changed the state", label, what);
    b->ops->adamw(b, d.p, d.g, 1.0f, d.m, d.v, d.decay, n, step, lr);
    sync_check(b, label, what);
    fetch_into(b, p1, d.p, n);
    fetch_into(b, m1, d.m, n);
    fetch_into(b, v1, d.v, n);
    size_t first = SIZE_MAX;
    for (size_t i = 0; i < n && first == SIZE_MAX; i++)
        if (!isfinite(p1[i]) || !isfinite(m1[i]) || !isfinite(v1[i])) first = i;
    CHECK(first == expected, "%s adamw %s: first non-finite at %zu, expected %zu", label, what,
          first, expected);
    adam_device_free(b, &d);
    free(p1); free(m1); free(v1);
}

static void test_adamw(uform_backend_t *b, const char *label) {
    adamw_case(b, label, 1, 1e-3f, 1.0f);
    adamw_case(b, label, 3, 1e-3f, 0.7f);
    adamw_case(b, label, 1000, 0.1f, 0.25f);

    /* a huge learning rate: finite for every element whose m / sqrt(v) is ~1,
     * overflowing where the moment is large and v is 0 (m / eps ~ 1e18) */
    size_t n = 6000;
    adam_state_t s = adam_state(n, true);
    float lr = 1e30f;
    adamw_overflow_case(b, label, "huge learning rate, nothing overflows", &s, 1, lr, SIZE_MAX);
    s.m[4500] = 1e10f;
    s.g[4500] = 0.0f;
    adamw_overflow_case(b, label, "huge learning rate, one element", &s, 1, lr, 4500);
    s.m[700] = -1e10f;
    s.g[700] = 0.0f;
    adamw_overflow_case(b, label, "huge learning rate, two elements", &s, 1, lr, 700);
    adam_state_free(&s);
    /* an ordinary step whose gradient squares to infinity, and a NaN gradient */
    s = adam_state(n, false);
    s.g[5999] = 1e30f;
    adamw_overflow_case(b, label, "gradient squared overflows", &s, 5, 1e-3f, 5999);
    s.g[3] = NAN;
    adamw_overflow_case(b, label, "NaN gradient", &s, 5, 1e-3f, 3);
    adam_state_free(&s);
}

/* ==== the whole table ========================================================= */

static void test_backend(uform_backend_t *b, const char *label) {
    int before = failed;
    test_memory(b, label);
    test_gemm(b, label);
    test_linear(b, label);
    test_linear_backward(b, label);
    test_layer_norm(b, label);
    test_gelu(b, label);
    test_linear_gelu(b, label);
    test_rope(b, label);
    test_embedding(b, label);
    test_attention(b, label);
    test_mean_pool(b, label);
    test_normalize(b, label);
    test_cross_entropy(b, label);
    test_gather_scatter(b, label);
    test_scatter_sum_rows(b, label);
    test_reconstruction_loss(b, label);
    test_maxsim(b, label);
    test_choice_probabilities(b, label);
    test_objectives(b, label);
    test_sum_squares(b, label);
    test_adamw(b, label);
    printf("%s: %s\n", label, failed == before ? "ok" : "FAILED");
}

/* ==== determinism across two backends (1 and 2 threads) ======================= */

/* The results of a few operations on one backend, fetched to the host. */
typedef struct {
    float *buffers[24];
    size_t sizes[24];
    const char *names[24];
    size_t count;
} results_t;

static void keep(results_t *r, uform_backend_t *b, const char *name, const float *device, size_t n) {
    r->names[r->count] = name;
    r->sizes[r->count] = n;
    r->buffers[r->count++] = fetch(b, device, n);
}

/* Inputs shared by both runs (host), sized to span several tasks of each
 * operation: 150 rows (> 64 per task), a segment of 150, 10000 elements. */
typedef struct {
    size_t rows, n, k, width, hidden, elements;
    float *x, *wf, *bias, *dy, *ln_x, *ln_w, *ln_b, *ln_dy, *qkv, *dout, *gelu_x, *gelu_dy;
    uint16_t *bits;
    uform_segment_t segments[3];
    adam_state_t adam;
    float *embeddings;                         /* [40, 24] unit rows */
    uint32_t bags[40], groups[40];
    size_t token_offsets[41], single_offsets[41]; /* items of 0..2 rows; of one row */
    uint8_t choice_bytes[40 * 60];             /* choice_probabilities: 40 entries of 1..60 */
    size_t choice_tape[41], choice_offsets[41];
    uform_segment_t choice_segments[40];       /* 1..8 rows of x as [351, 128] states */
} shared_inputs_t;

static results_t run_some(uform_backend_t *b, const char *label, const shared_inputs_t *in) {
    results_t r = {0};
    size_t rows = in->rows, n = in->n, k = in->k, width = in->width, hidden = in->hidden;
    packed_weight_t holder;
    float *d_x = dev_floats(b, in->x, rows * k), *d_w = dev_floats(b, in->wf, n * k);
    float *d_bias = dev_floats(b, in->bias, n), *d_y = dev_alloc(b, rows * n * sizeof(float));
    float *d_y2 = dev_alloc(b, rows * n * sizeof(float)), *d_dy = dev_floats(b, in->dy, rows * n);
    float *d_dw = dev_alloc(b, n * k * sizeof(float)), *d_db = dev_alloc(b, n * sizeof(float));
    float *d_dx = dev_alloc(b, rows * k * sizeof(float));
    b->ops->zero(b, d_dw, n * k * sizeof(float));
    b->ops->zero(b, d_db, n * sizeof(float));
    if (pack_weight(b, in->bits, n, k, &holder)) {
        b->ops->linear(b, &holder.weight, d_x, k, rows, d_bias, false, d_y, n);
        sync_check(b, label, "determinism: linear packed");
        keep(&r, b, "linear packed", d_y, rows * n);
        packed_weight_free(b, &holder);
    }
    uform_weight_t dense = {NULL, d_w, n, k};
    b->ops->linear(b, &dense, d_x, k, rows, d_bias, false, d_y2, n);
    b->ops->linear_backward(b, &dense, d_x, d_dy, rows, d_dw, d_db, d_dx, false);
    sync_check(b, label, "determinism: linear dense");
    keep(&r, b, "linear dense", d_y2, rows * n);
    keep(&r, b, "linear_backward dweight", d_dw, n * k);
    keep(&r, b, "linear_backward dbias", d_db, n);
    keep(&r, b, "linear_backward dx", d_dx, rows * k);

    float *d_lx = dev_floats(b, in->ln_x, rows * width), *d_lw = dev_floats(b, in->ln_w, width);
    float *d_lb = dev_floats(b, in->ln_b, width), *d_ldy = dev_floats(b, in->ln_dy, rows * width);
    float *d_ly = dev_alloc(b, rows * width * sizeof(float));
    float *d_mean = dev_alloc(b, rows * sizeof(float)), *d_rstd = dev_alloc(b, rows * sizeof(float));
    float *d_ldx = dev_alloc(b, rows * width * sizeof(float));
    float *d_ldw = dev_alloc(b, width * sizeof(float)), *d_ldb = dev_alloc(b, width * sizeof(float));
    b->ops->zero(b, d_ldx, rows * width * sizeof(float));
    b->ops->zero(b, d_ldw, width * sizeof(float));
    b->ops->zero(b, d_ldb, width * sizeof(float));
    b->ops->layer_norm_forward(b, d_lx, rows, width, d_lw, d_lb, d_ly, d_mean, d_rstd);
    b->ops->layer_norm_backward(b, d_ldy, d_lx, d_lw, d_mean, d_rstd, rows, width, d_ldx, d_ldw, d_ldb);
    sync_check(b, label, "determinism: layer norm");
    keep(&r, b, "layer_norm y", d_ly, rows * width);
    keep(&r, b, "layer_norm dx", d_ldx, rows * width);
    keep(&r, b, "layer_norm dweight", d_ldw, width);

    size_t qrows = in->segments[2].begin + in->segments[2].length, heads = hidden / 64;
    float *d_qkv = dev_floats(b, in->qkv, qrows * 3 * hidden);
    float *d_dout = dev_floats(b, in->dout, qrows * hidden);
    uform_segment_t *d_seg = dev_upload(b, in->segments, sizeof(in->segments));
    float *d_inf = dev_alloc(b, qrows * hidden * sizeof(float));
    float *d_out = dev_alloc(b, qrows * hidden * sizeof(float));
    float *d_lse = dev_alloc(b, qrows * heads * sizeof(float));
    float *d_dqkv = dev_alloc(b, qrows * 3 * hidden * sizeof(float));
    b->ops->zero(b, d_dqkv, qrows * 3 * hidden * sizeof(float));
    size_t bytes = b->ops->attention_scratch_bytes(b, hidden, 3, 150);
    void *d_scratch = bytes ? dev_alloc(b, bytes) : NULL;
    b->ops->attention_forward(b, d_qkv, hidden, d_seg, 3, qrows, 150, d_inf, NULL, d_scratch);
    b->ops->attention_forward(b, d_qkv, hidden, d_seg, 3, qrows, 150, d_out, d_lse, NULL);
    b->ops->attention_backward(b, d_qkv, d_out, d_dout, d_lse, hidden, d_seg, 3, qrows, 150, d_dqkv);
    sync_check(b, label, "determinism: attention");
    keep(&r, b, "attention inference", d_inf, qrows * hidden);
    keep(&r, b, "attention training out", d_out, qrows * hidden);
    keep(&r, b, "attention logsumexp", d_lse, qrows * heads);
    keep(&r, b, "attention dqkv", d_dqkv, qrows * 3 * hidden);

    size_t e = in->elements;
    float *d_gx = dev_floats(b, in->gelu_x, e), *d_gdy = dev_floats(b, in->gelu_dy, e);
    float *d_gy = dev_alloc(b, e * sizeof(float)), *d_gdx = dev_alloc(b, e * sizeof(float));
    b->ops->zero(b, d_gdx, e * sizeof(float));
    b->ops->gelu_forward(b, d_gx, e, d_gy);
    b->ops->gelu_backward(b, d_gx, d_gdy, e, d_gdx);
    adam_device_t adam = adam_upload(b, &in->adam);
    b->ops->adamw(b, adam.p, adam.g, 0.5f, adam.m, adam.v, adam.decay, in->adam.count, 7, 1e-3f);
    sync_check(b, label, "determinism: gelu, adamw");
    keep(&r, b, "gelu y", d_gy, e);
    keep(&r, b, "gelu dx", d_gdx, e);
    keep(&r, b, "adamw parameters", adam.p, in->adam.count);

    /* contrastive_loss over 40 items (bags of 3, two groups, widths {24, 8}) and
     * maxsim of 40 query items against 40 documents on the same rows */
    static const size_t widths[2] = {24, 8};
    uform_contrastive_config_t config = {widths, 2, UFORM_NEGATIVES_AMBIENT, 1.0f,
                                         UFORM_PAIR_LOSS_BALANCED, 2};
    float *d_e = dev_floats(b, in->embeddings, 40 * 24), *d_tau = dev_floats(b, (float[2]){2.0f, 2.3f}, 2);
    float *d_loss = dev_alloc(b, sizeof(float)), *d_de = dev_alloc(b, 40 * 24 * sizeof(float));
    float *d_dt = dev_alloc(b, 2 * sizeof(float)), *d_scores = dev_alloc(b, 40 * 40 * sizeof(float));
    b->ops->zero(b, d_de, 40 * 24 * sizeof(float));
    b->ops->zero(b, d_dt, 2 * sizeof(float));
    uform_contrastive_batch_t batch = {40, 24, d_e, in->bags, in->groups, NULL};
    uform_status_t status = b->ops->contrastive_loss(b, &config, &batch, d_tau, NULL, d_loss, d_de,
                                                     d_dt, NULL);
    CHECK(status == UFORM_OK, "%s determinism: contrastive_loss %s", label, uform_last_error());
    uform_token_rows_t rows_side = {d_e, in->token_offsets, 40, 24, 24 * sizeof(float), UFORM_SCALAR_F32};
    uform_token_rows_t single = {d_e, in->single_offsets, 40, 24, 24 * sizeof(float), UFORM_SCALAR_F32};
    status = b->ops->maxsim(b, &rows_side, &single, d_scores);
    CHECK(status == UFORM_OK, "%s determinism: maxsim %s", label, uform_last_error());
    sync_check(b, label, "determinism: objectives");
    keep(&r, b, "contrastive_loss loss", d_loss, 1);
    keep(&r, b, "contrastive_loss d_embeddings", d_de, 40 * 24);
    keep(&r, b, "contrastive_loss d_log_inverse_temperature", d_dt, 2);
    keep(&r, b, "maxsim", d_scores, 40 * 40);
    dev_free(b, d_e); dev_free(b, d_tau); dev_free(b, d_loss); dev_free(b, d_de); dev_free(b, d_dt);
    dev_free(b, d_scores);

    /* choice_probabilities over 40 items (3 tasks of 16): states from x, the
     * table from qkv [256, 128], the bias from gelu_x, two groups */
    uform_tape_t tape = {in->choice_bytes, in->choice_tape[40], in->choice_tape, 40};
    size_t choices = in->choice_offsets[40];
    float *d_cs = dev_floats(b, in->x, 351 * hidden), *d_ct = dev_floats(b, in->qkv, 256 * hidden);
    float *d_cb = dev_floats(b, in->gelu_x, 256), *d_clt = dev_floats(b, (float[2]){0.2f, -0.3f}, 2);
    uform_segment_t *d_cseg = dev_upload(b, in->choice_segments, sizeof(in->choice_segments));
    uint32_t *d_cg = dev_upload(b, in->groups, sizeof(in->groups));
    size_t *d_co = dev_upload(b, in->choice_offsets, sizeof(in->choice_offsets));
    float *d_cp = dev_alloc(b, choices * sizeof(float));
    b->ops->choice_probabilities(b, d_cs, hidden, d_cseg, 40, &tape, 0, d_cg, d_ct, d_cb, d_clt,
                                 d_co, d_cp);
    sync_check(b, label, "determinism: choice_probabilities");
    keep(&r, b, "choice_probabilities", d_cp, choices);
    dev_free(b, d_cs); dev_free(b, d_ct); dev_free(b, d_cb); dev_free(b, d_clt); dev_free(b, d_cseg);
    dev_free(b, d_cg); dev_free(b, d_co); dev_free(b, d_cp);

    dev_free(b, d_x); dev_free(b, d_w); dev_free(b, d_bias); dev_free(b, d_y); dev_free(b, d_y2);
    dev_free(b, d_dy); dev_free(b, d_dw); dev_free(b, d_db); dev_free(b, d_dx); dev_free(b, d_lx);
    dev_free(b, d_lw); dev_free(b, d_lb); dev_free(b, d_ldy); dev_free(b, d_ly);
    dev_free(b, d_mean); dev_free(b, d_rstd); dev_free(b, d_ldx); dev_free(b, d_ldw);
    dev_free(b, d_ldb); dev_free(b, d_qkv); dev_free(b, d_dout); dev_free(b, d_seg);
    dev_free(b, d_inf); dev_free(b, d_out); dev_free(b, d_lse); dev_free(b, d_dqkv);
    dev_free(b, d_scratch); dev_free(b, d_gx); dev_free(b, d_gdy); dev_free(b, d_gy);
    dev_free(b, d_gdx);
    adam_device_free(b, &adam);
    return r;
}

/* The same inputs on two backends of one kind (the CPU: 1 and 2 threads) give
 * the same bits. */
static void test_determinism(uform_backend_t *one, uform_backend_t *two, const char *label) {
    shared_inputs_t in = {.rows = 150, .n = 70, .k = 300, .width = 100, .hidden = 128,
                          .elements = 10000};
    in.x = random_floats(in.rows * in.k, 1.0f);
    in.wf = random_floats(in.n * in.k, 1.0f);
    in.bits = xmalloc(in.n * in.k, sizeof(uint16_t));
    for (size_t i = 0; i < in.n * in.k; i++) in.bits[i] = uform_f32_to_bf16(in.wf[i]);
    in.bias = random_floats(in.n, 1.0f);
    in.dy = random_floats(in.rows * in.n, 1.0f);
    in.ln_x = random_floats(in.rows * in.width, 2.0f);
    in.ln_w = random_floats(in.width, 1.0f);
    in.ln_b = random_floats(in.width, 1.0f);
    in.ln_dy = random_floats(in.rows * in.width, 1.0f);
    in.segments[0] = (uform_segment_t){0, 150, 1};
    in.segments[1] = (uform_segment_t){150, 0, 1};
    in.segments[2] = (uform_segment_t){150, 40, 1};
    in.qkv = random_floats(190 * 3 * in.hidden, 1.0f);
    in.dout = random_floats(190 * in.hidden, 1.0f);
    in.gelu_x = random_floats(in.elements, 5.0f);
    in.gelu_dy = random_floats(in.elements, 1.0f);
    in.adam = adam_state(in.elements, false);
    in.embeddings = xmalloc(40 * 24, sizeof(float));
    unit_rows(in.embeddings, 40, 24);
    for (size_t i = 0; i < 40; i++) {
        in.bags[i] = (uint32_t)(i / 3);
        in.groups[i] = (uint32_t)(i % 2);
        in.single_offsets[i] = i;
        in.token_offsets[i] = i < 20 ? 2 * i : 40; /* 20 items of 2 rows, then empty ones */
    }
    in.single_offsets[40] = 40;
    in.token_offsets[40] = 40;
    for (size_t i = 0, row = 0; i < 40; i++) {
        size_t n = 1 + (i * 29) % 60; /* distinct bytes: 17 is odd */
        for (size_t j = 0; j < n; j++)
            in.choice_bytes[in.choice_tape[i] + j] = (uint8_t)((i * 31 + j * 17) % 256);
        in.choice_tape[i + 1] = in.choice_tape[i] + n;
        in.choice_offsets[i + 1] = in.choice_offsets[i] + n;
        in.choice_segments[i] = (uform_segment_t){row, 1 + i % 8, 1};
        row += 1 + i % 8;
    }
    results_t a = run_some(one, label, &in), b = run_some(two, label, &in);
    CHECK(a.count == b.count, "%s determinism: %zu results against %zu", label, a.count, b.count);
    for (size_t i = 0; i < a.count && i < b.count; i++) {
        CHECK(same_bits(a.buffers[i], b.buffers[i], a.sizes[i] * sizeof(float)),
              "%s determinism: %s differs between the two executors", label, a.names[i]);
        free(a.buffers[i]);
        free(b.buffers[i]);
    }
    free(in.x); free(in.wf); free(in.bits); free(in.bias); free(in.dy); free(in.ln_x);
    free(in.ln_w); free(in.ln_b); free(in.ln_dy); free(in.qkv); free(in.dout); free(in.gelu_x);
    free(in.gelu_dy); free(in.embeddings);
    adam_state_free(&in.adam);
}

/* Arguments (class names) test only those classes (make test-arm). */
int main(int argc, char **argv) {
    verbose = getenv("UFORM_TEST_VERBOSE") != NULL;
    uform_executor_t *executors[2];
    for (size_t t = 0; t < 2; t++)
        if (uform_executor_for_ram(t + 1, NULL, 0, &executors[t]) != UFORM_OK) {
            printf("executor: %s\n", uform_last_error());
            return 2;
        }
    for (int c = UFORM_CPU_CLASS_SERIAL; c <= UFORM_CPU_CLASS_AMX; c++) {
        uform_cpu_class_t cpu_class = (uform_cpu_class_t)c;
        const char *name = uform_cpu_class_name(cpu_class);
        bool wanted = argc < 2;
        for (int a = 1; a < argc; a++) wanted |= strcmp(argv[a], name) == 0;
        if (!wanted) continue;
        if (!uform_cpu_kernels_for(cpu_class)) {
            printf("skip %s: this build has no kernels for it\n", name);
            continue;
        }
        if (!uform_cpu_class_supported(cpu_class)) {
            printf("skip %s: this CPU or OS does not support it\n", name);
            continue;
        }
        uform_backend_t backends[2];
        for (size_t t = 0; t < 2; t++) {
            char label[64];
            snprintf(label, sizeof(label), "cpu/%s/%zu thread%s", name, t + 1, t ? "s" : "");
            backends[t] = uform_cpu_backend(cpu_class, executors[t]);
            test_backend(&backends[t], label);
        }
        char label[64];
        snprintf(label, sizeof(label), "cpu/%s", name);
        int before = failed;
        test_determinism(&backends[0], &backends[1], label);
        printf("%s 1 vs 2 threads: %s\n", label, failed == before ? "ok" : "FAILED");
    }
    for (size_t t = 0; t < 2; t++) uform_executor_free(executors[t]);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
