/* sgemm.h: a general FP32 GEMM for the CPU trainer.
 *
 * The inference GEMM (gemm.h) multiplies by weights packed once to BF16; the
 * trainer keeps FP32 master weights that change every step and also needs
 * products with transposed operands (input and weight gradients), so it uses
 * this one instead, which packs panels of both operands on every call.
 *
 * Determinism contract: every c[i, j] is one chain over p in order 0..k-1,
 * starting from c[i, j] (accumulate) or +0, each step acc = acc + a[i, p] b[p, j]
 * (one FMA on the SIMD paths, a multiply then an add on the portable one;
 * the same in every element of a path), then + bias[j] once at the end. Partial
 * sums are stored to c between k blocks as FP32, which is exact. So the bits of
 * c[i, j] do not depend on m, on the element's tile position, on the thread
 * count or on the split of work, and the AVX2, AVX-512, NEON and SVE paths agree
 * bit for bit (all FMA chains); the portable path differs from them by roundings.
 */
#ifndef UFORM_CPU_SGEMM_H
#define UFORM_CPU_SGEMM_H

#include "backend/backend.h"

/* c[m, n] = (accumulate ? c : 0) + op(a)[m, k] . op(b)[k, n] (+ bias[n] when not NULL),
 * where op(b)[p, j] = b.transposed ? b.data[j * stride + p] : b.data[p * stride + j].
 * Every c[i, j] is one chain over p in order 0..k-1 (FMA or mul+add, the same for every
 * element), starting from c[i, j] (accumulate) or +0, bias added last: bits independent of m,
 * of the element's tile position, of the thread count and of the split of work.
 * executor may be NULL (the calling thread alone). m or n = 0: nothing; k = 0:
 * c = (accumulate ? c : +0) + bias. c must not overlap a, b or bias.
 * Training uses it as
 *   forward       y = x W^T     a = {x, k_in, false},   b = {W, k_in, true}
 *   input grad    dx = dy W     a = {dy, n_out, false}, b = {W, k_in, false}
 *   weight grad   dW += dy^T x  a = {dy, n_out, true},  b = {x, k_in, false}, accumulate */
UFORM_INTERNAL void uform_sgemm(uform_executor_t *executor, size_t m, size_t n, size_t k,
                                uform_matrix_t a, uform_matrix_t b, const float *bias,
                                bool accumulate, float *c, size_t c_stride);

/* ---- paths (for tests and benchmarks) ------------------------------------ */

typedef enum {
    UFORM_SGEMM_AUTO = 0,  /* the best this machine runs */
    UFORM_SGEMM_PORTABLE,  /* plain C, multiply then add */
    UFORM_SGEMM_AVX2,      /* AVX2 + FMA (x86-64) */
    UFORM_SGEMM_AVX512,    /* AVX-512F + FMA (x86-64) */
    UFORM_SGEMM_NEON,      /* Arm NEON (aarch64) */
    UFORM_SGEMM_SVE,       /* Arm SVE up to 512-bit vectors (aarch64) */
} uform_sgemm_path_t;

/* Whether this build and machine run a path (AUTO and PORTABLE always). */
UFORM_INTERNAL bool uform_sgemm_path_supported(uform_sgemm_path_t path);
/* The path AUTO resolves to on this machine (chosen once, then cached). */
UFORM_INTERNAL uform_sgemm_path_t uform_sgemm_best_path(void);
/* The path a CPU class's FP32 products take (a trainer pinned to the class):
 * SERIAL the portable one, HASWELL AVX2, SKYLAKE, SAPPHIRE and AMX AVX-512,
 * NEON and NEON_BF16 NEON, SVE and SVE_BF16 SVE (NEON where the vectors are
 * wider than its tiles); AUTO (or a path this machine lacks) the best one. */
UFORM_INTERNAL uform_sgemm_path_t uform_sgemm_path_of_class(uform_cpu_class_t cpu_class);
/* uform_sgemm on a given path (an unsupported one runs as PORTABLE).
 * small_blocks skips the per-call workspace and uses the small stack blocks of
 * the fallback taken when that allocation fails: the same bits, slower. */
UFORM_INTERNAL void uform_sgemm_path(uform_sgemm_path_t path, bool small_blocks,
                                     uform_executor_t *executor, size_t m, size_t n, size_t k,
                                     uform_matrix_t a, uform_matrix_t b, const float *bias,
                                     bool accumulate, float *c, size_t c_stride);

/* ---- microkernels (sgemm.c, sgemm_avx512.c, sgemm_neon.c, sgemm_sve.c) ----- */

#define UFORM_SGEMM_MR_MAX 14
#define UFORM_SGEMM_NR_MAX 32

/* c[rows, nr] = (load ? c : +0) + a . b over kc steps, then + bias[0 .. nr)
 * when bias is not NULL. a is packed a[p * rows + r]; b is one panel
 * b[p * nr + col]. One function per row count, 1 <= rows <= mr. */
typedef void (*uform_sgemm_kernel_fn_t)(size_t kc, const float *a, const float *b, float *c,
                                        size_t c_stride, bool load, const float *bias);

/* dst[p * rows + r] = src[r * stride + p] for r < rows, p < kb: packs A when
 * op(a) is not transposed (rows <= mr), and a full panel of B when op(b) is
 * transposed (rows = nr). */
typedef void (*uform_sgemm_pack_rows_fn_t)(const float *src, size_t stride, size_t rows,
                                           size_t kb, float *dst);

typedef struct {
    size_t mr, nr;
    uform_sgemm_kernel_fn_t kernels[UFORM_SGEMM_MR_MAX + 1];  /* [rows] */
    uform_sgemm_pack_rows_fn_t pack_rows;                      /* NULL: the portable one */
} uform_sgemm_kernels_t;

UFORM_INTERNAL extern const uform_sgemm_kernels_t uform_sgemm_kernels_portable;
#if defined(__x86_64__)
UFORM_INTERNAL extern const uform_sgemm_kernels_t uform_sgemm_kernels_avx2;
UFORM_INTERNAL extern const uform_sgemm_kernels_t uform_sgemm_kernels_avx512;
#endif
#if defined(__aarch64__)
UFORM_INTERNAL extern const uform_sgemm_kernels_t uform_sgemm_kernels_neon;
/* The SVE path's table, its width (2 x svcntw() columns) filled on first use;
 * call only where SVE runs. */
UFORM_INTERNAL const uform_sgemm_kernels_t *uform_sgemm_kernels_sve(void);
UFORM_INTERNAL size_t uform_sgemm_sve_width(void);
#endif

#endif /* UFORM_CPU_SGEMM_H */
