/* gemm_fp8.cu: products of E4M3 weights on FP8 tensor cores (ADA, HOPPER,
 * BLACKWELL): y (+)= x W^T (+ bias), W the model's E4M3 codes [n, k] with a
 * power-of-two scale per row (model/quantize.c), x FP32 activations.
 *
 * The activations are quantized per row (docs/architecture.md, "E4M3 on
 * GPUs"): row r's scale is s_r = amax_r / 448 in FP32 (amax_r the largest
 * magnitude of the row, NaN ignored; s_r = 1 when that is 0, or when the
 * quotient underflows to 0), and its codes are e4m3(x[r, p] / s_r), the FP32
 * quotient rounded to nearest even and saturating at 448. cuBLASLt multiplies
 * the codes on the tensor cores with FP32 accumulation, unscaled (its plainest
 * FP8 product: no scale vectors, FP32 out); then a kernel of ours
 *   y[r, j] = (accumulate ? y[r, j] : 0) + (product[r, j] w_j) s_r + bias[j]
 * in FP32, in that order, with W's row scale w_j (cuBLASLt's FP8 products take
 * a BF16 bias only, and ours is FP32). The codes' rows are padded with zero
 * rows to a multiple of 16, FP8 kernels' granule.
 *
 * On an H200 (2026-12-04, cuBLASLt 13) the first version, which gave cuBLASLt
 * both scales as outer vectors (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F)
 * and the rows unpadded, was refused (its E4M3 models' outputs matched the
 * BF16 decoding's, tests/gpu/test_cuda_ops.c missed the FP8 rule by 2.6%);
 * which of the two cuBLASLt refused is not known: this version asks for
 * neither. When it is refused too, uform_cuda_fp8_refusal says why. This
 * version is compiled and runs under the emulation; NOT YET RUN ON A GPU.
 *
 * The weights' error is the E4M3 model's on every backend; the activations'
 * codes add a relative error of at most 2^-4 per element (3 mantissa bits),
 * so a GPU's E4M3 outputs are not the CPU's E4M3 outputs: docs/gpu.md gives
 * the measured gap.
 *
 * On AMPERE (no FP8 tensor cores), or when cuBLASLt finds no algorithm for a
 * shape, uform_cuda_linear_fp8 answers false having done nothing, and the
 * caller decodes the weights to BF16 (gemm.cu); a refusal is kept for the
 * backend's life, so the model's products do not mix the two ways.
 *
 * Under the CUDA emulation the quantization runs as written here and the
 * product is the host's: the codes' products (exact in FP32) summed in k
 * order; the rest as on a GPU. */
#include "cuda_internal.h"
#include "reduce.cuh"

#ifndef UFORM_CUDA_EMULATION
#include "cublaslt.h"

#include <cuda_fp8.h>
#endif
#include <stdio.h>
#include <string.h>

/* Row r of x (stride `stride`) as E4M3 codes [rows, k] and its scale: one
 * block of UFORM_CUDA_ROW_THREADS threads per row. */
__global__ static void uform_quantize_rows_e4m3(const float *x, size_t stride, size_t k, uint8_t *codes,
                                                float *scales) {
    __shared__ float partial[UFORM_CUDA_ROW_THREADS / 32];
    size_t r = blockIdx.x;
    const float *row = x + r * stride;
    float amax = 0.0f;
    for (size_t p = threadIdx.x; p < k; p += blockDim.x) amax = fmaxf(amax, fabsf(row[p]));
    amax = uform_block_max(amax, partial);
    float scale = amax / 448.0f;
    if (!(scale > 0.0f)) scale = 1.0f;   /* a row of zeros, or amax below 448 x 2^-149 */
    for (size_t p = threadIdx.x; p < k; p += blockDim.x)
        codes[r * k + p] = __nv_cvt_float_to_fp8(row[p] / scale, __NV_SATFINITE, __NV_E4M3);
    if (threadIdx.x == 0) scales[r] = scale;
}

/* Rows [from, to) of the codes zero: the padding, whose products are not read. */
__global__ static void uform_zero_code_rows(size_t from, size_t to, size_t k, uint8_t *codes) {
    size_t index = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; index < (to - from) * k; index += (size_t)gridDim.x * blockDim.x) codes[from * k + index] = 0;
}

/* y[r, j] = (accumulate ? y[r, j] : 0) + (product[r, j] w_j) s_r (+ bias[j]). */
__global__ static void uform_add_product(size_t rows, size_t n, const float *product, const float *weight_scales,
                                         const float *scales, const float *bias, bool accumulate, float *y,
                                         size_t y_stride) {
    size_t index = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; index < rows * n; index += (size_t)gridDim.x * blockDim.x) {
        size_t r = index / n, j = index % n;
        float value = (accumulate ? y[r * y_stride + j] : 0.0f) + product[index] * weight_scales[j] * scales[r];
        y[r * y_stride + j] = bias ? value + bias[j] : value;
    }
}

#ifdef UFORM_CUDA_EMULATION
/* product[r, j] = sum_p w[j, p] x[r, p] over the codes, k in order. */
static bool uform_fp8_product(uform_backend_t *b, size_t rows, size_t n, size_t k, const uint8_t *weights,
                              const uint8_t *codes, float *product) {
    (void)b;
    float value[256];   /* every code's value, once per call */
    for (unsigned code = 0; code < 256; code++) value[code] = uform_e4m3_float((uint8_t)code);
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < n; j++) {
            float sum = 0.0f;
            for (size_t p = 0; p < k; p++) sum += value[weights[j * k + p]] * value[codes[r * k + p]];
            product[r * n + j] = sum;
        }
    return true;
}
#else
/* product [rows, n] = the codes' product on the tensor cores; false, nothing
 * recorded but the context's plan_refusal, when cuBLASLt has no plan for it. */
static bool uform_fp8_product(uform_backend_t *b, size_t rows, size_t n, size_t k, const uint8_t *weights,
                              const uint8_t *codes, float *product) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    /* product^T [n x rows] = W [n x k] x^T [k x rows], column-major: cuBLASLt's
     * A = W (transposed: FP8 wants A transposed, B not), B = the codes */
    uform_cuda_plan_t *plan = uform_cuda_plan(b, n, rows, k, k, k, n, true, false, NULL, UFORM_OPERANDS_E4M3,
                                              uform_cuda_alignment(weights), uform_cuda_alignment(codes),
                                              uform_cuda_alignment(product), true);
    if (!plan) return false;
    float alpha = 1.0f, beta = 0.0f;
    uform_lt_ok(b, uform_cublaslt()->matmul(context->lt, plan->operation, &alpha, weights, plan->a, codes, plan->b,
                                            &beta, product, plan->c, product, plan->c, &plan->algorithm,
                                            context->workspace, UFORM_CUDA_WORKSPACE_BYTES, context->stream),
                "cublasLtMatmul (FP8)");
    return true;
}
#endif

const char *uform_cuda_fp8_refusal(uform_backend_t *b) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    return context->fp8_refused ? context->fp8_refusal : NULL;
}

bool uform_cuda_linear_fp8(uform_backend_t *b, const uform_packed_t *packed, const float *x, size_t x_stride,
                           size_t rows, const float *bias, bool accumulate, float *y, size_t y_stride) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    if (!context->fp8_products || context->fp8_refused) return false;
    size_t n = packed->n, k = packed->k, padded = (rows + 15) & ~(size_t)15;
    size_t scales_at = (padded * k + 15) & ~(size_t)15;
    uint8_t *codes = (uint8_t *)uform_cuda_grow(b, &context->fp8_rows, scales_at + padded * sizeof(float),
                                                "FP8 activations");
    float *product = (float *)uform_cuda_grow(b, &context->fp8_product, padded * n * sizeof(float), "FP8 product");
    if (!codes || !product) return true;   /* recorded */
    float *scales = (float *)(codes + scales_at);
    const uint8_t *weights = (const uint8_t *)packed->data;
    const float *weight_scales = (const float *)(weights + uform_cuda_e4m3_scales_at(n, k));
    UFORM_LAUNCH(uform_quantize_rows_e4m3, (unsigned)rows, UFORM_CUDA_ROW_THREADS, context->stream)(x, x_stride, k,
                                                                                                  codes, scales);
    if (padded > rows)
        UFORM_LAUNCH(uform_zero_code_rows, uform_cuda_blocks((padded - rows) * k, 256), 256,
                     context->stream)(rows, padded, k, codes);
    uform_cuda_launched(b, "FP8 activations");
    if (!uform_fp8_product(b, padded, n, k, weights, codes, product)) {
        context->fp8_refused = true;   /* for the backend's life: the caller decodes to BF16 */
        snprintf(context->fp8_refusal, sizeof(context->fp8_refusal),
                 "cuBLASLt refused the FP8 product of %zu x %zu E4M3 weights and %zu rows: %s", n, k, padded,
                 context->plan_refusal);
        return false;
    }
    UFORM_LAUNCH(uform_add_product, uform_cuda_blocks(rows * n, 256), 256, context->stream)(
        rows, n, product, weight_scales, scales, bias, accumulate, y, y_stride);
    uform_cuda_launched(b, "FP8 product (bias)");
    return true;
}
