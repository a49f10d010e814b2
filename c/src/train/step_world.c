/* step_world.c: a step's world, the items of every host of the mesh
 * (docs/distributed.md, docs/training.md section 5).
 *
 * Items are numbered in the world's order: host after host, each host's items
 * in the order given. That number keys the corruption RNG and names the
 * candidates of relation edges, so a mesh step computes what one process
 * holding every item would. Without a mesh the world is this process, and
 * every function here is the identity (nothing is copied or gathered).
 *
 * The terms that pair items across hosts (contrastive, late interaction) run
 * replicated: every host gathers the world's embeddings, token vectors, bags,
 * groups and relations, computes the same loss bit for bit, and keeps the
 * gradient rows of its own items. Their learned temperatures and biases then
 * hold the same gradient on every host, so only host 0 keeps it before the
 * gradients are summed.
 *
 * The engine (Gloo) moves host memory. A trainer on a device gathers its
 * embeddings and token vectors on the GPUs through NCCL where the mesh sums
 * there (mesh_nccl.c), else through host copies: one download, the
 * collective, one upload. The gradients are summed by gradient_sum.c. */
#include "train/trainer_internal.h"
#include "train/mesh.h"

typedef struct {
    uint64_t count;      /* items given */
    uint64_t has_bags;
} uform_world_given_t;

uform_status_t uform_world_begin(uform_trainer_t *t, const uform_trainer_batch_t *batch,
                                 uform_world_t *w) {
    memset(w, 0, sizeof(*w));
    w->mesh = t->mesh;
    w->backend = &t->backend;
    size_t count = batch ? batch->contents.count : 0;
    w->hosts = w->mesh ? w->mesh->hosts : 1;
    w->host = w->mesh ? w->mesh->host : 0;
    w->world_count = count;
    if (!w->mesh) return UFORM_OK;
    w->counts_of = uform_alloc_zeroed(3 * w->hosts, sizeof(size_t), "mesh step");
    uform_world_given_t *given = uform_alloc(w->hosts, sizeof(uform_world_given_t), "mesh step");
    if (!w->counts_of || !given) {
        free(given);
        uform_mesh_abandon(w->mesh, UFORM_OUT_OF_MEMORY);   /* its peers are in the gather below */
        return UFORM_OUT_OF_MEMORY;
    }
    w->items_of = w->counts_of + w->hosts;
    w->edges_of = w->items_of + w->hosts;
    uform_world_given_t mine = {count, batch && batch->bags ? 1u : 0u};
    uform_status_t status = uform_mesh_allgather(w->mesh, &mine, sizeof(mine), given);
    w->world_count = 0;
    for (size_t h = 0; h < w->hosts && status == UFORM_OK; h++) {
        if (h == w->host) w->item_base = w->world_count;
        w->counts_of[h] = (size_t)given[h].count;
        w->world_count += w->counts_of[h];
        if (given[h].has_bags != given[0].has_bags)
            status = uform_fail(UFORM_INVALID_ARGUMENT,
                                "bags: host 0 %s bags and host %zu %s: give every host's items bags, "
                                "or none",
                                given[0].has_bags ? "gave" : "gave no", h,
                                given[h].has_bags ? "did" : "did not");
    }
    if (status == UFORM_OK && w->world_count > UINT32_MAX)
        status = uform_fail(UFORM_INVALID_ARGUMENT, "contents: the world's step holds %zu items, "
                            "more than 2^32 - 1", w->world_count);
    free(given);
    return status;
}

uform_status_t uform_world_agree(uform_world_t *w, uform_status_t status, uint64_t step) {
    if (!w->mesh) return status;
    /* A device's failure so far is this host's word here: found later, it
     * would make this host leave collectives its peers wait in. */
    if (status == UFORM_OK && !w->backend->ops->host_memory) status = w->backend->ops->synchronize(w->backend);
    char what[48];
    snprintf(what, sizeof(what), "step %llu", (unsigned long long)step);
    uform_status_t answer = uform_mesh_agree(w->mesh, status, what);
    if (answer != UFORM_OK) w->failure_agreed = true;
    return answer;
}

typedef struct {
    uint64_t items, rows, selected, media_masked[4], choice_items;
} uform_world_summary_t;

uform_status_t uform_world_summary(uform_world_t *w, const size_t *index, size_t count,
                                   size_t items, size_t rows, size_t selected,
                                   const size_t *media_masked, size_t choice_items) {
    w->items = items;
    w->world_items = items;
    w->world_rows = rows;
    w->selected = selected;
    w->choice_items = choice_items;
    memcpy(w->media_masked, media_masked, sizeof(w->media_masked));
    if (!w->mesh) return UFORM_OK;
    uform_world_summary_t mine = {items, rows, selected,
                                  {media_masked[0], media_masked[1], media_masked[2], media_masked[3]},
                                  choice_items};
    uform_world_summary_t *all = uform_alloc(w->hosts, sizeof(mine), "mesh step");
    uint32_t *local = uform_alloc(count ? count : 1, sizeof(uint32_t), "mesh step");
    uint32_t *kept = uform_alloc(w->world_count ? w->world_count : 1, sizeof(uint32_t), "mesh step");
    w->world_index = uform_alloc(w->world_count ? w->world_count : 1, sizeof(size_t), "mesh step");
    size_t *bytes = uform_alloc(w->hosts, sizeof(size_t), "mesh step");
    uform_status_t status = all && local && kept && w->world_index && bytes ? UFORM_OK : UFORM_OUT_OF_MEMORY;
    if (status != UFORM_OK) uform_mesh_abandon(w->mesh, status);   /* its peers are in the gathers below */
    if (status == UFORM_OK) status = uform_mesh_allgather(w->mesh, &mine, sizeof(mine), all);
    if (status == UFORM_OK) {
        for (size_t i = 0; i < count; i++) local[i] = index[i] == SIZE_MAX ? UINT32_MAX : (uint32_t)index[i];
        for (size_t h = 0; h < w->hosts; h++) bytes[h] = w->counts_of[h] * sizeof(uint32_t);
        status = uform_mesh_allgatherv(w->mesh, local, bytes, kept);
    }
    if (status == UFORM_OK) {
        w->world_items = w->world_rows = w->selected = w->choice_items = 0;
        memset(w->media_masked, 0, sizeof(w->media_masked));
        for (size_t h = 0, at = 0; h < w->hosts; h++) {
            if (h == w->host) w->kept_base = w->world_items, w->row_base = w->world_rows;
            for (size_t i = 0; i < w->counts_of[h]; i++, at++)
                w->world_index[at] = kept[at] == UINT32_MAX ? SIZE_MAX : w->world_items + kept[at];
            w->items_of[h] = (size_t)all[h].items;
            w->world_items += w->items_of[h];
            w->world_rows += (size_t)all[h].rows;
            w->selected += (size_t)all[h].selected;
            w->choice_items += (size_t)all[h].choice_items;
            for (size_t m = 0; m < 4; m++) w->media_masked[m] += (size_t)all[h].media_masked[m];
        }
    }
    free(all), free(local), free(kept), free(bytes);
    return status;
}

const size_t *uform_world_candidates(const uform_world_t *w, const size_t *index) {
    return w->mesh ? w->world_index : index;
}

/* Every host's `per_host[h]` units of `unit` bytes, in host order. */
static uform_status_t uform_world_gather(uform_world_t *w, const void *local, const size_t *per_host,
                                         size_t unit, void *out) {
    size_t *bytes = uform_alloc(w->hosts, sizeof(size_t), "mesh step");
    if (!bytes) return UFORM_OUT_OF_MEMORY;
    for (size_t h = 0; h < w->hosts; h++) bytes[h] = per_host[h] * unit;
    uform_status_t status = uform_mesh_allgatherv(w->mesh, local, bytes, out);
    free(bytes);
    return status;
}

uform_status_t uform_world_gather_items(uform_world_t *w, const void *local, size_t item_bytes,
                                        void *out) {
    if (!w->mesh) {
        if (out != local) memmove(out, local, w->items * item_bytes);
        return UFORM_OK;
    }
    return uform_world_gather(w, local, w->items_of, item_bytes, out);
}

/* uform_world_gather of the backend's memory: in place on the host; on the
 * GPUs through NCCL where the mesh sums there; else through host copies. */
static uform_status_t uform_world_gather_vectors(uform_world_t *w, const void *local, const size_t *per_host,
                                                 size_t unit, void *out) {
    uform_backend_t *b = w->backend;
    if (b->ops->host_memory) return uform_world_gather(w, local, per_host, unit, out);
    if (uform_mesh_gathers_on_device(w->mesh)) {
        size_t *bytes = uform_alloc(w->hosts, sizeof(size_t), "mesh step");
        if (!bytes) {
            uform_mesh_abandon(w->mesh, UFORM_OUT_OF_MEMORY);   /* its peers are in the gather */
            return UFORM_OUT_OF_MEMORY;
        }
        for (size_t h = 0; h < w->hosts; h++) bytes[h] = per_host[h] * unit;
        uform_status_t status = uform_mesh_device_gather(w->mesh, b, local, bytes, out);
        free(bytes);
        return status;
    }
    size_t total = 0;
    for (size_t h = 0; h < w->hosts; h++) total += per_host[h];
    size_t mine = per_host[w->host] * unit;
    uint8_t *staging = uform_alloc(mine + total * unit + 1, 1, "mesh step (host copies of vectors)");
    if (!staging) return UFORM_OUT_OF_MEMORY;
    b->ops->download(b, staging, local, mine);
    uform_status_t status = b->ops->synchronize(b);
    if (status == UFORM_OK) status = uform_world_gather(w, staging, per_host, unit, staging + mine);
    if (status == UFORM_OK) {
        b->ops->upload(b, out, staging + mine, total * unit);
        status = b->ops->synchronize(b);   /* before the host copy goes */
    }
    free(staging);
    return status;
}

uform_status_t uform_world_gather_item_vectors(uform_world_t *w, const void *local, size_t item_bytes,
                                               void *out) {
    return uform_world_gather_vectors(w, local, w->items_of, item_bytes, out);
}

uform_status_t uform_world_count_rows(uform_world_t *w, size_t rows, size_t *rows_of, size_t *first) {
    *first = 0;
    if (!w->mesh) {
        rows_of[0] = rows;
        return UFORM_OK;
    }
    uint64_t mine = rows, *all = uform_alloc(w->hosts, sizeof(uint64_t), "mesh step");
    if (!all) {
        uform_mesh_abandon(w->mesh, UFORM_OUT_OF_MEMORY);   /* its peers are in the gather */
        return UFORM_OUT_OF_MEMORY;
    }
    uform_status_t status = uform_mesh_allgather(w->mesh, &mine, sizeof(mine), all);
    for (size_t h = 0; h < w->hosts && status == UFORM_OK; h++) {
        rows_of[h] = (size_t)all[h];
        if (h < w->host) *first += rows_of[h];
    }
    free(all);
    return status;
}

uform_status_t uform_world_gather_rows(uform_world_t *w, const void *local, const size_t *rows_of,
                                       size_t row_bytes, void *out) {
    if (!w->mesh) {
        w->backend->ops->copy(w->backend, out, local, rows_of[0] * row_bytes);
        return UFORM_OK;
    }
    return uform_world_gather_vectors(w, local, rows_of, row_bytes, out);
}

uform_status_t uform_world_gather_relations(uform_world_t *w, const uform_relations_t *local,
                                            uform_edges_storage_t *storage, uform_relations_t *out) {
    memset(out, 0, sizeof(*out));
    const uform_edges_t *kinds[3] = {&local->attract, &local->repel, &local->ignore};
    uform_edges_t *into[3] = {&out->attract, &out->repel, &out->ignore};
    size_t n = w->world_items;
    uint64_t *counts = uform_alloc(2 * (n + w->items + 1), sizeof(uint64_t), "mesh relations");
    if (!counts) return UFORM_OUT_OF_MEMORY;
    uint64_t *mine = counts + n + 1;
    uform_status_t status = UFORM_OK;
    for (size_t k = 0; k < 3 && status == UFORM_OK; k++) {
        const uform_edges_t *e = kinds[k];
        for (size_t a = 0; a < w->items; a++) mine[a] = e->offsets ? e->offsets[a + 1] - e->offsets[a] : 0;
        status = uform_world_gather(w, mine, w->items_of, sizeof(uint64_t), counts);
        if (status != UFORM_OK) break;
        size_t total = 0;
        for (size_t h = 0, a = 0; h < w->hosts; h++) {
            w->edges_of[h] = 0;
            for (size_t end = a + w->items_of[h]; a < end; a++) w->edges_of[h] += (size_t)counts[a];
            total += w->edges_of[h];
        }
        storage[k].offsets = uform_alloc(n + 1, sizeof(size_t), "mesh relations");
        storage[k].ids = uform_alloc(total ? total : 1, sizeof(uint32_t), "mesh relations");
        storage[k].weights = uform_alloc(total ? total : 1, sizeof(float), "mesh relations");
        if (!storage[k].offsets || !storage[k].ids || !storage[k].weights) {
            status = UFORM_OUT_OF_MEMORY;
            break;
        }
        storage[k].offsets[0] = 0;
        for (size_t a = 0; a < n; a++) storage[k].offsets[a + 1] = storage[k].offsets[a] + (size_t)counts[a];
        size_t own = e->offsets ? e->offsets[w->items] : 0;
        static const uint32_t no_id = 0;
        static const float no_weight = 0;
        status = uform_world_gather(w, own ? (const void *)e->ids : &no_id, w->edges_of,
                                    sizeof(uint32_t), storage[k].ids);
        if (status == UFORM_OK)
            status = uform_world_gather(w, own ? (const void *)e->weights : &no_weight, w->edges_of,
                                        sizeof(float), storage[k].weights);
        *into[k] = (uform_edges_t){storage[k].offsets, storage[k].ids, storage[k].weights};
    }
    free(counts);
    return status;
}

uform_status_t uform_world_sum_doubles(uform_world_t *w, double *values, size_t count) {
    if (!w->mesh) return UFORM_OK;
    double *all = uform_alloc(w->hosts * count, sizeof(double), "mesh sums");
    if (!all) return UFORM_OUT_OF_MEMORY;
    uform_status_t status = uform_mesh_allgather(w->mesh, values, count * sizeof(double), all);
    if (status == UFORM_OK)
        for (size_t i = 0; i < count; i++) {
            double sum = 0;   /* host order: the same bits on every host */
            for (size_t h = 0; h < w->hosts; h++) sum += all[h * count + i];
            values[i] = sum;
        }
    free(all);
    return status;
}

/* Between agreements every host computes the replicated parts (the world's
 * terms, their checks) from the same gathered data: a verdict there (DIVERGED,
 * a world too large) is every host's, reached together, and keeps the mesh.
 * What one host meets alone is its memory or its device. */
static bool uform_world_failure_is_local(uform_status_t status) {
    return status == UFORM_OUT_OF_MEMORY || status == UFORM_DEVICE;
}

void uform_world_end(uform_world_t *w, uform_status_t status) {
    if (w->mesh && !w->failure_agreed && uform_world_failure_is_local(status))
        uform_mesh_abandon(w->mesh, status);
    uform_world_free(w);
}

void uform_world_free(uform_world_t *w) {
    free(w->counts_of);
    free(w->world_index);
    memset(w, 0, sizeof(*w));
}
