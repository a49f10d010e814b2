/* internal.h: what every translation unit of libuform shares and no caller sees. */
#ifndef UFORM_INTERNAL_H
#define UFORM_INTERNAL_H

/* The model's fixed widths (docs/architecture.md section 3), defined once for
 * every layer: attention heads are 64 wide, rotary positions turn 32 pairs of
 * each head, and text has one token per byte value. */
#define UFORM_HEAD_WIDTH 64
#define UFORM_PAIRS 32
#define UFORM_BYTES 256
/* Partial sums per reduction (fills one AVX-512 register): every reduction whose
 * result must agree bit for bit across files (forward, backward, text_choose,
 * attention) splits its sum into this many lanes. */
#define UFORM_LANES 16

/* Loops the compiler vectorises get AVX-512 and AVX2 clones chosen at load, so
 * the portable code runs wide on every x86 class (the clones compute the same
 * bits: no FMA contraction under -std=c11, no reassociation). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(UFORM_NO_CLONES)
#define UFORM_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define UFORM_VECTOR_CLONES
#endif

#include "core/host_device.h"

#define UFORM_BUILDING 1
#include "uform.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define UFORM_VERSION_MAJOR 4
#define UFORM_VERSION_MINOR 0
#define UFORM_VERSION_PATCH 0

#define UFORM_INTERNAL __attribute__((visibility("hidden")))

/* ---- errors (error.c) ---------------------------------------------------- */

/* Records a printf-style message as this thread's last error and returns status. */
UFORM_INTERNAL uform_status_t uform_fail(uform_status_t status, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
/* Replaces this thread's last error message verbatim (used to carry a job's
 * message across threads). */
UFORM_INTERNAL void uform_set_error_text(const char *text);
/* Prepends "prefix: " to the current message, keeping the status. */
UFORM_INTERNAL uform_status_t uform_fail_context(uform_status_t status, const char *prefix);

#define UFORM_TRY(expression)                                                                  \
    do {                                                                                       \
        uform_status_t uform_try_status_ = (expression);                                       \
        if (uform_try_status_ != UFORM_OK) return uform_try_status_;                            \
    } while (0)

/* ---- memory helpers (error.c) -------------------------------------------- */

/* malloc/calloc with overflow-checked sizes; on failure they record an
 * OUT_OF_MEMORY message naming `what` and return NULL. */
UFORM_INTERNAL void *uform_alloc(size_t count, size_t size, const char *what);
UFORM_INTERNAL void *uform_alloc_zeroed(size_t count, size_t size, const char *what);
/* 64-byte aligned allocation, freed with uform_free_aligned. */
UFORM_INTERNAL void *uform_alloc_aligned(size_t count, size_t size, const char *what);
UFORM_INTERNAL void uform_free_aligned(void *pointer);
/* a * b without overflow; false when it would overflow. */
static inline bool uform_mul_ok(size_t a, size_t b, size_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool uform_add_ok(size_t a, size_t b, size_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* ---- scalars -------------------------------------------------------------- */

static inline float uform_bf16_to_f32(uint16_t value) {
    uint32_t bits = (uint32_t)value << 16;
    float result;
    memcpy(&result, &bits, sizeof(result));
    return result;
}

/* Round to nearest, ties to even; NaN stays NaN. */
UFORM_HOST_DEVICE static inline uint16_t uform_f32_to_bf16(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof(bits));
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40u);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}

UFORM_INTERNAL float uform_f16_to_f32(uint16_t value);

/* ---- executor (executor.c) ----------------------------------------------- */

/* One task of a parallel loop: indices [begin, end) on pool thread `thread`. */
typedef void (*uform_range_fn_t)(void *context, size_t begin, size_t end, size_t thread);

/* Runs fn over [0, count) on the pool, `grain` indices at least per task, and
 * returns when all are done. Safe to call from several threads at once on one
 * executor: calls are serialised. The calling thread takes part as thread 0.
 * Results must not depend on how the range is split. */
UFORM_INTERNAL void uform_parallel_for(uform_executor_t *executor, size_t count, size_t grain,
                                       uform_range_fn_t fn, void *context);
/* Threads fn may be called with (thread < this). */
UFORM_INTERNAL size_t uform_executor_width(const uform_executor_t *executor);
/* A VRAM executor's GPUs (backend/vram.c), opaque here: released with the
 * executor, after its jobs and threads. NULL for a RAM executor. */
UFORM_INTERNAL void uform_executor_attach(uform_executor_t *executor, void *devices,
                                          void (*release)(void *devices));
UFORM_INTERNAL void *uform_executor_devices(const uform_executor_t *executor);
/* Waits until no submitted job is queued or running (the executor stays usable). */
UFORM_INTERNAL void uform_executor_drain(uform_executor_t *executor);

/* Scratch memory for one call's temporary buffers (a GEMM's packed and
 * decoded panels, attention's per-thread matrices): 64-byte aligned, at
 * least `bytes`, or NULL where it cannot be had (callers fall back, so no
 * error is recorded). Given back, a block is kept by the executor for the
 * next take, up to UFORM_SCRATCH_KEPT blocks of at most
 * UFORM_SCRATCH_KEPT_BYTES each, and freed with it: a buffer of a few
 * hundred KiB allocated and freed on every call makes glibc return the heap's
 * top to the system and fault it in again page by page (AMX, one text's
 * products: 186 page faults a call, 25% of its time). Without an executor,
 * plain aligned_alloc and free. Any thread may take and give. */
#define UFORM_SCRATCH_KEPT 4
#define UFORM_SCRATCH_KEPT_BYTES ((size_t)32 << 20)
UFORM_INTERNAL void *uform_scratch_take(uform_executor_t *executor, size_t bytes);
UFORM_INTERNAL void uform_scratch_give(uform_executor_t *executor, void *memory);

/* A unit of submitted work (executor.c): runs `run` on the executor's
 * submission thread; its status and message are kept in the job. */
typedef uform_status_t (*uform_job_fn_t)(void *context);
UFORM_INTERNAL uform_status_t uform_executor_submit(uform_executor_t *executor, uform_job_fn_t run,
                                                    void *context, void (*free_context)(void *),
                                                    uform_job_t **job);

/* ---- arena (arena.c) ------------------------------------------------------ */

/* Makes room for `bytes` in one 64-byte aligned block list and returns it;
 * blocks are reused after uform_arena_reset. Host memory, in every arena. */
UFORM_INTERNAL void *uform_arena_take(uform_arena_t *arena, size_t bytes, const char *what);
/* The same for output rows: in a device arena, the GPU's memory. */
UFORM_INTERNAL void *uform_arena_take_rows(uform_arena_t *arena, size_t bytes, const char *what);
/* Whether the arena's rows live on a GPU, and which (gpu may be NULL). */
UFORM_INTERNAL bool uform_arena_on_device(const uform_arena_t *arena, uint32_t *gpu);
/* UNSUPPORTED for a device arena, "<who> in a host arena ...", for the calls
 * whose outputs only a host arena takes. */
UFORM_INTERNAL uform_status_t uform_arena_require_host(const uform_arena_t *arena, const char *who);
/* A device arena's memory: alloc answers NULL with the error set. */
typedef struct {
    void *(*alloc)(uint32_t gpu, size_t bytes, const char *what);
    void (*free)(uint32_t gpu, void *memory);
    uint32_t gpu;
} uform_arena_memory_t;
UFORM_INTERNAL uform_status_t uform_arena_init_device(uform_arena_t **arena, const uform_arena_memory_t *memory);
/* Marks the arena as written by the calling verb; INVALID_ARGUMENT when another
 * call holds it (two calls writing one arena would corrupt each other). */
UFORM_INTERNAL uform_status_t uform_arena_acquire(uform_arena_t *arena);
UFORM_INTERNAL void uform_arena_release(uform_arena_t *arena);
/* Starts the arena over (the verb holding it calls this, not uform_arena_reset). */
UFORM_INTERNAL void uform_arena_rewind(uform_arena_t *arena);

/* ---- progress -------------------------------------------------------------- */

/* Reports to at most progress->steps evenly spaced points of [0, total]. */
typedef struct {
    const uform_progress_t *progress;
    size_t total;
    size_t reported;  /* reports made so far */
} uform_progress_state_t;

UFORM_INTERNAL void uform_progress_begin(uform_progress_state_t *state,
                                         const uform_progress_t *progress, size_t total);
/* Reports `done` if it crosses the next step; UFORM_CANCELLED if the handler asked. */
UFORM_INTERNAL uform_status_t uform_progress_update(uform_progress_state_t *state, size_t done);

#endif /* UFORM_INTERNAL_H */
