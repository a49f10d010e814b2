/* transpose_avx512.h: a 16 x 16 transpose of 32-bit words in AVX-512
 * registers (exact data movement, so FP32 and BF16 pairs alike): the trainer's
 * FP32 A panels (sgemm_avx512.c), SAPPHIRE's activation panels (sapphire.c)
 * and attention's keys (attention_bf16.c). */
#ifndef UFORM_CPU_TRANSPOSE_AVX512_H
#define UFORM_CPU_TRANSPOSE_AVX512_H

#if defined(__x86_64__)
#include <immintrin.h>

/* m[t] = column t of the 16 x 16 words m[r] (a transpose in 64 shuffles). */
static inline __attribute__((always_inline, target("avx512f"))) void
uform_transpose16x16(__m512i m[16]) {
    __m512i t[16];
#pragma GCC unroll 8
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(m[i], m[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(m[i], m[i + 1]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 16; i += 4) {
        m[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        m[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        m[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        m[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* m[4b + j] holds column j of each 128-bit block of rows 4b..4b+3 */
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        t[j] = _mm512_shuffle_i32x4(m[j], m[4 + j], 0x88);
        t[4 + j] = _mm512_shuffle_i32x4(m[j], m[4 + j], 0xdd);
        t[8 + j] = _mm512_shuffle_i32x4(m[8 + j], m[12 + j], 0x88);
        t[12 + j] = _mm512_shuffle_i32x4(m[8 + j], m[12 + j], 0xdd);
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        m[j] = _mm512_shuffle_i32x4(t[j], t[8 + j], 0x88);
        m[8 + j] = _mm512_shuffle_i32x4(t[j], t[8 + j], 0xdd);
        m[4 + j] = _mm512_shuffle_i32x4(t[4 + j], t[12 + j], 0x88);
        m[12 + j] = _mm512_shuffle_i32x4(t[4 + j], t[12 + j], 0xdd);
    }
}

#endif
#endif /* UFORM_CPU_TRANSPOSE_AVX512_H */
