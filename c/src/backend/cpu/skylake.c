/* skylake.c: AVX-512F, FP32 sums.
 *
 * Kernel: 14 rows x 32 columns in 28 zmm accumulators (of 32), W in the
 * HALVES layout: one 512-bit load of BF16 is widened to two FP32 vectors by a
 * shift and a mask. One or two rows sweep 4 panels at once, for enough
 * independent sums; E4M3 matrices are decoded per task into FP32 tiles
 * (gemm.h) the same kernels read. Functions carry their own target (see haswell.c). */
#include "backend/cpu/gemm.h"
#include "backend/cpu/e4m3_decode.h"
#include "backend/cpu/e4m3_f16.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define UFORM_SKYLAKE __attribute__((target("avx512f,avx2,fma")))
#define UFORM_SKYLAKE_MR 14
#define UFORM_SKYLAKE_NR 32
#define UFORM_SKYLAKE_WIDE 4 /* panels per wide kernel call */

/* rows x (panels x 32) outputs; panels > 1 gives a few rows enough sums. */
static inline __attribute__((always_inline)) UFORM_SKYLAKE void
uform_skylake_kernel(size_t rows, size_t panels, bool f32, size_t kc, const float *a, const void *b,
                     size_t b_stride, float *c, size_t c_stride, int first, const float *bias) {
    __m512 acc[UFORM_SKYLAKE_MR][2 * UFORM_SKYLAKE_WIDE];
    size_t vectors = 2 * panels;
#pragma GCC unroll 16
    for (size_t r = 0; r < rows; r++)
#pragma GCC unroll 8
        for (size_t v = 0; v < vectors; v++)
            acc[r][v] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + r * c_stride + 16 * v);
    const __m512i high = _mm512_set1_epi32((int)0xffff0000u);
    for (size_t p = 0; p < kc; p++) {
        /* One panel: the sweep's next one (gemm.h) into L2, as sapphire.c */
        if (panels == 1 && b_stride) {
            const char *next = (const char *)b + (b_stride + p * UFORM_SKYLAKE_NR) * (f32 ? 4 : 2);
            _mm_prefetch(next, _MM_HINT_T1);
            if (f32) _mm_prefetch(next + 64, _MM_HINT_T1);
        }
        __m512 w[2 * UFORM_SKYLAKE_WIDE];
#pragma GCC unroll 8
        for (size_t q = 0; q < panels; q++) {
            if (f32) { /* a decoded tile, PLAIN order */
                const float *src = (const float *)b + q * b_stride + p * UFORM_SKYLAKE_NR;
                w[2 * q] = _mm512_loadu_ps(src);
                w[2 * q + 1] = _mm512_loadu_ps(src + 16);
                continue;
            }
            __m512i raw =
                _mm512_loadu_si512((const uint16_t *)b + q * b_stride + p * UFORM_SKYLAKE_NR);
            w[2 * q] = _mm512_castsi512_ps(_mm512_slli_epi32(raw, 16));
            w[2 * q + 1] = _mm512_castsi512_ps(_mm512_and_si512(raw, high));
        }
#pragma GCC unroll 16
        for (size_t r = 0; r < rows; r++) {
            __m512 x = _mm512_set1_ps(a[p * rows + r]);
#pragma GCC unroll 8
            for (size_t v = 0; v < vectors; v++) acc[r][v] = _mm512_fmadd_ps(x, w[v], acc[r][v]);
        }
    }
#pragma GCC unroll 8
    for (size_t v = 0; v < vectors && bias; v++) {
        __m512 bias_v = _mm512_loadu_ps(bias + 16 * v);
#pragma GCC unroll 16
        for (size_t r = 0; r < rows; r++) acc[r][v] = _mm512_add_ps(acc[r][v], bias_v);
    }
#pragma GCC unroll 16
    for (size_t r = 0; r < rows; r++)
#pragma GCC unroll 8
        for (size_t v = 0; v < vectors; v++) _mm512_storeu_ps(c + r * c_stride + 16 * v, acc[r][v]);
}

/* uform_skylake_kernel_RxP on BF16 panels, uform_skylake_f32_RxP on a decoded FP32 tile. */
#define UFORM_SKYLAKE_KERNEL(R, P)                                                              \
    static UFORM_SKYLAKE void uform_skylake_kernel_##R##x##P(                                   \
        size_t kc, const void *a, const void *b, size_t b_stride, float *c,                     \
        size_t c_stride, int first, const float *bias) {                                        \
        uform_skylake_kernel(R, P, false, kc, a, b, b_stride, c, c_stride, first, bias);        \
    }                                                                                           \
    static UFORM_SKYLAKE void uform_skylake_f32_##R##x##P(                                      \
        size_t kc, const void *a, const void *b, size_t b_stride, float *c,                     \
        size_t c_stride, int first, const float *bias) {                                        \
        uform_skylake_kernel(R, P, true, kc, a, b, b_stride, c, c_stride, first, bias);         \
    }
UFORM_SKYLAKE_KERNEL(1, 1)
UFORM_SKYLAKE_KERNEL(2, 1)
UFORM_SKYLAKE_KERNEL(3, 1)
UFORM_SKYLAKE_KERNEL(4, 1)
UFORM_SKYLAKE_KERNEL(5, 1)
UFORM_SKYLAKE_KERNEL(6, 1)
UFORM_SKYLAKE_KERNEL(7, 1)
UFORM_SKYLAKE_KERNEL(8, 1)
UFORM_SKYLAKE_KERNEL(9, 1)
UFORM_SKYLAKE_KERNEL(10, 1)
UFORM_SKYLAKE_KERNEL(11, 1)
UFORM_SKYLAKE_KERNEL(12, 1)
UFORM_SKYLAKE_KERNEL(13, 1)
UFORM_SKYLAKE_KERNEL(14, 1)
UFORM_SKYLAKE_KERNEL(1, 4)
UFORM_SKYLAKE_KERNEL(2, 4)

/* rows x 32 outputs as uform_skylake_kernel's on a decoded FP32 tile (one
 * panel, the same chains over k), reading the panel's E4M3 codes (PLAIN: 32
 * a step of k) and decoding them in registers as the tile decoder does
 * (e4m3_f16.h); `decoded`, when not NULL, receives them as that decoder
 * writes them, for the other row groups' kernels (gemm.h, kernels_e4m3). */
#define UFORM_SKYLAKE_E4M3 __attribute__((target("avx512f,avx2,fma,f16c")))
static inline __attribute__((always_inline)) UFORM_SKYLAKE_E4M3 void
uform_skylake_kernel_e4m3(size_t rows, size_t kc, const float *a, const uint8_t *codes,
                          const float *scales, const uint8_t *next, float *decoded, float *c,
                          size_t c_stride, int first, const float *bias) {
    __m512 acc[UFORM_SKYLAKE_MR][2];
#pragma GCC unroll 16
    for (size_t r = 0; r < rows; r++)
        for (size_t v = 0; v < 2; v++)
            acc[r][v] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + r * c_stride + 16 * v);
    const __m512 two8 = _mm512_set1_ps(256.0f); /* exact: scales are powers of two */
    const __m512 scale0 = _mm512_mul_ps(_mm512_loadu_ps(scales), two8);
    const __m512 scale1 = _mm512_mul_ps(_mm512_loadu_ps(scales + 16), two8);
    for (size_t p = 0; p < kc; p++) {
        const uint8_t *step = codes + p * UFORM_SKYLAKE_NR;
        if (next) _mm_prefetch((const char *)(next + p * UFORM_SKYLAKE_NR), _MM_HINT_T1);
        __m512 w0 = _mm512_mul_ps(_mm512_cvtph_ps(uform_e4m3_to_f16x16(step)), scale0);
        __m512 w1 = _mm512_mul_ps(_mm512_cvtph_ps(uform_e4m3_to_f16x16(step + 16)), scale1);
        if (decoded) {
            _mm512_store_ps(decoded + p * UFORM_SKYLAKE_NR, w0);
            _mm512_store_ps(decoded + p * UFORM_SKYLAKE_NR + 16, w1);
        }
#pragma GCC unroll 16
        for (size_t r = 0; r < rows; r++) {
            __m512 x = _mm512_set1_ps(a[p * rows + r]);
            acc[r][0] = _mm512_fmadd_ps(x, w0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(x, w1, acc[r][1]);
        }
    }
    for (size_t v = 0; v < 2 && bias; v++) {
        __m512 bias_v = _mm512_loadu_ps(bias + 16 * v);
#pragma GCC unroll 16
        for (size_t r = 0; r < rows; r++) acc[r][v] = _mm512_add_ps(acc[r][v], bias_v);
    }
#pragma GCC unroll 16
    for (size_t r = 0; r < rows; r++)
        for (size_t v = 0; v < 2; v++) _mm512_storeu_ps(c + r * c_stride + 16 * v, acc[r][v]);
}

#define UFORM_SKYLAKE_E4M3_KERNEL(R)                                                            \
    static UFORM_SKYLAKE_E4M3 void uform_skylake_kernel_e4m3_##R(                               \
        size_t kc, const void *a, const uint8_t *codes, const float *scales,                    \
        const uint8_t *next, void *decoded, float *c, size_t c_stride, int first,               \
        const float *bias) {                                                                    \
        uform_skylake_kernel_e4m3(R, kc, a, codes, scales, next, decoded, c, c_stride, first,   \
                                  bias);                                                        \
    }
UFORM_SKYLAKE_E4M3_KERNEL(1)
UFORM_SKYLAKE_E4M3_KERNEL(2)
UFORM_SKYLAKE_E4M3_KERNEL(3)
UFORM_SKYLAKE_E4M3_KERNEL(4)
UFORM_SKYLAKE_E4M3_KERNEL(5)
UFORM_SKYLAKE_E4M3_KERNEL(6)
UFORM_SKYLAKE_E4M3_KERNEL(7)
UFORM_SKYLAKE_E4M3_KERNEL(8)
UFORM_SKYLAKE_E4M3_KERNEL(9)
UFORM_SKYLAKE_E4M3_KERNEL(10)
UFORM_SKYLAKE_E4M3_KERNEL(11)
UFORM_SKYLAKE_E4M3_KERNEL(12)
UFORM_SKYLAKE_E4M3_KERNEL(13)
UFORM_SKYLAKE_E4M3_KERNEL(14)

static const uform_gemm_class_t uform_skylake_gemm = {
    .mr = UFORM_SKYLAKE_MR,
    .nr = UFORM_SKYLAKE_NR,
    .kc = 256,
    .a_bytes = 4,
    .layout = UFORM_GEMM_HALVES,
    .pack_a = uform_gemm_pack_a_f32,
    .kernels = {NULL, uform_skylake_kernel_1x1, uform_skylake_kernel_2x1, uform_skylake_kernel_3x1,
                uform_skylake_kernel_4x1, uform_skylake_kernel_5x1, uform_skylake_kernel_6x1,
                uform_skylake_kernel_7x1, uform_skylake_kernel_8x1, uform_skylake_kernel_9x1,
                uform_skylake_kernel_10x1, uform_skylake_kernel_11x1, uform_skylake_kernel_12x1,
                uform_skylake_kernel_13x1, uform_skylake_kernel_14x1},
    .wide_panels = UFORM_SKYLAKE_WIDE,
    .wide = {NULL, uform_skylake_kernel_1x4, uform_skylake_kernel_2x4},
    .kernels_f32 = {NULL, uform_skylake_f32_1x1, uform_skylake_f32_2x1, uform_skylake_f32_3x1,
                    uform_skylake_f32_4x1, uform_skylake_f32_5x1, uform_skylake_f32_6x1,
                    uform_skylake_f32_7x1, uform_skylake_f32_8x1, uform_skylake_f32_9x1,
                    uform_skylake_f32_10x1, uform_skylake_f32_11x1, uform_skylake_f32_12x1,
                    uform_skylake_f32_13x1, uform_skylake_f32_14x1},
    .wide_f32 = {NULL, uform_skylake_f32_1x4, uform_skylake_f32_2x4},
    .decode_e4m3 = uform_e4m3_decode_f32_avx2,
    .row_group_tasks = true,
    .kernels_e4m3 = {NULL, uform_skylake_kernel_e4m3_1, uform_skylake_kernel_e4m3_2,
                     uform_skylake_kernel_e4m3_3, uform_skylake_kernel_e4m3_4,
                     uform_skylake_kernel_e4m3_5, uform_skylake_kernel_e4m3_6,
                     uform_skylake_kernel_e4m3_7, uform_skylake_kernel_e4m3_8,
                     uform_skylake_kernel_e4m3_9, uform_skylake_kernel_e4m3_10,
                     uform_skylake_kernel_e4m3_11, uform_skylake_kernel_e4m3_12,
                     uform_skylake_kernel_e4m3_13, uform_skylake_kernel_e4m3_14},
};

static uform_status_t uform_skylake_pack(const uint16_t *weights, size_t n, size_t k,
                                         uform_packed_t *packed) {
    return uform_gemm_pack(&uform_skylake_gemm, weights, n, k, packed);
}

static uform_status_t uform_skylake_pack_e4m3(const uint8_t *codes, const float *scales, size_t n,
                                              size_t k, uform_packed_t *packed) {
    return uform_gemm_pack_e4m3(&uform_skylake_gemm, codes, scales, n, k, packed);
}

static void uform_skylake_gemm_run(uform_executor_t *executor, const uform_packed_t *w,
                                   const float *x, size_t x_stride, size_t m, const float *bias,
                                   uform_gemm_epilogue_t epilogue, float *y, size_t y_stride) {
    uform_gemm_run(&uform_skylake_gemm, executor, w, x, x_stride, m, bias, epilogue, y, y_stride);
}

const uform_cpu_kernels_t uform_cpu_kernels_skylake = {
    .cpu_class = UFORM_CPU_CLASS_SKYLAKE,
    .name = "skylake",
    .pack = uform_skylake_pack,
    .pack_e4m3 = uform_skylake_pack_e4m3,
    .gemm = uform_skylake_gemm_run,
    .attention = uform_attention_avx512,
};

#endif /* __x86_64__ */
