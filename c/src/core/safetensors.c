/* safetensors.c: the validating reader of safetensors files (the writer is
 * safetensors_write.c).
 *
 * The reader trusts nothing: every length, offset and size is checked before
 * it is used, and a file is accepted only when its tensors tile the data
 * region exactly (sorted by offset, from 0, no gaps, no overlaps, no trailing
 * bytes), as the reference Rust implementation requires. Tensors keep the
 * header's order. Headers need not be padded and data need not be aligned:
 * tensor pointers may be unaligned, so callers memcpy.
 *
 * What cannot be mapped (pipes, FIFOs, devices such as /dev/zero) is read
 * only as far as the checked header declares, never to an end that may not
 * come.
 *
 * The writer lays tensors out contiguously in the order given and pads the
 * header with spaces to a multiple of 8, so the data region starts 8-byte
 * aligned. It refuses non-finite float values and targets that are not
 * regular files before creating anything, follows symbolic links to the file
 * they name, and replaces that file atomically: an unnamed O_TMPFILE file
 * beside it, locked with flock, is written, fsynced, linked under a temporary
 * name and renamed over it (protocol and fallbacks in safetensors.h). Each
 * write first removes temporaries of the same file that no live writer locks.
 */
#include "core/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The header needs 3 levels (file object, tensor entry, shape); the slack lets
 * a nested __metadata__ value get the clearer "must be a string" message. */
#define ST_JSON_DEPTH 8
/* Names in messages are cut here so one message never drowns the rest. */
#define ST_NAME "'%.200s'"

static const struct {
    const char *name;
    size_t size;
} st_dtypes[] = {
    [UFORM_DTYPE_BOOL] = {"BOOL", 1},       [UFORM_DTYPE_U8] = {"U8", 1},
    [UFORM_DTYPE_I8] = {"I8", 1},           [UFORM_DTYPE_I16] = {"I16", 2},
    [UFORM_DTYPE_U16] = {"U16", 2},         [UFORM_DTYPE_F16] = {"F16", 2},
    [UFORM_DTYPE_BF16] = {"BF16", 2},       [UFORM_DTYPE_I32] = {"I32", 4},
    [UFORM_DTYPE_U32] = {"U32", 4},         [UFORM_DTYPE_F32] = {"F32", 4},
    [UFORM_DTYPE_I64] = {"I64", 8},         [UFORM_DTYPE_U64] = {"U64", 8},
    [UFORM_DTYPE_F64] = {"F64", 8},         [UFORM_DTYPE_F8_E4M3] = {"F8_E4M3", 1},
    [UFORM_DTYPE_F8_E5M2] = {"F8_E5M2", 1},
};
#define ST_DTYPE_COUNT (sizeof(st_dtypes) / sizeof(st_dtypes[0]))

size_t uform_dtype_size(uform_dtype_t dtype) {
    return (unsigned)dtype < ST_DTYPE_COUNT ? st_dtypes[dtype].size : 0;
}

const char *uform_dtype_name(uform_dtype_t dtype) {
    return (unsigned)dtype < ST_DTYPE_COUNT ? st_dtypes[dtype].name : "unknown";
}

/* ---- shared helpers ----------------------------------------------------------- */

static int st_compare_strings(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorts names[] and returns one that occurs twice, or NULL. */
const char *uform_st_find_duplicate(const char **names, size_t count) {
    if (count < 2) return NULL;
    qsort(names, count, sizeof(*names), st_compare_strings);
    for (size_t i = 1; i < count; i++)
        if (strcmp(names[i - 1], names[i]) == 0) return names[i];
    return NULL;
}

/* "[2, 3]" for messages, cut to fit. */
static const char *st_format_shape(const uint64_t *shape, size_t rank, char *buffer, size_t size) {
    size_t used = (size_t)snprintf(buffer, size, "[");
    for (size_t i = 0; i < rank && used < size; i++)
        used += (size_t)snprintf(buffer + used, size - used, "%s%" PRIu64, i ? ", " : "", shape[i]);
    if (used < size) snprintf(buffer + used, size - used, "]");
    return buffer;
}

/* The product of shape[0, rank) times element_size, or false on overflow.
 * Zero dimensions are set aside while checking, so every partial product of
 * an accepted shape fits in 64 bits and callers may multiply dims freely. */
bool uform_st_shape_bytes(const uint64_t *shape, size_t rank, size_t element_size, uint64_t *out) {
    uint64_t bytes = element_size;
    bool empty = false;
    for (size_t i = 0; i < rank; i++) {
        if (shape[i] == 0) empty = true;
        else if (__builtin_mul_overflow(bytes, shape[i], &bytes)) return false;
    }
    *out = empty ? 0 : bytes;
    return true;
}

/* ---- reader --------------------------------------------------------------------- */

typedef struct {
    uint64_t begin, end;
    size_t index;
} st_span_t;

static int st_compare_spans(const void *a, const void *b) {
    const st_span_t *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static uint64_t st_load_le64(const uint8_t *bytes) {
    uint64_t value = 0;
    for (int i = 7; i >= 0; i--) value = (value << 8) | bytes[i];
    return value;
}

/* Takes over metadata from the "__metadata__" object, stealing its strings. */
static uform_status_t st_read_metadata(uform_json_t *object, uform_safetensors_t *file) {
    if (object->kind != UFORM_JSON_OBJECT)
        return uform_fail(UFORM_FORMAT, "safetensors __metadata__ must be an object of strings");
    file->metadata = uform_alloc_zeroed(object->length, sizeof(*file->metadata),
                                        "safetensors metadata");
    if (!file->metadata) return UFORM_OUT_OF_MEMORY;
    for (size_t i = 0; i < object->length; i++) {
        uform_json_t *value = &object->children[i];
        if (value->kind != UFORM_JSON_STRING)
            return uform_fail(UFORM_FORMAT,
                              "safetensors __metadata__ value of key " ST_NAME " must be a string",
                              object->keys[i]);
        if (memchr(value->string, '\0', value->length))
            return uform_fail(UFORM_FORMAT,
                              "safetensors __metadata__ value of key " ST_NAME " holds NUL",
                              object->keys[i]);
        uform_metadata_entry_t *entry = &file->metadata[file->metadata_count++];
        entry->key = object->keys[i];
        entry->value = value->string;
        object->keys[i] = NULL;
        value->string = NULL;
    }
    return UFORM_OK;
}

/* Checks one tensor entry; fills *tensor (all but name and data) and its span. */
static uform_status_t st_read_tensor(const char *name, const uform_json_t *entry,
                                     uint64_t data_size, uform_tensor_t *tensor,
                                     st_span_t *span) {
    static const char *const wanted[3] = {"dtype", "shape", "data_offsets"};
    const uform_json_t *fields[3] = {NULL, NULL, NULL};
    if (entry->kind != UFORM_JSON_OBJECT)
        return uform_fail(UFORM_FORMAT, "safetensors tensor " ST_NAME ": entry must be an object",
                          name);
    for (size_t i = 0; i < entry->length; i++) {
        size_t k = 0;
        while (k < 3 && strcmp(entry->keys[i], wanted[k]) != 0) k++;
        if (k == 3)
            return uform_fail(UFORM_FORMAT, "safetensors tensor " ST_NAME ": unknown key " ST_NAME,
                              name, entry->keys[i]);
        if (fields[k])
            return uform_fail(UFORM_FORMAT, "safetensors tensor " ST_NAME ": duplicate key '%s'",
                              name, wanted[k]);
        fields[k] = &entry->children[i];
    }
    for (size_t k = 0; k < 3; k++)
        if (!fields[k])
            return uform_fail(UFORM_FORMAT, "safetensors tensor " ST_NAME ": missing key '%s'",
                              name, wanted[k]);

    const uform_json_t *dtype = fields[0], *shape = fields[1], *offsets = fields[2];
    if (dtype->kind != UFORM_JSON_STRING)
        return uform_fail(UFORM_FORMAT, "safetensors tensor " ST_NAME ": dtype must be a string",
                          name);
    size_t d = 0;
    while (d < ST_DTYPE_COUNT && !(strlen(st_dtypes[d].name) == dtype->length &&
                                   memcmp(st_dtypes[d].name, dtype->string, dtype->length) == 0))
        d++;
    if (d == ST_DTYPE_COUNT)
        return uform_fail(UFORM_FORMAT, "safetensors tensor " ST_NAME ": unknown dtype " ST_NAME,
                          name, dtype->string);
    tensor->dtype = (uform_dtype_t)d;

    if (shape->kind != UFORM_JSON_ARRAY)
        return uform_fail(UFORM_FORMAT, "safetensors tensor " ST_NAME ": shape must be an array",
                          name);
    if (shape->length > UFORM_SAFETENSORS_MAX_RANK)
        return uform_fail(UFORM_FORMAT,
                          "safetensors tensor " ST_NAME ": shape has rank %zu, more than %d", name,
                          shape->length, UFORM_SAFETENSORS_MAX_RANK);
    tensor->rank = shape->length;
    for (size_t i = 0; i < shape->length; i++)
        if (!uform_json_u64(&shape->children[i], &tensor->shape[i]))
            return uform_fail(UFORM_FORMAT,
                              "safetensors tensor " ST_NAME
                              ": shape[%zu] must be a non-negative integer below 2^64",
                              name, i);

    uint64_t begin, end;
    if (offsets->kind != UFORM_JSON_ARRAY || offsets->length != 2 ||
        !uform_json_u64(&offsets->children[0], &begin) ||
        !uform_json_u64(&offsets->children[1], &end))
        return uform_fail(UFORM_FORMAT,
                          "safetensors tensor " ST_NAME
                          ": data_offsets must be [begin, end], two non-negative integers",
                          name);
    if (begin > end)
        return uform_fail(UFORM_FORMAT,
                          "safetensors tensor " ST_NAME ": data_offsets begin %" PRIu64
                          " is after end %" PRIu64,
                          name, begin, end);
    if (end > data_size)
        return uform_fail(UFORM_FORMAT,
                          "safetensors tensor " ST_NAME ": data_offsets [%" PRIu64 ", %" PRIu64
                          "] lie outside the %" PRIu64 "-byte data region",
                          name, begin, end, data_size);

    char text[128];
    uint64_t bytes;
    if (!uform_st_shape_bytes(tensor->shape, tensor->rank, st_dtypes[d].size, &bytes))
        return uform_fail(UFORM_FORMAT,
                          "safetensors tensor " ST_NAME ": size of shape %s of %s overflows", name,
                          st_format_shape(tensor->shape, tensor->rank, text, sizeof(text)),
                          st_dtypes[d].name);
    if (bytes != end - begin)
        return uform_fail(UFORM_FORMAT,
                          "safetensors tensor " ST_NAME ": data_offsets span %" PRIu64
                          " bytes but shape %s of %s needs %" PRIu64,
                          name, end - begin,
                          st_format_shape(tensor->shape, tensor->rank, text, sizeof(text)),
                          st_dtypes[d].name, bytes);
    tensor->bytes = (size_t)bytes; /* <= the data region, whose size is checked to fit a size_t */
    span->begin = begin;
    span->end = end;
    return UFORM_OK;
}

/* Refuses duplicate names and checks that the spans tile [0, *data_size);
 * with !size_known, *data_size gets the end of the tiled region instead. */
static uform_status_t st_check_layout(const uform_safetensors_t *file, st_span_t *spans,
                                      uint64_t *data_size, bool size_known) {
    const char **names = uform_alloc(file->tensors_count + file->metadata_count + 1,
                                     sizeof(*names), "safetensors names");
    if (!names) return UFORM_OUT_OF_MEMORY;
    for (size_t i = 0; i < file->tensors_count; i++) names[i] = file->tensors[i].name;
    const char *duplicate = uform_st_find_duplicate(names, file->tensors_count);
    if (duplicate) {
        uform_status_t status = uform_fail(UFORM_FORMAT,
                                           "safetensors: duplicate tensor name " ST_NAME, duplicate);
        free(names);
        return status;
    }
    for (size_t i = 0; i < file->metadata_count; i++) names[i] = file->metadata[i].key;
    duplicate = uform_st_find_duplicate(names, file->metadata_count);
    if (duplicate) {
        uform_status_t status = uform_fail(
            UFORM_FORMAT, "safetensors: duplicate __metadata__ key " ST_NAME, duplicate);
        free(names);
        return status;
    }
    free(names);

    qsort(spans, file->tensors_count, sizeof(*spans), st_compare_spans);
    uint64_t covered = 0;
    for (size_t i = 0; i < file->tensors_count; i++) {
        const char *name = file->tensors[spans[i].index].name;
        if (spans[i].begin < covered)
            return uform_fail(UFORM_FORMAT,
                              "safetensors tensor " ST_NAME ": data_offsets [%" PRIu64
                              ", %" PRIu64 "] overlap tensor " ST_NAME,
                              name, spans[i].begin, spans[i].end,
                              file->tensors[spans[i - 1].index].name);
        if (spans[i].begin > covered)
            return uform_fail(UFORM_FORMAT,
                              "safetensors tensor " ST_NAME ": gap of %" PRIu64
                              " bytes before its data_offsets [%" PRIu64 ", %" PRIu64 "]",
                              name, spans[i].begin - covered, spans[i].begin, spans[i].end);
        covered = spans[i].end;
    }
    if (!size_known) *data_size = covered;
    else if (covered != *data_size)
        return uform_fail(UFORM_FORMAT,
                          "safetensors: %" PRIu64 " trailing bytes of the %" PRIu64
                          "-byte data region belong to no tensor",
                          *data_size - covered, *data_size);
    return UFORM_OK;
}

/* Fills file from the parsed header, stealing names and strings from root.
 * data: the data region of *data_size bytes; NULL with !size_known, where the
 * header alone is checked and *data_size gets the size it declares (tensor
 * data pointers stay NULL). */
static uform_status_t st_read_header(uform_json_t *root, const uint8_t *data, uint64_t *data_size,
                                     bool size_known, uform_safetensors_t *file) {
    if (root->kind != UFORM_JSON_OBJECT)
        return uform_fail(UFORM_FORMAT, "safetensors header: top level must be a JSON object");
    uint64_t limit = size_known ? *data_size : UINT64_MAX;

    file->tensors = uform_alloc_zeroed(root->length, sizeof(*file->tensors), "safetensors tensors");
    st_span_t *spans = uform_alloc(root->length, sizeof(*spans), "safetensors spans");
    if (!file->tensors || !spans) {
        free(spans);
        return UFORM_OUT_OF_MEMORY;
    }
    uform_status_t status = UFORM_OK;
    bool seen_metadata = false;
    for (size_t i = 0; i < root->length && status == UFORM_OK; i++) {
        char *name = root->keys[i];
        if (strcmp(name, "__metadata__") == 0) {
            if (seen_metadata)
                status = uform_fail(UFORM_FORMAT, "safetensors: duplicate __metadata__");
            else
                status = st_read_metadata(&root->children[i], file);
            seen_metadata = true;
            continue;
        }
        if (name[0] == '\0') {
            status = uform_fail(UFORM_FORMAT,
                                "safetensors header: empty tensor name (its entry at byte %zu)",
                                root->children[i].source_offset);
            continue;
        }
        uform_tensor_t *tensor = &file->tensors[file->tensors_count];
        st_span_t *span = &spans[file->tensors_count];
        status = st_read_tensor(name, &root->children[i], limit, tensor, span);
        if (status != UFORM_OK) continue;
        tensor->name = name;
        root->keys[i] = NULL;
        tensor->data = data ? data + span->begin : NULL;
        span->index = file->tensors_count++;
    }
    if (status == UFORM_OK) status = st_check_layout(file, spans, data_size, size_known);
    free(spans);
    return status;
}

/* The checks a header length passes before anything is allocated for it. */
static uform_status_t st_check_header_length(uint64_t header_length) {
    if (header_length == 0) return uform_fail(UFORM_FORMAT, "safetensors: header length is 0");
    if (header_length < 2) /* "{}" */
        return uform_fail(UFORM_FORMAT,
                          "safetensors: header length %" PRIu64
                          " is below the smallest header, the 2 bytes of \"{}\"",
                          header_length);
    if (header_length > UFORM_SAFETENSORS_MAX_HEADER)
        return uform_fail(UFORM_FORMAT,
                          "safetensors: header length %" PRIu64 " exceeds the limit of %u bytes",
                          header_length, UFORM_SAFETENSORS_MAX_HEADER);
    return UFORM_OK;
}

/* The size of the data region a header (the JSON after the length field)
 * declares, after every check uform_safetensors_parse makes of it. */
static uform_status_t st_header_data_size(const uint8_t *header, size_t length,
                                          uint64_t *data_size) {
    uform_json_t root;
    uform_status_t status = uform_json_parse((const char *)header, length, ST_JSON_DEPTH, &root);
    if (status != UFORM_OK)
        return status == UFORM_FORMAT ? uform_fail_context(status, "safetensors header") : status;
    uform_safetensors_t scratch;
    memset(&scratch, 0, sizeof(scratch));
    status = st_read_header(&root, NULL, data_size, false, &scratch);
    uform_json_free(&root);
    uform_safetensors_close(&scratch);
    return status;
}

uform_status_t uform_safetensors_parse(const void *data, size_t size, uform_safetensors_t *file) {
    if (!file) return uform_fail(UFORM_INVALID_ARGUMENT, "safetensors: file is NULL");
    memset(file, 0, sizeof(*file));
    if (!data && size) return uform_fail(UFORM_INVALID_ARGUMENT, "safetensors: data is NULL");
    if (size < 8)
        return uform_fail(UFORM_FORMAT,
                          "safetensors: file of %zu bytes is shorter than the 8-byte header length",
                          size);
    const uint8_t *bytes = data;
    uint64_t header_length = st_load_le64(bytes);
    UFORM_TRY(st_check_header_length(header_length));
    if (header_length > size - 8)
        return uform_fail(UFORM_FORMAT,
                          "safetensors: header length %" PRIu64
                          " exceeds the %zu bytes after the length field",
                          header_length, size - 8);

    uform_json_t root;
    uform_status_t status =
        uform_json_parse((const char *)bytes + 8, (size_t)header_length, ST_JSON_DEPTH, &root);
    if (status != UFORM_OK)
        return status == UFORM_FORMAT ? uform_fail_context(status, "safetensors header") : status;
    file->bytes = bytes;
    file->size = size;
    uint64_t data_size = size - 8 - header_length;
    status = st_read_header(&root, bytes + 8 + header_length, &data_size, true, file);
    uform_json_free(&root);
    if (status != UFORM_OK) uform_safetensors_close(file);
    return status;
}

/* Reads up to count bytes, stopping early only at the end of the stream;
 * answers the bytes read, or -1 with errno set. */
static ssize_t st_read_exact(int fd, uint8_t *buffer, size_t count) {
    size_t used = 0;
    while (used < count) {
        ssize_t got = read(fd, buffer + used, count - used);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return -1;
        if (got == 0) break;
        used += (size_t)got;
    }
    return (ssize_t)used;
}

/* Reads one file from fd, which was not mapped (a pipe, FIFO or device, or a
 * file that refused mmap), into an anonymous mapping that close munmaps: the
 * length field, the header, then exactly the data region the header declares.
 * Nothing is allocated before the header length is checked, and nothing past
 * the declared end is read: on a pipe, trailing bytes cannot be seen without
 * reading on, maybe forever, so they stay unread. UFORM_FORMAT messages are
 * left for the caller to prefix with the path. */
static uform_status_t st_read_stream(int fd, const char *path, void **mapping,
                                     size_t *mapping_size, size_t *size) {
    uint8_t length_field[8];
    ssize_t got = st_read_exact(fd, length_field, sizeof(length_field));
    if (got < 0) return uform_fail(UFORM_FILE, "cannot read '%s': %s", path, strerror(errno));
    if (got < 8)
        return uform_fail(UFORM_FORMAT,
                          "safetensors: file of %zd bytes is shorter than the 8-byte header length",
                          got);
    uint64_t header_length = st_load_le64(length_field);
    UFORM_TRY(st_check_header_length(header_length));
    uint8_t *header = uform_alloc((size_t)header_length, 1, "safetensors header");
    if (!header) return UFORM_OUT_OF_MEMORY;
    got = st_read_exact(fd, header, (size_t)header_length);
    uform_status_t status = UFORM_OK;
    uint64_t data_size = 0;
    if (got < 0)
        status = uform_fail(UFORM_FILE, "cannot read '%s': %s", path, strerror(errno));
    else if ((uint64_t)got < header_length)
        status = uform_fail(UFORM_FORMAT,
                            "safetensors: truncated: the header length is %" PRIu64
                            " but the file ends %zd bytes after the length field",
                            header_length, got);
    else
        status = st_header_data_size(header, (size_t)header_length, &data_size);
    size_t total = 0;
    if (status == UFORM_OK && (data_size > SIZE_MAX - 8 - header_length))
        status = uform_fail(UFORM_FORMAT,
                            "safetensors: the header declares a %" PRIu64
                            "-byte data region: the file size overflows",
                            data_size);
    if (status == UFORM_OK) {
        total = (size_t)(8 + header_length + data_size);
        /* More than the machine holds can never be read in; say so up front
         * rather than after filling memory. */
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (pages > 0 && page > 0 && (uint64_t)total / (uint64_t)page >= (uint64_t)pages)
            status = uform_fail(UFORM_OUT_OF_MEMORY,
                                "cannot read '%s': its header declares a %" PRIu64
                                "-byte data region, more than this machine's memory (%" PRIu64
                                " bytes)",
                                path, data_size, (uint64_t)pages * (uint64_t)page);
    }
    uint8_t *buffer = NULL;
    if (status == UFORM_OK) {
        /* Pages are touched only as bytes arrive, so a stream that ends early
         * costs only what it sent. */
        void *fresh = mmap(NULL, total, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (fresh == MAP_FAILED)
            status = uform_fail(UFORM_OUT_OF_MEMORY, "cannot map %zu bytes to read '%s'", total,
                                path);
        else
            buffer = fresh;
    }
    if (buffer) {
        memcpy(buffer, length_field, 8);
        memcpy(buffer + 8, header, (size_t)header_length);
    }
    free(header);
    if (status != UFORM_OK) return status;

    size_t data_offset = 8 + (size_t)header_length;
    got = st_read_exact(fd, buffer + data_offset, (size_t)data_size);
    if (got < 0)
        status = uform_fail(UFORM_FILE, "cannot read '%s': %s", path, strerror(errno));
    else if ((uint64_t)got < data_size)
        status = uform_fail(UFORM_FORMAT,
                            "safetensors: truncated: the header declares a %" PRIu64
                            "-byte data region but the file ends %zd bytes into it",
                            data_size, got);
    if (status != UFORM_OK) {
        munmap(buffer, total);
        return status;
    }
    *mapping = buffer;
    *mapping_size = total;
    *size = total;
    return UFORM_OK;
}

uform_status_t uform_safetensors_open(const char *path, uform_safetensors_t *file) {
    if (!file) return uform_fail(UFORM_INVALID_ARGUMENT, "safetensors: file is NULL");
    memset(file, 0, sizeof(*file));
    if (!path) return uform_fail(UFORM_INVALID_ARGUMENT, "safetensors: path is NULL");

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return uform_fail(UFORM_FILE, "cannot open '%s': %s", path, strerror(errno));
    struct stat info;
    if (fstat(fd, &info) != 0) {
        int error = errno;
        close(fd);
        return uform_fail(UFORM_FILE, "cannot stat '%s': %s", path, strerror(error));
    }
    if (S_ISDIR(info.st_mode)) {
        close(fd);
        return uform_fail(UFORM_FILE, "cannot read '%s': %s", path, strerror(EISDIR));
    }
    void *mapping = NULL;
    size_t mapping_size = 0, size = 0;
    uform_status_t status = UFORM_OK;
    if (S_ISREG(info.st_mode)) {
        if ((uintmax_t)info.st_size > SIZE_MAX - 1) {
            close(fd);
            return uform_fail(UFORM_FILE, "cannot read '%s': file too large", path);
        }
        size = (size_t)info.st_size;
        if (size > 0) {
            mapping = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
            if (mapping == MAP_FAILED) mapping = NULL;
            else mapping_size = size;
        }
    }
    /* Pipes, FIFOs, devices (/dev/zero never ends), and regular files that
     * refuse mmap are read up to the size their header declares. */
    if (!mapping) {
        status = st_read_stream(fd, path, &mapping, &mapping_size, &size);
        /* A regular file's size is known: bytes past the declared end are
         * trailing bytes, as they are in a mapped one. */
        if (status == UFORM_OK && S_ISREG(info.st_mode) && (size_t)info.st_size > size)
            status = uform_fail(UFORM_FORMAT,
                                "safetensors: %zu trailing bytes after the declared data region",
                                (size_t)info.st_size - size);
        if (status != UFORM_OK && mapping) {
            munmap(mapping, mapping_size);
            mapping = NULL;
        }
    }
    close(fd);
    if (status == UFORM_OK) status = uform_safetensors_parse(mapping, size, file);
    if (status != UFORM_OK) {
        if (mapping) munmap(mapping, mapping_size);
        if (status == UFORM_FORMAT) {
            char prefix[512];
            snprintf(prefix, sizeof(prefix), "'%s'", path);
            uform_fail_context(status, prefix);
        }
        return status;
    }
    file->mapping = mapping;
    file->mapping_size = mapping_size;
    return UFORM_OK;
}

void uform_safetensors_close(uform_safetensors_t *file) {
    if (!file) return;
    if (file->tensors)
        for (size_t i = 0; i < file->tensors_count; i++) free(file->tensors[i].name);
    free(file->tensors);
    if (file->metadata)
        for (size_t i = 0; i < file->metadata_count; i++) {
            free(file->metadata[i].key);
            free(file->metadata[i].value);
        }
    free(file->metadata);
    if (file->mapping) munmap(file->mapping, file->mapping_size);
    memset(file, 0, sizeof(*file));
}

const uform_tensor_t *uform_safetensors_find(const uform_safetensors_t *file, const char *name) {
    if (!file || !name) return NULL;
    for (size_t i = 0; i < file->tensors_count; i++)
        if (strcmp(file->tensors[i].name, name) == 0) return &file->tensors[i];
    return NULL;
}

const char *uform_safetensors_metadata(const uform_safetensors_t *file, const char *key) {
    if (!file || !key) return NULL;
    for (size_t i = 0; i < file->metadata_count; i++)
        if (strcmp(file->metadata[i].key, key) == 0) return file->metadata[i].value;
    return NULL;
}
