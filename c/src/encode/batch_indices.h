/* batch_indices.h: the index arrays of one forward batch (where each item's
 * rows sit, the rows' positions, text rows' byte ids), written on the host
 * and read by the backend from its own memory.
 *
 * On a backend whose memory is host memory (the CPU's) each array is one
 * buffer; on a device (CUDA) the host arrays are uploaded before the batch
 * runs (uform_batch_indices_upload), so the encode verbs are one code path
 * for both. */
#ifndef UFORM_BATCH_INDICES_H
#define UFORM_BATCH_INDICES_H

#include "backend/backend.h"

typedef struct {
    size_t rows, items;                   /* capacities */
    uform_segment_t *segments;            /* [items], host */
    uint32_t *positions;                  /* [rows][3], host */
    uint32_t *ids;                        /* [rows], host */
    uform_segment_t *device_segments;     /* the same in the backend's memory */
    uint32_t *device_positions;
    uint32_t *device_ids;
} uform_batch_indices_t;

/* (Re)allocates the per-row arrays for `rows` rows (contents not kept), and
 * the segments for `items` items when items is not 0. OUT_OF_MEMORY on
 * failure, what was held freed. */
UFORM_INTERNAL uform_status_t uform_batch_indices_reserve(uform_batch_indices_t *indices,
                                                          uform_backend_t *backend, size_t rows,
                                                          size_t items);

/* Copies the first `rows` rows and `items` segments to the backend's memory
 * (nothing to do on host memory). */
UFORM_INTERNAL void uform_batch_indices_upload(uform_batch_indices_t *indices,
                                               uform_backend_t *backend, size_t rows,
                                               size_t items);

UFORM_INTERNAL void uform_batch_indices_free(uform_batch_indices_t *indices,
                                             uform_backend_t *backend);

#endif /* UFORM_BATCH_INDICES_H */
