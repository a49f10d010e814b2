/* image_jpeg.c: JPEG through libjpeg(-turbo) (docs/decoding.md).
 *
 * Errors longjmp out of libjpeg through our error manager, which records the
 * message instead of printing it. Gray is replicated; four-component files
 * (CMYK, YCCK) are taken as Adobe-inverted CMYK and converted to RGB exactly
 * as Pillow converts them, so both agree on every file. */
#include "media/decode/image_formats.h"

#ifdef UFORM_HAVE_JPEG

#include <setjmp.h>
#include <stdio.h> /* jpeglib.h uses FILE */
#include <stdlib.h>

#include <jpeglib.h>
#include <jerror.h> /* message codes: JWRN_JPEG_EOF */

/* A progressive file may hold any number of scans, each a full pass over the
 * coefficients; more than this is a denial-of-service file, not a photo. */
#define UFORM_JPEG_MAX_SCANS 1000

typedef struct {
    struct jpeg_decompress_struct info;
    struct jpeg_error_mgr errors;
    struct jpeg_progress_mgr progress;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
    uint8_t *pixels; /* RGB output */
    uint8_t *row;    /* one decoded row when it is not RGB already */
} jpeg_state_t;

static jpeg_state_t *state_of(j_common_ptr info) {
    return (jpeg_state_t *)((char *)info - offsetof(jpeg_state_t, info));
}

static void fail_with_message(j_common_ptr info) {
    jpeg_state_t *state = state_of(info);
    info->err->format_message(info, state->message);
    longjmp(state->jump, 1);
}

/* Warnings (level -1) about corrupt data are tolerated, as Pillow and djpeg
 * do, except running out of data: a truncated file is an error. */
static void emit_message(j_common_ptr info, int level) {
    if (level < 0 && info->err->msg_code == JWRN_JPEG_EOF) fail_with_message(info);
}

static void output_message(j_common_ptr info) { (void)info; }

static void check_scans(j_common_ptr info) {
    j_decompress_ptr decompress = (j_decompress_ptr)info;
    if (decompress->input_scan_number > UFORM_JPEG_MAX_SCANS) {
        jpeg_state_t *state = state_of(info);
        snprintf(state->message, sizeof(state->message), "more than %d progressive scans",
                 UFORM_JPEG_MAX_SCANS);
        longjmp(state->jump, 1);
    }
}

/* Pillow's MULDIV255: a * b / 255, rounded. */
static inline int muldiv255(int a, int b) {
    int t = a * b + 128;
    return ((t >> 8) + t) >> 8;
}

static void cmyk_to_rgb(const uint8_t *in, uint8_t *out, size_t width) {
    for (size_t x = 0; x < width; x++, in += 4, out += 3) {
        int nk = in[3]; /* inverted storage: 255 - K */
        for (int c = 0; c < 3; c++) {
            int value = nk - muldiv255(255 - in[c], nk);
            out[c] = (uint8_t)(value < 0 ? 0 : value > 255 ? 255 : value);
        }
    }
}

/* Everything between setjmp and the last libjpeg call lives in *state, so
 * nothing the longjmp skips over is left in a register. */
static uform_status_t decode(jpeg_state_t *state, const uint8_t *data, size_t size, uform_image_t *image) {
    struct jpeg_decompress_struct *info = &state->info;
    if (setjmp(state->jump)) return uform_fail(UFORM_FORMAT, "JPEG: %s", state->message);

    jpeg_create_decompress(info);
    state->progress.progress_monitor = check_scans;
    info->progress = &state->progress;
    jpeg_mem_src(info, data, (unsigned long)size);
    jpeg_read_header(info, TRUE);
    uform_status_t status = uform_check_image_size(info->image_width, info->image_height, "JPEG");
    if (status != UFORM_OK) return status;

    switch (info->jpeg_color_space) {
    case JCS_GRAYSCALE: info->out_color_space = JCS_GRAYSCALE; break;
    case JCS_CMYK:
    case JCS_YCCK: info->out_color_space = JCS_CMYK; break;
    default: info->out_color_space = JCS_RGB; break; /* libjpeg refuses what it cannot convert */
    }
    jpeg_start_decompress(info);
    size_t width = info->output_width, height = info->output_height;
    size_t components = (size_t)info->output_components;
    if (width != info->image_width || height != info->image_height ||
        (components != 1 && components != 3 && components != 4))
        return uform_fail(UFORM_FORMAT, "JPEG: unexpected decoder output (%zu x %zu x %zu)", height,
                          width, components);

    state->pixels = uform_alloc(height, width * 3, "JPEG pixels");
    if (components != 3) state->row = uform_alloc(width, components, "JPEG row");
    if (!state->pixels || (components != 3 && !state->row)) return UFORM_OUT_OF_MEMORY;
    while (info->output_scanline < height) {
        uint8_t *out = state->pixels + (size_t)info->output_scanline * width * 3;
        JSAMPROW row = components == 3 ? out : state->row;
        if (jpeg_read_scanlines(info, &row, 1) != 1)
            return uform_fail(UFORM_FORMAT, "JPEG: no data for row %u", info->output_scanline);
        if (components == 1)
            for (size_t x = 0; x < width; x++) out[3 * x] = out[3 * x + 1] = out[3 * x + 2] = row[x];
        else if (components == 4)
            cmyk_to_rgb(row, out, width);
    }
    image->pixels = state->pixels, state->pixels = NULL;
    image->height = height, image->width = width;
    return UFORM_OK;
}

uform_status_t uform_decode_jpeg(const uint8_t *data, size_t size, uform_image_t *image) {
    /* On the heap: its address is stable across longjmp and it is large. */
    jpeg_state_t *state = uform_alloc_zeroed(1, sizeof(*state), "JPEG decoder");
    if (!state) return UFORM_OUT_OF_MEMORY;
    state->info.err = jpeg_std_error(&state->errors);
    state->errors.error_exit = fail_with_message;
    state->errors.emit_message = emit_message;
    state->errors.output_message = output_message;
    uform_status_t status = decode(state, data, size, image);
    jpeg_destroy_decompress(&state->info); /* safe at any stage, even before create */
    free(state->pixels);
    free(state->row);
    free(state);
    return status;
}

#else

uform_status_t uform_decode_jpeg(const uint8_t *data, size_t size, uform_image_t *image) {
    (void)data, (void)size, (void)image;
    return UFORM_MISSING_LIBRARY("JPEG", "libjpeg");
}

#endif
