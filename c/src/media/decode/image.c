/* image.c: uform_decode_image: recognise JPEG, PNG or WebP by their magic
 * bytes and hand the file to that format's decoder (docs/decoding.md). */
#include "media/decode/image_formats.h"

#include <stdlib.h>

uform_status_t uform_check_image_size(size_t width, size_t height, const char *what) {
    if (width == 0 || height == 0)
        return uform_fail(UFORM_FORMAT, "%s declares an empty image (%zu x %zu pixels)", what, width,
                          height);
    size_t pixels;
    if (!uform_mul_ok(width, height, &pixels) || pixels > UFORM_MAX_IMAGE_PIXELS)
        return uform_fail(UFORM_FORMAT,
                          "%s declares %zu x %zu pixels, over the limit of %zu pixels per image",
                          what, width, height, UFORM_MAX_IMAGE_PIXELS);
    return UFORM_OK;
}

static bool starts_with(const uint8_t *data, size_t size, size_t at, const char *magic, size_t length) {
    return size >= at + length && memcmp(data + at, magic, length) == 0;
}

uform_status_t uform_decode_image(const void *data, size_t size, uform_image_t *image) {
    if (!image) return uform_fail(UFORM_INVALID_ARGUMENT, "image: NULL output");
    memset(image, 0, sizeof(*image));
    if (!data && size) return uform_fail(UFORM_INVALID_ARGUMENT, "image: NULL data of %zu bytes", size);
    const uint8_t *bytes = data;
    if (starts_with(bytes, size, 0, "\xff\xd8\xff", 3)) return uform_decode_jpeg(bytes, size, image);
    if (starts_with(bytes, size, 0, "\x89PNG\r\n\x1a\n", 8)) return uform_decode_png(bytes, size, image);
    if (starts_with(bytes, size, 0, "RIFF", 4) && starts_with(bytes, size, 8, "WEBP", 4))
        return uform_decode_webp(bytes, size, image);
    return uform_fail(UFORM_FORMAT, "not a JPEG, PNG or WebP file (%zu bytes, unknown magic bytes)",
                      size);
}

void uform_image_free(uform_image_t *image) {
    if (!image) return;
    free(image->pixels);
    memset(image, 0, sizeof(*image));
}
