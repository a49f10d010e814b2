/* e4m3_avx2.c: the E4M3 tile decoders with AVX2 (e4m3_decode.h).
 *
 * Eight codes become eight FP32 with integer steps and one subtraction that
 * only ever sees normal numbers (so no MXCSR flush mode can change a bit):
 * the code's 7 magnitude bits are placed under the FP32 exponent and
 * mantissa, the exponent rebiased by 127 - 7. A subnormal code (exponent
 * field 0, value m 2^-9) is built as 2^-6 (1 + m/8) and 2^-6 subtracted,
 * which is exact. Then the scale (a power of two) and the sign. */
#include "backend/cpu/e4m3_decode.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define UFORM_E4M3_AVX2 __attribute__((target("avx2,fma")))

static inline __attribute__((always_inline)) UFORM_E4M3_AVX2 __m256
uform_e4m3_decode8(const uint8_t *codes, const float *scales) {
    __m256i code = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)codes));
    __m256i magnitude = _mm256_and_si256(code, _mm256_set1_epi32(0x7f));
    __m256i bits = _mm256_add_epi32(_mm256_slli_epi32(magnitude, 20),
                                    _mm256_set1_epi32(120 << 23));
    __m256i subnormal = _mm256_cmpeq_epi32(_mm256_and_si256(code, _mm256_set1_epi32(0x78)),
                                           _mm256_setzero_si256());
    bits = _mm256_add_epi32(bits, _mm256_and_si256(subnormal, _mm256_set1_epi32(1 << 23)));
    __m256 value = _mm256_sub_ps(_mm256_castsi256_ps(bits),
                                 _mm256_and_ps(_mm256_castsi256_ps(subnormal),
                                               _mm256_set1_ps(1.0f / 64.0f)));
    value = _mm256_mul_ps(value, _mm256_loadu_ps(scales));
    __m256i sign = _mm256_slli_epi32(_mm256_and_si256(code, _mm256_set1_epi32(0x80)), 24);
    return _mm256_or_ps(value, _mm256_castsi256_ps(sign));
}

UFORM_E4M3_AVX2 void uform_e4m3_decode_f32_avx2(const uint8_t *codes, size_t rows, size_t width,
                                                const float *scales, void *out) {
    float *dst = out;
    for (size_t r = 0; r < rows; r++, codes += width, dst += width)
        for (size_t i = 0; i < width; i += 8)
            _mm256_storeu_ps(dst + i, uform_e4m3_decode8(codes + i, scales + i));
}

UFORM_E4M3_AVX2 void uform_e4m3_decode_bf16_avx2(const uint8_t *codes, size_t rows, size_t width,
                                                 const float *scales, void *out) {
    uint16_t *dst = out;
    for (size_t r = 0; r < rows; r++, codes += width, dst += width)
        for (size_t i = 0; i < width; i += 8) {
            /* the high halves are the BF16 bits, exactly (4 significant bits) */
            __m256i high = _mm256_srli_epi32(
                _mm256_castps_si256(uform_e4m3_decode8(codes + i, scales + i)), 16);
            _mm_storeu_si128((__m128i *)(dst + i),
                             _mm_packus_epi32(_mm256_castsi256_si128(high),
                                              _mm256_extracti128_si256(high, 1)));
        }
}

#endif /* __x86_64__ */
