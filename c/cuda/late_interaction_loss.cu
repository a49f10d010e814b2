/* late_interaction_loss.cu: the late-interaction training term
 * (docs/training.md section 9) on the CUDA backend (backend.h:
 * late_interaction_loss), in the CPU backend's steps
 * (backend/cpu/late_interaction_loss.c), with no loop over pairs on the host:
 * - maxsim: a warp per (query anchor, document) takes, for each query token,
 *   the FP32 dot products with the document's rows, their maximum (the first
 *   row wins ties, as on the CPU) and keeps the winning row; the maxima are
 *   summed over tokens in order in float64: m_ij;
 * - rows: a block per anchor scores s_ij = m_ij exp(tau) (+ b under SIGMOID)
 *   over the documents j != i and takes section 3's pair loss
 *   (pair_loss.cuh), leaving dloss_i/ds_ij;
 * - totals: one thread averages the anchors' losses in order and adds the
 *   temperature's and bias's gradients;
 * - forces F_ik = dloss/dm (weight / anchors) exp(tau) / |Q_i|, then the
 *   gradients: each query token's row sums F d_winner over documents in order
 *   (a block per token), each document's rows sum F q over anchors and
 *   tokens in order (a block per document, into scratch, then added): no two
 *   threads ever add to one element.
 * The batch's layout (first rows, query and document rows), relations and bags
 * are host memory (backend.h): laid out and uploaded in one copy; 24 bytes of
 * state come back. Run on an H200 (tests/gpu/test_cuda_ops.c, 2026-12-04);
 * also runs under the emulation (emulation.h). */
#include "cuda_internal.h"
#include "pair_loss.cuh"

#include <math.h>
#include <stdlib.h>

typedef struct {
    double scale;         /* weight / scored anchors (0: none scored) */
    float loss;
    uint32_t averaged;    /* scored anchors */
} uform_late_state_t;

typedef struct {
    uform_late_state_t *state;
    uform_pair_rules_t rules;
    uform_pair_loss_form_t form;
    size_t n, width, anchors, documents, tokens;   /* items, W, A, K, query tokens */
    double temperature, offset;                     /* exp(tau); SIGMOID's bias, else 0 */
    double weight;
    /* uploaded: per anchor its item, first row, query rows and first token;
     * per document its item, first row, rows and first row in d_packed; per
     * token its anchor; per item whether it is a document */
    const size_t *anchor_item, *anchor_first, *anchor_rows, *anchor_token;
    const size_t *document_item, *document_first, *document_rows, *document_packed;
    const uint32_t *token_anchor;
    const uint8_t *is_document;
    /* the device's */
    uint32_t *winners;             /* [tokens, K] */
    double *maxsim, *ds;           /* [A, n] each */
    double *row_loss, *row_dtau, *row_dbias;   /* [A] each */
    uint8_t *row_scored;           /* [A] */
    float *forces;                 /* [A, K] */
    float *d_packed;               /* [document rows, W] */
    uint8_t *scratch;              /* [gridDim.x] blocks: weight [n] doubles, kind [n] bytes */
    size_t scratch_bytes;
} uform_late_layout_t;

#define UFORM_LATE_WARPS (UFORM_CUDA_ROW_THREADS / 32)

__global__ static void uform_late_maxsim(uform_late_layout_t l, const float *vectors) {
    const unsigned lane = threadIdx.x % 32;
    const size_t w = l.width, pairs = l.anchors * l.documents;
    for (size_t p = (size_t)blockIdx.x * UFORM_LATE_WARPS + threadIdx.x / 32; p < pairs;
         p += (size_t)gridDim.x * UFORM_LATE_WARPS) {
        const size_t a = p / l.documents, k = p % l.documents;
        const size_t q = l.anchor_rows[a], rows = l.document_rows[k];
        const float *document = vectors + l.document_first[k] * w;
        double sum = 0.0;
        for (size_t t = 0; t < q; t++) {
            const float *query = vectors + (l.anchor_first[a] + t) * w;
            float best = -INFINITY;
            uint32_t winner = UINT32_MAX;   /* none: a lane without rows */
            for (size_t u = lane; u < rows; u += 32) {
                float dot = 0.0f;
                for (size_t c = 0; c < w; c++) dot += query[c] * document[u * w + c];
                if (winner == UINT32_MAX || dot > best) best = dot, winner = (uint32_t)u;
            }
            /* the warp's maximum, the lowest row among equals (the CPU's first) */
            for (int step = 16; step > 0; step /= 2) {
                float other = __shfl_xor_sync(0xffffffffu, best, step);
                uint32_t other_winner = __shfl_xor_sync(0xffffffffu, winner, step);
                if (other_winner != UINT32_MAX &&
                    (winner == UINT32_MAX || other > best || (other == best && other_winner < winner)))
                    best = other, winner = other_winner;
            }
            if (lane == 0) l.winners[(l.anchor_token[a] + t) * l.documents + k] = winner;
            sum += (double)best;
        }
        const size_t i = l.anchor_item[a], j = l.document_item[k];
        if (lane == 0) l.maxsim[a * l.n + j] = j == i ? 0.0 : sum / (double)q;
    }
}

__global__ static void uform_late_rows(uform_late_layout_t l) {
    __shared__ double shared[UFORM_CUDA_ROW_THREADS / 32];
    const size_t n = l.n;
    double *weight = (double *)(l.scratch + blockIdx.x * l.scratch_bytes);
    uint8_t *kind = (uint8_t *)(weight + n);
    for (size_t a = blockIdx.x; a < l.anchors; a += gridDim.x) {
        const size_t i = l.anchor_item[a];
        uform_pair_classify(l.rules, n, i, l.is_document, kind, weight);
        double *s = l.ds + a * n;
        const double *m = l.maxsim + a * n;
        for (size_t j = threadIdx.x; j < n; j += blockDim.x)
            s[j] = kind[j] == UFORM_CUDA_PAIR_NONE ? 0.0 : m[j] * l.temperature + l.offset;
        __syncthreads();
        double loss = 0.0;
        bool scored = uform_pair_row_loss(l.form, n, kind, weight, s, &loss);
        double dtau = 0.0, dbias = 0.0;
        for (size_t j = threadIdx.x; j < n; j += blockDim.x) {
            if (!scored) s[j] = 0.0;
            dtau += s[j] * m[j] * l.temperature;
            dbias += s[j];
        }
        dtau = uform_block_sum(dtau, shared);
        dbias = uform_block_sum(dbias, shared);
        if (threadIdx.x == 0) {
            l.row_scored[a] = scored;
            l.row_loss[a] = scored ? loss : 0.0;
            l.row_dtau[a] = dtau;
            l.row_dbias[a] = dbias;
        }
        __syncthreads();   /* the scratch is the next anchor's */
    }
}

/* The loss, the average over scored anchors, and the scalars' gradients (one
 * thread; a warp is launched). */
__global__ static void uform_late_totals(uform_late_layout_t l, float *d_tau, float *d_bias) {
    if (threadIdx.x != 0) return;
    uint32_t averaged = 0;
    double total = 0.0, dtau = 0.0, dbias = 0.0;
    for (size_t a = 0; a < l.anchors; a++)
        if (l.row_scored[a]) averaged++, total += l.row_loss[a];
    l.state->averaged = averaged;
    if (averaged == 0) return;
    const double scale = l.weight / (double)averaged;
    for (size_t a = 0; a < l.anchors; a++)
        if (l.row_scored[a]) dtau += l.row_dtau[a], dbias += l.row_dbias[a];
    l.state->loss = (float)(total / (double)averaged);
    l.state->scale = scale;
    if (d_tau) *d_tau += (float)(dtau * scale);
    if (d_bias && l.form == UFORM_PAIR_LOSS_SIGMOID) *d_bias += (float)(dbias * scale);
}

__global__ static void uform_late_forces(uform_late_layout_t l) {
    if (l.state->averaged == 0) return;
    const double scale = l.state->scale;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < l.anchors * l.documents;
         e += (size_t)gridDim.x * blockDim.x) {
        const size_t a = e / l.documents, k = e % l.documents;
        const double ds = l.ds[a * l.n + l.document_item[k]] * scale;
        l.forces[e] = ds == 0.0 ? 0.0f : (float)(ds * l.temperature / (double)l.anchor_rows[a]);
    }
}

/* dq_t += sum_k F_ak d_winner, over documents in order: a block per query token. */
__global__ static void uform_late_queries(uform_late_layout_t l, const float *vectors, float *d_vectors) {
    if (l.state->averaged == 0) return;
    const size_t w = l.width, K = l.documents;
    for (size_t token = blockIdx.x; token < l.tokens; token += gridDim.x) {
        const size_t a = l.token_anchor[token], t = token - l.anchor_token[a];
        float *dq = d_vectors + (l.anchor_first[a] + t) * w;
        for (size_t c = threadIdx.x; c < w; c += blockDim.x) {
            float sum = dq[c];
            for (size_t k = 0; k < K; k++) {
                const float force = l.forces[a * K + k];
                if (force == 0.0f) continue;
                const uint32_t u = l.winners[token * K + k];
                sum += force * vectors[(l.document_first[k] + u) * w + c];
            }
            dq[c] = sum;
        }
    }
}

/* dd_winner += F_ak q_t over anchors and tokens in order, into the document's
 * scratch rows, then added to d_vectors: a block per document, a thread per
 * column owning it in every row. */
__global__ static void uform_late_documents(uform_late_layout_t l, const float *vectors, float *d_vectors) {
    if (l.state->averaged == 0) return;
    const size_t w = l.width, K = l.documents;
    for (size_t k = blockIdx.x; k < K; k += gridDim.x) {
        float *dd = l.d_packed + l.document_packed[k] * w;
        for (size_t c = threadIdx.x; c < w; c += blockDim.x) {
            for (size_t a = 0; a < l.anchors; a++) {
                const float force = l.forces[a * K + k];
                if (force == 0.0f) continue;
                for (size_t t = 0; t < l.anchor_rows[a]; t++) {
                    const uint32_t u = l.winners[(l.anchor_token[a] + t) * K + k];
                    dd[u * w + c] += force * vectors[(l.anchor_first[a] + t) * w + c];
                }
            }
            float *target = d_vectors + l.document_first[k] * w;
            for (size_t u = 0; u < l.document_rows[k]; u++) target[u * w + c] += dd[u * w + c];
        }
    }
}

uform_status_t uform_cuda_late_interaction_loss(uform_backend_t *b, const uform_contrastive_config_t *relations_config,
                                                uform_pair_loss_form_t form, const uform_late_batch_t *batch,
                                                float log_inverse_temperature, float bias, float weight, float *loss,
                                                float *d_vectors, float *d_log_inverse_temperature, float *d_bias) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    *loss = 0;
    const size_t n = batch->count, w = batch->width;
    size_t anchors = 0, documents = 0, tokens = 0, document_rows = 0;
    for (size_t i = 0; i < n; i++) {
        if (batch->query_rows[i]) anchors++, tokens += batch->query_rows[i];
        if (batch->document_rows[i]) documents++, document_rows += batch->document_rows[i];
    }
    if (anchors == 0) return UFORM_OK;
    UFORM_TRY(uform_check_relations(batch->relations, n));
    size_t rules_bytes = uform_cuda_pair_rules_bytes(n, batch->bags, batch->relations);
    size_t pairs, winners, packed;
    /* every count below 2^31 keeps each product below 2^62 */
    if (rules_bytes == SIZE_MAX || n > 0x7fffffffu || tokens > 0x7fffffffu || document_rows > 0x7fffffffu ||
        w > 0x7fffffffu || !uform_mul_ok(anchors, n, &pairs) || !uform_mul_ok(tokens, documents, &winners) ||
        !uform_mul_ok(document_rows, w, &packed) || pairs > ((size_t)1 << 40) || winners > ((size_t)1 << 40) ||
        packed > ((size_t)1 << 40))
        return uform_fail(UFORM_INVALID_ARGUMENT, "late_interaction_loss: %zu items of %zu rows overflow", n,
                          tokens + document_rows);
    size_t blocks = 2 * (size_t)(context->multiprocessors > 0 ? context->multiprocessors : 1);
    if (blocks > anchors) blocks = anchors;

    /* The host's part: state, 4 A + 4 K sizes, tokens' anchors, items'
     * document flags, rules; then the device's. */
    size_t host_bytes = sizeof(uform_late_state_t) + (4 * anchors + 4 * documents) * sizeof(size_t);
    size_t token_at = host_bytes, flags_at = uform_cuda_align8(token_at + tokens * sizeof(uint32_t));
    size_t rules_at = uform_cuda_align8(flags_at + n);
    host_bytes = uform_cuda_align8(rules_at + rules_bytes);
    size_t scratch_bytes = uform_cuda_align8(n * (sizeof(double) + 1));
    size_t winners_at = host_bytes, maxsim_at = uform_cuda_align8(winners_at + winners * sizeof(uint32_t));
    size_t rows_at = maxsim_at + 2 * pairs * sizeof(double), scored_at = rows_at + 3 * anchors * sizeof(double);
    size_t forces_at = uform_cuda_align8(scored_at + anchors);
    size_t packed_at = uform_cuda_align8(forces_at + anchors * documents * sizeof(float));
    size_t scratch_at = uform_cuda_align8(packed_at + packed * sizeof(float));
    size_t total = scratch_at + blocks * scratch_bytes;
    uint8_t *host = (uint8_t *)calloc(1, host_bytes);
    if (!host) return uform_fail(UFORM_OUT_OF_MEMORY, "late_interaction_loss: its host layout");
    uint8_t *device = (uint8_t *)uform_cuda_grow(b, &context->pair_loss, total, "late interaction loss");
    if (!device) {
        free(host);
        return uform_cuda_synchronize(b);   /* the failed growth, recorded */
    }
    uform_late_layout_t l;
    memset(&l, 0, sizeof(l));
    l.state = (uform_late_state_t *)device;
    l.form = form;
    l.n = n, l.width = w, l.anchors = anchors, l.documents = documents, l.tokens = tokens;
    l.temperature = exp((double)log_inverse_temperature);   /* the host's exp: the CPU's */
    l.offset = form == UFORM_PAIR_LOSS_SIGMOID ? (double)bias : 0.0;
    l.weight = (double)weight;
    size_t *sizes = (size_t *)(host + sizeof(uform_late_state_t));
    const size_t *device_sizes = (const size_t *)(device + sizeof(uform_late_state_t));
    l.anchor_item = device_sizes, l.anchor_first = device_sizes + anchors;
    l.anchor_rows = device_sizes + 2 * anchors, l.anchor_token = device_sizes + 3 * anchors;
    l.document_item = device_sizes + 4 * anchors, l.document_first = l.document_item + documents;
    l.document_rows = l.document_item + 2 * documents, l.document_packed = l.document_item + 3 * documents;
    uint32_t *token_anchor = (uint32_t *)(host + token_at);
    uint8_t *is_document = host + flags_at;
    l.token_anchor = (const uint32_t *)(device + token_at);
    l.is_document = device + flags_at;
    size_t a = 0, k = 0, token = 0, row = 0;
    for (size_t i = 0; i < n; i++) {
        if (batch->query_rows[i]) {
            sizes[a] = i, sizes[anchors + a] = batch->first[i], sizes[2 * anchors + a] = batch->query_rows[i];
            sizes[3 * anchors + a] = token;
            for (size_t t = 0; t < batch->query_rows[i]; t++) token_anchor[token++] = (uint32_t)a;
            a++;
        }
        if (batch->document_rows[i]) {
            size_t *document = sizes + 4 * anchors;
            document[k] = i, document[documents + k] = batch->first[i];
            document[2 * documents + k] = batch->document_rows[i], document[3 * documents + k] = row;
            row += batch->document_rows[i];
            is_document[i] = 1;
            k++;
        }
    }
    l.rules = uform_cuda_pair_rules_layout(relations_config, n, batch->bags, batch->relations, host + rules_at,
                                           device + rules_at);
    l.winners = (uint32_t *)(device + winners_at);
    l.maxsim = (double *)(device + maxsim_at), l.ds = l.maxsim + pairs;
    l.row_loss = (double *)(device + rows_at), l.row_dtau = l.row_loss + anchors, l.row_dbias = l.row_dtau + anchors;
    l.row_scored = device + scored_at;
    l.forces = (float *)(device + forces_at);
    l.d_packed = (float *)(device + packed_at);
    l.scratch = device + scratch_at;
    l.scratch_bytes = scratch_bytes;
    uform_cuda_upload(b, device, host, host_bytes);
    free(host);
    uform_cuda_zero(b, l.maxsim, pairs * sizeof(double));
    uform_cuda_zero(b, l.d_packed, packed * sizeof(float));

    cudaStream_t stream = context->stream;
    if (documents) {
        UFORM_LAUNCH(uform_late_maxsim, uform_cuda_blocks(anchors * documents, UFORM_LATE_WARPS),
                     UFORM_CUDA_ROW_THREADS, stream)(l, batch->vectors);
        uform_cuda_launched(b, "late_interaction_loss (maxsim)");
    }
    UFORM_LAUNCH(uform_late_rows, (unsigned)blocks, UFORM_CUDA_ROW_THREADS, stream)(l);
    uform_cuda_launched(b, "late_interaction_loss (rows)");
    UFORM_LAUNCH(uform_late_totals, 1, 32, stream)(l, d_log_inverse_temperature, d_bias);
    uform_cuda_launched(b, "late_interaction_loss (totals)");
    if (documents && d_vectors) {
        UFORM_LAUNCH(uform_late_forces, uform_cuda_blocks(anchors * documents, UFORM_CUDA_ROW_THREADS),
                     UFORM_CUDA_ROW_THREADS, stream)(l);
        uform_cuda_launched(b, "late_interaction_loss (forces)");
        UFORM_LAUNCH(uform_late_queries, uform_cuda_blocks(tokens, 1), UFORM_CUDA_ROW_THREADS / 2, stream)(
            l, batch->vectors, d_vectors);
        uform_cuda_launched(b, "late_interaction_loss (queries)");
        UFORM_LAUNCH(uform_late_documents, uform_cuda_blocks(documents, 1), UFORM_CUDA_ROW_THREADS / 2, stream)(
            l, batch->vectors, d_vectors);
        uform_cuda_launched(b, "late_interaction_loss (documents)");
    }
    uform_late_state_t result;
    uform_cuda_download(b, &result, l.state, sizeof(result));
    uform_status_t status = uform_cuda_synchronize(b);
    if (status == UFORM_OK && result.averaged) *loss = result.loss;
    return status;
}
