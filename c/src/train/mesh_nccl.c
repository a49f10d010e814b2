/* mesh_nccl.c: when a mesh of GPU hosts sums its gradients with NCCL, and its
 * communicators (mesh.h; the calls into NCCL are c/cuda/collectives.cu;
 * docs/distributed.md, "NCCL").
 *
 * Only the gradient sum, the one collective of the model's size, runs on the
 * GPUs; Gloo (through host memory) still carries the rest: introductions,
 * agreements, the gathers of the pairing terms and the failure notes. The
 * choice is the world's: each host offers its GPUs' UUIDs, or "-" (a CPU host,
 * no NCCL loadable, or UFORM_MESH_ENGINE=gloo), in its introduction, and every
 * host reads the same offers, so all decide alike. NCCL needs every host's
 * offer and no GPU twice (it refuses two ranks on one GPU: two processes
 * sharing a GPU sum through host memory). */
#include "train/mesh.h"
#include "backend/vram.h"

#include <stdio.h>
#include <stdlib.h>

#ifdef UFORM_HAVE_CUDA
#include "../../cuda/collectives.h"   /* c/cuda/ */
#include "../../cuda/cuda_backend.h"
#endif

#define UFORM_NCCL_ID_KEY "nccl.id"

/* UFORM_MESH_ENGINE: "nccl" insists, "gloo" declines, else (unset, "auto")
 * NCCL where the world allows it. */
static const char *uform_mesh_engine_asked(void) {
    const char *asked = getenv("UFORM_MESH_ENGINE");
    return asked && asked[0] ? asked : "auto";
}

#ifdef UFORM_HAVE_CUDA

void uform_mesh_nccl_offer(const uform_mesh_t *m, char *offer, size_t bytes) {
    snprintf(offer, bytes, "-");
    if (strcmp(uform_mesh_engine_asked(), "gloo") == 0 || m->gpu_class == UFORM_GPU_CLASS_NONE ||
        !uform_nccl_usable(NULL, 0))
        return;
    size_t count = uform_vram_executor_backends(m->executor, NULL, 0);
    uform_backend_t *backends = uform_alloc(count ? count : 1, sizeof(uform_backend_t), "GPU backends");
    if (!backends) return;
    uform_vram_executor_backends(m->executor, backends, count);
    size_t used = 0;
    for (size_t i = 0; i < count; i++) {
        char uuid[33];
        if (uform_nccl_device_uuid(&backends[i], uuid) != UFORM_OK || used + 34 >= bytes) {
            snprintf(offer, bytes, "-");
            break;
        }
        used += (size_t)snprintf(offer + used, bytes - used, i ? ",%s" : "%s", uuid);
    }
    free(backends);
}

/* Why the world cannot sum with NCCL (into why), or "" when it can. */
static void uform_mesh_nccl_refusal(const uform_mesh_t *m, char *const *offers, char *why, size_t bytes) {
    why[0] = 0;
    if (m->gpu_class == UFORM_GPU_CLASS_NONE) {
        snprintf(why, bytes, "the hosts run on CPUs");
        return;
    }
    size_t ranks = 0;
    for (size_t h = 0; h < m->hosts; h++) ranks += m->devices[h];
    if (ranks < 2) {
        snprintf(why, bytes, "the world has one GPU");
        return;
    }
    for (size_t h = 0; h < m->hosts; h++)
        if (strcmp(offers[h], "-") == 0) {
            char reason[384] = "";
            if (h == m->host && strcmp(uform_mesh_engine_asked(), "gloo") != 0) uform_nccl_usable(reason, sizeof(reason));
            snprintf(why, bytes, "host %zu (%s) cannot use NCCL%s%s", h, m->names[h], reason[0] ? ": " : "",
                     reason[0] ? reason : " (no NCCL there, or UFORM_MESH_ENGINE=gloo)");
            return;
        }
    /* each offer is UUIDs of 32 hex digits joined by commas: compare every
     * GPU of the world with every later one */
    for (size_t h = 0; h < m->hosts; h++)
        for (const char *a = offers[h]; strlen(a) >= 32; a += a[32] ? 33 : 32)
            for (size_t g = h; g < m->hosts; g++)
                for (const char *b = g == h ? a + 32 : offers[g]; *b;) {
                    if (*b == ',') b++;
                    if (strlen(b) < 32) break;
                    if (strncmp(a, b, 32) == 0) {
                        snprintf(why, bytes, "GPU %.32s is used by host %zu (%s) and by host %zu (%s): NCCL "
                                 "refuses two ranks on one GPU", a, h, m->names[h], g, m->names[g]);
                        return;
                    }
                    b += 32;
                }
}

/* The world's multimem tier: the lowest any GPU of any host reports (a tier
 * is a property of every rank's path, and the hosts must describe one run
 * alike). Every host with communicators calls it; a host whose NCCL start
 * failed has left, and the gather fails on the others. */
static uform_status_t uform_mesh_multimem_agree(uform_mesh_t *m) {
    uint32_t mine = UFORM_MULTIMEM_NVLINK_SWITCH;
    for (size_t i = 0; i < m->nccl_owned_count; i++) {
        uint32_t tier = (uint32_t)uform_nccl_multimem_tier(m->nccl_owned[i], m->devices[m->host]);
        if (tier < mine) mine = tier;
    }
    uint32_t *all = uform_alloc(m->hosts, sizeof(uint32_t), "multimem tiers");
    if (!all) return UFORM_OUT_OF_MEMORY;
    uform_status_t status = uform_mesh_allgather(m, &mine, sizeof(mine), all);
    for (size_t h = 0; status == UFORM_OK && h < m->hosts; h++)
        if (all[h] < mine) mine = all[h];
    free(all);
    if (status == UFORM_OK) m->multimem_tier = (uform_multimem_tier_t)mine;
    return status;
}

uform_status_t uform_mesh_nccl_connect(uform_mesh_t *m, char *const *offers) {
    char why[512];
    uform_mesh_nccl_refusal(m, offers, why, sizeof(why));
    if (why[0]) {
        if (strcmp(uform_mesh_engine_asked(), "nccl") == 0)
            return uform_fail(UFORM_MESH, "mesh: UFORM_MESH_ENGINE=nccl, but %s", why);
        return UFORM_OK;   /* the gradients go through host memory, over Gloo */
    }
    size_t count = m->devices[m->host];
    uform_backend_t *backends = uform_alloc(count, sizeof(uform_backend_t), "GPU backends");
    m->nccl_owned = uform_alloc_zeroed(count, sizeof(uform_nccl_t *), "NCCL communicators");
    if (!backends || !m->nccl_owned) {
        free(backends);
        return UFORM_OUT_OF_MEMORY;
    }
    uform_vram_executor_backends(m->executor, backends, count);
    uint8_t id[UFORM_NCCL_ID_BYTES];
    uform_status_t status = UFORM_OK;
    if (m->host == 0) {
        status = uform_nccl_unique_id(id);
        if (status == UFORM_OK) status = uform_mesh_directory_set(&m->directory, UFORM_NCCL_ID_KEY, id, sizeof(id));
        /* a host 0 that failed here publishes nothing: the others time out naming the key */
    } else {
        void *value = NULL;
        size_t size = 0;
        status = uform_mesh_directory_get(&m->directory, UFORM_NCCL_ID_KEY, m->timeout_ms, &value, &size);
        if (status == UFORM_OK && size != sizeof(id))
            status = uform_fail(UFORM_MESH, "mesh: host 0 published an NCCL id of %zu bytes, not %zu", size,
                                sizeof(id));
        if (status == UFORM_OK) memcpy(id, value, sizeof(id));
        free(value);
    }
    if (status == UFORM_OK)
        status = uform_nccl_connect(id, m->ranks, m->rank, backends, count, m->timeout_ms, m->nccl_owned);
    free(backends);
    if (status != UFORM_OK) {
        free(m->nccl_owned);
        m->nccl_owned = NULL;
        return status;
    }
    m->nccl_owned_count = count;
    m->nccl = m->nccl_owned[0];   /* a host of one GPU sums through it; views borrow theirs */
    return uform_mesh_multimem_agree(m);
}

void uform_mesh_nccl_close(uform_mesh_t *m) {
    uform_nccl_group_free(m->nccl_owned, m->nccl_owned_count, m->broken);
    m->nccl_owned = NULL;
    m->nccl_owned_count = 0;
    m->nccl = NULL;
}

uform_status_t uform_nccl_group_connect(const uform_backend_t *devices, size_t count, uform_nccl_t ***comms) {
    *comms = NULL;
    const char *asked = uform_mesh_engine_asked();
    char why[384] = "";
    if (count < 2 || strcmp(asked, "gloo") == 0) return UFORM_OK;
    for (size_t i = 0; i < count; i++)   /* NCCL joins CUDA devices only (not a test's stand-ins) */
        if (devices[i].ops != &uform_cuda_backend_ops) return UFORM_OK;
    if (!uform_nccl_usable(why, sizeof(why))) {
        if (strcmp(asked, "nccl") == 0)
            return uform_fail(UFORM_UNSUPPORTED, "trainer: UFORM_MESH_ENGINE=nccl, but %s", why);
        return UFORM_OK;
    }
    uform_nccl_t **made = uform_alloc_zeroed(count, sizeof(uform_nccl_t *), "NCCL communicators");
    if (!made) return UFORM_OUT_OF_MEMORY;
    uint8_t id[UFORM_NCCL_ID_BYTES];
    /* one process: every rank is here, so the wait is short unless NCCL hangs */
    uform_status_t status = uform_nccl_unique_id(id);
    if (status == UFORM_OK) status = uform_nccl_connect(id, count, 0, devices, count, 300000u, made);
    if (status != UFORM_OK) {
        free(made);
        return status;
    }
    *comms = made;
    return UFORM_OK;
}

void uform_nccl_group_free(uform_nccl_t **comms, size_t count, bool broken) {
    for (size_t i = 0; comms && i < count; i++) {
        if (broken) uform_nccl_abort(comms[i]);
        else uform_nccl_free(comms[i], 10000u);
    }
    free(comms);
}

bool uform_mesh_sums_on_device(const uform_mesh_t *m) { return m && m->nccl; }

uform_status_t uform_mesh_device_prepare(uform_mesh_t *m, size_t slots) { return uform_nccl_prepare(m->nccl, slots); }

void uform_mesh_device_mark(uform_mesh_t *m, uform_backend_t *b, size_t slot) { uform_nccl_mark(m->nccl, b, slot); }

uform_status_t uform_mesh_nccl_sum(uform_mesh_t *m, float *values, size_t count, size_t slot) {
    return uform_nccl_sum(m->nccl, values, count, slot, m->timeout_ms);
}

void uform_mesh_device_join(uform_mesh_t *m, uform_backend_t *b) { uform_nccl_join(m->nccl, b); }

bool uform_mesh_gathers_on_device(const uform_mesh_t *m) {
    return m && m->nccl && uform_nccl_placed(m->nccl, m->host, m->hosts);
}

uform_status_t uform_mesh_nccl_gather(uform_mesh_t *m, uform_backend_t *b, const void *local,
                                      const size_t *bytes, void *out) {
    return uform_nccl_gather(m->nccl, b, local, bytes, out, m->timeout_ms);
}

#else /* no CUDA backend: every mesh sums through host memory */

void uform_mesh_nccl_offer(const uform_mesh_t *m, char *offer, size_t bytes) {
    (void)m;
    snprintf(offer, bytes, "-");
}
uform_status_t uform_mesh_nccl_connect(uform_mesh_t *m, char *const *offers) {
    (void)m, (void)offers;
    if (strcmp(uform_mesh_engine_asked(), "nccl") == 0)
        return uform_fail(UFORM_MESH, "mesh: UFORM_MESH_ENGINE=nccl, but this build of libuform has no CUDA backend");
    return UFORM_OK;
}
void uform_mesh_nccl_close(uform_mesh_t *m) { (void)m; }
uform_status_t uform_nccl_group_connect(const uform_backend_t *devices, size_t count, struct uform_nccl ***comms) {
    (void)devices, (void)count;
    *comms = NULL;
    return UFORM_OK;
}
void uform_nccl_group_free(struct uform_nccl **comms, size_t count, bool broken) {
    (void)count, (void)broken;
    free(comms);
}
bool uform_mesh_sums_on_device(const uform_mesh_t *m) { return (void)m, false; }
uform_status_t uform_mesh_device_prepare(uform_mesh_t *m, size_t slots) {
    (void)m, (void)slots;
    return uform_fail(UFORM_UNSUPPORTED, "mesh: no NCCL in this build");
}
void uform_mesh_device_mark(uform_mesh_t *m, uform_backend_t *b, size_t slot) { (void)m, (void)b, (void)slot; }
uform_status_t uform_mesh_nccl_sum(uform_mesh_t *m, float *values, size_t count, size_t slot) {
    (void)m, (void)values, (void)count, (void)slot;
    return uform_fail(UFORM_UNSUPPORTED, "mesh: no NCCL in this build");
}
void uform_mesh_device_join(uform_mesh_t *m, uform_backend_t *b) { (void)m, (void)b; }
bool uform_mesh_gathers_on_device(const uform_mesh_t *m) { return (void)m, false; }
uform_status_t uform_mesh_nccl_gather(uform_mesh_t *m, uform_backend_t *b, const void *local,
                                      const size_t *bytes, void *out) {
    (void)m, (void)b, (void)local, (void)bytes, (void)out;
    return uform_fail(UFORM_UNSUPPORTED, "this build of libuform has no CUDA backend");
}

#endif
