/* image.c: grid, antialiased resize and patches of an RGB image (image.h).
 *
 * The resize reproduces Pillow's `Image.resize(size, BILINEAR)` coefficient
 * rule (Pillow's src/libImaging/Resample.c, precompute_coeffs) so that a
 * model trained on Pillow-resized images sees the same pixels, except that
 * Pillow rounds its fixed-point coefficients and rounds to uint8 after each
 * pass, while this keeps FP32 throughout (docs/media.md states the bound). */
#include "media/image_tokens.h"

#include <math.h>
#include <stdlib.h>

void uform_image_grid(size_t height, size_t width, size_t patch_side, size_t max_tokens,
                      size_t *rows, size_t *cols, bool *shrunk) {
    /* floor(h / P + 1/2) in integers: floor((2h + P) / 2P) */
    size_t r = (2 * height + patch_side) / (2 * patch_side);
    size_t c = (2 * width + patch_side) / (2 * patch_side);
    if (r < 1) r = 1;
    if (c < 1) c = 1;
    *shrunk = false;
    if (r * c > max_tokens) {
        /* The same IEEE double operations as the reference: exact products,
         * one correctly rounded division and square root. */
        double s = sqrt((double)max_tokens / ((double)r * (double)c));
        size_t scaled_r = (size_t)floor((double)r * s), scaled_c = (size_t)floor((double)c * s);
        r = scaled_r < 1 ? 1 : scaled_r;
        c = scaled_c < 1 ? 1 : scaled_c;
        if (r * c > max_tokens) { /* a side clamped at 1 left the other too long */
            if (r >= c) r = max_tokens / c > 0 ? max_tokens / c : 1;
            else c = max_tokens / r > 0 ? max_tokens / r : 1;
        }
        *shrunk = true;
    }
    *rows = r;
    *cols = c;
}

/* One axis's coefficients: output i reads inputs [first[i], first[i] + taps[i])
 * with weights[i * width + k]. */
typedef struct {
    size_t *first, *taps;
    float *weights;
    size_t width;       /* weights per output, the largest taps */
} uform_resize_axis_t;

static void uform_resize_axis_free(uform_resize_axis_t *axis) {
    free(axis->first);
    free(axis->taps);
    free(axis->weights);
}

static double uform_triangle(double x) {
    if (x < 0.0) x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* Pillow's precompute_coeffs for the triangle filter (support 1), in double,
 * normalised per output, then stored as FP32. */
static uform_status_t uform_resize_axis(size_t in_size, size_t out_size, uform_resize_axis_t *axis) {
    memset(axis, 0, sizeof(*axis));
    double scale = (double)in_size / (double)out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 1.0 * filterscale;
    size_t width = (size_t)ceil(support) * 2 + 1;
    axis->width = width;
    axis->first = uform_alloc(out_size, sizeof(size_t), "resize bounds");
    axis->taps = uform_alloc(out_size, sizeof(size_t), "resize bounds");
    axis->weights = uform_alloc_zeroed(out_size, width * sizeof(float), "resize weights");
    double *k = uform_alloc(width, sizeof(double), "resize weights");
    if (!axis->first || !axis->taps || !axis->weights || !k) {
        free(k);
        uform_resize_axis_free(axis);
        return UFORM_OUT_OF_MEMORY;
    }
    double ss = 1.0 / filterscale;
    for (size_t i = 0; i < out_size; i++) {
        double center = ((double)i + 0.5) * scale;
        /* Pillow truncates toward zero, then clamps to [0, in_size]. */
        double low = center - support + 0.5, high = center + support + 0.5;
        size_t xmin = low > 0.0 ? (size_t)low : 0;
        size_t xmax = (size_t)high;
        if (xmax > in_size) xmax = in_size;
        size_t taps = xmax > xmin ? xmax - xmin : 0;
        if (taps > width) taps = width;
        double total = 0.0;
        for (size_t x = 0; x < taps; x++) {
            k[x] = uform_triangle(((double)(x + xmin) - center + 0.5) * ss);
            total += k[x];
        }
        for (size_t x = 0; x < taps; x++)
            axis->weights[i * width + x] = (float)(total != 0.0 ? k[x] / total : k[x]);
        axis->first[i] = xmin;
        axis->taps[i] = taps;
    }
    free(k);
    return UFORM_OK;
}

uform_status_t uform_image_resize(const uint8_t *pixels, size_t height, size_t width,
                                  size_t row_stride, size_t out_height, size_t out_width,
                                  float *out) {
    bool horizontal = width != out_width, vertical = height != out_height;
    /* The horizontal pass (or the plain conversion) lands in `wide`:
     * [height][out_width][3]; straight in `out` when there is no vertical pass. */
    float *wide = out;
    if (vertical) {
        wide = uform_alloc_aligned(height, out_width * 3 * sizeof(float), "resize rows");
        if (!wide) return UFORM_OUT_OF_MEMORY;
    }
    if (horizontal) {
        uform_resize_axis_t axis;
        uform_status_t status = uform_resize_axis(width, out_width, &axis);
        if (status != UFORM_OK) {
            if (wide != out) uform_free_aligned(wide);
            return status;
        }
        for (size_t y = 0; y < height; y++) {
            const uint8_t *row = pixels + y * row_stride;
            float *target = wide + y * out_width * 3;
            for (size_t x = 0; x < out_width; x++) {
                const float *w = axis.weights + x * axis.width;
                const uint8_t *source = row + axis.first[x] * 3;
                float r = 0.0f, g = 0.0f, b = 0.0f;
                for (size_t k = 0; k < axis.taps[x]; k++) {
                    r += w[k] * (float)source[3 * k];
                    g += w[k] * (float)source[3 * k + 1];
                    b += w[k] * (float)source[3 * k + 2];
                }
                target[3 * x] = r, target[3 * x + 1] = g, target[3 * x + 2] = b;
            }
        }
        uform_resize_axis_free(&axis);
    } else {
        for (size_t y = 0; y < height; y++)
            for (size_t x = 0; x < 3 * width; x++)
                wide[y * 3 * width + x] = (float)pixels[y * row_stride + x];
    }
    if (vertical) {
        uform_resize_axis_t axis;
        uform_status_t status = uform_resize_axis(height, out_height, &axis);
        if (status != UFORM_OK) {
            uform_free_aligned(wide);
            return status;
        }
        size_t line = out_width * 3;
        for (size_t y = 0; y < out_height; y++) {
            const float *w = axis.weights + y * axis.width;
            float *target = out + y * line;
            for (size_t x = 0; x < line; x++) target[x] = 0.0f;
            /* k outermost: streams whole rows; each output still sums its taps in k order */
            for (size_t k = 0; k < axis.taps[y]; k++) {
                const float *source = wide + (axis.first[y] + k) * line;
                for (size_t x = 0; x < line; x++) target[x] += w[k] * source[x];
            }
        }
        uform_resize_axis_free(&axis);
        uform_free_aligned(wide);
    }
    return UFORM_OK;
}

void uform_image_patches(const float *resized, size_t rows, size_t cols, size_t patch_side,
                         float *out, size_t out_stride) {
    size_t line = cols * patch_side * 3;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            float *patch = out + (r * cols + c) * out_stride;
            for (size_t i = 0; i < patch_side; i++) {
                const float *source = resized + (r * patch_side + i) * line + c * patch_side * 3;
                for (size_t j = 0; j < patch_side * 3; j++)
                    *patch++ = source[j] / 127.5f - 1.0f;
            }
        }
}
