/* text.c: uform_text_encode, a byte per token.
 *
 * Texts are cut at `context` bytes; their rows go through the encoder every
 * verb shares (encode_batches.c), packed in order without padding. An empty
 * text has no tokens: its embedding is all zeros, and it has no token rows. */
#include "encode/encode_batches.h"

#include <stdlib.h>

static size_t uform_text_tokens(const uform_model_t *model, const uform_tape_t *texts, size_t i) {
    size_t length = texts->offsets[i + 1] - texts->offsets[i];
    return length < model->context ? length : model->context;
}

static uform_status_t uform_text_encode_into(uform_model_t *model, uform_executor_t *executor,
                                             const uform_tape_t *texts, uform_arena_t *arena,
                                             const uform_encode_options_t *options,
                                             uform_encoded_t *encoded,
                                             uform_text_encode_stats_t *stats) {
    if (!model) return uform_fail(UFORM_INVALID_ARGUMENT, "model: NULL");
    if (!arena) return uform_fail(UFORM_INVALID_ARGUMENT, "arena: NULL");
    if (!encoded) return uform_fail(UFORM_INVALID_ARGUMENT, "encoded: NULL");
    if (!model->text_bytes)
        return uform_fail(UFORM_UNSUPPORTED, "text_encode: the checkpoint has no text parts");
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

    uform_encoder_t encoder;
    UFORM_TRY(uform_encoder_begin(&encoder, model, executor, options, outputs, scalar, arena, encoded,
                                  count, total_tokens, true));
    const uint8_t *data = texts->data;
    uform_status_t status = UFORM_OK;
    for (size_t i = 0; i < count && status == UFORM_OK; i++) {
        size_t n = uform_text_tokens(model, texts, i);
        float *x;
        uint32_t *ids, *positions;
        status = uform_encoder_add(&encoder, n, 1, &x, &ids, &positions);
        if (status != UFORM_OK) break;
        const uint8_t *bytes = data ? data + texts->offsets[i] : NULL;
        for (size_t t = 0; t < n; t++) {
            ids[t] = bytes[t];
            positions[3 * t] = (uint32_t)t;
        }
    }
    if (status == UFORM_OK) status = uform_encoder_finish(&encoder);
    uform_encoder_free(&encoder);
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

/* The arena was taken at submission (so no other call can write into it while
 * the job waits in the queue); it is given back when the job has run. */
static uform_status_t uform_text_job_run(void *context) {
    uform_text_job_t *job = context;
    uform_status_t status = uform_text_encode_into(job->model, job->executor, &job->texts, job->arena,
                                                   job->has_options ? &job->options : NULL,
                                                   job->encoded, job->stats);
    uform_arena_release(job->arena);
    return status;
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
    if (!arena) return uform_fail(UFORM_INVALID_ARGUMENT, "arena: NULL");
    UFORM_TRY(uform_arena_acquire(arena));
    uform_text_job_t *context = uform_alloc_zeroed(1, sizeof(*context), "text job");
    if (!context) {
        uform_arena_release(arena);
        return UFORM_OUT_OF_MEMORY;
    }
    *context = (uform_text_job_t){model, executor, *texts, arena, {0}, options != NULL, encoded, stats};
    if (options) context->options = *options;
    uform_status_t status = uform_executor_submit(executor ? executor : model->executor,
                                                  uform_text_job_run, context, free, job);
    if (status != UFORM_OK) uform_arena_release(arena); /* the job will never run */
    return status;
}
