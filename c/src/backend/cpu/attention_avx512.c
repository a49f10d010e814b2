/* attention_avx512.c: one head of attention with AVX-512 FMAs (the SKYLAKE
 * and SAPPHIRE classes), FP32 throughout.
 *
 * Keys are transposed once per call into kt[d][j] (padded with zeros to a
 * multiple of 16 tokens), so scores for 8 queries x 32 keys are a register
 * tile of 16 accumulators fed by one broadcast per query and two loads per d.
 * Values are then summed 4 queries x 64 dimensions at a time. Every score is
 * the same chain of 64 FMAs in d order and every output the same chain over j
 * in order, whatever the query's slot in a tile: results never depend on the
 * batch around an item. */
#include "core/fast_exp.h"
#include "backend/cpu/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>

#define UFORM_AVX512 __attribute__((target("avx512f,avx2,fma")))
#define UFORM_QUERY_TILE 8  /* queries per score tile */
#define UFORM_VALUE_TILE 4  /* queries per value tile */

/* scores[r][j] = (q_r . k_j) / 8 for 8 queries (zero rows past the item) and j
 * in [j0, j0 + 16 * vectors). */
static inline __attribute__((always_inline)) UFORM_AVX512 void
uform_score_tile(const float *queries, const float *kt, size_t padded, size_t j0, size_t vectors,
                 float *scores) {
    __m512 acc[UFORM_QUERY_TILE][2];
    for (size_t r = 0; r < UFORM_QUERY_TILE; r++)
        for (size_t c = 0; c < vectors; c++) acc[r][c] = _mm512_setzero_ps();
    for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++) {
        __m512 key[2];
        for (size_t c = 0; c < vectors; c++) key[c] = _mm512_load_ps(kt + d * padded + j0 + 16 * c);
        for (size_t r = 0; r < UFORM_QUERY_TILE; r++) {
            __m512 query = _mm512_set1_ps(queries[r * UFORM_HEAD_WIDTH + d]);
            for (size_t c = 0; c < vectors; c++) acc[r][c] = _mm512_fmadd_ps(query, key[c], acc[r][c]);
        }
    }
    const __m512 scale = _mm512_set1_ps(0.125f); /* 1/sqrt(head width) */
    for (size_t r = 0; r < UFORM_QUERY_TILE; r++)
        for (size_t c = 0; c < vectors; c++)
            _mm512_store_ps(scores + r * padded + j0 + 16 * c, _mm512_mul_ps(acc[r][c], scale));
}

/* Softmax of one row of n scores in place (n <= padded); returns 1 / sum. */
static UFORM_AVX512 float uform_softmax_row(float *row, size_t n, size_t padded) {
    __m512 top = _mm512_set1_ps(-INFINITY);
    size_t full = n & ~(size_t)15;
    __mmask16 tail = (__mmask16)((1u << (n - full)) - 1u);
    for (size_t j = 0; j < full; j += 16) top = _mm512_max_ps(top, _mm512_load_ps(row + j));
    if (tail) top = _mm512_mask_max_ps(top, tail, top, _mm512_load_ps(row + full));
    __m512 maximum = _mm512_set1_ps(_mm512_reduce_max_ps(top));
    __m512 total = _mm512_setzero_ps();
    for (size_t j = 0; j < padded; j += 16) {
        __m512 e = uform_fast_exp512(_mm512_sub_ps(_mm512_load_ps(row + j), maximum));
        if (j == full) e = _mm512_maskz_mov_ps(tail, e); /* tokens past the item weigh 0 */
        _mm512_store_ps(row + j, e);
        total = _mm512_add_ps(total, e);
    }
    /* a fixed-order horizontal sum: the same for every row */
    float lanes[16];
    _mm512_storeu_ps(lanes, total);
    float sum = 0;
    for (size_t l = 0; l < 16; l++) sum += lanes[l];
    return 1.0f / sum;
}

/* out rows of `rows` (<= 4) queries: sum_j p[r][j] v_j, times inverse[r]. */
static UFORM_AVX512 void uform_value_tile(const float *probabilities, size_t padded, size_t rows,
                                          const float *v, size_t stride, size_t n,
                                          const float *inverse, float *out, size_t out_stride) {
    __m512 acc[UFORM_VALUE_TILE][4];
    for (size_t r = 0; r < UFORM_VALUE_TILE; r++)
        for (size_t c = 0; c < 4; c++) acc[r][c] = _mm512_setzero_ps();
    for (size_t j = 0; j < n; j++) {
        const float *value = v + j * stride;
        __m512 v0 = _mm512_loadu_ps(value), v1 = _mm512_loadu_ps(value + 16);
        __m512 v2 = _mm512_loadu_ps(value + 32), v3 = _mm512_loadu_ps(value + 48);
        for (size_t r = 0; r < UFORM_VALUE_TILE; r++) {
            __m512 p = _mm512_set1_ps(probabilities[r * padded + j]);
            acc[r][0] = _mm512_fmadd_ps(p, v0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(p, v1, acc[r][1]);
            acc[r][2] = _mm512_fmadd_ps(p, v2, acc[r][2]);
            acc[r][3] = _mm512_fmadd_ps(p, v3, acc[r][3]);
        }
    }
    for (size_t r = 0; r < rows; r++) {
        __m512 scale = _mm512_set1_ps(inverse[r]);
        for (size_t c = 0; c < 4; c++)
            _mm512_storeu_ps(out + r * out_stride + 16 * c, _mm512_mul_ps(acc[r][c], scale));
    }
}

UFORM_AVX512 void uform_attention_avx512(const float *q, const float *k, const float *v,
                                         size_t stride, size_t n, size_t first, size_t last,
                                         float *out, size_t out_stride, float *scratch) {
    size_t padded = (n + 15) & ~(size_t)15;
    float *kt = scratch;                                       /* [64][padded] */
    float *scores = kt + UFORM_HEAD_WIDTH * padded;            /* [8][padded] */
    float *queries = scores + UFORM_QUERY_TILE * padded;       /* [8][64] */
    float inverse[UFORM_QUERY_TILE];

    for (size_t j = 0; j < padded; j++)
        for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++)
            kt[d * padded + j] = j < n ? k[j * stride + d] : 0.0f;

    for (size_t i0 = first; i0 < last; i0 += UFORM_QUERY_TILE) {
        size_t rows = last - i0 < UFORM_QUERY_TILE ? last - i0 : UFORM_QUERY_TILE;
        for (size_t r = 0; r < UFORM_QUERY_TILE; r++)
            for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++)
                queries[r * UFORM_HEAD_WIDTH + d] = r < rows ? q[(i0 + r) * stride + d] : 0.0f;
        size_t j0 = 0;
        for (; j0 + 32 <= padded; j0 += 32) uform_score_tile(queries, kt, padded, j0, 2, scores);
        if (j0 < padded) uform_score_tile(queries, kt, padded, j0, 1, scores);
        for (size_t r = 0; r < rows; r++) inverse[r] = uform_softmax_row(scores + r * padded, n, padded);
        for (size_t r = 0; r < rows; r += UFORM_VALUE_TILE) {
            size_t tile = rows - r < UFORM_VALUE_TILE ? rows - r : UFORM_VALUE_TILE;
            uform_value_tile(scores + r * padded, padded, tile, v, stride, n, inverse + r,
                             out + (i0 + r) * out_stride, out_stride);
        }
    }
}

#endif
