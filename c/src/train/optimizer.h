/* optimizer.h: the learning-rate schedule, global-norm clipping and AdamW over
 * one flat FP32 buffer each for parameters, gradients and moments
 * (docs/training.md section 4). */
#ifndef UFORM_OPTIMIZER_H
#define UFORM_OPTIMIZER_H

#include "core/internal.h"

#define UFORM_ADAM_BETA1 0.9f
#define UFORM_ADAM_BETA2 0.999f
#define UFORM_ADAM_EPSILON 1e-8f
#define UFORM_WEIGHT_DECAY 0.01f
#define UFORM_CLIP_NORM 1.0

/* Fills the zero fields of a schedule with their derived values. */
UFORM_INTERNAL void uform_schedule_resolve(uform_schedule_t *schedule);
UFORM_INTERNAL uform_status_t uform_schedule_check(const uform_schedule_t *schedule);
/* The learning rate of optimizer step `step` (counted from 1). */
UFORM_INTERNAL double uform_schedule_rate(const uform_schedule_t *schedule, uint64_t step);

/* The factor that brings the gradients' global L2 norm to at most `max_norm`
 * (as torch.nn.utils.clip_grad_norm_: max_norm / (norm + 1e-6), capped at 1);
 * *norm receives the norm, summed in float64 in index order. */
UFORM_INTERNAL float uform_clip_factor(const float *gradients, size_t count, double max_norm,
                                       double *norm);

/* One AdamW update of `count` parameters, as torch.optim.AdamW (decoupled decay,
 * bias-corrected moments) on gradients multiplied by `gradient_scale` (the
 * clipping factor); decay[i] != 0 marks parameters that decay. */
UFORM_INTERNAL void uform_adamw(uform_executor_t *executor, float *parameters, const float *gradients,
                                float gradient_scale, float *first_moment, float *second_moment,
                                const uint8_t *decay, size_t count, uint64_t step, float learning_rate);

/* The lowest index whose parameter or moments that same update would make
 * non-finite (an absurd learning rate overflows even from finite gradients),
 * SIZE_MAX when none: a read-only pass run before uform_adamw, so a diverging
 * update is refused instead of applied. */
UFORM_INTERNAL size_t uform_adamw_first_non_finite(uform_executor_t *executor, float *parameters,
                                                   const float *gradients, float gradient_scale,
                                                   float *first_moment, float *second_moment,
                                                   const uint8_t *decay, size_t count, uint64_t step,
                                                   float learning_rate);

#endif /* UFORM_OPTIMIZER_H */
