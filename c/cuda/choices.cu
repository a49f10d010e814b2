/* choices.cu: the CUDA backend's choices head for inference (backend.h:
 * choice_probabilities, text_choose's scoring of each MASK row).
 *
 * The host lays the call's (item, byte) pairs out (the tape, the groups and
 * the offsets are host memory), one upload carries them; one warp scores each
 * pair, (h . table[byte] + bias[byte]) / exp(log_temperature[group]), with a
 * fixed shuffle tree; one thread per item then takes the softmax over its
 * pairs in order (an item has at most 256 choices); one download brings the
 * probabilities back. Run on an H200 (tests/gpu/test_cuda_ops.c, 2026-12-04);
 * also runs under the emulation (emulation.h). */
#include "cuda_internal.h"

#include <math.h>
#include <stdlib.h>

/* The pairs' layout in the uploaded block, all uint32: pair_items [P], pair_bytes [P],
 * item_groups [count], item_offsets [count + 1] (relative to the call's first pair). */
typedef struct {
    const uint32_t *pair_items, *pair_bytes, *item_groups, *item_offsets;
} uform_choice_layout_t;

__global__ static void uform_choice_scores(const float *states, size_t hidden, const uform_segment_t *segments,
                                           uform_choice_layout_t layout, size_t pairs, const float *table,
                                           const float *bias, const float *log_temperature, float *scores) {
    size_t warp = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    unsigned lane = threadIdx.x % 32;
    if (warp >= pairs) return;
    uint32_t item = layout.pair_items[warp], byte = layout.pair_bytes[warp];
    const uform_segment_t segment = segments[item];
    const float *mask = states + (segment.begin + segment.length - 1) * hidden;
    const float *row = table + (size_t)byte * hidden;
    float sum = 0.0f;
    for (size_t i = lane; i < hidden; i += 32) sum += mask[i] * row[i];
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
    if (lane == 0) {
        float temperature = log_temperature ? expf(log_temperature[layout.item_groups[item]]) : 1.0f;
        scores[warp] = (sum + bias[byte]) / temperature;
    }
}

__global__ static void uform_choice_softmax(uform_choice_layout_t layout, size_t count, float *scores) {
    size_t item = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (item >= count) return;
    uint32_t begin = layout.item_offsets[item], end = layout.item_offsets[item + 1];
    float largest = -INFINITY, sum = 0.0f;
    for (uint32_t p = begin; p < end; p++) largest = fmaxf(largest, scores[p]);
    for (uint32_t p = begin; p < end; p++) {
        scores[p] = expf(scores[p] - largest);
        sum += scores[p];
    }
    for (uint32_t p = begin; p < end; p++) scores[p] /= sum;
}

void uform_cuda_choice_probabilities(uform_backend_t *b, const float *states, size_t hidden,
                                     const uform_segment_t *segments, size_t count, const uform_tape_t *choices,
                                     size_t first_entry, const uint32_t *groups, const float *table,
                                     const float *bias, const float *log_temperature, const size_t *offsets,
                                     float *probabilities) {
    size_t pairs = offsets[count] - offsets[0];
    if (!count || !pairs) return;
    if (pairs > UINT32_MAX) {
        uform_cuda_record(b, UFORM_INVALID_ARGUMENT, "choice_probabilities", "more than 2^32 choices in one call");
        return;
    }
    /* the host layout: pairs in item order, as offsets number them */
    size_t words = 2 * pairs + count + count + 1;
    uint32_t *host = (uint32_t *)malloc(words * sizeof(uint32_t));
    if (!host) {
        uform_cuda_record(b, UFORM_OUT_OF_MEMORY, "choice_probabilities", "the pairs' layout");
        return;
    }
    uint32_t *pair_items = host, *pair_bytes = host + pairs, *item_groups = host + 2 * pairs;
    uint32_t *item_offsets = item_groups + count;
    const uint8_t *data = (const uint8_t *)choices->data;
    for (size_t c = 0; c < count; c++) {
        size_t entry = choices->count == 1 ? 0 : first_entry + c;
        const uint8_t *bytes = data + choices->offsets[entry];
        size_t begin = offsets[c] - offsets[0], n = offsets[c + 1] - offsets[c];
        item_offsets[c] = (uint32_t)begin;
        item_groups[c] = groups ? groups[c] : 0;
        for (size_t k = 0; k < n; k++) {
            pair_items[begin + k] = (uint32_t)c;
            pair_bytes[begin + k] = bytes[k];
        }
    }
    item_offsets[count] = (uint32_t)pairs;

    uform_cuda_context_t *context = uform_cuda_context(b);
    size_t layout_bytes = (words * sizeof(uint32_t) + 255) / 256 * 256;
    uint8_t *device = (uint8_t *)uform_cuda_grow(b, &context->choices, layout_bytes + pairs * sizeof(float),
                                                 "choice_probabilities");
    if (device) uform_cuda_upload(b, device, host, words * sizeof(uint32_t));
    free(host);
    if (!device || context->failure != UFORM_OK) return;
    const uint32_t *base = (const uint32_t *)device;
    uform_choice_layout_t layout = {base, base + pairs, base + 2 * pairs, base + 2 * pairs + count};
    float *scores = (float *)(device + layout_bytes);
    unsigned threads = 256, warps_per_block = threads / 32;
    unsigned blocks = (unsigned)((pairs + warps_per_block - 1) / warps_per_block);
    UFORM_LAUNCH(uform_choice_scores, blocks, threads, context->stream)(states, hidden, segments, layout, pairs, table,
                                                                 bias, log_temperature, scores);
    uform_cuda_launched(b, "choice_probabilities (scores)");
    UFORM_LAUNCH(uform_choice_softmax, uform_cuda_blocks(count, 128), 128, context->stream)(layout, count, scores);
    uform_cuda_launched(b, "choice_probabilities (softmax)");
    uform_cuda_download(b, probabilities + offsets[0], scores, pairs * sizeof(float));
}
