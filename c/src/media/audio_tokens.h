/* audio.h: a mono recording as chunk tokens (DESIGN section 5, docs/media.md):
 * resampled to the model's rate, cut into chunk_samples chunks (the last
 * zero-padded), the first `context` chunks kept. */
#ifndef UFORM_AUDIO_H
#define UFORM_AUDIO_H

#include "core/internal.h"

typedef struct {
    size_t samples;       /* after resampling: ceil(count * to / from) */
    size_t chunks;        /* ceil(samples / chunk_samples) */
    size_t kept;          /* min(chunks, context) */
} uform_audio_layout_t;

/* The layout of `count` samples at from_rate resampled to to_rate; false
 * when the resampled length overflows. */
UFORM_INTERNAL bool uform_audio_layout(size_t count, size_t from_rate, size_t to_rate,
                                       size_t chunk_samples, size_t context,
                                       uform_audio_layout_t *layout);

/* Writes the kept chunks [kept][chunk_samples], resampling only the samples
 * they hold, zeros past the recording's end; positions (k, 0, 0). */
UFORM_INTERNAL uform_status_t uform_audio_chunks(const float *samples, size_t count, size_t from_rate,
                                                 size_t to_rate, size_t chunk_samples,
                                                 const uform_audio_layout_t *layout, float *out,
                                                 uint32_t *positions);

#endif /* UFORM_AUDIO_H */
