/* text_batches.c: the stats counts and forward batches of text_choose
 * (text_batches.h); the tape check and the batch budget are the encoder's
 * (encode_batches.h).
 *
 * Texts are packed, in order, into forward batches of about
 * uform_batch_rows tokens with no padding: the GEMMs see one flat matrix of
 * every token, attention stays within each text. */
#include "encode/text_batches.h"

#include <stdlib.h>

void uform_text_count(const uform_text_layout_t *layout, const uform_tape_t *texts,
                      uform_text_encode_stats_t *counts) {
    memset(counts, 0, sizeof(*counts));
    counts->items = texts->count;
    for (size_t i = 0; i < texts->count; i++) {
        size_t length = texts->offsets[i + 1] - texts->offsets[i];
        counts->truncated += length > layout->limit;
        counts->empty += length == 0;
        counts->tokens += uform_text_rows(layout, texts, i);
    }
}

void uform_text_batches_free(uform_text_batches_t *batches) {
    uform_backend_t *b = &batches->backend;
    if (b->ops) {
        uform_backend_free(b, batches->states);
        uform_backend_free(b, batches->scratch);
        uform_batch_indices_free(&batches->indices, b);
        if (b->ops->release) b->ops->release(b);
    }
    memset(batches, 0, sizeof(*batches));
}

/* (Re)allocates the per-row buffers for batches of `capacity` rows. Every
 * thread's attention scratch is sized for the longest text a batch can hold:
 * capacity rows, at most the context. */
static uform_status_t uform_text_batch_rows(uform_text_batches_t *batches,
                                            const uform_model_t *model, uform_executor_t *executor,
                                            size_t capacity) {
    uform_backend_t *b = &batches->backend;
    size_t longest = model->context < capacity ? model->context : capacity;
    uform_backend_free(b, batches->states);
    uform_backend_free(b, batches->scratch);
    batches->scratch = NULL;
    batches->capacity = capacity;
    batches->states = uform_backend_alloc(b, capacity, model->hidden * sizeof(float), "text states");
    if (batches->states)
        batches->scratch = uform_backend_alloc(
            b, 1, uform_forward_scratch_bytes(model, executor, capacity, batches->max_items, longest),
            "text scratch");
    if (!batches->states || !batches->scratch) return UFORM_OUT_OF_MEMORY;
    return uform_batch_indices_reserve(&batches->indices, b, capacity, 0);
}

uform_status_t uform_text_batches_init(uform_text_batches_t *batches, const uform_model_t *model,
                                       uform_executor_t *executor, size_t total_rows, size_t count) {
    memset(batches, 0, sizeof(*batches));
    batches->backend = uform_model_backend(model, executor);
    uform_backend_t *b = &batches->backend;
    if (b->ops->acquire) b->ops->acquire(b);   /* released by uform_text_batches_free */
    size_t budget = uform_batch_rows(model);
    /* A call smaller than one batch gets buffers of its own size (+1: never 0 bytes). */
    size_t rows = total_rows < budget ? total_rows + 1 : budget;
    batches->max_rows = budget;
    batches->max_items = budget < count ? budget : count;
    uform_status_t status =
        uform_batch_indices_reserve(&batches->indices, b, 1, batches->max_items);
    if (status == UFORM_OK) status = uform_text_batch_rows(batches, model, executor, rows);
    if (status != UFORM_OK) uform_text_batches_free(batches);
    return status;
}

size_t uform_text_batch_end(const uform_text_batches_t *batches, const uform_text_layout_t *layout,
                            const uform_tape_t *texts, size_t first) {
    size_t last = first, rows = 0;
    while (last < texts->count && last - first < batches->max_items &&
           (last == first || rows + uform_text_rows(layout, texts, last) <= batches->max_rows))
        rows += uform_text_rows(layout, texts, last++);
    return last;
}

/* One row: its id (a byte, or 256 for MASK) for the lookup, at `position`. */
static void uform_text_row(uint32_t token, uint32_t position, uform_text_batches_t *batches,
                           size_t row) {
    batches->indices.ids[row] = token;
    batches->indices.positions[3 * row] = position;
    batches->indices.positions[3 * row + 1] = 0;
    batches->indices.positions[3 * row + 2] = 0;
}

uform_status_t uform_text_batch_forward(const uform_model_t *model, uform_executor_t *executor,
                                        const uform_text_layout_t *layout,
                                        const uform_tape_t *texts, size_t first, size_t last,
                                        uform_text_batches_t *batches) {
    const uint8_t *data = texts->data;
    size_t rows = 0, needed = 0, longest = 0;
    for (size_t i = first; i < last; i++) needed += uform_text_rows(layout, texts, i);
    if (needed > batches->capacity)
        UFORM_TRY(uform_text_batch_rows(batches, model, executor, needed));
    for (size_t i = first; i < last; i++) {
        size_t kept = uform_text_kept(layout, texts, i);
        const uint8_t *bytes = data ? data + texts->offsets[i] : NULL;
        size_t length = uform_text_rows(layout, texts, i);
        batches->indices.segments[i - first] = (uform_segment_t){rows, length, 1};
        if (length > longest) longest = length;
        for (size_t t = 0; t < kept; t++) uform_text_row(bytes[t], (uint32_t)t, batches, rows++);
        if (layout->mask) uform_text_row(256, (uint32_t)kept, batches, rows++);
    }
    if (!rows) return UFORM_OK;
    uform_backend_t *b = &batches->backend;
    uform_batch_indices_upload(&batches->indices, b, rows, last - first);
    uform_batch_t batch = {rows, last - first, batches->indices.device_segments,
                           batches->indices.device_positions, longest};
    b->ops->embedding_forward(b, model->text_bytes, model->text_modality, batches->indices.device_ids,
                              rows, model->hidden, batches->states);
    uform_forward(model, b, &batch, longest, batches->states, batches->scratch);
    return UFORM_OK;
}
