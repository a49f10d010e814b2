/* audio_encode.c: uform_audio_encode_samples and uform_audio_encode.
 *
 * A recording's chunks (media/media_tokens.c) are built on a pool thread,
 * resampling only the samples the kept chunks hold; the file verb decodes to
 * mono at the model's rate first (media/decode/). */
#include "media/audio_tokens.h"
#include "media/decode/resample.h"
#include "encode/media_encode.h"

#include <math.h>
#include <stdio.h>

static uform_status_t uform_check_audio_call(const uform_model_t *model, const uform_arena_t *arena,
                                             const uform_encoded_t *encoded, const char *verb) {
    if (!model) return uform_fail(UFORM_INVALID_ARGUMENT, "model: NULL");
    if (!arena) return uform_fail(UFORM_INVALID_ARGUMENT, "arena: NULL");
    if (!encoded) return uform_fail(UFORM_INVALID_ARGUMENT, "encoded: NULL");
    if (!model->audio.width)
        return uform_fail(UFORM_UNSUPPORTED, "%s: the checkpoint has no audio parts", verb);
    return UFORM_OK;
}

static void uform_audio_stats(const uform_media_counts_t *counts, uform_audio_encode_stats_t *stats) {
    if (!stats) return;
    stats->items = counts->items;
    stats->samples = counts->samples;
    stats->tokens = counts->tokens;
    stats->truncated = counts->truncated;
    stats->empty = counts->empty;
}

/* ---- samples ----------------------------------------------------------------- */

typedef struct {
    const uform_model_t *model;
    const float *samples;
    const size_t *offsets;
    size_t rate;
} uform_samples_source_t;

static uform_status_t uform_samples_tokenize(const void *source, size_t item, uform_media_tokens_t *tokens) {
    const uform_samples_source_t *recordings = source;
    const float *samples = recordings->samples + recordings->offsets[item];
    size_t count = recordings->offsets[item + 1] - recordings->offsets[item];
    uform_status_t status = UFORM_OK;
    /* a NaN or infinity would poison every output of the item: refuse it by name */
    for (size_t i = 0; i < count && status == UFORM_OK; i++)
        if (!isfinite(samples[i]))
            status = uform_fail(UFORM_INVALID_ARGUMENT, "sample %zu is %s", i,
                                isnan(samples[i]) ? "NaN" : "infinite");
    if (status == UFORM_OK)
        status = uform_recording_tokens(recordings->model, samples, count, recordings->rate, tokens);
    if (status == UFORM_OK) return UFORM_OK;
    char prefix[48];
    snprintf(prefix, sizeof(prefix), "samples[%zu]", item);
    return uform_fail_context(status, prefix);
}

uform_status_t uform_audio_encode_samples_run(uform_model_t *model, uform_executor_t *executor,
                                              const float *samples, size_t size, const size_t *offsets,
                                              size_t count, size_t sample_rate, uform_arena_t *arena,
                                              const uform_encode_options_t *options, uform_encoded_t *encoded,
                                              uform_audio_encode_stats_t *stats, bool held) {
    UFORM_TRY(uform_check_audio_call(model, arena, encoded, "audio_encode_samples"));
    if (count == 0) return uform_fail(UFORM_INVALID_ARGUMENT, "samples: the batch is empty");
    if (!offsets) return uform_fail(UFORM_INVALID_ARGUMENT, "offsets: NULL");
    if (size && !samples)
        return uform_fail(UFORM_INVALID_ARGUMENT, "samples: NULL but size is %zu", size);
    for (size_t i = 0; i < count; i++)
        if (offsets[i + 1] < offsets[i])
            return uform_fail(UFORM_INVALID_ARGUMENT, "offsets: decrease at recording %zu (%zu then %zu)",
                              i, offsets[i], offsets[i + 1]);
    if (offsets[count] > size)
        return uform_fail(UFORM_INVALID_ARGUMENT, "offsets: the last offset %zu is past the %zu samples",
                          offsets[count], size);
    if (sample_rate == 0 || sample_rate > UFORM_MAX_SAMPLE_RATE)
        return uform_fail(UFORM_INVALID_ARGUMENT, "sample_rate: %zu Hz is outside [1, %zu]", sample_rate,
                          UFORM_MAX_SAMPLE_RATE);
    size_t bound = 0;
    for (size_t i = 0; i < count; i++) {
        uform_audio_layout_t layout;
        if (!uform_audio_layout(offsets[i + 1] - offsets[i], sample_rate, model->audio_sample_rate,
                                model->audio_chunk_samples, model->context, &layout))
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "samples[%zu]: %zu samples at %zu Hz are too many to resample to %zu Hz", i,
                              offsets[i + 1] - offsets[i], sample_rate, model->audio_sample_rate);
        bound += layout.kept;
    }
    uform_samples_source_t source = {model, samples, offsets, sample_rate};
    uform_media_call_t call = {&model->audio, count, bound, uform_samples_tokenize, &source};
    uform_media_counts_t counts;
    UFORM_TRY(uform_media_encode(model, executor, &call, arena, options, encoded, &counts, held));
    uform_audio_stats(&counts, stats);
    return UFORM_OK;
}

uform_status_t uform_audio_encode_samples(uform_model_t *model, uform_executor_t *executor, const float *samples,
                                          size_t size, const size_t *offsets, size_t count, size_t sample_rate,
                                          uform_arena_t *arena, const uform_encode_options_t *options,
                                          uform_encoded_t *encoded, uform_audio_encode_stats_t *stats) {
    return uform_audio_encode_samples_run(model, executor, samples, size, offsets, count, sample_rate, arena,
                                          options, encoded, stats, false);
}

uform_status_t uform_audio_encode_run(uform_model_t *model, uform_executor_t *executor, const uform_tape_t *files,
                                      bool paths,
                                      uform_arena_t *arena, const uform_encode_options_t *options,
                                      uform_encoded_t *encoded, uform_audio_encode_stats_t *stats, bool held) {
    UFORM_TRY(uform_check_audio_call(model, arena, encoded, "audio_encode"));
    UFORM_TRY(uform_check_tape(files, "files"));
    if (paths) UFORM_TRY(uform_media_paths_check(files));
    size_t bound;
    if (!uform_mul_ok(files->count, model->context, &bound)) bound = SIZE_MAX - 1;
    uform_media_files_t source = {model, files, paths};
    uform_media_call_t call = {&model->audio, files->count, bound, uform_audio_file_tokenize, &source};
    uform_media_counts_t counts;
    UFORM_TRY(uform_media_encode(model, executor, &call, arena, options, encoded, &counts, held));
    uform_audio_stats(&counts, stats);
    return UFORM_OK;
}

uform_status_t uform_audio_encode(uform_model_t *model, uform_executor_t *executor, const uform_tape_t *files,
                                  uform_arena_t *arena, const uform_encode_options_t *options,
                                  uform_encoded_t *encoded, uform_audio_encode_stats_t *stats) {
    return uform_audio_encode_run(model, executor, files, false, arena, options, encoded, stats, false);
}

uform_status_t uform_audio_encode_paths(uform_model_t *model, uform_executor_t *executor, const uform_tape_t *paths,
                                        uform_arena_t *arena, const uform_encode_options_t *options,
                                        uform_encoded_t *encoded, uform_audio_encode_stats_t *stats) {
    return uform_audio_encode_run(model, executor, paths, true, arena, options, encoded, stats, false);
}
