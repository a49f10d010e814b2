/* media_rows.c: the image, video and audio rows of one training replica
 * (docs/training.md section 11). Rows are gathered into dense matrices so the
 * projections are GEMMs; sums over rows run in row order. */
#include "train/media_rows.h"

#include "backend/cpu/sgemm.h"
#include "train/media_objectives.h"

#include <stdlib.h>

uform_status_t uform_media_rows_alloc(uform_media_rows_t *r, size_t count, size_t masked_count,
                                      size_t width) {
    memset(r, 0, sizeof(*r));
    r->count = count;
    r->masked_count = masked_count;
    r->rows = uform_alloc(count + 1, sizeof(size_t), "media rows");
    r->masked_rows = uform_alloc(masked_count + 1, sizeof(size_t), "media rows");
    r->inputs = uform_alloc_aligned(count + 1, width * sizeof(float), "media inputs");
    r->targets = uform_alloc_aligned(masked_count + 1, width * sizeof(float), "media targets");
    if (!r->rows || !r->masked_rows || !r->inputs || !r->targets) {
        uform_media_rows_free(r);
        return UFORM_OUT_OF_MEMORY;
    }
    return UFORM_OK;
}

void uform_media_rows_free(uform_media_rows_t *r) {
    free(r->rows);
    free(r->masked_rows);
    uform_free_aligned(r->inputs);
    uform_free_aligned(r->targets);
    memset(r, 0, sizeof(*r));
}

/* sums[c] += sum over the listed rows of x[row][c], rows in list order. */
static void uform_add_rows_of(const float *x, const size_t *rows, size_t count, size_t width,
                              float *sums) {
    for (size_t i = 0; i < count; i++) {
        const float *row = x + rows[i] * width;
        for (size_t c = 0; c < width; c++) sums[c] += row[c];
    }
}

uform_status_t uform_media_input_forward(uform_executor_t *executor, const uform_media_parameters_t *p,
                                         const uform_media_rows_t *r, size_t hidden, float *x) {
    if (r->count) {
        float *projected = uform_alloc_aligned(r->count, hidden * sizeof(float), "media projections");
        if (!projected) return UFORM_OUT_OF_MEMORY;
        uform_sgemm(executor, r->count, hidden, p->width, (uform_matrix_t){r->inputs, p->width, false},
                    (uform_matrix_t){p->projection, p->width, true}, p->projection_bias, false,
                    projected, hidden);
        for (size_t i = 0; i < r->count; i++) {
            float *row = x + r->rows[i] * hidden;
            for (size_t c = 0; c < hidden; c++) row[c] = projected[i * hidden + c] + p->modality[c];
        }
        uform_free_aligned(projected);
    }
    for (size_t i = 0; i < r->masked_count; i++) {
        float *row = x + r->masked_rows[i] * hidden;
        for (size_t c = 0; c < hidden; c++) row[c] = p->mask[c] + p->modality[c];
    }
    return UFORM_OK;
}

uform_status_t uform_media_input_backward(uform_executor_t *executor, const uform_media_parameters_t *p,
                                          const uform_media_rows_t *r, size_t hidden, const float *dx) {
    if (r->count) {
        float *gathered = uform_alloc_aligned(r->count, hidden * sizeof(float), "media gradients");
        if (!gathered) return UFORM_OUT_OF_MEMORY;
        for (size_t i = 0; i < r->count; i++)
            memcpy(gathered + i * hidden, dx + r->rows[i] * hidden, hidden * sizeof(float));
        /* dW [H, width] += dY^T X */
        uform_sgemm(executor, hidden, p->width, r->count, (uform_matrix_t){gathered, hidden, true},
                    (uform_matrix_t){r->inputs, p->width, false}, NULL, true, p->d_projection, p->width);
        uform_free_aligned(gathered);
        uform_add_rows_of(dx, r->rows, r->count, hidden, p->d_projection_bias);
        uform_add_rows_of(dx, r->rows, r->count, hidden, p->d_modality);
    }
    if (r->masked_count) {
        uform_add_rows_of(dx, r->masked_rows, r->masked_count, hidden, p->d_mask);
        uform_add_rows_of(dx, r->masked_rows, r->masked_count, hidden, p->d_modality);
    }
    return UFORM_OK;
}

uform_status_t uform_media_reconstruction(uform_executor_t *executor, const uform_media_parameters_t *p,
                                          const uform_media_rows_t *r, size_t hidden, const float *states,
                                          float scale, double *loss_sum, float *d_states) {
    size_t n = r->masked_count, width = p->width;
    if (n == 0) return UFORM_OK;
    float *gathered = uform_alloc_aligned(2 * n, hidden * sizeof(float), "reconstruction states");
    float *predictions = uform_alloc_aligned(2 * n, width * sizeof(float), "reconstructions");
    if (!gathered || !predictions) {
        uform_free_aligned(gathered), uform_free_aligned(predictions);
        return UFORM_OUT_OF_MEMORY;
    }
    float *d_gathered = gathered + n * hidden, *d_predictions = predictions + n * width;
    for (size_t i = 0; i < n; i++)
        memcpy(gathered + i * hidden, states + r->masked_rows[i] * hidden, hidden * sizeof(float));
    uform_sgemm(executor, n, width, hidden, (uform_matrix_t){gathered, hidden, false},
                (uform_matrix_t){p->head, hidden, true}, p->head_bias, false, predictions, width);
    *loss_sum += uform_reconstruction_loss(predictions, r->targets, n, width, scale, d_predictions);
    /* dHead [width, H] += dP^T S; dbias += column sums; dS = dP Head */
    uform_sgemm(executor, width, hidden, n, (uform_matrix_t){d_predictions, width, true},
                (uform_matrix_t){gathered, hidden, false}, NULL, true, p->d_head, hidden);
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < width; k++) p->d_head_bias[k] += d_predictions[i * width + k];
    uform_sgemm(executor, n, hidden, width, (uform_matrix_t){d_predictions, width, false},
                (uform_matrix_t){p->head, hidden, false}, NULL, false, d_gathered, hidden);
    for (size_t i = 0; i < n; i++) {
        float *target = d_states + r->masked_rows[i] * hidden;
        for (size_t c = 0; c < hidden; c++) target[c] += d_gathered[i * hidden + c];
    }
    uform_free_aligned(gathered), uform_free_aligned(predictions);
    return UFORM_OK;
}
