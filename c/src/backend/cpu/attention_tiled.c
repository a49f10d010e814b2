/* attention_tiled.c: register-tiled attention forward and backward for the
 * trainer over packed segments (rows.h), FP32, no [n x n] buffer: the
 * fallback of attention_train.c when its score matrices cannot be allocated.
 *
 * Backward runs twice over the pairs (i, j) of a segment and head: once owned
 * by query blocks (dq_i = sum over j in order), once owned by key blocks (dk_j,
 * dv_j = sums over i in order), recomputing scores, probabilities (from the
 * saved logsumexp) and dO.V in both with the same code, so both see identical
 * values. It costs ~1.4x the minimal flops and needs no cross-thread reduction.
 * Nothing allocates except the task table (count + 1 sizes); if that fails the
 * same tasks run serially on the calling thread, which gives the same bits. */
#include "backend/cpu/rows.h"

#include "core/fast_exp.h"

#include <math.h>
#include <stdlib.h>

#define UFORM_INLINE static inline __attribute__((always_inline))

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
    const uform_segment_t *segments;
    size_t count;
    const size_t *first_task; /* [count + 1]: blocks of (segment, head) before each segment */
} uform_attention_task_t;

/* Forward of queries [first, last) of one head: two passes over the keys per
 * group of queries, the first for the maximum score, the second for
 * e = exp(score - max), their 16 lane sums and sum_j e_j v_j (recomputing
 * the scores costs less than an [n] buffer per thread would complicate). */
UFORM_VECTOR_CLONES
static void uform_attention_forward_block(const uform_attention_task_t *task,
                                          const uform_segment_t *segment, size_t head,
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
                                     const uform_segment_t *segment, size_t head, size_t first,
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
                                      const uform_segment_t *segment, size_t head, size_t first,
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
                                           const uform_segment_t *segment, size_t head,
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
    const uform_segment_t *segment = &task->segments[segment_index];
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
                                   const uform_segment_t *segments, size_t count, float *out,
                                   float *logsumexp) {
    if (!count || hidden < UFORM_HEAD_WIDTH) return;
    uform_attention_task_t task = {.qkv = qkv, .result = out, .lse_out = logsumexp,
                                   .hidden = hidden, .heads = hidden / UFORM_HEAD_WIDTH,
                                   .segments = segments, .count = count};
    uform_attention_for_each(executor, &task, uform_attention_forward_block);
}

void uform_attention_backward_tiled(uform_executor_t *executor, const float *qkv,
                                    const float *out, const float *dout, const float *logsumexp,
                                    size_t hidden, const uform_segment_t *segments, size_t count,
                                    float *dqkv) {
    if (!count || hidden < UFORM_HEAD_WIDTH) return;
    uform_attention_task_t task = {.qkv = qkv, .out = out, .dout = dout, .logsumexp = logsumexp,
                                   .result = dqkv, .hidden = hidden,
                                   .heads = hidden / UFORM_HEAD_WIDTH, .segments = segments,
                                   .count = count};
    uform_attention_for_each(executor, &task, uform_attention_dq_block);
    uform_attention_for_each(executor, &task, uform_attention_dkv_block);
}
