/* cpu_backend.c: the CPU backend, backend.h's table over the CPU kernels.
 *
 * Device memory is host memory. Operations run to completion on the
 * backend's executor (its thread pool) before returning, so `synchronize` has
 * nothing to wait for and nothing can fail after an operation returns. The
 * inference products use the packed weights of the backend's CPU class
 * (kernels.h: SERIAL, HASWELL, SKYLAKE, SAPPHIRE); dense FP32 products (the
 * trainer's) use the FP32 GEMM (sgemm.h) on the best path this machine runs.
 * Splitting row-owned work over threads never changes a bit. */
#include "backend/cpu/cpu_backend.h"

#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/losses.h"
#include "backend/cpu/rows.h"
#include "backend/cpu/sgemm.h"

#include <stdlib.h>

#define UFORM_ROWS_PER_TASK 16

static const uform_cpu_kernels_t *uform_class_of(const uform_backend_t *b) { return b->device; }
/* The FP32 GEMM path of the backend's class: a trainer pinned to HASWELL
 * multiplies with AVX2 even where AVX-512 is there. */
static uform_sgemm_path_t uform_path_of(const uform_backend_t *b) {
    return uform_sgemm_path_of_class(uform_class_of(b)->cpu_class);
}

/* ---- memory ------------------------------------------------------------------ */

static void *uform_cpu_alloc(uform_backend_t *b, size_t bytes) {
    (void)b;
    return uform_alloc_aligned(1, bytes ? bytes : 1, "device memory");
}
static void uform_cpu_free(uform_backend_t *b, void *memory) {
    (void)b;
    uform_free_aligned(memory);
}
static void uform_cpu_copy(uform_backend_t *b, void *destination, const void *source, size_t bytes) {
    (void)b;
    if (bytes && destination != source) memmove(destination, source, bytes);
}
static void uform_cpu_zero(uform_backend_t *b, void *memory, size_t bytes) {
    (void)b;
    if (bytes) memset(memory, 0, bytes);
}
static uform_status_t uform_cpu_synchronize(uform_backend_t *b) {
    uform_status_t failure = b->failure;
    b->failure = UFORM_OK;
    return failure;
}

/* ---- weights ------------------------------------------------------------------ */

static uform_status_t uform_cpu_pack(uform_backend_t *b, const uint16_t *weights, size_t n,
                                     size_t k, uform_packed_t *packed) {
    return uform_class_of(b)->pack(weights, n, k, packed);
}
static uform_status_t uform_cpu_pack_e4m3(uform_backend_t *b, const uint8_t *codes,
                                          const float *scales, size_t n, size_t k,
                                          uform_packed_t *packed) {
    return uform_class_of(b)->pack_e4m3(codes, scales, n, k, packed);
}
static uform_status_t uform_cpu_unpack_e4m3(uform_backend_t *b, const uform_packed_t *packed,
                                            uint8_t *codes, float *scales) {
    (void)b;
    return uform_gemm_unpack_e4m3(packed, codes, scales);
}
static void uform_cpu_packed_free(uform_backend_t *b, uform_packed_t *packed) {
    (void)b;
    uform_packed_free(packed);
}

/* ---- products ---------------------------------------------------------------- */

static void uform_cpu_gemm(uform_backend_t *b, size_t m, size_t n, size_t k, uform_matrix_t a,
                           uform_matrix_t bm, const float *bias, bool accumulate, float *c,
                           size_t c_stride) {
    uform_sgemm_path(uform_path_of(b), false, b->executor, m, n, k, a, bm, bias, accumulate, c,
                     c_stride);
}

static void uform_cpu_linear(uform_backend_t *b, const uform_weight_t *w, const float *x,
                             size_t x_stride, size_t rows, const float *bias, bool accumulate,
                             float *y, size_t y_stride) {
    if (w->packed) {
        uform_class_of(b)->gemm(b->executor, w->packed, x, x_stride, rows, bias,
                                accumulate ? UFORM_GEMM_ACCUMULATE : UFORM_GEMM_STORE, y, y_stride);
        return;
    }
    uform_sgemm_path(uform_path_of(b), false, b->executor, rows, w->n, w->k,
                     (uform_matrix_t){x, x_stride, false},
                (uform_matrix_t){w->dense, w->k, true}, bias, accumulate, y, y_stride);
}

static void uform_cpu_linear_gelu(uform_backend_t *b, const uform_weight_t *w, const float *x,
                                  size_t x_stride, size_t rows, const float *bias, float *pre,
                                  float *y) {
    if (w->packed && pre == y) { /* inference: GELU on each tile as the GEMM writes it */
        uform_class_of(b)->gemm(b->executor, w->packed, x, x_stride, rows, bias, UFORM_GEMM_GELU,
                                y, w->n);
        return;
    }
    uform_cpu_linear(b, w, x, x_stride, rows, bias, false, pre, w->n);
    uform_gelu_forward(b->executor, pre, rows * w->n, y);
}

typedef struct {
    const float *dy;
    size_t rows, cols;
    float *sums;
} uform_column_task_t;

/* Columns summed at once: their chains stay in four AVX-512 (eight AVX2)
 * registers while the rows stream by, instead of a load and a store of the
 * sums per row (the bias gradients were 3% of a HASWELL step that way). */
#define UFORM_COLUMN_BLOCK 64

/* sums[c] += sum over rows of dy[r][c], rows in order: one owner per column. */
UFORM_VECTOR_CLONES
static void uform_column_sums_range(void *context, size_t begin, size_t end, size_t thread) {
    (void)thread;
    const uform_column_task_t *task = context;
    size_t c0 = begin;
    for (; c0 + UFORM_COLUMN_BLOCK <= end; c0 += UFORM_COLUMN_BLOCK) {
        float chains[UFORM_COLUMN_BLOCK];
        memcpy(chains, task->sums + c0, sizeof(chains));
        for (size_t r = 0; r < task->rows; r++) {
            const float *row = task->dy + r * task->cols + c0;
            for (size_t c = 0; c < UFORM_COLUMN_BLOCK; c++) chains[c] += row[c];
        }
        memcpy(task->sums + c0, chains, sizeof(chains));
    }
    for (size_t r = 0; r < task->rows && c0 < end; r++) {
        const float *row = task->dy + r * task->cols;
        for (size_t c = c0; c < end; c++) task->sums[c] += row[c];
    }
}

static void uform_cpu_linear_backward(uform_backend_t *b, const uform_weight_t *w, const float *x,
                                      const float *dy, size_t rows, float *dweight, float *dbias,
                                      float *dx, bool accumulate_dx) {
    size_t n = w->n, k = w->k;
    if (dweight)
        uform_sgemm_path(uform_path_of(b), false, b->executor, n, k, rows,
                         (uform_matrix_t){dy, n, true},
                    (uform_matrix_t){x, k, false}, NULL, true, dweight, k);
    if (dbias) {
        uform_column_task_t task = {dy, rows, n, dbias};
        uform_parallel_for(b->executor, n, UFORM_COLUMN_BLOCK, uform_column_sums_range, &task);
    }
    if (dx)
        uform_sgemm_path(uform_path_of(b), false, b->executor, rows, k, n,
                         (uform_matrix_t){dy, n, false},
                    (uform_matrix_t){w->dense, k, false}, NULL, accumulate_dx, dx, k);
}

/* ---- row-wise layers (rows.c) -------------------------------------------------- */

static void uform_cpu_layer_norm_forward(uform_backend_t *b, const float *x, size_t rows,
                                         size_t width, const float *weight, const float *bias,
                                         float *y, float *mean, float *rstd) {
    uform_layer_norm_forward(b->executor, x, rows, width, weight, bias, y, mean, rstd);
}
static void uform_cpu_layer_norm_backward(uform_backend_t *b, const float *dy, const float *x,
                                          const float *weight, const float *mean,
                                          const float *rstd, size_t rows, size_t width, float *dx,
                                          float *dweight, float *dbias) {
    uform_layer_norm_backward(b->executor, dy, x, weight, mean, rstd, rows, width, dx, dweight,
                              dbias);
}
static void uform_cpu_gelu_forward(uform_backend_t *b, const float *x, size_t count, float *y) {
    uform_gelu_forward(b->executor, x, count, y);
}
static void uform_cpu_gelu_backward(uform_backend_t *b, const float *x, const float *dy,
                                    size_t count, float *dx) {
    uform_gelu_backward(b->executor, x, dy, count, dx);
}
static void uform_cpu_rope_tables(uform_backend_t *b, const uform_segment_t *segments, size_t count,
                                  const uint32_t *positions, float *cosines, float *sines) {
    uform_rope_tables(b->executor, segments, count, positions, cosines, sines);
}
static void uform_cpu_rope_forward(uform_backend_t *b, float *qkv, size_t rows, size_t hidden,
                                   const float *cosines, const float *sines) {
    uform_rope_forward(b->executor, qkv, rows, hidden, cosines, sines);
}
static void uform_cpu_rope_backward(uform_backend_t *b, float *dqkv, size_t rows, size_t hidden,
                                    const float *cosines, const float *sines) {
    uform_rope_backward(b->executor, dqkv, rows, hidden, cosines, sines);
}
static void uform_cpu_embedding_forward(uform_backend_t *b, const float *table,
                                        const float *modality, const uint32_t *ids, size_t rows,
                                        size_t width, float *y) {
    (void)b;
    uform_embedding_forward(table, modality, ids, rows, width, y);
}
static void uform_cpu_embedding_backward(uform_backend_t *b, const float *dy, const uint32_t *ids,
                                         size_t rows, size_t width, float *dtable,
                                         float *dmodality) {
    uform_embedding_backward(b->executor, dy, ids, rows, width, dtable, dmodality);
}

/* ---- attention ------------------------------------------------------------------ */

static size_t uform_cpu_attention_scratch_bytes(uform_backend_t *b, size_t hidden, size_t segments,
                                                size_t longest) {
    (void)hidden;
    size_t threads = b->executor ? uform_executor_width(b->executor) : 1;
    return uform_attention_inference_scratch_bytes(threads, segments, longest);
}

static void uform_cpu_attention_forward(uform_backend_t *b, const float *qkv, size_t hidden,
                                        const uform_segment_t *segments, size_t count, size_t rows,
                                        size_t longest, float *out, float *logsumexp, void *scratch) {
    (void)rows, (void)longest;   /* the CPU's threads take the segments' tiles as they come */
    if (logsumexp)
        uform_attention_forward(b->executor, uform_path_of(b), qkv, hidden, segments, count, out,
                                logsumexp);
    else
        uform_attention_inference(uform_class_of(b), b->executor, qkv, hidden, segments, count,
                                  out, scratch);
}

static void uform_cpu_attention_backward(uform_backend_t *b, const float *qkv, const float *out,
                                         const float *dout, const float *logsumexp, size_t hidden,
                                         const uform_segment_t *segments, size_t count,
                                         size_t rows, size_t longest, float *dqkv) {
    (void)rows, (void)longest;
    uform_attention_backward(b->executor, uform_path_of(b), qkv, out, dout, logsumexp, hidden,
                             segments, count, dqkv);
}

/* ---- heads ------------------------------------------------------------------------ */

typedef struct {
    const float *x;
    float *y, *norms;
    size_t width;
    const uform_segment_t *segments;
} uform_rows_job_t;

static void uform_pool_range(void *context, size_t begin, size_t end, size_t thread) {
    (void)thread;
    const uform_rows_job_t *job = context;
    uform_mean_pool_forward(job->x, job->width, job->segments + begin, end - begin,
                            job->y + begin * job->width);
}

static void uform_cpu_mean_pool_forward(uform_backend_t *b, const float *x, size_t width,
                                        const uform_segment_t *segments, size_t count,
                                        float *pooled) {
    uform_rows_job_t job = {.x = x, .y = pooled, .width = width, .segments = segments};
    uform_parallel_for(b->executor, count, 1, uform_pool_range, &job);
}

static void uform_cpu_mean_pool_backward(uform_backend_t *b, const float *dpooled, size_t width,
                                         const uform_segment_t *segments, size_t count,
                                         float *dx) {
    (void)b;
    uform_mean_pool_backward(dpooled, width, segments, count, dx);
}

static void uform_normalize_range(void *context, size_t begin, size_t end, size_t thread) {
    (void)thread;
    const uform_rows_job_t *job = context;
    uform_normalize_forward(job->x + begin * job->width, end - begin, job->width,
                            job->y + begin * job->width, job->norms ? job->norms + begin : NULL);
}

static void uform_cpu_normalize_forward(uform_backend_t *b, const float *x, size_t rows,
                                        size_t width, float *y, float *norms) {
    uform_rows_job_t job = {.x = x, .y = y, .norms = norms, .width = width};
    uform_parallel_for(b->executor, rows, UFORM_ROWS_PER_TASK, uform_normalize_range, &job);
}

static void uform_cpu_normalize_backward(uform_backend_t *b, const float *dy, const float *y,
                                         const float *norms, size_t rows, size_t width, float *dx) {
    (void)b;
    uform_normalize_backward(dy, y, norms, rows, width, dx);
}

static void uform_cpu_cross_entropy_forward(uform_backend_t *b, const float *logits, size_t rows,
                                            size_t classes, const uint32_t *targets,
                                            float *losses) {
    (void)b;
    uform_cross_entropy_forward(logits, rows, classes, targets, losses);
}

static void uform_cpu_cross_entropy_backward(uform_backend_t *b, const float *logits, size_t rows,
                                             size_t classes, const uint32_t *targets,
                                             const float *scale, float *dlogits) {
    (void)b;
    uform_cross_entropy_backward(logits, rows, classes, targets, scale, dlogits);
}

static void uform_cpu_gather_rows(uform_backend_t *b, const float *src, size_t width,
                                  const size_t *rows, size_t count, float *dst) {
    (void)b;
    for (size_t i = 0; i < count; i++)
        memcpy(dst + i * width, src + rows[i] * width, width * sizeof(float));
}

static void uform_cpu_scatter_add_rows(uform_backend_t *b, const float *src, size_t width,
                                       const size_t *rows, size_t count, float *dst) {
    (void)b;
    for (size_t i = 0; i < count; i++) {
        float *target = dst + rows[i] * width;
        for (size_t c = 0; c < width; c++) target[c] += src[i * width + c];
    }
}

static void uform_cpu_scatter_rows(uform_backend_t *b, const float *src, size_t src_stride,
                                   const float *add, size_t width, const size_t *rows,
                                   size_t count, float *dst) {
    (void)b;
    for (size_t i = 0; i < count; i++) {
        const float *source = src + i * src_stride;
        float *target = dst + (rows ? rows[i] : i) * width;
        if (add)
            for (size_t c = 0; c < width; c++) target[c] = source[c] + add[c];
        else if (target != source)
            memmove(target, source, width * sizeof(float));
    }
}

static void uform_cpu_sum_rows(uform_backend_t *b, const float *src, size_t width,
                               const size_t *rows, size_t count, float *sums) {
    (void)b;
    for (size_t i = 0; i < count; i++) {
        const float *row = src + (rows ? rows[i] : i) * width;
        for (size_t c = 0; c < width; c++) sums[c] += row[c];
    }
}

static double uform_cpu_reconstruction_loss(uform_backend_t *b, const float *predictions,
                                            const float *targets, size_t rows, size_t width,
                                            float scale, float *d_predictions) {
    (void)b;
    double total = 0;
    const float factor = 2.0f * scale / (float)width;
    for (size_t r = 0; r < rows; r++) {
        double row = 0;
        for (size_t k = 0; k < width; k++) {
            float difference = predictions[r * width + k] - targets[r * width + k];
            row += (double)difference * (double)difference;
            d_predictions[r * width + k] = factor * difference;
        }
        total += row / (double)width;
    }
    return total;
}

static uform_status_t uform_cpu_contrastive_loss(uform_backend_t *b,
                                                 const uform_contrastive_config_t *config,
                                                 const uform_contrastive_batch_t *batch,
                                                 const float *log_inverse_temperature,
                                                 const float *bias, float *loss,
                                                 float *d_embeddings,
                                                 float *d_log_inverse_temperature, float *d_bias) {
    return uform_contrastive(b->executor, config, batch, log_inverse_temperature, bias, loss,
                             d_embeddings, d_log_inverse_temperature, d_bias);
}

static uform_status_t uform_cpu_late_interaction_loss(
    uform_backend_t *b, const uform_contrastive_config_t *relations_config,
    uform_pair_loss_form_t form, const uform_late_batch_t *batch, float log_inverse_temperature,
    float bias, float weight, float *loss, float *d_vectors, float *d_log_inverse_temperature,
    float *d_bias) {
    return uform_late_interaction_loss(b->executor, uform_path_of(b), relations_config, form, batch,
                                       log_inverse_temperature, bias, weight, loss, d_vectors,
                                       d_log_inverse_temperature, d_bias);
}

static void uform_cpu_choices_loss(uform_backend_t *b, const uform_choices_batch_t *batch,
                                   const float *bytes_table, const float *bytes_bias,
                                   const float *log_temperature, float scale, double *loss_sum,
                                   float *d_states, float *d_bytes_table, float *d_bytes_bias,
                                   float *d_log_temperature) {
    (void)b;
    uform_choices_loss(batch, bytes_table, bytes_bias, log_temperature, scale, loss_sum, d_states,
                       d_bytes_table, d_bytes_bias, d_log_temperature);
}

/* ---- optimizer ----------------------------------------------------------------------- */

static double uform_cpu_sum_squares(uform_backend_t *b, const float *values, size_t count) {
    (void)b;
    double squares = 0;
    for (size_t i = 0; i < count; i++) squares += (double)values[i] * values[i];
    return squares;
}

static void uform_cpu_adamw(uform_backend_t *b, float *parameters, const float *gradients,
                            float gradient_scale, float *first_moment, float *second_moment,
                            const uint8_t *decay, size_t count, uint64_t step, float learning_rate) {
    uform_adamw(b->executor, parameters, gradients, gradient_scale, first_moment, second_moment,
                decay, count, step, learning_rate);
}

static size_t uform_cpu_adamw_first_non_finite(uform_backend_t *b, const float *parameters,
                                               const float *gradients, float gradient_scale,
                                               const float *first_moment,
                                               const float *second_moment, const uint8_t *decay,
                                               size_t count, uint64_t step, float learning_rate) {
    /* the check pass only reads (adamw.c), whatever its prototype says */
    return uform_adamw_first_non_finite(b->executor, (float *)parameters, gradients,
                                        gradient_scale, (float *)first_moment,
                                        (float *)second_moment, decay, count, step,
                                        learning_rate);
}

/* Memory crossing to and from the host is a copy: device memory is host memory. */
const uform_backend_ops_t uform_cpu_backend_ops = {
    .name = "cpu",
    .host_memory = true,
    .forward_batch_bytes = UFORM_FORWARD_BATCH_BYTES,
    .alloc = uform_cpu_alloc,
    .free = uform_cpu_free,
    .upload = uform_cpu_copy,
    .download = uform_cpu_copy,
    .copy = uform_cpu_copy,
    .zero = uform_cpu_zero,
    .download_rows = uform_cpu_download_rows,
    .synchronize = uform_cpu_synchronize,
    .pack = uform_cpu_pack,
    .pack_e4m3 = uform_cpu_pack_e4m3,
    .unpack_e4m3 = uform_cpu_unpack_e4m3,
    .packed_free = uform_cpu_packed_free,
    .gemm = uform_cpu_gemm,
    .linear = uform_cpu_linear,
    .linear_gelu = uform_cpu_linear_gelu,
    .linear_backward = uform_cpu_linear_backward,
    .layer_norm_forward = uform_cpu_layer_norm_forward,
    .layer_norm_backward = uform_cpu_layer_norm_backward,
    .gelu_forward = uform_cpu_gelu_forward,
    .gelu_backward = uform_cpu_gelu_backward,
    .rope_tables = uform_cpu_rope_tables,
    .rope_forward = uform_cpu_rope_forward,
    .rope_backward = uform_cpu_rope_backward,
    .embedding_forward = uform_cpu_embedding_forward,
    .embedding_backward = uform_cpu_embedding_backward,
    .attention_scratch_bytes = uform_cpu_attention_scratch_bytes,
    .attention_forward = uform_cpu_attention_forward,
    .attention_backward = uform_cpu_attention_backward,
    .mean_pool_forward = uform_cpu_mean_pool_forward,
    .mean_pool_backward = uform_cpu_mean_pool_backward,
    .normalize_forward = uform_cpu_normalize_forward,
    .normalize_backward = uform_cpu_normalize_backward,
    .cross_entropy_forward = uform_cpu_cross_entropy_forward,
    .cross_entropy_backward = uform_cpu_cross_entropy_backward,
    .gather_rows = uform_cpu_gather_rows,
    .scatter_add_rows = uform_cpu_scatter_add_rows,
    .scatter_rows = uform_cpu_scatter_rows,
    .sum_rows = uform_cpu_sum_rows,
    .maxsim = uform_cpu_maxsim,
    .choice_probabilities = uform_cpu_choice_probabilities,
    .contrastive_loss = uform_cpu_contrastive_loss,
    .late_interaction_loss = uform_cpu_late_interaction_loss,
    .choices_loss = uform_cpu_choices_loss,
    .reconstruction_loss = uform_cpu_reconstruction_loss,
    .sum_squares = uform_cpu_sum_squares,
    .adamw = uform_cpu_adamw,
    .adamw_first_non_finite = uform_cpu_adamw_first_non_finite,
};

#if defined(__x86_64__)
#define UFORM_TARGET_NAME "x86-64"
#elif defined(__aarch64__)
#define UFORM_TARGET_NAME "aarch64"
#else
#define UFORM_TARGET_NAME "this architecture"
#endif

uform_status_t uform_cpu_class_resolve(uform_cpu_class_t requested, uform_cpu_class_t *resolved) {
    if ((unsigned)requested > UFORM_CPU_CLASS_AMX)
        return uform_fail(UFORM_INVALID_ARGUMENT, "cpu_class: %d is not a CPU class", (int)requested);
    uform_cpu_class_t cpu_class = requested == UFORM_CPU_CLASS_AUTO ? uform_cpu_class_best() : requested;
    const uform_cpu_kernels_t *kernels = uform_cpu_kernels_for(cpu_class);
    if (!kernels)
        return uform_fail(UFORM_UNSUPPORTED, "cpu_class: the %s class is not built for %s",
                          uform_cpu_class_name(cpu_class), UFORM_TARGET_NAME);
    if (!uform_cpu_class_supported(cpu_class))
        return uform_fail(UFORM_UNSUPPORTED, "cpu_class: this CPU cannot run the %s class",
                          uform_cpu_class_name(cpu_class));
    *resolved = cpu_class;
    return UFORM_OK;
}

uint32_t uform_cpu_classes_runnable(void) {
    uint32_t classes = 0; /* the two conditions of uform_cpu_class_resolve, without its errors */
    for (unsigned c = UFORM_CPU_CLASS_SERIAL; c <= UFORM_CPU_CLASS_AMX; c++)
        if (uform_cpu_kernels_for((uform_cpu_class_t)c) && uform_cpu_class_supported((uform_cpu_class_t)c))
            classes |= 1u << c;
    return classes;
}

uform_backend_t uform_cpu_backend(uform_cpu_class_t cpu_class, uform_executor_t *executor) {
    if (cpu_class == UFORM_CPU_CLASS_AUTO) cpu_class = uform_cpu_class_best();
    const uform_cpu_kernels_t *kernels = uform_cpu_kernels_for(cpu_class);
    if (!kernels) kernels = &uform_cpu_kernels_serial;
    return (uform_backend_t){&uform_cpu_backend_ops, executor, kernels, UFORM_OK};
}
