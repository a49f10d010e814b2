/* emulation.h: enough of CUDA to run the CUDA backend's own code on the CPU,
 * for tests of kernels no GPU has run yet. Compiled as C++17 with
 * UFORM_CUDA_EMULATION defined (cuda_internal.h then includes this instead
 * of the CUDA headers): tests/c/test_attention_mma.cc runs the tensor-core
 * attention kernels this way, and `make test-cuda-emulated` builds the whole
 * backend but cuBLASLt so and runs tests/gpu/test_cuda_ops.c against it.
 *
 * A launch runs the grid's blocks one after another, synchronously (so a
 * stream is only a name); a block's threads are fibers (ucontext) taking
 * turns on the launching thread, each running until it waits at a barrier,
 * so `__shared__` (a function's static) is shared by them as on a GPU.
 * __syncthreads is a barrier of the block; a warp's collectives
 * (__shfl_xor_sync, __shfl_down_sync, mma.sync m16n8k16, ldmatrix) are
 * exchanges through per-warp slots between two barriers of the warp, with
 * every lane arriving as `.sync.aligned` requires. cp.async copies are made
 * when their thread waits for their group (the target holds NaN bytes until
 * then). mma.sync's fragments follow the PTX
 * ISA's layout for m16n8k16 with .bf16 operands ("Matrix Fragments for
 * mma.m16n8k16 with floating point type"), the layout the kernels were written
 * against: a misreading of it is shared and not caught here; the kernels'
 * indexing, masking, ordering and arithmetic are. Products are summed in
 * float, k in order (the hardware's order differs, within FP32 rounding).
 * Device memory is host memory (malloc), so AddressSanitizer sees a kernel's
 * reads and writes out of bounds. Not emulated: timing, data races between a
 * block's threads (they take turns, switching only at barriers: a race a
 * barrier should have ordered shows only if this order exposes it), and
 * anything of cuBLASLt (gemm.cu multiplies on the host instead).
 *
 * UFORM_EMULATION_DEVICES=N in the environment (1 to 8; 1 without it) makes N
 * devices visible, sharing the host's memory: a trainer over several GPUs
 * steps them from threads of its own, so a launch holds its translation
 * unit's lock (the state above, `__shared__` and the indices are statics of
 * the unit) and launches from several threads take turns.
 *
 * UFORM_EMULATION_ORDER=reverse in the environment runs the blocks of a grid
 * and the threads of a block in the opposite order (last first), so that a
 * read a missing barrier leaves unordered sees the other side of the race:
 * `make test-cuda-emulated` runs test_cuda_ops both ways, and a kernel whose
 * results differ between them has a race. UFORM_EMULATION_ORDER=warps runs
 * each warp as far as it can go (until its threads wait at __syncthreads)
 * before the next warp starts: the warps as far apart as a GPU may let them
 * drift, where the other orders keep them in step (a warp collective is a
 * barrier of the warp); test_attention_mma.cc sets it itself
 * (uform_emulated_order) for a second run of its kernels. */
#ifndef UFORM_CUDA_EMULATION_H
#define UFORM_CUDA_EMULATION_H

#ifndef UFORM_CUDA_EMULATION
#define UFORM_CUDA_EMULATION 1
#endif

#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <math.h>
#include <mutex>
#include <ucontext.h>
#include <unistd.h>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __forceinline__ inline

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
struct __attribute__((aligned(8))) uint2 {
    unsigned x, y;
};
struct __attribute__((aligned(16))) uint4 {
    unsigned x, y, z, w;
};
/* Single roundings as written (the host's -O1 x86-64 build emits no FMA). */
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
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

/* cuda_fp8.h's conversion to FP8, for E4M3 with __NV_SATFINITE only (what
 * gemm.cu asks): round to nearest even, a magnitude beyond 448 (infinities
 * too) becomes 448 of its sign, NaN the NaN code 0x7F with its sign; the
 * sign of zero kept. Written from the OCP FP8 specification, not from
 * c/src/core/fp8.c, which the tests use as its oracle. */
typedef unsigned char __nv_fp8_storage_t;
enum __nv_saturation_t { __NV_NOSAT, __NV_SATFINITE };
enum __nv_fp8_interpretation_t { __NV_E4M3, __NV_E5M2 };
static inline __nv_fp8_storage_t __nv_cvt_float_to_fp8(float value, __nv_saturation_t saturation,
                                                       __nv_fp8_interpretation_t format) {
    if (saturation != __NV_SATFINITE || format != __NV_E4M3) abort();   /* not emulated */
    uint32_t bits;
    memcpy(&bits, &value, 4);
    unsigned char sign = (unsigned char)((bits >> 24) & 0x80u);
    float magnitude = fabsf(value);
    if (magnitude != magnitude) return (unsigned char)(sign | 0x7Fu);
    if (magnitude >= 448.0f) return (unsigned char)(sign | 0x7Eu);
    /* the spacing of E4M3 values near the magnitude: 2^(e - 3) in binade
     * [2^e, 2^(e+1)), e >= -6 (below, the subnormals' 2^-9) */
    int e;
    frexpf(magnitude, &e);   /* magnitude = f 2^e, f in [0.5, 1) */
    int binade = e - 1 < -6 ? -6 : e - 1;
    float spacing = ldexpf(1.0f, binade - 3);
    float rounded = nearbyintf(magnitude / spacing) * spacing;   /* exact scalings; ties to even */
    if (rounded < 0.015625f) return (unsigned char)(sign | (unsigned)(rounded * 512.0f));   /* 0 .. 8 x 2^-9 */
    frexpf(rounded, &e);
    int exponent = e - 1;    /* rounded = (8 + mantissa) 2^(exponent - 3) */
    unsigned mantissa = (unsigned)(ldexpf(rounded, 3 - exponent) - 8.0f);
    return (unsigned char)(sign | (unsigned)((exponent + 7) << 3) | mantissa);
}

/* A block's threads are fibers on the launching thread, one running at a
 * time: a thread runs until it waits at a barrier, then the next one runs.
 * Deterministic, and cheap enough for blocks of 256 threads. A fiber starts
 * on its own stack through makecontext and setcontext; after that every
 * switch is GCC's __builtin_setjmp/__builtin_longjmp (the stack and frame
 * pointers and a label; the compiler saves the other registers around the
 * setjmp), not swapcontext, which made a system call (the signal mask) at
 * each switch and, under ASan, cleared the shadow of the whole target stack
 * (90% of make test-cuda-emulated's time), nor _longjmp, whose ASan
 * interceptor unpoisons the stack and asks for the signal stack each time.
 * ASan is told of each switch by its fiber annotations, so it knows which
 * stack runs. A thread's frames are all returned when it ends but the first
 * (uform_emulated_thread, no addressable locals), so its stack holds no
 * poisoned bytes for the next block's thread. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define UFORM_EMULATED_START_SWITCH(save, bottom, size) __sanitizer_start_switch_fiber(save, bottom, size)
#define UFORM_EMULATED_FINISH_SWITCH(save, bottom, size) __sanitizer_finish_switch_fiber(save, bottom, size)
#else
#define UFORM_EMULATED_START_SWITCH(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#define UFORM_EMULATED_FINISH_SWITCH(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#endif
typedef void *uform_emulated_jump_t[5]; /* __builtin_setjmp's buffer */
/* The functions that switch are not instrumented: ASan would call
 * __asan_handle_no_return before each jump (unpoisoning the rest of the
 * stack and asking the kernel for the signal stack), there to clean up frames
 * a jump abandons; these jumps abandon none (a waiting thread's frames live
 * on, an ended thread's have returned). */
#define UFORM_EMULATED_SWITCHES __attribute__((no_sanitize_address))

/* Jumps to a __builtin_setjmp (from a function of its own: GCC's rule). */
static UFORM_EMULATED_SWITCHES __attribute__((noinline, noreturn)) void uform_emulated_jump(uform_emulated_jump_t target) {
    __builtin_longjmp(target, 1);
}
struct uform_emulated_barrier {
    unsigned count = 0, arrived = 0, generation = 0;
    void reset(unsigned threads) { count = threads, arrived = 0, generation = 0; }
    inline void wait();
};

#define UFORM_EMULATED_WARPS 32                 /* blocks of up to 1024 threads */
#define UFORM_EMULATED_STACK ((size_t)128 << 10)  /* bytes of stack per thread (ASan's redzones included) */

struct uform_emulated_warp {
    uform_emulated_barrier barrier;
    double values[32];   /* a register of each lane (float, double, an integer) */
    uint32_t a[32][4], b[32][2];
    const uint16_t *rows[32];   /* ldmatrix: the row each lane addresses */
};

/* cp.async: a thread's copies, made when it waits for their group; until
 * then the target holds 0xFF bytes (NaN as BF16 or FP32), written at issue.
 * So a read that a missing wait leaves early, and a read of a buffer the
 * next copy was issued into before a barrier ordered them, see NaN. */
struct uform_emulated_copy {
    void *target;
    const void *source;
    unsigned source_bytes;   /* of the 16 copied: fewer, the rest is zeros */
};
struct uform_emulated_copies {
    std::vector<uform_emulated_copy> open;               /* issued, not yet committed */
    std::deque<std::vector<uform_emulated_copy>> groups;  /* committed, oldest first */
};

struct uform_emulated_fiber {
    ucontext_t context;   /* its start, on its stack */
    uform_emulated_jump_t resume; /* where it goes on after a wait */
    void *fake_stack;     /* ASan's, while it is switched out */
    bool started, done;
};

static struct {
    uform_emulated_barrier barrier;   /* __syncthreads */
    uform_emulated_warp warps[UFORM_EMULATED_WARPS];
    uform_emulated_jump_t scheduler; /* where the launch goes on when a thread waits or ends */
    void *scheduler_fake_stack;   /* ASan's, while a thread runs */
    const void *launch_stack;     /* the launching thread's stack, for ASan */
    size_t launch_stack_size;
    std::vector<uform_emulated_fiber> fibers;
    std::vector<uform_emulated_copies> copies;   /* a thread's cp.async */
    std::vector<char> stacks;
    std::function<void()> body;   /* the kernel with its arguments */
    unsigned current;
    unsigned long long progress;  /* arrivals and finished threads: a pass without any is a deadlock */
} uform_emulated_state;

static dim3 threadIdx, blockIdx, blockDim, gridDim;   /* threadIdx: the running thread's */

/* The order blocks and threads take turns in (see the header); -1 until the
 * first launch reads UFORM_EMULATION_ORDER, or a test sets it. */
enum { UFORM_EMULATED_IN_ORDER, UFORM_EMULATED_IN_REVERSE, UFORM_EMULATED_BY_WARP };
static int uform_emulated_order = -1;
static std::mutex uform_emulated_launch_lock;   /* the unit's statics above, one launch at a time */

/* The running thread waits: back to the launch, on from here at its next turn. */
static UFORM_EMULATED_SWITCHES void uform_emulated_yield() {
    auto &state = uform_emulated_state;
    uform_emulated_fiber &fiber = state.fibers[state.current];
    if (__builtin_setjmp(fiber.resume)) {
        UFORM_EMULATED_FINISH_SWITCH(fiber.fake_stack, nullptr, nullptr);
        return;
    }
    UFORM_EMULATED_START_SWITCH(&fiber.fake_stack, state.launch_stack, state.launch_stack_size);
    uform_emulated_jump(state.scheduler);
}

inline void uform_emulated_barrier::wait() {
    unsigned entered = generation;
    uform_emulated_state.progress++;
    if (++arrived == count) {
        arrived = 0;
        generation++;
        return;
    }
    while (generation == entered) uform_emulated_yield();
}

static UFORM_EMULATED_SWITCHES void uform_emulated_thread() {
    auto &state = uform_emulated_state;
    UFORM_EMULATED_FINISH_SWITCH(nullptr, &state.launch_stack, &state.launch_stack_size);
    uform_emulated_state.body();
    const uform_emulated_copies &copies = uform_emulated_state.copies[uform_emulated_state.current];
    if (!copies.open.empty() || !copies.groups.empty()) {
        fprintf(stderr, "emulated launch: thread %u returned with cp.async copies not waited for\n",
                uform_emulated_state.current);
        abort();
    }
    uform_emulated_state.fibers[uform_emulated_state.current].done = true;
    uform_emulated_state.progress++;
    UFORM_EMULATED_START_SWITCH(nullptr, state.launch_stack, state.launch_stack_size); /* its stack is done */
    uform_emulated_jump(state.scheduler); /* never returns: its stack is reused by the next block */
}

/* The launch gives thread i its turn: starts it, or resumes it where it
 * waited; returns when it waits again or ends. (Its own function: the frame
 * of the setjmp lives until the thread jumps back into it.) */
static UFORM_EMULATED_SWITCHES void uform_emulated_turn(unsigned i) {
    auto &state = uform_emulated_state;
    uform_emulated_fiber &fiber = state.fibers[i];
    if (__builtin_setjmp(state.scheduler)) {
        UFORM_EMULATED_FINISH_SWITCH(state.scheduler_fake_stack, nullptr, nullptr);
        return;
    }
    UFORM_EMULATED_START_SWITCH(&state.scheduler_fake_stack, fiber.context.uc_stack.ss_sp, fiber.context.uc_stack.ss_size);
    if (!fiber.started) {
        fiber.started = true;
        setcontext(&fiber.context);
        fprintf(stderr, "emulated launch: setcontext failed\n");
        abort();
    }
    uform_emulated_jump(fiber.resume);
}

static inline void __syncthreads() { uform_emulated_state.barrier.wait(); }

static inline uform_emulated_warp &uform_emulated_my_warp() { return uform_emulated_state.warps[threadIdx.x / 32]; }


template <typename T>
static inline T uform_emulated_exchange(T value, unsigned from) {
    static_assert(sizeof(T) <= sizeof(double), "a register");
    uform_emulated_warp &warp = uform_emulated_my_warp();
    unsigned lane = threadIdx.x % 32;
    memcpy(&warp.values[lane], &value, sizeof(T));
    warp.barrier.wait();
    T partner;
    memcpy(&partner, &warp.values[from < 32 ? from : lane], sizeof(T));
    warp.barrier.wait();   /* every lane read before the slots are reused */
    return partner;
}

template <typename T>
static inline T __shfl_xor_sync(unsigned mask, T value, int offset) {
    (void)mask;   /* the kernels pass every lane */
    return uform_emulated_exchange(value, (threadIdx.x % 32) ^ (unsigned)offset);
}

/* __shfl_down_sync: lanes past the end get their own value, as on a GPU. */
template <typename T>
static inline T __shfl_down_sync(unsigned mask, T value, unsigned offset) {
    (void)mask;
    return uform_emulated_exchange(value, threadIdx.x % 32 + offset);
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

/* ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lane l addresses row l % 8
 * of matrix l / 8 (16 bytes: 8 BF16); register i of lane l receives matrix
 * i's row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1 (the low half the
 * first), or with .trans its column l / 4, rows 2 (l % 4) and 2 (l % 4) + 1. */
static inline void uform_emulated_ldmatrix(uint32_t r[4], const uint16_t *address, bool transposed) {
    uform_emulated_warp &warp = uform_emulated_my_warp();
    unsigned lane = threadIdx.x % 32;
    if ((uintptr_t)address % 16) {
        fprintf(stderr, "emulated ldmatrix: lane %u's row address is not 16-byte aligned\n", lane);
        abort();
    }
    warp.rows[lane] = address;
    warp.barrier.wait();
    unsigned row = lane / 4, pair = 2 * (lane % 4);
    for (unsigned i = 0; i < 4; i++) {
        const uint16_t *const *matrix = warp.rows + 8 * i;
        uint16_t low = transposed ? matrix[pair][row] : matrix[row][pair];
        uint16_t high = transposed ? matrix[pair + 1][row] : matrix[row][pair + 1];
        r[i] = (uint32_t)low | (uint32_t)high << 16;
    }
    warp.barrier.wait();   /* every lane read the addresses */
}

/* cp.async.cg.shared.global [target], [source], 16, source_bytes. */
static inline void uform_emulated_cp_async(void *target, const void *source, unsigned source_bytes) {
    if ((uintptr_t)target % 16 || (source_bytes && (uintptr_t)source % 16) || source_bytes > 16) {
        fprintf(stderr, "emulated cp.async: a misaligned address or a source of %u bytes\n", source_bytes);
        abort();
    }
    memset(target, 0xff, 16);
    uform_emulated_state.copies[threadIdx.x].open.push_back(uform_emulated_copy{target, source, source_bytes});
}
static inline void uform_emulated_cp_async_commit() {
    uform_emulated_copies &copies = uform_emulated_state.copies[threadIdx.x];
    copies.groups.push_back(std::move(copies.open));
    copies.open.clear();
}
/* cp.async.wait_group n: every group but the newest n complete. */
static inline void uform_emulated_cp_async_wait(unsigned newest) {
    uform_emulated_copies &copies = uform_emulated_state.copies[threadIdx.x];
    while (copies.groups.size() > newest) {
        for (const uform_emulated_copy &copy : copies.groups.front()) {
            memcpy(copy.target, copy.source, copy.source_bytes);
            memset((char *)copy.target + copy.source_bytes, 0, 16 - copy.source_bytes);
        }
        copies.groups.pop_front();
    }
}

/* kernel<<<grid, threads>>>(arguments...): the blocks in order, each block's
 * threads as fibers until every one has returned. Threads that wait at
 * barriers no other thread will reach (a barrier in divergent code, a warp
 * collective some lanes skip: undefined on a GPU) abort with a message. */
template <typename... Parameters, typename... Arguments>
static void uform_emulated_run(dim3 grid, unsigned threads, void (*kernel)(Parameters...),
                               Arguments... arguments) {
    if (threads == 0 || threads % 32 || threads > 32 * UFORM_EMULATED_WARPS) {
        fprintf(stderr, "emulated launch: %u threads per block (a multiple of 32 up to 1024 is emulated)\n", threads);
        abort();
    }
    /* what a GPU refuses as an invalid configuration (a recorded failure there,
     * a silent success here unless checked) */
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535) {
        fprintf(stderr, "emulated launch: grid (%u, %u, %u) is not a valid CUDA grid\n", grid.x, grid.y, grid.z);
        abort();
    }
    if (uform_emulated_order < 0) {
        const char *order = getenv("UFORM_EMULATION_ORDER");
        uform_emulated_order = !order                           ? UFORM_EMULATED_IN_ORDER
                               : strcmp(order, "reverse") == 0 ? UFORM_EMULATED_IN_REVERSE
                               : strcmp(order, "warps") == 0   ? UFORM_EMULATED_BY_WARP
                                                               : UFORM_EMULATED_IN_ORDER;
    }
    const bool reverse = uform_emulated_order == UFORM_EMULATED_IN_REVERSE;
    const bool by_warp = uform_emulated_order == UFORM_EMULATED_BY_WARP;
    gridDim = grid;
    blockDim = dim3(threads);
    auto &state = uform_emulated_state;
    state.body = [=] { kernel(arguments...); };
    state.fibers.resize(threads);
    state.copies.assign(threads, uform_emulated_copies());
    if (state.stacks.size() < threads * UFORM_EMULATED_STACK) state.stacks.resize(threads * UFORM_EMULATED_STACK);
    for (unsigned zz = 0; zz < grid.z; zz++)
        for (unsigned yy = 0; yy < grid.y; yy++)
            for (unsigned xx = 0; xx < grid.x; xx++) {
                unsigned x = reverse ? grid.x - 1 - xx : xx, y = reverse ? grid.y - 1 - yy : yy;
                unsigned z = reverse ? grid.z - 1 - zz : zz;
                blockIdx = dim3(x, y, z);
                state.barrier.reset(threads);
                for (unsigned w = 0; w < threads / 32; w++) state.warps[w].barrier.reset(32);
                for (unsigned i = 0; i < threads; i++) {
                    uform_emulated_fiber &fiber = state.fibers[i];
                    getcontext(&fiber.context);
                    fiber.context.uc_stack.ss_sp = state.stacks.data() + i * UFORM_EMULATED_STACK;
                    fiber.context.uc_stack.ss_size = UFORM_EMULATED_STACK;
                    fiber.context.uc_link = nullptr; /* the thread jumps back, never returns */
                    makecontext(&fiber.context, uform_emulated_thread, 0);
                    fiber.started = fiber.done = false;
                }
                for (;;) {
                    unsigned long long before = state.progress;
                    bool running = false;
                    /* a pass: every thread a turn; by warp, a warp's threads
                     * turns until none of them moves on */
                    for (unsigned first = 0; first < threads; first += by_warp ? 32 : threads) {
                        unsigned end = by_warp ? first + 32 : threads;
                        for (bool moved = true; moved;) {
                            unsigned long long start = state.progress;
                            for (unsigned turn = first; turn < end; turn++) {
                                unsigned i = reverse ? threads - 1 - turn : turn;
                                if (state.fibers[i].done) continue;
                                running = true;
                                state.current = i;
                                threadIdx = dim3(i);
                                uform_emulated_turn(i);
                            }
                            moved = by_warp && state.progress != start;
                        }
                    }
                    if (!running) break;
                    if (state.progress == before) {
                        fprintf(stderr, "emulated launch: block (%u, %u, %u) deadlocked: its threads wait at barriers "
                                        "no other thread reaches\n", x, y, z);
                        abort();
                    }
                }
            }
}

/* atomicMin on an integer (adamw.cu's first non-finite index); one thread
 * runs at a time. */
static inline unsigned long long atomicMin(unsigned long long *address, unsigned long long value) {
    unsigned long long old = *address;
    if (value < old) *address = value;
    return old;
}

static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }

/* A launch holds its unit's lock (outside the function that switches
 * contexts, whose locals must not live across them). */
template <typename... Parameters, typename... Arguments>
static void uform_emulated_launch(dim3 grid, unsigned threads, void (*kernel)(Parameters...),
                                  Arguments... arguments) {
    std::lock_guard<std::mutex> launching(uform_emulated_launch_lock);
    uform_emulated_run(grid, threads, kernel, arguments...);
}

/* UFORM_LAUNCH(kernel, grid, threads, stream)(arguments...) (cuda_internal.h). */
typedef void *cudaStream_t;

template <typename Kernel>
struct uform_emulated_launcher {
    dim3 grid;
    unsigned threads;
    Kernel kernel;
    cudaStream_t stream;   /* launches are synchronous here */
    template <typename... Arguments>
    void operator()(Arguments... arguments) const {
        uform_emulated_launch(grid, threads, kernel, arguments...);
    }
};

/* ---- the runtime API calls the backend makes ---- */
enum cudaError_t { cudaSuccess = 0, cudaErrorMemoryAllocation = 2, cudaErrorNotReady = 600 };
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaMemcpyDeviceToDevice = 3 };
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 };
#define cudaStreamNonBlocking 0x01
struct cudaUUID_t {
    char bytes[16];
};
struct cudaDeviceProp {
    char name[256];
    cudaUUID_t uuid;
    int major, minor;
};

static inline const char *cudaGetErrorString(cudaError_t error) {
    return error == cudaSuccess ? "no error" : "out of memory";
}
static inline cudaError_t cudaGetLastError() { return cudaSuccess; }
static inline int uform_emulated_devices() {
    const char *given = getenv("UFORM_EMULATION_DEVICES");
    int count = given ? atoi(given) : 1;
    return count >= 1 && count <= 8 ? count : 1;
}
static inline cudaError_t cudaGetDeviceCount(int *count) { return *count = uform_emulated_devices(), cudaSuccess; }
static inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *properties, int device) {
    (void)device;
    snprintf(properties->name, sizeof(properties->name), "CUDA emulated on the CPU (c/cuda/emulation.h)");
    /* Each process's devices are its own (their memory is its own), so their
     * UUIDs name the process and the device (NCCL refuses two ranks on one
     * GPU), unless UFORM_EMULATION_SHARED_GPUS is set: then every process's
     * device d is the same GPU d, as processes sharing one real GPU. */
    char uuid[17];
    unsigned process = getenv("UFORM_EMULATION_SHARED_GPUS") ? 0u : (unsigned)getpid() & 0xfffffffu;
    snprintf(uuid, sizeof(uuid), "e%07x%08x", process, (unsigned)device);
    memcpy(properties->uuid.bytes, uuid, sizeof(properties->uuid.bytes));
    properties->major = 9, properties->minor = 0;
    return cudaSuccess;
}
static inline cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attribute, int device) {
    (void)attribute, (void)device;
    return *value = 4, cudaSuccess;   /* a few SMs: grids sized for it stay small */
}
static inline cudaError_t cudaSetDevice(int device) { return (void)device, cudaSuccess; }
static inline cudaError_t cudaGetDevice(int *device) { return *device = 0, cudaSuccess; }
static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags) {
    (void)flags;
    static char name;
    return *stream = &name, cudaSuccess;
}
static inline cudaError_t cudaStreamDestroy(cudaStream_t stream) { return (void)stream, cudaSuccess; }
static inline cudaError_t cudaStreamSynchronize(cudaStream_t stream) { return (void)stream, cudaSuccess; }
/* Launches and copies are synchronous here: every stream has always finished,
 * an event records nothing and waiting for one is free. */
typedef void *cudaEvent_t;
#define cudaEventDisableTiming 0x02
static inline cudaError_t cudaStreamQuery(cudaStream_t stream) { return (void)stream, cudaSuccess; }
static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned flags) {
    (void)flags;
    static char name;
    return *event = &name, cudaSuccess;
}
static inline cudaError_t cudaEventDestroy(cudaEvent_t event) { return (void)event, cudaSuccess; }
static inline cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    return (void)event, (void)stream, cudaSuccess;
}
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
    return (void)stream, (void)event, (void)flags, cudaSuccess;
}
static inline cudaError_t cudaMalloc(void **memory, size_t bytes) {
    *memory = aligned_alloc(256, (bytes + 255) / 256 * 256);
    return *memory ? cudaSuccess : cudaErrorMemoryAllocation;
}
static inline cudaError_t cudaFree(void *memory) { return free(memory), cudaSuccess; }
static inline cudaError_t cudaMallocHost(void **memory, size_t bytes) { return cudaMalloc(memory, bytes); }
static inline cudaError_t cudaFreeHost(void *memory) { return cudaFree(memory); }
static inline cudaError_t cudaMemcpyAsync(void *destination, const void *source, size_t bytes, cudaMemcpyKind kind,
                                          cudaStream_t stream) {
    (void)kind, (void)stream;
    memmove(destination, source, bytes);
    return cudaSuccess;
}
static inline cudaError_t cudaMemsetAsync(void *memory, int value, size_t bytes, cudaStream_t stream) {
    (void)stream;
    memset(memory, value, bytes);
    return cudaSuccess;
}

#endif /* UFORM_CUDA_EMULATION_H */
