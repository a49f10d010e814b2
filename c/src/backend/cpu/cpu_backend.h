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

/* Operations lent to device backends that have none of their own yet
 * (on_host.c): the inputs downloaded through `b`'s table, the CPU backend's
 * operation run on the threads of b->executor (which must be set), the outputs
 * uploaded; the CPU backend's bits. For a device backend without losses of
 * its own (tests/c/guarded_backend.h; the CUDA backend has its own kernels
 * for all four): their inputs are the world's embeddings (N x D floats), the
 * choice items' MASK states with the byte table, the world's token vectors,
 * and a replica's masked media rows' predictions and targets. choices_loss
 * records a failure of its own in b->failure. */
UFORM_INTERNAL uform_status_t uform_contrastive_loss_on_host(
    uform_backend_t *b, const uform_contrastive_config_t *config, const uform_contrastive_batch_t *batch,
    const float *log_inverse_temperature, const float *bias, float *loss, float *d_embeddings,
    float *d_log_inverse_temperature, float *d_bias);
UFORM_INTERNAL void uform_choices_loss_on_host(uform_backend_t *b, const uform_choices_batch_t *batch,
                                               const float *bytes_table, const float *bytes_bias,
                                               const float *log_temperature, float scale, double *loss_sum,
                                               float *d_states, float *d_bytes_table, float *d_bytes_bias,
                                               float *d_log_temperature);
UFORM_INTERNAL uform_status_t uform_late_interaction_loss_on_host(
    uform_backend_t *b, const uform_contrastive_config_t *relations_config, uform_pair_loss_form_t form,
    const uform_late_batch_t *batch, float log_inverse_temperature, float bias, float weight, float *loss,
    float *d_vectors, float *d_log_inverse_temperature, float *d_bias);
/* NAN (and the failure in b->failure) when a transfer fails. */
UFORM_INTERNAL double uform_reconstruction_loss_on_host(uform_backend_t *b, const float *predictions,
                                                        const float *targets, size_t rows, size_t width,
                                                        float scale, float *d_predictions);

#endif /* UFORM_CPU_BACKEND_H */
