/* attention_bf16.c: one head of attention with AVX-512 BF16 dot products
 * (the SAPPHIRE class): like its GEMMs, products of BF16-rounded inputs
 * (queries, keys, probabilities, values; nearest, ties to even) summed in
 * FP32 by vdpbf16ps, two products per lane and instruction.
 *
 * Keys are packed once per call as pairs along d (kp[d/2][j] holds k_j[d],
 * k_j[d+1]) and values as pairs along j (vp[j/2][d] holds v_j[d], v_{j+1}[d]),
 * both zero-padded to a multiple of 16 tokens. Each score is one chain of 32
 * dot-pair steps in d order, each output one chain over token pairs in order,
 * whatever the query's slot in a tile: results never depend on the batch
 * around an item. The softmax runs in FP32, in base 2 (attention_bf16.h). */
#include "backend/cpu/attention_bf16.h"

#if defined(__x86_64__)

#define UFORM_BF16_TARGET UFORM_SAPPHIRE_TARGET
#define UFORM_QUERY_TILE 8
#define UFORM_VALUE_TILE 4

/* scores[r][j] = (q_r . k_j) log2(e) / 8 for 8 queries (pairs in `queries`) and j in
 * [j0, j0 + 16 * vectors). */
static inline __attribute__((always_inline)) UFORM_BF16_TARGET void
uform_bf16_score_tile(const uint32_t *queries, const uint32_t *kp, size_t padded, size_t j0,
                      size_t vectors, __mmask16 last_valid, float *scores, __m512 *top) {
    __m512 acc[UFORM_QUERY_TILE][2];
    for (size_t r = 0; r < UFORM_QUERY_TILE; r++)
        for (size_t c = 0; c < vectors; c++) acc[r][c] = _mm512_setzero_ps();
    for (size_t d2 = 0; d2 < UFORM_PAIRS; d2++) {
        __m512bh key[2];
        for (size_t c = 0; c < vectors; c++)
            key[c] = (__m512bh)_mm512_load_si512(kp + d2 * padded + j0 + 16 * c);
        for (size_t r = 0; r < UFORM_QUERY_TILE; r++) {
            __m512bh query = (__m512bh)_mm512_set1_epi32((int)queries[r * UFORM_PAIRS + d2]);
            for (size_t c = 0; c < vectors; c++) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], query, key[c]);
        }
    }
    /* 1/sqrt(head width), and log2 e: the softmax's base-2 units */
    const __m512 scale = _mm512_set1_ps(0.125f * UFORM_EXP_LOG2E);
    for (size_t r = 0; r < UFORM_QUERY_TILE; r++)
        for (size_t c = 0; c < vectors; c++) {
            __m512 scaled = _mm512_mul_ps(acc[r][c], scale);
            _mm512_store_ps(scores + r * padded + j0 + 16 * c, scaled);
            /* each row's running maximum over the item's scores (the last
             * vector's lanes past n left out) */
            top[r] = c + 1 < vectors ? _mm512_max_ps(top[r], scaled)
                                     : _mm512_mask_max_ps(top[r], last_valid, top[r], scaled);
        }
}

/* out rows of `rows` (<= 4) queries: sum over token pairs of p . v, times inverse[r]. */
static UFORM_BF16_TARGET void uform_bf16_value_tile(const uint32_t *probabilities, size_t half,
                                                    size_t rows, const uint32_t *vp,
                                                    const float *inverse, float *out,
                                                    size_t out_stride) {
    __m512 acc[UFORM_VALUE_TILE][4];
    for (size_t r = 0; r < UFORM_VALUE_TILE; r++)
        for (size_t c = 0; c < 4; c++) acc[r][c] = _mm512_setzero_ps();
    for (size_t j2 = 0; j2 < half; j2++) {
        const uint32_t *value = vp + j2 * UFORM_HEAD_WIDTH;
        __m512bh v0 = (__m512bh)_mm512_load_si512(value), v1 = (__m512bh)_mm512_load_si512(value + 16);
        __m512bh v2 = (__m512bh)_mm512_load_si512(value + 32), v3 = (__m512bh)_mm512_load_si512(value + 48);
        for (size_t r = 0; r < UFORM_VALUE_TILE; r++) {
            __m512bh p = (__m512bh)_mm512_set1_epi32((int)probabilities[r * half + j2]);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], p, v0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], p, v1);
            acc[r][2] = _mm512_dpbf16_ps(acc[r][2], p, v2);
            acc[r][3] = _mm512_dpbf16_ps(acc[r][3], p, v3);
        }
    }
    for (size_t r = 0; r < rows; r++) {
        __m512 scale = _mm512_set1_ps(inverse[r]);
        for (size_t c = 0; c < 4; c++)
            _mm512_storeu_ps(out + r * out_stride + 16 * c, _mm512_mul_ps(acc[r][c], scale));
    }
}

UFORM_BF16_TARGET void uform_attention_bf16(const float *q, const float *k, const float *v,
                                            size_t stride, size_t n, size_t first, size_t last,
                                            float *out, size_t out_stride, float *scratch) {
    size_t padded = (n + 15) & ~(size_t)15, half = padded / 2;
    /* scratch layout, 32-bit words: kp [32][padded], vp [padded/2][64],
     * scores (FP32) [8][padded], probabilities [8][padded/2], queries [8][32] */
    uint32_t *kp = (uint32_t *)scratch;
    uint32_t *vp = kp + UFORM_PAIRS * padded;
    float *scores = (float *)(vp + half * UFORM_HEAD_WIDTH);
    uint32_t *probabilities = (uint32_t *)(scores + UFORM_QUERY_TILE * padded);
    uint32_t *queries = probabilities + UFORM_QUERY_TILE * half;
    float inverse[UFORM_QUERY_TILE];

    uform_bf16_pack_keys_values(k, v, stride, n, padded, kp, vp);
    /* the lanes of the last vector of scores that hold tokens (n - 16 to n) */
    __mmask16 last_mask = (__mmask16)(n % 16 ? (1u << (n % 16)) - 1u : 0xffffu);

    for (size_t i0 = first; i0 < last; i0 += UFORM_QUERY_TILE) {
        size_t rows = last - i0 < UFORM_QUERY_TILE ? last - i0 : UFORM_QUERY_TILE;
        for (size_t r = 0; r < UFORM_QUERY_TILE; r++) {
            uint32_t *query = queries + r * UFORM_PAIRS;
            __m512i pairs_low = _mm512_setzero_si512(), pairs_high = _mm512_setzero_si512();
            if (r < rows) {
                pairs_low = uform_bf16_pairs32(q + (i0 + r) * stride);
                pairs_high = uform_bf16_pairs32(q + (i0 + r) * stride + 32);
            }
            _mm512_storeu_si512(query, pairs_low);
            _mm512_storeu_si512(query + 16, pairs_high);
        }
        /* the scores and each row's maximum (the softmax's first pass, made
         * as the scores are) */
        __m512 top[UFORM_QUERY_TILE];
        for (size_t r = 0; r < UFORM_QUERY_TILE; r++) top[r] = _mm512_set1_ps(-INFINITY);
        size_t j0 = 0;
        for (; j0 + 32 <= padded; j0 += 32)
            uform_bf16_score_tile(queries, kp, padded, j0, 2, j0 + 32 < padded ? 0xffff : last_mask, scores, top);
        if (j0 < padded) uform_bf16_score_tile(queries, kp, padded, j0, 1, last_mask, scores, top);
        float maxima[UFORM_QUERY_TILE];
        for (size_t r = 0; r < UFORM_QUERY_TILE; r++) maxima[r] = _mm512_reduce_max_ps(top[r]);
        uform_bf16_softmax_tile(scores, rows, n, padded, 1.0f, maxima, probabilities, inverse);
        for (size_t r = 0; r < rows; r += UFORM_VALUE_TILE) {
            size_t tile = rows - r < UFORM_VALUE_TILE ? rows - r : UFORM_VALUE_TILE;
            uform_bf16_value_tile(probabilities + r * half, half, tile, vp, inverse + r,
                                  out + (i0 + r) * out_stride, out_stride);
        }
    }
}

#endif
