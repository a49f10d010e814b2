/* loss_checks.c: the checks of a loss operation's inputs (losses.h), run by
 * every backend before it computes: relations, embeddings, parameters. */
#include "backend/losses.h"

#include <math.h>
#include <stdlib.h>

/* seen: n zeroed bytes, left zeroed. */
uform_status_t uform_check_edges(const uform_edges_t *edges, size_t count, uint8_t *seen,
                                 const char *name) {
    if (!edges->offsets) return UFORM_OK;
    const size_t *offsets = edges->offsets;
    if (offsets[0] != 0)
        return uform_fail(UFORM_INVALID_ARGUMENT, "relations.%s: offsets[0] = %zu, not 0", name,
                          offsets[0]);
    for (size_t i = 0; i < count; i++)
        if (offsets[i + 1] < offsets[i])
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "relations.%s: offsets[%zu] = %zu is less than offsets[%zu] = %zu",
                              name, i + 1, offsets[i + 1], i, offsets[i]);
    if (offsets[count] > 0 && !edges->ids)
        return uform_fail(UFORM_INVALID_ARGUMENT, "relations.%s: %zu edges but ids is NULL",
                          name, offsets[count]);
    for (size_t e = 0; e < offsets[count]; e++) {
        if (edges->ids[e] >= count)
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "relations.%s: ids[%zu] = %u is not below the %zu items", name, e,
                              (unsigned)edges->ids[e], count);
        if (edges->weights) {
            float w = edges->weights[e];
            if (!(w >= 0.0f) || isinf(w))
                return uform_fail(UFORM_INVALID_ARGUMENT,
                                  "relations.%s: weights[%zu] = %g must be finite and "
                                  "non-negative",
                                  name, e, (double)w);
        }
    }
    /* One edge per (anchor, candidate) and kind; self edges are dropped, not counted. */
    uform_status_t status = UFORM_OK;
    for (size_t i = 0; i < count && status == UFORM_OK; i++) {
        size_t e = offsets[i];
        for (; e < offsets[i + 1]; e++) {
            uint32_t j = edges->ids[e];
            if (j == i) continue;
            if (seen[j]) {
                status = uform_fail(UFORM_INVALID_ARGUMENT,
                                    "relations.%s: edge %zu -> %u given twice (ids[%zu])", name, i,
                                    (unsigned)j, e);
                break;
            }
            seen[j] = 1;
        }
        for (size_t f = offsets[i]; f < e; f++) seen[edges->ids[f]] = 0;
    }
    return status;
}

uform_status_t uform_contrastive_check(const uform_contrastive_config_t *config,
                                       const uform_contrastive_batch_t *batch,
                                       const float *log_inverse_temperature, const float *bias,
                                       const float *loss) {
    return uform_contrastive_check_parts(config, batch, log_inverse_temperature, bias, loss, true);
}

uform_status_t uform_contrastive_check_parts(const uform_contrastive_config_t *config,
                                             const uform_contrastive_batch_t *batch,
                                             const float *log_inverse_temperature, const float *bias,
                                             const float *loss, bool scan_embeddings) {
    if (!config || !batch || !loss)
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive: NULL configuration, batch or loss");
    if (!config->widths || config->widths_count == 0 ||
        config->widths_count > UFORM_MATRYOSHKA_WIDTHS_MAX)
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "contrastive: widths must hold 1 to %d values, got %zu",
                          UFORM_MATRYOSHKA_WIDTHS_MAX, config->widths_count);
    const size_t n = batch->count, d = batch->dimensions;
    if (d == 0) return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive: dimensions must be >= 1");
    for (size_t k = 0; k < config->widths_count; k++)
        if (config->widths[k] < 1 || config->widths[k] > d)
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "contrastive: widths[%zu] = %zu is outside [1, %zu]", k,
                              config->widths[k], d);
    if (config->groups == 0)
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive: groups must be at least 1");
    if ((int)config->negatives != UFORM_NEGATIVES_AMBIENT &&
        (int)config->negatives != UFORM_NEGATIVES_NAMED)
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive: unknown negatives %d",
                          (int)config->negatives);
    const int form = (int)config->pair_loss;
    if (form != UFORM_PAIR_LOSS_BALANCED && form != UFORM_PAIR_LOSS_RANKED &&
        form != UFORM_PAIR_LOSS_SIGMOID)
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "contrastive: pair_loss %d is not BALANCED, RANKED or SIGMOID", form);
    if (!(config->ambient_repulsion_weight >= 0.0f) || isinf(config->ambient_repulsion_weight))
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "contrastive: ambient_repulsion_weight %g must be finite and >= 0",
                          (double)config->ambient_repulsion_weight);
    if (n > (size_t)UINT32_MAX)
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive: %zu items exceed uint32 ids", n);
    size_t elements;
    if (!uform_mul_ok(n, d, &elements))
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive: %zu x %zu overflows", n, d);

    if (!log_inverse_temperature)
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive: log_inverse_temperature is NULL");
    for (size_t g = 0; g < config->groups; g++)
        if (!isfinite(log_inverse_temperature[g]))
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "contrastive: log_inverse_temperature[%zu] = %g is not finite", g,
                              (double)log_inverse_temperature[g]);
    if (form == UFORM_PAIR_LOSS_SIGMOID) {
        if (!bias) return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive: SIGMOID needs a bias");
        for (size_t g = 0; g < config->groups; g++)
            if (!isfinite(bias[g]))
                return uform_fail(UFORM_INVALID_ARGUMENT,
                                  "contrastive: bias[%zu] = %g is not finite", g, (double)bias[g]);
    }
    if (n == 0) return UFORM_OK;

    if (!batch->embeddings)
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive: embeddings is NULL");
    for (size_t e = 0; scan_embeddings && e < elements; e++)
        if (!isfinite(batch->embeddings[e]))
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "contrastive: embeddings[%zu][%zu] = %g is not finite", e / d, e % d,
                              (double)batch->embeddings[e]);
    if (batch->groups)
        for (size_t i = 0; i < n; i++)
            if (batch->groups[i] >= config->groups)
                return uform_fail(UFORM_INVALID_ARGUMENT,
                                  "contrastive: groups[%zu] = %u is not below the %zu temperature "
                                  "groups",
                                  i, (unsigned)batch->groups[i], config->groups);
    return uform_check_relations(batch->relations, n);
}

uform_status_t uform_check_relations(const uform_relations_t *relations, size_t count) {
    if (!relations || count == 0) return UFORM_OK;
    uint8_t *seen = uform_alloc_zeroed(count, 1, "relations check");
    if (!seen) return UFORM_OUT_OF_MEMORY;
    uform_status_t status = uform_check_edges(&relations->attract, count, seen, "attract");
    if (status == UFORM_OK) status = uform_check_edges(&relations->repel, count, seen, "repel");
    if (status == UFORM_OK) status = uform_check_edges(&relations->ignore, count, seen, "ignore");
    free(seen);
    return status;
}
