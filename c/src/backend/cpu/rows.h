/* rows.h: the CPU backend's row-wise operations and attention in FP32, forward
 * and backward (behind backend.h's table: backend/cpu/cpu_backend.c). Private
 * to backend/cpu/ (and the tests of this backend).
 *
 * Conventions, as in llm.c: every backward ACCUMULATES into its gradient
 * outputs (dx += ..., dweight += ...), so callers zero gradients once per step
 * and branches that reuse a tensor add up. Forward functions for training save
 * what their backward needs (named below); nothing is recomputed differently
 * from the inference path's math (docs/architecture.md). Every result is one
 * fixed chain of operations per element, independent of the thread count.
 * Weight gradients (dweight, dbias, dtable) are summed over rows in row order
 * by the thread that owns their column range, so they are deterministic too.
 */
#ifndef UFORM_CPU_ROWS_H
#define UFORM_CPU_ROWS_H

#include "backend/backend.h"
#include "backend/cpu/sgemm.h"

/* Sum of a[i] * b[i] over i < n in 16 lane partials, lanes added in order: the
 * one order of every row-wise dot product (norms, choice scores). */
static inline __attribute__((always_inline)) float uform_dot_lanes(const float *a, const float *b,
                                                                   size_t n) {
    float partial[UFORM_LANES] = {0};
    for (size_t i = 0; i < n; i += UFORM_LANES)
        for (size_t l = 0; l < UFORM_LANES && i + l < n; l++) partial[l] += a[i + l] * b[i + l];
    float sum = 0;
    for (size_t l = 0; l < UFORM_LANES; l++) sum += partial[l];
    return sum;
}

/* ---- LayerNorm: y = (x - mean) * rstd * weight + bias, biased variance, eps 1e-5 */
UFORM_INTERNAL void uform_layer_norm_forward(uform_executor_t *executor, const float *x, size_t rows,
                                             size_t width, const float *weight, const float *bias,
                                             float *y, float *mean, float *rstd);
UFORM_INTERNAL void uform_layer_norm_backward(uform_executor_t *executor, const float *dy,
                                              const float *x, const float *weight,
                                              const float *mean, const float *rstd, size_t rows,
                                              size_t width, float *dx, float *dweight, float *dbias);

/* ---- GELU, tanh form: y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
/* gelu.c: one element (the definition: the same bits wherever it runs); y =
 * gelu(y) in place over rows x cols, rows `stride` floats apart (the GEMM's
 * epilogue); and the separate pass, y [count] = gelu(x) (y may be x). */
UFORM_INTERNAL float uform_gelu_value(float v);
UFORM_INTERNAL void uform_gelu_rows(float *y, size_t rows, size_t cols, size_t stride);
UFORM_INTERNAL void uform_gelu_forward(uform_executor_t *executor, const float *x, size_t count,
                                       float *y);
UFORM_INTERNAL void uform_gelu_backward(uform_executor_t *executor, const float *x, const float *dy,
                                        size_t count, float *dx);
/* y [n] = gelu(x [n]) by one instruction set's loop, "avx512", "avx2" or
 * "scalar" (NULL where this CPU or build lacks it): for the tests, which
 * check each against uform_gelu_value bit for bit. */
typedef void (*uform_gelu_row_fn_t)(const float *x, float *y, size_t n);
UFORM_INTERNAL uform_gelu_row_fn_t uform_gelu_row_named(const char *isa);

/* ---- Rotary positions on q and k of every head, in place on rows of a qkv
 * matrix [rows, 3H] (q at columns [0, H), k at [H, 2H)). cosines/sines are
 * [rows][32] tables (as forward.c builds them from positions). Backward
 * rotates the gradients of q and k by -t, in place on dqkv. */
UFORM_INTERNAL void uform_rope_tables(uform_executor_t *executor, const uform_segment_t *segments,
                                      size_t count, const uint32_t *positions, float *cosines,
                                      float *sines);
UFORM_INTERNAL void uform_rope_forward(uform_executor_t *executor, float *qkv, size_t rows,
                                       size_t hidden, const float *cosines, const float *sines);
UFORM_INTERNAL void uform_rope_backward(uform_executor_t *executor, float *dqkv, size_t rows,
                                        size_t hidden, const float *cosines, const float *sines);

/* ---- Attention of every head within each segment.
 * qkv [rows, 3H] (rotary applied); out [rows, H]; logsumexp [rows][heads]
 * saved: log sum_j exp(score_ij) per query row and head, so backward
 * recomputes the probabilities instead of storing [n x n] per head.
 * segments: `count` items of (begin, length) rows; every row belongs to one.
 * Products run on the FP32 GEMM's `path` (sgemm.h; AUTO: the best). */
UFORM_INTERNAL void uform_attention_forward(uform_executor_t *executor, uform_sgemm_path_t path,
                                            const float *qkv, size_t hidden,
                                            const uform_segment_t *segments, size_t count,
                                            float *out, float *logsumexp);
/* dqkv [rows, 3H] += gradients of q, k, v given dout [rows, H]. */
UFORM_INTERNAL void uform_attention_backward(uform_executor_t *executor, uform_sgemm_path_t path,
                                             const float *qkv, const float *out,
                                             const float *dout, const float *logsumexp,
                                             size_t hidden, const uform_segment_t *segments,
                                             size_t count, float *dqkv);

/* The same two functions computed in register tiles with no scratch memory
 * (attention_tiled.c): what attention_train.c falls back to when it cannot allocate its
 * per-thread score matrices. */
UFORM_INTERNAL void uform_attention_forward_tiled(uform_executor_t *executor, const float *qkv,
                                                  size_t hidden, const uform_segment_t *segments,
                                                  size_t count, float *out, float *logsumexp);
UFORM_INTERNAL void uform_attention_backward_tiled(uform_executor_t *executor, const float *qkv,
                                                   const float *out, const float *dout,
                                                   const float *logsumexp, size_t hidden,
                                                   const uform_segment_t *segments, size_t count,
                                                   float *dqkv);

/* ---- Embedding lookup: y[r] = table[ids[r]] + modality. Backward:
 * dtable[ids[r]] += dy[r], dmodality += sum_r dy[r] (rows in order). Rows
 * whose id is UFORM_NOT_TEXT (image, video and audio rows of a mixed batch)
 * are neither written nor read. */
UFORM_INTERNAL void uform_embedding_forward(const float *table, const float *modality,
                                            const uint32_t *ids, size_t rows, size_t width,
                                            float *y);
UFORM_INTERNAL void uform_embedding_backward(uform_executor_t *executor, const float *dy,
                                             const uint32_t *ids, size_t rows, size_t width,
                                             float *dtable, float *dmodality);

/* ---- Mean pooling over each segment's rows: pooled [count, width]; an
 * empty segment pools to zeros (and passes no gradient). */
UFORM_INTERNAL void uform_mean_pool_forward(const float *x, size_t width,
                                            const uform_segment_t *segments, size_t count,
                                            float *pooled);
UFORM_INTERNAL void uform_mean_pool_backward(const float *dpooled, size_t width,
                                             const uform_segment_t *segments, size_t count,
                                             float *dx);

/* ---- L2 normalisation of rows: y = x / max(|x|, 1e-12); norms [rows] saved. */
UFORM_INTERNAL void uform_normalize_forward(const float *x, size_t rows, size_t width, float *y,
                                            float *norms);
UFORM_INTERNAL void uform_normalize_backward(const float *dy, const float *y, const float *norms,
                                             size_t rows, size_t width, float *dx);

/* ---- Softmax cross-entropy of logits rows [rows, classes] against integer
 * targets: losses[r] = logsumexp(logits[r]) - logits[r][target[r]];
 * backward: dlogits[r] += scale[r] * (softmax(logits[r]) - onehot(target[r])).
 * scale lets the caller average (1/count) or weight rows (0 skips a row). */
UFORM_INTERNAL void uform_cross_entropy_forward(const float *logits, size_t rows, size_t classes,
                                                const uint32_t *targets, float *losses);
UFORM_INTERNAL void uform_cross_entropy_backward(const float *logits, size_t rows, size_t classes,
                                                 const uint32_t *targets, const float *scale,
                                                 float *dlogits);

/* ---- maxsim.c: backend.h's maxsim */
UFORM_INTERNAL uform_status_t uform_cpu_maxsim(uform_backend_t *b, const uform_token_rows_t *queries,
                                               const uform_token_rows_t *documents, float *scores);

/* ---- choice_probabilities.c: backend.h's choice_probabilities */
UFORM_INTERNAL void uform_cpu_choice_probabilities(
    uform_backend_t *b, const float *states, size_t hidden, const uform_segment_t *segments,
    size_t count, const uform_tape_t *choices, size_t first_entry, const uint32_t *groups,
    const float *table, const float *bias, const float *log_temperature, const size_t *offsets,
    float *probabilities);

/* ---- download_rows.c: backend.h's download_rows */
UFORM_INTERNAL void uform_cpu_download_rows(uform_backend_t *b, const float *rows_f32, size_t rows,
                                            size_t width, uform_scalar_t scalar, void *out,
                                            size_t row_bytes);

/* ---- adamw.c */
/* One AdamW update of `count` parameters, as torch.optim.AdamW (decoupled decay,
 * bias-corrected moments) on gradients multiplied by `gradient_scale` (the
 * clipping factor); decay[i] != 0 marks parameters that decay. */
UFORM_INTERNAL void uform_adamw(uform_executor_t *executor, float *parameters, const float *gradients,
                                float gradient_scale, float *first_moment, float *second_moment,
                                const uint8_t *decay, size_t count, uint64_t step, float learning_rate);

/* The lowest index whose parameter or moments that same update would make
 * non-finite (an absurd learning rate overflows even from finite gradients),
 * SIZE_MAX when none: a read-only pass run before uform_adamw, so a diverging
 * update is refused instead of applied. */
UFORM_INTERNAL size_t uform_adamw_first_non_finite(uform_executor_t *executor, float *parameters,
                                                   const float *gradients, float gradient_scale,
                                                   float *first_moment, float *second_moment,
                                                   const uint8_t *decay, size_t count, uint64_t step,
                                                   float learning_rate);

#endif /* UFORM_CPU_ROWS_H */
