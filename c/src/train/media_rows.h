/* media_rows.h: the image, video and audio rows of one training replica
 * (docs/training.md section 11): their input projection, forward and
 * backward, and the masked reconstruction loss. The trainer gathers the rows;
 * these functions only see parameters, gradients and row lists. */
#ifndef UFORM_MEDIA_ROWS_H
#define UFORM_MEDIA_ROWS_H

#include "backend/backend.h"

/* One modality's parameters and the gradients they accumulate into. mask,
 * head and head_bias (and their gradients) are NULL when the run does not
 * mask. */
typedef struct {
    size_t width;                                  /* values per token */
    const float *projection, *projection_bias;     /* [H, width], [H] */
    const float *modality, *mask;                  /* [H] */
    const float *head, *head_bias;                 /* [width, H], [width] */
    float *d_projection, *d_projection_bias, *d_modality, *d_mask, *d_head, *d_head_bias;
} uform_media_parameters_t;

/* One modality's rows of a replica, in the backend's memory; the host writes
 * them into host_* (the same buffers on host memory, else uploaded by
 * uform_media_rows_upload). */
typedef struct {
    size_t count;           /* rows fed their projected tokens */
    size_t *rows;           /* [count] row indices within the replica */
    float *inputs;          /* [count, width] their token values */
    size_t masked_count;    /* rows fed the mask vector */
    size_t *masked_rows;    /* [masked_count] */
    float *targets;         /* [masked_count, width] normalised token values */
    size_t width;
    size_t *host_rows, *host_masked_rows;
    float *host_inputs, *host_targets;
} uform_media_rows_t;

UFORM_INTERNAL uform_status_t uform_media_rows_alloc(uform_media_rows_t *rows, uform_backend_t *b,
                                                     size_t count, size_t masked_count, size_t width);
UFORM_INTERNAL void uform_media_rows_upload(uform_media_rows_t *rows, uform_backend_t *b);
UFORM_INTERNAL void uform_media_rows_free(uform_media_rows_t *rows, uform_backend_t *b);

/* x[row] = W token + b + modality for fed rows, mask + modality for masked
 * rows (x: the replica's input rows of H). */
UFORM_INTERNAL uform_status_t uform_media_input_forward(uform_backend_t *b,
                                                        const uform_media_parameters_t *p,
                                                        const uform_media_rows_t *rows,
                                                        size_t hidden, float *x);

/* Adds the gradients of the input rows dx into W, b, modality and mask. */
UFORM_INTERNAL uform_status_t uform_media_input_backward(uform_backend_t *b,
                                                         const uform_media_parameters_t *p,
                                                         const uform_media_rows_t *rows,
                                                         size_t hidden, const float *dx);

/* The reconstruction of the masked rows from their final states: adds
 * sum_rows mean_k (head h + b - target)^2 to *loss_sum (float64), and the
 * gradients of scale x that sum into the head, its bias and d_states. */
UFORM_INTERNAL uform_status_t uform_media_reconstruction(uform_backend_t *b,
                                                         const uform_media_parameters_t *p,
                                                         const uform_media_rows_t *rows,
                                                         size_t hidden, const float *states,
                                                         float scale, double *loss_sum,
                                                         float *d_states);

#endif /* UFORM_MEDIA_ROWS_H */
