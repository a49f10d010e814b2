/* media_tokens.h: the media layer's tokenizers as the encode verbs and the
 * trainer call them: one item (decoded pixels, frames or samples, or an
 * encoded file) becomes its input tokens and positions for a model's media
 * shapes (docs/media.md). */
#ifndef UFORM_MEDIA_TOKENS_H
#define UFORM_MEDIA_TOKENS_H

#include "media/decode/decode.h"
#include "model/model.h"

/* What a media call counts; each verb reports the fields its stats have. */
typedef struct {
    size_t items, tokens, resized, shrunk, frames, samples, truncated, empty;
} uform_media_counts_t;

/* One item's input tokens. */
typedef struct {
    size_t rows;                  /* tokens, at most context */
    size_t axes;                  /* position axes: 2 image, 3 video, 1 audio */
    float *inputs;                /* [rows, width] (uform_alloc_aligned) */
    uint32_t *positions;          /* [rows][3] (uform_alloc) */
    uform_media_counts_t counts;  /* this item's part of the call's counts */
} uform_media_tokens_t;

/* Allocates tokens->inputs and ->positions for `rows` rows of `width`. */
UFORM_INTERNAL uform_status_t uform_media_tokens_alloc(uform_media_tokens_t *tokens, size_t rows,
                                                       size_t width);

UFORM_INTERNAL void uform_media_tokens_free(uform_media_tokens_t *tokens);

/* An image's patch tokens: grid, resize (skipped when the image already has
 * the grid's size), patches, positions (row, column). */
UFORM_INTERNAL uform_status_t uform_image_tokens(const uform_model_t *model, const uint8_t *pixels,
                                                 size_t height, size_t width, size_t row_stride,
                                                 uform_media_tokens_t *tokens);
/* A clip's tube tokens (frames already every frame_stride-th). */
UFORM_INTERNAL uform_status_t uform_clip_tokens(const uform_model_t *model, const uform_video_t *clip,
                                                uform_media_tokens_t *tokens);
/* A recording's chunk tokens, resampled from `rate` to the model's rate. */
UFORM_INTERNAL uform_status_t uform_recording_tokens(const uform_model_t *model, const float *samples,
                                                     size_t count, size_t rate,
                                                     uform_media_tokens_t *tokens);

/* Encoded files of one modality for a model's geometry: the `source` of the
 * file tokenizers below. The trainer passes a geometry-only model (context and
 * the media shapes set, no weights). With `paths`, each tape entry is a path
 * (os.fsencode bytes, no NUL) and the tokenizer reads the file itself. */
typedef struct {
    const uform_model_t *model;
    const uform_tape_t *files;
    bool paths;
} uform_media_files_t;

/* media_paths.c. Checks every path of a checked tape before any decoding: an
 * empty one, a NUL inside or one over PATH_MAX is UFORM_INVALID_ARGUMENT; a
 * file that is missing, unreadable or not a regular file is UFORM_FILE; each
 * message names "files[i]" and the path. */
UFORM_INTERNAL uform_status_t uform_media_paths_check(const uform_tape_t *paths);
/* Reads the file entry `item` names into a malloc'd buffer (*bytes, freed by
 * the caller; NULL for an empty file); messages name the path. */
UFORM_INTERNAL uform_status_t uform_media_path_read(const uform_tape_t *paths, size_t item, uint8_t **bytes,
                                                    size_t *size);

/* Decode file `item` of a uform_media_files_t and turn it into tokens;
 * failures name "files[item]". */
UFORM_INTERNAL uform_status_t uform_image_file_tokenize(const void *source, size_t item,
                                                        uform_media_tokens_t *tokens);
UFORM_INTERNAL uform_status_t uform_video_file_tokenize(const void *source, size_t item,
                                                        uform_media_tokens_t *tokens);
UFORM_INTERNAL uform_status_t uform_audio_file_tokenize(const void *source, size_t item,
                                                        uform_media_tokens_t *tokens);

#endif /* UFORM_MEDIA_TOKENS_H */
