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
#include "backend/backend.h"
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
    /* NCCL (mesh_nccl.c): the communicator that sums this rank's gradients on
     * its GPU, or NULL (sums through host memory); a process's own
     * communicators, one per GPU, in `nccl_owned` (a view borrows its GPU's). */
    struct uform_nccl *nccl;
    struct uform_nccl **nccl_owned;
    size_t nccl_owned_count;
    uform_multimem_tier_t multimem_tier;   /* the world's, from NCCL (NONE without NCCL) */
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

/* ---- gradients summed on the GPUs through NCCL (mesh_nccl.c) ---- */

/* This host's offer in its introduction: its GPUs' UUIDs joined by commas, or
 * "-" (a CPU host, no NCCL here, or UFORM_MESH_ENGINE=gloo). */
UFORM_INTERNAL void uform_mesh_nccl_offer(const uform_mesh_t *m, char *offer, size_t bytes);
/* With every host's offer (offers[h]): NCCL when the world has several GPUs,
 * every host offered it and no GPU appears twice (NCCL refuses two ranks on
 * one GPU); then host 0 makes the unique id, every host reads it from the
 * run's folder and connects its GPUs. UFORM_MESH_ENGINE=nccl makes the lack
 * of NCCL an error naming why, instead of the sums through host memory. */
UFORM_INTERNAL uform_status_t uform_mesh_nccl_connect(uform_mesh_t *m, char *const *offers);
/* The communicators of a trainer over several GPUs of one process without a
 * mesh (one per GPU, devices in the executor's order), or *comms NULL where
 * NCCL is not used (sums through host memory). */
UFORM_INTERNAL uform_status_t uform_nccl_group_connect(const uform_backend_t *devices, size_t count,
                                                       struct uform_nccl ***comms);
/* Frees them: aborted when `broken` (peers may be gone), else finalized. */
UFORM_INTERNAL void uform_nccl_group_free(struct uform_nccl **comms, size_t count, bool broken);

/* Whether m sums gradients on the GPU (NCCL). The three below only then. */
UFORM_INTERNAL bool uform_mesh_sums_on_device(const uform_mesh_t *m);
/* Events for `slots` buckets; UFORM_OUT_OF_MEMORY or UFORM_DEVICE. */
UFORM_INTERNAL uform_status_t uform_mesh_device_prepare(uform_mesh_t *m, size_t slots);
/* Marks where b's stream stands as bucket `slot`'s (uform_nccl_mark). */
UFORM_INTERNAL void uform_mesh_device_mark(uform_mesh_t *m, uform_backend_t *b, size_t slot);
/* values (device memory) summed over the world after mark `slot`: the same
 * bits on every rank; a failure breaks the mesh (mesh.h). */
UFORM_INTERNAL uform_status_t uform_mesh_device_sum(uform_mesh_t *m, float *values, size_t count, size_t slot);
/* b's stream waits for the sums. */
UFORM_INTERNAL void uform_mesh_device_join(uform_mesh_t *m, uform_backend_t *b);
/* The mesh's own communicators freed (aborted when it is broken). */
UFORM_INTERNAL void uform_mesh_nccl_close(uform_mesh_t *m);
/* NCCL's part of uform_mesh_device_sum (mesh.c breaks the mesh on failure). */
UFORM_INTERNAL uform_status_t uform_mesh_nccl_sum(uform_mesh_t *m, float *values, size_t count, size_t slot);

/* Whether m gathers device memory on the GPUs (NCCL, its communicator's ranks
 * being m's hosts: always so for a mesh or a view that sums there). */
UFORM_INTERNAL bool uform_mesh_gathers_on_device(const uform_mesh_t *m);
/* Every host's bytes[h] bytes of b's memory in host order into out, this
 * host's from `local`, on the GPUs; b's stream waits for them. A failure
 * breaks the mesh, as a failed sum. */
UFORM_INTERNAL uform_status_t uform_mesh_device_gather(uform_mesh_t *m, uform_backend_t *b, const void *local,
                                                       const size_t *bytes, void *out);
/* NCCL's part of it (mesh.c breaks the mesh on failure). */
UFORM_INTERNAL uform_status_t uform_mesh_nccl_gather(uform_mesh_t *m, uform_backend_t *b, const void *local,
                                                     const size_t *bytes, void *out);

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
