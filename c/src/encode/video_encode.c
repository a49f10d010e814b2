/* video_encode.c: uform_video_encode and uform_video_encode_frames.
 *
 * A clip's tubes (media/media_tokens.c) are built on a pool thread; the file
 * verb decodes first, keeping every frame_stride-th frame (media/decode/). */
#include "encode/media_encode.h"

#include <stdio.h>

static uform_status_t uform_check_video_call(const uform_model_t *model, const uform_arena_t *arena,
                                             const uform_encoded_t *encoded, const char *verb) {
    if (!model) return uform_fail(UFORM_INVALID_ARGUMENT, "model: NULL");
    if (!arena) return uform_fail(UFORM_INVALID_ARGUMENT, "arena: NULL");
    if (!encoded) return uform_fail(UFORM_INVALID_ARGUMENT, "encoded: NULL");
    if (!model->video.width)
        return uform_fail(UFORM_UNSUPPORTED, "%s: the checkpoint has no video parts", verb);
    return UFORM_OK;
}

static void uform_video_stats(const uform_media_counts_t *counts, uform_video_encode_stats_t *stats) {
    if (!stats) return;
    stats->items = counts->items;
    stats->frames = counts->frames;
    stats->tokens = counts->tokens;
    stats->truncated = counts->truncated;
    stats->empty = counts->empty;
}

static size_t uform_rows_bound(size_t count, size_t context) {
    size_t bound;
    return uform_mul_ok(count, context, &bound) ? bound : SIZE_MAX - 1;
}

/* ---- decoded frames ----------------------------------------------------------- */

typedef struct {
    const uform_model_t *model;
    const uform_video_t *clips;
} uform_frames_source_t;

static uform_status_t uform_frames_tokenize(const void *source, size_t item, uform_media_tokens_t *tokens) {
    const uform_frames_source_t *frames = source;
    uform_status_t status = uform_clip_tokens(frames->model, &frames->clips[item], tokens);
    if (status == UFORM_OK) return UFORM_OK;
    char prefix[48];
    snprintf(prefix, sizeof(prefix), "clips[%zu]", item);
    return uform_fail_context(status, prefix);
}

uform_status_t uform_video_encode_frames(uform_model_t *model, uform_executor_t *executor,
                                         const uform_video_t *clips, size_t count, uform_arena_t *arena,
                                         const uform_encode_options_t *options, uform_encoded_t *encoded,
                                         uform_video_encode_stats_t *stats) {
    UFORM_TRY(uform_check_video_call(model, arena, encoded, "video_encode_frames"));
    if (count == 0) return uform_fail(UFORM_INVALID_ARGUMENT, "clips: the batch is empty");
    if (!clips) return uform_fail(UFORM_INVALID_ARGUMENT, "clips: NULL with a count of %zu", count);
    for (size_t i = 0; i < count; i++) {
        const uform_video_t *clip = &clips[i];
        if (clip->frames == 0) continue;
        size_t pixels, bytes;
        if (clip->height == 0 || clip->width == 0 || !clip->pixels)
            return uform_fail(UFORM_INVALID_ARGUMENT, "clips[%zu]: %zu frames of %zu x %zu pixels at %p", i,
                              clip->frames, clip->height, clip->width, (const void *)clip->pixels);
        if (!uform_mul_ok(clip->height, clip->width, &pixels) || pixels > UFORM_MAX_IMAGE_PIXELS ||
            !uform_mul_ok(pixels * 3, clip->frames, &bytes))
            return uform_fail(UFORM_INVALID_ARGUMENT, "clips[%zu]: %zu frames of %zu x %zu pixels are too large",
                              i, clip->frames, clip->height, clip->width);
    }
    uform_frames_source_t source = {model, clips};
    uform_media_call_t call = {&model->video, count, uform_rows_bound(count, model->context),
                               uform_frames_tokenize, &source};
    uform_media_counts_t counts;
    UFORM_TRY(uform_media_encode(model, executor, &call, arena, options, encoded, &counts, false));
    uform_video_stats(&counts, stats);
    return UFORM_OK;
}

uform_status_t uform_video_encode_run(uform_model_t *model, uform_executor_t *executor, const uform_tape_t *files,
                                      bool paths,
                                      uform_arena_t *arena, const uform_encode_options_t *options,
                                      uform_encoded_t *encoded, uform_video_encode_stats_t *stats, bool held) {
    UFORM_TRY(uform_check_video_call(model, arena, encoded, "video_encode"));
    UFORM_TRY(uform_check_tape(files, "files"));
    if (paths) UFORM_TRY(uform_media_paths_check(files));
    uform_media_files_t source = {model, files, paths};
    uform_media_call_t call = {&model->video, files->count, uform_rows_bound(files->count, model->context),
                               uform_video_file_tokenize, &source};
    uform_media_counts_t counts;
    UFORM_TRY(uform_media_encode(model, executor, &call, arena, options, encoded, &counts, held));
    uform_video_stats(&counts, stats);
    return UFORM_OK;
}

uform_status_t uform_video_encode(uform_model_t *model, uform_executor_t *executor, const uform_tape_t *files,
                                  uform_arena_t *arena, const uform_encode_options_t *options,
                                  uform_encoded_t *encoded, uform_video_encode_stats_t *stats) {
    return uform_video_encode_run(model, executor, files, false, arena, options, encoded, stats, false);
}

uform_status_t uform_video_encode_paths(uform_model_t *model, uform_executor_t *executor, const uform_tape_t *paths,
                                        uform_arena_t *arena, const uform_encode_options_t *options,
                                        uform_encoded_t *encoded, uform_video_encode_stats_t *stats) {
    return uform_video_encode_run(model, executor, paths, true, arena, options, encoded, stats, false);
}
