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
 * MXCSR/FPCR flush modes, and do not depend on the rounding mode. The
 * encoders are inline for the CPU and the CUDA backend's kernels alike
 * (output_scalars.h); the decoders are fp8.c's. */
#ifndef UFORM_CORE_FP8_H
#define UFORM_CORE_FP8_H

#include "core/host_device.h"
#include "core/internal.h"

#include <math.h>

#define UFORM_E4M3_MAX 448.0
#define UFORM_E4M3_MAX_CODE 0x7Eu
#define UFORM_E5M2_MAX 57344.0
#define UFORM_E5M2_MAX_CODE 0x7Bu
#define UFORM_FP8_NAN 0x7Fu

/* x >= 0 rounded to an integer, ties to even (x < 2^52, so the parts are exact). */
UFORM_HOST_DEVICE static inline double uform_round_even(double x) {
    double whole = floor(x), fraction = x - whole;
    if (fraction > 0.5 || (fraction == 0.5 && fmod(whole, 2.0) != 0.0)) whole += 1.0;
    return whole;
}

/* One format: `mantissa` bits, exponent `bias`, largest finite value and code. */
UFORM_HOST_DEVICE static inline uint8_t uform_f64_to_fp8(double value, int mantissa, int bias, double largest,
                                uint8_t largest_code) {
    uint8_t sign = signbit(value) ? 0x80u : 0u;
    if (isnan(value)) return (uint8_t)(sign | UFORM_FP8_NAN);
    double magnitude = fabs(value);
    if (magnitude >= largest) return (uint8_t)(sign | largest_code);
    /* The quantum of the binade holding `magnitude`; below the smallest
     * normal 2^(1 - bias) the subnormal quantum 2^(1 - bias - mantissa). */
    int exponent = 1 - bias;
    if (magnitude >= ldexp(1.0, 1 - bias)) {
        frexp(magnitude, &exponent); /* magnitude = f x 2^exponent, f in [0.5, 1) */
        exponent -= 1;
    }
    double steps = uform_round_even(ldexp(magnitude, mantissa - exponent));
    /* steps counts quanta: below 2^mantissa a subnormal; 2^(mantissa + 1) is
     * the next binade's first value, which the code arithmetic below carries
     * into the exponent field on its own. */
    unsigned code;
    if (exponent == 1 - bias && steps < ldexp(1.0, mantissa)) code = (unsigned)steps;
    else code = ((unsigned)(exponent + bias) << mantissa) + (unsigned)steps - (1u << mantissa);
    if (code > largest_code) code = largest_code; /* cannot happen below `largest` */
    return (uint8_t)(sign | code);
}

UFORM_HOST_DEVICE static inline uint8_t uform_f64_to_e4m3(double value) {
    return uform_f64_to_fp8(value, 3, 7, UFORM_E4M3_MAX, UFORM_E4M3_MAX_CODE);
}

UFORM_HOST_DEVICE static inline uint8_t uform_f64_to_e5m2(double value) {
    return uform_f64_to_fp8(value, 2, 15, UFORM_E5M2_MAX, UFORM_E5M2_MAX_CODE);
}

#ifdef __cplusplus
extern "C" {
#endif
/* Exact (every FP8 value is an FP32 one); NaN codes give a quiet NaN (fp8.c). */
UFORM_INTERNAL float uform_e4m3_to_f32(uint8_t code);
UFORM_INTERNAL float uform_e5m2_to_f32(uint8_t code);
#ifdef __cplusplus
}
#endif

#endif /* UFORM_CORE_FP8_H */
