/* maxsim.cu: MaxSim on the GPU (backend.h: maxsim), what
 * uform_late_interaction_scores runs when its executor holds GPUs.
 *
 * The token rows are host memory, in any scalar the scorer reads: each side's
 * rows go up as they lie (one copy), a kernel widens them to FP32 (I8 as its
 * integers, FP8 codes as their values, as the CPU's converter does), and a
 * warp per (query, document) pair takes, for each query row, the FP32 dot
 * products with the document's rows (one fused multiply-add per step, in
 * order: the chains of the CPU's FMA paths, so the same bits), their maximum
 * (NaN when any product is NaN) and sums the maxima over the query's rows in
 * float64, in order; the mean times the sides' 1/127 for I8, then FP32. The
 * scores come down. One allocation per call, freed before it returns.
 * Run on an H200, every scalar (tests/gpu/test_cuda_ops.c, 2026-12-04), speed
 * not measured; also runs under the emulation (emulation.h). */
#include "cuda_internal.h"
#include "reduce.cuh"

#include "core/f16_widen.h"   /* the CPU scorer's F16 widening */

#include <math.h>
#include <string.h>

/* out[r, c] = the value of scalar c of row r (rows of row_bytes from raw). */
__global__ static void uform_maxsim_widen(const uint8_t *raw, size_t row_bytes, size_t rows, size_t width,
                                          uform_scalar_t scalar, float *out) {
    size_t index = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; index < rows * width; index += (size_t)gridDim.x * blockDim.x) {
        const uint8_t *row = raw + index / width * row_bytes;
        size_t c = index % width;
        float value = 0.0f;
        switch (scalar) {
        case UFORM_SCALAR_F32: memcpy(&value, row + 4 * c, sizeof(value)); break;
        case UFORM_SCALAR_BF16: {
            uint16_t bits;
            memcpy(&bits, row + 2 * c, sizeof(bits));
            uint32_t wide = (uint32_t)bits << 16;
            memcpy(&value, &wide, sizeof(value));
            break;
        }
        case UFORM_SCALAR_F16: {
            uint16_t bits;
            memcpy(&bits, row + 2 * c, sizeof(bits));
            value = uform_f16_widen(bits);
            break;
        }
        case UFORM_SCALAR_I8: value = (float)(int8_t)row[c]; break;
        case UFORM_SCALAR_E4M3: value = uform_e4m3_float(row[c]); break;
        case UFORM_SCALAR_E5M2: value = uform_f16_widen((uint16_t)(row[c] << 8)); break;   /* F16's top byte */
        default: break;
        }
        out[index] = value;
    }
}

#define UFORM_MAXSIM_WARPS (UFORM_CUDA_ROW_THREADS / 32)

/* scores[p] for pairs p = (query item, document item), a warp each: lanes take
 * the document's rows in turn. Offsets are rows of the widened sides. */
__global__ static void uform_maxsim_pairs(const float *queries, const size_t *query_offsets, const float *documents,
                                          const size_t *document_offsets, size_t document_count, size_t pairs,
                                          size_t width, double scale, float *scores) {
    const unsigned lane = threadIdx.x % 32;
    for (size_t p = (size_t)blockIdx.x * UFORM_MAXSIM_WARPS + threadIdx.x / 32; p < pairs;
         p += (size_t)gridDim.x * UFORM_MAXSIM_WARPS) {
        const size_t qi = p / document_count, di = p % document_count;
        const size_t q_first = query_offsets[qi], q_rows = query_offsets[qi + 1] - q_first;
        const size_t d_first = document_offsets[di], d_rows = document_offsets[di + 1] - d_first;
        if (q_rows == 0 || d_rows == 0) {
            if (lane == 0) scores[p] = 0.0f;
            continue;
        }
        double sum = 0.0;
        for (size_t t = 0; t < q_rows; t++) {
            const float *query = queries + (q_first + t) * width;
            float best = -INFINITY;
            int unordered = 0;
            for (size_t u = lane; u < d_rows; u += 32) {
                const float *document = documents + (d_first + u) * width;
                float dot = 0.0f;
                for (size_t c = 0; c < width; c++) dot = fmaf(query[c], document[c], dot);
                if (dot != dot) unordered = 1;
                else if (dot > best) best = dot;
            }
            for (int step = 16; step > 0; step /= 2) {
                float other = __shfl_xor_sync(0xffffffffu, best, step);
                int other_unordered = __shfl_xor_sync(0xffffffffu, unordered, step);
                best = other > best ? other : best;
                unordered |= other_unordered;
            }
            sum += unordered ? (double)NAN : (double)best;
        }
        if (lane == 0) scores[p] = (float)(sum / (double)q_rows * scale);
    }
}

/* Bytes of one scalar of the scorer's (late_interaction_scores.c checked it). */
static size_t uform_maxsim_scalar_bytes(uform_scalar_t scalar) {
    return scalar == UFORM_SCALAR_F32 ? 4 : scalar == UFORM_SCALAR_BF16 || scalar == UFORM_SCALAR_F16 ? 2 : 1;
}

typedef struct {
    const uform_token_rows_t *side;
    size_t rows;              /* offsets[count] - offsets[0] */
    size_t raw_bytes;         /* bytes from the first row to the last row's last scalar */
    size_t raw_at, offsets_at, values_at;
} uform_maxsim_side_t;

/* A side's sizes, false when they overflow. */
static bool uform_maxsim_measure(const uform_token_rows_t *side, uform_maxsim_side_t *s) {
    s->side = side;
    s->rows = side->offsets[side->count] - side->offsets[0];
    s->raw_bytes = 0;
    size_t values;
    if (s->rows && (!uform_mul_ok(s->rows - 1, side->row_bytes, &s->raw_bytes) ||
                    !uform_add_ok(s->raw_bytes, side->width * uform_maxsim_scalar_bytes(side->scalar), &s->raw_bytes)))
        return false;
    return uform_mul_ok(s->rows, side->width, &values) && values < ((size_t)1 << 40) &&
           side->count < ((size_t)1 << 40);
}

/* Lays the side out from `at`; returns the end. */
static size_t uform_maxsim_place(uform_maxsim_side_t *s, size_t at) {
    s->raw_at = at;
    s->offsets_at = uform_cuda_align8(at + s->raw_bytes);
    s->values_at = uform_cuda_align8(s->offsets_at + (s->side->count + 1) * sizeof(size_t));
    return s->values_at + s->rows * s->side->width * sizeof(float);
}

/* Uploads the side's rows and rebased offsets and widens the rows. */
static uform_status_t uform_maxsim_upload(uform_backend_t *b, uint8_t *device, const uform_maxsim_side_t *s) {
    const uform_token_rows_t *side = s->side;
    size_t count = side->count, first = side->offsets[0];
    size_t *offsets = (size_t *)malloc((count + 1) * sizeof(size_t));
    if (!offsets) return uform_fail(UFORM_OUT_OF_MEMORY, "late_interaction_scores: the GPU's offsets");
    for (size_t i = 0; i <= count; i++) offsets[i] = side->offsets[i] - first;
    uform_cuda_upload(b, device + s->offsets_at, offsets, (count + 1) * sizeof(size_t));
    free(offsets);
    if (s->rows == 0) return UFORM_OK;
    uform_cuda_upload(b, device + s->raw_at, (const uint8_t *)side->data + first * side->row_bytes, s->raw_bytes);
    UFORM_LAUNCH(uform_maxsim_widen, uform_cuda_blocks(s->rows * side->width, UFORM_CUDA_ROW_THREADS),
                 UFORM_CUDA_ROW_THREADS, uform_cuda_context(b)->stream)(
        device + s->raw_at, side->row_bytes, s->rows, side->width, side->scalar, (float *)(device + s->values_at));
    uform_cuda_launched(b, "late_interaction_scores (widen)");
    return UFORM_OK;
}

uform_status_t uform_cuda_maxsim(uform_backend_t *b, const uform_token_rows_t *queries,
                                 const uform_token_rows_t *documents, float *scores) {
    uform_maxsim_side_t q, d;
    memset(&q, 0, sizeof(q)), memset(&d, 0, sizeof(d));
    size_t pairs = 0;
    if (!uform_maxsim_measure(queries, &q) || !uform_maxsim_measure(documents, &d) ||
        !uform_mul_ok(queries->count, documents->count, &pairs) || pairs > ((size_t)1 << 40))
        return uform_fail(UFORM_INVALID_ARGUMENT, "late_interaction_scores: %zu x %zu items of %zu and %zu rows "
                          "overflow the GPU's layout", queries->count, documents->count, q.rows, d.rows);
    size_t scores_at = uform_cuda_align8(uform_maxsim_place(&d, uform_cuda_align8(uform_maxsim_place(&q, 0))));
    uint8_t *device = (uint8_t *)uform_cuda_alloc(b, scores_at + pairs * sizeof(float));
    if (!device) return UFORM_OUT_OF_MEMORY;   /* cudaMalloc's refusal, named by uform_cuda_alloc */
    uform_status_t status = uform_maxsim_upload(b, device, &q);
    if (status == UFORM_OK) status = uform_maxsim_upload(b, device, &d);
    if (status == UFORM_OK) {
        double scale = (queries->scalar == UFORM_SCALAR_I8 ? 1.0 / 127.0 : 1.0) *
                       (documents->scalar == UFORM_SCALAR_I8 ? 1.0 / 127.0 : 1.0);
        float *device_scores = (float *)(device + scores_at);
        UFORM_LAUNCH(uform_maxsim_pairs, uform_cuda_blocks(pairs, UFORM_MAXSIM_WARPS), UFORM_CUDA_ROW_THREADS,
                     uform_cuda_context(b)->stream)(
            (const float *)(device + q.values_at), (const size_t *)(device + q.offsets_at),
            (const float *)(device + d.values_at), (const size_t *)(device + d.offsets_at), documents->count, pairs,
            queries->width, scale, device_scores);
        uform_cuda_launched(b, "late_interaction_scores (pairs)");
        uform_cuda_download(b, scores, device_scores, pairs * sizeof(float));
        status = uform_cuda_synchronize(b);
    }
    uform_cuda_free(b, device);
    uform_status_t freed = uform_cuda_synchronize(b);
    return status != UFORM_OK ? status : freed;
}
