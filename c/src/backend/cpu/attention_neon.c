/* attention_neon.c: one head of attention with NEON FMAs (Armv8-A baseline),
 * FP32 throughout.
 *
 * Keys are transposed once per call into kt[d][j] (padded with zeros to a
 * multiple of 16 tokens), so scores for 4 queries x 16 keys are a register
 * tile of 16 accumulators fed by four key loads per d and by-element FMAs on
 * the query's lanes. Values are then summed 4 queries x 16 dimensions at a
 * time, the same way. Every score is the same chain of 64 FMAs in d order,
 * every output the same chain over j in order, and the softmax's sum the same
 * 16 partial sums as attention_avx512.c, whatever the query's slot in a tile:
 * results never depend on the batch around an item, and equal
 * attention_sve.c's bit for bit at every SVE vector length. */
#include "core/fast_exp.h"
#include "backend/cpu/kernels.h"

#if defined(__aarch64__)
#include <arm_neon.h>
#include <math.h>

#define UFORM_NEON_INLINE static inline __attribute__((always_inline))
#define UFORM_NEON_QUERIES 4 /* queries per tile (scores and values) */

/* GCC's pre-RA scheduler would hoist the loads of all 4 lanes' steps ahead of
 * their FMAs and run out of registers; an empty asm between steps keeps each
 * step's loads next to its FMAs (no effect on the arithmetic). */
#define UFORM_NEON_BARRIER() __asm__ volatile("" ::: "memory")

/* kt[d][j] = k_j[d] for j < padded, zero from n on; 4 x 4 blocks are
 * transposed in registers. */
static void uform_transpose_keys_neon(const float *k, size_t stride, size_t n, size_t padded,
                                      float *kt) {
    size_t j = 0;
    for (; j + 4 <= n; j += 4) {
        const float *k0 = k + j * stride, *k1 = k0 + stride, *k2 = k1 + stride, *k3 = k2 + stride;
        for (size_t d = 0; d < UFORM_HEAD_WIDTH; d += 4) {
            float32x4_t a = vld1q_f32(k0 + d), b = vld1q_f32(k1 + d);
            float32x4_t c = vld1q_f32(k2 + d), e = vld1q_f32(k3 + d);
            float64x2_t ab0 = vreinterpretq_f64_f32(vtrn1q_f32(a, b)); /* a0 b0 a2 b2 */
            float64x2_t ab1 = vreinterpretq_f64_f32(vtrn2q_f32(a, b)); /* a1 b1 a3 b3 */
            float64x2_t ce0 = vreinterpretq_f64_f32(vtrn1q_f32(c, e));
            float64x2_t ce1 = vreinterpretq_f64_f32(vtrn2q_f32(c, e));
            float *column = kt + d * padded + j;
            vst1q_f32(column, vreinterpretq_f32_f64(vtrn1q_f64(ab0, ce0)));
            vst1q_f32(column + padded, vreinterpretq_f32_f64(vtrn1q_f64(ab1, ce1)));
            vst1q_f32(column + 2 * padded, vreinterpretq_f32_f64(vtrn2q_f64(ab0, ce0)));
            vst1q_f32(column + 3 * padded, vreinterpretq_f32_f64(vtrn2q_f64(ab1, ce1)));
        }
    }
    for (; j < padded; j++)
        for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++)
            kt[d * padded + j] = j < n ? k[j * stride + d] : 0.0f;
}

/* scores[r][j0 .. j0 + 16) = (q_r . k_j) / 8 for `rows` (a constant once
 * inlined) queries q_r = q + r * stride: each accumulator one FMA chain over d
 * in order from +0. */
UFORM_NEON_INLINE void uform_score_tile_neon(const float *q, size_t stride, const float *kt,
                                             size_t padded, size_t j0, size_t rows,
                                             float *scores) {
    float32x4_t acc[UFORM_NEON_QUERIES][4];
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < 4; c++) acc[r][c] = vdupq_n_f32(0.0f);
    for (size_t d = 0; d < UFORM_HEAD_WIDTH; d += 4) {
        float32x4_t query[UFORM_NEON_QUERIES];
        for (size_t r = 0; r < rows; r++) query[r] = vld1q_f32(q + r * stride + d);
        /* the lane is an immediate, so the 4 steps of d are spelled out */
#define UFORM_NEON_SCORE_STEP(lane)                                                     \
    do {                                                                                \
        UFORM_NEON_BARRIER();                                                           \
        const float *key = kt + (d + (lane)) * padded + j0;                             \
        float32x4_t k0 = vld1q_f32(key), k1 = vld1q_f32(key + 4);                       \
        float32x4_t k2 = vld1q_f32(key + 8), k3 = vld1q_f32(key + 12);                  \
        for (size_t r = 0; r < rows; r++) {                                             \
            acc[r][0] = vfmaq_laneq_f32(acc[r][0], k0, query[r], lane);                 \
            acc[r][1] = vfmaq_laneq_f32(acc[r][1], k1, query[r], lane);                 \
            acc[r][2] = vfmaq_laneq_f32(acc[r][2], k2, query[r], lane);                 \
            acc[r][3] = vfmaq_laneq_f32(acc[r][3], k3, query[r], lane);                 \
        }                                                                               \
    } while (0)
        UFORM_NEON_SCORE_STEP(0);
        UFORM_NEON_SCORE_STEP(1);
        UFORM_NEON_SCORE_STEP(2);
        UFORM_NEON_SCORE_STEP(3);
#undef UFORM_NEON_SCORE_STEP
    }
    const float32x4_t scale = vdupq_n_f32(0.125f); /* 1/sqrt(head width) */
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < 4; c++)
            vst1q_f32(scores + r * padded + j0 + 4 * c, vmulq_f32(acc[r][c], scale));
}

/* Lanes of the vector at token j that lie inside the item (j < n). */
UFORM_NEON_INLINE uint32x4_t uform_live_lanes_neon(size_t j, size_t n) {
    const uint32_t lanes[4] = {0, 1, 2, 3};
    uint32_t live = j < n ? (n - j < 4 ? (uint32_t)(n - j) : 4u) : 0u;
    return vcltq_u32(vld1q_u32(lanes), vdupq_n_u32(live));
}

/* Softmax of one row of n scores in place (zeros from n to padded); returns
 * 1 / sum. The sum is 16 partial sums, lane l taking tokens j = l (mod 16) in
 * order, then added in order l = 0..15. */
static float uform_softmax_row_neon(float *row, size_t n, size_t padded) {
    const float32x4_t lowest = vdupq_n_f32(-INFINITY);
    float32x4_t top0 = lowest, top1 = lowest, top2 = lowest, top3 = lowest;
    size_t full = n & ~(size_t)15, j = 0;
    for (; j < full; j += 16) { /* a maximum is exact, so any grouping gives the same */
        top0 = vmaxq_f32(top0, vld1q_f32(row + j));
        top1 = vmaxq_f32(top1, vld1q_f32(row + j + 4));
        top2 = vmaxq_f32(top2, vld1q_f32(row + j + 8));
        top3 = vmaxq_f32(top3, vld1q_f32(row + j + 12));
    }
    for (; j < n; j += 4)
        top0 = vmaxq_f32(top0, vbslq_f32(uform_live_lanes_neon(j, n), vld1q_f32(row + j), lowest));
    const float32x4_t maximum =
        vdupq_n_f32(vmaxvq_f32(vmaxq_f32(vmaxq_f32(top0, top1), vmaxq_f32(top2, top3))));

    float32x4_t total[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f),
                            vdupq_n_f32(0.0f)};
    for (j = 0; j < padded; j += 16)
        for (size_t c = 0; c < 4; c++) {
            float32x4_t e = uform_fast_exp_neon(vsubq_f32(vld1q_f32(row + j + 4 * c), maximum));
            if (j + 16 > n) /* tokens past the item weigh exactly 0 */
                e = vreinterpretq_f32_u32(
                    vandq_u32(vreinterpretq_u32_f32(e), uform_live_lanes_neon(j + 4 * c, n)));
            vst1q_f32(row + j + 4 * c, e);
            total[c] = vaddq_f32(total[c], e);
        }
    float lanes[16], sum = 0.0f;
    for (size_t c = 0; c < 4; c++) vst1q_f32(lanes + 4 * c, total[c]);
    for (size_t l = 0; l < 16; l++) sum += lanes[l];
    return 1.0f / sum;
}

/* out[r][dc .. dc + 16) = (sum_j p[r][j] v_j) * inverse[r] for `rows` (a
 * constant once inlined) queries: each accumulator one FMA chain over j = 0..n-1
 * in order from +0. p rows are padded apart and readable up to padded. */
UFORM_NEON_INLINE void uform_value_tile_neon(const float *p, size_t padded, size_t rows,
                                             const float *v, size_t stride, size_t n, size_t dc,
                                             const float *inverse, float *out,
                                             size_t out_stride) {
    float32x4_t acc[UFORM_NEON_QUERIES][4];
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < 4; c++) acc[r][c] = vdupq_n_f32(0.0f);
    float32x4_t probability[UFORM_NEON_QUERIES];
#define UFORM_NEON_VALUE_STEP(lane)                                                     \
    do {                                                                                \
        UFORM_NEON_BARRIER();                                                           \
        const float *value = v + (j + (lane)) * stride + dc;                            \
        float32x4_t v0 = vld1q_f32(value), v1 = vld1q_f32(value + 4);                   \
        float32x4_t v2 = vld1q_f32(value + 8), v3 = vld1q_f32(value + 12);              \
        for (size_t r = 0; r < rows; r++) {                                             \
            acc[r][0] = vfmaq_laneq_f32(acc[r][0], v0, probability[r], lane);           \
            acc[r][1] = vfmaq_laneq_f32(acc[r][1], v1, probability[r], lane);           \
            acc[r][2] = vfmaq_laneq_f32(acc[r][2], v2, probability[r], lane);           \
            acc[r][3] = vfmaq_laneq_f32(acc[r][3], v3, probability[r], lane);           \
        }                                                                               \
    } while (0)
    size_t j = 0;
    for (; j + 4 <= n; j += 4) {
        for (size_t r = 0; r < rows; r++) probability[r] = vld1q_f32(p + r * padded + j);
        UFORM_NEON_VALUE_STEP(0);
        UFORM_NEON_VALUE_STEP(1);
        UFORM_NEON_VALUE_STEP(2);
        UFORM_NEON_VALUE_STEP(3);
    }
    if (j < n) { /* the last 1-3 tokens: a 4-wide load stays inside the padded row */
        for (size_t r = 0; r < rows; r++) probability[r] = vld1q_f32(p + r * padded + j);
        UFORM_NEON_VALUE_STEP(0);
        if (j + 1 < n) UFORM_NEON_VALUE_STEP(1);
        if (j + 2 < n) UFORM_NEON_VALUE_STEP(2);
    }
#undef UFORM_NEON_VALUE_STEP
    for (size_t r = 0; r < rows; r++) {
        float32x4_t scale = vdupq_n_f32(inverse[r]);
        for (size_t c = 0; c < 4; c++)
            vst1q_f32(out + r * out_stride + dc + 4 * c, vmulq_f32(acc[r][c], scale));
    }
}

/* Queries i0 .. i0 + rows (rows <= 4, a constant once inlined). */
UFORM_NEON_INLINE void uform_query_tile_neon(const float *q, const float *kt, const float *v,
                                             size_t stride, size_t n, size_t padded,
                                             size_t rows, float *scores, float *out,
                                             size_t out_stride) {
    float inverse[UFORM_NEON_QUERIES];
    for (size_t j0 = 0; j0 < padded; j0 += 16)
        uform_score_tile_neon(q, stride, kt, padded, j0, rows, scores);
    for (size_t r = 0; r < rows; r++)
        inverse[r] = uform_softmax_row_neon(scores + r * padded, n, padded);
    for (size_t dc = 0; dc < UFORM_HEAD_WIDTH; dc += 16)
        uform_value_tile_neon(scores, padded, rows, v, stride, n, dc, inverse, out, out_stride);
}

void uform_attention_neon(const float *q, const float *k, const float *v, size_t stride, size_t n,
                          size_t first, size_t last, float *out, size_t out_stride,
                          float *scratch) {
    size_t padded = (n + 15) & ~(size_t)15;
    float *kt = scratch;                                    /* [64][padded] */
    float *scores = kt + UFORM_HEAD_WIDTH * padded;         /* [4][padded] */
    uform_transpose_keys_neon(k, stride, n, padded, kt);
    for (size_t i0 = first; i0 < last; i0 += UFORM_NEON_QUERIES) {
        const float *queries = q + i0 * stride;
        float *rows_out = out + i0 * out_stride;
        /* one copy per tile height, so a short last tile does no wasted work */
#define UFORM_NEON_QUERY_TILE(rows)                                                     \
    uform_query_tile_neon(queries, kt, v, stride, n, padded, rows, scores, rows_out, out_stride)
        switch (last - i0 < UFORM_NEON_QUERIES ? last - i0 : UFORM_NEON_QUERIES) {
        case 1: UFORM_NEON_QUERY_TILE(1); break;
        case 2: UFORM_NEON_QUERY_TILE(2); break;
        case 3: UFORM_NEON_QUERY_TILE(3); break;
        default: UFORM_NEON_QUERY_TILE(4); break;
        }
#undef UFORM_NEON_QUERY_TILE
    }
}

#endif
