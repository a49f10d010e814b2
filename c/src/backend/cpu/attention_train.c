/* attention_train.c: attention forward and backward for the trainer, as FP32
 * GEMMs per (item, head) on the training GEMM (cpu/sgemm.h) plus row-wise
 * softmax work. Each thread keeps two [n x n] score matrices of the longest
 * item; when they cannot be allocated (or would exceed UFORM_ATTENTION_SCRATCH
 * bytes) the register-tiled version of attention_tiled.c runs instead.
 *
 * forward:  S = Q K^T / 8, lse_i = log sum_j exp S_ij, P = exp(S - lse), O = P V
 * backward: dP = dO V^T, D_i = dO_i . O_i, dS = P (dP - D) / 8,
 *           dQ += dS K, dK += dS^T Q, dV += P^T dO
 * Every product runs on one thread with its own fixed order, so results do not
 * depend on the thread count. */
#include "backend/cpu/rows.h"
#include "backend/cpu/sgemm.h"
#include "core/fast_exp.h"

#include <math.h>
#include <stdlib.h>

#define UFORM_ATTENTION_SCRATCH ((size_t)1 << 30)

typedef struct {
    const float *qkv, *out, *dout, *logsumexp;
    float *result, *lse_out;   /* out and lse (forward) or dqkv (backward) */
    size_t hidden, heads;
    uform_sgemm_path_t path;   /* of every product */
    const uform_segment_t *segments;
    float *scratch;            /* [threads][2 n^2] */
    size_t scratch_per_thread;
} uform_attention_job_t;

static uform_matrix_t uform_view(const float *data, size_t stride, bool transposed) {
    return (uform_matrix_t){data, stride, transposed};
}

/* c[m, n] = op(a) op(b) on the job's path, on the calling thread. */
static void uform_product(const uform_attention_job_t *job, size_t m, size_t n, size_t k,
                          uform_matrix_t a, uform_matrix_t b, float *c, size_t c_stride) {
    uform_sgemm_path(job->path, false, NULL, m, n, k, a, b, NULL, false, c, c_stride);
}

/* Q K^T for one item and head, into scores [n x n]; the row functions below
 * scale by 1/8 as they read (exact: a power of two), which saves a pass. */
static void uform_scores(const uform_attention_job_t *job, const float *q, const float *k,
                         size_t stride, size_t n, float *scores) {
    uform_product(job, n, n, UFORM_HEAD_WIDTH, uform_view(q, stride, false), uform_view(k, stride, true),
                  scores, n);
}

/* Row i of scores [n x n] (Q K^T) becomes the softmax of scores / 8;
 * lse[i * lse_stride] = its log-sum-exp. The max and the sum run in
 * UFORM_LANES partial lanes (element j in lane j % UFORM_LANES), combined in
 * lane order, as rows.c's reductions do: the order depends on n alone, and
 * every clone does the same elementwise steps, so all give the same bits. One
 * chain in j order instead was latency-bound: about 8 cycles an element, 5%
 * of a training step (docs/profiles.md). Whole groups of lanes, then the
 * tail: a bound inside the lane loop keeps the compiler from vectorising it. */
static UFORM_VECTOR_CLONES void uform_softmax_rows(float *scores, size_t n, float *lse,
                                                   size_t lse_stride) {
    size_t whole = n - n % UFORM_LANES;
    for (size_t i = 0; i < n; i++) {
        float *row = scores + i * n, tops[UFORM_LANES], sums[UFORM_LANES] = {0};
        for (size_t l = 0; l < UFORM_LANES; l++) tops[l] = -INFINITY;
        for (size_t j = 0; j < whole; j += UFORM_LANES)
            for (size_t l = 0; l < UFORM_LANES; l++) {
                float x = row[j + l] * 0.125f;
                tops[l] = x > tops[l] ? x : tops[l];
            }
        for (size_t j = whole; j < n; j++) {
            float x = row[j] * 0.125f;
            tops[j - whole] = x > tops[j - whole] ? x : tops[j - whole];
        }
        float top = -INFINITY, sum = 0;
        for (size_t l = 0; l < UFORM_LANES; l++) top = tops[l] > top ? tops[l] : top;
        for (size_t j = 0; j < whole; j += UFORM_LANES)
            for (size_t l = 0; l < UFORM_LANES; l++) {
                row[j + l] = uform_fast_exp(row[j + l] * 0.125f - top);
                sums[l] += row[j + l];
            }
        for (size_t j = whole; j < n; j++) {
            row[j] = uform_fast_exp(row[j] * 0.125f - top);
            sums[j - whole] += row[j];
        }
        for (size_t l = 0; l < UFORM_LANES; l++) sum += sums[l];
        float inverse = 1.0f / sum;
        for (size_t j = 0; j < n; j++) row[j] *= inverse;
        lse[i * lse_stride] = top + logf(sum);
    }
}

/* p [n x n] holds Q K^T: p = exp(p / 8 - lse_i), ds = p (ds - D_i) / 8 with
 * D_i = dO_i . O_i (a chain over d in order); elementwise otherwise. */
static UFORM_VECTOR_CLONES void uform_softmax_backward_rows(float *p, float *ds, size_t n,
                                                            const float *lse, size_t lse_stride,
                                                            const float *dout, const float *o,
                                                            size_t stride) {
    for (size_t i = 0; i < n; i++) {
        float row_lse = lse[i * lse_stride], delta = 0;
        for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++) delta += dout[i * stride + d] * o[i * stride + d];
        float *p_row = p + i * n, *ds_row = ds + i * n;
        for (size_t j = 0; j < n; j++) {
            p_row[j] = uform_fast_exp(p_row[j] * 0.125f - row_lse);
            ds_row[j] = p_row[j] * (ds_row[j] - delta) * 0.125f;
        }
    }
}

static void uform_attention_forward_tasks(void *context, size_t begin, size_t end, size_t thread) {
    const uform_attention_job_t *job = context;
    size_t hidden = job->hidden, stride = 3 * hidden;
    float *scores = job->scratch + thread * job->scratch_per_thread;
    for (size_t t = begin; t < end; t++) {
        const uform_segment_t *segment = &job->segments[t / job->heads];
        size_t head = t % job->heads, n = segment->length;
        if (n == 0) continue;
        const float *q = job->qkv + segment->begin * stride + head * UFORM_HEAD_WIDTH;
        uform_scores(job, q, q + hidden, stride, n, scores);
        uform_softmax_rows(scores, n, job->lse_out + segment->begin * job->heads + head, job->heads);
        uform_product(job, n, UFORM_HEAD_WIDTH, n, uform_view(scores, n, false),
                      uform_view(q + 2 * hidden, stride, false),
                      job->result + segment->begin * hidden + head * UFORM_HEAD_WIDTH, hidden);
    }
}

static void uform_attention_backward_tasks(void *context, size_t begin, size_t end, size_t thread) {
    const uform_attention_job_t *job = context;
    size_t hidden = job->hidden, stride = 3 * hidden;
    float *p = job->scratch + thread * job->scratch_per_thread;
    for (size_t t = begin; t < end; t++) {
        const uform_segment_t *segment = &job->segments[t / job->heads];
        size_t head = t % job->heads, n = segment->length;
        if (n == 0) continue;
        float *ds = p + n * n;
        size_t offset = head * UFORM_HEAD_WIDTH;
        const float *q = job->qkv + segment->begin * stride + offset, *k = q + hidden, *v = q + 2 * hidden;
        const float *o = job->out + segment->begin * hidden + offset;
        const float *dout = job->dout + segment->begin * hidden + offset;
        float *dq = job->result + segment->begin * stride + offset, *dk = dq + hidden, *dv = dq + 2 * hidden;
        uform_scores(job, q, k, stride, n, p);
        uform_product(job, n, n, UFORM_HEAD_WIDTH, uform_view(dout, hidden, false),
                      uform_view(v, stride, true), ds, n);
        uform_softmax_backward_rows(p, ds, n, job->logsumexp + segment->begin * job->heads + head,
                                    job->heads, dout, o, hidden);
        float *local = ds + n * n; /* [3][n][64]: dq, dk, dv of this item and head */
        uform_product(job, n, UFORM_HEAD_WIDTH, n, uform_view(ds, n, false),
                      uform_view(k, stride, false), local, UFORM_HEAD_WIDTH);
        uform_product(job, n, UFORM_HEAD_WIDTH, n, uform_view(ds, n, true),
                      uform_view(q, stride, false), local + n * UFORM_HEAD_WIDTH, UFORM_HEAD_WIDTH);
        uform_product(job, n, UFORM_HEAD_WIDTH, n, uform_view(p, n, true),
                      uform_view(dout, hidden, false), local + 2 * n * UFORM_HEAD_WIDTH,
                      UFORM_HEAD_WIDTH);
        float *targets[3] = {dq, dk, dv};
        for (size_t part = 0; part < 3; part++)
            for (size_t i = 0; i < n; i++)
                for (size_t d = 0; d < UFORM_HEAD_WIDTH; d++)
                    targets[part][i * stride + d] += local[(part * n + i) * UFORM_HEAD_WIDTH + d];
    }
}

/* Per-thread scratch for two n x n matrices of the longest item, or NULL. */
static float *uform_attention_scratch(uform_executor_t *executor, const uform_segment_t *segments,
                                      size_t count, size_t *per_thread) {
    size_t longest = 0;
    for (size_t s = 0; s < count; s++) longest = segments[s].length > longest ? segments[s].length : longest;
    size_t threads = executor ? uform_executor_width(executor) : 1;
    /* two n x n matrices, then dq, dk, dv of n x 64 each (summed apart, then
     * added once, so a second backward adds exactly the same again) */
    *per_thread = (2 * longest * longest + 3 * longest * UFORM_HEAD_WIDTH + 15) & ~(size_t)15;
    size_t bytes;
    if (!uform_mul_ok(*per_thread, threads * sizeof(float), &bytes) || bytes > UFORM_ATTENTION_SCRATCH)
        return NULL;
    /* the executor's scratch (kept between calls, not faulted in again each
     * time); a failure here is handled, not reported */
    return uform_scratch_take(executor, bytes);
}

void uform_attention_forward(uform_executor_t *executor, uform_sgemm_path_t path, const float *qkv,
                             size_t hidden, const uform_segment_t *segments, size_t count,
                             float *out, float *logsumexp) {
    if (!count || hidden < UFORM_HEAD_WIDTH) return;
    uform_attention_job_t job = {.qkv = qkv, .result = out, .lse_out = logsumexp, .hidden = hidden,
                                 .heads = hidden / UFORM_HEAD_WIDTH, .path = path,
                                 .segments = segments};
    job.scratch = uform_attention_scratch(executor, segments, count, &job.scratch_per_thread);
    if (!job.scratch) {
        uform_attention_forward_tiled(executor, qkv, hidden, segments, count, out, logsumexp);
        return;
    }
    if (executor) uform_parallel_for(executor, count * job.heads, 1, uform_attention_forward_tasks, &job);
    else uform_attention_forward_tasks(&job, 0, count * job.heads, 0);
    uform_scratch_give(executor, job.scratch);
}

void uform_attention_backward(uform_executor_t *executor, uform_sgemm_path_t path,
                              const float *qkv, const float *out, const float *dout,
                              const float *logsumexp, size_t hidden,
                              const uform_segment_t *segments, size_t count, float *dqkv) {
    if (!count || hidden < UFORM_HEAD_WIDTH) return;
    uform_attention_job_t job = {.qkv = qkv, .out = out, .dout = dout, .logsumexp = logsumexp,
                                 .result = dqkv, .hidden = hidden, .heads = hidden / UFORM_HEAD_WIDTH,
                                 .path = path, .segments = segments};
    job.scratch = uform_attention_scratch(executor, segments, count, &job.scratch_per_thread);
    if (!job.scratch) {
        uform_attention_backward_tiled(executor, qkv, out, dout, logsumexp, hidden, segments, count, dqkv);
        return;
    }
    if (executor) uform_parallel_for(executor, count * job.heads, 1, uform_attention_backward_tasks, &job);
    else uform_attention_backward_tasks(&job, 0, count * job.heads, 0);
    uform_scratch_give(executor, job.scratch);
}
