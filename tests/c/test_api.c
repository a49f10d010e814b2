/* test_api.c: the public API of libuform (uform.h), end to end on small
 * random checkpoints this program writes itself.
 *
 * A standalone program: each test_* function is one test; the last line is
 * "N passed, M failed" and the exit status is nonzero when any failed. Meant
 * to run under ASan/UBSan with LeakSanitizer, so everything is freed and
 * every buffer handed to the library is a heap block of exactly its size.
 *
 * It links the library's objects statically, so the internal safetensors
 * writer and scalar helpers are visible here.
 */
#if defined(__aarch64__)
#include <sys/auxv.h>
#endif
#include "core/fp8.h"
#include "core/safetensors.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int checks_failed; /* in the current test */

#define CHECK(condition)                                                                      \
    do {                                                                                      \
        if (!(condition)) {                                                                   \
            fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, __LINE__,  \
                    #condition, uform_last_error());                                          \
            checks_failed++;                                                                  \
        }                                                                                     \
    } while (0)

#define CHECK_OK(call)                                                                        \
    do {                                                                                      \
        uform_status_t check_status_ = (call);                                                \
        if (check_status_ != UFORM_OK) {                                                      \
            fprintf(stderr, "%s:%d: %s returned %d: %s\n", __FILE__, __LINE__, #call,         \
                    (int)check_status_, uform_last_error());                                  \
            checks_failed++;                                                                  \
        }                                                                                     \
    } while (0)

/* A call that must fail with `expected` and a message holding `word` (words
 * differ from one expectation to the next, so the message is this call's). */
static void expect_fail(uform_status_t status, uform_status_t expected, const char *word,
                        const char *text, int line) {
    const char *message = uform_last_error();
    if (status != expected || !message[0] || (word && !strstr(message, word))) {
        fprintf(stderr, "%s:%d: %s: expected status %d with '%s', got %d: '%s'\n", __FILE__, line,
                text, (int)expected, word ? word : "", (int)status, message);
        checks_failed++;
    }
}
#define EXPECT_FAIL(call, expected, word) expect_fail((call), (expected), (word), #call, __LINE__)

/* What a VRAM verb answers where it cannot run: UNSUPPORTED from a build without
 * the CUDA backend, DEVICE ("no GPU found") from one with it on a machine without
 * a GPU. (On a GPU machine the VRAM models are tested by make test-gpu.) */
static uform_status_t vram_refusal(void) {
    uform_capabilities_t caps;
    if (uform_capabilities(&caps) != UFORM_OK) return UFORM_UNSUPPORTED;
    return caps.gpu_backend_built && caps.gpus == 0 ? UFORM_DEVICE : UFORM_UNSUPPORTED;
}

/* Whether the VRAM verbs can run here (then make test-gpu tests them). */
static bool gpus_visible(void) {
    uform_capabilities_t caps;
    return uform_capabilities(&caps) == UFORM_OK && caps.gpus > 0;
}

/* ---- deterministic randomness ---------------------------------------------------- */

typedef struct {
    uint64_t state;
} rng_t;

static uint64_t rng_next(rng_t *rng) { /* splitmix64 */
    uint64_t z = (rng->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static float rng_unit(rng_t *rng) {
    return (float)((double)(rng_next(rng) >> 11) * 0x1p-53 * 2.0 - 1.0);
}

static size_t rng_below(rng_t *rng, size_t bound) { return (size_t)(rng_next(rng) % bound); }

/* ---- checkpoints --------------------------------------------------------------- */

typedef struct {
    size_t depth, hidden, dimensions, context, token_width;
    uint64_t seed;
    const char *poison;  /* a tensor to hold a non-finite value, or NULL */
    float poison_value;
} spec_t;

typedef struct {
    char names[64][96];
    uform_tensor_view_t views[64];
    uint16_t *data[64];
    size_t count;
} tensors_t;

typedef enum { KIND_WEIGHT, KIND_TABLE, KIND_NORM, KIND_BIAS } kind_t;

static void add_tensor(tensors_t *t, rng_t *rng, const char *name,
                       size_t rows, size_t cols, kind_t kind) {
    size_t i = t->count++;
    if (i >= 64) abort();
    snprintf(t->names[i], sizeof(t->names[i]), "%s", name);
    size_t count = rows * (cols ? cols : 1);
    uint16_t *values = malloc(count * sizeof(uint16_t));
    if (!values) abort();
    /* Uniform with the variance of N(0, 1/fan_in): half-width sqrt(3 / fan_in). */
    float scale = cols ? sqrtf(3.0f / (float)cols) : 0.02f;
    for (size_t j = 0; j < count; j++) {
        float value;
        switch (kind) {
        case KIND_TABLE: value = rng_unit(rng) * 1.7f; break;
        case KIND_NORM: value = 1.0f + 0.1f * rng_unit(rng); break;
        case KIND_BIAS: value = 0.02f * rng_unit(rng); break;
        default: value = scale * rng_unit(rng); break;
        }
        values[j] = uform_f32_to_bf16(value);
    }
    t->data[i] = values;
    uform_tensor_view_t *view = &t->views[i];
    view->name = t->names[i];
    view->dtype = UFORM_DTYPE_BF16;
    view->rank = cols ? 2 : 1;
    view->shape[0] = rows;
    view->shape[1] = cols;
    view->data = values;
}

/* Overwrites element count / 2 + 1 of the BF16 tensor spec->poison in the file at path. */
static uform_status_t poison_checkpoint(const char *path, const spec_t *spec) {
    uform_safetensors_t file;
    uform_status_t status = uform_safetensors_open(path, &file);
    if (status != UFORM_OK) return status;
    const uform_tensor_t *tensor = uform_safetensors_find(&file, spec->poison);
    long offset = -1;
    if (tensor) offset = (long)(tensor->data - file.bytes) + (long)(tensor->bytes / 4 + 1) * 2;
    uform_safetensors_close(&file);
    uint16_t value = uform_f32_to_bf16(spec->poison_value);
    FILE *stream = offset >= 0 ? fopen(path, "r+b") : NULL;
    bool ok = stream && fseek(stream, offset, SEEK_SET) == 0 && fwrite(&value, 2, 1, stream) == 1;
    if (stream && fclose(stream) != 0) ok = false;
    if (!ok) fprintf(stderr, "poisoning %s in %s failed\n", spec->poison, path);
    return ok ? UFORM_OK : UFORM_FILE;
}

static bool write_checkpoint(const char *path, const spec_t *spec) {
    tensors_t *t = calloc(1, sizeof(*t));
    if (!t) abort();
    rng_t rng = {spec->seed};
    size_t H = spec->hidden;
    add_tensor(t, &rng, "text.bytes", 257, H, KIND_TABLE);
    add_tensor(t, &rng, "text.modality", H, 0, KIND_BIAS);
    for (size_t l = 0; l < spec->depth; l++) {
        char name[96];
#define BLOCK(suffix) (snprintf(name, sizeof(name), "blocks.%zu.%s", l, suffix), name)
        add_tensor(t, &rng, BLOCK("attention.norm.weight"), H, 0, KIND_NORM);
        add_tensor(t, &rng, BLOCK("attention.norm.bias"), H, 0, KIND_BIAS);
        add_tensor(t, &rng, BLOCK("attention.qkv.weight"), 3 * H, H, KIND_WEIGHT);
        add_tensor(t, &rng, BLOCK("attention.qkv.bias"), 3 * H, 0, KIND_BIAS);
        add_tensor(t, &rng, BLOCK("attention.out.weight"), H, H, KIND_WEIGHT);
        add_tensor(t, &rng, BLOCK("attention.out.bias"), H, 0, KIND_BIAS);
        add_tensor(t, &rng, BLOCK("mlp.norm.weight"), H, 0, KIND_NORM);
        add_tensor(t, &rng, BLOCK("mlp.norm.bias"), H, 0, KIND_BIAS);
        add_tensor(t, &rng, BLOCK("mlp.up.weight"), 4 * H, H, KIND_WEIGHT);
        add_tensor(t, &rng, BLOCK("mlp.up.bias"), 4 * H, 0, KIND_BIAS);
        add_tensor(t, &rng, BLOCK("mlp.down.weight"), H, 4 * H, KIND_WEIGHT);
        add_tensor(t, &rng, BLOCK("mlp.down.bias"), H, 0, KIND_BIAS);
#undef BLOCK
    }
    add_tensor(t, &rng, "norm.weight", H, 0, KIND_NORM);
    add_tensor(t, &rng, "norm.bias", H, 0, KIND_BIAS);
    add_tensor(t, &rng, "heads.embedding.weight", spec->dimensions, H, KIND_WEIGHT);
    if (spec->token_width)
        add_tensor(t, &rng, "heads.tokens.weight", spec->token_width, H, KIND_WEIGHT);

    char json[512];
    snprintf(json, sizeof(json),
             "{\"version\":4,\"depth\":%zu,\"hidden\":%zu,\"dimensions\":%zu,\"context\":%zu,"
             "\"token_width\":%zu,\"choice_temperature_groups\":0,\"step\":0}",
             spec->depth, spec->hidden, spec->dimensions, spec->context, spec->token_width);
    uform_metadata_entry_t metadata = {(char *)"uform", json};
    uform_status_t status = uform_safetensors_write(path, t->views, t->count, &metadata, 1, NULL);
    if (status != UFORM_OK) fprintf(stderr, "writing %s: %s\n", path, uform_last_error());
    for (size_t i = 0; i < t->count; i++) free(t->data[i]);
    free(t);
    /* The writer refuses non-finite values, so the poison is patched into the file. */
    if (status == UFORM_OK && spec->poison) status = poison_checkpoint(path, spec);
    return status == UFORM_OK;
}

/* Paths made with mkstemp, removed at exit. */
static char temporary_paths[16][64];
static size_t temporary_count;

static const char *temporary_path(void) {
    if (temporary_count >= 16) abort();
    char *path = temporary_paths[temporary_count++];
    snprintf(path, 64, "/tmp/uform-test-api-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0) {
        perror("mkstemp");
        abort();
    }
    close(fd);
    return path;
}

static uint8_t *read_whole(const char *path, size_t *size) {
    FILE *stream = fopen(path, "rb");
    if (!stream) abort();
    fseek(stream, 0, SEEK_END);
    long length = ftell(stream);
    fseek(stream, 0, SEEK_SET);
    uint8_t *bytes = malloc(length > 0 ? (size_t)length : 1);
    if (!bytes) abort();
    *size = fread(bytes, 1, (size_t)length, stream);
    fclose(stream);
    return bytes;
}

/* ---- texts --------------------------------------------------------------------- */

typedef struct {
    uint8_t *data;     /* exactly `size` bytes (NULL when 0) */
    size_t size;
    size_t *offsets;   /* count + 1 */
    size_t count;
} texts_t;

/* Random bytes (any value, NUL included) with lengths around `context`:
 * empty ones, exactly context, just over and far over it, and shorter ones. */
static texts_t make_texts(uint64_t seed, size_t count, size_t context) {
    rng_t rng = {seed};
    texts_t texts = {NULL, 0, malloc((count + 1) * sizeof(size_t)), count};
    if (!texts.offsets) abort();
    size_t *lengths = malloc(count * sizeof(size_t));
    if (!lengths) abort();
    for (size_t i = 0; i < count; i++) {
        size_t kind = i < 5 ? i : rng_below(&rng, 10);
        switch (kind) {
        case 0: lengths[i] = 0; break;
        case 1: lengths[i] = context; break;
        case 2: lengths[i] = context + 1; break;
        case 3: lengths[i] = context + 1 + rng_below(&rng, 2 * context); break;
        case 4: lengths[i] = 1; break;
        default: lengths[i] = 1 + rng_below(&rng, context); break;
        }
        texts.size += lengths[i];
    }
    texts.data = texts.size ? malloc(texts.size) : NULL;
    if (texts.size && !texts.data) abort();
    for (size_t i = 0; i < texts.size; i++) texts.data[i] = (uint8_t)rng_next(&rng);
    texts.offsets[0] = 0;
    for (size_t i = 0; i < count; i++) texts.offsets[i + 1] = texts.offsets[i] + lengths[i];
    free(lengths);
    return texts;
}

static void texts_free(texts_t *texts) {
    free(texts->data);
    free(texts->offsets);
    memset(texts, 0, sizeof(*texts));
}

static uform_tape_t tape_of(const texts_t *texts) {
    return (uform_tape_t){texts->data, texts->size, texts->offsets, texts->count};
}

/* Items [first, first + count) as a texts_t of their own (exact heap copies). */
static texts_t texts_slice(const texts_t *texts, size_t first, size_t count) {
    texts_t slice = {NULL, 0, malloc((count + 1) * sizeof(size_t)), count};
    if (!slice.offsets) abort();
    size_t begin = texts->offsets[first];
    slice.size = texts->offsets[first + count] - begin;
    slice.data = slice.size ? malloc(slice.size) : NULL;
    if (slice.size) memcpy(slice.data, texts->data + begin, slice.size);
    for (size_t i = 0; i <= count; i++) slice.offsets[i] = texts->offsets[first + i] - begin;
    return slice;
}

/* ---- encoding into owned copies ------------------------------------------------------ */

typedef struct {
    size_t count;
    uform_scalar_t scalar;
    size_t dimensions, embedding_row_bytes;
    uint8_t *embeddings;      /* NULL without */
    size_t token_width, token_row_bytes;
    size_t *token_offsets;    /* NULL without */
    uint8_t *tokens;
    uform_text_encode_stats_t stats;
} output_t;

static void output_free(output_t *out) {
    free(out->embeddings);
    free(out->token_offsets);
    free(out->tokens);
    memset(out, 0, sizeof(*out));
}

static void *copy_of(const void *data, size_t bytes) {
    void *copy = malloc(bytes ? bytes : 1);
    if (!copy) abort();
    if (bytes) memcpy(copy, data, bytes);
    return copy;
}

static void output_take(output_t *out, const uform_encoded_t *encoded,
                        const uform_text_encode_stats_t *stats) {
    memset(out, 0, sizeof(*out));
    out->count = encoded->count;
    out->scalar = encoded->scalar;
    out->dimensions = encoded->dimensions;
    out->embedding_row_bytes = encoded->embedding_row_bytes;
    if (encoded->embeddings)
        out->embeddings = copy_of(encoded->embeddings, encoded->count * encoded->embedding_row_bytes);
    out->token_width = encoded->token_width;
    out->token_row_bytes = encoded->token_row_bytes;
    if (encoded->token_offsets) {
        out->token_offsets = copy_of(encoded->token_offsets, (encoded->count + 1) * sizeof(size_t));
        out->tokens = copy_of(encoded->tokens,
                              encoded->token_offsets[encoded->count] * encoded->token_row_bytes);
    }
    if (stats) out->stats = *stats;
}

/* uform_text_encode with a fresh arena; the outputs copied into `out`. */
static uform_status_t encode(uform_model_t *model, uform_executor_t *executor,
                             const texts_t *texts, uint32_t outputs, uform_scalar_t scalar,
                             output_t *out) {
    memset(out, 0, sizeof(*out));
    uform_arena_t *arena = NULL;
    uform_status_t status = uform_arena_init_ram(&arena);
    if (status != UFORM_OK) return status;
    uform_tape_t tape = tape_of(texts);
    uform_encode_options_t options = {outputs, scalar, {NULL, NULL, 0}};
    uform_encoded_t encoded;
    uform_text_encode_stats_t stats;
    status = uform_text_encode(model, executor, &tape, arena, &options, &encoded, &stats);
    if (status == UFORM_OK) output_take(out, &encoded, &stats);
    uform_arena_free(arena);
    return status;
}

static bool outputs_equal(const output_t *a, const output_t *b) {
    if (a->count != b->count || a->scalar != b->scalar ||
        a->embedding_row_bytes != b->embedding_row_bytes || a->token_row_bytes != b->token_row_bytes ||
        !a->embeddings != !b->embeddings || !a->token_offsets != !b->token_offsets)
        return false;
    if (a->embeddings && memcmp(a->embeddings, b->embeddings, a->count * a->embedding_row_bytes))
        return false;
    if (a->token_offsets) {
        if (memcmp(a->token_offsets, b->token_offsets, (a->count + 1) * sizeof(size_t))) return false;
        if (memcmp(a->tokens, b->tokens, a->token_offsets[a->count] * a->token_row_bytes))
            return false;
    }
    return true;
}

/* Row i of `whole` equals row 0 of `alone` (a one-item encode of item i). */
static bool item_equal(const output_t *whole, size_t i, const output_t *alone) {
    if (alone->count != 1) return false;
    if (whole->embeddings &&
        memcmp(whole->embeddings + i * whole->embedding_row_bytes, alone->embeddings,
               whole->embedding_row_bytes))
        return false;
    if (whole->token_offsets) {
        size_t rows = whole->token_offsets[i + 1] - whole->token_offsets[i];
        if (alone->token_offsets[1] != rows) return false;
        if (memcmp(whole->tokens + whole->token_offsets[i] * whole->token_row_bytes, alone->tokens,
                   rows * whole->token_row_bytes))
            return false;
    }
    return true;
}

static double row_norm_f32(const uint8_t *row, size_t width) {
    double sum = 0;
    for (size_t i = 0; i < width; i++) {
        float value;
        memcpy(&value, row + 4 * i, 4);
        sum += (double)value * value;
    }
    return sqrt(sum);
}

static float f32_at(const uint8_t *row, size_t i) {
    float value;
    memcpy(&value, row + 4 * i, 4);
    return value;
}

/* ---- fixtures ---------------------------------------------------------------------- */

/* Model A: two blocks, a token head; most tests. */
static const spec_t spec_a = {2, 64, 36, 64, 24, 0x5eed0001u, NULL, 0};
/* Model B: one wider block, no token head, a longer context: 200 texts of it
 * need more rows than one forward batch holds, so the packing crosses batches. */
static const spec_t spec_b = {1, 128, 40, 160, 0, 0x5eed0002u, NULL, 0};

static const char *path_a, *path_b;
static uint8_t *bytes_a;
static size_t size_a;
static uform_model_t *model_a, *model_b;
static texts_t texts_a, texts_b;   /* 200 texts each */
static output_t reference_a;       /* model_a, texts_a, EMBEDDINGS|TOKENS, F32 */
static output_t reference_b;       /* model_b, texts_b, EMBEDDINGS, F32 */

#define BOTH (UFORM_OUTPUTS_EMBEDDINGS | UFORM_OUTPUTS_TOKENS)

/* ---- tests ------------------------------------------------------------------------- */

static void test_version_and_errors(void) {
    CHECK(uform_version() == 40000u);
    CHECK(uform_version() / 10000 == 4);
    CHECK(uform_last_error() != NULL);
    EXPECT_FAIL(uform_arena_reset(NULL), UFORM_INVALID_ARGUMENT, "arena");
    /* a successful call does not need to clear it, but it stays a valid string */
    uform_arena_t *arena = NULL;
    CHECK_OK(uform_arena_init_ram(&arena));
    CHECK(uform_last_error() != NULL);
    uform_arena_free(arena);
}

static void test_executors(void) {
    uform_executor_t *executor = (uform_executor_t *)&executor;
    size_t threads = 0, domains = 0;

    CHECK_OK(uform_executor_for_ram(0, NULL, 0, &executor));
    CHECK(executor != NULL);
    CHECK_OK(uform_executor_threads(executor, &threads));
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    CHECK(threads >= 1 && (online <= 0 || threads <= (size_t)online));
    CHECK_OK(uform_executor_memory_domains(executor, &domains));
    CHECK(domains == 1);
    uform_executor_free(executor);

    size_t counts[] = {1, 3};
    for (size_t i = 0; i < 2; i++) {
        executor = NULL;
        CHECK_OK(uform_executor_for_ram(counts[i], NULL, 0, &executor));
        threads = 0;
        CHECK_OK(uform_executor_threads(executor, &threads));
        CHECK(threads == counts[i]);
        uform_executor_free(executor);
    }

    uint32_t two[] = {0, 1};
    executor = NULL;
    CHECK_OK(uform_executor_for_ram(2, two, 2, &executor));
    domains = 0;
    CHECK_OK(uform_executor_memory_domains(executor, &domains));
    CHECK(domains == 2);
    uform_executor_free(executor);

    uint32_t twice[] = {1, 0, 1};
    executor = (uform_executor_t *)&executor;
    EXPECT_FAIL(uform_executor_for_ram(1, twice, 3, &executor), UFORM_INVALID_ARGUMENT, "twice");
    CHECK(executor == NULL);
    executor = (uform_executor_t *)&executor;
    EXPECT_FAIL(uform_executor_for_ram(1, NULL, 2, &executor), UFORM_INVALID_ARGUMENT,
                "memory_domains");
    CHECK(executor == NULL);
    EXPECT_FAIL(uform_executor_for_ram(1, NULL, 0, NULL), UFORM_INVALID_ARGUMENT, "out-pointer");
    executor = (uform_executor_t *)&executor;
    EXPECT_FAIL(uform_executor_for_ram(1u << 20, NULL, 0, &executor), UFORM_INVALID_ARGUMENT,
                "threads");
    CHECK(executor == NULL);

    executor = (uform_executor_t *)&executor;
    uint32_t device = 0;
    if (!gpus_visible()) {
        EXPECT_FAIL(uform_executor_for_vram(&device, 1, &executor), vram_refusal(), "GPU");
        CHECK(executor == NULL);
    }
    EXPECT_FAIL(uform_executor_for_vram(NULL, 0, NULL), UFORM_INVALID_ARGUMENT, "out-pointer");

    EXPECT_FAIL(uform_executor_threads(NULL, &threads), UFORM_INVALID_ARGUMENT, "executor_threads");
    EXPECT_FAIL(uform_executor_memory_domains(NULL, &domains), UFORM_INVALID_ARGUMENT,
                "executor_memory_domains");
    CHECK_OK(uform_executor_for_ram(1, NULL, 0, &executor));
    EXPECT_FAIL(uform_executor_threads(executor, NULL), UFORM_INVALID_ARGUMENT, "executor_threads");
    EXPECT_FAIL(uform_executor_memory_domains(executor, NULL), UFORM_INVALID_ARGUMENT,
                "executor_memory_domains");
    uform_executor_free(executor);
    uform_executor_free(NULL);
}

static void test_arenas(void) {
    EXPECT_FAIL(uform_arena_init_ram(NULL), UFORM_INVALID_ARGUMENT, "out-pointer");
    EXPECT_FAIL(uform_arena_reset(NULL), UFORM_INVALID_ARGUMENT, "arena");
    size_t bytes = 1;
    EXPECT_FAIL(uform_arena_capacity(NULL, &bytes), UFORM_INVALID_ARGUMENT, "arena_capacity");
    uform_arena_free(NULL);

    uform_arena_t *arena = NULL;
    CHECK_OK(uform_arena_init_ram(&arena));
    CHECK(arena != NULL);
    EXPECT_FAIL(uform_arena_capacity(arena, NULL), UFORM_INVALID_ARGUMENT, "arena_capacity");
    CHECK_OK(uform_arena_capacity(arena, &bytes));
    CHECK(bytes == 0);
    CHECK_OK(uform_arena_reset(arena));

    /* Reuse: repeated same-size encodes stop growing the arena. */
    uform_tape_t tape = tape_of(&texts_a);
    uform_encode_options_t options = {BOTH, UFORM_SCALAR_F32, {NULL, NULL, 0}};
    uform_encoded_t encoded;
    size_t capacity[5] = {0};
    for (int round = 0; round < 5; round++) {
        CHECK_OK(uform_text_encode(model_a, NULL, &tape, arena, &options, &encoded, NULL));
        CHECK_OK(uform_arena_capacity(arena, &capacity[round]));
        if (round == 4) {
            output_t out;
            output_take(&out, &encoded, NULL);
            CHECK(outputs_equal(&out, &reference_a));
            output_free(&out);
        }
    }
    size_t needed = texts_a.count * encoded.embedding_row_bytes +
                    encoded.token_offsets[texts_a.count] * encoded.token_row_bytes;
    CHECK(capacity[0] >= needed);
    CHECK(capacity[1] == capacity[0]);
    CHECK(capacity[4] == capacity[1]);
    if (capacity[4] != capacity[0])
        fprintf(stderr, "arena capacity by round: %zu %zu %zu %zu %zu\n", capacity[0], capacity[1],
                capacity[2], capacity[3], capacity[4]);

    /* A smaller batch after a big one takes nothing new; reset keeps the memory. */
    texts_t few = texts_slice(&texts_a, 10, 7);
    uform_tape_t small = tape_of(&few);
    CHECK_OK(uform_text_encode(model_a, NULL, &small, arena, &options, &encoded, NULL));
    CHECK_OK(uform_arena_capacity(arena, &bytes));
    CHECK(bytes == capacity[4]);
    CHECK_OK(uform_arena_reset(arena));
    CHECK_OK(uform_arena_capacity(arena, &bytes));
    CHECK(bytes == capacity[4]);
    /* and the big one again still fits */
    CHECK_OK(uform_text_encode(model_a, NULL, &tape, arena, &options, &encoded, NULL));
    CHECK_OK(uform_arena_capacity(arena, &bytes));
    CHECK(bytes == capacity[4]);
    texts_free(&few);
    uform_arena_free(arena);
}

static void check_description(const uform_model_t *model, const spec_t *spec,
                              uform_cpu_class_t expected_class) {
    uform_model_description_t d;
    memset(&d, 0xab, sizeof(d));
    CHECK_OK(uform_model_describe(model, &d));
    CHECK(d.dimensions == spec->dimensions);
    CHECK(d.context == spec->context);
    CHECK(d.quantization == UFORM_SCALAR_BF16);
    CHECK(d.cpu_class != UFORM_CPU_CLASS_AUTO);
    if (expected_class != UFORM_CPU_CLASS_AUTO) CHECK(d.cpu_class == expected_class);
    CHECK(d.gpu_class == UFORM_GPU_CLASS_NONE);
    CHECK(d.token_width == spec->token_width);
    CHECK(d.choice_temperature_groups == 0);
    CHECK(d.depth == spec->depth);
    CHECK(d.hidden == spec->hidden);
    /* At least the BF16 weights themselves. */
    size_t H = spec->hidden;
    size_t parameters = 257 * H + spec->depth * 12 * H * H + (spec->dimensions + spec->token_width) * H;
    CHECK(d.memory_usage >= 2 * parameters);
    CHECK(d.memory_usage < 64 * parameters + ((size_t)1 << 20));
}

static void test_load_and_describe(void) {
    check_description(model_a, &spec_a, UFORM_CPU_CLASS_AUTO);
    check_description(model_b, &spec_b, UFORM_CPU_CLASS_AUTO);

    /* From a buffer, the same outputs bit for bit; the buffer may go right after. */
    uint8_t *copy = copy_of(bytes_a, size_a);
    uform_model_t *from_buffer = NULL;
    CHECK_OK(uform_model_load_ram_buffer(copy, size_a, NULL, &from_buffer));
    memset(copy, 0xff, size_a);
    free(copy);
    if (from_buffer) {
        check_description(from_buffer, &spec_a, UFORM_CPU_CLASS_AUTO);
        output_t out;
        CHECK_OK(encode(from_buffer, NULL, &texts_a, BOTH, UFORM_SCALAR_F32, &out));
        CHECK(outputs_equal(&out, &reference_a));
        output_free(&out);
        uform_model_free(from_buffer);
    }

    /* Options: a borrowed executor, explicit domains, F32 quantization meaning BF16. */
    uform_executor_t *executor = NULL;
    CHECK_OK(uform_executor_for_ram(2, NULL, 0, &executor));
    uint32_t domain = 0;
    uform_model_load_ram_options_t options = {&domain, 1, UFORM_CPU_CLASS_AUTO, executor,
                                              UFORM_SCALAR_F32, {NULL, NULL, 0}};
    uform_model_t *model = NULL;
    CHECK_OK(uform_model_load_ram(path_a, &options, &model));
    if (model) {
        output_t out;
        CHECK_OK(encode(model, NULL, &texts_a, BOTH, UFORM_SCALAR_F32, &out));
        CHECK(outputs_equal(&out, &reference_a));
        output_free(&out);
        uform_model_free(model);
    }
    /* no executor: a private one on the listed domains */
    options.executor = NULL;
    model = NULL;
    CHECK_OK(uform_model_load_ram(path_a, &options, &model));
    uform_model_free(model);
    uform_executor_free(executor);

    options.memory_domains = NULL;
    options.memory_domains_count = 2;
    model = (uform_model_t *)&model;
    EXPECT_FAIL(uform_model_load_ram(path_a, &options, &model), UFORM_INVALID_ARGUMENT,
                "memory_domains");
    CHECK(model == NULL);

    uform_model_description_t d;
    EXPECT_FAIL(uform_model_describe(NULL, &d), UFORM_INVALID_ARGUMENT, "model");
    EXPECT_FAIL(uform_model_describe(model_a, NULL), UFORM_INVALID_ARGUMENT, "description");
    EXPECT_FAIL(uform_model_load_ram(path_a, NULL, NULL), UFORM_INVALID_ARGUMENT, "out-pointer");
    model = (uform_model_t *)&model;
    EXPECT_FAIL(uform_model_load_ram(NULL, NULL, &model), UFORM_INVALID_ARGUMENT, "path");
    CHECK(model == NULL);
    EXPECT_FAIL(uform_model_load_ram_buffer(bytes_a, size_a, NULL, NULL), UFORM_INVALID_ARGUMENT,
                "out-pointer");
    model = (uform_model_t *)&model;
    EXPECT_FAIL(uform_model_load_ram_buffer(NULL, 16, NULL, &model), UFORM_INVALID_ARGUMENT,
                "buffer");
    CHECK(model == NULL);
    uform_model_free(NULL);
}

/* Whether this CPU (and OS) runs a class, by the compiler's own detection. */
static int cpu_runs(uform_cpu_class_t cpu_class) {
    switch (cpu_class) {
    case UFORM_CPU_CLASS_SERIAL: return 1;
#if defined(__x86_64__) && (defined(__clang__) || __GNUC__ >= 11)
    case UFORM_CPU_CLASS_HASWELL:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case UFORM_CPU_CLASS_SKYLAKE:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("avx512f");
    case UFORM_CPU_CLASS_SAPPHIRE:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
    case UFORM_CPU_CLASS_AMX:
        /* the instructions, and then the OS must grant the tile state: unknown here */
        return cpu_runs(UFORM_CPU_CLASS_SAPPHIRE) && __builtin_cpu_supports("amx-tile") &&
                       __builtin_cpu_supports("amx-bf16")
                   ? -1
                   : 0;
#elif defined(__x86_64__)
    case UFORM_CPU_CLASS_HASWELL:
    case UFORM_CPU_CLASS_SKYLAKE:
    case UFORM_CPU_CLASS_SAPPHIRE:
    case UFORM_CPU_CLASS_AMX: return -1; /* unknown: accept either */
#elif defined(__aarch64__)
    /* Linux always has Advanced SIMD on aarch64; SVE where the kernel says so. */
    case UFORM_CPU_CLASS_NEON: return 1;
    case UFORM_CPU_CLASS_SVE: return (getauxval(AT_HWCAP) & (1UL << 22)) != 0; /* HWCAP_SVE */
    case UFORM_CPU_CLASS_NEON_BF16: return (getauxval(AT_HWCAP2) & (1UL << 14)) != 0; /* BF16 */
    case UFORM_CPU_CLASS_SVE_BF16:
        return (getauxval(AT_HWCAP) & (1UL << 22)) && (getauxval(AT_HWCAP2) & (1UL << 12));
#endif
    default: return 0; /* the other architecture's classes */
    }
}

static void test_cpu_classes(void) {
    static const uform_cpu_class_t classes[] = {
        UFORM_CPU_CLASS_SERIAL,   UFORM_CPU_CLASS_HASWELL, UFORM_CPU_CLASS_SKYLAKE,
        UFORM_CPU_CLASS_SAPPHIRE, UFORM_CPU_CLASS_NEON,    UFORM_CPU_CLASS_SVE,
        UFORM_CPU_CLASS_NEON_BF16, UFORM_CPU_CLASS_SVE_BF16, UFORM_CPU_CLASS_AMX};
    static const char *names[] = {"serial", "haswell", "skylake",   "sapphire", "neon",
                                  "sve",    "neon_bf16", "sve_bf16", "amx"};
    enum { CLASSES = sizeof(classes) / sizeof(classes[0]) };
    texts_t few = texts_slice(&texts_a, 0, 40);
    output_t serial = {0};
    uform_cpu_class_t best = UFORM_CPU_CLASS_SERIAL;
    output_t by_class[CLASSES];
    memset(by_class, 0, sizeof(by_class));
    for (size_t c = 0; c < CLASSES; c++) {
        uform_model_load_ram_options_t options = {NULL, 0, classes[c], NULL, UFORM_SCALAR_BF16,
                                                  {NULL, NULL, 0}};
        uform_model_t *model = (uform_model_t *)&model;
        uform_status_t status = uform_model_load_ram_buffer(bytes_a, size_a, &options, &model);
        int runs = cpu_runs(classes[c]);
        if (runs == 0) {
            expect_fail(status, UFORM_UNSUPPORTED, names[c], names[c], __LINE__);
            CHECK(model == NULL);
            continue;
        }
        if (runs < 0 && status == UFORM_UNSUPPORTED) continue;
        if (status != UFORM_OK) {
            fprintf(stderr, "cpu class %s: status %d: %s\n", names[c], (int)status,
                    uform_last_error());
            checks_failed++;
            continue;
        }
        best = classes[c]; /* AUTO picks the last of these the machine runs (AMX first of all) */
        check_description(model, &spec_a, classes[c]);
        CHECK_OK(encode(model, NULL, &few, BOTH, UFORM_SCALAR_F32, &by_class[c]));
        uform_model_free(model);
        output_t *out = &by_class[c];
        if (!out->embeddings) continue;
        if (classes[c] == UFORM_CPU_CLASS_SERIAL) serial = *out;
        if (!serial.embeddings) continue;
        /* Every class computes the same model: close to the serial one, unit norm. */
        double worst = 1.0;
        for (size_t i = 0; i < few.count; i++) {
            const uint8_t *row = out->embeddings + i * out->embedding_row_bytes;
            const uint8_t *base = serial.embeddings + i * serial.embedding_row_bytes;
            bool empty = few.offsets[i + 1] == few.offsets[i];
            double norm = row_norm_f32(row, out->dimensions);
            CHECK(empty ? norm == 0 : fabs(norm - 1) < 1e-4);
            if (empty) continue;
            double dot = 0;
            for (size_t j = 0; j < out->dimensions; j++) dot += (double)f32_at(row, j) * f32_at(base, j);
            if (dot < worst) worst = dot;
        }
        if (worst < 0.97)
            fprintf(stderr, "cpu class %s: cosine to serial as low as %.4f\n", names[c], worst);
        CHECK(worst >= 0.97);
    }

    /* AUTO picks the best class and matches it bit for bit. */
    uform_model_t *model = NULL;
    uform_model_load_ram_options_t options = {NULL, 0, UFORM_CPU_CLASS_AUTO, NULL, UFORM_SCALAR_BF16,
                                              {NULL, NULL, 0}};
    CHECK_OK(uform_model_load_ram_buffer(bytes_a, size_a, &options, &model));
    if (model) {
        uform_model_description_t d;
        CHECK_OK(uform_model_describe(model, &d));
        CHECK(d.cpu_class == best);
        output_t out;
        CHECK_OK(encode(model, NULL, &few, BOTH, UFORM_SCALAR_F32, &out));
        for (size_t c = 0; c < CLASSES; c++)
            if (classes[c] == best) CHECK(outputs_equal(&out, &by_class[c]));
        output_free(&out);
        uform_model_free(model);
    }
    options.cpu_class = (uform_cpu_class_t)99;
    model = (uform_model_t *)&model;
    EXPECT_FAIL(uform_model_load_ram_buffer(bytes_a, size_a, &options, &model),
                UFORM_INVALID_ARGUMENT, "cpu_class");
    CHECK(model == NULL);
    for (size_t c = 0; c < CLASSES; c++) output_free(&by_class[c]);
    texts_free(&few);
}

static void test_quantization(void) {
    uform_model_load_ram_options_t options = {NULL, 0, UFORM_CPU_CLASS_AUTO, NULL, UFORM_SCALAR_BF16,
                                              {NULL, NULL, 0}};
    uform_model_t *model = NULL;
    CHECK_OK(uform_model_load_ram_buffer(bytes_a, size_a, &options, &model));
    if (model) {
        uform_model_description_t d;
        CHECK_OK(uform_model_describe(model, &d));
        CHECK(d.quantization == UFORM_SCALAR_BF16);
        uform_model_free(model);
    }
    /* E4M3: loads, says so, holds less; its block matrices read back (the
     * codes themselves are checked against numpy in tests/test_quantization.py) */
    size_t bf16_bytes = 0;
    options.quantization = UFORM_SCALAR_BF16;
    CHECK_OK(uform_model_load_ram_buffer(bytes_a, size_a, &options, &model));
    if (model) {
        uform_model_description_t d;
        CHECK_OK(uform_model_describe(model, &d));
        bf16_bytes = d.memory_usage;
        size_t rows = 1, cols = 1;
        EXPECT_FAIL(uform_model_quantized_matrix(model, "blocks.0.mlp.up.weight", &rows, &cols, NULL,
                                                 NULL),
                    UFORM_INVALID_ARGUMENT, "BF16");
        uform_model_free(model);
    }
    options.quantization = UFORM_SCALAR_E4M3;
    model = NULL;
    CHECK_OK(uform_model_load_ram_buffer(bytes_a, size_a, &options, &model));
    if (model) {
        uform_model_description_t d;
        CHECK_OK(uform_model_describe(model, &d));
        CHECK(d.quantization == UFORM_SCALAR_E4M3);
        CHECK(d.memory_usage < bf16_bytes);
        size_t rows = 0, cols = 0;
        CHECK_OK(uform_model_quantized_matrix(model, "blocks.0.mlp.up.weight", &rows, &cols, NULL, NULL));
        CHECK(rows == 4 * d.hidden && cols == d.hidden);
        uint8_t *codes = malloc(rows * cols);
        float *scales = malloc(rows * sizeof(float));
        if (codes && scales) {
            CHECK_OK(uform_model_quantized_matrix(model, "blocks.0.mlp.up.weight", &rows, &cols, codes,
                                                  scales));
            bool powers = true;
            for (size_t i = 0; i < rows; i++) {
                int e;
                powers &= frexpf(scales[i], &e) == 0.5f;
            }
            CHECK(powers); /* the scales are powers of two */
            EXPECT_FAIL(uform_model_quantized_matrix(model, "blocks.0.mlp.up.weight", &rows, &cols,
                                                     codes, NULL),
                        UFORM_INVALID_ARGUMENT, "both");
        }
        free(codes);
        free(scales);
        EXPECT_FAIL(uform_model_quantized_matrix(model, "heads.embedding.weight", &rows, &cols, NULL,
                                                 NULL),
                    UFORM_INVALID_ARGUMENT, "heads.embedding.weight");
        EXPECT_FAIL(uform_model_quantized_matrix(model, "blocks.99.mlp.up.weight", &rows, &cols, NULL,
                                                 NULL),
                    UFORM_INVALID_ARGUMENT, "not a quantized matrix");
        EXPECT_FAIL(uform_model_quantized_matrix(model, NULL, &rows, &cols, NULL, NULL),
                    UFORM_INVALID_ARGUMENT, "name");
        uform_model_free(model);
    }
    options.quantization = UFORM_SCALAR_E5M2;
    model = (uform_model_t *)&model;
    EXPECT_FAIL(uform_model_load_ram_buffer(bytes_a, size_a, &options, &model), UFORM_INVALID_ARGUMENT,
                "not BF16 or E4M3");
    CHECK(model == NULL);
    options.quantization = (uform_scalar_t)99;
    model = (uform_model_t *)&model;
    EXPECT_FAIL(uform_model_load_ram(path_a, &options, &model), UFORM_INVALID_ARGUMENT,
                "quantization");
    CHECK(model == NULL);
}

static void test_vram(void) {
    uint32_t device = 0;
    uform_model_t *model = (uform_model_t *)&model;
    if (!gpus_visible()) {
        EXPECT_FAIL(uform_model_load_vram(path_a, &device, 1, UFORM_GPU_CLASS_NONE, NULL,
                                          UFORM_SCALAR_BF16, NULL, &model),
                    vram_refusal(), "load_vram");
        CHECK(model == NULL);
        model = (uform_model_t *)&model;
        EXPECT_FAIL(uform_model_load_vram_buffer(bytes_a, size_a, &device, 1, UFORM_GPU_CLASS_HOPPER,
                                                 NULL, UFORM_SCALAR_BF16, NULL, &model),
                    vram_refusal(), "load_vram_buffer");
        CHECK(model == NULL);
    }
    EXPECT_FAIL(uform_model_load_vram(path_a, NULL, 0, UFORM_GPU_CLASS_NONE, NULL, UFORM_SCALAR_BF16,
                                      NULL, NULL),
                UFORM_INVALID_ARGUMENT, "out-pointer");
    EXPECT_FAIL(uform_model_load_vram(NULL, NULL, 0, UFORM_GPU_CLASS_NONE, NULL, UFORM_SCALAR_BF16,
                                      NULL, &model),
                UFORM_INVALID_ARGUMENT, "path");
    EXPECT_FAIL(uform_model_load_vram_buffer(bytes_a, size_a, NULL, 2, UFORM_GPU_CLASS_NONE, NULL,
                                             UFORM_SCALAR_BF16, NULL, &model),
                UFORM_INVALID_ARGUMENT, "devices");
    CHECK(model == NULL);
}

/* uform_capabilities against what this program knows on its own: the loads
 * themselves (every class in the set loads pinned and describes itself so,
 * every other one answers UNSUPPORTED), the compiler's CPU detection
 * (cpu_runs), uform_media_formats and the VRAM calls. */
static void test_capabilities(void) {
    static const uform_cpu_class_t classes[] = {
        UFORM_CPU_CLASS_SERIAL,   UFORM_CPU_CLASS_HASWELL, UFORM_CPU_CLASS_SKYLAKE,
        UFORM_CPU_CLASS_SAPPHIRE, UFORM_CPU_CLASS_NEON,    UFORM_CPU_CLASS_SVE,
        UFORM_CPU_CLASS_NEON_BF16, UFORM_CPU_CLASS_SVE_BF16, UFORM_CPU_CLASS_AMX};
    EXPECT_FAIL(uform_capabilities(NULL), UFORM_INVALID_ARGUMENT, "capabilities");
    /* A successful call leaves the last failure's message alone. */
    char before[256];
    snprintf(before, sizeof(before), "%s", uform_last_error());
    uform_capabilities_t caps, again;
    memset(&caps, 0xa5, sizeof(caps));
    memset(&again, 0x5a, sizeof(again));
    CHECK_OK(uform_capabilities(&caps));
    CHECK(strcmp(uform_last_error(), before) == 0);
    CHECK_OK(uform_capabilities(&again));
    CHECK(caps.media_formats == again.media_formats && caps.cpu_classes == again.cpu_classes &&
          caps.best_cpu_class == again.best_cpu_class &&
          caps.gpu_backend_built == again.gpu_backend_built && caps.gpus == again.gpus);

    const uint32_t media = UFORM_MEDIA_JPEG | UFORM_MEDIA_PNG | UFORM_MEDIA_WEBP |
                           UFORM_MEDIA_VIDEO | UFORM_MEDIA_AUDIO | UFORM_MEDIA_MP3;
    CHECK(caps.media_formats == uform_media_formats());
    CHECK((caps.media_formats & ~media) == 0);

    CHECK(caps.cpu_classes & 1u << UFORM_CPU_CLASS_SERIAL);
    CHECK(!(caps.cpu_classes & 1u << UFORM_CPU_CLASS_AUTO));
    CHECK(caps.cpu_classes >> (UFORM_CPU_CLASS_AMX + 1) == 0);
    CHECK(caps.best_cpu_class != UFORM_CPU_CLASS_AUTO);
    CHECK((unsigned)caps.best_cpu_class <= UFORM_CPU_CLASS_AMX &&
          (caps.cpu_classes & 1u << caps.best_cpu_class));
    /* AMX, where it runs, is the automatic choice */
    CHECK((caps.best_cpu_class == UFORM_CPU_CLASS_AMX) ==
          ((caps.cpu_classes & 1u << UFORM_CPU_CLASS_AMX) != 0));
    for (size_t c = 0; c < sizeof(classes) / sizeof(classes[0]); c++) {
        bool listed = (caps.cpu_classes & 1u << classes[c]) != 0;
        int runs = cpu_runs(classes[c]);
        if (runs >= 0 && listed != (runs == 1))
            fprintf(stderr, "cpu class %d: listed %d, the compiler's detection says %d\n",
                    (int)classes[c], (int)listed, runs);
        CHECK(runs < 0 || listed == (runs == 1));
        uform_model_load_ram_options_t options = {NULL, 0, classes[c], NULL, UFORM_SCALAR_BF16,
                                                  {NULL, NULL, 0}};
        uform_model_t *model = (uform_model_t *)&model;
        uform_status_t status = uform_model_load_ram_buffer(bytes_a, size_a, &options, &model);
        if (!listed) {
            CHECK(status == UFORM_UNSUPPORTED);
            CHECK(model == NULL);
            continue;
        }
        CHECK_OK(status);
        if (status != UFORM_OK) continue;
        uform_model_description_t d;
        CHECK_OK(uform_model_describe(model, &d));
        CHECK(d.cpu_class == classes[c]);
        uform_model_free(model);
    }
    /* AUTO loads the best class. */
    uform_model_description_t d;
    CHECK_OK(uform_model_describe(model_a, &d));
    CHECK(d.cpu_class == caps.best_cpu_class);

    /* The VRAM calls agree with what is reported: without a GPU they fail. */
    CHECK(caps.gpu_backend_built || caps.gpus == 0);
    if (caps.gpus == 0) {
        uint32_t device = 0;
        uform_executor_t *executor = (uform_executor_t *)&executor;
        CHECK(uform_executor_for_vram(&device, 1, &executor) == vram_refusal());
        CHECK(executor == NULL);
    }
}

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

/* Stats, offsets, norms: what every encode of `texts` on `model` must show. */
static void check_output_shape(const output_t *out, const texts_t *texts, const spec_t *spec,
                               uint32_t outputs, uform_scalar_t scalar) {
    size_t D = spec->dimensions, W = spec->token_width, C = spec->context;
    size_t bytes_per[] = {4, 2, 2, 1, 1, 1, 0};
    size_t expected_row = scalar == UFORM_SCALAR_B1 ? (D + 7) / 8 : D * bytes_per[scalar];
    size_t expected_token_row = scalar == UFORM_SCALAR_B1 ? (W + 7) / 8 : W * bytes_per[scalar];
    CHECK(out->count == texts->count);
    CHECK(out->scalar == scalar);
    size_t tokens = 0, truncated = 0, empty = 0;
    for (size_t i = 0; i < texts->count; i++) {
        size_t length = texts->offsets[i + 1] - texts->offsets[i];
        tokens += min_size(length, C);
        truncated += length > C;
        empty += length == 0;
    }
    CHECK(out->stats.items == texts->count);
    CHECK(out->stats.tokens == tokens);
    CHECK(out->stats.truncated == truncated);
    CHECK(out->stats.empty == empty);
    if (outputs & UFORM_OUTPUTS_EMBEDDINGS) {
        CHECK(out->embeddings != NULL);
        CHECK(out->dimensions == D);
        CHECK(out->embedding_row_bytes == expected_row);
    } else {
        CHECK(out->embeddings == NULL);
    }
    if (outputs & UFORM_OUTPUTS_TOKENS) {
        CHECK(out->token_offsets != NULL);
        CHECK(out->token_width == W);
        CHECK(out->token_row_bytes == expected_token_row);
        if (out->token_offsets) {
            CHECK(out->token_offsets[0] == 0);
            bool ok = true;
            for (size_t i = 0; i < texts->count; i++) {
                size_t length = texts->offsets[i + 1] - texts->offsets[i];
                ok &= out->token_offsets[i + 1] - out->token_offsets[i] == min_size(length, C);
            }
            CHECK(ok);
            CHECK(out->token_offsets[texts->count] == tokens);
        }
    } else {
        CHECK(out->token_offsets == NULL);
        CHECK(out->tokens == NULL);
    }
    if (scalar != UFORM_SCALAR_F32) return;
    bool norms_ok = true;
    for (size_t i = 0; out->embeddings && i < texts->count; i++) {
        double norm = row_norm_f32(out->embeddings + i * out->embedding_row_bytes, D);
        bool empty_item = texts->offsets[i + 1] == texts->offsets[i];
        if (empty_item) {
            /* an empty text: a zero embedding, exactly */
            for (size_t j = 0; j < out->embedding_row_bytes; j++)
                norms_ok &= out->embeddings[i * out->embedding_row_bytes + j] == 0;
        } else {
            norms_ok &= fabs(norm - 1.0) < 1e-4;
        }
    }
    for (size_t r = 0; out->token_offsets && r < out->token_offsets[texts->count]; r++)
        norms_ok &= fabs(row_norm_f32(out->tokens + r * out->token_row_bytes, W) - 1.0) < 1e-4;
    CHECK(norms_ok);
}

/* `got` (any scalar) is `f32` (the F32 encode) converted as uform.h documents. */
static bool converted_rows_match(const uint8_t *f32, size_t rows, size_t width,
                                 uform_scalar_t scalar, const uint8_t *got, size_t row_bytes) {
    for (size_t r = 0; r < rows; r++) {
        const uint8_t *source = f32 + r * width * 4;
        const uint8_t *row = got + r * row_bytes;
        for (size_t i = 0; i < width; i++) {
            float x = f32_at(source, i);
            uint16_t bits;
            switch (scalar) {
            case UFORM_SCALAR_BF16: {
                memcpy(&bits, row + 2 * i, 2);
                if (bits != uform_f32_to_bf16(x)) return false;
                if (fabsf(uform_bf16_to_f32(bits) - x) > fabsf(x) * 0x1p-8f) return false;
                break;
            }
            case UFORM_SCALAR_F16: {
                memcpy(&bits, row + 2 * i, 2);
                if (fabsf(uform_f16_to_f32(bits) - x) > fabsf(x) * 0x1p-11f + 0x1p-25f) return false;
                break;
            }
            case UFORM_SCALAR_E4M3:
            case UFORM_SCALAR_E5M2: {
                /* test_fp8.c checks the conversion; here that it is the one applied,
                 * with no scale, and within half a quantum (3 or 2 mantissa bits;
                 * subnormal quanta 2^-9 and 2^-16) */
                bool e4m3 = scalar == UFORM_SCALAR_E4M3;
                uint8_t code = e4m3 ? uform_f64_to_e4m3((double)x) : uform_f64_to_e5m2((double)x);
                if (row[i] != code) return false;
                float back = e4m3 ? uform_e4m3_to_f32(row[i]) : uform_e5m2_to_f32(row[i]);
                if (fabsf(back - x) > fabsf(x) * (e4m3 ? 0x1p-4f : 0x1p-3f) + (e4m3 ? 0x1p-10f : 0x1p-17f))
                    return false;
                break;
            }
            case UFORM_SCALAR_I8: {
                long expected = lrintf(x * 127.0f);
                if (expected > 127) expected = 127;
                if (expected < -127) expected = -127;
                if ((int8_t)row[i] != expected) return false;
                break;
            }
            case UFORM_SCALAR_B1: {
                int bit = (row[i / 8] >> (7 - i % 8)) & 1;
                if (bit != (x > 0)) return false;
                break;
            }
            default: break;
            }
        }
        if (scalar == UFORM_SCALAR_B1 && width % 8) {
            /* padding bits of the last byte are zero */
            if (row[width / 8] & (0xffu >> (width % 8))) return false;
        }
    }
    return true;
}

static void test_encode_scalars(void) {
    check_output_shape(&reference_a, &texts_a, &spec_a, BOTH, UFORM_SCALAR_F32);
    check_output_shape(&reference_b, &texts_b, &spec_b, UFORM_OUTPUTS_EMBEDDINGS, UFORM_SCALAR_F32);
    static const uform_scalar_t scalars[] = {UFORM_SCALAR_BF16, UFORM_SCALAR_F16, UFORM_SCALAR_I8,
                                             UFORM_SCALAR_B1, UFORM_SCALAR_E4M3, UFORM_SCALAR_E5M2};
    for (size_t s = 0; s < sizeof(scalars) / sizeof(scalars[0]); s++) {
        output_t out;
        CHECK_OK(encode(model_a, NULL, &texts_a, BOTH, scalars[s], &out));
        check_output_shape(&out, &texts_a, &spec_a, BOTH, scalars[s]);
        if (out.embeddings && out.tokens) {
            CHECK(converted_rows_match(reference_a.embeddings, texts_a.count, spec_a.dimensions,
                                       scalars[s], out.embeddings, out.embedding_row_bytes));
            CHECK(converted_rows_match(reference_a.tokens, reference_a.token_offsets[texts_a.count],
                                       spec_a.token_width, scalars[s], out.tokens,
                                       out.token_row_bytes));
            /* empty texts: zero rows in every scalar (B1: no bits set) */
            for (size_t i = 0; i < texts_a.count; i++)
                if (texts_a.offsets[i + 1] == texts_a.offsets[i])
                    for (size_t j = 0; j < out.embedding_row_bytes; j++)
                        CHECK(out.embeddings[i * out.embedding_row_bytes + j] == 0);
        }
        output_free(&out);
    }

    /* One flag at a time; options NULL and outputs 0 mean F32 embeddings. */
    output_t out;
    CHECK_OK(encode(model_a, NULL, &texts_a, UFORM_OUTPUTS_TOKENS, UFORM_SCALAR_F32, &out));
    check_output_shape(&out, &texts_a, &spec_a, UFORM_OUTPUTS_TOKENS, UFORM_SCALAR_F32);
    if (out.tokens)
        CHECK(memcmp(out.tokens, reference_a.tokens,
                     reference_a.token_offsets[texts_a.count] * reference_a.token_row_bytes) == 0);
    output_free(&out);
    CHECK_OK(encode(model_a, NULL, &texts_a, 0, UFORM_SCALAR_F32, &out));
    check_output_shape(&out, &texts_a, &spec_a, UFORM_OUTPUTS_EMBEDDINGS, UFORM_SCALAR_F32);
    if (out.embeddings)
        CHECK(memcmp(out.embeddings, reference_a.embeddings,
                     texts_a.count * reference_a.embedding_row_bytes) == 0);
    output_free(&out);

    uform_arena_t *arena = NULL;
    CHECK_OK(uform_arena_init_ram(&arena));
    uform_tape_t tape = tape_of(&texts_a);
    uform_encoded_t encoded;
    CHECK_OK(uform_text_encode(model_a, NULL, &tape, arena, NULL, &encoded, NULL)); /* stats NULL */
    CHECK(encoded.embeddings != NULL && encoded.tokens == NULL && encoded.token_offsets == NULL);
    CHECK(encoded.scalar == UFORM_SCALAR_F32 && encoded.embedding_row_bytes == 4 * spec_a.dimensions);
    if (encoded.embeddings)
        CHECK(memcmp(encoded.embeddings, reference_a.embeddings,
                     texts_a.count * reference_a.embedding_row_bytes) == 0);

    /* Only empty texts, data NULL: zero embeddings, no token rows. */
    size_t offsets[4] = {0, 0, 0, 0};
    uform_tape_t empties = {NULL, 0, offsets, 3};
    uform_encode_options_t options = {BOTH, UFORM_SCALAR_F32, {NULL, NULL, 0}};
    uform_text_encode_stats_t stats;
    memset(&stats, 0xab, sizeof(stats));
    CHECK_OK(uform_text_encode(model_a, NULL, &empties, arena, &options, &encoded, &stats));
    CHECK(stats.items == 3 && stats.tokens == 0 && stats.truncated == 0 && stats.empty == 3);
    CHECK(encoded.count == 3 && encoded.token_offsets && encoded.token_offsets[3] == 0);
    for (size_t j = 0; encoded.embeddings && j < 3 * encoded.embedding_row_bytes; j++)
        CHECK(((uint8_t *)encoded.embeddings)[j] == 0);
    uform_arena_free(arena);
}

static void test_batch_equals_alone(void) {
    struct {
        uform_model_t *model;
        const texts_t *texts;
        const output_t *reference;
        uint32_t outputs;
    } cases[] = {{model_a, &texts_a, &reference_a, BOTH},
                 {model_b, &texts_b, &reference_b, UFORM_OUTPUTS_EMBEDDINGS}};
    for (size_t c = 0; c < 2; c++) {
        size_t mismatches = 0;
        for (size_t i = 0; i < cases[c].texts->count; i++) {
            texts_t alone = texts_slice(cases[c].texts, i, 1);
            output_t out;
            CHECK_OK(encode(cases[c].model, NULL, &alone, cases[c].outputs, UFORM_SCALAR_F32, &out));
            if (!item_equal(cases[c].reference, i, &out)) {
                if (mismatches++ < 5)
                    fprintf(stderr, "model %c: text %zu (%zu bytes) differs alone and in a batch\n",
                            (int)('a' + c), i, alone.size);
            }
            output_free(&out);
            texts_free(&alone);
        }
        CHECK(mismatches == 0);
    }
    /* A few windows of the batch too: items land at other rows. */
    for (size_t first = 3; first < 150; first += 49) {
        texts_t slice = texts_slice(&texts_a, first, 37);
        output_t out;
        CHECK_OK(encode(model_a, NULL, &slice, BOTH, UFORM_SCALAR_F32, &out));
        bool ok = out.embeddings != NULL;
        for (size_t i = 0; ok && i < slice.count; i++) {
            ok &= memcmp(out.embeddings + i * out.embedding_row_bytes,
                         reference_a.embeddings + (first + i) * reference_a.embedding_row_bytes,
                         out.embedding_row_bytes) == 0;
            size_t rows = out.token_offsets[i + 1] - out.token_offsets[i];
            ok &= memcmp(out.tokens + out.token_offsets[i] * out.token_row_bytes,
                         reference_a.tokens + reference_a.token_offsets[first + i] * out.token_row_bytes,
                         rows * out.token_row_bytes) == 0;
        }
        CHECK(ok);
        output_free(&out);
        texts_free(&slice);
    }
}

static void test_thread_counts(void) {
    size_t counts[] = {1, 3, 0};
    for (size_t t = 0; t < 3; t++) {
        uform_executor_t *executor = NULL;
        CHECK_OK(uform_executor_for_ram(counts[t], NULL, 0, &executor));
        if (!executor) continue;
        output_t out;
        CHECK_OK(encode(model_a, executor, &texts_a, BOTH, UFORM_SCALAR_F32, &out));
        CHECK(outputs_equal(&out, &reference_a));
        output_free(&out);
        CHECK_OK(encode(model_b, executor, &texts_b, UFORM_OUTPUTS_EMBEDDINGS, UFORM_SCALAR_F32, &out));
        CHECK(outputs_equal(&out, &reference_b));
        output_free(&out);
        uform_executor_free(executor);
    }
    /* A model loaded onto a one-thread executor gives the same bits too. */
    uform_executor_t *one = NULL;
    CHECK_OK(uform_executor_for_ram(1, NULL, 0, &one));
    uform_model_load_ram_options_t options = {NULL, 0, UFORM_CPU_CLASS_AUTO, one, UFORM_SCALAR_BF16,
                                              {NULL, NULL, 0}};
    uform_model_t *model = NULL;
    CHECK_OK(uform_model_load_ram(path_a, &options, &model));
    if (model) {
        output_t out;
        CHECK_OK(encode(model, NULL, &texts_a, BOTH, UFORM_SCALAR_F32, &out));
        CHECK(outputs_equal(&out, &reference_a));
        output_free(&out);
    }
    uform_model_free(model);
    uform_executor_free(one);
}

typedef struct {
    size_t calls, last_done, last_total;
    size_t cancel_at; /* 0: never */
    bool out_of_order; /* done went backwards, repeated, or passed total */
} progress_log_t;

static int record_progress(void *user, size_t done, size_t total) {
    progress_log_t *log = user;
    if (done > total || (log->calls && (done <= log->last_done || total != log->last_total)))
        log->out_of_order = true;
    log->calls++;
    log->last_done = done;
    log->last_total = total;
    return log->cancel_at && log->calls >= log->cancel_at;
}

static void test_progress(void) {
    /* Encoding: at most `steps` reports, the last done == total, each with a
     * larger done than the one before; a huge step count costs nothing extra. */
    size_t steps_list[] = {1, 3, 0, (size_t)1 << 20, SIZE_MAX};
    for (size_t s = 0; s < 5; s++) {
        progress_log_t log = {0};
        uform_encode_options_t options = {0, UFORM_SCALAR_F32, {record_progress, &log, steps_list[s]}};
        uform_arena_t *arena = NULL;
        CHECK_OK(uform_arena_init_ram(&arena));
        uform_tape_t tape = tape_of(&texts_b);
        uform_encoded_t encoded;
        CHECK_OK(uform_text_encode(model_b, NULL, &tape, arena, &options, &encoded, NULL));
        size_t steps = steps_list[s] ? steps_list[s] : 100;
        CHECK(log.calls >= 1 && log.calls <= steps && log.calls <= texts_b.count);
        CHECK(log.last_done == texts_b.count && log.last_total == texts_b.count);
        CHECK(!log.out_of_order);
        /* texts_b spans several forward batches: more than one report when allowed */
        if (steps > 1) CHECK(log.calls >= 2);
        if (encoded.embeddings)
            CHECK(memcmp(encoded.embeddings, reference_b.embeddings,
                         texts_b.count * reference_b.embedding_row_bytes) == 0);

        if (s != 1) {
            uform_arena_free(arena);
            continue;
        }
        /* Cancelled at the first report. */
        progress_log_t cancel = {0};
        cancel.cancel_at = 1;
        options.progress.user = &cancel;
        EXPECT_FAIL(uform_text_encode(model_b, NULL, &tape, arena, &options, &encoded, NULL),
                    UFORM_CANCELLED, "cancel");
        CHECK(cancel.calls == 1);
        /* and usable after */
        options.progress.callback = NULL;
        CHECK_OK(uform_text_encode(model_b, NULL, &tape, arena, &options, &encoded, NULL));
        if (encoded.embeddings)
            CHECK(memcmp(encoded.embeddings, reference_b.embeddings,
                         texts_b.count * reference_b.embedding_row_bytes) == 0);
        uform_arena_free(arena);
    }

    /* Loading: the same contract; cancelling leaves no model and no leak. */
    size_t load_steps[] = {5, 0, SIZE_MAX};
    for (size_t s = 0; s < 3; s++) {
        progress_log_t log = {0};
        uform_model_load_ram_options_t options = {NULL, 0, UFORM_CPU_CLASS_AUTO, NULL, UFORM_SCALAR_BF16,
                                                  {record_progress, &log, load_steps[s]}};
        uform_model_t *model = NULL;
        CHECK_OK(uform_model_load_ram(path_a, &options, &model));
        size_t steps = load_steps[s] ? load_steps[s] : 100;
        CHECK(log.calls >= 1 && log.calls <= steps && log.calls <= log.last_total);
        CHECK(log.last_total > 0 && log.last_done == log.last_total);
        CHECK(!log.out_of_order);
        uform_model_free(model);
        /* Cancelled at each report in turn, the last included. */
        for (size_t at = 1; at <= log.calls; at++) {
            progress_log_t cancel = {0};
            cancel.cancel_at = at;
            options.progress.user = &cancel;
            model = (uform_model_t *)&model;
            uform_status_t status = uform_model_load_ram_buffer(bytes_a, size_a, &options, &model);
            if (cancel.calls >= at) {
                EXPECT_FAIL(status, UFORM_CANCELLED, "cancel");
                CHECK(model == NULL);
            } else {
                CHECK(status == UFORM_OK);
                uform_model_free(model);
            }
        }
    }
}

static void test_bad_arguments(void) {
    uform_arena_t *arena = NULL;
    CHECK_OK(uform_arena_init_ram(&arena));
    uform_tape_t tape = tape_of(&texts_a);
    uform_encode_options_t options = {BOTH, UFORM_SCALAR_F32, {NULL, NULL, 0}};
    uform_encoded_t encoded;
    uform_text_encode_stats_t stats;

    EXPECT_FAIL(uform_text_encode(NULL, NULL, &tape, arena, &options, &encoded, &stats),
                UFORM_INVALID_ARGUMENT, "model");
    EXPECT_FAIL(uform_text_encode(model_a, NULL, &tape, NULL, &options, &encoded, &stats),
                UFORM_INVALID_ARGUMENT, "arena");
    EXPECT_FAIL(uform_text_encode(model_a, NULL, &tape, arena, &options, NULL, &stats),
                UFORM_INVALID_ARGUMENT, "encoded");
    EXPECT_FAIL(uform_text_encode(model_a, NULL, NULL, arena, &options, &encoded, &stats),
                UFORM_INVALID_ARGUMENT, "texts");

    uform_tape_t bad = tape;
    bad.count = 0;
    EXPECT_FAIL(uform_text_encode(model_a, NULL, &bad, arena, &options, &encoded, &stats),
                UFORM_INVALID_ARGUMENT, "empty");
    bad = tape;
    bad.offsets = NULL;
    EXPECT_FAIL(uform_text_encode(model_a, NULL, &bad, arena, &options, &encoded, &stats),
                UFORM_INVALID_ARGUMENT, "offsets");

    size_t *offsets = malloc(4 * sizeof(size_t));
    if (!offsets) abort();
    uint8_t *data = malloc(10);
    if (!data) abort();
    memset(data, 'x', 10);
    offsets[0] = 0, offsets[1] = 6, offsets[2] = 3, offsets[3] = 10;
    bad = (uform_tape_t){data, 10, offsets, 3};
    EXPECT_FAIL(uform_text_encode(model_a, NULL, &bad, arena, &options, &encoded, &stats),
                UFORM_INVALID_ARGUMENT, "decrease");
    offsets[0] = 0, offsets[1] = 3, offsets[2] = 6, offsets[3] = 11;
    EXPECT_FAIL(uform_text_encode(model_a, NULL, &bad, arena, &options, &encoded, &stats),
                UFORM_INVALID_ARGUMENT, "past");
    offsets[3] = (size_t)-1;
    EXPECT_FAIL(uform_text_encode(model_a, NULL, &bad, arena, &options, &encoded, &stats),
                UFORM_INVALID_ARGUMENT, "offset");
    offsets[3] = 10;
    bad.data = NULL;
    EXPECT_FAIL(uform_text_encode(model_a, NULL, &bad, arena, &options, &encoded, &stats),
                UFORM_INVALID_ARGUMENT, "NULL");
    bad.data = data;
    CHECK_OK(uform_text_encode(model_a, NULL, &bad, arena, &options, &encoded, &stats));
    CHECK(stats.items == 3 && stats.tokens == 10);

    uform_encode_options_t wrong = options;
    wrong.outputs = 8;
    EXPECT_FAIL(uform_text_encode(model_a, NULL, &tape, arena, &wrong, &encoded, &stats),
                UFORM_INVALID_ARGUMENT, "flags");
    wrong.outputs = UFORM_OUTPUTS_EMBEDDINGS | 8;
    EXPECT_FAIL(uform_text_encode(model_a, NULL, &tape, arena, &wrong, &encoded, &stats),
                UFORM_INVALID_ARGUMENT, "outputs");
    wrong = options;
    wrong.outputs_scalar = (uform_scalar_t)99;
    EXPECT_FAIL(uform_text_encode(model_a, NULL, &tape, arena, &wrong, &encoded, &stats),
                UFORM_INVALID_ARGUMENT, "outputs_scalar");
    wrong.outputs_scalar = (uform_scalar_t)7; /* one past B1 */
    EXPECT_FAIL(uform_text_encode(model_a, NULL, &tape, arena, &wrong, &encoded, &stats),
                UFORM_INVALID_ARGUMENT, "outputs_scalar");
    wrong.outputs_scalar = (uform_scalar_t)-1;
    EXPECT_FAIL(uform_text_encode(model_a, NULL, &tape, arena, &wrong, &encoded, &stats),
                UFORM_INVALID_ARGUMENT, "outputs_scalar");
    uform_tape_t tape_b = tape_of(&texts_b);
    EXPECT_FAIL(uform_text_encode(model_b, NULL, &tape_b, arena, &options, &encoded, &stats),
                UFORM_UNSUPPORTED, "token head");
    wrong = options;
    wrong.outputs = UFORM_OUTPUTS_TOKENS;
    EXPECT_FAIL(uform_text_encode(model_b, NULL, &tape_b, arena, &wrong, &encoded, &stats),
                UFORM_UNSUPPORTED, "TOKENS");

    /* Everything still works, bit for bit. */
    CHECK_OK(uform_text_encode(model_a, NULL, &tape, arena, &options, &encoded, &stats));
    output_t out;
    output_take(&out, &encoded, &stats);
    CHECK(outputs_equal(&out, &reference_a));
    output_free(&out);
    wrong.outputs = UFORM_OUTPUTS_EMBEDDINGS;
    CHECK_OK(uform_text_encode(model_b, NULL, &tape_b, arena, &wrong, &encoded, &stats));
    output_take(&out, &encoded, &stats);
    CHECK(outputs_equal(&out, &reference_b));
    output_free(&out);

    free(offsets);
    free(data);
    uform_arena_free(arena);
}

static void test_bad_files(void) {
    uform_model_t *model = (uform_model_t *)&model;
    const char *missing = "/tmp/uform-test-api-no-such-dir/missing.safetensors";
    EXPECT_FAIL(uform_model_load_ram(missing, NULL, &model), UFORM_FILE, missing);
    CHECK(model == NULL);

    char directory[] = "/tmp/uform-test-api-dir-XXXXXX";
    if (mkdtemp(directory)) {
        model = (uform_model_t *)&model;
        EXPECT_FAIL(uform_model_load_ram(directory, NULL, &model), UFORM_FILE, directory);
        CHECK(model == NULL);
        rmdir(directory);
    } else {
        perror("mkdtemp");
        checks_failed++;
    }

    /* Truncated buffers, each an exact heap block: FORMAT at every length. */
    size_t lengths[400], count = 0;
    for (size_t n = 0; n <= 80 && n < size_a; n++) lengths[count++] = n;
    uint64_t header = 0;
    for (int i = 0; i < 8; i++) header |= (uint64_t)bytes_a[i] << (8 * i);
    for (size_t n = 8 + header - 40; n <= 8 + header + 40; n += 3) lengths[count++] = n;
    for (size_t k = 1; k < 200; k++) lengths[count++] = (size_t)((double)size_a * k / 200);
    lengths[count++] = size_a - 1;
    lengths[count++] = size_a - 2;
    size_t wrong = 0;
    for (size_t i = 0; i < count; i++) {
        size_t n = lengths[i];
        if (n >= size_a) continue;
        uint8_t *cut = copy_of(bytes_a, n);
        model = (uform_model_t *)&model;
        uform_status_t status = uform_model_load_ram_buffer(cut, n, NULL, &model);
        if (status != UFORM_FORMAT || model != NULL || !uform_last_error()[0]) {
            if (wrong++ < 5)
                fprintf(stderr, "truncated at %zu of %zu: status %d: %s\n", n, size_a, (int)status,
                        uform_last_error());
            if (status == UFORM_OK) uform_model_free(model);
        }
        free(cut);
    }
    CHECK(wrong == 0);
    model = (uform_model_t *)&model;
    EXPECT_FAIL(uform_model_load_ram_buffer(NULL, 0, NULL, &model), UFORM_FORMAT, NULL);
    CHECK(model == NULL);

    /* A truncated file: FORMAT naming the path. */
    const char *cut_path = temporary_path();
    FILE *stream = fopen(cut_path, "wb");
    if (stream) {
        fwrite(bytes_a, 1, size_a / 2, stream);
        fclose(stream);
    }
    model = (uform_model_t *)&model;
    EXPECT_FAIL(uform_model_load_ram(cut_path, NULL, &model), UFORM_FORMAT, cut_path);
    CHECK(model == NULL);
    /* An empty file. */
    stream = fopen(cut_path, "wb");
    if (stream) fclose(stream);
    model = (uform_model_t *)&model;
    EXPECT_FAIL(uform_model_load_ram(cut_path, NULL, &model), UFORM_FORMAT, NULL);
    CHECK(model == NULL);

    /* Non-finite weights: FORMAT naming the tensor, from a file and a buffer. */
    struct {
        const char *tensor;
        float value;
    } poisons[] = {{"blocks.1.mlp.up.weight", NAN},
                   {"norm.bias", INFINITY},
                   {"text.bytes", -INFINITY},
                   {"heads.tokens.weight", NAN}};
    for (size_t p = 0; p < 4; p++) {
        spec_t spec = spec_a;
        spec.poison = poisons[p].tensor;
        spec.poison_value = poisons[p].value;
        const char *path = temporary_path();
        CHECK(write_checkpoint(path, &spec));
        model = (uform_model_t *)&model;
        EXPECT_FAIL(uform_model_load_ram(path, NULL, &model), UFORM_FORMAT, poisons[p].tensor);
        CHECK(model == NULL);
        size_t size = 0;
        uint8_t *bytes = read_whole(path, &size);
        model = (uform_model_t *)&model;
        EXPECT_FAIL(uform_model_load_ram_buffer(bytes, size, NULL, &model), UFORM_FORMAT,
                    poisons[p].tensor);
        CHECK(model == NULL);
        free(bytes);
    }

    /* The models in use are unaffected. */
    output_t out;
    CHECK_OK(encode(model_a, NULL, &texts_a, BOTH, UFORM_SCALAR_F32, &out));
    CHECK(outputs_equal(&out, &reference_a));
    output_free(&out);
}

/* ---- submission -------------------------------------------------------------------- */

typedef struct {
    texts_t texts;
    uform_tape_t tape;
    uform_arena_t *arena;
    uform_encode_options_t options;
    uform_encoded_t encoded;
    uform_text_encode_stats_t stats;
    uform_job_t *job;
    output_t expected;
} submission_t;

static void submission_init(submission_t *s, uform_model_t *model, const texts_t *source,
                            size_t first, size_t count, uint32_t outputs, uform_scalar_t scalar) {
    memset(s, 0, sizeof(*s));
    s->texts = texts_slice(source, first, count);
    s->tape = tape_of(&s->texts);
    if (uform_arena_init_ram(&s->arena) != UFORM_OK) abort();
    s->options = (uform_encode_options_t){outputs, scalar, {NULL, NULL, 0}};
    CHECK_OK(encode(model, NULL, &s->texts, outputs, scalar, &s->expected));
}

static bool submission_matches(submission_t *s) {
    output_t out;
    output_take(&out, &s->encoded, &s->stats);
    bool ok = outputs_equal(&out, &s->expected) && s->stats.items == s->texts.count &&
              s->stats.tokens == s->expected.stats.tokens;
    output_free(&out);
    return ok;
}

static void submission_free(submission_t *s) {
    uform_job_free(s->job);
    uform_arena_free(s->arena);
    output_free(&s->expected);
    texts_free(&s->texts);
}

static void test_submission(void) {
    uform_executor_t *executor = NULL;
    CHECK_OK(uform_executor_for_ram(2, NULL, 0, &executor));
    if (!executor) return;
    static const uform_scalar_t scalars[] = {UFORM_SCALAR_F32, UFORM_SCALAR_BF16, UFORM_SCALAR_I8,
                                             UFORM_SCALAR_B1, UFORM_SCALAR_F16, UFORM_SCALAR_F32};
    submission_t jobs[6];
    for (size_t j = 0; j < 6; j++)
        submission_init(&jobs[j], model_a, &texts_a, 20 * j, 30 + 10 * j, BOTH, scalars[j]);
    for (size_t j = 0; j < 6; j++) {
        submission_t *s = &jobs[j];
        CHECK_OK(uform_text_encode_submit(model_a, executor, &s->tape, s->arena, &s->options,
                                          &s->encoded, &s->stats, &s->job));
        CHECK(s->job != NULL);
    }
    /* Waited out of order; polled in between. */
    for (size_t k = 0; k < 6; k++) {
        submission_t *s = &jobs[(k * 5) % 6];
        CHECK_OK(uform_job_wait(s->job));
        CHECK(uform_job_done(s->job) == 1);
        CHECK_OK(uform_job_wait(s->job)); /* waiting twice answers the same */
        CHECK(submission_matches(s));
    }
    for (size_t j = 0; j < 6; j++) submission_free(&jobs[j]);

    /* The model's own executor (NULL), polled to completion, freed without a wait. */
    submission_t s;
    submission_init(&s, model_b, &texts_b, 0, 60, UFORM_OUTPUTS_EMBEDDINGS, UFORM_SCALAR_F32);
    CHECK_OK(uform_text_encode_submit(model_b, NULL, &s.tape, s.arena, &s.options, &s.encoded,
                                      &s.stats, &s.job));
    for (int spins = 0; s.job && !uform_job_done(s.job) && spins < 60000; spins++) {
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
    }
    CHECK(uform_job_done(s.job) == 1);
    CHECK(submission_matches(&s));
    submission_free(&s);

    /* Options NULL and stats NULL. */
    submission_init(&s, model_a, &texts_a, 50, 20, UFORM_OUTPUTS_EMBEDDINGS, UFORM_SCALAR_F32);
    CHECK_OK(uform_text_encode_submit(model_a, executor, &s.tape, s.arena, NULL, &s.encoded, NULL,
                                      &s.job));
    CHECK_OK(uform_job_wait(s.job));
    output_t out;
    output_take(&out, &s.encoded, NULL);
    CHECK(out.embeddings && memcmp(out.embeddings, s.expected.embeddings,
                                   s.texts.count * s.expected.embedding_row_bytes) == 0);
    output_free(&out);
    submission_free(&s);

    /* Argument errors of submit itself. */
    uform_job_t *job = (uform_job_t *)&job;
    uform_tape_t tape = tape_of(&texts_a);
    uform_arena_t *arena = NULL;
    uform_encoded_t encoded;
    CHECK_OK(uform_arena_init_ram(&arena));
    EXPECT_FAIL(uform_text_encode_submit(model_a, executor, &tape, arena, NULL, &encoded, NULL, NULL),
                UFORM_INVALID_ARGUMENT, "job");
    EXPECT_FAIL(uform_text_encode_submit(NULL, executor, &tape, arena, NULL, &encoded, NULL, &job),
                UFORM_INVALID_ARGUMENT, "model");
    CHECK(job == NULL);
    job = (uform_job_t *)&job;
    EXPECT_FAIL(uform_text_encode_submit(model_a, executor, NULL, arena, NULL, &encoded, NULL, &job),
                UFORM_INVALID_ARGUMENT, "texts");
    CHECK(job == NULL);
    EXPECT_FAIL(uform_job_wait(NULL), UFORM_INVALID_ARGUMENT, "job");
    CHECK(uform_job_done(NULL) == 1);
    uform_job_free(NULL);
    uform_arena_free(arena);
    uform_executor_free(executor);
}

static void test_submission_failures(void) {
    uform_executor_t *executor = NULL;
    CHECK_OK(uform_executor_for_ram(2, NULL, 0, &executor));
    if (!executor) return;
    uform_arena_t *arena = NULL;
    CHECK_OK(uform_arena_init_ram(&arena));
    uform_encoded_t encoded;
    uform_text_encode_stats_t stats;

    /* An empty batch: the job fails; its message reaches the waiter. */
    uform_tape_t empty = tape_of(&texts_a);
    empty.count = 0;
    uform_job_t *failing = NULL;
    CHECK_OK(uform_text_encode_submit(model_a, executor, &empty, arena, NULL, &encoded, &stats,
                                      &failing));
    /* TOKENS on a model without a token head (its own arena: a queued job
     * holds its arena from submission on). A NULL arena is refused at once. */
    uform_tape_t tape_b = tape_of(&texts_b);
    uform_encode_options_t tokens = {UFORM_OUTPUTS_TOKENS, UFORM_SCALAR_F32, {NULL, NULL, 0}};
    uform_job_t *unsupported = NULL;
    uform_arena_t *arena3 = NULL;
    CHECK_OK(uform_arena_init_ram(&arena3));
    uform_encoded_t encoded3;
    CHECK_OK(uform_text_encode_submit(model_b, executor, &tape_b, arena3, &tokens, &encoded3, &stats,
                                      &unsupported));
    uform_job_t *no_arena = (uform_job_t *)&no_arena;
    uform_tape_t tape_a = tape_of(&texts_a);
    EXPECT_FAIL(uform_text_encode_submit(model_a, executor, &tape_a, NULL, NULL, &encoded, &stats,
                                         &no_arena),
                UFORM_INVALID_ARGUMENT, "arena");
    CHECK(no_arena == NULL);
    /* A cancelled one. */
    progress_log_t cancel = {0};
    cancel.cancel_at = 1;
    uform_encode_options_t cancelling = {0, UFORM_SCALAR_F32, {record_progress, &cancel, 4}};
    uform_arena_t *arena2 = NULL;
    CHECK_OK(uform_arena_init_ram(&arena2));
    uform_encoded_t encoded2;
    uform_job_t *cancelled = NULL;
    CHECK_OK(uform_text_encode_submit(model_a, executor, &tape_a, arena2, &cancelling, &encoded2,
                                      NULL, &cancelled));

    /* This thread's own last error says something else before each wait. */
    EXPECT_FAIL(uform_executor_threads(NULL, NULL), UFORM_INVALID_ARGUMENT, "executor_threads");
    EXPECT_FAIL(uform_job_wait(failing), UFORM_INVALID_ARGUMENT, "empty");
    EXPECT_FAIL(uform_job_wait(failing), UFORM_INVALID_ARGUMENT, "texts");
    EXPECT_FAIL(uform_executor_threads(NULL, NULL), UFORM_INVALID_ARGUMENT, "executor_threads");
    EXPECT_FAIL(uform_job_wait(unsupported), UFORM_UNSUPPORTED, "token head");
    EXPECT_FAIL(uform_executor_threads(NULL, NULL), UFORM_INVALID_ARGUMENT, "executor_threads");
    EXPECT_FAIL(uform_job_wait(cancelled), UFORM_CANCELLED, "cancel");
    CHECK(uform_job_done(failing) && uform_job_done(unsupported) && uform_job_done(cancelled));
    uform_job_free(failing);
    uform_job_free(unsupported);
    uform_job_free(cancelled);
    /* Each failed job gave its arena back. */
    CHECK_OK(uform_arena_reset(arena));
    CHECK_OK(uform_arena_reset(arena2));
    CHECK_OK(uform_arena_reset(arena3));

    /* The executor still runs good jobs after failed ones. */
    submission_t s;
    submission_init(&s, model_a, &texts_a, 0, 25, BOTH, UFORM_SCALAR_F32);
    CHECK_OK(uform_text_encode_submit(model_a, executor, &s.tape, s.arena, &s.options, &s.encoded,
                                      &s.stats, &s.job));
    CHECK_OK(uform_job_wait(s.job));
    CHECK(submission_matches(&s));
    submission_free(&s);

    uform_arena_free(arena);
    uform_arena_free(arena2);
    uform_arena_free(arena3);
    uform_executor_free(executor);
}

/* A queued job holds its arena from submission on: a call into that arena
 * while the job waits in the queue is refused, and would otherwise have its
 * results overwritten when the job runs (reliability item 5). */
static void test_submission_holds_arena(void) {
    uform_executor_t *executor = NULL;
    CHECK_OK(uform_executor_for_ram(2, NULL, 0, &executor));
    if (!executor) return;
    submission_t first, queued;
    submission_init(&first, model_a, &texts_a, 0, 200, BOTH, UFORM_SCALAR_F32);
    submission_init(&queued, model_b, &texts_b, 0, 40, UFORM_OUTPUTS_EMBEDDINGS, UFORM_SCALAR_F32);
    CHECK_OK(uform_text_encode_submit(model_a, executor, &first.tape, first.arena, &first.options,
                                      &first.encoded, &first.stats, &first.job));
    CHECK_OK(uform_text_encode_submit(model_b, executor, &queued.tape, queued.arena, &queued.options,
                                      &queued.encoded, &queued.stats, &queued.job));
    /* Whether the queued job has started or not, its arena is taken. */
    uform_encoded_t encoded;
    uform_tape_t tape = tape_of(&texts_b);
    if (!uform_job_done(queued.job))
        EXPECT_FAIL(uform_text_encode(model_b, NULL, &tape, queued.arena, NULL, &encoded, NULL),
                    UFORM_INVALID_ARGUMENT, "in use");
    uform_job_t *again = (uform_job_t *)&again;
    if (!uform_job_done(queued.job)) {
        EXPECT_FAIL(uform_text_encode_submit(model_b, executor, &tape, queued.arena, NULL, &encoded,
                                             NULL, &again),
                    UFORM_INVALID_ARGUMENT, "in use");
        CHECK(again == NULL);
    }
    CHECK_OK(uform_job_wait(first.job));
    CHECK_OK(uform_job_wait(queued.job));
    CHECK(submission_matches(&first));
    CHECK(submission_matches(&queued));
    /* Given back once the job has run. */
    CHECK_OK(uform_text_encode(model_b, NULL, &tape, queued.arena, NULL, &encoded, NULL));
    submission_free(&first);
    submission_free(&queued);
    uform_executor_free(executor);
}

/* A progress handler of a deferred call runs on the submission thread: a wait
 * there for another job of the same executor would never end (that job is
 * queued behind the running one), so it is refused; freeing such a job there
 * hands it to the submission thread (reliability item 4). */
typedef struct {
    uform_executor_t *executor;
    submission_t *inner;
    uform_status_t wait_status;
    char message[512];
    bool submitted, freed_inner_job;
} waiting_handler_t;

static int wait_in_handler(void *user, size_t done, size_t total) {
    (void)done, (void)total;
    waiting_handler_t *h = user;
    if (h->submitted) return 0;
    h->submitted = true;
    submission_t *s = h->inner;
    if (uform_text_encode_submit(model_b, h->executor, &s->tape, s->arena, &s->options, &s->encoded,
                                 &s->stats, &s->job) != UFORM_OK)
        return 1;
    h->wait_status = uform_job_wait(s->job);
    snprintf(h->message, sizeof(h->message), "%s", uform_last_error());
    return 0;
}

static int free_in_handler(void *user, size_t done, size_t total) {
    (void)done, (void)total;
    waiting_handler_t *h = user;
    if (h->submitted) return 0;
    h->submitted = true;
    submission_t *s = h->inner;
    if (uform_text_encode_submit(model_b, h->executor, &s->tape, s->arena, &s->options, &s->encoded,
                                 &s->stats, &s->job) != UFORM_OK)
        return 1;
    uform_job_free(s->job); /* pending: the submission thread frees it after it runs */
    s->job = NULL;
    h->freed_inner_job = true;
    return 0;
}

static void test_wait_on_submission_thread(void) {
    uform_executor_t *executor = NULL;
    CHECK_OK(uform_executor_for_ram(2, NULL, 0, &executor));
    if (!executor) return;
    for (int freeing = 0; freeing <= 1; freeing++) {
        submission_t outer, inner;
        submission_init(&outer, model_a, &texts_a, 0, 100, BOTH, UFORM_SCALAR_F32);
        submission_init(&inner, model_b, &texts_b, 0, 30, UFORM_OUTPUTS_EMBEDDINGS, UFORM_SCALAR_F32);
        waiting_handler_t handler = {executor, &inner, UFORM_OK, "", false, false};
        outer.options.progress = (uform_progress_t){freeing ? free_in_handler : wait_in_handler, &handler, 4};
        CHECK_OK(uform_text_encode_submit(model_a, executor, &outer.tape, outer.arena, &outer.options,
                                          &outer.encoded, &outer.stats, &outer.job));
        CHECK_OK(uform_job_wait(outer.job)); /* returns: no deadlock */
        CHECK(submission_matches(&outer));
        CHECK(handler.submitted);
        if (freeing) {
            CHECK(handler.freed_inner_job);
            uform_executor_free(executor); /* drains the queue, the orphaned job included */
            executor = NULL;
            CHECK_OK(uform_executor_for_ram(2, NULL, 0, &executor));
            CHECK(submission_matches(&inner));
        } else {
            CHECK(handler.wait_status == UFORM_INVALID_ARGUMENT);
            CHECK(strstr(handler.message, "submission thread") != NULL);
            CHECK_OK(uform_job_wait(inner.job)); /* from here it can be waited for */
            CHECK(submission_matches(&inner));
        }
        submission_free(&outer);
        submission_free(&inner);
        if (!executor) return;
    }
    uform_executor_free(executor);
}

static void test_executor_free_with_queue(void) {
    /* Jobs queued on an executor freed at once: the free waits for them. */
    for (size_t threads = 1; threads <= 2; threads++) {
        uform_executor_t *executor = NULL;
        CHECK_OK(uform_executor_for_ram(threads, NULL, 0, &executor));
        if (!executor) return;
        submission_t jobs[4];
        for (size_t j = 0; j < 4; j++)
            submission_init(&jobs[j], j % 2 ? model_b : model_a, j % 2 ? &texts_b : &texts_a, 10 * j,
                            80, j % 2 ? UFORM_OUTPUTS_EMBEDDINGS : BOTH, UFORM_SCALAR_F32);
        for (size_t j = 0; j < 4; j++) {
            submission_t *s = &jobs[j];
            CHECK_OK(uform_text_encode_submit(j % 2 ? model_b : model_a, executor, &s->tape, s->arena,
                                              &s->options, &s->encoded, &s->stats, &s->job));
        }
        uform_executor_free(executor);
        for (size_t j = 0; j < 4; j++) {
            CHECK(uform_job_done(jobs[j].job) == 1);
            CHECK_OK(uform_job_wait(jobs[j].job));
            CHECK(submission_matches(&jobs[j]));
        }
        /* Jobs freed after their executor. */
        for (size_t j = 0; j < 4; j++) submission_free(&jobs[j]);
    }

    /* A job freed unwaited while it may still be queued: the free waits. */
    uform_executor_t *executor = NULL;
    CHECK_OK(uform_executor_for_ram(2, NULL, 0, &executor));
    if (!executor) return;
    submission_t s[2];
    submission_init(&s[0], model_b, &texts_b, 0, 120, UFORM_OUTPUTS_EMBEDDINGS, UFORM_SCALAR_F32);
    submission_init(&s[1], model_a, &texts_a, 0, 120, BOTH, UFORM_SCALAR_F32);
    CHECK_OK(uform_text_encode_submit(model_b, executor, &s[0].tape, s[0].arena, &s[0].options,
                                      &s[0].encoded, &s[0].stats, &s[0].job));
    CHECK_OK(uform_text_encode_submit(model_a, executor, &s[1].tape, s[1].arena, &s[1].options,
                                      &s[1].encoded, &s[1].stats, &s[1].job));
    uform_job_free(s[1].job);
    s[1].job = NULL;
    CHECK(uform_job_done(s[0].job) == 1);
    CHECK(submission_matches(&s[1]));
    CHECK_OK(uform_job_wait(s[0].job));
    CHECK(submission_matches(&s[0]));
    submission_free(&s[0]);
    submission_free(&s[1]);
    uform_executor_free(executor);
}

/* ---- concurrency --------------------------------------------------------------------- */

typedef struct {
    uform_executor_t *executor;  /* NULL: the model's */
    size_t rounds_ok, rounds;
    bool error_empty_at_start;
    uform_status_t status;
    char message[256];
} worker_t;

static void *encode_worker(void *argument) {
    worker_t *worker = argument;
    worker->error_empty_at_start = uform_last_error()[0] == '\0';
    uform_arena_t *arena = NULL;
    worker->status = uform_arena_init_ram(&arena);
    uform_tape_t tape = tape_of(&texts_a);
    uform_encode_options_t options = {BOTH, UFORM_SCALAR_F32, {NULL, NULL, 0}};
    for (size_t round = 0; round < worker->rounds && worker->status == UFORM_OK; round++) {
        uform_encoded_t encoded;
        uform_text_encode_stats_t stats;
        worker->status =
            uform_text_encode(model_a, worker->executor, &tape, arena, &options, &encoded, &stats);
        if (worker->status != UFORM_OK) {
            snprintf(worker->message, sizeof(worker->message), "%s", uform_last_error());
            break;
        }
        output_t out;
        output_take(&out, &encoded, &stats);
        worker->rounds_ok += outputs_equal(&out, &reference_a);
        output_free(&out);
        /* and a failing call on this thread: its message stays on this thread */
        uform_tape_t empty = tape;
        empty.count = 0;
        if (uform_text_encode(model_a, worker->executor, &empty, arena, &options, &encoded, &stats) !=
                UFORM_INVALID_ARGUMENT ||
            !strstr(uform_last_error(), "empty"))
            worker->rounds_ok = 0;
    }
    uform_arena_free(arena);
    return NULL;
}

static void test_concurrent_encode(void) {
    uform_executor_t *shared = NULL;
    CHECK_OK(uform_executor_for_ram(3, NULL, 0, &shared));
    pthread_t threads[4];
    worker_t workers[4];
    memset(workers, 0, sizeof(workers));
    /* The main thread has an error set; the workers must not see it. */
    EXPECT_FAIL(uform_arena_reset(NULL), UFORM_INVALID_ARGUMENT, "arena");
    for (size_t t = 0; t < 4; t++) {
        workers[t].executor = t < 2 ? NULL : shared;
        workers[t].rounds = 3;
        CHECK(pthread_create(&threads[t], NULL, encode_worker, &workers[t]) == 0);
    }
    for (size_t t = 0; t < 4; t++) {
        pthread_join(threads[t], NULL);
        if (workers[t].status != UFORM_OK)
            fprintf(stderr, "worker %zu: status %d: %s\n", t, (int)workers[t].status,
                    workers[t].message);
        CHECK(workers[t].status == UFORM_OK);
        CHECK(workers[t].rounds_ok == workers[t].rounds);
        CHECK(workers[t].error_empty_at_start);
    }
    CHECK(strstr(uform_last_error(), "arena") != NULL);
    uform_executor_free(shared);
}

/* ---- main ---------------------------------------------------------------------------- */

static bool setup(void) {
    path_a = temporary_path();
    path_b = temporary_path();
    if (!write_checkpoint(path_a, &spec_a) || !write_checkpoint(path_b, &spec_b)) return false;
    bytes_a = read_whole(path_a, &size_a);
    if (uform_model_load_ram(path_a, NULL, &model_a) != UFORM_OK ||
        uform_model_load_ram(path_b, NULL, &model_b) != UFORM_OK) {
        fprintf(stderr, "setup: loading: %s\n", uform_last_error());
        return false;
    }
    texts_a = make_texts(0xa11ce, 200, spec_a.context);
    texts_b = make_texts(0xb0b, 200, spec_b.context);
    if (encode(model_a, NULL, &texts_a, BOTH, UFORM_SCALAR_F32, &reference_a) != UFORM_OK ||
        encode(model_b, NULL, &texts_b, UFORM_OUTPUTS_EMBEDDINGS, UFORM_SCALAR_F32, &reference_b) !=
            UFORM_OK) {
        fprintf(stderr, "setup: encoding: %s\n", uform_last_error());
        return false;
    }
    return true;
}

static void teardown(void) {
    output_free(&reference_a);
    output_free(&reference_b);
    texts_free(&texts_a);
    texts_free(&texts_b);
    uform_model_free(model_a);
    uform_model_free(model_b);
    free(bytes_a);
    for (size_t i = 0; i < temporary_count; i++) unlink(temporary_paths[i]);
}

int main(int argc, char **argv) {
    /* Arguments run only the tests whose names contain one of them. */
    /* Before anything failed, this thread's message is empty. */
    int fresh = uform_last_error()[0] == '\0';
    int passed = 0, failed = 0;
    if (!fresh) {
        fprintf(stderr, "FAIL last_error is not empty at start\n");
        failed++;
    }
    if (!setup()) {
        teardown();
        printf("%d passed, %d failed\n", passed, failed + 1);
        return 1;
    }
    struct {
        const char *name;
        void (*run)(void);
    } tests[] = {
        {"version_and_errors", test_version_and_errors},
        {"executors", test_executors},
        {"arenas", test_arenas},
        {"load_and_describe", test_load_and_describe},
        {"cpu_classes", test_cpu_classes},
        {"quantization", test_quantization},
        {"vram", test_vram},
        {"capabilities", test_capabilities},
        {"encode_scalars", test_encode_scalars},
        {"batch_equals_alone", test_batch_equals_alone},
        {"thread_counts", test_thread_counts},
        {"progress", test_progress},
        {"bad_arguments", test_bad_arguments},
        {"bad_files", test_bad_files},
        {"submission", test_submission},
        {"submission_failures", test_submission_failures},
        {"submission_holds_arena", test_submission_holds_arena},
        {"wait_on_submission_thread", test_wait_on_submission_thread},
        {"executor_free_with_queue", test_executor_free_with_queue},
        {"concurrent_encode", test_concurrent_encode},
    };
    size_t count = sizeof(tests) / sizeof(tests[0]);
    for (size_t i = 0; i < count; i++) {
        bool wanted = argc < 2;
        for (int a = 1; a < argc; a++) wanted |= strstr(tests[i].name, argv[a]) != NULL;
        if (!wanted) continue;
        checks_failed = 0;
        struct timespec start, end;
        clock_gettime(CLOCK_MONOTONIC, &start);
        tests[i].run();
        clock_gettime(CLOCK_MONOTONIC, &end);
        double seconds = (double)(end.tv_sec - start.tv_sec) + 1e-9 * (double)(end.tv_nsec - start.tv_nsec);
        if (checks_failed) {
            fprintf(stderr, "FAIL %s (%d checks, %.2f s)\n", tests[i].name, checks_failed, seconds);
            failed++;
        } else {
            fprintf(stderr, "ok   %s (%.2f s)\n", tests[i].name, seconds);
            passed++;
        }
    }
    teardown();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
