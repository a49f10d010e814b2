/* media_objectives.c: the masked image/video/audio objective (docs/training.md
 * section 11). */
#include "train/media_objectives.h"

#include "train/objectives.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
    double draw;
    size_t position;
} uform_draw_t;

static int uform_compare_draws(const void *a, const void *b) {
    const uform_draw_t *x = a, *y = b;
    if (x->draw != y->draw) return x->draw < y->draw ? -1 : 1;
    return x->position < y->position ? -1 : (x->position > y->position);
}

uform_status_t uform_mask_patches(float ratio, uint64_t seed, uint64_t step, uint64_t item,
                                  uint64_t stream, size_t n, uint8_t *masked, size_t *count) {
    memset(masked, 0, n);
    size_t k = (size_t)floor((double)ratio * (double)n + 0.5);
    *count = k = k > n ? n : k;
    if (k == 0) return UFORM_OK;
    uform_draw_t *draws = uform_alloc(n, sizeof(uform_draw_t), "patch masks");
    if (!draws) return UFORM_OUT_OF_MEMORY;
    for (size_t p = 0; p < n; p++)
        draws[p] = (uform_draw_t){uform_random_uniform(seed, step, item, p, stream), p};
    qsort(draws, n, sizeof(*draws), uform_compare_draws);
    for (size_t i = 0; i < k; i++) masked[draws[i].position] = 1;
    free(draws);
    return UFORM_OK;
}

void uform_patch_targets(const float *patches, size_t rows, size_t width, float *targets) {
    for (size_t r = 0; r < rows; r++) {
        const float *p = patches + r * width;
        double sum = 0, squares = 0;
        for (size_t k = 0; k < width; k++) sum += p[k];
        double mean = sum / (double)width;
        for (size_t k = 0; k < width; k++) squares += ((double)p[k] - mean) * ((double)p[k] - mean);
        double inverse = 1.0 / sqrt(squares / (double)width + 1e-6);
        for (size_t k = 0; k < width; k++) targets[r * width + k] = (float)(((double)p[k] - mean) * inverse);
    }
}

