/* late_interaction.c: uform_late_interaction_scores (placeholder until it is built). */
#include "internal.h"

uform_status_t uform_late_interaction_scores(uform_executor_t *executor,
                                             const uform_token_rows_t *queries,
                                             const uform_token_rows_t *documents, float *scores) {
    (void)executor, (void)queries, (void)documents, (void)scores;
    return uform_fail(UFORM_UNSUPPORTED, "late_interaction_scores: not built in this version");
}
