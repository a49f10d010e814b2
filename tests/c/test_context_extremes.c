/* test_context_extremes.c: the encode verbs at both ends of the context range
 * (1 and 2^24, the loader's limits), under ASan/UBSan with LeakSanitizer.
 *
 * The float64 comparison lives in tests/test_context_extremes.py; this program
 * checks what C alone can, with every scratch buffer under the sanitizers:
 * - three checkpoints with the same weights and contexts 1, 4096 and 2^24;
 * - at 2^24, inputs that 4096 does not cut either give the 4096 model's bits
 *   (the context decides only what is cut), with 1 and 8 threads, for
 *   text_encode, text_choose, image_encode_pixels, audio_encode_samples;
 *   calls far smaller than the context size their scratch by themselves;
 * - at 1, an input exactly at the context and one over give the same bits.
 * The media file verbs and uform_video_encode_frames at 2^24 are left out: they
 * size a call for count x context rows (about 50 GB; see the Python test's
 * xfails). Internal functions are visible because the library's objects are
 * linked statically. */
#include "encode/media_encode.h"
#include "core/safetensors.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"

#define HIDDEN 64
#define DIMENSIONS 16
#define TOKEN_WIDTH 8
#define PATCH 4
#define TUBE 2
#define CHUNK 32
#define MAX_CONTEXT ((size_t)1 << 24)

typedef struct {
    uform_tensor_view_t views[40];
    char names[40][64];
    size_t count;
} tensors_t;

/* A [rows] (cols 0) or [rows, cols] BF16 tensor of offset + scale * U(-1, 1). */
static void add(tensors_t *t, const char *name, size_t rows, size_t cols, float scale, float offset) {
    size_t count = rows * (cols ? cols : 1);
    uint16_t *values = malloc(count * sizeof(uint16_t));
    for (size_t i = 0; i < count; i++) {
        float unit = (float)((double)(rng_next() >> 11) * 0x1p-53 * 2.0 - 1.0);
        values[i] = uform_f32_to_bf16(offset + scale * unit);
    }
    snprintf(t->names[t->count], sizeof(t->names[t->count]), "%s", name);
    t->views[t->count] = (uform_tensor_view_t){.name = t->names[t->count], .dtype = UFORM_DTYPE_BF16,
                                               .rank = cols ? 2 : 1, .shape = {rows, cols}, .data = values};
    t->count++;
}

/* Text (with a byte head), image, video and audio parts; the weights depend on
 * nothing but the seed, so checkpoints of different contexts share them. */
static bool write_checkpoint(const char *path, size_t context) {
    rng_state = UFORM_TEST_SEED;
    static tensors_t t;
    t.count = 0;
    const size_t H = HIDDEN;
    add(&t, "text.bytes", 257, H, 1.0f, 0.0f);
    add(&t, "text.modality", H, 0, 0.5f, 0.0f);
    add(&t, "blocks.0.attention.norm.weight", H, 0, 0.1f, 1.0f);
    add(&t, "blocks.0.attention.norm.bias", H, 0, 0.1f, 0.0f);
    add(&t, "blocks.0.attention.qkv.weight", 3 * H, H, 0.3f, 0.0f);
    add(&t, "blocks.0.attention.qkv.bias", 3 * H, 0, 0.1f, 0.0f);
    add(&t, "blocks.0.attention.out.weight", H, H, 0.2f, 0.0f);
    add(&t, "blocks.0.attention.out.bias", H, 0, 0.1f, 0.0f);
    add(&t, "blocks.0.mlp.norm.weight", H, 0, 0.1f, 1.0f);
    add(&t, "blocks.0.mlp.norm.bias", H, 0, 0.1f, 0.0f);
    add(&t, "blocks.0.mlp.up.weight", 4 * H, H, 0.2f, 0.0f);
    add(&t, "blocks.0.mlp.up.bias", 4 * H, 0, 0.1f, 0.0f);
    add(&t, "blocks.0.mlp.down.weight", H, 4 * H, 0.1f, 0.0f);
    add(&t, "blocks.0.mlp.down.bias", H, 0, 0.1f, 0.0f);
    add(&t, "norm.weight", H, 0, 0.1f, 1.0f);
    add(&t, "norm.bias", H, 0, 0.1f, 0.0f);
    add(&t, "heads.embedding.weight", DIMENSIONS, H, 0.2f, 0.0f);
    add(&t, "heads.tokens.weight", TOKEN_WIDTH, H, 0.2f, 0.0f);
    add(&t, "heads.bytes.bias", 256, 0, 0.1f, 0.0f);
    add(&t, "image.patch.weight", H, PATCH * PATCH * 3, 0.2f, 0.0f);
    add(&t, "image.patch.bias", H, 0, 0.1f, 0.0f);
    add(&t, "image.modality", H, 0, 0.5f, 0.0f);
    add(&t, "video.tube.weight", H, TUBE * PATCH * PATCH * 3, 0.2f, 0.0f);
    add(&t, "video.tube.bias", H, 0, 0.1f, 0.0f);
    add(&t, "video.modality", H, 0, 0.5f, 0.0f);
    add(&t, "audio.chunk.weight", H, CHUNK, 0.3f, 0.0f);
    add(&t, "audio.chunk.bias", H, 0, 0.1f, 0.0f);
    add(&t, "audio.modality", H, 0, 0.5f, 0.0f);
    char json[512];
    snprintf(json, sizeof(json),
             "{\"version\":4,\"depth\":1,\"hidden\":%d,\"dimensions\":%d,\"context\":%zu,\"token_width\":%d,"
             "\"choice_temperature_groups\":1,\"image\":{\"patch_side\":%d},"
             "\"video\":{\"patch_side\":%d,\"tube_frames\":%d},"
             "\"audio\":{\"chunk_samples\":%d,\"sample_rate\":16000}}",
             HIDDEN, DIMENSIONS, context, TOKEN_WIDTH, PATCH, PATCH, TUBE, CHUNK);
    uform_metadata_entry_t metadata = {(char *)"uform", json};
    uform_status_t status = uform_safetensors_write(path, t.views, t.count, &metadata, 1, NULL);
    for (size_t i = 0; i < t.count; i++) free((void *)t.views[i].data);
    CHECK(status == UFORM_OK, "writing a checkpoint of context %zu: %s", context, uform_last_error());
    return status == UFORM_OK;
}

static uform_model_t *load(size_t context) {
    char path[] = "/tmp/uform-test-context-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return NULL;
    close(fd);
    uform_model_t *model = NULL;
    if (write_checkpoint(path, context)) {
        uform_status_t status = uform_model_load_ram(path, NULL, &model);
        CHECK(status == UFORM_OK, "loading context %zu: %s", context, uform_last_error());
    }
    unlink(path);
    if (model) {
        uform_model_description_t description;
        CHECK(uform_model_describe(model, &description) == UFORM_OK && description.context == context,
              "describe: context %zu", context);
    }
    return model;
}

/* ---- an encode call's F32 outputs, copied out of the arena ------------------------- */

typedef struct {
    float *embeddings, *tokens;
    size_t *offsets;
    size_t count, rows;
} outputs_t;

static void outputs_take(outputs_t *o, const uform_encoded_t *encoded) {
    o->count = encoded->count;
    o->rows = encoded->token_offsets[encoded->count];
    o->embeddings = malloc(o->count * DIMENSIONS * sizeof(float));
    memcpy(o->embeddings, encoded->embeddings, o->count * DIMENSIONS * sizeof(float));
    o->offsets = malloc((o->count + 1) * sizeof(size_t));
    memcpy(o->offsets, encoded->token_offsets, (o->count + 1) * sizeof(size_t));
    o->tokens = malloc((o->rows ? o->rows : 1) * TOKEN_WIDTH * sizeof(float));
    memcpy(o->tokens, encoded->tokens, o->rows * TOKEN_WIDTH * sizeof(float));
}

static void outputs_free(outputs_t *o) { free(o->embeddings), free(o->tokens), free(o->offsets); }

static bool outputs_equal(const outputs_t *a, const outputs_t *b) {
    return a->count == b->count && a->rows == b->rows &&
           memcmp(a->offsets, b->offsets, (a->count + 1) * sizeof(size_t)) == 0 &&
           memcmp(a->embeddings, b->embeddings, a->count * DIMENSIONS * sizeof(float)) == 0 &&
           memcmp(a->tokens, b->tokens, a->rows * TOKEN_WIDTH * sizeof(float)) == 0;
}

/* Items i and j of one call: the same rows and embedding, bit for bit. */
static bool items_equal(const outputs_t *o, size_t i, size_t j) {
    size_t rows = o->offsets[i + 1] - o->offsets[i];
    return rows == o->offsets[j + 1] - o->offsets[j] &&
           memcmp(o->embeddings + DIMENSIONS * i, o->embeddings + DIMENSIONS * j, DIMENSIONS * sizeof(float)) == 0 &&
           memcmp(o->tokens + TOKEN_WIDTH * o->offsets[i], o->tokens + TOKEN_WIDTH * o->offsets[j],
                  rows * TOKEN_WIDTH * sizeof(float)) == 0;
}

static const uform_encode_options_t BOTH = {UFORM_OUTPUTS_EMBEDDINGS | UFORM_OUTPUTS_TOKENS, UFORM_SCALAR_F32, {0}};

/* ---- the calls, each on heap blocks of exactly their size -------------------------- */

static uint8_t *random_bytes(size_t count) {
    uint8_t *bytes = malloc(count ? count : 1);
    for (size_t i = 0; i < count; i++) bytes[i] = (uint8_t)rng_next();
    return bytes;
}

/* text_encode of texts[i] = data[offsets[i], offsets[i+1]). */
static bool text_call(uform_model_t *model, uform_executor_t *executor, const uint8_t *data, size_t *offsets,
                      size_t count, uform_arena_t *arena, outputs_t *out, uform_text_encode_stats_t *stats) {
    uform_tape_t tape = {data, offsets[count], offsets, count};
    uform_encoded_t encoded;
    uform_status_t status = uform_text_encode(model, executor, &tape, arena, &BOTH, &encoded, stats);
    CHECK(status == UFORM_OK, "text_encode: %s", uform_last_error());
    if (status == UFORM_OK) outputs_take(out, &encoded);
    return status == UFORM_OK;
}

/* text_choose's probabilities, copied (count texts, `choices` shared). */
static float *choose_call(uform_model_t *model, uform_executor_t *executor, const uint8_t *data, size_t *offsets,
                          size_t count, const char *choices, uform_arena_t *arena,
                          uform_text_encode_stats_t *stats) {
    uform_tape_t tape = {data, offsets[count], offsets, count};
    size_t choice_offsets[2] = {0, strlen(choices)};
    uform_tape_t choice_tape = {choices, strlen(choices), choice_offsets, 1};
    uform_chosen_t chosen;
    uform_status_t status = uform_text_choose(model, executor, &tape, &choice_tape, arena, NULL, &chosen, stats);
    CHECK(status == UFORM_OK, "text_choose: %s", uform_last_error());
    if (status != UFORM_OK) return NULL;
    float *copy = malloc(chosen.offsets[count] * sizeof(float));
    memcpy(copy, chosen.probabilities, chosen.offsets[count] * sizeof(float));
    return copy;
}

static bool pixels_call(uform_model_t *model, uform_executor_t *executor, const uform_pixels_t *images,
                        size_t count, uform_arena_t *arena, outputs_t *out, uform_image_encode_stats_t *stats) {
    uform_encoded_t encoded;
    uform_status_t status = uform_image_encode_pixels(model, executor, images, count, arena, &BOTH, &encoded, stats);
    CHECK(status == UFORM_OK, "image_encode_pixels: %s", uform_last_error());
    if (status == UFORM_OK) outputs_take(out, &encoded);
    return status == UFORM_OK;
}

static bool samples_call(uform_model_t *model, uform_executor_t *executor, const float *samples,
                         size_t *offsets, size_t count, size_t rate, uform_arena_t *arena, outputs_t *out,
                         uform_audio_encode_stats_t *stats) {
    uform_encoded_t encoded;
    uform_status_t status = uform_audio_encode_samples(model, executor, samples, offsets[count], offsets, count, rate,
                                                       arena, &BOTH, &encoded, stats);
    CHECK(status == UFORM_OK, "audio_encode_samples: %s", uform_last_error());
    if (status == UFORM_OK) outputs_take(out, &encoded);
    return status == UFORM_OK;
}

/* ---- context 2^24 against 4096 ------------------------------------------------------- */

static void test_max_context(uform_model_t *reference, uform_model_t *model, uform_arena_t *arena) {
    uform_executor_t *executors[2] = {NULL, NULL};
    CHECK(uform_executor_for_ram(1, NULL, 0, &executors[0]) == UFORM_OK, "executor 1");
    CHECK(uform_executor_for_ram(8, NULL, 0, &executors[1]) == UFORM_OK, "executor 8");
    if (!executors[0] || !executors[1]) return;

    /* texts: empty, one byte, 1500 bytes */
    size_t text_offsets[4] = {0, 0, 1, 1501};
    uint8_t *text = random_bytes(1501);
    outputs_t expected, got;
    uform_text_encode_stats_t text_stats;
    if (text_call(reference, NULL, text, text_offsets, 3, arena, &expected, NULL)) {
        for (size_t e = 0; e < 2; e++) {
            if (!text_call(model, executors[e], text, text_offsets, 3, arena, &got, &text_stats)) continue;
            CHECK(outputs_equal(&expected, &got), "text at 2^24 = at 4096 (%zu threads)", e ? (size_t)8 : 1);
            CHECK(text_stats.tokens == 1501 && text_stats.truncated == 0 && text_stats.empty == 1, "text stats");
            outputs_free(&got);
        }
        outputs_free(&expected);
    }
    float *expected_choice = choose_call(reference, NULL, text, text_offsets, 3, "yn?", arena, NULL);
    for (size_t e = 0; e < 2 && expected_choice; e++) {
        float *choice = choose_call(model, executors[e], text, text_offsets, 3, "yn?", arena, &text_stats);
        CHECK(choice && memcmp(choice, expected_choice, 9 * sizeof(float)) == 0, "text_choose at 2^24 = at 4096");
        CHECK(text_stats.tokens == 1504 && text_stats.truncated == 0, "text_choose stats");
        free(choice);
    }
    free(expected_choice);
    free(text);

    /* images: one pixel, 3 x 5 patches, 25 x 30 patches (none cut at either context) */
    size_t sizes[3][2] = {{1, 1}, {3 * PATCH, 5 * PATCH}, {25 * PATCH, 30 * PATCH - 1}};
    uform_pixels_t images[3];
    for (size_t i = 0; i < 3; i++)
        images[i] = (uform_pixels_t){random_bytes(sizes[i][0] * sizes[i][1] * 3), sizes[i][0], sizes[i][1],
                                     sizes[i][1] * 3};
    uform_image_encode_stats_t image_stats;
    if (pixels_call(reference, NULL, images, 3, arena, &expected, NULL)) {
        for (size_t e = 0; e < 2; e++) {
            if (!pixels_call(model, executors[e], images, 3, arena, &got, &image_stats)) continue;
            CHECK(outputs_equal(&expected, &got), "images at 2^24 = at 4096");
            CHECK(image_stats.tokens == 1 + 15 + 750 && image_stats.shrunk == 0, "image stats: %zu",
                  image_stats.tokens);
            outputs_free(&got);
        }
        outputs_free(&expected);
    }
    for (size_t i = 0; i < 3; i++) free((void *)images[i].data);

    /* recordings: empty, one sample, 300 chunks and a bit, at the model's rate and at 44.1 kHz */
    size_t sample_offsets[4] = {0, 0, 1, 1 + 300 * CHUNK + 5};
    float *samples = malloc(sample_offsets[3] * sizeof(float));
    for (size_t i = 0; i < sample_offsets[3]; i++) samples[i] = (float)sin(0.001 * (double)i * (double)(i % 97));
    uform_audio_encode_stats_t audio_stats;
    for (size_t rate = 16000; rate <= 44100; rate += 28100) {
        if (!samples_call(reference, NULL, samples, sample_offsets, 3, rate, arena, &expected, NULL)) continue;
        for (size_t e = 0; e < 2; e++) {
            if (!samples_call(model, executors[e], samples, sample_offsets, 3, rate, arena, &got, &audio_stats))
                continue;
            CHECK(outputs_equal(&expected, &got), "audio at 2^24 = at 4096 (%zu Hz)", rate);
            CHECK(audio_stats.truncated == 0 && audio_stats.empty == 1, "audio stats");
            outputs_free(&got);
        }
        outputs_free(&expected);
    }
    free(samples);
    uform_executor_free(executors[0]);
    uform_executor_free(executors[1]);
}

/* ---- context 1: exactly at the context and one over ------------------------------------ */

static void test_context_one(uform_model_t *model, uform_arena_t *arena) {
    outputs_t out;
    /* texts "", "xy" (one over), "x" (exactly 1), 100 bytes: text[0..2) and text[2..3) */
    uint8_t *text = random_bytes(103);
    text[0] = text[2];
    size_t text_offsets[5] = {0, 0, 2, 3, 103};
    uform_text_encode_stats_t text_stats;
    if (text_call(model, NULL, text, text_offsets, 4, arena, &out, &text_stats)) {
        CHECK(out.offsets[1] == 0 && out.offsets[2] == 1 && out.offsets[3] == 2 && out.offsets[4] == 3,
              "one token per non-empty text");
        CHECK(items_equal(&out, 1, 2), "a byte over the context is cut");
        CHECK(text_stats.tokens == 3 && text_stats.truncated == 2 && text_stats.empty == 1, "text stats");
        outputs_free(&out);
    }
    float *choice = choose_call(model, NULL, text, text_offsets, 4, "ab", arena, &text_stats);
    if (choice) {
        for (size_t i = 1; i < 4; i++)
            CHECK(memcmp(choice, choice + 2 * i, 2 * sizeof(float)) == 0, "text_choose keeps no byte (%zu)", i);
        CHECK(text_stats.tokens == 4 && text_stats.truncated == 3 && text_stats.empty == 1, "choose stats");
        free(choice);
    }
    free(text);

    /* images: P x P is exactly one patch, 2P x P one over (shrunk to one) */
    uint8_t *pixels = random_bytes(2 * PATCH * PATCH * 3);
    uform_pixels_t images[2] = {{pixels, PATCH, PATCH, PATCH * 3}, {pixels, 2 * PATCH, PATCH, PATCH * 3}};
    uform_image_encode_stats_t image_stats;
    if (pixels_call(model, NULL, images, 2, arena, &out, &image_stats)) {
        CHECK(out.rows == 2 && image_stats.shrunk == 1 && image_stats.resized == 1, "image at context 1");
        outputs_free(&out);
    }

    /* video: T frames exactly one tube, T + 1 one over; the first tube of both is the same frames */
    uform_video_t clips[2] = {{pixels, TUBE, PATCH, PATCH}, {NULL, TUBE + 1, PATCH, PATCH}};
    uint8_t *three = malloc((TUBE + 1) * PATCH * PATCH * 3);
    memcpy(three, pixels, TUBE * PATCH * PATCH * 3);
    memset(three + TUBE * PATCH * PATCH * 3, 7, PATCH * PATCH * 3);
    clips[1].pixels = three;
    uform_encoded_t encoded;
    uform_video_encode_stats_t video_stats;
    uform_status_t status = uform_video_encode_frames(model, NULL, clips, 2, arena, &BOTH, &encoded, &video_stats);
    CHECK(status == UFORM_OK, "video at context 1: %s", uform_last_error());
    if (status == UFORM_OK) {
        outputs_take(&out, &encoded);
        CHECK(out.rows == 2 && items_equal(&out, 0, 1), "a tube over the context is cut");
        CHECK(video_stats.truncated == 1 && video_stats.frames == 2 * TUBE + 1, "video stats");
        outputs_free(&out);
    }
    free(three);
    free(pixels);

    /* audio: S samples exactly one chunk, S + 1 one over */
    float *samples = malloc((2 * CHUNK + 1) * sizeof(float));
    for (size_t i = 0; i < CHUNK + 1; i++) samples[CHUNK + i] = (float)sin(0.3 * (double)i);
    memcpy(samples, samples + CHUNK, CHUNK * sizeof(float));   /* the first recording's chunk */
    size_t sample_offsets[3] = {0, CHUNK, 2 * CHUNK + 1};
    uform_audio_encode_stats_t audio_stats;
    if (samples_call(model, NULL, samples, sample_offsets, 2, 16000, arena, &out, &audio_stats)) {
        CHECK(out.rows == 2 && items_equal(&out, 0, 1), "a chunk over the context is cut");
        CHECK(audio_stats.truncated == 1 && audio_stats.tokens == 2, "audio stats");
        outputs_free(&out);
    }
    free(samples);
}

int main(void) {
    uform_model_t *one = load(1), *plain = load(4096), *max = load(MAX_CONTEXT);
    uform_arena_t *arena = NULL;
    CHECK(uform_arena_init_ram(&arena) == UFORM_OK, "arena");
    if (one && arena) test_context_one(one, arena);
    if (plain && max && arena) test_max_context(plain, max, arena);
    uform_arena_free(arena);
    uform_model_free(one);
    uform_model_free(plain);
    uform_model_free(max);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
