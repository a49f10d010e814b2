/* rope.cuh: the rotation of one rotary pair, shared by every kernel that
 * rotates (pointwise.cu's rope_forward, attention_mma.cu's staging of
 * inference's BF16 q and k) so that they give the same bits: each product
 * and sum rounded on its own (__fmul_rn, __fadd_rn: nvcc may not contract
 * them into fused multiply-adds, which it would do differently in each
 * kernel). Forward: (x0 c - x1 s, x0 s + x1 c); backward turns by -t. */
#ifndef UFORM_CUDA_ROPE_CUH
#define UFORM_CUDA_ROPE_CUH

__device__ static inline float2 uform_rope_turn(float x0, float x1, float c, float s) {
    return make_float2(__fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s)), __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c)));
}

__device__ static inline float2 uform_rope_turn_back(float x0, float x1, float c, float s) {
    return make_float2(__fadd_rn(__fmul_rn(x0, c), __fmul_rn(x1, s)), __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x0, s)));
}

#endif /* UFORM_CUDA_ROPE_CUH */
