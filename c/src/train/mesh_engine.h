/* mesh_engine.h: the collective engine of a CPU mesh (mesh_gloo.cc, C++ over
 * Gloo), as C functions: mesh.c calls them, and nothing else does. Each
 * answers UFORM_MESH with the engine's message on failure; none throws.
 * Absent from a build without Gloo (mesh.c then refuses to bootstrap). */
#ifndef UFORM_MESH_ENGINE_H
#define UFORM_MESH_ENGINE_H

#include "train/mesh_directory.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Connects host `host` of `hosts` through the run's folder; TCP on `hostname`
 * (an address or name the peers reach), else on `interface`, else on this
 * machine's host name. */
UFORM_INTERNAL uform_status_t uform_gloo_connect(const uform_mesh_directory_t *directory,
                                                 size_t host, size_t hosts, uint64_t timeout_ms,
                                                 const char *hostname, const char *interface,
                                                 void **engine);
/* Host h's counts[h] bytes, back to back in host order, into out. */
UFORM_INTERNAL uform_status_t uform_gloo_allgatherv(void *engine, const void *in,
                                                    const size_t *counts, size_t hosts, void *out,
                                                    uint64_t timeout_ms);
/* values summed over hosts by Gloo's ring: the same bits on every host. */
UFORM_INTERNAL uform_status_t uform_gloo_sum(void *engine, float *values, size_t count,
                                             uint64_t timeout_ms);
/* Closes the connections; peers still using them fail at once. */
UFORM_INTERNAL void uform_gloo_close(void *engine);

#ifdef __cplusplus
}
#endif

#endif /* UFORM_MESH_ENGINE_H */
