/* losses.h: the CPU backend's loss operations (backend.h: contrastive_loss,
 * late_interaction_loss, choices_loss): contrastive_loss.c,
 * late_interaction_loss.c, choices_loss.c. Private to backend/cpu/ and its tests. */
#ifndef UFORM_CPU_LOSSES_H
#define UFORM_CPU_LOSSES_H

#include "backend/losses.h"
#include "backend/cpu/sgemm.h"

/* The contrastive term of docs/training.md section 3, forward and backward.
 *
 * Writes the loss to *loss and ADDS its gradients into d_embeddings [N, D],
 * d_log_inverse_temperature [G] and d_bias [G] (any of the three may be NULL
 * when that gradient is not wanted; d_bias only receives nonzero values under
 * SIGMOID). log_inverse_temperature [G] must be finite; bias [G] is read only
 * under SIGMOID (it may be NULL otherwise) and must then be finite.
 *
 * Relations of anchor i to candidate j != i, by precedence: ignore edge >
 * attract edge (positive, its weight) > same bag (positive, 1) > repel edge
 * (negative, its weight) > AMBIENT (negative, ambient_repulsion_weight) /
 * NAMED (not scored). Self edges (i -> i) are dropped. An edge set with NULL
 * offsets is empty; otherwise offsets holds N + 1 non-decreasing values from
 * 0 (offsets[N] is the number of edges), anchor i's edges are
 * ids[offsets[i] .. offsets[i+1]) (and weights likewise, NULL: all 1), every
 * id < N, every weight finite and >= 0, and no candidate appears twice in one
 * anchor's row of one edge set (as tests/reference/training.py rejects it).
 *
 * BALANCED and RANKED score an anchor when its positives' weights sum to more
 * than 0 (zero-weight positives still enter the BALANCED denominator, as the
 * formula's sum over P_i says) and average over the scored anchors; when none
 * is scored the loss is 0 and no gradient is added. SIGMOID averages over all
 * N anchors. The term is the mean over the Matryoshka widths, where e^w =
 * e[0:w] / max(|e[0:w]|, 1e-12) and the gradient flows back through that
 * renormalisation to the full rows; a prefix that is exactly zero (an empty
 * item) is scored with cosine 0 and receives no gradient.
 *
 * Computes in float64 (scores, log-sum-exp, softplus) and stores the [N, N]
 * score gradients in FP32 (N^2 * 4 bytes of scratch); every sum runs in a
 * fixed order, so the results do not depend on the executor (NULL: this
 * thread only) or its thread count.
 *
 * UFORM_INVALID_ARGUMENT naming the problem, with nothing written, for a bad
 * configuration, a group id >= G, a bad edge set, non-finite embeddings or
 * parameters, or a NULL pointer the call needs; UFORM_OUT_OF_MEMORY when the
 * scratch cannot be allocated. */
UFORM_INTERNAL uform_status_t uform_contrastive(uform_executor_t *executor,
                                                const uform_contrastive_config_t *config,
                                                const uform_contrastive_batch_t *batch,
                                                const float *log_inverse_temperature,
                                                const float *bias, float *loss, float *d_embeddings,
                                                float *d_log_inverse_temperature, float *d_bias);

/* The pair losses of section 3 over a score matrix the caller computed (late
 * interaction, docs/training.md section 9). Anchor i (anchors[i] != 0) scores
 * candidates j != i with candidates[j] != 0, classified by the relations'
 * precedence with config's negatives and ambient weight (config's widths and
 * groups are not read); `form` is BALANCED, RANKED or SIGMOID. scores [n, n]
 * holds s_ij on entry and dloss_i/ds_ij on return (0 outside scored rows and
 * unscored pairs); row_loss[i] and scored[i] report each anchor (a BALANCED or
 * RANKED anchor is scored when its positives' weights sum to more than 0,
 * every SIGMOID anchor is). Unscaled: the caller averages. Edges are checked
 * as uform_contrastive checks them. */
UFORM_INTERNAL uform_status_t uform_pair_losses(uform_executor_t *executor,
                                                const uform_contrastive_config_t *config,
                                                uform_pair_loss_form_t form, size_t n,
                                                const uint32_t *bags,
                                                const uform_relations_t *relations,
                                                const uint8_t *anchors, const uint8_t *candidates,
                                                double *scores, double *row_loss, uint8_t *scored);

/* Writes the unweighted term to *loss and ADDS weight x its gradients into
 * d_vectors (laid out as vectors), *d_log_inverse_temperature and, under
 * SIGMOID, *d_bias. m_ij = MaxSim of query i against document j != i (dot
 * products in FP32, the mean over query tokens in float64; the max's gradient
 * goes to the first document row reaching it), s_ij = m_ij exp(tau) + (SIGMOID
 * ? bias : 0), relations and pair forms as uform_pair_losses. BALANCED and
 * RANKED average over scored query anchors, SIGMOID over every query anchor; 0
 * without any. Results do not depend on the executor's thread count. The dot
 * products run on the FP32 GEMM's `path` (sgemm.h; AUTO: the best). */
UFORM_INTERNAL uform_status_t uform_late_interaction_loss(
    uform_executor_t *executor, uform_sgemm_path_t path,
    const uform_contrastive_config_t *relations_config,
    uform_pair_loss_form_t form, const uform_late_batch_t *batch, float log_inverse_temperature,
    float bias, float weight, float *loss, float *d_vectors, float *d_log_inverse_temperature,
    float *d_bias);

/* Adds sum_c -sum_k y_k log p_k (float64) to *loss_sum, where p = softmax over
 * the item's choices of (h . text.bytes[k] + heads.bytes.bias[k]) /
 * exp(log_temperature[g]). Writes d_states [count, H] and ADDS into
 * d_bytes_table [256, H], d_bytes_bias [256] and d_log_temperature [G] the
 * gradients of scale x that sum. Items run in order, so sums are
 * deterministic. */
UFORM_INTERNAL void uform_choices_loss(const uform_choices_batch_t *batch, const float *bytes_table,
                                       const float *bytes_bias, const float *log_temperature,
                                       float scale, double *loss_sum, float *d_states,
                                       float *d_bytes_table, float *d_bytes_bias,
                                       float *d_log_temperature);

#endif /* UFORM_CPU_LOSSES_H */
