/* gpu_attention_bench.c: the CUDA backend's tensor-core attention forward
 * with 64 query rows a block (one tile: the kernel as first run on an H200)
 * against 128 (two tiles, two row groups a warp: the default), side by side in
 * one process on the same inputs (uform_cuda_attention_query_rows; both give
 * the same bits, which tests/gpu/test_cuda_ops.c checks and this program
 * checks again on its own shapes).
 *
 * Workloads: inference (attention_forward_bf16: rotary staging, BF16 out) on
 * the text_encode benchmark's batches (bench/gpu_profile.py: hidden 768, texts
 * of 256-1024 tokens, about 34k rows a call, the backend's forward batch), and
 * the training step's forward (attention_forward with log-sum-exp) on 32
 * segments of 1024 rows. Each variant: 2 calls to warm up, then 5 rounds of 10
 * calls, alternating variants round by round; the best round, in ms a call.
 * TFLOP/s counts the useful products only: 4 L^2 x 64 per segment per head
 * (QK^T and PV).
 *
 * Then the training backward (attention_backward_bf16: dq, then dk and dv)
 * on the same 32 x 1024 rows with each 64 x 64 tile pair taken in 1 part (the
 * kernels as first run on a GPU), 2 or 4 (uform_cuda_attention_backward_parts,
 * attention_mma.cuh: fewer live registers, 3 blocks an SM instead of 2), dq
 * 64 query rows a block, and then the default: 4 parts with dq 128 rows a
 * block (two row groups a warp, uform_cuda_attention_dq_rows), and that with
 * dk, dv 128 keys a block too (uform_cuda_attention_dkv_rows); the same bits,
 * checked here again; timed the same way; TF/s of the useful products, 10 L^2 x 64 per segment
 * per head (QK^T, dO V^T, dV, dK, dQ; the kernels recompute two more). Built
 * and run by `make test-gpu`; without a GPU (or without the CUDA backend) it
 * says why and exits 0. */
#include "uform.h"

#include <stdio.h>

#ifndef UFORM_HAVE_CUDA
int main(void) {
    printf("skip gpu_attention_bench: this build has no CUDA backend\n");
    return 0;
}
#else
#include "backend/backend.h"
#include "../c/cuda/cuda_backend.h"
#include "gpu_bench_start.h"

#include <stdlib.h>
#include <string.h>

#define HIDDEN 768
#define ROUNDS 5
#define CALLS 10

typedef struct {
    const char *name;
    bool inference;            /* attention_forward_bf16, else attention_forward with log-sum-exp */
    uform_segment_t *segments; /* host */
    size_t count, rows, longest;
    double flops;              /* useful, a call */
} workload_t;

static uint64_t state = 0x9e3779b97f4a7c15ull;
static uint64_t next_random(void) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return state;
}

static void add_segment(workload_t *w, size_t length) {
    w->segments[w->count] = (uform_segment_t){w->rows, length, 1};
    w->count++, w->rows += length;
    if (length > w->longest) w->longest = length;
    w->flops += 4.0 * (double)length * (double)length * (double)HIDDEN;
}

/* One call of the workload's op on the GPU (queued). */
static void run_once(uform_backend_t *gpu, const workload_t *w, const uform_segment_t *gsegments, const float *gqkv,
                     const float *gtables, void *gout, float *glse) {
    if (w->inference)
        gpu->ops->attention_forward_bf16(gpu, gqkv, HIDDEN, gsegments, w->count, w->rows, w->longest, gtables,
                                         gtables + w->rows * UFORM_PAIRS, (uint16_t *)gout, NULL);
    else
        gpu->ops->attention_forward(gpu, gqkv, HIDDEN, gsegments, w->count, w->rows, w->longest, (float *)gout, glse,
                                    NULL);
}

static int bench(uform_backend_t *gpu, const workload_t *w) {
    size_t out_bytes = w->rows * HIDDEN * (w->inference ? 2 : 4), heads = HIDDEN / UFORM_HEAD_WIDTH;
    float *qkv = malloc(w->rows * 3 * HIDDEN * sizeof(float)), *tables = malloc(2 * w->rows * UFORM_PAIRS * 4);
    for (size_t i = 0; i < w->rows * 3 * HIDDEN; i++) qkv[i] = (float)((double)(next_random() >> 11) * 0x1p-53 * 4 - 2);
    for (size_t i = 0; i < 2 * w->rows * UFORM_PAIRS; i++) tables[i] = (float)((double)(next_random() >> 11) * 0x1p-53);
    uform_segment_t *gsegments = gpu->ops->alloc(gpu, w->count * sizeof(uform_segment_t));
    float *gqkv = gpu->ops->alloc(gpu, w->rows * 3 * HIDDEN * 4), *gtables = gpu->ops->alloc(gpu, 2 * w->rows * UFORM_PAIRS * 4);
    float *glse = gpu->ops->alloc(gpu, w->rows * heads * 4);
    void *gout[2] = {gpu->ops->alloc(gpu, out_bytes), gpu->ops->alloc(gpu, out_bytes)};
    void *host[2] = {malloc(out_bytes), malloc(out_bytes)};
    if (!gsegments || !gqkv || !gtables || !glse || !gout[0] || !gout[1] || !qkv || !tables || !host[0] || !host[1]) {
        printf("gpu_attention_bench: out of memory for %s: %s\n", w->name, uform_last_error());
        return 1;
    }
    gpu->ops->upload(gpu, gsegments, w->segments, w->count * sizeof(uform_segment_t));
    gpu->ops->upload(gpu, gqkv, qkv, w->rows * 3 * HIDDEN * 4);
    gpu->ops->upload(gpu, gtables, tables, 2 * w->rows * UFORM_PAIRS * 4);
    static const size_t query_rows[2] = {64, 128};
    double best[2] = {1e30, 1e30};
    for (int v = 0; v < 2; v++) {   /* warm-up, and the outputs the variants must agree on */
        uform_cuda_attention_query_rows(gpu, query_rows[v]);
        for (int i = 0; i < 2; i++) run_once(gpu, w, gsegments, gqkv, gtables, gout[v], glse);
        gpu->ops->download(gpu, host[v], gout[v], out_bytes);
    }
    uform_status_t status = gpu->ops->synchronize(gpu);
    bool same = memcmp(host[0], host[1], out_bytes) == 0;
    for (int round = 0; round < ROUNDS && status == UFORM_OK; round++)
        for (int v = 0; v < 2; v++) {
            uform_cuda_attention_query_rows(gpu, query_rows[v]);
            double start = now();
            for (int i = 0; i < CALLS; i++) run_once(gpu, w, gsegments, gqkv, gtables, gout[v], glse);
            status = gpu->ops->synchronize(gpu);
            double took = (now() - start) / CALLS;
            if (took < best[v]) best[v] = took;
        }
    uform_cuda_attention_query_rows(gpu, 0);
    if (status != UFORM_OK) {
        printf("gpu_attention_bench: %s failed: %s\n", w->name, uform_last_error());
        return 1;
    }
    printf("| %-40s | %6zu | %5zu | %8.3f | %8.3f | %6.1f | %6.1f | %5.2fx | %s |\n", w->name, w->rows, w->count,
           1e3 * best[0], 1e3 * best[1], w->flops / best[0] * 1e-12, w->flops / best[1] * 1e-12, best[0] / best[1],
           same ? "yes" : "NO");
    void *all[] = {gsegments, gqkv, gtables, glse, gout[0], gout[1]};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) gpu->ops->free(gpu, all[i]);
    free(qkv), free(tables), free(host[0]), free(host[1]);
    return same ? 0 : 1;
}

/* The training backward in 1, 2 and 4 parts a tile pair, dq 64 rows a
 * block, then the default (see above). */
static void backward_variant(uform_backend_t *gpu, int v) {
    static const size_t parts[] = {1, 2, 0, 0, 0}, dq_rows[] = {64, 64, 64, 0, 0}, dkv_rows[] = {0, 0, 0, 0, 128};
    uform_cuda_attention_backward_parts(gpu, parts[v]);
    uform_cuda_attention_dq_rows(gpu, dq_rows[v]);
    uform_cuda_attention_dkv_rows(gpu, dkv_rows[v]);
}

static int bench_backward(uform_backend_t *gpu, const workload_t *w) {
    enum { VARIANTS = 5, DEFAULT = 3 };
    size_t heads = HIDDEN / UFORM_HEAD_WIDTH, dqkv_bytes = w->rows * 3 * HIDDEN * 4;
    float *qkv = malloc(dqkv_bytes), *tables = malloc(2 * w->rows * UFORM_PAIRS * 4), *dout = malloc(w->rows * HIDDEN * 4);
    for (size_t i = 0; i < w->rows * 3 * HIDDEN; i++) qkv[i] = (float)((double)(next_random() >> 11) * 0x1p-53 * 4 - 2);
    for (size_t i = 0; i < 2 * w->rows * UFORM_PAIRS; i++) tables[i] = (float)((double)(next_random() >> 11) * 0x1p-53);
    for (size_t i = 0; i < w->rows * HIDDEN; i++) dout[i] = (float)((double)(next_random() >> 11) * 0x1p-53 * 2 - 1);
    uform_segment_t *gsegments = gpu->ops->alloc(gpu, w->count * sizeof(uform_segment_t));
    float *gqkv = gpu->ops->alloc(gpu, dqkv_bytes), *gtables = gpu->ops->alloc(gpu, 2 * w->rows * UFORM_PAIRS * 4);
    float *gout = gpu->ops->alloc(gpu, w->rows * HIDDEN * 4), *gdout = gpu->ops->alloc(gpu, w->rows * HIDDEN * 4);
    float *glse = gpu->ops->alloc(gpu, w->rows * heads * 4), *gdqkv = gpu->ops->alloc(gpu, dqkv_bytes);
    uint16_t *gqkv16 = gpu->ops->alloc(gpu, w->rows * 3 * HIDDEN * 2);
    float *host[VARIANTS];
    bool allocated = gsegments && gqkv && gtables && gout && gdout && glse && gdqkv && gqkv16 && qkv && tables && dout;
    for (int v = 0; v < VARIANTS; v++) allocated = (host[v] = malloc(dqkv_bytes)) && allocated;
    if (!allocated) {
        printf("gpu_attention_bench: out of memory for the backward: %s\n", uform_last_error());
        return 1;
    }
    gpu->ops->upload(gpu, gsegments, w->segments, w->count * sizeof(uform_segment_t));
    gpu->ops->upload(gpu, gqkv, qkv, dqkv_bytes);
    gpu->ops->upload(gpu, gtables, tables, 2 * w->rows * UFORM_PAIRS * 4);
    gpu->ops->upload(gpu, gdout, dout, w->rows * HIDDEN * 4);
    gpu->ops->attention_forward_train_bf16(gpu, gqkv, HIDDEN, gsegments, w->count, w->rows, w->longest, gtables,
                                           gtables + w->rows * UFORM_PAIRS, gqkv16, gout, glse);
    double best[VARIANTS];
    for (int v = 0; v < VARIANTS; v++) {   /* one call from zeros: the outputs the variants must agree on */
        best[v] = 1e30;
        backward_variant(gpu, v);
        gpu->ops->zero(gpu, gdqkv, dqkv_bytes);
        gpu->ops->attention_backward_bf16(gpu, gqkv16, gout, gdout, glse, HIDDEN, gsegments, w->count, w->rows,
                                          w->longest, gdqkv);
        gpu->ops->download(gpu, host[v], gdqkv, dqkv_bytes);
        gpu->ops->attention_backward_bf16(gpu, gqkv16, gout, gdout, glse, HIDDEN, gsegments, w->count, w->rows,
                                          w->longest, gdqkv);   /* warm-up */
    }
    uform_status_t status = gpu->ops->synchronize(gpu);
    bool same = true;
    for (int v = 1; v < VARIANTS; v++) same = same && memcmp(host[0], host[v], dqkv_bytes) == 0;
    for (int round = 0; round < ROUNDS && status == UFORM_OK; round++)
        for (int v = 0; v < VARIANTS; v++) {
            backward_variant(gpu, v);
            double start = now();
            for (int i = 0; i < CALLS; i++)
                gpu->ops->attention_backward_bf16(gpu, gqkv16, gout, gdout, glse, HIDDEN, gsegments, w->count,
                                                  w->rows, w->longest, gdqkv);
            status = gpu->ops->synchronize(gpu);
            double took = (now() - start) / CALLS;
            if (took < best[v]) best[v] = took;
        }
    uform_cuda_attention_backward_parts(gpu, 0);
    uform_cuda_attention_dq_rows(gpu, 0);
    uform_cuda_attention_dkv_rows(gpu, 0);
    if (status != UFORM_OK) {
        printf("gpu_attention_bench: the backward failed: %s\n", uform_last_error());
        return 1;
    }
    double flops = 2.5 * w->flops;   /* 10 L^2 x 64 a head against the forward's 4 */
    printf("| %-34s | %6zu |", w->name, w->rows);
    for (int v = 0; v < VARIANTS; v++) printf(" %6.3f (%5.1f) |", 1e3 * best[v], flops / best[v] * 1e-12);
    printf(" %5.2fx | %s |\n", best[0] / best[DEFAULT], same ? "yes" : "NO");
    void *all[] = {gsegments, gqkv, gtables, gout, gdout, glse, gdqkv, gqkv16};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) gpu->ops->free(gpu, all[i]);
    free(qkv), free(tables), free(dout);
    for (int v = 0; v < VARIANTS; v++) free(host[v]);
    return same ? 0 : 1;
}

int main(void) {
    uform_backend_t gpu;
    char name[256];
    int started = gpu_bench_start("gpu_attention_bench", &gpu, name, sizeof(name));
    if (started) return started < 0 ? 0 : 1;
    static uform_segment_t inference_segments[64], training_segments[32];
    workload_t inference = {"inference, 256-1024 rows a segment", true, inference_segments, 0, 0, 0, 0};
    while (inference.rows < 34000 - 1024) add_segment(&inference, 256 + (size_t)(next_random() % 769));
    workload_t training = {"training forward, 32 x 1024 rows", false, training_segments, 0, 0, 0, 0};
    for (int i = 0; i < 32; i++) add_segment(&training, 1024);
    printf("gpu_attention_bench on %s: the attention forward, 64 against 128 query rows a block (hidden %d, "
           "best of %d rounds of %d calls, alternating)\n\n",
           name, HIDDEN, ROUNDS, CALLS);
    printf("| %-40s | %6s | %5s | %8s | %8s | %6s | %6s | %6s | %s |\n|---|---:|---:|---:|---:|---:|---:|---:|---|\n",
           "workload", "rows", "segs", "64: ms", "128: ms", "TF/s", "TF/s", "speed", "same bits");
    int failures = bench(&gpu, &inference) + bench(&gpu, &training);
    training.name = "training backward, 32 x 1024 rows";
    printf("\nThe training backward (dq, then dk and dv), each tile pair in 1, 2 or 4 parts, dq 64 or 128 query rows "
           "a block: ms (TF/s)\n\n");
    printf("| %-34s | %6s | %14s | %14s | %14s | %14s | %14s | %6s | %s |\n"
           "|---|---:|---:|---:|---:|---:|---:|---:|---|\n",
           "workload", "rows", "1 part, 64", "2 parts, 64", "4 parts, 64", "4, dq 128: default", "4, dq+dkv 128",
           "speed", "same bits");
    failures += bench_backward(&gpu, &training);
    uform_cuda_backend_free(&gpu);
    return failures ? 1 : 0;
}
#endif
