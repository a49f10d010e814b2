/* audio.c: uform_decode_audio (docs/decoding.md): recognise MPEG audio,
 * decode through libmpg123 or libsndfile into mono (channels averaged), then
 * resample with uform_resample when the asked rate differs. */
#include "media/decode/audio_formats.h"
#include "media/decode/resample.h"

#include <stdlib.h>

/* ---- the mono buffer ---------------------------------------------------------- */

static uform_status_t over_the_limit(void) {
    return uform_fail(UFORM_FORMAT, "audio: more than %zu samples per channel, over the limit",
                      UFORM_MAX_AUDIO_SAMPLES);
}

static uform_status_t grow(uform_mono_t *mono, size_t capacity) {
    float *larger = realloc(mono->samples, (capacity ? capacity : 1) * sizeof(float));
    if (!larger) return uform_fail(UFORM_OUT_OF_MEMORY, "audio: cannot hold %zu samples", capacity);
    mono->samples = larger, mono->capacity = capacity;
    return UFORM_OK;
}

uform_status_t uform_mono_reserve(uform_mono_t *mono, uint64_t hint) {
    if (hint > UFORM_MAX_AUDIO_SAMPLES)
        return uform_fail(UFORM_FORMAT, "audio: declares %llu samples per channel, over the limit of %zu",
                          (unsigned long long)hint, UFORM_MAX_AUDIO_SAMPLES);
    return hint > mono->capacity ? grow(mono, (size_t)hint) : UFORM_OK;
}

uform_status_t uform_mono_append(uform_mono_t *mono, const float *interleaved, size_t frames, size_t channels) {
    if (frames > UFORM_MAX_AUDIO_SAMPLES - mono->count) return over_the_limit();
    if (mono->count + frames > mono->capacity) {
        size_t capacity = mono->capacity * 2 > mono->count + frames ? mono->capacity * 2 : mono->count + frames;
        UFORM_TRY(grow(mono, capacity < UFORM_MAX_AUDIO_SAMPLES ? capacity : UFORM_MAX_AUDIO_SAMPLES));
    }
    float *out = mono->samples + mono->count;
    for (size_t f = 0; f < frames; f++) {
        double sum = 0; /* in double: the mean of up to 1024 channels, rounded once */
        for (size_t c = 0; c < channels; c++) sum += interleaved[f * channels + c];
        out[f] = (float)(sum / (double)channels);
    }
    mono->count += frames;
    return UFORM_OK;
}

/* ---- recognising MPEG audio ------------------------------------------------------ */

/* An ID3v2 tag or an MPEG audio frame sync at the start: what libsndfile
 * itself takes for MPEG. */
static bool is_mpeg_audio(const uint8_t *data, size_t size) {
    if (size >= 3 && memcmp(data, "ID3", 3) == 0) return true;
    return size >= 2 && data[0] == 0xff && (data[1] & 0xe0) == 0xe0;
}

/* A WAV (RIFF, RIFX, RF64, BW64) with an MPEG format tag anywhere a "fmt "
 * chunk could start: libsndfile would hand its payload to libmpg123. */
static bool is_wav_with_mpeg(const uint8_t *data, size_t size) {
    if (size < 12 || memcmp(data + 8, "WAVE", 4) != 0) return false;
    bool big_endian = memcmp(data, "RIFX", 4) == 0;
    if (!big_endian && memcmp(data, "RIFF", 4) != 0 && memcmp(data, "RF64", 4) != 0 &&
        memcmp(data, "BW64", 4) != 0)
        return false;
    for (size_t at = 12; at + 10 <= size; at++) {
        if (memcmp(data + at, "fmt ", 4) != 0) continue;
        unsigned tag = big_endian ? (unsigned)data[at + 8] << 8 | data[at + 9]
                                  : (unsigned)data[at + 9] << 8 | data[at + 8];
        if (tag == 0x0050 || tag == 0x0055) return true; /* WAVE_FORMAT_MPEG, _MPEGLAYER3 */
    }
    return false;
}

/* ---- decoding ------------------------------------------------------------------------ */

uform_status_t uform_decode_audio(const void *data, size_t size, size_t sample_rate, uform_audio_t *audio) {
    if (!audio) return uform_fail(UFORM_INVALID_ARGUMENT, "audio: NULL output");
    memset(audio, 0, sizeof(*audio));
    if (!data && size) return uform_fail(UFORM_INVALID_ARGUMENT, "audio: NULL data of %zu bytes", size);
    const uint8_t *bytes = data;

    uform_mono_t mono = {NULL, 0, 0};
    size_t rate = 0;
    uform_status_t status;
    if (is_mpeg_audio(bytes, size))
        status = uform_decode_mp3(bytes, size, &mono, &rate);
    else if (is_wav_with_mpeg(bytes, size))
        status = uform_fail(UFORM_UNSUPPORTED, "audio: MPEG audio inside a WAV file is not decoded "
                                               "(a plain .mp3 file is)");
    else
        status = uform_decode_sndfile(bytes, size, &mono, &rate);
    if (status == UFORM_OK && mono.count == 0) status = uform_fail(UFORM_FORMAT, "audio: the file holds no samples");
    if (status != UFORM_OK) {
        free(mono.samples);
        return status;
    }
    if (sample_rate == 0 || sample_rate == rate) {
        audio->samples = mono.samples, audio->count = mono.count;
        return UFORM_OK;
    }

    /* A rate the resampler cannot take is the file's fault, not the caller's. */
    if (rate == 0 || rate > UFORM_MAX_SAMPLE_RATE) {
        free(mono.samples);
        return uform_fail(UFORM_FORMAT, "audio: the file declares a sample rate of %zu Hz (not in 1 .. %zu)",
                          rate, UFORM_MAX_SAMPLE_RATE);
    }
    /* Refuse before resampling what would come out over the limit. */
    unsigned __int128 resampled = ((unsigned __int128)mono.count * sample_rate + rate - 1) / rate;
    if (resampled > UFORM_MAX_AUDIO_SAMPLES) {
        free(mono.samples);
        return uform_fail(UFORM_FORMAT, "audio: %zu samples at %zu Hz make about %llu at %zu Hz, over the "
                                        "limit of %zu",
                          mono.count, rate, (unsigned long long)resampled, sample_rate, UFORM_MAX_AUDIO_SAMPLES);
    }
    float *out = NULL;
    size_t out_count = 0;
    status = uform_resample(mono.samples, mono.count, rate, sample_rate, &out, &out_count);
    free(mono.samples);
    if (status != UFORM_OK) return uform_fail_context(status, "audio");
    if (out_count > UFORM_MAX_AUDIO_SAMPLES) {
        free(out);
        return uform_fail(UFORM_FORMAT, "audio: %zu samples after resampling, over the limit of %zu", out_count,
                          UFORM_MAX_AUDIO_SAMPLES);
    }
    audio->samples = out, audio->count = out_count;
    return UFORM_OK;
}

void uform_audio_free(uform_audio_t *audio) {
    if (!audio) return;
    free(audio->samples);
    memset(audio, 0, sizeof(*audio));
}
