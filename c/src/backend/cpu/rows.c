/* rows.c: the CPU backend's row-wise operations, forward and backward, FP32
 * (rows.h), used by inference and training alike.
 *
 * Math: docs/architecture.md; the same as cpu/attention.c's,
 * same formulas, same epsilons, same reduction orders (16 lane partial sums), so
 * a training forward reproduces the inference forward:
 * - exp is uform_fast_exp (fast_exp.h, ~2 ulp, vectorisable) everywhere: softmax
 *   (attention, cross-entropy) and GELU's sigmoid, exactly as inference. The
 *   one libm call is logf, once per row (logsumexp), where its 0.5 ulp matters
 *   and its cost does not; tanh is never evaluated (GELU is x * sigmoid(2u)).
 * - Nothing here allocates except the attention task table (count + 1 sizes);
 *   if that allocation fails the same tasks run serially on the calling thread,
 *   which by construction gives the same bits, so no function can fail.
 *
 * Determinism: every output element is one fixed chain of operations whatever
 * the thread count or the split of work (no FMA contraction under -std=c11,
 * no reassociation; vector clones only widen lanes):
 * - row-wise results (dx of layer norm, rotary, normalise, ...) are owned by
 *   their row;
 * - weight gradients (layer norm dweight/dbias, embedding dtable/dmodality)
 *   are parallel over blocks of 16 columns: the owner of a block walks the
 *   rows in order, sums into a local accumulator that starts at 0, then adds
 *   the sum to the output once (so calling backward twice doubles exactly);
 * - attention (register-tiled, attention_tiled.c) is owned by query blocks
 *   for dq and by key blocks for dk, dv. */
#include "backend/cpu/rows.h"

#include "core/fast_exp.h"

#include <math.h>
#include <stdlib.h>

#define UFORM_INLINE static inline __attribute__((always_inline))

#define UFORM_COLUMN_BLOCK 16  /* columns per owner of a weight gradient */
#define UFORM_ROWS_GRAIN 64    /* rows per task of row-wise loops */

/* ==== layer norm ============================================================ */

typedef struct {
    const float *x, *weight, *bias, *dy;
    const float *mean, *rstd;
    float *y, *mean_out, *rstd_out, *dx, *dweight, *dbias;
    size_t rows, width;
} uform_ln_task_t;

/* Layer norm in lane sums, saving mean and rstd when asked (inference and training alike). */
UFORM_VECTOR_CLONES
static void uform_ln_forward_rows(void *context, size_t begin, size_t end, size_t thread) {
    (void)thread;
    const uform_ln_task_t *task = context;
    size_t width = task->width;
    for (size_t row = begin; row < end; row++) {
        const float *x = task->x + row * width;
        float *y = task->y + row * width;
        float partial[UFORM_LANES] = {0};
        for (size_t i = 0; i < width; i += UFORM_LANES)
            for (size_t l = 0; l < UFORM_LANES && i + l < width; l++) partial[l] += x[i + l];
        float sum = 0;
        for (size_t l = 0; l < UFORM_LANES; l++) sum += partial[l];
        float mean = sum / (float)width;
        float squares[UFORM_LANES] = {0};
        for (size_t i = 0; i < width; i += UFORM_LANES)
            for (size_t l = 0; l < UFORM_LANES && i + l < width; l++) {
                float d = x[i + l] - mean;
                squares[l] += d * d;
            }
        float variance = 0;
        for (size_t l = 0; l < UFORM_LANES; l++) variance += squares[l];
        variance /= (float)width; /* biased */
        float inverse = 1.0f / sqrtf(variance + 1e-5f);
        for (size_t i = 0; i < width; i++)
            y[i] = (x[i] - mean) * inverse * task->weight[i] + task->bias[i];
        if (task->mean_out) task->mean_out[row] = mean;
        if (task->rstd_out) task->rstd_out[row] = inverse;
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include "backend/cpu/transpose_avx512.h"

/* Sums of 16 rows whose lanes were accumulated in `lanes` (row r's lane l as
 * uform_ln_forward_rows keeps partial[l]): lane l of every row into one
 * vector by a register transpose, then the lanes added in order 0..15, the 16
 * rows' chains side by side (one chain per row was ~130 cycles of latency). */
UFORM_INLINE __attribute__((target("avx512f"))) __m512 uform_ln_row_sums(__m512i lanes[16]) {
    uform_transpose16x16(lanes);
    __m512 sum = _mm512_castsi512_ps(lanes[0]); /* 0 + partial[0] is partial[0]: never -0 */
    for (size_t l = 1; l < 16; l++) sum = _mm512_add_ps(sum, _mm512_castsi512_ps(lanes[l]));
    return sum;
}

/* uform_ln_forward_rows for widths of whole vectors, 16 rows at a time: the
 * same operations in the same order (the lanes of partial and squares are the
 * vector lanes; no FMA), so the same bits; test_kernels checks them against
 * the scalar chain. */
__attribute__((target("avx512f"))) static void uform_ln_forward_rows_avx512(void *context,
                                                                            size_t begin,
                                                                            size_t end,
                                                                            size_t thread) {
    (void)thread;
    const uform_ln_task_t *task = context;
    size_t width = task->width;
    const __m512 count = _mm512_set1_ps((float)width);
    for (size_t row0 = begin; row0 < end; row0 += 16) {
        size_t rows = end - row0 < 16 ? end - row0 : 16;
        const float *x = task->x + row0 * width;
        __m512i lanes[16];
        for (size_t r = 0; r < 16; r++) {
            __m512 partial = _mm512_setzero_ps();
            for (size_t i = 0; r < rows && i < width; i += 16)
                partial = _mm512_add_ps(partial, _mm512_loadu_ps(x + r * width + i));
            lanes[r] = _mm512_castps_si512(partial);
        }
        _Alignas(64) float means[16], inverses[16];
        _mm512_store_ps(means, _mm512_div_ps(uform_ln_row_sums(lanes), count));
        for (size_t r = 0; r < 16; r++) {
            __m512 squares = _mm512_setzero_ps(), mean = _mm512_set1_ps(means[r]);
            for (size_t i = 0; r < rows && i < width; i += 16) {
                __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + r * width + i), mean);
                squares = _mm512_add_ps(squares, _mm512_mul_ps(d, d));
            }
            lanes[r] = _mm512_castps_si512(squares);
        }
        __m512 variance = _mm512_div_ps(uform_ln_row_sums(lanes), count); /* biased */
        _mm512_store_ps(inverses, _mm512_div_ps(_mm512_set1_ps(1.0f),
                                                _mm512_sqrt_ps(_mm512_add_ps(variance, _mm512_set1_ps(1e-5f)))));
        for (size_t r = 0; r < rows; r++) {
            __m512 mean = _mm512_set1_ps(means[r]), inverse = _mm512_set1_ps(inverses[r]);
            float *y = task->y + (row0 + r) * width;
            for (size_t i = 0; i < width; i += 16) {
                __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + r * width + i), mean), inverse);
                v = _mm512_add_ps(_mm512_mul_ps(v, _mm512_loadu_ps(task->weight + i)),
                                  _mm512_loadu_ps(task->bias + i));
                _mm512_storeu_ps(y + i, v);
            }
            if (task->mean_out) task->mean_out[row0 + r] = means[r];
            if (task->rstd_out) task->rstd_out[row0 + r] = inverses[r];
        }
    }
}
#endif

void uform_layer_norm_forward(uform_executor_t *executor, const float *x, size_t rows,
                              size_t width, const float *weight, const float *bias, float *y,
                              float *mean, float *rstd) {
    if (!rows || !width) return;
    uform_ln_task_t task = {.x = x, .weight = weight, .bias = bias, .y = y, .mean_out = mean,
                            .rstd_out = rstd, .rows = rows, .width = width};
    uform_range_fn_t range = uform_ln_forward_rows;
#if defined(__x86_64__) && defined(__GNUC__)
    if (width % 16 == 0 && __builtin_cpu_supports("avx512f")) range = uform_ln_forward_rows_avx512;
#endif
    uform_parallel_for(executor, rows, UFORM_ROWS_GRAIN, range, &task);
}

/* dx = rstd (dn - mean(dn) - xhat mean(dn xhat)), dn = dy * weight,
 * xhat = (x - mean) * rstd (the forward's chain). */
UFORM_VECTOR_CLONES
static void uform_ln_backward_rows(void *context, size_t begin, size_t end, size_t thread) {
    (void)thread;
    const uform_ln_task_t *task = context;
    size_t width = task->width;
    const float *weight = task->weight;
    for (size_t row = begin; row < end; row++) {
        const float *x = task->x + row * width;
        const float *dy = task->dy + row * width;
        float *dx = task->dx + row * width;
        float mean = task->mean[row], rstd = task->rstd[row];
        float sum_dn[UFORM_LANES] = {0}, sum_dn_xhat[UFORM_LANES] = {0};
        for (size_t i = 0; i < width; i += UFORM_LANES)
            for (size_t l = 0; l < UFORM_LANES && i + l < width; l++) {
                float xhat = (x[i + l] - mean) * rstd;
                float dn = dy[i + l] * weight[i + l];
                sum_dn[l] += dn;
                sum_dn_xhat[l] += dn * xhat;
            }
        float a = 0, b = 0;
        for (size_t l = 0; l < UFORM_LANES; l++) {
            a += sum_dn[l];
            b += sum_dn_xhat[l];
        }
        float mean_dn = a / (float)width, mean_dn_xhat = b / (float)width;
        for (size_t i = 0; i < width; i++) {
            float xhat = (x[i] - mean) * rstd;
            float dn = dy[i] * weight[i];
            dx[i] += rstd * (dn - mean_dn - xhat * mean_dn_xhat);
        }
    }
}

/* dweight += sum_r dy xhat, dbias += sum_r dy: blocks of 16 columns, rows in order. */
UFORM_VECTOR_CLONES
static void uform_ln_backward_columns(void *context, size_t begin, size_t end, size_t thread) {
    (void)thread;
    const uform_ln_task_t *task = context;
    size_t width = task->width;
    for (size_t block = begin; block < end; block++) {
        size_t first = block * UFORM_COLUMN_BLOCK;
        size_t columns = width - first < UFORM_COLUMN_BLOCK ? width - first : UFORM_COLUMN_BLOCK;
        float dweight[UFORM_COLUMN_BLOCK] = {0}, dbias[UFORM_COLUMN_BLOCK] = {0};
        for (size_t row = 0; row < task->rows; row++) {
            const float *x = task->x + row * width + first;
            const float *dy = task->dy + row * width + first;
            float mean = task->mean[row], rstd = task->rstd[row];
            for (size_t c = 0; c < columns; c++) {
                float xhat = (x[c] - mean) * rstd;
                dweight[c] += dy[c] * xhat;
                dbias[c] += dy[c];
            }
        }
        if (task->dweight)
            for (size_t c = 0; c < columns; c++) task->dweight[first + c] += dweight[c];
        if (task->dbias)
            for (size_t c = 0; c < columns; c++) task->dbias[first + c] += dbias[c];
    }
}

void uform_layer_norm_backward(uform_executor_t *executor, const float *dy, const float *x,
                               const float *weight, const float *mean, const float *rstd,
                               size_t rows, size_t width, float *dx, float *dweight,
                               float *dbias) {
    if (!rows || !width) return;
    uform_ln_task_t task = {.x = x, .weight = weight, .dy = dy, .mean = mean, .rstd = rstd,
                            .dx = dx, .dweight = dweight, .dbias = dbias, .rows = rows,
                            .width = width};
    /* weight gradients first: they read dy, which dx may alias (dx += ... in place) */
    if (dweight || dbias)
        uform_parallel_for(executor, (width + UFORM_COLUMN_BLOCK - 1) / UFORM_COLUMN_BLOCK, 1,
                           uform_ln_backward_columns, &task);
    if (dx) uform_parallel_for(executor, rows, UFORM_ROWS_GRAIN, uform_ln_backward_rows, &task);
}

/* ==== GELU ================================================================== */

#define UFORM_GELU_GRAIN 4096 /* elements per task */
#define UFORM_SQRT_2_OVER_PI 0.7978845608028654f

typedef struct {
    const float *x, *dy;
    float *y;
} uform_gelu_task_t;

/* The forward is gelu.c's (uform_gelu_value defines it). */

/* d/dx [x s(2u)] = s + 2 x u' s (1 - s), s = 1 / (1 + e), e = e^(-2u),
 * 1 - s = e s (no cancellation), u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
 * Where fast_exp clamps its argument the exact limits are taken instead
 * (1 for large x, 0 for very negative x), so huge inputs give no NaN. */
UFORM_VECTOR_CLONES
static void uform_gelu_backward_range(void *context, size_t begin, size_t end, size_t thread) {
    (void)thread;
    const uform_gelu_task_t *task = context;
    for (size_t i = begin; i < end; i++) {
        float v = task->x[i];
        float u = UFORM_SQRT_2_OVER_PI * (v + 0.044715f * v * v * v);
        float t = -2.0f * u;
        float e = uform_fast_exp(t);
        float s = 1.0f / (1.0f + e);
        float du = UFORM_SQRT_2_OVER_PI * (1.0f + 0.134145f * v * v);
        float derivative = s + 2.0f * v * du * s * (e * s);
        derivative = t < UFORM_EXP_LOW ? 1.0f : derivative;
        derivative = t > UFORM_EXP_HIGH ? 0.0f : derivative;
        task->y[i] += task->dy[i] * derivative; /* y is dx here */
    }
}

void uform_gelu_backward(uform_executor_t *executor, const float *x, const float *dy,
                         size_t count, float *dx) {
    uform_gelu_task_t task = {x, dy, dx};
    uform_parallel_for(executor, count, UFORM_GELU_GRAIN, uform_gelu_backward_range, &task);
}

/* ==== rotary positions ====================================================== */

typedef struct {
    float *qkv;
    size_t hidden;
    const float *cosines, *sines;
    float direction; /* +1 forward (turn by t), -1 backward (turn by -t) */
} uform_rope_task_t;

/* Pairs (x[j], x[j+32]) of every q and k head turned by t (or -t). The forward
 * chain is the inference one; the backward one is the transpose of its rotation:
 * (g0 c + g1 s, -g0 s + g1 c). */
UFORM_VECTOR_CLONES
static void uform_rope_rows(void *context, size_t begin, size_t end, size_t thread) {
    (void)thread;
    const uform_rope_task_t *task = context;
    size_t heads = task->hidden / UFORM_HEAD_WIDTH;
    for (size_t r = begin; r < end; r++) {
        const float *c = task->cosines + r * UFORM_PAIRS;
        const float *s = task->sines + r * UFORM_PAIRS;
        float *row = task->qkv + r * 3 * task->hidden;
        for (size_t h = 0; h < 2 * heads; h++) {
            float *x = row + h * UFORM_HEAD_WIDTH;
            if (task->direction > 0) {
                for (size_t j = 0; j < UFORM_PAIRS; j++) {
                    float x0 = x[j], x1 = x[j + UFORM_PAIRS];
                    x[j] = x0 * c[j] - x1 * s[j];
                    x[j + UFORM_PAIRS] = x0 * s[j] + x1 * c[j];
                }
            } else {
                for (size_t j = 0; j < UFORM_PAIRS; j++) {
                    float g0 = x[j], g1 = x[j + UFORM_PAIRS];
                    x[j] = g0 * c[j] + g1 * s[j];
                    x[j + UFORM_PAIRS] = g1 * c[j] - g0 * s[j];
                }
            }
        }
    }
}

/* For an item with `axes` position axes: which axis each of the 32 pairs
 * rotates with and its inverse frequency 10000^(-i/n_a). Groups are
 * contiguous, the first (32 mod axes) one pair larger. */
static void uform_rope_plan(size_t axes, uint8_t axis_of_pair[UFORM_PAIRS],
                            double frequency[UFORM_PAIRS]) {
    size_t pair = 0;
    for (size_t a = 0; a < axes; a++) {
        size_t group = UFORM_PAIRS / axes + (a < UFORM_PAIRS % axes ? 1 : 0);
        for (size_t i = 0; i < group; i++, pair++) {
            axis_of_pair[pair] = (uint8_t)a;
            frequency[pair] = pow(10000.0, -(double)i / (double)group);
        }
    }
}

typedef struct {
    const uform_segment_t *segments;
    const uint32_t *positions;
    float *cosines, *sines; /* [rows][32] */
} uform_rope_table_task_t;

static void uform_rope_table_segments(void *context, size_t begin, size_t end, size_t thread) {
    (void)thread;
    const uform_rope_table_task_t *task = context;
    for (size_t s = begin; s < end; s++) {
        const uform_segment_t *segment = &task->segments[s];
        uint8_t axis_of_pair[UFORM_PAIRS];
        double frequency[UFORM_PAIRS];
        uform_rope_plan(segment->axes, axis_of_pair, frequency);
        for (size_t r = segment->begin; r < segment->begin + segment->length; r++) {
            const uint32_t *position = task->positions + r * 3;
            for (size_t j = 0; j < UFORM_PAIRS; j++) {
                double angle = (double)position[axis_of_pair[j]] * frequency[j];
                task->cosines[r * UFORM_PAIRS + j] = (float)cos(angle);
                task->sines[r * UFORM_PAIRS + j] = (float)sin(angle);
            }
        }
    }
}

void uform_rope_tables(uform_executor_t *executor, const uform_segment_t *segments, size_t count,
                       const uint32_t *positions, float *cosines, float *sines) {
    uform_rope_table_task_t table = {segments, positions, cosines, sines};
    uform_parallel_for(executor, count, 1, uform_rope_table_segments, &table);
}

void uform_rope_forward(uform_executor_t *executor, float *qkv, size_t rows, size_t hidden,
                        const float *cosines, const float *sines) {
    uform_rope_task_t task = {qkv, hidden, cosines, sines, 1.0f};
    uform_parallel_for(executor, rows, UFORM_ROWS_GRAIN, uform_rope_rows, &task);
}

void uform_rope_backward(uform_executor_t *executor, float *dqkv, size_t rows, size_t hidden,
                         const float *cosines, const float *sines) {
    uform_rope_task_t task = {dqkv, hidden, cosines, sines, -1.0f};
    uform_parallel_for(executor, rows, UFORM_ROWS_GRAIN, uform_rope_rows, &task);
}

/* ==== embedding ============================================================= */

void uform_embedding_forward(const float *table, const float *modality, const uint32_t *ids,
                             size_t rows, size_t width, float *y) {
    for (size_t r = 0; r < rows; r++) {
        if (ids[r] == UFORM_NOT_TEXT) continue;
        const float *source = table + (size_t)ids[r] * width;
        float *target = y + r * width;
        if (modality)
            for (size_t c = 0; c < width; c++) target[c] = source[c] + modality[c];
        else
            memcpy(target, source, width * sizeof(float));
    }
}

typedef struct {
    const float *dy;
    const uint32_t *ids;
    size_t rows, width;
    float *dtable, *dmodality;
} uform_embedding_task_t;

/* Blocks of 16 columns; rows in order within each. dtable rows that several
 * ids share are accumulated in place, in row order. */
UFORM_VECTOR_CLONES
static void uform_embedding_backward_columns(void *context, size_t begin, size_t end,
                                             size_t thread) {
    (void)thread;
    const uform_embedding_task_t *task = context;
    size_t width = task->width;
    for (size_t block = begin; block < end; block++) {
        size_t first = block * UFORM_COLUMN_BLOCK;
        size_t columns = width - first < UFORM_COLUMN_BLOCK ? width - first : UFORM_COLUMN_BLOCK;
        float modality[UFORM_COLUMN_BLOCK] = {0};
        for (size_t r = 0; r < task->rows; r++) {
            if (task->ids[r] == UFORM_NOT_TEXT) continue;
            const float *dy = task->dy + r * width + first;
            if (task->dtable) {
                float *target = task->dtable + (size_t)task->ids[r] * width + first;
                for (size_t c = 0; c < columns; c++) target[c] += dy[c];
            }
            for (size_t c = 0; c < columns; c++) modality[c] += dy[c];
        }
        if (task->dmodality)
            for (size_t c = 0; c < columns; c++) task->dmodality[first + c] += modality[c];
    }
}

void uform_embedding_backward(uform_executor_t *executor, const float *dy, const uint32_t *ids,
                              size_t rows, size_t width, float *dtable, float *dmodality) {
    if (!rows || !width) return;
    uform_embedding_task_t task = {dy, ids, rows, width, dtable, dmodality};
    uform_parallel_for(executor, (width + UFORM_COLUMN_BLOCK - 1) / UFORM_COLUMN_BLOCK, 1,
                       uform_embedding_backward_columns, &task);
}

/* ==== mean pooling ========================================================== */

/* text.c's pooling: sum over rows in order, times 1/length. */
void uform_mean_pool_forward(const float *x, size_t width, const uform_segment_t *segments,
                             size_t count, float *pooled) {
    for (size_t s = 0; s < count; s++) {
        float *target = pooled + s * width;
        memset(target, 0, width * sizeof(float));
        for (size_t r = segments[s].begin; r < segments[s].begin + segments[s].length; r++)
            for (size_t c = 0; c < width; c++) target[c] += x[r * width + c];
        float inverse = segments[s].length ? 1.0f / (float)segments[s].length : 0.0f;
        for (size_t c = 0; c < width; c++) target[c] *= inverse;
    }
}

void uform_mean_pool_backward(const float *dpooled, size_t width, const uform_segment_t *segments,
                              size_t count, float *dx) {
    for (size_t s = 0; s < count; s++) {
        if (!segments[s].length) continue;
        float inverse = 1.0f / (float)segments[s].length;
        const float *source = dpooled + s * width;
        for (size_t r = segments[s].begin; r < segments[s].begin + segments[s].length; r++)
            for (size_t c = 0; c < width; c++) dx[r * width + c] += source[c] * inverse;
    }
}

/* ==== L2 normalisation ====================================================== */

/* Rows over their L2 norm (16 lane partial sums); norms[r] is |x_r| before the clamp. */
void uform_normalize_forward(const float *x, size_t rows, size_t width, float *y, float *norms) {
    for (size_t r = 0; r < rows; r++) {
        const float *source = x + r * width;
        float *target = y + r * width;
        float norm = sqrtf(uform_dot_lanes(source, source, width));
        float inverse = 1.0f / (norm > 1e-12f ? norm : 1e-12f);
        for (size_t c = 0; c < width; c++) target[c] = source[c] * inverse;
        if (norms) norms[r] = norm;
    }
}

/* |x| > 1e-12: dx = (dy - y (y . dy)) / |x|; otherwise y = x / 1e-12 is linear:
 * dx = dy / 1e-12 (the same inverse the forward multiplied by). */
void uform_normalize_backward(const float *dy, const float *y, const float *norms, size_t rows,
                              size_t width, float *dx) {
    for (size_t r = 0; r < rows; r++) {
        const float *g = dy + r * width, *yr = y + r * width;
        float *target = dx + r * width;
        float norm = norms[r];
        float inverse = 1.0f / (norm > 1e-12f ? norm : 1e-12f);
        if (norm > 1e-12f) {
            float dot = uform_dot_lanes(yr, g, width);
            for (size_t c = 0; c < width; c++) target[c] += (g[c] - yr[c] * dot) * inverse;
        } else {
            for (size_t c = 0; c < width; c++) target[c] += g[c] * inverse;
        }
    }
}

/* ==== softmax cross-entropy ================================================= */

/* The maximum of a row and the 16 lane sum of exp(l - max). */
static void uform_softmax_sums(const float *logits, size_t classes, float *top_out,
                               float *total_out) {
    float top = -INFINITY;
    for (size_t c = 0; c < classes; c++) top = logits[c] > top ? logits[c] : top;
    float partial[UFORM_LANES] = {0};
    for (size_t c = 0; c < classes; c += UFORM_LANES)
        for (size_t l = 0; l < UFORM_LANES && c + l < classes; l++)
            partial[l] += uform_fast_exp(logits[c + l] - top);
    float total = 0;
    for (size_t l = 0; l < UFORM_LANES; l++) total += partial[l];
    *top_out = top;
    *total_out = total;
}

/* Targets must be < classes (the caller checks). */
void uform_cross_entropy_forward(const float *logits, size_t rows, size_t classes,
                                 const uint32_t *targets, float *losses) {
    for (size_t r = 0; r < rows; r++) {
        const float *row = logits + r * classes;
        float top, total;
        uform_softmax_sums(row, classes, &top, &total);
        losses[r] = (top + logf(total)) - row[targets[r]];
    }
}

void uform_cross_entropy_backward(const float *logits, size_t rows, size_t classes,
                                  const uint32_t *targets, const float *scale, float *dlogits) {
    for (size_t r = 0; r < rows; r++) {
        if (scale[r] == 0.0f) continue;
        const float *row = logits + r * classes;
        float *target = dlogits + r * classes;
        float top, total;
        uform_softmax_sums(row, classes, &top, &total);
        float inverse = 1.0f / total;
        for (size_t c = 0; c < classes; c++) {
            float p = uform_fast_exp(row[c] - top) * inverse;
            target[c] += scale[r] * (c == targets[r] ? p - 1.0f : p);
        }
    }
}
