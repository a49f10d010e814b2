/* attention.cu: attention over packed segments on the CUDA backend (backend.h:
 * attention_scratch_bytes, attention_forward, attention_backward), heads of 64,
 * FP32, each segment alone, scale 1/8:
 *
 *   forward:  s_ij = q_i . k_j / 8, lse_i = log sum_j exp s_ij, out_i = sum_j exp(s_ij - lse_i) v_j
 *   backward: D_i = dout_i . out_i, p_ij = exp(s_ij - lse_i), ds_ij = p_ij (dout_i . v_j - D_i) / 8,
 *             dq_i += sum_j ds_ij k_j, dk_j += sum_i ds_ij q_i, dv_j += sum_i p_ij dout_i
 *
 * Two implementations: attention_mma.cu's flash-style kernels on BF16 tensor
 * cores, which the backend runs, and here the first version, FP32 and simple:
 * one warp per (row, head), each lane holding two of the 64 values; the
 * forward walks the keys once with an online softmax, the backward computes dq
 * per query row and dk, dv per key row (recomputing p), so every output is one
 * fixed chain and no atomics are needed. The simple kernels run when an
 * operand is not 16-byte aligned (the tensor-core kernels load 4 floats at a
 * time) and when a test asks for them (uform_cuda_attention_simple): they are
 * the FP32 reference tests/gpu/test_cuda_ops.c checks beside the fast ones.
 * Run on an H200 (tests/gpu/test_cuda_ops.c, 2026-12-04); also runs under the
 * emulation (emulation.h). */
#include "cuda_internal.h"
#include "bf16.cuh"

#define UFORM_ATTENTION_WARPS 8

__device__ static inline float uform_warp_sum(float value) {
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
    return value;   /* every lane holds the sum */
}

/* Block (segment, head); warp w takes query rows w, w + 8, ... of the segment. */
__global__ static void uform_attention_forward_kernel(const float *qkv, size_t hidden,
                                                      const uform_segment_t *segments, float *out,
                                                      float *logsumexp) {
    uform_segment_t segment = segments[blockIdx.x];
    size_t head = blockIdx.y, heads = gridDim.y, stride = 3 * hidden, lane = threadIdx.x % 32;
    size_t column = head * UFORM_HEAD_WIDTH;
    for (size_t i = threadIdx.x / 32; i < segment.length; i += UFORM_ATTENTION_WARPS) {
        const float *q = qkv + (segment.begin + i) * stride + column;
        float q0 = q[lane], q1 = q[lane + 32];
        float top = -INFINITY, total = 0.0f, o0 = 0.0f, o1 = 0.0f;
        for (size_t j = 0; j < segment.length; j++) {
            const float *k = qkv + (segment.begin + j) * stride + hidden + column;
            const float *v = k + hidden;
            float s = uform_warp_sum(q0 * k[lane] + q1 * k[lane + 32]) * 0.125f;
            float next = fmaxf(top, s);
            float rescale = expf(top - next), weight = expf(s - next);   /* expf(-inf) = 0 at j = 0 */
            total = total * rescale + weight;
            o0 = o0 * rescale + weight * v[lane];
            o1 = o1 * rescale + weight * v[lane + 32];
            top = next;
        }
        float *target = out + (segment.begin + i) * hidden + column;
        target[lane] = o0 / total;
        target[lane + 32] = o1 / total;
        if (logsumexp && lane == 0) logsumexp[(segment.begin + i) * heads + head] = top + logf(total);
    }
}

size_t uform_cuda_attention_scratch_bytes(uform_backend_t *b, size_t hidden, size_t segments, size_t longest) {
    (void)b, (void)hidden, (void)segments, (void)longest;
    return 0;
}

/* The tensor-core kernels take the call unless a test asked for the simple
 * ones or an operand they load 16 bytes at a time (up to four; NULL: none)
 * is not 16-byte aligned. */
static bool uform_attention_on_tensor_cores(uform_backend_t *b, const void *first, const void *second,
                                            const void *third, const void *fourth) {
    uintptr_t addresses = (uintptr_t)first | (uintptr_t)second | (uintptr_t)third | (uintptr_t)fourth;
    return !uform_cuda_context(b)->simple_attention && addresses % 16 == 0;
}

extern "C" void uform_cuda_attention_simple(uform_backend_t *b, bool simple) {
    uform_cuda_context(b)->simple_attention = simple;
}

void uform_cuda_attention_forward(uform_backend_t *b, const float *qkv, size_t hidden,
                                  const uform_segment_t *segments, size_t count, size_t rows, size_t longest,
                                  float *out, float *logsumexp, void *scratch) {
    (void)scratch;
    if (!count || hidden < UFORM_HEAD_WIDTH) return;   /* no whole head: nothing to attend */
    if (uform_attention_on_tensor_cores(b, qkv, out, NULL, NULL)) {
        uform_cuda_attention_forward_mma(b, qkv, hidden, segments, count, rows, longest, out, logsumexp);
        return;
    }
    dim3 grid((unsigned)count, (unsigned)(hidden / UFORM_HEAD_WIDTH));
    UFORM_LAUNCH(uform_attention_forward_kernel, grid, 32 * UFORM_ATTENTION_WARPS, uform_cuda_context(b)->stream)(
        qkv, hidden, segments, out, logsumexp);
    uform_cuda_launched(b, "attention_forward");
}

/* Inference's forward with the rotation applied and out rounded to BF16: the
 * tensor-core kernel reads q and k rotated as they are staged in BF16 and
 * writes out so; the simple kernels (a test's choice, or operands not
 * 16-byte aligned) run on a rotated FP32 copy of qkv and write FP32 rows
 * into the context's scratch, then rounded. */
void uform_cuda_attention_forward_bf16(uform_backend_t *b, const float *qkv, size_t hidden,
                                       const uform_segment_t *segments, size_t count, size_t rows, size_t longest,
                                       const float *cosines, const float *sines, uint16_t *out, void *scratch) {
    if (!count || hidden < UFORM_HEAD_WIDTH) return;
    if (uform_attention_on_tensor_cores(b, qkv, out, cosines, sines)) {
        uform_cuda_attention_forward_mma_bf16(b, qkv, hidden, segments, count, rows, longest, cosines, sines, out);
        return;
    }
    uform_cuda_context_t *context = uform_cuda_context(b);
    float *rotated = (float *)uform_cuda_grow(b, &context->rotated_qkv, rows * 3 * hidden * sizeof(float),
                                              "attention's rotated qkv");
    float *rows_f32 = (float *)uform_cuda_grow(b, &context->operand_f32, rows * hidden * sizeof(float),
                                               "attention's FP32 rows");
    if (!rotated || !rows_f32) return;   /* recorded */
    uform_cuda_copy(b, rotated, qkv, rows * 3 * hidden * sizeof(float));
    uform_cuda_rope_forward(b, rotated, rows, hidden, cosines, sines);
    uform_cuda_attention_forward(b, rotated, hidden, segments, count, rows, longest, rows_f32, NULL, scratch);
    uform_cuda_round_bf16(b, rows_f32, hidden, rows, hidden, out);
}

/* BF16 rows widened to FP32 (exact): the simple kernels' view of the q, k, v
 * the training forward keeps in BF16, and of linear_qkv_bf16's rows. */
__global__ static void uform_attention_widen(const uint16_t *x, size_t count, float *y) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x)
        y[i] = uform_bf16_float(x[i]);
}

static float *uform_attention_widened(uform_backend_t *b, const uint16_t *qkv16, size_t rows, size_t hidden) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    size_t count = rows * 3 * hidden;
    float *rows_f32 = (float *)uform_cuda_grow(b, &context->rotated_qkv, count * sizeof(float), "attention's FP32 qkv");
    if (!rows_f32) return NULL;   /* recorded */
    UFORM_LAUNCH(uform_attention_widen, uform_cuda_blocks(count, 256), 256, context->stream)(qkv16, count, rows_f32);
    uform_cuda_launched(b, "attention's FP32 qkv (widened)");
    return rows_f32;
}

/* attention_forward_staged_bf16 (backend.h; not yet run on a GPU): the
 * tensor-core kernel reads the staged rows as inference's staging would have
 * written them; the simple kernels (a test's choice, or operands not 16-byte
 * aligned) run on them widened, into FP32 rows then rounded. */
void uform_cuda_attention_forward_staged_bf16(uform_backend_t *b, const uint16_t *qkv16, size_t hidden,
                                              const uform_segment_t *segments, size_t count, size_t rows,
                                              size_t longest, uint16_t *out, void *scratch) {
    if (!count || hidden < UFORM_HEAD_WIDTH) return;
    if (uform_attention_on_tensor_cores(b, qkv16, out, NULL, NULL)) {
        uform_cuda_attention_forward_mma_staged(b, qkv16, hidden, segments, count, longest, out);
        return;
    }
    uform_cuda_context_t *context = uform_cuda_context(b);
    float *rows_f32 = (float *)uform_cuda_grow(b, &context->operand_f32, rows * hidden * sizeof(float),
                                               "attention's FP32 rows");
    float *widened = rows_f32 ? uform_attention_widened(b, qkv16, rows, hidden) : NULL;
    if (!widened) return;   /* recorded */
    uform_cuda_attention_forward(b, widened, hidden, segments, count, rows, longest, rows_f32, NULL, scratch);
    uform_cuda_round_bf16(b, rows_f32, hidden, rows, hidden, out);
}

/* Training's forward with q, k, v kept in BF16 (backend.h,
 * attention_forward_train_bf16; first run on an H100, 2026-12-05): the tensor-core kernel
 * from inference's staging (rotated and rounded into qkv16, the same bits as
 * rope_forward then the kernel's own rounding); the simple kernels (a test's
 * choice, or operands not 16-byte aligned) rotate a copy, round it into
 * qkv16 and run on qkv16 widened, so both read q, k, v as kept. */
void uform_cuda_attention_forward_train_bf16(uform_backend_t *b, const float *qkv, size_t hidden,
                                             const uform_segment_t *segments, size_t count, size_t rows,
                                             size_t longest, const float *cosines, const float *sines,
                                             uint16_t *qkv16, float *out, float *logsumexp) {
    if (!rows || hidden < UFORM_HEAD_WIDTH) return;
    if (uform_attention_on_tensor_cores(b, qkv, out, cosines, sines) && (uintptr_t)qkv16 % 16 == 0) {
        uform_cuda_attention_forward_mma_train(b, qkv, hidden, segments, count, rows, longest, cosines, sines,
                                               qkv16, out, logsumexp);
        return;
    }
    uform_cuda_context_t *context = uform_cuda_context(b);
    float *rotated = (float *)uform_cuda_grow(b, &context->rotated_qkv, rows * 3 * hidden * sizeof(float),
                                              "attention's rotated qkv");
    if (!rotated) return;   /* recorded */
    uform_cuda_copy(b, rotated, qkv, rows * 3 * hidden * sizeof(float));
    uform_cuda_rope_forward(b, rotated, rows, hidden, cosines, sines);
    uform_cuda_round_bf16(b, rotated, 3 * hidden, rows, 3 * hidden, qkv16);
    float *widened = uform_attention_widened(b, qkv16, rows, hidden);   /* the same buffer: rotated is done */
    if (widened && count) uform_cuda_attention_forward(b, widened, hidden, segments, count, rows, longest, out,
                                                       logsumexp, NULL);
}
__global__ static void uform_attention_dq_kernel(const float *qkv, const float *out, const float *dout,
                                                 const float *logsumexp, size_t hidden,
                                                 const uform_segment_t *segments, float *dqkv) {
    uform_segment_t segment = segments[blockIdx.x];
    size_t head = blockIdx.y, heads = gridDim.y, stride = 3 * hidden, lane = threadIdx.x % 32;
    size_t column = head * UFORM_HEAD_WIDTH;
    for (size_t i = threadIdx.x / 32; i < segment.length; i += UFORM_ATTENTION_WARPS) {
        size_t r = segment.begin + i;
        const float *q = qkv + r * stride + column, *g = dout + r * hidden + column, *o = out + r * hidden + column;
        float q0 = q[lane], q1 = q[lane + 32], g0 = g[lane], g1 = g[lane + 32];
        float delta = uform_warp_sum(g0 * o[lane] + g1 * o[lane + 32]);
        float lse = logsumexp[r * heads + head], dq0 = 0.0f, dq1 = 0.0f;
        for (size_t j = 0; j < segment.length; j++) {
            const float *k = qkv + (segment.begin + j) * stride + hidden + column, *v = k + hidden;
            float p = expf(uform_warp_sum(q0 * k[lane] + q1 * k[lane + 32]) * 0.125f - lse);
            float ds = p * (uform_warp_sum(g0 * v[lane] + g1 * v[lane + 32]) - delta) * 0.125f;
            dq0 += ds * k[lane];
            dq1 += ds * k[lane + 32];
        }
        float *target = dqkv + r * stride + column;
        target[lane] += dq0;
        target[lane + 32] += dq1;
    }
}

/* dk and dv of key row j: warp per (row, head), queries of the segment in order. */
__global__ static void uform_attention_dkv_kernel(const float *qkv, const float *out, const float *dout,
                                                  const float *logsumexp, size_t hidden,
                                                  const uform_segment_t *segments, float *dqkv) {
    uform_segment_t segment = segments[blockIdx.x];
    size_t head = blockIdx.y, heads = gridDim.y, stride = 3 * hidden, lane = threadIdx.x % 32;
    size_t column = head * UFORM_HEAD_WIDTH;
    for (size_t j = threadIdx.x / 32; j < segment.length; j += UFORM_ATTENTION_WARPS) {
        size_t rj = segment.begin + j;
        const float *k = qkv + rj * stride + hidden + column, *v = k + hidden;
        float k0 = k[lane], k1 = k[lane + 32], v0 = v[lane], v1 = v[lane + 32];
        float dk0 = 0.0f, dk1 = 0.0f, dv0 = 0.0f, dv1 = 0.0f;
        for (size_t i = 0; i < segment.length; i++) {
            size_t r = segment.begin + i;
            const float *q = qkv + r * stride + column, *g = dout + r * hidden + column;
            const float *o = out + r * hidden + column;
            float g0 = g[lane], g1 = g[lane + 32];
            float delta = uform_warp_sum(g0 * o[lane] + g1 * o[lane + 32]);
            float p = expf(uform_warp_sum(q[lane] * k0 + q[lane + 32] * k1) * 0.125f -
                           logsumexp[r * heads + head]);
            float ds = p * (uform_warp_sum(g0 * v0 + g1 * v1) - delta) * 0.125f;
            dk0 += ds * q[lane];
            dk1 += ds * q[lane + 32];
            dv0 += p * g0;
            dv1 += p * g1;
        }
        float *target = dqkv + rj * stride + hidden + column;
        target[lane] += dk0;
        target[lane + 32] += dk1;
        target[hidden + lane] += dv0;
        target[hidden + lane + 32] += dv1;
    }
}

/* The backward from the kept BF16 q, k, v (attention_forward_train_bf16). */
void uform_cuda_attention_backward_bf16(uform_backend_t *b, const uint16_t *qkv16, const float *out,
                                        const float *dout, const float *logsumexp, size_t hidden,
                                        const uform_segment_t *segments, size_t count, size_t rows,
                                        size_t longest, float *dqkv) {
    if (!count || hidden < UFORM_HEAD_WIDTH) return;
    if (uform_attention_on_tensor_cores(b, qkv16, out, dout, dqkv)) {
        uform_cuda_attention_backward_mma_bf16(b, qkv16, out, dout, logsumexp, hidden, segments, count, rows,
                                               longest, dqkv);
        return;
    }
    float *widened = uform_attention_widened(b, qkv16, rows, hidden);
    if (widened) uform_cuda_attention_backward(b, widened, out, dout, logsumexp, hidden, segments, count, rows,
                                               longest, dqkv);
}

void uform_cuda_attention_backward(uform_backend_t *b, const float *qkv, const float *out, const float *dout,
                                   const float *logsumexp, size_t hidden, const uform_segment_t *segments,
                                   size_t count, size_t rows, size_t longest, float *dqkv) {
    if (!count || hidden < UFORM_HEAD_WIDTH) return;   /* no whole head: nothing to attend */
    if (uform_attention_on_tensor_cores(b, qkv, out, dout, dqkv)) {
        uform_cuda_attention_backward_mma(b, qkv, out, dout, logsumexp, hidden, segments, count, rows, longest, dqkv);
        return;
    }
    cudaStream_t stream = uform_cuda_context(b)->stream;
    dim3 grid((unsigned)count, (unsigned)(hidden / UFORM_HEAD_WIDTH));
    UFORM_LAUNCH(uform_attention_dq_kernel, grid, 32 * UFORM_ATTENTION_WARPS, stream)(qkv, out, dout, logsumexp, hidden,
                                                                             segments, dqkv);
    UFORM_LAUNCH(uform_attention_dkv_kernel, grid, 32 * UFORM_ATTENTION_WARPS, stream)(qkv, out, dout, logsumexp, hidden,
                                                                              segments, dqkv);
    uform_cuda_launched(b, "attention_backward");
}
