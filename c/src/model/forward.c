/* forward.c: the encode verbs' forward: a RAM model's backend, the blocks over
 * one batch (transformer.c) with inference activations, and the heads.
 *
 * The math is DESIGN section 5 (docs/architecture.md); every operation runs
 * on the backend (backend.h), here the CPU backend of the model's class. */
#include "backend/cpu/cpu_backend.h"
#include "backend/vram.h"
#include "model/model.h"

#include <math.h>

uform_backend_t uform_model_backend(const uform_model_t *model, uform_executor_t *executor) {
    if (!model->device.ops) return uform_cpu_backend(model->cpu_class, executor);
    /* a VRAM model runs on the stream of the call's VRAM executor when that
     * holds its GPU, else on the one it was loaded with */
    uform_backend_t backend = model->device;
    if (model->gpu_class != UFORM_GPU_CLASS_NONE && executor != model->executor)
        uform_vram_backend(executor, model->gpu_device, &backend);
    return backend;
}

uform_status_t uform_model_needs(const uform_model_t *model, bool present, const char *verb,
                                 const char *name) {
    if (present) return UFORM_OK;
    return uform_fail(UFORM_UNSUPPORTED, "%s: the %s backend this model is on has no %s operation yet",
                      verb, model->device.ops ? model->device.ops->name : "cpu", name);
}

size_t uform_forward_scratch_bytes(const uform_model_t *model, uform_executor_t *executor,
                                   size_t rows, size_t segments, size_t longest) {
    uform_backend_t backend = uform_model_backend(model, executor);
    return uform_inference_activations_bytes(&backend, model->hidden, rows, segments, longest);
}

void uform_forward(const uform_model_t *model, uform_backend_t *backend, const uform_batch_t *batch,
                   size_t longest, float *x, void *scratch) {
    uform_layer_activations_t layer;
    uform_activations_t activations;
    uform_inference_activations(backend, model->hidden, batch->rows, batch->segments_count,
                                longest, x, scratch, &layer, &activations);
    uform_transformer_forward(backend, &model->transformer, batch, &activations);
}

/* ---- heads ----------------------------------------------------------------- */

void uform_project_normalize(const uform_model_t *model, uform_backend_t *backend,
                             const uform_packed_t *head, const float *x, size_t rows, float *y) {
    uform_weight_t weight = {head, NULL, head->n, head->k};
    backend->ops->linear(backend, &weight, x, model->hidden, rows, NULL, false, y, head->n);
    backend->ops->normalize_forward(backend, y, rows, head->n, y, NULL);
}
