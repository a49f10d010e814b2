/* decode.h: media decoding against system libraries (docs/media.md; the
 * decoders themselves: docs/decoding.md).
 *
 * Each decoder takes a whole encoded file in memory and answers owned buffers
 * (free them with the matching *_free). Formats whose library this build was
 * compiled without answer UFORM_UNSUPPORTED naming the library; corrupt or
 * truncated files answer UFORM_FORMAT; sizes over the limits below are refused
 * with UFORM_FORMAT before anything that large is allocated (decompression
 * bombs). Decoders never print (library log output is silenced) and are safe
 * to call from several threads at once. */
#ifndef UFORM_MEDIA_DECODE_H
#define UFORM_MEDIA_DECODE_H

#include "core/internal.h"

/* Limits, checked against the sizes a file declares before decoding. */
#define UFORM_MAX_IMAGE_PIXELS ((size_t)1 << 26)     /* 67 Mpx per image or frame */
#define UFORM_MAX_VIDEO_BYTES ((size_t)1 << 31)      /* kept RGB frames of one clip */
#define UFORM_MAX_AUDIO_SAMPLES ((size_t)1 << 28)    /* per channel, before and after resampling */

/* RGB8 pixels, row-major, 3 bytes per pixel, rows 3 * width apart. Gray is
 * replicated to RGB, alpha dropped (not blended), palettes expanded, 16-bit
 * channels reduced to their high byte; EXIF orientation is not applied. */
typedef struct {
    uint8_t *pixels;
    size_t height, width;
} uform_image_t;

UFORM_INTERNAL uform_status_t uform_decode_image(const void *data, size_t size, uform_image_t *image);
UFORM_INTERNAL void uform_image_free(uform_image_t *image);

/* Frames 0, stride, 2 stride, ... of a clip in presentation order, each RGB8
 * height x width (every frame converted to the first frame's size).
 * frame_stride 0 is UFORM_INVALID_ARGUMENT. */
typedef struct {
    uint8_t *pixels;              /* [frames][height][width][3] */
    size_t frames, height, width;
} uform_video_t;

UFORM_INTERNAL uform_status_t uform_decode_video(const void *data, size_t size, size_t frame_stride,
                                                 uform_video_t *video);
UFORM_INTERNAL void uform_video_free(uform_video_t *video);

/* Mono float32 samples: channels averaged, then resampled to sample_rate with
 * uform_resample (not called when the rates are equal; sample_rate 0 keeps
 * the file's own rate). */
typedef struct {
    float *samples;
    size_t count;
} uform_audio_t;

UFORM_INTERNAL uform_status_t uform_decode_audio(const void *data, size_t size, size_t sample_rate,
                                                 uform_audio_t *audio);
UFORM_INTERNAL void uform_audio_free(uform_audio_t *audio);

/* Band-limited resampling of mono samples from one rate to another (the
 * windowed-sinc of docs/media.md); equal rates copy. *out is malloc'ed. */
UFORM_INTERNAL uform_status_t uform_resample(const float *samples, size_t count, size_t from_rate,
                                             size_t to_rate, float **out, size_t *out_count);

#endif /* UFORM_MEDIA_DECODE_H */
