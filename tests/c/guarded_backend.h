/* guarded_backend.h: a device-like backend for tests without a GPU.
 *
 * The CPU backend with one difference: every buffer it allocates is its own
 * mmap region, kept PROT_NONE except while one of its operations runs. A host
 * read or write of device memory (a missing upload, a device buffer read on
 * the host) is then a SIGSEGV, not a silent success as on the CPU backend,
 * whose device memory is host memory. Every operation also checks that each
 * pointer it takes is on the side backend.h says (device memory inside its
 * regions, host memory outside): the mistakes a CUDA backend would fault on.
 * It reports host_memory false, so callers take their staging paths, the
 * ones the CUDA backend takes. Used by tests/c/test_device_model.c and
 * tests/c/test_device_trainer.c. Include check.h first. */
#ifndef UFORM_TESTS_GUARDED_BACKEND_H
#define UFORM_TESTS_GUARDED_BACKEND_H

#include "backend/cpu/cpu_backend.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAX_REGIONS 4096

typedef struct {
    void *start;
    size_t bytes;
} region_t;

typedef struct {
    uform_backend_t inner;        /* the CPU backend of one class */
    pthread_mutex_t lock;
    region_t regions[MAX_REGIONS];
    size_t count;
    size_t opened;                /* operations running (nested: upload inside load) */
    size_t allocations;           /* alive */
    size_t held, acquisitions;    /* acquire/release: held now, and ever */
    size_t violations;            /* pointers on the wrong side (guard_expect) */
    size_t largest;               /* the largest allocation so far */
    size_t refuse_once_above;     /* refuse the next allocation larger than this (0: none) */
    size_t refused;               /* allocations refused so */
    size_t synchronizes;          /* synchronize calls so far */
    size_t fail_synchronize_at;   /* that call (1-based) answers an injected device failure (0: none) */
    char violation[256];          /* the first one */
} guard_t;

static guard_t *guard_of(uform_backend_t *b) { return (guard_t *)b->device; }

static void guard_protect(guard_t *g, int protection) {
    for (size_t i = 0; i < g->count; i++) mprotect(g->regions[i].start, g->regions[i].bytes, protection);
}

/* Device memory is readable from the first open to the last close. */
static uform_backend_t *guard_open(uform_backend_t *b) {
    guard_t *g = guard_of(b);
    pthread_mutex_lock(&g->lock);
    if (g->opened++ == 0) guard_protect(g, PROT_READ | PROT_WRITE);
    pthread_mutex_unlock(&g->lock);
    return &g->inner;
}

static void guard_close(uform_backend_t *b) {
    guard_t *g = guard_of(b);
    pthread_mutex_lock(&g->lock);
    if (--g->opened == 0) guard_protect(g, PROT_NONE);
    pthread_mutex_unlock(&g->lock);
}

static void *guarded_alloc(uform_backend_t *b, size_t bytes) {
    guard_t *g = guard_of(b);
    size_t page = (size_t)sysconf(_SC_PAGESIZE), rounded = (bytes + page - 1) / page * page;
    if (rounded == 0) rounded = page;
    pthread_mutex_lock(&g->lock);
    void *memory = NULL;
    bool refuse = g->refuse_once_above && bytes > g->refuse_once_above;
    if (refuse) g->refuse_once_above = 0, g->refused++;
    if (g->count < MAX_REGIONS && !refuse) {
        memory = mmap(NULL, rounded, g->opened ? PROT_READ | PROT_WRITE : PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (memory == MAP_FAILED) memory = NULL;
    }
    if (memory) {
        g->regions[g->count++] = (region_t){memory, rounded};
        g->allocations++;
        if (bytes > g->largest) g->largest = bytes;
    }
    pthread_mutex_unlock(&g->lock);
    if (!memory) uform_fail(UFORM_OUT_OF_MEMORY, "guarded backend: cannot map %zu bytes", bytes);
    return memory;
}

static void guarded_free(uform_backend_t *b, void *memory) {
    guard_t *g = guard_of(b);
    pthread_mutex_lock(&g->lock);
    for (size_t i = 0; i < g->count; i++)
        if (g->regions[i].start == memory) {
            munmap(memory, g->regions[i].bytes);
            g->regions[i] = g->regions[--g->count];
            g->allocations--;
            break;
        }
    pthread_mutex_unlock(&g->lock);
}

/* Every pointer an operation takes is on the side backend.h says: device
 * memory (inside one of the regions, interior pointers included) or host
 * memory (outside them); NULL is either. A CUDA backend handed a host pointer
 * as device memory, or the reverse, faults on the GPU or the host; here it is
 * counted and the first one named. */
static void guard_expect(uform_backend_t *b, const void *pointer, bool device, const char *what,
                         const char *operation) {
    if (!pointer) return;
    guard_t *g = guard_of(b);
    pthread_mutex_lock(&g->lock);
    bool inside = false;
    for (size_t i = 0; i < g->count && !inside; i++)
        inside = (const uint8_t *)pointer >= (const uint8_t *)g->regions[i].start &&
                 (const uint8_t *)pointer < (const uint8_t *)g->regions[i].start + g->regions[i].bytes;
    if (inside != device && g->violations++ == 0)
        snprintf(g->violation, sizeof(g->violation), "%s: %s is %s memory, expected %s memory", operation, what,
                 inside ? "device" : "host", device ? "device" : "host");
    pthread_mutex_unlock(&g->lock);
}
#define DEVICE(pointer) guard_expect(b, (pointer), true, #pointer, __func__)
#define HOST(pointer) guard_expect(b, (pointer), false, #pointer, __func__)

/* A verb holds the backend for its whole call; every acquire is released. */
static void guarded_acquire(uform_backend_t *b) {
    guard_t *g = guard_of(b);
    pthread_mutex_lock(&g->lock);
    g->held++;
    g->acquisitions++;
    pthread_mutex_unlock(&g->lock);
}

static void guarded_release(uform_backend_t *b) {
    guard_t *g = guard_of(b);
    pthread_mutex_lock(&g->lock);
    g->held--;
    pthread_mutex_unlock(&g->lock);
}

/* An operation run with the device memory open: the CPU backend's, after the
 * sides of its pointers are checked. */
#define GUARDED_VOID(name, params, checks, args)                                               \
    static void guarded_##name params {                                                        \
        checks;                                                                                \
        uform_backend_t *inner = guard_open(b);                                                \
        inner->ops->name args;                                                                 \
        guard_close(b);                                                                        \
    }
#define GUARDED_RESULT(type, name, params, checks, args)                                       \
    static type guarded_##name params {                                                        \
        checks;                                                                                \
        uform_backend_t *inner = guard_open(b);                                                \
        type result = inner->ops->name args;                                                   \
        guard_close(b);                                                                        \
        return result;                                                                         \
    }

GUARDED_VOID(upload, (uform_backend_t *b, void *d, const void *h, size_t n), (DEVICE(d), HOST(h)),
             (inner, d, h, n))
GUARDED_VOID(download, (uform_backend_t *b, void *h, const void *d, size_t n), (HOST(h), DEVICE(d)),
             (inner, h, d, n))
GUARDED_VOID(copy, (uform_backend_t *b, void *d, const void *s, size_t n), (DEVICE(d), DEVICE(s)),
             (inner, d, s, n))
GUARDED_VOID(zero, (uform_backend_t *b, void *d, size_t n), DEVICE(d), (inner, d, n))
GUARDED_VOID(download_rows,
             (uform_backend_t *b, const float *x, size_t rows, size_t width, uform_scalar_t scalar,
              void *host, size_t row_bytes),
             (DEVICE(x), HOST(host)), (inner, x, rows, width, scalar, host, row_bytes))
/* As a GPU's: the first failure since the last call; one can be injected
 * (fail_synchronize_at), as a kernel that failed somewhere before it. */
static uform_status_t guarded_synchronize(uform_backend_t *b) {
    guard_t *g = guard_of(b);
    uform_backend_t *inner = guard_open(b);
    uform_status_t status = inner->ops->synchronize(inner);
    guard_close(b);
    /* a failure an operation lent from the CPU recorded on this backend (on_host.c),
     * reported and cleared as the CUDA backend's synchronize does */
    if (status == UFORM_OK) status = b->failure;
    b->failure = UFORM_OK;
    pthread_mutex_lock(&g->lock);
    bool inject = ++g->synchronizes == g->fail_synchronize_at;
    pthread_mutex_unlock(&g->lock);
    if (inject && status == UFORM_OK)
        status = uform_fail(UFORM_DEVICE, "guarded backend: a device failure injected at synchronize %zu",
                            g->synchronizes);
    return status;
}
GUARDED_RESULT(uform_status_t, pack,
               (uform_backend_t *b, const uint16_t *w, size_t n, size_t k, uform_packed_t *p),
               (HOST(w), HOST(p)), (inner, w, n, k, p))
GUARDED_RESULT(uform_status_t, pack_e4m3,
               (uform_backend_t *b, const uint8_t *c, const float *s, size_t n, size_t k,
                uform_packed_t *p),
               (HOST(c), HOST(s), HOST(p)), (inner, c, s, n, k, p))
GUARDED_RESULT(uform_status_t, unpack_e4m3,
               (uform_backend_t *b, const uform_packed_t *p, uint8_t *c, float *s), (HOST(c), HOST(s)),
               (inner, p, c, s))
GUARDED_VOID(packed_free, (uform_backend_t *b, uform_packed_t *p), HOST(p), (inner, p))
GUARDED_VOID(linear,
             (uform_backend_t *b, const uform_weight_t *w, const float *x, size_t xs, size_t rows,
              const float *bias, bool accumulate, float *y, size_t ys),
             (HOST(w), DEVICE(w->dense), DEVICE(x), DEVICE(bias), DEVICE(y)),
             (inner, w, x, xs, rows, bias, accumulate, y, ys))
GUARDED_VOID(linear_gelu,
             (uform_backend_t *b, const uform_weight_t *w, const float *x, size_t xs, size_t rows,
              const float *bias, float *pre, float *y),
             (HOST(w), DEVICE(w->dense), DEVICE(x), DEVICE(bias), DEVICE(pre), DEVICE(y)),
             (inner, w, x, xs, rows, bias, pre, y))
GUARDED_VOID(layer_norm_forward,
             (uform_backend_t *b, const float *x, size_t rows, size_t width, const float *weight,
              const float *bias, float *y, float *mean, float *rstd),
             (DEVICE(x), DEVICE(weight), DEVICE(bias), DEVICE(y), DEVICE(mean), DEVICE(rstd)),
             (inner, x, rows, width, weight, bias, y, mean, rstd))
GUARDED_VOID(rope_tables,
             (uform_backend_t *b, const uform_segment_t *s, size_t count, const uint32_t *positions,
              float *cosines, float *sines),
             (DEVICE(s), DEVICE(positions), DEVICE(cosines), DEVICE(sines)),
             (inner, s, count, positions, cosines, sines))
GUARDED_VOID(rope_forward,
             (uform_backend_t *b, float *qkv, size_t rows, size_t hidden, const float *cosines,
              const float *sines),
             (DEVICE(qkv), DEVICE(cosines), DEVICE(sines)), (inner, qkv, rows, hidden, cosines, sines))
GUARDED_VOID(embedding_forward,
             (uform_backend_t *b, const float *table, const float *modality, const uint32_t *ids,
              size_t rows, size_t width, float *y),
             (DEVICE(table), DEVICE(modality), DEVICE(ids), DEVICE(y)),
             (inner, table, modality, ids, rows, width, y))
GUARDED_RESULT(size_t, attention_scratch_bytes,
               (uform_backend_t *b, size_t hidden, size_t segments, size_t longest), (void)0,
               (inner, hidden, segments, longest))
GUARDED_VOID(attention_forward,
             (uform_backend_t *b, const float *qkv, size_t hidden, const uform_segment_t *s,
              size_t count, size_t rows, size_t longest, float *out, float *logsumexp, void *scratch),
             (DEVICE(qkv), DEVICE(s), DEVICE(out), DEVICE(logsumexp), DEVICE(scratch)),
             (inner, qkv, hidden, s, count, rows, longest, out, logsumexp, scratch))
GUARDED_VOID(mean_pool_forward,
             (uform_backend_t *b, const float *x, size_t width, const uform_segment_t *s,
              size_t count, float *pooled),
             (DEVICE(x), DEVICE(s), DEVICE(pooled)), (inner, x, width, s, count, pooled))
GUARDED_VOID(normalize_forward,
             (uform_backend_t *b, const float *x, size_t rows, size_t width, float *y, float *norms),
             (DEVICE(x), DEVICE(y), DEVICE(norms)), (inner, x, rows, width, y, norms))
GUARDED_VOID(scatter_rows,
             (uform_backend_t *b, const float *src, size_t stride, const float *add, size_t width,
              const size_t *rows, size_t count, float *dst),
             (DEVICE(src), DEVICE(add), DEVICE(rows), DEVICE(dst)),
             (inner, src, stride, add, width, rows, count, dst))
GUARDED_VOID(choice_probabilities,
             (uform_backend_t *b, const float *states, size_t hidden, const uform_segment_t *s,
              size_t count, const uform_tape_t *choices, size_t first, const uint32_t *groups,
              const float *table, const float *bias, const float *log_temperature,
              const size_t *offsets, float *probabilities),
             (DEVICE(states), DEVICE(s), HOST(choices), HOST(choices->data), HOST(choices->offsets),
              HOST(groups), DEVICE(table), DEVICE(bias), DEVICE(log_temperature), HOST(offsets),
              HOST(probabilities)),
             (inner, states, hidden, s, count, choices, first, groups, table, bias, log_temperature,
              offsets, probabilities))


/* ---- the trainer's operations ---- */

GUARDED_VOID(gemm,
             (uform_backend_t *b, size_t m, size_t n, size_t k, uform_matrix_t a, uform_matrix_t bm,
              const float *bias, bool accumulate, float *c, size_t c_stride),
             (DEVICE(a.data), DEVICE(bm.data), DEVICE(bias), DEVICE(c)),
             (inner, m, n, k, a, bm, bias, accumulate, c, c_stride))
GUARDED_VOID(linear_backward,
             (uform_backend_t *b, const uform_weight_t *w, const float *x, const float *dy, size_t rows,
              float *dweight, float *dbias, float *dx, bool accumulate_dx),
             (HOST(w), DEVICE(w->dense), DEVICE(x), DEVICE(dy), DEVICE(dweight), DEVICE(dbias), DEVICE(dx)),
             (inner, w, x, dy, rows, dweight, dbias, dx, accumulate_dx))
GUARDED_VOID(layer_norm_backward,
             (uform_backend_t *b, const float *dy, const float *x, const float *weight, const float *mean,
              const float *rstd, size_t rows, size_t width, float *dx, float *dweight, float *dbias),
             (DEVICE(dy), DEVICE(x), DEVICE(weight), DEVICE(mean), DEVICE(rstd), DEVICE(dx), DEVICE(dweight),
              DEVICE(dbias)),
             (inner, dy, x, weight, mean, rstd, rows, width, dx, dweight, dbias))
GUARDED_VOID(gelu_forward, (uform_backend_t *b, const float *x, size_t count, float *y), (DEVICE(x), DEVICE(y)),
             (inner, x, count, y))
GUARDED_VOID(gelu_backward, (uform_backend_t *b, const float *x, const float *dy, size_t count, float *dx),
             (DEVICE(x), DEVICE(dy), DEVICE(dx)), (inner, x, dy, count, dx))
GUARDED_VOID(rope_backward,
             (uform_backend_t *b, float *dqkv, size_t rows, size_t hidden, const float *cosines,
              const float *sines),
             (DEVICE(dqkv), DEVICE(cosines), DEVICE(sines)), (inner, dqkv, rows, hidden, cosines, sines))
GUARDED_VOID(embedding_backward,
             (uform_backend_t *b, const float *dy, const uint32_t *ids, size_t rows, size_t width, float *dtable,
              float *dmodality),
             (DEVICE(dy), DEVICE(ids), DEVICE(dtable), DEVICE(dmodality)),
             (inner, dy, ids, rows, width, dtable, dmodality))
GUARDED_VOID(attention_backward,
             (uform_backend_t *b, const float *qkv, const float *out, const float *dout, const float *logsumexp,
              size_t hidden, const uform_segment_t *s, size_t count, size_t rows, size_t longest, float *dqkv),
             (DEVICE(qkv), DEVICE(out), DEVICE(dout), DEVICE(logsumexp), DEVICE(s), DEVICE(dqkv)),
             (inner, qkv, out, dout, logsumexp, hidden, s, count, rows, longest, dqkv))
GUARDED_VOID(mean_pool_backward,
             (uform_backend_t *b, const float *dpooled, size_t width, const uform_segment_t *s, size_t count,
              float *dx),
             (DEVICE(dpooled), DEVICE(s), DEVICE(dx)), (inner, dpooled, width, s, count, dx))
GUARDED_VOID(normalize_backward,
             (uform_backend_t *b, const float *dy, const float *y, const float *norms, size_t rows, size_t width,
              float *dx),
             (DEVICE(dy), DEVICE(y), DEVICE(norms), DEVICE(dx)), (inner, dy, y, norms, rows, width, dx))
GUARDED_VOID(cross_entropy_forward,
             (uform_backend_t *b, const float *logits, size_t rows, size_t classes, const uint32_t *targets,
              float *losses),
             (DEVICE(logits), DEVICE(targets), DEVICE(losses)), (inner, logits, rows, classes, targets, losses))
GUARDED_VOID(cross_entropy_backward,
             (uform_backend_t *b, const float *logits, size_t rows, size_t classes, const uint32_t *targets,
              const float *scale, float *dlogits),
             (DEVICE(logits), DEVICE(targets), DEVICE(scale), DEVICE(dlogits)),
             (inner, logits, rows, classes, targets, scale, dlogits))
GUARDED_VOID(gather_rows,
             (uform_backend_t *b, const float *src, size_t width, const size_t *rows, size_t count, float *dst),
             (DEVICE(src), DEVICE(rows), DEVICE(dst)), (inner, src, width, rows, count, dst))
GUARDED_VOID(scatter_add_rows,
             (uform_backend_t *b, const float *src, size_t width, const size_t *rows, size_t count, float *dst),
             (DEVICE(src), DEVICE(rows), DEVICE(dst)), (inner, src, width, rows, count, dst))
GUARDED_VOID(sum_rows,
             (uform_backend_t *b, const float *src, size_t width, const size_t *rows, size_t count, float *sums),
             (DEVICE(src), DEVICE(rows), DEVICE(sums)), (inner, src, width, rows, count, sums))
GUARDED_RESULT(double, sum_squares, (uform_backend_t *b, const float *values, size_t count), DEVICE(values),
               (inner, values, count))
GUARDED_VOID(adamw,
             (uform_backend_t *b, float *parameters, const float *gradients, float gradient_scale,
              float *first_moment, float *second_moment, const uint8_t *decay, size_t count, uint64_t step,
              float learning_rate),
             (DEVICE(parameters), DEVICE(gradients), DEVICE(first_moment), DEVICE(second_moment), DEVICE(decay)),
             (inner, parameters, gradients, gradient_scale, first_moment, second_moment, decay, count, step,
              learning_rate))
GUARDED_RESULT(size_t, adamw_first_non_finite,
               (uform_backend_t *b, const float *parameters, const float *gradients, float gradient_scale,
                const float *first_moment, const float *second_moment, const uint8_t *decay, size_t count,
                uint64_t step, float learning_rate),
               (DEVICE(parameters), DEVICE(gradients), DEVICE(first_moment), DEVICE(second_moment), DEVICE(decay)),
               (inner, parameters, gradients, gradient_scale, first_moment, second_moment, decay, count, step,
                learning_rate))

/* The inference operations and the trainer's. */
static uform_backend_ops_t guarded_ops = {
    .name = "guarded",
    .host_memory = false,
    .alloc = guarded_alloc,
    .free = guarded_free,
    .upload = guarded_upload,
    .download = guarded_download,
    .copy = guarded_copy,
    .zero = guarded_zero,
    .download_rows = guarded_download_rows,
    .synchronize = guarded_synchronize,
    .acquire = guarded_acquire,
    .release = guarded_release,
    .pack = guarded_pack,
    .pack_e4m3 = guarded_pack_e4m3,
    .unpack_e4m3 = guarded_unpack_e4m3,
    .packed_free = guarded_packed_free,
    .linear = guarded_linear,
    .linear_gelu = guarded_linear_gelu,
    .layer_norm_forward = guarded_layer_norm_forward,
    .rope_tables = guarded_rope_tables,
    .rope_forward = guarded_rope_forward,
    .embedding_forward = guarded_embedding_forward,
    .attention_scratch_bytes = guarded_attention_scratch_bytes,
    .attention_forward = guarded_attention_forward,
    .mean_pool_forward = guarded_mean_pool_forward,
    .normalize_forward = guarded_normalize_forward,
    .scatter_rows = guarded_scatter_rows,
    .choice_probabilities = guarded_choice_probabilities,
    .gemm = guarded_gemm,
    .linear_backward = guarded_linear_backward,
    .layer_norm_backward = guarded_layer_norm_backward,
    .gelu_forward = guarded_gelu_forward,
    .gelu_backward = guarded_gelu_backward,
    .rope_backward = guarded_rope_backward,
    .embedding_backward = guarded_embedding_backward,
    .attention_backward = guarded_attention_backward,
    .mean_pool_backward = guarded_mean_pool_backward,
    .normalize_backward = guarded_normalize_backward,
    .cross_entropy_forward = guarded_cross_entropy_forward,
    .cross_entropy_backward = guarded_cross_entropy_backward,
    .gather_rows = guarded_gather_rows,
    .scatter_add_rows = guarded_scatter_add_rows,
    .sum_rows = guarded_sum_rows,
    /* lent from the CPU through this table's transfers, as the CUDA backend's */
    .contrastive_loss = uform_contrastive_loss_on_host,
    .late_interaction_loss = uform_late_interaction_loss_on_host,
    .choices_loss = uform_choices_loss_on_host,
    .reconstruction_loss = uform_reconstruction_loss_on_host,
    .sum_squares = guarded_sum_squares,
    .adamw = guarded_adamw,
    .adamw_first_non_finite = guarded_adamw_first_non_finite,
};

/* A guarded backend over the CPU class `cpu_class` on `executor`: free the
 * guard with guard_free once nothing of its memory is left. */
static inline uform_backend_t guarded_backend(uform_cpu_class_t cpu_class, uform_executor_t *executor) {
    guard_t *guard = calloc(1, sizeof(*guard));
    pthread_mutex_init(&guard->lock, NULL);
    guard->inner = uform_cpu_backend(cpu_class, executor);
    return (uform_backend_t){&guarded_ops, executor, guard, UFORM_OK};
}

static inline void guard_free(guard_t *guard) {
    pthread_mutex_destroy(&guard->lock);
    free(guard);
}

#endif /* UFORM_TESTS_GUARDED_BACKEND_H */
