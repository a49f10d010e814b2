/* neon_bf16.c: Arm NEON BF16 dot products (BFDOT, FEAT_BF16) with FP32 sums.
 *
 * The Arm counterpart of SAPPHIRE: x is rounded to BF16 (nearest, ties to
 * even, as uform_f32_to_bf16) while it is packed into the A panel, as pairs of
 * consecutive k in 32 bits; W is in the PAIRS layout (gemm.h). One BFDOT adds
 * two products to each of 4 FP32 lanes, twice FMLA's work per instruction.
 * Kernel: 6 rows x 16 columns in 24 of the 32 q registers, the rows' pairs
 * taken by lane from one 128-bit load; one row sweeps 4 panels at once.
 *
 * BFDOT's arithmetic is fixed by the architecture, not by FPCR (without
 * FEAT_EBF16's FPCR.EBF, which Linux leaves 0): the two products are exact
 * in FP32, their sum and its addition to the accumulator are rounded to odd,
 * denormals are flushed. Each output is one chain of BFDOTs over the pairs in
 * order from +0 (or from y), the bias added once at the end, so the bits do
 * not depend on the batch, and SVE_BF16 (sve_bf16.c) gives the same ones at
 * every vector length. They differ from SAPPHIRE's (vdpbf16ps rounds to
 * nearest even); both are within the BF16 tolerance of the reference. */
#include "backend/cpu/gemm.h"
#include "backend/cpu/e4m3_decode.h"

#if defined(__aarch64__)
#include <arm_neon.h>

#define UFORM_NEON_BF16 __attribute__((target("arch=armv8.2-a+bf16")))
#define UFORM_NEON_BF16_MR 6
#define UFORM_NEON_BF16_NR 16
#define UFORM_NEON_BF16_WIDE 4 /* panels per wide kernel call */

/* rows x (panels x 16) outputs; panels > 1 gives one row enough sums. */
static inline __attribute__((always_inline)) UFORM_NEON_BF16 void
uform_neon_bf16_kernel(size_t rows, size_t panels, size_t kc, const uint32_t *a, const uint16_t *b,
                       size_t b_stride, float *c, size_t c_stride, int first, const float *bias) {
    float32x4_t acc[UFORM_NEON_BF16_MR][4 * UFORM_NEON_BF16_WIDE];
    size_t vectors = 4 * panels;
#pragma GCC unroll 8
    for (size_t r = 0; r < rows; r++)
#pragma GCC unroll 16
        for (size_t v = 0; v < vectors; v++)
            acc[r][v] = first ? vdupq_n_f32(0.0f) : vld1q_f32(c + r * c_stride + 4 * v);
    size_t pairs = (kc + 1) / 2;
    for (size_t p = 0; p < pairs; p++) {
        const uint32_t *x = a + p * rows;
        /* rows 0-3 by lane of one load where all four exist, the rest one by one */
        bfloat16x8_t front = vreinterpretq_bf16_u32(rows >= 4 ? vld1q_u32(x) : vdupq_n_u32(0));
#pragma GCC unroll 4
        for (size_t q = 0; q < panels; q++) {
            const uint16_t *src = b + q * b_stride + p * 2 * UFORM_NEON_BF16_NR;
            bfloat16x8_t w[4] = {vreinterpretq_bf16_u16(vld1q_u16(src)),
                                 vreinterpretq_bf16_u16(vld1q_u16(src + 8)),
                                 vreinterpretq_bf16_u16(vld1q_u16(src + 16)),
                                 vreinterpretq_bf16_u16(vld1q_u16(src + 24))};
#pragma GCC unroll 8
            for (size_t r = 0; r < rows; r++) {
#pragma GCC unroll 4
                for (size_t v = 0; v < 4; v++) {
                    float32x4_t *sum = &acc[r][4 * q + v];
                    if (rows >= 4 && r < 4) {
                        switch (r) {
                        case 0: *sum = vbfdotq_laneq_f32(*sum, w[v], front, 0); break;
                        case 1: *sum = vbfdotq_laneq_f32(*sum, w[v], front, 1); break;
                        case 2: *sum = vbfdotq_laneq_f32(*sum, w[v], front, 2); break;
                        default: *sum = vbfdotq_laneq_f32(*sum, w[v], front, 3); break;
                        }
                    } else {
                        *sum = vbfdotq_f32(*sum, w[v], vreinterpretq_bf16_u32(vdupq_n_u32(x[r])));
                    }
                }
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

#define UFORM_NEON_BF16_KERNEL(R, P)                                                          \
    static UFORM_NEON_BF16 void uform_neon_bf16_kernel_##R##x##P(                             \
        size_t kc, const void *a, const void *b, size_t b_stride, float *c,                   \
        size_t c_stride, int first, const float *bias) {                                      \
        uform_neon_bf16_kernel(R, P, kc, a, b, b_stride, c, c_stride, first, bias);           \
    }
UFORM_NEON_BF16_KERNEL(1, 1)
UFORM_NEON_BF16_KERNEL(2, 1)
UFORM_NEON_BF16_KERNEL(3, 1)
UFORM_NEON_BF16_KERNEL(4, 1)
UFORM_NEON_BF16_KERNEL(5, 1)
UFORM_NEON_BF16_KERNEL(6, 1)
UFORM_NEON_BF16_KERNEL(1, 4)

static const uform_gemm_class_t uform_neon_bf16_gemm = {
    .mr = UFORM_NEON_BF16_MR,
    .nr = UFORM_NEON_BF16_NR,
    .kc = 512,
    .a_bytes = 2,
    .layout = UFORM_GEMM_PAIRS,
    .pack_a = uform_gemm_pack_a_bf16_pairs,
    .kernels = {NULL, uform_neon_bf16_kernel_1x1, uform_neon_bf16_kernel_2x1,
                uform_neon_bf16_kernel_3x1, uform_neon_bf16_kernel_4x1, uform_neon_bf16_kernel_5x1,
                uform_neon_bf16_kernel_6x1},
    .wide_panels = UFORM_NEON_BF16_WIDE,
    .wide = {NULL, uform_neon_bf16_kernel_1x4},
    .decode_e4m3 = uform_e4m3_decode_bf16_neon, /* E4M3 tiles in BF16 PAIRS (gemm.h) */
};

static uform_status_t uform_neon_bf16_pack(const uint16_t *weights, size_t n, size_t k,
                                           uform_packed_t *packed) {
    return uform_gemm_pack(&uform_neon_bf16_gemm, weights, n, k, packed);
}

static uform_status_t uform_neon_bf16_pack_e4m3(const uint8_t *codes, const float *scales,
                                                size_t n, size_t k, uform_packed_t *packed) {
    return uform_gemm_pack_e4m3(&uform_neon_bf16_gemm, codes, scales, n, k, packed);
}

static void uform_neon_bf16_gemm_run(uform_executor_t *executor, const uform_packed_t *w,
                                     const float *x, size_t x_stride, size_t m, const float *bias,
                                     uform_gemm_epilogue_t epilogue, float *y, size_t y_stride) {
    uform_gemm_run(&uform_neon_bf16_gemm, executor, w, x, x_stride, m, bias, epilogue, y,
                   y_stride);
}

/* Attention stays FP32 (the NEON kernel): its share of the work is small and
 * its FP32 softmax keeps the class's error that of its GEMM inputs. */
const uform_cpu_kernels_t uform_cpu_kernels_neon_bf16 = {
    .cpu_class = UFORM_CPU_CLASS_NEON_BF16,
    .name = "neon_bf16",
    .pack = uform_neon_bf16_pack,
    .pack_e4m3 = uform_neon_bf16_pack_e4m3,
    .gemm = uform_neon_bf16_gemm_run,
    .attention = uform_attention_neon,
};

#endif /* __aarch64__ */
