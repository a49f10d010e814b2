/* video.h: a clip as tube-patch tokens (DESIGN section 5, docs/media.md).
 *
 * The frames (already every frame_stride-th, as the decoder keeps them) are
 * gridded and resized as images, grouped tube_frames at a time (the last
 * group repeats its final frame), and cut to the tubes that fit `context`. */
#ifndef UFORM_VIDEO_H
#define UFORM_VIDEO_H

#include "core/internal.h"

typedef struct {
    size_t rows, cols;    /* the patch grid of every frame */
    size_t tubes;         /* ceil(frames / tube_frames) */
    size_t kept;          /* the first min(tubes, floor(context / (rows * cols))) tubes */
    bool shrunk;          /* the grid was scaled down to fit context */
} uform_video_layout_t;

/* The layout of a clip of `frames` frames (0: no tubes) of height x width. */
UFORM_INTERNAL void uform_video_layout(size_t frames, size_t height, size_t width,
                                       size_t patch_side, size_t tube_frames, size_t context,
                                       uform_video_layout_t *layout);

/* Writes the kept tubes' tokens: row (t * rows + r) * cols + c is tube t's
 * patch (r, c), tube_frames * P * P * 3 values in (frame, row within the
 * patch, column, channel) order, positions (t, r, c). frames is
 * [frames][height][width][3] RGB8. OUT_OF_MEMORY when a frame's resize
 * buffers cannot be allocated. */
UFORM_INTERNAL uform_status_t uform_video_tubes(const uint8_t *frames, size_t count, size_t height,
                                                size_t width, size_t patch_side, size_t tube_frames,
                                                const uform_video_layout_t *layout, float *out,
                                                uint32_t *positions);

#endif /* UFORM_VIDEO_H */
