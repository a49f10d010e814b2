/* safetensors_write.c: the atomic, validating writer of safetensors files
 * (safetensors.h; the protocol is described there and in docs/reliability.md). */
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
#include <sys/stat.h>
#include <unistd.h>

/* Names in messages are cut here so one message never drowns the rest. */
#define ST_NAME "'%.200s'"
/* The writer's unit of write() and of progress reports. */
#define ST_WRITE_CHUNK ((size_t)4 << 20)

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
        if (!uform_st_shape_bytes(view->shape, view->rank, uform_dtype_size(view->dtype), &bytes) ||
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
    const char *duplicate = uform_st_find_duplicate(names, tensors_count);
    uform_status_t status = UFORM_OK;
    if (duplicate)
        status = uform_fail(UFORM_INVALID_ARGUMENT,
                            "safetensors write: duplicate tensor name " ST_NAME, duplicate);
    if (status == UFORM_OK) {
        for (size_t i = 0; i < metadata_count; i++) names[i] = metadata[i].key;
        duplicate = uform_st_find_duplicate(names, metadata_count);
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
        uform_st_shape_bytes(view->shape, view->rank, uform_dtype_size(view->dtype), &bytes);
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

/* ---- writer: values ------------------------------------------------------------------ */

/* The index of the first element whose exponent bits are all ones (NaN or
 * infinity in every IEEE binary format), or count. Blocks keep the inner loop
 * free of branches so it vectorises; memcpy because data may be unaligned. */
#define ST_SCAN_BLOCK 4096
#define ST_FIRST_NON_FINITE(function, type)                                                   \
    static size_t function(const uint8_t *data, size_t count, type exponent) {                \
        for (size_t begin = 0; begin < count; begin += ST_SCAN_BLOCK) {                       \
            size_t end = count - begin < ST_SCAN_BLOCK ? count : begin + ST_SCAN_BLOCK;       \
            bool found = false;                                                               \
            for (size_t i = begin; i < end; i++) {                                            \
                type bits;                                                                    \
                memcpy(&bits, data + i * sizeof(type), sizeof(type));                         \
                found |= (type)(bits & exponent) == exponent;                                 \
            }                                                                                 \
            if (!found) continue;                                                             \
            for (size_t i = begin; i < end; i++) {                                            \
                type bits;                                                                    \
                memcpy(&bits, data + i * sizeof(type), sizeof(type));                         \
                if ((type)(bits & exponent) == exponent) return i;                            \
            }                                                                                 \
        }                                                                                     \
        return count;                                                                         \
    }
ST_FIRST_NON_FINITE(st_first_non_finite16, uint16_t)
ST_FIRST_NON_FINITE(st_first_non_finite32, uint32_t)
ST_FIRST_NON_FINITE(st_first_non_finite64, uint64_t)

/* Refuses a float tensor holding a NaN or infinity: such a checkpoint is one
 * the reader's callers refuse, and it would replace a good one. */
static uform_status_t st_check_finite(const char *path, const uform_tensor_view_t *tensors,
                                      size_t tensors_count) {
    for (size_t t = 0; t < tensors_count; t++) {
        const uform_tensor_view_t *view = &tensors[t];
        uint64_t bytes = 0;
        uform_st_shape_bytes(view->shape, view->rank, uform_dtype_size(view->dtype), &bytes);
        size_t size = uform_dtype_size(view->dtype), count = (size_t)bytes / size, at = count;
        const uint8_t *data = view->data;
        uint64_t exponent = 0, sign = 0, bits = 0;
        switch (view->dtype) {
        case UFORM_DTYPE_F16:
        case UFORM_DTYPE_BF16: {
            exponent = view->dtype == UFORM_DTYPE_F16 ? 0x7c00u : 0x7f80u;
            sign = 0x8000u;
            at = st_first_non_finite16(data, count, (uint16_t)exponent);
            uint16_t value = 0;
            if (at < count) memcpy(&value, data + at * 2, 2);
            bits = value;
            break;
        }
        case UFORM_DTYPE_F32: {
            exponent = 0x7f800000u;
            sign = 0x80000000u;
            at = st_first_non_finite32(data, count, (uint32_t)exponent);
            uint32_t value = 0;
            if (at < count) memcpy(&value, data + at * 4, 4);
            bits = value;
            break;
        }
        case UFORM_DTYPE_F64:
            exponent = 0x7ff0000000000000ull;
            sign = 0x8000000000000000ull;
            at = st_first_non_finite64(data, count, exponent);
            if (at < count) memcpy(&bits, data + at * 8, 8);
            break;
        default:
            continue;
        }
        if (at == count) continue;
        const char *kind = bits & ~(exponent | sign) ? "nan" : bits & sign ? "-inf" : "inf";
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "cannot write '%s': tensor " ST_NAME
                          " holds a non-finite value (%s) at element %zu; nothing was written, "
                          "the file at the path is unchanged",
                          path, view->name, kind, at);
    }
    return UFORM_OK;
}

/* ---- writer: the file ------------------------------------------------------------------ */

atomic_bool uform_safetensors_named_temporaries;

/* Temporaries are ".<name>.uform-partial-<pid>-<n>" beside the file they
 * replace; names are cut so the temporary's name stays below NAME_MAX. */
#define ST_PARTIAL ".uform-partial-"
#define ST_PARTIAL_NAME_MAX 200

typedef struct {
    char *directory; /* holds the file to replace */
    const char *name; /* its name in directory (points into storage) */
    char *storage;
    char prefix[ST_PARTIAL_NAME_MAX + 32]; /* of its temporaries' names */
} st_target_t;

static void st_target_free(st_target_t *target) {
    free(target->directory);
    free(target->storage);
}

#define ST_NOT_REGULAR \
    "not a regular file (a device, directory, FIFO or socket); nothing was written"

/* Finds the file a write replaces: path itself, or through a symbolic link
 * the file the link points to (the link is kept). Refuses anything but a
 * regular file or a path that does not exist yet, before anything is created. */
static uform_status_t st_resolve_target(const char *path, st_target_t *target) {
    memset(target, 0, sizeof(*target));
    struct stat info;
    if (lstat(path, &info) != 0) {
        if (errno != ENOENT)
            return uform_fail(UFORM_FILE, "cannot write '%s': %s", path, strerror(errno));
        target->storage = strdup(path);
    } else if (S_ISLNK(info.st_mode)) {
        target->storage = realpath(path, NULL);
        if (!target->storage) {
            int error = errno;
            if (error == ENOENT)
                return uform_fail(UFORM_FILE,
                                  "cannot write '%s': it is a symbolic link that points nowhere "
                                  "(its target does not exist); nothing was written",
                                  path);
            return uform_fail(UFORM_FILE,
                              "cannot write '%s': cannot resolve the symbolic link: %s", path,
                              strerror(error));
        }
        if (stat(target->storage, &info) != 0 || !S_ISREG(info.st_mode)) {
            uform_status_t status = uform_fail(
                UFORM_FILE, "cannot write '%s': it links to '%s', which is " ST_NOT_REGULAR, path,
                target->storage);
            st_target_free(target);
            return status;
        }
    } else if (!S_ISREG(info.st_mode)) {
        return uform_fail(UFORM_FILE, "cannot write '%s': it exists and is " ST_NOT_REGULAR, path);
    } else {
        target->storage = strdup(path);
    }
    if (!target->storage) return uform_fail(UFORM_OUT_OF_MEMORY, "safetensors write: path copy");

    char *slash = strrchr(target->storage, '/');
    target->name = slash ? slash + 1 : target->storage;
    if (!target->name[0]) {
        st_target_free(target);
        return uform_fail(UFORM_FILE, "cannot write '%s': %s", path, strerror(EISDIR));
    }
    if (!slash) target->directory = strdup(".");
    else if (slash == target->storage) target->directory = strdup("/");
    else target->directory = strndup(target->storage, (size_t)(slash - target->storage));
    if (!target->directory) {
        st_target_free(target);
        return uform_fail(UFORM_OUT_OF_MEMORY, "safetensors write: path copy");
    }
    snprintf(target->prefix, sizeof(target->prefix), ".%.*s" ST_PARTIAL, ST_PARTIAL_NAME_MAX,
             target->name);
    return UFORM_OK;
}

/* True when name is prefix followed by "<digits>-<digits>" and nothing else. */
static bool st_is_partial(const char *name, const char *prefix) {
    size_t length = strlen(prefix);
    if (strncmp(name, prefix, length) != 0) return false;
    const char *p = name + length;
    for (int part = 0; part < 2; part++) {
        const char *digits = p;
        while (*p >= '0' && *p <= '9') p++;
        if (p == digits) return false;
        if (part == 0 && *p++ != '-') return false;
    }
    return *p == '\0';
}

/* Removes temporaries of this target whose writer is gone. A writer holds
 * flock(LOCK_EX) on its temporary until after the rename, and the kernel drops
 * it when the writer dies however it dies, so a lock we can take marks a dead
 * writer; pids are never trusted, they are reused. Best effort. */
static void st_remove_stale(int directory, const char *prefix) {
    int scan = openat(directory, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *stream = scan >= 0 ? fdopendir(scan) : NULL;
    if (!stream) {
        if (scan >= 0) close(scan);
        return;
    }
    struct dirent *entry;
    while ((entry = readdir(stream))) {
        if (!st_is_partial(entry->d_name, prefix)) continue;
        struct stat named, opened;
        if (fstatat(directory, entry->d_name, &named, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(named.st_mode))
            continue;
        int fd = openat(directory, entry->d_name,
                        O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0) continue;
        /* Unlink only the file we locked, not one that took its name since. */
        if (fstat(fd, &opened) == 0 && S_ISREG(opened.st_mode) &&
            flock(fd, LOCK_EX | LOCK_NB) == 0 &&
            fstatat(directory, entry->d_name, &named, AT_SYMLINK_NOFOLLOW) == 0 &&
            named.st_dev == opened.st_dev && named.st_ino == opened.st_ino)
            unlinkat(directory, entry->d_name, 0);
        close(fd);
    }
    closedir(stream);
}

/* Writes bytes in chunks, reporting progress after each; an I/O failure
 * sets *error to its errno and returns UFORM_FILE. */
static uform_status_t st_write_bytes(int fd, const void *data, size_t count, size_t *done,
                                     uform_progress_state_t *progress, int *error) {
    const uint8_t *bytes = data;
    while (count) {
        size_t chunk = count < ST_WRITE_CHUNK ? count : ST_WRITE_CHUNK;
        ssize_t wrote = write(fd, bytes, chunk);
        if (wrote < 0 && errno == EINTR) continue;
        if (wrote <= 0) {
            *error = wrote < 0 && errno ? errno : EIO;
            return UFORM_FILE;
        }
        bytes += wrote;
        count -= (size_t)wrote;
        *done += (size_t)wrote;
        UFORM_TRY(uform_progress_update(progress, *done));
    }
    return UFORM_OK;
}

typedef struct {
    const char *path;                  /* as the caller gave it, for messages */
    const st_target_t *target;
    int directory;                     /* fd of target->directory */
    const st_text_t *header;
    const uform_tensor_view_t *tensors;
    size_t tensors_count;
    uform_progress_state_t progress;
} st_writer_t;

/* The next temporary name of w's target: "<prefix><pid>-<n>". */
static void st_temporary_name(const st_writer_t *w, char *name, size_t size) {
    static atomic_ulong counter;
    snprintf(name, size, "%s%ld-%lu", w->target->prefix, (long)getpid(),
             (unsigned long)atomic_fetch_add(&counter, 1));
}

/* Creates a named temporary with O_EXCL and locks it; *error on failure. */
static int st_create_named(st_writer_t *w, char *name, size_t size, int *error) {
    for (int attempt = 0; attempt < 64; attempt++) {
        st_temporary_name(w, name, size);
        int fd = openat(w->directory, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno == EEXIST) continue;
        if (fd < 0) {
            *error = errno;
            return -1;
        }
        /* A cleaner may have locked and removed it before we locked it: make
         * sure the name is still ours once we hold the lock. Where flock is
         * unsupported, no cleaner can take the lock either, so go on. */
        while (flock(fd, LOCK_EX) != 0 && errno == EINTR) continue;
        struct stat named, opened;
        if (fstat(fd, &opened) == 0 &&
            fstatat(w->directory, name, &named, AT_SYMLINK_NOFOLLOW) == 0 &&
            named.st_dev == opened.st_dev && named.st_ino == opened.st_ino)
            return fd;
        close(fd);
    }
    *error = EEXIST;
    return -1;
}

/* Gives the unnamed (O_TMPFILE) file fd a temporary name; false with *error
 * when neither way of linking it works here. */
static bool st_link_unnamed(st_writer_t *w, int fd, char *name, size_t size, int *error) {
    char proc[64];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    for (int attempt = 0; attempt < 64; attempt++) {
        st_temporary_name(w, name, size);
        /* AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; /proc works without it. */
        if (linkat(fd, "", w->directory, name, AT_EMPTY_PATH) == 0) return true;
        if (errno != EEXIST &&
            linkat(AT_FDCWD, proc, w->directory, name, AT_SYMLINK_FOLLOW) == 0)
            return true;
        *error = errno;
        if (*error != EEXIST) return false;
    }
    return false;
}

/* One attempt: create, write, fsync, name, rename. *unlinkable is set when an
 * O_TMPFILE file was written but could not be named here (the caller retries
 * with a named temporary). */
static uform_status_t st_write_once(st_writer_t *w, bool named, bool *unlinkable) {
    *unlinkable = false;
    char temporary[sizeof(w->target->prefix) + 48];
    int error = 0, fd = -1;
    bool has_name = false;
    if (!named) {
        /* Unnamed until it is complete: a writer killed before the rename
         * leaves nothing behind. The kernel applies the umask to 0666. */
        fd = openat(w->directory, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
        if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL ||
                       errno == ENOTSUP))
            named = true; /* this kernel or file system has no O_TMPFILE */
        else if (fd < 0)
            error = errno;
        else
            (void)flock(fd, LOCK_EX); /* uncontended: no one can open it yet */
    }
    if (named) {
        fd = st_create_named(w, temporary, sizeof(temporary), &error);
        has_name = fd >= 0;
    }
    if (fd < 0)
        return uform_fail(UFORM_FILE,
                          "cannot write '%s': cannot create its temporary file in '%s': %s",
                          w->path, w->target->directory, strerror(error));

    size_t done = 0;
    uform_status_t status = st_write_bytes(fd, w->header->data, w->header->length, &done,
                                           &w->progress, &error);
    for (size_t i = 0; i < w->tensors_count && status == UFORM_OK; i++) {
        const uform_tensor_view_t *view = &w->tensors[i];
        uint64_t bytes = 0;
        uform_st_shape_bytes(view->shape, view->rank, uform_dtype_size(view->dtype), &bytes);
        status = st_write_bytes(fd, view->data, (size_t)bytes, &done, &w->progress, &error);
    }
    /* Durable before visible: fsync, then name and rename. */
    if (status == UFORM_OK && fsync(fd) != 0) {
        error = errno ? errno : EIO;
        status = UFORM_FILE;
    }
    if (status == UFORM_OK && !has_name) {
        if (st_link_unnamed(w, fd, temporary, sizeof(temporary), &error)) {
            has_name = true;
        } else {
            close(fd);
            *unlinkable = true;
            return UFORM_FILE;
        }
    }
    if (status == UFORM_OK &&
        renameat(w->directory, temporary, w->directory, w->target->name) != 0) {
        error = errno ? errno : EIO;
        status = UFORM_FILE;
    }
    if (status != UFORM_OK && has_name) unlinkat(w->directory, temporary, 0);
    if (status == UFORM_OK) (void)fsync(w->directory); /* the rename itself; best effort */
    close(fd); /* drops the lock, after the rename */
    if (status == UFORM_FILE)
        return uform_fail(UFORM_FILE, "cannot write '%s': %s", w->path, strerror(error));
    return status; /* OK, or cancelled by the progress handler */
}

uform_status_t uform_safetensors_write(const char *path, const uform_tensor_view_t *tensors,
                                       size_t tensors_count,
                                       const uform_metadata_entry_t *metadata,
                                       size_t metadata_count, const uform_progress_t *progress) {
    if (!path || !path[0])
        return uform_fail(UFORM_INVALID_ARGUMENT, "safetensors write: path is %s",
                          path ? "empty" : "NULL");
    uint64_t data_total = 0;
    UFORM_TRY(st_check_views(tensors, tensors_count, metadata, metadata_count, &data_total));
    UFORM_TRY(st_check_finite(path, tensors, tensors_count));

    st_text_t header = {NULL, 0, 0};
    uform_status_t status =
        st_build_header(&header, tensors, tensors_count, metadata, metadata_count);
    size_t total = 0;
    if (status == UFORM_OK && !uform_add_ok(header.length, (size_t)data_total, &total))
        status = uform_fail(UFORM_INVALID_ARGUMENT, "safetensors write: file size overflows");
    st_target_t target;
    if (status == UFORM_OK) status = st_resolve_target(path, &target);
    if (status != UFORM_OK) {
        free(header.data);
        return status;
    }

    /* O_PATH where the directory cannot be read: temporaries can still be
     * made in it; only the stale-temporary sweep and its fsync are skipped. */
    int directory = open(target.directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (directory < 0 && errno == EACCES)
        directory = open(target.directory, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (directory < 0) {
        status = uform_fail(UFORM_FILE, "cannot write '%s': %s", path, strerror(errno));
    } else {
        st_remove_stale(directory, target.prefix);
        st_writer_t writer = {path, &target, directory, &header, tensors, tensors_count, {0}};
        uform_progress_begin(&writer.progress, progress, total);
        bool unlinkable = false;
        status = st_write_once(&writer, atomic_load(&uform_safetensors_named_temporaries),
                               &unlinkable);
        if (unlinkable) {
            /* No way to name an O_TMPFILE file here (no /proc, no capability):
             * write again with a named temporary, and from now on. Progress
             * goes on from where it was, so no report repeats. */
            atomic_store(&uform_safetensors_named_temporaries, true);
            status = st_write_once(&writer, true, &unlinkable);
        }
        close(directory);
    }
    st_target_free(&target);
    free(header.data);
    return status;
}
