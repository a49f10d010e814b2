/* backend.h: the interface a device implements so the model runs on it.
 *
 * In the spirit of ggml-backend's ggml_backend_i: a backend is the memory of a
 * device and a table of the operations the model is written in. The model
 * (model/encoder.c: one forward, one backward) and the trainer call only these
 * entries; each backend (backend/cpu/ today, c/cuda/ next) implements them and
 * nothing else. tests/c/test_ops.c checks every entry of a backend against a
 * float64 reference, so a new backend is tested by passing it to that test.
 *
 * Conventions:
 * - Activations, weights, gradients, optimizer state and the index arrays the
 *   operations take (segments, positions, ids, row lists, targets) are device
 *   memory of this backend (for the CPU backend, host memory). The objectives'
 *   structures (losses.h: bags, groups, relations, offsets) and the token rows
 *   of maxsim are host memory; their checks (loss_checks.c) read parameters
 *   on the host too, which a device backend must provide for (issue 11).
 *   Sizes are in elements unless named bytes.
 * - Operations return nothing: a backend that can fail inside one (a GPU
 *   launch) records its first failure and reports it from `synchronize`. The
 *   CPU backend's operations cannot fail (every allocation they make has a
 *   fallback that computes the same bits).
 * - Backward operations ACCUMULATE into their gradient outputs (dx += ...,
 *   dweight += ...), as in llm.c: callers zero gradients once per step.
 * - Determinism: every output element is one fixed chain of operations that
 *   depends neither on the rows around it in a batch nor on the thread count;
 *   weight gradients are summed over rows in row order.
 * - Operations run in call order on the backend's stream (the CPU backend runs
 *   each one to completion on the executor's pool before returning).
 */
#ifndef UFORM_BACKEND_H
#define UFORM_BACKEND_H

#include "backend/losses.h"

/* Activations per encode forward batch on a CPU (and for a backend naming
 * none): 16 MiB, about 800 token rows at hidden 512, so each product's inputs
 * and outputs stay in a 32 MiB L3 between the operations. 64 MiB (3,200
 * rows) spilled them to memory: batch-256 text_encode on a 2-core Zen 4, one
 * thread, ran 5% slower (SAPPHIRE; HASWELL 7%, SKYLAKE 2%); 4 to 16 MiB
 * measured alike (docs/profiles.md). */
#define UFORM_FORWARD_BATCH_BYTES ((size_t)16 << 20)

/* ---- operands ------------------------------------------------------------ */

/* A matrix operand of `gemm`: element (i, p) at data[i * stride + p], or at
 * data[p * stride + i] when transposed. */
typedef struct {
    const float *data;
    size_t stride;      /* floats between consecutive rows of the stored matrix */
    bool transposed;
} uform_matrix_t;

/* A weight matrix W [n, k] packed by a backend for its inference products
 * (pack / packed_free below): the layout at data is the backend's own (the CPU
 * classes': kernels.h). */
typedef struct {
    size_t n;        /* output features (rows of W) */
    size_t k;        /* input features (columns of W) */
    void *data;
    size_t bytes;    /* bytes held at data (device memory) */
    /* BF16, or E4M3: one byte per weight and a power-of-two FP32 scale per
     * output row (docs/architecture.md, "E4M3 quantization"). */
    uform_scalar_t scalar;
    /* The backend's own tags of its layout at data (the CPU classes': the
     * panel width and gemm.h's layout). */
    size_t panel_columns;
    int layout;
    size_t padded_k; /* k as the panels hold it, the zero padding included */
} uform_packed_t;

/* A weight matrix W [n, k] (y = W x) as the backend holds it: packed once at
 * load in the backend's own layout for inference (BF16 on the CPU classes), or
 * FP32 row-major masters the trainer updates every step. Exactly one of
 * packed / dense is set. */
typedef struct {
    const void *packed;  /* the backend's packed form (CPU: uform_packed_t) */
    const float *dense;  /* FP32 [n, k], row-major */
    size_t n, k;
} uform_weight_t;

/* One item of a packed batch: rows [begin, begin + length); items never
 * attend to each other. axes: rotary position axes (1 text/audio, 2 image,
 * 3 video). */
typedef struct {
    size_t begin;
    size_t length;
    size_t axes;
} uform_segment_t;

/* Rows whose embedding id is this (media rows of a mixed batch) are neither
 * written by embedding_forward nor read by embedding_backward. */
#define UFORM_NOT_TEXT UINT32_MAX

typedef struct uform_backend uform_backend_t;

#define UFORM_ADAM_BETA1 0.9f
#define UFORM_ADAM_BETA2 0.999f
#define UFORM_ADAM_EPSILON 1e-8f
#define UFORM_WEIGHT_DECAY 0.01f

/* ---- the interface --------------------------------------------------------- */

typedef struct {
    const char *name;   /* "cpu", "cuda" */
    /* Device memory is host memory: the host may read and write it directly,
     * so callers skip their staging copies (the CPU backend). A device whose
     * memory the host cannot touch (CUDA) leaves it false: callers then write
     * index arrays and inputs on the host and `upload` them. */
    bool host_memory;
    /* The bytes of activations an encode verb's forward batch aims at
     * (encode_batches.c, uform_batch_rows); 0: UFORM_FORWARD_BATCH_BYTES. */
    size_t forward_batch_bytes;

    /* -- memory of the device -- */
    void *(*alloc)(uform_backend_t *b, size_t bytes);   /* 64-byte aligned; NULL + error set */
    void (*free)(uform_backend_t *b, void *memory);
    void (*upload)(uform_backend_t *b, void *device, const void *host, size_t bytes);
    void (*download)(uform_backend_t *b, void *host, const void *device, size_t bytes);
    void (*copy)(uform_backend_t *b, void *destination, const void *source, size_t bytes);
    void (*zero)(uform_backend_t *b, void *memory, size_t bytes);
    /* FP32 rows [rows, width] written to host memory as `scalar` (F32, BF16,
     * F16 rounded to nearest even; E4M3, E5M2 one byte each, no scale, nearest
     * even, saturating, NaN 0x7F with its sign (core/fp8.h); I8 round(127 x),
     * clamped, NaN 0; B1 sign bits, most significant first), rows row_bytes
     * apart. */
    void (*download_rows)(uform_backend_t *b, const float *rows_f32, size_t rows, size_t width,
                          uform_scalar_t scalar, void *host, size_t row_bytes);
    /* download_rows' conversion (the same bits: core/output_scalars.h) into
     * this backend's own memory: a device arena's rows (uform_arena_init_vram).
     * Optional: NULL where no arena lives in the backend's memory (the CPU's,
     * whose arenas are host arenas). */
    void (*convert_rows)(uform_backend_t *b, const float *rows_f32, size_t rows, size_t width,
                         uform_scalar_t scalar, void *rows_out, size_t row_bytes);
    /* Waits for every operation issued; the first failure since the last call. */
    uform_status_t (*synchronize)(uform_backend_t *b);
    /* Optional (NULL: nothing to do). A backend whose operations share state
     * between calls (CUDA: one stream, its scratch, the current device of the
     * calling thread) is held by one caller at a time: a verb acquires it for
     * its whole call and releases it at the end. */
    void (*acquire)(uform_backend_t *b);
    void (*release)(uform_backend_t *b);

    /* -- weights -- */
    /* Packs W [n, k], given as BF16 bits row-major on the host, for `linear`. */
    uform_status_t (*pack)(uform_backend_t *b, const uint16_t *weights, size_t n, size_t k,
                           uform_packed_t *packed);
    /* Packs W [n, k] quantized to E4M3: codes [n, k] row-major and the scale
     * of each row (a power of two), W[i][p] = e4m3(codes[i][p]) x scales[i]. */
    uform_status_t (*pack_e4m3)(uform_backend_t *b, const uint8_t *codes, const float *scales,
                                size_t n, size_t k, uform_packed_t *packed);
    /* The codes and scales an E4M3 packed matrix holds, as pack_e4m3 took them. */
    uform_status_t (*unpack_e4m3)(uform_backend_t *b, const uform_packed_t *packed,
                                  uint8_t *codes, float *scales);
    void (*packed_free)(uform_backend_t *b, uform_packed_t *packed);

    /* -- matrix products -- */
    /* c[m, n] = (accumulate ? c : 0) + op(a)[m, k] op(b)[k, n] (+ bias[n]): FP32
     * throughout. Every c[i, j] is one chain over p in order from c[i, j] or +0,
     * bias added last. c overlaps none of a, b, bias. */
    void (*gemm)(uform_backend_t *b, size_t m, size_t n, size_t k, uform_matrix_t a,
                 uform_matrix_t bm, const float *bias, bool accumulate, float *c, size_t c_stride);
    /* y[rows, n] = (accumulate ? y : 0) + x[rows, k] W^T (+ bias): the layers'
     * product, on packed or dense weights. accumulate fuses the residual add. */
    void (*linear)(uform_backend_t *b, const uform_weight_t *w, const float *x, size_t x_stride,
                   size_t rows, const float *bias, bool accumulate, float *y, size_t y_stride);
    /* y[rows, n] = gelu(x W^T + bias) (tanh GELU, as gelu_forward), the
     * pre-activation x W^T + bias written to `pre` [rows, n] for the backward
     * (pre == y: not kept, inference): the MLP's up projection, one call so a
     * device can fuse the GELU into the product's epilogue. */
    void (*linear_gelu)(uform_backend_t *b, const uform_weight_t *w, const float *x,
                        size_t x_stride, size_t rows, const float *bias, float *pre, float *y);
    /* Its backward on dense weights: dW += dy^T x, dbias += column sums of dy
     * (dbias may be NULL), dx (+)= dy W (dx may be NULL). x [rows, k], dy [rows, n]. */
    void (*linear_backward)(uform_backend_t *b, const uform_weight_t *w, const float *x,
                            const float *dy, size_t rows, float *dweight, float *dbias, float *dx,
                            bool accumulate_dx);

    /* -- inference with BF16 operands (optional: all four or none) --
     * A device whose products read BF16 operands (CUDA) would otherwise round
     * every FP32 operand in a pass of its own before each product: these
     * write the operand in BF16 where it is made and read it so. Each is its
     * FP32 twin with the output rounded to BF16, nearest even (the same
     * product bits: the FP32 op rounds its operand before multiplying too):
     * layer_norm_forward without statistics; rope_forward then
     * attention_forward without log-sum-exp (inference: the rotation is
     * applied as q and k are read, qkv is left as it was); linear /
     * linear_gelu on a BF16 x [rows, k]
     * (x_stride in elements). linear_gelu_bf16's y = bf16(gelu(x W^T + b))
     * may compute the GELU in the product's epilogue, whose tanh GELU is the
     * device library's (docs/gpu.md gives the measured gap). NULL on the CPU
     * backend, whose classes round operands as they pack them. The model's
     * inference forward (transformer.c) uses them when they are set.
     * layer_norm_forward_bf16 saves mean and rstd when they are not NULL
     * (training, below). */
    void (*layer_norm_forward_bf16)(uform_backend_t *b, const float *x, size_t rows, size_t width,
                                    const float *weight, const float *bias, uint16_t *y, float *mean,
                                    float *rstd);
    void (*attention_forward_bf16)(uform_backend_t *b, const float *qkv, size_t hidden,
                                   const uform_segment_t *segments, size_t count, size_t rows,
                                   size_t longest, const float *cosines, const float *sines,
                                   uint16_t *out, void *scratch);
    void (*linear_bf16)(uform_backend_t *b, const uform_weight_t *w, const uint16_t *x,
                        size_t x_stride, size_t rows, const float *bias, bool accumulate, float *y,
                        size_t y_stride);
    void (*linear_gelu_bf16)(uform_backend_t *b, const uform_weight_t *w, const uint16_t *x,
                             size_t x_stride, size_t rows, const float *bias, uint16_t *y);
    /* The qkv projection written as the attention reads it (optional, both
     * or none, only with the four above): linear_qkv_bf16's qkv16 [rows, 3H]
     * holds x W^T + b in BF16 with q's and k's pairs rotated as rope_forward
     * rotates them, and attention_forward_staged_bf16 is
     * attention_forward_bf16 on such rows. Where the device's product can
     * write BF16, qkv16 is that product's rounded output rotated in place
     * and rounded again (within two BF16 steps of rope_forward then one
     * rounding, plus the bias's own rounding to BF16); elsewhere the FP32
     * product, rotated and rounded once. It spares the qkv product's FP32
     * rows and the pass that reads them to rotate and round (docs/gpu.md,
     * "BF16 operands in inference"). */
    void (*linear_qkv_bf16)(uform_backend_t *b, const uform_weight_t *w, const uint16_t *x,
                            size_t x_stride, size_t rows, const float *bias, const float *cosines,
                            const float *sines, uint16_t *qkv16);
    void (*attention_forward_staged_bf16)(uform_backend_t *b, const uint16_t *qkv16, size_t hidden,
                                          const uform_segment_t *segments, size_t count, size_t rows,
                                          size_t longest, uint16_t *out, void *scratch);
    /* -- training with BF16 operands (optional: both or none, and only with
     * the four above) --
     * The trainer keeps the operands that only products read (the normed
     * rows, GELU's output) in BF16, made where they are computed, instead of
     * FP32 rounded again by every product that reads them, forward and
     * backward: gelu_forward with its output rounded to BF16; linear_backward
     * on a BF16 x [rows, k] (the same products: the FP32 op rounds x first).
     * The same bits as the FP32 ops on such a backend. */
    void (*gelu_forward_bf16)(uform_backend_t *b, const float *x, size_t count, uint16_t *y);
    void (*linear_backward_bf16)(uform_backend_t *b, const uform_weight_t *w, const uint16_t *x,
                                 const float *dy, size_t rows, float *dweight, float *dbias,
                                 float *dx, bool accumulate_dx);
    /* The MLP's up projection backward through GELU (optional, only with the
     * two above): dpre = gelu'(pre) dy [rows, n] as gelu_backward adds it
     * into zeros, then linear_backward_bf16(w, x, dpre, rows, dweight, dbias,
     * dx, false), without dpre's FP32 rows (the CUDA backend makes dpre's
     * BF16 rows and bias sums in one pass over pre and dy): the same bits. */
    void (*gelu_linear_backward_bf16)(uform_backend_t *b, const uform_weight_t *w, const uint16_t *x,
                                      const float *pre, const float *dy, size_t rows,
                                      float *dweight, float *dbias, float *dx);
    /* The qkv projection's backward through the rotary positions (optional,
     * only with the two above): rope_backward of dqkv [rows, 3H] (left as it
     * is), then linear_backward_bf16(w, x, that, rows, dweight, dbias, dx,
     * false), the rotation made in the pass that rounds dqkv and sums its
     * columns: the same bits. w must be [3H, H], H a multiple of 64. */
    void (*rope_linear_backward_bf16)(uform_backend_t *b, const uform_weight_t *w, const uint16_t *x,
                                      const float *dqkv, const float *cosines, const float *sines,
                                      size_t rows, float *dweight, float *dbias, float *dx);
    /* Training's attention with q, k, v kept in BF16 (optional: both or
     * none, only with the ops above): the forward takes qkv [rows, 3H] as the
     * product wrote it (not rotated; left as it is), writes q and k rotated as
     * rope_forward rotates them and all three rounded to BF16 into qkv16
     * [rows, 3H], then out and logsumexp from those; the backward reads
     * qkv16 instead of qkv. The attention kernels round q, k, v to BF16 as
     * they load them anyway, so the same bits as rope_forward, then
     * attention_forward and attention_backward, without qkv's FP32 rows kept
     * between the two or rounded by each. */
    void (*attention_forward_train_bf16)(uform_backend_t *b, const float *qkv, size_t hidden,
                                         const uform_segment_t *segments, size_t count, size_t rows,
                                         size_t longest, const float *cosines, const float *sines,
                                         uint16_t *qkv16, float *out, float *logsumexp);
    void (*attention_backward_bf16)(uform_backend_t *b, const uint16_t *qkv16, const float *out,
                                    const float *dout, const float *logsumexp, size_t hidden,
                                    const uform_segment_t *segments, size_t count, size_t rows,
                                    size_t longest, float *dqkv);

    /* -- row-wise layers -- */
    /* y = (x - mean) rstd weight + bias per row, biased variance, eps 1e-5; y may
     * be x. mean and rstd [rows] are saved when not NULL. */
    void (*layer_norm_forward)(uform_backend_t *b, const float *x, size_t rows, size_t width,
                               const float *weight, const float *bias, float *y, float *mean,
                               float *rstd);
    void (*layer_norm_backward)(uform_backend_t *b, const float *dy, const float *x,
                                const float *weight, const float *mean, const float *rstd,
                                size_t rows, size_t width, float *dx, float *dweight,
                                float *dbias);
    /* tanh GELU, elementwise; y may be x. */
    void (*gelu_forward)(uform_backend_t *b, const float *x, size_t count, float *y);
    void (*gelu_backward)(uform_backend_t *b, const float *x, const float *dy, size_t count,
                          float *dx);
    /* cosines and sines [rows][32] of every row's rotary angles; positions hold
     * 3 integers per row, `axes` of them used by the row's segment. */
    void (*rope_tables)(uform_backend_t *b, const uform_segment_t *segments, size_t count,
                        const uint32_t *positions, float *cosines, float *sines);
    /* Rotates q and k of every head in place on a qkv matrix [rows, 3H];
     * backward rotates their gradients back, in place on dqkv. */
    void (*rope_forward)(uform_backend_t *b, float *qkv, size_t rows, size_t hidden,
                         const float *cosines, const float *sines);
    void (*rope_backward)(uform_backend_t *b, float *dqkv, size_t rows, size_t hidden,
                          const float *cosines, const float *sines);
    /* y[r] = table[ids[r]] + modality, skipping UFORM_NOT_TEXT rows; backward
     * scatters dy into dtable and sums it into dmodality, rows in order (the
     * CUDA backend: in fixed chunks of rows, then the chunks in order). The
     * table is the model's bytes and MASK: ids < UFORM_BYTES + 1. */
    void (*embedding_forward)(uform_backend_t *b, const float *table, const float *modality,
                              const uint32_t *ids, size_t rows, size_t width, float *y);
    void (*embedding_backward)(uform_backend_t *b, const float *dy, const uint32_t *ids,
                               size_t rows, size_t width, float *dtable, float *dmodality);

    /* -- attention over packed segments, heads of 64 -- */
    /* out [rows, H] from qkv [rows, 3H] (rotary applied), each segment alone.
     * logsumexp [rows][heads] is saved for the backward when not NULL (training);
     * NULL is the inference path, which may use `scratch` of
     * attention_scratch_bytes (NULL there: none needed). `longest` is the
     * longest segment's rows, which the GPU sizes its launch by (segments
     * live in device memory there); a smaller value gives the same results,
     * only later (a block then loops over several of a segment's tiles). */
    size_t (*attention_scratch_bytes)(uform_backend_t *b, size_t hidden, size_t segments,
                                      size_t longest);
    void (*attention_forward)(uform_backend_t *b, const float *qkv, size_t hidden,
                              const uform_segment_t *segments, size_t count, size_t rows,
                              size_t longest, float *out, float *logsumexp, void *scratch);
    /* dqkv += the gradients of q, k, v given dout [rows, H]. In both, every
     * segment lies within the `rows` rows (the GPU keeps copies of them). */
    void (*attention_backward)(uform_backend_t *b, const float *qkv, const float *out,
                               const float *dout, const float *logsumexp, size_t hidden,
                               const uform_segment_t *segments, size_t count, size_t rows,
                               size_t longest, float *dqkv);

    /* -- heads -- */
    /* pooled [count, width]: the mean of each segment's rows (zeros when empty). */
    void (*mean_pool_forward)(uform_backend_t *b, const float *x, size_t width,
                              const uform_segment_t *segments, size_t count, float *pooled);
    void (*mean_pool_backward)(uform_backend_t *b, const float *dpooled, size_t width,
                               const uform_segment_t *segments, size_t count, float *dx);
    /* y = x / max(|x|, 1e-12) per row; y may be x; norms [rows] saved when not NULL. */
    void (*normalize_forward)(uform_backend_t *b, const float *x, size_t rows, size_t width,
                              float *y, float *norms);
    void (*normalize_backward)(uform_backend_t *b, const float *dy, const float *y,
                               const float *norms, size_t rows, size_t width, float *dx);
    /* losses[r] = logsumexp(logits[r]) - logits[r][targets[r]]; backward:
     * dlogits[r] += scale[r] (softmax(logits[r]) - onehot(targets[r])). */
    void (*cross_entropy_forward)(uform_backend_t *b, const float *logits, size_t rows,
                                  size_t classes, const uint32_t *targets, float *losses);
    void (*cross_entropy_backward)(uform_backend_t *b, const float *logits, size_t rows,
                                   size_t classes, const uint32_t *targets, const float *scale,
                                   float *dlogits);
    /* dst[i] = src[rows[i]] (gather) and dst[rows[i]] += src[i] (scatter_add,
     * in index order), rows of `width`. */
    void (*gather_rows)(uform_backend_t *b, const float *src, size_t width, const size_t *rows,
                        size_t count, float *dst);
    void (*scatter_add_rows)(uform_backend_t *b, const float *src, size_t width,
                             const size_t *rows, size_t count, float *dst);
    /* dst[rows[i]][c] = src[i * src_stride + c] (+ add[c] when add is not NULL):
     * media rows into the input rows (src_stride 0 broadcasts one vector);
     * rows NULL means row i. dst may be src when rows is NULL. */
    void (*scatter_rows)(uform_backend_t *b, const float *src, size_t src_stride, const float *add,
                         size_t width, const size_t *rows, size_t count, float *dst);
    /* sums[c] += sum over i of src[rows[i]][c], i in order (rows NULL: row i). */
    void (*sum_rows)(uform_backend_t *b, const float *src, size_t width, const size_t *rows,
                     size_t count, float *sums);

    /* -- MaxSim (uform_late_interaction_scores, checked): scores[q, d] =
     * mean over q's rows of the max over d's rows of their dot product, 0 when
     * either has no rows; independent of the thread count -- */
    uform_status_t (*maxsim)(uform_backend_t *b, const uform_token_rows_t *queries,
                             const uform_token_rows_t *documents, float *scores);

    /* -- the choices head in inference (text_choose; states, segments, table,
     * bias and log_temperature device memory, the tape, groups, offsets and
     * probabilities host memory): item c is segment c, its
     * MASK the segment's last row; its choices are entry (choices->count == 1 ?
     * 0 : first_entry + c) of the tape; probabilities[offsets[c] ..
     * offsets[c + 1]) = softmax over them of (h . table[k] + bias[k]) /
     * exp(log_temperature[groups[c]]) (groups NULL: group 0; log_temperature
     * NULL: temperature 1) -- */
    void (*choice_probabilities)(uform_backend_t *b, const float *states, size_t hidden,
                                 const uform_segment_t *segments, size_t count,
                                 const uform_tape_t *choices, size_t first_entry,
                                 const uint32_t *groups, const float *table, const float *bias,
                                 const float *log_temperature, const size_t *offsets,
                                 float *probabilities);

    /* -- the objectives (losses.h; docs/training.md sections 3, 9, 10): each
     * checks its inputs (loss_checks.c) and fails with INVALID_ARGUMENT before
     * computing anything; gradients ADD into their outputs, except choices_loss's
     * d_states [count, H], which it writes. `loss` and `loss_sum` are host
     * memory (the CPU backend's tests/c/test_ops.c passes its own memory,
     * host memory too); the contrastive parameters and every gradient are
     * device memory; late interaction's two scalars are values -- */
    uform_status_t (*contrastive_loss)(uform_backend_t *b, const uform_contrastive_config_t *config,
                                       const uform_contrastive_batch_t *batch,
                                       const float *log_inverse_temperature, const float *bias,
                                       float *loss, float *d_embeddings,
                                       float *d_log_inverse_temperature, float *d_bias);
    uform_status_t (*late_interaction_loss)(uform_backend_t *b,
                                            const uform_contrastive_config_t *relations_config,
                                            uform_pair_loss_form_t form,
                                            const uform_late_batch_t *batch,
                                            float log_inverse_temperature, float bias,
                                            float weight, float *loss, float *d_vectors,
                                            float *d_log_inverse_temperature, float *d_bias);
    void (*choices_loss)(uform_backend_t *b, const uform_choices_batch_t *batch,
                         const float *bytes_table, const float *bytes_bias,
                         const float *log_temperature, float scale, double *loss_sum,
                         float *d_states, float *d_bytes_table, float *d_bytes_bias,
                         float *d_log_temperature);

    /* -- the masked media objective -- */
    /* Returns sum over rows of mean_k (predictions - targets)^2, float64, and
     * writes d_predictions = scale 2 (predictions - targets) / width. */
    double (*reconstruction_loss)(uform_backend_t *b, const float *predictions,
                                  const float *targets, size_t rows, size_t width, float scale,
                                  float *d_predictions);

    /* -- the optimizer over flat buffers: torch.optim.AdamW with the constants
     * below (UFORM_ADAM_*, decoupled weight decay UFORM_WEIGHT_DECAY) -- */
    /* sum of squares of `count` values, accumulated in float64 in index order. */
    double (*sum_squares)(uform_backend_t *b, const float *values, size_t count);
    /* One torch.optim.AdamW update on gradients times gradient_scale; decay[i]
     * != 0 marks decayed parameters. */
    void (*adamw)(uform_backend_t *b, float *parameters, const float *gradients,
                  float gradient_scale, float *first_moment, float *second_moment,
                  const uint8_t *decay, size_t count, uint64_t step, float learning_rate);
    /* The lowest index that same update would make non-finite, SIZE_MAX when
     * none; changes nothing. */
    size_t (*adamw_first_non_finite)(uform_backend_t *b, const float *parameters,
                                     const float *gradients, float gradient_scale,
                                     const float *first_moment, const float *second_moment,
                                     const uint8_t *decay, size_t count, uint64_t step,
                                     float learning_rate);
} uform_backend_ops_t;

/* A backend instance: its table and what its operations run on. Cheap to
 * make per call (a value on the stack): it owns nothing. */
struct uform_backend {
    const uform_backend_ops_t *ops;
    uform_executor_t *executor;   /* CPU: the pool operations run on (required) */
    const void *device;           /* backend-private: the CPU class's kernels */
    uform_status_t failure;       /* the first failure since synchronize */
};

/* ---- helpers over the table (memory.c) ------------------------------------ */

/* `count` x `size` bytes of the backend's memory, NULL with OUT_OF_MEMORY set
 * naming `what` on overflow or failure. */
UFORM_INTERNAL void *uform_backend_alloc(uform_backend_t *backend, size_t count, size_t size,
                                         const char *what);

/* Frees memory of uform_backend_alloc; NULL is a no-op. */
UFORM_INTERNAL void uform_backend_free(uform_backend_t *backend, void *memory);

#endif /* UFORM_BACKEND_H */
