/* host_state.c: the trainer's flat buffers (parameters, gradients, AdamW
 * moments, decay flags) seen from the host.
 *
 * They live in the memory of the trainer's backend. On the CPU backend that is
 * host memory, and init, resume, save and trainer_tensor read and write them in
 * place. On a device (a backend whose memory the host cannot touch) those go
 * through host copies moved with one transfer each; a step never does: its
 * math is the backend's operations. */
#include "train/trainer_internal.h"

bool uform_trainer_on_host(const uform_trainer_t *t) { return t->backend.ops->host_memory; }

uform_status_t uform_trainer_read(uform_trainer_t *t, void *host, const void *device, size_t bytes) {
    if (!bytes || host == device) return UFORM_OK;
    if (uform_trainer_on_host(t)) {
        memcpy(host, device, bytes);
        return UFORM_OK;
    }
    uform_backend_t *b = &t->backend;
    b->ops->download(b, host, device, bytes);
    return b->ops->synchronize(b);
}

uform_status_t uform_trainer_write(uform_trainer_t *t, void *device, const void *host, size_t bytes) {
    if (!bytes || host == device) return UFORM_OK;
    if (uform_trainer_on_host(t)) {
        memcpy(device, host, bytes);
        return UFORM_OK;
    }
    uform_backend_t *b = &t->backend;
    b->ops->upload(b, device, host, bytes);
    return b->ops->synchronize(b);
}

uform_status_t uform_host_state_open(uform_trainer_t *t, uform_host_state_t *h, bool read) {
    memset(h, 0, sizeof(*h));
    if (uform_trainer_on_host(t)) {
        *h = (uform_host_state_t){t->parameters, t->first_moment, t->second_moment, t->decay, false};
        return UFORM_OK;
    }
    h->copies = true;
    h->parameters = uform_alloc_aligned(3 * t->count, sizeof(float), "trainer state (host copy)");
    h->decay = h->parameters ? uform_alloc(t->count, 1, "trainer decay flags (host copy)") : NULL;
    if (!h->parameters || !h->decay) {
        uform_host_state_close(h);
        return UFORM_OUT_OF_MEMORY;
    }
    h->first_moment = h->parameters + t->count;
    h->second_moment = h->first_moment + t->count;
    if (!read) return UFORM_OK;
    size_t bytes = t->count * sizeof(float);
    uform_status_t status = uform_trainer_read(t, h->parameters, t->parameters, bytes);
    if (status == UFORM_OK) status = uform_trainer_read(t, h->first_moment, t->first_moment, bytes);
    if (status == UFORM_OK) status = uform_trainer_read(t, h->second_moment, t->second_moment, bytes);
    if (status == UFORM_OK) status = uform_trainer_read(t, h->decay, t->decay, t->count);
    if (status != UFORM_OK) uform_host_state_close(h);
    return status;
}

uform_status_t uform_host_state_commit(uform_trainer_t *t, const uform_host_state_t *h) {
    if (!h->copies) return UFORM_OK;
    size_t bytes = t->count * sizeof(float);
    UFORM_TRY(uform_trainer_write(t, t->parameters, h->parameters, bytes));
    UFORM_TRY(uform_trainer_write(t, t->first_moment, h->first_moment, bytes));
    UFORM_TRY(uform_trainer_write(t, t->second_moment, h->second_moment, bytes));
    return uform_trainer_write(t, t->decay, h->decay, t->count);
}

void uform_host_state_close(uform_host_state_t *h) {
    if (h->copies) {
        uform_free_aligned(h->parameters);
        free(h->decay);
    }
    memset(h, 0, sizeof(*h));
}
