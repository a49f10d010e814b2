/* attention.c: one head of attention in portable C (the SERIAL and HASWELL
 * classes). Lane-wise partial sums make the dot products vectorise without
 * reassociating anything, and target_clones gives AVX2/AVX-512 machines wide
 * vectors; every output is the same chain of operations wherever it sits. */
#include "kernels.h"

#include <math.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define UFORM_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define UFORM_VECTOR_CLONES
#endif

#define UFORM_HEAD_WIDTH 64
#define UFORM_LANES 16

/* exp(x) for the softmax (x <= 0): Cody-Waite reduction, degree-6 polynomial,
 * about 2 ulp, branch-free so it vectorises; below e^-87 it returns ~1e-38. */
static inline float uform_softmax_exp(float x) {
    if (x < -87.0f) x = -87.0f;
    const float round_magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to integer */
    float n = (x * 1.44269504088896341f + round_magic) - round_magic;
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t exponent = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &exponent, sizeof(scale));
    return p * scale;
}

UFORM_VECTOR_CLONES
void uform_attention_portable(const float *q, const float *k, const float *v, size_t stride,
                              size_t n, size_t first, size_t last, float *out, size_t out_stride,
                              float *scratch) {
    float *scores = scratch;
    for (size_t i = first; i < last; i++) {
        const float *query = q + i * stride;
        float top = -INFINITY;
        for (size_t j = 0; j < n; j++) {
            const float *key = k + j * stride;
            float partial[UFORM_LANES] = {0};
            for (size_t d = 0; d < UFORM_HEAD_WIDTH; d += UFORM_LANES)
                for (size_t l = 0; l < UFORM_LANES; l++) partial[l] += query[d + l] * key[d + l];
            float dot = 0;
            for (size_t l = 0; l < UFORM_LANES; l++) dot += partial[l];
            float score = dot * 0.125f; /* 1/sqrt(head width) */
            scores[j] = score;
            top = score > top ? score : top;
        }
        float total = 0;
        for (size_t j = 0; j < n; j++) {
            scores[j] = uform_softmax_exp(scores[j] - top);
            total += scores[j];
        }
        float accumulated[UFORM_HEAD_WIDTH] = {0};
        for (size_t j = 0; j < n; j++) {
            const float *value = v + j * stride;
            for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++) accumulated[d] += scores[j] * value[d];
        }
        float inverse = 1.0f / total;
        float *row = out + i * out_stride;
        for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++) row[d] = accumulated[d] * inverse;
    }
}
