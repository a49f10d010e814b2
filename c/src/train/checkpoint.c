/* checkpoint.c: the trainer's save (model tensors in BF16, train.* state in FP32,
 * metadata) and resume, which validates the state as strictly as load validates
 * weights (docs/training.md section 7, docs/reliability.md). */
#include "train/trainer_internal.h"

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
uform_status_t uform_resume_peek(const char *path, uform_trainer_options_t *o) {
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
uform_status_t uform_resume(uform_trainer_t *t, const uform_host_state_t *h, const char *path,
                            uint64_t given_seed, const uform_progress_t *progress) {
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
    /* progress counts the floats read and checked: 3 per parameter */
    uform_progress_state_t reports;
    uform_progress_begin(&reports, progress, 3 * t->count);
    size_t done = 0;
    for (size_t s = 0; s < t->slots_count && status == UFORM_OK; s++) {
        status = uform_resume_tensor(&file, "master", &t->slots[s], h->parameters);
        if (status == UFORM_OK) status = uform_resume_tensor(&file, "first_moment", &t->slots[s], h->first_moment);
        if (status == UFORM_OK) status = uform_resume_tensor(&file, "second_moment", &t->slots[s], h->second_moment);
        done += 3 * t->slots[s].rows * (t->slots[s].cols ? t->slots[s].cols : 1);
        if (status == UFORM_OK)
            status = uform_progress_update(&reports, s + 1 == t->slots_count ? 3 * t->count : done);
    }
    uform_safetensors_close(&file);
    if (status != UFORM_OK) return status;
    t->step = step;
    t->seed = seed;
    return UFORM_OK;
}

uform_status_t uform_checkpoint_write(uform_trainer_t *t, const char *path,
                                     const uform_progress_t *progress) {
    uform_host_state_t h;
    UFORM_TRY(uform_host_state_open(t, &h, true));
    size_t views_count = 4 * t->slots_count;
    uform_tensor_view_t *views = uform_alloc_zeroed(views_count, sizeof(*views), "save");
    uint16_t *bf16 = uform_alloc(t->count, sizeof(uint16_t), "save");
    char (*names)[96] = uform_alloc(3 * t->slots_count, sizeof(*names), "save");
    if (!views || !bf16 || !names) {
        free(views), free(bf16), free(names);
        uform_host_state_close(&h);
        return UFORM_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < t->count; i++) bf16[i] = uform_f32_to_bf16(h.parameters[i]);
    size_t v = 0;
    for (size_t s = 0; s < t->slots_count; s++) {
        const uform_slot_t *slot = &t->slots[s];
        uform_tensor_view_t *view = &views[v++];
        view->name = slot->name;
        view->rank = slot->cols ? 2 : 1;
        view->shape[0] = slot->rows;
        view->shape[1] = slot->cols;
        view->dtype = slot->f32 ? UFORM_DTYPE_F32 : UFORM_DTYPE_BF16;
        view->data = slot->f32 ? (const void *)(h.parameters + slot->offset)
                               : (const void *)(bf16 + slot->offset);
    }
    /* train.*: FP32 masters and moments, so a resume continues exactly */
    const float *state[3] = {h.parameters, h.first_moment, h.second_moment};
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
    uform_host_state_close(&h);
    return status;
}

/* On a mesh host 0 writes and every host hears how it went (trainer_mesh.c);
 * over several GPUs, GPU 0's replica writes (replica_group.c). */
uform_status_t uform_trainer_save_held(uform_trainer_t *t, const char *path,
                                      const uform_progress_t *progress) {
    if (t->group) return uform_group_save(t, path, progress);
    uform_trainer_hold(t);
    uform_status_t status =
        t->mesh ? uform_trainer_save_on_mesh(t, path, progress) : uform_checkpoint_write(t, path, progress);
    uform_trainer_unhold(t);
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
