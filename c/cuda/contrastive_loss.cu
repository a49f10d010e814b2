/* contrastive_loss.cu: the contrastive term (docs/training.md section 3) and
 * its gradients on the CUDA backend (backend.h: contrastive_loss), in float64
 * and in the CPU backend's steps (backend/cpu/contrastive_loss.c), with no
 * loop over pairs on the host. For each Matryoshka width:
 * - units: a block per item makes its prefix a unit vector (float64);
 * - rows: a block per anchor classifies its candidates (pair_loss.cuh), a
 *   warp per candidate takes the cosine, the block the anchor's pair loss;
 *   it writes the anchor's row of forces F_ij = dloss_i/dcosine_ij (FP32, as
 *   the CPU keeps them) and its loss and temperature sums;
 * - totals: one thread adds the anchors' rows in anchor order (the CPU's);
 * - columns: a block per item takes du_i = sum_j (F_ij + F_ji) u_j, each
 *   element a sum over j in order, back through the prefix renormalisation
 *   into a float64 accumulator.
 * Then the accumulator is added to d_embeddings, the groups' sums to theirs.
 * Sums over candidates and over a vector's elements are fixed trees over
 * fixed blocks (reduce.cuh): the bits do not depend on the grid; they may
 * differ from the CPU's in the last bits of float64 (other orders).
 *
 * The relations, bags and groups are host memory (backend.h): uploaded with
 * the temperatures, computed on the host as the CPU does, in one copy; 40
 * bytes of state come back. The checks are the CPU's (loss_checks.c), on the
 * host, except that the embeddings' finiteness is scanned on the device: a
 * non-finite one stops every kernel before it writes an output. Run on an
 * H200 (tests/gpu/test_cuda_ops.c, 2026-12-04); also runs under the emulation
 * (emulation.h). */
#include "cuda_internal.h"
#include "pair_loss.cuh"

#include <math.h>
#include <stdlib.h>

/* What the kernels share across the call (device memory, uploaded first). */
typedef struct {
    unsigned long long first_non_finite;   /* the first non-finite embedding's index; ~0: none */
    int stop;                              /* no anchor is scored: the CPU's break */
    int any;                               /* some width scored an anchor */
    double scale;                          /* 1 / (scored anchors x widths) */
    double total;                          /* the loss, float64 */
    float loss;
} uform_contrastive_state_t;

/* Device pointers into the call's layout. */
typedef struct {
    uform_contrastive_state_t *state;
    const double *temperatures, *offsets;   /* [G]: exp(log_inverse_temperature), SIGMOID's bias (else 0) */
    double *dtau, *dbias;                   /* [G] float64 sums over widths */
    const uint32_t *groups;                 /* [n] or NULL */
    uform_pair_rules_t rules;
    uform_pair_loss_form_t form;
    size_t n, dimensions, width, widest;
    size_t widths_count;
    double *units, *norms;                  /* [n, width], [n] */
    float *forces;                          /* [n, n] */
    double *row_loss, *row_dtau, *row_dbias;  /* [n] each */
    uint8_t *row_scored;                    /* [n] */
    double *dembeddings;                    /* [n, dimensions] */
    uint8_t *scratch;                       /* [gridDim.x] blocks of scratch_bytes */
    size_t scratch_bytes;
} uform_contrastive_layout_t;

/* A block's scratch: weight, cosine, score [n] and du [widest] doubles, kind [n] bytes. */
struct uform_contrastive_scratch_t {
    double *weight, *cosine, *score, *du;
    uint8_t *kind;
};

__device__ static uform_contrastive_scratch_t uform_contrastive_scratch(const uform_contrastive_layout_t &l) {
    uform_contrastive_scratch_t s;
    double *base = (double *)(l.scratch + blockIdx.x * l.scratch_bytes);
    s.weight = base;
    s.cosine = base + l.n;
    s.score = base + 2 * l.n;
    s.du = base + 3 * l.n;
    s.kind = (uint8_t *)(base + 3 * l.n + l.widest);
    return s;
}

__device__ static bool uform_contrastive_refused(const uform_contrastive_layout_t &l) {
    return l.state->first_non_finite != ~0ull;
}

__global__ static void uform_contrastive_scan(const float *embeddings, size_t count, uform_contrastive_state_t *state) {
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < count; e += (size_t)gridDim.x * blockDim.x)
        if (!isfinite(embeddings[e])) atomicMin(&state->first_non_finite, (unsigned long long)e);
}

/* The prefix e[0:width] of item blockIdx.x as a unit vector. */
__global__ static void uform_contrastive_units(uform_contrastive_layout_t l, const float *embeddings) {
    __shared__ double shared[UFORM_CUDA_ROW_THREADS / 32];
    if (uform_contrastive_refused(l)) return;
    size_t i = blockIdx.x;
    const float *row = embeddings + i * l.dimensions;
    double sum = 0.0;
    for (size_t k = threadIdx.x; k < l.width; k += blockDim.x) sum += (double)row[k] * (double)row[k];
    double norm = sqrt(uform_block_sum(sum, shared));
    double inverse = 1.0 / (norm > 1e-12 ? norm : 1e-12);
    for (size_t k = threadIdx.x; k < l.width; k += blockDim.x) l.units[i * l.width + k] = (double)row[k] * inverse;
    if (threadIdx.x == 0) l.norms[i] = norm;
}

/* Each anchor's scores, loss and row of forces (the CPU's pass 1). */
__global__ static void uform_contrastive_rows(uform_contrastive_layout_t l) {
    __shared__ double shared[UFORM_CUDA_ROW_THREADS / 32];
    if (uform_contrastive_refused(l)) return;
    uform_contrastive_scratch_t s = uform_contrastive_scratch(l);
    const size_t n = l.n, w = l.width;
    const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    for (size_t i = blockIdx.x; i < n; i += gridDim.x) {
        const size_t g = l.groups ? l.groups[i] : 0;
        const double temperature = l.temperatures[g], offset = l.offsets[g];
        uform_pair_classify(l.rules, n, i, NULL, s.kind, s.weight);
        const double *unit = l.units + i * w;
        for (size_t j = warp; j < n; j += warps) {
            double c = 0.0;
            if (s.kind[j] != UFORM_CUDA_PAIR_NONE) {
                const double *other = l.units + j * w;
                for (size_t k = lane; k < w; k += 32) c += unit[k] * other[k];
                for (int step = 16; step > 0; step /= 2) c += __shfl_xor_sync(0xffffffffu, c, step);
            }
            if (lane == 0) {
                s.cosine[j] = c;
                s.score[j] = s.kind[j] == UFORM_CUDA_PAIR_NONE ? 0.0 : c * temperature + offset;
            }
        }
        __syncthreads();
        double loss = 0.0;
        bool scored = uform_pair_row_loss(l.form, n, s.kind, s.weight, s.score, &loss);
        float *forces = l.forces + i * n;
        double dtau = 0.0, dbias = 0.0;
        for (size_t j = threadIdx.x; j < n; j += blockDim.x) {
            double ds = scored ? s.score[j] : 0.0;
            forces[j] = (float)(ds * temperature);
            dtau += ds * s.cosine[j] * temperature;
            dbias += ds;
        }
        dtau = uform_block_sum(dtau, shared);
        dbias = uform_block_sum(dbias, shared);
        if (threadIdx.x == 0) {
            l.row_scored[i] = scored;
            l.row_loss[i] = loss;
            l.row_dtau[i] = dtau;
            l.row_dbias[i] = l.form == UFORM_PAIR_LOSS_SIGMOID ? dbias : 0.0;
        }
        __syncthreads();   /* the scratch is the next anchor's */
    }
}

/* The anchors' sums in anchor order (one thread; a warp is launched). */
__global__ static void uform_contrastive_totals(uform_contrastive_layout_t l) {
    if (threadIdx.x != 0 || uform_contrastive_refused(l) || l.state->stop) return;
    size_t anchors = 0;
    for (size_t i = 0; i < l.n; i++) anchors += l.row_scored[i];
    if (anchors == 0) {   /* the same at every width: relations do not depend on it */
        l.state->stop = 1;
        return;
    }
    l.state->any = 1;
    const double scale = 1.0 / ((double)anchors * (double)l.widths_count);
    double width_loss = 0.0;
    for (size_t i = 0; i < l.n; i++) {
        if (!l.row_scored[i]) continue;
        size_t g = l.groups ? l.groups[i] : 0;
        width_loss += l.row_loss[i];
        l.dtau[g] += l.row_dtau[i] * scale;
        l.dbias[g] += l.row_dbias[i] * scale;
    }
    l.state->total += width_loss * scale;
    l.state->scale = scale;
}

/* du_i = scale sum_j (F_ij + F_ji) u_j, back through the prefix's
 * renormalisation into the float64 accumulator (the CPU's pass 2). */
__global__ static void uform_contrastive_columns(uform_contrastive_layout_t l) {
    __shared__ double shared[UFORM_CUDA_ROW_THREADS / 32];
    if (uform_contrastive_refused(l) || l.state->stop) return;
    uform_contrastive_scratch_t s = uform_contrastive_scratch(l);
    const size_t n = l.n, w = l.width;
    const double scale = l.state->scale;
    for (size_t i = blockIdx.x; i < n; i += gridDim.x) {
        const double norm = l.norms[i];
        if (norm == 0) continue;   /* an empty item: a constant (the same in every thread) */
        const double *unit = l.units + i * w;
        double dot = 0.0;
        for (size_t k = threadIdx.x; k < w; k += blockDim.x) {
            double du = 0.0;
            for (size_t j = 0; j < n; j++) {
                double h = (double)l.forces[i * n + j] + (double)l.forces[j * n + i];
                if (h != 0) du += h * l.units[j * w + k];
            }
            s.du[k] = du;
            dot += unit[k] * du;
        }
        dot = uform_block_sum(dot, shared);
        double *target = l.dembeddings + i * l.dimensions;
        if (norm > 1e-12) {
            const double factor = scale / norm;
            for (size_t k = threadIdx.x; k < w; k += blockDim.x) target[k] += (s.du[k] - unit[k] * dot) * factor;
        } else {
            const double factor = scale / 1e-12;
            for (size_t k = threadIdx.x; k < w; k += blockDim.x) target[k] += s.du[k] * factor;
        }
        __syncthreads();
    }
}

__global__ static void uform_contrastive_apply(uform_contrastive_layout_t l, float *d_embeddings) {
    if (uform_contrastive_refused(l) || !l.state->any) return;
    size_t count = l.n * l.dimensions;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < count; e += (size_t)gridDim.x * blockDim.x)
        d_embeddings[e] += (float)l.dembeddings[e];
}

__global__ static void uform_contrastive_finish(uform_contrastive_layout_t l, size_t groups, float *d_tau,
                                                float *d_bias) {
    if (threadIdx.x != 0 || uform_contrastive_refused(l)) return;
    l.state->loss = l.state->any ? (float)l.state->total : 0.0f;
    if (!l.state->any) return;
    for (size_t g = 0; g < groups; g++) {
        if (d_tau) d_tau[g] += (float)l.dtau[g];
        if (d_bias && l.form == UFORM_PAIR_LOSS_SIGMOID) d_bias[g] += (float)l.dbias[g];
    }
}

/* a * b + c bytes, or SIZE_MAX on overflow */
static size_t uform_bytes(size_t a, size_t b, size_t c) {
    size_t product;
    if (c > SIZE_MAX / 2 || !uform_mul_ok(a, b, &product) || product > SIZE_MAX / 2 - c) return SIZE_MAX;
    return uform_cuda_align8(product + c);
}

uform_status_t uform_cuda_contrastive_loss(uform_backend_t *b, const uform_contrastive_config_t *config,
                                           const uform_contrastive_batch_t *batch,
                                           const float *log_inverse_temperature, const float *bias, float *loss,
                                           float *d_embeddings, float *d_log_inverse_temperature, float *d_bias) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    if (!config || !batch || !loss)
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive: NULL configuration, batch or loss");
    if (config->groups == 0 || config->groups > ((size_t)1 << 20))
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive: groups must be 1 to 2^20, got %zu", config->groups);
    const size_t groups = config->groups, n = batch->count, d = batch->dimensions;
    const bool sigmoid = config->pair_loss == UFORM_PAIR_LOSS_SIGMOID;
    /* the parameters the checks read, on the host */
    float *parameters = (float *)malloc(2 * groups * sizeof(float));
    if (!parameters) return uform_fail(UFORM_OUT_OF_MEMORY, "contrastive: its parameters' host copy");
    float *h_tau = parameters, *h_bias = parameters + groups;
    if (log_inverse_temperature) uform_cuda_download(b, h_tau, log_inverse_temperature, groups * sizeof(float));
    if (bias && sigmoid) uform_cuda_download(b, h_bias, bias, groups * sizeof(float));
    uform_status_t status = uform_cuda_synchronize(b);
    if (status == UFORM_OK)
        status = uform_contrastive_check_parts(config, batch, log_inverse_temperature ? h_tau : NULL,
                                               bias ? h_bias : NULL, loss, false);
    if (status != UFORM_OK || n == 0) {
        if (status == UFORM_OK) *loss = 0.0f;
        free(parameters);
        return status;
    }
    size_t widest = 0;
    for (size_t k = 0; k < config->widths_count; k++) widest = config->widths[k] > widest ? config->widths[k] : widest;
    size_t rules_bytes = uform_cuda_pair_rules_bytes(n, batch->bags, batch->relations);
    if (rules_bytes == SIZE_MAX || n > 0x7fffffffu) {
        free(parameters);
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive: %zu items or their edges exceed 2^31", n);
    }
    size_t blocks = 2 * (size_t)(context->multiprocessors > 0 ? context->multiprocessors : 1);
    if (blocks > n) blocks = n;

    /* The layout: the host's part (uploaded), then the device's. */
    size_t host_bytes = uform_bytes(4 * groups, sizeof(double), sizeof(uform_contrastive_state_t));
    size_t groups_at = host_bytes;
    host_bytes = uform_bytes(batch->groups ? n : 0, sizeof(uint32_t), host_bytes);
    size_t rules_at = host_bytes;
    host_bytes = uform_cuda_align8(host_bytes + rules_bytes);
    size_t scratch_bytes = uform_bytes(3 * n + widest, sizeof(double), n);
    size_t at[6], total = host_bytes;
    const size_t sizes[6][2] = {
        {n, widest * sizeof(double)},   /* units */
        {n, 4 * sizeof(double)},        /* norms, row loss, dtau, dbias */
        {n, n * sizeof(float)},         /* forces */
        {n, 1},                         /* scored */
        {n, d * sizeof(double)},        /* the accumulator */
        {blocks, scratch_bytes},        /* each block's scratch */
    };
    for (int part = 0; part < 6 && total != SIZE_MAX; part++) {
        at[part] = total;
        total = scratch_bytes == SIZE_MAX ? SIZE_MAX : uform_bytes(sizes[part][0], sizes[part][1], total);
    }
    if (total == SIZE_MAX) {
        free(parameters);
        return uform_fail(UFORM_OUT_OF_MEMORY, "contrastive: %zu x %zu embeddings overflow its scratch", n, d);
    }
    uint8_t *host = (uint8_t *)calloc(1, host_bytes);
    uint8_t *device = host ? (uint8_t *)uform_cuda_grow(b, &context->pair_loss, total, "contrastive loss") : NULL;
    if (!device) {
        free(host);
        free(parameters);
        if (host) return uform_cuda_synchronize(b);   /* the failed growth, recorded */
        return uform_fail(UFORM_OUT_OF_MEMORY, "contrastive: its host layout");
    }
    uform_contrastive_state_t *state = (uform_contrastive_state_t *)host;
    state->first_non_finite = ~0ull;
    double *temperatures = (double *)(host + sizeof(uform_contrastive_state_t)), *offsets = temperatures + groups;
    for (size_t g = 0; g < groups; g++) {
        temperatures[g] = exp((double)h_tau[g]);   /* the host's exp: the CPU's temperatures */
        offsets[g] = sigmoid ? (double)h_bias[g] : 0.0;
    }
    free(parameters);
    if (batch->groups) memcpy(host + groups_at, batch->groups, n * sizeof(uint32_t));

    uform_contrastive_layout_t l;
    memset(&l, 0, sizeof(l));
    l.state = (uform_contrastive_state_t *)device;
    l.temperatures = (const double *)(device + sizeof(uform_contrastive_state_t));
    l.offsets = l.temperatures + groups;
    l.dtau = (double *)l.offsets + groups;
    l.dbias = l.dtau + groups;
    l.groups = batch->groups ? (const uint32_t *)(device + groups_at) : NULL;
    l.rules = uform_cuda_pair_rules_layout(config, n, batch->bags, batch->relations, host + rules_at,
                                           device + rules_at);
    l.form = config->pair_loss;
    l.n = n, l.dimensions = d, l.widest = widest, l.widths_count = config->widths_count;
    l.units = (double *)(device + at[0]);
    l.norms = (double *)(device + at[1]);
    l.row_loss = l.norms + n, l.row_dtau = l.row_loss + n, l.row_dbias = l.row_dtau + n;
    l.forces = (float *)(device + at[2]);
    l.row_scored = device + at[3];
    l.dembeddings = (double *)(device + at[4]);
    l.scratch = device + at[5];
    l.scratch_bytes = scratch_bytes;
    uform_cuda_upload(b, device, host, host_bytes);
    free(host);
    uform_cuda_zero(b, l.dembeddings, n * d * sizeof(double));

    cudaStream_t stream = context->stream;
    const unsigned elements = uform_cuda_blocks(n * d, UFORM_CUDA_ROW_THREADS);
    UFORM_LAUNCH(uform_contrastive_scan, elements, UFORM_CUDA_ROW_THREADS, stream)(batch->embeddings, n * d, l.state);
    uform_cuda_launched(b, "contrastive_loss (scan)");
    for (size_t k = 0; k < config->widths_count; k++) {
        l.width = config->widths[k];
        UFORM_LAUNCH(uform_contrastive_units, (unsigned)n, UFORM_CUDA_ROW_THREADS, stream)(l, batch->embeddings);
        uform_cuda_launched(b, "contrastive_loss (units)");
        UFORM_LAUNCH(uform_contrastive_rows, (unsigned)blocks, UFORM_CUDA_ROW_THREADS, stream)(l);
        uform_cuda_launched(b, "contrastive_loss (rows)");
        UFORM_LAUNCH(uform_contrastive_totals, 1, 32, stream)(l);
        uform_cuda_launched(b, "contrastive_loss (totals)");
        UFORM_LAUNCH(uform_contrastive_columns, (unsigned)blocks, UFORM_CUDA_ROW_THREADS, stream)(l);
        uform_cuda_launched(b, "contrastive_loss (columns)");
    }
    if (d_embeddings) {
        UFORM_LAUNCH(uform_contrastive_apply, elements, UFORM_CUDA_ROW_THREADS, stream)(l, d_embeddings);
        uform_cuda_launched(b, "contrastive_loss (apply)");
    }
    UFORM_LAUNCH(uform_contrastive_finish, 1, 32, stream)(l, groups, d_log_inverse_temperature, d_bias);
    uform_cuda_launched(b, "contrastive_loss (finish)");
    uform_contrastive_state_t result;
    uform_cuda_download(b, &result, l.state, sizeof(result));
    status = uform_cuda_synchronize(b);
    if (status != UFORM_OK) return status;
    if (result.first_non_finite != ~0ull) {
        size_t e = (size_t)result.first_non_finite;
        float value = 0.0f;
        uform_cuda_download(b, &value, batch->embeddings + e, sizeof(value));
        (void)uform_cuda_synchronize(b);
        return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive: embeddings[%zu][%zu] = %g is not finite", e / d,
                          e % d, (double)value);
    }
    *loss = result.loss;
    return UFORM_OK;
}
