/* submit.c: Trainer.deferred's C half: a step or a save queued on an
 * executor's submission thread (core/executor.c), answered by uform_job_wait.
 *
 * The trainer is taken at submission, exactly as a blocking call takes it for
 * its duration, so a second step, save or tensor read while one is pending is
 * refused at once with the message of uform_trainer_enter, never queued
 * behind it; the job gives the trainer back when it has run. The step's arena
 * is taken at submission too (as uform_text_encode_submit does), so nothing
 * else writes into it before the job does. */
#include "train/trainer_internal.h"

#include <stdlib.h>

typedef struct {
    uform_trainer_t *trainer;
    uform_trainer_batch_t batch;       /* a copy; what it points at is borrowed */
    uform_arena_t *arena;              /* held from submission; NULL without embeddings */
    uform_scalar_t outputs_scalar;
    uform_encoded_t *embeddings;
    uform_trainer_step_stats_t *stats;
    char *path;                        /* save: a copy */
    uform_progress_t progress;
    bool ran;                          /* the job ran (else free gives the trainer back) */
} uform_trainer_job_t;

static void uform_trainer_job_free(void *context) {
    uform_trainer_job_t *job = context;
    if (!job->ran) { /* never ran (the submission failed): release what it held */
        if (job->arena) uform_arena_release(job->arena);
        uform_trainer_leave(job->trainer);
    }
    free(job->path);
    free(job);
}

static uform_status_t uform_trainer_step_job(void *context) {
    uform_trainer_job_t *job = context;
    uform_status_t status = uform_trainer_step_held(job->trainer, &job->batch, job->arena, true,
                                                    job->outputs_scalar, job->embeddings, job->stats);
    if (job->arena) uform_arena_release(job->arena);
    uform_trainer_leave(job->trainer);
    job->ran = true;
    return status;
}

static uform_status_t uform_trainer_save_job(void *context) {
    uform_trainer_job_t *job = context;
    uform_status_t status = uform_trainer_save_held(job->trainer, job->path, &job->progress);
    uform_trainer_leave(job->trainer);
    job->ran = true;
    return status;
}

/* Takes the trainer (and the arena), queues the job; on any failure gives back
 * what it took. context is freed by the job, or here when it cannot be queued. */
static uform_status_t uform_trainer_submit(uform_executor_t *executor, uform_trainer_job_t *context,
                                           uform_job_fn_t run, const char *what, uform_job_t **job) {
    uform_status_t status = uform_trainer_enter(context->trainer, what);
    if (status == UFORM_OK && context->arena) {
        status = uform_arena_acquire(context->arena);
        if (status != UFORM_OK) uform_trainer_leave(context->trainer);
    }
    if (status != UFORM_OK) {
        context->arena = NULL;
        context->ran = true; /* nothing to give back */
        uform_trainer_job_free(context);
        return status;
    }
    /* uform_executor_submit frees the context (giving back what it holds) when it fails */
    return uform_executor_submit(executor, run, context, uform_trainer_job_free, job);
}

uform_status_t uform_trainer_step_submit(uform_trainer_t *trainer, uform_executor_t *executor,
                                         const uform_trainer_batch_t *batch, uform_arena_t *arena,
                                         uform_scalar_t outputs_scalar, uform_encoded_t *embeddings,
                                         uform_trainer_step_stats_t *stats, uform_job_t **job) {
    if (!job) return uform_fail(UFORM_INVALID_ARGUMENT, "job: the out-pointer is NULL");
    *job = NULL;
    if (!trainer) return uform_fail(UFORM_INVALID_ARGUMENT, "trainer: NULL");
    if (!executor) return uform_fail(UFORM_INVALID_ARGUMENT, "executor: NULL");
    if (!batch) return uform_fail(UFORM_INVALID_ARGUMENT, "batch: NULL");
    UFORM_TRY(uform_check_step_arena(arena, embeddings != NULL));
    uform_trainer_job_t *context = uform_alloc_zeroed(1, sizeof(*context), "step job");
    if (!context) return UFORM_OUT_OF_MEMORY;
    *context = (uform_trainer_job_t){trainer, *batch, embeddings ? arena : NULL, outputs_scalar,
                                     embeddings, stats, NULL, {NULL, NULL, 0}, false};
    return uform_trainer_submit(executor, context, uform_trainer_step_job, "step", job);
}

uform_status_t uform_trainer_save_submit(uform_trainer_t *trainer, uform_executor_t *executor,
                                         const char *path, const uform_progress_t *progress,
                                         uform_job_t **job) {
    if (!job) return uform_fail(UFORM_INVALID_ARGUMENT, "job: the out-pointer is NULL");
    *job = NULL;
    if (!trainer) return uform_fail(UFORM_INVALID_ARGUMENT, "trainer: NULL");
    if (!executor) return uform_fail(UFORM_INVALID_ARGUMENT, "executor: NULL");
    if (!path) return uform_fail(UFORM_INVALID_ARGUMENT, "path: NULL");
    uform_trainer_job_t *context = uform_alloc_zeroed(1, sizeof(*context), "save job");
    char *copy = context ? strdup(path) : NULL;
    if (!copy) {
        free(context);
        return uform_fail(UFORM_OUT_OF_MEMORY, "save: out of memory copying the path");
    }
    context->trainer = trainer;
    context->path = copy;
    if (progress) context->progress = *progress;
    return uform_trainer_submit(executor, context, uform_trainer_save_job, "save", job);
}
