/* e4m3_avx512.c: the E4M3 tile decoder of the AVX-512 BF16 classes, SAPPHIRE
 * and AMX (e4m3_decode.h), BF16 out.
 *
 * The steps of e4m3_avx2.c, 32 codes at a time: each code moved under FP16's
 * exponent and mantissa with integer steps (its value times 2^-8, subnormal
 * codes included), widened exactly by VCVTPH2PS (which ignores MXCSR.DAZ for
 * its FP16 inputs), multiplied by 2^8 times the power-of-two scale (every
 * product a normal FP32, quantize.h). The BF16 decoder then rounds by
 * VCVTNE2PS2BF16, exact here (4 significant bits, normal inputs): the same
 * bits as the AVX2 and portable decoders, about three times fewer
 * instructions per weight than the AVX2 one (gemm_bench, Xeon with AMX: AMX's
 * E4M3 products of 128 rows 1.09-1.13x faster, SAPPHIRE's of one row 1.7x).
 * SKYLAKE keeps the AVX2 FP32 decoder: a 512-bit one measured no faster
 * (its 4-byte outputs, not the instructions, bound it). */
#include "backend/cpu/e4m3_decode.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define UFORM_E4M3_AVX512_BF16 \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))

/* Up to 32 codes (mask `live`) as FP16 bits of value x 2^-8 in 16-bit lanes. */
static inline __attribute__((always_inline)) UFORM_E4M3_AVX512_BF16 __m512i
uform_e4m3_to_f16x32(const uint8_t *codes, __mmask32 live) {
    __m512i wide = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(live, codes));
    __m512i shifted = _mm512_srai_epi16(_mm512_slli_epi16(wide, 8), 1);
    return _mm512_and_si512(shifted, _mm512_set1_epi16((short)0xbfff));
}

/* 32 codes at a time, a masked last group. */
UFORM_E4M3_AVX512_BF16 void uform_e4m3_decode_bf16_avx512(const uint8_t *codes, size_t rows,
                                                          size_t width, const float *scales,
                                                          void *out) {
    uint16_t *dst = out;
    float scaled[UFORM_E4M3_WIDTH_MAX + 32];
    for (size_t i = 0; i < width; i++) scaled[i] = scales[i] * 256.0f; /* exact */
    for (size_t i = width; i < (width + 31) / 32 * 32; i++) scaled[i] = 0.0f;
    for (size_t r = 0; r < rows; r++, codes += width, dst += width)
        for (size_t i = 0; i < width; i += 32) {
            size_t left = width - i;
            __mmask32 live = left >= 32 ? (__mmask32)~0u : (__mmask32)((1u << left) - 1);
            __m512i half = uform_e4m3_to_f16x32(codes + i, live);
            __m512 low = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(half)),
                                       _mm512_loadu_ps(scaled + i));
            __m512 high = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(half, 1)),
                                        _mm512_loadu_ps(scaled + i + 16));
            _mm512_mask_storeu_epi16(dst + i, live, (__m512i)_mm512_cvtne2ps_pbh(high, low));
        }
}

#endif /* __x86_64__ */
