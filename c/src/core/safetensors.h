/* safetensors.h: a validating reader and an atomic writer of the safetensors format.
 *
 * Format: 8-byte little-endian header length N, then N bytes of JSON (an object
 * mapping tensor names to {"dtype", "shape", "data_offsets": [begin, end]} and
 * an optional "__metadata__" string->string map), then the data region. Offsets
 * are relative to the data region. The reader checks everything and answers
 * UFORM_FORMAT with a message naming the tensor or byte offset at fault.
 * Regular files are mapped; pipes, FIFOs and devices are read only as far as
 * their header declares, after checking the header.
 */
#ifndef UFORM_SAFETENSORS_H
#define UFORM_SAFETENSORS_H

#include "core/internal.h"

#include <stdatomic.h>

typedef enum {
    UFORM_DTYPE_BOOL, UFORM_DTYPE_U8, UFORM_DTYPE_I8, UFORM_DTYPE_I16, UFORM_DTYPE_U16,
    UFORM_DTYPE_F16, UFORM_DTYPE_BF16, UFORM_DTYPE_I32, UFORM_DTYPE_U32, UFORM_DTYPE_F32,
    UFORM_DTYPE_I64, UFORM_DTYPE_U64, UFORM_DTYPE_F64, UFORM_DTYPE_F8_E4M3, UFORM_DTYPE_F8_E5M2
} uform_dtype_t;

#define UFORM_SAFETENSORS_MAX_RANK 8
/* Header lengths above this are refused before anything is allocated. */
#define UFORM_SAFETENSORS_MAX_HEADER (100u * 1024u * 1024u)

typedef struct {
    char *name;                         /* NUL-terminated, owned by the file */
    uform_dtype_t dtype;
    size_t rank;
    uint64_t shape[UFORM_SAFETENSORS_MAX_RANK];
    const uint8_t *data;                /* points into the file's bytes; may be unaligned */
    size_t bytes;
} uform_tensor_t;

typedef struct {
    char *key;
    char *value;
} uform_metadata_entry_t;

/* A parsed file. The tensors point into `bytes`, which the file owns (mmap or
 * a copy) or borrows (uform_safetensors_parse). */
typedef struct {
    uform_tensor_t *tensors;
    size_t tensors_count;
    uform_metadata_entry_t *metadata;
    size_t metadata_count;
    const uint8_t *bytes;
    size_t size;
    /* ownership of bytes: */
    void *mapping;                      /* munmap on close when non-NULL */
    size_t mapping_size;
} uform_safetensors_t;

/* Parses a buffer the caller keeps alive as long as the result is used. */
UFORM_INTERNAL uform_status_t uform_safetensors_parse(const void *data, size_t size,
                                                      uform_safetensors_t *file);
/* Maps (or reads) a file and parses it; UFORM_FILE names the path when it cannot be opened.
 * What cannot be mapped (a pipe, FIFO or device) is read in order: the length
 * field (0, 1 or more than UFORM_SAFETENSORS_MAX_HEADER is refused before
 * anything is allocated), the header, which is checked in full and declares
 * the data region's size (refused when more than the machine's memory:
 * UFORM_OUT_OF_MEMORY), then exactly that many bytes, never more; a stream
 * ending early is UFORM_FORMAT "truncated". Bytes after the declared end of a
 * stream are left unread and are not an error (they cannot be seen without
 * reading on); in a regular file they are refused as trailing bytes. */
UFORM_INTERNAL uform_status_t uform_safetensors_open(const char *path, uform_safetensors_t *file);
UFORM_INTERNAL void uform_safetensors_close(uform_safetensors_t *file);

/* NULL when absent. */
UFORM_INTERNAL const uform_tensor_t *uform_safetensors_find(const uform_safetensors_t *file,
                                                            const char *name);
UFORM_INTERNAL const char *uform_safetensors_metadata(const uform_safetensors_t *file,
                                                      const char *key);
UFORM_INTERNAL size_t uform_dtype_size(uform_dtype_t dtype);
UFORM_INTERNAL const char *uform_dtype_name(uform_dtype_t dtype);

/* Writing: tensors are laid out contiguously in the order given (the format
 * allows no gaps); the header is padded with spaces to a multiple of 8, so the
 * data region starts 8-byte aligned.
 *
 * Before anything is created, the write refuses (and leaves the file at path
 * as it was) an F16/BF16/F32/F64 tensor holding a NaN or infinity
 * (UFORM_INVALID_ARGUMENT naming the tensor and element) and a path that
 * exists but is not a regular file (UFORM_FILE): a device, directory, FIFO or
 * socket is never replaced. A symbolic link is followed: the file it points to
 * is replaced and the link kept; a dangling link is refused.
 *
 * Protocol, in the directory of the file being replaced: remove stale
 * temporaries of the same file (".<name>.uform-partial-<pid>-<n>" whose flock
 * can be taken: their writer is dead); write into an unnamed O_TMPFILE file
 * (mode 0666 & ~umask) holding flock(LOCK_EX); fsync it; link it under such a
 * temporary name; rename it over the file; fsync the directory; unlock. A
 * process killed at any point leaves the old file whole, and at most one
 * named temporary, which the next save of the same file removes. Where
 * O_TMPFILE is unsupported, or its files cannot be linked, the temporary is
 * created under its name with O_EXCL and locked at once. Cancellation or an
 * I/O error removes the temporary and leaves the old file untouched. */
typedef struct {
    const char *name;
    uform_dtype_t dtype;
    size_t rank;
    uint64_t shape[UFORM_SAFETENSORS_MAX_RANK];
    const void *data;                   /* bytes = product(shape) * dtype size */
} uform_tensor_view_t;

UFORM_INTERNAL uform_status_t uform_safetensors_write(const char *path,
                                                      const uform_tensor_view_t *tensors,
                                                      size_t tensors_count,
                                                      const uform_metadata_entry_t *metadata,
                                                      size_t metadata_count,
                                                      const uform_progress_t *progress);
/* Set by the writer where O_TMPFILE files cannot be linked, so later writes
 * go straight to named temporaries; tests set it to exercise that path. */
UFORM_INTERNAL extern atomic_bool uform_safetensors_named_temporaries;

/* ---- JSON (json.c): a small strict parser used by the reader ------------- */

typedef enum {
    UFORM_JSON_NULL, UFORM_JSON_FALSE, UFORM_JSON_TRUE, UFORM_JSON_NUMBER,
    UFORM_JSON_STRING, UFORM_JSON_ARRAY, UFORM_JSON_OBJECT
} uform_json_kind_t;

typedef struct uform_json uform_json_t;
struct uform_json {
    uform_json_kind_t kind;
    char *string;            /* STRING: decoded UTF-8, NUL-terminated (may hold NUL bytes; see length) */
    size_t length;           /* STRING: bytes; ARRAY/OBJECT: children */
    double number;           /* NUMBER */
    const char *number_text; /* NUMBER: points into the source, for exact integers */
    size_t number_text_length;
    char **keys;             /* OBJECT: keys[i] names children[i] */
    uform_json_t *children;  /* ARRAY/OBJECT */
    size_t source_offset;    /* byte offset of the value in the parsed text */
};

/* Parses exactly one JSON value (whitespace around it allowed) with nesting
 * at most max_depth; UFORM_FORMAT names the byte offset of the first error. */
UFORM_INTERNAL uform_status_t uform_json_parse(const char *text, size_t length, size_t max_depth,
                                               uform_json_t *root);
UFORM_INTERNAL void uform_json_free(uform_json_t *root);
/* An unsigned integer value that fits in uint64 exactly (no sign, fraction or exponent). */
UFORM_INTERNAL bool uform_json_u64(const uform_json_t *value, uint64_t *out);
UFORM_INTERNAL const uform_json_t *uform_json_get(const uform_json_t *object, const char *key);
/* Length of the well-formed UTF-8 sequence (RFC 3629) at s, within `available`
 * bytes, or 0 when there is none. */
UFORM_INTERNAL size_t uform_utf8_length(const unsigned char *s, size_t available);

/* Shared by the reader (safetensors.c) and the writer (safetensors_write.c). */
/* Sorts names[] and returns one that occurs twice, or NULL. */
UFORM_INTERNAL const char *uform_st_find_duplicate(const char **names, size_t count);
/* The product of shape[0, rank) times element_size, or false on overflow. */
UFORM_INTERNAL bool uform_st_shape_bytes(const uint64_t *shape, size_t rank, size_t element_size,
                                         uint64_t *out);

#endif /* UFORM_SAFETENSORS_H */
