/* gemm.cu: the CUDA backend's products through cuBLASLt (backend.h: gemm,
 * linear, linear_gelu, linear_backward, pack), FP32 accumulation
 * (CUBLAS_COMPUTE_32F: no TF32), the bias as cuBLASLt's epilogue.
 *
 * `gemm` multiplies FP32 operands in FP32. The model's products compute in
 * BF16 with FP32 accumulation and FP32 results, as DESIGN section 6 says of GPU
 * steps and as the CPU's BF16 classes do in inference:
 * - packed weights (a model's, `pack`) are BF16 row-major [n, k] in device
 *   memory; the activations are rounded to BF16 first (into the context's
 *   scratch);
 * - dense FP32 weights (the trainer's masters) are rounded to BF16 into the
 *   scratch at each call, with the activations, and in the backward the
 *   gradient dy: the masters, the gradients they accumulate and every
 *   activation stay FP32 (mixed precision). Rounding costs 6 bytes of traffic
 *   per element, against 2 x rows multiply-adds per weight in the product.
 * - E4M3 weights (`pack_e4m3`) are kept as their codes [n, k] and each row's
 *   power-of-two scale. On GPUs with FP8 tensor cores (ADA and later) they
 *   multiply as FP8, the activations quantized per row (gemm_fp8.cu). On
 *   AMPERE, or where cuBLASLt finds no FP8 algorithm, they are decoded to
 *   BF16 into the context's scratch at each product (exact: 3 mantissa bits
 *   times a power of two), then multiplied as BF16 weights are: the memory of
 *   FP8, the arithmetic of BF16, and the CPU's E4M3 results (its classes
 *   decode to BF16 in registers).
 *
 * Row-major operands map onto cuBLASLt's column-major ones without copies: a
 * row-major matrix with stride s is the column-major transpose with leading
 * dimension s, so C = op(a) op(b) is computed as C^T = op(b)^T op(a)^T with
 * cuBLASLt's A = b and B = a. Each shape's algorithm is chosen once by
 * cuBLASLt's heuristic and kept (UFORM_CUDA_GEMM_PLANS per backend).
 *
 * The BF16 and FP32 products and the E4M3 weights' decoding to BF16 ran on an
 * H200 (tests/gpu/test_cuda_ops.c, 2026-12-04), the BF16 rounding four
 * elements a thread and the BF16-operand inference ops (backend.h) in the
 * second session with a GPU. The FP8 products: gemm_fp8.cu. */
#include "cuda_internal.h"
#include "bf16.cuh"

#ifndef UFORM_CUDA_EMULATION
#include "cublaslt.h"

#include <cuda_bf16.h>
#endif
#include <stdio.h>
#include <string.h>

#ifdef UFORM_CUDA_EMULATION
/* cuBLASLt is not emulated: the product on the host (the emulation's memory is
 * the host's), FP32 sums in k order; bf16: both operands BF16. */
void uform_cuda_gemm_plans_free(uform_cuda_context_t *context) { (void)context; }

static float uform_emulated_operand(const void *matrix, size_t stride, bool transposed, size_t i, size_t p,
                                    bool bf16) {
    size_t index = transposed ? p * stride + i : i * stride + p;
    return bf16 ? uform_emulated_float(((const uint16_t *)matrix)[index]) : ((const float *)matrix)[index];
}

static void uform_cuda_product(uform_backend_t *b, size_t m, size_t n, size_t k, const void *a, size_t a_stride,
                               bool a_transposed, const void *bm, size_t b_stride, bool b_transposed,
                               const float *bias, bool accumulate, float *c, size_t c_stride, bool bf16) {
    (void)b;
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            float sum = 0.0f;
            for (size_t p = 0; p < k; p++)
                sum += uform_emulated_operand(a, a_stride, a_transposed, i, p, bf16) *
                       uform_emulated_operand(bm, b_stride, !b_transposed, j, p, bf16);
            float value = (accumulate ? c[i * c_stride + j] : 0.0f) + sum;
            c[i * c_stride + j] = bias ? value + bias[j] : value;
        }
}

/* cuBLASLt's BF16-out product (below) emulated for linear_qkv_bf16: the FP32
 * sums in k order plus the bias rounded to BF16, rounded to BF16; the GELU
 * form is not emulated (linear_gelu_bf16 takes its other way). */
static bool uform_cuda_product_bf16(uform_backend_t *b, size_t rows, size_t n, size_t k, const uint16_t *x,
                                    size_t x_stride, const uint16_t *w, const float *bias32, bool gelu, uint16_t *y) {
    (void)b;
    if (gelu) return false;
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < n; j++) {
            float sum = 0.0f;
            for (size_t p = 0; p < k; p++) sum += uform_emulated_float(x[i * x_stride + p]) * uform_emulated_float(w[j * k + p]);
            float bias = bias32 ? uform_emulated_float(uform_bf16_bits(bias32[j])) : 0.0f;
            y[i * n + j] = uform_bf16_bits(sum + bias);
        }
    return true;
}
#else
static void uform_cuda_plan_release(uform_cuda_plan_t *plan) {
    if (!plan->used) return;
    uform_cublaslt()->matmul_desc_destroy(plan->operation);
    uform_cublaslt()->layout_destroy(plan->a);
    uform_cublaslt()->layout_destroy(plan->b);
    uform_cublaslt()->layout_destroy(plan->c);
    plan->used = false;
}

void uform_cuda_gemm_plans_free(uform_cuda_context_t *context) {
    for (size_t i = 0; i < UFORM_CUDA_GEMM_PLANS; i++) uform_cuda_plan_release(&context->plans[i]);
}

bool uform_lt_ok(uform_backend_t *b, cublasStatus_t status, const char *what) {
    if (status == CUBLAS_STATUS_SUCCESS) return true;
    uform_cuda_record(b, UFORM_DEVICE, what, uform_cublaslt()->status_string(status));
    return false;
}

/* The alignment of an address in bytes, at most 256 (cuBLASLt's default assumption). */
uint32_t uform_cuda_alignment(const void *pointer) {
    uintptr_t address = (uintptr_t)pointer;
    uintptr_t lowest = address & (~address + 1);
    return lowest == 0 || lowest > 256 ? 256u : (uint32_t)lowest;
}

uform_cuda_plan_t *uform_cuda_plan(uform_backend_t *b, size_t m, size_t n, size_t k, size_t lda, size_t ldb,
                                   size_t ldc, bool transpose_a, bool transpose_b, const void *bias_pointer,
                                   uform_cuda_operands_t operands, uint32_t align_a, uint32_t align_b,
                                   uint32_t align_c, bool quiet, uform_cuda_output_t output,
                                   const float *const *scales) {
    /* quiet: a failure to make the plan is not recorded as an error (the caller
     * has another way), only in the context's plan_refusal; output: FP32 or
     * BF16 C and D, the GELU epilogue after the bias or not */
    uform_cuda_context_t *context = uform_cuda_context(b);
    context->plan_refusal[0] = '\0';
    auto lt_ok = [b, quiet, context](cublasStatus_t status, const char *what) {
        if (quiet && status != CUBLAS_STATUS_SUCCESS)
            snprintf(context->plan_refusal, sizeof(context->plan_refusal), "%s: %s", what,
                     uform_cublaslt()->status_string(status));
        return quiet ? status == CUBLAS_STATUS_SUCCESS : uform_lt_ok(b, status, what);
    };
    bool bias = bias_pointer != NULL;
    /* the heuristic reads the bias pointer's value for its alignment (cublasLt.h,
     * CUBLASLT_MATMUL_DESC_BIAS_POINTER): a plan is made, and kept, per alignment */
    uint32_t align_bias = bias ? uform_cuda_alignment(bias_pointer) : 0;
    for (size_t i = 0; i < UFORM_CUDA_GEMM_PLANS; i++) {
        uform_cuda_plan_t *p = &context->plans[i];
        if (p->used && p->m == m && p->n == n && p->k == k && p->lda == lda && p->ldb == ldb && p->ldc == ldc &&
            p->transpose_a == transpose_a && p->transpose_b == transpose_b && p->bias == bias && p->operands == operands &&
            p->align_a == align_a && p->align_b == align_b && p->align_c == align_c && p->align_bias == align_bias &&
            p->output == output)
            return p;
    }
    uform_cuda_plan_t *plan = NULL;
    for (size_t i = 0; i < UFORM_CUDA_GEMM_PLANS && !plan; i++)
        if (!context->plans[i].used) plan = &context->plans[i];
    if (!plan) {
        plan = &context->plans[context->plans_next];
        context->plans_next = (context->plans_next + 1) % UFORM_CUDA_GEMM_PLANS;
        uform_cuda_plan_release(plan);
    }
    memset(plan, 0, sizeof(*plan));
    plan->m = m, plan->n = n, plan->k = k, plan->lda = lda, plan->ldb = ldb, plan->ldc = ldc;
    plan->transpose_a = transpose_a, plan->transpose_b = transpose_b, plan->bias = bias, plan->operands = operands;
    plan->align_a = align_a, plan->align_b = align_b, plan->align_c = align_c, plan->align_bias = align_bias;
    plan->output = output;
    bool bf16_out = output != UFORM_OUTPUT_F32, gelu = output == UFORM_OUTPUT_GELU_BF16;
    bool scaled = operands == UFORM_OPERANDS_E4M3_SCALED;
    cudaDataType_t inputs = operands == UFORM_OPERANDS_E4M3 || scaled ? CUDA_R_8F_E4M3
                            : operands == UFORM_OPERANDS_BF16       ? CUDA_R_16BF
                                                                    : CUDA_R_32F;
    /* cuBLASLt takes a bias of D's type but for FP8 (cublasLt.h,
     * CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE; BF16 for an FP32 D): BF16 with the
     * GELU epilogue's BF16 out and with FP8 operands */
    cudaDataType_t bias_type = bf16_out || scaled ? CUDA_R_16BF : CUDA_R_32F;
    /* outer-vector scaling (gemm_fp8.cu): D[i, j] = scale_a[i] scale_b[j] (A B)[i, j] + ... */
    cublasLtMatmulMatrixScale_t scale_mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    /* cuBLASLt's m x n result D = A [m x k] B [k x n], column-major */
    cublasOperation_t op_a = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t epilogue = gelu ? (bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU)
                                  : bias    ? CUBLASLT_EPILOGUE_BIAS
                                            : CUBLASLT_EPILOGUE_DEFAULT;
    bool ok = lt_ok(uform_cublaslt()->matmul_desc_create(&plan->operation, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                          "cublasLtMatmulDescCreate");
    if (!ok) return NULL;
    ok = lt_ok(uform_cublaslt()->matmul_desc_set(plan->operation, CUBLASLT_MATMUL_DESC_TRANSA, &op_a,
                                                       sizeof(op_a)), "TRANSA") &&
         lt_ok(uform_cublaslt()->matmul_desc_set(plan->operation, CUBLASLT_MATMUL_DESC_TRANSB, &op_b,
                                                       sizeof(op_b)), "TRANSB") &&
         lt_ok(uform_cublaslt()->matmul_desc_set(plan->operation, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                       sizeof(epilogue)), "EPILOGUE") &&
         (!scaled || lt_ok(uform_cublaslt()->matmul_desc_set(plan->operation, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                                                             &scale_mode, sizeof(scale_mode)), "A_SCALE_MODE")) &&
         (!scaled || lt_ok(uform_cublaslt()->matmul_desc_set(plan->operation, CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                                                             &scale_mode, sizeof(scale_mode)), "B_SCALE_MODE")) &&
         /* without the scale vectors' pointers the heuristic answers "an
          * unsupported value or parameter" (an H100, cuBLASLt 13.1: the
          * library's calls refused, bench/gpu_fp8_probe.cu's accepted) */
         (!scaled || lt_ok(uform_cublaslt()->matmul_desc_set(plan->operation, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                             &scales[0], sizeof(scales[0])), "A_SCALE_POINTER")) &&
         (!scaled || lt_ok(uform_cublaslt()->matmul_desc_set(plan->operation, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                             &scales[1], sizeof(scales[1])), "B_SCALE_POINTER")) &&
         (!bias || lt_ok(uform_cublaslt()->matmul_desc_set(plan->operation,
                                                                 CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                                 sizeof(bias_type)), "BIAS_DATA_TYPE")) &&
         (!bias || lt_ok(uform_cublaslt()->matmul_desc_set(plan->operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                                 &bias_pointer, sizeof(bias_pointer)),
                               "BIAS_POINTER")) &&
         lt_ok(uform_cublaslt()->layout_create(&plan->a, inputs, transpose_a ? k : m,
                                                   transpose_a ? m : k, (int64_t)lda), "layout A") &&
         lt_ok(uform_cublaslt()->layout_create(&plan->b, inputs, transpose_b ? n : k,
                                                   transpose_b ? k : n, (int64_t)ldb), "layout B") &&
         lt_ok(uform_cublaslt()->layout_create(&plan->c, bf16_out ? CUDA_R_16BF : CUDA_R_32F, m, n, (int64_t)ldc),
               "layout C");
    plan->used = true;   /* release destroys whatever was made */
    if (!ok) {
        uform_cuda_plan_release(plan);
        return NULL;
    }
    cublasLtMatmulPreference_t preference;
    if (!lt_ok(uform_cublaslt()->preference_create(&preference), "preference")) {
        uform_cuda_plan_release(plan);
        return NULL;
    }
    size_t workspace = UFORM_CUDA_WORKSPACE_BYTES;
    uform_cublaslt()->preference_set(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                         sizeof(workspace));
    /* only algorithms that work at the operands' actual alignments (C and D are one buffer) */
    uform_cublaslt()->preference_set(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                     sizeof(align_a));
    uform_cublaslt()->preference_set(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                     sizeof(align_b));
    uform_cublaslt()->preference_set(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                     sizeof(align_c));
    uform_cublaslt()->preference_set(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c,
                                     sizeof(align_c));
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    ok = lt_ok(uform_cublaslt()->heuristic(context->lt, plan->operation, plan->a, plan->b, plan->c,
                                                       plan->c, preference, 1, &result, &found),
                     "cublasLtMatmulAlgoGetHeuristic");
    uform_cublaslt()->preference_destroy(preference);
    if (ok && found == 0) {
        if (!quiet) uform_cuda_record(b, UFORM_DEVICE, "cuBLASLt", "no algorithm for this product");
        snprintf(context->plan_refusal, sizeof(context->plan_refusal), "no algorithm for this product");
        ok = false;
    }
    if (!ok) {
        uform_cuda_plan_release(plan);
        return NULL;
    }
    plan->algorithm = result.algo;
    return plan;
}

/* c = (accumulate ? c : 0) + bias: the product when k = 0 (cuBLASLt needs k >= 1),
 * and the bias that the epilogue cannot read (uform_cuda_product). */
__global__ static void uform_empty_product(size_t m, size_t n, const float *bias, bool accumulate, float *c,
                                           size_t c_stride) {
    size_t index = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; index < m * n; index += (size_t)gridDim.x * blockDim.x) {
        size_t i = index / n, j = index % n;
        float value = accumulate ? c[i * c_stride + j] : 0.0f;
        c[i * c_stride + j] = bias ? value + bias[j] : value;
    }
}


/* c[m, n] = (accumulate ? c : 0) + op(a) op(b) (+ bias): row-major operands,
 * FP32 or (bf16) both BF16. */
static void uform_cuda_product(uform_backend_t *b, size_t m, size_t n, size_t k, const void *a, size_t a_stride,
                               bool a_transposed, const void *bm, size_t b_stride, bool b_transposed,
                               const float *bias, bool accumulate, float *c, size_t c_stride, bool bf16) {
    if (!m || !n) return;
    uform_cuda_context_t *context = uform_cuda_context(b);
    if (!k) {
        UFORM_LAUNCH(uform_empty_product, uform_cuda_blocks(m * n, 256), 256, context->stream)(m, n, bias, accumulate,
                                                                                          c, c_stride);
        uform_cuda_launched(b, "gemm (k = 0)");
        return;
    }
    /* The bias epilogue reads the bias in vectors: a bias that is not 16-byte
     * aligned (a slice of the trainer's flat parameters can be 4) is added
     * after the product instead. */
    const float *late_bias = bias && uform_cuda_alignment(bias) < 16 ? bias : NULL;
    if (late_bias) bias = NULL;
    /* C^T [n x m] = op(b)^T [n x k] op(a)^T [k x m] */
    uform_cuda_plan_t *plan = uform_cuda_plan(b, n, m, k, b_stride, a_stride, c_stride, b_transposed,
                                              a_transposed, bias, bf16 ? UFORM_OPERANDS_BF16 : UFORM_OPERANDS_F32,
                                              uform_cuda_alignment(bm), uform_cuda_alignment(a),
                                              uform_cuda_alignment(c), false, UFORM_OUTPUT_F32);
    if (!plan) return;
    if (bias && !uform_lt_ok(b, uform_cublaslt()->matmul_desc_set(plan->operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                               &bias, sizeof(bias)), "BIAS_POINTER"))
        return;
    float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    uform_lt_ok(b, uform_cublaslt()->matmul(context->lt, plan->operation, &alpha, bm, plan->a, a, plan->b, &beta,
                                  c, plan->c, c, plan->c, &plan->algorithm, context->workspace,
                                  UFORM_CUDA_WORKSPACE_BYTES, context->stream),
                "cublasLtMatmul");
    if (late_bias) {
        UFORM_LAUNCH(uform_empty_product, uform_cuda_blocks(m * n, 256), 256, context->stream)(m, n, late_bias, true, c,
                                                                                          c_stride);
        uform_cuda_launched(b, "gemm (bias)");
    }
}

/* y [rows, n] = bf16(gelu(x W^T + bias)) (gelu) or bf16(x W^T + bias) in one
 * cuBLASLt call, x BF16 (row stride x_stride), W BF16 [n, k]: false, nothing
 * recorded, when cuBLASLt has no algorithm for it (kept for the backend's
 * life, form by form: the heuristic is not asked again). cuBLASLt adds a
 * bias of D's type, BF16: the bias is rounded to BF16 into the context's
 * scratch first (on the H200 cuBLASLt refused the GELU epilogue with an FP32
 * bias, 2026-12-04) -- inference's one rounded bias, 2^-9 of it at most,
 * below the output's own BF16 rounding. */
static bool uform_cuda_product_bf16(uform_backend_t *b, size_t rows, size_t n, size_t k, const uint16_t *x,
                                    size_t x_stride, const uint16_t *w, const float *bias32, bool gelu, uint16_t *y) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    bool *refused = gelu ? &context->gelu_epilogue_refused : &context->bf16_out_refused;
    char *refusal = gelu ? context->gelu_epilogue_refusal : context->bf16_out_refusal;
    if (*refused) return false;
    uint16_t *bias = NULL;
    if (bias32) {
        bias = (uint16_t *)uform_cuda_grow(b, &context->bias_bf16, n * sizeof(uint16_t), "BF16 bias");
        if (!bias) return true;   /* recorded */
        uform_cuda_round_bf16(b, bias32, n, 1, n, bias);
    }
    /* y^T [n x rows] = W [n x k] x^T [k x rows], as uform_cuda_product maps a linear */
    uform_cuda_plan_t *plan = uform_cuda_plan(b, n, rows, k, k, x_stride, n, true, false, bias,
                                              UFORM_OPERANDS_BF16,
                                              uform_cuda_alignment(w), uform_cuda_alignment(x),
                                              uform_cuda_alignment(y), true,
                                              gelu ? UFORM_OUTPUT_GELU_BF16 : UFORM_OUTPUT_BF16);
    if (!plan) {
        *refused = true;
        snprintf(refusal, sizeof(context->gelu_epilogue_refusal), "%s", context->plan_refusal);
        return false;
    }
    if (bias && !uform_lt_ok(b, uform_cublaslt()->matmul_desc_set(plan->operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                               &bias, sizeof(bias)), "BIAS_POINTER"))
        return true;   /* recorded */
    float alpha = 1.0f, beta = 0.0f;
    uform_lt_ok(b, uform_cublaslt()->matmul(context->lt, plan->operation, &alpha, w, plan->a, x, plan->b, &beta, y,
                                            plan->c, y, plan->c, &plan->algorithm, context->workspace,
                                            UFORM_CUDA_WORKSPACE_BYTES, context->stream),
                gelu ? "cublasLtMatmul (GELU, BF16 out)" : "cublasLtMatmul (BF16 out)");
    return true;
}
#endif /* UFORM_CUDA_EMULATION */

void uform_cuda_gemm(uform_backend_t *b, size_t m, size_t n, size_t k, uform_matrix_t a, uform_matrix_t bm,
                     const float *bias, bool accumulate, float *c, size_t c_stride) {
    uform_cuda_product(b, m, n, k, a.data, a.stride, a.transposed, bm.data, bm.stride, bm.transposed, bias,
                       accumulate, c, c_stride, false);
}

/* ---- packed (BF16) weights ---- */

/* A packed matrix of `bytes` device bytes: `first_bytes` from first at 0 and
 * `second_bytes` from second (NULL: none) at second_at. */
static uform_status_t uform_cuda_packed_upload(uform_backend_t *b, size_t n, size_t k, uform_scalar_t scalar,
                                               size_t bytes, const void *first, size_t first_bytes,
                                               const void *second, size_t second_at, size_t second_bytes,
                                               uform_packed_t *packed) {
    memset(packed, 0, sizeof(*packed));
    uint8_t *data = (uint8_t *)uform_cuda_alloc(b, bytes);
    if (!data) return UFORM_OUT_OF_MEMORY;
    uform_cuda_upload(b, data, first, first_bytes);
    if (second) uform_cuda_upload(b, data + second_at, second, second_bytes);
    if (uform_cuda_context(b)->failure != UFORM_OK) {
        uform_cuda_free(b, data);
        return uform_cuda_synchronize(b);
    }
    packed->n = n;
    packed->k = k;
    packed->data = data;
    packed->bytes = bytes;
    packed->scalar = scalar;
    return UFORM_OK;
}

uform_status_t uform_cuda_pack(uform_backend_t *b, const uint16_t *weights, size_t n, size_t k,
                               uform_packed_t *packed) {
    size_t bytes = n * k * sizeof(uint16_t);
    return uform_cuda_packed_upload(b, n, k, UFORM_SCALAR_BF16, bytes, weights, bytes, NULL, 0, 0, packed);
}

/* ---- E4M3 weights: codes [n, k], then the row scales (256-byte aligned: uform_cuda_plan) ---- */


uform_status_t uform_cuda_pack_e4m3(uform_backend_t *b, const uint8_t *codes, const float *scales, size_t n,
                                    size_t k, uform_packed_t *packed) {
    size_t at = uform_cuda_e4m3_scales_at(n, k);
    return uform_cuda_packed_upload(b, n, k, UFORM_SCALAR_E4M3, at + n * sizeof(float), codes, n * k, scales, at,
                                    n * sizeof(float), packed);
}

uform_status_t uform_cuda_unpack_e4m3(uform_backend_t *b, const uform_packed_t *packed, uint8_t *codes,
                                      float *scales) {
    if (packed->scalar != UFORM_SCALAR_E4M3)
        return uform_fail(UFORM_INVALID_ARGUMENT, "unpack_e4m3: the matrix is not E4M3");
    const uint8_t *data = (const uint8_t *)packed->data;
    uform_cuda_download(b, codes, data, packed->n * packed->k);
    uform_cuda_download(b, scales, data + uform_cuda_e4m3_scales_at(packed->n, packed->k), packed->n * sizeof(float));
    return uform_cuda_synchronize(b);
}

/* out[i, p] = bf16(e4m3(codes[i, p]) x scales[i]): exact. */
__global__ static void uform_decode_e4m3_rows(const uint8_t *codes, const float *scales, size_t n, size_t k,
                                              __nv_bfloat16 *out) {
    size_t index = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; index < n * k; index += (size_t)gridDim.x * blockDim.x)
        out[index] = __float2bfloat16_rn(uform_e4m3_float(codes[index]) * scales[index / k]);
}

/* An E4M3 matrix decoded to BF16 into the context's weight scratch; NULL on
 * failure (recorded). */
static const __nv_bfloat16 *uform_cuda_e4m3_weights(uform_backend_t *b, const uform_packed_t *packed) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    size_t n = packed->n, k = packed->k;
    __nv_bfloat16 *out = (__nv_bfloat16 *)uform_cuda_grow(b, &context->bf16_weights,
                                                          n * k * sizeof(__nv_bfloat16), "E4M3 weights as BF16");
    if (!out) return NULL;
    const uint8_t *data = (const uint8_t *)packed->data;
    UFORM_LAUNCH(uform_decode_e4m3_rows, uform_cuda_blocks(n * k, 256), 256, context->stream)(
        data, (const float *)(data + uform_cuda_e4m3_scales_at(n, k)), n, k, out);
    uform_cuda_launched(b, "E4M3 weights as BF16");
    return out;
}

void uform_cuda_packed_free(uform_backend_t *b, uform_packed_t *packed) {
    if (packed->data) uform_cuda_free(b, packed->data);
    memset(packed, 0, sizeof(*packed));
}

/* out[r, p] = bf16(x[r * stride + p]), nearest even. */
__global__ static void uform_round_rows_bf16(const float *x, size_t stride, size_t rows, size_t k,
                                             __nv_bfloat16 *out) {
    size_t index = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; index < rows * k; index += (size_t)gridDim.x * blockDim.x)
        out[index] = __float2bfloat16_rn(x[(index / k) * stride + index % k]);
}

/* The same four elements to a thread: one 16-byte load, one 8-byte store, one
 * division per four (k and stride multiples of 4, x 16-byte aligned). The
 * scalar kernel above, a 64-bit division per element, ran at 2.5x under an
 * H200's bandwidth: 16% of text_encode's GPU time (bench/gpu_profile.py,
 * 2026-12-04). */
__global__ static void uform_round_rows_bf16_x4(const float *x, size_t stride, size_t rows, size_t k,
                                                __nv_bfloat16 *out) {
    size_t quads = k / 4, index = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; index < rows * quads; index += (size_t)gridDim.x * blockDim.x) {
        size_t r = index / quads, p = 4 * (index - r * quads);
        float4 v = *(const float4 *)(x + r * stride + p);
        uint2 packed;
        packed.x = (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(v.x)) |
                   (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(v.y)) << 16;
        packed.y = (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(v.z)) |
                   (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(v.w)) << 16;
        *(uint2 *)(out + r * k + p) = packed;
    }
}

void uform_cuda_round_bf16(uform_backend_t *b, const float *x, size_t stride, size_t rows, size_t k, uint16_t *out) {
    cudaStream_t stream = uform_cuda_context(b)->stream;
    __nv_bfloat16 *target = (__nv_bfloat16 *)out;
    if (k % 4 == 0 && stride % 4 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)out % 8 == 0)
        UFORM_LAUNCH(uform_round_rows_bf16_x4, uform_cuda_blocks(rows * k / 4, 256), 256, stream)(x, stride, rows, k,
                                                                                               target);
    else
        UFORM_LAUNCH(uform_round_rows_bf16, uform_cuda_blocks(rows * k, 256), 256, stream)(x, stride, rows, k, target);
    uform_cuda_launched(b, "BF16 operands");
}

/* x [rows, k] (row stride `stride`) rounded to BF16 into `buffer`, one of the
 * context's scratch buffers; NULL on failure (recorded). */
static const __nv_bfloat16 *uform_cuda_bf16_rows(uform_backend_t *b, uform_cuda_buffer_t *buffer, const float *x,
                                                 size_t stride, size_t rows, size_t k) {
    uint16_t *out = (uint16_t *)uform_cuda_grow(b, buffer, rows * k * sizeof(uint16_t), "BF16 operands");
    if (!out) return NULL;
    uform_cuda_round_bf16(b, x, stride, rows, k, out);
    return (const __nv_bfloat16 *)out;
}

const uint16_t *uform_cuda_bf16_copy(uform_backend_t *b, uform_cuda_buffer_t *buffer, const float *x, size_t stride,
                                     size_t rows, size_t k) {
    return (const uint16_t *)uform_cuda_bf16_rows(b, buffer, x, stride, rows, k);
}

/* linear and linear_bf16: the operand x FP32 (rounded here) or, x16 set, BF16 already. */
static void uform_cuda_linear_operand(uform_backend_t *b, const uform_weight_t *w, const float *x,
                                      const __nv_bfloat16 *x16, size_t x_stride, size_t rows, const float *bias,
                                      bool accumulate, float *y, size_t y_stride) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    const uform_packed_t *packed = (const uform_packed_t *)w->packed;
    if (!w->dense && packed->scalar != UFORM_SCALAR_BF16 && packed->scalar != UFORM_SCALAR_E4M3) {
        uform_cuda_record(b, UFORM_INVALID_ARGUMENT, "linear", "packed weights neither BF16 nor E4M3");
        return;
    }
    if (!rows) return;
    if (!w->k) {   /* y = bias (or y + bias): no operand to round */
        uform_cuda_product(b, rows, w->n, 0, NULL, 0, false, NULL, 0, true, bias, accumulate, y, y_stride, true);
        return;
    }
    /* E4M3 weights on FP8 tensor cores where the GPU has them (gemm_fp8.cu) */
    if (!w->dense && packed->scalar == UFORM_SCALAR_E4M3 &&
        uform_cuda_linear_fp8(b, packed, x, (const uint16_t *)x16, x_stride, rows, bias, accumulate, y, y_stride))
        return;
    /* y = x W^T: op(b)[p, j] = W[j, p], W row-major [n, k] */
    size_t operand_stride = x16 ? x_stride : w->k;
    if (!x16) x16 = uform_cuda_bf16_rows(b, &context->bf16_rows, x, x_stride, rows, w->k);
    const void *w16 = w->dense                               ? uform_cuda_bf16_rows(b, &context->bf16_weights, w->dense,
                                                                                      w->k, w->n, w->k)
                      : packed->scalar == UFORM_SCALAR_E4M3 ? uform_cuda_e4m3_weights(b, packed)
                                                              : packed->data;
    if (!x16 || !w16) return;
    uform_cuda_product(b, rows, w->n, w->k, x16, operand_stride, false, w16, w->k, true, bias, accumulate, y,
                       y_stride, true);
}

void uform_cuda_linear(uform_backend_t *b, const uform_weight_t *w, const float *x, size_t x_stride,
                       size_t rows, const float *bias, bool accumulate, float *y, size_t y_stride) {
    uform_cuda_linear_operand(b, w, x, NULL, x_stride, rows, bias, accumulate, y, y_stride);
}

void uform_cuda_linear_bf16(uform_backend_t *b, const uform_weight_t *w, const uint16_t *x, size_t x_stride,
                            size_t rows, const float *bias, bool accumulate, float *y, size_t y_stride) {
    uform_cuda_linear_operand(b, w, NULL, (const __nv_bfloat16 *)x, x_stride, rows, bias, accumulate, y, y_stride);
}

void uform_cuda_linear_gelu(uform_backend_t *b, const uform_weight_t *w, const float *x, size_t x_stride,
                            size_t rows, const float *bias, float *pre, float *y) {
    uform_cuda_linear(b, w, x, x_stride, rows, bias, false, pre, w->n);
    uform_cuda_gelu_forward(b, pre, rows * w->n, y);
}

bool uform_cuda_gelu_epilogue(uform_backend_t *b) { return uform_cuda_context(b)->gelu_epilogue; }

const char *uform_cuda_gelu_epilogue_refusal(uform_backend_t *b) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    return context->gelu_epilogue_refused ? context->gelu_epilogue_refusal : NULL;
}

/* y = bf16(gelu(x W^T + bias)) on BF16 packed weights: cuBLASLt's GELU
 * epilogue writing BF16 (the product's FP32 result never stored) where it
 * has an algorithm for it; otherwise, and for E4M3 or dense weights, the
 * product into the context's FP32 scratch, then GELU rounding to BF16
 * (pointwise.cu). context->gelu_epilogue says which ran last (the tests). */
void uform_cuda_linear_gelu_bf16(uform_backend_t *b, const uform_weight_t *w, const uint16_t *x, size_t x_stride,
                                 size_t rows, const float *bias, uint16_t *y) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    const uform_packed_t *packed = (const uform_packed_t *)w->packed;
    if (!rows) return;
    context->gelu_epilogue = false;
#ifndef UFORM_CUDA_EMULATION
    if (!w->dense && packed->scalar == UFORM_SCALAR_BF16 && w->k &&
        uform_cuda_product_bf16(b, rows, w->n, w->k, x, x_stride, (const uint16_t *)packed->data, bias, true, y)) {
        context->gelu_epilogue = true;
        return;
    }
#endif
    if (!w->dense && packed->scalar == UFORM_SCALAR_E4M3 && w->k &&
        uform_cuda_linear_gelu_fp8(b, packed, x, x_stride, rows, bias, y)) {
#ifndef UFORM_CUDA_EMULATION   /* cuBLASLt's own GELU where it applied the FP8 scales (gemm_fp8.cu) */
        context->gelu_epilogue = context->fp8_scaled;
#endif
        return;
    }
    float *pre = (float *)uform_cuda_grow(b, &context->operand_f32, rows * w->n * sizeof(float), "GELU's FP32 rows");
    if (!pre) return;   /* recorded */
    uform_cuda_linear_bf16(b, w, x, x_stride, rows, bias, false, pre, w->n);
    uform_cuda_gelu_bf16(b, pre, rows * w->n, y);
}

bool uform_cuda_bf16_out(uform_backend_t *b) { return uform_cuda_context(b)->bf16_out; }

const char *uform_cuda_bf16_out_refusal(uform_backend_t *b) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    return context->bf16_out_refused ? context->bf16_out_refusal : NULL;
}

/* linear_qkv_bf16 (backend.h; not yet run on a GPU, 2026-12-05): on BF16
 * packed weights cuBLASLt writes the product in BF16 (the bias rounded to
 * BF16, as for the GELU epilogue) straight into qkv16, and on E4M3 weights
 * its FP8 product with both scales applied does (gemm_fp8.cu); then q and k
 * are rotated in place (attention_mma.cu): the product's FP32 rows [rows,
 * 3H] are never written nor read back, 6 of the 9 bytes a column the staging
 * moved. Otherwise (dense weights, cuBLASLt's refusal, operands not 16-byte
 * aligned) the FP32 product into the context's scratch, then inference's
 * staging: rotated, then rounded once. context->bf16_out says
 * which ran (the tests). */
void uform_cuda_linear_qkv_bf16(uform_backend_t *b, const uform_weight_t *w, const uint16_t *x, size_t x_stride,
                                size_t rows, const float *bias, const float *cosines, const float *sines,
                                uint16_t *qkv16) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    const uform_packed_t *packed = (const uform_packed_t *)w->packed;
    size_t hidden = w->n / 3;
    context->bf16_out = false;
    if (!rows) return;
    bool aligned = ((uintptr_t)qkv16 | (uintptr_t)cosines | (uintptr_t)sines) % 16 == 0 && w->n % 3 == 0 &&
                   hidden % UFORM_HEAD_WIDTH == 0;
    bool bf16_weights = !w->dense && packed->scalar == UFORM_SCALAR_BF16;
    bool e4m3_weights = !w->dense && packed->scalar == UFORM_SCALAR_E4M3;
    if (aligned && w->k &&
        ((bf16_weights && uform_cuda_product_bf16(b, rows, w->n, w->k, x, x_stride, (const uint16_t *)packed->data,
                                                  bias, false, qkv16)) ||
         (e4m3_weights && uform_cuda_linear_bf16_fp8(b, packed, x, x_stride, rows, bias, qkv16)))) {
        context->bf16_out = true;
        uform_cuda_rope_bf16_in_place(b, qkv16, rows, hidden, cosines, sines);
        return;
    }
    float *product = (float *)uform_cuda_grow(b, &context->operand_f32, rows * w->n * sizeof(float),
                                              "qkv's FP32 rows");
    if (!product) return;   /* recorded */
    uform_cuda_linear_bf16(b, w, x, x_stride, rows, bias, false, product, w->n);
    if (aligned) {
        uform_cuda_qkv_stage_bf16(b, product, rows, hidden, cosines, sines, qkv16);
    } else {   /* rope_forward then the rounding: the staging's bits */
        uform_cuda_rope_forward(b, product, rows, hidden, cosines, sines);
        uform_cuda_round_bf16(b, product, w->n, rows, w->n, qkv16);
    }
}

static bool uform_cuda_dense(uform_backend_t *b, const uform_weight_t *w, const char *what) {
    if (w->dense) return true;
    uform_cuda_record(b, UFORM_UNSUPPORTED, what, "packed weights are inference-only (no backward)");
    return false;
}

/* linear_backward and linear_backward_bf16: x FP32 (rounded here) or, x16
 * set, BF16 already (the trainer's operands kept in BF16: the same product).
 * With form (gelu_linear_backward_bf16, rope_linear_backward_bf16), the
 * products' dy is GELU's backward of dy, or rope_backward's rotation of it,
 * made with its rounding and bias sums in one pass. */
static void uform_cuda_linear_backward_operand(uform_backend_t *b, const uform_weight_t *w, const float *x,
                                               const __nv_bfloat16 *x16, const uform_cuda_dy_form_t *form,
                                               const float *dy, size_t rows, float *dweight, float *dbias,
                                               float *dx, bool accumulate_dx) {
    if (!uform_cuda_dense(b, w, "linear_backward")) return;
    uform_cuda_context_t *context = uform_cuda_context(b);
    size_t n = w->n, k = w->k;
    if (!rows) return;
    if (!dweight && !dx && !form) {
        if (dbias) uform_cuda_column_sums(b, dy, rows, n, dbias);
        return;
    }
    /* the bias gradient's sums and the products' dy from one read of dy */
    const __nv_bfloat16 *dy16 =
        dbias || form ? (const __nv_bfloat16 *)uform_cuda_bf16_column_sums(b, &context->bf16_gradients, dy, form,
                                                                           rows, n, dbias)
                      : uform_cuda_bf16_rows(b, &context->bf16_gradients, dy, n, rows, n);
    if (!dy16) return;
    if (dweight) {   /* dW [n, k] += dy^T [n, rows] x [rows, k] */
        if (!x16) x16 = uform_cuda_bf16_rows(b, &context->bf16_rows, x, k, rows, k);
        if (!x16) return;
        uform_cuda_product(b, n, k, rows, dy16, n, true, x16, k, false, NULL, true, dweight, k, true);
    }
    if (dx) {        /* dx [rows, k] (+)= dy [rows, n] W [n, k] */
        const __nv_bfloat16 *w16 = uform_cuda_bf16_rows(b, &context->bf16_weights, w->dense, k, n, k);
        if (!w16) return;
        uform_cuda_product(b, rows, k, n, dy16, n, false, w16, k, false, NULL, accumulate_dx, dx, k, true);
    }
}

void uform_cuda_linear_backward(uform_backend_t *b, const uform_weight_t *w, const float *x, const float *dy,
                                size_t rows, float *dweight, float *dbias, float *dx, bool accumulate_dx) {
    uform_cuda_linear_backward_operand(b, w, x, NULL, NULL, dy, rows, dweight, dbias, dx, accumulate_dx);
}

void uform_cuda_linear_backward_bf16(uform_backend_t *b, const uform_weight_t *w, const uint16_t *x,
                                     const float *dy, size_t rows, float *dweight, float *dbias, float *dx,
                                     bool accumulate_dx) {
    uform_cuda_linear_backward_operand(b, w, NULL, (const __nv_bfloat16 *)x, NULL, dy, rows, dweight, dbias, dx,
                                       accumulate_dx);
}

void uform_cuda_gelu_linear_backward_bf16(uform_backend_t *b, const uform_weight_t *w, const uint16_t *x,
                                          const float *pre, const float *dy, size_t rows, float *dweight,
                                          float *dbias, float *dx) {
    const uform_cuda_dy_form_t form = {pre, NULL, NULL};
    uform_cuda_linear_backward_operand(b, w, NULL, (const __nv_bfloat16 *)x, &form, dy, rows, dweight, dbias, dx,
                                       false);
}

void uform_cuda_rope_linear_backward_bf16(uform_backend_t *b, const uform_weight_t *w, const uint16_t *x,
                                          const float *dqkv, const float *cosines, const float *sines, size_t rows,
                                          float *dweight, float *dbias, float *dx) {
    if (w->n % 3 || (w->n / 3) % UFORM_HEAD_WIDTH) {
        uform_cuda_record(b, UFORM_INVALID_ARGUMENT, "rope_linear_backward_bf16",
                          "the product is not a qkv projection (3H outputs, H a multiple of 64)");
        return;
    }
    const uform_cuda_dy_form_t form = {NULL, cosines, sines};
    uform_cuda_linear_backward_operand(b, w, NULL, (const __nv_bfloat16 *)x, &form, dqkv, rows, dweight, dbias,
                                       dx, false);
}
