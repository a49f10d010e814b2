/* image_encode.c: uform_image_encode_pixels and uform_image_encode.
 *
 * Both turn an RGB8 image into its patches (media/media_tokens.c) on a pool
 * thread; the file verb decodes first (media/decode/). */
#include "media/image_tokens.h"
#include "encode/media_encode.h"

#include <stdio.h>
#include <stdlib.h>

static uform_status_t uform_check_model_call(const uform_model_t *model, const uform_arena_t *arena,
                                             const uform_encoded_t *encoded, const char *verb) {
    if (!model) return uform_fail(UFORM_INVALID_ARGUMENT, "model: NULL");
    if (!arena) return uform_fail(UFORM_INVALID_ARGUMENT, "arena: NULL");
    if (!encoded) return uform_fail(UFORM_INVALID_ARGUMENT, "encoded: NULL");
    if (!model->image.width)
        return uform_fail(UFORM_UNSUPPORTED, "%s: the checkpoint has no image parts", verb);
    return UFORM_OK;
}

static void uform_image_stats(const uform_media_counts_t *counts, uform_image_encode_stats_t *stats) {
    if (!stats) return;
    stats->items = counts->items;
    stats->tokens = counts->tokens;
    stats->resized = counts->resized;
    stats->shrunk = counts->shrunk;
}

/* ---- pixels ------------------------------------------------------------------ */

typedef struct {
    const uform_model_t *model;
    const uform_pixels_t *images;
} uform_pixels_source_t;

static uform_status_t uform_pixels_tokenize(const void *source, size_t item, uform_media_tokens_t *tokens) {
    const uform_pixels_source_t *pixels = source;
    const uform_pixels_t *image = &pixels->images[item];
    uform_status_t status = uform_image_tokens(pixels->model, image->data, image->height, image->width,
                                               image->row_stride, tokens);
    if (status == UFORM_OK) return UFORM_OK;
    char prefix[48];
    snprintf(prefix, sizeof(prefix), "pixels[%zu]", item);
    return uform_fail_context(status, prefix);
}

static uform_status_t uform_check_pixels(const uform_pixels_t *images, size_t count) {
    if (count == 0) return uform_fail(UFORM_INVALID_ARGUMENT, "pixels: the batch is empty");
    if (!images) return uform_fail(UFORM_INVALID_ARGUMENT, "pixels: NULL with a count of %zu", count);
    for (size_t i = 0; i < count; i++) {
        const uform_pixels_t *image = &images[i];
        if (image->height == 0 || image->width == 0)
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "pixels[%zu]: %zu x %zu pixels; an image needs at least one pixel", i,
                              image->height, image->width);
        size_t pixels;
        if (!uform_mul_ok(image->height, image->width, &pixels) || pixels > UFORM_MAX_IMAGE_PIXELS)
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "pixels[%zu]: %zu x %zu pixels is over the limit of %zu pixels", i,
                              image->height, image->width, UFORM_MAX_IMAGE_PIXELS);
        if (image->row_stride < 3 * image->width)
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "pixels[%zu]: row_stride %zu is below 3 x width (%zu)", i,
                              image->row_stride, 3 * image->width);
        if (!image->data) return uform_fail(UFORM_INVALID_ARGUMENT, "pixels[%zu]: data is NULL", i);
    }
    return UFORM_OK;
}

uform_status_t uform_image_encode_pixels_run(uform_model_t *model, uform_executor_t *executor,
                                             const uform_pixels_t *images, size_t count, uform_arena_t *arena,
                                             const uform_encode_options_t *options, uform_encoded_t *encoded,
                                             uform_image_encode_stats_t *stats, bool held) {
    UFORM_TRY(uform_check_model_call(model, arena, encoded, "image_encode_pixels"));
    UFORM_TRY(uform_check_pixels(images, count));
    size_t bound = 0;
    for (size_t i = 0; i < count; i++) {
        size_t rows, cols;
        bool shrunk;
        uform_image_grid(images[i].height, images[i].width, model->image_patch_side, model->context,
                         &rows, &cols, &shrunk);
        bound += rows * cols;
    }
    uform_pixels_source_t source = {model, images};
    uform_media_call_t call = {&model->image, count, bound, uform_pixels_tokenize, &source};
    uform_media_counts_t counts;
    UFORM_TRY(uform_media_encode(model, executor, &call, arena, options, encoded, &counts, held));
    uform_image_stats(&counts, stats);
    return UFORM_OK;
}

uform_status_t uform_image_encode_pixels(uform_model_t *model, uform_executor_t *executor,
                                         const uform_pixels_t *images, size_t count, uform_arena_t *arena,
                                         const uform_encode_options_t *options, uform_encoded_t *encoded,
                                         uform_image_encode_stats_t *stats) {
    return uform_image_encode_pixels_run(model, executor, images, count, arena, options, encoded, stats, false);
}

uform_status_t uform_image_encode_run(uform_model_t *model, uform_executor_t *executor, const uform_tape_t *files,
                                      bool paths,
                                      uform_arena_t *arena, const uform_encode_options_t *options,
                                      uform_encoded_t *encoded, uform_image_encode_stats_t *stats, bool held) {
    UFORM_TRY(uform_check_model_call(model, arena, encoded, "image_encode"));
    UFORM_TRY(uform_check_tape(files, "files"));
    if (paths) UFORM_TRY(uform_media_paths_check(files));
    size_t bound;
    if (!uform_mul_ok(files->count, model->context, &bound)) bound = SIZE_MAX - 1;
    uform_media_files_t source = {model, files, paths};
    uform_media_call_t call = {&model->image, files->count, bound, uform_image_file_tokenize, &source};
    uform_media_counts_t counts;
    UFORM_TRY(uform_media_encode(model, executor, &call, arena, options, encoded, &counts, held));
    uform_image_stats(&counts, stats);
    return UFORM_OK;
}

uform_status_t uform_image_encode(uform_model_t *model, uform_executor_t *executor, const uform_tape_t *files,
                                  uform_arena_t *arena, const uform_encode_options_t *options,
                                  uform_encoded_t *encoded, uform_image_encode_stats_t *stats) {
    return uform_image_encode_run(model, executor, files, false, arena, options, encoded, stats, false);
}

uform_status_t uform_image_encode_paths(uform_model_t *model, uform_executor_t *executor, const uform_tape_t *paths,
                                        uform_arena_t *arena, const uform_encode_options_t *options,
                                        uform_encoded_t *encoded, uform_image_encode_stats_t *stats) {
    return uform_image_encode_run(model, executor, paths, true, arena, options, encoded, stats, false);
}
