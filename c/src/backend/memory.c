/* memory.c: allocation helpers over a backend's table (backend.h), shared by
 * the encode verbs and the trainer. */
#include "backend/backend.h"

void *uform_backend_alloc(uform_backend_t *backend, size_t count, size_t size, const char *what) {
    size_t bytes;
    if (!uform_mul_ok(count, size, &bytes)) {
        uform_fail(UFORM_OUT_OF_MEMORY, "%s: %zu x %zu bytes overflow", what, count, size);
        return NULL;
    }
    void *memory = backend->ops->alloc(backend, bytes);
    if (!memory) uform_fail_context(UFORM_OUT_OF_MEMORY, what);
    return memory;
}

void uform_backend_free(uform_backend_t *backend, void *memory) {
    if (memory) backend->ops->free(backend, memory);
}
