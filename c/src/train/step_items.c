/* step_items.c: a step's items before the encoder runs: the batch's checks,
 * relations remapped to the kept items, items split over replicas by token count
 * and laid out in each replica's workspace, media items decoded and tokenised. */
#include "train/trainer_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- the step ------------------------------------------------------------------- */

/* Item i's choices: its bytes start at data + *bytes (*length of them), its
 * targets at choice_targets + *targets. One entry per item, or one entry
 * shared by every item (count 1 for several items, as text_choose takes it),
 * whose targets then follow one another item by item from offsets[0]. */
size_t uform_item_choices(const uform_trainer_batch_t *b, size_t i, size_t *bytes, size_t *targets) {
    const uform_tape_t *choices = &b->choices;
    if (choices->count == 0) return *bytes = *targets = 0;
    bool shared = choices->count == 1 && b->contents.count > 1;
    size_t entry = shared ? 0 : i, length = choices->offsets[entry + 1] - choices->offsets[entry];
    *bytes = choices->offsets[entry];
    *targets = shared ? choices->offsets[0] + i * length : choices->offsets[i];
    return length;
}

/* choices and choice_targets (docs/training.md section 10). */
static uform_status_t uform_check_step_choices(const uform_trainer_t *t, const uform_trainer_batch_t *b) {
    const uform_tape_t *choices = &b->choices;
    if (choices->count == 0) return UFORM_OK;
    size_t count = b->contents.count;
    if (!t->chooses)
        return uform_fail(UFORM_INVALID_ARGUMENT, "choices: given, but the run has no choices configuration");
    if (choices->count != count && choices->count != 1)
        return uform_fail(UFORM_INVALID_ARGUMENT,
                          "choices: %zu entries for %zu items (one per item, or one for all)",
                          choices->count, count);
    if (!choices->offsets) return uform_fail(UFORM_INVALID_ARGUMENT, "choices: offsets are NULL");
    for (size_t i = 0; i < choices->count; i++)
        if (choices->offsets[i + 1] < choices->offsets[i])
            return uform_fail(UFORM_INVALID_ARGUMENT, "choices: offsets decrease at item %zu", i);
    if (choices->offsets[choices->count] > choices->size)
        return uform_fail(UFORM_INVALID_ARGUMENT, "choices: the last offset is past the data");
    if (choices->size && !choices->data) return uform_fail(UFORM_INVALID_ARGUMENT, "choices: data is NULL");
    if (choices->offsets[choices->count] > choices->offsets[0] && !b->choice_targets)
        return uform_fail(UFORM_INVALID_ARGUMENT, "choice_targets: NULL while items have choices");
    const uint8_t *data = choices->data;
    for (size_t i = 0; i < count; i++) {
        size_t begin, target_begin, n = uform_item_choices(b, i, &begin, &target_begin);
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
            float target = b->choice_targets[target_begin + c];
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

uform_status_t uform_check_step_arena(const uform_arena_t *arena, bool embeddings) {
    if (!embeddings) return UFORM_OK;
    if (!arena) return uform_fail(UFORM_INVALID_ARGUMENT, "arena: NULL while embeddings are asked for");
    return uform_arena_require_host(arena, "arena: a training step answers its embeddings");
}

uform_status_t uform_check_step_batch(const uform_trainer_t *t, const uform_trainer_batch_t *b,
                                      size_t world_count) {
    if (!b) return uform_fail(UFORM_INVALID_ARGUMENT, "batch: NULL");
    const uform_tape_t *tape = &b->contents;
    size_t count = tape->count;
    /* A host of a mesh (or a GPU's replica) may have no items when others do. */
    if (world_count == 0) return uform_fail(UFORM_INVALID_ARGUMENT, "contents: the batch is empty");
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
            if (e->ids[j] >= world_count)
                return uform_fail(UFORM_INVALID_ARGUMENT, "%s: edge %zu names item %u of %zu%s",
                                  names[s], j, e->ids[j], world_count,
                                  world_count != count ? " (the items of every host)" : "");
            if (e->weights && (!isfinite(e->weights[j]) || e->weights[j] < 0))
                return uform_fail(UFORM_INVALID_ARGUMENT, "%s: weight %zu is not finite and >= 0",
                                  names[s], j);
        }
    }
    return UFORM_OK;
}


uform_status_t uform_remap_edges(const uform_edges_t *given, size_t count, const size_t *index,
                                 const size_t *candidates, size_t kept_count,
                                 uform_edges_storage_t *storage, uform_edges_t *out) {
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
            size_t j = candidates[given->ids[e]];
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

/* Splits items into `replicas` contiguous ranges of about equal token counts
 * ("a process's items are spread over its devices by token count"). */
void uform_split_by_tokens(const size_t *lengths, size_t count, size_t columns,
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

/* Lays out one replica's kept items in its workspace: token ids, segments,
 * positions, selected rows and their original bytes. */
void uform_replica_layout(const uform_trainer_batch_t *batch, const size_t *kept,
                                 const uint32_t *ids, const uint8_t *chosen, size_t row_base,
                                 const uform_media_tokens_t *tokens, uform_replica_t *replica) {
    uform_workspace_t *w = &replica->w;
    const uint8_t *data = batch->contents.data;
    const size_t *offsets = batch->contents.offsets;
    memcpy(w->host_ids, ids + row_base, replica->rows * sizeof(uint32_t));
    size_t r = 0, item = 0, s = 0;
    for (size_t i = replica->first; i < replica->last; i++) {
        if (kept[i] == SIZE_MAX) continue;
        if (batch->modalities[i] != UFORM_MODALITY_TEXT) {  /* positions from the tokenizer */
            w->host_segments[item] = (uform_segment_t){r, kept[i], tokens[i].axes};
            memcpy(w->host_positions + 3 * r, tokens[i].positions, 3 * kept[i] * sizeof(uint32_t));
            r += kept[i];
            item++;
            continue;
        }
        w->host_segments[item] = (uform_segment_t){r, kept[i], 1};
        for (size_t k = 0; k < kept[i]; k++) {
            w->host_positions[3 * (r + k)] = (uint32_t)k;
            w->host_positions[3 * (r + k) + 1] = w->host_positions[3 * (r + k) + 2] = 0;
            if (chosen[row_base + r + k]) {
                w->host_selected_rows[s] = r + k;
                w->host_targets[s] = data[offsets[i] + k];
                s++;
            }
        }
        r += kept[i];
        item++;
    }
    w->rows = replica->rows;
    w->items = replica->items;
}

void uform_item_lengths(const uform_trainer_batch_t *batch, const uform_media_tokens_t *tokens,
                        size_t *lengths) {
    const size_t *offsets = batch->contents.offsets;
    /* an item with choices carries MASK after its bytes (section 10) */
    for (size_t i = 0; i < batch->contents.count; i++)
        lengths[i] = batch->modalities[i] != UFORM_MODALITY_TEXT
                         ? tokens[i].rows
                         : offsets[i + 1] - offsets[i] + (uform_has_choices(batch, i) ? 1 : 0);
}

bool uform_has_choices(const uform_trainer_batch_t *batch, size_t i) {
    size_t bytes, targets;
    return uform_item_choices(batch, i, &bytes, &targets) > 0;
}

void uform_tokens_free(uform_media_tokens_t *tokens, size_t count) {
    if (!tokens) return;
    for (size_t i = 0; i < count; i++) uform_media_tokens_free(&tokens[i]);
    free(tokens);
}

/* One item's decoding outcome: the failure its pool thread saw, with the
 * message (which lives in that thread's error slot) carried over. */
typedef struct {
    uform_status_t status;
    char message[512];
} uform_media_outcome_t;

typedef struct {
    const uform_media_files_t *files;
    const uint32_t *modalities;
    uform_media_tokens_t *tokens;
    uform_media_outcome_t *outcomes;
} uform_media_items_t;

static void uform_tokenize_items(void *context, size_t begin, size_t end, size_t thread) {
    (void)thread;
    const uform_media_items_t *items = context;
    for (size_t i = begin; i < end; i++) {
        uform_status_t status = UFORM_OK;
        switch (items->modalities[i]) {
        case UFORM_MODALITY_IMAGE: status = uform_image_file_tokenize(items->files, i, &items->tokens[i]); break;
        case UFORM_MODALITY_VIDEO: status = uform_video_file_tokenize(items->files, i, &items->tokens[i]); break;
        case UFORM_MODALITY_AUDIO: status = uform_audio_file_tokenize(items->files, i, &items->tokens[i]); break;
        default: break;
        }
        items->outcomes[i].status = status;
        if (status != UFORM_OK)
            snprintf(items->outcomes[i].message, sizeof(items->outcomes[i].message), "%s", uform_last_error());
    }
}

/* Decodes and tokenises the step's image, video and audio items as the encode
 * verbs do (*out NULL when the step has none), one item per pool task: decoding
 * is single-threaded per item, so a step of many files keeps every core busy.
 * Each item's tokens depend on its bytes alone, so the thread count changes
 * nothing, and a failure is reported for the first failing item in order, as
 * a serial loop would. */
uform_status_t uform_tokenize_media(const uform_trainer_t *t, const uform_trainer_batch_t *b,
                                           uform_media_tokens_t **out) {
    *out = NULL;
    size_t count = b->contents.count;
    bool any = false;
    for (size_t i = 0; i < count; i++) any = any || b->modalities[i] != UFORM_MODALITY_TEXT;
    if (!any) return UFORM_OK;
    uform_media_tokens_t *tokens = uform_alloc_zeroed(count, sizeof(*tokens), "media tokens");
    uform_media_outcome_t *outcomes = tokens ? uform_alloc_zeroed(count, sizeof(*outcomes), "media outcomes")
                                             : NULL;
    if (!tokens || !outcomes) {
        free(tokens);
        return UFORM_OUT_OF_MEMORY;
    }
    uform_media_files_t files = {&t->geometry, &b->contents, false};
    uform_media_items_t items = {&files, b->modalities, tokens, outcomes};
    uform_parallel_for(t->executor, count, 1, uform_tokenize_items, &items);
    uform_status_t status = UFORM_OK;
    for (size_t i = 0; i < count && status == UFORM_OK; i++)
        if (outcomes[i].status != UFORM_OK) {
            uform_set_error_text(outcomes[i].message);
            status = outcomes[i].status;
        }
    free(outcomes);
    if (status != UFORM_OK) {
        uform_tokens_free(tokens, count);
        return uform_fail_context(status, "contents");
    }
    *out = tokens;
    return UFORM_OK;
}

/* One replica's rows of modality m: fed rows with their token values, masked
 * rows with their normalised targets. */
uform_status_t uform_replica_media(const uform_trainer_t *t, const uform_trainer_batch_t *batch,
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
    uform_backend_t *b = (uform_backend_t *)&t->backend;   /* its memory, not the trainer, changes */
    UFORM_TRY(uform_media_rows_alloc(rows, b, fed, hidden, width));
    fed = hidden = 0;
    for (size_t i = rep->first; i < rep->last; i++) {
        if (kept[i] == SIZE_MAX || batch->modalities[i] != m) continue;
        for (size_t k = 0; k < kept[i]; k++) {
            size_t row = first_row[i] + k;
            const float *values = tokens[i].inputs + k * width;
            if (masked[rep->world_row_first + row]) {
                rows->host_masked_rows[hidden] = row;
                uform_patch_targets(values, 1, width, rows->host_targets + hidden * width);
                hidden++;
            } else {
                rows->host_rows[fed] = row;
                memcpy(rows->host_inputs + fed * width, values, width * sizeof(float));
                fed++;
            }
        }
    }
    uform_media_rows_upload(rows, b);
    return UFORM_OK;
}
