/* gradient_sum.h: what tests read of a mesh step's gradient sum
 * (gradient_sum.c; the rest of its functions are the trainer's own, in
 * trainer_internal.h). */
#ifndef UFORM_GRADIENT_SUM_H
#define UFORM_GRADIENT_SUM_H

#include "core/internal.h"

/* How many of the last mesh step's buckets were handed to the summing thread
 * while the backward still ran: one per block (0 before any mesh step). */
UFORM_INTERNAL size_t uform_trainer_buckets_during_backward(const uform_trainer_t *t);

#endif /* UFORM_GRADIENT_SUM_H */
