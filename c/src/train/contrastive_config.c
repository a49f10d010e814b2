/* contrastive_config.c: docs/training.md section 3: the contrastive term's
 * configuration with every zero derived. See objectives.h; the checks of a
 * batch before a loss is computed are backend/loss_checks.c. */
#include "train/objectives.h"

#include <math.h>
#include <stdlib.h>

/* ==== 3. Contrastive: configuration ======================================== */

uform_status_t uform_contrastive_resolve(const uform_contrastive_t *given, size_t dimensions,
                                         uform_contrastive_config_t *config,
                                         size_t *widths_storage,
                                         float *initial_log_inverse_temperature,
                                         float *initial_bias) {
    if (!config || !widths_storage || !initial_log_inverse_temperature || !initial_bias)
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive: NULL out-pointer");
    if (dimensions == 0)
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive: dimensions must be at least 1");
    uform_contrastive_t value;
    if (given)
        value = *given;
    else
        memset(&value, 0, sizeof(value));

    size_t widths[UFORM_MATRYOSHKA_WIDTHS_MAX];
    size_t widths_count = value.matryoshka_dimensions_count;
    if (widths_count == 0) {
        widths[0] = dimensions;
        widths_count = 1;
    } else {
        if (!value.matryoshka_dimensions)
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "contrastive.matryoshka_dimensions is NULL with a count of %zu",
                              widths_count);
        if (widths_count > UFORM_MATRYOSHKA_WIDTHS_MAX)
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "contrastive.matryoshka_dimensions: %zu widths, at most %d allowed",
                              widths_count, UFORM_MATRYOSHKA_WIDTHS_MAX);
        for (size_t k = 0; k < widths_count; k++) {
            size_t w = value.matryoshka_dimensions[k];
            if (w < 1 || w > dimensions)
                return uform_fail(UFORM_INVALID_ARGUMENT,
                                  "contrastive.matryoshka_dimensions[%zu] = %zu is outside "
                                  "[1, %zu]",
                                  k, w, dimensions);
            for (size_t l = 0; l < k; l++)
                if (widths[l] == w)
                    return uform_fail(UFORM_INVALID_ARGUMENT,
                                      "contrastive.matryoshka_dimensions[%zu] = %zu repeats "
                                      "matryoshka_dimensions[%zu]",
                                      k, w, l);
            widths[k] = w;
        }
    }

    size_t groups = value.temperature_groups ? value.temperature_groups : 1;
    if (groups > (size_t)UINT32_MAX)
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "contrastive.temperature_groups = %zu exceeds the uint32 group ids",
                          groups);

    float inverse_temperature = uform_derive(value.inverse_temperature, 10.0f);
    if (!(inverse_temperature > 0.0f) || isinf(inverse_temperature))
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "contrastive.inverse_temperature must be finite and positive, got %g",
                          (double)value.inverse_temperature);

    if ((int)value.negatives != UFORM_NEGATIVES_AMBIENT &&
        (int)value.negatives != UFORM_NEGATIVES_NAMED)
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive.negatives: unknown value %d",
                          (int)value.negatives);

    float ambient = uform_derive(value.ambient_repulsion_weight, 1.0f);
    if (!(ambient >= 0.0f) || isinf(ambient))
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "contrastive.ambient_repulsion_weight must be finite and non-negative, "
                          "got %g",
                          (double)value.ambient_repulsion_weight);

    uform_pair_loss_form_t form = value.pair_loss;
    switch ((int)form) {
    case UFORM_PAIR_LOSS_DERIVED: form = UFORM_PAIR_LOSS_BALANCED; break;
    case UFORM_PAIR_LOSS_BALANCED:
    case UFORM_PAIR_LOSS_RANKED:
    case UFORM_PAIR_LOSS_SIGMOID: break;
    default:
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive.pair_loss: unknown value %d",
                          (int)value.pair_loss);
    }

    float bias = uform_derive(value.bias, form == UFORM_PAIR_LOSS_SIGMOID ? -10.0f : 0.0f);
    if (!isfinite(bias))
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive.bias must be finite, got %g",
                          (double)value.bias);

    memcpy(widths_storage, widths, widths_count * sizeof(size_t));
    config->widths = widths_storage;
    config->widths_count = widths_count;
    config->negatives = value.negatives;
    config->ambient_repulsion_weight = ambient;
    config->pair_loss = form;
    config->groups = groups;
    *initial_log_inverse_temperature = (float)log((double)inverse_temperature);
    *initial_bias = bias;
    return UFORM_OK;
}
