/* attention_sve.c: one head of attention with SVE FMAs, vector-length
 * agnostic, FP32 throughout. Built with the baseline flags: the SVE code
 * carries its own target attribute.
 *
 * Keys are transposed once per call into kt[d][j] (padded with zeros to a
 * multiple of 16 tokens), so scores for 4 queries x 4 vectors of keys are a
 * register tile of 16 accumulators fed by by-element FMAs on the query's
 * lanes (svld1rq puts 4 of them in every 128-bit segment); tails of keys and
 * of the 64 dimensions are predicated, and a tile's width in vectors is a
 * constant per copy, so long vectors on short items waste nothing. Values are
 * then summed 4 queries x 4 vectors of dimensions at a time, the same way.
 * SVE types cannot be array elements, hence the named accumulators.
 *
 * Every score is the same chain of 64 FMAs in d order, every output the same
 * chain over j in order, and the softmax's sum the same 16 partial sums as
 * attention_neon.c (taken with 128-bit NEON, which never depends on the vector
 * length), with the same exp: results never depend on the batch around an
 * item and equal attention_neon.c's bit for bit at every vector length. */
#include "core/fast_exp.h"
#include "backend/cpu/kernels.h"

#if defined(__aarch64__)
#include <arm_neon.h>
#include <arm_sve.h>
#include <math.h>

#define UFORM_SVE __attribute__((target("+sve")))
#define UFORM_SVE_INLINE static inline __attribute__((always_inline, target("+sve")))
#define UFORM_SVE_QUERIES 4 /* queries per tile (scores and values) */

/* kt[d][j] = k_j[d] for j < padded, zero from n on; 4 x 4 blocks are
 * transposed in NEON registers (the same whatever the vector length). */
static void uform_transpose_keys_sve(const float *k, size_t stride, size_t n, size_t padded,
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

/* GCC's pre-RA scheduler would hoist the loads of all 4 lanes' steps ahead of
 * their FMAs and spill accumulators; an empty asm between steps keeps each
 * step's loads next to its FMAs (no effect on the arithmetic). */
#define UFORM_SVE_BARRIER() __asm__ volatile("" ::: "memory")

/* Tile helpers: accumulator a<r><c> belongs to query r and vector c; those
 * past the tile's rows or columns (constants once inlined) drop out. */
#define UFORM_SVE_ZEROS(a)                                                              \
    svfloat32_t a##0 = svdup_n_f32(0.0f), a##1 = svdup_n_f32(0.0f),                     \
                a##2 = svdup_n_f32(0.0f), a##3 = svdup_n_f32(0.0f)
#define UFORM_SVE_FMA(r, c, lane)                                                       \
    if ((r) < rows && (c) < columns)                                                    \
    a##r##c = svmla_lane_f32(a##r##c, x##c, b##r, lane)
#define UFORM_SVE_FMA_ROW(r, lane)                                                      \
    UFORM_SVE_FMA(r, 0, lane);                                                          \
    UFORM_SVE_FMA(r, 1, lane);                                                          \
    UFORM_SVE_FMA(r, 2, lane);                                                          \
    UFORM_SVE_FMA(r, 3, lane)
/* x<c> = the 4 vectors at `from` (predicates p<c>), then every FMA of one lane */
#define UFORM_SVE_STEP(from, lane)                                                      \
    do {                                                                                \
        const float *source = (from);                                                   \
        UFORM_SVE_BARRIER();                                                            \
        svfloat32_t x0 = svld1_f32(p0, source);                                         \
        svfloat32_t x1 = columns > 1 ? svld1_f32(p1, source + width) : x0;              \
        svfloat32_t x2 = columns > 2 ? svld1_f32(p2, source + 2 * width) : x0;          \
        svfloat32_t x3 = columns > 3 ? svld1_f32(p3, source + 3 * width) : x0;          \
        UFORM_SVE_FMA_ROW(0, lane);                                                     \
        UFORM_SVE_FMA_ROW(1, lane);                                                     \
        UFORM_SVE_FMA_ROW(2, lane);                                                     \
        UFORM_SVE_FMA_ROW(3, lane);                                                     \
    } while (0)
/* b<r> = 4 floats of row r at `from`, in every 128-bit segment */
#define UFORM_SVE_BROADCASTS(from, pitch)                                               \
    svfloat32_t b0 = svld1rq_f32(all, (from));                                          \
    svfloat32_t b1 = rows > 1 ? svld1rq_f32(all, (from) + (pitch)) : b0;                \
    svfloat32_t b2 = rows > 2 ? svld1rq_f32(all, (from) + 2 * (pitch)) : b0;            \
    svfloat32_t b3 = rows > 3 ? svld1rq_f32(all, (from) + 3 * (pitch)) : b0
#define UFORM_SVE_STORE(r, c, to, pitch, scale)                                         \
    if ((r) < rows && (c) < columns)                                                    \
    svst1_f32(p##c, (to) + (r) * (pitch) + (c) * width, svmul_n_f32_x(p##c, a##r##c, scale))
#define UFORM_SVE_STORE_ROW(r, to, pitch, scale)                                        \
    UFORM_SVE_STORE(r, 0, to, pitch, scale);                                            \
    UFORM_SVE_STORE(r, 1, to, pitch, scale);                                            \
    UFORM_SVE_STORE(r, 2, to, pitch, scale);                                            \
    UFORM_SVE_STORE(r, 3, to, pitch, scale)

/* scores[r][j0 .. j0 + columns * VL) = (q_r . k_j) / 8 for `rows` queries
 * q_r = q + r * stride (stores stop at padded): each accumulator one FMA
 * chain over d in order from +0. */
UFORM_SVE_INLINE void uform_score_tile_sve(const float *q, size_t stride, const float *kt,
                                           size_t padded, size_t j0, size_t rows, size_t columns,
                                           float *scores) {
    const size_t width = svcntw();
    const svbool_t all = svptrue_b32();
    const svbool_t p0 = svwhilelt_b32_u64(j0, padded), p1 = svwhilelt_b32_u64(j0 + width, padded);
    const svbool_t p2 = svwhilelt_b32_u64(j0 + 2 * width, padded);
    const svbool_t p3 = svwhilelt_b32_u64(j0 + 3 * width, padded);
    UFORM_SVE_ZEROS(a0);
    UFORM_SVE_ZEROS(a1);
    UFORM_SVE_ZEROS(a2);
    UFORM_SVE_ZEROS(a3);
    for (size_t d = 0; d < UFORM_HEAD_WIDTH; d += 4) {
        UFORM_SVE_BROADCASTS(q + d, stride);
        UFORM_SVE_STEP(kt + d * padded + j0, 0);
        UFORM_SVE_STEP(kt + (d + 1) * padded + j0, 1);
        UFORM_SVE_STEP(kt + (d + 2) * padded + j0, 2);
        UFORM_SVE_STEP(kt + (d + 3) * padded + j0, 3);
    }
    float *to = scores + j0;
    UFORM_SVE_STORE_ROW(0, to, padded, 0.125f); /* 1/sqrt(head width) */
    UFORM_SVE_STORE_ROW(1, to, padded, 0.125f);
    UFORM_SVE_STORE_ROW(2, to, padded, 0.125f);
    UFORM_SVE_STORE_ROW(3, to, padded, 0.125f);
}

/* out[r][dc .. dc + columns * VL) (stores stop at 64) = (sum_j p[r][j] v_j) *
 * inverse[r] for `rows` queries: each accumulator one FMA chain over
 * j = 0..n-1 in order from +0. p rows are padded apart, readable up to padded. */
UFORM_SVE_INLINE void uform_value_tile_sve(const float *p, size_t padded, size_t rows,
                                           size_t columns, const float *v, size_t stride,
                                           size_t n, size_t dc, const float *inverse, float *out,
                                           size_t out_stride) {
    const size_t width = svcntw();
    const svbool_t all = svptrue_b32();
    const svbool_t p0 = svwhilelt_b32_u64(dc, UFORM_HEAD_WIDTH);
    const svbool_t p1 = svwhilelt_b32_u64(dc + width, UFORM_HEAD_WIDTH);
    const svbool_t p2 = svwhilelt_b32_u64(dc + 2 * width, UFORM_HEAD_WIDTH);
    const svbool_t p3 = svwhilelt_b32_u64(dc + 3 * width, UFORM_HEAD_WIDTH);
    UFORM_SVE_ZEROS(a0);
    UFORM_SVE_ZEROS(a1);
    UFORM_SVE_ZEROS(a2);
    UFORM_SVE_ZEROS(a3);
    size_t j = 0;
    for (; j + 4 <= n; j += 4) {
        UFORM_SVE_BROADCASTS(p + j, padded);
        UFORM_SVE_STEP(v + j * stride + dc, 0);
        UFORM_SVE_STEP(v + (j + 1) * stride + dc, 1);
        UFORM_SVE_STEP(v + (j + 2) * stride + dc, 2);
        UFORM_SVE_STEP(v + (j + 3) * stride + dc, 3);
    }
    if (j < n) { /* the last 1-3 tokens: a 4-wide load stays inside the padded row */
        UFORM_SVE_BROADCASTS(p + j, padded);
        UFORM_SVE_STEP(v + j * stride + dc, 0);
        if (j + 1 < n) UFORM_SVE_STEP(v + (j + 1) * stride + dc, 1);
        if (j + 2 < n) UFORM_SVE_STEP(v + (j + 2) * stride + dc, 2);
    }
    float *to = out + dc;
    UFORM_SVE_STORE_ROW(0, to, out_stride, inverse[0]); /* inverse[r] read only for r < rows */
    UFORM_SVE_STORE_ROW(1, to, out_stride, inverse[1]);
    UFORM_SVE_STORE_ROW(2, to, out_stride, inverse[2]);
    UFORM_SVE_STORE_ROW(3, to, out_stride, inverse[3]);
}

/* Softmax of one row of n scores in place (zeros from n to padded); returns
 * 1 / sum. The sum is 16 partial sums, lane l taking tokens j = l (mod 16) in
 * order, then added in order l = 0..15: taken with NEON over the stored row,
 * exactly as attention_neon.c, since an SVE vector may hold 2+ such groups. */
static UFORM_SVE float uform_softmax_row_sve(float *row, size_t n, size_t padded) {
    const size_t width = svcntw();
    const svbool_t all = svptrue_b32();
    svfloat32_t top = svdup_n_f32(-INFINITY);
    for (size_t j = 0; j < n; j += width) { /* a maximum is exact: any grouping */
        svbool_t live = svwhilelt_b32_u64(j, n);
        top = svmax_f32_m(live, top, svld1_f32(live, row + j));
    }
    const float maximum = svmaxv_f32(all, top);
    for (size_t j = 0; j < padded; j += width) {
        svbool_t inside = svwhilelt_b32_u64(j, padded), live = svwhilelt_b32_u64(j, n);
        svfloat32_t e = uform_fast_exp_sve(inside, svsub_n_f32_x(inside, svld1_f32(inside, row + j),
                                                                 maximum));
        svst1_f32(inside, row + j, svsel_f32(live, e, svdup_n_f32(0.0f))); /* past the item: 0 */
    }
    float32x4_t total0 = vdupq_n_f32(0.0f), total1 = total0, total2 = total0, total3 = total0;
    for (size_t j = 0; j < padded; j += 16) {
        total0 = vaddq_f32(total0, vld1q_f32(row + j));
        total1 = vaddq_f32(total1, vld1q_f32(row + j + 4));
        total2 = vaddq_f32(total2, vld1q_f32(row + j + 8));
        total3 = vaddq_f32(total3, vld1q_f32(row + j + 12));
    }
    float lanes[16], sum = 0.0f;
    vst1q_f32(lanes, total0);
    vst1q_f32(lanes + 4, total1);
    vst1q_f32(lanes + 8, total2);
    vst1q_f32(lanes + 12, total3);
    for (size_t l = 0; l < 16; l++) sum += lanes[l];
    return 1.0f / sum;
}

/* A tile's height in queries or width in vectors, 1-4, as a constant per copy. */
#define UFORM_SVE_BY_COUNT(count, call)                                                 \
    switch (count) {                                                                    \
    case 1: call(1); break;                                                             \
    case 2: call(2); break;                                                             \
    case 3: call(3); break;                                                             \
    default: call(4); break;                                                            \
    }

/* Queries q .. q + rows (rows <= 4, a constant once inlined). */
UFORM_SVE_INLINE void uform_query_tile_sve(const float *q, const float *kt, const float *v,
                                           size_t stride, size_t n, size_t padded, size_t rows,
                                           float *scores, float *out, size_t out_stride) {
    const size_t width = svcntw(), span = 4 * width;
    float inverse[UFORM_SVE_QUERIES];
    size_t j0 = 0;
    for (; j0 + span <= padded; j0 += span)
        uform_score_tile_sve(q, stride, kt, padded, j0, rows, 4, scores);
    if (j0 < padded) {
#define UFORM_SVE_SCORES(columns)                                                       \
    uform_score_tile_sve(q, stride, kt, padded, j0, rows, columns, scores)
        UFORM_SVE_BY_COUNT((padded - j0 + width - 1) / width, UFORM_SVE_SCORES)
#undef UFORM_SVE_SCORES
    }
    for (size_t r = 0; r < rows; r++)
        inverse[r] = uform_softmax_row_sve(scores + r * padded, n, padded);
    for (size_t dc = 0; dc < UFORM_HEAD_WIDTH; dc += span) {
#define UFORM_SVE_VALUES(columns)                                                       \
    uform_value_tile_sve(scores, padded, rows, columns, v, stride, n, dc, inverse, out, out_stride)
        /* 4 vectors of dimensions up to 512-bit vectors; 2 or 1 beyond */
        size_t columns = (UFORM_HEAD_WIDTH - dc + width - 1) / width;
        UFORM_SVE_BY_COUNT(columns > 4 ? 4 : columns, UFORM_SVE_VALUES)
#undef UFORM_SVE_VALUES
    }
}

UFORM_SVE void uform_attention_sve(const float *q, const float *k, const float *v, size_t stride,
                                   size_t n, size_t first, size_t last, float *out,
                                   size_t out_stride, float *scratch) {
    size_t padded = (n + 15) & ~(size_t)15;
    float *kt = scratch;                                    /* [64][padded] */
    float *scores = kt + UFORM_HEAD_WIDTH * padded;         /* [4][padded] */
    uform_transpose_keys_sve(k, stride, n, padded, kt);
    for (size_t i0 = first; i0 < last; i0 += UFORM_SVE_QUERIES) {
        const float *queries = q + i0 * stride;
        float *rows_out = out + i0 * out_stride;
        /* one copy per tile height, so a short last tile does no wasted work */
#define UFORM_SVE_QUERY_TILE(rows)                                                      \
    uform_query_tile_sve(queries, kt, v, stride, n, padded, rows, scores, rows_out, out_stride)
        UFORM_SVE_BY_COUNT(last - i0 < UFORM_SVE_QUERIES ? last - i0 : UFORM_SVE_QUERIES,
                           UFORM_SVE_QUERY_TILE)
#undef UFORM_SVE_QUERY_TILE
    }
}

#endif
