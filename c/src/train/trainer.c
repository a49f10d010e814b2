/* trainer.c: the CPU trainer's configuration (docs/training.md): every zero
 * derived, FP32 master weights in one flat buffer (gradients and AdamW moments in
 * three more of the same layout) laid out in checkpoint order and initialised from
 * the counter-based generator; the trainer's entry points but step and save.
 *
 * Scope: text, image, video and audio items; the MASKED, CONTRASTIVE and JOINT
 * objectives with late interaction and calibrated choices; one replica per memory
 * domain of the executor, data parallel (step.c). One GPU: the same trainer on
 * the GPU's backend; several: one such trainer per GPU (replica_group.c). */
#include "train/trainer_internal.h"
#include "train/trainer_on_device.h"

/* Takes the trainer for one call, or refuses when another call holds it. */
uform_status_t uform_trainer_enter(const uform_trainer_t *t, const char *what) {
    /* busy is the one mutable field of a trainer read through a const handle */
    if (atomic_flag_test_and_set(&((uform_trainer_t *)t)->busy))
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "%s: the trainer is in use by another call (a step, save or read running "
                          "on another thread); a trainer is used by one thread at a time", what);
    return UFORM_OK;
}

void uform_trainer_leave(const uform_trainer_t *t) {
    atomic_flag_clear(&((uform_trainer_t *)t)->busy);
}

/* A device backend is held (backend.h: acquire) by the thread that runs a
 * call's work, which for a submitted call is not the one that entered. */
void uform_trainer_hold(uform_trainer_t *t) {
    if (t->backend.ops && t->backend.ops->acquire) t->backend.ops->acquire(&t->backend);
}

void uform_trainer_unhold(uform_trainer_t *t) {
    if (t->backend.ops && t->backend.ops->release) t->backend.ops->release(&t->backend);
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
static void uform_initialise(uform_trainer_t *t, const uform_host_state_t *h,
                             float initial_log_temperature, float initial_bias) {
    float *p = h->parameters;
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
        memset(h->decay + t->slots[s].offset, t->slots[s].decay ? 1 : 0,
               t->slots[s].rows * (t->slots[s].cols ? t->slots[s].cols : 1));
}

void uform_trainer_free(uform_trainer_t *t) {
    if (!t) return;
    uform_group_free(t->group);
    uform_mesh_release(t->mesh);
    uform_backend_t *b = &t->backend;
    if (b->ops) {   /* set before anything of its memory is taken */
        uform_trainer_hold(t);
        for (size_t r = 0; r < t->workspaces_count; r++) uform_workspace_release(t, r);
        void *buffers[5] = {t->parameters, t->gradients, t->first_moment, t->second_moment, t->decay};
        for (size_t i = 0; i < 5; i++)
            if (buffers[i]) b->ops->free(b, buffers[i]);
        uform_trainer_unhold(t);
    }
    free(t->workspaces);
    uform_free_aligned(t->mesh_gradients);
    uform_gradient_sum_free(t->gradient_sum);
    free(t->slots);
    free(t->blocks);
    free(t->block_weights);
    free(t->block_gradients);
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

/* The views of the blocks transformer.c runs: pointers into the flat
 * parameter and gradient buffers, which never move. */
static uform_status_t uform_trainer_views(uform_trainer_t *t) {
    t->block_weights = uform_alloc(t->depth, sizeof(uform_block_weights_t), "trainer block views");
    t->block_gradients = uform_alloc(t->depth, sizeof(uform_block_gradients_t), "trainer gradient views");
    if (!t->block_weights || !t->block_gradients) return UFORM_OUT_OF_MEMORY;
    const float *p = t->parameters;
    float *g = t->gradients;
    size_t h = t->hidden;
    for (size_t l = 0; l < t->depth; l++) {
        const uform_block_slots_t *s = &t->blocks[l];
        t->block_weights[l] = (uform_block_weights_t){
            p + s->norm1_weight, p + s->norm1_bias,
            (uform_weight_t){NULL, p + s->qkv_weight, 3 * h, h}, p + s->qkv_bias,
            (uform_weight_t){NULL, p + s->out_weight, h, h}, p + s->out_bias,
            p + s->norm2_weight, p + s->norm2_bias,
            (uform_weight_t){NULL, p + s->up_weight, 4 * h, h}, p + s->up_bias,
            (uform_weight_t){NULL, p + s->down_weight, h, 4 * h}, p + s->down_bias};
        t->block_gradients[l] = (uform_block_gradients_t){
            g + s->norm1_weight, g + s->norm1_bias, g + s->qkv_weight, g + s->qkv_bias,
            g + s->out_weight, g + s->out_bias, g + s->norm2_weight, g + s->norm2_bias,
            g + s->up_weight, g + s->up_bias, g + s->down_weight, g + s->down_bias};
    }
    t->transformer = (uform_transformer_t){t->depth, h, t->block_weights, p + t->norm_weight,
                                           p + t->norm_bias};
    return UFORM_OK;
}

/* What a trainer on a device cannot run yet: a term whose loss the backend
 * lacks. (A mesh it can: its collectives pass through host copies.) */
static uform_status_t uform_trainer_device_check(const uform_trainer_t *t) {
    const uform_backend_ops_t *ops = t->backend.ops;
    if (ops->host_memory) return UFORM_OK;
    bool media = t->media[UFORM_MODALITY_IMAGE].width || t->media[UFORM_MODALITY_VIDEO].width ||
                 t->media[UFORM_MODALITY_AUDIO].width;
    const char *missing = NULL;
    if (media && t->masks_text && !ops->reconstruction_loss) missing = "the reconstruction loss";
    if (!missing && t->contrasts && !ops->contrastive_loss) missing = "the contrastive loss";
    if (!missing && t->late && !ops->late_interaction_loss) missing = "the late-interaction loss";
    if (!missing && t->chooses && !ops->choices_loss) missing = "the choices loss";
    if (!missing) return UFORM_OK;
    return uform_fail(UFORM_UNSUPPORTED, "Trainer: %s on the %s backend is not built yet (docs/gpu.md)", missing,
                      ops->name);
}

/* A trainer whose step runs on `device` (NULL: the CPU backend on the
 * executor's threads), its flat buffers and workspaces in that backend's memory. */
static uform_status_t uform_trainer_build(uform_executor_t *executor, const uform_trainer_options_t *options,
                                          const uform_backend_t *device, uform_trainer_t **result) {
    if (!result) return uform_fail(UFORM_INVALID_ARGUMENT, "trainer: the out-pointer is NULL");
    *result = NULL;
    if (!executor) return uform_fail(UFORM_INVALID_ARGUMENT, "executor: NULL");
    if (!options) return uform_fail(UFORM_INVALID_ARGUMENT, "options: NULL");
    /* The class pins the CPU kernels; a GPU trainer's products are the GPU's. */
    uform_cpu_class_t cpu_class = UFORM_CPU_CLASS_AUTO;
    if (device && options->cpu_class != UFORM_CPU_CLASS_AUTO)
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "cpu_class: a GPU trainer takes none (AUTO); it pins a RAM trainer's kernels");
    if (!device) UFORM_TRY(uform_cpu_class_resolve(options->cpu_class, &cpu_class));
    /* A mesh is taken first: a trainer that cannot take it joins no collective. */
    if (options->mesh) UFORM_TRY(uform_mesh_take(options->mesh, executor));
    uform_trainer_t *t = uform_alloc_zeroed(1, sizeof(*t), "trainer");
    if (!t) {
        /* the peers wait for this host at the first agreement: tell them */
        if (options->mesh) (void)uform_mesh_agree(options->mesh, UFORM_OUT_OF_MEMORY, "Trainer init");
        uform_mesh_release(options->mesh);
        return UFORM_OUT_OF_MEMORY;
    }
    atomic_flag_clear(&t->busy);
    t->executor = executor;
    t->mesh = options->mesh;
    t->backend = device ? *device : uform_cpu_backend(cpu_class, executor);
    uform_trainer_hold(t);   /* let go below */
    float initial_log_temperature = 0, initial_bias = 0;
    uform_trainer_options_t resolved = *options;
    uform_status_t status = options->resume ? uform_resume_peek(options->resume, &resolved) : UFORM_OK;
    if (status == UFORM_OK)
        status = uform_trainer_configure(t, &resolved, &initial_log_temperature, &initial_bias);
    if (status == UFORM_OK && device) status = uform_trainer_device_check(t);
    if (status == UFORM_OK) {
        t->blocks = uform_alloc_zeroed(t->depth, sizeof(uform_block_slots_t), "trainer blocks");
        t->slots = uform_alloc_zeroed(12 * t->depth + 40, sizeof(uform_slot_t), "trainer tensors");
        status = t->blocks && t->slots ? UFORM_OK : UFORM_OUT_OF_MEMORY;
    }
    uform_backend_t *b = &t->backend;
    if (status == UFORM_OK) {
        uform_layout(t);
        size_t bytes = t->count * sizeof(float);
        t->parameters = b->ops->alloc(b, bytes);
        t->gradients = t->parameters ? b->ops->alloc(b, bytes) : NULL;
        t->first_moment = t->gradients ? b->ops->alloc(b, bytes) : NULL;
        t->second_moment = t->first_moment ? b->ops->alloc(b, bytes) : NULL;
        t->decay = t->second_moment ? b->ops->alloc(b, t->count) : NULL;
        status = t->decay ? UFORM_OK : uform_fail_context(UFORM_OUT_OF_MEMORY, "the trainer's flat buffers");
    }
    if (status == UFORM_OK) status = uform_trainer_views(t);
    if (status == UFORM_OK) {
        uform_host_state_t h;
        status = uform_host_state_open(t, &h, false);
        if (status == UFORM_OK) {
            uform_initialise(t, &h, initial_log_temperature, initial_bias);
            memset(h.first_moment, 0, t->count * sizeof(float));
            memset(h.second_moment, 0, t->count * sizeof(float));
            if (options->resume) status = uform_resume(t, &h, options->resume, options->seed, &options->progress);
            if (status == UFORM_OK) status = uform_host_state_commit(t, &h);
            uform_host_state_close(&h);
        }
        b->ops->zero(b, t->gradients, t->count * sizeof(float));
        if (status == UFORM_OK) status = b->ops->synchronize(b);
    }
    uform_trainer_unhold(t);
    /* On a mesh every host gets here, and all go on only with equal trainers. */
    if (t->mesh) status = uform_trainer_join_mesh(t, t->mesh, status);
    if (status != UFORM_OK) {
        uform_trainer_free(t);
        return status;
    }
    *result = t;
    return UFORM_OK;
}

uform_status_t uform_trainer_init_ram(uform_executor_t *executor, const uform_trainer_options_t *options,
                                      uform_trainer_t **result) {
    return uform_trainer_build(executor, options, NULL, result);
}

uform_status_t uform_trainer_init_on_device(uform_executor_t *executor, const uform_trainer_options_t *options,
                                            const uform_backend_t *device, uform_trainer_t **result) {
    if (!device) return uform_fail(UFORM_INVALID_ARGUMENT, "device: NULL");
    return uform_trainer_build(executor, options, device, result);
}

/* The slot holding flat index i of the parameter buffers. */
const uform_slot_t *uform_slot_at(const uform_trainer_t *t, size_t i) {
    for (size_t s = 0; s < t->slots_count; s++) {
        const uform_slot_t *slot = &t->slots[s];
        if (i >= slot->offset && i - slot->offset < slot->rows * (slot->cols ? slot->cols : 1)) return slot;
    }
    return NULL;
}

/* ---- inspection and saving ---------------------------------------------------------- */

static const uform_slot_t *uform_find_slot(const uform_trainer_t *t, const char *name) {
    for (size_t s = 0; s < t->slots_count; s++)
        if (strcmp(t->slots[s].name, name) == 0) return &t->slots[s];
    return NULL;
}

uform_status_t uform_trainer_tensor_held(const uform_trainer_t *t, const char *name, uint32_t which,
                                        float *values, size_t *count) {
    if (t->group) return uform_group_tensor(t, name, which, values, count);
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
    /* a transfer from the backend changes nothing of the trainer */
    uform_trainer_t *mutable = (uform_trainer_t *)t;
    uform_trainer_hold(mutable);
    uform_status_t status = uform_trainer_read(mutable, values, buffers[which] + slot->offset, n * sizeof(float));
    uform_trainer_unhold(mutable);
    return status;
}

uform_status_t uform_trainer_tensor(const uform_trainer_t *t, const char *name, uint32_t which,
                                    float *values, size_t *count) {
    if (!t || !name || !count) return uform_fail(UFORM_INVALID_ARGUMENT, "trainer_tensor: NULL argument");
    UFORM_TRY(uform_trainer_enter(t, "trainer_tensor"));
    uform_status_t status = uform_trainer_tensor_held(t, name, which, values, count);
    uform_trainer_leave(t);
    return status;
}
