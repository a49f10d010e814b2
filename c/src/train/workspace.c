/* workspace.c: the activations one replica's step keeps for its backward, in one
 * block per replica kept across steps, measured and pointed from one list. */
#include "train/trainer_internal.h"

/* The one list of the workspace's buffers. Walked twice: with base NULL it only
 * measures (the returned end is the size in bytes), then over the allocated
 * block it points every buffer, so the size can never drift from the layout.
 * Each buffer starts 64-byte aligned relative to the block, which is itself
 * 64-byte aligned. */
static size_t uform_workspace_layout(uform_workspace_t *w, const uform_trainer_t *t, uint8_t *base,
                                     size_t rows, size_t items, size_t selected) {
    size_t h = t->hidden, d = t->dimensions, heads = t->heads, depth = t->depth;
    size_t offset = 0;
    /* A measuring walk still needs layer records to point into: a small
     * stand-in, rewritten for each layer (only offsets matter then). */
    uform_layer_activations_t measuring;
#define UFORM_TAKE(pointer, count)                                                             \
    do {                                                                                       \
        offset = (offset + 63) & ~(size_t)63;                                                  \
        (pointer) = base ? (void *)(base + offset) : NULL;                                     \
        offset += (count) * sizeof(*(pointer));                                                \
    } while (0)
    UFORM_TAKE(w->layers, depth);
    for (size_t l = 0; l < depth; l++) {
        uform_layer_activations_t *s = base ? &w->layers[l] : &measuring;
        UFORM_TAKE(s->input, rows * h);
        UFORM_TAKE(s->normed1, rows * h);
        UFORM_TAKE(s->mean1, rows);
        UFORM_TAKE(s->rstd1, rows);
        UFORM_TAKE(s->qkv, rows * 3 * h);
        UFORM_TAKE(s->attended, rows * h);
        UFORM_TAKE(s->logsumexp, rows * heads);
        UFORM_TAKE(s->middle, rows * h);
        UFORM_TAKE(s->normed2, rows * h);
        UFORM_TAKE(s->mean2, rows);
        UFORM_TAKE(s->rstd2, rows);
        UFORM_TAKE(s->up, rows * 4 * h);
        UFORM_TAKE(s->activated, rows * 4 * h);
    }
    UFORM_TAKE(w->ids, rows);
    UFORM_TAKE(w->targets, selected);
    UFORM_TAKE(w->selected_rows, selected);
    UFORM_TAKE(w->segments, items);
    UFORM_TAKE(w->positions, 3 * rows);
    UFORM_TAKE(w->cosines, rows * UFORM_PAIRS);
    UFORM_TAKE(w->sines, rows * UFORM_PAIRS);
    UFORM_TAKE(w->output, rows * h);
    UFORM_TAKE(w->final_mean, rows);
    UFORM_TAKE(w->final_rstd, rows);
    UFORM_TAKE(w->states, rows * h);
    UFORM_TAKE(w->pooled, items * h);
    UFORM_TAKE(w->projected, items * d);
    UFORM_TAKE(w->norms, items);
    UFORM_TAKE(w->embeddings, items * d);
    UFORM_TAKE(w->logits, selected * UFORM_BYTES);
    UFORM_TAKE(w->losses, selected);
    UFORM_TAKE(w->d_states, rows * h);
    UFORM_TAKE(w->d_x, rows * h);
    UFORM_TAKE(w->d_middle, rows * h);
    UFORM_TAKE(w->d_normed, rows * h);
    UFORM_TAKE(w->d_wide, rows * 4 * h);
    UFORM_TAKE(w->d_wide2, rows * 4 * h);
    UFORM_TAKE(w->d_attended, rows * h);
    UFORM_TAKE(w->d_qkv, rows * 3 * h);
    UFORM_TAKE(w->d_pooled, items * h);
    UFORM_TAKE(w->d_projected, items * d);
    UFORM_TAKE(w->d_embeddings, items * d);
    UFORM_TAKE(w->d_logits, selected * UFORM_BYTES);
    UFORM_TAKE(w->scale, selected);
#undef UFORM_TAKE
    return offset;
}

uform_status_t uform_workspace_init(uform_workspace_t *w, uform_trainer_t *t, size_t replica,
                                           size_t rows, size_t items, size_t selected) {
    memset(w, 0, sizeof(*w));
    /* Every count above is bounded by the packing limits checked at init, so
     * the measured size cannot overflow. */
    size_t bytes = uform_workspace_layout(w, t, NULL, rows, items, selected);
    if (replica >= t->workspaces_count) {
        size_t count = replica + 1;
        void **blocks = realloc(t->workspaces, count * sizeof(void *));
        if (blocks) t->workspaces = blocks;
        size_t *sizes = blocks ? realloc(t->workspace_bytes, count * sizeof(size_t)) : NULL;
        if (!blocks || !sizes) return uform_fail(UFORM_OUT_OF_MEMORY, "training workspaces");
        t->workspace_bytes = sizes;
        for (size_t r = t->workspaces_count; r < count; r++) blocks[r] = NULL, sizes[r] = 0;
        t->workspaces_count = count;
    }
    if (t->workspace_bytes[replica] < bytes) {
        uform_free_aligned(t->workspaces[replica]);
        t->workspace_bytes[replica] = 0;
        t->workspaces[replica] = uform_alloc_aligned(1, bytes, "training activations");
        if (!t->workspaces[replica]) return UFORM_OUT_OF_MEMORY;
        t->workspace_bytes[replica] = bytes;
    }
    w->block = t->workspaces[replica];
    uform_workspace_layout(w, t, w->block, rows, items, selected);
    w->rows = rows;
    w->items = items;
    w->selected = selected;
    return UFORM_OK;
}
