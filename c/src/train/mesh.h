/* mesh.h: the collectives a training step runs across the hosts of a mesh
 * (docs/distributed.md).
 *
 * A mesh is host_domain_count processes that met in a shared directory
 * (mesh_directory.c) and connected a collective engine (Gloo over TCP on CPUs:
 * mesh_gloo.cc). Every collective below is called by every host in the same
 * order with the same sizes; each is blocking and bounded by the mesh's timeout.
 *
 * Failures: a collective that fails (a peer died, hung past the timeout, or
 * closed the mesh) breaks the mesh for good. The host that saw it writes a
 * note in the run's folder, closes its connections (so every peer still
 * waiting fails at once instead of at its timeout), waits briefly for the
 * others' notes, and answers UFORM_MESH naming the hosts that sent none: those
 * that died or hung. Every later collective answers UFORM_MESH at once.
 *
 * Results are the same bits on every host: gathers copy, and the sum runs
 * Gloo's ring, whose every chunk is reduced once and then broadcast. */
#ifndef UFORM_MESH_H
#define UFORM_MESH_H

#include "core/internal.h"
#include "train/mesh_directory.h"
#include "train/mesh_engine.h"
#include <stdatomic.h>

struct uform_mesh {
    uform_executor_t *executor;
    uform_mesh_directory_t directory;
    size_t host, hosts;
    uint64_t timeout_ms;
    size_t *devices;            /* [hosts] replicas of each host (its GPUs on a VRAM executor) */
    uform_gpu_class_t gpu_class;  /* of every host's GPUs (one class); NONE on CPUs */
    char **names;               /* [hosts] host names, as each host reported its own */
    size_t rank, ranks;
    void *engine;               /* the Gloo context (mesh_gloo.cc); NULL once closed */
    /* Instead of Gloo: the threads of one process, this view being rank `host`
     * (mesh_local.c: the replicas of a trainer over several GPUs). With a
     * parent, the process is a host of that mesh and this view a rank of the
     * whole world: `host` is parent->rank + the local rank, `hosts`
     * parent->ranks, and each collective runs among the process's threads,
     * then across hosts by local rank 0 over the parent, then back. */
    struct uform_local_ranks *local;
    struct uform_mesh *parent;
    bool broken;                /* a collective failed: every later call fails */
    char broken_message[1024];
    atomic_flag taken;          /* a trainer uses the mesh */
};

/* Every host's `bytes` bytes, in host order, into out[hosts * bytes]. */
UFORM_INTERNAL uform_status_t uform_mesh_allgather(uform_mesh_t *m, const void *in, size_t bytes,
                                                   void *out);
/* Host h's counts[h] bytes, back to back in host order (counts the same on every host). */
UFORM_INTERNAL uform_status_t uform_mesh_allgatherv(uform_mesh_t *m, const void *in,
                                                    const size_t *counts, void *out);
/* values[i] = the sum over hosts of values[i]: the same bits on every host. */
UFORM_INTERNAL uform_status_t uform_mesh_sum(uform_mesh_t *m, float *values, size_t count);

/* Every host says whether its part so far succeeded. Answers `status` itself
 * when it failed here (its message kept); else UFORM_MESH naming the first
 * host that failed and its message; else UFORM_OK on every host. `what` names
 * the phase in messages ("step 12"). */
UFORM_INTERNAL uform_status_t uform_mesh_agree(uform_mesh_t *m, uform_status_t status,
                                               const char *what);

/* This host failed (status, its message set) where its peers are in, or on
 * their way to, collectives it will not join (between a step's agreements):
 * it leaves its failure as its note and closes its connections, so each peer
 * fails at once with UFORM_MESH naming this host and its message, instead of
 * waiting out the timeout. The mesh is broken. No-op when already broken. */
UFORM_INTERNAL void uform_mesh_abandon(uform_mesh_t *m, uform_status_t status);

/* A trainer takes the mesh for its life (one trainer per mesh at a time). */
UFORM_INTERNAL uform_status_t uform_mesh_take(uform_mesh_t *m, uform_executor_t *executor);
UFORM_INTERNAL void uform_mesh_release(uform_mesh_t *m);

/* ---- ranks that are threads of one process (mesh_local.c) ---- */

typedef struct uform_local_ranks uform_local_ranks_t;
UFORM_INTERNAL uform_status_t uform_local_ranks_new(size_t ranks, uform_local_ranks_t **result);
UFORM_INTERNAL void uform_local_ranks_free(uform_local_ranks_t *engine);
/* As the Gloo calls, for rank `rank`; UFORM_MESH with the break's message
 * once a rank broke the engine. */
UFORM_INTERNAL uform_status_t uform_local_allgatherv(uform_local_ranks_t *engine, size_t rank,
                                                     const void *in, const size_t *counts, void *out);
UFORM_INTERNAL uform_status_t uform_local_sum(uform_local_ranks_t *engine, size_t rank, float *values,
                                              size_t count);
/* A rank failed where the others wait (or will): every collective under way
 * or to come fails with `message` (the first break's). */
UFORM_INTERNAL void uform_local_break(uform_local_ranks_t *engine, const char *message);
UFORM_INTERNAL const char *uform_local_message(uform_local_ranks_t *engine);
/* bytes of rank 0's buffer into every other rank's. */
UFORM_INTERNAL uform_status_t uform_local_broadcast(uform_local_ranks_t *engine, size_t rank, void *buffer,
                                                    size_t bytes);
/* `ranks` mesh views over one new engine, view r being local rank r; with a
 * parent (its host's device count equal to ranks), ranks of its world. */
UFORM_INTERNAL uform_status_t uform_mesh_local_views(uform_executor_t *executor, size_t ranks,
                                                     uform_mesh_t *parent, uform_mesh_t ***views,
                                                     uform_local_ranks_t **engine);
UFORM_INTERNAL void uform_mesh_local_views_free(uform_mesh_t **views, size_t ranks,
                                                uform_local_ranks_t *engine);

#endif /* UFORM_MESH_H */
