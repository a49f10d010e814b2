/* gpu_bench_start.h: what the GPU microbenchmarks (gpu_attention_bench.c,
 * gpu_columns_bench.c) share: a monotonic clock, and starting the CUDA
 * backend on GPU 0 or saying why not. Include after backend.h and
 * cuda_backend.h, in a build with the CUDA backend. */
#ifndef UFORM_GPU_BENCH_START_H
#define UFORM_GPU_BENCH_START_H

#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The backend on GPU 0 into *gpu and the GPU's name: 0 when started, -1
 * when there is nothing to run on (a build without the CUDA backend, no GPU:
 * the reason printed as a skip, the program's exit status 0), 1 when the
 * backend failed to start (printed). */
static int gpu_bench_start(const char *program, uform_backend_t *gpu, char *name, size_t name_size) {
    size_t gpus = 0;
    uform_capabilities_t capabilities;
    if (uform_capabilities(&capabilities) != UFORM_OK || !capabilities.gpu_backend_built) {
        printf("skip %s: this build has no CUDA backend\n", program);
        return -1;
    }
    if (uform_cuda_devices(&gpus) != UFORM_OK) {
        printf("skip %s: %s\n", program, uform_last_error());
        return -1;
    }
    uform_gpu_class_t gpu_class;
    if (uform_cuda_device_class(0, &gpu_class, name, name_size) != UFORM_OK ||
        uform_cuda_backend_init(0, gpu) != UFORM_OK) {
        printf("%s: the CUDA backend did not start on GPU 0: %s\n", program, uform_last_error());
        return 1;
    }
    return 0;
}

#endif /* UFORM_GPU_BENCH_START_H */
