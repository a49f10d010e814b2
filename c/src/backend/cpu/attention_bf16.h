/* attention_bf16.h: what the BF16 attention kernels of SAPPHIRE
 * (attention_bf16.c, vdpbf16ps) and AMX (attention_amx.h, tiles) share: the
 * keys and values packed as BF16 pairs, and the softmax in FP32 that rounds
 * the probabilities to BF16 pairs. */
#ifndef UFORM_CPU_ATTENTION_BF16_H
#define UFORM_CPU_ATTENTION_BF16_H

#if defined(__x86_64__)
#include "core/fast_exp.h"
#include "backend/cpu/bf16_avx512.h"
#include "backend/cpu/kernels.h"

#include <immintrin.h>
#include <math.h>

/* Which of the 16 scores from j on belong to the item (`full` = n rounded
 * down to 16, `tail` the mask of the item's last partial vector). */
static inline __attribute__((always_inline)) __mmask16 uform_bf16_valid(size_t j, size_t full,
                                                                        __mmask16 tail) {
    return j < full ? (__mmask16)0xffff : j == full ? tail : (__mmask16)0;
}

/* 2^t for t <= 0 (a score minus its row's maximum, in base-2 units; a
 * rounding above 0 too, or NaN): t clamped at -126 (NaN to -126 as well),
 * n = t rounded to nearest, f = t - n in [-1/2, 1/2] (exact), 2^f by a
 * degree-5 polynomial (a fit of the relative error over [-1/2, 1/2]: at most
 * 2e-7 in FP32, about 2 ulps, far below the probabilities' BF16 rounding;
 * p(0) = 1 exactly), times 2^n by one vscalefps. The result is a normal
 * float: n >= -126, and p >= 1 where n = -126. Against e^x by fast_exp.h's
 * Cody-Waite reduction and degree-7 polynomial, the base-2 form saves the
 * multiplication by log2 e (folded into the scores' scale) and the two-step
 * reduction: 11 vector operations instead of 15, SAPPHIRE's attention kernel
 * 4-5% faster on a Zen 4 (docs/profiles.md). */
static inline __attribute__((always_inline)) UFORM_SAPPHIRE_TARGET __m512
uform_bf16_exp2_nonpositive(__m512 t) {
    t = _mm512_max_ps(t, _mm512_set1_ps(-126.0f));
    __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(t, n);
    __m512 p = _mm512_set1_ps(UFORM_EXP2_P5);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(UFORM_EXP2_P4));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(UFORM_EXP2_P3));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(UFORM_EXP2_P2));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(UFORM_EXP2_P1));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(UFORM_EXP2_P0));
    return _mm512_scalef_ps(p, n);
}

/* Softmax of `rows` rows of n scores (n <= padded), row r at scores + r *
 * padded, with maxima[r] each row's largest of its n scores where the caller
 * found it as it made them (SAPPHIRE's score products; NULL: found here, one
 * pass over each row, as AMX does), each score s standing for
 * e^(s * log2_scale * ln 2): 1 where the
 * scores are in base-2 units already (SAPPHIRE scales them by log2 e / 8 as
 * its products end), log2 e where they are natural (AMX's tiles). Writes each
 * row's probabilities 2^(s C - max C) as BF16 pairs along j into pairs + r *
 * half (zeros past n) and 1 / (sum of its FP32 exponentials) into inverse[r].
 * s C - max C is one fused rounding (exactly s - max for C = 1; at the
 * maximum otherwise within half an ulp of max C from 0, so its exponential
 * may exceed 1 by a few millionths). The exponentials are normal floats (see
 * above), which vcvtne2ps2bf16 rounds to nearest even exactly as
 * uform_f32_to_bf16. Each
 * row's sum is 16 lane partial sums added in lane order, the rows' chains side
 * by side (a transpose puts lane l of every row in one vector). */
static inline UFORM_SAPPHIRE_TARGET void uform_bf16_softmax_tile(const float *scores, size_t rows,
                                                                size_t n, size_t padded,
                                                                float log2_scale, const float *maxima,
                                                                uint32_t *pairs, float *inverse) {
    const __m512 scale = _mm512_set1_ps(log2_scale);
    size_t full = n & ~(size_t)15, half = padded / 2;
    __mmask16 tail = (__mmask16)((1u << (n - full)) - 1u);
    __m512i totals[16];
    for (size_t r = 0; r < 16; r++) totals[r] = _mm512_setzero_si512();
    for (size_t r = 0; r < rows; r++) {
        const float *row = scores + r * padded;
        uint32_t *out = pairs + r * half;
        float row_max = maxima ? maxima[r] : -INFINITY;
        if (!maxima) {
            __m512 top = _mm512_set1_ps(-INFINITY);
            for (size_t j = 0; j < full; j += 16) top = _mm512_max_ps(top, _mm512_load_ps(row + j));
            if (tail) top = _mm512_mask_max_ps(top, tail, top, _mm512_load_ps(row + full));
            row_max = _mm512_reduce_max_ps(top);
        }
        __m512 maximum = _mm512_set1_ps(row_max * log2_scale);
        __m512 total = _mm512_setzero_ps();
        size_t j = 0;
        /* whole vectors of the item: nothing to mask (the same sums) */
        for (; j + 32 <= full; j += 32) {
            __m512 low = uform_bf16_exp2_nonpositive(_mm512_fmsub_ps(_mm512_load_ps(row + j), scale, maximum));
            __m512 high = uform_bf16_exp2_nonpositive(_mm512_fmsub_ps(_mm512_load_ps(row + j + 16), scale, maximum));
            total = _mm512_add_ps(total, low);
            total = _mm512_add_ps(total, high);
            _mm512_storeu_si512(out + j / 2, (__m512i)_mm512_cvtne2ps_pbh(high, low));
        }
        for (; j + 32 <= padded; j += 32) {
            __m512 low = uform_bf16_exp2_nonpositive(_mm512_fmsub_ps(_mm512_load_ps(row + j), scale, maximum));
            __m512 high = uform_bf16_exp2_nonpositive(_mm512_fmsub_ps(_mm512_load_ps(row + j + 16), scale, maximum));
            /* past the item: 0 (the second vector only, where padded is n
             * rounded to 16; both may be where it is rounded to 32) */
            low = _mm512_maskz_mov_ps(uform_bf16_valid(j, full, tail), low);
            high = _mm512_maskz_mov_ps(uform_bf16_valid(j + 16, full, tail), high);
            total = _mm512_add_ps(total, low);
            total = _mm512_add_ps(total, high);
            _mm512_storeu_si512(out + j / 2, (__m512i)_mm512_cvtne2ps_pbh(high, low));
        }
        if (j < padded) {
            __m512 values = uform_bf16_exp2_nonpositive(_mm512_fmsub_ps(_mm512_load_ps(row + j), scale, maximum));
            values = _mm512_maskz_mov_ps(uform_bf16_valid(j, full, tail), values);
            total = _mm512_add_ps(total, values);
            _mm256_storeu_si256((__m256i *)(out + j / 2), (__m256i)_mm512_cvtneps_pbh(values));
        }
        totals[r] = _mm512_castps_si512(total);
    }
    uform_transpose16x16(totals); /* totals[l]: lane l of each row */
    __m512 sum = _mm512_castsi512_ps(totals[0]);
    for (size_t l = 1; l < 16; l++) sum = _mm512_add_ps(sum, _mm512_castsi512_ps(totals[l]));
    __mmask16 used = (__mmask16)((1u << rows) - 1u);
    _mm512_mask_storeu_ps(inverse, used, _mm512_div_ps(_mm512_set1_ps(1.0f), sum));
}

/* Keys as pairs along d (kp[d2][j] holds k_j[2 d2], k_j[2 d2 + 1], rows
 * `padded` words apart) and values as pairs along j (vp[j2][d] holds
 * v_{2 j2}[d], v_{2 j2 + 1}[d]), zero past the item's n tokens up to `padded`
 * (a multiple of 16). */
static inline UFORM_SAPPHIRE_TARGET void uform_bf16_pack_keys_values(const float *k, const float *v,
                                                                     size_t stride, size_t n,
                                                                     size_t padded, uint32_t *kp,
                                                                     uint32_t *vp) {
    size_t half = padded / 2;
    /* keys: 16 rows at a time rounded to 32 pairs along d, transposed in
     * registers so each pair index's 16 keys are one aligned store */
    for (size_t j0 = 0; j0 < padded; j0 += 16) {
        for (size_t half_d = 0; half_d < 2; half_d++) {
            __m512i m[16];
#pragma GCC unroll 16
            for (size_t r = 0; r < 16; r++)
                m[r] = j0 + r < n ? uform_bf16_pairs32(k + (j0 + r) * stride + 32 * half_d)
                                  : _mm512_setzero_si512();
            uform_transpose16x16(m);
#pragma GCC unroll 16
            for (size_t t = 0; t < 16; t++)
                _mm512_store_si512(kp + (16 * half_d + t) * padded + j0, m[t]);
        }
    }
    /* values: rows 2 j2 and 2 j2 + 1 interleaved into pairs along j */
    for (size_t j2 = 0; j2 < half; j2++) {
        const float *even = v + 2 * j2 * stride, *odd = even + stride;
        for (size_t c = 0; c < UFORM_HEAD_WIDTH; c += 16) {
            __m512i low = 2 * j2 < n ? _mm512_loadu_si512(even + c) : _mm512_setzero_si512();
            __m512i high = 2 * j2 + 1 < n ? _mm512_loadu_si512(odd + c) : _mm512_setzero_si512();
            _mm512_store_si512(vp + j2 * UFORM_HEAD_WIDTH + c, uform_bf16_interleave16(low, high));
        }
    }
}

#endif
#endif /* UFORM_CPU_ATTENTION_BF16_H */
