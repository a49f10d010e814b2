/* choose.c: uform_text_choose (placeholder until it is built). */
#include "model.h"

uform_status_t uform_text_choose(uform_model_t *model, uform_executor_t *executor,
                                 const uform_tape_t *texts, const uform_tape_t *choices,
                                 uform_arena_t *arena, const uform_choose_options_t *options,
                                 uform_chosen_t *chosen, uform_text_encode_stats_t *stats) {
    (void)model, (void)executor, (void)texts, (void)choices, (void)arena, (void)options;
    (void)chosen, (void)stats;
    return uform_fail(UFORM_UNSUPPORTED, "text_choose: not built in this version");
}

uform_status_t uform_text_choose_submit(uform_model_t *model, uform_executor_t *executor,
                                        const uform_tape_t *texts, const uform_tape_t *choices,
                                        uform_arena_t *arena, const uform_choose_options_t *options,
                                        uform_chosen_t *chosen, uform_text_encode_stats_t *stats,
                                        uform_job_t **job) {
    (void)model, (void)executor, (void)texts, (void)choices, (void)arena, (void)options;
    (void)chosen, (void)stats;
    if (job) *job = NULL;
    return uform_fail(UFORM_UNSUPPORTED, "text_choose: not built in this version");
}
