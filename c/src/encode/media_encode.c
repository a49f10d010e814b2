/* media_encode.c: the media verbs' shared plumbing (media_encode.h).
 *
 * Items are tokenized a group at a time, one item per pool task (decoding and
 * resizing are single-threaded per item, so a group keeps every core busy),
 * then placed in order into the encoder's forward batches. A media item learns
 * its token count only once tokenized (a file must be decoded first), so the
 * encoder stages token rows; pixel and sample verbs take the same path, which
 * is then the one their tests exercise. */
#include "encode/media_encode.h"

#include <stdio.h>
#include <stdlib.h>

/* One item of a group: its tokens, or the failure its pool thread saw. */
typedef struct {
    uform_media_tokens_t tokens;
    uform_status_t status;
    char message[512];
} uform_media_slot_t;

typedef struct {
    const uform_media_call_t *call;
    size_t first;
    uform_media_slot_t *slots;
} uform_media_group_t;

static void uform_media_tokenize_group(void *context, size_t begin, size_t end, size_t thread) {
    (void)thread;
    const uform_media_group_t *group = context;
    for (size_t k = begin; k < end; k++) {
        uform_media_slot_t *slot = &group->slots[k];
        memset(&slot->tokens, 0, sizeof(slot->tokens));
        slot->status = group->call->tokenize(group->call->source, group->first + k, &slot->tokens);
        /* the message lives in this pool thread's error slot: carry it over */
        if (slot->status != UFORM_OK)
            snprintf(slot->message, sizeof(slot->message), "%s", uform_last_error());
    }
}

static void uform_media_counts_add(uform_media_counts_t *total, const uform_media_counts_t *item) {
    total->resized += item->resized;
    total->shrunk += item->shrunk;
    total->frames += item->frames;
    total->samples += item->samples;
    total->truncated += item->truncated;
    total->empty += item->empty;
}

static uform_status_t uform_media_encode_held(const uform_model_t *model, uform_executor_t *executor,
                                              const uform_media_call_t *call, uform_arena_t *arena,
                                              const uform_encode_options_t *options,
                                              uform_encoded_t *encoded,
                                              uform_media_counts_t *counts) {
    uint32_t outputs;
    uform_scalar_t scalar;
    UFORM_TRY(uform_check_encode_options(model, options, &outputs, &scalar));
    if (!executor) executor = model->executor;

    size_t width = uform_executor_width(executor);
    size_t group_size = width < call->count ? width : call->count;
    uform_media_slot_t *slots = uform_alloc_zeroed(group_size, sizeof(*slots), "media group");
    if (!slots) return UFORM_OUT_OF_MEMORY;
    uform_encoder_t encoder;
    uform_status_t status = uform_encoder_begin(&encoder, model, executor, options, outputs, scalar,
                                                arena, encoded, call->count, call->rows_bound, false);
    if (status != UFORM_OK) {
        free(slots);
        return status;
    }
    memset(counts, 0, sizeof(*counts));
    for (size_t first = 0; first < call->count && status == UFORM_OK; first += group_size) {
        size_t size = call->count - first < group_size ? call->count - first : group_size;
        uform_media_group_t group = {call, first, slots};
        uform_parallel_for(executor, size, 1, uform_media_tokenize_group, &group);
        for (size_t k = 0; k < size && status == UFORM_OK; k++) {
            if (slots[k].status != UFORM_OK) {
                uform_set_error_text(slots[k].message);
                status = slots[k].status;
                break;
            }
            float *x;
            uint32_t *ids, *positions;
            status = uform_encoder_add(&encoder, slots[k].tokens.rows, slots[k].tokens.axes, &x,
                                       &ids, &positions);
            if (status != UFORM_OK) break;
            const uform_media_tokens_t *tokens = &slots[k].tokens;
            if (tokens->rows) memcpy(positions, tokens->positions, tokens->rows * 3 * sizeof(uint32_t));
            status = uform_encoder_embed(&encoder, call->part, tokens->inputs, tokens->rows, x);
            if (status != UFORM_OK) break;
            counts->tokens += slots[k].tokens.rows;
            uform_media_counts_add(counts, &slots[k].tokens.counts);
        }
        for (size_t k = 0; k < size; k++) uform_media_tokens_free(&slots[k].tokens);
    }
    if (status == UFORM_OK) status = uform_encoder_finish(&encoder);
    uform_encoder_free(&encoder);
    free(slots);
    counts->items = call->count;
    return status;
}

uform_status_t uform_media_encode(const uform_model_t *model, uform_executor_t *executor,
                                  const uform_media_call_t *call, uform_arena_t *arena,
                                  const uform_encode_options_t *options, uform_encoded_t *encoded,
                                  uform_media_counts_t *counts, bool held) {
    if (held) return uform_media_encode_held(model, executor, call, arena, options, encoded, counts);
    UFORM_TRY(uform_arena_acquire(arena));
    uform_status_t status = uform_media_encode_held(model, executor, call, arena, options, encoded, counts);
    uform_arena_release(arena);
    return status;
}
