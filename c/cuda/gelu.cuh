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

/* d gelu(v) / dv, each product and sum rounded on its own (__fmul_rn,
 * __fadd_rn: nvcc may not contract them into fused multiply-adds, which it
 * could do differently in each kernel that inlines this: rope.cuh's reason),
 * so gelu_backward and the fused pass of columns.cu give the same bits. */
__device__ static inline float uform_gelu_derivative(float v) {
    const float k = UFORM_CUDA_SQRT_2_OVER_PI;
    float cube = __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, v), v), v);
    float t = __fmul_rn(-2.0f * k, __fadd_rn(v, cube));
    float e = expf(t);
    float s = 1.0f / __fadd_rn(1.0f, e);
    float du = __fmul_rn(k, __fadd_rn(1.0f, __fmul_rn(__fmul_rn(0.134145f, v), v)));
    float derivative = __fadd_rn(s, __fmul_rn(__fmul_rn(__fmul_rn(__fmul_rn(2.0f, v), du), s), __fmul_rn(e, s)));
    derivative = t < -88.0f ? 1.0f : derivative;
    return t > 88.0f ? 0.0f : derivative;
}

/* dx + dy gelu'(x), rounded as gelu_backward adds it (its kernels and the
 * fused pass of columns.cu). */
__device__ static inline float uform_gelu_backward_term(float dx, float dy, float x) {
    return __fadd_rn(dx, __fmul_rn(dy, uform_gelu_derivative(x)));
}

#endif /* UFORM_CUDA_GELU_CUH */
