/* media_tokens.c: one media item turned into its input tokens (media_tokens.h):
 * image patches, video tube patches, audio chunks, with their positions, from
 * decoded pixels, frames or samples, or from a file decoded first. The encode
 * verbs and the trainer share these, so both see the same tokens. */
#include "media/audio_tokens.h"
#include "media/image_tokens.h"
#include "media/media_tokens.h"
#include "media/video_tokens.h"
#include "media/decode/resample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

uform_status_t uform_media_tokens_alloc(uform_media_tokens_t *tokens, size_t rows, size_t width) {
    tokens->rows = rows;
    tokens->inputs = uform_alloc_aligned(rows ? rows : 1, width * sizeof(float), "media tokens");
    tokens->positions = uform_alloc_zeroed(rows ? rows : 1, 3 * sizeof(uint32_t), "media positions");
    if (!tokens->inputs || !tokens->positions) return UFORM_OUT_OF_MEMORY;
    return UFORM_OK;
}

void uform_media_tokens_free(uform_media_tokens_t *tokens) {
    uform_free_aligned(tokens->inputs);
    free(tokens->positions);
    tokens->inputs = NULL;
    tokens->positions = NULL;
}

/* ---- images ------------------------------------------------------------------ */

/* An image's patch tokens: grid, resize (skipped when the image already has
 * the grid's size), patches, positions (row, column). */
uform_status_t uform_image_tokens(const uform_model_t *model, const uint8_t *pixels,
                                         size_t height, size_t width, size_t row_stride,
                                         uform_media_tokens_t *tokens) {
    size_t patch = model->image_patch_side, rows, cols;
    bool shrunk;
    uform_image_grid(height, width, patch, model->context, &rows, &cols, &shrunk);
    tokens->axes = 2;
    tokens->counts.shrunk = shrunk;
    tokens->counts.resized = rows * patch != height || cols * patch != width;
    UFORM_TRY(uform_media_tokens_alloc(tokens, rows * cols, model->image.width));
    float *resized = uform_alloc_aligned(rows * cols, model->image.width * sizeof(float), "resized image");
    if (!resized) return UFORM_OUT_OF_MEMORY;
    uform_status_t status = uform_image_resize(pixels, height, width, row_stride, rows * patch,
                                               cols * patch, resized);
    if (status == UFORM_OK) {
        uform_image_patches(resized, rows, cols, patch, tokens->inputs, model->image.width);
        for (size_t p = 0; p < rows * cols; p++) {
            tokens->positions[3 * p] = (uint32_t)(p / cols);
            tokens->positions[3 * p + 1] = (uint32_t)(p % cols);
        }
    }
    uform_free_aligned(resized);
    return status;
}

/* ---- files ------------------------------------------------------------------- */

/* File `item`'s bytes: a slice of the tape, or (with paths) the file read into
 * *owned, which the caller frees once decoded. */
static uform_status_t uform_media_file_bytes(const uform_media_files_t *files, size_t item, const uint8_t **data,
                                             size_t *size, uint8_t **owned) {
    const uform_tape_t *tape = files->files;
    *owned = NULL;
    if (files->paths) {
        UFORM_TRY(uform_media_path_read(tape, item, owned, size));
        *data = *owned;
        return UFORM_OK;
    }
    *data = tape->data ? (const uint8_t *)tape->data + tape->offsets[item] : NULL;
    *size = tape->offsets[item + 1] - tape->offsets[item];
    return UFORM_OK;
}

uform_status_t uform_image_file_tokenize(const void *source, size_t item,
                                                uform_media_tokens_t *tokens) {
    const uform_media_files_t *files = source;
    const uint8_t *data;
    uint8_t *owned;
    size_t size;
    uform_image_t image = {0};
    uform_status_t status = uform_media_file_bytes(files, item, &data, &size, &owned);
    if (status == UFORM_OK) status = uform_decode_image(data, size, &image);
    free(owned);
    if (status == UFORM_OK && (image.height == 0 || image.width == 0))
        status = uform_fail(UFORM_FORMAT, "the decoder answered an image of %zu x %zu pixels",
                            image.height, image.width);
    if (status == UFORM_OK)
        status = uform_image_tokens(files->model, image.pixels, image.height, image.width,
                                    3 * image.width, tokens);
    uform_image_free(&image);
    if (status == UFORM_OK) return UFORM_OK;
    char prefix[48];
    snprintf(prefix, sizeof(prefix), "files[%zu]", item);
    return uform_fail_context(status, prefix);
}

/* ---- video ------------------------------------------------------------------- */

uform_status_t uform_clip_tokens(const uform_model_t *model, const uform_video_t *clip,
                                        uform_media_tokens_t *tokens) {
    uform_video_layout_t layout;
    uform_video_layout(clip->frames, clip->height, clip->width, model->video_patch_side,
                       model->video_tube_frames, model->context, &layout);
    size_t grid = layout.rows * layout.cols;
    tokens->axes = 3;
    tokens->counts.frames = clip->frames;
    tokens->counts.empty = clip->frames == 0;
    tokens->counts.truncated = layout.kept < layout.tubes;
    UFORM_TRY(uform_media_tokens_alloc(tokens, layout.kept * grid, model->video.width));
    if (!layout.kept) return UFORM_OK;
    return uform_video_tubes(clip->pixels, clip->frames, clip->height, clip->width,
                             model->video_patch_side, model->video_tube_frames, &layout,
                             tokens->inputs, tokens->positions);
}

/* ---- files --------------------------------------------------------------------- */

uform_status_t uform_video_file_tokenize(const void *source, size_t item,
                                                uform_media_tokens_t *tokens) {
    const uform_media_files_t *files = source;
    const uint8_t *data;
    uint8_t *owned;
    size_t size;
    uform_video_t clip = {0};
    uform_status_t status = uform_media_file_bytes(files, item, &data, &size, &owned);
    if (status == UFORM_OK) status = uform_decode_video(data, size, files->model->video_frame_stride, &clip);
    free(owned);
    if (status == UFORM_OK && clip.frames && (clip.height == 0 || clip.width == 0))
        status = uform_fail(UFORM_FORMAT, "the decoder answered frames of %zu x %zu pixels",
                            clip.height, clip.width);
    if (status == UFORM_OK) status = uform_clip_tokens(files->model, &clip, tokens);
    uform_video_free(&clip);
    if (status == UFORM_OK) return UFORM_OK;
    char prefix[48];
    snprintf(prefix, sizeof(prefix), "files[%zu]", item);
    return uform_fail_context(status, prefix);
}

/* ---- audio ------------------------------------------------------------------- */

uform_status_t uform_recording_tokens(const uform_model_t *model, const float *samples,
                                             size_t count, size_t rate, uform_media_tokens_t *tokens) {
    uform_audio_layout_t layout;
    if (!uform_audio_layout(count, rate, model->audio_sample_rate, model->audio_chunk_samples,
                            model->context, &layout))
        return uform_fail(UFORM_INVALID_ARGUMENT, "%zu samples at %zu Hz are too many to resample to %zu Hz",
                          count, rate, model->audio_sample_rate);
    tokens->axes = 1;
    tokens->counts.samples = layout.samples;
    tokens->counts.empty = layout.samples == 0;
    tokens->counts.truncated = layout.kept < layout.chunks;
    UFORM_TRY(uform_media_tokens_alloc(tokens, layout.kept, model->audio.width));
    return uform_audio_chunks(samples, count, rate, model->audio_sample_rate, model->audio_chunk_samples,
                              &layout, tokens->inputs, tokens->positions);
}

/* ---- files ------------------------------------------------------------------- */

uform_status_t uform_audio_file_tokenize(const void *source, size_t item,
                                                uform_media_tokens_t *tokens) {
    const uform_media_files_t *files = source;
    const uint8_t *data;
    uint8_t *owned;
    size_t size;
    uform_audio_t audio = {0};
    uform_status_t status = uform_media_file_bytes(files, item, &data, &size, &owned);
    if (status == UFORM_OK) status = uform_decode_audio(data, size, files->model->audio_sample_rate, &audio);
    free(owned);
    if (status == UFORM_OK)
        status = uform_recording_tokens(files->model, audio.samples, audio.count,
                                        files->model->audio_sample_rate, tokens);
    uform_audio_free(&audio);
    if (status == UFORM_OK) return UFORM_OK;
    char prefix[48];
    snprintf(prefix, sizeof(prefix), "files[%zu]", item);
    return uform_fail_context(status, prefix);
}
