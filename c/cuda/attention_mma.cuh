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

#define UFORM_MMA_TILE 64      /* rows of queries or keys a block holds */
#define UFORM_MMA_STRIDE 72    /* BF16 per shared row: 64 + 8, so a fragment's 8 rows hit distinct banks */
#define UFORM_MMA_THREADS 128  /* 4 warps of 16 rows */
#define UFORM_MMA_LOG2E 1.4426950408889634f
#define UFORM_MMA_LN2 0.6931471805599453f

typedef uint16_t uform_mma_tile_t[UFORM_MMA_TILE][UFORM_MMA_STRIDE];

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

/* c (16 x 64) += a (16 x 64, 4 A fragments) times the transpose of `tile`
 * (64 x 64): c[i][j] += sum over p of a[i][p] tile[j][p]. */
__device__ static inline void uform_mma_16x64x64(float c[8][4], const uint32_t a[4][4], const uform_mma_tile_t tile) {
    int lane = threadIdx.x % 32, g = lane / 4, t = 2 * (lane % 4);
    for (int n = 0; n < 8; n++)
        for (int s = 0; s < 4; s++)
            uform_mma(c[n], a[s], uform_mma_pair(tile, 8 * n + g, 16 * s + t), uform_mma_pair(tile, 8 * n + g, 16 * s + t + 8));
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

/* An accumulator of 16 x 64 (8 C tiles) rounded to BF16 as 4 A fragments. */
__device__ static inline void uform_mma_repack(const float c[8][4], uint32_t a[4][4]) {
    for (int s = 0; s < 4; s++) {
        a[s][0] = uform_mma_pack(c[2 * s][0], c[2 * s][1]);
        a[s][1] = uform_mma_pack(c[2 * s][2], c[2 * s][3]);
        a[s][2] = uform_mma_pack(c[2 * s + 1][0], c[2 * s + 1][1]);
        a[s][3] = uform_mma_pack(c[2 * s + 1][2], c[2 * s + 1][3]);
    }
}

__device__ static inline void uform_mma_clear(float c[8][4]) {
    for (int n = 0; n < 8; n++) c[n][0] = c[n][1] = c[n][2] = c[n][3] = 0.0f;
}

/* Rows first .. first + 63 of a head's 64 columns at `source` (row stride
 * `stride` floats, 16-byte aligned), rounded to BF16 into `rows` (row-major)
 * and/or `columns` (transposed: columns[c][r]); rows at or past `length` are
 * zeros. A tile wanted row-major only is read 16 threads to a row (a warp
 * reads two rows' 256 contiguous bytes each); one wanted transposed is read a
 * thread to a row (consecutive threads, consecutive rows), so that a warp's
 * transposed stores fall into distinct banks. */
__device__ static void uform_mma_load(const float *source, size_t stride, size_t first, size_t length,
                                      uform_mma_tile_t rows, uform_mma_tile_t columns) {
    for (int f = threadIdx.x; f < UFORM_MMA_TILE * 16; f += UFORM_MMA_THREADS) {
        int r = columns ? f % UFORM_MMA_TILE : f / 16, c = columns ? (f / UFORM_MMA_TILE) * 4 : (f % 16) * 4;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (first + r < length) v = *(const float4 *)(source + (first + r) * stride + c);
        if (rows) {
            uint32_t *target = (uint32_t *)&rows[r][c];
            target[0] = uform_mma_pack(v.x, v.y);
            target[1] = uform_mma_pack(v.z, v.w);
        }
        if (columns) {
            columns[c][r] = uform_mma_bf16(v.x);
            columns[c + 1][r] = uform_mma_bf16(v.y);
            columns[c + 2][r] = uform_mma_bf16(v.z);
            columns[c + 3][r] = uform_mma_bf16(v.w);
        }
    }
}

/* uform_mma_load from rows already in BF16 (stride in BF16, 16-byte aligned):
 * eight to a 16-byte load, the tiles as the FP32 load makes them. */
__device__ static void uform_mma_load(const uint16_t *source, size_t stride, size_t first, size_t length,
                                      uform_mma_tile_t rows, uform_mma_tile_t columns) {
    for (int f = threadIdx.x; f < UFORM_MMA_TILE * 8; f += UFORM_MMA_THREADS) {
        int r = columns ? f % UFORM_MMA_TILE : f / 8, c = columns ? (f / UFORM_MMA_TILE) * 8 : (f % 8) * 8;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (first + r < length) v = *(const uint4 *)(source + (first + r) * stride + c);
        if (rows) *(uint4 *)&rows[r][c] = v;
        if (columns) {
            const uint32_t words[4] = {v.x, v.y, v.z, v.w};
            for (int i = 0; i < 4; i++) {
                columns[c + 2 * i][r] = (uint16_t)(words[i] & 0xffffu);
                columns[c + 2 * i + 1][r] = (uint16_t)(words[i] >> 16);
            }
        }
    }
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

/* The tiles of 64 rows a block takes: z, z + slots, ... of its segment. */
#define UFORM_MMA_BLOCK_TILES(first, length)                                                     \
    for (size_t first = (size_t)blockIdx.z * UFORM_MMA_TILE; first < (length);                  \
         first += (size_t)gridDim.z * UFORM_MMA_TILE)

/* Grid: (segment, head, slot); slot z takes the segment's tiles z, z + slots, ...
 * qkv: FP32, rounded to BF16 as its tiles load, or (uint16_t) a copy already
 * rounded to BF16: the same tiles, the same bits, half the bytes to load. */
template <typename T>
__global__ static void __launch_bounds__(UFORM_MMA_THREADS)
    uform_attention_forward_mma(const T *qkv, size_t hidden, const uform_segment_t *segments, float *out,
                                float *logsumexp) {
    __shared__ __align__(16) uform_mma_tile_t q_rows, k_rows, v_columns;
    const auto at = uform_mma_place(qkv, hidden, segments);
    UFORM_MMA_BLOCK_TILES(first, at.segment.length) {
        __syncthreads();   /* the previous tile's shared reads are done */
        uform_mma_load(at.base, at.stride, first, at.segment.length, q_rows, NULL);
        __syncthreads();
        uint32_t q[4][4];
        uform_mma_fragments(q_rows, 16 * at.warp, q);
        float o[8][4], top[2] = {-INFINITY, -INFINITY}, total[2] = {0.0f, 0.0f};
        uform_mma_clear(o);
        for (size_t keys = 0; keys < at.segment.length; keys += UFORM_MMA_TILE) {
            __syncthreads();
            uform_mma_load(at.base + hidden, at.stride, keys, at.segment.length, k_rows, NULL);
            uform_mma_load(at.base + 2 * hidden, at.stride, keys, at.segment.length, NULL, v_columns);
            __syncthreads();
            float s[8][4];
            uform_mma_clear(s);
            uform_mma_16x64x64(s, q, k_rows);
            for (int n = 0; n < 8; n++)
                for (int e = 0; e < 4; e++)
                    s[n][e] = keys + 8 * n + at.t + (e & 1) < at.segment.length ? s[n][e] * UFORM_MMA_SCALE : -INFINITY;
            /* online softmax of rows g (h = 0) and g + 8 (h = 1); a tile always
             * holds a real key, so the new maximum is finite */
            for (int h = 0; h < 2; h++) {
                float m = top[h];
                for (int n = 0; n < 8; n++) m = fmaxf(m, fmaxf(s[n][2 * h], s[n][2 * h + 1]));
                m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
                m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
                float rescale = exp2f(top[h] - m), sum = 0.0f;   /* exp2f(-inf) = 0 at the first tile */
                for (int n = 0; n < 8; n++) {
                    s[n][2 * h] = exp2f(s[n][2 * h] - m);
                    s[n][2 * h + 1] = exp2f(s[n][2 * h + 1] - m);
                    sum += s[n][2 * h] + s[n][2 * h + 1];
                    o[n][2 * h] *= rescale;
                    o[n][2 * h + 1] *= rescale;
                }
                total[h] = total[h] * rescale + sum;
                top[h] = m;
            }
            uint32_t p[4][4];
            uform_mma_repack(s, p);
            uform_mma_16x64x64(o, p, v_columns);   /* o[i][d] += sum over keys of p[i][j] v[j][d] */
        }
        for (int h = 0; h < 2; h++) {
            total[h] += __shfl_xor_sync(0xffffffffu, total[h], 1);
            total[h] += __shfl_xor_sync(0xffffffffu, total[h], 2);
            size_t row = first + 16 * at.warp + at.g + 8 * h;
            if (row >= at.segment.length) continue;
            float inverse = 1.0f / total[h];
            float *target = out + (at.segment.begin + row) * hidden + at.column;
            for (int n = 0; n < 8; n++)
                *(float2 *)(target + 8 * n + at.t) = make_float2(o[n][2 * h] * inverse, o[n][2 * h + 1] * inverse);
            if (logsumexp && at.t == 0)
                logsumexp[(at.segment.begin + row) * at.heads + at.head] = (top[h] + log2f(total[h])) * UFORM_MMA_LN2;
        }
    }
}

/* dq of a query tile: its keys in order. Each row's D is also written to
 * deltas [rows][heads] when not NULL, for the dk, dv kernel launched after. */
__global__ static void __launch_bounds__(UFORM_MMA_THREADS)
    uform_attention_dq_mma(const float *qkv, const float *out, const float *dout, const float *logsumexp,
                           size_t hidden, const uform_segment_t *segments, float *dqkv, float *deltas) {
    __shared__ __align__(16) uform_mma_tile_t q_rows, dout_rows, k_rows, k_columns, v_rows;
    const auto at = uform_mma_place(qkv, hidden, segments);
    UFORM_MMA_BLOCK_TILES(first, at.segment.length) {
        __syncthreads();
        uform_mma_load(at.base, at.stride, first, at.segment.length, q_rows, NULL);
        uform_mma_load(dout + at.segment.begin * hidden + at.column, hidden, first, at.segment.length, dout_rows, NULL);
        __syncthreads();
        uint32_t q[4][4], d[4][4];
        uform_mma_fragments(q_rows, 16 * at.warp, q);
        uform_mma_fragments(dout_rows, 16 * at.warp, d);
        float lse[2] = {0.0f, 0.0f}, delta[2] = {0.0f, 0.0f};
        for (int i = 0; i < 16; i++) {   /* D of the warp's 16 rows, kept by the lanes that own them */
            size_t row = first + 16 * at.warp + i;
            float value = 0.0f;
            if (row < at.segment.length) {
                size_t r = at.segment.begin + row;
                value = uform_mma_delta(dout + r * hidden + at.column, out + r * hidden + at.column);
                if (deltas && at.lane == 0) deltas[r * at.heads + at.head] = value;
            }
            if (i == at.g) delta[0] = value;
            if (i == at.g + 8) delta[1] = value;
        }
        for (int h = 0; h < 2; h++) {
            size_t row = first + 16 * at.warp + at.g + 8 * h;
            if (row < at.segment.length) lse[h] = logsumexp[(at.segment.begin + row) * at.heads + at.head] * UFORM_MMA_LOG2E;
        }
        float dq[8][4];
        uform_mma_clear(dq);
        for (size_t keys = 0; keys < at.segment.length; keys += UFORM_MMA_TILE) {
            __syncthreads();
            uform_mma_load(at.base + hidden, at.stride, keys, at.segment.length, k_rows, k_columns);
            uform_mma_load(at.base + 2 * hidden, at.stride, keys, at.segment.length, v_rows, NULL);
            __syncthreads();
            float s[8][4], dp[8][4];
            uform_mma_clear(s);
            uform_mma_clear(dp);
            uform_mma_16x64x64(s, q, k_rows);    /* scores */
            uform_mma_16x64x64(dp, d, v_rows);   /* dout . v */
            for (int n = 0; n < 8; n++)
                for (int e = 0; e < 4; e++) {
                    int h = e / 2;
                    float p = keys + 8 * n + at.t + (e & 1) < at.segment.length ? exp2f(s[n][e] * UFORM_MMA_SCALE - lse[h]) : 0.0f;
                    s[n][e] = p * (dp[n][e] - delta[h]) * 0.125f;   /* ds */
                }
            uint32_t ds[4][4];
            uform_mma_repack(s, ds);
            uform_mma_16x64x64(dq, ds, k_columns);   /* dq[i][c] += sum over keys of ds[i][j] k[j][c] */
        }
        for (int h = 0; h < 2; h++) {
            size_t row = first + 16 * at.warp + at.g + 8 * h;
            if (row >= at.segment.length) continue;
            float *target = dqkv + (at.segment.begin + row) * at.stride + at.column;
            for (int n = 0; n < 8; n++) {
                float2 value = *(float2 *)(target + 8 * n + at.t);
                value.x += dq[n][2 * h];
                value.y += dq[n][2 * h + 1];
                *(float2 *)(target + 8 * n + at.t) = value;
            }
        }
    }
}

/* dk and dv of a key tile: its queries in order. The warp's 16 keys are the
 * rows of every product here (scores transposed: s[key][query]). Each query's
 * D is read from deltas (the dq kernel's) when not NULL, else computed here
 * again, once for each of the segment's key tiles: with deltas, D's reads of
 * dout and out (half of a step's loads) are gone; the same bits either way. */
__global__ static void __launch_bounds__(UFORM_MMA_THREADS)
    uform_attention_dkv_mma(const float *qkv, const float *out, const float *dout, const float *logsumexp,
                            size_t hidden, const uform_segment_t *segments, float *dqkv, const float *deltas) {
    __shared__ __align__(16) uform_mma_tile_t q_rows, q_columns, dout_rows, dout_columns;
    __shared__ float lse[UFORM_MMA_TILE], delta[UFORM_MMA_TILE];
    const auto at = uform_mma_place(qkv, hidden, segments);
    UFORM_MMA_BLOCK_TILES(first, at.segment.length) {
        __syncthreads();
        /* the key tile's k and v pass through the query tiles' buffers */
        uform_mma_load(at.base + hidden, at.stride, first, at.segment.length, q_rows, NULL);
        uform_mma_load(at.base + 2 * hidden, at.stride, first, at.segment.length, dout_rows, NULL);
        __syncthreads();
        uint32_t k[4][4], v[4][4];
        uform_mma_fragments(q_rows, 16 * at.warp, k);
        uform_mma_fragments(dout_rows, 16 * at.warp, v);
        float dk[8][4], dv[8][4];
        uform_mma_clear(dk);
        uform_mma_clear(dv);
        for (size_t queries = 0; queries < at.segment.length; queries += UFORM_MMA_TILE) {
            __syncthreads();
            uform_mma_load(at.base, at.stride, queries, at.segment.length, q_rows, q_columns);
            uform_mma_load(dout + at.segment.begin * hidden + at.column, hidden, queries, at.segment.length, dout_rows,
                           dout_columns);
            /* the statistics of the tile's queries; +inf for none: p = 0 */
            if (deltas) {   /* a lane to a row */
                size_t row = queries + 16 * at.warp + at.lane % 16;
                float value = 0.0f, statistic = INFINITY;
                if (row < at.segment.length) {
                    size_t r = at.segment.begin + row;
                    value = deltas[r * at.heads + at.head];
                    statistic = logsumexp[r * at.heads + at.head] * UFORM_MMA_LOG2E;
                }
                if (at.lane < 16) delta[16 * at.warp + at.lane] = value, lse[16 * at.warp + at.lane] = statistic;
            } else {
                for (int i = 0; i < 16; i++) {   /* D by the whole warp, row after row */
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
            __syncthreads();
            float s[8][4], dp[8][4];
            uform_mma_clear(s);
            uform_mma_clear(dp);
            uform_mma_16x64x64(s, k, q_rows);       /* s[key][query] */
            uform_mma_16x64x64(dp, v, dout_rows);   /* v . dout */
            for (int n = 0; n < 8; n++)
                for (int e = 0; e < 4; e++) {
                    int query = 8 * n + at.t + (e & 1);
                    s[n][e] = exp2f(s[n][e] * UFORM_MMA_SCALE - lse[query]);   /* p */
                    dp[n][e] = s[n][e] * (dp[n][e] - delta[query]) * 0.125f;   /* ds */
                }
            uint32_t p[4][4], ds[4][4];
            uform_mma_repack(s, p);
            uform_mma_repack(dp, ds);
            uform_mma_16x64x64(dv, p, dout_columns);   /* dv[j][c] += sum over queries of p[j][i] dout[i][c] */
            uform_mma_16x64x64(dk, ds, q_columns);     /* dk[j][c] += sum over queries of ds[j][i] q[i][c] */
        }
        for (int h = 0; h < 2; h++) {
            size_t row = first + 16 * at.warp + at.g + 8 * h;
            if (row >= at.segment.length) continue;
            float *target = dqkv + (at.segment.begin + row) * at.stride + hidden + at.column;
            for (int n = 0; n < 8; n++) {
                float2 key = *(float2 *)(target + 8 * n + at.t), value = *(float2 *)(target + hidden + 8 * n + at.t);
                key.x += dk[n][2 * h], key.y += dk[n][2 * h + 1];
                value.x += dv[n][2 * h], value.y += dv[n][2 * h + 1];
                *(float2 *)(target + 8 * n + at.t) = key;
                *(float2 *)(target + hidden + 8 * n + at.t) = value;
            }
        }
    }
}

#endif /* UFORM_ATTENTION_MMA_CUH */
