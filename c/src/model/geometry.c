/* geometry.c: a checkpoint's geometry from its metadata (geometry.h). */
#include "model/geometry.h"

#include "media/decode/resample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Shapes a zero (or a missing key) in the metadata derives (docs/media.md). */
#define UFORM_DERIVED_CHANNELS 3
#define UFORM_DERIVED_TUBE_FRAMES 2
#define UFORM_DERIVED_FRAME_STRIDE 1
#define UFORM_DERIVED_SAMPLE_RATE 16000

/* ---- geometry from metadata ----------------------------------------------- */



static uform_status_t uform_metadata_integer(const uform_json_t *root, const char *key,
                                             bool required, uint64_t *out) {
    const uform_json_t *value = uform_json_get(root, key);
    if (!value) {
        *out = 0;
        if (!required) return UFORM_OK;
        return uform_fail(UFORM_FORMAT, "checkpoint metadata: \"uform\" has no \"%s\"", key);
    }
    if (!uform_json_u64(value, out))
        return uform_fail(UFORM_FORMAT,
                          "checkpoint metadata: \"uform\".\"%s\" is not a non-negative integer", key);
    return UFORM_OK;
}

/* One key of a media object ("image", "video", "audio"), 0 when missing. */
static uform_status_t uform_shape_integer(const uform_json_t *object, const char *modality,
                                          const char *key, uint64_t *out) {
    const uform_json_t *value = uform_json_get(object, key);
    *out = 0;
    if (!value) return UFORM_OK;
    if (!uform_json_u64(value, out))
        return uform_fail(UFORM_FORMAT,
                          "checkpoint metadata: \"uform\".\"%s\".\"%s\" is not a non-negative integer",
                          modality, key);
    return UFORM_OK;
}

/* The media object `modality` of the metadata: NULL when absent or null. */
static uform_status_t uform_shape_object(const uform_json_t *root, const char *modality,
                                         const uform_json_t **object) {
    *object = uform_json_get(root, modality);
    if (*object && (*object)->kind == UFORM_JSON_NULL) *object = NULL;
    if (*object && (*object)->kind != UFORM_JSON_OBJECT)
        return uform_fail(UFORM_FORMAT, "checkpoint metadata: \"uform\".\"%s\" is not a JSON object",
                          modality);
    return UFORM_OK;
}

static uform_status_t uform_check_channels(const uform_json_t *object, const char *modality) {
    uint64_t channels;
    UFORM_TRY(uform_shape_integer(object, modality, "channels", &channels));
    if (channels != 0 && channels != UFORM_DERIVED_CHANNELS)
        return uform_fail(UFORM_FORMAT,
                          "checkpoint metadata: \"%s\".\"channels\" is %llu; this library reads RGB "
                          "(3 channels) only",
                          modality, (unsigned long long)channels);
    return UFORM_OK;
}

/* The image/video/audio shapes of the metadata, zeros derived (docs/media.md). */
static uform_status_t uform_read_media_shapes(const uform_json_t *root, uform_geometry_t *g) {
    const uform_json_t *object;
    UFORM_TRY(uform_shape_object(root, "image", &object));
    if (object) {
        UFORM_TRY(uform_shape_integer(object, "image", "patch_side", &g->image_patch_side));
        if (g->image_patch_side) UFORM_TRY(uform_check_channels(object, "image"));
        if (g->image_patch_side > UFORM_MAX_WIDTH ||
            g->image_patch_side * g->image_patch_side * 3 > UFORM_MAX_WIDTH)
            return uform_fail(UFORM_FORMAT, "checkpoint: image patch_side %llu is too large",
                              (unsigned long long)g->image_patch_side);
    }
    UFORM_TRY(uform_shape_object(root, "video", &object));
    if (object) {
        UFORM_TRY(uform_shape_integer(object, "video", "patch_side", &g->video_patch_side));
        UFORM_TRY(uform_shape_integer(object, "video", "tube_frames", &g->video_tube_frames));
        UFORM_TRY(uform_shape_integer(object, "video", "frame_stride", &g->video_frame_stride));
        if (g->video_patch_side) UFORM_TRY(uform_check_channels(object, "video"));
        if (!g->video_tube_frames) g->video_tube_frames = UFORM_DERIVED_TUBE_FRAMES;
        if (!g->video_frame_stride) g->video_frame_stride = UFORM_DERIVED_FRAME_STRIDE;
        uint64_t p = g->video_patch_side;
        if (p > UFORM_MAX_WIDTH || g->video_tube_frames > UFORM_MAX_WIDTH ||
            p * p * 3 * g->video_tube_frames > UFORM_MAX_WIDTH)
            return uform_fail(UFORM_FORMAT,
                              "checkpoint: video patch_side %llu x tube_frames %llu is too large",
                              (unsigned long long)p, (unsigned long long)g->video_tube_frames);
        if (g->video_frame_stride > UFORM_MAX_FRAME_STRIDE)
            return uform_fail(UFORM_FORMAT, "checkpoint: video frame_stride %llu is too large",
                              (unsigned long long)g->video_frame_stride);
    }
    UFORM_TRY(uform_shape_object(root, "audio", &object));
    if (object) {
        UFORM_TRY(uform_shape_integer(object, "audio", "chunk_samples", &g->audio_chunk_samples));
        UFORM_TRY(uform_shape_integer(object, "audio", "sample_rate", &g->audio_sample_rate));
        if (!g->audio_sample_rate) g->audio_sample_rate = UFORM_DERIVED_SAMPLE_RATE;
        if (g->audio_chunk_samples > UFORM_MAX_WIDTH)
            return uform_fail(UFORM_FORMAT, "checkpoint: audio chunk_samples %llu is too large",
                              (unsigned long long)g->audio_chunk_samples);
        if (g->audio_sample_rate > UFORM_MAX_SAMPLE_RATE)
            return uform_fail(UFORM_FORMAT, "checkpoint: audio sample_rate %llu is over %zu Hz",
                              (unsigned long long)g->audio_sample_rate, UFORM_MAX_SAMPLE_RATE);
    }
    return UFORM_OK;
}

uform_status_t uform_read_geometry(const uform_safetensors_t *file, uform_geometry_t *g) {
    const char *text = uform_safetensors_metadata(file, "uform");
    if (!text)
        return uform_fail(UFORM_FORMAT,
                          "checkpoint: __metadata__ has no \"uform\" entry; not a uform checkpoint");
    uform_json_t root;
    uform_status_t status = uform_json_parse(text, strlen(text), 8, &root);
    if (status != UFORM_OK) return uform_fail_context(status, "checkpoint metadata \"uform\"");
    if (root.kind != UFORM_JSON_OBJECT) {
        uform_json_free(&root);
        return uform_fail(UFORM_FORMAT, "checkpoint metadata: \"uform\" is not a JSON object");
    }
    status = uform_metadata_integer(&root, "version", true, &g->version);
    if (status == UFORM_OK) status = uform_metadata_integer(&root, "depth", true, &g->depth);
    if (status == UFORM_OK) status = uform_metadata_integer(&root, "hidden", true, &g->hidden);
    if (status == UFORM_OK)
        status = uform_metadata_integer(&root, "dimensions", true, &g->dimensions);
    if (status == UFORM_OK) status = uform_metadata_integer(&root, "context", true, &g->context);
    if (status == UFORM_OK)
        status = uform_metadata_integer(&root, "token_width", false, &g->token_width);
    if (status == UFORM_OK)
        status = uform_metadata_integer(&root, "choice_temperature_groups", false, &g->choice_groups);
    if (status == UFORM_OK) status = uform_metadata_integer(&root, "step", false, &g->step);
    if (status == UFORM_OK) status = uform_read_media_shapes(&root, g);
    uform_json_free(&root);
    if (status != UFORM_OK) return status;

    if (g->version != 4)
        return uform_fail(UFORM_FORMAT, "checkpoint: format version %llu, this library reads 4",
                          (unsigned long long)g->version);
    if (g->depth < 1 || g->depth > UFORM_MAX_DEPTH)
        return uform_fail(UFORM_FORMAT, "checkpoint: depth %llu is outside [1, %d]",
                          (unsigned long long)g->depth, UFORM_MAX_DEPTH);
    if (g->hidden < 64 || g->hidden > UFORM_MAX_HIDDEN || g->hidden % 64)
        return uform_fail(UFORM_FORMAT,
                          "checkpoint: hidden %llu is not a multiple of 64 in [64, %d]",
                          (unsigned long long)g->hidden, UFORM_MAX_HIDDEN);
    if (g->dimensions < 1 || g->dimensions > UFORM_MAX_WIDTH)
        return uform_fail(UFORM_FORMAT, "checkpoint: dimensions %llu is outside [1, %u]",
                          (unsigned long long)g->dimensions, UFORM_MAX_WIDTH);
    if (g->context < 1 || g->context > UFORM_MAX_CONTEXT)
        return uform_fail(UFORM_FORMAT, "checkpoint: context %llu is outside [1, %u]",
                          (unsigned long long)g->context, UFORM_MAX_CONTEXT);
    if (g->token_width > UFORM_MAX_WIDTH)
        return uform_fail(UFORM_FORMAT, "checkpoint: token_width %llu is too large",
                          (unsigned long long)g->token_width);
    if (g->choice_groups > UFORM_MAX_WIDTH)
        return uform_fail(UFORM_FORMAT, "checkpoint: choice_temperature_groups %llu is too large",
                          (unsigned long long)g->choice_groups);
    return UFORM_OK;
}
