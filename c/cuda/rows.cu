/* rows.cu: the CUDA backend's row operations (backend.h): embedding lookup,
 * mean pooling, L2 normalisation, byte cross-entropy, and row gathers and
 * scatters (the embedding's backward and sums of rows: columns.cu). A sum
 * over a few rows runs one thread per column, rows in order; sums within a
 * row use the fixed block tree of reduce.cuh. Run on an H200
 * (tests/gpu/test_cuda_ops.c, 2026-12-04); also runs under the emulation
 * (emulation.h). */
#include "cuda_internal.h"
#include "reduce.cuh"

#define UFORM_GRID_STRIDE(index, total)                                                          \
    for (size_t index = (size_t)blockIdx.x * blockDim.x + threadIdx.x; index < (total);          \
         index += (size_t)gridDim.x * blockDim.x)

static inline cudaStream_t uform_stream(uform_backend_t *b) { return uform_cuda_context(b)->stream; }

/* ---- embedding ------------------------------------------------------------- */

/* Blocks take rows (grid-stride), their threads the row's columns: no
 * division per element (the first version divided a 64-bit index by the
 * width for every value: 107 us a call of 34k rows on the H200, 2026-12-04). */
__global__ static void uform_embedding_forward_kernel(const float *table, const float *modality,
                                                      const uint32_t *ids, size_t rows, size_t width, float *y) {
    for (size_t r = blockIdx.x; r < rows; r += gridDim.x) {
        uint32_t id = ids[r];
        if (id == UFORM_NOT_TEXT) continue;
        const float *entry = table + (size_t)id * width;
        for (size_t c = threadIdx.x; c < width; c += blockDim.x)
            y[r * width + c] = modality ? entry[c] + modality[c] : entry[c];
    }
}

void uform_cuda_embedding_forward(uform_backend_t *b, const float *table, const float *modality,
                                  const uint32_t *ids, size_t rows, size_t width, float *y) {
    if (!rows || !width) return;
    unsigned blocks = (unsigned)(rows < 65535u * 16u ? rows : 65535u * 16u);
    UFORM_LAUNCH(uform_embedding_forward_kernel, blocks, 256, uform_stream(b))(table, modality, ids, rows, width, y);
    uform_cuda_launched(b, "embedding_forward");
}

/* ---- mean pooling ------------------------------------------------------------ */

__global__ static void uform_mean_pool_forward_kernel(const float *x, size_t width, const uform_segment_t *segments,
                                                      size_t count, float *pooled) {
    UFORM_GRID_STRIDE(index, count * width) {
        size_t s = index / width, c = index % width;
        uform_segment_t segment = segments[s];
        float sum = 0.0f;
        size_t r = segment.begin, end = segment.begin + segment.length;
        for (; r + 4 <= end; r += 4) {   /* four loads issued together; the sums stay in row order */
            float a = x[r * width + c], e = x[(r + 1) * width + c];
            float f = x[(r + 2) * width + c], g = x[(r + 3) * width + c];
            sum += a, sum += e, sum += f, sum += g;
        }
        for (; r < end; r++) sum += x[r * width + c];
        pooled[index] = sum * (segment.length ? 1.0f / (float)segment.length : 0.0f);
    }
}

void uform_cuda_mean_pool_forward(uform_backend_t *b, const float *x, size_t width, const uform_segment_t *segments,
                                  size_t count, float *pooled) {
    if (!count || !width) return;
    UFORM_LAUNCH(uform_mean_pool_forward_kernel, uform_cuda_blocks(count * width, 256), 256, uform_stream(b))(
        x, width, segments, count, pooled);
    uform_cuda_launched(b, "mean_pool_forward");
}

__global__ static void uform_mean_pool_backward_kernel(const float *dpooled, size_t width,
                                                       const uform_segment_t *segments, size_t count, float *dx) {
    UFORM_GRID_STRIDE(index, count * width) {
        size_t s = index / width, c = index % width;
        uform_segment_t segment = segments[s];
        if (!segment.length) continue;
        float share = dpooled[index] * (1.0f / (float)segment.length);
        for (size_t r = segment.begin; r < segment.begin + segment.length; r++) dx[r * width + c] += share;
    }
}

void uform_cuda_mean_pool_backward(uform_backend_t *b, const float *dpooled, size_t width,
                                   const uform_segment_t *segments, size_t count, float *dx) {
    if (!count || !width) return;
    UFORM_LAUNCH(uform_mean_pool_backward_kernel, uform_cuda_blocks(count * width, 256), 256, uform_stream(b))(
        dpooled, width, segments, count, dx);
    uform_cuda_launched(b, "mean_pool_backward");
}

/* ---- L2 normalisation ------------------------------------------------------ */

__global__ static void uform_normalize_forward_kernel(const float *x, size_t width, float *y, float *norms) {
    __shared__ float shared[UFORM_CUDA_ROW_THREADS / 32];
    size_t row = blockIdx.x;
    const float *source = x + row * width;
    float squares = 0.0f;
    for (size_t c = threadIdx.x; c < width; c += blockDim.x) squares += source[c] * source[c];
    float norm = sqrtf(uform_block_sum(squares, shared));
    float inverse = 1.0f / (norm > 1e-12f ? norm : 1e-12f);
    __syncthreads();   /* y may be x */
    for (size_t c = threadIdx.x; c < width; c += blockDim.x) y[row * width + c] = source[c] * inverse;
    if (norms && threadIdx.x == 0) norms[row] = norm;
}

void uform_cuda_normalize_forward(uform_backend_t *b, const float *x, size_t rows, size_t width, float *y,
                                  float *norms) {
    if (!rows) return;
    UFORM_LAUNCH(uform_normalize_forward_kernel, (unsigned)rows, UFORM_CUDA_ROW_THREADS, uform_stream(b))(x, width, y,
                                                                                                 norms);
    uform_cuda_launched(b, "normalize_forward");
}

/* |x| > 1e-12: dx += (dy - y (y . dy)) / |x|; else dx += dy / 1e-12. */
__global__ static void uform_normalize_backward_kernel(const float *dy, const float *y, const float *norms,
                                                       size_t width, float *dx) {
    __shared__ float shared[UFORM_CUDA_ROW_THREADS / 32];
    size_t row = blockIdx.x;
    const float *g = dy + row * width, *yr = y + row * width;
    float norm = norms[row];
    float inverse = 1.0f / (norm > 1e-12f ? norm : 1e-12f);
    float dot = 0.0f;
    for (size_t c = threadIdx.x; c < width; c += blockDim.x) dot += yr[c] * g[c];
    dot = uform_block_sum(dot, shared);
    if (!(norm > 1e-12f)) dot = 0.0f;
    __syncthreads();   /* dx may alias dy */
    for (size_t c = threadIdx.x; c < width; c += blockDim.x) dx[row * width + c] += (g[c] - yr[c] * dot) * inverse;
}

void uform_cuda_normalize_backward(uform_backend_t *b, const float *dy, const float *y, const float *norms,
                                   size_t rows, size_t width, float *dx) {
    if (!rows) return;
    UFORM_LAUNCH(uform_normalize_backward_kernel, (unsigned)rows, UFORM_CUDA_ROW_THREADS, uform_stream(b))(
        dy, y, norms, width, dx);
    uform_cuda_launched(b, "normalize_backward");
}

/* ---- byte cross-entropy ------------------------------------------------------ */

/* The row's largest logit and sum of exp(logit - largest), block-wide. */
__device__ static void uform_softmax_sums(const float *row, size_t classes, float *shared, float *top_out,
                                          float *total_out) {
    __shared__ float top_shared[UFORM_CUDA_ROW_THREADS];
    float top = -INFINITY;
    for (size_t c = threadIdx.x; c < classes; c += blockDim.x) top = fmaxf(top, row[c]);
    top_shared[threadIdx.x] = top;
    __syncthreads();
    for (unsigned half = UFORM_CUDA_ROW_THREADS / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) top_shared[threadIdx.x] = fmaxf(top_shared[threadIdx.x], top_shared[threadIdx.x + half]);
        __syncthreads();
    }
    top = top_shared[0];
    float total = 0.0f;
    for (size_t c = threadIdx.x; c < classes; c += blockDim.x) total += expf(row[c] - top);
    *top_out = top;
    *total_out = uform_block_sum(total, shared);
}

__global__ static void uform_cross_entropy_forward_kernel(const float *logits, size_t classes,
                                                          const uint32_t *targets, float *losses) {
    __shared__ float shared[UFORM_CUDA_ROW_THREADS / 32];
    const float *row = logits + (size_t)blockIdx.x * classes;
    float top, total;
    uform_softmax_sums(row, classes, shared, &top, &total);
    if (threadIdx.x == 0) losses[blockIdx.x] = (top + logf(total)) - row[targets[blockIdx.x]];
}

void uform_cuda_cross_entropy_forward(uform_backend_t *b, const float *logits, size_t rows, size_t classes,
                                      const uint32_t *targets, float *losses) {
    if (!rows) return;
    UFORM_LAUNCH(uform_cross_entropy_forward_kernel, (unsigned)rows, UFORM_CUDA_ROW_THREADS, uform_stream(b))(
        logits, classes, targets, losses);
    uform_cuda_launched(b, "cross_entropy_forward");
}

__global__ static void uform_cross_entropy_backward_kernel(const float *logits, size_t classes,
                                                           const uint32_t *targets, const float *scale,
                                                           float *dlogits) {
    __shared__ float shared[UFORM_CUDA_ROW_THREADS / 32];
    size_t r = blockIdx.x;
    float weight = scale[r];
    if (weight == 0.0f) return;   /* the whole block agrees: no barrier is skipped by part of it */
    const float *row = logits + r * classes;
    float top, total;
    uform_softmax_sums(row, classes, shared, &top, &total);
    float inverse = 1.0f / total;
    for (size_t c = threadIdx.x; c < classes; c += blockDim.x) {
        float p = expf(row[c] - top) * inverse;
        dlogits[r * classes + c] += weight * (c == targets[r] ? p - 1.0f : p);
    }
}

void uform_cuda_cross_entropy_backward(uform_backend_t *b, const float *logits, size_t rows, size_t classes,
                                       const uint32_t *targets, const float *scale, float *dlogits) {
    if (!rows) return;
    UFORM_LAUNCH(uform_cross_entropy_backward_kernel, (unsigned)rows, UFORM_CUDA_ROW_THREADS, uform_stream(b))(
        logits, classes, targets, scale, dlogits);
    uform_cuda_launched(b, "cross_entropy_backward");
}

/* ---- gathers, scatters and sums of rows ---------------------------------------- */

__global__ static void uform_gather_rows_kernel(const float *src, size_t width, const size_t *rows, size_t count,
                                                float *dst) {
    UFORM_GRID_STRIDE(index, count * width) {
        size_t i = index / width, c = index % width;
        dst[index] = src[rows[i] * width + c];
    }
}

void uform_cuda_gather_rows(uform_backend_t *b, const float *src, size_t width, const size_t *rows, size_t count,
                            float *dst) {
    if (!count || !width) return;
    UFORM_LAUNCH(uform_gather_rows_kernel, uform_cuda_blocks(count * width, 256), 256, uform_stream(b))(src, width, rows,
                                                                                                count, dst);
    uform_cuda_launched(b, "gather_rows");
}

/* Rows may repeat: each element of dst takes its rows' values in index
 * order, one chain, by the one thread that owns its column and its row's
 * group (the row mod UFORM_SCATTER_GROUPS, grid y). The first version gave a
 * column one thread walking every row: on the H200 (2026-12-04) the masked
 * objective's scatter of 32768 x 768 took 2 ms of a training step, each +=
 * waiting for the one before (any might hit the same row); now 64 threads a
 * column share that walk, each waiting only for its own rows. The same bits. */
#define UFORM_SCATTER_GROUPS 64
__global__ static void uform_scatter_add_rows_kernel(const float *__restrict__ src, size_t width,
                                                     const size_t *__restrict__ rows, size_t count, float *dst) {
    size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x, group = blockIdx.y;
    if (c >= width) return;
    for (size_t i = 0; i < count; i++) {
        size_t r = rows[i];
        if ((r & (UFORM_SCATTER_GROUPS - 1)) == group) dst[r * width + c] += src[i * width + c];
    }
}

void uform_cuda_scatter_add_rows(uform_backend_t *b, const float *src, size_t width, const size_t *rows,
                                 size_t count, float *dst) {
    if (!count || !width) return;
    UFORM_LAUNCH(uform_scatter_add_rows_kernel, dim3(uform_cuda_blocks(width, 128), UFORM_SCATTER_GROUPS), 128,
                 uform_stream(b))(src, width, rows,
                                                                                             count, dst);
    uform_cuda_launched(b, "scatter_add_rows");
}

__global__ static void uform_scatter_rows_kernel(const float *src, size_t src_stride, const float *add,
                                                 size_t width, const size_t *rows, size_t count, float *dst) {
    UFORM_GRID_STRIDE(index, count * width) {
        size_t i = index / width, c = index % width;
        float value = src[i * src_stride + c];
        dst[(rows ? rows[i] : i) * width + c] = add ? value + add[c] : value;
    }
}

void uform_cuda_scatter_rows(uform_backend_t *b, const float *src, size_t src_stride, const float *add,
                             size_t width, const size_t *rows, size_t count, float *dst) {
    if (!count || !width) return;
    UFORM_LAUNCH(uform_scatter_rows_kernel, uform_cuda_blocks(count * width, 256), 256, uform_stream(b))(
        src, src_stride, add, width, rows, count, dst);
    uform_cuda_launched(b, "scatter_rows");
}

