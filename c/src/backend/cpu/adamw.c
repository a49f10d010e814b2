/* adamw.c: the CPU backend's AdamW update and its read-only overflow check
 * (backend.h: adamw, adamw_first_non_finite), as torch.optim.AdamW: decoupled
 * decay, bias-corrected moments (docs/training.md section 4). Elementwise, so
 * the result does not depend on the thread count. */
#include "backend/cpu/rows.h"

#include <math.h>
#include <stdatomic.h>

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
