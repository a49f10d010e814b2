/* video.c: uform_decode_video through libavformat, libavcodec and libswscale
 * (docs/decoding.md).
 *
 * The clip is read from memory through a custom AVIOContext; only the MP4
 * (QuickTime) and Matroska/WebM demuxers are allowed, and any attempt to open
 * another file or URL (a playlist, an external data reference) is refused.
 * The first video stream is decoded frame by frame in the decoder's output
 * order, which is presentation order; frames 0, stride, 2 stride, ... are
 * converted to RGB24 at the first frame's size and kept. Frames are counted,
 * not timed, so variable frame rates need no special care.
 *
 * FFmpeg logs through one process-wide callback; the first call here replaces
 * it with one that drops every message (av_log_set_callback), so a program
 * that also uses FFmpeg directly loses its FFmpeg log output once it decodes
 * video through libuform. */
#include "media/decode/image_formats.h"

#include <stdlib.h>

#ifdef UFORM_HAVE_VIDEO

#include <pthread.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>

/* Demuxer names (libavformat's) allowed to read a clip. */
#define UFORM_VIDEO_DEMUXERS "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm"
#define UFORM_VIDEO_IO_BUFFER 65536

/* ---- silence ------------------------------------------------------------------ */

static void drop_log(void *context, int level, const char *format, va_list arguments) {
    (void)context, (void)level, (void)format, (void)arguments;
}

static pthread_once_t quiet_once = PTHREAD_ONCE_INIT;

static void quiet_ffmpeg(void) { av_log_set_callback(drop_log); }

/* ---- the clip in memory, as an AVIOContext reads it ---------------------------- */

typedef struct {
    const uint8_t *data;
    size_t size, offset;
} memory_t;

static int memory_read(void *user, uint8_t *out, int capacity) {
    memory_t *memory = user;
    size_t left = memory->size - memory->offset;
    if (left == 0) return AVERROR_EOF;
    size_t count = capacity < 0 ? 0 : (size_t)capacity < left ? (size_t)capacity : left;
    memcpy(out, memory->data + memory->offset, count);
    memory->offset += count;
    return (int)count;
}

static int64_t memory_seek(void *user, int64_t offset, int whence) {
    memory_t *memory = user;
    if (whence & AVSEEK_SIZE) return (int64_t)memory->size;
    whence &= ~AVSEEK_FORCE;
    int64_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? (int64_t)memory->offset
                 : whence == SEEK_END ? (int64_t)memory->size : -1;
    if (base < 0 || offset < -base || offset > (int64_t)memory->size - base) return AVERROR(EINVAL);
    memory->offset = (size_t)(base + offset);
    return (int64_t)memory->offset;
}

/* A demuxer asking for another file (HLS, external references) is refused. */
static int refuse_open(AVFormatContext *format, AVIOContext **io, const char *url, int flags,
                       AVDictionary **options) {
    (void)format, (void)io, (void)url, (void)flags, (void)options;
    return AVERROR(EPERM);
}

/* ---- decoding ------------------------------------------------------------------ */

typedef struct {
    memory_t memory;
    AVIOContext *io;
    AVFormatContext *format;
    AVCodecContext *codec;
    AVPacket *packet;
    AVFrame *frame;
    struct SwsContext *scaler;
    uint8_t *rgb[4]; /* one converted frame, rows aligned as swscale likes */
    int rgb_lines[4];
    int stream;
    size_t stride, decoded, kept, capacity; /* capacity in frames */
    size_t width, height, frame_bytes;
    uint8_t *pixels;
} video_state_t;

static uform_status_t ffmpeg_fail(uform_status_t status, const char *what, int code) {
    char text[AV_ERROR_MAX_STRING_SIZE];
    av_strerror(code, text, sizeof(text));
    return uform_fail(status, "video: %s (%s)", what, text);
}

static bool is_full_range(const AVFrame *frame) {
    switch (frame->format) {
    case AV_PIX_FMT_YUVJ420P: case AV_PIX_FMT_YUVJ422P: case AV_PIX_FMT_YUVJ444P:
    case AV_PIX_FMT_YUVJ440P: case AV_PIX_FMT_YUVJ411P: return true;
    default: return frame->color_range == AVCOL_RANGE_JPEG;
    }
}

/* Converts one decoded frame to RGB24 and appends it to the kept frames. */
static uform_status_t keep_frame(video_state_t *state, const AVFrame *frame) {
    if (state->kept == 0) {
        UFORM_TRY(uform_check_image_size((size_t)frame->width, (size_t)frame->height, "video frame"));
        state->width = (size_t)frame->width, state->height = (size_t)frame->height;
        state->frame_bytes = state->width * state->height * 3;
        if (av_image_alloc(state->rgb, state->rgb_lines, frame->width, frame->height, AV_PIX_FMT_RGB24,
                           64) < 0)
            return uform_fail(UFORM_OUT_OF_MEMORY, "video: cannot allocate a %zu x %zu frame",
                              state->height, state->width);
    }
    if (state->kept + 1 > UFORM_MAX_VIDEO_BYTES / state->frame_bytes)
        return uform_fail(UFORM_FORMAT,
                          "video: keeping frame %zu (%zu x %zu) passes the limit of %zu bytes of frames",
                          state->kept + 1, state->height, state->width, UFORM_MAX_VIDEO_BYTES);
    if (state->kept == state->capacity) {
        size_t most = UFORM_MAX_VIDEO_BYTES / state->frame_bytes;
        size_t grown = state->capacity ? state->capacity * 2 : 8;
        if (grown > most) grown = most;
        uint8_t *larger = realloc(state->pixels, grown * state->frame_bytes);
        if (!larger)
            return uform_fail(UFORM_OUT_OF_MEMORY, "video: cannot hold %zu frames of %zu bytes", grown,
                              state->frame_bytes);
        state->pixels = larger, state->capacity = grown;
    }

    state->scaler = sws_getCachedContext(state->scaler, frame->width, frame->height, frame->format,
                                         (int)state->width, (int)state->height, AV_PIX_FMT_RGB24,
                                         SWS_BILINEAR, NULL, NULL, NULL);
    if (!state->scaler) {
        const char *name = av_get_pix_fmt_name(frame->format);
        return uform_fail(UFORM_UNSUPPORTED, "video: cannot convert pixel format %s to RGB",
                          name ? name : "(unknown)");
    }
    /* The frame's own matrix and range (sws_getCoefficients takes AVCOL_SPC
     * values and answers BT.601 for unspecified ones); full-range RGB out. */
    const int *table = sws_getCoefficients(frame->colorspace);
    sws_setColorspaceDetails(state->scaler, table, is_full_range(frame), sws_getCoefficients(SWS_CS_DEFAULT),
                             1, 0, 1 << 16, 1 << 16);
    sws_scale(state->scaler, (const uint8_t *const *)frame->data, frame->linesize, 0, frame->height,
              state->rgb, state->rgb_lines);
    uint8_t *out = state->pixels + state->kept * state->frame_bytes;
    for (size_t y = 0; y < state->height; y++)
        memcpy(out + y * state->width * 3, state->rgb[0] + y * (size_t)state->rgb_lines[0], state->width * 3);
    state->kept++;
    return UFORM_OK;
}

/* Takes every frame the decoder has ready; keeps every stride-th. */
static uform_status_t drain(video_state_t *state) {
    for (;;) {
        int code = avcodec_receive_frame(state->codec, state->frame);
        if (code == AVERROR(EAGAIN) || code == AVERROR_EOF) return UFORM_OK;
        if (code < 0) return ffmpeg_fail(UFORM_FORMAT, "corrupt frame data", code);
        uform_status_t status = UFORM_OK;
        if (state->decoded++ % state->stride == 0) status = keep_frame(state, state->frame);
        av_frame_unref(state->frame);
        if (status != UFORM_OK) return status;
    }
}

/* The sizes the container declares for its video streams, before probing
 * decodes anything. */
static uform_status_t check_declared_sizes(const AVFormatContext *format) {
    for (unsigned i = 0; i < format->nb_streams; i++) {
        const AVCodecParameters *parameters = format->streams[i]->codecpar;
        if (parameters->codec_type != AVMEDIA_TYPE_VIDEO || parameters->width <= 0 || parameters->height <= 0)
            continue;
        UFORM_TRY(uform_check_image_size((size_t)parameters->width, (size_t)parameters->height, "video"));
    }
    return UFORM_OK;
}

static uform_status_t open_clip(video_state_t *state) {
    uint8_t *buffer = av_malloc(UFORM_VIDEO_IO_BUFFER);
    if (buffer)
        state->io = avio_alloc_context(buffer, UFORM_VIDEO_IO_BUFFER, 0, &state->memory, memory_read, NULL,
                                       memory_seek);
    if (!state->io) {
        av_free(buffer);
        return uform_fail(UFORM_OUT_OF_MEMORY, "video: cannot allocate the reader");
    }
    state->format = avformat_alloc_context();
    if (!state->format) return uform_fail(UFORM_OUT_OF_MEMORY, "video: cannot allocate the demuxer");
    state->format->pb = state->io;
    state->format->flags |= AVFMT_FLAG_CUSTOM_IO;
    state->format->io_open = refuse_open;
    AVDictionary *options = NULL;
    av_dict_set(&options, "format_whitelist", UFORM_VIDEO_DEMUXERS, 0);
    int code = avformat_open_input(&state->format, NULL, NULL, &options); /* frees it on failure */
    av_dict_free(&options);
    if (code < 0) return ffmpeg_fail(UFORM_FORMAT, "not an MP4 or WebM clip, or corrupt", code);
    UFORM_TRY(check_declared_sizes(state->format));
    /* Probing decodes a few frames; its decoders get our pixel limit too. */
    unsigned streams = state->format->nb_streams;
    AVDictionary **probe = uform_alloc_zeroed(streams ? streams : 1, sizeof(AVDictionary *), "video probe options");
    if (!probe) return UFORM_OUT_OF_MEMORY;
    for (unsigned i = 0; i < streams; i++) av_dict_set_int(&probe[i], "max_pixels", UFORM_MAX_IMAGE_PIXELS, 0);
    code = avformat_find_stream_info(state->format, probe);
    for (unsigned i = 0; i < streams; i++) av_dict_free(&probe[i]);
    free(probe);
    if (code < 0) return ffmpeg_fail(UFORM_FORMAT, "cannot read the streams", code);

    state->stream = -1;
    for (unsigned i = 0; i < state->format->nb_streams; i++) {
        AVStream *stream = state->format->streams[i];
        bool video = stream->codecpar->codec_type == AVMEDIA_TYPE_VIDEO &&
                     !(stream->disposition & AV_DISPOSITION_ATTACHED_PIC); /* not cover art */
        if (video && state->stream < 0)
            state->stream = (int)i;
        else
            stream->discard = AVDISCARD_ALL;
    }
    if (state->stream < 0) return uform_fail(UFORM_FORMAT, "video: the file has no video stream");
    const AVCodecParameters *parameters = state->format->streams[state->stream]->codecpar;
    UFORM_TRY(uform_check_image_size(parameters->width > 0 ? (size_t)parameters->width : 0,
                                     parameters->height > 0 ? (size_t)parameters->height : 0, "video"));

    const AVCodec *decoder = avcodec_find_decoder(parameters->codec_id);
    if (!decoder)
        return uform_fail(UFORM_UNSUPPORTED, "video: this FFmpeg has no decoder for %s",
                          avcodec_get_name(parameters->codec_id));
    state->codec = avcodec_alloc_context3(decoder);
    if (!state->codec) return uform_fail(UFORM_OUT_OF_MEMORY, "video: cannot allocate the decoder");
    code = avcodec_parameters_to_context(state->codec, parameters);
    if (code < 0) return ffmpeg_fail(UFORM_FORMAT, "bad codec parameters", code);
    state->codec->pkt_timebase = state->format->streams[state->stream]->time_base;
    state->codec->max_pixels = UFORM_MAX_IMAGE_PIXELS; /* also frames larger than declared */
    state->codec->thread_count = 1;                    /* callers parallelise over clips */
    state->codec->err_recognition |= AV_EF_EXPLODE;    /* corrupt data fails, not concealed */
    code = avcodec_open2(state->codec, decoder, NULL);
    if (code < 0) return ffmpeg_fail(UFORM_FORMAT, "cannot open the decoder", code);
    return UFORM_OK;
}

static uform_status_t decode(video_state_t *state) {
    UFORM_TRY(open_clip(state));
    state->packet = av_packet_alloc();
    state->frame = av_frame_alloc();
    if (!state->packet || !state->frame) return uform_fail(UFORM_OUT_OF_MEMORY, "video: cannot allocate frames");
    for (;;) {
        int code = av_read_frame(state->format, state->packet);
        if (code == AVERROR_EOF) break;
        if (code < 0) return ffmpeg_fail(UFORM_FORMAT, "corrupt or truncated container", code);
        if (state->packet->stream_index != state->stream) {
            av_packet_unref(state->packet);
            continue;
        }
        bool corrupt = state->packet->flags & AV_PKT_FLAG_CORRUPT;
        code = corrupt ? 0 : avcodec_send_packet(state->codec, state->packet);
        av_packet_unref(state->packet);
        if (corrupt) return uform_fail(UFORM_FORMAT, "video: a truncated or corrupt packet");
        if (code < 0) return ffmpeg_fail(UFORM_FORMAT, "corrupt packet", code);
        UFORM_TRY(drain(state));
    }
    int code = avcodec_send_packet(state->codec, NULL); /* flush the frames held back */
    if (code < 0 && code != AVERROR_EOF) return ffmpeg_fail(UFORM_FORMAT, "cannot flush the decoder", code);
    UFORM_TRY(drain(state));
    if (state->kept == 0) return uform_fail(UFORM_FORMAT, "video: the clip holds no frames");
    return UFORM_OK;
}

uform_status_t uform_decode_video(const void *data, size_t size, size_t frame_stride, uform_video_t *video) {
    if (!video) return uform_fail(UFORM_INVALID_ARGUMENT, "video: NULL output");
    memset(video, 0, sizeof(*video));
    if (!data && size) return uform_fail(UFORM_INVALID_ARGUMENT, "video: NULL data of %zu bytes", size);
    if (frame_stride == 0) return uform_fail(UFORM_INVALID_ARGUMENT, "video: frame_stride must be at least 1");
    pthread_once(&quiet_once, quiet_ffmpeg);

    video_state_t *state = uform_alloc_zeroed(1, sizeof(*state), "video decoder");
    if (!state) return UFORM_OUT_OF_MEMORY;
    state->memory = (memory_t){data, size, 0};
    state->stride = frame_stride;
    uform_status_t status = decode(state);
    if (status == UFORM_OK) {
        video->pixels = state->pixels, state->pixels = NULL;
        video->frames = state->kept, video->height = state->height, video->width = state->width;
    }
    sws_freeContext(state->scaler);
    av_freep(&state->rgb[0]);
    av_frame_free(&state->frame);
    av_packet_free(&state->packet);
    avcodec_free_context(&state->codec);
    avformat_close_input(&state->format); /* leaves our AVIOContext alone */
    if (state->io) av_freep(&state->io->buffer);
    avio_context_free(&state->io);
    free(state->pixels);
    free(state);
    return status;
}

#else

uform_status_t uform_decode_video(const void *data, size_t size, size_t frame_stride, uform_video_t *video) {
    (void)data, (void)size, (void)frame_stride;
    if (video) memset(video, 0, sizeof(*video));
    return uform_fail(UFORM_UNSUPPORTED, "video decoding needs FFmpeg (libavformat, libavcodec, libswscale, "
                                         "libavutil), which this build of libuform was compiled without");
}

#endif

void uform_video_free(uform_video_t *video) {
    if (!video) return;
    free(video->pixels);
    memset(video, 0, sizeof(*video));
}
