/* optimizer.h: the learning-rate schedule and global-norm clipping; AdamW itself is
 * the backend's (backend.h) over
 * one flat FP32 buffer each for parameters, gradients and moments
 * (docs/training.md section 4). */
#ifndef UFORM_OPTIMIZER_H
#define UFORM_OPTIMIZER_H

#include "core/internal.h"

#define UFORM_CLIP_NORM 1.0

/* Fills the zero fields of a schedule with their derived values. */
UFORM_INTERNAL void uform_schedule_resolve(uform_schedule_t *schedule);
UFORM_INTERNAL uform_status_t uform_schedule_check(const uform_schedule_t *schedule);
/* The learning rate of optimizer step `step` (counted from 1). */
UFORM_INTERNAL double uform_schedule_rate(const uform_schedule_t *schedule, uint64_t step);

/* The factor that brings the gradients' global L2 norm to at most `max_norm`
 * (as torch.nn.utils.clip_grad_norm_: max_norm / (norm + 1e-6), capped at 1);
 * *norm receives the norm, the square root of the gradients' sum of squares
 * (the backend's sum_squares: float64, in index order). */
UFORM_INTERNAL float uform_clip_factor(double sum_of_squares, double max_norm, double *norm);

#endif /* UFORM_OPTIMIZER_H */
