/* attention_mma.cu: attention over packed segments on BF16 tensor cores
 * (mma.sync m16n8k16, FP32 accumulation: sm_80 and every later class),
 * flash-style: blocks of 64 queries and 64 keys in shared memory, the scores
 * never written to global memory. The math is attention.cu's:
 *
 *   forward:  s_ij = q_i . k_j / 8, lse_i = log sum_j exp s_ij, out_i = sum_j exp(s_ij - lse_i) v_j
 *   backward: D_i = dout_i . out_i, p_ij = exp(s_ij - lse_i), ds_ij = p_ij (dout_i . v_j - D_i) / 8,
 *             dq_i += sum_j ds_ij k_j, dk_j += sum_i ds_ij q_i, dv_j += sum_i p_ij dout_i
 *
 * Precision: q, k, v, dout, and the probabilities p and ds entering the second
 * product of each pair are rounded to BF16 (nearest even); every product
 * accumulates in FP32, and the softmax statistics (running maximum, sum,
 * log-sum-exp) and D are FP32. Exponentials are exp2 of scores pre-scaled by
 * log2(e) / 8, by the SFU's ex2.approx.ftz (uform_mma_exp2: below 2^-126, zero).
 *
 * Layout: a block of 4 warps holds one segment's tile of 64 rows of one head
 * (the forward: two tiles, 128 rows, where segments span more than one);
 * warp w owns rows 16w .. 16w + 15 of each, as mma's A operand (16 x 16 per
 * instruction); the other operand is a 64 x 64 tile in shared memory, always
 * row-major (a row of q, k, v or dout), read as B (16 x 8 per instruction) by
 * ldmatrix.x4 (two instructions' B at once), with .trans where the product
 * runs down the tile's rows (p v, ds k, p^T dout, ds^T q). The tiles the inner
 * loops walk are double-buffered: the next is fetched (cp.async, from BF16
 * copies of qkv and dout made once per call when a segment spans more than
 * one tile) while the current one is multiplied. With g = lane / 4 and
 * t = 2 (lane % 4) (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating
 * point type"):
 *   A registers 0-3: (row g, columns t, t+1), (g+8, t..), (g, t+8..), (g+8, t+8..)
 *   B registers 0-1: (k rows t, t+1 of column g), (k rows t+8, t+9 of column g)
 *   C floats 0-3:    (row g, columns t, t+1), (row g+8, columns t, t+1)
 * so an accumulator of 16 x 64 scores (8 C tiles) is, packed in pairs, the A
 * operand of the next product without leaving registers.
 *
 * No atomics: the forward and dq walk a query tile's keys in order, dk and dv
 * a key tile's queries in order, so each output is one fixed chain whatever
 * the launch geometry (a segment's results do not depend on the batch around
 * it). dq and (dk, dv) are two kernels, each recomputing the scores: 7
 * products per pair of tiles instead of FlashAttention-2's 5 with atomic dq.
 *
 * Run on an H200 (tests/gpu/test_cuda_ops.c, 2026-12-04): the first version
 * (32-bit shared loads, a transposed copy of the tiles read down their rows,
 * synchronous loads) in the first session with a GPU; this one (the grid by
 * the longest segment, D handed from dq to dk, dv, the BF16 staging,
 * ldmatrix, cp.async double buffering, inference's rotary staging) in the
 * second, every check passing (bench/gpu_profile.py: the forward 4x
 * faster, dk, dv 6.6x). The kernels
 * (attention_mma.cuh) also run on the CPU in tests/c/test_attention_mma.cc,
 * under an emulation of a block's threads, shuffles and mma.sync, against
 * float64. attention.cu keeps the
 * simple FP32 kernels (the first version), which tests/gpu/test_cuda_ops.c
 * checks beside these on a GPU. */
#include "cuda_internal.h"

#ifndef UFORM_CUDA_EMULATION
#include <cuda_bf16.h>
#endif

#include "attention_mma.cuh"
#include "rope.cuh"

/* A block per (segment, head, tile of 64 rows of the longest segment): a
 * shorter segment's blocks past its tiles return at once. The first version
 * gave a (segment, head) a few blocks, each looping over many tiles: on an
 * H200 (2026-12-04) a batch's longest segment then ran alone for most of the
 * kernel's time, 2 ms a layer for the forward of 34k rows, 8 ms for dk, dv of
 * 32 rows of 1024 (bench/gpu_profile.py). Past the grid's 65535 the tiles
 * loop (UFORM_MMA_BLOCK_SPANS). */
static dim3 uform_attention_mma_grid(size_t count, size_t heads, size_t longest, size_t span = UFORM_MMA_TILE) {
    size_t tiles = (longest + span - 1) / span;
    return dim3((unsigned)count, (unsigned)heads, (unsigned)(tiles < 1 ? 1 : tiles > 65535 ? 65535 : tiles));
}

/* The forward takes 128 query rows a block (two groups: uform_mma_forward_tiles)
 * where the longest segment spans more than one tile of 64, unless a test or
 * benchmark asked for 64 (uform_cuda_attention_query_rows); the same bits
 * either way. The grid is by spans of the longest segment, as above. */
template <typename T, typename O>
static void uform_attention_forward_launch(uform_cuda_context_t *context, const T *qkv, size_t hidden,
                                           const uform_segment_t *segments, size_t count, size_t longest, O *out,
                                           float *logsumexp) {
    size_t heads = hidden / UFORM_HEAD_WIDTH;
    if (context->attention_query_rows != UFORM_MMA_TILE && longest > UFORM_MMA_TILE)
        UFORM_LAUNCH((uform_attention_forward_mma<T, O, 2>), uform_attention_mma_grid(count, heads, longest, 2 * UFORM_MMA_TILE),
                     UFORM_MMA_THREADS, context->stream)(qkv, hidden, segments, out, logsumexp);
    else
        UFORM_LAUNCH((uform_attention_forward_mma<T, O, 1>), uform_attention_mma_grid(count, heads, longest),
                     UFORM_MMA_THREADS, context->stream)(qkv, hidden, segments, out, logsumexp);
}

extern "C" void uform_cuda_attention_query_rows(uform_backend_t *b, size_t rows) {
    uform_cuda_context(b)->attention_query_rows = rows;
}

/* A segment longer than one tile has its keys and values loaded once per
 * query tile: then qkv is rounded to BF16 once, into the context's buffer,
 * and the kernel loads half the bytes and converts nothing (the same bits). */
/* Inference's staging (attention_forward_bf16): qkv [rows, 3H] into BF16
 * with q and k rotated as rope_forward rotates them (rope.cuh: the same
 * bits), v only rounded. A thread takes four pairs of a q or k head (two
 * 16-byte loads of the head's halves, its rows' cosines and sines) or four
 * values of v: 32 threads a head of q, k and v together, so no index is
 * divided per element. qkv, the tables and out 16-byte aligned. */
__global__ static void uform_rope_stage_bf16(const float *qkv, size_t rows, size_t hidden, const float *cosines,
                                             const float *sines, uint16_t *out) {
    const size_t heads = hidden / UFORM_HEAD_WIDTH, per_row = 32 * heads, rotating = 16 * heads;
    for (size_t index = (size_t)blockIdx.x * blockDim.x + threadIdx.x; index < rows * per_row;
         index += (size_t)gridDim.x * blockDim.x) {
        size_t r = index / per_row, t = index - r * per_row;
        const float *row = qkv + r * 3 * hidden;
        uint16_t *target = out + r * 3 * hidden;
        if (t < rotating) {   /* pairs 4p .. 4p + 3 of q or k head t / 8 */
            size_t column = (t / 8) * UFORM_HEAD_WIDTH + 4 * (t % 8), pair = 4 * (t % 8);
            float4 x0 = *(const float4 *)(row + column), x1 = *(const float4 *)(row + column + UFORM_PAIRS);
            float4 c = *(const float4 *)(cosines + r * UFORM_PAIRS + pair);
            float4 s = *(const float4 *)(sines + r * UFORM_PAIRS + pair);
            float2 a = uform_rope_turn(x0.x, x1.x, c.x, s.x), b = uform_rope_turn(x0.y, x1.y, c.y, s.y);
            float2 e = uform_rope_turn(x0.z, x1.z, c.z, s.z), f = uform_rope_turn(x0.w, x1.w, c.w, s.w);
            *(uint2 *)(target + column) = make_uint2(uform_bf16_pair(a.x, b.x), uform_bf16_pair(e.x, f.x));
            *(uint2 *)(target + column + UFORM_PAIRS) = make_uint2(uform_bf16_pair(a.y, b.y), uform_bf16_pair(e.y, f.y));
        } else {              /* v: four values */
            size_t column = 2 * hidden + 4 * (t - rotating);
            float4 v = *(const float4 *)(row + column);
            *(uint2 *)(target + column) = make_uint2(uform_bf16_pair(v.x, v.y), uform_bf16_pair(v.z, v.w));
        }
    }
}

void uform_cuda_attention_forward_mma_bf16(uform_backend_t *b, const float *qkv, size_t hidden,
                                           const uform_segment_t *segments, size_t count, size_t rows,
                                           size_t longest, const float *cosines, const float *sines,
                                           uint16_t *out) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    uint16_t *staged = (uint16_t *)uform_cuda_grow(b, &context->attention_bf16, rows * 3 * hidden * sizeof(uint16_t),
                                                   "attention's BF16 qkv");
    if (!staged) return;   /* recorded */
    UFORM_LAUNCH(uform_rope_stage_bf16, uform_cuda_blocks(rows * 32 * (hidden / UFORM_HEAD_WIDTH), 256), 256,
                 context->stream)(qkv, rows, hidden, cosines, sines, staged);
    uform_cuda_launched(b, "attention's BF16 qkv (rotated)");
    uform_attention_forward_launch(context, (const uint16_t *)staged, hidden, segments, count, longest, out,
                                   (float *)NULL);
    uform_cuda_launched(b, "attention_forward (tensor cores, BF16 out)");
}

/* linear_qkv_bf16's two ways (gemm.cu): qkv16 staged from the FP32 product
 * as above (the product in the context's scratch, 16-byte aligned), or the
 * product written in BF16 and its q and k rotated in place: a thread takes
 * four pairs of a q or k head, as the staging does, and v is not touched
 * (the pass reads and writes 4 of the 6 bytes a column the staging moved).
 * Not yet run on a GPU (2026-12-05; the emulation runs it). */
__global__ static void uform_rope_in_place_bf16(uint16_t *qkv16, size_t rows, size_t hidden, const float *cosines,
                                                const float *sines) {
    const size_t rotating = 16 * (hidden / UFORM_HEAD_WIDTH);
    for (size_t index = (size_t)blockIdx.x * blockDim.x + threadIdx.x; index < rows * rotating;
         index += (size_t)gridDim.x * blockDim.x) {
        size_t r = index / rotating, t = index - r * rotating;
        size_t column = (t / 8) * UFORM_HEAD_WIDTH + 4 * (t % 8), pair = 4 * (t % 8);
        uint16_t *row = qkv16 + r * 3 * hidden;
        uint2 first = *(const uint2 *)(row + column), second = *(const uint2 *)(row + column + UFORM_PAIRS);
        float4 c = *(const float4 *)(cosines + r * UFORM_PAIRS + pair);
        float4 s = *(const float4 *)(sines + r * UFORM_PAIRS + pair);
        float2 a = uform_rope_turn(uform_bf16_float((uint16_t)first.x), uform_bf16_float((uint16_t)second.x), c.x, s.x);
        float2 e = uform_rope_turn(uform_bf16_float((uint16_t)(first.x >> 16)),
                                   uform_bf16_float((uint16_t)(second.x >> 16)), c.y, s.y);
        float2 f = uform_rope_turn(uform_bf16_float((uint16_t)first.y), uform_bf16_float((uint16_t)second.y), c.z, s.z);
        float2 g = uform_rope_turn(uform_bf16_float((uint16_t)(first.y >> 16)),
                                   uform_bf16_float((uint16_t)(second.y >> 16)), c.w, s.w);
        *(uint2 *)(row + column) = make_uint2(uform_bf16_pair(a.x, e.x), uform_bf16_pair(f.x, g.x));
        *(uint2 *)(row + column + UFORM_PAIRS) = make_uint2(uform_bf16_pair(a.y, e.y), uform_bf16_pair(f.y, g.y));
    }
}

void uform_cuda_qkv_stage_bf16(uform_backend_t *b, const float *qkv, size_t rows, size_t hidden,
                               const float *cosines, const float *sines, uint16_t *qkv16) {
    UFORM_LAUNCH(uform_rope_stage_bf16, uform_cuda_blocks(rows * 32 * (hidden / UFORM_HEAD_WIDTH), 256), 256,
                 uform_cuda_context(b)->stream)(qkv, rows, hidden, cosines, sines, qkv16);
    uform_cuda_launched(b, "qkv staged in BF16 (rotated)");
}

void uform_cuda_rope_bf16_in_place(uform_backend_t *b, uint16_t *qkv16, size_t rows, size_t hidden,
                                   const float *cosines, const float *sines) {
    UFORM_LAUNCH(uform_rope_in_place_bf16, uform_cuda_blocks(rows * 16 * (hidden / UFORM_HEAD_WIDTH), 256), 256,
                 uform_cuda_context(b)->stream)(qkv16, rows, hidden, cosines, sines);
    uform_cuda_launched(b, "qkv's BF16 q and k rotated in place");
}

/* attention_forward_staged_bf16 on the tensor cores: the forward from rows
 * already rotated and rounded (16-byte aligned), out in BF16. */
void uform_cuda_attention_forward_mma_staged(uform_backend_t *b, const uint16_t *qkv16, size_t hidden,
                                             const uform_segment_t *segments, size_t count, size_t longest,
                                             uint16_t *out) {
    uform_attention_forward_launch(uform_cuda_context(b), qkv16, hidden, segments, count, longest, out,
                                   (float *)NULL);
    uform_cuda_launched(b, "attention_forward (tensor cores, from staged BF16 qkv)");
}

/* Training's forward with q, k, v kept in BF16 (attention_forward_train_bf16,
 * first run on an H100 (2026-12-05, the third session with a GPU: tests/gpu/, every check passing)): inference's staging (rotation and rounding, the same
 * bits as rope_forward then the BF16 copy below) into qkv16, which the
 * backward reads too, then the forward from it. */
void uform_cuda_attention_forward_mma_train(uform_backend_t *b, const float *qkv, size_t hidden,
                                            const uform_segment_t *segments, size_t count, size_t rows,
                                            size_t longest, const float *cosines, const float *sines,
                                            uint16_t *qkv16, float *out, float *logsumexp) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    UFORM_LAUNCH(uform_rope_stage_bf16, uform_cuda_blocks(rows * 32 * (hidden / UFORM_HEAD_WIDTH), 256), 256,
                 context->stream)(qkv, rows, hidden, cosines, sines, qkv16);
    uform_cuda_launched(b, "attention's BF16 qkv (rotated, kept)");
    if (!count) return;
    uform_attention_forward_launch(context, (const uint16_t *)qkv16, hidden, segments, count, longest, out,
                                   logsumexp);
    uform_cuda_launched(b, "attention_forward (tensor cores, from kept BF16 qkv)");
}

void uform_cuda_attention_forward_mma(uform_backend_t *b, const float *qkv, size_t hidden,
                                      const uform_segment_t *segments, size_t count, size_t rows, size_t longest,
                                      float *out, float *logsumexp) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    if (longest > UFORM_MMA_TILE) {
        const uint16_t *staged = uform_cuda_bf16_copy(b, &context->attention_bf16, qkv, 3 * hidden, rows, 3 * hidden);
        if (!staged) return;   /* recorded */
        uform_attention_forward_launch(context, staged, hidden, segments, count, longest, out, logsumexp);
    } else {
        uform_attention_forward_launch(context, qkv, hidden, segments, count, longest, out, logsumexp);
    }
    uform_cuda_launched(b, "attention_forward (tensor cores)");
}


/* D = dout . out per (row, head) goes from the dq kernel to the dk, dv one
 * through the context's buffer of rows x heads floats (the dk, dv kernel
 * otherwise recomputes it for each key tile: half of its loads). A segment
 * longer than one tile has its tiles fetched many times: then qkv and dout
 * are rounded to BF16 once, as in the forward. Each tile pair in `parts`
 * pieces, dq's blocks taking `dq_groups` query tiles and dk, dv's
 * `dkv_groups` key tiles (attention_mma.cuh: the same bits for every choice). */
template <typename T, int parts, int dq_groups, int dkv_groups = 1>
static void uform_attention_backward_parts(uform_backend_t *b, size_t count, size_t heads, size_t longest,
                                           const T *qkv_rows, const T *dout_rows, const float *out, const float *dout,
                                           const float *logsumexp, size_t hidden, const uform_segment_t *segments,
                                           float *dqkv, float *deltas) {
    cudaStream_t stream = uform_cuda_context(b)->stream;
    UFORM_LAUNCH((uform_attention_dq_mma<T, parts, dq_groups>),
                 uform_attention_mma_grid(count, heads, longest, dq_groups * UFORM_MMA_TILE), UFORM_MMA_THREADS,
                 stream)(qkv_rows, dout_rows, out, dout, logsumexp, hidden, segments, dqkv, deltas);
    uform_cuda_launched(b, "attention_backward dq (tensor cores)");
    UFORM_LAUNCH((uform_attention_dkv_mma<T, parts, dkv_groups>),
                 uform_attention_mma_grid(count, heads, longest, dkv_groups * UFORM_MMA_TILE), UFORM_MMA_THREADS,
                 stream)(qkv_rows, dout_rows, out, dout, logsumexp, hidden, segments, dqkv, deltas);
    uform_cuda_launched(b, "attention_backward dk, dv (tensor cores)");
}

/* The default: four parts, and dq 128 query rows a block (two groups a warp)
 * where the longest segment spans more than a tile, dk and dv 64 keys; the
 * tests' and the benchmark's other choices through
 * uform_cuda_attention_backward_parts (1, 2: dq 64 rows),
 * uform_cuda_attention_dq_rows (64) and uform_cuda_attention_dkv_rows (128,
 * with four parts and dq 128). */
template <typename T>
static void uform_attention_backward_launch(uform_backend_t *b, const T *qkv_rows, const T *dout_rows,
                                            const float *out, const float *dout, const float *logsumexp,
                                            size_t hidden, const uform_segment_t *segments, size_t count,
                                            size_t longest, float *dqkv, float *deltas) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    size_t heads = hidden / UFORM_HEAD_WIDTH;
    if (context->attention_backward_parts == 1)
        uform_attention_backward_parts<T, 1, 1>(b, count, heads, longest, qkv_rows, dout_rows, out, dout, logsumexp,
                                                hidden, segments, dqkv, deltas);
    else if (context->attention_backward_parts == 2)
        uform_attention_backward_parts<T, 2, 1>(b, count, heads, longest, qkv_rows, dout_rows, out, dout, logsumexp,
                                                hidden, segments, dqkv, deltas);
    else if (context->attention_dq_rows == UFORM_MMA_TILE || longest <= UFORM_MMA_TILE)
        uform_attention_backward_parts<T, 4, 1>(b, count, heads, longest, qkv_rows, dout_rows, out, dout, logsumexp,
                                                hidden, segments, dqkv, deltas);
    else if (context->attention_dkv_rows == 2 * UFORM_MMA_TILE)
        uform_attention_backward_parts<T, 4, 2, 2>(b, count, heads, longest, qkv_rows, dout_rows, out, dout,
                                                   logsumexp, hidden, segments, dqkv, deltas);
    else
        uform_attention_backward_parts<T, 4, 2>(b, count, heads, longest, qkv_rows, dout_rows, out, dout, logsumexp,
                                                hidden, segments, dqkv, deltas);
}

extern "C" void uform_cuda_attention_backward_parts(uform_backend_t *b, size_t parts) {
    uform_cuda_context(b)->attention_backward_parts = parts;
}

extern "C" void uform_cuda_attention_dq_rows(uform_backend_t *b, size_t rows) {
    uform_cuda_context(b)->attention_dq_rows = rows;
}

extern "C" void uform_cuda_attention_dkv_rows(uform_backend_t *b, size_t rows) {
    uform_cuda_context(b)->attention_dkv_rows = rows;
}

static float *uform_attention_deltas(uform_backend_t *b, size_t rows, size_t hidden) {
    return (float *)uform_cuda_grow(b, &uform_cuda_context(b)->attention_deltas,
                                    rows * (hidden / UFORM_HEAD_WIDTH) * sizeof(float) + 1, "attention's D");
}

void uform_cuda_attention_backward_mma(uform_backend_t *b, const float *qkv, const float *out, const float *dout,
                                       const float *logsumexp, size_t hidden, const uform_segment_t *segments,
                                       size_t count, size_t rows, size_t longest, float *dqkv) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    float *deltas = uform_attention_deltas(b, rows, hidden);
    if (!deltas) return;   /* recorded */
    if (longest > UFORM_MMA_TILE) {
        const uint16_t *qkv16 = uform_cuda_bf16_copy(b, &context->attention_bf16, qkv, 3 * hidden, rows, 3 * hidden);
        const uint16_t *dout16 = uform_cuda_bf16_copy(b, &context->attention_dout_bf16, dout, hidden, rows, hidden);
        if (!qkv16 || !dout16) return;   /* recorded */
        uform_attention_backward_launch(b, qkv16, dout16, out, dout, logsumexp, hidden, segments, count, longest,
                                        dqkv, deltas);
    } else {
        uform_attention_backward_launch(b, qkv, dout, out, dout, logsumexp, hidden, segments, count, longest, dqkv,
                                        deltas);
    }
}

/* The backward from the BF16 q, k, v the training forward kept (first run on
 * an H100, 2026-12-05): dout rounded once (the kernels read BF16 rows of both). */
void uform_cuda_attention_backward_mma_bf16(uform_backend_t *b, const uint16_t *qkv16, const float *out,
                                            const float *dout, const float *logsumexp, size_t hidden,
                                            const uform_segment_t *segments, size_t count, size_t rows,
                                            size_t longest, float *dqkv) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    float *deltas = uform_attention_deltas(b, rows, hidden);
    const uint16_t *dout16 = uform_cuda_bf16_copy(b, &context->attention_dout_bf16, dout, hidden, rows, hidden);
    if (!deltas || !dout16) return;   /* recorded */
    uform_attention_backward_launch(b, qkv16, dout16, out, dout, logsumexp, hidden, segments, count, longest, dqkv,
                                    deltas);
}
