/* fast_exp.h: the one exp approximation of the forward pass (softmax, GELU),
 * scalar for code the compiler vectorises and AVX-512 for hand-written
 * kernels; both the same Cody-Waite reduction and degree-6 polynomial (Cephes
 * expf), about 2 ulp on [-87, 88]. Inputs are clamped to that range, so below
 * e^-87 the result is ~1.6e-38 rather than 0: far under any stated tolerance. */
#ifndef UFORM_FAST_EXP_H
#define UFORM_FAST_EXP_H

#include <stdint.h>
#include <string.h>

#define UFORM_EXP_LOW (-87.0f)
#define UFORM_EXP_HIGH 88.0f
#define UFORM_EXP_LOG2E 1.44269504088896341f
#define UFORM_EXP_LN2_HIGH 0.693359375f   /* exact in few bits: n * it is exact */
#define UFORM_EXP_LN2_LOW (-2.12194440e-4f)
#define UFORM_EXP_P0 1.9875691500e-4f
#define UFORM_EXP_P1 1.3981999507e-3f
#define UFORM_EXP_P2 8.3334519073e-3f
#define UFORM_EXP_P3 4.1665795894e-2f
#define UFORM_EXP_P4 1.6666665459e-1f
#define UFORM_EXP_P5 5.0000001201e-1f

/* Branch-free, so loops over it vectorise. The power of two is built from the
 * bits of the rounded sum, in unsigned arithmetic, never from a float-to-int
 * conversion: a NaN input (a diverged step) then flows through as NaN instead of
 * being converted and shifted, which is undefined behaviour UBSan caught. */
static inline float uform_fast_exp(float x) {
    if (x < UFORM_EXP_LOW) x = UFORM_EXP_LOW;
    if (x > UFORM_EXP_HIGH) x = UFORM_EXP_HIGH;
    const float round_magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to integer */
    float shifted = x * UFORM_EXP_LOG2E + round_magic;
    float n = shifted - round_magic;
    float r = x - n * UFORM_EXP_LN2_HIGH;
    r = r - n * UFORM_EXP_LN2_LOW;
    float p = UFORM_EXP_P0;
    p = p * r + UFORM_EXP_P1;
    p = p * r + UFORM_EXP_P2;
    p = p * r + UFORM_EXP_P3;
    p = p * r + UFORM_EXP_P4;
    p = p * r + UFORM_EXP_P5;
    p = p * r * r + r + 1.0f;
    /* shifted is 1.5 * 2^23 + n exactly (its ulp is 1), so its low bits are n */
    uint32_t shifted_bits;
    memcpy(&shifted_bits, &shifted, sizeof(shifted_bits));
    uint32_t exponent = (shifted_bits - 0x4B400000u + 127u) << 23;
    float scale;
    memcpy(&scale, &exponent, sizeof(scale));
    return p * scale;
}

#if defined(__x86_64__)
#include <immintrin.h>

static inline __attribute__((always_inline, target("avx512f"))) __m512 uform_fast_exp512(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(UFORM_EXP_LOW));
    x = _mm512_min_ps(x, _mm512_set1_ps(UFORM_EXP_HIGH));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(UFORM_EXP_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(UFORM_EXP_LN2_HIGH), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(UFORM_EXP_LN2_LOW), r);
    __m512 p = _mm512_set1_ps(UFORM_EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(UFORM_EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(UFORM_EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(UFORM_EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(UFORM_EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(UFORM_EXP_P5));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    __m512i exponent = _mm512_slli_epi32(
        _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(exponent));
}
#endif

#endif /* UFORM_FAST_EXP_H */
