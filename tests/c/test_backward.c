/* test_backward.c: the CPU backend's forward/backward pairs (backend/cpu/rows.h:
 * row-wise operations and attention, called directly) against float64
 * references written here; tests/c/test_ops.c checks them again through the
 * backend table.
 *
 * Build and run (from the repository root, under ASan/UBSan):
 *   make c/build/tests/test_backward && c/build/tests/test_backward
 *
 * For each operation:
 * - the FP32 forward against a float64 reference (straight loops, libm exp/tanh),
 *   and the attention forward against the inference kernel of the portable
 *   classes (cpu/attention.c), bit for bit;
 * - the float64 finite-difference check of its backward: for a fixed random g,
 *   L = sum(y * g) is evaluated by the float64 reference, the derivative
 *   dL/dx_i by central differences with step h = 1e-6 (relative to the input's
 *   scale where inputs are tiny), and compared with the FP32 backward given
 *   dy = g. Large tensors are checked on random samples of their elements (and
 *   every element of the short segments);
 * - the thread contract: executors of 1 and 3 threads give the same bits;
 * - accumulation: a second backward into the same outputs doubles them (bit
 *   for bit, since every backward adds one locally summed value per element;
 *   the embedding table with repeated ids is the exception, added in place).
 *
 * Tolerances.
 * - Finite differences: truncation error h^2 |f'''| / 6 ~ 1e-13 and rounding
 *   error ~ 1e-16 |L| / h ~ 1e-10 |L| (|L| < 1e3 here), both far below the FP32
 *   errors being measured.
 * - Gradients: FP32 (unit roundoff u = 2^-24 ~ 6e-8) with chains of at most a
 *   few hundred roundings (the longest: attention dk/dv summed over 64 queries
 *   of products of 3-4 rounded factors, exp at ~2 ulp), so the error of a
 *   component is below ~300 u ~ 2e-5 times the magnitude of the terms summed.
 *   Those terms are of the size of the tensor's larger components, not of the
 *   component itself (cancellation: layer norm's dx, the softmax's ds), so the
 *   check is |a_i - fd_i| <= 1e-4 * max(|fd_i|, 0.01 * max_j |fd_j|): 1e-4
 *   relative for every component at least 1% of the largest, and an absolute
 *   1e-6 * max_j |fd_j| below that (attention and cross-entropy raise that
 *   floor, for the reasons given where they are checked).
 * - Forwards: stated next to each check; each is a few hundred u at most of
 *   the magnitudes involved, for the same reason.
 */
#include "backend/cpu/rows.h"
#include "backend/cpu/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define UFORM_TEST_SEED 0x2545f4914f6cdd1dull
#include "check.h"

/* Uniform in [-1, 1). */
static float rng_float(void) { return (float)((double)(rng_next() >> 11) * 0x1p-52 - 1.0); }
static size_t rng_below(size_t n) { return (size_t)(rng_next() % n); }

static void *xmalloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size);
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
    memcpy(y, x, n * sizeof(float));
    return y;
}

static double *to_double(const float *x, size_t n) {
    double *y = xmalloc(n, sizeof(double));
    for (size_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

static bool same_bits(const float *a, const float *b, size_t n) {
    return memcmp(a, b, n * sizeof(float)) == 0;
}

/* a == 2 * b exactly, element by element. */
static bool doubled(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != 2.0f * b[i]) return false;
    return true;
}

static uform_executor_t *executors[2]; /* 1 thread, 3 threads */

/* ---- gradient comparison --------------------------------------------------- */

/* Pairs (analytic FP32, float64 finite difference) of one tensor. */
typedef struct {
    size_t count, capacity;
    double *analytic, *numeric;
} gradient_t;

static void gradient_add(gradient_t *g, double analytic, double numeric) {
    if (g->count == g->capacity) {
        g->capacity = g->capacity ? 2 * g->capacity : 256;
        g->analytic = realloc(g->analytic, g->capacity * sizeof(double));
        g->numeric = realloc(g->numeric, g->capacity * sizeof(double));
        if (!g->analytic || !g->numeric) {
            printf("out of memory\n");
            exit(2);
        }
    }
    g->analytic[g->count] = analytic;
    g->numeric[g->count] = numeric;
    g->count++;
}

#define GRADIENT_TOLERANCE 1e-4

/* The check of the header comment; frees the pairs. The floor of the scale is
 * `fraction` of the largest component (0.01 unless an operation's error
 * analysis says otherwise) and at least `magnitude` (for operations whose
 * terms are known to be larger than the gradient itself). */
static void gradient_check(gradient_t *g, const char *what, double fraction, double magnitude) {
    double largest = 0;
    for (size_t i = 0; i < g->count; i++)
        if (fabs(g->numeric[i]) > largest) largest = fabs(g->numeric[i]);
    double worst = 0;
    size_t worst_index = 0;
    for (size_t i = 0; i < g->count; i++) {
        double floor = fraction * largest > magnitude ? fraction * largest : magnitude;
        if (floor == 0) floor = 1e-300;
        double scale = fabs(g->numeric[i]) > floor ? fabs(g->numeric[i]) : floor;
        double error = fabs(g->analytic[i] - g->numeric[i]) / scale;
        if (!(error <= worst)) {
            worst = error;
            worst_index = i;
        }
    }
    CHECK(g->count > 0 && worst <= GRADIENT_TOLERANCE,
          "%s: relative error %.3g at pair %zu of %zu (analytic %.9g, finite difference %.9g)",
          what, worst, worst_index, g->count, g->count ? g->analytic[worst_index] : 0.0,
          g->count ? g->numeric[worst_index] : 0.0);
    if (getenv("UFORM_TEST_VERBOSE"))
        printf("  %-40s %zu pairs, worst %.3g\n", what, g->count, worst);
    free(g->analytic);
    free(g->numeric);
    memset(g, 0, sizeof(*g));
}

/* Forward check: |y - reference| <= relative * |reference| + absolute everywhere. */
static void forward_check(const float *y, const double *reference, size_t n, double relative,
                          double absolute, const char *what) {
    double worst = 0;
    size_t worst_index = 0;
    for (size_t i = 0; i < n; i++) {
        double difference = fabs(y[i] - reference[i]);
        double bound = relative * fabs(reference[i]) + absolute;
        double excess = difference == 0 ? 0 : difference / bound;
        if (!(excess <= worst)) {
            worst = excess;
            worst_index = i;
        }
    }
    CHECK(worst <= 1.0, "%s: element %zu is %.9g, reference %.12g (%.3g of the bound)", what,
          worst_index, n ? y[worst_index] : 0.0, n ? reference[worst_index] : 0.0, worst);
    if (getenv("UFORM_TEST_VERBOSE"))
        printf("  forward %-40s worst %.3g of the bound\n", what, worst);
}

#define STEP 1e-6

/* Central difference of f at *p with step h. */
typedef double (*loss_fn_t)(void *context);
static double central(loss_fn_t f, void *context, double *p, double h) {
    double saved = *p;
    *p = saved + h;
    double up = f(context);
    *p = saved - h;
    double down = f(context);
    *p = saved;
    return (up - down) / (2 * h);
}

/* ==== layer norm ============================================================ */

typedef struct {
    const double *x, *weight, *bias, *g;
    size_t first, last, width; /* rows [first, last) enter the loss */
} ln_ref_t;

static void ln_ref_row(const double *x, const double *weight, const double *bias, size_t width,
                       double *y) {
    double mean = 0, variance = 0;
    for (size_t i = 0; i < width; i++) mean += x[i];
    mean /= (double)width;
    for (size_t i = 0; i < width; i++) variance += (x[i] - mean) * (x[i] - mean);
    variance /= (double)width;
    double rstd = 1.0 / sqrt(variance + 1e-5);
    for (size_t i = 0; i < width; i++) y[i] = (x[i] - mean) * rstd * weight[i] + bias[i];
}

static double ln_ref_loss(void *context) {
    const ln_ref_t *r = context;
    double loss = 0, y[512];
    for (size_t row = r->first; row < r->last; row++) {
        ln_ref_row(r->x + row * r->width, r->weight, r->bias, r->width, y);
        for (size_t i = 0; i < r->width; i++) loss += y[i] * r->g[row * r->width + i];
    }
    return loss;
}

static void test_layer_norm(size_t rows, size_t width, float offset) {
    char what[96];
    size_t n = rows * width;
    float *x = random_floats(n, 2.0f), *weight = random_floats(width, 0.5f);
    float *bias = random_floats(width, 0.5f), *g = random_floats(n, 1.0f);
    for (size_t i = 0; i < n; i++) x[i] += offset;
    for (size_t i = 0; i < width; i++) weight[i] += 1.0f;
    float *y[2], *mean[2], *rstd[2], *dx[2], *dw[2], *db[2];
    for (int e = 0; e < 2; e++) {
        y[e] = xmalloc(n, sizeof(float));
        mean[e] = xmalloc(rows, sizeof(float));
        rstd[e] = xmalloc(rows, sizeof(float));
        dx[e] = xmalloc(n, sizeof(float));
        dw[e] = xmalloc(width, sizeof(float));
        db[e] = xmalloc(width, sizeof(float));
        uform_layer_norm_forward(executors[e], x, rows, width, weight, bias, y[e], mean[e],
                                 rstd[e]);
        uform_layer_norm_backward(executors[e], g, x, weight, mean[e], rstd[e], rows, width, dx[e],
                                  dw[e], db[e]);
    }
    snprintf(what, sizeof(what), "layer norm %zu x %zu", rows, width);
    CHECK(same_bits(y[0], y[1], n) && same_bits(mean[0], mean[1], rows) &&
              same_bits(rstd[0], rstd[1], rows),
          "%s: forward differs between 1 and 3 threads", what);
    CHECK(same_bits(dx[0], dx[1], n) && same_bits(dw[0], dw[1], width) &&
              same_bits(db[0], db[1], width),
          "%s: backward differs between 1 and 3 threads", what);

    double *xd = to_double(x, n), *wd = to_double(weight, width), *bd = to_double(bias, width);
    double *gd = to_double(g, n), *yd = xmalloc(n, sizeof(double));
    for (size_t r = 0; r < rows; r++) ln_ref_row(xd + r * width, wd, bd, width, yd + r * width);
    /* The lane sums give the mean an absolute error of at most ~(width/16 + 16) u
     * max|x| <= 24 u * 5 here, i.e. <= 1e-5 of the standard deviation (~1.2);
     * the variance, rsqrt and the three roundings of y add ~(width/16 + 20) u
     * relative. With |w| <= 1.5, |b| <= 0.5, |y| <= ~6: 1e-5 (|y| + 1) bounds
     * the worst case; typical errors are ~100 times smaller. */
    forward_check(y[0], yd, n, 1e-5, 1e-5, what);

    /* accumulation: a second backward doubles every gradient */
    float *dx2 = copy_floats(dx[0], n), *dw2 = copy_floats(dw[0], width);
    float *db2 = copy_floats(db[0], width);
    uform_layer_norm_backward(executors[1], g, x, weight, mean[0], rstd[0], rows, width, dx2, dw2,
                              db2);
    CHECK(doubled(dx2, dx[0], n) && doubled(dw2, dw[0], width) && doubled(db2, db[0], width),
          "%s: a second backward does not double the gradients", what);

    ln_ref_t reference = {xd, wd, bd, gd, 0, rows, width};
    gradient_t gradient = {0};
    for (size_t sample = 0; sample < 96; sample++) {
        size_t i = rng_below(n);
        reference.first = i / width;
        reference.last = reference.first + 1;
        gradient_add(&gradient, dx[0][i], central(ln_ref_loss, &reference, &xd[i], STEP));
    }
    snprintf(what, sizeof(what), "layer norm %zu x %zu: dx", rows, width);
    gradient_check(&gradient, what, 0.01, 0);
    reference.first = 0;
    reference.last = rows;
    for (size_t i = 0; i < width; i++)
        gradient_add(&gradient, dw[0][i], central(ln_ref_loss, &reference, &wd[i], STEP));
    snprintf(what, sizeof(what), "layer norm %zu x %zu: dweight", rows, width);
    gradient_check(&gradient, what, 0.01, 0);
    for (size_t i = 0; i < width; i++)
        gradient_add(&gradient, db[0][i], central(ln_ref_loss, &reference, &bd[i], STEP));
    snprintf(what, sizeof(what), "layer norm %zu x %zu: dbias", rows, width);
    gradient_check(&gradient, what, 0.01, 0);

    for (int e = 0; e < 2; e++) {
        free(y[e]); free(mean[e]); free(rstd[e]); free(dx[e]); free(dw[e]); free(db[e]);
    }
    free(x); free(weight); free(bias); free(g); free(dx2); free(dw2); free(db2);
    free(xd); free(wd); free(bd); free(gd); free(yd);
}

/* ==== GELU ================================================================== */

/* 0.5 x (1 + tanh(u)) written as x / (1 + e^(-2u)): the same function, but
 * float64's 1 + tanh(u) cancels to 0 for u < -19 where the true value does not. */
static double gelu_ref(double x) {
    double u = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
    return x / (1.0 + exp(-2.0 * u));
}

static void test_gelu(void) {
    size_t n = 3000;
    float *x = random_floats(n, 6.0f), *g = random_floats(n, 1.0f);
    const float special[] = {0.0f, 1e-8f, -1e-8f, 9.0f, -9.0f, 12.0f, -12.0f, 100.0f, -100.0f,
                             1e20f, -1e20f, 3e38f, -3e38f};
    size_t specials = sizeof(special) / sizeof(special[0]);
    memcpy(x, special, sizeof(special));
    float *y[2], *dx[2];
    for (int e = 0; e < 2; e++) {
        y[e] = xmalloc(n, sizeof(float));
        dx[e] = xmalloc(n, sizeof(float));
        uform_gelu_forward(executors[e], x, n, y[e]);
        uform_gelu_backward(executors[e], x, g, n, dx[e]);
    }
    CHECK(same_bits(y[0], y[1], n) && same_bits(dx[0], dx[1], n),
          "gelu: results differ between 1 and 3 threads");
    float *dx2 = copy_floats(dx[0], n);
    uform_gelu_backward(executors[0], x, g, n, dx2);
    CHECK(doubled(dx2, dx[0], n), "gelu: a second backward does not double dx");

    /* huge inputs: the limits, exactly (x for x > 0, derivative 1; 0 below) */
    bool limits = true;
    for (size_t i = 9; i < specials; i++) {
        float expected_y = x[i] > 0 ? x[i] : 0.0f, expected_dx = x[i] > 0 ? g[i] : 0.0f;
        if (!(fabsf(y[0][i] - expected_y) <= 1e-6f * fabsf(x[i])) || dx[0][i] != expected_dx)
            limits = false;
    }
    CHECK(limits, "gelu: wrong limits for huge inputs");

    /* forward: |u| < 44 (beyond, the exp is clamped and both sides are the
     * limits); the error of u (4 roundings) is amplified by |2u| in e^-2u,
     * plus ~2 ulp of the exp and 3 more roundings: <= (8 |u| + 16) u_32 |y|;
     * for |x| <= 12, |u| <= 63 gives < 4e-5 |y|; plus 1e-30 for underflow. */
    double *yd = xmalloc(n, sizeof(double));
    for (size_t i = 0; i < n; i++) yd[i] = gelu_ref(x[i]);
    forward_check(y[0] + 9, yd + 9, 4, 1e-6, 1e-30, "gelu forward, large inputs");
    forward_check(y[0] + specials, yd + specials, n - specials, 4e-5, 1e-30, "gelu forward");
    forward_check(y[0], yd, 9, 4e-5, 1e-30, "gelu forward, small inputs");

    gradient_t gradient = {0};
    for (size_t i = 0; i < n; i++) {
        if (fabsf(x[i]) > 1e3f) continue; /* beyond double's finite differences */
        double xi = x[i];
        double derivative = (gelu_ref(xi + STEP) - gelu_ref(xi - STEP)) / (2 * STEP);
        gradient_add(&gradient, dx[0][i], derivative * g[i]);
    }
    gradient_check(&gradient, "gelu: dx", 0.01, 0);
    for (int e = 0; e < 2; e++) {
        free(y[e]);
        free(dx[e]);
    }
    free(x); free(g); free(dx2); free(yd);
}

/* ==== rotary positions ====================================================== */

/* forward.c's plan (docs/architecture.md, "Rotary positions"): the cos/sin
 * tables of rows at the given positions with `axes` axes. */
static void rope_tables(size_t rows, const uint32_t *positions, size_t axes, float *cosines,
                        float *sines) {
    size_t axis_of_pair[32];
    double frequency[32];
    size_t pair = 0;
    for (size_t a = 0; a < axes; a++) {
        size_t group = 32 / axes + (a < 32 % axes ? 1 : 0);
        for (size_t i = 0; i < group; i++, pair++) {
            axis_of_pair[pair] = a;
            frequency[pair] = pow(10000.0, -(double)i / (double)group);
        }
    }
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < 32; j++) {
            double angle = (double)positions[r * 3 + axis_of_pair[j]] * frequency[j];
            cosines[r * 32 + j] = (float)cos(angle);
            sines[r * 32 + j] = (float)sin(angle);
        }
}

/* Positions of rows in segments: axis 0 the index (k = 1), or (index / 5,
 * index % 5) for k = 2. */
static uint32_t *segment_positions(const uform_segment_t *segments, size_t count, size_t rows,
                                   size_t axes) {
    uint32_t *positions = xmalloc(rows * 3, sizeof(uint32_t));
    for (size_t s = 0; s < count; s++)
        for (size_t i = 0; i < segments[s].length; i++) {
            uint32_t *p = positions + (segments[s].begin + i) * 3;
            if (axes == 1) {
                p[0] = (uint32_t)i;
            } else {
                p[0] = (uint32_t)(i / 5);
                p[1] = (uint32_t)(i % 5);
            }
        }
    return positions;
}

typedef struct {
    const double *qkv, *g, *cosines, *sines;
    size_t row, hidden;
} rope_ref_t;

static void rope_ref_row(const double *in, size_t hidden, const double *c, const double *s,
                         double *out) {
    memcpy(out, in, 3 * hidden * sizeof(double));
    for (size_t h = 0; h < 2 * hidden / 64; h++)
        for (size_t j = 0; j < 32; j++) {
            double x0 = in[h * 64 + j], x1 = in[h * 64 + j + 32];
            out[h * 64 + j] = x0 * c[j] - x1 * s[j];
            out[h * 64 + j + 32] = x0 * s[j] + x1 * c[j];
        }
}

static double rope_ref_loss(void *context) {
    const rope_ref_t *r = context;
    double out[3 * 256];
    size_t stride = 3 * r->hidden;
    rope_ref_row(r->qkv + r->row * stride, r->hidden, r->cosines + r->row * 32,
                 r->sines + r->row * 32, out);
    double loss = 0;
    for (size_t i = 0; i < stride; i++) loss += out[i] * r->g[r->row * stride + i];
    return loss;
}

static void test_rope(size_t hidden, size_t axes) {
    char what[96];
    const uform_segment_t segments[] = {{0, 1, 1}, {1, 2, 1}, {3, 17, 1}, {20, 64, 1}, {84, 70, 1}};
    size_t rows = 154, stride = 3 * hidden, n = rows * stride;
    uint32_t *positions = segment_positions(segments, 5, rows, axes);
    float *cosines = xmalloc(rows * 32, sizeof(float)), *sines = xmalloc(rows * 32, sizeof(float));
    rope_tables(rows, positions, axes, cosines, sines);
    float *qkv = random_floats(n, 1.0f), *g = random_floats(n, 1.0f);
    float *y[2], *dqkv[2];
    for (int e = 0; e < 2; e++) {
        y[e] = copy_floats(qkv, n);
        dqkv[e] = copy_floats(g, n);
        uform_rope_forward(executors[e], y[e], rows, hidden, cosines, sines);
        uform_rope_backward(executors[e], dqkv[e], rows, hidden, cosines, sines);
    }
    snprintf(what, sizeof(what), "rope H=%zu k=%zu", hidden, axes);
    CHECK(same_bits(y[0], y[1], n) && same_bits(dqkv[0], dqkv[1], n),
          "%s: results differ between 1 and 3 threads", what);

    double *qd = to_double(qkv, n), *gd = to_double(g, n);
    double *cd = to_double(cosines, rows * 32), *sd = to_double(sines, rows * 32);
    double *yd = xmalloc(n, sizeof(double));
    for (size_t r = 0; r < rows; r++)
        rope_ref_row(qd + r * stride, hidden, cd + r * 32, sd + r * 32, yd + r * stride);
    /* two products and a sum: |error| <= 3 u (|x0 c| + |x1 s|) <= 3 u * 2 */
    forward_check(y[0], yd, n, 0.0, 4e-7, what);
    /* the backward is a rotation too, and v passes through unchanged */
    rope_ref_t reference = {qd, gd, cd, sd, 0, hidden};
    gradient_t gradient = {0};
    for (size_t sample = 0; sample < 400; sample++) {
        size_t i = rng_below(n);
        reference.row = i / stride;
        gradient_add(&gradient, dqkv[0][i], central(rope_ref_loss, &reference, &qd[i], STEP));
    }
    snprintf(what, sizeof(what), "rope H=%zu k=%zu: dqkv", hidden, axes);
    gradient_check(&gradient, what, 0.01, 0);
    bool values_pass = true;
    for (size_t r = 0; r < rows; r++)
        if (!same_bits(dqkv[0] + r * stride + 2 * hidden, g + r * stride + 2 * hidden, hidden))
            values_pass = false;
    CHECK(values_pass, "%s: the backward changed the gradient of v", what);
    /* backward then forward turns back: the identity within rounding */
    float *round_trip = copy_floats(dqkv[0], n);
    uform_rope_forward(executors[0], round_trip, rows, hidden, cosines, sines);
    forward_check(round_trip, gd, n, 0.0, 1e-6, "rope: forward after backward");

    for (int e = 0; e < 2; e++) {
        free(y[e]);
        free(dqkv[e]);
    }
    free(positions); free(cosines); free(sines); free(qkv); free(g); free(qd); free(gd);
    free(cd); free(sd); free(yd); free(round_trip);
}

/* ==== attention ============================================================= */

/* out (and lse) of one head of one segment, float64, the plain way. */
static void attention_ref(const double *qkv, size_t hidden, uform_segment_t segment, size_t head,
                          double *out, double *lse) {
    size_t stride = 3 * hidden, n = segment.length;
    const double *q = qkv + segment.begin * stride + head * 64;
    const double *k = q + hidden, *v = q + 2 * hidden;
    double *scores = xmalloc(n, sizeof(double));
    for (size_t i = 0; i < n; i++) {
        double top = -INFINITY;
        for (size_t j = 0; j < n; j++) {
            double dot = 0;
            for (size_t d = 0; d < 64; d++) dot += q[i * stride + d] * k[j * stride + d];
            scores[j] = dot / 8;
            if (scores[j] > top) top = scores[j];
        }
        double total = 0;
        for (size_t j = 0; j < n; j++) {
            scores[j] = exp(scores[j] - top);
            total += scores[j];
        }
        for (size_t d = 0; d < 64; d++) {
            double sum = 0;
            for (size_t j = 0; j < n; j++) sum += scores[j] / total * v[j * stride + d];
            out[i * 64 + d] = sum;
        }
        if (lse) lse[i] = top + log(total);
    }
    free(scores);
}

typedef struct {
    const double *qkv, *g;
    size_t hidden, head;
    uform_segment_t segment;
    double *out;
} attention_loss_t;

/* sum of g * out over the segment's rows and one head */
static double attention_ref_loss(void *context) {
    const attention_loss_t *a = context;
    attention_ref(a->qkv, a->hidden, a->segment, a->head, a->out, NULL);
    double loss = 0;
    for (size_t i = 0; i < a->segment.length; i++) {
        const double *g = a->g + (a->segment.begin + i) * a->hidden + a->head * 64;
        for (size_t d = 0; d < 64; d++) loss += a->out[i * 64 + d] * g[d];
    }
    return loss;
}

static void test_attention(size_t hidden, float scale, const uform_segment_t *segments, size_t count,
                           bool finite_differences) {
    char what[128];
    size_t rows = 0, heads = hidden / 64, stride = 3 * hidden;
    for (size_t s = 0; s < count; s++)
        if (segments[s].begin + segments[s].length > rows)
            rows = segments[s].begin + segments[s].length;
    size_t n = rows * stride;
    float *qkv = random_floats(n, scale), *g = random_floats(rows * hidden, 1.0f);
    float *out[2], *lse[2], *dqkv[2];
    for (int e = 0; e < 2; e++) {
        out[e] = xmalloc(rows * hidden, sizeof(float));
        lse[e] = xmalloc(rows * heads, sizeof(float));
        dqkv[e] = xmalloc(n, sizeof(float));
        uform_attention_forward(executors[e], UFORM_SGEMM_AUTO, qkv, hidden, segments, count,
                                out[e], lse[e]);
        uform_attention_backward(executors[e], UFORM_SGEMM_AUTO, qkv, out[e], g, lse[e], hidden,
                                 segments, count, dqkv[e]);
    }
    int written = snprintf(what, sizeof(what), "attention H=%zu scale %g, lengths", hidden, scale);
    for (size_t s = 0; s < count && written > 0 && (size_t)written < sizeof(what) - 8; s++)
        written +=
            snprintf(what + written, sizeof(what) - (size_t)written, " %zu", segments[s].length);
    CHECK(same_bits(out[0], out[1], rows * hidden) && same_bits(lse[0], lse[1], rows * heads),
          "%s: forward differs between 1 and 3 threads", what);
    CHECK(same_bits(dqkv[0], dqkv[1], n), "%s: backward differs between 1 and 3 threads", what);
    float *dqkv2 = copy_floats(dqkv[0], n);
    uform_attention_backward(executors[1], UFORM_SGEMM_AUTO, qkv, out[0], g, lse[0], hidden,
                             segments, count, dqkv2);
    CHECK(doubled(dqkv2, dqkv[0], n), "%s: a second backward does not double dqkv", what);

    double *qd = to_double(qkv, n), *gd = to_double(g, rows * hidden);
    size_t longest = 0;
    for (size_t s = 0; s < count; s++)
        if (segments[s].length > longest) longest = segments[s].length;

    /* the inference path's portable kernel computes the same chains */
    size_t scratch_bytes = uform_attention_scratch_floats(longest) * sizeof(float);
    float *scratch = aligned_alloc(64, scratch_bytes), *inference = xmalloc(rows * hidden, 4);
    for (size_t s = 0; s < count; s++)
        for (size_t h = 0; h < heads && segments[s].length; h++) {
            const float *q = qkv + segments[s].begin * stride + h * 64;
            uform_attention_portable(q, q + hidden, q + 2 * hidden, stride, segments[s].length, 0,
                                     segments[s].length,
                                     inference + segments[s].begin * hidden + h * 64, hidden,
                                     scratch);
        }
    /* The trainer's attention (per-head GEMMs) and the inference kernel order their
     * sums differently: they agree to FP32 rounding of convex combinations of v
     * (|v| <= scale), far inside 1e-5 * scale. */
    double largest_difference = 0;
    for (size_t e = 0; e < rows * hidden; e++) {
        double difference = fabs((double)out[0][e] - (double)inference[e]);
        if (difference > largest_difference) largest_difference = difference;
    }
    CHECK(largest_difference <= 1e-5 * scale, "%s: forward differs from the inference kernel by %g",
          what, largest_difference);
    free(scratch);
    free(inference);

    /* The register-tiled fallback (used when the per-thread score matrices cannot
     * be allocated) computes the same function: outputs, log-sum-exps and gradients
     * agree to FP32 rounding (1e-4 of each result's largest magnitude). */
    float *tiled_out = xmalloc(rows * hidden, sizeof(float));
    float *tiled_lse = xmalloc(rows * heads, sizeof(float));
    float *tiled_dqkv = xmalloc(n, sizeof(float));
    memset(tiled_out, 0, rows * hidden * sizeof(float));
    memset(tiled_dqkv, 0, n * sizeof(float));
    uform_attention_forward_tiled(executors[1], qkv, hidden, segments, count, tiled_out, tiled_lse);
    uform_attention_backward_tiled(executors[1], qkv, tiled_out, g, tiled_lse, hidden, segments,
                                   count, tiled_dqkv);
    const float *ours[3] = {out[0], lse[0], dqkv[0]}, *theirs[3] = {tiled_out, tiled_lse, tiled_dqkv};
    size_t sizes[3] = {rows * hidden, rows * heads, n};
    for (size_t k = 0; k < 3; k++) {
        double largest = 0, worst = 0;
        for (size_t e = 0; e < sizes[k]; e++) {
            if (fabs((double)ours[k][e]) > largest) largest = fabs((double)ours[k][e]);
            double difference = fabs((double)ours[k][e] - (double)theirs[k][e]);
            if (difference > worst) worst = difference;
        }
        CHECK(worst <= 1e-4 * (largest > 1e-30 ? largest : 1.0), "%s: tiled fallback differs (%zu) by %g of %g",
              what, k, worst, largest);
    }
    free(tiled_out);
    free(tiled_lse);
    free(tiled_dqkv);
    double *ref_out = xmalloc(longest * 64, sizeof(double));
    double *ref_lse = xmalloc(longest, sizeof(double));
    /* Forward: each output is a convex combination of v (|v| <= scale); its
     * error comes from the scores (64-term chains, ~70 u |q||k|/8 absolute,
     * amplified to relative error of p by at most that), exp (2 ulp), the
     * 16-lane total and the sum over <= 64 keys: below ~(70 scale^2 / 8 + 100)
     * u * scale absolute; lse likewise ~(70 scale^2 / 8 + 10) u * (|lse| + 1). */
    double u = 0x1p-24, bound = (70.0 * scale * scale / 8 + 100) * u;
    for (size_t s = 0; s < count; s++) {
        if (!segments[s].length) continue;
        for (size_t h = 0; h < heads; h++) {
            attention_ref(qd, hidden, segments[s], h, ref_out, ref_lse);
            float *o = xmalloc(segments[s].length * 64, sizeof(float));
            float *l = xmalloc(segments[s].length, sizeof(float));
            for (size_t i = 0; i < segments[s].length; i++) {
                memcpy(o + i * 64, out[0] + (segments[s].begin + i) * hidden + h * 64,
                       64 * sizeof(float));
                l[i] = lse[0][(segments[s].begin + i) * heads + h];
            }
            forward_check(o, ref_out, segments[s].length * 64, 0.0, bound * scale, what);
            forward_check(l, ref_lse, segments[s].length, bound, bound, what);
            free(o);
            free(l);
        }
    }

    if (finite_differences) {
        attention_loss_t reference = {qd, gd, hidden, 0, segments[0], ref_out};
        gradient_t gradient[3] = {{0}};
        for (size_t s = 0; s < count; s++) {
            size_t length = segments[s].length;
            if (!length) continue;
            reference.segment = segments[s];
            /* every element of short segments, 24 samples of each head's q, k, v otherwise */
            size_t samples = length <= 2 ? length * stride : 24 * 3 * heads;
            for (size_t sample = 0; sample < samples; sample++) {
                size_t row, column;
                if (length <= 2) {
                    row = sample / stride;
                    column = sample % stride;
                } else {
                    row = rng_below(length);
                    column = (sample / 24 % (3 * heads)) * 64 + rng_below(64);
                }
                size_t i = (segments[s].begin + row) * stride + column;
                reference.head = column % hidden / 64;
                gradient_add(&gradient[column / hidden], dqkv[0][i],
                             central(attention_ref_loss, &reference, &qd[i], STEP));
            }
        }
        /* Every p_ij = exp(s_ij / 8 - lse_i) carries the absolute error of its
         * exponent: lse_i stored in FP32 (half an ulp of |lse| <= ~20) and the
         * 64-term score, ~(|lse| + |s|) u ~ 1e-6 relative at scale 3, in every
         * term of dq, dk, dv alike; measured against a float64 analytic
         * backward that is ~8e-7 of the largest component. A 3% floor keeps
         * the 1e-4 check meaningful (3e-6 of the largest) with margin. */
        static const char *parts[3] = {"dq", "dk", "dv"};
        for (int p = 0; p < 3; p++) {
            char name[160];
            snprintf(name, sizeof(name), "%s: %s", what, parts[p]);
            gradient_check(&gradient[p], name, 0.03, 0);
        }
    }
    for (int e = 0; e < 2; e++) {
        free(out[e]); free(lse[e]); free(dqkv[e]);
    }
    free(qkv); free(g); free(dqkv2); free(qd); free(gd); free(ref_out); free(ref_lse);
}

/* ==== embedding ============================================================= */

static void test_embedding(size_t width) {
    char what[64];
    snprintf(what, sizeof(what), "embedding width %zu", width);
    size_t vocabulary = 20, rows = 150;
    float *table = random_floats(vocabulary * width, 1.0f), *modality = random_floats(width, 1.0f);
    float *g = random_floats(rows * width, 1.0f);
    uint32_t *ids = xmalloc(rows, sizeof(uint32_t));
    /* ids repeat; the last row of the table is never used */
    for (size_t r = 0; r < rows; r++) ids[r] = (uint32_t)rng_below(vocabulary - 1);
    float *y = xmalloc(rows * width, sizeof(float));
    uform_embedding_forward(table, modality, ids, rows, width, y);
    bool exact = true;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < width; c++)
            if (y[r * width + c] != (float)((double)table[ids[r] * width + c] + modality[c]))
                exact = false;
    CHECK(exact, "%s: forward is not the rounded sum", what); /* one rounding: exact */

    float *dtable[2], *dmodality[2];
    for (int e = 0; e < 2; e++) {
        dtable[e] = xmalloc(vocabulary * width, sizeof(float));
        dmodality[e] = xmalloc(width, sizeof(float));
        uform_embedding_backward(executors[e], g, ids, rows, width, dtable[e], dmodality[e]);
    }
    CHECK(same_bits(dtable[0], dtable[1], vocabulary * width) &&
              same_bits(dmodality[0], dmodality[1], width),
          "%s: backward differs between 1 and 3 threads", what);
    /* the loss is linear: the gradients are sums of g, in float64 exactly */
    gradient_t gradient = {0};
    double *expected = xmalloc(vocabulary * width, sizeof(double));
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < width; c++) expected[ids[r] * width + c] += g[r * width + c];
    for (size_t i = 0; i < vocabulary * width; i++)
        gradient_add(&gradient, dtable[0][i], expected[i]);
    gradient_check(&gradient, "embedding: dtable", 0.01, 0);
    bool unused = true;
    for (size_t c = 0; c < width; c++)
        if (dtable[0][(vocabulary - 1) * width + c] != 0.0f) unused = false;
    CHECK(unused, "%s: an unused row got a gradient", what);
    for (size_t c = 0; c < width; c++) {
        double sum = 0;
        for (size_t r = 0; r < rows; r++) sum += g[r * width + c];
        gradient_add(&gradient, dmodality[0][c], sum);
    }
    gradient_check(&gradient, "embedding: dmodality", 0.01, 0);
    /* accumulation: dmodality doubles exactly; dtable adds in place (row order) */
    float *dtable2 = copy_floats(dtable[0], vocabulary * width);
    float *dmodality2 = copy_floats(dmodality[0], width);
    uform_embedding_backward(executors[1], g, ids, rows, width, dtable2, dmodality2);
    CHECK(doubled(dmodality2, dmodality[0], width), "%s: dmodality does not double", what);
    for (size_t i = 0; i < vocabulary * width; i++)
        gradient_add(&gradient, dtable2[i], 2 * expected[i]);
    gradient_check(&gradient, "embedding: dtable after two backwards", 0.01, 0);

    for (int e = 0; e < 2; e++) {
        free(dtable[e]);
        free(dmodality[e]);
    }
    free(table); free(modality); free(g); free(ids); free(y); free(expected); free(dtable2);
    free(dmodality2);
}

/* ==== mean pooling ========================================================== */

static void test_mean_pool(void) {
    size_t width = 64, rows = 9;
    /* an empty segment between others, one at the end, a 1-row segment */
    const uform_segment_t segments[] = {{0, 3, 1}, {3, 0, 1}, {3, 1, 1}, {4, 5, 1}, {9, 0, 1}};
    size_t count = 5;
    float *x = random_floats(rows * width, 1.0f), *g = random_floats(count * width, 1.0f);
    float *pooled = random_floats(count * width, 1.0f); /* garbage to overwrite */
    uform_mean_pool_forward(x, width, segments, count, pooled);
    double *reference = xmalloc(count * width, sizeof(double));
    for (size_t s = 0; s < count; s++)
        for (size_t c = 0; c < width; c++) {
            double sum = 0;
            for (size_t r = 0; r < segments[s].length; r++)
                sum += x[(segments[s].begin + r) * width + c];
            reference[s * width + c] = segments[s].length ? sum / (double)segments[s].length : 0.0;
        }
    /* <= 5 additions and a multiply by a rounded 1/length: 8 u of |x| <= 1 */
    forward_check(pooled, reference, count * width, 0.0, 8 * 0x1p-24, "mean pool forward");
    bool zeros = true;
    for (size_t c = 0; c < width; c++)
        if (pooled[1 * width + c] != 0.0f || pooled[4 * width + c] != 0.0f) zeros = false;
    CHECK(zeros, "mean pool: an empty segment does not pool to zeros");

    float *dx = xmalloc(rows * width, sizeof(float));
    uform_mean_pool_backward(g, width, segments, count, dx);
    gradient_t gradient = {0};
    for (size_t s = 0; s < count; s++)
        for (size_t r = 0; r < segments[s].length; r++)
            for (size_t c = 0; c < width; c++)
                gradient_add(&gradient, dx[(segments[s].begin + r) * width + c],
                             g[s * width + c] / (double)segments[s].length);
    gradient_check(&gradient, "mean pool: dx", 0.01, 0);
    float *dx2 = copy_floats(dx, rows * width);
    uform_mean_pool_backward(g, width, segments, count, dx2);
    CHECK(doubled(dx2, dx, rows * width), "mean pool: a second backward does not double dx");
    free(x); free(g); free(pooled); free(reference); free(dx); free(dx2);
}

/* ==== L2 normalisation ====================================================== */

typedef struct {
    const double *x, *g;
    size_t row, width;
} normalize_ref_t;

static double normalize_ref_loss(void *context) {
    const normalize_ref_t *n = context;
    const double *x = n->x + n->row * n->width;
    double squares = 0;
    for (size_t c = 0; c < n->width; c++) squares += x[c] * x[c];
    double norm = sqrt(squares), divisor = norm > 1e-12 ? norm : 1e-12;
    double loss = 0;
    for (size_t c = 0; c < n->width; c++) loss += x[c] / divisor * n->g[n->row * n->width + c];
    return loss;
}

static void test_normalize(size_t width) {
    char what[64];
    snprintf(what, sizeof(what), "normalize width %zu", width);
    /* row scales: ordinary, large, norm ~1e-10 (above the clamp), ~1e-14 (below), zero */
    const float scales[] = {1.0f, 1.0f, 300.0f, 1e-11f, 1e-15f, 0.0f};
    size_t rows = sizeof(scales) / sizeof(scales[0]);
    float *x = xmalloc(rows * width, sizeof(float)), *g = random_floats(rows * width, 1.0f);
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < width; c++) x[r * width + c] = rng_float() * scales[r];
    float *y = xmalloc(rows * width, sizeof(float)), *norms = xmalloc(rows, sizeof(float));
    uform_normalize_forward(x, rows, width, y, norms);
    double *xd = to_double(x, rows * width), *gd = to_double(g, rows * width);
    double *yd = xmalloc(rows * width, sizeof(double));
    for (size_t r = 0; r < rows; r++) {
        double squares = 0;
        for (size_t c = 0; c < width; c++) squares += xd[r * width + c] * xd[r * width + c];
        double divisor = sqrt(squares) > 1e-12 ? sqrt(squares) : 1e-12;
        for (size_t c = 0; c < width; c++) yd[r * width + c] = xd[r * width + c] / divisor;
    }
    /* |y| <= 1 above the clamp: the norm carries ~(width/16 + 20) u, y two more;
     * below it y = x * (float)1e12, relative error <= 2 u (1e-12f is inexact) */
    forward_check(y, yd, 4 * width, 4e-6, 0.0, what);
    forward_check(y + 4 * width, yd + 4 * width, 2 * width, 3e-7, 0.0, what);

    float *dx = xmalloc(rows * width, sizeof(float));
    uform_normalize_backward(g, y, norms, rows, width, dx);
    normalize_ref_t reference = {xd, gd, 0, width};
    for (size_t r = 0; r < rows; r++) {
        gradient_t gradient = {0};
        reference.row = r;
        double row_scale = scales[r] > 0 ? scales[r] : 1e-15;
        for (size_t c = 0; c < width; c++) {
            double *p = &xd[r * width + c];
            gradient_add(&gradient, dx[r * width + c],
                         central(normalize_ref_loss, &reference, p, STEP * row_scale));
        }
        char name[160];
        snprintf(name, sizeof(name), "%s: dx of a row of scale %g", what, scales[r]);
        gradient_check(&gradient, name, 0.01, 0);
    }
    bool zero_row = true; /* exactly dy / 1e-12 */
    for (size_t c = 0; c < width; c++)
        if (dx[5 * width + c] != g[5 * width + c] * (1.0f / 1e-12f)) zero_row = false;
    CHECK(zero_row, "%s: the gradient of a zero row is not dy / 1e-12", what);
    float *dx2 = copy_floats(dx, rows * width);
    uform_normalize_backward(g, y, norms, rows, width, dx2);
    CHECK(doubled(dx2, dx, rows * width), "%s: a second backward does not double dx", what);
    free(x); free(g); free(y); free(norms); free(xd); free(gd); free(yd); free(dx); free(dx2);
}

/* ==== cross-entropy ========================================================= */

typedef struct {
    const double *logits;
    size_t row, classes;
    uint32_t target;
    double scale;
} cross_entropy_ref_t;

/* logsumexp(l) - l_t written as log1p(sum_{c != t} e^(l_c - l_t)): the same
 * function without the cancellation of lse - l_t when p_t ~ 1, so finite
 * differences resolve gradients of e^-30 too. */
static double cross_entropy_ref_row(const double *logits, size_t classes, uint32_t target) {
    double others = 0;
    for (size_t c = 0; c < classes; c++)
        if (c != target) others += exp(logits[c] - logits[target]);
    return log1p(others);
}

static double cross_entropy_ref_loss(void *context) {
    const cross_entropy_ref_t *e = context;
    return e->scale * cross_entropy_ref_row(e->logits + e->row * e->classes, e->classes, e->target);
}

static void test_cross_entropy(size_t classes) {
    char what[64];
    snprintf(what, sizeof(what), "cross-entropy over %zu classes", classes);
    size_t rows = 12;
    float *logits = random_floats(rows * classes, 4.0f);
    for (size_t c = 0; c < classes; c++) logits[3 * classes + c] += 80.0f; /* large, shifted row */
    logits[4 * classes + 1] = 30.0f;                                       /* one dominant class */
    uint32_t *targets = xmalloc(rows, sizeof(uint32_t));
    float *scale = xmalloc(rows, sizeof(float));
    for (size_t r = 0; r < rows; r++) {
        targets[r] = (uint32_t)rng_below(classes);
        scale[r] = r % 4 == 2 ? 0.0f : 0.5f + 0.5f * rng_float();
    }
    targets[4] = 1; /* p ~ 1 at the target: the gradient is a cancellation */
    float *losses = xmalloc(rows, sizeof(float));
    uform_cross_entropy_forward(logits, rows, classes, targets, losses);
    double *ld = to_double(logits, rows * classes), *reference = xmalloc(rows, sizeof(double));
    for (size_t r = 0; r < rows; r++)
        reference[r] = cross_entropy_ref_row(ld + r * classes, classes, targets[r]);
    /* lse - logit: top + log(total) rounds relative to |top| + 1 (<= 90 here),
     * total carries ~(classes/16 + 16 + 2) u and exp 2 ulp: 1e-4 absolute
     * bounds 90 * (classes/16 + 24) u for up to 300 classes with margin */
    forward_check(losses, reference, rows, 0.0, 1e-4, what);

    float *dlogits = xmalloc(rows * classes, sizeof(float));
    uform_cross_entropy_backward(logits, rows, classes, targets, scale, dlogits);
    bool skipped = true;
    for (size_t r = 2; r < rows; r += 4)
        for (size_t c = 0; c < classes; c++)
            if (dlogits[r * classes + c] != 0.0f) skipped = false;
    CHECK(skipped, "%s: a row of scale 0 got a gradient", what);
    for (size_t r = 0; r < rows; r++) {
        if (scale[r] == 0.0f) continue;
        cross_entropy_ref_t e = {ld, r, classes, targets[r], scale[r]};
        gradient_t gradient = {0};
        for (size_t c = 0; c < classes; c++)
            gradient_add(&gradient, dlogits[r * classes + c],
                         central(cross_entropy_ref_loss, &e, &ld[r * classes + c], STEP));
        char name[160];
        snprintf(name, sizeof(name), "%s: row %zu", what, r);
        /* p_t - 1 is a cancellation: FP32 leaves ~u of the terms (p, 1) times scale */
        gradient_check(&gradient, name, 0.01, 0.01 * scale[r]);
    }
    float *dlogits2 = copy_floats(dlogits, rows * classes);
    uform_cross_entropy_backward(logits, rows, classes, targets, scale, dlogits2);
    CHECK(doubled(dlogits2, dlogits, rows * classes), "%s: a second backward does not double",
          what);
    free(logits); free(targets); free(scale); free(losses); free(ld); free(reference);
    free(dlogits); free(dlogits2);
}

int main(void) {
    if (uform_executor_for_ram(1, NULL, 0, &executors[0]) != UFORM_OK ||
        uform_executor_for_ram(3, NULL, 0, &executors[1]) != UFORM_OK) {
        printf("cannot create executors\n");
        return 2;
    }
    test_layer_norm(150, 64, 0.0f);
    test_layer_norm(150, 128, 3.0f);
    test_layer_norm(5, 40, -1.0f); /* a width that is not a multiple of 16 */
    test_gelu();
    test_rope(64, 1);
    test_rope(128, 1);
    test_rope(128, 2);

    const uform_segment_t mixed[] = {{0, 1, 1}, {1, 2, 1}, {3, 17, 1}, {20, 64, 1}};
    test_attention(64, 1.0f, mixed, 4, true);
    test_attention(128, 1.0f, mixed, 4, true);
    test_attention(128, 3.0f, mixed, 4, true);
    /* segments in any order, an empty one, and blocks of 64 rows across threads */
    const uform_segment_t long_segments[] = {{150, 1, 1}, {0, 150, 1}, {151, 0, 1}, {151, 33, 1}};
    test_attention(128, 1.0f, long_segments, 4, false);

    test_embedding(64);
    test_embedding(40);
    test_mean_pool();
    test_normalize(64);
    test_normalize(128);
    test_cross_entropy(7);
    test_cross_entropy(300);

    uform_executor_free(executors[0]);
    uform_executor_free(executors[1]);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
