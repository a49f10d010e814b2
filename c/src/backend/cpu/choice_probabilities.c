/* choice_probabilities.c: the CPU backend's choices head for inference
 * (backend.h: choice_probabilities, text_choose's scoring of each MASK row).
 * Each item is owned by one task, its choices scored in order. */
#include "backend/cpu/rows.h"

#include <math.h>

typedef struct {
    const float *states;
    size_t hidden;
    const uform_segment_t *segments;
    const uform_tape_t *choices;
    size_t first_entry;
    const uint32_t *groups;
    const float *table, *bias, *log_temperature;
    const size_t *offsets;
    float *probabilities;
} uform_choose_task_t;

/* Probabilities of items [begin, end). */
UFORM_VECTOR_CLONES
static void uform_choose_items(void *context, size_t begin, size_t end, size_t thread) {
    (void)thread;
    const uform_choose_task_t *task = context;
    size_t hidden = task->hidden;
    const uint8_t *data = task->choices->data;
    for (size_t s = begin; s < end; s++) {
        const uform_segment_t *segment = &task->segments[s];
        const float *mask = task->states + (segment->begin + segment->length - 1) * hidden;
        size_t entry = task->choices->count == 1 ? 0 : task->first_entry + s;
        const uint8_t *bytes = data + task->choices->offsets[entry];
        size_t n = task->offsets[s + 1] - task->offsets[s];
        float *p = task->probabilities + task->offsets[s];

        uint32_t group = task->groups ? task->groups[s] : 0;
        float temperature = task->log_temperature ? expf(task->log_temperature[group]) : 1.0f;
        float largest = -INFINITY;
        for (size_t c = 0; c < n; c++) {
            const float *row = task->table + (size_t)bytes[c] * hidden;
            p[c] = (uform_dot_lanes(mask, row, hidden) + task->bias[bytes[c]]) / temperature;
            if (p[c] > largest) largest = p[c];
        }
        float sum = 0;
        for (size_t c = 0; c < n; c++) {
            p[c] = expf(p[c] - largest);
            sum += p[c];
        }
        for (size_t c = 0; c < n; c++) p[c] /= sum;
    }
}

void uform_cpu_choice_probabilities(uform_backend_t *b, const float *states, size_t hidden,
                                    const uform_segment_t *segments, size_t count,
                                    const uform_tape_t *choices, size_t first_entry,
                                    const uint32_t *groups, const float *table, const float *bias,
                                    const float *log_temperature, const size_t *offsets,
                                    float *probabilities) {
    uform_choose_task_t task = {states, hidden, segments, choices, first_entry, groups, table,
                                bias, log_temperature, offsets, probabilities};
    uform_parallel_for(b->executor, count, 16, uform_choose_items, &task);
}
