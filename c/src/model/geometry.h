/* geometry.h: a checkpoint's geometry, read from its `__metadata__["uform"]`
 * JSON object and checked against the limits below (docs/architecture.md,
 * docs/media.md). */
#ifndef UFORM_GEOMETRY_H
#define UFORM_GEOMETRY_H

#include "core/internal.h"
#include "core/safetensors.h"

#define UFORM_MAX_DEPTH 1024
#define UFORM_MAX_HIDDEN 65536
#define UFORM_MAX_CONTEXT (1u << 24)
#define UFORM_MAX_WIDTH (1u << 20)
#define UFORM_MAX_FRAME_STRIDE (1u << 20)

typedef struct {
    uint64_t version, depth, hidden, dimensions, context, token_width, choice_groups, step;
    /* media shapes; patch_side / chunk_samples 0: the modality is absent */
    uint64_t image_patch_side;
    uint64_t video_patch_side, video_tube_frames, video_frame_stride;
    uint64_t audio_chunk_samples, audio_sample_rate;
} uform_geometry_t;

/* Fills *g from the file's metadata, zeros derived (docs/media.md); FORMAT
 * naming the key for a missing, mistyped or out-of-range value. */
UFORM_INTERNAL uform_status_t uform_read_geometry(const uform_safetensors_t *file,
                                                  uform_geometry_t *g);

#endif /* UFORM_GEOMETRY_H */
