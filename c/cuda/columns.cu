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
 * (emulation.h). */
#include "cuda_internal.h"
#include "bf16.cuh"
#include "gelu.cuh"
#include "rope.cuh"

#define UFORM_COLUMN_CHUNK 256
#define UFORM_COLUMN_THREADS 128

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
        sum_b += g;
        if (x) sum_w += g * (x[r * width + c] - mean[r]) * rstd[r];
    }
    partial_b[chunk * width + c] = sum_b;
    if (x) partial_w[chunk * width + c] = sum_w;
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
 * sums in the same order (the next profile says whether it paid). */
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
        float g = dy[r * width + c];
        if (pre) g = uform_gelu_backward_term(0.0f, g, pre[r * width + c]);
        if (turned) {
            float other = dy[r * width + (low ? c + UFORM_PAIRS : c - UFORM_PAIRS)];
            float cosine = cosines[r * UFORM_PAIRS + pair], sine = sines[r * UFORM_PAIRS + pair];
            float2 back = low ? uform_rope_turn_back(g, other, cosine, sine) : uform_rope_turn_back(other, g, cosine, sine);
            g = low ? back.x : back.y;
        }
        sum_b += g;
        out[r * width + c] = uform_bf16_bits(g);
    }
    partial_b[chunk * width + c] = sum_b;
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
    dim3 grid((unsigned)((width + UFORM_COLUMN_THREADS - 1) / UFORM_COLUMN_THREADS), (unsigned)chunks);
    if (rounded)
        UFORM_LAUNCH(uform_column_partials_bf16, grid, UFORM_COLUMN_THREADS, context->stream)(
            dy, form ? form->gelu_pre : NULL, form ? form->cosines : NULL, form ? form->sines : NULL, rows, width,
            chunk_rows, rounded, partial_b);
    else
        UFORM_LAUNCH(uform_column_partials, grid, UFORM_COLUMN_THREADS, context->stream)(
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
