/* image_webp.c: WebP through libwebp (docs/decoding.md).
 *
 * Lossy, lossless and alpha still images; alpha is dropped (libwebp's RGB
 * output keeps the colour channels as stored, unblended). Animated WebP is
 * refused with UFORM_FORMAT: its frames are composited onto a canvas, which
 * is libwebpdemux's work, and a clip belongs in video anyway. */
#include "media/decode/image_formats.h"

#ifdef UFORM_HAVE_WEBP

#include <stdlib.h>

#include <webp/decode.h>

static const char *status_name(VP8StatusCode code) {
    switch (code) {
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "corrupt bitstream";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_SUSPENDED: return "suspended";
    case VP8_STATUS_USER_ABORT: return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "truncated file";
    default: return "unknown error";
    }
}

uform_status_t uform_decode_webp(const uint8_t *data, size_t size, uform_image_t *image) {
    WebPBitstreamFeatures features;
    VP8StatusCode code = WebPGetFeatures(data, size, &features);
    if (code != VP8_STATUS_OK) return uform_fail(UFORM_FORMAT, "WebP: %s", status_name(code));
    if (features.has_animation)
        return uform_fail(UFORM_FORMAT, "WebP: animated files are not decoded (decode them as video "
                                        "or extract a frame)");
    if (features.width <= 0 || features.height <= 0)
        return uform_fail(UFORM_FORMAT, "WebP declares an empty image");
    UFORM_TRY(uform_check_image_size((size_t)features.width, (size_t)features.height, "WebP"));

    size_t width = (size_t)features.width, height = (size_t)features.height;
    uint8_t *pixels = uform_alloc(height, width * 3, "WebP pixels");
    if (!pixels) return UFORM_OUT_OF_MEMORY;
    WebPDecoderConfig config;
    if (!WebPInitDecoderConfig(&config)) {
        free(pixels);
        return uform_fail(UFORM_UNSUPPORTED, "WebP: libwebp's ABI does not match its header");
    }
    config.output.colorspace = MODE_RGB;
    config.output.is_external_memory = 1;
    config.output.u.RGBA.rgba = pixels;
    config.output.u.RGBA.stride = (int)(width * 3);
    config.output.u.RGBA.size = height * width * 3;
    code = WebPDecode(data, size, &config);
    WebPFreeDecBuffer(&config.output); /* frees nothing of ours: the memory is external */
    if (code != VP8_STATUS_OK) {
        free(pixels);
        return uform_fail(UFORM_FORMAT, "WebP: %s", status_name(code));
    }
    image->pixels = pixels, image->height = height, image->width = width;
    return UFORM_OK;
}

#else

uform_status_t uform_decode_webp(const uint8_t *data, size_t size, uform_image_t *image) {
    (void)data, (void)size, (void)image;
    return UFORM_MISSING_LIBRARY("WebP", "libwebp");
}

#endif
