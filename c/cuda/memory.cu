/* memory.cu: the CUDA backend's device memory (backend.h: alloc, free,
 * upload, download, copy, zero, synchronize). Transfers and fills are queued
 * on the backend's stream in call order; download waits for its bytes, since
 * the caller reads them on return. Run on an H200 (tests/gpu/test_cuda_ops.c,
 * 2026-12-04); under the emulation against its stand-in runtime. */
#include "cuda_internal.h"

void *uform_cuda_alloc(uform_backend_t *b, size_t bytes) {
    void *memory = NULL;
    cudaError_t error = cudaMalloc(&memory, bytes ? bytes : 1);   /* 256-byte aligned: >= the 64 promised */
    if (error != cudaSuccess) {
        (void)cudaGetLastError();   /* answered here (as uform_cuda_ok does) */
        uform_fail(error == cudaErrorMemoryAllocation ? UFORM_OUT_OF_MEMORY : UFORM_DEVICE,
                   "CUDA backend: cudaMalloc of %zu bytes: %s", bytes, cudaGetErrorString(error));
        return NULL;
    }
    (void)b;
    return memory;
}

/* The calling thread's current device set to `device` for a call and put back
 * after: a device arena is used from threads (the caller's own, with CUDA work
 * of its own) that no backend holds. */
static int uform_cuda_enter_device(uint32_t device) {
    int previous = -1;
    if (cudaGetDevice(&previous) != cudaSuccess) previous = -1, (void)cudaGetLastError();
    if (previous != (int)device) (void)cudaSetDevice((int)device);
    return previous;
}

static void uform_cuda_leave_device(uint32_t device, int previous) {
    if (previous >= 0 && previous != (int)device) (void)cudaSetDevice(previous);
}

extern "C" void *uform_cuda_arena_alloc(uint32_t device, size_t bytes, const char *what) {
    int previous = uform_cuda_enter_device(device);
    void *memory = NULL;
    cudaError_t error = cudaMalloc(&memory, bytes ? bytes : 1);
    uform_cuda_leave_device(device, previous);
    if (error == cudaSuccess) return memory;
    (void)cudaGetLastError();
    uform_fail(error == cudaErrorMemoryAllocation ? UFORM_OUT_OF_MEMORY : UFORM_DEVICE,
               "%s: cudaMalloc of %zu bytes on GPU %u: %s", what, bytes, device, cudaGetErrorString(error));
    return NULL;
}

extern "C" void uform_cuda_arena_free(uint32_t device, void *memory) {
    int previous = uform_cuda_enter_device(device);
    (void)cudaFree(memory);   /* waits for the GPU's work on it, as cudaFree does */
    uform_cuda_leave_device(device, previous);
}

void *uform_cuda_grow(uform_backend_t *b, uform_cuda_buffer_t *buffer, size_t bytes, const char *what) {
    if (bytes <= buffer->bytes && buffer->data) return buffer->data;
    if (buffer->data) {
        uform_cuda_ok(b, cudaStreamSynchronize(uform_cuda_context(b)->stream), what);
        uform_cuda_ok(b, cudaFree(buffer->data), what);
    }
    buffer->data = NULL;
    buffer->bytes = 0;
    if (!uform_cuda_ok(b, cudaMalloc(&buffer->data, bytes ? bytes : 1), what)) {
        buffer->data = NULL;
        return NULL;
    }
    buffer->bytes = bytes;
    return buffer->data;
}

void uform_cuda_buffer_free(uform_cuda_buffer_t *buffer) {
    if (buffer->data) cudaFree(buffer->data);   /* the stream was synchronized by the caller */
    buffer->data = NULL;
    buffer->bytes = 0;
}

/* The stream first: callers free a buffer right after queuing work that reads
 * it, and cudaFree only "may" synchronize (cuda_runtime_api.h). */
void uform_cuda_free(uform_backend_t *b, void *memory) {
    if (!memory) return;
    uform_cuda_ok(b, cudaStreamSynchronize(uform_cuda_context(b)->stream), "free");
    uform_cuda_ok(b, cudaFree(memory), "cudaFree");
}

void uform_cuda_upload(uform_backend_t *b, void *device, const void *host, size_t bytes) {
    if (!bytes) return;
    uform_cuda_ok(b, cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, uform_cuda_context(b)->stream),
                  "upload");
    /* the host buffer is the caller's again on return */
    uform_cuda_ok(b, cudaStreamSynchronize(uform_cuda_context(b)->stream), "upload");
}

void uform_cuda_download(uform_backend_t *b, void *host, const void *device, size_t bytes) {
    if (!bytes) return;
    cudaStream_t stream = uform_cuda_context(b)->stream;
    uform_cuda_ok(b, cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream), "download");
    uform_cuda_ok(b, cudaStreamSynchronize(stream), "download");
}

void uform_cuda_copy(uform_backend_t *b, void *destination, const void *source, size_t bytes) {
    if (!bytes) return;
    uform_cuda_ok(b, cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDeviceToDevice,
                                     uform_cuda_context(b)->stream),
                  "copy");
}

void uform_cuda_zero(uform_backend_t *b, void *memory, size_t bytes) {
    if (!bytes) return;
    uform_cuda_ok(b, cudaMemsetAsync(memory, 0, bytes, uform_cuda_context(b)->stream), "zero");
}

uform_status_t uform_cuda_synchronize(uform_backend_t *b) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    uform_cuda_ok(b, cudaStreamSynchronize(context->stream), "synchronize");
    uform_status_t status = context->failure;
    if (status != UFORM_OK) {
        uform_fail(status, "%s", context->failure_message);
        context->failure = UFORM_OK;
    } else if (b->failure != UFORM_OK) {   /* an operation lent from the CPU (on_host.c), error text set */
        status = b->failure;
    }
    b->failure = UFORM_OK;
    return status;
}
