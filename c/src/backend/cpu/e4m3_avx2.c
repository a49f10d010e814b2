/* e4m3_avx2.c: the E4M3 tile decoders of the x86 classes (e4m3_decode.h),
 * with AVX2 and F16C, which every class but SERIAL has.
 *
 * An E4M3 code s.EEEE.mmm is an FP16 number once its exponent and mantissa
 * move under FP16's: s.0EEEE.mmm0000000 is the code's value times 2^-8,
 * subnormal codes included (E = 0: FP16 subnormals of the same digits). Moved
 * with integer steps (the code in a 16-bit lane's high byte, an arithmetic
 * shift right by one, a mask), widened by VCVTPH2PS, exact, which the SDM
 * says ignores MXCSR.DAZ for its FP16 inputs; then multiplied by 2^8 times
 * the power-of-two scale, which keeps every value a normal FP32 (quantize.h).
 * So no flush mode can change a bit. */
#include "backend/cpu/e4m3_decode.h"
#include "backend/cpu/e4m3_f16.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define UFORM_E4M3_AVX2 __attribute__((target("avx2,fma,f16c")))

/* 8 codes likewise in the low 128 bits. */
static inline __attribute__((always_inline)) UFORM_E4M3_AVX2 __m128i
uform_e4m3_to_f16x8(const uint8_t *codes) {
    __m128i wide = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)codes));
    __m128i shifted = _mm_srai_epi16(_mm_slli_epi16(wide, 8), 1);
    return _mm_and_si128(shifted, _mm_set1_epi16((short)0xbfff));
}

/* Decodes rows of `width` codes; `emit` stores 8 FP32 values at column i. */
#define UFORM_E4M3_DECODE_ROWS(emit)                                                        \
    float scaled[UFORM_E4M3_WIDTH_MAX];                                                     \
    for (size_t i = 0; i < width; i++) scaled[i] = scales[i] * 256.0f; /* exact */          \
    for (size_t r = 0; r < rows; r++, codes += width) {                                     \
        size_t i = 0;                                                                       \
        for (; i + 16 <= width; i += 16) {                                                  \
            __m256i half = uform_e4m3_to_f16x16(codes + i);                                 \
            emit(r, i, _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(half)),         \
                                     _mm256_loadu_ps(scaled + i)));                         \
            emit(r, i + 8, _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(half, 1)), \
                                         _mm256_loadu_ps(scaled + i + 8)));                 \
        }                                                                                   \
        for (; i < width; i += 8)                                                           \
            emit(r, i, _mm256_mul_ps(_mm256_cvtph_ps(uform_e4m3_to_f16x8(codes + i)),       \
                                     _mm256_loadu_ps(scaled + i)));                         \
    }

UFORM_E4M3_AVX2 void uform_e4m3_decode_f32_avx2(const uint8_t *codes, size_t rows, size_t width,
                                                const float *scales, void *out) {
    float *dst = out;
#define UFORM_E4M3_EMIT_F32(r, i, value) _mm256_storeu_ps(dst + (r) * width + (i), value)
    UFORM_E4M3_DECODE_ROWS(UFORM_E4M3_EMIT_F32)
#undef UFORM_E4M3_EMIT_F32
}

UFORM_E4M3_AVX2 void uform_e4m3_decode_bf16_avx2(const uint8_t *codes, size_t rows, size_t width,
                                                 const float *scales, void *out) {
    uint16_t *dst = out;
    /* the high halves are the BF16 bits, exactly (4 significant bits) */
#define UFORM_E4M3_EMIT_BF16(r, i, value)                                                  \
    do {                                                                                   \
        __m256i high = _mm256_srli_epi32(_mm256_castps_si256(value), 16);                  \
        _mm_storeu_si128((__m128i *)(dst + (r) * width + (i)),                             \
                         _mm_packus_epi32(_mm256_castsi256_si128(high),                    \
                                          _mm256_extracti128_si256(high, 1)));             \
    } while (0)
    UFORM_E4M3_DECODE_ROWS(UFORM_E4M3_EMIT_BF16)
#undef UFORM_E4M3_EMIT_BF16
}

/* BF16 in the HALVES layout (gemm.h) of 16-column panels: each group of 16
 * codes (columns 0 to 15 of a panel row, PLAIN) becomes 8 32-bit lanes, lane
 * l holding column l in its low half and column l + 8 in its high half, so
 * the BF16 kernels that widen HALVES (a shift and a mask) read the decoded
 * tile as they read a BF16 panel. The FP32 values above, whose low halves
 * are zero (4 significant bits), cut to their high halves: the same BF16 as
 * uform_e4m3_decode_bf16_avx2's, in that order. `width`: a multiple of 16. */
UFORM_E4M3_AVX2 void uform_e4m3_decode_bf16_halves_avx2(const uint8_t *codes, size_t rows,
                                                        size_t width, const float *scales,
                                                        void *out) {
    uint16_t *dst = out;
    const __m256i high_half = _mm256_set1_epi32((int)0xffff0000u);
    float scaled[UFORM_E4M3_WIDTH_MAX];
    for (size_t i = 0; i < width; i++) scaled[i] = scales[i] * 256.0f; /* exact */
    for (size_t r = 0; r < rows; r++, codes += width, dst += width)
        for (size_t i = 0; i + 16 <= width; i += 16) {
            __m256i half = uform_e4m3_to_f16x16(codes + i);
            __m256 low = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(half)),
                                       _mm256_loadu_ps(scaled + i));
            __m256 high = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(half, 1)),
                                        _mm256_loadu_ps(scaled + i + 8));
            __m256i lanes = _mm256_or_si256(_mm256_srli_epi32(_mm256_castps_si256(low), 16),
                                            _mm256_and_si256(_mm256_castps_si256(high), high_half));
            _mm256_storeu_si256((__m256i *)(dst + i), lanes);
        }
}

#endif /* __x86_64__ */
