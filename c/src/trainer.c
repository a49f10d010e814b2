/* trainer.c: the CPU trainer (docs/training.md): FP32 master weights in one
 * flat buffer (gradients and AdamW moments in three more of the same layout),
 * an explicit forward that keeps what backward needs, the backward written
 * out layer by layer, the objectives, and AdamW.
 *
 * Scope of this version: text items; the MASKED, CONTRASTIVE and JOINT
 * objectives with late interaction and calibrated choices; one replica per
 * memory domain of the executor, data parallel (items split by token count,
 * each replica packs its own rows, embeddings and token vectors gathered for
 * the world's contrastive and late-interaction terms, gradients summed in
 * replica order). Replicas share one copy of the weights and run one after
 * another on the executor's threads. Image, video and audio items (their
 * file bytes) are decoded and tokenised as the encode verbs do, their rows
 * projected (media_rows.c) and, when the objective masks, partly replaced by
 * the modality's mask vector and reconstructed. GPUs answer UFORM_UNSUPPORTED. */
#include "backward.h"
#include "choices_loss.h"
#include "cpu/sgemm.h"
#include "late_interaction_loss.h"
#include "media_encode.h"
#include "media_objectives.h"
#include "media_rows.h"
#include "model.h"
#include "objectives.h"
#include "optimizer.h"
#include "packing.h"
#include "safetensors.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define UFORM_HEAD_WIDTH 64
#define UFORM_PAIRS 32
#define UFORM_BYTES 256

/* ---- parameters ---------------------------------------------------------- */

typedef struct {
    char name[64];
    size_t offset, rows, cols;  /* cols 0: a vector of `rows` */
    bool decay;                 /* AdamW weight decay (matrices but the byte table) */
    bool f32;                   /* saved as F32 (else BF16) */
} uform_slot_t;

/* One media modality of the run: slots of its parameters (0 width: absent). */
typedef struct {
    size_t width;                 /* values per token: P*P*3, T*P*P*3 or S */
    size_t modality, projection, projection_bias, mask, head, head_bias;
    float mask_ratio, weight;
} uform_trainer_media_t;

typedef struct {
    size_t norm1_weight, norm1_bias, qkv_weight, qkv_bias, out_weight, out_bias;
    size_t norm2_weight, norm2_bias, up_weight, up_bias, down_weight, down_bias;
} uform_block_slots_t;

struct uform_trainer {
    uform_executor_t *executor;
    size_t depth, hidden, heads, dimensions, context;
    uform_objective_t objective;
    bool masks_text, contrasts;
    bool byte_head;                    /* masked text or choices */
    bool late, chooses;                /* late interaction / choices configured */
    uform_late_interaction_t late_config;   /* resolved: no zero fields */
    float choices_weight;
    size_t choice_groups, max_choices;
    uform_masking_t masking;
    uform_contrastive_config_t contrastive;
    size_t widths[64];
    uform_schedule_t schedule;
    uform_packing_limits_t limits;
    uint64_t seed, step;
    size_t truncated, dropped;         /* since the last stats read */

    uform_slot_t *slots;
    size_t slots_count, count;         /* tensors; floats in each flat buffer */
    float *parameters, *gradients, *first_moment, *second_moment;
    uint8_t *decay;
    uform_block_slots_t *blocks;
    size_t bytes_table, modality, norm_weight, norm_bias, embedding_head, bytes_bias;
    size_t log_inverse_temperature, contrastive_bias;
    size_t token_head, late_log_inverse_temperature, late_bias, choice_log_temperature;
    uform_trainer_media_t media[4];    /* by uform_modality_t; [TEXT] unused */
    uform_model_t geometry;            /* context and media shapes, for the tokenizers */
    /* Workspaces kept across steps, one per replica: a step allocates (and the
     * kernel zero-fills pages) only when it needs more than any step before. */
    void **workspaces;
    size_t *workspace_bytes;
    size_t workspaces_count;
    /* Set while a call uses the trainer: a trainer is used by one thread at a
     * time (DESIGN section 3), and a second concurrent call is refused. */
    atomic_flag busy;
};

/* Takes the trainer for one call, or refuses when another call holds it. */
static uform_status_t uform_trainer_enter(const uform_trainer_t *t, const char *what) {
    /* busy is the one mutable field of a trainer read through a const handle */
    if (atomic_flag_test_and_set(&((uform_trainer_t *)t)->busy))
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "%s: the trainer is in use by another call (a step, save or read running "
                          "on another thread); a trainer is used by one thread at a time", what);
    return UFORM_OK;
}

static void uform_trainer_leave(const uform_trainer_t *t) {
    atomic_flag_clear(&((uform_trainer_t *)t)->busy);
}

static size_t uform_add_slot(uform_trainer_t *t, const char *name, size_t rows, size_t cols,
                             bool decay, bool f32) {
    uform_slot_t *slot = &t->slots[t->slots_count++];
    snprintf(slot->name, sizeof(slot->name), "%s", name);
    slot->offset = t->count;
    slot->rows = rows;
    slot->cols = cols;
    slot->decay = decay;
    slot->f32 = f32;
    t->count += rows * (cols ? cols : 1);
    return slot->offset;
}

/* The tensors of the run, in checkpoint order; returns how many. */
static size_t uform_layout(uform_trainer_t *t) {
    size_t h = t->hidden;
    char name[64];
    t->slots_count = t->count = 0;
    t->bytes_table = uform_add_slot(t, "text.bytes", UFORM_BYTES + 1, h, false, false);
    t->modality = uform_add_slot(t, "text.modality", h, 0, false, false);
    for (size_t l = 0; l < t->depth; l++) {
        uform_block_slots_t *b = &t->blocks[l];
#define UFORM_SLOT(field, suffix, rows, cols, decay)                                            \
    (snprintf(name, sizeof(name), "blocks.%zu.%s", l, suffix),                                  \
     b->field = uform_add_slot(t, name, rows, cols, decay, false))
        UFORM_SLOT(norm1_weight, "attention.norm.weight", h, 0, false);
        UFORM_SLOT(norm1_bias, "attention.norm.bias", h, 0, false);
        UFORM_SLOT(qkv_weight, "attention.qkv.weight", 3 * h, h, true);
        UFORM_SLOT(qkv_bias, "attention.qkv.bias", 3 * h, 0, false);
        UFORM_SLOT(out_weight, "attention.out.weight", h, h, true);
        UFORM_SLOT(out_bias, "attention.out.bias", h, 0, false);
        UFORM_SLOT(norm2_weight, "mlp.norm.weight", h, 0, false);
        UFORM_SLOT(norm2_bias, "mlp.norm.bias", h, 0, false);
        UFORM_SLOT(up_weight, "mlp.up.weight", 4 * h, h, true);
        UFORM_SLOT(up_bias, "mlp.up.bias", 4 * h, 0, false);
        UFORM_SLOT(down_weight, "mlp.down.weight", h, 4 * h, true);
        UFORM_SLOT(down_bias, "mlp.down.bias", h, 0, false);
#undef UFORM_SLOT
    }
    t->norm_weight = uform_add_slot(t, "norm.weight", h, 0, false, false);
    t->norm_bias = uform_add_slot(t, "norm.bias", h, 0, false, false);
    t->embedding_head = uform_add_slot(t, "heads.embedding.weight", t->dimensions, h, true, false);
    if (t->late)
        t->token_head = uform_add_slot(t, "heads.tokens.weight", t->late_config.width, h, true, false);
    if (t->byte_head) t->bytes_bias = uform_add_slot(t, "heads.bytes.bias", UFORM_BYTES, 0, false, false);
    if (t->contrasts) {
        t->log_inverse_temperature = uform_add_slot(t, "contrastive.log_inverse_temperature",
                                                    t->contrastive.groups, 0, false, true);
        t->contrastive_bias = uform_add_slot(t, "contrastive.bias", t->contrastive.groups, 0, false, true);
    }
    if (t->late) {
        t->late_log_inverse_temperature =
            uform_add_slot(t, "late_interaction.log_inverse_temperature", 1, 0, false, true);
        t->late_bias = uform_add_slot(t, "late_interaction.bias", 1, 0, false, true);
    }
    if (t->chooses)
        t->choice_log_temperature =
            uform_add_slot(t, "choices.log_temperature", t->choice_groups, 0, false, true);
    /* Media parts last, so a text run's initial weights do not depend on them. */
    static const char *const modalities[4] = {NULL, "image", "video", "audio"};
    static const char *const inputs[4] = {NULL, "patch", "tube", "chunk"};
    for (size_t m = UFORM_MODALITY_IMAGE; m <= UFORM_MODALITY_AUDIO; m++) {
        uform_trainer_media_t *media = &t->media[m];
        if (!media->width) continue;
        snprintf(name, sizeof(name), "%s.modality", modalities[m]);
        media->modality = uform_add_slot(t, name, h, 0, false, false);
        snprintf(name, sizeof(name), "%s.%s.weight", modalities[m], inputs[m]);
        media->projection = uform_add_slot(t, name, h, media->width, true, false);
        snprintf(name, sizeof(name), "%s.%s.bias", modalities[m], inputs[m]);
        media->projection_bias = uform_add_slot(t, name, h, 0, false, false);
        if (!t->masks_text) continue;
        snprintf(name, sizeof(name), "%s.mask", modalities[m]);
        media->mask = uform_add_slot(t, name, h, 0, false, false);
        snprintf(name, sizeof(name), "heads.%s.weight", modalities[m]);
        media->head = uform_add_slot(t, name, media->width, h, true, false);
        snprintf(name, sizeof(name), "heads.%s.bias", modalities[m]);
        media->head_bias = uform_add_slot(t, name, media->width, 0, false, false);
    }
    return t->slots_count;
}

/* Normal samples from the counter-based generator (Box-Muller), stream 7000+. */
static float uform_normal(uint64_t seed, uint64_t index) {
    double u1 = uform_random_uniform(seed, 0, index, 0, 7001);
    double u2 = uform_random_uniform(seed, 0, index, 0, 7002);
    if (u1 < 0x1p-30) u1 = 0x1p-30;
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

/* Initial weights: matrices and the byte table N(0, 0.02), output projections
 * of blocks scaled by 1/sqrt(2 depth) (GPT-2), norms 1, biases 0. */
static void uform_initialise(uform_trainer_t *t, float initial_log_temperature, float initial_bias) {
    float *p = t->parameters;
    memset(p, 0, t->count * sizeof(float));
    for (size_t s = 0; s < t->slots_count; s++) {
        const uform_slot_t *slot = &t->slots[s];
        size_t n = slot->rows * (slot->cols ? slot->cols : 1);
        const char *name = slot->name;
        size_t length = strlen(name);
        bool norm_weight = length > 12 && strcmp(name + length - 12, ".norm.weight") == 0;
        if (norm_weight || strcmp(name, "norm.weight") == 0) {
            for (size_t i = 0; i < n; i++) p[slot->offset + i] = 1.0f;
        } else if (slot->cols || (length > 9 && strcmp(name + length - 9, ".modality") == 0) ||
                   (length > 5 && strcmp(name + length - 5, ".mask") == 0)) {
            float scale = 0.02f;
            if (strstr(name, "out.weight") || strstr(name, "down.weight"))
                scale /= sqrtf(2.0f * (float)t->depth);
            for (size_t i = 0; i < n; i++)
                p[slot->offset + i] = scale * uform_normal(t->seed, slot->offset + i);
        }
    }
    if (t->contrasts)
        for (size_t g = 0; g < t->contrastive.groups; g++) {
            p[t->log_inverse_temperature + g] = initial_log_temperature;
            p[t->contrastive_bias + g] = initial_bias;
        }
    if (t->late) {
        p[t->late_log_inverse_temperature] = logf(t->late_config.inverse_temperature);
        p[t->late_bias] = t->late_config.bias;
    }
    /* choices.log_temperature starts at 0: temperature 1 */
    for (size_t s = 0; s < t->slots_count; s++)
        memset(t->decay + t->slots[s].offset, t->slots[s].decay ? 1 : 0,
               t->slots[s].rows * (t->slots[s].cols ? t->slots[s].cols : 1));
}

void uform_trainer_free(uform_trainer_t *t) {
    if (!t) return;
    for (size_t r = 0; r < t->workspaces_count; r++) uform_free_aligned(t->workspaces[r]);
    free(t->workspaces);
    free(t->workspace_bytes);
    uform_free_aligned(t->parameters);
    uform_free_aligned(t->gradients);
    uform_free_aligned(t->first_moment);
    uform_free_aligned(t->second_moment);
    free(t->decay);
    free(t->slots);
    free(t->blocks);
    free(t);
}

/* LateInteraction with every zero derived (docs/training.md section 6). */
static uform_status_t uform_late_resolve(uform_trainer_t *t, const uform_late_interaction_t *given) {
    uform_late_interaction_t *c = &t->late_config;
    *c = *given;
    if (!isfinite(c->weight) || c->weight < 0)
        return uform_fail(UFORM_INVALID_ARGUMENT, "late_interaction.weight: %g is not finite and >= 0",
                          (double)c->weight);
    if (!isfinite(c->inverse_temperature) || c->inverse_temperature < 0)
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "late_interaction.inverse_temperature: %g is not finite and >= 0",
                          (double)c->inverse_temperature);
    if (!isfinite(c->bias))
        return uform_fail(UFORM_INVALID_ARGUMENT, "late_interaction.bias: %g is not finite", (double)c->bias);
    if ((unsigned)c->pair_loss > UFORM_PAIR_LOSS_SIGMOID)
        return uform_fail(UFORM_INVALID_ARGUMENT, "late_interaction.pair_loss: %d is not a pair loss form",
                          (int)c->pair_loss);
    if (c->width > 65536)
        return uform_fail(UFORM_INVALID_ARGUMENT, "late_interaction.width: %zu is more than 65536", c->width);
    size_t tokens = t->limits.rows * t->limits.columns;
    if (c->weight == 0) c->weight = 1;
    if (c->width == 0) c->width = 128;
    if (c->inverse_temperature == 0) c->inverse_temperature = 10;
    if (c->pair_loss == UFORM_PAIR_LOSS_DERIVED) c->pair_loss = UFORM_PAIR_LOSS_RANKED;
    if (c->bias == 0 && c->pair_loss == UFORM_PAIR_LOSS_SIGMOID) c->bias = -10;
    if (c->max_query_span == 0) c->max_query_span = t->limits.columns;
    if (c->max_query_tokens_per_device == 0) c->max_query_tokens_per_device = tokens;
    if (c->max_documents_per_device == 0) c->max_documents_per_device = t->limits.segments;
    if (c->max_document_tokens_per_device == 0) c->max_document_tokens_per_device = tokens;
    return UFORM_OK;
}

static uform_status_t uform_choices_resolve(uform_trainer_t *t, const uform_choices_t *given,
                                            size_t max_choices_per_item) {
    if (!isfinite(given->weight) || given->weight < 0)
        return uform_fail(UFORM_INVALID_ARGUMENT, "choices.weight: %g is not finite and >= 0",
                          (double)given->weight);
    if (given->temperature_groups > 65536)
        return uform_fail(UFORM_INVALID_ARGUMENT, "choices.temperature_groups: %zu is more than 65536",
                          given->temperature_groups);
    if (max_choices_per_item > UFORM_BYTES)
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "batch.max_choices_per_item: %zu is more than the 256 byte values",
                          max_choices_per_item);
    t->choices_weight = given->weight == 0 ? 1.0f : given->weight;
    t->choice_groups = given->temperature_groups ? given->temperature_groups : 1;
    t->max_choices = max_choices_per_item ? max_choices_per_item : UFORM_BYTES;
    return UFORM_OK;
}

/* The run's media shapes (BatchShape's image/video/audio slices; zero fields
 * derive as the model loader derives them: channels 3, tube_frames 2,
 * frame_stride 1, sample_rate 16000). Called once limits are known. */
static uform_status_t uform_media_configure(uform_trainer_t *t, const uform_batch_shape_t *b) {
    uform_model_t *g = &t->geometry;
    g->context = t->limits.columns;
    g->hidden = t->hidden;
    const size_t channels[4] = {0, b->image.channels, b->video.channels, 0};
    const char *const names[4] = {NULL, "batch.image", "batch.video", NULL};
    for (size_t m = UFORM_MODALITY_IMAGE; m <= UFORM_MODALITY_VIDEO; m++)
        if (channels[m] != 0 && channels[m] != 3)
            return uform_fail(UFORM_INVALID_ARGUMENT, "%s.channels: %zu; only 3 (RGB) is supported",
                              names[m], channels[m]);
    if (b->image.patch_side > 256 || b->video.patch_side > 256)
        return uform_fail(UFORM_INVALID_ARGUMENT, "batch: patch_side is more than 256");
    if (b->video.tube_frames > 256 || b->audio.chunk_samples > (1u << 20))
        return uform_fail(UFORM_INVALID_ARGUMENT, "batch: tube_frames or chunk_samples too large");
    if (b->image.patch_side) {
        g->image_patch_side = b->image.patch_side;
        g->image.width = t->media[UFORM_MODALITY_IMAGE].width = 3 * b->image.patch_side * b->image.patch_side;
    }
    if (b->video.patch_side) {
        g->video_patch_side = b->video.patch_side;
        g->video_tube_frames = b->video.tube_frames ? b->video.tube_frames : 2;
        g->video_frame_stride = b->video.frame_stride ? b->video.frame_stride : 1;
        g->video.width = t->media[UFORM_MODALITY_VIDEO].width =
            g->video_tube_frames * 3 * b->video.patch_side * b->video.patch_side;
    }
    if (b->audio.chunk_samples) {
        g->audio_chunk_samples = b->audio.chunk_samples;
        g->audio_sample_rate = b->audio.sample_rate ? b->audio.sample_rate : 16000;
        g->audio.width = t->media[UFORM_MODALITY_AUDIO].width = b->audio.chunk_samples;
    }
    const float ratios[4] = {0, t->masking.image_mask_ratio, t->masking.video_mask_ratio,
                             t->masking.audio_mask_ratio};
    const float weights[4] = {0, t->masking.image_weight, t->masking.video_weight, t->masking.audio_weight};
    for (size_t m = UFORM_MODALITY_IMAGE; m <= UFORM_MODALITY_AUDIO; m++) {
        t->media[m].mask_ratio = ratios[m];
        t->media[m].weight = weights[m];
    }
    return UFORM_OK;
}

static uform_status_t uform_trainer_configure(uform_trainer_t *t, const uform_trainer_options_t *o,
                                              float *initial_log_temperature, float *initial_bias) {
    if ((unsigned)o->objective > UFORM_OBJECTIVE_JOINT)
        return uform_fail(UFORM_INVALID_ARGUMENT, "objective: %d is not an objective", (int)o->objective);
    t->depth = o->depth ? o->depth : 4;
    t->hidden = o->hidden ? o->hidden : 256;
    if (t->depth > 1024)
        return uform_fail(UFORM_INVALID_ARGUMENT, "depth: %zu is more than 1024", t->depth);
    if (t->hidden % 64 || t->hidden > 65536)
        return uform_fail(UFORM_INVALID_ARGUMENT, "hidden: %zu is not a multiple of 64 up to 65536",
                          t->hidden);
    t->heads = t->hidden / UFORM_HEAD_WIDTH;
    t->objective = o->objective;
    t->masks_text = o->objective != UFORM_OBJECTIVE_CONTRASTIVE;
    t->contrasts = o->objective != UFORM_OBJECTIVE_MASKED;
    t->late = o->late_interaction != NULL;
    t->chooses = o->choices != NULL;
    t->byte_head = t->masks_text || t->chooses;

    t->limits.columns = o->batch.max_columns_per_row ? o->batch.max_columns_per_row : 512;
    t->limits.rows = o->batch.max_rows_per_device ? o->batch.max_rows_per_device : 64;
    t->limits.segments = o->batch.max_segments_per_device ? o->batch.max_segments_per_device
                                                          : 4 * t->limits.rows;
    t->limits.bags = o->batch.max_bags_per_device ? o->batch.max_bags_per_device : t->limits.segments;
    if (t->limits.columns > (1u << 24))
        return uform_fail(UFORM_INVALID_ARGUMENT, "batch.max_columns_per_row: %zu is too large",
                          t->limits.columns);
    if (t->limits.rows > (1u << 20) || t->limits.segments > (1u << 24))
        return uform_fail(UFORM_INVALID_ARGUMENT, "batch: rows or segments too large");
    t->context = t->limits.columns;
    if (t->late) UFORM_TRY(uform_late_resolve(t, o->late_interaction));
    if (t->chooses) UFORM_TRY(uform_choices_resolve(t, o->choices, o->batch.max_choices_per_item));

    /* dimensions: the largest Matryoshka width, else H */
    t->dimensions = t->hidden;
    if (o->contrastive && o->contrastive->matryoshka_dimensions_count) {
        if (!o->contrastive->matryoshka_dimensions)
            return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive.matryoshka_dimensions: NULL with a count");
        size_t largest = 0;
        for (size_t i = 0; i < o->contrastive->matryoshka_dimensions_count; i++)
            if (o->contrastive->matryoshka_dimensions[i] > largest)
                largest = o->contrastive->matryoshka_dimensions[i];
        if (largest == 0 || largest > (1u << 20))
            return uform_fail(UFORM_INVALID_ARGUMENT, "contrastive.matryoshka_dimensions: widths must be in [1, 2^20]");
        t->dimensions = largest;
    }
    uform_masking_resolve(o->masking, &t->masking);
    UFORM_TRY(uform_masking_check(&t->masking));
    UFORM_TRY(uform_media_configure(t, &o->batch));
    UFORM_TRY(uform_contrastive_resolve(o->contrastive, t->dimensions, &t->contrastive, t->widths,
                                        initial_log_temperature, initial_bias));
    t->schedule = o->schedule;
    uform_schedule_resolve(&t->schedule);
    UFORM_TRY(uform_schedule_check(&t->schedule));
    t->seed = o->seed;
    return UFORM_OK;
}

/* Reads one F32 tensor of the train.* state into the flat buffer at slot. */
static uform_status_t uform_resume_tensor(const uform_safetensors_t *file, const char *kind,
                                          const uform_slot_t *slot, float *buffer) {
    char name[96];
    snprintf(name, sizeof(name), "train.%s.%s", kind, slot->name);
    const uform_tensor_t *tensor = uform_safetensors_find(file, name);
    size_t rank = slot->cols ? 2 : 1;
    if (!tensor)
        return uform_fail(UFORM_FORMAT, "resume: tensor \"%s\" is missing (a checkpoint saved by a trainer of this configuration?)", name);
    if (tensor->dtype != UFORM_DTYPE_F32 || tensor->rank != rank || tensor->shape[0] != slot->rows ||
        (rank == 2 && tensor->shape[1] != slot->cols))
        return uform_fail(UFORM_FORMAT, "resume: tensor \"%s\" is not F32 of this run's shape", name);
    memcpy(buffer + slot->offset, tensor->data, tensor->bytes);
    /* As strict as loading weights: one NaN here would spread through every
     * later step. Second moments are running means of squares, never negative. */
    bool second = strcmp(kind, "second_moment") == 0;
    const float *values = buffer + slot->offset;
    for (size_t i = 0, n = tensor->bytes / sizeof(float); i < n; i++) {
        if (!isfinite(values[i]))
            return uform_fail(UFORM_FORMAT, "resume: tensor \"%s\" holds a non-finite value (%g) at %zu",
                              name, (double)values[i], i);
        if (second && values[i] < 0)
            return uform_fail(UFORM_FORMAT, "resume: tensor \"%s\" holds a negative second moment (%g) at %zu",
                              name, (double)values[i], i);
    }
    return UFORM_OK;
}

/* Step counters past this are refused on resume: the schedule and AdamW's bias
 * corrections compute with the step in a double, exact up to 2^53, and the
 * next step's counter must not wrap. */
#define UFORM_MAX_RESUMED_STEP ((uint64_t)1 << 53)

static uform_status_t uform_resume_geometry(const uform_safetensors_t *file, const char *key,
                                            const char *field, uint64_t *value) {
    const char *text = uform_safetensors_metadata(file, key);
    if (!text) return uform_fail(UFORM_FORMAT, "resume: __metadata__ has no \"%s\"", key);
    uform_json_t root;
    UFORM_TRY(uform_json_parse(text, strlen(text), 8, &root));
    const uform_json_t *entry = uform_json_get(&root, field);
    bool ok = entry && uform_json_u64(entry, value);
    uform_json_free(&root);
    if (!ok) return uform_fail(UFORM_FORMAT, "resume: \"%s\".\"%s\" is missing or not an integer", key, field);
    return UFORM_OK;
}

/* Fills depth and hidden from the checkpoint when the options leave them 0. */
static uform_status_t uform_resume_peek(const char *path, uform_trainer_options_t *o) {
    uform_safetensors_t file;
    memset(&file, 0, sizeof(file));
    UFORM_TRY(uform_safetensors_open(path, &file));
    uint64_t depth = 0, hidden = 0;
    uform_status_t status = uform_resume_geometry(&file, "uform", "depth", &depth);
    if (status == UFORM_OK) status = uform_resume_geometry(&file, "uform", "hidden", &hidden);
    uform_safetensors_close(&file);
    if (status != UFORM_OK) return status;
    if (o->depth && o->depth != depth)
        return uform_fail(UFORM_INVALID_ARGUMENT, "depth: %zu, but the checkpoint has %llu", o->depth,
                          (unsigned long long)depth);
    if (o->hidden && o->hidden != hidden)
        return uform_fail(UFORM_INVALID_ARGUMENT, "hidden: %zu, but the checkpoint has %llu", o->hidden,
                          (unsigned long long)hidden);
    o->depth = depth;
    o->hidden = hidden;
    return UFORM_OK;
}

/* Loads masters, moments, step and seed saved by uform_trainer_save. */
static uform_status_t uform_resume(uform_trainer_t *t, const char *path, uint64_t given_seed) {
    uform_safetensors_t file;
    memset(&file, 0, sizeof(file));
    UFORM_TRY(uform_safetensors_open(path, &file));
    uint64_t step = 0, seed = 0;
    uform_status_t status = uform_resume_geometry(&file, "uform.train", "step", &step);
    if (status == UFORM_OK) status = uform_resume_geometry(&file, "uform.train", "seed", &seed);
    if (status == UFORM_OK && step > UFORM_MAX_RESUMED_STEP)
        status = uform_fail(UFORM_FORMAT, "resume: the step counter %llu is more than 2^53, the most a run can have taken",
                            (unsigned long long)step);
    if (status == UFORM_OK && given_seed && given_seed != seed)
        status = uform_fail(UFORM_INVALID_ARGUMENT, "seed: %llu, but the run was seeded %llu",
                            (unsigned long long)given_seed, (unsigned long long)seed);
    for (size_t s = 0; s < t->slots_count && status == UFORM_OK; s++) {
        status = uform_resume_tensor(&file, "master", &t->slots[s], t->parameters);
        if (status == UFORM_OK) status = uform_resume_tensor(&file, "first_moment", &t->slots[s], t->first_moment);
        if (status == UFORM_OK) status = uform_resume_tensor(&file, "second_moment", &t->slots[s], t->second_moment);
    }
    uform_safetensors_close(&file);
    if (status != UFORM_OK) return status;
    t->step = step;
    t->seed = seed;
    return UFORM_OK;
}

uform_status_t uform_trainer_init_ram(uform_executor_t *executor, const uform_trainer_options_t *options,
                                      uform_trainer_t **result) {
    if (!result) return uform_fail(UFORM_INVALID_ARGUMENT, "trainer: the out-pointer is NULL");
    *result = NULL;
    if (!executor) return uform_fail(UFORM_INVALID_ARGUMENT, "executor: NULL");
    if (!options) return uform_fail(UFORM_INVALID_ARGUMENT, "options: NULL");
    uform_trainer_t *t = uform_alloc_zeroed(1, sizeof(*t), "trainer");
    if (!t) return UFORM_OUT_OF_MEMORY;
    atomic_flag_clear(&t->busy);
    t->executor = executor;
    float initial_log_temperature = 0, initial_bias = 0;
    uform_trainer_options_t resolved = *options;
    uform_status_t status = options->resume ? uform_resume_peek(options->resume, &resolved) : UFORM_OK;
    if (status == UFORM_OK)
        status = uform_trainer_configure(t, &resolved, &initial_log_temperature, &initial_bias);
    if (status == UFORM_OK) {
        t->blocks = uform_alloc_zeroed(t->depth, sizeof(uform_block_slots_t), "trainer blocks");
        t->slots = uform_alloc_zeroed(12 * t->depth + 40, sizeof(uform_slot_t), "trainer tensors");
        status = t->blocks && t->slots ? UFORM_OK : UFORM_OUT_OF_MEMORY;
    }
    if (status == UFORM_OK) {
        uform_layout(t);
        t->parameters = uform_alloc_aligned(t->count, sizeof(float), "parameters");
        t->gradients = uform_alloc_aligned(t->count, sizeof(float), "gradients");
        t->first_moment = uform_alloc_aligned(t->count, sizeof(float), "first moments");
        t->second_moment = uform_alloc_aligned(t->count, sizeof(float), "second moments");
        t->decay = uform_alloc(t->count, 1, "decay flags");
        status = t->parameters && t->gradients && t->first_moment && t->second_moment && t->decay
                     ? UFORM_OK : UFORM_OUT_OF_MEMORY;
    }
    if (status != UFORM_OK) {
        uform_trainer_free(t);
        return status;
    }
    uform_initialise(t, initial_log_temperature, initial_bias);
    memset(t->gradients, 0, t->count * sizeof(float));
    memset(t->first_moment, 0, t->count * sizeof(float));
    memset(t->second_moment, 0, t->count * sizeof(float));
    if (options->resume) {
        status = uform_resume(t, options->resume, options->seed);
        if (status != UFORM_OK) {
            uform_trainer_free(t);
            return status;
        }
    }
    *result = t;
    return UFORM_OK;
}

uform_status_t uform_trainer_init_vram(uform_executor_t *executor, const uform_trainer_options_t *options,
                                       uform_trainer_t **result) {
    (void)executor, (void)options;
    if (result) *result = NULL;
    return uform_fail(UFORM_UNSUPPORTED, "Trainer.init_vram: this build of libuform has no GPU backend yet");
}

/* ---- step workspace --------------------------------------------------------- */

/* What one layer's forward keeps for its backward. */
typedef struct {
    float *input, *normed1, *mean1, *rstd1, *qkv, *attended, *logsumexp;
    float *middle, *normed2, *mean2, *rstd2, *up, *activated;
} uform_layer_saved_t;

typedef struct {
    size_t rows, items, selected;
    uint32_t *ids;            /* [rows] token ids after corruption */
    uint32_t *targets;        /* [selected] original bytes */
    size_t *selected_rows;    /* [selected] */
    uform_span_t *spans;      /* [items] */
    uform_segment_t *segments;
    uint32_t *positions;      /* [rows][3] */
    float *cosines, *sines;   /* [rows][32] */
    uform_layer_saved_t *layers;
    float *output, *final_mean, *final_rstd, *states; /* x after the blocks, final norm */
    float *pooled, *projected, *norms, *embeddings;   /* [items, H], [items, D] x3 */
    float *logits, *losses;   /* [selected, 256], [selected] */
    /* backward */
    float *d_states, *d_x, *d_middle, *d_normed, *d_wide, *d_wide2, *d_attended, *d_qkv;
    float *d_pooled, *d_projected, *d_embeddings, *d_logits, *scale;
    void *block;              /* everything above: one block the trainer keeps across steps */
} uform_workspace_t;

/* The one list of the workspace's buffers. Walked twice: with base NULL it only
 * measures (the returned end is the size in bytes), then over the allocated
 * block it points every buffer, so the size can never drift from the layout.
 * Each buffer starts 64-byte aligned relative to the block, which is itself
 * 64-byte aligned. */
static size_t uform_workspace_layout(uform_workspace_t *w, const uform_trainer_t *t, uint8_t *base,
                                     size_t rows, size_t items, size_t selected) {
    size_t h = t->hidden, d = t->dimensions, heads = t->heads, depth = t->depth;
    size_t offset = 0;
    /* A measuring walk still needs layer records to point into: a small
     * stand-in, rewritten for each layer (only offsets matter then). */
    uform_layer_saved_t measuring;
#define UFORM_TAKE(pointer, count)                                                             \
    do {                                                                                       \
        offset = (offset + 63) & ~(size_t)63;                                                  \
        (pointer) = base ? (void *)(base + offset) : NULL;                                     \
        offset += (count) * sizeof(*(pointer));                                                \
    } while (0)
    UFORM_TAKE(w->layers, depth);
    for (size_t l = 0; l < depth; l++) {
        uform_layer_saved_t *s = base ? &w->layers[l] : &measuring;
        UFORM_TAKE(s->input, rows * h);
        UFORM_TAKE(s->normed1, rows * h);
        UFORM_TAKE(s->mean1, rows);
        UFORM_TAKE(s->rstd1, rows);
        UFORM_TAKE(s->qkv, rows * 3 * h);
        UFORM_TAKE(s->attended, rows * h);
        UFORM_TAKE(s->logsumexp, rows * heads);
        UFORM_TAKE(s->middle, rows * h);
        UFORM_TAKE(s->normed2, rows * h);
        UFORM_TAKE(s->mean2, rows);
        UFORM_TAKE(s->rstd2, rows);
        UFORM_TAKE(s->up, rows * 4 * h);
        UFORM_TAKE(s->activated, rows * 4 * h);
    }
    UFORM_TAKE(w->ids, rows);
    UFORM_TAKE(w->targets, selected);
    UFORM_TAKE(w->selected_rows, selected);
    UFORM_TAKE(w->spans, items);
    UFORM_TAKE(w->segments, items);
    UFORM_TAKE(w->positions, 3 * rows);
    UFORM_TAKE(w->cosines, rows * UFORM_PAIRS);
    UFORM_TAKE(w->sines, rows * UFORM_PAIRS);
    UFORM_TAKE(w->output, rows * h);
    UFORM_TAKE(w->final_mean, rows);
    UFORM_TAKE(w->final_rstd, rows);
    UFORM_TAKE(w->states, rows * h);
    UFORM_TAKE(w->pooled, items * h);
    UFORM_TAKE(w->projected, items * d);
    UFORM_TAKE(w->norms, items);
    UFORM_TAKE(w->embeddings, items * d);
    UFORM_TAKE(w->logits, selected * UFORM_BYTES);
    UFORM_TAKE(w->losses, selected);
    UFORM_TAKE(w->d_states, rows * h);
    UFORM_TAKE(w->d_x, rows * h);
    UFORM_TAKE(w->d_middle, rows * h);
    UFORM_TAKE(w->d_normed, rows * h);
    UFORM_TAKE(w->d_wide, rows * 4 * h);
    UFORM_TAKE(w->d_wide2, rows * 4 * h);
    UFORM_TAKE(w->d_attended, rows * h);
    UFORM_TAKE(w->d_qkv, rows * 3 * h);
    UFORM_TAKE(w->d_pooled, items * h);
    UFORM_TAKE(w->d_projected, items * d);
    UFORM_TAKE(w->d_embeddings, items * d);
    UFORM_TAKE(w->d_logits, selected * UFORM_BYTES);
    UFORM_TAKE(w->scale, selected);
#undef UFORM_TAKE
    return offset;
}

static uform_status_t uform_workspace_init(uform_workspace_t *w, uform_trainer_t *t, size_t replica,
                                           size_t rows, size_t items, size_t selected) {
    memset(w, 0, sizeof(*w));
    /* Every count above is bounded by the packing limits checked at init, so
     * the measured size cannot overflow. */
    size_t bytes = uform_workspace_layout(w, t, NULL, rows, items, selected);
    if (replica >= t->workspaces_count) {
        size_t count = replica + 1;
        void **blocks = realloc(t->workspaces, count * sizeof(void *));
        if (blocks) t->workspaces = blocks;
        size_t *sizes = blocks ? realloc(t->workspace_bytes, count * sizeof(size_t)) : NULL;
        if (!blocks || !sizes) return uform_fail(UFORM_OUT_OF_MEMORY, "training workspaces");
        t->workspace_bytes = sizes;
        for (size_t r = t->workspaces_count; r < count; r++) blocks[r] = NULL, sizes[r] = 0;
        t->workspaces_count = count;
    }
    if (t->workspace_bytes[replica] < bytes) {
        uform_free_aligned(t->workspaces[replica]);
        t->workspace_bytes[replica] = 0;
        t->workspaces[replica] = uform_alloc_aligned(1, bytes, "training activations");
        if (!t->workspaces[replica]) return UFORM_OUT_OF_MEMORY;
        t->workspace_bytes[replica] = bytes;
    }
    w->block = t->workspaces[replica];
    uform_workspace_layout(w, t, w->block, rows, items, selected);
    w->rows = rows;
    w->items = items;
    w->selected = selected;
    return UFORM_OK;
}

/* ---- helpers ------------------------------------------------------------------ */

static uform_matrix_t uform_rows_of(const float *data, size_t stride) {
    return (uform_matrix_t){data, stride, false};
}
static uform_matrix_t uform_transposed(const float *data, size_t stride) {
    return (uform_matrix_t){data, stride, true};
}

typedef struct {
    const float *dy;
    size_t rows, cols;
    float *sums;
} uform_column_task_t;

/* sums[c] += sum over rows of dy[r][c], rows in order: one owner per column. */
static void uform_column_sums_range(void *context, size_t begin, size_t end, size_t thread) {
    (void)thread;
    const uform_column_task_t *task = context;
    for (size_t r = 0; r < task->rows; r++) {
        const float *row = task->dy + r * task->cols;
        for (size_t c = begin; c < end; c++) task->sums[c] += row[c];
    }
}

static void uform_column_sums(uform_executor_t *executor, const float *dy, size_t rows, size_t cols,
                              float *sums) {
    uform_column_task_t task = {dy, rows, cols, sums};
    uform_parallel_for(executor, cols, 64, uform_column_sums_range, &task);
}

/* y = x W^T + b over `rows` (W [n, k] at parameters + weight). */
static void uform_linear(uform_trainer_t *t, const float *x, size_t rows, size_t k, size_t n,
                         size_t weight, size_t bias, bool accumulate, float *y) {
    uform_sgemm(t->executor, rows, n, k, uform_rows_of(x, k),
                uform_transposed(t->parameters + weight, k), t->parameters + bias, accumulate, y, n);
}

/* dW += dy^T x, db += column sums of dy, dx (+)= dy W. */
static void uform_linear_backward(uform_trainer_t *t, const float *x, const float *dy, size_t rows,
                                  size_t k, size_t n, size_t weight, size_t bias, float *dx,
                                  bool accumulate_dx) {
    uform_sgemm(t->executor, n, k, rows, uform_transposed(dy, n), uform_rows_of(x, k), NULL, true,
                t->gradients + weight, k);
    uform_column_sums(t->executor, dy, rows, n, t->gradients + bias);
    uform_sgemm(t->executor, rows, k, n, uform_rows_of(dy, n),
                uform_rows_of(t->parameters + weight, k), NULL, accumulate_dx, dx, k);
}

/* ---- the step ------------------------------------------------------------------- */

/* choices and choice_targets (docs/training.md section 10). */
static uform_status_t uform_check_step_choices(const uform_trainer_t *t, const uform_trainer_batch_t *b) {
    const uform_tape_t *choices = &b->choices;
    if (choices->count == 0) return UFORM_OK;
    size_t count = b->contents.count;
    if (!t->chooses)
        return uform_fail(UFORM_INVALID_ARGUMENT, "choices: given, but the run has no choices configuration");
    if (choices->count != count)
        return uform_fail(UFORM_INVALID_ARGUMENT, "choices: %zu entries for %zu items", choices->count, count);
    if (!choices->offsets) return uform_fail(UFORM_INVALID_ARGUMENT, "choices: offsets are NULL");
    for (size_t i = 0; i < count; i++)
        if (choices->offsets[i + 1] < choices->offsets[i])
            return uform_fail(UFORM_INVALID_ARGUMENT, "choices: offsets decrease at item %zu", i);
    if (choices->offsets[count] > choices->size)
        return uform_fail(UFORM_INVALID_ARGUMENT, "choices: the last offset is past the data");
    if (choices->size && !choices->data) return uform_fail(UFORM_INVALID_ARGUMENT, "choices: data is NULL");
    if (choices->offsets[count] > choices->offsets[0] && !b->choice_targets)
        return uform_fail(UFORM_INVALID_ARGUMENT, "choice_targets: NULL while items have choices");
    const uint8_t *data = choices->data;
    for (size_t i = 0; i < count; i++) {
        size_t begin = choices->offsets[i], n = choices->offsets[i + 1] - begin;
        if (n == 0) continue;
        if (b->modalities[i] != UFORM_MODALITY_TEXT)
            return uform_fail(UFORM_INVALID_ARGUMENT, "choices[%zu]: only text items make choices", i);
        if (n > t->max_choices)
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "choices[%zu]: %zu choices, more than max_choices_per_item %zu", i, n,
                              t->max_choices);
        uint8_t seen[UFORM_BYTES] = {0};
        for (size_t c = 0; c < n; c++) {
            uint8_t byte = data[begin + c];
            if (seen[byte])
                return uform_fail(UFORM_INVALID_ARGUMENT, "choices[%zu]: the byte 0x%02x is given twice",
                                  i, byte);
            seen[byte] = 1;
            float target = b->choice_targets[begin + c];
            if (!isfinite(target) || target < 0)
                return uform_fail(UFORM_INVALID_ARGUMENT,
                                  "choice_targets[%zu][%zu]: %g is not finite and >= 0", i, c,
                                  (double)target);
        }
        uint32_t group = b->temperature_groups ? b->temperature_groups[i] : 0;
        if (group >= t->choice_groups)
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "temperature_groups[%zu]: %u is not below the %zu choice temperature groups",
                              i, group, t->choice_groups);
    }
    return UFORM_OK;
}

static uform_status_t uform_check_step_batch(const uform_trainer_t *t, const uform_trainer_batch_t *b) {
    if (!b) return uform_fail(UFORM_INVALID_ARGUMENT, "batch: NULL");
    const uform_tape_t *tape = &b->contents;
    size_t count = tape->count;
    if (count == 0) return uform_fail(UFORM_INVALID_ARGUMENT, "contents: the batch is empty");
    if (!tape->offsets) return uform_fail(UFORM_INVALID_ARGUMENT, "contents: offsets are NULL");
    if (!b->modalities) return uform_fail(UFORM_INVALID_ARGUMENT, "modalities: NULL");
    for (size_t i = 0; i < count; i++) {
        if (tape->offsets[i + 1] < tape->offsets[i])
            return uform_fail(UFORM_INVALID_ARGUMENT, "contents: offsets decrease at item %zu", i);
        if (b->modalities[i] > UFORM_MODALITY_AUDIO)
            return uform_fail(UFORM_INVALID_ARGUMENT, "modalities[%zu]: %u is not a modality", i,
                              b->modalities[i]);
        if (b->modalities[i] != UFORM_MODALITY_TEXT && !t->media[b->modalities[i]].width)
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "modalities[%zu]: the run has no shape for this modality (set "
                              "BatchShape.image, .video or .audio)", i);
        if (t->contrasts && b->temperature_groups && b->temperature_groups[i] >= t->contrastive.groups)
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "temperature_groups[%zu]: %u is not below the %zu contrastive groups", i,
                              b->temperature_groups[i], t->contrastive.groups);
        if (b->sides && b->sides[i] > UFORM_SIDE_QUERY_AND_DOCUMENT)
            return uform_fail(UFORM_INVALID_ARGUMENT, "sides[%zu]: %u is not a LateInteractionSide", i,
                              b->sides[i]);
        if (b->sides && b->sides[i] != UFORM_SIDE_NONE && !t->late)
            return uform_fail(UFORM_INVALID_ARGUMENT,
                              "sides[%zu]: a late-interaction side, but the run has no late_interaction "
                              "configuration", i);
    }
    UFORM_TRY(uform_check_step_choices(t, b));
    if (tape->size && !tape->data) return uform_fail(UFORM_INVALID_ARGUMENT, "contents: data is NULL");
    if (tape->offsets[count] > tape->size)
        return uform_fail(UFORM_INVALID_ARGUMENT, "contents: the last offset is past the data");
    const uform_edges_t *sets[3] = {NULL, NULL, NULL};
    const char *names[3] = {"relations.attract", "relations.repel", "relations.ignore"};
    if (b->relations) {
        sets[0] = &b->relations->attract;
        sets[1] = &b->relations->repel;
        sets[2] = &b->relations->ignore;
    }
    for (size_t s = 0; s < 3; s++) {
        const uform_edges_t *e = sets[s];
        if (!e || !e->offsets) continue;
        if (e->offsets[0] != 0)
            return uform_fail(UFORM_INVALID_ARGUMENT, "%s: offsets must start at 0", names[s]);
        for (size_t i = 0; i < count; i++)
            if (e->offsets[i + 1] < e->offsets[i])
                return uform_fail(UFORM_INVALID_ARGUMENT, "%s: offsets decrease at item %zu", names[s], i);
        size_t edges = e->offsets[count];
        if (edges && !e->ids) return uform_fail(UFORM_INVALID_ARGUMENT, "%s: ids are NULL", names[s]);
        for (size_t j = 0; j < edges; j++) {
            if (e->ids[j] >= count)
                return uform_fail(UFORM_INVALID_ARGUMENT, "%s: edge %zu names item %u of %zu",
                                  names[s], j, e->ids[j], count);
            if (e->weights && (!isfinite(e->weights[j]) || e->weights[j] < 0))
                return uform_fail(UFORM_INVALID_ARGUMENT, "%s: weight %zu is not finite and >= 0",
                                  names[s], j);
        }
    }
    return UFORM_OK;
}

/* Relations over the kept items: edges touching a dropped item go. */
typedef struct {
    size_t *offsets;
    uint32_t *ids;
    float *weights;
} uform_edges_storage_t;

static uform_status_t uform_remap_edges(const uform_edges_t *given, size_t count, const size_t *index,
                                        size_t kept_count, uform_edges_storage_t *storage,
                                        uform_edges_t *out) {
    memset(out, 0, sizeof(*out));
    if (!given || !given->offsets) return UFORM_OK;
    size_t edges = given->offsets[count];
    storage->offsets = uform_alloc(kept_count + 1, sizeof(size_t), "edges");
    storage->ids = uform_alloc(edges ? edges : 1, sizeof(uint32_t), "edges");
    storage->weights = uform_alloc(edges ? edges : 1, sizeof(float), "edges");
    if (!storage->offsets || !storage->ids || !storage->weights) return UFORM_OUT_OF_MEMORY;
    size_t written = 0, anchor = 0;
    storage->offsets[0] = 0;
    for (size_t i = 0; i < count; i++) {
        if (index[i] == SIZE_MAX) continue;
        for (size_t e = given->offsets[i]; e < given->offsets[i + 1]; e++) {
            size_t j = index[given->ids[e]];
            if (j == SIZE_MAX) continue;
            storage->ids[written] = (uint32_t)j;
            storage->weights[written] = given->weights ? given->weights[e] : 1.0f;
            written++;
        }
        storage->offsets[++anchor] = written;
    }
    *out = (uform_edges_t){storage->offsets, storage->ids, storage->weights};
    return UFORM_OK;
}

/* A media modality's parameters and gradients, as media_rows.c takes them. */
static uform_media_parameters_t uform_media_parameters(const uform_trainer_t *t, size_t m) {
    const uform_trainer_media_t *md = &t->media[m];
    const float *p = t->parameters;
    float *g = t->gradients;
    bool masks = t->masks_text;
    return (uform_media_parameters_t){
        md->width, p + md->projection, p + md->projection_bias, p + md->modality,
        masks ? p + md->mask : NULL, masks ? p + md->head : NULL, masks ? p + md->head_bias : NULL,
        g + md->projection, g + md->projection_bias, g + md->modality,
        masks ? g + md->mask : NULL, masks ? g + md->head : NULL, masks ? g + md->head_bias : NULL};
}

static uform_status_t uform_forward_train(uform_trainer_t *t, uform_workspace_t *w,
                                          const uform_batch_t *batch, const uform_media_rows_t *media) {
    size_t rows = w->rows, h = t->hidden;
    uform_executor_t *ex = t->executor;
    float *p = t->parameters;
    uform_embedding_forward(p + t->bytes_table, p + t->modality, w->ids, rows, h, w->layers[0].input);
    for (size_t m = UFORM_MODALITY_IMAGE; m <= UFORM_MODALITY_AUDIO; m++) {
        if (!t->media[m].width) continue;
        uform_media_parameters_t parameters = uform_media_parameters(t, m);
        UFORM_TRY(uform_media_input_forward(ex, &parameters, &media[m], h, w->layers[0].input));
    }
    uform_rope_tables(ex, batch, w->cosines, w->sines);
    for (size_t l = 0; l < t->depth; l++) {
        const uform_block_slots_t *b = &t->blocks[l];
        uform_layer_saved_t *s = &w->layers[l];
        uform_layer_norm_forward(ex, s->input, rows, h, p + b->norm1_weight, p + b->norm1_bias,
                                 s->normed1, s->mean1, s->rstd1);
        uform_linear(t, s->normed1, rows, h, 3 * h, b->qkv_weight, b->qkv_bias, false, s->qkv);
        uform_rope_forward(ex, s->qkv, rows, h, w->cosines, w->sines);
        uform_attention_forward(ex, s->qkv, h, w->spans, w->items, s->attended, s->logsumexp);
        memcpy(s->middle, s->input, rows * h * sizeof(float));
        uform_linear(t, s->attended, rows, h, h, b->out_weight, b->out_bias, true, s->middle);
        uform_layer_norm_forward(ex, s->middle, rows, h, p + b->norm2_weight, p + b->norm2_bias,
                                 s->normed2, s->mean2, s->rstd2);
        uform_linear(t, s->normed2, rows, h, 4 * h, b->up_weight, b->up_bias, false, s->up);
        uform_gelu_forward(ex, s->up, rows * 4 * h, s->activated);
        float *next = l + 1 < t->depth ? w->layers[l + 1].input : w->output;
        memcpy(next, s->middle, rows * h * sizeof(float));
        uform_linear(t, s->activated, rows, 4 * h, h, b->down_weight, b->down_bias, true, next);
    }
    uform_layer_norm_forward(ex, w->output, rows, h, p + t->norm_weight, p + t->norm_bias,
                             w->states, w->final_mean, w->final_rstd);
    return UFORM_OK;
}

static void uform_backward_train(uform_trainer_t *t, uform_workspace_t *w) {
    size_t rows = w->rows, h = t->hidden;
    uform_executor_t *ex = t->executor;
    float *p = t->parameters, *g = t->gradients;
    /* d_states holds dLoss/dh; into the final norm */
    memset(w->d_x, 0, rows * h * sizeof(float));
    uform_layer_norm_backward(ex, w->d_states, w->output, p + t->norm_weight, w->final_mean,
                              w->final_rstd, rows, h, w->d_x, g + t->norm_weight, g + t->norm_bias);
    for (size_t l = t->depth; l-- > 0;) {
        const uform_block_slots_t *b = &t->blocks[l];
        uform_layer_saved_t *s = &w->layers[l];
        /* x_next = middle + down(gelu(up(norm2(middle)))) */
        memset(w->d_wide, 0, rows * 4 * h * sizeof(float));
        uform_linear_backward(t, s->activated, w->d_x, rows, 4 * h, h, b->down_weight, b->down_bias,
                              w->d_wide, false);
        memset(w->d_wide2, 0, rows * 4 * h * sizeof(float));
        uform_gelu_backward(ex, s->up, w->d_wide, rows * 4 * h, w->d_wide2);
        uform_linear_backward(t, s->normed2, w->d_wide2, rows, h, 4 * h, b->up_weight, b->up_bias,
                              w->d_normed, false);
        memcpy(w->d_middle, w->d_x, rows * h * sizeof(float));
        uform_layer_norm_backward(ex, w->d_normed, s->middle, p + b->norm2_weight, s->mean2, s->rstd2,
                                  rows, h, w->d_middle, g + b->norm2_weight, g + b->norm2_bias);
        /* middle = input + out(attention(rope(qkv(norm1(input))))) */
        uform_linear_backward(t, s->attended, w->d_middle, rows, h, h, b->out_weight, b->out_bias,
                              w->d_attended, false);
        memset(w->d_qkv, 0, rows * 3 * h * sizeof(float));
        uform_attention_backward(ex, s->qkv, s->attended, w->d_attended, s->logsumexp, h, w->spans,
                                 w->items, w->d_qkv);
        uform_rope_backward(ex, w->d_qkv, rows, h, w->cosines, w->sines);
        uform_linear_backward(t, s->normed1, w->d_qkv, rows, h, 3 * h, b->qkv_weight, b->qkv_bias,
                              w->d_normed, false);
        memcpy(w->d_x, w->d_middle, rows * h * sizeof(float));
        uform_layer_norm_backward(ex, w->d_normed, s->input, p + b->norm1_weight, s->mean1, s->rstd1,
                                  rows, h, w->d_x, g + b->norm1_weight, g + b->norm1_bias);
    }
    uform_embedding_backward(ex, w->d_x, w->ids, rows, h, g + t->bytes_table, g + t->modality);
}

/* The masked text loss and its gradient into d_states (scaled by weight). */
static float uform_masked_text(uform_trainer_t *t, uform_workspace_t *w, float weight,
                               size_t world_selected) {
    size_t h = t->hidden, n = w->selected;
    if (n == 0) return 0.0f;
    float *p = t->parameters, *g = t->gradients;
    float *gathered = w->d_normed; /* reuse: [selected, H] <= [rows, H] */
    for (size_t i = 0; i < n; i++)
        memcpy(gathered + i * h, w->states + w->selected_rows[i] * h, h * sizeof(float));
    uform_sgemm(t->executor, n, UFORM_BYTES, h, uform_rows_of(gathered, h),
                uform_transposed(p + t->bytes_table, h), p + t->bytes_bias, false, w->logits, UFORM_BYTES);
    uform_cross_entropy_forward(w->logits, n, UFORM_BYTES, w->targets, w->losses);
    double total = 0;
    for (size_t i = 0; i < n; i++) total += w->losses[i];
    float scale = weight / (float)world_selected;
    for (size_t i = 0; i < n; i++) w->scale[i] = scale;
    memset(w->d_logits, 0, n * UFORM_BYTES * sizeof(float));
    uform_cross_entropy_backward(w->logits, n, UFORM_BYTES, w->targets, w->scale, w->d_logits);
    /* logits = gathered . bytes[0:256]^T + bias */
    uform_sgemm(t->executor, UFORM_BYTES, h, n, uform_transposed(w->d_logits, UFORM_BYTES),
                uform_rows_of(gathered, h), NULL, true, g + t->bytes_table, h);
    uform_column_sums(t->executor, w->d_logits, n, UFORM_BYTES, g + t->bytes_bias);
    float *d_gathered = w->d_attended; /* reuse */
    uform_sgemm(t->executor, n, h, UFORM_BYTES, uform_rows_of(w->d_logits, UFORM_BYTES),
                uform_rows_of(p + t->bytes_table, h), NULL, false, d_gathered, h);
    for (size_t i = 0; i < n; i++) {
        float *dh = w->d_states + w->selected_rows[i] * h;
        for (size_t c = 0; c < h; c++) dh[c] += d_gathered[i * h + c];
    }
    return (float)(total / (double)world_selected);
}

/* Pooled, projected, normalised embeddings of the kept items (w->embeddings). */
static void uform_embed(uform_trainer_t *t, uform_workspace_t *w) {
    size_t h = t->hidden, d = t->dimensions;
    uform_mean_pool_forward(w->states, h, w->spans, w->items, w->pooled);
    uform_sgemm(t->executor, w->items, d, h, uform_rows_of(w->pooled, h),
                uform_transposed(t->parameters + t->embedding_head, h), NULL, false, w->projected, d);
    uform_normalize_forward(w->projected, w->items, d, w->embeddings, w->norms);
}

static void uform_embed_backward(uform_trainer_t *t, uform_workspace_t *w) {
    size_t h = t->hidden, d = t->dimensions;
    memset(w->d_projected, 0, w->items * d * sizeof(float));
    uform_normalize_backward(w->d_embeddings, w->embeddings, w->norms, w->items, d, w->d_projected);
    uform_sgemm(t->executor, d, h, w->items, uform_transposed(w->d_projected, d),
                uform_rows_of(w->pooled, h), NULL, true, t->gradients + t->embedding_head, h);
    uform_sgemm(t->executor, w->items, h, d, uform_rows_of(w->d_projected, d),
                uform_rows_of(t->parameters + t->embedding_head, h), NULL, false, w->d_pooled, h);
    uform_mean_pool_backward(w->d_pooled, h, w->spans, w->items, w->d_states);
}

/* One replica's share of a step: a contiguous range of the step's items. */
typedef struct {
    size_t first, last;        /* items [first, last) of the step */
    size_t world_first;        /* its first kept item in the world's order */
    size_t world_row_first;    /* its first row among the world's rows */
    size_t items, rows, selected;
    uform_workspace_t w;
} uform_replica_t;

/* Splits items into `replicas` contiguous ranges of about equal token counts
 * ("a process's items are spread over its devices by token count"). */
static void uform_split_by_tokens(const size_t *lengths, size_t count, size_t columns,
                                  uform_replica_t *replica, size_t replicas) {
    size_t total = 0;
    for (size_t i = 0; i < count; i++) total += lengths[i] < columns ? lengths[i] : columns;
    size_t item = 0, seen = 0;
    for (size_t r = 0; r < replicas; r++) {
        replica[r].first = item;
        /* take items while this replica is below its share of the total */
        size_t target = (size_t)(((unsigned __int128)total * (r + 1)) / replicas);
        while (item < count && (seen < target || r + 1 == replicas)) {
            seen += lengths[item] < columns ? lengths[item] : columns;
            item++;
        }
        replica[r].last = item;
    }
}

/* Lays out one replica's kept items in its workspace: token ids, spans,
 * positions, selected rows and their original bytes. */
static void uform_replica_layout(const uform_trainer_batch_t *batch, const size_t *kept,
                                 const uint32_t *ids, const uint8_t *chosen, size_t row_base,
                                 const uform_media_tokens_t *tokens, uform_replica_t *replica) {
    uform_workspace_t *w = &replica->w;
    const uint8_t *data = batch->contents.data;
    const size_t *offsets = batch->contents.offsets;
    memcpy(w->ids, ids + row_base, replica->rows * sizeof(uint32_t));
    size_t r = 0, item = 0, s = 0;
    for (size_t i = replica->first; i < replica->last; i++) {
        if (kept[i] == SIZE_MAX) continue;
        w->spans[item] = (uform_span_t){r, kept[i]};
        if (batch->modalities[i] != UFORM_MODALITY_TEXT) {  /* positions from the tokenizer */
            w->segments[item] = (uform_segment_t){r, kept[i], tokens[i].axes};
            memcpy(w->positions + 3 * r, tokens[i].positions, 3 * kept[i] * sizeof(uint32_t));
            r += kept[i];
            item++;
            continue;
        }
        w->segments[item] = (uform_segment_t){r, kept[i], 1};
        for (size_t k = 0; k < kept[i]; k++) {
            w->positions[3 * (r + k)] = (uint32_t)k;
            w->positions[3 * (r + k) + 1] = w->positions[3 * (r + k) + 2] = 0;
            if (chosen[row_base + r + k]) {
                w->selected_rows[s] = r + k;
                w->targets[s] = data[offsets[i] + k];
                s++;
            }
        }
        r += kept[i];
        item++;
    }
    w->rows = replica->rows;
    w->items = replica->items;
}

static bool uform_has_choices(const uform_trainer_batch_t *batch, size_t i) {
    return batch->choices.count && batch->choices.offsets[i + 1] > batch->choices.offsets[i];
}

/* The choices term of one replica's items (docs/training.md section 10):
 * gathers the MASK rows' states, runs the loss, scatters dLoss/dh back. */
static uform_status_t uform_replica_choices(uform_trainer_t *t, const uform_trainer_batch_t *batch,
                                            uform_replica_t *rep, const size_t *kept,
                                            const size_t *first_row, float scale, double *loss_sum) {
    const size_t h = t->hidden;
    const size_t *offsets = batch->choices.offsets;
    size_t n = 0, total = 0;
    for (size_t i = rep->first; i < rep->last; i++)
        if (kept[i] != SIZE_MAX && uform_has_choices(batch, i)) n++, total += offsets[i + 1] - offsets[i];
    if (n == 0) return UFORM_OK;
    float *states = uform_alloc(2 * n, h * sizeof(float), "choice states");
    float *targets = uform_alloc(total, sizeof(float), "choice targets");
    uint8_t *bytes = uform_alloc(total, 1, "choice bytes");
    size_t *starts = uform_alloc(2 * n + 1, sizeof(size_t), "choice items");
    uint32_t *groups = uform_alloc(n, sizeof(uint32_t), "choice groups");
    if (!states || !targets || !bytes || !starts || !groups) {
        free(states), free(targets), free(bytes), free(starts), free(groups);
        return UFORM_OUT_OF_MEMORY;
    }
    float *d_states = states + n * h;
    size_t *mask_rows = starts + n + 1;
    size_t c = 0;
    starts[0] = 0;
    for (size_t i = rep->first; i < rep->last; i++) {
        if (kept[i] == SIZE_MAX || !uform_has_choices(batch, i)) continue;
        size_t length = offsets[i + 1] - offsets[i];
        mask_rows[c] = first_row[i] + kept[i] - 1;
        memcpy(states + c * h, rep->w.states + mask_rows[c] * h, h * sizeof(float));
        memcpy(bytes + starts[c], (const uint8_t *)batch->choices.data + offsets[i], length);
        memcpy(targets + starts[c], batch->choice_targets + offsets[i], length * sizeof(float));
        groups[c] = batch->temperature_groups ? batch->temperature_groups[i] : 0;
        starts[c + 1] = starts[c] + length;
        c++;
    }
    uform_choices_batch_t choices = {n, h, states, bytes, targets, starts, groups};
    float *g = t->gradients;
    uform_choices_loss(&choices, t->parameters + t->bytes_table, t->parameters + t->bytes_bias,
                       t->parameters + t->choice_log_temperature, scale, loss_sum, d_states,
                       g + t->bytes_table, g + t->bytes_bias, g + t->choice_log_temperature);
    for (size_t k = 0; k < n; k++) {
        float *target = rep->w.d_states + mask_rows[k] * h;
        for (size_t e = 0; e < h; e++) target[e] += d_states[k * h + e];
    }
    free(states), free(targets), free(bytes), free(starts), free(groups);
    return UFORM_OK;
}

/* Which rows of each kept item enter the late-interaction term: sides, the
 * query span and each replica's budgets, walked in item order (section 9). */
static void uform_late_admit(const uform_trainer_t *t, const uform_trainer_batch_t *batch,
                             const uform_replica_t *replica, size_t replicas, const size_t *kept,
                             const size_t *index, const size_t *first_row, size_t *first,
                             size_t *query_rows, size_t *document_rows) {
    const uform_late_interaction_t *c = &t->late_config;
    for (size_t r = 0; r < replicas; r++) {
        const uform_replica_t *rep = &replica[r];
        size_t query_tokens = 0, documents = 0, document_tokens = 0;
        for (size_t i = rep->first; i < rep->last; i++) {
            if (kept[i] == SIZE_MAX) continue;
            size_t item = index[i], n = kept[i];
            uint32_t side = batch->sides ? batch->sides[i] : UFORM_SIDE_QUERY_AND_DOCUMENT;
            first[item] = rep->world_row_first + first_row[i];
            query_rows[item] = document_rows[item] = 0;
            if (n == 0) continue;
            size_t span = n < c->max_query_span ? n : c->max_query_span;
            if ((side == UFORM_SIDE_QUERY || side == UFORM_SIDE_QUERY_AND_DOCUMENT) &&
                query_tokens + span <= c->max_query_tokens_per_device) {
                query_rows[item] = span;
                query_tokens += span;
            }
            if ((side == UFORM_SIDE_DOCUMENT || side == UFORM_SIDE_QUERY_AND_DOCUMENT) &&
                documents < c->max_documents_per_device &&
                document_tokens + n <= c->max_document_tokens_per_device) {
                document_rows[item] = n;
                documents++;
                document_tokens += n;
            }
        }
    }
}

/* Token vectors of every replica's rows, the late-interaction term over the
 * world, and its gradients back into each replica's d_states. */
static uform_status_t uform_late_step(uform_trainer_t *t, const uform_trainer_batch_t *batch,
                                      uform_replica_t *replica, size_t replicas, const size_t *kept,
                                      const size_t *index, const size_t *first_row, size_t items,
                                      size_t world_rows, const uint32_t *bags,
                                      const uform_relations_t *relations, float *loss) {
    const size_t h = t->hidden, width = t->late_config.width;
    size_t widest = 1;
    for (size_t r = 0; r < replicas; r++) widest = replica[r].rows > widest ? replica[r].rows : widest;
    float *vectors = uform_alloc_aligned(2 * world_rows + widest, width * sizeof(float), "token vectors");
    float *norms = uform_alloc(world_rows + 1, sizeof(float), "token norms");
    size_t *layout = uform_alloc(3 * items, sizeof(size_t), "late interaction items");
    if (!vectors || !norms || !layout) {
        uform_free_aligned(vectors), free(norms), free(layout);
        return UFORM_OUT_OF_MEMORY;
    }
    float *d_vectors = vectors + world_rows * width, *projected = d_vectors + world_rows * width;
    const float *p = t->parameters;
    for (size_t r = 0; r < replicas; r++) {
        uform_replica_t *rep = &replica[r];
        if (!rep->rows) continue;
        uform_sgemm(t->executor, rep->rows, width, h, uform_rows_of(rep->w.states, h),
                    uform_transposed(p + t->token_head, h), NULL, false, projected, width);
        uform_normalize_forward(projected, rep->rows, width, vectors + rep->world_row_first * width,
                                norms + rep->world_row_first);
    }
    uform_late_admit(t, batch, replica, replicas, kept, index, first_row, layout, layout + items,
                     layout + 2 * items);
    memset(d_vectors, 0, world_rows * width * sizeof(float));
    uform_late_batch_t late = {items, width, vectors, layout, layout + items, layout + 2 * items,
                               bags, relations};
    uform_status_t status = uform_late_interaction_loss(
        t->executor, &t->contrastive, t->late_config.pair_loss, &late,
        p[t->late_log_inverse_temperature], p[t->late_bias], t->late_config.weight, loss, d_vectors,
        t->gradients + t->late_log_inverse_temperature, t->gradients + t->late_bias);
    for (size_t r = 0; r < replicas && status == UFORM_OK; r++) {
        uform_replica_t *rep = &replica[r];
        if (!rep->rows) continue;
        size_t base = rep->world_row_first;
        memset(projected, 0, rep->rows * width * sizeof(float));
        uform_normalize_backward(d_vectors + base * width, vectors + base * width, norms + base,
                                 rep->rows, width, projected);
        uform_sgemm(t->executor, width, h, rep->rows, uform_transposed(projected, width),
                    uform_rows_of(rep->w.states, h), NULL, true, t->gradients + t->token_head, h);
        uform_sgemm(t->executor, rep->rows, h, width, uform_rows_of(projected, width),
                    uform_rows_of(p + t->token_head, h), NULL, true, rep->w.d_states, h);
    }
    uform_free_aligned(vectors), free(norms), free(layout);
    return status;
}

static void uform_tokens_free(uform_media_tokens_t *tokens, size_t count) {
    if (!tokens) return;
    for (size_t i = 0; i < count; i++) uform_media_tokens_free(&tokens[i]);
    free(tokens);
}

/* Decodes and tokenises the step's image, video and audio items as the encode
 * verbs do (*out NULL when the step has none). */
static uform_status_t uform_tokenize_media(const uform_trainer_t *t, const uform_trainer_batch_t *b,
                                           uform_media_tokens_t **out) {
    *out = NULL;
    size_t count = b->contents.count;
    bool any = false;
    for (size_t i = 0; i < count; i++) any = any || b->modalities[i] != UFORM_MODALITY_TEXT;
    if (!any) return UFORM_OK;
    uform_media_tokens_t *tokens = uform_alloc_zeroed(count, sizeof(*tokens), "media tokens");
    if (!tokens) return UFORM_OUT_OF_MEMORY;
    uform_media_files_t files = {&t->geometry, &b->contents};
    uform_status_t status = UFORM_OK;
    for (size_t i = 0; i < count && status == UFORM_OK; i++) {
        if (b->modalities[i] == UFORM_MODALITY_IMAGE) status = uform_image_file_tokenize(&files, i, &tokens[i]);
        if (b->modalities[i] == UFORM_MODALITY_VIDEO) status = uform_video_file_tokenize(&files, i, &tokens[i]);
        if (b->modalities[i] == UFORM_MODALITY_AUDIO) status = uform_audio_file_tokenize(&files, i, &tokens[i]);
    }
    if (status != UFORM_OK) {
        uform_tokens_free(tokens, count);
        return uform_fail_context(status, "contents");
    }
    *out = tokens;
    return UFORM_OK;
}

/* One replica's rows of modality m: fed rows with their token values, masked
 * rows with their normalised targets. */
static uform_status_t uform_replica_media(const uform_trainer_t *t, const uform_trainer_batch_t *batch,
                                          const uform_replica_t *rep, const size_t *kept,
                                          const size_t *first_row, const uint8_t *masked,
                                          const uform_media_tokens_t *tokens, size_t m,
                                          uform_media_rows_t *rows) {
    size_t width = t->media[m].width, fed = 0, hidden = 0;
    for (size_t i = rep->first; i < rep->last; i++) {
        if (kept[i] == SIZE_MAX || batch->modalities[i] != m) continue;
        for (size_t k = 0; k < kept[i]; k++) {
            if (masked[rep->world_row_first + first_row[i] + k]) hidden++;
            else fed++;
        }
    }
    UFORM_TRY(uform_media_rows_alloc(rows, fed, hidden, width));
    fed = hidden = 0;
    for (size_t i = rep->first; i < rep->last; i++) {
        if (kept[i] == SIZE_MAX || batch->modalities[i] != m) continue;
        for (size_t k = 0; k < kept[i]; k++) {
            size_t row = first_row[i] + k;
            const float *values = tokens[i].inputs + k * width;
            if (masked[rep->world_row_first + row]) {
                rows->masked_rows[hidden] = row;
                uform_patch_targets(values, 1, width, rows->targets + hidden * width);
                hidden++;
            } else {
                rows->rows[fed] = row;
                memcpy(rows->inputs + fed * width, values, width * sizeof(float));
                fed++;
            }
        }
    }
    return UFORM_OK;
}

/* The slot holding flat index i of the parameter buffers. */
static const uform_slot_t *uform_slot_at(const uform_trainer_t *t, size_t i) {
    for (size_t s = 0; s < t->slots_count; s++) {
        const uform_slot_t *slot = &t->slots[s];
        if (i >= slot->offset && i - slot->offset < slot->rows * (slot->cols ? slot->cols : 1)) return slot;
    }
    return NULL;
}

/* Values the step computed (not the caller's) that must be finite for the
 * objectives: a NaN there means the run has diverged, reported as such. */
static uform_status_t uform_check_diverged(const float *values, size_t count, const char *what,
                                           uint64_t step) {
    for (size_t i = 0; i < count; i++)
        if (!isfinite(values[i]))
            return uform_fail(UFORM_DIVERGED,
                              "step %llu: %s hold a non-finite value (%g at %zu); the step was not "
                              "applied (weights, moments and the step counter are unchanged). The run "
                              "has diverged: a lower learning rate or a resume from the last good "
                              "checkpoint may help",
                              (unsigned long long)step, what, (double)values[i], i);
    return UFORM_OK;
}

static uform_status_t uform_trainer_step_held(uform_trainer_t *t, const uform_trainer_batch_t *batch,
                                             uform_arena_t *arena, uform_scalar_t outputs_scalar,
                                             uform_encoded_t *embeddings_out,
                                             uform_trainer_step_stats_t *stats) {
    UFORM_TRY(uform_check_step_batch(t, batch));
    if (embeddings_out && !arena)
        return uform_fail(UFORM_INVALID_ARGUMENT, "arena: NULL while embeddings are asked for");
    if (embeddings_out && uform_output_row_bytes(outputs_scalar, t->dimensions) == 0)
        return uform_fail(UFORM_INVALID_ARGUMENT, "outputs_scalar: %d is not F32, BF16, F16, I8 or B1",
                          (int)outputs_scalar);
    size_t count = batch->contents.count, replicas = 1;
    uform_executor_memory_domains(t->executor, &replicas);
    uform_media_tokens_t *tokens;
    UFORM_TRY(uform_tokenize_media(t, batch, &tokens));
    const uint8_t *data = batch->contents.data;
    const size_t *offsets = batch->contents.offsets;
    uint64_t step = t->step + 1;
    size_t d = t->dimensions;

    size_t *lengths = uform_alloc(5 * count + t->limits.rows + 1, sizeof(size_t), "packing");
    uform_replica_t *replica = uform_alloc_zeroed(replicas, sizeof(uform_replica_t), "replicas");
    if (!lengths || !replica) {
        free(lengths), free(replica);
        uform_tokens_free(tokens, count);
        return UFORM_OUT_OF_MEMORY;
    }
    size_t *kept = lengths + count, *row = kept + count, *index = row + count;
    size_t *row_used = index + count;
    uint32_t *bags_seen = (uint32_t *)(row_used + t->limits.rows + 1); /* count words fit in count size_t */
    /* an item with choices carries MASK after its bytes (section 10) */
    for (size_t i = 0; i < count; i++)
        lengths[i] = batch->modalities[i] != UFORM_MODALITY_TEXT
                         ? tokens[i].rows
                         : offsets[i + 1] - offsets[i] + (uform_has_choices(batch, i) ? 1 : 0);

    /* Items to replicas by token count, then each replica packs its own rows. */
    uform_split_by_tokens(lengths, count, t->limits.columns, replica, replicas);
    size_t truncated = 0, dropped = 0, items = 0, rows = 0, selected = 0;
    for (size_t r = 0; r < replicas; r++) {
        uform_replica_t *rep = &replica[r];
        uform_pack_items(lengths + rep->first, batch->bags ? batch->bags + rep->first : NULL,
                         rep->last - rep->first, &t->limits, kept + rep->first, row + rep->first,
                         &truncated, &dropped, row_used, bags_seen);
        rep->world_first = items;
        for (size_t i = rep->first; i < rep->last; i++) {
            index[i] = kept[i] == SIZE_MAX ? SIZE_MAX : items++;
            if (kept[i] != SIZE_MAX) rep->items++, rep->rows += kept[i];
        }
        rows += rep->rows;
    }

    /* Corruption, keyed by the item's index in the step: independent of replicas. */
    size_t *first_row = uform_alloc(count, sizeof(size_t), "item rows");
    size_t choice_items = 0;
    for (size_t r = 0, world_rows = 0; r < replicas && first_row; r++) {
        replica[r].world_row_first = world_rows;
        world_rows += replica[r].rows;
        for (size_t i = replica[r].first, at = 0; i < replica[r].last; i++) {
            if (kept[i] == SIZE_MAX) continue;
            first_row[i] = at;
            at += kept[i];
            choice_items += uform_has_choices(batch, i);
        }
    }
    uint32_t *ids = uform_alloc(rows ? rows : 1, sizeof(uint32_t), "token ids");
    uint8_t *chosen = uform_alloc(rows ? rows : 1, 1, "selected positions");
    uint8_t *masked = uform_alloc_zeroed(rows ? rows : 1, 1, "masked media rows");
    uform_media_rows_t *media_rows = uform_alloc_zeroed(4 * replicas, sizeof(uform_media_rows_t), "media rows");
    size_t media_masked[4] = {0, 0, 0, 0};
    float *world = uform_alloc_aligned(2 * (items ? items : 1), d * sizeof(float), "world embeddings");
    uform_status_t status = first_row && ids && chosen && masked && media_rows && world ? UFORM_OK
                                                                                     : UFORM_OUT_OF_MEMORY;
    float *d_world = world ? world + (items ? items : 1) * d : NULL;
    for (size_t r = 0, base = 0; r < replicas && status == UFORM_OK; r++) {
        uform_replica_t *rep = &replica[r];
        for (size_t i = rep->first; i < rep->last; i++) {
            if (kept[i] == SIZE_MAX) continue;
            const uint8_t *bytes = data + offsets[i];
            uint32_t modality = batch->modalities[i];
            if (modality != UFORM_MODALITY_TEXT) {  /* rows from tokens; some masked (section 11) */
                for (size_t k = 0; k < kept[i]; k++) ids[base + k] = UFORM_NOT_TEXT, chosen[base + k] = 0;
                size_t hidden = 0;
                if (t->masks_text)
                    status = uform_mask_patches(t->media[modality].mask_ratio, t->seed, step, i,
                                                UFORM_STREAM_IMAGE_MASK + modality - UFORM_MODALITY_IMAGE,
                                                kept[i], masked + base, &hidden);
                media_masked[modality] += hidden;
            } else if (uform_has_choices(batch, i)) {  /* the question stays intact, then MASK */
                for (size_t k = 0; k + 1 < kept[i]; k++) ids[base + k] = bytes[k], chosen[base + k] = 0;
                ids[base + kept[i] - 1] = UFORM_MASK_TOKEN;
                chosen[base + kept[i] - 1] = 0;
            } else if (t->masks_text) {
                rep->selected += uform_mask_text(&t->masking, t->seed, step, i, bytes, kept[i],
                                                 ids + base, chosen + base);
            } else {
                for (size_t k = 0; k < kept[i]; k++) ids[base + k] = bytes[k], chosen[base + k] = 0;
            }
            base += kept[i];
        }
        selected += rep->selected;
    }

    uform_edges_storage_t storage[3];
    memset(storage, 0, sizeof(storage));
    uform_relations_t relations;
    memset(&relations, 0, sizeof(relations));
    if (status == UFORM_OK && batch->relations) {
        status = uform_remap_edges(&batch->relations->attract, count, index, items, &storage[0], &relations.attract);
        if (status == UFORM_OK)
            status = uform_remap_edges(&batch->relations->repel, count, index, items, &storage[1], &relations.repel);
        if (status == UFORM_OK)
            status = uform_remap_edges(&batch->relations->ignore, count, index, items, &storage[2], &relations.ignore);
    }
    uint32_t *bags = NULL, *groups = NULL;
    if (status == UFORM_OK && (batch->bags || batch->temperature_groups)) {
        bags = uform_alloc(2 * (items ? items : 1), sizeof(uint32_t), "bags");
        if (!bags) status = UFORM_OUT_OF_MEMORY;
        else groups = bags + (items ? items : 1);
    }
    for (size_t i = 0; i < count && status == UFORM_OK; i++) {
        if (index[i] == SIZE_MAX) continue;
        if (batch->bags) bags[index[i]] = batch->bags[i];
        if (groups) groups[index[i]] = batch->temperature_groups ? batch->temperature_groups[i] : 0;
    }
    for (size_t r = 0, base = 0; r < replicas && status == UFORM_OK; r++) {
        uform_replica_t *rep = &replica[r];
        status = uform_workspace_init(&rep->w, t, r, rep->rows ? rep->rows : 1,
                                      rep->items ? rep->items : 1, rep->selected);
        if (status != UFORM_OK) break;
        uform_replica_layout(batch, kept, ids, chosen, base, tokens, rep);
        base += rep->rows;
        for (size_t m = UFORM_MODALITY_IMAGE; m <= UFORM_MODALITY_AUDIO && status == UFORM_OK; m++)
            if (t->media[m].width)
                status = uform_replica_media(t, batch, rep, kept, first_row, masked, tokens, m,
                                             &media_rows[4 * r + m]);
    }
    if (status != UFORM_OK) goto done;

    /* Forward and the masked loss, replica by replica; embeddings gathered. */
    memset(t->gradients, 0, t->count * sizeof(float));
    float masked_loss = 0, contrastive_loss = 0, late_loss = 0;
    double choices_sum = 0, media_sums[4] = {0, 0, 0, 0};
    for (size_t r = 0; r < replicas && status == UFORM_OK; r++) {
        uform_replica_t *rep = &replica[r];
        uform_workspace_t *w = &rep->w;
        memset(w->d_states, 0, (rep->rows ? rep->rows : 1) * t->hidden * sizeof(float));
        if (rep->rows) {
            uform_batch_t forward_batch = {rep->rows, rep->items, w->segments, w->positions};
            status = uform_forward_train(t, w, &forward_batch, &media_rows[4 * r]);
            if (status != UFORM_OK) break;
        }
        if (t->masks_text && rep->selected)
            masked_loss += uform_masked_text(t, w, t->masking.text_weight, selected);
        for (size_t m = UFORM_MODALITY_IMAGE; m <= UFORM_MODALITY_AUDIO && status == UFORM_OK; m++) {
            if (!t->media[m].width || !media_masked[m]) continue;
            uform_media_parameters_t parameters = uform_media_parameters(t, m);
            status = uform_media_reconstruction(t->executor, &parameters, &media_rows[4 * r + m],
                                                t->hidden, w->states,
                                                t->media[m].weight / (float)media_masked[m],
                                                &media_sums[m], w->d_states);
        }
        if (choice_items && status == UFORM_OK)
            status = uform_replica_choices(t, batch, rep, kept, first_row,
                                           t->choices_weight / (float)choice_items, &choices_sum);
        if (rep->items) {
            uform_embed(t, w);
            memcpy(world + rep->world_first * d, w->embeddings, rep->items * d * sizeof(float));
        }
    }
    if (status != UFORM_OK) goto done;
    /* Late interaction over the world's token vectors. */
    if (t->late && items) {
        status = uform_late_step(t, batch, replica, replicas, kept, index, first_row, items, rows,
                                 batch->bags ? bags : NULL, batch->relations ? &relations : NULL,
                                 &late_loss);
        if (status != UFORM_OK) goto done;
    }
    /* The contrastive term over the whole world; gradients go back to their owners. */
    if (t->contrasts && items) {
        status = uform_check_diverged(world, items * d, "the embeddings", step);
        if (status == UFORM_OK)
            status = uform_check_diverged(t->parameters + t->log_inverse_temperature,
                                          t->contrastive.groups, "contrastive.log_inverse_temperature", step);
        if (status == UFORM_OK && t->contrastive.pair_loss == UFORM_PAIR_LOSS_SIGMOID)
            status = uform_check_diverged(t->parameters + t->contrastive_bias, t->contrastive.groups,
                                          "contrastive.bias", step);
        if (status != UFORM_OK) goto done;
        uform_contrastive_batch_t cb = {items, d, world, batch->bags ? bags : NULL, groups,
                                        batch->relations ? &relations : NULL};
        memset(d_world, 0, items * d * sizeof(float));
        status = uform_contrastive(t->executor, &t->contrastive, &cb,
                                   t->parameters + t->log_inverse_temperature,
                                   t->parameters + t->contrastive_bias, &contrastive_loss, d_world,
                                   t->gradients + t->log_inverse_temperature,
                                   t->gradients + t->contrastive_bias);
        if (status != UFORM_OK) goto done;
        for (size_t r = 0; r < replicas; r++) {
            uform_replica_t *rep = &replica[r];
            if (!rep->items) continue;
            memcpy(rep->w.d_embeddings, d_world + rep->world_first * d, rep->items * d * sizeof(float));
            uform_embed_backward(t, &rep->w);
        }
    }
    /* Backward per replica, summed into one gradient buffer in replica order:
     * the all-reduce of a data-parallel step. */
    for (size_t r = 0; r < replicas && status == UFORM_OK; r++) {
        if (!replica[r].rows) continue;
        uform_backward_train(t, &replica[r].w);
        for (size_t m = UFORM_MODALITY_IMAGE; m <= UFORM_MODALITY_AUDIO && status == UFORM_OK; m++) {
            if (!t->media[m].width) continue;
            uform_media_parameters_t parameters = uform_media_parameters(t, m);
            status = uform_media_input_backward(t->executor, &parameters, &media_rows[4 * r + m],
                                                t->hidden, replica[r].w.d_x);
        }
    }
    if (status != UFORM_OK) goto done;

    /* The update: AdamW at this step's rate on the clipped gradients (the
     * gradient buffer keeps them unclipped, for inspection). */
    float choices_loss = choice_items ? (float)(choices_sum / (double)choice_items) : 0.0f;
    float weighted_late_loss = t->late_config.weight * late_loss;
    float media_losses[4] = {0, 0, 0, 0};
    for (size_t m = UFORM_MODALITY_IMAGE; m <= UFORM_MODALITY_AUDIO; m++)
        if (media_masked[m]) media_losses[m] = (float)(media_sums[m] / (double)media_masked[m]);
    float loss = t->masking.text_weight * masked_loss + contrastive_loss + weighted_late_loss +
                 (t->chooses ? t->choices_weight * choices_loss : 0.0f);
    for (size_t m = UFORM_MODALITY_IMAGE; m <= UFORM_MODALITY_AUDIO; m++)
        loss += t->media[m].weight * media_losses[m];
    double norm;
    float factor = uform_clip_factor(t->gradients, t->count, UFORM_CLIP_NORM, &norm);
    float rate = (float)uform_schedule_rate(&t->schedule, step);
    /* A diverged step is refused before it touches the weights: AdamW would
     * spread one NaN into every parameter and moment, and a later save would
     * write a checkpoint no load accepts. */
    if (!isfinite(loss) || !isfinite(norm)) {
        status = uform_fail(UFORM_DIVERGED,
                            "step %llu: the loss is %g and the gradients' global norm is %g; a "
                            "non-finite step was not applied (weights, moments and the step counter "
                            "are unchanged). The run has diverged: a lower learning rate (%g at this "
                            "step) or a resume from the last good checkpoint may help",
                            (unsigned long long)step, (double)loss, norm, (double)rate);
        goto done;
    }
    size_t overflow = uform_adamw_first_non_finite(t->executor, t->parameters, t->gradients, factor,
                                                   t->first_moment, t->second_moment, t->decay, t->count,
                                                   step, rate);
    if (overflow != SIZE_MAX) {
        const uform_slot_t *slot = uform_slot_at(t, overflow);
        status = uform_fail(UFORM_DIVERGED,
                            "step %llu: at the learning rate %g the update would make \"%s\"[%zu] "
                            "non-finite; the step was not applied (weights, moments and the step "
                            "counter are unchanged). The run has diverged: lower the learning rate",
                            (unsigned long long)step, (double)rate, slot ? slot->name : "?",
                            slot ? overflow - slot->offset : overflow);
        goto done;
    }
    uform_adamw(t->executor, t->parameters, t->gradients, factor, t->first_moment, t->second_moment,
                t->decay, t->count, step, rate);
    t->step = step;
    t->truncated += truncated;
    t->dropped += dropped;

    if (embeddings_out) {
        status = uform_arena_acquire(arena);
        if (status == UFORM_OK) {
            uform_arena_rewind(arena);
            memset(embeddings_out, 0, sizeof(*embeddings_out));
            embeddings_out->count = count;
            embeddings_out->scalar = outputs_scalar;
            embeddings_out->dimensions = d;
            embeddings_out->embedding_row_bytes = uform_output_row_bytes(outputs_scalar, d);
            uint8_t *out = uform_arena_take(arena, count * embeddings_out->embedding_row_bytes, "embeddings");
            if (!out) status = UFORM_OUT_OF_MEMORY;
            else {
                memset(out, 0, count * embeddings_out->embedding_row_bytes);
                for (size_t i = 0; i < count; i++)
                    if (index[i] != SIZE_MAX)
                        uform_convert_rows(world + index[i] * d, 1, d, outputs_scalar,
                                           out + i * embeddings_out->embedding_row_bytes,
                                           embeddings_out->embedding_row_bytes);
                embeddings_out->embeddings = out;
            }
            uform_arena_release(arena);
        }
    }
    if (stats) {
        memset(stats, 0, sizeof(*stats));
        stats->step = step;
        stats->learning_rate = rate;
        stats->masked_text_loss = masked_loss;
        stats->contrastive_loss = contrastive_loss;
        stats->late_interaction_loss = weighted_late_loss;
        stats->choices_loss = choices_loss;
        stats->masked_image_loss = media_losses[UFORM_MODALITY_IMAGE];
        stats->masked_video_loss = media_losses[UFORM_MODALITY_VIDEO];
        stats->masked_audio_loss = media_losses[UFORM_MODALITY_AUDIO];
        stats->loss = loss;
        stats->truncated = t->truncated;
        stats->dropped = t->dropped;
        t->truncated = t->dropped = 0;
    }

done:
    for (size_t s = 0; s < 3; s++) free(storage[s].offsets), free(storage[s].ids), free(storage[s].weights);
    free(replica); /* the workspaces stay with the trainer */
    free(bags);
    uform_free_aligned(world);
    free(lengths);
    free(first_row);
    free(masked);
    if (media_rows)
        for (size_t k = 0; k < 4 * replicas; k++) uform_media_rows_free(&media_rows[k]);
    free(media_rows);
    uform_tokens_free(tokens, count);
    free(ids);
    free(chosen);
    return status;
}

uform_status_t uform_trainer_step(uform_trainer_t *t, const uform_trainer_batch_t *batch,
                                  uform_arena_t *arena, uform_scalar_t outputs_scalar,
                                  uform_encoded_t *embeddings_out, uform_trainer_step_stats_t *stats) {
    if (!t) return uform_fail(UFORM_INVALID_ARGUMENT, "trainer: NULL");
    UFORM_TRY(uform_trainer_enter(t, "step"));
    uform_status_t status = uform_trainer_step_held(t, batch, arena, outputs_scalar, embeddings_out, stats);
    uform_trainer_leave(t);
    return status;
}

/* ---- inspection and saving ---------------------------------------------------------- */

static const uform_slot_t *uform_find_slot(const uform_trainer_t *t, const char *name) {
    for (size_t s = 0; s < t->slots_count; s++)
        if (strcmp(t->slots[s].name, name) == 0) return &t->slots[s];
    return NULL;
}

static uform_status_t uform_trainer_tensor_held(const uform_trainer_t *t, const char *name, uint32_t which,
                                               float *values, size_t *count) {
    const uform_slot_t *slot = uform_find_slot(t, name);
    if (!slot) return uform_fail(UFORM_INVALID_ARGUMENT, "name: the run has no tensor \"%s\"", name);
    if (which > 3) return uform_fail(UFORM_INVALID_ARGUMENT, "which: %u is not 0..3", which);
    size_t n = slot->rows * (slot->cols ? slot->cols : 1);
    if (!values) {
        *count = n;
        return UFORM_OK;
    }
    if (*count != n)
        return uform_fail(UFORM_INVALID_ARGUMENT, "count: \"%s\" holds %zu values, not %zu", name, n, *count);
    const float *buffers[4] = {t->parameters, t->gradients, t->first_moment, t->second_moment};
    memcpy(values, buffers[which] + slot->offset, n * sizeof(float));
    return UFORM_OK;
}

uform_status_t uform_trainer_tensor(const uform_trainer_t *t, const char *name, uint32_t which,
                                    float *values, size_t *count) {
    if (!t || !name || !count) return uform_fail(UFORM_INVALID_ARGUMENT, "trainer_tensor: NULL argument");
    UFORM_TRY(uform_trainer_enter(t, "trainer_tensor"));
    uform_status_t status = uform_trainer_tensor_held(t, name, which, values, count);
    uform_trainer_leave(t);
    return status;
}

static uform_status_t uform_trainer_save_held(uform_trainer_t *t, const char *path,
                                             const uform_progress_t *progress) {
    size_t views_count = 4 * t->slots_count;
    uform_tensor_view_t *views = uform_alloc_zeroed(views_count, sizeof(*views), "save");
    uint16_t *bf16 = uform_alloc(t->count, sizeof(uint16_t), "save");
    char (*names)[96] = uform_alloc(3 * t->slots_count, sizeof(*names), "save");
    if (!views || !bf16 || !names) {
        free(views), free(bf16), free(names);
        return UFORM_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < t->count; i++) bf16[i] = uform_f32_to_bf16(t->parameters[i]);
    size_t v = 0;
    for (size_t s = 0; s < t->slots_count; s++) {
        const uform_slot_t *slot = &t->slots[s];
        uform_tensor_view_t *view = &views[v++];
        view->name = slot->name;
        view->rank = slot->cols ? 2 : 1;
        view->shape[0] = slot->rows;
        view->shape[1] = slot->cols;
        view->dtype = slot->f32 ? UFORM_DTYPE_F32 : UFORM_DTYPE_BF16;
        view->data = slot->f32 ? (const void *)(t->parameters + slot->offset)
                               : (const void *)(bf16 + slot->offset);
    }
    /* train.*: FP32 masters and moments, so a resume continues exactly */
    const float *state[3] = {t->parameters, t->first_moment, t->second_moment};
    const char *kinds[3] = {"master", "first_moment", "second_moment"};
    for (size_t k = 0; k < 3; k++)
        for (size_t s = 0; s < t->slots_count; s++) {
            const uform_slot_t *slot = &t->slots[s];
            char *name = names[k * t->slots_count + s];
            snprintf(name, 96, "train.%s.%s", kinds[k], slot->name);
            uform_tensor_view_t *view = &views[v++];
            view->name = name;
            view->rank = slot->cols ? 2 : 1;
            view->shape[0] = slot->rows;
            view->shape[1] = slot->cols;
            view->dtype = UFORM_DTYPE_F32;
            view->data = state[k] + slot->offset;
        }
    char geometry[1024], training[512], media[512] = "";
    const uform_model_t *g = &t->geometry;
    size_t used = 0;
    if (g->image_patch_side)
        used += (size_t)snprintf(media + used, sizeof(media) - used,
                                 ", \"image\": {\"patch_side\": %zu, \"channels\": 3}", g->image_patch_side);
    if (g->video_patch_side)
        used += (size_t)snprintf(media + used, sizeof(media) - used,
                                 ", \"video\": {\"patch_side\": %zu, \"tube_frames\": %zu, "
                                 "\"frame_stride\": %zu, \"channels\": 3}",
                                 g->video_patch_side, g->video_tube_frames, g->video_frame_stride);
    if (g->audio_chunk_samples)
        snprintf(media + used, sizeof(media) - used,
                 ", \"audio\": {\"chunk_samples\": %zu, \"sample_rate\": %zu}", g->audio_chunk_samples,
                 g->audio_sample_rate);
    snprintf(geometry, sizeof(geometry),
             "{\"version\": 4, \"depth\": %zu, \"hidden\": %zu, \"dimensions\": %zu, \"context\": %zu, "
             "\"token_width\": %zu, \"choice_temperature_groups\": %zu, \"step\": %llu%s}",
             t->depth, t->hidden, t->dimensions, t->context, t->late ? t->late_config.width : 0,
             t->chooses ? t->choice_groups : (t->byte_head ? (size_t)1 : 0),
             (unsigned long long)t->step, media);
    snprintf(training, sizeof(training),
             "{\"seed\": %llu, \"step\": %llu, \"objective\": %d, \"steps\": %zu, \"warmup_steps\": %zu, "
             "\"learning_rate\": %.9g, \"min_learning_rate\": %.9g}",
             (unsigned long long)t->seed, (unsigned long long)t->step, (int)t->objective,
             t->schedule.steps, t->schedule.warmup_steps, (double)t->schedule.learning_rate,
             (double)t->schedule.min_learning_rate);
    uform_metadata_entry_t metadata[2] = {{(char *)"uform", geometry}, {(char *)"uform.train", training}};
    uform_status_t status = uform_safetensors_write(path, views, v, metadata, 2, progress);
    free(views);
    free(bf16);
    free(names);
    return status;
}

uform_status_t uform_trainer_save(uform_trainer_t *t, const char *path, const uform_progress_t *progress) {
    if (!t) return uform_fail(UFORM_INVALID_ARGUMENT, "trainer: NULL");
    if (!path) return uform_fail(UFORM_INVALID_ARGUMENT, "path: NULL");
    UFORM_TRY(uform_trainer_enter(t, "save"));
    uform_status_t status = uform_trainer_save_held(t, path, progress);
    uform_trainer_leave(t);
    return status;
}
