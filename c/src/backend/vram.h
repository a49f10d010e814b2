/* vram.h: the one place that knows whether this build has the CUDA backend
 * and whether the machine has a GPU: VRAM executors, models and trainers
 * (vram.c; their entry points are uform.h's). */
#ifndef UFORM_VRAM_H
#define UFORM_VRAM_H

#include "backend/backend.h"

/* GPUs the CUDA backend sees; 0 without it or without a GPU. Sets no error. */
UFORM_INTERNAL size_t uform_vram_devices(void);

/* The backend of GPU `gpu` in a VRAM executor: false (backend untouched) for
 * a RAM executor or one without that GPU. */
UFORM_INTERNAL bool uform_vram_backend(const uform_executor_t *executor, uint32_t gpu,
                                       uform_backend_t *backend);

/* The backend of the first GPU a VRAM executor lists: false (backend
 * untouched) for a RAM executor. */
UFORM_INTERNAL bool uform_vram_first_backend(const uform_executor_t *executor, uform_backend_t *backend);

/* The backends of a VRAM executor's GPUs in its order, at most `room` into
 * backends; answers their count (0 for a RAM executor). */
UFORM_INTERNAL size_t uform_vram_executor_backends(const uform_executor_t *executor, uform_backend_t *backends,
                                                   size_t room);

/* The GPUs of a VRAM executor: their count (0 for a RAM executor) and the
 * lowest class among them (NONE for a RAM executor). */
UFORM_INTERNAL size_t uform_vram_executor_gpus(const uform_executor_t *executor, uform_gpu_class_t *gpu_class);

/* "AMPERE", "HOPPER", ... as uform.h's enum names them ("none" for NONE). */
UFORM_INTERNAL const char *uform_gpu_class_name(uform_gpu_class_t gpu_class);

/* Whether this build has the CUDA backend. */
UFORM_INTERNAL bool uform_vram_built(void);

#endif /* UFORM_VRAM_H */
