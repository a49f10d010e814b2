/* test_media.c: image, video and audio encoding in C, under ASan/UBSan with
 * LeakSanitizer (docs/media.md).
 *
 * The float64 comparison lives in tests/test_media_encode.py; this program
 * checks what C alone can: the resampler's length rule and its pass and stop
 * bands against analytic sines, the grid rule on hand-computed cases, resize
 * identities, the verbs end to end on a media-only checkpoint it writes
 * (batch = alone bit for bit, stats, empty items, refusals, cancellation),
 * and that failing calls free everything. Internal functions are visible
 * because the library's objects are linked statically. */
#include "media/audio_tokens.h"
#include "media/image_tokens.h"
#include "media/decode/resample.h"
#include "encode/media_encode.h"
#include "core/safetensors.h"
#include "media/video_tokens.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"

/* ---- the resampler ------------------------------------------------------------ */

/* Amplitude of the best-fitting sinusoid at `frequency` over the middle half. */
static double fitted_amplitude(const float *y, size_t n, double rate, double frequency) {
    double ss = 0, sc = 0, cc = 0, ys = 0, yc = 0;
    for (size_t i = n / 4; i < 3 * n / 4; i++) {
        double s = sin(2 * M_PI * frequency * (double)i / rate), c = cos(2 * M_PI * frequency * (double)i / rate);
        ss += s * s, sc += s * c, cc += c * c, ys += y[i] * s, yc += y[i] * c;
    }
    double det = ss * cc - sc * sc;
    double a = (ys * cc - yc * sc) / det, b = (yc * ss - ys * sc) / det;
    return hypot(a, b);
}

static float *tone(size_t rate, double frequency, double amplitude) {
    float *x = malloc(rate * sizeof(float));
    for (size_t i = 0; i < rate; i++) x[i] = (float)(amplitude * sin(2 * M_PI * frequency * (double)i / (double)rate));
    return x;
}

static void test_resample(void) {
    size_t length;
    CHECK(uform_resample_length(44100, 44100, 16000, &length) && length == 16000, "44.1k -> 16k");
    CHECK(uform_resample_length(3, 48000, 16000, &length) && length == 1, "ceil(3 / 3)");
    CHECK(uform_resample_length(4, 48000, 16000, &length) && length == 2, "ceil(4 / 3)");
    CHECK(uform_resample_length(0, 8000, 16000, &length) && length == 0, "empty");
    CHECK(!uform_resample_length(SIZE_MAX / 2, 8000, 16000, &length), "overflow is refused");

    float *out;
    size_t count;
    float same[5] = {1, -2, 3.5f, 0, 7};
    CHECK(uform_resample(same, 5, 22050, 22050, &out, &count) == UFORM_OK && count == 5 &&
              memcmp(out, same, sizeof(same)) == 0, "equal rates copy");
    free(out);
    CHECK(uform_resample(same, 5, 0, 16000, &out, &count) == UFORM_INVALID_ARGUMENT && !out, "rate 0");

    /* a 1 kHz tone keeps frequency and amplitude (passband ripple < 1e-4; 1e-3 allowed) */
    struct { size_t from, to; double frequency, alias; } passes[] = {
        {48000, 16000, 1000, 0}, {44100, 16000, 1000, 0}, {8000, 16000, 1000, 0}};
    for (size_t p = 0; p < 3; p++) {
        float *x = tone(passes[p].from, passes[p].frequency, 0.5);
        CHECK(uform_resample(x, passes[p].from, passes[p].from, passes[p].to, &out, &count) == UFORM_OK,
              "resample");
        double amplitude = fitted_amplitude(out, count, (double)passes[p].to, passes[p].frequency);
        CHECK(fabs(amplitude - 0.5) < 5e-4, "%zu -> %zu: amplitude %.6f", passes[p].from, passes[p].to, amplitude);
        free(out);
        free(x);
    }
    /* 10 kHz at 48 kHz is above the new Nyquist (8 kHz): removed to below -80 dB */
    float *x = tone(48000, 10000, 0.5);
    CHECK(uform_resample(x, 48000, 48000, 16000, &out, &count) == UFORM_OK, "resample");
    float peak = 0;
    for (size_t i = count / 4; i < 3 * count / 4; i++) peak = fmaxf(peak, fabsf(out[i]));
    CHECK(peak < 0.5e-4f, "stopband peak %g", (double)peak);
    free(out);
    free(x);
}

/* ---- grid, resize, layouts ------------------------------------------------------- */

static void test_grid_and_layouts(void) {
    size_t rows, cols;
    bool shrunk;
    uform_image_grid(224, 224, 16, 256, &rows, &cols, &shrunk);
    CHECK(rows == 14 && cols == 14 && !shrunk, "224 / 16");
    uform_image_grid(23, 24, 16, 256, &rows, &cols, &shrunk);
    CHECK(rows == 1 && cols == 2 && !shrunk, "rounding half up");
    uform_image_grid(512, 512, 16, 256, &rows, &cols, &shrunk);
    CHECK(rows == 16 && cols == 16 && shrunk, "32 x 32 shrunk by 0.5");
    uform_image_grid(16, 16000, 16, 256, &rows, &cols, &shrunk);
    CHECK(rows == 1 && cols == 256 && shrunk, "1 x 1000 cut to 1 x 256: %zu x %zu", rows, cols);
    uform_image_grid(1, 1, 16, 1, &rows, &cols, &shrunk);
    CHECK(rows == 1 && cols == 1 && !shrunk, "one pixel");

    uform_video_layout_t video;
    uform_video_layout(5, 32, 32, 16, 2, 256, &video);
    CHECK(video.rows == 2 && video.cols == 2 && video.tubes == 3 && video.kept == 3, "5 frames, T 2");
    uform_video_layout(100, 32, 32, 16, 2, 20, &video);
    CHECK(video.tubes == 50 && video.kept == 5, "truncated at floor(20 / 4) tubes");
    uform_video_layout(0, 32, 32, 16, 2, 20, &video);
    CHECK(video.tubes == 0 && video.kept == 0, "no frame");

    uform_audio_layout_t audio;
    CHECK(uform_audio_layout(100, 16000, 16000, 32, 10, &audio) && audio.chunks == 4 && audio.kept == 4,
          "100 samples: 4 chunks");
    CHECK(uform_audio_layout(1000, 8000, 16000, 32, 10, &audio) && audio.samples == 2000 &&
              audio.chunks == 63 && audio.kept == 10, "upsampled, then cut at context");

    /* resize: the same size is a copy; a constant stays constant */
    uint8_t pixels[7 * 5 * 3];
    for (size_t i = 0; i < sizeof(pixels); i++) pixels[i] = (uint8_t)(i * 37);
    float same[7 * 5 * 3];
    CHECK(uform_image_resize(pixels, 7, 5, 15, 7, 5, same) == UFORM_OK, "resize");
    bool copied = true;
    for (size_t i = 0; i < sizeof(pixels); i++) copied &= same[i] == (float)pixels[i];
    CHECK(copied, "no resize at the grid's size");
    memset(pixels, 99, sizeof(pixels));
    float *big = malloc(40 * 24 * 3 * sizeof(float));
    CHECK(uform_image_resize(pixels, 7, 5, 15, 40, 24, big) == UFORM_OK, "upscale");
    float worst = 0;
    for (size_t i = 0; i < 40 * 24 * 3; i++) worst = fmaxf(worst, fabsf(big[i] - 99.0f));
    CHECK(worst < 1e-4f, "a constant image stays constant: %g", (double)worst);
    free(big);
}

/* ---- the verbs, on a media-only checkpoint ---------------------------------------- */

#define HIDDEN 64
#define CONTEXT 24

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

static const char *write_media_checkpoint(void) {
    static char path[] = "/tmp/uform-test-media-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return NULL;
    close(fd);
    static tensors_t t;
    const size_t H = HIDDEN;
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
    add(&t, "heads.embedding.weight", 16, H, 0.2f, 0.0f);
    add(&t, "heads.tokens.weight", 8, H, 0.2f, 0.0f);
    add(&t, "image.patch.weight", H, 4 * 4 * 3, 0.2f, 0.0f);
    add(&t, "image.patch.bias", H, 0, 0.1f, 0.0f);
    add(&t, "image.modality", H, 0, 0.5f, 0.0f);
    add(&t, "video.tube.weight", H, 2 * 4 * 4 * 3, 0.2f, 0.0f);
    add(&t, "video.tube.bias", H, 0, 0.1f, 0.0f);
    add(&t, "video.modality", H, 0, 0.5f, 0.0f);
    add(&t, "audio.chunk.weight", H, 32, 0.3f, 0.0f);
    add(&t, "audio.chunk.bias", H, 0, 0.1f, 0.0f);
    add(&t, "audio.modality", H, 0, 0.5f, 0.0f);
    char json[512];
    snprintf(json, sizeof(json),
             "{\"version\":4,\"depth\":1,\"hidden\":%d,\"dimensions\":16,\"context\":%d,\"token_width\":8,"
             "\"image\":{\"patch_side\":4,\"channels\":3},\"video\":{\"patch_side\":4,\"tube_frames\":2},"
             "\"audio\":{\"chunk_samples\":32,\"sample_rate\":16000}}",
             HIDDEN, CONTEXT);
    uform_metadata_entry_t metadata = {(char *)"uform", json};
    uform_status_t status = uform_safetensors_write(path, t.views, t.count, &metadata, 1, NULL);
    for (size_t i = 0; i < t.count; i++) free((void *)t.views[i].data);
    return status == UFORM_OK ? path : NULL;
}

static int cancel_at_once(void *user, size_t done, size_t total) {
    (void)user, (void)done, (void)total;
    return 1;
}

/* Copies of an encode call's F32 outputs. */
typedef struct {
    float *embeddings, *tokens;
    size_t *offsets;
    size_t count, rows;
} outputs_t;

static void outputs_take(outputs_t *o, const uform_encoded_t *encoded) {
    o->count = encoded->count;
    o->rows = encoded->token_offsets[encoded->count];
    o->embeddings = malloc(o->count * 16 * sizeof(float));
    memcpy(o->embeddings, encoded->embeddings, o->count * 16 * sizeof(float));
    o->offsets = malloc((o->count + 1) * sizeof(size_t));
    memcpy(o->offsets, encoded->token_offsets, (o->count + 1) * sizeof(size_t));
    o->tokens = malloc((o->rows ? o->rows : 1) * 8 * sizeof(float));
    memcpy(o->tokens, encoded->tokens, o->rows * 8 * sizeof(float));
}

static void outputs_free(outputs_t *o) {
    free(o->embeddings), free(o->tokens), free(o->offsets);
}

/* Item i of `whole` equals item 0 of `alone`, bit for bit. */
static bool item_equal(const outputs_t *whole, size_t i, const outputs_t *alone) {
    size_t rows = whole->offsets[i + 1] - whole->offsets[i];
    return rows == alone->rows &&
           memcmp(whole->embeddings + 16 * i, alone->embeddings, 16 * sizeof(float)) == 0 &&
           memcmp(whole->tokens + 8 * whole->offsets[i], alone->tokens, rows * 8 * sizeof(float)) == 0;
}

static void test_verbs(void) {
    const char *path = write_media_checkpoint();
    CHECK(path != NULL, "writing the checkpoint: %s", uform_last_error());
    if (!path) return;
    uform_model_t *model = NULL;
    uform_executor_t *executor = NULL;
    uform_arena_t *arena = NULL;
    CHECK(uform_model_load_ram(path, NULL, &model) == UFORM_OK, "load: %s", uform_last_error());
    CHECK(uform_executor_for_ram(3, NULL, 0, &executor) == UFORM_OK, "executor");
    CHECK(uform_arena_init_ram(&arena) == UFORM_OK, "arena");
    if (!model || !executor || !arena) return;
    uform_encode_options_t options = {UFORM_OUTPUTS_EMBEDDINGS | UFORM_OUTPUTS_TOKENS, UFORM_SCALAR_F32, {0}};
    uform_encoded_t encoded;

    /* text: this checkpoint has none */
    uform_tape_t text = {"hi", 2, (size_t[]){0, 2}, 1};
    CHECK(uform_text_encode(model, NULL, &text, arena, NULL, &encoded, NULL) == UFORM_UNSUPPORTED &&
              strstr(uform_last_error(), "no text parts"), "text on a media-only model");

    /* images: a batch equals each alone */
    enum { IMAGES = 5 };
    size_t sizes[IMAGES][2] = {{1, 1}, {9, 13}, {8, 12}, {40, 40}, {3, 90}};
    uform_pixels_t images[IMAGES];
    for (size_t i = 0; i < IMAGES; i++) {
        size_t bytes = sizes[i][0] * sizes[i][1] * 3;
        uint8_t *data = malloc(bytes);
        for (size_t b = 0; b < bytes; b++) data[b] = (uint8_t)(b * 31 + i * 7);
        images[i] = (uform_pixels_t){data, sizes[i][0], sizes[i][1], sizes[i][1] * 3};
    }
    uform_image_encode_stats_t image_stats;
    CHECK(uform_image_encode_pixels(model, executor, images, IMAGES, arena, &options, &encoded, &image_stats) ==
              UFORM_OK, "images: %s", uform_last_error());
    outputs_t whole;
    outputs_take(&whole, &encoded);
    /* 1x1 -> 1, 9x13 -> 2x3, 8x12 -> 2x3 (no resize), 40x40 -> 10x10 > 24: 4x4, 3x90 -> 1x23 */
    CHECK(image_stats.items == 5 && image_stats.tokens == 1 + 6 + 6 + 16 + 23 && image_stats.resized == 4 &&
              image_stats.shrunk == 1, "image stats: %zu tokens, %zu resized, %zu shrunk", image_stats.tokens,
          image_stats.resized, image_stats.shrunk);
    for (size_t i = 0; i < IMAGES; i++) {
        outputs_t alone;
        CHECK(uform_image_encode_pixels(model, NULL, &images[i], 1, arena, &options, &encoded, NULL) == UFORM_OK,
              "image alone");
        outputs_take(&alone, &encoded);
        CHECK(item_equal(&whole, i, &alone), "image %zu alone equals its batch row", i);
        outputs_free(&alone);
    }
    outputs_free(&whole);

    /* refusals and cancellation free everything (LeakSanitizer checks) */
    uform_pixels_t bad = images[1];
    bad.row_stride = 5;
    CHECK(uform_image_encode_pixels(model, NULL, &bad, 1, arena, NULL, &encoded, NULL) ==
              UFORM_INVALID_ARGUMENT && strstr(uform_last_error(), "row_stride"), "row stride");
    uform_pixels_t huge = {images[0].data, (size_t)1 << 14, (size_t)1 << 14, (size_t)3 << 14};
    CHECK(uform_image_encode_pixels(model, NULL, &huge, 1, arena, NULL, &encoded, NULL) ==
              UFORM_INVALID_ARGUMENT && strstr(uform_last_error(), "over the limit"), "declared too large");
    uform_encode_options_t cancel = options;
    cancel.progress = (uform_progress_t){cancel_at_once, NULL, 1};
    CHECK(uform_image_encode_pixels(model, executor, images, IMAGES, arena, &cancel, &encoded, NULL) ==
              UFORM_CANCELLED, "cancelled");
    for (size_t i = 0; i < IMAGES; i++) free((void *)images[i].data);

    /* audio: an empty recording, a NaN in the third of a batch */
    float *samples = malloc(500 * sizeof(float));
    for (size_t i = 0; i < 500; i++) samples[i] = (float)sin(0.01 * (double)i * (double)i);
    size_t offsets[5] = {0, 0, 100, 300, 500};
    uform_audio_encode_stats_t audio_stats;
    CHECK(uform_audio_encode_samples(model, executor, samples, 500, offsets, 4, 44100, arena, &options, &encoded,
                                     &audio_stats) == UFORM_OK, "audio: %s", uform_last_error());
    /* 0 -> 0; 100 -> 37 samples, 2 chunks; 200 -> 73, 3 chunks; 200 -> 3 chunks */
    CHECK(audio_stats.items == 4 && audio_stats.samples == 0 + 37 + 73 + 73 && audio_stats.tokens == 8 &&
              audio_stats.empty == 1 && audio_stats.truncated == 0, "audio stats: %zu samples %zu tokens",
          audio_stats.samples, audio_stats.tokens);
    bool zero = true;
    for (size_t i = 0; i < 16; i++) zero &= ((float *)encoded.embeddings)[i] == 0.0f;
    CHECK(zero && encoded.token_offsets[1] == 0, "an empty recording: zero embedding, no rows");
    samples[250] = NAN;
    CHECK(uform_audio_encode_samples(model, executor, samples, 500, offsets, 4, 44100, arena, &options, &encoded,
                                     NULL) == UFORM_INVALID_ARGUMENT &&
              strstr(uform_last_error(), "samples[2]: sample 150 is NaN"), "NaN: %s", uform_last_error());
    free(samples);

    /* video: frames not a multiple of T, and a clip without frames */
    uint8_t *frames = malloc(3 * 8 * 8 * 3);
    for (size_t i = 0; i < 3 * 8 * 8 * 3; i++) frames[i] = (uint8_t)(i * 13);
    uform_video_t clips[2] = {{frames, 3, 8, 8}, {NULL, 0, 0, 0}};
    uform_video_encode_stats_t video_stats;
    CHECK(uform_video_encode_frames(model, executor, clips, 2, arena, &options, &encoded, &video_stats) ==
              UFORM_OK, "video: %s", uform_last_error());
    CHECK(video_stats.items == 2 && video_stats.frames == 3 && video_stats.tokens == 2 * 4 &&
              video_stats.empty == 1 && video_stats.truncated == 0, "video stats");
    free(frames);

    /* file verbs reach the decoders; this checkpoint has every part */
    uform_tape_t files = {"x", 1, (size_t[]){0, 1}, 1};
    uform_status_t status = uform_image_encode(model, NULL, &files, arena, NULL, &encoded, NULL);
    CHECK(status == UFORM_UNSUPPORTED || status == UFORM_FORMAT, "one byte is no image: %d", (int)status);
    CHECK(strstr(uform_last_error(), "files[0]") != NULL, "the message names the file: %s", uform_last_error());

    uform_arena_free(arena);
    uform_executor_free(executor);
    uform_model_free(model);
    unlink(path);
}

int main(void) {
    test_resample();
    test_grid_and_layouts();
    test_verbs();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
