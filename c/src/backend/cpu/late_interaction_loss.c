/* late_interaction_loss.c: the late-interaction training term
 * (docs/training.md section 9).
 *
 * Documents' rows are packed once into one contiguous matrix; each query
 * anchor multiplies its query tokens against blocks of it (one FP32 GEMM per
 * block, on the anchor's thread), takes the max over each document's rows and
 * keeps the winning row for backward. The pair losses reuse section 3's
 * relations and forms (uform_pair_losses). Backward writes query gradients per
 * anchor and document gradients per document, each in a fixed order, so no two
 * threads ever add to the same row. */
#include "backend/cpu/losses.h"

#include "backend/cpu/sgemm.h"

#include <math.h>
#include <stdlib.h>

/* Document rows per GEMM block (whole documents; one longer document is a block
 * of its own). */
#define UFORM_LATE_BLOCK_ROWS 2048

typedef struct {
    uform_sgemm_path_t path;      /* of the dot products (sgemm.h) */
    const uform_late_batch_t *batch;
    size_t n, width;
    const size_t *anchors;        /* [A] item ids of the query anchors */
    size_t anchors_count;
    const size_t *query_offset;   /* [A] first query token of each anchor in `winners` */
    const size_t *documents;      /* [K] item ids of the documents */
    size_t documents_count;
    const size_t *packed_first;   /* [K + 1] first row of document k in `packed` */
    const float *packed;          /* [Td, W] every document's rows */
    const size_t *block_first;    /* [blocks + 1] first document of each block */
    size_t blocks;
    uint32_t *winners;            /* [Tq, K] the winning row of each (query token, document) */
    double *maxsim;               /* [N, N] m_ij */
    float *scratch;               /* [threads][scratch_floats] */
    size_t scratch_floats;
    const float *forces;          /* [N, N] dloss/dm_ij / |Q_i|, weighted (backward) */
    float *d_vectors;             /* backward: query rows */
    float *d_packed;              /* backward: [Td, W] document rows */
} uform_late_job_t;

static void uform_late_forward(void *context, size_t begin, size_t end, size_t thread) {
    uform_late_job_t *job = context;
    const uform_late_batch_t *b = job->batch;
    const size_t w = job->width, k_count = job->documents_count;
    float *s = job->scratch + thread * job->scratch_floats;
    for (size_t a = begin; a < end; a++) {
        const size_t i = job->anchors[a], q = b->query_rows[i];
        const float *queries = b->vectors + b->first[i] * w;
        for (size_t block = 0; block < job->blocks; block++) {
            const size_t k0 = job->block_first[block], k1 = job->block_first[block + 1];
            const size_t base = job->packed_first[k0], rows = job->packed_first[k1] - base;
            uform_sgemm_path(job->path, false, NULL, q, rows, w, (uform_matrix_t){queries, w, false},
                             (uform_matrix_t){job->packed + base * w, w, true}, NULL, false, s,
                             rows);
            for (size_t k = k0; k < k1; k++) {
                const size_t j = job->documents[k];
                const size_t start = job->packed_first[k] - base;
                const size_t length = job->packed_first[k + 1] - job->packed_first[k];
                double sum = 0;
                for (size_t t = 0; t < q; t++) {
                    const float *row = s + t * rows + start;
                    size_t best = 0;
                    for (size_t u = 1; u < length; u++)
                        if (row[u] > row[best]) best = u;  /* strict: the first row wins ties */
                    job->winners[(job->query_offset[a] + t) * k_count + k] = (uint32_t)best;
                    sum += (double)row[best];
                }
                job->maxsim[i * job->n + j] = j == i ? 0.0 : sum / (double)q;
            }
        }
    }
}

/* dq_t += sum_k force_ij d_winner, per anchor: each query row has one owner. */
static void uform_late_backward_queries(void *context, size_t begin, size_t end, size_t thread) {
    (void)thread;
    uform_late_job_t *job = context;
    const uform_late_batch_t *b = job->batch;
    const size_t w = job->width, k_count = job->documents_count;
    for (size_t a = begin; a < end; a++) {
        const size_t i = job->anchors[a], q = b->query_rows[i];
        for (size_t t = 0; t < q; t++) {
            float *dq = job->d_vectors + (b->first[i] + t) * w;
            for (size_t k = 0; k < k_count; k++) {
                const float force = job->forces[i * job->n + job->documents[k]];
                if (force == 0.0f) continue;
                const uint32_t u = job->winners[(job->query_offset[a] + t) * k_count + k];
                const float *d = job->packed + (job->packed_first[k] + u) * w;
                for (size_t c = 0; c < w; c++) dq[c] += force * d[c];
            }
        }
    }
}

/* dd_winner += force_ij q_t, per document: each document row has one owner. */
static void uform_late_backward_documents(void *context, size_t begin, size_t end, size_t thread) {
    (void)thread;
    uform_late_job_t *job = context;
    const uform_late_batch_t *b = job->batch;
    const size_t w = job->width, k_count = job->documents_count;
    for (size_t k = begin; k < end; k++) {
        const size_t j = job->documents[k];
        for (size_t a = 0; a < job->anchors_count; a++) {
            const size_t i = job->anchors[a];
            const float force = job->forces[i * job->n + j];
            if (force == 0.0f) continue;
            for (size_t t = 0; t < b->query_rows[i]; t++) {
                const uint32_t u = job->winners[(job->query_offset[a] + t) * k_count + k];
                const float *q = b->vectors + (b->first[i] + t) * w;
                float *dd = job->d_packed + (job->packed_first[k] + u) * w;
                for (size_t c = 0; c < w; c++) dd[c] += force * q[c];
            }
        }
    }
}

static void uform_late_run(uform_executor_t *executor, size_t count, uform_range_fn_t fn, void *job) {
    if (executor)
        uform_parallel_for(executor, count, 1, fn, job);
    else if (count)
        fn(job, 0, count, 0);
}

uform_status_t uform_late_interaction_loss(uform_executor_t *executor, uform_sgemm_path_t path,
                                           const uform_contrastive_config_t *relations_config,
                                           uform_pair_loss_form_t form, const uform_late_batch_t *b,
                                           float log_inverse_temperature, float bias, float weight,
                                           float *loss, float *d_vectors,
                                           float *d_log_inverse_temperature, float *d_bias) {
    *loss = 0;
    const size_t n = b->count, w = b->width;
    size_t anchors_count = 0, documents_count = 0, query_tokens = 0, document_rows = 0;
    for (size_t i = 0; i < n; i++) {
        if (b->query_rows[i]) anchors_count++, query_tokens += b->query_rows[i];
        if (b->document_rows[i]) documents_count++, document_rows += b->document_rows[i];
    }
    if (anchors_count == 0) return UFORM_OK;
    const size_t threads = executor ? uform_executor_width(executor) : 1;
    size_t longest_query = 0, longest_document = 0;
    for (size_t i = 0; i < n; i++) {
        if (b->query_rows[i] > longest_query) longest_query = b->query_rows[i];
        if (b->document_rows[i] > longest_document) longest_document = b->document_rows[i];
    }
    const size_t block_rows = longest_document > UFORM_LATE_BLOCK_ROWS ? longest_document
                                                                      : UFORM_LATE_BLOCK_ROWS;
    size_t pairs, winners;
    if (!uform_mul_ok(n, n, &pairs) || !uform_mul_ok(query_tokens, documents_count + 1, &winners))
        return uform_fail(UFORM_OUT_OF_MEMORY, "late interaction: %zu items overflow the score table", n);

    size_t *anchors = uform_alloc(anchors_count, sizeof(size_t), "late interaction anchors");
    size_t *query_offset = uform_alloc(anchors_count, sizeof(size_t), "late interaction anchors");
    size_t *documents = uform_alloc(documents_count + 1, sizeof(size_t), "late interaction documents");
    size_t *packed_first = uform_alloc(documents_count + 1, sizeof(size_t), "late interaction documents");
    size_t *block_first = uform_alloc(documents_count + 2, sizeof(size_t), "late interaction blocks");
    float *packed = uform_alloc_aligned(document_rows + 1, w * sizeof(float), "late interaction documents");
    float *d_packed = uform_alloc_aligned(document_rows + 1, w * sizeof(float), "late interaction gradients");
    uint32_t *winner_rows = uform_alloc(winners, sizeof(uint32_t), "late interaction maxima");
    double *maxsim = uform_alloc_zeroed(pairs, sizeof(double), "late interaction scores");
    double *scores = uform_alloc(pairs, sizeof(double), "late interaction scores");
    float *forces = uform_alloc_zeroed(pairs, sizeof(float), "late interaction forces");
    double *row_loss = uform_alloc(n, sizeof(double), "late interaction losses");
    uint8_t *flags = uform_alloc_zeroed(3 * n, 1, "late interaction flags");
    float *scratch = uform_alloc_aligned(threads * longest_query, block_rows * sizeof(float),
                                         "late interaction scratch");
    uform_status_t status = UFORM_OUT_OF_MEMORY;
    if (!anchors || !query_offset || !documents || !packed_first || !block_first || !packed ||
        !d_packed || !winner_rows || !maxsim || !scores || !forces || !row_loss || !flags || !scratch)
        goto done;
    uint8_t *is_anchor = flags, *is_document = flags + n, *scored = flags + 2 * n;

    /* The anchors, the documents packed contiguously, and blocks of whole documents. */
    size_t a = 0, k = 0, offset = 0;
    packed_first[0] = 0;
    for (size_t i = 0; i < n; i++) {
        if (b->query_rows[i]) {
            is_anchor[i] = 1;
            query_offset[a] = offset;
            offset += b->query_rows[i];
            anchors[a++] = i;
        }
        if (b->document_rows[i]) {
            is_document[i] = 1;
            memcpy(packed + packed_first[k] * w, b->vectors + b->first[i] * w,
                   b->document_rows[i] * w * sizeof(float));
            documents[k] = i;
            packed_first[k + 1] = packed_first[k] + b->document_rows[i];
            k++;
        }
    }
    size_t blocks = 0;
    block_first[0] = 0;
    for (size_t d = 0; d < documents_count;) {
        size_t last = d + 1;
        while (last < documents_count && packed_first[last + 1] - packed_first[d] <= block_rows) last++;
        block_first[++blocks] = last;
        d = last;
    }
    memset(d_packed, 0, (document_rows + 1) * w * sizeof(float));

    uform_late_job_t job = {
        .path = path, .batch = b, .n = n, .width = w, .anchors = anchors, .anchors_count = anchors_count,
        .query_offset = query_offset, .documents = documents, .documents_count = documents_count,
        .packed_first = packed_first, .packed = packed, .block_first = block_first,
        .blocks = blocks, .winners = winner_rows, .maxsim = maxsim, .scratch = scratch,
        .scratch_floats = longest_query * block_rows, .forces = forces, .d_vectors = d_vectors,
        .d_packed = d_packed,
    };
    uform_late_run(executor, anchors_count, uform_late_forward, &job);

    /* Scores, then the pair losses of section 3 over query anchors and documents. */
    const double temperature = exp((double)log_inverse_temperature);
    const bool sigmoid = form == UFORM_PAIR_LOSS_SIGMOID;
    for (size_t e = 0; e < pairs; e++) scores[e] = maxsim[e] * temperature + (sigmoid ? (double)bias : 0.0);
    status = uform_pair_losses(executor, relations_config, form, n, b->bags, b->relations, is_anchor,
                               is_document, scores, row_loss, scored);
    if (status != UFORM_OK) goto done;
    size_t averaged = 0;
    double total = 0;
    for (size_t i = 0; i < n; i++)
        if (scored[i]) averaged++, total += row_loss[i];
    if (averaged == 0) goto done;
    *loss = (float)(total / (double)averaged);

    /* dm_ij = ds_ij exp(tau), scaled by weight / anchors and spread over |Q_i|. */
    const double scale = (double)weight / (double)averaged;
    double dtau = 0, dbias = 0;
    for (size_t i = 0; i < n; i++) {
        if (!scored[i]) continue;
        for (size_t j = 0; j < n; j++) {
            const double ds = scores[i * n + j] * scale;
            if (ds == 0.0) continue;
            dtau += ds * maxsim[i * n + j] * temperature;
            dbias += ds;
            forces[i * n + j] = (float)(ds * temperature / (double)b->query_rows[i]);
        }
    }
    if (d_log_inverse_temperature) *d_log_inverse_temperature += (float)dtau;
    if (d_bias && sigmoid) *d_bias += (float)dbias;
    uform_late_run(executor, anchors_count, uform_late_backward_queries, &job);
    uform_late_run(executor, documents_count, uform_late_backward_documents, &job);
    for (size_t d = 0; d < documents_count; d++) {
        const size_t i = documents[d];
        float *target = d_vectors + b->first[i] * w;
        const float *source = d_packed + packed_first[d] * w;
        for (size_t e = 0; e < b->document_rows[i] * w; e++) target[e] += source[e];
    }

done:
    free(anchors);
    free(query_offset);
    free(documents);
    free(packed_first);
    free(block_first);
    uform_free_aligned(packed);
    uform_free_aligned(d_packed);
    free(winner_rows);
    free(maxsim);
    free(scores);
    free(forces);
    free(row_loss);
    free(flags);
    uform_free_aligned(scratch);
    return status;
}
