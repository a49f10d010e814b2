/* gpu_fp8_probe.cu: which FP8 products cuBLASLt accepts on this GPU, how fast,
 * and how close to the host's answer.
 *
 * The E4M3 model's products (c/cuda/gemm_fp8.cu) want cuBLASLt to apply both
 * row scales itself (outer vectors: D[j, r] = w_j s_r sum_p W[j, p] x[r, p]),
 * with the bias, the accumulation into an FP32 residual (beta = 1) and, for
 * the up projection, GELU with BF16 out. On an H100 (2026-12-05) that call was
 * refused at the heuristic ("an unsupported value or parameter") without
 * saying which part. This probe asks for each combination separately:
 *
 *   D (and C): FP32 or BF16;  epilogue: none, bias (BF16 or FP32), GELU + bias;
 *   scales: one scalar each (per tensor) or outer vectors;  beta 0 or 1;
 *   fast accumulation off or on
 *
 * at a small shape and at the model's (hidden 768, 8192 rows), and prints for
 * each the heuristic's and the product's status, the largest error against the
 * host's (the codes' products summed in double, then scaled, the bias, GELU's
 * tanh form, beta C) relative to the largest magnitude of the answer, and the
 * time of one product (best of 3 rounds of 20).
 *
 * It uses cuBLASLt directly (no libuform): built and run by `make
 * gpu-fp8-probe`, on a GPU machine only. */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_OK(call)                                                                               \
    do {                                                                                            \
        cudaError_t status_ = (call);                                                               \
        if (status_ != cudaSuccess) {                                                               \
            printf("%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(status_));      \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

static float e4m3_value(uint8_t code) {
    int sign = code >> 7, exponent = (code >> 3) & 15, mantissa = code & 7;
    float value = exponent == 0 ? ldexpf((float)mantissa, -9) : ldexpf(1.0f + mantissa / 8.0f, exponent - 7);
    return sign ? -value : value;
}

static float bf16_value(uint16_t bits) {
    uint32_t word = (uint32_t)bits << 16;
    float value;
    memcpy(&value, &word, 4);
    return value;
}

static uint16_t bf16_bits(float value) {   /* nearest even, no NaN here */
    uint32_t word;
    memcpy(&word, &value, 4);
    return (uint16_t)((word + 0x7fffu + ((word >> 16) & 1u)) >> 16);
}

static uint32_t random_state = 12345u;
static uint32_t next_random(void) {
    random_state = random_state * 1664525u + 1013904223u;
    return random_state >> 8;
}
static float uniform(void) { return (float)next_random() / 16777216.0f * 2.0f - 1.0f; }
static uint8_t random_code(void) {   /* any finite E4M3 code, magnitudes up to 2^4 */
    for (;;) {
        uint8_t code = (uint8_t)next_random();
        if ((code & 0x7f) != 0x7f && ((code >> 3) & 15) <= 11) return code;
    }
}

typedef struct {
    size_t n, k, rows;
    uint8_t *weights, *codes;          /* device: [n, k], [rows, k] */
    float *weight_scales, *row_scales; /* device: [n], [rows] */
    float *bias32;                     /* device [n] */
    uint16_t *bias16;                  /* device [n] */
    void *out;                         /* device [rows, n] of FP32 (enough for BF16 too) */
    double *sums;                      /* host: the unscaled products of the first checked rows */
    float *host_weight_scales, *host_row_scales, *host_bias;
    float *host_c;                     /* host [checked, n]: C's values (BF16-rounded for BF16 C) */
    size_t checked;
} shape_t;

static void shape_make(shape_t *s, size_t n, size_t k, size_t rows) {
    memset(s, 0, sizeof(*s));
    s->n = n, s->k = k, s->rows = rows, s->checked = rows < 16 ? rows : 16;
    uint8_t *weights = (uint8_t *)malloc(n * k), *codes = (uint8_t *)malloc(rows * k);
    for (size_t i = 0; i < n * k; i++) weights[i] = random_code();
    for (size_t i = 0; i < rows * k; i++) codes[i] = random_code();
    s->host_weight_scales = (float *)malloc(n * 4);
    s->host_row_scales = (float *)malloc(rows * 4);
    s->host_bias = (float *)malloc(n * 4);
    uint16_t *bias16 = (uint16_t *)malloc(n * 2);
    for (size_t j = 0; j < n; j++) {
        s->host_weight_scales[j] = ldexpf(1.0f, -(int)(next_random() % 8) - 4);
        s->host_bias[j] = bf16_value(bf16_bits(uniform()));   /* the same in both types */
        bias16[j] = bf16_bits(s->host_bias[j]);
    }
    for (size_t r = 0; r < rows; r++) s->host_row_scales[r] = 0.001f + 0.01f * (uniform() + 1.0f);
    s->sums = (double *)malloc(s->checked * n * sizeof(double));
    for (size_t r = 0; r < s->checked; r++)
        for (size_t j = 0; j < n; j++) {
            double sum = 0.0;
            for (size_t p = 0; p < k; p++) sum += (double)e4m3_value(weights[j * k + p]) * e4m3_value(codes[r * k + p]);
            s->sums[r * n + j] = sum;
        }
    s->host_c = (float *)malloc(s->checked * n * 4);
    CUDA_OK(cudaMalloc((void **)&s->weights, n * k));
    CUDA_OK(cudaMalloc((void **)&s->codes, rows * k));
    CUDA_OK(cudaMalloc((void **)&s->weight_scales, n * 4));
    CUDA_OK(cudaMalloc((void **)&s->row_scales, rows * 4));
    CUDA_OK(cudaMalloc((void **)&s->bias32, n * 4));
    CUDA_OK(cudaMalloc((void **)&s->bias16, n * 2));
    CUDA_OK(cudaMalloc(&s->out, rows * n * 4));
    CUDA_OK(cudaMemcpy(s->weights, weights, n * k, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(s->codes, codes, rows * k, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(s->weight_scales, s->host_weight_scales, n * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(s->row_scales, s->host_row_scales, rows * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(s->bias32, s->host_bias, n * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(s->bias16, bias16, n * 2, cudaMemcpyHostToDevice));
    free(weights), free(codes), free(bias16);
}

/* C's starting values into out (FP32 or BF16), kept on the host as values */
static void shape_fill_c(shape_t *s, bool bf16) {
    size_t count = s->rows * s->n;
    void *host = malloc(count * 4);
    for (size_t i = 0; i < count; i++) {
        float value = uniform();
        if (bf16) ((uint16_t *)host)[i] = bf16_bits(value);
        else ((float *)host)[i] = value;
        if (i < s->checked * s->n) s->host_c[i] = bf16 ? bf16_value(bf16_bits(value)) : value;
    }
    CUDA_OK(cudaMemcpy(s->out, host, count * (bf16 ? 2 : 4), cudaMemcpyHostToDevice));
    free(host);
}

static float gelu_tanh(float x) { return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x))); }

typedef struct {
    bool d_bf16, outer, fast, accumulate;
    int epilogue;   /* 0 none, 1 bias BF16, 2 bias FP32, 3 GELU + bias BF16 */
    bool late;      /* the scale pointers set after the heuristic, before the product */
} config_t;

static const char *epilogue_names[] = {"none", "bias BF16", "bias FP32", "GELU+bias BF16"};

static void probe(cublasLtHandle_t lt, void *workspace, size_t workspace_bytes, shape_t *s, config_t c) {
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t preference = NULL;
    cudaDataType_t d_type = c.d_bf16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
    cublasLtEpilogue_t epilogue = c.epilogue == 0 ? CUBLASLT_EPILOGUE_DEFAULT
                                  : c.epilogue == 3 ? CUBLASLT_EPILOGUE_GELU_BIAS
                                                    : CUBLASLT_EPILOGUE_BIAS;
    cudaDataType_t bias_type = c.epilogue == 2 ? CUDA_R_32F : CUDA_R_16BF;
    const void *bias = c.epilogue == 2 ? (const void *)s->bias32 : (const void *)s->bias16;
    cublasLtMatmulMatrixScale_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    int8_t fast = c.fast ? 1 : 0;
    /* per tensor: the first entries of the same vectors as the scalars */
    const void *scale_a = s->weight_scales, *scale_b = s->row_scales;
    char where[64] = "";
    cublasStatus_t status = cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
#define STEP(call, name) \
    if (status == CUBLAS_STATUS_SUCCESS) { status = (call); if (status != CUBLAS_STATUS_SUCCESS) snprintf(where, sizeof(where), "%s", name); }
    STEP(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t)), "TRANSA");
    STEP(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof(op_n)), "TRANSB");
    STEP(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)), "FAST_ACCUM");
    STEP(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)), "EPILOGUE");
    if (c.outer) {
        STEP(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)), "A_SCALE_MODE");
        STEP(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)), "B_SCALE_MODE");
    }
    if (!c.late) {
        STEP(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_a, sizeof(scale_a)), "A_SCALE_POINTER");
        STEP(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_b, sizeof(scale_b)), "B_SCALE_POINTER");
    }
    if (c.epilogue) {
        STEP(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)), "BIAS_DATA_TYPE");
        STEP(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)), "BIAS_POINTER");
    }
    STEP(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, s->k, s->n, (int64_t)s->k), "layout A");
    STEP(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, s->k, s->rows, (int64_t)s->k), "layout B");
    STEP(cublasLtMatrixLayoutCreate(&lc, d_type, s->n, s->rows, (int64_t)s->n), "layout C");
    STEP(cublasLtMatmulPreferenceCreate(&preference), "preference");
    STEP(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                              sizeof(workspace_bytes)), "workspace");
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    STEP(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, preference, 1, &result, &found), "heuristic");
    if (status == CUBLAS_STATUS_SUCCESS && !found) {
        snprintf(where, sizeof(where), "heuristic: none found");
        status = CUBLAS_STATUS_NOT_SUPPORTED;
    }
    double error = -1.0, best_us = -1.0;
    if (status == CUBLAS_STATUS_SUCCESS) {
        shape_fill_c(s, c.d_bf16);
        if (c.late) {
            STEP(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_a, sizeof(scale_a)), "A_SCALE_POINTER");
            STEP(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_b, sizeof(scale_b)), "B_SCALE_POINTER");
        }
        float alpha = 1.0f, beta = c.accumulate ? 1.0f : 0.0f;
        STEP(cublasLtMatmul(lt, op, &alpha, s->weights, la, s->codes, lb, &beta, s->out, lc, s->out, lc, &result.algo,
                            workspace, workspace_bytes, 0), "matmul");
        cudaError_t run = cudaDeviceSynchronize();
        if (run != cudaSuccess) {
            printf("%s\n", cudaGetErrorString(run));
            exit(1);
        }
        if (status == CUBLAS_STATUS_SUCCESS) {
            size_t count = s->checked * s->n;
            void *host = malloc(count * 4);
            CUDA_OK(cudaMemcpy(host, s->out, count * (c.d_bf16 ? 2 : 4), cudaMemcpyDeviceToHost));
            double largest = 0.0, worst = 0.0;
            for (size_t r = 0; r < s->checked; r++)
                for (size_t j = 0; j < s->n; j++) {
                    size_t i = r * s->n + j;
                    double a = c.outer ? s->host_weight_scales[j] * (double)s->host_row_scales[r]
                                       : s->host_weight_scales[0] * (double)s->host_row_scales[0];
                    double want = s->sums[i] * a + (c.accumulate ? s->host_c[i] : 0.0);
                    if (c.epilogue) want += s->host_bias[j];
                    if (c.epilogue == 3) want = gelu_tanh((float)want);
                    double got = c.d_bf16 ? bf16_value(((uint16_t *)host)[i]) : ((float *)host)[i];
                    largest = fmax(largest, fabs(want));
                    worst = fmax(worst, fabs(got - want));
                }
            error = largest > 0 ? worst / largest : worst;
            free(host);
            cudaEvent_t start, stop;
            cudaEventCreate(&start), cudaEventCreate(&stop);
            for (int round = 0; round < 3; round++) {
                cudaEventRecord(start, 0);
                for (int i = 0; i < 20; i++)
                    cublasLtMatmul(lt, op, &alpha, s->weights, la, s->codes, lb, &beta, s->out, lc, s->out, lc,
                                   &result.algo, workspace, workspace_bytes, 0);
                cudaEventRecord(stop, 0);
                cudaEventSynchronize(stop);
                float ms = 0;
                cudaEventElapsedTime(&ms, start, stop);
                if (best_us < 0 || ms * 50.0 < best_us) best_us = ms * 50.0;
            }
            cudaEventDestroy(start), cudaEventDestroy(stop);
        }
    }
    printf("| %5zu x %4zu x %4zu | %-4s | %-14s | %-6s%s | %d | %d | ", s->rows, s->n, s->k, c.d_bf16 ? "BF16" : "FP32",
           epilogue_names[c.epilogue], c.outer ? "outer" : "scalar", c.late ? ", set late" : "", c.accumulate, c.fast);
    if (status == CUBLAS_STATUS_SUCCESS)
        printf("ok | %.2e | %8.1f | %6.1f |\n", error, best_us,
               2.0 * s->rows * s->n * s->k / (best_us * 1e-6) / 1e12);
    else
        printf("REFUSED at %s: %s | | | |\n", where, cublasLtGetStatusString(status));
    if (preference) cublasLtMatmulPreferenceDestroy(preference);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (op) cublasLtMatmulDescDestroy(op);
#undef STEP
}

int main(void) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        printf("skip gpu_fp8_probe: no GPU found\n");
        return 0;
    }
    cudaDeviceProp properties;
    CUDA_OK(cudaGetDeviceProperties(&properties, 0));
    printf("gpu_fp8_probe on %s (sm_%d%d), cuBLASLt %zu\n\n", properties.name, properties.major, properties.minor,
           cublasLtGetVersion());
    if (properties.major * 10 + properties.minor < 89) {
        printf("skip gpu_fp8_probe: no FP8 tensor cores before sm_89\n");
        return 0;
    }
    cublasLtHandle_t lt;
    if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) return 1;
    size_t workspace_bytes = 32u << 20;
    void *workspace;
    CUDA_OK(cudaMalloc(&workspace, workspace_bytes));
    printf("| rows x n x k | D | epilogue | scales | beta | fast | status | error | us | TF/s |\n");
    printf("|---|---|---|---|---|---|---|---:|---:|---:|\n");
    /* n, k, rows: a small shape, one whose rows are not a multiple of 16, the model's */
    static const size_t shapes[][3] = {{96, 64, 48}, {96, 64, 37}, {768, 768, 8192}, {3072, 768, 8192},
                                       {768, 3072, 8192}};
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        shape_t s;
        shape_make(&s, shapes[i][0], shapes[i][1], shapes[i][2]);
        if (i == 1) {   /* what the library's calls do: outer scales, bias, beta 1 or GELU; scales set early or late */
            for (int late = 0; late < 2; late++) {
                probe(lt, workspace, workspace_bytes, &s, (config_t){false, true, false, true, 1, late != 0});
                probe(lt, workspace, workspace_bytes, &s, (config_t){true, true, false, false, 3, late != 0});
            }
            probe(lt, workspace, workspace_bytes, &s, (config_t){false, false, false, true, 1, false});
        }
        bool model = i > 1;
        for (int d_bf16 = 0; d_bf16 < 2; d_bf16++)
            for (int epilogue = 0; epilogue < 4; epilogue++)
                for (int outer = 0; outer < 2; outer++)
                    for (int accumulate = 0; accumulate < 2; accumulate++)
                        for (int fast = 0; fast < 2; fast++) {
                            /* the model's shapes: only what the E4M3 products could use */
                            if (model && (!outer || epilogue == 2 || (epilogue == 3 && !d_bf16))) continue;
                            if (epilogue == 3 && accumulate) continue;
                            if (i == 1) continue;
                            probe(lt, workspace, workspace_bytes, &s, (config_t){d_bf16 != 0, outer != 0, fast != 0,
                                                                              accumulate != 0, epilogue, false});
                        }
        cudaFree(s.weights), cudaFree(s.codes), cudaFree(s.weight_scales), cudaFree(s.row_scales);
        cudaFree(s.bias32), cudaFree(s.bias16), cudaFree(s.out);
        free(s.sums), free(s.host_weight_scales), free(s.host_row_scales), free(s.host_bias), free(s.host_c);
    }
    cublasLtDestroy(lt);
    cudaFree(workspace);
    return 0;
}
