/* forward.c: the transformer blocks over a batch of packed items, on the CPU.
 *
 * The math is DESIGN section 5 (docs/architecture.md): pre-norm blocks,
 * rotary positions, attention confined to each item, tanh GELU, final norm.
 * GEMMs and attention go through the model's CPU class; layer norm, GELU and
 * rotary positions are the trainer's forward functions (backward.h), written
 * once in portable C whose loops the compiler vectorises. Every loop keeps
 * a fixed operation order per output element (no reassociation, no FMA
 * contraction under -std=c11), so a row's result never depends on the batch
 * around it or on the thread count. */
#include "model/backward.h"
#include "model/model.h"

#include <math.h>

/* ---- elementwise ---------------------------------------------------------- */

typedef struct {
    float *x;
    const float *y;
    size_t width;
} uform_rows_task_t;

UFORM_VECTOR_CLONES
static void uform_add_rows(void *context, size_t begin, size_t end, size_t thread) {
    (void)thread;
    const uform_rows_task_t *task = context;
    float *x = task->x + begin * task->width;
    const float *y = task->y + begin * task->width;
    size_t count = (end - begin) * task->width;
    for (size_t i = 0; i < count; i++) x[i] += y[i];
}

/* ---- rotary positions ----------------------------------------------------- */

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
    const uform_batch_t *batch;
    float *cosines, *sines; /* [rows][32] */
} uform_rope_table_task_t;

static void uform_rope_table_segments(void *context, size_t begin, size_t end, size_t thread) {
    (void)thread;
    const uform_rope_table_task_t *task = context;
    for (size_t s = begin; s < end; s++) {
        const uform_segment_t *segment = &task->batch->segments[s];
        uint8_t axis_of_pair[UFORM_PAIRS];
        double frequency[UFORM_PAIRS];
        uform_rope_plan(segment->axes, axis_of_pair, frequency);
        for (size_t r = segment->begin; r < segment->begin + segment->length; r++) {
            const uint32_t *position = task->batch->positions + r * 3;
            for (size_t j = 0; j < UFORM_PAIRS; j++) {
                double angle = (double)position[axis_of_pair[j]] * frequency[j];
                task->cosines[r * UFORM_PAIRS + j] = (float)cos(angle);
                task->sines[r * UFORM_PAIRS + j] = (float)sin(angle);
            }
        }
    }
}

void uform_rope_tables(uform_executor_t *executor, const uform_batch_t *batch, float *cosines,
                       float *sines) {
    uform_rope_table_task_t table = {batch, cosines, sines};
    uform_parallel_for(executor, batch->segments_count, 1, uform_rope_table_segments, &table);
}

/* ---- attention ------------------------------------------------------------ */

/* Queries per attention task: small enough to spread one long item over every
 * thread, large enough that re-transposing its keys per task costs little. */
#define UFORM_QUERIES_PER_TASK 64

typedef struct {
    const uform_model_t *model;
    const uform_batch_t *batch;
    const size_t *first_task;  /* [segments + 1]: tasks before each segment */
    const float *qkv;
    float *context;            /* [rows, H] */
    float *scratch;            /* [threads][uform_attention_scratch_floats(longest)] */
    size_t scratch_per_thread;
} uform_attention_task_t;

/* Task t is (segment, head, block of queries), segments in order. */
static void uform_attention_tasks(void *context, size_t begin, size_t end, size_t thread) {
    const uform_attention_task_t *task = context;
    size_t hidden = task->model->hidden, heads = task->model->heads, stride = 3 * hidden;
    float *scratch = task->scratch + thread * task->scratch_per_thread;
    size_t segment_index = 0;
    for (size_t t = begin; t < end; t++) {
        while (task->first_task[segment_index + 1] <= t) segment_index++;
        const uform_segment_t *segment = &task->batch->segments[segment_index];
        size_t local = t - task->first_task[segment_index];
        size_t head = local % heads, block = local / heads;
        size_t first = block * UFORM_QUERIES_PER_TASK;
        size_t last = first + UFORM_QUERIES_PER_TASK < segment->length
                          ? first + UFORM_QUERIES_PER_TASK : segment->length;
        const float *q = task->qkv + segment->begin * stride + head * UFORM_HEAD_WIDTH;
        task->model->kernels->attention(q, q + hidden, q + 2 * hidden, stride, segment->length,
                                        first, last,
                                        task->context + segment->begin * hidden + head * UFORM_HEAD_WIDTH,
                                        hidden, scratch);
    }
}

/* ---- the blocks ------------------------------------------------------------ */

size_t uform_forward_scratch_floats(const uform_model_t *model, size_t rows, size_t segments,
                                    size_t longest_segment, size_t threads) {
    size_t hidden = model->hidden;
    /* per row: xn [H] + qkv [3H] + context [H] + mlp [4H] + rope cos/sin [2 x 32];
     * then the attention task table (size_t, 2 floats each, kept even) and
     * every thread's attention scratch */
    return rows * (9 * hidden + 2 * UFORM_PAIRS) + 2 * (segments + 2) + 16 +
           threads * uform_attention_scratch_floats(longest_segment);
}

void uform_forward(const uform_model_t *model, uform_executor_t *executor,
                   const uform_batch_t *batch, float *x, float *scratch) {
    size_t rows = batch->rows, hidden = model->hidden, segments = batch->segments_count;
    size_t longest = 0;
    for (size_t s = 0; s < segments; s++)
        if (batch->segments[s].length > longest) longest = batch->segments[s].length;
    float *normed = scratch;
    float *qkv = normed + rows * hidden;
    float *attended = qkv + rows * 3 * hidden;
    float *mlp = attended + rows * hidden;
    float *cosines = mlp + rows * 4 * hidden;
    float *sines = cosines + rows * UFORM_PAIRS;
    size_t *first_task = (size_t *)(sines + rows * UFORM_PAIRS);
    float *attention_scratch = (float *)(first_task + segments + 2);
    /* keep each thread's attention slice 64-byte aligned: scratch is, and the
     * per-row part is a multiple of 16 floats when H is a multiple of 64 */
    attention_scratch += (16 - ((size_t)(attention_scratch - scratch) % 16)) % 16;
    const uform_cpu_kernels_t *kernels = model->kernels;

    first_task[0] = 0;
    for (size_t s = 0; s < segments; s++) {
        size_t blocks = (batch->segments[s].length + UFORM_QUERIES_PER_TASK - 1) / UFORM_QUERIES_PER_TASK;
        first_task[s + 1] = first_task[s] + blocks * model->heads;
    }

    uform_rope_tables(executor, batch, cosines, sines);

    for (size_t l = 0; l < model->depth; l++) {
        const uform_block_t *block = &model->blocks[l];
        /* x += out(attention(rope(qkv(norm(x))))) */
        uform_layer_norm_forward(executor, x, rows, hidden, block->attention_norm_weight,
                                 block->attention_norm_bias, normed, NULL, NULL);
        kernels->gemm(executor, &block->qkv, normed, hidden, rows, block->qkv_bias, qkv,
                      3 * hidden);
        uform_rope_forward(executor, qkv, rows, hidden, cosines, sines);
        uform_attention_task_t attention = {model, batch, first_task, qkv, attended,
                                            attention_scratch,
                                            uform_attention_scratch_floats(longest)};
        uform_parallel_for(executor, first_task[segments], 1, uform_attention_tasks, &attention);
        kernels->gemm(executor, &block->out, attended, hidden, rows, block->out_bias, normed,
                      hidden);
        uform_rows_task_t residual = {x, normed, hidden};
        uform_parallel_for(executor, rows, 64, uform_add_rows, &residual);

        /* x += down(gelu(up(norm(x)))) */
        uform_layer_norm_forward(executor, x, rows, hidden, block->mlp_norm_weight,
                                 block->mlp_norm_bias, normed, NULL, NULL);
        kernels->gemm(executor, &block->up, normed, hidden, rows, block->up_bias, mlp,
                      4 * hidden);
        uform_gelu_forward(executor, mlp, rows * 4 * hidden, mlp);
        kernels->gemm(executor, &block->down, mlp, 4 * hidden, rows, block->down_bias, attended,
                      hidden);
        uform_rows_task_t residual_mlp = {x, attended, hidden};
        uform_parallel_for(executor, rows, 64, uform_add_rows, &residual_mlp);
    }
    uform_layer_norm_forward(executor, x, rows, hidden, model->norm_weight, model->norm_bias, x,
                             NULL, NULL);
}

/* ---- heads ----------------------------------------------------------------- */

typedef struct {
    float *y;
    size_t width;
} uform_normalize_task_t;

UFORM_VECTOR_CLONES
static void uform_normalize_rows(void *context, size_t begin, size_t end, size_t thread) {
    (void)thread;
    const uform_normalize_task_t *task = context;
    for (size_t r = begin; r < end; r++) {
        float *y = task->y + r * task->width;
        float partial[UFORM_LANES] = {0};
        for (size_t i = 0; i < task->width; i += UFORM_LANES)
            for (size_t l = 0; l < UFORM_LANES && i + l < task->width; l++)
                partial[l] += y[i + l] * y[i + l];
        float squares = 0;
        for (size_t l = 0; l < UFORM_LANES; l++) squares += partial[l];
        float norm = sqrtf(squares);
        float inverse = 1.0f / (norm > 1e-12f ? norm : 1e-12f);
        for (size_t i = 0; i < task->width; i++) y[i] *= inverse;
    }
}

void uform_project_normalize(const uform_model_t *model, uform_executor_t *executor,
                             const uform_packed_t *head, const float *x, size_t rows, float *y) {
    model->kernels->gemm(executor, head, x, model->hidden, rows, NULL, y, head->n);
    uform_normalize_task_t task = {y, head->n};
    uform_parallel_for(executor, rows, 64, uform_normalize_rows, &task);
}

/* ---- output scalars ---------------------------------------------------------- */

size_t uform_output_row_bytes(uform_scalar_t scalar, size_t width) {
    switch (scalar) {
    case UFORM_SCALAR_F32: return width * 4;
    case UFORM_SCALAR_BF16:
    case UFORM_SCALAR_F16: return width * 2;
    case UFORM_SCALAR_I8: return width;
    case UFORM_SCALAR_B1: return (width + 7) / 8;
    default: return 0;
    }
}

void uform_convert_rows(const float *rows_f32, size_t rows, size_t width, uform_scalar_t scalar,
                        void *out, size_t row_bytes) {
    for (size_t r = 0; r < rows; r++) {
        const float *x = rows_f32 + r * width;
        uint8_t *row = (uint8_t *)out + r * row_bytes;
        switch (scalar) {
        case UFORM_SCALAR_F32: memcpy(row, x, width * 4); break;
        case UFORM_SCALAR_BF16:
            for (size_t i = 0; i < width; i++) {
                uint16_t bits = uform_f32_to_bf16(x[i]);
                memcpy(row + 2 * i, &bits, 2);
            }
            break;
        case UFORM_SCALAR_F16:
            for (size_t i = 0; i < width; i++) {
                uint16_t bits = uform_f32_to_f16(x[i]);
                memcpy(row + 2 * i, &bits, 2);
            }
            break;
        case UFORM_SCALAR_I8:
            /* Unit vectors: every component is in [-1, 1]; a fixed scale of 127. */
            for (size_t i = 0; i < width; i++) {
                float scaled = nearbyintf(x[i] * 127.0f);
                if (scaled != scaled) scaled = 0.0f; /* NaN: a cast of it would be undefined */
                if (scaled > 127.0f) scaled = 127.0f;
                if (scaled < -127.0f) scaled = -127.0f;
                row[i] = (uint8_t)(int8_t)scaled;
            }
            break;
        case UFORM_SCALAR_B1:
            /* Sign bits, most significant bit first: numpy.packbits order. */
            memset(row, 0, row_bytes);
            for (size_t i = 0; i < width; i++)
                if (x[i] > 0) row[i / 8] |= (uint8_t)(0x80u >> (i % 8));
            break;
        default: break;
        }
    }
}
