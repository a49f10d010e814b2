/* pointwise.cu: tanh GELU and rotary positions on the CUDA backend (backend.h:
 * gelu_forward, gelu_backward, rope_tables, rope_forward, rope_backward), with
 * the CPU backend's formulas: GELU as x sigmoid(2u), u = sqrt(2/pi)(x + 0.044715
 * x^3); rotary angles in double, then rounded. Run on an H200
 * (tests/gpu/test_cuda_ops.c, 2026-12-04; the four-a-thread kernels in the
 * second session with a GPU); also under the emulation (emulation.h). */
#include "cuda_internal.h"
#include "bf16.cuh"
#include "gelu.cuh"
#include "rope.cuh"

__global__ static void uform_gelu_forward_kernel(const float *x, size_t count, float *y) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x)
        y[i] = uform_gelu(x[i]);
}

/* Four to a thread, 16-byte loads and stores (x and y 16-byte aligned): the
 * scalar kernel moved an H200's memory at about half its rate (9% of
 * text_encode's GPU time, bench/gpu_profile.py, 2026-12-04). */
__global__ static void uform_gelu_forward_x4(const float4 *x, size_t quads, float4 *y) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < quads; i += (size_t)gridDim.x * blockDim.x) {
        float4 v = x[i];
        y[i] = make_float4(uform_gelu(v.x), uform_gelu(v.y), uform_gelu(v.z), uform_gelu(v.w));
    }
}

/* y = bf16(gelu(x)): the MLP's activation as the down projection's operand
 * (linear_gelu_bf16 where the product's epilogue cannot), four to a thread
 * when aligned: a 16-byte load, an 8-byte store. */
__global__ static void uform_gelu_bf16_kernel(const float *x, size_t count, uint16_t *y) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x)
        y[i] = uform_bf16_bits(uform_gelu(x[i]));
}

__global__ static void uform_gelu_bf16_x4(const float4 *x, size_t quads, uint2 *y) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < quads; i += (size_t)gridDim.x * blockDim.x) {
        float4 v = x[i];
        y[i] = make_uint2(uform_bf16_pair(uform_gelu(v.x), uform_gelu(v.y)),
                          uform_bf16_pair(uform_gelu(v.z), uform_gelu(v.w)));
    }
}

void uform_cuda_gelu_bf16(uform_backend_t *b, const float *x, size_t count, uint16_t *y) {
    if (!count) return;
    cudaStream_t stream = uform_cuda_context(b)->stream;
    if (count % 4 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)y % 8 == 0)
        UFORM_LAUNCH(uform_gelu_bf16_x4, uform_cuda_blocks(count / 4, 256), 256, stream)(
            (const float4 *)x, count / 4, (uint2 *)y);
    else
        UFORM_LAUNCH(uform_gelu_bf16_kernel, uform_cuda_blocks(count, 256), 256, stream)(x, count, y);
    uform_cuda_launched(b, "gelu (BF16 out)");
}

__global__ static void uform_gelu_backward_kernel(const float *x, const float *dy, size_t count, float *dx) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x)
        dx[i] = uform_gelu_backward_term(dx[i], dy[i], x[i]);
}

/* Four to a thread (x, dy, dx 16-byte aligned): the scalar kernel was 6.5% of
 * a training step's GPU time on an H200 (bench/gpu_profile.py, 2026-12-04). */
__global__ static void uform_gelu_backward_x4(const float4 *x, const float4 *dy, size_t quads, float4 *dx) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < quads; i += (size_t)gridDim.x * blockDim.x) {
        float4 v = x[i], g = dy[i], d = dx[i];
        dx[i] = make_float4(uform_gelu_backward_term(d.x, g.x, v.x), uform_gelu_backward_term(d.y, g.y, v.y),
                            uform_gelu_backward_term(d.z, g.z, v.z), uform_gelu_backward_term(d.w, g.w, v.w));
    }
}

void uform_cuda_gelu_forward(uform_backend_t *b, const float *x, size_t count, float *y) {
    if (!count) return;
    cudaStream_t stream = uform_cuda_context(b)->stream;
    if (count % 4 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)y % 16 == 0)
        UFORM_LAUNCH(uform_gelu_forward_x4, uform_cuda_blocks(count / 4, 256), 256, stream)(
            (const float4 *)x, count / 4, (float4 *)y);
    else
        UFORM_LAUNCH(uform_gelu_forward_kernel, uform_cuda_blocks(count, 256), 256, stream)(x, count, y);
    uform_cuda_launched(b, "gelu_forward");
}

void uform_cuda_gelu_backward(uform_backend_t *b, const float *x, const float *dy, size_t count, float *dx) {
    if (!count) return;
    cudaStream_t stream = uform_cuda_context(b)->stream;
    if (count % 4 == 0 && ((uintptr_t)x | (uintptr_t)dy | (uintptr_t)dx) % 16 == 0)
        UFORM_LAUNCH(uform_gelu_backward_x4, uform_cuda_blocks(count / 4, 256), 256, stream)(
            (const float4 *)x, (const float4 *)dy, count / 4, (float4 *)dx);
    else
        UFORM_LAUNCH(uform_gelu_backward_kernel, uform_cuda_blocks(count, 256), 256, stream)(x, dy, count, dx);
    uform_cuda_launched(b, "gelu_backward");
}

/* One block per segment, one thread per (row, pair): the 32 pairs split into
 * `axes` contiguous groups, the first (32 mod axes) one larger; pair i of a
 * group of n turns with its axis' position at 10000^(-i/n). Each pair's axis
 * and frequency are the segment's, so the block's first 32 threads compute
 * them once into shared memory (the same pow, the same bits; the first
 * version computed it again for every row: 161 us a call of 34k rows on the
 * H200, 2026-12-04). */
__global__ static void uform_rope_tables_kernel(const uform_segment_t *segments, const uint32_t *positions,
                                               float *cosines, float *sines) {
    __shared__ double frequencies[UFORM_PAIRS];
    __shared__ unsigned axes_of[UFORM_PAIRS];
    uform_segment_t segment = segments[blockIdx.x];
    size_t axes = segment.axes ? segment.axes : 1;
    if (threadIdx.x < UFORM_PAIRS) {
        size_t pair = threadIdx.x, axis = 0, first = 0, group = 0;
        for (; axis < axes; axis++) {
            group = UFORM_PAIRS / axes + (axis < UFORM_PAIRS % axes ? 1 : 0);
            if (pair < first + group) break;
            first += group;
        }
        frequencies[pair] = pow(10000.0, -(double)(pair - first) / (double)group);
        axes_of[pair] = (unsigned)axis;
    }
    __syncthreads();
    for (size_t index = threadIdx.x; index < segment.length * UFORM_PAIRS; index += blockDim.x) {
        size_t r = segment.begin + index / UFORM_PAIRS, pair = index % UFORM_PAIRS;
        double angle = (double)positions[r * 3 + axes_of[pair]] * frequencies[pair];
        cosines[r * UFORM_PAIRS + pair] = (float)cos(angle);
        sines[r * UFORM_PAIRS + pair] = (float)sin(angle);
    }
}

void uform_cuda_rope_tables(uform_backend_t *b, const uform_segment_t *segments, size_t count,
                            const uint32_t *positions, float *cosines, float *sines) {
    if (!count) return;
    UFORM_LAUNCH(uform_rope_tables_kernel, (unsigned)count, 256, uform_cuda_context(b)->stream)(segments, positions,
                                                                                       cosines, sines);
    uform_cuda_launched(b, "rope_tables");
}

/* Every (row, q-or-k head, pair) turned by t (direction 1) or -t (-1). */
__global__ static void uform_rope_kernel(float *qkv, size_t rows, size_t hidden, const float *cosines,
                                         const float *sines, int direction) {
    size_t heads2 = 2 * (hidden / UFORM_HEAD_WIDTH);   /* q heads, then k heads */
    size_t total = rows * heads2 * UFORM_PAIRS;
    for (size_t index = (size_t)blockIdx.x * blockDim.x + threadIdx.x; index < total;
         index += (size_t)gridDim.x * blockDim.x) {
        size_t j = index % UFORM_PAIRS, head = (index / UFORM_PAIRS) % heads2, r = index / (UFORM_PAIRS * heads2);
        float c = cosines[r * UFORM_PAIRS + j], s = sines[r * UFORM_PAIRS + j];
        float *x = qkv + r * 3 * hidden + head * UFORM_HEAD_WIDTH;
        float2 turned = direction > 0 ? uform_rope_turn(x[j], x[j + UFORM_PAIRS], c, s)
                                      : uform_rope_turn_back(x[j], x[j + UFORM_PAIRS], c, s);
        x[j] = turned.x;
        x[j + UFORM_PAIRS] = turned.y;
    }
}

/* The same, four pairs a thread (16-byte loads of each half of a head and of
 * the row's cosines and sines; qkv and the tables 16-byte aligned): the
 * scalar kernel, three 64-bit divisions per pair, ran at about half an H200's
 * bandwidth (3.5% of a training step, bench/gpu_profile.py, 2026-12-04). */
__global__ static void uform_rope_kernel_x4(float *qkv, size_t rows, size_t hidden, const float *cosines,
                                            const float *sines, int direction) {
    const size_t per_row = 2 * (hidden / UFORM_HEAD_WIDTH) * (UFORM_PAIRS / 4);
    for (size_t index = (size_t)blockIdx.x * blockDim.x + threadIdx.x; index < rows * per_row;
         index += (size_t)gridDim.x * blockDim.x) {
        size_t r = index / per_row, t = index - r * per_row, pair = 4 * (t % (UFORM_PAIRS / 4));
        float *x = qkv + r * 3 * hidden + (t / (UFORM_PAIRS / 4)) * UFORM_HEAD_WIDTH + pair;
        float4 x0 = *(float4 *)x, x1 = *(float4 *)(x + UFORM_PAIRS);
        float4 c = *(const float4 *)(cosines + r * UFORM_PAIRS + pair);
        float4 s = *(const float4 *)(sines + r * UFORM_PAIRS + pair);
        float2 a, e, f, g;
        if (direction > 0) {
            a = uform_rope_turn(x0.x, x1.x, c.x, s.x), e = uform_rope_turn(x0.y, x1.y, c.y, s.y);
            f = uform_rope_turn(x0.z, x1.z, c.z, s.z), g = uform_rope_turn(x0.w, x1.w, c.w, s.w);
        } else {
            a = uform_rope_turn_back(x0.x, x1.x, c.x, s.x), e = uform_rope_turn_back(x0.y, x1.y, c.y, s.y);
            f = uform_rope_turn_back(x0.z, x1.z, c.z, s.z), g = uform_rope_turn_back(x0.w, x1.w, c.w, s.w);
        }
        *(float4 *)x = make_float4(a.x, e.x, f.x, g.x);
        *(float4 *)(x + UFORM_PAIRS) = make_float4(a.y, e.y, f.y, g.y);
    }
}

static void uform_cuda_rope(uform_backend_t *b, float *qkv, size_t rows, size_t hidden, const float *cosines,
                            const float *sines, int direction) {
    if (!rows) return;
    cudaStream_t stream = uform_cuda_context(b)->stream;
    size_t pairs = rows * 2 * (hidden / UFORM_HEAD_WIDTH) * UFORM_PAIRS;
    if (((uintptr_t)qkv | (uintptr_t)cosines | (uintptr_t)sines) % 16 == 0)
        UFORM_LAUNCH(uform_rope_kernel_x4, uform_cuda_blocks(pairs / 4, 256), 256, stream)(qkv, rows, hidden, cosines,
                                                                                       sines, direction);
    else
        UFORM_LAUNCH(uform_rope_kernel, uform_cuda_blocks(pairs, 256), 256, stream)(qkv, rows, hidden, cosines, sines,
                                                                                direction);
    uform_cuda_launched(b, direction > 0 ? "rope_forward" : "rope_backward");
}

void uform_cuda_rope_forward(uform_backend_t *b, float *qkv, size_t rows, size_t hidden, const float *cosines,
                             const float *sines) {
    uform_cuda_rope(b, qkv, rows, hidden, cosines, sines, 1);
}

void uform_cuda_rope_backward(uform_backend_t *b, float *dqkv, size_t rows, size_t hidden, const float *cosines,
                              const float *sines) {
    uform_cuda_rope(b, dqkv, rows, hidden, cosines, sines, -1);
}
