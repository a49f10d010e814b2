/* video.c: tubes of tube patches from a clip's frames (video.h). */
#include "media/video_tokens.h"

#include "media/image_tokens.h"

void uform_video_layout(size_t frames, size_t height, size_t width, size_t patch_side,
                        size_t tube_frames, size_t context, uform_video_layout_t *layout) {
    memset(layout, 0, sizeof(*layout));
    if (frames == 0) return;
    uform_image_grid(height, width, patch_side, context, &layout->rows, &layout->cols,
                     &layout->shrunk);
    layout->tubes = (frames + tube_frames - 1) / tube_frames;
    size_t fit = context / (layout->rows * layout->cols);   /* >= 1: the grid fits context */
    layout->kept = layout->tubes < fit ? layout->tubes : fit;
}

uform_status_t uform_video_tubes(const uint8_t *frames, size_t count, size_t height, size_t width,
                                 size_t patch_side, size_t tube_frames,
                                 const uform_video_layout_t *layout, float *out,
                                 uint32_t *positions) {
    size_t grid = layout->rows * layout->cols;
    size_t patch = patch_side * patch_side * 3, stride = tube_frames * patch;
    size_t frame_bytes = height * width * 3;
    float *resized = uform_alloc_aligned(grid * patch, sizeof(float), "resized frame");
    if (!resized) return UFORM_OUT_OF_MEMORY;
    for (size_t t = 0; t < layout->kept; t++) {
        float *tube = out + t * grid * stride;
        for (size_t f = 0; f < tube_frames; f++) {
            size_t source = t * tube_frames + f;
            if (source >= count) {
                /* past the clip: repeat the final frame, already in slot f - 1 */
                for (size_t p = 0; p < grid; p++)
                    memcpy(tube + p * stride + f * patch, tube + p * stride + (f - 1) * patch,
                           patch * sizeof(float));
                continue;
            }
            uform_status_t status = uform_image_resize(
                frames + source * frame_bytes, height, width, width * 3,
                layout->rows * patch_side, layout->cols * patch_side, resized);
            if (status != UFORM_OK) {
                uform_free_aligned(resized);
                return status;
            }
            uform_image_patches(resized, layout->rows, layout->cols, patch_side, tube + f * patch,
                                stride);
        }
        for (size_t p = 0; p < grid; p++) {
            uint32_t *position = positions + 3 * (t * grid + p);
            position[0] = (uint32_t)t;
            position[1] = (uint32_t)(p / layout->cols);
            position[2] = (uint32_t)(p % layout->cols);
        }
    }
    uform_free_aligned(resized);
    return UFORM_OK;
}
