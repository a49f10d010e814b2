/* test_vram_trainer.c: Trainer.init_vram (one GPU: MASKED, CONTRASTIVE, JOINT,
 * with late interaction and choices, and with audio items)
 * against init_ram on the same options and batches (the first step's every
 * gradient, then the losses of 3 steps), and save/resume on the GPU. Prints one table
 * row per check and "N passed, M failed"; without a GPU (or without the CUDA
 * backend) it says why and exits 0 (make test-gpu).
 *
 * Tolerances: the CPU trainer computes in FP32; the GPU trainer's products
 * and attention compute in BF16 with FP32 accumulation (gemm.cu,
 * attention_mma.cu): every product's operands rounded to BF16 (2^-9 relative
 * each), about 12 rounded products per block and the heads', so activations
 * differ by a few times 2^-9 x sqrt(products) ~ 1e-2 relative in the worst
 * component, far less on average; a loss is a mean over many rows and
 * components of them (and a contrastive loss scales cosines by its inverse
 * temperature, up to ~20): ~3e-3 relative on the first step. AdamW's first
 * steps move every weight by about the learning rate whatever the gradient's
 * size, so a gradient component near 0 can flip sign between the two and move
 * its weight the other way: steps 2 and 3 drift further. Measured under the
 * CUDA emulation (make test-cuda-emulated: the same roundings, sums in another
 * order): 2.8e-6 on the first MASKED step, at most 9.2e-4 over 3 steps of
 * every objective. 1e-2 is allowed; each row prints the measured difference. The GPU against itself (a run of 5
 * steps, and 3 steps, save, resume, 2 steps)
 * must agree bit for bit: its kernels are deterministic (docs/gpu.md). */
#include "check.h"
#include "trainer_batches.h"

#include "uform.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef UFORM_HAVE_CUDA
int main(void) {
    printf("skip test_vram_trainer: this build has no CUDA backend\n");
    return 0;
}
#else

#define LOSS_TOLERANCE 1e-2
/* Step 1's gradients, per tensor (qkv's q, k and v rows apart), the norm of
 * the difference over the RAM gradient's: each product term rounds two BF16
 * operands (2^-9 relative each), and a gradient carries the error of the ~10
 * rounded products on its path from the loss at depth 2: a few times 2^-8 x
 * sqrt(10) ~ 1e-2, more where a contrastive term scales cosines by its
 * inverse temperature (up to ~20). q's and k's gradients come from
 * ds = p (dp - D), a difference of two near-equal sums, rounded to BF16
 * before dq and dk: the cancellation multiplies those errors. Measured under
 * the CUDA emulation: at most 1.1e-2 (JOINT's norm.weight) outside q and k,
 * 4.3e-2 in them (a qkv bias's q or k third, JOINT with late interaction and
 * choices); 5e-2 and 2e-1 leave room for a GPU's own order of the sums.
 * Broken on purpose, each fails: a GELU derivative left out of the up
 * projection's backward (25 of the 30 MASKED tensors over, up to 1.5), the
 * halves of rope_backward's pairs swapped (q and k thirds 1.4 to 1.8). */
#define GRADIENT_TOLERANCE 5e-2
#define QK_GRADIENT_TOLERANCE 2e-1

static void row(const char *what, bool ok, const char *detail) {
    printf("| %-48s | %-4s | %s\n", what, ok ? "ok" : "FAIL", detail);
    CHECK(ok, "%s: %s", what, detail);
}

/* A tensor's last gradients (which 1), malloc'd; NULL where the run has none. */
static float *trainer_gradients(const uform_trainer_t *t, const char *name, size_t *count) {
    *count = 0;
    if (uform_trainer_tensor(t, name, 1, NULL, count) != UFORM_OK) return NULL;
    float *values = malloc((*count ? *count : 1) * sizeof(float));
    if (uform_trainer_tensor(t, name, 1, values, count) != UFORM_OK) {
        free(values);
        return NULL;
    }
    return values;
}

/* Every gradient of the last step, VRAM against RAM (the same weights and
 * batch before it): per tensor the norm of the difference over the norm of
 * the RAM gradient, at most GRADIENT_TOLERANCE (one row for the worst
 * tensor, one more for each tensor over the bound). */
static void compare_gradients(const char *label, const uform_trainer_t *ram, const uform_trainer_t *vram,
                              size_t depth) {
    static const char *const block_parts[] = {
        "attention.norm.weight", "attention.norm.bias", "attention.qkv.weight", "attention.qkv.bias",
        "attention.out.weight",  "attention.out.bias",  "mlp.norm.weight",      "mlp.norm.bias",
        "mlp.up.weight",         "mlp.up.bias",         "mlp.down.weight",      "mlp.down.bias"};
    static const char *const others[] = {
        "text.bytes", "text.modality", "norm.weight", "norm.bias", "heads.embedding.weight", "heads.bytes.bias",
        "heads.tokens.weight", "contrastive.log_inverse_temperature", "contrastive.bias",
        "late_interaction.log_inverse_temperature", "late_interaction.bias", "choices.log_temperature",
        "audio.modality", "audio.chunk.weight", "audio.chunk.bias", "audio.mask", "heads.audio.weight",
        "heads.audio.bias"};
    size_t names = sizeof(others) / sizeof(others[0]) + depth * 12, compared = 0;
    double worst = 0.0, worst_bound = GRADIENT_TOLERANCE;
    char worst_name[64] = "", name[64], detail[160];
    for (size_t i = 0; i < names; i++) {
        if (i < sizeof(others) / sizeof(others[0]))
            snprintf(name, sizeof(name), "%s", others[i]);
        else {
            size_t j = i - sizeof(others) / sizeof(others[0]);
            snprintf(name, sizeof(name), "blocks.%zu.%s", j / 12, block_parts[j % 12]);
        }
        size_t n = 0, m = 0;
        float *r = trainer_gradients(ram, name, &n), *v = trainer_gradients(vram, name, &m);
        if (!r && !v) continue;   /* not a tensor of this run */
        bool same_size = r && v && n == m;
        /* qkv's q, k and v rows apart: at initialization q's and k's gradients
         * are far smaller than v's, whose norm would hide theirs */
        size_t parts = strstr(name, ".qkv.") ? 3 : 1;
        double relative = INFINITY, bound = GRADIENT_TOLERANCE;
        for (size_t part = 0; same_size && part < parts; part++) {
            double difference = 0.0, norm = 0.0;
            for (size_t k = part * n / parts; k < (part + 1) * n / parts; k++) {
                double d = (double)v[k] - r[k];
                difference += d * d, norm += (double)r[k] * r[k];
            }
            double part_relative = sqrt(difference) / fmax(sqrt(norm), 1e-30);
            double part_bound = parts == 3 && part < 2 ? QK_GRADIENT_TOLERANCE : GRADIENT_TOLERANCE;
            if (part == 0 || part_relative / part_bound > relative / bound) relative = part_relative, bound = part_bound;
        }
        compared++;
        if (!(relative / bound <= worst / worst_bound))
            worst = relative, worst_bound = bound, snprintf(worst_name, sizeof(worst_name), "%s", name);
        if (!(relative <= bound)) {
            snprintf(detail, sizeof(detail), "relative %.1e (> %.0e)%s", relative, bound,
                     same_size ? "" : ": missing on one side, or of another size");
            char what[160];
            snprintf(what, sizeof(what), "%s: step 1 gradient %s", label, name);
            row(what, false, detail);
        }
        free(r), free(v);
    }
    snprintf(detail, sizeof(detail), "%zu tensors; the nearest its bound: %s, relative %.1e (bound %.0e)", compared,
             worst_name, worst, worst_bound);
    char what[128];
    snprintf(what, sizeof(what), "%s: step 1, every gradient VRAM against RAM", label);
    row(what, compared > 0 && worst <= worst_bound, detail);
}

/* Whether batches carry the shared choices "abcd" (runs with choices). */
static bool with_choices;

static bool step(uform_trainer_t *t, unsigned s, float *loss) {
    texts_t texts;
    texts_make(&texts, s);
    uform_trainer_batch_t batch = batch_of(&texts, with_choices);
    uform_trainer_step_stats_t stats;
    bool ok = uform_trainer_step(t, &batch, NULL, UFORM_SCALAR_F32, NULL, &stats) == UFORM_OK;
    *loss = ok ? stats.loss : NAN;
    return ok;
}

int main(void) {
    uform_capabilities_t capabilities;
    if (uform_capabilities(&capabilities) != UFORM_OK || !capabilities.gpu_backend_built) {
        printf("skip test_vram_trainer: this build has no CUDA backend\n");
        return 0;
    }
    if (capabilities.gpus == 0) {
        printf("skip test_vram_trainer: no GPU found\n");
        return 0;
    }
    uform_executor_t *cpu = NULL, *gpu = NULL;
    uform_executor_for_ram(0, NULL, 0, &cpu);
    uint32_t device = 0;
    uform_status_t status = uform_executor_for_vram(&device, 1, &gpu);
    row("Executor.for_vram([0])", status == UFORM_OK, status == UFORM_OK ? "" : uform_last_error());
    if (!gpu) return 1;

    size_t widths[2] = {16, 64};
    uform_contrastive_t contrastive;   /* two temperature groups: the batches name groups 0 and 1 */
    memset(&contrastive, 0, sizeof(contrastive));
    contrastive.temperature_groups = 2;
    contrastive.matryoshka_dimensions = widths;
    contrastive.matryoshka_dimensions_count = 2;
    uform_trainer_options_t options = options_for(UFORM_OBJECTIVE_MASKED, &contrastive);
    uform_trainer_t *ram = NULL, *vram = NULL;
    status = uform_trainer_init_ram(cpu, &options, &ram);
    row("init_ram (MASKED)", status == UFORM_OK, status == UFORM_OK ? "" : uform_last_error());
    status = uform_trainer_init_vram(gpu, &options, &vram);
    row("init_vram (MASKED)", status == UFORM_OK, status == UFORM_OK ? "" : uform_last_error());
    if (!ram || !vram) {
        printf("%d passed, %d failed\n", passed, failed);
        return 1;
    }
    size_t n = 0, m = 0;
    float *a = trainer_weights(ram, "blocks.0.attention.qkv.weight", &n), *b = trainer_weights(vram, "blocks.0.attention.qkv.weight", &m);
    row("the same initial weights", a && b && n == m && memcmp(a, b, n * sizeof(float)) == 0, "");
    free(a), free(b);

    char path[] = "/tmp/uform-vram-trainer-XXXXXX";
    close(mkstemp(path));
    float first[5] = {0}, resumed[5] = {0};
    for (unsigned s = 0; s < 3; s++) {
        float lr = NAN, lv = NAN;
        bool ok = step(ram, s, &lr) && step(vram, s, &lv);
        char what[64], detail[128];
        snprintf(what, sizeof(what), "step %u: loss VRAM against RAM", s + 1);
        double relative = fabs((double)lv - lr) / fmax(fabs((double)lr), 1e-30);
        snprintf(detail, sizeof(detail), "RAM %.7f VRAM %.7f: relative %.1e (<= %.0e)", (double)lr, (double)lv,
                 relative, LOSS_TOLERANCE);
        row(what, ok && relative <= LOSS_TOLERANCE, ok ? detail : uform_last_error());
        if (s == 0) compare_gradients("MASKED", ram, vram, options.depth);
        first[s] = lv;
    }
    status = uform_trainer_save(vram, path, NULL);
    row("save (VRAM)", status == UFORM_OK, status == UFORM_OK ? "" : uform_last_error());
    for (unsigned s = 3; s < 5; s++) step(vram, s, &first[s]);
    a = trainer_weights(vram, "blocks.1.mlp.up.weight", &n);

    uform_trainer_t *again = NULL;
    options.resume = path;
    status = uform_trainer_init_vram(gpu, &options, &again);
    row("resume (VRAM)", status == UFORM_OK, status == UFORM_OK ? "" : uform_last_error());
    bool same = again != NULL;
    for (unsigned s = 3; s < 5 && same; s++) same = step(again, s, &resumed[s]) && resumed[s] == first[s];
    b = again ? trainer_weights(again, "blocks.1.mlp.up.weight", &m) : NULL;
    same = same && a && b && n == m && memcmp(a, b, n * sizeof(float)) == 0;
    row("save, resume, 2 steps = 5 steps, bit for bit (VRAM)", same, "");
    free(a), free(b);

    /* CONTRASTIVE, JOINT, and JOINT with late interaction and choices: every
     * loss on the GPU (contrastive_loss.cu, late_interaction_loss.cu,
     * choices_loss.cu) */
    options.resume = NULL;
    uform_late_interaction_t late;
    memset(&late, 0, sizeof(late));
    late.width = 8;
    late.weight = 0.5f;
    uform_choices_t choices = {0.5f, 2};
    static const char *const labels[3] = {"CONTRASTIVE", "JOINT", "JOINT + late interaction + choices"};
    for (size_t o = 0; o < 3; o++) {
        options.objective = o ? UFORM_OBJECTIVE_JOINT : UFORM_OBJECTIVE_CONTRASTIVE;
        with_choices = o == 2;
        options.late_interaction = o == 2 ? &late : NULL;
        options.choices = o == 2 ? &choices : NULL;
        options.batch.max_choices_per_item = o == 2 ? 4 : 0;
        uform_trainer_t *r = NULL, *v = NULL;
        bool ok = uform_trainer_init_ram(cpu, &options, &r) == UFORM_OK &&
                  uform_trainer_init_vram(gpu, &options, &v) == UFORM_OK;
        double worst = 0;
        for (unsigned s = 0; s < 3 && ok; s++) {
            float lr = NAN, lv = NAN;
            ok = step(r, s, &lr) && step(v, s, &lv);
            worst = fmax(worst, fabs((double)lv - lr) / fmax(fabs((double)lr), 1e-30));
            if (ok && s == 0) compare_gradients(labels[o], r, v, options.depth);
        }
        char what[96], detail[96];
        snprintf(what, sizeof(what), "%s: 3 steps, losses VRAM against RAM", labels[o]);
        snprintf(detail, sizeof(detail), "largest relative difference %.1e (<= %.0e)", worst, LOSS_TOLERANCE);
        row(what, ok && worst <= LOSS_TOLERANCE, ok ? detail : uform_last_error());
        uform_trainer_free(v);
        uform_trainer_free(r);
    }

    /* text and audio items, MASKED: the audio rows on the GPU, their
     * reconstruction loss on the GPU too */
    if (uform_media_formats() & UFORM_MEDIA_AUDIO) {
        options.objective = UFORM_OBJECTIVE_MASKED;
        options.late_interaction = NULL;
        options.choices = NULL;
        options.batch.max_choices_per_item = 0;
        options.batch.audio = (uform_audio_shape_t){32, 16000};
        uform_trainer_t *r = NULL, *v = NULL;
        bool ok = uform_trainer_init_ram(cpu, &options, &r) == UFORM_OK &&
                  uform_trainer_init_vram(gpu, &options, &v) == UFORM_OK;
        double worst = 0;
        for (unsigned s = 0; s < 3 && ok; s++) {
            mixed_t items;
            mixed_make(&items, s);
            uform_trainer_batch_t batch = {.modalities = items.modalities, .contents = items.tape};
            uform_trainer_step_stats_t sr, sv;
            ok = uform_trainer_step(r, &batch, NULL, UFORM_SCALAR_F32, NULL, &sr) == UFORM_OK &&
                 uform_trainer_step(v, &batch, NULL, UFORM_SCALAR_F32, NULL, &sv) == UFORM_OK;
            if (ok) worst = fmax(worst, fabs((double)sv.loss - sr.loss) / fmax(fabs((double)sr.loss), 1e-30));
            if (ok && s == 0) compare_gradients("text + audio (MASKED)", r, v, options.depth);
        }
        char detail[96];
        snprintf(detail, sizeof(detail), "largest relative difference %.1e (<= %.0e)", worst, LOSS_TOLERANCE);
        row("text + audio (MASKED): 3 steps, losses VRAM against RAM", ok && worst <= LOSS_TOLERANCE,
            ok ? detail : uform_last_error());
        uform_trainer_free(v);
        uform_trainer_free(r);
    }

    uform_trainer_free(again);
    uform_trainer_free(vram);
    uform_trainer_free(ram);
    uform_executor_free(gpu);
    uform_executor_free(cpu);
    unlink(path);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
#endif
