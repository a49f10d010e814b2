/* small_checkpoint.h: a small checkpoint with every part (text, image, audio,
 * token head, byte head and two choice temperature groups), depth 2, hidden
 * 64, context 40, random BF16 values from check.h's generator, written to a
 * temporary file, and the encode calls made of it (every verb that takes
 * memory: text, pixels, samples). The tests of models on devices
 * (tests/c/test_device_model.c, tests/gpu/test_vram_model.c) load it twice and
 * compare. Include check.h first. */
#ifndef UFORM_TESTS_SMALL_CHECKPOINT_H
#define UFORM_TESTS_SMALL_CHECKPOINT_H

#include "core/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SMALL_HIDDEN 64
#define SMALL_DEPTH 2
#define SMALL_CONTEXT 40

typedef struct {
    uform_tensor_view_t views[64];
    char names[64][64];
    size_t count;
} small_tensors_t;

/* A [rows] (cols 0) or [rows, cols] BF16 tensor of offset + scale * U(-1, 1). */
static inline void small_add(small_tensors_t *t, const char *name, size_t rows, size_t cols, float scale, float offset) {
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

static inline const char *write_small_checkpoint(void) {
    static char path[] = "/tmp/uform-small-checkpoint-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return NULL;
    close(fd);
    static small_tensors_t t;
    const size_t H = SMALL_HIDDEN;
    char name[64];
    for (int l = 0; l < SMALL_DEPTH; l++) {
#define NAME(suffix) (snprintf(name, sizeof(name), "blocks.%d.%s", l, suffix), name)
        small_add(&t, NAME("attention.norm.weight"), H, 0, 0.1f, 1.0f);
        small_add(&t, NAME("attention.norm.bias"), H, 0, 0.1f, 0.0f);
        small_add(&t, NAME("attention.qkv.weight"), 3 * H, H, 0.3f, 0.0f);
        small_add(&t, NAME("attention.qkv.bias"), 3 * H, 0, 0.1f, 0.0f);
        small_add(&t, NAME("attention.out.weight"), H, H, 0.2f, 0.0f);
        small_add(&t, NAME("attention.out.bias"), H, 0, 0.1f, 0.0f);
        small_add(&t, NAME("mlp.norm.weight"), H, 0, 0.1f, 1.0f);
        small_add(&t, NAME("mlp.norm.bias"), H, 0, 0.1f, 0.0f);
        small_add(&t, NAME("mlp.up.weight"), 4 * H, H, 0.2f, 0.0f);
        small_add(&t, NAME("mlp.up.bias"), 4 * H, 0, 0.1f, 0.0f);
        small_add(&t, NAME("mlp.down.weight"), H, 4 * H, 0.1f, 0.0f);
        small_add(&t, NAME("mlp.down.bias"), H, 0, 0.1f, 0.0f);
#undef NAME
    }
    small_add(&t, "text.bytes", 257, H, 0.5f, 0.0f);
    small_add(&t, "text.modality", H, 0, 0.5f, 0.0f);
    small_add(&t, "norm.weight", H, 0, 0.1f, 1.0f);
    small_add(&t, "norm.bias", H, 0, 0.1f, 0.0f);
    small_add(&t, "heads.embedding.weight", 16, H, 0.2f, 0.0f);
    small_add(&t, "heads.tokens.weight", 8, H, 0.2f, 0.0f);
    small_add(&t, "heads.bytes.bias", 256, 0, 0.1f, 0.0f);
    small_add(&t, "choices.log_temperature", 2, 0, 0.3f, 0.0f);
    small_add(&t, "image.patch.weight", H, 4 * 4 * 3, 0.2f, 0.0f);
    small_add(&t, "image.patch.bias", H, 0, 0.1f, 0.0f);
    small_add(&t, "image.modality", H, 0, 0.5f, 0.0f);
    small_add(&t, "audio.chunk.weight", H, 32, 0.3f, 0.0f);
    small_add(&t, "audio.chunk.bias", H, 0, 0.1f, 0.0f);
    small_add(&t, "audio.modality", H, 0, 0.5f, 0.0f);
    char json[512];
    snprintf(json, sizeof(json),
             "{\"version\":4,\"depth\":%d,\"hidden\":%d,\"dimensions\":16,\"context\":%d,\"token_width\":8,"
             "\"choice_temperature_groups\":2,\"image\":{\"patch_side\":4,\"channels\":3},"
             "\"audio\":{\"chunk_samples\":32,\"sample_rate\":16000}}",
             SMALL_DEPTH, SMALL_HIDDEN, SMALL_CONTEXT);
    uform_metadata_entry_t metadata = {(char *)"uform", json};
    uform_status_t status = uform_safetensors_write(path, t.views, t.count, &metadata, 1, NULL);
    for (size_t i = 0; i < t.count; i++) free((void *)t.views[i].data);
    return status == UFORM_OK ? path : NULL;
}

/* ---- the calls both loads answer ---- */

/* The bytes of one call's outputs, copied out of its arena. */
typedef struct {
    uint8_t *embeddings, *tokens;
    size_t embedding_bytes, token_bytes;
} outputs_t;

static inline outputs_t outputs_take(const uform_encoded_t *e) {
    outputs_t o = {0};
    o.embedding_bytes = e->embeddings ? e->count * e->embedding_row_bytes : 0;
    o.token_bytes = e->tokens ? e->token_offsets[e->count] * e->token_row_bytes : 0;
    o.embeddings = malloc(o.embedding_bytes + 1);
    o.tokens = malloc(o.token_bytes + 1);
    if (o.embedding_bytes) memcpy(o.embeddings, e->embeddings, o.embedding_bytes);
    if (o.token_bytes) memcpy(o.tokens, e->tokens, o.token_bytes);
    return o;
}

static inline bool outputs_equal(const outputs_t *a, const outputs_t *b) {
    return a->embedding_bytes == b->embedding_bytes && a->token_bytes == b->token_bytes &&
           memcmp(a->embeddings, b->embeddings, a->embedding_bytes) == 0 &&
           memcmp(a->tokens, b->tokens, a->token_bytes) == 0;
}

static inline void outputs_free(outputs_t *o) {
    free(o->embeddings);
    free(o->tokens);
}

typedef enum { TEXT, IMAGE, AUDIO } verb_t;
static const char *const verb_names[] = {"text_encode", "image_encode_pixels", "audio_encode_samples"};

static inline uform_status_t run_verb(verb_t verb, uform_model_t *model, uform_arena_t *arena,
                               const uform_encode_options_t *options, uform_encoded_t *encoded) {
    /* texts of 0 to 40 bytes (the context) and one of 33, packed into one batch */
    static const char text[] = "the quick brown fox jumps over the lazy dog; a byte per token, "
                               "and then some more";
    static const size_t text_offsets[] = {0, 0, 5, 45, 48, 81};
    static uint8_t pixels[2][12 * 9 * 3];
    static float samples[32 * 5 + 7];
    static const size_t sample_offsets[] = {0, 32 * 3, 32 * 5 + 7};
    for (size_t i = 0; i < sizeof(pixels); i++) ((uint8_t *)pixels)[i] = (uint8_t)(i * 37 + 11);
    for (size_t i = 0; i < sizeof(samples) / sizeof(float); i++) samples[i] = sinf((float)i * 0.3f) * 0.5f;
    switch (verb) {
    case TEXT: {
        uform_tape_t texts = {text, sizeof(text) - 1, text_offsets, 5};
        return uform_text_encode(model, NULL, &texts, arena, options, encoded, NULL);
    }
    case IMAGE: {
        uform_pixels_t images[2] = {{pixels[0], 9, 12, 12 * 3}, {pixels[1], 6, 8, 8 * 3}};
        return uform_image_encode_pixels(model, NULL, images, 2, arena, options, encoded, NULL);
    }
    default:
        return uform_audio_encode_samples(model, NULL, samples, sizeof(samples) / sizeof(float),
                                          sample_offsets, 2, 16000, arena, options, encoded, NULL);
    }
}

#endif /* UFORM_TESTS_SMALL_CHECKPOINT_H */
