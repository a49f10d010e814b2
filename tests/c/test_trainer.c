/* test_trainer.c: the CPU trainer through the public API, under ASan/UBSan.
 *
 * The math is checked against PyTorch in tests/test_training_reference.py; this
 * program checks memory safety and the contracts of the C API: every objective and
 * relation path runs without leaks or overreads (every buffer handed over is a heap
 * block of exactly its size), replicas, packing limits, save/resume, and bad input
 * that must change nothing. The last line is "N passed, M failed". */
#include "uform.h"
#include "core/safetensors.h" /* internal: to patch saved tensors in place */

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int failures_in_test, passed, failed;

#define CHECK(condition)                                                                       \
    do {                                                                                       \
        if (!(condition)) {                                                                    \
            fprintf(stderr, "%s:%d: %s (last error: %s)\n", __FILE__, __LINE__, #condition,     \
                    uform_last_error());                                                       \
            failures_in_test++;                                                                \
        }                                                                                      \
    } while (0)

#define ITEMS 8

/* A tape of ITEMS texts in one exact-size heap block, offsets in another. */
typedef struct {
    char *data;
    size_t *offsets;
    uform_tape_t tape;
    uint32_t *modalities, *bags, *groups;
} texts_t;

static void texts_make(texts_t *t, unsigned seed, size_t longest) {
    size_t lengths[ITEMS], total = 0;
    for (size_t i = 0; i < ITEMS; i++) {
        lengths[i] = 1 + (seed * 31 + i * 17) % longest;
        total += lengths[i];
    }
    t->data = malloc(total);
    t->offsets = malloc((ITEMS + 1) * sizeof(size_t));
    t->modalities = malloc(ITEMS * sizeof(uint32_t));
    t->bags = malloc(ITEMS * sizeof(uint32_t));
    t->groups = malloc(ITEMS * sizeof(uint32_t));
    t->offsets[0] = 0;
    for (size_t i = 0; i < ITEMS; i++) {
        for (size_t k = 0; k < lengths[i]; k++) t->data[t->offsets[i] + k] = (char)('a' + (seed + i * 7 + k * 3) % 26);
        t->offsets[i + 1] = t->offsets[i] + lengths[i];
        t->modalities[i] = UFORM_MODALITY_TEXT;
        t->bags[i] = (uint32_t)(i / 2);
        t->groups[i] = (uint32_t)(i % 2);
    }
    t->tape = (uform_tape_t){t->data, total, t->offsets, ITEMS};
}

static void texts_free(texts_t *t) {
    free(t->data), free(t->offsets), free(t->modalities), free(t->bags), free(t->groups);
}

static uform_trainer_options_t options_for(uform_objective_t objective, uform_contrastive_t *contrastive,
                                           size_t columns) {
    uform_trainer_options_t options;
    memset(&options, 0, sizeof(options));
    options.depth = 2;
    options.hidden = 64;
    options.objective = objective;
    options.contrastive = contrastive;
    options.batch.max_rows_per_device = 8;
    options.batch.max_columns_per_row = columns;
    options.schedule.learning_rate = 3e-3f;
    options.schedule.steps = 50;
    options.seed = 5;
    return options;
}

static void test_every_objective_and_form(void) {
    uform_executor_t *executor = NULL;
    CHECK(uform_executor_for_ram(2, NULL, 0, &executor) == UFORM_OK);
    /* relations as exact heap blocks */
    size_t *offsets = malloc((ITEMS + 1) * sizeof(size_t));
    uint32_t *ids = malloc(2 * sizeof(uint32_t));
    float *weights = malloc(2 * sizeof(float));
    for (size_t i = 0; i <= ITEMS; i++) offsets[i] = i < 2 ? 0 : (i < 4 ? i - 1 : 2);
    ids[0] = 5, ids[1] = 0, weights[0] = 0.5f, weights[1] = 2.0f;
    uform_relations_t relations;
    memset(&relations, 0, sizeof(relations));
    relations.attract = (uform_edges_t){offsets, ids, weights};
    relations.ignore = (uform_edges_t){offsets, ids, NULL};
    size_t widths[2] = {16, 64};
    for (int objective = 0; objective <= 2; objective++)
        for (int form = 1; form <= 3; form++) {
            uform_contrastive_t contrastive;
            memset(&contrastive, 0, sizeof(contrastive));
            contrastive.pair_loss = (uform_pair_loss_form_t)form;
            contrastive.temperature_groups = 2;
            contrastive.matryoshka_dimensions = widths;
            contrastive.matryoshka_dimensions_count = 2;
            contrastive.negatives = form == 2 ? UFORM_NEGATIVES_NAMED : UFORM_NEGATIVES_AMBIENT;
            uform_trainer_options_t options = options_for((uform_objective_t)objective, &contrastive, 32);
            uform_trainer_t *trainer = NULL;
            CHECK(uform_trainer_init_ram(executor, &options, &trainer) == UFORM_OK);
            if (!trainer) continue;
            uform_arena_t *arena = NULL;
            CHECK(uform_arena_init_ram(&arena) == UFORM_OK);
            for (unsigned step = 0; step < 3; step++) {
                texts_t texts;
                texts_make(&texts, step + 10 * (unsigned)form, 48);
                uform_trainer_batch_t batch = {.modalities = texts.modalities, .contents = texts.tape,
                                               .bags = texts.bags, .temperature_groups = texts.groups,
                                               .relations = &relations};
                uform_encoded_t embeddings;
                uform_trainer_step_stats_t stats;
                CHECK(uform_trainer_step(trainer, &batch, arena, UFORM_SCALAR_BF16, &embeddings, &stats) ==
                      UFORM_OK);
                CHECK(stats.step == step + 1 && isfinite(stats.loss));
                CHECK(embeddings.count == ITEMS && embeddings.embedding_row_bytes == 2 * 64);
                texts_free(&texts);
            }
            uform_arena_free(arena);
            uform_trainer_free(trainer);
        }
    free(offsets), free(ids), free(weights);
    uform_executor_free(executor);
}

/* One step with choices; the gradients of the byte table, the byte bias and
 * the temperature into out (three exact heap blocks of the run's sizes). */
static void choices_step(const uform_tape_t *choices, const float *targets, float *out[3],
                         uform_status_t *status) {
    uform_executor_t *executor = NULL;
    CHECK(uform_executor_for_ram(1, NULL, 0, &executor) == UFORM_OK);
    uform_choices_t configuration = {0.0f, 0};
    uform_trainer_options_t options = options_for(UFORM_OBJECTIVE_MASKED, NULL, 32);
    options.choices = &configuration;
    options.batch.max_choices_per_item = 4;
    uform_trainer_t *trainer = NULL;
    CHECK(uform_trainer_init_ram(executor, &options, &trainer) == UFORM_OK);
    texts_t texts;
    texts_make(&texts, 3, 20);
    uform_trainer_batch_t batch = {.modalities = texts.modalities, .contents = texts.tape,
                                   .choices = *choices, .choice_targets = targets};
    uform_arena_t *arena = NULL;
    CHECK(uform_arena_init_ram(&arena) == UFORM_OK);
    uform_encoded_t embeddings;
    uform_trainer_step_stats_t stats;
    *status = trainer ? uform_trainer_step(trainer, &batch, arena, UFORM_SCALAR_F32, &embeddings, &stats)
                      : UFORM_INVALID_ARGUMENT;
    static const char *names[3] = {"text.bytes", "heads.bytes.bias", "choices.log_temperature"};
    for (size_t n = 0; n < 3 && trainer && *status == UFORM_OK; n++) {
        size_t count = 0;
        CHECK(uform_trainer_tensor(trainer, names[n], 1, NULL, &count) == UFORM_OK);
        out[n] = malloc(count * sizeof(float));
        CHECK(uform_trainer_tensor(trainer, names[n], 1, out[n], &count) == UFORM_OK);
    }
    uform_arena_free(arena);
    uform_trainer_free(trainer);
    texts_free(&texts);
    uform_executor_free(executor);
}

/* Choices as text_choose takes them, one entry shared by every item, equal
 * the entry repeated per item bit for bit; the single entry is an exact heap
 * block, so a read of entry i > 0 is caught by ASan. */
static void test_shared_choices(void) {
    static const char entry[4] = {'A', 'B', 'C', 'D'};
    char *repeated = malloc(4 * ITEMS), *one = malloc(4);
    size_t *repeated_offsets = malloc((ITEMS + 1) * sizeof(size_t)), *one_offsets = malloc(2 * sizeof(size_t));
    float *targets = malloc(4 * ITEMS * sizeof(float));
    for (size_t i = 0; i <= ITEMS; i++) repeated_offsets[i] = 4 * i;
    for (size_t i = 0; i < ITEMS; i++) memcpy(repeated + 4 * i, entry, 4);
    for (size_t i = 0; i < 4 * ITEMS; i++) targets[i] = (float)(1 + (i * 7) % 5);
    memcpy(one, entry, 4);
    one_offsets[0] = 0, one_offsets[1] = 4;
    uform_tape_t per_item = {repeated, 4 * ITEMS, repeated_offsets, ITEMS}, shared = {one, 4, one_offsets, 1};
    float *a[3] = {NULL, NULL, NULL}, *b[3] = {NULL, NULL, NULL};
    uform_status_t status_a, status_b;
    choices_step(&per_item, targets, a, &status_a);
    choices_step(&shared, targets, b, &status_b);
    CHECK(status_a == UFORM_OK && status_b == UFORM_OK);
    size_t sizes[3] = {(256 + 1) * 64, 256, 1};
    for (size_t n = 0; n < 3 && a[n] && b[n]; n++) {
        CHECK(memcmp(a[n], b[n], sizes[n] * sizeof(float)) == 0);
        bool moved = false;
        for (size_t i = 0; i < sizes[n]; i++) moved |= a[n][i] != 0.0f;
        CHECK(moved); /* the choices term reached every one of them */
    }
    for (size_t n = 0; n < 3; n++) free(a[n]), free(b[n]);
    /* two entries for eight items is neither form */
    uform_tape_t two = {repeated, 8, repeated_offsets, 2};
    float *c[3] = {NULL, NULL, NULL};
    uform_status_t status_c;
    choices_step(&two, targets, c, &status_c);
    CHECK(status_c == UFORM_INVALID_ARGUMENT && strstr(uform_last_error(), "2 entries for 8 items"));
    free(repeated), free(one), free(repeated_offsets), free(one_offsets), free(targets);
}

typedef struct {
    size_t calls, last_done, total, cancel_at;
    bool ordered;
} resume_reports_t;

static int count_resume_reports(void *user, size_t done, size_t total) {
    resume_reports_t *r = user;
    r->ordered &= r->calls == 0 || (done > r->last_done && total == r->total);
    r->calls++, r->last_done = done, r->total = total;
    return r->cancel_at && r->calls >= r->cancel_at;
}

/* Resuming reports the state read, at most `steps` times, the last with done
 * == total; a handler that asks to stop fails the init with UFORM_CANCELLED and
 * no trainer (ASan: nothing leaks). */
static void test_resume_progress(void) {
    uform_executor_t *executor = NULL;
    CHECK(uform_executor_for_ram(1, NULL, 0, &executor) == UFORM_OK);
    uform_trainer_options_t options = options_for(UFORM_OBJECTIVE_MASKED, NULL, 32);
    uform_trainer_t *trainer = NULL;
    CHECK(uform_trainer_init_ram(executor, &options, &trainer) == UFORM_OK);
    char path[] = "/tmp/uform-test-resume-progress-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    CHECK(trainer && uform_trainer_save(trainer, path, NULL) == UFORM_OK);
    uform_trainer_free(trainer);
    resume_reports_t reports = {0, 0, 0, 0, true};
    options.resume = path;
    options.progress = (uform_progress_t){count_resume_reports, &reports, 5};
    trainer = NULL;
    CHECK(uform_trainer_init_ram(executor, &options, &trainer) == UFORM_OK && trainer);
    CHECK(reports.calls >= 1 && reports.calls <= 5 && reports.ordered);
    CHECK(reports.last_done == reports.total && reports.total > 0);
    uform_trainer_free(trainer);
    resume_reports_t cancelling = {0, 0, 0, 2, true};
    options.progress = (uform_progress_t){count_resume_reports, &cancelling, 5};
    trainer = (uform_trainer_t *)&trainer;
    CHECK(uform_trainer_init_ram(executor, &options, &trainer) == UFORM_CANCELLED);
    CHECK(trainer == NULL && cancelling.calls == 2);
    unlink(path);
    uform_executor_free(executor);
}

/* A save whose progress handler holds the submission thread until released. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    bool entered, released;
} gate_t;

static int hold_at_gate(void *user, size_t done, size_t total) {
    (void)done, (void)total;
    gate_t *gate = user;
    pthread_mutex_lock(&gate->lock);
    gate->entered = true;
    pthread_cond_broadcast(&gate->changed);
    while (!gate->released) pthread_cond_wait(&gate->changed, &gate->lock);
    pthread_mutex_unlock(&gate->lock);
    return 0;
}

/* Trainer.deferred's C half (uform_trainer_step_submit, _save_submit): a
 * submitted step equals the blocking one bit for bit; while a submitted call
 * holds the trainer, another step, save or tensor read is refused at once; a
 * bad batch is the job's error and gives the trainer back; a submitted save
 * writes the checkpoint a blocking save writes. */
static void test_submitted_steps_and_saves(void) {
    uform_executor_t *executor = NULL, *queue = NULL;
    CHECK(uform_executor_for_ram(2, NULL, 0, &executor) == UFORM_OK);
    CHECK(uform_executor_for_ram(1, NULL, 0, &queue) == UFORM_OK);
    uform_trainer_options_t options = options_for(UFORM_OBJECTIVE_MASKED, NULL, 32);
    uform_trainer_t *blocking = NULL, *submitted = NULL;
    CHECK(uform_trainer_init_ram(executor, &options, &blocking) == UFORM_OK);
    CHECK(uform_trainer_init_ram(executor, &options, &submitted) == UFORM_OK);
    uform_arena_t *arena_a = NULL, *arena_b = NULL;
    CHECK(uform_arena_init_ram(&arena_a) == UFORM_OK && uform_arena_init_ram(&arena_b) == UFORM_OK);
    if (!blocking || !submitted || !arena_a || !arena_b) return;
    texts_t texts;
    texts_make(&texts, 4, 30);
    uform_trainer_batch_t batch = {.modalities = texts.modalities, .contents = texts.tape};
    uform_encoded_t embeddings_a, embeddings_b;
    uform_trainer_step_stats_t stats_a, stats_b;
    for (int step = 0; step < 2; step++) {
        CHECK(uform_trainer_step(blocking, &batch, arena_a, UFORM_SCALAR_F32, &embeddings_a, &stats_a) ==
              UFORM_OK);
        uform_job_t *job = NULL;
        CHECK(uform_trainer_step_submit(submitted, queue, &batch, arena_b, UFORM_SCALAR_F32, &embeddings_b,
                                        &stats_b, &job) == UFORM_OK);
        CHECK(uform_job_wait(job) == UFORM_OK);
        uform_job_free(job);
        CHECK(stats_a.step == stats_b.step && stats_a.loss == stats_b.loss);
        CHECK(embeddings_b.count == ITEMS &&
              memcmp(embeddings_a.embeddings, embeddings_b.embeddings, ITEMS * embeddings_a.embedding_row_bytes) == 0);
    }
    size_t count = 0;
    CHECK(uform_trainer_tensor(blocking, "norm.weight", 0, NULL, &count) == UFORM_OK);
    float *a = malloc(count * sizeof(float)), *b = malloc(count * sizeof(float));
    CHECK(uform_trainer_tensor(blocking, "norm.weight", 0, a, &count) == UFORM_OK);
    CHECK(uform_trainer_tensor(submitted, "norm.weight", 0, b, &count) == UFORM_OK);
    CHECK(memcmp(a, b, count * sizeof(float)) == 0);

    /* a save held at its first progress report: the trainer is taken meanwhile */
    char path[] = "/tmp/uform-test-submitted-save-XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    gate_t gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, false};
    uform_progress_t held = {hold_at_gate, &gate, 1};
    uform_job_t *save = NULL, *refused = (uform_job_t *)&save;
    CHECK(uform_trainer_save_submit(submitted, queue, path, &held, &save) == UFORM_OK);
    pthread_mutex_lock(&gate.lock);
    while (!gate.entered) pthread_cond_wait(&gate.changed, &gate.lock);
    pthread_mutex_unlock(&gate.lock);
    CHECK(uform_trainer_step_submit(submitted, queue, &batch, arena_b, UFORM_SCALAR_F32, &embeddings_b,
                                    &stats_b, &refused) == UFORM_INVALID_ARGUMENT);
    CHECK(refused == NULL && strstr(uform_last_error(), "in use by another call"));
    CHECK(uform_trainer_step(submitted, &batch, arena_b, UFORM_SCALAR_F32, NULL, NULL) == UFORM_INVALID_ARGUMENT);
    CHECK(uform_trainer_tensor(submitted, "norm.weight", 0, b, &count) == UFORM_INVALID_ARGUMENT);
    uform_job_t *second_save = NULL;
    CHECK(uform_trainer_save_submit(submitted, queue, path, NULL, &second_save) == UFORM_INVALID_ARGUMENT);
    pthread_mutex_lock(&gate.lock);
    gate.released = true;
    pthread_cond_broadcast(&gate.changed);
    pthread_mutex_unlock(&gate.lock);
    CHECK(uform_job_wait(save) == UFORM_OK);
    uform_job_free(save);
    /* the saved run resumes to the submitted trainer's state */
    uform_trainer_options_t again = options;
    again.resume = path;
    uform_trainer_t *resumed = NULL;
    CHECK(uform_trainer_init_ram(executor, &again, &resumed) == UFORM_OK);
    if (resumed) {
        CHECK(uform_trainer_tensor(resumed, "norm.weight", 0, b, &count) == UFORM_OK);
        CHECK(memcmp(a, b, count * sizeof(float)) == 0);
        uform_trainer_free(resumed);
    }
    unlink(path);

    /* a bad batch fails in the job and gives the trainer back */
    uform_trainer_batch_t bad = batch;
    bad.modalities = NULL;
    uform_job_t *job = NULL;
    CHECK(uform_trainer_step_submit(submitted, queue, &bad, arena_b, UFORM_SCALAR_F32, &embeddings_b, &stats_b,
                                    &job) == UFORM_OK);
    CHECK(uform_job_wait(job) == UFORM_INVALID_ARGUMENT);
    uform_job_free(job);
    CHECK(uform_trainer_step(submitted, &batch, arena_b, UFORM_SCALAR_F32, NULL, NULL) == UFORM_OK);
    /* NULLs are refused at submission */
    CHECK(uform_trainer_step_submit(submitted, queue, NULL, arena_b, UFORM_SCALAR_F32, NULL, NULL, &job) ==
          UFORM_INVALID_ARGUMENT && job == NULL);
    CHECK(uform_trainer_save_submit(submitted, NULL, path, NULL, &job) == UFORM_INVALID_ARGUMENT);
    free(a), free(b);
    texts_free(&texts);
    uform_arena_free(arena_a), uform_arena_free(arena_b);
    uform_trainer_free(blocking), uform_trainer_free(submitted);
    uform_executor_free(queue), uform_executor_free(executor);
}

static void test_replicas_save_and_resume(void) {
    uint32_t domains[2] = {0, 1};
    uform_executor_t *executor = NULL;
    CHECK(uform_executor_for_ram(2, domains, 2, &executor) == UFORM_OK);
    uform_trainer_options_t options = options_for(UFORM_OBJECTIVE_JOINT, NULL, 16);
    uform_trainer_t *first = NULL, *resumed = NULL;
    CHECK(uform_trainer_init_ram(executor, &options, &first) == UFORM_OK);
    char path[] = "/tmp/uform-trainer-XXXXXX";
    int descriptor = mkstemp(path);
    CHECK(descriptor >= 0);
    close(descriptor);
    texts_t texts;
    texts_make(&texts, 3, 40);  /* longer than a 16-column row: truncations */
    uform_trainer_batch_t batch = {.modalities = texts.modalities, .contents = texts.tape,
                                   .bags = texts.bags};
    uform_trainer_step_stats_t stats, again;
    CHECK(uform_trainer_step(first, &batch, NULL, UFORM_SCALAR_F32, NULL, &stats) == UFORM_OK);
    CHECK(stats.truncated > 0);
    CHECK(uform_trainer_save(first, path, NULL) == UFORM_OK);
    options.resume = path;
    CHECK(uform_trainer_init_ram(executor, &options, &resumed) == UFORM_OK);
    if (first && resumed) {
        CHECK(uform_trainer_step(first, &batch, NULL, UFORM_SCALAR_F32, NULL, &stats) == UFORM_OK);
        CHECK(uform_trainer_step(resumed, &batch, NULL, UFORM_SCALAR_F32, NULL, &again) == UFORM_OK);
        CHECK(stats.loss == again.loss && stats.step == 2 && again.step == 2);
        size_t count = 0;
        CHECK(uform_trainer_tensor(first, "blocks.1.mlp.down.weight", 0, NULL, &count) == UFORM_OK);
        CHECK(count == 64 * 256);
        float *a = malloc(count * sizeof(float)), *b = malloc(count * sizeof(float));
        CHECK(uform_trainer_tensor(first, "blocks.1.mlp.down.weight", 0, a, &count) == UFORM_OK);
        CHECK(uform_trainer_tensor(resumed, "blocks.1.mlp.down.weight", 0, b, &count) == UFORM_OK);
        CHECK(memcmp(a, b, count * sizeof(float)) == 0);
        free(a), free(b);
    }
    /* The saved file is a model too. */
    uform_model_t *model = NULL;
    CHECK(uform_model_load_ram(path, NULL, &model) == UFORM_OK);
    uform_model_free(model);
    unlink(path);
    texts_free(&texts);
    uform_trainer_free(first);
    uform_trainer_free(resumed);
    uform_executor_free(executor);
}

static void test_bad_input_changes_nothing(void) {
    uform_executor_t *executor = NULL;
    CHECK(uform_executor_for_ram(1, NULL, 0, &executor) == UFORM_OK);
    uform_trainer_options_t options = options_for(UFORM_OBJECTIVE_CONTRASTIVE, NULL, 32);
    uform_trainer_t *trainer = NULL;
    CHECK(uform_trainer_init_ram(executor, &options, &trainer) == UFORM_OK);
    texts_t texts;
    texts_make(&texts, 1, 20);
    uform_trainer_batch_t batch = {.modalities = texts.modalities, .contents = texts.tape,
                                   .bags = texts.bags};
    uform_trainer_step_stats_t stats;

    texts.modalities[3] = 7; /* not a modality */
    CHECK(uform_trainer_step(trainer, &batch, NULL, UFORM_SCALAR_F32, NULL, &stats) == UFORM_INVALID_ARGUMENT);
    texts.modalities[3] = UFORM_MODALITY_AUDIO; /* no shape for it */
    CHECK(uform_trainer_step(trainer, &batch, NULL, UFORM_SCALAR_F32, NULL, &stats) == UFORM_INVALID_ARGUMENT);
    texts.modalities[3] = UFORM_MODALITY_TEXT;

    size_t *offsets = malloc((ITEMS + 1) * sizeof(size_t));
    uint32_t *ids = malloc(sizeof(uint32_t));
    float *weights = malloc(sizeof(float));
    for (size_t i = 0; i <= ITEMS; i++) offsets[i] = i == 0 ? 0 : 1;
    ids[0] = ITEMS; /* names an absent item */
    weights[0] = NAN;
    uform_relations_t relations;
    memset(&relations, 0, sizeof(relations));
    relations.repel = (uform_edges_t){offsets, ids, NULL};
    batch.relations = &relations;
    CHECK(uform_trainer_step(trainer, &batch, NULL, UFORM_SCALAR_F32, NULL, &stats) == UFORM_INVALID_ARGUMENT);
    ids[0] = 1;
    relations.repel.weights = weights;
    CHECK(uform_trainer_step(trainer, &batch, NULL, UFORM_SCALAR_F32, NULL, &stats) == UFORM_INVALID_ARGUMENT);
    uform_encoded_t embeddings;
    CHECK(uform_trainer_step(trainer, &batch, NULL, UFORM_SCALAR_F32, &embeddings, &stats) == UFORM_INVALID_ARGUMENT);
    batch.relations = NULL;
    CHECK(uform_trainer_step(trainer, NULL, NULL, UFORM_SCALAR_F32, NULL, &stats) == UFORM_INVALID_ARGUMENT);
    CHECK(uform_trainer_step(trainer, &batch, NULL, UFORM_SCALAR_F32, NULL, &stats) == UFORM_OK);
    CHECK(stats.step == 1); /* none of the failures applied a step */

    CHECK(uform_trainer_tensor(trainer, "no.such.tensor", 0, NULL, &(size_t){0}) == UFORM_INVALID_ARGUMENT);
    CHECK(uform_trainer_save(trainer, "/nonexistent-directory/x.safetensors", NULL) == UFORM_FILE);
    options.resume = "/nonexistent-directory/x.safetensors";
    uform_trainer_t *missing = (uform_trainer_t *)1;
    CHECK(uform_trainer_init_ram(executor, &options, &missing) == UFORM_FILE && missing == NULL);
    /* a RAM executor: refused (no CUDA backend or no GPU here; with a GPU, as a RAM executor) */
    uform_capabilities_t caps;
    uform_status_t vram = uform_trainer_init_vram(executor, &options, &missing);
    CHECK(uform_capabilities(&caps) == UFORM_OK);
    CHECK((caps.gpus ? vram == UFORM_INVALID_ARGUMENT : (vram == UFORM_UNSUPPORTED || vram == UFORM_DEVICE)) &&
          missing == NULL);
    free(offsets), free(ids), free(weights);
    texts_free(&texts);
    uform_trainer_free(trainer);
    uform_executor_free(executor);
}

/* ---- reliability: workspace extremes, concurrency, divergence ----------------------- */

/* Steps `count` texts of `length` bytes each (bags of two) three times. */
static void step_texts(uform_trainer_t *trainer, size_t count, size_t length, bool bags) {
    char *data = malloc(count * length + 1);
    size_t *offsets = malloc((count + 1) * sizeof(size_t));
    uint32_t *modalities = malloc(count * sizeof(uint32_t));
    uint32_t *bag_ids = malloc(count * sizeof(uint32_t));
    offsets[0] = 0;
    for (size_t i = 0; i < count; i++) {
        for (size_t k = 0; k < length; k++) data[i * length + k] = (char)('a' + (i * 5 + k * 3) % 26);
        offsets[i + 1] = offsets[i] + length;
        modalities[i] = UFORM_MODALITY_TEXT;
        bag_ids[i] = (uint32_t)(i / 2);
    }
    uform_trainer_batch_t batch = {.modalities = modalities,
                                   .contents = {data, count * length, offsets, count},
                                   .bags = bags ? bag_ids : NULL};
    uform_trainer_step_stats_t stats;
    for (int step = 0; step < 3; step++) {
        uform_status_t status = uform_trainer_step(trainer, &batch, NULL, UFORM_SCALAR_F32, NULL, &stats);
        CHECK(status == UFORM_OK);
        if (status != UFORM_OK) break;
        CHECK(isfinite(stats.loss) && stats.step == (uint64_t)step + 1);
    }
    free(data), free(offsets), free(modalities), free(bag_ids);
}

/* The workspace was sized by a formula that left out each buffer's alignment
 * padding: deep and narrow trainers overran it (depth 64 hidden 64 one byte:
 * SIGSEGV; depth 256 in the layout below: "free(): invalid size"). Now it is
 * measured from the list that carves it; under ASan any overrun fails here. */
static void test_workspace_extremes(void) {
    uform_executor_t *executor = NULL;
    CHECK(uform_executor_for_ram(1, NULL, 0, &executor) == UFORM_OK);
    struct {
        size_t depth, rows, columns, segments, bags, count, length;
        uform_objective_t objective;
    } cases[] = {
        {64, 0, 0, 0, 0, 1, 1, UFORM_OBJECTIVE_JOINT},            /* issue 9's repro */
        {256, 1, 16, 2, 2, 2, 2, UFORM_OBJECTIVE_CONTRASTIVE},    /* issue 10's repro */
        {1024, 1, 16, 2, 2, 1, 1, UFORM_OBJECTIVE_JOINT},         /* the deepest accepted, one row */
        {1024, 1, 16, 2, 2, 3, 2, UFORM_OBJECTIVE_MASKED},
        {1, 4096, 4, 4096, 4096, 4096, 4, UFORM_OBJECTIVE_JOINT}, /* many rows, depth 1 */
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        uform_trainer_options_t options;
        memset(&options, 0, sizeof(options));
        options.depth = cases[c].depth;
        options.hidden = 64;
        options.objective = cases[c].objective;
        options.batch.max_rows_per_device = cases[c].rows;
        options.batch.max_columns_per_row = cases[c].columns;
        options.batch.max_segments_per_device = cases[c].segments;
        options.batch.max_bags_per_device = cases[c].bags;
        uform_trainer_t *trainer = NULL;
        CHECK(uform_trainer_init_ram(executor, &options, &trainer) == UFORM_OK);
        if (trainer) step_texts(trainer, cases[c].count, cases[c].length, true);
        uform_trainer_free(trainer);
    }
    uform_executor_free(executor);
}

typedef struct {
    uform_trainer_t *trainer;
    uform_trainer_batch_t batch;
    size_t ok, refused, other;
} stepper_t;

static void *step_thread(void *argument) {
    stepper_t *s = argument;
    for (int round = 0; round < 6; round++) {
        uform_trainer_step_stats_t stats;
        uform_status_t status = uform_trainer_step(s->trainer, &s->batch, NULL, UFORM_SCALAR_F32, NULL, &stats);
        if (status == UFORM_OK) s->ok++;
        else if (status == UFORM_INVALID_ARGUMENT && strstr(uform_last_error(), "in use")) s->refused++;
        else s->other++;
    }
    return NULL;
}

/* A trainer is used by one thread at a time: a second concurrent call is
 * refused with a clear error (two threads stepping one trainer segfaulted). */
static void test_concurrent_steps_refused(void) {
    uform_executor_t *executor = NULL;
    CHECK(uform_executor_for_ram(2, NULL, 0, &executor) == UFORM_OK);
    uform_trainer_options_t options = options_for(UFORM_OBJECTIVE_JOINT, NULL, 32);
    uform_trainer_t *trainer = NULL;
    CHECK(uform_trainer_init_ram(executor, &options, &trainer) == UFORM_OK);
    texts_t texts;
    texts_make(&texts, 2, 30);
    stepper_t steppers[3];
    pthread_t threads[3];
    for (size_t i = 0; i < 3; i++) {
        steppers[i] = (stepper_t){trainer, {.modalities = texts.modalities, .contents = texts.tape,
                                            .bags = texts.bags}, 0, 0, 0};
        CHECK(pthread_create(&threads[i], NULL, step_thread, &steppers[i]) == 0);
    }
    size_t ok = 0;
    for (size_t i = 0; i < 3; i++) {
        pthread_join(threads[i], NULL);
        CHECK(steppers[i].other == 0);
        ok += steppers[i].ok;
    }
    CHECK(ok >= 1);
    /* The step counter counts exactly the steps that ran. */
    uform_trainer_step_stats_t stats;
    uform_trainer_batch_t batch = {.modalities = texts.modalities, .contents = texts.tape, .bags = texts.bags};
    CHECK(uform_trainer_step(trainer, &batch, NULL, UFORM_SCALAR_F32, NULL, &stats) == UFORM_OK);
    CHECK(stats.step == ok + 1);
    texts_free(&texts);
    uform_trainer_free(trainer);
    uform_executor_free(executor);
}

/* A step whose loss or gradients are not finite is refused before the update,
 * so the weights, moments and counter stay those of the last good step. */
static void diverged_step_refused_at(float learning_rate);

static void test_diverged_step_refused(void) {
    /* 1e30: step 2's loss is NaN; 3e38: the first update itself would overflow */
    diverged_step_refused_at(1e30f);
    diverged_step_refused_at(3e38f);
}

static void diverged_step_refused_at(float learning_rate) {
    uform_executor_t *executor = NULL;
    CHECK(uform_executor_for_ram(1, NULL, 0, &executor) == UFORM_OK);
    uform_trainer_options_t options = options_for(UFORM_OBJECTIVE_JOINT, NULL, 32);
    options.schedule.learning_rate = learning_rate;
    options.schedule.warmup_steps = 1;
    options.schedule.steps = 10;
    uform_trainer_t *trainer = NULL;
    CHECK(uform_trainer_init_ram(executor, &options, &trainer) == UFORM_OK);
    if (!trainer) return;
    texts_t texts;
    texts_make(&texts, 4, 20);
    uform_trainer_batch_t batch = {.modalities = texts.modalities, .contents = texts.tape, .bags = texts.bags};
    uform_trainer_step_stats_t stats;
    size_t count = 0;
    CHECK(uform_trainer_tensor(trainer, "text.bytes", 0, NULL, &count) == UFORM_OK);
    float *before = malloc(count * sizeof(float)), *after = malloc(count * sizeof(float));
    size_t diverged = 0;
    for (int round = 0; round < 5; round++) {
        CHECK(uform_trainer_tensor(trainer, "text.bytes", 0, before, &count) == UFORM_OK);
        uform_status_t status = uform_trainer_step(trainer, &batch, NULL, UFORM_SCALAR_F32, NULL, &stats);
        CHECK(status == UFORM_OK || status == UFORM_DIVERGED);
        CHECK(uform_trainer_tensor(trainer, "text.bytes", 0, after, &count) == UFORM_OK);
        if (status == UFORM_DIVERGED) {
            diverged++;
            CHECK(strstr(uform_last_error(), "not applied") != NULL);
            CHECK(memcmp(before, after, count * sizeof(float)) == 0);
        }
        size_t finite = 0;
        for (size_t i = 0; i < count; i++) finite += isfinite(after[i]) != 0;
        CHECK(finite == count);
    }
    CHECK(diverged > 0);
    free(before), free(after);
    texts_free(&texts);
    uform_trainer_free(trainer);
    uform_executor_free(executor);
}

/* Patches one float of a saved tensor in place (the file is ours: a temp path). */
static bool patch_float(const char *path, const char *tensor, float value) {
    uform_safetensors_t file;
    if (uform_safetensors_open(path, &file) != UFORM_OK) return false;
    const uform_tensor_t *found = uform_safetensors_find(&file, tensor);
    long offset = found ? (long)(found->data - file.bytes) : -1;
    uform_safetensors_close(&file);
    if (offset < 0) return false;
    FILE *stream = fopen(path, "r+b");
    if (!stream) return false;
    bool ok = fseek(stream, offset, SEEK_SET) == 0 && fwrite(&value, sizeof(value), 1, stream) == 1;
    return fclose(stream) == 0 && ok;
}

/* Resume validates the training state as strictly as load validates weights. */
static void test_resume_validates_state(void) {
    uform_executor_t *executor = NULL;
    CHECK(uform_executor_for_ram(1, NULL, 0, &executor) == UFORM_OK);
    uform_trainer_options_t options = options_for(UFORM_OBJECTIVE_JOINT, NULL, 16);
    uform_trainer_t *trainer = NULL;
    CHECK(uform_trainer_init_ram(executor, &options, &trainer) == UFORM_OK);
    if (!trainer) return;
    step_texts(trainer, 4, 8, true);
    static const struct {
        const char *tensor;
        float value;
        const char *message;
    } cases[] = {
        {"train.master.text.bytes", INFINITY, "non-finite"},
        {"train.first_moment.blocks.0.mlp.up.weight", NAN, "non-finite"},
        {"train.second_moment.text.modality", -1.0f, "negative second moment"},
        {NULL, 0, NULL}, /* the untouched file resumes */
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        char path[] = "/tmp/uform-resume-XXXXXX";
        int descriptor = mkstemp(path);
        CHECK(descriptor >= 0);
        close(descriptor);
        CHECK(uform_trainer_save(trainer, path, NULL) == UFORM_OK);
        if (cases[c].tensor) CHECK(patch_float(path, cases[c].tensor, cases[c].value));
        uform_trainer_options_t resume = options;
        resume.resume = path;
        uform_trainer_t *resumed = NULL;
        uform_status_t status = uform_trainer_init_ram(executor, &resume, &resumed);
        if (cases[c].tensor) {
            CHECK(status == UFORM_FORMAT && resumed == NULL);
            CHECK(strstr(uform_last_error(), cases[c].message) && strstr(uform_last_error(), cases[c].tensor));
        } else {
            CHECK(status == UFORM_OK);
        }
        uform_trainer_free(resumed);
        unlink(path);
    }
    uform_trainer_free(trainer);
    uform_executor_free(executor);
}

/* Arguments run only the tests whose names contain one of them. */
int main(int argc, char **argv) {
    struct {
        const char *name;
        void (*run)(void);
    } tests[] = {{"every objective and form", test_every_objective_and_form},
                 {"replicas, save and resume", test_replicas_save_and_resume},
                 {"shared choices", test_shared_choices},
                 {"resume progress", test_resume_progress},
                 {"submitted steps and saves", test_submitted_steps_and_saves},
                 {"bad input changes nothing", test_bad_input_changes_nothing},
                 {"workspace extremes", test_workspace_extremes},
                 {"concurrent steps refused", test_concurrent_steps_refused},
                 {"diverged step refused", test_diverged_step_refused},
                 {"resume validates the training state", test_resume_validates_state}};
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
        bool wanted = argc < 2;
        for (int a = 1; a < argc; a++) wanted |= strstr(tests[i].name, argv[a]) != NULL;
        if (!wanted) continue;
        failures_in_test = 0;
        struct timespec start, end;
        clock_gettime(CLOCK_MONOTONIC, &start);
        tests[i].run();
        clock_gettime(CLOCK_MONOTONIC, &end);
        double seconds = (double)(end.tv_sec - start.tv_sec) + 1e-9 * (double)(end.tv_nsec - start.tv_nsec);
        if (failures_in_test) {
            failed++;
            fprintf(stderr, "FAILED %s (%.2f s)\n", tests[i].name, seconds);
        } else {
            passed++;
            fprintf(stderr, "ok     %s (%.2f s)\n", tests[i].name, seconds);
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
