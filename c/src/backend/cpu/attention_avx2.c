/* attention_avx2.c: one head of attention with AVX2 FMAs (the HASWELL class),
 * FP32 throughout.
 *
 * Keys are transposed once per call into kt[d][j] (8 x 8 blocks in
 * registers; padded with zeros to a multiple of 16 tokens), so scores for 6
 * queries x 16 keys are a register tile of 12 accumulators fed by two key
 * loads and one broadcast per query per d. Values are then summed 6 queries x
 * 16 dimensions at a time, the same way.
 *
 * The arithmetic is attention_avx512.c's and attention_neon.c's, operation
 * for operation: every score one chain of 64 FMAs in d order from +0, scaled
 * by 1/8; the softmax's maximum exact, its exponentials uform_fast_exp256
 * (uform_fast_exp512 step for step), its sum 16 partial sums (lane l takes
 * tokens j = l mod 16 in order) added in order l = 0..15; every output one
 * FMA chain over j in order, times 1/sum. So HASWELL's attention equals
 * SKYLAKE's and NEON's bit for bit, and never depends on the batch around an
 * item or on the query's slot in a tile. Two passes over exact scores, not an
 * online (flash) softmax: rescaling partial sums would change those bits, and
 * at the model's contexts the transposed keys (64 x 4 bytes a token: 128 KB at
 * 512 tokens) and a tile's score rows (12 KB) already stay in L2 and L1. */
#include "core/fast_exp.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/avx2_transpose.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>

#define UFORM_AVX2 __attribute__((target("avx2,fma")))
#define UFORM_AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma")))
#define UFORM_AVX2_QUERIES 6 /* queries per tile (scores and values): 12 accumulators */

/* kt[d][j] = k_j[d] for j < padded, zero from n on; 8 x 8 blocks are
 * transposed in registers (a scalar copy costs a quarter of a task). */
UFORM_AVX2_INLINE void uform_transpose_8x8(const float *k, size_t stride, float *kt, size_t padded) {
    __m256 m[8];
    for (size_t r = 0; r < 8; r++) m[r] = _mm256_loadu_ps(k + r * stride);
    uform_avx2_transpose8(m);
    for (size_t d = 0; d < 8; d++) _mm256_store_ps(kt + d * padded, m[d]);
}

static UFORM_AVX2 void uform_transpose_keys_avx2(const float *k, size_t stride, size_t n, size_t padded,
                                                 float *kt) {
    size_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (size_t d = 0; d < UFORM_HEAD_WIDTH; d += 8)
            uform_transpose_8x8(k + j * stride + d, stride, kt + d * padded + j, padded);
    for (; j < padded; j++)
        for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++) kt[d * padded + j] = j < n ? k[j * stride + d] : 0.0f;
}

/* scores[r][j0 .. j0 + 16) = (q_r . k_j) / 8 for `rows` (a constant once
 * inlined) queries q_r = q + r * stride. */
UFORM_AVX2_INLINE void uform_score_tile_avx2(const float *q, size_t stride, const float *kt, size_t padded,
                                             size_t j0, size_t rows, float *scores) {
    __m256 acc[UFORM_AVX2_QUERIES][2];
    for (size_t r = 0; r < rows; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++) {
        __m256 k0 = _mm256_load_ps(kt + d * padded + j0), k1 = _mm256_load_ps(kt + d * padded + j0 + 8);
        for (size_t r = 0; r < rows; r++) {
            __m256 query = _mm256_broadcast_ss(q + r * stride + d);
            acc[r][0] = _mm256_fmadd_ps(query, k0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(query, k1, acc[r][1]);
        }
    }
    const __m256 scale = _mm256_set1_ps(0.125f); /* 1/sqrt(head width) */
    for (size_t r = 0; r < rows; r++) {
        _mm256_store_ps(scores + r * padded + j0, _mm256_mul_ps(acc[r][0], scale));
        _mm256_store_ps(scores + r * padded + j0 + 8, _mm256_mul_ps(acc[r][1], scale));
    }
}

/* All-ones in the lanes of the 8 tokens from j that lie inside the item. */
UFORM_AVX2_INLINE __m256 uform_live_lanes_avx2(size_t j, size_t n) {
    int live = j < n ? (n - j < 8 ? (int)(n - j) : 8) : 0;
    __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(live), lanes));
}

/* Softmax of one row of n scores in place (zeros from n to padded); returns 1 / sum. */
static UFORM_AVX2 float uform_softmax_row_avx2(float *row, size_t n, size_t padded) {
    __m256 top0 = _mm256_set1_ps(-INFINITY), top1 = top0;
    size_t full = n & ~(size_t)15;
    for (size_t j = 0; j < full; j += 16) { /* a maximum is exact: any grouping gives the same */
        top0 = _mm256_max_ps(top0, _mm256_load_ps(row + j));
        top1 = _mm256_max_ps(top1, _mm256_load_ps(row + j + 8));
    }
    float lanes[16];
    _mm256_storeu_ps(lanes, _mm256_max_ps(top0, top1));
    float maximum = lanes[0];
    for (size_t l = 1; l < 8; l++) maximum = lanes[l] > maximum ? lanes[l] : maximum;
    for (size_t j = full; j < n; j++) maximum = row[j] > maximum ? row[j] : maximum;
    const __m256 top = _mm256_set1_ps(maximum);
    __m256 total0 = _mm256_setzero_ps(), total1 = _mm256_setzero_ps();
    for (size_t j = 0; j < padded; j += 16) {
        __m256 e0 = uform_fast_exp256(_mm256_sub_ps(_mm256_load_ps(row + j), top));
        __m256 e1 = uform_fast_exp256(_mm256_sub_ps(_mm256_load_ps(row + j + 8), top));
        if (j + 16 > n) { /* tokens past the item weigh exactly 0 */
            e0 = _mm256_and_ps(e0, uform_live_lanes_avx2(j, n));
            e1 = _mm256_and_ps(e1, uform_live_lanes_avx2(j + 8, n));
        }
        _mm256_store_ps(row + j, e0);
        _mm256_store_ps(row + j + 8, e1);
        total0 = _mm256_add_ps(total0, e0);
        total1 = _mm256_add_ps(total1, e1);
    }
    _mm256_storeu_ps(lanes, total0);
    _mm256_storeu_ps(lanes + 8, total1);
    float sum = 0.0f;
    for (size_t l = 0; l < 16; l++) sum += lanes[l];
    return 1.0f / sum;
}

/* out[r][dc .. dc + 16) = (sum_j p[r][j] v_j) * inverse[r] for `rows` (a
 * constant once inlined) queries; p rows are padded floats apart. */
UFORM_AVX2_INLINE void uform_value_tile_avx2(const float *p, size_t padded, size_t rows, const float *v,
                                             size_t stride, size_t n, size_t dc, const float *inverse,
                                             float *out, size_t out_stride) {
    __m256 acc[UFORM_AVX2_QUERIES][2];
    for (size_t r = 0; r < rows; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (size_t j = 0; j < n; j++) {
        const float *value = v + j * stride + dc;
        __m256 v0 = _mm256_loadu_ps(value), v1 = _mm256_loadu_ps(value + 8);
        for (size_t r = 0; r < rows; r++) {
            __m256 probability = _mm256_broadcast_ss(p + r * padded + j);
            acc[r][0] = _mm256_fmadd_ps(probability, v0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(probability, v1, acc[r][1]);
        }
    }
    for (size_t r = 0; r < rows; r++) {
        __m256 scale = _mm256_set1_ps(inverse[r]);
        _mm256_storeu_ps(out + r * out_stride + dc, _mm256_mul_ps(acc[r][0], scale));
        _mm256_storeu_ps(out + r * out_stride + dc + 8, _mm256_mul_ps(acc[r][1], scale));
    }
}

/* Queries q .. q + rows (rows <= 6, a constant once inlined). */
UFORM_AVX2_INLINE void uform_query_tile_avx2(const float *q, const float *kt, const float *v, size_t stride,
                                             size_t n, size_t padded, size_t rows, float *scores, float *out,
                                             size_t out_stride) {
    float inverse[UFORM_AVX2_QUERIES];
    for (size_t j0 = 0; j0 < padded; j0 += 16) uform_score_tile_avx2(q, stride, kt, padded, j0, rows, scores);
    for (size_t r = 0; r < rows; r++) inverse[r] = uform_softmax_row_avx2(scores + r * padded, n, padded);
    for (size_t dc = 0; dc < UFORM_HEAD_WIDTH; dc += 16)
        uform_value_tile_avx2(scores, padded, rows, v, stride, n, dc, inverse, out, out_stride);
}

UFORM_AVX2 void uform_attention_avx2(const float *q, const float *k, const float *v, size_t stride, size_t n,
                                     size_t first, size_t last, float *out, size_t out_stride, float *scratch) {
    size_t padded = (n + 15) & ~(size_t)15;
    float *kt = scratch;                                    /* [64][padded] */
    float *scores = kt + UFORM_HEAD_WIDTH * padded;         /* [6][padded] */
    uform_transpose_keys_avx2(k, stride, n, padded, kt);
    for (size_t i0 = first; i0 < last; i0 += UFORM_AVX2_QUERIES) {
        const float *queries = q + i0 * stride;
        float *rows_out = out + i0 * out_stride;
        /* one copy per tile height, so a short last tile does no wasted work */
#define UFORM_AVX2_QUERY_TILE(rows) \
    uform_query_tile_avx2(queries, kt, v, stride, n, padded, rows, scores, rows_out, out_stride)
        switch (last - i0 < UFORM_AVX2_QUERIES ? last - i0 : UFORM_AVX2_QUERIES) {
        case 1: UFORM_AVX2_QUERY_TILE(1); break;
        case 2: UFORM_AVX2_QUERY_TILE(2); break;
        case 3: UFORM_AVX2_QUERY_TILE(3); break;
        case 4: UFORM_AVX2_QUERY_TILE(4); break;
        case 5: UFORM_AVX2_QUERY_TILE(5); break;
        default: UFORM_AVX2_QUERY_TILE(6); break;
        }
#undef UFORM_AVX2_QUERY_TILE
    }
}

#endif /* __x86_64__ */
