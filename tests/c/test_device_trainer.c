/* test_device_trainer.c: a trainer on a device whose memory the host cannot
 * touch, without a GPU: the same options on the CPU backend (init_ram) and on
 * the guarded backend (guarded_backend.h, the CPU backend of the same class
 * with unreadable memory and every pointer's side checked), the same batches.
 *
 * The oracle: the two runs execute the same kernels in the same order, so
 * every step's stats and embeddings, every parameter, gradient and moment, and
 * the saved checkpoint's bytes must be equal bit for bit; a resume of that
 * checkpoint on the device continues as the CPU trainer's resume does; with
 * late interaction and choices too (their losses lent from the CPU through
 * the guarded transfers, as the CUDA backend lends them). A backend lacking a
 * term's loss answers UNSUPPORTED naming it. */
#include "check.h"
#include "guarded_backend.h"
#include "trainer_batches.h"

#include "train/trainer_on_device.h"

#include <math.h>

/* Whether the run has late interaction and choices (test_objective sets it):
 * every item then carries the shared choices "abcd", the first one right. */
static bool with_terms;

/* Steps both trainers on the same batches; compares stats and embeddings. */
static void step_both(uform_trainer_t *ram, uform_trainer_t *dev, unsigned first, unsigned steps,
                      const char *label) {
    uform_arena_t *arena_ram = NULL, *arena_dev = NULL;
    uform_arena_init_ram(&arena_ram);
    uform_arena_init_ram(&arena_dev);
    for (unsigned s = first; s < first + steps; s++) {
        texts_t texts;
        texts_make(&texts, s);
        uform_trainer_batch_t batch = batch_of(&texts, with_terms);
        uform_encoded_t ea, eb;
        uform_trainer_step_stats_t sa, sb;
        uform_status_t ra = uform_trainer_step(ram, &batch, arena_ram, UFORM_SCALAR_F32, &ea, &sa);
        uform_status_t rb = uform_trainer_step(dev, &batch, arena_dev, UFORM_SCALAR_F32, &eb, &sb);
        CHECK(ra == UFORM_OK && rb == UFORM_OK, "%s step %u: %d/%d %s", label, s, ra, rb, uform_last_error());
        if (ra != UFORM_OK || rb != UFORM_OK) break;
        CHECK(memcmp(&sa, &sb, sizeof(sa)) == 0 && isfinite(sa.loss),
              "%s step %u: stats differ (loss %.9g against %.9g)", label, s, (double)sa.loss, (double)sb.loss);
        CHECK(ea.count == ITEMS && memcmp(ea.embeddings, eb.embeddings, ITEMS * ea.embedding_row_bytes) == 0,
              "%s step %u: embeddings differ", label, s);
        CHECK(!with_terms || (sb.late_interaction_loss > 0 && sb.choices_loss > 0),
              "%s step %u: the late-interaction and choices terms did not run (%g, %g)", label, s,
              (double)sb.late_interaction_loss, (double)sb.choices_loss);
    }
    uform_arena_free(arena_ram);
    uform_arena_free(arena_dev);
}

static void test_objective(uform_executor_t *executor, uform_objective_t objective, uform_pair_loss_form_t form,
                           bool terms, const char *label) {
    size_t widths[2] = {16, 64};
    uform_contrastive_t contrastive;
    memset(&contrastive, 0, sizeof(contrastive));
    contrastive.pair_loss = form;
    contrastive.temperature_groups = 2;
    contrastive.matryoshka_dimensions = widths;
    contrastive.matryoshka_dimensions_count = 2;
    uform_trainer_options_t options = options_for(objective, &contrastive);
    uform_late_interaction_t late;
    memset(&late, 0, sizeof(late));
    late.width = 8;
    late.weight = 0.5f;
    uform_choices_t choices = {0.5f, 2};
    with_terms = terms;
    if (terms) {
        options.late_interaction = &late;
        options.choices = &choices;
        options.batch.max_choices_per_item = 4;
    }
    uform_backend_t device = guarded_backend(UFORM_CPU_CLASS_AUTO, executor);
    guard_t *guard = guard_of(&device);
    uform_trainer_t *ram = NULL, *dev = NULL;
    CHECK(uform_trainer_init_ram(executor, &options, &ram) == UFORM_OK, "%s: init_ram %s", label, uform_last_error());
    CHECK(uform_trainer_init_on_device(executor, &options, &device, &dev) == UFORM_OK, "%s: init on device %s",
          label, uform_last_error());
    if (!ram || !dev) {
        uform_trainer_free(ram);
        uform_trainer_free(dev);
        guard_free(guard);
        return;
    }
    static const char *const names[] = {"text.bytes", "blocks.0.attention.qkv.weight", "blocks.1.mlp.down.bias",
                                        "norm.weight", "heads.embedding.weight", "heads.tokens.weight",
                                        "choices.log_temperature", "heads.bytes.bias"};
    size_t named = terms ? 8 : 5;
    CHECK(same_state(ram, dev, names, named), "%s: initial state differs", label);
    step_both(ram, dev, 0, 3, label);
    CHECK(same_state(ram, dev, names, named), "%s: state after 3 steps differs", label);

    char path_ram[] = "/tmp/uform-device-trainer-ram-XXXXXX", path_dev[] = "/tmp/uform-device-trainer-dev-XXXXXX";
    close(mkstemp(path_ram));
    close(mkstemp(path_dev));
    CHECK(uform_trainer_save(ram, path_ram, NULL) == UFORM_OK && uform_trainer_save(dev, path_dev, NULL) == UFORM_OK,
          "%s: save %s", label, uform_last_error());
    CHECK(same_file(path_ram, path_dev), "%s: the saved checkpoints differ", label);
    uform_trainer_free(dev);
    uform_trainer_free(ram);

    /* resume both from the CPU trainer's checkpoint: they go on together */
    options.resume = path_ram;
    ram = dev = NULL;
    CHECK(uform_trainer_init_ram(executor, &options, &ram) == UFORM_OK &&
              uform_trainer_init_on_device(executor, &options, &device, &dev) == UFORM_OK,
          "%s: resume %s", label, uform_last_error());
    if (ram && dev) {
        CHECK(same_state(ram, dev, names, named), "%s: resumed state differs", label);
        step_both(ram, dev, 3, 2, label);
        CHECK(same_state(ram, dev, names, named), "%s: state after the resumed steps differs", label);
    }
    uform_trainer_free(dev);
    uform_trainer_free(ram);
    unlink(path_ram);
    unlink(path_dev);
    CHECK(guard->violations == 0, "%s: %zu pointers on the wrong side, the first: %s", label, guard->violations,
          guard->violation);
    CHECK(guard->allocations == 0, "%s: the device trainer leaks %zu device buffers", label, guard->allocations);
    CHECK(guard->held == 0 && guard->acquisitions >= 20, "%s: the backend is held %zu times after %zu holds", label,
          guard->held, guard->acquisitions);
    guard_free(guard);
}

/* ---- media items ---- */

/* Text and audio items (masked audio rows, their reconstruction loss lent
 * from the CPU) on both trainers, MASKED and JOINT: equal bit for bit. */
static void test_media(uform_executor_t *executor) {
    if (!(uform_media_formats() & UFORM_MEDIA_AUDIO)) {
        printf("skip the media run: this build decodes no WAV (libsndfile missing)\n");
        return;
    }
    for (int joint = 0; joint < 2; joint++) {
        uform_trainer_options_t options = options_for(joint ? UFORM_OBJECTIVE_JOINT : UFORM_OBJECTIVE_MASKED, NULL);
        options.batch.audio = (uform_audio_shape_t){32, 16000};
        uform_backend_t device = guarded_backend(UFORM_CPU_CLASS_AUTO, executor);
        guard_t *guard = guard_of(&device);
        uform_trainer_t *ram = NULL, *dev = NULL;
        CHECK(uform_trainer_init_ram(executor, &options, &ram) == UFORM_OK &&
                  uform_trainer_init_on_device(executor, &options, &device, &dev) == UFORM_OK,
              "media: init %s", uform_last_error());
        for (unsigned s = 0; s < 3 && ram && dev; s++) {
            mixed_t items;
            mixed_make(&items, s);
            uform_trainer_batch_t batch = {.modalities = items.modalities, .contents = items.tape};
            uform_trainer_step_stats_t sa, sb;
            uform_status_t ra = uform_trainer_step(ram, &batch, NULL, UFORM_SCALAR_F32, NULL, &sa);
            uform_status_t rb = uform_trainer_step(dev, &batch, NULL, UFORM_SCALAR_F32, NULL, &sb);
            CHECK(ra == UFORM_OK && rb == UFORM_OK, "media step %u: %d/%d %s", s, ra, rb, uform_last_error());
            CHECK(memcmp(&sa, &sb, sizeof(sa)) == 0 && sb.masked_audio_loss > 0,
                  "media step %u: stats differ or no audio loss (%g against %g)", s, (double)sa.masked_audio_loss,
                  (double)sb.masked_audio_loss);
        }
        static const char *const names[] = {"audio.chunk.weight", "audio.modality", "audio.mask",
                                            "heads.audio.weight", "blocks.0.attention.qkv.weight"};
        if (ram && dev) CHECK(same_state(ram, dev, names, 5), "media: state after 3 steps differs");
        uform_trainer_free(dev);
        uform_trainer_free(ram);
        CHECK(guard->violations == 0, "media: %zu pointers on the wrong side, the first: %s", guard->violations,
              guard->violation);
        CHECK(guard->allocations == 0, "media: the device trainer leaks %zu device buffers", guard->allocations);
        guard_free(guard);
    }
}

/* A backend without a term's loss: the trainer says so, and nothing leaks. */
static void test_refusals(uform_executor_t *executor) {
    uform_backend_t device = guarded_backend(UFORM_CPU_CLASS_AUTO, executor);
    guard_t *guard = guard_of(&device);
    uform_backend_ops_t without = guarded_ops;
    without.choices_loss = NULL;
    device.ops = &without;
    uform_trainer_options_t options = options_for(UFORM_OBJECTIVE_MASKED, NULL);
    uform_choices_t choices = {0.5f, 1};
    options.choices = &choices;
    uform_trainer_t *t = NULL;
    uform_status_t status = uform_trainer_init_on_device(executor, &options, &device, &t);
    CHECK(status == UFORM_UNSUPPORTED && t == NULL && strstr(uform_last_error(), "choices loss"),
          "choices without the loss: %d %s", status, uform_last_error());
    CHECK(guard->allocations == 0, "a refused init leaks %zu device buffers", guard->allocations);
    guard_free(guard);
}

/* A step whose activations outgrow the kept block asks for 1/8 more than it
 * needs (train/workspace.c); when only the exact size fits, the step succeeds
 * and the failed headroom leaves no message behind. */
static void test_headroom_refused(uform_executor_t *executor) {
    uform_backend_t device = guarded_backend(UFORM_CPU_CLASS_AUTO, executor);
    guard_t *guard = guard_of(&device);
    uform_trainer_options_t options = options_for(UFORM_OBJECTIVE_MASKED, NULL);
    uform_trainer_t *t = NULL;
    CHECK(uform_trainer_init_on_device(executor, &options, &device, &t) == UFORM_OK, "init: %s", uform_last_error());
    if (t) {
        texts_t texts;
        texts_make(&texts, 0);
        uform_trainer_batch_t batch = batch_of(&texts, false);
        batch.contents.count = 1;   /* a small first step: one text */
        uform_trainer_step_stats_t stats;
        CHECK(uform_trainer_step(t, &batch, NULL, UFORM_SCALAR_F32, NULL, &stats) == UFORM_OK, "small step: %s",
              uform_last_error());
        guard->refuse_once_above = guard->largest;   /* the grown block's headroom, then not again */
        uform_set_error_text("");
        batch = batch_of(&texts, false);
        uform_status_t status = uform_trainer_step(t, &batch, NULL, UFORM_SCALAR_F32, NULL, &stats);
        CHECK(status == UFORM_OK && guard->refused == 1, "the full step with its headroom refused: %d, %zu refused, %s",
              status, guard->refused, uform_last_error());
        CHECK(uform_last_error()[0] == 0, "the refused headroom's message stayed: %s", uform_last_error());
    }
    uform_trainer_free(t);
    CHECK(guard->allocations == 0, "headroom: %zu device buffers leak", guard->allocations);
    guard_free(guard);
}

/* A device failure is the step's own failure wherever it surfaces: each
 * synchronize of a step in turn answers one (as a kernel that failed before
 * it), and the step must report it as itself (not as a diverged loss, not a
 * call later), with late interaction and choices lent from the CPU too. */
static void test_device_failures(uform_executor_t *executor, bool terms) {
    uform_late_interaction_t late = {.width = 8, .weight = 0.5f};
    uform_choices_t choices = {0.5f, 2};
    uform_contrastive_t contrastive;
    memset(&contrastive, 0, sizeof(contrastive));
    contrastive.temperature_groups = 2;
    /* MASKED: the masked text loss read back; JOINT with the terms: the lent losses */
    uform_trainer_options_t options = options_for(terms ? UFORM_OBJECTIVE_JOINT : UFORM_OBJECTIVE_MASKED,
                                                  &contrastive);
    if (terms) {
        options.late_interaction = &late;
        options.choices = &choices;
        options.batch.max_choices_per_item = 4;
    }
    size_t reached = 0;
    for (size_t at = 1;; at++) {
        uform_backend_t device = guarded_backend(UFORM_CPU_CLASS_AUTO, executor);
        guard_t *guard = guard_of(&device);
        uform_trainer_t *t = NULL;
        bool made = uform_trainer_init_on_device(executor, &options, &device, &t) == UFORM_OK;
        CHECK(made, "init: %s", uform_last_error());
        bool done = !made;
        if (made) {
            texts_t texts;
            texts_make(&texts, 1);
            uform_trainer_batch_t batch = batch_of(&texts, terms);
            uform_trainer_step_stats_t stats;
            guard->synchronizes = 0;
            guard->fail_synchronize_at = at;
            uform_status_t status = uform_trainer_step(t, &batch, NULL, UFORM_SCALAR_F32, NULL, &stats);
            if (guard->synchronizes < at) {   /* past the step's last synchronize: it ran whole */
                CHECK(status == UFORM_OK, "the step without a failure: %s", uform_last_error());
                done = true;
            } else {
                reached = at;
                CHECK(status == UFORM_DEVICE && strstr(uform_last_error(), "injected at synchronize"),
                      "a device failure at synchronize %zu of the step is answered as %d: %s", at, status,
                      uform_last_error());
            }
        }
        uform_trainer_free(t);
        CHECK(guard->allocations == 0, "synchronize %zu: %zu device buffers leak", at, guard->allocations);
        guard_free(guard);
        if (done || at > 400) break;
    }
    CHECK(reached >= 3, "a step synchronizes %zu times: the injection reached too few", reached);
    printf("%s: a device failure at each of a step's %zu synchronizes is the step's failure\n",
           terms ? "JOINT + late interaction + choices" : "MASKED", reached);
}

int main(void) {
    uform_executor_t *executor = NULL;
    if (uform_executor_for_ram(2, NULL, 0, &executor) != UFORM_OK) return 1;
    test_objective(executor, UFORM_OBJECTIVE_MASKED, UFORM_PAIR_LOSS_DERIVED, false, "MASKED");
    test_objective(executor, UFORM_OBJECTIVE_CONTRASTIVE, UFORM_PAIR_LOSS_BALANCED, false, "CONTRASTIVE balanced");
    test_objective(executor, UFORM_OBJECTIVE_CONTRASTIVE, UFORM_PAIR_LOSS_SIGMOID, false, "CONTRASTIVE sigmoid");
    test_objective(executor, UFORM_OBJECTIVE_JOINT, UFORM_PAIR_LOSS_RANKED, false, "JOINT ranked");
    test_objective(executor, UFORM_OBJECTIVE_JOINT, UFORM_PAIR_LOSS_BALANCED, true, "JOINT + late interaction + choices");
    test_media(executor);
    test_refusals(executor);
    test_headroom_refused(executor);
    test_device_failures(executor, false);
    test_device_failures(executor, true);
    uform_executor_free(executor);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
