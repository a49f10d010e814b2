/* vram.h: what every VRAM entry point answers until VRAM executors, models and
 * trainers exist (issue 11): the one place that knows whether this build has
 * the CUDA backend and whether the machine has a GPU. */
#ifndef UFORM_VRAM_H
#define UFORM_VRAM_H

#include "core/internal.h"

/* The refusal of `verb` ("Model.load_vram"): UNSUPPORTED naming what is
 * missing in a build without the CUDA backend; with it, DEVICE "no GPU found"
 * when the runtime sees none, INVALID_ARGUMENT for a listed device that does
 * not exist, else UNSUPPORTED (the backend's operations are built and tested
 * by make test-gpu; the VRAM verbs are not yet). devices may be NULL. */
UFORM_INTERNAL uform_status_t uform_vram_refusal(const char *verb, const uint32_t *devices,
                                                 size_t devices_count);

/* GPUs the CUDA backend sees; 0 without it or without a GPU. Sets no error. */
UFORM_INTERNAL size_t uform_vram_devices(void);

/* Whether this build has the CUDA backend. */
UFORM_INTERNAL bool uform_vram_built(void);

#endif /* UFORM_VRAM_H */
