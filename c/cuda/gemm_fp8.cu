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
 * version ran on the H200 (2026-12-04, the second session with a GPU):
 * accepted, within the rule's tolerance (tests/gpu/test_cuda_ops.c).
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
#include "bf16.cuh"
#include "gelu.cuh"
#include "reduce.cuh"

#ifndef UFORM_CUDA_EMULATION
#include "cublaslt.h"

#include <cuda_fp8.h>
#endif
#include <stdio.h>
#include <string.h>

__device__ static inline float uform_operand_value(const float *p) { return *p; }
__device__ static inline float uform_operand_value(const uint16_t *p) { return uform_bf16_float(*p); }

/* Row r of x (stride `stride`) as E4M3 codes [rows, k] and its scale: one
 * block of UFORM_CUDA_ROW_THREADS threads per row. T: x's scalar, float or
 * uint16_t (BF16 operands, linear_bf16: their values, exact in FP32). */
template <typename T>
__global__ static void uform_quantize_rows_e4m3(const T *x, size_t stride, size_t k, uint8_t *codes,
                                                float *scales) {
    __shared__ float partial[UFORM_CUDA_ROW_THREADS / 32];
    size_t r = blockIdx.x;
    const T *row = x + r * stride;
    float amax = 0.0f;
    for (size_t p = threadIdx.x; p < k; p += blockDim.x) amax = fmaxf(amax, fabsf(uform_operand_value(row + p)));
    amax = uform_block_max(amax, partial);
    float scale = amax / 448.0f;
    if (!(scale > 0.0f)) scale = 1.0f;   /* a row of zeros, or amax below 448 x 2^-149 */
    for (size_t p = threadIdx.x; p < k; p += blockDim.x)
        codes[r * k + p] = __nv_cvt_float_to_fp8(uform_operand_value(row + p) / scale, __NV_SATFINITE, __NV_E4M3);
    if (threadIdx.x == 0) scales[r] = scale;
}

/* The same, a warp per row, four values a load (k and stride multiples of 4, x
 * 16-byte aligned as float, 8 as BF16): the largest magnitude is the same
 * whatever the order, so the same codes and scales. The block-per-row kernel
 * above moved about 0.6 TB/s on an H200, 21% of an E4M3 model's text_encode
 * (bench/gpu_profile.py, 2026-12-04). */
__device__ static inline float4 uform_operand_quad(const float *p) { return *(const float4 *)p; }
__device__ static inline float4 uform_operand_quad(const uint16_t *p) {
    uint2 words = *(const uint2 *)p;
    return make_float4(uform_bf16_float((uint16_t)(words.x & 0xffffu)), uform_bf16_float((uint16_t)(words.x >> 16)),
                       uform_bf16_float((uint16_t)(words.y & 0xffffu)), uform_bf16_float((uint16_t)(words.y >> 16)));
}

__device__ static inline uint32_t uform_e4m3_code(float value, float scale) {
    return (uint32_t)__nv_cvt_float_to_fp8(value / scale, __NV_SATFINITE, __NV_E4M3);
}

template <typename T>
__global__ static void uform_quantize_rows_e4m3_warp(const T *x, size_t rows, size_t stride, size_t k, uint8_t *codes,
                                                     float *scales) {
    const size_t warps = blockDim.x / 32, quads = k / 4;
    const unsigned lane = threadIdx.x % 32;
    for (size_t r = (size_t)blockIdx.x * warps + threadIdx.x / 32; r < rows; r += (size_t)gridDim.x * warps) {
        const T *row = x + r * stride;
        float amax = 0.0f;
        for (size_t q = lane; q < quads; q += 32) {
            float4 v = uform_operand_quad(row + 4 * q);
            amax = fmaxf(fmaxf(amax, fmaxf(fabsf(v.x), fabsf(v.y))), fmaxf(fabsf(v.z), fabsf(v.w)));
        }
        amax = uform_warp_max(amax);
        float scale = amax / 448.0f;
        if (!(scale > 0.0f)) scale = 1.0f;
        for (size_t q = lane; q < quads; q += 32) {
            float4 v = uform_operand_quad(row + 4 * q);
            *(uint32_t *)(codes + r * k + 4 * q) = uform_e4m3_code(v.x, scale) | uform_e4m3_code(v.y, scale) << 8 |
                                                   uform_e4m3_code(v.z, scale) << 16 | uform_e4m3_code(v.w, scale) << 24;
        }
        if (lane == 0) scales[r] = scale;
    }
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

/* The same four columns a thread (n and y_stride multiples of 4, y, the
 * bias and the scales 16-byte aligned): the scalar kernel, a 64-bit division
 * per element, took 32% of an E4M3 model's text_encode on an H200
 * (bench/gpu_profile.py, 2026-12-04). */
__device__ static inline float uform_fp8_output(float old, float product, float weight_scale, float scale,
                                                const float *bias, size_t j) {
    float value = old + product * weight_scale * scale;
    return bias ? value + bias[j] : value;
}

__global__ static void uform_add_product_x4(size_t rows, size_t n, const float *product, const float *weight_scales,
                                            const float *scales, const float *bias, bool accumulate, float *y,
                                            size_t y_stride) {
    size_t quads = n / 4, index = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; index < rows * quads; index += (size_t)gridDim.x * blockDim.x) {
        size_t r = index / quads, j = 4 * (index - r * quads);
        float4 p = *(const float4 *)(product + r * n + j), w = *(const float4 *)(weight_scales + j);
        float4 *target = (float4 *)(y + r * y_stride + j);
        float4 old = accumulate ? *target : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        float s = scales[r];
        *target = make_float4(uform_fp8_output(old.x, p.x, w.x, s, bias, j),
                              uform_fp8_output(old.y, p.y, w.y, s, bias, j + 1),
                              uform_fp8_output(old.z, p.z, w.z, s, bias, j + 2),
                              uform_fp8_output(old.w, p.w, w.w, s, bias, j + 3));
    }
}

/* NOT YET RUN ON A GPU (written after the last call of 2026-12-04; the
 * separate passes' bits under the emulation).
 * y[r, j] = bf16(gelu(0 + (product[r, j] w_j) s_r (+ bias[j]))): the up
 * projection of linear_gelu_bf16 with its GELU and rounding fused into the
 * scales' pass (the same expression as uform_add_product then
 * uform_gelu_bf16, so the same bits, without the FP32 rows between). Four
 * columns a thread when n is a multiple of 4 and y 8-byte aligned. */
__global__ static void uform_add_product_gelu_bf16(size_t rows, size_t n, const float *product,
                                                   const float *weight_scales, const float *scales, const float *bias,
                                                   uint16_t *y) {
    size_t index = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; index < rows * n; index += (size_t)gridDim.x * blockDim.x) {
        size_t r = index / n, j = index % n;
        float value = uform_fp8_output(0.0f, product[index], weight_scales[j], scales[r], bias, j);
        y[index] = uform_bf16_bits(uform_gelu(value));
    }
}

__global__ static void uform_add_product_gelu_bf16_x4(size_t rows, size_t n, const float *product,
                                                      const float *weight_scales, const float *scales,
                                                      const float *bias, uint16_t *y) {
    size_t quads = n / 4, index = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; index < rows * quads; index += (size_t)gridDim.x * blockDim.x) {
        size_t r = index / quads, j = 4 * (index - r * quads);
        float4 p = *(const float4 *)(product + r * n + j), w = *(const float4 *)(weight_scales + j);
        float s = scales[r];
        float a = uform_gelu(uform_fp8_output(0.0f, p.x, w.x, s, bias, j));
        float c = uform_gelu(uform_fp8_output(0.0f, p.y, w.y, s, bias, j + 1));
        float d = uform_gelu(uform_fp8_output(0.0f, p.z, w.z, s, bias, j + 2));
        float e = uform_gelu(uform_fp8_output(0.0f, p.w, w.w, s, bias, j + 3));
        *(uint2 *)(y + r * n + j) = make_uint2(uform_bf16_pair(a, c), uform_bf16_pair(d, e));
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
                                              uform_cuda_alignment(product), true, false);
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

/* The activations quantized and their FP8 product, unscaled, into the
 * context's buffers: *product [rows, n] and *scales [rows]; false with nothing
 * done when this GPU cannot (the caller decodes to BF16 instead); true with
 * *product NULL when a buffer could not be had (recorded). */
static bool uform_fp8_rows_product(uform_backend_t *b, const uform_packed_t *packed, const float *x,
                                   const uint16_t *x16, size_t x_stride, size_t rows, const float **product_out,
                                   const float **scales_out) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    *product_out = NULL;
    if (!context->fp8_products || context->fp8_refused) return false;
    size_t n = packed->n, k = packed->k, padded = (rows + 15) & ~(size_t)15;
    size_t scales_at = (padded * k + 15) & ~(size_t)15;
    uint8_t *codes = (uint8_t *)uform_cuda_grow(b, &context->fp8_rows, scales_at + padded * sizeof(float),
                                                "FP8 activations");
    float *product = (float *)uform_cuda_grow(b, &context->fp8_product, padded * n * sizeof(float), "FP8 product");
    if (!codes || !product) return true;   /* recorded */
    float *scales = (float *)(codes + scales_at);
    const uint8_t *weights = (const uint8_t *)packed->data;
    bool quads = k % 4 == 0 && x_stride % 4 == 0 && (x16 ? (uintptr_t)x16 % 8 : (uintptr_t)x % 16) == 0;
    if (quads && x16)
        UFORM_LAUNCH(uform_quantize_rows_e4m3_warp<uint16_t>, uform_cuda_blocks(rows, 8), 256, context->stream)(
            x16, rows, x_stride, k, codes, scales);
    else if (quads)
        UFORM_LAUNCH(uform_quantize_rows_e4m3_warp<float>, uform_cuda_blocks(rows, 8), 256, context->stream)(
            x, rows, x_stride, k, codes, scales);
    else if (x16)
        UFORM_LAUNCH(uform_quantize_rows_e4m3<uint16_t>, (unsigned)rows, UFORM_CUDA_ROW_THREADS, context->stream)(
            x16, x_stride, k, codes, scales);
    else
        UFORM_LAUNCH(uform_quantize_rows_e4m3<float>, (unsigned)rows, UFORM_CUDA_ROW_THREADS, context->stream)(
            x, x_stride, k, codes, scales);
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
    *product_out = product;
    *scales_out = scales;
    return true;
}

static const float *uform_fp8_weight_scales(const uform_packed_t *packed) {
    return (const float *)((const uint8_t *)packed->data + uform_cuda_e4m3_scales_at(packed->n, packed->k));
}

bool uform_cuda_linear_fp8(uform_backend_t *b, const uform_packed_t *packed, const float *x, const uint16_t *x16,
                           size_t x_stride, size_t rows, const float *bias, bool accumulate, float *y,
                           size_t y_stride) {
    const float *product, *scales;
    if (!uform_fp8_rows_product(b, packed, x, x16, x_stride, rows, &product, &scales)) return false;
    if (!product) return true;   /* recorded */
    cudaStream_t stream = uform_cuda_context(b)->stream;
    size_t n = packed->n;
    const float *weight_scales = uform_fp8_weight_scales(packed);
    if (n % 4 == 0 && y_stride % 4 == 0 && (uintptr_t)y % 16 == 0)
        UFORM_LAUNCH(uform_add_product_x4, uform_cuda_blocks(rows * n / 4, 256), 256, stream)(
            rows, n, product, weight_scales, scales, bias, accumulate, y, y_stride);
    else
        UFORM_LAUNCH(uform_add_product, uform_cuda_blocks(rows * n, 256), 256, stream)(
            rows, n, product, weight_scales, scales, bias, accumulate, y, y_stride);
    uform_cuda_launched(b, "FP8 product (bias)");
    return true;
}

bool uform_cuda_linear_gelu_fp8(uform_backend_t *b, const uform_packed_t *packed, const uint16_t *x16,
                                size_t x_stride, size_t rows, const float *bias, uint16_t *y) {
    const float *product, *scales;
    if (!uform_fp8_rows_product(b, packed, NULL, x16, x_stride, rows, &product, &scales)) return false;
    if (!product) return true;   /* recorded */
    cudaStream_t stream = uform_cuda_context(b)->stream;
    size_t n = packed->n;
    const float *weight_scales = uform_fp8_weight_scales(packed);
    if (n % 4 == 0 && (uintptr_t)y % 8 == 0)
        UFORM_LAUNCH(uform_add_product_gelu_bf16_x4, uform_cuda_blocks(rows * n / 4, 256), 256, stream)(
            rows, n, product, weight_scales, scales, bias, y);
    else
        UFORM_LAUNCH(uform_add_product_gelu_bf16, uform_cuda_blocks(rows * n, 256), 256, stream)(
            rows, n, product, weight_scales, scales, bias, y);
    uform_cuda_launched(b, "FP8 product (bias, GELU, BF16 out)");
    return true;
}
