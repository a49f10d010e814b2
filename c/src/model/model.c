/* model.c: loading a checkpoint into host memory, describing and freeing it.
 *
 * The checkpoint format is DESIGN section 5 (docs/architecture.md): tensor
 * names and shapes fixed, `__metadata__["uform"]` a JSON object with the
 * geometry (read by geometry.c). Every tensor is checked against the geometry before use; a
 * mismatch is a FormatError naming the tensor. */
#include "model/model.h"
#include "model/geometry.h"
#include "backend/cpu/cpu_backend.h"
#include "core/safetensors.h"
#include "model/quantize.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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

/* Moves FP32 values read on the host into the model's memory: a RAM model
 * keeps them; a device model copies them to its device and frees them. */
static uform_status_t uform_model_place(uform_model_t *model, float *values, size_t count,
                                        const char *name, float **out) {
    *out = values;
    if (!model->device.ops) return UFORM_OK;
    uform_backend_t *device = &model->device;
    *out = device->ops->alloc(device, count * sizeof(float));
    if (*out) device->ops->upload(device, *out, values, count * sizeof(float));
    free(values);
    if (!*out) return uform_fail_context(UFORM_OUT_OF_MEMORY, name);
    return UFORM_OK;
}

/* Frees what uform_model_place placed. */
static void uform_model_release(const uform_model_t *model, float *values) {
    if (!model->device.ops) {
        free(values);
    } else if (values) {
        uform_backend_t device = model->device;
        device.ops->free(&device, values);
    }
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
    UFORM_TRY(uform_model_place(loader->model, values, length, name, out));
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
    UFORM_TRY(uform_model_place(loader->model, values, rows * cols, name, out));
    loader->model->memory_usage += rows * cols * sizeof(float);
    return uform_loaded_one(loader);
}

/* A [rows, cols] matrix quantized to E4M3 row by row (quantize.h) from its
 * stored values, and packed. */
static uform_status_t uform_pack_quantized(uform_loader_t *loader, const uform_tensor_t *tensor,
                                           size_t rows, size_t cols, uform_packed_t *out) {
    uint8_t *codes = uform_alloc(rows, cols, tensor->name);
    float *scales = uform_alloc(rows, sizeof(float), tensor->name);
    float *row = uform_alloc(cols, sizeof(float), tensor->name);
    uform_status_t status = codes && scales && row ? UFORM_OK : UFORM_OUT_OF_MEMORY;
    for (size_t i = 0; status == UFORM_OK && i < rows; i++) {
        for (size_t p = 0; p < cols; p++) row[p] = uform_tensor_value(tensor, i * cols + p);
        scales[i] = uform_quantize_e4m3_row(row, cols, codes + i * cols);
    }
    if (status == UFORM_OK) {
        uform_backend_t backend = uform_model_backend(loader->model, NULL);
        status = backend.ops->pack_e4m3(&backend, codes, scales, rows, cols, out);
    }
    free(codes);
    free(scales);
    free(row);
    return status;
}

/* A [rows, cols] matrix packed for the model's CPU class. BF16 weights pack as
 * they are; F32/F16 ones are rounded to BF16, the scalar the blocks run in.
 * A block matrix of an E4M3 model (`block`) is quantized instead. */
static uform_status_t uform_load_matrix(uform_loader_t *loader, const char *name, size_t rows,
                                        size_t cols, bool required, bool block, uform_packed_t *out) {
    memset(out, 0, sizeof(*out));
    uform_status_t status;
    const uform_tensor_t *tensor = uform_expect(loader, name, 2, rows, cols, required, &status);
    if (!tensor) return status;
    size_t count = rows * cols;
    UFORM_TRY(uform_check_finite(tensor, count));
    if (block && loader->model->quantization == UFORM_SCALAR_E4M3) {
        status = uform_pack_quantized(loader, tensor, rows, cols, out);
    } else {
        uint16_t *bits = uform_alloc(count, sizeof(uint16_t), name);
        if (!bits) return UFORM_OUT_OF_MEMORY;
        if (tensor->dtype == UFORM_DTYPE_BF16) memcpy(bits, tensor->data, count * 2);
        else
            for (size_t i = 0; i < count; i++) bits[i] = uform_f32_to_bf16(uform_tensor_value(tensor, i));
        uform_backend_t backend = uform_model_backend(loader->model, NULL);
        status = backend.ops->pack(&backend, bits, rows, cols, out);
        free(bits);
    }
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
                                true, true, &block->qkv));
    UFORM_TRY(uform_load_vector(loader, UFORM_NAME("attention.qkv.bias"), 3 * hidden, true,
                                &block->qkv_bias));
    UFORM_TRY(uform_load_matrix(loader, UFORM_NAME("attention.out.weight"), hidden, hidden, true, true,
                                &block->out));
    UFORM_TRY(uform_load_vector(loader, UFORM_NAME("attention.out.bias"), hidden, true,
                                &block->out_bias));
    UFORM_TRY(uform_load_vector(loader, UFORM_NAME("mlp.norm.weight"), hidden, true,
                                &block->mlp_norm_weight));
    UFORM_TRY(uform_load_vector(loader, UFORM_NAME("mlp.norm.bias"), hidden, true,
                                &block->mlp_norm_bias));
    UFORM_TRY(uform_load_matrix(loader, UFORM_NAME("mlp.up.weight"), 4 * hidden, hidden, true, true,
                                &block->up));
    UFORM_TRY(uform_load_vector(loader, UFORM_NAME("mlp.up.bias"), 4 * hidden, true, &block->up_bias));
    UFORM_TRY(uform_load_matrix(loader, UFORM_NAME("mlp.down.weight"), hidden, 4 * hidden, true, true,
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
    UFORM_TRY(uform_load_matrix(loader, name, hidden, width, true, false, &part->projection));
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
                                false, &model->embedding_head));
    if (g->token_width) {
        UFORM_TRY(uform_load_matrix(loader, "heads.tokens.weight", model->token_width, hidden, true,
                                    false, &model->token_head));
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

static void uform_packed_release(const uform_model_t *model, uform_packed_t *packed) {
    uform_backend_t backend = uform_model_backend(model, NULL);
    backend.ops->packed_free(&backend, packed);
}

void uform_model_free(uform_model_t *model) {
    if (!model) return;
    /* First the jobs still queued on an executor we own (they use the
     * weights); the executor itself goes last, since a VRAM executor owns the
     * device the weights are freed on. */
    if (model->owns_executor) uform_executor_drain(model->executor);
    /* the copies on the other devices (they share this model's executor) */
    for (size_t i = 1; model->replicas && i < model->replica_count; i++) uform_model_free(model->replicas[i]);
    free(model->replicas);
    /* a VRAM model's memory is freed on its GPU's thread state (cudaSetDevice):
     * held as every verb holds it */
    uform_backend_t held = model->device;
    if (held.ops && held.ops->acquire) held.ops->acquire(&held);
    if (model->blocks) {
        for (size_t l = 0; l < model->depth; l++) {
            uform_block_t *block = &model->blocks[l];
            uform_model_release(model, block->attention_norm_weight);
            uform_model_release(model, block->attention_norm_bias);
            uform_packed_release(model, &block->qkv);
            uform_model_release(model, block->qkv_bias);
            uform_packed_release(model, &block->out);
            uform_model_release(model, block->out_bias);
            uform_model_release(model, block->mlp_norm_weight);
            uform_model_release(model, block->mlp_norm_bias);
            uform_packed_release(model, &block->up);
            uform_model_release(model, block->up_bias);
            uform_packed_release(model, &block->down);
            uform_model_release(model, block->down_bias);
        }
        free(model->blocks);
    }
    free(model->block_weights);
    uform_model_release(model, model->text_bytes);
    uform_model_release(model, model->text_modality);
    uform_media_part_t *parts[] = {&model->image, &model->video, &model->audio};
    for (size_t i = 0; i < 3; i++) {
        uform_packed_release(model, &parts[i]->projection);
        uform_model_release(model, parts[i]->bias);
        uform_model_release(model, parts[i]->modality);
    }
    uform_model_release(model, model->norm_weight);
    uform_model_release(model, model->norm_bias);
    uform_packed_release(model, &model->embedding_head);
    uform_packed_release(model, &model->token_head);
    uform_model_release(model, model->bytes_bias);
    uform_model_release(model, model->choice_log_temperature);
    if (held.ops && held.ops->release) held.ops->release(&held);
    if (model->owns_executor) uform_executor_free(model->executor);
    free(model);
}

static uform_status_t uform_check_load_options(const uform_model_load_ram_options_t *options,
                                               uform_cpu_class_t *cpu_class_out,
                                               uform_scalar_t *quantization) {
    uform_cpu_class_t cpu_class = options ? options->cpu_class : UFORM_CPU_CLASS_AUTO;
    uform_scalar_t scalar = options ? options->quantization : UFORM_SCALAR_F32;
    if (options && options->memory_domains_count && !options->memory_domains)
        return uform_fail(UFORM_INVALID_ARGUMENT, "memory_domains: NULL with a count of %zu",
                          options->memory_domains_count);
    UFORM_TRY(uform_cpu_class_resolve(cpu_class, cpu_class_out));
    /* F32 (0) derives: the checkpoint's BF16. */
    if (scalar == UFORM_SCALAR_F32 || scalar == UFORM_SCALAR_BF16) {
        *quantization = UFORM_SCALAR_BF16;
        return UFORM_OK;
    }
    if (scalar == UFORM_SCALAR_E4M3) {
        *quantization = UFORM_SCALAR_E4M3;
        return UFORM_OK;
    }
    return uform_fail(UFORM_INVALID_ARGUMENT,
                      "quantization: %d is not BF16 or E4M3", (int)scalar);
}

/* A model of `quantization` from a parsed checkpoint: on `device` when given
 * (its memory holds every buffer), else in host memory packed for cpu_class.
 * Verbs given no executor run on `executor`, or on one made for the model
 * (RAM: over memory_domains; a device model must be given one). Progress
 * reports this copy's tensors as copy `copy` of `copies` loaded in turn. */
static uform_status_t uform_model_build(const uform_safetensors_t *file, const uform_backend_t *device,
                                        uform_cpu_class_t cpu_class, uform_scalar_t quantization,
                                        uform_executor_t *executor, const uint32_t *memory_domains,
                                        size_t memory_domains_count, const uform_progress_t *progress,
                                        size_t copy, size_t copies, uform_model_t **result) {
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
    model->cpu_class = device ? UFORM_CPU_CLASS_AUTO : cpu_class;
    model->quantization = quantization;
    model->replica_count = 1;
    if (device) model->device = *device;

    size_t tensors = uform_tensor_total(g.depth);
    uform_loader_t loader = {.file = file, .model = model, .loaded = copy * tensors};
    uform_progress_begin(&loader.progress, progress, copies * tensors);
    uform_status_t status = uform_load_parts(&loader, &g);
    if (status == UFORM_OK && device) status = device->ops->synchronize(&model->device);
    if (status == UFORM_OK) {
        if (executor) {
            model->executor = executor;
        } else {
            status = uform_executor_for_ram(0, memory_domains, memory_domains_count, &model->executor);
            model->owns_executor = status == UFORM_OK;
        }
    }
    if (status == UFORM_OK) {
        /* This copy's last progress mark: everything loaded, even when fewer tensors exist. */
        loader.loaded = (copy + 1) * tensors - 1;
        status = uform_loaded_one(&loader);
    }
    if (status != UFORM_OK) {
        uform_model_free(model);
        return status;
    }
    *result = model;
    return UFORM_OK;
}

static uform_status_t uform_model_from_file(const uform_safetensors_t *file,
                                            const uform_model_load_ram_options_t *options,
                                            uform_model_t **result) {
    uform_cpu_class_t cpu_class = UFORM_CPU_CLASS_SERIAL;
    uform_scalar_t quantization = UFORM_SCALAR_BF16;
    UFORM_TRY(uform_check_load_options(options, &cpu_class, &quantization));
    return uform_model_build(file, NULL, cpu_class, quantization, options ? options->executor : NULL,
                             options ? options->memory_domains : NULL,
                             options ? options->memory_domains_count : 0,
                             options ? &options->progress : NULL, 0, 1, result);
}

uform_status_t uform_model_load_on_devices(const uform_safetensors_t *file, const uform_backend_t *devices,
                                           size_t count, uform_scalar_t quantization,
                                           uform_executor_t *executor, const uform_progress_t *progress,
                                           uform_model_t **result) {
    *result = NULL;
    if (quantization == UFORM_SCALAR_F32) quantization = UFORM_SCALAR_BF16;   /* as stored */
    if (quantization != UFORM_SCALAR_BF16 && quantization != UFORM_SCALAR_E4M3)
        return uform_fail(UFORM_INVALID_ARGUMENT, "quantization: %d is not BF16 or E4M3", (int)quantization);
    if (!executor) return uform_fail(UFORM_INVALID_ARGUMENT, "executor: a device model needs one");
    uform_model_t **replicas = uform_alloc_zeroed(count, sizeof(uform_model_t *), "model replicas");
    if (!replicas) return UFORM_OUT_OF_MEMORY;
    uform_status_t status = UFORM_OK;
    for (size_t i = 0; i < count && status == UFORM_OK; i++) {
        uform_backend_t device = devices[i];
        if (device.ops->acquire) device.ops->acquire(&device);
        status = uform_model_build(file, &device, UFORM_CPU_CLASS_AUTO, quantization, executor, NULL, 0,
                                   progress, i, count, &replicas[i]);
        if (device.ops->release) device.ops->release(&device);
    }
    if (status != UFORM_OK) {
        for (size_t i = 0; i < count; i++) uform_model_free(replicas[i]);
        free(replicas);
        return status;
    }
    uform_model_t *model = replicas[0];
    if (count > 1) {
        model->replicas = replicas;
        model->replica_count = count;
    } else {
        free(replicas);
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

uform_status_t uform_model_describe(const uform_model_t *model,
                                    uform_model_description_t *description) {
    if (!model) return uform_fail(UFORM_INVALID_ARGUMENT, "model: NULL");
    if (!description) return uform_fail(UFORM_INVALID_ARGUMENT, "description: NULL");
    description->dimensions = model->dimensions;
    description->context = model->context;
    description->quantization = model->quantization;
    description->memory_usage = 0;   /* every device's copy */
    for (size_t i = 0; i < model->replica_count; i++)
        description->memory_usage += uform_model_replica(model, i)->memory_usage;
    description->cpu_class = model->device.ops ? UFORM_CPU_CLASS_AUTO : model->cpu_class;
    description->gpu_class = model->gpu_class;
    description->token_width = model->token_width;
    description->choice_temperature_groups = model->choice_temperature_groups;
    description->depth = model->depth;
    description->hidden = model->hidden;
    return UFORM_OK;
}

uform_status_t uform_model_quantized_matrix(const uform_model_t *model, const char *name,
                                            size_t *rows, size_t *cols, uint8_t *codes,
                                            float *scales) {
    if (!model) return uform_fail(UFORM_INVALID_ARGUMENT, "model: NULL");
    if (!name) return uform_fail(UFORM_INVALID_ARGUMENT, "name: NULL");
    if (!rows || !cols) return uform_fail(UFORM_INVALID_ARGUMENT, "rows, cols: NULL");
    if (model->quantization != UFORM_SCALAR_E4M3)
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "model: loaded with quantization BF16, so it holds no quantized matrix");
    static const char *const suffixes[] = {"attention.qkv.weight", "attention.out.weight",
                                           "mlp.up.weight", "mlp.down.weight"};
    const uform_packed_t *packed = NULL;
    for (size_t l = 0; l < model->depth && !packed; l++)
        for (size_t s = 0; s < 4 && !packed; s++) {
            char candidate[96];
            snprintf(candidate, sizeof(candidate), "blocks.%zu.%s", l, suffixes[s]);
            if (strcmp(candidate, name) != 0) continue;
            const uform_block_t *block = &model->blocks[l];
            packed = s == 0 ? &block->qkv : s == 1 ? &block->out : s == 2 ? &block->up : &block->down;
        }
    if (!packed)
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "name: \"%s\" is not a quantized matrix (blocks.<l>.attention.qkv.weight, "
                          "attention.out.weight, mlp.up.weight or mlp.down.weight, l < %zu)",
                          name, model->depth);
    *rows = packed->n;
    *cols = packed->k;
    if (!codes && !scales) return UFORM_OK;
    if (!codes || !scales)
        return uform_fail(UFORM_INVALID_ARGUMENT, "codes, scales: give both or neither");
    uform_backend_t backend = uform_model_backend(model, NULL);
    if (backend.ops->acquire) backend.ops->acquire(&backend);   /* a device's: its copies run on its stream */
    uform_status_t status = backend.ops->unpack_e4m3(&backend, packed, codes, scales);
    if (backend.ops->release) backend.ops->release(&backend);
    return status;
}
