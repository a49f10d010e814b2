/* gelu.cuh: tanh GELU as the CPU backend computes it, x sigmoid(2u) with
 * u = sqrt(2/pi)(x + 0.044715 x^3): one definition for every kernel that
 * applies it (pointwise.cu's passes, gemm_fp8.cu's epilogue), so that fused
 * and separate passes give the same bits. */
#ifndef UFORM_CUDA_GELU_CUH
#define UFORM_CUDA_GELU_CUH

#define UFORM_CUDA_SQRT_2_OVER_PI 0.7978845608028654f

__device__ static inline float uform_gelu(float v) {
    float t = -2.0f * UFORM_CUDA_SQRT_2_OVER_PI * (v + 0.044715f * v * v * v);
    return t > 88.0f ? 0.0f : v / (1.0f + expf(t));
}

#endif /* UFORM_CUDA_GELU_CUH */
