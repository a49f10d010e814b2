/* attention.c: one head of attention in portable C (the SERIAL and HASWELL
 * classes). Keys are transposed once, so scores are computed as 4 x 16 tiles
 * whose loops the compiler vectorises without reassociating anything, and
 * target_clones gives AVX2 machines wide vectors; every output is the same
 * chain of operations wherever it sits. */
#include "core/fast_exp.h"
#include "backend/cpu/kernels.h"

#include <math.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(UFORM_NO_CLONES)
#define UFORM_ATTENTION_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define UFORM_ATTENTION_CLONES
#endif


/* Scores of 4 queries against 16 keys: a tile the compiler keeps in vector
 * registers, each score one chain over d in order. */
#define UFORM_PORTABLE_QUERIES 4
#define UFORM_PORTABLE_KEYS 16

UFORM_ATTENTION_CLONES
void uform_attention_portable(const float *q, const float *k, const float *v, size_t stride,
                              size_t n, size_t first, size_t last, float *out, size_t out_stride,
                              float *scratch) {
    size_t padded = (n + 15) & ~(size_t)15;
    float *kt = scratch;                                        /* [64][padded] */
    float *scores = kt + UFORM_HEAD_WIDTH * padded;             /* [4][padded] */
    for (size_t j = 0; j < padded; j++)
        for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++)
            kt[d * padded + j] = j < n ? k[j * stride + d] : 0.0f;

    for (size_t i0 = first; i0 < last; i0 += UFORM_PORTABLE_QUERIES) {
        size_t rows = last - i0 < UFORM_PORTABLE_QUERIES ? last - i0 : UFORM_PORTABLE_QUERIES;
        float queries[UFORM_PORTABLE_QUERIES][UFORM_HEAD_WIDTH];
        for (size_t r = 0; r < UFORM_PORTABLE_QUERIES; r++)
            for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++)
                queries[r][d] = r < rows ? q[(i0 + r) * stride + d] : 0.0f;
        for (size_t j0 = 0; j0 < padded; j0 += UFORM_PORTABLE_KEYS) {
            float acc[UFORM_PORTABLE_QUERIES][UFORM_PORTABLE_KEYS] = {{0}};
            for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++) {
                const float *keys = kt + d * padded + j0;
                for (size_t r = 0; r < UFORM_PORTABLE_QUERIES; r++)
                    for (size_t c = 0; c < UFORM_PORTABLE_KEYS; c++) acc[r][c] += queries[r][d] * keys[c];
            }
            for (size_t r = 0; r < UFORM_PORTABLE_QUERIES; r++)
                for (size_t c = 0; c < UFORM_PORTABLE_KEYS; c++)
                    scores[r * padded + j0 + c] = acc[r][c] * 0.125f; /* 1/sqrt(head width) */
        }
        float inverse[UFORM_PORTABLE_QUERIES];
        for (size_t r = 0; r < rows; r++) {
            float *row = scores + r * padded;
            float top = -INFINITY;
            for (size_t j = 0; j < n; j++) top = row[j] > top ? row[j] : top;
            float partial[UFORM_LANES] = {0};
            for (size_t j = 0; j < padded; j += UFORM_LANES)
                for (size_t l = 0; l < UFORM_LANES; l++) {
                    float e = j + l < n ? uform_fast_exp(row[j + l] - top) : 0.0f;
                    row[j + l] = e;
                    partial[l] += e;
                }
            float total = 0;
            for (size_t l = 0; l < UFORM_LANES; l++) total += partial[l];
            inverse[r] = 1.0f / total;
        }
        float accumulated[UFORM_PORTABLE_QUERIES][UFORM_HEAD_WIDTH] = {{0}};
        for (size_t j = 0; j < n; j++) {
            const float *value = v + j * stride;
            for (size_t r = 0; r < UFORM_PORTABLE_QUERIES; r++) {
                float p = scores[r * padded + j];
                for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++) accumulated[r][d] += p * value[d];
            }
        }
        for (size_t r = 0; r < rows; r++) {
            float *row = out + (i0 + r) * out_stride;
            for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++) row[d] = accumulated[r][d] * inverse[r];
        }
    }
}
