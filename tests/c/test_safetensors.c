/* test_safetensors.c: the safetensors reader/writer and the JSON parser.
 *
 * A standalone program: each test_* function is one test; the last line is
 * "N passed, M failed" and the exit status is nonzero when any failed. Meant
 * to run under ASan/UBSan, so every buffer handed to the parser is a heap
 * block of exactly its size.
 */
#include "safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
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
        if (strstr(entry->d_name, ".tmp-")) found = true;
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
    uint16_t bf16[4] = {0x3f80, 0xbf80, 0x7f80, 0x0001};
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

    /* The path is a directory: rename fails, the temporary file is removed. */
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
