/* step_layers.c: the encoder in training: its forward that keeps what backward
 * needs, the backward written out layer by layer, the masked-text head, the pooled
 * embeddings, and the choices and late-interaction terms of a replica. */
#include "train/trainer_internal.h"

/* ---- helpers ------------------------------------------------------------------ */

static uform_matrix_t uform_rows_of(const float *data, size_t stride) {
    return (uform_matrix_t){data, stride, false};
}
static uform_matrix_t uform_transposed(const float *data, size_t stride) {
    return (uform_matrix_t){data, stride, true};
}

typedef struct {
    const float *dy;
    size_t rows, cols;
    float *sums;
} uform_column_task_t;

/* sums[c] += sum over rows of dy[r][c], rows in order: one owner per column. */
static void uform_column_sums_range(void *context, size_t begin, size_t end, size_t thread) {
    (void)thread;
    const uform_column_task_t *task = context;
    for (size_t r = 0; r < task->rows; r++) {
        const float *row = task->dy + r * task->cols;
        for (size_t c = begin; c < end; c++) task->sums[c] += row[c];
    }
}

static void uform_column_sums(uform_executor_t *executor, const float *dy, size_t rows, size_t cols,
                              float *sums) {
    uform_column_task_t task = {dy, rows, cols, sums};
    uform_parallel_for(executor, cols, 64, uform_column_sums_range, &task);
}

/* y = x W^T + b over `rows` (W [n, k] at parameters + weight). */
static void uform_linear(uform_trainer_t *t, const float *x, size_t rows, size_t k, size_t n,
                         size_t weight, size_t bias, bool accumulate, float *y) {
    uform_sgemm(t->executor, rows, n, k, uform_rows_of(x, k),
                uform_transposed(t->parameters + weight, k), t->parameters + bias, accumulate, y, n);
}

/* dW += dy^T x, db += column sums of dy, dx (+)= dy W. */
static void uform_linear_backward(uform_trainer_t *t, const float *x, const float *dy, size_t rows,
                                  size_t k, size_t n, size_t weight, size_t bias, float *dx,
                                  bool accumulate_dx) {
    uform_sgemm(t->executor, n, k, rows, uform_transposed(dy, n), uform_rows_of(x, k), NULL, true,
                t->gradients + weight, k);
    uform_column_sums(t->executor, dy, rows, n, t->gradients + bias);
    uform_sgemm(t->executor, rows, k, n, uform_rows_of(dy, n),
                uform_rows_of(t->parameters + weight, k), NULL, accumulate_dx, dx, k);
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
                                          const uform_batch_t *batch, const uform_media_rows_t *media) {
    size_t rows = w->rows, h = t->hidden;
    uform_executor_t *ex = t->executor;
    float *p = t->parameters;
    uform_embedding_forward(p + t->bytes_table, p + t->modality, w->ids, rows, h, w->layers[0].input);
    for (size_t m = UFORM_MODALITY_IMAGE; m <= UFORM_MODALITY_AUDIO; m++) {
        if (!t->media[m].width) continue;
        uform_media_parameters_t parameters = uform_media_parameters(t, m);
        UFORM_TRY(uform_media_input_forward(ex, &parameters, &media[m], h, w->layers[0].input));
    }
    uform_rope_tables(ex, batch, w->cosines, w->sines);
    for (size_t l = 0; l < t->depth; l++) {
        const uform_block_slots_t *b = &t->blocks[l];
        uform_layer_saved_t *s = &w->layers[l];
        uform_layer_norm_forward(ex, s->input, rows, h, p + b->norm1_weight, p + b->norm1_bias,
                                 s->normed1, s->mean1, s->rstd1);
        uform_linear(t, s->normed1, rows, h, 3 * h, b->qkv_weight, b->qkv_bias, false, s->qkv);
        uform_rope_forward(ex, s->qkv, rows, h, w->cosines, w->sines);
        uform_attention_forward(ex, s->qkv, h, w->spans, w->items, s->attended, s->logsumexp);
        memcpy(s->middle, s->input, rows * h * sizeof(float));
        uform_linear(t, s->attended, rows, h, h, b->out_weight, b->out_bias, true, s->middle);
        uform_layer_norm_forward(ex, s->middle, rows, h, p + b->norm2_weight, p + b->norm2_bias,
                                 s->normed2, s->mean2, s->rstd2);
        uform_linear(t, s->normed2, rows, h, 4 * h, b->up_weight, b->up_bias, false, s->up);
        uform_gelu_forward(ex, s->up, rows * 4 * h, s->activated);
        float *next = l + 1 < t->depth ? w->layers[l + 1].input : w->output;
        memcpy(next, s->middle, rows * h * sizeof(float));
        uform_linear(t, s->activated, rows, 4 * h, h, b->down_weight, b->down_bias, true, next);
    }
    uform_layer_norm_forward(ex, w->output, rows, h, p + t->norm_weight, p + t->norm_bias,
                             w->states, w->final_mean, w->final_rstd);
    return UFORM_OK;
}

void uform_backward_train(uform_trainer_t *t, uform_workspace_t *w) {
    size_t rows = w->rows, h = t->hidden;
    uform_executor_t *ex = t->executor;
    float *p = t->parameters, *g = t->gradients;
    /* d_states holds dLoss/dh; into the final norm */
    memset(w->d_x, 0, rows * h * sizeof(float));
    uform_layer_norm_backward(ex, w->d_states, w->output, p + t->norm_weight, w->final_mean,
                              w->final_rstd, rows, h, w->d_x, g + t->norm_weight, g + t->norm_bias);
    for (size_t l = t->depth; l-- > 0;) {
        const uform_block_slots_t *b = &t->blocks[l];
        uform_layer_saved_t *s = &w->layers[l];
        /* x_next = middle + down(gelu(up(norm2(middle)))) */
        memset(w->d_wide, 0, rows * 4 * h * sizeof(float));
        uform_linear_backward(t, s->activated, w->d_x, rows, 4 * h, h, b->down_weight, b->down_bias,
                              w->d_wide, false);
        memset(w->d_wide2, 0, rows * 4 * h * sizeof(float));
        uform_gelu_backward(ex, s->up, w->d_wide, rows * 4 * h, w->d_wide2);
        uform_linear_backward(t, s->normed2, w->d_wide2, rows, h, 4 * h, b->up_weight, b->up_bias,
                              w->d_normed, false);
        memcpy(w->d_middle, w->d_x, rows * h * sizeof(float));
        uform_layer_norm_backward(ex, w->d_normed, s->middle, p + b->norm2_weight, s->mean2, s->rstd2,
                                  rows, h, w->d_middle, g + b->norm2_weight, g + b->norm2_bias);
        /* middle = input + out(attention(rope(qkv(norm1(input))))) */
        uform_linear_backward(t, s->attended, w->d_middle, rows, h, h, b->out_weight, b->out_bias,
                              w->d_attended, false);
        memset(w->d_qkv, 0, rows * 3 * h * sizeof(float));
        uform_attention_backward(ex, s->qkv, s->attended, w->d_attended, s->logsumexp, h, w->spans,
                                 w->items, w->d_qkv);
        uform_rope_backward(ex, w->d_qkv, rows, h, w->cosines, w->sines);
        uform_linear_backward(t, s->normed1, w->d_qkv, rows, h, 3 * h, b->qkv_weight, b->qkv_bias,
                              w->d_normed, false);
        memcpy(w->d_x, w->d_middle, rows * h * sizeof(float));
        uform_layer_norm_backward(ex, w->d_normed, s->input, p + b->norm1_weight, s->mean1, s->rstd1,
                                  rows, h, w->d_x, g + b->norm1_weight, g + b->norm1_bias);
    }
    uform_embedding_backward(ex, w->d_x, w->ids, rows, h, g + t->bytes_table, g + t->modality);
}

/* The masked text loss and its gradient into d_states (scaled by weight). */
float uform_masked_text(uform_trainer_t *t, uform_workspace_t *w, float weight,
                               size_t world_selected) {
    size_t h = t->hidden, n = w->selected;
    if (n == 0) return 0.0f;
    float *p = t->parameters, *g = t->gradients;
    float *gathered = w->d_normed; /* reuse: [selected, H] <= [rows, H] */
    for (size_t i = 0; i < n; i++)
        memcpy(gathered + i * h, w->states + w->selected_rows[i] * h, h * sizeof(float));
    uform_sgemm(t->executor, n, UFORM_BYTES, h, uform_rows_of(gathered, h),
                uform_transposed(p + t->bytes_table, h), p + t->bytes_bias, false, w->logits, UFORM_BYTES);
    uform_cross_entropy_forward(w->logits, n, UFORM_BYTES, w->targets, w->losses);
    double total = 0;
    for (size_t i = 0; i < n; i++) total += w->losses[i];
    float scale = weight / (float)world_selected;
    for (size_t i = 0; i < n; i++) w->scale[i] = scale;
    memset(w->d_logits, 0, n * UFORM_BYTES * sizeof(float));
    uform_cross_entropy_backward(w->logits, n, UFORM_BYTES, w->targets, w->scale, w->d_logits);
    /* logits = gathered . bytes[0:256]^T + bias */
    uform_sgemm(t->executor, UFORM_BYTES, h, n, uform_transposed(w->d_logits, UFORM_BYTES),
                uform_rows_of(gathered, h), NULL, true, g + t->bytes_table, h);
    uform_column_sums(t->executor, w->d_logits, n, UFORM_BYTES, g + t->bytes_bias);
    float *d_gathered = w->d_attended; /* reuse */
    uform_sgemm(t->executor, n, h, UFORM_BYTES, uform_rows_of(w->d_logits, UFORM_BYTES),
                uform_rows_of(p + t->bytes_table, h), NULL, false, d_gathered, h);
    for (size_t i = 0; i < n; i++) {
        float *dh = w->d_states + w->selected_rows[i] * h;
        for (size_t c = 0; c < h; c++) dh[c] += d_gathered[i * h + c];
    }
    return (float)(total / (double)world_selected);
}

/* Pooled, projected, normalised embeddings of the kept items (w->embeddings). */
void uform_embed(uform_trainer_t *t, uform_workspace_t *w) {
    size_t h = t->hidden, d = t->dimensions;
    uform_mean_pool_forward(w->states, h, w->spans, w->items, w->pooled);
    uform_sgemm(t->executor, w->items, d, h, uform_rows_of(w->pooled, h),
                uform_transposed(t->parameters + t->embedding_head, h), NULL, false, w->projected, d);
    uform_normalize_forward(w->projected, w->items, d, w->embeddings, w->norms);
}

void uform_embed_backward(uform_trainer_t *t, uform_workspace_t *w) {
    size_t h = t->hidden, d = t->dimensions;
    memset(w->d_projected, 0, w->items * d * sizeof(float));
    uform_normalize_backward(w->d_embeddings, w->embeddings, w->norms, w->items, d, w->d_projected);
    uform_sgemm(t->executor, d, h, w->items, uform_transposed(w->d_projected, d),
                uform_rows_of(w->pooled, h), NULL, true, t->gradients + t->embedding_head, h);
    uform_sgemm(t->executor, w->items, h, d, uform_rows_of(w->d_projected, d),
                uform_rows_of(t->parameters + t->embedding_head, h), NULL, false, w->d_pooled, h);
    uform_mean_pool_backward(w->d_pooled, h, w->spans, w->items, w->d_states);
}

/* The choices term of one replica's items (docs/training.md section 10):
 * gathers the MASK rows' states, runs the loss, scatters dLoss/dh back. */
uform_status_t uform_replica_choices(uform_trainer_t *t, const uform_trainer_batch_t *batch,
                                            uform_replica_t *rep, const size_t *kept,
                                            const size_t *first_row, float scale, double *loss_sum) {
    const size_t h = t->hidden;
    const size_t *offsets = batch->choices.offsets;
    size_t n = 0, total = 0;
    for (size_t i = rep->first; i < rep->last; i++)
        if (kept[i] != SIZE_MAX && uform_has_choices(batch, i)) n++, total += offsets[i + 1] - offsets[i];
    if (n == 0) return UFORM_OK;
    float *states = uform_alloc(2 * n, h * sizeof(float), "choice states");
    float *targets = uform_alloc(total, sizeof(float), "choice targets");
    uint8_t *bytes = uform_alloc(total, 1, "choice bytes");
    size_t *starts = uform_alloc(2 * n + 1, sizeof(size_t), "choice items");
    uint32_t *groups = uform_alloc(n, sizeof(uint32_t), "choice groups");
    if (!states || !targets || !bytes || !starts || !groups) {
        free(states), free(targets), free(bytes), free(starts), free(groups);
        return UFORM_OUT_OF_MEMORY;
    }
    float *d_states = states + n * h;
    size_t *mask_rows = starts + n + 1;
    size_t c = 0;
    starts[0] = 0;
    for (size_t i = rep->first; i < rep->last; i++) {
        if (kept[i] == SIZE_MAX || !uform_has_choices(batch, i)) continue;
        size_t length = offsets[i + 1] - offsets[i];
        mask_rows[c] = first_row[i] + kept[i] - 1;
        memcpy(states + c * h, rep->w.states + mask_rows[c] * h, h * sizeof(float));
        memcpy(bytes + starts[c], (const uint8_t *)batch->choices.data + offsets[i], length);
        memcpy(targets + starts[c], batch->choice_targets + offsets[i], length * sizeof(float));
        groups[c] = batch->temperature_groups ? batch->temperature_groups[i] : 0;
        starts[c + 1] = starts[c] + length;
        c++;
    }
    uform_choices_batch_t choices = {n, h, states, bytes, targets, starts, groups};
    float *g = t->gradients;
    uform_choices_loss(&choices, t->parameters + t->bytes_table, t->parameters + t->bytes_bias,
                       t->parameters + t->choice_log_temperature, scale, loss_sum, d_states,
                       g + t->bytes_table, g + t->bytes_bias, g + t->choice_log_temperature);
    for (size_t k = 0; k < n; k++) {
        float *target = rep->w.d_states + mask_rows[k] * h;
        for (size_t e = 0; e < h; e++) target[e] += d_states[k * h + e];
    }
    free(states), free(targets), free(bytes), free(starts), free(groups);
    return UFORM_OK;
}

/* Which rows of each kept item enter the late-interaction term: sides, the
 * query span and each replica's budgets, walked in item order (section 9). */
static void uform_late_admit(const uform_trainer_t *t, const uform_trainer_batch_t *batch,
                             const uform_replica_t *replica, size_t replicas, const size_t *kept,
                             const size_t *index, const size_t *first_row, size_t *first,
                             size_t *query_rows, size_t *document_rows) {
    const uform_late_interaction_t *c = &t->late_config;
    for (size_t r = 0; r < replicas; r++) {
        const uform_replica_t *rep = &replica[r];
        size_t query_tokens = 0, documents = 0, document_tokens = 0;
        for (size_t i = rep->first; i < rep->last; i++) {
            if (kept[i] == SIZE_MAX) continue;
            size_t item = index[i], n = kept[i];
            uint32_t side = batch->sides ? batch->sides[i] : UFORM_SIDE_QUERY_AND_DOCUMENT;
            first[item] = rep->world_row_first + first_row[i];
            query_rows[item] = document_rows[item] = 0;
            if (n == 0) continue;
            size_t span = n < c->max_query_span ? n : c->max_query_span;
            if ((side == UFORM_SIDE_QUERY || side == UFORM_SIDE_QUERY_AND_DOCUMENT) &&
                query_tokens + span <= c->max_query_tokens_per_device) {
                query_rows[item] = span;
                query_tokens += span;
            }
            if ((side == UFORM_SIDE_DOCUMENT || side == UFORM_SIDE_QUERY_AND_DOCUMENT) &&
                documents < c->max_documents_per_device &&
                document_tokens + n <= c->max_document_tokens_per_device) {
                document_rows[item] = n;
                documents++;
                document_tokens += n;
            }
        }
    }
}

/* Token vectors of every replica's rows, the late-interaction term over the
 * world, and its gradients back into each replica's d_states. */
uform_status_t uform_late_step(uform_trainer_t *t, const uform_trainer_batch_t *batch,
                                      uform_replica_t *replica, size_t replicas, const size_t *kept,
                                      const size_t *index, const size_t *first_row, size_t items,
                                      size_t world_rows, const uint32_t *bags,
                                      const uform_relations_t *relations, float *loss) {
    const size_t h = t->hidden, width = t->late_config.width;
    size_t widest = 1;
    for (size_t r = 0; r < replicas; r++) widest = replica[r].rows > widest ? replica[r].rows : widest;
    float *vectors = uform_alloc_aligned(2 * world_rows + widest, width * sizeof(float), "token vectors");
    float *norms = uform_alloc(world_rows + 1, sizeof(float), "token norms");
    size_t *layout = uform_alloc(3 * items, sizeof(size_t), "late interaction items");
    if (!vectors || !norms || !layout) {
        uform_free_aligned(vectors), free(norms), free(layout);
        return UFORM_OUT_OF_MEMORY;
    }
    float *d_vectors = vectors + world_rows * width, *projected = d_vectors + world_rows * width;
    const float *p = t->parameters;
    for (size_t r = 0; r < replicas; r++) {
        uform_replica_t *rep = &replica[r];
        if (!rep->rows) continue;
        uform_sgemm(t->executor, rep->rows, width, h, uform_rows_of(rep->w.states, h),
                    uform_transposed(p + t->token_head, h), NULL, false, projected, width);
        uform_normalize_forward(projected, rep->rows, width, vectors + rep->world_row_first * width,
                                norms + rep->world_row_first);
    }
    uform_late_admit(t, batch, replica, replicas, kept, index, first_row, layout, layout + items,
                     layout + 2 * items);
    memset(d_vectors, 0, world_rows * width * sizeof(float));
    uform_late_batch_t late = {items, width, vectors, layout, layout + items, layout + 2 * items,
                               bags, relations};
    uform_status_t status = uform_late_interaction_loss(
        t->executor, &t->contrastive, t->late_config.pair_loss, &late,
        p[t->late_log_inverse_temperature], p[t->late_bias], t->late_config.weight, loss, d_vectors,
        t->gradients + t->late_log_inverse_temperature, t->gradients + t->late_bias);
    for (size_t r = 0; r < replicas && status == UFORM_OK; r++) {
        uform_replica_t *rep = &replica[r];
        if (!rep->rows) continue;
        size_t base = rep->world_row_first;
        memset(projected, 0, rep->rows * width * sizeof(float));
        uform_normalize_backward(d_vectors + base * width, vectors + base * width, norms + base,
                                 rep->rows, width, projected);
        uform_sgemm(t->executor, width, h, rep->rows, uform_transposed(projected, width),
                    uform_rows_of(rep->w.states, h), NULL, true, t->gradients + t->token_head, h);
        uform_sgemm(t->executor, rep->rows, h, width, uform_rows_of(projected, width),
                    uform_rows_of(p + t->token_head, h), NULL, true, rep->w.d_states, h);
    }
    uform_free_aligned(vectors), free(norms), free(layout);
    return status;
}
