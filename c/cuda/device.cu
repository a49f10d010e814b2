/* device.cu: the CUDA backend's devices, its instances and its table of
 * operations (cuda_backend.h). Run on an H200 (tests/gpu/test_cuda_ops.c,
 * 2026-12-04); under the emulation against its stand-in runtime. */
#include "cuda_internal.h"
#ifndef UFORM_CUDA_EMULATION
#include "cublaslt.h"
#endif

extern "C" {
#include "backend/cpu/cpu_backend.h"
}

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void uform_cuda_record(uform_backend_t *b, uform_status_t status, const char *what, const char *detail) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    /* the first failure is the one reported: a later one (the frees after a
     * failed step, say) must not replace its message */
    if (context && context->failure != UFORM_OK) return;
    uform_fail(status, "CUDA backend: %s: %s", what, detail);
    if (!context) return;
    context->failure = status;
    snprintf(context->failure_message, sizeof(context->failure_message), "CUDA backend: %s: %s", what, detail);
}

extern "C" uform_status_t uform_cuda_devices(size_t *count) {
    *count = 0;
    int devices = 0;
    cudaError_t error = cudaGetDeviceCount(&devices);
    if (error != cudaSuccess) {
        cudaGetLastError();   /* clear the sticky-free error so later calls start clean */
        return uform_fail(UFORM_DEVICE, "no GPU found: the CUDA runtime says \"%s\"", cudaGetErrorString(error));
    }
    if (devices <= 0) return uform_fail(UFORM_DEVICE, "no GPU found: the CUDA runtime sees none");
    *count = (size_t)devices;
    return UFORM_OK;
}

extern "C" uform_status_t uform_cuda_device_class(uint32_t device, uform_gpu_class_t *gpu_class, char *name,
                                                  size_t name_bytes) {
    size_t count = 0;
    UFORM_TRY(uform_cuda_devices(&count));
    if (device >= count)
        return uform_fail(UFORM_INVALID_ARGUMENT, "devices: GPU %u does not exist (%zu visible)", device, count);
    cudaDeviceProp properties;
    cudaError_t error = cudaGetDeviceProperties(&properties, (int)device);
    if (error != cudaSuccess) {
        (void)cudaGetLastError();   /* answered here, not by a later launch check */
        return uform_fail(UFORM_DEVICE, "GPU %u: %s", device, cudaGetErrorString(error));
    }
    if (name && name_bytes) snprintf(name, name_bytes, "%s", properties.name);
    int major = properties.major, minor = properties.minor;
    if (major < 8)
        return uform_fail(UFORM_UNSUPPORTED, "GPU %u (%s) has compute capability %d.%d; uform needs 8.0 (Ampere) "
                          "or later", device, properties.name, major, minor);
    *gpu_class = major == 8 ? (minor == 9 ? UFORM_GPU_CLASS_ADA : UFORM_GPU_CLASS_AMPERE)
                 : major == 9 ? UFORM_GPU_CLASS_HOPPER
                              : UFORM_GPU_CLASS_BLACKWELL;
    return UFORM_OK;
}

extern "C" uform_status_t uform_cuda_backend_init(uint32_t device, uform_backend_t *backend) {
    memset(backend, 0, sizeof(*backend));
    uform_gpu_class_t gpu_class;
    UFORM_TRY(uform_cuda_device_class(device, &gpu_class, NULL, 0));
#ifndef UFORM_CUDA_EMULATION
    const uform_cublaslt_t *lt = uform_cublaslt();
    if (!lt) return UFORM_UNSUPPORTED;
#endif
    uform_cuda_context_t *context = (uform_cuda_context_t *)calloc(1, sizeof(uform_cuda_context_t));
    if (!context) return uform_fail(UFORM_OUT_OF_MEMORY, "CUDA backend: its context");
    context->device = (int)device;
    context->fp8_products = gpu_class >= UFORM_GPU_CLASS_ADA;   /* FP8 tensor cores (gemm_fp8.cu) */
    cudaError_t error = cudaSetDevice(context->device);
    if (error == cudaSuccess)
        error = cudaDeviceGetAttribute(&context->multiprocessors, cudaDevAttrMultiProcessorCount, context->device);
    if (error == cudaSuccess) error = cudaStreamCreateWithFlags(&context->stream, cudaStreamNonBlocking);
    if (error == cudaSuccess) error = cudaMalloc(&context->workspace, UFORM_CUDA_WORKSPACE_BYTES);
    if (error != cudaSuccess) {
        (void)cudaGetLastError();   /* answered here, not by a later launch check */
        if (context->stream) cudaStreamDestroy(context->stream);
        free(context);
        return uform_fail(UFORM_DEVICE, "GPU %u: %s", device, cudaGetErrorString(error));
    }
#ifndef UFORM_CUDA_EMULATION
    cublasStatus_t status = lt->create(&context->lt);
    if (status != CUBLAS_STATUS_SUCCESS) {
        cudaFree(context->workspace);
        cudaStreamDestroy(context->stream);
        free(context);
        return uform_fail(UFORM_DEVICE, "GPU %u: cublasLtCreate failed (%s)", device, lt->status_string(status));
    }
#endif
    pthread_mutex_init(&context->lock, NULL);
    backend->ops = &uform_cuda_backend_ops;
    backend->device = context;
    backend->failure = UFORM_OK;
    return UFORM_OK;
}

extern "C" void uform_cuda_backend_free(uform_backend_t *backend) {
    uform_cuda_context_t *context = uform_cuda_context(backend);
    if (!context) return;
    cudaSetDevice(context->device);
    cudaStreamSynchronize(context->stream);
    uform_cuda_gemm_plans_free(context);
#ifndef UFORM_CUDA_EMULATION
    uform_cublaslt()->destroy(context->lt);   /* loaded: the backend started */
#endif
    cudaFree(context->workspace);
    uform_cuda_buffer_free(&context->bf16_rows);
    uform_cuda_buffer_free(&context->bf16_weights);
    uform_cuda_buffer_free(&context->bf16_gradients);
    uform_cuda_buffer_free(&context->fp8_rows);
    uform_cuda_buffer_free(&context->fp8_product);
    uform_cuda_buffer_free(&context->operand_f32);
    uform_cuda_buffer_free(&context->rotated_qkv);
    uform_cuda_buffer_free(&context->bias_bf16);
    uform_cuda_buffer_free(&context->column_partials);
    uform_cuda_buffer_free(&context->loss_rows);
    uform_cuda_buffer_free(&context->choices_loss);
    uform_cuda_buffer_free(&context->pair_loss);
    uform_cuda_buffer_free(&context->choices);
    uform_cuda_buffer_free(&context->converted_rows);
    uform_cuda_buffer_free(&context->attention_deltas);
    uform_cuda_buffer_free(&context->attention_bf16);
    uform_cuda_buffer_free(&context->attention_dout_bf16);
    cudaStreamDestroy(context->stream);
    pthread_mutex_destroy(&context->lock);
    free(context);
    backend->device = NULL;
}

/* One verb at a time: the stream's order is the verb's, the scratch is its
 * own, and the calling thread's current device is this backend's. */
static void uform_cuda_acquire(uform_backend_t *b) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    pthread_mutex_lock(&context->lock);
    uform_cuda_ok(b, cudaSetDevice(context->device), "cudaSetDevice");
}

static void uform_cuda_release(uform_backend_t *b) { pthread_mutex_unlock(&uform_cuda_context(b)->lock); }

/* The table: entries not built yet are NULL (cuda_backend.h lists them). */
static uform_backend_ops_t uform_cuda_ops_table(void) {
    uform_backend_ops_t ops;
    memset(&ops, 0, sizeof(ops));
    ops.name = "cuda";
    /* 32k rows at hidden 768: 2k rows (64 MiB) left an H200 idle between
     * launches (docs/benchmarks-gpu.md, 2026-12-04) */
    ops.forward_batch_bytes = (size_t)1 << 30;
    ops.alloc = uform_cuda_alloc;
    ops.free = uform_cuda_free;
    ops.upload = uform_cuda_upload;
    ops.download = uform_cuda_download;
    ops.copy = uform_cuda_copy;
    ops.zero = uform_cuda_zero;
    ops.synchronize = uform_cuda_synchronize;
    ops.acquire = uform_cuda_acquire;
    ops.release = uform_cuda_release;
    ops.download_rows = uform_cuda_download_rows;
    ops.convert_rows = uform_cuda_convert_rows;
    ops.choice_probabilities = uform_cuda_choice_probabilities;
    ops.contrastive_loss = uform_cuda_contrastive_loss;
    ops.late_interaction_loss = uform_cuda_late_interaction_loss;
    ops.maxsim = uform_cuda_maxsim;
    ops.choices_loss = uform_cuda_choices_loss;
    ops.reconstruction_loss = uform_cuda_reconstruction_loss;
    ops.pack = uform_cuda_pack;
    ops.pack_e4m3 = uform_cuda_pack_e4m3;
    ops.unpack_e4m3 = uform_cuda_unpack_e4m3;
    ops.packed_free = uform_cuda_packed_free;
    ops.gemm = uform_cuda_gemm;
    ops.linear = uform_cuda_linear;
    ops.linear_gelu = uform_cuda_linear_gelu;
    ops.linear_backward = uform_cuda_linear_backward;
    ops.layer_norm_forward_bf16 = uform_cuda_layer_norm_forward_bf16;
    ops.attention_forward_bf16 = uform_cuda_attention_forward_bf16;
    ops.linear_bf16 = uform_cuda_linear_bf16;
    ops.linear_gelu_bf16 = uform_cuda_linear_gelu_bf16;
    ops.linear_qkv_bf16 = uform_cuda_linear_qkv_bf16;
    ops.attention_forward_staged_bf16 = uform_cuda_attention_forward_staged_bf16;
    ops.gelu_forward_bf16 = uform_cuda_gelu_bf16;
    ops.linear_backward_bf16 = uform_cuda_linear_backward_bf16;
    ops.gelu_linear_backward_bf16 = uform_cuda_gelu_linear_backward_bf16;
    ops.rope_linear_backward_bf16 = uform_cuda_rope_linear_backward_bf16;
    ops.attention_forward_train_bf16 = uform_cuda_attention_forward_train_bf16;
    ops.attention_backward_bf16 = uform_cuda_attention_backward_bf16;
    ops.layer_norm_forward = uform_cuda_layer_norm_forward;
    ops.layer_norm_backward = uform_cuda_layer_norm_backward;
    ops.gelu_forward = uform_cuda_gelu_forward;
    ops.gelu_backward = uform_cuda_gelu_backward;
    ops.rope_tables = uform_cuda_rope_tables;
    ops.rope_forward = uform_cuda_rope_forward;
    ops.rope_backward = uform_cuda_rope_backward;
    ops.attention_scratch_bytes = uform_cuda_attention_scratch_bytes;
    ops.attention_forward = uform_cuda_attention_forward;
    ops.attention_backward = uform_cuda_attention_backward;
    ops.embedding_forward = uform_cuda_embedding_forward;
    ops.embedding_backward = uform_cuda_embedding_backward;
    ops.mean_pool_forward = uform_cuda_mean_pool_forward;
    ops.mean_pool_backward = uform_cuda_mean_pool_backward;
    ops.normalize_forward = uform_cuda_normalize_forward;
    ops.normalize_backward = uform_cuda_normalize_backward;
    ops.cross_entropy_forward = uform_cuda_cross_entropy_forward;
    ops.cross_entropy_backward = uform_cuda_cross_entropy_backward;
    ops.gather_rows = uform_cuda_gather_rows;
    ops.scatter_add_rows = uform_cuda_scatter_add_rows;
    ops.scatter_rows = uform_cuda_scatter_rows;
    ops.sum_rows = uform_cuda_sum_rows;
    ops.sum_squares = uform_cuda_sum_squares;
    ops.adamw = uform_cuda_adamw;
    ops.adamw_first_non_finite = uform_cuda_adamw_first_non_finite;
    return ops;
}

/* (a function, not a lambda: g++ gives a lambda's locals inside an extern "C"
 * initializer C linkage, so the emulated build would not link) */
extern "C" const uform_backend_ops_t uform_cuda_backend_ops = uform_cuda_ops_table();
