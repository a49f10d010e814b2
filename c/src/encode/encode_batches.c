/* encode_batches.c: the encoder every encode verb shares (encode_batches.h).
 *
 * Items are packed, in order, into forward batches of about
 * uform_batch_rows tokens with no padding: the GEMMs see one flat matrix of
 * every token, attention stays within each item. An item without tokens
 * embeds as the normalisation of a zero mean, all zeros, and has no token
 * rows. */
#include "encode/encode_batches.h"

#include <stdlib.h>

uform_status_t uform_check_tape(const uform_tape_t *tape, const char *name) {
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

uform_status_t uform_check_encode_options(const uform_model_t *model,
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
    case UFORM_SCALAR_E4M3: case UFORM_SCALAR_E5M2:
    case UFORM_SCALAR_I8: case UFORM_SCALAR_B1:
        return UFORM_OK;
    default:
        return uform_fail(UFORM_INVALID_ARGUMENT, "outputs_scalar: %d is not a scalar", (int)*scalar);
    }
}

size_t uform_batch_rows(const uform_model_t *model) {
    size_t per_row = 10 * model->hidden + 64;
    size_t rows = ((size_t)16 << 20) / per_row;
    return rows < 256 ? 256 : rows;
}

void uform_encoder_free(uform_encoder_t *e) {
    if (!e->backend.ops) return;   /* begin failed before it chose a backend */
    uform_backend_t *b = &e->backend;
    uform_backend_free(b, e->states);
    uform_backend_free(b, e->scratch);
    uform_batch_indices_free(&e->indices, b);
    uform_backend_free(b, e->inputs);
    uform_backend_free(b, e->pooled);
    uform_backend_free(b, e->projected);
    free(e->staged);
    e->states = e->pooled = e->projected = e->inputs = NULL;
    e->scratch = NULL;
    e->staged = NULL;
    if (b->ops->release) b->ops->release(b);
    e->backend.ops = NULL;
}

static uform_status_t uform_encoder_outputs(uform_encoder_t *e, uform_scalar_t scalar,
                                            size_t rows_bound) {
    const uform_model_t *model = e->model;
    uform_encoded_t *encoded = e->encoded;
    memset(encoded, 0, sizeof(*encoded));
    encoded->count = e->count;
    encoded->scalar = scalar;
    if (e->outputs & UFORM_OUTPUTS_EMBEDDINGS) {
        encoded->dimensions = model->dimensions;
        encoded->embedding_row_bytes = uform_output_row_bytes(scalar, model->dimensions);
        size_t bytes;
        if (!uform_mul_ok(e->count, encoded->embedding_row_bytes, &bytes))
            return uform_fail(UFORM_OUT_OF_MEMORY, "embeddings: %zu rows overflow", e->count);
        encoded->embeddings = uform_arena_take(e->arena, bytes, "embeddings");
        if (!encoded->embeddings) return UFORM_OUT_OF_MEMORY;
    }
    if (e->outputs & UFORM_OUTPUTS_TOKENS) {
        encoded->token_width = model->token_width;
        encoded->token_row_bytes = uform_output_row_bytes(scalar, model->token_width);
        encoded->token_offsets = uform_arena_take(e->arena, (e->count + 1) * sizeof(size_t),
                                                  "token offsets");
        if (!encoded->token_offsets) return UFORM_OUT_OF_MEMORY;
        encoded->token_offsets[0] = 0;
        if (e->tokens_known) {
            size_t bytes;
            if (!uform_mul_ok(rows_bound, encoded->token_row_bytes, &bytes))
                return uform_fail(UFORM_OUT_OF_MEMORY, "tokens: %zu rows overflow", rows_bound);
            encoded->tokens = uform_arena_take(e->arena, bytes, "tokens");
            if (!encoded->tokens) return UFORM_OUT_OF_MEMORY;
        }
    }
    return UFORM_OK;
}

/* (Re)allocates the per-row buffers for batches of `capacity` rows; the open
 * batch must be empty. Every thread's attention scratch is sized for the
 * longest item a batch can hold: capacity rows, at most the context. */
static uform_status_t uform_encoder_rows(uform_encoder_t *e, size_t capacity) {
    const uform_model_t *model = e->model;
    uform_backend_t *b = &e->backend;
    size_t hidden = model->hidden;
    size_t width = model->dimensions > model->token_width ? model->dimensions : model->token_width;
    size_t projected_rows = capacity > e->max_items ? capacity : e->max_items;
    size_t longest = capacity < model->context ? capacity : model->context;
    uform_backend_free(b, e->states);
    uform_backend_free(b, e->scratch);
    uform_backend_free(b, e->projected);
    e->states = e->projected = NULL;
    e->scratch = NULL;
    e->states = uform_backend_alloc(b, capacity, hidden * sizeof(float), "states");
    if (e->states)
        e->scratch = uform_backend_alloc(
            b, 1, uform_forward_scratch_bytes(model, e->executor, capacity, e->max_items, longest),
            "forward scratch");
    if (e->scratch)
        e->projected = uform_backend_alloc(b, projected_rows, width * sizeof(float), "projections");
    e->max_rows = capacity;
    if (!e->states || !e->scratch || !e->projected) return UFORM_OUT_OF_MEMORY;
    return uform_batch_indices_reserve(&e->indices, b, capacity, 0);
}

uform_status_t uform_encoder_begin(uform_encoder_t *e, const uform_model_t *model,
                                   uform_executor_t *executor, const uform_encode_options_t *options,
                                   uint32_t outputs, uform_scalar_t scalar, uform_arena_t *arena,
                                   uform_encoded_t *encoded, size_t count, size_t rows_bound,
                                   bool rows_exact) {
    memset(e, 0, sizeof(*e));
    e->model = model;
    e->executor = executor;
    e->outputs = outputs;
    e->encoded = encoded;
    e->arena = arena;
    e->count = count;
    e->tokens_known = rows_exact;

    uform_arena_rewind(arena);
    UFORM_TRY(uform_encoder_outputs(e, scalar, rows_bound));
    uform_backend_t backend = uform_model_backend(model, executor);
    UFORM_TRY(uform_model_needs(model, backend.ops->download_rows != NULL, "encode", "download_rows"));
    e->backend = backend;
    uform_backend_t *b = &e->backend;
    if (b->ops->acquire) b->ops->acquire(b);   /* released by uform_encoder_free */

    size_t hidden = model->hidden;
    size_t budget = uform_batch_rows(model);
    /* A call smaller than one batch gets buffers of its own size (+1: never 0
     * bytes); an item longer than the batch grows them (uform_encoder_add). */
    size_t capacity = rows_bound < budget ? rows_bound + 1 : budget;
    size_t items = budget < count ? budget : count;
    e->max_items = items;
    uform_status_t status = uform_batch_indices_reserve(&e->indices, b, 1, items);
    if (status == UFORM_OK) {
        e->pooled = uform_backend_alloc(b, items, hidden * sizeof(float), "pooled states");
        status = e->pooled ? uform_encoder_rows(e, capacity) : UFORM_OUT_OF_MEMORY;
    }
    if (status != UFORM_OK) {
        uform_encoder_free(e);
        return status;
    }
    uform_progress_begin(&e->progress, options ? &options->progress : NULL, count);
    return UFORM_OK;
}

/* Where the token rows of item `first` onwards go: the arena, or the staging
 * buffer grown to hold them. */
static uint8_t *uform_token_destination(uform_encoder_t *e, size_t first, size_t rows) {
    uform_encoded_t *encoded = e->encoded;
    size_t begin = encoded->token_offsets[first] * encoded->token_row_bytes;
    if (e->tokens_known) return (uint8_t *)encoded->tokens + begin;
    size_t needed = begin + rows * encoded->token_row_bytes;
    if (needed > e->staged_bytes) {
        size_t grown = e->staged_bytes * 2 > needed ? e->staged_bytes * 2 : needed;
        uint8_t *staged = realloc(e->staged, grown);
        if (!staged) {
            uform_fail(UFORM_OUT_OF_MEMORY, "tokens: cannot stage %zu bytes", grown);
            return NULL;
        }
        e->staged = staged;
        e->staged_bytes = grown;
    }
    return e->staged + begin;
}

/* Runs the open batch: the blocks, then the heads of its items. */
static uform_status_t uform_encoder_run(uform_encoder_t *e) {
    const uform_model_t *model = e->model;
    uform_encoded_t *encoded = e->encoded;
    uform_backend_t *b = &e->backend;
    size_t hidden = model->hidden, first = e->finished, items = e->added - e->finished;
    if (items == 0) return UFORM_OK;
    uform_batch_indices_upload(&e->indices, b, e->rows, items);
    uform_batch_t batch = {e->rows, items, e->indices.device_segments, e->indices.device_positions};
    if (e->rows && model->text_bytes)
        b->ops->embedding_forward(b, model->text_bytes, model->text_modality, e->indices.device_ids,
                                  e->rows, hidden, e->states);
    if (e->rows) uform_forward(model, b, &batch, e->longest, e->states, e->scratch);

    if (e->outputs & UFORM_OUTPUTS_EMBEDDINGS) {
        b->ops->mean_pool_forward(b, e->states, hidden, e->indices.device_segments, items, e->pooled);
        uform_project_normalize(model, b, &model->embedding_head, e->pooled, items, e->projected);
        b->ops->download_rows(b, e->projected, items, model->dimensions, encoded->scalar,
                              (uint8_t *)encoded->embeddings + first * encoded->embedding_row_bytes,
                              encoded->embedding_row_bytes);
    }
    if ((e->outputs & UFORM_OUTPUTS_TOKENS) && e->rows) {
        uint8_t *destination = uform_token_destination(e, first, e->rows);
        if (!destination) return UFORM_OUT_OF_MEMORY;
        uform_project_normalize(model, b, &model->token_head, e->states, e->rows, e->projected);
        b->ops->download_rows(b, e->projected, e->rows, model->token_width, encoded->scalar,
                              destination, encoded->token_row_bytes);
    }
    UFORM_TRY(b->ops->synchronize(b));
    e->finished = e->added;
    e->rows = 0;
    e->longest = 0;
    return uform_progress_update(&e->progress, e->finished);
}

uform_status_t uform_encoder_add(uform_encoder_t *e, size_t rows, size_t axes, float **x,
                                 uint32_t **ids, uint32_t **positions) {
    /* never met by the verbs (each item is at most context rows) */
    if (rows > e->model->context || e->added == e->count)
        return uform_fail(UFORM_INVALID_ARGUMENT, "encoder: item %zu of %zu rows does not fit", e->added,
                          rows);
    if (e->rows + rows > e->max_rows || e->added - e->finished == e->max_items)
        UFORM_TRY(uform_encoder_run(e));
    /* An item longer than any batch so far: a batch of its own, buffers grown. */
    if (rows > e->max_rows) UFORM_TRY(uform_encoder_rows(e, rows));
    size_t slot = e->added - e->finished;
    e->indices.segments[slot] = (uform_segment_t){e->rows, rows, axes};
    if (rows > e->longest) e->longest = rows;
    if (e->outputs & UFORM_OUTPUTS_TOKENS)
        e->encoded->token_offsets[e->added + 1] = e->encoded->token_offsets[e->added] + rows;
    *x = e->states + e->rows * e->model->hidden;
    *ids = e->indices.ids + e->rows;
    for (size_t r = 0; r < rows; r++) (*ids)[r] = UFORM_NOT_TEXT;
    *positions = e->indices.positions + 3 * e->rows;
    memset(*positions, 0, rows * 3 * sizeof(uint32_t));
    e->rows += rows;
    e->added++;
    return UFORM_OK;
}

uform_status_t uform_encoder_embed(uform_encoder_t *e, const uform_media_part_t *part,
                                   const float *inputs, size_t rows, float *x) {
    if (rows == 0) return UFORM_OK;
    uform_backend_t *b = &e->backend;
    size_t hidden = e->model->hidden;
    const float *device_inputs = inputs;
    if (!b->ops->host_memory) {
        size_t bytes = rows * part->width * sizeof(float);
        if (bytes > e->inputs_bytes) {
            uform_backend_free(b, e->inputs);
            e->inputs_bytes = 0;
            e->inputs = uform_backend_alloc(b, 1, bytes, "media inputs");
            if (!e->inputs) return UFORM_OUT_OF_MEMORY;
            e->inputs_bytes = bytes;
        }
        b->ops->upload(b, e->inputs, inputs, bytes);
        device_inputs = e->inputs;
    }
    uform_weight_t projection = {&part->projection, NULL, part->projection.n, part->projection.k};
    b->ops->linear(b, &projection, device_inputs, part->width, rows, part->bias, false, x, hidden);
    b->ops->scatter_rows(b, x, hidden, part->modality, hidden, NULL, rows, x);
    return UFORM_OK;
}

uform_status_t uform_encoder_finish(uform_encoder_t *e) {
    UFORM_TRY(uform_encoder_run(e));
    uform_encoded_t *encoded = e->encoded;
    if ((e->outputs & UFORM_OUTPUTS_TOKENS) && !e->tokens_known) {
        size_t bytes = encoded->token_offsets[e->count] * encoded->token_row_bytes;
        encoded->tokens = uform_arena_take(e->arena, bytes, "tokens");
        if (!encoded->tokens) return UFORM_OUT_OF_MEMORY;
        if (bytes) memcpy(encoded->tokens, e->staged, bytes);
    }
    return UFORM_OK;
}
