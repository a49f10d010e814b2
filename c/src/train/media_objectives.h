/* media_objectives.h: the masked image/video/audio objective (docs/training.md
 * section 11): which patches are masked, their normalised targets and the
 * reconstruction loss. */
#ifndef UFORM_MEDIA_OBJECTIVES_H
#define UFORM_MEDIA_OBJECTIVES_H

#include "core/internal.h"

/* RNG streams of the patch masks (docs/training.md sections 1 and 11). */
enum {
    UFORM_STREAM_IMAGE_MASK = 2000,
    UFORM_STREAM_VIDEO_MASK = 2001,
    UFORM_STREAM_AUDIO_MASK = 2002
};

/* Masks k = min(n, floor(ratio n + 1/2)) of an item's n rows: those with the
 * smallest uniform(seed, step, item, position, stream), ties to the lower
 * position. Writes masked[0..n) (1: masked) and *count = k. */
UFORM_INTERNAL uform_status_t uform_mask_patches(float ratio, uint64_t seed, uint64_t step,
                                                 uint64_t item, uint64_t stream, size_t n,
                                                 uint8_t *masked, size_t *count);

/* targets[r] = (patches[r] - mean) / sqrt(var + 1e-6), per row of `width`
 * values (biased variance, float64 sums). */
UFORM_INTERNAL void uform_patch_targets(const float *patches, size_t rows, size_t width, float *targets);


#endif /* UFORM_MEDIA_OBJECTIVES_H */
