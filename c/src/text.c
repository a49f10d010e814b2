/* text.c: uform_text_encode, a byte per token.
 *
 * Texts are cut at `context` bytes and packed, in order, into forward batches
 * without padding (text_batches.c): the GEMMs see one flat matrix of every
 * token, attention stays within each text. An empty text has
 * no tokens: its embedding is the normalisation of a zero mean, all zeros, and
 * it has no token rows. */
#include "text_batches.h"

#include <stdlib.h>

static uform_status_t uform_check_encode_options(const uform_model_t *model,
                                                 const uform_encode_options_t *options,
                                                 uint32_t *outputs, uform_scalar_t *scalar) {
    *outputs = options ? options->outputs : 0;
    *scalar = options ? options->outputs_scalar : UFORM_SCALAR_F32;
    if (*outputs == 0) *outputs = UFORM_OUTPUTS_EMBEDDINGS;
    if (*outputs & ~(uint32_t)(UFORM_OUTPUTS_EMBEDDINGS | UFORM_OUTPUTS_TOKENS))
        return uform_fail(UFORM_INVALID_ARGUMENT, "outputs: unknown flags 0x%x", *outputs);
    if ((*outputs & UFORM_OUTPUTS_TOKENS) && model->token_width == 0)
        return uform_fail(UFORM_UNSUPPORTED,
                          "outputs: TOKENS asked, but the checkpoint has no token head (token_width 0)");
    switch (*scalar) {
    case UFORM_SCALAR_F32: case UFORM_SCALAR_BF16: case UFORM_SCALAR_F16:
    case UFORM_SCALAR_I8: case UFORM_SCALAR_B1:
        return UFORM_OK;
    case UFORM_SCALAR_E4M3: case UFORM_SCALAR_E5M2:
        return uform_fail(UFORM_UNSUPPORTED, "outputs_scalar: FP8 outputs are not built yet");
    default:
        return uform_fail(UFORM_INVALID_ARGUMENT, "outputs_scalar: %d is not a scalar", (int)*scalar);
    }
}

/* Per call: the forward batches, and the heads' scratch for the largest one. */
typedef struct {
    uform_text_batches_t batches;
    float *pooled;        /* [items, H] */
    float *projected;     /* [max(items, rows), max(D, W)] */
} uform_text_buffers_t;

static void uform_text_buffers_free(uform_text_buffers_t *b) {
    uform_text_batches_free(&b->batches);
    uform_free_aligned(b->pooled);
    uform_free_aligned(b->projected);
}

static uform_status_t uform_text_buffers_init(uform_text_buffers_t *b, const uform_model_t *model,
                                              uform_executor_t *executor, size_t total_tokens,
                                              size_t count) {
    memset(b, 0, sizeof(*b));
    UFORM_TRY(uform_text_batches_init(&b->batches, model, executor, total_tokens, count));
    size_t rows = b->batches.capacity;
    size_t items = b->batches.max_items;
    size_t width = model->dimensions > model->token_width ? model->dimensions : model->token_width;
    size_t projected_rows = rows > items ? rows : items;
    b->pooled = uform_alloc_aligned(items, model->hidden * sizeof(float), "pooled states");
    b->projected = uform_alloc_aligned(projected_rows, width * sizeof(float), "projections");
    if (!b->pooled || !b->projected) {
        uform_text_buffers_free(b);
        return UFORM_OUT_OF_MEMORY;
    }
    return UFORM_OK;
}

/* text_encode's rows: the bytes cut at context, no MASK. */
static uform_text_layout_t uform_encode_layout(const uform_model_t *model) {
    return (uform_text_layout_t){model->context, false};
}

/* Runs texts [first, last) (together at most the batch rows) and writes their outputs. */
static void uform_text_batch(const uform_model_t *model, uform_executor_t *executor,
                             const uform_tape_t *texts, size_t first, size_t last,
                             uint32_t outputs, const uform_encoded_t *encoded,
                             uform_text_buffers_t *b) {
    size_t hidden = model->hidden;
    uform_text_layout_t layout = uform_encode_layout(model);
    uform_text_batch_forward(model, executor, &layout, texts, first, last, &b->batches);
    const float *states = b->batches.states;
    const uform_segment_t *segments = b->batches.segments;
    size_t rows = last > first ? segments[last - first - 1].begin + segments[last - first - 1].length : 0;

    if (outputs & UFORM_OUTPUTS_EMBEDDINGS) {
        for (size_t s = 0; s < last - first; s++) {
            const uform_segment_t *segment = &segments[s];
            float *pooled = b->pooled + s * hidden;
            memset(pooled, 0, hidden * sizeof(float));
            for (size_t r = segment->begin; r < segment->begin + segment->length; r++)
                for (size_t h = 0; h < hidden; h++) pooled[h] += states[r * hidden + h];
            float inverse = segment->length ? 1.0f / (float)segment->length : 0.0f;
            for (size_t h = 0; h < hidden; h++) pooled[h] *= inverse;
        }
        uform_project_normalize(model, executor, &model->embedding_head, b->pooled, last - first,
                                b->projected);
        uform_convert_rows(b->projected, last - first, model->dimensions, encoded->scalar,
                           (uint8_t *)encoded->embeddings + first * encoded->embedding_row_bytes,
                           encoded->embedding_row_bytes);
    }
    if ((outputs & UFORM_OUTPUTS_TOKENS) && rows) {
        uform_project_normalize(model, executor, &model->token_head, states, rows, b->projected);
        uform_convert_rows(b->projected, rows, model->token_width, encoded->scalar,
                           (uint8_t *)encoded->tokens +
                               encoded->token_offsets[first] * encoded->token_row_bytes,
                           encoded->token_row_bytes);
    }
}

static uform_status_t uform_text_encode_into(uform_model_t *model, uform_executor_t *executor,
                                             const uform_tape_t *texts, uform_arena_t *arena,
                                             const uform_encode_options_t *options,
                                             uform_encoded_t *encoded,
                                             uform_text_encode_stats_t *stats) {
    if (!model) return uform_fail(UFORM_INVALID_ARGUMENT, "model: NULL");
    if (!arena) return uform_fail(UFORM_INVALID_ARGUMENT, "arena: NULL");
    if (!encoded) return uform_fail(UFORM_INVALID_ARGUMENT, "encoded: NULL");
    UFORM_TRY(uform_check_tape(texts, "texts"));
    uint32_t outputs;
    uform_scalar_t scalar;
    UFORM_TRY(uform_check_encode_options(model, options, &outputs, &scalar));
    if (!executor) executor = model->executor;

    uform_text_layout_t layout = uform_encode_layout(model);
    uform_text_encode_stats_t counts;
    uform_text_count(&layout, texts, &counts);
    size_t count = texts->count, total_tokens = counts.tokens;

    /* Outputs live in the arena: the previous call's outputs end here. */
    uform_arena_rewind(arena);
    memset(encoded, 0, sizeof(*encoded));
    encoded->count = count;
    encoded->scalar = scalar;
    if (outputs & UFORM_OUTPUTS_EMBEDDINGS) {
        encoded->dimensions = model->dimensions;
        encoded->embedding_row_bytes = uform_output_row_bytes(scalar, model->dimensions);
        encoded->embeddings = uform_arena_take(arena, count * encoded->embedding_row_bytes,
                                               "embeddings");
        if (!encoded->embeddings) return UFORM_OUT_OF_MEMORY;
    }
    if (outputs & UFORM_OUTPUTS_TOKENS) {
        encoded->token_width = model->token_width;
        encoded->token_row_bytes = uform_output_row_bytes(scalar, model->token_width);
        encoded->token_offsets = uform_arena_take(arena, (count + 1) * sizeof(size_t), "token offsets");
        encoded->tokens = uform_arena_take(arena, total_tokens * encoded->token_row_bytes, "tokens");
        if (!encoded->token_offsets || !encoded->tokens) return UFORM_OUT_OF_MEMORY;
        encoded->token_offsets[0] = 0;
        for (size_t i = 0; i < count; i++)
            encoded->token_offsets[i + 1] = encoded->token_offsets[i] + uform_text_rows(&layout, texts, i);
    }

    uform_text_buffers_t buffers;
    UFORM_TRY(uform_text_buffers_init(&buffers, model, executor, total_tokens, count));

    uform_progress_state_t progress;
    uform_progress_begin(&progress, options ? &options->progress : NULL, count);
    uform_status_t status = UFORM_OK;
    for (size_t first = 0; first < count && status == UFORM_OK;) {
        size_t last = uform_text_batch_end(&buffers.batches, &layout, texts, first);
        uform_text_batch(model, executor, texts, first, last, outputs, encoded, &buffers);
        first = last;
        status = uform_progress_update(&progress, first);
    }
    uform_text_buffers_free(&buffers);
    if (status != UFORM_OK) return status;
    if (stats) *stats = counts;
    return UFORM_OK;
}

uform_status_t uform_text_encode(uform_model_t *model, uform_executor_t *executor,
                                 const uform_tape_t *texts, uform_arena_t *arena,
                                 const uform_encode_options_t *options, uform_encoded_t *encoded,
                                 uform_text_encode_stats_t *stats) {
    if (!arena) return uform_fail(UFORM_INVALID_ARGUMENT, "arena: NULL");
    UFORM_TRY(uform_arena_acquire(arena));
    uform_status_t status = uform_text_encode_into(model, executor, texts, arena, options, encoded, stats);
    uform_arena_release(arena);
    return status;
}

/* ---- submission ------------------------------------------------------------ */

typedef struct {
    uform_model_t *model;
    uform_executor_t *executor;
    uform_tape_t texts;
    uform_arena_t *arena;
    uform_encode_options_t options;
    bool has_options;
    uform_encoded_t *encoded;
    uform_text_encode_stats_t *stats;
} uform_text_job_t;

static uform_status_t uform_text_job_run(void *context) {
    uform_text_job_t *job = context;
    return uform_text_encode(job->model, job->executor, &job->texts, job->arena,
                             job->has_options ? &job->options : NULL, job->encoded, job->stats);
}

uform_status_t uform_text_encode_submit(uform_model_t *model, uform_executor_t *executor,
                                        const uform_tape_t *texts, uform_arena_t *arena,
                                        const uform_encode_options_t *options,
                                        uform_encoded_t *encoded, uform_text_encode_stats_t *stats,
                                        uform_job_t **job) {
    if (!job) return uform_fail(UFORM_INVALID_ARGUMENT, "job: the out-pointer is NULL");
    *job = NULL;
    if (!model) return uform_fail(UFORM_INVALID_ARGUMENT, "model: NULL");
    if (!texts) return uform_fail(UFORM_INVALID_ARGUMENT, "texts: NULL");
    uform_text_job_t *context = uform_alloc_zeroed(1, sizeof(*context), "text job");
    if (!context) return UFORM_OUT_OF_MEMORY;
    *context = (uform_text_job_t){model, executor, *texts, arena, {0}, options != NULL, encoded, stats};
    if (options) context->options = *options;
    return uform_executor_submit(executor ? executor : model->executor, uform_text_job_run, context,
                                 free, job);
}
