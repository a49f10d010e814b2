/* optimizer.c: schedule, clipping and AdamW (docs/training.md section 4). */
#include "train/optimizer.h"

#include <math.h>
#include <stdatomic.h>

void uform_schedule_resolve(uform_schedule_t *schedule) {
    if (schedule->learning_rate == 0) schedule->learning_rate = 1e-3f;
    if (schedule->min_learning_rate == 0) schedule->min_learning_rate = schedule->learning_rate / 10;
    if (schedule->steps == 0) schedule->steps = 10000;
    if (schedule->warmup_steps == 0) {
        schedule->warmup_steps = schedule->steps / 100;
        if (schedule->warmup_steps == 0) schedule->warmup_steps = 1;
    }
}

uform_status_t uform_schedule_check(const uform_schedule_t *schedule) {
    if (!isfinite(schedule->learning_rate) || schedule->learning_rate < 0)
        return uform_fail(UFORM_INVALID_ARGUMENT, "schedule.learning_rate: %g is not a finite non-negative rate",
                          (double)schedule->learning_rate);
    if (!isfinite(schedule->min_learning_rate) || schedule->min_learning_rate < 0 ||
        schedule->min_learning_rate > schedule->learning_rate)
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "schedule.min_learning_rate: %g must be finite and in [0, learning_rate]",
                          (double)schedule->min_learning_rate);
    if (schedule->warmup_steps > schedule->steps)
        return uform_fail(UFORM_INVALID_ARGUMENT, "schedule.warmup_steps: %zu is more than the %zu steps",
                          schedule->warmup_steps, schedule->steps);
    return UFORM_OK;
}

double uform_schedule_rate(const uform_schedule_t *schedule, uint64_t step) {
    double peak = schedule->learning_rate, floor_rate = schedule->min_learning_rate;
    if (step <= schedule->warmup_steps) return peak * (double)step / (double)schedule->warmup_steps;
    if (step >= schedule->steps) return floor_rate;
    double progress = (double)(step - schedule->warmup_steps) /
                      (double)(schedule->steps - schedule->warmup_steps);
    return floor_rate + 0.5 * (peak - floor_rate) * (1.0 + cos(M_PI * progress));
}

float uform_clip_factor(double squares, double max_norm, double *norm) {
    *norm = sqrt(squares);
    double factor = max_norm / (*norm + 1e-6);
    return factor < 1.0 ? (float)factor : 1.0f;
}
