/* replica_group.c: a trainer over several GPUs of one process (Trainer.init_vram
 * on an executor of several GPUs; docs/gpu.md, "Several GPUs").
 *
 * One replica per GPU, each a whole one-GPU trainer (its weights, moments and
 * workspaces on its GPU), joined by in-process collectives (mesh_local.c)
 * exactly as the hosts of a mesh are joined by Gloo (step_world.c). A step
 * splits the caller's items among the GPUs by token count, in order (the rule
 * of the CPU trainer's replicas: uform_split_by_tokens), so the world's items
 * are the caller's in the caller's order and relation ids need no remapping;
 * each replica steps its share on a thread of its own; the pairing terms run
 * over the gathered world; the gradients are summed in GPU order; every
 * replica applies the same update to the same weights, so they stay equal bit
 * for bit, and saves and tensor reads use GPU 0's.
 *
 * The batch is checked and its media tokenized once, here, so a refusal names
 * the caller's item indices.
 *
 * On a mesh (the process a host of it, each host with its GPUs) the replicas
 * are ranks of the whole world: each collective runs among this process's
 * threads, then across hosts by GPU 0's thread (mesh.c, mesh.h: parent); the
 * world's items are host after host, each host's split among its GPUs. */
#include "train/trainer_internal.h"
#include "train/trainer_on_device.h"
#include <pthread.h>

struct uform_replica_group {
    uform_mesh_t *mesh;            /* the mesh this process is a host of (taken), or NULL */
    size_t count;
    uform_trainer_t **replicas;    /* [count]: replica g trains on GPU g of the executor */
    uform_mesh_t **meshes;         /* [count]: replica g's view of the collectives */
    uform_local_ranks_t *engine;
    /* [count]: the GPUs' NCCL communicators of a group without a mesh (a
     * mesh's are its own), or NULL: the gradients summed in host memory */
    struct uform_nccl **nccl;
    uform_arena_t **arenas;        /* [count]: a replica's embeddings, before they are joined */
};

void uform_group_free(uform_replica_group_t *g) {
    if (!g) return;
    for (size_t r = 0; r < g->count; r++) {
        if (g->replicas && g->replicas[r]) {
            g->replicas[r]->mesh = NULL;   /* the views are this group's, not taken meshes */
            uform_trainer_free(g->replicas[r]);
        }
        if (g->arenas) uform_arena_free(g->arenas[r]);
    }
    bool broken = false;
    for (size_t r = 0; g->meshes && r < g->count; r++) broken = broken || g->meshes[r]->broken;
    uform_nccl_group_free(g->nccl, g->count, broken);
    uform_mesh_local_views_free(g->meshes, g->count, g->engine);
    uform_mesh_release(g->mesh);
    free(g->replicas);
    free(g->arenas);
    free(g);
}

uform_status_t uform_trainer_init_on_devices(uform_executor_t *executor, const uform_trainer_options_t *options,
                                             const uform_backend_t *devices, size_t count,
                                             uform_trainer_t **result) {
    if (!result) return uform_fail(UFORM_INVALID_ARGUMENT, "trainer: the out-pointer is NULL");
    *result = NULL;
    if (!devices || count == 0) return uform_fail(UFORM_INVALID_ARGUMENT, "devices: none given");
    if (count == 1) return uform_trainer_init_on_device(executor, options, &devices[0], result);
    if (!executor) return uform_fail(UFORM_INVALID_ARGUMENT, "executor: NULL");
    if (!options) return uform_fail(UFORM_INVALID_ARGUMENT, "options: NULL");
    /* A mesh is taken first: a trainer that cannot take it joins no collective. */
    uform_mesh_t *mesh = options->mesh;
    if (mesh) UFORM_TRY(uform_mesh_take(mesh, executor));
    if (mesh && mesh->devices[mesh->host] != count) {   /* said to the peers, waiting at the init's agreement */
        uform_status_t status = uform_fail(UFORM_INVALID_ARGUMENT,
                                           "mesh: it counts %zu devices on this host, the trainer %zu; bootstrap "
                                           "it on the trainer's executor", mesh->devices[mesh->host], count);
        status = uform_mesh_agree(mesh, status, "Trainer init");
        uform_mesh_release(mesh);
        return status;
    }
    uform_trainer_t *t = uform_alloc_zeroed(1, sizeof(*t), "trainer");
    uform_replica_group_t *g = uform_alloc_zeroed(1, sizeof(*g), "trainer replicas");
    if (!t || !g) {
        free(t), free(g);
        /* the peers wait for this host at the first agreement: tell them */
        if (mesh) (void)uform_mesh_agree(mesh, UFORM_OUT_OF_MEMORY, "Trainer init");
        uform_mesh_release(mesh);
        return UFORM_OUT_OF_MEMORY;
    }
    g->mesh = mesh;
    atomic_flag_clear(&t->busy);
    t->executor = executor;
    t->group = g;
    g->count = count;
    g->replicas = uform_alloc_zeroed(count, sizeof(uform_trainer_t *), "trainer replicas");
    g->arenas = uform_alloc_zeroed(count, sizeof(uform_arena_t *), "trainer replicas");
    uform_status_t status = g->replicas && g->arenas ? UFORM_OK : UFORM_OUT_OF_MEMORY;
    /* Every replica from the same options (and checkpoint): the same weights.
     * Progress hears GPU 0's resume only, the floats of one copy. */
    for (size_t r = 0; r < count && status == UFORM_OK; r++) {
        uform_trainer_options_t own = *options;
        own.mesh = NULL;   /* joined through the views below */
        if (r) memset(&own.progress, 0, sizeof(own.progress));
        status = uform_trainer_init_on_device(executor, &own, &devices[r], &g->replicas[r]);
        if (status != UFORM_OK) {
            char where[64];
            snprintf(where, sizeof(where), "the replica on GPU %zu of %zu", r, count);
            uform_fail_context(status, where);
        }
        if (status == UFORM_OK) status = uform_arena_init_ram(&g->arenas[r]);
    }
    if (status == UFORM_OK) status = uform_mesh_local_views(executor, count, mesh, &g->meshes, &g->engine);
    /* the gradients summed on the GPUs: through the mesh's communicators, or the group's own */
    if (status == UFORM_OK && !mesh) status = uform_nccl_group_connect(devices, count, &g->nccl);
    for (size_t r = 0; r < count && status == UFORM_OK; r++)
        g->meshes[r]->nccl = mesh ? (mesh->nccl_owned ? mesh->nccl_owned[r] : NULL) : (g->nccl ? g->nccl[r] : NULL);
    /* On a mesh every host gets here, and all go on only with equal trainers
     * (GPU 0's stands for the host's: its replicas are equal by construction). */
    if (mesh) status = uform_trainer_join_mesh(g->replicas ? g->replicas[0] : NULL, mesh, status);
    for (size_t r = 0; r < count && status == UFORM_OK; r++) g->replicas[r]->mesh = g->meshes[r];
    if (status != UFORM_OK) {
        uform_trainer_free(t);
        return status;
    }
    *result = t;
    return UFORM_OK;
}

/* ---- a step ---------------------------------------------------------------------- */

/* One replica's share of the caller's batch: items [first, last), every
 * per-item array offset to them, relation offsets rebased (they must start at
 * 0), shared choice targets offset to the share's first item. */
typedef struct {
    uform_trainer_batch_t batch;
    uform_relations_t relations;
    size_t *edge_offsets;          /* [3][items + 1], or NULL without relations */
} uform_share_t;

static uform_status_t uform_share_of(const uform_trainer_batch_t *b, size_t first, size_t last,
                                     uform_share_t *share) {
    memset(share, 0, sizeof(*share));
    size_t n = last - first;
    uform_trainer_batch_t *s = &share->batch;
    *s = *b;
    s->modalities = b->modalities + first;
    s->contents.offsets = b->contents.offsets + first;
    s->contents.count = n;
    if (b->bags) s->bags = b->bags + first;
    if (b->temperature_groups) s->temperature_groups = b->temperature_groups + first;
    if (b->sides) s->sides = b->sides + first;
    if (b->choices.count) {
        bool shared = b->choices.count == 1 && b->contents.count > 1;
        if (shared) {   /* item i's targets follow from its index: offset them */
            size_t choices = b->choices.offsets[1] - b->choices.offsets[0];
            if (b->choice_targets) s->choice_targets = b->choice_targets + first * choices;
            /* a share of one item reads the shared entry as its own */
        } else {
            s->choices.offsets = b->choices.offsets + first;
            s->choices.count = n;
        }
    }
    if (!b->relations) return UFORM_OK;
    share->edge_offsets = uform_alloc(3 * (n + 1), sizeof(size_t), "relations of a GPU's items");
    if (!share->edge_offsets) return UFORM_OUT_OF_MEMORY;
    const uform_edges_t *given[3] = {&b->relations->attract, &b->relations->repel, &b->relations->ignore};
    uform_edges_t *into[3] = {&share->relations.attract, &share->relations.repel, &share->relations.ignore};
    for (size_t k = 0; k < 3; k++) {
        const uform_edges_t *e = given[k];
        if (!e->offsets) continue;
        size_t *offsets = share->edge_offsets + k * (n + 1), base = e->offsets[first];
        for (size_t i = 0; i <= n; i++) offsets[i] = e->offsets[first + i] - base;
        *into[k] = (uform_edges_t){offsets, e->ids ? e->ids + base : NULL, e->weights ? e->weights + base : NULL};
    }
    s->relations = &share->relations;
    return UFORM_OK;
}

/* What a replica's thread runs, and what it answered. */
typedef struct {
    uform_trainer_t *replica;
    uform_share_t share;
    uform_status_t refused;         /* the batch's refusal on a mesh (uform_trainer_step_tokens) */
    const char *refusal;            /* its message */
    uform_media_tokens_t *tokens;   /* its first item's, in the group's array; NULL: text only */
    uform_arena_t *arena;           /* NULL: no embeddings asked for */
    uform_scalar_t outputs_scalar;
    uform_encoded_t encoded;
    uform_trainer_step_stats_t stats;
    uform_status_t status;
    char message[1024];
    /* the gate the threads wait at until every one has started (else none steps) */
    pthread_mutex_t *lock;
    pthread_cond_t *opened;
    int *gate;                      /* 0 closed, 1 go, -1 abandon */
} uform_replica_step_t;

static void uform_replica_step(uform_replica_step_t *s) {
    if (s->refused != UFORM_OK) uform_set_error_text(s->refusal);
    s->status = uform_trainer_step_tokens(s->replica, &s->share.batch, s->tokens, s->refused, s->arena, false,
                                          s->outputs_scalar, s->arena ? &s->encoded : NULL, &s->stats);
    if (s->status != UFORM_OK) snprintf(s->message, sizeof(s->message), "%s", uform_last_error());
}

static void *uform_replica_thread(void *argument) {
    uform_replica_step_t *s = argument;
    pthread_mutex_lock(s->lock);
    while (*s->gate == 0) pthread_cond_wait(s->opened, s->lock);
    bool go = *s->gate > 0;
    pthread_mutex_unlock(s->lock);
    if (go) uform_replica_step(s);
    return NULL;
}

/* Runs every replica's step at once (their collectives need all of them):
 * replica 0 on this thread, the others on threads of their own, none unless
 * every thread started. */
static uform_status_t uform_run_replicas(uform_replica_step_t *steps, size_t count) {
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t opened = PTHREAD_COND_INITIALIZER;
    int gate = 0;
    pthread_t *threads = uform_alloc(count, sizeof(pthread_t), "replica threads");
    if (!threads) return UFORM_OUT_OF_MEMORY;
    size_t started = 1;
    for (; started < count; started++) {
        steps[started].lock = &lock, steps[started].opened = &opened, steps[started].gate = &gate;
        if (pthread_create(&threads[started], NULL, uform_replica_thread, &steps[started]) != 0) break;
    }
    pthread_mutex_lock(&lock);
    gate = started == count ? 1 : -1;
    pthread_cond_broadcast(&opened);
    pthread_mutex_unlock(&lock);
    if (started == count) uform_replica_step(&steps[0]);
    for (size_t r = 1; r < started; r++) pthread_join(threads[r], NULL);
    free(threads);
    pthread_cond_destroy(&opened);
    pthread_mutex_destroy(&lock);
    if (started != count)
        return uform_fail(UFORM_OUT_OF_MEMORY, "step: cannot start a thread for GPU %zu of %zu (nothing was "
                          "applied)", started, count);
    return UFORM_OK;
}

uform_status_t uform_group_step(uform_trainer_t *t, const uform_trainer_batch_t *batch, uform_arena_t *arena,
                                bool arena_held, uform_scalar_t outputs_scalar, uform_encoded_t *embeddings_out,
                                uform_trainer_step_stats_t *stats) {
    uform_replica_group_t *g = t->group;
    uform_trainer_t *first = g->replicas[0];
    size_t count = batch ? batch->contents.count : 0;
    /* On a mesh the world's item count is known to the replicas only: they
     * bound the relation ids. */
    uform_status_t refused = uform_check_step_batch(first, batch, g->mesh ? (size_t)UINT32_MAX + 1 : count);
    if (refused == UFORM_OK) refused = uform_check_step_arena(arena, embeddings_out != NULL);
    size_t row_bytes = uform_output_row_bytes(outputs_scalar, first->dimensions);
    if (refused == UFORM_OK && embeddings_out && row_bytes == 0)
        refused = uform_fail(UFORM_INVALID_ARGUMENT, "outputs_scalar: %d is not a scalar", (int)outputs_scalar);
    uform_media_tokens_t *tokens = NULL;
    if (refused == UFORM_OK) refused = uform_tokenize_media(first, batch, &tokens);
    if (refused != UFORM_OK && !g->mesh) return refused;
    /* On a mesh a refusal is every host's: the replicas step no items and
     * fail with it at their first agreement, with the other hosts. */
    char refusal[1024] = "";
    size_t given_count = count;   /* the host's items, which the world counts even when refused */
    static const size_t no_offsets[1] = {0};
    uform_trainer_batch_t nothing = {.modalities = (const uint32_t *)no_offsets,
                                     .contents = {NULL, 0, no_offsets, 0}};
    if (refused != UFORM_OK) {
        snprintf(refusal, sizeof(refusal), "%s", uform_last_error());
        /* whether items have bags is compared across hosts first: keep it */
        if (batch && batch->bags) nothing.bags = (const uint32_t *)no_offsets;
        batch = &nothing;
        count = 0;
    }
    size_t *lengths = uform_alloc(count, sizeof(size_t), "item lengths");
    uform_replica_t *parts = uform_alloc_zeroed(g->count, sizeof(uform_replica_t), "replica shares");
    uform_replica_step_t *steps = uform_alloc_zeroed(g->count, sizeof(uform_replica_step_t), "replica steps");
    uform_status_t status = lengths && parts && steps ? UFORM_OK : UFORM_OUT_OF_MEMORY;
    if (status == UFORM_OK) {
        uform_item_lengths(batch, tokens, lengths);
        uform_split_by_tokens(lengths, count, first->limits.columns, parts, g->count);
    }
    for (size_t r = 0; r < g->count && status == UFORM_OK; r++) {
        uform_replica_step_t *s = &steps[r];
        s->replica = g->replicas[r];
        s->tokens = tokens ? tokens + parts[r].first : NULL;
        s->arena = embeddings_out ? g->arenas[r] : NULL;
        s->outputs_scalar = outputs_scalar;
        s->refused = refused;
        s->refusal = refusal;
        status = uform_share_of(batch, parts[r].first, parts[r].last, &s->share);
        /* Refused: GPU 0 stands for the host's items in the world's count (read
         * by the step's first collective only, then the refusal stops it), so
         * the other hosts check their relations against the world they gave. */
        if (refused != UFORM_OK && r == 0) s->share.batch.contents.count = given_count;
    }
    if (status == UFORM_OK) status = uform_run_replicas(steps, g->count);
    if (status == UFORM_OK) {
        /* The failure to report: a replica's own (its device, its memory), not
         * the collective failure it caused in the others. */
        size_t cause = g->count;
        for (size_t r = 0; r < g->count && cause == g->count; r++)
            if (steps[r].status != UFORM_OK && steps[r].status != UFORM_MESH) cause = r;
        for (size_t r = 0; r < g->count && cause == g->count; r++)
            if (steps[r].status != UFORM_OK) cause = r;
        if (cause < g->count) {
            uform_set_error_text(steps[cause].message);
            status = steps[cause].status;
        }
        /* A GPU that failed where the others were past their last collective
         * broke only this process's engine: its mesh peers hear of it now
         * (they are in, or on their way to, a collective this host left). */
        if (g->mesh && cause < g->count && uform_local_message(g->engine)[0])
            uform_mesh_abandon(g->mesh, status);
    }
    if (status == UFORM_OK && embeddings_out) {   /* each replica's rows, in the caller's item order */
        status = arena_held ? UFORM_OK : uform_arena_acquire(arena);
        if (status == UFORM_OK) {
            uform_arena_rewind(arena);
            uint8_t *out = uform_arena_take(arena, count * row_bytes, "embeddings");
            if (!out) status = UFORM_OUT_OF_MEMORY;
            for (size_t r = 0, at = 0; r < g->count && out; r++) {
                size_t bytes = steps[r].share.batch.contents.count * row_bytes;
                if (bytes) memcpy(out + at, steps[r].encoded.embeddings, bytes);
                at += bytes;
            }
            if (out) {
                memset(embeddings_out, 0, sizeof(*embeddings_out));
                embeddings_out->count = count;
                embeddings_out->scalar = outputs_scalar;
                embeddings_out->dimensions = first->dimensions;
                embeddings_out->embedding_row_bytes = row_bytes;
                embeddings_out->embeddings = out;
            }
            if (!arena_held) uform_arena_release(arena);
        }
    }
    if (status == UFORM_OK && stats) {   /* the world's losses, every replica's truncations */
        *stats = steps[0].stats;
        for (size_t r = 1; r < g->count; r++) {
            stats->truncated += steps[r].stats.truncated;
            stats->dropped += steps[r].stats.dropped;
        }
    }
    for (size_t r = 0; steps && r < g->count; r++) free(steps[r].share.edge_offsets);
    free(steps);
    free(parts);
    free(lengths);
    uform_tokens_free(tokens, count);
    return status;
}

/* ---- saving and reading: GPU 0's replica holds what every one does ------------------ */

/* On a mesh host 0's GPU 0 writes, and every host hears how it went. */
uform_status_t uform_group_save(uform_trainer_t *t, const char *path, const uform_progress_t *progress) {
    uform_replica_group_t *g = t->group;
    uform_trainer_t *first = g->replicas[0];
    uform_status_t status = UFORM_OK;
    if (!g->mesh || g->mesh->host == 0) {
        uform_trainer_hold(first);
        status = uform_checkpoint_write(first, path, progress);
        uform_trainer_unhold(first);
    }
    return g->mesh ? uform_mesh_agree(g->mesh, status, "save") : status;
}

uform_status_t uform_group_tensor(const uform_trainer_t *t, const char *name, uint32_t which, float *values,
                                  size_t *count) {
    return uform_trainer_tensor_held(t->group->replicas[0], name, which, values, count);
}

uform_trainer_t *uform_trainer_replica(const uform_trainer_t *t, size_t r) {
    return t && t->group && r < t->group->count ? t->group->replicas[r] : NULL;
}
