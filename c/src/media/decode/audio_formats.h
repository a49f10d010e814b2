/* audio_formats.h: the decoders behind uform_decode_audio and the mono
 * buffer they share.
 *
 * audio.c recognises MPEG audio (an ID3 tag or a frame sync at the start) and
 * gives it to libmpg123 (audio_mp3.c); everything else goes to libsndfile
 * (audio_sndfile.c). libsndfile would decode MPEG through libmpg123 too, but
 * without MPG123_QUIET, and libmpg123 then prints to stderr on damaged files
 * (libsndfile/libsndfile#958), so libsndfile is never handed MPEG data. */
#ifndef UFORM_MEDIA_AUDIO_FORMATS_H
#define UFORM_MEDIA_AUDIO_FORMATS_H

#include "media/decode/decode.h"

/* Mono samples as they are decoded: channels averaged, at most
 * UFORM_MAX_AUDIO_SAMPLES of them. */
typedef struct {
    float *samples;
    size_t count, capacity;
} uform_mono_t;

/* Room for `hint` samples ahead of time (a hint over the limit is FORMAT:
 * the file declares too many). */
UFORM_INTERNAL uform_status_t uform_mono_reserve(uform_mono_t *mono, uint64_t hint);
/* Appends `frames` interleaved frames of `channels` floats, each averaged. */
UFORM_INTERNAL uform_status_t uform_mono_append(uform_mono_t *mono, const float *interleaved, size_t frames,
                                                size_t channels);

/* Each decodes the whole file into *mono (empty on entry; the caller frees it
 * whatever the status) and sets *rate to the file's sample rate. */
UFORM_INTERNAL uform_status_t uform_decode_sndfile(const uint8_t *data, size_t size, uform_mono_t *mono,
                                                   size_t *rate);
UFORM_INTERNAL uform_status_t uform_decode_mp3(const uint8_t *data, size_t size, uform_mono_t *mono,
                                               size_t *rate);

#endif /* UFORM_MEDIA_AUDIO_FORMATS_H */
