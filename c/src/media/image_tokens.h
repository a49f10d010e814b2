/* image.h: an RGB image as patch tokens (DESIGN section 5, docs/media.md):
 * its grid, the antialiased resize to the grid's size, and the patches. Video
 * frames go through the same three steps. */
#ifndef UFORM_IMAGE_H
#define UFORM_IMAGE_H

#include "core/internal.h"

/* The patch grid of a height x width image for patch side P, at most
 * max_tokens patches: rows = max(1, floor(height / P + 1/2)), likewise
 * cols; when rows * cols > max_tokens both are scaled by
 * s = sqrt(max_tokens / (rows * cols)) and floored (at least 1), and a side
 * still too long (the other was clamped at 1) is cut to fit. *shrunk tells
 * whether the scaling happened. height, width, P and max_tokens >= 1. */
UFORM_INTERNAL void uform_image_grid(size_t height, size_t width, size_t patch_side,
                                     size_t max_tokens, size_t *rows, size_t *cols, bool *shrunk);

/* Resizes RGB8 pixels (rows row_stride bytes apart) to out_height x
 * out_width RGB floats in 0..255 units, [out_height][out_width][3]: Pillow's
 * BILINEAR coefficients (a triangle filter whose support widens by the scale
 * when shrinking, normalised per output pixel), horizontal pass then
 * vertical, in FP32 without rounding between the passes; an axis already of
 * its output size is copied. OUT_OF_MEMORY when the intermediate image
 * cannot be allocated. */
UFORM_INTERNAL uform_status_t uform_image_resize(const uint8_t *pixels, size_t height, size_t width,
                                                 size_t row_stride, size_t out_height,
                                                 size_t out_width, float *out);

/* Writes the patches of a resized image [rows * P][cols * P][3] (0..255
 * units): patch (r, c) of the row-major grid goes to
 * out + (r * cols + c) * out_stride, its P * P * 3 values v / 127.5 - 1 in
 * (row within the patch, column, channel) order. */
UFORM_INTERNAL void uform_image_patches(const float *resized, size_t rows, size_t cols,
                                        size_t patch_side, float *out, size_t out_stride);

#endif /* UFORM_IMAGE_H */
