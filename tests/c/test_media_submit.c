/* test_media_submit.c: the *_submit twins of the media verbs under
 * ASan/UBSan with LeakSanitizer (docs/c-api.md "Submitting work").
 *
 * On a media-only checkpoint it writes, each of uform_image_encode_pixels_submit,
 * uform_image_encode_submit (PNG built here byte by byte), uform_video_encode_submit
 * (a tiny MP4 below), uform_audio_encode_submit (a PCM WAV built here) and
 * uform_audio_encode_samples_submit is checked to answer what its blocking verb
 * answers, bit for bit (outputs and stats); bad arguments are refused by the
 * submit call itself exactly where uform_text_encode_submit refuses them;
 * failures inside a job (an empty batch, a corrupt file among good ones, a NaN
 * sample, an unknown scalar, cancellation) reach uform_job_wait and give
 * the arena back; a queued job holds its arena; and inputs may be freed once
 * the job has finished. File verbs whose decoder this build lacks are checked
 * to fail alike (UFORM_UNSUPPORTED) both ways. The *_encode_paths verbs and their
 * submit twins answer what the byte verbs answer on the same files written to
 * a temporary directory, and refuse bad paths before decoding anything. */
#include "core/safetensors.h"

#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define HIDDEN 64
#define CONTEXT 48
#define DIMENSIONS 16
#define TOKEN_WIDTH 8
#define HAS(flag) ((uform_media_formats() & (flag)) != 0)
#define BOTH (UFORM_OUTPUTS_EMBEDDINGS | UFORM_OUTPUTS_TOKENS)

static uform_model_t *model;

/* ---- the checkpoint ----------------------------------------------------------------- */

typedef struct {
    uform_tensor_view_t views[32];
    char names[32][64];
    size_t count;
} tensors_t;

/* A [rows] (cols 0) or [rows, cols] BF16 tensor of offset + scale * U(-1, 1). */
static void add(tensors_t *t, const char *name, size_t rows, size_t cols, float scale, float offset) {
    size_t count = rows * (cols ? cols : 1);
    uint16_t *values = malloc(count * sizeof(uint16_t));
    for (size_t i = 0; i < count; i++) {
        float unit = (float)((double)(rng_next() >> 11) * 0x1p-53 * 2.0 - 1.0);
        values[i] = uform_f32_to_bf16(offset + scale * unit);
    }
    snprintf(t->names[t->count], sizeof(t->names[t->count]), "%s", name);
    t->views[t->count] = (uform_tensor_view_t){.name = t->names[t->count], .dtype = UFORM_DTYPE_BF16,
                                               .rank = cols ? 2 : 1, .shape = {rows, cols}, .data = values};
    t->count++;
}

static bool write_checkpoint(char *path) {
    int fd = mkstemp(path);
    if (fd < 0) return false;
    close(fd);
    static tensors_t t;
    const size_t H = HIDDEN;
    add(&t, "blocks.0.attention.norm.weight", H, 0, 0.1f, 1.0f);
    add(&t, "blocks.0.attention.norm.bias", H, 0, 0.1f, 0.0f);
    add(&t, "blocks.0.attention.qkv.weight", 3 * H, H, 0.3f, 0.0f);
    add(&t, "blocks.0.attention.qkv.bias", 3 * H, 0, 0.1f, 0.0f);
    add(&t, "blocks.0.attention.out.weight", H, H, 0.2f, 0.0f);
    add(&t, "blocks.0.attention.out.bias", H, 0, 0.1f, 0.0f);
    add(&t, "blocks.0.mlp.norm.weight", H, 0, 0.1f, 1.0f);
    add(&t, "blocks.0.mlp.norm.bias", H, 0, 0.1f, 0.0f);
    add(&t, "blocks.0.mlp.up.weight", 4 * H, H, 0.2f, 0.0f);
    add(&t, "blocks.0.mlp.up.bias", 4 * H, 0, 0.1f, 0.0f);
    add(&t, "blocks.0.mlp.down.weight", H, 4 * H, 0.1f, 0.0f);
    add(&t, "blocks.0.mlp.down.bias", H, 0, 0.1f, 0.0f);
    add(&t, "norm.weight", H, 0, 0.1f, 1.0f);
    add(&t, "norm.bias", H, 0, 0.1f, 0.0f);
    add(&t, "heads.embedding.weight", DIMENSIONS, H, 0.2f, 0.0f);
    add(&t, "heads.tokens.weight", TOKEN_WIDTH, H, 0.2f, 0.0f);
    add(&t, "image.patch.weight", H, 4 * 4 * 3, 0.2f, 0.0f);
    add(&t, "image.patch.bias", H, 0, 0.1f, 0.0f);
    add(&t, "image.modality", H, 0, 0.5f, 0.0f);
    add(&t, "video.tube.weight", H, 2 * 4 * 4 * 3, 0.2f, 0.0f);
    add(&t, "video.tube.bias", H, 0, 0.1f, 0.0f);
    add(&t, "video.modality", H, 0, 0.5f, 0.0f);
    add(&t, "audio.chunk.weight", H, 32, 0.3f, 0.0f);
    add(&t, "audio.chunk.bias", H, 0, 0.1f, 0.0f);
    add(&t, "audio.modality", H, 0, 0.5f, 0.0f);
    char json[512];
    snprintf(json, sizeof(json),
             "{\"version\":4,\"depth\":1,\"hidden\":%d,\"dimensions\":%d,\"context\":%d,\"token_width\":%d,"
             "\"image\":{\"patch_side\":4,\"channels\":3},\"video\":{\"patch_side\":4,\"tube_frames\":2},"
             "\"audio\":{\"chunk_samples\":32,\"sample_rate\":16000}}",
             HIDDEN, DIMENSIONS, CONTEXT, TOKEN_WIDTH);
    uform_metadata_entry_t metadata = {(char *)"uform", json};
    uform_status_t status = uform_safetensors_write(path, t.views, t.count, &metadata, 1, NULL);
    for (size_t i = 0; i < t.count; i++) free((void *)t.views[i].data);
    return status == UFORM_OK;
}

/* ---- files built byte by byte ------------------------------------------------------ */

typedef struct {
    uint8_t *data;
    size_t size, capacity;
} bytes_t;

static void put(bytes_t *b, const void *data, size_t size) {
    if (size == 0) return;
    if (b->size + size > b->capacity) {
        b->capacity = (b->size + size) * 2 + 64;
        b->data = realloc(b->data, b->capacity);
        if (!b->data) abort();
    }
    memcpy(b->data + b->size, data, size);
    b->size += size;
}
static void put_u8(bytes_t *b, uint8_t v) { put(b, &v, 1); }
static void put_be32(bytes_t *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    put(b, x, 4);
}
static void put_le16(bytes_t *b, uint16_t v) {
    uint8_t x[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    put(b, x, 2);
}
static void put_le32(bytes_t *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, x, 4);
}

static uint32_t crc32_of(const uint8_t *data, size_t size) {
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < size; i++) {
        crc ^= data[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

static void put_chunk(bytes_t *b, const char *type, const uint8_t *body, size_t size) {
    bytes_t typed = {0};
    put(&typed, type, 4);
    put(&typed, body, size);
    put_be32(b, (uint32_t)size);
    put(b, typed.data, typed.size);
    put_be32(b, crc32_of(typed.data, typed.size));
    free(typed.data);
}

/* An 8-bit RGB PNG of the pixels, rows with filter 0 in one stored (uncompressed)
 * deflate block, so no compressor is needed. */
static void put_png(bytes_t *png, const uform_pixels_t *image) {
    bytes_t header = {0}, rows = {0}, zlib = {0};
    put(png, "\x89PNG\r\n\x1a\n", 8);
    put_be32(&header, (uint32_t)image->width);
    put_be32(&header, (uint32_t)image->height);
    uint8_t rest[5] = {8, 2, 0, 0, 0};
    put(&header, rest, 5);
    put_chunk(png, "IHDR", header.data, header.size);
    for (size_t y = 0; y < image->height; y++) {
        put_u8(&rows, 0);
        put(&rows, image->data + y * image->row_stride, 3 * image->width);
    }
    put_u8(&zlib, 0x78), put_u8(&zlib, 0x01), put_u8(&zlib, 0x01); /* header, final stored block */
    put_le16(&zlib, (uint16_t)rows.size), put_le16(&zlib, (uint16_t)~rows.size);
    put(&zlib, rows.data, rows.size);
    uint32_t a = 1, s = 0;
    for (size_t i = 0; i < rows.size; i++) a = (a + rows.data[i]) % 65521, s = (s + a) % 65521;
    put_be32(&zlib, (s << 16) | a);
    put_chunk(png, "IDAT", zlib.data, zlib.size);
    put_chunk(png, "IEND", NULL, 0);
    free(header.data), free(rows.data), free(zlib.data);
}

/* A mono 16-bit PCM WAV of `count` samples at `rate` Hz. */
static void put_wav(bytes_t *wav, const float *samples, size_t count, uint32_t rate) {
    uint32_t size = (uint32_t)(2 * count);
    put(wav, "RIFF", 4), put_le32(wav, 36 + size), put(wav, "WAVEfmt ", 8);
    put_le32(wav, 16), put_le16(wav, 1), put_le16(wav, 1), put_le32(wav, rate);
    put_le32(wav, rate * 2), put_le16(wav, 2), put_le16(wav, 16), put(wav, "data", 4), put_le32(wav, size);
    for (size_t i = 0; i < count; i++) put_le16(wav, (uint16_t)(int16_t)lrintf(samples[i] * 32000.0f));
}

/* Five 16 x 16 frames at 10 fps, MPEG-4 Part 2 in MP4, written by PyAV:
 *   with av.open(buffer, "w", format="mp4") as c:
 *       s = c.add_stream("mpeg4", rate=10); s.width = s.height = 16; s.pix_fmt = "yuv420p"
 *       for i in range(5): frame i = RGB ((x*16 + 10 i) % 256, (y*16) % 256, ((x+y)*8) % 256) */
static const uint8_t clip_mp4[] = {
    0x00, 0x00, 0x00, 0x1c, 0x66, 0x74, 0x79, 0x70, 0x69, 0x73, 0x6f, 0x6d, 0x00, 0x00, 0x02, 0x00,
    0x69, 0x73, 0x6f, 0x6d, 0x69, 0x73, 0x6f, 0x32, 0x6d, 0x70, 0x34, 0x31, 0x00, 0x00, 0x00, 0x08,
    0x66, 0x72, 0x65, 0x65, 0x00, 0x00, 0x00, 0x95, 0x6d, 0x64, 0x61, 0x74, 0x00, 0x00, 0x01, 0xb3,
    0x00, 0x10, 0x07, 0x00, 0x00, 0x01, 0xb6, 0x10, 0xc0, 0x9b, 0x05, 0xf8, 0x06, 0x83, 0x09, 0x63,
    0x70, 0x32, 0x15, 0x86, 0x70, 0x0d, 0x06, 0x12, 0xc6, 0xe0, 0x64, 0x2b, 0x06, 0x38, 0x06, 0x83,
    0x09, 0x63, 0x70, 0x32, 0x15, 0x86, 0x70, 0x0d, 0x06, 0x12, 0xc6, 0xe0, 0x64, 0x2b, 0xc7, 0xe3,
    0xe4, 0x67, 0x30, 0x78, 0x0f, 0xe2, 0xc1, 0xe0, 0x20, 0x75, 0x06, 0x1b, 0x82, 0xb0, 0xd9, 0x03,
    0x00, 0x00, 0x01, 0xb6, 0x51, 0xe1, 0x05, 0xd5, 0x00, 0x00, 0x01, 0xb6, 0x52, 0xc1, 0x44, 0x2a,
    0xaf, 0xd5, 0x01, 0xb5, 0x40, 0x57, 0xc3, 0x1f, 0xaa, 0x03, 0x6a, 0x80, 0xaf, 0x86, 0x3a, 0x69,
    0x5f, 0x84, 0x7f, 0x01, 0x58, 0x31, 0x7f, 0x00, 0x00, 0x01, 0xb6, 0x53, 0xe1, 0x84, 0x2a, 0xa8,
    0xde, 0x0c, 0x46, 0xf0, 0x63, 0x49, 0xf4, 0x70, 0x31, 0x7f, 0x00, 0x00, 0x01, 0xb6, 0x54, 0xc1,
    0xe4, 0x2e, 0x51, 0x56, 0x08, 0x80, 0x57, 0xc3, 0x17, 0x00, 0x00, 0x03, 0x59, 0x6d, 0x6f, 0x6f,
    0x76, 0x00, 0x00, 0x00, 0x6c, 0x6d, 0x76, 0x68, 0x64, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xe8, 0x00, 0x00, 0x01, 0xf4, 0x00, 0x01, 0x00,
    0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x02,
    0x83, 0x74, 0x72, 0x61, 0x6b, 0x00, 0x00, 0x00, 0x5c, 0x74, 0x6b, 0x68, 0x64, 0x00, 0x00, 0x00,
    0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x01, 0xf4, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x10, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x24, 0x65, 0x64, 0x74, 0x73, 0x00, 0x00, 0x00, 0x1c, 0x65, 0x6c, 0x73,
    0x74, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x01, 0xf4, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x01, 0xfb, 0x6d, 0x64, 0x69, 0x61, 0x00, 0x00, 0x00,
    0x20, 0x6d, 0x64, 0x68, 0x64, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x28, 0x00, 0x00, 0x00, 0x14, 0x00, 0x55, 0xc4, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x2d, 0x68, 0x64, 0x6c, 0x72, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x76, 0x69, 0x64,
    0x65, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x56, 0x69, 0x64,
    0x65, 0x6f, 0x48, 0x61, 0x6e, 0x64, 0x6c, 0x65, 0x72, 0x00, 0x00, 0x00, 0x01, 0xa6, 0x6d, 0x69,
    0x6e, 0x66, 0x00, 0x00, 0x00, 0x14, 0x76, 0x6d, 0x68, 0x64, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x24, 0x64, 0x69, 0x6e, 0x66, 0x00, 0x00,
    0x00, 0x1c, 0x64, 0x72, 0x65, 0x66, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,
    0x00, 0x0c, 0x75, 0x72, 0x6c, 0x20, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x01, 0x66, 0x73, 0x74,
    0x62, 0x6c, 0x00, 0x00, 0x00, 0xda, 0x73, 0x74, 0x73, 0x64, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x01, 0x00, 0x00, 0x00, 0xca, 0x6d, 0x70, 0x34, 0x76, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x10, 0x00, 0x10, 0x00, 0x48, 0x00, 0x00, 0x00, 0x48, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x18, 0xff, 0xff, 0x00, 0x00, 0x00, 0x60, 0x65, 0x73, 0x64, 0x73,
    0x00, 0x00, 0x00, 0x00, 0x03, 0x80, 0x80, 0x80, 0x4f, 0x00, 0x01, 0x00, 0x04, 0x80, 0x80, 0x80,
    0x41, 0x20, 0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0x08, 0xd0, 0x00, 0x00, 0x00, 0x00, 0x05, 0x80,
    0x80, 0x80, 0x2f, 0x00, 0x00, 0x01, 0xb0, 0x01, 0x00, 0x00, 0x01, 0xb5, 0x89, 0x13, 0x00, 0x00,
    0x01, 0x00, 0x00, 0x00, 0x01, 0x20, 0x00, 0xc4, 0x8d, 0x88, 0x00, 0x55, 0x00, 0x84, 0x02, 0x14,
    0x63, 0x00, 0x00, 0x01, 0xb2, 0x4c, 0x61, 0x76, 0x63, 0x36, 0x32, 0x2e, 0x32, 0x38, 0x2e, 0x31,
    0x30, 0x32, 0x06, 0x80, 0x80, 0x80, 0x01, 0x02, 0x00, 0x00, 0x00, 0x14, 0x62, 0x74, 0x72, 0x74,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x08, 0xd0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x18,
    0x73, 0x74, 0x74, 0x73, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x05,
    0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14, 0x73, 0x74, 0x73, 0x73, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x1c, 0x73, 0x74, 0x73, 0x63,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x05,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x28, 0x73, 0x74, 0x73, 0x7a, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x44, 0x00, 0x00, 0x00, 0x08,
    0x00, 0x00, 0x00, 0x1f, 0x00, 0x00, 0x00, 0x13, 0x00, 0x00, 0x00, 0x0f, 0x00, 0x00, 0x00, 0x14,
    0x73, 0x74, 0x63, 0x6f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x2c,
    0x00, 0x00, 0x00, 0x62, 0x75, 0x64, 0x74, 0x61, 0x00, 0x00, 0x00, 0x5a, 0x6d, 0x65, 0x74, 0x61,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x21, 0x68, 0x64, 0x6c, 0x72, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x6d, 0x64, 0x69, 0x72, 0x61, 0x70, 0x70, 0x6c, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2d, 0x69, 0x6c, 0x73, 0x74, 0x00, 0x00, 0x00,
    0x25, 0xa9, 0x74, 0x6f, 0x6f, 0x00, 0x00, 0x00, 0x1d, 0x64, 0x61, 0x74, 0x61, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x00, 0x00, 0x00, 0x4c, 0x61, 0x76, 0x66, 0x36, 0x32, 0x2e, 0x31, 0x32, 0x2e, 0x31,
    0x30, 0x32,
};

/* ---- one call of any media verb, blocking or submitted ------------------------------ */

typedef enum { PIXELS, IMAGE, VIDEO, AUDIO, SAMPLES, VERBS } verb_t;
static const char *const verb_names[VERBS] = {"pixels", "image", "video", "audio", "samples"};

typedef struct {
    verb_t verb;
    const uform_pixels_t *images;    /* PIXELS */
    size_t count;                    /* PIXELS, SAMPLES */
    uform_tape_t files;              /* IMAGE, VIDEO, AUDIO */
    const float *samples;            /* SAMPLES */
    size_t size;
    const size_t *offsets;
    size_t rate;
} call_t;

typedef union {
    uform_image_encode_stats_t image;
    uform_video_encode_stats_t video;
    uform_audio_encode_stats_t audio;
} stats_t;

static size_t stats_size(verb_t verb) {
    return verb == PIXELS || verb == IMAGE ? sizeof(uform_image_encode_stats_t)
           : verb == VIDEO                 ? sizeof(uform_video_encode_stats_t)
                                           : sizeof(uform_audio_encode_stats_t);
}

static uform_status_t call_blocking(const call_t *c, uform_executor_t *executor, uform_arena_t *arena,
                                    const uform_encode_options_t *options, uform_encoded_t *encoded,
                                    stats_t *stats) {
    switch (c->verb) {
    case PIXELS:
        return uform_image_encode_pixels(model, executor, c->images, c->count, arena, options, encoded,
                                         stats ? &stats->image : NULL);
    case IMAGE:
        return uform_image_encode(model, executor, &c->files, arena, options, encoded, stats ? &stats->image : NULL);
    case VIDEO:
        return uform_video_encode(model, executor, &c->files, arena, options, encoded, stats ? &stats->video : NULL);
    case AUDIO:
        return uform_audio_encode(model, executor, &c->files, arena, options, encoded, stats ? &stats->audio : NULL);
    default:
        return uform_audio_encode_samples(model, executor, c->samples, c->size, c->offsets, c->count, c->rate,
                                          arena, options, encoded, stats ? &stats->audio : NULL);
    }
}

/* The tape is passed through a copy that dies at once: the submit copies it. */
static uform_status_t call_submit(const call_t *c, uform_executor_t *executor, uform_arena_t *arena,
                                  const uform_encode_options_t *options, uform_encoded_t *encoded,
                                  stats_t *stats, uform_job_t **job) {
    uform_tape_t files = c->files;
    uform_status_t status;
    switch (c->verb) {
    case PIXELS:
        status = uform_image_encode_pixels_submit(model, executor, c->images, c->count, arena, options, encoded,
                                                  stats ? &stats->image : NULL, job);
        break;
    case IMAGE:
        status = uform_image_encode_submit(model, executor, &files, arena, options, encoded,
                                           stats ? &stats->image : NULL, job);
        break;
    case VIDEO:
        status = uform_video_encode_submit(model, executor, &files, arena, options, encoded,
                                           stats ? &stats->video : NULL, job);
        break;
    case AUDIO:
        status = uform_audio_encode_submit(model, executor, &files, arena, options, encoded,
                                           stats ? &stats->audio : NULL, job);
        break;
    default:
        status = uform_audio_encode_samples_submit(model, executor, c->samples, c->size, c->offsets, c->count,
                                                   c->rate, arena, options, encoded,
                                                   stats ? &stats->audio : NULL, job);
        break;
    }
    memset(&files, 0xab, sizeof(files));
    return status;
}

/* ---- inputs -------------------------------------------------------------------------- */

enum { IMAGES = 6, RECORDINGS = 4 };
static const size_t image_sizes[IMAGES][2] = {{1, 1}, {9, 13}, {8, 12}, {40, 40}, {3, 90}, {17, 5}};
static const size_t recording_lengths[RECORDINGS] = {0, 100, 300, 1000};

/* Every input on the heap at its exact size, so ASan sees any read past it or
 * after it is freed. */
typedef struct {
    uform_pixels_t *images;          /* IMAGES, each data malloc'd */
    uint8_t *pngs;                   /* the images as PNG files, one tape */
    size_t *png_offsets;
    uint8_t *clip;                   /* clip_mp4, then a corrupt copy of its first half */
    size_t *clip_offsets;
    uint8_t *wavs;                   /* the non-empty recordings as 16-bit WAV files at 16 kHz */
    size_t *wav_offsets;
    float *samples;                  /* the recordings, one buffer */
    size_t *sample_offsets;
    size_t samples_size;
    call_t calls[VERBS];
} inputs_t;

static void *copy_of(const void *data, size_t size) {
    void *copy = malloc(size ? size : 1);
    if (!copy) abort();
    if (size) memcpy(copy, data, size);
    return copy;
}

static void inputs_init(inputs_t *in) {
    memset(in, 0, sizeof(*in));
    in->images = malloc(IMAGES * sizeof(uform_pixels_t));
    bytes_t pngs = {0};
    size_t png_offsets[IMAGES + 1] = {0};
    for (size_t i = 0; i < IMAGES; i++) {
        size_t height = image_sizes[i][0], width = image_sizes[i][1], stride = 3 * width + (i % 2) * 5;
        uint8_t *data = malloc(height * stride);
        for (size_t b = 0; b < height * stride; b++) data[b] = (uint8_t)(b * 31 + i * 7 + (b >> 5));
        in->images[i] = (uform_pixels_t){data, height, width, stride};
        put_png(&pngs, &in->images[i]);
        png_offsets[i + 1] = pngs.size;
    }
    in->pngs = copy_of(pngs.data, pngs.size);
    in->png_offsets = copy_of(png_offsets, sizeof(png_offsets));
    free(pngs.data);

    in->clip = copy_of(clip_mp4, sizeof(clip_mp4));
    in->clip_offsets = copy_of((size_t[]){0, sizeof(clip_mp4)}, 2 * sizeof(size_t));

    size_t sample_offsets[RECORDINGS + 1] = {0};
    for (size_t i = 0; i < RECORDINGS; i++) sample_offsets[i + 1] = sample_offsets[i] + recording_lengths[i];
    in->samples_size = sample_offsets[RECORDINGS];
    in->samples = malloc(in->samples_size * sizeof(float));
    for (size_t i = 0; i < in->samples_size; i++) in->samples[i] = (float)(0.7 * sin(0.013 * (double)i * (double)i));
    in->sample_offsets = copy_of(sample_offsets, sizeof(sample_offsets));
    /* the non-empty recordings (a WAV without a sample is a FORMAT error) */
    bytes_t wavs = {0};
    size_t wav_offsets[RECORDINGS] = {0};
    for (size_t i = 1; i < RECORDINGS; i++) {
        put_wav(&wavs, in->samples + sample_offsets[i], recording_lengths[i], 16000);
        wav_offsets[i] = wavs.size;
    }
    in->wavs = copy_of(wavs.data, wavs.size);
    in->wav_offsets = copy_of(wav_offsets, sizeof(wav_offsets));
    free(wavs.data);

    in->calls[PIXELS] = (call_t){.verb = PIXELS, .images = in->images, .count = IMAGES};
    in->calls[IMAGE] = (call_t){.verb = IMAGE, .files = {in->pngs, png_offsets[IMAGES], in->png_offsets, IMAGES}};
    in->calls[VIDEO] = (call_t){.verb = VIDEO, .files = {in->clip, sizeof(clip_mp4), in->clip_offsets, 1}};
    in->calls[AUDIO] = (call_t){.verb = AUDIO, .files = {in->wavs, wav_offsets[RECORDINGS - 1], in->wav_offsets,
                                                         RECORDINGS - 1}};
    in->calls[SAMPLES] = (call_t){.verb = SAMPLES, .samples = in->samples, .size = in->samples_size,
                                  .offsets = in->sample_offsets, .count = RECORDINGS, .rate = 22050};
}

static void inputs_free(inputs_t *in) {
    for (size_t i = 0; i < IMAGES; i++) free((void *)in->images[i].data);
    free(in->images), free(in->pngs), free(in->png_offsets), free(in->clip), free(in->clip_offsets);
    free(in->wavs), free(in->wav_offsets), free(in->samples), free(in->sample_offsets);
    memset(in, 0, sizeof(*in));
}

/* ---- outputs ------------------------------------------------------------------------- */

/* A copy of an encode call's answer, to compare bit for bit. */
typedef struct {
    uform_status_t status;
    uform_encoded_t shape;           /* the counts, widths and scalar (pointers cleared) */
    uint8_t *embeddings, *tokens;
    size_t *offsets;
    stats_t stats;
} snapshot_t;

static void snapshot_take(snapshot_t *s, uform_status_t status, const uform_encoded_t *encoded,
                          const stats_t *stats) {
    memset(s, 0, sizeof(*s));
    s->status = status;
    if (stats) s->stats = *stats;
    if (status != UFORM_OK) return;
    s->shape = *encoded;
    s->shape.embeddings = s->shape.tokens = NULL;
    s->shape.token_offsets = NULL;
    if (encoded->embeddings)
        s->embeddings = copy_of(encoded->embeddings, encoded->count * encoded->embedding_row_bytes);
    if (encoded->token_offsets) {
        s->offsets = copy_of(encoded->token_offsets, (encoded->count + 1) * sizeof(size_t));
        s->tokens = copy_of(encoded->tokens, encoded->token_offsets[encoded->count] * encoded->token_row_bytes);
    }
}

static void snapshot_free(snapshot_t *s) { free(s->embeddings), free(s->tokens), free(s->offsets); }

/* The answer in `encoded` (and stats, when given) equals the snapshot bit for bit. */
static bool snapshot_matches(const snapshot_t *s, verb_t verb, uform_status_t status,
                             const uform_encoded_t *encoded, const stats_t *stats) {
    if (status != s->status) return false;
    if (status != UFORM_OK) return true;
    uform_encoded_t shape = *encoded;
    shape.embeddings = shape.tokens = NULL;
    shape.token_offsets = NULL;
    if (memcmp(&shape, &s->shape, sizeof(shape)) != 0) return false;
    if (stats && memcmp(stats, &s->stats, stats_size(verb)) != 0) return false;
    if ((encoded->embeddings != NULL) != (s->embeddings != NULL)) return false;
    if ((encoded->token_offsets != NULL) != (s->offsets != NULL)) return false;
    if (s->embeddings && memcmp(encoded->embeddings, s->embeddings, s->shape.count * s->shape.embedding_row_bytes))
        return false;
    if (s->offsets) {
        if (memcmp(encoded->token_offsets, s->offsets, (s->shape.count + 1) * sizeof(size_t))) return false;
        size_t rows = s->offsets[s->shape.count];
        if (rows && memcmp(encoded->tokens, s->tokens, rows * s->shape.token_row_bytes)) return false;
    }
    return true;
}

/* The decoder a file verb needs, or 0 for the pixel and sample verbs. */
static uint32_t decoder_of(verb_t verb) {
    return verb == IMAGE ? UFORM_MEDIA_PNG : verb == VIDEO ? UFORM_MEDIA_VIDEO : verb == AUDIO ? UFORM_MEDIA_AUDIO : 0;
}

/* ---- submitted = blocking, bit for bit ------------------------------------------------ */

static void test_submitted_equals_blocking(void) {
    inputs_t in;
    inputs_init(&in);
    uform_executor_t *executor = NULL;
    CHECK(uform_executor_for_ram(2, NULL, 0, &executor) == UFORM_OK, "executor: %s", uform_last_error());
    if (!executor) return;
    static const uform_scalar_t scalars[] = {UFORM_SCALAR_F32, UFORM_SCALAR_BF16, UFORM_SCALAR_I8,
                                             UFORM_SCALAR_E4M3};
    for (size_t k = 0; k < sizeof(scalars) / sizeof(scalars[0]); k++) {
        uform_encode_options_t options = {BOTH, scalars[k], {NULL, NULL, 0}};
        snapshot_t expected[VERBS];
        uform_arena_t *reference = NULL;
        CHECK(uform_arena_init_ram(&reference) == UFORM_OK, "arena");
        for (int v = 0; v < VERBS; v++) {
            uform_encoded_t encoded;
            stats_t stats;
            memset(&stats, 0, sizeof(stats));
            uform_status_t status = call_blocking(&in.calls[v], executor, reference, &options, &encoded, &stats);
            bool decodes = !decoder_of((verb_t)v) || HAS(decoder_of((verb_t)v));
            CHECK(status == (decodes ? UFORM_OK : UFORM_UNSUPPORTED), "%s blocking: %d: %s", verb_names[v],
                  (int)status, uform_last_error());
            snapshot_take(&expected[v], status, &encoded, &stats);
        }
        CHECK(expected[VIDEO].status != UFORM_OK || (expected[VIDEO].stats.video.frames == 5 &&
                                                     expected[VIDEO].stats.video.items == 1),
              "the clip has five frames: %zu", expected[VIDEO].stats.video.frames);
        /* All five queued at once, each into its own arena, waited in reverse. */
        uform_arena_t *arenas[VERBS];
        uform_encoded_t encoded[VERBS];
        stats_t stats[VERBS];
        uform_job_t *jobs[VERBS];
        for (int v = 0; v < VERBS; v++) {
            arenas[v] = NULL;
            CHECK(uform_arena_init_ram(&arenas[v]) == UFORM_OK, "arena");
            memset(&stats[v], 0, sizeof(stats[v]));
            jobs[v] = NULL;
            uform_encode_options_t copy = options; /* copied at submission: clobbered below */
            CHECK(call_submit(&in.calls[v], executor, arenas[v], &copy, &encoded[v], &stats[v], &jobs[v]) ==
                      UFORM_OK && jobs[v] != NULL,
                  "%s submit: %s", verb_names[v], uform_last_error());
            memset(&copy, 0xcd, sizeof(copy));
        }
        for (int v = VERBS - 1; v >= 0; v--) {
            uform_status_t status = uform_job_wait(jobs[v]);
            CHECK(uform_job_done(jobs[v]) == 1, "done after the wait");
            CHECK(uform_job_wait(jobs[v]) == status, "waiting twice answers the same");
            CHECK(snapshot_matches(&expected[v], (verb_t)v, status, &encoded[v], &stats[v]),
                  "%s (scalar %d): submitted equals blocking bit for bit (%d: %s)", verb_names[v], (int)scalars[k],
                  (int)status, uform_last_error());
            if (expected[v].status != UFORM_OK)
                CHECK(strstr(uform_last_error(), "needs") != NULL, "%s: the waiter gets the job's message: %s",
                      verb_names[v], uform_last_error());
            uform_job_free(jobs[v]);
            uform_arena_free(arenas[v]);
        }
        /* The model's executor (NULL), options and stats NULL, polled to completion. */
        for (int v = 0; v < VERBS; v++) {
            uform_arena_t *arena = NULL;
            CHECK(uform_arena_init_ram(&arena) == UFORM_OK, "arena");
            uform_encoded_t out;
            uform_job_t *job = NULL;
            CHECK(call_submit(&in.calls[v], NULL, arena, NULL, &out, NULL, &job) == UFORM_OK, "%s submit, NULLs",
                  verb_names[v]);
            for (int spins = 0; job && !uform_job_done(job) && spins < 60000; spins++) {
                struct timespec pause = {0, 1000000};
                nanosleep(&pause, NULL);
            }
            CHECK(uform_job_done(job) == 1, "%s: polled to completion", verb_names[v]);
            uform_status_t status = uform_job_wait(job);
            CHECK(status == expected[v].status, "%s with NULL options: %d", verb_names[v], (int)status);
            /* NULL options: F32 embeddings only, which equal the reference's for an F32 run */
            if (status == UFORM_OK && scalars[k] == UFORM_SCALAR_F32)
                CHECK(out.token_offsets == NULL && out.count == expected[v].shape.count &&
                          memcmp(out.embeddings, expected[v].embeddings,
                                 out.count * out.embedding_row_bytes) == 0,
                      "%s: embeddings with NULL options", verb_names[v]);
            uform_job_free(job);
            uform_arena_free(arena);
        }
        for (int v = 0; v < VERBS; v++) snapshot_free(&expected[v]);
        uform_arena_free(reference);
    }
    uform_executor_free(executor);
    inputs_free(&in);
}

/* ---- refused by the submit call itself ------------------------------------------------ */

#define EXPECT_REFUSED(expression, fragment)                                                   \
    do {                                                                                       \
        job = (uform_job_t *)&job;                                                             \
        uform_status_t status_ = (expression);                                                 \
        CHECK(status_ == UFORM_INVALID_ARGUMENT && strstr(uform_last_error(), fragment) &&    \
                  job == NULL,                                                                 \
              "%s: %d: %s", #expression, (int)status_, uform_last_error());                    \
    } while (0)

static void test_submission_refusals(void) {
    inputs_t in;
    inputs_init(&in);
    uform_arena_t *arena = NULL;
    CHECK(uform_arena_init_ram(&arena) == UFORM_OK, "arena");
    uform_encoded_t encoded;
    uform_image_encode_stats_t image_stats;
    uform_audio_encode_stats_t audio_stats;
    uform_video_encode_stats_t video_stats;
    uform_tape_t pngs = in.calls[IMAGE].files;
    uform_job_t *job;

    /* a NULL job out-pointer */
    CHECK(uform_image_encode_pixels_submit(model, NULL, in.images, IMAGES, arena, NULL, &encoded, NULL, NULL) ==
              UFORM_INVALID_ARGUMENT && strstr(uform_last_error(), "job"), "pixels: job NULL");
    CHECK(uform_image_encode_submit(model, NULL, &pngs, arena, NULL, &encoded, NULL, NULL) ==
              UFORM_INVALID_ARGUMENT && strstr(uform_last_error(), "job"), "image: job NULL");
    CHECK(uform_video_encode_submit(model, NULL, &pngs, arena, NULL, &encoded, NULL, NULL) ==
              UFORM_INVALID_ARGUMENT && strstr(uform_last_error(), "job"), "video: job NULL");
    CHECK(uform_audio_encode_submit(model, NULL, &pngs, arena, NULL, &encoded, NULL, NULL) ==
              UFORM_INVALID_ARGUMENT && strstr(uform_last_error(), "job"), "audio: job NULL");
    CHECK(uform_audio_encode_samples_submit(model, NULL, in.samples, in.samples_size, in.sample_offsets,
                                            RECORDINGS, 16000, arena, NULL, &encoded, NULL, NULL) ==
              UFORM_INVALID_ARGUMENT && strstr(uform_last_error(), "job"), "samples: job NULL");

    /* a NULL model */
    EXPECT_REFUSED(uform_image_encode_pixels_submit(NULL, NULL, in.images, IMAGES, arena, NULL, &encoded,
                                                    &image_stats, &job), "model");
    EXPECT_REFUSED(uform_image_encode_submit(NULL, NULL, &pngs, arena, NULL, &encoded, &image_stats, &job), "model");
    EXPECT_REFUSED(uform_video_encode_submit(NULL, NULL, &pngs, arena, NULL, &encoded, &video_stats, &job), "model");
    EXPECT_REFUSED(uform_audio_encode_submit(NULL, NULL, &pngs, arena, NULL, &encoded, &audio_stats, &job), "model");
    EXPECT_REFUSED(uform_audio_encode_samples_submit(NULL, NULL, in.samples, in.samples_size, in.sample_offsets,
                                                     RECORDINGS, 16000, arena, NULL, &encoded, NULL, &job),
                   "model");

    /* a NULL input */
    EXPECT_REFUSED(uform_image_encode_pixels_submit(model, NULL, NULL, 2, arena, NULL, &encoded, NULL, &job),
                   "pixels");
    EXPECT_REFUSED(uform_image_encode_submit(model, NULL, NULL, arena, NULL, &encoded, NULL, &job), "files");
    EXPECT_REFUSED(uform_video_encode_submit(model, NULL, NULL, arena, NULL, &encoded, NULL, &job), "files");
    EXPECT_REFUSED(uform_audio_encode_submit(model, NULL, NULL, arena, NULL, &encoded, NULL, &job), "files");
    EXPECT_REFUSED(uform_audio_encode_samples_submit(model, NULL, in.samples, in.samples_size, NULL, RECORDINGS,
                                                     16000, arena, NULL, &encoded, NULL, &job),
                   "offsets");

    /* a NULL arena */
    EXPECT_REFUSED(uform_image_encode_pixels_submit(model, NULL, in.images, IMAGES, NULL, NULL, &encoded, NULL,
                                                    &job), "arena");
    EXPECT_REFUSED(uform_image_encode_submit(model, NULL, &pngs, NULL, NULL, &encoded, NULL, &job), "arena");
    EXPECT_REFUSED(uform_video_encode_submit(model, NULL, &pngs, NULL, NULL, &encoded, NULL, &job), "arena");
    EXPECT_REFUSED(uform_audio_encode_submit(model, NULL, &pngs, NULL, NULL, &encoded, NULL, &job), "arena");
    EXPECT_REFUSED(uform_audio_encode_samples_submit(model, NULL, in.samples, in.samples_size, in.sample_offsets,
                                                     RECORDINGS, 16000, NULL, NULL, &encoded, NULL, &job),
                   "arena");

    /* No refusal took the arena: a blocking call still gets it. */
    CHECK(uform_image_encode_pixels(model, NULL, in.images, IMAGES, arena, NULL, &encoded, NULL) == UFORM_OK,
          "the arena is free after refusals: %s", uform_last_error());
    uform_arena_free(arena);
    inputs_free(&in);
}

/* ---- failures inside the job ---------------------------------------------------------- */

static int cancel_at_once(void *user, size_t done, size_t total) {
    (void)user, (void)done, (void)total;
    return 1;
}

typedef struct {
    const char *what;
    call_t call;
    uform_encode_options_t options;
    uform_status_t status;           /* what the wait answers */
    const char *fragment;            /* in its message */
} failing_t;

static void test_job_failures(void) {
    inputs_t in;
    inputs_init(&in);
    uform_executor_t *executor = NULL;
    CHECK(uform_executor_for_ram(2, NULL, 0, &executor) == UFORM_OK, "executor");
    if (!executor) return;
    uform_encode_options_t plain = {BOTH, UFORM_SCALAR_F32, {NULL, NULL, 0}};

    /* A corrupt PNG between good ones: the same tape with file 1's bytes cut short. */
    uint8_t *corrupt = copy_of(in.pngs, in.png_offsets[IMAGES]);
    for (size_t b = in.png_offsets[1] + 20; b < in.png_offsets[2]; b++) corrupt[b] ^= 0x5a;
    /* A clip of junk after a good one. */
    size_t clip_size = sizeof(clip_mp4);
    uint8_t *clips = malloc(clip_size + 600);
    memcpy(clips, clip_mp4, clip_size);
    memcpy(clips + clip_size, clip_mp4, 600);
    for (size_t b = clip_size + 40; b < clip_size + 600; b++) clips[b] ^= 0x33;
    size_t clip_offsets[3] = {0, clip_size, clip_size + 600};
    /* A NaN in recording 2's samples. */
    float *samples = copy_of(in.samples, in.samples_size * sizeof(float));
    samples[in.sample_offsets[2] + 17] = NAN;

    uform_encode_options_t unknown = {BOTH, (uform_scalar_t)42, {NULL, NULL, 0}};
    uform_encode_options_t cancel = {BOTH, UFORM_SCALAR_F32, {cancel_at_once, NULL, 1}};
    failing_t cases[] = {
        {"empty pixels", {.verb = PIXELS, .images = NULL, .count = 0}, plain, UFORM_INVALID_ARGUMENT, "empty"},
        {"empty files", {.verb = IMAGE, .files = {in.pngs, 0, in.png_offsets, 0}}, plain, UFORM_INVALID_ARGUMENT,
         "empty"},
        {"bad offsets", {.verb = AUDIO, .files = {in.wavs, 10, in.wav_offsets, RECORDINGS - 1}}, plain,
         UFORM_INVALID_ARGUMENT, "offset"},
        {"row stride", {.verb = PIXELS, .images = (uform_pixels_t[]){{in.images[1].data, 9, 13, 5}}, .count = 1},
         plain, UFORM_INVALID_ARGUMENT, "row_stride"},
        {"corrupt png", {.verb = IMAGE, .files = {corrupt, in.png_offsets[IMAGES], in.png_offsets, IMAGES}}, plain,
         HAS(UFORM_MEDIA_PNG) ? UFORM_FORMAT : UFORM_UNSUPPORTED, HAS(UFORM_MEDIA_PNG) ? "files[1]" : "files[0]"},
        {"corrupt clip", {.verb = VIDEO, .files = {clips, clip_size + 600, clip_offsets, 2}}, plain,
         HAS(UFORM_MEDIA_VIDEO) ? UFORM_FORMAT : UFORM_UNSUPPORTED, HAS(UFORM_MEDIA_VIDEO) ? "files[1]" : "files[0]"},
        {"NaN sample", {.verb = SAMPLES, .samples = samples, .size = in.samples_size, .offsets = in.sample_offsets,
                        .count = RECORDINGS, .rate = 16000},
         plain, UFORM_INVALID_ARGUMENT, "samples[2]: sample 17 is NaN"},
        {"zero rate", {.verb = SAMPLES, .samples = in.samples, .size = in.samples_size, .offsets = in.sample_offsets,
                       .count = RECORDINGS, .rate = 0},
         plain, UFORM_INVALID_ARGUMENT, "sample_rate"},
        {"unknown outputs scalar", in.calls[PIXELS], unknown, UFORM_INVALID_ARGUMENT, "outputs_scalar"},
        {"cancelled", in.calls[SAMPLES], cancel, UFORM_CANCELLED, ""},
        {"encoded NULL", in.calls[IMAGE], plain, UFORM_INVALID_ARGUMENT, "encoded"},
    };
    enum { CASES = sizeof(cases) / sizeof(cases[0]) };
    uform_arena_t *arenas[CASES];
    uform_job_t *jobs[CASES];
    uform_encoded_t encoded[CASES];
    for (size_t i = 0; i < CASES; i++) {
        arenas[i] = NULL;
        CHECK(uform_arena_init_ram(&arenas[i]) == UFORM_OK, "arena");
        /* the blocking verb answers the same status */
        bool null_encoded = strcmp(cases[i].what, "encoded NULL") == 0;
        uform_status_t blocking = call_blocking(&cases[i].call, executor, arenas[i], &cases[i].options,
                                                null_encoded ? NULL : &encoded[i], NULL);
        CHECK(blocking == cases[i].status && strstr(uform_last_error(), cases[i].fragment),
              "%s, blocking: %d: %s", cases[i].what, (int)blocking, uform_last_error());
        jobs[i] = NULL;
        uform_status_t submitted = call_submit(&cases[i].call, executor, arenas[i], &cases[i].options,
                                               null_encoded ? NULL : &encoded[i], NULL, &jobs[i]);
        CHECK(submitted == UFORM_OK && jobs[i], "%s: submitted: %s", cases[i].what, uform_last_error());
    }
    for (size_t i = 0; i < CASES; i++) {
        /* this thread's own last error says something else before each wait */
        CHECK(uform_executor_threads(NULL, NULL) == UFORM_INVALID_ARGUMENT, "another error first");
        uform_status_t status = uform_job_wait(jobs[i]);
        CHECK(status == cases[i].status && strstr(uform_last_error(), cases[i].fragment),
              "%s: the wait answers %d: %s", cases[i].what, (int)status, uform_last_error());
        uform_job_free(jobs[i]);
        /* the failed job gave its arena back: usable at once */
        CHECK(uform_arena_reset(arenas[i]) == UFORM_OK, "%s: arena reset: %s", cases[i].what, uform_last_error());
        uform_encoded_t after;
        CHECK(uform_image_encode_pixels(model, executor, in.images, IMAGES, arenas[i], &plain, &after, NULL) ==
                  UFORM_OK, "%s: the arena serves a call after the failure: %s", cases[i].what, uform_last_error());
        uform_arena_free(arenas[i]);
    }
    /* the executor still runs good jobs after failed ones */
    uform_arena_t *arena = NULL;
    CHECK(uform_arena_init_ram(&arena) == UFORM_OK, "arena");
    uform_encoded_t out;
    uform_job_t *job = NULL;
    CHECK(call_submit(&in.calls[SAMPLES], executor, arena, &plain, &out, NULL, &job) == UFORM_OK, "good job");
    CHECK(uform_job_wait(job) == UFORM_OK, "a good job after failed ones: %s", uform_last_error());
    uform_job_free(job);
    uform_arena_free(arena);
    free(corrupt), free(clips), free(samples);
    uform_executor_free(executor);
    inputs_free(&in);
}

/* ---- a queued job holds its arena ----------------------------------------------------- */

/* A gate: the progress handler of a job ahead in the queue, holding the submission
 * thread until opened (at most a minute, so a failing test cannot hang). */
typedef struct {
    atomic_int entered, open;
} gate_t;

static int gate_hold(void *user, size_t done, size_t total) {
    (void)done, (void)total;
    gate_t *gate = user;
    atomic_store(&gate->entered, 1);
    for (int spins = 0; !atomic_load(&gate->open) && spins < 60000; spins++) {
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
    }
    return 0;
}

static void test_submission_holds_arena(void) {
    inputs_t in;
    inputs_init(&in);
    uform_executor_t *executor = NULL;
    CHECK(uform_executor_for_ram(1, NULL, 0, &executor) == UFORM_OK, "executor");
    if (!executor) return;
    uform_arena_t *gate_arena = NULL, *queued_arena = NULL, *reference = NULL;
    CHECK(uform_arena_init_ram(&gate_arena) == UFORM_OK && uform_arena_init_ram(&queued_arena) == UFORM_OK &&
              uform_arena_init_ram(&reference) == UFORM_OK, "arenas");
    uform_encode_options_t options = {BOTH, UFORM_SCALAR_F32, {NULL, NULL, 0}};

    for (int v = 0; v < VERBS; v++) {
        uform_encoded_t expected_encoded;
        stats_t expected_stats;
        uform_status_t expected_status =
            call_blocking(&in.calls[v], NULL, reference, &options, &expected_encoded, &expected_stats);
        snapshot_t expected;
        snapshot_take(&expected, expected_status, &expected_encoded, &expected_stats);

        /* The gate's job first, so the job under test stays queued until it opens. */
        gate_t gate = {0, 0};
        uform_encode_options_t gated = {UFORM_OUTPUTS_EMBEDDINGS, UFORM_SCALAR_F32, {gate_hold, &gate, 1}};
        uform_job_t *first = NULL, *queued = NULL;
        uform_encoded_t gate_encoded, queued_encoded;
        stats_t queued_stats;
        CHECK(uform_image_encode_pixels_submit(model, executor, in.images, 1, gate_arena, &gated, &gate_encoded,
                                               NULL, &first) == UFORM_OK, "the gate's job");
        CHECK(call_submit(&in.calls[v], executor, queued_arena, &options, &queued_encoded, &queued_stats,
                          &queued) == UFORM_OK, "%s: the queued job", verb_names[v]);
        for (int spins = 0; !atomic_load(&gate.entered) && !uform_job_done(first) && spins < 60000; spins++) {
            struct timespec pause = {0, 1000000};
            nanosleep(&pause, NULL);
        }
        CHECK(atomic_load(&gate.entered) && !uform_job_done(queued), "%s: queued behind the gate", verb_names[v]);
        /* Its arena is taken: by a blocking call and by every submission alike. */
        for (int w = 0; w < VERBS; w++) {
            uform_encoded_t encoded;
            uform_status_t status = call_blocking(&in.calls[w], NULL, queued_arena, NULL, &encoded, NULL);
            CHECK(status == UFORM_INVALID_ARGUMENT && strstr(uform_last_error(), "in use"),
                  "%s while %s is queued: %d: %s", verb_names[w], verb_names[v], (int)status, uform_last_error());
            uform_job_t *again = (uform_job_t *)&again;
            status = call_submit(&in.calls[w], executor, queued_arena, NULL, &encoded, NULL, &again);
            CHECK(status == UFORM_INVALID_ARGUMENT && strstr(uform_last_error(), "in use") && again == NULL,
                  "%s submitted while %s is queued: %d: %s", verb_names[w], verb_names[v], (int)status,
                  uform_last_error());
            if (status == UFORM_OK) uform_job_free(again);
            CHECK(uform_arena_reset(queued_arena) == UFORM_INVALID_ARGUMENT, "no reset while queued");
        }
        CHECK(!uform_job_done(queued), "%s: still queued", verb_names[v]);
        atomic_store(&gate.open, 1);
        CHECK(uform_job_wait(first) == UFORM_OK, "the gate's job: %s", uform_last_error());
        uform_status_t status = uform_job_wait(queued);
        CHECK(snapshot_matches(&expected, (verb_t)v, status, &queued_encoded, &queued_stats),
              "%s: the queued job's outputs were not disturbed", verb_names[v]);
        uform_job_free(first);
        uform_job_free(queued);
        /* given back once the job has run */
        uform_encoded_t encoded;
        CHECK(uform_image_encode_pixels(model, NULL, in.images, IMAGES, queued_arena, NULL, &encoded, NULL) ==
                  UFORM_OK, "%s: the arena is free after the job: %s", verb_names[v], uform_last_error());
        snapshot_free(&expected);
    }
    uform_arena_free(gate_arena), uform_arena_free(queued_arena), uform_arena_free(reference);
    uform_executor_free(executor);
    inputs_free(&in);
}

/* ---- inputs freed once the job has finished ------------------------------------------- */

static void test_inputs_freed_after_completion(void) {
    uform_executor_t *executor = NULL;
    CHECK(uform_executor_for_ram(2, NULL, 0, &executor) == UFORM_OK, "executor");
    if (!executor) return;
    uform_encode_options_t options = {BOTH, UFORM_SCALAR_BF16, {NULL, NULL, 0}};
    for (int freeing_job_first = 0; freeing_job_first <= 1; freeing_job_first++) {
        snapshot_t expected[VERBS];
        inputs_t in;
        inputs_init(&in);
        uform_arena_t *reference = NULL;
        CHECK(uform_arena_init_ram(&reference) == UFORM_OK, "arena");
        for (int v = 0; v < VERBS; v++) {
            uform_encoded_t encoded;
            stats_t stats;
            uform_status_t status = call_blocking(&in.calls[v], executor, reference, &options, &encoded, &stats);
            snapshot_take(&expected[v], status, &encoded, &stats);
        }
        uform_arena_free(reference);
        uform_arena_t *arenas[VERBS];
        uform_encoded_t encoded[VERBS];
        stats_t stats[VERBS];
        uform_job_t *jobs[VERBS];
        for (int v = 0; v < VERBS; v++) {
            arenas[v] = NULL;
            CHECK(uform_arena_init_ram(&arenas[v]) == UFORM_OK, "arena");
            CHECK(call_submit(&in.calls[v], executor, arenas[v], &options, &encoded[v], &stats[v], &jobs[v]) ==
                      UFORM_OK, "%s submit", verb_names[v]);
        }
        uform_status_t statuses[VERBS];
        for (int v = 0; v < VERBS; v++) {
            if (freeing_job_first) {
                uform_job_free(jobs[v]); /* waits for it: the results are written */
                statuses[v] = expected[v].status;
            } else {
                statuses[v] = uform_job_wait(jobs[v]);
            }
        }
        inputs_free(&in); /* every pixel, byte, sample and offset goes; the outputs stay */
        for (int v = 0; v < VERBS; v++) {
            CHECK(snapshot_matches(&expected[v], (verb_t)v, statuses[v], &encoded[v], &stats[v]),
                  "%s: outputs intact after the inputs were freed (%s)", verb_names[v],
                  freeing_job_first ? "job freed unwaited" : "job waited");
            if (!freeing_job_first) uform_job_free(jobs[v]);
            uform_arena_free(arenas[v]);
            snapshot_free(&expected[v]);
        }
    }
    uform_executor_free(executor);
}

/* ---- files named by path ------------------------------------------------------------- */

typedef uform_status_t (*paths_verb_t)(uform_model_t *, uform_executor_t *, const uform_tape_t *, uform_arena_t *,
                                       const uform_encode_options_t *, uform_encoded_t *, void *);
typedef uform_status_t (*paths_submit_t)(uform_model_t *, uform_executor_t *, const uform_tape_t *, uform_arena_t *,
                                         const uform_encode_options_t *, uform_encoded_t *, void *, uform_job_t **);

/* A tape of NUL-free paths, heap-allocated at its exact size (ASan sees an
 * overread: the verbs must not look for a terminator). */
typedef struct {
    char *data;
    size_t *offsets;
    uform_tape_t tape;
} paths_t;

static void paths_init(paths_t *p, const char *const *names, size_t count) {
    size_t total = 0;
    for (size_t i = 0; i < count; i++) total += strlen(names[i]);
    p->data = malloc(total ? total : 1);
    p->offsets = malloc((count + 1) * sizeof(size_t));
    if (!p->data || !p->offsets) abort();
    p->offsets[0] = 0;
    for (size_t i = 0; i < count; i++) {
        memcpy(p->data + p->offsets[i], names[i], strlen(names[i]));
        p->offsets[i + 1] = p->offsets[i] + strlen(names[i]);
    }
    p->tape = (uform_tape_t){p->data, total, p->offsets, count};
}

static void paths_free(paths_t *p) { free(p->data), free(p->offsets); }

static bool write_file(const char *path, const void *data, size_t size) {
    FILE *file = fopen(path, "wb");
    if (!file) return false;
    bool ok = fwrite(data, 1, size, file) == size;
    return fclose(file) == 0 && ok;
}

/* uform_*_encode_paths and their submit twins answer what the byte verbs
 * answer on the same files, bit for bit; every path is checked before any
 * decoding, with a message naming the entry and the path. */
static void test_paths_equal_bytes(void) {
    inputs_t in;
    inputs_init(&in);
    uform_executor_t *executor = NULL;
    CHECK(uform_executor_for_ram(2, NULL, 0, &executor) == UFORM_OK, "executor: %s", uform_last_error());
    char directory[] = "/tmp/uform-test-media-paths-XXXXXX";
    CHECK(mkdtemp(directory) != NULL, "mkdtemp");
    const verb_t verbs[3] = {IMAGE, VIDEO, AUDIO};
    const paths_verb_t blocking[3] = {(paths_verb_t)uform_image_encode_paths, (paths_verb_t)uform_video_encode_paths,
                                      (paths_verb_t)uform_audio_encode_paths};
    const paths_submit_t submitting[3] = {(paths_submit_t)uform_image_encode_paths_submit,
                                          (paths_submit_t)uform_video_encode_paths_submit,
                                          (paths_submit_t)uform_audio_encode_paths_submit};
    const uform_encode_options_t options = {.outputs = BOTH};
    char names[IMAGES][96];
    const char *name_list[IMAGES];
    for (int k = 0; k < 3; k++) {
        const call_t *c = &in.calls[verbs[k]];
        for (size_t i = 0; i < c->files.count; i++) {
            snprintf(names[i], sizeof(names[i]), "%s/%s-%zu.bin", directory, verb_names[verbs[k]], i);
            name_list[i] = names[i];
            CHECK(write_file(names[i], (const uint8_t *)c->files.data + c->files.offsets[i],
                             c->files.offsets[i + 1] - c->files.offsets[i]), "writing %s", names[i]);
        }
        paths_t paths;
        paths_init(&paths, name_list, c->files.count);
        uform_arena_t *arena = NULL;
        CHECK(uform_arena_init_ram(&arena) == UFORM_OK, "arena");
        uform_encoded_t encoded;
        stats_t stats;
        memset(&stats, 0x5a, sizeof(stats));
        snapshot_t expected;
        snapshot_take(&expected, call_blocking(c, executor, arena, &options, &encoded, &stats), &encoded, &stats);
        bool decodes = (uform_media_formats() & decoder_of(verbs[k])) != 0;
        CHECK(expected.status == (decodes ? UFORM_OK : UFORM_UNSUPPORTED), "%s bytes: %s", verb_names[verbs[k]],
              uform_last_error());
        CHECK(uform_arena_reset(arena) == UFORM_OK, "reset");
        memset(&stats, 0x5a, sizeof(stats));
        uform_status_t status = blocking[k](model, executor, &paths.tape, arena, &options, &encoded, &stats);
        CHECK(snapshot_matches(&expected, verbs[k], status, &encoded, &stats), "%s paths = bytes (%d: %s)",
              verb_names[verbs[k]], (int)status, status ? uform_last_error() : "");
        CHECK(uform_arena_reset(arena) == UFORM_OK, "reset");
        memset(&stats, 0x5a, sizeof(stats));
        uform_job_t *job = NULL;
        uform_tape_t copy = paths.tape;
        CHECK(submitting[k](model, executor, &copy, arena, &options, &encoded, &stats, &job) == UFORM_OK,
              "%s paths submitted: %s", verb_names[verbs[k]], uform_last_error());
        memset(&copy, 0xab, sizeof(copy)); /* the tape structure is copied at submission */
        status = uform_job_wait(job);
        CHECK(snapshot_matches(&expected, verbs[k], status, &encoded, &stats), "%s paths submitted = bytes (%d)",
              verb_names[verbs[k]], (int)status);
        uform_job_free(job);
        uform_arena_free(arena);
        snapshot_free(&expected);
        paths_free(&paths);
        for (size_t i = 0; i < c->files.count; i++) unlink(names[i]);
    }

    /* refusals, each before any decoding, naming the entry */
    char present[128], missing[128], fifo[128], nul_path[8] = {'/', 't', 'm', 'p', 0, 'x'};
    snprintf(present, sizeof(present), "%s/present.png", directory);
    snprintf(missing, sizeof(missing), "%s/missing.png", directory);
    snprintf(fifo, sizeof(fifo), "%s/fifo", directory);
    CHECK(write_file(present, "not a png", 9), "writing %s", present);
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo");
    char *long_path = malloc(PATH_MAX + 8);
    memset(long_path, 'a', PATH_MAX + 7);
    long_path[0] = '/';
    long_path[PATH_MAX + 7] = '\0';
    struct {
        const char *what;
        const char *names[2];
        uform_status_t status;
        const char *fragment;
    } cases[] = {
        {"a missing file after a corrupt one", {present, missing}, UFORM_FILE, "files[1]: '"},
        {"a directory", {directory, present}, UFORM_FILE, "files[0]: "},
        {"a FIFO (opened non-blocking, refused)", {present, fifo}, UFORM_FILE, "not a regular file"},
        {"an empty path", {present, ""}, UFORM_INVALID_ARGUMENT, "files[1]: an empty path"},
        {"a path over PATH_MAX", {long_path, present}, UFORM_INVALID_ARGUMENT, "over PATH_MAX"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        paths_t paths;
        paths_init(&paths, cases[i].names, 2);
        uform_arena_t *arena = NULL;
        CHECK(uform_arena_init_ram(&arena) == UFORM_OK, "arena");
        uform_encoded_t encoded;
        uform_status_t status = uform_image_encode_paths(model, executor, &paths.tape, arena, NULL, &encoded, NULL);
        CHECK(status == cases[i].status && strstr(uform_last_error(), cases[i].fragment),
              "%s: %d: %s", cases[i].what, (int)status, uform_last_error());
        uform_job_t *job = NULL;
        CHECK(uform_audio_encode_paths_submit(model, executor, &paths.tape, arena, NULL, &encoded, NULL, &job) ==
                  UFORM_OK, "%s: submitted", cases[i].what);
        status = uform_job_wait(job);
        CHECK(status == cases[i].status && strstr(uform_last_error(), cases[i].fragment),
              "%s, submitted: %d: %s", cases[i].what, (int)status, uform_last_error());
        uform_job_free(job);
        CHECK(uform_arena_reset(arena) == UFORM_OK, "%s: the arena is given back", cases[i].what);
        uform_arena_free(arena);
        paths_free(&paths);
    }
    {   /* a NUL inside an entry: the tape is bytes, so the verb must look */
        size_t offsets[2] = {0, 6};
        uform_tape_t tape = {nul_path, 6, offsets, 1};
        uform_arena_t *arena = NULL;
        CHECK(uform_arena_init_ram(&arena) == UFORM_OK, "arena");
        uform_encoded_t encoded;
        CHECK(uform_video_encode_paths(model, executor, &tape, arena, NULL, &encoded, NULL) ==
                  UFORM_INVALID_ARGUMENT && strstr(uform_last_error(), "files[0]: the path holds a NUL byte"),
              "a NUL inside a path: %s", uform_last_error());
        uform_arena_free(arena);
    }
    free(long_path);
    unlink(present), unlink(fifo), rmdir(directory);
    uform_executor_free(executor);
    inputs_free(&in);
}

int main(void) {
    char path[] = "/tmp/uform-test-media-submit-XXXXXX";
    bool written = write_checkpoint(path);
    CHECK(written, "writing the checkpoint: %s", uform_last_error());
    if (!written) return 1;
    CHECK(uform_model_load_ram(path, NULL, &model) == UFORM_OK, "load: %s", uform_last_error());
    unlink(path);
    if (!model) return 1;
    test_submitted_equals_blocking();
    test_submission_refusals();
    test_job_failures();
    test_submission_holds_arena();
    test_inputs_freed_after_completion();
    test_paths_equal_bytes();
    uform_model_free(model);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
