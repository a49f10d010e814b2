/* collectives.cu: the GPUs' sums through NCCL (collectives.h). Compiled, not
 * yet run on a GPU; under the CUDA emulation the same code runs against
 * nccl_emulation.h. */
#include "cuda_internal.h"
#include "collectives.h"
#include "library_loader.h"

#include <limits.h>
#include <stdio.h>
#include <time.h>

#if defined(UFORM_CUDA_EMULATION)
#include "nccl_emulation.h"
#define UFORM_NCCL_BUILT 1
#elif defined(UFORM_HAVE_NCCL)
#include <nccl.h>
#define UFORM_NCCL_BUILT 1
/* ncclCommQueryProperties (NCCL 2.29 on) is declared with the device API's
 * host side; its inline device declarations warn (821) without their bodies */
#if __has_include(<nccl_device/host.h>)
#pragma nv_diag_suppress 821
#include <nccl_device/host.h>
#pragma nv_diag_default 821
#define UFORM_NCCL_PROPERTIES 1
#endif
#endif
#ifdef UFORM_CUDA_EMULATION
#define UFORM_NCCL_PROPERTIES 1
#endif

#ifndef UFORM_NCCL_LIB_DIR
#define UFORM_NCCL_LIB_DIR ""
#endif

#ifdef UFORM_NCCL_BUILT

typedef struct {
    decltype(&ncclGetVersion) get_version;
    decltype(&ncclGetErrorString) error_string;
    decltype(&ncclGetLastError) last_error;
    decltype(&ncclGetUniqueId) unique_id;
    decltype(&ncclCommInitRankConfig) init_rank;
    decltype(&ncclCommGetAsyncError) async_error;
    decltype(&ncclCommAbort) abort;
    decltype(&ncclCommFinalize) finalize;
    decltype(&ncclCommDestroy) destroy;
    decltype(&ncclAllReduce) all_reduce;
    decltype(&ncclBroadcast) broadcast;
    decltype(&ncclGroupStart) group_start;
    decltype(&ncclGroupEnd) group_end;
#ifdef UFORM_NCCL_PROPERTIES
    decltype(&ncclCommQueryProperties) query_properties;   /* NULL before NCCL 2.29: no multimem tier */
#endif
} uform_nccl_api_t;

static uform_nccl_api_t uform_nccl_api;
static bool uform_nccl_loaded;
static char uform_nccl_error[512];
static pthread_once_t uform_nccl_once = PTHREAD_ONCE_INIT;

static void uform_nccl_load(void) {
    uform_nccl_api_t *api = &uform_nccl_api;
#ifdef UFORM_CUDA_EMULATION
    *api = uform_nccl_api_t{ncclGetVersion, ncclGetErrorString, ncclGetLastError, ncclGetUniqueId,
                            ncclCommInitRankConfig, ncclCommGetAsyncError, ncclCommAbort, ncclCommFinalize,
                            ncclCommDestroy, ncclAllReduce, ncclBroadcast, ncclGroupStart, ncclGroupEnd,
                            ncclCommQueryProperties};
#else
    void *library = uform_library_open("libnccl.so.2", UFORM_NCCL_LIB_DIR,
                                       "NCCL (libnccl.so.2, from the PyPI wheel nvidia-nccl-cu13)", uform_nccl_error,
                                       sizeof(uform_nccl_error));
    if (!library) return;
    bool complete = true;
#define UFORM_LOAD UFORM_LIBRARY_SYMBOL
    UFORM_LOAD(get_version, ncclGetVersion)
    UFORM_LOAD(error_string, ncclGetErrorString)
    UFORM_LOAD(last_error, ncclGetLastError)
    UFORM_LOAD(unique_id, ncclGetUniqueId)
    UFORM_LOAD(init_rank, ncclCommInitRankConfig)
    UFORM_LOAD(async_error, ncclCommGetAsyncError)
    UFORM_LOAD(abort, ncclCommAbort)
    UFORM_LOAD(finalize, ncclCommFinalize)
    UFORM_LOAD(destroy, ncclCommDestroy)
    UFORM_LOAD(all_reduce, ncclAllReduce)
    UFORM_LOAD(broadcast, ncclBroadcast)
    UFORM_LOAD(group_start, ncclGroupStart)
    UFORM_LOAD(group_end, ncclGroupEnd)
#undef UFORM_LOAD
#ifdef UFORM_NCCL_PROPERTIES
    api->query_properties = (decltype(api->query_properties))dlsym(library, "ncclCommQueryProperties");
#endif
    if (!complete) {
        snprintf(uform_nccl_error, sizeof(uform_nccl_error),
                 "NCCL (libnccl.so.2) lacks a function this build calls: older than 2.14?");
        dlclose(library);
        return;
    }
#endif
    /* The non-blocking communicators and their config need 2.14 or later;
     * the config's layout is the build's header's, versioned by NCCL. */
    int version = 0;
    if (api->get_version(&version) != ncclSuccess || version < 21400) {
        snprintf(uform_nccl_error, sizeof(uform_nccl_error),
                 "NCCL %d is older than 2.14, which uform needs (non-blocking communicators)", version);
        return;
    }
    uform_nccl_loaded = true;   /* stays loaded for the process */
}

static const uform_nccl_api_t *uform_nccl(void) {
    pthread_once(&uform_nccl_once, uform_nccl_load);
    return uform_nccl_loaded ? &uform_nccl_api : NULL;
}

struct uform_nccl {
    ncclComm_t comm;          /* NULL once aborted */
    int device, rank, ranks;
    cudaStream_t stream;      /* the sums' own stream */
    cudaEvent_t *marks;       /* [slots]: points of the compute stream (uform_nccl_mark) */
    size_t slots;
    cudaEvent_t ready;        /* where the compute stream stood before a gather */
    cudaEvent_t done;         /* after the last sum or gather issued */
};

static uint64_t uform_nccl_now_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000u + (uint64_t)now.tv_nsec / 1000000u;
}

static void uform_nccl_pause(void) {
    struct timespec pause = {0, 50000};   /* 50 us: a bucket's sum takes far longer */
    nanosleep(&pause, NULL);
}

/* NCCL's words for a failure: the communicator's last error, else the code's. */
static const char *uform_nccl_words(ncclComm_t comm, ncclResult_t result) {
    const uform_nccl_api_t *api = uform_nccl();
    const char *text = api && comm ? api->last_error(comm) : NULL;
    return text && text[0] ? text : api ? api->error_string(result) : "NCCL is not loaded";
}

/* The host's own answer "waited past the deadline": ncclNumResults, a value of
 * ncclResult_t that no NCCL call returns (NCCL's own ncclTimeout is 2.2x-new:
 * the GPU image's wheel lacks it). */
#define UFORM_NCCL_TIMED_OUT ncclNumResults

/* Waits until the communicator's pending work (its init, a non-blocking
 * call) is no longer in progress: its async error, or UFORM_NCCL_TIMED_OUT
 * past the deadline. */
static ncclResult_t uform_nccl_settle(ncclComm_t comm, uint64_t deadline) {
    const uform_nccl_api_t *api = uform_nccl();
    for (;;) {
        ncclResult_t state = ncclInProgress;
        ncclResult_t asked = api->async_error(comm, &state);
        if (asked != ncclSuccess) return asked;
        if (state != ncclInProgress) return state;
        if (uform_nccl_now_ms() >= deadline) return UFORM_NCCL_TIMED_OUT;
        uform_nccl_pause();
    }
}

static void uform_nccl_release(uform_nccl_t *c) {
    if (!c) return;
    if (c->device >= 0) (void)cudaSetDevice(c->device);
    for (size_t s = 0; s < c->slots; s++) (void)cudaEventDestroy(c->marks[s]);
    if (c->done) (void)cudaEventDestroy(c->done);
    if (c->ready) (void)cudaEventDestroy(c->ready);
    if (c->stream) (void)cudaStreamDestroy(c->stream);
    (void)cudaGetLastError();
    free(c->marks);
    free(c);
}

extern "C" bool uform_nccl_usable(char *why, size_t why_bytes) {
    if (uform_nccl()) return true;
    if (why && why_bytes) snprintf(why, why_bytes, "%s", uform_nccl_error);
    return false;
}

extern "C" uform_status_t uform_nccl_unique_id(uint8_t id[UFORM_NCCL_ID_BYTES]) {
    const uform_nccl_api_t *api = uform_nccl();
    if (!api) return uform_fail(UFORM_UNSUPPORTED, "%s", uform_nccl_error);
    ncclUniqueId unique;
    ncclResult_t result = api->unique_id(&unique);
    if (result != ncclSuccess)
        return uform_fail(UFORM_MESH, "NCCL could not make a unique id: %s", api->error_string(result));
    memcpy(id, unique.internal, UFORM_NCCL_ID_BYTES);
    return UFORM_OK;
}

extern "C" uform_status_t uform_nccl_device_uuid(const uform_backend_t *backend, char hex[33]) {
    int device = uform_cuda_context((uform_backend_t *)backend)->device;
    cudaDeviceProp properties;
    cudaError_t error = cudaGetDeviceProperties(&properties, device);
    if (error != cudaSuccess) {
        (void)cudaGetLastError();
        return uform_fail(UFORM_DEVICE, "GPU %d: %s", device, cudaGetErrorString(error));
    }
    for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", (unsigned)(uint8_t)properties.uuid.bytes[i]);
    return UFORM_OK;
}

extern "C" uform_status_t uform_nccl_connect(const uint8_t id[UFORM_NCCL_ID_BYTES], size_t ranks,
                                             size_t first_rank, const uform_backend_t *devices, size_t count,
                                             uint64_t timeout_ms, uform_nccl_t **comms) {
    const uform_nccl_api_t *api = uform_nccl();
    if (!api) return uform_fail(UFORM_UNSUPPORTED, "%s", uform_nccl_error);
    if (ranks > INT_MAX || first_rank + count > ranks)
        return uform_fail(UFORM_INVALID_ARGUMENT, "NCCL: ranks %zu..%zu of %zu", first_rank,
                          first_rank + count, ranks);
    memset(comms, 0, count * sizeof(*comms));
    uform_status_t status = UFORM_OK;
    for (size_t i = 0; i < count && status == UFORM_OK; i++) {
        uform_nccl_t *c = (uform_nccl_t *)calloc(1, sizeof(uform_nccl_t));
        if (!c) {
            status = uform_fail(UFORM_OUT_OF_MEMORY, "NCCL: a communicator's state");
            break;
        }
        comms[i] = c;
        c->device = uform_cuda_context((uform_backend_t *)&devices[i])->device;
        c->rank = (int)(first_rank + i), c->ranks = (int)ranks;
        cudaError_t error = cudaSetDevice(c->device);
        if (error == cudaSuccess) error = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
        if (error == cudaSuccess) error = cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming);
        if (error == cudaSuccess) error = cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming);
        if (error != cudaSuccess) {
            (void)cudaGetLastError();
            status = uform_fail(UFORM_DEVICE, "GPU %d: NCCL's stream: %s", c->device, cudaGetErrorString(error));
        }
    }
    ncclUniqueId unique;
    memcpy(unique.internal, id, UFORM_NCCL_ID_BYTES);
    uint64_t deadline = uform_nccl_now_ms() + timeout_ms;
    /* One thread creates this process's communicators: NCCL wants them in one
     * group, and non-blocking, so that a rank that never comes ends in a
     * bounded wait instead of a hang. */
    if (status == UFORM_OK) {
        ncclResult_t result = api->group_start();
        for (size_t i = 0; i < count && result == ncclSuccess; i++) {
            uform_nccl_t *c = comms[i];
            (void)cudaSetDevice(c->device);
            ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
            config.blocking = 0;
            result = api->init_rank(&c->comm, c->ranks, unique, c->rank, &config);
            if (result == ncclInProgress) result = ncclSuccess;
            if (result != ncclSuccess)
                status = uform_fail(UFORM_MESH, "NCCL could not start GPU %d as rank %d of %d: %s", c->device,
                                    c->rank, c->ranks, uform_nccl_words(c->comm, result));
        }
        ncclResult_t ended = api->group_end();
        if (status == UFORM_OK && ended != ncclSuccess && ended != ncclInProgress)
            status = uform_fail(UFORM_MESH, "NCCL could not start this host's communicators: %s",
                                api->error_string(ended));
    }
    for (size_t i = 0; i < count && status == UFORM_OK; i++) {
        uform_nccl_t *c = comms[i];
        ncclResult_t state = c->comm ? uform_nccl_settle(c->comm, deadline) : ncclInternalError;
        if (state == UFORM_NCCL_TIMED_OUT)
            status = uform_fail(UFORM_MESH, "NCCL: GPU %d (rank %d of %d) waited %llu ms for the other ranks to "
                                "join its communicator; some never came", c->device, c->rank, c->ranks,
                                (unsigned long long)timeout_ms);
        else if (state != ncclSuccess)
            status = uform_fail(UFORM_MESH, "NCCL could not join GPU %d as rank %d of %d: %s", c->device, c->rank,
                                c->ranks, uform_nccl_words(c->comm, state));
    }
    if (status != UFORM_OK)
        for (size_t i = 0; i < count; i++) {
            uform_nccl_abort(comms[i]);
            comms[i] = NULL;
        }
    return status;
}

extern "C" uform_multimem_tier_t uform_nccl_multimem_tier(const uform_nccl_t *c, size_t host_gpus) {
#ifdef UFORM_NCCL_PROPERTIES
    const uform_nccl_api_t *api = uform_nccl();
    if (!api || !api->query_properties || !c->comm) return UFORM_MULTIMEM_NONE;
    ncclCommProperties_t properties;   /* NCCL_COMM_PROPERTIES_INITIALIZER, every other field zero */
    memset(&properties, 0, sizeof(properties));
    properties.size = sizeof(properties), properties.magic = NCCL_API_MAGIC, properties.version = NCCL_VERSION_CODE;
    (void)cudaSetDevice(c->device);
    /* a library older than this build's header refuses the query: no tier */
    if (api->query_properties(c->comm, &properties) != ncclSuccess || !properties.multimemSupport ||
        properties.nLsaTeams < 1 || properties.nRanks % properties.nLsaTeams != 0)
        return UFORM_MULTIMEM_NONE;
    /* a team (ranks that reach each other's memory over NVLink) larger than
     * this host's GPUs spans hosts: an NVLink Switch System */
    size_t team = (size_t)(properties.nRanks / properties.nLsaTeams);
    return team > host_gpus ? UFORM_MULTIMEM_NVLINK_SWITCH : UFORM_MULTIMEM_NVLINK;
#else
    (void)c, (void)host_gpus;
    return UFORM_MULTIMEM_NONE;   /* built against an NCCL header without the query */
#endif
}

extern "C" uform_status_t uform_nccl_prepare(uform_nccl_t *c, size_t slots) {
    if (slots <= c->slots) return UFORM_OK;
    cudaEvent_t *marks = (cudaEvent_t *)realloc(c->marks, slots * sizeof(cudaEvent_t));
    if (!marks) return uform_fail(UFORM_OUT_OF_MEMORY, "NCCL: the marks of %zu buckets", slots);
    c->marks = marks;
    (void)cudaSetDevice(c->device);
    for (; c->slots < slots; c->slots++) {
        cudaError_t error = cudaEventCreateWithFlags(&c->marks[c->slots], cudaEventDisableTiming);
        if (error != cudaSuccess) {
            (void)cudaGetLastError();
            return uform_fail(UFORM_DEVICE, "GPU %d: an event for NCCL: %s", c->device, cudaGetErrorString(error));
        }
    }
    return UFORM_OK;
}

extern "C" void uform_nccl_mark(uform_nccl_t *c, uform_backend_t *b, size_t slot) {
    uform_cuda_ok(b, cudaEventRecord(c->marks[slot], uform_cuda_context(b)->stream), "NCCL mark (cudaEventRecord)");
}

/* The communicator is done for: aborted (its peers' collectives fail or time
 * out). `collective` names it ("the gradient sum"), `what` what went wrong. */
static uform_status_t uform_nccl_failed(uform_nccl_t *c, const char *collective, const char *what,
                                        const char *words) {
    uform_status_t status = uform_fail(UFORM_MESH, "NCCL: %s on GPU %d (rank %d of %d) %s: %s", collective,
                                       c->device, c->rank, c->ranks, what, words);
    const uform_nccl_api_t *api = uform_nccl();
    if (c->comm && api) (void)api->abort(c->comm);
    c->comm = NULL;
    return status;
}

/* After `collective` was issued on the comm's stream (NCCL's answer in
 * `result`): waits until it is done, at most until `deadline`. NCCL waits for
 * its peers on the GPU and does not give up: the host watches the stream and
 * NCCL's asynchronous errors, and aborts at the deadline (a peer died or
 * hung). */
static uform_status_t uform_nccl_finish(uform_nccl_t *c, const char *collective, ncclResult_t result,
                                        uint64_t deadline, uint64_t timeout_ms) {
    const uform_nccl_api_t *api = uform_nccl();
    if (result == ncclInProgress) result = uform_nccl_settle(c->comm, deadline);   /* still being issued */
    if (result != ncclSuccess)
        return uform_nccl_failed(c, collective, result == UFORM_NCCL_TIMED_OUT ? "was not issued in time" : "could not be issued",
                                 uform_nccl_words(c->comm, result));
    cudaError_t error = cudaEventRecord(c->done, c->stream);
    while (error == cudaSuccess && (error = cudaStreamQuery(c->stream)) == cudaErrorNotReady) {
        error = cudaSuccess;
        ncclResult_t state = ncclSuccess;
        if (api->async_error(c->comm, &state) == ncclSuccess && state != ncclSuccess && state != ncclInProgress)
            return uform_nccl_failed(c, collective, "failed", uform_nccl_words(c->comm, state));
        if (uform_nccl_now_ms() >= deadline) {
            char words[160];
            snprintf(words, sizeof(words), "no answer within the mesh's %llu ms timeout (a peer died or hung)",
                     (unsigned long long)timeout_ms);
            return uform_nccl_failed(c, collective, "timed out", words);
        }
        uform_nccl_pause();
    }
    if (error != cudaSuccess) {
        (void)cudaGetLastError();
        return uform_nccl_failed(c, collective, "failed on the GPU", cudaGetErrorString(error));
    }
    ncclResult_t state = ncclSuccess;   /* the emulation fails synchronously, yet reports it here */
    if (api->async_error(c->comm, &state) == ncclSuccess && state != ncclSuccess && state != ncclInProgress)
        return uform_nccl_failed(c, collective, "failed", uform_nccl_words(c->comm, state));
    return UFORM_OK;
}

extern "C" uform_status_t uform_nccl_sum(uform_nccl_t *c, float *values, size_t count, size_t slot,
                                         uint64_t timeout_ms) {
    const uform_nccl_api_t *api = uform_nccl();
    if (!c->comm)
        return uform_fail(UFORM_MESH, "NCCL: GPU %d's communicator was aborted after an earlier failure",
                          c->device);
    if (count == 0) return UFORM_OK;
    uint64_t deadline = uform_nccl_now_ms() + timeout_ms;
    (void)cudaSetDevice(c->device);   /* this thread's current device: the sums' stream's */
    cudaError_t error = cudaStreamWaitEvent(c->stream, c->marks[slot], 0);
    if (error != cudaSuccess) {
        (void)cudaGetLastError();
        return uform_nccl_failed(c, "the gradient sum", "could not wait for its gradients",
                                 cudaGetErrorString(error));
    }
    ncclResult_t result = api->all_reduce(values, values, count, ncclFloat32, ncclSum, c->comm, c->stream);
    return uform_nccl_finish(c, "the gradient sum", result, deadline, timeout_ms);
}

extern "C" void uform_nccl_join(uform_nccl_t *c, uform_backend_t *b) {
    uform_cuda_ok(b, cudaStreamWaitEvent(uform_cuda_context(b)->stream, c->done, 0),
                  "NCCL join (cudaStreamWaitEvent)");
}

extern "C" bool uform_nccl_placed(const uform_nccl_t *c, size_t rank, size_t ranks) {
    return c && c->comm && (size_t)c->rank == rank && (size_t)c->ranks == ranks;
}

/* A broadcast from every rank in turn, in one group: NCCL has no gather of
 * blocks of different sizes, and this is how its documentation builds one. */
extern "C" uform_status_t uform_nccl_gather(uform_nccl_t *c, uform_backend_t *b, const void *mine,
                                            const size_t *bytes, void *out, uint64_t timeout_ms) {
    const uform_nccl_api_t *api = uform_nccl();
    if (!c->comm)
        return uform_fail(UFORM_MESH, "NCCL: GPU %d's communicator was aborted after an earlier failure",
                          c->device);
    uint64_t deadline = uform_nccl_now_ms() + timeout_ms;
    (void)cudaSetDevice(c->device);
    /* the compute stream wrote `mine`: the gather's stream starts after it */
    cudaError_t error = cudaEventRecord(c->ready, uform_cuda_context(b)->stream);
    if (error == cudaSuccess) error = cudaStreamWaitEvent(c->stream, c->ready, 0);
    if (error != cudaSuccess) {
        (void)cudaGetLastError();
        return uform_nccl_failed(c, "the gather", "could not wait for its rows", cudaGetErrorString(error));
    }
    ncclResult_t result = api->group_start();
    size_t at = 0;
    for (int r = 0; r < c->ranks && result == ncclSuccess; r++) {
        uint8_t *block = (uint8_t *)out + at;
        if (bytes[r])   /* every rank knows every count: all skip the same */
            result = api->broadcast(r == c->rank ? mine : block, block, bytes[r], ncclUint8, r, c->comm, c->stream);
        if (result == ncclInProgress) result = ncclSuccess;
        at += bytes[r];
    }
    ncclResult_t ended = api->group_end();
    if (result == ncclSuccess) result = ended;
    uform_status_t status = uform_nccl_finish(c, "the gather", result, deadline, timeout_ms);
    if (status == UFORM_OK) uform_nccl_join(c, b);   /* the rows are used on the compute stream */
    return status;
}

extern "C" void uform_nccl_abort(uform_nccl_t *c) {
    if (!c) return;
    const uform_nccl_api_t *api = uform_nccl();
    if (c->comm && api) {
        (void)cudaSetDevice(c->device);
        (void)api->abort(c->comm);
    }
    uform_nccl_release(c);
}

extern "C" void uform_nccl_free(uform_nccl_t *c, uint64_t timeout_ms) {
    if (!c) return;
    const uform_nccl_api_t *api = uform_nccl();
    if (c->comm && api) {
        (void)cudaSetDevice(c->device);
        ncclResult_t result = api->finalize(c->comm);
        if (result == ncclInProgress) result = uform_nccl_settle(c->comm, uform_nccl_now_ms() + timeout_ms);
        (void)(result == ncclSuccess ? api->destroy(c->comm) : api->abort(c->comm));
    }
    uform_nccl_release(c);
}

#else /* no NCCL in this build: the mesh sums through host memory (Gloo) */

extern "C" bool uform_nccl_usable(char *why, size_t why_bytes) {
    if (why && why_bytes)
        snprintf(why, why_bytes, "this build of libuform has no NCCL (the PyPI wheel nvidia-nccl-cu13 was not "
                 "found when it was built)");
    return false;
}
extern "C" uform_status_t uform_nccl_unique_id(uint8_t id[UFORM_NCCL_ID_BYTES]) {
    (void)id;
    return uform_fail(UFORM_UNSUPPORTED, "this build of libuform has no NCCL");
}
extern "C" uform_status_t uform_nccl_device_uuid(const uform_backend_t *backend, char hex[33]) {
    (void)backend, hex[0] = 0;
    return uform_fail(UFORM_UNSUPPORTED, "this build of libuform has no NCCL");
}
extern "C" uform_status_t uform_nccl_connect(const uint8_t id[UFORM_NCCL_ID_BYTES], size_t ranks,
                                             size_t first_rank, const uform_backend_t *devices, size_t count,
                                             uint64_t timeout_ms, uform_nccl_t **comms) {
    (void)id, (void)ranks, (void)first_rank, (void)devices, (void)timeout_ms;
    memset(comms, 0, count * sizeof(*comms));
    return uform_fail(UFORM_UNSUPPORTED, "this build of libuform has no NCCL");
}
extern "C" uform_multimem_tier_t uform_nccl_multimem_tier(const uform_nccl_t *c, size_t host_gpus) {
    (void)c, (void)host_gpus;
    return UFORM_MULTIMEM_NONE;
}
extern "C" uform_status_t uform_nccl_prepare(uform_nccl_t *c, size_t slots) {
    (void)c, (void)slots;
    return uform_fail(UFORM_UNSUPPORTED, "this build of libuform has no NCCL");
}
extern "C" void uform_nccl_mark(uform_nccl_t *c, uform_backend_t *b, size_t slot) { (void)c, (void)b, (void)slot; }
extern "C" uform_status_t uform_nccl_sum(uform_nccl_t *c, float *values, size_t count, size_t slot,
                                         uint64_t timeout_ms) {
    (void)c, (void)values, (void)count, (void)slot, (void)timeout_ms;
    return uform_fail(UFORM_UNSUPPORTED, "this build of libuform has no NCCL");
}
extern "C" void uform_nccl_join(uform_nccl_t *c, uform_backend_t *b) { (void)c, (void)b; }
extern "C" bool uform_nccl_placed(const uform_nccl_t *c, size_t rank, size_t ranks) {
    (void)c, (void)rank, (void)ranks;
    return false;
}
extern "C" uform_status_t uform_nccl_gather(uform_nccl_t *c, uform_backend_t *b, const void *mine,
                                            const size_t *bytes, void *out, uint64_t timeout_ms) {
    (void)c, (void)b, (void)mine, (void)bytes, (void)out, (void)timeout_ms;
    return uform_fail(UFORM_UNSUPPORTED, "this build of libuform has no NCCL");
}
extern "C" void uform_nccl_abort(uform_nccl_t *c) { (void)c; }
extern "C" void uform_nccl_free(uform_nccl_t *c, uint64_t timeout_ms) { (void)c, (void)timeout_ms; }

#endif
