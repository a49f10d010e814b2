/* neon.c: Arm NEON (Armv8-A Advanced SIMD), FP32 sums.
 *
 * Kernel: 6 rows x 16 columns in 24 of the 32 q registers. W stays BF16 in
 * the HALVES layout (gemm.h): 16 columns are two 128-bit loads whose 32-bit
 * lanes hold columns (l, l + 8); a shift by 16 gives columns 0..3 and 4..7
 * as FP32, a mask 8..11 and 12..15. A single row sweeps 4 panels at once.
 *
 * Every output is one fused multiply-add chain over k in order from +0 (or
 * from y), the bias added once at the end: the bits of HASWELL and of the
 * SVE class at every vector length (sve.c), and independent of the batch.
 * NEON is part of the aarch64 baseline: no target attribute is needed. */
#include "backend/cpu/gemm.h"
#include "backend/cpu/e4m3_decode.h"

#if defined(__aarch64__)
#include <arm_neon.h>

#define UFORM_NEON_MR 6
#define UFORM_NEON_NR 16
#define UFORM_NEON_WIDE 4 /* panels per wide kernel call */

/* rows x (panels x 16) outputs; panels > 1 gives one row enough sums. */
static inline __attribute__((always_inline)) void
uform_neon_kernel(size_t rows, size_t panels, bool f32, size_t kc, const float *a, const void *b,
                  size_t b_stride, float *c, size_t c_stride, int first, const float *bias) {
    float32x4_t acc[UFORM_NEON_MR][4 * UFORM_NEON_WIDE];
    size_t vectors = 4 * panels;
#pragma GCC unroll 8
    for (size_t r = 0; r < rows; r++)
#pragma GCC unroll 16
        for (size_t v = 0; v < vectors; v++)
            acc[r][v] = first ? vdupq_n_f32(0.0f) : vld1q_f32(c + r * c_stride + 4 * v);
    const uint32x4_t high = vdupq_n_u32(0xffff0000u);
    for (size_t p = 0; p < kc; p++) {
#pragma GCC unroll 4
        for (size_t q = 0; q < panels; q++) {
            float32x4_t w[4];
            if (f32) { /* a decoded tile, PLAIN order */
                const float *src = (const float *)b + q * b_stride + p * UFORM_NEON_NR;
                for (size_t v = 0; v < 4; v++) w[v] = vld1q_f32(src + 4 * v);
            } else {
                const uint16_t *src = (const uint16_t *)b + q * b_stride + p * UFORM_NEON_NR;
                /* lane l of `low` holds columns l and l + 8, of `upper` l + 4 and l + 12 */
                uint32x4_t low = vreinterpretq_u32_u16(vld1q_u16(src));
                uint32x4_t upper = vreinterpretq_u32_u16(vld1q_u16(src + 8));
                w[0] = vreinterpretq_f32_u32(vshlq_n_u32(low, 16));
                w[1] = vreinterpretq_f32_u32(vshlq_n_u32(upper, 16));
                w[2] = vreinterpretq_f32_u32(vandq_u32(low, high));
                w[3] = vreinterpretq_f32_u32(vandq_u32(upper, high));
            }
#pragma GCC unroll 8
            for (size_t r = 0; r < rows; r++) {
                float x = a[p * rows + r];
#pragma GCC unroll 4
                for (size_t v = 0; v < 4; v++)
                    acc[r][4 * q + v] = vfmaq_n_f32(acc[r][4 * q + v], w[v], x);
            }
        }
    }
#pragma GCC unroll 16
    for (size_t v = 0; v < vectors && bias; v++) {
        float32x4_t bias_v = vld1q_f32(bias + 4 * v);
#pragma GCC unroll 8
        for (size_t r = 0; r < rows; r++) acc[r][v] = vaddq_f32(acc[r][v], bias_v);
    }
#pragma GCC unroll 8
    for (size_t r = 0; r < rows; r++)
#pragma GCC unroll 16
        for (size_t v = 0; v < vectors; v++) vst1q_f32(c + r * c_stride + 4 * v, acc[r][v]);
}

/* uform_neon_kernel_RxP on BF16 panels, uform_neon_f32_RxP on a decoded FP32 tile. */
#define UFORM_NEON_KERNEL(R, P)                                                                \
    static void uform_neon_kernel_##R##x##P(size_t kc, const void *a, const void *b,           \
                                            size_t b_stride, float *c, size_t c_stride,        \
                                            int first, const float *bias) {                    \
        uform_neon_kernel(R, P, false, kc, a, b, b_stride, c, c_stride, first, bias);          \
    }                                                                                          \
    static void uform_neon_f32_##R##x##P(size_t kc, const void *a, const void *b,              \
                                         size_t b_stride, float *c, size_t c_stride,           \
                                         int first, const float *bias) {                       \
        uform_neon_kernel(R, P, true, kc, a, b, b_stride, c, c_stride, first, bias);           \
    }
UFORM_NEON_KERNEL(1, 1)
UFORM_NEON_KERNEL(2, 1)
UFORM_NEON_KERNEL(3, 1)
UFORM_NEON_KERNEL(4, 1)
UFORM_NEON_KERNEL(5, 1)
UFORM_NEON_KERNEL(6, 1)
UFORM_NEON_KERNEL(1, 4)

static const uform_gemm_class_t uform_neon_gemm = {
    .mr = UFORM_NEON_MR,
    .nr = UFORM_NEON_NR,
    .kc = 256,
    .a_bytes = 4,
    .layout = UFORM_GEMM_HALVES,
    .pack_a = uform_gemm_pack_a_f32,
    .kernels = {NULL, uform_neon_kernel_1x1, uform_neon_kernel_2x1, uform_neon_kernel_3x1,
                uform_neon_kernel_4x1, uform_neon_kernel_5x1, uform_neon_kernel_6x1},
    .wide_panels = UFORM_NEON_WIDE,
    .wide = {NULL, uform_neon_kernel_1x4},
    .kernels_f32 = {NULL, uform_neon_f32_1x1, uform_neon_f32_2x1, uform_neon_f32_3x1,
                    uform_neon_f32_4x1, uform_neon_f32_5x1, uform_neon_f32_6x1},
    .wide_f32 = {NULL, uform_neon_f32_1x4},
    .decode_e4m3 = uform_e4m3_decode_f32_neon,
};

static uform_status_t uform_neon_pack(const uint16_t *weights, size_t n, size_t k,
                                      uform_packed_t *packed) {
    return uform_gemm_pack(&uform_neon_gemm, weights, n, k, packed);
}

static uform_status_t uform_neon_pack_e4m3(const uint8_t *codes, const float *scales, size_t n,
                                           size_t k, uform_packed_t *packed) {
    return uform_gemm_pack_e4m3(&uform_neon_gemm, codes, scales, n, k, packed);
}

static void uform_neon_gemm_run(uform_executor_t *executor, const uform_packed_t *w,
                                const float *x, size_t x_stride, size_t m, const float *bias,
                                uform_gemm_epilogue_t epilogue, float *y, size_t y_stride) {
    uform_gemm_run(&uform_neon_gemm, executor, w, x, x_stride, m, bias, epilogue, y, y_stride);
}

const uform_cpu_kernels_t uform_cpu_kernels_neon = {
    .cpu_class = UFORM_CPU_CLASS_NEON,
    .name = "neon",
    .pack = uform_neon_pack,
    .pack_e4m3 = uform_neon_pack_e4m3,
    .gemm = uform_neon_gemm_run,
    .attention = uform_attention_neon,
};

#endif /* __aarch64__ */
