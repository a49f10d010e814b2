/* avx2_transpose.h: an 8 x 8 FP32 transpose in ymm registers, shared by the
 * AVX2 code that turns rows into columns (attention_avx2.c's keys,
 * haswell.c's A panels, the AVX2 trainer GEMM's A panels). Moves bits only. */
#ifndef UFORM_CPU_AVX2_TRANSPOSE_H
#define UFORM_CPU_AVX2_TRANSPOSE_H

#if defined(__x86_64__)
#include <immintrin.h>

/* m[i] holds row i on entry and column i on exit. */
static inline __attribute__((always_inline, target("avx2"))) void uform_avx2_transpose8(__m256 m[8]) {
    __m256 t0 = _mm256_unpacklo_ps(m[0], m[1]), t1 = _mm256_unpackhi_ps(m[0], m[1]);
    __m256 t2 = _mm256_unpacklo_ps(m[2], m[3]), t3 = _mm256_unpackhi_ps(m[2], m[3]);
    __m256 t4 = _mm256_unpacklo_ps(m[4], m[5]), t5 = _mm256_unpackhi_ps(m[4], m[5]);
    __m256 t6 = _mm256_unpacklo_ps(m[6], m[7]), t7 = _mm256_unpackhi_ps(m[6], m[7]);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
    m[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    m[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    m[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    m[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    m[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    m[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    m[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    m[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* dst[p * 6 + r] = x[r * x_stride + p] for 6 rows and p < kc: 8 steps of k at
 * a time transposed in registers (the scalar copy was 5% of an encode and of
 * a training step's GEMMs). Each 8-lane store overwrites the previous one's 2
 * spare lanes; the last of each block stores 6. */
static inline __attribute__((always_inline, target("avx2"))) void
uform_avx2_pack6(const float *x, size_t x_stride, size_t kc, float *dst) {
    size_t p = 0;
    for (; p + 8 <= kc; p += 8) {
        __m256 m[8];
        for (size_t r = 0; r < 6; r++) m[r] = _mm256_loadu_ps(x + r * x_stride + p);
        m[6] = m[7] = _mm256_setzero_ps();
        uform_avx2_transpose8(m);
        for (size_t c = 0; c < 7; c++) _mm256_storeu_ps(dst + (p + c) * 6, m[c]);
        float *last = dst + (p + 7) * 6;
        _mm_storeu_ps(last, _mm256_castps256_ps128(m[7]));
        _mm_storel_pi((__m64 *)(last + 4), _mm256_extractf128_ps(m[7], 1));
    }
    for (; p < kc; p++)
        for (size_t r = 0; r < 6; r++) dst[p * 6 + r] = x[r * x_stride + p];
}
#endif

#endif /* UFORM_CPU_AVX2_TRANSPOSE_H */
