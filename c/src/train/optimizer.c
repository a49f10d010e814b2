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

float uform_clip_factor(const float *gradients, size_t count, double max_norm, double *norm) {
    double squares = 0;
    for (size_t i = 0; i < count; i++) squares += (double)gradients[i] * gradients[i];
    *norm = sqrt(squares);
    double factor = max_norm / (*norm + 1e-6);
    return factor < 1.0 ? (float)factor : 1.0f;
}

typedef struct {
    float *parameters, *first, *second;
    const float *gradients;
    const uint8_t *decay;
    float gradient_scale, learning_rate, step_size, correction2_sqrt;
    atomic_size_t first_non_finite;   /* the check pass: lowest index seen, SIZE_MAX none */
} uform_adamw_task_t;

/* One element's update, shared by the check and the update so they agree bit for bit. */
static inline float uform_adamw_element(const uform_adamw_task_t *task, size_t i, float *m_out,
                                        float *v_out) {
    float g = task->gradients[i] * task->gradient_scale;
    float p = task->parameters[i];
    if (task->decay[i]) p *= 1.0f - task->learning_rate * UFORM_WEIGHT_DECAY;
    float m = task->first[i] + (g - task->first[i]) * (1.0f - UFORM_ADAM_BETA1);
    float v = task->second[i] * UFORM_ADAM_BETA2 + g * g * (1.0f - UFORM_ADAM_BETA2);
    float denominator = sqrtf(v) / task->correction2_sqrt + UFORM_ADAM_EPSILON;
    *m_out = m;
    *v_out = v;
    return p - task->step_size * (m / denominator);
}

static void uform_adamw_range(void *context, size_t begin, size_t end, size_t thread) {
    (void)thread;
    const uform_adamw_task_t *task = context;
    for (size_t i = begin; i < end; i++) {
        float m, v;
        task->parameters[i] = uform_adamw_element(task, i, &m, &v);
        task->first[i] = m;
        task->second[i] = v;
    }
}

static void uform_adamw_check_range(void *context, size_t begin, size_t end, size_t thread) {
    (void)thread;
    uform_adamw_task_t *task = context;
    /* a branch-free count first, so the common all-finite case vectorises */
    size_t bad = 0;
    for (size_t i = begin; i < end; i++) {
        float m, v;
        float p = uform_adamw_element(task, i, &m, &v);
        bad += !isfinite(p) | !isfinite(m) | !isfinite(v);
    }
    if (!bad) return;
    for (size_t i = begin; i < end; i++) {
        float m, v;
        float p = uform_adamw_element(task, i, &m, &v);
        if (isfinite(p) && isfinite(m) && isfinite(v)) continue;
        size_t seen = atomic_load(&task->first_non_finite);
        while (i < seen && !atomic_compare_exchange_weak(&task->first_non_finite, &seen, i)) {
        }
        return;
    }
}

static void uform_adamw_task(uform_adamw_task_t *task, float *parameters, const float *gradients,
                             float gradient_scale, float *first_moment, float *second_moment,
                             const uint8_t *decay, uint64_t step, float learning_rate) {
    double correction1 = 1.0 - pow((double)UFORM_ADAM_BETA1, (double)step);
    double correction2 = 1.0 - pow((double)UFORM_ADAM_BETA2, (double)step);
    task->parameters = parameters;
    task->first = first_moment;
    task->second = second_moment;
    task->gradients = gradients;
    task->decay = decay;
    task->gradient_scale = gradient_scale;
    task->learning_rate = learning_rate;
    task->step_size = (float)(learning_rate / correction1);
    task->correction2_sqrt = (float)sqrt(correction2);
    atomic_init(&task->first_non_finite, SIZE_MAX);
}

size_t uform_adamw_first_non_finite(uform_executor_t *executor, float *parameters, const float *gradients,
                                    float gradient_scale, float *first_moment, float *second_moment,
                                    const uint8_t *decay, size_t count, uint64_t step, float learning_rate) {
    uform_adamw_task_t task;
    uform_adamw_task(&task, parameters, gradients, gradient_scale, first_moment, second_moment, decay, step,
                     learning_rate);
    uform_parallel_for(executor, count, 4096, uform_adamw_check_range, &task);
    return atomic_load(&task.first_non_finite);
}

void uform_adamw(uform_executor_t *executor, float *parameters, const float *gradients,
                 float gradient_scale, float *first_moment, float *second_moment,
                 const uint8_t *decay, size_t count, uint64_t step, float learning_rate) {
    uform_adamw_task_t task;
    uform_adamw_task(&task, parameters, gradients, gradient_scale, first_moment, second_moment, decay, step,
                     learning_rate);
    uform_parallel_for(executor, count, 4096, uform_adamw_range, &task);
}
