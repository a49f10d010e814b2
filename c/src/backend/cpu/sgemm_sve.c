/* sgemm_sve.c: the SVE microkernels of the FP32 GEMM (sgemm.h), vector-length
 * agnostic.
 *
 * 10 rows x 2 vectors (nr = 2 x svcntw() columns) in 20 of the 32 z
 * registers (12 rows spill one), two loads of B and one broadcast of A per
 * row and step. Each output
 * is the same FMA chain as on the NEON, AVX2 and AVX-512 paths, so all agree
 * bit for bit. The panel width is only known at run time, so the path's table
 * is filled once per process; sgemm.h's tiles hold at most 32 columns, so the
 * path runs up to 512-bit vectors and longer ones use NEON. The accumulators
 * are named by macros (sizeless types, see sve.c). */
#include "backend/cpu/sgemm.h"

#if defined(__aarch64__)
#include <pthread.h>

#pragma GCC push_options
#pragma GCC target("+sve")
#include <arm_sve.h>

#define UFORM_SGEMM_SVE_MR 10

#define UFORM_SGEMM_SVE_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9)

static inline __attribute__((always_inline)) void
uform_sgemm_sve_kernel(size_t rows, size_t kc, const float *a, const float *b, float *c,
                       size_t c_stride, bool load, const float *bias) {
    const svbool_t all = svptrue_b32();
    const size_t vl = svcntw(), nr = 2 * vl;
#define UFORM_SGEMM_SVE_DECLARE(r) \
    svfloat32_t low_##r = svdup_n_f32(0.0f), high_##r = svdup_n_f32(0.0f);
    UFORM_SGEMM_SVE_ROWS(UFORM_SGEMM_SVE_DECLARE)
#define UFORM_SGEMM_SVE_LOAD(r)                                                            \
    if ((r) < rows && load) {                                                             \
        low_##r = svld1_f32(all, c + (r) * c_stride);                                     \
        high_##r = svld1_f32(all, c + (r) * c_stride + vl);                               \
    }
    UFORM_SGEMM_SVE_ROWS(UFORM_SGEMM_SVE_LOAD)
    for (size_t p = 0; p < kc; p++) {
        svfloat32_t b_low = svld1_f32(all, b + p * nr), b_high = svld1_f32(all, b + p * nr + vl);
#define UFORM_SGEMM_SVE_STEP(r)                                                            \
        if ((r) < rows) {                                                                 \
            float x = a[p * rows + (r)];                                                  \
            low_##r = svmla_n_f32_x(all, low_##r, b_low, x);                              \
            high_##r = svmla_n_f32_x(all, high_##r, b_high, x);                           \
        }
        UFORM_SGEMM_SVE_ROWS(UFORM_SGEMM_SVE_STEP)
    }
#define UFORM_SGEMM_SVE_STORE(r)                                                           \
    if ((r) < rows) {                                                                     \
        if (bias) {                                                                       \
            low_##r = svadd_f32_x(all, low_##r, svld1_f32(all, bias));                    \
            high_##r = svadd_f32_x(all, high_##r, svld1_f32(all, bias + vl));             \
        }                                                                                 \
        svst1_f32(all, c + (r) * c_stride, low_##r);                                      \
        svst1_f32(all, c + (r) * c_stride + vl, high_##r);                                \
    }
    UFORM_SGEMM_SVE_ROWS(UFORM_SGEMM_SVE_STORE)
}

#define UFORM_SGEMM_SVE_KERNEL(R)                                                               \
    static void uform_sgemm_sve_##R(size_t kc, const float *a, const float *b, float *c,        \
                                    size_t c_stride, bool load, const float *bias) {            \
        uform_sgemm_sve_kernel(R, kc, a, b, c, c_stride, load, bias);                           \
    }
UFORM_SGEMM_SVE_KERNEL(1)
UFORM_SGEMM_SVE_KERNEL(2)
UFORM_SGEMM_SVE_KERNEL(3)
UFORM_SGEMM_SVE_KERNEL(4)
UFORM_SGEMM_SVE_KERNEL(5)
UFORM_SGEMM_SVE_KERNEL(6)
UFORM_SGEMM_SVE_KERNEL(7)
UFORM_SGEMM_SVE_KERNEL(8)
UFORM_SGEMM_SVE_KERNEL(9)
UFORM_SGEMM_SVE_KERNEL(10)

static size_t uform_sgemm_sve_columns(void) { return 2 * svcntw(); }

#pragma GCC pop_options

static uform_sgemm_kernels_t uform_sgemm_sve_table = {
    .mr = UFORM_SGEMM_SVE_MR,
    .nr = 0, /* 2 x svcntw(), set once (uform_sgemm_sve_fill) */
    .kernels = {NULL, uform_sgemm_sve_1, uform_sgemm_sve_2, uform_sgemm_sve_3, uform_sgemm_sve_4,
                uform_sgemm_sve_5, uform_sgemm_sve_6, uform_sgemm_sve_7, uform_sgemm_sve_8,
                uform_sgemm_sve_9, uform_sgemm_sve_10},
};
static pthread_once_t uform_sgemm_sve_once = PTHREAD_ONCE_INIT;

static void uform_sgemm_sve_fill(void) { uform_sgemm_sve_table.nr = uform_sgemm_sve_columns(); }

size_t uform_sgemm_sve_width(void) {
    pthread_once(&uform_sgemm_sve_once, uform_sgemm_sve_fill);
    return uform_sgemm_sve_table.nr;
}

const uform_sgemm_kernels_t *uform_sgemm_kernels_sve(void) {
    pthread_once(&uform_sgemm_sve_once, uform_sgemm_sve_fill);
    return &uform_sgemm_sve_table;
}

#endif /* __aarch64__ */
