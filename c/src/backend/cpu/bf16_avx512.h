/* bf16_avx512.h: FP32 -> BF16 rounding in AVX-512, shared by the SAPPHIRE
 * GEMM and attention. Bit for bit uform_f32_to_bf16: round to nearest, ties
 * to even, NaN kept quiet (vcvtneps2bf16 would flush subnormals instead). */
#ifndef UFORM_CPU_BF16_AVX512_H
#define UFORM_CPU_BF16_AVX512_H

#if defined(__x86_64__)
#include <immintrin.h>

#define UFORM_SAPPHIRE_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")))

/* 16 floats (as bits) to 16 BF16. */
static inline __attribute__((always_inline)) UFORM_SAPPHIRE_TARGET __m256i
uform_bf16_round16(__m512i bits) {
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    rounded = _mm512_mask_or_epi32(rounded, nan, bits, _mm512_set1_epi32(0x00400000));
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(rounded, 16));
}

/* 32 consecutive floats to 16 words, each the BF16 pair (x[2i], x[2i+1]). */
static inline __attribute__((always_inline)) UFORM_SAPPHIRE_TARGET __m512i
uform_bf16_pairs32(const float *x) {
    __m256i low = uform_bf16_round16(_mm512_loadu_si512(x));
    __m256i high = uform_bf16_round16(_mm512_loadu_si512(x + 16));
    return _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
}

#endif
#endif /* UFORM_CPU_BF16_AVX512_H */
