/* columns.cu: sums over the rows of each column, for the weight gradients of
 * biases and layer norms (dbias[c] += sum over r of dy[r][c]; a layer norm's
 * dweight[c] += sum over r of dy[r][c] xhat[r][c] as well), for sums over a
 * list of rows (sum_rows), and for the embedding table's gradient (each row's
 * dy added into its id's row: a sum per (id, column)).
 *
 * The embedding table has UFORM_BYTES + 1 rows (the bytes and MASK), which
 * bounds the ids (backend.h): each chunk of rows keeps a partial table of
 * that many rows, zeroed, then summed over the chunks in order; at most
 * UFORM_COLUMN_TABLE_CHUNKS chunks, so the partials stay within
 * 64 x 257 x width floats (50 MB at width 768) whatever the rows.
 *
 * One thread per column walking every row would leave a GPU nearly idle (a
 * few hundred threads for 16k rows: milliseconds per call, several calls per
 * layer). Two passes instead, each a fixed chain, so a column's sum does not
 * depend on the GPU or the launch: rows in chunks of UFORM_COLUMN_CHUNK (more
 * for more than 65535 chunks; the chunk size depends on the row count only),
 * one thread per (chunk, column) summing the chunk's rows in order, then one
 * thread per column summing the chunks in order. Run on an H200
 * (tests/gpu/test_cuda_ops.c, 2026-12-04); also runs under the emulation
 * (emulation.h).
 *
 * Where the width is a multiple of 4 and the rows 16-byte aligned, a thread
 * takes four neighbouring columns of its chunk (the _x4 kernels: one 16-byte
 * load of each row's four values, an 8-byte store of their BF16 words)
 * instead of one: a quarter of the load instructions, and four times the
 * bytes in flight for each load a thread waits on. Each column's partial is
 * still its chunk's rows in order, so the same bits as the one-column
 * kernels, which take the other widths (written 2026-12-06 without a GPU:
 * compiled for sm_80 to sm_100a and run under the emulation, where
 * tests/gpu/test_cuda_ops.c checks both kernels' results bit for bit; not
 * yet run on a GPU). */
#include "cuda_internal.h"
#include "bf16.cuh"
#include "gelu.cuh"
#include "rope.cuh"

#define UFORM_COLUMN_CHUNK 256
#define UFORM_COLUMN_THREADS 128
#define UFORM_COLUMN_LANES 4          /* columns a thread of the _x4 kernels */
#define UFORM_COLUMN_THREADS_X4 64    /* 256 columns a block: less of a last block idle at width 768 */

/* g (x - mean) rstd added to sum_w, each rounding explicit: no contraction
 * into a fused multiply-add, which nvcc could decide differently in the two
 * kernels that use it, so both make the same bits. */
__device__ static inline float uform_column_weight_term(float sum_w, float g, float x, float mean, float rstd) {
    return __fadd_rn(sum_w, __fmul_rn(__fmul_rn(g, __fsub_rn(x, mean)), rstd));
}

/* What the rounding kernels sum and round of g = dy[r][c]: GELU's backward
 * at pre's value p (gelu), or q's and k's columns turned back with their
 * pair's other half o and the row's cosine and sine (turned; low: c is the
 * pair's first half), or g itself. */
__device__ static inline float uform_column_form(float g, bool gelu, float p, bool turned, bool low, float o,
                                                 float cosine, float sine) {
    if (gelu) g = uform_gelu_backward_term(0.0f, g, p);
    if (turned) {
        float2 back = low ? uform_rope_turn_back(g, o, cosine, sine) : uform_rope_turn_back(o, g, cosine, sine);
        g = low ? back.x : back.y;
    }
    return g;
}

/* partial_b[chunk][c] = sum of dy over the chunk's rows (row i is list[i],
 * or i without a list); partial_w (when x is not NULL) the same of
 * dy (x - mean) rstd. */
__global__ static void uform_column_partials(const float *dy, const size_t *list, const float *x, const float *mean,
                                             const float *rstd, size_t rows, size_t width, size_t chunk_rows,
                                             float *partial_w, float *partial_b) {
    size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y;
    if (c >= width) return;
    size_t first = chunk * chunk_rows, last = first + chunk_rows < rows ? first + chunk_rows : rows;
    float sum_w = 0.0f, sum_b = 0.0f;
    for (size_t i = first; i < last; i++) {
        size_t r = list ? list[i] : i;
        float g = dy[r * width + c];
        sum_b = __fadd_rn(sum_b, g);
        if (x) sum_w = uform_column_weight_term(sum_w, g, x[r * width + c], mean[r], rstd[r]);
    }
    partial_b[chunk * width + c] = sum_b;
    if (x) partial_w[chunk * width + c] = sum_w;
}

/* The same partials, four columns a thread (c a multiple of 4; dy and x
 * 16-byte aligned, width a multiple of 4). */
__global__ static void uform_column_partials_x4(const float *__restrict__ dy, const size_t *__restrict__ list,
                                                const float *__restrict__ x, const float *__restrict__ mean,
                                                const float *__restrict__ rstd, size_t rows, size_t width,
                                                size_t chunk_rows, float *__restrict__ partial_w,
                                                float *__restrict__ partial_b) {
    size_t c = UFORM_COLUMN_LANES * ((size_t)blockIdx.x * blockDim.x + threadIdx.x), chunk = blockIdx.y;
    if (c >= width) return;
    size_t first = chunk * chunk_rows, last = first + chunk_rows < rows ? first + chunk_rows : rows;
    float4 sum_w = make_float4(0.0f, 0.0f, 0.0f, 0.0f), sum_b = sum_w;
#ifndef UFORM_CUDA_EMULATION   /* nvcc's pragma; the emulation's g++ has none */
#pragma unroll 4
#endif
    for (size_t i = first; i < last; i++) {
        size_t r = list ? list[i] : i;
        float4 g = *(const float4 *)(dy + r * width + c);
        sum_b.x = __fadd_rn(sum_b.x, g.x), sum_b.y = __fadd_rn(sum_b.y, g.y);
        sum_b.z = __fadd_rn(sum_b.z, g.z), sum_b.w = __fadd_rn(sum_b.w, g.w);
        if (x) {
            float4 v = *(const float4 *)(x + r * width + c);
            float m = mean[r], s = rstd[r];
            sum_w.x = uform_column_weight_term(sum_w.x, g.x, v.x, m, s);
            sum_w.y = uform_column_weight_term(sum_w.y, g.y, v.y, m, s);
            sum_w.z = uform_column_weight_term(sum_w.z, g.z, v.z, m, s);
            sum_w.w = uform_column_weight_term(sum_w.w, g.w, v.w, m, s);
        }
    }
    *(float4 *)(partial_b + chunk * width + c) = sum_b;
    if (x) *(float4 *)(partial_w + chunk * width + c) = sum_w;
}

/* Written after the last call of 2026-12-04 (the same partials as below under
 * the emulation); run on an H100 (2026-12-05, the third session with a GPU: tests/gpu/, every check passing).
 * The same sums of dy (no list, no x) while dy is rounded to BF16 into out
 * [rows, width]: a linear_backward's bias gradient and its products' operand
 * dy from one read of dy (each thread rounds the elements it sums). The same
 * partials, in the same order, as uform_column_partials.
 * With `pre` (2026-12-05, first run on the H100 the same day): dy is the gradient
 * of GELU's output and pre its input [rows, width], and the values summed
 * and rounded are the gradient of pre, 0 + dy gelu'(pre) as gelu_backward
 * adds it into zeros (gelu.cuh's uform_gelu_backward_term, so the same bits):
 * the up projection's backward without that gradient's FP32 rows.
 * With `cosines` (and sines; 2026-12-05, first run on the H100 the same day): dy is qkv's
 * gradient [rows, 3H] as the attention left it, and the values summed and
 * rounded are those rope_backward makes of it, q's and k's columns turned
 * back with their pair's other half (rope.cuh's uform_rope_turn_back, the
 * same bits; the other half's loads are the neighbouring threads' and hit
 * in cache): the qkv projection's backward without the rotation's pass. */
/* On the H100 (2026-12-05) this kernel moved its bytes at about half the
 * bandwidth (13.3 ms of a 95 ms step: 49 calls, the up projection's reading
 * 800 MB): a thread walks its chunk's rows one load at a time. Since then
 * (not yet run on a GPU) the pointers are __restrict__ and the loop unrolled
 * by 4, so that a thread can have several rows' loads in flight; the same
 * sums in the same order; and (2026-12-06, not yet run on a GPU either)
 * widths that are multiples of 4 go to uform_column_partials_bf16_x4 below,
 * four columns a thread, 16-byte loads. The next profile says whether they
 * paid. */
__global__ static void uform_column_partials_bf16(const float *__restrict__ dy, const float *__restrict__ pre,
                                                  const float *__restrict__ cosines, const float *__restrict__ sines,
                                                  size_t rows, size_t width, size_t chunk_rows,
                                                  uint16_t *__restrict__ out, float *__restrict__ partial_b) {
    size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y;
    if (c >= width) return;
    size_t first = chunk * chunk_rows, last = first + chunk_rows < rows ? first + chunk_rows : rows;
    /* q and k: columns below 2H of qkv's 3H; a column's pair and half in its head */
    bool turned = cosines && c < 2 * (width / 3);
    size_t pair = c % UFORM_PAIRS;
    bool low = c % UFORM_HEAD_WIDTH < UFORM_PAIRS;
    float sum_b = 0.0f;
#ifndef UFORM_CUDA_EMULATION   /* nvcc's pragma; the emulation's g++ has none */
#pragma unroll 4
#endif
    for (size_t r = first; r < last; r++) {
        float g = dy[r * width + c], p = pre ? pre[r * width + c] : 0.0f, other = 0.0f, cosine = 0.0f, sine = 0.0f;
        if (turned) {
            other = dy[r * width + (low ? c + UFORM_PAIRS : c - UFORM_PAIRS)];
            cosine = cosines[r * UFORM_PAIRS + pair], sine = sines[r * UFORM_PAIRS + pair];
        }
        g = uform_column_form(g, pre != NULL, p, turned, low, other, cosine, sine);
        sum_b = __fadd_rn(sum_b, g);
        out[r * width + c] = uform_bf16_bits(g);
    }
    partial_b[chunk * width + c] = sum_b;
}

/* The same, four columns a thread (c a multiple of 4, so its four columns
 * share their half of a head and their pairs are four neighbours; dy, pre,
 * the tables and out 16-byte aligned, width a multiple of 4). */
__global__ static void uform_column_partials_bf16_x4(const float *__restrict__ dy, const float *__restrict__ pre,
                                                     const float *__restrict__ cosines,
                                                     const float *__restrict__ sines, size_t rows, size_t width,
                                                     size_t chunk_rows, uint16_t *__restrict__ out,
                                                     float *__restrict__ partial_b) {
    size_t c = UFORM_COLUMN_LANES * ((size_t)blockIdx.x * blockDim.x + threadIdx.x), chunk = blockIdx.y;
    if (c >= width) return;
    size_t first = chunk * chunk_rows, last = first + chunk_rows < rows ? first + chunk_rows : rows;
    bool turned = cosines && c < 2 * (width / 3);
    size_t pair = c % UFORM_PAIRS;
    bool low = c % UFORM_HEAD_WIDTH < UFORM_PAIRS;
    size_t partner = low ? c + UFORM_PAIRS : c - UFORM_PAIRS;
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float4 sum_b = zero;
#ifndef UFORM_CUDA_EMULATION
#pragma unroll 4
#endif
    for (size_t r = first; r < last; r++) {
        float4 g = *(const float4 *)(dy + r * width + c);
        float4 p = pre ? *(const float4 *)(pre + r * width + c) : zero, other = zero, cosine = zero, sine = zero;
        if (turned) {
            other = *(const float4 *)(dy + r * width + partner);
            cosine = *(const float4 *)(cosines + r * UFORM_PAIRS + pair);
            sine = *(const float4 *)(sines + r * UFORM_PAIRS + pair);
        }
        bool gelu = pre != NULL;
        g.x = uform_column_form(g.x, gelu, p.x, turned, low, other.x, cosine.x, sine.x);
        g.y = uform_column_form(g.y, gelu, p.y, turned, low, other.y, cosine.y, sine.y);
        g.z = uform_column_form(g.z, gelu, p.z, turned, low, other.z, cosine.z, sine.z);
        g.w = uform_column_form(g.w, gelu, p.w, turned, low, other.w, cosine.w, sine.w);
        sum_b.x = __fadd_rn(sum_b.x, g.x), sum_b.y = __fadd_rn(sum_b.y, g.y);
        sum_b.z = __fadd_rn(sum_b.z, g.z), sum_b.w = __fadd_rn(sum_b.w, g.w);
        *(uint2 *)(out + r * width + c) = make_uint2(uform_bf16_pair(g.x, g.y), uform_bf16_pair(g.z, g.w));
    }
    *(float4 *)(partial_b + chunk * width + c) = sum_b;
}

/* sums[c] += the chunks' partials in order. */
__global__ static void uform_column_totals(const float *partials, size_t chunks, size_t width, float *sums) {
    size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= width) return;
    float sum = 0.0f;
    for (size_t k = 0; k < chunks; k++) sum += partials[k * width + c];
    sums[c] += sum;
}

/* dbias += column sums of dy; with x, dweight += column sums of dy xhat (a
 * layer norm's, mean and rstd per row). dweight or dbias may be NULL. With
 * `rounded` (no list, no x), dy is also rounded to BF16 into it (dbias may
 * be NULL then: the rounding alone), or with `form`, what form says is made
 * of dy: GELU's backward or rope_backward's rotation (uform_column_partials_bf16). */
static void uform_cuda_columns(uform_backend_t *b, const float *dy, const size_t *list, const float *x,
                               const float *mean, const float *rstd, size_t rows, size_t width, float *dweight,
                               float *dbias, uint16_t *rounded = NULL, const uform_cuda_dy_form_t *form = NULL) {
    if (!rows || !width || (!dweight && !dbias && !rounded)) return;
    uform_cuda_context_t *context = uform_cuda_context(b);
    size_t chunk_rows = UFORM_COLUMN_CHUNK;
    if ((rows + chunk_rows - 1) / chunk_rows > 65535) chunk_rows = (rows + 65534) / 65535;
    size_t chunks = (rows + chunk_rows - 1) / chunk_rows;
    float *partial_b = (float *)uform_cuda_grow(b, &context->column_partials, 2 * chunks * width * sizeof(float),
                                                "column sums");
    if (!partial_b) return;
    float *partial_w = partial_b + chunks * width;
    bool weights = x && dweight;
    const float *pre = form ? form->gelu_pre : NULL, *cosines = form ? form->cosines : NULL;
    const float *sines = form ? form->sines : NULL;
    const void *const loaded[] = {dy, weights ? x : NULL, pre, cosines, sines, rounded, partial_b, partial_w};
    bool x4 = context->column_lanes != 1 && width % UFORM_COLUMN_LANES == 0;
    for (size_t i = 0; i < sizeof(loaded) / sizeof(loaded[0]); i++) x4 = x4 && (uintptr_t)loaded[i] % 16 == 0;
    unsigned threads = x4 ? UFORM_COLUMN_THREADS_X4 : UFORM_COLUMN_THREADS;
    size_t lanes = x4 ? UFORM_COLUMN_LANES : 1, columns_a_block = threads * lanes;
    dim3 grid((unsigned)((width + columns_a_block - 1) / columns_a_block), (unsigned)chunks);
    context->column_lanes_last = lanes;
    if (rounded && x4)
        UFORM_LAUNCH(uform_column_partials_bf16_x4, grid, threads, context->stream)(
            dy, pre, cosines, sines, rows, width, chunk_rows, rounded, partial_b);
    else if (rounded)
        UFORM_LAUNCH(uform_column_partials_bf16, grid, threads, context->stream)(
            dy, pre, cosines, sines, rows, width, chunk_rows, rounded, partial_b);
    else if (x4)
        UFORM_LAUNCH(uform_column_partials_x4, grid, threads, context->stream)(
            dy, list, weights ? x : NULL, mean, rstd, rows, width, chunk_rows, partial_w, partial_b);
    else
        UFORM_LAUNCH(uform_column_partials, grid, threads, context->stream)(
            dy, list, weights ? x : NULL, mean, rstd, rows, width, chunk_rows, partial_w, partial_b);
    uform_cuda_launched(b, "column sums");
    unsigned blocks = (unsigned)((width + UFORM_COLUMN_THREADS - 1) / UFORM_COLUMN_THREADS);
    if (dbias) {
        UFORM_LAUNCH(uform_column_totals, blocks, UFORM_COLUMN_THREADS, context->stream)(partial_b, chunks, width,
                                                                                        dbias);
        uform_cuda_launched(b, "column sums (total)");
    }
    if (weights) {
        UFORM_LAUNCH(uform_column_totals, blocks, UFORM_COLUMN_THREADS, context->stream)(partial_w, chunks, width,
                                                                                        dweight);
        uform_cuda_launched(b, "column sums (total)");
    }
}

extern "C" void uform_cuda_column_lanes(uform_backend_t *b, size_t lanes) {
    uform_cuda_context(b)->column_lanes = lanes;
}

extern "C" size_t uform_cuda_column_lanes_last(uform_backend_t *b) {
    return uform_cuda_context(b)->column_lanes_last;
}

extern "C" void uform_cuda_column_pass(uform_backend_t *b, const float *dy, const float *pre, const float *cosines,
                                       const float *sines, size_t rows, size_t width, bool rounded, float *sums) {
    if (!rounded) {
        uform_cuda_columns(b, dy, NULL, NULL, NULL, NULL, rows, width, NULL, sums);
        return;
    }
    const uform_cuda_dy_form_t form = {pre, cosines, sines};
    (void)uform_cuda_bf16_column_sums(b, &uform_cuda_context(b)->bf16_gradients, dy, &form, rows, width, sums);
}

void uform_cuda_column_sums(uform_backend_t *b, const float *dy, size_t rows, size_t width, float *sums) {
    uform_cuda_columns(b, dy, NULL, NULL, NULL, NULL, rows, width, NULL, sums);
}

const uint16_t *uform_cuda_bf16_column_sums(uform_backend_t *b, uform_cuda_buffer_t *buffer, const float *dy,
                                            const uform_cuda_dy_form_t *form, size_t rows, size_t width,
                                            float *sums) {
    uint16_t *rounded = (uint16_t *)uform_cuda_grow(b, buffer, rows * width * sizeof(uint16_t), "BF16 operands");
    if (!rounded) return NULL;   /* recorded */
    uform_cuda_columns(b, dy, NULL, NULL, NULL, NULL, rows, width, NULL, sums, rounded, form);
    return rounded;
}

void uform_cuda_layer_norm_columns(uform_backend_t *b, const float *dy, const float *x, const float *mean,
                                   const float *rstd, size_t rows, size_t width, float *dweight, float *dbias) {
    uform_cuda_columns(b, dy, NULL, x, mean, rstd, rows, width, dweight, dbias);
}

void uform_cuda_sum_rows(uform_backend_t *b, const float *src, size_t width, const size_t *rows, size_t count,
                         float *sums) {
    uform_cuda_columns(b, src, rows, NULL, NULL, NULL, count, width, NULL, sums);
}

/* ---- the embedding table's gradient ---- */

#define UFORM_COLUMN_TABLE_ROWS (UFORM_BYTES + 1)
#define UFORM_COLUMN_TABLE_CHUNKS 64

/* tables[chunk][id][c] += dy[r][c] and modality[chunk][c] += dy[r][c] over the
 * chunk's rows in order (UFORM_NOT_TEXT rows skipped); the tables start zeroed. */
__global__ static void uform_embedding_partials(const float *dy, const uint32_t *ids, size_t rows, size_t width,
                                                size_t chunk_rows, float *tables, float *modality) {
    size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y;
    if (c >= width) return;
    size_t first = chunk * chunk_rows, last = first + chunk_rows < rows ? first + chunk_rows : rows;
    float *table = tables + chunk * UFORM_COLUMN_TABLE_ROWS * width;
    float sum = 0.0f;
    for (size_t r = first; r < last; r++) {
        uint32_t id = ids[r];
        if (id == UFORM_NOT_TEXT) continue;
        float g = dy[r * width + c];
        table[(size_t)id * width + c] += g;
        sum += g;
    }
    modality[chunk * width + c] = sum;
}

void uform_cuda_embedding_backward(uform_backend_t *b, const float *dy, const uint32_t *ids, size_t rows,
                                   size_t width, float *dtable, float *dmodality) {
    if (!rows || !width || (!dtable && !dmodality)) return;
    uform_cuda_context_t *context = uform_cuda_context(b);
    size_t chunks = (rows + UFORM_COLUMN_CHUNK - 1) / UFORM_COLUMN_CHUNK;
    if (chunks > UFORM_COLUMN_TABLE_CHUNKS) chunks = UFORM_COLUMN_TABLE_CHUNKS;
    size_t chunk_rows = (rows + chunks - 1) / chunks, table = UFORM_COLUMN_TABLE_ROWS * width;
    float *tables = (float *)uform_cuda_grow(b, &context->column_partials, chunks * (table + width) * sizeof(float),
                                             "embedding gradient");
    if (!tables) return;
    float *modality = tables + chunks * table;
    uform_cuda_zero(b, tables, chunks * table * sizeof(float));
    dim3 grid((unsigned)((width + UFORM_COLUMN_THREADS - 1) / UFORM_COLUMN_THREADS), (unsigned)chunks);
    UFORM_LAUNCH(uform_embedding_partials, grid, UFORM_COLUMN_THREADS, context->stream)(dy, ids, rows, width,
                                                                                       chunk_rows, tables, modality);
    uform_cuda_launched(b, "embedding_backward");
    /* the chunks' tables summed in order: a column sum over `chunks` rows of a [chunks, table] matrix */
    if (dtable) {
        UFORM_LAUNCH(uform_column_totals, (unsigned)((table + UFORM_COLUMN_THREADS - 1) / UFORM_COLUMN_THREADS),
                     UFORM_COLUMN_THREADS, context->stream)(tables, chunks, table, dtable);
        uform_cuda_launched(b, "embedding_backward (table)");
    }
    if (dmodality) {
        UFORM_LAUNCH(uform_column_totals, (unsigned)((width + UFORM_COLUMN_THREADS - 1) / UFORM_COLUMN_THREADS),
                     UFORM_COLUMN_THREADS, context->stream)(modality, chunks, width, dmodality);
        uform_cuda_launched(b, "embedding_backward (modality)");
    }
}
