/* audio_sndfile.c: WAV (8/16/24/32-bit integer, float), FLAC, Ogg Vorbis and
 * Opus, and whatever else the installed libsndfile reads, through its
 * virtual I/O from memory. Samples are read as float (integers scaled to
 * [-1, 1), as libsndfile and soundfile do). libsndfile itself never prints. */
#include "media/decode/audio_formats.h"

#include <stdlib.h>

#ifdef UFORM_HAVE_AUDIO

#include <sndfile.h>

/* ---- the file in memory, as libsndfile's virtual I/O sees it ------------------- */

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

/* ---- decoding ------------------------------------------------------------------------ */

/* Frames read per call: about 256 KiB of interleaved floats. */
#define UFORM_SNDFILE_BLOCK_SAMPLES 65536

static uform_status_t read_all(SNDFILE *file, const SF_INFO *info, uform_mono_t *mono) {
    size_t channels = (size_t)info->channels;
    /* The declared length sizes the first allocation; over the limit is
     * refused here. Lossy formats only estimate it, so the buffer still grows. */
    if (info->frames > 0 && info->frames != SF_COUNT_MAX) UFORM_TRY(uform_mono_reserve(mono, (uint64_t)info->frames));
    size_t block_frames = UFORM_SNDFILE_BLOCK_SAMPLES / channels ? UFORM_SNDFILE_BLOCK_SAMPLES / channels : 1;
    float *block = uform_alloc(block_frames, channels * sizeof(float), "audio block");
    if (!block) return UFORM_OUT_OF_MEMORY;
    uform_status_t status = UFORM_OK;
    sf_count_t got;
    while (status == UFORM_OK && (got = sf_readf_float(file, block, (sf_count_t)block_frames)) > 0)
        status = uform_mono_append(mono, block, (size_t)got, channels);
    free(block);
    if (status == UFORM_OK && sf_error(file) != SF_ERR_NO_ERROR)
        status = uform_fail(UFORM_FORMAT, "audio: corrupt data after %zu samples (%s)", mono->count,
                            sf_strerror(file));
    return status;
}

uform_status_t uform_decode_sndfile(const uint8_t *data, size_t size, uform_mono_t *mono, size_t *rate) {
    if (size > (uint64_t)INT64_MAX) return uform_fail(UFORM_FORMAT, "audio: %zu bytes is too large", size);
    memory_file_t memory = {data, (sf_count_t)size, 0};
    SF_VIRTUAL_IO io = {memory_length, memory_seek, memory_read, memory_write, memory_tell};
    SF_INFO info;
    memset(&info, 0, sizeof(info));
    SNDFILE *file = sf_open_virtual(&io, SFM_READ, &info, &memory);
    if (!file) /* sf_error(NULL) is libsndfile's one global error number: only a hint */
        return uform_fail(UFORM_FORMAT, "audio: not a file libsndfile can read, or corrupt (%s)",
                          sf_error_number(sf_error(NULL)));
    uform_status_t status;
    if (info.channels < 1 || info.samplerate < 1)
        status = uform_fail(UFORM_FORMAT, "audio: declares %d channels at %d Hz", info.channels, info.samplerate);
    else
        status = read_all(file, &info, mono);
    *rate = info.samplerate > 0 ? (size_t)info.samplerate : 0;
    sf_close(file);
    return status;
}

#else

uform_status_t uform_decode_sndfile(const uint8_t *data, size_t size, uform_mono_t *mono, size_t *rate) {
    (void)data, (void)size, (void)mono, (void)rate;
    return uform_fail(UFORM_UNSUPPORTED,
                      "audio decoding needs libsndfile, which this build of libuform was compiled without");
}

#endif
