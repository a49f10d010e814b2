/* test_device_model.c: a model on a device whose memory the host cannot touch,
 * without a GPU: the same checkpoint loaded in RAM and onto the guarded backend
 * (guarded_backend.h: the CPU backend whose memory is unreadable from the host
 * outside its operations, and which checks every pointer's side).
 *
 * The oracle: the same checkpoint loaded in RAM for the same CPU class gives
 * the same bits (the guarded backend runs the same kernels in the same order),
 * for every encode verb, output kind and scalar, and text_choose. And a
 * backend lacking an operation a verb needs answers UNSUPPORTED naming it. */
#include "check.h"
#include "guarded_backend.h"
#include "small_checkpoint.h"

#include "model/model.h"

/* ---- the comparison --------------------------------------------------------------- */

static void test_verbs(const char *path, uform_cpu_class_t cpu_class, uform_scalar_t quantization) {
    uform_executor_t *executor = NULL;
    CHECK(uform_executor_for_ram(2, NULL, 0, &executor) == UFORM_OK, "executor: %s", uform_last_error());
    uform_backend_t device = guarded_backend(cpu_class, executor);
    guard_t *guard = guard_of(&device);

    uform_model_load_ram_options_t ram_options = {0};
    ram_options.cpu_class = cpu_class;
    ram_options.quantization = quantization;
    ram_options.executor = executor;
    uform_model_t *ram = NULL, *on_device = NULL;
    CHECK(uform_model_load_ram(path, &ram_options, &ram) == UFORM_OK, "RAM load: %s", uform_last_error());
    uform_safetensors_t file;
    memset(&file, 0, sizeof(file));
    CHECK(uform_safetensors_open(path, &file) == UFORM_OK, "open: %s", uform_last_error());
    uform_status_t status = uform_model_load_on_devices(&file, &device, 1, quantization, executor, NULL, &on_device);
    uform_safetensors_close(&file);
    CHECK(status == UFORM_OK, "device load: %s", uform_last_error());
    if (!ram || !on_device) return;
    CHECK(guard->allocations > 0, "the device model holds no device memory");

    uform_model_description_t described;
    CHECK(uform_model_describe(on_device, &described) == UFORM_OK && described.cpu_class == UFORM_CPU_CLASS_AUTO &&
              described.quantization == quantization,
          "describe: a device model has no CPU class");

    uform_arena_t *arena_ram = NULL, *arena_device = NULL;
    uform_arena_init_ram(&arena_ram);
    uform_arena_init_ram(&arena_device);
    static const uform_scalar_t scalars[] = {UFORM_SCALAR_F32, UFORM_SCALAR_BF16, UFORM_SCALAR_E4M3,
                                             UFORM_SCALAR_I8, UFORM_SCALAR_B1};
    for (verb_t verb = TEXT; verb <= AUDIO; verb++)
        for (size_t s = 0; s < sizeof(scalars) / sizeof(scalars[0]); s++) {
            uform_encode_options_t options = {0};
            options.outputs = UFORM_OUTPUTS_EMBEDDINGS | UFORM_OUTPUTS_TOKENS;
            options.outputs_scalar = scalars[s];
            uform_encoded_t a, b;
            uform_status_t ra = run_verb(verb, ram, arena_ram, &options, &a);
            uform_status_t rb = run_verb(verb, on_device, arena_device, &options, &b);
            CHECK(ra == UFORM_OK && rb == UFORM_OK, "%s: %d/%d %s", verb_names[verb], ra, rb, uform_last_error());
            if (ra != UFORM_OK || rb != UFORM_OK) continue;
            outputs_t oa = outputs_take(&a), ob = outputs_take(&b);
            CHECK(oa.embedding_bytes > 0 && oa.token_bytes > 0, "%s: outputs are empty", verb_names[verb]);
            CHECK(outputs_equal(&oa, &ob), "%s, scalar %d: the device model's outputs differ from RAM's",
                  verb_names[verb], (int)scalars[s]);
            outputs_free(&oa);
            outputs_free(&ob);
        }

    /* text_choose, through the choices head on the device */
    static const char texts_data[] = "pick one:yes or no?";
    static const size_t texts_offsets[] = {0, 9, 19};
    static const char choices_data[] = "abyn";
    static const size_t choices_offsets[] = {0, 2, 4};
    uform_tape_t texts = {texts_data, sizeof(texts_data) - 1, texts_offsets, 2};
    uform_tape_t choices = {choices_data, 4, choices_offsets, 2};
    static const uint32_t groups[] = {1, 0};
    uform_choose_options_t choose = {0};
    choose.temperature_groups = groups;
    uform_chosen_t ca, cb;
    CHECK(uform_text_choose(ram, NULL, &texts, &choices, arena_ram, &choose, &ca, NULL) == UFORM_OK &&
              uform_text_choose(on_device, NULL, &texts, &choices, arena_device, &choose, &cb, NULL) == UFORM_OK,
          "text_choose: %s", uform_last_error());
    CHECK(ca.count == 2 && cb.count == 2 && ca.offsets[2] == 4 && cb.offsets[2] == 4 &&
              memcmp(ca.probabilities, cb.probabilities, 4 * sizeof(float)) == 0,
          "text_choose: the device model's probabilities differ from RAM's");

    /* A backend without an operation a verb needs: UNSUPPORTED naming it. */
    guarded_ops.choice_probabilities = NULL;
    status = uform_text_choose(on_device, NULL, &texts, &choices, arena_device, &choose, &cb, NULL);
    CHECK(status == UFORM_UNSUPPORTED && strstr(uform_last_error(), "choice_probabilities"),
          "text_choose without the operation: %d %s", status, uform_last_error());
    guarded_ops.choice_probabilities = guarded_choice_probabilities;
    guarded_ops.download_rows = NULL;
    uform_encoded_t e;
    status = run_verb(TEXT, on_device, arena_device, NULL, &e);
    CHECK(status == UFORM_UNSUPPORTED && strstr(uform_last_error(), "download_rows"),
          "text_encode without download_rows: %d %s", status, uform_last_error());
    guarded_ops.download_rows = guarded_download_rows;

    CHECK(guard->violations == 0, "%zu pointers on the wrong side, the first: %s", guard->violations,
          guard->violation);
    CHECK(guard->held == 0 && guard->acquisitions >= 16,
          "acquire/release: %zu held after the verbs, %zu acquisitions", guard->held, guard->acquisitions);

    uform_arena_free(arena_ram);
    uform_arena_free(arena_device);
    uform_model_free(ram);
    uform_model_free(on_device);
    CHECK(guard->allocations == 0, "the device model leaks %zu device buffers", guard->allocations);
    guard_free(guard);
    uform_executor_free(executor);
}

int main(void) {
    const char *path = write_small_checkpoint();
    CHECK(path != NULL, "writing the checkpoint: %s", uform_last_error());
    if (!path) return 1;
    /* SERIAL runs everywhere; the best class is the one a RAM load picks */
    uform_cpu_class_t best = UFORM_CPU_CLASS_SERIAL;
    uform_cpu_class_resolve(UFORM_CPU_CLASS_AUTO, &best);
    uform_cpu_class_t classes[] = {UFORM_CPU_CLASS_SERIAL, best};
    for (size_t c = 0; c < 2; c++) {
        test_verbs(path, classes[c], UFORM_SCALAR_BF16);
        test_verbs(path, classes[c], UFORM_SCALAR_E4M3);
    }
    unlink(path);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
