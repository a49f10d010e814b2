/* decode_tool.c: the internal decoders (c/src/media/decode.h) on the command
 * line, for tests/test_decode.py. Not a test itself (make test-c runs
 * tests/c/test_*.c): pytest builds it with `make c/build/decode_tool`, under
 * ASan/UBSan, and compares what it prints with Pillow, soundfile and PyAV.
 *
 *   decode_tool formats                      "formats FLAGS"
 *   decode_tool image FILE                   "image HEIGHT WIDTH", then RGB8 bytes
 *   decode_tool video STRIDE FILE            "video FRAMES HEIGHT WIDTH", then RGB8 bytes
 *   decode_tool audio RATE FILE              "audio COUNT", then float32 samples
 *   decode_tool KIND [ARG] --prefixes FILE   one line "LENGTH STATUS HASH" per prefix
 *   decode_tool KIND [ARG] --flips SEED N FILE  one line "I STATUS HASH" per mutated copy
 *   decode_tool KIND [ARG] --threads T N FILE   T threads decode N times each; one line
 *                                               "STATUS HASH" per distinct answer
 *
 * A refusal prints "error STATUS MESSAGE". The exit status is 0 whenever the
 * decoder returned, whatever it answered, so a crash or a sanitizer report is
 * the only thing that makes it nonzero. Every input is a heap block of
 * exactly its size, so ASan sees any read past its end. HASH is FNV-1a of the
 * output (0 after a refusal), so a prefix that decodes can be compared with
 * the whole file. */
#include "media/decode/decode.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    const char *kind;
    size_t argument; /* stride or sample rate */
} request_t;

typedef struct {
    uform_status_t status;
    const uint8_t *bytes;
    size_t size;
    size_t dims[3];
    uform_image_t image;
    uform_video_t video;
    uform_audio_t audio;
} result_t;

static void *checked(void *pointer) {
    if (!pointer) {
        fprintf(stderr, "decode_tool: out of memory\n");
        exit(2);
    }
    return pointer;
}

static uint8_t *read_file(const char *path, size_t *size) {
    FILE *stream = fopen(path, "rb");
    if (!stream) {
        fprintf(stderr, "decode_tool: cannot read %s\n", path);
        exit(2);
    }
    size_t capacity = 1 << 16, used = 0, count;
    uint8_t *data = checked(malloc(capacity));
    while ((count = fread(data + used, 1, capacity - used, stream)) > 0)
        if ((used += count) == capacity) data = checked(realloc(data, capacity *= 2));
    fclose(stream);
    *size = used;
    return data;
}

/* Decodes an exact-size heap copy of data[0, size). */
static result_t decode(const request_t *request, const uint8_t *data, size_t size) {
    result_t result;
    memset(&result, 0, sizeof(result));
    uint8_t *copy = checked(malloc(size ? size : 1));
    if (size) memcpy(copy, data, size);
    const void *input = size ? copy : NULL;
    if (strcmp(request->kind, "image") == 0) {
        result.status = uform_decode_image(input, size, &result.image);
        result.bytes = result.image.pixels;
        result.size = result.image.height * result.image.width * 3;
        result.dims[0] = result.image.height, result.dims[1] = result.image.width;
    } else if (strcmp(request->kind, "video") == 0) {
        result.status = uform_decode_video(input, size, request->argument, &result.video);
        result.bytes = result.video.pixels;
        result.size = result.video.frames * result.video.height * result.video.width * 3;
        result.dims[0] = result.video.frames, result.dims[1] = result.video.height;
        result.dims[2] = result.video.width;
    } else {
        result.status = uform_decode_audio(input, size, request->argument, &result.audio);
        result.bytes = (const uint8_t *)result.audio.samples;
        result.size = result.audio.count * sizeof(float);
        result.dims[0] = result.audio.count;
    }
    free(copy);
    return result;
}

static void release(result_t *result) {
    uform_image_free(&result->image);
    uform_video_free(&result->video);
    uform_audio_free(&result->audio);
}

static uint64_t hash_of(const result_t *result) {
    if (result->status != UFORM_OK) return 0;
    uint64_t hash = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < result->size; i++) hash = (hash ^ result->bytes[i]) * 0x100000001b3ull;
    for (int i = 0; i < 3; i++) hash = (hash ^ result->dims[i]) * 0x100000001b3ull;
    return hash;
}

static int print_one(const request_t *request, const uint8_t *data, size_t size) {
    result_t result = decode(request, data, size);
    if (result.status != UFORM_OK) {
        printf("error %d %s\n", (int)result.status, uform_last_error());
    } else {
        if (strcmp(request->kind, "image") == 0)
            printf("image %zu %zu\n", result.dims[0], result.dims[1]);
        else if (strcmp(request->kind, "video") == 0)
            printf("video %zu %zu %zu\n", result.dims[0], result.dims[1], result.dims[2]);
        else
            printf("audio %zu\n", result.dims[0]);
        fflush(stdout);
        if (result.size && fwrite(result.bytes, 1, result.size, stdout) != result.size) return 2;
    }
    release(&result);
    return 0;
}

static void print_prefixes(const request_t *request, const uint8_t *data, size_t size) {
    for (size_t length = 0; length <= size; length++) {
        result_t result = decode(request, data, length);
        printf("%zu %d %016" PRIx64 "\n", length, (int)result.status, hash_of(&result));
        release(&result);
    }
}

static uint64_t rng_state;

static uint64_t rng_next(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Copies with 1 to 8 random bytes replaced, mostly near the start where the
 * headers are. */
static void print_flips(const request_t *request, const uint8_t *data, size_t size, uint64_t seed,
                        size_t count) {
    uint8_t *copy = checked(malloc(size ? size : 1));
    rng_state = seed;
    for (size_t i = 0; i < count && size; i++) {
        memcpy(copy, data, size);
        size_t flips = 1 + rng_next() % 8;
        for (size_t f = 0; f < flips; f++) {
            size_t span = rng_next() % 2 ? (size < 256 ? size : 256) : size;
            copy[rng_next() % span] = (uint8_t)rng_next();
        }
        result_t result = decode(request, copy, size);
        printf("%zu %d %016" PRIx64 "\n", i, (int)result.status, hash_of(&result));
        release(&result);
    }
    free(copy);
}

/* The same file decoded on several threads at once: every answer should be
 * the single-threaded one (the caller compares). */
typedef struct {
    const request_t *request;
    const uint8_t *data;
    size_t size, rounds;
    uform_status_t statuses[64];
    uint64_t hashes[64];
    size_t distinct;
} worker_t;

static void *decode_rounds(void *argument) {
    worker_t *worker = argument;
    for (size_t r = 0; r < worker->rounds; r++) {
        result_t result = decode(worker->request, worker->data, worker->size);
        uint64_t hash = hash_of(&result);
        size_t i = 0;
        while (i < worker->distinct && !(worker->statuses[i] == result.status && worker->hashes[i] == hash)) i++;
        if (i == worker->distinct && i < 64) worker->statuses[i] = result.status, worker->hashes[i] = hash, worker->distinct++;
        release(&result);
    }
    return NULL;
}

static void print_threads(const request_t *request, const uint8_t *data, size_t size, size_t threads,
                          size_t rounds) {
    if (threads > 64) threads = 64;
    worker_t workers[64];
    pthread_t ids[64];
    for (size_t t = 0; t < threads; t++) {
        workers[t] = (worker_t){request, data, size, rounds, {0}, {0}, 0};
        if (pthread_create(&ids[t], NULL, decode_rounds, &workers[t]) != 0) exit(2);
    }
    uform_status_t statuses[64 * 64];
    uint64_t hashes[64 * 64];
    size_t distinct = 0;
    for (size_t t = 0; t < threads; t++) {
        pthread_join(ids[t], NULL);
        for (size_t i = 0; i < workers[t].distinct; i++) {
            size_t j = 0;
            while (j < distinct && !(statuses[j] == workers[t].statuses[i] && hashes[j] == workers[t].hashes[i])) j++;
            if (j == distinct) statuses[j] = workers[t].statuses[i], hashes[j] = workers[t].hashes[i], distinct++;
        }
    }
    for (size_t j = 0; j < distinct; j++) printf("%d %016" PRIx64 "\n", (int)statuses[j], hashes[j]);
}

static int usage(void) {
    fprintf(stderr, "usage: decode_tool formats | image FILE | video STRIDE FILE | audio RATE FILE\n"
                    "       decode_tool KIND [ARG] --prefixes FILE | KIND [ARG] --flips SEED N FILE\n"
                    "       decode_tool KIND [ARG] --threads T N FILE\n");
    return 2;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "formats") == 0) {
        printf("formats %u\n", (unsigned)uform_media_formats());
        return 0;
    }
    if (argc < 3) return usage();
    request_t request = {argv[1], 0};
    int next = 2;
    if (strcmp(request.kind, "video") == 0 || strcmp(request.kind, "audio") == 0)
        request.argument = (size_t)strtoull(argv[next++], NULL, 10);
    else if (strcmp(request.kind, "image") != 0)
        return usage();
    if (next + 1 == argc) {
        size_t size;
        uint8_t *data = read_file(argv[next], &size);
        int status = print_one(&request, data, size);
        free(data);
        return status;
    }
    if (next + 2 == argc && strcmp(argv[next], "--prefixes") == 0) {
        size_t size;
        uint8_t *data = read_file(argv[next + 1], &size);
        print_prefixes(&request, data, size);
        free(data);
        return 0;
    }
    if (next + 4 == argc && strcmp(argv[next], "--flips") == 0) {
        size_t size;
        uint8_t *data = read_file(argv[next + 3], &size);
        print_flips(&request, data, size, strtoull(argv[next + 1], NULL, 10),
                    (size_t)strtoull(argv[next + 2], NULL, 10));
        free(data);
        return 0;
    }
    if (next + 4 == argc && strcmp(argv[next], "--threads") == 0) {
        size_t size;
        uint8_t *data = read_file(argv[next + 3], &size);
        print_threads(&request, data, size, (size_t)strtoull(argv[next + 1], NULL, 10),
                      (size_t)strtoull(argv[next + 2], NULL, 10));
        free(data);
        return 0;
    }
    return usage();
}
