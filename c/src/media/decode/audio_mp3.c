/* audio_mp3.c: MPEG audio (MP3, and layers I and II) through libmpg123 from
 * memory, with the settings libsndfile uses (float output, no automatic
 * resampling, gapless: the encoder's delay and padding removed), plus
 * MPG123_QUIET, which libsndfile does not set, so nothing is printed. */
#include "media/decode/audio_formats.h"

#include <stdlib.h>

#ifdef UFORM_HAVE_MPG123

#include <pthread.h>
#include <stdio.h> /* SEEK_SET */
#include <sys/types.h>

#include <mpg123.h>

/* ---- the file in memory, as libmpg123's replaced reader sees it ------------------ */

typedef struct {
    const uint8_t *data;
    size_t size, offset;
} memory_t;

static mpg123_ssize_t memory_read(void *user, void *out, size_t count) {
    memory_t *memory = user;
    size_t left = memory->size - memory->offset;
    if (count > left) count = left;
    if (count) memcpy(out, memory->data + memory->offset, count);
    memory->offset += count;
    return (mpg123_ssize_t)count;
}

static off_t memory_seek(void *user, off_t offset, int whence) {
    memory_t *memory = user;
    off_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? (off_t)memory->offset : (off_t)memory->size;
    if ((offset < 0 && -offset > base) || (offset > 0 && offset > (off_t)memory->size - base)) return -1;
    memory->offset = (size_t)(base + offset);
    return (off_t)memory->offset;
}

/* ---- decoding ------------------------------------------------------------------------ */

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_result;

/* A no-op in recent libmpg123, required once by older ones. */
static void init_mpg123(void) { init_result = mpg123_init(); }

static uform_status_t mpg123_failure(mpg123_handle *handle, const char *what) {
    return uform_fail(UFORM_FORMAT, "MP3: %s (%s)", what, mpg123_strerror(handle));
}

static uform_status_t decode(mpg123_handle *handle, memory_t *memory, uform_mono_t *mono, size_t *rate) {
    mpg123_param(handle, MPG123_REMOVE_FLAGS, MPG123_AUTO_RESAMPLE, 0.0);
    long flags = MPG123_FORCE_FLOAT | MPG123_GAPLESS | MPG123_QUIET;
#ifdef MPG123_NO_FRANKENSTEIN
    flags |= MPG123_NO_FRANKENSTEIN; /* one stream per file, as libsndfile */
#endif
    if (mpg123_param(handle, MPG123_ADD_FLAGS, flags, 0.0) != MPG123_OK)
        return uform_fail(UFORM_UNSUPPORTED, "MP3: this libmpg123 cannot be made quiet or give floats");
    if (mpg123_replace_reader_handle(handle, memory_read, memory_seek, NULL) != MPG123_OK ||
        mpg123_open_handle(handle, memory) != MPG123_OK)
        return mpg123_failure(handle, "cannot open");

    long file_rate;
    int channels, encoding;
    if (mpg123_getformat(handle, &file_rate, &channels, &encoding) != MPG123_OK)
        return mpg123_failure(handle, "no MPEG audio frame");
    if (file_rate <= 0 || channels < 1 || channels > 2 || encoding != MPG123_ENC_FLOAT_32)
        return uform_fail(UFORM_FORMAT, "MP3: unexpected format (%ld Hz, %d channels, encoding %d)", file_rate,
                          channels, encoding);
    /* The output formats stay libmpg123's defaults (every MPEG rate, mono
     * and stereo): narrowing them makes a frame of another rate fail with a
     * message printed even in MPG123_QUIET mode. A stream that changes rate
     * or channels midway is refused below instead. */
    *rate = (size_t)file_rate;
    off_t length = mpg123_length(handle); /* an estimate without a Xing/LAME header */
    if (length > 0) UFORM_TRY(uform_mono_reserve(mono, (uint64_t)length));

    float block[8192];
    for (;;) {
        size_t done = 0;
        int result = mpg123_read(handle, block, sizeof(block), &done);
        size_t frames = done / (sizeof(float) * (size_t)channels);
        if (frames) UFORM_TRY(uform_mono_append(mono, block, frames, (size_t)channels));
        if (result == MPG123_DONE) return UFORM_OK;
        if (result == MPG123_NEW_FORMAT) {
            long now_rate;
            int now_channels, now_encoding;
            if (mpg123_getformat(handle, &now_rate, &now_channels, &now_encoding) != MPG123_OK ||
                now_rate != file_rate || now_channels != channels)
                return uform_fail(UFORM_FORMAT, "MP3: the stream changes its rate or channels midway");
            continue;
        }
        if (result != MPG123_OK) return mpg123_failure(handle, "corrupt data");
    }
}

uform_status_t uform_decode_mp3(const uint8_t *data, size_t size, uform_mono_t *mono, size_t *rate) {
    pthread_once(&init_once, init_mpg123);
    if (init_result != MPG123_OK) return uform_fail(UFORM_UNSUPPORTED, "MP3: libmpg123 failed to initialise");
    int error = MPG123_OK;
    mpg123_handle *handle = mpg123_new(NULL, &error);
    if (!handle) return uform_fail(UFORM_OUT_OF_MEMORY, "MP3: %s", mpg123_plain_strerror(error));
    memory_t memory = {data, size, 0};
    uform_status_t status = decode(handle, &memory, mono, rate);
    mpg123_close(handle);
    mpg123_delete(handle);
    return status;
}

#else

uform_status_t uform_decode_mp3(const uint8_t *data, size_t size, uform_mono_t *mono, size_t *rate) {
    (void)data, (void)size, (void)mono, (void)rate;
    return uform_fail(UFORM_UNSUPPORTED,
                      "MP3 decoding needs libmpg123, which this build of libuform was compiled without");
}

#endif
