/* workspace.c: the activations one replica's step keeps for its backward, in one
 * block per replica kept across steps (in the backend's memory), measured and
 * pointed from one list; the layer records and, on a device, the host side of
 * the index arrays beside it in host memory. */
#include "train/trainer_internal.h"

/* The one list of the workspace's buffers. Walked twice: with base NULL it only
 * measures (the returned end is the size in bytes), then over the allocated
 * block it points every buffer, so the size can never drift from the layout.
 * Each buffer starts 64-byte aligned relative to the block, which is itself
 * 64-byte aligned. */
static size_t uform_workspace_layout(uform_workspace_t *w, const uform_trainer_t *t, uint8_t *base,
                                     uform_layer_activations_t *layers, size_t rows, size_t items,
                                     size_t selected) {
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
    /* operands only products read kept in BF16 where the backend has the
     * training ops for them (transformer.h) */
    const uform_backend_ops_t *op = t->backend.ops;
    bool bf16 = op->linear_backward_bf16 && op->gelu_forward_bf16 && op->layer_norm_forward_bf16 &&
                op->linear_bf16;
    /* and q, k, v kept in BF16 by the attention (transformer.h): then the
     * product's FP32 qkv is one buffer all layers write in turn */
    bool bf16_attention = bf16 && op->attention_forward_train_bf16 && op->attention_backward_bf16;
    float *shared_qkv = NULL;
    if (bf16_attention) UFORM_TAKE(shared_qkv, rows * 3 * h);
    w->layers = layers;
    for (size_t l = 0; l < depth; l++) {
        uform_layer_activations_t *s = base ? &w->layers[l] : &measuring;
        UFORM_TAKE(s->input, rows * h);
        if (bf16)
            UFORM_TAKE(s->normed_bf16, rows * h);
        else
            UFORM_TAKE(s->normed1, rows * h);
        UFORM_TAKE(s->mean1, rows);
        UFORM_TAKE(s->rstd1, rows);
        if (bf16_attention) {
            s->qkv = shared_qkv;
            UFORM_TAKE(s->qkv_bf16, rows * 3 * h);
        } else {
            UFORM_TAKE(s->qkv, rows * 3 * h);
        }
        UFORM_TAKE(s->attended, rows * h);
        UFORM_TAKE(s->logsumexp, rows * heads);
        UFORM_TAKE(s->middle, rows * h);
        if (bf16)
            UFORM_TAKE(s->normed2_bf16, rows * h);
        else
            UFORM_TAKE(s->normed2, rows * h);
        UFORM_TAKE(s->mean2, rows);
        UFORM_TAKE(s->rstd2, rows);
        UFORM_TAKE(s->up, rows * 4 * h);
        if (bf16)
            UFORM_TAKE(s->activated_bf16, rows * 4 * h);
        else
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
    if (bf16 && op->gelu_linear_backward_bf16)   /* the up projection's dy never stored (backend.h) */
        w->d_wide2 = NULL;
    else
        UFORM_TAKE(w->d_wide2, rows * 4 * h);
    UFORM_TAKE(w->d_attended, rows * h);
    UFORM_TAKE(w->d_qkv, rows * 3 * h);
    UFORM_TAKE(w->d_pooled, items * h);
    UFORM_TAKE(w->d_projected, items * d);
    UFORM_TAKE(w->d_embeddings, items * d);
    UFORM_TAKE(w->d_logits, selected * UFORM_BYTES);
    UFORM_TAKE(w->scale, selected);
    return offset;
}

/* The host side of the index arrays, for a backend whose memory is not the
 * host's: the same list walked the same two ways. */
static size_t uform_workspace_host_layout(uform_workspace_t *w, uint8_t *base, size_t rows, size_t items,
                                          size_t selected) {
    size_t offset = 0;
    UFORM_TAKE(w->host_ids, rows);
    UFORM_TAKE(w->host_targets, selected);
    UFORM_TAKE(w->host_selected_rows, selected);
    UFORM_TAKE(w->host_segments, items);
    UFORM_TAKE(w->host_positions, 3 * rows);
#undef UFORM_TAKE
    return offset;
}

void uform_workspace_release(uform_trainer_t *t, size_t replica) {
    uform_workspace_store_t *store = &t->workspaces[replica];
    if (store->block) t->backend.ops->free(&t->backend, store->block);
    free(store->layers);
    uform_free_aligned(store->host);
    memset(store, 0, sizeof(*store));
}

void uform_workspace_upload(uform_trainer_t *t, uform_workspace_t *w) {
    if (t->backend.ops->host_memory) return;
    uform_backend_t *b = &t->backend;
    b->ops->upload(b, w->ids, w->host_ids, w->rows * sizeof(uint32_t));
    b->ops->upload(b, w->targets, w->host_targets, w->selected * sizeof(uint32_t));
    b->ops->upload(b, w->selected_rows, w->host_selected_rows, w->selected * sizeof(size_t));
    b->ops->upload(b, w->segments, w->host_segments, w->items * sizeof(uform_segment_t));
    b->ops->upload(b, w->positions, w->host_positions, 3 * w->rows * sizeof(uint32_t));
}

uform_status_t uform_workspace_init(uform_workspace_t *w, uform_trainer_t *t, size_t replica,
                                           size_t rows, size_t items, size_t selected) {
    memset(w, 0, sizeof(*w));
    uform_backend_t *b = &t->backend;
    bool host = b->ops->host_memory;
    /* Every count above is bounded by the packing limits checked at init, so
     * the measured sizes cannot overflow. */
    size_t bytes = uform_workspace_layout(w, t, NULL, NULL, rows, items, selected);
    size_t host_bytes = host ? 0 : uform_workspace_host_layout(w, NULL, rows, items, selected);
    if (replica >= t->workspaces_count) {
        size_t count = replica + 1;
        uform_workspace_store_t *stores = realloc(t->workspaces, count * sizeof(*stores));
        if (!stores) return uform_fail(UFORM_OUT_OF_MEMORY, "training workspaces");
        memset(stores + t->workspaces_count, 0, (count - t->workspaces_count) * sizeof(*stores));
        t->workspaces = stores;
        t->workspaces_count = count;
    }
    uform_workspace_store_t *store = &t->workspaces[replica];
    if (!store->layers) {
        store->layers = uform_alloc_zeroed(t->depth ? t->depth : 1, sizeof(uform_layer_activations_t),
                                           "training layer records");
        if (!store->layers) return UFORM_OUT_OF_MEMORY;
    }
    if (store->bytes < bytes) {
        /* Steps differ in size (the masks select a different count of positions
         * every step, packing varies): a block that grows takes 1/8 more than
         * asked, so wobbling steps reuse it. A new block is faulted in and
         * zeroed page by page by the OS on first touch: at depth 4, hidden 256,
         * 16,384 rows it is 1.4 GB, about 15% of a step's time. In host memory
         * the first block takes the 1/8 too: pages never touched cost nothing,
         * and the second step no longer faults the whole block in again (it
         * did whenever its masks selected more positions than the first's). */
        size_t capacity = bytes;
        if (store->block || host) capacity = bytes + bytes / 8 > bytes ? bytes + bytes / 8 : bytes;
        if (store->block) b->ops->free(b, store->block);
        store->bytes = 0;
        char saved[512];   /* a failed headroom is no failure: its message goes if the exact size fits */
        snprintf(saved, sizeof(saved), "%s", uform_last_error());
        store->block = b->ops->alloc(b, capacity);
        if (!store->block && capacity > bytes) {
            store->block = b->ops->alloc(b, capacity = bytes);
            if (store->block) uform_set_error_text(saved);
        }
        if (!store->block) return uform_fail_context(UFORM_OUT_OF_MEMORY, "training activations");
        store->bytes = capacity;
    }
    if (store->host_bytes < host_bytes) {
        uform_free_aligned(store->host);
        store->host_bytes = 0;
        store->host = uform_alloc_aligned(1, host_bytes, "training index arrays (host side)");
        if (!store->host) return UFORM_OUT_OF_MEMORY;
        store->host_bytes = host_bytes;
    }
    w->block = store->block;
    uform_workspace_layout(w, t, w->block, store->layers, rows, items, selected);
    if (host) {
        w->host_ids = w->ids, w->host_targets = w->targets, w->host_selected_rows = w->selected_rows;
        w->host_segments = w->segments, w->host_positions = w->positions;
    } else {
        uform_workspace_host_layout(w, store->host, rows, items, selected);
    }
    w->rows = rows;
    w->items = items;
    w->selected = selected;
    return UFORM_OK;
}
