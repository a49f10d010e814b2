/* bf16.cuh: BF16 operands as 16-bit words in device code: the conversions
 * the kernels that write or read them share (nearest even to BF16; BF16 to
 * FP32 is exact). Under the emulation, emulation.h's. */
#ifndef UFORM_CUDA_BF16_CUH
#define UFORM_CUDA_BF16_CUH

#ifndef UFORM_CUDA_EMULATION
#include <cuda_bf16.h>
#endif

__device__ static inline uint16_t uform_bf16_bits(float value) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(value));
}

__device__ static inline float uform_bf16_float(uint16_t bits) {
#ifdef UFORM_CUDA_EMULATION
    return uform_emulated_float(bits);
#else
    return __uint_as_float((unsigned)bits << 16);
#endif
}

/* Two values rounded and packed as one 32-bit word, the first in the low half
 * (the lower address). */
__device__ static inline uint32_t uform_bf16_pair(float low, float high) {
    return (uint32_t)uform_bf16_bits(low) | (uint32_t)uform_bf16_bits(high) << 16;
}

/* One output element, FP32 or BF16 (uint16_t): the kernels that write either. */
__device__ static inline void uform_store(float *target, float value) { *target = value; }
__device__ static inline void uform_store(uint16_t *target, float value) { *target = uform_bf16_bits(value); }

#endif /* UFORM_CUDA_BF16_CUH */
