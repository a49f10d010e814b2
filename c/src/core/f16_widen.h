/* f16_widen.h: F16 bits to FP32, inline for the CPU's loops and the CUDA
 * backend's kernels alike (backend/cpu/maxsim.c, c/cuda/maxsim.cu).
 *
 * The conversion of Maratyszcza's FP16 library: branchless, exact for every
 * input (normal, subnormal, zero, infinity, NaN), so a row loop vectorises.
 * Normal values: the exponent and mantissa shifted into place with the
 * exponent rebased by 2^112, then scaled back by 2^-112. Subnormal ones: the
 * mantissa placed under the exponent of 0.5, minus 0.5. */
#ifndef UFORM_CORE_F16_WIDEN_H
#define UFORM_CORE_F16_WIDEN_H

#include "core/host_device.h"

#include <stdint.h>
#include <string.h>

UFORM_HOST_DEVICE static inline float uform_f16_widen(uint16_t half) {
    uint32_t w = (uint32_t)half << 16;
    uint32_t sign = w & 0x80000000u;
    uint32_t two_w = w + w;
    uint32_t normal_bits = (two_w >> 4) + (0xe0u << 23);
    uint32_t subnormal_bits = (two_w >> 17) | (126u << 23);
    float normal, subnormal;
    memcpy(&normal, &normal_bits, sizeof(normal));
    memcpy(&subnormal, &subnormal_bits, sizeof(subnormal));
    normal *= 0x1p-112f;
    subnormal -= 0.5f;
    uint32_t normal_out, subnormal_out;
    memcpy(&normal_out, &normal, sizeof(normal_out));
    memcpy(&subnormal_out, &subnormal, sizeof(subnormal_out));
    uint32_t bits = sign | (two_w < (1u << 27) ? subnormal_out : normal_out);
    float result;
    memcpy(&result, &bits, sizeof(result));
    return result;
}

#endif /* UFORM_CORE_F16_WIDEN_H */
