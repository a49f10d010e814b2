/* fp8.h: the two OCP FP8 formats (OCP 8-bit Floating Point Specification,
 * v1.0) as one byte each: E4M3 (bias 7, 3 mantissa bits, largest finite 448,
 * no infinities, S.1111.111 is NaN) and E5M2 (bias 15, 2 mantissa bits,
 * largest finite 57344, IEEE-like infinities and NaNs).
 *
 * Conversions to FP8 round to nearest, ties to even, and saturate: a finite
 * value beyond the largest finite one, or an infinity, becomes the largest
 * finite value of its sign (NVIDIA's __NV_SATFINITE); NaN becomes the NaN code
 * 0x7F with the input's sign. The sign of zero is kept. They work on doubles,
 * so every FP32 input (denormals included) is exact whatever the caller's
 * MXCSR/FPCR flush modes, and do not depend on the rounding mode. */
#ifndef UFORM_CORE_FP8_H
#define UFORM_CORE_FP8_H

#include "core/internal.h"

#define UFORM_E4M3_MAX 448.0
#define UFORM_E4M3_MAX_CODE 0x7Eu
#define UFORM_E5M2_MAX 57344.0
#define UFORM_E5M2_MAX_CODE 0x7Bu
#define UFORM_FP8_NAN 0x7Fu

UFORM_INTERNAL uint8_t uform_f64_to_e4m3(double value);
UFORM_INTERNAL uint8_t uform_f64_to_e5m2(double value);
/* Exact (every FP8 value is an FP32 one); NaN codes give a quiet NaN. */
UFORM_INTERNAL float uform_e4m3_to_f32(uint8_t code);
UFORM_INTERNAL float uform_e5m2_to_f32(uint8_t code);

#endif /* UFORM_CORE_FP8_H */
