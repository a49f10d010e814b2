/* collectives.h: sums that stay on the GPUs, through NCCL (collectives.cu;
 * docs/distributed.md, "NCCL").
 *
 * A mesh of GPU hosts sums a training step's gradients with NCCL: one
 * communicator over every GPU of every host (the mesh's world ranks), its
 * unique id exchanged through the run's folder. Each GPU's communicator has a
 * stream of its own: the step's thread marks the point of its compute stream
 * where a bucket of gradients is written (uform_nccl_mark), and the trainer's
 * summing thread has the bucket summed in place on the communicator's stream
 * after that point (uform_nccl_sum), so the sum runs on the GPU while the
 * backward goes on; uform_nccl_join makes the compute stream wait for them.
 * The pairing terms' embeddings and token rows are gathered through the same
 * communicator (uform_nccl_gather), before the backward.
 *
 * NCCL is loaded on first use (dlopen of libnccl.so.2, from the PyPI wheel
 * nvidia-nccl-cu13, found on the library's rpath), so a process that never
 * meshes GPUs never maps it. Every wait is bounded: the communicators are
 * non-blocking, and a wait past its deadline or an error NCCL reports aborts
 * the communicator and answers UFORM_MESH with NCCL's words.
 *
 * Status: real NCCL ran on one H200 with one-rank communicators
 * (tests/gpu/test_nccl_ops.c, 2026-12-04: start, the multimem query, a sum, a
 * gather, and a second rank that never comes ending in UFORM_MESH after the
 * timeout); over two or more GPUs only under the CUDA emulation, where the same
 * code runs against an emulation of NCCL over shared memory (nccl_emulation.h),
 * which tests/gpu/test_vram_mesh.c and test_vram_replicas.c exercise. */
#ifndef UFORM_CUDA_COLLECTIVES_H
#define UFORM_CUDA_COLLECTIVES_H

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#define UFORM_NCCL_ID_BYTES 128

typedef struct uform_nccl uform_nccl_t;

/* Whether NCCL can be used here (loaded once); false with the reason in `why`. */
UFORM_INTERNAL bool uform_nccl_usable(char *why, size_t why_bytes);

/* A fresh unique id (one host makes it, every host reads it). */
UFORM_INTERNAL uform_status_t uform_nccl_unique_id(uint8_t id[UFORM_NCCL_ID_BYTES]);

/* GPU `device`'s 16-byte UUID as 32 hex digits (NCCL refuses two ranks on one
 * GPU: hosts compare their GPUs' UUIDs before choosing NCCL). */
UFORM_INTERNAL uform_status_t uform_nccl_device_uuid(const uform_backend_t *backend, char hex[33]);

/* The communicators of `count` GPUs of this process (devices[i] a CUDA
 * backend), ranks first_rank .. first_rank + count - 1 of `ranks`, all joined
 * through `id`: comms[i] for devices[i]. Waits until every rank joined, at
 * most timeout_ms (then UFORM_MESH naming the wait). */
UFORM_INTERNAL uform_status_t uform_nccl_connect(const uint8_t id[UFORM_NCCL_ID_BYTES], size_t ranks,
                                                 size_t first_rank, const uform_backend_t *devices, size_t count,
                                                 uint64_t timeout_ms, uform_nccl_t **comms);

/* What NCCL reports of NVLink SHARP (multicast reductions in the NVLink
 * switches, which NCCL's own sums then use) for this communicator: NONE when
 * it has none, or the library cannot say (older than 2.29 or than this
 * build's header); NVLINK when its NVLink domain stays within this host's
 * `host_gpus` GPUs; NVLINK_SWITCH when one domain spans hosts (an NVLink
 * Switch System). A ready communicator only (after uform_nccl_connect). */
UFORM_INTERNAL uform_multimem_tier_t uform_nccl_multimem_tier(const uform_nccl_t *comm, size_t host_gpus);

/* Events for `slots` marks (before the first mark of a step; not while a sum runs). */
UFORM_INTERNAL uform_status_t uform_nccl_prepare(uform_nccl_t *comm, size_t slots);

/* The point the backend's stream has reached (its operations issued so far) as
 * mark `slot`: a sum after that mark reads what they wrote. Failures are the
 * backend's (reported by its synchronize). */
UFORM_INTERNAL void uform_nccl_mark(uform_nccl_t *comm, uform_backend_t *backend, size_t slot);

/* values[0, count) (device memory of the comm's GPU) summed in place over every
 * rank after mark `slot`, waited for: at most timeout_ms, then, or on an error
 * NCCL reports, the communicator is aborted and UFORM_MESH answered. The same
 * bits on every rank. Any thread; one sum at a time per communicator. */
UFORM_INTERNAL uform_status_t uform_nccl_sum(uform_nccl_t *comm, float *values, size_t count, size_t slot,
                                             uint64_t timeout_ms);

/* The backend's stream waits for every sum done so far. */
UFORM_INTERNAL void uform_nccl_join(uform_nccl_t *comm, uform_backend_t *backend);

/* Whether comm is rank `rank` of `ranks` (a mesh's view of the world is
 * NCCL's only then, and its gathers can run through it). */
UFORM_INTERNAL bool uform_nccl_placed(const uform_nccl_t *comm, size_t rank, size_t ranks);

/* Every rank's bytes[r] bytes in rank order into out (device memory of the
 * comm's GPU), this rank's block read from `mine` (not overlapping out), after
 * what the backend's stream has issued so far; the backend's stream waits for
 * the result. Bounded and failing as uform_nccl_sum ("the gather"). The same
 * order of collectives on every rank; not while a sum runs. */
UFORM_INTERNAL uform_status_t uform_nccl_gather(uform_nccl_t *comm, uform_backend_t *backend, const void *mine,
                                                const size_t *bytes, void *out, uint64_t timeout_ms);

/* Abort (a broken mesh: peers may be gone) or finalize and destroy (bounded
 * by timeout_ms, else aborted); frees the communicator. NULL: nothing. */
UFORM_INTERNAL void uform_nccl_abort(uform_nccl_t *comm);
UFORM_INTERNAL void uform_nccl_free(uform_nccl_t *comm, uint64_t timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* UFORM_CUDA_COLLECTIVES_H */
