/* media_probe.c: reaches two internal entry points of libuform that the public
 * API only reaches through the media decoders, so tests/test_media_encode.py
 * and tests/test_resample.py can compare them with the float64 reference
 * directly, without a decoder in between. Built by those tests against c/build/libuform.a
 * (hidden symbols link statically); not a test_*.c, so `make test-c` skips it.
 *
 *   media_probe resample FROM TO IN OUT
 *       IN: float32 samples; OUT: uform_resample's float32 samples.
 *   media_probe resize HEIGHT WIDTH OUT_HEIGHT OUT_WIDTH IN OUT
 *       IN: RGB8 pixels [HEIGHT][WIDTH][3]; OUT: uform_image_resize's float32
 *       [OUT_HEIGHT][OUT_WIDTH][3].
 *   media_probe video CHECKPOINT CPU_CLASS THREADS OUTPUTS IN OUT
 *       IN: uint64 count, then per clip uint64 frames, height, width, then
 *       every clip's RGB8 frames in order. Runs uform_video_encode_frames with
 *       F32 outputs. OUT: uint64 status; on success uint64 dimensions,
 *       float32 embeddings [count][dimensions], uint64 token_width, and when
 *       it is non-zero uint64 offsets [count + 1] and float32 tokens; then the
 *       5 uint64 stats fields; on failure the error message. */
#include "media/image_tokens.h"
#include "media/decode/decode.h"
#include "encode/media_encode.h"

#include <stdio.h>
#include <stdlib.h>

static void *read_file(const char *path, size_t *size) {
    FILE *file = fopen(path, "rb");
    if (!file) return NULL;
    fseek(file, 0, SEEK_END);
    long length = ftell(file);
    fseek(file, 0, SEEK_SET);
    void *data = malloc(length > 0 ? (size_t)length : 1);
    *size = fread(data, 1, (size_t)length, file);
    fclose(file);
    return data;
}

static int resample(int argc, char **argv) {
    if (argc != 6) return 2;
    size_t size;
    float *samples = read_file(argv[4], &size);
    if (!samples) return 3;
    float *out;
    size_t count;
    uform_status_t status = uform_resample(samples, size / sizeof(float), strtoull(argv[2], NULL, 10),
                                           strtoull(argv[3], NULL, 10), &out, &count);
    free(samples);
    if (status != UFORM_OK) {
        fprintf(stderr, "%s\n", uform_last_error());
        return 4;
    }
    FILE *file = fopen(argv[5], "wb");
    fwrite(out, sizeof(float), count, file);
    fclose(file);
    free(out);
    return 0;
}

static int resize(int argc, char **argv) {
    if (argc != 8) return 2;
    size_t size, height = strtoull(argv[2], NULL, 10), width = strtoull(argv[3], NULL, 10);
    size_t out_height = strtoull(argv[4], NULL, 10), out_width = strtoull(argv[5], NULL, 10);
    uint8_t *pixels = read_file(argv[6], &size);
    if (!pixels || size != height * width * 3) return 3;
    float *out = malloc(out_height * out_width * 3 * sizeof(float));
    uform_status_t status = uform_image_resize(pixels, height, width, width * 3, out_height, out_width, out);
    free(pixels);
    if (status != UFORM_OK) {
        fprintf(stderr, "%s\n", uform_last_error());
        free(out);
        return 4;
    }
    FILE *file = fopen(argv[7], "wb");
    fwrite(out, sizeof(float), out_height * out_width * 3, file);
    fclose(file);
    free(out);
    return 0;
}

static int video(int argc, char **argv) {
    if (argc != 8) return 2;
    size_t size;
    uint8_t *input = read_file(argv[6], &size);
    if (!input) return 3;
    const uint64_t *header = (const uint64_t *)input;
    size_t count = header[0];
    uform_video_t *clips = calloc(count ? count : 1, sizeof(uform_video_t));
    size_t offset = 8 * (1 + 3 * count);
    for (size_t i = 0; i < count; i++) {
        clips[i].frames = header[1 + 3 * i];
        clips[i].height = header[2 + 3 * i];
        clips[i].width = header[3 + 3 * i];
        clips[i].pixels = input + offset;
        offset += clips[i].frames * clips[i].height * clips[i].width * 3;
    }
    uform_model_load_ram_options_t load = {0};
    load.cpu_class = (uform_cpu_class_t)atoi(argv[3]);
    uform_model_t *model = NULL;
    uform_executor_t *executor = NULL;
    uform_arena_t *arena = NULL;
    uform_status_t status = uform_model_load_ram(argv[2], &load, &model);
    if (status == UFORM_OK) status = uform_executor_for_ram(strtoull(argv[4], NULL, 10), NULL, 0, &executor);
    if (status == UFORM_OK) status = uform_arena_init_ram(&arena);
    uform_encode_options_t options = {0};
    options.outputs = (uint32_t)atoi(argv[5]);
    uform_encoded_t encoded;
    uform_video_encode_stats_t stats;
    if (status == UFORM_OK)
        status = uform_video_encode_frames(model, executor, clips, count, arena, &options, &encoded, &stats);
    FILE *file = fopen(argv[7], "wb");
    uint64_t value = (uint64_t)status;
    fwrite(&value, 8, 1, file);
    if (status == UFORM_OK) {
        value = encoded.embeddings ? encoded.dimensions : 0;
        fwrite(&value, 8, 1, file);
        if (encoded.embeddings) fwrite(encoded.embeddings, 4, count * encoded.dimensions, file);
        value = encoded.tokens ? encoded.token_width : 0;
        fwrite(&value, 8, 1, file);
        if (encoded.tokens) {
            for (size_t i = 0; i <= count; i++) {
                value = encoded.token_offsets[i];
                fwrite(&value, 8, 1, file);
            }
            fwrite(encoded.tokens, 4, encoded.token_offsets[count] * encoded.token_width, file);
        }
        uint64_t fields[5] = {stats.items, stats.frames, stats.tokens, stats.truncated, stats.empty};
        fwrite(fields, 8, 5, file);
    } else {
        fputs(uform_last_error(), file);
    }
    fclose(file);
    uform_arena_free(arena);
    uform_executor_free(executor);
    uform_model_free(model);
    free(clips);
    free(input);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "resample") == 0) return resample(argc, argv);
    if (argc > 1 && strcmp(argv[1], "resize") == 0) return resize(argc, argv);
    if (argc > 1 && strcmp(argv[1], "video") == 0) return video(argc, argv);
    fprintf(stderr, "usage: media_probe resample|resize|video ...\n");
    return 2;
}
