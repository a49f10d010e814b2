/* audio.c: uform_decode_audio through libsndfile's virtual I/O
 * (docs/decoding.md): WAV (8/16/24/32-bit integer, float), FLAC, MP3,
 * Ogg Vorbis and Opus, and whatever else the installed libsndfile reads.
 * Samples are read as float (integers scaled to [-1, 1)), channels averaged,
 * then resampled with uform_resample when the asked rate differs. */
#include "decode.h"

#include <stdlib.h>

#ifdef UFORM_HAVE_AUDIO

#include <sndfile.h>

/* ---- the file in memory, as libsndfile's virtual I/O sees it ------------- */

typedef struct {
    const uint8_t *data;
    sf_count_t size, offset;
} memory_file_t;

static sf_count_t memory_length(void *user) { return ((memory_file_t *)user)->size; }

static sf_count_t memory_seek(sf_count_t offset, int whence, void *user) {
    memory_file_t *file = user;
    sf_count_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? file->offset : file->size;
    if ((offset < 0 && -offset > base) || (offset > 0 && offset > file->size - base)) return -1;
    return file->offset = base + offset;
}

static sf_count_t memory_read(void *out, sf_count_t count, void *user) {
    memory_file_t *file = user;
    sf_count_t left = file->size - file->offset;
    if (count > left) count = left;
    if (count <= 0) return 0; /* also keeps a NULL (empty) buffer out of memcpy */
    memcpy(out, file->data + file->offset, (size_t)count);
    file->offset += count;
    return count;
}

static sf_count_t memory_write(const void *in, sf_count_t count, void *user) {
    (void)in, (void)count, (void)user;
    return 0;
}

static sf_count_t memory_tell(void *user) { return ((memory_file_t *)user)->offset; }

/* ---- decoding --------------------------------------------------------------- */

/* Frames read per call: about 256 KiB of interleaved floats. */
#define UFORM_AUDIO_BLOCK_SAMPLES 65536

/* Reads every frame as float and averages its channels into *mono. */
static uform_status_t read_mono(SNDFILE *file, const SF_INFO *info, float **mono, size_t *count) {
    size_t channels = (size_t)info->channels;
    size_t block_frames = UFORM_AUDIO_BLOCK_SAMPLES / channels ? UFORM_AUDIO_BLOCK_SAMPLES / channels : 1;
    float *block = uform_alloc(block_frames, channels * sizeof(float), "audio block");
    if (!block) return UFORM_OUT_OF_MEMORY;
    /* The declared length sizes the first allocation; it is only a hint
     * (lossy formats estimate it), so the buffer still grows as needed. */
    size_t capacity = info->frames > 0 && (uint64_t)info->frames <= UFORM_MAX_AUDIO_SAMPLES
                          ? (size_t)info->frames
                          : block_frames;
    float *samples = uform_alloc(capacity ? capacity : 1, sizeof(float), "audio samples");
    size_t used = 0;
    uform_status_t status = samples ? UFORM_OK : UFORM_OUT_OF_MEMORY;
    while (status == UFORM_OK) {
        sf_count_t got = sf_readf_float(file, block, (sf_count_t)block_frames);
        if (got <= 0) break;
        if ((size_t)got > UFORM_MAX_AUDIO_SAMPLES - used) {
            status = uform_fail(UFORM_FORMAT, "audio: more than %zu samples per channel, the limit",
                                UFORM_MAX_AUDIO_SAMPLES);
            break;
        }
        if (used + (size_t)got > capacity) {
            size_t grown = capacity * 2 > used + (size_t)got ? capacity * 2 : used + (size_t)got;
            if (grown > UFORM_MAX_AUDIO_SAMPLES) grown = UFORM_MAX_AUDIO_SAMPLES;
            float *larger = realloc(samples, grown * sizeof(float));
            if (!larger) {
                status = uform_fail(UFORM_OUT_OF_MEMORY, "audio: cannot grow to %zu samples", grown);
                break;
            }
            samples = larger, capacity = grown;
        }
        for (size_t f = 0; f < (size_t)got; f++) {
            double sum = 0;
            for (size_t c = 0; c < channels; c++) sum += block[f * channels + c];
            samples[used + f] = (float)(sum / (double)channels);
        }
        used += (size_t)got;
    }
    free(block);
    if (status == UFORM_OK && sf_error(file) != SF_ERR_NO_ERROR)
        status = uform_fail(UFORM_FORMAT, "audio: corrupt data after %zu samples (%s)", used,
                            sf_strerror(file));
    if (status == UFORM_OK && used == 0) status = uform_fail(UFORM_FORMAT, "audio: the file holds no samples");
    if (status != UFORM_OK) {
        free(samples);
        return status;
    }
    *mono = samples, *count = used;
    return UFORM_OK;
}

uform_status_t uform_decode_audio(const void *data, size_t size, size_t sample_rate, uform_audio_t *audio) {
    if (!audio) return uform_fail(UFORM_INVALID_ARGUMENT, "audio: NULL output");
    memset(audio, 0, sizeof(*audio));
    if (!data && size) return uform_fail(UFORM_INVALID_ARGUMENT, "audio: NULL data of %zu bytes", size);
    if (size > (uint64_t)INT64_MAX) return uform_fail(UFORM_FORMAT, "audio: %zu bytes is too large", size);

    memory_file_t memory = {data, (sf_count_t)size, 0};
    SF_VIRTUAL_IO io = {memory_length, memory_seek, memory_read, memory_write, memory_tell};
    SF_INFO info;
    memset(&info, 0, sizeof(info));
    SNDFILE *file = sf_open_virtual(&io, SFM_READ, &info, &memory);
    if (!file)
        return uform_fail(UFORM_FORMAT, "audio: not a file libsndfile can read, or corrupt (%s)",
                          sf_error_number(sf_error(NULL)));
    uform_status_t status = UFORM_OK;
    if (info.channels < 1 || info.samplerate < 1)
        status = uform_fail(UFORM_FORMAT, "audio: declares %d channels at %d Hz", info.channels,
                            info.samplerate);
    else if (info.frames > 0 && info.frames != SF_COUNT_MAX &&
             (uint64_t)info.frames > UFORM_MAX_AUDIO_SAMPLES)
        status = uform_fail(UFORM_FORMAT,
                            "audio: declares %lld samples per channel, over the limit of %zu",
                            (long long)info.frames, UFORM_MAX_AUDIO_SAMPLES);
    float *mono = NULL;
    size_t count = 0;
    if (status == UFORM_OK) status = read_mono(file, &info, &mono, &count);
    sf_close(file);
    if (status != UFORM_OK) return status;

    size_t file_rate = (size_t)info.samplerate;
    if (sample_rate == 0 || sample_rate == file_rate) {
        audio->samples = mono, audio->count = count;
        return UFORM_OK;
    }
    /* Refuse before resampling what would come out over the limit. */
    unsigned __int128 resampled = ((unsigned __int128)count * sample_rate + file_rate - 1) / file_rate;
    if (resampled > UFORM_MAX_AUDIO_SAMPLES) {
        free(mono);
        return uform_fail(UFORM_FORMAT,
                          "audio: %zu samples at %zu Hz make about %llu at %zu Hz, over the limit of %zu",
                          count, file_rate, (unsigned long long)resampled, sample_rate,
                          UFORM_MAX_AUDIO_SAMPLES);
    }
    float *out = NULL;
    size_t out_count = 0;
    status = uform_resample(mono, count, file_rate, sample_rate, &out, &out_count);
    free(mono);
    if (status != UFORM_OK) return uform_fail_context(status, "audio");
    if (out_count > UFORM_MAX_AUDIO_SAMPLES) {
        free(out);
        return uform_fail(UFORM_FORMAT, "audio: %zu samples after resampling, over the limit of %zu",
                          out_count, UFORM_MAX_AUDIO_SAMPLES);
    }
    audio->samples = out, audio->count = out_count;
    return UFORM_OK;
}

#else

uform_status_t uform_decode_audio(const void *data, size_t size, size_t sample_rate, uform_audio_t *audio) {
    (void)data, (void)size, (void)sample_rate;
    if (audio) memset(audio, 0, sizeof(*audio));
    return uform_fail(UFORM_UNSUPPORTED,
                      "audio decoding needs libsndfile, which this build of libuform was compiled without");
}

#endif

void uform_audio_free(uform_audio_t *audio) {
    if (!audio) return;
    free(audio->samples);
    memset(audio, 0, sizeof(*audio));
}
