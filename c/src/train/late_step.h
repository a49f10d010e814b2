/* late_step.h: what tests read of a step's late-interaction term (late_step.c;
 * its step is the trainer's own, in trainer_internal.h). */
#ifndef UFORM_LATE_STEP_H
#define UFORM_LATE_STEP_H

#include "core/internal.h"

/* The last step's rows of token vectors the term gathered over the world (the
 * rows it reads), and the world's rows (0 and 0 before a step with the term). */
UFORM_INTERNAL void uform_trainer_late_rows(const uform_trainer_t *t, size_t *gathered, size_t *world);

#endif /* UFORM_LATE_STEP_H */
