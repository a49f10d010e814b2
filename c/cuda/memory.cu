/* memory.cu: the CUDA backend's device memory (backend.h: alloc, free,
 * upload, download, copy, zero, synchronize). Transfers and fills are queued
 * on the backend's stream in call order; download waits for its bytes, since
 * the caller reads them on return. Compiled, not yet run on a GPU. */
#include "cuda_internal.h"

extern "C" {
#include "backend/cpu/rows.h"
}

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

/* The FP32 rows come to the host (pinned staging, grown as needed) and are
 * converted there by the CPU backend's own conversion: the output bits of a
 * VRAM model then follow exactly the rules of a RAM model's, and the copy
 * across is of unit vectors, small next to the forward that made them. */
void uform_cuda_download_rows(uform_backend_t *b, const float *rows_f32, size_t rows, size_t width,
                              uform_scalar_t scalar, void *host, size_t row_bytes) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    size_t bytes = rows * width * sizeof(float);
    if (!bytes) return;
    if (bytes > context->host_rows_bytes) {
        cudaFreeHost(context->host_rows);
        context->host_rows = NULL;
        context->host_rows_bytes = 0;
        if (!uform_cuda_ok(b, cudaMallocHost((void **)&context->host_rows, bytes), "download_rows (staging)"))
            return;
        context->host_rows_bytes = bytes;
    }
    uform_cuda_download(b, context->host_rows, rows_f32, bytes);
    if (context->failure != UFORM_OK) return;
    uform_cpu_download_rows(b, context->host_rows, rows, width, scalar, host, row_bytes);
}
