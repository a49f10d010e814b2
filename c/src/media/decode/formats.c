/* formats.c: uform_media_formats: which decoders this build was compiled with
 * (the Makefile defines UFORM_HAVE_* for each library pkg-config found). */
#include "media/decode/decode.h"

uint32_t uform_media_formats(void) {
    uint32_t formats = 0;
#ifdef UFORM_HAVE_JPEG
    formats |= UFORM_MEDIA_JPEG;
#endif
#ifdef UFORM_HAVE_PNG
    formats |= UFORM_MEDIA_PNG;
#endif
#ifdef UFORM_HAVE_WEBP
    formats |= UFORM_MEDIA_WEBP;
#endif
#ifdef UFORM_HAVE_VIDEO
    formats |= UFORM_MEDIA_VIDEO;
#endif
#ifdef UFORM_HAVE_AUDIO
    formats |= UFORM_MEDIA_AUDIO;
#endif
#ifdef UFORM_HAVE_MPG123
    formats |= UFORM_MEDIA_MP3;
#endif
    return formats;
}
