/* batch_indices.c: a forward batch's index arrays on the host and in the
 * backend's memory (batch_indices.h). */
#include "encode/batch_indices.h"

#include <stdlib.h>

static void uform_batch_rows_free(uform_batch_indices_t *x, uform_backend_t *backend) {
    if (!backend->ops->host_memory) {
        uform_backend_free(backend, x->device_positions);
        uform_backend_free(backend, x->device_ids);
    }
    free(x->positions);
    free(x->ids);
    x->positions = x->ids = x->device_positions = x->device_ids = NULL;
    x->rows = 0;
}

void uform_batch_indices_free(uform_batch_indices_t *x, uform_backend_t *backend) {
    uform_batch_rows_free(x, backend);
    if (!backend->ops->host_memory) uform_backend_free(backend, x->device_segments);
    free(x->segments);
    x->segments = x->device_segments = NULL;
    x->items = 0;
}

uform_status_t uform_batch_indices_reserve(uform_batch_indices_t *x, uform_backend_t *backend,
                                           size_t rows, size_t items) {
    bool host = backend->ops->host_memory;
    uform_batch_rows_free(x, backend);
    x->positions = uform_alloc(rows, 3 * sizeof(uint32_t), "positions");
    x->ids = uform_alloc(rows, sizeof(uint32_t), "token ids");
    x->device_positions = host ? x->positions : uform_backend_alloc(backend, rows, 3 * sizeof(uint32_t), "positions");
    x->device_ids = host ? x->ids : uform_backend_alloc(backend, rows, sizeof(uint32_t), "token ids");
    x->rows = rows;
    if (items) {
        if (!host) uform_backend_free(backend, x->device_segments);
        free(x->segments);
        x->segments = uform_alloc(items, sizeof(uform_segment_t), "segments");
        x->device_segments = host ? x->segments
                                  : uform_backend_alloc(backend, items, sizeof(uform_segment_t), "segments");
        x->items = items;
    }
    if (!x->positions || !x->ids || !x->device_positions || !x->device_ids || !x->segments ||
        !x->device_segments) {
        uform_batch_indices_free(x, backend);
        return UFORM_OUT_OF_MEMORY;
    }
    return UFORM_OK;
}

void uform_batch_indices_upload(uform_batch_indices_t *x, uform_backend_t *backend, size_t rows,
                                size_t items) {
    if (backend->ops->host_memory) return;
    backend->ops->upload(backend, x->device_segments, x->segments, items * sizeof(uform_segment_t));
    backend->ops->upload(backend, x->device_positions, x->positions, rows * 3 * sizeof(uint32_t));
    backend->ops->upload(backend, x->device_ids, x->ids, rows * sizeof(uint32_t));
}
