/* trainer_mesh.c: a trainer on a mesh (docs/distributed.md): joining at init,
 * saving once.
 *
 * Every host builds its trainer from its own options (and, on resume, reads
 * the same checkpoint). Before the first step the hosts compare what they
 * built, field by field: a host whose model shape, batch shape, objectives,
 * schedule, seed, step or weights differ from host 0's would silently train
 * another model, so the init fails on every host, naming the field. The
 * weights and moments are compared through a 64-bit FNV-1a digest of their
 * bits. A save is written by host 0 alone (atomically, as always); the others
 * wait for its outcome, so a save that failed fails everywhere. */
#include "train/trainer_internal.h"
#include "train/mesh.h"

typedef struct {
    const char *name;
    uint64_t value;
} uform_field_t;

#define UFORM_TRAINER_FIELDS 33

static uint64_t uform_fnv1a(uint64_t hash, const void *data, size_t bytes) {
    const uint8_t *p = data;
    for (size_t i = 0; i < bytes; i++) hash = (hash ^ p[i]) * 0x100000001b3ull;
    return hash;
}

static uint64_t uform_float_bits(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof(bits));
    return bits;
}

/* What must be equal on every host, named as the options name it; `h` the
 * trainer's state seen from the host. */
static size_t uform_trainer_fields(const uform_trainer_t *t, const uform_host_state_t *h, uform_field_t *f) {
    size_t n = 0;
    uint64_t widths = 0xcbf29ce484222325ull;
    widths = uform_fnv1a(widths, t->contrastive.widths, t->contrastive.widths_count * sizeof(size_t));
    uint64_t state = 0xcbf29ce484222325ull;
    state = uform_fnv1a(state, h->parameters, t->count * sizeof(float));
    state = uform_fnv1a(state, h->first_moment, t->count * sizeof(float));
    state = uform_fnv1a(state, h->second_moment, t->count * sizeof(float));
    f[n++] = (uform_field_t){"the trainer's memory (0: Trainer.init_ram, 1: a GPU's, Trainer.init_vram)",
                             t->backend.ops->host_memory ? 0u : 1u};
    f[n++] = (uform_field_t){"depth", t->depth};
    f[n++] = (uform_field_t){"hidden", t->hidden};
    f[n++] = (uform_field_t){"dimensions (the largest Matryoshka width)", t->dimensions};
    f[n++] = (uform_field_t){"objective", (uint64_t)t->objective};
    f[n++] = (uform_field_t){"batch.max_rows_per_device", t->limits.rows};
    f[n++] = (uform_field_t){"batch.max_columns_per_row", t->limits.columns};
    f[n++] = (uform_field_t){"batch.max_segments_per_device", t->limits.segments};
    f[n++] = (uform_field_t){"batch.max_bags_per_device", t->limits.bags};
    f[n++] = (uform_field_t){"batch.max_choices_per_item", t->max_choices};
    f[n++] = (uform_field_t){"batch.image", t->media[UFORM_MODALITY_IMAGE].width};
    f[n++] = (uform_field_t){"batch.video", t->media[UFORM_MODALITY_VIDEO].width};
    f[n++] = (uform_field_t){"batch.audio", t->media[UFORM_MODALITY_AUDIO].width};
    f[n++] = (uform_field_t){"contrastive.matryoshka_dimensions", widths};
    f[n++] = (uform_field_t){"contrastive.temperature_groups", t->contrastive.groups};
    f[n++] = (uform_field_t){"contrastive.pair_loss", (uint64_t)t->contrastive.pair_loss};
    f[n++] = (uform_field_t){"contrastive.negatives", (uint64_t)t->contrastive.negatives};
    f[n++] = (uform_field_t){"contrastive.ambient_repulsion_weight",
                             uform_float_bits(t->contrastive.ambient_repulsion_weight)};
    f[n++] = (uform_field_t){"masking", uform_fnv1a(0xcbf29ce484222325ull, &t->masking, sizeof(t->masking))};
    f[n++] = (uform_field_t){"late_interaction", t->late ? t->late_config.width : 0};
    f[n++] = (uform_field_t){"late_interaction.weight", t->late ? uform_float_bits(t->late_config.weight) : 0};
    f[n++] = (uform_field_t){"choices", t->chooses ? t->choice_groups : 0};
    f[n++] = (uform_field_t){"choices.weight", t->chooses ? uform_float_bits(t->choices_weight) : 0};
    f[n++] = (uform_field_t){"schedule.learning_rate", uform_float_bits(t->schedule.learning_rate)};
    f[n++] = (uform_field_t){"schedule.min_learning_rate", uform_float_bits(t->schedule.min_learning_rate)};
    f[n++] = (uform_field_t){"schedule.warmup_steps", t->schedule.warmup_steps};
    f[n++] = (uform_field_t){"schedule.steps", t->schedule.steps};
    f[n++] = (uform_field_t){"seed", t->seed};
    f[n++] = (uform_field_t){"the step (a resume from another checkpoint?)", t->step};
    f[n++] = (uform_field_t){"parameters (their count)", t->count};
    f[n++] = (uform_field_t){"the weights and AdamW moments (a resume from another checkpoint?)", state};
    return n;
}

uform_status_t uform_trainer_join_mesh(uform_trainer_t *t, uform_mesh_t *mesh, uform_status_t status) {
    uform_field_t fields[UFORM_TRAINER_FIELDS];
    size_t n = 0;
    if (status == UFORM_OK) {
        uform_host_state_t state;   /* a device trainer's weights and moments: host copies */
        uform_trainer_hold(t);      /* the transfers use its device, as every call does */
        status = uform_host_state_open(t, &state, true);
        if (status == UFORM_OK) n = uform_trainer_fields(t, &state, fields), uform_host_state_close(&state);
        uform_trainer_unhold(t);
    }
    status = uform_mesh_agree(mesh, status, "Trainer init");
    if (status != UFORM_OK) return status;
    uint64_t mine[UFORM_TRAINER_FIELDS];
    for (size_t i = 0; i < n; i++) mine[i] = fields[i].value;
    uint64_t *all = uform_alloc(mesh->hosts, sizeof(mine), "mesh init");
    if (!all) return UFORM_OUT_OF_MEMORY;   /* the peers then time out naming this host */
    status = uform_mesh_allgather(mesh, mine, sizeof(mine), all);
    for (size_t h = 1; h < mesh->hosts && status == UFORM_OK; h++)
        for (size_t i = 0; i < n; i++) {
            uint64_t ours = all[i], theirs = all[h * UFORM_TRAINER_FIELDS + i];
            if (ours == theirs) continue;
            status = uform_fail(UFORM_MESH,
                                "mesh: host %zu's trainer differs from host 0's in %s (%llu against "
                                "%llu): every host must pass the same options (and resume the same "
                                "checkpoint)",
                                h, fields[i].name, (unsigned long long)theirs,
                                (unsigned long long)ours);
            break;
        }
    free(all);
    return status;
}

uform_status_t uform_trainer_save_on_mesh(uform_trainer_t *t, const char *path,
                                          const uform_progress_t *progress) {
    uform_status_t status = t->mesh->host == 0 ? uform_checkpoint_write(t, path, progress) : UFORM_OK;
    return uform_mesh_agree(t->mesh, status, "save");
}
