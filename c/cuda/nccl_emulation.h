/* nccl_emulation.h: enough of NCCL (the subset collectives.cu calls, with
 * NCCL 2.32's names, types and values) to sum gradients across emulated GPUs
 * on the CPU. collectives.cu includes this instead of <nccl.h> under
 * UFORM_CUDA_EMULATION, after emulation.h (whose cudaStream_t it takes).
 *
 * The ranks of one unique id meet in a POSIX shared-memory segment named
 * "/uform-nccl-" + the hex of the id's first 16 bytes, so they may be threads
 * of one process or processes of one machine (tests fork several hosts of 1
 * or 2 emulated GPUs each). Its header holds lock-free atomics (which work
 * across processes): the ranks registered, a barrier counter, an aborted flag
 * and each rank's pid; then one slot of CHUNK floats per rank. An allreduce
 * goes chunk by chunk: each rank copies its chunk into its slot, barrier,
 * each rank folds the slots into its recvbuff, barrier (so no slot is
 * overwritten while a peer still reads it). Every rank folds in rank order,
 * ((x0 + x1) + x2) + ..., so all get the same bits; real NCCL's ring or tree
 * order differs, within FP32 rounding. The name is unlinked once every rank
 * has registered (the mappings stay), or at abort or destroy.
 *
 * Calls are synchronous (a stream is only a name, as in emulation.h); inside
 * ncclGroupStart/ncclGroupEnd collectives are deferred and ncclGroupEnd steps
 * them all in turn, so one thread may drive the comms of several GPUs. A wait
 * gives up when a peer aborted, a peer's process died or is a zombie (checked
 * every 10 ms), or after UFORM_EMULATION_NCCL_TIMEOUT_MS (30000 without it)
 * with no progress: real NCCL would hang and the caller's watchdog abort it,
 * but that watchdog cannot run while an emulated call blocks. A collective
 * that fails returns ncclSuccess and records ncclRemoteError as the comm's
 * async error, as real NCCL fails asynchronously. UFORM_EMULATION_NCCL_DIE_AT
 * kills the process at a given sum (tests of a host lost mid-step);
 * ncclBroadcast moves bytes through the same slots (the root's alone), and
 * UFORM_EMULATION_NCCL_DIE_AT_BROADCAST kills at a given broadcast;
 * UFORM_EMULATION_NCCL_LSA_RANKS makes up NVLink SHARP (ncclCommQueryProperties). Not emulated: other
 * collectives, types and operations, streams, CUDA graphs, splitting, any
 * timing. */
#ifndef UFORM_NCCL_EMULATION_H
#define UFORM_NCCL_EMULATION_H

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <new>
#include <vector>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define NCCL_MAJOR 2
#define NCCL_MINOR 32
#define NCCL_PATCH 6
#define NCCL_SUFFIX ""
#define NCCL_VERSION_CODE 23206
#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))
#define NCCL_COMM_NULL NULL
#define NCCL_UNIQUE_ID_BYTES 128
#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_API_MAGIC 0xcafebeef

typedef struct ncclComm *ncclComm_t;
typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;
typedef enum { ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInternalError = 3,
               ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclRemoteError = 6, ncclInProgress = 7,
               ncclTimeout = 8, ncclNumResults = 9 } ncclResult_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4, ncclNumOps = 5,
               ncclMaxRedOp = 0x7fffffff } ncclRedOp_t;
typedef enum { ncclInt8 = 0, ncclChar = 0, ncclUint8 = 1, ncclInt32 = 2, ncclInt = 2, ncclUint32 = 3,
               ncclInt64 = 4, ncclUint64 = 5, ncclFloat16 = 6, ncclHalf = 6, ncclFloat32 = 7, ncclFloat = 7,
               ncclFloat64 = 8, ncclDouble = 8, ncclBfloat16 = 9, ncclFloat8e4m3 = 10, ncclFloat8e5m2 = 11,
               ncclNumTypes = 12 } ncclDataType_t;

/* The real layout, so code setting any field compiles; only blocking is read. */
typedef struct ncclConfig_v23100 {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int blocking, cgaClusterSize, minCTAs, maxCTAs;
    const char *netName;
    int splitShare, trafficClass;
    const char *commName;
    int collnetEnable, CTAPolicy, shrinkShare, nvlsCTAs, nChannelsPerNetPeer, nvlinkCentricSched,
        graphUsageMode, numRmaCtx, maxP2pPeers, graphStreamOrdering, launchOrderImplicit, numRmaSig,
        rmaEagerInit, hostCftMode, nvlsHostMode;
} ncclConfig_t;
/* Every field but size, magic and version unset (blocking: the default, 1). */
#define NCCL_CONFIG_INITIALIZER                                                                   \
    { sizeof(ncclConfig_t), NCCL_API_MAGIC, NCCL_VERSION_CODE,                                    \
      NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, \
      NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, \
      NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, \
      NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, \
      NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, \
      NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT }

namespace uform_nccl_emulated {
constexpr size_t kChunk = 65536;   /* floats per rank's slot */
constexpr int kMaxRanks = 64;      /* a bit each in `registered` */

/* Zero-filled by ftruncate, a valid state for each field. */
struct Shared {
    std::atomic<uint64_t> registered;   /* bit r: rank r has joined */
    std::atomic<uint64_t> barriers;     /* arrivals at barriers, all ranks together */
    std::atomic<int32_t> aborted;       /* 0, or 1 + the first rank that called ncclCommAbort */
    std::atomic<int32_t> unlinked;      /* the name is gone from /dev/shm */
    std::atomic<int32_t> pid[kMaxRanks];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<int32_t>::is_always_lock_free,
              "the shared header's atomics must be lock-free to work across processes");
constexpr size_t kSlots = (sizeof(Shared) + 63) / 64 * 64;

static inline int64_t now_ns() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}
static inline int64_t timeout_ms() {
    const char *given = getenv("UFORM_EMULATION_NCCL_TIMEOUT_MS");
    long long ms = given ? atoll(given) : 0;
    return ms > 0 ? ms : 30000;
}
/* Spin a little (a peer is usually a moment away), then sleep from 50 us
 * doubling to 1 ms: a peer still computing its backward (seconds under the
 * emulation) must not lose its core to our wake-ups. */
static inline void backoff(int &spins) {
    if (spins++ < 64) { sched_yield(); return; }
    int doublings = std::min(spins - 64, 5);
    timespec t = {0, std::min(50000L << doublings, 1000000L)};
    nanosleep(&t, nullptr);
}
/* Gone, or a zombie its parent has not reaped yet (kill still succeeds then). */
static inline bool dead(pid_t pid) {
    if (kill(pid, 0) == -1 && errno == ESRCH) return true;
    char path[40], line[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ssize_t n = read(fd, line, sizeof(line) - 1);
    close(fd);
    if (n <= 0) return false;
    line[n] = 0;
    const char *end = strrchr(line, ')');   /* the state follows "(command) " */
    return end && end[1] == ' ' && (end[2] == 'Z' || end[2] == 'X');
}
static thread_local char last_error[192];   /* ncclGetLastError(NULL) */
}   // namespace uform_nccl_emulated

struct ncclComm {
    uform_nccl_emulated::Shared *shared;
    size_t bytes;
    char name[48];
    int rank, nranks;
    uint64_t arrived;        /* barriers this rank has arrived at */
    ncclResult_t state;      /* ncclInProgress until every rank joined, then ncclSuccess or the failure */
    int64_t timeout, deadline, next_pid_check;   /* ns */
    char text[192];
};

namespace uform_nccl_emulated {
static inline float *slot(ncclComm *comm, int rank) {
    return (float *)((char *)comm->shared + kSlots) + (size_t)rank * kChunk;
}
/* Records the comm's failure; true, so that waits can `return fail(...)`. */
__attribute__((format(printf, 2, 3))) static inline bool fail(ncclComm *comm, const char *format, ...) {
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(comm->text, sizeof(comm->text), format, arguments);
    va_end(arguments);
    comm->state = ncclRemoteError;
    return true;
}
/* Called while waiting on the peers: true (and the comm failed) when they
 * will not come. */
static inline bool failed(ncclComm *comm) {
    if (int who = comm->shared->aborted.load()) return fail(comm, "rank %d aborted the communicator", who - 1);
    int64_t now = now_ns();
    if (now >= comm->next_pid_check) {
        comm->next_pid_check = now + 10000000;
        pid_t self = getpid();
        for (int r = 0; r < comm->nranks; r++) {
            pid_t pid = comm->shared->pid[r].load();
            if (pid > 0 && pid != self && dead(pid)) return fail(comm, "rank %d (process %d) died", r, (int)pid);
        }
    }
    if (now > comm->deadline)
        return fail(comm, "rank %d timed out after %lld ms waiting for its peers (UFORM_EMULATION_NCCL_TIMEOUT_MS)",
                    comm->rank, (long long)(comm->timeout / 1000000));
    return false;
}
/* Completes the init once every rank has registered; never blocks. */
static inline ncclResult_t poll_init(ncclComm *comm) {
    if (comm->state != ncclInProgress) return comm->state;
    uint64_t all = comm->nranks == 64 ? ~0ull : (1ull << comm->nranks) - 1;
    if (comm->shared->registered.load() == all) {
        if (!comm->shared->unlinked.exchange(1)) shm_unlink(comm->name);
        return comm->state = ncclSuccess;
    }
    failed(comm);
    return comm->state;
}
static inline void arrive(ncclComm *comm) {
    comm->arrived++;
    comm->shared->barriers.fetch_add(1);
    comm->deadline = now_ns() + comm->timeout;
}
static inline void release(ncclComm *comm) {
    if (!comm->shared->unlinked.exchange(1)) shm_unlink(comm->name);
    munmap(comm->shared, comm->bytes);
    delete comm;
}

/* An allreduce of floats or a broadcast of bytes as steps that never block,
 * so that a group's can take turns on one thread; with count 0 it only awaits
 * the init. Counts are bytes. */
struct Op {
    ncclComm *comm;
    const char *send;
    char *recv;
    size_t count, done, n;
    int phase;   /* 0: copy the next chunk in; 1, 2: at the barrier after the copy, after the fold */
    bool init, finished;
    bool broadcast;   /* else a float sum */
    int root;         /* the broadcast's */
};
constexpr size_t kChunkBytes = kChunk * sizeof(float);
/* Advances `op` as far as it can; true once it is finished (or failed). */
static inline bool step(Op &op, bool &moved) {
    ncclComm *comm = op.comm;
    if (poll_init(comm) == ncclInProgress) return false;
    if (comm->state != ncclSuccess) return true;   /* failed before: buffers untouched */
    for (;; moved = true) {
        if (op.phase == 0) {
            if (op.done == op.count) return true;
            op.n = std::min(kChunkBytes, op.count - op.done);
            if (!op.broadcast || comm->rank == op.root) memcpy(slot(comm, comm->rank), op.send + op.done, op.n);
            arrive(comm);
            op.phase = 1;
        } else if (comm->shared->barriers.load() < (uint64_t)comm->nranks * comm->arrived) {
            return failed(comm);
        } else if (op.phase == 1) {
            if (op.broadcast) {
                memcpy(op.recv + op.done, slot(comm, op.root), op.n);
            } else {
                float *out = (float *)(op.recv + op.done);
                memcpy(out, slot(comm, 0), op.n);
                for (int r = 1; r < comm->nranks; r++) {
                    const float *in = slot(comm, r);
                    for (size_t i = 0; i < op.n / sizeof(float); i++) out[i] += in[i];
                }
            }
            arrive(comm);
            op.phase = 2;
        } else {
            op.done += op.n;
            op.phase = 0;
        }
    }
}
/* Steps the ops in turn until all are finished; an op waits for those
 * issued before it on its comm (they share its slot). */
static inline void run(Op *ops, size_t count) {
    for (int spins = 0;;) {
        bool moved = false, all = true;
        for (size_t i = 0; i < count; i++) {
            bool behind = false;
            for (size_t j = 0; j < i && !behind; j++) behind = !ops[j].finished && ops[j].comm == ops[i].comm;
            if (!ops[i].finished && !behind) ops[i].finished = step(ops[i], moved);
            all = all && ops[i].finished;
        }
        if (all) return;
        if (moved) spins = 0;
        else backoff(spins);
    }
}
struct Group {
    int depth;
    bool nonblocking;       /* a non-blocking comm was initialized in it */
    std::vector<Op> ops;    /* deferred to ncclGroupEnd */
};
static thread_local Group group;

static inline ncclResult_t refuse(ncclResult_t result, const char *text) {
    snprintf(last_error, sizeof(last_error), "%s", text);
    return result;
}
}   // namespace uform_nccl_emulated

static inline ncclResult_t ncclGetVersion(int *version) {
    if (!version) return ncclInvalidArgument;
    return *version = NCCL_VERSION_CODE, ncclSuccess;
}

static inline const char *ncclGetErrorString(ncclResult_t result) {
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    case ncclTimeout: return "operation timed out";
    default: return "unknown result code";
    }
}

/* A comm's last failure, or (NULL) this thread's last refused call. */
static inline const char *ncclGetLastError(ncclComm_t comm) {
    return comm ? comm->text : uform_nccl_emulated::last_error;
}

/* Random bytes: the first 16 name the segment, so ids must not collide. */
static inline ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    if (!id) return ncclInvalidArgument;
    size_t got = 0;
    while (got < sizeof(id->internal)) {
        ssize_t n = getrandom(id->internal + got, sizeof(id->internal) - got, 0);
        if (n <= 0 && !(n < 0 && errno == EINTR)) break;
        if (n > 0) got += (size_t)n;
    }
    if (got < sizeof(id->internal)) {   /* no getrandom: mix pid, time and a counter (splitmix64) */
        static std::atomic<uint64_t> counter{0};
        uint64_t x = ((uint64_t)getpid() << 32) ^ (uint64_t)uform_nccl_emulated::now_ns();
        x ^= counter.fetch_add(1) << 48;
        for (size_t i = 0; i < sizeof(id->internal); i += 8) {
            uint64_t z = (x += 0x9e3779b97f4a7c15ull);
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull, z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            z ^= z >> 31;
            memcpy(id->internal + i, &z, 8);
        }
    }
    return ncclSuccess;
}

/* Joins (or creates) the id's segment and registers the rank. Non-blocking:
 * returns ncclInProgress at once (ncclCommGetAsyncError tells when the peers
 * came). Blocking in a group: ncclGroupEnd waits (a comm that failed stays,
 * to be destroyed). Blocking otherwise: waits here, and on failure frees the
 * comm and sets *comm to NULL. */
static inline ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                                  ncclConfig_t *config) {
    using namespace uform_nccl_emulated;
    if (!comm) return refuse(ncclInvalidArgument, "comm is NULL");
    *comm = nullptr;
    if (nranks < 1 || nranks > kMaxRanks || rank < 0 || rank >= nranks)
        return refuse(ncclInvalidArgument, "nranks must be 1 to 64 and rank 0 to nranks - 1");
    if (config && config->magic != NCCL_API_MAGIC)
        return refuse(ncclInvalidArgument, "config not initialized with NCCL_CONFIG_INITIALIZER");
    bool blocking = !config || config->blocking != 0;
    ncclComm *c = new (std::nothrow) ncclComm();
    if (!c) return refuse(ncclSystemError, "out of memory");
    c->rank = rank, c->nranks = nranks, c->state = ncclInProgress;
    c->bytes = kSlots + (size_t)nranks * kChunk * sizeof(float);
    c->timeout = timeout_ms() * 1000000, c->deadline = now_ns() + c->timeout;
    int at = snprintf(c->name, sizeof(c->name), "/uform-nccl-");
    for (int i = 0; i < 16; i++)
        at += snprintf(c->name + at, sizeof(c->name) - at, "%02x", (unsigned)(unsigned char)id.internal[i]);
    /* The first rank creates and sizes the segment; the others wait for the size. */
    int fd = -1;
    for (int spins = 0; fd < 0;) {
        if (now_ns() > c->deadline) return delete c, refuse(ncclRemoteError, "timed out opening the segment");
        if ((fd = shm_open(c->name, O_RDWR | O_CREAT | O_EXCL, 0600)) >= 0) {
            if (ftruncate(fd, (off_t)c->bytes) != 0)
                return close(fd), shm_unlink(c->name), delete c, refuse(ncclSystemError, "ftruncate failed");
            break;
        }
        if (errno != EEXIST) return delete c, refuse(ncclSystemError, "shm_open failed");
        if ((fd = shm_open(c->name, O_RDWR, 0600)) < 0) {
            if (errno != ENOENT) return delete c, refuse(ncclSystemError, "shm_open failed");
            backoff(spins);   /* unlinked in between: create it anew */
            continue;
        }
        struct stat st;
        off_t size = 0;
        while (fstat(fd, &st) == 0 && (size = st.st_size) == 0 && now_ns() <= c->deadline) backoff(spins);
        if (size != (off_t)c->bytes) {
            close(fd), delete c;
            return size ? refuse(ncclInvalidArgument, "the peers were given another nranks")
                        : refuse(ncclRemoteError, "timed out waiting for the segment's creator");
        }
    }
    void *map = mmap(nullptr, c->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return delete c, refuse(ncclSystemError, "mmap failed");
    c->shared = (Shared *)map;
    if (c->shared->registered.fetch_or(1ull << rank) & (1ull << rank)) {   /* not ours to unlink */
        munmap(map, c->bytes), delete c;
        return refuse(ncclInvalidUsage, "this rank of this unique id is already initialized");
    }
    c->shared->pid[rank].store(getpid());
    *comm = c;
    if (!blocking) {
        if (group.depth) group.nonblocking = true;
        poll_init(c);
        return ncclInProgress;
    }
    Op wait = {c, nullptr, nullptr, 0, 0, 0, 0, true, false, false, 0};
    if (group.depth) return group.ops.push_back(wait), ncclSuccess;
    run(&wait, 1);
    if (c->state == ncclSuccess) return ncclSuccess;
    ncclResult_t result = refuse(c->state, c->text);
    release(c);
    *comm = nullptr;
    return result;
}

static inline ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

static inline ncclResult_t ncclGroupStart(void) { return uform_nccl_emulated::group.depth++, ncclSuccess; }

/* The outermost end runs what the group deferred: the waits of blocking
 * inits (whose failure it returns) and the collectives, taking turns. */
static inline ncclResult_t ncclGroupEnd(void) {
    using namespace uform_nccl_emulated;
    if (group.depth == 0) return refuse(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    if (--group.depth) return ncclSuccess;
    run(group.ops.data(), group.ops.size());
    ncclResult_t result = group.nonblocking ? ncclInProgress : ncclSuccess;
    for (const Op &op : group.ops)
        if (op.init && op.comm->state != ncclSuccess) result = refuse(op.comm->state, op.comm->text);
    group.ops.clear(), group.nonblocking = false;
    return result;
}

static inline ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
    if (!comm || !asyncError) return ncclInvalidArgument;
    return *asyncError = uform_nccl_emulated::poll_init(comm), ncclSuccess;
}

/* Float sums only. A failure is recorded on the comm, not returned. */
static inline ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                         ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    using namespace uform_nccl_emulated;
    (void)stream;
    if (!comm || datatype != ncclFloat32 || op != ncclSum || (count && (!sendbuff || !recvbuff)))
        return refuse(ncclInvalidArgument, "the emulation sums ncclFloat32 only, with a comm and buffers");
    /* Fault injection for tests: UFORM_EMULATION_NCCL_DIE_AT=k ends this
     * process at its k-th sum, as a host killed in the middle of a step's
     * backward (after its gathers, while its peers sum). */
    static std::atomic<long> sums{0};
    const char *die_at = getenv("UFORM_EMULATION_NCCL_DIE_AT");
    if (die_at && sums.fetch_add(1) + 1 == atol(die_at)) _exit(9);
    Op sum = {comm, (const char *)sendbuff, (char *)recvbuff, count * sizeof(float), 0, 0, 0, false, false, false, 0};
    if (group.depth) return group.ops.push_back(sum), ncclSuccess;
    run(&sum, 1);
    return ncclSuccess;
}

/* Bytes only (ncclInt8 / ncclUint8): root's sendbuff into every rank's
 * recvbuff. A failure is recorded on the comm, not returned. */
static inline ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                         int root, ncclComm_t comm, cudaStream_t stream) {
    using namespace uform_nccl_emulated;
    (void)stream;
    if (!comm || (datatype != ncclInt8 && datatype != ncclUint8) || root < 0 || root >= comm->nranks ||
        (count && (!recvbuff || (comm->rank == root && !sendbuff))))
        return refuse(ncclInvalidArgument, "the emulation broadcasts bytes only, with a comm, a root and buffers");
    /* UFORM_EMULATION_NCCL_DIE_AT_BROADCAST=k: as UFORM_EMULATION_NCCL_DIE_AT,
     * at the k-th broadcast (a host killed in the middle of a gather) */
    static std::atomic<long> casts{0};
    const char *die_at = getenv("UFORM_EMULATION_NCCL_DIE_AT_BROADCAST");
    if (die_at && casts.fetch_add(1) + 1 == atol(die_at)) _exit(9);
    Op cast = {comm, (const char *)sendbuff, (char *)recvbuff, count, 0, 0, 0, false, false, true, root};
    if (group.depth) return group.ops.push_back(cast), ncclSuccess;
    run(&cast, 1);
    return ncclSuccess;
}

static inline ncclResult_t ncclCommFinalize(ncclComm_t comm) { return (void)comm, ncclSuccess; }

static inline ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (comm) uform_nccl_emulated::release(comm);
    return ncclSuccess;
}

/* NCCL 2.32's ncclCommProperties_t (nccl_device/host.h) up to the fields
 * collectives.cu reads; the GIN type is an enum there, an int here. */
typedef struct ncclCommProperties {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int rank, nRanks, cudaDev, nvmlDev;
    bool deviceApiSupport, multimemSupport;
    int ginType;
    int nLsaTeams;
} ncclCommProperties_t;

/* What real NCCL reports of NVLink SHARP, made up for tests:
 * UFORM_EMULATION_NCCL_LSA_RANKS=n says this process's ranks sit in NVLink
 * domains (NCCL's LSA teams: ranks that reach each other's memory) of n
 * ranks with multicast; unset, 0 or not dividing the ranks: no multicast
 * (multimemSupport false, every rank its own team). As NCCL, the caller's
 * struct must come from its initializer (magic). */
static inline ncclResult_t ncclCommQueryProperties(ncclComm_t comm, ncclCommProperties_t *props) {
    if (!comm || !props || props->magic != NCCL_API_MAGIC) return ncclInvalidUsage;
    if (comm->state != ncclSuccess) return ncclInvalidUsage;   /* not ready: NCCL waits, tests never ask */
    const char *given = getenv("UFORM_EMULATION_NCCL_LSA_RANKS");
    int lsa = given ? atoi(given) : 0;
    bool multicast = lsa > 0 && comm->nranks % lsa == 0;
    props->rank = comm->rank, props->nRanks = comm->nranks;
    props->cudaDev = -1, props->nvmlDev = -1;
    props->deviceApiSupport = multicast, props->multimemSupport = multicast;
    props->ginType = 0;
    props->nLsaTeams = multicast ? comm->nranks / lsa : comm->nranks;
    return ncclSuccess;
}

/* Marks the segment aborted, so that every peer waiting now or later fails. */
static inline ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    int32_t none = 0;
    comm->shared->aborted.compare_exchange_strong(none, comm->rank + 1);
    uform_nccl_emulated::release(comm);
    return ncclSuccess;
}

#endif /* UFORM_NCCL_EMULATION_H */
