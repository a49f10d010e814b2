/* reduce.cuh: the block-wide sums the row kernels share. A fixed tree over a
 * fixed block size (UFORM_CUDA_ROW_THREADS): the same inputs give the same
 * bits on every launch, whatever the GPU's timing. */
#ifndef UFORM_CUDA_REDUCE_CUH
#define UFORM_CUDA_REDUCE_CUH

#define UFORM_CUDA_ROW_THREADS 256

/* The sum of every thread's `value` in the block, returned to every thread. */
template <typename T>
__device__ static inline T uform_block_sum(T value, T *shared /* [UFORM_CUDA_ROW_THREADS / 32] */) {
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_down_sync(0xffffffffu, value, offset);
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    __syncthreads();   /* shared may still be read by a previous call */
    if (lane == 0) shared[warp] = value;
    __syncthreads();
    T total = 0;
    for (int w = 0; w < UFORM_CUDA_ROW_THREADS / 32; w++) total += shared[w];
    return total;
}

/* The largest of every thread's `value` in the block (NaN ignored, as fmaxf
 * does), returned to every thread. */
__device__ static inline float uform_block_max(float value, float *shared /* [UFORM_CUDA_ROW_THREADS / 32] */) {
    for (int offset = 16; offset > 0; offset /= 2) value = fmaxf(value, __shfl_down_sync(0xffffffffu, value, offset));
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    __syncthreads();   /* shared may still be read by a previous call */
    if (lane == 0) shared[warp] = value;
    __syncthreads();
    float largest = shared[0];
    for (int w = 1; w < UFORM_CUDA_ROW_THREADS / 32; w++) largest = fmaxf(largest, shared[w]);
    return largest;
}

/* The sum and the largest (NaN ignored) of every lane's `value` in the warp, to
 * every lane: a butterfly, so each lane adds the same values in the same
 * order (the same bits everywhere). */
__device__ static inline float uform_warp_sum(float value) {
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
    return value;
}

__device__ static inline float uform_warp_max(float value) {
    for (int offset = 16; offset > 0; offset /= 2) value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
    return value;
}

#endif /* UFORM_CUDA_REDUCE_CUH */
