/* step_layers.c: the encoder in training: its forward that keeps what backward
 * needs and its backward (the blocks through model/transformer.c and
 * transformer_backward.c, the embeddings here), the masked-text head, the pooled
 * embeddings, and the choices term of a replica (late_step.c: the
 * late-interaction term). */
#include "train/trainer_internal.h"

/* A linear layer's dense weight at parameters + offset, [n, k]. */
static uform_weight_t uform_dense(const uform_trainer_t *t, size_t offset, size_t n, size_t k) {
    return (uform_weight_t){NULL, t->parameters + offset, n, k};
}

/* A saved forward of the workspace, as transformer.c reads it. */
static uform_activations_t uform_saved(uform_workspace_t *w) {
    return (uform_activations_t){true,          w->layers,  w->output, w->final_mean,
                                 w->final_rstd, w->states,  w->cosines, w->sines, NULL};
}

static uform_batch_t uform_workspace_batch(const uform_workspace_t *w) {
    size_t longest = 0;
    for (size_t i = 0; i < w->items; i++)
        if (w->host_segments[i].length > longest) longest = w->host_segments[i].length;
    return (uform_batch_t){w->rows, w->items, w->segments, w->positions, longest};
}

/* A media modality's parameters and gradients, as media_rows.c takes them. */
uform_media_parameters_t uform_media_parameters(const uform_trainer_t *t, size_t m) {
    const uform_trainer_media_t *md = &t->media[m];
    const float *p = t->parameters;
    float *g = t->gradients;
    bool masks = t->masks_text;
    return (uform_media_parameters_t){
        md->width, p + md->projection, p + md->projection_bias, p + md->modality,
        masks ? p + md->mask : NULL, masks ? p + md->head : NULL, masks ? p + md->head_bias : NULL,
        g + md->projection, g + md->projection_bias, g + md->modality,
        masks ? g + md->mask : NULL, masks ? g + md->head : NULL, masks ? g + md->head_bias : NULL};
}

uform_status_t uform_forward_train(uform_trainer_t *t, uform_workspace_t *w,
                                   const uform_media_rows_t *media) {
    uform_backend_t *b = &t->backend;
    size_t h = t->hidden;
    float *p = t->parameters;
    b->ops->embedding_forward(b, p + t->bytes_table, p + t->modality, w->ids, w->rows, h,
                              w->layers[0].input);
    for (size_t m = UFORM_MODALITY_IMAGE; m <= UFORM_MODALITY_AUDIO; m++) {
        if (!t->media[m].width) continue;
        uform_media_parameters_t parameters = uform_media_parameters(t, m);
        UFORM_TRY(uform_media_input_forward(b, &parameters, &media[m], h,
                                            w->layers[0].input));
    }
    uform_batch_t batch = uform_workspace_batch(w);
    uform_activations_t saved = uform_saved(w);
    uform_transformer_forward(b, &t->transformer, &batch, &saved);
    return UFORM_OK;
}

void uform_backward_train(uform_trainer_t *t, uform_workspace_t *w, const uform_backward_hook_t *hook) {
    uform_backend_t *b = &t->backend;
    float *g = t->gradients;
    uform_batch_t batch = uform_workspace_batch(w);
    uform_activations_t saved = uform_saved(w);
    uform_backward_scratch_t scratch = {w->d_x, w->d_middle, w->d_normed, w->d_wide, w->d_wide2,
                                        w->d_attended, w->d_qkv};
    uform_transformer_backward(b, &t->transformer, t->block_gradients, g + t->norm_weight,
                               g + t->norm_bias, &batch, &saved, w->d_states, &scratch, hook);
    b->ops->embedding_backward(b, w->d_x, w->ids, w->rows, t->hidden, g + t->bytes_table,
                               g + t->modality);
}

/* The masked text loss and its gradient into d_states (scaled by weight):
 * logits = states[selected] . bytes[0:256]^T + bias, softmax cross-entropy. */
float uform_masked_text(uform_trainer_t *t, uform_workspace_t *w, float weight,
                        size_t world_selected) {
    uform_backend_t *b = &t->backend;
    const uform_backend_ops_t *op = b->ops;
    size_t h = t->hidden, n = w->selected;
    if (n == 0) return 0.0f;
    float *p = t->parameters, *g = t->gradients;
    uform_weight_t bytes = uform_dense(t, t->bytes_table, UFORM_BYTES, h);
    float *gathered = w->d_normed;   /* reuse: [selected, H] <= [rows, H] */
    float *d_gathered = w->d_attended;
    op->gather_rows(b, w->states, h, w->selected_rows, n, gathered);
    op->linear(b, &bytes, gathered, h, n, p + t->bytes_bias, false, w->logits, UFORM_BYTES);
    op->cross_entropy_forward(b, w->logits, n, UFORM_BYTES, w->targets, w->losses);
    /* the losses summed and the scales written on the host: in place on host
     * memory, through one copy each way on a device */
    bool on_host = uform_trainer_on_host(t);
    float *host = on_host ? NULL : uform_alloc(2 * n, sizeof(float), "masked text losses");
    const float *losses = on_host ? w->losses : host;
    float *scales = on_host ? w->scale : host + (host ? n : 0);
    uform_status_t read = on_host ? UFORM_OK
                          : host  ? uform_trainer_read(t, host, w->losses, n * sizeof(float))
                                  : UFORM_OUT_OF_MEMORY;
    if (read != UFORM_OK) {
        /* This read is the step's first synchronize, which answered (and
         * cleared) the device's failure: kept for the step's own synchronize
         * to report as itself, not as a diverged (NaN) loss. */
        if (b->failure == UFORM_OK) b->failure = read;
        free(host);
        return NAN;   /* nothing is applied */
    }
    double total = 0;
    for (size_t i = 0; i < n; i++) total += losses[i];
    float scale = weight / (float)world_selected;
    for (size_t i = 0; i < n; i++) scales[i] = scale;
    if (!on_host) op->upload(b, w->scale, scales, n * sizeof(float));
    free(host);
    op->zero(b, w->d_logits, n * UFORM_BYTES * sizeof(float));
    op->cross_entropy_backward(b, w->logits, n, UFORM_BYTES, w->targets, w->scale, w->d_logits);
    op->linear_backward(b, &bytes, gathered, w->d_logits, n, g + t->bytes_table, g + t->bytes_bias,
                        d_gathered, false);
    op->scatter_add_rows(b, d_gathered, h, w->selected_rows, n, w->d_states);
    return (float)(total / (double)world_selected);
}

/* Pooled, projected, normalised embeddings of the kept items (w->embeddings). */
void uform_embed(uform_trainer_t *t, uform_workspace_t *w) {
    uform_backend_t *b = &t->backend;
    size_t h = t->hidden, d = t->dimensions;
    uform_weight_t head = uform_dense(t, t->embedding_head, d, h);
    b->ops->mean_pool_forward(b, w->states, h, w->segments, w->items, w->pooled);
    b->ops->linear(b, &head, w->pooled, h, w->items, NULL, false, w->projected, d);
    b->ops->normalize_forward(b, w->projected, w->items, d, w->embeddings, w->norms);
}

void uform_embed_backward(uform_trainer_t *t, uform_workspace_t *w) {
    uform_backend_t *b = &t->backend;
    size_t h = t->hidden, d = t->dimensions;
    uform_weight_t head = uform_dense(t, t->embedding_head, d, h);
    b->ops->zero(b, w->d_projected, w->items * d * sizeof(float));
    b->ops->normalize_backward(b, w->d_embeddings, w->embeddings, w->norms, w->items, d,
                               w->d_projected);
    b->ops->linear_backward(b, &head, w->pooled, w->d_projected, w->items,
                            t->gradients + t->embedding_head, NULL, w->d_pooled, false);
    b->ops->mean_pool_backward(b, w->d_pooled, h, w->segments, w->items, w->d_states);
}

/* The choices term of one replica's items (docs/training.md section 10):
 * gathers the MASK rows' states, runs the loss, scatters dLoss/dh back. */
uform_status_t uform_replica_choices(uform_trainer_t *t, const uform_trainer_batch_t *batch,
                                            uform_replica_t *rep, const size_t *kept,
                                            const size_t *first_row, float scale, double *loss_sum) {
    const size_t h = t->hidden;
    size_t n = 0, total = 0, byte_begin, target_begin;
    for (size_t i = rep->first; i < rep->last; i++)
        if (kept[i] != SIZE_MAX && uform_has_choices(batch, i))
            n++, total += uform_item_choices(batch, i, &byte_begin, &target_begin);
    if (n == 0) return UFORM_OK;
    uform_backend_t *b = &t->backend;
    bool on_host = b->ops->host_memory;
    /* the MASK rows' states and their gradients, and the rows' indices, in the
     * backend's memory; the choices themselves on the host (backend.h) */
    float *states = uform_backend_alloc(b, 2 * n, h * sizeof(float), "choice states");
    float *targets = uform_alloc(total, sizeof(float), "choice targets");
    uint8_t *bytes = uform_alloc(total, 1, "choice bytes");
    size_t *starts = uform_alloc(2 * n + 1, sizeof(size_t), "choice items");
    uint32_t *groups = uform_alloc(n, sizeof(uint32_t), "choice groups");
    size_t *rows_on_device = on_host || !starts ? NULL : uform_backend_alloc(b, n, sizeof(size_t), "choice rows");
    if (!states || !targets || !bytes || !starts || !groups || (!on_host && !rows_on_device)) {
        uform_backend_free(b, states), uform_backend_free(b, rows_on_device);
        free(targets), free(bytes), free(starts), free(groups);
        return UFORM_OUT_OF_MEMORY;
    }
    float *d_states = states + n * h;
    size_t *mask_rows = starts + n + 1;
    size_t c = 0;
    starts[0] = 0;
    for (size_t i = rep->first; i < rep->last; i++) {
        if (kept[i] == SIZE_MAX || !uform_has_choices(batch, i)) continue;
        size_t length = uform_item_choices(batch, i, &byte_begin, &target_begin);
        mask_rows[c] = first_row[i] + kept[i] - 1;
        memcpy(bytes + starts[c], (const uint8_t *)batch->choices.data + byte_begin, length);
        memcpy(targets + starts[c], batch->choice_targets + target_begin, length * sizeof(float));
        groups[c] = batch->temperature_groups ? batch->temperature_groups[i] : 0;
        starts[c + 1] = starts[c] + length;
        c++;
    }
    if (!on_host) b->ops->upload(b, rows_on_device, mask_rows, n * sizeof(size_t));
    const size_t *rows = on_host ? mask_rows : rows_on_device;
    b->ops->gather_rows(b, rep->w.states, h, rows, n, states);
    uform_choices_batch_t choices = {n, h, states, bytes, targets, starts, groups};
    float *p = t->parameters, *g = t->gradients;
    b->ops->choices_loss(b, &choices, p + t->bytes_table, p + t->bytes_bias,
                         p + t->choice_log_temperature, scale, loss_sum, d_states,
                         g + t->bytes_table, g + t->bytes_bias, g + t->choice_log_temperature);
    b->ops->scatter_add_rows(b, d_states, h, rows, n, rep->w.d_states);
    /* the loss sum is on the host now; a lent loss's failure is reported here */
    uform_status_t status = on_host ? UFORM_OK : b->ops->synchronize(b);
    uform_backend_free(b, states), uform_backend_free(b, rows_on_device);
    free(targets), free(bytes), free(starts), free(groups);
    return status;
}
