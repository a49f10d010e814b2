/* sgemm_avx512.c: the x86 FMA microkernels of the FP32 GEMM (sgemm.h).
 *
 * AVX-512F: 14 rows x 32 columns in 28 zmm accumulators (of 32), two zmm of B
 * and one broadcast of A per step, as in skylake.c but with FP32 B.
 * AVX2 + FMA: 6 rows x 16 columns in 12 ymm accumulators (of 16).
 * Both compute each output as the same FMA chain, so they agree bit for bit.
 * Functions carry their own target (see haswell.c): the file builds for the
 * baseline and is only called after detection. */
#include "backend/cpu/sgemm.h"
#include "backend/cpu/avx2_transpose.h"
#include "backend/cpu/transpose_avx512.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define UFORM_SGEMM_AVX512 __attribute__((target("avx512f,avx2,fma")))
#define UFORM_SGEMM_AVX2 __attribute__((target("avx2,fma")))

/* ---- AVX-512F, 14 x 32 ---------------------------------------------------- */

static inline __attribute__((always_inline)) UFORM_SGEMM_AVX512 void
uform_sgemm_avx512_kernel(size_t rows, size_t kc, const float *a, const float *b, float *c,
                          size_t c_stride, bool load, const float *bias) {
    __m512 acc[14][2];
#pragma GCC unroll 14
    for (size_t r = 0; r < rows; r++) {
        acc[r][0] = load ? _mm512_loadu_ps(c + r * c_stride) : _mm512_setzero_ps();
        acc[r][1] = load ? _mm512_loadu_ps(c + r * c_stride + 16) : _mm512_setzero_ps();
    }
    for (size_t p = 0; p < kc; p++) {
        __m512 b0 = _mm512_loadu_ps(b + p * 32);
        __m512 b1 = _mm512_loadu_ps(b + p * 32 + 16);
#pragma GCC unroll 14
        for (size_t r = 0; r < rows; r++) {
            __m512 x = _mm512_set1_ps(a[p * rows + r]);
            acc[r][0] = _mm512_fmadd_ps(x, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(x, b1, acc[r][1]);
        }
    }
    if (bias) {
        __m512 bias0 = _mm512_loadu_ps(bias), bias1 = _mm512_loadu_ps(bias + 16);
#pragma GCC unroll 14
        for (size_t r = 0; r < rows; r++) {
            acc[r][0] = _mm512_add_ps(acc[r][0], bias0);
            acc[r][1] = _mm512_add_ps(acc[r][1], bias1);
        }
    }
#pragma GCC unroll 14
    for (size_t r = 0; r < rows; r++) {
        _mm512_storeu_ps(c + r * c_stride, acc[r][0]);
        _mm512_storeu_ps(c + r * c_stride + 16, acc[r][1]);
    }
}

#define UFORM_SGEMM_AVX512_KERNEL(R)                                                            \
    static UFORM_SGEMM_AVX512 void uform_sgemm_avx512_##R(size_t kc, const float *a,           \
                                                           const float *b, float *c,            \
                                                           size_t c_stride, bool load,          \
                                                           const float *bias) {                 \
        uform_sgemm_avx512_kernel(R, kc, a, b, c, c_stride, load, bias);                        \
    }
UFORM_SGEMM_AVX512_KERNEL(1)
UFORM_SGEMM_AVX512_KERNEL(2)
UFORM_SGEMM_AVX512_KERNEL(3)
UFORM_SGEMM_AVX512_KERNEL(4)
UFORM_SGEMM_AVX512_KERNEL(5)
UFORM_SGEMM_AVX512_KERNEL(6)
UFORM_SGEMM_AVX512_KERNEL(7)
UFORM_SGEMM_AVX512_KERNEL(8)
UFORM_SGEMM_AVX512_KERNEL(9)
UFORM_SGEMM_AVX512_KERNEL(10)
UFORM_SGEMM_AVX512_KERNEL(11)
UFORM_SGEMM_AVX512_KERNEL(12)
UFORM_SGEMM_AVX512_KERNEL(13)
UFORM_SGEMM_AVX512_KERNEL(14)

/* dst[p * rows + r] = src[r * stride + p]: for a full group of 14 rows, 16
 * steps of k at a time go through a 16 x 16 register transpose (rows 14 and
 * 15 zero) instead of 224 scalar moves; packing op(a) when it is not
 * transposed (the forward pass and the input gradient) otherwise costs ~7%.
 * A multiple of 16 rows (a transposed B's panel of 32 columns: attention's
 * K^T and V^T) goes 16 rows at a time through the same transpose. */
static UFORM_SGEMM_AVX512 void uform_sgemm_avx512_pack_rows(const float *src, size_t stride,
                                                            size_t rows, size_t kb, float *dst) {
    size_t p0 = 0;
    if (rows == 14)
        for (; p0 + 16 <= kb; p0 += 16) {
            __m512i r[16];
#pragma GCC unroll 14
            for (size_t i = 0; i < 14; i++) r[i] = _mm512_loadu_si512(src + i * stride + p0);
            r[14] = r[15] = _mm512_setzero_si512();
            uform_transpose16x16(r);
#pragma GCC unroll 16
            for (size_t p = 0; p < 16; p++)
                _mm512_mask_storeu_epi32(dst + (p0 + p) * 14, 0x3fff, r[p]);
        }
    else if (rows % 16 == 0)
        for (; p0 + 16 <= kb; p0 += 16)
            for (size_t i0 = 0; i0 < rows; i0 += 16) {
                __m512i r[16];
#pragma GCC unroll 16
                for (size_t i = 0; i < 16; i++)
                    r[i] = _mm512_loadu_si512(src + (i0 + i) * stride + p0);
                uform_transpose16x16(r);
#pragma GCC unroll 16
                for (size_t p = 0; p < 16; p++) _mm512_storeu_si512(dst + (p0 + p) * rows + i0, r[p]);
            }
    for (size_t i = 0; i < rows; i++)
        for (size_t p = p0; p < kb; p++) dst[p * rows + i] = src[i * stride + p];
}

const uform_sgemm_kernels_t uform_sgemm_kernels_avx512 = {
    .mr = 14,
    .nr = 32,
    .pack_rows = uform_sgemm_avx512_pack_rows,
    .kernels = {NULL, uform_sgemm_avx512_1, uform_sgemm_avx512_2, uform_sgemm_avx512_3,
                uform_sgemm_avx512_4, uform_sgemm_avx512_5, uform_sgemm_avx512_6,
                uform_sgemm_avx512_7, uform_sgemm_avx512_8, uform_sgemm_avx512_9,
                uform_sgemm_avx512_10, uform_sgemm_avx512_11, uform_sgemm_avx512_12,
                uform_sgemm_avx512_13, uform_sgemm_avx512_14},
};

/* ---- AVX2 + FMA, 6 x 16 ---------------------------------------------------- */

static inline __attribute__((always_inline)) UFORM_SGEMM_AVX2 void
uform_sgemm_avx2_kernel(size_t rows, size_t kc, const float *a, const float *b, float *c,
                        size_t c_stride, bool load, const float *bias) {
    __m256 acc[6][2];
#pragma GCC unroll 6
    for (size_t r = 0; r < rows; r++) {
        acc[r][0] = load ? _mm256_loadu_ps(c + r * c_stride) : _mm256_setzero_ps();
        acc[r][1] = load ? _mm256_loadu_ps(c + r * c_stride + 8) : _mm256_setzero_ps();
    }
    for (size_t p = 0; p < kc; p++) {
        __m256 b0 = _mm256_loadu_ps(b + p * 16);
        __m256 b1 = _mm256_loadu_ps(b + p * 16 + 8);
#pragma GCC unroll 6
        for (size_t r = 0; r < rows; r++) {
            __m256 x = _mm256_broadcast_ss(a + p * rows + r);
            acc[r][0] = _mm256_fmadd_ps(x, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(x, b1, acc[r][1]);
        }
    }
    if (bias) {
        __m256 bias0 = _mm256_loadu_ps(bias), bias1 = _mm256_loadu_ps(bias + 8);
#pragma GCC unroll 6
        for (size_t r = 0; r < rows; r++) {
            acc[r][0] = _mm256_add_ps(acc[r][0], bias0);
            acc[r][1] = _mm256_add_ps(acc[r][1], bias1);
        }
    }
#pragma GCC unroll 6
    for (size_t r = 0; r < rows; r++) {
        _mm256_storeu_ps(c + r * c_stride, acc[r][0]);
        _mm256_storeu_ps(c + r * c_stride + 8, acc[r][1]);
    }
}

#define UFORM_SGEMM_AVX2_KERNEL(R)                                                              \
    static UFORM_SGEMM_AVX2 void uform_sgemm_avx2_##R(size_t kc, const float *a, const float *b, \
                                                       float *c, size_t c_stride, bool load,     \
                                                       const float *bias) {                      \
        uform_sgemm_avx2_kernel(R, kc, a, b, c, c_stride, load, bias);                          \
    }
UFORM_SGEMM_AVX2_KERNEL(1)
UFORM_SGEMM_AVX2_KERNEL(2)
UFORM_SGEMM_AVX2_KERNEL(3)
UFORM_SGEMM_AVX2_KERNEL(4)
UFORM_SGEMM_AVX2_KERNEL(5)
UFORM_SGEMM_AVX2_KERNEL(6)

/* dst[p * rows + r] = src[r * stride + p]: full groups of 6 rows through
 * the 8 x 8 register transpose (avx2_transpose.h), as the HASWELL class packs
 * its activations; the portable copy of the forward pass's and the input
 * gradient's A was ~6% of the GEMMs' time. A multiple of 8 rows (a transposed
 * B's panel of 16 columns: attention's K^T and V^T) goes 8 rows at a time
 * through the same transpose. */
static UFORM_SGEMM_AVX2 void uform_sgemm_avx2_pack_rows(const float *src, size_t stride,
                                                        size_t rows, size_t kb, float *dst) {
    if (rows == 6) {
        uform_avx2_pack6(src, stride, kb, dst);
        return;
    }
    size_t p0 = 0;
    if (rows % 8 == 0)
        for (; p0 + 8 <= kb; p0 += 8)
            for (size_t i0 = 0; i0 < rows; i0 += 8) {
                __m256 m[8];
                for (size_t i = 0; i < 8; i++) m[i] = _mm256_loadu_ps(src + (i0 + i) * stride + p0);
                uform_avx2_transpose8(m);
                for (size_t p = 0; p < 8; p++) _mm256_storeu_ps(dst + (p0 + p) * rows + i0, m[p]);
            }
    for (size_t i = 0; i < rows; i++)
        for (size_t p = p0; p < kb; p++) dst[p * rows + i] = src[i * stride + p];
}

const uform_sgemm_kernels_t uform_sgemm_kernels_avx2 = {
    .mr = 6,
    .nr = 16,
    .pack_rows = uform_sgemm_avx2_pack_rows,
    .kernels = {NULL, uform_sgemm_avx2_1, uform_sgemm_avx2_2, uform_sgemm_avx2_3,
                uform_sgemm_avx2_4, uform_sgemm_avx2_5, uform_sgemm_avx2_6},
};

#endif /* __x86_64__ */
