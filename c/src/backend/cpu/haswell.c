/* haswell.c: AVX2 + FMA, FP32 sums.
 *
 * Kernel: 6 rows x 16 columns in 12 ymm accumulators. W stays BF16 in the
 * HALVES layout: one 256-bit load holds 16 columns, a shift gives columns
 * 0..7 as FP32 and a mask gives 8..15; a single row sweeps 4 panels at
 * once. E4M3 matrices are decoded into BF16 tiles in the same HALVES layout
 * (e4m3_avx2.c, gemm.h), which the same kernels read. The functions carry
 * their own target so the file builds with baseline flags and is only called
 * on AVX2 CPUs. */
#include "backend/cpu/gemm.h"
#include "backend/cpu/avx2_transpose.h"
#include "backend/cpu/e4m3_decode.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define UFORM_HASWELL __attribute__((target("avx2,fma")))
#define UFORM_HASWELL_MR 6
#define UFORM_HASWELL_NR 16
#define UFORM_HASWELL_WIDE 4 /* panels per wide kernel call */

/* One step p of k: the panels' 16 weights of row p (BF16 widened to FP32)
 * times each row's a[p * rows + r] into acc. */
static inline __attribute__((always_inline)) UFORM_HASWELL void
uform_haswell_step(size_t rows, size_t panels, size_t p, const float *a, const void *b,
                   size_t b_stride, __m256 acc[UFORM_HASWELL_MR][2 * UFORM_HASWELL_WIDE]) {
    const __m256i high = _mm256_set1_epi32((int)0xffff0000u);
    __m256 w[2 * UFORM_HASWELL_WIDE];
#pragma GCC unroll 8
    for (size_t q = 0; q < panels; q++) {
        __m256i raw = _mm256_loadu_si256(
            (const __m256i *)((const uint16_t *)b + q * b_stride + p * UFORM_HASWELL_NR));
        w[2 * q] = _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16));
        w[2 * q + 1] = _mm256_castsi256_ps(_mm256_and_si256(raw, high));
    }
#pragma GCC unroll 8
    for (size_t r = 0; r < rows; r++) {
        __m256 x = _mm256_broadcast_ss(a + p * rows + r);
#pragma GCC unroll 8
        for (size_t v = 0; v < 2 * panels; v++) acc[r][v] = _mm256_fmadd_ps(x, w[v], acc[r][v]);
    }
}

/* rows x (panels x 16) outputs; panels > 1 gives one row enough sums. */
static inline __attribute__((always_inline)) UFORM_HASWELL void
uform_haswell_kernel(size_t rows, size_t panels, size_t kc, const float *a, const void *b,
                     size_t b_stride, float *c, size_t c_stride, int first, const float *bias) {
    __m256 acc[UFORM_HASWELL_MR][2 * UFORM_HASWELL_WIDE];
    size_t vectors = 2 * panels;
#pragma GCC unroll 8
    for (size_t r = 0; r < rows; r++)
#pragma GCC unroll 8
        for (size_t v = 0; v < vectors; v++)
            acc[r][v] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(c + r * c_stride + 8 * v);
    if (panels == 1 && b_stride) {
        /* One panel: the sweep's next one (gemm.h) into L2, a 64-byte line per
         * line of this one read (as sapphire.c; there 3-4.5% less time a text
         * at one text per call). A prefetch every step, so each line of
         * weights twice: testing for the even steps took 5 more instructions
         * a step, beside 12 FMAs, than the second prefetch does, and
         * unrolling two steps made the compiler spill accumulators. */
        for (size_t p = 0; p < kc; p++) {
            const char *next = (const char *)b + (b_stride + p * UFORM_HASWELL_NR) * 2;
            _mm_prefetch(next, _MM_HINT_T1);
            uform_haswell_step(rows, panels, p, a, b, b_stride, acc);
        }
    } else {
        for (size_t p = 0; p < kc; p++) uform_haswell_step(rows, panels, p, a, b, b_stride, acc);
    }
#pragma GCC unroll 8
    for (size_t v = 0; v < vectors && bias; v++) {
        __m256 bias_v = _mm256_loadu_ps(bias + 8 * v);
#pragma GCC unroll 8
        for (size_t r = 0; r < rows; r++) acc[r][v] = _mm256_add_ps(acc[r][v], bias_v);
    }
#pragma GCC unroll 8
    for (size_t r = 0; r < rows; r++)
#pragma GCC unroll 8
        for (size_t v = 0; v < vectors; v++) _mm256_storeu_ps(c + r * c_stride + 8 * v, acc[r][v]);
}

/* pack_a: a[p * rows + r] = x[r, p], as uform_gemm_pack_a_f32, with the full
 * 6-row groups transposed in registers (avx2_transpose.h). Moves bits only. */
static UFORM_HASWELL void uform_haswell_pack_a(const float *x, size_t x_stride, size_t rows, size_t kc,
                                               void *a) {
    if (rows == UFORM_HASWELL_MR) uform_avx2_pack6(x, x_stride, kc, a);
    else uform_gemm_pack_a_f32(x, x_stride, rows, kc, a);
}

/* uform_haswell_kernel_RxP: R rows, P panels. */
#define UFORM_HASWELL_KERNEL(R, P)                                                              \
    static UFORM_HASWELL void uform_haswell_kernel_##R##x##P(                                   \
        size_t kc, const void *a, const void *b, size_t b_stride, float *c,                     \
        size_t c_stride, int first, const float *bias) {                                        \
        uform_haswell_kernel(R, P, kc, a, b, b_stride, c, c_stride, first, bias);               \
    }
UFORM_HASWELL_KERNEL(1, 1)
UFORM_HASWELL_KERNEL(2, 1)
UFORM_HASWELL_KERNEL(3, 1)
UFORM_HASWELL_KERNEL(4, 1)
UFORM_HASWELL_KERNEL(5, 1)
UFORM_HASWELL_KERNEL(6, 1)
UFORM_HASWELL_KERNEL(1, 4)

static const uform_gemm_class_t uform_haswell_gemm = {
    .mr = UFORM_HASWELL_MR,
    .nr = UFORM_HASWELL_NR,
    .kc = 256,
    .a_bytes = 4,
    .layout = UFORM_GEMM_HALVES,
    .pack_a = uform_haswell_pack_a,
    .kernels = {NULL, uform_haswell_kernel_1x1, uform_haswell_kernel_2x1, uform_haswell_kernel_3x1,
                uform_haswell_kernel_4x1, uform_haswell_kernel_5x1, uform_haswell_kernel_6x1},
    .wide_panels = UFORM_HASWELL_WIDE,
    .wide = {NULL, uform_haswell_kernel_1x4},
    .decode_e4m3 = uform_e4m3_decode_bf16_halves_avx2,
    .e4m3_halves = true,
    .row_group_tasks = true,
    /* no kernels_e4m3: decoding 16 codes a step in its kernels (e4m3_f16.h)
     * measured 5-10% slower than the tiles on 8-64-byte queries (the 2-core
     * Zen 4, 2026-12-06): its 12 FMAs a step leave no room for the 8
     * decoding operations, two of them multiplications */
};

static uform_status_t uform_haswell_pack(const uint16_t *weights, size_t n, size_t k,
                                         uform_packed_t *packed) {
    return uform_gemm_pack(&uform_haswell_gemm, weights, n, k, packed);
}

static uform_status_t uform_haswell_pack_e4m3(const uint8_t *codes, const float *scales, size_t n,
                                              size_t k, uform_packed_t *packed) {
    return uform_gemm_pack_e4m3(&uform_haswell_gemm, codes, scales, n, k, packed);
}

static void uform_haswell_gemm_run(uform_executor_t *executor, const uform_packed_t *w,
                                   const float *x, size_t x_stride, size_t m, const float *bias,
                                   uform_gemm_epilogue_t epilogue, float *y, size_t y_stride) {
    uform_gemm_run(&uform_haswell_gemm, executor, w, x, x_stride, m, bias, epilogue, y, y_stride);
}

const uform_cpu_kernels_t uform_cpu_kernels_haswell = {
    .cpu_class = UFORM_CPU_CLASS_HASWELL,
    .name = "haswell",
    .pack = uform_haswell_pack,
    .pack_e4m3 = uform_haswell_pack_e4m3,
    .gemm = uform_haswell_gemm_run,
    .attention = uform_attention_avx2,
};

#endif /* __x86_64__ */
