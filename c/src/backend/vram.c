/* vram.c: the VRAM entry points that need the CUDA backend: executors over
 * GPUs, models and trainers on one, and what they refuse (vram.h). It lives
 * here rather than in core/, model/ or train/ because it asks the CUDA backend
 * (c/cuda/), which those layers do not know.
 *
 * A VRAM executor is a RAM executor (its threads decode media and run
 * submitted jobs) that also holds one CUDA backend per listed GPU: a stream,
 * a cuBLASLt handle and workspace. A VRAM model's weights are on each GPU it
 * was loaded on, and its verbs run on the stream of the executor it was loaded with, or of the
 * VRAM executor a call names when that executor holds the same GPU; a model
 * on several GPUs is a copy on each (model.h: replicas), its verbs' batches
 * spread over them (encode/encode_batches.c). A VRAM trainer is the trainer
 * on that backend (train/trainer_on_device.h). */
#include "backend/vram.h"
#include "model/model.h"
#include "train/trainer_on_device.h"

#include <stdio.h>
#include <stdlib.h>

#ifdef UFORM_HAVE_CUDA
#include "../../cuda/cuda_backend.h"   /* c/cuda/ */
#endif

/* A GPU the executor was not made with (loads and device arenas). */
#define UFORM_NOT_HELD "executor: it does not hold GPU %u (make it with Executor.for_vram listing it)"

bool uform_vram_built(void) {
#ifdef UFORM_HAVE_CUDA
    return true;
#else
    return false;
#endif
}

size_t uform_vram_devices(void) {
#ifdef UFORM_HAVE_CUDA
    char saved[512];
    snprintf(saved, sizeof(saved), "%s", uform_last_error());
    size_t count = 0;
    if (uform_cuda_devices(&count) != UFORM_OK) count = 0;
    uform_set_error_text(saved);   /* a query, not a failure */
    return count;
#else
    return 0;
#endif
}

static const char *const uform_gpu_class_names[] = {"none", "AMPERE", "ADA", "HOPPER", "BLACKWELL"};

const char *uform_gpu_class_name(uform_gpu_class_t gpu_class) {
    return (unsigned)gpu_class < 5 ? uform_gpu_class_names[gpu_class] : "unknown";
}

#ifndef UFORM_HAVE_CUDA
/* UNSUPPORTED naming what a build without the CUDA backend lacks. */
static uform_status_t uform_no_cuda(const char *verb) {
    return uform_fail(UFORM_UNSUPPORTED,
                      "%s: this build of libuform has no GPU backend (nvcc and the nvidia-cublas wheel were "
                      "not found when it was built)",
                      verb);
}
#endif

#ifdef UFORM_HAVE_CUDA

/* ---- VRAM executors ---------------------------------------------------------------- */

typedef struct {
    uint32_t gpu;                  /* the CUDA runtime's index */
    uform_gpu_class_t gpu_class;
    uform_backend_t backend;       /* its stream */
} uform_vram_device_t;

typedef struct {
    size_t count;
    uform_vram_device_t devices[];
} uform_vram_devices_t;

static void uform_vram_devices_release(void *attachment) {
    uform_vram_devices_t *devices = attachment;
    for (size_t i = 0; i < devices->count; i++)
        if (devices->devices[i].backend.ops) uform_cuda_backend_free(&devices->devices[i].backend);
    free(devices);
}

static const uform_vram_device_t *uform_vram_device_of(const uform_executor_t *executor, uint32_t gpu) {
    const uform_vram_devices_t *devices = uform_executor_devices(executor);
    for (size_t i = 0; devices && i < devices->count; i++)
        if (devices->devices[i].gpu == gpu) return &devices->devices[i];
    return NULL;
}

/* Checks a device list against the visible GPUs: each listed once and present. */
static uform_status_t uform_check_devices(const char *verb, const uint32_t *devices, size_t count,
                                          size_t visible) {
    for (size_t i = 0; i < count; i++) {
        if (devices[i] >= visible)
            return uform_fail(UFORM_INVALID_ARGUMENT, "%s: devices[%zu] = %u, but %zu GPU%s visible", verb, i,
                              devices[i], visible, visible == 1 ? " is" : "s are");
        for (size_t j = 0; j < i; j++)
            if (devices[i] == devices[j])
                return uform_fail(UFORM_INVALID_ARGUMENT, "%s: GPU %u is listed twice", verb, devices[i]);
    }
    return UFORM_OK;
}

uform_status_t uform_executor_for_vram(const uint32_t *devices, size_t devices_count,
                                       uform_executor_t **result) {
    if (!result) return uform_fail(UFORM_INVALID_ARGUMENT, "executor: the out-pointer is NULL");
    *result = NULL;
    if (devices_count && !devices)
        return uform_fail(UFORM_INVALID_ARGUMENT, "devices: NULL with a count of %zu", devices_count);
    size_t visible = 0;
    if (uform_cuda_devices(&visible) != UFORM_OK) return uform_fail_context(UFORM_DEVICE, "Executor.for_vram");
    UFORM_TRY(uform_check_devices("Executor.for_vram", devices, devices_count, visible));
    size_t count = devices_count ? devices_count : visible;   /* none listed: every visible GPU */
    uform_vram_devices_t *attachment =
        uform_alloc_zeroed(1, sizeof(*attachment) + count * sizeof(uform_vram_device_t), "VRAM devices");
    if (!attachment) return UFORM_OUT_OF_MEMORY;
    uform_status_t status = UFORM_OK;
    for (size_t i = 0; i < count && status == UFORM_OK; i++) {
        uform_vram_device_t *device = &attachment->devices[i];
        device->gpu = devices_count ? devices[i] : (uint32_t)i;
        status = uform_cuda_device_class(device->gpu, &device->gpu_class, NULL, 0);
        if (status == UFORM_OK) status = uform_cuda_backend_init(device->gpu, &device->backend);
        attachment->count = i + 1;
    }
    uform_executor_t *executor = NULL;
    if (status == UFORM_OK) status = uform_executor_for_ram(0, NULL, 0, &executor);
    if (status != UFORM_OK) {
        uform_vram_devices_release(attachment);
        return status;
    }
    /* operations the CUDA backend lends from the CPU's run on these threads */
    for (size_t i = 0; i < count; i++) attachment->devices[i].backend.executor = executor;
    uform_executor_attach(executor, attachment, uform_vram_devices_release);
    *result = executor;
    return UFORM_OK;
}

size_t uform_vram_executor_gpus(const uform_executor_t *executor, uform_gpu_class_t *gpu_class) {
    const uform_vram_devices_t *devices = uform_executor_devices(executor);
    *gpu_class = UFORM_GPU_CLASS_NONE;
    for (size_t i = 0; devices && i < devices->count; i++)
        if (i == 0 || devices->devices[i].gpu_class < *gpu_class) *gpu_class = devices->devices[i].gpu_class;
    return devices ? devices->count : 0;
}

bool uform_vram_backend(const uform_executor_t *executor, uint32_t gpu, uform_backend_t *backend) {
    const uform_vram_device_t *device = uform_vram_device_of(executor, gpu);
    if (device) *backend = device->backend;
    return device != NULL;
}

size_t uform_vram_executor_backends(const uform_executor_t *executor, uform_backend_t *backends, size_t room) {
    const uform_vram_devices_t *devices = executor ? uform_executor_devices(executor) : NULL;
    size_t count = devices ? devices->count : 0;
    for (size_t i = 0; i < count && i < room; i++) backends[i] = devices->devices[i].backend;
    return count;
}

bool uform_vram_first_backend(const uform_executor_t *executor, uform_backend_t *backend) {
    const uform_vram_devices_t *devices = executor ? uform_executor_devices(executor) : NULL;
    if (!devices || devices->count == 0) return false;
    *backend = devices->devices[0].backend;
    return true;
}

/* ---- VRAM models --------------------------------------------------------------------- */


/* The checks of a VRAM load before its checkpoint is read: a GPU is there,
 * the devices exist, each listed once, the class is one. */
static uform_status_t uform_vram_load_check(const char *verb, const uint32_t *devices, size_t devices_count,
                                            uform_gpu_class_t gpu_class) {
    size_t visible = 0;
    if (uform_cuda_devices(&visible) != UFORM_OK) return uform_fail_context(UFORM_DEVICE, verb);
    UFORM_TRY(uform_check_devices(verb, devices, devices_count, visible));
    if ((unsigned)gpu_class > UFORM_GPU_CLASS_BLACKWELL)
        return uform_fail(UFORM_INVALID_ARGUMENT, "gpu_class: %d is not a GPU class", (int)gpu_class);
    return UFORM_OK;
}

/* The GPUs a load puts copies on: those listed; none listed, every GPU of
 * the executor given, else GPU 0. *gpus is allocated. */
static uform_status_t uform_vram_load_gpus(const uint32_t *devices, size_t devices_count,
                                           const uform_executor_t *executor, uint32_t **gpus, size_t *count) {
    const uform_vram_devices_t *held = executor ? uform_executor_devices(executor) : NULL;
    *count = devices_count ? devices_count : held ? held->count : 1;
    *gpus = uform_alloc_zeroed(*count, sizeof(uint32_t), "GPU list");
    if (!*gpus) return UFORM_OUT_OF_MEMORY;
    for (size_t i = 0; i < *count; i++) (*gpus)[i] = devices_count ? devices[i] : held ? held->devices[i].gpu : 0;
    return UFORM_OK;
}

/* Loads a parsed checkpoint onto the GPUs a load names (uform_vram_load_gpus),
 * a whole copy on each, after uform_vram_load_check. */
static uform_status_t uform_vram_load(const char *verb, const uform_safetensors_t *file,
                                      const uint32_t *devices, size_t devices_count,
                                      uform_gpu_class_t gpu_class, uform_executor_t *executor,
                                      uform_scalar_t quantization, const uform_progress_t *progress,
                                      uform_model_t **result) {
    (void)verb;
    uint32_t *gpus = NULL;
    size_t count = 0;
    UFORM_TRY(uform_vram_load_gpus(devices, devices_count, executor, &gpus, &count));
    bool owned = executor == NULL;
    uform_status_t status = owned ? uform_executor_for_vram(gpus, count, &executor) : UFORM_OK;
    uform_backend_t *backends = status == UFORM_OK ? uform_alloc(count, sizeof(uform_backend_t), "GPU backends")
                                                   : NULL;
    if (status == UFORM_OK && !backends) status = UFORM_OUT_OF_MEMORY;
    /* every GPU held by the executor and able to run what is asked; the
     * model's class is the pin, else the lowest of its GPUs' */
    uform_gpu_class_t model_class = gpu_class;
    for (size_t i = 0; i < count && status == UFORM_OK; i++) {
        const uform_vram_device_t *device = uform_vram_device_of(executor, gpus[i]);
        if (!device) {
            status = uform_fail(
                UFORM_INVALID_ARGUMENT,
                uform_executor_devices(executor)
                    ? UFORM_NOT_HELD
                    : "executor: a RAM executor cannot hold a VRAM model on GPU %u (use Executor.for_vram)",
                gpus[i]);
            break;
        }
        if (gpu_class != UFORM_GPU_CLASS_NONE && gpu_class > device->gpu_class)
            status = uform_fail(UFORM_UNSUPPORTED, "gpu_class: GPU %u is %s and cannot run the %s class", gpus[i],
                                uform_gpu_class_name(device->gpu_class), uform_gpu_class_name(gpu_class));
        else if (quantization == UFORM_SCALAR_E4M3 && !device->backend.ops->pack_e4m3)
            status = uform_fail(UFORM_UNSUPPORTED,
                                "quantization: E4M3 weights are not built yet on the CUDA backend (docs/gpu.md); "
                                "load BF16");
        if (gpu_class == UFORM_GPU_CLASS_NONE && (i == 0 || device->gpu_class < model_class))
            model_class = device->gpu_class;
        backends[i] = device->backend;
    }
    uform_model_t *model = NULL;
    if (status == UFORM_OK)
        status = uform_model_load_on_devices(file, backends, count, quantization, executor, progress, &model);
    free(backends);
    if (status != UFORM_OK) {
        free(gpus);
        if (owned) uform_executor_free(executor);
        return status;
    }
    for (size_t i = 0; i < count; i++) {
        uform_model_t *copy = (uform_model_t *)uform_model_replica(model, i);
        copy->gpu_class = model_class;
        copy->gpu_device = gpus[i];
    }
    free(gpus);
    model->owns_executor = owned;
    *result = model;
    return UFORM_OK;
}

#endif /* UFORM_HAVE_CUDA */

/* ---- device arenas ----------------------------------------------------------------- */

uform_status_t uform_arena_init_vram(uform_arena_t **result, const uform_executor_t *executor, uint32_t device) {
    if (!result) return uform_fail(UFORM_INVALID_ARGUMENT, "arena: the out-pointer is NULL");
    *result = NULL;
    if (!executor) return uform_fail(UFORM_INVALID_ARGUMENT, "executor: NULL");
#ifdef UFORM_HAVE_CUDA
    if (!uform_executor_devices(executor))
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "executor: a RAM executor holds no GPU; a device arena needs a VRAM executor "
                          "(Executor.for_vram) holding GPU %u",
                          device);
    if (!uform_vram_device_of(executor, device))
        return uform_fail(UFORM_INVALID_ARGUMENT, UFORM_NOT_HELD, device);
    uform_arena_memory_t memory = {uform_cuda_arena_alloc, uform_cuda_arena_free, device};
    return uform_arena_init_device(result, &memory);
#else
    (void)device;
    return uform_no_cuda("uform_arena_init_vram");
#endif
}

uform_status_t uform_model_load_vram(const char *path, const uint32_t *devices, size_t devices_count,
                                     uform_gpu_class_t gpu_class, uform_executor_t *executor,
                                     uform_scalar_t quantization, const uform_progress_t *progress,
                                     uform_model_t **result) {
    if (!result) return uform_fail(UFORM_INVALID_ARGUMENT, "model: the out-pointer is NULL");
    *result = NULL;
    if (!path) return uform_fail(UFORM_INVALID_ARGUMENT, "path: NULL");
    if (devices_count && !devices)
        return uform_fail(UFORM_INVALID_ARGUMENT, "devices: NULL with a count of %zu", devices_count);
#ifdef UFORM_HAVE_CUDA
    UFORM_TRY(uform_vram_load_check("Model.load_vram", devices, devices_count, gpu_class));
    uform_safetensors_t file;
    memset(&file, 0, sizeof(file));
    uform_status_t status = uform_safetensors_open(path, &file);
    if (status == UFORM_OK)
        status = uform_vram_load("Model.load_vram", &file, devices, devices_count, gpu_class, executor,
                                 quantization, progress, result);
    uform_safetensors_close(&file);
    return status;
#else
    (void)gpu_class, (void)executor, (void)quantization, (void)progress;
    return uform_no_cuda("Model.load_vram");
#endif
}

uform_status_t uform_model_load_vram_buffer(const void *data, size_t size, const uint32_t *devices,
                                            size_t devices_count, uform_gpu_class_t gpu_class,
                                            uform_executor_t *executor, uform_scalar_t quantization,
                                            const uform_progress_t *progress,
                                            uform_model_t **result) {
    if (!result) return uform_fail(UFORM_INVALID_ARGUMENT, "model: the out-pointer is NULL");
    *result = NULL;
    if (!data && size) return uform_fail(UFORM_INVALID_ARGUMENT, "buffer: NULL with %zu bytes", size);
    if (devices_count && !devices)
        return uform_fail(UFORM_INVALID_ARGUMENT, "devices: NULL with a count of %zu", devices_count);
#ifdef UFORM_HAVE_CUDA
    UFORM_TRY(uform_vram_load_check("Model.load_vram_buffer", devices, devices_count, gpu_class));
    uform_safetensors_t file;
    memset(&file, 0, sizeof(file));
    uform_status_t status = uform_safetensors_parse(data, size, &file);
    if (status == UFORM_OK)
        status = uform_vram_load("Model.load_vram_buffer", &file, devices, devices_count, gpu_class, executor,
                                 quantization, progress, result);
    uform_safetensors_close(&file);
    return status;
#else
    (void)gpu_class, (void)executor, (void)quantization, (void)progress;
    return uform_no_cuda("Model.load_vram_buffer");
#endif
}

/* ---- VRAM trainers ------------------------------------------------------------------- */

uform_status_t uform_trainer_init_vram(uform_executor_t *executor, const uform_trainer_options_t *options,
                                       uform_trainer_t **result) {
    if (!result) return uform_fail(UFORM_INVALID_ARGUMENT, "trainer: the out-pointer is NULL");
    *result = NULL;
#ifdef UFORM_HAVE_CUDA
    size_t visible = 0;
    if (uform_cuda_devices(&visible) != UFORM_OK) return uform_fail_context(UFORM_DEVICE, "Trainer.init_vram");
    if (!executor) return uform_fail(UFORM_INVALID_ARGUMENT, "executor: NULL");
    if (!options) return uform_fail(UFORM_INVALID_ARGUMENT, "options: NULL");
    const uform_vram_devices_t *devices = uform_executor_devices(executor);
    if (!devices)
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "executor: a RAM executor cannot run a VRAM trainer; make one with Executor.for_vram "
                          "listing the GPU");
    if (devices->count == 1) return uform_trainer_init_on_device(executor, options, &devices->devices[0].backend, result);
    /* a replica per GPU, stepping together (train/replica_group.c) */
    uform_backend_t *backends = uform_alloc(devices->count, sizeof(uform_backend_t), "GPU backends");
    if (!backends) return UFORM_OUT_OF_MEMORY;
    for (size_t d = 0; d < devices->count; d++) backends[d] = devices->devices[d].backend;
    uform_status_t status = uform_trainer_init_on_devices(executor, options, backends, devices->count, result);
    free(backends);
    return status;
#else
    (void)executor, (void)options;
    return uform_no_cuda("Trainer.init_vram");
#endif
}

#ifndef UFORM_HAVE_CUDA
uform_status_t uform_executor_for_vram(const uint32_t *devices, size_t devices_count,
                                       uform_executor_t **result) {
    if (!result) return uform_fail(UFORM_INVALID_ARGUMENT, "executor: the out-pointer is NULL");
    *result = NULL;
    if (devices_count && !devices)
        return uform_fail(UFORM_INVALID_ARGUMENT, "devices: NULL with a count of %zu", devices_count);
    return uform_no_cuda("Executor.for_vram");
}

size_t uform_vram_executor_gpus(const uform_executor_t *executor, uform_gpu_class_t *gpu_class) {
    (void)executor;
    *gpu_class = UFORM_GPU_CLASS_NONE;
    return 0;
}

bool uform_vram_backend(const uform_executor_t *executor, uint32_t gpu, uform_backend_t *backend) {
    (void)executor, (void)gpu, (void)backend;
    return false;
}

bool uform_vram_first_backend(const uform_executor_t *executor, uform_backend_t *backend) {
    (void)executor, (void)backend;
    return false;
}

size_t uform_vram_executor_backends(const uform_executor_t *executor, uform_backend_t *backends, size_t room) {
    (void)executor, (void)backends, (void)room;
    return 0;
}
#endif
