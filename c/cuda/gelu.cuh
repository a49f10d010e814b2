/* gelu.cuh: tanh GELU as the CPU backend computes it, x sigmoid(2u) with
 * u = sqrt(2/pi)(x + 0.044715 x^3), and its derivative: one definition for
 * every kernel that applies them (pointwise.cu's passes, gemm_fp8.cu's
 * epilogue, columns.cu's GELU backward beside the bias gradient), so that
 * fused and separate passes give the same bits. */
#ifndef UFORM_CUDA_GELU_CUH
#define UFORM_CUDA_GELU_CUH

#define UFORM_CUDA_SQRT_2_OVER_PI 0.7978845608028654f

__device__ static inline float uform_gelu(float v) {
    float t = -2.0f * UFORM_CUDA_SQRT_2_OVER_PI * (v + 0.044715f * v * v * v);
    return t > 88.0f ? 0.0f : v / (1.0f + expf(t));
}

/* d gelu(v) / dv */
__device__ static inline float uform_gelu_derivative(float v) {
    float t = -2.0f * UFORM_CUDA_SQRT_2_OVER_PI * (v + 0.044715f * v * v * v);
    float e = expf(t);
    float s = 1.0f / (1.0f + e);
    float du = UFORM_CUDA_SQRT_2_OVER_PI * (1.0f + 0.134145f * v * v);
    float derivative = s + 2.0f * v * du * s * (e * s);
    derivative = t < -88.0f ? 1.0f : derivative;
    return t > 88.0f ? 0.0f : derivative;
}

#endif /* UFORM_CUDA_GELU_CUH */
