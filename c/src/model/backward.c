/* backward.c: forward/backward pairs of the row-wise operations, FP32, for the
 * CPU trainer (backward.h).
 *
 * Math: the inference path's (forward.c, cpu/attention.c, docs/architecture.md),
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
 * - attention backward runs twice over the pairs (i, j) of a segment and
 *   head: once owned by query blocks (dq_i = sum over j in order), once owned
 *   by key blocks (dk_j, dv_j = sums over i in order), recomputing scores,
 *   probabilities (from the saved logsumexp) and dO.V in both with the same
 *   code, so both see identical values. It costs ~1.4x the minimal flops and
 *   needs no [n x n] buffer and no cross-thread reduction. */
#include "model/backward.h"

#include "core/fast_exp.h"

#include <math.h>
#include <stdlib.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(UFORM_NO_CLONES)
#define UFORM_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define UFORM_VECTOR_CLONES
#endif
#define UFORM_INLINE static inline __attribute__((always_inline))

#define UFORM_COLUMN_BLOCK 16  /* columns per owner of a weight gradient */
#define UFORM_ROWS_GRAIN 64    /* rows per task of row-wise loops */

/* Sum of a[i] * b[i] over i < n in 16 lane partials, lanes added in order. */
UFORM_INLINE float uform_dot_lanes(const float *a, const float *b, size_t n) {
    float partial[UFORM_LANES] = {0};
    for (size_t i = 0; i < n; i += UFORM_LANES)
        for (size_t l = 0; l < UFORM_LANES && i + l < n; l++) partial[l] += a[i + l] * b[i + l];
    float sum = 0;
    for (size_t l = 0; l < UFORM_LANES; l++) sum += partial[l];
    return sum;
}

/* ==== layer norm ============================================================ */

typedef struct {
    const float *x, *weight, *bias, *dy;
    const float *mean, *rstd;
    float *y, *mean_out, *rstd_out, *dx, *dweight, *dbias;
    size_t rows, width;
} uform_ln_task_t;

/* forward.c's uform_norm_rows, operation for operation, saving mean and rstd. */
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

void uform_layer_norm_forward(uform_executor_t *executor, const float *x, size_t rows,
                              size_t width, const float *weight, const float *bias, float *y,
                              float *mean, float *rstd) {
    if (!rows || !width) return;
    uform_ln_task_t task = {.x = x, .weight = weight, .bias = bias, .y = y, .mean_out = mean,
                            .rstd_out = rstd, .rows = rows, .width = width};
    uform_parallel_for(executor, rows, UFORM_ROWS_GRAIN, uform_ln_forward_rows, &task);
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

/* forward.c's form: 0.5 x (1 + tanh(u)) = x sigmoid(2u) = x / (1 + e^(-2u)),
 * except where -2u > 88 (x < -9.9), where fast_exp's clamp would leave
 * x / (1 + e^88) (|y| up to 2 for x near -FLT_MAX) and 0 is taken: the
 * difference from the inference forward is below 1e-37 for |x| < 10. */
UFORM_VECTOR_CLONES
static void uform_gelu_forward_range(void *context, size_t begin, size_t end, size_t thread) {
    (void)thread;
    const uform_gelu_task_t *task = context;
    for (size_t i = begin; i < end; i++) {
        float v = task->x[i];
        float u = UFORM_SQRT_2_OVER_PI * (v + 0.044715f * v * v * v);
        float t = -2.0f * u;
        float y = v / (1.0f + uform_fast_exp(t));
        task->y[i] = t > UFORM_EXP_HIGH ? 0.0f : y;
    }
}

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

void uform_gelu_forward(uform_executor_t *executor, const float *x, size_t count, float *y) {
    uform_gelu_task_t task = {x, NULL, y};
    uform_parallel_for(executor, count, UFORM_GELU_GRAIN, uform_gelu_forward_range, &task);
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
 * chain is forward.c's; the backward one is the transpose of its rotation:
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

/* ==== attention ============================================================= */

/* Tiles: scores of QT queries against KT keys are one register tile (as
 * cpu/attention.c); a group of QG queries shares one transposed key tile. A
 * task is a block of 64 queries (forward, dq) or 64 keys (dk, dv) of one head
 * of one segment. Every score is sum_d q_d k_d over d in order, times 1/8;
 * every dO.V likewise; so all passes see the same values. */
#define UFORM_QT 4
#define UFORM_KT 16
#define UFORM_QG 16
#define UFORM_BLOCK 64

typedef float uform_rows_tile_t[UFORM_QG][UFORM_HEAD_WIDTH];
typedef float uform_keys_tile_t[UFORM_HEAD_WIDTH][UFORM_KT];
typedef float uform_scores_t[UFORM_QG][UFORM_KT];

/* rows[r] = src row r (stride apart) for r < count, zeros after, up to `tile` rows. */
UFORM_INLINE void uform_load_rows(const float *src, size_t stride, size_t count, size_t tile,
                                  float rows[][UFORM_HEAD_WIDTH]) {
    for (size_t r = 0; r < tile; r++)
        for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++)
            rows[r][d] = r < count ? src[r * stride + d] : 0.0f;
}

/* kt[d][c] = src row c, column d, for c < count; zeros after. */
UFORM_INLINE void uform_load_transposed(const float *src, size_t stride, size_t count,
                                        uform_keys_tile_t kt) {
    for (size_t c = 0; c < UFORM_KT; c++)
        for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++)
            kt[d][c] = c < count ? src[c * stride + d] : 0.0f;
}

/* dots[r][c] = sum over d in order of a[r][d] * bt[d][c], for r < rows (a
 * multiple of UFORM_QT), 4 x 16 register tiles. */
UFORM_INLINE void uform_tile_dots(float a[][UFORM_HEAD_WIDTH], size_t rows, uform_keys_tile_t bt,
                                  float dots[][UFORM_KT]) {
    for (size_t r0 = 0; r0 < rows; r0 += UFORM_QT) {
        float acc[UFORM_QT][UFORM_KT] = {{0}};
        for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++)
            for (size_t r = 0; r < UFORM_QT; r++)
                for (size_t c = 0; c < UFORM_KT; c++) acc[r][c] += a[r0 + r][d] * bt[d][c];
        for (size_t r = 0; r < UFORM_QT; r++)
            for (size_t c = 0; c < UFORM_KT; c++) dots[r0 + r][c] = acc[r][c];
    }
}

typedef struct {
    const float *qkv, *out, *dout, *logsumexp;
    float *result;   /* forward: out; backward: dqkv */
    float *lse_out;  /* forward: logsumexp */
    size_t hidden, heads;
    const uform_span_t *segments;
    size_t count;
    const size_t *first_task; /* [count + 1]: blocks of (segment, head) before each segment */
} uform_attention_task_t;

/* Forward of queries [first, last) of one head: two passes over the keys per
 * group of queries, the first for the maximum score, the second for
 * e = exp(score - max), their 16 lane sums and sum_j e_j v_j (recomputing
 * the scores costs less than an [n] buffer per thread would complicate). */
UFORM_VECTOR_CLONES
static void uform_attention_forward_block(const uform_attention_task_t *task,
                                          const uform_span_t *segment, size_t head,
                                          size_t first, size_t last) {
    size_t hidden = task->hidden, stride = 3 * hidden, n = segment->length;
    const float *q = task->qkv + segment->begin * stride + head * UFORM_HEAD_WIDTH;
    const float *k = q + hidden, *v = q + 2 * hidden;
    for (size_t i0 = first; i0 < last; i0 += UFORM_QG) {
        size_t rows = last - i0 < UFORM_QG ? last - i0 : UFORM_QG;
        size_t tiles = (rows + UFORM_QT - 1) / UFORM_QT * UFORM_QT;
        uform_rows_tile_t queries;
        uform_load_rows(q + i0 * stride, stride, rows, UFORM_QG, queries);
        uform_keys_tile_t kt;
        uform_scores_t scores;
        float top[UFORM_QG];
        for (size_t r = 0; r < UFORM_QG; r++) top[r] = -INFINITY;
        for (size_t j0 = 0; j0 < n; j0 += UFORM_KT) {
            size_t keys = n - j0 < UFORM_KT ? n - j0 : UFORM_KT;
            uform_load_transposed(k + j0 * stride, stride, keys, kt);
            uform_tile_dots(queries, tiles, kt, scores);
            for (size_t r = 0; r < rows; r++)
                for (size_t c = 0; c < keys; c++) {
                    float score = scores[r][c] * 0.125f;
                    top[r] = score > top[r] ? score : top[r];
                }
        }
        float partial[UFORM_QG][UFORM_KT] = {{0}};
        float accumulated[UFORM_QG][UFORM_HEAD_WIDTH] = {{0}};
        for (size_t j0 = 0; j0 < n; j0 += UFORM_KT) {
            size_t keys = n - j0 < UFORM_KT ? n - j0 : UFORM_KT;
            uform_load_transposed(k + j0 * stride, stride, keys, kt);
            uform_tile_dots(queries, tiles, kt, scores);
            for (size_t r = 0; r < rows; r++)
                for (size_t c = 0; c < UFORM_KT; c++) {
                    float e = c < keys ? uform_fast_exp(scores[r][c] * 0.125f - top[r]) : 0.0f;
                    scores[r][c] = e;
                    partial[r][c] += e;
                }
            for (size_t r = 0; r < rows; r++) {
                float sum[UFORM_HEAD_WIDTH];
                for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++) sum[d] = accumulated[r][d];
                for (size_t c = 0; c < keys; c++) {
                    const float *value = v + (j0 + c) * stride;
                    float p = scores[r][c];
                    for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++) sum[d] += p * value[d];
                }
                for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++) accumulated[r][d] = sum[d];
            }
        }
        for (size_t r = 0; r < rows; r++) {
            float total = 0;
            for (size_t c = 0; c < UFORM_KT; c++) total += partial[r][c];
            float inverse = 1.0f / total;
            size_t row = segment->begin + i0 + r;
            float *o = task->result + row * hidden + head * UFORM_HEAD_WIDTH;
            for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++) o[d] = accumulated[r][d] * inverse;
            task->lse_out[row * task->heads + head] = top[r] + logf(total);
        }
    }
}

/* D_i = dO_i . O_i for `rows` rows, zeros up to the tile: one chain over d in
 * order, as dO_i . V_j in uform_tile_dots, so that where O_i = V_j exactly (a
 * segment of one row) dP - D is exactly 0 and so are dq and dk. */
UFORM_INLINE void uform_attention_deltas(const float *dout, const float *out, size_t stride,
                                         size_t rows, size_t tile, float *delta) {
    for (size_t r = 0; r < tile; r++) {
        float sum = 0;
        if (r < rows)
            for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++)
                sum += dout[r * stride + d] * out[r * stride + d];
        delta[r] = sum;
    }
}

/* p = exp(s / 8 - lse_i), ds = p (dp - D_i) / 8, for a tile of `rows` queries
 * (up to `tile`) against `keys` keys; zero outside. The one place both
 * backward passes compute p and ds, so they agree bit for bit. */
UFORM_INLINE void uform_attention_probabilities(float scores[][UFORM_KT], float dp[][UFORM_KT],
                                                const float *lse, const float *delta,
                                                size_t rows, size_t tile, size_t keys) {
    for (size_t r = 0; r < tile; r++)
        for (size_t c = 0; c < UFORM_KT; c++) {
            bool inside = r < rows && c < keys;
            float p = inside ? uform_fast_exp(scores[r][c] * 0.125f - lse[r]) : 0.0f;
            float ds = p * (dp[r][c] - delta[r]) * 0.125f;
            scores[r][c] = p;
            dp[r][c] = inside ? ds : 0.0f;
        }
}

/* dq for queries [first, last) of one head: dq_i += sum over j in order of ds_ij k_j. */
UFORM_VECTOR_CLONES
static void uform_attention_dq_block(const uform_attention_task_t *task,
                                     const uform_span_t *segment, size_t head, size_t first,
                                     size_t last) {
    size_t hidden = task->hidden, heads = task->heads, stride = 3 * hidden, n = segment->length;
    size_t offset = head * UFORM_HEAD_WIDTH;
    const float *q = task->qkv + segment->begin * stride + offset;
    const float *k = q + hidden, *v = q + 2 * hidden;
    const float *o = task->out + segment->begin * hidden + offset;
    const float *dout = task->dout + segment->begin * hidden + offset;
    float *dq = task->result + segment->begin * stride + offset;
    for (size_t i0 = first; i0 < last; i0 += UFORM_QG) {
        size_t rows = last - i0 < UFORM_QG ? last - i0 : UFORM_QG;
        size_t tiles = (rows + UFORM_QT - 1) / UFORM_QT * UFORM_QT;
        uform_rows_tile_t queries, douts;
        uform_load_rows(q + i0 * stride, stride, rows, UFORM_QG, queries);
        uform_load_rows(dout + i0 * hidden, hidden, rows, UFORM_QG, douts);
        float delta[UFORM_QG], lse[UFORM_QG];
        uform_attention_deltas(dout + i0 * hidden, o + i0 * hidden, hidden, rows, UFORM_QG, delta);
        for (size_t r = 0; r < UFORM_QG; r++)
            lse[r] = r < rows ? task->logsumexp[(segment->begin + i0 + r) * heads + head] : 0.0f;
        float accumulated[UFORM_QG][UFORM_HEAD_WIDTH] = {{0}};
        uform_keys_tile_t kt, vt;
        uform_scores_t scores, dp;
        for (size_t j0 = 0; j0 < n; j0 += UFORM_KT) {
            size_t keys = n - j0 < UFORM_KT ? n - j0 : UFORM_KT;
            uform_load_transposed(k + j0 * stride, stride, keys, kt);
            uform_load_transposed(v + j0 * stride, stride, keys, vt);
            uform_tile_dots(queries, tiles, kt, scores);
            uform_tile_dots(douts, tiles, vt, dp);
            uform_attention_probabilities(scores, dp, lse, delta, rows, tiles, keys);
            for (size_t r = 0; r < rows; r++) {
                float sum[UFORM_HEAD_WIDTH];
                for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++) sum[d] = accumulated[r][d];
                for (size_t c = 0; c < keys; c++) {
                    const float *key = k + (j0 + c) * stride;
                    float ds = dp[r][c];
                    for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++) sum[d] += ds * key[d];
                }
                for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++) accumulated[r][d] = sum[d];
            }
        }
        for (size_t r = 0; r < rows; r++) {
            float *target = dq + (i0 + r) * stride;
            for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++) target[d] += accumulated[r][d];
        }
    }
}

/* dk, dv for keys [first, last) of one head: dv_j += sum over i in order of
 * p_ij dO_i, dk_j += sum over i in order of ds_ij q_i. */
UFORM_VECTOR_CLONES
static void uform_attention_dkv_block(const uform_attention_task_t *task,
                                      const uform_span_t *segment, size_t head, size_t first,
                                      size_t last) {
    size_t hidden = task->hidden, heads = task->heads, stride = 3 * hidden, n = segment->length;
    size_t offset = head * UFORM_HEAD_WIDTH;
    const float *q = task->qkv + segment->begin * stride + offset;
    const float *k = q + hidden, *v = q + 2 * hidden;
    const float *o = task->out + segment->begin * hidden + offset;
    const float *dout = task->dout + segment->begin * hidden + offset;
    float *dk = task->result + segment->begin * stride + offset + hidden;
    float *dv = dk + hidden;
    for (size_t j0 = first; j0 < last; j0 += UFORM_KT) {
        size_t keys = last - j0 < UFORM_KT ? last - j0 : UFORM_KT;
        uform_keys_tile_t kt, vt;
        uform_load_transposed(k + j0 * stride, stride, keys, kt);
        uform_load_transposed(v + j0 * stride, stride, keys, vt);
        float dk_sum[UFORM_KT][UFORM_HEAD_WIDTH] = {{0}};
        float dv_sum[UFORM_KT][UFORM_HEAD_WIDTH] = {{0}};
        for (size_t i0 = 0; i0 < n; i0 += UFORM_QT) {
            size_t rows = n - i0 < UFORM_QT ? n - i0 : UFORM_QT;
            float queries[UFORM_QT][UFORM_HEAD_WIDTH], douts[UFORM_QT][UFORM_HEAD_WIDTH];
            uform_load_rows(q + i0 * stride, stride, rows, UFORM_QT, queries);
            uform_load_rows(dout + i0 * hidden, hidden, rows, UFORM_QT, douts);
            float delta[UFORM_QT], lse[UFORM_QT];
            uform_attention_deltas(dout + i0 * hidden, o + i0 * hidden, hidden, rows, UFORM_QT,
                                   delta);
            for (size_t r = 0; r < UFORM_QT; r++)
                lse[r] = r < rows ? task->logsumexp[(segment->begin + i0 + r) * heads + head]
                                  : 0.0f;
            float scores[UFORM_QT][UFORM_KT], dp[UFORM_QT][UFORM_KT];
            uform_tile_dots(queries, UFORM_QT, kt, scores);
            uform_tile_dots(douts, UFORM_QT, vt, dp);
            uform_attention_probabilities(scores, dp, lse, delta, rows, UFORM_QT, keys);
            for (size_t c = 0; c < keys; c++) {
                float dv_row[UFORM_HEAD_WIDTH], dk_row[UFORM_HEAD_WIDTH];
                for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++) {
                    dv_row[d] = dv_sum[c][d];
                    dk_row[d] = dk_sum[c][d];
                }
                for (size_t r = 0; r < rows; r++) {
                    float p = scores[r][c], ds = dp[r][c];
                    for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++) {
                        dv_row[d] += p * douts[r][d];
                        dk_row[d] += ds * queries[r][d];
                    }
                }
                for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++) {
                    dv_sum[c][d] = dv_row[d];
                    dk_sum[c][d] = dk_row[d];
                }
            }
        }
        for (size_t c = 0; c < keys; c++) {
            float *key = dk + (j0 + c) * stride, *value = dv + (j0 + c) * stride;
            for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++) {
                key[d] += dk_sum[c][d];
                value[d] += dv_sum[c][d];
            }
        }
    }
}

typedef void (*uform_attention_block_fn_t)(const uform_attention_task_t *task,
                                           const uform_span_t *segment, size_t head,
                                           size_t first, size_t last);

typedef struct {
    const uform_attention_task_t *task;
    uform_attention_block_fn_t block;
} uform_attention_job_t;

static size_t uform_attention_blocks(size_t length) {
    return (length + UFORM_BLOCK - 1) / UFORM_BLOCK;
}

/* Task t is (segment, block of 64 rows, head), segments in order. */
static void uform_attention_run(const uform_attention_job_t *job, size_t segment_index,
                                size_t local) {
    const uform_attention_task_t *task = job->task;
    const uform_span_t *segment = &task->segments[segment_index];
    size_t head = local % task->heads, block = local / task->heads;
    size_t first = block * UFORM_BLOCK;
    size_t last = first + UFORM_BLOCK < segment->length ? first + UFORM_BLOCK : segment->length;
    job->block(task, segment, head, first, last);
}

static void uform_attention_tasks(void *context, size_t begin, size_t end, size_t thread) {
    (void)thread;
    const uform_attention_job_t *job = context;
    const size_t *first_task = job->task->first_task;
    /* the segment holding task `begin`: the last s with first_task[s] <= begin */
    size_t low = 0, high = job->task->count;
    while (high - low > 1) {
        size_t middle = low + (high - low) / 2;
        if (first_task[middle] <= begin) low = middle; else high = middle;
    }
    size_t segment_index = low;
    for (size_t t = begin; t < end; t++) {
        while (first_task[segment_index + 1] <= t) segment_index++;
        uform_attention_run(job, segment_index, t - first_task[segment_index]);
    }
}

/* Runs `block` over every (segment, head, 64-row block): in parallel through a
 * task table, or, when the table cannot be allocated, serially here (the same
 * results: no block depends on another or on the thread). */
static void uform_attention_for_each(uform_executor_t *executor, uform_attention_task_t *task,
                                     uform_attention_block_fn_t block) {
    uform_attention_job_t job = {task, block};
    size_t *first_task = malloc((task->count + 1) * sizeof(size_t));
    if (!first_task) {
        for (size_t s = 0; s < task->count; s++) {
            size_t tasks = uform_attention_blocks(task->segments[s].length) * task->heads;
            for (size_t local = 0; local < tasks; local++) uform_attention_run(&job, s, local);
        }
        return;
    }
    first_task[0] = 0;
    for (size_t s = 0; s < task->count; s++)
        first_task[s + 1] =
            first_task[s] + uform_attention_blocks(task->segments[s].length) * task->heads;
    task->first_task = first_task;
    uform_parallel_for(executor, first_task[task->count], 1, uform_attention_tasks, &job);
    task->first_task = NULL;
    free(first_task);
}

void uform_attention_forward_tiled(uform_executor_t *executor, const float *qkv, size_t hidden,
                                   const uform_span_t *segments, size_t count, float *out,
                                   float *logsumexp) {
    if (!count || hidden < UFORM_HEAD_WIDTH) return;
    uform_attention_task_t task = {.qkv = qkv, .result = out, .lse_out = logsumexp,
                                   .hidden = hidden, .heads = hidden / UFORM_HEAD_WIDTH,
                                   .segments = segments, .count = count};
    uform_attention_for_each(executor, &task, uform_attention_forward_block);
}

void uform_attention_backward_tiled(uform_executor_t *executor, const float *qkv,
                                    const float *out, const float *dout, const float *logsumexp,
                                    size_t hidden, const uform_span_t *segments, size_t count,
                                    float *dqkv) {
    if (!count || hidden < UFORM_HEAD_WIDTH) return;
    uform_attention_task_t task = {.qkv = qkv, .out = out, .dout = dout, .logsumexp = logsumexp,
                                   .result = dqkv, .hidden = hidden,
                                   .heads = hidden / UFORM_HEAD_WIDTH, .segments = segments,
                                   .count = count};
    uform_attention_for_each(executor, &task, uform_attention_dq_block);
    uform_attention_for_each(executor, &task, uform_attention_dkv_block);
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
void uform_mean_pool_forward(const float *x, size_t width, const uform_span_t *segments,
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

void uform_mean_pool_backward(const float *dpooled, size_t width, const uform_span_t *segments,
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

/* forward.c's uform_normalize_rows; norms[r] is |x_r| before the clamp. */
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
