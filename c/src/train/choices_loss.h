/* choices_loss.h: the calibrated-choices training term (docs/training.md
 * section 10), forward and backward, for the items of one replica. */
#ifndef UFORM_CHOICES_LOSS_H
#define UFORM_CHOICES_LOSS_H

#include "core/internal.h"

typedef struct {
    size_t count;              /* items with choices */
    size_t hidden;             /* H */
    const float *states;       /* [count, H]: the final state at each item's MASK row */
    const uint8_t *bytes;      /* the choice bytes of every item, back to back */
    const float *targets;      /* one target per choice byte, aligned with bytes */
    const size_t *offsets;     /* [count + 1]: item c's choices are bytes[offsets[c] .. offsets[c+1]) */
    const uint32_t *groups;    /* [count] temperature group of each item */
} uform_choices_batch_t;

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

#endif /* UFORM_CHOICES_LOSS_H */
