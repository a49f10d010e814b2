/* gradient_sum.c: a mesh step's gradients summed over the world, bucket by
 * bucket, while the backward pass runs (docs/distributed.md, "Costs").
 *
 * The buckets are the blocks from the last to the first (the order the
 * backward pass finishes them), then what follows the blocks in the flat
 * buffer (the final norm, the heads, the terms' own parameters, the media
 * inputs), then what precedes them (the byte table and the text modality,
 * which the backward writes last). Every host sums the same buckets in the
 * same order, on any backend, so a step's bits do not depend on where it ran
 * or how its sums interleaved with the backward.
 *
 * A thread of the trainer's sums block l over the mesh as soon as the last
 * replica's backward has written it (uform_gradient_sum_block_done, the
 * transformer's hook), while the backward goes on with block l - 1. On host
 * memory it sums the gradients in place; on a device the step's thread first
 * brings the block down into a host copy (waiting for the device: the engine,
 * Gloo, moves host memory), and the summed copy goes back up in one upload at
 * the end. Nothing else of the step touches the mesh meanwhile: the thread is
 * its only user between the step's gathers and the agreement after the
 * backward, which waits for every bucket first (uform_gradient_sum_finish).
 * Where the mesh sums on the GPUs (NCCL, mesh_nccl.c) nothing comes down:
 * the step's thread marks where the backward's stream stands when a block is
 * written, and the thread has NCCL sum that block in place, on the GPU, after
 * the mark, while the backward goes on.
 * A host whose backward or device failed still sums every bucket (its peers
 * do) and reports its failure at that agreement, where no host applies the
 * step. */
#include "train/gradient_sum.h"
#include "train/trainer_internal.h"

#include <pthread.h>

typedef struct {
    size_t offset, count;   /* floats of the flat gradient buffer */
} uform_gradient_bucket_t;

struct uform_gradient_sum {
    uform_mesh_t *mesh;
    float *values;                 /* the trainer's gradients, or their host copy on a device */
    bool on_host;                  /* values are the gradients themselves */
    bool on_device;                /* ... on a GPU, summed there (NCCL) */
    uform_gradient_bucket_t *buckets;
    size_t count;                  /* buckets */
    size_t posted, summed;         /* buckets given to the thread; done (or skipped after a failure) */
    size_t posted_early;           /* posted before the backward ended (the last step's) */
    uform_status_t status;         /* the sums' first failure */
    char message[1024];            /* its text (the thread's last error) */
    uform_status_t local;          /* this host's own first failure (its device), on the step's thread */
    char local_message[1024];
    bool threaded, quit;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t changed;
};

/* The buckets in the order they are summed (depth + 2 of them): returns how many. */
static size_t uform_gradient_buckets(const uform_trainer_t *t, uform_gradient_bucket_t *buckets) {
    size_t n = 0;
    for (size_t l = t->depth; l-- > 0;) {
        size_t first = t->blocks[l].norm1_weight;
        size_t end = l + 1 < t->depth ? t->blocks[l + 1].norm1_weight : t->norm_weight;
        buckets[n++] = (uform_gradient_bucket_t){first, end - first};
    }
    size_t blocks_first = t->depth ? t->blocks[0].norm1_weight : t->norm_weight;
    buckets[n++] = (uform_gradient_bucket_t){t->norm_weight, t->count - t->norm_weight};
    buckets[n++] = (uform_gradient_bucket_t){0, blocks_first};
    return n;
}

/* Off host 0, the replicated terms' own gradients zeroed (on the trainer's
 * backend, before they come down or are summed there), so the sum counts them
 * once: every host computed the same gradient for them. */
static void uform_gradient_drop_replicated(uform_trainer_t *t, const uform_world_t *w) {
    if (w->host == 0) return;
    uform_backend_t *b = &t->backend;
    size_t groups = t->contrastive.groups;
    if (t->contrasts) {
        b->ops->zero(b, t->gradients + t->log_inverse_temperature, groups * sizeof(float));
        b->ops->zero(b, t->gradients + t->contrastive_bias, groups * sizeof(float));
    }
    if (t->late) {
        b->ops->zero(b, t->gradients + t->late_log_inverse_temperature, sizeof(float));
        b->ops->zero(b, t->gradients + t->late_bias, sizeof(float));
    }
}

/* Bucket k over the mesh; the failure's text kept for the step's thread. */
static void uform_gradient_sum_bucket(uform_gradient_sum_t *s, size_t k, uform_status_t *status,
                                      char *message, size_t message_bytes) {
    float *values = s->values + s->buckets[k].offset;
    *status = s->on_device ? uform_mesh_device_sum(s->mesh, values, s->buckets[k].count, k)
                           : uform_mesh_sum(s->mesh, values, s->buckets[k].count);
    if (*status != UFORM_OK) snprintf(message, message_bytes, "%s", uform_last_error());
}

static void *uform_gradient_sum_thread(void *argument) {
    uform_gradient_sum_t *s = argument;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->quit && s->summed == s->posted) pthread_cond_wait(&s->changed, &s->lock);
        if (s->summed == s->posted) break;   /* quitting, nothing left */
        size_t k = s->summed;
        bool skip = s->status != UFORM_OK;   /* the mesh is broken: every later sum would fail */
        pthread_mutex_unlock(&s->lock);
        uform_status_t status = UFORM_OK;
        char message[sizeof(s->message)];
        if (!skip) uform_gradient_sum_bucket(s, k, &status, message, sizeof(message));
        pthread_mutex_lock(&s->lock);
        if (status != UFORM_OK && s->status == UFORM_OK) {
            s->status = status;
            memcpy(s->message, message, sizeof(message));
        }
        s->summed++;
        pthread_cond_broadcast(&s->changed);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

void uform_gradient_sum_free(uform_gradient_sum_t *s) {
    if (!s) return;
    if (s->threaded) {
        pthread_mutex_lock(&s->lock);
        s->quit = true;
        pthread_cond_broadcast(&s->changed);
        pthread_mutex_unlock(&s->lock);
        pthread_join(s->thread, NULL);
    }
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->changed);
    free(s->buckets);
    free(s);
}

static uform_gradient_sum_t *uform_gradient_sum_new(const uform_trainer_t *t) {
    uform_gradient_sum_t *s = uform_alloc_zeroed(1, sizeof(*s), "gradient sum");
    if (!s) return NULL;
    s->buckets = uform_alloc(t->depth + 2, sizeof(uform_gradient_bucket_t), "gradient buckets");
    if (!s->buckets || pthread_mutex_init(&s->lock, NULL) != 0) {
        free(s->buckets);
        free(s);
        uform_fail(UFORM_OUT_OF_MEMORY, "gradient sum: cannot allocate its buckets or lock");
        return NULL;
    }
    if (pthread_cond_init(&s->changed, NULL) != 0) {
        pthread_mutex_destroy(&s->lock);
        free(s->buckets);
        free(s);
        uform_fail(UFORM_OUT_OF_MEMORY, "gradient sum: cannot create its condition variable");
        return NULL;
    }
    s->count = uform_gradient_buckets(t, s->buckets);
    /* Without a thread (none could start) each bucket is summed when posted,
     * on the step's thread: the same sums, not overlapped. */
    s->threaded = pthread_create(&s->thread, NULL, uform_gradient_sum_thread, s) == 0;
    return s;
}

uform_status_t uform_gradient_sum_begin(uform_trainer_t *t, uform_world_t *w) {
    bool on_host = t->backend.ops->host_memory;
    bool on_device = !on_host && uform_mesh_sums_on_device(w->mesh);
    if (!t->gradient_sum) t->gradient_sum = uform_gradient_sum_new(t);
    if (!on_host && !on_device && !t->mesh_gradients)   /* kept across steps */
        t->mesh_gradients = uform_alloc_aligned(t->count, sizeof(float), "mesh gradients (host copy)");
    uform_status_t status = t->gradient_sum ? UFORM_OK : UFORM_OUT_OF_MEMORY;
    if (status == UFORM_OK && !on_host && !on_device && !t->mesh_gradients) status = UFORM_OUT_OF_MEMORY;
    if (status == UFORM_OK && on_device) status = uform_mesh_device_prepare(w->mesh, t->gradient_sum->count);
    if (status != UFORM_OK) {
        uform_mesh_abandon(w->mesh, status);   /* its peers are in the sums */
        return status;
    }
    uform_gradient_sum_t *s = t->gradient_sum;
    pthread_mutex_lock(&s->lock);
    s->mesh = w->mesh;
    s->on_host = on_host;
    s->on_device = on_device;
    s->values = on_host || on_device ? t->gradients : t->mesh_gradients;
    s->posted = s->summed = 0;
    s->status = s->local = UFORM_OK;
    s->message[0] = s->local_message[0] = 0;
    pthread_mutex_unlock(&s->lock);
    return UFORM_OK;
}

/* On a device: buckets [first, end) brought down into the host copy, waited
 * for; a failure is kept as this host's own (the buckets are summed anyway).
 * Where they are summed on the device: their marks on its stream. */
static void uform_gradient_sum_download(uform_trainer_t *t, size_t first, size_t end) {
    uform_gradient_sum_t *s = t->gradient_sum;
    if (s->on_host || first >= end) return;
    uform_backend_t *b = &t->backend;
    if (s->on_device) {
        for (size_t k = first; k < end; k++) uform_mesh_device_mark(s->mesh, b, k);
        return;
    }
    for (size_t k = first; k < end; k++)
        b->ops->download(b, s->values + s->buckets[k].offset, t->gradients + s->buckets[k].offset,
                         s->buckets[k].count * sizeof(float));
    uform_status_t status = b->ops->synchronize(b);
    if (status != UFORM_OK && s->local == UFORM_OK) {
        s->local = status;
        snprintf(s->local_message, sizeof(s->local_message), "%s", uform_last_error());
    }
}

/* Buckets [0, through) given to the sum, in order. */
static void uform_gradient_sum_post(uform_gradient_sum_t *s, size_t through) {
    if (!s->threaded) {
        for (; s->posted < through; s->posted++, s->summed++)
            if (s->status == UFORM_OK)
                uform_gradient_sum_bucket(s, s->posted, &s->status, s->message, sizeof(s->message));
        return;
    }
    pthread_mutex_lock(&s->lock);
    if (through > s->posted) s->posted = through;
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->lock);
}

void uform_gradient_sum_block_done(void *trainer, size_t layer) {
    uform_trainer_t *t = trainer;
    uform_gradient_sum_t *s = t->gradient_sum;
    size_t through = t->depth - layer;   /* blocks finish last first: bucket depth - 1 - layer */
    uform_gradient_sum_download(t, s->posted, through);
    uform_gradient_sum_post(s, through);
}

uform_status_t uform_gradient_sum_finish(uform_trainer_t *t, const uform_world_t *w) {
    uform_gradient_sum_t *s = t->gradient_sum;
    s->posted_early = s->posted;   /* only this thread posts */
    /* the replicated terms' parameters sit in the bucket after the blocks,
     * which no backward writes: zeroed before it comes down or is marked */
    uform_gradient_drop_replicated(t, w);
    uform_gradient_sum_download(t, s->posted, s->count);
    uform_gradient_sum_post(s, s->count);
    pthread_mutex_lock(&s->lock);
    while (s->summed < s->count) pthread_cond_wait(&s->changed, &s->lock);
    uform_status_t status = s->status;
    pthread_mutex_unlock(&s->lock);
    if (s->local != UFORM_OK) {   /* this host's own failure first: its peers hear it in the agreement */
        uform_set_error_text(s->local_message);
        return s->local;
    }
    if (status != UFORM_OK) {
        uform_set_error_text(s->message);
        return status;
    }
    if (s->on_host) return UFORM_OK;
    uform_backend_t *b = &t->backend;
    if (s->on_device) uform_mesh_device_join(s->mesh, b);   /* the sums happened on the GPU */
    else b->ops->upload(b, t->gradients, s->values, t->count * sizeof(float));
    return b->ops->synchronize(b);
}

size_t uform_trainer_buckets_during_backward(const uform_trainer_t *t) {
    return t->gradient_sum ? t->gradient_sum->posted_early : 0;
}
