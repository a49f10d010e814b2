/* test_vram_arena.c: device arenas (uform_arena_init_vram). A VRAM model's
 * outputs written into GPU 0's memory must be the same bytes as the same
 * model's outputs in a host arena, for every encode verb that takes memory
 * (text: token rows straight into the arena; pixels and samples: token rows
 * staged on the host, their count known at the end, then uploaded), both
 * output kinds and every output scalar: the GPU converts with the functions
 * the host uses (core/output_scalars.h), so exact equality is the oracle,
 * and the host arena's bytes are themselves checked against a RAM model by
 * test_vram_model. The rows are read back with the CUDA backend's download;
 * offsets are read where they are, in host memory. Then the refusals, each
 * with the status and the words a caller needs: executors that do not hold
 * the GPU, a RAM model, a model on another GPU or on two, text_choose and a
 * training step. Prints one table row per check and "N passed, M failed";
 * without a GPU (or the CUDA backend) it says why and exits 0. */
#include "check.h"
#include "small_checkpoint.h"
#include "trainer_batches.h"

#ifndef UFORM_HAVE_CUDA
int main(void) {
    printf("skip test_vram_arena: this build has no CUDA backend\n");
    return 0;
}
#else

#include "../../c/cuda/cuda_backend.h"

static void row(const char *what, bool ok, const char *detail) {
    printf("| %-56s | %-4s | %s\n", what, ok ? "ok" : "FAIL", detail);
    CHECK(ok, "%s: %s", what, detail);
}

/* A call that must succeed: its error, if any, is the detail. */
static void succeeded(const char *what, uform_status_t status) {
    row(what, status == UFORM_OK, status == UFORM_OK ? "" : uform_last_error());
}

/* A status and a message that names what it must. */
static void refused(const char *what, uform_status_t status, uform_status_t expected, const char *words) {
    const char *message = uform_last_error();
    bool ok = status == expected && strstr(message, words) != NULL;
    char detail[400];
    snprintf(detail, sizeof(detail), "status %d (want %d): %s", (int)status, (int)expected, message);
    row(what, ok, detail);
}

/* The rows of a call into a device arena, brought down through `gpu`. */
static outputs_t outputs_down(uform_backend_t *gpu, const uform_encoded_t *e) {
    outputs_t o = {0};
    o.embedding_bytes = e->embeddings ? e->count * e->embedding_row_bytes : 0;
    o.token_bytes = e->tokens ? e->token_offsets[e->count] * e->token_row_bytes : 0;
    o.embeddings = malloc(o.embedding_bytes + 1);
    o.tokens = malloc(o.token_bytes + 1);
    if (o.embedding_bytes) gpu->ops->download(gpu, o.embeddings, e->embeddings, o.embedding_bytes);
    if (o.token_bytes) gpu->ops->download(gpu, o.tokens, e->tokens, o.token_bytes);
    gpu->ops->synchronize(gpu);
    return o;
}

static void test_outputs(uform_model_t *model, uform_arena_t *host, uform_arena_t *device, uform_backend_t *gpu,
                         verb_t last) {
    static const uform_scalar_t scalars[] = {UFORM_SCALAR_F32, UFORM_SCALAR_BF16, UFORM_SCALAR_F16,
                                             UFORM_SCALAR_E4M3, UFORM_SCALAR_E5M2, UFORM_SCALAR_I8,
                                             UFORM_SCALAR_B1};
    static const char *const scalar_names[] = {"F32", "BF16", "F16", "E4M3", "E5M2", "I8", "B1"};
    for (verb_t verb = TEXT; verb <= last; verb++) {
        for (size_t s = 0; s < sizeof(scalars) / sizeof(scalars[0]); s++) {
            uform_encode_options_t options = {0};
            options.outputs = UFORM_OUTPUTS_EMBEDDINGS | UFORM_OUTPUTS_TOKENS;
            options.outputs_scalar = scalars[s];
            uform_encoded_t a, b;
            char what[96];
            snprintf(what, sizeof(what), "%s %s into GPU 0's memory", verb_names[verb], scalar_names[s]);
            uform_status_t ra = run_verb(verb, model, host, &options, &a);
            uform_status_t rb = run_verb(verb, model, device, &options, &b);
            if (ra != UFORM_OK || rb != UFORM_OK) {
                row(what, false, uform_last_error());
                continue;
            }
            outputs_t expected = outputs_take(&a), got = outputs_down(gpu, &b);
            bool offsets = a.count == b.count && memcmp(a.token_offsets, b.token_offsets,
                                                        (a.count + 1) * sizeof(size_t)) == 0;
            bool same = offsets && outputs_equal(&expected, &got);
            char detail[160];
            snprintf(detail, sizeof(detail), "%zu embedding bytes, %zu token bytes, %s", got.embedding_bytes,
                     got.token_bytes, same ? "the host arena's bytes" : offsets ? "bytes differ" : "offsets differ");
            row(what, same && got.embedding_bytes > 0 && got.token_bytes > 0, detail);
            outputs_free(&expected);
            outputs_free(&got);
        }
    }
}

int main(void) {
    uform_capabilities_t capabilities;
    if (uform_capabilities(&capabilities) != UFORM_OK || !capabilities.gpu_backend_built) {
        printf("skip test_vram_arena: this build has no CUDA backend\n");
        return 0;
    }
    if (capabilities.gpus == 0) {
        printf("skip test_vram_arena: no GPU found\n");
        return 0;
    }
    const char *path = write_small_checkpoint();
    if (!path) {
        printf("FAIL writing the checkpoint: %s\n", uform_last_error());
        return 1;
    }
    uint32_t gpu0 = 0;
    uform_executor_t *gpus = NULL, *cpus = NULL;
    succeeded("Executor.for_vram([0])", uform_executor_for_vram(&gpu0, 1, &gpus));
    succeeded("Executor.for_ram(1)", uform_executor_for_ram(1, NULL, 0, &cpus));
    uform_model_t *vram = NULL;
    uform_status_t status =
        uform_model_load_vram(path, &gpu0, 1, UFORM_GPU_CLASS_NONE, gpus, UFORM_SCALAR_BF16, NULL, &vram);
    succeeded("load_vram (GPU 0)", status);
    uform_backend_t reader;   /* brings the device arena's rows down for the comparisons */
    status = uform_cuda_backend_init(0, &reader);
    bool reading = status == UFORM_OK;
    succeeded("a CUDA backend on GPU 0 to read with", status);
    if (!gpus || !cpus || !vram || !reading) {
        printf("%d passed, %d failed\n", passed, failed);
        return 1;
    }

    uform_arena_t *host = NULL, *device = NULL;
    uform_arena_init_ram(&host);
    status = uform_arena_init_vram(&device, gpus, 0);
    succeeded("uform_arena_init_vram(executor, 0)", status);
    if (!device) return 1;
    uint32_t on_device = 9, where = 9;
    bool located = uform_arena_location(device, &on_device, &where) == UFORM_OK && on_device == 1 && where == 0;
    located = located && uform_arena_location(host, &on_device, &where) == UFORM_OK && on_device == 0 && where == 0;
    row("uform_arena_location: the GPU's, the host's", located, "");
    size_t before = 1;
    uform_arena_capacity(device, &before);
    row("a new device arena holds nothing", before == 0, "");

    test_outputs(vram, host, device, &reader, AUDIO);

    /* the arena is reused: the text calls again take no more memory */
    size_t grown = 0, again = 0;
    uform_arena_capacity(device, &grown);
    test_outputs(vram, host, device, &reader, TEXT);
    uform_arena_capacity(device, &again);
    char detail[160];
    snprintf(detail, sizeof(detail), "%zu bytes after the first pass, %zu after the second", grown, again);
    row("the text calls again: the same bytes, no growth", grown > 0 && again == grown, detail);
    succeeded("uform_arena_reset", uform_arena_reset(device));

    /* ---- refusals ---- */
    uform_arena_t *none = NULL;
    refused("init_vram: a NULL out-pointer", uform_arena_init_vram(NULL, gpus, 0), UFORM_INVALID_ARGUMENT,
            "out-pointer");
    refused("init_vram: a NULL executor", uform_arena_init_vram(&none, NULL, 0), UFORM_INVALID_ARGUMENT,
            "executor");
    refused("init_vram: a RAM executor", uform_arena_init_vram(&none, cpus, 0), UFORM_INVALID_ARGUMENT,
            "VRAM executor");
    refused("init_vram: a GPU the executor does not hold", uform_arena_init_vram(&none, gpus, 1),
            UFORM_INVALID_ARGUMENT, "does not hold GPU 1");
    row("init_vram: nothing made when refused", none == NULL, "");
    refused("location: NULL arguments", uform_arena_location(device, NULL, &where), UFORM_INVALID_ARGUMENT,
            "NULL");

    uform_model_load_ram_options_t ram_options = {0};
    ram_options.executor = cpus;
    uform_model_t *ram = NULL;
    succeeded("load_ram", uform_model_load_ram(path, &ram_options, &ram));
    uform_encode_options_t options = {0};
    uform_encoded_t encoded;
    refused("text_encode of a RAM model into a device arena", run_verb(TEXT, ram, device, &options, &encoded),
            UFORM_INVALID_ARGUMENT, "this model is in RAM");

    static const char texts_data[] = "pick one:yes or no?";
    static const size_t texts_offsets[] = {0, 9, 19};
    static const char choices_data[] = "abyn";
    static const size_t choices_offsets[] = {0, 2, 4};
    uform_tape_t texts = {texts_data, sizeof(texts_data) - 1, texts_offsets, 2};
    uform_tape_t choices = {choices_data, 4, choices_offsets, 2};
    uform_chosen_t chosen;
    refused("text_choose into a device arena",
            uform_text_choose(vram, NULL, &texts, &choices, device, NULL, &chosen, NULL), UFORM_UNSUPPORTED,
            "host arena");

    uform_trainer_t *trainer = NULL;
    uform_trainer_options_t trainer_options = options_for(UFORM_OBJECTIVE_MASKED, NULL);
    succeeded("Trainer.init_ram", uform_trainer_init_ram(cpus, &trainer_options, &trainer));
    texts_t step_texts;
    texts_make(&step_texts, 1);
    uform_trainer_batch_t batch = batch_of(&step_texts, false);
    if (trainer)
        refused("a training step's embeddings into a device arena",
                uform_trainer_step(trainer, &batch, device, UFORM_SCALAR_F32, &encoded, NULL), UFORM_UNSUPPORTED,
                "host arena");
    uform_trainer_free(trainer);

    if (capabilities.gpus >= 2) {   /* two GPUs (the emulation has two with UFORM_EMULATION_DEVICES=2) */
        uint32_t both[2] = {0, 1}, gpu1 = 1;
        uform_executor_t *pair = NULL;
        uform_model_t *on1 = NULL, *on_both = NULL;
        status = uform_executor_for_vram(both, 2, &pair);
        if (status == UFORM_OK)
            status = uform_model_load_vram(path, &gpu1, 1, UFORM_GPU_CLASS_NONE, pair, UFORM_SCALAR_BF16, NULL, &on1);
        if (status == UFORM_OK)
            status = uform_model_load_vram(path, both, 2, UFORM_GPU_CLASS_NONE, pair, UFORM_SCALAR_BF16, NULL,
                                           &on_both);
        bool made = status == UFORM_OK;
        succeeded("two GPUs: a model on GPU 1, a model on both", status);
        if (made) {
            refused("text_encode of a model on GPU 1 into GPU 0's arena",
                    run_verb(TEXT, on1, device, &options, &encoded), UFORM_INVALID_ARGUMENT, "on GPU 1");
            refused("text_encode of a model on 2 GPUs into GPU 0's arena",
                    run_verb(TEXT, on_both, device, &options, &encoded), UFORM_INVALID_ARGUMENT, "on 2 GPUs");
        }
        uform_model_free(on1);
        uform_model_free(on_both);
        uform_executor_free(pair);
    } else {
        printf("(one GPU: the checks of models on other GPUs need two)\n");
    }

    /* still usable after every refusal */
    options.outputs = UFORM_OUTPUTS_EMBEDDINGS;
    succeeded("text_encode into the device arena after the refusals", run_verb(TEXT, vram, device, &options, &encoded));

    uform_arena_free(device);
    uform_arena_free(host);
    uform_model_free(ram);
    uform_model_free(vram);
    uform_cuda_backend_free(&reader);
    uform_executor_free(gpus);
    uform_executor_free(cpus);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
#endif
