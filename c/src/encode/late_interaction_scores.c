/* late_interaction_scores.c: uform_late_interaction_scores, MaxSim over token
 * rows: the checks of the two sides, then the backend's maxsim (backend.h;
 * the CPU's is backend/cpu/maxsim.c, which says how it blocks the work; a
 * VRAM executor's first GPU runs c/cuda/maxsim.cu's).
 *
 *   score(q, d) = (1 / |q|) sum over query rows i of max over document rows j of <q_i, d_j>,
 *   0 when q or d has no rows. */
#include "backend/cpu/cpu_backend.h"
#include "backend/vram.h"
#include "core/internal.h"

/* ---- validation ---------------------------------------------------------------- */

/* Bytes of one scalar the scorer reads, 0 for the ones it does not. */
static size_t uform_li_scalar_bytes(uform_scalar_t scalar) {
    switch (scalar) {
    case UFORM_SCALAR_F32: return 4;
    case UFORM_SCALAR_BF16:
    case UFORM_SCALAR_F16: return 2;
    case UFORM_SCALAR_I8:
    case UFORM_SCALAR_E4M3:
    case UFORM_SCALAR_E5M2: return 1;
    default: return 0;
    }
}

static uform_status_t uform_li_check_side(const uform_token_rows_t *side, const char *name) {
    if (!side) return uform_fail(UFORM_INVALID_ARGUMENT, "%s: NULL", name);
    size_t scalar_bytes = uform_li_scalar_bytes(side->scalar);
    if (scalar_bytes == 0) {
        /* Outside the header's domain: an invalid argument, named, rather
         * than UNSUPPORTED (no build scores them). */
        if (side->scalar == UFORM_SCALAR_B1)
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "%s.scalar: B1 token rows cannot be scored (bits carry no dot "
                              "product); use F32, BF16, F16, E4M3, E5M2 or I8",
                              name);
        return uform_fail(UFORM_INVALID_ARGUMENT, "%s.scalar: %d is not a uform_scalar_t", name,
                          (int)side->scalar);
    }
    if (side->width == 0) return uform_fail(UFORM_INVALID_ARGUMENT, "%s.width: must be positive", name);
    size_t used;
    if (!uform_mul_ok(side->width, scalar_bytes, &used))
        return uform_fail(UFORM_INVALID_ARGUMENT, "%s.width: %zu scalars per row overflow", name,
                          side->width);
    if (side->row_bytes < used)
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "%s.row_bytes: %zu is less than width x scalar size = %zu", name,
                          side->row_bytes, used);
    if (side->count == SIZE_MAX)
        return uform_fail(UFORM_INVALID_ARGUMENT, "%s.count: %zu items overflow", name, side->count);
    if (!side->offsets) {
        if (side->count == 0) return UFORM_OK;
        return uform_fail(UFORM_INVALID_ARGUMENT, "%s.offsets: NULL with %zu items", name,
                          side->count);
    }
    const size_t *offsets = side->offsets;
    for (size_t i = 0; i < side->count; i++)
        if (offsets[i + 1] < offsets[i])
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "%s.offsets[%zu]: %zu is less than offsets[%zu] = %zu; offsets must "
                              "not decrease",
                              name, i + 1, offsets[i + 1], i, offsets[i]);
    size_t first = offsets[0], last = offsets[side->count];
    if (first == last) return UFORM_OK;
    if (!side->data)
        return uform_fail(UFORM_INVALID_ARGUMENT, "%s.data: NULL while offsets span rows %zu to %zu",
                          name, first, last);
    /* The last row read ends at data + (last - 1) * row_bytes + used. */
    size_t end;
    if (!uform_mul_ok(last - 1, side->row_bytes, &end) || !uform_add_ok(end, used, &end) ||
        !uform_add_ok((size_t)(uintptr_t)side->data, end, &end))
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "%s.offsets: %zu rows of %zu bytes overflow the address space", name,
                          last, side->row_bytes);
    return UFORM_OK;
}

uform_status_t uform_late_interaction_scores(uform_executor_t *executor,
                                             const uform_token_rows_t *queries,
                                             const uform_token_rows_t *documents, float *scores) {
    UFORM_TRY(uform_li_check_side(queries, "queries"));
    UFORM_TRY(uform_li_check_side(documents, "documents"));
    if (queries->width != documents->width)
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "documents.width: %zu differs from queries.width %zu", documents->width,
                          queries->width);
    size_t query_count = queries->count, document_count = documents->count, cells;
    if (query_count == 0 || document_count == 0) return UFORM_OK;
    if (!uform_mul_ok(query_count, document_count, &cells) ||
        !uform_mul_ok(cells, sizeof(float), &cells))
        return uform_fail(UFORM_INVALID_ARGUMENT, "scores: %zu x %zu floats overflow", query_count,
                          document_count);
    if (!scores)
        return uform_fail(UFORM_INVALID_ARGUMENT, "scores: NULL for %zu x %zu scores", query_count,
                          document_count);

    /* A VRAM executor's first GPU scores (maxsim.cu: the same bits as the
     * CPU's FMA paths), held for the call as a verb holds its backend. */
    uform_backend_t backend;
    if (uform_vram_first_backend(executor, &backend) && backend.ops->maxsim) {
        if (backend.ops->acquire) backend.ops->acquire(&backend);
        uform_status_t status = backend.ops->maxsim(&backend, queries, documents, scores);
        if (backend.ops->release) backend.ops->release(&backend);
        return status;
    }
    backend = uform_cpu_backend(UFORM_CPU_CLASS_AUTO, executor);
    return backend.ops->maxsim(&backend, queries, documents, scores);
}
