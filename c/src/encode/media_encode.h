/* media_encode.h: what the image, video and audio verbs share: items turned
 * into input tokens (patches, tube patches, chunks) on the executor's threads,
 * a group at a time, then projected by the modality's linear layer, the
 * modality vector added, and run through the shared encoder
 * (encode_batches.h). */
#ifndef UFORM_MEDIA_ENCODE_H
#define UFORM_MEDIA_ENCODE_H

#include "encode/encode_batches.h"
#include "media/decode/decode.h"

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

/* Turns item `item` of `source` into tokens; runs on any pool thread, so it
 * must be safe to call concurrently. On failure its message names the item. */
typedef uform_status_t (*uform_media_tokenize_fn_t)(const void *source, size_t item,
                                                    uform_media_tokens_t *tokens);

typedef struct {
    const uform_media_part_t *part;
    size_t count;                 /* items, >= 1 */
    size_t rows_bound;            /* a bound on the call's total tokens */
    uform_media_tokenize_fn_t tokenize;
    const void *source;
} uform_media_call_t;

/* Runs a checked call (model, arena and encoded not NULL, the part present):
 * holds the arena, checks the options, encodes, and adds up *counts. */
UFORM_INTERNAL uform_status_t uform_media_encode(const uform_model_t *model, uform_executor_t *executor,
                                                 const uform_media_call_t *call, uform_arena_t *arena,
                                                 const uform_encode_options_t *options,
                                                 uform_encoded_t *encoded,
                                                 uform_media_counts_t *counts);

/* Encoded files of one modality for a model's geometry: the `source` of the
 * file tokenizers below. The trainer passes a geometry-only model (context and
 * the media shapes set, no weights). */
typedef struct {
    const uform_model_t *model;
    const uform_tape_t *files;
} uform_media_files_t;

/* Decode file `item` of a uform_media_files_t and turn it into tokens;
 * failures name "files[item]". */
UFORM_INTERNAL uform_status_t uform_image_file_tokenize(const void *source, size_t item,
                                                        uform_media_tokens_t *tokens);
UFORM_INTERNAL uform_status_t uform_video_file_tokenize(const void *source, size_t item,
                                                        uform_media_tokens_t *tokens);
UFORM_INTERNAL uform_status_t uform_audio_file_tokenize(const void *source, size_t item,
                                                        uform_media_tokens_t *tokens);

/* Encodes decoded clips (frames already every frame_stride-th): the part of
 * uform_video_encode after decoding, for tests and callers holding frames.
 * stats may be NULL. */
UFORM_INTERNAL uform_status_t uform_video_encode_frames(uform_model_t *model, uform_executor_t *executor,
                                                        const uform_video_t *clips, size_t count,
                                                        uform_arena_t *arena,
                                                        const uform_encode_options_t *options,
                                                        uform_encoded_t *encoded,
                                                        uform_video_encode_stats_t *stats);

#endif /* UFORM_MEDIA_ENCODE_H */
