/* media_submit.c: the *_submit twins of the image, video and audio verbs.
 *
 * As uform_text_encode_submit: the submission checks only what it must read
 * or take at once (the job out-pointer, the model, the input pointer, the
 * arena, and that the arena is free), takes the arena, copies the tape and
 * options structures, and queues a job on the executor's submission thread.
 * The job runs the blocking verb's own body (uform_image_encode_run and the
 * rest, media_encode.h) with the arena already held, so every other argument
 * check, the decoding and the encoding happen there and a failure reaches the
 * caller through uform_job_wait (for the *_paths twins, the check of every
 * path too). The pixels, file bytes, paths, samples and offsets are borrowed
 * until the job has run. */
#include "encode/media_encode.h"

#include <stdlib.h>

typedef enum {
    UFORM_MEDIA_JOB_PIXELS,
    UFORM_MEDIA_JOB_IMAGE,
    UFORM_MEDIA_JOB_VIDEO,
    UFORM_MEDIA_JOB_AUDIO,
    UFORM_MEDIA_JOB_SAMPLES
} uform_media_job_verb_t;

typedef struct {
    uform_media_job_verb_t verb;
    uform_model_t *model;
    uform_executor_t *executor;        /* as given: NULL runs on the model's */
    uform_arena_t *arena;              /* held from submission until the job has run */
    uform_encode_options_t options;
    bool has_options;
    uform_encoded_t *encoded;
    void *stats;                       /* the verb's stats type, or NULL */
    uform_tape_t files;                /* IMAGE, VIDEO, AUDIO */
    bool paths;                        /* files holds paths (the *_encode_paths_submit verbs) */
    const uform_pixels_t *images;      /* PIXELS */
    const float *samples;              /* SAMPLES */
    size_t size;
    const size_t *offsets;
    size_t count;                      /* PIXELS, SAMPLES */
    size_t sample_rate;
} uform_media_job_t;

static uform_status_t uform_media_job_run(void *context) {
    uform_media_job_t *job = context;
    const uform_encode_options_t *options = job->has_options ? &job->options : NULL;
    uform_status_t status = UFORM_OK;
    switch (job->verb) {
    case UFORM_MEDIA_JOB_PIXELS:
        status = uform_image_encode_pixels_run(job->model, job->executor, job->images, job->count, job->arena,
                                               options, job->encoded, job->stats, true);
        break;
    case UFORM_MEDIA_JOB_IMAGE:
        status = uform_image_encode_run(job->model, job->executor, &job->files, job->paths, job->arena, options,
                                        job->encoded, job->stats, true);
        break;
    case UFORM_MEDIA_JOB_VIDEO:
        status = uform_video_encode_run(job->model, job->executor, &job->files, job->paths, job->arena, options,
                                        job->encoded, job->stats, true);
        break;
    case UFORM_MEDIA_JOB_AUDIO:
        status = uform_audio_encode_run(job->model, job->executor, &job->files, job->paths, job->arena, options,
                                        job->encoded, job->stats, true);
        break;
    case UFORM_MEDIA_JOB_SAMPLES:
        status = uform_audio_encode_samples_run(job->model, job->executor, job->samples, job->size,
                                                job->offsets, job->count, job->sample_rate, job->arena,
                                                options, job->encoded, job->stats, true);
        break;
    }
    uform_arena_release(job->arena);
    return status;
}

/* Takes the arena and queues `prepared` (its verb and inputs filled in);
 * the checks every media submission shares come first. */
static uform_status_t uform_media_submit(const uform_media_job_t *prepared,
                                         const uform_encode_options_t *options, uform_job_t **job) {
    uform_arena_t *arena = prepared->arena;
    UFORM_TRY(uform_arena_acquire(arena));
    uform_media_job_t *context = uform_alloc_zeroed(1, sizeof(*context), "media job");
    if (!context) {
        uform_arena_release(arena);
        return UFORM_OUT_OF_MEMORY;
    }
    *context = *prepared;
    context->has_options = options != NULL;
    if (options) context->options = *options;
    uform_executor_t *executor = prepared->executor ? prepared->executor : prepared->model->executor;
    uform_status_t status = uform_executor_submit(executor, uform_media_job_run, context, free, job);
    if (status != UFORM_OK) uform_arena_release(arena); /* the job will never run */
    return status;
}

/* The checks of every submission, in uform_text_encode_submit's order;
 * `missing` says the input pointer the job would read is NULL. */
static uform_status_t uform_media_submit_check(uform_model_t *model, bool missing, const char *input_name,
                                               uform_arena_t *arena, uform_job_t **job) {
    if (!job) return uform_fail(UFORM_INVALID_ARGUMENT, "job: the out-pointer is NULL");
    *job = NULL;
    if (!model) return uform_fail(UFORM_INVALID_ARGUMENT, "model: NULL");
    if (missing) return uform_fail(UFORM_INVALID_ARGUMENT, "%s: NULL", input_name);
    if (!arena) return uform_fail(UFORM_INVALID_ARGUMENT, "arena: NULL");
    return UFORM_OK;
}

static uform_status_t uform_media_files_submit(uform_media_job_verb_t verb, uform_model_t *model,
                                               uform_executor_t *executor, const uform_tape_t *files,
                                               bool paths, uform_arena_t *arena,
                                               const uform_encode_options_t *options, uform_encoded_t *encoded,
                                               void *stats, uform_job_t **job) {
    UFORM_TRY(uform_media_submit_check(model, !files, paths ? "paths" : "files", arena, job));
    uform_media_job_t prepared = {.verb = verb, .model = model, .executor = executor, .arena = arena,
                                  .encoded = encoded, .stats = stats, .files = *files, .paths = paths};
    return uform_media_submit(&prepared, options, job);
}

uform_status_t uform_image_encode_pixels_submit(uform_model_t *model, uform_executor_t *executor,
                                                const uform_pixels_t *images, size_t count,
                                                uform_arena_t *arena, const uform_encode_options_t *options,
                                                uform_encoded_t *encoded, uform_image_encode_stats_t *stats,
                                                uform_job_t **job) {
    /* an empty batch (count 0) is the job's failure, as an empty text tape is;
     * NULL images with images to read are refused here */
    UFORM_TRY(uform_media_submit_check(model, count && !images, "pixels", arena, job));
    uform_media_job_t prepared = {.verb = UFORM_MEDIA_JOB_PIXELS, .model = model, .executor = executor,
                                  .arena = arena, .encoded = encoded, .stats = stats, .images = images,
                                  .count = count};
    return uform_media_submit(&prepared, options, job);
}

uform_status_t uform_image_encode_submit(uform_model_t *model, uform_executor_t *executor,
                                         const uform_tape_t *files, uform_arena_t *arena,
                                         const uform_encode_options_t *options, uform_encoded_t *encoded,
                                         uform_image_encode_stats_t *stats, uform_job_t **job) {
    return uform_media_files_submit(UFORM_MEDIA_JOB_IMAGE, model, executor, files, false, arena, options,
                                    encoded, stats, job);
}

uform_status_t uform_image_encode_paths_submit(uform_model_t *model, uform_executor_t *executor,
                                               const uform_tape_t *paths, uform_arena_t *arena,
                                               const uform_encode_options_t *options, uform_encoded_t *encoded,
                                               uform_image_encode_stats_t *stats, uform_job_t **job) {
    return uform_media_files_submit(UFORM_MEDIA_JOB_IMAGE, model, executor, paths, true, arena, options,
                                    encoded, stats, job);
}

uform_status_t uform_video_encode_submit(uform_model_t *model, uform_executor_t *executor,
                                         const uform_tape_t *files, uform_arena_t *arena,
                                         const uform_encode_options_t *options, uform_encoded_t *encoded,
                                         uform_video_encode_stats_t *stats, uform_job_t **job) {
    return uform_media_files_submit(UFORM_MEDIA_JOB_VIDEO, model, executor, files, false, arena, options,
                                    encoded, stats, job);
}

uform_status_t uform_video_encode_paths_submit(uform_model_t *model, uform_executor_t *executor,
                                               const uform_tape_t *paths, uform_arena_t *arena,
                                               const uform_encode_options_t *options, uform_encoded_t *encoded,
                                               uform_video_encode_stats_t *stats, uform_job_t **job) {
    return uform_media_files_submit(UFORM_MEDIA_JOB_VIDEO, model, executor, paths, true, arena, options,
                                    encoded, stats, job);
}

uform_status_t uform_audio_encode_submit(uform_model_t *model, uform_executor_t *executor,
                                         const uform_tape_t *files, uform_arena_t *arena,
                                         const uform_encode_options_t *options, uform_encoded_t *encoded,
                                         uform_audio_encode_stats_t *stats, uform_job_t **job) {
    return uform_media_files_submit(UFORM_MEDIA_JOB_AUDIO, model, executor, files, false, arena, options,
                                    encoded, stats, job);
}

uform_status_t uform_audio_encode_paths_submit(uform_model_t *model, uform_executor_t *executor,
                                               const uform_tape_t *paths, uform_arena_t *arena,
                                               const uform_encode_options_t *options, uform_encoded_t *encoded,
                                               uform_audio_encode_stats_t *stats, uform_job_t **job) {
    return uform_media_files_submit(UFORM_MEDIA_JOB_AUDIO, model, executor, paths, true, arena, options,
                                    encoded, stats, job);
}

uform_status_t uform_audio_encode_samples_submit(uform_model_t *model, uform_executor_t *executor,
                                                 const float *samples, size_t size, const size_t *offsets,
                                                 size_t count, size_t sample_rate, uform_arena_t *arena,
                                                 const uform_encode_options_t *options,
                                                 uform_encoded_t *encoded, uform_audio_encode_stats_t *stats,
                                                 uform_job_t **job) {
    UFORM_TRY(uform_media_submit_check(model, !offsets, "offsets", arena, job));
    uform_media_job_t prepared = {.verb = UFORM_MEDIA_JOB_SAMPLES, .model = model, .executor = executor,
                                  .arena = arena, .encoded = encoded, .stats = stats, .samples = samples,
                                  .size = size, .offsets = offsets, .count = count,
                                  .sample_rate = sample_rate};
    return uform_media_submit(&prepared, options, job);
}
