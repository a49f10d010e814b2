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
 * or on the thread count; on a model of several GPUs, on which GPU ran it. */
#include "encode/text_batches.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
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

/* ---- a share of the texts on one copy of the model ----------------------------- */

/* A model on several GPUs chooses for a contiguous share of the texts on each
 * copy (about equal rows; model.h: replicas), every share but the first on a
 * thread of its own, which holds its GPU for the share (text_batches_init);
 * the calling thread runs the first share and reports progress for all. A
 * model on one device has one share, run on the calling thread. */
typedef struct uform_choose_call uform_choose_call_t;

typedef struct {
    uform_choose_call_t *call;
    const uform_model_t *copy;
    size_t first, last, rows;     /* its texts and their rows */
    atomic_size_t done;           /* its texts finished */
    uform_status_t status;        /* a thread's answer, and its message */
    char message[512];
    pthread_t thread;
    bool started;
} uform_choose_share_t;

struct uform_choose_call {
    uform_executor_t *executor;
    const uform_text_layout_t *layout;
    const uform_tape_t *texts, *choices;
    const uint32_t *groups;
    size_t *offsets;
    float *probabilities;
    uform_progress_state_t progress;
    atomic_bool stop;             /* a share failed or the call was cancelled: the others stop */
    size_t count;
    uform_choose_share_t *shares;
};

/* Progress over every share's finished texts (called by the calling thread only). */
static uform_status_t uform_choose_report(uform_choose_call_t *call) {
    size_t done = 0;
    for (size_t i = 0; i < call->count; i++) done += atomic_load(&call->shares[i].done);
    return uform_progress_update(&call->progress, done);
}

/* Chooses for a share's texts batch by batch; stops early, answering OK,
 * when another share set `stop`. */
static uform_status_t uform_choose_share_run(uform_choose_share_t *share, bool reports) {
    uform_choose_call_t *call = share->call;
    const uform_model_t *copy = share->copy;
    uform_text_batches_t batches;
    uform_status_t status =
        uform_text_batches_init(&batches, copy, call->executor, share->rows, share->last - share->first);
    for (size_t first = share->first; first < share->last && status == UFORM_OK;) {
        if (atomic_load(&call->stop)) break;
        size_t last = uform_text_batch_end(&batches, call->layout, call->texts, first);
        if (last > share->last) last = share->last;
        status = uform_text_batch_forward(copy, call->executor, call->layout, call->texts, first, last, &batches);
        if (status != UFORM_OK) break;
        uform_backend_t *b = &batches.backend;
        b->ops->choice_probabilities(b, batches.states, copy->hidden, batches.indices.device_segments,
                                     last - first, call->choices, first, call->groups ? call->groups + first : NULL,
                                     copy->text_bytes, copy->bytes_bias, copy->choice_log_temperature,
                                     call->offsets + first, call->probabilities);
        status = b->ops->synchronize(b);
        if (status != UFORM_OK) break;
        first = last;
        atomic_store(&share->done, first - share->first);
        if (reports) status = uform_choose_report(call);
    }
    if (batches.backend.ops) uform_text_batches_free(&batches);
    if (status != UFORM_OK) atomic_store(&call->stop, true);
    return status;
}

static void *uform_choose_share_thread(void *argument) {
    uform_choose_share_t *share = argument;
    share->status = uform_choose_share_run(share, false);
    if (share->status != UFORM_OK) snprintf(share->message, sizeof(share->message), "%s", uform_last_error());
    return NULL;
}

/* Splits the texts into call->count contiguous shares of about equal rows,
 * each of at least one text (count <= the texts). */
static void uform_choose_split(uform_choose_call_t *call, size_t total_rows) {
    const uform_tape_t *texts = call->texts;
    size_t first = 0, rows_before = 0;
    for (size_t k = 0; k < call->count; k++) {
        uform_choose_share_t *share = &call->shares[k];
        bool final = k == call->count - 1;
        size_t last = first, rows = 0, remaining = call->count - 1 - k;
        size_t target = (size_t)((unsigned __int128)total_rows * (k + 1) / call->count);
        do {
            rows += uform_text_rows(call->layout, texts, last++);
        } while (last < texts->count - remaining &&
                 (final || rows_before + rows + uform_text_rows(call->layout, texts, last) <= target));
        share->first = first;
        share->last = last;
        share->rows = rows;
        rows_before += rows;
        first = last;
    }
}

/* Runs every share: the others on threads (or here after the first, when no
 * thread starts), the first here; the first failure in share order answers. */
static uform_status_t uform_choose_shares(uform_choose_call_t *call) {
    for (size_t i = 1; i < call->count; i++) {
        uform_choose_share_t *share = &call->shares[i];
        share->started = pthread_create(&share->thread, NULL, uform_choose_share_thread, share) == 0;
    }
    uform_status_t status = uform_choose_share_run(&call->shares[0], true);
    for (size_t i = 1; i < call->count; i++) {
        uform_choose_share_t *share = &call->shares[i];
        if (share->started) {
            pthread_join(share->thread, NULL);
            if (status == UFORM_OK && share->status != UFORM_OK) {
                uform_set_error_text(share->message);
                status = share->status;
            }
        } else if (status == UFORM_OK) {
            status = uform_choose_share_run(share, true);
        }
        if (status == UFORM_OK) status = uform_choose_report(call);
    }
    return status;
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
    UFORM_TRY(uform_arena_require_host(arena, "text_choose: it answers its probabilities"));
    for (size_t i = 0; i < model->replica_count; i++) {
        const uform_model_t *copy = uform_model_replica(model, i);
        uform_backend_t backend = uform_model_backend(copy, executor);
        UFORM_TRY(uform_model_needs(copy, backend.ops->choice_probabilities != NULL, "text_choose",
                                    "choice_probabilities"));
    }

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

    uform_choose_call_t call = {.executor = executor, .layout = &layout, .texts = texts, .choices = choices,
                                .groups = groups, .offsets = offsets, .probabilities = probabilities};
    call.count = model->replica_count < count ? model->replica_count : count;
    call.shares = uform_alloc_zeroed(call.count, sizeof(uform_choose_share_t), "text_choose shares");
    if (!call.shares) return UFORM_OUT_OF_MEMORY;
    atomic_init(&call.stop, false);
    for (size_t i = 0; i < call.count; i++) {
        call.shares[i].call = &call;
        call.shares[i].copy = uform_model_replica(model, i);
        atomic_init(&call.shares[i].done, 0);
    }
    uform_choose_split(&call, counts.tokens);
    uform_progress_begin(&call.progress, options ? &options->progress : NULL, count);
    uform_status_t status = uform_choose_shares(&call);
    free(call.shares);
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
