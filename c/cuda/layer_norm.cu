/* layer_norm.cu: LayerNorm's forward and backward on the CUDA backend
 * (backend.h): biased variance, eps 1e-5, one block per row for the forward
 * and dx; the weight gradients as column sums in two fixed passes (columns.cu).
 * Run on an H200 (tests/gpu/test_cuda_ops.c, 2026-12-04); also runs under the
 * emulation (emulation.h). */
#include "cuda_internal.h"
#include "bf16.cuh"
#include "reduce.cuh"

/* Out: float, or uint16_t for BF16 (layer_norm_forward_bf16: the output
 * rounded, nothing else different). */
template <typename Out>
__global__ static void uform_ln_forward(const float *x, size_t width, const float *weight, const float *bias,
                                        Out *y, float *mean_out, float *rstd_out) {
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
    Out *target = y + row * width;
    for (size_t c = threadIdx.x; c < width; c += blockDim.x)
        uform_store(target + c, (source[c] - mean) * rstd * weight[c] + bias[c]);
    if (threadIdx.x == 0) {
        if (mean_out) mean_out[row] = mean;
        if (rstd_out) rstd_out[row] = rstd;
    }
}

/* A warp per row, the row in registers (read once, 16 bytes a load): rows of
 * 128 to 1024 floats in steps of 128 (the model's widths). The block-per-row
 * kernel above, three passes over the row and two block-wide sums, ran at
 * about 40% of an H200's bandwidth: 13% of text_encode's GPU time
 * (bench/gpu_profile.py, 2026-12-04). The same formula; its sums in another
 * order (the row's lanes, then a butterfly). */
#define UFORM_LN_WARP_QUADS 8   /* float4s a lane holds: 32 x 8 x 4 = 1024 */

__device__ static inline void uform_store4(float *target, float4 v) { *(float4 *)target = v; }
__device__ static inline void uform_store4(uint16_t *target, float4 v) {
    *(uint2 *)target = make_uint2(uform_bf16_pair(v.x, v.y), uform_bf16_pair(v.z, v.w));
}

template <typename Out>
__global__ static void uform_ln_forward_warp(const float *x, size_t rows, size_t width, const float *weight,
                                             const float *bias, Out *y, float *mean_out, float *rstd_out) {
    const size_t warps = blockDim.x / 32, quads = width / 4;
    const unsigned lane = threadIdx.x % 32;
    for (size_t row = (size_t)blockIdx.x * warps + threadIdx.x / 32; row < rows; row += (size_t)gridDim.x * warps) {
        const float4 *source = (const float4 *)(x + row * width);
        float4 v[UFORM_LN_WARP_QUADS];
        float sum = 0.0f;
        for (int i = 0; i < UFORM_LN_WARP_QUADS; i++)
            if (lane + 32 * i < quads) {
                v[i] = source[lane + 32 * i];
                sum += (v[i].x + v[i].y) + (v[i].z + v[i].w);
            }
        float mean = uform_warp_sum(sum) / (float)width, squares = 0.0f;
        for (int i = 0; i < UFORM_LN_WARP_QUADS; i++)
            if (lane + 32 * i < quads) {
                float a = v[i].x - mean, c = v[i].y - mean, d = v[i].z - mean, e = v[i].w - mean;
                squares += (a * a + c * c) + (d * d + e * e);
            }
        float rstd = rsqrtf(uform_warp_sum(squares) / (float)width + 1e-5f);
        /* y may be x: a lane writes only the quads it read */
        for (int i = 0; i < UFORM_LN_WARP_QUADS; i++)
            if (lane + 32 * i < quads) {
                size_t q = lane + 32 * i;
                float4 w = ((const float4 *)weight)[q], bb = ((const float4 *)bias)[q];
                uform_store4(y + row * width + 4 * q,
                             make_float4((v[i].x - mean) * rstd * w.x + bb.x, (v[i].y - mean) * rstd * w.y + bb.y,
                                         (v[i].z - mean) * rstd * w.z + bb.z, (v[i].w - mean) * rstd * w.w + bb.w));
            }
        if (lane == 0) {
            if (mean_out) mean_out[row] = mean;
            if (rstd_out) rstd_out[row] = rstd;
        }
    }
}

template <typename Out>
static void uform_cuda_layer_norm_launch(uform_backend_t *b, const float *x, size_t rows, size_t width,
                                         const float *weight, const float *bias, Out *y, float *mean, float *rstd) {
    if (!rows || !width) return;
    cudaStream_t stream = uform_cuda_context(b)->stream;
    uintptr_t addresses = (uintptr_t)x | (uintptr_t)y | (uintptr_t)weight | (uintptr_t)bias;
    if (width % 128 == 0 && width <= 128 * UFORM_LN_WARP_QUADS && addresses % 16 == 0)
        UFORM_LAUNCH(uform_ln_forward_warp<Out>, uform_cuda_blocks(rows, 8), 256, stream)(x, rows, width, weight, bias,
                                                                                       y, mean, rstd);
    else
        UFORM_LAUNCH(uform_ln_forward<Out>, (unsigned)rows, UFORM_CUDA_ROW_THREADS, stream)(x, width, weight, bias, y,
                                                                                           mean, rstd);
    uform_cuda_launched(b, "layer_norm_forward");
}

void uform_cuda_layer_norm_forward(uform_backend_t *b, const float *x, size_t rows, size_t width,
                                   const float *weight, const float *bias, float *y, float *mean, float *rstd) {
    uform_cuda_layer_norm_launch(b, x, rows, width, weight, bias, y, mean, rstd);
}

void uform_cuda_layer_norm_forward_bf16(uform_backend_t *b, const float *x, size_t rows, size_t width,
                                        const float *weight, const float *bias, uint16_t *y, float *mean,
                                        float *rstd) {
    uform_cuda_layer_norm_launch(b, x, rows, width, weight, bias, y, mean, rstd);
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

/* Written after the last call of 2026-12-04, checked under the emulation
 * against the CPU backend; run on an H100 (2026-12-05, the third session with a GPU: tests/gpu/, every check passing).
 * The same, a warp per row holding its dy and x in registers (the forward's
 * widths and alignment): the block-per-row kernel took 3.4% of a training
 * step on an H200 (bench/gpu_profile.py, 2026-12-04), at about 40% of the
 * bandwidth, as the forward's did. Its sums in another order. */
__global__ static void uform_ln_backward_warp(const float *dy, const float *x, const float *weight,
                                              const float *mean, const float *rstd, size_t rows, size_t width,
                                              float *dx) {
    const size_t warps = blockDim.x / 32, quads = width / 4;
    const unsigned lane = threadIdx.x % 32;
    for (size_t row = (size_t)blockIdx.x * warps + threadIdx.x / 32; row < rows; row += (size_t)gridDim.x * warps) {
        const float4 *g4 = (const float4 *)(dy + row * width), *x4 = (const float4 *)(x + row * width);
        float m = mean[row], r = rstd[row];
        float4 gw[UFORM_LN_WARP_QUADS], xhat[UFORM_LN_WARP_QUADS];
        float sum_g = 0.0f, sum_gx = 0.0f;
        for (int i = 0; i < UFORM_LN_WARP_QUADS; i++)
            if (lane + 32 * i < quads) {
                size_t q = lane + 32 * i;
                float4 g = g4[q], v = x4[q], w = ((const float4 *)weight)[q];
                gw[i] = make_float4(g.x * w.x, g.y * w.y, g.z * w.z, g.w * w.w);
                xhat[i] = make_float4((v.x - m) * r, (v.y - m) * r, (v.z - m) * r, (v.w - m) * r);
                sum_g += (gw[i].x + gw[i].y) + (gw[i].z + gw[i].w);
                sum_gx += (gw[i].x * xhat[i].x + gw[i].y * xhat[i].y) + (gw[i].z * xhat[i].z + gw[i].w * xhat[i].w);
            }
        float mean_g = uform_warp_sum(sum_g) / (float)width, mean_gx = uform_warp_sum(sum_gx) / (float)width;
        /* dx may alias dy: a lane writes only the quads it read */
        for (int i = 0; i < UFORM_LN_WARP_QUADS; i++)
            if (lane + 32 * i < quads) {
                float4 *target = (float4 *)(dx + row * width) + lane + 32 * i, d = *target;
                *target = make_float4(d.x + r * (gw[i].x - mean_g - xhat[i].x * mean_gx),
                                      d.y + r * (gw[i].y - mean_g - xhat[i].y * mean_gx),
                                      d.z + r * (gw[i].z - mean_g - xhat[i].z * mean_gx),
                                      d.w + r * (gw[i].w - mean_g - xhat[i].w * mean_gx));
            }
    }
}

void uform_cuda_layer_norm_backward(uform_backend_t *b, const float *dy, const float *x, const float *weight,
                                    const float *mean, const float *rstd, size_t rows, size_t width, float *dx,
                                    float *dweight, float *dbias) {
    if (!rows || !width) return;
    cudaStream_t stream = uform_cuda_context(b)->stream;
    /* weight gradients first: they read dy, which dx may alias */
    uform_cuda_layer_norm_columns(b, dy, x, mean, rstd, rows, width, dweight, dbias);
    uintptr_t addresses = (uintptr_t)dy | (uintptr_t)x | (uintptr_t)weight | (uintptr_t)dx;
    if (dx && width % 128 == 0 && width <= 128 * UFORM_LN_WARP_QUADS && addresses % 16 == 0) {
        UFORM_LAUNCH(uform_ln_backward_warp, uform_cuda_blocks(rows, 8), 256, stream)(dy, x, weight, mean, rstd, rows,
                                                                                    width, dx);
        uform_cuda_launched(b, "layer_norm_backward (rows)");
    } else if (dx) {
        UFORM_LAUNCH(uform_ln_backward_rows, (unsigned)rows, UFORM_CUDA_ROW_THREADS, stream)(dy, x, weight, mean, rstd,
                                                                                    width, dx);
        uform_cuda_launched(b, "layer_norm_backward (rows)");
    }
}
