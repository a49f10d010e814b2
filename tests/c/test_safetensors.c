/* test_safetensors.c: the safetensors reader/writer and the JSON parser.
 *
 * A standalone program: each test_* function is one test; the last line is
 * "N passed, M failed" and the exit status is nonzero when any failed. Meant
 * to run under ASan/UBSan, so every buffer handed to the parser is a heap
 * block of exactly its size.
 */
#include "core/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static int checks_failed; /* in the current test */
static char directory[64];

#define CHECK(condition)                                                                      \
    do {                                                                                      \
        if (!(condition)) {                                                                   \
            fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, __LINE__,  \
                    #condition, uform_last_error());                                          \
            checks_failed++;                                                                  \
        }                                                                                     \
    } while (0)

/* ---- helpers ------------------------------------------------------------------- */

static void put_le64(uint8_t *out, uint64_t value) {
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)(value >> (8 * i));
}

/* A heap buffer of exactly 8 + header_length + data_length bytes. */
static uint8_t *build_raw(const char *header, size_t header_length, uint64_t length_field,
                          size_t data_length, size_t *size) {
    *size = 8 + header_length + data_length;
    uint8_t *bytes = malloc(*size);
    if (!bytes) abort();
    put_le64(bytes, length_field);
    memcpy(bytes + 8, header, header_length);
    for (size_t i = 0; i < data_length; i++) bytes[8 + header_length + i] = (uint8_t)(i * 7 + 1);
    return bytes;
}

static uint8_t *build(const char *header, size_t data_length, size_t *size) {
    return build_raw(header, strlen(header), strlen(header), data_length, size);
}

static bool is_zeroed(const uform_safetensors_t *file) {
    static const uform_safetensors_t zero;
    return memcmp(file, &zero, sizeof(zero)) == 0;
}

/* Parses bytes and expects UFORM_FORMAT with `word` in the message and a zeroed file. */
static void expect_format_bytes(const uint8_t *bytes, size_t size, const char *word, int line) {
    uform_safetensors_t file;
    uform_status_t status = uform_safetensors_parse(bytes, size, &file);
    if (status != UFORM_FORMAT || !strstr(uform_last_error(), word) || !is_zeroed(&file)) {
        fprintf(stderr, "%s:%d: expected UFORM_FORMAT with '%s', got status %d: %s\n", __FILE__,
                line, word, (int)status, uform_last_error());
        checks_failed++;
    }
    uform_safetensors_close(&file); /* safe after a failed parse */
    CHECK(is_zeroed(&file));
}

static void expect_format(const char *header, size_t data_length, const char *word, int line) {
    size_t size;
    uint8_t *bytes = build(header, data_length, &size);
    expect_format_bytes(bytes, size, word, line);
    free(bytes);
}
#define EXPECT_FORMAT(header, data_length, word) expect_format(header, data_length, word, __LINE__)

static char *path_in_directory(const char *name) {
    char *path = malloc(strlen(directory) + strlen(name) + 2);
    if (!path) abort();
    sprintf(path, "%s/%s", directory, name);
    return path;
}

/* True when the test directory holds a leftover temporary file. */
static bool temporary_left(void) {
    DIR *dir = opendir(directory);
    if (!dir) return true;
    bool found = false;
    struct dirent *entry;
    while ((entry = readdir(dir)))
        if (strstr(entry->d_name, ".tmp-") || strstr(entry->d_name, ".uform-partial-")) found = true;
    closedir(dir);
    return found;
}

static uint8_t *read_whole(const char *path, size_t *size) {
    FILE *stream = fopen(path, "rb");
    if (!stream) return NULL;
    fseek(stream, 0, SEEK_END);
    long length = ftell(stream);
    fseek(stream, 0, SEEK_SET);
    uint8_t *bytes = malloc(length > 0 ? (size_t)length : 1);
    if (!bytes) abort();
    *size = fread(bytes, 1, (size_t)length, stream);
    fclose(stream);
    return bytes;
}

typedef struct {
    size_t calls, last_done, last_total;
    size_t cancel_at; /* 0: never */
} progress_log_t;

static int record_progress(void *user, size_t done, size_t total) {
    progress_log_t *log = user;
    log->calls++;
    log->last_done = done;
    log->last_total = total;
    return log->cancel_at && log->calls >= log->cancel_at;
}

/* ---- writer + reader ------------------------------------------------------------ */

static void test_round_trip(void) {
    float f32[6] = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e30f};
    uint16_t bf16[4] = {0x3f80, 0xbf80, 0x7f7f, 0x0001}; /* 0x7f7f: the largest finite BF16 */
    int64_t i64 = -1234567890123LL;
    uint8_t f8[6] = {1, 2, 3, 4, 5, 6};
    uint8_t flags[5] = {1, 0, 1, 1, 0};
    double f64[2] = {3.141592653589793, -1e-300};
    uform_tensor_view_t views[] = {
        {"weights/f32", UFORM_DTYPE_F32, 2, {2, 3}, f32},
        {"bf16 \"quoted\" \\ name", UFORM_DTYPE_BF16, 1, {4}, bf16},
        {"scalar", UFORM_DTYPE_I64, 0, {0}, &i64},
        {"empty", UFORM_DTYPE_U8, 2, {0, 7}, NULL}, /* 0 elements: no data needed */
        {"f8.\xc3\xa9\xf0\x9f\x98\x80", UFORM_DTYPE_F8_E4M3, 3, {3, 1, 2}, f8},
        {"flags", UFORM_DTYPE_BOOL, 1, {5}, flags}, /* 5 bytes: later data is unaligned */
        {"f64", UFORM_DTYPE_F64, 1, {2}, f64},
    };
    size_t count = sizeof(views) / sizeof(views[0]);
    uform_metadata_entry_t metadata[] = {
        {"format", "pt"},
        {"uform", "{\"version\": 4, \"text\": \"tab\\there\"}"},
        {"control\x01key", "line\nbreak \x7f \xe2\x9c\x93"},
        {"", "empty key"},
    };
    size_t metadata_count = sizeof(metadata) / sizeof(metadata[0]);
    char *path = path_in_directory("round trip.safetensors");
    progress_log_t log = {0, 0, 0, 0};
    uform_progress_t progress = {record_progress, &log, 4};
    CHECK(uform_safetensors_write(path, views, count, metadata, metadata_count, &progress) ==
          UFORM_OK);
    CHECK(log.calls >= 1 && log.calls <= 4);
    CHECK(log.last_done == log.last_total && log.last_total > 0);
    CHECK(!temporary_left());

    size_t size = 0;
    uint8_t *raw = read_whole(path, &size);
    CHECK(raw && size >= 8);
    if (raw) {
        uint64_t header_length = 0;
        for (int i = 7; i >= 0; i--) header_length = (header_length << 8) | raw[i];
        CHECK(header_length % 8 == 0);
        /* __metadata__ comes first */
        CHECK(memcmp(raw + 8, "{\"__metadata__\":", 16) == 0);
        CHECK(size == log.last_total);
        free(raw);
    }

    uform_safetensors_t file;
    CHECK(uform_safetensors_open(path, &file) == UFORM_OK);
    CHECK(file.tensors_count == count);
    CHECK(file.mapping != NULL);
    for (size_t i = 0; i < file.tensors_count && i < count; i++) {
        const uform_tensor_t *tensor = &file.tensors[i];
        CHECK(strcmp(tensor->name, views[i].name) == 0); /* header order kept */
        CHECK(tensor->dtype == views[i].dtype);
        CHECK(tensor->rank == views[i].rank);
        size_t bytes = uform_dtype_size(views[i].dtype);
        for (size_t d = 0; d < views[i].rank; d++) {
            CHECK(tensor->shape[d] == views[i].shape[d]);
            bytes *= views[i].shape[d];
        }
        CHECK(tensor->bytes == bytes);
        CHECK(bytes == 0 || memcmp(tensor->data, views[i].data, bytes) == 0);
        CHECK(uform_safetensors_find(&file, views[i].name) == tensor);
    }
    CHECK(uform_safetensors_find(&file, "missing") == NULL);
    /* Unaligned data: copy out, never dereference as double. */
    const uform_tensor_t *wide = uform_safetensors_find(&file, "f64");
    if (wide) {
        double back[2];
        memcpy(back, wide->data, sizeof(back));
        CHECK(back[0] == f64[0] && back[1] == f64[1]);
    }
    CHECK(file.metadata_count == metadata_count);
    for (size_t i = 0; i < file.metadata_count && i < metadata_count; i++) {
        CHECK(strcmp(file.metadata[i].key, metadata[i].key) == 0); /* order kept */
        CHECK(strcmp(file.metadata[i].value, metadata[i].value) == 0);
    }
    CHECK(uform_safetensors_metadata(&file, "format") &&
          strcmp(uform_safetensors_metadata(&file, "format"), "pt") == 0);
    CHECK(uform_safetensors_metadata(&file, "absent") == NULL);
    uform_safetensors_close(&file);
    CHECK(is_zeroed(&file));
    uform_safetensors_close(&file); /* twice is fine */

    /* Overwriting an existing file goes through rename as well. */
    CHECK(uform_safetensors_write(path, views, 1, NULL, 0, NULL) == UFORM_OK);
    CHECK(uform_safetensors_open(path, &file) == UFORM_OK);
    CHECK(file.tensors_count == 1 && file.metadata_count == 0);
    uform_safetensors_close(&file);
    CHECK(!temporary_left());
    unlink(path);
    free(path);
}

static void test_round_trip_empty(void) {
    char *path = path_in_directory("empty.safetensors");
    CHECK(uform_safetensors_write(path, NULL, 0, NULL, 0, NULL) == UFORM_OK);
    size_t size = 0;
    uint8_t *raw = read_whole(path, &size);
    CHECK(raw && size == 16 && memcmp(raw + 8, "{}      ", 8) == 0);
    free(raw);
    uform_safetensors_t file;
    CHECK(uform_safetensors_open(path, &file) == UFORM_OK);
    CHECK(file.tensors_count == 0 && file.metadata_count == 0);
    uform_safetensors_close(&file);
    unlink(path);
    free(path);
}

static void test_writer_refusals(void) {
    float data[4] = {0};
    char *path = path_in_directory("refused.safetensors");
    struct {
        uform_tensor_view_t views[2];
        size_t count;
        const char *word;
    } cases[] = {
        {{{NULL, UFORM_DTYPE_F32, 1, {1}, data}}, 1, "NULL name"},
        {{{"", UFORM_DTYPE_F32, 1, {1}, data}}, 1, "empty name"},
        {{{"a", UFORM_DTYPE_F32, 1, {1}, data}, {"a", UFORM_DTYPE_F32, 1, {1}, data}}, 2,
         "duplicate tensor name"},
        {{{"a", UFORM_DTYPE_F32, 9, {1, 1, 1, 1, 1, 1, 1, 1}, data}}, 1, "rank 9"},
        {{{"a", UFORM_DTYPE_F32, 2, {UINT64_MAX / 2, 3}, data}}, 1, "overflows"},
        {{{"a", UFORM_DTYPE_U8, 2, {1ull << 62, 2}, data}, {"b", UFORM_DTYPE_U8, 2, {1ull << 62, 2}, data}},
         2, "overflows"},
        {{{"__metadata__", UFORM_DTYPE_F32, 1, {1}, data}}, 1, "__metadata__"},
        {{{"bad\xff", UFORM_DTYPE_F32, 1, {1}, data}}, 1, "UTF-8"},
        {{{"a", (uform_dtype_t)99, 1, {1}, data}}, 1, "unknown dtype"},
        {{{"a", UFORM_DTYPE_F32, 1, {4}, NULL}}, 1, "data is NULL"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uform_status_t status =
            uform_safetensors_write(path, cases[i].views, cases[i].count, NULL, 0, NULL);
        if (status != UFORM_INVALID_ARGUMENT || !strstr(uform_last_error(), cases[i].word)) {
            fprintf(stderr, "writer case %zu: expected INVALID_ARGUMENT with '%s', got %d: %s\n",
                    i, cases[i].word, (int)status, uform_last_error());
            checks_failed++;
        }
        CHECK(access(path, F_OK) != 0);
    }
    uform_tensor_view_t one = {"a", UFORM_DTYPE_F32, 1, {1}, data};
    uform_metadata_entry_t duplicate[2] = {{"k", "1"}, {"k", "2"}};
    CHECK(uform_safetensors_write(path, &one, 1, duplicate, 2, NULL) == UFORM_INVALID_ARGUMENT);
    CHECK(strstr(uform_last_error(), "duplicate metadata key"));
    uform_metadata_entry_t null_value = {"k", NULL};
    CHECK(uform_safetensors_write(path, &one, 1, &null_value, 1, NULL) == UFORM_INVALID_ARGUMENT);
    CHECK(uform_safetensors_write(NULL, &one, 1, NULL, 0, NULL) == UFORM_INVALID_ARGUMENT);
    CHECK(uform_safetensors_write(path, NULL, 1, NULL, 0, NULL) == UFORM_INVALID_ARGUMENT);
    CHECK(access(path, F_OK) != 0);

    /* A directory that does not exist: UFORM_FILE naming the path. */
    char *missing = path_in_directory("no/such/dir/x.safetensors");
    CHECK(uform_safetensors_write(missing, &one, 1, NULL, 0, NULL) == UFORM_FILE);
    CHECK(strstr(uform_last_error(), missing) && strstr(uform_last_error(), "No such file"));
    free(missing);

    /* The path is a directory: refused before anything is created. */
    char *dir_path = path_in_directory("subdir");
    CHECK(mkdir(dir_path, 0700) == 0);
    char *inner = path_in_directory("subdir/inner");
    CHECK(mkdir(inner, 0700) == 0); /* non-empty, so rename cannot replace it */
    CHECK(uform_safetensors_write(dir_path, &one, 1, NULL, 0, NULL) == UFORM_FILE);
    CHECK(strstr(uform_last_error(), dir_path));
    CHECK(!temporary_left());
    rmdir(inner);
    rmdir(dir_path);
    free(inner);
    free(dir_path);

    /* Cancelled by progress: the old file survives, no temporary remains. */
    CHECK(uform_safetensors_write(path, &one, 1, NULL, 0, NULL) == UFORM_OK);
    size_t before_size = 0;
    uint8_t *before = read_whole(path, &before_size);
    static uint8_t big[3 << 20];
    uform_tensor_view_t large[3] = {{"x", UFORM_DTYPE_U8, 1, {sizeof(big)}, big},
                                    {"y", UFORM_DTYPE_U8, 1, {sizeof(big)}, big},
                                    {"z", UFORM_DTYPE_U8, 1, {sizeof(big)}, big}};
    progress_log_t log = {0, 0, 0, 2};
    uform_progress_t progress = {record_progress, &log, 8};
    CHECK(uform_safetensors_write(path, large, 3, NULL, 0, &progress) == UFORM_CANCELLED);
    CHECK(log.calls == 2);
    CHECK(!temporary_left());
    size_t after_size = 0;
    uint8_t *after = read_whole(path, &after_size);
    CHECK(before && after && before_size == after_size &&
          memcmp(before, after, before_size) == 0);
    free(before);
    free(after);

    /* A write that fails half way (file size limit): UFORM_FILE, old file kept. */
    struct rlimit saved;
    CHECK(getrlimit(RLIMIT_FSIZE, &saved) == 0);
    struct rlimit small = {1 << 20, saved.rlim_max};
    void (*previous)(int) = signal(SIGXFSZ, SIG_IGN);
    CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);
    uform_status_t status = uform_safetensors_write(path, large, 3, NULL, 0, NULL);
    CHECK(setrlimit(RLIMIT_FSIZE, &saved) == 0);
    signal(SIGXFSZ, previous);
    CHECK(status == UFORM_FILE);
    CHECK(strstr(uform_last_error(), path) && strstr(uform_last_error(), "too large"));
    CHECK(!temporary_left());
    after = read_whole(path, &after_size);
    CHECK(after && after_size == before_size);
    free(after);
    unlink(path);
    free(path);
}

/* ---- reader refusals -------------------------------------------------------------- */

#define T(name, dtype, shape, begin, end)                                                     \
    "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" #begin    \
    "," #end "]}"

static void test_reader_refusals(void) {
    /* Shorter than the length field. */
    for (size_t size = 0; size < 8; size++) {
        uint8_t *bytes = malloc(size ? size : 1);
        memset(bytes, 0, size ? size : 1);
        expect_format_bytes(bytes, size, "shorter", __LINE__);
        free(bytes);
    }
    size_t size;
    uint8_t *bytes;
    bytes = build_raw("{}", 2, 0, 0, &size);
    expect_format_bytes(bytes, size, "header length is 0", __LINE__);
    free(bytes);
    bytes = build_raw("{}", 2, (uint64_t)UFORM_SAFETENSORS_MAX_HEADER + 1, 0, &size);
    expect_format_bytes(bytes, size, "limit", __LINE__);
    free(bytes);
    bytes = build_raw("{}", 2, UINT64_MAX, 0, &size);
    expect_format_bytes(bytes, size, "limit", __LINE__);
    free(bytes);
    bytes = build_raw("{}", 2, 3, 0, &size);
    expect_format_bytes(bytes, size, "exceeds the 2 bytes", __LINE__);
    free(bytes);

    /* JSON */
    EXPECT_FORMAT("{\"a\":", 0, "safetensors header: JSON at byte 5");
    EXPECT_FORMAT("{} x", 0, "after the value");
    EXPECT_FORMAT("{\"a\xff\":1}", 0, "UTF-8");
    EXPECT_FORMAT("[]", 0, "top level");
    EXPECT_FORMAT("\"{}\"", 0, "top level");

    /* entries */
    EXPECT_FORMAT("{\"a\":1}", 0, "must be an object");
    EXPECT_FORMAT("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "missing key 'data_offsets'");
    EXPECT_FORMAT("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "missing key 'dtype'");
    EXPECT_FORMAT("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4,
                  "unknown key 'x'");
    EXPECT_FORMAT("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],"
                  "\"data_offsets\":[0,4]}}",
                  4, "duplicate key 'dtype'");
    EXPECT_FORMAT("{" T("a", "F4", "[1]", 0, 1) "}", 1, "unknown dtype 'F4'");
    EXPECT_FORMAT("{" T("a", "f32", "[1]", 0, 4) "}", 4, "unknown dtype");
    EXPECT_FORMAT("{" T("a", "F32 ", "[1]", 0, 4) "}", 4, "unknown dtype");
    EXPECT_FORMAT("{\"a\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                  "dtype must be a string");
    EXPECT_FORMAT("{" T("a", "F32", "4", 0, 4) "}", 4, "shape must be an array");
    EXPECT_FORMAT("{" T("a", "F32", "[-1]", 0, 4) "}", 4, "shape[0]");
    EXPECT_FORMAT("{" T("a", "F32", "[1, 2.0]", 0, 8) "}", 8, "shape[1]");
    EXPECT_FORMAT("{" T("a", "F32", "[1e0]", 0, 4) "}", 4, "shape[0]");
    EXPECT_FORMAT("{" T("a", "F32", "[\"1\"]", 0, 4) "}", 4, "shape[0]");
    EXPECT_FORMAT("{" T("a", "U8", "[18446744073709551616]", 0, 4) "}", 4, "shape[0]");
    EXPECT_FORMAT("{" T("a", "U8", "[1,1,1,1,1,1,1,1,1]", 0, 1) "}", 1, "rank 9");
    EXPECT_FORMAT("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,1]}}", 1,
                  "data_offsets must be");
    EXPECT_FORMAT("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", 1,
                  "data_offsets must be");
    EXPECT_FORMAT("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":{}}}", 1,
                  "data_offsets must be");
    EXPECT_FORMAT("{" T("a", "U8", "[1]", -1, 0) "}", 1, "data_offsets must be");
    EXPECT_FORMAT("{" T("a", "U8", "[1]", 2, 1) "}", 2, "after end");
    EXPECT_FORMAT("{" T("a", "U8", "[4]", 0, 4) "}", 3, "outside the 3-byte data region");
    EXPECT_FORMAT("{" T("a", "U8", "[1]", 18446744073709551615, 18446744073709551615) "}", 3,
                  "outside");
    EXPECT_FORMAT("{" T("a", "F32", "[2]", 0, 4) "}", 4, "needs 8");
    EXPECT_FORMAT("{" T("a", "F32", "[4294967296, 4294967296]", 0, 4) "}", 4, "overflows");
    EXPECT_FORMAT("{" T("a", "F32", "[0, 4294967296, 4294967296, 4294967296]", 0, 0) "}", 0,
                  "overflows"); /* overflow is refused even with a zero dimension first */

    /* layout */
    EXPECT_FORMAT("{" T("a", "U8", "[8]", 0, 8) "," T("b", "U8", "[8]", 4, 12) "}", 12,
                  "overlap");
    EXPECT_FORMAT("{" T("a", "U8", "[4]", 0, 4) "," T("b", "U8", "[4]", 8, 12) "}", 12, "gap");
    EXPECT_FORMAT("{" T("a", "U8", "[4]", 4, 8) "}", 8, "gap of 4 bytes");
    EXPECT_FORMAT("{" T("a", "U8", "[4]", 0, 4) "," T("b", "U8", "[0]", 2, 2) "}", 4,
                  "overlap");
    EXPECT_FORMAT("{" T("a", "U8", "[4]", 0, 4) "}", 8, "4 trailing bytes");
    EXPECT_FORMAT("{}", 1, "trailing");
    EXPECT_FORMAT("{" T("a", "U8", "[4]", 0, 4) "," T("a", "U8", "[4]", 4, 8) "}", 8,
                  "duplicate tensor name 'a'");

    /* names */
    EXPECT_FORMAT("{" T("", "U8", "[4]", 0, 4) "}", 4, "empty tensor name");
    EXPECT_FORMAT("{" T("a\\u0000b", "U8", "[4]", 0, 4) "}", 4, "NUL");

    /* metadata */
    EXPECT_FORMAT("{\"__metadata__\":[]}", 0, "__metadata__ must be an object");
    EXPECT_FORMAT("{\"__metadata__\":\"x\"}", 0, "__metadata__ must be an object");
    EXPECT_FORMAT("{\"__metadata__\":null}", 0, "__metadata__ must be an object");
    EXPECT_FORMAT("{\"__metadata__\":{\"k\":1}}", 0, "value of key 'k' must be a string");
    EXPECT_FORMAT("{\"__metadata__\":{\"k\":{\"x\":\"y\"}}}", 0, "must be a string");
    EXPECT_FORMAT("{\"__metadata__\":{\"k\":\"a\\u0000\"}}", 0, "NUL");
    EXPECT_FORMAT("{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0,
                  "duplicate __metadata__ key 'k'");
    EXPECT_FORMAT("{\"__metadata__\":{},\"__metadata__\":{}}", 0, "duplicate __metadata__");

    /* null arguments */
    uform_safetensors_t file;
    CHECK(uform_safetensors_parse(NULL, 8, &file) == UFORM_INVALID_ARGUMENT);
    CHECK(is_zeroed(&file));
    CHECK(uform_safetensors_parse("", 0, NULL) == UFORM_INVALID_ARGUMENT);
}

static void test_reader_accepts(void) {
    uform_safetensors_t file;
    size_t size;
    uint8_t *bytes;

    /* Unpadded header of odd length: data starts at an odd address. */
    const char *header = "{" T("ab", "F32", "[2]", 0, 8) "}";
    CHECK(strlen(header) % 2 == 1);
    bytes = build(header, 8, &size);
    CHECK(uform_safetensors_parse(bytes, size, &file) == UFORM_OK);
    CHECK(file.tensors_count == 1 && file.tensors[0].bytes == 8);
    CHECK(file.tensors[0].data == bytes + 8 + strlen(header));
    CHECK(file.bytes == bytes && file.size == size && file.mapping == NULL);
    uform_safetensors_close(&file);
    free(bytes);

    /* Whitespace around the JSON; tensors listed out of offset order keep
     * header order; zero-size tensors may share offsets with their neighbours. */
    header = " \n{" T("b", "U16", "[2]", 4, 8) ",\r\n\t" T("a", "I32", "[1]", 0, 4) ","
             T("z0", "F64", "[0, 3]", 0, 0) "," T("z1", "BOOL", "[0]", 4, 4) ","
             T("z2", "BF16", "[0]", 8, 8) ",\"__metadata__\":{}}  ";
    bytes = build(header, 8, &size);
    CHECK(uform_safetensors_parse(bytes, size, &file) == UFORM_OK);
    CHECK(file.tensors_count == 5);
    if (file.tensors_count == 5) {
        CHECK(strcmp(file.tensors[0].name, "b") == 0 && file.tensors[0].dtype == UFORM_DTYPE_U16);
        CHECK(strcmp(file.tensors[1].name, "a") == 0);
        CHECK(file.tensors[0].data == file.tensors[1].data + 4);
        CHECK(file.tensors[2].rank == 2 && file.tensors[2].shape[1] == 3 &&
              file.tensors[2].bytes == 0);
    }
    CHECK(file.metadata_count == 0);
    uform_safetensors_close(&file);
    free(bytes);

    /* A scalar (rank 0) and every dtype name. */
    for (int d = UFORM_DTYPE_BOOL; d <= UFORM_DTYPE_F8_E5M2; d++) {
        char text[256];
        size_t element = uform_dtype_size((uform_dtype_t)d);
        snprintf(text, sizeof(text), "{\"s\":{\"dtype\":\"%s\",\"shape\":[],\"data_offsets\":[0,%zu]}}",
                 uform_dtype_name((uform_dtype_t)d), element);
        bytes = build(text, element, &size);
        CHECK(uform_safetensors_parse(bytes, size, &file) == UFORM_OK);
        CHECK(file.tensors_count == 1 && file.tensors[0].dtype == (uform_dtype_t)d &&
              file.tensors[0].rank == 0 && file.tensors[0].bytes == element);
        uform_safetensors_close(&file);
        free(bytes);
    }
    CHECK(uform_dtype_size(UFORM_DTYPE_BF16) == 2 && uform_dtype_size(UFORM_DTYPE_F64) == 8);
    CHECK(strcmp(uform_dtype_name(UFORM_DTYPE_F8_E4M3), "F8_E4M3") == 0);
    CHECK(uform_dtype_size((uform_dtype_t)-1) == 0);
    CHECK(strcmp(uform_dtype_name((uform_dtype_t)100), "unknown") == 0);

    /* Zeroed structs close cleanly; lookups on them find nothing. */
    memset(&file, 0, sizeof(file));
    uform_safetensors_close(&file);
    uform_safetensors_close(NULL);
    CHECK(uform_safetensors_find(&file, "a") == NULL);
    CHECK(uform_safetensors_metadata(&file, "a") == NULL);
}

static void test_open_errors(void) {
    uform_safetensors_t file;
    char *missing = path_in_directory("missing.safetensors");
    CHECK(uform_safetensors_open(missing, &file) == UFORM_FILE);
    CHECK(strstr(uform_last_error(), missing) && strstr(uform_last_error(), "No such file"));
    CHECK(is_zeroed(&file));
    uform_safetensors_close(&file);
    free(missing);

    CHECK(uform_safetensors_open(directory, &file) == UFORM_FILE);
    CHECK(strstr(uform_last_error(), directory) && strstr(uform_last_error(), "directory"));
    CHECK(is_zeroed(&file));

    char *empty = path_in_directory("empty");
    FILE *stream = fopen(empty, "wb");
    CHECK(stream != NULL);
    if (stream) fclose(stream);
    CHECK(uform_safetensors_open(empty, &file) == UFORM_FORMAT);
    CHECK(strstr(uform_last_error(), empty) && strstr(uform_last_error(), "shorter"));
    CHECK(is_zeroed(&file));
    uform_safetensors_close(&file);

    /* A corrupt file: the message names the path and the fault. */
    stream = fopen(empty, "wb");
    size_t size;
    uint8_t *bytes = build("{" T("w", "U8", "[4]", 0, 5) "}", 5, &size);
    if (stream) {
        fwrite(bytes, 1, size, stream);
        fclose(stream);
    }
    free(bytes);
    CHECK(uform_safetensors_open(empty, &file) == UFORM_FORMAT);
    CHECK(strstr(uform_last_error(), empty) && strstr(uform_last_error(), "tensor 'w'"));
    CHECK(is_zeroed(&file));
    unlink(empty);
    free(empty);

    if (geteuid() != 0) { /* root reads anything */
        char *locked = path_in_directory("locked");
        stream = fopen(locked, "wb");
        if (stream) fclose(stream);
        chmod(locked, 0);
        CHECK(uform_safetensors_open(locked, &file) == UFORM_FILE);
        CHECK(strstr(uform_last_error(), "Permission denied"));
        unlink(locked);
        free(locked);
    }

    /* A pipe cannot be mapped: it is read into memory instead. */
    int ends[2];
    CHECK(pipe(ends) == 0);
    bytes = build("{" T("p", "U8", "[3]", 0, 3) "}", 3, &size);
    CHECK(write(ends[1], bytes, size) == (ssize_t)size);
    close(ends[1]);
    char pipe_path[64];
    snprintf(pipe_path, sizeof(pipe_path), "/proc/self/fd/%d", ends[0]);
    uform_status_t status = uform_safetensors_open(pipe_path, &file);
    if (status == UFORM_FILE && access("/proc/self/fd", F_OK) != 0) {
        status = UFORM_OK; /* no /proc: nothing to test */
    } else {
        CHECK(status == UFORM_OK);
        CHECK(file.tensors_count == 1 && file.mapping != NULL && file.size == size);
        if (file.tensors_count == 1) CHECK(memcmp(file.tensors[0].data, bytes + size - 3, 3) == 0);
        uform_safetensors_close(&file);
    }
    close(ends[0]);
    free(bytes);

    CHECK(uform_safetensors_open(NULL, &file) == UFORM_INVALID_ARGUMENT);
    CHECK(uform_safetensors_open("x", NULL) == UFORM_INVALID_ARGUMENT);
}

/* ---- writer: targets, temporaries, values ---------------------------------------- */

/* A fresh empty directory under the test directory (removed by remove_tree). */
static char *fresh_directory(const char *name) {
    char *path = path_in_directory(name);
    if (mkdir(path, 0700) != 0) {
        fprintf(stderr, "mkdir %s: %s\n", path, strerror(errno));
        checks_failed++;
    }
    return path;
}

/* Removes path and, when it is a directory, everything under it; never follows links. */
static void remove_tree(const char *path) {
    struct stat info;
    if (lstat(path, &info) != 0) return;
    if (S_ISDIR(info.st_mode)) {
        DIR *dir = opendir(path);
        struct dirent *entry;
        while (dir && (entry = readdir(dir))) {
            if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) continue;
            char *inner = malloc(strlen(path) + strlen(entry->d_name) + 2);
            if (!inner) abort();
            sprintf(inner, "%s/%s", path, entry->d_name);
            remove_tree(inner);
            free(inner);
        }
        if (dir) closedir(dir);
        rmdir(path);
    } else {
        unlink(path);
    }
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The entries of dir but . and .., sorted and joined by '|' ("" when empty). */
static const char *listing(const char *dir) {
    static char text[4096];
    char *names[64];
    size_t count = 0;
    text[0] = '\0';
    DIR *stream = opendir(dir);
    if (!stream) return "(cannot open)";
    struct dirent *entry;
    while ((entry = readdir(stream)) && count < 64) {
        if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) continue;
        names[count++] = strdup(entry->d_name);
    }
    closedir(stream);
    qsort(names, count, sizeof(*names), compare_names);
    size_t used = 0;
    for (size_t i = 0; i < count; i++) {
        used += (size_t)snprintf(text + used, sizeof(text) - used, "%s%s", i ? "|" : "", names[i]);
        if (used >= sizeof(text)) used = sizeof(text) - 1;
        free(names[i]);
    }
    return text;
}

#define CHECK_LISTING(dir, expected)                                                          \
    do {                                                                                      \
        const char *listing_ = listing(dir);                                                  \
        if (strcmp(listing_, expected) != 0) {                                                \
            fprintf(stderr, "%s:%d: %s holds \"%s\", expected \"%s\"\n", __FILE__, __LINE__,   \
                    dir, listing_, expected);                                                 \
            checks_failed++;                                                                  \
        }                                                                                     \
    } while (0)

static char *join(const char *dir, const char *name) {
    char *path = malloc(strlen(dir) + strlen(name) + 2);
    if (!path) abort();
    sprintf(path, "%s/%s", dir, name);
    return path;
}

/* One F32 tensor "w" of two elements, both `value`. */
static uform_status_t write_small(const char *path, float value) {
    float data[2] = {value, value};
    uform_tensor_view_t view = {"w", UFORM_DTYPE_F32, 1, {2}, data};
    return uform_safetensors_write(path, &view, 1, NULL, 0, NULL);
}

/* The value write_small wrote at path, or -1 when it cannot be read. */
static float read_small(const char *path) {
    uform_safetensors_t file;
    if (uform_safetensors_open(path, &file) != UFORM_OK) return -1.0f;
    const uform_tensor_t *tensor = uform_safetensors_find(&file, "w");
    float value = -1.0f;
    if (tensor && tensor->bytes == 8) memcpy(&value, tensor->data, sizeof(value));
    uform_safetensors_close(&file);
    return value;
}

/* Expects write_small(path) to fail with UFORM_FILE naming path and every word given. */
static void expect_write_refused(const char *path, const char *word, const char *word2, int line) {
    uform_status_t status = write_small(path, 7.0f);
    const char *message = uform_last_error();
    if (status != UFORM_FILE || !strstr(message, path) || !strstr(message, word) ||
        (word2 && !strstr(message, word2))) {
        fprintf(stderr, "%s:%d: writing '%s': expected UFORM_FILE with '%s', got %d: %s\n",
                __FILE__, line, path, word, (int)status, message);
        checks_failed++;
    }
}

static bool is_kind(const char *path, mode_t kind) {
    struct stat info;
    return lstat(path, &info) == 0 && (info.st_mode & S_IFMT) == kind;
}

static void test_write_refuses_non_regular(void) {
    char *dir = fresh_directory("special");
    char *subdir = join(dir, "dir"), *fifo = join(dir, "fifo"), *device = join(dir, "null");
    char *socket_path = join(dir, "sock");
    CHECK(mkdir(subdir, 0700) == 0); /* empty: rename(2) alone would not refuse it */
    expect_write_refused(subdir, "it exists and is not a regular file", "nothing was written",
                         __LINE__);
    CHECK(is_kind(subdir, S_IFDIR));

    CHECK(mkfifo(fifo, 0600) == 0);
    expect_write_refused(fifo, "not a regular file", "FIFO", __LINE__);
    CHECK(is_kind(fifo, S_IFIFO));

    int sock = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    snprintf(address.sun_path, sizeof(address.sun_path), "%s", socket_path);
    CHECK(sock >= 0 && bind(sock, (struct sockaddr *)&address, sizeof(address)) == 0);
    expect_write_refused(socket_path, "not a regular file", NULL, __LINE__);
    CHECK(is_kind(socket_path, S_IFSOCK));
    if (sock >= 0) close(sock);

    /* Device nodes: a private one in the test directory, then /dev/null itself. */
    bool root = geteuid() == 0;
    if (root && mknod(device, S_IFCHR | 0666, makedev(1, 3)) == 0) {
        expect_write_refused(device, "not a regular file", "device", __LINE__);
        CHECK(is_kind(device, S_IFCHR));
    } else {
        fprintf(stderr, "skipped: private device node (%s)\n",
                root ? strerror(errno) : "not root");
    }
    struct stat null_before;
    if (!root || lstat("/dev/null", &null_before) != 0 || !S_ISCHR(null_before.st_mode)) {
        fprintf(stderr, "skipped: writing to /dev/null (%s)\n",
                root ? "/dev/null is not a character device" : "not root");
    } else {
        expect_write_refused("/dev/null", "not a regular file", NULL, __LINE__);
        struct stat null_after;
        bool kept = lstat("/dev/null", &null_after) == 0 && S_ISCHR(null_after.st_mode) &&
                    null_after.st_rdev == null_before.st_rdev;
        CHECK(kept);
        if (!kept) { /* put the machine's /dev/null back */
            unlink("/dev/null");
            if (mknod("/dev/null", S_IFCHR | 0666, null_before.st_rdev) == 0)
                chmod("/dev/null", 0666);
            fprintf(stderr, "test_write_refuses_non_regular: /dev/null was replaced; restored\n");
        }
    }
    CHECK_LISTING(dir, root && is_kind(device, S_IFCHR) ? "dir|fifo|null|sock" : "dir|fifo|sock");
    remove_tree(dir);
    free(subdir), free(fifo), free(device), free(socket_path), free(dir);
}

static void test_write_through_symlink(void) {
    char *dir = fresh_directory("links");
    char *sub = join(dir, "sub"), *real = join(dir, "sub/real"), *link = join(dir, "link");
    char *chain = join(dir, "chain"), *dangling = join(dir, "dangling");
    char *loop = join(dir, "loop"), *fifo = join(dir, "fifo"), *to_fifo = join(dir, "to_fifo");
    char *missing = join(dir, "missing");
    CHECK(mkdir(sub, 0700) == 0);
    CHECK(write_small(real, 1.0f) == UFORM_OK);
    CHECK(symlink("sub/real", link) == 0);
    /* The link is kept; the file it points to gets the new content. */
    CHECK(write_small(link, 2.0f) == UFORM_OK);
    char target[256] = "";
    CHECK(is_kind(link, S_IFLNK));
    CHECK(readlink(link, target, sizeof(target) - 1) == 8 && strcmp(target, "sub/real") == 0);
    CHECK(is_kind(real, S_IFREG) && read_small(real) == 2.0f && read_small(link) == 2.0f);
    CHECK_LISTING(dir, "link|sub");
    CHECK_LISTING(sub, "real"); /* the temporary lived beside the target and is gone */
    /* A chain of links resolves to the same file. */
    CHECK(symlink("link", chain) == 0);
    CHECK(write_small(chain, 3.0f) == UFORM_OK);
    CHECK(is_kind(chain, S_IFLNK) && is_kind(link, S_IFLNK) && read_small(real) == 3.0f);
    CHECK_LISTING(dir, "chain|link|sub");
    CHECK_LISTING(sub, "real");

    /* A link to a FIFO gets the same refusal as the FIFO. */
    CHECK(mkfifo(fifo, 0600) == 0 && symlink("fifo", to_fifo) == 0);
    expect_write_refused(to_fifo, "not a regular file", NULL, __LINE__);
    CHECK(is_kind(to_fifo, S_IFLNK) && is_kind(fifo, S_IFIFO));
    /* A dangling link is refused, not replaced, and its target is not created. */
    CHECK(symlink("missing", dangling) == 0);
    expect_write_refused(dangling, "points nowhere", "nothing was written", __LINE__);
    CHECK(is_kind(dangling, S_IFLNK) && access(missing, F_OK) != 0);
    CHECK(symlink("loop", loop) == 0);
    expect_write_refused(loop, "symbolic link", NULL, __LINE__);
    CHECK(is_kind(loop, S_IFLNK));
    CHECK_LISTING(dir, "chain|dangling|fifo|link|loop|sub|to_fifo");

    /* New files get 0666 & ~umask, as a plain create would. */
    char *fresh = join(dir, "sub/fresh");
    mode_t saved = umask(022);
    struct stat info;
    CHECK(write_small(fresh, 1.0f) == UFORM_OK);
    CHECK(stat(fresh, &info) == 0 && (info.st_mode & 07777) == 0644);
    umask(077);
    CHECK(write_small(fresh, 1.0f) == UFORM_OK);
    CHECK(stat(fresh, &info) == 0 && (info.st_mode & 07777) == 0600);
    umask(saved);
    free(fresh);

    remove_tree(dir);
    free(sub), free(real), free(link), free(chain), free(dangling), free(loop), free(fifo);
    free(to_fifo), free(missing), free(dir);
}

static void test_stale_temporaries(void) {
    char *dir = fresh_directory("stale");
    char *target = join(dir, "model.safetensors");
    CHECK(write_small(target, 1.0f) == UFORM_OK);
    /* Leftovers of dead writers hold no lock: the next save removes them. */
    const char *dead[] = {".model.safetensors.uform-partial-4194999-7",
                          ".model.safetensors.uform-partial-1-0"};
    for (size_t i = 0; i < 2; i++) {
        char *path = join(dir, dead[i]);
        FILE *stream = fopen(path, "wb");
        CHECK(stream != NULL);
        if (stream) fputs("half a checkpoint", stream), fclose(stream);
        free(path);
    }
    /* A live writer holds its lock: a second open file description conflicts. */
    char *live = join(dir, ".model.safetensors.uform-partial-4194998-3");
    int held = open(live, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    CHECK(held >= 0 && flock(held, LOCK_EX) == 0);
    /* Names that only resemble the pattern, other targets' temporaries and
     * non-regular files are never touched. */
    const char *others[] = {".model.safetensors.uform-partial-12",
                            ".model.safetensors.uform-partial-1-2x",
                            ".model.safetensors.uform-partial--1",
                            ".xmodel.safetensors.uform-partial-1-2",
                            ".other.uform-partial-1-2",
                            "model.safetensors.tmp-1-2"};
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        char *path = join(dir, others[i]);
        FILE *stream = fopen(path, "wb");
        if (stream) fclose(stream);
        free(path);
    }
    char *fifo = join(dir, ".model.safetensors.uform-partial-5-5");
    CHECK(mkfifo(fifo, 0600) == 0);

    CHECK(write_small(target, 2.0f) == UFORM_OK);
    CHECK(read_small(target) == 2.0f);
    CHECK_LISTING(dir, ".model.safetensors.uform-partial--1|"
                       ".model.safetensors.uform-partial-1-2x|"
                       ".model.safetensors.uform-partial-12|"
                       ".model.safetensors.uform-partial-4194998-3|"
                       ".model.safetensors.uform-partial-5-5|"
                       ".other.uform-partial-1-2|"
                       ".xmodel.safetensors.uform-partial-1-2|"
                       "model.safetensors|model.safetensors.tmp-1-2");
    /* Once its writer is gone, the next save cleans it too. */
    if (held >= 0) close(held);
    CHECK(write_small(target, 3.0f) == UFORM_OK);
    CHECK(access(live, F_OK) != 0 && read_small(target) == 3.0f);
    remove_tree(dir);
    free(live), free(fifo), free(target), free(dir);
}

static int kill_self_at_second_report(void *user, size_t done, size_t total) {
    (void)user, (void)done, (void)total;
    static int calls;
    if (++calls == 2) raise(SIGKILL);
    return 0;
}

/* Tells the parent through a pipe that the write is half done, then waits to be killed. */
static int stall_at_second_report(void *user, size_t done, size_t total) {
    (void)done, (void)total;
    static int calls;
    if (++calls == 2) {
        if (write(*(int *)user, "w", 1) != 1) _exit(3);
        for (;;) pause();
    }
    return 0;
}

static uint8_t big_block[3 << 20];

/* Writes 9 MiB to path in a forked child whose progress handler is `handler`. */
static pid_t spawn_big_writer(const char *path, int (*handler)(void *, size_t, size_t),
                              void *user) {
    pid_t child = fork();
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a test that failed */
        uform_tensor_view_t views[3] = {{"x", UFORM_DTYPE_U8, 1, {sizeof(big_block)}, big_block},
                                        {"y", UFORM_DTYPE_U8, 1, {sizeof(big_block)}, big_block},
                                        {"z", UFORM_DTYPE_U8, 1, {sizeof(big_block)}, big_block}};
        uform_progress_t progress = {handler, user, 8};
        uform_safetensors_write(path, views, 3, NULL, 0, &progress);
        _exit(4); /* the handler never lets it finish */
    }
    return child;
}

/* Counts entries of dir whose names start with prefix. */
static size_t count_prefixed(const char *dir, const char *prefix) {
    DIR *stream = opendir(dir);
    size_t count = 0;
    struct dirent *entry;
    while (stream && (entry = readdir(stream)))
        if (strncmp(entry->d_name, prefix, strlen(prefix)) == 0) count++;
    if (stream) closedir(stream);
    return count;
}

/* A save killed half way, a cancelled one and a failing one leave the old file
 * and, once the next save has run, nothing else; in both temporary modes. */
static void test_interrupted_writes_leave_nothing(void) {
    for (int named = 0; named < 2; named++) {
        uform_safetensors_named_temporaries = named;
        char *dir = fresh_directory(named ? "killed-named" : "killed-tmpfile");
        char *target = join(dir, "model.safetensors");
        CHECK(write_small(target, 1.0f) == UFORM_OK);

        pid_t child = spawn_big_writer(target, kill_self_at_second_report, NULL);
        int status = 0;
        CHECK(child > 0 && waitpid(child, &status, 0) == child);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        /* An unnamed temporary vanishes with its writer; a named one stays
         * until the next save of the same target sees that no one holds it. */
        CHECK(count_prefixed(dir, ".model.safetensors.uform-partial-") == (size_t)named);
        CHECK(read_small(target) == 1.0f);
        CHECK(write_small(target, 2.0f) == UFORM_OK);
        CHECK_LISTING(dir, "model.safetensors");
        CHECK(read_small(target) == 2.0f);

        /* A writer still running keeps its temporary while another save runs. */
        int ends[2];
        CHECK(pipe(ends) == 0);
        child = spawn_big_writer(target, stall_at_second_report, &ends[1]);
        close(ends[1]); /* so the read below ends if the child dies early */
        char byte = 0;
        CHECK(read(ends[0], &byte, 1) == 1 && byte == 'w');
        CHECK(count_prefixed(dir, ".model.safetensors.uform-partial-") == (size_t)named);
        CHECK(write_small(target, 3.0f) == UFORM_OK);
        CHECK(count_prefixed(dir, ".model.safetensors.uform-partial-") == (size_t)named);
        kill(child, SIGKILL);
        CHECK(waitpid(child, &status, 0) == child);
        close(ends[0]);
        CHECK(write_small(target, 4.0f) == UFORM_OK);
        CHECK_LISTING(dir, "model.safetensors");

        /* Cancelled by the progress handler, and failing half way (file size limit). */
        uform_tensor_view_t views[3] = {{"x", UFORM_DTYPE_U8, 1, {sizeof(big_block)}, big_block},
                                        {"y", UFORM_DTYPE_U8, 1, {sizeof(big_block)}, big_block},
                                        {"z", UFORM_DTYPE_U8, 1, {sizeof(big_block)}, big_block}};
        progress_log_t log = {0, 0, 0, 2};
        uform_progress_t progress = {record_progress, &log, 8};
        CHECK(uform_safetensors_write(target, views, 3, NULL, 0, &progress) == UFORM_CANCELLED);
        CHECK_LISTING(dir, "model.safetensors");
        struct rlimit saved;
        CHECK(getrlimit(RLIMIT_FSIZE, &saved) == 0);
        struct rlimit small = {1 << 20, saved.rlim_max};
        void (*previous)(int) = signal(SIGXFSZ, SIG_IGN);
        CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);
        uform_status_t result = uform_safetensors_write(target, views, 3, NULL, 0, NULL);
        CHECK(setrlimit(RLIMIT_FSIZE, &saved) == 0);
        signal(SIGXFSZ, previous);
        CHECK(result == UFORM_FILE && strstr(uform_last_error(), target));
        CHECK_LISTING(dir, "model.safetensors");
        CHECK(read_small(target) == 4.0f);
        remove_tree(dir);
        free(target), free(dir);
    }
    uform_safetensors_named_temporaries = false;
}

static void test_write_refuses_non_finite(void) {
    char *dir = fresh_directory("finite");
    char *target = join(dir, "model.safetensors");
    CHECK(write_small(target, 1.0f) == UFORM_OK);
    size_t before_size = 0;
    uint8_t *before = read_whole(target, &before_size);

    float first[2] = {1.0f, 2.0f};
    float f32_nan[4] = {1.0f, 2.0f, 3.0f, NAN};
    float f32_inf[3] = {INFINITY, 0.0f, 0.0f};
    double f64[3] = {1.0, -INFINITY, 2.0};
    uint16_t bf16_inf[2] = {0x3f80, 0x7f80}, bf16_nan[3] = {0, 0, 0xffc1};
    uint16_t f16_inf[3] = {0x3c00, 0x3c00, 0xfc00}, f16_nan[2] = {0x7e00, 0};
    static float large[1000000];
    large[999999] = -NAN;
    struct {
        uform_tensor_view_t view;
        const char *expected;
    } cases[] = {
        {{"f32", UFORM_DTYPE_F32, 2, {2, 2}, f32_nan},
         "tensor 'f32' holds a non-finite value (nan) at element 3"},
        {{"f32", UFORM_DTYPE_F32, 1, {3}, f32_inf}, "(inf) at element 0"},
        {{"f64", UFORM_DTYPE_F64, 1, {3}, f64},
         "tensor 'f64' holds a non-finite value (-inf) at element 1"},
        {{"bf16", UFORM_DTYPE_BF16, 1, {2}, bf16_inf},
         "tensor 'bf16' holds a non-finite value (inf) at element 1"},
        {{"bf16", UFORM_DTYPE_BF16, 1, {3}, bf16_nan}, "(nan) at element 2"},
        {{"f16", UFORM_DTYPE_F16, 1, {3}, f16_inf},
         "tensor 'f16' holds a non-finite value (-inf) at element 2"},
        {{"f16", UFORM_DTYPE_F16, 1, {2}, f16_nan}, "(nan) at element 0"},
        {{"large", UFORM_DTYPE_F32, 2, {1000, 1000}, large}, "(nan) at element 999999"},
    };
    char *fresh = join(dir, "never.safetensors");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uform_tensor_view_t views[2] = {{"first", UFORM_DTYPE_F32, 1, {2}, first}, cases[i].view};
        uform_status_t status = uform_safetensors_write(target, views, 2, NULL, 0, NULL);
        const char *message = uform_last_error();
        if (status != UFORM_INVALID_ARGUMENT || !strstr(message, target) ||
            !strstr(message, cases[i].expected) ||
            !strstr(message, "nothing was written, the file at the path is unchanged")) {
            fprintf(stderr, "non-finite case %zu: expected INVALID_ARGUMENT with '%s', got %d: %s\n",
                    i, cases[i].expected, (int)status, message);
            checks_failed++;
        }
        size_t after_size = 0;
        uint8_t *after = read_whole(target, &after_size);
        CHECK(after && after_size == before_size && memcmp(after, before, before_size) == 0);
        free(after);
        CHECK(uform_safetensors_write(fresh, views, 2, NULL, 0, NULL) == UFORM_INVALID_ARGUMENT);
        CHECK_LISTING(dir, "model.safetensors");
    }
    /* The extremes of each format are finite; integers and bytes are not looked at. */
    uint32_t f32_bits[4] = {0x7f7fffffu, 0xff7fffffu, 0x00000001u, 0x80000000u};
    uint16_t bf16_max[2] = {0x7f7f, 0xff7f}, f16_max[2] = {0x7bff, 0xfbff};
    uint32_t u32[1] = {0xffffffffu};
    uform_tensor_view_t finite[4] = {{"a", UFORM_DTYPE_F32, 1, {4}, f32_bits},
                                     {"b", UFORM_DTYPE_BF16, 1, {2}, bf16_max},
                                     {"c", UFORM_DTYPE_F16, 1, {2}, f16_max},
                                     {"d", UFORM_DTYPE_U32, 1, {1}, u32}};
    CHECK(uform_safetensors_write(fresh, finite, 4, NULL, 0, NULL) == UFORM_OK);
    free(before);
    remove_tree(dir);
    free(fresh), free(target), free(dir);
}

/* ---- reader: pipes, FIFOs and devices ------------------------------------------- */

/* Runs fn in a forked child under an alarm and an address-space limit of its
 * current size plus 512 MiB (ASan reserves terabytes up front), so a reader
 * that reads without limit fails the test instead of eating the machine. */
static void run_bounded(const char *what, void (*fn)(void)) {
    fflush(stderr);
    pid_t child = fork();
    if (child == 0) {
        unsigned long long kilobytes = 0;
        FILE *status = fopen("/proc/self/status", "r");
        char line[256];
        while (status && fgets(line, sizeof(line), status))
            if (sscanf(line, "VmSize: %llu kB", &kilobytes) == 1) break;
        if (status) fclose(status);
        if (kilobytes) {
            struct rlimit limit;
            getrlimit(RLIMIT_AS, &limit);
            limit.rlim_cur = (rlim_t)kilobytes * 1024 + ((rlim_t)512 << 20);
            setrlimit(RLIMIT_AS, &limit);
        }
        alarm(20);
        checks_failed = 0;
        fn();
        _exit(checks_failed ? 1 : 0);
    }
    int status = 0;
    CHECK(child > 0 && waitpid(child, &status, 0) == child);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "%s: the bounded child %s %d\n", what,
                WIFSIGNALED(status) ? "was killed by signal" : "exited with",
                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        checks_failed++;
    }
}

static void expect_open(const char *path, uform_status_t expected, const char *word, int line) {
    uform_safetensors_t file;
    uform_status_t status = uform_safetensors_open(path, &file);
    if (status != expected || (word && (!strstr(uform_last_error(), path) ||
                                        !strstr(uform_last_error(), word)))) {
        fprintf(stderr, "%s:%d: opening %s: expected %d with '%s', got %d: %s\n", __FILE__, line,
                path, (int)expected, word ? word : "", (int)status, uform_last_error());
        checks_failed++;
    }
    if (status == UFORM_OK) uform_safetensors_close(&file);
    CHECK(is_zeroed(&file));
}

static void read_dev_zero(void) {
    expect_open("/dev/zero", UFORM_FORMAT, "header length is 0", __LINE__);
    expect_open("/dev/null", UFORM_FORMAT, "shorter", __LINE__);
}

static void read_dev_urandom(void) {
    /* Its first 8 bytes are a random header length: refused before reading on. */
    for (int i = 0; i < 4; i++) expect_open("/dev/urandom", UFORM_FORMAT, "safetensors", __LINE__);
}

/* Opens fifo_path after a forked feeder starts writing `bytes` into it; the
 * feeder then keeps the FIFO open (a reader waiting for the end never returns)
 * unless close_after. */
static void feed_fifo(const char *fifo_path, const uint8_t *bytes, size_t size, bool close_after,
                      uform_status_t expected, const char *word, int line) {
    pid_t feeder = fork();
    if (feeder == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(fifo_path, O_WRONLY);
        if (fd < 0 || write(fd, bytes, size) != (ssize_t)size) _exit(1);
        if (close_after) _exit(0);
        for (;;) pause();
    }
    expect_open(fifo_path, expected, word, line);
    kill(feeder, SIGKILL);
    waitpid(feeder, NULL, 0);
}

/* Opens the read end of a pipe through /proc/self/fd after writing bytes into it. */
static uform_status_t open_pipe(const uint8_t *bytes, size_t size, uform_safetensors_t *file,
                                int *read_end) {
    int ends[2];
    if (pipe(ends) != 0) abort();
    if (write(ends[1], bytes, size) != (ssize_t)size) abort();
    close(ends[1]);
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", ends[0]);
    uform_status_t status = uform_safetensors_open(path, file);
    if (read_end) *read_end = ends[0];
    else close(ends[0]);
    return status;
}

static void read_streams(void) {
    char *fifo = path_in_directory("stream.fifo");
    CHECK(mkfifo(fifo, 0600) == 0);
    uint8_t length[10];
    /* Header lengths refused from the 8 bytes alone, the writer still open. */
    put_le64(length, UINT64_MAX);
    memcpy(length + 8, "{}", 2);
    feed_fifo(fifo, length, 10, false, UFORM_FORMAT, "limit", __LINE__);
    put_le64(length, (uint64_t)UFORM_SAFETENSORS_MAX_HEADER + 1);
    feed_fifo(fifo, length, 10, false, UFORM_FORMAT, "limit", __LINE__);
    put_le64(length, 0);
    feed_fifo(fifo, length, 10, false, UFORM_FORMAT, "header length is 0", __LINE__);
    put_le64(length, 1);
    feed_fifo(fifo, length, 10, false, UFORM_FORMAT, "smallest", __LINE__);
    /* The largest header allowed, but the stream ends early. */
    put_le64(length, UFORM_SAFETENSORS_MAX_HEADER);
    feed_fifo(fifo, length, 10, true, UFORM_FORMAT, "truncated", __LINE__);
    feed_fifo(fifo, length, 5, true, UFORM_FORMAT, "shorter", __LINE__);
    /* A valid header read exactly, then the data region read exactly. */
    size_t size;
    uint8_t *bytes = build("{" T("p", "U8", "[3]", 0, 3) "}", 3, &size);
    feed_fifo(fifo, bytes, size, false, UFORM_OK, NULL, __LINE__);
    feed_fifo(fifo, bytes, size - 1, true, UFORM_FORMAT, "truncated", __LINE__);
    free(bytes);
    /* A header that is not valid is refused before any data is read. */
    bytes = build("{" T("p", "U8", "[3]", 0, 4) "}", 4, &size);
    feed_fifo(fifo, bytes, size - 4, false, UFORM_FORMAT, "tensor 'p'", __LINE__);
    free(bytes);
    /* Data regions nobody could hold: overflowing, then beyond the machine's memory. */
    bytes = build("{" T("p", "U8", "[18446744073709551608]", 0, 18446744073709551608) "}", 0,
                  &size);
    feed_fifo(fifo, bytes, size, false, UFORM_FORMAT, "overflows", __LINE__);
    free(bytes);
    bytes = build("{" T("p", "U8", "[1125899906842624]", 0, 1125899906842624) "}", 0, &size);
    feed_fifo(fifo, bytes, size, false, UFORM_OUT_OF_MEMORY, "memory", __LINE__);
    free(bytes);
    unlink(fifo);
    free(fifo);

    /* Bytes after the declared end of a pipe are left unread, not an error:
     * a pipe cannot show them without reading on, maybe forever. */
    bytes = build("{" T("p", "U8", "[3]", 0, 3) "}", 3, &size);
    uint8_t *longer = malloc(size + 6);
    memcpy(longer, bytes, size);
    memcpy(longer + size, "EXTRA!", 6);
    uform_safetensors_t file;
    int read_end = -1;
    CHECK(open_pipe(longer, size + 6, &file, &read_end) == UFORM_OK);
    CHECK(file.tensors_count == 1 && file.size == size);
    if (file.tensors_count == 1) CHECK(memcmp(file.tensors[0].data, bytes + size - 3, 3) == 0);
    uform_safetensors_close(&file);
    char rest[16] = "";
    CHECK(read(read_end, rest, sizeof(rest)) == 6 && memcmp(rest, "EXTRA!", 6) == 0);
    close(read_end);
    free(longer);
    free(bytes);
}

static void test_read_non_regular(void) {
    run_bounded("/dev/zero and /dev/null", read_dev_zero);
    run_bounded("/dev/urandom", read_dev_urandom);
    run_bounded("FIFOs and pipes", read_streams);
}

/* ---- JSON ------------------------------------------------------------------------- */

/* The source of the last successful json() call: number_text points into it. */
static char *json_source;

/* Parses an exact-size heap copy of text (no terminating NUL), so ASan sees overreads. */
static uform_status_t json(const char *text, size_t max_depth, uform_json_t *root) {
    size_t length = strlen(text);
    char *copy = malloc(length ? length : 1);
    if (!copy) abort();
    memcpy(copy, text, length);
    uform_status_t status = uform_json_parse(copy, length, max_depth, root);
    if (status == UFORM_OK) {
        free(json_source);
        json_source = copy;
    } else {
        free(copy);
    }
    return status;
}

static void json_done(uform_json_t *root) {
    uform_json_free(root);
    free(json_source);
    json_source = NULL;
}

static void expect_json_error(const char *text, size_t max_depth, const char *word, int line) {
    uform_json_t root;
    uform_status_t status = json(text, max_depth, &root);
    if (status != UFORM_FORMAT || !strstr(uform_last_error(), word)) {
        fprintf(stderr, "%s:%d: JSON %s: expected UFORM_FORMAT with '%s', got %d: %s\n",
                __FILE__, line, text, word, (int)status, uform_last_error());
        checks_failed++;
        if (status == UFORM_OK) json_done(&root);
    }
}
#define EXPECT_JSON_ERROR(text, word) expect_json_error(text, 16, word, __LINE__)

static void test_json_strings(void) {
    uform_json_t root;
    CHECK(json("\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", 16, &root) == UFORM_OK);
    CHECK(root.kind == UFORM_JSON_STRING && root.length == 8 &&
          memcmp(root.string, "\"\\/\b\f\n\r\t", 9) == 0);
    json_done(&root);

    CHECK(json("\"\\u00e9\\u20AC\\ud83d\\ude00 \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"", 16,
               &root) == UFORM_OK);
    const char *expected = "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
    CHECK(root.length == strlen(expected) && strcmp(root.string, expected) == 0);
    json_done(&root);

    CHECK(json("\"a\\u0000b\"", 16, &root) == UFORM_OK); /* NUL kept in values */
    CHECK(root.length == 3 && memcmp(root.string, "a\0b", 4) == 0);
    json_done(&root);

    CHECK(json("\"\x7f\xf4\x8f\xbf\xbf\"", 16, &root) == UFORM_OK); /* DEL, U+10FFFF */
    CHECK(root.length == 5);
    json_done(&root);

    EXPECT_JSON_ERROR("\"\\ud83d\"", "unpaired high surrogate");
    EXPECT_JSON_ERROR("\"\\ud83dx\"", "unpaired high surrogate");
    EXPECT_JSON_ERROR("\"\\ud83d\\u0041\"", "unpaired high surrogate");
    EXPECT_JSON_ERROR("\"\\ud83d\\ud83d\"", "unpaired high surrogate");
    EXPECT_JSON_ERROR("\"\\ude00\"", "unpaired low surrogate");
    EXPECT_JSON_ERROR("\"\\u12\"", "four hex digits");
    EXPECT_JSON_ERROR("\"\\u12g4\"", "four hex digits");
    EXPECT_JSON_ERROR("\"\\x\"", "invalid escape");
    EXPECT_JSON_ERROR("\"\\'\"", "invalid escape");
    EXPECT_JSON_ERROR("\"a\x01\"", "control character 0x01");
    EXPECT_JSON_ERROR("\"a\tb\"", "control character 0x09");
    EXPECT_JSON_ERROR("\"a\nb\"", "control character");
    EXPECT_JSON_ERROR("\"\xc0\x80\"", "UTF-8");         /* overlong NUL */
    EXPECT_JSON_ERROR("\"\xe0\x80\xaf\"", "UTF-8");     /* overlong '/' */
    EXPECT_JSON_ERROR("\"\xed\xa0\x80\"", "UTF-8");     /* encoded surrogate */
    EXPECT_JSON_ERROR("\"\xf4\x90\x80\x80\"", "UTF-8"); /* above U+10FFFF */
    EXPECT_JSON_ERROR("\"\xe2\x82\"", "UTF-8");         /* truncated */
    EXPECT_JSON_ERROR("\"\x80\"", "UTF-8");             /* lone continuation */
    EXPECT_JSON_ERROR("\"\xff\"", "UTF-8");
    EXPECT_JSON_ERROR("\"abc", "unterminated string");
    EXPECT_JSON_ERROR("\"abc\\\"", "unterminated string");
    EXPECT_JSON_ERROR("\"abc\\", "unterminated string");
    EXPECT_JSON_ERROR("'a'", "expected a value");
    EXPECT_JSON_ERROR("\xef\xbb\xbf\"a\"", "expected a value"); /* no BOM */
    EXPECT_JSON_ERROR("{\"a\\u0000\":1}", "NUL");
}

static void test_json_numbers(void) {
    uform_json_t root;
    uint64_t value;
    CHECK(json("1e400", 16, &root) == UFORM_OK);
    CHECK(root.kind == UFORM_JSON_NUMBER && isinf(root.number) && root.number > 0);
    CHECK(!uform_json_u64(&root, &value));
    json_done(&root);
    CHECK(json("-1e400", 16, &root) == UFORM_OK && isinf(root.number) && root.number < 0);
    json_done(&root);
    CHECK(json("1e-400", 16, &root) == UFORM_OK && root.number == 0);
    json_done(&root);
    CHECK(json("-0", 16, &root) == UFORM_OK);
    CHECK(root.number == 0 && signbit(root.number) && !uform_json_u64(&root, &value));
    json_done(&root);
    CHECK(json("0", 16, &root) == UFORM_OK && uform_json_u64(&root, &value) && value == 0);
    json_done(&root);
    CHECK(json(" -1.5e-3 ", 16, &root) == UFORM_OK && root.number == -1.5e-3);
    CHECK(root.number_text_length == 7 && memcmp(root.number_text, "-1.5e-3", 7) == 0);
    json_done(&root);
    CHECK(json("1E+5", 16, &root) == UFORM_OK && root.number == 1e5 &&
          !uform_json_u64(&root, &value));
    json_done(&root);
    CHECK(json("0.1", 16, &root) == UFORM_OK && root.number == 0.1);
    json_done(&root);
    CHECK(json("18446744073709551615", 16, &root) == UFORM_OK);
    CHECK(uform_json_u64(&root, &value) && value == UINT64_MAX);
    json_done(&root);
    CHECK(json("18446744073709551616", 16, &root) == UFORM_OK);
    CHECK(!uform_json_u64(&root, &value) && root.number == 18446744073709551616.0);
    json_done(&root);
    CHECK(json("1.0", 16, &root) == UFORM_OK && !uform_json_u64(&root, &value));
    json_done(&root);
    CHECK(json("\"1\"", 16, &root) == UFORM_OK && !uform_json_u64(&root, &value));
    json_done(&root);
    CHECK(!uform_json_u64(NULL, &value));

    /* A very long number still converts (strtod sees all its digits). */
    size_t digits = 100000;
    char *long_number = malloc(digits + 1);
    memset(long_number, '9', digits);
    long_number[digits] = '\0';
    long_number[0] = '1';
    CHECK(json(long_number, 16, &root) == UFORM_OK && isinf(root.number));
    json_done(&root);
    free(long_number);

    /* Decimal points do not follow the host program's locale. */
    const char *locales[] = {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "ru_RU.UTF-8"};
    for (size_t i = 0; i < sizeof(locales) / sizeof(locales[0]); i++) {
        if (!setlocale(LC_NUMERIC, locales[i])) continue;
        CHECK(json("2.5", 16, &root) == UFORM_OK && root.number == 2.5);
        json_done(&root);
        setlocale(LC_NUMERIC, "C");
        break;
    }

    EXPECT_JSON_ERROR("01", "leading zeros");
    EXPECT_JSON_ERROR("-01", "leading zeros");
    EXPECT_JSON_ERROR("00", "leading zeros");
    EXPECT_JSON_ERROR("1.", "digit after '.'");
    EXPECT_JSON_ERROR("1.e5", "digit after '.'");
    EXPECT_JSON_ERROR(".5", "expected a value");
    EXPECT_JSON_ERROR("+1", "expected a value");
    EXPECT_JSON_ERROR("-", "expected a digit");
    EXPECT_JSON_ERROR("-a", "expected a digit");
    EXPECT_JSON_ERROR("1e", "exponent");
    EXPECT_JSON_ERROR("1e+", "exponent");
    EXPECT_JSON_ERROR("0x10", "after the value");
    EXPECT_JSON_ERROR("NaN", "expected a value");
    EXPECT_JSON_ERROR("Infinity", "expected a value");
    EXPECT_JSON_ERROR("-Infinity", "expected a digit");
    EXPECT_JSON_ERROR("1 2", "after the value");
}

static void test_json_structure(void) {
    uform_json_t root;
    CHECK(json(" {\"a\" : [1, true, false, null, {}, [], \"s\"], \"b\":{\"c\":-2}, \"a\":3 } ",
               16, &root) == UFORM_OK);
    CHECK(root.kind == UFORM_JSON_OBJECT && root.length == 3); /* duplicates kept */
    const uform_json_t *a = uform_json_get(&root, "a");
    CHECK(a && a->kind == UFORM_JSON_ARRAY && a->length == 7);
    if (a && a->length == 7) {
        CHECK(a->children[1].kind == UFORM_JSON_TRUE && a->children[2].kind == UFORM_JSON_FALSE);
        CHECK(a->children[3].kind == UFORM_JSON_NULL);
        CHECK(a->children[4].kind == UFORM_JSON_OBJECT && a->children[4].length == 0);
        CHECK(a->children[5].kind == UFORM_JSON_ARRAY && a->children[5].length == 0);
        CHECK(a->children[6].kind == UFORM_JSON_STRING && strcmp(a->children[6].string, "s") == 0);
    }
    CHECK(strcmp(root.keys[2], "a") == 0 && root.children[2].number == 3);
    const uform_json_t *c = uform_json_get(uform_json_get(&root, "b"), "c");
    CHECK(c && c->number == -2 && c->source_offset == 54);
    CHECK(uform_json_get(&root, "zz") == NULL && uform_json_get(a, "a") == NULL);
    CHECK(uform_json_get(NULL, "a") == NULL);
    json_done(&root);

    /* The message names the byte offset. */
    CHECK(json("{\"a\" 1}", 16, &root) == UFORM_FORMAT);
    CHECK(strcmp(uform_last_error(), "JSON at byte 5: expected ':', found '1'") == 0);
    CHECK(root.kind == UFORM_JSON_NULL && root.children == NULL); /* zeroed on failure */
    CHECK(json("[1,\n2,\n]", 16, &root) == UFORM_FORMAT);
    CHECK(strcmp(uform_last_error(), "JSON at byte 7: expected a value, found ']'") == 0);

    /* Depth: each array or object is one level. */
    CHECK(json("[[[]]]", 3, &root) == UFORM_OK);
    json_done(&root);
    CHECK(json("[[[1]]]", 3, &root) == UFORM_OK);
    json_done(&root);
    expect_json_error("[[[]]]", 2, "nesting deeper than 2", __LINE__);
    expect_json_error("{\"a\":{\"b\":{}}}", 2, "nesting", __LINE__);
    CHECK(json("5", 0, &root) == UFORM_OK);
    json_done(&root);
    expect_json_error("[]", 0, "nesting", __LINE__);
    size_t deep = 1000000;
    char *brackets = malloc(deep + 1);
    memset(brackets, '[', deep);
    brackets[deep] = '\0';
    expect_json_error(brackets, 64, "nesting deeper than 64", __LINE__);
    memset(brackets, '{', deep);
    expect_json_error(brackets, 64, "expected a string key", __LINE__);
    free(brackets);

    /* Wide arrays grow and free cleanly; failing late frees everything. */
    size_t wide = 100000;
    char *items = malloc(wide * 4 + 3);
    size_t used = 0;
    items[used++] = '[';
    for (size_t i = 0; i < wide; i++) {
        memcpy(items + used, i ? ",[\"x\"]" : "[\"x\"]", i ? 6 : 5);
        used += i ? 6 : 5;
        if (used > wide * 4 - 8) break;
    }
    items[used++] = ']';
    items[used] = '\0';
    CHECK(json(items, 16, &root) == UFORM_OK && root.length > 1000);
    json_done(&root);
    items[used - 1] = ',';
    expect_json_error(items, 16, "expected a value", __LINE__);
    free(items);

    EXPECT_JSON_ERROR("", "expected a value, found end of input");
    EXPECT_JSON_ERROR("  \n ", "expected a value");
    EXPECT_JSON_ERROR("tru", "invalid literal");
    EXPECT_JSON_ERROR("nul", "invalid literal");
    EXPECT_JSON_ERROR("True", "expected a value");
    EXPECT_JSON_ERROR("truex", "after the value");
    EXPECT_JSON_ERROR("[1,]", "expected a value");
    EXPECT_JSON_ERROR("[1 2]", "expected ',' or ']'");
    EXPECT_JSON_ERROR("[1", "expected ',' or ']', found end of input");
    EXPECT_JSON_ERROR("{\"a\":1,}", "expected a string key");
    EXPECT_JSON_ERROR("{\"a\":1 \"b\":2}", "expected ',' or '}'");
    EXPECT_JSON_ERROR("{1:2}", "expected a string key");
    EXPECT_JSON_ERROR("{\"a\"}", "expected ':'");
    EXPECT_JSON_ERROR("{\"a\":}", "expected a value");
    EXPECT_JSON_ERROR("{\"a\":1", "expected ',' or '}'");
    EXPECT_JSON_ERROR("[\f1]", "byte 0x0c"); /* form feed is not JSON whitespace */
    EXPECT_JSON_ERROR("{}}", "after the value");

    /* Embedded NUL bytes are data, not a terminator. */
    char with_nul[3] = {'1', '\0', ' '};
    CHECK(uform_json_parse(with_nul, 3, 16, &root) == UFORM_FORMAT);
    CHECK(strstr(uform_last_error(), "byte 1: unexpected byte 0x00"));
    CHECK(uform_json_parse(NULL, 0, 16, &root) == UFORM_FORMAT);
    CHECK(uform_json_parse("1", 1, 16, NULL) == UFORM_INVALID_ARGUMENT);
    uform_json_free(NULL);
}

/* ---- main --------------------------------------------------------------------------- */

int main(void) {
    snprintf(directory, sizeof(directory), "/tmp/uform-safetensors-XXXXXX");
    if (!mkdtemp(directory)) {
        perror("mkdtemp");
        return 2;
    }
    struct {
        const char *name;
        void (*run)(void);
    } tests[] = {
        {"round_trip", test_round_trip},
        {"round_trip_empty", test_round_trip_empty},
        {"writer_refusals", test_writer_refusals},
        {"reader_refusals", test_reader_refusals},
        {"reader_accepts", test_reader_accepts},
        {"open_errors", test_open_errors},
        {"write_refuses_non_regular", test_write_refuses_non_regular},
        {"write_through_symlink", test_write_through_symlink},
        {"stale_temporaries", test_stale_temporaries},
        {"interrupted_writes_leave_nothing", test_interrupted_writes_leave_nothing},
        {"write_refuses_non_finite", test_write_refuses_non_finite},
        {"read_non_regular", test_read_non_regular},
        {"json_strings", test_json_strings},
        {"json_numbers", test_json_numbers},
        {"json_structure", test_json_structure},
    };
    size_t count = sizeof(tests) / sizeof(tests[0]);
    int passed = 0, failed = 0;
    for (size_t i = 0; i < count; i++) {
        checks_failed = 0;
        tests[i].run();
        if (checks_failed) {
            fprintf(stderr, "FAIL %s (%d checks)\n", tests[i].name, checks_failed);
            failed++;
        } else {
            passed++;
        }
    }
    rmdir(directory);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
