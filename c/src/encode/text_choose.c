/* choose.c: uform_text_choose, calibrated single-byte choices.
 *
 * Each text, cut to context - 1 bytes, gets a MASK row at the next position
 * (position = the bytes kept), and the texts are packed into forward batches
 * as text_encode packs them (text_batches.c). Only the MASK rows' final
 * states are read: for each, the logits of the chosen bytes alone,
 * h . text.bytes[c] + heads.bytes.bias[c] (never all 256), divided by the
 * text's group temperature exp(choices.log_temperature[g]) and softmaxed
 * with the largest subtracted, in FP32 on every CPU class. Every text's
 * arithmetic is one fixed chain (the forward's, then dot products with 16
 * partial sums), so its probabilities do not depend on the texts around it
 * or on the thread count. */
#include "encode/text_batches.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define UFORM_BYTE_VALUES 256
#define UFORM_MASK_ROW 256  /* text.bytes row of MASK */

/* text_choose's rows: the bytes cut at context - 1, then MASK. */
static uform_text_layout_t uform_choose_layout(const uform_model_t *model) {
    return (uform_text_layout_t){model->context - 1, true};
}

/* The choices entry text i uses: its own, or the one every text shares. */
static inline size_t uform_choice_entry(const uform_tape_t *choices, size_t text) {
    return choices->count == 1 ? 0 : text;
}

static uform_status_t uform_check_choices(const uform_tape_t *choices, size_t texts_count) {
    if (!choices) return uform_fail(UFORM_INVALID_ARGUMENT, "choices: NULL");
    if (choices->count != texts_count && choices->count != 1)
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "choices: %zu entries for %zu texts; give one entry per text, or one "
                          "entry that every text shares",
                          choices->count, texts_count);
    UFORM_TRY(uform_check_tape(choices, "choices"));
    const char *shared = choices->count == 1 && texts_count > 1 ? " (shared by every text)" : "";
    const uint8_t *data = choices->data;
    for (size_t i = 0; i < choices->count; i++) {
        size_t begin = choices->offsets[i], length = choices->offsets[i + 1] - begin;
        if (length == 0)
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "choices[%zu]%s: empty; each text needs at least one choice", i, shared);
        if (length > UFORM_BYTE_VALUES)
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "choices[%zu]%s: %zu choices, but there are only 256 distinct bytes",
                              i, shared, length);
        uint64_t seen[UFORM_BYTE_VALUES / 64] = {0};
        for (size_t j = 0; j < length; j++) {
            uint8_t byte = data[begin + j];
            uint64_t bit = (uint64_t)1 << (byte % 64);
            if (seen[byte / 64] & bit) {
                char shown[8] = "";
                if (byte >= 0x20 && byte < 0x7f) snprintf(shown, sizeof(shown), " '%c'", byte);
                return uform_fail(UFORM_INVALID_ARGUMENT,
                                  "choices[%zu]%s: byte 0x%02x%s appears more than once; each "
                                  "choice is a distinct byte",
                                  i, shared, byte, shown);
            }
            seen[byte / 64] |= bit;
        }
    }
    return UFORM_OK;
}

static uform_status_t uform_check_groups(const uform_model_t *model, const uint32_t *groups,
                                         size_t count) {
    if (!groups) return UFORM_OK;
    size_t limit = model->choice_temperature_groups > 1 ? model->choice_temperature_groups : 1;
    for (size_t i = 0; i < count; i++)
        if (groups[i] >= limit)
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "temperature_groups[%zu]: group %u, but the model has %zu choice "
                              "temperature group%s (0 to %zu)",
                              i, groups[i], limit, limit == 1 ? "" : "s", limit - 1);
    return UFORM_OK;
}

/* ---- the verb ---------------------------------------------------------------- */

static uform_status_t uform_text_choose_into(uform_model_t *model, uform_executor_t *executor,
                                             const uform_tape_t *texts, const uform_tape_t *choices,
                                             uform_arena_t *arena,
                                             const uform_choose_options_t *options,
                                             uform_chosen_t *chosen,
                                             uform_text_encode_stats_t *stats) {
    if (!model) return uform_fail(UFORM_INVALID_ARGUMENT, "model: NULL");
    if (!chosen) return uform_fail(UFORM_INVALID_ARGUMENT, "chosen: NULL");
    if (!model->bytes_bias)
        return uform_fail(UFORM_UNSUPPORTED,
                          "text_choose: the checkpoint has no byte head (heads.bytes.bias; "
                          "choice_temperature_groups 0)");
    UFORM_TRY(uform_check_tape(texts, "texts"));
    UFORM_TRY(uform_check_choices(choices, texts->count));
    const uint32_t *groups = options ? options->temperature_groups : NULL;
    UFORM_TRY(uform_check_groups(model, groups, texts->count));
    if (!executor) executor = model->executor;
    uform_backend_t backend = uform_model_backend(model, executor);
    UFORM_TRY(uform_model_needs(model, backend.ops->choice_probabilities != NULL, "text_choose",
                                "choice_probabilities"));

    uform_text_layout_t layout = uform_choose_layout(model);
    uform_text_encode_stats_t counts;
    uform_text_count(&layout, texts, &counts);
    size_t count = texts->count;

    /* Outputs live in the arena: the previous call's outputs end here. */
    uform_arena_rewind(arena);
    memset(chosen, 0, sizeof(*chosen));
    size_t *offsets = uform_arena_take(arena, (count + 1) * sizeof(size_t), "choice offsets");
    if (!offsets) return UFORM_OUT_OF_MEMORY;
    offsets[0] = 0;
    for (size_t i = 0; i < count; i++) {
        size_t entry = uform_choice_entry(choices, i);
        offsets[i + 1] = offsets[i] + (choices->offsets[entry + 1] - choices->offsets[entry]);
    }
    size_t probability_bytes;
    if (!uform_mul_ok(offsets[count], sizeof(float), &probability_bytes))
        return uform_fail(UFORM_OUT_OF_MEMORY, "probabilities: %zu choices overflow a size", offsets[count]);
    float *probabilities = uform_arena_take(arena, probability_bytes, "probabilities");
    if (!probabilities) return UFORM_OUT_OF_MEMORY;
    chosen->count = count;
    chosen->offsets = offsets;
    chosen->probabilities = probabilities;

    uform_text_batches_t batches;
    UFORM_TRY(uform_text_batches_init(&batches, model, executor, counts.tokens, count));
    uform_progress_state_t progress;
    uform_progress_begin(&progress, options ? &options->progress : NULL, count);
    uform_status_t status = UFORM_OK;
    for (size_t first = 0; first < count && status == UFORM_OK;) {
        size_t last = uform_text_batch_end(&batches, &layout, texts, first);
        status = uform_text_batch_forward(model, executor, &layout, texts, first, last, &batches);
        if (status != UFORM_OK) break;
        uform_backend_t *b = &batches.backend;
        b->ops->choice_probabilities(b, batches.states, model->hidden, batches.indices.device_segments,
                                     last - first, choices, first, groups ? groups + first : NULL,
                                     model->text_bytes, model->bytes_bias,
                                     model->choice_log_temperature, offsets + first, probabilities);
        status = b->ops->synchronize(b);
        if (status != UFORM_OK) break;
        first = last;
        status = uform_progress_update(&progress, first);
    }
    uform_text_batches_free(&batches);
    if (status != UFORM_OK) {
        memset(chosen, 0, sizeof(*chosen));
        return status;
    }
    if (stats) *stats = counts;
    return UFORM_OK;
}

uform_status_t uform_text_choose(uform_model_t *model, uform_executor_t *executor,
                                 const uform_tape_t *texts, const uform_tape_t *choices,
                                 uform_arena_t *arena, const uform_choose_options_t *options,
                                 uform_chosen_t *chosen, uform_text_encode_stats_t *stats) {
    if (!arena) return uform_fail(UFORM_INVALID_ARGUMENT, "arena: NULL");
    UFORM_TRY(uform_arena_acquire(arena));
    uform_status_t status =
        uform_text_choose_into(model, executor, texts, choices, arena, options, chosen, stats);
    uform_arena_release(arena);
    return status;
}

/* ---- submission ---------------------------------------------------------------- */

typedef struct {
    uform_model_t *model;
    uform_executor_t *executor;
    uform_tape_t texts, choices;
    uform_arena_t *arena;
    uform_choose_options_t options;
    bool has_options;
    uform_chosen_t *chosen;
    uform_text_encode_stats_t *stats;
} uform_choose_job_t;

/* The arena was taken at submission (so no other call can write into it while
 * the job waits in the queue); it is given back when the job has run. */
static uform_status_t uform_choose_job_run(void *context) {
    uform_choose_job_t *job = context;
    uform_status_t status =
        uform_text_choose_into(job->model, job->executor, &job->texts, &job->choices, job->arena,
                               job->has_options ? &job->options : NULL, job->chosen, job->stats);
    uform_arena_release(job->arena);
    return status;
}

uform_status_t uform_text_choose_submit(uform_model_t *model, uform_executor_t *executor,
                                        const uform_tape_t *texts, const uform_tape_t *choices,
                                        uform_arena_t *arena, const uform_choose_options_t *options,
                                        uform_chosen_t *chosen, uform_text_encode_stats_t *stats,
                                        uform_job_t **job) {
    if (!job) return uform_fail(UFORM_INVALID_ARGUMENT, "job: the out-pointer is NULL");
    *job = NULL;
    if (!model) return uform_fail(UFORM_INVALID_ARGUMENT, "model: NULL");
    if (!texts) return uform_fail(UFORM_INVALID_ARGUMENT, "texts: NULL");
    if (!choices) return uform_fail(UFORM_INVALID_ARGUMENT, "choices: NULL");
    if (!arena) return uform_fail(UFORM_INVALID_ARGUMENT, "arena: NULL");
    UFORM_TRY(uform_arena_acquire(arena));
    uform_choose_job_t *context = uform_alloc_zeroed(1, sizeof(*context), "choose job");
    if (!context) {
        uform_arena_release(arena);
        return UFORM_OUT_OF_MEMORY;
    }
    *context = (uform_choose_job_t){model, executor, *texts, *choices, arena, {0}, options != NULL,
                                    chosen, stats};
    if (options) context->options = *options;
    uform_status_t status = uform_executor_submit(executor ? executor : model->executor,
                                                  uform_choose_job_run, context, free, job);
    if (status != UFORM_OK) uform_arena_release(arena); /* the job will never run */
    return status;
}
