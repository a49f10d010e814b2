/* vram.h: the one place that knows whether this build has the CUDA backend
 * and whether the machine has a GPU: VRAM executors and models (vram.c), and
 * the refusal of the VRAM trainer, not built yet (issue 11). */
#ifndef UFORM_VRAM_H
#define UFORM_VRAM_H

#include "backend/backend.h"

/* The refusal of `verb` ("Trainer.init_vram"): UNSUPPORTED naming what is
 * missing in a build without the CUDA backend; with it, DEVICE "no GPU found"
 * when the runtime sees none, INVALID_ARGUMENT for a listed device that does
 * not exist, else UNSUPPORTED (the VRAM trainer is not built yet). devices
 * may be NULL. */
UFORM_INTERNAL uform_status_t uform_vram_refusal(const char *verb, const uint32_t *devices,
                                                 size_t devices_count);

/* GPUs the CUDA backend sees; 0 without it or without a GPU. Sets no error. */
UFORM_INTERNAL size_t uform_vram_devices(void);

/* The backend of GPU `gpu` in a VRAM executor: false (backend untouched) for
 * a RAM executor or one without that GPU. */
UFORM_INTERNAL bool uform_vram_backend(const uform_executor_t *executor, uint32_t gpu,
                                       uform_backend_t *backend);

/* Whether this build has the CUDA backend. */
UFORM_INTERNAL bool uform_vram_built(void);

#endif /* UFORM_VRAM_H */
