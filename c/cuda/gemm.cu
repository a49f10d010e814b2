/* gemm.cu: the CUDA backend's products through cuBLASLt (backend.h: gemm,
 * linear, linear_gelu, linear_backward), FP32 inputs, FP32 compute
 * (CUBLAS_COMPUTE_32F: no TF32), the bias as cuBLASLt's epilogue. Dense FP32
 * weights only so far (the trainer's masters); packed BF16 and E4M3 weights
 * are the next step.
 *
 * Row-major operands map onto cuBLASLt's column-major ones without copies: a
 * row-major matrix with stride s is the column-major transpose with leading
 * dimension s, so C = op(a) op(b) is computed as C^T = op(b)^T op(a)^T with
 * cuBLASLt's A = b and B = a. Each shape's algorithm is chosen once by
 * cuBLASLt's heuristic and kept (UFORM_CUDA_GEMM_PLANS per backend).
 * Compiled, not yet run on a GPU. */
#include "cuda_internal.h"
#include "cublaslt.h"

#include <string.h>

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

static bool uform_lt_ok(uform_backend_t *b, cublasStatus_t status, const char *what) {
    if (status == CUBLAS_STATUS_SUCCESS) return true;
    uform_cuda_record(b, UFORM_DEVICE, what, uform_cublaslt()->status_string(status));
    return false;
}

/* The plan of one shape: found in the cache or made (layouts, operation, algorithm). */
static uform_cuda_plan_t *uform_cuda_plan(uform_backend_t *b, size_t m, size_t n, size_t k, size_t lda,
                                          size_t ldb, size_t ldc, bool transpose_a, bool transpose_b,
                                          bool bias) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    for (size_t i = 0; i < UFORM_CUDA_GEMM_PLANS; i++) {
        uform_cuda_plan_t *p = &context->plans[i];
        if (p->used && p->m == m && p->n == n && p->k == k && p->lda == lda && p->ldb == ldb && p->ldc == ldc &&
            p->transpose_a == transpose_a && p->transpose_b == transpose_b && p->bias == bias)
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
    plan->transpose_a = transpose_a, plan->transpose_b = transpose_b, plan->bias = bias;
    /* cuBLASLt's m x n result D = A [m x k] B [k x n], column-major */
    cublasOperation_t op_a = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    bool ok = uform_lt_ok(b, uform_cublaslt()->matmul_desc_create(&plan->operation, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                          "cublasLtMatmulDescCreate");
    if (!ok) return NULL;
    ok = uform_lt_ok(b, uform_cublaslt()->matmul_desc_set(plan->operation, CUBLASLT_MATMUL_DESC_TRANSA, &op_a,
                                                       sizeof(op_a)), "TRANSA") &&
         uform_lt_ok(b, uform_cublaslt()->matmul_desc_set(plan->operation, CUBLASLT_MATMUL_DESC_TRANSB, &op_b,
                                                       sizeof(op_b)), "TRANSB") &&
         uform_lt_ok(b, uform_cublaslt()->matmul_desc_set(plan->operation, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                       sizeof(epilogue)), "EPILOGUE") &&
         uform_lt_ok(b, uform_cublaslt()->layout_create(&plan->a, CUDA_R_32F, transpose_a ? k : m,
                                                   transpose_a ? m : k, (int64_t)lda), "layout A") &&
         uform_lt_ok(b, uform_cublaslt()->layout_create(&plan->b, CUDA_R_32F, transpose_b ? n : k,
                                                   transpose_b ? k : n, (int64_t)ldb), "layout B") &&
         uform_lt_ok(b, uform_cublaslt()->layout_create(&plan->c, CUDA_R_32F, m, n, (int64_t)ldc), "layout C");
    plan->used = true;   /* release destroys whatever was made */
    if (!ok) {
        uform_cuda_plan_release(plan);
        return NULL;
    }
    cublasLtMatmulPreference_t preference;
    if (!uform_lt_ok(b, uform_cublaslt()->preference_create(&preference), "preference")) {
        uform_cuda_plan_release(plan);
        return NULL;
    }
    size_t workspace = UFORM_CUDA_WORKSPACE_BYTES;
    uform_cublaslt()->preference_set(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                         sizeof(workspace));
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    ok = uform_lt_ok(b, uform_cublaslt()->heuristic(context->lt, plan->operation, plan->a, plan->b, plan->c,
                                                       plan->c, preference, 1, &result, &found),
                     "cublasLtMatmulAlgoGetHeuristic");
    uform_cublaslt()->preference_destroy(preference);
    if (ok && found == 0) {
        uform_cuda_record(b, UFORM_DEVICE, "cuBLASLt", "no algorithm for this product");
        ok = false;
    }
    if (!ok) {
        uform_cuda_plan_release(plan);
        return NULL;
    }
    plan->algorithm = result.algo;
    return plan;
}

/* c = (accumulate ? c : 0) + bias, for products with k = 0 (cuBLASLt needs k >= 1). */
__global__ static void uform_empty_product(size_t m, size_t n, const float *bias, bool accumulate, float *c,
                                           size_t c_stride) {
    size_t index = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; index < m * n; index += (size_t)gridDim.x * blockDim.x) {
        size_t i = index / n, j = index % n;
        float value = accumulate ? c[i * c_stride + j] : 0.0f;
        c[i * c_stride + j] = bias ? value + bias[j] : value;
    }
}

void uform_cuda_gemm(uform_backend_t *b, size_t m, size_t n, size_t k, uform_matrix_t a, uform_matrix_t bm,
                     const float *bias, bool accumulate, float *c, size_t c_stride) {
    if (!m || !n) return;
    uform_cuda_context_t *context = uform_cuda_context(b);
    if (!k) {
        uform_empty_product<<<uform_cuda_blocks(m * n, 256), 256, 0, context->stream>>>(m, n, bias, accumulate,
                                                                                          c, c_stride);
        uform_cuda_launched(b, "gemm (k = 0)");
        return;
    }
    /* C^T [n x m] = op(b)^T [n x k] op(a)^T [k x m] */
    uform_cuda_plan_t *plan = uform_cuda_plan(b, n, m, k, bm.stride, a.stride, c_stride, bm.transposed,
                                              a.transposed, bias != NULL);
    if (!plan) return;
    if (bias && !uform_lt_ok(b, uform_cublaslt()->matmul_desc_set(plan->operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                               &bias, sizeof(bias)), "BIAS_POINTER"))
        return;
    float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    uform_lt_ok(b, uform_cublaslt()->matmul(context->lt, plan->operation, &alpha, bm.data, plan->a, a.data, plan->b, &beta,
                                  c, plan->c, c, plan->c, &plan->algorithm, context->workspace,
                                  UFORM_CUDA_WORKSPACE_BYTES, context->stream),
                "cublasLtMatmul");
}

static bool uform_cuda_dense(uform_backend_t *b, const uform_weight_t *w, const char *what) {
    if (w->dense) return true;
    uform_cuda_record(b, UFORM_UNSUPPORTED, what, "packed (BF16/E4M3) weights are not built yet on the CUDA backend");
    return false;
}

void uform_cuda_linear(uform_backend_t *b, const uform_weight_t *w, const float *x, size_t x_stride,
                       size_t rows, const float *bias, bool accumulate, float *y, size_t y_stride) {
    if (!uform_cuda_dense(b, w, "linear")) return;
    /* y = x W^T: op(b)[p, j] = W[j, p], W row-major [n, k] */
    uform_matrix_t a = {x, x_stride, false}, weights = {w->dense, w->k, true};
    uform_cuda_gemm(b, rows, w->n, w->k, a, weights, bias, accumulate, y, y_stride);
}

void uform_cuda_linear_gelu(uform_backend_t *b, const uform_weight_t *w, const float *x, size_t x_stride,
                            size_t rows, const float *bias, float *pre, float *y) {
    uform_cuda_linear(b, w, x, x_stride, rows, bias, false, pre, w->n);
    uform_cuda_gelu_forward(b, pre, rows * w->n, y);
}

/* dbias[j] += sum over rows of dy[r, j], rows in order (one thread per column). */
__global__ static void uform_column_sums(const float *dy, size_t rows, size_t n, float *dbias) {
    size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    float sum = 0.0f;
    for (size_t r = 0; r < rows; r++) sum += dy[r * n + j];
    dbias[j] += sum;
}

void uform_cuda_linear_backward(uform_backend_t *b, const uform_weight_t *w, const float *x, const float *dy,
                                size_t rows, float *dweight, float *dbias, float *dx, bool accumulate_dx) {
    if (!uform_cuda_dense(b, w, "linear_backward")) return;
    size_t n = w->n, k = w->k;
    if (dweight && rows) {   /* dW [n, k] += dy^T [n, rows] x [rows, k] */
        uform_matrix_t dy_t = {dy, n, true}, xs = {x, k, false};
        uform_cuda_gemm(b, n, k, rows, dy_t, xs, NULL, true, dweight, k);
    }
    if (dbias && rows) {
        uform_column_sums<<<uform_cuda_blocks(n, 256), 256, 0, uform_cuda_context(b)->stream>>>(dy, rows, n, dbias);
        uform_cuda_launched(b, "linear_backward (bias)");
    }
    if (dx) {                /* dx [rows, k] (+)= dy [rows, n] W [n, k] */
        uform_matrix_t dys = {dy, n, false}, weights = {w->dense, k, false};
        uform_cuda_gemm(b, rows, k, n, dys, weights, NULL, accumulate_dx, dx, k);
    }
}
