/* choices_loss.cu: the calibrated-choices training term on the CUDA backend
 * (backend.h: choices_loss; docs/training.md section 10), in the CPU
 * backend's order (backend/cpu/choices_loss.c) wherever it sums:
 * - a block per item: a thread per choice computes its logit in float64
 *   (h . table[byte] + bias[byte]) / T; then one thread takes the item's
 *   maximum, log-sum-exp, loss, target mass and dz = (p mass - y) scale over
 *   its choices in order, writing dlogit = dz / T per choice;
 * - d_states[item][k] = sum over the item's choices, in order, of dlogit
 *   table[byte][k] (written, as the CPU's);
 * - the table's and the bias's gradients: each byte's (item, choice) pairs,
 *   listed in order on the host, summed into its row in that order, a thread
 *   per (byte, column): no two threads write one element;
 * - one thread adds the items' temperature gradients and losses in order.
 * The call's bytes, targets, offsets and groups are host memory (as for the
 * CPU's): laid out with the per-byte lists and uploaded once; 8 bytes of loss
 * come back. Run on an H200 (tests/gpu/test_cuda_ops.c, 2026-12-04); also runs
 * under the emulation (emulation.h). */
#include "cuda_internal.h"

#include <math.h>
#include <stdlib.h>

#define UFORM_CHOICES_THREADS 256

/* The uploaded block: uint32 offsets [count + 1] (from the call's first
 * choice), groups [count], bytes [T], byte_offsets [UFORM_BYTES + 1],
 * entry_choices [T], entry_items [T]; float targets [T]; then the device's
 * own: float dlogit [T], double item_loss [count], item_dlogt [count], total. */
typedef struct {
    const uint32_t *offsets, *groups, *bytes, *byte_offsets, *entry_choices, *entry_items;
    const float *targets;
    float *dlogit;
    double *item_loss, *item_dlogt, *total;
} uform_choices_layout_t;

__global__ static void uform_choices_items(uform_choices_layout_t l, const float *states, size_t hidden,
                                           const float *table, const float *bias, const float *log_temperature,
                                           float scale) {
    __shared__ double z[UFORM_BYTES];
    size_t item = blockIdx.x;
    uint32_t begin = l.offsets[item], choices = l.offsets[item + 1] - begin;
    double temperature = exp((double)log_temperature[l.groups[item]]);
    const float *state = states + item * hidden;
    for (uint32_t c = threadIdx.x; c < choices; c += blockDim.x) {
        uint32_t byte = l.bytes[begin + c];
        const float *row = table + (size_t)byte * hidden;
        double logit = 0.0;
        for (size_t k = 0; k < hidden; k++) logit += (double)state[k] * (double)row[k];
        z[c] = (logit + (double)bias[byte]) / temperature;
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    double top = -INFINITY, sum = 0.0, loss = 0.0, mass = 0.0, d_log_t = 0.0;
    for (uint32_t c = 0; c < choices; c++) top = fmax(top, z[c]);
    for (uint32_t c = 0; c < choices; c++) sum += exp(z[c] - top);
    double lse = top + log(sum);
    for (uint32_t c = 0; c < choices; c++) {
        loss += (double)l.targets[begin + c] * (lse - z[c]);
        mass += (double)l.targets[begin + c];
    }
    for (uint32_t c = 0; c < choices; c++) {
        double dz = (exp(z[c] - lse) * mass - (double)l.targets[begin + c]) * (double)scale;
        d_log_t -= dz * z[c];
        l.dlogit[begin + c] = (float)(dz / temperature);
    }
    l.item_loss[item] = loss;
    l.item_dlogt[item] = d_log_t;
}

/* d_states[item][k] = sum over the item's choices in order of dlogit table[byte][k]. */
__global__ static void uform_choices_d_states(uform_choices_layout_t l, size_t hidden, const float *table,
                                              float *d_states) {
    size_t item = blockIdx.x;
    uint32_t begin = l.offsets[item], end = l.offsets[item + 1];
    for (size_t k = threadIdx.x; k < hidden; k += blockDim.x) {
        float sum = 0.0f;
        for (uint32_t t = begin; t < end; t++) sum += l.dlogit[t] * table[(size_t)l.bytes[t] * hidden + k];
        d_states[item * hidden + k] = sum;
    }
}

/* d_table[byte][k] += dlogit state[item][k] over the byte's (item, choice)
 * pairs in order; column `hidden` is the bias: d_bias[byte] += dlogit. */
__global__ static void uform_choices_d_table(uform_choices_layout_t l, const float *states, size_t hidden,
                                             float *d_table, float *d_bias) {
    size_t index = (size_t)blockIdx.x * blockDim.x + threadIdx.x, columns = hidden + 1;
    if (index >= (size_t)UFORM_BYTES * columns) return;
    size_t byte = index / columns, k = index % columns;
    uint32_t first = l.byte_offsets[byte], last = l.byte_offsets[byte + 1];
    if (first == last) return;
    if (k == hidden) {
        if (!d_bias) return;
        float sum = d_bias[byte];
        for (uint32_t e = first; e < last; e++) sum += l.dlogit[l.entry_choices[e]];
        d_bias[byte] = sum;
        return;
    }
    if (!d_table) return;
    float sum = d_table[byte * hidden + k];
    for (uint32_t e = first; e < last; e++)
        sum += l.dlogit[l.entry_choices[e]] * states[(size_t)l.entry_items[e] * hidden + k];
    d_table[byte * hidden + k] = sum;
}

/* The items' temperature gradients and losses, in order. */
__global__ static void uform_choices_totals(uform_choices_layout_t l, size_t count, float *d_log_temperature) {
    if (threadIdx.x != 0) return;   /* one thread: a warp is launched */
    double total = 0.0;
    for (size_t item = 0; item < count; item++) {
        if (d_log_temperature) d_log_temperature[l.groups[item]] += (float)l.item_dlogt[item];
        total += l.item_loss[item];
    }
    *l.total = total;
}

void uform_cuda_choices_loss(uform_backend_t *b, const uform_choices_batch_t *batch, const float *bytes_table,
                             const float *bytes_bias, const float *log_temperature, float scale, double *loss_sum,
                             float *d_states, float *d_bytes_table, float *d_bytes_bias, float *d_log_temperature) {
    uform_cuda_context_t *context = uform_cuda_context(b);
    size_t count = batch->count, hidden = batch->hidden;
    if (!count) return;
    size_t first = batch->offsets[0], total = batch->offsets[count] - first;
    if (total > UINT32_MAX || count > 0x7fffffffu) {
        uform_cuda_record(b, UFORM_INVALID_ARGUMENT, "choices_loss", "more than 2^32 choices in one call");
        return;
    }
    /* the host part of the block */
    size_t host_words = (count + 1) + count + total + (UFORM_BYTES + 1) + 2 * total;
    size_t host_bytes = uform_cuda_align8(host_words * sizeof(uint32_t) + total * sizeof(float));
    size_t block_bytes = host_bytes + uform_cuda_align8(total * sizeof(float)) + (2 * count + 1) * sizeof(double);
    uint32_t *host = (uint32_t *)calloc(1, host_bytes);
    uint8_t *device = (uint8_t *)uform_cuda_grow(b, &context->choices_loss, block_bytes, "choices loss");
    if (!host || !device) {
        free(host);
        if (device) uform_cuda_record(b, UFORM_OUT_OF_MEMORY, "choices_loss", "its host layout");
        return;
    }
    uint32_t *offsets = host, *groups = offsets + count + 1, *bytes = groups + count;
    uint32_t *byte_offsets = bytes + total, *entry_choices = byte_offsets + UFORM_BYTES + 1;
    uint32_t *entry_items = entry_choices + total;
    float *targets = (float *)(entry_items + total);
    for (size_t item = 0; item <= count; item++) offsets[item] = (uint32_t)(batch->offsets[item] - first);
    for (size_t item = 0; item < count; item++) groups[item] = batch->groups[item];
    for (size_t t = 0; t < total; t++) {
        bytes[t] = batch->bytes[first + t];
        targets[t] = batch->targets[first + t];
        byte_offsets[bytes[t] + 1]++;
    }
    for (size_t byte = 0; byte < UFORM_BYTES; byte++) byte_offsets[byte + 1] += byte_offsets[byte];
    /* each byte's (item, choice) pairs in the CPU's order: items in order, choices in order */
    uint32_t *next = (uint32_t *)malloc(UFORM_BYTES * sizeof(uint32_t));
    if (!next) {
        free(host);
        uform_cuda_record(b, UFORM_OUT_OF_MEMORY, "choices_loss", "its host layout");
        return;
    }
    memcpy(next, byte_offsets, UFORM_BYTES * sizeof(uint32_t));
    for (size_t item = 0; item < count; item++)
        for (uint32_t t = offsets[item]; t < offsets[item + 1]; t++) {
            uint32_t e = next[bytes[t]]++;
            entry_choices[e] = t;
            entry_items[e] = (uint32_t)item;
        }
    free(next);
    uform_cuda_upload(b, device, host, host_bytes);
    free(host);
    uint32_t *words = (uint32_t *)device;
    uform_choices_layout_t l;
    l.offsets = words;
    l.groups = l.offsets + count + 1;
    l.bytes = l.groups + count;
    l.byte_offsets = l.bytes + total;
    l.entry_choices = l.byte_offsets + UFORM_BYTES + 1;
    l.entry_items = l.entry_choices + total;
    l.targets = (const float *)(l.entry_items + total);
    l.dlogit = (float *)(device + host_bytes);
    l.item_loss = (double *)(device + host_bytes + uform_cuda_align8(total * sizeof(float)));
    l.item_dlogt = l.item_loss + count;
    l.total = l.item_dlogt + count;

    cudaStream_t stream = context->stream;
    UFORM_LAUNCH(uform_choices_items, (unsigned)count, UFORM_CHOICES_THREADS, stream)(
        l, batch->states, hidden, bytes_table, bytes_bias, log_temperature, scale);
    uform_cuda_launched(b, "choices_loss (items)");
    if (d_states) {
        UFORM_LAUNCH(uform_choices_d_states, (unsigned)count, UFORM_CHOICES_THREADS, stream)(l, hidden, bytes_table,
                                                                                            d_states);
        uform_cuda_launched(b, "choices_loss (states)");
    }
    UFORM_LAUNCH(uform_choices_d_table, uform_cuda_blocks((size_t)UFORM_BYTES * (hidden + 1), 128), 128, stream)(
        l, batch->states, hidden, d_bytes_table, d_bytes_bias);
    uform_cuda_launched(b, "choices_loss (table)");
    UFORM_LAUNCH(uform_choices_totals, 1, 32, stream)(l, count, d_log_temperature);
    uform_cuda_launched(b, "choices_loss (totals)");
    double loss = 0.0;
    uform_cuda_download(b, &loss, l.total, sizeof(loss));
    /* a failure stays recorded for the step's synchronize */
    if (context->failure == UFORM_OK) *loss_sum += loss;
}
