/* late_interaction_loss.h: the late-interaction training term
 * (docs/training.md section 9), forward and backward, over the token vectors
 * of a step's world. */
#ifndef UFORM_LATE_INTERACTION_LOSS_H
#define UFORM_LATE_INTERACTION_LOSS_H

#include "train/objectives.h"

typedef struct {
    size_t count;                    /* N items of the world */
    size_t width;                    /* W scalars per token vector */
    const float *vectors;            /* unit token vectors, rows of W */
    const size_t *first;             /* [N] each item's first row in vectors */
    const size_t *query_rows;        /* [N] query tokens (the item's first rows); 0: not a query */
    const size_t *document_rows;     /* [N] rows as a document; 0: not a document */
    const uint32_t *bags;            /* NULL: no bag positives */
    const uform_relations_t *relations; /* NULL: none */
} uform_late_batch_t;

/* Writes the unweighted term to *loss and ADDS weight x its gradients into
 * d_vectors (laid out as vectors), *d_log_inverse_temperature and, under
 * SIGMOID, *d_bias. m_ij = MaxSim of query i against document j != i (dot
 * products in FP32, the mean over query tokens in float64; the max's gradient
 * goes to the first document row reaching it), s_ij = m_ij exp(tau) + (SIGMOID
 * ? bias : 0), relations and pair forms as uform_pair_losses. BALANCED and
 * RANKED average over scored query anchors, SIGMOID over every query anchor; 0
 * without any. Results do not depend on the executor's thread count. */
UFORM_INTERNAL uform_status_t uform_late_interaction_loss(
    uform_executor_t *executor, const uform_contrastive_config_t *relations_config,
    uform_pair_loss_form_t form, const uform_late_batch_t *batch, float log_inverse_temperature,
    float bias, float weight, float *loss, float *d_vectors, float *d_log_inverse_temperature,
    float *d_bias);

#endif /* UFORM_LATE_INTERACTION_LOSS_H */
