/* step.c: one optimizer step (docs/training.md): pack, corrupt, forward every
 * replica, the objectives over the world, backward, and the AdamW update, refused
 * when the step diverged (docs/reliability.md). Replicas share one copy of the
 * weights and run one after another on the executor's threads; their gradients
 * sum in replica order (the all-reduce of a data-parallel step).
 *
 * On a mesh the world is every host's items (step_world.c): the hosts agree
 * after each phase that can fail on one of them (so none waits on a peer that
 * gave up), the pairing terms run replicated over gathered rows, and the
 * gradients are summed across hosts before the identical update. */
#include "train/trainer_internal.h"

/* Values the step computed (not the caller's) that must be finite for the
 * objectives: a NaN there means the run has diverged, reported as such. */
static uform_status_t uform_check_finite_values(const float *values, size_t count, const char *what,
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

/* The same over values in the backend's memory: read through a host copy on a device. */
static uform_status_t uform_check_diverged(uform_trainer_t *t, const float *device_values, size_t count,
                                           const char *what, uint64_t step) {
    const float *values = device_values;
    float *copy = NULL;
    if (!uform_trainer_on_host(t) && count) {
        copy = uform_alloc(count, sizeof(float), what);
        if (!copy) return UFORM_OUT_OF_MEMORY;
        uform_status_t status = uform_trainer_read(t, copy, device_values, count * sizeof(float));
        if (status != UFORM_OK) {
            free(copy);
            return status;
        }
        values = copy;
    }
    uform_status_t status = uform_check_finite_values(values, count, what, step);
    free(copy);
    return status;
}

/* given_tokens: the batch's media tokens, tokenized by the caller (a replica
 * of several GPUs: replica_group.c) and kept by it; NULL: tokenized here.
 * refused: the caller's verdict on the whole batch (its message this thread's
 * error): not OK, the step fails with it at the first agreement, so a mesh's
 * hosts fail together. */
static uform_status_t uform_trainer_step_body(uform_trainer_t *t, const uform_trainer_batch_t *batch,
                                              uform_media_tokens_t *given_tokens, uform_status_t refused,
                                              uform_arena_t *arena, bool arena_held,
                                              uform_scalar_t outputs_scalar, uform_encoded_t *embeddings_out,
                                              uform_trainer_step_stats_t *stats) {
    uint64_t step = t->step + 1;
    uform_world_t world_of;
    uform_status_t status = uform_world_begin(t, batch, &world_of);
    uform_world_t *wd = &world_of;
    if (status == UFORM_OK) status = refused;
    if (status == UFORM_OK) status = uform_check_step_batch(t, batch, wd->world_count);
    if (status == UFORM_OK) status = uform_check_step_arena(arena, embeddings_out != NULL);
    if (status == UFORM_OK && embeddings_out && uform_output_row_bytes(outputs_scalar, t->dimensions) == 0)
        status = uform_fail(UFORM_INVALID_ARGUMENT, "outputs_scalar: %d is not a scalar",
                            (int)outputs_scalar);
    size_t count = status == UFORM_OK ? batch->contents.count : 0, replicas = 1;
    uform_executor_memory_domains(t->executor, &replicas);
    uform_media_tokens_t *tokens = given_tokens;
    if (status == UFORM_OK && !given_tokens) status = uform_tokenize_media(t, batch, &tokens);
    size_t *lengths = NULL;
    uform_replica_t *replica = NULL;
    if (status == UFORM_OK) {
        lengths = uform_alloc(5 * count + t->limits.rows + 1, sizeof(size_t), "packing");
        replica = uform_alloc_zeroed(replicas, sizeof(uform_replica_t), "replicas");
        if (!lengths || !replica) status = UFORM_OUT_OF_MEMORY;
    }
    /* Every host checked its batch: all go on, or all stop here. */
    status = uform_world_agree(wd, status, step);
    if (status != UFORM_OK) {
        free(lengths), free(replica);
        if (!given_tokens) uform_tokens_free(tokens, count);
        uform_world_free(wd);
        return status;
    }
    const uint8_t *data = batch->contents.data;
    const size_t *offsets = batch->contents.offsets;
    size_t d = t->dimensions, item_base = wd->item_base;
    size_t *kept = lengths + count, *row = kept + count, *index = row + count;
    size_t *row_used = index + count;
    uint32_t *bags_seen = (uint32_t *)(row_used + t->limits.rows + 1); /* count words fit in count size_t */
    uform_item_lengths(batch, tokens, lengths);

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
    uform_backend_t *b = &t->backend;
    /* embeddings: this host's and the world's, in the backend's memory */
    float *local = uform_backend_alloc(b, items ? items : 1, d * sizeof(float), "embeddings");
    status = first_row && ids && chosen && masked && media_rows && local ? UFORM_OK : UFORM_OUT_OF_MEMORY;
    float *world = NULL, *d_world = NULL;
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
                    status = uform_mask_patches(t->media[modality].mask_ratio, t->seed, step, item_base + i,
                                                UFORM_STREAM_IMAGE_MASK + modality - UFORM_MODALITY_IMAGE,
                                                kept[i], masked + base, &hidden);
                media_masked[modality] += hidden;
            } else if (uform_has_choices(batch, i)) {  /* the question stays intact, then MASK */
                for (size_t k = 0; k + 1 < kept[i]; k++) ids[base + k] = bytes[k], chosen[base + k] = 0;
                ids[base + kept[i] - 1] = UFORM_MASK_TOKEN;
                chosen[base + kept[i] - 1] = 0;
            } else if (t->masks_text) {
                rep->selected += uform_mask_text(&t->masking, t->seed, step, item_base + i, bytes, kept[i],
                                                 ids + base, chosen + base);
            } else {
                for (size_t k = 0; k < kept[i]; k++) ids[base + k] = bytes[k], chosen[base + k] = 0;
            }
            base += kept[i];
        }
        selected += rep->selected;
    }
    /* The world's counts (the losses' denominators) and its kept items. */
    status = uform_world_agree(wd, status, step);
    if (status == UFORM_OK)
        status = uform_world_summary(wd, index, count, items, rows, selected, media_masked, choice_items);
    size_t world_items = wd->world_items;
    if (status == UFORM_OK) {
        world = uform_backend_alloc(b, 2 * (world_items ? world_items : 1), d * sizeof(float), "world embeddings");
        if (!world) status = UFORM_OUT_OF_MEMORY;
        else d_world = world + (world_items ? world_items : 1) * d;
    }

    uform_edges_storage_t storage[3], world_storage[3];
    memset(storage, 0, sizeof(storage));
    memset(world_storage, 0, sizeof(world_storage));
    uform_relations_t relations, world_relations;
    memset(&relations, 0, sizeof(relations));
    memset(&world_relations, 0, sizeof(world_relations));
    const size_t *candidates = uform_world_candidates(wd, index);
    if (status == UFORM_OK && batch->relations) {
        status = uform_remap_edges(&batch->relations->attract, count, index, candidates, items, &storage[0],
                                   &relations.attract);
        if (status == UFORM_OK)
            status = uform_remap_edges(&batch->relations->repel, count, index, candidates, items,
                                       &storage[1], &relations.repel);
        if (status == UFORM_OK)
            status = uform_remap_edges(&batch->relations->ignore, count, index, candidates, items,
                                       &storage[2], &relations.ignore);
    }
    /* Bags and groups of this host's kept items, then of the world's. */
    bool has_bags = batch->bags != NULL, has_groups = batch->temperature_groups != NULL || wd->mesh;
    uint32_t *bags = NULL, *groups = NULL, *world_bags = NULL, *world_groups = NULL;
    if (status == UFORM_OK && (has_bags || has_groups)) {
        size_t local_words = items ? items : 1, world_words = world_items ? world_items : 1;
        bags = uform_alloc(2 * (local_words + world_words), sizeof(uint32_t), "bags");
        if (!bags) status = UFORM_OUT_OF_MEMORY;
        else {
            groups = bags + local_words;
            world_bags = groups + local_words;
            world_groups = world_bags + world_words;
        }
    }
    for (size_t i = 0; i < count && bags && status == UFORM_OK; i++) {
        if (index[i] == SIZE_MAX) continue;
        bags[index[i]] = has_bags ? batch->bags[i] : 0;
        groups[index[i]] = batch->temperature_groups ? batch->temperature_groups[i] : 0;
    }
    for (size_t r = 0, base = 0; r < replicas && status == UFORM_OK; r++) {
        uform_replica_t *rep = &replica[r];
        status = uform_workspace_init(&rep->w, t, r, rep->rows ? rep->rows : 1,
                                      rep->items ? rep->items : 1, rep->selected);
        if (status != UFORM_OK) break;
        uform_replica_layout(batch, kept, ids, chosen, base, tokens, rep);
        uform_workspace_upload(t, &rep->w);
        base += rep->rows;
        for (size_t m = UFORM_MODALITY_IMAGE; m <= UFORM_MODALITY_AUDIO && status == UFORM_OK; m++)
            if (t->media[m].width)
                status = uform_replica_media(t, batch, rep, kept, first_row, masked, tokens, m,
                                             &media_rows[4 * r + m]);
    }

    /* Forward and the masked loss, replica by replica (denominators: the
     * world's counts); embeddings gathered. */
    if (status == UFORM_OK) b->ops->zero(b, t->gradients, t->count * sizeof(float));
    float contrastive_loss = 0, late_loss = 0;
    /* This host's shares of the world's sums: [0] the masked text loss, [m]
     * the reconstruction of media modality m (IMAGE 1 .. AUDIO 3), [4] choices. */
    double sums[5] = {0, 0, 0, 0, 0};
    double *media_sums = sums, *choices_sum = sums + 4;
    float masked_share = 0;
    for (size_t r = 0; r < replicas && status == UFORM_OK; r++) {
        uform_replica_t *rep = &replica[r];
        uform_workspace_t *w = &rep->w;
        b->ops->zero(b, w->d_states, (rep->rows ? rep->rows : 1) * t->hidden * sizeof(float));
        if (rep->rows) {
            status = uform_forward_train(t, w, &media_rows[4 * r]);
            if (status != UFORM_OK) break;
        }
        if (t->masks_text && rep->selected)
            masked_share += uform_masked_text(t, w, t->masking.text_weight, wd->selected);
        for (size_t m = UFORM_MODALITY_IMAGE; m <= UFORM_MODALITY_AUDIO && status == UFORM_OK; m++) {
            if (!t->media[m].width || !wd->media_masked[m]) continue;
            uform_media_parameters_t parameters = uform_media_parameters(t, m);
            status = uform_media_reconstruction(&t->backend, &parameters, &media_rows[4 * r + m],
                                                t->hidden, w->states,
                                                t->media[m].weight / (float)wd->media_masked[m],
                                                &media_sums[m], w->d_states);
        }
        if (wd->choice_items && status == UFORM_OK)
            status = uform_replica_choices(t, batch, rep, kept, first_row,
                                           t->choices_weight / (float)wd->choice_items, choices_sum);
        if (rep->items) {
            uform_embed(t, w);
            b->ops->copy(b, local + rep->world_first * d, w->embeddings, rep->items * d * sizeof(float));
        }
    }
    status = uform_world_agree(wd, status, step);
    if (status != UFORM_OK) goto done;
    /* The world's rows: embeddings, bags, groups and relations of every host
     * (alone: this host's embeddings, copied on the backend). */
    if (wd->mesh) status = uform_world_gather_item_vectors(wd, local, d * sizeof(float), world);
    else b->ops->copy(b, world, local, items * d * sizeof(float));
    if (status == UFORM_OK && bags)
        status = uform_world_gather_items(wd, bags, sizeof(uint32_t), world_bags);
    if (status == UFORM_OK && groups)
        status = uform_world_gather_items(wd, groups, sizeof(uint32_t), world_groups);
    const uform_relations_t *scored_relations = batch->relations ? &relations : NULL;
    if (status == UFORM_OK && wd->mesh) {
        status = uform_world_gather_relations(wd, &relations, world_storage, &world_relations);
        scored_relations = &world_relations;
    }
    if (status != UFORM_OK) goto done;
    const uint32_t *scored_bags = has_bags ? world_bags : NULL;
    size_t own = wd->kept_base;   /* this host's first item among the world's */
    /* Late interaction over the world's token vectors. */
    if (t->late && world_items) {
        status = uform_late_step(t, batch, replica, replicas, kept, index, first_row, wd,
                                 scored_bags, scored_relations, &late_loss);
        if (status != UFORM_OK) goto done;
    }
    /* The contrastive term over the whole world; gradients go back to their owners. */
    if (t->contrasts && world_items) {
        status = uform_check_diverged(t, world, world_items * d, "the embeddings", step);
        if (status == UFORM_OK)
            status = uform_check_diverged(t, t->parameters + t->log_inverse_temperature,
                                          t->contrastive.groups, "contrastive.log_inverse_temperature", step);
        if (status == UFORM_OK && t->contrastive.pair_loss == UFORM_PAIR_LOSS_SIGMOID)
            status = uform_check_diverged(t, t->parameters + t->contrastive_bias, t->contrastive.groups,
                                          "contrastive.bias", step);
        if (status != UFORM_OK) goto done;
        uform_contrastive_batch_t cb = {world_items, d, world, scored_bags, world_groups, scored_relations};
        b->ops->zero(b, d_world, world_items * d * sizeof(float));
        status = t->backend.ops->contrastive_loss(&t->backend, &t->contrastive, &cb,
                                   t->parameters + t->log_inverse_temperature,
                                   t->parameters + t->contrastive_bias, &contrastive_loss, d_world,
                                   t->gradients + t->log_inverse_temperature,
                                   t->gradients + t->contrastive_bias);
        if (status != UFORM_OK) goto done;
        for (size_t r = 0; r < replicas; r++) {
            uform_replica_t *rep = &replica[r];
            if (!rep->items) continue;
            b->ops->copy(b, rep->w.d_embeddings, d_world + (own + rep->world_first) * d,
                         rep->items * d * sizeof(float));
            uform_embed_backward(t, &rep->w);
        }
    }
    /* Backward per replica, summed into one gradient buffer in replica order:
     * the all-reduce of a data-parallel step; then across hosts, block by
     * block while the last replica's backward runs (gradient_sum.c), every
     * bucket summed before the agreement. */
    bool on_mesh = wd->mesh != NULL;
    if (on_mesh) {
        status = uform_gradient_sum_begin(t, wd);
        if (status != UFORM_OK) goto done;
    }
    size_t last = 0;   /* the last replica with rows: its backward finishes each block */
    for (size_t r = 0; r < replicas; r++)
        if (replica[r].rows) last = r;
    uform_backward_hook_t block_summed = {uform_gradient_sum_block_done, t};
    for (size_t r = 0; r < replicas && status == UFORM_OK; r++) {
        if (!replica[r].rows) continue;
        uform_backward_train(t, &replica[r].w, on_mesh && r == last ? &block_summed : NULL);
        for (size_t m = UFORM_MODALITY_IMAGE; m <= UFORM_MODALITY_AUDIO && status == UFORM_OK; m++) {
            if (!t->media[m].width) continue;
            uform_media_parameters_t parameters = uform_media_parameters(t, m);
            status = uform_media_input_backward(&t->backend, &parameters, &media_rows[4 * r + m],
                                                t->hidden, replica[r].w.d_x);
        }
    }
    if (on_mesh) {   /* every bucket, even after a failure here: the peers sum them all */
        uform_status_t summed = uform_gradient_sum_finish(t, wd);
        if (status == UFORM_OK) status = summed;
    }
    sums[0] = masked_share;
    status = uform_world_agree(wd, status, step);
    if (status == UFORM_OK) status = uform_world_sum_doubles(wd, sums, 5);
    if (status != UFORM_OK) goto done;

    /* The update: AdamW at this step's rate on the clipped gradients (the
     * gradient buffer keeps them unclipped, for inspection). */
    float masked_loss = (float)sums[0];
    float choices_loss = wd->choice_items ? (float)(*choices_sum / (double)wd->choice_items) : 0.0f;
    float weighted_late_loss = t->late_config.weight * late_loss;
    float media_losses[4] = {0, 0, 0, 0};
    for (size_t m = UFORM_MODALITY_IMAGE; m <= UFORM_MODALITY_AUDIO; m++)
        if (wd->media_masked[m]) media_losses[m] = (float)(media_sums[m] / (double)wd->media_masked[m]);
    float loss = t->masking.text_weight * masked_loss + contrastive_loss + weighted_late_loss +
                 (t->chooses ? t->choices_weight * choices_loss : 0.0f);
    for (size_t m = UFORM_MODALITY_IMAGE; m <= UFORM_MODALITY_AUDIO; m++)
        loss += t->media[m].weight * media_losses[m];
    /* The embeddings the loss scored, before the update's checks: a device's
     * failure to read them is found by the synchronize below and agreed, so
     * a step that answers a failure has applied nothing. */
    if (status == UFORM_OK && embeddings_out) {
        status = arena_held ? UFORM_OK : uform_arena_acquire(arena);
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
                        b->ops->download_rows(b, local + index[i] * d, 1, d, outputs_scalar,
                                              out + i * embeddings_out->embedding_row_bytes,
                                              embeddings_out->embedding_row_bytes);
                embeddings_out->embeddings = out;
            }
            if (!arena_held) uform_arena_release(arena);
        }
    }
    double norm;
    float factor = uform_clip_factor(b->ops->sum_squares(b, t->gradients, t->count),
                                     UFORM_CLIP_NORM, &norm);
    float rate = (float)uform_schedule_rate(&t->schedule, step);
    /* A device backend's failure anywhere in the step so far leaves the loss
     * and the norm meaningless: it is reported as itself, not as divergence. */
    uform_status_t synchronized = b->ops->synchronize(b);
    if (status == UFORM_OK) status = synchronized;
    /* A diverged step is refused before it touches the weights: AdamW would
     * spread one NaN into every parameter and moment, and a later save would
     * write a checkpoint no load accepts. */
    if (status == UFORM_OK && (!isfinite(loss) || !isfinite(norm)))
        status = uform_fail(UFORM_DIVERGED,
                            "step %llu: the loss is %g and the gradients' global norm is %g; a "
                            "non-finite step was not applied (weights, moments and the step counter "
                            "are unchanged). The run has diverged: a lower learning rate (%g at this "
                            "step) or a resume from the last good checkpoint may help",
                            (unsigned long long)step, (double)loss, norm, (double)rate);
    size_t overflow = SIZE_MAX;
    if (status == UFORM_OK) {
        overflow = b->ops->adamw_first_non_finite(b, t->parameters, t->gradients, factor, t->first_moment,
                                                  t->second_moment, t->decay, t->count, step, rate);
        status = b->ops->synchronize(b); /* the check's own read-back, as above */
    }
    if (status == UFORM_OK && overflow != SIZE_MAX) {
        const uform_slot_t *slot = uform_slot_at(t, overflow);
        status = uform_fail(UFORM_DIVERGED,
                            "step %llu: at the learning rate %g the update would make \"%s\"[%zu] "
                            "non-finite; the step was not applied (weights, moments and the step "
                            "counter are unchanged). The run has diverged: lower the learning rate",
                            (unsigned long long)step, (double)rate, slot ? slot->name : "?",
                            slot ? overflow - slot->offset : overflow);
    }
    /* On a mesh every host checked the same update (the same sums give the
     * same verdict) unless its device failed: all apply it, or none. */
    status = uform_world_agree(wd, status, step);
    if (status != UFORM_OK) goto done;
    b->ops->adamw(b, t->parameters, t->gradients, factor, t->first_moment, t->second_moment,
                  t->decay, t->count, step, rate);
    /* A device's update is queued: its failure is this step's, not the next
     * call's. Its weights are then unknown while its peers applied the step:
     * it leaves the mesh (uform_world_end), so they learn at their next
     * collective. */
    if (!b->ops->host_memory) status = b->ops->synchronize(b);
    if (status != UFORM_OK) goto done;
    t->step = step;
    t->truncated += truncated;
    t->dropped += dropped;

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
    for (size_t s = 0; s < 3; s++)
        free(world_storage[s].offsets), free(world_storage[s].ids), free(world_storage[s].weights);
    free(replica); /* the workspaces stay with the trainer */
    free(bags);
    uform_world_end(wd, status);   /* first: a host that leaves the mesh tells its peers at once */
    uform_backend_free(b, world);
    uform_backend_free(b, local);
    free(lengths);
    free(first_row);
    free(masked);
    if (media_rows)
        for (size_t k = 0; k < 4 * replicas; k++) uform_media_rows_free(&media_rows[k], b);
    free(media_rows);
    if (!given_tokens) uform_tokens_free(tokens, count);
    free(ids);
    free(chosen);
    return status;
}

uform_status_t uform_trainer_step_tokens(uform_trainer_t *t, const uform_trainer_batch_t *batch,
                                        uform_media_tokens_t *tokens, uform_status_t refused, uform_arena_t *arena,
                                        bool arena_held, uform_scalar_t outputs_scalar,
                                        uform_encoded_t *embeddings_out, uform_trainer_step_stats_t *stats) {
    uform_trainer_hold(t);
    uform_status_t status = uform_trainer_step_body(t, batch, tokens, refused, arena, arena_held, outputs_scalar,
                                                    embeddings_out, stats);
    uform_trainer_unhold(t);
    return status;
}

uform_status_t uform_trainer_step_held(uform_trainer_t *t, const uform_trainer_batch_t *batch,
                                      uform_arena_t *arena, bool arena_held,
                                      uform_scalar_t outputs_scalar, uform_encoded_t *embeddings_out,
                                      uform_trainer_step_stats_t *stats) {
    if (t->group) return uform_group_step(t, batch, arena, arena_held, outputs_scalar, embeddings_out, stats);
    return uform_trainer_step_tokens(t, batch, NULL, UFORM_OK, arena, arena_held, outputs_scalar, embeddings_out,
                                     stats);
}

uform_status_t uform_trainer_step(uform_trainer_t *t, const uform_trainer_batch_t *batch,
                                  uform_arena_t *arena, uform_scalar_t outputs_scalar,
                                  uform_encoded_t *embeddings_out, uform_trainer_step_stats_t *stats) {
    if (!t) return uform_fail(UFORM_INVALID_ARGUMENT, "trainer: NULL");
    UFORM_TRY(uform_trainer_enter(t, "step"));
    uform_status_t status =
        uform_trainer_step_held(t, batch, arena, false, outputs_scalar, embeddings_out, stats);
    uform_trainer_leave(t);
    return status;
}
