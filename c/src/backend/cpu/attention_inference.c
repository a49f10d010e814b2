/* attention_inference.c: attention for inference on the CPU classes: every
 * (segment, head, block of 64 queries) is one task of the class's attention
 * kernel (attention.c, attention_avx512.c, attention_bf16.c), so one long item
 * spreads over every thread. No logsumexp is kept; training's attention
 * (attention_train.c) keeps it for the backward. */
#include "backend/cpu/rows.h"
#include "backend/cpu/kernels.h"

/* Queries per attention task: at least 64, doubled while every thread still
 * gets 8 tasks, since each task packs its item's keys and values for its head
 * again (a fifth of the kernel's time at 64 queries of a 300-token item). The
 * split never changes a result: each output row is one fixed chain. */
#define UFORM_QUERIES_PER_TASK_MIN 64
#define UFORM_TASKS_PER_THREAD 8

static size_t uform_attention_tasks_for(const uform_segment_t *segments, size_t count,
                                        size_t heads, size_t queries_per_task) {
    size_t tasks = 0;
    for (size_t s = 0; s < count; s++)
        tasks += (segments[s].length + queries_per_task - 1) / queries_per_task * heads;
    return tasks;
}

/* The scratch one call takes: the task table, then every thread's kernel
 * scratch (64-byte aligned slices). */
size_t uform_attention_inference_scratch_bytes(size_t threads, size_t segments, size_t longest) {
    size_t table = ((segments + 1) * sizeof(size_t) + 63) & ~(size_t)63;
    return table + threads * uform_attention_scratch_floats(longest) * sizeof(float);
}

typedef struct {
    const uform_cpu_kernels_t *kernels;
    const uform_segment_t *segments;
    const size_t *first_task;  /* [segments + 1]: tasks before each segment */
    const float *qkv;
    float *out;                /* [rows, H] */
    size_t hidden, heads;
    float *scratch;            /* [threads][uform_attention_scratch_floats(longest)] */
    size_t scratch_per_thread;
    size_t queries_per_task;
} uform_attention_task_t;

/* Task t is (segment, head, block of queries), segments in order. */
static void uform_attention_tasks(void *context, size_t begin, size_t end, size_t thread) {
    const uform_attention_task_t *task = context;
    size_t hidden = task->hidden, heads = task->heads, stride = 3 * hidden;
    float *scratch = task->scratch + thread * task->scratch_per_thread;
    size_t segment_index = 0;
    for (size_t t = begin; t < end; t++) {
        while (task->first_task[segment_index + 1] <= t) segment_index++;
        const uform_segment_t *segment = &task->segments[segment_index];
        size_t local = t - task->first_task[segment_index];
        size_t head = local % heads, block = local / heads;
        size_t first = block * task->queries_per_task;
        size_t last = first + task->queries_per_task < segment->length
                          ? first + task->queries_per_task : segment->length;
        const float *q = task->qkv + segment->begin * stride + head * UFORM_HEAD_WIDTH;
        task->kernels->attention(q, q + hidden, q + 2 * hidden, stride, segment->length, first,
                                 last, task->out + segment->begin * hidden + head * UFORM_HEAD_WIDTH,
                                 hidden, scratch);
    }
}

void uform_attention_inference(const uform_cpu_kernels_t *kernels, uform_executor_t *executor,
                               const float *qkv, size_t hidden, const uform_segment_t *segments,
                               size_t count, float *out, void *scratch) {
    size_t longest = 0;
    for (size_t s = 0; s < count; s++)
        if (segments[s].length > longest) longest = segments[s].length;
    size_t *first_task = scratch;
    size_t table = ((count + 1) * sizeof(size_t) + 63) & ~(size_t)63;
    size_t heads = hidden / UFORM_HEAD_WIDTH;
    size_t threads = executor ? uform_executor_width(executor) : 1;
    size_t queries_per_task = UFORM_QUERIES_PER_TASK_MIN;
    while (queries_per_task < longest &&
           uform_attention_tasks_for(segments, count, heads, 2 * queries_per_task) >=
               UFORM_TASKS_PER_THREAD * threads)
        queries_per_task *= 2;
    first_task[0] = 0;
    for (size_t s = 0; s < count; s++) {
        size_t blocks = (segments[s].length + queries_per_task - 1) / queries_per_task;
        first_task[s + 1] = first_task[s] + blocks * heads;
    }
    uform_attention_task_t task = {kernels, segments, first_task, qkv, out, hidden, heads,
                                   (float *)((uint8_t *)scratch + table),
                                   uform_attention_scratch_floats(longest), queries_per_task};
    uform_parallel_for(executor, first_task[count], 1, uform_attention_tasks, &task);
}
