/* adamw.cu: the optimizer on the CUDA backend (backend.h: sum_squares, adamw,
 * adamw_first_non_finite), the CPU backend's element formula (torch.optim.AdamW,
 * decoupled decay, bias corrections in double). sum_squares accumulates in
 * double through a fixed tree (not index order as on the CPU: the two agree to
 * double rounding). Run on an H200 (tests/gpu/test_cuda_ops.c, 2026-12-04);
 * also runs under the emulation (emulation.h). */
#include "cuda_internal.h"
#include "reduce.cuh"

#include <math.h>

typedef struct {
    float gradient_scale, learning_rate, step_size, correction2_sqrt;
} uform_adamw_constants_t;

static uform_adamw_constants_t uform_adamw_constants(float gradient_scale, uint64_t step, float learning_rate) {
    double correction1 = 1.0 - pow((double)UFORM_ADAM_BETA1, (double)step);
    double correction2 = 1.0 - pow((double)UFORM_ADAM_BETA2, (double)step);
    uform_adamw_constants_t k = {gradient_scale, learning_rate, (float)(learning_rate / correction1),
                                 (float)sqrt(correction2)};
    return k;
}

__device__ static inline float uform_adamw_element(uform_adamw_constants_t k, float p, float g, float m_in,
                                                   float v_in, uint8_t decay, float *m_out, float *v_out) {
    g *= k.gradient_scale;
    if (decay) p *= 1.0f - k.learning_rate * UFORM_WEIGHT_DECAY;
    float m = m_in + (g - m_in) * (1.0f - UFORM_ADAM_BETA1);
    float v = v_in * UFORM_ADAM_BETA2 + g * g * (1.0f - UFORM_ADAM_BETA2);
    float denominator = sqrtf(v) / k.correction2_sqrt + UFORM_ADAM_EPSILON;
    *m_out = m;
    *v_out = v;
    return p - k.step_size * (m / denominator);
}

__global__ static void uform_adamw_kernel(uform_adamw_constants_t k, float *parameters, const float *gradients,
                                          float *first, float *second, const uint8_t *decay, size_t count) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
        float m, v;
        parameters[i] = uform_adamw_element(k, parameters[i], gradients[i], first[i], second[i], decay[i], &m, &v);
        first[i] = m;
        second[i] = v;
    }
}

void uform_cuda_adamw(uform_backend_t *b, float *parameters, const float *gradients, float gradient_scale,
                      float *first_moment, float *second_moment, const uint8_t *decay, size_t count, uint64_t step,
                      float learning_rate) {
    if (!count) return;
    UFORM_LAUNCH(uform_adamw_kernel, uform_cuda_blocks(count, 256), 256, uform_cuda_context(b)->stream)(
        uform_adamw_constants(gradient_scale, step, learning_rate), parameters, gradients, first_moment,
        second_moment, decay, count);
    uform_cuda_launched(b, "adamw");
}

/* The lowest index whose update is not finite: atomicMin on an integer, which
 * gives the same answer whatever the order. */
__global__ static void uform_adamw_check_kernel(uform_adamw_constants_t k, const float *parameters,
                                                const float *gradients, const float *first, const float *second,
                                                const uint8_t *decay, size_t count, unsigned long long *lowest) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
        float m, v;
        float p = uform_adamw_element(k, parameters[i], gradients[i], first[i], second[i], decay[i], &m, &v);
        if (!isfinite(p) || !isfinite(m) || !isfinite(v)) atomicMin(lowest, (unsigned long long)i);
    }
}

size_t uform_cuda_adamw_first_non_finite(uform_backend_t *b, const float *parameters, const float *gradients,
                                         float gradient_scale, const float *first_moment,
                                         const float *second_moment, const uint8_t *decay, size_t count,
                                         uint64_t step, float learning_rate) {
    if (!count) return SIZE_MAX;
    uform_cuda_context_t *context = uform_cuda_context(b);
    unsigned long long *lowest = (unsigned long long *)context->workspace;   /* 8 bytes of the workspace */
    unsigned long long none = ~0ull, found = ~0ull;
    uform_cuda_upload(b, lowest, &none, sizeof(none));
    UFORM_LAUNCH(uform_adamw_check_kernel, uform_cuda_blocks(count, 256), 256, context->stream)(
        uform_adamw_constants(gradient_scale, step, learning_rate), parameters, gradients, first_moment,
        second_moment, decay, count, lowest);
    uform_cuda_launched(b, "adamw_first_non_finite");
    uform_cuda_download(b, &found, lowest, sizeof(found));
    return found == ~0ull ? SIZE_MAX : (size_t)found;
}

/* Partial sums in double, one per block over a fixed slice, then one block over them. */
__global__ static void uform_sum_squares_kernel(const float *values, size_t count, size_t slice, double *partial) {
    __shared__ double shared[UFORM_CUDA_ROW_THREADS / 32];
    size_t begin = (size_t)blockIdx.x * slice, end = begin + slice < count ? begin + slice : count;
    double sum = 0.0;
    for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) sum += (double)values[i] * (double)values[i];
    sum = uform_block_sum(sum, shared);
    if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

__global__ static void uform_sum_partials_kernel(const double *partial, size_t count, double *total) {
    __shared__ double shared[UFORM_CUDA_ROW_THREADS / 32];
    double sum = 0.0;
    for (size_t i = threadIdx.x; i < count; i += blockDim.x) sum += partial[i];
    sum = uform_block_sum(sum, shared);
    if (threadIdx.x == 0) *total = sum;
}

double uform_cuda_sum_squares(uform_backend_t *b, const float *values, size_t count) {
    if (!count) return 0.0;
    uform_cuda_context_t *context = uform_cuda_context(b);
    const size_t blocks = 1024;   /* fixed: the tree does not depend on the GPU */
    size_t slice = (count + blocks - 1) / blocks;
    double *partial = (double *)context->workspace, *total = partial + blocks, result = 0.0;
    UFORM_LAUNCH(uform_sum_squares_kernel, (unsigned)blocks, UFORM_CUDA_ROW_THREADS, context->stream)(values, count, slice,
                                                                                              partial);
    UFORM_LAUNCH(uform_sum_partials_kernel, 1, UFORM_CUDA_ROW_THREADS, context->stream)(partial, blocks, total);
    uform_cuda_launched(b, "sum_squares");
    uform_cuda_download(b, &result, total, sizeof(result));
    return result;
}
