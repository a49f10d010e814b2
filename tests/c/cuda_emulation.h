/* cuda_emulation.h: enough of CUDA's device side to run a kernel's own code
 * on the CPU, for tests of kernels that have never run on a GPU
 * (tests/c/test_attention_mma.cc). Include it, then the .cuh of the kernels,
 * compiled as C++17 with UFORM_CUDA_EMULATION defined.
 *
 * A launch runs the grid's blocks one after another; a block's threads are
 * host threads (std::thread), so `__shared__` (a function's static) is shared
 * by them as on a GPU. __syncthreads is a barrier of the block; a warp's
 * collectives (__shfl_xor_sync, mma.sync m16n8k16) are exchanges through
 * per-warp slots between two barriers of the warp, with every lane arriving
 * as the instruction's `.sync.aligned` requires. mma.sync's fragments follow
 * the PTX ISA's layout for m16n8k16 with .bf16 operands ("Matrix Fragments
 * for mma.m16n8k16 with floating point type"), the layout the kernels were
 * written against: a misreading of it is shared and not caught here; the
 * kernels' indexing, masking, ordering and arithmetic are. Products are
 * summed in float, k in order (the hardware's order differs, within FP32
 * rounding). */
#ifndef UFORM_CUDA_EMULATION_H
#define UFORM_CUDA_EMULATION_H

#ifndef UFORM_CUDA_EMULATION
#define UFORM_CUDA_EMULATION 1
#endif

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <math.h>
#include <mutex>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(n)

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct __attribute__((aligned(16))) float4 {
    float x, y, z, w;
};
struct __attribute__((aligned(8))) float2 {
    float x, y;
};
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline float2 make_float2(float x, float y) { return float2{x, y}; }

struct __nv_bfloat16 {
    uint16_t bits;
};
/* Round to nearest even; NaN stays NaN (quiet). */
static inline __nv_bfloat16 __float2bfloat16_rn(float value) {
    uint32_t bits;
    memcpy(&bits, &value, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return __nv_bfloat16{(uint16_t)((bits >> 16) | 0x40u)};
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return __nv_bfloat16{(uint16_t)(bits >> 16)};
}
static inline uint16_t __bfloat16_as_ushort(__nv_bfloat16 value) { return value.bits; }
static inline float uform_emulated_float(uint16_t bits) {
    uint32_t wide = (uint32_t)bits << 16;
    float value;
    memcpy(&value, &wide, 4);
    return value;
}

/* A reusable barrier of `count` threads. */
class uform_emulated_barrier {
  public:
    void reset(unsigned count) { count_ = count, waiting_ = 0, generation_ = 0; }
    void wait() {
        std::unique_lock<std::mutex> lock(mutex_);
        unsigned generation = generation_;
        if (++waiting_ == count_) {
            waiting_ = 0;
            generation_++;
            changed_.notify_all();
        } else {
            changed_.wait(lock, [&] { return generation != generation_; });
        }
    }

  private:
    std::mutex mutex_;
    std::condition_variable changed_;
    unsigned count_ = 0, waiting_ = 0, generation_ = 0;
};

#define UFORM_EMULATED_WARPS 32   /* blocks of up to 1024 threads */

struct uform_emulated_warp {
    uform_emulated_barrier barrier;
    float values[32];
    uint32_t a[32][4], b[32][2];
};

struct uform_emulated_block {
    uform_emulated_barrier barrier;
    uform_emulated_warp warps[UFORM_EMULATED_WARPS];
};

static thread_local dim3 threadIdx;
static dim3 blockIdx, blockDim, gridDim;
static uform_emulated_block uform_emulated_state;

static inline void __syncthreads() { uform_emulated_state.barrier.wait(); }

static inline uform_emulated_warp &uform_emulated_my_warp() { return uform_emulated_state.warps[threadIdx.x / 32]; }

static inline float __shfl_xor_sync(unsigned mask, float value, int offset) {
    (void)mask;   /* the kernels pass every lane */
    uform_emulated_warp &warp = uform_emulated_my_warp();
    unsigned lane = threadIdx.x % 32;
    warp.values[lane] = value;
    warp.barrier.wait();
    float partner = warp.values[lane ^ (unsigned)offset];
    warp.barrier.wait();   /* every lane read before the slots are reused */
    return partner;
}

/* mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: c += A B over the warp. */
static inline void uform_emulated_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    uform_emulated_warp &warp = uform_emulated_my_warp();
    unsigned lane = threadIdx.x % 32;
    memcpy(warp.a[lane], a, sizeof(warp.a[lane]));
    warp.b[lane][0] = b0, warp.b[lane][1] = b1;
    warp.barrier.wait();
    float A[16][16], B[16][8];
    for (unsigned l = 0; l < 32; l++) {
        unsigned g = l / 4, t = 2 * (l % 4);
        const uint32_t *r = warp.a[l];
        unsigned rows[4] = {g, g + 8, g, g + 8}, columns[4] = {t, t, t + 8, t + 8};
        for (int i = 0; i < 4; i++) {
            A[rows[i]][columns[i]] = uform_emulated_float((uint16_t)(r[i] & 0xffffu));
            A[rows[i]][columns[i] + 1] = uform_emulated_float((uint16_t)(r[i] >> 16));
        }
        B[t][g] = uform_emulated_float((uint16_t)(warp.b[l][0] & 0xffffu));
        B[t + 1][g] = uform_emulated_float((uint16_t)(warp.b[l][0] >> 16));
        B[t + 8][g] = uform_emulated_float((uint16_t)(warp.b[l][1] & 0xffffu));
        B[t + 9][g] = uform_emulated_float((uint16_t)(warp.b[l][1] >> 16));
    }
    warp.barrier.wait();   /* every lane read the slots */
    unsigned g = lane / 4, t = 2 * (lane % 4);
    for (int i = 0; i < 4; i++) {
        unsigned row = g + (i >= 2 ? 8 : 0), column = t + (i & 1);
        float sum = c[i];
        for (int k = 0; k < 16; k++) sum += A[row][k] * B[k][column];
        c[i] = sum;
    }
}

/* kernel<<<grid, threads>>>(arguments...): the blocks in order, each on
 * `threads` host threads. */
template <typename... Parameters, typename... Arguments>
static void uform_emulated_launch(dim3 grid, unsigned threads, void (*kernel)(Parameters...),
                                  Arguments... arguments) {
    gridDim = grid;
    blockDim = dim3(threads);
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx = dim3(x, y, z);
                uform_emulated_state.barrier.reset(threads);
                for (unsigned w = 0; w < UFORM_EMULATED_WARPS; w++) uform_emulated_state.warps[w].barrier.reset(32);
                std::vector<std::thread> block;
                for (unsigned i = 0; i < threads; i++)
                    block.emplace_back([=] {
                        threadIdx = dim3(i);
                        kernel(arguments...);
                    });
                for (std::thread &thread : block) thread.join();
            }
}

#endif /* UFORM_CUDA_EMULATION_H */
