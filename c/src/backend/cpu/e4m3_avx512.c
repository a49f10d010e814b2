/* e4m3_avx512.c: the E4M3 tile decoder of the AVX-512 BF16 classes, SAPPHIRE
 * and AMX (e4m3_decode.h), BF16 out: 64 codes at a time from two byte tables
 * where the CPU has AVX-512 VBMI (below), else 32 at a time.
 *
 * Two paths, the same bits as the AVX2 and portable decoders. Where every
 * scale is a power of two whose products with the codes are normal numbers
 * (what quantization makes, quantize.h), integer steps on the BF16 bits
 * (uform_e4m3_to_bf16x32, below). Otherwise the steps of e4m3_avx2.c: each
 * code moved under FP16's exponent and mantissa (its value times 2^-8,
 * subnormal codes included), widened exactly by VCVTPH2PS (which ignores
 * MXCSR.DAZ for its FP16 inputs), multiplied by 2^8 times the scale and
 * rounded by VCVTNE2PS2BF16. The FP path was about three times fewer
 * instructions per weight than the AVX2 decoder (gemm_bench, Xeon with AMX:
 * AMX's E4M3 products of 128 rows 1.09-1.13x faster, SAPPHIRE's of one row
 * 1.7x); the integer one a third fewer again, and lighter (one text per call
 * on AMX: 7% faster; docs/benchmarks-e4m3.md). SKYLAKE keeps the AVX2 FP32
 * decoder: a 512-bit one measured no faster (its 4-byte outputs, not the
 * instructions, bound it). */
#include "backend/cpu/e4m3_decode.h"
#include "backend/cpu/e4m3_vbmi.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <stdbool.h>

#define UFORM_E4M3_AVX512_BF16 \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))

/* Up to 32 codes (mask `live`) as FP16 bits of value x 2^-8 in 16-bit lanes. */
static inline __attribute__((always_inline)) UFORM_E4M3_AVX512_BF16 __m512i
uform_e4m3_to_f16x32(const uint8_t *codes, __mmask32 live) {
    __m512i wide = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(live, codes));
    __m512i shifted = _mm512_srai_epi16(_mm512_slli_epi16(wide, 8), 1);
    return _mm512_and_si512(shifted, _mm512_set1_epi16((short)0xbfff));
}

/* The BF16 bits of the subnormal magnitudes 0 to 7 (m x 2^-9), normalized; in
 * the 32 lanes of a VPERMW table. */
static const uint16_t uform_e4m3_subnormal_bf16[32] = {0x0000, 0x3b00, 0x3b80, 0x3bc0,
                                                       0x3c00, 0x3c20, 0x3c40, 0x3c60};

/* The BF16 bits of codes times power-of-two scales, in integer steps: a
 * magnitude c from 8 up (exponent e, mantissa m) is 2^(e - 7) (1 + m/8), whose
 * BF16 bits are (e + 120) << 7 | m << 4 = 0x3C00 + (c << 4); the 7 subnormal
 * ones come from a table; the scale's exponent s is added to the exponent
 * field of every nonzero code; the sign goes to bit 15. Exactly the products
 * the FP path below rounds, wherever every result is a normal number, which
 * `shifts` says: NULL when a scale is not a power of two with s in [-117,
 * 119] (codes span 2^-9 to 2^8.8, BF16's normal exponents 2^-126 to 2^127).
 * Fewer and lighter instructions than the FP path (no VCVTPH2PS, no
 * VCVTNE2PS2BF16): docs/benchmarks-e4m3.md. */
UFORM_E4M3_AVX512_BF16 bool uform_e4m3_scale_shifts(const float *scales, size_t width,
                                                     int16_t *shifts) {
    __mmask16 bad = 0;
    for (size_t i = 0; i < width; i += 16) {
        size_t left = width - i;
        __mmask16 live = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
        __m512i bits = _mm512_maskz_loadu_epi32(live, scales + i);
        __m512i exponent = _mm512_sub_epi32(_mm512_srli_epi32(bits, 23), _mm512_set1_epi32(127));
        bad |= _mm512_mask_test_epi32_mask(live, bits, _mm512_set1_epi32((int)0x807fffffu));
        bad |= _mm512_mask_cmplt_epi32_mask(live, exponent, _mm512_set1_epi32(-117));
        bad |= _mm512_mask_cmpgt_epi32_mask(live, exponent, _mm512_set1_epi32(119));
        _mm256_storeu_si256((__m256i *)(shifts + i),
                            _mm512_cvtepi32_epi16(_mm512_maskz_slli_epi32(live, exponent, 7)));
    }
    for (size_t i = (width + 15) / 16 * 16; i < (width + 31) / 32 * 32; i++) shifts[i] = 0;
    return bad == 0;
}

static inline __attribute__((always_inline)) UFORM_E4M3_AVX512_BF16 __m512i
uform_e4m3_to_bf16x32(const uint8_t *codes, __mmask32 live, __m512i shift, __m512i subnormals) {
    __m512i wide = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(live, codes));
    __m512i magnitude = _mm512_and_si512(wide, _mm512_set1_epi16(0x7f));
    __m512i bits = _mm512_add_epi16(_mm512_slli_epi16(magnitude, 4), _mm512_set1_epi16(0x3c00));
    __mmask32 subnormal = _mm512_cmplt_epu16_mask(magnitude, _mm512_set1_epi16(8));
    bits = _mm512_mask_permutexvar_epi16(bits, subnormal, magnitude, subnormals);
    bits = _mm512_mask_add_epi16(bits, _mm512_test_epi16_mask(magnitude, magnitude), bits, shift);
    /* bits | (wide << 8 & 0x8000): the sign */
    return _mm512_ternarylogic_epi32(bits, _mm512_slli_epi16(wide, 8), _mm512_set1_epi16((short)0x8000),
                                     0xF8);
}

/* 32 codes at a time, a masked last group. */
UFORM_E4M3_AVX512_BF16 void uform_e4m3_decode_bf16_avx512bw(const uint8_t *codes, size_t rows,
                                                            size_t width, const float *scales,
                                                            void *out) {
    uint16_t *dst = out;
    int16_t shifts[UFORM_E4M3_WIDTH_MAX + 32];
    if (uform_e4m3_scale_shifts(scales, width, shifts)) {
        __m512i subnormals = _mm512_loadu_si512(uform_e4m3_subnormal_bf16);
        for (size_t r = 0; r < rows; r++, codes += width, dst += width)
            for (size_t i = 0; i < width; i += 32) {
                size_t left = width - i;
                __mmask32 live = left >= 32 ? (__mmask32)~0u : (__mmask32)((1u << left) - 1);
                __m512i bits = uform_e4m3_to_bf16x32(codes + i, live, _mm512_loadu_si512(shifts + i),
                                                     subnormals);
                _mm512_mask_storeu_epi16(dst + i, live, bits);
            }
        return;
    }
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

/* ---- AVX-512 VBMI: 64 codes at a time, from two byte tables ----------------
 *
 * The steps are e4m3_vbmi.h's (shared with SAPPHIRE's kernels that read E4M3
 * panels directly): about half the instructions per code of the 32-lane path
 * (E4M3 queries on AMX: docs/benchmarks-e4m3.md). */

/* The integer path's bits of magnitude m: 0x3C00 + (m << 4) from 8 up, the
 * normalized subnormals (uform_e4m3_subnormal_bf16) below. */
#define UFORM_E4M3_SUB_LOW(m)                                                                 \
    ((m) == 2 ? 0x80 : (m) == 3 ? 0xc0 : (m) == 5 ? 0x20 : (m) == 6 ? 0x40 : (m) == 7 ? 0x60 : 0)
#define UFORM_E4M3_SUB_HIGH(m) ((m) == 0 ? 0 : (m) < 4 ? 0x3b : 0x3c)
#define UFORM_E4M3_LOW(m) ((m) < 8 ? UFORM_E4M3_SUB_LOW(m) : ((m) & 15) << 4)
#define UFORM_E4M3_HIGH(m) ((m) < 8 ? UFORM_E4M3_SUB_HIGH(m) : 0x3c + ((m) >> 4))
#define UFORM_E4M3_ROW(F, b)                                                                  \
    F(b), F(b + 1), F(b + 2), F(b + 3), F(b + 4), F(b + 5), F(b + 6), F(b + 7), F(b + 8),     \
        F(b + 9), F(b + 10), F(b + 11), F(b + 12), F(b + 13), F(b + 14), F(b + 15)
#define UFORM_E4M3_TABLE(F)                                                                   \
    {UFORM_E4M3_ROW(F, 0),  UFORM_E4M3_ROW(F, 16), UFORM_E4M3_ROW(F, 32),                     \
     UFORM_E4M3_ROW(F, 48), UFORM_E4M3_ROW(F, 64), UFORM_E4M3_ROW(F, 80),                     \
     UFORM_E4M3_ROW(F, 96), UFORM_E4M3_ROW(F, 112)}
const uint8_t uform_e4m3_low_bytes[128] = UFORM_E4M3_TABLE(UFORM_E4M3_LOW);
const uint8_t uform_e4m3_high_bytes[128] = UFORM_E4M3_TABLE(UFORM_E4M3_HIGH);

/* Byte 16 L + j of the reordered codes is code 8 L + j, byte 16 L + 8 + j
 * code 32 + 8 L + j (L the 128-bit lane, j < 8): the low unpack then yields
 * codes 0 to 31 in order, the high one 32 to 63. */
const uint8_t uform_e4m3_vbmi_order[64] = {
    0,  1,  2,  3,  4,  5,  6,  7,  32, 33, 34, 35, 36, 37, 38, 39,
    8,  9,  10, 11, 12, 13, 14, 15, 40, 41, 42, 43, 44, 45, 46, 47,
    16, 17, 18, 19, 20, 21, 22, 23, 48, 49, 50, 51, 52, 53, 54, 55,
    24, 25, 26, 27, 28, 29, 30, 31, 56, 57, 58, 59, 60, 61, 62, 63};

/* Rows of a multiple of 64 codes with power-of-two scales (every AMX and
 * SAPPHIRE panel of a quantized model); anything else as the 32-lane path. */
UFORM_E4M3_VBMI_TARGET void uform_e4m3_decode_bf16_vbmi(const uint8_t *codes, size_t rows,
                                                        size_t width, const float *scales,
                                                        void *out) {
    int16_t shifts[UFORM_E4M3_WIDTH_MAX + 32];
    if (width % 64 != 0 || !uform_e4m3_scale_shifts(scales, width, shifts)) {
        uform_e4m3_decode_bf16_avx512bw(codes, rows, width, scales, out);
        return;
    }
    uint16_t *dst = out;
    const uform_e4m3_vbmi_tables_t tables = uform_e4m3_vbmi_tables();
    for (size_t r = 0; r < rows; r++, codes += width, dst += width)
        for (size_t i = 0; i < width; i += 64) {
            __m512i first, second;
            uform_e4m3_vbmi_decode64(codes + i, &tables, _mm512_loadu_si512(shifts + i),
                                     _mm512_loadu_si512(shifts + i + 32), &first, &second);
            _mm512_storeu_si512(dst + i, first);
            _mm512_storeu_si512(dst + i + 32, second);
        }
}

/* The classes' decoder: VBMI where the CPU has it (every AMX CPU does, as
 * Zen 4 and 5 do; Cooper Lake, a SAPPHIRE CPU, does not). GCC's and Clang's
 * __builtin_cpu_supports reads what libgcc asked cpuid once. */
void uform_e4m3_decode_bf16_avx512(const uint8_t *codes, size_t rows, size_t width,
                                   const float *scales, void *out) {
    if (__builtin_cpu_supports("avx512vbmi")) /* it takes other widths to the 32-code path */
        uform_e4m3_decode_bf16_vbmi(codes, rows, width, scales, out);
    else
        uform_e4m3_decode_bf16_avx512bw(codes, rows, width, scales, out);
}

#endif /* __x86_64__ */
