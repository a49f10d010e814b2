/* sve.c: Arm SVE, vector-length agnostic, FP32 sums.
 *
 * A W panel is two vectors wide, nr = 2 x svcntw() columns (32 at 512 bits),
 * in the HALVES layout (gemm.h): one load of nr BF16 values holds, in 32-bit
 * lane l, columns l and l + nr/2; a shift gives the first vector of FP32
 * columns, a mask the second. Kernel: up to 8 rows x 2 vectors in 16 of the
 * 32 z registers; one or two rows sweep 4 panels at once. The vector length
 * is read when packing and when multiplying (Linux keeps it fixed for a
 * process unless it calls prctl(PR_SVE_SET_VL), which uform never does).
 *
 * Every output is one fused multiply-add chain over k in order from +0 (or
 * from y), the bias added once at the end, whatever the vector length: SVE
 * at 128, 256 or 512 bits gives the bits of NEON (neon.c) and of HASWELL.
 *
 * ACLE vector types are sizeless (no arrays of them), so the accumulators
 * are named per (row, panel) by macros; the row and panel counts are constants
 * in every instantiation and the unused ones vanish. The file builds with
 * baseline flags: only these functions carry the SVE target. */
#include "backend/cpu/gemm.h"
#include "backend/cpu/e4m3_decode.h"

#if defined(__aarch64__)
#pragma GCC push_options
#pragma GCC target("+sve")
#include <arm_sve.h>

#define UFORM_SVE_MR 8
#define UFORM_SVE_WIDE 4 /* panels per wide kernel call */

#define UFORM_SVE_EACH_ROW(X, q) X(0, q) X(1, q) X(2, q) X(3, q) X(4, q) X(5, q) X(6, q) X(7, q)
#define UFORM_SVE_EACH(X) UFORM_SVE_EACH_ROW(X, 0) UFORM_SVE_EACH_ROW(X, 1) \
    UFORM_SVE_EACH_ROW(X, 2) UFORM_SVE_EACH_ROW(X, 3)

static inline __attribute__((always_inline)) void
uform_sve_kernel(size_t rows, size_t panels, bool f32, size_t kc, const float *a, const void *b,
                 size_t b_stride, float *c, size_t c_stride, int first, const float *bias) {
    const svbool_t all = svptrue_b32(), all16 = svptrue_b16();
    const size_t vl = svcntw(), nr = 2 * vl;
#define UFORM_SVE_DECLARE(r, q) \
    svfloat32_t first_##r##_##q = svdup_n_f32(0.0f), second_##r##_##q = svdup_n_f32(0.0f);
    UFORM_SVE_EACH(UFORM_SVE_DECLARE)
#define UFORM_SVE_LOAD(r, q)                                                                \
    if ((r) < rows && (q) < panels && !first) {                                            \
        first_##r##_##q = svld1_f32(all, c + (r) * c_stride + (q) * nr);                   \
        second_##r##_##q = svld1_f32(all, c + (r) * c_stride + (q) * nr + vl);             \
    }
    UFORM_SVE_EACH(UFORM_SVE_LOAD)
    for (size_t p = 0; p < kc; p++) {
#define UFORM_SVE_STEP(r, q)                                                                \
        if ((r) < rows && (q) < panels) {                                                  \
            float x = a[p * rows + (r)];                                                   \
            first_##r##_##q = svmla_n_f32_x(all, first_##r##_##q, low_##q, x);             \
            second_##r##_##q = svmla_n_f32_x(all, second_##r##_##q, high_##q, x);          \
        }
#define UFORM_SVE_PANEL(q)                                                                  \
        svfloat32_t low_##q = svdup_n_f32(0.0f), high_##q = svdup_n_f32(0.0f);            \
        if ((q) < panels && f32) { /* a decoded tile, PLAIN order */                       \
            const float *src = (const float *)b + (q) * b_stride + p * nr;                 \
            low_##q = svld1_f32(all, src);                                                 \
            high_##q = svld1_f32(all, src + vl);                                           \
        } else if ((q) < panels) {                                                         \
            svuint32_t raw = svreinterpret_u32_u16(                                        \
                svld1_u16(all16, (const uint16_t *)b + (q) * b_stride + p * nr));          \
            low_##q = svreinterpret_f32_u32(svlsl_n_u32_x(all, raw, 16));                  \
            high_##q = svreinterpret_f32_u32(svand_n_u32_x(all, raw, 0xffff0000u));        \
        }                                                                                  \
        UFORM_SVE_EACH_ROW(UFORM_SVE_STEP, q)
        UFORM_SVE_PANEL(0)
        UFORM_SVE_PANEL(1)
        UFORM_SVE_PANEL(2)
        UFORM_SVE_PANEL(3)
    }
#define UFORM_SVE_STORE(r, q)                                                               \
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
    UFORM_SVE_EACH(UFORM_SVE_STORE)
}

/* uform_sve_kernel_RxP on BF16 panels, uform_sve_f32_RxP on a decoded FP32 tile. */
#define UFORM_SVE_KERNEL(R, P)                                                                 \
    static void uform_sve_kernel_##R##x##P(size_t kc, const void *a, const void *b,            \
                                           size_t b_stride, float *c, size_t c_stride,         \
                                           int first, const float *bias) {                     \
        uform_sve_kernel(R, P, false, kc, a, b, b_stride, c, c_stride, first, bias);           \
    }                                                                                          \
    static void uform_sve_f32_##R##x##P(size_t kc, const void *a, const void *b,               \
                                        size_t b_stride, float *c, size_t c_stride,            \
                                        int first, const float *bias) {                        \
        uform_sve_kernel(R, P, true, kc, a, b, b_stride, c, c_stride, first, bias);            \
    }
UFORM_SVE_KERNEL(1, 1)
UFORM_SVE_KERNEL(2, 1)
UFORM_SVE_KERNEL(3, 1)
UFORM_SVE_KERNEL(4, 1)
UFORM_SVE_KERNEL(5, 1)
UFORM_SVE_KERNEL(6, 1)
UFORM_SVE_KERNEL(7, 1)
UFORM_SVE_KERNEL(8, 1)
UFORM_SVE_KERNEL(1, 4)
UFORM_SVE_KERNEL(2, 4)

/* The class at this process's vector length. */
static uform_gemm_class_t uform_sve_gemm(void) {
    uform_gemm_class_t gemm_class = {
        .mr = UFORM_SVE_MR,
        .nr = 2 * svcntw(),
        .kc = 256,
        .a_bytes = 4,
        .layout = UFORM_GEMM_HALVES,
        .pack_a = uform_gemm_pack_a_f32,
        .kernels = {NULL, uform_sve_kernel_1x1, uform_sve_kernel_2x1, uform_sve_kernel_3x1,
                    uform_sve_kernel_4x1, uform_sve_kernel_5x1, uform_sve_kernel_6x1,
                    uform_sve_kernel_7x1, uform_sve_kernel_8x1},
        .wide_panels = UFORM_SVE_WIDE,
        .wide = {NULL, uform_sve_kernel_1x4, uform_sve_kernel_2x4},
        .kernels_f32 = {NULL, uform_sve_f32_1x1, uform_sve_f32_2x1, uform_sve_f32_3x1,
                        uform_sve_f32_4x1, uform_sve_f32_5x1, uform_sve_f32_6x1,
                        uform_sve_f32_7x1, uform_sve_f32_8x1},
        .wide_f32 = {NULL, uform_sve_f32_1x4, uform_sve_f32_2x4},
        .decode_e4m3 = uform_e4m3_decode_f32_neon, /* the tile decode needs no vector length */
    };
    return gemm_class;
}

static uform_status_t uform_sve_pack(const uint16_t *weights, size_t n, size_t k,
                                     uform_packed_t *packed) {
    uform_gemm_class_t gemm_class = uform_sve_gemm();
    return uform_gemm_pack(&gemm_class, weights, n, k, packed);
}

static uform_status_t uform_sve_pack_e4m3(const uint8_t *codes, const float *scales, size_t n,
                                          size_t k, uform_packed_t *packed) {
    uform_gemm_class_t gemm_class = uform_sve_gemm();
    return uform_gemm_pack_e4m3(&gemm_class, codes, scales, n, k, packed);
}

static void uform_sve_gemm_run(uform_executor_t *executor, const uform_packed_t *w, const float *x,
                               size_t x_stride, size_t m, const float *bias,
                               uform_gemm_epilogue_t epilogue, float *y, size_t y_stride) {
    uform_gemm_class_t gemm_class = uform_sve_gemm();
    uform_gemm_run(&gemm_class, executor, w, x, x_stride, m, bias, epilogue, y, y_stride);
}

#pragma GCC pop_options

const uform_cpu_kernels_t uform_cpu_kernels_sve = {
    .cpu_class = UFORM_CPU_CLASS_SVE,
    .name = "sve",
    .pack = uform_sve_pack,
    .pack_e4m3 = uform_sve_pack_e4m3,
    .gemm = uform_sve_gemm_run,
    .attention = uform_attention_sve,
};

#endif /* __aarch64__ */
