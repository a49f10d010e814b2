/* sapphire.c: AVX-512 BF16 dot products (vdpbf16ps) with FP32 sums.
 *
 * x is rounded to BF16 (nearest, ties to even, as uform_f32_to_bf16) while it
 * is packed into the A panel, as pairs of consecutive k in 32 bits; W is in
 * the PAIRS layout. One vdpbf16ps adds two products per FP32 lane, so the
 * kernel, 14 rows x 32 columns in 28 zmm accumulators, does 32 x 2 products
 * per row and pair of k; one or two rows sweep 4 panels at once. The
 * products of two BF16 are exact in FP32. */
#include "backend/cpu/bf16_avx512.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/e4m3_decode.h"
#include "backend/cpu/e4m3_vbmi.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define UFORM_SAPPHIRE UFORM_SAPPHIRE_TARGET
#define UFORM_SAPPHIRE_MR 14
#define UFORM_SAPPHIRE_NR 32
#define UFORM_SAPPHIRE_WIDE 4 /* panels per wide kernel call */

/* a[p2 * rows + r] = bf16(x[r, 2 p2]) | bf16(x[r, 2 p2 + 1]) << 16: 16 pairs
 * of every row at a time, transposed in registers, each pair index's rows
 * one masked store (the scalar stores of a plain loop were 9% of an encode). */
static UFORM_SAPPHIRE void uform_sapphire_pack_a(const float *x, size_t x_stride, size_t rows,
                                                 size_t kc, void *a) {
    uint32_t *dst = a;
    size_t p = 0;
    __mmask16 keep = (__mmask16)((1u << rows) - 1);
    for (; p + 32 <= kc; p += 32) {
        __m512i m[16];
#pragma GCC unroll 16
        for (size_t r = 0; r < 16; r++)
            m[r] = r < rows ? uform_bf16_pairs32(x + r * x_stride + p) : _mm512_setzero_si512();
        uform_transpose16x16(m);
#pragma GCC unroll 16
        for (size_t t = 0; t < 16; t++)
            _mm512_mask_storeu_epi32(dst + (p / 2 + t) * rows, keep, m[t]);
    }
    for (size_t r = 0; r < rows; r++) {
        const float *row = x + r * x_stride;
        for (size_t q = p; q < kc; q += 2) {
            uint32_t low = uform_f32_to_bf16(row[q]);
            uint32_t high = q + 1 < kc ? uform_f32_to_bf16(row[q + 1]) : 0;
            dst[q / 2 * rows + r] = low | high << 16;
        }
    }
}

/* rows x (panels x 32) outputs; panels > 1 gives a few rows enough sums. */
static inline __attribute__((always_inline)) UFORM_SAPPHIRE void
uform_sapphire_kernel(size_t rows, size_t panels, size_t kc, const uint32_t *a, const uint16_t *b,
                      size_t b_stride, float *c, size_t c_stride, int first, const float *bias) {
    __m512 acc[UFORM_SAPPHIRE_MR][2 * UFORM_SAPPHIRE_WIDE];
    size_t vectors = 2 * panels;
#pragma GCC unroll 16
    for (size_t r = 0; r < rows; r++)
#pragma GCC unroll 8
        for (size_t v = 0; v < vectors; v++)
            acc[r][v] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + r * c_stride + 16 * v);
    size_t pairs = (kc + 1) / 2;
    for (size_t p = 0; p < pairs; p++) {
        __m512bh w[2 * UFORM_SAPPHIRE_WIDE];
#pragma GCC unroll 8
        for (size_t v = 0; v < vectors; v++)
            w[v] = (__m512bh)_mm512_loadu_si512(b + v / 2 * b_stride + p * 2 * UFORM_SAPPHIRE_NR +
                                                v % 2 * 32);
        /* One panel: the sweep's next one (gemm.h) into L2 while this one is
         * multiplied, 128 bytes a step: at one text per call every weight
         * comes from memory once per call (gemm_bench-style loop over 48
         * matrices, 72 MiB: 8% below one hot matrix without it). */
        if (panels == 1 && b_stride) {
            _mm_prefetch((const char *)(b + b_stride + p * 2 * UFORM_SAPPHIRE_NR), _MM_HINT_T1);
            _mm_prefetch((const char *)(b + b_stride + p * 2 * UFORM_SAPPHIRE_NR + 32), _MM_HINT_T1);
        }
#pragma GCC unroll 16
        for (size_t r = 0; r < rows; r++) {
            __m512bh x = (__m512bh)_mm512_set1_epi32((int)a[p * rows + r]);
#pragma GCC unroll 8
            for (size_t v = 0; v < vectors; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], x, w[v]);
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

#define UFORM_SAPPHIRE_KERNEL(R, P)                                                             \
    static UFORM_SAPPHIRE void uform_sapphire_kernel_##R##x##P(                                 \
        size_t kc, const void *a, const void *b, size_t b_stride, float *c,                     \
        size_t c_stride, int first, const float *bias) {                                        \
        uform_sapphire_kernel(R, P, kc, a, b, b_stride, c, c_stride, first, bias);              \
    }
UFORM_SAPPHIRE_KERNEL(1, 1)
UFORM_SAPPHIRE_KERNEL(2, 1)
UFORM_SAPPHIRE_KERNEL(3, 1)
UFORM_SAPPHIRE_KERNEL(4, 1)
UFORM_SAPPHIRE_KERNEL(5, 1)
UFORM_SAPPHIRE_KERNEL(6, 1)
UFORM_SAPPHIRE_KERNEL(7, 1)
UFORM_SAPPHIRE_KERNEL(8, 1)
UFORM_SAPPHIRE_KERNEL(9, 1)
UFORM_SAPPHIRE_KERNEL(10, 1)
UFORM_SAPPHIRE_KERNEL(11, 1)
UFORM_SAPPHIRE_KERNEL(12, 1)
UFORM_SAPPHIRE_KERNEL(13, 1)
UFORM_SAPPHIRE_KERNEL(14, 1)
UFORM_SAPPHIRE_KERNEL(1, 4)
UFORM_SAPPHIRE_KERNEL(2, 4)

/* rows x 32 outputs as uform_sapphire_kernel's (one panel, the same chains
 * over k), reading the panel's E4M3 codes instead of BF16: each pair of k's
 * 64 codes decoded in registers (e4m3_vbmi.h, the tile decoder's steps, so
 * the same BF16 weights), then the same vdpbf16ps. For products of one row
 * group (a short query's), where a decoded tile would be written and read
 * back for one sweep: the decoding overlaps the products, and the codes
 * stream from memory at half the BF16 weights' bytes (`next`, the sweep's
 * next panel, prefetched into L2 as the BF16 kernel does). */
static inline __attribute__((always_inline)) UFORM_E4M3_VBMI_TARGET void
uform_sapphire_kernel_e4m3(size_t rows, size_t kc, const uint32_t *a, const uint8_t *codes,
                           const float *scales, const uint8_t *next, uint16_t *decoded, float *c,
                           size_t c_stride, int first, const float *bias) {
    _Alignas(64) int16_t shifts[2 * UFORM_SAPPHIRE_NR + 32];
    (void)uform_e4m3_scale_shifts(scales, 2 * UFORM_SAPPHIRE_NR, shifts); /* checked: take() */
    __m512 acc[UFORM_SAPPHIRE_MR][2];
#pragma GCC unroll 16
    for (size_t r = 0; r < rows; r++)
        for (size_t v = 0; v < 2; v++)
            acc[r][v] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + r * c_stride + 16 * v);
    const uform_e4m3_vbmi_tables_t tables = uform_e4m3_vbmi_tables();
    const __m512i shift0 = _mm512_loadu_si512(shifts), shift1 = _mm512_loadu_si512(shifts + 32);
    size_t pairs = (kc + 1) / 2;
    for (size_t p = 0; p < pairs; p++) {
        __m512i w0, w1;
        uform_e4m3_vbmi_decode64(codes + p * 2 * UFORM_SAPPHIRE_NR, &tables, shift0, shift1, &w0, &w1);
        if (next) _mm_prefetch((const char *)(next + p * 2 * UFORM_SAPPHIRE_NR), _MM_HINT_T1);
        if (decoded) {
            _mm512_store_si512(decoded + p * 2 * UFORM_SAPPHIRE_NR, w0);
            _mm512_store_si512(decoded + p * 2 * UFORM_SAPPHIRE_NR + 32, w1);
        }
#pragma GCC unroll 16
        for (size_t r = 0; r < rows; r++) {
            __m512bh x = (__m512bh)_mm512_set1_epi32((int)a[p * rows + r]);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], x, (__m512bh)w0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], x, (__m512bh)w1);
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

#define UFORM_SAPPHIRE_E4M3_KERNEL(R)                                                           \
    static UFORM_E4M3_VBMI_TARGET void uform_sapphire_kernel_e4m3_##R(                           \
        size_t kc, const void *a, const uint8_t *codes, const float *scales,                     \
        const uint8_t *next, void *decoded, float *c, size_t c_stride, int first,                \
        const float *bias) {                                                                     \
        uform_sapphire_kernel_e4m3(R, kc, a, codes, scales, next, decoded, c, c_stride, first,   \
                                   bias);                                                        \
    }
UFORM_SAPPHIRE_E4M3_KERNEL(1)
UFORM_SAPPHIRE_E4M3_KERNEL(2)
UFORM_SAPPHIRE_E4M3_KERNEL(3)
UFORM_SAPPHIRE_E4M3_KERNEL(4)
UFORM_SAPPHIRE_E4M3_KERNEL(5)
UFORM_SAPPHIRE_E4M3_KERNEL(6)
UFORM_SAPPHIRE_E4M3_KERNEL(7)
UFORM_SAPPHIRE_E4M3_KERNEL(8)
UFORM_SAPPHIRE_E4M3_KERNEL(9)
UFORM_SAPPHIRE_E4M3_KERNEL(10)
UFORM_SAPPHIRE_E4M3_KERNEL(11)
UFORM_SAPPHIRE_E4M3_KERNEL(12)
UFORM_SAPPHIRE_E4M3_KERNEL(13)
UFORM_SAPPHIRE_E4M3_KERNEL(14)

/* Those kernels decode with VBMI (Zen 4 and 5, Sapphire Rapids have it;
 * Cooper Lake, a SAPPHIRE CPU, does not: it decodes tiles), and only scales
 * that are powers of two the integer decoding takes (what quantization
 * makes; the tiles' floating-point decoding takes any). */
static bool uform_sapphire_e4m3_kernels_take(const float *scales, size_t count) {
    if (!__builtin_cpu_supports("avx512vbmi")) return false;
    _Alignas(64) int16_t shifts[256 + 32];
    for (size_t i = 0; i < count; i += 256)
        if (!uform_e4m3_scale_shifts(scales + i, count - i < 256 ? count - i : 256, shifts)) return false;
    return true;
}

static const uform_gemm_class_t uform_sapphire_gemm = {
    .mr = UFORM_SAPPHIRE_MR,
    .nr = UFORM_SAPPHIRE_NR,
    .kc = 512,
    .a_bytes = 2,
    .layout = UFORM_GEMM_PAIRS,
    .pack_a = uform_sapphire_pack_a,
    .kernels = {NULL, uform_sapphire_kernel_1x1, uform_sapphire_kernel_2x1, uform_sapphire_kernel_3x1,
                uform_sapphire_kernel_4x1, uform_sapphire_kernel_5x1, uform_sapphire_kernel_6x1,
                uform_sapphire_kernel_7x1, uform_sapphire_kernel_8x1, uform_sapphire_kernel_9x1,
                uform_sapphire_kernel_10x1, uform_sapphire_kernel_11x1, uform_sapphire_kernel_12x1,
                uform_sapphire_kernel_13x1, uform_sapphire_kernel_14x1},
    .wide_panels = UFORM_SAPPHIRE_WIDE,
    .wide = {NULL, uform_sapphire_kernel_1x4, uform_sapphire_kernel_2x4},
    .decode_e4m3 = uform_e4m3_decode_bf16_avx512, /* E4M3 tiles in BF16 PAIRS (gemm.h) */
    .row_group_tasks = true,                      /* its kernels prefetch (gemm.h) */
    .kernels_e4m3 = {NULL, uform_sapphire_kernel_e4m3_1, uform_sapphire_kernel_e4m3_2,
                     uform_sapphire_kernel_e4m3_3, uform_sapphire_kernel_e4m3_4,
                     uform_sapphire_kernel_e4m3_5, uform_sapphire_kernel_e4m3_6,
                     uform_sapphire_kernel_e4m3_7, uform_sapphire_kernel_e4m3_8,
                     uform_sapphire_kernel_e4m3_9, uform_sapphire_kernel_e4m3_10,
                     uform_sapphire_kernel_e4m3_11, uform_sapphire_kernel_e4m3_12,
                     uform_sapphire_kernel_e4m3_13, uform_sapphire_kernel_e4m3_14},
    .e4m3_kernels_take = uform_sapphire_e4m3_kernels_take,
};

static uform_status_t uform_sapphire_pack(const uint16_t *weights, size_t n, size_t k,
                                          uform_packed_t *packed) {
    return uform_gemm_pack(&uform_sapphire_gemm, weights, n, k, packed);
}

static uform_status_t uform_sapphire_pack_e4m3(const uint8_t *codes, const float *scales, size_t n,
                                               size_t k, uform_packed_t *packed) {
    return uform_gemm_pack_e4m3(&uform_sapphire_gemm, codes, scales, n, k, packed);
}

static void uform_sapphire_gemm_run(uform_executor_t *executor, const uform_packed_t *w,
                                    const float *x, size_t x_stride, size_t m, const float *bias,
                                    uform_gemm_epilogue_t epilogue, float *y, size_t y_stride) {
    uform_gemm_run(&uform_sapphire_gemm, executor, w, x, x_stride, m, bias, epilogue, y, y_stride);
}

const uform_cpu_kernels_t uform_cpu_kernels_sapphire = {
    .cpu_class = UFORM_CPU_CLASS_SAPPHIRE,
    .name = "sapphire",
    .pack = uform_sapphire_pack,
    .pack_e4m3 = uform_sapphire_pack_e4m3,
    .gemm = uform_sapphire_gemm_run,
    .attention = uform_attention_bf16,
};

#endif /* __x86_64__ */
