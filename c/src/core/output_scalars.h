/* output_scalars.h: one FP32 component as each output scalar (uform.h's
 * uform_scalar_t), inline for the CPU backend's download_rows and the CUDA
 * backend's convert_rows alike, so rows converted on the host and on a GPU are
 * the same bits: BF16 (core/internal.h) and F16 round to nearest even; E4M3
 * and E5M2 (core/fp8.h) saturate; I8 is round(127 x) clamped to +-127, NaN 0. */
#ifndef UFORM_CORE_OUTPUT_SCALARS_H
#define UFORM_CORE_OUTPUT_SCALARS_H

#include "core/fp8.h"

/* Round to nearest, ties to even, with overflow to infinity and gradual underflow. */
UFORM_HOST_DEVICE static inline uint16_t uform_f32_to_f16(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof(bits));
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    uint32_t magnitude_bits = bits & 0x7fffffffu;
    if (magnitude_bits > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);   /* NaN */
    if (magnitude_bits >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  /* rounds to inf */
    float magnitude;
    memcpy(&magnitude, &magnitude_bits, sizeof(magnitude));
    if (magnitude_bits < 0x38800000u) {
        /* below the smallest normal 2^-14: multiples of 2^-24, rint ties to even */
        return (uint16_t)(sign | (uint16_t)nearbyintf(magnitude * 0x1p24f));
    }
    uint32_t exponent = (magnitude_bits >> 23) - 112u;
    uint32_t mantissa = magnitude_bits & 0x7fffffu;
    uint32_t half = (exponent << 10) | (mantissa >> 13);
    uint32_t rest = mantissa & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) half += 1;
    return (uint16_t)(sign | half);
}

/* Unit vectors: every component is in [-1, 1]; a fixed scale of 127. */
UFORM_HOST_DEVICE static inline int8_t uform_f32_to_i8(float value) {
    float scaled = nearbyintf(value * 127.0f);
    if (scaled != scaled) scaled = 0.0f; /* NaN: a cast of it would be undefined */
    if (scaled > 127.0f) scaled = 127.0f;
    if (scaled < -127.0f) scaled = -127.0f;
    return (int8_t)scaled;
}

/* Bytes of one row of `width` scalars; 0 for a scalar outputs cannot be. */
UFORM_HOST_DEVICE static inline size_t uform_output_row_bytes(uform_scalar_t scalar, size_t width) {
    switch (scalar) {
    case UFORM_SCALAR_F32: return width * 4;
    case UFORM_SCALAR_BF16:
    case UFORM_SCALAR_F16: return width * 2;
    case UFORM_SCALAR_E4M3:
    case UFORM_SCALAR_E5M2:
    case UFORM_SCALAR_I8: return width;
    case UFORM_SCALAR_B1: return (width + 7) / 8;
    default: return 0;
    }
}

#endif /* UFORM_CORE_OUTPUT_SCALARS_H */
