/* image_png.c: PNG through libpng (docs/decoding.md).
 *
 * Errors longjmp out of libpng through our error function, which records the
 * message; warnings are dropped. Transformations: palettes and low-bit gray
 * expanded to 8 bits, 16-bit channels cut to their high byte, alpha (and a
 * tRNS colour key) dropped, gray replicated. No gamma or colour-profile
 * correction, as Pillow does none. Interlaced files are deinterlaced. */
#include "media/decode/image_formats.h"

#ifdef UFORM_HAVE_PNG

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>

#include <png.h>

typedef struct {
    png_structp png;
    png_infop info;
    const uint8_t *data;
    size_t size, offset;
    char message[256];
    uint8_t *pixels;
    png_bytep *rows;
} png_state_t;

static void fail_with_message(png_structp png, png_const_charp message) {
    png_state_t *state = png_get_error_ptr(png);
    snprintf(state->message, sizeof(state->message), "%s", message);
    png_longjmp(png, 1);
}

static void drop_warning(png_structp png, png_const_charp message) { (void)png, (void)message; }

static void read_bytes(png_structp png, png_bytep out, size_t count) {
    png_state_t *state = png_get_io_ptr(png);
    if (count > state->size - state->offset) png_error(png, "truncated file");
    memcpy(out, state->data + state->offset, count);
    state->offset += count;
}

static uform_status_t decode(png_state_t *state, uform_image_t *image) {
    png_structp png = state->png;
    png_infop info = state->info;
    if (setjmp(png_jmpbuf(png))) return uform_fail(UFORM_FORMAT, "PNG: %s", state->message);

    png_set_read_fn(png, state, read_bytes);
    /* libpng's own ceiling; ours (pixels per image) is checked below. */
    png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
    png_read_info(png, info);
    png_uint_32 width = png_get_image_width(png, info), height = png_get_image_height(png, info);
    uform_status_t status = uform_check_image_size(width, height, "PNG");
    if (status != UFORM_OK) return status;

    int color_type = png_get_color_type(png, info);
    if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color_type == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) < 8)
        png_set_expand_gray_1_2_4_to_8(png);
    if (png_get_bit_depth(png, info) == 16) png_set_strip_16(png); /* high byte */
    png_set_strip_alpha(png); /* also the alpha a palette's tRNS would add */
    if (color_type == PNG_COLOR_TYPE_GRAY || color_type == PNG_COLOR_TYPE_GRAY_ALPHA)
        png_set_gray_to_rgb(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_channels(png, info) != 3 || png_get_bit_depth(png, info) != 8 ||
        png_get_rowbytes(png, info) != (size_t)width * 3)
        return uform_fail(UFORM_FORMAT, "PNG: unexpected decoder output (%d channels of %d bits)",
                          png_get_channels(png, info), png_get_bit_depth(png, info));

    state->pixels = uform_alloc(height, (size_t)width * 3, "PNG pixels");
    state->rows = uform_alloc(height, sizeof(png_bytep), "PNG rows");
    if (!state->pixels || !state->rows) return UFORM_OUT_OF_MEMORY;
    for (size_t y = 0; y < height; y++) state->rows[y] = state->pixels + y * (size_t)width * 3;
    png_read_image(png, state->rows);
    image->pixels = state->pixels, state->pixels = NULL;
    image->height = height, image->width = width;
    return UFORM_OK;
}

uform_status_t uform_decode_png(const uint8_t *data, size_t size, uform_image_t *image) {
    png_state_t *state = uform_alloc_zeroed(1, sizeof(*state), "PNG decoder");
    if (!state) return UFORM_OUT_OF_MEMORY;
    state->data = data, state->size = size;
    uform_status_t status = UFORM_OUT_OF_MEMORY;
    state->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, state, fail_with_message, drop_warning);
    if (state->png) state->info = png_create_info_struct(state->png);
    if (state->info)
        status = decode(state, image);
    else
        uform_fail(status, "PNG: cannot create the decoder");
    png_destroy_read_struct(&state->png, &state->info, NULL); /* NULLs are fine */
    free(state->pixels);
    free(state->rows);
    free(state);
    return status;
}

#else

uform_status_t uform_decode_png(const uint8_t *data, size_t size, uform_image_t *image) {
    (void)data, (void)size, (void)image;
    return UFORM_MISSING_LIBRARY("PNG", "libpng");
}

#endif
