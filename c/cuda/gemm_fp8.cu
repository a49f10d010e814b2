/* gemm_fp8.cu: products of E4M3 weights on FP8 tensor cores (ADA, HOPPER,
 * BLACKWELL): y (+)= x W^T (+ bias), W the model's E4M3 codes [n, k] with a
 * power-of-two scale per row (model/quantize.c), x FP32 activations.
 *
 * The activations are quantized per row (docs/architecture.md, "E4M3 on
 * GPUs"): row r's scale is s_r = amax_r / 448 in FP32 (amax_r the largest
 * magnitude of the row, NaN ignored; s_r = 1 when that is 0, or when the
 * quotient underflows to 0), and its codes are e4m3(x[r, p] / s_r), the FP32
 * quotient rounded to nearest even and saturating at 448. cuBLASLt multiplies
 * the codes on the tensor cores with FP32 accumulation, and
 *   y[r, j] = (accumulate ? y[r, j] : 0) + (product[r, j] w_j) s_r + bias[j]
 * in FP32, in that order, with W's row scale w_j: either cuBLASLt applies the
 * scales and a BF16-rounded bias itself (the scaled way, tried first; run on
 * an H100, 2026-12-05) or a kernel of ours does after its plain, unscaled product
 * (the plain way: below, "The FP8 products"). The codes' rows are padded with
 * zero rows to a multiple of 16, FP8 kernels' granule.
 *
 * On an H200 (2026-12-04, cuBLASLt 13) the first version, which gave cuBLASLt
 * both scales as outer vectors (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F)
 * with an FP32 D and the rows unpadded, was refused (its E4M3 models' outputs
 * matched the BF16 decoding's, tests/gpu/test_cuda_ops.c missed the FP8 rule
 * by 2.6%). Why became known on an H100 (2026-12-05, bench/gpu_fp8_probe.cu,
 * docs/gpu-fp8-probe.md): cuBLASLt's heuristic answers "an unsupported value
 * or parameter" for outer-vector scales whose pointers are not yet set, and
 * the plans were made before them; with the pointers set first it accepts
 * every form the model uses, unpadded rows included. The plain way then ran
 * on the H200 (2026-12-04, the second session with a GPU): accepted, within
 * the rule's tolerance (tests/gpu/test_cuda_ops.c). When it is refused too,
 * uform_cuda_fp8_refusal says why.
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

/* bias16 [n] = the bias rounded to BF16 (nearest even), by the first block
 * of a quantization's grid (bias16 NULL: nothing): the scaled way's bias
 * (below) without a launch of its own, which one text per call would pay for
 * at every product. */
__device__ static inline void uform_fp8_bias_bf16(const float *bias, size_t n, uint16_t *bias16) {
    if (!bias16 || blockIdx.x != 0) return;
    for (size_t j = threadIdx.x; j < n; j += blockDim.x) bias16[j] = uform_bf16_bits(bias[j]);
}

/* Row r of x (stride `stride`) as E4M3 codes [rows, k] and its scale: one
 * block of UFORM_CUDA_ROW_THREADS threads per row. T: x's scalar, float or
 * uint16_t (BF16 operands, linear_bf16: their values, exact in FP32). */
template <typename T>
__global__ static void uform_quantize_rows_e4m3(const T *x, size_t stride, size_t k, uint8_t *codes,
                                                float *scales, const float *bias, size_t n, uint16_t *bias16) {
    __shared__ float partial[UFORM_CUDA_ROW_THREADS / 32];
    uform_fp8_bias_bf16(bias, n, bias16);
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
                                                     float *scales, const float *bias, size_t n, uint16_t *bias16) {
    uform_fp8_bias_bf16(bias, n, bias16);
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

/* Written after the last call of 2026-12-04 (the separate passes' bits under
 * the emulation); run on an H100 (2026-12-05, the third session with a GPU: tests/gpu/, every check passing).
 * Since cuBLASLt applies the scales itself on it (the scaled way, below), the
 * plain way's passes run only where cuBLASLt refuses that.
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

/* The FP8 products: cuBLASLt multiplies the codes on the tensor cores in one
 * of two ways.
 * - Scaled (tried first): cuBLASLt applies both scales itself as outer
 *   vectors (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F: D[j, r] = w_j s_r
 *   (W x^T)[j, r], W's row scales along its M, the activations' along its N),
 *   adds the bias in its epilogue (BF16: cuBLASLt's FP8 products take no FP32
 *   bias, so the bias is rounded to BF16 first, inference's rounded bias as
 *   for BF16 weights' GELU epilogue), accumulates through beta = 1 (C = D = y)
 *   and, for linear_gelu_bf16, applies its GELU and writes BF16: no pass of
 *   ours after it. D's rows are the call's, unpadded.
 * - Plain: the unscaled product into the context's FP32 scratch, then our
 *   pass (uform_add_product_x4, uform_add_product_gelu_bf16_x4) applies the
 *   scales, the FP32 bias and GELU. On the H200 (2026-12-04) that pass took a
 *   quarter of an E4M3 model's text_encode, memory-bound.
 * The first version (2026-12-04) asked for outer vectors with an FP32 D and
 * rows unpadded and was refused; this one writes D in the output's own type
 * and is refused for the backend's life, form by form, the first time
 * cuBLASLt finds no algorithm or turns the call down (an unsupported scale
 * mode surfaces only at cublasLtMatmul: CUBLAS_STATUS_INVALID_VALUE), the
 * same call then taking the plain way; uform_cuda_fp8_scaled_refusal says
 * why. Written without a GPU; refused on the H100 (2026-12-05) until the
 * plan set the scale pointers before the heuristic (uform_cuda_plan), then
 * accepted in both forms and within tests/gpu/test_cuda_ops.c's bounds (its
 * model-level tests and speed with it: the next session with a GPU).
 *
 * The two ways' arithmetic is the same but for the bias's rounding: w_j is a
 * power of two, so w_j s_r P rounds once whichever way it is grouped
 * (cuBLASLt's s_a s_b, then times P; our (P w_j) s_r), then old + that, then
 * + bias (cuBLASLt's epilogue adds the bias after alpha AB + beta C). */
#ifdef UFORM_CUDA_EMULATION
/* The codes' products (exact in FP32) summed in k order: row r, column j. */
static float uform_fp8_sum(const float value[256], const uint8_t *weights, const uint8_t *codes, size_t k, size_t r,
                           size_t j) {
    float sum = 0.0f;
    for (size_t p = 0; p < k; p++) sum += value[weights[j * k + p]] * value[codes[r * k + p]];
    return sum;
}

/* product[r, j] = sum_p w[j, p] x[r, p] over the codes, k in order. */
static bool uform_fp8_product(uform_backend_t *b, size_t rows, size_t n, size_t k, const uint8_t *weights,
                              const uint8_t *codes, float *product) {
    (void)b;
    float value[256];   /* every code's value, once per call */
    for (unsigned code = 0; code < 256; code++) value[code] = uform_e4m3_float((uint8_t)code);
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < n; j++) product[r * n + j] = uform_fp8_sum(value, weights, codes, k, r, j);
    return true;
}

/* The scaled way on the host, by its documented arithmetic (above); our GELU
 * for cuBLASLt's. NULL: done. */
static const char *uform_fp8_scaled_product(uform_backend_t *b, size_t rows, size_t n, size_t k,
                                            const uint8_t *weights, const uint8_t *codes, const float *weight_scales,
                                            const float *scales, const uint16_t *bias, bool accumulate, float *y,
                                            size_t y_stride, uint16_t *y16, bool gelu) {
    (void)b;
    float value[256];
    for (unsigned code = 0; code < 256; code++) value[code] = uform_e4m3_float((uint8_t)code);
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < n; j++) {
            float scaled = uform_fp8_sum(value, weights, codes, k, r, j) * weight_scales[j] * scales[r];
            float bias_j = bias ? uform_bf16_float(bias[j]) : 0.0f;
            if (y16) {
                float value = bias ? scaled + bias_j : scaled;
                y16[r * n + j] = uform_bf16_bits(gelu ? uform_gelu(value) : value);
            } else {
                float sum = (accumulate ? y[r * y_stride + j] : 0.0f) + scaled;
                y[r * y_stride + j] = bias ? sum + bias_j : sum;
            }
        }
    return NULL;
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
                                              uform_cuda_alignment(product), true, UFORM_OUTPUT_F32);
    if (!plan) return false;
    float alpha = 1.0f, beta = 0.0f;
    uform_lt_ok(b, uform_cublaslt()->matmul(context->lt, plan->operation, &alpha, weights, plan->a, codes, plan->b,
                                            &beta, product, plan->c, product, plan->c, &plan->algorithm,
                                            context->workspace, UFORM_CUDA_WORKSPACE_BYTES, context->stream),
                "cublasLtMatmul (FP8)");
    return true;
}

/* The scaled way: y (+)= (x W^T) scaled + bias (FP32 y, row stride y_stride),
 * or y16 = bf16(gelu(...)) (gelu) or bf16(...) [rows, n] when y16 is set, in
 * one cuBLASLt call (A = W transposed, B = the codes, as the plain product).
 * NULL: done; otherwise why cuBLASLt would not (nothing recorded, nothing
 * run). */
static const char *uform_fp8_scaled_product(uform_backend_t *b, size_t rows, size_t n, size_t k,
                                            const uint8_t *weights, const uint8_t *codes, const float *weight_scales,
                                            const float *scales, const uint16_t *bias, bool accumulate, float *y,
                                            size_t y_stride, uint16_t *y16, bool gelu) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    const uform_cublaslt_t *lt = uform_cublaslt();
    void *out = y16 ? (void *)y16 : (void *)y;
    const float *scale_vectors[2] = {weight_scales, scales};
    uform_cuda_plan_t *plan = uform_cuda_plan(b, n, rows, k, k, k, y16 ? n : y_stride, true, false, bias,
                                              UFORM_OPERANDS_E4M3_SCALED, uform_cuda_alignment(weights),
                                              uform_cuda_alignment(codes), uform_cuda_alignment(out), true,
                                              !y16 ? UFORM_OUTPUT_F32 : gelu ? UFORM_OUTPUT_GELU_BF16 : UFORM_OUTPUT_BF16,
                                              scale_vectors);
    if (!plan) return context->plan_refusal;
    const char *what = "BIAS_POINTER";
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
    if (bias) status = lt->matmul_desc_set(plan->operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
    if (status == CUBLAS_STATUS_SUCCESS) {
        what = "A_SCALE_POINTER";
        status = lt->matmul_desc_set(plan->operation, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &weight_scales,
                                     sizeof(weight_scales));
    }
    if (status == CUBLAS_STATUS_SUCCESS) {
        what = "B_SCALE_POINTER";
        status = lt->matmul_desc_set(plan->operation, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scales, sizeof(scales));
    }
    float alpha = 1.0f, beta = accumulate && !y16 ? 1.0f : 0.0f;
    if (status == CUBLAS_STATUS_SUCCESS) {
        what = "cublasLtMatmul";
        status = lt->matmul(context->lt, plan->operation, &alpha, weights, plan->a, codes, plan->b, &beta, out,
                            plan->c, out, plan->c, &plan->algorithm, context->workspace, UFORM_CUDA_WORKSPACE_BYTES,
                            context->stream);
    }
    if (status == CUBLAS_STATUS_SUCCESS) return NULL;
    snprintf(context->plan_refusal, sizeof(context->plan_refusal), "%s: %s", what, lt->status_string(status));
    return context->plan_refusal;
}
#endif

const char *uform_cuda_fp8_refusal(uform_backend_t *b) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    return context->fp8_refused ? context->fp8_refusal : NULL;
}

bool uform_cuda_fp8_scaled(uform_backend_t *b) { return uform_cuda_context(b)->fp8_scaled; }

const char *uform_cuda_fp8_scaled_refusal(uform_backend_t *b, int form) {   /* a uform_cuda_output_t */
    uform_cuda_context_t *context = uform_cuda_context(b);
    if (form < UFORM_OUTPUT_F32 || form > UFORM_OUTPUT_GELU_BF16) return NULL;
    return context->fp8_scaled_refused[form] ? context->fp8_scaled_refusal[form] : NULL;
}

void uform_cuda_fp8_scaled_off(uform_backend_t *b, bool off) { uform_cuda_context(b)->fp8_scaled_off = off; }

/* The activations quantized into the context's buffer: *codes_out [rows
 * padded to 16, k] and *scales_out, and where the scaled way will be tried
 * for `form` (a uform_cuda_output_t) the bias rounded to BF16 into
 * *bias16_out (else NULL); false with nothing done when this GPU cannot (the
 * caller decodes to BF16 instead); true with *codes_out NULL when a buffer
 * could not be had (recorded). */
static bool uform_fp8_quantize(uform_backend_t *b, const uform_packed_t *packed, const float *x, const uint16_t *x16,
                               size_t x_stride, size_t rows, const float *bias, int form, uint8_t **codes_out,
                               float **scales_out, uint16_t **bias16_out) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    *codes_out = NULL;
    *bias16_out = NULL;
    if (!context->fp8_products || context->fp8_refused) return false;
    size_t n = packed->n, k = packed->k, padded = (rows + 15) & ~(size_t)15;
    size_t scales_at = (padded * k + 255) & ~(size_t)255;   /* 256-byte aligned scales: uform_cuda_plan */
    uint8_t *codes = (uint8_t *)uform_cuda_grow(b, &context->fp8_rows, scales_at + padded * sizeof(float),
                                                "FP8 activations");
    if (!codes) return true;   /* recorded */
    float *scales = (float *)(codes + scales_at);
    uint16_t *bias16 = NULL;
    if (bias && !context->fp8_scaled_off && !context->fp8_scaled_refused[form]) {
        bias16 = (uint16_t *)uform_cuda_grow(b, &context->bias_bf16, n * sizeof(uint16_t), "BF16 bias");
        if (!bias16) return true;   /* recorded */
    }
    bool quads = k % 4 == 0 && x_stride % 4 == 0 && (x16 ? (uintptr_t)x16 % 8 : (uintptr_t)x % 16) == 0;
    if (quads && x16)
        UFORM_LAUNCH(uform_quantize_rows_e4m3_warp<uint16_t>, uform_cuda_blocks(rows, 8), 256, context->stream)(
            x16, rows, x_stride, k, codes, scales, bias, n, bias16);
    else if (quads)
        UFORM_LAUNCH(uform_quantize_rows_e4m3_warp<float>, uform_cuda_blocks(rows, 8), 256, context->stream)(
            x, rows, x_stride, k, codes, scales, bias, n, bias16);
    else if (x16)
        UFORM_LAUNCH(uform_quantize_rows_e4m3<uint16_t>, (unsigned)rows, UFORM_CUDA_ROW_THREADS, context->stream)(
            x16, x_stride, k, codes, scales, bias, n, bias16);
    else
        UFORM_LAUNCH(uform_quantize_rows_e4m3<float>, (unsigned)rows, UFORM_CUDA_ROW_THREADS, context->stream)(
            x, x_stride, k, codes, scales, bias, n, bias16);
    if (padded > rows)
        UFORM_LAUNCH(uform_zero_code_rows, uform_cuda_blocks((padded - rows) * k, 256), 256,
                     context->stream)(rows, padded, k, codes);
    uform_cuda_launched(b, "FP8 activations");
    *codes_out = codes;
    *scales_out = scales;
    *bias16_out = bias16;
    return true;
}

/* The plain way's unscaled product of the quantized rows into the context's
 * scratch: *product_out [rows padded, n]; false, when cuBLASLt refuses it
 * (refused for the backend's life: the caller decodes to BF16); true with
 * *product_out NULL when the scratch could not be had (recorded). */
static bool uform_fp8_rows_product(uform_backend_t *b, const uform_packed_t *packed, const uint8_t *codes,
                                   size_t rows, const float **product_out) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    *product_out = NULL;
    size_t n = packed->n, k = packed->k, padded = (rows + 15) & ~(size_t)15;
    float *product = (float *)uform_cuda_grow(b, &context->fp8_product, padded * n * sizeof(float), "FP8 product");
    if (!product) return true;   /* recorded */
    if (!uform_fp8_product(b, padded, n, k, (const uint8_t *)packed->data, codes, product)) {
        context->fp8_refused = true;   /* for the backend's life: the caller decodes to BF16 */
        snprintf(context->fp8_refusal, sizeof(context->fp8_refusal),
                 "cuBLASLt refused the FP8 product of %zu x %zu E4M3 weights and %zu rows: %s", n, k, padded,
                 context->plan_refusal);
        return false;
    }
    *product_out = product;
    return true;
}

static const float *uform_fp8_weight_scales(const uform_packed_t *packed) {
    return (const float *)((const uint8_t *)packed->data + uform_cuda_e4m3_scales_at(packed->n, packed->k));
}

/* The scaled way where it is not refused (or switched off): true when it ran,
 * false to take the plain way. bias16: the bias rounded by the quantization
 * (NULL without a bias). */
static bool uform_fp8_try_scaled(uform_backend_t *b, const uform_packed_t *packed, const uint8_t *codes,
                                 const float *scales, size_t rows, const uint16_t *bias16, bool accumulate, float *y,
                                 size_t y_stride, uint16_t *y16, bool gelu) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    int form = !y16 ? UFORM_OUTPUT_F32 : gelu ? UFORM_OUTPUT_GELU_BF16 : UFORM_OUTPUT_BF16;
    static const char *const forms[] = {"FP32 out", "BF16 out", "GELU, BF16 out"};
    context->fp8_scaled = false;
    if (context->fp8_scaled_off || context->fp8_scaled_refused[form]) return false;
    size_t n = packed->n;
    const char *refusal =
        uform_fp8_scaled_product(b, rows, n, packed->k, (const uint8_t *)packed->data, codes,
                                 uform_fp8_weight_scales(packed), scales, bias16, accumulate, y, y_stride, y16, gelu);
    if (refusal) {
        context->fp8_scaled_refused[form] = true;
        snprintf(context->fp8_scaled_refusal[form], sizeof(context->fp8_scaled_refusal[form]),
                 "cuBLASLt's own FP8 scales (%s) refused for %zu x %zu E4M3 weights and %zu rows: %s",
                 forms[form], n, packed->k, rows, refusal);
        return false;
    }
    context->fp8_scaled = true;
    return true;
}

bool uform_cuda_linear_fp8(uform_backend_t *b, const uform_packed_t *packed, const float *x, const uint16_t *x16,
                           size_t x_stride, size_t rows, const float *bias, bool accumulate, float *y,
                           size_t y_stride) {
    uint8_t *codes;
    float *scales;
    uint16_t *bias16;
    const float *product;
    if (!uform_fp8_quantize(b, packed, x, x16, x_stride, rows, bias, UFORM_OUTPUT_F32, &codes, &scales, &bias16))
        return false;
    if (!codes) return true;   /* recorded */
    if (uform_fp8_try_scaled(b, packed, codes, scales, rows, bias16, accumulate, y, y_stride, NULL, false))
        return true;
    if (!uform_fp8_rows_product(b, packed, codes, rows, &product)) return false;
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

bool uform_cuda_linear_bf16_fp8(uform_backend_t *b, const uform_packed_t *packed, const uint16_t *x16,
                                size_t x_stride, size_t rows, const float *bias, uint16_t *y16) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    uint8_t *codes;
    float *scales;
    uint16_t *bias16;
    context->fp8_scaled = false;
    if (context->fp8_scaled_off || context->fp8_scaled_refused[UFORM_OUTPUT_BF16]) return false;
    if (!uform_fp8_quantize(b, packed, NULL, x16, x_stride, rows, bias, UFORM_OUTPUT_BF16, &codes, &scales, &bias16))
        return false;
    if (!codes) return true;   /* recorded */
    return uform_fp8_try_scaled(b, packed, codes, scales, rows, bias16, false, NULL, 0, y16, false);
}

bool uform_cuda_linear_gelu_fp8(uform_backend_t *b, const uform_packed_t *packed, const uint16_t *x16,
                                size_t x_stride, size_t rows, const float *bias, uint16_t *y) {
    uint8_t *codes;
    float *scales;
    uint16_t *bias16;
    const float *product;
    if (!uform_fp8_quantize(b, packed, NULL, x16, x_stride, rows, bias, UFORM_OUTPUT_GELU_BF16, &codes, &scales,
                            &bias16))
        return false;
    if (!codes) return true;   /* recorded */
    if (uform_fp8_try_scaled(b, packed, codes, scales, rows, bias16, false, NULL, 0, y, true)) return true;
    if (!uform_fp8_rows_product(b, packed, codes, rows, &product)) return false;
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
