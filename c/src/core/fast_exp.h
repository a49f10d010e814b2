/* fast_exp.h: the natural-base exp approximation of the forward pass (the
 * FP32 classes' softmax, GELU's backward; GELU's forward and the BF16
 * classes' softmax work in base 2 instead: gelu.c, attention_bf16.h),
 * scalar for code the compiler vectorises, and AVX-512, AVX2, NEON and SVE for
 * hand-written kernels; all the same Cody-Waite reduction and degree-6
 * polynomial (Cephes expf), about 2 ulp on [-87, 88]. Inputs are clamped to
 * that range, so below e^-87 the result is ~1.6e-38 rather than 0: far under
 * any stated tolerance. */
#ifndef UFORM_FAST_EXP_H
#define UFORM_FAST_EXP_H

#include <stdint.h>
#include <string.h>

#define UFORM_EXP_LOW (-87.0f)
#define UFORM_EXP_HIGH 88.0f
#define UFORM_EXP_LOG2E 1.44269504088896341f
#define UFORM_EXP_LN2_HIGH 0.693359375f   /* exact in few bits: n * it is exact */
#define UFORM_EXP_LN2_LOW (-2.12194440e-4f)
#define UFORM_EXP_P0 1.9875691500e-4f
#define UFORM_EXP_P1 1.3981999507e-3f
#define UFORM_EXP_P2 8.3334519073e-3f
#define UFORM_EXP_P3 4.1665795894e-2f
#define UFORM_EXP_P4 1.6666665459e-1f
#define UFORM_EXP_P5 5.0000001201e-1f
/* 2^f for f in [-1/2, 1/2], the base-2 exponentials' polynomial (BF16
 * attention's softmax, attention_bf16.h; GELU, gelu.c): a fit of the relative
 * error, at most 2e-7 in FP32; p(0) = 1 exactly. Highest degree first, each
 * step p = p f + c by one fused multiply-add. */
#define UFORM_EXP2_P5 1.326472731e-03f
#define UFORM_EXP2_P4 9.671512991e-03f
#define UFORM_EXP2_P3 5.550733581e-02f
#define UFORM_EXP2_P2 2.402224243e-01f
#define UFORM_EXP2_P1 6.931470037e-01f
#define UFORM_EXP2_P0 1.0f

/* Branch-free, so loops over it vectorise. The power of two is built from the
 * bits of the rounded sum, in unsigned arithmetic, never from a float-to-int
 * conversion: a NaN input (a diverged step) then flows through as NaN instead of
 * being converted and shifted, which is undefined behaviour UBSan caught. */
static inline float uform_fast_exp(float x) {
    if (x < UFORM_EXP_LOW) x = UFORM_EXP_LOW;
    if (x > UFORM_EXP_HIGH) x = UFORM_EXP_HIGH;
    const float round_magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to integer */
    float shifted = x * UFORM_EXP_LOG2E + round_magic;
    float n = shifted - round_magic;
    float r = x - n * UFORM_EXP_LN2_HIGH;
    r = r - n * UFORM_EXP_LN2_LOW;
    float p = UFORM_EXP_P0;
    p = p * r + UFORM_EXP_P1;
    p = p * r + UFORM_EXP_P2;
    p = p * r + UFORM_EXP_P3;
    p = p * r + UFORM_EXP_P4;
    p = p * r + UFORM_EXP_P5;
    p = p * r * r + r + 1.0f;
    /* shifted is 1.5 * 2^23 + n exactly (its ulp is 1), so its low bits are n */
    uint32_t shifted_bits;
    memcpy(&shifted_bits, &shifted, sizeof(shifted_bits));
    uint32_t exponent = (shifted_bits - 0x4B400000u + 127u) << 23;
    float scale;
    memcpy(&scale, &exponent, sizeof(scale));
    return p * scale;
}

#if defined(__x86_64__)
#include <immintrin.h>

static inline __attribute__((always_inline, target("avx512f"))) __m512 uform_fast_exp512(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(UFORM_EXP_LOW));
    x = _mm512_min_ps(x, _mm512_set1_ps(UFORM_EXP_HIGH));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(UFORM_EXP_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(UFORM_EXP_LN2_HIGH), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(UFORM_EXP_LN2_LOW), r);
    __m512 p = _mm512_set1_ps(UFORM_EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(UFORM_EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(UFORM_EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(UFORM_EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(UFORM_EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(UFORM_EXP_P5));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    __m512i exponent = _mm512_slli_epi32(
        _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(exponent));
}

/* AVX2 + FMA (attention_avx2.c): uform_fast_exp512 step for step, the same bits. */
static inline __attribute__((always_inline, target("avx2,fma"))) __m256 uform_fast_exp256(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(UFORM_EXP_LOW));
    x = _mm256_min_ps(x, _mm256_set1_ps(UFORM_EXP_HIGH));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(UFORM_EXP_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(UFORM_EXP_LN2_HIGH), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(UFORM_EXP_LN2_LOW), r);
    __m256 p = _mm256_set1_ps(UFORM_EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(UFORM_EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(UFORM_EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(UFORM_EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(UFORM_EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(UFORM_EXP_P5));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i exponent = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(exponent));
}
#endif

/* The Arm versions follow uform_fast_exp512 step for step, so NEON and SVE
 * give the same bits as each other (FMAX keeps a NaN, and FCVTZS turns it into
 * 0, so a NaN input comes out NaN with no undefined behaviour). */
#if defined(__aarch64__)
#include <arm_neon.h>

static inline __attribute__((always_inline)) float32x4_t uform_fast_exp_neon(float32x4_t x) {
    x = vmaxq_f32(x, vdupq_n_f32(UFORM_EXP_LOW));
    x = vminq_f32(x, vdupq_n_f32(UFORM_EXP_HIGH));
    float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(UFORM_EXP_LOG2E)));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(UFORM_EXP_LN2_HIGH));
    r = vfmsq_f32(r, n, vdupq_n_f32(UFORM_EXP_LN2_LOW));
    float32x4_t p = vdupq_n_f32(UFORM_EXP_P0);
    p = vfmaq_f32(vdupq_n_f32(UFORM_EXP_P1), p, r);
    p = vfmaq_f32(vdupq_n_f32(UFORM_EXP_P2), p, r);
    p = vfmaq_f32(vdupq_n_f32(UFORM_EXP_P3), p, r);
    p = vfmaq_f32(vdupq_n_f32(UFORM_EXP_P4), p, r);
    p = vfmaq_f32(vdupq_n_f32(UFORM_EXP_P5), p, r);
    p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), vmulq_f32(p, r), r);
    int32x4_t exponent = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vmulq_f32(p, vreinterpretq_f32_s32(exponent));
}

/* SVE (vector-length agnostic); the target attribute lets files built with
 * baseline flags include this header and lets attention_sve.c call it. Lanes
 * outside pg are undefined. */
#include <arm_sve.h>

static inline __attribute__((always_inline, target("+sve"))) svfloat32_t
uform_fast_exp_sve(svbool_t pg, svfloat32_t x) {
    x = svmax_n_f32_x(pg, x, UFORM_EXP_LOW);
    x = svmin_n_f32_x(pg, x, UFORM_EXP_HIGH);
    svfloat32_t n = svrintn_f32_x(pg, svmul_n_f32_x(pg, x, UFORM_EXP_LOG2E));
    svfloat32_t r = svmls_n_f32_x(pg, x, n, UFORM_EXP_LN2_HIGH);
    r = svmls_n_f32_x(pg, r, n, UFORM_EXP_LN2_LOW);
    svfloat32_t p = svdup_n_f32(UFORM_EXP_P0);
    p = svmad_n_f32_x(pg, p, r, UFORM_EXP_P1);
    p = svmad_n_f32_x(pg, p, r, UFORM_EXP_P2);
    p = svmad_n_f32_x(pg, p, r, UFORM_EXP_P3);
    p = svmad_n_f32_x(pg, p, r, UFORM_EXP_P4);
    p = svmad_n_f32_x(pg, p, r, UFORM_EXP_P5);
    p = svmla_f32_x(pg, svadd_n_f32_x(pg, r, 1.0f), svmul_f32_x(pg, p, r), r);
    svint32_t exponent = svlsl_n_s32_x(pg, svadd_n_s32_x(pg, svcvt_s32_f32_x(pg, n), 127), 23);
    return svmul_f32_x(pg, p, svreinterpret_f32_s32(exponent));
}
#endif

#endif /* UFORM_FAST_EXP_H */
