/* test_device_lanes.c: a model on two devices (Model.load_vram listing two
 * GPUs) without a GPU: the same checkpoint on two guarded backends
 * (guarded_backend.h: memory the host cannot touch outside their operations),
 * a copy on each, the encode verbs spreading their batches over both, each
 * batch on a thread of its device's (encode/encode_batches.c: lanes).
 *
 * The oracle: the same checkpoint loaded in RAM for the same CPU class. Every
 * copy runs the same kernels in the same order on the same weights, and an
 * item's outputs do not depend on its batch, so every output is the same
 * bits, whichever device ran it. Also: calls of many batches per device
 * (lanes reused, token rows staged while other lanes write), text_choose (a
 * share of the texts per device), progress in order, a device failing
 * mid-call, a cancelled call, nothing leaked. */
#include "check.h"
#include "guarded_backend.h"
#include "small_checkpoint.h"

#include "model/model.h"

#define DEVICES 2

typedef struct {
    uform_executor_t *executor;
    uform_backend_t devices[DEVICES];
    uform_model_t *ram, *copies;
} fixture_t;

static bool fixture_init(fixture_t *f, const char *path, uform_cpu_class_t cpu_class, uform_scalar_t quantization,
                         const uform_progress_t *progress) {
    memset(f, 0, sizeof(*f));
    CHECK(uform_executor_for_ram(2, NULL, 0, &f->executor) == UFORM_OK, "executor: %s", uform_last_error());
    for (size_t d = 0; d < DEVICES; d++) f->devices[d] = guarded_backend(cpu_class, f->executor);
    uform_model_load_ram_options_t ram_options = {0};
    ram_options.cpu_class = cpu_class;
    ram_options.quantization = quantization;
    ram_options.executor = f->executor;
    CHECK(uform_model_load_ram(path, &ram_options, &f->ram) == UFORM_OK, "RAM load: %s", uform_last_error());
    uform_safetensors_t file;
    memset(&file, 0, sizeof(file));
    CHECK(uform_safetensors_open(path, &file) == UFORM_OK, "open: %s", uform_last_error());
    uform_status_t status =
        uform_model_load_on_devices(&file, f->devices, DEVICES, quantization, f->executor, progress, &f->copies);
    uform_safetensors_close(&file);
    CHECK(status == UFORM_OK, "load on %d devices: %s", DEVICES, uform_last_error());
    return f->ram && f->copies;
}

static void fixture_free(fixture_t *f) {
    uform_model_free(f->ram);
    uform_model_free(f->copies);
    for (size_t d = 0; d < DEVICES; d++) {
        guard_t *guard = guard_of(&f->devices[d]);
        CHECK(guard->violations == 0, "device %zu: %zu pointers on the wrong side, the first: %s", d,
              guard->violations, guard->violation);
        CHECK(guard->held == 0, "device %zu: %zu acquisitions not released", d, guard->held);
        CHECK(guard->allocations == 0, "device %zu: %zu device buffers leaked", d, guard->allocations);
        guard_free(guard);
    }
    uform_executor_free(f->executor);
}

/* ---- the small verbs: every one, every scalar ------------------------------------------ */

/* reports[0]: how many, reports[1]: the last `done`, reports[2]: its total */
static int record_progress(void *user, size_t done, size_t total) {
    size_t *reports = user;
    reports[0]++;
    reports[1] = done;
    reports[2] = total;
    return 0;
}

static void test_verbs(const char *path, uform_cpu_class_t cpu_class, uform_scalar_t quantization) {
    /* progress over both copies' tensors, the last report done == total */
    size_t reports[3] = {0, 0, 0};
    uform_progress_t progress = {0};
    progress.callback = record_progress;
    progress.user = reports;
    fixture_t f;
    if (!fixture_init(&f, path, cpu_class, quantization, &progress)) return;
    CHECK(reports[0] > 0 && reports[1] == 2 * (12 * 2 + 19) && reports[2] == reports[1],
          "load progress: the last report %zu, expected both copies' %d tensors", reports[1], 2 * (12 * 2 + 19));
    for (size_t d = 0; d < DEVICES; d++)
        CHECK(guard_of(&f.devices[d])->allocations > 0, "device %zu holds no copy of the model", d);

    uform_model_description_t one, two;
    CHECK(uform_model_describe(f.ram, &one) == UFORM_OK && uform_model_describe(f.copies, &two) == UFORM_OK,
          "describe: %s", uform_last_error());
    CHECK(two.memory_usage == 2 * uform_model_replica(f.copies, 1)->memory_usage && two.memory_usage > 0,
          "describe: memory_usage %zu is not both copies' bytes", two.memory_usage);

    uform_arena_t *arena_ram = NULL, *arena_copies = NULL;
    uform_arena_init_ram(&arena_ram);
    uform_arena_init_ram(&arena_copies);
    static const uform_scalar_t scalars[] = {UFORM_SCALAR_F32, UFORM_SCALAR_BF16, UFORM_SCALAR_I8, UFORM_SCALAR_B1};
    for (verb_t verb = TEXT; verb <= AUDIO; verb++)
        for (size_t s = 0; s < sizeof(scalars) / sizeof(scalars[0]); s++)
            for (uint32_t kinds = 1; kinds <= 3; kinds++) {
                uform_encode_options_t options = {0};
                options.outputs = kinds;   /* embeddings, tokens, both */
                options.outputs_scalar = scalars[s];
                uform_encoded_t a, b;
                size_t before[DEVICES];
                for (size_t d = 0; d < DEVICES; d++) before[d] = guard_of(&f.devices[d])->synchronizes;
                uform_status_t ra = run_verb(verb, f.ram, arena_ram, &options, &a);
                uform_status_t rb = run_verb(verb, f.copies, arena_copies, &options, &b);
                CHECK(ra == UFORM_OK && rb == UFORM_OK, "%s: %d/%d %s", verb_names[verb], ra, rb,
                      uform_last_error());
                if (ra != UFORM_OK || rb != UFORM_OK) continue;
                /* two or more items: each device ran a batch */
                for (size_t d = 0; d < DEVICES; d++)
                    CHECK(guard_of(&f.devices[d])->synchronizes > before[d], "%s: device %zu ran no batch",
                          verb_names[verb], d);
                outputs_t oa = outputs_take(&a), ob = outputs_take(&b);
                CHECK(outputs_equal(&oa, &ob), "%s, scalar %d, outputs %u: two devices' outputs differ from RAM's",
                      verb_names[verb], (int)scalars[s], kinds);
                outputs_free(&oa);
                outputs_free(&ob);
            }
    uform_arena_free(arena_ram);
    uform_arena_free(arena_copies);
    fixture_free(&f);
}

/* ---- calls of many batches ------------------------------------------------------------ */

typedef struct {
    size_t reports, last, total;
    bool decreased;
    size_t cancel_at;   /* answer "stop" once done reaches it (0: never) */
} progress_log_t;

static int log_progress(void *user, size_t done, size_t total) {
    progress_log_t *log = user;
    if (done < log->last) log->decreased = true;
    log->reports++;
    log->last = done;
    log->total = total;
    return log->cancel_at && done >= log->cancel_at;
}

/* `count` texts of 0 to 40 bytes: about 20 rows each. */
static uform_tape_t many_texts(size_t count, char **data, size_t **offsets) {
    *data = malloc(count * 40 + 1);
    *offsets = malloc((count + 1) * sizeof(size_t));
    (*offsets)[0] = 0;
    for (size_t i = 0; i < count; i++) {
        size_t length = (i * 7919) % 41;
        for (size_t t = 0; t < length; t++) (*data)[(*offsets)[i] + t] = (char)('a' + (i + t * 3) % 26);
        (*offsets)[i + 1] = (*offsets)[i] + length;
    }
    return (uform_tape_t){*data, (*offsets)[count], *offsets, count};
}

static void test_many_batches(const char *path, uform_cpu_class_t cpu_class) {
    fixture_t f;
    if (!fixture_init(&f, path, cpu_class, UFORM_SCALAR_BF16, NULL)) return;
    uform_arena_t *arena_ram = NULL, *arena_copies = NULL;
    uform_arena_init_ram(&arena_ram);
    uform_arena_init_ram(&arena_copies);

    /* Texts of about 2.5 batches' rows each device (uform_batch_rows: 23831 at
     * hidden 64): each device runs two or three batches, the first device
     * waited for before it packs again. */
    size_t count = 6000;
    char *data;
    size_t *offsets;
    uform_tape_t texts = many_texts(count, &data, &offsets);
    uform_encode_options_t options = {0};
    options.outputs = UFORM_OUTPUTS_EMBEDDINGS | UFORM_OUTPUTS_TOKENS;
    progress_log_t log = {0};
    options.progress.callback = log_progress;
    options.progress.user = &log;
    options.progress.steps = 1000;
    uform_encoded_t a, b;
    size_t before[DEVICES];
    for (size_t d = 0; d < DEVICES; d++) before[d] = guard_of(&f.devices[d])->synchronizes;
    CHECK(uform_text_encode(f.ram, NULL, &texts, arena_ram, &options, &a, NULL) == UFORM_OK, "RAM: %s",
          uform_last_error());
    progress_log_t ram_log = log;
    log = (progress_log_t){0};
    CHECK(uform_text_encode(f.copies, NULL, &texts, arena_copies, &options, &b, NULL) == UFORM_OK,
          "two devices: %s", uform_last_error());
    for (size_t d = 0; d < DEVICES; d++)
        CHECK(guard_of(&f.devices[d])->synchronizes - before[d] >= 2, "device %zu ran %zu batches, expected 2 or more",
              d, guard_of(&f.devices[d])->synchronizes - before[d]);
    outputs_t oa = outputs_take(&a), ob = outputs_take(&b);
    CHECK(outputs_equal(&oa, &ob), "many texts: two devices' outputs differ from RAM's");
    outputs_free(&oa);
    outputs_free(&ob);
    CHECK(!log.decreased && log.last == count && log.total == count && log.reports >= 3 && ram_log.last == count,
          "progress: %zu reports, the last %zu of %zu, %s", log.reports, log.last, log.total,
          log.decreased ? "out of order" : "in order");

    /* Audio: token rows unknown until decoded, staged; the staging grows while
     * the other device writes its batch's rows (it is waited for first). */
    size_t clips = 3000, per_clip = 32 * 9;
    float *samples = malloc(clips * per_clip * sizeof(float));
    size_t *sample_offsets = malloc((clips + 1) * sizeof(size_t));
    sample_offsets[0] = 0;
    for (size_t i = 0; i < clips; i++) {
        size_t length = (i * 31) % per_clip;
        for (size_t t = 0; t < length; t++)
            samples[sample_offsets[i] + t] = sinf((float)(i + t) * 0.37f) * 0.5f;
        sample_offsets[i + 1] = sample_offsets[i] + length;
    }
    options.progress.callback = NULL;
    uform_status_t ra = uform_audio_encode_samples(f.ram, NULL, samples, sample_offsets[clips], sample_offsets, clips,
                                                   16000, arena_ram, &options, &a, NULL);
    uform_status_t rb = uform_audio_encode_samples(f.copies, NULL, samples, sample_offsets[clips], sample_offsets,
                                                   clips, 16000, arena_copies, &options, &b, NULL);
    CHECK(ra == UFORM_OK && rb == UFORM_OK, "many clips: %d/%d %s", ra, rb, uform_last_error());
    if (ra == UFORM_OK && rb == UFORM_OK) {
        oa = outputs_take(&a), ob = outputs_take(&b);
        CHECK(oa.token_bytes > 0 && outputs_equal(&oa, &ob), "many clips: two devices' outputs differ from RAM's");
        outputs_free(&oa);
        outputs_free(&ob);
    }

    /* text_choose: a share of the texts on each device, each on a thread of
     * its own (the first on the calling thread), every text's probabilities
     * the RAM model's bits; with one entry of choices per text and with one
     * shared, with temperature groups; progress in order to the end. */
    size_t few = 1500;
    char *choice_data = malloc(few * 3);
    size_t *choice_offsets = malloc((few + 1) * sizeof(size_t));
    uint32_t *groups = malloc(few * sizeof(uint32_t));
    choice_offsets[0] = 0;
    for (size_t i = 0; i < few; i++) {
        size_t n = 1 + i % 3;
        for (size_t j = 0; j < n; j++) choice_data[choice_offsets[i] + j] = (char)('a' + (i + j * 5) % 26);
        choice_offsets[i + 1] = choice_offsets[i] + n;
        groups[i] = (uint32_t)(i % 2);
    }
    uform_tape_t chosen_texts = {data, offsets[few], offsets, few};
    for (int shared = 0; shared < 2; shared++) {
        uform_tape_t choices = {choice_data, choice_offsets[shared ? 1 : few], choice_offsets, shared ? 1 : few};
        uform_choose_options_t choose = {0};
        choose.temperature_groups = groups;
        log = (progress_log_t){0};
        choose.progress.callback = log_progress;
        choose.progress.user = &log;
        uform_chosen_t ca, cb;
        for (size_t d = 0; d < DEVICES; d++) before[d] = guard_of(&f.devices[d])->synchronizes;
        rb = uform_text_choose(f.copies, NULL, &chosen_texts, &choices, arena_copies, &choose, &cb, NULL);
        progress_log_t copies_log = log;
        ra = uform_text_choose(f.ram, NULL, &chosen_texts, &choices, arena_ram, &choose, &ca, NULL);
        log = copies_log;
        CHECK(ra == UFORM_OK && rb == UFORM_OK, "text_choose (%s choices): %d/%d %s", shared ? "shared" : "own", ra,
              rb, uform_last_error());
        if (ra != UFORM_OK || rb != UFORM_OK) continue;
        for (size_t d = 0; d < DEVICES; d++)
            CHECK(guard_of(&f.devices[d])->synchronizes > before[d], "text_choose: device %zu ran no batch", d);
        size_t total = ca.offsets[few];
        CHECK(cb.count == few && cb.offsets[few] == total &&
                  memcmp(ca.offsets, cb.offsets, (few + 1) * sizeof(size_t)) == 0 &&
                  memcmp(ca.probabilities, cb.probabilities, total * sizeof(float)) == 0,
              "text_choose (%s choices): two devices' probabilities differ from RAM's", shared ? "shared" : "own");
        CHECK(!log.decreased && log.last == few && log.total == few, "text_choose progress: the last %zu of %zu, %s",
              log.last, log.total, log.decreased ? "out of order" : "in order");
    }
    {   /* a failure on the second device's share; then a cancelled call */
        uform_tape_t choices = {choice_data, choice_offsets[1], choice_offsets, 1};
        uform_chosen_t cb;
        guard_t *failing = guard_of(&f.devices[1]);
        failing->fail_synchronize_at = failing->synchronizes + 1;
        uform_status_t failed_status = uform_text_choose(f.copies, NULL, &chosen_texts, &choices, arena_copies, NULL,
                                                         &cb, NULL);
        CHECK(failed_status == UFORM_DEVICE && strstr(uform_last_error(), "injected") && cb.count == 0,
              "text_choose with a failing device: %d %s", failed_status, uform_last_error());
        uform_choose_options_t choose = {0};
        log = (progress_log_t){0};
        log.cancel_at = 1;
        choose.progress.callback = log_progress;
        choose.progress.user = &log;
        failed_status = uform_text_choose(f.copies, NULL, &chosen_texts, &choices, arena_copies, &choose, &cb, NULL);
        CHECK(failed_status == UFORM_CANCELLED, "text_choose cancelled: %d %s", failed_status, uform_last_error());
    }
    free(choice_data);
    free(choice_offsets);
    free(groups);

    /* A device failing mid-call: the call answers its error, nothing leaks,
     * and the next call works. */
    guard_t *second = guard_of(&f.devices[1]);
    second->fail_synchronize_at = second->synchronizes + 2;
    uform_status_t status = uform_text_encode(f.copies, NULL, &texts, arena_copies, &options, &b, NULL);
    CHECK(status == UFORM_DEVICE && strstr(uform_last_error(), "injected"), "a failing device: %d %s", status,
          uform_last_error());
    status = uform_text_encode(f.copies, NULL, &texts, arena_copies, &options, &b, NULL);
    CHECK(status == UFORM_OK, "after a failure: %d %s", status, uform_last_error());

    /* Cancelled by the progress handler while the other device runs. */
    log = (progress_log_t){0};
    log.cancel_at = 1;
    options.progress.callback = log_progress;
    status = uform_text_encode(f.copies, NULL, &texts, arena_copies, &options, &b, NULL);
    CHECK(status == UFORM_CANCELLED && log.last < count, "cancelled: %d after %zu items %s", status, log.last,
          uform_last_error());

    free(samples);
    free(sample_offsets);
    free(data);
    free(offsets);
    uform_arena_free(arena_ram);
    uform_arena_free(arena_copies);
    fixture_free(&f);
}

/* ---- a load that fails on the second device ------------------------------------------- */

static void test_failed_load(const char *path) {
    uform_executor_t *executor = NULL;
    CHECK(uform_executor_for_ram(1, NULL, 0, &executor) == UFORM_OK, "executor: %s", uform_last_error());
    uform_backend_t devices[DEVICES];
    for (size_t d = 0; d < DEVICES; d++) devices[d] = guarded_backend(UFORM_CPU_CLASS_SERIAL, executor);
    guard_of(&devices[1])->refuse_once_above = 1;   /* its first allocation */
    uform_safetensors_t file;
    memset(&file, 0, sizeof(file));
    CHECK(uform_safetensors_open(path, &file) == UFORM_OK, "open: %s", uform_last_error());
    uform_model_t *model = NULL;
    uform_status_t status =
        uform_model_load_on_devices(&file, devices, DEVICES, UFORM_SCALAR_BF16, executor, NULL, &model);
    uform_safetensors_close(&file);
    CHECK(status == UFORM_OUT_OF_MEMORY && !model, "a load refused memory on the second device: %d %s", status,
          uform_last_error());
    for (size_t d = 0; d < DEVICES; d++) {
        guard_t *guard = guard_of(&devices[d]);
        CHECK(guard->allocations == 0 && guard->held == 0,
              "device %zu after the failed load: %zu buffers left, %zu acquisitions held", d, guard->allocations,
              guard->held);
        guard_free(guard);
    }
    uform_executor_free(executor);
}

int main(void) {
    const char *path = write_small_checkpoint();
    CHECK(path != NULL, "writing the checkpoint: %s", uform_last_error());
    if (!path) return 1;
    uform_cpu_class_t best = UFORM_CPU_CLASS_SERIAL;
    uform_cpu_class_resolve(UFORM_CPU_CLASS_AUTO, &best);
    test_verbs(path, UFORM_CPU_CLASS_SERIAL, UFORM_SCALAR_BF16);
    test_verbs(path, best, UFORM_SCALAR_E4M3);
    test_many_batches(path, best);
    test_failed_load(path);
    unlink(path);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
