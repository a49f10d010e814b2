/* e4m3_vbmi.h: 64 E4M3 codes to 64 BF16 in four AVX-512 VBMI lookups, the
 * step of the tile decoder (e4m3_avx512.c, uform_e4m3_decode_bf16_vbmi) and
 * of SAPPHIRE's kernels that read E4M3 panels directly (sapphire.c), so both
 * give the same bits.
 *
 * The BF16 bits of each magnitude (0 to 127) at scale 1 are fixed (a
 * magnitude c from 8 up is 0x3C00 + (c << 4), the 7 subnormal ones
 * normalized): two 128-byte tables hold their low and high bytes, and
 * VPERMI2B looks up 64 codes in each at once (it reads the low 7 bits of each
 * index: the sign is left out). The sign goes into the high bytes, the bytes
 * are interleaved into 16-bit lanes, and the scale's exponent (shifts: the
 * power-of-two scale's exponent << 7, uform_e4m3_scale_shifts) is added to
 * each nonzero lane. VPUNPCKLBW and VPUNPCKHBW interleave within 128-bit
 * lanes, so the codes are first reordered (VPERMB) for the words to come out
 * in order. */
#ifndef UFORM_CPU_E4M3_VBMI_H
#define UFORM_CPU_E4M3_VBMI_H

#if defined(__x86_64__)
#include <immintrin.h>
#include <stdbool.h>

#include "core/internal.h"

#define UFORM_E4M3_VBMI_TARGET                                                                \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx512vbmi,avx2,fma,f16c")))

/* The tables (e4m3_avx512.c): low and high bytes of each magnitude's BF16
 * bits, and the VPERMB order that makes the unpacks come out in order. */
UFORM_INTERNAL extern const uint8_t uform_e4m3_low_bytes[128];
UFORM_INTERNAL extern const uint8_t uform_e4m3_high_bytes[128];
UFORM_INTERNAL extern const uint8_t uform_e4m3_vbmi_order[64];

/* Each scale's exponent << 7 into shifts[0 .. width), zeros after up to the
 * next multiple of 32; false when some scale is not a power of two with
 * exponent in [-117, 119] (then the products with the codes may leave BF16's
 * normal range, and only the floating-point decoder is exact). */
UFORM_INTERNAL bool uform_e4m3_scale_shifts(const float *scales, size_t width, int16_t *shifts);

/* The tables in registers: what one decoding step reads besides the codes. */
typedef struct {
    __m512i low0, low1, high0, high1, order;
} uform_e4m3_vbmi_tables_t;

static inline __attribute__((always_inline)) UFORM_E4M3_VBMI_TARGET uform_e4m3_vbmi_tables_t
uform_e4m3_vbmi_tables(void) {
    uform_e4m3_vbmi_tables_t t;
    t.low0 = _mm512_loadu_si512(uform_e4m3_low_bytes);
    t.low1 = _mm512_loadu_si512(uform_e4m3_low_bytes + 64);
    t.high0 = _mm512_loadu_si512(uform_e4m3_high_bytes);
    t.high1 = _mm512_loadu_si512(uform_e4m3_high_bytes + 64);
    t.order = _mm512_loadu_si512(uform_e4m3_vbmi_order);
    return t;
}

/* codes[0 .. 64) as BF16: codes 0 to 31 into *first, 32 to 63 into *second,
 * each times 2^(its shift's exponent). */
static inline __attribute__((always_inline)) UFORM_E4M3_VBMI_TARGET void
uform_e4m3_vbmi_decode64(const uint8_t *codes, const uform_e4m3_vbmi_tables_t *t, __m512i shift0,
                         __m512i shift1, __m512i *first, __m512i *second) {
    const __m512i sign = _mm512_set1_epi8((char)0x80), magnitude = _mm512_set1_epi16(0x7fff);
    __m512i c = _mm512_permutexvar_epi8(t->order, _mm512_loadu_si512(codes));
    __m512i low = _mm512_permutex2var_epi8(t->low0, c, t->low1);
    /* high | (c & 0x80): the sign */
    __m512i high = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(t->high0, c, t->high1), c,
                                             sign, 0xF8);
    __m512i a = _mm512_unpacklo_epi8(low, high), b = _mm512_unpackhi_epi8(low, high);
    *first = _mm512_mask_add_epi16(a, _mm512_test_epi16_mask(a, magnitude), a, shift0);
    *second = _mm512_mask_add_epi16(b, _mm512_test_epi16_mask(b, magnitude), b, shift1);
}

#endif
#endif /* UFORM_CPU_E4M3_VBMI_H */
