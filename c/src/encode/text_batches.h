/* text_batches.h: what the text verbs (text_encode, text_choose) share: the
 * check of a texts tape, the counts their stats report, and the packing of
 * texts, in order and without padding, into forward batches. */
#ifndef UFORM_TEXT_BATCHES_H
#define UFORM_TEXT_BATCHES_H

#include "encode/encode_batches.h"

/* How a verb turns one text into rows: its first `limit` bytes, then MASK
 * (row 256 of text.bytes) at the next position when `mask` is set. */
typedef struct {
    size_t limit;  /* context for text_encode; context - 1 for text_choose */
    bool mask;
} uform_text_layout_t;

/* Bytes of text i that become rows. */
static inline size_t uform_text_kept(const uform_text_layout_t *layout, const uform_tape_t *texts,
                                     size_t i) {
    size_t length = texts->offsets[i + 1] - texts->offsets[i];
    return length < layout->limit ? length : layout->limit;
}

/* Rows of text i: its kept bytes, plus MASK. */
static inline size_t uform_text_rows(const uform_text_layout_t *layout, const uform_tape_t *texts,
                                     size_t i) {
    return uform_text_kept(layout, texts, i) + (layout->mask ? 1 : 0);
}

/* INVALID_ARGUMENT naming `name` unless the tape is non-empty, its offsets
 * non-decreasing and inside its data. */

/* items = count; tokens = every text's rows; truncated = texts longer than
 * layout->limit; empty = texts of no bytes. */
UFORM_INTERNAL void uform_text_count(const uform_text_layout_t *layout, const uform_tape_t *texts,
                                     uform_text_encode_stats_t *counts);

/* Scratch for the forward batches of one call, sized for its largest batch. */
typedef struct {
    uform_backend_t backend;     /* the model's on the call's executor: "backend" buffers are
                                    in its memory */
    size_t max_rows, max_items;  /* budgets of one batch */
    size_t capacity;             /* rows the buffers hold: max_rows, all the call's + 1, or
                                    the longest text's when that is more */
    float *states;               /* backend [max_rows, H]: the final normed states after a forward */
    void *scratch;               /* backend: the forward's */
    /* segments [max_items] (where each text of the batch sits), positions
     * [max_rows][3], ids [max_rows] (byte ids, 256: MASK, for the lookup) */
    uform_batch_indices_t indices;
} uform_text_batches_t;

/* Budgets for `count` texts of `total_rows` rows in all: about the backend's
 * forward_batch_bytes of activations per batch (16 MiB on a CPU); a longer
 * text is a batch of its own. */
UFORM_INTERNAL uform_status_t uform_text_batches_init(uform_text_batches_t *batches,
                                                      const uform_model_t *model,
                                                      uform_executor_t *executor,
                                                      size_t total_rows, size_t count);
UFORM_INTERNAL void uform_text_batches_free(uform_text_batches_t *batches);

/* The end of the batch that starts at text `first`: texts in order while
 * they fit the row and item budgets (at least one, however long). */
UFORM_INTERNAL size_t uform_text_batch_end(const uform_text_batches_t *batches,
                                           const uform_text_layout_t *layout,
                                           const uform_tape_t *texts, size_t first);

/* Lays texts [first, last) out as rows (byte row + modality vector, token
 * index as position; MASK last when the layout says) and runs the blocks:
 * batches->states then holds their final normed states, text i's rows at
 * batches->indices.segments[i - first] (device_segments: the same in the
 * backend's memory). Grows the buffers for a batch longer than
 * they hold (OUT_OF_MEMORY when that fails). */
UFORM_INTERNAL uform_status_t uform_text_batch_forward(const uform_model_t *model, uform_executor_t *executor,
                                             const uform_text_layout_t *layout,
                                             const uform_tape_t *texts, size_t first, size_t last,
                                             uform_text_batches_t *batches);

#endif /* UFORM_TEXT_BATCHES_H */
