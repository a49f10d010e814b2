/* model.c: loading a checkpoint into host memory, describing and freeing it.
 *
 * The checkpoint format is DESIGN section 5 (docs/architecture.md): tensor
 * names and shapes fixed, `__metadata__["uform"]` a JSON object with the
 * geometry. Every tensor is checked against the geometry before use; a
 * mismatch is a FormatError naming the tensor. */
#include "model/model.h"
#include "core/safetensors.h"
#include "media/decode/resample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define UFORM_MAX_DEPTH 1024
#define UFORM_MAX_HIDDEN 65536
#define UFORM_MAX_CONTEXT (1u << 24)
#define UFORM_MAX_WIDTH (1u << 20)
#define UFORM_MAX_FRAME_STRIDE (1u << 20)

/* Shapes a zero (or a missing key) in the metadata derives (docs/media.md). */
#define UFORM_DERIVED_CHANNELS 3
#define UFORM_DERIVED_TUBE_FRAMES 2
#define UFORM_DERIVED_FRAME_STRIDE 1
#define UFORM_DERIVED_SAMPLE_RATE 16000

/* ---- the blocks as the backend sees them ------------------------------------- */

static uform_weight_t uform_packed_weight(const uform_packed_t *packed) {
    return (uform_weight_t){packed, NULL, packed->n, packed->k};
}

/* Views of the loaded blocks for transformer.c (no copies). */
static uform_status_t uform_model_transformer(uform_model_t *model) {
    model->block_weights = uform_alloc(model->depth, sizeof(uform_block_weights_t), "block views");
    if (!model->block_weights) return UFORM_OUT_OF_MEMORY;
    for (size_t l = 0; l < model->depth; l++) {
        const uform_block_t *b = &model->blocks[l];
        model->block_weights[l] = (uform_block_weights_t){
            b->attention_norm_weight, b->attention_norm_bias, uform_packed_weight(&b->qkv),
            b->qkv_bias, uform_packed_weight(&b->out), b->out_bias, b->mlp_norm_weight,
            b->mlp_norm_bias, uform_packed_weight(&b->up), b->up_bias,
            uform_packed_weight(&b->down), b->down_bias};
    }
    model->transformer = (uform_transformer_t){model->depth, model->hidden, model->block_weights,
                                               model->norm_weight, model->norm_bias};
    return UFORM_OK;
}

/* ---- geometry from metadata ----------------------------------------------- */

typedef struct {
    uint64_t version, depth, hidden, dimensions, context, token_width, choice_groups, step;
    /* media shapes; patch_side / chunk_samples 0: the modality is absent */
    uint64_t image_patch_side;
    uint64_t video_patch_side, video_tube_frames, video_frame_stride;
    uint64_t audio_chunk_samples, audio_sample_rate;
} uform_geometry_t;

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

static uform_status_t uform_read_geometry(const uform_safetensors_t *file, uform_geometry_t *g) {
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

/* ---- tensors --------------------------------------------------------------- */

typedef struct {
    const uform_safetensors_t *file;
    uform_model_t *model;
    uform_progress_state_t progress;
    size_t loaded;
} uform_loader_t;

/* Finds `name` with exactly the given shape and a floating dtype. NULL with
 * *status OK when absent and optional. */
static const uform_tensor_t *uform_expect(const uform_loader_t *loader, const char *name,
                                          size_t rank, uint64_t rows, uint64_t cols, bool required,
                                          uform_status_t *status) {
    *status = UFORM_OK;
    const uform_tensor_t *tensor = uform_safetensors_find(loader->file, name);
    if (!tensor) {
        if (required) *status = uform_fail(UFORM_FORMAT, "checkpoint: tensor \"%s\" is missing", name);
        return NULL;
    }
    if (tensor->dtype != UFORM_DTYPE_BF16 && tensor->dtype != UFORM_DTYPE_F32 &&
        tensor->dtype != UFORM_DTYPE_F16) {
        *status = uform_fail(UFORM_FORMAT, "checkpoint: tensor \"%s\" is %s, expected BF16, F16 or F32",
                             name, uform_dtype_name(tensor->dtype));
        return NULL;
    }
    bool shape_ok = tensor->rank == rank && tensor->shape[0] == rows &&
                    (rank == 1 || tensor->shape[1] == cols);
    if (!shape_ok) {
        char got[96] = "[";
        for (size_t i = 0; i < tensor->rank && i < 4; i++)
            snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%llu", i ? ", " : "",
                     (unsigned long long)tensor->shape[i]);
        snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s]", tensor->rank > 4 ? ", ..." : "");
        if (rank == 1)
            *status = uform_fail(UFORM_FORMAT, "checkpoint: tensor \"%s\" has shape %s, expected [%llu]",
                                 name, got, (unsigned long long)rows);
        else
            *status = uform_fail(UFORM_FORMAT,
                                 "checkpoint: tensor \"%s\" has shape %s, expected [%llu, %llu]", name,
                                 got, (unsigned long long)rows, (unsigned long long)cols);
        return NULL;
    }
    return tensor;
}

static float uform_tensor_value(const uform_tensor_t *tensor, size_t i) {
    if (tensor->dtype == UFORM_DTYPE_F32) {
        float value;
        memcpy(&value, tensor->data + 4 * i, 4);
        return value;
    }
    uint16_t bits;
    memcpy(&bits, tensor->data + 2 * i, 2);
    return tensor->dtype == UFORM_DTYPE_BF16 ? uform_bf16_to_f32(bits) : uform_f16_to_f32(bits);
}

/* Checks every value is finite: a NaN in a checkpoint is corruption, and
 * catching it here names the tensor instead of poisoning every output. */
static uform_status_t uform_check_finite(const uform_tensor_t *tensor, size_t count) {
    for (size_t i = 0; i < count; i++) {
        float value = uform_tensor_value(tensor, i);
        if (!isfinite(value))
            return uform_fail(UFORM_FORMAT, "checkpoint: tensor \"%s\" holds a non-finite value at %zu",
                              tensor->name, i);
    }
    return UFORM_OK;
}

static uform_status_t uform_loaded_one(uform_loader_t *loader) {
    loader->loaded++;
    return uform_progress_update(&loader->progress, loader->loaded);
}

static uform_status_t uform_load_vector(uform_loader_t *loader, const char *name, size_t length,
                                        bool required, float **out) {
    *out = NULL;
    uform_status_t status;
    const uform_tensor_t *tensor = uform_expect(loader, name, 1, length, 0, required, &status);
    if (!tensor) return status;
    UFORM_TRY(uform_check_finite(tensor, length));
    float *values = uform_alloc(length, sizeof(float), name);
    if (!values) return UFORM_OUT_OF_MEMORY;
    for (size_t i = 0; i < length; i++) values[i] = uform_tensor_value(tensor, i);
    *out = values;
    loader->model->memory_usage += length * sizeof(float);
    return uform_loaded_one(loader);
}

/* A [rows, cols] matrix kept as FP32 (the byte table, looked up by row). */
static uform_status_t uform_load_table(uform_loader_t *loader, const char *name, size_t rows,
                                       size_t cols, float **out) {
    *out = NULL;
    uform_status_t status;
    const uform_tensor_t *tensor = uform_expect(loader, name, 2, rows, cols, true, &status);
    if (!tensor) return status;
    UFORM_TRY(uform_check_finite(tensor, rows * cols));
    float *values = uform_alloc(rows * cols, sizeof(float), name);
    if (!values) return UFORM_OUT_OF_MEMORY;
    for (size_t i = 0; i < rows * cols; i++) values[i] = uform_tensor_value(tensor, i);
    *out = values;
    loader->model->memory_usage += rows * cols * sizeof(float);
    return uform_loaded_one(loader);
}

/* A [rows, cols] matrix packed for the model's CPU class. BF16 weights pack as
 * they are; F32/F16 ones are rounded to BF16, the scalar the blocks run in. */
static uform_status_t uform_load_matrix(uform_loader_t *loader, const char *name, size_t rows,
                                        size_t cols, bool required, uform_packed_t *out) {
    memset(out, 0, sizeof(*out));
    uform_status_t status;
    const uform_tensor_t *tensor = uform_expect(loader, name, 2, rows, cols, required, &status);
    if (!tensor) return status;
    size_t count = rows * cols;
    UFORM_TRY(uform_check_finite(tensor, count));
    uint16_t *bits = uform_alloc(count, sizeof(uint16_t), name);
    if (!bits) return UFORM_OUT_OF_MEMORY;
    if (tensor->dtype == UFORM_DTYPE_BF16) memcpy(bits, tensor->data, count * 2);
    else
        for (size_t i = 0; i < count; i++) bits[i] = uform_f32_to_bf16(uform_tensor_value(tensor, i));
    status = loader->model->kernels->pack(bits, rows, cols, out);
    free(bits);
    if (status != UFORM_OK) return uform_fail_context(status, name);
    loader->model->memory_usage += out->bytes;
    return uform_loaded_one(loader);
}

static uform_status_t uform_load_block(uform_loader_t *loader, size_t l, uform_block_t *block) {
    size_t hidden = loader->model->hidden;
    char name[96];
#define UFORM_NAME(suffix) (snprintf(name, sizeof(name), "blocks.%zu.%s", l, suffix), name)
    UFORM_TRY(uform_load_vector(loader, UFORM_NAME("attention.norm.weight"), hidden, true,
                                &block->attention_norm_weight));
    UFORM_TRY(uform_load_vector(loader, UFORM_NAME("attention.norm.bias"), hidden, true,
                                &block->attention_norm_bias));
    UFORM_TRY(uform_load_matrix(loader, UFORM_NAME("attention.qkv.weight"), 3 * hidden, hidden,
                                true, &block->qkv));
    UFORM_TRY(uform_load_vector(loader, UFORM_NAME("attention.qkv.bias"), 3 * hidden, true,
                                &block->qkv_bias));
    UFORM_TRY(uform_load_matrix(loader, UFORM_NAME("attention.out.weight"), hidden, hidden, true,
                                &block->out));
    UFORM_TRY(uform_load_vector(loader, UFORM_NAME("attention.out.bias"), hidden, true,
                                &block->out_bias));
    UFORM_TRY(uform_load_vector(loader, UFORM_NAME("mlp.norm.weight"), hidden, true,
                                &block->mlp_norm_weight));
    UFORM_TRY(uform_load_vector(loader, UFORM_NAME("mlp.norm.bias"), hidden, true,
                                &block->mlp_norm_bias));
    UFORM_TRY(uform_load_matrix(loader, UFORM_NAME("mlp.up.weight"), 4 * hidden, hidden, true,
                                &block->up));
    UFORM_TRY(uform_load_vector(loader, UFORM_NAME("mlp.up.bias"), 4 * hidden, true, &block->up_bias));
    UFORM_TRY(uform_load_matrix(loader, UFORM_NAME("mlp.down.weight"), hidden, 4 * hidden, true,
                                &block->down));
    UFORM_TRY(uform_load_vector(loader, UFORM_NAME("mlp.down.bias"), hidden, true,
                                &block->down_bias));
#undef UFORM_NAME
    return UFORM_OK;
}

/* Tensors per model, for progress: 12 per block plus the rest (at most 19:
 * 10 text and heads, 3 per media modality). */
static size_t uform_tensor_total(size_t depth) { return 12 * depth + 19; }

/* A media modality's parts, when its metadata object names it (width > 0):
 * "<name>.<input>.weight" [H, width], its bias and "<name>.modality". Without
 * the metadata object the projection must be absent too: a tensor the
 * metadata does not describe cannot be used. */
static uform_status_t uform_load_media_part(uform_loader_t *loader, const char *modality,
                                            const char *input, size_t width,
                                            const char *shape_key, uform_media_part_t *part) {
    size_t hidden = loader->model->hidden;
    char name[64];
    snprintf(name, sizeof(name), "%s.%s.weight", modality, input);
    if (!width) {
        if (uform_safetensors_find(loader->file, name))
            return uform_fail(UFORM_FORMAT,
                              "checkpoint: tensor \"%s\" is present but the metadata has no \"%s\" "
                              "object with a non-zero %s",
                              name, modality, shape_key);
        return UFORM_OK;
    }
    UFORM_TRY(uform_load_matrix(loader, name, hidden, width, true, &part->projection));
    snprintf(name, sizeof(name), "%s.%s.bias", modality, input);
    UFORM_TRY(uform_load_vector(loader, name, hidden, true, &part->bias));
    snprintf(name, sizeof(name), "%s.modality", modality);
    UFORM_TRY(uform_load_vector(loader, name, hidden, true, &part->modality));
    part->width = width;
    return UFORM_OK;
}

static uform_status_t uform_load_media_parts(uform_loader_t *loader, const uform_geometry_t *g) {
    uform_model_t *model = loader->model;
    size_t p = g->image_patch_side;
    UFORM_TRY(uform_load_media_part(loader, "image", "patch", p * p * 3, "patch_side", &model->image));
    model->image_patch_side = p;
    p = g->video_patch_side;
    UFORM_TRY(uform_load_media_part(loader, "video", "tube", g->video_tube_frames * p * p * 3,
                                    "patch_side", &model->video));
    model->video_patch_side = p;
    model->video_tube_frames = p ? g->video_tube_frames : 0;
    model->video_frame_stride = p ? g->video_frame_stride : 0;
    UFORM_TRY(uform_load_media_part(loader, "audio", "chunk", g->audio_chunk_samples,
                                    "chunk_samples", &model->audio));
    model->audio_chunk_samples = g->audio_chunk_samples;
    model->audio_sample_rate = g->audio_chunk_samples ? g->audio_sample_rate : 0;
    return UFORM_OK;
}

static uform_status_t uform_load_parts(uform_loader_t *loader, const uform_geometry_t *g) {
    uform_model_t *model = loader->model;
    size_t hidden = model->hidden;
    uform_status_t status;
    UFORM_TRY(uform_load_media_parts(loader, g));
    bool has_media = model->image.width || model->video.width || model->audio.width;
    bool has_text = uform_safetensors_find(loader->file, "text.bytes") != NULL;
    if (!has_text && !has_media)
        return uform_fail(UFORM_FORMAT, "checkpoint: tensor \"text.bytes\" is missing (and the "
                                        "metadata names no image, video or audio parts)");
    if (has_text) {
        UFORM_TRY(uform_load_table(loader, "text.bytes", 257, hidden, &model->text_bytes));
        UFORM_TRY(uform_load_vector(loader, "text.modality", hidden, true, &model->text_modality));
    }
    model->blocks = uform_alloc_zeroed(model->depth, sizeof(uform_block_t), "blocks");
    if (!model->blocks) return UFORM_OUT_OF_MEMORY;
    for (size_t l = 0; l < model->depth; l++) UFORM_TRY(uform_load_block(loader, l, &model->blocks[l]));
    UFORM_TRY(uform_load_vector(loader, "norm.weight", hidden, true, &model->norm_weight));
    UFORM_TRY(uform_load_vector(loader, "norm.bias", hidden, true, &model->norm_bias));
    UFORM_TRY(uform_model_transformer(model));
    UFORM_TRY(uform_load_matrix(loader, "heads.embedding.weight", model->dimensions, hidden, true,
                                &model->embedding_head));
    if (g->token_width) {
        UFORM_TRY(uform_load_matrix(loader, "heads.tokens.weight", model->token_width, hidden, true,
                                    &model->token_head));
    } else if (uform_safetensors_find(loader->file, "heads.tokens.weight")) {
        return uform_fail(UFORM_FORMAT,
                          "checkpoint: \"heads.tokens.weight\" is present but token_width is 0");
    }
    UFORM_TRY(uform_load_vector(loader, "heads.bytes.bias", 256, false, &model->bytes_bias));
    if (model->bytes_bias == NULL && g->choice_groups != 0)
        return uform_fail(UFORM_FORMAT,
                          "checkpoint: choice_temperature_groups is %llu but \"heads.bytes.bias\" "
                          "is missing",
                          (unsigned long long)g->choice_groups);
    if (model->bytes_bias && g->choice_groups == 0)
        return uform_fail(UFORM_FORMAT,
                          "checkpoint: \"heads.bytes.bias\" is present but choice_temperature_groups "
                          "is 0");
    const uform_tensor_t *temperatures = uform_expect(loader, "choices.log_temperature", 1,
                                                      g->choice_groups, 0, false, &status);
    if (status != UFORM_OK) return status;
    if (temperatures)
        UFORM_TRY(uform_load_vector(loader, "choices.log_temperature", g->choice_groups, true,
                                    &model->choice_log_temperature));
    return UFORM_OK;
}

static void uform_packed_release(uform_packed_t *packed) { uform_packed_free(packed); }

void uform_model_free(uform_model_t *model) {
    if (!model) return;
    /* First the executor we own: freeing it waits for jobs still using the weights. */
    if (model->owns_executor) uform_executor_free(model->executor);
    if (model->blocks) {
        for (size_t l = 0; l < model->depth; l++) {
            uform_block_t *block = &model->blocks[l];
            free(block->attention_norm_weight);
            free(block->attention_norm_bias);
            uform_packed_release(&block->qkv);
            free(block->qkv_bias);
            uform_packed_release(&block->out);
            free(block->out_bias);
            free(block->mlp_norm_weight);
            free(block->mlp_norm_bias);
            uform_packed_release(&block->up);
            free(block->up_bias);
            uform_packed_release(&block->down);
            free(block->down_bias);
        }
        free(model->blocks);
    }
    free(model->block_weights);
    free(model->text_bytes);
    free(model->text_modality);
    uform_media_part_t *parts[] = {&model->image, &model->video, &model->audio};
    for (size_t i = 0; i < 3; i++) {
        uform_packed_release(&parts[i]->projection);
        free(parts[i]->bias);
        free(parts[i]->modality);
    }
    free(model->norm_weight);
    free(model->norm_bias);
    uform_packed_release(&model->embedding_head);
    uform_packed_release(&model->token_head);
    free(model->bytes_bias);
    free(model->choice_log_temperature);
    free(model);
}

static uform_status_t uform_check_load_options(const uform_model_load_ram_options_t *options,
                                               const uform_cpu_kernels_t **kernels,
                                               uform_scalar_t *quantization) {
    uform_cpu_class_t cpu_class = options ? options->cpu_class : UFORM_CPU_CLASS_AUTO;
    uform_scalar_t scalar = options ? options->quantization : UFORM_SCALAR_F32;
    if (options && options->memory_domains_count && !options->memory_domains)
        return uform_fail(UFORM_INVALID_ARGUMENT, "memory_domains: NULL with a count of %zu",
                          options->memory_domains_count);
    if ((unsigned)cpu_class > UFORM_CPU_CLASS_SVE)
        return uform_fail(UFORM_INVALID_ARGUMENT, "cpu_class: %d is not a CPU class", (int)cpu_class);
    if (cpu_class == UFORM_CPU_CLASS_AUTO) cpu_class = uform_cpu_class_best();
    *kernels = uform_cpu_kernels_for(cpu_class);
    if (!*kernels || !uform_cpu_class_supported(cpu_class))
        return uform_fail(UFORM_UNSUPPORTED, "cpu_class: this %s cannot run the %s class",
                          *kernels ? "CPU" : "build", uform_cpu_class_name(cpu_class));
    /* F32 (0) derives: the checkpoint's BF16. */
    if (scalar == UFORM_SCALAR_F32 || scalar == UFORM_SCALAR_BF16) {
        *quantization = UFORM_SCALAR_BF16;
        return UFORM_OK;
    }
    if (scalar == UFORM_SCALAR_E4M3)
        return uform_fail(UFORM_UNSUPPORTED,
                          "quantization: E4M3 quantization at load is not built yet; use BF16");
    return uform_fail(UFORM_INVALID_ARGUMENT,
                      "quantization: %d is not BF16 or E4M3", (int)scalar);
}

static uform_status_t uform_model_from_file(const uform_safetensors_t *file,
                                            const uform_model_load_ram_options_t *options,
                                            uform_model_t **result) {
    const uform_cpu_kernels_t *kernels = NULL;
    uform_scalar_t quantization = UFORM_SCALAR_BF16;
    UFORM_TRY(uform_check_load_options(options, &kernels, &quantization));
    uform_geometry_t g = {0};
    UFORM_TRY(uform_read_geometry(file, &g));

    uform_model_t *model = uform_alloc_zeroed(1, sizeof(*model), "model");
    if (!model) return UFORM_OUT_OF_MEMORY;
    model->depth = g.depth;
    model->hidden = g.hidden;
    model->heads = g.hidden / 64;
    model->dimensions = g.dimensions;
    model->context = g.context;
    model->token_width = g.token_width;
    model->choice_temperature_groups = g.choice_groups;
    model->step = g.step;
    model->kernels = kernels;
    model->quantization = quantization;

    uform_loader_t loader = {.file = file, .model = model};
    uform_progress_begin(&loader.progress, options ? &options->progress : NULL,
                         uform_tensor_total(g.depth));
    uform_status_t status = uform_load_parts(&loader, &g);
    if (status == UFORM_OK) {
        if (options && options->executor) {
            model->executor = options->executor;
        } else {
            status = uform_executor_for_ram(0, options ? options->memory_domains : NULL,
                                            options ? options->memory_domains_count : 0,
                                            &model->executor);
            model->owns_executor = status == UFORM_OK;
        }
    }
    if (status == UFORM_OK) {
        /* The last progress mark: everything loaded, even when fewer tensors exist. */
        loader.loaded = loader.progress.total - 1;
        status = uform_loaded_one(&loader);
    }
    if (status != UFORM_OK) {
        uform_model_free(model);
        return status;
    }
    *result = model;
    return UFORM_OK;
}

uform_status_t uform_model_load_ram(const char *path, const uform_model_load_ram_options_t *options,
                                    uform_model_t **result) {
    if (!result) return uform_fail(UFORM_INVALID_ARGUMENT, "model: the out-pointer is NULL");
    *result = NULL;
    if (!path) return uform_fail(UFORM_INVALID_ARGUMENT, "path: NULL");
    uform_safetensors_t file;
    memset(&file, 0, sizeof(file));
    uform_status_t status = uform_safetensors_open(path, &file);
    if (status == UFORM_OK) status = uform_model_from_file(&file, options, result);
    uform_safetensors_close(&file);
    return status;
}

uform_status_t uform_model_load_ram_buffer(const void *data, size_t size,
                                           const uform_model_load_ram_options_t *options,
                                           uform_model_t **result) {
    if (!result) return uform_fail(UFORM_INVALID_ARGUMENT, "model: the out-pointer is NULL");
    *result = NULL;
    if (!data && size) return uform_fail(UFORM_INVALID_ARGUMENT, "buffer: NULL with %zu bytes", size);
    uform_safetensors_t file;
    memset(&file, 0, sizeof(file));
    uform_status_t status = uform_safetensors_parse(data, size, &file);
    if (status == UFORM_OK) status = uform_model_from_file(&file, options, result);
    uform_safetensors_close(&file);
    return status;
}

uform_status_t uform_model_load_vram(const char *path, const uint32_t *devices, size_t devices_count,
                                     uform_gpu_class_t gpu_class, uform_executor_t *executor,
                                     uform_scalar_t quantization, const uform_progress_t *progress,
                                     uform_model_t **result) {
    (void)path, (void)devices, (void)devices_count, (void)gpu_class, (void)executor;
    (void)quantization, (void)progress;
    if (result) *result = NULL;
    return uform_fail(UFORM_UNSUPPORTED,
                      "Model.load_vram: this build of libuform has no GPU backend yet");
}

uform_status_t uform_model_load_vram_buffer(const void *data, size_t size, const uint32_t *devices,
                                            size_t devices_count, uform_gpu_class_t gpu_class,
                                            uform_executor_t *executor, uform_scalar_t quantization,
                                            const uform_progress_t *progress,
                                            uform_model_t **result) {
    (void)data, (void)size, (void)devices, (void)devices_count, (void)gpu_class, (void)executor;
    (void)quantization, (void)progress;
    if (result) *result = NULL;
    return uform_fail(UFORM_UNSUPPORTED,
                      "Model.load_vram_buffer: this build of libuform has no GPU backend yet");
}

uform_status_t uform_model_describe(const uform_model_t *model,
                                    uform_model_description_t *description) {
    if (!model) return uform_fail(UFORM_INVALID_ARGUMENT, "model: NULL");
    if (!description) return uform_fail(UFORM_INVALID_ARGUMENT, "description: NULL");
    description->dimensions = model->dimensions;
    description->context = model->context;
    description->quantization = model->quantization;
    description->memory_usage = model->memory_usage;
    description->cpu_class = model->kernels->cpu_class;
    description->gpu_class = UFORM_GPU_CLASS_NONE;
    description->token_width = model->token_width;
    description->choice_temperature_groups = model->choice_temperature_groups;
    description->depth = model->depth;
    description->hidden = model->hidden;
    return UFORM_OK;
}
