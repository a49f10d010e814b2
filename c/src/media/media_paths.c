/* media_paths.c: media files named by path (the *_encode_paths verbs).
 *
 * Every path is checked on the calling (or submission) thread before any
 * decoding starts, so a typo in the last of 256 paths costs nothing; then
 * each file is read by the pool thread that decodes it, into a buffer that
 * lives only while that item is tokenized. Memory is bounded by the items in
 * flight, not the batch, and no caller-side copy of the whole batch exists.
 *
 * Read, not mmap: a mapped file that another process truncates raises SIGBUS
 * in the decoder, and the library never crashes. One read copies bytes the
 * decoder then spends far longer on (a JPEG decodes at tens of MB/s, a copy
 * runs at GB/s), so the copy costs nothing measurable. */
#include "media/media_tokens.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* Entry `item` of `paths` as a NUL-terminated string in `path` (PATH_MAX
 * bytes); an empty path, a NUL inside or one too long is the caller's error. */
static uform_status_t uform_path_entry(const uform_tape_t *paths, size_t item, char path[PATH_MAX]) {
    size_t length = paths->offsets[item + 1] - paths->offsets[item];
    const char *bytes = paths->data ? (const char *)paths->data + paths->offsets[item] : NULL;
    if (length == 0) return uform_fail(UFORM_INVALID_ARGUMENT, "files[%zu]: an empty path", item);
    if (length >= PATH_MAX)
        return uform_fail(UFORM_INVALID_ARGUMENT, "files[%zu]: a path of %zu bytes is over PATH_MAX (%d)",
                          item, length, PATH_MAX);
    if (memchr(bytes, '\0', length))
        return uform_fail(UFORM_INVALID_ARGUMENT, "files[%zu]: the path holds a NUL byte", item);
    memcpy(path, bytes, length);
    path[length] = '\0';
    return UFORM_OK;
}

/* Opens `path` for reading (non-blocking, so a FIFO's open returns at once
 * and nothing is consumed) and refuses anything but a regular file; messages
 * name the path. On success *fd is open and *info holds its fstat. */
static uform_status_t uform_open_regular(const char *path, int *fd, struct stat *info) {
    *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (*fd < 0) return uform_fail(UFORM_FILE, "'%s': %s", path, strerror(errno));
    uform_status_t status = UFORM_OK;
    if (fstat(*fd, info) != 0) status = uform_fail(UFORM_FILE, "'%s': %s", path, strerror(errno));
    else if (!S_ISREG(info->st_mode)) /* a directory, device, FIFO or socket is never a media file */
        status = uform_fail(UFORM_FILE, "'%s': not a regular file (a directory, device, FIFO or socket)", path);
    if (status != UFORM_OK) {
        close(*fd);
        *fd = -1;
    }
    return status;
}

uform_status_t uform_media_paths_check(const uform_tape_t *paths) {
    char path[PATH_MAX], prefix[48];
    for (size_t item = 0; item < paths->count; item++) {
        UFORM_TRY(uform_path_entry(paths, item, path));
        int fd;
        struct stat info;
        uform_status_t status = uform_open_regular(path, &fd, &info);
        if (status != UFORM_OK) {
            snprintf(prefix, sizeof(prefix), "files[%zu]", item);
            return uform_fail_context(status, prefix);
        }
        close(fd);
    }
    return UFORM_OK;
}

uform_status_t uform_media_path_read(const uform_tape_t *paths, size_t item, uint8_t **bytes, size_t *size) {
    *bytes = NULL;
    *size = 0;
    char path[PATH_MAX];
    UFORM_TRY(uform_path_entry(paths, item, path));
    int fd;
    struct stat info;
    UFORM_TRY(uform_open_regular(path, &fd, &info));
    uform_status_t status = UFORM_OK;
    if ((uintmax_t)info.st_size > SIZE_MAX / 2)
        status = uform_fail(UFORM_FILE, "'%s': a file of %jd bytes is too large", path, (intmax_t)info.st_size);
    /* Read to the end, whatever the size fstat saw: a file that grew since
     * is read whole, one that shrank ends early, as a read of the same file
     * by the caller would. The one spare byte tells a file that grew. */
    size_t capacity = status == UFORM_OK ? (size_t)info.st_size + 1 : 0, filled = 0;
    uint8_t *buffer = status == UFORM_OK ? uform_alloc(capacity, 1, "a media file") : NULL;
    if (status == UFORM_OK && !buffer) status = UFORM_OUT_OF_MEMORY;
    while (status == UFORM_OK) {
        if (filled == capacity) {
            uint8_t *grown = capacity <= SIZE_MAX / 2 ? realloc(buffer, 2 * capacity) : NULL;
            if (!grown) {
                status = uform_fail(UFORM_OUT_OF_MEMORY, "'%s': out of memory reading past %zu bytes", path,
                                    filled);
                break;
            }
            buffer = grown;
            capacity *= 2;
        }
        ssize_t got = read(fd, buffer + filled, capacity - filled);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) status = uform_fail(UFORM_FILE, "'%s': %s", path, strerror(errno));
        else if (got == 0) break;
        else filled += (size_t)got;
    }
    close(fd);
    if (status != UFORM_OK) {
        free(buffer);
        return status;
    }
    *bytes = buffer;
    *size = filled;
    return UFORM_OK;
}
