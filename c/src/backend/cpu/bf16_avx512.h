/* bf16_avx512.h: FP32 -> BF16 rounding in AVX-512, shared by the SAPPHIRE
 * GEMM and attention. Bit for bit uform_f32_to_bf16: round to nearest, ties
 * to even, NaN kept quiet (vcvtneps2bf16 would flush subnormals instead). */
#ifndef UFORM_CPU_BF16_AVX512_H
#define UFORM_CPU_BF16_AVX512_H

#if defined(__x86_64__)
#include <immintrin.h>

#include "backend/cpu/transpose_avx512.h"

#define UFORM_SAPPHIRE_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")))

/* 16 floats (as bits) rounded in place: the BF16 is each word's high half. */
static inline __attribute__((always_inline)) UFORM_SAPPHIRE_TARGET __m512i
uform_bf16_round_high(__m512i bits) {
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_or_epi32(rounded, nan, bits, _mm512_set1_epi32(0x00400000));
}

/* 16 floats (as bits) to 16 BF16. */
static inline __attribute__((always_inline)) UFORM_SAPPHIRE_TARGET __m256i
uform_bf16_round16(__m512i bits) {
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(uform_bf16_round_high(bits), 16));
}

/* 32 consecutive floats (as bits, the first 16 in low) to 16 words, each the
 * BF16 pair (x[2i], x[2i+1]): the high halves of both rounded vectors in
 * order, one word permute. */
static inline __attribute__((always_inline)) UFORM_SAPPHIRE_TARGET __m512i
uform_bf16_pairs_of(__m512i low, __m512i high) {
    const __m512i high_halves = _mm512_set_epi16(
        63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33,
        31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    return _mm512_permutex2var_epi16(uform_bf16_round_high(low), high_halves,
                                     uform_bf16_round_high(high));
}

/* Whether any of 32 floats is subnormal: the one input vcvtne2ps2bf16 rounds
 * differently from uform_f32_to_bf16 (it flushes them to zero; NaN it quiets
 * the same way, and every other float it rounds to nearest even the same). */
static inline __attribute__((always_inline)) UFORM_SAPPHIRE_TARGET int
uform_bf16_any_subnormal(__m512 low, __m512 high) {
    /* |x| - 1 below 0x7fffff (unsigned) exactly for the subnormals */
    const __m512i magnitude = _mm512_set1_epi32(0x7fffffff), one = _mm512_set1_epi32(1);
    __m512i a = _mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(low), magnitude), one);
    __m512i b = _mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(high), magnitude), one);
    return _mm512_cmplt_epu32_mask(_mm512_min_epu32(a, b), _mm512_set1_epi32(0x7fffff)) != 0;
}

/* 32 consecutive floats to their 16 BF16 pairs: one vcvtne2ps2bf16 (its
 * words are exactly the pairs in order), the integer rounding where a
 * subnormal makes the instruction's answer differ. */
static inline __attribute__((always_inline)) UFORM_SAPPHIRE_TARGET __m512i
uform_bf16_pairs32(const float *x) {
    __m512 low = _mm512_loadu_ps(x), high = _mm512_loadu_ps(x + 16);
    if (__builtin_expect(uform_bf16_any_subnormal(low, high), 0))
        return uform_bf16_pairs_of(_mm512_castps_si512(low), _mm512_castps_si512(high));
    return (__m512i)_mm512_cvtne2ps_pbh(high, low);
}

/* 16 floats of row a and 16 of row b (as bits) to 16 BF16 pairs (a[i], b[i]). */
static inline __attribute__((always_inline)) UFORM_SAPPHIRE_TARGET __m512i
uform_bf16_interleave16(__m512i a, __m512i b) {
    __m512 fa = _mm512_castsi512_ps(a), fb = _mm512_castsi512_ps(b);
    if (__builtin_expect(uform_bf16_any_subnormal(fa, fb), 0))
        return _mm512_mask_blend_epi16((__mmask32)0xAAAAAAAAu,
                                       _mm512_srli_epi32(uform_bf16_round_high(a), 16),
                                       uform_bf16_round_high(b));
    /* the instruction gives a0..a15 b0..b15; the word permute interleaves them */
    const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                           23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(order, (__m512i)_mm512_cvtne2ps_pbh(fb, fa));
}

#endif
#endif /* UFORM_CPU_BF16_AVX512_H */
