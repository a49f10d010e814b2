/* fp8_accuracy.c: what FP8 products cost in accuracy (c/cuda/gemm_fp8.cu).
 *
 *     make bench-fp8-accuracy      # a random checkpoint of the benchmark shape: cosines
 *     make bench-fp8-recall        # make demo's trained model: held-out recall@1
 *
 * Encodes the same texts with one checkpoint three ways: a RAM model in BF16
 * (the reference), a RAM model in E4M3 (the weights quantized, BF16
 * activations: every CPU, and GPUs without FP8 tensor cores) and a VRAM model
 * in E4M3 (the weights and the activations in FP8: ADA and later). Built
 * against the CUDA emulation (the kernels as written, the product on the host
 * with FP32 sums), since no GPU has run the FP8 path yet: a GPU's tensor cores
 * accumulate differently, within 1e-3 of a product's largest output
 * (tests/gpu/test_cuda_ops.c), well inside what the activations' quantization
 * moves.
 *
 *     fp8_accuracy checkpoint              16 random texts: the lowest and mean cosine
 *     fp8_accuracy checkpoint pairs.txt    also recall@1 of each model: the file holds
 *                                          N queries, then their N documents, a line each
 *                                          (query i's document is document i)
 *
 * Slow at the benchmark shape: the emulation runs every block's threads as
 * fibers and the products as plain loops (tens of minutes at depth 12, hidden
 * 512, on two cores); seconds at make demo's depth 1, hidden 64. */
#include "uform.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEXTS 16
#define MAX_PAIRS 4096

static const float *embed(uform_model_t *model, const uform_tape_t *texts, uform_arena_t *arena, size_t *dimensions) {
    uform_encoded_t encoded;
    if (uform_text_encode(model, NULL, texts, arena, NULL, &encoded, NULL) != UFORM_OK) {
        fprintf(stderr, "text_encode: %s\n", uform_last_error());
        exit(1);
    }
    *dimensions = encoded.dimensions;
    return (const float *)encoded.embeddings;
}

static void compare(const char *what, const float *a, const float *b, size_t count, size_t width) {
    double lowest = 1, total = 0;
    for (size_t r = 0; r < count; r++) {
        double dot = 0, na = 0, nb = 0;
        for (size_t i = 0; i < width; i++) {
            double x = a[r * width + i], y = b[r * width + i];
            dot += x * y, na += x * x, nb += y * y;
        }
        double cosine = dot / sqrt(na * nb);
        lowest = cosine < lowest ? cosine : lowest;
        total += cosine;
    }
    printf("| %-44s | %.6f | %.6f |\n", what, lowest, total / (double)count);
}

/* The fraction of queries whose highest-scoring document (dot product of the
 * unit embeddings, FP32; the first of equal scores) is their own. */
static double recall_at_1(const float *queries, const float *documents, size_t n, size_t width) {
    size_t right = 0;
    for (size_t q = 0; q < n; q++) {
        size_t best = 0;
        float best_score = -INFINITY;
        for (size_t d = 0; d < n; d++) {
            float score = 0;
            for (size_t i = 0; i < width; i++) score += queries[q * width + i] * documents[d * width + i];
            if (score > best_score) best = d, best_score = score;
        }
        right += best == q;
    }
    return (double)right / (double)n;
}

/* Reads the pairs file into data/offsets: 2 n lines (n queries, n documents). */
static size_t read_pairs(const char *path, char **data, size_t *offsets) {
    FILE *file = fopen(path, "rb");
    if (!file) return fprintf(stderr, "%s: cannot open\n", path), exit(1), 0;
    fseek(file, 0, SEEK_END);
    long size = ftell(file);
    fseek(file, 0, SEEK_SET);
    *data = malloc((size_t)size + 1);
    if (!*data || fread(*data, 1, (size_t)size, file) != (size_t)size) return fprintf(stderr, "%s: unreadable\n", path), exit(1), 0;
    fclose(file);
    size_t lines = 0, at = 0;
    offsets[0] = 0;
    for (long i = 0; i < size; i++) {
        if ((*data)[i] != '\n') {
            (*data)[at++] = (*data)[i];
            continue;
        }
        if (lines + 1 >= 2 * MAX_PAIRS) return fprintf(stderr, "%s: over %d pairs\n", path, MAX_PAIRS), exit(1), 0;
        offsets[++lines] = at;
    }
    if (lines == 0 || lines % 2) return fprintf(stderr, "%s: %zu lines, not 2 n\n", path, lines), exit(1), 0;
    return lines / 2;
}

static void recall(uform_model_t *models[3], const char *path) {
    static size_t offsets[2 * MAX_PAIRS + 1], document_offsets[MAX_PAIRS + 1];
    char *data = NULL;
    size_t n = read_pairs(path, &data, offsets);
    for (size_t i = 0; i <= n; i++) document_offsets[i] = offsets[n + i] - offsets[n];
    uform_tape_t queries = {data, offsets[n], offsets, n};
    uform_tape_t documents = {data + offsets[n], document_offsets[n], document_offsets, n};
    static const char *names[3] = {"BF16 (RAM)", "E4M3 weights (RAM)", "E4M3 weights and FP8 activations (VRAM)"};
    printf("\n%s: %zu held-out queries, each against the %zu documents (chance %.4f)\n\n", path, n, n, 1.0 / (double)n);
    printf("| model | recall@1 |\n|---|---:|\n");
    for (int m = 0; m < 3; m++) {
        uform_arena_t *arenas[2];
        uform_arena_init_ram(&arenas[0]), uform_arena_init_ram(&arenas[1]);
        size_t d = 0;
        const float *q = embed(models[m], &queries, arenas[0], &d);
        const float *e = embed(models[m], &documents, arenas[1], &d);
        printf("| %s | %.3f |\n", names[m], recall_at_1(q, e, n, d));
        uform_arena_free(arenas[0]), uform_arena_free(arenas[1]);
    }
    free(data);
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: %s checkpoint.safetensors [pairs.txt]\n", argv[0]);
        return 2;
    }
    /* texts of 8 to 128 bytes, printable, from a fixed generator */
    char data[TEXTS * 128];
    size_t offsets[TEXTS + 1] = {0};
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (size_t t = 0; t < TEXTS; t++) {
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        size_t length = 8 + (size_t)(state % 121);
        for (size_t i = 0; i < length; i++) {
            state ^= state << 13, state ^= state >> 7, state ^= state << 17;
            data[offsets[t] + i] = (char)(32 + state % 95);
        }
        offsets[t + 1] = offsets[t] + length;
    }
    uform_tape_t texts = {data, offsets[TEXTS], offsets, TEXTS};
    uform_model_load_ram_options_t options;
    memset(&options, 0, sizeof(options));
    uform_model_t *bf16 = NULL, *e4m3 = NULL, *fp8 = NULL;
    options.quantization = UFORM_SCALAR_BF16;
    if (uform_model_load_ram(argv[1], &options, &bf16) != UFORM_OK) return fprintf(stderr, "%s\n", uform_last_error()), 1;
    options.quantization = UFORM_SCALAR_E4M3;
    if (uform_model_load_ram(argv[1], &options, &e4m3) != UFORM_OK) return fprintf(stderr, "%s\n", uform_last_error()), 1;
    if (uform_model_load_vram(argv[1], NULL, 0, UFORM_GPU_CLASS_NONE, NULL, UFORM_SCALAR_E4M3, NULL, &fp8) != UFORM_OK)
        return fprintf(stderr, "%s\n", uform_last_error()), 1;
    uform_model_description_t described;
    uform_model_describe(bf16, &described);
    uform_arena_t *arenas[3];
    for (int i = 0; i < 3; i++) uform_arena_init_ram(&arenas[i]);
    size_t d = 0;
    const float *reference = embed(bf16, &texts, arenas[0], &d);
    const float *weights_only = embed(e4m3, &texts, arenas[1], &d);
    const float *both = embed(fp8, &texts, arenas[2], &d);
    printf("# %s: depth %zu, hidden %zu, %zu dimensions; %d texts of 8-128 bytes (CUDA emulated)\n\n", argv[1],
           described.depth, described.hidden, described.dimensions, TEXTS);
    printf("| embeddings against | lowest cosine | mean cosine |\n|---|---:|---:|\n");
    compare("E4M3 weights (RAM) vs BF16", reference, weights_only, TEXTS, d);
    compare("E4M3 weights and FP8 activations (VRAM) vs BF16", reference, both, TEXTS, d);
    compare("E4M3 weights and FP8 activations vs E4M3 RAM", weights_only, both, TEXTS, d);
    for (int i = 0; i < 3; i++) uform_arena_free(arenas[i]);
    if (argc == 3) {
        uform_model_t *models[3] = {bf16, e4m3, fp8};
        recall(models, argv[2]);
    }
    uform_model_free(bf16), uform_model_free(e4m3), uform_model_free(fp8);
    return 0;
}
