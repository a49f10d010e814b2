/* media_rows.c: the image, video and audio rows of one training replica
 * (docs/training.md section 11), over the backend's operations. Rows are
 * gathered into dense matrices so the projections are GEMMs; sums over rows
 * run in row order. */
#include "train/media_rows.h"


#include <stdlib.h>

/* The four host arrays; on host memory they are the rows themselves. */
static uform_status_t uform_media_host_alloc(uform_media_rows_t *r, size_t count, size_t masked_count,
                                             size_t width) {
    r->host_rows = uform_alloc(count + 1, sizeof(size_t), "media rows");
    r->host_masked_rows = uform_alloc(masked_count + 1, sizeof(size_t), "media rows");
    r->host_inputs = uform_alloc_aligned(count + 1, width * sizeof(float), "media inputs");
    r->host_targets = uform_alloc_aligned(masked_count + 1, width * sizeof(float), "media targets");
    return r->host_rows && r->host_masked_rows && r->host_inputs && r->host_targets ? UFORM_OK
                                                                                   : UFORM_OUT_OF_MEMORY;
}

uform_status_t uform_media_rows_alloc(uform_media_rows_t *r, uform_backend_t *b, size_t count,
                                      size_t masked_count, size_t width) {
    memset(r, 0, sizeof(*r));
    r->count = count;
    r->masked_count = masked_count;
    r->width = width;
    uform_status_t status = uform_media_host_alloc(r, count, masked_count, width);
    if (status == UFORM_OK && b->ops->host_memory) {
        r->rows = r->host_rows, r->masked_rows = r->host_masked_rows;
        r->inputs = r->host_inputs, r->targets = r->host_targets;
    } else if (status == UFORM_OK) {
        r->rows = uform_backend_alloc(b, count + 1, sizeof(size_t), "media rows");
        r->masked_rows = uform_backend_alloc(b, masked_count + 1, sizeof(size_t), "media rows");
        r->inputs = uform_backend_alloc(b, count + 1, width * sizeof(float), "media inputs");
        r->targets = uform_backend_alloc(b, masked_count + 1, width * sizeof(float), "media targets");
        if (!r->rows || !r->masked_rows || !r->inputs || !r->targets) status = UFORM_OUT_OF_MEMORY;
    }
    if (status != UFORM_OK) uform_media_rows_free(r, b);
    return status;
}

void uform_media_rows_upload(uform_media_rows_t *r, uform_backend_t *b) {
    if (b->ops->host_memory) return;
    b->ops->upload(b, r->rows, r->host_rows, r->count * sizeof(size_t));
    b->ops->upload(b, r->masked_rows, r->host_masked_rows, r->masked_count * sizeof(size_t));
    b->ops->upload(b, r->inputs, r->host_inputs, r->count * r->width * sizeof(float));
    b->ops->upload(b, r->targets, r->host_targets, r->masked_count * r->width * sizeof(float));
}

void uform_media_rows_free(uform_media_rows_t *r, uform_backend_t *b) {
    if (r->rows != r->host_rows || r->inputs != r->host_inputs) {   /* a device's copies */
        uform_backend_free(b, r->rows);
        uform_backend_free(b, r->masked_rows);
        uform_backend_free(b, r->inputs);
        uform_backend_free(b, r->targets);
    }
    free(r->host_rows);
    free(r->host_masked_rows);
    uform_free_aligned(r->host_inputs);
    uform_free_aligned(r->host_targets);
    memset(r, 0, sizeof(*r));
}

uform_status_t uform_media_input_forward(uform_backend_t *b, const uform_media_parameters_t *p,
                                         const uform_media_rows_t *r, size_t hidden, float *x) {
    const uform_backend_ops_t *op = b->ops;
    if (r->count) {
        float *projected = op->alloc(b, r->count * hidden * sizeof(float));
        if (!projected) return UFORM_OUT_OF_MEMORY;
        uform_weight_t projection = {NULL, p->projection, hidden, p->width};
        op->linear(b, &projection, r->inputs, p->width, r->count, p->projection_bias, false,
                   projected, hidden);
        op->scatter_rows(b, projected, hidden, p->modality, hidden, r->rows, r->count, x);
        op->free(b, projected);
    }
    op->scatter_rows(b, p->mask, 0, p->modality, hidden, r->masked_rows, r->masked_count, x);
    return UFORM_OK;
}

uform_status_t uform_media_input_backward(uform_backend_t *b, const uform_media_parameters_t *p,
                                          const uform_media_rows_t *r, size_t hidden,
                                          const float *dx) {
    const uform_backend_ops_t *op = b->ops;
    if (r->count) {
        float *gathered = op->alloc(b, r->count * hidden * sizeof(float));
        if (!gathered) return UFORM_OUT_OF_MEMORY;
        op->gather_rows(b, dx, hidden, r->rows, r->count, gathered);
        /* dW [H, width] += dY^T X, dbias += column sums of dY */
        uform_weight_t projection = {NULL, p->projection, hidden, p->width};
        op->linear_backward(b, &projection, r->inputs, gathered, r->count, p->d_projection,
                            p->d_projection_bias, NULL, false);
        op->free(b, gathered);
        op->sum_rows(b, dx, hidden, r->rows, r->count, p->d_modality);
    }
    if (r->masked_count) {
        op->sum_rows(b, dx, hidden, r->masked_rows, r->masked_count, p->d_mask);
        op->sum_rows(b, dx, hidden, r->masked_rows, r->masked_count, p->d_modality);
    }
    return UFORM_OK;
}

uform_status_t uform_media_reconstruction(uform_backend_t *b, const uform_media_parameters_t *p,
                                          const uform_media_rows_t *r, size_t hidden,
                                          const float *states, float scale, double *loss_sum,
                                          float *d_states) {
    const uform_backend_ops_t *op = b->ops;
    size_t n = r->masked_count, width = p->width;
    if (n == 0) return UFORM_OK;
    float *gathered = op->alloc(b, 2 * n * hidden * sizeof(float));
    float *predictions = gathered ? op->alloc(b, 2 * n * width * sizeof(float)) : NULL;
    if (!predictions) {
        if (gathered) op->free(b, gathered);
        return UFORM_OUT_OF_MEMORY;
    }
    float *d_gathered = gathered + n * hidden, *d_predictions = predictions + n * width;
    uform_weight_t head = {NULL, p->head, width, hidden};
    op->gather_rows(b, states, hidden, r->masked_rows, n, gathered);
    op->linear(b, &head, gathered, hidden, n, p->head_bias, false, predictions, width);
    *loss_sum += op->reconstruction_loss(b, predictions, r->targets, n, width, scale,
                                         d_predictions);
    /* dHead [width, H] += dP^T S; dbias += column sums; dS = dP Head */
    op->linear_backward(b, &head, gathered, d_predictions, n, p->d_head, p->d_head_bias,
                        d_gathered, false);
    op->scatter_add_rows(b, d_gathered, hidden, r->masked_rows, n, d_states);
    op->free(b, gathered);
    op->free(b, predictions);
    return UFORM_OK;
}
