/* attention_mma.cuh: the device code of attention_mma.cu (see there): the
 * kernels and their helpers, apart so that tests/c/test_attention_mma.cc can
 * run the same code on the CPU under c/cuda/emulation.h
 * (UFORM_CUDA_EMULATION: a block's threads as host threads, mma.sync and the
 * shuffles as exchanges between them). Needs uform_segment_t and
 * UFORM_HEAD_WIDTH (backend/backend.h) and, on a GPU, cuda_bf16.h. */
#ifndef UFORM_ATTENTION_MMA_CUH
#define UFORM_ATTENTION_MMA_CUH

#include <stdint.h>
#include <string.h>

#include "bf16.cuh"

#define UFORM_MMA_TILE 64      /* rows of queries or keys a block holds */
#define UFORM_MMA_STRIDE 72    /* BF16 per shared row: 64 + 8, so a fragment's 8 rows hit distinct banks */
#define UFORM_MMA_THREADS 128  /* 4 warps of 16 rows */
#define UFORM_MMA_LOG2E 1.4426950408889634f
#define UFORM_MMA_LN2 0.6931471805599453f

typedef uint16_t uform_mma_tile_t[UFORM_MMA_TILE][UFORM_MMA_STRIDE];

/* nvcc's full unrolling of a loop over row groups (without it, a loop with a
 * barrier inside kept its arrays in local memory: ptxas -v); the emulation's
 * g++ has no such pragma. */
#ifdef UFORM_CUDA_EMULATION
#define UFORM_MMA_UNROLL
#else
#define UFORM_MMA_UNROLL _Pragma("unroll")
#endif

__device__ static inline uint16_t uform_mma_bf16(float value) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(value));
}

/* Two floats as a BF16 pair, `low` in the low half (the lower column). */
__device__ static inline uint32_t uform_mma_pack(float low, float high) {
    return (uint32_t)uform_mma_bf16(low) | (uint32_t)uform_mma_bf16(high) << 16;
}

__device__ static inline uint32_t uform_mma_pair(const uform_mma_tile_t tile, int row, int column) {
    return *(const uint32_t *)&tile[row][column];
}

/* 2^x by the SFU's ex2.approx.ftz: results below 2^-126 flushed to zero, and
 * 2^-inf = 0. exp2f compiles to the same instruction plus, to keep such
 * results subnormal, a compare and two multiplies per call (the SASS of
 * nvcc 13.0 for sm_90a); no probability here needs them: p < 2^-126 is below
 * the rounding of every sum it enters (each row's largest p is 1). The
 * emulation: exp2f flushed the same way. */
__device__ static inline float uform_mma_exp2(float x) {
#ifdef UFORM_CUDA_EMULATION
    float y = exp2f(x);
    return y < 0x1p-126f ? 0.0f : y;
#else
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
#endif
}

/* c (16 x 8, FP32) += a (16 x 16, BF16) b (16 x 8, BF16). */
__device__ static inline void uform_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#ifdef UFORM_CUDA_EMULATION
    uform_emulated_mma(c, a, b0, b1);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* ldmatrix.x4 (.trans): lane l names row l % 8 of 8 x 8 matrix l / 8 (16
 * bytes of shared memory, 16-byte aligned); register i receives matrix i's
 * row g (columns t, t + 1), or with .trans its column g (rows t, t + 1):
 * the B operand of two mma steps from one instruction. */
template <bool transposed>
__device__ static inline void uform_mma_ldmatrix(uint32_t r[4], const uint16_t *row) {
#ifdef UFORM_CUDA_EMULATION
    uform_emulated_ldmatrix(r, row, transposed);
#else
    unsigned shared = (unsigned)__cvta_generic_to_shared(row);
    if (transposed)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(shared));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(shared));
#endif
}

/* c (16 x 64) += a (16 x 64, 4 A fragments) times the transpose of `tile`
 * (64 x 64): c[i][j] += sum over p of a[i][p] tile[j][p]. The B operand of
 * C tile n, steps s and s + 1: tile rows 8n .. 8n + 7 at columns 16s, 16s + 8,
 * 16s + 16, 16s + 24, one ldmatrix. Each accumulator takes its 4 steps in
 * order (the same chain as _rows below and as the first version's).
 * `tiles` < 8: only the C tiles of tile rows first .. first + 8 tiles - 1 (a
 * part of the scores, the backward's: each accumulator the same chain). */
template <int groups, int tiles = 8>
__device__ static inline void uform_mma_16x64x64_groups(float c[][tiles][4], const uint32_t a[][4][4],
                                                        const uform_mma_tile_t tile, int first = 0) {
    int lane = threadIdx.x % 32;
    for (int n = 0; n < tiles; n++)
        for (int s = 0; s < 4; s += 2) {
            uint32_t b[4];
            uform_mma_ldmatrix<false>(b, &tile[first + 8 * n + lane % 8][16 * s + 8 * (lane / 8)]);
            for (int r = 0; r < groups; r++) {
                uform_mma(c[r][n], a[r][s], b[0], b[1]);
                uform_mma(c[r][n], a[r][s + 1], b[2], b[3]);
            }
        }
}

/* One group: c (16 x 8 tiles) += a times the transpose of tile rows first .. */
template <int tiles = 8>
__device__ static inline void uform_mma_16x64x64(float c[tiles][4], const uint32_t a[4][4], const uform_mma_tile_t tile,
                                                 int first = 0) {
    uform_mma_16x64x64_groups<1, tiles>(reinterpret_cast<float(*)[tiles][4]>(c),
                                        reinterpret_cast<const uint32_t(*)[4][4]>(a), tile, first);
}

/* c (16 x 64) += a (16 x 64, 4 A fragments) times `tile` (64 x 64, row p
 * the p-th term): c[i][d] += sum over p of a[i][p] tile[p][d]. The B operand
 * of step s, C tiles n and n + 1: tile rows 16s and 16s + 8 at columns 8n
 * and 8n + 8, one ldmatrix.trans; so no tile is ever stored transposed.
 * `steps` < 4: a holds steps first_step .. first_step + steps - 1 only (the
 * terms of tile rows 16 first_step ..: a part of the backward's scores); the
 * parts taken in order give each accumulator the same chain as one call. */
template <int groups, int steps = 4>
__device__ static inline void uform_mma_16x64x64_rows_groups(float c[][8][4], const uint32_t a[][steps][4],
                                                             const uform_mma_tile_t tile, int first_step = 0) {
    int lane = threadIdx.x % 32, matrix = lane / 8;
    for (int s = 0; s < steps; s++)
        for (int n = 0; n < 8; n += 2) {
            uint32_t b[4];
            uform_mma_ldmatrix<true>(
                b, &tile[16 * (first_step + s) + 8 * (matrix % 2) + lane % 8][8 * n + 8 * (matrix / 2)]);
            for (int r = 0; r < groups; r++) {
                uform_mma(c[r][n], a[r][s], b[0], b[1]);
                uform_mma(c[r][n + 1], a[r][s], b[2], b[3]);
            }
        }
}

template <int steps = 4>
__device__ static inline void uform_mma_16x64x64_rows(float c[8][4], const uint32_t a[steps][4],
                                                      const uform_mma_tile_t tile, int first_step = 0) {
    uform_mma_16x64x64_rows_groups<1, steps>(reinterpret_cast<float(*)[8][4]>(c),
                                             reinterpret_cast<const uint32_t(*)[steps][4]>(a), tile, first_step);
}

/* The A fragments of rows first .. first + 15 of a tile. */
__device__ static inline void uform_mma_fragments(const uform_mma_tile_t tile, int first, uint32_t a[4][4]) {
    int lane = threadIdx.x % 32, g = lane / 4, t = 2 * (lane % 4);
    for (int s = 0; s < 4; s++) {
        a[s][0] = uform_mma_pair(tile, first + g, 16 * s + t);
        a[s][1] = uform_mma_pair(tile, first + g + 8, 16 * s + t);
        a[s][2] = uform_mma_pair(tile, first + g, 16 * s + t + 8);
        a[s][3] = uform_mma_pair(tile, first + g + 8, 16 * s + t + 8);
    }
}

/* An accumulator of 16 x 64 (8 C tiles) rounded to BF16 as 4 A fragments
 * (or of 16 x 16 steps: 2 steps C tiles, `steps` fragments). */
template <int steps = 4>
__device__ static inline void uform_mma_repack(const float c[2 * steps][4], uint32_t a[steps][4]) {
    for (int s = 0; s < steps; s++) {
        a[s][0] = uform_mma_pack(c[2 * s][0], c[2 * s][1]);
        a[s][1] = uform_mma_pack(c[2 * s][2], c[2 * s][3]);
        a[s][2] = uform_mma_pack(c[2 * s + 1][0], c[2 * s + 1][1]);
        a[s][3] = uform_mma_pack(c[2 * s + 1][2], c[2 * s + 1][3]);
    }
}

template <int tiles = 8>
__device__ static inline void uform_mma_clear(float c[tiles][4]) {
    for (int n = 0; n < tiles; n++) c[n][0] = c[n][1] = c[n][2] = c[n][3] = 0.0f;
}

/* cp.async of 16 bytes, global to shared; `bytes` 0 writes zeros instead. */
__device__ static inline void uform_mma_copy(void *target, const void *source, unsigned bytes) {
#ifdef UFORM_CUDA_EMULATION
    uform_emulated_cp_async(target, source, bytes);
#else
    unsigned shared = (unsigned)__cvta_generic_to_shared(target);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared), "l"(source), "r"(bytes) : "memory");
#endif
}

/* The thread's copies issued since the last commit become one group. */
__device__ static inline void uform_mma_commit() {
#ifdef UFORM_CUDA_EMULATION
    uform_emulated_cp_async_commit();
#else
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

/* Wait until all but the newest `pending` groups of the thread's copies are
 * in shared memory (then a barrier, for the other threads' copies). */
template <int pending>
__device__ static inline void uform_mma_wait() {
#ifdef UFORM_CUDA_EMULATION
    uform_emulated_cp_async_wait(pending);
#else
    asm volatile("cp.async.wait_group %0;\n" ::"n"(pending) : "memory");
#endif
}

/* Rows first .. first + 63 of a head's 64 columns at `source` (row stride
 * `stride` elements, 16-byte aligned) into `tile`, row-major; rows at or past
 * `length` are zeros. From FP32, rounded to BF16 as loaded (synchronous: 16
 * threads to a row, a warp reads two rows' 256 contiguous bytes); from BF16
 * (a copy already rounded: the same tile, the same bits), by cp.async, 16
 * bytes a copy, in shared memory once the caller's group is waited for. */
__device__ static void uform_mma_fetch(const float *source, size_t stride, size_t first, size_t length,
                                       uform_mma_tile_t tile) {
    for (int f = threadIdx.x; f < UFORM_MMA_TILE * 16; f += UFORM_MMA_THREADS) {
        int r = f / 16, c = (f % 16) * 4;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (first + r < length) v = *(const float4 *)(source + (first + r) * stride + c);
        uint32_t *target = (uint32_t *)&tile[r][c];
        target[0] = uform_mma_pack(v.x, v.y);
        target[1] = uform_mma_pack(v.z, v.w);
    }
}

__device__ static void uform_mma_fetch(const uint16_t *source, size_t stride, size_t first, size_t length,
                                       uform_mma_tile_t tile) {
    for (int f = threadIdx.x; f < UFORM_MMA_TILE * 8; f += UFORM_MMA_THREADS) {
        int r = f / 8, c = (f % 8) * 8;
        bool inside = first + r < length;
        uform_mma_copy(&tile[r][c], inside ? source + (first + r) * stride + c : source, inside ? 16u : 0u);
    }
}

/* The two tiles of rows `next` of a and b fetched into the other stage, as
 * one group; false, fetching nothing, past the segment's end. */
template <typename T>
__device__ static inline bool uform_mma_prefetch(const T *a, size_t a_stride, const T *b, size_t b_stride,
                                                 size_t next, size_t length, uform_mma_tile_t a_tile,
                                                 uform_mma_tile_t b_tile) {
    if (next >= length) return false;
    uform_mma_fetch(a, a_stride, next, length, a_tile);
    uform_mma_fetch(b, b_stride, next, length, b_tile);
    uform_mma_commit();
    return true;
}

/* Before multiplying a stage: wait for its copies, and only those when the
 * next stage's were issued after them (`more`, uform_mma_prefetch's answer). */
__device__ static inline void uform_mma_wait_stage(bool more) {
    if (more) uform_mma_wait<1>();
    else uform_mma_wait<0>();
}

__device__ static inline float uform_mma_warp_sum(float value) {
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
    return value;
}

/* D of one row: dout . out over the head's 64 columns, by the whole warp (the
 * same chain in both backward kernels). */
__device__ static inline float uform_mma_delta(const float *dout, const float *out) {
    int lane = threadIdx.x % 32;
    return uform_mma_warp_sum(dout[lane] * out[lane] + dout[lane + 32] * out[lane + 32]);
}

/* Where a block's thread works: its segment and head (grid x and y), the
 * qkv rows' stride, the head's first column, its warp, and its place in
 * mma's fragments (g, t: the header's layout). T: qkv's scalar, float or
 * uint16_t (BF16 bits, the forward's staged copy). */
template <typename T>
struct uform_mma_place_t {
    uform_segment_t segment;
    size_t head, heads, stride, column;
    int warp, lane, g, t;
    const T *base;   /* the segment's first qkv row, at the head's column */
};

template <typename T>
__device__ static inline uform_mma_place_t<T> uform_mma_place(const T *qkv, size_t hidden,
                                                              const uform_segment_t *segments) {
    uform_mma_place_t<T> at;
    at.segment = segments[blockIdx.x];
    at.head = blockIdx.y, at.heads = gridDim.y, at.stride = 3 * hidden, at.column = at.head * UFORM_HEAD_WIDTH;
    at.warp = threadIdx.x / 32, at.lane = threadIdx.x % 32, at.g = at.lane / 4, at.t = 2 * (at.lane % 4);
    at.base = qkv + at.segment.begin * at.stride + at.column;
    return at;
}

/* Scores pre-scaled for exp2: 1/8 and log2(e). */
#define UFORM_MMA_SCALE (0.125f * UFORM_MMA_LOG2E)

/* The spans of `span` rows (one or two tiles of 64) a block takes: z,
 * z + slots, ... of its segment. */
#define UFORM_MMA_BLOCK_SPANS(first, length, span)                                               \
    for (size_t first = (size_t)blockIdx.z * (span); first < (length); first += (size_t)gridDim.z * (span))

/* Grid: (segment, head, slot); slot z takes the segment's tiles z, z + slots, ...
 * T: the scalar of the q, k, v (and dout) rows the tiles are fetched from:
 * float, rounded to BF16 as loaded, or uint16_t, a copy already rounded to
 * BF16 (the same tiles, the same bits, half the bytes, loaded by cp.async
 * while the tile before is multiplied).
 *
 * Each loop over a segment's tiles runs two stages: tile j + 1 is fetched
 * into one while tile j, in the other, is multiplied; the barrier at the end
 * of an iteration frees the stage the next fetch overwrites. */
/* Two adjacent outputs (8-byte aligned as float, 4 as BF16). */
__device__ static inline void uform_mma_store_pair(float *target, float first, float second) {
    *(float2 *)target = make_float2(first, second);
}
__device__ static inline void uform_mma_store_pair(uint16_t *target, float first, float second) {
    *(uint32_t *)target = uform_bf16_pair(first, second);
}

/* The forward of `groups` query tiles, first .. first + 64 groups - 1 of the
 * segment (tile r fetched into *q_rows[r]): warp w holds rows 16w .. 16w + 15
 * of each tile, so with two groups every B operand read from shared memory
 * (one ldmatrix) feeds two mma instead of one, and the warp has two
 * independent chains to interleave. Each row's operations are those of one
 * group alone, in the same order: one group or two, the same bits.
 * q_in_stage_1: the q tiles are stage 1's k and v tiles (static shared memory
 * stops at 48 KB: two q tiles and two stages would take 54), so their
 * fragments are taken, and every warp past them, before the loop's first
 * prefetch overwrites them; else they have their own tile and the fragments
 * are taken at the first key tile. */
template <int groups, bool q_in_stage_1, typename T, typename O>
__device__ __forceinline__ static void uform_mma_forward_tiles(const uform_mma_place_t<T> &at, size_t first,
                                                               size_t hidden, O *out, float *logsumexp,
                                                               uform_mma_tile_t *const q_rows[],
                                                               uform_mma_tile_t k_rows[2], uform_mma_tile_t v_rows[2]) {
    const size_t length = at.segment.length;
    for (int r = 0; r < groups; r++) uform_mma_fetch(at.base, at.stride, first + r * UFORM_MMA_TILE, length, *q_rows[r]);
    uform_mma_fetch(at.base + hidden, at.stride, 0, length, k_rows[0]);
    uform_mma_fetch(at.base + 2 * hidden, at.stride, 0, length, v_rows[0]);
    uform_mma_commit();
    uint32_t q[groups][4][4];
    if (q_in_stage_1) {
        uform_mma_wait<0>();
        __syncthreads();
        for (int r = 0; r < groups; r++) uform_mma_fragments(*q_rows[r], 16 * at.warp, q[r]);
        __syncthreads();   /* stage 1 is free */
    }
    float o[groups][8][4], top[groups][2], total[groups][2];
    for (int r = 0; r < groups; r++) {
        uform_mma_clear(o[r]);
        top[r][0] = top[r][1] = -INFINITY;
        total[r][0] = total[r][1] = 0.0f;
    }
    int stage = 0;
    for (size_t keys = 0; keys < length; keys += UFORM_MMA_TILE, stage ^= 1) {
        uform_mma_wait_stage(uform_mma_prefetch(at.base + hidden, at.stride, at.base + 2 * hidden, at.stride,
                                                keys + UFORM_MMA_TILE, length, k_rows[stage ^ 1], v_rows[stage ^ 1]));
        __syncthreads();
        if (!q_in_stage_1 && keys == 0)
            for (int r = 0; r < groups; r++) uform_mma_fragments(*q_rows[r], 16 * at.warp, q[r]);
        float s[groups][8][4];
        for (int r = 0; r < groups; r++) uform_mma_clear(s[r]);
        uform_mma_16x64x64_groups<groups>(s, q, k_rows[stage]);
        /* keys past the segment only in its last tile: elsewhere no compare
         * (with two groups; one group under its bound of 128 registers spilled
         * more with the branch: 152 bytes of loads against 24, ptxas -v) */
        const bool partial = groups == 1 || keys + UFORM_MMA_TILE > length;
        for (int r = 0; r < groups; r++)
            for (int n = 0; n < 8; n++)
                for (int e = 0; e < 4; e++)
                    s[r][n][e] = !partial || keys + 8 * n + at.t + (e & 1) < length ? s[r][n][e] * UFORM_MMA_SCALE
                                                                                    : -INFINITY;
        /* online softmax of rows g (h = 0) and g + 8 (h = 1) of each group; a
         * tile always holds a real key, so the new maximum is finite */
        for (int r = 0; r < groups; r++)
            for (int h = 0; h < 2; h++) {
                float m = top[r][h];
                for (int n = 0; n < 8; n++) m = fmaxf(m, fmaxf(s[r][n][2 * h], s[r][n][2 * h + 1]));
                m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
                m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
                float rescale = uform_mma_exp2(top[r][h] - m), sum = 0.0f;   /* 2^-inf = 0 at the first tile */
                for (int n = 0; n < 8; n++) {
                    s[r][n][2 * h] = uform_mma_exp2(s[r][n][2 * h] - m);
                    s[r][n][2 * h + 1] = uform_mma_exp2(s[r][n][2 * h + 1] - m);
                    sum += s[r][n][2 * h] + s[r][n][2 * h + 1];
                    o[r][n][2 * h] *= rescale;
                    o[r][n][2 * h + 1] *= rescale;
                }
                total[r][h] = total[r][h] * rescale + sum;
                top[r][h] = m;
            }
        uint32_t p[groups][4][4];
        for (int r = 0; r < groups; r++) uform_mma_repack(s[r], p[r]);
        uform_mma_16x64x64_rows_groups<groups>(o, p, v_rows[stage]);   /* o[i][d] += sum over keys of p[i][j] v[j][d] */
        __syncthreads();
    }
    for (int r = 0; r < groups; r++)
        for (int h = 0; h < 2; h++) {
            total[r][h] += __shfl_xor_sync(0xffffffffu, total[r][h], 1);
            total[r][h] += __shfl_xor_sync(0xffffffffu, total[r][h], 2);
            size_t row = first + r * UFORM_MMA_TILE + 16 * at.warp + at.g + 8 * h;
            if (row >= length) continue;
            float inverse = 1.0f / total[r][h];
            O *target = out + (at.segment.begin + row) * hidden + at.column;
            for (int n = 0; n < 8; n++) uform_mma_store_pair(target + 8 * n + at.t, o[r][n][2 * h] * inverse,
                                                             o[r][n][2 * h + 1] * inverse);
            if (logsumexp && at.t == 0)
                logsumexp[(at.segment.begin + row) * at.heads + at.head] =
                    (top[r][h] + log2f(total[r][h])) * UFORM_MMA_LN2;
        }
}

/* The forward's shared memory: with one group, q in a tile of its own (the
 * kernel as first run: 46 KB); with two, q in stage 1 (36 KB). */
template <int groups>
struct uform_mma_forward_shared_t {
    uform_mma_tile_t k_rows[2], v_rows[2];
    __device__ uform_mma_tile_t *q(int r) { return r == 0 ? &k_rows[1] : &v_rows[1]; }
};
template <>
struct uform_mma_forward_shared_t<1> {
    uform_mma_tile_t q_rows, k_rows[2], v_rows[2];
    __device__ uform_mma_tile_t *q(int) { return &q_rows; }
};

/* The forward: a block takes `groups` query tiles at a time (64 or 128 query
 * rows), spans z, z + slots, ... of its segment, each walking the segment's
 * keys in order. A segment's last span holding a single tile runs as one
 * group (no warp multiplies rows past the segment's end for a whole tile).
 * O: out's scalar, float, or uint16_t for BF16 (inference's operand of the
 * output projection: attention_forward_bf16).
 *
 * Registers (nvcc 13.0, ptxas -v for sm_90a): one group, 4 blocks an SM under
 * the bound (128 registers; 46 KB of shared memory each; without the bound
 * ptxas took 168 registers, 3 blocks), 24 bytes spill; two groups, 2 blocks
 * an SM (up to 255 registers, 36 KB). */
template <typename T, typename O = float, int groups = 1>
__global__ static void __launch_bounds__(UFORM_MMA_THREADS, 4 / groups)
    uform_attention_forward_mma(const T *qkv, size_t hidden, const uform_segment_t *segments, O *out,
                                float *logsumexp) {
    __shared__ __align__(16) uform_mma_forward_shared_t<groups> tiles;
    uform_mma_tile_t *const q_rows[2] = {tiles.q(0), tiles.q(1)};
    uform_mma_tile_t *const k_rows = tiles.k_rows, *const v_rows = tiles.v_rows;
    const auto at = uform_mma_place(qkv, hidden, segments);
    const size_t length = at.segment.length, span = groups * UFORM_MMA_TILE;
    UFORM_MMA_BLOCK_SPANS(first, length, span) {
        if (groups > 1 && first + UFORM_MMA_TILE >= length)
            uform_mma_forward_tiles<1, (groups > 1)>(at, first, hidden, out, logsumexp, q_rows, k_rows, v_rows);
        else
            uform_mma_forward_tiles<groups, (groups > 1)>(at, first, hidden, out, logsumexp, q_rows, k_rows, v_rows);
    }
}

/* The backward's parts: each 64 x 64 tile pair's scores are made, turned
 * into p and ds, and multiplied into the accumulators in `parts` pieces of
 * 64 / parts keys (dq) or queries (dk, dv). A piece's scores are the same
 * accumulators as the whole tile's (each C tile its 4 steps in order), and
 * the second products take their steps in order across the pieces, so every
 * output is the same chain: the same bits for 1, 2 and 4 parts. Fewer
 * scores live (32 floats fewer for dk, dv's two products with two parts, 48
 * with four) let a block fit under 168 registers: 3 blocks (12 warps) an SM
 * instead of 2 (ptxas -v, nvcc 13.0, sm_90a, the BF16-row kernels: one part,
 * dk, dv 180 registers and dq 181; two parts 168 with 44 bytes of spill
 * loads and 166; four parts 168 and 157, no spills; on Ada, whose SMs hold
 * 100 KB of shared memory, only 2 blocks of 37 KB fit, as before). The ldmatrix and mma
 * are the same in number; the parts only let ptxas overlap one part's
 * exponentials with another's products within the bound. Written 2026-12-06
 * without a GPU: compiled and emulated, **not yet run**; the default is four
 * parts (and dq 128 query rows a block, below),
 * uform_cuda_attention_backward_parts(b, 1) runs the kernels as first run on
 * a GPU, and bench/gpu_attention_bench.c times the choices side by side. */
#define UFORM_MMA_BACKWARD_BLOCKS(parts) ((parts) == 1 ? 0 : 3)   /* 0: no bound (the kernels as first run) */

/* dq of `groups` query tiles, first .. first + 64 groups - 1 of the segment:
 * their keys in order. Warp w holds rows 16w .. 16w + 15 of each tile, so
 * with two groups every B operand read from shared memory (one ldmatrix)
 * feeds two mma, as in the forward; each row's operations are those of one
 * group alone, in the same order: one group or two, the same bits. The tiles
 * come from qkv and dout_rows (T, see above); D = dout . out from the FP32
 * dout and out, and each row's D is also written to deltas [rows][heads]
 * when not NULL, for the dk, dv kernel launched after. Stage 1 first holds
 * each query tile's q and dout in turn, until their fragments are in
 * registers. */
template <int groups, int parts, typename T>
__device__ __forceinline__ static void uform_mma_dq_tiles(const uform_mma_place_t<T> &at, size_t first,
                                                          const T *dout_base, const float *out, const float *dout,
                                                          const float *logsumexp, size_t hidden, float *dqkv,
                                                          float *deltas, uform_mma_tile_t k_rows[2],
                                                          uform_mma_tile_t v_rows[2]) {
    const size_t length = at.segment.length;
    uint32_t q[groups][4][4], d[groups][4][4];
    float lse[groups][2], delta[groups][2];
    UFORM_MMA_UNROLL
    for (int r = 0; r < groups; r++) {
        const size_t tile = first + r * UFORM_MMA_TILE;
        uform_mma_fetch(at.base, at.stride, tile, length, k_rows[1]);
        uform_mma_fetch(dout_base, hidden, tile, length, v_rows[1]);
        if (r == 0) {
            uform_mma_fetch(at.base + hidden, at.stride, 0, length, k_rows[0]);
            uform_mma_fetch(at.base + 2 * hidden, at.stride, 0, length, v_rows[0]);
        }
        uform_mma_commit();
        lse[r][0] = lse[r][1] = delta[r][0] = delta[r][1] = 0.0f;
        for (int i = 0; i < 16; i++) {   /* D of the warp's 16 rows, kept by the lanes that own them */
            size_t row = tile + 16 * at.warp + i;
            float value = 0.0f;
            if (row < length) {
                size_t g = at.segment.begin + row;
                value = uform_mma_delta(dout + g * hidden + at.column, out + g * hidden + at.column);
                if (deltas && at.lane == 0) deltas[g * at.heads + at.head] = value;
            }
            if (i == at.g) delta[r][0] = value;
            if (i == at.g + 8) delta[r][1] = value;
        }
        for (int h = 0; h < 2; h++) {
            size_t row = tile + 16 * at.warp + at.g + 8 * h;
            if (row < length) lse[r][h] = logsumexp[(at.segment.begin + row) * at.heads + at.head] * UFORM_MMA_LOG2E;
        }
        uform_mma_wait<0>();
        __syncthreads();
        uform_mma_fragments(k_rows[1], 16 * at.warp, q[r]);
        uform_mma_fragments(v_rows[1], 16 * at.warp, d[r]);
        __syncthreads();   /* stage 1 is free */
    }
    float dq[groups][8][4];
    for (int r = 0; r < groups; r++) uform_mma_clear(dq[r]);
    int stage = 0;
    for (size_t keys = 0; keys < length; keys += UFORM_MMA_TILE, stage ^= 1) {
        uform_mma_wait_stage(uform_mma_prefetch(at.base + hidden, at.stride, at.base + 2 * hidden, at.stride,
                                                keys + UFORM_MMA_TILE, length, k_rows[stage ^ 1], v_rows[stage ^ 1]));
        __syncthreads();
        for (int part = 0; part < parts; part++) {   /* keys 8 tiles part .. of the tile */
            constexpr int tiles = 8 / parts, steps = 4 / parts;
            float s[groups][tiles][4], dp[groups][tiles][4];
            for (int r = 0; r < groups; r++) uform_mma_clear<tiles>(s[r]), uform_mma_clear<tiles>(dp[r]);
            uform_mma_16x64x64_groups<groups, tiles>(s, q, k_rows[stage], 8 * tiles * part);    /* scores */
            uform_mma_16x64x64_groups<groups, tiles>(dp, d, v_rows[stage], 8 * tiles * part);   /* dout . v */
            for (int r = 0; r < groups; r++)
                for (int n = 0; n < tiles; n++)
                    for (int e = 0; e < 4; e++) {
                        int h = e / 2;
                        size_t key = keys + 8 * (tiles * part + n) + at.t + (e & 1);
                        float p = key < length ? uform_mma_exp2(s[r][n][e] * UFORM_MMA_SCALE - lse[r][h]) : 0.0f;
                        s[r][n][e] = p * (dp[r][n][e] - delta[r][h]) * 0.125f;   /* ds */
                    }
            uint32_t ds[groups][steps][4];
            for (int r = 0; r < groups; r++) uform_mma_repack<steps>(s[r], ds[r]);
            /* dq[i][c] += sum over keys of ds[i][j] k[j][c] */
            uform_mma_16x64x64_rows_groups<groups, steps>(dq, ds, k_rows[stage], steps * part);
        }
        __syncthreads();
    }
    UFORM_MMA_UNROLL
    for (int r = 0; r < groups; r++)
        for (int h = 0; h < 2; h++) {
            size_t row = first + r * UFORM_MMA_TILE + 16 * at.warp + at.g + 8 * h;
            if (row >= length) continue;
            float *target = dqkv + (at.segment.begin + row) * at.stride + at.column;
            for (int n = 0; n < 8; n++) {
                float2 value = *(float2 *)(target + 8 * n + at.t);
                value.x += dq[r][n][2 * h];
                value.y += dq[r][n][2 * h + 1];
                *(float2 *)(target + 8 * n + at.t) = value;
            }
        }
}

/* dq: a block takes `groups` query tiles at a time (64 or 128 query rows),
 * spans z, z + slots, ... of its segment, as the forward does (a segment's
 * last span holding a single tile runs as one group). Two groups: up to 255
 * registers, 2 blocks an SM (the forward's trade: 1.28-1.36x on an H100);
 * written 2026-12-06 without a GPU, compiled and emulated, not yet run
 * (uform_cuda_attention_dq_rows). */
template <typename T, int parts = 1, int groups = 1>
__global__ static void __launch_bounds__(UFORM_MMA_THREADS, groups == 1 ? UFORM_MMA_BACKWARD_BLOCKS(parts) : 2)
    uform_attention_dq_mma(const T *qkv, const T *dout_rows, const float *out, const float *dout,
                           const float *logsumexp, size_t hidden, const uform_segment_t *segments, float *dqkv,
                           float *deltas) {
    __shared__ __align__(16) uform_mma_tile_t k_rows[2], v_rows[2];
    const auto at = uform_mma_place(qkv, hidden, segments);
    const size_t length = at.segment.length, span = groups * UFORM_MMA_TILE;
    const T *dout_base = dout_rows + at.segment.begin * hidden + at.column;
    UFORM_MMA_BLOCK_SPANS(first, length, span) {
        if (groups > 1 && first + UFORM_MMA_TILE >= length)
            uform_mma_dq_tiles<1, parts>(at, first, dout_base, out, dout, logsumexp, hidden, dqkv, deltas, k_rows,
                                         v_rows);
        else
            uform_mma_dq_tiles<groups, parts>(at, first, dout_base, out, dout, logsumexp, hidden, dqkv, deltas,
                                              k_rows, v_rows);
    }
}

/* The softmax statistics of query tile `queries` into the stage's lse and
 * delta (+inf and 0 past the segment: p = 0): D read from deltas (the dq
 * kernel's) when not NULL, a lane to a row, else computed here by the whole
 * warp, row after row (the same chain as the dq kernel's). */
template <typename T>
__device__ static void uform_mma_statistics(const uform_mma_place_t<T> &at, size_t queries, const float *out,
                                            const float *dout, const float *logsumexp, size_t hidden,
                                            const float *deltas, float lse[UFORM_MMA_TILE],
                                            float delta[UFORM_MMA_TILE]) {
    if (deltas) {
        size_t row = queries + 16 * at.warp + at.lane % 16;
        float value = 0.0f, statistic = INFINITY;
        if (row < at.segment.length) {
            size_t r = at.segment.begin + row;
            value = deltas[r * at.heads + at.head];
            statistic = logsumexp[r * at.heads + at.head] * UFORM_MMA_LOG2E;
        }
        if (at.lane < 16) delta[16 * at.warp + at.lane] = value, lse[16 * at.warp + at.lane] = statistic;
        return;
    }
    for (int i = 0; i < 16; i++) {
        size_t row = queries + 16 * at.warp + i;
        float value = 0.0f, statistic = INFINITY;
        if (row < at.segment.length) {
            size_t r = at.segment.begin + row;
            value = uform_mma_delta(dout + r * hidden + at.column, out + r * hidden + at.column);
            statistic = logsumexp[r * at.heads + at.head] * UFORM_MMA_LOG2E;
        }
        if (at.lane == 0) delta[16 * at.warp + i] = value, lse[16 * at.warp + i] = statistic;
    }
}

/* dk and dv of `groups` key tiles, first .. first + 64 groups - 1 of the
 * segment: their queries in order. The warp's 16 keys of each tile are the
 * rows of every product here (scores transposed: s[key][query]); with two
 * groups each B operand (a query tile's q or dout) read from shared memory
 * feeds two mma, and both groups share the query tile's statistics. Each
 * query's D is read from deltas (the dq kernel's) when not NULL, else
 * computed here again, once for each of the segment's key tiles: with
 * deltas, D's reads of dout and out (half of a step's loads) are gone; the
 * same bits either way. Stage 1 first holds each key tile's k and v in turn,
 * until their fragments are in registers. */
template <int groups, int parts, typename T>
__device__ __forceinline__ static void uform_mma_dkv_tiles(const uform_mma_place_t<T> &at, size_t first,
                                                           const T *dout_base, const float *out, const float *dout,
                                                           const float *logsumexp, size_t hidden, float *dqkv,
                                                           const float *deltas, uform_mma_tile_t q_rows[2],
                                                           uform_mma_tile_t g_rows[2], float lse[2][UFORM_MMA_TILE],
                                                           float delta[2][UFORM_MMA_TILE]) {
    const size_t length = at.segment.length;
    uint32_t k[groups][4][4], v[groups][4][4];
    UFORM_MMA_UNROLL
    for (int r = 0; r < groups; r++) {
        const size_t tile = first + r * UFORM_MMA_TILE;
        uform_mma_fetch(at.base + hidden, at.stride, tile, length, q_rows[1]);
        uform_mma_fetch(at.base + 2 * hidden, at.stride, tile, length, g_rows[1]);
        if (r == 0) {
            uform_mma_fetch(at.base, at.stride, 0, length, q_rows[0]);
            uform_mma_fetch(dout_base, hidden, 0, length, g_rows[0]);
        }
        uform_mma_commit();
        if (r == 0) uform_mma_statistics(at, 0, out, dout, logsumexp, hidden, deltas, lse[0], delta[0]);
        uform_mma_wait<0>();
        __syncthreads();
        uform_mma_fragments(q_rows[1], 16 * at.warp, k[r]);
        uform_mma_fragments(g_rows[1], 16 * at.warp, v[r]);
        __syncthreads();   /* stage 1 is free */
    }
    float dk[groups][8][4], dv[groups][8][4];
    for (int r = 0; r < groups; r++) uform_mma_clear(dk[r]), uform_mma_clear(dv[r]);
    int stage = 0;
    for (size_t queries = 0; queries < length; queries += UFORM_MMA_TILE, stage ^= 1) {
        bool more = uform_mma_prefetch(at.base, at.stride, dout_base, hidden, queries + UFORM_MMA_TILE, length,
                                       q_rows[stage ^ 1], g_rows[stage ^ 1]);
        if (more)   /* while the copies are under way */
            uform_mma_statistics(at, queries + UFORM_MMA_TILE, out, dout, logsumexp, hidden, deltas, lse[stage ^ 1],
                                 delta[stage ^ 1]);
        uform_mma_wait_stage(more);
        __syncthreads();
        for (int part = 0; part < parts; part++) {   /* queries 8 tiles part .. of the tile */
            constexpr int tiles = 8 / parts, steps = 4 / parts;
            float s[groups][tiles][4], dp[groups][tiles][4];
            for (int r = 0; r < groups; r++) uform_mma_clear<tiles>(s[r]), uform_mma_clear<tiles>(dp[r]);
            uform_mma_16x64x64_groups<groups, tiles>(s, k, q_rows[stage], 8 * tiles * part);    /* s[key][query] */
            uform_mma_16x64x64_groups<groups, tiles>(dp, v, g_rows[stage], 8 * tiles * part);   /* v . dout */
            for (int r = 0; r < groups; r++)
                for (int n = 0; n < tiles; n++)
                    for (int e = 0; e < 4; e++) {
                        int query = 8 * (tiles * part + n) + at.t + (e & 1);
                        s[r][n][e] = uform_mma_exp2(s[r][n][e] * UFORM_MMA_SCALE - lse[stage][query]);   /* p */
                        dp[r][n][e] = s[r][n][e] * (dp[r][n][e] - delta[stage][query]) * 0.125f;       /* ds */
                    }
            uint32_t p[groups][steps][4], ds[groups][steps][4];
            for (int r = 0; r < groups; r++) uform_mma_repack<steps>(s[r], p[r]), uform_mma_repack<steps>(dp[r], ds[r]);
            /* dv[j][c] += sum over queries of p[j][i] dout[i][c], dk[j][c] of ds[j][i] q[i][c] */
            uform_mma_16x64x64_rows_groups<groups, steps>(dv, p, g_rows[stage], steps * part);
            uform_mma_16x64x64_rows_groups<groups, steps>(dk, ds, q_rows[stage], steps * part);
        }
        __syncthreads();
    }
    UFORM_MMA_UNROLL
    for (int r = 0; r < groups; r++)
        for (int h = 0; h < 2; h++) {
            size_t row = first + r * UFORM_MMA_TILE + 16 * at.warp + at.g + 8 * h;
            if (row >= length) continue;
            float *target = dqkv + (at.segment.begin + row) * at.stride + hidden + at.column;
            for (int n = 0; n < 8; n++) {
                float2 key = *(float2 *)(target + 8 * n + at.t), value = *(float2 *)(target + hidden + 8 * n + at.t);
                key.x += dk[r][n][2 * h], key.y += dk[r][n][2 * h + 1];
                value.x += dv[r][n][2 * h], value.y += dv[r][n][2 * h + 1];
                *(float2 *)(target + 8 * n + at.t) = key;
                *(float2 *)(target + hidden + 8 * n + at.t) = value;
            }
        }
}

/* dk and dv: a block takes `groups` key tiles at a time (64 or 128 keys),
 * spans z, z + slots, ... of its segment, as dq does. Two groups with four
 * parts: 255 registers and 88 bytes of spill loads (ptxas -v, sm_90a), 2
 * blocks an SM; one group 168 and 3 blocks. Written 2026-12-06 without a GPU,
 * compiled and emulated, not yet run (uform_cuda_attention_dkv_rows; one
 * group is the default until a GPU says otherwise). */
template <typename T, int parts = 1, int groups = 1>
__global__ static void __launch_bounds__(UFORM_MMA_THREADS, groups == 1 ? UFORM_MMA_BACKWARD_BLOCKS(parts) : 2)
    uform_attention_dkv_mma(const T *qkv, const T *dout_rows, const float *out, const float *dout,
                            const float *logsumexp, size_t hidden, const uform_segment_t *segments, float *dqkv,
                            const float *deltas) {
    __shared__ __align__(16) uform_mma_tile_t q_rows[2], g_rows[2];   /* g: dout */
    __shared__ float lse[2][UFORM_MMA_TILE], delta[2][UFORM_MMA_TILE];
    const auto at = uform_mma_place(qkv, hidden, segments);
    const size_t length = at.segment.length, span = groups * UFORM_MMA_TILE;
    const T *dout_base = dout_rows + at.segment.begin * hidden + at.column;
    UFORM_MMA_BLOCK_SPANS(first, length, span) {
        if (groups > 1 && first + UFORM_MMA_TILE >= length)
            uform_mma_dkv_tiles<1, parts>(at, first, dout_base, out, dout, logsumexp, hidden, dqkv, deltas, q_rows,
                                          g_rows, lse, delta);
        else
            uform_mma_dkv_tiles<groups, parts>(at, first, dout_base, out, dout, logsumexp, hidden, dqkv, deltas,
                                               q_rows, g_rows, lse, delta);
    }
}

#endif /* UFORM_ATTENTION_MMA_CUH */
