/* decode_stub.c: placeholders until the decoders are built (docs/media.md). */
#include "decode.h"

#include <stdlib.h>

uform_status_t uform_decode_image(const void *data, size_t size, uform_image_t *image) {
    (void)data, (void)size;
    memset(image, 0, sizeof(*image));
    return uform_fail(UFORM_UNSUPPORTED, "image decoding: not built in this version");
}
void uform_image_free(uform_image_t *image) { free(image->pixels), image->pixels = NULL; }

uform_status_t uform_decode_video(const void *data, size_t size, size_t frame_stride, uform_video_t *video) {
    (void)data, (void)size, (void)frame_stride;
    memset(video, 0, sizeof(*video));
    return uform_fail(UFORM_UNSUPPORTED, "video decoding: not built in this version");
}
void uform_video_free(uform_video_t *video) { free(video->pixels), video->pixels = NULL; }

uform_status_t uform_decode_audio(const void *data, size_t size, size_t sample_rate, uform_audio_t *audio) {
    (void)data, (void)size, (void)sample_rate;
    memset(audio, 0, sizeof(*audio));
    return uform_fail(UFORM_UNSUPPORTED, "audio decoding: not built in this version");
}
void uform_audio_free(uform_audio_t *audio) { free(audio->samples), audio->samples = NULL; }

uint32_t uform_media_formats(void) { return 0; }
