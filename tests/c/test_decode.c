/* test_decode.c: the media decoders (c/src/media/decode.h) on files built
 * here byte by byte, so the expected pixels and samples come from how the
 * file was made, not from a decoder. Runs under ASan/UBSan in make test-c;
 * tests/test_decode.py compares real-world files with Pillow, soundfile and
 * PyAV.
 *
 * Covered: argument checks, refusals leave outputs zeroed, PNG colour types
 * and depths, WAV sample formats and channel averaging, sizes over the
 * limits refused before allocation, decoders this build lacks answering
 * UFORM_UNSUPPORTED with the library's name, and eight threads decoding at
 * once. */
#include "media/decode/decode.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

/* ---- byte builders --------------------------------------------------------------- */

typedef struct {
    uint8_t *data;
    size_t size, capacity;
} bytes_t;

static void put(bytes_t *b, const void *data, size_t size) {
    if (size == 0) return;
    if (b->size + size > b->capacity) {
        b->capacity = (b->size + size) * 2 + 64;
        b->data = realloc(b->data, b->capacity);
        if (!b->data) abort();
    }
    memcpy(b->data + b->size, data, size);
    b->size += size;
}
static void put_u8(bytes_t *b, uint8_t v) { put(b, &v, 1); }
static void put_be32(bytes_t *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    put(b, x, 4);
}
static void put_le16(bytes_t *b, uint16_t v) {
    uint8_t x[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    put(b, x, 2);
}
static void put_le32(bytes_t *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, x, 4);
}

static uint32_t crc32_of(const uint8_t *data, size_t size) {
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < size; i++) {
        crc ^= data[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

static void put_chunk(bytes_t *b, const char *type, const uint8_t *body, size_t size) {
    bytes_t typed = {0};
    put(&typed, type, 4);
    if (size) put(&typed, body, size);
    put_be32(b, (uint32_t)size);
    put(b, typed.data, typed.size);
    put_be32(b, crc32_of(typed.data, typed.size));
    free(typed.data);
}

/* A PNG of `rows` (each already prefixed by its filter byte 0) in one stored
 * (uncompressed) deflate block, so no compressor is needed. */
static bytes_t make_png(uint32_t width, uint32_t height, uint8_t depth, uint8_t color_type,
                        const uint8_t *rows, size_t rows_size, const uint8_t *palette, size_t palette_size) {
    bytes_t png = {0}, header = {0}, zlib = {0};
    put(&png, "\x89PNG\r\n\x1a\n", 8);
    put_be32(&header, width);
    put_be32(&header, height);
    uint8_t rest[5] = {depth, color_type, 0, 0, 0};
    put(&header, rest, 5);
    put_chunk(&png, "IHDR", header.data, header.size);
    if (palette) put_chunk(&png, "PLTE", palette, palette_size);
    put_u8(&zlib, 0x78), put_u8(&zlib, 0x01), put_u8(&zlib, 0x01); /* header, final stored block */
    put_le16(&zlib, (uint16_t)rows_size), put_le16(&zlib, (uint16_t)~rows_size);
    put(&zlib, rows, rows_size);
    uint32_t a = 1, s = 0;
    for (size_t i = 0; i < rows_size; i++) a = (a + rows[i]) % 65521, s = (s + a) % 65521;
    put_be32(&zlib, (s << 16) | a);
    put_chunk(&png, "IDAT", zlib.data, zlib.size);
    put_chunk(&png, "IEND", NULL, 0);
    free(header.data), free(zlib.data);
    return png;
}

/* A canonical 44-byte-header WAV; data_size_field overrides the data chunk's size. */
static bytes_t make_wav(uint16_t format, uint16_t channels, uint32_t rate, uint16_t bits,
                        const void *samples, uint32_t size, uint32_t data_size_field) {
    bytes_t wav = {0};
    put(&wav, "RIFF", 4), put_le32(&wav, 36 + size), put(&wav, "WAVEfmt ", 8);
    put_le32(&wav, 16), put_le16(&wav, format), put_le16(&wav, channels), put_le32(&wav, rate);
    put_le32(&wav, rate * channels * bits / 8), put_le16(&wav, (uint16_t)(channels * bits / 8));
    put_le16(&wav, bits), put(&wav, "data", 4), put_le32(&wav, data_size_field);
    put(&wav, samples, size);
    return wav;
}

/* An exact-size heap copy, so ASan sees reads past the end. */
static uint8_t *exact(const bytes_t *b) {
    uint8_t *copy = malloc(b->size ? b->size : 1);
    if (!copy) abort();
    if (b->size) memcpy(copy, b->data, b->size);
    return copy;
}

static bool zeroed(const void *p, size_t size) {
    for (size_t i = 0; i < size; i++)
        if (((const uint8_t *)p)[i]) return false;
    return true;
}

#define HAS(flag) ((uform_media_formats() & (flag)) != 0)

/* ---- arguments and refusals ------------------------------------------------------- */

static void test_arguments(void) {
    uform_image_t image;
    uform_audio_t audio;
    uform_video_t video;
    CHECK(uform_decode_image("x", 1, NULL) == UFORM_INVALID_ARGUMENT, "image: NULL output");
    CHECK(uform_decode_image(NULL, 5, &image) == UFORM_INVALID_ARGUMENT, "image: NULL data");
    if (HAS(UFORM_MEDIA_AUDIO)) {
        CHECK(uform_decode_audio("x", 1, 0, NULL) == UFORM_INVALID_ARGUMENT, "audio: NULL output");
        CHECK(uform_decode_audio(NULL, 5, 0, &audio) == UFORM_INVALID_ARGUMENT, "audio: NULL data");
    }
    if (HAS(UFORM_MEDIA_VIDEO)) {
        CHECK(uform_decode_video("x", 1, 1, NULL) == UFORM_INVALID_ARGUMENT, "video: NULL output");
        CHECK(uform_decode_video(NULL, 5, 1, &video) == UFORM_INVALID_ARGUMENT, "video: NULL data");
        CHECK(uform_decode_video("x", 1, 0, &video) == UFORM_INVALID_ARGUMENT &&
                  strstr(uform_last_error(), "frame_stride"),
              "video: stride 0: %s", uform_last_error());
    }
    /* Freeing zeroed and NULL structures is fine, twice too. */
    memset(&image, 0, sizeof(image));
    uform_image_free(&image), uform_image_free(&image), uform_image_free(NULL);
    memset(&audio, 0, sizeof(audio));
    uform_audio_free(&audio), uform_audio_free(NULL);
    memset(&video, 0, sizeof(video));
    uform_video_free(&video), uform_video_free(NULL);
}

static void test_refusals_leave_outputs_zeroed(void) {
    static const char *const junk[] = {"", "GIF89a", "\xff\xd8", "RIFF\0\0\0\0WAVE", "\x89PNG\r\n\x1a"};
    for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
        size_t size = strlen(junk[i]) + (i == 3 ? 8 : 0);
        bytes_t b = {0};
        put(&b, junk[i], size);
        uint8_t *data = exact(&b);
        uform_image_t image;
        memset(&image, 0xab, sizeof(image));
        uform_status_t status = uform_decode_image(size ? data : NULL, size, &image);
        CHECK(status == UFORM_FORMAT && strstr(uform_last_error(), "not a JPEG, PNG or WebP file"),
              "junk %zu: status %d: %s", i, (int)status, uform_last_error());
        CHECK(zeroed(&image, sizeof(image)), "junk %zu: image not zeroed", i);
        uform_audio_t audio;
        memset(&audio, 0xab, sizeof(audio));
        status = uform_decode_audio(size ? data : NULL, size, 16000, &audio);
        CHECK(status == (HAS(UFORM_MEDIA_AUDIO) ? UFORM_FORMAT : UFORM_UNSUPPORTED), "audio junk %zu: %d", i,
              (int)status);
        CHECK(zeroed(&audio, sizeof(audio)), "junk %zu: audio not zeroed", i);
        uform_video_t video;
        memset(&video, 0xab, sizeof(video));
        status = uform_decode_video(size ? data : NULL, size, 1, &video);
        CHECK(status == (HAS(UFORM_MEDIA_VIDEO) ? UFORM_FORMAT : UFORM_UNSUPPORTED), "video junk %zu: %d: %s",
              i, (int)status, uform_last_error());
        CHECK(zeroed(&video, sizeof(video)), "junk %zu: video not zeroed", i);
        free(data), free(b.data);
    }
}

/* What a build without a library says: the format and the library's name. */
static void test_missing_libraries_are_named(void) {
    struct {
        uint32_t flag;
        const char *magic;
        size_t size;
        const char *message;
    } cases[] = {
        {UFORM_MEDIA_JPEG, "\xff\xd8\xff\xe0", 4, "JPEG decoding needs libjpeg, which this build of libuform"},
        {UFORM_MEDIA_PNG, "\x89PNG\r\n\x1a\n", 8, "PNG decoding needs libpng, which this build of libuform"},
        {UFORM_MEDIA_WEBP, "RIFF\0\0\0\0WEBPVP8 ", 16, "WebP decoding needs libwebp, which this build"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (HAS(cases[i].flag)) continue;
        uform_image_t image;
        CHECK(uform_decode_image(cases[i].magic, cases[i].size, &image) == UFORM_UNSUPPORTED &&
                  strstr(uform_last_error(), cases[i].message),
              "missing %s: %s", cases[i].message, uform_last_error());
    }
    uform_audio_t audio;
    if (!HAS(UFORM_MEDIA_AUDIO))
        CHECK(uform_decode_audio("RIFF", 4, 0, &audio) == UFORM_UNSUPPORTED &&
                  strstr(uform_last_error(), "needs libsndfile"),
              "missing libsndfile: %s", uform_last_error());
    uform_video_t video;
    if (!HAS(UFORM_MEDIA_VIDEO))
        CHECK(uform_decode_video("x", 1, 1, &video) == UFORM_UNSUPPORTED &&
                  strstr(uform_last_error(), "needs FFmpeg"),
              "missing FFmpeg: %s", uform_last_error());
    printf("media formats of this build: 0x%x\n", (unsigned)uform_media_formats());
}

/* ---- PNG ------------------------------------------------------------------------------ */

/* 3 x 2 pixels in every colour type; expected RGB from the construction. */
static void test_png_color_types(void) {
    if (!HAS(UFORM_MEDIA_PNG)) return;
    static const uint8_t rgb[6][3] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {1, 2, 3}, {250, 128, 7}, {0, 0, 0}};
    struct {
        const char *name;
        uint8_t depth, color_type;
        size_t bytes_per_pixel; /* 0: packed below 8 bits */
    } kinds[] = {{"rgb8", 8, 2, 3}, {"rgba8", 8, 6, 4}, {"rgb16", 16, 2, 6}, {"rgba16", 16, 6, 8},
                 {"gray8", 8, 0, 1}, {"gray-alpha8", 8, 4, 2}, {"gray16", 16, 0, 2}, {"palette8", 8, 3, 1},
                 {"gray1", 1, 0, 0}};
    uint8_t palette[6 * 3];
    memcpy(palette, rgb, sizeof(palette));
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        bytes_t rows = {0};
        uint8_t expected[6][3];
        for (size_t y = 0; y < 2; y++) {
            put_u8(&rows, 0);
            uint8_t packed = 0;
            for (size_t x = 0; x < 3; x++) {
                size_t i = y * 3 + x;
                const uint8_t *c = rgb[i];
                uint8_t gray = (uint8_t)(c[0] ^ c[1] ^ (uint8_t)(x * 40));
                uint8_t px[8];
                size_t n = kinds[k].bytes_per_pixel;
                switch (kinds[k].color_type * 100 + kinds[k].depth) {
                case 208: memcpy(px, c, 3); break;
                case 608: memcpy(px, c, 3), px[3] = (uint8_t)(x * 100); break;
                case 216:
                case 616:
                    for (int j = 0; j < 3; j++) px[2 * j] = c[j], px[2 * j + 1] = (uint8_t)(c[j] ^ 0x5a);
                    px[6] = 0, px[7] = 9;
                    break;
                case 8: px[0] = gray; break;
                case 408: px[0] = gray, px[1] = 17; break;
                case 16: px[0] = gray, px[1] = 0xff; break;
                case 308: px[0] = (uint8_t)i; break;
                default: packed |= (uint8_t)((gray & 1) << (7 - x)); break; /* gray1 */
                }
                if (n) put(&rows, px, n);
                if (kinds[k].color_type == 2 || kinds[k].color_type == 6 || kinds[k].color_type == 3)
                    memcpy(expected[i], c, 3);
                else if (kinds[k].depth == 1)
                    memset(expected[i], (gray & 1) ? 255 : 0, 3);
                else
                    memset(expected[i], gray, 3);
            }
            if (kinds[k].depth == 1) put_u8(&rows, packed);
        }
        bytes_t png = make_png(3, 2, kinds[k].depth, kinds[k].color_type, rows.data, rows.size,
                               kinds[k].color_type == 3 ? palette : NULL, sizeof(palette));
        uint8_t *data = exact(&png);
        uform_image_t image;
        uform_status_t status = uform_decode_image(data, png.size, &image);
        CHECK(status == UFORM_OK && image.height == 2 && image.width == 3, "%s: status %d %zux%zu: %s",
              kinds[k].name, (int)status, image.height, image.width, uform_last_error());
        if (status == UFORM_OK)
            CHECK(memcmp(image.pixels, expected, sizeof(expected)) == 0, "%s: pixels differ", kinds[k].name);
        uform_image_free(&image);
        CHECK(image.pixels == NULL, "free clears the pointer");
        /* Every shorter prefix that cuts into the pixel data is refused. */
        for (size_t cut = 0; cut + 12 < png.size; cut++) {
            uint8_t *prefix = malloc(cut ? cut : 1);
            if (cut) memcpy(prefix, png.data, cut);
            status = uform_decode_image(cut ? prefix : NULL, cut, &image);
            CHECK(status == UFORM_FORMAT, "%s cut at %zu: status %d", kinds[k].name, cut, (int)status);
            CHECK(zeroed(&image, sizeof(image)), "%s cut: not zeroed", kinds[k].name);
            free(prefix);
        }
        free(data), free(png.data), free(rows.data);
    }
}

static void test_png_sizes_over_the_limit(void) {
    if (!HAS(UFORM_MEDIA_PNG)) return;
    struct {
        uint32_t width, height;
    } sizes[] = {{100000, 100000}, {0x7fffffff, 2}, {8193, 8192}, {0, 5}};
    uint8_t row[2] = {0, 0};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        bytes_t png = make_png(sizes[i].width, sizes[i].height, 8, 0, row, sizeof(row), NULL, 0);
        uint8_t *data = exact(&png);
        uform_image_t image;
        uform_status_t status = uform_decode_image(data, png.size, &image);
        CHECK(status == UFORM_FORMAT, "%ux%u: status %d", sizes[i].width, sizes[i].height, (int)status);
        if (sizes[i].width)
            CHECK(strstr(uform_last_error(), "over the limit"), "%ux%u: %s", sizes[i].width, sizes[i].height,
                  uform_last_error());
        free(data), free(png.data);
    }
}

/* ---- WAV ------------------------------------------------------------------------------- */

static void test_wav_formats(void) {
    if (!HAS(UFORM_MEDIA_AUDIO)) return;
    enum { FRAMES = 50 };
    /* 16-bit stereo: the mean of the two channels, each x / 32768. */
    int16_t pcm16[FRAMES * 2];
    float expected16[FRAMES];
    for (int i = 0; i < FRAMES; i++) {
        pcm16[2 * i] = (int16_t)(i * 600 - 15000), pcm16[2 * i + 1] = (int16_t)(-i * 300 + 7);
        expected16[i] = (float)(((double)pcm16[2 * i] + pcm16[2 * i + 1]) / 32768.0 / 2.0);
    }
    /* 8-bit unsigned mono: (x - 128) / 128. */
    uint8_t pcm8[FRAMES];
    float expected8[FRAMES];
    for (int i = 0; i < FRAMES; i++) pcm8[i] = (uint8_t)(i * 5), expected8[i] = (float)((i * 5 - 128) / 128.0);
    /* float, three channels: the plain mean. */
    float f32[FRAMES * 3], expected_f[FRAMES];
    for (int i = 0; i < FRAMES; i++) {
        f32[3 * i] = sinf((float)i), f32[3 * i + 1] = 0.25f, f32[3 * i + 2] = -(float)i / FRAMES;
        expected_f[i] = (float)(((double)f32[3 * i] + f32[3 * i + 1] + f32[3 * i + 2]) / 3.0);
    }
    struct {
        const char *name;
        bytes_t wav;
        const float *expected;
    } cases[] = {
        {"pcm16 stereo", make_wav(1, 2, 8000, 16, pcm16, sizeof(pcm16), sizeof(pcm16)), expected16},
        {"pcm8 mono", make_wav(1, 1, 8000, 8, pcm8, sizeof(pcm8), sizeof(pcm8)), expected8},
        {"float 3ch", make_wav(3, 3, 8000, 32, f32, sizeof(f32), sizeof(f32)), expected_f},
        /* A data chunk declaring 4 GiB in a tiny file: the samples present, or a refusal. */
        {"pcm16 4GiB declared", make_wav(1, 2, 8000, 16, pcm16, sizeof(pcm16), 0xffffffffu), expected16},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        uint8_t *data = exact(&cases[c].wav);
        uform_audio_t audio;
        uform_status_t status = uform_decode_audio(data, cases[c].wav.size, 0, &audio);
        if (c == 3 && status == UFORM_FORMAT) {
            passed++;
        } else {
            CHECK(status == UFORM_OK && audio.count == FRAMES, "%s: status %d, %zu samples: %s", cases[c].name,
                  (int)status, audio.count, uform_last_error());
            float worst = 0;
            for (size_t i = 0; status == UFORM_OK && i < audio.count && i < FRAMES; i++)
                worst = fmaxf(worst, fabsf(audio.samples[i] - cases[c].expected[i]));
            CHECK(worst <= 1e-7f, "%s: off by %g", cases[c].name, (double)worst);
        }
        /* The file's own rate asked explicitly: no resampling, the same samples. */
        uform_audio_t again;
        status = uform_decode_audio(data, cases[c].wav.size, 8000, &again);
        CHECK(status == UFORM_OK ? again.count == audio.count &&
                                       memcmp(again.samples, audio.samples, audio.count * sizeof(float)) == 0
                                 : c == 3,
              "%s at 8000 Hz", cases[c].name);
        uform_audio_free(&again);
        uform_audio_free(&audio);
        free(data), free(cases[c].wav.data);
    }
}

/* ---- threads ----------------------------------------------------------------------------- */

typedef struct {
    const bytes_t *png, *wav;
    const uint8_t *pixels;
    size_t pixel_bytes;
    const float *samples;
    size_t samples_count;
    int failures;
} shared_t;

static void *decode_repeatedly(void *argument) {
    shared_t *shared = argument;
    int failures = 0;
    for (int round = 0; round < 40; round++) {
        uform_image_t image;
        if (uform_decode_image(shared->png->data, shared->png->size, &image) != UFORM_OK ||
            memcmp(image.pixels, shared->pixels, shared->pixel_bytes) != 0)
            failures++;
        uform_image_free(&image);
        uform_audio_t audio;
        if (uform_decode_audio(shared->wav->data, shared->wav->size, 0, &audio) != UFORM_OK ||
            audio.count != shared->samples_count ||
            memcmp(audio.samples, shared->samples, audio.count * sizeof(float)) != 0)
            failures++;
        uform_audio_free(&audio);
        /* A refusal's message stays on its own thread. */
        if (uform_decode_image("junk", 4, &image) != UFORM_FORMAT || !strstr(uform_last_error(), "not a JPEG"))
            failures++;
    }
    shared->failures = failures;
    return NULL;
}

static void test_threads(void) {
    if (!HAS(UFORM_MEDIA_PNG) || !HAS(UFORM_MEDIA_AUDIO)) return;
    enum { WIDTH = 40, HEIGHT = 30, THREADS = 8 };
    bytes_t rows = {0};
    for (int y = 0; y < HEIGHT; y++) {
        put_u8(&rows, 0);
        for (int x = 0; x < WIDTH; x++) {
            uint8_t px[3] = {(uint8_t)(x * 6), (uint8_t)(y * 8), (uint8_t)(x ^ y)};
            put(&rows, px, 3);
        }
    }
    bytes_t png = make_png(WIDTH, HEIGHT, 8, 2, rows.data, rows.size, NULL, 0);
    int16_t pcm[2000];
    for (int i = 0; i < 2000; i++) pcm[i] = (int16_t)rng_next();
    bytes_t wav = make_wav(1, 1, 16000, 16, pcm, sizeof(pcm), sizeof(pcm));
    uform_image_t image;
    uform_audio_t audio;
    CHECK(uform_decode_image(png.data, png.size, &image) == UFORM_OK, "threads: png: %s", uform_last_error());
    CHECK(uform_decode_audio(wav.data, wav.size, 0, &audio) == UFORM_OK, "threads: wav: %s", uform_last_error());
    shared_t shared[THREADS];
    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; t++) {
        shared[t] = (shared_t){&png, &wav, image.pixels, (size_t)WIDTH * HEIGHT * 3, audio.samples, audio.count, 0};
        CHECK(pthread_create(&threads[t], NULL, decode_repeatedly, &shared[t]) == 0, "pthread_create");
    }
    for (int t = 0; t < THREADS; t++) {
        pthread_join(threads[t], NULL);
        CHECK(shared[t].failures == 0, "thread %d: %d failures", t, shared[t].failures);
    }
    uform_image_free(&image), uform_audio_free(&audio);
    free(png.data), free(wav.data), free(rows.data);
}

int main(void) {
    test_arguments();
    test_refusals_leave_outputs_zeroed();
    test_missing_libraries_are_named();
    test_png_color_types();
    test_png_sizes_over_the_limit();
    test_wav_formats();
    test_threads();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
