/* vram.c: the VRAM entry points' answers until the VRAM verbs exist (vram.h),
 * and uform_executor_for_vram, which lives here rather than in core/ because it
 * asks the CUDA backend (core/ knows no backend). */
#include "backend/vram.h"

#include <stdio.h>

#ifdef UFORM_HAVE_CUDA
#include "../../cuda/cuda_backend.h"   /* c/cuda/ */
#endif

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

uform_status_t uform_vram_refusal(const char *verb, const uint32_t *devices, size_t devices_count) {
#ifdef UFORM_HAVE_CUDA
    size_t count = 0;
    if (uform_cuda_devices(&count) != UFORM_OK) return uform_fail_context(UFORM_DEVICE, verb);
    for (size_t i = 0; devices && i < devices_count; i++)
        if (devices[i] >= count)
            return uform_fail(UFORM_INVALID_ARGUMENT, "%s: devices[%zu] = %u, but %zu GPUs are visible", verb, i,
                              devices[i], count);
    return uform_fail(UFORM_UNSUPPORTED,
                      "%s: the CUDA backend of this build has its operations (make test-gpu) but no VRAM "
                      "executors, models or trainers yet; %zu GPU%s visible",
                      verb, count, count == 1 ? " is" : "s are");
#else
    (void)devices, (void)devices_count;
    return uform_fail(UFORM_UNSUPPORTED,
                      "%s: this build of libuform has no GPU backend (nvcc and the nvidia-cublas wheel were "
                      "not found when it was built)",
                      verb);
#endif
}

uform_status_t uform_executor_for_vram(const uint32_t *devices, size_t devices_count,
                                       uform_executor_t **result) {
    if (result) *result = NULL;
    if (devices_count && !devices)
        return uform_fail(UFORM_INVALID_ARGUMENT, "devices: NULL with a count of %zu", devices_count);
    return uform_vram_refusal("Executor.for_vram", devices, devices_count);
}
