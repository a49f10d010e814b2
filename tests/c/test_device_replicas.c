/* test_device_replicas.c: a trainer over several devices of one process
 * (train/replica_group.c: a replica per device, joined by in-process
 * collectives), without a GPU: two guarded backends (guarded_backend.h: memory
 * the host cannot touch, every pointer's side checked) stand for two GPUs.
 *
 * Oracles:
 * - the CPU trainer holding every item in one replica (init_ram), on the same
 *   batches: the two replicas' gradients are summed in replica order where the
 *   CPU trainer accumulates them in one buffer, so results agree to FP32
 *   rounding, not bit for bit (bounds below, with their reasons);
 * - the replicas among themselves: the same update on the same weights, so
 *   every buffer of every replica is equal bit for bit after every step;
 * - the run against itself: a save, then a resume, continues bit for bit.
 * Also: a replica with no items, a refusal naming the caller's item index, a
 * device failure on one GPU answered as itself, and nothing leaking. */
#include "check.h"
#include "guarded_backend.h"
#include "trainer_batches.h"

#include "train/trainer_on_device.h"

#include <math.h>

#define GPUS 2

static const char *const names[] = {"text.bytes", "blocks.0.attention.qkv.weight", "blocks.1.mlp.down.bias",
                                    "norm.weight", "heads.embedding.weight", "contrastive.log_inverse_temperature",
                                    "heads.tokens.weight", "choices.log_temperature", "heads.bytes.bias"};

typedef struct {
    uform_backend_t devices[GPUS];
    guard_t *guards[GPUS];
} gpus_t;

static void gpus_make(gpus_t *g, uform_executor_t *executor) {
    for (size_t d = 0; d < GPUS; d++) {
        g->devices[d] = guarded_backend(UFORM_CPU_CLASS_AUTO, executor);
        g->guards[d] = guard_of(&g->devices[d]);
    }
}

/* After the trainers on them are freed: nothing leaked, no pointer on the wrong side. */
static void gpus_free(gpus_t *g, const char *label) {
    for (size_t d = 0; d < GPUS; d++) {
        CHECK(g->guards[d]->violations == 0, "%s: GPU %zu saw %zu pointers on the wrong side, the first: %s", label,
              d, g->guards[d]->violations, g->guards[d]->violation);
        CHECK(g->guards[d]->allocations == 0, "%s: GPU %zu leaks %zu device buffers", label, d,
              g->guards[d]->allocations);
        CHECK(g->guards[d]->held == 0, "%s: GPU %zu is still held %zu times", label, d, g->guards[d]->held);
        guard_free(g->guards[d]);
    }
}

/* Every replica's buffers equal to replica 0's, bit for bit. */
static bool replicas_equal(const uform_trainer_t *t, size_t named) {
    bool equal = true;
    for (size_t r = 1; r < GPUS; r++)
        equal = equal && same_state(uform_trainer_replica(t, 0), uform_trainer_replica(t, r), names, named);
    return equal;
}

/* The largest |a - b| over the named tensors of buffer `which` (0 weights,
 * 1 gradients), absolute, or relative to each tensor's largest |a|. */
static double tensors_difference(const uform_trainer_t *a, const uform_trainer_t *b, size_t named, uint32_t which,
                                 bool relative) {
    double worst = 0;
    for (size_t n = 0; n < named; n++) {
        size_t count = 0;
        if (uform_trainer_tensor(a, names[n], which, NULL, &count) != UFORM_OK) return INFINITY;
        float *x = malloc(count * sizeof(float)), *y = malloc(count * sizeof(float));
        double largest = 0, difference = 0;
        if (uform_trainer_tensor(a, names[n], which, x, &count) != UFORM_OK ||
            uform_trainer_tensor(b, names[n], which, y, &count) != UFORM_OK)
            difference = INFINITY;
        for (size_t i = 0; i < count && isfinite(difference); i++) {
            largest = fmax(largest, fabs(x[i]));
            difference = fmax(difference, fabs((double)x[i] - y[i]));
        }
        free(x), free(y);
        worst = fmax(worst, relative && largest > 0 ? difference / largest : difference);
    }
    return worst;
}

static uform_trainer_options_t joint_options(uform_contrastive_t *contrastive, uform_late_interaction_t *late,
                                             uform_choices_t *choices, bool terms) {
    static size_t widths[2] = {16, 64};
    memset(contrastive, 0, sizeof(*contrastive));
    contrastive->pair_loss = UFORM_PAIR_LOSS_BALANCED;
    contrastive->temperature_groups = 2;
    contrastive->matryoshka_dimensions = widths;
    contrastive->matryoshka_dimensions_count = 2;
    uform_trainer_options_t options = options_for(UFORM_OBJECTIVE_JOINT, contrastive);
    /* room for every item on one device, so the CPU trainer drops none either */
    options.batch.max_rows_per_device = 8;
    *late = (uform_late_interaction_t){.width = 8, .weight = 0.5f};
    *choices = (uform_choices_t){0.5f, 2};
    if (terms) {
        options.late_interaction = late;
        options.choices = choices;
        options.batch.max_choices_per_item = 4;
    }
    return options;
}

/* Two GPUs against the CPU trainer holding every item, JOINT (bags, groups,
 * Matryoshka), with late interaction and shared choices when `terms`. */
static void test_against_one_replica(uform_executor_t *executor, bool terms, const char *label) {
    uform_contrastive_t contrastive;
    uform_late_interaction_t late;
    uform_choices_t choices;
    uform_trainer_options_t options = joint_options(&contrastive, &late, &choices, terms);
    size_t named = terms ? 9 : 6;
    gpus_t gpus;
    gpus_make(&gpus, executor);
    uform_trainer_t *one = NULL, *two = NULL;
    CHECK(uform_trainer_init_ram(executor, &options, &one) == UFORM_OK, "%s: init_ram %s", label, uform_last_error());
    CHECK(uform_trainer_init_on_devices(executor, &options, gpus.devices, GPUS, &two) == UFORM_OK,
          "%s: init on %d devices: %s", label, GPUS, uform_last_error());
    if (one && two) {
        CHECK(same_state(one, two, names, named) && replicas_equal(two, named),
              "%s: the initial weights differ", label);
        uform_arena_t *arena_one = NULL, *arena_two = NULL;
        uform_arena_init_ram(&arena_one);
        uform_arena_init_ram(&arena_two);
        double worst_loss = 0, worst_embedding = 0, gradients = INFINITY;
        for (unsigned s = 0; s < 3; s++) {
            texts_t texts;
            texts_make(&texts, s);
            uform_trainer_batch_t batch = batch_of(&texts, terms);
            /* with the terms, relations across the GPUs' shares too: item i
             * attracts i + 3 and repels i + 5 (weighted), modulo ITEMS; the
             * last item none */
            static const size_t offsets[ITEMS + 1] = {0, 1, 2, 3, 4, 5, 6, 7, 7};
            static const uint32_t attract[ITEMS - 1] = {3, 4, 5, 6, 7, 0, 1}, repel[ITEMS - 1] = {5, 6, 7, 0, 1, 2, 3};
            static const float weights[ITEMS - 1] = {1.0f, 0.5f, 2.0f, 1.0f, 0.25f, 1.5f, 1.0f};
            uform_relations_t relations = {{offsets, attract, NULL}, {offsets, repel, weights}, {NULL, NULL, NULL}};
            if (terms) batch.relations = &relations;
            uform_encoded_t ea, eb;
            uform_trainer_step_stats_t sa, sb;
            uform_status_t ra = uform_trainer_step(one, &batch, arena_one, UFORM_SCALAR_F32, &ea, &sa);
            uform_status_t rb = uform_trainer_step(two, &batch, arena_two, UFORM_SCALAR_F32, &eb, &sb);
            CHECK(ra == UFORM_OK && rb == UFORM_OK, "%s step %u: %d/%d %s", label, s, ra, rb, uform_last_error());
            if (ra != UFORM_OK || rb != UFORM_OK) break;
            CHECK(sb.step == sa.step && sb.truncated == sa.truncated && sb.dropped == sa.dropped &&
                      sb.learning_rate == sa.learning_rate,
                  "%s step %u: counters differ", label, s);
            double loss = fabs((double)sa.loss - sb.loss) / fabs((double)sa.loss);
            worst_loss = fmax(worst_loss, loss);
            CHECK(!terms || (sb.late_interaction_loss > 0 && sb.choices_loss > 0),
                  "%s step %u: the late-interaction or choices term did not run", label, s);
            CHECK(eb.count == ITEMS && ea.count == ITEMS && eb.embedding_row_bytes == ea.embedding_row_bytes,
                  "%s step %u: %zu embeddings", label, s, eb.count);
            for (size_t i = 0; i < ITEMS * 64 && eb.count == ITEMS; i++)
                worst_embedding = fmax(worst_embedding, fabs((double)((const float *)ea.embeddings)[i] -
                                                             ((const float *)eb.embeddings)[i]));
            CHECK(replicas_equal(two, named), "%s step %u: the replicas differ", label, s);
            if (s == 0) gradients = tensors_difference(one, two, named, 1, true);
        }
        double weights = tensors_difference(one, two, named, 0, false);
        printf("%s: 2 GPUs against one replica: the first step's gradients %.2e (relative), 3 steps' losses %.2e "
               "(relative), embeddings %.2e, weights %.2e\n",
               label, gradients, worst_loss, worst_embedding, weights);
        /* Bounds. The first step runs the same arithmetic on the same weights
         * but sums the two replicas' gradients in another order: FP32 rounding
         * of sums of a few hundred terms, 1e-5 of a tensor's largest gradient
         * (measured 1e-6 or below). Later steps start from weights that differ
         * by that much, so losses and embeddings (unit vectors) stay within 1e-5
         * (100 FP32 epsilons; measured 1e-6). Weights: AdamW normalises each
         * gradient by its own running magnitude, so where a gradient is only
         * rounding noise (key projections, whose gradient sums to zero over a
         * softmax), two noises of different sign move a weight by up to the
         * learning rate each step in opposite directions: the bound is 3 steps
         * of 2 x 3e-3 (measured 2.5e-4, in blocks.0.attention.qkv.weight). */
        CHECK(gradients < 1e-5, "%s: the first step's gradients differ by %.2e of their largest", label, gradients);
        CHECK(worst_loss < 1e-5, "%s: the loss differs by %.2e of itself", label, worst_loss);
        CHECK(worst_embedding < 1e-5, "%s: an embedding differs by %.2e", label, worst_embedding);
        CHECK(weights < 3 * 2 * 3e-3, "%s: a weight differs by %.2e", label, weights);
        uform_arena_free(arena_one);
        uform_arena_free(arena_two);
    }
    uform_trainer_free(two);
    uform_trainer_free(one);
    gpus_free(&gpus, label);
}

/* A run saved after 3 steps and resumed continues as the run that went on:
 * every buffer of every replica equal bit for bit after 2 more steps. */
static void test_save_resume(uform_executor_t *executor) {
    uform_contrastive_t contrastive;
    uform_late_interaction_t late;
    uform_choices_t choices;
    uform_trainer_options_t options = joint_options(&contrastive, &late, &choices, true);
    gpus_t gpus;
    gpus_make(&gpus, executor);
    char path[] = "/tmp/uform-replicas-XXXXXX";
    close(mkstemp(path));
    uform_trainer_t *run = NULL, *resumed = NULL;
    CHECK(uform_trainer_init_on_devices(executor, &options, gpus.devices, GPUS, &run) == UFORM_OK, "save: init %s",
          uform_last_error());
    for (unsigned s = 0; s < 5 && run; s++) {
        if (s == 3) CHECK(uform_trainer_save(run, path, NULL) == UFORM_OK, "save: %s", uform_last_error());
        texts_t texts;
        texts_make(&texts, s);
        uform_trainer_batch_t batch = batch_of(&texts, true);
        CHECK(uform_trainer_step(run, &batch, NULL, UFORM_SCALAR_F32, NULL, NULL) == UFORM_OK, "save: step %u %s", s,
              uform_last_error());
    }
    options.resume = path;
    CHECK(uform_trainer_init_on_devices(executor, &options, gpus.devices, GPUS, &resumed) == UFORM_OK,
          "resume: %s", uform_last_error());
    for (unsigned s = 3; s < 5 && resumed; s++) {
        texts_t texts;
        texts_make(&texts, s);
        uform_trainer_batch_t batch = batch_of(&texts, true);
        uform_trainer_step_stats_t stats;
        CHECK(uform_trainer_step(resumed, &batch, NULL, UFORM_SCALAR_F32, NULL, &stats) == UFORM_OK &&
                  stats.step == s + 1,
              "resume: step %u %s", s, uform_last_error());
    }
    if (run && resumed)
        CHECK(same_state(run, resumed, names, 9) && replicas_equal(resumed, 9),
              "resume: the resumed run differs from the run that went on");
    uform_trainer_free(resumed);
    uform_trainer_free(run);
    unlink(path);
    gpus_free(&gpus, "save and resume");
}

/* Fewer items than GPUs: a replica steps with none; the step is the CPU
 * trainer's on the one item. A refused batch names the caller's item. */
static void test_small_and_refused(uform_executor_t *executor) {
    uform_contrastive_t contrastive;
    uform_late_interaction_t late;
    uform_choices_t choices;
    uform_trainer_options_t options = joint_options(&contrastive, &late, &choices, true);
    gpus_t gpus;
    gpus_make(&gpus, executor);
    uform_trainer_t *one = NULL, *two = NULL;
    CHECK(uform_trainer_init_ram(executor, &options, &one) == UFORM_OK &&
              uform_trainer_init_on_devices(executor, &options, gpus.devices, GPUS, &two) == UFORM_OK,
          "small: init %s", uform_last_error());
    if (one && two) {
        texts_t texts;
        texts_make(&texts, 0);
        uform_trainer_batch_t batch = batch_of(&texts, true);
        batch.contents.count = 1;
        uform_trainer_step_stats_t sa, sb;
        CHECK(uform_trainer_step(one, &batch, NULL, UFORM_SCALAR_F32, NULL, &sa) == UFORM_OK &&
                  uform_trainer_step(two, &batch, NULL, UFORM_SCALAR_F32, NULL, &sb) == UFORM_OK,
              "one item on two GPUs: %s", uform_last_error());
        /* the same arithmetic on the same weights, one replica idle: equal */
        CHECK(sa.loss == sb.loss && sa.masked_text_loss == sb.masked_text_loss,
              "one item on two GPUs: the loss %.9g against the CPU's %.9g", (double)sb.loss, (double)sa.loss);
        CHECK(replicas_equal(two, 9), "one item on two GPUs: the replicas differ");

        batch = batch_of(&texts, true);
        texts.modalities[5] = 9;
        uform_status_t status = uform_trainer_step(two, &batch, NULL, UFORM_SCALAR_F32, NULL, &sb);
        CHECK(status == UFORM_INVALID_ARGUMENT && strstr(uform_last_error(), "modalities[5]"),
              "a bad modality at item 5 is answered as %d: %s", status, uform_last_error());
        texts.modalities[5] = UFORM_MODALITY_TEXT;
        CHECK(uform_trainer_step(two, &batch, NULL, UFORM_SCALAR_F32, NULL, &sb) == UFORM_OK && sb.step == 2,
              "a good step after the refusal: %s", uform_last_error());
    }
    uform_trainer_free(two);
    uform_trainer_free(one);
    gpus_free(&gpus, "small and refused");
}

/* Text and audio items (tokenized once for both GPUs, their masked rows and
 * reconstruction loss on each replica), MASKED and JOINT, against the CPU
 * trainer: the bounds of test_against_one_replica. */
static void test_media(uform_executor_t *executor) {
    if (!(uform_media_formats() & UFORM_MEDIA_AUDIO)) {
        printf("skip the media run: this build decodes no WAV (libsndfile missing)\n");
        return;
    }
    for (int joint = 0; joint < 2; joint++) {
        uform_trainer_options_t options = options_for(joint ? UFORM_OBJECTIVE_JOINT : UFORM_OBJECTIVE_MASKED, NULL);
        options.batch.audio = (uform_audio_shape_t){32, 16000};
        options.batch.max_rows_per_device = 8;
        gpus_t gpus;
        gpus_make(&gpus, executor);
        uform_trainer_t *one = NULL, *two = NULL;
        CHECK(uform_trainer_init_ram(executor, &options, &one) == UFORM_OK &&
                  uform_trainer_init_on_devices(executor, &options, gpus.devices, GPUS, &two) == UFORM_OK,
              "media: init %s", uform_last_error());
        double worst = 0;
        for (unsigned s = 0; s < 3 && one && two; s++) {
            mixed_t items;
            mixed_make(&items, s);
            uform_trainer_batch_t batch = {.modalities = items.modalities, .contents = items.tape};
            uform_trainer_step_stats_t sa, sb;
            uform_status_t ra = uform_trainer_step(one, &batch, NULL, UFORM_SCALAR_F32, NULL, &sa);
            uform_status_t rb = uform_trainer_step(two, &batch, NULL, UFORM_SCALAR_F32, NULL, &sb);
            CHECK(ra == UFORM_OK && rb == UFORM_OK && sb.masked_audio_loss > 0, "media step %u: %d/%d %s", s, ra, rb,
                  uform_last_error());
            worst = fmax(worst, fabs((double)sa.loss - sb.loss) / fabs((double)sa.loss));
            worst = fmax(worst, fabs((double)sa.masked_audio_loss - sb.masked_audio_loss) / sa.masked_audio_loss);
        }
        static const char *const media_names[] = {"audio.chunk.weight", "audio.modality", "audio.mask",
                                                  "heads.audio.weight"};
        if (one && two)
            CHECK(same_state(uform_trainer_replica(two, 0), uform_trainer_replica(two, 1), media_names, 4),
                  "media: the replicas' audio tensors differ");
        printf("text + audio, %s: 2 GPUs against one replica over 3 steps: losses %.2e (relative)\n",
               joint ? "JOINT" : "MASKED", worst);
        CHECK(worst < 1e-5, "media: the losses differ by %.2e of themselves", worst);
        uform_trainer_free(two);
        uform_trainer_free(one);
        gpus_free(&gpus, "media");
    }
}

/* A device failure on GPU 1 mid-step. Before the step's last agreement
 * every replica hears of it and none applies the step: the step answers the
 * failure as itself and the trainer goes on. In the update itself (the last
 * synchronize) GPU 1's weights are unknown while GPU 0 applied the step: the
 * trainer refuses every later step, saying how to go on. Nothing leaks. */
static void test_device_failures(uform_executor_t *executor) {
    uform_trainer_options_t options = options_for(UFORM_OBJECTIVE_MASKED, NULL);
    options.batch.max_rows_per_device = 8;
    gpus_t gpus;
    gpus_make(&gpus, executor);
    uform_trainer_t *t = NULL;
    CHECK(uform_trainer_init_on_devices(executor, &options, gpus.devices, GPUS, &t) == UFORM_OK, "failure: init %s",
          uform_last_error());
    if (t) {
        texts_t texts;
        texts_make(&texts, 1);
        uform_trainer_batch_t batch = batch_of(&texts, false);
        guard_t *second = gpus.guards[1];
        second->synchronizes = 0;
        CHECK(uform_trainer_step(t, &batch, NULL, UFORM_SCALAR_F32, NULL, NULL) == UFORM_OK, "failure: step %s",
              uform_last_error());
        size_t last = second->synchronizes;   /* a step's synchronizes on GPU 1 */
        second->synchronizes = 0;
        second->fail_synchronize_at = 2;
        uform_trainer_step_stats_t stats;
        uform_status_t status = uform_trainer_step(t, &batch, NULL, UFORM_SCALAR_F32, NULL, &stats);
        CHECK(status == UFORM_DEVICE && strstr(uform_last_error(), "injected at synchronize"),
              "GPU 1's failure early in the step is answered as %d: %s", status, uform_last_error());
        status = uform_trainer_step(t, &batch, NULL, UFORM_SCALAR_F32, NULL, &stats);
        CHECK(status == UFORM_OK && stats.step == 2 && replicas_equal(t, 4),
              "after an early failure the next step is step 2 on equal replicas: %d %s", status, uform_last_error());
        second->synchronizes = 0;
        second->fail_synchronize_at = last;
        status = uform_trainer_step(t, &batch, NULL, UFORM_SCALAR_F32, NULL, &stats);
        CHECK(status == UFORM_DEVICE && strstr(uform_last_error(), "injected at synchronize"),
              "GPU 1's failure in the update (synchronize %zu) is answered as %d: %s", last, status,
              uform_last_error());
        status = uform_trainer_step(t, &batch, NULL, UFORM_SCALAR_F32, NULL, &stats);
        CHECK(status == UFORM_MESH && strstr(uform_last_error(), "resume from the last checkpoint"),
              "the step after a failed update is answered as %d: %s", status, uform_last_error());
    }
    uform_trainer_free(t);
    gpus_free(&gpus, "device failures");
}

int main(void) {
    uform_executor_t *executor = NULL;
    if (uform_executor_for_ram(2, NULL, 0, &executor) != UFORM_OK) return 1;
    test_against_one_replica(executor, false, "JOINT");
    test_against_one_replica(executor, true, "JOINT + late interaction + choices");
    test_save_resume(executor);
    test_media(executor);
    test_small_and_refused(executor);
    test_device_failures(executor);
    uform_executor_free(executor);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
