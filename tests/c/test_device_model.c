/* test_device_model.c: a model on a device whose memory the host cannot touch,
 * without a GPU.
 *
 * The "guarded" backend below is the CPU backend with one difference: every
 * buffer it allocates is its own mmap region, kept PROT_NONE except while one
 * of its operations runs. A host read or write of device memory anywhere in the
 * model's load or in an encode verb (a missing upload, a host pointer passed as
 * a device one, a device buffer read on the host) is then a SIGSEGV, not a
 * silent success as on the CPU backend, whose device memory is host memory. It
 * reports host_memory false, so the verbs take their staging path, the one the
 * CUDA backend takes.
 *
 * The oracle: the same checkpoint loaded in RAM for the same CPU class gives
 * the same bits (the guarded backend runs the same kernels in the same order),
 * for every encode verb, output kind and scalar. And a backend lacking an
 * operation a verb needs answers UNSUPPORTED naming it. */
#include "check.h"
#include "small_checkpoint.h"

#include "backend/cpu/cpu_backend.h"
#include "core/safetensors.h"
#include "model/model.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- the guarded backend ---------------------------------------------------------- */

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
    if (g->count < MAX_REGIONS) {
        memory = mmap(NULL, rounded, g->opened ? PROT_READ | PROT_WRITE : PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (memory == MAP_FAILED) memory = NULL;
    }
    if (memory) {
        g->regions[g->count++] = (region_t){memory, rounded};
        g->allocations++;
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
GUARDED_RESULT(uform_status_t, synchronize, (uform_backend_t *b), (void)0, (inner))
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
              size_t count, float *out, float *logsumexp, void *scratch),
             (DEVICE(qkv), DEVICE(s), DEVICE(out), DEVICE(logsumexp), DEVICE(scratch)),
             (inner, qkv, hidden, s, count, out, logsumexp, scratch))
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

/* The inference operations; the trainer's are NULL (never reached). */
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
};

/* ---- the comparison --------------------------------------------------------------- */

static void test_verbs(const char *path, uform_cpu_class_t cpu_class, uform_scalar_t quantization) {
    uform_executor_t *executor = NULL;
    CHECK(uform_executor_for_ram(2, NULL, 0, &executor) == UFORM_OK, "executor: %s", uform_last_error());
    guard_t *guard = calloc(1, sizeof(*guard));
    pthread_mutex_init(&guard->lock, NULL);
    guard->inner = uform_cpu_backend(cpu_class, executor);
    uform_backend_t device = {&guarded_ops, executor, guard, UFORM_OK};

    uform_model_load_ram_options_t ram_options = {0};
    ram_options.cpu_class = cpu_class;
    ram_options.quantization = quantization;
    ram_options.executor = executor;
    uform_model_t *ram = NULL, *on_device = NULL;
    CHECK(uform_model_load_ram(path, &ram_options, &ram) == UFORM_OK, "RAM load: %s", uform_last_error());
    uform_safetensors_t file;
    memset(&file, 0, sizeof(file));
    CHECK(uform_safetensors_open(path, &file) == UFORM_OK, "open: %s", uform_last_error());
    uform_status_t status = uform_model_load_on_device(&file, &device, quantization, executor, NULL, &on_device);
    uform_safetensors_close(&file);
    CHECK(status == UFORM_OK, "device load: %s", uform_last_error());
    if (!ram || !on_device) return;
    CHECK(guard->allocations > 0, "the device model holds no device memory");

    uform_model_description_t described;
    CHECK(uform_model_describe(on_device, &described) == UFORM_OK && described.cpu_class == UFORM_CPU_CLASS_AUTO &&
              described.quantization == quantization,
          "describe: a device model has no CPU class");

    uform_arena_t *arena_ram = NULL, *arena_device = NULL;
    uform_arena_init_ram(&arena_ram);
    uform_arena_init_ram(&arena_device);
    static const uform_scalar_t scalars[] = {UFORM_SCALAR_F32, UFORM_SCALAR_BF16, UFORM_SCALAR_E4M3,
                                             UFORM_SCALAR_I8, UFORM_SCALAR_B1};
    for (verb_t verb = TEXT; verb <= AUDIO; verb++)
        for (size_t s = 0; s < sizeof(scalars) / sizeof(scalars[0]); s++) {
            uform_encode_options_t options = {0};
            options.outputs = UFORM_OUTPUTS_EMBEDDINGS | UFORM_OUTPUTS_TOKENS;
            options.outputs_scalar = scalars[s];
            uform_encoded_t a, b;
            uform_status_t ra = run_verb(verb, ram, arena_ram, &options, &a);
            uform_status_t rb = run_verb(verb, on_device, arena_device, &options, &b);
            CHECK(ra == UFORM_OK && rb == UFORM_OK, "%s: %d/%d %s", verb_names[verb], ra, rb, uform_last_error());
            if (ra != UFORM_OK || rb != UFORM_OK) continue;
            outputs_t oa = outputs_take(&a), ob = outputs_take(&b);
            CHECK(oa.embedding_bytes > 0 && oa.token_bytes > 0, "%s: outputs are empty", verb_names[verb]);
            CHECK(outputs_equal(&oa, &ob), "%s, scalar %d: the device model's outputs differ from RAM's",
                  verb_names[verb], (int)scalars[s]);
            outputs_free(&oa);
            outputs_free(&ob);
        }

    /* text_choose, through the choices head on the device */
    static const char texts_data[] = "pick one:yes or no?";
    static const size_t texts_offsets[] = {0, 9, 19};
    static const char choices_data[] = "abyn";
    static const size_t choices_offsets[] = {0, 2, 4};
    uform_tape_t texts = {texts_data, sizeof(texts_data) - 1, texts_offsets, 2};
    uform_tape_t choices = {choices_data, 4, choices_offsets, 2};
    static const uint32_t groups[] = {1, 0};
    uform_choose_options_t choose = {0};
    choose.temperature_groups = groups;
    uform_chosen_t ca, cb;
    CHECK(uform_text_choose(ram, NULL, &texts, &choices, arena_ram, &choose, &ca, NULL) == UFORM_OK &&
              uform_text_choose(on_device, NULL, &texts, &choices, arena_device, &choose, &cb, NULL) == UFORM_OK,
          "text_choose: %s", uform_last_error());
    CHECK(ca.count == 2 && cb.count == 2 && ca.offsets[2] == 4 && cb.offsets[2] == 4 &&
              memcmp(ca.probabilities, cb.probabilities, 4 * sizeof(float)) == 0,
          "text_choose: the device model's probabilities differ from RAM's");

    /* A backend without an operation a verb needs: UNSUPPORTED naming it. */
    guarded_ops.choice_probabilities = NULL;
    status = uform_text_choose(on_device, NULL, &texts, &choices, arena_device, &choose, &cb, NULL);
    CHECK(status == UFORM_UNSUPPORTED && strstr(uform_last_error(), "choice_probabilities"),
          "text_choose without the operation: %d %s", status, uform_last_error());
    guarded_ops.choice_probabilities = guarded_choice_probabilities;
    guarded_ops.download_rows = NULL;
    uform_encoded_t e;
    status = run_verb(TEXT, on_device, arena_device, NULL, &e);
    CHECK(status == UFORM_UNSUPPORTED && strstr(uform_last_error(), "download_rows"),
          "text_encode without download_rows: %d %s", status, uform_last_error());
    guarded_ops.download_rows = guarded_download_rows;

    CHECK(guard->violations == 0, "%zu pointers on the wrong side, the first: %s", guard->violations,
          guard->violation);
    CHECK(guard->held == 0 && guard->acquisitions >= 16,
          "acquire/release: %zu held after the verbs, %zu acquisitions", guard->held, guard->acquisitions);

    uform_arena_free(arena_ram);
    uform_arena_free(arena_device);
    uform_model_free(ram);
    uform_model_free(on_device);
    CHECK(guard->allocations == 0, "the device model leaks %zu device buffers", guard->allocations);
    pthread_mutex_destroy(&guard->lock);
    free(guard);
    uform_executor_free(executor);
}

int main(void) {
    const char *path = write_small_checkpoint();
    CHECK(path != NULL, "writing the checkpoint: %s", uform_last_error());
    if (!path) return 1;
    /* SERIAL runs everywhere; the best class is the one a RAM load picks */
    uform_cpu_class_t best = UFORM_CPU_CLASS_SERIAL;
    uform_cpu_class_resolve(UFORM_CPU_CLASS_AUTO, &best);
    uform_cpu_class_t classes[] = {UFORM_CPU_CLASS_SERIAL, best};
    for (size_t c = 0; c < 2; c++) {
        test_verbs(path, classes[c], UFORM_SCALAR_BF16);
        test_verbs(path, classes[c], UFORM_SCALAR_E4M3);
    }
    unlink(path);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
