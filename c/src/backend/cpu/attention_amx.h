/* attention_amx.h: one head of attention with its two products on AMX tiles
 * (the AMX class, amx.c; tests/c/test_kernels.c builds it again over the
 * emulated tiles of amx_kernel.h). SAPPHIRE's arithmetic otherwise
 * (attention_bf16.h): queries, keys, probabilities and values rounded to BF16
 * (nearest, ties to even), products summed in FP32, the softmax in FP32.
 *
 * Per block of 16 queries (an A tile: 16 rows of 32 BF16 of d, two steps for
 * the head's 64): scores against 64 keys at a time into four sum tiles, the
 * keys' pairs along d as B tiles (16 pair rows of 16 keys: kp's rows, padded
 * words apart); then the probabilities (an A tile: 16 rows of 16 token pairs)
 * against the values' pairs along j (B tiles: 16 pair rows of 16 of d) into
 * four sum tiles of the 64 outputs, over the item's tokens in steps of 32.
 * The 1/8 of the scores is folded into the queries before their rounding (a
 * power of two: the same BF16, products and sums, scaled). Every output is a
 * fixed chain of tile steps over d, then over tokens in order, whatever the
 * query's row in a tile: results never depend on the batch around an item.
 * Tokens are padded to 32 (whole tile steps) with zero keys and values, whose
 * probabilities the softmax writes as 0. */
#ifndef UFORM_CPU_ATTENTION_AMX_H
#define UFORM_CPU_ATTENTION_AMX_H

#if defined(__x86_64__)
#include "backend/cpu/amx_kernel.h"
#include "backend/cpu/attention_bf16.h"

#define UFORM_AMX_QUERIES 16

/* Tiles of the score product: sums 0-3, the query's two d steps 4 and 5, keys
 * 6 and 7. Of the value product: sums 0-3, probabilities 4, values 6 and 7. */

/* One d step of the scores: query tile A (4: d pairs 0-15, 5: 16-31)
 * against the keys' pair rows from `keys`, into sum tiles 0 to TILES - 1. */
#define UFORM_AMX_SCORE_STEP(A, keys, TILES)                                                    \
    do {                                                                                        \
        UFORM_AMX_LOAD(6, (keys), key_bytes);                                                   \
        UFORM_AMX_DP(0, A, 6);                                                                  \
        UFORM_AMX_LOAD(7, (keys) + 16, key_bytes);                                              \
        UFORM_AMX_DP(1, A, 7);                                                                  \
        if ((TILES) > 2) {                                                                      \
            UFORM_AMX_LOAD(6, (keys) + 32, key_bytes);                                          \
            UFORM_AMX_DP(2, A, 6);                                                              \
            UFORM_AMX_LOAD(7, (keys) + 48, key_bytes);                                          \
            UFORM_AMX_DP(3, A, 7);                                                              \
        }                                                                                       \
    } while (0)

/* Scores of the A tiles 4 and 5 against keys [j0, j0 + 16 TILES) into
 * scores + j0 (rows `padded` floats apart). TILES is 4 or 2. */
#define UFORM_AMX_SCORES(TILES)                                                                 \
    do {                                                                                        \
        const uint32_t *keys = kp + j0;                                                         \
        size_t key_bytes = padded * sizeof(uint32_t);                                           \
        UFORM_AMX_ZERO(0);                                                                      \
        UFORM_AMX_ZERO(1);                                                                      \
        if ((TILES) > 2) {                                                                      \
            UFORM_AMX_ZERO(2);                                                                  \
            UFORM_AMX_ZERO(3);                                                                  \
        }                                                                                       \
        UFORM_AMX_SCORE_STEP(4, keys, TILES);                                                   \
        UFORM_AMX_SCORE_STEP(5, keys + 16 * padded, TILES); /* d pairs 16-31 */                 \
        size_t score_bytes = padded * sizeof(float);                                            \
        UFORM_AMX_STORE(0, scores + j0, score_bytes);                                           \
        UFORM_AMX_STORE(1, scores + j0 + 16, score_bytes);                                      \
        if ((TILES) > 2) {                                                                      \
            UFORM_AMX_STORE(2, scores + j0 + 32, score_bytes);                                  \
            UFORM_AMX_STORE(3, scores + j0 + 48, score_bytes);                                  \
        }                                                                                       \
    } while (0)

/* The kernels.h attention contract. scratch, 32-bit words: kp [32][padded],
 * vp [padded / 2][64], scores (FP32) [16][padded], probabilities
 * [16][padded / 2], queries [16][32], outputs (FP32) [16][64]: at most
 * uform_attention_scratch_floats(n). */
static UFORM_AMX_TARGET void uform_attention_amx(const float *q, const float *k, const float *v,
                                                 size_t stride, size_t n, size_t first,
                                                 size_t last, float *out, size_t out_stride,
                                                 float *scratch) {
    size_t padded = (n + 31) & ~(size_t)31, half = padded / 2;
    uint32_t *kp = (uint32_t *)scratch;
    uint32_t *vp = kp + UFORM_PAIRS * padded;
    float *scores = (float *)(vp + half * UFORM_HEAD_WIDTH);
    uint32_t *probabilities = (uint32_t *)(scores + UFORM_AMX_QUERIES * padded);
    uint32_t *queries = probabilities + UFORM_AMX_QUERIES * half;
    float *outputs = (float *)(queries + UFORM_AMX_QUERIES * UFORM_PAIRS);
    float inverse[UFORM_AMX_QUERIES];

    uform_bf16_pack_keys_values(k, v, stride, n, padded, kp, vp);
    UFORM_AMX_CONFIGURE();
    const __m512 eighth = _mm512_set1_ps(0.125f); /* 1/sqrt(head width) */
    for (size_t i0 = first; i0 < last; i0 += UFORM_AMX_QUERIES) {
        size_t rows = last - i0 < UFORM_AMX_QUERIES ? last - i0 : UFORM_AMX_QUERIES;
        for (size_t r = 0; r < UFORM_AMX_QUERIES; r++) {
            _Alignas(64) float scaled[UFORM_HEAD_WIDTH];
            for (size_t c = 0; c < UFORM_HEAD_WIDTH; c += 16)
                _mm512_store_ps(scaled + c, r < rows ? _mm512_mul_ps(_mm512_loadu_ps(q + (i0 + r) * stride + c), eighth)
                                                     : _mm512_setzero_ps());
            _mm512_storeu_si512(queries + r * UFORM_PAIRS, uform_bf16_pairs32(scaled));
            _mm512_storeu_si512(queries + r * UFORM_PAIRS + 16, uform_bf16_pairs32(scaled + 32));
        }
        /* rows past the block's: finite zeros, whose sums no one keeps */
        if (rows < UFORM_AMX_QUERIES)
            memset(probabilities + rows * half, 0, (UFORM_AMX_QUERIES - rows) * half * sizeof(uint32_t));
        UFORM_AMX_MEMORY_BARRIER();
        UFORM_AMX_EMULATED_ROWS(rows);
        size_t query_bytes = UFORM_PAIRS * sizeof(uint32_t);
        UFORM_AMX_LOAD(4, queries, query_bytes);
        UFORM_AMX_LOAD(5, queries + 16, query_bytes);
        size_t j0 = 0;
        for (; j0 + 64 <= padded; j0 += 64) UFORM_AMX_SCORES(4);
        if (j0 < padded) UFORM_AMX_SCORES(2);
        UFORM_AMX_MEMORY_BARRIER();
        uform_bf16_softmax_tile(scores, rows, n, padded, UFORM_EXP_LOG2E, NULL, probabilities, inverse);
        UFORM_AMX_MEMORY_BARRIER();

        size_t probability_bytes = half * sizeof(uint32_t), value_bytes = UFORM_HEAD_WIDTH * sizeof(uint32_t);
        UFORM_AMX_ZERO(0);
        UFORM_AMX_ZERO(1);
        UFORM_AMX_ZERO(2);
        UFORM_AMX_ZERO(3);
        for (size_t j2 = 0; j2 < half; j2 += 16) {
            const uint32_t *values = vp + j2 * UFORM_HEAD_WIDTH;
            UFORM_AMX_LOAD(4, probabilities + j2, probability_bytes);
            UFORM_AMX_LOAD(6, values, value_bytes);
            UFORM_AMX_DP(0, 4, 6);
            UFORM_AMX_LOAD(7, values + 16, value_bytes);
            UFORM_AMX_DP(1, 4, 7);
            UFORM_AMX_LOAD(6, values + 32, value_bytes);
            UFORM_AMX_DP(2, 4, 6);
            UFORM_AMX_LOAD(7, values + 48, value_bytes);
            UFORM_AMX_DP(3, 4, 7);
        }
        size_t output_bytes = UFORM_HEAD_WIDTH * sizeof(float);
        UFORM_AMX_STORE(0, outputs, output_bytes);
        UFORM_AMX_STORE(1, outputs + 16, output_bytes);
        UFORM_AMX_STORE(2, outputs + 32, output_bytes);
        UFORM_AMX_STORE(3, outputs + 48, output_bytes);
        UFORM_AMX_MEMORY_BARRIER();
        for (size_t r = 0; r < rows; r++) {
            __m512 scale = _mm512_set1_ps(inverse[r]);
            for (size_t c = 0; c < UFORM_HEAD_WIDTH; c += 16)
                _mm512_storeu_ps(out + (i0 + r) * out_stride + c,
                                 _mm512_mul_ps(_mm512_load_ps(outputs + r * UFORM_HEAD_WIDTH + c), scale));
        }
    }
    UFORM_AMX_RELEASE();
}

#undef UFORM_AMX_SCORES
#undef UFORM_AMX_SCORE_STEP
#endif
#endif /* UFORM_CPU_ATTENTION_AMX_H */
