/* mesh.c: bootstrap, description and the collectives of a mesh (mesh.h,
 * docs/distributed.md).
 *
 * Bootstrap: the hosts meet in the shared directory (mesh_directory.c: a fresh
 * run id, atomic files, the timeout naming who did not arrive), publish their
 * names and device counts in the run's folder, and connect the engine (Gloo
 * over TCP) through the same folder. Collectives go to the engine; a failure
 * breaks the mesh and is reported naming the hosts that went silent. */
#include "train/mesh.h"
#include "backend/vram.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define UFORM_MESH_DEFAULT_TIMEOUT_MS 300000u
/* How long a host that saw a collective fail waits for the others' notes:
 * min(timeout, 5 s) + 1 s. The survivors of a dead host fail within
 * milliseconds of each other (each closes its connections); survivors blocked
 * on a hung host fail at their own timeouts, which started within a step's
 * imbalance of each other, hence the second beyond the timeout. A host silent
 * this long died or hung. */
#define UFORM_MESH_NOTE_WAIT_MS 5000u
#define UFORM_MESH_NOTE_SLACK_MS 1000u

#ifndef UFORM_HAVE_GLOO
/* Without Gloo, bootstrap refuses, so no mesh of several hosts exists and
 * these are never reached; they keep the collectives' code in one piece. */
uform_status_t uform_gloo_allgatherv(void *engine, const void *in, const size_t *counts, size_t hosts,
                                     void *out, uint64_t timeout_ms) {
    (void)engine, (void)in, (void)counts, (void)hosts, (void)out, (void)timeout_ms;
    return uform_fail(UFORM_UNSUPPORTED, "mesh: this build has no collective engine");
}
uform_status_t uform_gloo_sum(void *engine, float *values, size_t count, uint64_t timeout_ms) {
    (void)engine, (void)values, (void)count, (void)timeout_ms;
    return uform_fail(UFORM_UNSUPPORTED, "mesh: this build has no collective engine");
}
void uform_gloo_close(void *engine) { (void)engine; }
uform_status_t uform_gloo_connect(const uform_mesh_directory_t *directory, size_t host, size_t hosts,
                                  uint64_t timeout_ms, const char *hostname, const char *interface,
                                  void **engine) {
    (void)directory, (void)host, (void)hosts, (void)timeout_ms, (void)hostname, (void)interface;
    *engine = NULL;
    return uform_fail(UFORM_UNSUPPORTED, "mesh: this build has no collective engine");
}
#endif

static uint64_t uform_mesh_now_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000u + (uint64_t)now.tv_nsec / 1000000u;
}

/* Appends ", 3" (or "3" first) to a list of host numbers. */
static void uform_list_host(char *list, size_t size, size_t host) {
    size_t used = strlen(list);
    if (used + 24 < size) snprintf(list + used, size - used, used ? ", %zu" : "%zu", host);
}

/* The prefix of a note a host leaves when it abandons the mesh mid-step
 * (uform_mesh_abandon), its own failure's message after it. */
#define UFORM_MESH_LEFT "left: "

/* A collective failed: the mesh is broken for good. Close the connections
 * (peers blocked on us fail at once), leave a note, wait briefly for the
 * others' notes, and name those that sent none, or the one that left the
 * mesh after its own failure (its note says why). */
static uform_status_t uform_mesh_broke(uform_mesh_t *m) {
    if (m->local) {   /* threads of this process: the rank that broke it said why */
        m->broken = true;
        snprintf(m->broken_message, sizeof(m->broken_message), "%s", uform_local_message(m->local));
        /* local rank 0 speaks for the process on its mesh: the other hosts learn now */
        if (m->parent && m->host == m->parent->rank) uform_mesh_abandon(m->parent, UFORM_MESH);
        return uform_fail(UFORM_MESH, "%s", m->broken_message);
    }
    char engine_message[384];
    snprintf(engine_message, sizeof(engine_message), "%s", uform_last_error());
    m->broken = true;
    if (m->engine) uform_gloo_close(m->engine), m->engine = NULL;
    char key[64];
    snprintf(key, sizeof(key), "failed.%zu", m->host);
    (void)uform_mesh_directory_set(&m->directory, key, "1", 1);
    uint64_t wait = (m->timeout_ms < UFORM_MESH_NOTE_WAIT_MS ? m->timeout_ms : UFORM_MESH_NOTE_WAIT_MS) +
                    UFORM_MESH_NOTE_SLACK_MS;
    uint64_t deadline = uform_mesh_now_ms() + wait;
    char silent[192] = "", left[400] = "";
    size_t left_host = SIZE_MAX;
    bool *heard = uform_alloc_zeroed(m->hosts, sizeof(bool), "mesh notes");
    for (; heard;) {   /* a note once seen counts, even if its folder goes later */
        silent[0] = 0;
        for (size_t h = 0; h < m->hosts; h++) {
            if (h == m->host || heard[h]) continue;
            snprintf(key, sizeof(key), "failed.%zu", h);
            heard[h] = uform_mesh_directory_has(&m->directory, key);
            if (!heard[h]) uform_list_host(silent, sizeof(silent), h);
            void *note = NULL;
            size_t size = 0;
            if (heard[h] && left_host == SIZE_MAX &&
                uform_mesh_directory_get(&m->directory, key, 1, &note, &size) == UFORM_OK &&
                size > strlen(UFORM_MESH_LEFT) && memcmp(note, UFORM_MESH_LEFT, strlen(UFORM_MESH_LEFT)) == 0) {
                size_t text = size - strlen(UFORM_MESH_LEFT);
                text = text < sizeof(left) - 1 ? text : sizeof(left) - 1;
                memcpy(left, (char *)note + strlen(UFORM_MESH_LEFT), text);
                left[text] = 0;
                left_host = h;
            }
            free(note);
        }
        if (!silent[0] || uform_mesh_now_ms() >= deadline) break;
        usleep(5000);
    }
    free(heard);
    if (left_host != SIZE_MAX)
        snprintf(m->broken_message, sizeof(m->broken_message),
                 "mesh: host %zu failed and left the mesh (this is host %zu of %zu; bootstrap a new mesh "
                 "and resume from the last checkpoint): %s",
                 left_host, m->host, m->hosts, left);
    else if (silent[0])
        snprintf(m->broken_message, sizeof(m->broken_message),
                 "mesh: lost host%s %s (no word from %s after a collective failed: killed, crashed, "
                 "closed its mesh or hung past the %llu ms timeout); this is host %zu of %zu. %s",
                 strchr(silent, ',') ? "s" : "", silent, strchr(silent, ',') ? "them" : "it",
                 (unsigned long long)m->timeout_ms, m->host, m->hosts, engine_message);
    else
        snprintf(m->broken_message, sizeof(m->broken_message),
                 "mesh: a collective failed on every host (this is host %zu of %zu). %s", m->host,
                 m->hosts, engine_message);
    return uform_fail(UFORM_MESH, "%s", m->broken_message);
}

void uform_mesh_abandon(uform_mesh_t *m, uform_status_t status) {
    if (!m || m->broken || status == UFORM_OK) return;
    char own[1024];   /* the caller's failure stays this thread's message */
    snprintf(own, sizeof(own), "%s", uform_last_error());
    m->broken = true;
    if (m->local) {
        size_t first = m->parent ? m->parent->rank : 0;
        size_t here = m->parent ? m->parent->devices[m->parent->host] : m->hosts;
        snprintf(m->broken_message, sizeof(m->broken_message),
                 "the trainer's GPU %zu (of %zu) failed mid-step, so its GPUs no longer hold the same "
                 "run; free the trainer and resume from the last checkpoint: %.800s", m->host - first, here, own);
        uform_local_break(m->local, m->broken_message);
        uform_set_error_text(m->broken_message);
        if (m->parent && m->host == first) uform_mesh_abandon(m->parent, status);
        uform_set_error_text(own);
        return;
    }
    snprintf(m->broken_message, sizeof(m->broken_message),
             "mesh: this host (%zu of %zu) left the mesh mid-step after its own failure: %.900s", m->host, m->hosts,
             own);
    char key[64], note[sizeof(own) + 8];
    snprintf(key, sizeof(key), "failed.%zu", m->host);
    snprintf(note, sizeof(note), UFORM_MESH_LEFT "%s", own);
    (void)uform_mesh_directory_set(&m->directory, key, note, strlen(note));
    if (m->engine) uform_gloo_close(m->engine), m->engine = NULL;   /* peers in a collective fail now */
    uform_set_error_text(own);
}

static uform_status_t uform_mesh_usable(const uform_mesh_t *m) {
    if (m->broken)
        return uform_fail(UFORM_MESH, "%s (%s)", m->broken_message,
                          m->local && !m->parent ? "the trainer is broken: free it and resume from the last checkpoint"
                                                 : "the mesh is broken: bootstrap a new one");
    return UFORM_OK;
}

/* A rank of a world whose hosts are processes of several ranks (mesh.h:
 * parent): this host's block gathered among its threads, the hosts' blocks
 * across hosts by local rank 0, then copied to the others. A failure of the
 * mesh in local rank 0 breaks the threads' engine with its message. */
static uform_status_t uform_mesh_world_allgatherv(uform_mesh_t *m, const void *in, const size_t *counts,
                                                  void *out) {
    uform_mesh_t *p = m->parent;
    size_t local = m->host - p->rank, before = 0, total = 0;
    for (size_t r = 0; r < m->hosts; r++) {
        if (r < p->rank) before += counts[r];
        total += counts[r];
    }
    UFORM_TRY(uform_local_allgatherv(m->local, local, in, counts + p->rank, (uint8_t *)out + before));
    if (local == 0) {
        size_t *host_counts = uform_alloc_zeroed(p->hosts, sizeof(size_t), "mesh counts");
        uint8_t *block = NULL;
        uform_status_t status = host_counts ? UFORM_OK : UFORM_OUT_OF_MEMORY;
        for (size_t h = 0, r = 0; h < p->hosts && host_counts; h++)
            for (size_t d = 0; d < p->devices[h]; d++) host_counts[h] += counts[r++];
        if (status == UFORM_OK) {   /* the engine's input must not overlap its output */
            block = uform_alloc(host_counts[p->host], 1, "mesh block");
            status = block ? UFORM_OK : UFORM_OUT_OF_MEMORY;
        }
        if (status == UFORM_OK) {
            memcpy(block, (uint8_t *)out + before, host_counts[p->host]);
            status = uform_mesh_allgatherv(p, block, host_counts, out);
        }
        free(block);
        free(host_counts);
        if (status != UFORM_OK) {
            uform_local_break(m->local, uform_last_error());
            return status;
        }
    }
    return uform_local_broadcast(m->local, local, out, total);
}

/* The same for a sum: among the threads in rank order, across hosts by local
 * rank 0, then copied to the others. */
static uform_status_t uform_mesh_world_sum(uform_mesh_t *m, float *values, size_t count) {
    size_t local = m->host - m->parent->rank;
    UFORM_TRY(uform_local_sum(m->local, local, values, count));
    if (local == 0) {
        uform_status_t status = uform_mesh_sum(m->parent, values, count);
        if (status != UFORM_OK) {
            uform_local_break(m->local, uform_last_error());
            return status;
        }
    }
    return uform_local_broadcast(m->local, local, values, count * sizeof(float));
}

uform_status_t uform_mesh_allgatherv(uform_mesh_t *m, const void *in, const size_t *counts,
                                     void *out) {
    UFORM_TRY(uform_mesh_usable(m));
    size_t total = 0;
    for (size_t h = 0; h < m->hosts; h++) total += counts[h];
    if (total == 0) return UFORM_OK;   /* every host knows the counts: all skip together */
    if (m->hosts == 1) {
        memmove(out, in, counts[0]);
        return UFORM_OK;
    }
    uform_status_t status = m->parent  ? uform_mesh_world_allgatherv(m, in, counts, out)
                            : m->local ? uform_local_allgatherv(m->local, m->host, in, counts, out)
                                       : uform_gloo_allgatherv(m->engine, in, counts, m->hosts, out, m->timeout_ms);
    if (status != UFORM_OK) return uform_mesh_broke(m);
    return UFORM_OK;
}

uform_status_t uform_mesh_allgather(uform_mesh_t *m, const void *in, size_t bytes, void *out) {
    size_t *counts = uform_alloc(m->hosts, sizeof(size_t), "mesh counts");
    if (!counts) return UFORM_OUT_OF_MEMORY;
    for (size_t h = 0; h < m->hosts; h++) counts[h] = bytes;
    uform_status_t status = uform_mesh_allgatherv(m, in, counts, out);
    free(counts);
    return status;
}

uform_status_t uform_mesh_sum(uform_mesh_t *m, float *values, size_t count) {
    UFORM_TRY(uform_mesh_usable(m));
    if (m->hosts == 1 || count == 0) return UFORM_OK;
    uform_status_t status = m->parent  ? uform_mesh_world_sum(m, values, count)
                            : m->local ? uform_local_sum(m->local, m->host, values, count)
                                       : uform_gloo_sum(m->engine, values, count, m->timeout_ms);
    if (status != UFORM_OK) return uform_mesh_broke(m);
    return UFORM_OK;
}

/* After a failed NCCL collective: this rank's communicator is aborted, and
 * its sibling GPUs' threads learn now. */
static uform_status_t uform_mesh_device_broke(uform_mesh_t *m) {
    if (m->local) uform_local_break(m->local, uform_last_error());
    return uform_mesh_broke(m);
}

uform_status_t uform_mesh_device_sum(uform_mesh_t *m, float *values, size_t count, size_t slot) {
    UFORM_TRY(uform_mesh_usable(m));
    if (count == 0) return UFORM_OK;
    if (uform_mesh_nccl_sum(m, values, count, slot) == UFORM_OK) return UFORM_OK;
    return uform_mesh_device_broke(m);
}

uform_status_t uform_mesh_device_gather(uform_mesh_t *m, uform_backend_t *b, const void *local,
                                        const size_t *bytes, void *out) {
    UFORM_TRY(uform_mesh_usable(m));
    size_t total = 0;
    for (size_t h = 0; h < m->hosts; h++) total += bytes[h];
    if (total == 0) return UFORM_OK;   /* every host knows the counts: all skip together */
    if (uform_mesh_nccl_gather(m, b, local, bytes, out) == UFORM_OK) return UFORM_OK;
    return uform_mesh_device_broke(m);
}

typedef struct {
    int32_t status;
    char message[508];
} uform_mesh_word_t;

uform_status_t uform_mesh_agree(uform_mesh_t *m, uform_status_t status, const char *what) {
    uform_mesh_word_t mine;
    memset(&mine, 0, sizeof(mine));
    mine.status = (int32_t)status;
    char kept[sizeof(mine.message)];
    snprintf(kept, sizeof(kept), "%s", status != UFORM_OK ? uform_last_error() : "");
    memcpy(mine.message, kept, sizeof(kept));
    uform_mesh_word_t *all = uform_alloc(m->hosts, sizeof(uform_mesh_word_t), "mesh words");
    if (!all) {   /* cannot take part: leave, so the peers do not wait for this host */
        if (status == UFORM_OK) status = UFORM_OUT_OF_MEMORY;
        else uform_set_error_text(kept);
        uform_mesh_abandon(m, status);
        return status;
    }
    uform_status_t gathered = uform_mesh_allgather(m, &mine, sizeof(mine), all);
    uform_status_t answer = UFORM_OK;
    if (status != UFORM_OK) {
        uform_set_error_text(kept);    /* our own failure, whatever the others said */
        answer = status;
    } else if (gathered != UFORM_OK) {
        answer = gathered;
    } else {
        for (size_t h = 0; h < m->hosts; h++)
            if (all[h].status != UFORM_OK) {
                all[h].message[sizeof(all[h].message) - 1] = 0;
                answer = uform_fail(UFORM_MESH, "%s: host %zu of %zu failed, so no host applied it: %s",
                                    what, h, m->hosts, all[h].message);
                break;
            }
    }
    free(all);
    return answer;
}

uform_status_t uform_mesh_take(uform_mesh_t *m, uform_executor_t *executor) {
    if (executor != m->executor)
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "mesh: bootstrapped on another executor than the trainer's; pass the same executor");
    if (atomic_flag_test_and_set(&m->taken))
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "mesh: another trainer uses this mesh; free it first (one trainer per mesh)");
    return uform_mesh_usable(m);
}

void uform_mesh_release(uform_mesh_t *m) {
    if (m) atomic_flag_clear(&m->taken);
}

void uform_mesh_free(uform_mesh_t *m) {
    if (!m) return;
    uform_mesh_nccl_close(m);
    if (m->engine) uform_gloo_close(m->engine);
    /* host 0 removes the run's folder and handshake files (the others: nothing);
     * not after a failure, while peers may still read the notes in it */
    if (m->directory.hosts && !m->broken) uform_mesh_directory_leave(&m->directory);
    if (m->names)
        for (size_t h = 0; h < m->hosts; h++) free(m->names[h]);
    free(m->names);
    free(m->devices);
    free(m);
}

/* Every host's device count, GPU class and name, through the run's folder.
 * The hosts' GPUs must be of one class: describe() answers the class every GPU
 * of the run dispatches as, and a CPU host among GPU hosts would train with
 * other kernels than theirs. */
static uform_status_t uform_mesh_introduce(uform_mesh_t *m, char **offers) {
    char key[64], mine[2048], name[256] = {0}, offer[1536];
    uform_gpu_class_t *classes = uform_alloc_zeroed(m->hosts, sizeof(uform_gpu_class_t), "mesh GPU classes");
    if (!classes) return UFORM_OUT_OF_MEMORY;
    if (gethostname(name, sizeof(name) - 1) != 0) snprintf(name, sizeof(name), "unknown");
    uform_mesh_nccl_offer(m, offer, sizeof(offer));
    snprintf(mine, sizeof(mine), "%zu %d %s %s", m->devices[m->host], (int)m->gpu_class, offer, name);
    snprintf(key, sizeof(key), "host.%zu", m->host);
    uform_status_t status = uform_mesh_directory_set(&m->directory, key, mine, strlen(mine));
    for (size_t h = 0; h < m->hosts && status == UFORM_OK; h++) {
        void *value = NULL;
        size_t size = 0;
        snprintf(key, sizeof(key), "host.%zu", h);
        status = uform_mesh_directory_get(&m->directory, key, m->timeout_ms, &value, &size);
        if (status != UFORM_OK) break;
        char *text = uform_alloc(size + 1, 1, "host name");
        if (!text) {
            free(value);
            status = UFORM_OUT_OF_MEMORY;
            break;
        }
        memcpy(text, value, size);
        text[size] = 0;
        free(value);
        char *end = NULL;
        unsigned long long devices = strtoull(text, &end, 10);
        long gpu_class = *end == ' ' ? strtol(end + 1, &end, 10) : -1;
        char *offered = *end == ' ' ? end + 1 : NULL;   /* "-" or its GPUs' UUIDs (mesh_nccl.c) */
        char *named = offered ? strchr(offered, ' ') : NULL;
        if (!named || devices == 0 || devices > 4096 || gpu_class < UFORM_GPU_CLASS_NONE ||
            gpu_class > UFORM_GPU_CLASS_BLACKWELL) {
            free(text);
            status = uform_fail(UFORM_MESH, "mesh: host %zu published a malformed introduction (a host of "
                                "another uform version?)", h);
            break;
        }
        m->devices[h] = (size_t)devices;
        classes[h] = (uform_gpu_class_t)gpu_class;
        *named = 0;
        offers[h] = strdup(offered);
        memmove(text, named + 1, strlen(named + 1) + 1);
        m->names[h] = text;
        if (!offers[h]) {
            status = UFORM_OUT_OF_MEMORY;
            break;
        }
    }
    for (size_t h = 1; h < m->hosts && status == UFORM_OK; h++)
        if (classes[h] != classes[0])
            status = uform_fail(UFORM_MESH,
                                "mesh: host %zu (%s) runs on %s and host 0 (%s) on %s: every host of a mesh "
                                "runs on one kind of device (one GPU class, or CPUs); bootstrap each with the "
                                "same kind of executor",
                                h, m->names[h], classes[h] ? uform_gpu_class_name(classes[h]) : "CPUs",
                                m->names[0], classes[0] ? uform_gpu_class_name(classes[0]) : "CPUs");
    free(classes);
    return status;
}

uform_status_t uform_mesh_bootstrap(uform_executor_t *executor, const uform_mesh_options_t *options,
                                    uform_mesh_t **mesh) {
    if (!mesh) return uform_fail(UFORM_INVALID_ARGUMENT, "mesh: NULL");
    *mesh = NULL;
    if (!executor) return uform_fail(UFORM_INVALID_ARGUMENT, "executor: NULL");
    if (!options) return uform_fail(UFORM_INVALID_ARGUMENT, "options: NULL");
#ifndef UFORM_HAVE_GLOO
    if (options)   /* always: the code below stays compiled, the stubs above answer for Gloo */
        return uform_fail(UFORM_UNSUPPORTED,
                          "Mesh.bootstrap: this build of libuform has no collective engine (Gloo, "
                          "Debian's libgloo-dev, was not found when it was built; install it and rebuild)");
#endif
    /* a host's replicas: its GPUs on a VRAM executor, else its memory domains */
    uform_gpu_class_t gpu_class = UFORM_GPU_CLASS_NONE;
    size_t replicas = uform_vram_executor_gpus(executor, &gpu_class);
    if (!replicas) UFORM_TRY(uform_executor_memory_domains(executor, &replicas));
    uform_mesh_t *m = uform_alloc_zeroed(1, sizeof(uform_mesh_t), "mesh");
    if (!m) return UFORM_OUT_OF_MEMORY;
    atomic_flag_clear(&m->taken);
    m->executor = executor;
    m->host = options->host_domain_index;
    m->hosts = options->host_domain_count;
    m->timeout_ms = options->timeout_ms ? options->timeout_ms : UFORM_MESH_DEFAULT_TIMEOUT_MS;
    m->gpu_class = gpu_class;
    uform_status_t status = uform_mesh_directory_meet(options->directory, options->job, m->host,
                                                      m->hosts, m->timeout_ms, &m->directory);
    if (status == UFORM_OK) {
        m->devices = uform_alloc_zeroed(m->hosts, sizeof(size_t), "mesh devices");
        m->names = uform_alloc_zeroed(m->hosts, sizeof(char *), "mesh host names");
        if (!m->devices || !m->names) status = UFORM_OUT_OF_MEMORY;
    }
    char **offers = NULL;
    if (status == UFORM_OK) {
        m->devices[m->host] = replicas;
        offers = uform_alloc_zeroed(m->hosts, sizeof(char *), "mesh offers");
        status = offers ? uform_mesh_introduce(m, offers) : UFORM_OUT_OF_MEMORY;
    }
    if (status == UFORM_OK && m->hosts > 1)
        status = uform_gloo_connect(&m->directory, m->host, m->hosts, m->timeout_ms,
                                    getenv("UFORM_MESH_HOSTNAME"), getenv("UFORM_MESH_INTERFACE"),
                                    &m->engine);
    if (status == UFORM_OK) {
        for (size_t h = 0; h < m->hosts; h++) {
            if (h < m->host) m->rank += m->devices[h];
            m->ranks += m->devices[h];
        }
        status = uform_mesh_nccl_connect(m, offers);
    }
    for (size_t h = 0; offers && h < m->hosts; h++) free(offers[h]);
    free(offers);
    if (status != UFORM_OK) {
        uform_mesh_free(m);
        return status;
    }
    *mesh = m;
    return UFORM_OK;
}

uform_status_t uform_mesh_describe(const uform_mesh_t *m, uform_mesh_description_t *out) {
    if (!m || !out) return uform_fail(UFORM_INVALID_ARGUMENT, "mesh_describe: NULL argument");
    memset(out, 0, sizeof(*out));
    out->host_domain_index = m->host;
    out->host_domain_count = m->hosts;
    out->rank = m->rank;
    out->ranks = m->ranks;
    out->devices = m->devices;
    out->hosts = (const char *const *)m->names;
    out->multimem_tier = m->multimem_tier;
    out->gpu_class = m->gpu_class;
    out->engine = m->nccl_owned ? "nccl" : "gloo";
    out->run_id = m->directory.run_id;
    out->timeout_ms = m->timeout_ms;
    return UFORM_OK;
}
