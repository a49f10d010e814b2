/* e4m3_decode.h: decoding a block of E4M3 weight codes into a GEMM tile.
 *
 * out[r * width + i] = e4m3(codes[r * width + i]) x scales[i] for r < rows,
 * i < width (a multiple of 8): FP32 (the _f32 decoders) or the BF16 bits of
 * the same value (_bf16). The scales are powers of two chosen at
 * quantization so that every product is a normal number (or zero) in FP32
 * and BF16: the decoded value is exact, and equal on every path below. */
#ifndef UFORM_CPU_E4M3_DECODE_H
#define UFORM_CPU_E4M3_DECODE_H

#include "core/internal.h"

/* The widest tile a decoder is given: slots per tile row, 2 x UFORM_GEMM_NR_MAX
 * (the SIMD decoders keep the row of scales, times 2^8, on their stack). */
#define UFORM_E4M3_WIDTH_MAX 256

typedef void (*uform_e4m3_decode_fn_t)(const uint8_t *codes, size_t rows, size_t width,
                                       const float *scales, void *out);

UFORM_INTERNAL void uform_e4m3_decode_f32_portable(const uint8_t *codes, size_t rows, size_t width,
                                                   const float *scales, void *out);
UFORM_INTERNAL void uform_e4m3_decode_bf16_portable(const uint8_t *codes, size_t rows, size_t width,
                                                    const float *scales, void *out);
#if defined(__x86_64__)
/* e4m3_avx2.c: for every x86 class but SERIAL (they all have AVX2). */
UFORM_INTERNAL void uform_e4m3_decode_f32_avx2(const uint8_t *codes, size_t rows, size_t width,
                                               const float *scales, void *out);
UFORM_INTERNAL void uform_e4m3_decode_bf16_avx2(const uint8_t *codes, size_t rows, size_t width,
                                                const float *scales, void *out);
/* BF16 out in the HALVES order of 16-column panels (gemm.h: each 32-bit lane
 * holds columns l and l + 8), for HASWELL's BF16 kernels; width a multiple
 * of 16. */
UFORM_INTERNAL void uform_e4m3_decode_bf16_halves_avx2(const uint8_t *codes, size_t rows,
                                                       size_t width, const float *scales, void *out);
/* e4m3_avx512.c: BF16 for SAPPHIRE and AMX (AVX-512 BF16): _avx512 takes
 * _vbmi where the CPU has AVX-512 VBMI, _avx512bw (32 codes a step) where
 * not; _vbmi runs only where the CPU has it. */
UFORM_INTERNAL void uform_e4m3_decode_bf16_avx512(const uint8_t *codes, size_t rows, size_t width,
                                                  const float *scales, void *out);
UFORM_INTERNAL void uform_e4m3_decode_bf16_avx512bw(const uint8_t *codes, size_t rows, size_t width,
                                                    const float *scales, void *out);
UFORM_INTERNAL void uform_e4m3_decode_bf16_vbmi(const uint8_t *codes, size_t rows, size_t width,
                                                const float *scales, void *out);
#endif
#if defined(__aarch64__)
/* e4m3_neon.c: for every aarch64 class (NEON is baseline). */
UFORM_INTERNAL void uform_e4m3_decode_f32_neon(const uint8_t *codes, size_t rows, size_t width,
                                               const float *scales, void *out);
UFORM_INTERNAL void uform_e4m3_decode_bf16_neon(const uint8_t *codes, size_t rows, size_t width,
                                                const float *scales, void *out);
#endif

#endif /* UFORM_CPU_E4M3_DECODE_H */
