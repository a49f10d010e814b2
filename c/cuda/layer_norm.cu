/* layer_norm.cu: LayerNorm's forward and backward on the CUDA backend
 * (backend.h): biased variance, eps 1e-5, one block per row for the forward
 * and dx; the weight gradients as column sums in two fixed passes (columns.cu).
 * Run on an H200 (tests/gpu/test_cuda_ops.c, 2026-12-04); also runs under the
 * emulation (emulation.h). */
#include "cuda_internal.h"
#include "reduce.cuh"

__global__ static void uform_ln_forward(const float *x, size_t width, const float *weight, const float *bias,
                                        float *y, float *mean_out, float *rstd_out) {
    __shared__ float shared[UFORM_CUDA_ROW_THREADS / 32];
    size_t row = blockIdx.x;
    const float *source = x + row * width;
    float sum = 0.0f;
    for (size_t c = threadIdx.x; c < width; c += blockDim.x) sum += source[c];
    float mean = uform_block_sum(sum, shared) / (float)width;
    float squares = 0.0f;
    for (size_t c = threadIdx.x; c < width; c += blockDim.x) {
        float d = source[c] - mean;
        squares += d * d;
    }
    float rstd = rsqrtf(uform_block_sum(squares, shared) / (float)width + 1e-5f);
    __syncthreads();   /* y may be x: every read of the row is done */
    float *target = y + row * width;
    for (size_t c = threadIdx.x; c < width; c += blockDim.x)
        target[c] = (source[c] - mean) * rstd * weight[c] + bias[c];
    if (threadIdx.x == 0) {
        if (mean_out) mean_out[row] = mean;
        if (rstd_out) rstd_out[row] = rstd;
    }
}

void uform_cuda_layer_norm_forward(uform_backend_t *b, const float *x, size_t rows, size_t width,
                                   const float *weight, const float *bias, float *y, float *mean, float *rstd) {
    if (!rows || !width) return;
    UFORM_LAUNCH(uform_ln_forward, (unsigned)rows, UFORM_CUDA_ROW_THREADS, uform_cuda_context(b)->stream)(
        x, width, weight, bias, y, mean, rstd);
    uform_cuda_launched(b, "layer_norm_forward");
}

/* dx += rstd (dy w - mean(dy w) - xhat mean(dy w xhat)) per row. */
__global__ static void uform_ln_backward_rows(const float *dy, const float *x, const float *weight,
                                              const float *mean, const float *rstd, size_t width, float *dx) {
    __shared__ float shared[UFORM_CUDA_ROW_THREADS / 32];
    size_t row = blockIdx.x;
    const float *g = dy + row * width, *source = x + row * width;
    float m = mean[row], r = rstd[row];
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (size_t c = threadIdx.x; c < width; c += blockDim.x) {
        float gw = g[c] * weight[c];
        sum_g += gw;
        sum_gx += gw * (source[c] - m) * r;
    }
    float mean_g = uform_block_sum(sum_g, shared) / (float)width;
    float mean_gx = uform_block_sum(sum_gx, shared) / (float)width;
    __syncthreads();   /* dx may alias dy */
    float *target = dx + row * width;
    for (size_t c = threadIdx.x; c < width; c += blockDim.x) {
        float xhat = (source[c] - m) * r;
        target[c] += r * (g[c] * weight[c] - mean_g - xhat * mean_gx);
    }
}

void uform_cuda_layer_norm_backward(uform_backend_t *b, const float *dy, const float *x, const float *weight,
                                    const float *mean, const float *rstd, size_t rows, size_t width, float *dx,
                                    float *dweight, float *dbias) {
    if (!rows || !width) return;
    cudaStream_t stream = uform_cuda_context(b)->stream;
    /* weight gradients first: they read dy, which dx may alias */
    uform_cuda_layer_norm_columns(b, dy, x, mean, rstd, rows, width, dweight, dbias);
    if (dx) {
        UFORM_LAUNCH(uform_ln_backward_rows, (unsigned)rows, UFORM_CUDA_ROW_THREADS, stream)(dy, x, weight, mean, rstd,
                                                                                    width, dx);
        uform_cuda_launched(b, "layer_norm_backward (rows)");
    }
}
