/* sgemm_neon.c: the Arm NEON microkernels of the FP32 GEMM (sgemm.h).
 *
 * 6 rows x 16 columns in 24 of the 32 q registers, four loads of B and one
 * scalar of A per row and step. Each output is the same FMA chain as on the
 * x86 FMA paths, so NEON agrees with AVX2 and AVX-512 bit for bit (and with
 * the SVE path, which SVE machines with vectors up to 512 bits take). */
#include "backend/cpu/sgemm.h"

#if defined(__aarch64__)
#include <arm_neon.h>

#define UFORM_SGEMM_NEON_MR 6
#define UFORM_SGEMM_NEON_NR 16

static inline __attribute__((always_inline)) void
uform_sgemm_neon_kernel(size_t rows, size_t kc, const float *a, const float *b, float *c,
                        size_t c_stride, bool load, const float *bias) {
    float32x4_t acc[UFORM_SGEMM_NEON_MR][4];
#pragma GCC unroll 6
    for (size_t r = 0; r < rows; r++)
#pragma GCC unroll 4
        for (size_t v = 0; v < 4; v++)
            acc[r][v] = load ? vld1q_f32(c + r * c_stride + 4 * v) : vdupq_n_f32(0.0f);
    for (size_t p = 0; p < kc; p++) {
        const float *panel = b + p * UFORM_SGEMM_NEON_NR;
        float32x4_t w[4] = {vld1q_f32(panel), vld1q_f32(panel + 4), vld1q_f32(panel + 8),
                            vld1q_f32(panel + 12)};
#pragma GCC unroll 6
        for (size_t r = 0; r < rows; r++) {
            float x = a[p * rows + r];
#pragma GCC unroll 4
            for (size_t v = 0; v < 4; v++) acc[r][v] = vfmaq_n_f32(acc[r][v], w[v], x);
        }
    }
    if (bias) {
#pragma GCC unroll 4
        for (size_t v = 0; v < 4; v++) {
            float32x4_t bias_v = vld1q_f32(bias + 4 * v);
#pragma GCC unroll 6
            for (size_t r = 0; r < rows; r++) acc[r][v] = vaddq_f32(acc[r][v], bias_v);
        }
    }
#pragma GCC unroll 6
    for (size_t r = 0; r < rows; r++)
#pragma GCC unroll 4
        for (size_t v = 0; v < 4; v++) vst1q_f32(c + r * c_stride + 4 * v, acc[r][v]);
}

#define UFORM_SGEMM_NEON_KERNEL(R)                                                              \
    static void uform_sgemm_neon_##R(size_t kc, const float *a, const float *b, float *c,       \
                                     size_t c_stride, bool load, const float *bias) {           \
        uform_sgemm_neon_kernel(R, kc, a, b, c, c_stride, load, bias);                          \
    }
UFORM_SGEMM_NEON_KERNEL(1)
UFORM_SGEMM_NEON_KERNEL(2)
UFORM_SGEMM_NEON_KERNEL(3)
UFORM_SGEMM_NEON_KERNEL(4)
UFORM_SGEMM_NEON_KERNEL(5)
UFORM_SGEMM_NEON_KERNEL(6)

const uform_sgemm_kernels_t uform_sgemm_kernels_neon = {
    .mr = UFORM_SGEMM_NEON_MR,
    .nr = UFORM_SGEMM_NEON_NR,
    .kernels = {NULL, uform_sgemm_neon_1, uform_sgemm_neon_2, uform_sgemm_neon_3,
                uform_sgemm_neon_4, uform_sgemm_neon_5, uform_sgemm_neon_6},
};

#endif /* __aarch64__ */
