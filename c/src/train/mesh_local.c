/* mesh_local.c: the collectives of ranks that are threads of one process: the
 * replicas of a trainer over several GPUs (replica_group.c), each a whole
 * one-GPU trainer whose mesh view (mesh.h) names this engine instead of Gloo.
 *
 * Every collective is two barriers around the work: each rank posts its
 * buffer, all meet, each does its share reading the others' buffers, all meet
 * again (so no buffer is reused while a peer still reads it). No timeout: the
 * ranks are this process's threads, and a rank that fails between collectives
 * breaks the engine (uform_local_break), which wakes every waiting rank with
 * its message at once. Results are the same bits on every rank: a gather
 * copies, and a sum adds in rank order. When the process is a host of a mesh,
 * mesh.c composes these with the mesh's own collectives (mesh.h: parent). */
#include "train/mesh.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

struct uform_local_ranks {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    size_t ranks, arrived;
    uint64_t generation;
    bool broken;
    char message[1024];
    const void **posted;   /* [ranks]: each rank's buffer in the collective under way */
};

uform_status_t uform_local_ranks_new(size_t ranks, uform_local_ranks_t **result) {
    *result = NULL;
    uform_local_ranks_t *g = uform_alloc_zeroed(1, sizeof(*g), "replica collectives");
    const void **posted = uform_alloc_zeroed(ranks, sizeof(void *), "replica collectives");
    if (!g || !posted) {
        free(g), free(posted);
        return UFORM_OUT_OF_MEMORY;
    }
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->changed, NULL);
    g->ranks = ranks;
    g->posted = posted;
    *result = g;
    return UFORM_OK;
}

void uform_local_ranks_free(uform_local_ranks_t *g) {
    if (!g) return;
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->changed);
    free(g->posted);
    free(g);
}

void uform_local_break(uform_local_ranks_t *g, const char *message) {
    pthread_mutex_lock(&g->lock);
    if (!g->broken) {
        g->broken = true;
        snprintf(g->message, sizeof(g->message), "%s", message);
        pthread_cond_broadcast(&g->changed);
    }
    pthread_mutex_unlock(&g->lock);
}

const char *uform_local_message(uform_local_ranks_t *g) {
    pthread_mutex_lock(&g->lock);
    const char *message = g->broken ? g->message : "";
    pthread_mutex_unlock(&g->lock);
    return message;   /* written once, before broken is set */
}

/* Waits for every rank; false when the engine broke before all arrived. */
static bool uform_local_meet(uform_local_ranks_t *g) {
    pthread_mutex_lock(&g->lock);
    bool passed = false;
    if (!g->broken) {
        uint64_t generation = g->generation;
        if (++g->arrived == g->ranks) {
            g->arrived = 0;
            g->generation++;
            pthread_cond_broadcast(&g->changed);
        } else {
            while (g->generation == generation && !g->broken) pthread_cond_wait(&g->changed, &g->lock);
        }
        passed = g->generation != generation;
    }
    pthread_mutex_unlock(&g->lock);
    return passed;
}

static uform_status_t uform_local_failed(uform_local_ranks_t *g) {
    return uform_fail(UFORM_MESH, "%s", uform_local_message(g));
}

uform_status_t uform_local_allgatherv(uform_local_ranks_t *g, size_t rank, const void *in,
                                      const size_t *counts, void *out) {
    g->posted[rank] = in;   /* published by the barrier's lock */
    if (!uform_local_meet(g)) return uform_local_failed(g);
    uint8_t *at = out;
    for (size_t r = 0; r < g->ranks; r++) {
        if (counts[r]) memcpy(at, g->posted[r], counts[r]);
        at += counts[r];
    }
    if (!uform_local_meet(g)) return uform_local_failed(g);
    return UFORM_OK;
}

uform_status_t uform_local_sum(uform_local_ranks_t *g, size_t rank, float *values, size_t count) {
    g->posted[rank] = values;
    if (!uform_local_meet(g)) return uform_local_failed(g);
    /* Rank r sums its share of the indices over every rank, in rank order, and
     * writes the sum into every rank's buffer: no other rank reads that share. */
    size_t begin = count * rank / g->ranks, end = count * (rank + 1) / g->ranks;
    float *const *buffers = (float *const *)g->posted;
    for (size_t i = begin; i < end; i++) {
        float sum = buffers[0][i];
        for (size_t r = 1; r < g->ranks; r++) sum += buffers[r][i];
        for (size_t r = 0; r < g->ranks; r++) buffers[r][i] = sum;
    }
    if (!uform_local_meet(g)) return uform_local_failed(g);
    return UFORM_OK;
}

uform_status_t uform_local_broadcast(uform_local_ranks_t *g, size_t rank, void *buffer, size_t bytes) {
    g->posted[rank] = buffer;
    if (!uform_local_meet(g)) return uform_local_failed(g);
    if (rank && bytes) memcpy(buffer, g->posted[0], bytes);
    if (!uform_local_meet(g)) return uform_local_failed(g);
    return UFORM_OK;
}

uform_status_t uform_mesh_local_views(uform_executor_t *executor, size_t ranks, uform_mesh_t *parent,
                                      uform_mesh_t ***views, uform_local_ranks_t **engine) {
    *views = NULL;
    *engine = NULL;
    uform_local_ranks_t *g = NULL;
    UFORM_TRY(uform_local_ranks_new(ranks, &g));
    uform_mesh_t **made = uform_alloc_zeroed(ranks, sizeof(uform_mesh_t *), "replica meshes");
    uform_status_t status = made ? UFORM_OK : UFORM_OUT_OF_MEMORY;
    for (size_t r = 0; r < ranks && status == UFORM_OK; r++) {
        uform_mesh_t *m = made[r] = uform_alloc_zeroed(1, sizeof(uform_mesh_t), "replica mesh");
        if (!m) {
            status = UFORM_OUT_OF_MEMORY;
            break;
        }
        atomic_flag_clear(&m->taken);
        m->executor = executor;
        m->host = m->rank = (parent ? parent->rank : 0) + r;
        m->hosts = m->ranks = parent ? parent->ranks : ranks;
        m->timeout_ms = parent ? parent->timeout_ms : 0;
        m->local = g;
        m->parent = parent;
    }
    if (status != UFORM_OK) {
        uform_mesh_local_views_free(made, ranks, g);
        return status;
    }
    *views = made;
    *engine = g;
    return UFORM_OK;
}

void uform_mesh_local_views_free(uform_mesh_t **views, size_t ranks, uform_local_ranks_t *engine) {
    if (views)
        for (size_t r = 0; r < ranks; r++) free(views[r]);
    free(views);
    uform_local_ranks_free(engine);
}
