/* test_vram_model.c: a VRAM model against the same checkpoint in RAM, every
 * encode verb that takes memory (text, pixels, samples), both output kinds,
 * every output scalar; the loads' options and refusals. Prints one table row
 * per check and "N passed, M failed"; without a GPU (or without the CUDA
 * backend) it says why and exits 0 (make test-gpu).
 *
 * text_choose's probabilities too (their tolerance is beside the check).
 *
 * The RAM side runs the SERIAL class: FP32 activations times BF16 weights,
 * FP32 sums. The VRAM side rounds activations to BF16 before each product,
 * and q, k, v and the probabilities in attention (relative error 2^-9 each),
 * sums in FP32 in cuBLASLt's order, and uses expf and tanhf where the CPU uses
 * fast_exp. Through 2 blocks of 6 rounded products at
 * hidden 64 and a final L2 normalisation, components of unit vectors differ by
 * at most a few times 2^-9 x sqrt(depth x products) ~ 1e-2 in the worst case
 * over random weights of scale 0.3; the test allows 3e-2 per component and asks
 * a cosine of at least 0.999 between the two embeddings of every item. The
 * narrow scalars are the FP32 rows converted by the same functions on both
 * sides (core/output_scalars.h: on the GPU for a VRAM model, c/cuda/
 * convert_rows.cu), so a VRAM model's BF16, I8 or B1 rows must equal the
 * host's conversion of its own FP32 rows exactly. */
#include "check.h"
#include "small_checkpoint.h"

#include "backend/cpu/rows.h"
#include "backend/cpu/sgemm.h"

#ifndef UFORM_HAVE_CUDA
int main(void) {
    printf("skip test_vram_model: this build has no CUDA backend\n");
    return 0;
}
#else

#define COMPONENT_TOLERANCE 3e-2
#define COSINE_FLOOR 0.999
/* E4M3 on a GPU with FP8 tensor cores (ADA and later; the emulation is
 * HOPPER) multiplies FP8 activations too (c/cuda/gemm_fp8.cu): each
 * activation keeps 3 mantissa bits (within 2^-4 of itself, 2^-6 on average),
 * against the CPU E4M3 model's BF16 activations (8 bits). Measured under the
 * emulation on this file's checkpoint: lowest cosine 0.9983, largest
 * difference 3.05e-2; the bounds leave room for a GPU's accumulation. */
#define FP8_COMPONENT_TOLERANCE 6e-2
#define FP8_COSINE_FLOOR 0.995

static void row(const char *what, bool ok, const char *detail) {
    printf("| %-48s | %-4s | %s\n", what, ok ? "ok" : "FAIL", detail);
    CHECK(ok, "%s: %s", what, detail);
}

/* F32 rows a (RAM) and b (VRAM) of `width`, `rows` of them, within the bounds given. */
static void compare_rows_within(const char *what, const float *a, const float *b, size_t rows, size_t width,
                                double component_tolerance, double cosine_floor) {
    double worst = 0, lowest_cosine = 1;
    for (size_t r = 0; r < rows; r++) {
        double dot = 0, na = 0, nb = 0;
        for (size_t i = 0; i < width; i++) {
            double x = a[r * width + i], y = b[r * width + i];
            if (fabs(x - y) > worst || x != x || y != y) worst = x == x && y == y ? fabs(x - y) : INFINITY;
            dot += x * y, na += x * x, nb += y * y;
        }
        double cosine = na > 0 && nb > 0 ? dot / sqrt(na * nb) : (na == nb ? 1.0 : 0.0);
        if (cosine < lowest_cosine) lowest_cosine = cosine;
    }
    char detail[160];
    snprintf(detail, sizeof(detail), "largest difference %.2e (<= %.0e), lowest cosine %.6f (>= %.3f)", worst,
             component_tolerance, lowest_cosine, cosine_floor);
    row(what, worst <= component_tolerance && lowest_cosine >= cosine_floor, detail);
}

static void compare_rows(const char *what, const float *a, const float *b, size_t rows, size_t width) {
    compare_rows_within(what, a, b, rows, width, COMPONENT_TOLERANCE, COSINE_FLOOR);
}

int main(void) {
    uform_capabilities_t capabilities;
    if (uform_capabilities(&capabilities) != UFORM_OK || !capabilities.gpu_backend_built) {
        printf("skip test_vram_model: this build has no CUDA backend\n");
        return 0;
    }
    if (capabilities.gpus == 0) {
        printf("skip test_vram_model: no GPU found\n");
        return 0;
    }
    const char *path = write_small_checkpoint();
    if (!path) {
        printf("FAIL writing the checkpoint: %s\n", uform_last_error());
        return 1;
    }
    uform_model_load_ram_options_t ram_options = {0};
    ram_options.cpu_class = UFORM_CPU_CLASS_SERIAL;
    uform_model_t *ram = NULL, *vram = NULL;
    uform_status_t status = uform_model_load_ram(path, &ram_options, &ram);
    row("load_ram (SERIAL)", status == UFORM_OK, uform_last_error());
    status = uform_model_load_vram(path, NULL, 0, UFORM_GPU_CLASS_NONE, NULL, UFORM_SCALAR_BF16, NULL, &vram);
    row("load_vram (GPU 0, its own executor)", status == UFORM_OK, status == UFORM_OK ? "" : uform_last_error());
    if (!ram || !vram) {
        printf("%d passed, %d failed\n", passed, failed);
        return 1;
    }
    uform_model_description_t described;
    uform_model_describe(vram, &described);
    row("describe: gpu_class set, cpu_class AUTO (None)",
        described.gpu_class != UFORM_GPU_CLASS_NONE && described.cpu_class == UFORM_CPU_CLASS_AUTO &&
            described.memory_usage > 0,
        "");

    uform_arena_t *arena_ram = NULL, *arena_vram = NULL;
    uform_arena_init_ram(&arena_ram);
    uform_arena_init_ram(&arena_vram);
    for (verb_t verb = TEXT; verb <= AUDIO; verb++) {
        uform_encode_options_t options = {0};
        options.outputs = UFORM_OUTPUTS_EMBEDDINGS | UFORM_OUTPUTS_TOKENS;
        options.outputs_scalar = UFORM_SCALAR_F32;
        uform_encoded_t a, b;
        uform_status_t ra = run_verb(verb, ram, arena_ram, &options, &a);
        uform_status_t rb = run_verb(verb, vram, arena_vram, &options, &b);
        char what[96];
        snprintf(what, sizeof(what), "%s runs", verb_names[verb]);
        row(what, ra == UFORM_OK && rb == UFORM_OK, rb == UFORM_OK ? "" : uform_last_error());
        if (ra != UFORM_OK || rb != UFORM_OK) continue;
        snprintf(what, sizeof(what), "%s embeddings", verb_names[verb]);
        compare_rows(what, a.embeddings, b.embeddings, a.count, a.dimensions);
        snprintf(what, sizeof(what), "%s token rows", verb_names[verb]);
        bool same_layout = a.token_offsets[a.count] == b.token_offsets[b.count];
        row(what, same_layout, same_layout ? "same token offsets" : "token offsets differ");
        if (same_layout) compare_rows(what, a.tokens, b.tokens, a.token_offsets[a.count], a.token_width);

        /* the narrow scalars: exactly the host's conversion of the VRAM model's own F32 rows */
        outputs_t f32 = outputs_take(&b);
        static const uform_scalar_t scalars[] = {UFORM_SCALAR_BF16, UFORM_SCALAR_F16, UFORM_SCALAR_E4M3,
                                                 UFORM_SCALAR_E5M2, UFORM_SCALAR_I8, UFORM_SCALAR_B1};
        for (size_t s = 0; s < sizeof(scalars) / sizeof(scalars[0]); s++) {
            options.outputs_scalar = scalars[s];
            uform_encoded_t narrow;
            bool ok = run_verb(verb, vram, arena_vram, &options, &narrow) == UFORM_OK;
            if (ok) {
                size_t bytes = narrow.count * narrow.embedding_row_bytes;
                uint8_t *expected = malloc(bytes + 1);
                uform_cpu_download_rows(NULL, (const float *)f32.embeddings, narrow.count, narrow.dimensions,
                                        scalars[s], expected, narrow.embedding_row_bytes);
                ok = memcmp(expected, narrow.embeddings, bytes) == 0;
                free(expected);
            }
            snprintf(what, sizeof(what), "%s embeddings as scalar %d", verb_names[verb], (int)scalars[s]);
            row(what, ok, ok ? "the F32 rows converted" : uform_last_error());
        }
        outputs_free(&f32);
    }

    /* text_choose: probabilities of choices, VRAM against RAM. The MASK row's
     * state carries the products' BF16 rounding (above); a logit is a dot of
     * 64 terms of |h| ~ 1 and |table| < 0.5, so it moves by at most ~0.05 and a
     * probability by a quarter of that: 3e-2 absolute. */
    static const char texts_data[] = "pick one:yes or no? the quick brown fox";
    static const size_t texts_offsets[] = {0, 9, 19, 39};
    static const char choices_data[] = "abynxyz";
    static const size_t choices_offsets[] = {0, 2, 4, 7};
    static const uint32_t groups[] = {1, 0, 1};
    uform_tape_t texts = {texts_data, sizeof(texts_data) - 1, texts_offsets, 3};
    uform_tape_t choices = {choices_data, 7, choices_offsets, 3};
    uform_choose_options_t choose = {0};
    choose.temperature_groups = groups;
    uform_chosen_t ca, cb;
    uform_status_t sa = uform_text_choose(ram, NULL, &texts, &choices, arena_ram, &choose, &ca, NULL);
    uform_status_t sb = uform_text_choose(vram, NULL, &texts, &choices, arena_vram, &choose, &cb, NULL);
    row("text_choose runs", sa == UFORM_OK && sb == UFORM_OK, sb == UFORM_OK ? "" : uform_last_error());
    if (sa == UFORM_OK && sb == UFORM_OK) {
        double worst = 0, sum_error = 0;
        for (size_t c = 0; c < 3; c++) {
            double sum = 0;
            for (size_t i = cb.offsets[c]; i < cb.offsets[c + 1]; i++) sum += cb.probabilities[i];
            sum_error = fmax(sum_error, fabs(sum - 1.0));
        }
        for (size_t i = 0; i < 7; i++) worst = fmax(worst, fabs((double)ca.probabilities[i] - cb.probabilities[i]));
        char detail[128];
        snprintf(detail, sizeof(detail), "largest difference %.2e (<= 3e-2), sums off 1 by %.1e", worst, sum_error);
        row("text_choose probabilities", worst <= 3e-2 && sum_error <= 1e-5 && cb.offsets[3] == 7, detail);
    }

    /* loads: a class above the GPU's, a device listed twice, E4M3, a RAM executor */
    uform_model_t *other = NULL;
    if (described.gpu_class < UFORM_GPU_CLASS_BLACKWELL) {
        status = uform_model_load_vram(path, NULL, 0, UFORM_GPU_CLASS_BLACKWELL, NULL, UFORM_SCALAR_BF16, NULL,
                                       &other);
        row("gpu_class above the GPU's: UNSUPPORTED", status == UFORM_UNSUPPORTED && !other, uform_last_error());
    }
    uint32_t two[] = {0, 0};
    status = uform_model_load_vram(path, two, 2, UFORM_GPU_CLASS_NONE, NULL, UFORM_SCALAR_BF16, NULL, &other);
    row("a device listed twice: INVALID_ARGUMENT", status == UFORM_INVALID_ARGUMENT && !other, uform_last_error());
    /* E4M3: the same codes and scales as a RAM load (both quantize on the
     * host), less device memory than BF16, and every verb's embeddings
     * against the RAM E4M3 model: within the tolerances above on AMPERE (the
     * weights are the same numbers on both sides, decoded to BF16; what
     * differs is what differs for BF16), within the FP8 ones from ADA on */
    uform_model_t *ram8 = NULL, *vram8 = NULL;
    ram_options.quantization = UFORM_SCALAR_E4M3;
    status = uform_model_load_ram(path, &ram_options, &ram8);
    if (status == UFORM_OK)
        status = uform_model_load_vram(path, NULL, 0, UFORM_GPU_CLASS_NONE, NULL, UFORM_SCALAR_E4M3, NULL, &vram8);
    row("load_vram E4M3", status == UFORM_OK, status == UFORM_OK ? "" : uform_last_error());
    if (ram8 && vram8) {
        uform_model_description_t d8;
        uform_model_describe(vram8, &d8);
        char detail[128];
        snprintf(detail, sizeof(detail), "%zu bytes, %.0f%% of BF16's %zu", d8.memory_usage,
                 100.0 * (double)d8.memory_usage / (double)described.memory_usage, described.memory_usage);
        row("describe E4M3: quantization E4M3, less memory than BF16",
            d8.quantization == UFORM_SCALAR_E4M3 && d8.memory_usage < described.memory_usage, detail);
        size_t rows8 = 0, cols8 = 0, rows_ram = 0, cols_ram = 0;
        const char *matrix = "blocks.1.mlp.down.weight";
        bool same = uform_model_quantized_matrix(vram8, matrix, &rows8, &cols8, NULL, NULL) == UFORM_OK &&
                    uform_model_quantized_matrix(ram8, matrix, &rows_ram, &cols_ram, NULL, NULL) == UFORM_OK &&
                    rows8 == rows_ram && cols8 == cols_ram;
        if (same) {
            uint8_t *codes_vram = malloc(rows8 * cols8), *codes_ram = malloc(rows8 * cols8);
            float *scales_vram = malloc(rows8 * sizeof(float)), *scales_ram = malloc(rows8 * sizeof(float));
            same = uform_model_quantized_matrix(vram8, matrix, &rows8, &cols8, codes_vram, scales_vram) == UFORM_OK &&
                   uform_model_quantized_matrix(ram8, matrix, &rows8, &cols8, codes_ram, scales_ram) == UFORM_OK &&
                   memcmp(codes_vram, codes_ram, rows8 * cols8) == 0 &&
                   memcmp(scales_vram, scales_ram, rows8 * sizeof(float)) == 0;
            free(codes_vram), free(codes_ram), free(scales_vram), free(scales_ram);
        }
        row("E4M3 codes and scales: VRAM = RAM, byte for byte", same, same ? matrix : uform_last_error());
        for (verb_t verb = TEXT; verb <= AUDIO; verb++) {
            uform_encode_options_t options = {0};
            options.outputs = UFORM_OUTPUTS_EMBEDDINGS | UFORM_OUTPUTS_TOKENS;
            uform_encoded_t a, b;
            uform_status_t ra = run_verb(verb, ram8, arena_ram, &options, &a);
            uform_status_t rb = run_verb(verb, vram8, arena_vram, &options, &b);
            char what[96];
            bool fp8 = d8.gpu_class >= UFORM_GPU_CLASS_ADA;
            snprintf(what, sizeof(what), "E4M3 %s embeddings%s", verb_names[verb], fp8 ? " (FP8 products)" : "");
            if (ra == UFORM_OK && rb == UFORM_OK)
                compare_rows_within(what, a.embeddings, b.embeddings, a.count, a.dimensions,
                                    fp8 ? FP8_COMPONENT_TOLERANCE : COMPONENT_TOLERANCE,
                                    fp8 ? FP8_COSINE_FLOOR : COSINE_FLOOR);
            else
                row(what, false, uform_last_error());
        }
    }
    uform_model_free(ram8);
    uform_model_free(vram8);
    uform_executor_t *cpu = NULL, *gpu = NULL;
    uform_executor_for_ram(1, NULL, 0, &cpu);
    status = uform_model_load_vram(path, NULL, 0, UFORM_GPU_CLASS_NONE, cpu, UFORM_SCALAR_BF16, NULL, &other);
    row("a RAM executor: INVALID_ARGUMENT", status == UFORM_INVALID_ARGUMENT && !other, uform_last_error());
    status = uform_executor_for_vram(NULL, 0, &gpu);
    row("Executor.for_vram (every GPU)", status == UFORM_OK, uform_last_error());
    if (gpu) {
        uint32_t first = 0;
        status = uform_model_load_vram(path, &first, 1, UFORM_GPU_CLASS_NONE, gpu, UFORM_SCALAR_BF16, NULL, &other);
        row("load_vram on a given VRAM executor", status == UFORM_OK, uform_last_error());
        uform_encoded_t a, b;
        bool same = other && run_verb(TEXT, vram, arena_ram, NULL, &a) == UFORM_OK &&
                    run_verb(TEXT, other, arena_vram, NULL, &b) == UFORM_OK &&
                    memcmp(a.embeddings, b.embeddings, a.count * a.embedding_row_bytes) == 0;
        row("two VRAM loads give the same bits", same, "");
        uform_model_free(other);
        other = NULL;
        /* devices None on an executor of every GPU: a copy on each */
        status = uform_model_load_vram(path, NULL, 0, UFORM_GPU_CLASS_NONE, gpu, UFORM_SCALAR_BF16, NULL, &other);
        uform_model_description_t on_every;
        bool every = status == UFORM_OK && uform_model_describe(other, &on_every) == UFORM_OK &&
                     on_every.memory_usage == capabilities.gpus * described.memory_usage;
        row("load_vram on every GPU's executor, devices None: a copy on each", every,
            status == UFORM_OK ? "" : uform_last_error());
        uform_model_free(other);
        /* late_interaction_scores with a VRAM executor runs on its first GPU
         * (c/cuda/maxsim.cu, checked in test_cuda_ops): the CPU's bits where
         * the CPU's products are fused multiply-adds, within 1e-5 elsewhere */
        float token_rows[24 * 16], on_gpu[3 * 4], on_cpu[3 * 4];
        for (size_t i = 0; i < 24 * 16; i++) token_rows[i] = (float)((i * 7919) % 61) / 61.0f - 0.5f;
        static const size_t query_offsets[4] = {0, 5, 5, 9}, document_offsets[5] = {9, 12, 20, 21, 24};
        uform_token_rows_t queries = {token_rows, query_offsets, 3, 16, 16 * sizeof(float), UFORM_SCALAR_F32};
        uform_token_rows_t documents = {token_rows, document_offsets, 4, 16, 16 * sizeof(float), UFORM_SCALAR_F32};
        status = uform_late_interaction_scores(gpu, &queries, &documents, on_gpu);
        bool scored = status == UFORM_OK && uform_late_interaction_scores(cpu, &queries, &documents, on_cpu) == UFORM_OK;
        bool fused = uform_sgemm_best_path() != UFORM_SGEMM_PORTABLE;
        for (size_t i = 0; scored && i < 12; i++)
            scored = fused ? on_gpu[i] == on_cpu[i] : fabsf(on_gpu[i] - on_cpu[i]) <= 1e-5f;
        row("late_interaction_scores on a VRAM executor: the CPU's scores", scored,
            status == UFORM_OK ? "" : uform_last_error());
        uform_executor_free(gpu);
    }
    uform_executor_free(cpu);

    /* A copy on each of two GPUs, the verbs' batches spread over both
     * (encode_batches.c: lanes): every verb against RAM within the
     * tolerances above, text_choose, and a call of many texts against one
     * GPU's. */
    if (capabilities.gpus < 2) {
        printf("skip load_vram on two GPUs: %zu visible\n", capabilities.gpus);
    } else {
        uint32_t pair[] = {0, 1};
        uform_model_t *both = NULL;
        status = uform_model_load_vram(path, pair, 2, UFORM_GPU_CLASS_NONE, NULL, UFORM_SCALAR_BF16, NULL, &both);
        row("load_vram on GPUs 0 and 1", status == UFORM_OK, status == UFORM_OK ? "" : uform_last_error());
        uform_model_description_t d2;
        if (both && uform_model_describe(both, &d2) == UFORM_OK) {
            char detail[96];
            snprintf(detail, sizeof(detail), "%zu bytes, one GPU's %zu", d2.memory_usage, described.memory_usage);
            row("describe on two GPUs: both copies' bytes, the same class",
                d2.memory_usage == 2 * described.memory_usage && d2.gpu_class == described.gpu_class, detail);
        }
        for (verb_t verb = TEXT; both && verb <= AUDIO; verb++) {
            uform_encode_options_t options = {0};
            options.outputs = UFORM_OUTPUTS_EMBEDDINGS | UFORM_OUTPUTS_TOKENS;
            uform_encoded_t a, b;
            uform_status_t ra = run_verb(verb, ram, arena_ram, &options, &a);
            uform_status_t rb = run_verb(verb, both, arena_vram, &options, &b);
            char what[96];
            snprintf(what, sizeof(what), "two GPUs: %s embeddings", verb_names[verb]);
            if (ra != UFORM_OK || rb != UFORM_OK) {
                row(what, false, uform_last_error());
                continue;
            }
            compare_rows(what, a.embeddings, b.embeddings, a.count, a.dimensions);
            snprintf(what, sizeof(what), "two GPUs: %s token rows", verb_names[verb]);
            if (a.token_offsets[a.count] == b.token_offsets[b.count])
                compare_rows(what, a.tokens, b.tokens, a.token_offsets[a.count], a.token_width);
            else
                row(what, false, "token offsets differ");
        }
        /* text_choose: the three texts split between the GPUs, against RAM (3e-2, above) */
        uform_chosen_t c2;
        sa = uform_text_choose(ram, NULL, &texts, &choices, arena_ram, &choose, &ca, NULL);
        sb = both ? uform_text_choose(both, NULL, &texts, &choices, arena_vram, &choose, &c2, NULL) : UFORM_DEVICE;
        if (sa == UFORM_OK && sb == UFORM_OK) {
            double worst = 0;
            for (size_t i = 0; i < 7; i++) worst = fmax(worst, fabs((double)ca.probabilities[i] - c2.probabilities[i]));
            char detail[96];
            snprintf(detail, sizeof(detail), "largest difference %.2e (<= 3e-2)", worst);
            row("two GPUs: text_choose probabilities", worst <= 3e-2 && c2.offsets[3] == 7, detail);
        } else {
            row("two GPUs: text_choose probabilities", false, uform_last_error());
        }
        /* 48 texts of 0 to 40 bytes: a batch on each GPU */
        size_t count = 48;
        char *data = malloc(count * 40);
        size_t *offsets = malloc((count + 1) * sizeof(size_t));
        offsets[0] = 0;
        for (size_t i = 0; i < count; i++) {
            size_t length = (i * 7919) % 41;
            for (size_t t = 0; t < length; t++) data[offsets[i] + t] = (char)('a' + (i + t * 3) % 26);
            offsets[i + 1] = offsets[i] + length;
        }
        uform_tape_t texts = {data, offsets[count], offsets, count};
        uform_encoded_t a, b;
        bool ran = both && uform_text_encode(vram, NULL, &texts, arena_ram, NULL, &a, NULL) == UFORM_OK &&
                   uform_text_encode(both, NULL, &texts, arena_vram, NULL, &b, NULL) == UFORM_OK;
        if (ran)
            compare_rows("two GPUs: 48 texts against one GPU", a.embeddings, b.embeddings, count, a.dimensions);
        else
            row("two GPUs: 48 texts against one GPU", false, uform_last_error());
        free(data);
        free(offsets);
        uform_model_free(both);
    }

    uform_arena_free(arena_ram);
    uform_arena_free(arena_vram);
    uform_model_free(ram);
    uform_model_free(vram);
    unlink(path);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
#endif
