/* cpu_backend.h: how the rest of the library makes a CPU backend (backend.h).
 * The one header of backend/cpu/ that files outside backend/ include. */
#ifndef UFORM_CPU_BACKEND_H
#define UFORM_CPU_BACKEND_H

#include "backend/backend.h"

UFORM_INTERNAL extern const uform_backend_ops_t uform_cpu_backend_ops;

/* The class `requested` resolves to on this machine (AUTO: the best it runs):
 * INVALID_ARGUMENT for a value that is no class, UNSUPPORTED for one this CPU
 * or build cannot run. */
UFORM_INTERNAL uform_status_t uform_cpu_class_resolve(uform_cpu_class_t requested,
                                                      uform_cpu_class_t *resolved);

/* Bit (1u << class) for every class uform_cpu_class_resolve accepts when
 * pinned (built for this target and run by this CPU and OS; SERIAL always),
 * for uform_capabilities. Sets no error. */
UFORM_INTERNAL uint32_t uform_cpu_classes_runnable(void);

/* A CPU backend whose inference products and attention run the kernels of
 * `cpu_class` (AUTO: the best this machine runs; SERIAL when this build has no
 * table for it) on `executor`; executor may be NULL only for pack and packed_free. */
UFORM_INTERNAL uform_backend_t uform_cpu_backend(uform_cpu_class_t cpu_class,
                                                 uform_executor_t *executor);

#endif /* UFORM_CPU_BACKEND_H */
