/* choices_loss.c: the calibrated-choices training term (docs/training.md
 * section 10). A step has few items with choices and at most 256 choices each,
 * so the logits are computed directly, only for the choice bytes, in float64. */
#include "backend/cpu/losses.h"

#include <math.h>

void uform_choices_loss(const uform_choices_batch_t *b, const float *bytes_table,
                        const float *bytes_bias, const float *log_temperature, float scale,
                        double *loss_sum, float *d_states, float *d_bytes_table,
                        float *d_bytes_bias, float *d_log_temperature) {
    const size_t h = b->hidden;
    double z[256], p[256];
    for (size_t item = 0; item < b->count; item++) {
        const float *state = b->states + item * h;
        float *d_state = d_states + item * h;
        const uint8_t *bytes = b->bytes + b->offsets[item];
        const float *targets = b->targets + b->offsets[item];
        const size_t choices = b->offsets[item + 1] - b->offsets[item];
        const uint32_t g = b->groups[item];
        const double temperature = exp((double)log_temperature[g]);
        double top = -INFINITY;
        for (size_t c = 0; c < choices; c++) {
            const float *row = bytes_table + (size_t)bytes[c] * h;
            double logit = 0;
            for (size_t k = 0; k < h; k++) logit += (double)state[k] * (double)row[k];
            z[c] = (logit + (double)bytes_bias[bytes[c]]) / temperature;
            top = fmax(top, z[c]);
        }
        double sum = 0, mass = 0;
        for (size_t c = 0; c < choices; c++) sum += exp(z[c] - top);
        const double lse = top + log(sum);
        double loss = 0;
        for (size_t c = 0; c < choices; c++) {
            p[c] = exp(z[c] - lse);
            loss += (double)targets[c] * (lse - z[c]);
            mass += (double)targets[c];
        }
        *loss_sum += loss;
        /* dloss/dz_c = p_c sum(y) - y_c; z = logit / T, so dT-side: dz/dlog T = -z. */
        memset(d_state, 0, h * sizeof(float));
        double d_log_t = 0;
        for (size_t c = 0; c < choices; c++) {
            const double dz = (p[c] * mass - (double)targets[c]) * (double)scale;
            d_log_t -= dz * z[c];
            const float dlogit = (float)(dz / temperature);
            const float *row = bytes_table + (size_t)bytes[c] * h;
            float *d_row = d_bytes_table + (size_t)bytes[c] * h;
            for (size_t k = 0; k < h; k++) {
                d_state[k] += dlogit * row[k];
                d_row[k] += dlogit * state[k];
            }
            d_bytes_bias[bytes[c]] += dlogit;
        }
        d_log_temperature[g] += (float)d_log_t;
    }
}
