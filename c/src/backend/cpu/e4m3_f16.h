/* e4m3_f16.h: the first step of the x86 FP32 E4M3 decoding, shared by the
 * AVX2 tile decoder (e4m3_avx2.c) and the HASWELL and SKYLAKE kernels that
 * read E4M3 panels directly: 16 codes as the FP16 bits of value x 2^-8
 * (each code's exponent and mantissa moved under FP16's, subnormal codes
 * included), which VCVTPH2PS widens exactly (it ignores MXCSR.DAZ for its
 * FP16 inputs); one multiplication by 2^8 times the scale then gives the
 * decoded FP32 weight, the same bits on every path. */
#ifndef UFORM_CPU_E4M3_F16_H
#define UFORM_CPU_E4M3_F16_H

#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>

static inline __attribute__((always_inline, target("avx2,fma,f16c"))) __m256i
uform_e4m3_to_f16x16(const uint8_t *codes) {
    __m256i wide = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)codes));
    __m256i shifted = _mm256_srai_epi16(_mm256_slli_epi16(wide, 8), 1);
    return _mm256_and_si256(shifted, _mm256_set1_epi16((short)0xbfff));
}

#endif
#endif /* UFORM_CPU_E4M3_F16_H */
