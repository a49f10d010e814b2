/* image_formats.h: the per-format image decoders behind uform_decode_image.
 *
 * image.c sniffs the magic bytes and calls one of these; each lives in its own
 * file and, when this build lacks its library, answers UFORM_UNSUPPORTED
 * naming it. They share the contract of uform_decode_image (decode.h): on
 * failure *image is zeroed and nothing is left allocated. */
#ifndef UFORM_MEDIA_IMAGE_FORMATS_H
#define UFORM_MEDIA_IMAGE_FORMATS_H

#include "media/decode/decode.h"

UFORM_INTERNAL uform_status_t uform_decode_jpeg(const uint8_t *data, size_t size, uform_image_t *image);
UFORM_INTERNAL uform_status_t uform_decode_png(const uint8_t *data, size_t size, uform_image_t *image);
UFORM_INTERNAL uform_status_t uform_decode_webp(const uint8_t *data, size_t size, uform_image_t *image);

/* FORMAT unless 1 <= width, height and width * height <= UFORM_MAX_IMAGE_PIXELS;
 * called with the sizes a file declares, before anything that large is
 * allocated. `what` names the format ("PNG"). */
UFORM_INTERNAL uform_status_t uform_check_image_size(size_t width, size_t height, const char *what);

/* The message of a format this build was compiled without. */
#define UFORM_MISSING_LIBRARY(format, library)                                                     \
    uform_fail(UFORM_UNSUPPORTED, format " decoding needs " library                               \
                                         ", which this build of libuform was compiled without")

#endif /* UFORM_MEDIA_IMAGE_FORMATS_H */
