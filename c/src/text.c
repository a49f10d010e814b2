/* text.c: uform_text_encode, a byte per token.
 *
 * Texts are cut at `context` bytes and packed, in order, into forward batches
 * of about `uform_batch_rows` tokens with no padding: the GEMMs see one flat
 * matrix of every token, attention stays within each text. An empty text has
 * no tokens: its embedding is the normalisation of a zero mean, all zeros, and
 * it has no token rows. */
#include "model.h"

#include <stdlib.h>

/* Rows per forward batch: enough for efficient GEMMs, bounded so scratch stays
 * near 64 MiB at any width; never below context, so every text fits. */
static size_t uform_batch_rows(const uform_model_t *model) {
    size_t per_row = 10 * model->hidden + 64;
    size_t rows = ((size_t)16 << 20) / per_row;
    if (rows < 256) rows = 256;
    return rows > model->context ? rows : model->context;
}

static uform_status_t uform_check_tape(const uform_tape_t *tape, const char *name) {
    if (!tape) return uform_fail(UFORM_INVALID_ARGUMENT, "%s: NULL", name);
    if (tape->count == 0) return uform_fail(UFORM_INVALID_ARGUMENT, "%s: the batch is empty", name);
    if (!tape->offsets) return uform_fail(UFORM_INVALID_ARGUMENT, "%s: offsets are NULL", name);
    for (size_t i = 0; i < tape->count; i++)
        if (tape->offsets[i + 1] < tape->offsets[i])
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "%s: offsets decrease at item %zu (%zu then %zu)", name, i,
                              tape->offsets[i], tape->offsets[i + 1]);
    if (tape->size && !tape->data)
        return uform_fail(UFORM_INVALID_ARGUMENT, "%s: data is NULL but size is %zu", name, tape->size);
    if (tape->offsets[tape->count] > tape->size)
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "%s: the last offset %zu is past the %zu bytes of data", name,
                          tape->offsets[tape->count], tape->size);
    return UFORM_OK;
}

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

/* Scratch for one forward batch, sized for the largest batch of the call. */
typedef struct {
    float *states;        /* [rows, H] */
    float *scratch;       /* forward's */
    float *pooled;        /* [items, H] */
    float *projected;     /* [max(items, rows), max(D, W)] */
    uform_segment_t *segments;
    uint32_t *positions;  /* [rows][3] */
} uform_text_buffers_t;

static void uform_text_buffers_free(uform_text_buffers_t *b) {
    uform_free_aligned(b->states);
    uform_free_aligned(b->scratch);
    uform_free_aligned(b->pooled);
    uform_free_aligned(b->projected);
    free(b->segments);
    free(b->positions);
}

static uform_status_t uform_text_buffers_init(uform_text_buffers_t *b, const uform_model_t *model,
                                              size_t rows, size_t items, size_t longest,
                                              size_t threads) {
    memset(b, 0, sizeof(*b));
    size_t hidden = model->hidden;
    size_t width = model->dimensions > model->token_width ? model->dimensions : model->token_width;
    size_t projected_rows = rows > items ? rows : items;
    b->states = uform_alloc_aligned(rows, hidden * sizeof(float), "text states");
    b->scratch = uform_alloc_aligned(uform_forward_scratch_floats(model, rows, items, longest, threads),
                                     sizeof(float), "text scratch");
    b->pooled = uform_alloc_aligned(items, hidden * sizeof(float), "pooled states");
    b->projected = uform_alloc_aligned(projected_rows, width * sizeof(float), "projections");
    b->segments = uform_alloc(items, sizeof(uform_segment_t), "segments");
    b->positions = uform_alloc(rows, 3 * sizeof(uint32_t), "positions");
    if (!b->states || !b->scratch || !b->pooled || !b->projected || !b->segments || !b->positions) {
        uform_text_buffers_free(b);
        return UFORM_OUT_OF_MEMORY;
    }
    return UFORM_OK;
}

static size_t uform_text_tokens(const uform_model_t *model, const uform_tape_t *texts, size_t i) {
    size_t length = texts->offsets[i + 1] - texts->offsets[i];
    return length < model->context ? length : model->context;
}

/* Runs texts [first, last) (together at most the batch rows) and writes their outputs. */
static void uform_text_batch(const uform_model_t *model, uform_executor_t *executor,
                             const uform_tape_t *texts, size_t first, size_t last,
                             uint32_t outputs, const uform_encoded_t *encoded,
                             uform_text_buffers_t *b) {
    size_t hidden = model->hidden, rows = 0;
    const uint8_t *data = texts->data;
    for (size_t i = first; i < last; i++) {
        size_t n = uform_text_tokens(model, texts, i);
        const uint8_t *bytes = data ? data + texts->offsets[i] : NULL;
        b->segments[i - first] = (uform_segment_t){rows, n, 1};
        for (size_t t = 0; t < n; t++, rows++) {
            const float *embedding = model->text_bytes + (size_t)bytes[t] * hidden;
            float *x = b->states + rows * hidden;
            for (size_t h = 0; h < hidden; h++) x[h] = embedding[h] + model->text_modality[h];
            b->positions[3 * rows] = (uint32_t)t;
            b->positions[3 * rows + 1] = 0;
            b->positions[3 * rows + 2] = 0;
        }
    }
    uform_batch_t batch = {rows, last - first, b->segments, b->positions};
    if (rows) uform_forward(model, executor, &batch, b->states, b->scratch);

    if (outputs & UFORM_OUTPUTS_EMBEDDINGS) {
        for (size_t s = 0; s < last - first; s++) {
            const uform_segment_t *segment = &b->segments[s];
            float *pooled = b->pooled + s * hidden;
            memset(pooled, 0, hidden * sizeof(float));
            for (size_t r = segment->begin; r < segment->begin + segment->length; r++)
                for (size_t h = 0; h < hidden; h++) pooled[h] += b->states[r * hidden + h];
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
        uform_project_normalize(model, executor, &model->token_head, b->states, rows, b->projected);
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

    size_t count = texts->count, total_tokens = 0, truncated = 0, empty = 0;
    for (size_t i = 0; i < count; i++) {
        size_t length = texts->offsets[i + 1] - texts->offsets[i];
        truncated += length > model->context;
        empty += length == 0;
        total_tokens += uform_text_tokens(model, texts, i);
    }

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
            encoded->token_offsets[i + 1] = encoded->token_offsets[i] + uform_text_tokens(model, texts, i);
    }

    size_t batch_rows = uform_batch_rows(model);
    size_t batch_items = batch_rows < count ? batch_rows : count;
    size_t longest = model->context < batch_rows ? model->context : batch_rows;
    uform_text_buffers_t buffers;
    UFORM_TRY(uform_text_buffers_init(&buffers, model, total_tokens < batch_rows ? total_tokens + 1 : batch_rows,
                                      batch_items, longest, uform_executor_width(executor)));

    uform_progress_state_t progress;
    uform_progress_begin(&progress, options ? &options->progress : NULL, count);
    uform_status_t status = UFORM_OK;
    for (size_t first = 0; first < count && status == UFORM_OK;) {
        /* Fill a batch in order up to the row and item budgets. */
        size_t last = first, rows = 0;
        while (last < count && last - first < batch_items &&
               rows + uform_text_tokens(model, texts, last) <= batch_rows)
            rows += uform_text_tokens(model, texts, last++);
        uform_text_batch(model, executor, texts, first, last, outputs, encoded, &buffers);
        first = last;
        status = uform_progress_update(&progress, first);
    }
    uform_text_buffers_free(&buffers);
    if (status != UFORM_OK) return status;
    if (stats) {
        stats->items = count;
        stats->tokens = total_tokens;
        stats->truncated = truncated;
        stats->empty = empty;
    }
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
