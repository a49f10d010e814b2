/* serial.c: the portable reference class, plain C11 and FP32 sums.
 *
 * W stays BF16 in panels of 8 columns; a 4 x 8 block of outputs is kept in
 * locals while k runs, which the compiler may vectorise across columns but
 * never reorders along k (no -ffast-math), so each output is one in-order
 * chain of multiply-adds. */
#include "backend/cpu/gemm.h"

#define UFORM_SERIAL_MR 4
#define UFORM_SERIAL_NR 8

static inline void uform_serial_kernel(size_t rows, bool f32, size_t kc, const float *a,
                                       const void *b, float *c, size_t c_stride, int first,
                                       const float *bias) {
    float acc[UFORM_SERIAL_MR][UFORM_SERIAL_NR];
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < UFORM_SERIAL_NR; j++)
            acc[r][j] = first ? 0.0f : c[r * c_stride + j];
    for (size_t p = 0; p < kc; p++) {
        float w[UFORM_SERIAL_NR];
        for (size_t j = 0; j < UFORM_SERIAL_NR; j++)
            w[j] = f32 ? ((const float *)b)[p * UFORM_SERIAL_NR + j]
                       : uform_bf16_to_f32(((const uint16_t *)b)[p * UFORM_SERIAL_NR + j]);
        for (size_t r = 0; r < rows; r++) {
            float v = a[p * rows + r];
            for (size_t j = 0; j < UFORM_SERIAL_NR; j++) acc[r][j] += v * w[j];
        }
    }
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < UFORM_SERIAL_NR; j++)
            c[r * c_stride + j] = bias ? acc[r][j] + bias[j] : acc[r][j];
}

/* One function per row count, so the row loops have constant bounds; the
 * _f32 ones read a decoded FP32 tile (E4M3, gemm.h). */
#define UFORM_SERIAL_KERNEL(R)                                                                 \
    static void uform_serial_kernel_##R(size_t kc, const void *a, const void *b,               \
                                        size_t b_stride, float *c, size_t c_stride, int first, \
                                        const float *bias) {                                   \
        (void)b_stride;                                                                        \
        uform_serial_kernel(R, false, kc, a, b, c, c_stride, first, bias);                     \
    }                                                                                          \
    static void uform_serial_f32_##R(size_t kc, const void *a, const void *b, size_t b_stride, \
                                     float *c, size_t c_stride, int first, const float *bias) { \
        (void)b_stride;                                                                        \
        uform_serial_kernel(R, true, kc, a, b, c, c_stride, first, bias);                      \
    }
UFORM_SERIAL_KERNEL(1)
UFORM_SERIAL_KERNEL(2)
UFORM_SERIAL_KERNEL(3)
UFORM_SERIAL_KERNEL(4)

static const uform_gemm_class_t uform_serial_gemm = {
    .mr = UFORM_SERIAL_MR,
    .nr = UFORM_SERIAL_NR,
    .kc = 256,
    .a_bytes = 4,
    .layout = UFORM_GEMM_PLAIN,
    .pack_a = uform_gemm_pack_a_f32,
    .kernels = {NULL, uform_serial_kernel_1, uform_serial_kernel_2, uform_serial_kernel_3,
                uform_serial_kernel_4},
    .kernels_f32 = {NULL, uform_serial_f32_1, uform_serial_f32_2, uform_serial_f32_3,
                    uform_serial_f32_4},
};

static uform_status_t uform_serial_pack(const uint16_t *weights, size_t n, size_t k,
                                        uform_packed_t *packed) {
    return uform_gemm_pack(&uform_serial_gemm, weights, n, k, packed);
}

static uform_status_t uform_serial_pack_e4m3(const uint8_t *codes, const float *scales, size_t n,
                                             size_t k, uform_packed_t *packed) {
    return uform_gemm_pack_e4m3(&uform_serial_gemm, codes, scales, n, k, packed);
}

static void uform_serial_gemm_run(uform_executor_t *executor, const uform_packed_t *w,
                                  const float *x, size_t x_stride, size_t m, const float *bias,
                                  uform_gemm_epilogue_t epilogue, float *y, size_t y_stride) {
    uform_gemm_run(&uform_serial_gemm, executor, w, x, x_stride, m, bias, epilogue, y, y_stride);
}

const uform_cpu_kernels_t uform_cpu_kernels_serial = {
    .cpu_class = UFORM_CPU_CLASS_SERIAL,
    .name = "serial",
    .pack = uform_serial_pack,
    .pack_e4m3 = uform_serial_pack_e4m3,
    .gemm = uform_serial_gemm_run,
    .attention = uform_attention_portable,
};
