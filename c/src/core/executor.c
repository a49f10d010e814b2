/* executor.c: the RAM executor, a persistent thread pool with a parallel-for,
 * and a submission thread that runs queued jobs in order (uform_job_t).
 *
 * One parallel loop runs at a time per executor: concurrent callers take turns
 * on `loop_lock`, so one model can be used from many threads. A loop started
 * from inside a loop task (nested) runs inline on the calling thread. */
#include "core/internal.h"

#include <errno.h>
#include <stdio.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

/* Hard cap on pool threads: a bigger request is refused as a likely mistake. */
#define UFORM_MAX_THREADS 4096
/* Polls before sleeping: a worker that finished a loop, and the caller waiting
 * for the workers, check 4096 times with a pause between (115 us on a Zen 5,
 * a few us where pause is short) before they block on the condition variable.
 * One text's encode is ~150 loops of a few hundred microseconds each, and a
 * sleep and wake costs tens of microseconds on a virtual machine: polling made
 * one text per call 9% faster on 2 cores. An idle pool sleeps as before. */
#define UFORM_SPIN_ROUNDS 4096

static inline void uform_cpu_relax(void) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

struct uform_job {
    uform_job_fn_t run;
    void *context;
    void (*free_context)(void *);
    uform_status_t status;
    char message[1024];
    pthread_mutex_t lock;
    pthread_cond_t finished;
    atomic_int done;
    /* Freed from its own submission thread while pending (a progress handler
     * dropping it): the submission thread frees it once it has run. */
    bool orphaned;
    uform_executor_t *executor;
    struct uform_job *next;   /* queue link, owned by the executor while queued */
};

struct uform_executor {
    size_t threads;           /* workers + the calling thread */
    pthread_t *workers;       /* threads - 1 of them */
    size_t workers_started;
    uint32_t *memory_domains;
    size_t memory_domains_count;

    /* the loop being run */
    pthread_mutex_t loop_lock;   /* held by the caller of uform_parallel_for */
    pthread_mutex_t lock;        /* guards the fields below */
    pthread_cond_t wake;         /* workers wait here for a new generation */
    pthread_cond_t idle;         /* the caller waits here for workers to finish */
    /* Written under `lock`, read by polling threads without it: a worker that
     * sees a new generation then reads the loop's fields (set before it). */
    _Atomic uint64_t generation;
    atomic_bool stopping;
    uform_range_fn_t fn;
    void *context;
    size_t count, grain, tasks;
    atomic_size_t next_task;
    atomic_size_t busy;          /* workers still inside the current loop */
    size_t sleepers;             /* workers blocked on `wake` (under lock) */
    bool caller_sleeping;        /* the caller blocked on `idle` (under lock) */

    /* submission */
    pthread_mutex_t queue_lock;
    pthread_cond_t queue_wake;
    pthread_cond_t queue_empty;
    uform_job_t *queue_head, *queue_tail;
    bool submitter_started;
    bool submitter_stopping;
    bool submitter_running_job;
    pthread_t submitter;

    /* a VRAM executor's GPUs (backend/vram.c), released after the jobs */
    void *devices;
    void (*devices_release)(void *devices);

    /* scratch blocks given back (uform_scratch_give), for the next take */
    pthread_mutex_t scratch_lock;
    void *scratch[UFORM_SCRATCH_KEPT];
    size_t scratch_bytes[UFORM_SCRATCH_KEPT]; /* 0: the slot is empty */
};

static _Thread_local int uform_inside_loop;
/* The executor whose submission thread this is; NULL on every other thread. A
 * job of that executor waited for here would wait forever: it is queued behind
 * the job running on this very thread. */
static _Thread_local uform_executor_t *uform_submitting_for;

static void uform_run_tasks(uform_executor_t *executor, size_t thread) {
    uform_inside_loop++;
    for (;;) {
        size_t task = atomic_fetch_add(&executor->next_task, 1);
        if (task >= executor->tasks) break;
        size_t begin = task * executor->grain;
        size_t end = begin + executor->grain;
        if (end > executor->count) end = executor->count;
        executor->fn(executor->context, begin, end, thread);
    }
    uform_inside_loop--;
}

typedef struct {
    uform_executor_t *executor;
    size_t thread;
} uform_worker_start_t;

static bool uform_worker_may_go(uform_executor_t *executor, uint64_t seen) {
    return atomic_load(&executor->generation) != seen || atomic_load(&executor->stopping);
}

/* Returns once a loop after generation `seen` starts or the pool stops: polls
 * first, then sleeps on `wake`. */
static void uform_worker_wait(uform_executor_t *executor, uint64_t seen) {
    for (size_t spin = 0; spin < UFORM_SPIN_ROUNDS; spin++) {
        if (uform_worker_may_go(executor, seen)) return;
        uform_cpu_relax();
    }
    pthread_mutex_lock(&executor->lock);
    executor->sleepers++;
    while (!uform_worker_may_go(executor, seen)) pthread_cond_wait(&executor->wake, &executor->lock);
    executor->sleepers--;
    pthread_mutex_unlock(&executor->lock);
}

static void *uform_worker_main(void *argument) {
    uform_worker_start_t start = *(uform_worker_start_t *)argument;
    free(argument);
    uform_executor_t *executor = start.executor;
    uint64_t seen = 0;
    for (;;) {
        uform_worker_wait(executor, seen);
        if (atomic_load(&executor->stopping)) break;
        seen = atomic_load(&executor->generation);
        uform_run_tasks(executor, start.thread);
        if (atomic_fetch_sub(&executor->busy, 1) == 1) {
            pthread_mutex_lock(&executor->lock);
            if (executor->caller_sleeping) pthread_cond_signal(&executor->idle);
            pthread_mutex_unlock(&executor->lock);
        }
    }
    return NULL;
}

size_t uform_executor_width(const uform_executor_t *executor) { return executor->threads; }

void uform_parallel_for(uform_executor_t *executor, size_t count, size_t grain,
                        uform_range_fn_t fn, void *context) {
    if (count == 0) return;
    if (grain == 0) grain = 1;
    size_t tasks = (count + grain - 1) / grain;
    if (executor->threads <= 1 || tasks <= 1 || uform_inside_loop) {
        /* One task, one thread, or nested: run here, same results by contract. */
        uform_inside_loop++;
        for (size_t begin = 0; begin < count; begin += grain)
            fn(context, begin, begin + grain < count ? begin + grain : count, 0);
        uform_inside_loop--;
        return;
    }
    pthread_mutex_lock(&executor->loop_lock);
    pthread_mutex_lock(&executor->lock);
    executor->fn = fn;
    executor->context = context;
    executor->count = count;
    executor->grain = grain;
    executor->tasks = tasks;
    atomic_store(&executor->next_task, 0);
    atomic_store(&executor->busy, executor->workers_started);
    atomic_fetch_add(&executor->generation, 1);
    if (executor->sleepers) pthread_cond_broadcast(&executor->wake);
    pthread_mutex_unlock(&executor->lock);

    uform_run_tasks(executor, 0);

    for (size_t spin = 0; spin < UFORM_SPIN_ROUNDS && atomic_load(&executor->busy) != 0; spin++)
        uform_cpu_relax();
    if (atomic_load(&executor->busy) != 0) {
        pthread_mutex_lock(&executor->lock);
        executor->caller_sleeping = true;
        while (atomic_load(&executor->busy) != 0)
            pthread_cond_wait(&executor->idle, &executor->lock);
        executor->caller_sleeping = false;
        pthread_mutex_unlock(&executor->lock);
    }
    pthread_mutex_unlock(&executor->loop_lock);
}

static size_t uform_available_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        int count = CPU_COUNT(&set);
        if (count > 0) return (size_t)count;
    }
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (size_t)online : 1;
}

static void uform_executor_stop_workers(uform_executor_t *executor) {
    pthread_mutex_lock(&executor->lock);
    atomic_store(&executor->stopping, true);
    pthread_cond_broadcast(&executor->wake);
    pthread_mutex_unlock(&executor->lock);
    for (size_t i = 0; i < executor->workers_started; i++) pthread_join(executor->workers[i], NULL);
    executor->workers_started = 0;
}

uform_status_t uform_executor_for_ram(size_t threads, const uint32_t *memory_domains,
                                      size_t memory_domains_count, uform_executor_t **result) {
    if (!result) return uform_fail(UFORM_INVALID_ARGUMENT, "executor: the out-pointer is NULL");
    *result = NULL;
    if (threads > UFORM_MAX_THREADS)
        return uform_fail(UFORM_INVALID_ARGUMENT, "threads: %zu is more than the %d supported",
                          threads, UFORM_MAX_THREADS);
    if (memory_domains_count && !memory_domains)
        return uform_fail(UFORM_INVALID_ARGUMENT, "memory_domains: NULL with a count of %zu",
                          memory_domains_count);
    if (memory_domains_count > UFORM_MAX_THREADS)
        return uform_fail(UFORM_INVALID_ARGUMENT, "memory_domains: %zu domains is too many",
                          memory_domains_count);
    for (size_t i = 0; i < memory_domains_count; i++)
        for (size_t j = 0; j < i; j++)
            if (memory_domains[i] == memory_domains[j])
                return uform_fail(UFORM_INVALID_ARGUMENT,
                                  "memory_domains: domain %u is listed twice", memory_domains[i]);
    if (threads == 0) threads = uform_available_cores();

    uform_executor_t *executor = uform_alloc_zeroed(1, sizeof(*executor), "executor");
    if (!executor) return UFORM_OUT_OF_MEMORY;
    executor->threads = threads;
    pthread_mutex_init(&executor->loop_lock, NULL);
    pthread_mutex_init(&executor->scratch_lock, NULL);
    pthread_mutex_init(&executor->lock, NULL);
    pthread_cond_init(&executor->wake, NULL);
    pthread_cond_init(&executor->idle, NULL);
    pthread_mutex_init(&executor->queue_lock, NULL);
    pthread_cond_init(&executor->queue_wake, NULL);
    pthread_cond_init(&executor->queue_empty, NULL);
    if (memory_domains_count) {
        executor->memory_domains = uform_alloc(memory_domains_count, sizeof(uint32_t), "memory domains");
        if (!executor->memory_domains) goto out_of_memory;
        memcpy(executor->memory_domains, memory_domains, memory_domains_count * sizeof(uint32_t));
        executor->memory_domains_count = memory_domains_count;
    }
    if (threads > 1) {
        executor->workers = uform_alloc(threads - 1, sizeof(pthread_t), "executor threads");
        if (!executor->workers) goto out_of_memory;
        for (size_t i = 0; i + 1 < threads; i++) {
            uform_worker_start_t *start = malloc(sizeof(*start));
            if (!start) goto out_of_memory;
            start->executor = executor;
            start->thread = i + 1;
            if (pthread_create(&executor->workers[i], NULL, uform_worker_main, start) != 0) {
                free(start);
                uform_executor_free(executor);
                return uform_fail(UFORM_OUT_OF_MEMORY, "executor: cannot start thread %zu of %zu",
                                  i + 1, threads);
            }
            executor->workers_started++;
        }
    }
    *result = executor;
    return UFORM_OK;

out_of_memory:
    uform_executor_free(executor);
    return uform_fail(UFORM_OUT_OF_MEMORY, "executor: cannot allocate for %zu threads", threads);
}

uform_status_t uform_executor_threads(const uform_executor_t *executor, size_t *threads) {
    if (!executor || !threads)
        return uform_fail(UFORM_INVALID_ARGUMENT, "executor_threads: NULL argument");
    *threads = executor->threads;
    return UFORM_OK;
}

uform_status_t uform_executor_memory_domains(const uform_executor_t *executor, size_t *count) {
    if (!executor || !count)
        return uform_fail(UFORM_INVALID_ARGUMENT, "executor_memory_domains: NULL argument");
    *count = executor->memory_domains_count ? executor->memory_domains_count : 1;
    return UFORM_OK;
}

/* ---- submission ---------------------------------------------------------- */

static void *uform_submitter_main(void *argument) {
    uform_executor_t *executor = argument;
    uform_submitting_for = executor;
    pthread_mutex_lock(&executor->queue_lock);
    for (;;) {
        while (!executor->queue_head && !executor->submitter_stopping)
            pthread_cond_wait(&executor->queue_wake, &executor->queue_lock);
        uform_job_t *job = executor->queue_head;
        if (!job) break; /* stopping and drained */
        executor->queue_head = job->next;
        if (!executor->queue_head) executor->queue_tail = NULL;
        executor->submitter_running_job = true;
        pthread_mutex_unlock(&executor->queue_lock);

        uform_set_error_text("");
        uform_status_t status = job->run(job->context);
        pthread_mutex_lock(&job->lock);
        job->status = status;
        if (status != UFORM_OK)
            snprintf(job->message, sizeof(job->message), "%s", uform_last_error());
        atomic_store(&job->done, 1);
        pthread_cond_broadcast(&job->finished);
        bool orphaned = job->orphaned;
        pthread_mutex_unlock(&job->lock); /* the last touch of the job, unless orphaned */
        if (orphaned) uform_job_free(job);

        pthread_mutex_lock(&executor->queue_lock);
        executor->submitter_running_job = false;
        if (!executor->queue_head) pthread_cond_broadcast(&executor->queue_empty);
    }
    pthread_mutex_unlock(&executor->queue_lock);
    return NULL;
}

uform_status_t uform_executor_submit(uform_executor_t *executor, uform_job_fn_t run, void *context,
                                     void (*free_context)(void *), uform_job_t **result) {
    uform_job_t *job = uform_alloc_zeroed(1, sizeof(*job), "job");
    if (!job) {
        if (free_context) free_context(context);
        return UFORM_OUT_OF_MEMORY;
    }
    job->run = run;
    job->context = context;
    job->free_context = free_context;
    job->executor = executor;
    pthread_mutex_init(&job->lock, NULL);
    pthread_cond_init(&job->finished, NULL);

    pthread_mutex_lock(&executor->queue_lock);
    if (!executor->submitter_started) {
        if (pthread_create(&executor->submitter, NULL, uform_submitter_main, executor) != 0) {
            pthread_mutex_unlock(&executor->queue_lock);
            /* never queued, so never run: marked done, or uform_job_free would wait for it */
            atomic_store(&job->done, 1);
            uform_job_free(job);
            return uform_fail(UFORM_OUT_OF_MEMORY, "submit: cannot start the submission thread");
        }
        executor->submitter_started = true;
    }
    if (executor->queue_tail) executor->queue_tail->next = job;
    else executor->queue_head = job;
    executor->queue_tail = job;
    pthread_cond_signal(&executor->queue_wake);
    pthread_mutex_unlock(&executor->queue_lock);
    *result = job;
    return UFORM_OK;
}

int uform_job_done(const uform_job_t *job) { return job ? atomic_load(&job->done) : 1; }

uform_status_t uform_job_wait(uform_job_t *job) {
    if (!job) return uform_fail(UFORM_INVALID_ARGUMENT, "job: NULL");
    if (!atomic_load(&job->done) && uform_submitting_for == job->executor)
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "job: waited for on its executor's own submission thread (from a progress "
                          "handler of a deferred call?), where it would wait forever: it runs after "
                          "the call running on this thread. Wait for it after that call returns, or "
                          "submit it to another executor");
    pthread_mutex_lock(&job->lock);
    while (!atomic_load(&job->done)) pthread_cond_wait(&job->finished, &job->lock);
    pthread_mutex_unlock(&job->lock);
    if (job->status != UFORM_OK) uform_set_error_text(job->message);
    return job->status;
}

void uform_job_free(uform_job_t *job) {
    if (!job) return;
    if (job->run) {
        pthread_mutex_lock(&job->lock);
        if (!atomic_load(&job->done) && uform_submitting_for == job->executor) {
            /* waiting here would never end: the submission thread frees it later */
            job->orphaned = true;
            pthread_mutex_unlock(&job->lock);
            return;
        }
        while (!atomic_load(&job->done)) pthread_cond_wait(&job->finished, &job->lock);
        pthread_mutex_unlock(&job->lock);
    }
    if (job->free_context) job->free_context(job->context);
    pthread_cond_destroy(&job->finished);
    pthread_mutex_destroy(&job->lock);
    free(job);
}

void uform_executor_attach(uform_executor_t *executor, void *devices, void (*release)(void *)) {
    executor->devices = devices;
    executor->devices_release = release;
}

void *uform_executor_devices(const uform_executor_t *executor) {
    return executor ? executor->devices : NULL;
}

void uform_executor_drain(uform_executor_t *executor) {
    if (!executor) return;
    pthread_mutex_lock(&executor->queue_lock);
    while (executor->queue_head || executor->submitter_running_job)
        pthread_cond_wait(&executor->queue_empty, &executor->queue_lock);
    pthread_mutex_unlock(&executor->queue_lock);
}

void uform_executor_free(uform_executor_t *executor) {
    if (!executor) return;
    if (executor->submitter_started) {
        pthread_mutex_lock(&executor->queue_lock);
        while (executor->queue_head || executor->submitter_running_job)
            pthread_cond_wait(&executor->queue_empty, &executor->queue_lock);
        executor->submitter_stopping = true;
        pthread_cond_broadcast(&executor->queue_wake);
        pthread_mutex_unlock(&executor->queue_lock);
        pthread_join(executor->submitter, NULL);
    }
    uform_executor_stop_workers(executor);
    if (executor->devices_release) executor->devices_release(executor->devices);
    for (size_t i = 0; i < UFORM_SCRATCH_KEPT; i++) free(executor->scratch[i]);
    pthread_mutex_destroy(&executor->scratch_lock);
    free(executor->workers);
    free(executor->memory_domains);
    pthread_cond_destroy(&executor->queue_empty);
    pthread_cond_destroy(&executor->queue_wake);
    pthread_mutex_destroy(&executor->queue_lock);
    pthread_cond_destroy(&executor->idle);
    pthread_cond_destroy(&executor->wake);
    pthread_mutex_destroy(&executor->lock);
    pthread_mutex_destroy(&executor->loop_lock);
    free(executor);
}

/* ---- scratch memory -------------------------------------------------------- */

/* A block's capacity sits in the 64 bytes before what take returns. */
#define UFORM_SCRATCH_HEADER 64

static size_t uform_scratch_capacity(const void *block) {
    size_t bytes;
    memcpy(&bytes, (const unsigned char *)block - UFORM_SCRATCH_HEADER, sizeof(bytes));
    return bytes;
}

void *uform_scratch_take(uform_executor_t *executor, size_t bytes) {
    if (bytes > SIZE_MAX / 2) return NULL;
    bytes = (bytes + 63) & ~(size_t)63;
    if (executor) {
        /* the smallest kept block that is large enough */
        pthread_mutex_lock(&executor->scratch_lock);
        size_t best = UFORM_SCRATCH_KEPT;
        for (size_t i = 0; i < UFORM_SCRATCH_KEPT; i++)
            if (executor->scratch_bytes[i] >= bytes &&
                (best == UFORM_SCRATCH_KEPT || executor->scratch_bytes[i] < executor->scratch_bytes[best]))
                best = i;
        void *block = NULL;
        if (best < UFORM_SCRATCH_KEPT) {
            block = executor->scratch[best];
            executor->scratch[best] = NULL;
            executor->scratch_bytes[best] = 0;
        }
        pthread_mutex_unlock(&executor->scratch_lock);
        if (block) return (unsigned char *)block + UFORM_SCRATCH_HEADER;
    }
    unsigned char *block = aligned_alloc(64, UFORM_SCRATCH_HEADER + (bytes ? bytes : 64));
    if (!block) return NULL;
    memcpy(block, &bytes, sizeof(bytes));
    return block + UFORM_SCRATCH_HEADER;
}

void uform_scratch_give(uform_executor_t *executor, void *memory) {
    if (!memory) return;
    unsigned char *block = (unsigned char *)memory - UFORM_SCRATCH_HEADER;
    size_t bytes = uform_scratch_capacity(memory);
    if (executor && bytes <= UFORM_SCRATCH_KEPT_BYTES) {
        /* keep it in an empty slot, or in place of a smaller block */
        pthread_mutex_lock(&executor->scratch_lock);
        size_t slot = 0;
        for (size_t i = 1; i < UFORM_SCRATCH_KEPT; i++)
            if (executor->scratch_bytes[i] < executor->scratch_bytes[slot]) slot = i;
        void *evicted = NULL;
        if (executor->scratch_bytes[slot] < bytes) {
            evicted = executor->scratch[slot];
            executor->scratch[slot] = block;
            executor->scratch_bytes[slot] = bytes;
            block = NULL;
        }
        pthread_mutex_unlock(&executor->scratch_lock);
        free(evicted);
    }
    free(block);
}
