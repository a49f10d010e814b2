/* on_host.c: the CPU backend's operations lent to a device backend that has
 * none of its own yet: the inputs downloaded, the CPU's operation run on the
 * host (on the threads of the backend's executor), the outputs uploaded. The
 * results are the CPU backend's bits; the cost is the transfers and the host's
 * speed, so this is for operations over small inputs (cpu_backend.h lists
 * them). */
#include "backend/cpu/cpu_backend.h"

#include <math.h>
#include <stdlib.h>

/* `count` floats of device memory into host (nothing for a NULL source). */
static void uform_fetch(uform_backend_t *b, float *host, const float *device, size_t count) {
    if (device && count) b->ops->download(b, host, device, count * sizeof(float));
}

static void uform_store(uform_backend_t *b, float *device, const float *host, size_t count) {
    if (device && count) b->ops->upload(b, device, host, count * sizeof(float));
}

uform_status_t uform_contrastive_loss_on_host(uform_backend_t *b, const uform_contrastive_config_t *config,
                                              const uform_contrastive_batch_t *batch,
                                              const float *log_inverse_temperature, const float *bias,
                                              float *loss, float *d_embeddings,
                                              float *d_log_inverse_temperature, float *d_bias) {
    if (!config || !batch || !loss)
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive_loss: config, batch or loss is NULL");
    size_t rows = batch->count * batch->dimensions, groups = config->groups;
    size_t floats;
    if (!uform_mul_ok(batch->count, batch->dimensions, &floats) || floats > SIZE_MAX / 8 - 4 * groups)
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive_loss: %zu x %zu embeddings overflow",
                          batch->count, batch->dimensions);
    /* embeddings and their gradients (which accumulate, so they come down
     * too), the temperatures, the biases and their gradients */
    float *host = uform_alloc(2 * rows + 4 * groups + 1, sizeof(float), "contrastive loss (host copies)");
    if (!host) return UFORM_OUT_OF_MEMORY;
    float *embeddings = host, *h_d_embeddings = host + rows, *h_temperature = h_d_embeddings + rows;
    float *h_bias = h_temperature + groups, *h_d_temperature = h_bias + groups, *h_d_bias = h_d_temperature + groups;
    uform_fetch(b, embeddings, batch->embeddings, rows);
    uform_fetch(b, h_d_embeddings, d_embeddings, rows);
    uform_fetch(b, h_temperature, log_inverse_temperature, groups);
    uform_fetch(b, h_bias, bias, groups);
    uform_fetch(b, h_d_temperature, d_log_inverse_temperature, groups);
    uform_fetch(b, h_d_bias, d_bias, groups);
    uform_status_t status = b->ops->synchronize(b);
    if (status == UFORM_OK) {
        uform_backend_t cpu = uform_cpu_backend(UFORM_CPU_CLASS_AUTO, b->executor);
        uform_contrastive_batch_t on_host = *batch;
        on_host.embeddings = batch->embeddings ? embeddings : NULL;
        status = cpu.ops->contrastive_loss(&cpu, config, &on_host, log_inverse_temperature ? h_temperature : NULL,
                                           bias ? h_bias : NULL, loss, d_embeddings ? h_d_embeddings : NULL,
                                           d_log_inverse_temperature ? h_d_temperature : NULL,
                                           d_bias ? h_d_bias : NULL);
    }
    if (status == UFORM_OK) {
        uform_store(b, d_embeddings, h_d_embeddings, rows);
        uform_store(b, d_log_inverse_temperature, h_d_temperature, groups);
        uform_store(b, d_bias, h_d_bias, groups);
        status = b->ops->synchronize(b);
    }
    free(host);
    return status;
}

/* Records a failure of the host side (the transfers record their own). */
static void uform_on_host_failed(uform_backend_t *b, uform_status_t status) {
    if (status != UFORM_OK && b->failure == UFORM_OK) b->failure = status;
}

void uform_choices_loss_on_host(uform_backend_t *b, const uform_choices_batch_t *batch, const float *bytes_table,
                                const float *bytes_bias, const float *log_temperature, float scale,
                                double *loss_sum, float *d_states, float *d_bytes_table, float *d_bytes_bias,
                                float *d_log_temperature) {
    size_t n = batch->count, h = batch->hidden, groups = 1;
    for (size_t c = 0; c < n; c++)
        if (batch->groups && batch->groups[c] + 1 > groups) groups = batch->groups[c] + 1;
    size_t states = n * h, table = UFORM_BYTES * h;
    /* states and d_states, the table and its gradient (which accumulates), bias
     * and temperatures with theirs */
    float *host = uform_alloc(2 * states + 2 * table + 2 * UFORM_BYTES + 2 * groups + 1, sizeof(float),
                              "choices loss (host copies)");
    if (!host) {
        uform_on_host_failed(b, UFORM_OUT_OF_MEMORY);
        return;
    }
    float *h_states = host, *h_d_states = h_states + states, *h_table = h_d_states + states;
    float *h_d_table = h_table + table, *h_bias = h_d_table + table, *h_d_bias = h_bias + UFORM_BYTES;
    float *h_temperature = h_d_bias + UFORM_BYTES, *h_d_temperature = h_temperature + groups;
    uform_fetch(b, h_states, batch->states, states);
    uform_fetch(b, h_table, bytes_table, table);
    uform_fetch(b, h_d_table, d_bytes_table, table);
    uform_fetch(b, h_bias, bytes_bias, UFORM_BYTES);
    uform_fetch(b, h_d_bias, d_bytes_bias, UFORM_BYTES);
    uform_fetch(b, h_temperature, log_temperature, groups);
    uform_fetch(b, h_d_temperature, d_log_temperature, groups);
    uform_status_t status = b->ops->synchronize(b);
    if (status == UFORM_OK) {
        uform_backend_t cpu = uform_cpu_backend(UFORM_CPU_CLASS_AUTO, b->executor);
        uform_choices_batch_t on_host = *batch;
        on_host.states = h_states;
        cpu.ops->choices_loss(&cpu, &on_host, h_table, bytes_bias ? h_bias : NULL,
                              log_temperature ? h_temperature : NULL, scale, loss_sum,
                              d_states ? h_d_states : NULL, d_bytes_table ? h_d_table : NULL,
                              d_bytes_bias ? h_d_bias : NULL, d_log_temperature ? h_d_temperature : NULL);
        uform_store(b, d_states, h_d_states, states);
        uform_store(b, d_bytes_table, h_d_table, table);
        uform_store(b, d_bytes_bias, h_d_bias, UFORM_BYTES);
        uform_store(b, d_log_temperature, h_d_temperature, groups);
        status = b->ops->synchronize(b);
    }
    uform_on_host_failed(b, status);
    free(host);
}

uform_status_t uform_late_interaction_loss_on_host(uform_backend_t *b,
                                                   const uform_contrastive_config_t *relations_config,
                                                   uform_pair_loss_form_t form, const uform_late_batch_t *batch,
                                                   float log_inverse_temperature, float bias, float weight,
                                                   float *loss, float *d_vectors, float *d_log_inverse_temperature,
                                                   float *d_bias) {
    /* the rows the items name: up to the end of the furthest one */
    size_t rows = 0;
    for (size_t i = 0; i < batch->count; i++) {
        size_t used = batch->query_rows[i] > batch->document_rows[i] ? batch->query_rows[i] : batch->document_rows[i];
        if (used && batch->first[i] + used > rows) rows = batch->first[i] + used;
    }
    size_t floats;
    if (!uform_mul_ok(rows, batch->width, &floats) || floats > SIZE_MAX / 8)
        return uform_fail(UFORM_INVALID_ARGUMENT, "late_interaction_loss: %zu rows of %zu overflow", rows,
                          batch->width);
    float *host = uform_alloc(2 * floats + 3, sizeof(float), "late interaction loss (host copies)");
    if (!host) return UFORM_OUT_OF_MEMORY;
    float *h_vectors = host, *h_d_vectors = host + floats, *h_d_temperature = h_d_vectors + floats;
    float *h_d_bias = h_d_temperature + 1;
    uform_fetch(b, h_vectors, batch->vectors, floats);
    uform_fetch(b, h_d_vectors, d_vectors, floats);
    uform_fetch(b, h_d_temperature, d_log_inverse_temperature, 1);
    uform_fetch(b, h_d_bias, d_bias, 1);
    uform_status_t status = b->ops->synchronize(b);
    if (status == UFORM_OK) {
        uform_backend_t cpu = uform_cpu_backend(UFORM_CPU_CLASS_AUTO, b->executor);
        uform_late_batch_t on_host = *batch;
        on_host.vectors = h_vectors;
        status = cpu.ops->late_interaction_loss(&cpu, relations_config, form, &on_host, log_inverse_temperature,
                                                bias, weight, loss, d_vectors ? h_d_vectors : NULL,
                                                d_log_inverse_temperature ? h_d_temperature : NULL,
                                                d_bias ? h_d_bias : NULL);
    }
    if (status == UFORM_OK) {
        uform_store(b, d_vectors, h_d_vectors, floats);
        uform_store(b, d_log_inverse_temperature, h_d_temperature, 1);
        uform_store(b, d_bias, h_d_bias, 1);
        status = b->ops->synchronize(b);
    }
    free(host);
    return status;
}

double uform_reconstruction_loss_on_host(uform_backend_t *b, const float *predictions, const float *targets,
                                         size_t rows, size_t width, float scale, float *d_predictions) {
    size_t floats;
    if (!uform_mul_ok(rows, width, &floats) || floats > SIZE_MAX / 16) {
        uform_on_host_failed(b, uform_fail(UFORM_INVALID_ARGUMENT, "reconstruction_loss: %zu x %zu overflow",
                                           rows, width));
        return NAN;
    }
    float *host = uform_alloc(3 * floats + 1, sizeof(float), "reconstruction loss (host copies)");
    if (!host) {
        uform_on_host_failed(b, UFORM_OUT_OF_MEMORY);
        return NAN;
    }
    float *h_predictions = host, *h_targets = host + floats, *h_d_predictions = h_targets + floats;
    uform_fetch(b, h_predictions, predictions, floats);
    uform_fetch(b, h_targets, targets, floats);
    uform_status_t status = b->ops->synchronize(b);
    double loss = NAN;   /* a failed step reports a non-finite loss: nothing is applied */
    if (status == UFORM_OK) {
        uform_backend_t cpu = uform_cpu_backend(UFORM_CPU_CLASS_AUTO, b->executor);
        loss = cpu.ops->reconstruction_loss(&cpu, h_predictions, h_targets, rows, width, scale, h_d_predictions);
        uform_store(b, d_predictions, h_d_predictions, floats);
        status = b->ops->synchronize(b);
    }
    uform_on_host_failed(b, status);
    free(host);
    return status == UFORM_OK ? loss : NAN;
}
