/* test_cuda_ops.c: every operation the CUDA backend has (c/cuda/) against the
 * CPU backend on the same inputs, as test-backend-ops does for ggml: random
 * inputs uploaded, the operation run on the GPU, the result downloaded and
 * compared element by element with the CPU backend's (SERIAL class), which
 * tests/c/test_ops.c checks against float64. Prints one table row per check
 * and "N passed, M failed"; without a GPU (or without the CUDA backend) it
 * says why and exits 0 (make test-gpu).
 *
 * `make test-cuda-emulated` runs this file on the CPU against c/cuda/ under
 * an emulation of CUDA (c/cuda/emulation.h; UFORM_CUDA_EMULATION), with
 * smaller shapes where a block's threads would be too many host threads and
 * cuBLASLt replaced by a product on the host: every hand-written kernel
 * runs, cuBLASLt does not.
 *
 * Tolerances: where the GPU rounds operands to BF16 (the model's products,
 * attention on tensor cores), the CPU reference gets them rounded the same
 * way first, so what is compared is FP32 against FP32 (each check says what
 * is left). FP32 against FP32, the two backends differ only in the order
 * of their sums (block trees and cuBLASLt's kernels against the CPU's lanes)
 * and in expf/tanh against the CPU's fast_exp, each a few ulps: elementwise
 * operations 1e-5 relative to the output's largest magnitude; row sums over w
 * values w x 2^-24 of the sum of magnitudes, bounded here by 1e-4 of the
 * largest output at w <= 1024; products over k terms 2 k 2^-24 of sum |a||b|,
 * bounded by 1e-4 of the largest output at k <= 1024. */
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/sgemm.h"

#ifndef UFORM_HAVE_CUDA
#include <stdio.h>
int main(void) {
    printf("skip test_cuda_ops: this build has no CUDA backend (nvcc or the nvidia-cublas wheel was not "
           "found when it was built)\n");
    return 0;
}
#else
#include "../../c/cuda/cuda_backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed;
static uint64_t state = 0x2545f4914f6cdd1dull;

static float random_float(void) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return (float)((double)(state >> 11) * 0x1p-53 * 2.0 - 1.0);
}

static float *random_floats(size_t count, float scale) {
    float *values = malloc((count ? count : 1) * sizeof(float));
    for (size_t i = 0; i < count; i++) values[i] = random_float() * scale;
    return values;
}

typedef struct {
    uform_backend_t cpu, gpu;
} backends_t;

/* A device copy of host bytes. */
static void *on_gpu(backends_t *b, const void *host, size_t bytes) {
    void *device = b->gpu.ops->alloc(&b->gpu, bytes ? bytes : 1);
    if (device && bytes && host) b->gpu.ops->upload(&b->gpu, device, host, bytes);
    return device;
}

/* Makes the GPU's copy the CPU's again before an operation accumulates into it,
 * so each comparison sees one operation's differences, not the chain's. */
static void sync(backends_t *b, void *device, const float *host, size_t count) {
    b->gpu.ops->upload(&b->gpu, device, host, count * sizeof(float));
}

/* Downloads the GPU's result and compares it with the CPU's; one table row. */
static void compare(backends_t *b, const char *what, const float *cpu, const void *gpu_device, size_t count,
                    double relative) {
    float *gpu = malloc((count ? count : 1) * sizeof(float));
    b->gpu.ops->download(&b->gpu, gpu, gpu_device, count * sizeof(float));
    uform_status_t status = b->gpu.ops->synchronize(&b->gpu);
    double largest = 0, error = 0;
    for (size_t i = 0; i < count; i++) largest = fmax(largest, fabs((double)cpu[i]));
    for (size_t i = 0; i < count; i++) {
        double e = fabs((double)gpu[i] - (double)cpu[i]);
        if (!(e <= error)) error = isnan(e) ? INFINITY : e;
    }
    double bound = relative * (largest > 1e-30 ? largest : 1e-30);
    bool ok = status == UFORM_OK && error <= bound;
    printf("| %-34s | %8zu | %10.3g | %10.3g | %s |\n", what, count, error, bound,
           ok ? "ok" : status != UFORM_OK ? uform_last_error() : "FAIL");
    ok ? passed++ : failed++;
    free(gpu);
}

/* x rounded to BF16 (nearest even), in place: inputs the GPU's BF16 products
 * and attention take exactly. */
static void round_to_bf16(float *x, size_t count) {
    for (size_t i = 0; i < count; i++) x[i] = uform_bf16_to_f32(uform_f32_to_bf16(x[i]));
}

/* A copy of x rounded to BF16. */
static float *rounded_to_bf16(const float *x, size_t count) {
    float *copy = malloc((count ? count : 1) * sizeof(float));
    memcpy(copy, x, count * sizeof(float));
    round_to_bf16(copy, count);
    return copy;
}

static void test_gemm(backends_t *b, size_t m, size_t n, size_t k, bool ta, bool tb, bool bias, bool accumulate) {
    float *a = random_floats(m * k, 1), *bm = random_floats(k * n, 1), *c = random_floats(m * n, 1);
    float *bias_values = random_floats(n, 1);
    float *da = on_gpu(b, a, m * k * 4), *db = on_gpu(b, bm, k * n * 4), *dc = on_gpu(b, c, m * n * 4);
    float *dbias = on_gpu(b, bias_values, n * 4);
    uform_matrix_t ca = {a, ta ? m : k, ta}, cb = {bm, tb ? k : n, tb};
    uform_matrix_t ga = {da, ta ? m : k, ta}, gb = {db, tb ? k : n, tb};
    b->cpu.ops->gemm(&b->cpu, m, n, k, ca, cb, bias ? bias_values : NULL, accumulate, c, n);
    b->gpu.ops->gemm(&b->gpu, m, n, k, ga, gb, bias ? dbias : NULL, accumulate, dc, n);
    char what[96];
    snprintf(what, sizeof(what), "gemm %zux%zux%zu%s%s%s%s", m, n, k, ta ? " aT" : "", tb ? " bT" : "",
             bias ? " +bias" : "", accumulate ? " +=" : "");
    compare(b, what, c, dc, m * n, 1e-4);
    b->gpu.ops->free(&b->gpu, da), b->gpu.ops->free(&b->gpu, db), b->gpu.ops->free(&b->gpu, dc);
    b->gpu.ops->free(&b->gpu, dbias);
    free(a), free(bm), free(c), free(bias_values);
}

/* The trainer's products on dense FP32 weights: the GPU rounds the weights,
 * the activations and the gradient dy to BF16 and sums in FP32 (gemm.cu), so
 * the CPU reference gets those operands rounded the same way first (the GPU
 * the raw ones: its rounding is checked too); what is left is the order of
 * the sums (1e-4 as for gemm). The bias gradient sums the raw dy in FP32 on
 * both. */
/* offset: the gradients, biases and outputs start that many floats into
 * their allocations (a slice of the trainer's flat buffers can be 4-byte
 * aligned: cuBLASLt's plans for such pointers, and the bias added after the
 * product). */
/* offset 1: the outputs, the bias and x 4-byte aligned only. */
/* Three device buffers of floats downloaded, then one synchronize. */
static void op_download3(backends_t *b, const float *a, float *a_host, size_t a_count, const float *c,
                         float *c_host, size_t c_count, const float *d, float *d_host, size_t d_count) {
    b->gpu.ops->download(&b->gpu, a_host, a, a_count * 4);
    b->gpu.ops->download(&b->gpu, c_host, c, c_count * 4);
    b->gpu.ops->download(&b->gpu, d_host, d, d_count * 4);
    b->gpu.ops->synchronize(&b->gpu);
}

static float *downloaded_bf16(backends_t *b, const float *gpu_device, size_t count);
static void compare_bf16(backends_t *b, const char *what, const float *want, const uint16_t *gpu_device,
                         size_t count, double relative, double absolute);
static uint16_t *bf16_on_gpu(backends_t *b, const float *x, size_t count);

static void test_linear_backward(backends_t *b, size_t rows, size_t n, size_t k, size_t offset) {
    float *w = random_floats(n * k, 0.1f), *x = random_floats(rows * k, 1), *dy = random_floats(rows * n, 1);
    float *dw = random_floats(n * k, 1), *dbias = random_floats(n, 1), *dx = random_floats(rows * k, 1);
    float *w16 = rounded_to_bf16(w, n * k), *x16 = rounded_to_bf16(x, rows * k), *dy16 = rounded_to_bf16(dy, rows * n);
    float *gw = on_gpu(b, w, n * k * 4), *gdy = on_gpu(b, dy, rows * n * 4);
    float *gdw_base = on_gpu(b, NULL, (n * k + offset) * 4), *gdbias_base = on_gpu(b, NULL, (n + offset) * 4);
    float *gdw = gdw_base + offset, *gdbias = gdbias_base + offset, *gdx = on_gpu(b, dx, rows * k * 4);
    /* x too at the offset: its rounding to BF16 then takes the scalar kernel (gemm.cu) */
    float *gx_base = on_gpu(b, NULL, (rows * k + offset) * 4), *gx = gx_base + offset;
    sync(b, gx, x, rows * k);
    sync(b, gdw, dw, n * k);
    sync(b, gdbias, dbias, n);
    uform_weight_t cw = {NULL, w16, n, k}, gwt = {NULL, gw, n, k};
    b->cpu.ops->linear_backward(&b->cpu, &cw, x16, dy16, rows, dw, NULL, dx, true);
    b->cpu.ops->linear_backward(&b->cpu, &cw, x16, dy, rows, NULL, dbias, NULL, true);
    b->gpu.ops->linear_backward(&b->gpu, &gwt, gx, gdy, rows, gdw, gdbias, gdx, true);
    compare(b, "linear_backward dW", dw, gdw, n * k, 1e-4);
    compare(b, "linear_backward dbias", dbias, gdbias, n, 1e-4);
    compare(b, "linear_backward dx", dx, gdx, rows * k, 1e-4);
    {   /* linear_backward_bf16 (training's operands kept in BF16): the FP32
         * op's results on the same GPU, bit for bit (bound 0), from x's BF16
         * words; the GPU's results above are the starting values of both */
        float *got_dw = malloc(n * k * 4), *got_dbias = malloc(n * 4), *got_dx = malloc(rows * k * 4);
        op_download3(b, gdw, got_dw, n * k, gdbias, got_dbias, n, gdx, got_dx, rows * k);
        uint16_t *gx16 = bf16_on_gpu(b, x16, rows * k);
        b->gpu.ops->linear_backward(&b->gpu, &gwt, gx, gdy, rows, gdw, gdbias, gdx, true);
        float *want_dw = malloc(n * k * 4), *want_dbias = malloc(n * 4), *want_dx = malloc(rows * k * 4);
        op_download3(b, gdw, want_dw, n * k, gdbias, want_dbias, n, gdx, want_dx, rows * k);
        sync(b, gdw, got_dw, n * k), sync(b, gdbias, got_dbias, n), sync(b, gdx, got_dx, rows * k);
        b->gpu.ops->linear_backward_bf16(&b->gpu, &gwt, gx16, gdy, rows, gdw, gdbias, gdx, true);
        compare(b, "linear_backward_bf16 dW (= FP32's)", want_dw, gdw, n * k, 0);
        compare(b, "linear_backward_bf16 dbias (= FP32's)", want_dbias, gdbias, n, 0);
        compare(b, "linear_backward_bf16 dx (= FP32's)", want_dx, gdx, rows * k, 0);
        sync(b, gdbias, dbias, n);
        b->gpu.ops->free(&b->gpu, gx16);
        free(got_dw), free(got_dbias), free(got_dx), free(want_dw), free(want_dbias), free(want_dx);
    }
    float *y = random_floats(rows * n, 1), *pre = random_floats(rows * n, 1);
    float *gy_base = on_gpu(b, NULL, (rows * n + offset) * 4), *gy = gy_base + offset;
    float *gpre = on_gpu(b, pre, rows * n * 4);
    sync(b, gy, y, rows * n);
    sync(b, gdbias, dbias, n);
    b->cpu.ops->linear_gelu(&b->cpu, &cw, x16, k, rows, dbias, pre, y);
    b->gpu.ops->linear_gelu(&b->gpu, &gwt, gx, k, rows, gdbias, gpre, gy);
    compare(b, "linear_gelu pre", pre, gpre, rows * n, 1e-4);
    compare(b, "linear_gelu y", y, gy, rows * n, 1e-4);
    {   /* gelu_forward_bf16: the FP32 op's output rounded, bit for bit */
        uint16_t *gy16 = on_gpu(b, NULL, rows * n * 2);
        b->gpu.ops->gelu_forward_bf16(&b->gpu, gpre, rows * n, gy16);
        b->gpu.ops->gelu_forward(&b->gpu, gpre, rows * n, gy);
        float *want = downloaded_bf16(b, gy, rows * n);
        compare_bf16(b, "gelu_forward_bf16 (= FP32's)", want, gy16, rows * n, 0, 0);
        free(want);
        b->gpu.ops->free(&b->gpu, gy16);
    }
    {   /* gelu_linear_backward_bf16 (the up projection's backward through
         * GELU, its dy never stored in FP32): gelu_backward into zeros, then
         * linear_backward_bf16 (dx overwritten), on the same GPU, bit for bit
         * (bound 0); dy is gelu's output gradient, pre its input */
        uint16_t *gx16 = bf16_on_gpu(b, x16, rows * k);
        float *gd = on_gpu(b, NULL, rows * n * 4);
        float *start_dw = malloc(n * k * 4), *start_dbias = malloc(n * 4), *noise = random_floats(rows * k, 1);
        float *want_dw = malloc(n * k * 4), *want_dbias = malloc(n * 4), *want_dx = malloc(rows * k * 4);
        op_download3(b, gdw, start_dw, n * k, gdbias, start_dbias, n, gdx, want_dx, rows * k);
        b->gpu.ops->zero(&b->gpu, gd, rows * n * 4);
        b->gpu.ops->gelu_backward(&b->gpu, gpre, gdy, rows * n, gd);
        b->gpu.ops->linear_backward_bf16(&b->gpu, &gwt, gx16, gd, rows, gdw, gdbias, gdx, false);
        op_download3(b, gdw, want_dw, n * k, gdbias, want_dbias, n, gdx, want_dx, rows * k);
        sync(b, gdw, start_dw, n * k), sync(b, gdbias, start_dbias, n), sync(b, gdx, noise, rows * k);
        if (b->gpu.ops->gelu_linear_backward_bf16)
            b->gpu.ops->gelu_linear_backward_bf16(&b->gpu, &gwt, gx16, gpre, gdy, rows, gdw, gdbias, gdx);
        else
            printf("| gelu_linear_backward_bf16: not set by the CUDA backend | FAIL |\n"), failed++;
        compare(b, "gelu_linear_backward dW (= 2 ops)", want_dw, gdw, n * k, 0);
        compare(b, "gelu_linear_backward db (= 2 ops)", want_dbias, gdbias, n, 0);
        compare(b, "gelu_linear_backward dx (= 2 ops)", want_dx, gdx, rows * k, 0);
        sync(b, gdbias, dbias, n);
        b->gpu.ops->free(&b->gpu, gx16), b->gpu.ops->free(&b->gpu, gd);
        free(start_dw), free(start_dbias), free(noise), free(want_dw), free(want_dbias), free(want_dx);
    }
    sync(b, gy, y, rows * n);
    b->cpu.ops->linear(&b->cpu, &cw, x16, k, rows, NULL, true, y, n);
    b->gpu.ops->linear(&b->gpu, &gwt, gx, k, rows, NULL, true, gy, n);
    compare(b, "linear (dense) +=", y, gy, rows * n, 1e-4);
    void *all[] = {gw, gx_base, gdy, gdw_base, gdbias_base, gdx, gy_base, gpre};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) b->gpu.ops->free(&b->gpu, all[i]);
    free(w), free(x), free(dy), free(dw), free(dbias), free(dx), free(y), free(pre), free(w16), free(x16), free(dy16);
}

/* rope_linear_backward_bf16 (the qkv projection's backward through the
 * rotary positions, the rotation made in the pass that rounds dqkv):
 * rope_backward of a copy of dqkv, then linear_backward_bf16 (dx
 * overwritten), on the same GPU, bit for bit (bound 0); dqkv left as it
 * was. w [3H, H], random cosines and sines (any serve). */
static void test_rope_linear_backward(backends_t *b, size_t rows, size_t hidden) {
    size_t n = 3 * hidden, k = hidden;
    float *w = random_floats(n * k, 0.1f), *x = random_floats(rows * k, 1), *dqkv = random_floats(rows * n, 1);
    float *cosines = random_floats(rows * UFORM_PAIRS, 1), *sines = random_floats(rows * UFORM_PAIRS, 1);
    float *dw = random_floats(n * k, 1), *dbias = random_floats(n, 1), *noise = random_floats(rows * k, 1);
    float *want_dw = malloc(n * k * 4), *want_dbias = malloc(n * 4), *want_dx = malloc(rows * k * 4);
    float *after = malloc(rows * n * 4);
    float *x16 = rounded_to_bf16(x, rows * k);
    uint16_t *gx16 = bf16_on_gpu(b, x16, rows * k);
    float *gw = on_gpu(b, w, n * k * 4), *gdqkv = on_gpu(b, dqkv, rows * n * 4), *grotated = on_gpu(b, dqkv, rows * n * 4);
    float *gcosines = on_gpu(b, cosines, rows * UFORM_PAIRS * 4), *gsines = on_gpu(b, sines, rows * UFORM_PAIRS * 4);
    float *gdw = on_gpu(b, dw, n * k * 4), *gdbias = on_gpu(b, dbias, n * 4), *gdx = on_gpu(b, noise, rows * k * 4);
    uform_weight_t gwt = {NULL, gw, n, k};
    b->gpu.ops->rope_backward(&b->gpu, grotated, rows, hidden, gcosines, gsines);
    b->gpu.ops->linear_backward_bf16(&b->gpu, &gwt, gx16, grotated, rows, gdw, gdbias, gdx, false);
    op_download3(b, gdw, want_dw, n * k, gdbias, want_dbias, n, gdx, want_dx, rows * k);
    sync(b, gdw, dw, n * k), sync(b, gdbias, dbias, n), sync(b, gdx, noise, rows * k);
    if (b->gpu.ops->rope_linear_backward_bf16)
        b->gpu.ops->rope_linear_backward_bf16(&b->gpu, &gwt, gx16, gdqkv, gcosines, gsines, rows, gdw, gdbias, gdx);
    else
        printf("| rope_linear_backward_bf16: not set by the CUDA backend | FAIL |\n"), failed++;
    compare(b, "rope_linear_backward dW (= 2 ops)", want_dw, gdw, n * k, 0);
    compare(b, "rope_linear_backward db (= 2 ops)", want_dbias, gdbias, n, 0);
    compare(b, "rope_linear_backward dx (= 2 ops)", want_dx, gdx, rows * k, 0);
    b->gpu.ops->download(&b->gpu, after, gdqkv, rows * n * 4);
    bool kept = b->gpu.ops->synchronize(&b->gpu) == UFORM_OK && memcmp(after, dqkv, rows * n * 4) == 0;
    printf("| %-34s | %8zu | %10s | %10s | %s |\n", "rope_linear_backward keeps dqkv", rows * n, "", "",
           kept ? "ok" : "FAIL");
    kept ? passed++ : failed++;
    void *all[] = {gx16, gw, gdqkv, grotated, gcosines, gsines, gdw, gdbias, gdx};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) b->gpu.ops->free(&b->gpu, all[i]);
    free(w), free(x), free(dqkv), free(cosines), free(sines), free(dw), free(dbias), free(noise), free(want_dw),
        free(want_dbias), free(want_dx), free(after), free(x16);
}

/* The column sums' kernels of four columns a thread (columns.cu) against
 * those of one, bit for bit (bound 0): every op that sums columns, from the
 * same starting values, with uform_cuda_column_lanes 1 and then the default;
 * the default must have taken four (the widths are multiples of 4, the
 * buffers aligned). Widths H, 3H (the qkv backward's rotation) and 4H (the
 * up projection's GELU); rows over several chunks. */
typedef struct {
    size_t rows, hidden, picks;
    float *host[12], *gpu[12];   /* starting values, and their GPU copies */
    size_t count[12];
    uint16_t *x16;
    size_t *which;
} column_case_t;

enum { CC_W3, CC_W4, CC_W1, CC_X, CC_DQKV, CC_DY4, CC_PRE, CC_DY1, CC_TABLES, CC_LN_X, CC_STATS, CC_OUT };

/* Runs the ops with `lanes`, every output downloaded into result (the
 * outputs' counts summed), each op from the case's starting values. */
static size_t column_case_run(backends_t *b, column_case_t *cc, size_t lanes, float *result) {
    size_t rows = cc->rows, h = cc->hidden;
    float **g = cc->gpu;
    for (int i = 0; i < 12; i++) sync(b, g[i], cc->host[i], cc->count[i]);
    uform_cuda_column_lanes(&b->gpu, lanes);
    /* the outputs: dW, dbias, dx of three products; layer norm dx, dweight,
     * dbias; sum_rows; a lone bias gradient (no products: the FP32 sums) */
    float *out = g[CC_OUT], *dw3 = out, *db3 = dw3 + 3 * h * h, *dx3 = db3 + 3 * h;
    float *dw4 = dx3 + rows * h, *db4 = dw4 + 4 * h * h, *dx4 = db4 + 4 * h;
    float *dw1 = dx4 + rows * h, *db1 = dw1 + h * h, *dx1 = db1 + h;
    float *ln_dx = dx1 + rows * h, *ln_dw = ln_dx + rows * h, *ln_db = ln_dw + h, *sums = ln_db + h;
    float *lone = sums + h, *end = lone + h;
    uform_weight_t w3 = {NULL, g[CC_W3], 3 * h, h}, w4 = {NULL, g[CC_W4], 4 * h, h}, w1 = {NULL, g[CC_W1], h, h};
    float *cosines = g[CC_TABLES], *sines = cosines + rows * UFORM_PAIRS, *mean = g[CC_STATS], *rstd = mean + rows;
    b->gpu.ops->rope_linear_backward_bf16(&b->gpu, &w3, cc->x16, g[CC_DQKV], cosines, sines, rows, dw3, db3, dx3);
    size_t used = uform_cuda_column_lanes_last(&b->gpu);
    b->gpu.ops->gelu_linear_backward_bf16(&b->gpu, &w4, cc->x16, g[CC_PRE], g[CC_DY4], rows, dw4, db4, dx4);
    used = used < uform_cuda_column_lanes_last(&b->gpu) ? used : uform_cuda_column_lanes_last(&b->gpu);
    b->gpu.ops->linear_backward(&b->gpu, &w1, g[CC_X], g[CC_DY1], rows, dw1, db1, dx1, true);
    used = used < uform_cuda_column_lanes_last(&b->gpu) ? used : uform_cuda_column_lanes_last(&b->gpu);
    b->gpu.ops->layer_norm_backward(&b->gpu, g[CC_DY1], g[CC_LN_X], g[CC_W1], mean, rstd, rows, h, ln_dx, ln_dw, ln_db);
    used = used < uform_cuda_column_lanes_last(&b->gpu) ? used : uform_cuda_column_lanes_last(&b->gpu);
    b->gpu.ops->sum_rows(&b->gpu, g[CC_LN_X], h, cc->which, cc->picks, sums);
    used = used < uform_cuda_column_lanes_last(&b->gpu) ? used : uform_cuda_column_lanes_last(&b->gpu);
    b->gpu.ops->linear_backward(&b->gpu, &w1, g[CC_X], g[CC_DY1], rows, NULL, lone, NULL, true);
    used = used < uform_cuda_column_lanes_last(&b->gpu) ? used : uform_cuda_column_lanes_last(&b->gpu);
    uform_cuda_column_lanes(&b->gpu, 0);
    size_t total = (size_t)(end - out);
    b->gpu.ops->download(&b->gpu, result, out, total * 4);
    b->gpu.ops->synchronize(&b->gpu);
    return used;
}

static void test_column_lanes(backends_t *b, size_t rows, size_t hidden) {
    size_t h = hidden;
    column_case_t cc = {.rows = rows, .hidden = h, .picks = rows / 2 + 3};
    size_t outputs = 3 * h * h + 3 * h + rows * h + 4 * h * h + 4 * h + rows * h + h * h + h + rows * h +
                     rows * h + 2 * h + 2 * h;
    size_t counts[12] = {3 * h * h, 4 * h * h, h * h, rows * h, rows * 3 * h, rows * 4 * h, rows * 4 * h, rows * h,
                         2 * rows * UFORM_PAIRS, rows * h, 2 * rows, outputs};
    for (int i = 0; i < 12; i++) {
        cc.count[i] = counts[i];
        cc.host[i] = random_floats(counts[i], i < 3 ? 0.1f : 1.0f);
        cc.gpu[i] = on_gpu(b, cc.host[i], counts[i] * 4);
    }
    for (size_t r = 0; r < rows; r++) cc.host[CC_STATS][rows + r] = 0.5f + fabsf(cc.host[CC_STATS][rows + r]);
    float *x16 = rounded_to_bf16(cc.host[CC_X], rows * h);
    cc.x16 = bf16_on_gpu(b, x16, rows * h);
    size_t *which = malloc(cc.picks * sizeof(size_t));
    for (size_t i = 0; i < cc.picks; i++) which[i] = (i * 11) % rows;
    cc.which = on_gpu(b, which, cc.picks * sizeof(size_t));
    float *one = malloc(outputs * 4), *four = malloc(outputs * 4);
    size_t used_one = column_case_run(b, &cc, 1, one), used_four = column_case_run(b, &cc, 0, four);
    bool lanes_ok = used_one == 1 && used_four == 4;
    printf("| %-34s | %8zu | %10zu | %10zu | %s |\n", "column sums' lanes (1, then 4)", rows * h, used_one,
           used_four, lanes_ok ? "ok" : "FAIL");
    lanes_ok ? passed++ : failed++;
    size_t differ = 0;
    for (size_t i = 0; i < outputs; i++) differ += memcmp(one + i, four + i, 4) != 0;
    printf("| %-34s | %8zu | %10zu | %10s | %s |\n", "column sums x4 = x1 (bits)", outputs, differ, "0",
           differ == 0 ? "ok" : "FAIL");
    differ == 0 ? passed++ : failed++;
    {   /* the choice itself: four columns a thread only where every row's four
         * values are one aligned 16-byte load (a misaligned float4 load stops a
         * GPU's context; the emulation would not notice) */
        float *dy = cc.gpu[CC_DY4], *sums = cc.gpu[CC_OUT];
        struct { const char *what; const float *dy; size_t width, want; } cases[] = {
            {"width 4H: four", dy, 4 * h, 4}, {"width 37: one", dy, 37, 1},
            {"width 4H - 2: one", dy, 4 * h - 2, 1}, {"dy 4-byte aligned: one", dy + 1, 4 * h - 4, 1}};
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            uform_cuda_column_pass(&b->gpu, cases[i].dy, NULL, NULL, NULL, rows / 2, cases[i].width, true, sums);
            uform_cuda_column_pass(&b->gpu, cases[i].dy, NULL, NULL, NULL, rows / 2, cases[i].width, false, sums);
            size_t got = uform_cuda_column_lanes_last(&b->gpu);
            bool ok = b->gpu.ops->synchronize(&b->gpu) == UFORM_OK && got == cases[i].want;
            printf("| column sums' lanes, %-19s | %8zu | %10zu | %10zu | %s |\n", cases[i].what, cases[i].width, got,
                   cases[i].want, ok ? "ok" : "FAIL");
            ok ? passed++ : failed++;
        }
    }
    for (int i = 0; i < 12; i++) b->gpu.ops->free(&b->gpu, cc.gpu[i]), free(cc.host[i]);
    b->gpu.ops->free(&b->gpu, cc.x16), b->gpu.ops->free(&b->gpu, cc.which);
    free(x16), free(which), free(one), free(four);
}

/* Products on packed (BF16) weights: the GPU rounds the activations to BF16
 * and sums in FP32, so the CPU reference gets activations rounded the same
 * way first; what is left is the order of the sums (1e-4 as for gemm). */
static void test_packed(backends_t *b, size_t rows, size_t n, size_t k) {
    float *x = random_floats(rows * k, 1), *bias = random_floats(n, 1), *y = random_floats(rows * n, 1);
    uint16_t *w = malloc(n * k * sizeof(uint16_t));
    for (size_t i = 0; i < n * k; i++) w[i] = uform_f32_to_bf16(random_float() * 0.1f);
    float *x16 = malloc(rows * k * sizeof(float));
    for (size_t i = 0; i < rows * k; i++) x16[i] = uform_bf16_to_f32(uform_f32_to_bf16(x[i]));
    uform_packed_t cpu_packed, gpu_packed;
    bool packed = b->cpu.ops->pack(&b->cpu, w, n, k, &cpu_packed) == UFORM_OK &&
                  b->gpu.ops->pack(&b->gpu, w, n, k, &gpu_packed) == UFORM_OK;
    printf("| %-34s | %8zu | %10s | %10s | %s |\n", "pack (BF16)", n * k, "", "", packed ? "ok" : uform_last_error());
    packed ? passed++ : failed++;
    if (packed) {
        float *gx = on_gpu(b, x, rows * k * 4), *gbias = on_gpu(b, bias, n * 4), *gy = on_gpu(b, y, rows * n * 4);
        uform_weight_t cw = {&cpu_packed, NULL, n, k}, gw = {&gpu_packed, NULL, n, k};
        b->cpu.ops->linear(&b->cpu, &cw, x16, k, rows, bias, true, y, n);
        b->gpu.ops->linear(&b->gpu, &gw, gx, k, rows, gbias, true, gy, n);
        compare(b, "linear packed +bias +=", y, gy, rows * n, 1e-4);
        float *pre = random_floats(rows * n, 1), *gpre = on_gpu(b, pre, rows * n * 4);
        b->cpu.ops->linear_gelu(&b->cpu, &cw, x16, k, rows, bias, pre, y);
        b->gpu.ops->linear_gelu(&b->gpu, &gw, gx, k, rows, gbias, gpre, gy);
        compare(b, "linear_gelu packed y", y, gy, rows * n, 1e-4);
        b->cpu.ops->packed_free(&b->cpu, &cpu_packed);
        b->gpu.ops->packed_free(&b->gpu, &gpu_packed);
        void *all[] = {gx, gbias, gy, gpre};
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) b->gpu.ops->free(&b->gpu, all[i]);
        free(pre);
    }
    free(x), free(bias), free(y), free(w), free(x16);
}

/* OCP E4M3 as a double, written here from the specification (not the
 * library's decoder): bias 7, 3 mantissa bits, S.1111.111 NaN. */
static double e4m3_value(uint8_t code) {
    unsigned exponent = (code >> 3) & 15u, mantissa = code & 7u;
    double magnitude = exponent == 15 && mantissa == 7 ? NAN
                       : exponent == 0                 ? ldexp((double)mantissa, -9)
                                                       : ldexp((double)(8 + mantissa), (int)exponent - 10);
    return code & 0x80u ? -magnitude : magnitude;
}

/* The nearest E4M3 value to v (ties to the even code), saturating at 448:
 * by search over the 127 finite magnitudes, so it shares nothing with the
 * kernels' conversion. */
static double e4m3_nearest(double v) {
    double magnitude = fabs(v), best = 0;
    unsigned best_code = 0;
    for (unsigned code = 0; code < 0x7f; code++) {
        double candidate = e4m3_value((uint8_t)code), distance = fabs(candidate - magnitude);
        double best_distance = fabs(best - magnitude);
        if (distance < best_distance || (distance == best_distance && (code & 1u) == 0 && (best_code & 1u))) {
            best = candidate;
            best_code = code;
        }
    }
    if (magnitude >= 448) best = 448;
    return v < 0 ? -best : best;
}

/* The FP8 product of gemm_fp8.cu, in double from its documented rule: row
 * r's scale s = amax / 448 in FP32 (1 for a zero row), its values
 * e4m3(float(x / s)) x s, times the decoded weights.
 * y[r, j] += sum_p w[j, p] x8[r, p] + bias[j]. */
static void fp8_linear_reference(const float *x, size_t rows, size_t k, const uint8_t *codes, const float *scales,
                                 size_t n, const float *bias, float *y) {
    double *x8 = malloc(k * sizeof(double));
    for (size_t r = 0; r < rows; r++) {
        float amax = 0.0f;
        for (size_t p = 0; p < k; p++) amax = fmaxf(amax, fabsf(x[r * k + p]));
        float s = amax / 448.0f;
        if (!(s > 0.0f)) s = 1.0f;
        for (size_t p = 0; p < k; p++) x8[p] = e4m3_nearest((double)(x[r * k + p] / s)) * (double)s;
        for (size_t j = 0; j < n; j++) {
            double sum = 0;
            for (size_t p = 0; p < k; p++) sum += e4m3_value(codes[j * k + p]) * (double)scales[j] * x8[p];
            y[r * n + j] = (float)((double)y[r * n + j] + sum + (double)bias[j]);
        }
    }
    free(x8);
}

/* count random E4M3 codes, any byte but the two NaNs (one random_float each) */
static void random_e4m3_codes(uint8_t *codes, size_t count) {
    for (size_t i = 0; i < count; i++) {
        random_float();
        codes[i] = (uint8_t)(state >> 24);
        if ((codes[i] & 0x7f) == 0x7f) codes[i] ^= 1;
    }
}

/* E4M3 weights (codes, and a power-of-two scale per row; NaN codes left
 * out, the quantizer never writes them); unpack gives back the bytes packed.
 * The product takes one of two ways by the GPU's class (gemm_fp8.cu):
 * - AMPERE: the weights decoded to BF16 exactly, the activations rounded to
 *   BF16, as on the CPU: the CPU backend is the reference, at the BF16
 *   products' tolerance (1e-4, test_packed);
 * - ADA and later (the emulation is HOPPER): FP8 products, the activations
 *   quantized per row; the reference is the documented rule in double
 *   (fp8_linear_reference). Tolerance: under the emulation the codes'
 *   products are exact and only their FP32 sum over k = 64 rounds (64 x
 *   2^-24 of the largest output, bounded by 1e-5); on a GPU, Hopper's FP8
 *   tensor cores keep fewer bits while accumulating (about 14, DeepSeek-V3
 *   technical report, section 3.3.2): 1e-3 of the largest output. A code
 *   off by one step moves a product by 2^-4 of its term: caught by 1e-5.
 *   Both of gemm_fp8.cu's ways: cuBLASLt applying the scales and the bias
 *   (rounded to BF16 first: so is the reference's) where it accepts that,
 *   and our scales' pass (uform_cuda_fp8_scaled_off). */
static void test_packed_e4m3(backends_t *b, size_t rows, size_t n, size_t k) {
    float *x = random_floats(rows * k, 1), *bias = random_floats(n, 1), *y = random_floats(rows * n, 1);
    uint8_t *codes = malloc(n * k), *codes_back = malloc(n * k);
    float *scales = malloc(n * sizeof(float)), *scales_back = malloc(n * sizeof(float));
    random_e4m3_codes(codes, n * k);
    for (size_t i = 0; i < n; i++) scales[i] = ldexpf(1.0f, -8 - (int)(i % 5));
    for (size_t i = 0; i < k; i++) x[3 * k + i] = 0.0f;   /* a row of zeros: scale 1, no division by zero */
    uform_gpu_class_t gpu_class = UFORM_GPU_CLASS_NONE;
    uform_cuda_device_class(0, &gpu_class, NULL, 0);
    bool fp8 = gpu_class >= UFORM_GPU_CLASS_ADA;
    float *x16 = malloc(rows * k * sizeof(float));
    for (size_t i = 0; i < rows * k; i++) x16[i] = uform_bf16_to_f32(uform_f32_to_bf16(x[i]));
    uform_packed_t cpu_packed, gpu_packed;
    bool packed = b->cpu.ops->pack_e4m3(&b->cpu, codes, scales, n, k, &cpu_packed) == UFORM_OK &&
                  b->gpu.ops->pack_e4m3(&b->gpu, codes, scales, n, k, &gpu_packed) == UFORM_OK;
    bool back = packed && b->gpu.ops->unpack_e4m3(&b->gpu, &gpu_packed, codes_back, scales_back) == UFORM_OK &&
                memcmp(codes, codes_back, n * k) == 0 && memcmp(scales, scales_back, n * sizeof(float)) == 0;
    printf("| %-34s | %8zu | %10s | %10s | %s |\n", "pack_e4m3, unpack_e4m3", n * k, "", "",
           back ? "ok" : packed ? "FAIL" : uform_last_error());
    back ? passed++ : failed++;
    if (packed) {
        float *gx = on_gpu(b, x, rows * k * 4), *gbias = on_gpu(b, bias, n * 4), *gy = on_gpu(b, y, rows * n * 4);
        uform_weight_t cw = {&cpu_packed, NULL, n, k}, gw = {&gpu_packed, NULL, n, k};
        if (fp8) {
#ifdef UFORM_CUDA_EMULATION
            double tolerance = 1e-5;
#else
            double tolerance = 1e-3;
#endif
            float *y_before = malloc(rows * n * sizeof(float)), *bias16 = rounded_to_bf16(bias, n);
            memcpy(y_before, y, rows * n * sizeof(float));
            for (int plain = 0; plain < 2; plain++) {   /* cuBLASLt's scales where accepted, then our pass */
                memcpy(y, y_before, rows * n * sizeof(float));
                sync(b, gy, y, rows * n);
                uform_cuda_fp8_scaled_off(&b->gpu, plain);
                b->gpu.ops->linear(&b->gpu, &gw, gx, k, rows, gbias, true, gy, n);
                b->gpu.ops->synchronize(&b->gpu);
                bool scaled = uform_cuda_fp8_scaled(&b->gpu);
                fp8_linear_reference(x, rows, k, codes, scales, n, scaled ? bias16 : bias, y);
                const char *refusal = uform_cuda_fp8_refusal(&b->gpu);
                const char *what = scaled ? "linear E4M3 FP8 +bias += (cuBLASLt)" : "linear E4M3 FP8 +bias += (ours)";
                if (refusal) {   /* decoded to BF16 instead: the FP8 rule cannot hold; say why */
                    printf("| %-34s | %8zu | %10s | %10s | FAIL: %s |\n", what, rows * n, "", "", refusal);
                    failed++;
                } else {
                    compare(b, what, y, gy, rows * n, tolerance);
                }
                if (!plain && !scaled && uform_cuda_fp8_scaled_refusal(&b->gpu, 0))
                    printf("  (%s)\n", uform_cuda_fp8_scaled_refusal(&b->gpu, 0));
            }
            uform_cuda_fp8_scaled_off(&b->gpu, false);
            free(y_before), free(bias16);
        } else {
            b->gpu.ops->linear(&b->gpu, &gw, gx, k, rows, gbias, true, gy, n);
            b->cpu.ops->linear(&b->cpu, &cw, x16, k, rows, bias, true, y, n);
            compare(b, "linear E4M3 +bias +=", y, gy, rows * n, 1e-4);
        }
        /* one-hot rows read the decoded weights back: every code's value,
         * exactly through BF16; through FP8 the hot element is quantized to
         * 448 with scale fl(1/448), whose product is 1 within 2^-24 */
        float *eye = calloc(k * k, sizeof(float)), *w_cpu = malloc(k * n * sizeof(float));
        for (size_t p = 0; p < k; p++) eye[p * k + p] = 1.0f;
        float *geye = on_gpu(b, eye, k * k * 4), *gw_out = on_gpu(b, NULL, k * n * 4);
        b->cpu.ops->linear(&b->cpu, &cw, eye, k, k, NULL, false, w_cpu, n);
        b->gpu.ops->linear(&b->gpu, &gw, geye, k, k, NULL, false, gw_out, n);
        compare(b, fp8 ? "E4M3 decoded weights (FP8 x 1)" : "E4M3 decoded weights (exact)", w_cpu, gw_out, k * n,
                fp8 ? 1e-6 : 0);
        b->gpu.ops->free(&b->gpu, geye), b->gpu.ops->free(&b->gpu, gw_out);
        free(eye), free(w_cpu);
        b->cpu.ops->packed_free(&b->cpu, &cpu_packed);
        b->gpu.ops->packed_free(&b->gpu, &gpu_packed);
        void *all[] = {gx, gbias, gy};
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) b->gpu.ops->free(&b->gpu, all[i]);
    }
    free(x), free(bias), free(y), free(codes), free(codes_back), free(scales), free(scales_back), free(x16);
}

/* cuBLASLt's fused forms (its GELU epilogue, its own FP8 scales, BF16 out)
 * fall back quietly where cuBLASLt refuses them, which is right on a GPU
 * class where they never ran, and hid a refusal of our own making for a
 * session (the FP8 scales' pointers set after the heuristic: docs/gpu-fp8-
 * probe.md). On HOPPER, where an H100 and cuBLASLt 13.1 accept each of them
 * (2026-12-05), a fallback is a failure here, with cuBLASLt's words; on
 * other classes, and under the emulation, the row says which way ran. */
static void require_fused(const char *what, bool ran, const char *refusal) {
    uform_gpu_class_t gpu_class = UFORM_GPU_CLASS_NONE;
    uform_cuda_device_class(0, &gpu_class, NULL, 0);
#ifdef UFORM_CUDA_EMULATION   /* an emulated HOPPER: cuBLASLt's GELU is not emulated */
    gpu_class = UFORM_GPU_CLASS_NONE;
#endif
    bool ok = ran || gpu_class != UFORM_GPU_CLASS_HOPPER;
    printf("| %-34s | %8s | %10s | %10s | %s |\n", what, "", ran ? "ran" : "fell back", "",
           ok ? "ok" : "FAIL");
    if (!ran && refusal) printf("  (%s)\n", refusal);
    ok ? passed++ : failed++;
}

/* ---- BF16 operands (backend.h: inference's layer_norm_forward_bf16,
 * attention_forward_bf16, linear_bf16, linear_gelu_bf16) ---------------------
 * Each against its FP32 twin on the same GPU, whose output rounded to BF16
 * (nearest even, uform_f32_to_bf16 on the host) is what the BF16 op must
 * write: the same kernels and the same cuBLASLt plans, so bit for bit (max
 * error 0), except linear_gelu_bf16 where cuBLASLt's GELU epilogue runs
 * (below). */

/* The BF16 words at gpu_device against want (FP32 values already rounded to
 * BF16): bound = relative x the largest |want| + absolute. */
static void compare_bf16(backends_t *b, const char *what, const float *want, const uint16_t *gpu_device, size_t count,
                         double relative, double absolute) {
    uint16_t *words = malloc((count ? count : 1) * sizeof(uint16_t));
    b->gpu.ops->download(&b->gpu, words, gpu_device, count * sizeof(uint16_t));
    uform_status_t status = b->gpu.ops->synchronize(&b->gpu);
    double largest = 0, error = 0;
    for (size_t i = 0; i < count; i++) largest = fmax(largest, fabs((double)want[i]));
    for (size_t i = 0; i < count; i++) {
        double e = fabs((double)uform_bf16_to_f32(words[i]) - (double)want[i]);
        if (!(e <= error)) error = isnan(e) ? INFINITY : e;
    }
    double bound = relative * largest + absolute;
    bool ok = status == UFORM_OK && error <= bound;
    printf("| %-34s | %8zu | %10.3g | %10.3g | %s |\n", what, count, error, bound,
           ok ? "ok" : status != UFORM_OK ? uform_last_error() : "FAIL");
    ok ? passed++ : failed++;
    free(words);
}

/* The FP32 rows at gpu_device, downloaded and rounded to BF16. */
static float *downloaded_bf16(backends_t *b, const float *gpu_device, size_t count) {
    float *values = malloc((count ? count : 1) * sizeof(float));
    b->gpu.ops->download(&b->gpu, values, gpu_device, count * sizeof(float));
    b->gpu.ops->synchronize(&b->gpu);
    round_to_bf16(values, count);
    return values;
}

/* BF16 words of x (rounded), uploaded. */
static uint16_t *bf16_on_gpu(backends_t *b, const float *x, size_t count) {
    uint16_t *words = malloc((count ? count : 1) * sizeof(uint16_t));
    for (size_t i = 0; i < count; i++) words[i] = uform_f32_to_bf16(x[i]);
    uint16_t *device = on_gpu(b, words, count * sizeof(uint16_t));
    free(words);
    return device;
}

static void test_bf16_operands(backends_t *b, size_t rows, size_t n, size_t k) {
    const uform_backend_ops_t *op = b->gpu.ops;
    /* layer norm: rows of width k */
    float *x = random_floats(rows * k, 2), *weight = random_floats(k, 1), *bias = random_floats(k, 1);
    float *gx = on_gpu(b, x, rows * k * 4), *gweight = on_gpu(b, weight, k * 4), *gbias = on_gpu(b, bias, k * 4);
    float *gy = on_gpu(b, NULL, rows * k * 4);
    uint16_t *gy16 = on_gpu(b, NULL, rows * k * 2);
    op->layer_norm_forward(&b->gpu, gx, rows, k, gweight, gbias, gy, NULL, NULL);
    op->layer_norm_forward_bf16(&b->gpu, gx, rows, k, gweight, gbias, gy16, NULL, NULL);
    float *want = downloaded_bf16(b, gy, rows * k);
    compare_bf16(b, "layer_norm_forward_bf16 (= FP32's)", want, gy16, rows * k, 0, 0);
    free(want);
    /* training's: the statistics saved too, the FP32 op's (bound 0) */
    float *mean = malloc(rows * sizeof(float)), *rstd = malloc(rows * sizeof(float));
    float *gmean = on_gpu(b, NULL, rows * 4), *grstd = on_gpu(b, NULL, rows * 4);
    float *gmean16 = on_gpu(b, NULL, rows * 4), *grstd16 = on_gpu(b, NULL, rows * 4);
    op->layer_norm_forward(&b->gpu, gx, rows, k, gweight, gbias, gy, gmean, grstd);
    op->layer_norm_forward_bf16(&b->gpu, gx, rows, k, gweight, gbias, gy16, gmean16, grstd16);
    op->download(&b->gpu, mean, gmean, rows * 4);
    op->download(&b->gpu, rstd, grstd, rows * 4);
    want = downloaded_bf16(b, gy, rows * k);
    compare_bf16(b, "layer_norm_forward_bf16 +stats", want, gy16, rows * k, 0, 0);
    compare(b, "layer_norm_forward_bf16 mean", mean, gmean16, rows, 0);
    compare(b, "layer_norm_forward_bf16 rstd", rstd, grstd16, rows, 0);
    free(want), free(mean), free(rstd);
    op->free(&b->gpu, gmean), op->free(&b->gpu, grstd), op->free(&b->gpu, gmean16), op->free(&b->gpu, grstd16);

    /* products: x16 [rows, k] (stride k) against the FP32 twin on the same
     * values (x rounded first, so the twin's own rounding changes nothing) */
    float *x16 = rounded_to_bf16(x, rows * k), *out_bias = random_floats(n, 1), *y = random_floats(rows * n, 1);
    float *gx16f = on_gpu(b, x16, rows * k * 4), *gout_bias = on_gpu(b, out_bias, n * 4);
    float *gy_f32 = on_gpu(b, y, rows * n * 4), *gy_bf16 = on_gpu(b, y, rows * n * 4);
    uint16_t *gx16 = bf16_on_gpu(b, x16, rows * k);
    uint16_t *w = malloc(n * k * sizeof(uint16_t));
    for (size_t i = 0; i < n * k; i++) w[i] = uform_f32_to_bf16(random_float() * 0.1f);
    float *dense = malloc(n * k * sizeof(float));
    for (size_t i = 0; i < n * k; i++) dense[i] = random_float() * 0.1f;
    uint8_t *codes = malloc(n * k);
    float *scales = malloc(n * sizeof(float));
    random_e4m3_codes(codes, n * k);
    for (size_t i = 0; i < n; i++) scales[i] = ldexpf(1.0f, -6 - (int)(i % 3));
    uform_packed_t packed_bf16, packed_e4m3;
    bool packed = op->pack(&b->gpu, w, n, k, &packed_bf16) == UFORM_OK &&
                  op->pack_e4m3(&b->gpu, codes, scales, n, k, &packed_e4m3) == UFORM_OK;
    float *gdense = on_gpu(b, dense, n * k * 4);
    /* E4M3 twice: FP8 products with cuBLASLt's scales where it accepts them,
     * then with our scales' pass (gemm_fp8.cu's two ways) */
    uform_weight_t weights[4] = {{&packed_bf16, NULL, n, k}, {&packed_e4m3, NULL, n, k}, {NULL, gdense, n, k},
                                 {&packed_e4m3, NULL, n, k}};
    const char *names[4] = {"BF16", "E4M3", "dense", "E4M3 (our scales)"};
    char what[96];
    for (int i = 0; packed && i < 4; i++) {
        uform_cuda_fp8_scaled_off(&b->gpu, i == 3);
        sync(b, gy_f32, y, rows * n), sync(b, gy_bf16, y, rows * n);
        op->linear(&b->gpu, &weights[i], gx16f, k, rows, gout_bias, true, gy_f32, n);
        op->linear_bf16(&b->gpu, &weights[i], gx16, k, rows, gout_bias, true, gy_bf16, n);
        float *want_y = malloc(rows * n * sizeof(float));
        op->download(&b->gpu, want_y, gy_f32, rows * n * 4);
        snprintf(what, sizeof(what), "linear_bf16 %s +bias += (= FP32's)", names[i]);
        compare(b, what, want_y, gy_bf16, rows * n, 0);
        if (i == 1)
            require_fused("cuBLASLt's FP8 scales, FP32 form", uform_cuda_fp8_scaled(&b->gpu),
                          uform_cuda_fp8_scaled_refusal(&b->gpu, 0));
        free(want_y);
        /* linear_gelu_bf16 against gelu of the FP32 twin's product, rounded.
         * Without cuBLASLt's epilogue (the emulation; dense weights, and E4M3
         * weights where our pass applies the FP8 scales) the same kernels:
         * bit for bit. With it (BF16 weights on a GPU, E4M3 where cuBLASLt
         * applies the FP8 scales: the twin's bias rounded the same way),
         * cuBLASLt's own GELU and sums on a bias rounded to BF16: two FP32
         * values a little apart round to adjacent BF16 values at most (one
         * BF16 step, 2^-7 of the value), plus 5e-4, the most that GELU's tanh
         * and erf forms differ by (0.00047, by search over [-8, 8]), plus the
         * bias's rounding (2^-9 of the largest |bias|) times GELU's steepest
         * slope (1.13). On the H200 (2026-12-04) the largest error was one
         * step of the largest value's binade. */
        uint16_t *gact = on_gpu(b, NULL, rows * n * 2);
        op->linear(&b->gpu, &weights[i], gx16f, k, rows, gout_bias, false, gy_f32, n);
        op->gelu_forward(&b->gpu, gy_f32, rows * n, gy_f32);
        op->linear_gelu_bf16(&b->gpu, &weights[i], gx16, k, rows, gout_bias, gact);
        op->synchronize(&b->gpu);
        bool epilogue = uform_cuda_gelu_epilogue(&b->gpu);
        float *want_act = downloaded_bf16(b, gy_f32, rows * n);
        snprintf(what, sizeof(what), "linear_gelu_bf16 %s (%s)", names[i],
                 epilogue ? "cuBLASLt's GELU" : "= FP32's");
        double bias_largest = 0;
        for (size_t j = 0; j < n; j++) bias_largest = fmax(bias_largest, fabs((double)out_bias[j]));
        compare_bf16(b, what, want_act, gact, rows * n, epilogue ? 0x1p-7 : 0,
                     epilogue ? 5e-4 + 1.13 * 0x1p-9 * bias_largest : 0);
        if (i == 0)
            require_fused("cuBLASLt's GELU epilogue (BF16)", epilogue, uform_cuda_gelu_epilogue_refusal(&b->gpu));
        if (i == 1)
            require_fused("cuBLASLt's FP8 scales, GELU form", epilogue, uform_cuda_fp8_scaled_refusal(&b->gpu, 2));
        free(want_act);
        op->free(&b->gpu, gact);
    }
    uform_cuda_fp8_scaled_off(&b->gpu, false);
    if (packed) op->packed_free(&b->gpu, &packed_bf16), op->packed_free(&b->gpu, &packed_e4m3);
    void *all[] = {gx, gweight, gbias, gy, gy16, gx16f, gout_bias, gy_f32, gy_bf16, gx16, gdense};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) op->free(&b->gpu, all[i]);
    free(x), free(weight), free(bias), free(x16), free(out_bias), free(y), free(w), free(dense), free(codes),
        free(scales);
}

/* attention_forward_bf16 against rope_forward then the FP32 forward, its out
 * rounded: the same rotation (c/cuda/rope.cuh) and the same kernel
 * (tensor cores), or the simple kernels plus a rounding pass; qkv left as it
 * was. Any cosines and sines serve (random ones here). */
static void test_attention_bf16(backends_t *b, size_t hidden, bool simple) {
    uform_segment_t segments[] = {{0, 1, 1}, {1, 45, 1}, {46, 0, 2}, {46, 9, 3}, {55, 64, 1}, {119, 100, 1}};
    size_t rows = 219, count = sizeof(segments) / sizeof(segments[0]), longest = 100;
    float *qkv = random_floats(rows * 3 * hidden, 2), *cosines = random_floats(rows * UFORM_PAIRS, 1);
    float *sines = random_floats(rows * UFORM_PAIRS, 1), *after = malloc(rows * 3 * hidden * sizeof(float));
    uform_cuda_attention_simple(&b->gpu, simple);
    uform_segment_t *gsegments = on_gpu(b, segments, sizeof(segments));
    float *gqkv = on_gpu(b, qkv, rows * 3 * hidden * 4), *gout = on_gpu(b, NULL, rows * hidden * 4);
    float *gcosines = on_gpu(b, cosines, rows * UFORM_PAIRS * 4), *gsines = on_gpu(b, sines, rows * UFORM_PAIRS * 4);
    float *grotated = on_gpu(b, qkv, rows * 3 * hidden * 4);
    uint16_t *gout16 = on_gpu(b, NULL, rows * hidden * 2);
    b->gpu.ops->zero(&b->gpu, gout, rows * hidden * 4);
    b->gpu.ops->zero(&b->gpu, gout16, rows * hidden * 2);
    b->gpu.ops->rope_forward(&b->gpu, grotated, rows, hidden, gcosines, gsines);
    b->gpu.ops->attention_forward(&b->gpu, grotated, hidden, gsegments, count, rows, longest, gout, NULL, NULL);
    b->gpu.ops->attention_forward_bf16(&b->gpu, gqkv, hidden, gsegments, count, rows, longest, gcosines, gsines,
                                       gout16, NULL);
    float *want = downloaded_bf16(b, gout, rows * hidden);
    compare_bf16(b, simple ? "attention_forward_bf16 (simple)" : "attention_forward_bf16 (tensor cores)", want,
                 gout16, rows * hidden, 0, 0);
    if (!simple) {   /* 64 query rows a block against the default 128: bit for bit */
        uform_cuda_attention_query_rows(&b->gpu, 64);
        b->gpu.ops->attention_forward_bf16(&b->gpu, gqkv, hidden, gsegments, count, rows, longest, gcosines, gsines,
                                           gout16, NULL);
        uform_cuda_attention_query_rows(&b->gpu, 0);
        compare_bf16(b, "attention_forward_bf16 64 = 128 rows", want, gout16, rows * hidden, 0, 0);
    }
    b->gpu.ops->download(&b->gpu, after, gqkv, rows * 3 * hidden * 4);
    bool kept = b->gpu.ops->synchronize(&b->gpu) == UFORM_OK && memcmp(after, qkv, rows * 3 * hidden * 4) == 0;
    printf("| %-34s | %8zu | %10s | %10s | %s |\n", "attention_forward_bf16 keeps qkv", rows * 3 * hidden, "", "",
           kept ? "ok" : "FAIL");
    kept ? passed++ : failed++;
    /* attention_forward_staged_bf16 (linear_qkv_bf16's rows) on rope_forward's
     * rows rounded to BF16 (on the host), against the FP32 forward on the
     * same values, its out rounded: the same kernel either way, so bit for bit */
    float *staged = malloc(rows * 3 * hidden * sizeof(float));
    b->gpu.ops->download(&b->gpu, staged, grotated, rows * 3 * hidden * 4);
    b->gpu.ops->synchronize(&b->gpu);
    round_to_bf16(staged, rows * 3 * hidden);
    sync(b, grotated, staged, rows * 3 * hidden);
    uint16_t *gstaged = bf16_on_gpu(b, staged, rows * 3 * hidden);
    b->gpu.ops->zero(&b->gpu, gout, rows * hidden * 4);
    b->gpu.ops->zero(&b->gpu, gout16, rows * hidden * 2);
    b->gpu.ops->attention_forward(&b->gpu, grotated, hidden, gsegments, count, rows, longest, gout, NULL, NULL);
    float *want_staged = downloaded_bf16(b, gout, rows * hidden);
    if (b->gpu.ops->attention_forward_staged_bf16)
        b->gpu.ops->attention_forward_staged_bf16(&b->gpu, gstaged, hidden, gsegments, count, rows, longest, gout16,
                                                  NULL);
    compare_bf16(b, simple ? "attention_forward_staged_bf16 (simple)" : "attention_forward_staged_bf16 (tensor cores)",
                 want_staged, gout16, rows * hidden, 0, 0);
    b->gpu.ops->free(&b->gpu, gstaged);
    free(staged), free(want_staged);
    uform_cuda_attention_simple(&b->gpu, false);
    void *all[] = {gsegments, gqkv, gout, gout16, gcosines, gsines, grotated};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) b->gpu.ops->free(&b->gpu, all[i]);
    free(want), free(qkv), free(cosines), free(sines), free(after);
}

/* linear_qkv_bf16 against its FP32 twin on the same GPU: linear_bf16's FP32
 * rows, rope_forward, rounded to BF16. Where the product is written in BF16
 * by cuBLASLt (BF16 weights; the emulation emulates it) and rotated in place,
 * two roundings and the bias's: a product rounded to BF16 (2^-8 of it) with
 * its bias rounded (2^-8 of |bias|) moves a rotated pair by at most sqrt 2
 * times those (a rotation keeps an error vector's length), and two values
 * that far apart round to BF16 values at most one BF16 step (2^-7 of the
 * largest) further apart: 2^-7 + 1.42 x 2^-8 < 2^-6 of the largest value,
 * plus 1.42 x 2^-8 < 2^-7 of the largest |bias|. A rotation left out, or a
 * pair's halves swapped, is off by about the values themselves. E4M3
 * weights likewise where cuBLASLt applies the FP8 scales and writes BF16
 * (the twin's FP8 product then takes the same BF16-rounded bias). Where the
 * FP32 product is staged (dense weights; E4M3 with our scales' pass; a
 * refusal), the staging's rotation (c/cuda/rope.cuh) is rope_forward's: bit
 * for bit. */
static void test_linear_qkv_bf16(backends_t *b, size_t rows, size_t hidden, size_t k) {
    const uform_backend_ops_t *op = b->gpu.ops;
    size_t n = 3 * hidden;
    if (!op->linear_qkv_bf16) {
        printf("| linear_qkv_bf16: not set by the CUDA backend | FAIL |\n"), failed++;
        return;
    }
    float *x = random_floats(rows * k, 2), *bias = random_floats(n, 1);
    round_to_bf16(x, rows * k);
    float *cosines = malloc(rows * UFORM_PAIRS * sizeof(float)), *sines = malloc(rows * UFORM_PAIRS * sizeof(float));
    for (size_t i = 0; i < rows * UFORM_PAIRS; i++) {
        float angle = random_float() * 3.14159265f;
        cosines[i] = cosf(angle), sines[i] = sinf(angle);
    }
    uint16_t *w = malloc(n * k * sizeof(uint16_t));
    for (size_t i = 0; i < n * k; i++) w[i] = uform_f32_to_bf16(random_float() * 0.1f);
    float *dense = random_floats(n * k, 0.1f);
    uint8_t *codes = malloc(n * k);
    float *scales = malloc(n * sizeof(float));
    random_e4m3_codes(codes, n * k);
    for (size_t i = 0; i < n; i++) scales[i] = ldexpf(1.0f, -6 - (int)(i % 3));
    uform_packed_t packed, packed_e4m3;
    bool ok = op->pack(&b->gpu, w, n, k, &packed) == UFORM_OK &&
              op->pack_e4m3(&b->gpu, codes, scales, n, k, &packed_e4m3) == UFORM_OK;
    uint16_t *gx = bf16_on_gpu(b, x, rows * k), *gqkv16 = on_gpu(b, NULL, rows * n * 2);
    float *gbias = on_gpu(b, bias, n * 4), *gdense = on_gpu(b, dense, n * k * 4), *gy = on_gpu(b, NULL, rows * n * 4);
    float *gcosines = on_gpu(b, cosines, rows * UFORM_PAIRS * 4), *gsines = on_gpu(b, sines, rows * UFORM_PAIRS * 4);
    uform_weight_t weights[4] = {{&packed, NULL, n, k}, {NULL, gdense, n, k}, {&packed_e4m3, NULL, n, k},
                                 {&packed_e4m3, NULL, n, k}};
    const char *names[4] = {"BF16", "dense", "E4M3", "E4M3 (our scales)"};
    double bias_largest = 0;
    for (size_t j = 0; j < n; j++) bias_largest = fmax(bias_largest, fabs((double)bias[j]));
    char what[96];
    for (int i = 0; ok && i < 4; i++) {
        uform_cuda_fp8_scaled_off(&b->gpu, i == 3);
        op->linear_bf16(&b->gpu, &weights[i], gx, k, rows, gbias, false, gy, n);
        op->rope_forward(&b->gpu, gy, rows, hidden, gcosines, gsines);
        float *want = downloaded_bf16(b, gy, rows * n);
        op->linear_qkv_bf16(&b->gpu, &weights[i], gx, k, rows, gbias, gcosines, gsines, gqkv16);
        op->synchronize(&b->gpu);
        bool bf16_out = uform_cuda_bf16_out(&b->gpu);
        snprintf(what, sizeof(what), "linear_qkv_bf16 %s (%s)", names[i], bf16_out ? "BF16 out" : "= FP32's staged");
        compare_bf16(b, what, want, gqkv16, rows * n, bf16_out ? 0x1p-6 : 0, bf16_out ? 0x1p-7 * bias_largest : 0);
        if (i == 0) require_fused("cuBLASLt's BF16 out (qkv)", bf16_out, uform_cuda_bf16_out_refusal(&b->gpu));
        if (i == 2)
            require_fused("cuBLASLt's FP8 scales, BF16 out (qkv)", bf16_out, uform_cuda_fp8_scaled_refusal(&b->gpu, 1));
        free(want);
    }
    uform_cuda_fp8_scaled_off(&b->gpu, false);
    if (ok) op->packed_free(&b->gpu, &packed), op->packed_free(&b->gpu, &packed_e4m3);
    void *all[] = {gx, gqkv16, gbias, gdense, gy, gcosines, gsines};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) op->free(&b->gpu, all[i]);
    free(x), free(bias), free(cosines), free(sines), free(w), free(dense), free(codes), free(scales);
}

/* attention_forward_train_bf16 and attention_backward_bf16 (training's q, k,
 * v kept in BF16) against rope_forward, the rotated rows rounded to BF16 (the
 * rounding the kernels make as they load them, made beforehand: exact for
 * them), then attention_forward and attention_backward, on the same GPU: bit
 * for bit (bound 0), and the kept rows against the rounded rotated ones; on
 * the tensor cores and on the simple kernels. */
static void test_attention_train_bf16(backends_t *b, size_t hidden, bool simple) {
    uform_segment_t segments[] = {{0, 1, 1}, {1, 45, 1}, {46, 0, 2}, {46, 9, 3}, {55, 64, 1}, {119, 100, 1}};
    size_t rows = 219, count = sizeof(segments) / sizeof(segments[0]), longest = 100;
    size_t heads = hidden / UFORM_HEAD_WIDTH, width = 3 * hidden;
    float *qkv = random_floats(rows * width, 2), *cosines = random_floats(rows * UFORM_PAIRS, 1);
    float *sines = random_floats(rows * UFORM_PAIRS, 1), *dout = random_floats(rows * hidden, 1);
    float *dqkv = random_floats(rows * width, 1), *rotated = malloc(rows * width * 4);
    float *want_out = malloc(rows * hidden * 4), *want_lse = malloc(rows * heads * 4);
    float *want_dqkv = malloc(rows * width * 4);
    uform_cuda_attention_simple(&b->gpu, simple);
    uform_segment_t *gsegments = on_gpu(b, segments, sizeof(segments));
    float *gqkv = on_gpu(b, qkv, rows * width * 4), *grotated = on_gpu(b, qkv, rows * width * 4);
    float *gcosines = on_gpu(b, cosines, rows * UFORM_PAIRS * 4), *gsines = on_gpu(b, sines, rows * UFORM_PAIRS * 4);
    float *gdout = on_gpu(b, dout, rows * hidden * 4), *gdqkv = on_gpu(b, dqkv, rows * width * 4);
    float *gout = on_gpu(b, NULL, rows * hidden * 4), *glse = on_gpu(b, NULL, rows * heads * 4);
    uint16_t *gqkv16 = on_gpu(b, NULL, rows * width * 2);
    /* the reference: the FP32 ops on the rotated rows, rounded */
    b->gpu.ops->rope_forward(&b->gpu, grotated, rows, hidden, gcosines, gsines);
    b->gpu.ops->download(&b->gpu, rotated, grotated, rows * width * 4);
    b->gpu.ops->synchronize(&b->gpu);
    round_to_bf16(rotated, rows * width);
    sync(b, grotated, rotated, rows * width);
    b->gpu.ops->attention_forward(&b->gpu, grotated, hidden, gsegments, count, rows, longest, gout, glse, NULL);
    b->gpu.ops->attention_backward(&b->gpu, grotated, gout, gdout, glse, hidden, gsegments, count, rows, longest,
                                   gdqkv);
    op_download3(b, gout, want_out, rows * hidden, glse, want_lse, rows * heads, gdqkv, want_dqkv, rows * width);
    /* the pair under test, from the unrotated rows and the same starting dqkv */
    b->gpu.ops->zero(&b->gpu, gout, rows * hidden * 4);
    b->gpu.ops->zero(&b->gpu, glse, rows * heads * 4);
    sync(b, gdqkv, dqkv, rows * width);
    const char *kind = simple ? "simple" : "tensor cores";
    char what[96];
    if (b->gpu.ops->attention_forward_train_bf16 && b->gpu.ops->attention_backward_bf16) {
        b->gpu.ops->attention_forward_train_bf16(&b->gpu, gqkv, hidden, gsegments, count, rows, longest, gcosines,
                                                 gsines, gqkv16, gout, glse);
        b->gpu.ops->attention_backward_bf16(&b->gpu, gqkv16, gout, gdout, glse, hidden, gsegments, count, rows,
                                            longest, gdqkv);
    } else {
        printf("| attention_*_bf16 (training): not set by the CUDA backend | FAIL |\n"), failed++;
    }
    snprintf(what, sizeof(what), "train attention qkv16 (%s)", kind);
    compare_bf16(b, what, rotated, gqkv16, rows * width, 0, 0);
    snprintf(what, sizeof(what), "train attention out (%s)", kind);
    compare(b, what, want_out, gout, rows * hidden, 0);
    snprintf(what, sizeof(what), "train attention lse (%s)", kind);
    compare(b, what, want_lse, glse, rows * heads, 0);
    snprintf(what, sizeof(what), "train attention dqkv (%s)", kind);
    compare(b, what, want_dqkv, gdqkv, rows * width, 0);
    uform_cuda_attention_simple(&b->gpu, false);
    void *all[] = {gsegments, gqkv, grotated, gcosines, gsines, gdout, gdqkv, gout, glse, gqkv16};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) b->gpu.ops->free(&b->gpu, all[i]);
    free(qkv), free(cosines), free(sines), free(dout), free(dqkv), free(rotated), free(want_out), free(want_lse),
        free(want_dqkv);
}

/* download_rows and convert_rows (into the GPU's memory, then copied down
 * as bytes): the same bytes as the CPU's download_rows for every scalar,
 * exactly (both call core/output_scalars.h; on a GPU its double arithmetic
 * for FP8 is exact, as on the host). Row 0 holds the values where the
 * formats' rules part: NaNs, infinities, zeros of both signs, an FP32
 * subnormal, ties of BF16, F16 and I8, F16's overflow to infinity, E4M3's and
 * E5M2's saturation. Rows lie further apart than their bytes; the padding
 * must stay as it was (0), except B1's, which download_rows writes (0). */
static void test_download_rows(backends_t *b, size_t rows, size_t width, bool in_place) {
    float *x = random_floats(rows * width, 1.5f);
    static const float special[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, -1e-40f,
                                    1.0f + 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-7f,   /* BF16 ties, to even both ways */
                                    1.0f + 0x1p-11f, 65520.0f, 65504.0f, 70000.0f, 1e6f, -1e6f, 449.0f, 464.0f,
                                    0.5f / 127.0f, 1.5f / 127.0f, 5.9604645e-8f, 2.9802322e-8f};
    for (size_t i = 0; i < sizeof(special) / sizeof(special[0]) && i < width; i++) x[i] = special[i];
    float *gx = on_gpu(b, x, rows * width * 4);
    static const uform_scalar_t scalars[] = {UFORM_SCALAR_F32, UFORM_SCALAR_BF16, UFORM_SCALAR_F16,
                                             UFORM_SCALAR_E4M3, UFORM_SCALAR_E5M2, UFORM_SCALAR_I8,
                                             UFORM_SCALAR_B1};
    for (size_t s = 0; s < sizeof(scalars) / sizeof(scalars[0]); s++) {
        size_t row_bytes = width * 4 + 3;   /* rows further apart than their bytes */
        uint8_t *expected = calloc(rows, row_bytes), *got = calloc(rows, row_bytes);
        b->cpu.ops->download_rows(&b->cpu, x, rows, width, scalars[s], expected, row_bytes);
        if (in_place) {
            uint8_t *converted = on_gpu(b, got, rows * row_bytes);   /* zeros, as the host's padding */
            b->gpu.ops->convert_rows(&b->gpu, gx, rows, width, scalars[s], converted, row_bytes);
            b->gpu.ops->download(&b->gpu, got, converted, rows * row_bytes);
            b->gpu.ops->free(&b->gpu, converted);
        } else {
            b->gpu.ops->download_rows(&b->gpu, gx, rows, width, scalars[s], got, row_bytes);
        }
        uform_status_t status = b->gpu.ops->synchronize(&b->gpu);
        bool ok = status == UFORM_OK && memcmp(expected, got, rows * row_bytes) == 0;
        char what[64];
        snprintf(what, sizeof(what), "%s scalar %d", in_place ? "convert_rows" : "download_rows", (int)scalars[s]);
        printf("| %-34s | %8zu | %10s | %10s | %s |\n", what, rows * width, "exact", "exact",
               ok ? "ok" : status != UFORM_OK ? uform_last_error() : "FAIL");
        ok ? passed++ : failed++;
        free(expected), free(got);
    }
    b->gpu.ops->free(&b->gpu, gx);
    free(x);
}

/* The choices head: logits are dots over `hidden` terms (sums in other
 * orders, 1e-4 as the products), then a softmax of a few values. */
static void test_choices(backends_t *b, size_t hidden) {
    const size_t rows = 30, count = 3;
    float *states = random_floats(rows * hidden, 1), *table = random_floats(257 * hidden, 0.5f);
    float *bias = random_floats(256, 0.5f), *log_temperature = random_floats(2, 0.3f);
    uform_segment_t segments[3] = {{0, 7, 1}, {7, 1, 1}, {8, 22, 1}};
    static const char data[] = "abcdyn0123456789";
    size_t tape_offsets[] = {0, 4, 6, 16};
    uform_tape_t choices = {data, 16, tape_offsets, 3};
    uint32_t groups[] = {1, 0, 1};
    size_t offsets[] = {0, 4, 6, 16};
    float cpu[16], gpu[16];
    float *gstates = on_gpu(b, states, rows * hidden * 4), *gtable = on_gpu(b, table, 257 * hidden * 4);
    float *gbias = on_gpu(b, bias, 256 * 4), *gtemperature = on_gpu(b, log_temperature, 2 * 4);
    uform_segment_t *gsegments = on_gpu(b, segments, sizeof(segments));
    b->cpu.ops->choice_probabilities(&b->cpu, states, hidden, segments, count, &choices, 0, groups, table, bias,
                                     log_temperature, offsets, cpu);
    b->gpu.ops->choice_probabilities(&b->gpu, gstates, hidden, gsegments, count, &choices, 0, groups, gtable, gbias,
                                     gtemperature, offsets, gpu);
    float *ggpu = on_gpu(b, gpu, sizeof(gpu));   /* compare() reads the GPU's side from device memory */
    compare(b, "choice_probabilities", cpu, ggpu, 16, 1e-4);
    void *all[] = {gstates, gtable, gbias, gtemperature, gsegments, ggpu};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) b->gpu.ops->free(&b->gpu, all[i]);
    free(states), free(table), free(bias), free(log_temperature);
}

static void test_rows(backends_t *b, size_t rows, size_t width) {
    float *x = random_floats(rows * width, 2), *weight = random_floats(width, 1), *bias = random_floats(width, 1);
    float *y = random_floats(rows * width, 1), *mean = random_floats(rows, 1), *rstd = random_floats(rows, 1);
    float *gx = on_gpu(b, x, rows * width * 4), *gweight = on_gpu(b, weight, width * 4);
    float *gbias = on_gpu(b, bias, width * 4), *gy = on_gpu(b, y, rows * width * 4);
    float *gmean = on_gpu(b, mean, rows * 4), *grstd = on_gpu(b, rstd, rows * 4);
    b->cpu.ops->layer_norm_forward(&b->cpu, x, rows, width, weight, bias, y, mean, rstd);
    b->gpu.ops->layer_norm_forward(&b->gpu, gx, rows, width, gweight, gbias, gy, gmean, grstd);
    compare(b, "layer_norm_forward y", y, gy, rows * width, 1e-5);
    compare(b, "layer_norm_forward rstd", rstd, grstd, rows, 1e-5);
    float *dy = random_floats(rows * width, 1), *dx = random_floats(rows * width, 1);
    float *dweight = random_floats(width, 1), *dbias = random_floats(width, 1);
    float *gdy = on_gpu(b, dy, rows * width * 4), *gdx = on_gpu(b, dx, rows * width * 4);
    float *gdweight = on_gpu(b, dweight, width * 4), *gdbias = on_gpu(b, dbias, width * 4);
    b->cpu.ops->layer_norm_backward(&b->cpu, dy, x, weight, mean, rstd, rows, width, dx, dweight, dbias);
    b->gpu.ops->layer_norm_backward(&b->gpu, gdy, gx, gweight, gmean, grstd, rows, width, gdx, gdweight, gdbias);
    compare(b, "layer_norm_backward dx", dx, gdx, rows * width, 1e-4);
    compare(b, "layer_norm_backward dweight", dweight, gdweight, width, 1e-4);
    compare(b, "layer_norm_backward dbias", dbias, gdbias, width, 1e-4);
    /* GELU over a wide range, both directions */
    size_t count = rows * width;
    b->cpu.ops->gelu_forward(&b->cpu, x, count, y);
    b->gpu.ops->gelu_forward(&b->gpu, gx, count, gy);
    compare(b, "gelu_forward", y, gy, count, 1e-5);
    sync(b, gdx, dx, count);
    b->cpu.ops->gelu_backward(&b->cpu, x, dy, count, dx);
    b->gpu.ops->gelu_backward(&b->gpu, gx, gdy, count, gdx);
    compare(b, "gelu_backward", dx, gdx, count, 1e-5);
    /* L2 normalisation */
    float *norms = random_floats(rows, 1), *gnorms = on_gpu(b, norms, rows * 4);
    b->cpu.ops->normalize_forward(&b->cpu, x, rows, width, y, norms);
    b->gpu.ops->normalize_forward(&b->gpu, gx, rows, width, gy, gnorms);
    compare(b, "normalize_forward", y, gy, count, 1e-5);
    sync(b, gdx, dx, count);
    b->cpu.ops->normalize_backward(&b->cpu, dy, y, norms, rows, width, dx);
    b->gpu.ops->normalize_backward(&b->gpu, gdy, gy, gnorms, rows, width, gdx);
    compare(b, "normalize_backward", dx, gdx, count, 1e-4);
    /* gathers, scatters and sums of rows (repeated rows in the scatter-add) */
    size_t picks = rows / 2 + 1;
    size_t *which = malloc(picks * sizeof(size_t));
    for (size_t i = 0; i < picks; i++) which[i] = (i * 7) % rows;
    size_t *gwhich = on_gpu(b, which, picks * sizeof(size_t));
    float *gathered = random_floats(picks * width, 1), *ggathered = on_gpu(b, gathered, picks * width * 4);
    b->cpu.ops->gather_rows(&b->cpu, x, width, which, picks, gathered);
    b->gpu.ops->gather_rows(&b->gpu, gx, width, gwhich, picks, ggathered);
    compare(b, "gather_rows", gathered, ggathered, picks * width, 0);
    sync(b, gdx, dx, count);
    b->cpu.ops->scatter_add_rows(&b->cpu, gathered, width, which, picks, dx);
    b->gpu.ops->scatter_add_rows(&b->gpu, ggathered, width, gwhich, picks, gdx);
    compare(b, "scatter_add_rows", dx, gdx, count, 1e-5);
    {   /* rows repeated many times, rows past 64 among them: every element one
         * chain in index order, so the host's float loop gives the bits */
        size_t *many = malloc(picks * sizeof(size_t));
        for (size_t i = 0; i < picks; i++) many[i] = ((i * 5) % 7 + (i % 3 == 0 ? 64 : 0)) % rows;
        size_t *gmany = on_gpu(b, many, picks * sizeof(size_t));
        float *want = malloc(count * sizeof(float));
        memcpy(want, dx, count * sizeof(float));
        for (size_t i = 0; i < picks; i++)
            for (size_t c = 0; c < width; c++) want[many[i] * width + c] += gathered[i * width + c];
        sync(b, gdx, dx, count);
        b->gpu.ops->scatter_add_rows(&b->gpu, ggathered, width, gmany, picks, gdx);
        compare(b, "scatter_add_rows repeated (bits)", want, gdx, count, 0);
        b->gpu.ops->free(&b->gpu, gmany);
        free(many), free(want);
    }
    sync(b, gdweight, dweight, width);
    b->cpu.ops->sum_rows(&b->cpu, x, width, which, picks, dweight);
    b->gpu.ops->sum_rows(&b->gpu, gx, width, gwhich, picks, gdweight);
    compare(b, "sum_rows", dweight, gdweight, width, 1e-5);
    sync(b, gy, y, count);
    b->cpu.ops->scatter_rows(&b->cpu, gathered, width, bias, width, NULL, picks, y);
    b->gpu.ops->scatter_rows(&b->gpu, ggathered, width, gbias, width, NULL, picks, gy);
    compare(b, "scatter_rows", y, gy, count, 1e-6);
    void *all[] = {gx, gweight, gbias, gy, gmean, grstd, gdy, gdx, gdweight, gdbias, gnorms, gwhich, ggathered};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) b->gpu.ops->free(&b->gpu, all[i]);
    free(x), free(weight), free(bias), free(y), free(mean), free(rstd), free(dy), free(dx), free(dweight);
    free(dbias), free(norms), free(which), free(gathered);
}

static void test_segments(backends_t *b, size_t hidden) {
    /* three items: text (1 axis), image (2), video (3), one empty */
    uform_segment_t segments[4] = {{0, 5, 1}, {5, 6, 2}, {11, 0, 1}, {11, 7, 3}};
    size_t rows = 18, count = 4;
    uint32_t *positions = malloc(rows * 3 * sizeof(uint32_t));
    for (size_t i = 0; i < rows * 3; i++) positions[i] = (uint32_t)((i * 5) % 9);
    float *cosines = random_floats(rows * UFORM_PAIRS, 1), *sines = random_floats(rows * UFORM_PAIRS, 1);
    uform_segment_t *gsegments = on_gpu(b, segments, sizeof(segments));
    uint32_t *gpositions = on_gpu(b, positions, rows * 3 * sizeof(uint32_t));
    float *gcosines = on_gpu(b, cosines, rows * UFORM_PAIRS * 4), *gsines = on_gpu(b, sines, rows * UFORM_PAIRS * 4);
    b->cpu.ops->rope_tables(&b->cpu, segments, count, positions, cosines, sines);
    b->gpu.ops->rope_tables(&b->gpu, gsegments, count, gpositions, gcosines, gsines);
    compare(b, "rope_tables cosines", cosines, gcosines, rows * UFORM_PAIRS, 1e-6);
    compare(b, "rope_tables sines", sines, gsines, rows * UFORM_PAIRS, 1e-6);
    float *qkv = random_floats(rows * 3 * hidden, 1), *gqkv = on_gpu(b, qkv, rows * 3 * hidden * 4);
    sync(b, gcosines, cosines, rows * UFORM_PAIRS);
    sync(b, gsines, sines, rows * UFORM_PAIRS);
    b->cpu.ops->rope_forward(&b->cpu, qkv, rows, hidden, cosines, sines);
    b->gpu.ops->rope_forward(&b->gpu, gqkv, rows, hidden, gcosines, gsines);
    compare(b, "rope_forward", qkv, gqkv, rows * 3 * hidden, 1e-6);
    sync(b, gqkv, qkv, rows * 3 * hidden);
    b->cpu.ops->rope_backward(&b->cpu, qkv, rows, hidden, cosines, sines);
    b->gpu.ops->rope_backward(&b->gpu, gqkv, rows, hidden, gcosines, gsines);
    compare(b, "rope_backward", qkv, gqkv, rows * 3 * hidden, 1e-6);
    /* mean pooling */
    float *x = random_floats(rows * hidden, 1), *pooled = random_floats(count * hidden, 1);
    float *gx = on_gpu(b, x, rows * hidden * 4), *gpooled = on_gpu(b, pooled, count * hidden * 4);
    b->cpu.ops->mean_pool_forward(&b->cpu, x, hidden, segments, count, pooled);
    b->gpu.ops->mean_pool_forward(&b->gpu, gx, hidden, gsegments, count, gpooled);
    compare(b, "mean_pool_forward", pooled, gpooled, count * hidden, 1e-5);
    sync(b, gpooled, pooled, count * hidden);
    b->cpu.ops->mean_pool_backward(&b->cpu, pooled, hidden, segments, count, x);
    b->gpu.ops->mean_pool_backward(&b->gpu, gpooled, hidden, gsegments, count, gx);
    compare(b, "mean_pool_backward", x, gx, rows * hidden, 1e-5);
    /* embedding lookup and its scatter-add, media rows skipped */
    size_t table_rows = 257;
    float *table = random_floats(table_rows * hidden, 1), *modality = random_floats(hidden, 1);
    uint32_t *ids = malloc(rows * sizeof(uint32_t));
    for (size_t r = 0; r < rows; r++) ids[r] = r % 6 == 5 ? UFORM_NOT_TEXT : (uint32_t)((r * 37) % table_rows);
    float *gtable = on_gpu(b, table, table_rows * hidden * 4), *gmodality = on_gpu(b, modality, hidden * 4);
    uint32_t *gids = on_gpu(b, ids, rows * sizeof(uint32_t));
    b->cpu.ops->embedding_forward(&b->cpu, table, modality, ids, rows, hidden, x);
    b->gpu.ops->embedding_forward(&b->gpu, gtable, gmodality, gids, rows, hidden, gx);
    compare(b, "embedding_forward", x, gx, rows * hidden, 1e-6);
    b->cpu.ops->embedding_backward(&b->cpu, x, ids, rows, hidden, table, modality);
    b->gpu.ops->embedding_backward(&b->gpu, gx, gids, rows, hidden, gtable, gmodality);
    compare(b, "embedding_backward dtable", table, gtable, table_rows * hidden, 1e-5);
    compare(b, "embedding_backward dmodality", modality, gmodality, hidden, 1e-5);
    /* byte cross-entropy at some rows */
    size_t classes = 256;
    float *logits = random_floats(rows * classes, 4), *losses = random_floats(rows, 1);
    float *scale = random_floats(rows, 1), *dlogits = random_floats(rows * classes, 1);
    scale[3] = 0;   /* a row the backward skips */
    uint32_t *targets = malloc(rows * sizeof(uint32_t));
    for (size_t r = 0; r < rows; r++) targets[r] = (uint32_t)((r * 101) % classes);
    float *glogits = on_gpu(b, logits, rows * classes * 4), *glosses = on_gpu(b, losses, rows * 4);
    float *gscale = on_gpu(b, scale, rows * 4), *gdlogits = on_gpu(b, dlogits, rows * classes * 4);
    uint32_t *gtargets = on_gpu(b, targets, rows * sizeof(uint32_t));
    b->cpu.ops->cross_entropy_forward(&b->cpu, logits, rows, classes, targets, losses);
    b->gpu.ops->cross_entropy_forward(&b->gpu, glogits, rows, classes, gtargets, glosses);
    compare(b, "cross_entropy_forward", losses, glosses, rows, 1e-5);
    b->cpu.ops->cross_entropy_backward(&b->cpu, logits, rows, classes, targets, scale, dlogits);
    b->gpu.ops->cross_entropy_backward(&b->gpu, glogits, rows, classes, gtargets, gscale, gdlogits);
    compare(b, "cross_entropy_backward", dlogits, gdlogits, rows * classes, 1e-5);
    void *all[] = {gsegments, gpositions, gcosines, gsines, gqkv, gx, gpooled, gtable, gmodality, gids,
                   glogits, glosses, gscale, gdlogits, gtargets};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) b->gpu.ops->free(&b->gpu, all[i]);
    free(positions), free(cosines), free(sines), free(qkv), free(x), free(pooled), free(table), free(modality);
    free(ids), free(logits), free(losses), free(scale), free(dlogits), free(targets);
}

/* Attention over segments of several lengths: one empty, one of a single row,
 * one shorter than a warp, one of exactly a 64-row tile, ones across several
 * tiles, and one of 1100 rows, longer than the 16 tiles a (segment, head) gets
 * blocks for (the tensor-core kernels' blocks loop over its tiles).
 *
 * simple: attention.cu's FP32 kernels, FP32 against FP32 (the tolerances of the
 * file's header). Otherwise the BF16 tensor-core kernels (attention_mma.cu) on
 * q, k, v and dout already rounded to BF16, so the kernels' own rounding of
 * them is exact and what is left is: the scores and log-sum-exp in FP32 in
 * another order with exp2 for exp (a few ulps: 1e-5); the probabilities
 * rounded to BF16 before p v (2^-9 relative per term, of random sign: out
 * within 4e-3 of its largest value, 2 x 2^-9); p and ds rounded to BF16
 * before dv, dq and dk (the same, over up to 1100 terms: a float64 simulation
 * of exactly these roundings on these shapes and scales gave 1.0e-3 for out
 * and 1.8e-3 for the gradients, relative to the largest; 1e-2 allowed). */
static void test_attention(backends_t *b, size_t hidden, bool simple) {
#ifdef UFORM_CUDA_EMULATION   /* a block's threads are host threads there: segments of at most 2 tiles */
    uform_segment_t segments[] = {{0, 1, 1}, {1, 45, 1}, {46, 0, 2}, {46, 9, 3}, {55, 64, 1}, {119, 100, 1}};
    size_t rows = 219;
#else
    uform_segment_t segments[] = {{0, 1, 1},   {1, 45, 1},   {46, 0, 2},      {46, 9, 3},
                                  {55, 64, 1}, {119, 200, 1}, {319, 1100, 1}};
    size_t rows = 1419;
#endif
    size_t count = sizeof(segments) / sizeof(segments[0]), heads = hidden / UFORM_HEAD_WIDTH;
    float *qkv = random_floats(rows * 3 * hidden, 2), *out = random_floats(rows * hidden, 1);
    float *lse = random_floats(rows * heads, 1), *dout = random_floats(rows * hidden, 1);
    float *dqkv = random_floats(rows * 3 * hidden, 1);
    if (!simple) round_to_bf16(qkv, rows * 3 * hidden), round_to_bf16(dout, rows * hidden);
    uform_cuda_attention_simple(&b->gpu, simple);
    uform_segment_t *gsegments = on_gpu(b, segments, sizeof(segments));
    float *gqkv = on_gpu(b, qkv, rows * 3 * hidden * 4), *gout = on_gpu(b, out, rows * hidden * 4);
    float *glse = on_gpu(b, lse, rows * heads * 4), *gdout = on_gpu(b, dout, rows * hidden * 4);
    float *gdqkv = on_gpu(b, dqkv, rows * 3 * hidden * 4);
    const char *kind = simple ? "simple FP32" : "tensor cores";
    double forward = simple ? 1e-5 : 4e-3, backward = simple ? 1e-4 : 1e-2;
    char what[96];
    size_t longest = 0;
    for (size_t c = 0; c < count; c++) longest = segments[c].length > longest ? segments[c].length : longest;
    b->cpu.ops->attention_forward(&b->cpu, qkv, hidden, segments, count, rows, longest, out, lse, NULL);
    b->gpu.ops->attention_forward(&b->gpu, gqkv, hidden, gsegments, count, rows, longest, gout, glse, NULL);
    snprintf(what, sizeof(what), "attention_forward out (%s)", kind);
    compare(b, what, out, gout, rows * hidden, forward);
    snprintf(what, sizeof(what), "attention_forward lse (%s)", kind);
    compare(b, what, lse, glse, rows * heads, 1e-5);
    if (!simple) {   /* 64 query rows a block against the default 128: bit for bit (bound 0) */
        float *wide = malloc(rows * hidden * 4), *wide_lse = malloc(rows * heads * 4);
        b->gpu.ops->download(&b->gpu, wide, gout, rows * hidden * 4);
        b->gpu.ops->download(&b->gpu, wide_lse, glse, rows * heads * 4);
        b->gpu.ops->synchronize(&b->gpu);
        uform_cuda_attention_query_rows(&b->gpu, 64);
        b->gpu.ops->attention_forward(&b->gpu, gqkv, hidden, gsegments, count, rows, longest, gout, glse, NULL);
        uform_cuda_attention_query_rows(&b->gpu, 0);
        compare(b, "attention_forward 64 = 128 rows (out)", wide, gout, rows * hidden, 0);
        compare(b, "attention_forward 64 = 128 rows (lse)", wide_lse, glse, rows * heads, 0);
        free(wide), free(wide_lse);
    }
    sync(b, gout, out, rows * hidden);
    sync(b, glse, lse, rows * heads);
    float *initial = malloc(rows * 3 * hidden * 4);
    memcpy(initial, dqkv, rows * 3 * hidden * 4);
    b->cpu.ops->attention_backward(&b->cpu, qkv, out, dout, lse, hidden, segments, count, rows, longest, dqkv);
    b->gpu.ops->attention_backward(&b->gpu, gqkv, gout, gdout, glse, hidden, gsegments, count, rows, longest,
                                   gdqkv);
    snprintf(what, sizeof(what), "attention_backward dqkv (%s)", kind);
    compare(b, what, dqkv, gdqkv, rows * 3 * hidden, backward);
    if (!simple) {   /* each tile pair in 1 and 2 parts, and dq 64 rows a block, against the default (4 parts,
                      * dq 128 rows): bit for bit (bound 0) */
        float *four = malloc(rows * 3 * hidden * 4);
        b->gpu.ops->download(&b->gpu, four, gdqkv, rows * 3 * hidden * 4);
        b->gpu.ops->synchronize(&b->gpu);
        static const char *const names[4] = {"attention_backward 1 = 4 parts (dqkv)",
                                             "attention_backward 2 = 4 parts (dqkv)",
                                             "attention_backward dq 64 = 128 rows (dqkv)",
                                             "attention_backward dk, dv 128 = 64 keys (dqkv)"};
        for (int variant = 0; variant < 4; variant++) {
            sync(b, gdqkv, initial, rows * 3 * hidden);
            if (variant < 2) uform_cuda_attention_backward_parts(&b->gpu, (size_t)variant + 1);
            if (variant == 2) uform_cuda_attention_dq_rows(&b->gpu, 64);
            if (variant == 3) uform_cuda_attention_dkv_rows(&b->gpu, 128);
            b->gpu.ops->attention_backward(&b->gpu, gqkv, gout, gdout, glse, hidden, gsegments, count, rows, longest,
                                           gdqkv);
            uform_cuda_attention_backward_parts(&b->gpu, 0);
            uform_cuda_attention_dq_rows(&b->gpu, 0);
            uform_cuda_attention_dkv_rows(&b->gpu, 0);
            compare(b, names[variant], four, gdqkv, rows * 3 * hidden, 0);
        }
        free(four);
    }
    free(initial);
    /* inference: the CPU's takes scratch of attention_scratch_bytes; the GPU is
     * told a longest of 64, below the truth, so its blocks loop over tiles */
    void *scratch = malloc(b->cpu.ops->attention_scratch_bytes(&b->cpu, hidden, count, longest) + 1);
    b->cpu.ops->attention_forward(&b->cpu, qkv, hidden, segments, count, rows, longest, out, NULL, scratch);
    free(scratch);
    b->gpu.ops->attention_forward(&b->gpu, gqkv, hidden, gsegments, count, rows, 64, gout, NULL, NULL);
    snprintf(what, sizeof(what), "attention_forward inference (%s)", kind);
    compare(b, what, out, gout, rows * hidden, forward);
    uform_cuda_attention_simple(&b->gpu, false);
    void *all[] = {gsegments, gqkv, gout, glse, gdout, gdqkv};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) b->gpu.ops->free(&b->gpu, all[i]);
    free(qkv), free(out), free(lse), free(dout), free(dqkv);
}

/* The calibrated-choices term: items of 1 to 37 choices (bytes repeating
 * within and across items), two temperature groups. The logits and the
 * per-item sums are float64 in the CPU's order (1e-12 relative on the loss:
 * exp and log in another library); the gradients FP32 sums in the CPU's order
 * per element, with fused multiply-adds on the GPU (1e-5 of the largest). */
static void test_choices_loss(backends_t *b, size_t hidden) {
    enum { ITEMS = 5 };
    size_t offsets[ITEMS + 1] = {3, 4, 41, 50, 70, 92}, total = 92;   /* the call's first choice is 3 */
    uint32_t groups[ITEMS] = {0, 1, 1, 0, 1};
    uint8_t *bytes = malloc(total);
    float *targets = malloc(total * sizeof(float));
    for (size_t t = 0; t < total; t++) bytes[t] = (uint8_t)((t * 37) % 23 + (t % 3) * 80), targets[t] = (float)(t % 4) * 0.25f;
    float *states = random_floats(ITEMS * hidden, 1), *table = random_floats(UFORM_BYTES * hidden, 0.1f);
    float *bias = random_floats(UFORM_BYTES, 0.1f), *log_t = random_floats(2, 0.3f);
    float *d_states = random_floats(ITEMS * hidden, 1), *d_table = random_floats(UFORM_BYTES * hidden, 1);
    float *d_bias = random_floats(UFORM_BYTES, 1), *d_log_t = random_floats(2, 1);
    float *g_states = on_gpu(b, states, ITEMS * hidden * 4), *g_table = on_gpu(b, table, UFORM_BYTES * hidden * 4);
    float *g_bias = on_gpu(b, bias, UFORM_BYTES * 4), *g_log_t = on_gpu(b, log_t, 2 * 4);
    float *g_d_states = on_gpu(b, d_states, ITEMS * hidden * 4), *g_d_table = on_gpu(b, d_table, UFORM_BYTES * hidden * 4);
    float *g_d_bias = on_gpu(b, d_bias, UFORM_BYTES * 4), *g_d_log_t = on_gpu(b, d_log_t, 2 * 4);
    uform_choices_batch_t batch = {ITEMS, hidden, states, bytes, targets, offsets, groups};
    double cpu = 0.5, gpu = 0.5;   /* both add to what is there */
    b->cpu.ops->choices_loss(&b->cpu, &batch, table, bias, log_t, 0.75f, &cpu, d_states, d_table, d_bias, d_log_t);
    batch.states = g_states;
    b->gpu.ops->choices_loss(&b->gpu, &batch, g_table, g_bias, g_log_t, 0.75f, &gpu, g_d_states, g_d_table,
                             g_d_bias, g_d_log_t);
    bool ok = fabs(cpu - gpu) <= 1e-12 * fabs(cpu);
    printf("| %-34s | %8zu | %10.3g | %10.3g | %s |\n", "choices_loss", total, fabs(cpu - gpu), 1e-12 * fabs(cpu),
           ok ? "ok" : "FAIL");
    ok ? passed++ : failed++;
    compare(b, "choices_loss d_states", d_states, g_d_states, ITEMS * hidden, 1e-5);
    compare(b, "choices_loss d_table", d_table, g_d_table, UFORM_BYTES * hidden, 1e-5);
    compare(b, "choices_loss d_bias", d_bias, g_d_bias, UFORM_BYTES, 1e-5);
    compare(b, "choices_loss d_log_temperature", d_log_t, g_d_log_t, 2, 1e-5);
    void *all[] = {g_states, g_table, g_bias, g_log_t, g_d_states, g_d_table, g_d_bias, g_d_log_t};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) b->gpu.ops->free(&b->gpu, all[i]);
    free(bytes), free(targets), free(states), free(table), free(bias), free(log_t), free(d_states), free(d_table);
    free(d_bias), free(d_log_t);
}

/* Edges over n items that exercise every precedence of section 3: attract
 * i -> i+4 (weighted); repel i -> i+1 (in i's bag of 3 unless i % 3 == 2:
 * the bag wins), i+5, and i+4 for every fourth i (attract wins); ignore
 * i -> i+7 for every third i and i -> i+2 for every fifth (a bag member or
 * an ambient negative dropped); self edges, which count for nothing, on
 * item 2's attract and repel lists. */
typedef struct {
    size_t offsets[3][64];
    uint32_t ids[3][160];
    float weights[160];
    uform_relations_t relations;
} test_relations_t;

static void make_relations(test_relations_t *r, size_t n) {
    size_t counts[3] = {0, 0, 0};
    for (size_t i = 0; i < n; i++) {
        r->offsets[0][i] = counts[0], r->offsets[1][i] = counts[1], r->offsets[2][i] = counts[2];
        r->weights[counts[0]] = 0.25f + (float)(i % 4) * 0.5f;
        r->ids[0][counts[0]++] = (uint32_t)((i + 4) % n);
        if (i == 2) r->weights[counts[0]] = 1.0f, r->ids[0][counts[0]++] = 2, r->ids[1][counts[1]++] = 2;
        r->ids[1][counts[1]++] = (uint32_t)((i + 1) % n);
        r->ids[1][counts[1]++] = (uint32_t)((i + 5) % n);
        if (i % 4 == 0) r->ids[1][counts[1]++] = (uint32_t)((i + 4) % n);
        if (i % 3 == 0) r->ids[2][counts[2]++] = (uint32_t)((i + 7) % n);
        if (i % 5 == 0) r->ids[2][counts[2]++] = (uint32_t)((i + 2) % n);
    }
    for (int set = 0; set < 3; set++) r->offsets[set][n] = counts[set];
    r->relations.attract = (uform_edges_t){r->offsets[0], r->ids[0], r->weights};
    r->relations.repel = (uform_edges_t){r->offsets[1], r->ids[1], NULL};
    r->relations.ignore = (uform_edges_t){r->offsets[2], r->ids[2], NULL};
}

/* Unit rows (a zero row at `empty`, an empty item, when below count). */
static float *unit_rows(size_t count, size_t width, size_t empty) {
    float *rows = random_floats(count * width, 1);
    for (size_t i = 0; i < count; i++) {
        double sum = 0;
        for (size_t k = 0; k < width; k++) sum += (double)rows[i * width + k] * rows[i * width + k];
        for (size_t k = 0; k < width; k++) rows[i * width + k] = i == empty ? 0.0f : (float)(rows[i * width + k] / sqrt(sum));
    }
    return rows;
}

static void check_status(const char *what, uform_status_t cpu, uform_status_t gpu, float cpu_loss, float gpu_loss,
                         double bound) {
    bool ok = cpu == UFORM_OK && gpu == UFORM_OK && fabs((double)cpu_loss - gpu_loss) <= bound * fmax(1.0, fabs(cpu_loss));
    printf("| %-34s | %8d | %10.3g | %10.3g | %s |\n", what, 1, fabs((double)cpu_loss - gpu_loss), bound,
           ok ? "ok" : "FAIL");
    if (!ok && (cpu != UFORM_OK || gpu != UFORM_OK))
        printf("    status cpu %d, gpu %d: %s\n", (int)cpu, (int)gpu, uform_last_error());
    ok ? passed++ : failed++;
}

/* The contrastive term on 40 items (more than the emulation's 8 blocks: the
 * kernels' loops over anchors), bags of 3, two temperature groups, the
 * relations above, an empty item, Matryoshka widths {24, 48}, each pair form
 * with AMBIENT and NAMED negatives. Both compute in float64 with sums in other
 * orders (trees against lanes), so the FP32 outputs round the same values to
 * within an ulp or two: 1e-6 of the loss and of the largest gradient. Then a
 * NAMED BALANCED call with neither bags nor relations scores no anchor (loss
 * 0, nothing added), and a non-finite embedding is refused with nothing
 * written. */
static void test_contrastive_loss(backends_t *b) {
    enum { N = 40, D = 48, G = 2 };
    static const size_t widths[2] = {24, 48};
    static test_relations_t r;
    make_relations(&r, N);
    uint32_t bags[N], groups[N];
    for (size_t i = 0; i < N; i++) bags[i] = (uint32_t)(i / 3), groups[i] = (uint32_t)(i % G);
    float *e = unit_rows(N, D, 17), tau[G] = {logf(8.0f), logf(12.0f)}, bias[G] = {-1.0f, -0.25f};
    float *ge = on_gpu(b, e, sizeof(float) * N * D), *gtau = on_gpu(b, tau, sizeof(tau));
    float *gbias = on_gpu(b, bias, sizeof(bias));
    const uform_pair_loss_form_t forms[3] = {UFORM_PAIR_LOSS_BALANCED, UFORM_PAIR_LOSS_RANKED, UFORM_PAIR_LOSS_SIGMOID};
    for (int f = 0; f < 3; f++)
        for (int named = 0; named < 2; named++) {
            uform_contrastive_config_t config = {widths, 2, named ? UFORM_NEGATIVES_NAMED : UFORM_NEGATIVES_AMBIENT,
                                                 0.6f, forms[f], G};
            float *de = random_floats(N * D, 0.01f), dtau[G] = {0.5f, -0.5f}, dbias[G] = {0.25f, 0.125f};
            float *gde = on_gpu(b, de, sizeof(float) * N * D), *gdtau = on_gpu(b, dtau, sizeof(dtau));
            float *gdbias = on_gpu(b, dbias, sizeof(dbias));
            uform_contrastive_batch_t batch = {N, D, e, bags, groups, &r.relations};
            float cpu_loss = -1, gpu_loss = -2;
            uform_status_t cs = b->cpu.ops->contrastive_loss(&b->cpu, &config, &batch, tau, bias, &cpu_loss, de, dtau,
                                                             dbias);
            batch.embeddings = ge;
            uform_status_t gs = b->gpu.ops->contrastive_loss(&b->gpu, &config, &batch, gtau, gbias, &gpu_loss, gde,
                                                             gdtau, gdbias);
            char what[96];
            snprintf(what, sizeof(what), "contrastive_loss %s %s", forms[f] == UFORM_PAIR_LOSS_BALANCED ? "BALANCED"
                     : forms[f] == UFORM_PAIR_LOSS_RANKED ? "RANKED" : "SIGMOID", named ? "NAMED" : "AMBIENT");
            check_status(what, cs, gs, cpu_loss, gpu_loss, 1e-6);
            compare(b, "  d_embeddings", de, gde, N * D, 1e-6);
            compare(b, "  d_log_inverse_temperature", dtau, gdtau, G, 1e-6);
            compare(b, "  d_bias", dbias, gdbias, G, 1e-6);
            if (f == 0 && named) {
                /* no bags, no relations, NAMED: no anchor is scored */
                batch.bags = NULL, batch.relations = NULL;
                gpu_loss = -1;
                float *before = malloc(sizeof(float) * N * D), tau_before[G];
                b->gpu.ops->download(&b->gpu, before, gde, sizeof(float) * N * D);
                b->gpu.ops->download(&b->gpu, tau_before, gdtau, sizeof(tau_before));
                gs = b->gpu.ops->contrastive_loss(&b->gpu, &config, &batch, gtau, gbias, &gpu_loss, gde, gdtau, gdbias);
                check_status("contrastive_loss (no anchor)", UFORM_OK, gs, 0.0f, gpu_loss, 0);
                compare(b, "  d_embeddings (unchanged)", before, gde, N * D, 0);
                /* a NaN embedding: refused, naming it, nothing written */
                float nan_value = NAN;
                b->gpu.ops->upload(&b->gpu, ge + 5 * D + 7, &nan_value, sizeof(float));
                batch.bags = bags, batch.relations = &r.relations;
                gs = b->gpu.ops->contrastive_loss(&b->gpu, &config, &batch, gtau, gbias, &gpu_loss, gde, gdtau, gdbias);
                bool ok = gs == UFORM_INVALID_ARGUMENT && strstr(uform_last_error(), "embeddings[5][7]");
                printf("| %-34s | %8d | %10s | %10s | %s |\n", "contrastive_loss (NaN refused)", 1, "-", "-",
                       ok ? "ok" : "FAIL");
                if (!ok) printf("    status %d: %s\n", (int)gs, uform_last_error());
                ok ? passed++ : failed++;
                compare(b, "  d_embeddings (not written)", before, gde, N * D, 0);
                compare(b, "  d_log_inverse_temperature (not written)", tau_before, gdtau, G, 0);
                free(before);
                b->gpu.ops->upload(&b->gpu, ge + 5 * D + 7, e + 5 * D + 7, sizeof(float));
            }
            void *all[] = {gde, gdtau, gdbias};
            for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) b->gpu.ops->free(&b->gpu, all[i]);
            free(de);
        }
    void *all[] = {ge, gtau, gbias};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) b->gpu.ops->free(&b->gpu, all[i]);
    free(e);
}

/* Late interaction on 14 items of 1 to 5 rows: queries of 0 to 3 rows (first
 * rows), documents of 0 or all rows, bags of 2, the relations above, each
 * pair form. The dot products are FP32 sums of 16 terms in another order
 * (each within 16 x 2^-24 of sum |q||d| <= 1), the rest float64: the loss
 * and scalars' gradients 1e-5 relative; the token gradients are FP32 sums in
 * the CPU's order over at most 14 x 3 terms, 1e-5 of the largest. (A near tie
 * of two rows could pick another winner; the fixed inputs here have none.) */
static void test_late_interaction_loss(backends_t *b) {
    enum { N = 14, W = 16 };
    size_t first[N], query_rows[N], document_rows[N], rows = 0;
    uint32_t bags[N];
    for (size_t i = 0; i < N; i++) {
        size_t length = 1 + (i * 7) % 5;
        first[i] = rows;
        query_rows[i] = i % 5 == 4 ? 0 : (i % 3 < length ? i % 3 + 1 : length);
        document_rows[i] = i % 6 == 5 ? 0 : length;
        bags[i] = (uint32_t)(i / 2);
        rows += length;
    }
    static test_relations_t r;
    make_relations(&r, N);
    float *v = unit_rows(rows, W, SIZE_MAX), *gv = on_gpu(b, v, sizeof(float) * rows * W);
    const uform_pair_loss_form_t forms[3] = {UFORM_PAIR_LOSS_BALANCED, UFORM_PAIR_LOSS_RANKED, UFORM_PAIR_LOSS_SIGMOID};
    for (int f = 0; f < 3; f++) {
        uform_contrastive_config_t config;
        memset(&config, 0, sizeof(config));
        config.negatives = f == 1 ? UFORM_NEGATIVES_NAMED : UFORM_NEGATIVES_AMBIENT;
        config.ambient_repulsion_weight = 0.6f;
        config.groups = 1;
        float *dv = random_floats(rows * W, 0.01f), dtau = 0.5f, dbias = -0.25f;
        float *gdv = on_gpu(b, dv, sizeof(float) * rows * W), *gdtau = on_gpu(b, &dtau, 4), *gdbias = on_gpu(b, &dbias, 4);
        uform_late_batch_t batch = {N, W, v, first, query_rows, document_rows, bags, &r.relations};
        float cpu_loss = -1, gpu_loss = -2, bias = f == 2 ? -0.5f : 0.0f;
        uform_status_t cs = b->cpu.ops->late_interaction_loss(&b->cpu, &config, forms[f], &batch, 1.3f, bias, 0.75f,
                                                              &cpu_loss, dv, &dtau, &dbias);
        batch.vectors = gv;
        uform_status_t gs = b->gpu.ops->late_interaction_loss(&b->gpu, &config, forms[f], &batch, 1.3f, bias, 0.75f,
                                                              &gpu_loss, gdv, gdtau, gdbias);
        char what[96];
        snprintf(what, sizeof(what), "late_interaction_loss %s", forms[f] == UFORM_PAIR_LOSS_BALANCED ? "BALANCED"
                 : forms[f] == UFORM_PAIR_LOSS_RANKED ? "RANKED" : "SIGMOID");
        check_status(what, cs, gs, cpu_loss, gpu_loss, 1e-5);
        compare(b, "  d_vectors", dv, gdv, rows * W, 1e-5);
        compare(b, "  d_log_inverse_temperature", &dtau, gdtau, 1, 1e-5);
        compare(b, "  d_bias", &dbias, gdbias, 1, 1e-5);
        void *all[] = {gdv, gdtau, gdbias};
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) b->gpu.ops->free(&b->gpu, all[i]);
        free(dv);
    }
    b->gpu.ops->free(&b->gpu, gv);
    free(v);
}

/* The embedding table's gradient over many rows (the CUDA backend sums them
 * in chunks of 256, then the chunks: 3 here) with ids repeated across chunks,
 * media rows skipped: sums over up to `rows` terms in another order (1e-4). */
/* MaxSim (maxsim.cu) on token rows of every scalar it reads, against the CPU
 * backend's (whose products take the machine's best sgemm path, whatever the
 * backend's class): the GPU takes each dot product as one fused multiply-add
 * per step in order, as the CPU's AVX2, AVX-512, NEON and SVE paths do, so
 * against those the scores are the same bits; the portable path multiplies
 * then adds (one rounding more per step): width 40 sums of unit-sized
 * products, 1e-5 relative. Items without rows score 0; a NaN in a document
 * row makes its pairs NaN on both. */
static void test_maxsim(backends_t *b) {
    enum { QUERIES = 5, DOCUMENTS = 7, WIDTH = 40 };
    static const size_t query_offsets[QUERIES + 1] = {0, 3, 3, 10, 11, 17};
    static const size_t document_offsets[DOCUMENTS + 1] = {2, 9, 9, 40, 41, 45, 52, 60};   /* from row 2 */
    static const uform_scalar_t scalars[] = {UFORM_SCALAR_F32, UFORM_SCALAR_BF16, UFORM_SCALAR_F16,
                                             UFORM_SCALAR_I8, UFORM_SCALAR_E4M3, UFORM_SCALAR_E5M2};
    static const char *names[] = {"F32", "BF16", "F16", "I8", "E4M3", "E5M2"};
    float *values = random_floats(60 * WIDTH, 0.3f);
    bool fused = uform_sgemm_best_path() != UFORM_SGEMM_PORTABLE;
    for (size_t s = 0; s < 6; s++) {
        uform_scalar_t scalar = scalars[s];
        /* rows of 4 bytes more than the scalars: a stride the GPU copy keeps */
        size_t scalar_bytes = scalar == UFORM_SCALAR_F32 ? 4 : scalar == UFORM_SCALAR_BF16 || scalar == UFORM_SCALAR_F16 ? 2 : 1;
        size_t row_bytes = WIDTH * scalar_bytes + 4;
        uint8_t *rows = calloc(60, row_bytes);
        b->cpu.ops->download_rows(&b->cpu, values, 60, WIDTH, scalar, rows, row_bytes);   /* FP32 to the scalar */
        uform_token_rows_t q = {rows, query_offsets, QUERIES, WIDTH, row_bytes, scalar};
        uform_token_rows_t d = {rows, document_offsets, DOCUMENTS, WIDTH, row_bytes, scalar};
        float cpu[QUERIES * DOCUMENTS], gpu[QUERIES * DOCUMENTS];
        uform_status_t cpu_status = b->cpu.ops->maxsim(&b->cpu, &q, &d, cpu);
        uform_status_t gpu_status = b->gpu.ops->maxsim(&b->gpu, &q, &d, gpu);
        double largest = 0, error = 0;
        bool same = true;
        for (size_t i = 0; i < QUERIES * DOCUMENTS; i++) {
            largest = fmax(largest, fabs((double)cpu[i]));
            double e = fabs((double)gpu[i] - (double)cpu[i]);
            error = isnan(e) ? INFINITY : fmax(error, e);
            same = same && (gpu[i] == cpu[i] || (isnan(gpu[i]) && isnan(cpu[i])));
        }
        bool empty_zero = gpu[1 * DOCUMENTS + 0] == 0.0f && gpu[0 * DOCUMENTS + 1] == 0.0f;
        double bound = 1e-5 * fmax(largest, 1e-30);
        bool ok = cpu_status == UFORM_OK && gpu_status == UFORM_OK && error <= bound &&
                  (same || !fused) && empty_zero;
        char what[64];
        snprintf(what, sizeof(what), "maxsim %s%s", names[s], fused ? " (= CPU FMA bits)" : "");
        printf("| %-34s | %8d | %10.3g | %10.3g | %s |\n", what, QUERIES * DOCUMENTS, error, bound,
               ok ? "ok" : gpu_status != UFORM_OK ? uform_last_error() : !same && fused ? "FAIL (bits)" : "FAIL");
        ok ? passed++ : failed++;
        free(rows);
    }
    /* a NaN in document 3's only row: column 3 NaN on both, the rest as before */
    float nan_rows[60 * WIDTH];
    memcpy(nan_rows, values, sizeof(nan_rows));
    nan_rows[40 * WIDTH + 7] = NAN;
    uform_token_rows_t q = {nan_rows, query_offsets, QUERIES, WIDTH, WIDTH * sizeof(float), UFORM_SCALAR_F32};
    uform_token_rows_t d = {nan_rows, document_offsets, DOCUMENTS, WIDTH, WIDTH * sizeof(float), UFORM_SCALAR_F32};
    float cpu[QUERIES * DOCUMENTS], gpu[QUERIES * DOCUMENTS];
    bool ok = b->cpu.ops->maxsim(&b->cpu, &q, &d, cpu) == UFORM_OK && b->gpu.ops->maxsim(&b->gpu, &q, &d, gpu) == UFORM_OK;
    for (size_t i = 0; ok && i < QUERIES * DOCUMENTS; i++) {
        bool has_rows = query_offsets[i / DOCUMENTS + 1] > query_offsets[i / DOCUMENTS];
        bool nan_expected = i % DOCUMENTS == 3 && has_rows;
        ok = isnan(gpu[i]) == nan_expected && isnan(cpu[i]) == nan_expected;
    }
    printf("| %-34s | %8d | %10s | %10s | %s |\n", "maxsim F32, a NaN row", QUERIES * DOCUMENTS, "-", "-",
           ok ? "ok" : "FAIL");
    ok ? passed++ : failed++;
    free(values);
}

static void test_embedding_backward(backends_t *b, size_t rows, size_t width) {
    size_t table_rows = 257;
    float *dy = random_floats(rows * width, 1), *dtable = random_floats(table_rows * width, 1);
    float *dmodality = random_floats(width, 1);
    uint32_t *ids = malloc(rows * sizeof(uint32_t));
    for (size_t r = 0; r < rows; r++) ids[r] = r % 7 == 3 ? UFORM_NOT_TEXT : (uint32_t)((r * 11) % 40);
    float *gdy = on_gpu(b, dy, rows * width * 4), *gdtable = on_gpu(b, dtable, table_rows * width * 4);
    float *gdmodality = on_gpu(b, dmodality, width * 4);
    uint32_t *gids = on_gpu(b, ids, rows * sizeof(uint32_t));
    b->cpu.ops->embedding_backward(&b->cpu, dy, ids, rows, width, dtable, dmodality);
    b->gpu.ops->embedding_backward(&b->gpu, gdy, gids, rows, width, gdtable, gdmodality);
    compare(b, "embedding_backward dtable (chunks)", dtable, gdtable, table_rows * width, 1e-4);
    compare(b, "embedding_backward dmodality (chunks)", dmodality, gdmodality, width, 1e-4);
    void *all[] = {gdy, gdtable, gdmodality, gids};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) b->gpu.ops->free(&b->gpu, all[i]);
    free(dy), free(dtable), free(dmodality), free(ids);
}

/* The masked media objective's loss: the difference in float, its square
 * summed in double; the rows' means summed in another order (double: 1e-12
 * relative); the gradient the same float expression on both (1e-6). */
static void test_reconstruction(backends_t *b, size_t rows, size_t width) {
    float *predictions = random_floats(rows * width, 1), *targets = random_floats(rows * width, 1);
    float *d = random_floats(rows * width, 1);
    float *gp = on_gpu(b, predictions, rows * width * 4), *gt = on_gpu(b, targets, rows * width * 4);
    float *gd = on_gpu(b, d, rows * width * 4);
    double cpu = b->cpu.ops->reconstruction_loss(&b->cpu, predictions, targets, rows, width, 0.25f, d);
    double gpu = b->gpu.ops->reconstruction_loss(&b->gpu, gp, gt, rows, width, 0.25f, gd);
    bool ok = fabs(cpu - gpu) <= 1e-12 * fabs(cpu);
    printf("| %-34s | %8zu | %10.3g | %10.3g | %s |\n", "reconstruction_loss", rows, fabs(cpu - gpu),
           1e-12 * fabs(cpu), ok ? "ok" : "FAIL");
    ok ? passed++ : failed++;
    compare(b, "reconstruction_loss d_predictions", d, gd, rows * width, 1e-6);
    void *all[] = {gp, gt, gd};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) b->gpu.ops->free(&b->gpu, all[i]);
    free(predictions), free(targets), free(d);
}

static void test_optimizer(backends_t *b, size_t count) {
    float *p = random_floats(count, 1), *g = random_floats(count, 0.1f), *m = random_floats(count, 0.01f);
    float *v = random_floats(count, 0.001f);
    for (size_t i = 0; i < count; i++) v[i] = fabsf(v[i]);
    uint8_t *decay = malloc(count);
    for (size_t i = 0; i < count; i++) decay[i] = i % 3 != 0;
    float *gp = on_gpu(b, p, count * 4), *gg = on_gpu(b, g, count * 4), *gm = on_gpu(b, m, count * 4);
    float *gv = on_gpu(b, v, count * 4);
    uint8_t *gdecay = on_gpu(b, decay, count);
    double cpu_norm = b->cpu.ops->sum_squares(&b->cpu, g, count);
    double gpu_norm = b->gpu.ops->sum_squares(&b->gpu, gg, count);
    bool ok = fabs(cpu_norm - gpu_norm) <= 1e-12 * cpu_norm;   /* double sums in two orders */
    printf("| %-34s | %8zu | %10.3g | %10.3g | %s |\n", "sum_squares", count, fabs(cpu_norm - gpu_norm),
           1e-12 * cpu_norm, ok ? "ok" : "FAIL");
    ok ? passed++ : failed++;
    size_t cpu_bad = b->cpu.ops->adamw_first_non_finite(&b->cpu, p, g, 0.5f, m, v, decay, count, 3, 1e-3f);
    size_t gpu_bad = b->gpu.ops->adamw_first_non_finite(&b->gpu, gp, gg, 0.5f, gm, gv, gdecay, count, 3, 1e-3f);
    ok = cpu_bad == gpu_bad && cpu_bad == SIZE_MAX;
    printf("| %-34s | %8zu | %10s | %10s | %s |\n", "adamw_first_non_finite (none)", count, "-", "-", ok ? "ok" : "FAIL");
    ok ? passed++ : failed++;
    b->cpu.ops->adamw(&b->cpu, p, g, 0.5f, m, v, decay, count, 3, 1e-3f);   /* from equal inputs */
    b->gpu.ops->adamw(&b->gpu, gp, gg, 0.5f, gm, gv, gdecay, count, 3, 1e-3f);
    compare(b, "adamw parameters", p, gp, count, 1e-6);
    compare(b, "adamw first moments", m, gm, count, 1e-6);
    compare(b, "adamw second moments", v, gv, count, 1e-6);
    /* an update that overflows at one index: both name the same, lowest one */
    p[count / 3] = 3e38f, g[count / 3] = 1e30f, p[count / 2] = 3e38f, g[count / 2] = 1e30f;
    b->gpu.ops->upload(&b->gpu, gp, p, count * 4);
    b->gpu.ops->upload(&b->gpu, gg, g, count * 4);
    cpu_bad = b->cpu.ops->adamw_first_non_finite(&b->cpu, p, g, 1.0f, m, v, decay, count, 4, 1e30f);
    gpu_bad = b->gpu.ops->adamw_first_non_finite(&b->gpu, gp, gg, 1.0f, gm, gv, gdecay, count, 4, 1e30f);
    ok = cpu_bad == gpu_bad && cpu_bad != SIZE_MAX;
    printf("| %-34s | %8zu | %10zu | %10zu | %s |\n", "adamw_first_non_finite (overflow)", count, gpu_bad, cpu_bad,
           ok ? "ok" : "FAIL");
    ok ? passed++ : failed++;
    void *all[] = {gp, gg, gm, gv, gdecay};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) b->gpu.ops->free(&b->gpu, all[i]);
    free(p), free(g), free(m), free(v), free(decay);
}

int main(void) {
    size_t gpus = 0;
    uform_capabilities_t capabilities;
    if (uform_capabilities(&capabilities) != UFORM_OK || !capabilities.gpu_backend_built) {
        printf("skip test_cuda_ops: this build has no CUDA backend (nvcc or the nvidia-cublas wheel was not found)\n");
        return 0;
    }
    if (uform_cuda_devices(&gpus) != UFORM_OK) {
        printf("skip test_cuda_ops: %s\n", uform_last_error());
        return 0;
    }
    uform_executor_t *executor = NULL;
    if (uform_executor_for_ram(1, NULL, 0, &executor) != UFORM_OK) return 1;
    backends_t b;
    b.cpu = uform_cpu_backend(UFORM_CPU_CLASS_SERIAL, executor);
    uform_gpu_class_t gpu_class;
    char name[256];
    if (uform_cuda_device_class(0, &gpu_class, name, sizeof(name)) != UFORM_OK ||
        uform_cuda_backend_init(0, &b.gpu) != UFORM_OK) {
        printf("test_cuda_ops: the CUDA backend did not start on GPU 0: %s\n0 passed, 1 failed\n", uform_last_error());
        uform_executor_free(executor);
        return 1;
    }
    printf("test_cuda_ops on GPU 0 (%s, class %d) of %zu, against the CPU backend (SERIAL)\n\n", name,
           (int)gpu_class, gpus);
    printf("| %-34s | %8s | %10s | %10s | %s |\n|---|---:|---:|---:|---|\n", "operation", "values", "max error",
           "bound", "result");
    test_gemm(&b, 64, 96, 128, false, false, false, false);
    test_gemm(&b, 33, 17, 65, false, true, true, false);
    test_gemm(&b, 40, 24, 200, true, false, false, true);
    test_gemm(&b, 7, 5, 3, true, true, true, true);
    test_gemm(&b, 9, 11, 0, false, false, true, true);
    test_linear_backward(&b, 37, 48, 64, 0);
    test_linear_backward(&b, 37, 48, 64, 1);   /* 4-byte aligned outputs, bias and x */
    test_linear_backward(&b, 700, 48, 64, 0);   /* the bias gradient's column sums over 3 chunks of rows */
    test_linear_backward(&b, 300, 37, 20, 0);   /* a width no multiple of 4: one column a thread */
    test_rope_linear_backward(&b, 37, 128);
    test_rope_linear_backward(&b, 700, 64);    /* 3 chunks of rows */
    test_column_lanes(&b, 700, 64);            /* 3 chunks of rows */
    test_column_lanes(&b, 37, 128);
    test_packed(&b, 37, 192, 64);
    test_packed(&b, 300, 64, 256);
    test_packed_e4m3(&b, 37, 96, 64);
    test_bf16_operands(&b, 37, 96, 64);
    test_bf16_operands(&b, 300, 256, 192);
    test_bf16_operands(&b, 45, 64, 768);   /* the model's width: layer norm's warp-per-row kernel */
    test_linear_qkv_bf16(&b, 37, 64, 64);
    test_linear_qkv_bf16(&b, 45, 128, 192);
    test_download_rows(&b, 13, 40, false);
    test_download_rows(&b, 13, 40, true);
    test_download_rows(&b, 300, 3, true);   /* more rows than a block's threads; a B1 row of one byte */
    test_choices(&b, 128);
    test_rows(&b, 29, 192);
    test_rows(&b, 3, 1024);
    test_rows(&b, 37, 768);    /* layer norm's warp-per-row kernel at the model's width */
    test_rows(&b, 700, 64);   /* the layer norm's weight gradients over 3 chunks of rows */
    test_segments(&b, 128);
    test_attention(&b, 128, true);
    test_attention(&b, 128, false);
    test_attention_bf16(&b, 128, true);
    test_attention_bf16(&b, 128, false);
    test_attention_train_bf16(&b, 128, true);
    test_attention_train_bf16(&b, 128, false);
    test_embedding_backward(&b, 700, 64);
    test_choices_loss(&b, 96);
    test_contrastive_loss(&b);
    test_late_interaction_loss(&b);
    test_maxsim(&b);
    test_reconstruction(&b, 300, 48);
#ifdef UFORM_CUDA_EMULATION
    test_optimizer(&b, 10007);
#else
    test_optimizer(&b, 100003);
#endif
    uform_cuda_backend_free(&b.gpu);
    uform_executor_free(executor);
    printf("\ntest_cuda_ops: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
#endif /* UFORM_HAVE_CUDA */
