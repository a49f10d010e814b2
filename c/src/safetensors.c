/* safetensors.c: a validating reader and an atomic writer of safetensors files.
 *
 * The reader trusts nothing: every length, offset and size is checked before
 * it is used, and a file is accepted only when its tensors tile the data
 * region exactly (sorted by offset, from 0, no gaps, no overlaps, no trailing
 * bytes), as the reference Rust implementation requires. Tensors keep the
 * header's order. Headers need not be padded and data need not be aligned:
 * tensor pointers may be unaligned, so callers memcpy.
 *
 * The writer lays tensors out contiguously in the order given and pads the
 * header with spaces to a multiple of 8, so the data region starts 8-byte
 * aligned; it writes a temporary file, fsyncs it and renames it over the path.
 */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The header needs 3 levels (file object, tensor entry, shape); the slack lets
 * a nested __metadata__ value get the clearer "must be a string" message. */
#define ST_JSON_DEPTH 8
/* Names in messages are cut here so one message never drowns the rest. */
#define ST_NAME "'%.200s'"
/* The writer's unit of fwrite and of progress reports. */
#define ST_WRITE_CHUNK ((size_t)4 << 20)

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
static const char *st_find_duplicate(const char **names, size_t count) {
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
static bool st_shape_bytes(const uint64_t *shape, size_t rank, size_t element_size,
                           uint64_t *out) {
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
    if (!st_shape_bytes(tensor->shape, tensor->rank, st_dtypes[d].size, &bytes))
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
    tensor->bytes = (size_t)bytes; /* <= data_size, which is a size_t */
    span->begin = begin;
    span->end = end;
    return UFORM_OK;
}

/* Refuses duplicate names and checks that the spans tile [0, data_size). */
static uform_status_t st_check_layout(const uform_safetensors_t *file, st_span_t *spans,
                                      uint64_t data_size) {
    const char **names = uform_alloc(file->tensors_count + file->metadata_count + 1,
                                     sizeof(*names), "safetensors names");
    if (!names) return UFORM_OUT_OF_MEMORY;
    for (size_t i = 0; i < file->tensors_count; i++) names[i] = file->tensors[i].name;
    const char *duplicate = st_find_duplicate(names, file->tensors_count);
    if (duplicate) {
        uform_status_t status = uform_fail(UFORM_FORMAT,
                                           "safetensors: duplicate tensor name " ST_NAME, duplicate);
        free(names);
        return status;
    }
    for (size_t i = 0; i < file->metadata_count; i++) names[i] = file->metadata[i].key;
    duplicate = st_find_duplicate(names, file->metadata_count);
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
    if (covered != data_size)
        return uform_fail(UFORM_FORMAT,
                          "safetensors: %" PRIu64 " trailing bytes of the %" PRIu64
                          "-byte data region belong to no tensor",
                          data_size - covered, data_size);
    return UFORM_OK;
}

/* Fills file from the parsed header, stealing names and strings from root. */
static uform_status_t st_read_header(uform_json_t *root, size_t header_length,
                                     uform_safetensors_t *file) {
    if (root->kind != UFORM_JSON_OBJECT)
        return uform_fail(UFORM_FORMAT, "safetensors header: top level must be a JSON object");
    const uint8_t *data = file->bytes + 8 + header_length;
    uint64_t data_size = file->size - 8 - header_length;

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
        status = st_read_tensor(name, &root->children[i], data_size, tensor, span);
        if (status != UFORM_OK) continue;
        tensor->name = name;
        root->keys[i] = NULL;
        tensor->data = data + span->begin;
        span->index = file->tensors_count++;
    }
    if (status == UFORM_OK) status = st_check_layout(file, spans, data_size);
    free(spans);
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
    if (header_length == 0)
        return uform_fail(UFORM_FORMAT, "safetensors: header length is 0");
    if (header_length > UFORM_SAFETENSORS_MAX_HEADER)
        return uform_fail(UFORM_FORMAT,
                          "safetensors: header length %" PRIu64 " exceeds the limit of %u bytes",
                          header_length, UFORM_SAFETENSORS_MAX_HEADER);
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
    status = st_read_header(&root, (size_t)header_length, file);
    uform_json_free(&root);
    if (status != UFORM_OK) uform_safetensors_close(file);
    return status;
}

/* Reads fd to its end into an anonymous mapping (so close can munmap it like
 * a file mapping). size_hint: expected size, 0 when unknown. */
static uform_status_t st_read_all(int fd, const char *path, size_t size_hint, void **mapping,
                                  size_t *mapping_size, size_t *size) {
    /* One spare byte so the read that sees the end needs no growth. */
    size_t capacity = size_hint ? size_hint + 1 : (size_t)1 << 16;
    size_t used = 0;
    uint8_t *buffer = NULL;
    for (;;) {
        if (!buffer || used == capacity) {
            size_t grown = buffer ? capacity * 2 : capacity;
            if (buffer && grown < capacity) {
                munmap(buffer, capacity);
                return uform_fail(UFORM_FILE, "cannot read '%s': file too large", path);
            }
            void *fresh = mmap(NULL, grown, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                               -1, 0);
            if (fresh == MAP_FAILED) {
                if (buffer) munmap(buffer, capacity);
                return uform_fail(UFORM_OUT_OF_MEMORY, "cannot map %zu bytes to read '%s'",
                                  grown, path);
            }
            if (buffer) {
                memcpy(fresh, buffer, used);
                munmap(buffer, capacity);
            }
            buffer = fresh;
            capacity = grown;
        }
        ssize_t count = read(fd, buffer + used, capacity - used);
        if (count < 0 && errno == EINTR) continue;
        if (count < 0) {
            int error = errno;
            munmap(buffer, capacity);
            return uform_fail(UFORM_FILE, "cannot read '%s': %s", path, strerror(error));
        }
        if (count == 0) break;
        used += (size_t)count;
    }
    *mapping = buffer;
    *mapping_size = capacity;
    *size = used;
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
    /* Pipes, devices, and regular files that refuse mmap are read instead. */
    if (!mapping && (size > 0 || !S_ISREG(info.st_mode)))
        status = st_read_all(fd, path, size, &mapping, &mapping_size, &size);
    close(fd);
    if (status != UFORM_OK) return status;

    status = uform_safetensors_parse(mapping ? mapping : "", mapping ? size : 0, file);
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

/* ---- writer --------------------------------------------------------------------- */

/* A growing byte buffer for the header text. */
typedef struct {
    char *data;
    size_t length, capacity;
} st_text_t;

static uform_status_t st_append(st_text_t *text, const char *bytes, size_t count) {
    if (text->capacity - text->length < count) {
        size_t wanted = text->capacity ? text->capacity : 256;
        while (wanted - text->length < count) {
            if (wanted > SIZE_MAX / 2)
                return uform_fail(UFORM_OUT_OF_MEMORY, "safetensors header: too large");
            wanted *= 2;
        }
        char *grown = realloc(text->data, wanted);
        if (!grown)
            return uform_fail(UFORM_OUT_OF_MEMORY,
                              "safetensors header: cannot allocate %zu bytes", wanted);
        text->data = grown;
        text->capacity = wanted;
    }
    memcpy(text->data + text->length, bytes, count);
    text->length += count;
    return UFORM_OK;
}

static uform_status_t st_appendf(st_text_t *text, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

static uform_status_t st_appendf(st_text_t *text, const char *format, ...) {
    char buffer[256];
    va_list arguments;
    va_start(arguments, format);
    int count = vsnprintf(buffer, sizeof(buffer), format, arguments);
    va_end(arguments);
    /* Callers format only numbers and fixed words, far below the buffer. */
    if (count < 0 || (size_t)count >= sizeof(buffer))
        return uform_fail(UFORM_INVALID_ARGUMENT, "safetensors header: field too long");
    return st_append(text, buffer, (size_t)count);
}

/* Appends s as a quoted JSON string; s is valid UTF-8 (checked by the caller). */
static uform_status_t st_append_string(st_text_t *text, const char *s) {
    UFORM_TRY(st_append(text, "\"", 1));
    for (const char *run = s;; s++) {
        unsigned char c = (unsigned char)*s;
        if (c != '\0' && c >= 0x20 && c != '"' && c != '\\') continue;
        UFORM_TRY(st_append(text, run, (size_t)(s - run)));
        if (c == '\0') break;
        if (c == '"') UFORM_TRY(st_append(text, "\\\"", 2));
        else if (c == '\\') UFORM_TRY(st_append(text, "\\\\", 2));
        else if (c == '\n') UFORM_TRY(st_append(text, "\\n", 2));
        else if (c == '\t') UFORM_TRY(st_append(text, "\\t", 2));
        else if (c == '\r') UFORM_TRY(st_append(text, "\\r", 2));
        else UFORM_TRY(st_appendf(text, "\\u%04x", c));
        run = s + 1;
    }
    return st_append(text, "\"", 1);
}

/* True when s is well-formed UTF-8 (RFC 3629), as JSON requires. */
static bool st_utf8_valid(const char *s) {
    size_t remaining = strlen(s);
    const unsigned char *p = (const unsigned char *)s;
    while (remaining) {
        size_t length = uform_utf8_length(p, remaining);
        if (length == 0) return false;
        p += length;
        remaining -= length;
    }
    return true;
}

/* Checks the caller's views and metadata; *total gets the data region size. */
static uform_status_t st_check_views(const uform_tensor_view_t *tensors, size_t tensors_count,
                                     const uform_metadata_entry_t *metadata,
                                     size_t metadata_count, uint64_t *total) {
    if (tensors_count && !tensors)
        return uform_fail(UFORM_INVALID_ARGUMENT, "safetensors write: tensors is NULL");
    if (metadata_count && !metadata)
        return uform_fail(UFORM_INVALID_ARGUMENT, "safetensors write: metadata is NULL");
    uint64_t sum = 0;
    for (size_t i = 0; i < tensors_count; i++) {
        const uform_tensor_view_t *view = &tensors[i];
        if (!view->name || !view->name[0])
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "safetensors write: tensor %zu has %s name", i,
                              view->name ? "an empty" : "a NULL");
        if (strcmp(view->name, "__metadata__") == 0)
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "safetensors write: tensor %zu may not be named __metadata__", i);
        if (!st_utf8_valid(view->name))
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "safetensors write: tensor %zu name is not valid UTF-8", i);
        if (uform_dtype_size(view->dtype) == 0)
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "safetensors write: tensor " ST_NAME ": unknown dtype %d",
                              view->name, (int)view->dtype);
        if (view->rank > UFORM_SAFETENSORS_MAX_RANK)
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "safetensors write: tensor " ST_NAME ": rank %zu exceeds %d",
                              view->name, view->rank, UFORM_SAFETENSORS_MAX_RANK);
        uint64_t bytes;
        if (!st_shape_bytes(view->shape, view->rank, uform_dtype_size(view->dtype), &bytes) ||
            bytes > SIZE_MAX || __builtin_add_overflow(sum, bytes, &sum) || sum > SIZE_MAX)
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "safetensors write: tensor " ST_NAME ": size overflows", view->name);
        if (bytes && !view->data)
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "safetensors write: tensor " ST_NAME ": data is NULL", view->name);
    }
    for (size_t i = 0; i < metadata_count; i++) {
        if (!metadata[i].key || !metadata[i].value)
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "safetensors write: metadata entry %zu has a NULL %s", i,
                              metadata[i].key ? "value" : "key");
        if (!st_utf8_valid(metadata[i].key) || !st_utf8_valid(metadata[i].value))
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "safetensors write: metadata entry %zu is not valid UTF-8", i);
    }

    size_t most = tensors_count > metadata_count ? tensors_count : metadata_count;
    const char **names = uform_alloc(most + 1, sizeof(*names), "safetensors names");
    if (!names) return UFORM_OUT_OF_MEMORY;
    for (size_t i = 0; i < tensors_count; i++) names[i] = tensors[i].name;
    const char *duplicate = st_find_duplicate(names, tensors_count);
    uform_status_t status = UFORM_OK;
    if (duplicate)
        status = uform_fail(UFORM_INVALID_ARGUMENT,
                            "safetensors write: duplicate tensor name " ST_NAME, duplicate);
    if (status == UFORM_OK) {
        for (size_t i = 0; i < metadata_count; i++) names[i] = metadata[i].key;
        duplicate = st_find_duplicate(names, metadata_count);
        if (duplicate)
            status = uform_fail(UFORM_INVALID_ARGUMENT,
                                "safetensors write: duplicate metadata key " ST_NAME, duplicate);
    }
    free(names);
    *total = sum;
    return status;
}

/* The header: length field, JSON, spaces up to a multiple of 8. */
static uform_status_t st_build_header(st_text_t *text, const uform_tensor_view_t *tensors,
                                      size_t tensors_count, const uform_metadata_entry_t *metadata,
                                      size_t metadata_count) {
    UFORM_TRY(st_append(text, "\0\0\0\0\0\0\0\0{", 9));
    if (metadata_count) {
        UFORM_TRY(st_append(text, "\"__metadata__\":{", 16));
        for (size_t i = 0; i < metadata_count; i++) {
            if (i) UFORM_TRY(st_append(text, ",", 1));
            UFORM_TRY(st_append_string(text, metadata[i].key));
            UFORM_TRY(st_append(text, ":", 1));
            UFORM_TRY(st_append_string(text, metadata[i].value));
        }
        UFORM_TRY(st_append(text, "}", 1));
    }
    uint64_t offset = 0;
    for (size_t i = 0; i < tensors_count; i++) {
        const uform_tensor_view_t *view = &tensors[i];
        uint64_t bytes = 0;
        st_shape_bytes(view->shape, view->rank, uform_dtype_size(view->dtype), &bytes);
        if (i || metadata_count) UFORM_TRY(st_append(text, ",", 1));
        UFORM_TRY(st_append_string(text, view->name));
        UFORM_TRY(st_appendf(text, ":{\"dtype\":\"%s\",\"shape\":[", uform_dtype_name(view->dtype)));
        for (size_t d = 0; d < view->rank; d++)
            UFORM_TRY(st_appendf(text, "%s%" PRIu64, d ? "," : "", view->shape[d]));
        UFORM_TRY(st_appendf(text, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", offset,
                             offset + bytes));
        offset += bytes;
    }
    UFORM_TRY(st_append(text, "}", 1));
    while ((text->length - 8) % 8) UFORM_TRY(st_append(text, " ", 1));
    uint64_t header_length = text->length - 8;
    for (int i = 0; i < 8; i++) text->data[i] = (char)(header_length >> (8 * i));
    return UFORM_OK;
}

/* fwrites bytes in chunks, reporting progress after each; an I/O failure
 * sets *error to its errno and returns UFORM_FILE. */
static uform_status_t st_write_bytes(FILE *stream, const void *data, size_t count, size_t *done,
                                     uform_progress_state_t *progress, int *error) {
    const uint8_t *bytes = data;
    while (count) {
        size_t chunk = count < ST_WRITE_CHUNK ? count : ST_WRITE_CHUNK;
        if (fwrite(bytes, 1, chunk, stream) != chunk) {
            *error = errno ? errno : EIO;
            return UFORM_FILE;
        }
        bytes += chunk;
        count -= chunk;
        *done += chunk;
        UFORM_TRY(uform_progress_update(progress, *done));
    }
    return UFORM_OK;
}

/* fsyncs the directory holding path so the rename itself is durable; best effort. */
static void st_sync_directory(const char *path) {
    const char *slash = strrchr(path, '/');
    char directory[4096];
    if (!slash) snprintf(directory, sizeof(directory), ".");
    else if (slash == path) snprintf(directory, sizeof(directory), "/");
    else if ((size_t)(slash - path) < sizeof(directory))
        snprintf(directory, sizeof(directory), "%.*s", (int)(slash - path), path);
    else return;
    int fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    (void)fsync(fd);
    close(fd);
}

uform_status_t uform_safetensors_write(const char *path, const uform_tensor_view_t *tensors,
                                       size_t tensors_count,
                                       const uform_metadata_entry_t *metadata,
                                       size_t metadata_count, const uform_progress_t *progress) {
    static atomic_ulong counter;
    if (!path || !path[0])
        return uform_fail(UFORM_INVALID_ARGUMENT, "safetensors write: path is %s",
                          path ? "empty" : "NULL");
    uint64_t data_total = 0;
    UFORM_TRY(st_check_views(tensors, tensors_count, metadata, metadata_count, &data_total));

    st_text_t header = {NULL, 0, 0};
    uform_status_t status =
        st_build_header(&header, tensors, tensors_count, metadata, metadata_count);
    size_t total = 0;
    if (status == UFORM_OK && !uform_add_ok(header.length, (size_t)data_total, &total))
        status = uform_fail(UFORM_INVALID_ARGUMENT, "safetensors write: file size overflows");
    if (status != UFORM_OK) {
        free(header.data);
        return status;
    }

    size_t path_length = strlen(path);
    char *temporary = uform_alloc(path_length + 64, 1, "safetensors temporary path");
    if (!temporary) {
        free(header.data);
        return UFORM_OUT_OF_MEMORY;
    }
    /* O_EXCL never clobbers another writer's file; a stale one left by a
     * crashed process with a reused pid is skipped by the next counter. */
    int fd = -1, error = 0; /* error: errno of the first I/O failure */
    for (int attempt = 0; attempt < 16 && fd < 0; attempt++) {
        snprintf(temporary, path_length + 64, "%s.tmp-%ld-%lu", path, (long)getpid(),
                 (unsigned long)atomic_fetch_add(&counter, 1));
        fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        error = fd < 0 ? errno : 0;
        if (fd < 0 && error != EEXIST) break;
    }
    if (fd < 0) {
        free(header.data);
        free(temporary);
        return uform_fail(UFORM_FILE, "cannot write '%s': cannot create its temporary file: %s",
                          path, strerror(error));
    }
    FILE *stream = fdopen(fd, "wb");
    if (!stream) {
        error = errno ? errno : EIO;
        close(fd);
    } else {
        uform_progress_state_t state;
        uform_progress_begin(&state, progress, total);
        size_t done = 0;
        status = st_write_bytes(stream, header.data, header.length, &done, &state, &error);
        for (size_t i = 0; i < tensors_count && status == UFORM_OK; i++) {
            uint64_t bytes = 0;
            st_shape_bytes(tensors[i].shape, tensors[i].rank, uform_dtype_size(tensors[i].dtype),
                           &bytes);
            status = st_write_bytes(stream, tensors[i].data, (size_t)bytes, &done, &state, &error);
        }
        /* Durable before visible: flush and fsync, then rename. */
        if (status == UFORM_OK && (fflush(stream) != 0 || fsync(fileno(stream)) != 0))
            error = errno ? errno : EIO;
        if (fclose(stream) != 0 && status == UFORM_OK && !error) error = errno ? errno : EIO;
    }
    free(header.data);
    if (status == UFORM_OK && !error && rename(temporary, path) != 0) error = errno ? errno : EIO;
    if (status != UFORM_OK || error) {
        unlink(temporary);
        free(temporary);
        if (status == UFORM_OK || status == UFORM_FILE)
            return uform_fail(UFORM_FILE, "cannot write '%s': %s", path, strerror(error));
        return status; /* cancelled by the progress handler */
    }
    free(temporary);
    st_sync_directory(path);
    return UFORM_OK;
}
