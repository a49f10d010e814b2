/* encode_batches.c: the encoder every encode verb shares (encode_batches.h).
 *
 * Items are packed, in order, into forward batches of about
 * uform_batch_rows tokens with no padding: the GEMMs see one flat matrix of
 * every token, attention stays within each item. An item without tokens
 * embeds as the normalisation of a zero mean, all zeros, and has no token
 * rows.
 *
 * A model on several GPUs has a lane per GPU (encode_batches.h): batch k
 * runs on lane k mod n, on a thread of that lane's while the calling thread
 * packs the next batches; the caller waits for a lane before packing into it
 * again, so batches finish, and progress is reported, in order. Outputs are
 * the same whichever lane ran an item (every copy holds the same weights and
 * runs the same kernels). A lane thread holds its backend (acquire: the CUDA
 * backend's current device and lock) for its batch; the calling thread holds
 * it only to allocate while the lane is idle. */
#include "encode/encode_batches.h"

#include <stdio.h>
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

/* A forward's token rows: per_row is about a row's activations in floats,
 * the budget the backend's (backend.h, forward_batch_bytes): 16 MiB on a CPU,
 * 1 GiB on a GPU; UFORM_FORWARD_BATCH_BYTES for a backend that names none. */
size_t uform_batch_rows(const uform_model_t *model) {
    size_t per_row = 10 * model->hidden + 64;
    size_t budget = model->device.ops && model->device.ops->forward_batch_bytes
                        ? model->device.ops->forward_batch_bytes : UFORM_FORWARD_BATCH_BYTES;
    size_t rows = budget / (per_row * sizeof(float));
    return rows < 256 ? 256 : rows;
}

/* ---- lanes --------------------------------------------------------------------- */

/* A threaded lane's backend is held by whichever thread uses it, for that
 * use; a single lane's by the calling thread for the whole call
 * (uform_encoder_begin to uform_encoder_free). */
static void uform_lane_hold(const uform_encoder_t *e, uform_encoder_lane_t *lane) {
    if (e->threaded && lane->backend.ops->acquire) lane->backend.ops->acquire(&lane->backend);
}

static void uform_lane_unhold(const uform_encoder_t *e, uform_encoder_lane_t *lane) {
    if (e->threaded && lane->backend.ops->release) lane->backend.ops->release(&lane->backend);
}

/* The lane's device buffers (the lane is freed right after). */
static void uform_lane_free_buffers(uform_encoder_lane_t *lane) {
    uform_backend_t *b = &lane->backend;
    uform_backend_free(b, lane->states);
    uform_backend_free(b, lane->scratch);
    uform_batch_indices_free(&lane->indices, b);
    uform_backend_free(b, lane->inputs);
    uform_backend_free(b, lane->pooled);
    uform_backend_free(b, lane->projected);
}

/* (Re)allocates a lane's per-row buffers for batches of `capacity` rows; its
 * batch must be empty and its backend held. Every thread's attention scratch
 * is sized for the longest item a batch can hold: capacity rows, at most the
 * context. */
static uform_status_t uform_lane_rows(uform_encoder_t *e, uform_encoder_lane_t *lane, size_t capacity) {
    const uform_model_t *model = lane->model;
    uform_backend_t *b = &lane->backend;
    size_t hidden = model->hidden;
    size_t width = model->dimensions > model->token_width ? model->dimensions : model->token_width;
    size_t projected_rows = capacity > e->max_items ? capacity : e->max_items;
    size_t longest = capacity < model->context ? capacity : model->context;
    uform_backend_free(b, lane->states);
    uform_backend_free(b, lane->scratch);
    uform_backend_free(b, lane->projected);
    lane->states = lane->projected = NULL;
    lane->scratch = NULL;
    lane->states = uform_backend_alloc(b, capacity, hidden * sizeof(float), "states");
    if (lane->states)
        lane->scratch = uform_backend_alloc(
            b, 1, uform_forward_scratch_bytes(model, e->executor, capacity, e->max_items, longest),
            "forward scratch");
    if (lane->scratch)
        lane->projected = uform_backend_alloc(b, projected_rows, width * sizeof(float), "projections");
    lane->max_rows = capacity;
    if (!lane->states || !lane->scratch || !lane->projected) return UFORM_OUT_OF_MEMORY;
    return uform_batch_indices_reserve(&lane->indices, b, capacity, 0);
}

/* A lane's buffers for the call: segments and pooled states for max_items
 * items, the rest for `capacity` rows. */
static uform_status_t uform_lane_begin(uform_encoder_t *e, uform_encoder_lane_t *lane, size_t capacity) {
    uform_backend_t *b = &lane->backend;
    uform_lane_hold(e, lane);
    uform_status_t status = uform_batch_indices_reserve(&lane->indices, b, 1, e->max_items);
    if (status == UFORM_OK) {
        lane->pooled = uform_backend_alloc(b, e->max_items, lane->model->hidden * sizeof(float), "pooled states");
        status = lane->pooled ? uform_lane_rows(e, lane, capacity) : UFORM_OUT_OF_MEMORY;
    }
    uform_lane_unhold(e, lane);
    return status;
}

/* The lane copy's own part for a part of the call's model. */
static const uform_media_part_t *uform_lane_part(const uform_encoder_t *e, const uform_encoder_lane_t *lane,
                                                 const uform_media_part_t *part) {
    const uform_model_t *model = e->model, *copy = lane->model;
    if (part == &model->image) return &copy->image;
    if (part == &model->video) return &copy->video;
    return &copy->audio;
}

/* x [rows, H] = inputs [rows, part->width] (host memory) projected, plus the
 * modality, on the lane's backend (held). */
static uform_status_t uform_lane_embed(uform_encoder_lane_t *lane, const uform_media_part_t *part,
                                       const float *inputs, size_t rows, float *x) {
    uform_backend_t *b = &lane->backend;
    size_t hidden = lane->model->hidden;
    const float *device_inputs = inputs;
    if (!b->ops->host_memory) {
        size_t bytes = rows * part->width * sizeof(float);
        if (bytes > lane->inputs_bytes) {
            uform_backend_free(b, lane->inputs);
            lane->inputs_bytes = 0;
            lane->inputs = uform_backend_alloc(b, 1, bytes, "media inputs");
            if (!lane->inputs) return UFORM_OUT_OF_MEMORY;
            lane->inputs_bytes = bytes;
        }
        b->ops->upload(b, lane->inputs, inputs, bytes);
        device_inputs = lane->inputs;
    }
    uform_weight_t projection = {&part->projection, NULL, part->projection.n, part->projection.k};
    b->ops->linear(b, &projection, device_inputs, part->width, rows, part->bias, false, x, hidden);
    b->ops->scatter_rows(b, x, hidden, part->modality, hidden, NULL, rows, x);
    return UFORM_OK;
}

/* Runs a lane's batch (its backend held): a threaded lane's staged media
 * rows first, the text lookup, the blocks, then the heads of its items,
 * their outputs written into the arena. */
static uform_status_t uform_lane_run(uform_encoder_t *e, uform_encoder_lane_t *lane) {
    const uform_model_t *model = lane->model;
    uform_encoded_t *encoded = e->encoded;
    uform_backend_t *b = &lane->backend;
    size_t hidden = model->hidden, items = lane->items;
    uform_batch_indices_upload(&lane->indices, b, lane->rows, items);
    if (lane->staged_rows)
        UFORM_TRY(uform_lane_embed(lane, lane->part, lane->staged_inputs, lane->staged_rows, lane->states));
    uform_batch_t batch = {lane->rows, items, lane->indices.device_segments, lane->indices.device_positions,
                           lane->longest};
    if (lane->rows && model->text_bytes)
        b->ops->embedding_forward(b, model->text_bytes, model->text_modality, lane->indices.device_ids,
                                  lane->rows, hidden, lane->states);
    if (lane->rows) uform_forward(model, b, &batch, lane->longest, lane->states, lane->scratch);

    /* into a device arena the rows are converted on the GPU where they are;
     * token rows staged on the host (their count unknown until the end) come
     * down as into a host arena */
    bool device_rows = uform_arena_on_device(e->arena, NULL);
    if (e->outputs & UFORM_OUTPUTS_EMBEDDINGS) {
        b->ops->mean_pool_forward(b, lane->states, hidden, lane->indices.device_segments, items, lane->pooled);
        uform_project_normalize(model, b, &model->embedding_head, lane->pooled, items, lane->projected);
        (device_rows ? b->ops->convert_rows : b->ops->download_rows)(
            b, lane->projected, items, model->dimensions, encoded->scalar,
            (uint8_t *)encoded->embeddings + lane->first * encoded->embedding_row_bytes, encoded->embedding_row_bytes);
    }
    if ((e->outputs & UFORM_OUTPUTS_TOKENS) && lane->rows) {
        uform_project_normalize(model, b, &model->token_head, lane->states, lane->rows, lane->projected);
        (device_rows && e->tokens_known ? b->ops->convert_rows : b->ops->download_rows)(
            b, lane->projected, lane->rows, model->token_width, encoded->scalar, lane->tokens_destination,
            encoded->token_row_bytes);
    }
    return b->ops->synchronize(b);
}

/* A lane's batch done: its items finished, the lane empty again. */
static uform_status_t uform_lane_finished(uform_encoder_t *e, uform_encoder_lane_t *lane) {
    e->finished = lane->first + lane->items;
    lane->items = lane->rows = lane->longest = lane->staged_rows = 0;
    lane->part = NULL;
    return uform_progress_update(&e->progress, e->finished);
}

/* What a lane's thread runs: its batch, the backend held meanwhile; the
 * error text (the thread's own) carried back for the caller to raise. */
static void *uform_lane_thread(void *argument) {
    uform_encoder_lane_t *lane = argument;
    uform_lane_hold(lane->encoder, lane);
    lane->status = uform_lane_run(lane->encoder, lane);
    uform_lane_unhold(lane->encoder, lane);
    if (lane->status != UFORM_OK) snprintf(lane->message, sizeof(lane->message), "%s", uform_last_error());
    return NULL;
}

/* Waits for the batch a lane's thread runs (none: OK), raising its failure. */
static uform_status_t uform_lane_wait(uform_encoder_t *e, uform_encoder_lane_t *lane) {
    if (!lane->running) return UFORM_OK;
    pthread_join(lane->thread, NULL);
    lane->running = false;
    if (lane->status != UFORM_OK) {
        uform_set_error_text(lane->message);
        return lane->status;
    }
    return uform_lane_finished(e, lane);
}

/* Waits for every running lane, oldest first (the one after the open lane),
 * the first failure answered; after one, the rest are only joined. */
static uform_status_t uform_lanes_wait(uform_encoder_t *e) {
    uform_status_t status = UFORM_OK;
    for (size_t k = 1; k <= e->lane_count; k++) {
        uform_encoder_lane_t *lane = &e->lanes[(e->open + k) % e->lane_count];
        if (status == UFORM_OK) {
            status = uform_lane_wait(e, lane);
        } else if (lane->running) {
            pthread_join(lane->thread, NULL);
            lane->running = false;
        }
    }
    return status;
}

/* Where a lane's token rows go: the arena, or the staging buffer grown to
 * hold them (after every running lane is waited for: they write into it). */
static uform_status_t uform_lane_tokens_destination(uform_encoder_t *e, uform_encoder_lane_t *lane) {
    uform_encoded_t *encoded = e->encoded;
    size_t begin = encoded->token_offsets[lane->first] * encoded->token_row_bytes;
    if (e->tokens_known) {
        lane->tokens_destination = (uint8_t *)encoded->tokens + begin;
        return UFORM_OK;
    }
    size_t needed = begin + lane->rows * encoded->token_row_bytes;
    if (needed > e->staged_bytes) {
        UFORM_TRY(uform_lanes_wait(e));
        size_t grown = e->staged_bytes * 2 > needed ? e->staged_bytes * 2 : needed;
        uint8_t *staged = realloc(e->staged, grown);
        if (!staged) return uform_fail(UFORM_OUT_OF_MEMORY, "tokens: cannot stage %zu bytes", grown);
        e->staged = staged;
        e->staged_bytes = grown;
    }
    lane->tokens_destination = e->staged + begin;
    return UFORM_OK;
}

/* Runs the open lane's batch: here for a single lane, else on the lane's
 * thread (here too when no thread starts, after the running ones finish,
 * so batches still finish in order). */
static uform_status_t uform_lane_dispatch(uform_encoder_t *e, uform_encoder_lane_t *lane) {
    if (lane->items == 0) return UFORM_OK;
    if ((e->outputs & UFORM_OUTPUTS_TOKENS) && lane->rows) UFORM_TRY(uform_lane_tokens_destination(e, lane));
    if (e->threaded) {
        lane->running = pthread_create(&lane->thread, NULL, uform_lane_thread, lane) == 0;
        if (lane->running) return UFORM_OK;
        UFORM_TRY(uform_lanes_wait(e));
    }
    uform_lane_hold(e, lane);
    uform_status_t status = uform_lane_run(e, lane);
    uform_lane_unhold(e, lane);
    UFORM_TRY(status);
    return uform_lane_finished(e, lane);
}

/* Closes the open batch and opens the next lane's, once that lane is free. */
static uform_status_t uform_encoder_next(uform_encoder_t *e) {
    UFORM_TRY(uform_lane_dispatch(e, &e->lanes[e->open]));
    e->open = (e->open + 1) % e->lane_count;
    return uform_lane_wait(e, &e->lanes[e->open]);
}

/* ---- the encoder ---------------------------------------------------------------- */

void uform_encoder_free(uform_encoder_t *e) {
    if (!e->lanes) return;   /* begin failed before it made its lanes */
    for (size_t i = 0; i < e->lane_count; i++) {
        uform_encoder_lane_t *lane = &e->lanes[i];
        if (lane->running) pthread_join(lane->thread, NULL);   /* a call stopped by a failure */
        lane->running = false;
    }
    for (size_t i = 0; i < e->lane_count; i++) {
        uform_encoder_lane_t *lane = &e->lanes[i];
        if (!lane->backend.ops) continue;
        uform_lane_hold(e, lane);
        uform_lane_free_buffers(lane);
        uform_lane_unhold(e, lane);
        free(lane->staged_inputs);
    }
    uform_backend_t *single = &e->lanes[0].backend;
    if (!e->threaded && single->ops && single->ops->release) single->ops->release(single);
    free(e->lanes);
    free(e->staged);
    e->lanes = NULL;
    e->staged = NULL;
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
        encoded->embeddings = uform_arena_take_rows(e->arena, bytes, "embeddings");
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
            encoded->tokens = uform_arena_take_rows(e->arena, bytes, "tokens");
            if (!encoded->tokens) return UFORM_OUT_OF_MEMORY;
        }
    }
    return UFORM_OK;
}

/* A device arena takes the rows of a model whose only copy is on its GPU, on
 * a backend that converts rows in place (convert_rows). */
static uform_status_t uform_encoder_check_arena(const uform_encoder_t *e) {
    uint32_t gpu;
    if (!uform_arena_on_device(e->arena, &gpu)) return UFORM_OK;
    const uform_model_t *model = e->model;
    if (!model->device.ops || model->gpu_class == UFORM_GPU_CLASS_NONE)
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "arena: it is in GPU %u's memory and this model is in RAM: give a RAM model a host "
                          "arena (uform_arena_init_ram)",
                          gpu);
    if (model->replica_count > 1)
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "arena: it is in GPU %u's memory and this model is on %zu GPUs: a device arena takes "
                          "the outputs of a model on its own GPU only (use a host arena, or a model per GPU)",
                          gpu, model->replica_count);
    if (model->gpu_device != gpu)
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "arena: it is in GPU %u's memory and this model is on GPU %u: a device arena takes the "
                          "outputs of a model on its own GPU only",
                          gpu, model->gpu_device);
    return uform_model_needs(model, model->device.ops->convert_rows != NULL, "encode", "convert_rows");
}

/* The lanes of a call: one per copy of the model, each on the backend the
 * call's executor gives that copy. */
static uform_status_t uform_encoder_lanes(uform_encoder_t *e) {
    const uform_model_t *model = e->model;
    e->lane_count = model->replica_count ? model->replica_count : 1;
    e->threaded = e->lane_count > 1;
    e->lanes = uform_alloc_zeroed(e->lane_count, sizeof(uform_encoder_lane_t), "encoder lanes");
    if (!e->lanes) return UFORM_OUT_OF_MEMORY;
    for (size_t i = 0; i < e->lane_count; i++) {
        uform_encoder_lane_t *lane = &e->lanes[i];
        lane->encoder = e;
        lane->model = uform_model_replica(model, i);
        uform_backend_t backend = uform_model_backend(lane->model, e->executor);
        UFORM_TRY(uform_model_needs(lane->model, backend.ops->download_rows != NULL, "encode", "download_rows"));
        lane->backend = backend;
    }
    /* a single lane's backend is held for the whole call; released by uform_encoder_free */
    uform_backend_t *single = &e->lanes[0].backend;
    if (!e->threaded && single->ops->acquire) single->ops->acquire(single);
    return UFORM_OK;
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

    UFORM_TRY(uform_encoder_check_arena(e));
    uform_arena_rewind(arena);
    UFORM_TRY(uform_encoder_outputs(e, scalar, rows_bound));
    uform_status_t status = uform_encoder_lanes(e);

    /* A call smaller than one batch gets buffers of its own size (+1: never 0
     * bytes); an item longer than the batch grows them (uform_encoder_add).
     * On several lanes each gets its share of such a call, so every GPU works. */
    size_t lanes = e->lane_count, budget = uform_batch_rows(model);
    size_t share_rows = rows_bound / lanes + (rows_bound % lanes != 0);
    size_t share_items = count / lanes + (count % lanes != 0);
    size_t capacity = share_rows < budget ? share_rows + 1 : budget;
    e->max_items = budget < share_items ? budget : share_items;
    for (size_t i = 0; i < lanes && status == UFORM_OK; i++) status = uform_lane_begin(e, &e->lanes[i], capacity);
    if (status != UFORM_OK) {
        uform_encoder_free(e);
        return status;
    }
    uform_progress_begin(&e->progress, options ? &options->progress : NULL, count);
    return UFORM_OK;
}

uform_status_t uform_encoder_add(uform_encoder_t *e, size_t rows, size_t axes, float **x,
                                 uint32_t **ids, uint32_t **positions) {
    /* never met by the verbs (each item is at most context rows) */
    if (rows > e->model->context || e->added == e->count)
        return uform_fail(UFORM_INVALID_ARGUMENT, "encoder: item %zu of %zu rows does not fit", e->added,
                          rows);
    uform_encoder_lane_t *lane = &e->lanes[e->open];
    if (lane->rows + rows > lane->max_rows || lane->items == e->max_items) {
        UFORM_TRY(uform_encoder_next(e));
        lane = &e->lanes[e->open];
    }
    /* An item longer than any batch so far: a batch of its own, buffers grown. */
    if (rows > lane->max_rows) {
        uform_lane_hold(e, lane);
        uform_status_t status = uform_lane_rows(e, lane, rows);
        uform_lane_unhold(e, lane);
        UFORM_TRY(status);
    }
    if (lane->items == 0) lane->first = e->added;
    lane->indices.segments[lane->items] = (uform_segment_t){lane->rows, rows, axes};
    if (rows > lane->longest) lane->longest = rows;
    if (e->outputs & UFORM_OUTPUTS_TOKENS)
        e->encoded->token_offsets[e->added + 1] = e->encoded->token_offsets[e->added] + rows;
    *x = lane->states + lane->rows * lane->model->hidden;
    *ids = lane->indices.ids + lane->rows;
    for (size_t r = 0; r < rows; r++) (*ids)[r] = UFORM_NOT_TEXT;
    *positions = lane->indices.positions + 3 * lane->rows;
    memset(*positions, 0, rows * 3 * sizeof(uint32_t));
    lane->rows += rows;
    lane->items++;
    e->added++;
    return UFORM_OK;
}

uform_status_t uform_encoder_embed(uform_encoder_t *e, const uform_media_part_t *part,
                                   const float *inputs, size_t rows, float *x) {
    if (rows == 0) return UFORM_OK;
    uform_encoder_lane_t *lane = &e->lanes[e->open];
    part = uform_lane_part(e, lane, part);
    if (!e->threaded) return uform_lane_embed(lane, part, inputs, rows, x);
    /* Staged on the host: the lane's thread projects the batch's media rows,
     * which are its first rows (a call is one modality), in one product. */
    size_t at = (size_t)(x - lane->states) / lane->model->hidden;
    if (at != lane->staged_rows || (lane->part && lane->part != part))
        return uform_fail(UFORM_INVALID_ARGUMENT, "encoder: media rows at row %zu after %zu staged rows", at,
                          lane->staged_rows);
    size_t needed = lane->staged_rows + rows;
    if (needed > lane->staged_capacity) {
        size_t grown = lane->staged_capacity * 2 > needed ? lane->staged_capacity * 2 : needed;
        float *staged = uform_alloc(grown, part->width * sizeof(float), "staged media inputs");
        if (!staged) return UFORM_OUT_OF_MEMORY;
        if (lane->staged_rows) memcpy(staged, lane->staged_inputs, lane->staged_rows * part->width * sizeof(float));
        free(lane->staged_inputs);
        lane->staged_inputs = staged;
        lane->staged_capacity = grown;
    }
    memcpy(lane->staged_inputs + lane->staged_rows * part->width, inputs, rows * part->width * sizeof(float));
    lane->staged_rows = needed;
    lane->part = part;
    return UFORM_OK;
}

uform_status_t uform_encoder_finish(uform_encoder_t *e) {
    UFORM_TRY(uform_lane_dispatch(e, &e->lanes[e->open]));
    UFORM_TRY(uform_lanes_wait(e));
    uform_encoded_t *encoded = e->encoded;
    if ((e->outputs & UFORM_OUTPUTS_TOKENS) && !e->tokens_known) {
        size_t bytes = encoded->token_offsets[e->count] * encoded->token_row_bytes;
        encoded->tokens = uform_arena_take_rows(e->arena, bytes, "tokens");
        if (!encoded->tokens) return UFORM_OUT_OF_MEMORY;
        if (!bytes) return UFORM_OK;
        if (!uform_arena_on_device(e->arena, NULL)) {
            memcpy(encoded->tokens, e->staged, bytes);
            return UFORM_OK;
        }
        /* up to the arena's GPU through the one lane's backend, still held */
        uform_backend_t *b = &e->lanes[0].backend;
        b->ops->upload(b, encoded->tokens, e->staged, bytes);
        return b->ops->synchronize(b);
    }
    return UFORM_OK;
}
