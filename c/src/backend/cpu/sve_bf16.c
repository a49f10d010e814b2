/* sve_bf16.c: SVE BF16 dot products (BFDOT on z registers, FEAT_BF16 with SVE),
 * vector-length agnostic, FP32 sums.
 *
 * As neon_bf16.c at any vector length: x rounded to BF16 in pairs of k while
 * packed; W in the PAIRS layout with panels two vectors wide (nr = 2 x
 * svcntw() columns, as sve.c), so one k pair of a panel is two vectors of
 * BF16 whose 32-bit lanes are the columns in order. A row's pair is broadcast
 * to every lane. Kernel: up to 8 rows x 2 vectors in 16 of the 32 z
 * registers; one or two rows sweep 4 panels at once.
 *
 * BFDOT's arithmetic is the architecture's (products exact, sums rounded to
 * odd, denormals flushed), the same in SVE as in NEON, and every output is the
 * same chain over the pairs in order: the bits of NEON_BF16 at every vector
 * length, independent of the batch. Accumulators are named by macros
 * (sizeless types), as in sve.c. */
#include "backend/cpu/gemm.h"
#include "backend/cpu/e4m3_decode.h"

#if defined(__aarch64__)
#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+sve+bf16")
#include <arm_sve.h>

#define UFORM_SVE_BF16_MR 8
#define UFORM_SVE_BF16_WIDE 4 /* panels per wide kernel call */

#define UFORM_SVE_BF16_EACH_ROW(X, q) X(0, q) X(1, q) X(2, q) X(3, q) X(4, q) X(5, q) X(6, q) X(7, q)
#define UFORM_SVE_BF16_EACH(X) UFORM_SVE_BF16_EACH_ROW(X, 0) UFORM_SVE_BF16_EACH_ROW(X, 1) \
    UFORM_SVE_BF16_EACH_ROW(X, 2) UFORM_SVE_BF16_EACH_ROW(X, 3)

static inline __attribute__((always_inline)) void
uform_sve_bf16_kernel(size_t rows, size_t panels, size_t kc, const uint32_t *a, const uint16_t *b,
                      size_t b_stride, float *c, size_t c_stride, int first, const float *bias) {
    const svbool_t all = svptrue_b32(), all16 = svptrue_b16();
    const size_t vl = svcntw(), nr = 2 * vl;
#define UFORM_SVE_BF16_DECLARE(r, q) \
    svfloat32_t first_##r##_##q = svdup_n_f32(0.0f), second_##r##_##q = svdup_n_f32(0.0f);
    UFORM_SVE_BF16_EACH(UFORM_SVE_BF16_DECLARE)
#define UFORM_SVE_BF16_LOAD(r, q)                                                           \
    if ((r) < rows && (q) < panels && !first) {                                            \
        first_##r##_##q = svld1_f32(all, c + (r) * c_stride + (q) * nr);                   \
        second_##r##_##q = svld1_f32(all, c + (r) * c_stride + (q) * nr + vl);             \
    }
    UFORM_SVE_BF16_EACH(UFORM_SVE_BF16_LOAD)
    size_t pairs = (kc + 1) / 2;
    for (size_t p = 0; p < pairs; p++) {
#define UFORM_SVE_BF16_STEP(r, q)                                                           \
        if ((r) < rows && (q) < panels) {                                                  \
            svbfloat16_t x = svreinterpret_bf16_u32(svdup_n_u32(a[p * rows + (r)]));       \
            first_##r##_##q = svbfdot_f32(first_##r##_##q, low_##q, x);                    \
            second_##r##_##q = svbfdot_f32(second_##r##_##q, high_##q, x);                 \
        }
#define UFORM_SVE_BF16_PANEL(q)                                                             \
        svbfloat16_t low_##q = svreinterpret_bf16_u16(svdup_n_u16(0));                     \
        svbfloat16_t high_##q = low_##q;                                                   \
        if ((q) < panels) {                                                                \
            const uint16_t *src = b + (q) * b_stride + p * 2 * nr;                         \
            low_##q = svreinterpret_bf16_u16(svld1_u16(all16, src));                       \
            high_##q = svreinterpret_bf16_u16(svld1_u16(all16, src + nr));                 \
        }                                                                                  \
        UFORM_SVE_BF16_EACH_ROW(UFORM_SVE_BF16_STEP, q)
        UFORM_SVE_BF16_PANEL(0)
        UFORM_SVE_BF16_PANEL(1)
        UFORM_SVE_BF16_PANEL(2)
        UFORM_SVE_BF16_PANEL(3)
    }
#define UFORM_SVE_BF16_STORE(r, q)                                                          \
    if ((r) < rows && (q) < panels) {                                                      \
        if (bias) {                                                                        \
            first_##r##_##q = svadd_f32_x(all, first_##r##_##q,                            \
                                          svld1_f32(all, bias + (q) * nr));                \
            second_##r##_##q = svadd_f32_x(all, second_##r##_##q,                          \
                                           svld1_f32(all, bias + (q) * nr + vl));          \
        }                                                                                  \
        svst1_f32(all, c + (r) * c_stride + (q) * nr, first_##r##_##q);                    \
        svst1_f32(all, c + (r) * c_stride + (q) * nr + vl, second_##r##_##q);              \
    }
    UFORM_SVE_BF16_EACH(UFORM_SVE_BF16_STORE)
}

#define UFORM_SVE_BF16_KERNEL(R, P)                                                            \
    static void uform_sve_bf16_kernel_##R##x##P(size_t kc, const void *a, const void *b,       \
                                                size_t b_stride, float *c, size_t c_stride,    \
                                                int first, const float *bias) {                \
        uform_sve_bf16_kernel(R, P, kc, a, b, b_stride, c, c_stride, first, bias);             \
    }
UFORM_SVE_BF16_KERNEL(1, 1)
UFORM_SVE_BF16_KERNEL(2, 1)
UFORM_SVE_BF16_KERNEL(3, 1)
UFORM_SVE_BF16_KERNEL(4, 1)
UFORM_SVE_BF16_KERNEL(5, 1)
UFORM_SVE_BF16_KERNEL(6, 1)
UFORM_SVE_BF16_KERNEL(7, 1)
UFORM_SVE_BF16_KERNEL(8, 1)
UFORM_SVE_BF16_KERNEL(1, 4)
UFORM_SVE_BF16_KERNEL(2, 4)

/* The class at this process's vector length (see sve.c). */
static uform_gemm_class_t uform_sve_bf16_gemm(void) {
    uform_gemm_class_t gemm_class = {
        .mr = UFORM_SVE_BF16_MR,
        .nr = 2 * svcntw(),
        .kc = 512,
        .a_bytes = 2,
        .layout = UFORM_GEMM_PAIRS,
        .pack_a = uform_gemm_pack_a_bf16_pairs,
        .kernels = {NULL, uform_sve_bf16_kernel_1x1, uform_sve_bf16_kernel_2x1,
                    uform_sve_bf16_kernel_3x1, uform_sve_bf16_kernel_4x1, uform_sve_bf16_kernel_5x1,
                    uform_sve_bf16_kernel_6x1, uform_sve_bf16_kernel_7x1, uform_sve_bf16_kernel_8x1},
        .wide_panels = UFORM_SVE_BF16_WIDE,
        .wide = {NULL, uform_sve_bf16_kernel_1x4, uform_sve_bf16_kernel_2x4},
        .decode_e4m3 = uform_e4m3_decode_bf16_neon, /* E4M3 tiles in BF16 PAIRS (gemm.h) */
    };
    return gemm_class;
}

static uform_status_t uform_sve_bf16_pack(const uint16_t *weights, size_t n, size_t k,
                                          uform_packed_t *packed) {
    uform_gemm_class_t gemm_class = uform_sve_bf16_gemm();
    return uform_gemm_pack(&gemm_class, weights, n, k, packed);
}

static uform_status_t uform_sve_bf16_pack_e4m3(const uint8_t *codes, const float *scales,
                                               size_t n, size_t k, uform_packed_t *packed) {
    uform_gemm_class_t gemm_class = uform_sve_bf16_gemm();
    return uform_gemm_pack_e4m3(&gemm_class, codes, scales, n, k, packed);
}

static void uform_sve_bf16_gemm_run(uform_executor_t *executor, const uform_packed_t *w,
                                    const float *x, size_t x_stride, size_t m, const float *bias,
                                    uform_gemm_epilogue_t epilogue, float *y, size_t y_stride) {
    uform_gemm_class_t gemm_class = uform_sve_bf16_gemm();
    uform_gemm_run(&gemm_class, executor, w, x, x_stride, m, bias, epilogue, y, y_stride);
}

#pragma GCC pop_options

/* Attention stays FP32 (the SVE kernel), as in neon_bf16.c. */
const uform_cpu_kernels_t uform_cpu_kernels_sve_bf16 = {
    .cpu_class = UFORM_CPU_CLASS_SVE_BF16,
    .name = "sve_bf16",
    .pack = uform_sve_bf16_pack,
    .pack_e4m3 = uform_sve_bf16_pack_e4m3,
    .gemm = uform_sve_bf16_gemm_run,
    .attention = uform_attention_sve,
};

#endif /* __aarch64__ */
