/* test_choose.c: uform_text_choose and uform_text_choose_submit through the
 * public header, under ASan/UBSan (`make test-c`): NULL arguments, bad tapes,
 * bad choices and groups, a model without a byte head, cancellation, and the
 * answer's layout and invariants. The probabilities themselves are checked
 * against the float64 PyTorch reference in tests/test_text_choose.py.
 *
 * Every buffer handed to the library is a heap block of exactly its size, so
 * an overread is an ASan report; the checkpoints are written here. */
#include "core/safetensors.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"

#define HIDDEN 64
#define CONTEXT 16
#define GROUPS 2

/* A call that must fail with `expected` and a message holding `word`. */
#define EXPECT_FAIL(call, expected, word)                                                      \
    do {                                                                                       \
        uform_status_t status_ = (call);                                                       \
        const char *message_ = uform_last_error();                                             \
        CHECK(status_ == (expected) && strstr(message_, (word)) != NULL,                       \
              "%s: expected status %d with '%s', got %d: '%s'", #call, (int)(expected), (word), \
              (int)status_, message_);                                                         \
    } while (0)

static float uniform(void) { return (float)((double)(rng_next() >> 11) * 0x1p-53 * 2.0 - 1.0); }

static void *copy_of(const void *data, size_t size) {
    void *copy = malloc(size ? size : 1);
    if (!copy) abort();
    if (size) memcpy(copy, data, size);
    return copy;
}

/* ---- checkpoints ------------------------------------------------------------------ */

typedef struct {
    char names[24][64];
    uform_tensor_view_t views[24];
    float *data[24];
    size_t count;
} tensors_t;

/* An F32 tensor [rows] (cols 0) or [rows, cols] of center + scale * uniform(-1, 1). */
static void add(tensors_t *t, const char *name, size_t rows, size_t cols, float center, float scale) {
    size_t i = t->count++;
    size_t count = rows * (cols ? cols : 1);
    float *values = malloc(count * sizeof(float));
    if (!values) abort();
    for (size_t j = 0; j < count; j++) values[j] = center + scale * uniform();
    snprintf(t->names[i], sizeof(t->names[i]), "%s", name);
    t->data[i] = values;
    t->views[i] = (uform_tensor_view_t){t->names[i], UFORM_DTYPE_F32, cols ? 2 : 1, {rows, cols}, values};
}

/* A matrix with the variance of N(0, 1/cols). */
static void add_weight(tensors_t *t, const char *name, size_t rows, size_t cols) {
    add(t, name, rows, cols, 0.0f, sqrtf(3.0f / (float)cols));
}

/* A depth-1 text model; byte_head adds heads.bytes.bias and GROUPS log temperatures. */
static void write_checkpoint(const char *path, int byte_head) {
    tensors_t *t = calloc(1, sizeof(*t));
    if (!t) abort();
    size_t H = HIDDEN;
    add(t, "text.bytes", 257, H, 0.0f, 1.0f);
    add(t, "text.modality", H, 0, 0.0f, 0.5f);
    add(t, "blocks.0.attention.norm.weight", H, 0, 1.0f, 0.1f);
    add(t, "blocks.0.attention.norm.bias", H, 0, 0.0f, 0.1f);
    add_weight(t, "blocks.0.attention.qkv.weight", 3 * H, H);
    add(t, "blocks.0.attention.qkv.bias", 3 * H, 0, 0.0f, 0.1f);
    add_weight(t, "blocks.0.attention.out.weight", H, H);
    add(t, "blocks.0.attention.out.bias", H, 0, 0.0f, 0.1f);
    add(t, "blocks.0.mlp.norm.weight", H, 0, 1.0f, 0.1f);
    add(t, "blocks.0.mlp.norm.bias", H, 0, 0.0f, 0.1f);
    add_weight(t, "blocks.0.mlp.up.weight", 4 * H, H);
    add(t, "blocks.0.mlp.up.bias", 4 * H, 0, 0.0f, 0.1f);
    add_weight(t, "blocks.0.mlp.down.weight", H, 4 * H);
    add(t, "blocks.0.mlp.down.bias", H, 0, 0.0f, 0.1f);
    add(t, "norm.weight", H, 0, 1.0f, 0.1f);
    add(t, "norm.bias", H, 0, 0.0f, 0.1f);
    add_weight(t, "heads.embedding.weight", 16, H);
    if (byte_head) {
        add(t, "heads.bytes.bias", 256, 0, 0.0f, 0.1f);
        add(t, "choices.log_temperature", GROUPS, 0, 0.0f, 0.5f);
    }
    char json[256];
    snprintf(json, sizeof(json),
             "{\"version\":4,\"depth\":1,\"hidden\":%d,\"dimensions\":16,\"context\":%d,"
             "\"token_width\":0,\"choice_temperature_groups\":%d,\"step\":0}",
             HIDDEN, CONTEXT, byte_head ? GROUPS : 0);
    uform_metadata_entry_t metadata = {(char *)"uform", json};
    uform_status_t status = uform_safetensors_write(path, t->views, t->count, &metadata, 1, NULL);
    CHECK(status == UFORM_OK, "writing %s: %s", path, uform_last_error());
    for (size_t i = 0; i < t->count; i++) free(t->data[i]);
    free(t);
}

static uform_model_t *load(const char *path) {
    uform_model_t *model = NULL;
    uform_status_t status = uform_model_load_ram(path, NULL, &model);
    CHECK(status == UFORM_OK, "loading %s: %s", path, uform_last_error());
    return model;
}

/* ---- tapes as heap blocks of exactly their size --------------------------------------- */

typedef struct {
    uform_tape_t tape;
    void *data;
    size_t *offsets;
} owned_tape_t;

/* A tape of `count` NUL-free strings (each a byte string of its strlen). */
static owned_tape_t tape_of(const char *const *items, size_t count) {
    owned_tape_t owned;
    owned.offsets = malloc((count + 1) * sizeof(size_t));
    if (!owned.offsets) abort();
    owned.offsets[0] = 0;
    for (size_t i = 0; i < count; i++) owned.offsets[i + 1] = owned.offsets[i] + strlen(items[i]);
    size_t size = owned.offsets[count];
    char *joined = malloc(size ? size : 1);
    if (!joined) abort();
    for (size_t i = 0; i < count; i++) memcpy(joined + owned.offsets[i], items[i], strlen(items[i]));
    owned.data = copy_of(joined, size);
    free(joined);
    owned.tape = (uform_tape_t){size ? owned.data : NULL, size, owned.offsets, count};
    return owned;
}

static void tape_free(owned_tape_t *owned) {
    free(owned->data);
    free(owned->offsets);
}

/* ---- tests -------------------------------------------------------------------------- */

static const char *const TEXTS[] = {"", "a", "Is the sky blue? Answer yes or no:", "\xe6\x97\xa5\xe6\x9c\xac"};
#define TEXT_COUNT 4

static void test_null_arguments(uform_model_t *model, uform_arena_t *arena) {
    owned_tape_t texts = tape_of(TEXTS, TEXT_COUNT);
    const char *shared[] = {"yn"};
    owned_tape_t choices = tape_of(shared, 1);
    uform_chosen_t chosen;
    uform_text_encode_stats_t stats;
    uform_job_t *job = (uform_job_t *)&job;

    EXPECT_FAIL(uform_text_choose(NULL, NULL, &texts.tape, &choices.tape, arena, NULL, &chosen, &stats),
                UFORM_INVALID_ARGUMENT, "model");
    EXPECT_FAIL(uform_text_choose(model, NULL, &texts.tape, &choices.tape, NULL, NULL, &chosen, &stats),
                UFORM_INVALID_ARGUMENT, "arena");
    EXPECT_FAIL(uform_text_choose(model, NULL, &texts.tape, &choices.tape, arena, NULL, NULL, &stats),
                UFORM_INVALID_ARGUMENT, "chosen");
    EXPECT_FAIL(uform_text_choose(model, NULL, NULL, &choices.tape, arena, NULL, &chosen, &stats),
                UFORM_INVALID_ARGUMENT, "texts: NULL");
    EXPECT_FAIL(uform_text_choose(model, NULL, &texts.tape, NULL, arena, NULL, &chosen, &stats),
                UFORM_INVALID_ARGUMENT, "choices: NULL");
    EXPECT_FAIL(uform_text_choose_submit(model, NULL, &texts.tape, &choices.tape, arena, NULL, &chosen,
                                         &stats, NULL),
                UFORM_INVALID_ARGUMENT, "job");
    EXPECT_FAIL(uform_text_choose_submit(NULL, NULL, &texts.tape, &choices.tape, arena, NULL, &chosen,
                                         &stats, &job),
                UFORM_INVALID_ARGUMENT, "model");
    CHECK(job == NULL, "a failed submit leaves *job NULL");
    EXPECT_FAIL(uform_text_choose_submit(model, NULL, NULL, &choices.tape, arena, NULL, &chosen, &stats, &job),
                UFORM_INVALID_ARGUMENT, "texts");
    EXPECT_FAIL(uform_text_choose_submit(model, NULL, &texts.tape, NULL, arena, NULL, &chosen, &stats, &job),
                UFORM_INVALID_ARGUMENT, "choices");
    /* The arena is not left busy by any of them; stats and options may be NULL. */
    CHECK(uform_text_choose(model, NULL, &texts.tape, &choices.tape, arena, NULL, &chosen, NULL) == UFORM_OK,
          "%s", uform_last_error());
    tape_free(&texts);
    tape_free(&choices);
}

static void test_bad_tapes(uform_model_t *model, uform_arena_t *arena) {
    owned_tape_t texts = tape_of(TEXTS, TEXT_COUNT);
    const char *per_text[] = {"ab", "cd", "ef", "gh"};
    owned_tape_t choices = tape_of(per_text, TEXT_COUNT);
    uform_chosen_t chosen;

    uform_tape_t bad = texts.tape;
    bad.count = 0;
    EXPECT_FAIL(uform_text_choose(model, NULL, &bad, &choices.tape, arena, NULL, &chosen, NULL),
                UFORM_INVALID_ARGUMENT, "texts: the batch is empty");
    bad = texts.tape;
    bad.offsets = NULL;
    EXPECT_FAIL(uform_text_choose(model, NULL, &bad, &choices.tape, arena, NULL, &chosen, NULL),
                UFORM_INVALID_ARGUMENT, "texts: offsets are NULL");
    bad = texts.tape;
    bad.size -= 1;
    EXPECT_FAIL(uform_text_choose(model, NULL, &bad, &choices.tape, arena, NULL, &chosen, NULL),
                UFORM_INVALID_ARGUMENT, "texts: the last offset");
    bad = texts.tape;
    bad.data = NULL;
    EXPECT_FAIL(uform_text_choose(model, NULL, &bad, &choices.tape, arena, NULL, &chosen, NULL),
                UFORM_INVALID_ARGUMENT, "texts: data is NULL");

    bad = choices.tape;
    bad.count = 3;
    EXPECT_FAIL(uform_text_choose(model, NULL, &texts.tape, &bad, arena, NULL, &chosen, NULL),
                UFORM_INVALID_ARGUMENT, "3 entries for 4 texts");
    bad.count = 0;
    EXPECT_FAIL(uform_text_choose(model, NULL, &texts.tape, &bad, arena, NULL, &chosen, NULL),
                UFORM_INVALID_ARGUMENT, "0 entries for 4 texts");
    bad = choices.tape;
    bad.offsets = NULL;
    EXPECT_FAIL(uform_text_choose(model, NULL, &texts.tape, &bad, arena, NULL, &chosen, NULL),
                UFORM_INVALID_ARGUMENT, "choices: offsets are NULL");
    bad = choices.tape;
    bad.size = 7;
    EXPECT_FAIL(uform_text_choose(model, NULL, &texts.tape, &bad, arena, NULL, &chosen, NULL),
                UFORM_INVALID_ARGUMENT, "choices: the last offset 8 is past the 7 bytes");
    size_t offsets[5];
    memcpy(offsets, choices.offsets, sizeof(offsets));
    choices.offsets[2] = 1; /* 0 2 1 6 8: decreasing */
    EXPECT_FAIL(uform_text_choose(model, NULL, &texts.tape, &choices.tape, arena, NULL, &chosen, NULL),
                UFORM_INVALID_ARGUMENT, "choices: offsets decrease at item 1");
    choices.offsets[2] = 2; /* 0 2 2 6 8: entry 1 empty */
    EXPECT_FAIL(uform_text_choose(model, NULL, &texts.tape, &choices.tape, arena, NULL, &chosen, NULL),
                UFORM_INVALID_ARGUMENT, "choices[1]: empty");
    memcpy(choices.offsets, offsets, sizeof(offsets));
    ((uint8_t *)choices.data)[5] = 'e'; /* "ee": text 2 repeats 'e' */
    EXPECT_FAIL(uform_text_choose(model, NULL, &texts.tape, &choices.tape, arena, NULL, &chosen, NULL),
                UFORM_INVALID_ARGUMENT, "choices[2]: byte 0x65 'e' appears more than once");
    ((uint8_t *)choices.data)[4] = 0, ((uint8_t *)choices.data)[5] = 0;
    EXPECT_FAIL(uform_text_choose(model, NULL, &texts.tape, &choices.tape, arena, NULL, &chosen, NULL),
                UFORM_INVALID_ARGUMENT, "choices[2]: byte 0x00 appears");
    tape_free(&choices);

    /* 257 bytes in one shared entry: more than there are bytes. */
    uint8_t *many = malloc(257);
    size_t *many_offsets = malloc(2 * sizeof(size_t));
    if (!many || !many_offsets) abort();
    for (size_t i = 0; i < 257; i++) many[i] = (uint8_t)i;
    many_offsets[0] = 0, many_offsets[1] = 257;
    uform_tape_t too_many = {many, 257, many_offsets, 1};
    EXPECT_FAIL(uform_text_choose(model, NULL, &texts.tape, &too_many, arena, NULL, &chosen, NULL),
                UFORM_INVALID_ARGUMENT, "choices[0] (shared by every text): 257 choices");
    /* All 256 are fine. */
    too_many.size = 256, many_offsets[1] = 256;
    CHECK(uform_text_choose(model, NULL, &texts.tape, &too_many, arena, NULL, &chosen, NULL) == UFORM_OK,
          "%s", uform_last_error());
    CHECK(chosen.offsets[TEXT_COUNT] == 256 * TEXT_COUNT, "256 probabilities per text");
    free(many);
    free(many_offsets);
    tape_free(&texts);
}

static void test_groups_and_heads(uform_model_t *model, uform_model_t *headless, uform_arena_t *arena) {
    owned_tape_t texts = tape_of(TEXTS, TEXT_COUNT);
    const char *shared[] = {"yn"};
    owned_tape_t choices = tape_of(shared, 1);
    uform_chosen_t chosen;
    uint32_t *groups = malloc(TEXT_COUNT * sizeof(uint32_t));
    if (!groups) abort();
    groups[0] = 0, groups[1] = 1, groups[2] = GROUPS, groups[3] = 0;
    uform_choose_options_t options = {groups, {NULL, NULL, 0}};
    EXPECT_FAIL(uform_text_choose(model, NULL, &texts.tape, &choices.tape, arena, &options, &chosen, NULL),
                UFORM_INVALID_ARGUMENT, "temperature_groups[2]: group 2, but the model has 2");
    groups[2] = UINT32_MAX;
    EXPECT_FAIL(uform_text_choose(model, NULL, &texts.tape, &choices.tape, arena, &options, &chosen, NULL),
                UFORM_INVALID_ARGUMENT, "temperature_groups[2]");
    groups[2] = 1;
    CHECK(uform_text_choose(model, NULL, &texts.tape, &choices.tape, arena, &options, &chosen, NULL) == UFORM_OK,
          "%s", uform_last_error());
    EXPECT_FAIL(uform_text_choose(headless, NULL, &texts.tape, &choices.tape, arena, NULL, &chosen, NULL),
                UFORM_UNSUPPORTED, "no byte head");
    free(groups);
    tape_free(&texts);
    tape_free(&choices);
}

static int cancel_at_once(void *user, size_t done, size_t total) {
    (void)done, (void)total;
    ++*(int *)user;
    return 1;
}

static void test_answers(uform_model_t *model, uform_arena_t *arena) {
    /* Per-text choices of 1, 2, 3 and 256 bytes; the single choice is certain. */
    owned_tape_t texts = tape_of(TEXTS, TEXT_COUNT);
    uint8_t *bytes = malloc(1 + 2 + 3 + 256);
    size_t *offsets = malloc(5 * sizeof(size_t));
    if (!bytes || !offsets) abort();
    memcpy(bytes, "yyn\x00\x01\xff", 6);
    for (size_t i = 0; i < 256; i++) bytes[6 + i] = (uint8_t)(255 - i);
    offsets[0] = 0, offsets[1] = 1, offsets[2] = 3, offsets[3] = 6, offsets[4] = 262;
    uform_tape_t choices = {bytes, 262, offsets, TEXT_COUNT};
    uform_chosen_t chosen;
    uform_text_encode_stats_t stats;
    CHECK(uform_text_choose(model, NULL, &texts.tape, &choices, arena, NULL, &chosen, &stats) == UFORM_OK,
          "%s", uform_last_error());
    CHECK(chosen.count == TEXT_COUNT, "count %zu", chosen.count);
    for (size_t i = 0; i <= TEXT_COUNT; i++)
        CHECK(chosen.offsets[i] == offsets[i], "offsets[%zu] = %zu", i, chosen.offsets[i]);
    CHECK(chosen.probabilities[0] == 1.0f, "one choice: probability exactly 1, got %.9g",
          (double)chosen.probabilities[0]);
    for (size_t i = 0; i < TEXT_COUNT; i++) {
        double sum = 0;
        size_t n = offsets[i + 1] - offsets[i];
        for (size_t c = offsets[i]; c < offsets[i + 1]; c++) {
            float p = chosen.probabilities[c];
            CHECK(p >= 0 && p <= 1, "text %zu choice %zu: %g", i, c, (double)p);
            sum += p;
        }
        /* e_c / S over the same e_c: S's rounding plus each division's, n + 1 half-ulps. */
        CHECK(fabs(sum - 1) <= (double)(n + 1) * 0x1p-24, "text %zu sums to %.9g", i, sum);
    }
    /* Lengths 0, 1, 34 (> context - 1 = 15: cut, counted) and 6; one MASK row each. */
    CHECK(stats.items == 4 && stats.tokens == 0 + 1 + 15 + 6 + 4 && stats.truncated == 1 && stats.empty == 1,
          "stats %zu %zu %zu %zu", stats.items, stats.tokens, stats.truncated, stats.empty);
    float *expected = copy_of(chosen.probabilities, 262 * sizeof(float));

    /* The same through submission, bit for bit; its failure comes back at wait. */
    uform_job_t *job = NULL;
    uform_chosen_t later;
    uform_text_encode_stats_t later_stats;
    CHECK(uform_text_choose_submit(model, NULL, &texts.tape, &choices, arena, NULL, &later, &later_stats,
                                   &job) == UFORM_OK, "%s", uform_last_error());
    CHECK(uform_job_wait(job) == UFORM_OK, "%s", uform_last_error());
    uform_job_free(job);
    CHECK(memcmp(later.probabilities, expected, 262 * sizeof(float)) == 0, "submitted equals blocking");
    CHECK(later_stats.tokens == stats.tokens, "submitted stats");
    bytes[2] = 'y'; /* "yy": repeated */
    CHECK(uform_text_choose_submit(model, NULL, &texts.tape, &choices, arena, NULL, &later, NULL, &job) == UFORM_OK,
          "%s", uform_last_error());
    EXPECT_FAIL(uform_job_wait(job), UFORM_INVALID_ARGUMENT, "choices[1]: byte 0x79 'y'");
    uform_job_free(job);
    bytes[2] = 'n';

    /* A progress handler that cancels. */
    int calls = 0;
    uform_choose_options_t options = {NULL, {cancel_at_once, &calls, 3}};
    EXPECT_FAIL(uform_text_choose(model, NULL, &texts.tape, &choices, arena, &options, &chosen, NULL),
                UFORM_CANCELLED, "");
    CHECK(calls == 1, "the handler ran once, then the call stopped (%d)", calls);
    CHECK(uform_text_choose(model, NULL, &texts.tape, &choices, arena, NULL, &chosen, NULL) == UFORM_OK,
          "%s", uform_last_error());
    CHECK(memcmp(chosen.probabilities, expected, 262 * sizeof(float)) == 0, "usable after a cancel");
    free(expected);
    free(bytes);
    free(offsets);
    tape_free(&texts);
}

int main(void) {
    char with_head[] = "/tmp/uform-test-choose-XXXXXX", without_head[] = "/tmp/uform-test-choose-XXXXXX";
    int a = mkstemp(with_head), b = mkstemp(without_head);
    if (a < 0 || b < 0) return 2;
    close(a), close(b);
    write_checkpoint(with_head, 1);
    write_checkpoint(without_head, 0);
    uform_model_t *model = load(with_head), *headless = load(without_head);
    uform_arena_t *arena = NULL;
    CHECK(uform_arena_init_ram(&arena) == UFORM_OK, "arena");
    if (model && headless && arena) {
        test_null_arguments(model, arena);
        test_bad_tapes(model, arena);
        test_groups_and_heads(model, headless, arena);
        test_answers(model, arena);
    }
    uform_arena_free(arena);
    uform_model_free(model);
    uform_model_free(headless);
    unlink(with_head);
    unlink(without_head);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
