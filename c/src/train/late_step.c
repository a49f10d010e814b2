/* late_step.c: the late-interaction term of a step (docs/training.md section
 * 9): every replica's token vectors, the term over the world's items, and its
 * gradients back into each replica's d_states.
 *
 * The term reads of each item only its first max(query rows, document rows)
 * rows: a query-only item's span, a document's rows, nothing of an item
 * neither side admitted. Only those rows are gathered, packed item after item:
 * on a mesh each host sends those of its own items (a query-only item longer
 * than the span sends the span), and the world's copy, which every host holds
 * to compute the same term bit for bit (step_world.c), is that much smaller.
 * The term's arithmetic is the same whatever the rows' addresses. */
#include "train/late_step.h"
#include "train/trainer_internal.h"

/* Which rows of each kept item enter the term: sides, the query span and each
 * replica's budgets, walked in item order (section 9). first[item] is the
 * item's first row among this host's. */
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

/* The rows the term reads, item after item: their indices among this host's
 * rows into sent_rows; each item's first becomes its place among them.
 * Returns their count. */
static size_t uform_late_pack(size_t items, size_t *first, const size_t *query_rows,
                              const size_t *document_rows, size_t *sent_rows) {
    size_t sent = 0;
    for (size_t item = 0; item < items; item++) {
        size_t read = query_rows[item] > document_rows[item] ? query_rows[item] : document_rows[item];
        for (size_t k = 0; k < read; k++) sent_rows[sent + k] = first[item] + k;
        first[item] = sent;
        sent += read;
    }
    return sent;
}

uform_status_t uform_late_step(uform_trainer_t *t, const uform_trainer_batch_t *batch,
                               uform_replica_t *replica, size_t replicas, const size_t *kept,
                               const size_t *index, const size_t *first_row, uform_world_t *wd,
                               const uint32_t *bags, const uform_relations_t *relations, float *loss) {
    const size_t h = t->hidden, width = t->late_config.width, row_bytes = width * sizeof(float);
    size_t widest = 1, rows = 0, items = wd->items, world_items = wd->world_items;
    for (size_t r = 0; r < replicas; r++) {
        widest = replica[r].rows > widest ? replica[r].rows : widest;
        rows += replica[r].rows;
    }
    uform_backend_t *b = &t->backend;
    const bool on_host = b->ops->host_memory;
    /* In the backend's memory: this host's vectors (then their gradients),
     * one replica's projection, the norms, the rows sent (and their indices,
     * on a device); then the world's rows and their gradients. On the host:
     * the items' layout (the loss's structures, backend.h), the rows sent,
     * each host's count of them and the term's two scalars. */
    float *own = uform_backend_alloc(b, 2 * rows + widest + 1, row_bytes, "token vectors");
    float *norms = own ? uform_backend_alloc(b, rows + 1, sizeof(float), "token norms") : NULL;
    size_t *layout = uform_alloc(3 * (world_items + items), sizeof(size_t), "late interaction items");
    size_t *sent_rows = uform_alloc(rows + 1, sizeof(size_t), "late interaction rows");
    size_t *rows_of = uform_alloc(wd->hosts, sizeof(size_t), "late interaction rows");
    float *sent = NULL, *vectors = NULL;
    size_t *sent_on_device = NULL;
    float scalars[2] = {0, 0};   /* log inverse temperature, bias */
    uform_status_t status = own && norms && layout && sent_rows && rows_of ? UFORM_OK : UFORM_OUT_OF_MEMORY;
    if (status == UFORM_OK)
        status = uform_trainer_read(t, &scalars[0], t->parameters + t->late_log_inverse_temperature, sizeof(float));
    if (status == UFORM_OK) status = uform_trainer_read(t, &scalars[1], t->parameters + t->late_bias, sizeof(float));
    if (status != UFORM_OK) goto done;
    float *d_own = own + rows * width, *projected = d_own + rows * width;
    size_t *own_layout = layout + 3 * world_items;
    uform_weight_t head = {NULL, t->parameters + t->token_head, width, h};
    for (size_t r = 0; r < replicas; r++) {
        uform_replica_t *rep = &replica[r];
        if (!rep->rows) continue;
        b->ops->linear(b, &head, rep->w.states, h, rep->rows, NULL, false, projected, width);
        b->ops->normalize_forward(b, projected, rep->rows, width, own + rep->world_row_first * width,
                                  norms + rep->world_row_first);
    }
    uform_late_admit(t, batch, replica, replicas, kept, index, first_row, own_layout,
                     own_layout + items, own_layout + 2 * items);
    size_t sent_count = uform_late_pack(items, own_layout, own_layout + items, own_layout + 2 * items, sent_rows);
    size_t sent_first = 0, world_sent = 0;
    status = uform_world_count_rows(wd, sent_count, rows_of, &sent_first);
    for (size_t host = 0; host < wd->hosts && status == UFORM_OK; host++) world_sent += rows_of[host];
    if (status == UFORM_OK) {
        sent = uform_backend_alloc(b, sent_count + 1, row_bytes, "token vectors sent");
        vectors = sent ? uform_backend_alloc(b, 2 * world_sent + 1, row_bytes, "token vectors of the world") : NULL;
        sent_on_device = on_host || !vectors ? NULL
                                              : uform_backend_alloc(b, sent_count + 1, sizeof(size_t), "rows sent");
        if (!vectors || (!on_host && !sent_on_device)) status = UFORM_OUT_OF_MEMORY;
    }
    const size_t *sent_index = on_host ? sent_rows : sent_on_device;
    if (status == UFORM_OK) {
        if (!on_host) b->ops->upload(b, sent_on_device, sent_rows, sent_count * sizeof(size_t));
        b->ops->gather_rows(b, own, width, sent_index, sent_count, sent);
        status = uform_world_gather_rows(wd, sent, rows_of, row_bytes, vectors);
    }
    for (size_t i = 0; i < items; i++) own_layout[i] += sent_first;   /* among the world's rows */
    for (size_t k = 0; k < 3 && status == UFORM_OK; k++)
        status = uform_world_gather_items(wd, own_layout + k * items, sizeof(size_t), layout + k * world_items);
    float *d_vectors = vectors ? vectors + world_sent * width : NULL;
    if (status == UFORM_OK) {
        t->late_rows_gathered = world_sent;
        t->late_rows_of_world = wd->world_rows;
        b->ops->zero(b, d_vectors, world_sent * row_bytes);
        uform_late_batch_t late = {world_items, width, vectors, layout, layout + world_items,
                                   layout + 2 * world_items, bags, relations};
        status = b->ops->late_interaction_loss(
            b, &t->contrastive, t->late_config.pair_loss, &late, scalars[0], scalars[1],
            t->late_config.weight, loss, d_vectors,
            t->gradients + t->late_log_inverse_temperature, t->gradients + t->late_bias);
    }
    if (status == UFORM_OK) {   /* this host's rows' gradients, zero where the term did not read */
        b->ops->zero(b, d_own, rows * row_bytes);
        b->ops->scatter_add_rows(b, d_vectors + sent_first * width, width, sent_index, sent_count, d_own);
    }
    for (size_t r = 0; r < replicas && status == UFORM_OK; r++) {
        uform_replica_t *rep = &replica[r];
        if (!rep->rows) continue;
        size_t first = rep->world_row_first;
        b->ops->zero(b, projected, rep->rows * row_bytes);
        b->ops->normalize_backward(b, d_own + first * width, own + first * width, norms + first, rep->rows,
                                   width, projected);
        b->ops->linear_backward(b, &head, rep->w.states, projected, rep->rows,
                                t->gradients + t->token_head, NULL, rep->w.d_states, true);
    }
    /* the index lives until the scatter above has run */
    if (status == UFORM_OK && !on_host) status = b->ops->synchronize(b);
done:
    uform_backend_free(b, own), uform_backend_free(b, norms), uform_backend_free(b, sent);
    uform_backend_free(b, vectors), uform_backend_free(b, sent_on_device);
    free(layout), free(sent_rows), free(rows_of);
    return status;
}

void uform_trainer_late_rows(const uform_trainer_t *t, size_t *gathered, size_t *world) {
    *gathered = t->late_rows_gathered;
    *world = t->late_rows_of_world;
}
