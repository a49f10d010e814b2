/* media_encode.h: what the image, video and audio verbs share: items turned
 * into input tokens (patches, tube patches, chunks) on the executor's threads,
 * a group at a time, then projected by the modality's linear layer, the
 * modality vector added, and run through the shared encoder
 * (encode_batches.h). */
#ifndef UFORM_MEDIA_ENCODE_H
#define UFORM_MEDIA_ENCODE_H

#include "encode/encode_batches.h"
#include "media/media_tokens.h"

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
 * holds the arena (unless `held`: a submitted job took it at submission and
 * gives it back itself), checks the options, encodes, and adds up *counts. */
UFORM_INTERNAL uform_status_t uform_media_encode(const uform_model_t *model, uform_executor_t *executor,
                                                 const uform_media_call_t *call, uform_arena_t *arena,
                                                 const uform_encode_options_t *options,
                                                 uform_encoded_t *encoded,
                                                 uform_media_counts_t *counts, bool held);

/* The public media verbs' bodies, argument checks included; `paths`: the
 * tape's entries are paths (the *_encode_paths verbs); `held` as above.
 * uform_image_encode and the rest call them with held false, the jobs of
 * their *_submit twins (media_submit.c) with held true, so both run the same
 * code. */
UFORM_INTERNAL uform_status_t uform_image_encode_pixels_run(uform_model_t *model, uform_executor_t *executor,
                                                            const uform_pixels_t *images, size_t count,
                                                            uform_arena_t *arena,
                                                            const uform_encode_options_t *options,
                                                            uform_encoded_t *encoded,
                                                            uform_image_encode_stats_t *stats, bool held);
UFORM_INTERNAL uform_status_t uform_image_encode_run(uform_model_t *model, uform_executor_t *executor,
                                                     const uform_tape_t *files, bool paths,
                                                     uform_arena_t *arena,
                                                     const uform_encode_options_t *options,
                                                     uform_encoded_t *encoded,
                                                     uform_image_encode_stats_t *stats, bool held);
UFORM_INTERNAL uform_status_t uform_video_encode_run(uform_model_t *model, uform_executor_t *executor,
                                                     const uform_tape_t *files, bool paths,
                                                     uform_arena_t *arena,
                                                     const uform_encode_options_t *options,
                                                     uform_encoded_t *encoded,
                                                     uform_video_encode_stats_t *stats, bool held);
UFORM_INTERNAL uform_status_t uform_audio_encode_run(uform_model_t *model, uform_executor_t *executor,
                                                     const uform_tape_t *files, bool paths,
                                                     uform_arena_t *arena,
                                                     const uform_encode_options_t *options,
                                                     uform_encoded_t *encoded,
                                                     uform_audio_encode_stats_t *stats, bool held);
UFORM_INTERNAL uform_status_t uform_audio_encode_samples_run(uform_model_t *model, uform_executor_t *executor,
                                                             const float *samples, size_t size,
                                                             const size_t *offsets, size_t count,
                                                             size_t sample_rate, uform_arena_t *arena,
                                                             const uform_encode_options_t *options,
                                                             uform_encoded_t *encoded,
                                                             uform_audio_encode_stats_t *stats, bool held);

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
